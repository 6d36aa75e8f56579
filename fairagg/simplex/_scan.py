"""Compiled scans of a whole array (is every entry finite, the largest magnitude), shared by the
simplex QP's kernels and by AAgFF-S's FTRL kernels in [`fairagg.online`][fairagg.online]: part of
the package's internal interface (with the ``_solve`` module), imported by both.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, fastmath={"reassoc"})
def all_finite(v):  # pragma: no cover - compiled
    """Whether every entry of an array is finite: Σ v·0 is 0, or NaN if one is not.

    Reassociation (no finite-math flags, so v·0 is not folded to 0) lets the sum vectorise; the
    answer does not depend on the order of the sum. ``v.flat``, not ``v.ravel()``: numba compiles
    ravel as a function of its own (0.2 s of a process's first solve) and the flat iterator as
    a plain loop, as fast on a contiguous array.
    """
    s = 0.0
    for e in v.flat:
        s += e * 0.0
    return s == 0.0


@numba.njit(cache=True)
def absmax(v):  # pragma: no cover - compiled
    """max |v| over a 1-D array (0 if empty); NaN entries are skipped.

    Four independent running maxima: a single one is a loop-carried compare chain that the
    compiler cannot vectorise, and this runs on every K×K matrix the QP sees (its flat view).
    The maxima are combined by comparisons, not by the builtin ``max``, which numba compiles as
    a function of its own (the same values: none is NaN).
    """
    n = v.shape[0]
    m0 = m1 = m2 = m3 = 0.0
    i = 0
    while i + 4 <= n:
        a0 = abs(v[i])
        a1 = abs(v[i + 1])
        a2 = abs(v[i + 2])
        a3 = abs(v[i + 3])
        m0 = a0 if a0 > m0 else m0
        m1 = a1 if a1 > m1 else m1
        m2 = a2 if a2 > m2 else m2
        m3 = a3 if a3 > m3 else m3
        i += 4
    while i < n:
        a0 = abs(v[i])
        m0 = a0 if a0 > m0 else m0
        i += 1
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    return m2 if m2 > m0 else m0
