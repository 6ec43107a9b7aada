"""Bad input by family (corpus, ARPA, run directory, arguments, stdin, special files, full disk):
every refusal is one line with exit 2 and no traceback, and leaves the named files as they were.
Commands run in this process through `nnlm.cli.main` (no interpreter start-up per case)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import fill_disk, nnlm_cli

from nnlm.cli import main


@pytest.fixture
def nnlm(capsys, monkeypatch):
    """`nnlm ARGS` in this process: (exit code, stdout, stderr); `stdin` bytes are its standard input."""
    def call(*args: object, stdin: bytes = b"") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        return nnlm_cli(capsys, *args)
    return call


def refused(result: tuple[int, str, str], fragment: str) -> None:
    code, _, err = result
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and fragment in lines[0], (code, err)


def snapshot(path: Path) -> object:
    """Type, mode and bytes of a path (recursively; symlinks not followed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", tuple((p.name, snapshot(p)) for p in sorted(path.iterdir())))
    if stat.S_ISREG(st.st_mode):
        return ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(path.read_bytes()).hexdigest())
    return ("special", stat.S_IFMT(st.st_mode), st.st_rdev)


@contextmanager
def unchanged(*paths: Path) -> Iterator[None]:
    before = [snapshot(Path(p)) for p in paths]
    yield
    assert [snapshot(Path(p)) for p in paths] == before, "a refused command changed a file it did not own"


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> dict[str, Path]:
    """A text corpus, a saved KN trigram, its ARPA file, and a tiny neural run (1 epoch)."""
    from conftest import random_corpus_texts, write_text_corpus

    from nnlm.neural.run.train import train

    root = tmp_path_factory.mktemp("robust")
    corpus = write_text_corpus(root / "rand", *random_corpus_texts())
    assert main(["ngram", "--corpus", str(corpus), "--kind", "kn", "--order", "3", "--save", str(root / "kn3"),
                 "--arpa", str(root / "kn3.arpa")]) == 0
    train(root / "run", {"corpus": str(corpus), "preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16,
                         "threads": 1, "epochs": 1}, progress=False, log=lambda s: None)
    (root / "text.txt").write_text("w1 w2 w3\nw4 w5\n")
    return {"corpus": corpus, "kn": root / "kn3", "arpa": root / "kn3.arpa", "run": root / "run",
            "text": root / "text.txt"}


@pytest.fixture
def run_copy(fixtures, tmp_path) -> Path:
    return Path(shutil.copytree(fixtures["run"], tmp_path / "run"))


# ---- corpus ---------------------------------------------------------------------------------

@pytest.mark.parametrize("damage, fragment", [
    (lambda f: f.write_bytes(b"w1 \x00 w2\n"), "binary"),
    (lambda f: (f.unlink(), os.mkfifo(f)), "has no train.txt"),
    (lambda f: (f.unlink(), os.symlink("/dev/zero", f)), "has no train.txt"),
    (lambda f: (f.unlink(), os.symlink("/proc/self/mem", f)), "corpus file"),
    (lambda f: f.write_text(" \n\t\n"), "holds no tokens"),
])
def test_corpus_files_that_are_no_text_are_refused(fixtures, tmp_path, nnlm, damage, fragment):
    corpus = Path(shutil.copytree(fixtures["corpus"], tmp_path / "c"))
    damage(corpus / "train.txt")
    refused(nnlm("stats", "--corpus", corpus, "--no-cache"), fragment)


# ---- ARPA -----------------------------------------------------------------------------------

def _edit_first(text: str, column: int, value: str, lines_with_fields: int = 3) -> str:
    lines = text.split("\n")
    i = next(i for i, line in enumerate(lines) if line.count("\t") == lines_with_fields - 1)
    parts = lines[i].split("\t")
    parts[column] = value
    lines[i] = "\t".join(parts)
    return "\n".join(lines)


@pytest.mark.parametrize("column, value, fragment", [
    (0, "-1e999", "must be a log10 value <= 0"), (0, "-1e308", "must be a log10 value <= 0"),
    (0, "-inf", "is not a number"), (0, "١", "is not a number"), (0, "-0.5_0", "is not a number"),
    (2, "100", "must be a finite number in"), (2, "nan", "is not a number"), (2, "١٢", "is not a number"),
])
def test_arpa_values_out_of_range_are_refused(fixtures, tmp_path, nnlm, column, value, fragment):
    bad = tmp_path / "bad.arpa"
    bad.write_text(_edit_first(fixtures["arpa"].read_text(), column, value))
    with unchanged(bad):
        refused(nnlm("ngram", "--corpus", fixtures["corpus"], "--load-arpa", bad), fragment)


@pytest.mark.parametrize("rewrite, fragment", [
    (lambda p, w, b: ["0", w] + ([b] if b is not None else []), "sum to"),      # every probability 1
    (lambda p, w, b: [p, w] + (["9"] if b is not None else []), "more than 1"),  # back-offs lift P above 1
])
def test_arpa_files_that_are_no_distribution_are_refused(fixtures, tmp_path, nnlm, rewrite, fragment):
    out = []
    for line in fixtures["arpa"].read_text().split("\n"):
        parts = line.split("\t")
        out.append("\t".join(rewrite(parts[0], parts[1], parts[2] if len(parts) == 3 else None))
                   if len(parts) >= 2 and parts[0] != "-99" else line)  # markers (<s>, </s>) stay "never"
    bad = tmp_path / "bad.arpa"
    bad.write_text("\n".join(out))
    refused(nnlm("ngram", "--corpus", fixtures["corpus"], "--load-arpa", bad), fragment)


# ---- run directory --------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, fragment", [
    ("max_vocab", "x", "max_vocab = 'x'"), ("recipe", None, "recipe = None"), ("batch_size", "x", "batch_size"),
    ("seed", -1, "seed = -1"), ("model", [], "model = []"), ("lr", float("inf"), "lr = inf"),
])
def test_hand_edited_run_json_is_one_line(run_copy, nnlm, key, value, fragment):
    data = json.loads((run_copy / "run.json").read_text())
    data[key] = value
    (run_copy / "run.json").write_text(json.dumps(data))
    with unchanged(run_copy):
        refused(nnlm("eval", run_copy), fragment)


def test_weights_that_are_not_finite_are_refused_though_their_checksum_holds(run_copy, nnlm):
    from nnlm.neural.run.checkpoint import load_tensors, save_tensors

    tensors, meta = load_tensors(run_copy / "model.safetensors")
    tensors["C"][0, 0] = float("nan")
    save_tensors(run_copy / "model.safetensors", tensors, {k: v for k, v in meta.items() if k != "sha256"})
    for argv in (("eval", run_copy), ("generate", run_copy, "--tokens", "3")):
        refused(nnlm(*argv), "NaN or infinite values")


@pytest.mark.parametrize("damage, fragment", [
    (lambda s: (s.unlink(), os.symlink("state.json", s)), "Too many levels of symbolic links"),
    (lambda s: s.write_text(json.dumps(json.loads(s.read_text()) | {"tensors": None})), "tensors = None"),
    (lambda s: s.unlink(), "but no state.json"),
    (lambda s: (s.unlink(), os.mkfifo(s)), "named pipe"),
    (lambda s: s.write_text(json.dumps(json.loads(s.read_text()) | {"history": None})), "history = None"),
])
def test_resume_from_a_damaged_state_refuses_and_keeps_the_best_model(run_copy, nnlm, damage, fragment):
    damage(run_copy / "state.json")
    with unchanged(run_copy / "model.safetensors", run_copy / "run.json"):
        refused(nnlm("train", "--resume", "--out", run_copy, "--epochs", "3", "--no-progress", "--threads", "1"),
                fragment)


def test_resume_removes_the_temp_files_a_kill_left(run_copy, nnlm):
    from nnlm.io import mark_written

    stale = run_copy / ".model.safetensors.k1ll3d.tmp"
    stale.write_bytes(b"half a file")
    mark_written(stale)  # as nnlm marks its temporaries when it makes them
    users = run_copy / ".notes.tmp"  # no mark: not nnlm's, kept
    users.write_text("mine")
    code, out, err = nnlm("train", "--resume", "--out", run_copy, "--epochs", "1", "--no-progress")
    assert code == 0 and "1 epoch done already" in out, err
    assert not stale.exists() and users.read_text() == "mine"


# ---- arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, fragment", [
    (("generate", "{kn}", "--temperature", "nan"), "argument --temperature: expected a finite number"),
    (("generate", "{kn}", "--seed", "-1"), "argument --seed: must be an integer in [0, "),
    (("generate", "{kn}", "--tokens", "١٠"), "argument --tokens: expected an integer"),
    (("train", "--out", "{tmp}/x", "--lr", "-1"), "argument --lr: must be a finite number in (0, 10], got -1"),
    (("train", "--out", "{tmp}/x", "--seed", "-1"), "argument --seed"),
    (("train", "--out", "{tmp}/x", "--workers", "1000000"), "--workers: must be an integer in [1, 256], got 1000000"),
    (("reproduce", "--out", "{tmp}/x", "--budget-minutes", "nan"), "argument --budget-minutes"),
    (("ngram", "--order", "1000000000"), "argument --order: must be an integer in [1, 6]"),
    (("next", "{kn}", "w1", "-k", "0"), "argument -k: must be an integer >= 1, got 0"),
    (("eval", "{kn}", "--threads", "inf"), "argument --threads: expected an integer"),
])
def test_numeric_options_are_checked_when_parsed(fixtures, tmp_path, nnlm, argv, fragment):
    argv = [a.replace("{kn}", str(fixtures["kn"])).replace("{tmp}", str(tmp_path)) for a in argv]
    with unchanged(tmp_path):
        refused(nnlm(*argv), fragment)


def test_a_tiny_temperature_is_greedy_not_a_crash(fixtures, nnlm):
    base = ("generate", fixtures["run"], "--tokens", "20", "--prompt", "w1")
    code, out, err = nnlm(*base, "--temperature", "5e-324")
    again = nnlm(*base, "--temperature", "1e-9", "--seed", "9")
    assert code == 0 and err == "" and out == again[1]  # greedy: the seed no longer matters


def test_unexpected_errors_are_one_line_with_the_trace_in_a_log(fixtures, nnlm, monkeypatch, tmp_path):
    import nnlm.use as use

    def broken(*a, **k):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(use, "next_words", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code, _, err = nnlm("next", fixtures["kn"], "w1")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "internal error: ZeroDivisionError: a bug" in err
    (log,) = tmp_path.glob("nnlm-crash-*.log")
    assert "Traceback" in log.read_text() and "a bug" in log.read_text()
    monkeypatch.setenv("NNLM_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        nnlm("next", fixtures["kn"], "w1")


# ---- stdin ----------------------------------------------------------------------------------

@pytest.mark.parametrize("data, fragment", [
    (b"", "standard input has no line to score"), (b"\x00" * 64, "binary"),
    (b"\n\n", "no line to score (2 blank lines skipped)"),
])
def test_bad_standard_input_is_one_line(fixtures, nnlm, data, fragment):
    refused(nnlm("score", fixtures["kn"], "-", stdin=data), fragment)


# ---- special files --------------------------------------------------------------------------

@pytest.mark.parametrize("make, fragment", [
    (lambda p: os.mkfifo(p), "named pipe (FIFO), not a regular file"),
    (lambda p: os.symlink("/dev/zero", p), "character device, not a regular file"),
    (lambda p: os.symlink("/proc/self/mem", p), "Input/output error"),
    (lambda p: p.mkdir(), "directory, not a regular file"),
])
def test_special_files_as_arpa_input_are_refused_without_blocking(fixtures, tmp_path, nnlm, make, fragment):
    make(tmp_path / "x.arpa")
    refused(nnlm("ngram", "--corpus", fixtures["corpus"], "--load-arpa", tmp_path / "x.arpa"), fragment)


@pytest.mark.parametrize("member", ["run.json", "vocab.json"])
def test_a_fifo_inside_a_run_directory_is_refused(run_copy, nnlm, member):
    (run_copy / member).unlink()
    os.mkfifo(run_copy / member)
    refused(nnlm("eval", run_copy), "named pipe")


def test_score_refuses_a_device_and_reads_a_pipe(fixtures, nnlm):
    refused(nnlm("score", fixtures["kn"], "/dev/zero"), "character device")
    read, write = os.pipe()
    os.write(write, b"w1 w2\n")
    os.close(write)
    try:
        code, out, err = nnlm("score", fixtures["kn"], f"/proc/self/fd/{read}")  # as `<(command)` gives it
    finally:
        os.close(read)
    assert code == 0 and out.startswith("line 1"), err


@pytest.mark.parametrize("make", [
    lambda d: (d.mkdir(), (d / "mine.txt").write_text("keep me")),
    lambda d: d.write_text("a plain file"),
    lambda d: shutil.copytree(Path(os.environ["NNLM_TEST_RUN"]), d),
])
def test_save_never_replaces_what_nnlm_did_not_save(fixtures, tmp_path, nnlm, make, monkeypatch):
    monkeypatch.setenv("NNLM_TEST_RUN", str(fixtures["run"]))
    target = tmp_path / "target"
    make(target)
    with unchanged(target):
        refused(nnlm("ngram", "--corpus", fixtures["corpus"], "--kind", "kn", "--save", target), "not replaced")
    code, _, err = nnlm("ngram", "--corpus", fixtures["corpus"], "--kind", "kn", "--order", "2", "--save",
                        fixtures["kn"].parent / "kn2")
    assert code == 0, err
    code, _, err = nnlm("ngram", "--corpus", fixtures["corpus"], "--kind", "kn", "--order", "2", "--save",
                        fixtures["kn"].parent / "kn2")  # nnlm's own model: saved again
    assert code == 0, err


def test_save_refuses_the_root_directory(fixtures, nnlm):
    refused(nnlm("ngram", "--corpus", fixtures["corpus"], "--kind", "kn", "--save", "/"), "give a new directory name")


def test_outputs_write_through_symlinks_and_devices(fixtures, tmp_path, nnlm):
    real = tmp_path / "real.arpa"
    real.write_text("old")
    (tmp_path / "link.arpa").symlink_to("real.arpa")
    code, _, err = nnlm("export", fixtures["kn"], "--arpa", tmp_path / "link.arpa", "--force")  # a user's file
    assert code == 0, err
    assert (tmp_path / "link.arpa").is_symlink() and real.read_text().startswith("\\data\\")
    with unchanged(Path("/dev/null")):
        assert nnlm("export", fixtures["kn"], "--arpa", "/dev/null")[0] == 0
    os.mkfifo(tmp_path / "fifo")
    refused(nnlm("export", fixtures["kn"], "--arpa", tmp_path / "fifo"), "no process is reading that FIFO")
    with unchanged(tmp_path):
        refused(nnlm("map", fixtures["run"], "--out", tmp_path), "is a directory")


def test_model_files_get_ordinary_permissions(run_copy):
    umask = os.umask(0o022)
    os.umask(umask)
    for name in ("model.safetensors", "run.json", "vocab.json"):
        assert stat.S_IMODE((run_copy / name).stat().st_mode) == 0o666 & ~umask, name


# ---- full disk ------------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path) -> Iterator[Path]:
    """A 256 KiB tmpfs (root and `mount` needed; skipped elsewhere), with a file filling most of it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mount -t tmpfs is not permitted here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_the_old_files_stay(fixtures, tiny_disk, nnlm):
    old = tiny_disk / "model.arpa"
    old.write_text("the previous model\n")
    (tiny_disk / "saved").mkdir()
    fill_disk(tiny_disk, 4096)
    with unchanged(old):
        refused(nnlm("export", fixtures["kn"], "--arpa", old, "--force"), "no space left on device")
    with unchanged(tiny_disk / "saved"):
        refused(nnlm("ngram", "--corpus", fixtures["corpus"], "--kind", "kn", "--save", tiny_disk / "saved"),
                "no space left on device")
    with unchanged(tiny_disk / "saved"):
        refused(nnlm("map", fixtures["run"], "--out", tiny_disk / "saved" / "map.png", "--top", "20"),
                "no space left on device")
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler", "model.arpa", "saved"]  # no temp files left


def test_a_full_disk_under_the_corpus_cache_is_one_line(fixtures, tiny_disk, nnlm, monkeypatch):
    """The cache's ids are written through a memory map: its blocks are reserved first, so a full disk
    is a note and the command goes on uncached, not a SIGBUS when a page of the sparse file is first
    touched (found by fuzz_cli with 16 KiB free)."""
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tiny_disk / "cache"))
    fill_disk(tiny_disk, 16384)
    code, out, err = nnlm("stats", "--corpus", fixtures["corpus"])
    assert code == 0 and "corpus cache not written" in err and "no space left" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_full_disk_while_training_keeps_the_run_resumable(fixtures, tiny_disk, nnlm):
    run = Path(shutil.copytree(fixtures["run"], tiny_disk / "run"))
    fill_disk(tiny_disk, 1024)
    with unchanged(run / "model.safetensors", run / "state.json"):
        refused(nnlm("train", "--resume", "--out", run, "--epochs", "2", "--no-progress", "--threads", "1"),
                "no space left on device")
    (tiny_disk / "filler").unlink()
    code, _, err = nnlm("eval", run)
    assert code == 0, err


# ---- fallbacks are said -------------------------------------------------------------------------

def test_kneser_ney_fallback_discounts_are_said_on_stderr_and_in_json(fixtures, nnlm):
    code, out, err = nnlm("ngram", "--corpus", fixtures["corpus"], "--kind", "kn", "--order", "3", "--json")
    assert code == 0 and "fallback discounts 0.5, 1, 1.5 for order(s) 1, 2" in err
    assert json.loads(out)["discount_fallback"] == [1, 2]
