"""torch.distributed plumbing: process groups from torchrun's environment or a local launcher.

Under `torchrun`, every process finds RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
in its environment and joins the group from them. Without torchrun, `launch_local` starts
`world` processes on this machine (torch.multiprocessing) that join a group on 127.0.0.1.
Backend: NCCL when the ranks use CUDA, gloo on CPU. Every collective has a timeout, so when a rank
dies the others stop with an error instead of waiting forever.
"""
from __future__ import annotations

import datetime
import gc
import os
import socket
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nnlm.errors import NnlmError

# Hogwild's workers are forked on Linux: ~0.1 s to start instead of seconds for a fresh interpreter that
# re-imports torch (spawn, the only choice elsewhere). Children set one thread before any tensor work.
START_METHOD = "fork" if sys.platform == "linux" else "spawn"
# The ranks of `launch_local` come from a fork server on Linux: a rank forked from a process that has run
# OpenMP-threaded kernels can deadlock in its first threaded one (libgomp's pool does not survive a fork;
# seen once in tests: a rank stuck in MKL's tanh at gomp_team_barrier_wait_end). The server is a fresh
# interpreter that imports torch once and runs nothing, so its children inherit no thread pool.
RANK_START_METHOD = "forkserver" if sys.platform == "linux" else "spawn"
DEFAULT_TIMEOUT = 600.0  # seconds a rank waits in a collective (rank 0 scores validation meanwhile)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(device: torch.device) -> torch.device:
    """One GPU per process (LOCAL_RANK picks it); CPU stays CPU."""
    if device.type == "cuda":
        index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return device


def init_group(device: torch.device, timeout: float = DEFAULT_TIMEOUT, init_method: str | None = None,
               rank: int | None = None, world: int | None = None) -> None:
    """Join the process group (env:// under torchrun, or the given tcp:// address)."""
    if dist.is_initialized():
        return
    kwargs: dict[str, Any] = {"backend": backend_for(device), "timeout": datetime.timedelta(seconds=timeout)}
    if init_method is not None:
        kwargs |= {"init_method": init_method, "rank": rank, "world_size": world}
    try:
        dist.init_process_group(**kwargs)
    except (RuntimeError, ValueError) as exc:
        raise NnlmError(f"cannot join the process group ({str(exc).splitlines()[0][:160]})") from None


def leave_group() -> None:
    """Destroy the group, after collecting garbage: DDP keeps itself alive in reference cycles, and if
    its reducer (holding gloo work) is only freed at interpreter exit, after the group, the process
    can abort there ("terminate called without an active exception", seen under torchrun)."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def _entry(index: int, world: int, address: str, fn: Callable, args: tuple, errors, timeout: float) -> None:
    """What each local process runs: one thread, join the group, call fn, report a clean error."""
    torch.set_num_threads(1)
    os.environ.update(RANK=str(index), WORLD_SIZE=str(world), LOCAL_RANK=str(index), LOCAL_WORLD_SIZE=str(world))
    try:
        init_group(torch.device("cpu"), timeout, address, index, world)
        fn(*args)
    except NnlmError as exc:
        errors.put((index, str(exc)))
        raise SystemExit(2) from None
    except Exception as exc:  # a collective that failed because a peer died, or a bug: one line + the trace
        errors.put((index, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"))
        traceback.print_exc()
        raise SystemExit(1) from None
    finally:
        leave_group()


def launch_local(fn: Callable, world: int, args: tuple = (), timeout: float = DEFAULT_TIMEOUT) -> None:
    """Run fn(*args) in `world` local processes forming a gloo group; NnlmError if any fails.

    When one process dies, torch.multiprocessing stops the others; the first error is reported."""
    if world < 1:
        raise NnlmError(f"--workers must be at least 1, got {world}")
    ctx = mp.get_context(RANK_START_METHOD)
    if RANK_START_METHOD == "forkserver":
        # torch imported once, in the server; a script's own rank functions (benchmarks/parallel.py) found there
        ctx.set_forkserver_preload(["__main__", "nnlm.neural.parallel.distributed"])
    errors = ctx.SimpleQueue()
    address = f"tcp://127.0.0.1:{free_port()}"
    try:
        mp.start_processes(_entry, args=(world, address, fn, args, errors, timeout), nprocs=world,
                           join=True, start_method=RANK_START_METHOD)
    except mp.ProcessExitedException as exc:
        reported = []
        while not errors.empty():
            reported.append(errors.get())
        nnlm_errors = [msg for _, msg in sorted(reported) if not msg.startswith(("RuntimeError", "DistBackendError"))]
        if nnlm_errors:
            raise NnlmError(nnlm_errors[0]) from None
        exited = exc.exit_code is not None and exc.exit_code >= 0
        how = f"exit code {exc.exit_code}" if exited else f"signal {exc.signal_name}"
        raise NnlmError(f"process {exc.error_index} of {world} stopped ({how})"
                        + (f": {reported[0][1]}" if reported else "") + "; the others were stopped") from None
    except mp.ProcessRaisedException as exc:  # not expected (_entry catches everything), kept one line
        raise NnlmError(f"a training process failed: {str(exc).strip().splitlines()[-1]}") from None


def broadcast_object(value: Any, src: int = 0) -> Any:
    holder = [value]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def all_gather_rows(local: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Every rank's rows, concatenated in rank order, where rank r holds sizes[r] of them (uneven
    shares are padded to the widest for the collective)."""
    padded = local.new_zeros((max(sizes),) + tuple(local.shape[1:]))
    padded[:len(local)] = local
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])


def broadcast_tensors(tensors: dict[str, torch.Tensor] | None, device: torch.device) -> dict[str, torch.Tensor]:
    """Rank 0's named tensors on every rank (names, shapes, dtypes first, then the data)."""
    layout = broadcast_object(
        {k: (tuple(t.shape), t.dtype) for k, t in tensors.items()} if tensors is not None else None)
    out = {}
    for name, (shape, dtype) in layout.items():
        t = (tensors[name].to(device).contiguous() if tensors is not None
             else torch.empty(shape, dtype=dtype, device=device))
        dist.broadcast(t, src=0)
        out[name] = t
    return out
