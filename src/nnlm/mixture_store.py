"""A mixture saved as one model directory (`nnlm mix --save DIR`), which `nnlm.load` reads back as a Mixture.

    mixture.json   format, the weights [buckets, parts], each part's entry, the bucket rule, the corpus record
    vocab.json     the mixture's vocabulary (every part's)
    part<k>/       part k in its own format: a saved n-gram directory, or a neural run's run.json, vocab.json and
                   model.safetensors (what `load_neural` reads; not its checkpoints or metrics)
    buckets.npz    for weights per context-frequency bucket: the counts that rule reads (nnlm.ngram.context_buckets)

Everything the mixture needs is inside the directory and named relative to it, so it can be moved or copied as a
whole; a part's entry that points outside it (an absolute path, '..', a link leading out) is refused. Nothing is
unpickled: JSON, safetensors and npz read with allow_pickle=False. A uniform part has no files (it is rebuilt from
the vocabulary), and a part that is itself a mixture is refused (give its parts).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.capabilities import Saveable
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import JSON_LIMIT, atomic_dir, read_input, require_regular
from nnlm.lm import LanguageModel
from nnlm.mixture import Mixture, one_bucket
from nnlm.ngram.context_buckets import ContextBuckets
from nnlm.ngram.simple import UniformModel

FORMAT = "nnlm-mixture/1"
MANIFEST, VOCAB, BUCKETS = "mixture.json", "vocab.json", "buckets.npz"
RUN_FILES = ("run.json", "vocab.json", "model.safetensors")  # what nnlm.neural.run.checkpoint.load_neural reads
_PART_NAME = re.compile(r"part\d{1,4}", re.ASCII)


def is_saved_mixture(directory: Path) -> bool:
    """Whether `directory` holds a mixture nnlm saved (so `--save` may replace it)."""
    try:
        return json.loads(read_input(directory / MANIFEST, "mixture", JSON_LIMIT)).get("format") == FORMAT
    except (NnlmError, ValueError, AttributeError):
        return False


def _part_plan(k: int, model: LanguageModel, source: str | Path | None) -> dict[str, Any]:
    """How part k is written: its manifest entry, and what writes its files (checked before anything is written)."""
    name = f"part{k}"
    if isinstance(model, Mixture):
        raise NnlmError(f"part {k + 1} is itself a mixture: mix its parts instead of saving a mixture of mixtures")
    if isinstance(model, UniformModel):
        return {"entry": {"kind": "uniform"}}
    if isinstance(model, Saveable):
        return {"entry": {"dir": name, "kind": model.kind_name()}, "write": lambda d: model.save(d / name)}
    run = Path(source) if source is not None else None
    if run is not None and all((run / f).is_file() for f in RUN_FILES):
        def copy(d: Path) -> None:
            (d / name).mkdir()
            for f in RUN_FILES:
                shutil.copyfile(run / f, d / name / f)
        return {"entry": {"dir": name, "kind": model.kind_name()}, "write": copy}
    raise NnlmError(f"part {k + 1} ({model.kind_name()}) cannot be saved: a neural part needs the run directory it "
                    "was loaded from")


def save_mixture(model: Mixture, directory: Path | str, sources: Sequence[str | Path | None] | None = None,
                 corpus: dict[str, Any] | None = None) -> None:
    """Write `model` to `directory` in one atomic step. `sources[k]`: where part k was loaded from (a neural part
    is copied from its run directory); `corpus` (nnlm.data.provenance.corpus_options): what it was mixed on."""
    from nnlm.ngram.store import save_target

    directory = save_target(Path(directory), is_saved_mixture)
    sources = list(sources) if sources is not None else [None] * len(model.components)
    plans = [_part_plan(k, m, s) for k, (m, s) in enumerate(zip(model.components, sources, strict=True))]
    buckets = model.bucketer
    if buckets is not one_bucket and not isinstance(buckets, ContextBuckets):
        raise NnlmError("this mixture's bucket rule cannot be saved (only one bucket or context-frequency buckets)")
    manifest = {"format": FORMAT, "vocab_size": len(model.vocab), "vocab_fingerprint": model.vocab.fingerprint,
                "weights": model.weights.tolist(), "parts": [p["entry"] for p in plans],
                "buckets": None if buckets is one_bucket else {"kind": "context-frequency", "file": BUCKETS,
                                                                "train_tokens": buckets.train_tokens},
                "corpus": corpus}
    with atomic_dir(directory, replace=True) as tmp:
        for plan in plans:
            if "write" in plan:
                plan["write"](tmp)
        model.vocab.save(tmp / VOCAB)
        if isinstance(buckets, ContextBuckets):
            np.savez(tmp / BUCKETS, **buckets.arrays())
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _manifest(directory: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(read_input(directory / MANIFEST, "mixture", JSON_LIMIT))
    except ValueError:
        raise NnlmError(f"{directory / MANIFEST} is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise NnlmError(f"{directory / MANIFEST} is not a saved nnlm mixture (format {FORMAT})")
    parts, weights = manifest.get("parts"), manifest.get("weights")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise NnlmError(f"{directory / MANIFEST}: 'parts' must be a non-empty list of part entries")
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        w = np.zeros(0)
    if w.ndim != 2 or w.shape[1] != len(parts) or not np.isfinite(w).all():
        raise NnlmError(f"{directory / MANIFEST}: 'weights' must be a table [buckets, {len(parts)}] of numbers")
    manifest["weights"] = w
    return manifest


def _part_dir(directory: Path, entry: dict[str, Any]) -> Path:
    """The directory of a part, which must be a plain part<k> inside the mixture's (links resolved)."""
    name = entry.get("dir")
    if not isinstance(name, str) or _PART_NAME.fullmatch(name) is None:
        raise NnlmError(f"{directory / MANIFEST}: a part's 'dir' must be a name like part0, got {name!r}")
    real, home = Path(os.path.realpath(directory / name)), Path(os.path.realpath(directory))
    if real.parent != home or not real.is_dir():
        raise NnlmError(f"{directory}: part {name} is missing or lies outside the mixture's directory")
    return real


def load_mixture(directory: Path | str, load_part: Callable[[Path], LanguageModel]) -> Mixture:
    """The Mixture `save_mixture` wrote to `directory`, each part read by `load_part` (nnlm.loading's loaders of
    n-gram and neural run directories: a part is never a mixture)."""
    directory = Path(directory)
    manifest = _manifest(directory)
    vocab = Vocabulary.load(directory / VOCAB)
    if vocab.fingerprint != manifest.get("vocab_fingerprint"):
        raise NnlmError(f"{directory}: vocab.json does not match {MANIFEST}")
    parts = [UniformModel(vocab) if entry.get("kind") == "uniform" and "dir" not in entry
             else load_part(_part_dir(directory, entry)) for entry in manifest["parts"]]
    for k, part in enumerate(parts):
        if part.vocab.fingerprint != vocab.fingerprint:
            raise NnlmError(f"{directory}: part {k + 1} has another vocabulary than the mixture's")
    weights, buckets = manifest["weights"], manifest.get("buckets")
    if buckets is None:
        if len(weights) != 1:
            raise NnlmError(f"{directory / MANIFEST}: {len(weights)} rows of weights but no bucket rule")
        return Mixture(parts, weights)
    if not isinstance(buckets, dict) or buckets.get("kind") != "context-frequency" or \
            not isinstance(buckets.get("train_tokens"), int) or buckets.get("file") != BUCKETS:
        raise NnlmError(f"{directory / MANIFEST}: unknown bucket rule {buckets!r}")
    require_regular(directory / BUCKETS, "mixture buckets")
    try:
        with np.load(directory / BUCKETS, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:  # zipfile.BadZipFile, OSError, ValueError: a damaged file, one line
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise NnlmError(f"{directory}: unreadable {BUCKETS} ({reason})") from None
    bucketer = ContextBuckets.from_arrays(len(vocab), buckets["train_tokens"], arrays)
    if len(weights) != bucketer.n_buckets:
        raise NnlmError(f"{directory / MANIFEST}: {len(weights)} rows of weights for {bucketer.n_buckets} buckets")
    return Mixture(parts, weights, bucketer, bucketer.order)
