"""Helpers several test files (and benchmarks/fuzz_cli.py) share: the command line in a subprocess or in this
process, the one-line-error check, a tiny float64 NPLM, gradients against central differences (the full softmax's
among them), and filling a small disk."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path


def run_nnlm(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`nnlm ARGS` in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "nnlm", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def nnlm_cli(capsys, *args: object) -> tuple[int, str, str]:
    """`nnlm ARGS` in this process through `nnlm.cli.main` (no interpreter start-up): (exit code, stdout, stderr),
    read from pytest's `capsys`; argparse's usage errors (SystemExit, e.g. range checks at parse time) count as
    their exit code."""
    from nnlm.cli import main

    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def api_call(srv, path: str, body: dict | bytes | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of one request to a running nnlm server on loopback (GET without a body)."""
    import json
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{srv.port}{path}"
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {} if data is None else {"Content-Type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in lines[0]


def tiny_nplm(h: int = 5, direct: bool = True, v: int = 13, n: int = 4, m: int = 3, dropout: float = 0.0,
              seed: int = 0):
    """A float64 NPLM small enough for exact gradient checks, the same for a given seed."""
    import torch

    from nnlm.neural.net.model import NPLM
    from nnlm.neural.net.model_config import ModelConfig

    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=v, order=n, hidden=h, features=m, direct=direct)
    return NPLM(config, dropout_x=dropout, dropout_h=dropout).double()


def fill_disk(mount: Path, leave: int) -> None:
    """Fill the file system at `mount` with one file until `leave` bytes remain (or it is full)."""
    st = os.statvfs(mount)
    room = st.f_bavail * st.f_frsize - leave
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while room > 0:
            room -= os.write(fd, b"\0" * min(room, 1 << 16))
    except OSError:
        pass
    finally:
        os.close(fd)


def central_differences(net, value, grads: dict, entries: int = 4, seed: int | None = 3) -> None:
    """A few entries of every parameter of `net`: (f(p + e) - f(p - e)) / 2e of the scalar `value()`
    against the analytic gradient `grads[name]` (entries drawn with `seed`; None: torch's global RNG)."""
    import torch

    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            flat = p.view(-1)
            for i in torch.randperm(flat.numel(), generator=generator)[:entries].tolist():
                keep = float(flat[i])
                flat[i] = keep + 1e-6
                up = float(value())
                flat[i] = keep - 1e-6
                down = float(value())
                flat[i] = keep
                numeric = (up - down) / 2e-6
                assert math.isclose(numeric, float(grads[name].view(-1)[i]), rel_tol=1e-4, abs_tol=1e-7), name


def context_batch(vocab: int, order: int, seed: int, rows: int = 6):
    """`rows` random (contexts [rows, order - 1], targets [rows]) of a `vocab`-word net, drawn with `seed`."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (rows, order - 1), generator=gen), torch.randint(0, vocab, (rows,), generator=gen)


def check_full_softmax_gradients(net, vocab: int, order: int) -> None:
    """The autograd gradient of the full softmax's cross-entropy against central differences, on a few entries of
    every parameter of `net` (one batch of `context_batch`)."""
    import torch.nn.functional as F

    ctx, tgt = context_batch(vocab, order, seed=1)

    def value():
        return F.cross_entropy(net(ctx), tgt)

    net.zero_grad()
    value().backward()
    central_differences(net, value, {name: p.grad.clone() for name, p in net.named_parameters()})


def held_model(model, release, seen: list, hold: float = 10.0):
    """The same model whose log_prob records each call's row count in `seen` and waits (at most `hold`
    seconds) for the `release` event before answering: a model kept busy, for the server's queue tests."""
    class Held(type(model)):
        def log_prob(self, contexts, targets):
            seen.append(len(contexts))
            release.wait(hold)
            return model.log_prob(contexts, targets)

    held = object.__new__(Held)
    held.__dict__.update(model.__dict__)
    return held
