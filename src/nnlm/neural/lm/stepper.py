"""Scoring word by word through states for the NPLM (LanguageModel.begin_state / advance), exact and cheap.

Everything before the tanh and the direct connections is linear in the context words' features:
x = sum_j E_j C(w_j) for fixed maps E_j (block j of x; with the wide-context branch, A_j times block 0),
so H x = sum_j H_j C(w_j) and b + W x = b + sum_j D_j(w_j) with D_j(w) = W_j C(w) (+ b for j = 0):
one term per (position, word).

- The hidden pre-activation: a state keeps, for the context in use now and each of the next n-2, the
  sum of the H-terms of the words already known (`hidden` [B, n-1, h], "partial sums"); a word entering
  adds its term to each, and the oldest is complete. A step then runs only the hidden layers from it.
- The direct term: D_j(w) for every j costs (n-1) m |V| (as much as recomputing a whole context), so a
  word's rows [n-1, |V|] are computed once, when it first enters a state, and kept in a least-recently-
  used cache within a memory budget (Zipf's law makes most steps hit it); inside a long pass whose
  per-position tables were built (nnlm.neural.lm.direct_tables) they are read from there. A step sums the
  n-1 rows of its context (one embedding bag: no [B, n-1, |V|] copy) into y, then

    y += U a(hidden[:, 0])          (one U product a step; log Z from y, exact)

- log Z of a context is kept too (`ContextNorms`, a bounded map from the n-1 words to log Z): a decoder
  asks one hypothesis for many words, in one call or over many frames, and the |V|-wide product is then
  paid once per context. A word's own logit needs only its rows of W, U and b (`NPLM.target_logits`).

The numbers are the exact softmax's, as log_prob's, up to floating-point rounding (the sums are taken in
another order). Unnormalized and bf16 models, and a net whose y is b alone, keep the default path.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from nnlm.lm import LMState

CACHE_BYTES = 512 << 20   # the direct rows' cache never holds more than this ...
CACHE_SHARE_OF_FREE = 1 / 4  # ... nor more than this share of the memory available when it is made
MIN_CACHE_WORDS = 256  # (a beam of 64 rows of order 5 asks for 256 words at once)
NORMS_KEPT = 1 << 18  # contexts whose log Z is kept (a float each, ~100 bytes with the map's own)
STEP_MEMORY_BYTES = 4 << 30  # the most a net's direct-connection terms may take (`terms_fit`): n = 128 on Brown, 3.2 GB


def terms_fit(net) -> bool:
    """Whether a stepper of `net` keeps its direct-connection terms within STEP_MEMORY_BYTES: W's block of every
    position ((n-1) |V| m numbers, `position_blocks`) and at least MIN_CACHE_WORDS words' rows of `DirectRows`
    ((n-1) |V| each). A wider net (n = 256 on Brown: 6.5 GB) keeps no partial sums."""
    cfg, W = net.config, net.W
    if W is None:
        return True
    return (cfg.order - 1) * len(W) * W.element_size() * (cfg.features + MIN_CACHE_WORDS) <= STEP_MEMORY_BYTES


def position_blocks(weight: torch.Tensor, config, mix: torch.Tensor | None) -> list[torch.Tensor]:
    """The columns of `weight` [rows, input_size] that multiply C(w_j), for each context position j
    (oldest first): block j of x, or sum_k A_kj times block k for the older words of the wide-context branch
    (block 0 times A_j feature by feature when the sum is weighted per feature)."""
    m, distant, sums = config.features, config.distant, config.summaries
    per_feature = config.sum_weights == "feature"
    kernels = mix.view(sums, distant) if distant and not per_feature else None
    out = []
    for j in range(config.order - 1):
        if distant and j < distant and per_feature:
            out.append(weight[:, :m] * mix[j])
        elif distant and j < distant:
            out.append(sum(kernels[k, j] * weight[:, k * m:(k + 1) * m] for k in range(sums)))
        else:
            block = j - distant + sums if distant else j
            out.append(weight[:, block * m:(block + 1) * m])
    return out


class DirectRows:
    """D_j(w) for every position j of the words seen ([n-1, |V|] per word, newest position first, b in the
    oldest), in a bounded LRU slab. Bookkeeping is vectorized over a call's words: each word's slot,
    each slot's word and last use."""

    def __init__(self, per_word: torch.Tensor, bias: torch.Tensor, vocab_size: int, capacity: int) -> None:
        self.per_word = per_word  # [m, (n-1) |V|]: C(w) @ per_word = all of w's direct rows (newest first)
        self.bias = bias
        self.width = per_word.shape[1]
        self.slab = per_word.new_empty((capacity, self.width))
        self.slot_of = np.full(vocab_size, -1, dtype=np.int64)
        self.word_in = np.full(capacity, -1, dtype=np.int64)
        self.last_use = np.zeros(capacity, dtype=np.int64)
        self.clock = 0
        self.computed = 0  # words whose rows were computed (misses), for the benchmark's report

    def _fresh(self, words: np.ndarray, features: torch.Tensor) -> torch.Tensor:
        self.computed += len(words)
        rows = features[torch.as_tensor(words, device=features.device)] @ self.per_word
        rows[:, -len(self.bias):] += self.bias  # the oldest position's block carries b
        return rows

    def lookup(self, words: np.ndarray, features: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """(table [rows, (n-1) |V|], where [len(words)]): words[i]'s rows are table[where[i]]; the rows
        missing are computed from `features` (C). The table is the slab, or, when one call brings more
        words than the slab holds, a table of this call's words alone."""
        unique, inverse = np.unique(words, return_inverse=True)
        inverse = inverse.reshape(-1)
        if len(unique) > len(self.slab):
            slots = self.slot_of[unique]
            table = self.slab.new_empty((len(unique), self.width))
            hit = slots >= 0
            table[torch.as_tensor(np.flatnonzero(hit), device=table.device)] = self.slab[slots[hit]]
            table[torch.as_tensor(np.flatnonzero(~hit), device=table.device)] = self._fresh(unique[~hit], features)
            return table, inverse
        self.clock += 1
        slots = self.slot_of[unique]
        hit = slots >= 0
        self.last_use[slots[hit]] = self.clock  # this call's words are never the least recently used
        missing = unique[~hit]
        if len(missing):
            free = np.argpartition(self.last_use, len(missing) - 1)[:len(missing)]
            old = self.word_in[free]
            self.slot_of[old[old >= 0]] = -1
            self.word_in[free] = missing
            self.slot_of[missing] = free
            self.last_use[free] = self.clock
            self.slab[torch.as_tensor(free, device=self.slab.device)] = self._fresh(missing, features)
            slots = self.slot_of[unique]
        return self.slab, slots[inverse]


class ContextNorms:
    """log Z of the contexts met, keyed by their n-1 word ids: one int per context when |V|^(n-1) fits in
    63 bits (vectorized), the rows' bytes otherwise. When full, the older half is dropped (insertion order),
    so the map never holds more than NORMS_KEPT contexts."""

    def __init__(self, vocab_size: int, width: int, kept: int = NORMS_KEPT) -> None:
        self.powers = None
        if width and vocab_size ** width < 2 ** 63:
            self.powers = vocab_size ** np.arange(width - 1, -1, -1, dtype=np.int64)
        self.kept = kept
        self.norms: dict = {}

    def keys(self, contexts: np.ndarray) -> list:
        if self.powers is not None:
            return (contexts @ self.powers).tolist()
        return [row.tobytes() for row in np.ascontiguousarray(contexts)]

    def get(self, keys: list) -> np.ndarray:
        """log Z of each key, NaN where not known, float64 [len(keys)]."""
        norms = self.norms
        return np.array([norms.get(k, np.nan) for k in keys], dtype=np.float64)

    def put(self, keys: list, values: np.ndarray) -> None:
        if len(self.norms) + len(keys) > self.kept:
            old = list(self.norms)[:len(self.norms) // 2 + len(keys)]
            for k in old:
                del self.norms[k]
        self.norms.update(zip(keys, values.tolist(), strict=True))


class NeuralStepper:
    """The per-word terms of one net at one version of its weights, and the state operations."""

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
                                     dim=1).contiguous()  # newest position first
                row_bytes = per_word.element_size() * per_word.shape[1]
                capacity = max(MIN_CACHE_WORDS, min(vocab_size, cache_bytes // row_bytes))
                self.direct = DirectRows(per_word, net.b.detach(), vocab_size, capacity)
        self.bias = net.b.detach()
        self.U = None if net.U is None else net.U.detach()
        self.features = net.C.detach()
        # (newest first) term r of a word is its term at position k-1-r: in the context r steps after it entered
        self.newest_first = np.arange(self.k - 1, -1, -1)
        self.norms = ContextNorms(vocab_size, self.k)

    def _hidden_terms(self, words: np.ndarray) -> torch.Tensor:
        """H_j C(w) of each word for every position, [len(words), n-1, h], newest position first."""
        f = self.features[torch.as_tensor(words, device=self.features.device)]
        return (f @ self.hidden_terms).view(len(words), self.k, -1)

    def start(self, context: np.ndarray) -> dict[str, torch.Tensor]:
        """The hidden partial sums of contexts [B, n-1]: for the context s steps ahead (s = 0 .. n-2), the
        terms of the words at positions p >= s now, each at position p - s then (term index k-1-p+s)."""
        if self.hidden_terms is None:
            return {}
        b = len(context)
        terms = self._hidden_terms(context.reshape(-1)).view(b, self.k, self.k, -1)
        sums = terms.new_zeros((b, self.k, terms.shape[-1]))
        for s in range(self.k):
            for p in range(s, self.k):
                sums[:, s] += terms[:, p, self.k - 1 - p + s]
        return {"hidden": sums}

    def logits(self, context: np.ndarray, hidden: torch.Tensor | None, tables=None) -> torch.Tensor:
        """y [B, |V|] (padded with -inf logits when read from `tables`) for contexts [B, n-1] whose complete
        hidden sums are `hidden` [B, h]: the context's direct rows summed (b + W x), + U a(hidden)."""
        u = self.U
        if tables is not None:  # block j: C W_j^T (+ b in block 0), rows padded with -inf logits past |V|
            index = context + np.arange(self.k) * tables.feature_rows
            y = F.embedding_bag(torch.as_tensor(index, device=tables.tables.device), tables.tables, mode="sum")
            u = tables.U
        elif self.direct is not None:
            table, where = self.direct.lookup(context.reshape(-1), self.features)
            index = where.reshape(context.shape) * self.k + self.newest_first  # row of word j's block j
            y = F.embedding_bag(torch.as_tensor(index, device=table.device), table.view(-1, self.v), mode="sum")
        else:
            y = self.bias.expand(len(context), -1).clone()
        if u is not None:
            y.addmm_(self.net.hidden_from_preactivation(hidden), u.t())
        return y

    def log_probs(self, state: LMState, words: np.ndarray, tables=None) -> torch.Tensor:
        """log P(words[i] | row i's context), float64 [B], log Z over all of V (exact). A row's logit comes
        from the word's rows of W, U, b; log Z from the contexts' map, or, for the contexts not in it (each
        once, however many rows share it), from y over all of V: one exp pass and a sum, as in
        direct_tables.scores, and only rows whose sum leaves SAFE_SUM (a logit above ~69, or all below ~-69)
        are computed again and shifted by their maximum."""
        from nnlm.neural.lm.direct_tables import SAFE_SUM

        hidden = state.extra["hidden"][:, 0] if "hidden" in state.extra else None
        keys = self.norms.keys(state.context)
        lse = torch.as_tensor(self.norms.get(keys))
        unknown = np.flatnonzero(lse.isnan().numpy())
        picked = None
        if len(unknown):
            first: dict = {}
            for r in unknown.tolist():
                first.setdefault(keys[r], r)
            rows = np.fromiter(first.values(), dtype=np.int64)  # one row of each context not known
            sub_hidden = None if hidden is None else hidden[torch.as_tensor(rows, device=hidden.device)]
            y = self.logits(state.context[rows], sub_hidden, tables)
            if len(rows) == len(words):  # every row its own new context (a walk): the logits are in y
                picked = y.gather(1, torch.as_tensor(words, device=y.device)[:, None])[:, 0]
            sums = y.exp_().sum(dim=1)
            redo = ~((sums > SAFE_SUM[0]) & (sums < SAFE_SUM[1]))  # (NaN included)
            found = sums.log_()
            if bool(redo.any()):
                again_rows = redo.cpu().numpy()
                again = self.logits(state.context[rows][again_rows],
                                    None if sub_hidden is None else sub_hidden[redo], tables)
                top = again.amax(dim=1, keepdim=True)
                found[redo] = again.sub_(top).exp_().sum(dim=1).log_().add_(top[:, 0])
            found = found.double().cpu()
            self.norms.put(list(first), found.numpy())
            lse[torch.as_tensor(unknown)] = torch.as_tensor(self.norms.get([keys[r] for r in unknown.tolist()]))
        if picked is None:  # every row's logit the same way (rows sharing a context agree exactly)
            picked = self.picked_logits(state.context, hidden, words)
        return (picked - lse.to(device=picked.device, dtype=picked.dtype)).double().cpu()

    def picked_logits(self, context: np.ndarray, hidden: torch.Tensor | None, words: np.ndarray) -> torch.Tensor:
        """y[i, words[i]] [B] from the words' rows of W, U and b, the hidden layer from the state's sums."""
        net = self.net
        a = None if hidden is None else net.hidden_from_preactivation(hidden)
        needs_x = net.W is not None or a is None  # (x feeds W, or the hidden layer when no sums were kept)
        x = net.features(torch.as_tensor(context, device=self.features.device)) if needs_x else None
        return net.target_logits(x, torch.as_tensor(words, device=self.bias.device), a)

    def shift(self, extra: dict[str, torch.Tensor], words: np.ndarray) -> dict[str, torch.Tensor]:
        """The hidden partial sums after each row's word: every sum moves one step nearer, the word's term at
        position n-2-s joins the sum s steps ahead, and the farthest starts from the word's term alone."""
        if self.hidden_terms is None:
            return {}
        sums, terms = extra["hidden"], self._hidden_terms(words)
        new = torch.empty_like(sums)
        torch.add(sums[:, 1:], terms[:, :-1], out=new[:, :-1])
        new[:, -1] = terms[:, -1]
        return {"hidden": new}
