"""`nnlm tune`: a small, budgeted search of lr / weight decay / dropout on validation for one corpus and net.

Trials are runs of `nnlm train` in OUT/trial-NN, each with an equal share of the time budget: first the
default recipe, then the same net with plain Adam (constant rate, no regularisation), then points of a
small grid in an order fixed by the seed. OUT/tune.json records every trial (its options, best valid
perplexity, epochs, minutes) as it ends, so an interrupted search resumes: finished trials are kept, an
unfinished one continues (`--resume` of its run). The best trial's directory is a trained model.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.neural import train as tr

TUNE_FILE = "tune.json"
LRS = (1e-3, 2e-3, 4e-3)
WEIGHT_DECAYS = (0.0, 0.01, 0.05, 0.2)
DROPOUTS = (0.0, 0.1, 0.25)


def trial_options(seed: int) -> list[dict[str, Any]]:
    """The trials in the order they are run: the default, plain Adam, then the grid shuffled by `seed`."""
    grid = [{"lr": lr, "weight_decay": wd, "dropout": p}
            for lr, wd, p in itertools.product(LRS, WEIGHT_DECAYS, DROPOUTS)]
    plain = {"lr": 2e-3, "lr_schedule": "constant", "weight_decay": 0.0, "dropout": 0.0}
    order = np.random.default_rng([seed, 7]).permutation(len(grid))
    return [{}, plain] + [grid[i] for i in order if grid[i] != {k: plain[k] for k in ("lr", "weight_decay", "dropout")}]


def tune(out: Path | str, requested: dict[str, Any], minutes: float, trials: int,
         log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or continue) the search in `out`; returns tune.json's dict."""
    out = Path(out)
    if not (minutes > 0 and minutes < 1e6):
        raise NnlmError(f"--minutes must be a positive number of minutes, got {minutes!r}")
    if trials < 1:
        raise NnlmError(f"--trials must be at least 1, got {trials}")
    if requested.get("recipe") == "paper":
        raise NnlmError("nnlm tune searches the Adam recipes; --recipe paper has no dropout to tune")
    record_file = out / TUNE_FILE
    base = {k: v for k, v in requested.items() if k in tr.RUN_DEFAULTS}
    base["corpus"] = tr.corpus_key(base.get("corpus", "brown"))
    if record_file.exists():
        record = json.loads(record_file.read_text())
        if record["requested"] != base:
            raise NnlmError(f"{out} holds a search with other options ({record['requested']}); "
                            "continue it with the same options or choose another --out")
    else:
        if out.exists() and any(out.iterdir()):
            raise NnlmError(f"{out} exists and is not empty; choose another --out")
        record = {"requested": base, "minutes": minutes, "trials": []}
    out.mkdir(parents=True, exist_ok=True)
    share = minutes / trials
    session = {k: v for k, v in requested.items() if k in tr.SESSION_DEFAULTS and k != "time_budget"}
    plan = trial_options(int(base.get("seed") or 0))[:trials]
    for i, options in enumerate(plan):
        done = {t["index"] for t in record["trials"]}
        if i in done:
            continue
        run_dir = out / f"trial-{i:02d}"
        log(f"trial {i + 1}/{len(plan)}: {describe(options)}")
        resume = (run_dir / "run.json").exists()
        state = tr.train(run_dir, (session if resume else base | options | session) | {"time_budget": share},
                         resume=resume, progress=False, log=lambda line: log("  " + line))
        run = json.loads((run_dir / tr.ck.RUN).read_text())
        best = state["best"]
        record["trials"].append({
            "index": i, "dir": run_dir.name, "options": {k: run[k] for k in tr.RECIPE_KEYS} | {"recipe": run["recipe"]},
            "valid_ppl": best["valid_ppl"] if best else None, "best_epoch": best["epoch"] if best else None,
            "epochs": len(state["history"]), "minutes": round(state["elapsed"] / 60, 2),
            "stop": state["stop_reason"]})
        atomic_write_text(record_file, json.dumps(record, indent=1) + "\n")
    return record


def describe(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in options.items()) or \
        "the default recipe"


def report(record: dict[str, Any]) -> list[str]:
    """The trials, best first, and the command line of the best."""
    rows = sorted((t for t in record["trials"] if t["valid_ppl"] is not None), key=lambda t: t["valid_ppl"])
    lines = ["valid ppl  epochs  minutes  trial     options"]
    for t in rows:
        o = t["options"]
        lines.append(f"{t['valid_ppl']:9.2f}  {t['epochs']:6d}  {t['minutes']:7.1f}  {t['dir']:8s}  "
                     f"lr {o['lr']:g} {o['lr_schedule']}, weight decay {o['weight_decay']:g}, dropout {o['dropout']:g}")
    if rows:
        o = rows[0]["options"]
        lines.append(f"best: {rows[0]['dir']} (a trained run); to train anew with it: nnlm train ... --recipe "
                     f"{o['recipe']} --lr {o['lr']:g} --lr-schedule {o['lr_schedule']} --weight-decay "
                     f"{o['weight_decay']:g} --dropout {o['dropout']:g}")
    return lines
