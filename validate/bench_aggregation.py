"""Benchmark: the aggregation kernels' weighted sum and Gram matrix against probes of the machine.

What it shows: for m client updates of length d (float64, one preallocated C-contiguous (m, d)
array D), on each backend of ``fairagg.kernels`` that runs here,

- the weighted sum ``weighted_sum(w, D, backend)`` = Σ_k w_k D_k: its achieved bandwidth, counting
  the traffic it cannot avoid, (m·d + d)·8 bytes (D read once, the d-vector written once, as
  STREAM counts), and its ratio to a bandwidth probe measured in the same process;
- the Gram matrix ``gram(D, backend)`` = D Dᵀ: its time over the roofline time
  max(flops / compute probe, m·d·8 bytes / bandwidth probe), with flops = m(m + 1)·d (SYRK
  computes one triangle: m(m + 1)/2 dot products of length d at 2d flops each, an FMA counted as
  2), and its achieved GFLOP/s as a fraction of the compute probe.

Probes, timed in the same process and interleaved with the kernels (``_bench.median_time``: one
round runs every callable in turn, so that a slow phase of a shared machine hits probes and
kernels alike; 0.2 s of sleep before each switch lets idle OpenBLAS threads stop spinning):

- CPU bandwidth: ``_bench.read_probe`` (a Numba sum on fairagg's threads) reading D itself,
  m·d·8 bytes;
- CPU compute: a float64 square ``A @ B``, n = 2000, 2n³ flops (OpenBLAS's DGEMM);
- GPU bandwidth: the driver's device-to-device copy (``copy_to_device`` between two device
  arrays: cuMemcpyDtoD, what CUDA's bandwidthTest measures) of D into a second device buffer
  (of a chunk of D when the device cannot hold two), read + write bytes counted;
- GPU compute: numba.cuda has no cuBLAS, so a kernel of 8 independent float64 FMA chains per
  thread held in registers, over enough blocks to fill every SM: the FP64 FMA peak of the
  device's CUDA cores (not its FP64 tensor cores, which no numba.cuda kernel uses).

On ``"cuda"`` D and the result stay on the device (D copied there before timing, each timed call
followed by ``cuda.synchronize()``); w is passed as a NumPy array (``weighted_sum`` negates it on
the host and copies the m entries to the device on every call, a cost of the API, so counted).
numba's low-occupancy warnings for the small launches are silenced: the ratios show it. The
numba backend's Gram matrix is its own register-tiled kernel up to ``kernels.cpu.GRAM_MAX_M`` rows
(``kernels.cpu.use_gram_kernel``) and above it NumPy's BLAS call run on one BLAS thread (note
column); NumPy's row runs BLAS on its default threads.

Timing: each callable is warmed up, then one timed call runs its kernel enough times in a row to
last about 50 ms (1 at the large sizes); each of ``--repeats`` rounds makes 3 timed calls of each
callable (the median drops a first call slowed by waking a thread pool); the times are medians
over all of them. The Gram rounds are cut to one call each, and fewer rounds, where they would
take over 40 s a size: at m = 1000, d = 10⁶ one OpenBLAS SYRK took 13 s on the two shared cores
this was written on. The default run took about 2.5 minutes there (8.2 GB resident).

Data: D filled with windows of a random sequence (uniform in [−1, 1)) at random offsets, each
row scaled by ±[0.5, 2): finite, non-trivial values without drawing m·d random numbers (8 GB of
them take minutes); w random, normalised to sum 1. A size is skipped, with the reason printed,
where D and working memory would take over 60 % of the host's physical memory, or (for cuda rows)
do not fit in the device's free memory. No second (m, d) array is ever allocated on the host.

Correctness: every backend's weighted sum and Gram matrix against NumPy's float64 result, as
max|x − x_ref| / (Σ|w_k| · max|D|) and max|G − G_ref| / max_i G_ii (the bounds on every entry:
Cauchy–Schwarz for G), accepted up to max(1e-12, 4·m·u) and max(1e-12, 4·√d·u), u = 2⁻⁵³ (m
terms summed in another order, and d products; the √d bound is the probabilistic one for
rounding errors of random sign). A row above its tolerance is marked FAIL and the run exits 1.

Targets (the issue): on CPU backends at m·d ≥ 10⁷ the weighted sum reaches at least 70 % of the
read probe; on a real GPU at least 70 % of the device's copy bandwidth. A miss is reported
(PASS/MISS per row and a summary line), not an error, unless ``--strict``. Below m·d = 10⁷ D fits
in or near the caches, and the column reads n/a.

Threads: CPU measurements at the machine's full thread count, Numba and BLAS
(``_bench.threads(os.cpu_count())``), stated in the header and in the JSON meta.

Run: ``python validate/bench_aggregation.py [--cases 10x10000,1000x1000000] [--repeats R]
[--out DIR] [--simulator] [--strict]``; writes ``DIR/bench_aggregation.{csv,json,png}``
(default ``runs/bench``; the CSV grows row by row, so an interrupted run keeps what it did).
Default sizes: m ∈ {10, 100, 1000} × d ∈ {10⁴, 10⁶}. On a GPU machine the same command adds the
"cuda" rows (numba must see the GPU: ``NUMBA_ENABLE_CUDASIM`` unset or 0). ``--simulator`` adds
them under numba's CUDA simulator (started with ``NUMBA_ENABLE_CUDASIM=1``; tiny ``--cases``
only): that checks the script's CUDA path, and its timings mean nothing, so its rows are
labelled and left out of the targets.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba import cuda  # the simulator's stand-in under NUMBA_ENABLE_CUDASIM=1
from numba.core.errors import NumbaPerformanceWarning

sys.path.insert(0, os.path.dirname(__file__))
from _bench import median_time, parse_cases, read_probe, threads  # noqa: E402
from _output import CsvAppender, log  # noqa: E402

from fairagg.kernels import available_backends, gram, weighted_sum  # noqa: E402
from fairagg.kernels.cpu import use_gram_kernel  # noqa: E402

NAME = "bench_aggregation"
#: Default sizes (m, d), smallest traffic first.
CASES = tuple((m, d) for d in (10**4, 10**6) for m in (10, 100, 1000))
#: The weighted sum's target: this fraction of the bandwidth probe at m·d ≥ TARGET_MD.
TARGET = 0.70
TARGET_MD = 10**7
#: Side of the CPU GEMM probe.
GEMM_N = 2000
#: GPU FMA probe: threads per block, blocks per SM, iterations of its 8 chains.
FMA_TPB, FMA_BLOCKS_PER_SM, FMA_ITERS = 256, 8, 1 << 15
#: Name of the GPU compute probe in the table.
FMA_PROBE = "GPU FP64 FMA chains"
#: Largest share of the host's physical memory, and of the device's free memory, a size may use.
HOST_FRACTION = 0.6
DEVICE_FRACTION = 0.9
#: The smallest chunk the device copy probe may copy when the device cannot hold two D.
MIN_COPY_BYTES = 256 << 20
#: A timed call repeats its kernel up to MAX_INNER times to last about CALL_SECONDS.
CALL_SECONDS = 0.05
MAX_INNER = 1000
#: Consecutive timed calls per callable and round (the median drops a slow first one).
BLOCK = 3
#: A first call slower than this is not followed by a calibrating call (inner = 1).
SLOW_SECONDS = 3.0
#: About this many seconds of Gram rounds per size (at least one round).
GRAM_BUDGET_S = 40.0
#: Sleep before each switch of callable when more than one CPU thread runs (see _bench).
SETTLE_S = 0.2
#: Unit round-off of float64, and the floor of the relative error tolerances.
U = 2.0**-53
TOL_FLOOR = 1e-12

FIELDS = (
    "m",
    "d",
    "m_times_d",
    "backend",
    "simulated",
    "cpu_threads",
    "bw_probe",
    "probe_GBps",
    "ws_s",
    "ws_GBps",
    "ws_ratio",
    "ws_target",
    "compute_probe",
    "compute_GFLOPs",
    "gram_s",
    "gram_GFLOPs",
    "gram_of_compute",
    "roofline_s",
    "bound",
    "gram_over_roofline",
    "ws_err",
    "ws_tol",
    "gram_err",
    "gram_tol",
    "correct",
    "ws_rounds",
    "ws_block",
    "ws_inner",
    "gram_rounds",
    "gram_block",
    "gram_inner",
    "note",
)


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--cases", type=parse_cases, default=None, help="MxD,MxD,... (default table)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds per size")
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument(
        "--simulator", action="store_true", help="add cuda rows under numba's simulator"
    )
    ap.add_argument("--strict", action="store_true", help="exit 1 when a speed target is missed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    return args


# --------------------------------------------------------------------------- data and memory


def fill(D: np.ndarray, rng: np.random.Generator) -> float:
    """Fill D in place (module docstring) and return a bound on max|D|."""
    m, d = D.shape
    seq = rng.random(2 * d) * 2.0 - 1.0
    offsets = rng.integers(0, d + 1, m)
    scales = rng.uniform(0.5, 2.0, m) * rng.choice([-1.0, 1.0], m)
    for k in range(m):  # row by row into the buffer: no (m, d) temporary
        np.multiply(seq[offsets[k] : offsets[k] + d], scales[k], out=D[k])
    return float(np.abs(scales).max() * np.abs(seq).max())


def host_memory() -> int:
    """Physical memory of the host in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_need(m: int, d: int) -> int:
    """Bytes a size needs on the host: D, a few d-vectors, m × m matrices, the GEMM probe."""
    return 8 * (m * d + 8 * d + 8 * m * m + 3 * GEMM_N**2)


def device_need(m: int, d: int) -> int:
    """Bytes the cuda rows need on the device besides the copy probe's buffer."""
    return 8 * (m * d + 8 * d + 8 * m * m) + (256 << 20)


def host_skip_reason(m: int, d: int) -> str | None:
    need, phys = host_need(m, d), host_memory()
    if need <= HOST_FRACTION * phys:
        return None
    return (
        f"needs {need / 1e9:.1f} GB of host memory, over {HOST_FRACTION:.0%} of the "
        f"{phys / 1e9:.1f} GB installed"
    )


# --------------------------------------------------------------------------- timing


class Repeated:
    """A callable for ``median_time`` that runs ``fn`` ``inner`` times per call and keeps the
    last result. Its first call does nothing: ``calibrate`` has already warmed ``fn`` up, and
    ``median_time``'s own warm-up would repeat a call that takes half a minute at the largest
    size."""

    def __init__(self, fn: Callable[[], Any], inner: int, last: Any) -> None:
        self.fn, self.inner, self.last = fn, inner, last
        self._warm = True

    def __call__(self) -> None:
        if self._warm:
            self._warm = False
            return
        for _ in range(self.inner):
            self.last = self.fn()


def calibrate(fn: Callable[[], Any]) -> tuple[Repeated, float]:
    """Warm ``fn`` up (compilation, page faults), choose how many calls make one timed call (by
    timing 1, 2, 4, ... calls in a row, as ``timeit``'s autorange: a single short call after a
    pause can take milliseconds to wake the thread pools), and return the wrapper with the
    estimated seconds of one call."""
    t0 = time.perf_counter()
    last = fn()
    t = time.perf_counter() - t0
    n = 1
    while t < SLOW_SECONDS:  # the first call may include compilation: time steady calls
        t0 = time.perf_counter()
        for _ in range(n):
            last = fn()
        t = (time.perf_counter() - t0) / n
        if t * n >= CALL_SECONDS / 2 or n >= MAX_INNER:
            break
        n = min(MAX_INNER, 2 * n)
    inner = max(1, min(MAX_INNER, math.ceil(CALL_SECONDS / max(t, 1e-9))))
    return Repeated(fn, inner, last), t


@dataclass
class Timing:
    """Seconds per call of each callable (medians of interleaved rounds), the wrappers that hold
    the last results, and how the medians were taken."""

    seconds: dict[str, float]
    wrapped: dict[str, Repeated]
    rounds: int
    block: int


def timed_group(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    budget: float | None,
    settle: float,
    block: int = BLOCK,
) -> Timing:
    """Time ``fns`` interleaved: ``repeats`` rounds of ``block`` timed calls each (the median
    then drops a first call slowed by waking a pool), cut to one call a round and fewer rounds
    where that would take over ``budget`` seconds."""
    wrapped, est = {}, 0.0
    for key, fn in fns.items():
        time.sleep(settle)  # as median_time: idle OpenBLAS threads spin, stealing Numba's cores
        wrapped[key], t = calibrate(fn)
        est += t * wrapped[key].inner + settle
    rounds = repeats
    if budget is not None and est * block * rounds > budget:
        block = 1
        rounds = max(1, min(repeats, int(budget // max(est, 1e-9))))
    calls: dict[str, Callable[[], object]] = dict(wrapped)
    med = median_time(calls, rounds, block=block, settle=settle)
    return Timing({k: med[k] / wrapped[k].inner for k in fns}, wrapped, rounds, block)


# --------------------------------------------------------------------------- CPU probes


def gemm_operands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return rng.random((GEMM_N, GEMM_N)), rng.random((GEMM_N, GEMM_N))


def gemm_flops() -> float:
    return 2.0 * GEMM_N**3


# --------------------------------------------------------------------------- CUDA probes


def simulated_cuda() -> bool:
    """Whether the cuda backend runs in numba's simulator (imports ``fairagg.kernels.cuda``)."""
    from fairagg.kernels import cuda as kcuda

    return bool(kcuda.SIMULATOR)


@cuda.jit
def _fma_chains(out, iters, b, c):
    # The GPU compute probe: 8 independent float64 FMA chains per thread, in registers (enough
    # independent work per warp to hide the FMA latency). x ↦ x·b + c with 0 < b < 1 converges to
    # c / (1 − b) = 1: no overflow, no denormals. The store keeps the chains alive.
    i = cuda.grid(1)
    x0 = 1.0 + 1e-3 * (i % 7)
    x1, x2, x3 = x0 + 0.1, x0 + 0.2, x0 + 0.3
    x4, x5, x6, x7 = x0 + 0.4, x0 + 0.5, x0 + 0.6, x0 + 0.7
    for _ in range(iters):
        x0 = cuda.fma(x0, b, c)
        x1 = cuda.fma(x1, b, c)
        x2 = cuda.fma(x2, b, c)
        x3 = cuda.fma(x3, b, c)
        x4 = cuda.fma(x4, b, c)
        x5 = cuda.fma(x5, b, c)
        x6 = cuda.fma(x6, b, c)
        x7 = cuda.fma(x7, b, c)
    if i < out.size:
        out[i] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7


def fma_probe() -> tuple[Callable[[], None], float]:
    """A callable that runs the FMA kernel (and synchronises) and the flops of one call."""
    if simulated_cuda():  # every simulated thread is a Python thread: a token launch
        blocks, tpb, iters = 1, 32, 16
    else:
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        blocks, tpb, iters = sms * FMA_BLOCKS_PER_SM, FMA_TPB, FMA_ITERS
    out = cuda.device_array(blocks * tpb, dtype=np.float64)

    def run() -> None:
        _fma_chains[blocks, tpb](out, iters, 0.999, 0.001)
        cuda.synchronize()

    return run, 2.0 * 8 * iters * blocks * tpb


def device_free() -> float:
    """Free device memory in bytes (infinite under the simulator)."""
    return float(cuda.current_context().get_memory_info()[0])


def device_name() -> str:
    if simulated_cuda():
        return "numba CUDA simulator"
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def copy_probe(dD: Any, spare: float) -> tuple[Callable[[], None], float, str]:
    """A callable copying D, or as much of it as ``spare`` bytes of device memory hold,
    device-to-device; its bytes (read + write) and a description."""
    flat = dD.reshape(dD.size)
    n = int(min(dD.size, spare // 8)) if math.isfinite(spare) else dD.size
    src = flat[:n]
    dst = cuda.device_array(n, dtype=np.float64)

    def run() -> None:
        dst.copy_to_device(src)
        cuda.synchronize()

    desc = "device copy" if n == dD.size else f"device copy ({n * 8 / 1e9:.2f} GB chunk)"
    return run, 2.0 * 8 * n, desc


# --------------------------------------------------------------------------- one size


def tolerances(m: int, d: int) -> tuple[float, float]:
    return max(TOL_FLOOR, 4 * m * U), max(TOL_FLOOR, 4 * math.sqrt(d) * U)


def rel_err(x: np.ndarray, ref: np.ndarray, scale: float) -> float:
    return float(np.max(np.abs(np.asarray(x) - ref))) / scale if scale > 0 else 0.0


@dataclass
class Size:
    """One size's inputs: D, the weights, a bound on max|D|."""

    m: int
    d: int
    D: np.ndarray
    w: np.ndarray
    amax: float


def cpu_rows(
    z: Size,
    gemm_ab: tuple[np.ndarray, np.ndarray],
    cpu_backends: list[str],
    repeats: int,
    settle: float,
    cuda_real: dict[str, Any] | None,
) -> tuple[list[dict], dict[str, Any]]:
    """Rows of the CPU backends (and of a real GPU's cuda, interleaved with them); returns them
    and the NumPy reference results."""
    m, d, D, w = z.m, z.d, z.D, z.w
    flat = D.reshape(-1)  # a view: the probe reads D itself
    fns: dict[str, Callable[[], Any]] = {"read": lambda: read_probe(flat)}
    for b in cpu_backends:
        fns[f"ws_{b}"] = functools.partial(weighted_sum, w, D, b)
    if cuda_real:
        fns["copy"] = cuda_real["copy"]
        fns["ws_cuda"] = cuda_real["ws"]
    tw = timed_group(fns, repeats, None, settle)
    log(f"m={m} d={d}: weighted sums timed ({tw.rounds} rounds of {tw.block})")

    A, B = gemm_ab
    gfns: dict[str, Callable[[], Any]] = {"gemm": lambda: A @ B, "gram": lambda: gram(D, "numpy")}
    if "numba" in cpu_backends:  # its own kernel up to GRAM_MAX_M rows, BLAS on one thread above
        gfns["gram_numba"] = lambda: gram(D, "numba")
    if cuda_real:
        gfns["fma"] = cuda_real["fma"]
        gfns["gram_cuda"] = cuda_real["gram"]
    tg = timed_group(gfns, repeats, GRAM_BUDGET_S, settle)
    log(f"m={m} d={d}: Gram matrices timed ({tg.rounds} rounds of {tg.block})")

    ref = {"ws": tw.wrapped["ws_numpy"].last, "gram": tg.wrapped["gram"].last}
    read_bw = D.nbytes / tw.seconds["read"]
    gemm_rate = gemm_flops() / tg.seconds["gemm"]
    rows = []
    for b in cpu_backends:
        key = "gram_numba" if b == "numba" else "gram"
        row = make_row(m, d, b, False, "read (Numba sum of D)", read_bw)
        row.update(ws_fields(m, d, tw, f"ws_{b}", read_bw))
        row.update(gram_fields(m, d, tg, key, f"CPU DGEMM n={GEMM_N}", gemm_rate, read_bw))
        row.update(errors(z, tw.wrapped[f"ws_{b}"].last, tg.wrapped[key].last, ref))
        if b == "numpy":
            row["note"] = "reference: errors 0 by definition"
        elif b == "numba":
            row["note"] = (
                "Gram: Numba register-tiled kernel"
                if use_gram_kernel(m)
                else "Gram: BLAS (SYRK) on one thread"
            )
        rows.append(row)
    if cuda_real:
        copy_bw = cuda_real["copy_bytes"] / tw.seconds["copy"]
        fma_rate = cuda_real["fma_flops"] / tg.seconds["fma"]
        row = make_row(m, d, "cuda", False, cuda_real["copy_desc"], copy_bw)
        row.update(ws_fields(m, d, tw, "ws_cuda", copy_bw))
        row.update(gram_fields(m, d, tg, "gram_cuda", FMA_PROBE, fma_rate, copy_bw))
        ws_host = tw.wrapped["ws_cuda"].last.copy_to_host()
        row.update(errors(z, ws_host, tg.wrapped["gram_cuda"].last, ref))
        rows.append(row)
    return rows, ref


def simulated_cuda_row(z: Size, ref: dict[str, Any], repeats: int) -> dict:
    """The cuda row under numba's simulator: timed on its own (nothing interleaved), meaningless
    times, but every step of the real GPU path, and a real correctness check."""
    dD = cuda.to_device(z.D)
    copy, copy_bytes, copy_desc = copy_probe(dD, math.inf)
    fma, fma_flops = fma_probe()

    def ws() -> Any:
        out = weighted_sum(z.w, dD, "cuda")
        cuda.synchronize()
        return out

    fns = {"copy": copy, "ws": ws, "fma": fma, "gram": lambda: gram(dD, "cuda")}
    t = timed_group(fns, repeats, None, 0.0, block=1)
    copy_bw = copy_bytes / t.seconds["copy"]
    row = make_row(z.m, z.d, "cuda", True, copy_desc, copy_bw)
    row.update(ws_fields(z.m, z.d, t, "ws", copy_bw))
    fma_rate = fma_flops / t.seconds["fma"]
    row.update(gram_fields(z.m, z.d, t, "gram", FMA_PROBE, fma_rate, copy_bw))
    ws_host = t.wrapped["ws"].last.copy_to_host()
    row.update(errors(z, ws_host, t.wrapped["gram"].last, ref))
    row["note"] = "SIMULATOR: timings mean nothing"
    return row


def make_row(m: int, d: int, backend: str, simulated: bool, probe: str, bw: float) -> dict:
    return {
        "m": m,
        "d": d,
        "m_times_d": m * d,
        "backend": backend,
        "simulated": simulated,
        "cpu_threads": numba.get_num_threads(),
        "bw_probe": probe,
        "probe_GBps": bw / 1e9,
        "note": "",
    }


def ws_fields(m: int, d: int, t: Timing, key: str, bw: float) -> dict:
    """The weighted sum's columns: (m·d + d)·8 bytes over its time, and its ratio to ``bw``."""
    sec = t.seconds[key]
    rate = (m * d + d) * 8 / sec
    return {
        "ws_s": sec,
        "ws_GBps": rate / 1e9,
        "ws_ratio": rate / bw,
        "ws_rounds": t.rounds,
        "ws_block": t.block,
        "ws_inner": t.wrapped[key].inner,
    }


def gram_fields(m: int, d: int, t: Timing, key: str, probe: str, rate: float, bw: float) -> dict:
    """The Gram matrix's columns: m(m+1)·d flops over its time, against the roofline."""
    sec = t.seconds[key]
    flops = m * (m + 1) * d
    t_flops, t_bytes = flops / rate, m * d * 8 / bw
    roof = max(t_flops, t_bytes)
    return {
        "compute_probe": probe,
        "compute_GFLOPs": rate / 1e9,
        "gram_s": sec,
        "gram_GFLOPs": flops / sec / 1e9,
        "gram_of_compute": flops / sec / rate,
        "roofline_s": roof,
        "bound": "flops" if t_flops >= t_bytes else "bytes",
        "gram_over_roofline": sec / roof,
        "gram_rounds": t.rounds,
        "gram_block": t.block,
        "gram_inner": t.wrapped[key].inner,
    }


def errors(z: Size, ws: np.ndarray, G: np.ndarray, ref: dict[str, Any]) -> dict:
    """Relative errors against NumPy's results (module docstring) and whether they pass."""
    ws_tol, gram_tol = tolerances(z.m, z.d)
    ws_err = rel_err(ws, ref["ws"], float(np.abs(z.w).sum()) * z.amax)
    gram_err = rel_err(G, ref["gram"], float(np.max(np.diag(ref["gram"]))))
    return {
        "ws_err": ws_err,
        "ws_tol": ws_tol,
        "gram_err": gram_err,
        "gram_tol": gram_tol,
        # written so that a NaN error fails
        "correct": bool(ws_err <= ws_tol and gram_err <= gram_tol),
    }


def target(row: dict) -> str:
    """PASS / MISS of the weighted-sum target, n/a below m·d = 10⁷ and under the simulator."""
    if row["simulated"] or row["m_times_d"] < TARGET_MD:
        return "n/a"
    return "PASS" if row["ws_ratio"] >= TARGET else "MISS"


def cuda_setup(m: int, d: int, D: np.ndarray, w: np.ndarray) -> tuple[dict | None, str | None]:
    """D on the device and the cuda callables of a real GPU, or None and the reason it does not
    fit."""
    free = device_free()
    need = device_need(m, d)
    spare = DEVICE_FRACTION * free - need  # for the copy probe's second buffer
    if spare < min(8 * m * d, MIN_COPY_BYTES):
        return None, (
            f"needs {(need + MIN_COPY_BYTES) / 1e9:.1f} GB of device memory (with the copy "
            f"probe); {free / 1e9:.1f} GB free on the device"
        )
    dD = cuda.to_device(D)
    copy, copy_bytes, copy_desc = copy_probe(dD, spare)
    fma, fma_flops = fma_probe()

    def ws() -> Any:
        out = weighted_sum(w, dD, "cuda")
        cuda.synchronize()
        return out

    return {
        "dD": dD,
        "copy": copy,
        "copy_bytes": copy_bytes,
        "copy_desc": copy_desc,
        "fma": fma,
        "fma_flops": fma_flops,
        "ws": ws,
        "gram": lambda: gram(dD, "cuda"),
    }, None


def measure_size(
    m: int,
    d: int,
    backends: list[str],
    args: argparse.Namespace,
    gemm_ab: tuple[np.ndarray, np.ndarray],
    skipped: list[dict],
) -> list[dict]:
    """All rows of one size; appends to ``skipped`` what does not fit."""
    reason = host_skip_reason(m, d)
    if reason:
        skipped.append({"m": m, "d": d, "backend": "all", "reason": reason})
        print(f"skip m={m} d={d}: {reason}", flush=True)
        return []
    rng = np.random.default_rng([args.seed, m, d])
    D = np.empty((m, d))
    amax = fill(D, rng)
    w = rng.random(m)
    w /= w.sum()
    settle = SETTLE_S if numba.get_num_threads() > 1 else 0.0
    cpu_backends = [b for b in backends if b != "cuda"]
    cuda_real, cuda_reason, sim = None, None, False
    if "cuda" in backends:
        sim = simulated_cuda()
        if not sim:
            cuda_real, cuda_reason = cuda_setup(m, d, D, w)
    if cuda_reason:
        skipped.append({"m": m, "d": d, "backend": "cuda", "reason": cuda_reason})
        print(f"skip cuda at m={m} d={d}: {cuda_reason}", flush=True)
    z = Size(m, d, D, w, amax)
    rows, ref = cpu_rows(z, gemm_ab, cpu_backends, args.repeats, settle, cuda_real)
    if sim:
        rows.append(simulated_cuda_row(z, ref, args.repeats))
    for row in rows:
        row["ws_target"] = target(row)
        log(
            f"m={m} d={d} {row['backend']}{' (simulator)' if row['simulated'] else ''}: "
            f"weighted sum {row['ws_ratio']:.2f} of the probe ({row['ws_target']}), Gram "
            f"{row['gram_over_roofline']:.2f}x roofline, "
            f"{'correct' if row['correct'] else 'WRONG'}"
        )
    return rows


# --------------------------------------------------------------------------- output


def label(row: dict) -> str:
    return row["backend"] + (" (sim)" if row["simulated"] else "")


def print_tables(rows: list[dict], header: str) -> None:
    print()
    print(header)
    print()
    print(
        "Weighted sum Σ_k w_k D_k: (m·d + d)·8 bytes / time, as a fraction of the bandwidth probe"
    )
    print(
        f"{'m':>5} {'d':>8}  {'backend':<11} {'probe GB/s':>10} {'GB/s':>8} {'ratio':>7} "
        f"{'>=0.70':>6} {'rel. err':>8}  probe"
    )
    for r in rows:
        print(
            f"{r['m']:>5} {r['d']:>8}  {label(r):<11} {r['probe_GBps']:>10.1f} "
            f"{r['ws_GBps']:>8.2f} {r['ws_ratio']:>7.2f} {r['ws_target']:>6} "
            f"{r['ws_err']:>8.1e}{'' if r['correct'] else ' FAIL'}  {r['bw_probe']}"
        )
    print()
    print(
        "Gram matrix D Dᵀ: m(m+1)·d flops; roofline = max(flops / compute probe, m·d·8 B / "
        "bandwidth probe)"
    )
    print(
        f"{'m':>5} {'d':>8}  {'backend':<11} {'probe GF/s':>10} {'GF/s':>8} {'of probe':>8} "
        f"{'roof ms':>9} {'bound':>5} {'x roof':>7} {'rel. err':>8}  note"
    )
    for r in rows:
        print(
            f"{r['m']:>5} {r['d']:>8}  {label(r):<11} {r['compute_GFLOPs']:>10.1f} "
            f"{r['gram_GFLOPs']:>8.2f} {r['gram_of_compute']:>8.3f} "
            f"{r['roofline_s'] * 1e3:>9.3f} {r['bound']:>5} {r['gram_over_roofline']:>7.2f} "
            f"{r['gram_err']:>8.1e}{'' if r['correct'] else ' FAIL'}  {r['note']}"
        )


def is_cuda(row: dict) -> bool:
    return row["backend"] == "cuda"


def summary(rows: list[dict], skipped: list[dict]) -> tuple[int, int]:
    """Print the target and correctness summaries; return (misses, failures)."""
    print()
    for kind, is_kind in (("CPU", lambda r: r["backend"] != "cuda"), ("GPU", is_cuda)):
        sel = [r for r in rows if is_kind(r) and r["ws_target"] != "n/a"]
        if not sel:
            continue
        passed = sum(r["ws_target"] == "PASS" for r in sel)
        misses = ", ".join(
            f"{r['backend']} {r['m']}x{r['d']} ({r['ws_ratio']:.2f})"
            for r in sel
            if r["ws_target"] == "MISS"
        )
        print(
            f"target {kind}: weighted sum >= {TARGET:.2f} of the probe at m·d >= 1e7: "
            f"{passed}/{len(sel)} PASS" + (f"; missed: {misses}" if misses else "")
        )
    if not any(r["ws_target"] != "n/a" for r in rows):
        print("target: no row at m·d >= 1e7 outside the simulator (n/a)")
    failures = [r for r in rows if not r["correct"]]
    if failures:
        names = ", ".join(f"{r['backend']} {r['m']}x{r['d']}" for r in failures)
        print(f"correctness: FAILED for {names}")
    else:
        print(f"correctness: all {len(rows)} rows within tolerance of NumPy float64")
    for s in skipped:
        print(f"skipped m={s['m']} d={s['d']} ({s['backend']}): {s['reason']}")
    return sum(r["ws_target"] == "MISS" for r in rows), len(failures)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys((r["m"], r["d"]) for r in rows))
    labels = list(dict.fromkeys(label(r) for r in rows))
    width = 0.8 / max(1, len(labels))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for j, lab in enumerate(labels):
        by_size = {(r["m"], r["d"]): r for r in rows if label(r) == lab}
        xs = [i + (j - (len(labels) - 1) / 2) * width for i, s in enumerate(sizes) if s in by_size]
        sel = [by_size[s] for s in sizes if s in by_size]
        hatch = "//" if "sim" in lab else None
        axes[0].bar(xs, [r["ws_ratio"] for r in sel], width, label=lab, hatch=hatch)
        axes[1].bar(xs, [r["gram_over_roofline"] for r in sel], width, label=lab, hatch=hatch)
    ticks = [f"{m}×{d:.0e}".replace("e+0", "e") for m, d in sizes]
    axes[0].axhline(TARGET, color="k", ls="--", lw=1, label=f"target {TARGET:.2f} (m·d ≥ 1e7)")
    axes[0].set_ylabel("weighted sum GB/s / bandwidth probe")
    axes[0].set_title("Weighted sum (higher is better)")
    axes[1].axhline(1.0, color="k", ls="--", lw=1, label="roofline")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("Gram time / roofline time")
    axes[1].set_title("Gram matrix (lower is better)")
    for ax in axes:
        ax.set_xticks(range(len(sizes)), ticks, rotation=30)
        ax.set_xlabel("m × d")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def blas_info() -> list[dict]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [
        {k: i.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
        for i in threadpool_info()
    ]


def write_json(path: Path, meta: dict, rows: list[dict]) -> None:
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = args.cases or list(CASES)
    backends = list(available_backends(simulator=args.simulator))
    if args.simulator and "cuda" not in backends:
        print("--simulator: no cuda backend (start with NUMBA_ENABLE_CUDASIM=1)", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = CsvAppender(args.out / f"{NAME}.csv", FIELDS)
    start = time.perf_counter()
    rows: list[dict] = []
    skipped: list[dict] = []
    ncpu = os.cpu_count() or 1
    with threads(ncpu), warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        blas = blas_info()
        meta = {
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "numba_threads": numba.get_num_threads(),
            "blas": blas,
            "host_memory_GB": host_memory() / 1e9,
            "numpy": np.__version__,
            "numba": numba.__version__,
            "backends": backends,
            "device": device_name() if "cuda" in backends else None,
            "simulated_cuda": "cuda" in backends and simulated_cuda(),
            "bandwidth_probes": {
                "cpu": "_bench.read_probe over D itself; m*d*8 bytes",
                "cuda": "device-to-device copy_to_device of D (or a chunk); 2 x bytes",
            },
            "compute_probes": {
                "cpu": f"float64 A @ B, n = {GEMM_N}, 2n^3 flops",
                "cuda": "8 float64 FMA chains per thread in registers, 2 flops per FMA",
            },
            "ws_bytes": "(m*d + d)*8",
            "gram_flops": "m*(m+1)*d",
            "target": {"ws_ratio": TARGET, "min_m_times_d": TARGET_MD},
            "repeats": args.repeats,
            "seed": args.seed,
            "skipped": skipped,
        }
        blas_threads = (
            ", ".join(f"{b['internal_api']} {b['num_threads']}" for b in blas) or "default"
        )
        header = (
            f"Aggregation kernels against probes in the same process, float64; CPU: {ncpu} "
            f"logical CPUs; threads: Numba {numba.get_num_threads()}, thread pools "
            f"({blas_threads}); backends: {', '.join(backends)}"
            + (f"; device: {meta['device']}" if meta["device"] else "")
        )
        log(header)
        gemm_ab = gemm_operands(np.random.default_rng([args.seed, GEMM_N]))
        for m, d in cases:
            size_rows = measure_size(m, d, backends, args, gemm_ab, skipped)
            csv.write(size_rows)
            rows.extend(size_rows)
            meta["seconds"] = time.perf_counter() - start
            write_json(args.out / f"{NAME}.json", meta, rows)
    if not rows:
        print("no size fitted: nothing measured", flush=True)
        return 0
    print_tables(rows, header)
    misses, failures = summary(rows, skipped)
    plot(rows, args.out / f"{NAME}.png")
    elapsed = time.perf_counter() - start
    meta["seconds"] = elapsed
    write_json(args.out / f"{NAME}.json", meta, rows)
    print(f"total {elapsed:.0f} s; wrote {args.out}/{NAME}.csv, .json and .png", flush=True)
    if failures or (args.strict and misses):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
