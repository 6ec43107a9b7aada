"""Compiled moves of the exchange algorithm (nnlm.wordclasses.exchange): one word's gain for every class and
its move, in numba loops over the word's sparse counts with each class.

Why: the NumPy path spends one Python step and about thirty array operations (each a temporary of
classes x touched classes, two logs per cell) per word; Brown train into 2000 classes took 2.3 min.
Here every count is an integer (int64), so the class-bigram matrix is updated exactly, and
f(x) = x log x of a count is read from a table made by the NumPy path's own formula.

The gains are summed in another order than the NumPy path's, so they may differ from its gains by
rounding. A word's decision is taken here only when rounding cannot change it: each gain carries a
bound on its rounding error in either path (`_error_bound`), and the kernel stops at a word whose
best class is not ahead of the runner-up, or whose gain over staying is not clear of the NumPy path's
threshold (1e-9), by more than the two bounds. The caller then decides that word with the NumPy
path's formula on the same integer counts (the same floats, so the same decision) and places it
with `place_word`. So the classes are the NumPy path's, word for word.

The kernels run without numba's reference counting and allocate nothing (as the query engine's):
scratch arrays come from the caller.
"""
from __future__ import annotations

import math

import numba
import numpy as np

KERNEL = {"cache": True, "_nrt": False}
EPS = np.finfo(np.float64).eps
THRESHOLD = 1e-9  # a word moves only if its best class gains more than this over staying (the NumPy path's rule)
TABLE_LIMIT = 2**23  # f(n) tabled up to here (64 MB); larger counts (corpora of over 8 M tokens) take a log


def xlogx_table(largest: int) -> np.ndarray:
    """f(n) = n log n for n = 0 .. largest (at most TABLE_LIMIT), by the NumPy path's formula (0 log 0 = 0)."""
    x = np.arange(min(largest, TABLE_LIMIT) + 1, dtype=np.float64)
    return x * np.log(np.maximum(x, 1.0))


@numba.njit(inline="always")
def _f(xl, x):
    """f(x) = x log x of a count x >= 0."""
    if x < len(xl):
        return xl[x]
    return x * math.log(x)


@numba.njit(inline="always")
def _gather(w, ptr, word, count, classes, into, touched):
    """into[class] = count of w's neighbours (successors or predecessors) in each class; the classes
    touched listed in `touched`; returns how many."""
    n = 0
    for j in range(ptr[w], ptr[w + 1]):
        c = classes[word[j]]
        if into[c] == 0:
            touched[n] = c
            n += 1
        into[c] += count[j]
    return n


@numba.njit(inline="always")
def _shift(w, g, sign, m, mt, left, right, r, lc, dr, nr, dl, nl, self_count, left_total, right_total):
    """Take w out of class g (sign -1) or put it in (+1): its row and column of counts in m and mt."""
    for j in range(nr):
        d = dr[j]
        m[g, d] += sign * r[d]
        mt[d, g] += sign * r[d]
    for j in range(nl):
        d = dl[j]
        m[d, g] += sign * lc[d]
        mt[g, d] += sign * lc[d]
    m[g, g] += sign * self_count[w]
    mt[g, g] += sign * self_count[w]
    left[g] += sign * left_total[w]
    right[g] += sign * right_total[w]


@numba.njit(inline="always")
def _clear(r, lc, dr, nr, dl, nl):
    for j in range(nr):
        r[dr[j]] = 0
    for j in range(nl):
        lc[dl[j]] = 0


@numba.njit(inline="always")
def _error_bound(nr, nl, log_largest, left_b, right_b, r_b, lc_b, s, lw, rw):
    """A bound on the rounding errors of class b's gain in the two paths together. Each path sums at
    most 4 (nr + nl) + 8 values f(x) with signs (this one: f(cell + r) - f(cell) - f(r) per non-zero cell
    and f(r) once; the NumPy path: fewer), every x at most the corpus's bigram count T, so |f(x)| <= x log T,
    and in either path their arguments add up to at most 4 (N(b, .) + N(., b) + N(w, .) + N(., w) + N(b, b)
    + w's counts with b) =: 4 S. A sum of n values rounds by at most (n - 1) eps times the sum of their
    sizes, whatever the order, and each f(x) is off by at most 2 eps of its size (log within an ulp):
    so each path is off by less than (4 (nr + nl) + 9) 4 S eps log T, both by less than what this returns."""
    size = log_largest * 4.0 * (2.0 * left_b + right_b + lw + rw + r_b + lc_b + s + 1.0)  # N(b, b) <= N(b, .)
    return 8.0 * EPS * (nr + nl + 16.0) * size


@numba.njit(inline="always")
def _add_cells(gain, cells, n, fn, xl, whole):
    """gain[b] += f(cells[b] + n) - f(cells[b]) - f(n) for every b: exactly 0 where cells[b] = 0. With
    the whole table (whole: every count of the corpus in it), without a branch, so LLVM vectorizes it."""
    if whole:
        for b in range(len(cells)):
            x = cells[b]
            gain[b] += xl[x + n] - xl[x] - fn
    else:
        for b in range(len(cells)):
            x = cells[b]
            if x != 0:
                gain[b] += _f(xl, x + n) - _f(xl, x) - fn


@numba.njit(**KERNEL)
def exchange_words(order, start, stop, classes, size, m, mt, left, right,
                   succ_ptr, succ_word, succ_count, pred_ptr, pred_word, pred_count,
                   self_count, left_total, right_total, xl, largest, log_largest,
                   r, lc, dr, dl, gain, bound, state):
    """Visit order[start:stop]; move each word to its best class. Returns the position of the first word
    whose decision rounding could change (left out of its class, its counts in r, lc, dr[:state[1]],
    dl[:state[2]], for the caller to decide), or stop. state[0] counts the words moved."""
    k = len(size)
    whole = len(xl) > largest
    for i in range(start, stop):
        w = order[i]
        a = classes[w]
        if size[a] == 1:  # keep every class non-empty
            continue
        nr = _gather(w, succ_ptr, succ_word, succ_count, classes, r, dr)
        nl = _gather(w, pred_ptr, pred_word, pred_count, classes, lc, dl)
        _shift(w, a, -1, m, mt, left, right, r, lc, dr, nr, dl, nl, self_count, left_total, right_total)
        s, lw, rw = self_count[w], left_total[w], right_total[w]
        # gain of putting w into b: f(cell + change) - f(cell) over the cells it changes, minus the same
        # for the class totals. A cell m[b, d] = 0 changes by f(r[d]), whatever b: summed once in `base`.
        base = 0.0
        for b in range(k):
            gain[b] = 0.0
        for j in range(nr):
            d = dr[j]
            rd = r[d]
            xr = _f(xl, rd)
            base += xr
            _add_cells(gain, mt[d], rd, xr, xl, whole)  # m[:, d]
        for j in range(nl):
            d = dl[j]
            ld = lc[d]
            xr = _f(xl, ld)
            base += xr
            _add_cells(gain, m[d], ld, xr, xl, whole)  # m[d, :]
        # the (b, b) cell takes r[b] + lc[b] + s at once, not in two parts: only where b is touched
        # from both sides, or everywhere if w follows itself
        if s > 0:
            for b in range(k):
                x = m[b, b]
                gain[b] += _f(xl, x + r[b] + lc[b] + s) - _f(xl, x + r[b]) - _f(xl, x + lc[b]) + _f(xl, x)
        else:
            for j in range(nr):
                b = dr[j]
                if lc[b] != 0:
                    x = m[b, b]
                    gain[b] += _f(xl, x + r[b] + lc[b]) - _f(xl, x + r[b]) - _f(xl, x + lc[b]) + _f(xl, x)
        best, best_gain, reach = 0, -np.inf, -np.inf  # reach: the largest gain another class might have
        for b in range(k):
            lb, rb = left[b], right[b]
            g = base + gain[b] - (_f(xl, lb + lw) - _f(xl, lb) + _f(xl, rb + rw) - _f(xl, rb))
            gain[b] = g
            e = _error_bound(nr, nl, log_largest, lb, rb, r[b], lc[b], s, lw, rw)  # no m[b, b]: a cache miss each
            bound[b] = e
            if g > best_gain:
                best, best_gain = b, g
            if g + e > reach and b != a:
                reach = g + e
        stay = gain[a] + THRESHOLD
        slack = bound[a] + 4.0 * EPS * (abs(stay) + 1.0)
        if reach < stay - slack:  # no other class can beat staying by the threshold
            b = a
        elif best_gain - bound[best] > stay + slack:  # moving, certainly: to `best` if no class might tie it
            runner_up = -np.inf
            for c in range(k):
                if c != best and gain[c] + bound[c] > runner_up:
                    runner_up = gain[c] + bound[c]
            if runner_up >= best_gain - bound[best]:
                state[1], state[2] = nr, nl
                return i
            b = best
        else:
            state[1], state[2] = nr, nl
            return i
        state[1], state[2] = nr, nl
        place_word(w, b, classes, size, m, mt, left, right, self_count, left_total, right_total, r, lc, dr, dl, state)
    return stop


@numba.njit(**KERNEL)
def place_word(w, b, classes, size, m, mt, left, right, self_count, left_total, right_total, r, lc, dr, dl, state):
    """Put w, which `exchange_words` left out of its class, into class b (the caller's decision)."""
    nr, nl = state[1], state[2]
    a = classes[w]
    _shift(w, b, 1, m, mt, left, right, r, lc, dr, nr, dl, nl, self_count, left_total, right_total)
    _clear(r, lc, dr, nr, dl, nl)
    if b != a:
        classes[w] = b
        size[a] -= 1
        size[b] += 1
        state[0] += 1
