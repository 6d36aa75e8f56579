"""numba.cuda kernels of the aggregation hot loops, tested equal to the NumPy reference.

Imported only when a caller asks for ``backend="cuda"`` ([`fairagg.kernels`][fairagg.kernels]
imports it lazily), so the package works on machines without CUDA. Without a GPU the kernels run
under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before numba is first imported): slow,
but the same code, which is how the test suite checks them on CPU-only machines.

The kernels are written for the memory system of a GPU, not transliterated from the CPU ones:

- ``weighted_update``: out = θ − Σ_k w_k δ_k. One thread per column (grid-stride), the m rows
  read in order, so that the 32 threads of a warp load 32 consecutive entries of a row
  (coalesced); the (m, d) matrix is read once. Each block also reduces the sum of its columns of
  ``out`` in shared memory: the finiteness witness, without a second pass.
- ``weighted_sum`` (Σ_k w_k δ_k, the same kernel started from 0) and ``two_combinations``
  (W @ D for a (2, m) W, FedFV's ḡ and mean update: both sums kept in registers from one read).
- ``row_sq_norms``: ‖δ_k‖² in float64. A 2-D grid, blocks along d × one row per grid row;
  each thread accumulates a grid-stride partial, a shared-memory tree reduces the block, and the
  per-block partials (m × blocks) are summed on the device in a fixed order by one more small
  kernel: deterministic (no atomics), one pass over the matrix, m numbers to the host.
- ``gram``: G = D Dᵀ in float64. 16 × 16 output tiles, each step staging 16 rows × 64
  columns of both factors in shared memory (loaded along d, coalesced; padded against bank
  conflicts); only tiles on or above the diagonal are computed (G is symmetric), and the d axis
  is split over the third grid dimension so that small m still fills the device; the split
  partials are summed on the host.
- ``weighted_sum_sq_norms``: q-FedAvg's fused reduction, Σ_k w_k δ_k and every ‖δ_k‖² from
  one read of the matrix: each thread keeps 4 columns' sums in registers across all m rows and
  stages its squares of 32 rows at a time in shared memory; the row partials are reduced on
  the device as for ``row_sq_norms``.

Inputs may be NumPy arrays or numba device arrays. Device inputs stay on the device: a caller
that keeps its (m, d) updates there across a round pays no transfer, and results come back as
device arrays when ``theta`` (``weighted_update``) is one. float32 and float64 inputs are
accepted; ``weighted_update`` computes in the input dtype like the CPU kernels, the norms and
the Gram matrix accumulate in float64.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import numpy as np
from numba import config, cuda, float64

from ._guard import kernel_arrays, same_length

__all__ = [
    "available",
    "gram",
    "row_sq_norms",
    "two_combinations",
    "weighted_sum",
    "weighted_sum_sq_norms",
    "weighted_update",
]

#: Whether the kernels run in numba's simulator, which executes every GPU thread as a Python
#: thread: launches there use small blocks and few of them (the grid-stride loops and partial
#: blocks are then exercised more, not less), so that tests on CPU-only machines stay fast.
# (numba.config sets its attributes from the environment at import: no stub has them)
SIMULATOR = bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]
#: Threads per block of the 1-D kernels (a power of two: the tree reductions halve it).
TPB = 32 if SIMULATOR else 128
#: Output tile of the Gram kernel (TILE × TILE threads per block) and the columns it stages per
#: step (a multiple of TILE).
TILE = 8 if SIMULATOR else 16
KTILE = 64
#: Upper bound on the blocks a launch uses along d (the grid-stride loops cover the rest).
MAX_BLOCKS = 4 if SIMULATOR else 1024
#: Columns each thread of the fused kernel owns (kept in registers across all m rows), and the
#: rows whose partial squares it stages in shared memory at a time.
COLS = 4
ROWS = 8 if SIMULATOR else 32
#: About this many blocks are aimed at by the Gram kernel's split of d.
GRAM_BLOCKS = 4 if SIMULATOR else 256


def available() -> bool:
    """Whether numba.cuda can run kernels here (a CUDA GPU, or the simulator)."""
    try:
        return bool(cuda.is_available())
    except Exception:  # pragma: no cover - driver errors on broken installations
        return False


@cuda.jit(device=True)
def _block_sum(buf, tid, value):
    """Tree-reduce every thread's ``value`` into ``buf[0]`` (a shared array of blockDim.x
    float64, blockDim.x a power of two); every thread of the block must call it."""
    buf[tid] = value
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if tid < half:
            buf[tid] += buf[tid + half]
        cuda.syncthreads()
        half //= 2


@cuda.jit
def _weighted_update_kernel(theta, deltas, w, out, partial, has_theta):
    # ``has_theta`` False starts every column from theta[0] (a one-entry zero) instead of θ: the
    # weighted sum, called with −w, without a d-vector of zeros to read.
    buf = cuda.shared.array(TPB, float64)
    tid = cuda.threadIdx.x
    m, d = deltas.shape
    j = cuda.blockIdx.x * cuda.blockDim.x + tid
    stride = cuda.gridDim.x * cuda.blockDim.x
    s = 0.0
    while j < d:
        acc = theta[j] if has_theta else theta[0]
        for k in range(m):
            acc -= w[k] * deltas[k, j]
        out[j] = acc
        s += acc
        j += stride
    _block_sum(buf, tid, s)
    if tid == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def _two_combinations_kernel(w0, w1, D, out0, out1):
    # As ``_weighted_update_kernel``: a thread per column (grid-stride, rows read in order:
    # coalesced), both combinations accumulated in registers from one read of the matrix.
    m, d = D.shape
    j = cuda.grid(1)
    stride = cuda.gridsize(1)
    while j < d:
        a = 0.0
        c = 0.0
        for k in range(m):
            x = D[k, j]
            a += w0[k] * x
            c += w1[k] * x
        out0[j] = a
        out1[j] = c
        j += stride


@cuda.jit
def _row_sq_norms_kernel(deltas, partial):
    buf = cuda.shared.array(TPB, float64)
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.y
    d = deltas.shape[1]
    j = cuda.blockIdx.x * cuda.blockDim.x + tid
    stride = cuda.gridDim.x * cuda.blockDim.x
    s = 0.0
    while j < d:
        x = float64(deltas[row, j])
        s += x * x
        j += stride
    _block_sum(buf, tid, s)
    if tid == 0:
        partial[row, cuda.blockIdx.x] = buf[0]


@cuda.jit
def _gram_kernel(D, chunk, partial):
    # Block (bi, bj, bk) computes tile (bi, bj) of G over columns [bk·chunk, (bk+1)·chunk),
    # staging TILE rows × KTILE columns of each factor in shared memory per step.
    bi = cuda.blockIdx.x
    bj = cuda.blockIdx.y
    bk = cuda.blockIdx.z
    if bj < bi:  # G is symmetric: tiles below the diagonal are not computed (uniform per block)
        return
    A = cuda.shared.array((TILE, KTILE + 1), float64)
    B = cuda.shared.array((TILE, KTILE + 1), float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    m, d = D.shape
    lo = bk * chunk
    hi = min(lo + chunk, d)
    ra = bi * TILE + ty  # the rows this thread loads
    rb = bj * TILE + ty
    acc = 0.0
    for k0 in range(lo, hi, KTILE):
        for p in range(0, KTILE, TILE):
            c = k0 + p + tx  # consecutive tx read consecutive columns: coalesced
            A[ty, p + tx] = float64(D[ra, c]) if ra < m and c < hi else 0.0
            B[ty, p + tx] = float64(D[rb, c]) if rb < m and c < hi else 0.0
        cuda.syncthreads()
        for q in range(KTILE):
            acc += A[ty, q] * B[tx, q]
        cuda.syncthreads()
    i = bi * TILE + ty
    j = bj * TILE + tx
    if i < m and j < m:
        partial[bk, i, j] = acc


@cuda.jit
def _sum_rows_kernel(partial, out):
    # One block per row: the row's per-block partials summed in a fixed order (a strided
    # partial per thread, then the block tree), so that only m numbers leave the device.
    buf = cuda.shared.array(TPB, float64)
    tid = cuda.threadIdx.x
    row = cuda.blockIdx.x
    s = 0.0
    for q in range(tid, partial.shape[1], cuda.blockDim.x):
        s += partial[row, q]
    _block_sum(buf, tid, s)
    if tid == 0:
        out[row] = buf[0]


def _row_totals(partial) -> np.ndarray:
    """Σ over axis 1 of a device (m, nb) float64 array, reduced on the device; a NumPy (m,)."""
    m = partial.shape[0]
    out = cuda.device_array(m, dtype=np.float64)
    with _launch_context():
        _sum_rows_kernel[m, TPB](partial, out)
    return out.copy_to_host()


@contextlib.contextmanager
def _launch_context():
    """The simulator runs kernels on NumPy scalars, which warn on overflow and invalid
    operations where a GPU silently produces infinity or NaN (the semantics the callers'
    finiteness witnesses rely on): silence those warnings there."""
    if not SIMULATOR:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@cuda.jit
def _weighted_sum_sq_norms_kernel(D, w, out, partial):
    # Block b owns columns [b·TPB·COLS, (b+1)·TPB·COLS); thread t owns COLS of them, strided by
    # TPB (so a warp's loads of one row are consecutive: coalesced), and keeps their weighted
    # sums in registers across all m rows: the matrix is read once and ``out`` written once.
    # Each thread's squares of a row go to shared memory, ROWS rows at a time; then one thread
    # per row sums the block's TPB partials into partial[row, b] (no atomics: deterministic).
    sq = cuda.shared.array((ROWS, TPB), float64)
    acc = cuda.local.array(COLS, float64)
    tid = cuda.threadIdx.x
    b = cuda.blockIdx.x
    m, d = D.shape
    base = b * TPB * COLS + tid
    for c in range(COLS):
        acc[c] = 0.0
    for r0 in range(0, m, ROWS):
        for r in range(ROWS):
            k = r0 + r
            s = 0.0
            if k < m:
                wk = w[k]
                for c in range(COLS):
                    j = base + c * TPB
                    if j < d:
                        x = D[k, j]
                        acc[c] += wk * x
                        x64 = float64(x)
                        s += x64 * x64
            sq[r, tid] = s
        cuda.syncthreads()
        if tid < ROWS and r0 + tid < m:
            t = 0.0
            for q in range(TPB):
                t += sq[tid, q]
            partial[r0 + tid, b] = t
        cuda.syncthreads()
    for c in range(COLS):
        j = base + c * TPB
        if j < d:
            out[j] = acc[c]


def _is_device(a: Any) -> bool:
    # numba's device arrays (and the simulator's stand-ins) are not ndarrays and copy to host.
    return not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host")


def _to_device(a: Any):
    return a if _is_device(a) else cuda.to_device(np.ascontiguousarray(a))


def _blocks(n: int) -> int:
    return max(1, min(MAX_BLOCKS, math.ceil(n / TPB)))


def weighted_update(theta: Any, deltas: Any, weights: Any) -> tuple[Any, bool]:
    """``θ − Σ_k weights_k δ_k`` on the GPU; returns ``(out, maybe_finite)`` as the CPU kernel.

    ``out`` is a device array when ``theta`` is one, else a NumPy array.
    """
    kernel_arrays(
        "weighted_update", device=True, theta=(theta, 1), deltas=(deltas, 2), weights=(weights, 1)
    )
    same_length("weights", weights.shape[0], "deltas' rows", deltas.shape[0])
    same_length("theta", theta.shape[0], "deltas' columns", deltas.shape[1])
    d_theta, d_deltas = _to_device(theta), _to_device(deltas)
    dtype = np.result_type(d_theta.dtype, d_deltas.dtype)
    w = _to_device(np.asarray(weights, dtype=dtype))
    d = d_theta.shape[0]
    nb = _blocks(d)
    out = cuda.device_array(d, dtype=dtype)
    partial = cuda.device_array(nb, dtype=np.float64)
    with _launch_context():
        _weighted_update_kernel[nb, TPB](d_theta, d_deltas, w, out, partial, True)
    maybe_finite = bool(np.isfinite(partial.copy_to_host().sum()))
    return (out if _is_device(theta) else out.copy_to_host()), maybe_finite


def weighted_sum(weights: Any, deltas: Any) -> Any:
    """``Σ_k weights_k δ_k`` in the dtype of ``deltas``: a device array when ``deltas`` is one,
    else a NumPy array."""
    kernel_arrays("weighted_sum", device=True, weights=(weights, 1), deltas=(deltas, 2))
    same_length("weights", weights.shape[0], "deltas' rows", deltas.shape[0])
    D = _to_device(deltas)
    m, d = D.shape
    dtype = np.dtype(D.dtype)
    w = _to_device(-np.asarray(weights, dtype=dtype))
    nb = _blocks(d)
    zero = _to_device(np.zeros(1, dtype=dtype))
    out = cuda.device_array(d, dtype=dtype)
    partial = cuda.device_array(nb, dtype=np.float64)
    with _launch_context():
        _weighted_update_kernel[nb, TPB](zero, D, w, out, partial, False)
    return out if _is_device(deltas) else out.copy_to_host()


def two_combinations(weights: np.ndarray, deltas: Any) -> np.ndarray:
    """``weights @ D`` for a (2, m) float64 ``weights``, float64, shape (2, d) (a NumPy array):
    FedFV's ḡ and mean update from one pass over the updates."""
    kernel_arrays("two_combinations", device=True, weights=(weights, 2), deltas=(deltas, 2))
    same_length("weights' rows", weights.shape[0], "2 (two combinations)", 2)
    same_length("weights' columns", weights.shape[1], "deltas' rows", deltas.shape[0])
    D = _to_device(deltas)
    d = D.shape[1]
    W = np.asarray(weights, dtype=np.float64)
    w0, w1 = _to_device(W[0]), _to_device(W[1])
    out = cuda.device_array((2, d), dtype=np.float64)
    with _launch_context():
        _two_combinations_kernel[_blocks(d), TPB](w0, w1, D, out[0], out[1])
    return out.copy_to_host()


def row_sq_norms(deltas: Any) -> np.ndarray:
    """‖δ_k‖² of every row, float64, shape (m,) (a NumPy array)."""
    kernel_arrays("row_sq_norms", device=True, deltas=(deltas, 2))
    D = _to_device(deltas)
    m, d = D.shape
    if m == 0 or d == 0:
        return np.zeros(m)
    nb = max(1, min(max(1, MAX_BLOCKS // m), math.ceil(d / TPB)))
    partial = cuda.device_array((m, nb), dtype=np.float64)
    with _launch_context():
        _row_sq_norms_kernel[(nb, m), TPB](D, partial)
    return _row_totals(partial)


def gram(deltas: Any) -> np.ndarray:
    """G = D Dᵀ, float64, shape (m, m) (a NumPy array)."""
    kernel_arrays("gram", device=True, deltas=(deltas, 2))
    D = _to_device(deltas)
    m, d = D.shape
    if m == 0 or d == 0:
        return np.zeros((m, m))
    nt = math.ceil(m / TILE)
    tiles = nt * (nt + 1) // 2
    # Split d so that about GRAM_BLOCKS blocks run, but never below 4 steps of columns a block.
    splits = max(1, min(math.ceil(GRAM_BLOCKS / tiles), math.ceil(d / (4 * KTILE))))
    chunk = math.ceil(math.ceil(d / splits) / KTILE) * KTILE
    splits = math.ceil(d / chunk)
    partial = cuda.device_array((splits, m, m), dtype=np.float64)
    with _launch_context():
        _gram_kernel[(nt, nt, splits), (TILE, TILE)](D, chunk, partial)
    S = partial.copy_to_host().sum(axis=0)
    return np.triu(S) + np.triu(S, 1).T


def weighted_sum_sq_norms(weights: Any, deltas: Any) -> tuple[Any, np.ndarray]:
    """(Σ_k w_k δ_k, ‖δ_k‖² in float64) in one pass over the (m, d) matrix (q-FedAvg's fused
    reduction). The sum is a device array when ``deltas`` is one, else a NumPy array in its
    dtype; the norms are a NumPy array."""
    kernel_arrays("weighted_sum_sq_norms", device=True, weights=(weights, 1), deltas=(deltas, 2))
    same_length("weights", weights.shape[0], "deltas' rows", deltas.shape[0])
    D = _to_device(deltas)
    m, d = D.shape
    dtype = np.dtype(D.dtype)
    w = _to_device(np.asarray(weights, dtype=dtype))
    nb = max(1, math.ceil(d / (TPB * COLS)))
    out = cuda.device_array(d, dtype=dtype)
    partial = cuda.device_array((m, nb), dtype=np.float64)
    with _launch_context():
        _weighted_sum_sq_norms_kernel[nb, TPB](D, w, out, partial)
    norms = _row_totals(partial)  # m numbers to the host, not m × d/(TPB·COLS)
    return (out if _is_device(deltas) else out.copy_to_host()), norms
