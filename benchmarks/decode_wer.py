"""CTC decoding with a word LM on a SIMULATED recognizer: Brown paragraphs turned into frame posteriors
by a character-confusion model (nnlm.decode.simulate: no audio, no acoustic model), decoded with no LM,
with KenLM through pyctcdecode, and with nnlm models through `nnlm decode`'s beam search. alpha and beta
are tuned on dev paragraphs (Brown valid) for each system on one grid; WER and decode time are measured
on test paragraphs (Brown test), every system in this run, on the same posteriors.

Paragraphs of 5-25 words holding no <unk> (the simulated recognizer spells each word), the labels
every character of the vocabulary, the boundary | and the blank <pad>.

    NLTK_DATA=../shared/nltk_data PYTHONPATH=src python benchmarks/decode_wer.py \
        --arpa kn5.arpa [--nplm RUN_DIR] [--test 60] [--dev 20] [--json out.json]
(kn5.arpa: `nnlm ngram --corpus brown --kind kn --order 5 --arpa kn5.arpa`.)
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path

import numpy as np

from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import PARAGRAPH, TEXT
from nnlm.decode import Alphabet, CTCWordDecoder, DecodeOptions
from nnlm.decode.simulate import confusion_map, simulated_log_probs
from nnlm.decode.wer import word_errors
from nnlm.loading import load
from nnlm.mixture import Mixture

ALPHAS = (0.25, 0.5, 1.0, 1.5, 2.0)
BETAS = (-1.0, 0.0, 1.0, 2.0, 3.0)


def paragraphs(words: list[str], count: int, low: int = 5, high: int = 25) -> list[list[str]]:
    """The first `count` paragraphs of `low`-`high` words with no <unk> (set-up, not measured)."""
    out, current = [], []
    for w in words:
        if w in (PARAGRAPH, TEXT):
            if low <= len(current) <= high and "<unk>" not in current:
                out.append(current)
            current = []
            if len(out) == count:
                break
        else:
            current.append(w)
    return out


def wer(hyps: list[list[str]], refs: list[list[str]]) -> float:
    return sum(word_errors(h, r) for h, r in zip(hyps, refs, strict=True)) / sum(len(r) for r in refs)


class NnlmSystem:
    def __init__(self, name, alphabet, model, beam):
        self.name, self.alphabet, self.model, self.beam = name, alphabet, model, beam

    def decode(self, utts, alpha, beta):
        decoder = CTCWordDecoder(self.alphabet, self.model, DecodeOptions(alpha=alpha, beta=beta, beam_width=self.beam))
        return [decoder.decode(lp).words for lp in utts]


class PyctcSystem:
    """pyctcdecode with a language model (KenLM's, or nnlm's adapter)."""

    def __init__(self, name, decoder, beam):
        self.name, self.decoder, self.beam = name, decoder, beam

    def decode(self, utts, alpha, beta):
        self.decoder.reset_params(alpha=float(alpha), beta=float(beta))
        return [self.decoder.decode(lp, beam_width=self.beam).split() for lp in utts]


def recomputing(model):
    """The same net whose begin_state/advance are the LanguageModel defaults: every step scores the states'
    whole contexts through log_prob (what a decoder pays without the stateful step)."""
    from nnlm.lm import LanguageModel

    class Recomputing(type(model)):
        begin_state = LanguageModel.begin_state
        advance = LanguageModel.advance

    twin = object.__new__(Recomputing)
    twin.__dict__.update(model.__dict__)
    return twin


def tune(system, dev, dev_refs, lm: bool) -> tuple[float, float, float]:
    """Coordinate search, one round: alpha with beta 1, then beta (no LM: beta only)."""
    alpha, beta = (0.5, 1.0)
    best = wer(system.decode(dev, alpha, beta), dev_refs)
    for a in (ALPHAS if lm else ()):
        w = wer(system.decode(dev, a, beta), dev_refs)
        if w < best:
            best, alpha = w, a
    for b in BETAS:
        w = wer(system.decode(dev, alpha, b), dev_refs)
        if w < best:
            best, beta = w, b
    return alpha, beta, best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arpa", required=True, help="the KN5 ARPA file (KenLM and nnlm both load it)")
    ap.add_argument("--nplm", help="a trained NPLM run directory (default: none)")
    ap.add_argument("--mix-weight", type=float, default=0.5, help="the NPLM's weight in the mixture (default 0.5)")
    ap.add_argument("--test", type=int, default=60, help="test paragraphs (default 60)")
    ap.add_argument("--dev", type=int, default=20, help="dev paragraphs (default 20)")
    ap.add_argument("--beam", type=int, default=64, help="beam width of every decoder (default 64)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="test decodes timed per system, the fastest reported (default 3; neural rows 1)")
    ap.add_argument("--adapter", action="store_true", help="also time nnlm KN5 inside pyctcdecode (the adapter)")
    ap.add_argument("--tune-neural", action="store_true",
                    help="tune the NPLM and the mixture too (default: they take nnlm KN5's alpha and beta: the NPLM's "
                         "advance is not yet incremental, ~0.2 s a call here, and tuning costs 11 dev decodes)")
    ap.add_argument("--confusion", type=float, default=0.15,
                    help="share of characters whose frames also favour a confusable neighbour (default 0.15; "
                         "higher makes the task harder and the language model matter more)")
    ap.add_argument("--recompute", action="store_true",
                    help="with --nplm: also time the NPLM's decode with its stateful step switched off (the "
                         "default advance, recomputing each context through log_prob), at the NPLM's alpha and beta")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    import kenlm
    import pyctcdecode
    import torch

    kn5 = load(args.arpa)
    corpus = load_corpus("brown")
    words = [t for t in kn5.vocab.tokens if t not in ("<unk>", PARAGRAPH, TEXT)]
    labels = ["<pad>", "|", *sorted({ch for w in words for ch in w})]
    alphabet = Alphabet.from_labels(labels)
    rng = np.random.default_rng(0)
    confusable = confusion_map(alphabet, seed=0)
    dev_refs = paragraphs(corpus.vocab.decode(corpus.valid), args.dev)
    test_refs = paragraphs(corpus.vocab.decode(corpus.test), args.test)
    dev = [simulated_log_probs(r, alphabet, rng, confusable, confusion=args.confusion) for r in dev_refs]
    test = [simulated_log_probs(r, alphabet, rng, confusable, confusion=args.confusion) for r in test_refs]

    systems = [(NnlmSystem("no LM", alphabet, None, args.beam), False)]  # (system, has an LM / "same" for the adapter)
    kenlm_decoder = pyctcdecode.BeamSearchDecoderCTC(
        pyctcdecode.Alphabet.build_alphabet(labels),
        pyctcdecode.LanguageModel(kenlm.Model(args.arpa), unigrams=words))
    systems.append((PyctcSystem("KenLM KN5 via pyctcdecode", kenlm_decoder, args.beam), True))
    systems.append((NnlmSystem("nnlm KN5 (same ARPA)", alphabet, kn5, args.beam), True))
    if args.adapter:
        from nnlm.decode.pyctc import build_ctcdecoder

        systems.append((PyctcSystem("nnlm KN5 via pyctcdecode (adapter)", build_ctcdecoder(labels, kn5), args.beam),
                        "same"))  # not tuned: nnlm KN5's alpha and beta (it is slow; the row is for its time)
    if args.nplm:
        nplm = load(args.nplm)
        if nplm.vocab.fingerprint != kn5.vocab.fingerprint:
            raise SystemExit("the NPLM and the ARPA must share Brown's vocabulary")
        torch.set_num_threads(1)  # a busy machine: one thread is 3x faster than two fighting for the cores
        neural = True if args.tune_neural else "kn5"
        systems.append((NnlmSystem("nnlm NPLM (mlp1)", alphabet, nplm, args.beam), neural))
        if args.recompute:
            systems.append((NnlmSystem("nnlm NPLM (mlp1), recomputing each context", alphabet,
                                       recomputing(nplm), args.beam), "nplm"))
        mix = Mixture([kn5, nplm], [1 - args.mix_weight, args.mix_weight])
        systems.append((NnlmSystem(f"nnlm mixture KN5 + NPLM ({1 - args.mix_weight:g}/{args.mix_weight:g})",
                                   alphabet, mix, args.beam), neural))

    frames = sum(len(lp) for lp in test)
    print(f"simulated recognizer: {len(dev)} dev / {len(test)} test paragraphs, {len(labels)} labels, "
          f"{frames:,} test frames, {sum(map(len, test_refs)):,} test words; beam {args.beam}")
    rows = []
    for system, lm in systems:
        t0 = time.perf_counter()
        if lm in ("same", "kn5", "nplm"):  # not tuned: the previous row's, nnlm KN5's or the NPLM's alpha and beta
            source = rows[-1] if lm == "same" else next(
                r for r in rows if r["system"] == ("nnlm KN5 (same ARPA)" if lm == "kn5" else "nnlm NPLM (mlp1)"))
            alpha, beta, dev_wer = source["alpha"], source["beta"], float("nan")
        else:
            alpha, beta, dev_wer = tune(system, dev, dev_refs, lm)
        tuning = time.perf_counter() - t0
        seconds = float("inf")
        for _ in range(1 if "NPLM" in system.name else args.repeats):  # the fastest of a few: the machine is shared
            t0 = time.perf_counter()
            hyps = system.decode(test, alpha, beta)
            seconds = min(seconds, time.perf_counter() - t0)
        row = {"system": system.name, "alpha": alpha, "beta": beta, "dev_wer": dev_wer,
               "test_wer": wer(hyps, test_refs), "decode_seconds": seconds, "tuning_seconds": tuning}
        rows.append(row)
        print(f"{row['system']:<44} alpha {alpha:<4g} beta {beta:<4g} dev WER {100 * dev_wer:6.2f}%  "
              f"test WER {100 * row['test_wer']:6.2f}%  decode {seconds:7.2f} s", flush=True)
    by = {r["system"]: r for r in rows}
    ref, ours = by["KenLM KN5 via pyctcdecode"], by["nnlm KN5 (same ARPA)"]
    ratios = {"wer_ratio_nnlm_kn5_vs_kenlm": ours["test_wer"] / max(ref["test_wer"], 1e-12),
              "time_ratio_nnlm_kn5_vs_kenlm": ours["decode_seconds"] / ref["decode_seconds"]}
    if "nnlm NPLM (mlp1), recomputing each context" in by:
        slow, fast = by["nnlm NPLM (mlp1), recomputing each context"], by["nnlm NPLM (mlp1)"]
        speedup = ratios["speedup_nplm_stateful_vs_recomputing"] = slow["decode_seconds"] / fast["decode_seconds"]
        print(f"nnlm NPLM stateful step / recomputing each context: decode {speedup:.2f}x "
              f"faster, test WER {100 * fast['test_wer']:.2f}% vs {100 * slow['test_wer']:.2f}%")
    print("nnlm KN5 / pyctcdecode+KenLM: WER x{wer_ratio_nnlm_kn5_vs_kenlm:.3f}, decode time "
          "x{time_ratio_nnlm_kn5_vs_kenlm:.2f}".format(**ratios))
    load_avg = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load {' '.join(load_avg)}; {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    if args.json:
        with open(args.json, "w") as fh:  # a benchmark's own scratch output, not a user's file
            json.dump({"rows": rows, **ratios, "load": load_avg, "frames": frames}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
