"""Which corpus a model was built on: the options that rebuild its vocabulary, recorded with the
model (a neural run's run.json, a saved n-gram's config.json, a saved mixture's mixture.json) so that
every command can score a model on its own corpus without being told again."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnlm.data import STDIN_RECORD as STDIN_RECORD  # (how a model records stdin: imported from here)
from nnlm.data.vocab import TEXT_DIR_MIN_COUNT, UNK
from nnlm.errors import NnlmError

OPTION_NAMES = ("corpus", "min_count", "max_vocab", "vocab_from", "heldout")
_SCAN_CHUNK = 1 << 22


def default_min_count(source: str) -> int | None:
    """--min-count when none is given: None for brown (its protocol fixes it); for a text directory
    2 (a <unk> never seen in train would get only the smoothing's leftovers and dominate valid/test),
    or 1 when train.txt already holds <unk> tokens (text prepared like the Penn Treebank's). A text file
    or stream: None, the same rule applied to its train part once it has been read (nnlm.data.corpus_stream)."""
    if source == "brown" or not Path(source).is_dir():
        return None
    train = Path(source) / "train.txt"
    if not train.is_file():
        return None  # load_corpus says what is missing
    needle, tail = UNK.encode(), b""
    try:
        with open(train, "rb") as fh:
            while chunk := fh.read(_SCAN_CHUNK):
                if needle in tail + chunk:
                    return 1
                tail = chunk[-len(needle):]
    except OSError:
        return None  # load_corpus reports the unreadable file
    return TEXT_DIR_MIN_COUNT


def corpus_options(source: str, min_count: int | None = None, max_vocab: int | None = None,
                   vocab_from: str = "train", heldout: int | None = None) -> dict[str, Any]:
    """The options that name a corpus and its vocabulary, the default --min-count resolved (a text
    directory's) and a directory's or a file's path made absolute (a recorded path works from any
    directory). Standard input ('-') is named by its content once read: `settled`."""
    if not source.strip():
        raise NnlmError("--corpus is empty: give 'brown', a directory holding train.txt, valid.txt and test.txt, "
                        "a text file or - for standard input")
    if min_count is None:
        min_count = default_min_count(source)
    if source not in ("brown", "-") and Path(source).exists():
        source = str(Path(source).resolve())
    return {"corpus": source, "min_count": min_count, "max_vocab": max_vocab, "vocab_from": vocab_from,
            "heldout": heldout}


def settled(options: dict[str, Any], corpus) -> dict[str, Any]:
    """`options` as a model records them once `corpus` is loaded: a corpus read from standard input is
    named by its content (`stdin:<sha256>`), which finds its cache again."""
    origin = getattr(corpus, "origin", None)
    return options if origin is None else options | {"corpus": origin}


def read_once(options: dict[str, Any]) -> dict[str, Any]:
    """`options` with standard input ('-') read now and named by its content, for work that loads its
    corpus more than once (tune's trials, reproduce's rows): each later load finds it in the cache."""
    if options.get("corpus") != "-":
        return options
    return settled(options, load_recorded_corpus(options))


def load_recorded_corpus(options: dict[str, Any], use_cache: bool = True):
    """The corpus `options` (from `corpus_options` or a model's record) name."""
    from nnlm.data.corpus import load_corpus

    return load_corpus(options["corpus"], min_count=options.get("min_count"), max_vocab=options.get("max_vocab"),
                       vocab_from=options.get("vocab_from") or "train", use_cache=use_cache,
                       heldout=options.get("heldout"))


def recorded_corpus(model_path: str | Path) -> dict[str, Any] | None:
    """The corpus options a saved model records: a neural run's run.json, an n-gram directory's
    config.json (saved since nnlm records them) or a saved mixture's mixture.json; None for ARPA files and
    older n-gram models."""
    from nnlm.io import JSON_LIMIT, read_input

    path = Path(model_path)
    for name, section in (("run.json", None), ("config.json", "corpus"), ("mixture.json", "corpus")):
        if not (path / name).is_file():
            continue
        try:
            data = json.loads(read_input(path / name, name, JSON_LIMIT))
        except ValueError:
            raise NnlmError(f"{path / name} is not valid JSON") from None
        record = data.get(section) if section and isinstance(data, dict) else data
        if not isinstance(record, dict) or not isinstance(record.get("corpus"), str):
            return None
        return {k: record.get(k) for k in OPTION_NAMES}
    return None
