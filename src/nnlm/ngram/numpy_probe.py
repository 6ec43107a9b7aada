"""The back-off query engine's tables probed by vectorized numpy: every row at once, one order at a time,
linear probing in rounds. The numbers of the compiled kernels (nnlm.ngram.query_engine,
nnlm.ngram.stream_scoring) bit for bit, without importing numba.

Why: a fresh process that scores a short file (`nnlm score kn5/ FILE`) spent ~0.6 s importing numba and
loading its target context before its first compiled call, against ~0.1 s of scoring (Brown KN5 test,
docs/query-engine.md). A model whose engine tables were saved with it (nnlm.ngram.engine_file) has them
mapped without numba; these probes score a stream on them until the tokens scored would have paid for the
kernels (BackoffTables.token_log10), and check a loaded engine against the numpy path without a kernel.

The same arithmetic as the kernels: a k-gram's key is the word-tuple hash built newest word first
(nnlm.ngram.hash_table: `_word_hash`, `_extend`; numpy's uint64 arrays wrap as numba's do), its first slot
`_home_hashed`; a lookup stops at the first order that misses and never looks past the context's listed
suffixes plus one (as `_gram_chain` does); back-offs are added shortest first, each product rounded as the
kernels round it.
"""
from __future__ import annotations

import sys

import numpy as np

from nnlm.ngram.engine_tables import EMPTY, HASH_MULTIPLIER, EngineTables

_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_EXTEND = np.uint64(0xD6E8FEB86659FD93)
_S27, _S30, _S31, _S32 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(32)

# Streams are scored by numpy probes (nnlm.ngram.numpy_probe) while numba is not loaded in the process, up to this
# many tokens: the probes' ~0.6 us a token more than the kernels' (Brown KN5 test, one process, load ~7: 1.05
# against 2.3 M tokens/s) cost less than numba's import and target context (~0.6 s, once a process) up to ~1M.
NUMPY_STREAM_TOKENS = 1_000_000


def word_hash(words: np.ndarray) -> np.ndarray:
    """hash_table._word_hash of each word id (int64 >= 0), uint64: splitmix64's finalizer of id + 1."""
    z = (words + 1).astype(np.uint64)
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


def extend(h: np.ndarray, words: np.ndarray) -> np.ndarray:
    """hash_table._extend: the hashes `h` of word tuples extended by one older word each."""
    z = (h ^ ((words + 1).astype(np.uint64) * HASH_MULTIPLIER)) * _EXTEND
    return z ^ (z >> _S32)


def probe(engine: EngineTables, k: int, hashes: np.ndarray) -> np.ndarray:
    """The slot of each k-gram hash in order k's table, -1 where it is not listed (linear probing, in rounds
    over the rows still probing)."""
    offset, cap = int(engine.offsets[k]), int(engine.caps[k])
    keys = hashes.view(np.int64)
    slots = np.full(len(hashes), -1, dtype=np.int64)
    rows = np.arange(len(hashes))
    at = offset + ((hashes >> _S32) * np.uint64(cap) >> _S32).astype(np.int64)
    keys_at = engine.table[:, 0]
    while len(rows):
        found = keys_at[at]
        hit = found == keys[rows]
        slots[rows[hit]] = at[hit]
        going = ~hit & (found != EMPTY)
        rows, at = rows[going], at[going] + 1
        at[at == offset + cap] = offset
    return slots


def _matches(engine: EngineTables, newest: np.ndarray, older: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, list]:
    """For each row: how many of the grams newest, older[:, -1] newest, older[:, -2:] newest, ... are listed
    before the first miss (>= 1: a word is always listed), looking at most top[row] words long; and the slot
    of each matched k-gram (slots[k] for k >= 2, -1 past the match)."""
    matched = np.ones(len(newest), dtype=np.int64)
    slots: list = [None, None]
    h = word_hash(newest)
    alive = np.flatnonzero(top >= 2)
    for k in range(2, min(int(top.max(initial=1)), older.shape[1] + 1) + 1):
        h = extend(h, older[:, older.shape[1] - (k - 1)])
        alive = alive[top[alive] >= k]
        found = probe(engine, k, h[alive])
        hit = found >= 0
        slot = np.full(len(newest), -1, dtype=np.int64)
        slot[alive[hit]] = found[hit]
        matched[alive[hit]] = k
        slots.append(slot)
        alive = alive[hit]
    return matched, slots


def rows_log10(engine: EngineTables, contexts: np.ndarray, targets: np.ndarray, scale: float = 1.0,
               then: float = 1.0) -> np.ndarray:
    """(log10 P(target | context) * scale) * then for each row (contexts [N, >= order-1], oldest word first):
    the numbers of EngineTables.log10_prob (scale = then = 1) and of the stream kernel. Ids must be in V."""
    order, n1 = engine.order, engine.order - 1
    targets = np.asarray(targets, dtype=np.int64)
    if n1 == 0 or len(targets) == 0:
        return (engine.unigram_prob[targets] * scale) * then
    contexts = np.asarray(contexts, dtype=np.int64)[:, -n1:]
    width = contexts.shape[1]
    known, context_slots = _matches(engine, contexts[:, -1], contexts[:, :-1], np.full(len(targets), min(n1, width)))
    matched, slots = _matches(engine, targets, contexts, np.minimum(known + 1, min(order, width + 1)))
    log10 = engine.unigram_prob[targets]
    for k in range(2, int(matched.max(initial=1)) + 1):
        here = matched == k
        log10[here] = engine.ftable[slots[k][here], 1]
    for c in range(1, n1 + 1):  # the back-off of the context's last c words, added where c >= the match
        if c == 1:
            backoff = engine.unigram_backoff[contexts[:, -1]]
        elif c < len(context_slots):
            listed = context_slots[c] >= 0
            backoff = np.where(listed, engine.ftable[np.maximum(context_slots[c], 0), 2], 0.0)
        else:
            backoff = np.zeros(len(targets))
        log10 = np.where(c >= matched, log10 + backoff, log10)
    return (log10 * scale) * then


def stream_token_log10(engine: EngineTables, stream: np.ndarray, first: int, count: int, pad: int,
                       since_start: np.ndarray | None = None, scale: float = 1.0,
                       then: float = 1.0) -> tuple[np.ndarray, float] | None:
    """stream_scoring.scaled_token_log10's numbers (each token of stream[first : first + count] given the order-1
    ids before it, `pad` before the stream and, with `since_start`, before its text; then their sum in token
    order), by numpy probes; IndexError if an id is outside the vocabulary.

    As the stream kernel carries its state, the grams matched at a position are the next token's context: every
    position from first - 1 is matched once as a target, and a token's context is its previous position's match
    (a text's first token: the pads' context, matched once). The kernel looks no further than the context's
    listed suffixes plus one; with tables where a listed gram's context is listed (every model nnlm writes) a
    longer match cannot occur, and where one does, this returns None (the caller takes the kernel)."""
    n1, v = engine.order - 1, engine.vocab_size
    seen = stream[max(first - n1, 0):first + count]
    if not 0 <= pad < v or (len(seen) and (seen.min() < 0 or seen.max() >= v)):
        raise IndexError(f"token ids must be in 0 .. {v - 1}")
    if n1 == 0 or count == 0:
        out = rows_log10(engine, np.zeros((count, 0), dtype=np.int64), stream[first:first + count], scale, then)
        return out, float(np.cumsum(out)[-1]) if count else 0.0
    since = None if since_start is None else np.asarray(since_start, dtype=np.int64)
    positions = np.arange(first - 1, first + count)  # first - 1: the first token's context, matched as a target
    back = np.arange(n1, 0, -1)
    at = positions[:, None] - back[None, :]
    contexts = np.where(at >= 0, stream[np.maximum(at, 0)], pad)
    targets = np.where(positions >= 0, stream[np.maximum(positions, 0)], pad)
    reset = np.zeros(count, dtype=bool) if since is None else since == 0  # a text's first token: pads before it
    reset[0] |= first == 0
    if since is not None:
        contexts[back[None, :] > np.concatenate([since[:1] - 1, since])[:, None]] = pad
    matched, slots = _matches(engine, targets, contexts, np.full(count + 1, engine.order))
    pad_known, pad_slots = _matches(engine, np.array([pad]), np.full((1, n1 - 1), pad), np.array([n1]))
    known = np.where(reset, int(pad_known[0]), np.minimum(matched[:-1], n1))
    grams = matched[1:]
    if np.any(grams > known + 1):
        return None
    word = targets[1:]
    log10 = engine.unigram_prob[word]
    for k in range(2, int(grams.max(initial=1)) + 1):
        here = grams == k
        log10[here] = engine.ftable[slots[k][1:][here], 1]
    last = np.where(reset, pad, targets[:-1])  # the context's newest word
    for c in range(1, n1 + 1):  # the back-off of the context's last c words, added where c >= the match
        if c == 1:
            backoff = engine.unigram_backoff[last]
        else:
            slot = slots[c][:-1] if c < len(slots) else np.full(count, -1)
            pad_slot = int(pad_slots[c][0]) if c < len(pad_slots) else -1
            slot = np.where(reset, pad_slot, slot)
            backoff = np.where(slot >= 0, engine.ftable[np.maximum(slot, 0), 2], 0.0)
        log10 = np.where(c >= grams, log10 + backoff, log10)
    out = (log10 * scale) * then
    return out, float(np.cumsum(out)[-1])


def probed_while_numba_is_absent(engine: EngineTables, stream: np.ndarray, first: int, count: int, pad: int,
                                 since_start: np.ndarray | None = None, scale: float = 1.0,
                                 then: float = 1.0) -> tuple[np.ndarray, float] | None:
    """`stream_token_log10` while numba is not loaded and the tokens probed so far (these included) stay within
    NUMPY_STREAM_TOKENS (counted on the engine); None otherwise, or where the probes hand over to the kernel."""
    if engine.numpy_tokens + count > NUMPY_STREAM_TOKENS or "numba" in sys.modules:
        return None
    engine.numpy_tokens += count
    return stream_token_log10(engine, stream, first, count, pad, since_start, scale, then)
