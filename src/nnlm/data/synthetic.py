"""Corpora generated from a known source, so that the best possible perplexity is known.

The source is a class trigram: every word belongs to one of K classes, the next class depends on
the classes of the two previous tokens, P(c_t | c_{t-2}, c_{t-1}) (sparse Dirichlet rows), and the
word on its class alone, P(w | c) (Zipf-like within the class). An n-gram model sees word pairs and
cannot share what it learns between words of one class; a model with word features can, which is
the paper's central claim, checked here against the limit.

Sentences end with the end class (one word, `<p>`), which the text-directory reader puts at the end
of every line: a file has one sentence per line. After `<p>` the next class does not depend on the
class before it, so sentences are independent and are generated all at once, one NumPy step per
position (no loop over tokens). The first sentence of the stream follows an implicit `<p>`.

The limit: the exact log-probability of the test split under the source, with each target as a model
sees it: a word that never occurs in train is `<unk>` to the model, whose source probability is the
mass of all such words, sum_c P(c | history) P(unseen word | c). Histories are the true classes.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnlm.data.corpus import SPLITS
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text

SOURCE_FILE = "source.json"  # the parameters and the limit, next to train.txt / valid.txt / test.txt
END = 0  # the end class: its one word is `<p>`


@dataclass(frozen=True)
class ClassSource:
    """P(c | c2, c1) as [K+1, K+1, K+1] (index 0 = the end class), P(w | c) as the word's class and
    its probability within it."""

    class_probs: np.ndarray  # [K+1, K+1, K+1], rows sum to 1; P(END | ., END) = 0 (no empty sentence)
    word_class: np.ndarray   # [W] class of word w (1..K); word ids 0..W-1 are written as "w<id>"
    word_prob: np.ndarray    # [W] P(w | its class)

    @classmethod
    def random(cls, words: int, classes: int, seed: int, mean_length: float = 20.0,
               concentration: float = 0.1) -> ClassSource:
        """A source of `words` words in `classes` classes; sentences of about `mean_length` words."""
        if classes < 1 or words < classes:
            raise NnlmError(f"a generated corpus needs at least one word per class (words {words}, classes {classes})")
        if not mean_length > 1.0 or not concentration > 0.0:
            raise NnlmError("mean sentence length must exceed 1 and the concentration must be positive")
        rng = np.random.default_rng([seed, 1])
        k = classes
        probs = np.zeros((k + 1, k + 1, k + 1))
        probs[:, :, 1:] = rng.dirichlet(np.full(k, concentration), size=(k + 1, k + 1))
        probs[:, END, :] = probs[0, END, :]  # after the end: independent of the class before it
        p_end = 1.0 / mean_length
        probs[:, 1:, 1:] *= 1.0 - p_end
        probs[:, 1:, END] = p_end
        word_class = 1 + rng.permutation(np.arange(words) % k)
        zipf = 1.0 / (1.0 + rng.permutation(words))  # ranks within the whole vocabulary, normalized per class
        mass = np.bincount(word_class, weights=zipf, minlength=k + 1)
        return cls(probs, word_class, zipf / mass[word_class])

    def generate(self, sentences: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`sentences` sentences, flat over the stream: (word ids, -1 for `<p>`; classes; source
        log-probabilities) per token, and the sentence lengths (`<p>` included)."""
        rng = np.random.default_rng([seed, 2])
        k = self.class_probs.shape[0] - 1
        class_cdf = np.cumsum(self.class_probs, axis=2)
        order = np.argsort(self.word_class, kind="stable")  # words grouped by class
        sizes = np.bincount(self.word_class, minlength=k + 1)
        width = int(sizes.max())
        slot = np.arange(len(order)) - np.concatenate([[0], np.cumsum(sizes)])[self.word_class[order]]
        word_table = np.full((k + 1, width), -1)
        word_table[self.word_class[order], slot] = order
        word_cdf = np.cumsum(np.where(word_table >= 0, self.word_prob[np.maximum(word_table, 0)], 0.0), axis=1)
        word_cdf[:, -1] = 1.0  # (rounding) every draw lands in the table
        c2 = np.full(sentences, END)
        c1 = np.full(sentences, END)
        alive = np.ones(sentences, dtype=bool)
        cols_w, cols_c, cols_lp, cols_alive = [], [], [], []
        while alive.any():  # one step per position, all live sentences at once
            idx = np.flatnonzero(alive)
            c = np.minimum((rng.random(len(idx))[:, None] > class_cdf[c2[idx], c1[idx]]).sum(axis=1), k)
            pos = np.minimum((rng.random(len(idx))[:, None] > word_cdf[c]).sum(axis=1), width - 1)
            w = np.where(c == END, -1, word_table[c, pos])
            lp = np.log(self.class_probs[c2[idx], c1[idx], c])
            lp += np.where(c == END, 0.0, np.log(self.word_prob[np.maximum(w, 0)]))
            for store, values in ((cols_w, w), (cols_c, c), (cols_lp, lp)):
                col = np.zeros(sentences, dtype=values.dtype)
                col[idx] = values
                store.append(col)
            cols_alive.append(alive.copy())
            c2[idx], c1[idx] = c1[idx], c
            alive[idx[c == END]] = False
        present = np.stack(cols_alive, axis=1)  # [S, L] row-major: sentence after sentence
        return (np.stack(cols_w, axis=1)[present], np.stack(cols_c, axis=1)[present],
                np.stack(cols_lp, axis=1)[present], present.sum(axis=1))

    def unseen_mass(self, seen: np.ndarray) -> np.ndarray:
        """[K+1] P(a word not in `seen` (bool [W]) | class c); 0 for the end class."""
        k = self.class_probs.shape[0] - 1
        return np.bincount(self.word_class[~seen], weights=self.word_prob[~seen], minlength=k + 1)


def _text(words: np.ndarray) -> str:
    """Words as w<id>, a line break for each `<p>` (the reader puts `<p>` at every line end)."""
    names = np.char.add("w", np.arange(int(words.max(initial=0)) + 1).astype(str))
    return " ".join(np.where(words < 0, "\n", names[np.maximum(words, 0)]).tolist()).replace(" \n ", "\n") \
        .removesuffix(" \n") + "\n"


def write_corpus(out: Path | str, tokens: int, words: int = 2000, classes: int = 40, seed: int = 0,
                 mean_length: float = 20.0, concentration: float = 0.1,
                 fractions: tuple[float, float] = (0.8, 0.1)) -> dict:
    """Write train.txt / valid.txt / test.txt of about `tokens` tokens (split at sentence ends, `fractions`
    for train and valid) and source.json with the source's perplexity per split; returns its dict."""
    out = Path(out)
    if tokens < 100:
        raise NnlmError(f"a generated corpus needs at least 100 tokens, got {tokens}")
    source = ClassSource.random(words, classes, seed, mean_length, concentration)
    flat, classes_flat, log_probs, lengths = source.generate(int(math.ceil(tokens / mean_length * 1.2)) + 10, seed)
    ends = np.cumsum(lengths)  # sentence i ends before ends[i]
    total = int(ends[min(int(np.searchsorted(ends, tokens)), len(ends) - 1)])
    cuts = [0] + [int(ends[np.searchsorted(ends, f * total)]) for f in (fractions[0], fractions[0] + fractions[1])]
    bounds = dict(zip(SPLITS, zip(cuts, cuts[1:] + [total], strict=True), strict=True))
    seen = np.zeros(words, dtype=bool)
    train = flat[:bounds["train"][1]]
    seen[train[train >= 0]] = True
    unseen = source.unseen_mass(seen)
    info: dict = {"source": "class trigram", "words": words, "classes": classes, "seed": seed,
                  "mean_length": mean_length, "concentration": concentration,
                  "unseen_in_train": int((~seen).sum()), "tokens": {}}
    out.mkdir(parents=True, exist_ok=True)
    for split, (a, b) in bounds.items():
        if b <= a:
            raise NnlmError(f"{tokens} tokens are too few for a {split} split; ask for more tokens")
        atomic_write_text(out / f"{split}.txt", _text(flat[a:b]))
        w, lp = flat[a:b], log_probs[a:b].copy()
        oov = (w >= 0) & ~seen[np.maximum(w, 0)]
        if oov.any():  # <unk> to a model: the mass of every unseen word after this history
            pos = np.flatnonzero(oov) + a
            prev1 = np.where(pos >= 1, classes_flat[pos - 1], END)
            prev2 = np.where(pos >= 2, classes_flat[pos - 2], END)
            lp[oov] = np.log(np.einsum("ij,j->i", source.class_probs[prev2, prev1], unseen))
        info["tokens"][split] = b - a
        info[f"{split}_perplexity"] = float(np.exp(-lp.mean()))
    atomic_write_text(out / SOURCE_FILE, json.dumps(info, indent=1) + "\n")
    return info


def read_source(corpus_dir: Path | str) -> dict | None:
    """source.json of a generated corpus directory, or None for any other corpus."""
    path = Path(corpus_dir) / SOURCE_FILE
    return json.loads(path.read_text()) if path.is_file() else None



def _stream(path: Path) -> np.ndarray:
    """A split's word ids as written by `write_corpus` (w<id>; -1 for each line's `<p>`)."""
    words = np.array(path.read_text().replace("\n", " \n ").split(" "))
    words = words[words != ""]
    end = words == "\n"
    return np.where(end, -1, np.char.lstrip(np.where(end, "w0", words), "w").astype(np.int64))


def known_class_perplexity(corpus_dir: Path | str, split: str = "test", prior: float | None = None) -> float:
    """The perplexity of `split` under the source's structure with its numbers estimated from train: the true
    classes given, P(c | c2, c1) the posterior mean under the source's own Dirichlet prior (counts + concentration)
    and P(w | c) add-one-half counts. What 'enough data for this source' means: a learner that had found the
    classes could get this close to the limit from this train split; a net's further gap is its own."""
    corpus_dir = Path(corpus_dir)
    info = read_source(corpus_dir)
    if info is None:
        raise NnlmError(f"{corpus_dir} is not a generated corpus (no {SOURCE_FILE})")
    source = ClassSource.random(info["words"], info["classes"], info["seed"], info["mean_length"],
                                info["concentration"])
    k = info["classes"]

    def histories(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = np.where(ids < 0, END, source.word_class[np.maximum(ids, 0)])
        c1 = np.concatenate([[END], c[:-1]])
        c2 = np.where(c1 == END, END, np.concatenate([[END, END], c[:-2]]))  # after `<p>`: a fresh start
        return c2, c1, c

    train = _stream(corpus_dir / "train.txt")
    counts = np.zeros((k + 1, k + 1, k + 1))
    np.add.at(counts, histories(train), 1.0)
    alpha = info["concentration"] if prior is None else prior
    class_probs = (counts + alpha) / (counts.sum(axis=2, keepdims=True) + alpha * (k + 1))
    word_counts = np.bincount(train[train >= 0], minlength=info["words"]) + 0.5
    word_probs = word_counts / np.bincount(source.word_class, weights=word_counts, minlength=k + 1)[source.word_class]
    seen = word_counts > 0.5
    unseen = np.bincount(source.word_class[~seen], weights=word_probs[~seen], minlength=k + 1)

    ids = _stream(corpus_dir / f"{split}.txt")
    c2, c1, c = histories(ids)
    log_p = np.log(class_probs[c2, c1, c])
    word = ids >= 0
    known = word & seen[np.maximum(ids, 0)]
    log_p[known] += np.log(word_probs[ids[known]])
    oov = word & ~known  # `<unk>` to a model: every unseen word's mass after this history
    log_p[oov] = np.log(np.einsum("ij,j->i", class_probs[c2[oov], c1[oov]], unseen))
    return float(np.exp(-log_p.mean()))
