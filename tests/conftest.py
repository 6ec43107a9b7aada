"""Shared fixtures: the real Brown corpus (from ../shared/nltk_data unless NLTK_DATA says otherwise)
and small synthetic corpora written by the tests themselves."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_NLTK = REPO.parent / "shared" / "nltk_data"

if "NLTK_DATA" not in os.environ and SHARED_NLTK.is_dir():
    os.environ["NLTK_DATA"] = str(SHARED_NLTK)
# One corpus cache for the whole run (and across runs), kept out of the user's home.
os.environ.setdefault("NNLM_CACHE_DIR", str(REPO / ".cache" / "test-corpora"))


@pytest.fixture(scope="session")
def brown():
    from nnlm.data import load_corpus

    return load_corpus("brown")


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
    from nnlm.neural.train import train

    root = tmp_path_factory.mktemp("neural")
    corpus_dir = write_text_corpus(root / "rand", *random_corpus_texts())
    run = root / "run"
    train(run, {"corpus": str(corpus_dir), "preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16,
                "threads": 1, "epochs": 2}, progress=False, log=lambda s: None)
    return run, corpus_dir
