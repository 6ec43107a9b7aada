"""`nnlm rescore` on made-up n-best lists from Brown: each test (and dev: valid) paragraph of 6-25 words
hidden among corrupted copies with a noisy "acoustic" score (nnlm.rescore.synthetic), reranked with a
Kneser-Ney trigram built on Brown train (and any --lm given), weights tuned on the dev lists. Prints the
word error rate of the acoustic 1-best and of the reranked 1-best.

    NLTK_DATA=../shared/nltk_data PYTHONPATH=src python benchmarks/rescore_brown.py --out rescore-demo \
        [--utterances 300] [--n 10] [--lm RUN_DIR ...] [--objective wer]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from nnlm.cli.main import main
from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import PARAGRAPH
from nnlm.rescore.synthetic import write_srilm_set


def paragraphs(words: list[str], count: int, low: int = 6, high: int = 25) -> list[list[str]]:
    """The first `count` paragraphs of `low`-`high` words (markers dropped)."""
    out, current = [], []
    for w in words:  # set-up, not the measured path
        if w == PARAGRAPH:
            if low <= len(current) <= high:
                out.append(current)
            current = []
        elif not w.startswith("<"):
            current.append(w)
        if len(out) == count:
            break
    return out


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="rescore-demo", help="working directory (default rescore-demo)")
    ap.add_argument("--utterances", type=int, default=300, help="test and dev lists each (default 300)")
    ap.add_argument("--n", type=int, default=10, help="hypotheses per list (default 10)")
    ap.add_argument("--lm", action="append", default=[], help="more models to add (default: the KN trigram only)")
    ap.add_argument("--objective", choices=("wer", "likelihood"), default="wer", help="tuning (default wer)")
    args = ap.parse_args()
    root = Path(args.out)
    corpus = load_corpus("brown")
    kn = root / "kn3"
    if not kn.exists():
        from nnlm.ngram.build import build_ngram

        build_ngram("kn", corpus, 3).save(kn)
    test = paragraphs(corpus.vocab.decode(corpus.test), args.utterances)
    dev = paragraphs(corpus.vocab.decode(corpus.valid), args.utterances)
    test_refs = write_srilm_set(test, root / "test", args.n, seed=1)
    dev_refs = write_srilm_set(dev, root / "dev", args.n, seed=2)
    more = [arg for model in args.lm for arg in ("--lm", model)]
    command = ["rescore", str(root / "test"), "--format", "srilm", "--lm", str(kn), *more,
               "--tune", str(root / "dev"), "--tune-refs", str(dev_refs), "--objective", args.objective,
               "--refs", str(test_refs), "--out", str(root / "reranked")]
    print("nnlm " + " ".join(command))
    return main(command)


if __name__ == "__main__":
    raise SystemExit(main_())
