"""`nnlm tune`: a small, budgeted search of lr / weight decay / dropout on validation for one corpus and net.

Trials are runs of `nnlm train` in OUT/trial-NN: first the default recipe, then the same net with plain
Adam (constant rate, no regularisation), then points of a small grid in an order fixed by the seed.
Trials of a few minutes rank early progress, which an unregularised net wins even where a regularised
one ends better, so the budget is spent by successive halving: every round gets an equal part of it;
the first round trains every trial briefly, each later round continues the better half (rounded up)
of the previous round from their checkpoints (`--resume` with a larger time budget), until one trial
is left. A trial that ended on early stopping or its epoch cap is final and keeps its place by its
perplexity. OUT/tune.json records the rounds and every trial as it ends, so an interrupted search
resumes where it stopped, and says (`warning`) when trials were still ended by the budget rather
than by early stopping: then their ranking is of unfinished training. The best trial's directory is a
trained model.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.data.provenance import OPTION_NAMES, read_once
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.config import SessionOptions, TrainRequest
from nnlm.neural.run.recipes import RECIPE_KEYS
from nnlm.neural.run.run_config import corpus_key
from nnlm.neural.run.train import train
from nnlm.wording import counted

TUNE_FILE = "tune.json"
SEARCH = "successive halving"
LRS = (1e-3, 2e-3, 4e-3)
WEIGHT_DECAYS = (0.0, 0.01, 0.05, 0.2)
DROPOUTS = (0.0, 0.1, 0.25)
BUDGET_STOP = "time budget"  # how the trainer's stop reason starts when the budget ended a session


def trial_options(seed: int) -> list[dict[str, Any]]:
    """The trials in the order they are run: the default, plain Adam, then the grid shuffled by `seed`."""
    grid = [{"lr": lr, "weight_decay": wd, "dropout": p}
            for lr, wd, p in itertools.product(LRS, WEIGHT_DECAYS, DROPOUTS)]
    plain = {"lr": 2e-3, "lr_schedule": "constant", "weight_decay": 0.0, "dropout": 0.0}
    order = np.random.default_rng([seed, 7]).permutation(len(grid))
    return [{}, plain] + [grid[i] for i in order if grid[i] != {k: plain[k] for k in ("lr", "weight_decay", "dropout")}]


def round_sizes(trials: int) -> list[int]:
    """Trials per round: all of them, then the better half (rounded up) of the last, down to one."""
    sizes = [trials]
    while sizes[-1] > 1:
        sizes.append(math.ceil(sizes[-1] / 2))
    return sizes


def cumulative_budgets(minutes: float, trials: int) -> list[float]:
    """A trial's total time budget at the end of each round: every round has minutes / rounds, shared
    equally by its trials, so the last trial standing trains longest."""
    sizes = round_sizes(trials)
    shares = [minutes / len(sizes) / size for size in sizes]
    return list(itertools.accumulate(shares))


def can_continue(trial: dict[str, Any]) -> bool:
    """Only a trial whose last session the time budget ended has more to learn from more time."""
    return str(trial.get("stop") or "").startswith(BUDGET_STOP)


def ranked(indices: list[int], trials: dict[int, dict[str, Any]]) -> list[int]:
    """Best validation perplexity first (a trial without one last; ties by index)."""
    def key(i: int) -> tuple[float, int]:
        ppl = trials[i]["valid_ppl"]
        return (math.inf if ppl is None else ppl, i)
    return sorted(indices, key=key)


def open_record(out: Path, base: dict[str, Any], minutes: float, trials: int) -> dict[str, Any]:
    """tune.json of a search to continue (same options, budget and trials), or a new one."""
    record_file = out / TUNE_FILE
    if not record_file.exists():
        if out.exists() and any(out.iterdir()):
            raise NnlmError(f"{out} exists and is not empty; choose another --out")
        return {"requested": base, "search": SEARCH, "minutes": minutes, "trial_count": trials, "rounds": [],
                "trials": [], "budget_limited": [], "warning": None}
    record = json.loads(record_file.read_text())
    if record.get("search") != SEARCH:
        raise NnlmError(f"{out} holds a search of an earlier nnlm tune (equal shares); choose another --out")
    if record["requested"] != base:
        raise NnlmError(f"{out} holds a search with other options ({record['requested']}); "
                        "continue it with the same options or choose another --out")
    if (record["minutes"], record["trial_count"]) != (minutes, trials):
        raise NnlmError(f"{out} holds a search of {counted(record['trial_count'], 'trial')} in "
                        f"{record['minutes']:g} minutes; "
                        "continue it with the same --trials and --minutes or choose another --out")
    return record


def tune(out: Path | str, request: TrainRequest, minutes: float, trials: int,
         log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or continue) the search in `out` for the run options `request` gives (the search chooses the
    recipe's values) and its session (each trial's time budget is the search's); returns tune.json's dict."""
    out = Path(out)
    if not (minutes > 0 and minutes < 1e6):
        raise NnlmError(f"--minutes must be a positive number of minutes, got {minutes!r}")
    if trials < 1:
        raise NnlmError(f"--trials must be at least 1, got {trials}")
    if request.run.recipe == "paper":
        raise NnlmError("nnlm tune searches the Adam recipes; --recipe paper has no dropout to tune")
    base = request.asked()  # (tune.json records the options given: a search continues only with the same)
    base["corpus"] = corpus_key(request.run.corpus)
    if base["corpus"] == "-":  # standard input is read once, here; the trials find it in the cache by its content
        base["corpus"] = read_once({name: base.get(name) for name in OPTION_NAMES})["corpus"]
    plan = trial_options(int(base.get("seed") or 0))
    trials = min(trials, len(plan))  # the grid has 37 points in all
    record = open_record(out, base, minutes, trials)
    out.mkdir(parents=True, exist_ok=True)
    session = request.session
    sizes, budgets = round_sizes(trials), cumulative_budgets(minutes, trials)
    results = {t["index"]: t for t in record["trials"]}

    def save() -> None:
        record["trials"] = [results[i] for i in sorted(results)]
        limited = [results[i]["dir"] for i in sorted(results) if can_continue(results[i])]
        record["budget_limited"] = limited
        record["warning"] = budget_warning(record, limited)
        atomic_write_text(out / TUNE_FILE, json.dumps(record, indent=1) + "\n")

    for r, size in enumerate(sizes):
        if r == len(record["rounds"]):  # the round's members are fixed once, so a resume keeps them
            record["rounds"].append(list(range(trials)) if r == 0 else ranked(record["rounds"][r - 1], results)[:size])
            save()
        members = record["rounds"][r]
        log(f"round {r + 1}/{len(sizes)}: {counted(len(members), 'trial')}, "
            f"{budgets[r]:.2f} minutes of training each in all")
        for i in members:
            done = results.get(i)
            if done is not None and (done["round"] >= r or not can_continue(done)):
                continue  # trained in this round already, or final (early stopping, epoch cap)
            results[i] = run_trial(out, i, plan[i], base, session, budgets[r], r, log)
            results[i]["valid_by_round"] = (done or {}).get("valid_by_round", []) + [results[i]["valid_ppl"]]
            save()
    return record


def run_trial(out: Path, index: int, options: dict[str, Any], base: dict[str, Any], session: SessionOptions,
              budget: float, round_index: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Train trial `index` (anew, or continued from its checkpoint) up to `budget` minutes in all."""
    run_dir = out / f"trial-{index:02d}"
    log(f"trial {index:02d}: {describe(options)}")
    resume = (run_dir / "run.json").exists()
    request = TrainRequest() if resume else TrainRequest.of(base | options)
    request = dataclasses.replace(request, session=dataclasses.replace(session, time_budget=budget))
    state = train(run_dir, request, resume=resume, progress=False, log=lambda line: log("  " + line))
    run = json.loads((run_dir / ck.RUN).read_text())
    best = state["best"]
    return {"index": index, "dir": run_dir.name,
            "options": {k: run[k] for k in RECIPE_KEYS} | {"recipe": run["recipe"]},
            "valid_ppl": best["valid_ppl"] if best else None, "best_epoch": best["epoch"] if best else None,
            "epochs": len(state["history"]), "minutes": round(state["elapsed"] / 60, 2), "round": round_index,
            "stop": state["stop_reason"]}


def budget_warning(record: dict[str, Any], limited: list[str]) -> str | None:
    """One line when trials the search compared last were still ended by the time budget."""
    if not limited:
        return None
    finished = len(record["rounds"]) == len(round_sizes(record["trial_count"]))
    best = "" if not (finished and record["trials"]) else \
        min(record["trials"], key=lambda t: math.inf if t["valid_ppl"] is None else t["valid_ppl"])["dir"]
    which = " (the best among them)" if best in limited else ""
    return (f"warning: {len(limited)} of {len(record['trials'])} trials{which} ended on the time budget, not on early "
            f"stopping: they were ranked on unfinished training; a larger --minutes gives a fairer choice")


def describe(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in options.items()) or \
        "the default recipe"


def stop_label(stop: str | None) -> str:
    text = str(stop or "")
    return "budget" if text.startswith(BUDGET_STOP) else "early" if text.startswith("early") else "epochs"


def report(record: dict[str, Any]) -> list[str]:
    """The trials, best first (with the last round each reached and how it ended), the command line of
    the best, and the budget warning if any."""
    rows = sorted((t for t in record["trials"] if t["valid_ppl"] is not None), key=lambda t: t["valid_ppl"])
    lines = ["valid ppl  epochs  minutes  round  stop    trial     options"]
    for t in rows:
        o = t["options"]
        lines.append(f"{t['valid_ppl']:9.2f}  {t['epochs']:6d}  {t['minutes']:7.1f}  {t['round'] + 1:5d}  "
                     f"{stop_label(t['stop']):6s}  {t['dir']:8s}  "
                     f"lr {o['lr']:g} {o['lr_schedule']}, weight decay {o['weight_decay']:g}, dropout {o['dropout']:g}")
    if rows:
        o = rows[0]["options"]
        lines.append(f"best: {rows[0]['dir']} (a trained run); to train anew with it: nnlm train ... --recipe "
                     f"{o['recipe']} --lr {o['lr']:g} --lr-schedule {o['lr_schedule']} --weight-decay "
                     f"{o['weight_decay']:g} --dropout {o['dropout']:g}")
    if record.get("warning"):
        lines.append(record["warning"])
    return lines
