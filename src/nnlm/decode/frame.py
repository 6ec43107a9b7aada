"""The acoustic half of one CTC beam-search frame, compiled (numba): everything except the LM call.

`expand` turns B hypotheses and one frame's log-probabilities into the frame's distinct prefixes:
each hypothesis staying (a blank, its last label again, a boundary that would make an empty word)
and each extended by one of the frame's likely characters (a boundary only after a partial word),
merged by prefix hash with their path probabilities summed (ln-sum-exp). `select` adds the penalty
of partial words outside the vocabulary and keeps the best `width` within `prune` of the best.

A frame of NumPy calls costs ~50 small-array calls (~1 ms); here it is two calls, so the search costs
about what pyctcdecode's own Python loop costs, and the one batched LM call per frame is the rest."""
from __future__ import annotations

import math

import numba
import numpy as np

MULT = np.uint64(0x100000001B3)
NEG_INF = -np.inf


@numba.njit(cache=True, inline="always")
def _lae(a: float, b: float) -> float:
    """ln(e^a + e^b), -inf safe."""
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@numba.njit(cache=True, inline="always")
def _penalty(whash, wlen, prefix_keys, unk_offset, known_only, avg_len):
    """What a partial word that begins no vocabulary word costs (pyctcdecode's rule)."""
    if wlen == 0 or prefix_keys.shape[0] == 0:
        return 0.0
    at = np.searchsorted(prefix_keys, whash)
    if at < prefix_keys.shape[0] and prefix_keys[at] == whash:
        return 0.0
    return -np.inf if known_only else unk_offset * max(1.0, wlen / avg_len)


@numba.njit(cache=True)
def expand(key, last, pb, pnb, lm, whash, wlen, lp, chars, blank, boundary, seed, beta, prune, prefix_keys,
           unk_offset, known_only, avg_len):
    """The frame's distinct prefixes: (key, last, pb, pnb, lm, whash, wlen, origin, fresh, ended, word_hash).

    `origin`: the hypothesis each comes from; `fresh`: a new prefix (needs a back-pointer); `ended`: a
    word ended here (its hash `word_hash` is to be scored by the LM and added to `lm`)."""
    n, k = key.shape[0], chars.shape[0]
    cap = n * (k + 1)
    c_key = np.empty(cap, np.uint64)
    c_last = np.empty(cap, np.int64)
    c_pb = np.empty(cap)
    c_pnb = np.empty(cap)
    c_src = np.empty(cap, np.int64)
    c_whash = np.empty(cap, np.uint64)
    c_wlen = np.empty(cap, np.int64)
    c_end = np.zeros(cap, np.bool_)
    total = np.empty(n)
    floor = -np.inf
    for i in range(n):  # no extension scoring below the best hypothesis' score + prune can be kept
        total[i] = _lae(pb[i], pnb[i])
        floor = max(floor, total[i] + lm[i] + _penalty(whash[i], wlen[i], prefix_keys, unk_offset, known_only,
                                                        avg_len))
    floor += prune
    bonus = max(beta, 0.0)
    m = 0
    for i in range(n):  # the same prefix
        s_pb = total[i] + lp[blank]
        s_pnb = pnb[i] + lp[last[i]] if last[i] >= 0 else -np.inf
        if boundary >= 0:
            if last[i] < 0:
                s_pb = _lae(s_pb, total[i] + lp[boundary])
            elif last[i] == boundary:
                s_pnb = _lae(s_pnb, pb[i] + lp[boundary])
        c_key[m], c_last[m], c_pb[m], c_pnb[m], c_src[m] = key[i], last[i], s_pb, s_pnb, i
        c_whash[m], c_wlen[m] = whash[i], wlen[i]
        m += 1
    for i in range(n):  # extensions
        for j in range(k):
            c = chars[j]
            ends = c == boundary
            if ends and wlen[i] == 0:
                continue
            e = (pb[i] if c == last[i] else total[i]) + lp[c]
            if e + lm[i] + bonus < floor:
                continue
            code = np.uint64(c + 1)
            c_key[m], c_last[m], c_pb[m], c_pnb[m], c_src[m] = key[i] * MULT + code, c, -np.inf, e, i
            c_whash[m] = seed if ends else whash[i] * MULT + code
            c_wlen[m] = 0 if ends else wlen[i] + 1
            c_end[m] = ends
            m += 1
    order = np.argsort(c_key[:m], kind="mergesort")  # stable: within a prefix, the staying hypothesis first
    groups = 0
    for r in range(m):
        if r == 0 or c_key[order[r]] != c_key[order[r - 1]]:
            groups += 1
    o_key = np.empty(groups, np.uint64)
    o_last = np.empty(groups, np.int64)
    o_pb = np.full(groups, -np.inf)
    o_pnb = np.full(groups, -np.inf)
    o_lm = np.empty(groups)
    o_whash = np.empty(groups, np.uint64)
    o_wlen = np.empty(groups, np.int64)
    o_src = np.empty(groups, np.int64)
    o_fresh = np.zeros(groups, np.bool_)
    o_end = np.zeros(groups, np.bool_)
    o_word = np.empty(groups, np.uint64)
    g = -1
    for r in range(m):
        a = order[r]
        if r == 0 or c_key[a] != c_key[order[r - 1]]:
            g += 1
            o_key[g], o_last[g], o_whash[g], o_wlen[g], o_src[g] = c_key[a], c_last[a], c_whash[a], c_wlen[a], c_src[a]
            o_lm[g] = lm[c_src[a]]
            o_fresh[g] = a >= n
            o_end[g] = c_end[a]
            o_word[g] = whash[c_src[a]]
        o_pb[g] = _lae(o_pb[g], c_pb[a])
        o_pnb[g] = _lae(o_pnb[g], c_pnb[a])
    return o_key, o_last, o_pb, o_pnb, o_lm, o_whash, o_wlen, o_src, o_fresh, o_end, o_word


@numba.njit(cache=True)
def select(pb, pnb, lm, whash, wlen, prefix_keys, unk_offset, known_only, avg_len, width, prune):
    """Indices of the hypotheses kept (best first): ranked by acoustic + LM + the unknown-partial-word
    penalty, within `prune` of the best, at most `width`."""
    n = pb.shape[0]
    score = np.empty(n)
    best = -np.inf
    for i in range(n):
        s = _lae(pb[i], pnb[i]) + lm[i] + _penalty(whash[i], wlen[i], prefix_keys, unk_offset, known_only, avg_len)
        score[i] = s
        best = max(best, s)
    order = np.argsort(-score, kind="mergesort")
    kept = 0
    for r in range(min(width, n)):
        if best > -np.inf and score[order[r]] < best + prune:
            break
        kept += 1
    return order[:kept]


@numba.njit(cache=True)
def gather(keep, fresh, key, last, pb, pnb, lm, whash, wlen, origin, slot, prev_node, node_count):
    """The kept hypotheses' arrays, each fresh prefix given the next back-pointer id, and the new
    back-pointers (parent node, label) in id order."""
    k = keep.shape[0]
    o_key = np.empty(k, np.uint64)
    o_last = np.empty(k, np.int64)
    o_pb = np.empty(k)
    o_pnb = np.empty(k)
    o_lm = np.empty(k)
    o_whash = np.empty(k, np.uint64)
    o_wlen = np.empty(k, np.int64)
    o_node = np.empty(k, np.int64)
    o_slot = np.empty(k, np.int64)
    parents = np.empty(k, np.int64)
    labels = np.empty(k, np.int64)
    new = 0
    for r in range(k):
        i = keep[r]
        o_key[r], o_last[r], o_pb[r], o_pnb[r], o_lm[r] = key[i], last[i], pb[i], pnb[i], lm[i]
        o_whash[r], o_wlen[r], o_slot[r] = whash[i], wlen[i], slot[i]
        if fresh[i]:
            parents[new], labels[new] = prev_node[origin[i]], last[i]
            o_node[r] = node_count + new
            new += 1
        else:
            o_node[r] = prev_node[origin[i]]
    return o_key, o_last, o_pb, o_pnb, o_lm, o_whash, o_wlen, o_node, o_slot, parents[:new], labels[:new]
