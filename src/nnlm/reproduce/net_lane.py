"""A table's last net trained beside the others (issue 50): a second process, one thread each, instead of the
nets one after another on two.

Why: a table's nets are independent until their mixes, and on a 2-core host two threads gain a net less than a
second core does (MLP1's step does not scale; its exact validation ~1.7-1.9x). So when the plan grants every
pending net its whole training at one thread (the same early-stopped runs as in turn: a net's numbers do not
depend on its thread count, tests/test_step_threads.py), the last pending net trains, is scored on test and
train in a child process while this one trains the others on the other core; the parent collects its run and
scores when it reaches that net's row, so the table, the mixes and results.json are built as before and by one
process only. With no other process on the machine each side is planned on its own core (`plan_beside`); on a busy
one, as if in turn. Each side scores its nets at the governor's threads: both cores once the other side is done.

The child (`lane_process`) is a spawn of `train_beside`: `nnlm.neural.parallel.ranks.train_parallel` in the
net's run directory (continuing one an earlier call cut), then the trained net's log P of test and train kept
beside its weights (`SCORES`, tagged with their digest, as the run keeps valid's). Its log lines go to `LOG`,
which the parent prints when it collects them. It is a daemon: it ends with the call; the parent's SIGTERM (`stop`,
on Ctrl-C or an error) makes its trainer save a checkpoint first, as any run does, so the next call continues it.
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from nnlm.errors import NnlmError
from nnlm.neural.run import checkpoint as ck
from nnlm.reproduce import lane_process, net_run, planner
from nnlm.threads import cores_busy_outside, free_threads, machine_cores

if TYPE_CHECKING:
    from nnlm.data.corpus import Corpus
    from nnlm.reproduce.job import Job
    from nnlm.reproduce.net_run import NetRun

SCORES, LOG = "lane_scores.safetensors", "lane.log"
SPLITS = ("test", "train")  # scored in the child (valid's scores the run keeps itself)


def train_beside(corpus: Corpus, where: Path, request: dict[str, Any], resume: bool) -> None:
    """The child: train the net of `request` in `where` on one thread, then keep its scores of SPLITS (on as many
    threads as the parent's work leaves free: a pass's numbers do not depend on its thread count)."""
    from nnlm.lm import split_log_probs
    from nnlm.neural.parallel.ranks import train_parallel
    from nnlm.neural.run.config import TrainRequest
    from nnlm.threads import govern

    parent = lane_process.enter()
    log_file = log_path(where)
    log_file.unlink(missing_ok=True)

    def log(line: str) -> None:
        lane_process.end_if_orphaned(parent)  # (a trainer's line follows its checkpoint)
        with open(log_file, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    with lane_process.ended_quietly(log_file):
        train_parallel(where, TrainRequest.of(request), "none", resume=resume, progress=False, log=log)
        model = ck.load_neural(where)
        govern(device="cpu")  # scored at the governor's threads: both cores once the parent's nets are done
        scores, seconds = {}, {}
        for split in SPLITS:
            t0 = time.perf_counter()
            scores[split] = torch.from_numpy(split_log_probs(model, corpus, split))
            seconds[f"seconds.{split}"] = f"{time.perf_counter() - t0:.1f}"
        ck.save_tensors(where / SCORES, scores, {"weights_sha256": ck.weights_digest(where) or ""} | seconds)


def log_path(where: Path) -> Path:
    """The child's log, beside its run directory (the trainer owns what is inside it)."""
    return where.parent / f"{where.name}.{LOG}"


@dataclass
class Lane:
    """The net training beside the others: its id, process, run directory, grant, and the threads to give back."""

    net: str
    process: multiprocessing.process.BaseProcess
    where: Path
    grant: planner.Grant | None
    threads: int | None


def worth_it(job: Job, pending: list[str]) -> bool:
    """Two or more nets to train on a CPU with two or more cores, one process each (not Hogwild's workers, nor
    the user's own --threads), in a table of one shape (`choose_shape` measures shapes one net at a time)."""
    return (len(pending) >= 2 and machine_cores() >= 2 and job.request.threads is None and not job.hogwild
            and job.device_name() == "cpu" and len(job.table.net_shapes) == 1)


def start(job: Job, runs: dict[str, NetRun], first: list[planner.Need], then: list[planner.Need]) -> Lane | None:
    """The last of the pending nets `runs` started beside the others when `worth_it` and the plan, at one thread a
    net, grants each all it asks for with time left for their train splits (`plan_beside`; the rows that share the
    budget with them planned `first` and `then`, as `net_rows.plan_net` does); else None (the nets train in turn,
    at the threads the governor picks, and their rates are measured again)."""
    pending = list(runs)
    if not worth_it(job, pending):
        return None
    threads, job.threads = job.threads, 1
    grant = None
    if (left := job.left()) is not None:
        needs = [net_run.need(job, runs[net], fresh=True, floor_epochs=job.table.net_floor_epochs) for net in pending]
        splits = [planner.scoring_need(f"{net}-train-now", len(job.corpus.train), job.rates[net].score)
                  for net in pending]  # (scored with the net, not left for the end)
        busy = cores_busy_outside([child.pid for child in multiprocessing.active_children()])
        grants = plan_beside(left, first, needs, splits, then, side_by_side=free_threads(machine_cores(), busy) >= 2)
        if grants is None:
            job.threads = threads
            for net in pending:
                job.rates.pop(net, None)
            return None
        grant = grants[pending[-1]]
    net = pending[-1]
    run = runs[net]
    where = run.run_dir(job.out)
    request = net_run.train_options(job, run, net_run.limits(job, run, grant))
    process = lane_process.spawn(train_beside, job.corpus, where, request, (where / ck.RUN).exists())
    job.beside = net
    job.log(f"    {net.upper()} trains beside the other nets, in a process of its own, one thread each"
            + ("" if grant is None else f"; plan: {grant.reason}"))
    return Lane(net, process, where, grant, threads)


def plan_beside(left: float, first: list[planner.Need], needs: list[planner.Need], splits: list[planner.Need],
                then: list[planner.Need], side_by_side: bool) -> dict[str, planner.Grant] | None:
    """The grants of the pending nets (`needs`, in the table's order: the last is the lane's) and of their train
    splits (`splits`, the same order) when each net gets all it asks for and no split is skipped; else None.
    `side_by_side` (no other process keeps a core busy): the lane's net and its split are planned against all
    that is left, on the core it has to itself, and the other nets with the rows this process builds (`first`,
    `then`) against the same; otherwise every row in one plan, as in turn -- the two processes would share the
    cores the others leave, and the nets in turn give MLP1 (first in priority) its whole training first."""
    tracks = [first + needs[:-1] + splits[:-1] + then, [needs[-1], splits[-1]]] if side_by_side \
        else [first + needs + splits + then]
    grants = {g.id: g for track in tracks for g in planner.plan(left, track)}
    if any(grants[n.id].status != "full" for n in needs) or any(grants[n.id].status == "skipped" for n in splits):
        return None
    return grants


def collect(job: Job, lane: Lane) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, float]]:
    """Wait for the lane's child; its log printed, the nets' threads given back; (its final training state, its
    scores of SPLITS, the seconds each took it). NnlmError if it failed."""
    exitcode = lane_process.join(lane.process, log_path(lane.where), job.log, f"{lane.net}, beside")
    job.threads, job.beside = lane.threads, None
    failed = NnlmError(f"{lane.net} failed in its process beside the other nets (exit code {exitcode}); its run "
                       f"is in {lane.where}")
    if exitcode != 0 or not (lane.where / SCORES).exists():
        raise failed
    tensors, meta = ck.load_tensors(lane.where / SCORES)
    if meta.get("weights_sha256") != ck.weights_digest(lane.where):
        raise failed
    seconds = {split: float(meta.get(f"seconds.{split}", "nan")) for split in SPLITS}
    return ck.read_state(lane.where), {split: tensors[split].numpy() for split in SPLITS}, seconds


def stop(job: Job, lane: Lane | None) -> None:
    """End a lane the call leaves early (an error, Ctrl-C): its trainer saves a checkpoint on SIGTERM."""
    if lane is not None and lane.process.is_alive():
        lane.process.terminate()
        lane.process.join(timeout=60)
    if lane is not None:
        job.threads, job.beside = lane.threads, None

