"""Two back-off models merged into one ARPA file (`nnlm mix --arpa`, SRILM's -mix-lm) on Brown: the merge's time,
and the merged model's perplexity against the dynamic mixture with the same weights and each part alone.

Run from the repository root (about a minute):
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/mix_merge.py --workdir /tmp/nnlm-mix

Two pairs of parts (modified Kneser-Ney, one vocabulary): a 5-gram on Brown train with a 3-gram on the first half of
train only; and 4-grams on train's two halves (different text: the union of their n-grams is larger than either).
Weights: EM on valid (one weight per part: the only weights with a static form).
The reference for the merge's time, measured in the same run: estimating the 5-gram itself. KenLM (the `kenlm`
module) reads the merged file, and its log10 probabilities on the first 20,000 test tokens with a full context are
compared with nnlm's reading of the same file.
"""
from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import numpy as np
from host import cpu_name

from nnlm.data import load_corpus
from nnlm.lm import contexts, perplexity
from nnlm.mixture import mix_on_corpus
from nnlm.ngram.arpa import read_arpa, write_arpa
from nnlm.ngram.backoff_mix import merge_backoff
from nnlm.ngram.kneser_ney import KneserNeyModel


def kenlm_gap(path: Path, corpus, order: int, limit: int = 20_000) -> float:
    """Largest |KenLM - nnlm| log10 probability over test tokens with a full context, both reading `path`."""
    import kenlm

    ours = read_arpa(path, corpus.vocab)
    model, state, out = kenlm.Model(str(path)), kenlm.State(), kenlm.State()
    model.NullContextWrite(state)
    stream, start = corpus.stream(), corpus.split_offset("test")
    words = corpus.vocab.decode(stream[start:start + limit])
    theirs = np.empty(len(words))
    for i, w in enumerate(words):
        theirs[i] = model.BaseScore(state, w, out)
        state, out = out, state
    pos = np.arange(start + order - 1, start + len(words))
    mine = ours.log10_prob(contexts(stream, pos, order - 1, corpus.pad_id), stream[pos])
    return float(np.abs(theirs[order - 1:] - mine).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/nnlm-mix", help="where the merged ARPA file is written")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_name()}; load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    corpus = load_corpus("brown")
    half = len(corpus.train) // 2
    t = time.perf_counter()
    kn5 = KneserNeyModel.fit(corpus.vocab, corpus.train, 5)
    build_s = time.perf_counter() - t
    print(f"reference: estimating the KN5 on all of train {build_s:.1f} s")
    scenario(work / "kn5-kn3.arpa", corpus, build_s, [("KN5 on train", kn5), (
        "KN3 on train's 1st half", KneserNeyModel.fit(corpus.vocab, corpus.train[:half], 3))])
    scenario(work / "halves.arpa", corpus, build_s, [
        ("KN4 on train's 1st half", KneserNeyModel.fit(corpus.vocab, corpus.train[:half], 4)),
        ("KN4 on train's 2nd half", KneserNeyModel.fit(corpus.vocab, corpus.train[half:], 4))])


def scenario(path: Path, corpus, build_s: float, parts: list) -> None:
    """Merge `parts` (name, model) with EM weights, write `path`, print the figures."""
    models = [m for _, m in parts]
    fitted = mix_on_corpus(models, corpus, "em")
    weights = fitted.model.weights[0]
    t = time.perf_counter()
    merged = merge_backoff(models, weights)
    merge_s = time.perf_counter() - t
    t = time.perf_counter()
    write_arpa(merged, path)
    write_s = time.perf_counter() - t
    print(f"\n== {' + '.join(name for name, _ in parts)}; weights (EM on valid) "
          + ", ".join(f"{w:.4f}" for w in weights))
    print("n-grams: " + ", ".join(f"{name} {sum(m.tables.sizes()):,}" for name, m in parts)
          + f"; merged {sum(merged.tables.sizes()):,}")
    print(f"time: merge {merge_s:.1f} s ({merge_s / build_s:.1f}x the KN5's estimation); writing the ARPA file "
          f"{write_s:.1f} s")
    rows = [*parts, ("dynamic mixture", fitted.model), ("merged back-off model", merged)]
    ppl = {name: {s: perplexity(m, corpus, s) for s in ("valid", "test")} for name, m in rows}
    print(f"{'model':30s} {'valid':>9s} {'test':>9s}")
    for name, p in ppl.items():
        print(f"{name:30s} {p['valid']:9.2f} {p['test']:9.2f}")
    for s in ("valid", "test"):
        gap = ppl["merged back-off model"][s] / ppl["dynamic mixture"][s] - 1
        print(f"merged vs dynamic on {s}: {100 * gap:+.3f}%")
    print(f"KenLM reads {path.name}: largest |log10 difference| with nnlm's reading on 20,000 test tokens "
          f"{kenlm_gap(path, corpus, merged.order):.2e}")

if __name__ == "__main__":
    main()
