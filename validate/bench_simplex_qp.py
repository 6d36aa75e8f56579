"""Benchmark: the exact AAgFF-S step against cvxpy solving the same QP.

What it shows: for K clients, an AAgFF-S quadratic-FTRL problem after t = min(2K, 200) rounds
(gradients of random CDF-bounded responses, decisions from the learner itself), the time of

- ``cold``: :func:`fairagg.simplex.solve_simplex_qp` from scratch (it factorises A to prove it
  positive definite and to guess the active set, then runs the active-set method);
- ``step``: the AAgFF-S step as the rule runs it, :func:`fairagg.online.quadratic_ftrl_step`
  warm-started at the previous round's decision;
- ``cvxpy``: :func:`fairagg.oracles.simplex_qp` on the same (A, b) (OSQP, polished, tight), the
  independent check a user would otherwise write;

as time ratios cvxpy / ours, and the largest |Δp| between our answer and cvxpy's. Target (issue 3):
at least 100× at K = 100 with |Δp| ≤ 1e-9.

Timing, one thread: rounds interleave the three callables (so slow phases of a shared machine hit
all of them), each running a block of consecutive calls. The ratios (the target) are steady-state:
medians over the calls of each block after its first. The first call after switching from another
callable pays for caches and branch predictors the other left cold (after a cvxpy solve the step
is 1.5-3× slower for a call or two); its median is reported as well (``*_first``), for both sides.

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
    quadratic_ftrl_step,
    quadratic_ftrl_update,
)
from fairagg.simplex import solve_simplex_qp  # noqa: E402

SIZES = (10, 100, 1000)


def build_problem(K: int, rng: np.random.Generator):
    """AAgFF-S sums after t = min(2K, 200) rounds of the learner itself; returns
    (state before the last round, g_last, p_last, α, β)."""
    _, alpha, beta = aaggff_s_defaults(K)
    state = quadratic_ftrl_init(K)
    p = np.full(K, 1.0 / K)
    T = min(2 * K, 200)
    for t in range(T):
        losses = rng.lognormal(0.0, 0.5, K)  # client losses with a spread, as in training
        r = aaggff_response(losses, scale=1.0 / K)
        g = -r / (1.0 + p @ r)
        if t == T - 1:
            return state, g, p, alpha, beta
        state = quadratic_ftrl_update(state, g, p)
        p = quadratic_ftrl_step(state, alpha, beta, x0=p).x
    raise AssertionError("unreachable")


def measure(K: int, repeats: int, rng: np.random.Generator) -> dict:
    state, g, p_prev, alpha, beta = build_problem(K, rng)
    state = quadratic_ftrl_update(state, g, p_prev)
    A, b = quadratic_ftrl_problem(state, alpha, beta)
    fns = {
        "cold": lambda: solve_simplex_qp(A, b),
        "step": lambda: quadratic_ftrl_step(state, alpha, beta, x0=p_prev),
        "cvxpy": lambda: oracles.simplex_qp(A, b),
    }
    n, block = (repeats, 8) if K < 1000 else (max(3, repeats // 5), 3)
    times = first_and_steady_time(fns, n, block)
    ours = solve_simplex_qp(A, b)
    step = quadratic_ftrl_step(state, alpha, beta, x0=p_prev)
    ref = oracles.simplex_qp(A, b).x
    return {
        "K": K,
        "rounds": min(2 * K, 200),
        "free": int(K - ours.active_lower.sum()),
        "iterations_cold": ours.iterations,
        "iterations_step": step.iterations,
        "t_cold_s": times["cold"][1],
        "t_step_s": times["step"][1],
        "t_cvxpy_s": times["cvxpy"][1],
        "ratio_cold": times["cvxpy"][1] / times["cold"][1],
        "ratio_step": times["cvxpy"][1] / times["step"][1],
        "t_cold_first_s": times["cold"][0],
        "t_step_first_s": times["step"][0],
        "t_cvxpy_first_s": times["cvxpy"][0],
        "ratio_cold_first": times["cvxpy"][0] / times["cold"][0],
        "ratio_step_first": times["cvxpy"][0] / times["step"][0],
        "max_abs_dp_cold": float(np.max(np.abs(ours.x - ref))),
        "max_abs_dp_step": float(np.max(np.abs(step.x - ref))),
        "kkt_residual": ours.kkt_residual,
    }


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
            print(
                f"K={K:5d}  free {row['free']:4d}  cold {row['t_cold_s'] * 1e6:9.0f} µs "
                f"({row['iterations_cold']} it)  step {row['t_step_s'] * 1e6:9.0f} µs "
                f"({row['iterations_step']} it)  cvxpy {row['t_cvxpy_s'] * 1e3:8.1f} ms  "
                f"ratio cold {row['ratio_cold']:6.0f}×  step {row['ratio_step']:6.0f}×  "
                f"max|Δp| {max(row['max_abs_dp_cold'], row['max_abs_dp_step']):.1e}  "
                f"(first call after switching: cold {row['ratio_cold_first']:.0f}×, "
                f"step {row['ratio_step_first']:.0f}×)",
                flush=True,
            )
    meta = {"machine": platform.processor() or platform.machine(), "repeats": args.repeats}
    write_results(args.out, "bench_simplex_qp", rows, meta)
    print(f"wrote {args.out}/bench_simplex_qp.csv and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
