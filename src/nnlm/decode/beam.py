"""CTC prefix beam search over characters with a word language model, vectorized over the beam.

Each hypothesis is a collapsed label prefix with two acoustic log-probabilities (paths ending in a
blank, paths ending in its last label), the fused LM score of its finished words (alpha * ln P(word)
+ beta each), the hash of its partial word and the row of its LM state in a pool (states change only
at word ends). A frame is two compiled calls over all hypotheses x the frame's likely characters
(nnlm.decode.frame): extensions are merged by prefix hash (summing their paths, as a prefix search
should) and the best kept; between them every hypothesis that ends a word at this frame is
scored in ONE `model.advance` call. Words outside the LM's vocabulary are scored as its `<unk>` plus
alpha * ln(10) * `unk_offset`; a partial word that begins no vocabulary word costs `unk_offset` (scaled by
its length past 6 characters): pyctcdecode's rules, so one ARPA file gives both decoders the same
scores. With `known_words_only` such hypotheses are dropped instead.

Empty words are never made: a boundary at the start or right after another boundary (with blanks
between) keeps the prefix it follows, so "|a||b|" and "a|b" are one hypothesis."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnlm.data.vocab import PARAGRAPH
from nnlm.decode import frame
from nnlm.decode.alphabet import Alphabet
from nnlm.decode.lexicon import SEED, Lexicon
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel, LMState

NEG_INF = -np.inf
LN10 = float(np.log(10.0))
AVG_WORD_LEN = 6  # longer unknown partial words cost proportionally more (pyctcdecode's AVG_TOKEN_LEN)


@dataclass
class DecodeOptions:
    """Shallow-fusion weights and pruning (defaults as pyctcdecode's, except the beam width)."""

    alpha: float = 0.5  # LM weight on natural-log word probabilities
    beta: float = 1.0  # bonus per word
    beam_width: int = 64
    token_min_logp: float = -5.0  # characters below this log-probability at a frame are not tried
    beam_prune_logp: float = -10.0  # hypotheses this far below the best are dropped
    unk_offset: float = -10.0  # a partial word outside the vocabulary: + this; a word: + alpha * ln(10) * this
    known_words_only: bool = False  # drop hypotheses whose words leave the LM's vocabulary instead
    score_boundary: bool = True  # score the end of the utterance as the LM's paragraph end (<p>)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.alpha) and np.isfinite(self.beta)):
            raise NnlmError("alpha and beta must be finite numbers")
        if int(self.beam_width) < 1:
            raise NnlmError(f"the beam width must be at least 1, got {self.beam_width}")


@dataclass
class Hypothesis:
    words: list[str]
    score: float  # acoustic ln P + fused LM score


@dataclass
class _Beams:
    key: np.ndarray  # uint64 hash of the collapsed label prefix
    last: np.ndarray  # int64 last label column (-1: the empty prefix)
    pb: np.ndarray  # ln P of the prefix's paths ending in blank
    pnb: np.ndarray  # ... ending in its last label
    lm: np.ndarray  # fused LM score of the finished words
    whash: np.ndarray  # uint64 hash of the partial word (SEED: none)
    wlen: np.ndarray  # its length in characters
    node: np.ndarray  # int64 id of the prefix's last character in the back-pointer table (0: root)
    slot: np.ndarray  # int64 row of its LM state in the decoder's pool (states change only at word ends)


class CTCWordDecoder:
    """Decode [T, C] log-probabilities into words, with `model` (any nnlm LanguageModel) or none."""

    def __init__(self, alphabet: Alphabet, model: LanguageModel | None, options: DecodeOptions | None = None) -> None:
        self.alphabet = alphabet
        self.model = model
        self.options = options or DecodeOptions()
        self.tried = alphabet.emits.copy()
        if alphabet.boundary is not None:
            self.tried[alphabet.boundary] = True
        self.lexicon = Lexicon(alphabet, model.vocab) if model is not None else None
        self._prefix_keys = self.lexicon.prefix_keys if self.lexicon is not None else np.zeros(0, dtype=np.uint64)
        self._pool: LMState | None = None
        if self.lexicon is not None and self.lexicon.spellable == 0:
            raise NnlmError("the labels spell none of the language model's words (check their case and characters)")
        vocab = model.vocab if model is not None else None
        self.end_id = vocab.id(PARAGRAPH) if vocab is not None and PARAGRAPH in vocab else None

    def decode(self, log_probs: np.ndarray) -> Hypothesis:
        if log_probs.ndim != 2 or log_probs.shape[1] != len(self.alphabet) or not len(log_probs):
            raise NnlmError(f"log-probabilities must be [frames >= 1, {len(self.alphabet)}]")
        lp_all = np.ascontiguousarray(log_probs, dtype=np.float64)
        o = self.options
        likely = self.tried[None, :] & (lp_all > o.token_min_logp)
        top = np.argmax(lp_all, axis=1)
        likely[np.arange(len(top)), top] |= self.tried[top]
        rows, cols = np.nonzero(likely)  # each frame's characters to try, cut from one array
        per_frame = np.split(cols, np.cumsum(np.bincount(rows, minlength=len(lp_all)))[:-1])
        beams = _Beams(np.array([SEED]), np.array([-1]), np.zeros(1), np.full(1, NEG_INF), np.zeros(1),
                       np.array([SEED]), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                       np.zeros(1, dtype=np.int64))
        self._pool = self.model.begin_state(1) if self.model is not None else None
        parents, labels = [np.zeros(1, dtype=np.int64)], [np.full(1, -1, dtype=np.int64)]
        count = 1
        for lp, chars in zip(lp_all, per_frame, strict=True):
            beams, new_parents, new_labels = self._step(beams, lp, chars, count)
            parents.append(new_parents)
            labels.append(new_labels)
            count += len(new_parents)
        final = self._finish(beams)
        best = int(np.argmax(final))
        self._pool = None
        return Hypothesis(self._spell(int(beams.node[best]), np.concatenate(parents), np.concatenate(labels)),
                          float(final[best]))

    # --- one frame: the compiled acoustic half, one batched LM call, the compiled selection ---------

    def _step(self, b: _Beams, lp: np.ndarray, chars: np.ndarray,
              node_count: int) -> tuple[_Beams, np.ndarray, np.ndarray]:
        o = self.options
        bnd = -1 if self.alphabet.boundary is None else self.alphabet.boundary
        key, last, pb, pnb, lm, whash, wlen, origin, fresh, ended, word = frame.expand(
            b.key, b.last, b.pb, b.pnb, b.lm, b.whash, b.wlen, lp, chars, self.alphabet.blank, bnd, SEED,
            float(o.beta), float(o.beam_prune_logp), self._prefix_keys, float(o.unk_offset), bool(o.known_words_only),
            float(AVG_WORD_LEN))
        slot = b.slot[origin]
        if ended.any():
            enders = np.flatnonzero(ended)
            lm[enders] += o.beta
            if self.model is not None:
                word_lp, advanced = self._score_words(self._pool.take(slot[enders]), word[enders])
                lm[enders] += word_lp
                slot[enders] = len(self._pool) + np.arange(len(enders))
                self._pool = LMState.concat([self._pool, advanced])
        keep = frame.select(pb, pnb, lm, whash, wlen, self._prefix_keys, float(o.unk_offset),
                            bool(o.known_words_only), float(AVG_WORD_LEN), int(o.beam_width),
                            float(o.beam_prune_logp))
        *kept, slot, new_parents, new_labels = frame.gather(keep, fresh, key, last, pb, pnb, lm, whash, wlen, origin,
                                                            slot, b.node, node_count)
        if self._pool is not None and len(self._pool) > 4 * o.beam_width + 64:  # drop states no one holds
            live, slot = np.unique(slot, return_inverse=True)
            self._pool = self._pool.take(live)
        return _Beams(*kept, slot), new_parents, new_labels

    def _score_words(self, state: LMState, word_hashes: np.ndarray) -> tuple[np.ndarray, LMState]:
        """alpha * ln P(word) for each row; off the vocabulary, + alpha * ln(10) * unk_offset (pyctcdecode's
        rule: the offset is in log10 units, weighted as the LM is) or -inf with known_words_only."""
        o = self.options
        ids, known = self.lexicon.lookup(word_hashes)
        log_probs, state = self.model.advance(state, ids)
        off = NEG_INF if o.known_words_only else o.alpha * LN10 * o.unk_offset
        scores = o.alpha * log_probs + np.where(known, 0.0, off)
        return scores, state

    def _finish(self, b: _Beams) -> np.ndarray:
        """Each hypothesis' final score: its partial word scored as a word, then the utterance's end."""
        o = self.options
        final = np.logaddexp(b.pb, b.pnb) + b.lm
        pending = np.flatnonzero(b.wlen > 0)
        final[pending] += o.beta
        if self.model is None:
            return final
        state = self._pool.take(b.slot)
        if len(pending):
            word_lp, advanced = self._score_words(state.take(pending), b.whash[pending])
            final[pending] += word_lp
            row = np.arange(len(final))
            row[pending] = len(final) + np.arange(len(pending))
            state = LMState.concat([state, advanced]).take(row)
        if o.score_boundary and self.end_id is not None:
            end_lp, _ = self.model.advance(state, np.full(len(final), self.end_id))
            final += o.alpha * end_lp
        return final

    def _spell(self, node: int, parents: np.ndarray, labels: np.ndarray) -> list[str]:
        columns = []
        while node > 0:  # once per utterance: the best hypothesis' characters
            columns.append(int(labels[node]))
            node = int(parents[node])
        return self.alphabet.spell(columns[::-1]).split()
