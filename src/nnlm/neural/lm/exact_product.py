"""Which library runs the exact pass's slices on this host: torch (its MKL, the reference) or numpy (its OpenBLAS),
chosen by timing both on the pass's own shape, once per host and shape.

Why: the exact fp32 pass (`scoring.exact_block`) multiplies V_SLICE output rows of [W, U, b] at a time by a block
of contexts, exponentiating and summing each slice into log Z, and its time is the product's. MKL is not the
fastest BLAS on every CPU: at the pass's shapes numpy's OpenBLAS ran the product 1.2-1.4x faster on an AVX2-only
AMD EPYC and the pass ~1.2x on an AVX-512 one, while MKL was as fast or faster elsewhere
(docs/experiments/host-speed.md, sections 4 and 9). So the library is not guessed from /proc/cpuinfo: a pass over
the model's |V| (at most TIMED_SLICES slices) on random operands of its shape is timed with each, at one thread
and, when two cores are free, at two (interleaved rounds, the best of each); numpy's is taken only when it is at
least GAIN faster at every count measured. The answer is cached (`nnlm.host_cache`) under the host and the shape:
every later process on the host makes the same choice without measuring, and processes that arrive at once (a
run's ranks) wait on the cache's lock and read the first one's answer.

The choice moves the numbers in the last bits (log P within ~1e-7 relative: another kernel sums each dot product
in another order), never with the thread count: numpy's pass runs its BLAS at one thread (threadpoolctl) and splits
the block's contexts between worker threads, each context's product, exp and sum the same whichever worker has it
(tests/test_exact_product.py). A model's numbers on a host are thus fixed by the host and the model's shape.
`NNLM_EXACT_PRODUCT=torch` (or `numpy`) overrides the measurement; the test suite pins torch.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

from nnlm import host_cache, threads
from nnlm.errors import NnlmError

__all__ = ["CACHE", "ENV", "GAIN", "LIBRARIES", "choose", "forced_library", "library_for", "numpy_log_z",
           "numpy_products", "one_blas_thread", "slice_sums", "torch_log_z"]

CACHE = "exact-product.json"
ENV = "NNLM_EXACT_PRODUCT"
LIBRARIES = ("torch", "numpy")
GAIN = 1.05          # numpy's pass must be this much faster at every measured thread count to be chosen
TIMED_SLICES = 32    # at most this many slices of V per timed pass: the pass's own |V| up to 16k rows (Brown
# MLP1: all 35 slices, 0.1 s a pass at one thread; fewer slices, whose W stays in the cache, favoured torch at two
# threads: 8 slices measured numpy 0.84x torch at two threads where the whole |V| measured 1.14x)
ROUNDS = 2           # timed passes per library and thread count, interleaved, after one untimed

_chosen: dict[tuple[int, int, int], str] = {}  # this process's choices, so the cache is read once per shape


def library_for(weights: torch.Tensor, rows: int, v_slice: int) -> str:
    """'torch' or 'numpy' for an exact pass of `weights` ([|V|, K + 1]) in blocks of `rows` contexts: numpy only
    for fp32 CPU weights of more than one slice (the single product of a small |V| stays torch's)."""
    if weights.device.type != "cpu" or weights.dtype != torch.float32 or len(weights) <= v_slice:
        return "torch"
    forced = forced_library()
    if forced is not None:
        return forced
    shape = (len(weights), weights.shape[1], rows)
    if shape not in _chosen:
        _chosen[shape] = choose(shape, v_slice)
    return _chosen[shape]


def forced_library() -> str | None:
    """The library NNLM_EXACT_PRODUCT names, None when it is unset or empty; any other value is refused (a typo
    would otherwise be measured over silently)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value and value not in LIBRARIES:
        raise NnlmError(f"{ENV} must be {' or '.join(LIBRARIES)} (or unset: the library measured faster on this "
                        f"host); got {os.environ[ENV]!r}")
    return value or None


def choose(shape: tuple[int, int, int], v_slice: int) -> str:
    """The cached choice for this host and shape, else measured now and cached (under the cache's lock)."""
    path, host = host_cache.cache_path(CACHE), host_cache.host_key()
    key = host_cache.shape_key({"vocab": shape[0], "operands": shape[1], "rows": shape[2], "v_slice": v_slice,
                                "numpy": np.__version__})
    with host_cache.locked(path):  # processes of one run (its ranks) measure once and share the answer
        known = host_cache.entry(path, host, key)
        if known is not None and known.get("library") in LIBRARIES:
            return known["library"]
        governor = threads.current()
        counts = (1, 2) if governor is not None and not governor.fixed and governor.threads >= 2 else (1,)
        seconds = measure(shape, v_slice, counts)
        faster = all(seconds["torch"][n] >= GAIN * seconds["numpy"][n] for n in counts)
        chosen = "numpy" if faster else "torch"
        timings = {lib: {str(n): s for n, s in by.items()} for lib, by in seconds.items()}
        host_cache.store(path, host, key, {"library": chosen, "seconds": timings})
        return chosen


def measure(shape: tuple[int, int, int], v_slice: int, counts: tuple[int, ...]) -> dict[str, dict[int, float]]:
    """Best seconds of a pass over TIMED_SLICES slices, random operands of `shape`, per library and thread count."""
    v, k1, rows = shape
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(min(v, TIMED_SLICES * v_slice), k1, generator=generator) * 0.05
    z = torch.randn(rows, k1, generator=generator) * 0.5
    flat = torch.empty(v_slice * rows)
    before = torch.get_num_threads()
    best: dict[str, dict[int, float]] = {lib: {n: float("inf") for n in counts} for lib in LIBRARIES}
    try:
        with numpy_products(v_slice) as numpy_pass:
            for round_ in range(ROUNDS + 1):
                for n in counts:
                    torch.set_num_threads(n)
                    for lib in LIBRARIES:
                        t0 = time.perf_counter()
                        if lib == "torch":
                            torch_log_z(weights, z, flat, v_slice)
                        else:
                            numpy_pass(weights, z, n)
                        if round_:
                            best[lib][n] = min(best[lib][n], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return best


def torch_log_z(weights: torch.Tensor, z: torch.Tensor, flat: torch.Tensor, v_slice: int) -> torch.Tensor:
    """sum_v exp(y) [rows] of a block z [rows, K + 1], y = weights z^T, by torch: the product a slice of V at a
    time into `flat` (at least v_slice x rows values), each slice exponentiated in place and summed while cached."""
    n = len(z)
    total = torch.zeros(n, dtype=weights.dtype, device=weights.device)
    for start in range(0, len(weights), v_slice):
        part = weights[start:start + v_slice]
        y = flat[:len(part) * n].view(len(part), n)
        torch.mm(part, z.t(), out=y)
        total += y.exp_().sum(dim=0)
    return total


def numpy_log_z(weights: torch.Tensor, z: torch.Tensor, v_slice: int, workers: int,
                pool: ThreadPoolExecutor | None, buffers: list[np.ndarray]) -> torch.Tensor:
    """sum_v exp(y) [rows] of a block z [rows, K + 1] against `weights` [|V|, K + 1], y = weights z^T, by numpy:
    each slice's product, exp and column sums, the block's contexts split between `workers` threads of `pool`
    (numpy releases the GIL in all three; its BLAS at one thread: `numpy_products`), worker i's slices in
    buffers[i] (grown when too small, kept for the pass's next blocks: a fresh megabyte a block is page faults).
    Every context's sum is computed in the same order whichever worker has it, so the result does not depend on
    `workers`."""
    w, zt = weights.detach().numpy(), z.detach().numpy().T  # zt: [K + 1, rows], a transposed view (the BLAS reads
    # it as it is)
    total = np.zeros(len(z), dtype=np.float32)
    workers = 1 if pool is None or len(z) < 2 * workers else workers
    bounds = np.linspace(0, len(z), workers + 1).astype(int)
    while len(buffers) < workers:
        buffers.append(np.empty(0, dtype=np.float32))
    for i in range(workers):
        needed = min(v_slice, len(w)) * (bounds[i + 1] - bounds[i])  # a slice's rows x this worker's contexts
        if len(buffers[i]) < needed:
            buffers[i] = np.empty(needed, dtype=np.float32)

    def columns(i: int) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        for start in range(0, len(w), v_slice):
            part = w[start:start + v_slice]
            out = buffers[i][:len(part) * (hi - lo)].reshape(len(part), hi - lo)
            np.matmul(part, zt[:, lo:hi], out=out)
            np.exp(out, out=out)
            total[lo:hi] += out.sum(axis=0)

    if workers == 1:
        columns(0)
    else:
        for done in [pool.submit(columns, i) for i in range(workers)]:
            done.result()
    return torch.from_numpy(total)


@contextmanager
def slice_sums(weights: torch.Tensor, rows: int, v_slice: int, flat: torch.Tensor
               ) -> Iterator[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """For one exact pass in blocks of `rows` contexts: `sums(weights, z)`, a block's sum_v exp(y) by this host's
    library for the shape (`library_for`), numpy's on as many threads as torch has at each block."""
    if library_for(weights, rows, v_slice) == "numpy":
        with numpy_products(v_slice) as numpy_pass:
            yield lambda w, z: numpy_pass(w, z, torch.get_num_threads())
    else:
        yield lambda w, z: torch_log_z(w, z, flat, v_slice)


@contextmanager
def numpy_products(v_slice: int) -> Iterator[Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]]:
    """For one pass: `log_z(weights, z, workers)`, numpy's sum_v exp(y) of a block on `workers` threads, with
    numpy's BLAS at one thread meanwhile (`one_blas_thread`)."""
    buffers: list[np.ndarray] = []
    with one_blas_thread(), ThreadPoolExecutor(max_workers=max(1, threads.machine_cores())) as pool:
        yield lambda weights, z, workers: numpy_log_z(weights, z, v_slice, workers, pool, buffers)


_blas = {"controller": None, "limiter": None, "passes": 0}
_blas_lock = threading.Lock()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """numpy's BLAS at one thread while any numpy pass runs in this process (the pass's workers are its threads:
    a BLAS that also spread each product over the cores would run 2 x 2 threads on 2 cores), its own count again
    when the last one ends: passes of a server's threads overlap, and a limit taken and given back by each would
    leave the count to whichever ended last."""
    from threadpoolctl import ThreadpoolController

    with _blas_lock:
        if _blas["passes"] == 0:
            if _blas["controller"] is None:
                _blas["controller"] = ThreadpoolController()
            _blas["limiter"] = _blas["controller"].limit(limits=1, user_api="blas")
        _blas["passes"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas["passes"] -= 1
            if _blas["passes"] == 0:
                _blas["limiter"].restore_original_limits()
                _blas["limiter"] = None
