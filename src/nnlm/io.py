"""Safe file writes and reads: nothing half-written, nothing nnlm did not write destroyed, no hangs.

Writes: a regular file (or a new name) is written to a temporary file beside it and renamed over
it, so a crash or a full disk leaves the old file. A symlink is written through (its target is
replaced, the link stays); a device node or a FIFO is written into, never replaced by a file.
A directory given as an output file is refused. A full disk is one line naming the path.

nnlm marks each file it writes with the extended attribute `user.nnlm.written`, which leaves the
file's format alone (word2vec text, ARPA); a file without the mark (also on a file system without
user attributes, or copied by a tool that drops them) counts as not nnlm's. The commands' outputs are
checked against their inputs and against that mark before any work by `nnlm.output_guard`.

Reads: inputs are checked for what they are before they are opened, so a FIFO or a device given
as a model file is refused instead of blocking forever or filling memory; text inputs are read
with a size cap.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from nnlm.errors import NnlmError

TEXT_LIMIT = int(os.environ.get("NNLM_MAX_INPUT_BYTES") or 2 << 30)  # text to score or a word list
JSON_LIMIT = 256 << 20  # run.json, state.json, vocab.json, config.json: far above any real one
_CHUNK = 1 << 20
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


WRITTEN_MARK = "user.nnlm.written"  # extended attribute on every regular file nnlm writes


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def kind_of(mode: int) -> str:
    """A file type in words, for messages."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "named pipe (FIFO)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"


def write_error(path: Path | str, exc: BaseException) -> NnlmError:
    """One line for a failed write: a full disk says so (the previous file is untouched)."""
    code = getattr(exc, "errno", None)
    text = str(exc)
    if code in NO_SPACE or "No space left" in text or "os error 28" in text:
        return NnlmError(f"cannot write {path}: no space left on device (nothing was replaced)")
    reason = getattr(exc, "strerror", None) or (text.splitlines()[0][:160] if text else type(exc).__name__)
    return NnlmError(f"cannot write {path}: {reason}")


def check_output(path: Path | str) -> None:
    """Refuse an output file name that cannot be written (a directory, a socket) before any work is done."""
    _output(Path(path))


def require_parent(path: Path | str) -> None:
    """Refuse an output whose directory does not exist (a typo in it should not create a tree)."""
    parent = Path(path).parent
    if not parent.is_dir():
        raise NnlmError(f"the directory {parent} (of {path}) does not exist: create it first, or give another path")


def _output(path: Path) -> tuple[Path, os.stat_result | None]:
    """Where a write to `path` lands (symlinks followed) and what is there now (None: nothing)."""
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(path)  # through links, /proc/self/fd/N ones too (their realpath is no usable name)
    except FileNotFoundError:
        return real, None
    except OSError as exc:
        raise NnlmError(f"cannot write {path}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise NnlmError(f"{path} is a directory; give a file name to write")
    if stat.S_ISSOCK(st.st_mode):
        raise NnlmError(f"{path} is a socket; give a file name to write")
    return (real if stat.S_ISREG(st.st_mode) else path), st


def _copy_into(tmp: Path, target: Path) -> None:
    """Write the finished temporary file into a device or FIFO (which is never replaced)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NnlmError(f"cannot write {target}: no process is reading that FIFO") from None
        raise write_error(target, exc) from None
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        with open(tmp, "rb") as src, os.fdopen(fd, "wb", closefd=False) as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
    except OSError as exc:
        raise write_error(target, exc) from None
    finally:
        os.close(fd)


# A temporary's name says which process made it: `.NAME.HOST_PID.XXXXXX.tmp`, so that one left by a process
# that was killed (kill -9: no `finally` ran) is recognised and removed the next time NAME is written,
# while those of live writers, and of other hosts sharing the directory, are left alone. It carries nnlm's
# mark from its creation on, and nothing without the mark is removed: a user's file that happens to have
# such a name stays (where the file system keeps no marks, killed writers' temporaries stay too).
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _temp_prefix(name: str) -> str:
    return f".{name}.{_HOST}_{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (EPERM: alive, another user's)
        return True
    return True


def remove_abandoned_temps(parent: Path, name: str) -> list[Path]:
    """Delete the temporaries that a killed process of this host left beside `name` in `parent` (files of
    `atomic_path`, directories of `atomic_dir` / `staged_directory`); returns them."""
    start, removed = f".{name}.", []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(start) and entry.name.endswith(".tmp")):
            continue
        host, _, pid = entry.name[len(start):].split(".", 1)[0].rpartition("_")
        if host != _HOST or not pid.isdigit() or _alive(int(pid)) or not _marked(entry.path):
            continue
        with suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside where `path` lands; on success it becomes `path` (see module doc)."""
    path = Path(path)
    target, st = _output(path)
    special = st is not None and not stat.S_ISREG(st.st_mode)
    parent = Path(tempfile.gettempdir()) if special else target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_temps(parent, target.name)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=_temp_prefix(target.name), suffix=".tmp")
        os.close(fd)
        mark_written(tmp)
    except OSError as exc:
        raise write_error(path, exc) from None
    tmp_path = Path(tmp)
    try:
        try:
            yield tmp_path
        except Exception as exc:  # safetensors reports a full disk as its own SafetensorError
            if isinstance(exc, OSError) or "No space left" in str(exc) or "os error 28" in str(exc):
                raise write_error(path, exc) from None
            raise
        if special:
            _copy_into(tmp_path, target)
            return
        # mkstemp (and some writers, e.g. safetensors) make 0600: keep an existing file's mode, else the umask's
        os.chmod(tmp_path, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        mark_written(tmp_path)
        try:
            with open(tmp_path, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp_path, target)
        except OSError as exc:
            raise write_error(path, exc) from None
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _sibling_temp_directory(path: Path) -> Path:
    """An empty hidden directory beside `path` (same file system: it can become `path` by rename), with an
    ordinary directory's mode (mkdtemp makes 0700)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_temps(path.parent, path.name)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temp_prefix(path.name), suffix=".tmp"))
    except OSError as exc:
        raise write_error(path, exc) from None
    os.chmod(tmp, 0o777 & ~_umask())
    mark_written(tmp)  # (so that a killed writer's is known for nnlm's: remove_abandoned_temps)
    return tmp


@contextmanager
def atomic_dir(path: Path | str, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; on success it becomes `path` in one rename.

    If `path` exists meanwhile: with replace=False another writer won and ours is dropped (caches);
    with replace=True the old directory is swapped out and removed (a user saving again: the caller
    checks first that it is nnlm's own, see `nnlm.ngram.store`)."""
    path = Path(path)
    tmp = _sibling_temp_directory(path)
    try:
        try:
            yield tmp
        except OSError as exc:
            raise write_error(path, exc) from None
        if replace and path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
            return
        try:
            os.replace(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
            # Another process finished the same directory first: keep theirs, drop ours.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def mark_written(path: Path | str) -> None:
    """Record on `path` that nnlm wrote it (best effort: a file system without user attributes keeps
    no mark, and such a file is then refused as not nnlm's the next time, the safe side)."""
    with suppress(OSError):
        os.setxattr(path, WRITTEN_MARK, b"1", follow_symlinks=False)


def _marked(path: Path | str, follow_symlinks: bool = False) -> bool:
    """Whether `path` (a file or a directory; a link itself unless `follow_symlinks`) carries nnlm's mark."""
    try:
        return os.getxattr(path, WRITTEN_MARK, follow_symlinks=follow_symlinks) == b"1"
    except OSError:
        return False


def written_by_nnlm(path: Path | str) -> bool:
    """Whether the regular file at `path` (links followed) carries the mark nnlm sets on what it writes."""
    return _marked(path, follow_symlinks=True)


@contextmanager
def staged_directory(path: Path | str) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path` to write a command's several outputs into; when
    the block succeeds they move into `path` (a new directory: one rename; an existing one: each file
    replaced by rename, other files there kept). A failure leaves `path` as it was and no temporary."""
    path = Path(path)
    tmp = _sibling_temp_directory(path)
    try:
        try:
            yield tmp
        except OSError as exc:
            raise write_error(path, exc) from None
        try:
            if not os.path.lexists(path):
                os.replace(tmp, path)
                return
            for item in sorted(tmp.iterdir()):
                os.replace(item, path / item.name)
        except OSError as exc:
            raise write_error(path, exc) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete the temporary files `atomic_path` left in `directory` when a process was killed mid-write
    (only files with nnlm's mark)."""
    removed = []
    for p in directory.glob(".*.tmp"):
        if p.is_file() and not p.is_symlink() and _marked(p):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


# --- reading ---------------------------------------------------------------------------------

def require_regular(path: Path | str, what: str) -> os.stat_result:
    """The stat of `path` if it is a regular file; else one line saying what it is (nothing is opened)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise NnlmError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise NnlmError(f"{what} {path} is a {kind_of(st.st_mode)}, not a regular file")
    return st


def _read_capped(fh: BinaryIO, source: str, limit: int, binary_ok: bool) -> bytes:
    chunks, size = [], 0
    while chunk := fh.read(_CHUNK):
        if not binary_ok and b"\x00" in chunk:
            raise NnlmError(f"{source} looks like a binary file (it holds NUL bytes), not UTF-8 text")
        size += len(chunk)
        if size > limit:
            raise NnlmError(f"{source} is larger than {limit:,} bytes; split it (or raise NNLM_MAX_INPUT_BYTES)")
        chunks.append(chunk)
    return b"".join(chunks)


def read_input(source: Path | str, what: str, limit: int = TEXT_LIMIT, streams: bool = False,
               binary_ok: bool = False) -> bytes:
    """The bytes of an input file, at most `limit` of them. `streams`: also stdin ('-') and pipes
    (opened without blocking: `<(command)` works, a FIFO nobody writes to reads as empty).
    Devices, sockets and directories are refused without opening them."""
    if streams and str(source) == "-":
        try:
            return _read_capped(sys.stdin.buffer, "standard input", limit, binary_ok)
        except OSError as exc:
            raise NnlmError(f"cannot read standard input: {exc.strerror}") from None
    try:
        st = os.stat(source)
    except OSError as exc:
        raise NnlmError(f"cannot read {what} {source}: {exc.strerror}") from None
    pipe = stat.S_ISFIFO(st.st_mode)
    if not (stat.S_ISREG(st.st_mode) or (streams and pipe)):
        raise NnlmError(f"{what} {source} is a {kind_of(st.st_mode)}, not a regular file")
    try:
        fd = os.open(source, os.O_RDONLY | (os.O_NONBLOCK if pipe else 0))
        if pipe:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            return _read_capped(fh, f"{what} {source}", limit, binary_ok)
    except OSError as exc:
        raise NnlmError(f"cannot read {what} {source}: {exc.strerror}") from None
