"""Bad input through the whole CLI: >= 1,000 cases in families, counted by outcome.

    python benchmarks/fuzz_cli.py [--family NAME] [--show N] [--timeout S]

Every case is one `nnlm ...` command on an odd or bad input (corpus directories, ARPA files, run
directories, numeric arguments, stdin, special files, an output over an input, a full disk). nnlm is
imported once; each case runs `nnlm.cli.main(argv)` in a forked child (stdin/stdout/stderr redirected to files, its own
process group, killed at the time limit), so 1,000 cases cost no interpreter start-ups. Outcomes:

  clean error       exit 2, stderr lines all `nnlm...`, the last an error (notes may precede it)
  internal error    exit 1, one line naming the failure and where its trace went
  success           exit 0 on an input that may be valid
  traceback         a Python traceback on stderr (or an uncaught exception / a signal)
  hang              killed at the time limit having printed nothing
  nonsense success  exit 0 on a clearly invalid input, or a nan/inf/below-1 perplexity printed
  streamed, cut     killed at the time limit while printing (e.g. generate --tokens 999999999)
and, per case, whether a file the command did not own changed (its inputs, the fixtures, an
existing output it refused, /dev/null, /dev/full). The script exits 1 if any case is a traceback, a
hang, a nonsense success or changed a file it did not own.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import contextlib

from helpers import fill_disk  # noqa: E402 - the test suite's helper, shared

os.environ.setdefault("OMP_NUM_THREADS", "1")  # children inherit it: one thread each on a shared machine

BAD_NUMBERS = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1", "-0", "0", "1", "2", "0.5", "1e-300",
               "5e-324", "-5e-324", "1e30", "9" * 30, "x", "", "١٢", "１２", "1_0", "0x10", "1e3", "+3", " 3"]
_INT = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


@dataclass
class Case:
    family: str
    name: str
    argv: list[str]
    invalid: bool                     # clearly invalid: exit 0 is a nonsense success
    stdin: bytes = b""
    setup: Callable[[Path], None] | None = None
    protect: list[str] = field(default_factory=list)  # paths ({D} = case dir) that must not change
    protect_if_refused: list[str] = field(default_factory=list)  # old outputs: kept if the command fails
    env: dict[str, str] = field(default_factory=dict)
    after: list[list[str]] = field(default_factory=list)  # commands that must still succeed afterwards
    timeout: float = 30.0


# --- fixtures -------------------------------------------------------------------------------

def corpus_texts(seed: int = 0) -> tuple[str, str, str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(60)]
    p = 1.0 / np.arange(1, 61)
    p /= p.sum()

    def text(lines: int) -> str:
        rows = []
        for _ in range(lines):
            seq = rng.choice(60, size=int(rng.integers(3, 15)), p=p)
            seq[1::2] = (seq[0::2][: len(seq[1::2])] + 1) % 60
            rows.append(" ".join(words[i] for i in seq))
        return "\n".join(rows) + "\n"

    return text(300), text(60), text(60)


SETUP = r"""
import sys
from pathlib import Path
import torch
from nnlm.cli import main
from nnlm.neural.run.checkpoint import load_tensors, save_tensors
S = Path(sys.argv[1])
assert main(["ngram", "--corpus", str(S / "rand"), "--kind", "kn", "--order", "3", "--save", str(S / "kn3"),
             "--arpa", str(S / "kn3.arpa")]) == 0
assert main(["train", "--corpus", str(S / "rand"), "--out", str(S / "run"), "--preset", "mlp7", "--hidden", "8",
             "--features", "4", "--batch-size", "16", "--threads", "1", "--epochs", "1", "--no-progress"]) == 0
tensors, meta = load_tensors(S / "run" / "model.safetensors")
(S / "weights").mkdir()
for name, value in (("nan", float("nan")), ("inf", float("inf"))):
    bad = dict(tensors)
    bad["C"] = bad["C"].clone()
    bad["C"][0, 0] = value
    save_tensors(S / "weights" / f"{name}.safetensors", bad, {k: v for k, v in meta.items() if k != "sha256"})
bad = dict(tensors)
bad["C"] = torch.zeros(3, 3)
save_tensors(S / "weights" / "shape.safetensors", bad)
"""


def build_fixtures(shared: Path) -> None:
    (shared / "rand").mkdir(parents=True)
    for name, text in zip(("train", "valid", "test"), corpus_texts(), strict=True):
        (shared / "rand" / f"{name}.txt").write_text(text)
    (shared / "text.txt").write_text("w1 w2 w3\nw4 w5\n")
    (shared / "words.txt").write_text("w1 w2 w3 w4\n")
    (shared / "nbest").mkdir()
    for uid in ("u1", "u2"):
        (shared / "nbest" / uid).write_text("-10 0 2 w1 w2\n-11 0 1 w3\n")
    (shared / "refs.txt").write_text("u1 w1 w2\nu2 w3\n")
    (shared / "kaldi").mkdir()
    (shared / "kaldi" / "text").write_text("u1-1 w1 w2\nu1-2 w3\n")
    (shared / "kaldi" / "scores").write_text("u1-1 10\nu1-2 11\n")
    subprocess.run([sys.executable, "-c", SETUP, str(shared)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=os.environ | {"NNLM_CACHE_DIR": str(shared / "cache")})
    shutil.copytree(shared / "cache", shared / "cache-of-rand")  # its one entry, for the damaged-cache cases


# --- case families --------------------------------------------------------------------------

def int_valid(text: str, lo: int, hi: int | None) -> bool:
    return bool(_INT.fullmatch(text.strip())) and lo <= int(text) and (hi is None or int(text) <= hi)


def float_valid(text: str, lo: float, hi: float | None, lo_open: bool) -> bool:
    if not _FLOAT.fullmatch(text.strip()) or not math.isfinite(float(text)):
        return False
    v = float(text)
    return (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)


def argument_cases(S: Path) -> list[Case]:
    """Every numeric option of every command with each of BAD_NUMBERS; valid values must run cleanly."""
    run, kn = str(S / "run"), str(S / "kn3")
    none = ["train", "--resume", "--out", "{D}/none", "--no-progress"]  # valid values stop at 'no run to resume'
    rep = ["reproduce", "--corpus", "{D}/no-corpus", "--out", "{D}/rep", "--no-progress"]
    specs: list[tuple[list[str], str, str, float, float | None, bool]] = [
        (["generate", kn], "--tokens", "int", 1, 10**9, False),
        (["generate", run, "--tokens", "5"], "--temperature", "float", 0, 1e6, True),
        (["generate", kn, "--tokens", "5"], "--top-k", "int", 1, None, False),
        (["generate", kn, "--tokens", "5"], "--seed", "int", 0, 2**63 - 1, False),
        (["next", kn, "w1"], "-k", "int", 1, None, False),
        (["neighbors", run, "w1"], "-k", "int", 1, None, False),
        (["map", run, "--out", "{D}/m.png"], "--top", "int", 1, None, False),
        (["ngram", "--corpus", str(S / "rand"), "--kind", "kn"], "--order", "int", 1, 6, False),
        (["prune", kn, "--arpa", "{D}/p.arpa"], "--threshold", "float", 0, None, True),
        (["ngram", "--corpus", str(S / "rand"), "--kind", "class"], "--classes", "int", 1, None, False),
        (["ngram", "--corpus", str(S / "rand")], "--min-count", "int", 1, None, False),
        (["ngram", "--corpus", str(S / "rand")], "--max-vocab", "int", 1, None, False),
        (["stats", "--corpus", str(S / "rand")], "--min-count", "int", 1, None, False),
        (none, "--order", "int", 2, 64, False), (none, "--hidden", "int", 0, 100_000, False),
        (none, "--features", "int", 1, 100_000, False), (none, "--epochs", "int", 1, 10**6, False),
        (none, "--time-budget", "float", 0, 525_600, True), (none, "--batch-size", "int", 1, 1 << 24, False),
        (none, "--lr", "float", 0, 1e6, True), (none, "--patience", "int", 1, None, False),
        (none, "--seed", "int", 0, 2**63 - 1, False), (none, "--threads", "int", 1, 1024, False),
        (none, "--checkpoint-minutes", "float", 0, 525_600, True), (none, "--workers", "int", 1, 256, False),
        (none, "--dist-timeout", "float", 0, 1e7, True), (none, "--samples", "int", 1, None, False),
        (["eval", run], "--threads", "int", 1, 1024, False),
        (rep, "--budget-minutes", "float", 0, 525_600, True), (rep, "--samples", "int", 1, None, False),
        (rep, "--hogwild", "int", 1, 256, False), (rep, "--threads", "int", 1, 1024, False),
    ]
    cases = []
    for base, option, kind, lo, hi, lo_open in specs:
        for value in BAD_NUMBERS:
            valid = int_valid(value, int(lo), hi) if kind == "int" else float_valid(value, lo, hi, lo_open)
            timeout = 8.0 if option == "--tokens" else 30.0
            cases.append(Case("arguments", f"{base[0]} {option} {value!r}", [*base, f"{option}={value}"],
                              invalid=not valid, protect=[str(S)], timeout=timeout))
    for model in (kn, run):  # valid but endless: must print as it goes (killed at the limit), not hang silent
        cases.append(Case("arguments", f"generate {Path(model).name} --tokens 1000000000",
                          ["generate", model, "--tokens", "1000000000"], invalid=False, timeout=8.0))
    return cases


def arpa_variants(good: str) -> list[tuple[str, str, bool]]:
    """(name, text, clearly invalid) variants of a good ARPA file."""
    import numpy as np

    rng = np.random.default_rng(1)
    lines = good.split("\n")
    entries = [i for i, line in enumerate(lines) if "\t" in line]
    with_backoff = [i for i in entries if len(lines[i].split("\t")) == 3]
    out: list[tuple[str, str, bool]] = []

    def edit(i: int, column: int, value: str) -> str:
        parts = lines[i].split("\t")
        parts[column] = value
        return "\n".join(lines[:i] + ["\t".join(parts)] + lines[i + 1:])

    bad_probs = ["nan", "inf", "-inf", "-1e999", "-1e308", "1", "0.5", "-100", "١", "-١", "1_0", "0x1", "--1", "+-1",
                 "1e", "-0.5e", "Infinity", "-inf0", "", "∞"]
    for i in rng.choice(entries, 3, replace=False):
        for v in bad_probs:
            out.append((f"prob {v!r} at line {i + 1}", edit(int(i), 0, v), True))
        out.append((f"prob -0.25 at line {i + 1}", edit(int(i), 0, "-0.25"), False))
    for i in rng.choice(with_backoff, 3, replace=False):
        for v in ["nan", "inf", "-inf", "100", "1e308", "-1e308", "11", "-11", "١", "1_0", "x"]:
            out.append((f"back-off {v!r} at line {i + 1}", edit(int(i), 2, v), True))
        out.append((f"back-off 0 at line {i + 1}", edit(int(i), 2, "0"), False))
    out.append(("every probability 0", "\n".join(
        "\t".join(["0", *line.split("\t")[1:]]) if "\t" in line else line for line in lines), True))
    out.append(("every back-off 100", "\n".join(
        "\t".join([*line.split("\t")[:2], "100"]) if line.count("\t") == 2 else line for line in lines), True))
    out.append(("every back-off 3", "\n".join(
        "\t".join([*line.split("\t")[:2], "3"]) if line.count("\t") == 2 else line for line in lines), True))
    end = good.index("\\end\\")
    for cut in sorted(rng.integers(1, end, 25)):
        out.append((f"truncated at byte {cut}", good[:cut], True))
    out += [("empty file", "", True), ("no \\end\\", good.replace("\\end\\", ""), True),
            ("no \\data\\", good.replace("\\data\\", ""), True),
            ("count +1", good.replace("ngram 2=", "ngram 2=1", 1), True),
            ("duplicated line", "\n".join(lines[:entries[5] + 1] + [lines[entries[5]]] + lines[entries[5] + 1:]), True),
            ("NUL byte", good[:200] + "\x00" + good[200:], True),
            ("10,000 fields", edit(entries[3], 1, " ".join(["w1"] * 10_000)), True),
            ("foreign word", edit(entries[4], 1, "zebra"), True),
            ("ngram 7=", good.replace("\\1-grams:", "ngram 4=0\nngram 5=0\nngram 6=0\nngram 7=0\n\\1-grams:"), True),
            ("CRLF line ends", good.replace("\n", "\r\n"), False),
            ("spaces for tabs", good.replace("\t", " "), False),
            ("UTF-8 BOM", "\ufeff" + good, False),
            ("comment before \\data\\", "# made by hand\n" + good, False)]
    return out


def arpa_cases(S: Path) -> list[Case]:
    good = (S / "kn3.arpa").read_text()
    cases = []
    for name, text, invalid in arpa_variants(good):
        def setup(d: Path, text: str = text) -> None:
            (d / "m.arpa").write_bytes(text.encode("utf-8", "surrogatepass"))
        for argv in (["ngram", "--corpus", str(S / "rand"), "--load-arpa", "{D}/m.arpa", "--json"],
                     ["score", "{D}/m.arpa", str(S / "text.txt"), "--json"],
                     ["prune", "{D}/m.arpa", "--threshold", "1e-6", "--arpa", "{D}/p.arpa", "--json"]):
            cases.append(Case("arpa", f"{argv[0]}: {name}", argv, invalid, setup=setup,
                              protect=["{D}/m.arpa", str(S)]))
    import numpy as np

    rng = np.random.default_rng(2)
    for i in range(10):
        blob = rng.integers(0, 256, int(rng.integers(1, 4000)), dtype=np.uint8).tobytes()
        if i % 2:
            blob = b"\\data\\\nngram 1=3\n\n\\1-grams:\n" + blob
        cases.append(Case("arpa", f"random bytes {i}", ["ngram", "--corpus", str(S / "rand"), "--load-arpa",
                                                        "{D}/m.arpa"], True,
                          setup=lambda d, blob=blob: (d / "m.arpa").write_bytes(blob), protect=["{D}/m.arpa"]))
    return cases


RUN_FIELDS = ["format", "corpus", "min_count", "max_vocab", "vocab_from", "preset", "recipe", "batch_size", "seed",
              "patience", "model", "vocab_fingerprint", "pad_token", "order", "hidden", "features", "direct", "lr",
              "bf16", "loss", "samples", "init_features", "feature_classes", "class_pull", "class_context",
              "feature_clustering", "init_evidence"]
ODD_VALUES: list[object] = [None, "x", -1, 1.5, True, [], {}, 1e308]


def copy_run(S: Path, d: Path) -> Path:
    shutil.copytree(S / "run", d / "run")
    return d / "run"


def run_dir_cases(S: Path) -> list[Case]:
    cases = []
    for key in RUN_FIELDS:
        for value in ODD_VALUES:
            def setup(d: Path, key: str = key, value: object = value) -> None:
                run = copy_run(S, d)
                data = json.loads((run / "run.json").read_text())
                data[key] = value
                (run / "run.json").write_text(json.dumps(data))
            cases.append(Case("run directory", f"run.json {key} = {value!r}", ["eval", "{D}/run", "--json"],
                              invalid=False, setup=setup, protect=["{D}/run"]))

    def damage(what: str) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            run = copy_run(S, d)
            weights = run / "model.safetensors"
            if what == "truncated weights":
                weights.write_bytes(weights.read_bytes()[:100])
            elif what == "empty weights":
                weights.write_bytes(b"")
            elif what == "garbage weights":
                weights.write_bytes(os.urandom(5000))
            elif what in ("nan", "inf", "shape"):
                shutil.copy(S / "weights" / f"{what}.safetensors", weights)
            elif what == "no weights":
                weights.unlink()
            elif what == "garbage vocab":
                (run / "vocab.json").write_text("{not json")
            elif what == "vocab not strings":
                (run / "vocab.json").write_text(json.dumps({"unk": "<unk>", "tokens": [1, 2, 3]}))
            elif what == "no vocab":
                (run / "vocab.json").unlink()
            elif what == "empty run.json":
                (run / "run.json").write_text("")
            elif what == "run.json a list":
                (run / "run.json").write_text("[]")
            elif what == "run.json huge model":
                data = json.loads((run / "run.json").read_text())
                data["model"]["order"] = 10**9
                (run / "run.json").write_text(json.dumps(data))
        return setup

    commands = [["eval", "{D}/run", "--json"], ["generate", "{D}/run", "--tokens", "5"],
                ["score", "{D}/run", str(S / "text.txt"), "--json"], ["neighbors", "{D}/run", "w1"],
                ["export", "{D}/run", "--embeddings", "{D}/e.txt"], ["next", "{D}/run", "w1"]]
    for what in ["truncated weights", "empty weights", "garbage weights", "nan", "inf", "shape", "no weights",
                 "garbage vocab", "vocab not strings", "no vocab", "empty run.json", "run.json a list",
                 "run.json huge model"]:
        for argv in commands:
            cases.append(Case("run directory", f"{argv[0]}: {what}", argv, invalid=True, setup=damage(what),
                              protect=["{D}/run"]))

    def state(edit: str) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            run = copy_run(S, d)
            path = run / "state.json"
            data = json.loads(path.read_text())
            if edit == "symlink loop":
                path.unlink()
                os.symlink("state.json", path)
            elif edit == "missing":
                path.unlink()
            elif edit == "garbage":
                path.write_text("{{{")
            elif edit == "FIFO":
                path.unlink()
                os.mkfifo(path)
            elif edit == "stale temp files":
                (run / ".model.safetensors.abc123.tmp").write_bytes(b"half")
                return
            else:
                k, _, v = edit.partition("=")
                data[k] = json.loads(v)
                path.write_text(json.dumps(data))
        return setup

    for edit in ["symlink loop", "missing", "garbage", "FIFO", 'tensors=""', "tensors=null", 'tensors="../x"',
                 'tensors="checkpoint-9.safetensors"', "step=-1", 'epoch="x"', "history=null", 'best="x"',
                 "elapsed=1e999", "finished=3", "stale temp files"]:
        invalid = edit != "stale temp files"
        cases.append(Case("run directory", f"resume: state.json {edit}",
                          ["train", "--resume", "--out", "{D}/run", "--epochs", "1", "--no-progress", "--threads", "1"],
                          invalid=invalid, setup=state(edit),
                          protect=["{D}/run/model.safetensors", "{D}/run/run.json"]))
    return cases


def corpus_cases(S: Path) -> list[Case]:
    good = {n: (S / "rand" / f"{n}.txt").read_text() for n in ("train", "valid", "test")}

    def make(variant: str) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            c = d / "c"
            c.mkdir()
            for n, t in good.items():
                (c / f"{n}.txt").write_text(t)
            train = c / "train.txt"
            if variant == "no train.txt":
                train.unlink()
            elif variant == "empty train.txt":
                train.write_text("")
            elif variant == "whitespace only":
                train.write_text("  \n\t\n\n")
            elif variant == "NUL bytes":
                train.write_bytes(b"w1 \x00 w2\n")
            elif variant == "invalid UTF-8":
                train.write_bytes(b"w1 \xff\xfe w2\n")
            elif variant == "train.txt a directory":
                train.unlink()
                train.mkdir()
            elif variant == "train.txt a FIFO":
                train.unlink()
                os.mkfifo(train)
            elif variant == "train.txt -> /dev/zero":
                train.unlink()
                os.symlink("/dev/zero", train)
            elif variant == "train.txt symlink loop":
                train.unlink()
                os.symlink("train.txt", train)
            elif variant == "train.txt -> /proc/self/mem":
                train.unlink()
                os.symlink("/proc/self/mem", train)
            elif variant == "empty valid.txt":
                (c / "valid.txt").write_text("")
            elif variant == "one token":
                train.write_text("w1\n")
            elif variant == "CRLF":
                train.write_text(good["train"].replace("\n", "\r\n"))
            elif variant == "special tokens in text":
                train.write_text("<unk> <p> <text> w1\n" + good["train"])
            elif variant == "a 2 MB token":
                train.write_text("w" * 2_000_000 + "\n" + good["train"])
            elif variant == "unicode":
                train.write_text("ß ǅ 中文 \u200b 🙂 w1\n" + good["train"])
        return setup

    invalid = {"no train.txt", "empty train.txt", "whitespace only", "NUL bytes", "invalid UTF-8",
               "train.txt a directory", "train.txt a FIFO", "train.txt -> /dev/zero", "train.txt symlink loop",
               "train.txt -> /proc/self/mem", "empty valid.txt"}
    variants = sorted(invalid) + ["one token", "CRLF", "special tokens in text", "a 2 MB token", "unicode"]
    cases = []
    for v in variants:
        for argv in (["stats", "--corpus", "{D}/c", "--no-cache"], ["ngram", "--corpus", "{D}/c", "--kind", "kn"],
                     ["train", "--corpus", "{D}/c", "--out", "{D}/o", "--preset", "mlp7", "--hidden", "2",
                      "--features", "2", "--epochs", "1", "--batch-size", "64", "--threads", "1", "--no-progress"]):
            cases.append(Case("corpus", f"{argv[0]}: {v}", argv, v in invalid, setup=make(v),
                              env={"NNLM_CACHE_DIR": "{D}/cache"}))
    for argv, name in ((["stats", "--corpus", "{D}/nope"], "no such directory"),
                       (["stats", "--corpus", str(S / "text.txt")], "a file as corpus"),
                       (["stats", "--corpus", ""], "empty name"),
                       (["stats", "--corpus", "brown", "--min-count", "3"], "brown with --min-count"),
                       (["ngram", "--corpus", "/dev/zero"], "/dev/zero as corpus")):
        cases.append(Case("corpus", name, argv, True))

    def cache(damage: str) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            shutil.copytree(S / "cache-of-rand", d / "cache")
            (entry,) = [p for p in (d / "cache").iterdir() if (p / "meta.json").exists()]
            if damage == "truncated ids.npy":
                data = (entry / "ids.npy").read_bytes()
                (entry / "ids.npy").write_bytes(data[: len(data) // 2])
            elif damage == "garbage meta.json":
                (entry / "meta.json").write_text("][")
            elif damage == "no ids.npy":
                (entry / "ids.npy").unlink()
            elif damage == "garbage vocab.json":
                (entry / "vocab.json").write_text("x")
            elif damage == "entry is a file":
                shutil.rmtree(entry)
                entry.write_text("x")
            elif damage == "ids out of range":
                import numpy as np

                ids = np.load(entry / "ids.npy")
                ids[0] = 10**6
                np.save(entry / "ids.npy", ids)
        return setup

    for damage in ["truncated ids.npy", "garbage meta.json", "no ids.npy", "garbage vocab.json",
                   "entry is a file", "ids out of range"]:
        for argv in (["stats", "--corpus", str(S / "rand")], ["ngram", "--corpus", str(S / "rand"), "--kind", "kn"]):
            cases.append(Case("corpus", f"cache: {damage} ({argv[0]})", argv, False, setup=cache(damage),
                              env={"NNLM_CACHE_DIR": "{D}/cache"}, after=[argv]))
    return cases


def make_special(kind: str, target: Path) -> None:
    """Put a special file of `kind` at `target`: a FIFO, a socket, a directory, a symlink loop (to
    itself), a dangling symlink, or a symlink to the device or /proc path `kind` names."""
    if kind == "FIFO":
        os.mkfifo(target)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(target))
        s.close()
    elif kind == "directory":
        target.mkdir()
    else:
        os.symlink({"symlink loop": target.name, "dangling symlink": "nowhere"}.get(kind, kind), target)


def special_file_cases(S: Path) -> list[Case]:
    kinds = ["FIFO", "socket", "directory", "symlink loop", "dangling symlink", "/dev/zero", "/dev/null",
             "/dev/urandom", "/dev/full", "/proc/self/mem", "/proc/self/status"]
    uses = {
        "--load-arpa": ["ngram", "--corpus", str(S / "rand"), "--load-arpa", "{X}"],
        "--load": ["ngram", "--corpus", str(S / "rand"), "--load", "{X}"],
        "score MODEL": ["score", "{X}", str(S / "text.txt")],
        "score FILE": ["score", str(S / "kn3"), "{X}"],
        "map --words": ["map", str(S / "run"), "--out", "{D}/m.png", "--words", "{X}"],
        "eval RUN": ["eval", "{X}"],
        "--corpus": ["stats", "--corpus", "{X}"],
        "mix MODEL": ["mix", "{X}", "kn:2", "--corpus", str(S / "rand")],
    }
    cases = []
    for kind in kinds:
        for use, argv in uses.items():
            def setup(d: Path, kind: str = kind) -> None:
                make_special(kind, d / "x")
            text_file = use == "score FILE" and kind == "/proc/self/status"  # a readable text: scoring it is fine
            cases.append(Case("special files", f"{use}: {kind}", [a.replace("{X}", "{D}/x") for a in argv],
                              not text_file, setup=setup, protect=[str(S)], timeout=20.0))
        for member in ("run.json", "vocab.json", "state.json", "model.safetensors"):
            def setup(d: Path, kind: str = kind, member: str = member) -> None:
                target = copy_run(S, d) / member
                target.unlink()
                make_special(kind, target)
            argv = (["train", "--resume", "--out", "{D}/run", "--epochs", "2", "--no-progress", "--threads", "1"]
                    if member == "state.json" else ["eval", "{D}/run"])
            cases.append(Case("special files", f"run's {member}: {kind}", argv, invalid=True,
                              setup=setup, protect=["{D}/run/model.safetensors"], timeout=20.0))

    # outputs: what is already there must survive unless it is nnlm's own of the same kind
    targets: dict[str, Callable[[Path], str]] = {
        "/dev/null": lambda d: "/dev/null", "/dev/full": lambda d: "/dev/full",
        "FIFO nobody reads": lambda d: (os.mkfifo(d / "f"), str(d / "f"))[1],
        "symlink to a file": lambda d: ((d / "real").write_text("old"), os.symlink("real", d / "l"), str(d / "l"))[2],
        "symlink loop": lambda d: (os.symlink("l", d / "l"), str(d / "l"))[1],
        "empty directory": lambda d: ((d / "e").mkdir(), str(d / "e"))[1],
        "non-empty directory": lambda d: ((d / "n").mkdir(), (d / "n" / "keep.txt").write_text("mine"),
                                          str(d / "n"))[2],
        "plain file": lambda d: ((d / "p").write_text("mine"), str(d / "p"))[1],
        "a neural run": lambda d: str(copy_run(S, d)),
        "under a plain file": lambda d: ((d / "p").write_text("mine"), str(d / "p" / "x"))[1],
        "/": lambda d: "/",
    }
    writers = {
        "ngram --arpa": ["ngram", "--corpus", str(S / "rand"), "--kind", "kn", "--order", "2", "--arpa", "{T}"],
        "ngram --save": ["ngram", "--corpus", str(S / "rand"), "--kind", "kn", "--order", "2", "--save", "{T}"],
        "export --arpa": ["export", str(S / "kn3"), "--arpa", "{T}"],
        "export --embeddings": ["export", str(S / "run"), "--embeddings", "{T}"],
        "prune --arpa": ["prune", str(S / "kn3"), "--threshold", "1e-6", "--arpa", "{T}"],
        "prune --save": ["prune", str(S / "kn3"), "--threshold", "1e-6", "--save", "{T}"],
        "map --out": ["map", str(S / "run"), "--out", "{T}", "--top", "5"],
        "train --out": ["train", "--corpus", str(S / "rand"), "--out", "{T}", "--preset", "mlp7", "--hidden", "2",
                        "--features", "2", "--epochs", "1", "--threads", "1", "--no-progress"],
    }
    for tname, make_target in targets.items():
        for wname, argv in writers.items():
            def setup(d: Path, make_target: Callable[[Path], str] = make_target) -> None:
                (d / "target").write_text(make_target(d))
            files = ("ngram --arpa", "export --arpa", "export --embeddings", "map --out", "prune --arpa")
            # a file output writes into /dev/null; a user's file (plain, or a link's target) needs --force
            ok = {("/dev/null", w) for w in files}
            ok |= {("empty directory", w) for w in ("ngram --save", "train --out", "prune --save")}
            valid = (tname, wname) in ok
            protect = ["{D}/n", "{D}/run"] + ([] if valid else ["{D}/p", "{D}/real", "{D}/l", "{D}/f"])
            cases.append(Case("special files", f"{wname} to {tname}", argv, invalid=not valid,
                              setup=setup, protect=protect, timeout=20.0))
    return cases


def output_over_input_cases(S: Path) -> list[Case]:
    """Each command with an output option, its output equal to an input, inside it, containing it, through a
    symlink to it, and on a user's file (refused; with --force allowed, never over an input)."""
    writers: dict[str, tuple[list[str], Path]] = {
        "rescore srilm --out": (["rescore", str(S / "nbest"), "--lm", str(S / "kn3"), "--format", "srilm",
                                 "--refs", str(S / "refs.txt"), "--out", "{T}"], S / "nbest"),
        "rescore --refs": (["rescore", str(S / "nbest"), "--lm", str(S / "kn3"), "--format", "srilm",
                            "--refs", str(S / "refs.txt"), "--out", "{T}"], S / "refs.txt"),
        "rescore kaldi --out": (["rescore", str(S / "kaldi" / "text"), "--scores", str(S / "kaldi" / "scores"),
                                 "--lm", str(S / "kn3"), "--format", "kaldi", "--out", "{T}"], S / "kaldi" / "text"),
        "export --embeddings": (["export", str(S / "run"), "--embeddings", "{T}"], S / "run"),
        "export --arpa": (["export", str(S / "kn3"), "--arpa", "{T}"], S / "kn3"),
        "export ARPA --arpa": (["export", str(S / "kn3.arpa"), "--arpa", "{T}"], S / "kn3.arpa"),
        "prune --arpa": (["prune", str(S / "kn3"), "--threshold", "1e-6", "--arpa", "{T}"], S / "kn3"),
        "prune ARPA --save": (["prune", str(S / "kn3.arpa"), "--threshold", "1e-6", "--save", "{T}"], S / "kn3.arpa"),
        "ngram --arpa": (["ngram", "--corpus", str(S / "rand"), "--kind", "kn", "--order", "2", "--arpa", "{T}"],
                         S / "rand"),
        "ngram --load --save": (["ngram", "--load", str(S / "kn3"), "--save", "{T}"], S / "kn3"),
        "train --out": (["train", "--corpus", str(S / "rand"), "--out", "{T}", "--preset", "mlp7", "--hidden", "2",
                         "--features", "2", "--epochs", "1", "--threads", "1", "--no-progress"], S / "rand"),
        "tune --out": (["tune", "--corpus", str(S / "rand"), "--out", "{T}", "--minutes", "0.05"], S / "rand"),
        "reproduce --out": (["reproduce", "--corpus", str(S / "rand"), "--out", "{T}", "--budget-minutes", "0.05",
                             "--no-progress"], S / "rand"),
        "map --out": (["map", str(S / "run"), "--out", "{T}", "--top", "5"], S / "run"),
        "map --words --out": (["map", str(S / "run"), "--words", str(S / "words.txt"), "--out", "{T}"],
                              S / "words.txt"),
    }
    forced = {"rescore srilm --out", "export --embeddings", "export --arpa", "ngram --arpa", "map --out",
              "prune --arpa"}
    cases = []
    for wname, (argv, given) in writers.items():
        targets: dict[str, Callable[[Path], str]] = {
            "equal to an input": lambda d, given=given: str(given),
            "inside an input": lambda d, given=given: str(given / "new" if given.is_dir() else given),
            "containing an input": lambda d, given=given: str(given.parent),
            "a symlink to an input": lambda d, given=given: (os.symlink(given, d / "link"), str(d / "link"))[1],
            "an input by its hard link": lambda d, given=given: (
                (os.link(given, d / "hard"), str(d / "hard"))[1] if given.is_file() else str(given)),
        }
        for tname, make_target in targets.items():
            def setup(d: Path, make_target: Callable[[Path], str] = make_target) -> None:
                (d / "target").write_text(make_target(d))
            cases.append(Case("output over input", f"{wname}: {tname}", argv, invalid=True, setup=setup,
                              protect=[str(S)], timeout=30.0))
        if wname in forced:
            def user_file(d: Path, directory: bool = wname.startswith("rescore")) -> None:
                where = d / "o" if directory else d / "notes.txt"
                if directory:
                    where.mkdir()
                    (where / "one-best.txt").write_text("mine")
                else:
                    where.write_text("mine")
                (d / "target").write_text(str(where))
            for force in (False, True):
                cases.append(Case("output over input", f"{wname}: a user's file" + (" --force" if force else ""),
                                  argv + (["--force"] if force else []), invalid=not force, setup=user_file,
                                  protect=[str(S)] + ([] if force else ["{D}/notes.txt", "{D}/o"]), timeout=30.0))
    return cases


def stdin_cases(S: Path) -> list[Case]:
    import numpy as np

    rng = np.random.default_rng(3)
    inputs: list[tuple[str, bytes, bool]] = [
        ("empty", b"", True), ("one newline", b"\n", True), ("blank lines", b"\n\n\n", True),
        ("spaces", b"   \n\t\n", True), ("NUL bytes", b"\x00" * 100, True), ("invalid UTF-8", b"w1 \xff w2\n", True),
        ("good", b"w1 w2\n", False), ("CRLF", b"w1 w2\r\nw3\r\n", False), ("BOM", "\ufeffw1 w2\n".encode(), False),
        ("unknown words", b"zebra okapi\n", False), ("tabs", b"w1\tw2\n", False),
        ("a 1 MB line", b"w1 " * 350_000 + b"\n", False), ("no final newline", b"w1 w2", False),
        ("mixed good and blank", b"w1\n\nw2\n", False),  # blank lines are skipped, as in corpora
    ]
    for i in range(6):
        inputs.append((f"random bytes {i}", rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(), True))
    cases = []
    for name, data, invalid in inputs:
        for model in (str(S / "kn3"), str(S / "run"), str(S / "kn3.arpa")):
            for extra in ([], ["--json"], ["--skip-bad", "--per-word"]):
                skip_ok = "--skip-bad" in extra and name == "invalid UTF-8"
                cases.append(Case("stdin", f"score {Path(model).name} {' '.join(extra)}: {name}",
                                  ["score", model, "-", *extra], invalid and not skip_ok, stdin=data,
                                  protect=[str(S)]))
    return cases


def full_disk_cases(S: Path, mount: Path) -> list[Case]:
    """A 1 MiB tmpfs, filled up to leave `free` bytes; an old output there must survive a failed write."""
    def fill(free: int, old: Callable[[], None] | None = None) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            for p in mount.iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            if old:
                old()
            fill_disk(mount, free)
        return setup

    def old_arpa() -> None:
        (mount / "old.arpa").write_text("old contents\n")

    def old_model() -> None:
        shutil.copytree(S / "kn3", mount / "model")

    def old_run() -> None:
        shutil.copytree(S / "run", mount / "run")

    M = str(mount)
    jobs = [
        ("ngram --arpa over an old file", ["ngram", "--corpus", str(S / "rand"), "--kind", "kn", "--order", "3",
                                           "--arpa", f"{M}/old.arpa", "--force"], old_arpa, [f"{M}/old.arpa"], []),
        ("ngram --save over an old model", ["ngram", "--corpus", str(S / "rand"), "--kind", "kn", "--order", "3",
                                            "--save", f"{M}/model"], old_model, [], [["score", f"{M}/model",
                                                                                      str(S / "text.txt")]]),
        ("export --embeddings", ["export", str(S / "run"), "--embeddings", f"{M}/old.arpa", "--force"], old_arpa,
         [f"{M}/old.arpa"], []),
        ("map --out", ["map", str(S / "run"), "--out", f"{M}/old.arpa", "--top", "20", "--force"], old_arpa,
         [f"{M}/old.arpa"], []),
        ("train --out (new run)", ["train", "--corpus", str(S / "rand"), "--out", f"{M}/new", "--preset", "mlp7",
                                   "--hidden", "8", "--features", "4", "--epochs", "1", "--threads", "1",
                                   "--no-progress"], None, [], []),
        ("train --resume", ["train", "--resume", "--out", f"{M}/run", "--epochs", "2", "--threads", "1",
                            "--no-progress"], old_run, [], [["eval", f"{M}/run"]]),
        ("corpus cache", ["stats", "--corpus", str(S / "rand")], None, [], [["stats", "--corpus", str(S / "rand")]]),
    ]
    cases = []
    for name, argv, old, protect, after in jobs:
        for free in (0, 1024, 4096, 16_384, 40_000, 100_000, 250_000):
            env = {"NNLM_CACHE_DIR": f"{M}/cache"} if name == "corpus cache" else {}
            cases.append(Case("full disk", f"{name}, {free:,} bytes free", argv, False, setup=fill(free, old),
                              protect=[str(S)], protect_if_refused=protect, after=after, env=env))
    return cases


# --- running one case -----------------------------------------------------------------------

def snapshot(path: str) -> object:
    """What a path is: type, mode, content hash (recursively for directories); symlinks not followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as fh:
            return ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(fh.read()).hexdigest())
    if stat.S_ISDIR(st.st_mode):
        return ("dir", tuple((n, snapshot(os.path.join(path, n))) for n in sorted(os.listdir(path))
                             if n != "cache"))
    return ("special", stat.S_IFMT(st.st_mode), st.st_rdev)


def run_child(argv: list[str], stdin: bytes, d: Path, env: dict[str, str], timeout: float) -> dict:
    from nnlm.cli import main

    (d / "stdin").write_bytes(stdin)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: one nnlm command, then _exit (no parent cleanup runs twice)
        code = 98
        try:
            os.setpgid(0, 0)
            os.chdir(d)
            for fd, name, mode in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                   (2, "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                f = os.open(d / name, mode, 0o644)
                os.dup2(f, fd)
                os.close(f)
            os.environ.update(env)
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except BaseException:  # noqa: BLE001 - exactly what the fuzz looks for
                import traceback

                traceback.print_exc()
                code = 99
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 97)
    start, killed = time.monotonic(), False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            killed = True
            break
        time.sleep(0.003)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # grandchildren (e.g. workers) of a finished child
        os.killpg(pid, signal.SIGKILL)
    code = os.waitstatus_to_exitcode(status)
    return {"code": code, "killed": killed, "seconds": time.monotonic() - start,
            "stdout": (d / "stdout").read_bytes()[:200_000].decode("utf-8", "replace"),
            "stderr": (d / "stderr").read_bytes()[:20_000].decode("utf-8", "replace")}


def _perplexities(data: object) -> list[float]:
    """Every number under a "perplexity" key of a JSON value."""
    if isinstance(data, list):
        return [v for item in data for v in _perplexities(item)]
    if not isinstance(data, dict):
        return []
    out = []
    for key, value in data.items():
        if key == "perplexity":
            out += [float(v) for v in (value.values() if isinstance(value, dict) else [value])]
        else:
            out += _perplexities(value)
    return out


def nonsense_output(stdout: str) -> str | None:
    """A printed perplexity that is no perplexity: nan, inf, or below 1."""
    if re.search(r"\b(nan|NaN|inf|Infinity)\b", stdout):
        return "nan/inf in the output"
    values = []
    with contextlib.suppress(ValueError):
        values += _perplexities(json.loads(stdout))
    for m in re.finditer(r"\b(?:ppl|train|valid|test) ([0-9][0-9,]*\.[0-9]+)\b", stdout):
        values.append(float(m.group(1).replace(",", "")))
    bad = [v for v in values if not (math.isfinite(v) and v >= 1.0 - 1e-9)]
    return f"perplexity {bad[0]}" if bad else None


def classify(case: Case, r: dict) -> str:
    err = r["stderr"]
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if r["killed"]:
        return "streamed, cut at the limit" if r["stdout"].strip() else "hang"
    if "Traceback" in err or r["code"] in (99, 98, 97) or r["code"] < 0:
        return "traceback"
    if r["code"] == 0:
        return "nonsense success" if case.invalid or nonsense_output(r["stdout"]) else "success"
    if r["code"] == 1 and len(lines) == 1 and lines[0].startswith("nnlm: internal error"):
        return "internal error"
    if r["code"] == 2 and lines and all(line.startswith("nnlm") for line in lines) and "error" in lines[-1]:
        return "clean error"
    return "messy error"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", help="only these families")
    ap.add_argument("--show", type=int, default=30, help="print this many failing cases")
    ap.add_argument("--timeout", type=float, default=None, help="per case, seconds (default: the case's, 8-30)")
    ap.add_argument("--keep", action="store_true", help="keep the sandbox directory")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="nnlm-fuzz-"))
    tempfile.tempdir = str(root / "tmp")  # crash logs of internal errors land here
    (root / "tmp").mkdir()
    os.environ["TMPDIR"] = tempfile.tempdir
    S = root / "shared"
    os.environ["NNLM_CACHE_DIR"] = str(S / "cache")
    t0 = time.monotonic()
    build_fixtures(S)
    import matplotlib.pyplot  # noqa: F401

    import nnlm.cli  # noqa: F401 - everything a command imports, once, before the forks
    import nnlm.loading  # noqa: F401
    import nnlm.neural.net.features  # noqa: F401
    import nnlm.neural.run.checkpoint  # noqa: F401
    import nnlm.neural.run.train  # noqa: F401
    import nnlm.ngram.arpa  # noqa: F401
    import nnlm.ngram.build  # noqa: F401
    import nnlm.use  # noqa: F401

    mount = root / "tmpfs"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                             capture_output=True).returncode == 0
    families = {"arguments": argument_cases, "arpa": arpa_cases, "run directory": run_dir_cases,
                "corpus": corpus_cases, "special files": special_file_cases,
                "output over input": output_over_input_cases, "stdin": stdin_cases}
    cases: list[Case] = []
    for name, make in families.items():
        if not args.family or name in args.family:
            cases += make(S)
    if mounted and (not args.family or "full disk" in args.family):
        cases += full_disk_cases(S, mount)
    print(f"{len(cases)} cases; fixtures in {time.monotonic() - t0:.1f} s"
          + ("" if mounted else "; full-disk family skipped (mount -t tmpfs not permitted)"), flush=True)

    counts: dict[str, Counter] = defaultdict(Counter)
    changed: Counter = Counter()
    bad_cases: list[str] = []
    devices = {p: snapshot(p) for p in ("/dev/null", "/dev/full")}
    shared_before = snapshot(str(S))
    t1 = time.monotonic()
    try:
        for i, case in enumerate(cases):
            d = root / "cases" / str(i)
            d.mkdir(parents=True)
            if case.setup:
                case.setup(d)
            def sub(text: str, d: Path = d) -> str:
                return text.replace("{D}", str(d))

            argv = [sub(a) for a in case.argv]
            if "{D}/target" in " ".join(case.argv) or (d / "target").exists():
                argv = [a.replace("{T}", (d / "target").read_text()) for a in argv]
            guarded = [sub(p) for p in case.protect]
            kept = [sub(p) for p in case.protect_if_refused]
            before = {p: snapshot(p) for p in guarded + kept}
            r = run_child(argv, case.stdin, d, {k: sub(v) for k, v in case.env.items()},
                          args.timeout or case.timeout)
            outcome = classify(case, r)
            for follow in case.after:
                f = run_child([sub(a) for a in follow], b"", d, {k: sub(v) for k, v in case.env.items()}, 60.0)
                if f["code"] != 0:
                    outcome = "damaged (a later command fails)"
                    r["stderr"] += "\n[after] " + f["stderr"]
            moved = [p for p in guarded + (kept if r["code"] != 0 else []) if snapshot(p) != before[p]]
            moved += [p for p, s in devices.items() if snapshot(p) != s]
            if moved:
                changed[case.family] += 1
            counts[case.family][outcome] += 1
            if outcome not in ("clean error", "success", "streamed, cut at the limit") or moved:
                note = " CHANGED " + ", ".join(moved) if moved else ""
                bad_cases.append(f"[{case.family}] {case.name}: {outcome}{note}"
                                 f"  (exit {r['code']}) {r['stderr'].strip()[-300:]!r}")
            if (i + 1) % 100 == 0:
                print(f"  {i + 1} cases, {time.monotonic() - t1:.0f} s", flush=True)
            shutil.rmtree(d, ignore_errors=True)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mount)])
    if snapshot(str(S)) != shared_before:
        changed["fixtures"] += 1
    seconds = time.monotonic() - t1
    outcomes = ["clean error", "success", "internal error", "streamed, cut at the limit", "traceback", "hang",
                "nonsense success", "messy error", "damaged (a later command fails)"]
    print(f"\n{len(cases)} cases in {seconds:.0f} s ({seconds / max(1, len(cases)) * 1000:.0f} ms a case)\n")
    print("| family | cases | " + " | ".join(outcomes) + " | files changed not owned |")
    print("|---" * (len(outcomes) + 3) + "|")
    total: Counter = Counter()
    for fam, c in counts.items():
        total.update(c)
        print(f"| {fam} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in outcomes) + f" | {changed[fam]} |")
    print(f"| **all** | {sum(total.values())} | " + " | ".join(str(total[o]) for o in outcomes)
          + f" | {sum(changed.values())} |")
    if bad_cases:
        print(f"\n{len(bad_cases)} cases to look at (first {args.show}):")
        for line in bad_cases[: args.show]:
            print("  " + line)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    failed = total["traceback"] + total["hang"] + total["nonsense success"] + sum(changed.values()) \
        + total["damaged (a later command fails)"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
