"""Numba CPU kernels of the aggregation hot loops, tested equal to the NumPy reference.

``weighted_update`` computes ``out = θ − Σ_k w_k δ_k`` in one pass over the (m, d) update matrix:
threads own blocks of columns; each block of ``out`` stays in cache while four rows of updates at
a time stream through it, so ``θ`` and the updates are read once and ``out`` written once (the
NumPy form ``θ − w @ D`` makes three more passes over d-vectors). The same pass sums each block
of ``out`` so that the caller can check finiteness without reading ``out`` again.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = [
    "row_sq_norms",
    "two_combinations",
    "weighted_sum",
    "weighted_sum_sq_norms",
    "weighted_update",
]

_BLOCK = 4096  # columns per task: 32 KiB of float64 output, resident in L1/L2 across the m rows


@njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def _weighted_update(theta, deltas, w, out, partial, has_theta):
    # Rows are taken as 1-D slices so that LLVM sees unit-stride loops and vectorises them. The
    # flags allow reassociation and FMA only: NaN and infinity keep their meaning, which the
    # finiteness witness in ``partial`` relies on. ``has_theta`` False starts from 0 instead of
    # θ (``theta`` is then not read): the weighted sum, called with −w.
    m, d = deltas.shape
    nblk = (d + _BLOCK - 1) // _BLOCK
    for b in prange(nblk):
        lo = b * _BLOCK
        hi = min(lo + _BLOCK, d)
        n = hi - lo
        o = out[lo:hi]
        if has_theta:
            t = theta[lo:hi]
        else:
            t = o  # not read: the first group below writes o without reading it
        k = 0
        while k + 4 <= m:
            w0, w1, w2, w3 = w[k], w[k + 1], w[k + 2], w[k + 3]
            r0, r1, r2, r3 = (
                deltas[k, lo:hi],
                deltas[k + 1, lo:hi],
                deltas[k + 2, lo:hi],
                deltas[k + 3, lo:hi],
            )
            if k == 0 and has_theta:  # the first group also copies θ: one pass fewer
                for j in range(n):
                    o[j] = t[j] - (w0 * r0[j] + w1 * r1[j] + w2 * r2[j] + w3 * r3[j])
            elif k == 0:
                for j in range(n):
                    o[j] = -(w0 * r0[j] + w1 * r1[j] + w2 * r2[j] + w3 * r3[j])
            else:
                for j in range(n):
                    o[j] -= w0 * r0[j] + w1 * r1[j] + w2 * r2[j] + w3 * r3[j]
            k += 4
        if k == 0:
            for j in range(n):
                o[j] = t[j] if has_theta else 0.0
        if k + 2 <= m:
            w0, w1 = w[k], w[k + 1]
            r0, r1 = deltas[k, lo:hi], deltas[k + 1, lo:hi]
            for j in range(n):
                o[j] -= w0 * r0[j] + w1 * r1[j]
            k += 2
        while k < m:
            wk = w[k]
            r0 = deltas[k, lo:hi]
            for j in range(n):
                o[j] -= wk * r0[j]
            k += 1
        s = 0.0
        for j in range(n):
            s += o[j]
        partial[b] = s


def weighted_update(theta: np.ndarray, deltas: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``θ − Σ_k weights_k δ_k`` for validated, C-contiguous inputs of one float dtype.

    Returns the result and, as a cheap finiteness witness, whether the sum of its entries is
    finite (a NaN or infinity anywhere makes it non-finite; a False may also be an overflow of
    the sum of finite entries, which the caller resolves by a full check).
    """
    out = np.empty_like(theta)
    nblk = (theta.size + _BLOCK - 1) // _BLOCK
    partial = np.empty(nblk, dtype=np.float64)
    _weighted_update(theta, deltas, weights.astype(deltas.dtype), out, partial, True)
    return out, bool(np.isfinite(partial.sum()))


def weighted_sum(weights: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``Σ_k weights_k δ_k`` for a C-contiguous (m, d) ``deltas``, in its dtype: the pass of
    :func:`weighted_update` started from 0 (no d-vector of zeros to allocate and read)."""
    d = deltas.shape[1]
    out = np.empty(d, dtype=deltas.dtype)
    partial = np.empty((d + _BLOCK - 1) // _BLOCK, dtype=np.float64)
    _weighted_update(out, deltas, -weights.astype(deltas.dtype), out, partial, False)
    return out


@njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def _two_combinations(w0, w1, rows, out0, out1):
    # Four rows at a time stream through the two output blocks, which stay in cache (as in
    # ``_weighted_update``): one pass over ``rows``.
    m, d = rows.shape
    nblk = (d + _BLOCK - 1) // _BLOCK
    for b in prange(nblk):
        lo = b * _BLOCK
        hi = min(lo + _BLOCK, d)
        n = hi - lo
        o0 = out0[lo:hi]
        o1 = out1[lo:hi]
        for j in range(n):
            o0[j] = 0.0
            o1[j] = 0.0
        k = 0
        while k + 4 <= m:
            a0, a1, a2, a3 = w0[k], w0[k + 1], w0[k + 2], w0[k + 3]
            c0, c1, c2, c3 = w1[k], w1[k + 1], w1[k + 2], w1[k + 3]
            r0, r1, r2, r3 = (
                rows[k, lo:hi],
                rows[k + 1, lo:hi],
                rows[k + 2, lo:hi],
                rows[k + 3, lo:hi],
            )
            for j in range(n):
                x0, x1, x2, x3 = r0[j], r1[j], r2[j], r3[j]
                o0[j] += a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3
                o1[j] += c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3
            k += 4
        if k + 2 <= m:
            a0, a1, c0, c1 = w0[k], w0[k + 1], w1[k], w1[k + 1]
            r0, r1 = rows[k, lo:hi], rows[k + 1, lo:hi]
            for j in range(n):
                x0, x1 = r0[j], r1[j]
                o0[j] += a0 * x0 + a1 * x1
                o1[j] += c0 * x0 + c1 * x1
            k += 2
        if k < m:
            a = w0[k]
            c = w1[k]
            r = rows[k, lo:hi]
            for j in range(n):
                o0[j] += a * r[j]
                o1[j] += c * r[j]


def two_combinations(weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``weights @ rows`` for a (2, m) float64 ``weights`` and a C-contiguous (m, d) float64
    ``rows``, in one pass over ``rows`` (BLAS reads a (2, m) × (m, d) product's right factor
    about twice as slowly as a plain stream)."""
    out = np.empty((2, rows.shape[1]))
    _two_combinations(weights[0].copy(), weights[1].copy(), rows, out[0], out[1])
    return out


@njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def _row_sq_norms(D, partial):
    # Threads own blocks of columns (as in ``_weighted_update``), so that m = 1 still uses every
    # core; each block's partial sums are kept and added in block order: deterministic.
    m, d = D.shape
    nblk = (d + _BLOCK - 1) // _BLOCK
    for b in prange(nblk):
        lo = b * _BLOCK
        hi = min(lo + _BLOCK, d)
        for k in range(m):
            r = D[k, lo:hi]
            s = 0.0
            for j in range(hi - lo):
                x = np.float64(r[j])
                s += x * x
            partial[k, b] = s


def row_sq_norms(deltas: np.ndarray) -> np.ndarray:
    """‖δ_k‖² of every row of a C-contiguous (m, d) float32/float64 array, in float64, shape
    (m,): one parallel pass."""
    m, d = deltas.shape
    nblk = (d + _BLOCK - 1) // _BLOCK
    partial = np.empty((m, nblk))
    _row_sq_norms(deltas, partial)
    return partial.sum(axis=1)


@njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def _weighted_sum_sq_norms(D, w, out, partial):
    # One pass: each column block of ``out`` stays in cache while the m rows stream through it,
    # and every row's squares over the block are summed on the way.
    m, d = D.shape
    nblk = (d + _BLOCK - 1) // _BLOCK
    for b in prange(nblk):
        lo = b * _BLOCK
        hi = min(lo + _BLOCK, d)
        n = hi - lo
        o = out[lo:hi]
        for j in range(n):
            o[j] = 0.0
        for k in range(m):
            r = D[k, lo:hi]
            wk = w[k]
            s = 0.0
            for j in range(n):
                x = r[j]
                o[j] += wk * x
                x64 = np.float64(x)
                s += x64 * x64
            partial[k, b] = s


def weighted_sum_sq_norms(weights: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_k w_k δ_k in the dtype of ``deltas``, ‖δ_k‖² in float64) of a C-contiguous (m, d)
    ``deltas``, in one parallel pass over it (q-FedAvg's fused reduction)."""
    m, d = deltas.shape
    nblk = (d + _BLOCK - 1) // _BLOCK
    out = np.empty(d, dtype=deltas.dtype)
    partial = np.empty((m, nblk))
    _weighted_sum_sq_norms(deltas, weights.astype(deltas.dtype), out, partial)
    return out, partial.sum(axis=1)
