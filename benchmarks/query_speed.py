"""Query speed of the count-based models against KenLM, on Brown test as paragraph lines (issue 32).

Run from the repository root (about two minutes once the models exist; building them adds ~3 min,
mostly the class model's clustering):
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/query_speed.py --workdir /tmp/nnlm-query

The reference, measured in the same process and run: KenLM's Python module (`kenlm.Model`) reading
nnlm's own Brown KN5 ARPA file. Each model is also timed on its numpy path (the engine switched off),
which is what nnlm ran before the query engine. Measured, per model:

- batch: every test line scored as its own text (start-of-text context, each line's `<p>` counted:
  KenLM's bos / eos), tokens per second; KenLM `model.score(line)` per line (it has no batch call),
  nnlm `score_sentences(model, lines)` (one call for all), and nnlm `score_sentence` per line;
- latency of one call on one line, median and p90 over the lines (KenLM `model.score(line)`, nnlm
  `score_sentence(model, line)`);
- the stateful API: 16 streams (a beam of 16) advanced one word at a time, words per second (KenLM
  `BaseScore(state, word, out)` once per row, nnlm `model.advance(state, words)` once per step).

The interpolated trigram cannot be written as an exact ARPA file (its mixture weights depend on the
context's frequency bucket, so a missing trigram's probability is not b(context) * P(lower order)),
nor can the class model (P(class n-gram) x P(word | class)); their KenLM column is KenLM's KN5 speed,
the same reference, and their own numpy path is given beside it.
nnlm's numbers are checked against its numpy path (every line to 1e-6) before anything is timed.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import PARAGRAPH, TEXT
from nnlm.lm import LanguageModel
from nnlm.ngram.build import build_ngram, load_ngram, save_ngram
from nnlm.sentence import score_sentence, score_sentences
from nnlm.use import score_lines

BEAM = 16


def paragraph_lines(corpus) -> list[str]:
    """Brown test as text lines: the split cut at each `<p>` (and `<text>`), markers dropped."""
    lines, words = [], []
    for token in corpus.vocab.decode(corpus.split("test")):
        if token in (PARAGRAPH, TEXT):
            if words:
                lines.append(" ".join(words))
            words = []
        else:
            words.append(token)
    if words:
        lines.append(" ".join(words))
    return lines


def model_directories(workdir: Path, corpus) -> dict[str, Path]:
    """KN5 (and its ARPA file, workdir / kn5.arpa), the interpolated trigram, the class trigram (c = 500),
    saved in `workdir` (built there first if missing)."""
    from nnlm.ngram.arpa import write_arpa

    out = {}
    for name, kind, order, options in (("KN5", "kn", 5, {}), ("interpolated 3", "interpolated", 3, {}),
                                       ("class 3, c=500", "class", 3, {"classes": 500})):
        directory = workdir / f"{kind}{order}"
        if not (directory / "config.json").exists():
            print(f"building {name} into {directory} ...", flush=True)
            save_ngram(build_ngram(kind, corpus, order, **options), directory)
        if kind == "kn" and not (workdir / "kn5.arpa").exists():
            write_arpa(load_ngram(directory), workdir / "kn5.arpa")
        out[name] = directory
    return out


def numpy_path(directory: Path) -> LanguageModel:
    """The model saved in `directory` with its query engine switched off: what nnlm ran before it."""
    model = load_ngram(directory)
    if hasattr(model, "tables") and hasattr(model.tables, "_engine"):
        model.tables._engine = False
    else:
        model._engine = False
    return model


def engine_of(model: LanguageModel):
    tables = getattr(model, "tables", None)
    return tables.query_engine() if hasattr(tables, "query_engine") else model.query_engine()


def rate(fn, tokens: int, repeat: int = 3) -> float:
    best = min(_seconds(fn) for _ in range(repeat))
    return tokens / best


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def latencies(fn, lines: list[str]) -> tuple[float, float]:
    """Median and p90 microseconds of one call per line (after one warm-up pass)."""
    for line in lines[:50]:
        fn(line)
    times = np.empty(len(lines))
    clock = time.perf_counter_ns
    for i, line in enumerate(lines):
        t0 = clock()
        fn(line)
        times[i] = clock() - t0
    return float(np.median(times) / 1e3), float(np.percentile(times, 90) / 1e3)


def beam_streams(corpus, steps: int) -> np.ndarray:
    """[steps, BEAM] token ids: BEAM contiguous stretches of the test split, one per row."""
    ids = corpus.split("test").astype(np.int64)
    return ids[: steps * BEAM].reshape(BEAM, steps).T.copy()


def nnlm_beam_rate(model: LanguageModel, words: np.ndarray) -> float:
    def run() -> None:
        state = model.begin_state(BEAM)
        for step in words:
            _, state = model.advance(state, step)
    return rate(run, words.size)


def kenlm_beam_rate(kenlm_model, tokens: list[list[str]]) -> float:
    import kenlm

    def run() -> None:
        states = [kenlm.State() for _ in range(BEAM)]
        spare = [kenlm.State() for _ in range(BEAM)]
        for s in states:
            kenlm_model.BeginSentenceWrite(s)
        for step in tokens:
            for row, word in enumerate(step):
                kenlm_model.BaseScore(states[row], word, spare[row])
            states, spare = spare, states
    return rate(run, len(tokens) * BEAM)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/nnlm-query-bench"),
                    help="where the models are kept (built there if missing); keep it outside the repository")
    ap.add_argument("--beam-steps", type=int, default=2000, help="words per beam row")
    args = ap.parse_args()
    import kenlm

    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus("brown")
    lines = paragraph_lines(corpus)
    n_tokens = sum(len(line.split()) + 1 for line in lines)
    directories = model_directories(args.workdir, corpus)
    t0 = time.perf_counter()
    reference = kenlm.Model(str(args.workdir / "kn5.arpa"))
    kenlm_load = time.perf_counter() - t0
    kenlm_batch = rate(lambda: [reference.score(line) for line in lines], n_tokens)
    kenlm_median, kenlm_p90 = latencies(reference.score, lines)
    words = beam_streams(corpus, args.beam_steps)
    kenlm_beam = kenlm_beam_rate(reference, [corpus.vocab.decode(step) for step in words])

    print(f"Brown test: {len(lines):,} paragraph lines, {n_tokens:,} tokens (words + <p> / </s>); "
          f"beam {BEAM} x {args.beam_steps:,} words")
    print(f"CPU: {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.2f} at start")
    print(f"KenLM: ARPA loaded in {kenlm_load:.1f} s")
    rows = [("KenLM, KN5 (reference)", kenlm_batch, kenlm_batch, kenlm_median, kenlm_p90, kenlm_beam)]
    for name, directory in directories.items():
        model, slow = load_ngram(directory), numpy_path(directory)
        t0 = time.perf_counter()
        engine = engine_of(model)
        build = time.perf_counter() - t0
        engine_lines = score_sentences(model, lines)
        numpy_lines = np.array([score_sentence(slow, line) for line in lines])
        worst = float(np.abs(engine_lines - numpy_lines).max())
        assert worst < 1e-6, f"{name}: the engine differs from the numpy path by {worst}"
        print(f"{name}: engine {engine.nbytes / 2**20:.0f} MiB, built in {build:.2f} s (at the first query); "
              f"lines agree with the numpy path to {worst:.1e} (log10)")
        stream = rate(lambda m=model: score_lines(m, lines), n_tokens)
        stream_numpy = rate(lambda m=slow: score_lines(m, lines), n_tokens, repeat=1)
        print(f"  nnlm.use.score_lines (one stream, what `nnlm score` runs): {stream:,.0f} tokens/s "
              f"(numpy path {stream_numpy:,.0f})")
        batch = rate(lambda m=model: score_sentences(m, lines), n_tokens)
        per_line = rate(lambda m=model: [score_sentence(m, line) for line in lines], n_tokens)
        median, p90 = latencies(lambda line, m=model: score_sentence(m, line), lines)
        beam = nnlm_beam_rate(model, words)
        rows.append((f"nnlm {name}", batch, per_line, median, p90, beam))
        slow_batch = rate(lambda m=slow: score_sentences(m, lines), n_tokens, repeat=1)
        slow_median, slow_p90 = latencies(lambda line, m=slow: score_sentence(m, line), lines[:400])
        slow_beam = nnlm_beam_rate(slow, words[:200])
        rows.append(("  numpy path (before)", slow_batch, slow_batch, slow_median, slow_p90, slow_beam))

    print()
    print(f"{'':28} {'batch tok/s':>12} {'x KenLM':>8} {'per-line tok/s':>15} {'median us':>10} "
          f"{'x KenLM':>8} {'p90 us':>8} {'beam words/s':>13} {'x KenLM':>8}")
    for name, batch, per_line, median, p90, beam in rows:
        print(f"{name:28} {batch:12,.0f} {batch / kenlm_batch:8.2f} {per_line:15,.0f} {median:10.1f} "
              f"{median / kenlm_median:8.2f} {p90:8.1f} {beam:13,.0f} {beam / kenlm_beam:8.2f}")
    print("\nx KenLM: throughput ratios (higher is better); for latency, nnlm's median / KenLM's (lower is better).")


if __name__ == "__main__":
    main()
