"""The LSTM a user copies today (PyTorch's word_language_model recipe, tied, nnlm.reproduce.lstm_reference)
against Kneser-Ney on the same files, within a wall-clock budget: the reference nnlm's nets are compared with.

    NLTK_DATA=../shared/nltk_data python benchmarks/lstm_reference.py --minutes 28 --out docs/lstm-reference.json
    python benchmarks/lstm_reference.py --corpus DIR_OR_FILE --minutes 10

The same reference is a row of `nnlm reproduce --beyond` (`--beyond-reference`), budgeted as the section's nets.
Prints each epoch's validation perplexity, then valid and test of the LSTM's best weights beside KN5 built on the
same corpus (the test ratio to KN5 is what nnlm's reports give for every net), the CPU and the load. Corpus
options are `nnlm reproduce`'s: Brown by the bengio2003 protocol by default.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from host import cpu_name

from nnlm.data import load_corpus
from nnlm.io import atomic_write_text
from nnlm.lm import perplexity
from nnlm.ngram.build import build_ngram
from nnlm.output_guard import guard_outputs
from nnlm.reproduce.lstm_reference import LstmRecipe, train_lstm_reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="brown", help="brown, a 3-split directory or one text file")
    ap.add_argument("--minutes", type=float, default=28.0, help="training and validation budget (wall clock)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--size", type=int, default=LstmRecipe.size, help="embedding and LSTM width")
    ap.add_argument("--epochs", type=int, default=LstmRecipe.epochs, help="the recipe's epochs (or the budget first)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()
    guard_outputs(files=[("--out", args.out)], inputs=[args.corpus if args.corpus != "brown" else None])

    corpus = load_corpus(args.corpus)
    print(f"corpus {corpus.name}: train {len(corpus.train):,}, valid {len(corpus.valid):,}, test {len(corpus.test):,}"
          f" tokens, |V| = {len(corpus.vocab):,}; CPU {cpu_name()}, load {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.perf_counter()
    kn5 = build_ngram("kn", corpus, 5)
    kn = {"valid": perplexity(kn5, corpus, "valid"), "test": perplexity(kn5, corpus, "test"),
          "seconds": time.perf_counter() - t0}
    print(f"KN5: valid {kn['valid']:.1f}, test {kn['test']:.1f} ({kn['seconds']:.0f} s)", flush=True)
    loads = [os.getloadavg()[0]]

    def progress(epochs: float, valid: float, lr: float) -> None:
        loads.append(os.getloadavg()[0])
        print(f"  epoch {epochs:5.2f}: valid {valid:7.1f} (lr {lr:g}, load {loads[-1]:.2f})", flush=True)

    recipe = LstmRecipe(size=args.size, epochs=args.epochs)
    lstm = train_lstm_reference(corpus, args.minutes * 60, recipe, threads=args.threads, progress=progress)
    loads.append(os.getloadavg()[0])
    print(f"LSTM ({recipe.layers} x {recipe.size}, tied, {lstm.parameters:,} parameters): {lstm.epochs:.2f} epochs"
          f" in {lstm.seconds / 60:.1f} min; valid {lstm.valid:.1f}, test {lstm.test:.1f} = "
          f"{lstm.test / kn['test']:.3f} x KN5's test; load {min(loads):.2f}-{max(loads):.2f}")
    if args.out is not None:
        record = {"corpus": corpus.name, "vocab": len(corpus.vocab), "cpu": cpu_name(), "threads": args.threads,
                  "minutes": args.minutes, "load": [min(loads), max(loads)], "kn5": kn, "lstm": lstm.as_dict(),
                  "ratio_to_kn5": lstm.test / kn["test"], "command": " ".join(sys.argv)}
        atomic_write_text(args.out, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
