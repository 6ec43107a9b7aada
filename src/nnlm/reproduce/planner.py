"""The budget planner: how much of what is left each pending row gets (pure: rates in, seconds out).

Why a planner: the first version gave each net an equal share minus 1.2 x its measured scoring time.
On a busy machine the scoring rate was measured with torch's 2 threads (3x slower than one thread
there), the reserve came to 18-23 minutes and every net got nothing while 19 minutes were left.

The rules, in order:
1. Every row costs `fixed` seconds whatever happens (a net's scoring) plus work (training, clustering)
   in tiers: `floor` (the least that gives a row at all), `useful`, `want` (what finishing takes).
2. Rows are taken in priority order (MLP1 before MLP3, the nets before the slowest class rows). First
   every row gets fixed + floor while they fit; a row whose fixed + floor does not fit in what the rows
   before it leave is skipped, and the reason gives both numbers.
3. What is left raises every kept row to its `useful` tier, in priority order; then to `want`.
   A row below `want` is shortened, never skipped, while its floor fits.
The caller plans again before every row with the time then left, so a row that ends early (early
stopping) or late hands the difference to the rows after it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

SAFETY = 1.15  # on every estimate: rates are measured on a slice, and the load moves
EXPECTED_EPOCHS = 10  # a Table 1 net early-stops after 8-9 epochs on Brown (patience 3)
USEFUL_EPOCHS = 3  # what a shortened net gets before a lower-priority net gets more than its floor
FLOOR_EPOCHS = 0.5  # the least training that makes a row (its partial epoch is validated and scored)


@dataclass(frozen=True)
class Need:
    """What one pending row costs, in seconds: `fixed` whatever happens, then work in three tiers."""

    id: str
    fixed: float
    floor: float
    useful: float
    want: float
    unit: str = "training"  # what the work is, for the reasons


@dataclass(frozen=True)
class Grant:
    """The plan for one row: `work` seconds of work (0 when skipped), its status and why."""

    id: str
    status: str  # "full", "shortened" or "skipped"
    work: float
    fixed: float
    reason: str

    def to_dict(self) -> dict:
        return {"status": self.status, "work_minutes": round(self.work / 60, 2),
                "fixed_minutes": round(self.fixed / 60, 2), "reason": self.reason}


def _min(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def plan(left: float, needs: Sequence[Need]) -> list[Grant]:
    """Grants for `needs` (in priority order) from `left` seconds; see the module docstring."""
    left = max(left, 0.0)
    kept: dict[str, float] = {}
    skipped: dict[str, str] = {}
    free = left
    for need in needs:
        least = need.fixed + need.floor
        if least <= free:
            kept[need.id] = need.floor
            free -= least
        else:
            skipped[need.id] = (f"skipped for lack of budget: it needs at least {_min(least)} ({_min(need.fixed)} "
                                f"of scoring, {_min(need.floor)} of {need.unit}), {_min(free)} left of "
                                f"{_min(left)} after the rows before it")
    for tier in ("useful", "want"):
        for need in needs:
            if need.id in kept and free > 0:
                more = min(max(getattr(need, tier) - kept[need.id], 0.0), free)
                kept[need.id] += more
                free -= more
    grants = []
    for need in needs:
        if need.id in skipped:
            grants.append(Grant(need.id, "skipped", 0.0, need.fixed, skipped[need.id]))
            continue
        work = kept[need.id]
        if work >= need.want - 1e-9:
            reason = (f"{_min(work)} of {need.unit}, the ~{_min(need.want)} it is estimated to need "
                      f"({_min(left)} left, {_min(need.fixed)} of it kept for its scoring)")
            grants.append(Grant(need.id, "full", work, need.fixed, reason))
        else:
            reason = (f"shortened for lack of budget: {_min(work)} of the ~{_min(need.want)} of {need.unit} it is "
                      f"estimated to need ({_min(left)} left; {_min(need.fixed)} kept for its scoring, "
                      f"{_min(left - need.fixed - work)} for the other rows)")
            grants.append(Grant(need.id, "shortened", work, need.fixed, reason))
    return grants


@dataclass(frozen=True)
class Rates:
    """Measured speeds, tokens per second, at the threads the work will run with."""

    train: float  # training examples (tokens) per second
    score: float  # exact-softmax scoring, tokens per second


def net_need(net: str, rates: Rates, train_tokens: int, valid_tokens: int, test_tokens: int,
             done_epochs: float = 0.0) -> Need:
    """A net's cost: scoring valid and test after training, plus one validation that a budget cut
    mid-epoch adds (fixed); epochs of training, each with its validation (work). A run continued
    from an earlier call wants only the epochs it has not had."""
    score = 1.0 / rates.score
    fixed = SAFETY * score * (2 * valid_tokens + test_tokens)
    epoch = SAFETY * (train_tokens / rates.train + valid_tokens * score)
    floor = SAFETY * FLOOR_EPOCHS * train_tokens / rates.train
    want = max(EXPECTED_EPOCHS - done_epochs, 1.0)
    return Need(net, fixed, floor, min(USEFUL_EPOCHS, want) * epoch, want * epoch)


def clustering_need(row_id: str, classes: int, seconds_per_class: float, tail: float) -> Need:
    """A class row still to cluster: `tail` seconds to build and score it (fixed); a clustering cut at
    its deadline still gives classes, so its floor is 0; it wants classes x the measured seconds per class."""
    want = SAFETY * classes * seconds_per_class
    return Need(row_id, SAFETY * tail, 0.0, 0.5 * want, want, unit="clustering")


def unused_share(left: float, grants: Sequence[Grant]) -> float:
    """Seconds a plan leaves unassigned (what the tests bound when a row is skipped)."""
    return left - sum(g.fixed + g.work for g in grants if g.status != "skipped")


def finite(x: float) -> float:
    """A rate that is 0 or not finite (a timer too coarse for the slice) becomes very slow, not a crash."""
    return x if math.isfinite(x) and x > 0 else 1e-9
