"""Numba CPU kernels of the aggregation hot loops, tested equal to the NumPy reference.

``weighted_update`` computes ``out = θ − Σ_k w_k δ_k`` in one pass over the (m, d) update matrix:
threads own blocks of columns; each block of ``out`` stays in cache while four rows of updates at
a time stream through it, so ``θ`` and the updates are read once and ``out`` written once (the
NumPy form ``θ − w @ D`` makes three more passes over d-vectors). The same pass sums each block
of ``out`` so that the caller can check finiteness without reading ``out`` again.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit

from ..models._parallel import run_tasks, threads_for
from ._guard import kernel_arrays, same_length

__all__ = [
    "gram",
    "row_sq_norms",
    "two_combinations",
    "weighted_sum",
    "weighted_sum_sq_norms",
    "weighted_update",
]

_BLOCK = 4096  # columns per task at most: 32 KiB of float64 output, resident in L1/L2 across rows
_MIN_BLOCK = 512


def _block_for(d: int) -> int:
    """Columns per task: at most ``_BLOCK``, and small enough that d splits into at least 16
    tasks (a multiple of 64 columns, at least 512), so that d = 10⁴ still keeps every core of a
    small machine busy (3 tasks of 4096 leave one of 2 threads idle a third of the time). It
    depends on d only, so results do not depend on the thread count."""
    return min(_BLOCK, max(_MIN_BLOCK, -(-d // (16 * 64)) * 64))


#: Multiply-adds per task at least when a kernel's blocks are shared between threads: a task
#: (one call of a compiled kernel over a range of blocks) costs about 5 µs to hand out, 2 % of
#: the 250 µs a weighted sum takes to stream 2^20 float64 updates on one core here. With 2^18
#: the (100, 10⁶) weighted sum read at 0.79 of the bandwidth probe, with 2^20 at 0.83-0.90.
_TASK_MACS = 2**20


def _share(kernel, nblk: int, macs: int) -> None:
    """Run ``kernel(lo, hi)`` over the blocks ``0 .. nblk - 1``: in one call on the calling
    thread below ``models._parallel.MIN_PARALLEL_MACS`` multiply-adds, else as tasks of
    consecutive blocks (at least ``_TASK_MACS`` each) on the threads of
    :mod:`fairagg.models._parallel`, which take the next task when they finish one (a thread
    slowed by another process takes fewer). Every block is computed alike either way, so the
    result does not depend on the thread count."""
    threads = threads_for(macs)
    if threads == 1 or nblk <= 1:
        kernel(0, nblk)
        return
    per = max(1, -(-_TASK_MACS * nblk // max(macs, 1)))  # blocks per task
    starts = list(range(0, nblk, per))
    run_tasks(lambda lo: kernel(lo, min(lo + per, nblk)), starts, threads)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _weighted_update(theta, deltas, w, out, partial, has_theta, block, b_lo, b_hi):
    # Rows are taken as 1-D slices so that LLVM sees unit-stride loops and vectorises them. The
    # flags allow reassociation and FMA only: NaN and infinity keep their meaning, which the
    # finiteness witness in ``partial`` relies on. ``has_theta`` False starts from 0 instead of
    # θ (``theta`` is then not read): the weighted sum, called with −w.
    m, d = deltas.shape
    for b in range(b_lo, b_hi):
        lo = b * block
        hi = min(lo + block, d)
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


# Many rows of short updates (m ≥ 512, d ≤ 32768: a d-vector fits in L2) are split by rows
# instead: 16 fixed chunks of rows (deterministic for any thread count), each streaming its rows
# whole into a private d-vector, then the 16 vectors are added. On 2 cores at m = 1000,
# d = 10⁴ this reads at 0.93 of the bandwidth probe where the column blocks reach 0.7-0.8 (a
# block of a few hundred columns touches a new page in every one of the m rows).
_ROWS_MIN_M = 512
_ROWS_MAX_D = 32768
_ROW_CHUNKS = 16


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _weighted_rows(deltas, w, partial, c_lo, c_hi):
    m, d = deltas.shape
    C = partial.shape[0]
    for c in range(c_lo, c_hi):
        lo = c * m // C
        hi = (c + 1) * m // C
        o = partial[c]
        for j in range(d):
            o[j] = 0.0
        k = lo
        while k + 4 <= hi:
            w0, w1, w2, w3 = w[k], w[k + 1], w[k + 2], w[k + 3]
            r0, r1, r2, r3 = deltas[k], deltas[k + 1], deltas[k + 2], deltas[k + 3]
            for j in range(d):
                o[j] += w0 * r0[j] + w1 * r1[j] + w2 * r2[j] + w3 * r3[j]
            k += 4
        while k < hi:
            wk = w[k]
            r0 = deltas[k]
            for j in range(d):
                o[j] += wk * r0[j]
            k += 1


def _by_rows(m: int, d: int) -> bool:
    return m >= _ROWS_MIN_M and d <= _ROWS_MAX_D


def _rows_sum(weights: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    partial = np.empty((_ROW_CHUNKS, deltas.shape[1]), dtype=deltas.dtype)
    w = weights.astype(deltas.dtype)
    _share(lambda lo, hi: _weighted_rows(deltas, w, partial, lo, hi), _ROW_CHUNKS, deltas.size)
    return partial.sum(axis=0)


def weighted_update(theta: np.ndarray, deltas: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``θ − Σ_k weights_k δ_k`` for validated, C-contiguous inputs of one float dtype.

    Returns the result and, as a cheap finiteness witness, whether the sum of its entries is
    finite (a NaN or infinity anywhere makes it non-finite; a False may also be an overflow of
    the sum of finite entries, which the caller resolves by a full check).
    """
    kernel_arrays("weighted_update", theta=(theta, 1), deltas=(deltas, 2), weights=(weights, 1))
    same_length("weights", weights.shape[0], "deltas' rows", deltas.shape[0])
    same_length("theta", theta.shape[0], "deltas' columns", deltas.shape[1])
    if _by_rows(*deltas.shape):
        out = theta - _rows_sum(weights, deltas)
        return out, bool(np.isfinite(out.sum()))
    out = np.empty_like(theta)
    block = _block_for(theta.size)
    nblk = -(-theta.size // block)
    partial = np.empty(nblk, dtype=np.float64)
    w = weights.astype(deltas.dtype)
    _share(
        lambda lo, hi: _weighted_update(theta, deltas, w, out, partial, True, block, lo, hi),
        nblk,
        deltas.size,
    )
    return out, bool(np.isfinite(partial.sum()))


def weighted_sum(weights: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``Σ_k weights_k δ_k`` for a C-contiguous (m, d) ``deltas``, in its dtype: the pass of
    :func:`weighted_update` started from 0 (no d-vector of zeros to allocate and read)."""
    kernel_arrays("weighted_sum", weights=(weights, 1), deltas=(deltas, 2))
    same_length("weights", weights.shape[0], "deltas' rows", deltas.shape[0])
    if _by_rows(*deltas.shape):
        return _rows_sum(weights, deltas)
    d = deltas.shape[1]
    out = np.empty(d, dtype=deltas.dtype)
    block = _block_for(d)
    nblk = -(-d // block)
    partial = np.empty(nblk, dtype=np.float64)
    w = -weights.astype(deltas.dtype)
    _share(
        lambda lo, hi: _weighted_update(out, deltas, w, out, partial, False, block, lo, hi),
        nblk,
        deltas.size,
    )
    return out


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _two_combinations(w0, w1, rows, out0, out1, block, b_lo, b_hi):
    # Four rows at a time stream through the two output blocks, which stay in cache (as in
    # ``_weighted_update``): one pass over ``rows``.
    m, d = rows.shape
    for b in range(b_lo, b_hi):
        lo = b * block
        hi = min(lo + block, d)
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
    kernel_arrays("two_combinations", weights=(weights, 2), rows=(rows, 2))
    same_length("weights' rows", weights.shape[0], "2 (two combinations)", 2)
    same_length("weights' columns", weights.shape[1], "rows' rows", rows.shape[0])
    out = np.empty((2, rows.shape[1]))
    w0, w1, block = weights[0].copy(), weights[1].copy(), _block_for(rows.shape[1])
    _share(
        lambda lo, hi: _two_combinations(w0, w1, rows, out[0], out[1], block, lo, hi),
        -(-rows.shape[1] // block),
        2 * rows.size,
    )
    return out


_GRAM_BLOCK = 2048  # columns per step of the Gram kernel: 4 + 2 rows of it stay in L1
_GRAM_CHUNKS = 32  # fixed partition of the column blocks: deterministic for any thread count
#: Largest m for which :func:`gram` beats OpenBLAS's SYRK, with one Numba thread and with more.
#: Measured on 2 cores: one thread, 1.6× faster at m = 10, 1.4× at 32, 0.9× at 100; two threads
#: (OpenBLAS's SYRK gains nothing from its second thread on these shapes), 2.5× at m ≤ 32,
#: 1.5-2× at 100, level at 200, and BLAS 3× faster at m = 1000.
GRAM_MAX_M = (48, 128)


def use_gram_kernel(m: int) -> bool:
    """Whether :func:`gram` beats BLAS for m rows at the current Numba thread count."""
    return m <= GRAM_MAX_M[numba.get_num_threads() > 1]


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _gram_chunks(D, partial, c_lo, c_hi):
    # Chunk c sums column blocks c, c + C, c + 2C, ... into partial[c]. Per block, 4 × 2 tiles
    # of G (rows i0..i0+3 against j0, j0+1, j0 ≥ i0) are accumulated in registers while the six
    # rows stream from L1: 8 FMAs per 6 loads. Entries below the diagonal that a tile touches
    # are left to the caller to discard.
    m, d = D.shape
    nblk = (d + _GRAM_BLOCK - 1) // _GRAM_BLOCK
    nchunk = partial.shape[0]
    for c in range(c_lo, c_hi):
        P = partial[c]
        for b in range(c, nblk, nchunk):
            lo = b * _GRAM_BLOCK
            hi = min(lo + _GRAM_BLOCK, d)
            n = hi - lo
            for i0 in range(0, m, 4):
                for j0 in range(i0, m, 2):
                    if i0 + 4 <= m and j0 + 2 <= m:
                        a0, a1, a2, a3 = (
                            D[i0, lo:hi],
                            D[i0 + 1, lo:hi],
                            D[i0 + 2, lo:hi],
                            D[i0 + 3, lo:hi],
                        )
                        c0, c1 = D[j0, lo:hi], D[j0 + 1, lo:hi]
                        s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = 0.0
                        for k in range(n):
                            x0 = np.float64(c0[k])
                            x1 = np.float64(c1[k])
                            y = np.float64(a0[k])
                            s00 += y * x0
                            s01 += y * x1
                            y = np.float64(a1[k])
                            s10 += y * x0
                            s11 += y * x1
                            y = np.float64(a2[k])
                            s20 += y * x0
                            s21 += y * x1
                            y = np.float64(a3[k])
                            s30 += y * x0
                            s31 += y * x1
                        P[i0, j0] += s00
                        P[i0, j0 + 1] += s01
                        P[i0 + 1, j0] += s10
                        P[i0 + 1, j0 + 1] += s11
                        P[i0 + 2, j0] += s20
                        P[i0 + 2, j0 + 1] += s21
                        P[i0 + 3, j0] += s30
                        P[i0 + 3, j0 + 1] += s31
                    else:  # the edges of G: one entry at a time
                        for i in range(i0, min(i0 + 4, m)):
                            for j in range(max(j0, i), min(j0 + 2, m)):
                                ri = D[i, lo:hi]
                                rj = D[j, lo:hi]
                                s = 0.0
                                for k in range(n):
                                    s += np.float64(ri[k]) * np.float64(rj[k])
                                P[i, j] += s


def gram(deltas: np.ndarray) -> np.ndarray:
    """G = D Dᵀ in float64, exactly symmetric, of a C-contiguous (m, d) float32/float64
    ``deltas``: one parallel, register-tiled pass over D. Faster than OpenBLAS's SYRK, which runs
    such short, wide matrices at a fraction of its GEMM rate, where :func:`use_gram_kernel`."""
    kernel_arrays("gram", deltas=(deltas, 2))
    m, d = deltas.shape
    nblk = (d + _GRAM_BLOCK - 1) // _GRAM_BLOCK
    nchunk = min(nblk, _GRAM_CHUNKS)
    partial = np.zeros((nchunk, m, m))
    _share(lambda lo, hi: _gram_chunks(deltas, partial, lo, hi), nchunk, m * (m + 1) // 2 * d)
    S = partial.sum(axis=0)  # chunks added in a fixed order
    return np.triu(S) + np.triu(S, 1).T


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _row_sq_norms(D, partial, block, b_lo, b_hi):
    # Threads own blocks of columns (as in ``_weighted_update``), so that m = 1 still uses every
    # core; each block's partial sums are kept and added in block order: deterministic.
    m, d = D.shape
    for b in range(b_lo, b_hi):
        lo = b * block
        hi = min(lo + block, d)
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
    kernel_arrays("row_sq_norms", deltas=(deltas, 2))
    m, d = deltas.shape
    block = _block_for(d)
    nblk = -(-d // block)
    partial = np.empty((m, nblk))
    _share(lambda lo, hi: _row_sq_norms(deltas, partial, block, lo, hi), nblk, deltas.size)
    return partial.sum(axis=1)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _weighted_sum_sq_norms(D, w, out, partial, block, b_lo, b_hi):
    # One pass: each column block of ``out`` stays in cache while the m rows stream through it,
    # and every row's squares over the block are summed on the way.
    m, d = D.shape
    for b in range(b_lo, b_hi):
        lo = b * block
        hi = min(lo + block, d)
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
    kernel_arrays("weighted_sum_sq_norms", weights=(weights, 1), deltas=(deltas, 2))
    same_length("weights", weights.shape[0], "deltas' rows", deltas.shape[0])
    m, d = deltas.shape
    block = _block_for(d)
    out = np.empty(d, dtype=deltas.dtype)
    nblk = -(-d // block)
    partial = np.empty((m, nblk))
    w = weights.astype(deltas.dtype)
    _share(
        lambda lo, hi: _weighted_sum_sq_norms(deltas, w, out, partial, block, lo, hi),
        nblk,
        2 * deltas.size,
    )
    return out, partial.sum(axis=1)
