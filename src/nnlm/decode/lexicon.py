"""The LM's words spelled in the alphabet's columns, found by hash: a hypothesis carries the hash of
its partial word, so the word id at a word end (and whether a partial word can still become a known
word) is one `searchsorted` over all hypotheses at once, never a string built per hypothesis.

Hashes are 64-bit polynomial hashes of the column sequence (h' = h * MULT + column + 1, wrapping);
two spellings sharing a hash would need ~2^32 distinct words, far beyond any vocabulary."""
from __future__ import annotations

import numpy as np

from nnlm.data.vocab import PARAGRAPH, TEXT, Vocabulary
from nnlm.decode.alphabet import Alphabet

SEED = np.uint64(0xCBF29CE484222325)
MULT = np.uint64(0x100000001B3)


def extend(hashes: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """The hashes after appending one column to each sequence (arrays: numpy wraps uint64 silently)."""
    return hashes * MULT + (np.asarray(columns, dtype=np.uint64) + np.uint64(1))


class Lexicon:
    """Sorted hashes of every vocabulary word the alphabet can spell (-> its id), and of their prefixes."""

    def __init__(self, alphabet: Alphabet, vocab: Vocabulary) -> None:
        column = alphabet.char_column
        specials = {vocab.unk, PARAGRAPH, TEXT}
        spelled = [(i, [column[ch] for ch in tok]) for i, tok in enumerate(vocab.tokens)
                   if tok not in specials and all(ch in column for ch in tok)]
        self.unk_id = vocab.unk_id
        self.spellable = len(spelled)
        longest = max((len(cols) for _, cols in spelled), default=0)
        grid = np.full((len(spelled), longest), -1, dtype=np.int64)
        for row, (_, cols) in enumerate(spelled):
            grid[row, :len(cols)] = cols
        hashes = np.full(len(spelled), SEED, dtype=np.uint64)
        prefixes = []
        for j in range(longest):  # one column of all words at a time
            active = grid[:, j] >= 0
            hashes[active] = extend(hashes[active], grid[active, j])
            prefixes.append(hashes[active])
        order = np.argsort(hashes, kind="stable")
        self.word_keys = hashes[order]
        self.word_ids = np.array([i for i, _ in spelled], dtype=np.int64)[order]
        self.prefix_keys = np.unique(np.concatenate(prefixes)) if prefixes else np.zeros(0, dtype=np.uint64)

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(word ids, known): the vocabulary id of each hashed word, `<unk>` where it is not a word."""
        at = np.minimum(np.searchsorted(self.word_keys, hashes), max(len(self.word_keys) - 1, 0))
        known = (self.word_keys[at] == hashes) if len(self.word_keys) else np.zeros(len(hashes), dtype=bool)
        return np.where(known, self.word_ids[at] if len(self.word_ids) else 0, self.unk_id), known
