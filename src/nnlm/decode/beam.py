"""CTC prefix beam search over characters with a word language model, vectorized over the beam.

Each hypothesis is a collapsed label prefix with two acoustic log-probabilities (paths ending in a
blank, paths ending in its last label), the fused LM score of its finished words (alpha * ln P(word)
+ beta each), the hash of its partial word and its LM state. A frame is a handful of array operations
over all hypotheses x the frame's likely characters: extensions are merged by prefix hash (summing
their paths, as a prefix search should), and every hypothesis that ends a word at this frame is
scored in ONE `model.advance` call. A partial word that begins no vocabulary word costs `unk_offset`
(scaled by its length past 6 characters, as pyctcdecode does), or is dropped with `known_words_only`.

Empty words are never made: a boundary at the start or right after another boundary (with blanks
between) keeps the prefix it follows, so "|a||b|" and "a|b" are one hypothesis."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnlm.data.vocab import PARAGRAPH
from nnlm.decode.alphabet import Alphabet
from nnlm.decode.lexicon import SEED, Lexicon, extend
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel, LMState

NEG_INF = -np.inf
AVG_WORD_LEN = 6  # longer unknown partial words cost proportionally more (pyctcdecode's AVG_TOKEN_LEN)


@dataclass
class DecodeOptions:
    """Shallow-fusion weights and pruning (defaults as pyctcdecode's, except the beam width)."""

    alpha: float = 0.5  # LM weight on natural-log word probabilities
    beta: float = 1.0  # bonus per word
    beam_width: int = 64
    token_min_logp: float = -5.0  # characters below this log-probability at a frame are not tried
    beam_prune_logp: float = -10.0  # hypotheses this far below the best are dropped
    unk_offset: float = -10.0  # added for a word (or partial word) outside the LM's vocabulary
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
    state: LMState | None


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
        if self.lexicon is not None and self.lexicon.spellable == 0:
            raise NnlmError("the labels spell none of the language model's words (check their case and characters)")
        vocab = model.vocab if model is not None else None
        self.end_id = vocab.id(PARAGRAPH) if vocab is not None and PARAGRAPH in vocab else None

    def decode(self, log_probs: np.ndarray) -> Hypothesis:
        if log_probs.ndim != 2 or log_probs.shape[1] != len(self.alphabet) or not len(log_probs):
            raise NnlmError(f"log-probabilities must be [frames >= 1, {len(self.alphabet)}]")
        lp_all = np.asarray(log_probs, dtype=np.float64)
        beams = _Beams(np.array([SEED]), np.array([-1]), np.zeros(1), np.full(1, NEG_INF), np.zeros(1),
                       np.array([SEED]), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                       self.model.begin_state(1) if self.model is not None else None)
        parents, labels = [np.zeros(1, dtype=np.int64)], [np.full(1, -1, dtype=np.int64)]
        count = 1
        for lp in lp_all:
            beams, new_parents, new_labels = self._step(beams, lp, count)
            parents.append(new_parents)
            labels.append(new_labels)
            count += len(new_parents)
        final = self._finish(beams)
        best = int(np.argmax(final))
        return Hypothesis(self._spell(int(beams.node[best]), np.concatenate(parents), np.concatenate(labels)),
                          float(final[best]))

    # --- one frame ----------------------------------------------------------------------------

    def _step(self, b: _Beams, lp: np.ndarray, node_count: int) -> tuple[_Beams, np.ndarray, np.ndarray]:
        o, bnd = self.options, self.alphabet.boundary
        n = len(b.key)
        total = np.logaddexp(b.pb, b.pnb)
        chars = np.flatnonzero(self.tried & (lp > o.token_min_logp))
        top = int(np.argmax(lp))
        if self.tried[top] and top not in chars:
            chars = np.append(chars, top)
        if not len(chars):  # a blank-only frame: every prefix stays, nothing to merge or score
            same_pnb = np.where(b.last >= 0, b.pnb + lp[np.maximum(b.last, 0)], NEG_INF)
            stay = _Beams(b.key, b.last, total + lp[self.alphabet.blank], same_pnb, b.lm, b.whash, b.wlen,
                          b.node, b.state)
            return stay, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        # the same prefix: a blank, or its last label again
        same_pb = total + lp[self.alphabet.blank]
        same_pnb = np.where(b.last >= 0, b.pnb + lp[np.maximum(b.last, 0)], NEG_INF)
        if bnd is not None:  # a boundary that would make an empty word keeps the prefix
            same_pb = np.where(b.last < 0, np.logaddexp(same_pb, total + lp[bnd]), same_pb)
            same_pnb = np.where(b.last == bnd, np.logaddexp(same_pnb, b.pb + lp[bnd]), same_pnb)
        # extensions by the frame's likely characters (a boundary only after a partial word)
        src = np.repeat(np.arange(n), len(chars))
        col = np.broadcast_to(chars, (n, len(chars))).ravel()
        ends = col == bnd if bnd is not None else np.zeros(len(col), dtype=bool)
        ext_pnb = np.where(col == b.last[src], b.pb[src], total[src]) + lp[col]
        floor = (total + b.lm).max() + o.beam_prune_logp  # LM and bonus aside, nothing below this survives
        ok = (~ends | (b.wlen[src] > 0)) & (ext_pnb + b.lm[src] + max(o.beta, 0.0) >= floor)
        src, col, ends, ext_pnb = src[ok], col[ok], ends[ok], ext_pnb[ok]
        ext_whash = np.where(ends, SEED, extend(b.whash[src], col))
        ext_wlen = np.where(ends, 0, b.wlen[src] + 1)

        # merge candidates with one prefix (the existing hypothesis comes first, so it gives the attributes)
        keys = np.concatenate([b.key, extend(b.key[src], col)])
        unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        pb = _group_logsumexp(np.concatenate([same_pb, np.full(len(src), NEG_INF)]), inverse, len(unique))
        pnb = _group_logsumexp(np.concatenate([same_pnb, ext_pnb]), inverse, len(unique))
        fresh = first >= n
        origin = np.where(fresh, src[np.maximum(first - n, 0)] if len(src) else 0, first)
        ext_at = np.maximum(first - n, 0)
        last = np.where(fresh, col[ext_at] if len(col) else 0, b.last[origin])
        whash = np.where(fresh, ext_whash[ext_at] if len(src) else SEED, b.whash[origin])
        wlen = np.where(fresh, ext_wlen[ext_at] if len(src) else 0, b.wlen[origin])
        ended = fresh & (ends[ext_at] if len(src) else False)
        lm = b.lm[origin].copy()
        score = np.logaddexp(pb, pnb) + lm

        enders = np.flatnonzero(ended)
        advanced = None
        if len(enders):
            lm[enders] += o.beta
            if self.model is not None:
                word_lp, advanced = self._score_words(b.state.take(origin[enders]), b.whash[origin[enders]])
                lm[enders] += word_lp
            score = np.logaddexp(pb, pnb) + lm
        score = score + self._partial_penalty(whash, wlen)

        keep = np.flatnonzero(score >= score.max() + o.beam_prune_logp) if np.isfinite(score.max()) else \
            np.arange(len(score))
        if len(keep) > o.beam_width:
            keep = keep[np.argpartition(-score[keep], o.beam_width - 1)[:o.beam_width]]
        # back-pointers for the kept fresh prefixes
        new = keep[fresh[keep]]
        node = b.node[origin].copy()
        node[new] = node_count + np.arange(len(new))
        new_parents, new_labels = b.node[origin[new]], last[new]
        state = None
        if self.model is not None:
            if advanced is not None:
                row = origin.copy()
                row[enders] = n + np.arange(len(enders))
                state = LMState.concat([b.state, advanced]).take(row[keep])
            else:
                state = b.state.take(origin[keep])
        beams = _Beams(unique[keep], last[keep], pb[keep], pnb[keep], lm[keep], whash[keep], wlen[keep],
                       node[keep], state)
        return beams, new_parents, new_labels

    def _score_words(self, state: LMState, word_hashes: np.ndarray) -> tuple[np.ndarray, LMState]:
        """alpha * ln P(word) (+ unk_offset, or -inf with known_words_only, off the vocabulary) for each row."""
        o = self.options
        ids, known = self.lexicon.lookup(word_hashes)
        log_probs, state = self.model.advance(state, ids)
        scores = o.alpha * log_probs + np.where(known, 0.0, NEG_INF if o.known_words_only else o.unk_offset)
        return scores, state

    def _partial_penalty(self, whash: np.ndarray, wlen: np.ndarray) -> np.ndarray:
        if self.lexicon is None:
            return np.zeros(len(whash))
        unknown = (wlen > 0) & ~self.lexicon.is_prefix(whash)
        if self.options.known_words_only:
            return np.where(unknown, NEG_INF, 0.0)
        return np.where(unknown, self.options.unk_offset * np.maximum(1.0, wlen / AVG_WORD_LEN), 0.0)

    def _finish(self, b: _Beams) -> np.ndarray:
        """Each hypothesis' final score: its partial word scored as a word, then the utterance's end."""
        o = self.options
        final = np.logaddexp(b.pb, b.pnb) + b.lm
        pending = np.flatnonzero(b.wlen > 0)
        final[pending] += o.beta
        if self.model is None:
            return final
        state = b.state
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


def _group_logsumexp(values: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """ln sum exp of `values` per group (groups: ids 0 .. count-1), shifted by the largest value: a group
    more than ~700 below it (which no beam keeps) comes out -inf."""
    shift = values.max()
    if not np.isfinite(shift):
        return np.full(count, NEG_INF)
    sums = np.bincount(groups, weights=np.exp(values - shift), minlength=count)
    out = np.full(count, NEG_INF)
    positive = sums > 0
    out[positive] = np.log(sums[positive]) + shift
    return out
