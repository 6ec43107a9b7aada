"""A corpus from one text file (plain, gzip, xz, bzip2) or standard input (issue 48, item 1): read once,
valid and test cut from its end by the held-out rule, cached, recorded with a model and found again."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import random_corpus_texts, write_text_corpus
from helpers import assert_one_line_error, nnlm_cli, run_nnlm

from nnlm.data.corpus import load_corpus
from nnlm.data.corpus_stream import heldout_sizes, plan_stream
from nnlm.data.provenance import STDIN_RECORD
from nnlm.data.text_source import compression_of
from nnlm.errors import NnlmError

COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}


def text() -> str:
    return "".join(random_corpus_texts())  # 420 lines, ~3,500 tokens


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write(path: Path, content: str) -> Path:
    path.write_bytes(COMPRESS[path.suffix if path.suffix in COMPRESS else ""](content.encode()))
    return path


def nnlm_stdin(data: bytes, *args, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nnlm", *map(str, args)], input=data, capture_output=True,
                          env={**os.environ, **env}, timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@pytest.mark.parametrize("suffix", list(COMPRESS))
def test_every_compression_gives_the_corpus_of_the_plain_file(tmp_path, cache, suffix):
    plain = load_corpus(str(write(tmp_path / "c.txt", text())))
    other = load_corpus(str(write(tmp_path / f"c.txt{suffix}", text())))
    assert other.vocab == plain.vocab
    assert [len(other.split(s)) for s in ("train", "valid", "test")] == [len(plain.split(s)) for s in
                                                                         ("train", "valid", "test")]
    assert np.array_equal(other.stream(), plain.stream())


def test_compression_is_told_by_the_first_bytes():
    assert [compression_of(f(b"a b c\n" * 50)) for f in COMPRESS.values()] == [None, "gzip", "xz", "bzip2"]
    assert compression_of(b"BZh9 is a word here\n") is None  # plain text that starts like bzip2


def test_a_file_is_the_text_directory_of_its_three_cut_pieces(tmp_path, cache):
    """One pass (provisional ids, then remapped) gives the very ids and vocabulary of the two-pass reader."""
    corpus = load_corpus(str(write(tmp_path / "c.txt", text())), heldout=300)
    lines = text().splitlines(keepends=True)
    sizes = [len(corpus.train), len(corpus.valid), len(corpus.test)]
    pieces, at = [], 0
    for size in sizes:  # every line ends with <p>, so the pieces are whole lines
        n, got = 0, []
        while n < size:
            got.append(lines[at])
            n += len(lines[at].split()) + 1
            at += 1
        assert n == size
        pieces.append("".join(got))
    directory = load_corpus(str(write_text_corpus(tmp_path / "dir", *pieces)))
    assert directory.vocab == corpus.vocab and directory.pad_token == corpus.pad_token
    assert np.array_equal(directory.stream(), corpus.stream())


def test_the_heldout_rule_takes_whole_last_lines(tmp_path):
    spool = tmp_path / "ids.bin"
    ids = np.array([5, 6, 0, 7, 0, 8, 9, 9, 0, 3, 0, 4, 4, 0], dtype=np.int32)  # 0 ends a line
    ids.tofile(spool)
    # test: the fewest last lines with >= 2 tokens ("4 4 <p>": 3); valid: the fewest before them with >= 2
    assert heldout_sizes(spool, len(ids), 2, "x") == (9, 2, 3)
    assert heldout_sizes(spool, len(ids), 3, "x") == (5, 6, 3)
    assert heldout_sizes(spool, len(ids), 0, "x") == (14, 0, 0)
    with pytest.raises(NnlmError, match="too short to hold out"):
        heldout_sizes(spool, len(ids), 6, "x")


def test_the_default_heldout_is_five_percent(tmp_path, cache):
    corpus = load_corpus(str(write(tmp_path / "c.txt", text())))
    total = len(corpus.stream())
    for part in (corpus.valid, corpus.test):
        assert total // 20 <= len(part) <= total // 20 + 16  # whole lines: at most one line more


def test_blocks_of_any_size_give_the_same_plan(tmp_path):
    path = write(tmp_path / "c.txt.gz", text())
    plans = []
    for block in (7, 1000, None):
        (tmp_path / str(block)).mkdir()
        plan = plan_stream(str(path), tmp_path / str(block), None, None, "train", None, block_bytes=block)
        ids = np.empty(sum(plan.sizes), dtype=np.int32)
        plan.fill(ids)
        plans.append((plan.vocab, plan.sizes, ids, plan.sha256))
    assert all(p[0] == plans[0][0] and p[1] == plans[0][1] and np.array_equal(p[2], plans[0][2]) and
               p[3] == plans[0][3] for p in plans)


def test_vocabulary_options_apply_to_a_file(tmp_path, cache):
    path = str(write(tmp_path / "c.txt", text()))
    default, every, capped = (load_corpus(path), load_corpus(path, min_count=1, vocab_from="all"),
                              load_corpus(path, max_vocab=20))
    assert len(capped.vocab) == 20 and len(every.vocab) >= len(default.vocab)
    write(tmp_path / "u.txt", "<unk> a b\n" * 60)  # train already holds <unk>: min-count 1, as for a directory
    assert "b" in load_corpus(str(tmp_path / "u.txt"), heldout=1).vocab


def test_a_second_load_comes_from_the_cache_and_a_changed_file_is_read_again(tmp_path, cache):
    path = write(tmp_path / "c.txt.xz", text())
    first = load_corpus(str(path))
    assert len(list(cache.iterdir())) == 1
    assert np.array_equal(load_corpus(str(path)).stream(), first.stream())
    assert len(list(cache.iterdir())) == 1
    write(path, text() + "w1 w2 w3\n")
    assert len(load_corpus(str(path)).stream()) == len(first.stream()) + 4
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2


def test_heldout_is_refused_for_brown_and_directories(random_corpus, tmp_path):
    with pytest.raises(NnlmError, match="--heldout and --no-heldout are for a corpus file"):
        load_corpus(str(tmp_path / "rand"), heldout=10)


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    good = text().encode()
    files = {}
    for suffix, compress in list(COMPRESS.items())[1:]:
        data = compress(good)
        files[f"truncated{suffix}"] = tmp_path / f"truncated.txt{suffix}"
        files[f"truncated{suffix}"].write_bytes(data[:len(data) // 2])
        damaged = bytearray(data)
        damaged[len(data) // 2] ^= 0xFF
        files[f"damaged{suffix}"] = tmp_path / f"damaged.txt{suffix}"
        files[f"damaged{suffix}"].write_bytes(bytes(damaged))
    files["misnamed"] = tmp_path / "plain.gz"
    files["misnamed"].write_bytes(good)
    files["empty"] = tmp_path / "empty.txt"
    files["empty"].write_bytes(b"")
    files["empty.gz"] = tmp_path / "empty.txt.gz"
    files["empty.gz"].write_bytes(gzip.compress(b" \n\n"))
    files["binary"] = tmp_path / "nul.txt"
    files["binary"].write_bytes(b"a b\x00c\n")
    return files


BAD = {"truncated.gz": "is truncated", "truncated.xz": "is truncated", "truncated.bz2": "is truncated",
       "damaged.gz": "damaged gzip data", "damaged.xz": "damaged xz data", "damaged.bz2": "damaged bzip2 data",
       "misnamed": "does not hold gzip data", "empty": "holds no tokens", "empty.gz": "holds no tokens",
       "binary": "NUL bytes"}


def test_bad_files_are_one_line_and_write_nothing(tmp_path, cache, capsys):
    files = _bad_inputs(tmp_path)
    for name, fragment in BAD.items():
        code, out, err = nnlm_cli(capsys, "ngram", "--corpus", files[name], "--kind", "kn", "--save",
                                  tmp_path / f"kn-{name}")
        assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err, (name, err)
        assert not (tmp_path / f"kn-{name}").exists()
    assert not cache.exists() or not any(p for p in cache.iterdir()), list(cache.iterdir())


def test_bad_streams_on_stdin_are_one_line(tmp_path):
    env = {"NNLM_CACHE_DIR": str(tmp_path / "cache")}
    data = gzip.compress(text().encode())
    for stdin, fragment in ((data[:len(data) // 2], "standard input is truncated"), (b"", "holds no tokens"),
                            (b"a b\n", "too short to hold out")):
        assert_one_line_error(nnlm_stdin(stdin, "stats", "--corpus", "-", env=env), fragment)
    assert not any((tmp_path / "cache").iterdir())  # no spool left behind, no cache


def test_a_device_or_a_fifo_is_refused_as_a_corpus_file(tmp_path):
    assert_one_line_error(run_nnlm("stats", "--corpus", "/dev/null"), "is a character device")
    os.mkfifo(tmp_path / "fifo")
    assert_one_line_error(run_nnlm("stats", "--corpus", tmp_path / "fifo"), "is a named pipe")


def test_the_output_guard_refuses_the_corpus_file(tmp_path, capsys):
    path = write(tmp_path / "c.txt", text())
    code, _, err = nnlm_cli(capsys, "ngram", "--corpus", path, "--kind", "kn", "--arpa", path, "--force")
    assert code == 2 and "is the input" in err
    assert path.read_text() == text()


@pytest.mark.parametrize("suffix", list(COMPRESS))
def test_cli_stats_ngram_and_score_on_a_file(tmp_path, cache, capsys, suffix):
    path = write(tmp_path / f"c.txt{suffix}", text())
    code, out, err = nnlm_cli(capsys, "stats", "--corpus", path, "--heldout", 200, "--json")
    assert code == 0, err
    stats = json.loads(out)
    assert stats["corpus"] == path.name and all(stats["splits"][s]["tokens"] >= 200 for s in ("valid", "test"))
    results = []
    for extra in ([], ["--memory", "0.001"]):  # in memory, and counted out of core
        save = tmp_path / f"kn{len(extra)}"
        code, out, err = nnlm_cli(capsys, "ngram", "--corpus", path, "--heldout", 200, "--kind", "kn", "--order", 3,
                                  "--save", save, "--json", *extra)
        assert code == 0, err
        results.append(json.loads(out)["perplexity"])
        assert json.loads((save / "config.json").read_text())["corpus"]["heldout"] == 200
        code, out, err = nnlm_cli(capsys, "score", save, "--split", "test", "--json")  # its own corpus, recorded
        assert code == 0, err
        assert np.isclose(json.loads(out)["perplexity"], results[-1]["test"])
    assert results[0] == pytest.approx(results[1], rel=1e-12)


def test_cli_no_heldout_builds_on_everything(tmp_path, cache, capsys):
    path = write(tmp_path / "c.txt.bz2", text())
    code, out, err = nnlm_cli(capsys, "ngram", "--corpus", path, "--no-heldout", "--kind", "kn", "--json")
    assert code == 0, err
    assert list(json.loads(out)["perplexity"]) == ["train"]
    code, _, err = nnlm_cli(capsys, "train", "--corpus", path, "--no-heldout", "--out", tmp_path / "run")
    assert code == 2 and "has no valid part" in err and not (tmp_path / "run").exists()


def test_cli_train_a_tiny_net_on_a_gzip_file_and_score_it(tmp_path, cache, capsys):
    path = write(tmp_path / "c.txt.gz", text())
    code, _, err = nnlm_cli(capsys, "train", "--corpus", path, "--out", tmp_path / "run", "--preset", "mlp7",
                            "--hidden", 4, "--features", 2, "--epochs", 1, "--batch-size", 64, "--threads", 1,
                            "--no-progress", "--init-features", "random")
    assert code == 0, err
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["corpus"] == str(path.resolve()) and run["heldout"] is None
    code, out, err = nnlm_cli(capsys, "score", tmp_path / "run", "--split", "valid", "--json")
    assert code == 0, err
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert np.isclose(json.loads(out)["perplexity"], state["best"]["valid_ppl"], rtol=1e-4)


def test_stdin_is_recorded_by_its_hash_and_read_back_from_the_cache(tmp_path):
    env = {"NNLM_CACHE_DIR": str(tmp_path / "cache")}
    data = lzma.compress(text().encode())
    proc = nnlm_stdin(data, "ngram", "--corpus", "-", "--kind", "kn", "--order", 3, "--save", tmp_path / "kn",
                      "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    built = json.loads(proc.stdout)
    import hashlib

    recorded = json.loads((tmp_path / "kn" / "config.json").read_text())["corpus"]["corpus"]
    assert recorded == STDIN_RECORD + hashlib.sha256(data).hexdigest()
    score = run_nnlm("score", tmp_path / "kn", "--split", "test", "--json", env=env)  # nothing on stdin now
    assert score.returncode == 0, score.stderr
    assert np.isclose(json.loads(score.stdout)["perplexity"], built["perplexity"]["test"])
    file_built = run_nnlm("ngram", "--corpus", write(tmp_path / "c.txt", text()), "--kind", "kn", "--order", 3,
                          "--json", env=env)  # the same text from a file: the same corpus and model
    assert json.loads(file_built.stdout)["perplexity"] == built["perplexity"]
    assert_one_line_error(run_nnlm("score", tmp_path / "kn", "--split", "test",
                                   env={"NNLM_CACHE_DIR": str(tmp_path / "elsewhere")}), "its cache is gone")


def test_stats_says_how_the_heldout_parts_were_cut(tmp_path, cache, capsys):
    path = write(tmp_path / "c.txt", text())
    code, out, err = nnlm_cli(capsys, "stats", "--corpus", path, "--heldout", 300)
    assert code == 0, err
    assert "test is the fewest last lines holding at least 300 tokens" in out
    code, out, err = nnlm_cli(capsys, "stats", "--corpus", path, "--no-heldout")
    assert code == 0 and "held out: nothing (--no-heldout)" in out
