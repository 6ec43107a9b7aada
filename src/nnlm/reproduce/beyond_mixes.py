"""The section's mixes: the parts' log-probabilities (kept in OUT/beyond/scores), the parts themselves
(nets loaded from their runs, Table 1's n-gram rows built again from its saved classes), and the
weights: equal (an ensemble), or fitted by EM on validation, globally or per context-frequency bucket.
Test is scored with the weights validation chose."""
from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nnlm.io import atomic_path
from nnlm.lm import LanguageModel, perplexity_from_log_probs
from nnlm.mixture import MIX_EM_ITERATIONS, MIX_EM_TOL, Mixture, mix_scored
from nnlm.reproduce.beyond_rows import NGRAM_BY_ID, NGRAM_PARTS, MixRow, row_key
from nnlm.reproduce.results import RowResult

if TYPE_CHECKING:
    from nnlm.reproduce.section import Section

SPLITS = ("valid", "test")


def part_path(part: str) -> str:
    return f"ngrams/{part}" if part in NGRAM_PARTS else f"runs/{part}"


def mix_command(mix: MixRow) -> str:
    """The `nnlm mix` a user would type, from the saved parts (runs/<net>, ngrams/<row>)."""
    k = len(mix.parts)
    weights = ",".join([f"{1 / k:.6g}"] * k) if mix.weighting == "equal" else mix.weighting
    return "nnlm mix " + " ".join(shlex.quote(part_path(p)) for p in mix.parts) + f" --weights {weights}"


def part_entry(section: Section, part: str) -> dict[str, Any]:
    """A part's row in results.json: Table 1's for an n-gram part, the section's for a net."""
    return section.job.results.rows.get(part if part in NGRAM_PARTS else row_key(part)) or {}


def scores_path(section: Section, part: str, split: str) -> Path:
    return section.job.out / "beyond" / "scores" / f"{part}.{split}.npy"


def save_scores(section: Section, part: str, split: str, log_probs: np.ndarray) -> None:
    with atomic_path(scores_path(section, part, split)) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.asarray(log_probs, dtype=np.float64), allow_pickle=False)


def part_model(section: Section, part: str) -> LanguageModel:
    """A part in memory: a net loaded from its run, an n-gram row built (its classes from Table 1's clusters)."""
    if part not in section.models:
        job = section.job
        if part in NGRAM_PARTS:
            from nnlm.ngram.build import build_ngram
            from nnlm.reproduce.ngram_rows import word_classes

            row = NGRAM_BY_ID[part]
            options = {} if row.classes is None else {"clusters": word_classes(job, row.classes, None)}
            section.models[part] = build_ngram(row.kind, job.corpus, row.n, classes=row.classes,
                                               progress=job.progress, **options)
        else:
            from nnlm.neural.run.checkpoint import load_neural

            section.models[part] = load_neural(job.out / part_entry(section, part)["run"], device=job.device_name())
    return section.models[part]


def part_scores(section: Section, part: str, split: str) -> np.ndarray:
    """log P of every token of a split under a part: kept on disk, or in memory from Table 1, or scored now."""
    path = scores_path(section, part, split)
    if path.exists():
        return np.load(path, allow_pickle=False)
    job = section.job
    entry = part_entry(section, part)
    cached = part if part in NGRAM_PARTS else entry.get("twin", row_key(part))  # Table 1 scored it in this call?
    lp = job.cached_scores(cached, split)
    if lp is None and split == "valid" and "run" in entry:  # a net's best weights keep their valid scores
        lp = job.kept_valid_scores(cached, job.out / entry["run"])
    if lp is None:
        from nnlm.threads import govern

        govern(requested=job.threads, device=job.device_name())
        lp = job.scored(row_key(part), part_model(section, part), split)
    save_scores(section, part, split, lp)
    return lp


def mix_options(section: Section, mix: MixRow) -> dict[str, Any]:
    """The results key of a mix: its weighting (with EM's stopping rule), and each part's validation
    perplexity (a part trained further, or rebuilt, changes it, and the mix is fitted again)."""
    em = {} if mix.weighting == "equal" else {"em": {"iterations": MIX_EM_ITERATIONS, "tol": MIX_EM_TOL}}
    return {"weighting": mix.weighting, **em,
            "parts": {p: (part_entry(section, p).get("perplexity") or {}).get("valid") for p in mix.parts}}


def mix_row(section: Section, mix: MixRow) -> None:
    job, key = section.job, row_key(mix.id)
    options = mix_options(section, mix)
    entries = {p: part_entry(section, p) for p in mix.parts}
    missing = [p for p, e in entries.items() if not (e.get("perplexity") or {}).get("valid")]
    extra = {"command": mix_command(mix), "parts": list(mix.parts)}
    if missing:
        section.announce(mix.label, "skipped")
        note = f"skipped: {', '.join(missing)} not built (skipped, not applicable, or not in Table 1)"
        job.results.put(key, RowResult({}, None, 0.0, "skipped", note, options, extra=extra))
        job.log(f"    {note}")
        return
    if not job.results.pending(key, options):
        section.announce(mix.label, "done already")
        return
    section.announce(mix.label)
    scored = {s: [part_scores(section, p, s) for p in mix.parts] for s in SPLITS}
    models = [part_model(section, p) for p in mix.parts]
    t0 = time.perf_counter()
    k = len(mix.parts)
    mode = "fixed" if mix.weighting == "equal" else mix.weighting
    fitted = mix_scored(models, job.corpus, scored, mode, [1.0 / k] * k if mode == "fixed" else None)
    ppl = {"train": None} | {s: perplexity_from_log_probs(lp) for s, lp in fitted.split_log_probs.items()}
    cut = [p for p, e in entries.items() if e.get("status") == "shortened"]
    note = f"shortened: {', '.join(cut)} shortened" if cut else ""
    weights = fitted.model.weights
    job.results.put(key, RowResult(ppl, fitted.model.parameter_count(), time.perf_counter() - t0,
                                   "shortened" if cut else "done", note, options,
                                   extra=extra | {"weights": weights.tolist(),
                                                  "parts_seconds": sum(e.get("seconds", 0.0) for e in entries.values()),
                                                  "mean_weights": weights.mean(axis=0).round(4).tolist()}))
    job.log(f"    weights {', '.join(f'{w:.3f}' for w in weights.mean(axis=0))}"
            + (" (mean over buckets)" if len(weights) > 1 else "")
            + f": valid {ppl['valid']:.1f}  test {ppl['test']:.1f}")


def load_mixture(section: Section, mix: MixRow) -> Mixture:
    """The fitted mix as a LanguageModel, from its parts and the weights results.json keeps."""
    entry = section.job.results.rows[row_key(mix.id)]
    models = [part_model(section, p) for p in mix.parts]
    if mix.weighting != "em-buckets":
        return Mixture(models, entry["weights"])
    from nnlm.ngram.interpolated import InterpolatedTrigram

    trigram = InterpolatedTrigram.fit(section.job.corpus.vocab, section.job.corpus.train)  # its buckets
    return Mixture(models, entry["weights"], trigram.buckets, trigram.order)
