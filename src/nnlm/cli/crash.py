"""What `nnlm` prints when a command fails in a way no check foresaw: one line, never a traceback
(the trace goes to a crash log; NNLM_DEBUG=1 lets it through)."""
from __future__ import annotations

import errno
import os
import sys


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0][:200] if text else "") or type(exc).__name__


def report_unexpected(exc: Exception) -> int:
    """An exception no check turned into an NnlmError: out of memory and OS errors the user can act on
    are one line, exit 2; anything else is an internal error, exit 1, with the trace kept in a log file."""
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "not enough memory" in str(exc):
        print(f"nnlm: error: out of memory ({first_line(exc)}): use smaller options or a machine with more memory",
              file=sys.stderr)
        return 2
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        reason = "no space left on device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
        print(f"nnlm: error: cannot access{where}: {reason or first_line(exc)}", file=sys.stderr)
        return 2
    import tempfile
    import traceback

    trace = "".join(traceback.format_exception(exc))
    try:
        fd, log = tempfile.mkstemp(prefix="nnlm-crash-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"nnlm {' '.join(sys.argv[1:])}\n{trace}")
        where = f"the full trace is in {log}"
    except OSError:
        where = "run again with NNLM_DEBUG=1 to see the full trace"
    print(f"nnlm: internal error: {type(exc).__name__}: {first_line(exc)} ({where}; please report it)",
          file=sys.stderr)
    return 1
