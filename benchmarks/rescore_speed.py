"""Hypotheses/s of `nnlm rescore`'s batched scoring (nnlm.rescore.lm_scores.hypothesis_log_probs: every
hypothesis of the set end to end, contexts cut from one array, large log_prob calls) against the plain
reference measured in the same run: one `log_prob` call per hypothesis. Both give the same numbers
(checked here). Models: an untrained MLP1-shaped net over Brown's vocabulary (speed does not depend on
the weights) and a Kneser-Ney trigram on Brown train; hypotheses: made-up n-best lists from Brown test.

    NLTK_DATA=../shared/nltk_data PYTHONPATH=src python benchmarks/rescore_speed.py [--utterances 300] [--n 10]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from rescore_brown import paragraphs

from nnlm.data.corpus import load_corpus
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.presets import preset
from nnlm.ngram.build import build_ngram
from nnlm.rescore.lm_scores import hypothesis_log_probs, one_at_a_time_log_probs
from nnlm.rescore.synthetic import make_nbest


def timed(fn, *args) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - started, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utterances", type=int, default=300, help="lists (default 300)")
    ap.add_argument("--n", type=int, default=10, help="hypotheses per list (default 10)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus("brown")
    sentences = paragraphs(corpus.vocab.decode(corpus.test), args.utterances)
    hyps = [h for hs, _ in make_nbest(sentences, args.n, seed=1) for h in hs]
    torch.manual_seed(0)
    models = {"mlp1 (untrained)": NeuralLM(NPLM(preset("mlp1", len(corpus.vocab))), corpus.vocab, corpus.pad_token),
              "kn3": build_ngram("kn", corpus, 3)}
    print(f"{len(hyps)} hypotheses, {sum(len(h) + 1 for h in hyps)} tokens; threads {args.threads}; "
          f"load average {os.getloadavg()[0]:.2f} at start")
    for name, model in models.items():
        t_ref, ref = timed(one_at_a_time_log_probs, model, hyps)
        t_bat, bat = timed(hypothesis_log_probs, model, hyps)
        assert np.allclose(ref, bat), "batched and one-at-a-time scores differ"
        print(f"{name:18s} one at a time {len(hyps) / t_ref:9.0f} hyp/s   batched {len(hyps) / t_bat:9.0f} hyp/s   "
              f"ratio {t_ref / t_bat:6.1f}x")
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
