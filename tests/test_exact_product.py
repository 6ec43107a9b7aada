"""The exact pass's library per host (nnlm.neural.lm.exact_product): numpy's products give numbers that do not
depend on the thread count or the block, within fp32 rounding of torch's; the choice is measured once per host and
shape, cached, overridden by NNLM_EXACT_PRODUCT, and never taken for small or non-fp32 output layers."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from nnlm import host_cache
from nnlm.neural.lm import exact_product
from nnlm.neural.lm.scoring import V_SLICE, exact_pass


def operands(v: int = 1300, k: int = 20, n: int = 300, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(v, k + 1, generator=g) * 0.3, torch.randn(n, k, generator=g)


def run_pass(weights: torch.Tensor, z: torch.Tensor, rows: int, targets: torch.Tensor | None = None):
    return exact_pass(weights, lambda lo, hi: [z[lo:hi]], len(z), targets, rows)


def counted_measure(monkeypatch, numpy_seconds: float) -> list:
    """`exact_product.measure` replaced by one that says torch takes 1 s and numpy `numpy_seconds` at every count;
    the shapes it was called for are appended to the list returned."""
    calls = []

    def measure(shape, v_slice, counts):
        calls.append(shape)
        return {"torch": {n: 1.0 for n in counts}, "numpy": {n: numpy_seconds for n in counts}}

    monkeypatch.setattr(exact_product, "measure", measure)
    return calls


@pytest.fixture
def fresh_choices(tmp_path, monkeypatch):
    """A cache directory of its own, no choice made in this process yet, no override."""
    monkeypatch.setenv("NNLM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(exact_product.ENV, raising=False)
    monkeypatch.setattr(exact_product, "_chosen", {})
    return tmp_path / exact_product.CACHE


def test_numpy_sums_do_not_depend_on_workers_or_block():
    weights, z = operands(v=2 * V_SLICE + 77, n=301)
    z1 = torch.cat([z, torch.ones(len(z), 1)], dim=1)
    with exact_product.numpy_products(V_SLICE) as log_z:
        one, two, three = (log_z(weights, z1, w).clone() for w in (1, 2, 3))
        part = log_z(weights, z1[100:250].contiguous(), 2).clone()
    assert torch.equal(one, two) and torch.equal(one, three)
    assert torch.equal(part, one[100:250])  # a context's sum is the same in any block
    flat = torch.empty(V_SLICE * len(z1))
    reference = exact_product.torch_log_z(weights, z1, flat, V_SLICE)
    torch.testing.assert_close(one, reference, rtol=2e-6, atol=0)


def test_a_pass_by_numpy_is_the_same_at_any_thread_count_and_near_torchs(monkeypatch):
    weights, z = operands()
    targets = torch.randint(0, len(weights), (len(z),), generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv(exact_product.ENV, "numpy")
        runs = []
        for count in (1, 2):
            torch.set_num_threads(count)
            runs.append(run_pass(weights, z, rows=64, targets=targets))
        monkeypatch.setenv(exact_product.ENV, "torch")
        by_torch = run_pass(weights, z, rows=64, targets=targets)
    finally:
        torch.set_num_threads(before)
    (log_p1, log_z1), (log_p2, log_z2) = runs
    assert np.array_equal(log_p1, log_p2) and np.array_equal(log_z1, log_z2)
    np.testing.assert_allclose(log_p1, by_torch[0], rtol=1e-6)
    np.testing.assert_allclose(log_z1, by_torch[1], rtol=1e-6)
    # the log-probabilities of every context still sum to one over V
    all_words = torch.arange(len(weights)).repeat(3)
    monkeypatch.setenv(exact_product.ENV, "numpy")
    log_p, _ = run_pass(weights, z[:1].expand(len(all_words), -1).contiguous(), rows=len(weights), targets=all_words)
    assert abs(np.exp(log_p[:len(weights)]).sum() - 1) < 1e-5


def test_numpys_blas_threads_are_given_back():
    counts = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    weights, z = operands()
    with exact_product.numpy_products(V_SLICE) as log_z:
        assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib["user_api"] == "blas")
        log_z(weights, torch.cat([z, torch.ones(len(z), 1)], dim=1), 2)
    assert [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"] == counts


def test_overlapping_passes_give_the_count_back_once_the_last_ends():
    def blas_counts() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    counts = blas_counts()
    first, second = exact_product.one_blas_thread(), exact_product.one_blas_thread()
    first.__enter__()
    second.__enter__()  # (another thread's pass, say: it starts while the first runs...)
    first.__exit__(None, None, None)  # (...and ends after it)
    assert all(n == 1 for n in blas_counts())
    second.__exit__(None, None, None)
    assert blas_counts() == counts


def test_the_choice_is_measured_once_per_host_and_shape(fresh_choices, monkeypatch):
    calls = counted_measure(monkeypatch, numpy_seconds=0.9)
    weights, _ = operands()
    assert exact_product.library_for(weights, 64, V_SLICE) == "numpy"
    assert exact_product.library_for(weights, 64, V_SLICE) == "numpy"
    assert len(calls) == 1
    monkeypatch.setattr(exact_product, "_chosen", {})  # another process on this host reads the cache
    assert exact_product.library_for(weights, 64, V_SLICE) == "numpy" and len(calls) == 1
    entry = next(iter(json.loads(fresh_choices.read_text())[host_cache.host_key()].values()))
    assert entry["library"] == "numpy" and entry["seconds"]["numpy"]["1"] == 0.9
    assert exact_product.library_for(weights, 128, V_SLICE) == "numpy" and len(calls) == 2  # another shape
    monkeypatch.setattr(host_cache, "host_key", lambda: "another-host")
    monkeypatch.setattr(exact_product, "_chosen", {})
    assert exact_product.library_for(weights, 64, V_SLICE) == "numpy" and len(calls) == 3  # another host


@pytest.mark.parametrize(("numpy_seconds", "expected"), [
    ({1: 0.90, 2: 0.90}, "numpy"),
    ({1: 0.97, 2: 0.90}, "torch"),   # less than GAIN faster at one thread
    ({1: 0.80, 2: 1.10}, "torch"),   # slower at two
])
def test_numpy_is_taken_only_when_faster_by_gain_at_every_count(fresh_choices, monkeypatch, numpy_seconds,
                                                                 expected):
    monkeypatch.setattr(exact_product, "measure",
                        lambda shape, v_slice, counts: {"torch": {1: 1.0, 2: 1.0}, "numpy": numpy_seconds})
    monkeypatch.setattr(exact_product.threads, "current",
                        lambda: type("Governor", (), {"fixed": False, "threads": 2})())
    assert exact_product.library_for(operands()[0], 64, V_SLICE) == expected


def test_small_or_non_fp32_layers_and_the_override_measure_nothing(fresh_choices, monkeypatch):
    monkeypatch.setattr(exact_product, "measure", lambda *a: pytest.fail("measured"))
    weights, _ = operands()
    assert exact_product.library_for(weights[:V_SLICE], 64, V_SLICE) == "torch"
    assert exact_product.library_for(weights.double(), 64, V_SLICE) == "torch"
    monkeypatch.setenv(exact_product.ENV, "numpy")
    assert exact_product.library_for(weights, 64, V_SLICE) == "numpy"
    monkeypatch.setenv(exact_product.ENV, "torch")
    assert exact_product.library_for(weights, 64, V_SLICE) == "torch"
    assert not fresh_choices.exists()


def test_a_real_measurement_records_both_libraries(fresh_choices, monkeypatch):
    monkeypatch.setattr(exact_product, "TIMED_SLICES", 2)
    chosen = exact_product.library_for(operands(v=3 * V_SLICE)[0], 32, V_SLICE)
    entry = next(iter(json.loads(fresh_choices.read_text())[host_cache.host_key()].values()))
    assert chosen == entry["library"] in exact_product.LIBRARIES
    assert set(entry["seconds"]) == {"torch", "numpy"} and all(s > 0 for s in entry["seconds"]["torch"].values())


def test_a_large_vocabulary_scores_in_wide_blocks_with_a_slice_wide_buffer(monkeypatch):
    from nnlm.neural.lm import scoring

    assert scoring.score_rows(17_907) == scoring.SCORE_BYTES // (4 * 17_907)  # Brown: as before (937)
    assert scoring.score_rows(104_128) == scoring.MIN_SLICED_ROWS  # not SCORE_BYTES' 161
    assert scoring.score_rows(300) == scoring.SCORE_BYTES // 1200  # one slice: the whole-|V| buffer rule
    sizes = []
    real_empty = torch.empty

    def recorded(*shape, **kw):
        sizes.append(shape[0] if len(shape) == 1 and isinstance(shape[0], int) else None)
        return real_empty(*shape, **kw)

    weights, z = operands(v=3 * V_SLICE + 5, n=200)
    monkeypatch.setattr(torch, "empty", recorded)
    run_pass(weights, z, rows=150)
    assert V_SLICE * 150 in sizes and len(weights) * 150 not in sizes  # a slice's rows, not |V|'s


def test_a_misspelt_override_is_one_line_before_any_work(tmp_path):
    from helpers import assert_one_line_error, run_nnlm

    proc = run_nnlm("ngram", "--corpus", str(tmp_path / "nowhere"), "--save", str(tmp_path / "m"),
                    env={exact_product.ENV: "openblas"})
    assert_one_line_error(proc, "NNLM_EXACT_PRODUCT must be torch or numpy")
    assert not (tmp_path / "m").exists()


def test_a_cache_that_cannot_be_written_is_measured_again_not_an_error(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("NNLM_CACHE_DIR", str(blocked / "cache"))  # under a file: no directory can be made
    monkeypatch.delenv(exact_product.ENV, raising=False)
    monkeypatch.setattr(exact_product, "_chosen", {})
    calls = counted_measure(monkeypatch, numpy_seconds=1.2)
    weights, _ = operands()
    assert exact_product.library_for(weights, 64, V_SLICE) == "torch"
    monkeypatch.setattr(exact_product, "_chosen", {})  # the next process
    assert exact_product.library_for(weights, 64, V_SLICE) == "torch" and len(calls) == 2
    assert blocked.read_text() == "not a directory"


def test_processes_that_would_measure_at_once_measure_once(fresh_choices, monkeypatch):
    import threading
    import time as clock

    calls = []

    def slow(shape, v_slice, counts):
        calls.append(shape)
        clock.sleep(0.3)  # the others arrive meanwhile
        return {"torch": {n: 1.0 for n in counts}, "numpy": {n: 0.5 for n in counts}}

    monkeypatch.setattr(exact_product, "measure", slow)
    chosen = []
    workers = [threading.Thread(target=lambda: chosen.append(exact_product.choose((1300, 21, 64), V_SLICE)))
               for _ in range(3)]  # (a lock per open file: threads stand for a run's ranks here)
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert chosen == ["numpy"] * 3 and len(calls) == 1
