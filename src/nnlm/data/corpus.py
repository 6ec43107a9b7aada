"""Corpus: a train/valid/test stream of token ids, built once and cached as integer arrays.

Three kinds of source:
- `brown`: this project's `bengio2003` protocol (see docs/protocol.md): NLTK's Brown corpus,
  `<p>` after every paragraph, `<text>` after every text, 800,000 / 200,000 / rest split,
  tokens of whole-stream frequency <= 3 mapped to `<unk>`.
- a directory with train.txt, valid.txt, test.txt (UTF-8, whitespace tokens, one paragraph
  per line; each line ends with `<p>`).
- one text file, plain or gzip / xz / bzip2, or `-` for standard input: read once, valid and test
  cut from its end by the held-out rule (nnlm.data.corpus_stream).

The three splits are consecutive pieces of one stream: a model of order n predicts the first
n-1 tokens of a split from the end of the split before it (see `nnlm.lm.contexts`).

Memory stays O(|V| + ids) whatever the corpus size: text files are read in blocks twice (count,
then encode), the ids go straight into the cache's `ids.npy`, and a cached corpus is memory-mapped.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nnlm.data import STDIN, STDIN_RECORD
from nnlm.data.text_stream import token_blocks
from nnlm.data.vocab import PARAGRAPH, TEXT, UNK, Vocabulary, start_token
from nnlm.errors import NnlmError
from nnlm.io import JSON_LIMIT, atomic_dir, read_input, require_regular

SPLITS = ("train", "valid", "test")
CACHE_VERSION = 2  # 2: one memory-mapped ids.npy (1: splits.npz)
BROWN_SIZES = (800_000, 200_000)  # train, valid; test = the rest
BROWN_MIN_COUNT = 4  # "tokens of frequency <= 3 become <unk>"


@dataclass(frozen=True)
class Corpus:
    """Token ids of the three splits (int32), their vocabulary, and the id that pads the stream's start.
    The ids, the vocabulary and the pad id are fields fixed when the corpus is made (`pad_id` included): a
    trainer takes them as they are, without calling back."""

    name: str
    vocab: Vocabulary
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    pad_token: str
    whole: np.ndarray | None = field(default=None, repr=False, compare=False)  # train+valid+test, if one array
    origin: str | None = field(default=None, compare=False)  # how a model records it, if not by --corpus: stdin's hash
    pad_id: int = field(init=False, repr=False, compare=False)  # vocab.id(pad_token)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pad_id", self.vocab.id(self.pad_token))

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise NnlmError(f"unknown split {name!r}; choose from {', '.join(SPLITS)}")
        return getattr(self, name)

    def stream(self) -> np.ndarray:
        """The whole corpus as one array: train, then valid, then test (no copy when it is one array)."""
        if self.whole is not None:
            return self.whole
        return np.concatenate([self.train, self.valid, self.test])

    def split_offset(self, name: str) -> int:
        """Where split `name` starts in `stream()`."""
        return {"train": 0, "valid": len(self.train), "test": len(self.train) + len(self.valid)}[name]

    def stats(self) -> dict:
        unk = self.vocab.unk_id
        splits = {s: {"tokens": int(len(self.split(s))), "unk": _count(self.split(s), unk)} for s in SPLITS}
        return {"corpus": self.name, "vocab": len(self.vocab), "splits": splits,
                "tokens": sum(v["tokens"] for v in splits.values()),
                "unk": sum(v["unk"] for v in splits.values())}


def _count(ids: np.ndarray, value: int, chunk: int = 1 << 24) -> int:
    """How many of `ids` equal `value`, a chunk at a time (no bool array as long as a large corpus)."""
    return sum(int(np.count_nonzero(ids[lo:lo + chunk] == value)) for lo in range(0, len(ids), chunk))


def cache_root() -> Path:
    return Path(os.environ.get("NNLM_CACHE_DIR") or Path.home() / ".cache" / "nnlm")


def load_corpus(
    source: str,
    *,
    min_count: int | None = None,
    max_vocab: int | None = None,
    vocab_from: str = "train",
    use_cache: bool = True,
    heldout: int | None = None,
) -> Corpus:
    """Load `brown`, a directory of train/valid/test.txt, a text file or '-' (standard input), from the
    cache when it is there. `heldout`: a file's or a stream's valid and test size in tokens (0: none)."""
    planner: Callable[[], CorpusPlan]
    if source != "brown" and not Path(source).is_dir():
        if source != "-" and not source.startswith(STDIN_RECORD) and not os.path.lexists(source):
            raise NnlmError(f"unknown corpus {source!r}: no such file or directory; give 'brown', a directory holding "
                            "train.txt, valid.txt and test.txt, a text file (.gz, .xz, .bz2 too) or - for "
                            "standard input")
        if source != "-" and not source.startswith(STDIN_RECORD) and not os.path.exists(source):
            raise NnlmError(f"corpus {source!r} is a symbolic link that leads nowhere (a dangling link or a loop)")
        return _load_stream_corpus(source, min_count, max_vocab, vocab_from, heldout, use_cache)
    if heldout is not None:
        raise NnlmError("--heldout and --no-heldout are for a corpus file or standard input; brown and text "
                        "directories have their splits")
    if source == "brown":
        if min_count is not None or max_vocab is not None or vocab_from != "train":
            raise NnlmError("the brown corpus follows the fixed bengio2003 protocol; "
                            "--min-count, --max-vocab and --vocab-from are for text directories")
        key = {"source": "brown", "protocol": "bengio2003", "file": _file_id(_brown_root())}
        planner = _build_brown
    else:
        root = Path(source)
        if vocab_from not in ("train", "all"):
            raise NnlmError(f"--vocab-from must be 'train' or 'all', got {vocab_from!r}")
        files = [root / f"{s}.txt" for s in SPLITS]
        for f in files:
            if not f.is_file():
                raise NnlmError(f"corpus directory {root} has no {f.name}")
        key = {"source": str(root.resolve()), "files": [_file_id(f) for f in files],
               "min_count": min_count or 1, "max_vocab": max_vocab, "vocab_from": vocab_from}

        def planner() -> CorpusPlan:
            return _plan_text_dir(root, min_count or 1, max_vocab, vocab_from)

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
    plan = planner()  # reads every input once: bad input fails here, before any cache is touched
    if use_cache:
        try:
            _write_cache(cache_dir, plan, key, replace=damaged)
            return _read_cache(cache_dir)
        except NnlmError as exc:  # e.g. a full disk: the corpus is built in memory, only the cache is missing
            print(f"nnlm: note: corpus cache not written ({exc})", file=sys.stderr)
    ids = np.empty(sum(plan.sizes), dtype=np.int32)
    plan.fill(ids)
    return _split(plan.name, plan.vocab, ids, plan.sizes, plan.pad_token)


@dataclass(frozen=True)
class CorpusPlan:
    """What the first pass over the input found: the vocabulary and split sizes; `fill(out)` then
    writes all ids, train then valid then test, into an int32 array of sum(sizes) (e.g. a memmap)."""

    name: str
    vocab: Vocabulary
    sizes: tuple[int, int, int]
    pad_token: str
    fill: Callable[[np.ndarray], None]
    origin: str | None = None  # Corpus.origin


def _split(name: str, vocab: Vocabulary, ids: np.ndarray, sizes: tuple[int, ...], pad_token: str,
           origin: str | None = None) -> Corpus:
    a, b = sizes[0], sizes[0] + sizes[1]
    return Corpus(name, vocab, ids[:a], ids[a:b], ids[b:], pad_token=pad_token, whole=ids, origin=origin)


def _file_id(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_cache(cache_dir: Path, plan: CorpusPlan, key: dict, replace: bool = False) -> None:
    if replace and os.path.lexists(cache_dir) and (cache_dir.is_symlink() or not cache_dir.is_dir()):
        os.unlink(cache_dir)  # a damaged entry that is not a directory: the cache's own name, nothing else's
    with atomic_dir(cache_dir, replace=replace) as tmp:
        plan.vocab.save(tmp / "vocab.json")
        ids = np.lib.format.open_memmap(tmp / "ids.npy", mode="w+", dtype=np.int32, shape=(sum(plan.sizes),))
        _reserve(tmp / "ids.npy")
        plan.fill(ids)
        ids.flush()
        del ids
        (tmp / "meta.json").write_text(json.dumps({"name": plan.name, "pad_token": plan.pad_token,
                                                   "sizes": list(plan.sizes), "key": key,
                                                   "origin": plan.origin}))


def _reserve(path: Path) -> None:
    """Give the memory-mapped file its blocks now: a full disk is then an OSError here (one line),
    not a SIGBUS when a page of the sparse file is first written through the map."""
    with open(path, "r+b") as fh:
        os.posix_fallocate(fh.fileno(), 0, os.fstat(fh.fileno()).st_size)


def _read_cache(cache_dir: Path) -> Corpus:
    """The cached corpus, its ids memory-mapped copy-on-write (pages are read when used)."""
    try:
        meta = json.loads(read_input(cache_dir / "meta.json", "cache file", JSON_LIMIT))
        vocab = Vocabulary.load(cache_dir / "vocab.json")
        require_regular(cache_dir / "ids.npy", "cache file")
        ids = np.load(cache_dir / "ids.npy", mmap_mode="c", allow_pickle=False)
        sizes = tuple(int(n) for n in meta["sizes"])
        if ids.dtype != np.int32 or ids.ndim != 1 or len(sizes) != 3 or min(sizes) < 0 or len(ids) != sum(sizes):
            raise ValueError("ids.npy does not match meta.json")
        if len(ids) and (ids.min() < 0 or ids.max() >= len(vocab)):
            raise ValueError("ids.npy holds ids outside the vocabulary")
        origin = meta.get("origin")
        if origin is not None and not isinstance(origin, str):
            raise ValueError("meta.json's origin is not a string")
        return _split(meta["name"], vocab, ids, sizes, meta["pad_token"], origin)
    except Exception as exc:  # OSError, ValueError, KeyError, TypeError, NnlmError...: a damaged cache
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise NnlmError(f"unreadable corpus cache {cache_dir} ({reason})") from None


# --- one text file or standard input (read by nnlm.data.corpus_stream) ---------------------

def _load_stream_corpus(source: str, min_count: int | None, max_vocab: int | None, vocab_from: str,
                       heldout: int | None, use_cache: bool) -> Corpus:
    """The corpus of a text file, of standard input ('-'), or of a recorded stdin corpus ('stdin:<sha256>')."""
    if vocab_from not in ("train", "all"):
        raise NnlmError(f"--vocab-from must be 'train' or 'all', got {vocab_from!r}")
    options = {"min_count": min_count, "max_vocab": max_vocab, "vocab_from": vocab_from, "heldout": heldout,
               "version": CACHE_VERSION}
    if source.startswith(STDIN_RECORD):
        return _recorded_stdin(source[len(STDIN_RECORD):], options)
    key = None
    if source != STDIN:
        key = {"source": str(Path(source).resolve()), "file": _file_id(Path(source))} | options
        cached = _cached(key) if use_cache else None
        if cached is not None:
            return cached
    from nnlm.data.corpus_stream import SpoolDirectory, plan_stream  # one file's streamed read: only here

    with SpoolDirectory(cache_root()) as spool_dir:
        found = plan_stream(source, spool_dir, min_count, max_vocab, vocab_from, heldout)
        plan = CorpusPlan(found.name, found.vocab, found.sizes, found.pad_token, found.fill, found.origin)
        if key is None:  # standard input: known by its content, now that it has been read
            key = {"source": "stdin", "sha256": found.sha256} | options
            cached = _cached(key) if use_cache else None
            if cached is not None:
                return cached
        if use_cache:
            cache_dir = _cache_dir(key)
            try:
                _write_cache(cache_dir, plan, key, replace=os.path.lexists(cache_dir))
                return _read_cache(cache_dir)
            except NnlmError as exc:  # e.g. a full disk: the corpus is built in memory, only the cache is missing
                print(f"nnlm: note: corpus cache not written ({exc})", file=sys.stderr)
        ids = np.empty(sum(plan.sizes), dtype=np.int32)
        plan.fill(ids)
        return _split(plan.name, plan.vocab, ids, plan.sizes, plan.pad_token, plan.origin)


def _cache_dir(key: dict) -> Path:
    return cache_root() / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _cached(key: dict) -> Corpus | None:
    cache_dir = _cache_dir(key)
    if not os.path.lexists(cache_dir):
        return None
    try:
        return _read_cache(cache_dir)
    except NnlmError as exc:  # a cache is only a cache: build it again
        print(f"nnlm: note: {exc}; rebuilding it", file=sys.stderr)
        return None


def _recorded_stdin(sha256: str, options: dict) -> Corpus:
    cache_dir = _cache_dir({"source": "stdin", "sha256": sha256} | options)
    if not os.path.lexists(cache_dir):
        raise NnlmError(f"this corpus was read from standard input (sha256 {sha256[:16]}...) and its cache is gone "
                        f"from {cache_root()}: pipe the same text again with --corpus - (and the same corpus options)")
    return _read_cache(cache_dir)


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


def _build_brown() -> CorpusPlan:
    """Brown is small and fixed (1.2M tokens): its token list is held while the ids are written."""
    tokens = brown_tokens()
    vocab = Vocabulary.from_counts(Counter(tokens), min_count=BROWN_MIN_COUNT, specials=(UNK, PARAGRAPH, TEXT))
    sizes = (BROWN_SIZES[0], BROWN_SIZES[1], len(tokens) - sum(BROWN_SIZES))

    def fill(out: np.ndarray) -> None:
        out[:] = vocab.encode(tokens)

    return CorpusPlan("brown", vocab, sizes, start_token(vocab), fill)


# --- a user's text directory ----------------------------------------------------------------

def _plan_text_dir(root: Path, min_count: int, max_vocab: int | None, vocab_from: str) -> CorpusPlan:
    """First pass: count the words (of train, or of all splits) and the tokens of each split."""
    counts: Counter[str] = Counter()
    sizes = []
    for split in SPLITS:
        path, n = root / f"{split}.txt", 0
        for tokens in token_blocks(path):
            n += len(tokens)
            if vocab_from == "all" or split == "train":
                counts.update(tokens)
        if n == 0:
            raise NnlmError(f"{path} is empty: it holds no tokens")
        sizes.append(n)
    vocab = Vocabulary.from_counts(counts, min_count=min_count, max_size=max_vocab)

    def fill(out: np.ndarray) -> None:
        at, end = 0, 0
        for split, size in zip(SPLITS, sizes, strict=True):
            end += size
            for tokens in token_blocks(root / f"{split}.txt"):
                if at + len(tokens) > end:
                    break
                out[at:at + len(tokens)] = vocab.encode(tokens)
                at += len(tokens)
            if at != end:
                raise NnlmError(f"{root / split}.txt changed while it was read; run again")

    return CorpusPlan(root.name or str(root), vocab, (sizes[0], sizes[1], sizes[2]), start_token(vocab), fill)
