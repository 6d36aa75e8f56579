"""Timing helpers shared by the benchmarks: interleaved repeats, medians, thread pinning."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange


def median_time(
    fns: dict[str, Callable[[], object]], repeats: int, block: int = 1, settle: float = 0.0
) -> dict[str, float]:
    """Median wall time of each callable over ``repeats`` rounds of ``block`` calls each.

    Rounds are interleaved so that slow phases of a shared machine hit every callable. ``block``
    > 1 runs each callable several times in a row: the first call after switching between thread
    pools (BLAS, Numba) can pay for the other pool's threads still spinning, and the median then
    discards it. ``settle`` seconds of sleep before each switch let idle pool threads stop
    spinning (OpenBLAS's keep spinning for a while after a call and steal cores from Numba's).
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up (compilation, page faults)
        fn()
    for _ in range(repeats):
        for key, fn in fns.items():
            if settle:
                time.sleep(settle)
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Pin Numba and, when threadpoolctl is installed, BLAS to ``n`` threads."""
    old = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # the ratios are then taken with BLAS's default thread count
            yield
        else:
            with threadpool_limits(n):
                yield
    finally:
        numba.set_num_threads(old)


@njit(parallel=True, fastmath=True, cache=True)
def read_probe(a):
    """Sum of ``a``: a memory-read bandwidth probe for arrays far larger than cache."""
    # fastmath lets LLVM split the sum over SIMD lanes and accumulators, so the loop is limited by
    # memory, not by the latency of one dependent addition chain.
    s = 0.0
    for i in prange(a.size):
        s += a[i]
    return s


def write_results(out: Path, name: str, rows: list[dict], meta: dict) -> None:
    """Write ``rows`` as CSV and ``{"meta": meta, "rows": rows}`` as JSON under ``out``."""
    import csv

    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
