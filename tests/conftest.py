"""Shared fixtures: the real Brown corpus (from ../shared/nltk_data unless NLTK_DATA says otherwise)
and small synthetic corpora written by the tests themselves."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_NLTK = REPO.parent / "shared" / "nltk_data"

if "NLTK_DATA" not in os.environ and SHARED_NLTK.is_dir():
    os.environ["NLTK_DATA"] = str(SHARED_NLTK)
# One corpus cache for the whole run (and across runs), kept out of the user's home.
os.environ.setdefault("NNLM_CACHE_DIR", str(REPO / ".cache" / "test-corpora"))
# The exact pass's products by torch in every test but tests/test_exact_product.py: which BLAS is faster is a
# per-host measurement (nnlm.neural.lm.exact_product), and the tests compare numbers across processes and runs.
os.environ["NNLM_EXACT_PRODUCT"] = "torch"


def _memory_temp_dir() -> str | None:
    """A directory on a RAM file system (tmpfs) for the tests' temporary files, or None.

    Why: nnlm writes every file atomically with an fsync (nnlm.io), and the out-of-core counting maps
    and flushes its .npy files a slice at a time (msync). On a disk file system shared with other jobs
    each costs milliseconds (measured here: 6.5 ms per fsync on /tmp, 0.02 ms on /dev/shm), and the
    tests do tens of thousands of them: one external-counting case took 97 s on /tmp, 22 s on /dev/shm.
    The code paths are the same on either. An explicit TMPDIR (or pytest's --basetemp) is kept."""
    if "TMPDIR" in os.environ or "PYTEST_DEBUG_TEMPROOT" in os.environ:
        return None
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            if not any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts):
                return None
        path = Path("/dev/shm") / f"nnlm-tests-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return None
    return str(path)


# Training in the tests draws curve.png when a run ends, not after every epoch (nnlm.neural.run.checkpoint), in this
# process, its rank processes and subprocesses: no test looks at a mid-run curve (but
# test_the_curve_is_drawn_after_each_epoch_unless_only_the_final_one_is_asked, which sets the default back),
# and drawing one cost more than the tiny nets' epochs (103 of 280 CPU s of the training tests). metrics.jsonl
# is still written after every epoch, and every run's final curve drawn from its whole history.
os.environ["NNLM_CURVE_EVERY_EPOCH"] = "0"

_TMP = _memory_temp_dir()
if _TMP is not None:  # this process (pytest's tmp_path, tempfile) and the subprocesses the tests start
    os.environ["TMPDIR"] = _TMP
    tempfile.tempdir = None


# What launch_local's fork server imports once per test process besides what nnlm asks for, so that the
# ranks it forks have it loaded instead of importing it each: a test process launches ranks dozens of times
# (tests/test_parallel.py alone ~40 launches of 2-3 ranks), and every rank imported nnlm's training modules,
# torch._dynamo (imported by torch.optim's first optimizer: 2.1 CPU s) and matplotlib (curve.png: 0.9 CPU s).
# Module names only: the server imports them from its own sys.path (site-packages), not the tests'.
RANK_PRELOAD = ["nnlm.neural.parallel.ranks", "nnlm.neural.parallel.vocab_parallel", "nnlm.loading", "torch._dynamo",
                "matplotlib.pyplot"]


def _preload_in_the_rank_fork_server() -> None:
    """Add RANK_PRELOAD to what launch_local's fork server imports.

    launch_local names the server's preload list just before each launch (the server starts at the first
    and serves every later one in this process); multiprocessing's context looks the setter up in
    multiprocessing.forkserver at each call, so wrapping it there extends the list. Importing changes only
    what a rank finds loaded: the server still runs no torch kernel, so its children inherit no OpenMP
    thread pool (why launch_local uses a fork server). If the standard library stops looking the setter up
    there, the server is simply the plain one again."""
    import multiprocessing.forkserver as forkserver

    plain = forkserver.set_forkserver_preload

    def with_test_preload(module_names: list[str]) -> None:
        plain([*module_names, *(name for name in RANK_PRELOAD if name not in module_names)])

    forkserver.set_forkserver_preload = with_test_preload


_preload_in_the_rank_fork_server()


@pytest.fixture(scope="session")
def brown():
    from nnlm.data import load_corpus

    return load_corpus("brown")


@pytest.fixture(scope="session")
def brown_token_list() -> list[str]:
    """nnlm.data.corpus.brown_tokens(): the Brown token stream parsed from NLTK's files (~5 CPU s), once per
    test process for the tests that check the cached corpus against it (they only read it)."""
    from nnlm.data import corpus

    return corpus.brown_tokens()


class SessionEnded(Exception):
    """A session that ends mid-call (the machine reclaimed): raised by `dies_in_epoch_2`."""


def dies_in_epoch_2(line: str) -> None:
    """A `log` for `nnlm.reproduce`: the session ends at the first line of a second epoch."""
    if "epoch 2:" in line:
        raise SessionEnded


def write_text_corpus(root: Path, train: str, valid: str, test: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (root / f"{name}.txt").write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def toy_dir(tmp_path: Path) -> Path:
    """A tiny corpus in the user text-directory format."""
    return write_text_corpus(
        tmp_path / "toy",
        train="the cat sat on the mat\nthe dog sat on the log\na cat and a dog\n",
        valid="the cat sat on the log\n",
        test="a dog sat on the mat\n",
    )


def random_corpus_texts() -> tuple[str, str, str]:
    """train, valid, test of a synthetic corpus with a skewed (Zipf-like) word distribution and some structure."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    p = 1.0 / np.arange(1, 61)
    p /= p.sum()

    def text(lines: int) -> str:
        out = []
        for _ in range(lines):
            n = rng.integers(3, 15)
            seq = rng.choice(60, size=n, p=p)
            seq[1::2] = (seq[0::2][: len(seq[1::2])] + 1) % 60  # bigram structure
            out.append(" ".join(words[i] for i in seq))
        return "\n".join(out) + "\n"

    return text(300), text(60), text(60)


@pytest.fixture
def random_corpus(tmp_path: Path):
    """The synthetic corpus, written to tmp_path / "rand" and loaded."""
    from nnlm.data import load_corpus

    root = write_text_corpus(tmp_path / "rand", *random_corpus_texts())
    return load_corpus(str(root), use_cache=False)


@pytest.fixture(scope="session")
def neural_run(tmp_path_factory) -> tuple[Path, Path]:
    """(run directory, corpus directory): a tiny NPLM (n=3, h=8, m=4) trained 2 epochs on the
    synthetic corpus (about 2 s); shared by the tests that only read it."""
    from nnlm.neural.run.train import train

    root = tmp_path_factory.mktemp("neural")
    corpus_dir = write_text_corpus(root / "rand", *random_corpus_texts())
    run = root / "run"
    train(run, {"corpus": str(corpus_dir), "preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16,
                "threads": 1, "epochs": 2}, progress=False, log=lambda s: None)
    return run, corpus_dir
