"""Exact scoring of long texts with direct connections, from per-position output tables.

With plain concatenated features, the direct connections' term W x = sum_j W_j C(w_j) is a sum over
the n-1 context positions j of a |V|-vector that depends only on the word at that position. So
T_j = C W_j^T ([|V|, |V|]: row w is word w's contribution at position j, b folded into T_0) can be
computed once, and each scored token then reads n-1 rows of it (an embedding bag) instead of
multiplying (n-1) m numbers by each of |V| output rows:

    y = sum_j T_j[w_j] + U tanh(d + H x)        (the same formula, other fp32 rounding)

For the AP News net (n = 6, m = 100, h = 60, |V| = 18k) this replaces 18 of the 20 MFLOP a token
costs by 360 KB of reads; measured on 2 idle cores, exact scoring ran 2x to 3x faster
(docs/scaling.md). The tables cost (n-1) |V|^2 4 bytes (6 GB there) and their computation about
what scoring |V| tokens the plain way costs, so they are built only before a long pass
(`LanguageModel.will_score`) and only within a memory budget; the softmax stays exact over all of V.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

TOKENS_PER_TABLE_ROW = 16  # build only for passes of at least 16 |V| tokens (the tables then pay for
# themselves several times over; Brown's 200k-token splits stay on the plain path)
MAX_BYTES = 8 << 30        # never more than this for the tables ...
MAX_SHARE_OF_FREE = 1 / 3  # ... nor more than this share of the memory the machine has available
ROWS = 256                 # tokens per embedding bag: a [256, |V|] block stays in the caches' reach


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def table_bytes(context_size: int, table_rows: int, vocab_size: int) -> int:
    return 4 * context_size * table_rows * vocab_size


def tables_pay(net, table_rows: int, tokens: int, device: torch.device) -> bool:
    """Whether a pass over `tokens` tokens should build the tables: a CPU net with direct connections
    and plain concatenated features, a long pass, and memory to spare."""
    if net.W is None or net.A is not None or device.type != "cpu" or net.config.order < 2:
        return False
    if tokens < TOKENS_PER_TABLE_ROW * table_rows:
        return False
    need, free = table_bytes(net.config.order - 1, table_rows, len(net.b)), available_bytes()
    return free is not None and need <= min(MAX_BYTES, MAX_SHARE_OF_FREE * free)


@torch.no_grad()
def position_tables(net, table: torch.Tensor) -> torch.Tensor:
    """[(n-1) R, |V|] fp32: block j holds table W_j^T (+ b in block 0), R = rows of `table` (C)."""
    k, m, rows = net.config.order - 1, net.config.features, len(table)
    out = torch.empty(k * rows, len(net.b), dtype=net.W.dtype, device=net.W.device)
    for j in range(k):
        torch.mm(table, net.W[:, j * m:(j + 1) * m].t(), out=out[j * rows:(j + 1) * rows])
    out[:rows] += net.b
    return out


@torch.no_grad()
def scores(net, tables: torch.Tensor, table: torch.Tensor, ctx: torch.Tensor, targets: torch.Tensor | None,
           log_z: list | None = None) -> torch.Tensor:
    """log P(target | context) (or log Z with targets None), float64 [N], for contexts [N, n-1]."""
    from nnlm import threads

    k, rows_per_position = ctx.shape[1], len(table)
    offsets = torch.arange(k, device=ctx.device) * rows_per_position
    out = torch.empty(len(ctx), dtype=torch.float64)
    for lo in range(0, len(ctx), ROWS):
        threads.check()
        c = ctx[lo:lo + ROWS]
        y = F.embedding_bag(c + offsets, tables, mode="sum")  # [rows, |V|]: b + W x
        if net.H is not None:
            y.addmm_(net.hidden_output(net.embed(c, table)), net.U.t())
        picked = None if targets is None else y.gather(1, targets[lo:lo + ROWS, None])[:, 0]
        top = y.amax(dim=1, keepdim=True)
        y.sub_(top).exp_()
        lse = y.sum(dim=1).log_().add_(top[:, 0])
        out[lo:lo + len(c)] = (lse if picked is None else picked - lse).double().cpu()
        if log_z is not None and picked is not None:
            log_z.append(lse.double().cpu().numpy())
    return out


def weights_version(net) -> tuple[int, ...]:
    """Changes whenever C, W or b is updated in place (what the tables were computed from)."""
    return net.C._version, net.W._version, net.b._version
