"""The thread count follows the cores other processes leave free (pure parts, and the governor's rules)."""
import torch

from nnlm.threads import ThreadGovernor, busy_between, free_threads


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
    saved = torch.get_num_threads()
    try:
        governor = ThreadGovernor(requested=1, recheck_seconds=0.0)
        assert governor.threads == 1
        assert governor.check() == 1
        assert "1 threads" in governor.describe()
    finally:
        torch.set_num_threads(saved)


def test_governor_chooses_within_the_cores():
    saved = torch.get_num_threads()
    try:
        governor = ThreadGovernor(recheck_seconds=0.0, window=0.05)
        assert 1 <= governor.threads <= governor.cores
        assert 1 <= governor.check() <= governor.cores
    finally:
        torch.set_num_threads(saved)
