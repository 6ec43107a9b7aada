"""Temporaries a killed writer left (kill -9 runs no `finally`) are removed the next time the same output is
written; those of live writers and of other hosts are left alone (nnlm.io.remove_abandoned_temps)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nnlm import io

KILLED_MID_WRITE = """
import os, signal, sys
from nnlm.io import atomic_path, staged_directory
out = sys.argv[1]
writer = staged_directory(out) if sys.argv[2] == "dir" else atomic_path(out)
with writer as tmp:
    if sys.argv[2] == "dir":
        (tmp / "part.txt").write_text("half")
    else:
        tmp.write_text("half")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def left_behind(tmp_path: Path, name: str) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".{name}.") and p.name.endswith(".tmp"))


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_killed_writers_temporary_goes_at_the_next_write(tmp_path, kind):
    out = tmp_path / ("scores.txt" if kind == "file" else "rescored")
    env = {**os.environ, "PYTHONPATH": str(Path(io.__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(out), kind], env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert len(left_behind(tmp_path, out.name)) == 1 and not out.exists()
    if kind == "dir":
        with io.staged_directory(out) as tmp:
            (tmp / "part.txt").write_text("whole")
        assert (out / "part.txt").read_text() == "whole"
    else:
        with io.atomic_path(out) as tmp:
            tmp.write_text("whole")
        assert out.read_text() == "whole"
    assert left_behind(tmp_path, out.name) == []


def test_live_writers_and_other_hosts_keep_theirs(tmp_path):
    mine = tmp_path / f".out.txt.{io._HOST}_{os.getpid()}.abc123.tmp"  # this process: alive
    other_host = tmp_path / ".out.txt.elsewhere_1.abc123.tmp"          # pid 1 here, but another machine's
    old_style = tmp_path / ".out.txt.k1ll3d.tmp"                       # no owner in the name
    for p in (mine, other_host, old_style):
        p.write_text("x")
    assert io.remove_abandoned_temps(tmp_path, "out.txt") == []
    assert all(p.exists() for p in (mine, other_host, old_style))
    assert io.remove_abandoned_temps(tmp_path, "other.txt") == []


def test_a_users_file_with_a_temporarys_name_stays(tmp_path):
    """A dead pid of this host in the name is not enough: the file must carry the mark nnlm puts on its
    temporaries when it makes them."""
    dead = 2 ** 22 + 12345  # above any pid_max default: no such process
    users = tmp_path / f".out.txt.{io._HOST}_{dead}.abc123.tmp"
    users.write_text("mine")
    ours = tmp_path / f".out.txt.{io._HOST}_{dead}.def456.tmp"
    ours.write_text("half")
    io.mark_written(ours)
    if not io._marked(ours):
        pytest.skip("this file system keeps no user attributes")
    assert io.remove_abandoned_temps(tmp_path, "out.txt") == [ours]
    assert users.read_text() == "mine" and not ours.exists()
    with io.atomic_path(tmp_path / "out.txt") as tmp:
        assert io._marked(tmp)  # marked from its creation on
        tmp.write_text("x")
    assert users.exists()
