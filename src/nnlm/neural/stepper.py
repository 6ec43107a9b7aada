"""Scoring word by word through states for the NPLM (LanguageModel.begin_state / advance), exact and cheap.

Everything before the tanh and the direct connections is linear in the context words' features:
x = sum_j E_j C(w_j) for fixed maps E_j (block j of x; with the wide-context branch, A_j times block 0),
so H x = sum_j H_j C(w_j) and b + W x = b + sum_j W_j C(w_j), one term per (position, word). A state
keeps, for the context in use now and for each of the next n-2 ones, the sum of the terms of the words
already known ("partial sums"): `hidden` [B, n-1, h] (H x without d) and `direct` [B, n-1, |V|] (b + W x).
A word entering a state adds its term at each future position, and the oldest partial sum is complete:

    y = direct[:, 0] + U a(hidden[:, 0])          (a: the hidden layers from H x; one U product a step)

The direct term of a word, W_j C(w) for every j, costs (n-1) m |V| (as much as recomputing a whole
context), so it is computed once when the word first enters any state and kept in a least-recently-used
cache of whole rows ([n-1, |V|] each) within a memory budget; Zipf's law makes most steps hit it.
The numbers are the exact softmax's, as log_prob's, up to floating-point rounding (the sums are taken
in another order). Unnormalized and bf16 models, and a net whose y is b alone, keep the default path.
"""
from __future__ import annotations

import numpy as np
import torch

from nnlm.lm import LMState

CACHE_BYTES = 512 << 20   # the direct rows' cache never holds more than this ...
CACHE_SHARE_OF_FREE = 1 / 4  # ... nor more than this share of the memory available when it is made
MIN_CACHE_WORDS = 64


def position_blocks(weight: torch.Tensor, config, mix: torch.Tensor | None) -> list[torch.Tensor]:
    """The columns of `weight` [rows, input_size] that multiply C(w_j), for each context position j
    (oldest first): block j of x, or A_j times block 0 for the older words of the wide-context branch."""
    m, distant = config.features, config.distant
    out = []
    for j in range(config.order - 1):
        if distant and j < distant:
            out.append(mix[j] * weight[:, :m])
        else:
            block = j - distant + 1 if distant else j
            out.append(weight[:, block * m:(block + 1) * m])
    return out


class DirectRows:
    """W_j C(w) for every position j of the words seen, [n-1, |V|] per word, in a bounded LRU slab.
    Bookkeeping is vectorized over a step's words: a word's slot, each slot's word and last use."""

    def __init__(self, per_word: torch.Tensor, vocab_size: int, capacity: int) -> None:
        self.per_word = per_word  # [m, (n-1) |V|]: C(w) @ per_word = all of w's direct rows (newest first)
        self.width = per_word.shape[1]
        self.slab = per_word.new_empty((capacity, self.width))
        self.slot_of = np.full(vocab_size, -1, dtype=np.int64)
        self.word_in = np.full(capacity, -1, dtype=np.int64)
        self.last_use = np.zeros(capacity, dtype=np.int64)
        self.clock = 0
        self.computed = 0  # words whose rows were computed (misses), for the benchmark's report

    def rows(self, words: np.ndarray, features: torch.Tensor) -> torch.Tensor:
        """[len(words), (n-1) |V|] for words (any repeats), computing the missing ones from `features` (C)."""
        unique, inverse = np.unique(words, return_inverse=True)
        self.clock += 1
        slots = self.slot_of[unique]
        hit = slots >= 0
        self.last_use[slots[hit]] = self.clock
        missing = unique[~hit]
        if len(missing):
            self.computed += len(missing)
            fresh = features[torch.as_tensor(missing, device=features.device)] @ self.per_word
            if len(missing) > len(self.slab):  # more new words in one step than the cache holds
                out = self.slab.new_empty((len(unique), self.width))
                out[torch.as_tensor(np.flatnonzero(~hit), device=out.device)] = fresh
                if hit.any():
                    out[torch.as_tensor(np.flatnonzero(hit), device=out.device)] = self.slab[slots[hit]]
                return out[torch.as_tensor(inverse.reshape(-1), device=out.device)]
            free = np.argpartition(self.last_use, len(missing) - 1)[:len(missing)]  # least recently used
            old = self.word_in[free]
            self.slot_of[old[old >= 0]] = -1
            self.word_in[free] = missing
            self.slot_of[missing] = free
            self.last_use[free] = self.clock
            self.slab[torch.as_tensor(free, device=self.slab.device)] = fresh
            slots = self.slot_of[unique]
        return self.slab[torch.as_tensor(slots[inverse.reshape(-1)], device=self.slab.device)]


class NeuralStepper:
    """The per-word terms of one net at one version of its weights, and the two state operations."""

    def __init__(self, net, vocab_size: int, device: torch.device, cache_bytes: int) -> None:
        self.net = net
        cfg = net.config
        self.k, self.v = cfg.order - 1, vocab_size
        mix = net.A.detach() if net.A is not None else None
        with torch.no_grad():
            self.hidden_terms = None if net.H is None else \
                torch.cat([b.t() for b in position_blocks(net.H.detach(), cfg, mix)[::-1]], dim=1).contiguous()
            self.direct = None
            if net.W is not None:
                per_word = torch.cat([b.t() for b in position_blocks(net.W.detach(), cfg, mix)[::-1]],
                                     dim=1).contiguous()  # newest position first: see _terms
                row_bytes = per_word.element_size() * per_word.shape[1]
                capacity = max(MIN_CACHE_WORDS, min(vocab_size, cache_bytes // row_bytes))
                self.direct = DirectRows(per_word, vocab_size, capacity)
        self.bias = net.b.detach()
        self.U = None if net.U is None else net.U.detach()
        self.features = net.C.detach()

    def _terms(self, words: np.ndarray, tables=None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Each word's hidden terms [B, n-1, h] and direct terms [B, n-1, |V|], index r holding the term at
        position n-2-r (the word r steps after it entered): the order the partial sums take them in.
        `tables`: the direct connections' per-position tables of a long pass, read instead of the cache."""
        hidden = direct = None
        if self.hidden_terms is not None:
            f = self.features[torch.as_tensor(words, device=self.features.device)]
            hidden = (f @ self.hidden_terms).view(len(words), self.k, -1)
        if tables is not None:  # block j of the tables: C W_j^T (+ b in block 0), rows padded past |V|
            where = torch.as_tensor(words, device=tables.tables.device)[:, None] + \
                torch.arange(self.k - 1, -1, -1, device=tables.tables.device) * tables.feature_rows
            direct = tables.tables[where][:, :, :self.v]
        elif self.direct is not None:
            direct = self.direct.rows(words, self.features).view(len(words), self.k, self.v)
        return hidden, direct

    def start(self, context: np.ndarray, tables=None) -> dict[str, torch.Tensor]:
        """The partial sums of contexts [B, n-1]: for the context s steps ahead (s = 0 .. n-2), the terms
        of the words at positions p >= s now, each at position p - s then (b once, in each direct sum)."""
        b = len(context)
        hidden, direct = self._terms(context.reshape(-1), tables)
        extra = {}
        for name, terms in (("hidden", hidden), ("direct", direct)):
            if terms is None:
                continue
            terms = terms.reshape(b, self.k, self.k, -1)  # [row, position p, r: the term at position k-1-r]
            sums = terms.new_zeros((b, self.k, terms.shape[-1]))
            if name == "direct" and tables is None:
                sums += self.bias
            for s in range(self.k):
                for p in range(s, self.k):
                    sums[:, s] += terms[:, p, self.k - 1 - p + s]
            extra[name] = sums
        return extra

    def log_probs(self, state: LMState, words: np.ndarray) -> torch.Tensor:
        """log P(words[i] | row i's context) from the complete partial sums (index 0), float64 [B]."""
        net = self.net
        if "direct" in state.extra:
            y = state.extra["direct"][:, 0]
            y = y.clone() if self.U is None else torch.addmm(y, net.hidden_from_preactivation(
                state.extra["hidden"][:, 0]), self.U.t())
        else:
            y = torch.addmm(self.bias, net.hidden_from_preactivation(state.extra["hidden"][:, 0]), self.U.t())
        picked = y.gather(1, torch.as_tensor(words, device=y.device)[:, None])[:, 0]
        top = y.amax(dim=1, keepdim=True)
        lse = y.sub_(top).exp_().sum(dim=1).log_().add_(top[:, 0])
        return (picked - lse).double().cpu()

    def shift(self, extra: dict[str, torch.Tensor], words: np.ndarray, tables=None) -> dict[str, torch.Tensor]:
        """The partial sums after each row's word: every sum moves one step nearer, the word's term at
        position n-2-s joins the sum s steps ahead, and the farthest starts from the word alone (+ b)."""
        hidden, direct = self._terms(words, tables)
        out = {}
        for name, terms in (("hidden", hidden), ("direct", direct)):
            if terms is None:
                continue
            sums = extra[name]
            new = torch.empty_like(sums)
            torch.add(sums[:, 1:], terms[:, :-1], out=new[:, :-1])
            if name == "direct" and tables is None:
                torch.add(terms[:, -1], self.bias, out=new[:, -1])
            else:
                new[:, -1] = terms[:, -1]
            out[name] = new
        return out
