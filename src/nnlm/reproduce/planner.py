"""The budget planner: how much of what is left each pending row gets (pure: rates in, seconds out).

Why a planner: the first version gave each net an equal share minus 1.2 x its measured scoring time.
On a busy machine the scoring rate was measured with torch's 2 threads (3x slower than one thread
there), the reserve came to 18-23 minutes and every net got nothing while 19 minutes were left.

The rules, in order:
1. Every row costs `fixed` seconds whatever happens (a net's scoring) plus work (training, clustering)
   in ascending tiers: the first is its floor (the least that gives a row at all), the last what
   finishing it takes (a net: floor 0.5 epoch, then 1 epoch, 3 epochs, the 10 of an early-stopped run).
2. Rows are taken in priority order (MLP1 before MLP3, the nets before the slowest class rows). First
   every row gets fixed + floor while they fit; a row whose fixed + floor does not fit in what the rows
   before it leave is skipped, and the reason gives both numbers.
3. What is left raises every kept row to its next tier, tier by tier, in priority order within a tier:
   MLP3's first epoch comes before MLP1's third. A row below its last tier is shortened, not skipped.
4. What is still left is shared equally by the elastic rows (clusterings, which stop when they
   converge), so no time is left unused because an estimate was low.
The caller plans again before every row with the time then left, so a row that ends early (early
stopping) or late hands the difference to the rows after it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SAFETY = 1.15  # on every estimate: rates are measured on a slice, and the load moves
EXPECTED_EPOCHS = 10  # a Table 1 net early-stops after 8-9 epochs on Brown (patience 3)
AS_PLANNED = "as many as it was planned, not early-stopped"  # the note of a run the plan did not cut short
NET_TIERS = (0.5, 1, 3)  # epochs: the floor (a part epoch, validated), then steps before the rest


@dataclass(frozen=True)
class Need:
    """What one pending row costs, in seconds: `fixed` whatever happens, then work in tiers."""

    id: str
    fixed: float
    tiers: tuple[float, ...]  # ascending: floor, ..., want
    unit: str = "training"  # what the work is, for the reasons
    elastic: bool = False  # more than `want` does no harm (a clustering stops when it converges)

    @property
    def floor(self) -> float:
        return self.tiers[0]

    @property
    def want(self) -> float:
        return self.tiers[-1]


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
    for tier in range(1, max((len(n.tiers) for n in needs), default=1)):
        for need in needs:
            if need.id in kept and free > 0:
                level = need.tiers[min(tier, len(need.tiers) - 1)]
                more = min(max(level - kept[need.id], 0.0), free)
                kept[need.id] += more
                free -= more
    elastic = [n.id for n in needs if n.elastic and n.id in kept]
    for row_id in elastic:
        kept[row_id] += free / len(elastic)
    free = 0.0 if elastic else free
    grants = []
    for need in needs:
        if need.id in skipped:
            grants.append(Grant(need.id, "skipped", 0.0, need.fixed, skipped[need.id]))
            continue
        work = kept[need.id]
        if work >= need.want - 1e-9:
            reason = (f"{_min(work)} of {need.unit} (it is estimated to need ~{_min(need.want)}; "
                      f"{_min(left)} left, {_min(need.fixed)} of it kept for its scoring)")
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
    path: str = "plain"  # the scoring path timed: "plain", "tables" (per-position tables) or "run" (its epochs)


def epoch_parts(rates: Rates, train_tokens: int, valid_tokens: int) -> tuple[float, float]:
    """(training, validation) seconds of one epoch, with the safety factor."""
    return SAFETY * train_tokens / rates.train, SAFETY * valid_tokens / rates.score


def net_need(net: str, rates: Rates, train_tokens: int, valid_tokens: int, test_tokens: int,
             done_epochs: float = 0.0, floor_epochs: float = NET_TIERS[0]) -> Need:
    """A net's cost: scoring test after training (fixed: valid's scores of the best weights are kept by the
    trainer beside them, `checkpoint.keep_valid_scores`, and read back instead of a second pass); whole epochs
    of training, each with its validation (work). Whole epochs, because a run cut mid-epoch validates the part epoch
    too: its floor is such a part epoch (half an epoch of training and a validation), the last resort.
    A run continued from an earlier call wants only the epochs it has not had. `floor_epochs` is the
    part epoch a table counts as a row at all (an AP-News-sized epoch is 17 Brown epochs)."""
    train, valid = epoch_parts(rates, train_tokens, valid_tokens)
    fixed = SAFETY * test_tokens / rates.score
    floor = floor_epochs * train + valid
    want = max(EXPECTED_EPOCHS - done_epochs, NET_TIERS[1])
    epoch = train + valid
    return Need(net, fixed, (floor, *(min(e, want) * epoch for e in NET_TIERS[1:]), want * epoch),
                unit="training with its validation")


def clustering_need(row_id: str, classes: int, seconds_per_class: float, tail: float) -> Need:
    """A class row still to cluster: `tail` seconds to build and score it (fixed); a clustering cut at
    its deadline still gives classes, so its floor is 0; it wants classes x the measured seconds per class,
    but only once the nets have had every tier below their last (its tiers are 0 until then)."""
    want = SAFETY * classes * seconds_per_class
    return Need(row_id, SAFETY * tail, (0.0,) * len(NET_TIERS) + (want,), unit="clustering", elastic=True)


def scoring_need(row_id: str, tokens: int, score_rate: float) -> Need:
    """Scoring alone (a net's train split, left for last): all fixed, no work."""
    return Need(row_id, SAFETY * tokens / score_rate, (0.0,), unit="scoring")


def elastic_limit(left: float, needs: Sequence[Need], grant: Grant) -> float:
    """Seconds of work an elastic row (a clustering) may take once it has started: its grant, or more
    if its estimate was low -- all that the rows after it can spare, which is what is left minus their
    fixed costs and floors. The estimate (seconds per class, measured on c = 500) is low for small c,
    and a clustering cut where it would have converged makes a worse row than the later rows lose."""
    if grant.status == "skipped":
        return 0.0
    ids = [n.id for n in needs]
    later = needs[ids.index(grant.id) + 1:]
    spare = left - grant.fixed - sum(n.fixed + n.floor for n in later)
    return max(grant.work, spare)


def unused_share(left: float, grants: Sequence[Grant]) -> float:
    """Seconds a plan leaves unassigned (what the tests bound when a row is skipped)."""
    return left - sum(g.fixed + g.work for g in grants if g.status != "skipped")


def finite(x: float) -> float:
    """A rate that is 0 or not finite (a timer too coarse for the slice) becomes very slow, not a crash."""
    return x if math.isfinite(x) and x > 0 else 1e-9
