"""`nnlm tune`: the trials it tries, successive halving (the better half continued from checkpoints),
the warning when trials end on the time budget, resuming, and refusing a different search in OUT."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnlm.cli import main
from nnlm.data.synthetic import write_corpus
from nnlm.neural.run.config import TrainRequest
from nnlm.neural.run.tune import cumulative_budgets, round_sizes, trial_options, tune

NET = ["--preset", "mlp7", "--hidden", "8", "--features", "4", "--threads", "1"]


@pytest.fixture
def gen_dir(tmp_path) -> Path:
    write_corpus(tmp_path / "gen", 3000, words=40, classes=5, seed=3)
    return tmp_path / "gen"


def test_rounds_halve_and_share_the_budget_equally():
    assert len(trial_options(0)) == 37 and trial_options(0)[0] == {} and trial_options(1)[:2] == trial_options(0)[:2]
    assert round_sizes(6) == [6, 3, 2, 1] and round_sizes(1) == [1] and round_sizes(5) == [5, 3, 2, 1]
    budgets = cumulative_budgets(24.0, 6)  # 6 minutes a round: 1 each, then 2, 3, 6
    assert budgets == pytest.approx([1.0, 3.0, 6.0, 12.0])
    spent = sum(size * (b - a) for size, a, b in zip(round_sizes(6), [0.0] + budgets[:-1], budgets, strict=True))
    assert spent == pytest.approx(24.0)


def test_epoch_limited_trials_are_final_and_the_search_resumes(gen_dir, tmp_path, capsys):
    out = tmp_path / "tune"
    argv = ["tune", "--corpus", str(gen_dir), "--out", str(out), "--minutes", "5", "--trials", "3", "--epochs", "1",
            *NET]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "tune.json").read_text())
    assert [t["dir"] for t in record["trials"]] == ["trial-00", "trial-01", "trial-02"]
    assert record["trials"][0]["options"]["lr_schedule"] == "plateau"
    assert (record["trials"][1]["options"]["weight_decay"], record["trials"][1]["options"]["dropout"]) == (0.0, 0.0)
    # every trial reached its one epoch in round 1: later rounds only rank them, training nothing more
    assert all(t["round"] == 0 and t["stop"].startswith("reached") for t in record["trials"])
    by_ppl = sorted(range(3), key=lambda i: record["trials"][i]["valid_ppl"])
    assert record["rounds"] == [[0, 1, 2], by_ppl[:2], by_ppl[:1]]
    assert record["warning"] is None and record["budget_limited"] == []
    assert f"best: trial-0{by_ppl[0]}" in printed and "--weight-decay" in printed and "warning" not in printed
    assert main(argv) == 0  # resumed: nothing left to train, the same record
    assert json.loads((out / "tune.json").read_text()) == record
    assert main(argv[:-len(NET) - 4] + ["--epochs", "1", *NET, "--order", "4"]) == 2
    assert "other options" in capsys.readouterr().err
    assert main([a if a != "3" else "4" for a in argv]) == 2
    assert "same --trials and --minutes" in capsys.readouterr().err


def test_budget_limited_trials_continue_from_checkpoints_and_are_warned_about(gen_dir, tmp_path):
    lines: list[str] = []
    requested = {"corpus": str(gen_dir), "preset": "mlp7", "hidden": 8, "features": 4, "threads": 1, "epochs": 1000,
                 "patience": 1000}
    record = tune(tmp_path / "tune", TrainRequest.of(requested), minutes=0.05, trials=3,
                  log=lines.append)  # 3 s: only the budget stops
    trials = {t["index"]: t for t in record["trials"]}
    first, second, last = record["rounds"]
    assert first == [0, 1, 2] and len(second) == 2 and len(last) == 1 and set(last) <= set(second)
    out = next(i for i in first if i not in second)
    assert all(trials[out]["valid_by_round"][0] >= trials[i]["valid_by_round"][0] for i in second)
    assert trials[out]["round"] == 0 and len(trials[out]["valid_by_round"]) == 1
    assert trials[last[0]]["round"] == 2 and len(trials[last[0]]["valid_by_round"]) == 3
    # continued, not restarted: one history over its sessions, its best never worse than the round before's
    metrics = [json.loads(line) for line in
               (tmp_path / "tune" / trials[last[0]]["dir"] / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == trials[last[0]]["epochs"]
    assert all(a["examples"] < b["examples"] for a, b in zip(metrics, metrics[1:], strict=False))
    assert sorted(trials[last[0]]["valid_by_round"], reverse=True) == trials[last[0]]["valid_by_round"]
    assert all(t["stop"].startswith("time budget") for t in trials.values())
    assert record["budget_limited"] == ["trial-00", "trial-01", "trial-02"]
    assert record["warning"].startswith("warning: 3 of 3 trials (the best among them) ended on the time budget")
    assert sum("round 3/3" in line for line in lines) == 1
