"""Benchmark: AAgFF-S's step through A's low-rank structure, K = 800 against K = 8000.

What it shows: for K clients, an AAgFF-S problem after t = 200 rounds (gradients of random
CDF-bounded responses, decisions from the learner itself), the time of one round
``fairagg.online.quadratic_ftrl_round`` on the low-rank sums (``quadratic_ftrl_init(K,
low_rank=True)``, what the ``aaggff-s`` rule keeps from K = 256 on: A = αI + βΣggᵀ never formed,
memory O(K t)), and at the smaller K also on the dense sums (K × K, with the kept Cholesky factor)
for the same round, with the largest |Δp| between the two. Printed: each time, the ratio
low-rank step at K = 8000 / at K = 800 (target ≤ 20×; the dense step grew 823×), and
dense / low-rank at each K where the dense one runs (``--dense-max``, default 1000: the dense
sums at K = 8000 hold 512 MB per copy).

Timing: one thread, medians of ``--repeats`` calls per size, sizes interleaved. ``--load``
``idle`` (default), ``busy`` (beside a process this benchmark starts spinning on one core) or
``both``: every row and the ratio printed per load, labelled ``[idle]`` / ``[busy]``, and a
``load`` column in the CSV and JSON.

Run: ``python validate/bench_aaggff.py [--repeats R] [--sizes K,...] [--rounds T]
[--dense-max K] [--load L] [--out DIR]``; writes ``DIR/bench_aaggff.{csv,json}`` (default
``runs/bench``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import add_load_argument, loads, threads, write_results  # noqa: E402

from fairagg.online import (  # noqa: E402
    aaggff_response,
    aaggff_s_defaults,
    quadratic_ftrl_init,
    quadratic_ftrl_round,
)


def build(K: int, T: int, low_rank: bool, seed: int):
    """AAgFF-S played for T − 1 rounds; returns (state, factor, g_T, p_T, α, β)."""
    rng = np.random.default_rng(seed)
    _, alpha, beta = aaggff_s_defaults(K)
    state, factor, p = quadratic_ftrl_init(K, low_rank=low_rank), None, np.full(K, 1.0 / K)
    for t in range(T):
        r = aaggff_response(rng.lognormal(0.0, 0.5, K), scale=1.0 / K)
        g = -r / (1.0 + p @ r)
        if t == T - 1:
            return state, factor, g, p, alpha, beta
        state, res, factor = quadratic_ftrl_round(state, g, p, alpha, beta, factor=factor)
        p = res.x
    raise AssertionError("unreachable")


def measure(cases: dict, sizes: list[int], rounds: int, repeats: int, load: str) -> list[dict]:
    """The rows of one load: every case timed in interleaved repeats, printed as it comes."""
    rows = []
    times: dict = {key: [] for key in cases}
    for _ in range(repeats):  # interleaved
        for key, (st, fac, g, p, a, b) in cases.items():
            t0 = time.perf_counter()
            quadratic_ftrl_round(st, g, p, a, b, factor=fac)
            times[key].append(time.perf_counter() - t0)
    med = {key: float(np.median(v)) for key, v in times.items()}
    for K in sizes:
        st, fac, g, p, a, b = cases[(K, "low-rank")]
        res = quadratic_ftrl_round(st, g, p, a, b).result
        row = {
            "load": load,
            "K": K,
            "rounds": rounds,
            "free": int(np.count_nonzero(res.x)),
            "iterations": res.iterations,
            "kkt_residual": res.kkt_residual,
            "t_low_rank_s": med[(K, "low-rank")],
            "state_mb": st.rows.nbytes / 1e6,
        }
        if (K, "dense") in cases:
            st, fac, g, p, a, b = cases[(K, "dense")]
            ref = quadratic_ftrl_round(st, g, p, a, b, factor=fac).result
            row["t_dense_s"] = med[(K, "dense")]
            row["ratio_dense_over_low_rank"] = med[(K, "dense")] / med[(K, "low-rank")]
            row["max_abs_dp"] = float(np.max(np.abs(res.x - ref.x)))
            row["dense_state_mb"] = st.outer_sum.nbytes / 1e6
        rows.append(row)
        extra = (
            f"  dense {row['t_dense_s'] * 1e3:8.1f} ms"
            f" (×{row['ratio_dense_over_low_rank']:.1f})"
            f"  max|Δp| {row['max_abs_dp']:.1e}"
            if "t_dense_s" in row
            else ""
        )
        print(
            f"[{load}] AAgFF-S K={K:6d} t={rounds} free {row['free']:6d} ({row['iterations']} it)"
            f"  low-rank {row['t_low_rank_s'] * 1e3:8.1f} ms  state {row['state_mb']:.1f} MB"
            f"  KKT {row['kkt_residual']:.1e}{extra}",
            flush=True,
        )
    if len(sizes) >= 2:
        lo, hi = min(sizes), max(sizes)
        ratio = med[(hi, "low-rank")] / med[(lo, "low-rank")]
        print(f"[{load}] low-rank step K={hi} / K={lo}: {ratio:.1f}× (target ≤ 20×)", flush=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: r.get(k, "") for k in keys} for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sizes", type=str, default="800,8000")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--dense-max", type=int, default=1000)
    add_load_argument(ap)
    args = ap.parse_args(argv)
    sizes = [int(v) for v in args.sizes.split(",") if v]
    rows = []
    with threads(1):
        cases = {}
        for K in sizes:
            cases[(K, "low-rank")] = build(K, args.rounds, True, K)
            if K <= args.dense_max:
                cases[(K, "dense")] = build(K, args.rounds, False, K)
        for load in loads(args.load):
            rows += measure(cases, sizes, args.rounds, args.repeats, load)
    meta = {
        "machine": platform.processor() or platform.machine(),
        "repeats": args.repeats,
        "load": args.load,
    }
    write_results(args.out, "bench_aaggff", rows, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
