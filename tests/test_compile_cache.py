"""numba always has somewhere to cache nnlm's kernels (nnlm.compile_cache): beside the sources, the user's
cache directory, or else a directory of the temporary directory; a NUMBA_CACHE_DIR the user set is kept."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from nnlm.compile_cache import cache_dir_needed


def test_numba_caches_where_it_can_else_in_the_temporary_directory(tmp_path):
    package = str(tmp_path / "nnlm")
    home_cache = str(tmp_path / "cache")
    environ = {"XDG_CACHE_HOME": home_cache}
    assert cache_dir_needed(package, environ, writable=lambda path: True) is None
    beside_sources_only = cache_dir_needed(package, environ, writable=lambda path: path.startswith(package))
    assert beside_sources_only is None
    user_cache_only = cache_dir_needed(package, environ, writable=lambda path: path.startswith(home_cache))
    assert user_cache_only is None
    chosen = cache_dir_needed(package, environ, writable=lambda path: False)
    assert chosen is not None and chosen.startswith(tempfile.gettempdir())
    assert cache_dir_needed(package, {"NUMBA_CACHE_DIR": "/mine"}, writable=lambda path: False) is None


def test_a_fresh_process_scores_with_a_chosen_cache_dir(tmp_path):
    """With the cache directory numba is pointed at, a fresh process defines and runs the kernels."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    code = ("import numpy as np\n"
            "from nnlm.ngram.hash_table import HashMap\n"
            "print(HashMap(np.array([3, 5]), np.array([7, 9])).get(np.array([5, 4])).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[9, 0]"
    assert any((tmp_path / "numba").rglob("*.nbi"))  # cached there
