"""Benchmark: the exact AAgFF-S step against cvxpy solving the same QP.

What it shows: for K clients, an AAgFF-S quadratic-FTRL problem after t = min(2K, 200) rounds
(gradients of random CDF-bounded responses, decisions from the learner itself), the time of

- ``round``: one AAgFF-S round as the ``aaggff-s`` rule runs it,
  ``fairagg.online.quadratic_ftrl_round``: add (g_t, p_t) to the sums and solve for p_{t+1},
  warm-started at p_t, from the previous round's Cholesky factor updated by β g gᵀ;
- ``step``: ``fairagg.online.quadratic_ftrl_step`` warm-started at p_t but factorising the
  free block afresh (what a caller without the previous round's factor gets);
- ``cold``: ``fairagg.simplex.solve_simplex_qp`` from scratch (it factorises A to prove it
  positive definite and to guess the active set, then runs the active-set method);
- ``cvxpy``: ``fairagg.oracles.simplex_qp`` on the same (A, b) (OSQP, polished, tight), the
  independent check a user would otherwise write (the sums' update is not counted for it);

as time ratios cvxpy / ours, and the largest |Δp| between our answers and cvxpy's. Target (issue
3): the exact AAgFF-S step at least 100× faster at K = 100 with |Δp| ≤ 1e-9.

Timing, one thread: rounds interleave the callables (so slow phases of a shared machine hit all of
them), each running a block of consecutive calls. The ratios are steady-state: medians over the
calls of each block after its first. The first call after switching from another callable pays
for caches and branch predictors the other left cold (after a cvxpy solve ours is 1.5-3× slower
for a call or two); that median is reported as well (``*_first``), for both sides.

Run: ``python validate/bench_simplex_qp.py [--out DIR] [--repeats R]``; writes
``DIR/bench_simplex_qp.{csv,json}`` (default ``runs/bench``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import first_and_steady_time, threads, write_results  # noqa: E402

from fairagg import oracles  # noqa: E402
from fairagg.online import (  # noqa: E402
    aaggff_response,
    aaggff_s_defaults,
    quadratic_ftrl_init,
    quadratic_ftrl_problem,
    quadratic_ftrl_round,
    quadratic_ftrl_step,
    quadratic_ftrl_update,
)
from fairagg.simplex import solve_simplex_qp  # noqa: E402

SIZES = (10, 100, 1000)


def build_problem(K: int, rng: np.random.Generator):
    """AAgFF-S played for t = min(2K, 200) rounds by the learner itself; returns (state and
    Cholesky factor before the last round, g_last, p_last, α, β)."""
    _, alpha, beta = aaggff_s_defaults(K)
    state = quadratic_ftrl_init(K)
    p = np.full(K, 1.0 / K)
    factor = None
    T = min(2 * K, 200)
    for t in range(T):
        losses = rng.lognormal(0.0, 0.5, K)  # client losses with a spread, as in training
        r = aaggff_response(losses, scale=1.0 / K)
        g = -r / (1.0 + p @ r)
        if t == T - 1:
            return state, factor, g, p, alpha, beta
        state, res, factor = quadratic_ftrl_round(state, g, p, alpha, beta, factor=factor)
        p = res.x
    raise AssertionError("unreachable")


def measure(K: int, repeats: int, rng: np.random.Generator) -> dict:
    prev, factor, g, p_prev, alpha, beta = build_problem(K, rng)
    state = quadratic_ftrl_update(prev, g, p_prev)
    A, b = quadratic_ftrl_problem(state, alpha, beta)
    fns = {
        "round": lambda: quadratic_ftrl_round(prev, g, p_prev, alpha, beta, factor=factor),
        "step": lambda: quadratic_ftrl_step(state, alpha, beta, x0=p_prev),
        "cold": lambda: solve_simplex_qp(A, b),
        "cvxpy": lambda: oracles.simplex_qp(A, b),
    }
    n, block = (repeats, 8) if K < 1000 else (max(3, repeats // 5), 3)
    times = first_and_steady_time(fns, n, block)
    ref = oracles.simplex_qp(A, b).x
    results = {
        "round": quadratic_ftrl_round(prev, g, p_prev, alpha, beta, factor=factor).result,
        "step": quadratic_ftrl_step(state, alpha, beta, x0=p_prev),
        "cold": solve_simplex_qp(A, b),
    }
    row = {"K": K, "rounds": min(2 * K, 200), "free": int(K - results["cold"].active_lower.sum())}
    row["t_cvxpy_s"], row["t_cvxpy_first_s"] = times["cvxpy"][1], times["cvxpy"][0]
    for key, res in results.items():
        row[f"iterations_{key}"] = res.iterations
        row[f"t_{key}_s"] = times[key][1]
        row[f"ratio_{key}"] = times["cvxpy"][1] / times[key][1]
        row[f"t_{key}_first_s"] = times[key][0]
        row[f"ratio_{key}_first"] = times["cvxpy"][0] / times[key][0]
        row[f"max_abs_dp_{key}"] = float(np.max(np.abs(res.x - ref)))
        row[f"kkt_residual_{key}"] = res.kkt_residual
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--sizes", type=str, default=",".join(map(str, SIZES)))
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    with threads(1):
        for K in (int(v) for v in args.sizes.split(",")):
            row = measure(K, args.repeats, rng)
            rows.append(row)
            dp = max(row[f"max_abs_dp_{k}"] for k in ("round", "step", "cold"))
            print(
                f"K={K:5d}  free {row['free']:4d}  cvxpy {row['t_cvxpy_s'] * 1e3:7.1f} ms  "
                + "  ".join(
                    f"{k} {row[f't_{k}_s'] * 1e6:7.0f} µs ({row[f'iterations_{k}']} it) "
                    f"{row[f'ratio_{k}']:4.0f}× [first call {row[f'ratio_{k}_first']:3.0f}×]"
                    for k in ("round", "step", "cold")
                )
                + f"  max|Δp| {dp:.1e}",
                flush=True,
            )
    meta = {"machine": platform.processor() or platform.machine(), "repeats": args.repeats}
    write_results(args.out, "bench_simplex_qp", rows, meta)
    print(f"wrote {args.out}/bench_simplex_qp.csv and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
