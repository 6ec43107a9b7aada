"""The training step's thread count per host (nnlm.neural.run.step_threads): both counts train the same numbers,
the choice is measured once per host and step shape, cached, and measured again on another host."""
import json

import pytest
import torch

from nnlm import threads
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run import step_threads
from nnlm.neural.run.train import train

SAMPLED = {"preset": "mlp1", "hidden": 8, "features": 6, "batch_size": 32, "loss": "sampled", "samples": 20,
           "epochs": 2}


def trained_tensors(run, corpus_dir, **options):
    train(run, {"corpus": str(corpus_dir)} | SAMPLED | options, progress=False, log=lambda s: None)
    return ck.load_tensors(run / ck.WEIGHTS)[0], json.loads((run / ck.STATE).read_text())["history"]


def test_one_and_two_threads_train_the_same_numbers(random_corpus, tmp_path):
    short = {"epochs": 1, "batch_size": 64}  # (two threads on a loaded test machine are slow: few steps)
    one, history_one = trained_tensors(tmp_path / "one", tmp_path / "rand", threads=1, **short)
    two, history_two = trained_tensors(tmp_path / "two", tmp_path / "rand", threads=2, **short)
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)
    assert [h["valid_ppl"] for h in history_one] == [h["valid_ppl"] for h in history_two]


def test_the_choice_is_measured_once_cached_and_measured_again_on_another_host(tmp_path):
    path = tmp_path / "cache" / step_threads.CACHE
    calls: list[tuple[int, ...]] = []

    def slower_with_two(counts):
        calls.append(counts)
        return {1: 0.010, counts[-1]: 0.014}

    assert step_threads.choose("host-a", "mlp1", 2, slower_with_two, path) == 1
    assert step_threads.choose("host-a", "mlp1", 2, slower_with_two, path) == 1
    assert calls == [(1, 2)]  # the second run read the cache
    saved = json.loads(path.read_text())["host-a"]["mlp1"]
    assert saved["threads"] == 1 and saved["seconds_per_step"] == {"1": 0.010, "2": 0.014}

    def faster_with_two(counts):
        calls.append(counts)
        return {1: 0.010, counts[-1]: 0.006}

    assert step_threads.choose("host-b", "mlp1", 2, faster_with_two, path) == 2  # another host measures again
    assert step_threads.choose("host-a", "mlp3", 2, faster_with_two, path) == 2  # so does another step shape
    assert len(calls) == 3
    assert step_threads.choose("host-a", "mlp1", 2, faster_with_two, path) == 1  # host-a's mlp1 is known


def test_a_busy_machine_measures_nothing_and_a_tie_keeps_one_thread(tmp_path):
    path = tmp_path / step_threads.CACHE
    with pytest.raises(AssertionError):
        step_threads.choose("h", "s", 2, lambda counts: (_ for _ in ()).throw(AssertionError()), path)
    assert step_threads.choose("h", "s", 1, lambda counts: pytest.fail("measured on a busy machine"), path) is None
    assert not path.exists()
    assert step_threads.choose("h", "s", 2, lambda counts: {1: 0.0102, 2: 0.0100}, path) == 1
    path.write_text("not json")  # a damaged cache is measured again, not an error
    assert step_threads.choose("h", "s", 2, lambda counts: {1: 0.02, 2: 0.01}, path) == 2


def test_the_host_key_names_this_cpu_and_torch(monkeypatch):
    key = step_threads.host_key()
    assert key == step_threads.host_key() and len(key) == 16
    monkeypatch.setattr(threads, "machine_cores", lambda: 64)
    assert step_threads.host_key() != key  # other cores: another host


def test_a_governed_run_measures_its_step_and_trains_its_batches_at_the_choice(random_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(threads, "machine_cores", lambda: 2)
    monkeypatch.setattr(threads, "cores_busy_elsewhere", lambda window=0.2: 0.0)  # an idle 2-core machine
    monkeypatch.setattr(step_threads, "STEPS", 1)
    monkeypatch.setattr(step_threads, "ROUNDS", 1)
    seen: list[int] = []
    real = step_threads.seconds_per_step

    def measured_slower_with_two(step, counts):
        real(step, counts)  # the copied step really runs at both counts
        return {1: 0.01, 2: 0.02}

    monkeypatch.setattr(step_threads, "seconds_per_step", measured_slower_with_two)
    from nnlm.neural.run import trainer as trainer_module
    batches = trainer_module.Trainer._batches

    def spy(self, *args):
        seen.append(torch.get_num_threads())
        return batches(self, *args)

    monkeypatch.setattr(trainer_module.Trainer, "_batches", spy)
    governed, _ = trained_tensors(tmp_path / "governed", tmp_path / "rand")  # no --threads: the governor decides
    assert seen and set(seen) == {1}
    cache = json.loads((tmp_path / "cache" / step_threads.CACHE).read_text())
    assert [entry["threads"] for host in cache.values() for entry in host.values()] == [1]
    fixed, _ = trained_tensors(tmp_path / "fixed", tmp_path / "rand", threads=1)
    assert all(torch.equal(governed[k], fixed[k]) for k in fixed)  # measuring the copy left the run's numbers alone
