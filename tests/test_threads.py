"""The thread count follows the cores other processes leave free (pure parts, and the governor's rules)."""
import os

import pytest
import torch

from nnlm import threads
from nnlm.threads import ThreadGovernor, busy_between, free_threads


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_idle_machine_uses_every_core():
    assert free_threads(2, 0.0) == 2
    assert free_threads(8, 0.1) == 8


def test_busy_cores_are_left_alone():
    assert free_threads(2, 0.5) == 1   # a core half taken by another process is not ours
    assert free_threads(2, 1.0) == 1
    assert free_threads(2, 6.0) == 1   # never below one thread
    assert free_threads(8, 3.0) == 5


def test_unknown_load_uses_every_core():
    assert free_threads(4, None) == 4
    assert free_threads(4, float("nan")) == 4


def test_busy_between_subtracts_own_cpu_time():
    before, after = (100.0, 10.0, 0.0), (103.0, 11.0, 2.0)  # machine 3 s busy, ours 1 s, over 2 s
    assert busy_between(before, after) == 1.0
    assert busy_between(before, (100.0, 12.0, 2.0)) == 0.0  # never negative
    assert busy_between(before, (105.0, 10.0, 0.0)) == 0.0  # no wall time: no estimate


def test_requested_threads_win_and_are_never_changed():
    governor = ThreadGovernor(requested=1, recheck_seconds=0.0)
    assert governor.threads == 1
    assert governor.check() == 1
    assert governor.describe() == "1 thread (--threads 1)"


def test_governor_chooses_within_the_cores():
    governor = ThreadGovernor(recheck_seconds=0.0, window=0.05)
    assert 1 <= governor.threads <= governor.cores
    assert 1 <= governor.check() <= governor.cores


def test_cores_busy_elsewhere_leaves_out_this_process(monkeypatch):
    """0.4 s machine-busy in a 0.2 s window, 0.2 s of it ours, is one core kept busy elsewhere (the
    load average would have counted our own work too)."""
    real = threads.cores_busy_elsewhere(0.25)
    if real is None:
        pytest.skip("no /proc/stat here")
    # /proc/stat counts in 10 ms ticks per core, so a short window can over-count by a few ticks
    assert 0.0 <= real <= (os.cpu_count() or 1) + 0.5
    machine, own, wall = iter([10.0, 10.4]), iter([5.0, 5.2]), iter([100.0, 100.2])
    monkeypatch.setattr(threads, "machine_busy_seconds", lambda: next(machine))
    monkeypatch.setattr(threads.time, "process_time", lambda: next(own))
    monkeypatch.setattr(threads.time, "monotonic", lambda: next(wall))  # no real clock: a loaded machine
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: None)    # must not stretch the window
    assert threads.cores_busy_elsewhere(0.2) == pytest.approx(1.0)


def test_cores_busy_outside_leaves_out_this_process_and_its_children(monkeypatch):
    """A job's own children (a second process training beside it) are not load from elsewhere: 1.4 s machine-busy
    in a 0.5 s window, 0.5 s of it ours and 0.5 s a child's, is 0.8 of a core kept busy by others."""
    assert threads.process_seconds(os.getpid()) == pytest.approx(threads.time.process_time(), abs=0.05)
    assert threads.process_seconds(2 ** 22 + 1) == 0.0  # (above Linux's largest pid: a process that has gone)
    child = iter([3.0, 3.5])
    samples = iter([(10.0, 5.0, 100.0), (11.4, 5.5, 100.5)])
    monkeypatch.setattr(threads, "_sample", lambda: next(samples))
    monkeypatch.setattr(threads, "process_seconds", lambda pid: next(child))
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: None)
    assert threads.cores_busy_outside([1234], 0.5) == pytest.approx(0.8)


def _fake_clock(monkeypatch, busy_at_start, samples):
    """Feed the governor (machine busy s, own CPU s, wall s) samples; wall time drives its schedule too."""
    it = iter(samples)
    now = {"wall": 0.0}

    def sample():
        value = next(it)
        now["wall"] = value[2]
        return value

    monkeypatch.setattr(threads, "_sample", sample)
    monkeypatch.setattr(threads, "cores_busy_elsewhere", lambda window: busy_at_start)
    monkeypatch.setattr(threads.time, "monotonic", lambda: now["wall"])
    monkeypatch.setattr(threads, "machine_cores", lambda: 2)
    return now


def test_check_follows_the_load_both_ways(monkeypatch):
    # start: 0 cores busy elsewhere; then 20 s with 2 cores busy elsewhere (60 busy, 20 ours); then idle again
    now = _fake_clock(monkeypatch, 0.0, [(0.0, 0.0, 0.0), (60.0, 20.0, 20.0), (80.0, 40.0, 40.0)])
    governor = ThreadGovernor(recheck_seconds=20.0)
    assert governor.threads == 2 and "0.0 of 2 cores busy elsewhere" in governor.describe()
    now["wall"] = 10.0
    assert governor.check() == 2          # not due: nothing measured
    now["wall"] = 20.0
    assert governor.check() == 1 and governor.busy == pytest.approx(2.0)
    assert "1 thread (chosen from the load" in governor.describe()
    now["wall"] = 40.0
    assert governor.check() == 2 and governor.busy == pytest.approx(0.0)
    assert governor.changes == 2


def test_sibling_processes_share_the_cores_without_counting_each_other(monkeypatch):
    # two ranks of one job, each 1 core of CPU per second: the machine's 2 busy cores are theirs alone
    now = _fake_clock(monkeypatch, 0.0, [(0.0, 0.0, 0.0), (40.0, 20.0, 20.0)])
    governor = ThreadGovernor(recheck_seconds=20.0, share=2)
    assert governor.threads == 1          # 2 free cores between 2 processes
    now["wall"] = 20.0
    assert governor.check() == 1 and governor.busy == pytest.approx(0.0)


def test_check_without_a_governor_leaves_the_count_alone(monkeypatch):
    monkeypatch.setattr(threads, "_current", None)
    torch.set_num_threads(1)
    threads.check()
    assert torch.get_num_threads() == 1
