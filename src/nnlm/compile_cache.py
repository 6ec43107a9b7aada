"""Where numba keeps nnlm's compiled kernels between processes, so that a fresh process loads them instead
of compiling them (the query engine's first call: ~0.1 s from the cache, seconds without it).

numba caches a `cache=True` function beside its source (`__pycache__`) or, where that is not writable (a
package installed by another user), in the user's cache directory (~/.cache/numba); where neither is
writable it refuses to define the function at all, so importing the module would fail. `ensure_writable_cache`
(run when nnlm is imported, before any kernel is defined) then points numba at a directory of the
temporary directory instead: the kernels are still cached, and nothing fails. NUMBA_CACHE_DIR set by the
user is left as it is.
"""
from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping


def _writable(path: str) -> bool:
    """Whether files can be made in `path` (or in its nearest existing parent, where it would be made)."""
    while path and not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return bool(path) and os.access(path, os.W_OK | os.X_OK)


def cache_dir_needed(package_dir: str, environ: MutableMapping[str, str],
                     writable: Callable[[str], bool] = _writable) -> str | None:
    """The NUMBA_CACHE_DIR to set, or None where numba can cache by itself (beside the sources, or in the
    user's cache directory) or the user chose one."""
    if environ.get("NUMBA_CACHE_DIR"):
        return None
    if writable(os.path.join(package_dir, "ngram", "__pycache__")):
        return None
    user_cache = os.path.join(environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "numba")
    if writable(user_cache):
        return None
    import tempfile  # (only here: nnlm's import, which runs this, stays light)

    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"nnlm-numba-cache-{uid}")


def ensure_writable_cache() -> None:
    """Set NUMBA_CACHE_DIR for this process where numba would have nowhere to cache (see the module docstring)."""
    chosen = cache_dir_needed(os.path.dirname(os.path.abspath(__file__)), os.environ)
    if chosen is not None:
        os.environ["NUMBA_CACHE_DIR"] = chosen
