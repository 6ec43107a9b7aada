"""`nnlm reproduce` training its last net beside the others (`nnlm.reproduce.net_lane`): the same table as the
nets in turn, and a call cut short leaves no process behind, and the next call builds every row."""
import json

import pytest

from nnlm.neural.run.checkpoint import load_tensors
from nnlm.reproduce import ReproduceRequest, reproduce
from nnlm.reproduce.net_lane import SCORES

NET_ROWS = ("mlp1", "mlp2", "mlp1-em", "mlp3", "mlp4", "mlp3-em")


@pytest.fixture
def two_cores(monkeypatch):
    """The lane's rule sees two cores whatever the host has (a 1-core container trains in turn); the runs stop at
    their planned epochs, not at the time guard (which a tiny corpus's seconds make a matter of luck)."""
    import nnlm.reproduce.net_rows as net_rows
    from nnlm.reproduce.planner import clustering_need

    monkeypatch.setattr("nnlm.reproduce.net_lane.machine_cores", lambda: 2)
    monkeypatch.setattr("nnlm.reproduce.net_run.GUARD", 1000.0)
    late_needs = net_rows.late_needs  # a clustering after the nets, as Brown has (this corpus's |V| < every c):
    # an elastic row, which the plan gives all the time the others leave
    monkeypatch.setattr(net_rows, "late_needs", lambda job: late_needs(job) + [clustering_need("c150", 150, 0.01, 1.0)])


def request(tmp_path, out: str, threads: int | None) -> ReproduceRequest:
    return ReproduceRequest(str(tmp_path / "rand"), tmp_path / out, 5.0, "mlp1,mlp3", False, "x", progress=False,
                            threads=threads)


def test_the_last_net_beside_the_others_gives_the_table_of_the_nets_in_turn(random_corpus, tmp_path, two_cores,
                                                                            monkeypatch):
    import nnlm.reproduce.net_rows as net_rows

    rows, logs, scored_at = {}, {}, {}
    govern = net_rows.govern

    def spy(requested=None, device="cpu"):  # the threads each net row is scored at
        scored_at[way].append(requested)
        return govern(requested, device)

    monkeypatch.setattr(net_rows, "govern", spy)
    for way, threads in (("beside", None), ("in-turn", 1)):  # --threads: the user's choice, no second process
        logs[way], scored_at[way] = [], []
        reproduce(request(tmp_path, way, threads), log=logs[way].append)
        rows[way] = json.loads((tmp_path / way / "results.json").read_text())["rows"]
    assert any("MLP3 trains beside the other nets" in line for line in logs["beside"])
    assert any("[mlp3, beside]" in line and "epoch 1:" in line for line in logs["beside"])  # its log, collected
    assert not any("beside" in line for line in logs["in-turn"])
    # with a lane, the nets trained here are scored at the governor's choice (both cores once the lane has ended),
    # not at the one thread they train at; --threads 1 is kept
    assert scored_at["beside"] and set(scored_at["beside"]) == {None}
    assert scored_at["in-turn"] and set(scored_at["in-turn"]) == {1}
    for row_id in NET_ROWS:
        assert rows["beside"][row_id]["perplexity"] == rows["in-turn"][row_id]["perplexity"], row_id
    # the lane's scoring is timed where it ran, and the row says so (not the 0 s of reading its scores back)
    _, meta = load_tensors(tmp_path / "beside" / rows["beside"]["mlp3"]["run"] / SCORES)
    timed = {split: float(meta[f"seconds.{split}"]) for split in ("test", "train")}
    assert all(t >= 0 for t in timed.values())
    row_seconds = rows["beside"]["mlp3"]["scoring_seconds"]
    assert {s: row_seconds[s] for s in timed} == {s: round(t, 1) for s, t in timed.items()}
    for net in ("mlp1", "mlp3"):  # every split scored with the nets, none left for the end
        assert not rows["beside"][net].get("train_pending") and rows["beside"][net]["perplexity"]["train"] > 1
        assert rows["beside"][net]["epochs"] == rows["in-turn"][net]["epochs"]


def test_a_call_cut_while_the_lane_trains_ends_it_then_the_next_call_builds_every_row(random_corpus, tmp_path,
                                                                                        two_cores):
    import multiprocessing

    from conftest import SessionEnded, dies_in_epoch_2

    with pytest.raises(SessionEnded):
        reproduce(request(tmp_path, "report", None), log=dies_in_epoch_2)
    assert not multiprocessing.active_children()  # the lane ended with the call
    logs: list[str] = []
    reproduce(request(tmp_path, "report", None), log=logs.append)
    rows = json.loads((tmp_path / "report" / "results.json").read_text())["rows"]
    assert all(rows[row_id]["perplexity"]["test"] > 1 for row_id in NET_ROWS)
    assert rows["mlp3"]["epochs"] == 10  # EXPECTED_EPOCHS: continued, not begun again


def test_the_lane_is_planned_on_a_core_of_its_own_only_when_no_other_process_keeps_one_busy():
    """Side by side the lane's net needs all that is left for itself, and the other nets the same with the rows of
    this process; on a busy machine the rows are planned as in turn (the two processes would share the cores)."""
    from nnlm.reproduce.net_lane import plan_beside
    from nnlm.reproduce.planner import Need

    def net(name, want):
        return Need(name, 5.0, (10.0, 20.0, 40.0, want))

    needs = [net("mlp1", 60.0), net("mlp3", 50.0)]
    splits = [Need(f"{n.id}-train-now", 10.0, (0.0,), unit="scoring") for n in needs]
    then = [Need("c150", 2.0, (0.0, 0.0, 0.0, 30.0), unit="clustering", elastic=True)]
    grants = plan_beside(100.0, [], needs, splits, then, side_by_side=True)  # 77 and 65 s: each fits in 100
    assert grants is not None and grants["mlp3"].status == grants["mlp1"].status == "full"
    assert grants["mlp3"].work == 50.0 and grants["mlp1"].work == 60.0
    assert plan_beside(100.0, [], needs, splits, then, side_by_side=False) is None  # 142 s in turn
    assert plan_beside(150.0, [], needs, splits, then, side_by_side=False)["mlp3"].status == "full"
    assert plan_beside(100.0, [], [needs[0], net("mlp3", 90.0)], splits, then, side_by_side=True) is None  # 105
    assert plan_beside(70.0, [], needs, splits, then, side_by_side=True) is None  # mlp1 and its split: 75 s


def test_a_lane_child_stopped_or_failing_ends_with_a_status_not_a_traceback(tmp_path):
    """multiprocessing prints the traceback of an exception that leaves a child: a stop on the parent's SIGTERM (the
    checkpoint saved) is the signal's exit status, and a clear error a line of the lane's log (which the parent
    prints when it collects it) and status 1."""
    import signal

    from nnlm.errors import NnlmError
    from nnlm.neural.run.stop_signals import StoppedBySignal
    from nnlm.reproduce.lane_process import ended_quietly

    log_file = tmp_path / "lane.log"
    with pytest.raises(SystemExit) as ended, ended_quietly(log_file):
        raise StoppedBySignal(signal.SIGTERM, "stopped by SIGTERM at epoch 1")
    assert ended.value.code == 143 and not log_file.exists()
    with pytest.raises(SystemExit) as ended, ended_quietly(log_file):
        raise NnlmError("the corpus changed under the run")
    assert ended.value.code == 1 and log_file.read_text() == "error: the corpus changed under the run\n"
    with pytest.raises(ValueError), ended_quietly(log_file):  # a bug keeps its traceback
        raise ValueError("bug")
