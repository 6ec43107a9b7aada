"""Corpus: a train/valid/test stream of token ids, built once and cached as integer arrays.

Two sources:
- `brown`: this project's `bengio2003` protocol (see docs/protocol.md): NLTK's Brown corpus,
  `<p>` after every paragraph, `<text>` after every text, 800,000 / 200,000 / rest split,
  tokens of whole-stream frequency <= 3 mapped to `<unk>`.
- a directory with train.txt, valid.txt, test.txt (UTF-8, whitespace tokens, one paragraph
  per line; each line ends with `<p>`).

The three splits are consecutive pieces of one stream: a model of order n predicts the first
n-1 tokens of a split from the end of the split before it (see `nnlm.lm.contexts`).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnlm.data.vocab import PARAGRAPH, TEXT, UNK, Vocabulary, start_token
from nnlm.errors import NnlmError
from nnlm.io import JSON_LIMIT, TEXT_LIMIT, atomic_dir, read_input, require_regular

SPLITS = ("train", "valid", "test")
CACHE_VERSION = 1
BROWN_SIZES = (800_000, 200_000)  # train, valid; test = the rest
BROWN_MIN_COUNT = 4  # "tokens of frequency <= 3 become <unk>"


@dataclass(frozen=True)
class Corpus:
    """Token ids of the three splits (int32), their vocabulary, and the id that pads the stream's start."""

    name: str
    vocab: Vocabulary
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    pad_token: str

    @property
    def pad_id(self) -> int:
        return self.vocab.id(self.pad_token)

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise NnlmError(f"unknown split {name!r}; choose from {', '.join(SPLITS)}")
        return getattr(self, name)

    def stream(self) -> np.ndarray:
        """The whole corpus as one array: train, then valid, then test."""
        return np.concatenate([self.train, self.valid, self.test])

    def split_offset(self, name: str) -> int:
        """Where split `name` starts in `stream()`."""
        return {"train": 0, "valid": len(self.train), "test": len(self.train) + len(self.valid)}[name]

    def stats(self) -> dict:
        unk = self.vocab.unk_id
        splits = {s: {"tokens": int(len(self.split(s))), "unk": int((self.split(s) == unk).sum())} for s in SPLITS}
        return {"corpus": self.name, "vocab": len(self.vocab), "splits": splits,
                "tokens": sum(v["tokens"] for v in splits.values()),
                "unk": sum(v["unk"] for v in splits.values())}


def cache_root() -> Path:
    return Path(os.environ.get("NNLM_CACHE_DIR") or Path.home() / ".cache" / "nnlm")


def load_corpus(
    source: str,
    *,
    min_count: int | None = None,
    max_vocab: int | None = None,
    vocab_from: str = "train",
    use_cache: bool = True,
) -> Corpus:
    """Load `brown` or a directory of train/valid/test.txt, from the cache when it is there."""
    if source == "brown":
        if min_count is not None or max_vocab is not None or vocab_from != "train":
            raise NnlmError("the brown corpus follows the fixed bengio2003 protocol; "
                            "--min-count, --max-vocab and --vocab-from are for text directories")
        key = {"source": "brown", "protocol": "bengio2003", "file": _file_id(_brown_root())}
        builder = _build_brown
    else:
        root = Path(source)
        if not root.is_dir():
            raise NnlmError(f"unknown corpus {source!r}: give 'brown' or a directory holding "
                            "train.txt, valid.txt and test.txt")
        if vocab_from not in ("train", "all"):
            raise NnlmError(f"--vocab-from must be 'train' or 'all', got {vocab_from!r}")
        files = [root / f"{s}.txt" for s in SPLITS]
        for f in files:
            if not f.is_file():
                raise NnlmError(f"corpus directory {root} has no {f.name}")
        key = {"source": str(root.resolve()), "files": [_file_id(f) for f in files],
               "min_count": min_count or 1, "max_vocab": max_vocab, "vocab_from": vocab_from}

        def builder() -> Corpus:
            return _build_text_dir(root, min_count or 1, max_vocab, vocab_from)

    key["version"] = CACHE_VERSION
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    cache_dir = cache_root() / digest
    damaged = False
    if use_cache and os.path.lexists(cache_dir):
        try:
            return _read_cache(cache_dir)
        except NnlmError as exc:  # a cache is only a cache: build it again
            print(f"nnlm: note: {exc}; rebuilding it", file=sys.stderr)
            damaged = True
    corpus = builder()
    if use_cache:
        try:
            _write_cache(cache_dir, corpus, key, replace=damaged)
        except NnlmError as exc:  # e.g. a full disk: the corpus is built, only the cache is missing
            print(f"nnlm: note: corpus cache not written ({exc})", file=sys.stderr)
    return corpus


def _file_id(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_cache(cache_dir: Path, corpus: Corpus, key: dict, replace: bool = False) -> None:
    if replace and os.path.lexists(cache_dir) and (cache_dir.is_symlink() or not cache_dir.is_dir()):
        os.unlink(cache_dir)  # a damaged entry that is not a directory: the cache's own name, nothing else's
    with atomic_dir(cache_dir, replace=replace) as tmp:
        corpus.vocab.save(tmp / "vocab.json")
        np.savez(tmp / "splits.npz", train=corpus.train, valid=corpus.valid, test=corpus.test)
        (tmp / "meta.json").write_text(json.dumps({"name": corpus.name, "pad_token": corpus.pad_token, "key": key}))


def _read_cache(cache_dir: Path) -> Corpus:
    try:
        meta = json.loads(read_input(cache_dir / "meta.json", "cache file", JSON_LIMIT))
        vocab = Vocabulary.load(cache_dir / "vocab.json")
        require_regular(cache_dir / "splits.npz", "cache file")
        with np.load(cache_dir / "splits.npz", allow_pickle=False) as arrays:
            splits = {s: arrays[s] for s in SPLITS}
        corpus = Corpus(meta["name"], vocab, pad_token=meta["pad_token"], **splits)
        for s in SPLITS:
            ids = splits[s]
            if ids.dtype != np.int32 or ids.ndim != 1 or (len(ids) and (ids.min() < 0 or ids.max() >= len(vocab))):
                raise ValueError(f"split {s} holds ids outside the vocabulary")
        return corpus
    except Exception as exc:  # BadZipFile, OSError, ValueError, KeyError, NnlmError...: a damaged cache
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise NnlmError(f"unreadable corpus cache {cache_dir} ({reason})") from None


# --- Brown, bengio2003 protocol -------------------------------------------------------------

def _brown_root() -> Path:
    import nltk

    try:
        return Path(str(nltk.data.find("corpora/brown.zip")))
    except LookupError:
        pass
    try:
        return Path(str(nltk.data.find("corpora/brown")))
    except LookupError:
        looked = os.pathsep.join(nltk.data.path)
        raise NnlmError(f"the Brown corpus is not in NLTK's data path ({looked}); get it with "
                        "`python -m nltk.downloader brown` or point NLTK_DATA at a directory "
                        "holding corpora/brown.zip") from None


def brown_tokens() -> list[str]:
    """The bengio2003 token stream: paragraph words, `<p>`; after each text's last paragraph, `<text>`."""
    from nltk.corpus.reader import CategorizedTaggedCorpusReader

    root = _brown_root()
    if root.suffix == ".zip":
        import nltk

        root = nltk.data.find("corpora/brown.zip/brown/")
    reader = CategorizedTaggedCorpusReader(root, r"c[a-z]\d\d", cat_file="cats.txt",
                                           tagset="brown", encoding="ascii")
    tokens: list[str] = []
    for fileid in reader.fileids():
        for paragraph in reader.paras(fileid):
            for sentence in paragraph:
                tokens.extend(sentence)
            tokens.append(PARAGRAPH)
        tokens.append(TEXT)
    return tokens


def _build_brown() -> Corpus:
    tokens = brown_tokens()
    vocab = Vocabulary.from_counts(Counter(tokens), min_count=BROWN_MIN_COUNT, specials=(UNK, PARAGRAPH, TEXT))
    ids = vocab.encode(tokens)
    a, b = BROWN_SIZES[0], BROWN_SIZES[0] + BROWN_SIZES[1]
    return Corpus("brown", vocab, ids[:a], ids[a:b], ids[b:], pad_token=start_token(vocab))


# --- a user's text directory ----------------------------------------------------------------

def read_text_file(path: Path) -> list[str]:
    """Whitespace tokens of a UTF-8 file, `<p>` at the end of every non-blank line."""
    raw = read_input(path, "corpus file", TEXT_LIMIT)  # NUL bytes: refused as binary
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NnlmError(f"{path} is not valid UTF-8 (bad byte at offset {exc.start})") from None
    tokens: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if words:
            tokens.extend(words)
            tokens.append(PARAGRAPH)
    if not tokens:
        raise NnlmError(f"{path} is empty: it holds no tokens")
    return tokens


def _build_text_dir(root: Path, min_count: int, max_vocab: int | None, vocab_from: str) -> Corpus:
    split_tokens = {s: read_text_file(root / f"{s}.txt") for s in SPLITS}
    counted = split_tokens["train"] if vocab_from == "train" else [t for s in SPLITS for t in split_tokens[s]]
    vocab = Vocabulary.from_counts(Counter(counted), min_count=min_count, max_size=max_vocab)
    ids = {s: vocab.encode(toks) for s, toks in split_tokens.items()}
    return Corpus(root.name or str(root), vocab, pad_token=start_token(vocab), **ids)
