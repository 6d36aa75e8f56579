"""Timing helpers shared by the benchmarks: interleaved repeats, medians, thread pinning, and
the load a benchmark runs under (idle, or beside a process spinning on one core)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from _output import numba_threads
from numba import njit


def _block_samples(
    fns: dict[str, Callable[[], object]], repeats: int, block: int, settle: float
) -> dict[str, list[list[float]]]:
    """Wall times: per callable, ``repeats`` interleaved rounds of ``block`` consecutive calls."""
    times: dict[str, list[list[float]]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up (compilation, page faults)
        fn()
    for _ in range(repeats):
        for key, fn in fns.items():
            if settle:
                time.sleep(settle)
            run = []
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                run.append(time.perf_counter() - t0)
            times[key].append(run)
    return times


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
    times = _block_samples(fns, repeats, block, settle)
    return {k: float(np.median(np.concatenate(v))) for k, v in times.items()}


def first_and_steady_time(
    fns: dict[str, Callable[[], object]], repeats: int, block: int
) -> dict[str, tuple[float, float]]:
    """(first, steady) per callable, from interleaved rounds of ``block`` ≥ 2 consecutive calls:
    the median of each round's first call (caches and branch predictors left cold by the other
    callables) and the median of the other calls (steady state)."""
    if block < 2:
        raise ValueError(f"block must be >= 2; got {block}")
    times = _block_samples(fns, repeats, block, 0.0)
    return {
        k: (float(np.median([r[0] for r in v])), float(np.median([r[1:] for r in v])))
        for k, v in times.items()
    }


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Pin Numba and, when threadpoolctl is installed, BLAS to ``n`` threads."""
    with numba_threads(n):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # the ratios are then taken with BLAS's default thread count
            yield
        else:
            with threadpool_limits(n):
                yield


@njit(nogil=True, fastmath=True, cache=True)
def _sum_range(a, lo, hi, out, k):
    # fastmath lets LLVM split the sum over SIMD lanes and accumulators, so the loop is limited by
    # memory, not by the latency of one dependent addition chain.
    # (a slice from 0: an index from an unknown lo kept Numba's negative-index check in the loop
    # and the sum unvectorised, at a sixth of the bandwidth)
    b = a[lo:hi]
    s = 0.0
    for i in range(b.size):
        s += b[i]
    out[k] = s


#: Elements per task of the probe: 8 MiB of float64, as large as fairagg's kernels' tasks.
_PROBE_CHUNK = 2**20


def read_probe(a):
    """Sum of ``a``: a memory-read bandwidth probe for arrays far larger than cache.

    It runs on fairagg's own threads (``fairagg.kernels._threads``), as the kernels it is
    compared with do: an OpenMP probe interleaved with them left its threads spinning after each
    call and took a core from the kernel measured next (the weighted sum read at 0.6-0.7 of such
    a probe, at 1.0 of it when each ran alone).
    """
    from fairagg.kernels._threads import run_tasks

    n = a.size
    starts = list(range(0, n, _PROBE_CHUNK))
    out = np.empty(len(starts))
    run_tasks(
        lambda k: _sum_range(a, starts[k], min(starts[k] + _PROBE_CHUNK, n), out, k),
        list(range(len(starts))),
    )
    return float(out.sum())


SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"

#: The loads of each ``--load`` choice, in the order they are measured.
LOADS = {"idle": ("idle",), "busy": ("busy",), "both": ("idle", "busy")}


class Spinner:
    """A subprocess spinning on one core (the last one this process may use) until closed."""

    def __enter__(self):
        cpu = max(os.sched_getaffinity(0))
        self.proc = subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)])
        time.sleep(0.3)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        time.sleep(0.3)


def add_load_argument(ap: argparse.ArgumentParser) -> None:
    """Add the benchmarks' shared ``--load {idle,busy,both}`` option (default idle)."""
    ap.add_argument(
        "--load",
        choices=tuple(LOADS),
        default="idle",
        help="measure on the machine as it is (idle), beside a process this benchmark starts "
        "spinning on one core (busy), or both in turn, each row labelled (default idle)",
    )


def loads(mode: str) -> Iterator[str]:
    """Each load of ``--load`` ``mode`` in turn, ``"idle"`` then ``"busy"``: while the caller's
    loop body runs for ``"busy"`` a ``Spinner`` holds one core, and it is stopped before
    the next load (also when the loop is left early)."""
    for load in LOADS[mode]:
        if load == "busy":
            with Spinner():
                yield load
        else:
            yield load


def write_results(out: Path, name: str, rows: list[dict], meta: dict) -> None:
    """Write ``rows`` as CSV and ``{"meta": meta, "rows": rows}`` as JSON under ``out``."""
    import csv

    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


def parse_cases(text: str) -> list[tuple[int, int]]:
    """A ``--cases`` value ``"MxD,MxD,..."`` as [(M, D), ...]; argparse reports an error under
    the option's name."""
    cases = []
    for item in (c.strip() for c in text.lower().split(",")):
        if not item:
            continue
        try:
            m, d = (int(v) for v in item.split("x"))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected MxD,MxD,...; got {text!r}") from exc
        if m < 1 or d < 1:
            raise argparse.ArgumentTypeError(f"expected M, D >= 1; got {text!r}")
        cases.append((m, d))
    if not cases:
        raise argparse.ArgumentTypeError(f"expected MxD,MxD,...; got {text!r}")
    return cases
