"""nnlm's modified Kneser-Ney against KenLM's lmplz on the same Brown train stream.

lmplz is not part of the pip `kenlm` module: build it from KenLM's source (its lm/builder) and pass
its path. Then, from the repository root:
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/lmplz_compare.py --lmplz PATH/lmplz

What lmplz sees, chosen to match nnlm's model as closely as lmplz allows: the whole train split as
ONE line (one stream, like nnlm; lmplz adds a single <s> ... </s> around it), with nnlm's <unk>
token renamed (lmplz refuses <unk> in its input). Words of V never seen in train become lmplz's
<unk>, which gets the same uniform-floor share a single unseen word gets. Valid and test are
scored with the `kenlm` module word by word, each split continuing from the end of the previous
one, exactly as nnlm's perplexity does; tokens are counted the same way.
"""
from __future__ import annotations

import argparse
import math
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from nnlm.data.corpus import load_corpus
from nnlm.lm import perplexity
from nnlm.ngram.kneser_ney import KneserNeyModel

RENAMED_UNK = "UNKTOKEN"


def kenlm_perplexity(arpa: Path, words: list[str], start: int, stop: int) -> float:
    """exp(-mean ln P) of words[start:stop], each given everything before it (from an empty context)."""
    import kenlm

    model = kenlm.Model(str(arpa))
    state, out = kenlm.State(), kenlm.State()
    model.NullContextWrite(state)
    total = 0.0
    for i in range(stop):
        score = model.BaseScore(state, words[i], out)
        if i >= start:
            total += score
        state, out = out, state
    return math.exp(-total * math.log(10) / (stop - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lmplz", required=True, help="path of KenLM's lmplz binary")
    parser.add_argument("--orders", type=int, nargs="+", default=[3, 4, 5])
    args = parser.parse_args()
    corpus = load_corpus("brown")
    tokens = np.array([RENAMED_UNK if t == corpus.vocab.unk else t for t in corpus.vocab.tokens], dtype=object)
    words = list(tokens[corpus.stream()])
    with tempfile.TemporaryDirectory() as tmp:
        train_txt = Path(tmp) / "train.txt"
        train_txt.write_text(" ".join(tokens[corpus.train]) + "\n", encoding="utf-8")
        print(f"{'order':>5} {'lmplz s':>8} {'nnlm s':>7}  valid lmplz / nnlm    test lmplz / nnlm")
        for order in args.orders:
            arpa = Path(tmp) / f"lmplz{order}.arpa"
            t0 = time.perf_counter()
            with open(train_txt, "rb") as src, open(arpa, "wb") as dst:
                subprocess.run([args.lmplz, "-o", str(order), "-S", "1G", "-T", tmp], stdin=src, stdout=dst,
                               stderr=subprocess.DEVNULL, check=True)
            t1 = time.perf_counter()
            model = KneserNeyModel.fit(corpus.vocab, corpus.train, order)
            t2 = time.perf_counter()
            row = []
            for split in ("valid", "test"):
                start = corpus.split_offset(split)
                row += [kenlm_perplexity(arpa, words, start, start + len(corpus.split(split))),
                        perplexity(model, corpus, split)]
            print(f"{order:>5} {t1 - t0:>8.2f} {t2 - t1:>7.2f}  "
                  f"{row[0]:>8.2f} / {row[1]:<8.2f}  {row[2]:>8.2f} / {row[3]:.2f}")


if __name__ == "__main__":
    main()
