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

Second part, FedMGDA+'s weights (issue 38): m client updates of dimension d = 10⁴ (a shared
direction plus client noise of client-dependent size: ``--spread 0`` makes them nearly orthogonal,
every weight free), normalised as ``fedmgda_weights`` normalises them, and the time of
``fairagg.simplex.min_norm_weights`` on their Gram matrix (plain simplex, and FedMGDA+'s ε-box
with ε = 0.1 around uniform λ0) against ``fairagg.oracles.simplex_qp`` with
``solver="CLARABEL"`` on the same Gram matrix, as the ratio cvxpy / ours, with our iterations,
KKT residual and the largest |Δλ|. Target: ≥ 2× at m = 1000 and > 1× at m = 100, 300. Each is
timed as the median of ``--mgda-repeats`` calls (one thread; the Gram GEMM is not counted).

Timing, one thread: rounds interleave the callables (so slow phases of a shared machine hit all of
them), each running a block of consecutive calls. The ratios are steady-state: medians over the
calls of each block after its first. The first call after switching from another callable pays
for caches and branch predictors the other left cold (after a cvxpy solve ours is 1.5-3× slower
for a call or two); that median is reported as well (``*_first``), for both sides.

``--load`` ``idle`` (default), ``busy`` (beside a process this benchmark starts spinning on one
core) or ``both``: both parts run under each load in turn, on the same problems, every row
printed labelled ``[idle]`` / ``[busy]`` and a ``load`` column in the CSVs and JSONs.

Run: ``python validate/bench_simplex_qp.py [--out DIR] [--repeats R] [--sizes K,...]
[--mgda-sizes M,...] [--load L]`` (an empty list skips that part); writes
``DIR/bench_simplex_qp.{csv,json}`` and ``DIR/bench_min_norm.{csv,json}`` (default
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
from _bench import (  # noqa: E402
    add_load_argument,
    first_and_steady_time,
    loads,
    threads,
    write_results,
)

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
from fairagg.simplex import min_norm_weights, solve_simplex_qp  # noqa: E402

SIZES = (10, 100, 1000)
MGDA_SIZES = (100, 300, 1000)
MGDA_DIM = 10_000
MGDA_EPSILON = 0.1


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


def normalised_gram(m: int, d: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    """⟨ĝ_i, ĝ_j⟩ for m updates δ_k = spread·u + σ_k z_k (u, z_k standard normal / √d, σ_k
    uniform in [0.5, 3]), as ``fedmgda_weights`` forms it."""
    shared = spread * rng.standard_normal(d) / np.sqrt(d)
    D = shared + rng.standard_normal((m, d)) / np.sqrt(d) * rng.uniform(0.5, 3.0, (m, 1))
    G = D @ D.T
    inv = 1.0 / np.sqrt(np.diag(G))
    return G * inv[:, None] * inv[None, :]


def _median_time(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def measure_min_norm(m: int, spread: float, box: bool, repeats: int, rng) -> dict:
    G = normalised_gram(m, MGDA_DIM, spread, rng)
    lam0 = np.full(m, 1.0 / m)
    lo, hi = (
        (np.maximum(0.0, lam0 - MGDA_EPSILON), np.minimum(1.0, lam0 + MGDA_EPSILON))
        if box
        else (0.0, np.inf)
    )
    ours = min_norm_weights(G, lower=lo, upper=hi)
    ref = oracles.simplex_qp(G, np.zeros(m), lo, hi, solver="CLARABEL")
    t_ours = _median_time(lambda: min_norm_weights(G, lower=lo, upper=hi), repeats)
    t_cvx = _median_time(
        lambda: oracles.simplex_qp(G, np.zeros(m), lo, hi, solver="CLARABEL"), max(1, repeats // 3)
    )
    free = int(m - ours.active_lower.sum() - ours.active_upper.sum())
    return {
        "m": m,
        "d": MGDA_DIM,
        "spread": spread,
        "box": "eps-box" if box else "simplex",
        "free": free,
        "iterations": ours.iterations,
        "t_ours_s": t_ours,
        "t_cvxpy_clarabel_s": t_cvx,
        "ratio": t_cvx / t_ours,
        "kkt_residual": ours.kkt_residual,
        "max_abs_dlambda": float(np.max(np.abs(ours.x - ref.x))),
        "value_ours_minus_cvxpy": float(ours.x @ G @ ours.x - ref.x @ G @ ref.x),
    }


def print_min_norm(row: dict) -> None:
    print(
        f"[{row['load']}] min-norm m={row['m']:5d} d={row['d']} spread {row['spread']:3.1f} "
        f"{row['box']:7s} free {row['free']:4d} ({row['iterations']} it)  "
        f"ours {row['t_ours_s'] * 1e3:8.1f} ms  cvxpy+CLARABEL "
        f"{row['t_cvxpy_clarabel_s'] * 1e3:8.1f} ms  ratio {row['ratio']:5.1f}×  "
        f"KKT {row['kkt_residual']:.1e}  max|Δλ| {row['max_abs_dlambda']:.1e}",
        flush=True,
    )


def print_qp(row: dict) -> None:
    dp = max(row[f"max_abs_dp_{k}"] for k in ("round", "step", "cold"))
    print(
        f"[{row['load']}] K={row['K']:5d}  free {row['free']:4d}  cvxpy "
        f"{row['t_cvxpy_s'] * 1e3:7.1f} ms  "
        + "  ".join(
            f"{k} {row[f't_{k}_s'] * 1e6:7.0f} µs ({row[f'iterations_{k}']} it) "
            f"{row[f'ratio_{k}']:4.0f}× [first call {row[f'ratio_{k}_first']:3.0f}×]"
            for k in ("round", "step", "cold")
        )
        + f"  max|Δp| {dp:.1e}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--sizes", type=str, default=",".join(map(str, SIZES)))
    ap.add_argument("--mgda-sizes", type=str, default=",".join(map(str, MGDA_SIZES)))
    ap.add_argument("--mgda-repeats", type=int, default=5)
    ap.add_argument("--spread", type=str, default="0,0.3", help="shared-direction sizes")
    add_load_argument(ap)
    args = ap.parse_args(argv)
    rows, mgda = [], []
    meta = {
        "machine": platform.processor() or platform.machine(),
        "repeats": args.repeats,
        "load": args.load,
    }
    with threads(1):
        for load in loads(args.load):
            rng = np.random.default_rng(0)  # the same problems under every load
            for m in (int(v) for v in args.mgda_sizes.split(",") if v):
                for spread in (float(v) for v in args.spread.split(",")):
                    for box in (False, True):
                        row = {
                            "load": load,
                            **measure_min_norm(m, spread, box, args.mgda_repeats, rng),
                        }
                        mgda.append(row)
                        print_min_norm(row)
            for K in (int(v) for v in args.sizes.split(",") if v):
                rows.append({"load": load, **measure(K, args.repeats, rng)})
                print_qp(rows[-1])
    if mgda:
        write_results(args.out, "bench_min_norm", mgda, meta)
        print(f"wrote {args.out}/bench_min_norm.csv and .json")
    if rows:
        write_results(args.out, "bench_simplex_qp", rows, meta)
        print(f"wrote {args.out}/bench_simplex_qp.csv and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
