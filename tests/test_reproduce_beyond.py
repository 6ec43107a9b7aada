"""`nnlm reproduce --beyond` end to end on the small synthetic corpus: the section's rows, an ensemble that
is a distribution, per-bucket weights that sum to 1, a resumed second call, and the rows' checks."""
import json

import numpy as np
import pytest

from nnlm.errors import NnlmError
from nnlm.reproduce import ReproduceRequest, reproduce
from nnlm.reproduce.beyond_rows import BEYOND_ROWS, MixRow, NetRow, check_rows

ROWS = (
    NetRow("mlp7-seed0", "MLP7, seed 0", "mlp7", seed=0, twin="mlp7"),
    NetRow("mlp7-seed1", "MLP7, seed 1", "mlp7", seed=1),
    MixRow("ens2", "2 MLP7, equal", ("mlp7-seed0", "mlp7-seed1"), "equal"),
    MixRow("ens2-em", "2 MLP7, EM", ("mlp7-seed0", "mlp7-seed1"), "em"),
    MixRow("ens2-ngrams", "2 MLP7 + KN5 + trigram, EM by bucket", ("mlp7-seed0", "mlp7-seed1", "kn5", "interpolated"),
           "em-buckets"),
    MixRow("ngrams", "KN5 + trigram, EM by bucket", ("kn3", "kn5", "interpolated"), "em-buckets"),  # any Table 1 n-gram
    MixRow("with-class", "MLP7 + class c = 500", ("mlp7-seed0", "class500-3"), "em-buckets"),
)


def section_rows(tmp_path, monkeypatch, rows, minutes: float):
    """Table 1 (MLP7, 0.05 min) then the section with `rows` and no reference within `minutes`: (its --out,
    results.json's rows)."""
    import nnlm.reproduce.beyond as beyond

    monkeypatch.setattr(beyond, "BEYOND_ROWS", rows)
    out = tmp_path / "report"
    reproduce(ReproduceRequest(str(tmp_path / "rand"), out, 0.05, "mlp7", False, "x", progress=False, threads=1,
                               beyond=True, beyond_reference="none", beyond_minutes=minutes), log=lambda s: None)
    return out, json.loads((out / "results.json").read_text())["rows"]

def test_beyond_section_end_to_end_then_resume(random_corpus, tmp_path, monkeypatch):
    import nnlm.reproduce.beyond as beyond
    from nnlm.lm import contexts
    from nnlm.reproduce.beyond_mixes import load_mixture
    from nnlm.reproduce.job import Job
    from nnlm.reproduce.section import Section

    monkeypatch.setattr(beyond, "BEYOND_ROWS", ROWS)
    corpus_dir, out = str(tmp_path / "rand"), tmp_path / "report"
    logs: list[str] = []

    def call() -> dict:
        logs.clear()
        reproduce(ReproduceRequest(corpus_dir, out, 0.15, "mlp7", False, "x", progress=False, threads=1, beyond=True,
                                   beyond_reference="none",
                                   beyond_minutes=0.1), log=logs.append)
        return json.loads((out / "results.json").read_text())["rows"]

    rows = call()
    for row in ROWS:
        assert f"beyond:{row.id}" in rows
    seed0, seed1 = rows["beyond:mlp7-seed0"], rows["beyond:mlp7-seed1"]
    assert seed0["perplexity"] == rows["mlp7"]["perplexity"] and seed0["twin"] == "mlp7"  # Table 1's run, reused
    assert seed1["perplexity"]["valid"] != seed0["perplexity"]["valid"]  # another seed, another net
    assert json.loads((out / seed1["run"] / "run.json").read_text())["seed"] == 1
    assert rows["beyond:ens2"]["weights"] == [[0.5, 0.5]]
    # EM fitted on validation does no worse there than equal weights; per bucket, the weights sum to 1
    assert rows["beyond:ens2-em"]["perplexity"]["valid"] <= rows["beyond:ens2"]["perplexity"]["valid"] + 1e-9
    assert rows["beyond:ens2-ngrams"]["status"] != "skipped", rows["beyond:ens2-ngrams"].get("note")
    buckets = np.array(rows["beyond:ens2-ngrams"]["weights"])
    assert buckets.shape[0] > 1 and buckets.shape[1] == 4 and np.allclose(buckets.sum(axis=1), 1.0)
    assert rows["beyond:with-class"]["status"] == "skipped" and "class500-3" in rows["beyond:with-class"]["note"]
    text = (out / "README.md").read_text()
    assert "## Beyond the paper" in text and "`nnlm train --preset mlp7 --loss sampled --seed 1" in text
    built = sum(row["status"] not in ("skipped", "not applicable") for key, row in rows.items()
                if key.startswith("beyond:"))
    assert f"Section built at `{rows['beyond:mlp7-seed1']['commit']}` ({built} rows)." in text
    assert "`nnlm mix runs/mlp7-seed0 runs/mlp7-seed1 ngrams/kn5 ngrams/interpolated --weights em-buckets`" in text
    assert ("saved once by `nnlm ngram --kind interpolated --order 3 --save ngrams/interpolated`, `nnlm ngram --kind "
            "kn --order 3 --save ngrams/kn3`, `nnlm ngram --kind kn --order 5 --save ngrams/kn5`.") in text
    assert np.array(rows["beyond:ngrams"]["weights"]).shape[1] == 3

    # the ensemble and the bucketed mix, rebuilt from results.json, are distributions over the vocabulary
    section = Section(Job(ReproduceRequest(corpus_dir, out, models="mlp7", full=True, command="x", progress=False,
                                           threads=1), log=lambda s: None), None, ROWS)
    for mix in (ROWS[2], ROWS[4]):
        model = load_mixture(section, mix)
        ctx = contexts(random_corpus.stream(), np.arange(8, 16), model.context_size, random_corpus.pad_id)
        dist = model.distribution(ctx)
        assert dist.shape == (8, len(random_corpus.vocab)) and np.allclose(dist.sum(axis=1), 1.0)

    # a second call keeps what is done (the n-gram mix, always; a net that early-stopped) and continues
    # what a busy machine's budget cut (its run resumed, not restarted); a mix is refitted only if a part changed
    again = call()
    assert f"[beyond 6/{len(ROWS)}] KN5 + trigram, EM by bucket - " in "\n".join(logs)
    assert any(line.startswith("[beyond 6/") and line.endswith("done already") for line in logs)
    assert again["beyond:ngrams"] == rows["beyond:ngrams"]
    for net in ("mlp7-seed1",):
        before, after = rows[f"beyond:{net}"], again[f"beyond:{net}"]
        assert after["epochs"] >= before["epochs"] and after["run"] == before["run"]
        if before["status"] == "done":
            assert after == before
    for mix in ("ens2", "ens2-em", "ens2-ngrams"):
        assert again[f"beyond:{mix}"]["options"]["parts"] == {p: again[f"beyond:{p}" if p.startswith("mlp") else p][
            "perplexity"]["valid"] for p in again[f"beyond:{mix}"]["parts"]}


def test_without_beyond_no_section(random_corpus, tmp_path):
    out = tmp_path / "report"
    reproduce(ReproduceRequest(str(tmp_path / "rand"), out, 0.02, "mlp7", False, "x", progress=False,
                               threads=1), log=lambda s: None)
    assert "Beyond the paper" not in (out / "README.md").read_text()
    assert not any(k.startswith("beyond:") for k in json.loads((out / "results.json").read_text())["rows"])


def test_rows_are_checked():
    check_rows(BEYOND_ROWS)
    with pytest.raises(NnlmError, match="mixes"):
        check_rows((MixRow("m", "m", ("nowhere", "kn5"), "equal"),))
    with pytest.raises(NnlmError, match="weighting"):
        check_rows((NetRow("a", "a", "mlp1"), MixRow("m", "m", ("a", "kn5"), "median")))
    with pytest.raises(NnlmError, match="twice"):
        check_rows((NetRow("a", "a", "mlp1"), NetRow("a", "a", "mlp1", seed=1)))
    with pytest.raises(NnlmError, match="beyond-minutes"):
        reproduce(ReproduceRequest("brown", "/nonexistent/r", None, None, False, "x", beyond=True, beyond_minutes=-1))


def test_beyond_section_trains_a_beyond_preset(random_corpus, tmp_path, monkeypatch):
    """A row naming a preset past Table 1 (presets.BEYOND: --local, --layers, ...) trains and mixes."""

    rows = (NetRow("mlp7-seed0", "MLP7, seed 0", "mlp7", twin="mlp7"),
            NetRow("deep", "deep-context", "deep-context"),
            NetRow("mlp7-dropout", "MLP7, dropout 0.3", "mlp7", dropout=0.3, order=4),
            MixRow("deep-mlp7", "deep-context + MLP7, EM", ("deep", "mlp7-seed0"), "em"))
    # 0.5 min: the rows need ~3 s on an idle machine and are planned from speeds measured in the call, so under
    # load the first rows were granted what 0.2 min held and the last was skipped (load ~5; 0.5 is not waited for)
    out, done = section_rows(tmp_path, monkeypatch, rows, 0.5)
    deep = done["beyond:deep"]
    assert deep["status"] != "skipped", deep.get("note")
    run = json.loads((out / deep["run"] / "run.json").read_text())
    assert run["model"]["order"] == 9 and run["model"]["layers"] == 2 and run["model"]["local"] == 4
    assert done["beyond:deep-mlp7"]["perplexity"]["valid"] <= deep["perplexity"]["valid"] + 1e-9
    dropped = done["beyond:mlp7-dropout"]  # a row's own dropout and n: in its run, its command and its run directory
    assert dropped["status"] != "skipped", dropped.get("note")
    run = json.loads((out / dropped["run"] / "run.json").read_text())
    assert run["dropout"] == 0.3 and run["model"]["order"] == 4
    assert "--dropout 0.3 --order 4" in dropped["command"] and dropped["run"] != done["beyond:mlp7-seed0"]["run"]


def test_beyond_section_trains_the_papers_extensions(random_corpus, tmp_path, monkeypatch):
    """The section's rows for the paper's section-5 extensions (the energy network with direct connections,
    MLP1 with the class-factored output trained with the full softmax's loss) train, score and mix."""

    mine = {r.id: r for r in BEYOND_ROWS if isinstance(r, NetRow)}
    rows = (NetRow("mlp7-seed0", "MLP7, seed 0", "mlp7", twin="mlp7"), mine["energy-direct"], mine["mlp1-classes"],
            MixRow("ext", "energy + classes + MLP7, EM", ("energy-direct", "mlp1-classes", "mlp7-seed0"), "em"))
    out, done = section_rows(tmp_path, monkeypatch, rows, 0.6)  # 0.3 min skipped the last row at load ~4
    energy, classes = done["beyond:energy-direct"], done["beyond:mlp1-classes"]
    for row in (energy, classes):
        assert row["status"] != "skipped", row.get("note")
    model = json.loads((out / energy["run"] / "run.json").read_text())["model"]
    assert model["energy"] and model["direct"]
    run = json.loads((out / classes["run"] / "run.json").read_text())
    assert run["model"]["output_classes"] > 0 and run["loss"] == "full"
    assert "--loss full" in classes["command"] and "--preset energy-direct" in energy["command"]
    # EM starts from equal weights and never loses likelihood, so the mix is at least as good as the worst part
    # (EM's steps from there need not reach the best part when one part is far ahead)
    parts = [r["perplexity"]["valid"] for r in (energy, classes, done["beyond:mlp7-seed0"])]
    assert done["beyond:ext"]["perplexity"]["valid"] < max(parts)
    assert sum(done["beyond:ext"]["mean_weights"]) == pytest.approx(1.0, abs=1e-3)


def test_beyond_section_trains_the_recurrent_row(random_corpus, tmp_path, monkeypatch):
    """The section's recurrent row (its own samples and batch size, in its run, its command and its speeds'
    key) trains on streams, scores and mixes with an n-gram row."""
    from dataclasses import replace

    import nnlm.reproduce.beyond as beyond

    mine = {r.id: r for r in BEYOND_ROWS if isinstance(r, NetRow)}
    lstm = replace(mine["lstm"], samples=6, batch_size=40, share=0.1)  # 6 of the 60 s: its want, not 70%
    rows = (lstm, MixRow("lstm-kn", "recurrent + KN5, EM", ("lstm", "kn5"), "em"))
    monkeypatch.setitem(beyond.beyond_nets.__dict__, "MIN_EPOCHS", 1)
    monkeypatch.setattr(beyond.beyond_nets.planner, "EXPECTED_EPOCHS", 1)  # one epoch is all it asks for
    out, done = section_rows(tmp_path, monkeypatch, rows, 1.0)
    row = done["beyond:lstm"]
    assert row["status"] != "skipped", row.get("note")
    run = json.loads((out / row["run"] / "run.json").read_text())
    assert run["model"]["recurrent"] == "lstm" and run["samples"] == 6 and run["batch_size"] == 40
    assert "--samples 6 --batch-size 40" in row["command"] and row["options"]["samples"] == 6
    assert done["beyond:lstm-kn"]["perplexity"]["valid"] < max(row["perplexity"]["valid"],
                                                                done["kn5"]["perplexity"]["valid"])


def test_a_run_stopped_at_its_epochs_with_grant_left_trains_on_within_the_grant(monkeypatch, tmp_path):
    """The grant (10 epochs at the speed timed on a slice) outlasts the epochs at the run's own speed: the run
    continues for the whole epochs the rest holds at that speed (with the planner's safety factor), then ends."""
    from types import SimpleNamespace

    from nnlm.reproduce import beyond_nets, net_run, planner

    corpus = SimpleNamespace(train=range(800), valid=range(200))
    logs: list[str] = []
    section = SimpleNamespace(job=SimpleNamespace(corpus=corpus, log=logs.append, out=tmp_path),
                              row_log=lambda i: logs.append)
    run = SimpleNamespace(run_dir=lambda out: out)  # the run directory: its state.json, as the trainer keeps it
    # each epoch: 8 s of training (100 examples/s) and 2 s of validation (100 tokens/s)
    history = [{"examples": 800 * e, "elapsed_seconds": 10.0 * e, "valid_seconds": 2.0} for e in range(1, 11)]
    calls = []

    def saved(state: dict) -> dict:
        (tmp_path / "state.json").write_text(json.dumps(state))
        return state

    def train(job, run, limits, log, resume=None):
        calls.append(limits)
        done = limits["epochs"]
        return saved({"finished": False, "stop_reason": f"reached {done} epochs", "epoch": done,
                      "elapsed": 10.0 * done, "history": history + [
                          {"examples": 800 * e, "elapsed_seconds": 10.0 * e, "valid_seconds": 2.0}
                          for e in range(11, done + 1)]})

    monkeypatch.setattr(net_run, "train", train)
    clock = iter([100.0, 140.0])  # seconds since the run started, each time the continuation looks
    monkeypatch.setattr(beyond_nets.time, "monotonic", lambda: next(clock))
    grant = planner.Grant("n", "full", 150.0, 0.0, "")
    first = saved({"finished": False, "stop_reason": "reached 10 epochs", "epoch": 10, "elapsed": 100.0,
                   "history": history})
    state = beyond_nets.continue_in_grant(section, NetRow("n", "n", "mlp1"), run, grant, first, 0.0)
    per_epoch = planner.SAFETY * 10.0
    assert calls[0]["epochs"] == 10 + int(50.0 / per_epoch) == 14 and state["epoch"] == 14
    assert calls[0]["time_budget"] == round((100.0 + net_run.GUARD * 50.0) / 60, 2)
    assert len(calls) == 1 and "continued to 14" in logs[0]  # then nothing of the grant is left

    early = first | {"finished": True, "stop_reason": "early stopping: no better validation perplexity for 3 epochs"}
    assert beyond_nets.continue_in_grant(section, NetRow("n", "n", "mlp1"), run, grant, early, 0.0) is early


def test_a_row_with_a_share_wants_that_share_of_the_budget(monkeypatch):
    """A row's `share` replaces its recipe's expected epochs as what it wants: the rows after it keep the rest."""
    from types import SimpleNamespace

    from nnlm.reproduce import beyond_nets, net_run, planner

    corpus = SimpleNamespace(train=range(800), valid=range(200))
    section = SimpleNamespace(job=SimpleNamespace(corpus=corpus, samples=None), budget=3600.0, left=lambda: 3500.0)
    monkeypatch.setattr(beyond_nets, "section_net", lambda section, net: None)
    monkeypatch.setattr(net_run, "rates_of", lambda job, run: planner.Rates(train=100.0, score=100.0))
    # 10 epochs of 10 s (8 s of training, 2 of validation) and 60 s of scoring: 100 s wanted
    monkeypatch.setattr(net_run, "need", lambda job, run, fresh: planner.Need("n", 60.0, (6.0, 10.0, 30.0, 100.0)))
    assert beyond_nets.plan_net(section, NetRow("n", "n", "mlp1")).work == pytest.approx(100.0)
    grant = beyond_nets.plan_net(section, NetRow("n", "n", "mlp1", share=0.5))
    assert grant.work == pytest.approx(1800.0) and grant.status == "full"
    with pytest.raises(NnlmError, match="share"):
        check_rows((NetRow("a", "a", "mlp1", share=1.5),))
