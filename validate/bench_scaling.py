"""Benchmark: how one aggregation step of every registered rule grows with m, d and K.

What it shows (issue 38, item 7): for every rule in ``fairagg.rules.RULES``, the median wall time
of one call of the rule's ``step`` (built by ``make_rule(name, backend=...)``) on synthetic
reports of the right shapes (updates or, for the rules whose clients report gradients, gradients:
an (m, d) float64 array of standard normals with row scales in [0.5, 2); losses in [0.1, 2);
sizes, accuracies and participation counts at random), as

- ``m`` grows (clients in the round; d = 10⁴, K = m),
- ``d`` grows (parameters; m = 100),
- ``K`` grows, for the full-participation rules (``RuleSpec.full_participation``: m = K,
  d = 100), which replaces their m axis,

from a state one round old (AAgFF-S: ``--rounds`` rounds old, each with other losses, so that its
FTRL sums hold that many gradients). Per rule, backend, load and axis, the exponent fitted by least
squares of log time on log size is printed (``time ∝ size^exponent``), and the same fit of the
baseline's times beside it.

Every row is timed beside its baseline, interleaved with it in the same process (so that a slow
phase of a shared machine hits both), and printed as their ratio:

- linear rules (every rule but the three below): the memory-read roofline, i.e. the time of
  ``_bench.read_probe`` summing the reports' (m, d) array itself (m·d·8 bytes; as
  ``bench_aggregation.py`` probes the weighted sum). A rule that reads its reports once and does
  O(m·d) work runs at 1.0×; below m·d ≈ 10⁶ the array sits in cache and the step's fixed cost
  (validation, Python) dominates, so the ratio there measures overhead, not bandwidth;
- Gram-based rules (fedfv, fedmgda): the roofline max(m(m + 1)·d / peak GEMM rate,
  2·m·d·8 / read bandwidth), with the peak from a square float64 ``A @ A`` (n = 1200, 2n³ flops)
  and the bandwidth from ``read_probe`` on the reports, both timed with the step (SYRK computes
  one triangle of D Dᵀ, m(m + 1)/2 dot products of 2d flops; the updates are read twice: once for
  D Dᵀ, once by the final weighted sum; as ``bench_fedfv.py`` counts them);
- FedMGDA+'s weights (the m axis): ``fairagg.simplex.min_norm_weights`` on the normalised Gram
  matrix of the round, with FedMGDA+'s ε-box (ε = 0.1 around λ0 = n/Σn), against cvxpy with
  ``solver="CLARABEL"`` (``fairagg.oracles.simplex_qp``) on the same matrix and box, as in
  ``bench_simplex_qp.py`` (both on one thread, as there; the Gram matrix is not counted);
  printed as cvxpy / ours, with the largest |Δλ|;
- AAgFF-S on its K axis: the dense FTRL solve of the same round (``quadratic_ftrl_round`` on the
  K × K sums built from the same gradients and decisions, with the Cholesky factor kept from the
  round before, as ``bench_aaggff.py`` runs it) where K ≤ ``--dense-max`` (the dense sums take
  K²·8 bytes a copy and several copies; at K = 10⁴, 800 MB each), with the largest |Δp| between
  the two decisions; above it the row has no baseline. From K = 512 the rule keeps its sums
  low-rank (``fairagg.rules.aaggff.LOW_RANK_CLIENTS``), below it dense: there the ratio is ≈ 1.

Timing: every callable is called once untimed (compilation, page faults), then ``--repeats``
interleaved rounds, fewer where the first calls of a row took long (about ``BUDGET_S`` seconds of
timed calls a row, at least one round); with more than one thread, on the rows that run BLAS (the
numpy backend, the Gram rules), 0.1 s of sleep before each call of the read probe, so that idle
OpenBLAS threads stop spinning before the probe runs on fairagg's threads. Threads: Numba and
BLAS pinned to ``--threads`` (default: every core this process may use, as an experiment runs).

Backends: ``--backend`` (default ``auto``: the backend an experiment's ``backend="auto"`` picks,
numba on a CPU, cuda where numba sees a GPU) and the comparison rows of ``--compare`` (default
``numpy``, the specification; empty for none). ``--load {idle,busy,both}``: on the machine as it
is, beside a process spinning on one core, or both (every row then printed twice, labelled).

Run: ``python validate/bench_scaling.py [--quick] [--rules a,b] [--backend B] [--compare B,...]
[--repeats R] [--rounds T] [--dense-max K] [--threads N] [--load L] [--out DIR]``; writes
``DIR/bench_scaling.{csv,json,png}`` (the JSON's meta holds the fitted exponents, also in
``DIR/bench_scaling_exponents.csv``; default ``runs/bench``). The default run took 320 s on two
cores busy with other jobs (load average 3-10); ``--quick``: small sizes for a smoke test.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import add_load_argument, loads, read_probe, threads, write_results  # noqa: E402
from _output import log, write_csv  # noqa: E402

from fairagg import oracles  # noqa: E402
from fairagg.kernels import available_backends, gram  # noqa: E402
from fairagg.online import (  # noqa: E402
    QuadraticFTRL,
    aaggff_response,
    aaggff_s_defaults,
    quadratic_ftrl_round,
)
from fairagg.rules import RULES, make_rule  # noqa: E402
from fairagg.simplex import min_norm_weights  # noqa: E402
from fairagg.types import make_reports  # noqa: E402

NAME = "bench_scaling"
#: Sizes of each axis, and the other dimensions held fixed on it.
M_SIZES, M_AXIS_D = (10, 100, 1000), 10**4
D_SIZES, D_AXIS_M = (10**4, 10**5, 10**6), 100
K_SIZES, K_AXIS_D = (100, 1000, 10**4), 100
#: ``--quick``: the same axes at small sizes (K up to past LOW_RANK_CLIENTS = 512).
QUICK_M, QUICK_M_D = (4, 16, 64), 2000
QUICK_D, QUICK_D_M = (1000, 4000, 16000), 8
QUICK_K, QUICK_K_D = (16, 64, 600), 20
#: Rules whose step forms the Gram matrix of the updates.
GRAM_RULES = ("fedfv", "fedmgda")
#: FedMGDA+'s ε (its default) for the weights' comparison with cvxpy.
MGDA_EPSILON = 0.1
#: Side of the square matmul that measures the peak GEMM rate.
PEAK_N = 1200
#: About this many seconds of timed calls per row (at least one interleaved round).
BUDGET_S = 2.0
#: Sleep before each call of the read probe on rows that run BLAS with more than one thread.
SETTLE_S = 0.1


def fit_exponent(sizes: Any, times: Any) -> float:
    """The exponent b of the least-squares fit log t = a + b log n: time ∝ size^b.

    Parameters
    ----------
    sizes, times : array_like, shape (n,)
        At least two distinct sizes, all sizes and times > 0.
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if n.ndim != 1 or n.shape != t.shape or n.size < 2 or np.unique(n).size < 2:
        raise ValueError("need at least two distinct sizes, one time each")
    if not (np.all(np.isfinite(n) & (n > 0)) and np.all(np.isfinite(t) & (t > 0))):
        raise ValueError("sizes and times must be finite and > 0")
    return float(np.polyfit(np.log(n), np.log(t), 1)[0])


def resolve(backend: str) -> str:
    """``backend``, or for ``"auto"`` the backend an experiment's ``backend="auto"`` runs on."""
    if backend != "auto":
        return backend
    try:  # the experiment's own resolution, where this fairagg has it
        from fairagg.kernels import resolve_backend
    except ImportError:
        return "cuda" if "cuda" in available_backends() else "numba"
    return resolve_backend("auto")


def make_round(m: int, d: int, K: int, seed: int) -> tuple[np.ndarray, Any]:
    """θ and the reports of one round of m of K clients, d parameters (module docstring)."""
    rng = np.random.default_rng([seed, m, d])
    D = rng.standard_normal((m, d))
    D *= rng.uniform(0.5, 2.0, (m, 1))
    reports = make_reports(
        D,
        rng.integers(1, 200, m),
        losses=rng.uniform(0.1, 2.0, m),
        accuracies=rng.uniform(0.1, 0.95, m),
        participations=rng.integers(1, 5, m),
        client_ids=np.arange(m),
        num_clients=K,
        lr=0.05,
    )
    return rng.standard_normal(d), reports


def for_rule(name: str, reports: Any) -> Any:
    """The reports as rule ``name``'s clients send them: gradients instead of updates where the
    rule's clients report gradients."""
    if make_rule(name).local.report == "gradients":
        return reports._replace(deltas=None, gradients=reports.deltas)
    return reports


def timed(
    fns: dict[str, Callable[[], object]], repeats: int, settle: float = 0.0
) -> tuple[dict[str, float], int]:
    """Medians of interleaved calls of each callable after one untimed call each, and the
    number of rounds run: ``repeats``, fewer where one round would exceed ``BUDGET_S``. Where the
    untimed calls alone took ``BUDGET_S`` (seconds a call; the callers have already run each
    callable once, so these calls are warm), they are the sample."""
    first = {}
    for key, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        first[key] = time.perf_counter() - t0
    t_first = sum(first.values())
    if (
        t_first >= BUDGET_S
    ):  # seconds a call: the calls above (after a warm-up round) are the sample
        return first, 1
    n = max(1, min(repeats, int(BUDGET_S / max(t_first, 1e-9))))
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(n):
        for key, fn in fns.items():
            if settle and key == "probe":  # after the step or a BLAS call, before Numba's threads
                time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}, n


def warm_state(rule: Any, theta: np.ndarray, reports: Any, K: int) -> Any:
    """The rule's state after one round of ``reports`` (the round compiles its kernels)."""
    return rule.step(theta, reports, rule.init(theta, K)).state


def aaggff_rounds(
    rule: Any, theta: np.ndarray, reports: Any, K: int, rounds: int, dense: bool, seed: int
) -> tuple[Any, dict | None]:
    """AAgFF-S's state after ``rounds`` rounds of other losses, and (``dense``) the dense FTRL
    sums, Cholesky factor and round inputs of the next round, built from the same gradients and
    decisions: the dense solve of the round the rule's next step solves."""
    rng = np.random.default_rng([seed, K, 1])
    _, alpha, beta = aaggff_s_defaults(K)
    state = rule.init(theta, K)
    ftrl = QuadraticFTRL(np.zeros(K), np.zeros((K, K)), np.zeros(K), 0) if dense else None
    factor = None
    for _ in range(rounds):
        p = state.p
        agg = rule.step(theta, reports._replace(losses=rng.uniform(0.1, 2.0, K)), state)
        if dense:
            r = agg.info["response"]
            ftrl, _, factor = quadratic_ftrl_round(
                ftrl, -r / (1.0 + p @ r), p, alpha, beta, factor=factor
            )
        state = agg.state
    if not dense:
        return state, None
    r = aaggff_response(reports.losses, scale=1.0 / K)
    g = -r / (1.0 + state.p @ r)
    return state, {"ftrl": ftrl, "factor": factor, "g": g, "p": state.p, "ab": (alpha, beta)}


def mgda_qp(reports: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FedMGDA+'s QP of the round: the normalised Gram matrix and the ε-box around λ0."""
    D = reports.deltas
    G = gram(D, "numpy")
    inv = 1.0 / np.sqrt(np.diag(G))
    G = G * inv[:, None] * inv[None, :]
    n = np.asarray(reports.num_samples, dtype=np.float64)
    lam0 = n / n.sum()
    return G, np.maximum(0.0, lam0 - MGDA_EPSILON), np.minimum(1.0, lam0 + MGDA_EPSILON)


def measure(
    name: str,
    axis: str,
    theta: np.ndarray,
    reports: Any,
    backend: str,
    args: argparse.Namespace,
    with_qp: bool = True,
    cache: dict | None = None,
) -> dict:
    """One row: the rule's step on ``backend`` beside its baseline (and, for FedMGDA+ on the m
    axis with ``with_qp``, its weights' QP beside cvxpy's)."""
    D = reports.deltas if reports.deltas is not None else reports.gradients
    m, d = D.shape
    K = reports.num_clients
    rule = make_rule(name, backend=backend)
    row: dict[str, Any] = {"rule": name, "axis": axis, "m": m, "d": d, "K": K, "backend": backend}
    flat = D.reshape(-1)
    fns: dict[str, Callable[[], object]] = {}
    dense = None
    if name == "aaggff-s":
        # the played rounds are the same on every backend (it only runs the final weighted sum):
        # played once per size where the caller keeps a ``cache``
        want_dense = axis == "K" and K <= args.dense_max
        if cache is not None and name in cache:
            state, dense = cache[name]
        else:
            state, dense = aaggff_rounds(
                rule, theta, reports, K, args.rounds, want_dense, args.seed
            )
            if cache is not None:
                cache[name] = state, dense
    else:
        state = warm_state(rule, theta, reports, K)
    fns["step"] = lambda: rule.step(theta, reports, state)
    if dense is not None:
        a, b = dense["ab"]
        fns["dense"] = lambda: quadratic_ftrl_round(
            dense["ftrl"], dense["g"], dense["p"], a, b, factor=dense["factor"]
        )
        row["baseline"] = "dense FTRL solve"
    elif name == "aaggff-s" and axis == "K":
        row["baseline"] = f"none (dense sums {K * K * 8 / 1e6:.0f} MB a copy > --dense-max)"
    else:
        fns["probe"] = lambda: read_probe(flat)
        if name in GRAM_RULES:
            A = np.random.default_rng(1).standard_normal((PEAK_N, PEAK_N))
            fns["peak"] = lambda: A @ A
            row["baseline"] = "roofline: SYRK at the GEMM rate, two reads"
        else:
            row["baseline"] = "roofline: one read"
    blas = backend == "numpy" or name in GRAM_RULES
    settle = SETTLE_S if args.threads > 1 and blas else 0.0
    t, n = timed(fns, args.repeats, settle)
    row["repeats"] = n
    row["t_step_s"] = t["step"]
    if "dense" in t:
        row["t_baseline_s"] = t["dense"]
        p_rule = rule.step(theta, reports, state).info["p"]
        p_dense = fns["dense"]().result.x
        row["max_abs_dp"] = float(np.max(np.abs(p_rule - p_dense)))
    elif "probe" in t:
        bw = D.nbytes / t["probe"]
        row["probe_GBps"] = bw / 1e9
        if "peak" in t:
            peak = 2 * PEAK_N**3 / t["peak"]
            row["peak_GFLOPs"] = peak / 1e9
            row["t_baseline_s"] = max(m * (m + 1) * d / peak, 2 * D.nbytes / bw)
        else:
            row["t_baseline_s"] = t["probe"]
    if "t_baseline_s" in row:
        row["step_over_baseline"] = row["t_step_s"] / row["t_baseline_s"]
    if name == "fedmgda" and axis == "m" and with_qp:
        G, lo, hi = mgda_qp(reports)
        with threads(1):  # as bench_simplex_qp.py times them
            q, _ = timed(
                {
                    "ours": lambda: min_norm_weights(G, lower=lo, upper=hi),
                    "cvxpy": lambda: oracles.simplex_qp(G, np.zeros(m), lo, hi, solver="CLARABEL"),
                },
                args.repeats,
            )
        ours = min_norm_weights(G, lower=lo, upper=hi).x
        ref = oracles.simplex_qp(G, np.zeros(m), lo, hi, solver="CLARABEL").x
        row |= {
            "t_qp_s": q["ours"],
            "t_cvxpy_clarabel_s": q["cvxpy"],
            "cvxpy_over_qp": q["cvxpy"] / q["ours"],
            "max_abs_dlambda": float(np.max(np.abs(ours - ref))),
        }
    return row


def axes_of(name: str, quick: bool) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """The axes of rule ``name`` and their (m, d, K) points."""
    ms, md = (QUICK_M, QUICK_M_D) if quick else (M_SIZES, M_AXIS_D)
    ds, dm = (QUICK_D, QUICK_D_M) if quick else (D_SIZES, D_AXIS_M)
    ks, kd = (QUICK_K, QUICK_K_D) if quick else (K_SIZES, K_AXIS_D)
    first = (
        ("K", [(k, kd, k) for k in ks])
        if RULES[name].full_participation
        else ("m", [(m, md, m) for m in ms])
    )
    return [first, ("d", [(dm, d, dm) for d in ds])]


def size_of(row: dict) -> int:
    return int(row[row["axis"]])


def exponents(rows: list[dict]) -> list[dict]:
    """Fitted exponents of the step and of its baseline, per rule, backend, load and axis."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["rule"], r["backend"], r["load"], r["axis"]), []).append(r)
    for (rule, backend, load, axis), sel in groups.items():
        if len({size_of(r) for r in sel}) < 2:
            continue
        sizes = [size_of(r) for r in sel]
        e = {"rule": rule, "backend": backend, "load": load, "axis": axis}
        e["sizes"] = "/".join(str(s) for s in sizes)
        e["exponent_step"] = fit_exponent(sizes, [r["t_step_s"] for r in sel])
        base = [r for r in sel if r.get("t_baseline_s", "") != ""]
        e["exponent_baseline"] = (
            fit_exponent([size_of(r) for r in base], [r["t_baseline_s"] for r in base])
            if len({size_of(r) for r in base}) >= 2
            else ""
        )
        out.append(e)
    return out


def fmt_ms(v: Any) -> str:
    return "" if v == "" or v is None else f"{v * 1e3:.3g}"


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'load':<5} {'rule':<12}{'backend':<8}{'axis':<5}{'m':>6}{'d':>9}{'K':>7}"
        f"{'step ms':>10}{'base ms':>10}{'× base':>8}  baseline / notes"
    )
    for r in rows:
        ratio = r.get("step_over_baseline", "")
        notes = r["baseline"]
        if r.get("t_qp_s", "") != "":
            notes += (
                f"; weights: ours {r['t_qp_s'] * 1e3:.3g} ms, cvxpy+CLARABEL "
                f"{r['t_cvxpy_clarabel_s'] * 1e3:.3g} ms: cvxpy / ours "
                f"{r['cvxpy_over_qp']:.1f}× (max|Δλ| {r['max_abs_dlambda']:.1e})"
            )
        if r.get("max_abs_dp", "") != "":
            notes += f" (max|Δp| {r['max_abs_dp']:.1e})"
        print(
            f"{r['load']:<5} {r['rule']:<12}{r['backend']:<8}{r['axis']:<5}{r['m']:>6}{r['d']:>9}"
            f"{r['K']:>7}{fmt_ms(r['t_step_s']):>10}{fmt_ms(r.get('t_baseline_s', '')):>10}"
            f"{'' if ratio == '' else f'{ratio:.2f}':>8}  {notes}"
        )


def print_exponents(exps: list[dict]) -> None:
    print("Fitted exponents (least squares of log time on log size; time ∝ size^b)")
    print(f"{'load':<5} {'rule':<12}{'backend':<8}{'axis':<5}{'sizes':>18}{'step':>7}{'base':>7}")
    for e in exps:
        b = e["exponent_baseline"]
        print(
            f"{e['load']:<5} {e['rule']:<12}{e['backend']:<8}{e['axis']:<5}{e['sizes']:>18}"
            f"{e['exponent_step']:>7.2f}{'' if b == '' else f'{b:.2f}':>7}"
        )


def plot(rows: list[dict], path: Path, backend: str) -> None:
    """Log-log step time against size, one panel per axis, one line per rule (``backend``'s
    rows, first load); dotted: the roofline and dense baselines."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    sel = [r for r in rows if r["backend"] == backend and r["load"] == rows[0]["load"]]
    axes_names = list(dict.fromkeys(r["axis"] for r in sel))
    fig, axs = plt.subplots(1, len(axes_names), figsize=(5.5 * len(axes_names), 5), squeeze=False)
    cmap = plt.get_cmap("tab20")
    rules = list(dict.fromkeys(r["rule"] for r in sel))
    for ax, axis in zip(axs[0], axes_names, strict=True):
        for i, rule in enumerate(rules):
            pts = [r for r in sel if r["rule"] == rule and r["axis"] == axis]
            if not pts:
                continue
            color = cmap(i % 20)
            ax.plot([size_of(r) for r in pts], [r["t_step_s"] for r in pts], "o-",
                    color=color, label=rule)  # fmt: skip
            base = [r for r in pts if r.get("t_baseline_s", "") != ""]
            if base:
                ax.plot([size_of(r) for r in base], [r["t_baseline_s"] for r in base], ":",
                        color=color)  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        fixed = {"m": "d = {d}", "d": "m = {m}", "K": "m = K, d = {d}"}[axis]
        first = next(r for r in sel if r["axis"] == axis)
        ax.set_title(f"step time against {axis} ({fixed.format(**first)})")
        ax.set_xlabel(axis)
        ax.set_ylabel("seconds per step (dotted: baseline)")
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"One aggregation step per rule, backend {backend}, load {sel[0]['load']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--rules", type=str, default="", help="comma list (default: every rule)")
    ap.add_argument("--backend", default="auto", choices=("auto", "numpy", "numba", "cuda"))
    ap.add_argument("--compare", type=str, default="numpy", help="comparison backends, comma list")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20, help="AAgFF-S's rounds before the step")
    ap.add_argument("--dense-max", type=int, default=2000, help="largest K of the dense solve")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--seed", type=int, default=0)
    add_load_argument(ap)
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.threads < 1 or args.rounds < 1:
        ap.error("--repeats, --threads and --rounds must be >= 1")
    rules = [r for r in args.rules.split(",") if r] or list(RULES)
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        ap.error(f"unknown rule(s) {', '.join(unknown)}; choose from {', '.join(RULES)}")
    args.rule_list = rules
    main_backend = resolve(args.backend)
    args.backends = list(dict.fromkeys([main_backend, *(b for b in args.compare.split(",") if b)]))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    # every (axis, m, d, K) point once, the rules that use it, smallest first
    points: dict[tuple, list[str]] = {}
    for name in args.rule_list:
        for axis, pts in axes_of(name, args.quick):
            for m, d, K in pts:
                points.setdefault((axis, m, d, K), []).append(name)
    order = sorted(points, key=lambda p: (p[1] * p[2], p))
    rows: list[dict] = []
    with threads(args.threads):
        for load in loads(args.load):
            log(f"load {load}: {len(order)} sizes, backends {', '.join(args.backends)}")
            for axis, m, d, K in order:
                theta, base = make_round(m, d, K, args.seed)
                for name in points[(axis, m, d, K)]:
                    reports, cache = for_rule(name, base), {}
                    for i, backend in enumerate(args.backends):
                        row = measure(
                            name, axis, theta, reports, backend, args, with_qp=i == 0, cache=cache
                        )
                        row = {"load": load, "threads": args.threads, **row}
                        rows.append(row)
                        log(
                            f"  {load} {name} {backend} {axis}: m={m} d={d} K={K} step "
                            f"{row['t_step_s'] * 1e3:.3g} ms"
                        )
                del theta, base
    elapsed = time.perf_counter() - start
    keys = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{k: r.get(k, "") for k in keys} for r in rows]
    rank = {name: i for i, name in enumerate(args.rule_list)}
    loads_rank = {"idle": 0, "busy": 1}
    rows.sort(
        key=lambda r: (loads_rank[r["load"]], rank[r["rule"]], r["axis"] == "d", r["backend"]
                       != args.backends[0], size_of(r))
    )  # fmt: skip
    exps = exponents(rows)
    print(
        f"One aggregation step per rule; backend {args.backends[0]} (--backend {args.backend})"
        + (f", compared with {', '.join(args.backends[1:])}" if args.backends[1:] else "")
        + f"; {args.threads} thread(s); medians of interleaved calls, each beside its baseline"
    )
    print_rows(rows)
    print()
    print_exponents(exps)
    meta = {
        "machine": platform.processor() or platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        "threads": args.threads,
        "backend_option": args.backend,
        "backends": args.backends,
        "load": args.load,
        "quick": args.quick,
        "repeats": args.repeats,
        "aaggff_rounds": args.rounds,
        "dense_max": args.dense_max,
        "seed": args.seed,
        "seconds": elapsed,
        "exponents": exps,
    }
    write_results(args.out, NAME, rows, meta)
    write_csv(args.out / f"{NAME}_exponents.csv", exps)
    plot(rows, args.out / f"{NAME}.png", args.backends[0])
    print(
        f"total {elapsed:.0f} s; wrote {args.out}/{NAME}.csv, .json, .png and {NAME}_exponents.csv"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
