"""The learned word feature vectors (rows of C): nearest neighbors, a 2-D map, word2vec export.

The paper's claim is that similar words get similar feature vectors; these tools make that
visible. Similarity is the cosine between rows of C; the map is a PCA projection (numpy SVD,
no extra dependency).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nnlm.capabilities import HasWordFeatures
from nnlm.data.vocab import PARAGRAPH, TEXT, UNK, Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import atomic_path, atomic_write_text, read_input
from nnlm.lm import LanguageModel

SPECIALS = (UNK, PARAGRAPH, TEXT)


def word_features(model: LanguageModel) -> np.ndarray:
    """C as float64 [|V|, m]; only neural models have word feature vectors."""
    if not isinstance(model, HasWordFeatures):
        raise NnlmError(f"only neural models have word feature vectors; this model is a {model.kind_name()} model")
    return model.word_feature_matrix()


def cosine_similarities(features: np.ndarray, row: int) -> np.ndarray:
    """cos(C(row), C(i)) for every i; a zero vector is similar to nothing (0)."""
    norms = np.linalg.norm(features, axis=1)
    unit = features / np.maximum(norms, 1e-300)[:, None]
    return unit @ unit[row]


def neighbors(model: LanguageModel, word: str, k: int = 10) -> list[tuple[str, float]]:
    """The k words whose feature vectors are closest (cosine) to `word`'s, the word itself excluded."""
    features = word_features(model)
    vocab = model.vocab
    if word not in vocab:
        raise NnlmError(f"{word!r} is not in the model's vocabulary ({len(vocab):,} words)")
    if not 1 <= k <= len(vocab) - 1:
        raise NnlmError(f"-k must be between 1 and |V| - 1 = {len(vocab) - 1}, got {k}")
    row = vocab.id(word)
    sims = cosine_similarities(features, row)
    sims[row] = -np.inf
    top = np.argsort(-sims, kind="stable")[:k]
    return [(vocab.tokens[i], float(sims[i])) for i in top]


def most_frequent_words(vocab: Vocabulary, n: int) -> list[str]:
    """The n most frequent words: the vocabulary is ordered by training count after its specials."""
    words = [t for t in vocab.tokens if t not in SPECIALS]
    if not 1 <= n <= len(words):
        raise NnlmError(f"--top must be between 1 and {len(words)} (the words of the vocabulary), got {n}")
    return words[:n]


def read_word_list(path: Path | str, vocab: Vocabulary) -> list[str]:
    """Words from a file (whitespace-separated), in order, without repeats; all must be in V."""
    try:
        words = list(dict.fromkeys(read_input(path, "word list", streams=True).decode("utf-8").split()))
    except UnicodeDecodeError as exc:
        raise NnlmError(f"cannot read word list {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not words:
        raise NnlmError(f"{path} lists no words")
    unknown = [w for w in words if w not in vocab]
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise NnlmError(f"{path}: not in the model's vocabulary: {', '.join(unknown[:5])}{more}")
    return words


def pca_2d(vectors: np.ndarray) -> np.ndarray:
    """Coordinates [N, 2] on the two principal axes (centered SVD); each axis' sign is fixed so the
    largest loading is positive, making the picture deterministic."""
    if len(vectors) < 2:
        raise NnlmError("a map needs at least 2 words")
    centered = vectors - vectors.mean(axis=0)
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    axes = vt[:2]
    signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(axis=1)])
    coords = centered @ (axes * signs[:, None]).T
    if coords.shape[1] < 2:  # m = 1: a single axis, drawn on a line
        coords = np.hstack([coords, np.zeros((len(coords), 1))])
    return coords


def draw_map(path: Path | str, words: list[str], coords: np.ndarray, title: str) -> None:
    """A labeled scatter plot of the words, written atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = min(24.0, 6.0 + len(words) / 25)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.scatter(coords[:, 0], coords[:, 1], s=6, color="tab:blue", alpha=0.6)
    for word, (x, y) in zip(words, coords, strict=True):
        ax.annotate(word, (x, y), fontsize=8, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel("principal axis 1")
    ax.set_ylabel("principal axis 2")
    ax.set_title(title)
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def word2vec_text(vocab: Vocabulary, features: np.ndarray) -> str:
    """The word2vec text format (what gensim's KeyedVectors.load_word2vec_format reads):
    a "count dim" line, then one "word v1 ... vm" line per word."""
    bad = [t for t in vocab.tokens if not t or any(c.isspace() for c in t)]
    if bad:
        raise NnlmError(f"the word2vec text format cannot hold tokens with whitespace, e.g. {bad[0]!r}")
    rows = (" ".join([tok, *(f"{v:.7g}" for v in vec)])
            for tok, vec in zip(vocab.tokens, features.tolist(), strict=True))
    return f"{len(vocab)} {features.shape[1]}\n" + "\n".join(rows) + "\n"


def write_embeddings(model: LanguageModel, path: Path | str) -> int:
    """Write the model's word feature vectors in word2vec text format; returns the number of words."""
    features = word_features(model)
    atomic_write_text(Path(path), word2vec_text(model.vocab, features))
    return len(features)
