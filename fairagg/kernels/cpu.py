"""Numba CPU kernels of the aggregation hot loops, tested equal to the NumPy reference.

``weighted_update`` computes ``out = θ − Σ_k w_k δ_k`` in one pass over the (m, d) update matrix:
threads own blocks of columns; each block of ``out`` stays in cache while four rows of updates at
a time stream through it, so ``θ`` and the updates are read once and ``out`` written once (the
NumPy form ``θ − w @ D`` makes three more passes over d-vectors). The same pass sums each block
of ``out`` so that the caller can check finiteness without reading ``out`` again.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir as llvm_ir  # type: ignore[import-untyped]
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._guard import kernel_arrays, same_length
from ._threads import num_threads, run_tasks, threads_for

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
    thread below ``kernels._threads.MIN_PARALLEL_MACS`` multiply-adds or with one thread, else
    as tasks of consecutive blocks (at least ``_TASK_MACS`` each) on the threads of
    ``fairagg.kernels._threads``, which take the next task when they finish one (a thread
    slowed by another process takes fewer). Every block is computed alike either way, so the
    result does not depend on the thread count."""
    threads = threads_for(macs)
    if threads == 1 or nblk <= 1 or num_threads() == 1:  # one call: no task to hand out
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


def weighted_update(
    theta: np.ndarray, deltas: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, bool]:
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
    ``weighted_update`` started from 0 (no d-vector of zeros to allocate and read)."""
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
    # Eight rows at a time stream through the two output blocks, which stay in cache (as in
    # ``_weighted_update``): one pass over ``rows``, and each output block read and written once
    # per eight rows (with four, 0.70 of the one-thread read probe at m = 100; with eight, 0.76).
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
        while k + 8 <= m:
            r0, r1, r2, r3 = (
                rows[k, lo:hi],
                rows[k + 1, lo:hi],
                rows[k + 2, lo:hi],
                rows[k + 3, lo:hi],
            )
            r4, r5, r6, r7 = (
                rows[k + 4, lo:hi],
                rows[k + 5, lo:hi],
                rows[k + 6, lo:hi],
                rows[k + 7, lo:hi],
            )
            a0, a1, a2, a3 = w0[k], w0[k + 1], w0[k + 2], w0[k + 3]
            a4, a5, a6, a7 = w0[k + 4], w0[k + 5], w0[k + 6], w0[k + 7]
            c0, c1, c2, c3 = w1[k], w1[k + 1], w1[k + 2], w1[k + 3]
            c4, c5, c6, c7 = w1[k + 4], w1[k + 5], w1[k + 6], w1[k + 7]
            for j in range(n):
                x0, x1, x2, x3 = r0[j], r1[j], r2[j], r3[j]
                x4, x5, x6, x7 = r4[j], r5[j], r6[j], r7[j]
                o0[j] += (a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3) + (
                    a4 * x4 + a5 * x5 + a6 * x6 + a7 * x7
                )
                o1[j] += (c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3) + (
                    c4 * x4 + c5 * x5 + c6 * x6 + c7 * x7
                )
            k += 8
        if k + 4 <= m:
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


_GRAM_BLOCK = 2048  # columns per step of the Gram kernel: a tile's rows of it stay in L1/L2
#: Columns per step with AVX-512's 6 × 4 tiles: a panel of six rows (24 KiB) and a tile's other
#: four (16 KiB) fit a 48 KiB L1. Measured on one core at m = 100, d = 10⁵ (best of 9
#: interleaved runs, the one-thread GEMM at 67 GFLOP/s): 6 × 4 tiles at 256 / 384 / 512 columns
#: 34 / 36 / 37 GFLOP/s; 4 × 4 tiles at 2048 columns 27 with 256-bit vectors, 26 with 512-bit
#: (those tiles' eight loads per 16 FMAs come from L2); 8 × 3 tiles at 256-512 columns 33-35.
_GRAM_BLOCK_WIDE = 512
_GRAM_CHUNKS = 32  # fixed partition of the column blocks: deterministic for any thread count


def _compiles_for_avx512() -> bool:
    """Whether Numba generates AVX-512 code here (its 32 vector registers hold a 4 × 4 tile of
    the Gram kernel): the host's features, or ``NUMBA_CPU_FEATURES`` where it is set, as Numba's
    code generator reads them. A ``NUMBA_CPU_NAME`` naming an AVX-512 model enables AVX-512 even
    when ``NUMBA_CPU_FEATURES`` does not list it; that case is read as no AVX-512, which costs
    speed (4 × 2 tiles, the lower limit), never correctness."""
    from numba.core import codegen, config

    # numba.core.config sets its attributes from the environment at import: no stub has them
    features = config.CPU_FEATURES  # type: ignore[attr-defined]
    if features is None:
        features = codegen.get_host_cpu_features()  # the host's, less AVX if NUMBA_ENABLE_AVX=0
    return "+avx512f" in features.split(",")


_GRAM_WIDE = _compiles_for_avx512()
#: Largest m for which ``kernels.gram(D, "numba")`` uses ``gram`` rather than OpenBLAS's SYRK
#: (on one BLAS thread). One limit for every thread count, so that which code computes G, and so
#: its round-off, never depends on the thread count. Measured on 2 cores (single runs,
#: d = 10⁵, the kernel against SYRK, before the 6 × 4 tiles, which are faster): with AVX-512
#: (4 × 4 tiles, 0.9-1.0 of the one-core GEMM
#: rate from m = 64 to 700; SYRK 0.24 of it at m = 10, 0.63 at 100, 0.82 at 500, 0.90 at 700,
#: 0.91 at 1000), one thread 2.4× faster at m = 10, 1.5× at 100, 1.05× at 500, 0.96× at 700,
#: 0.85-0.92× at 1000; two threads 2.0-3.4× up to 500, 1.9× at 700, 1.4-1.7× at 1000, 0.9× at
#: 1500 (a column block of m rows then leaves the caches). Otherwise (4 × 2 tiles): one thread
#: 1.6× faster at m = 10, 1.4× at 32, 0.9-1.0× at 100-128; two threads 2.5× at m ≤ 32, 1.5-2×
#: at 100, level at 200.
GRAM_MAX_M = 700 if _GRAM_WIDE else 128


def use_gram_kernel(m: int) -> bool:
    """Whether ``kernels.gram(D, "numba")`` computes G with ``gram`` (m ≤ ``GRAM_MAX_M``)
    rather than with BLAS; the same answer for every thread count."""
    return m <= GRAM_MAX_M


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _gram_tile4x4(D, P, i0, j0, lo, hi):
    # rows i0..i0+3 against rows j0..j0+3 over the columns lo:hi, added to P: the 16
    # accumulators stay in registers while the rows stream from L1/L2. One function per tile
    # shape, each inlined at its one call site: a single tile function with the shape as an
    # argument was inlined whole at all three sites, which tripled the kernel's compile time.
    a0, a1, a2, a3 = D[i0, lo:hi], D[i0 + 1, lo:hi], D[i0 + 2, lo:hi], D[i0 + 3, lo:hi]
    n = hi - lo
    c0, c1, c2, c3 = D[j0, lo:hi], D[j0 + 1, lo:hi], D[j0 + 2, lo:hi], D[j0 + 3, lo:hi]
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = 0.0
    s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = 0.0
    for k in range(n):
        x0 = np.float64(c0[k])
        x1 = np.float64(c1[k])
        x2 = np.float64(c2[k])
        x3 = np.float64(c3[k])
        y = np.float64(a0[k])
        s00 += y * x0
        s01 += y * x1
        s02 += y * x2
        s03 += y * x3
        y = np.float64(a1[k])
        s10 += y * x0
        s11 += y * x1
        s12 += y * x2
        s13 += y * x3
        y = np.float64(a2[k])
        s20 += y * x0
        s21 += y * x1
        s22 += y * x2
        s23 += y * x3
        y = np.float64(a3[k])
        s30 += y * x0
        s31 += y * x1
        s32 += y * x2
        s33 += y * x3
    P[i0, j0] += s00
    P[i0, j0 + 1] += s01
    P[i0, j0 + 2] += s02
    P[i0, j0 + 3] += s03
    P[i0 + 1, j0] += s10
    P[i0 + 1, j0 + 1] += s11
    P[i0 + 1, j0 + 2] += s12
    P[i0 + 1, j0 + 3] += s13
    P[i0 + 2, j0] += s20
    P[i0 + 2, j0 + 1] += s21
    P[i0 + 2, j0 + 2] += s22
    P[i0 + 2, j0 + 3] += s23
    P[i0 + 3, j0] += s30
    P[i0 + 3, j0 + 1] += s31
    P[i0 + 3, j0 + 2] += s32
    P[i0 + 3, j0 + 3] += s33


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _gram_tile4x2(D, P, i0, j0, lo, hi):
    # as _gram_tile4x4, rows i0..i0+3 against j0, j0+1
    a0, a1, a2, a3 = D[i0, lo:hi], D[i0 + 1, lo:hi], D[i0 + 2, lo:hi], D[i0 + 3, lo:hi]
    n = hi - lo
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


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _gram_tile4x1(D, P, i0, j0, lo, hi):
    # as _gram_tile4x4, rows i0..i0+3 against j0
    a0, a1, a2, a3 = D[i0, lo:hi], D[i0 + 1, lo:hi], D[i0 + 2, lo:hi], D[i0 + 3, lo:hi]
    n = hi - lo
    c0 = D[j0, lo:hi]
    s0 = s1 = s2 = s3 = 0.0
    for k in range(n):
        x0 = np.float64(c0[k])
        s0 += np.float64(a0[k]) * x0
        s1 += np.float64(a1[k]) * x0
        s2 += np.float64(a2[k]) * x0
        s3 += np.float64(a3[k]) * x0
    P[i0, j0] += s0
    P[i0 + 1, j0] += s1
    P[i0 + 2, j0] += s2
    P[i0 + 3, j0] += s3


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _gram_tile6x4(D, P, i0, j0, lo, hi):
    # rows i0..i0+5 against rows j0..j0+3 (AVX-512): 24 accumulators, 4 + 6 loads per 24 FMAs.
    # The six rows stay in L1 while the j0 sweep streams the others from L2: a third fewer L2
    # loads per FMA than 4 × 4 tiles, the limit of that kernel.
    a0, a1, a2 = D[i0, lo:hi], D[i0 + 1, lo:hi], D[i0 + 2, lo:hi]
    a3, a4, a5 = D[i0 + 3, lo:hi], D[i0 + 4, lo:hi], D[i0 + 5, lo:hi]
    c0, c1, c2, c3 = D[j0, lo:hi], D[j0 + 1, lo:hi], D[j0 + 2, lo:hi], D[j0 + 3, lo:hi]
    n = hi - lo
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = s20 = s21 = s22 = s23 = 0.0
    s30 = s31 = s32 = s33 = s40 = s41 = s42 = s43 = s50 = s51 = s52 = s53 = 0.0
    for k in range(n):
        x0 = np.float64(c0[k])
        x1 = np.float64(c1[k])
        x2 = np.float64(c2[k])
        x3 = np.float64(c3[k])
        y = np.float64(a0[k])
        s00 += y * x0
        s01 += y * x1
        s02 += y * x2
        s03 += y * x3
        y = np.float64(a1[k])
        s10 += y * x0
        s11 += y * x1
        s12 += y * x2
        s13 += y * x3
        y = np.float64(a2[k])
        s20 += y * x0
        s21 += y * x1
        s22 += y * x2
        s23 += y * x3
        y = np.float64(a3[k])
        s30 += y * x0
        s31 += y * x1
        s32 += y * x2
        s33 += y * x3
        y = np.float64(a4[k])
        s40 += y * x0
        s41 += y * x1
        s42 += y * x2
        s43 += y * x3
        y = np.float64(a5[k])
        s50 += y * x0
        s51 += y * x1
        s52 += y * x2
        s53 += y * x3
    P[i0, j0] += s00
    P[i0, j0 + 1] += s01
    P[i0, j0 + 2] += s02
    P[i0, j0 + 3] += s03
    P[i0 + 1, j0] += s10
    P[i0 + 1, j0 + 1] += s11
    P[i0 + 1, j0 + 2] += s12
    P[i0 + 1, j0 + 3] += s13
    P[i0 + 2, j0] += s20
    P[i0 + 2, j0 + 1] += s21
    P[i0 + 2, j0 + 2] += s22
    P[i0 + 2, j0 + 3] += s23
    P[i0 + 3, j0] += s30
    P[i0 + 3, j0 + 1] += s31
    P[i0 + 3, j0 + 2] += s32
    P[i0 + 3, j0 + 3] += s33
    P[i0 + 4, j0] += s40
    P[i0 + 4, j0 + 1] += s41
    P[i0 + 4, j0 + 2] += s42
    P[i0 + 4, j0 + 3] += s43
    P[i0 + 5, j0] += s50
    P[i0 + 5, j0 + 1] += s51
    P[i0 + 5, j0 + 2] += s52
    P[i0 + 5, j0 + 3] += s53


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _gram_tile6x1(D, P, i0, j0, lo, hi):
    # as _gram_tile6x4, rows i0..i0+5 against j0
    a0, a1, a2 = D[i0, lo:hi], D[i0 + 1, lo:hi], D[i0 + 2, lo:hi]
    a3, a4, a5 = D[i0 + 3, lo:hi], D[i0 + 4, lo:hi], D[i0 + 5, lo:hi]
    c0 = D[j0, lo:hi]
    n = hi - lo
    s0 = s1 = s2 = s3 = s4 = s5 = 0.0
    for k in range(n):
        x0 = np.float64(c0[k])
        s0 += np.float64(a0[k]) * x0
        s1 += np.float64(a1[k]) * x0
        s2 += np.float64(a2[k]) * x0
        s3 += np.float64(a3[k]) * x0
        s4 += np.float64(a4[k]) * x0
        s5 += np.float64(a5[k]) * x0
    P[i0, j0] += s0
    P[i0 + 1, j0] += s1
    P[i0 + 2, j0] += s2
    P[i0 + 3, j0] += s3
    P[i0 + 4, j0] += s4
    P[i0 + 5, j0] += s5


@intrinsic
def _stream_store(typingctx, arr, index, value):  # pragma: no cover - compiled
    """``arr[index] = value`` for a 1-D float ``arr``, as a non-temporal store (x86 MOVNTI of
    the entry's bits): the line goes to memory without being read first or kept in the caches,
    where the Gram tiles need the room. The caller ends with ``_store_fence``."""

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        v = context.cast(builder, args[2], signature.args[2], aryty.dtype)
        bits = llvm_ir.IntType(aryty.dtype.bitwidth)
        store = builder.store(builder.bitcast(v, bits), builder.bitcast(ptr, bits.as_pointer()))
        one = builder.module.add_metadata([llvm_ir.Constant(llvm_ir.IntType(32), 1)])
        store.set_metadata("nontemporal", one)
        return context.get_dummy_value()

    return types.none(arr, index, value), codegen


@intrinsic
def _store_fence(typingctx):  # pragma: no cover - compiled
    """SFENCE: the non-temporal stores before it are visible before any store after it."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _stream_store_line(typingctx, dst, index, src, src_index):  # pragma: no cover - compiled
    """``dst[index:index + L] = src[src_index:src_index + L]`` for 1-D arrays of one float dtype,
    L = 64 bytes of entries, as one non-temporal 64-byte vector store (MOVNTPS/MOVNTPD of a
    ZMM register; two YMM or four XMM stores without AVX-512): ``&dst[index]`` must be 64-byte
    aligned (the caller checks), ``src`` may be unaligned. The caller ends with
    ``_store_fence``."""
    if dst.dtype != src.dtype:
        return None

    def codegen(context, builder, signature, args):
        dty, sty = signature.args[0], signature.args[2]
        da = context.make_array(dty)(context, builder, args[0])
        sa = context.make_array(sty)(context, builder, args[2])
        dp = cgutils.get_item_pointer(context, builder, dty, da, [args[1]], wraparound=False)
        sp = cgutils.get_item_pointer(context, builder, sty, sa, [args[3]], wraparound=False)
        elem = context.get_value_type(dty.dtype)
        vec = llvm_ir.VectorType(elem, 512 // dty.dtype.bitwidth)
        v = builder.load(builder.bitcast(sp, vec.as_pointer()), align=dty.dtype.bitwidth // 8)
        store = builder.store(v, builder.bitcast(dp, vec.as_pointer()), align=64)
        one = builder.module.add_metadata([llvm_ir.Constant(llvm_ir.IntType(32), 1)])
        store.set_metadata("nontemporal", one)
        return context.get_dummy_value()

    return types.none(dst, index, src, src_index), codegen


# a copy: its caller's flags, stated as the flags test asks; they change no arithmetic here
@njit(cache=True, nogil=True, inline="always", fastmath={"reassoc", "contract"})
def _copy_pieces(S, s_lo, out, first, count, lo, hi):
    # Pieces first .. first + count - 1 of out[:, lo:hi] = S[:, s_lo:s_lo + hi - lo], by
    # non-temporal stores, numbered row by row: in each row, piece 0 is the entries before the
    # row's first 64-byte boundary (single stores; all of them where the row is not even aligned
    # to its entries), then one piece per whole 64-byte line, then the entries after the last.
    # Returns the next piece's number.
    line = 64 // out.itemsize
    n = hi - lo
    per_row = n // line + 2
    end = min(first + count, out.shape[0] * per_row)
    q = first
    while q < end:
        i = q // per_row
        src = S[i, s_lo : s_lo + n]
        dst = out[i, lo:hi]
        addr = dst.ctypes.data
        head = min(n, (-addr % 64) // out.itemsize) if addr % out.itemsize == 0 else n
        full = (n - head) // line
        u = q - i * per_row
        while u < per_row and q < end:
            if u == 0:
                for k in range(head):
                    _stream_store(dst, k, src[k])
            elif u <= full:
                k = head + (u - 1) * line
                _stream_store_line(dst, k, src, k)
            elif u == per_row - 1:
                for k in range(head + full * line, n):
                    _stream_store(dst, k, src[k])
            u += 1
            q += 1
    return end


# a copy: flags as the flags test asks; they change no arithmetic here
@njit(cache=True, nogil=True, inline="always", fastmath={"reassoc", "contract"})
def _stage(D, S, lo, hi):
    # S[i, :hi - lo] = D[i, lo:hi] for every row i
    n = hi - lo
    for i in range(D.shape[0]):
        src = D[i, lo:hi]
        dst = S[i, :n]
        for k in range(n):
            dst[k] = src[k]


@intrinsic
def _prefer_512_bit_vectors(typingctx):  # pragma: no cover - compiled
    """Mark the calling compiled function ``"prefer-vector-width"="512"`` (clang's
    ``-mprefer-vector-width=512``): LLVM's tuning for AVX-512 hosts vectorises with 256-bit
    registers by default, half the width of the FMA units. No effect where the target has no
    AVX-512. The attribute set of llvmlite's IR accepts only its known names, so the string
    attribute is added as a plain set item; should that ever fail, the code is the 256-bit one,
    slower but the same arithmetic."""

    def codegen(context, builder, signature, args):
        try:
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        except Exception:  # noqa: BLE001 - a speed hint only
            pass
        return context.get_dummy_value()

    return types.none(), codegen


#: Fewest rows for which the Gram kernel computes its tiles from an aligned copy of each block
#: (``_gram_chunks``); below, each term of a tile is read from D itself (the same bits either
#: way), where the copy costs more than the split loads it saves. Measured on the shared 2-core
#: host (d = 2·10⁵, best of 21 interleaved repeats, the copy against none): 0.71-0.89× as fast
#: at m = 12-20, 0.90-0.99× at 24-28, 1.01-1.05× at 40; 1.2-1.35× at m = 100-700.
_STAGE_MIN_M = 32


def _make_gram_chunks(plain: bool):
    """The Gram pass ``_gram_chunks(D, partial, c_lo, c_hi, wide, block, stage, copy, out)``,
    compiled whole, or ``plain``: without its staging and copy branches, for ``stage`` and
    ``copy`` both false (``_gram`` picks it then). ``wide`` (AVX-512's 6 × 4 tiles, else 4 × 2)
    stays an argument: it is the same on every call of a host. ``stage``: the tiles read an
    aligned copy of each block (``_gram`` sets it from ``_STAGE_MIN_M`` rows on); ``copy``: D is
    also written to ``out``.

    A process compiles only the version it calls (issue 38 item 6, "compile only what a run
    uses"): in the plain one ``may_stage`` and ``may_copy`` are constants, and numba prunes the
    branches they guard before it types and inlines them. Compiling the first Gram matrix in a
    process with an empty cache (2-core host, two runs each, interleaved with the single function
    of before): the plain version 4.0-4.2 s against 6.0-6.4 s, which a FedMGDA+ run of fewer than
    32 clients a round calls; the whole one as before (6.4-7.7 s against 6.2-7.1 s, with the
    copy at m = 100).
    Both compute the bits the one function did before: compared on the 2-core AVX-512 host, both
    tile widths, with and without the copy, float32 and float64, 119 shapes (m = 1-131, d =
    1-60001), 952 results, no difference. Only these two versions: one per setting of all three
    switches, tried first, made the Gram tests of ``tests/test_kernels.py`` compile 42 s of CPU
    more from an empty cache (101 s against 59 s), since the tests meet every setting; with two,
    2-6 s more. Numba's disk cache keeps the two apart (each version has a name of its own, and
    numba keys a closure by the values of its cells too)."""
    may_stage = may_copy = not plain

    def _gram_chunks(D, partial, c_lo, c_hi, wide, block, stage, copy, out):
        # Chunk c sums column blocks c, c + C, c + 2C, ... of ``block`` columns into
        # partial[c]. Per block, tiles of G (rows i0.. against j0.., j0 ≥ i0) are accumulated
        # in registers while their rows stream through the caches. Where ``wide`` (AVX-512,
        # 512-bit vectors, 32 vector registers): 6 × 4 tiles over panels of six rows (24 FMAs
        # per 10 loads; the panel stays in L1 across its row of tiles, ``_GRAM_BLOCK_WIDE``
        # columns), 6 × 1 tiles finishing a row, then 4 × 4 tiles for the rows left. Else 4 × 2
        # (8 FMAs per 6 loads; with 16 vector registers 4 × 4 spills and ran slower). 4 × 2 and
        # 4 × 1 tiles finish a row of 4 × 4 or 4 × 2 tiles, and the last rows (m mod 4 of those
        # left) are dot products one entry at a time. Entries below the diagonal that a tile
        # touches are left to the caller to discard.
        #
        # Where ``stage``, the tiles read a block from ``S``, a copy of it whose rows start on
        # 64-byte boundaries: D's rows rarely do (NumPy aligns to 16 bytes), and then every
        # 64-byte load of a tile spans two cache lines. The values and the column index of
        # every term are D's, so the sums are the same to the bit. ``copy``: each block of D is
        # also written to the same columns of ``out``, a panel's rows as its row of tiles
        # starts, by non-temporal stores (whole 64-byte lines where ``out`` is aligned) that go
        # to memory without reading ``out`` first or taking room in the caches the tiles use
        # (the stores spread over the tiles instead, a share before each, ran slower: they hold
        # the line fill buffers that the tiles' loads need); a fence ends the call.
        _prefer_512_bit_vectors()
        m, d = D.shape
        nblk = (d + block - 1) // block
        nchunk = partial.shape[0]
        line = 64 // D.itemsize
        # S: a block and one line more per row, so that rows are not 4 KiB apart
        width = block + line if may_stage and stage else 0
        raw = np.empty(m * width + line, D.dtype)
        start = (-raw.ctypes.data % 64) // D.itemsize if raw.ctypes.data % D.itemsize == 0 else 0
        S = raw[start : start + m * width].reshape((m, width))
        for c in range(c_lo, c_hi):
            P = partial[c]
            for b in range(c, nblk, nchunk):
                lo = b * block
                hi = min(lo + block, d)
                n = hi - lo
                per_row = n // line + 2  # pieces of a row of the copy (see ``_copy_pieces``)
                if may_stage and stage:
                    _stage(D, S, lo, hi)
                    src, s_lo, s_hi = S, 0, n
                else:
                    src, s_lo, s_hi = D, lo, hi
                i0 = 0
                while wide and i0 + 6 <= m:
                    if may_copy and copy:
                        _copy_pieces(src, s_lo, out, i0 * per_row, 6 * per_row, lo, hi)
                    j0 = i0
                    while j0 + 4 <= m:
                        _gram_tile6x4(src, P, i0, j0, s_lo, s_hi)
                        j0 += 4
                    while j0 < m:
                        _gram_tile6x1(src, P, i0, j0, s_lo, s_hi)
                        j0 += 1
                    i0 += 6
                while i0 + 4 <= m:
                    if may_copy and copy:
                        _copy_pieces(src, s_lo, out, i0 * per_row, 4 * per_row, lo, hi)
                    j0 = i0
                    while wide and j0 + 4 <= m:
                        _gram_tile4x4(src, P, i0, j0, s_lo, s_hi)
                        j0 += 4
                    while j0 + 2 <= m:
                        _gram_tile4x2(src, P, i0, j0, s_lo, s_hi)
                        j0 += 2
                    if j0 < m:
                        _gram_tile4x1(src, P, i0, j0, s_lo, s_hi)
                    i0 += 4
                if may_copy and copy:
                    _copy_pieces(src, s_lo, out, i0 * per_row, (m - i0) * per_row, lo, hi)
                for i in range(i0, m):  # the last m mod 4 rows: one entry at a time
                    ri = src[i, s_lo:s_hi]
                    for j in range(i, m):
                        rj = src[j, s_lo:s_hi]
                        s = 0.0
                        for k in range(n):
                            s += np.float64(ri[k]) * np.float64(rj[k])
                        P[i, j] += s
        if may_copy and copy:
            _store_fence()

    # a name of its own per version: numba's compile events and its cache index files tell the
    # two apart by it
    _gram_chunks.__name__ = _gram_chunks.__qualname__ = (
        "_gram_chunks_plain" if plain else "_gram_chunks_whole"
    )
    return njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})(_gram_chunks)


# made at import, compiled at their first call (a dispatcher compiles nothing before)
_GRAM_PLAIN = _make_gram_chunks(True)
_GRAM_WHOLE = _make_gram_chunks(False)


def _gram_chunks_for(plain: bool):
    """The Gram pass without (``plain``) or with its staging and copy branches."""
    return _GRAM_PLAIN if plain else _GRAM_WHOLE


def gram(deltas: np.ndarray) -> np.ndarray:
    """G = D Dᵀ in float64, exactly symmetric, of a C-contiguous (m, d) float32/float64
    ``deltas``: one parallel, register-tiled pass over D. OpenBLAS's SYRK runs such short, wide
    matrices at a fraction of its GEMM rate; this pass beats it up to about ``GRAM_MAX_M``
    rows (see there), where ``kernels.gram(D, "numba")`` calls it."""
    kernel_arrays("gram", deltas=(deltas, 2))
    return _gram(deltas, None)


def _gram_and_copy(deltas: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``gram(deltas)`` for a validated ``deltas``, writing a copy of it into ``out`` (an array
    of its shape and dtype) in the same pass: each column block is copied while it is in cache
    for the Gram tiles, so the copy adds writes to the pass but no second read of ``deltas``
    (FedFV's step keeps the round's updates for the next round's window)."""
    if out.shape != deltas.shape or out.dtype != deltas.dtype:
        raise ValueError(
            f"out must have the shape and dtype of deltas, {deltas.shape} {deltas.dtype}; got "
            f"{out.shape} {out.dtype}"
        )
    return _gram(deltas, out)


def _gram(deltas: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    m, d = deltas.shape
    wide = _GRAM_WIDE
    block = _GRAM_BLOCK_WIDE if wide else _GRAM_BLOCK
    nblk = (d + block - 1) // block
    nchunk = min(nblk, _GRAM_CHUNKS)
    partial = np.zeros((nchunk, m, m))
    copy = out is not None
    dst = deltas if out is None else out  # not written unless ``copy``
    stage = m >= _STAGE_MIN_M
    kernel = _gram_chunks_for(not (stage or copy))
    _share(
        lambda lo, hi: kernel(deltas, partial, lo, hi, wide, block, stage, copy, dst),
        nchunk,
        m * (m + 1) // 2 * d,
    )
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
