"""Exact scoring of long texts with direct connections, from per-position output tables.

With plain concatenated features, the direct connections' term W x = sum_j W_j C(w_j) is a sum over
the n-1 context positions j of a |V|-vector that depends only on the word at that position. So
T_j = C W_j^T ([|V|, |V|]: row w is word w's contribution at position j, b folded into T_0) can be
computed once, and each scored token then reads n-1 rows of it (an embedding bag) instead of
multiplying (n-1) m numbers by each of |V| output rows:

    y = sum_j T_j[w_j] + U tanh(d + H x)        (the same formula, other fp32 rounding)

For the AP News net (n = 6, m = 100, h = 60, |V| = 18k) this replaces 18 of the 20 MFLOP a token
costs by 360 KB of reads (docs/scaling.md has the measured speed-up). The tables cost
(n-1) |V|^2 4 bytes (6 GB there) and their computation about what scoring |V| tokens the plain way
costs, so they are built only for a long pass (`LanguageModel.long_pass`) and only within a memory
budget; the softmax stays exact over all of V. Rows are padded to a multiple of 16 floats (the
padding logits are -inf): the products and the element-wise passes ran 1.3-1.5x faster on aligned rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

TOKENS_PER_TABLE_ROW = 16  # build only for passes of at least 16 |V| tokens (the tables then pay for
# themselves several times over; Brown's 200k-token splits stay on the plain path)
MAX_BYTES = 8 << 30        # never more than this for the tables ...
MAX_SHARE_OF_FREE = 1 / 3  # ... nor more than this share of the memory the machine has available
ROWS = 64                  # tokens per embedding bag: a [64, |V|] block (4.6 MB at Brown) stays in the caches
# (Brown MLP1 after the build, one thread, tokens/CPU-s: 256 rows 12.0k, 64 13.4k, 32 12.9k, 16 13.5k)
ALIGN = 16                 # floats: rows of the tables and of y are padded to a multiple of this
SAFE_SUM = (1e-30, 1e30)   # sum_w exp(y_w) in this range: no term overflowed, the largest is a normal float


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def padded(vocab_size: int) -> int:
    return -(-vocab_size // ALIGN) * ALIGN


def table_bytes(context_size: int, table_rows: int, vocab_size: int) -> int:
    return 4 * context_size * table_rows * padded(vocab_size)


def tables_pay(net, table_rows: int, tokens: int, device: torch.device) -> bool:
    """Whether a pass over `tokens` tokens should build the tables: a CPU net with direct connections
    and plain concatenated features, a long pass, and memory to spare."""
    if net.W is None or net.A is not None or net.P is not None or device.type != "cpu" or net.config.order < 2:
        return False
    if tokens < TOKENS_PER_TABLE_ROW * table_rows:
        return False
    need, free = table_bytes(net.config.order - 1, table_rows, len(net.b)), available_bytes()
    return free is not None and need <= min(MAX_BYTES, MAX_SHARE_OF_FREE * free)


def weights_version(net) -> tuple[int, ...]:
    """Changes whenever a parameter is updated in place (what the tables were computed from). Read at
    every stateful step, so a net whose parameters are all its own (no submodules) skips
    `parameters()`'s generator chain: the same parameters, in the same order."""
    if not net._modules:
        return tuple(p._version for p in net._parameters.values() if p is not None)
    return tuple(p._version for p in net.parameters())


@dataclass
class PositionTables:
    """T = [T_0; ...; T_{n-2}] [(n-1) R, V'] (R = rows of the feature table, V' = |V| padded, the
    padding -inf in T_0 and 0 elsewhere), U padded with zero rows to [V', h], and the weights' version."""

    tables: torch.Tensor
    U: torch.Tensor | None
    version: tuple[int, ...]
    feature_rows: int


@torch.no_grad()
def position_tables(net, table: torch.Tensor) -> PositionTables:
    """The tables for the feature table `table` (C): block j = table W_j^T, + b in block 0."""
    k, m, rows, v = net.config.order - 1, net.config.features, len(table), len(net.b)
    w = torch.zeros(padded(v), k * m, dtype=net.W.dtype, device=net.W.device)  # zero rows: padding logits 0 ...
    w[:v] = net.W
    out = torch.empty(k * rows, padded(v), dtype=net.W.dtype, device=net.W.device)
    for j in range(k):  # each product straight into its contiguous block
        torch.mm(table, w[:, j * m:(j + 1) * m].t(), out=out[j * rows:(j + 1) * rows])
    bias = torch.full((padded(v),), -torch.inf, dtype=net.b.dtype, device=net.b.device)  # ... then -inf in T_0
    bias[:v] = net.b
    out[:rows] += bias
    u = None
    if net.U is not None:
        u = torch.zeros(padded(v), net.U.shape[1], dtype=net.U.dtype, device=net.U.device)
        u[:v] = net.U
    return PositionTables(out, u, weights_version(net), rows)


def logits(net, t: PositionTables, table: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """y [rows, V'] for contexts c [rows, n-1]: n-1 rows of the tables summed (b + W x), + U tanh(d + H x)."""
    y = F.embedding_bag(c + torch.arange(c.shape[1], device=c.device) * t.feature_rows, t.tables, mode="sum")
    if t.U is not None:
        y.addmm_(net.hidden_output(net.embed(c, table)), t.U.t())
    return y


@torch.no_grad()
def scores(net, t: PositionTables, table: torch.Tensor, ctx: torch.Tensor, targets: torch.Tensor | None
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log P(target | context), log Z), float64 [N] each, for contexts [N, n-1]; targets=None gives (log Z, None).

    log Z = log sum_w exp(y_w) in two passes over y (exp in place, sum) instead of four: the max is
    subtracted only in rows whose sum leaves SAFE_SUM (a logit above ~69, or all below ~-69), whose
    logits are then computed again; elsewhere every term is accurate to fp32 rounding."""
    from nnlm import threads

    out = torch.empty(len(ctx), dtype=torch.float64)
    log_z = None if targets is None else torch.empty(len(ctx), dtype=torch.float64)
    for lo in range(0, len(ctx), ROWS):
        threads.check()
        c = ctx[lo:lo + ROWS]
        y = logits(net, t, table, c)
        picked = None if targets is None else y.gather(1, targets[lo:lo + ROWS, None])[:, 0]
        sums = y.exp_().sum(dim=1)
        redo = ~((sums > SAFE_SUM[0]) & (sums < SAFE_SUM[1]))  # (NaN included)
        lse = sums.log_()
        if bool(redo.any()):
            again = logits(net, t, table, c[redo])
            top = again.amax(dim=1, keepdim=True)
            lse[redo] = again.sub_(top).exp_().sum(dim=1).log_().add_(top[:, 0])
        out[lo:lo + len(c)] = (lse if picked is None else picked - lse).double().cpu()
        if log_z is not None:  # log Z comes free with log P
            log_z[lo:lo + len(c)] = lse.double().cpu()
    return out, log_z
