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

- `nnlm.use.score_lines` (what `nnlm score` and the Python API run; issue 48): every line in one call
  (the lines as one stream), tokens per second, against KenLM's per-line rate; and one call per line
  (`score_lines(model, [line])`), median microseconds, timed line by line interleaved with KenLM's
  `model.score(line)` so that both see the same load ("paired"), and in a pass of its own against KenLM's
  pass ("alone", as the latency column above: each keeps its own tables in cache);
- (KN5 only, in fresh processes, alternating nnlm and KenLM, `--runs` times each) the time to a first
  score: imports, model load and one `score_lines` call (which maps the query engine's tables saved with the
  model, nnlm.ngram.engine_file; numba's kernels come from its on-disk cache) against `import kenlm`,
  reading the ARPA file and one `model.score`; and
  `nnlm score MODEL FILE` end to end (start, load, score, the per-line report to /dev/null) against a KenLM
  script that loads the ARPA file and scores the same file line by line; and `nnlm score` on the same model
  without its saved engine tables (engine.npy / engine.json: as a model saved before they existed), which
  builds the engine in the process.

The interpolated trigram cannot be written as an exact ARPA file (its mixture weights depend on the
context's frequency bucket, so a missing trigram's probability is not b(context) * P(lower order)),
nor can the class model (P(class n-gram) x P(word | class)); their KenLM column is KenLM's KN5 speed,
the same reference, and their own numpy path is given beside it.
nnlm's numbers are checked against its numpy path (every line to 1e-6) before anything is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from host import cpu_name

from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import PARAGRAPH, TEXT
from nnlm.lm import LanguageModel
from nnlm.ngram import query_engine
from nnlm.ngram.build import build_ngram, load_ngram, save_ngram
from nnlm.sentence import score_sentence, score_sentences
from nnlm.use import score_lines

BEAM = 16
KENLM_SCORE_FILE = """import sys, kenlm
model = kenlm.Model(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as text:
    total = sum(model.score(line) for line in text)
print(f"Total log10 {total:.4f}")
"""
NNLM_FIRST_SCORE = """import json, sys, time
t0 = time.perf_counter()
from nnlm.loading import load
from nnlm.use import score_lines
t1 = time.perf_counter()
model = load(sys.argv[1])
t2 = time.perf_counter()
score_lines(model, [sys.argv[2]])
t3 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "load": t2 - t1, "first call": t3 - t2}))
"""
KENLM_FIRST_SCORE = """import json, sys, time
t0 = time.perf_counter()
import kenlm
t1 = time.perf_counter()
model = kenlm.Model(sys.argv[1])
t2 = time.perf_counter()
model.score(sys.argv[2])
t3 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "load": t2 - t1, "first call": t3 - t2}))
"""


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


def paired_latencies(ours, reference, lines: list[str]) -> tuple[float, float]:
    """Median microseconds of one call per line of `ours` and of `reference`, each line timed by both back to
    back (after a warm-up pass), so that a burst of other jobs' load falls on both."""
    for line in lines[:50]:
        ours(line)
        reference(line)
    times = np.empty((len(lines), 2))
    clock = time.perf_counter_ns
    for i, line in enumerate(lines):
        t0 = clock()
        ours(line)
        t1 = clock()
        reference(line)
        times[i] = (t1 - t0, clock() - t1)
    return float(np.median(times[:, 0]) / 1e3), float(np.median(times[:, 1]) / 1e3)


# The fresh processes run as Python runs by default: writing and reading modules' bytecode (.pyc). A shell that
# sets PYTHONDONTWRITEBYTECODE (this project's sandbox does) makes every process compile nnlm's ~90 modules from
# source: 0.2-0.45 s more a start, which KenLM's script (one C extension) does not pay.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def process_seconds(argv: list[str]) -> tuple[float, str]:
    """Wall seconds of a fresh process (its standard output to a pipe), and that output."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, text=True,
                          env=CHILD_ENV)
    return time.perf_counter() - t0, done.stdout


def fresh_processes(workdir: Path, kn5: Path, lines: list[str], runs: int) -> None:
    """Time to a first score and `nnlm score` end to end, nnlm and KenLM alternating, `runs` times each."""
    text = workdir / "test.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    line = lines[len(lines) // 2]
    python = sys.executable
    nnlm_cli = [str(Path(python).parent / "nnlm")]  # the console script a user runs (the venv's)
    unsaved = without_engine_tables(kn5, workdir / "kn5-without-engine")
    process_seconds(nnlm_cli + ["score", str(kn5), str(text)])  # untimed: bytecode written, as after any first run
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        print("\n(PYTHONDONTWRITEBYTECODE is set here; the fresh processes run without it, as Python runs by default)")
    firsts = {"nnlm": [], "KenLM": []}
    ends = {"nnlm": [], "KenLM": [], "unsaved": []}
    for _ in range(runs):
        for name, code, model in (("nnlm", NNLM_FIRST_SCORE, kn5), ("KenLM", KENLM_FIRST_SCORE, workdir / "kn5.arpa")):
            seconds, out = process_seconds([python, "-c", code, str(model), line])
            firsts[name].append((seconds, json.loads(out)))
        ends["nnlm"].append(process_seconds(nnlm_cli + ["score", str(kn5), str(text)])[0])
        ends["KenLM"].append(process_seconds([python, "-c", KENLM_SCORE_FILE, str(workdir / "kn5.arpa"),
                                              str(text)])[0])
        ends["unsaved"].append(process_seconds(nnlm_cli + ["score", str(unsaved), str(text)])[0])
    print(f"\nFresh processes, KN5, {runs} runs each alternating (median; min):")
    for name, results in firsts.items():
        wall = [w for w, _ in results]
        parts = {k: float(np.median([p[k] for _, p in results])) for k in results[0][1]}
        print(f"  time to a first score, {name:5}: {np.median(wall):.2f} s ({min(wall):.2f}) = start + "
              + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    ratio = np.median([w for w, _ in firsts["KenLM"]]) / np.median([w for w, _ in firsts["nnlm"]])
    print(f"  -> KenLM's time / nnlm's: {ratio:.2f} (higher is better)")
    whats = {"nnlm": "nnlm score kn5/ FILE", "KenLM": "KenLM load ARPA + score FILE",
             "unsaved": "nnlm score, engine built"}
    for name, walls in ends.items():
        print(f"  end to end, {whats[name]:29}: {np.median(walls):.2f} s ({min(walls):.2f})")
    print(f"  -> KenLM's time / nnlm's: {np.median(ends['KenLM']) / np.median(ends['nnlm']):.2f} (higher is better; "
          f"with the engine built in the process instead of mapped from kn5/: "
          f"{np.median(ends['KenLM']) / np.median(ends['unsaved']):.2f})")


def without_engine_tables(model: Path, directory: Path) -> Path:
    """`model`'s directory without its saved engine tables (a model saved before they existed: its engine is
    built at the first query), its files linked (copied where links are not possible)."""
    import shutil

    directory.mkdir(exist_ok=True)
    for name in ("config.json", "vocab.json", "arrays.npz"):
        target = directory / name
        if not target.exists():
            try:
                os.link(model / name, target)
            except OSError:
                shutil.copyfile(model / name, target)
    return directory


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
    ap.add_argument("--runs", type=int, default=3, help="fresh processes of each kind (first score, end to end)")
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
    print(f"CPU: {cpu_name()}, load {os.getloadavg()[0]:.2f} at start")
    print(f"KenLM: ARPA loaded in {kenlm_load:.1f} s")
    rows = [("KenLM, KN5 (reference)", kenlm_batch, kenlm_batch, kenlm_median, kenlm_p90, kenlm_beam)]
    line_rows = []
    for name, directory in directories.items():
        model, slow = load_ngram(directory), numpy_path(directory)
        t0 = time.perf_counter()
        engine = engine_of(model)
        build = time.perf_counter() - t0
        how = "built"
        tables = getattr(model, "tables", None)
        if getattr(engine, "build_seconds", None) == 0.0:  # mapped from the saved tables (nnlm.ngram.engine_file)
            t0 = time.perf_counter()
            query_engine.build_backoff_engine(tables.vocab_size, tables.keys, tables.log10_prob, tables.log10_backoff)
            how = f"mapped from its saved tables (building them: {time.perf_counter() - t0:.2f} s), loaded"
        engine_lines = score_sentences(model, lines)
        numpy_lines = np.array([score_sentence(slow, line) for line in lines])
        worst = float(np.abs(engine_lines - numpy_lines).max())
        assert worst < 1e-6, f"{name}: the engine differs from the numpy path by {worst}"
        print(f"{name}: engine {engine.nbytes / 2**20:.0f} MiB, {how} in {build:.2f} s (at the first query); "
              f"lines agree with the numpy path to {worst:.1e} (log10)")
        quick = score_lines(model, lines)[0]
        generic_lines = score_lines(slow, lines)[0]
        worst = max(abs(a.log10_prob - b.log10_prob) for a, b in zip(quick, generic_lines, strict=True))
        assert worst < 1e-6, f"{name}: score_lines differs from the numpy path by {worst}"
        kenlm_rate = rate(lambda: [reference.score(line) for line in lines], n_tokens)
        stream = rate(lambda m=model: score_lines(m, lines), n_tokens)
        stream_numpy = rate(lambda m=slow: score_lines(m, lines), n_tokens, repeat=1)
        ours, theirs = paired_latencies(lambda line, m=model: score_lines(m, [line]), reference.score, lines)
        alone, _ = latencies(lambda line, m=model: score_lines(m, [line]), lines)
        line_rows.append((f"nnlm {name}", stream, stream / kenlm_rate, ours, ours / theirs, alone,
                          alone / kenlm_median, stream_numpy))
        print(f"  nnlm.use.score_lines: {stream:,.0f} tokens/s = {stream / kenlm_rate:.2f} x KenLM's "
              f"{kenlm_rate:,.0f} (numpy path {stream_numpy:,.0f}); one line per call: median {ours:.1f} us = "
              f"{ours / theirs:.2f} x KenLM's {theirs:.1f} us interleaved, {alone:.1f} us = "
              f"{alone / kenlm_median:.2f} x KenLM's {kenlm_median:.1f} us each in its own pass")
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
    print("\nnnlm.use.score_lines against KenLM's model.score per line (issue 48: rate >= 1.0 x, latency <= 2 x)")
    print(f"{'':28} {'tok/s':>12} {'x KenLM':>8} {'us/call, paired':>16} {'x KenLM':>8} {'us/call, alone':>15} "
          f"{'x KenLM':>8} {'numpy path tok/s':>17}")
    for name, stream, ratio, ours, paired_ratio, alone, alone_ratio, numpy_rate in line_rows:
        print(f"{name:28} {stream:12,.0f} {ratio:8.2f} {ours:16.1f} {paired_ratio:8.2f} {alone:15.1f} "
              f"{alone_ratio:8.2f} {numpy_rate:17,.0f}")
    fresh_processes(args.workdir, directories["KN5"], lines, args.runs)
    print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
