"""Benchmark: FedFV's Gram-matrix path against the direct vector path and against its roofline.

What it shows: for m client updates of length d (float64, a C-contiguous (m, d) array), the median
wall time of one ``fairagg.rules.fedfv.fedfv_direction`` call with ``method="vector"`` (Algs.
2-3 on d-vectors, O(m² d) sequential BLAS-1 work) and with ``method="gram"`` on
``backend="numba"``, the fastest CPU backend (G = D Dᵀ by ``kernels.gram``: a register-tiled
Numba pass up to ``kernels.cpu.GRAM_MAX_M`` rows, OpenBLAS's SYRK above; O(m³) work on G;
one (2, m) × (m, d) product for ḡ and the mean update), their ratio vector / gram, and the
largest |g_gram − g_vector| over ‖(1/m) Σ_k δ_k‖ (asserted ≤ 1e-10; the
script stops before timing otherwise). The heaviest setting: α = 0 (every client projected),
τ = 0, no history. Updates δ_k = r_k (z_k + s_k w), z_k and w standard normal, s_k = ±1 at random
(so about half the pairs conflict), r_k log-normal (σ = 1); random losses; seed fixed per (m, d).
Targets (issue): vector / gram at least 20× at m = 100, d = 10⁵; the Gram path within 1.3× of
its roofline at m = 100, d ∈ {10⁵, 10⁶}.

Roofline, measured in the same run (interleaved with the two methods so that the machine's noise
hits all of them): the peak GEMM rate (a square float64 ``A @ A``, n = 1200, 2n³ flops) and the
read bandwidth (``_bench.read_probe`` summing the (m, d) updates themselves, as
``bench_aggregation.py`` probes an array of m·d float64). The Gram path's work: m(m + 1)·d flops
for D Dᵀ (one triangle: m(m + 1)/2 dot products of length d at 2d flops each, an FMA counted as
2, as SYRK computes it; a full (m, d) × (d, m) GEMM would be 2m²·d), 4md for the (2, m) × (m, d)
product, 4m³ for the loop on G; its unavoidable traffic: the updates read twice, 2·m·d·8 bytes
(once for D Dᵀ, once by the final product). Roofline time = max(flops / peak, bytes /
bandwidth); ``× roof`` is the Gram path's time over it, 1.0 = at the limit. The table also gives
the achieved rate of the Gram matrix alone (``kernels.gram`` as the path calls it, same count;
column ``DDᵀ``, with ``DDᵀ by`` naming the code that computed it: the Numba kernel or SYRK) as a
fraction of the peak, and the shares of
the Gram path's time taken by the Gram matrix, by the final product
(timed alone: the path's blocked W @ D for a random (2, m) W) and by the rest (Python, O(m³),
O(d) vector work; the path checks finiteness on the Gram diagonal, not by another pass). The
parts are timed apart from the whole, so on a noisy machine the rest can come out negative.
``× parts`` = gram / (DDᵀ + final product): what the code adds to the two passes over the
updates it cannot avoid (the final product is a Numba kernel, ``kernels.cpu.two_combinations``).

Threads: everything runs pinned to ``--threads`` (default 1) BLAS and Numba threads, so that the
ratios compare code, not core counts. On the shared 2-vCPU machine this was written on (load 2-3
from other work), two BLAS threads gave no faster square GEMM, and OpenBLAS's threaded SYRK at
(m, d) = (100, 10⁵) ran 10-40× slower than one thread, erratically. With more than one thread the
repeats sleep 0.2 s before each switch of callable (``median_time``'s ``settle``), so that idle
OpenBLAS threads stop spinning before the Numba probe runs.

``--load`` ``idle`` (default), ``busy`` (beside a process this benchmark starts spinning on one
core) or ``both``: every case measured under each load in turn, the tables and target lines
printed per load, labelled ``[idle]`` / ``[busy]``, and a ``load`` column in the CSV and JSON.

Default path (issue 38 item 3): for every case, after the pinned table, the step of the
FedFV rule an experiment runs, ``rule.step`` of the rule ``fairagg.simulate("fedfv", ...)``
builds (``backend="auto"``, numba on a CPU; the defaults α = 0.1, τ = 1; m = K, from the
rule's initial state), on every thread the process has (``--threads`` does not pin it), against
the roofline on those threads: the same flops at the peak GEMM rate measured with BLAS's default
threads, and 3·m·d·8 bytes at the read probe's rate, since the step reads the updates for DDᵀ and
for W @ D and, with τ = 1, writes a copy of them into the rule's state for the next round's
window (on numba the Gram kernel writes it as it reads the updates). The copy goes into memory
that the rule reuses once nothing reaches it any more (``fairagg.rules.fedfv._BufferPool``): the
repeats step one state and drop each result, as a run drops each state once it has stepped it,
so from the second step on the copy is written into memory an earlier step wrote, not into
memory the system must map and zero first. The shares ``DDᵀ+copy`` (that pass alone:
``kernels.cpu._gram_and_copy`` into an array written before, or the Gram matrix then a copy
above ``GRAM_MAX_M``), ``final`` (W @ D alone, on the rule's backend) and ``rest`` say what the
step's time is made of. Written to ``DIR/bench_fedfv_default.{csv,json}``.

Run: ``python validate/bench_fedfv.py [--quick] [--out DIR] [--threads N] [--repeats R]
[--cases 10x100000,100x1000000] [--load L]``; writes ``DIR/bench_fedfv.{csv,json}`` (default
``runs/bench``).
The full run (four cases, m ∈ {10, 100} × d ∈ {10⁵, 10⁶}; 3 repeats of the slowest, whose vector
call takes about 10 s) took 90-100 s on two shared cores; ``--quick`` runs only d = 10⁵ with fewer
repeats (under 10 s).
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
    LOADS,
    add_load_argument,
    loads,
    median_time,
    parse_cases,
    read_probe,
    threads,
    write_results,
)

from fairagg.kernels import gram  # noqa: E402
from fairagg.kernels._threads import num_threads as numba_num_threads  # noqa: E402
from fairagg.kernels.cpu import GRAM_MAX_M, _gram_and_copy, use_gram_kernel  # noqa: E402
from fairagg.rules.fedfv import _combine, fedfv_direction  # noqa: E402

#: (m, d, repeats): the vector call at (100, 10⁶) takes several seconds, so few repeats there.
CASES = ((10, 10**5, 15), (100, 10**5, 5), (10, 10**6, 5), (100, 10**6, 3))
QUICK = ((10, 10**5, 5), (100, 10**5, 2))
#: The largest max|g_gram − g_vector| / ‖mean update‖ accepted.
AGREE_TOL = 1e-10
#: Side of the square matmul that measures the peak GEMM rate.
PEAK_N = 1200
#: The issue's target: vector / gram at least this at (m, d) = TARGET_CASE.
TARGET_RATIO = 20.0
TARGET_CASE = (100, 10**5)
#: The issue's roofline target: the Gram path at most this × its roofline at TARGET_ROOF_CASES.
TARGET_ROOF = 1.3
TARGET_ROOF_CASES = ((100, 10**5), (100, 10**6))


def make_round(m: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Updates with many conflicts, δ_k = r_k (z_k + s_k w), and random losses (module doc)."""
    rng = np.random.default_rng([seed, m, d])
    w = rng.standard_normal(d)
    signs = rng.choice([-1.0, 1.0], m)
    scale = rng.lognormal(0.0, 1.0, m)
    D = rng.standard_normal((m, d))
    for k in range(m):  # in place, row by row: no (m, d) temporaries at 800 MB
        D[k] += signs[k] * w
        D[k] *= scale[k]
    return D, rng.random(m)


def measure(m: int, d: int, repeats: int, seed: int = 0, settle: float = 0.0) -> dict:
    """One row of the table: agreement, medians of the methods and of the roofline probes."""
    D, losses = make_round(m, d, seed)
    kw = {"alpha": 0.0, "tau": 0}
    res = {
        "gram": fedfv_direction(D, losses, method="gram", backend="numba", **kw),
        "vector": fedfv_direction(D, losses, method="vector", **kw),
    }
    mean_norm = float(np.linalg.norm(D.mean(axis=0)))
    err = float(np.max(np.abs(res["gram"].direction - res["vector"].direction))) / mean_norm
    if not err <= AGREE_TOL:
        raise AssertionError(
            f"m={m}, d={d}: gram and vector directions differ by {err:.2e} of the mean update's "
            f"norm (> {AGREE_TOL:g})"
        )
    rng = np.random.default_rng([seed, m, d, 1])
    W = rng.standard_normal((2, m))  # the final product's left factor: (ḡ, mean) coefficients
    A = rng.standard_normal((PEAK_N, PEAK_N))
    flat = D.reshape(-1)  # a view: D is C-contiguous
    fns = {
        "vector": lambda: fedfv_direction(D, losses, method="vector", **kw),
        "gram": lambda: fedfv_direction(D, losses, method="gram", backend="numba", **kw),
        "ddt": lambda: gram(D, "numba"),
        "final": lambda: _combine(W, D, D[:0], "numba"),
        "peak": lambda: A @ A,
        "probe": lambda: read_probe(flat),
    }
    t = median_time(fns, repeats, settle=settle)
    ddt_flops = m * (m + 1) * d
    flops = ddt_flops + 4 * m * d + 4 * m**3
    nbytes = 2 * D.nbytes
    peak = 2 * PEAK_N**3 / t["peak"]  # flop/s
    bw = D.nbytes / t["probe"]  # byte/s
    t_flops, t_bytes = flops / peak, nbytes / bw
    roof = max(t_flops, t_bytes)
    g = res["gram"]
    return {
        "m": m,
        "d": d,
        "repeats": repeats,
        "pairs": m * (m - 1) // 2,
        "conflicts_found": g.conflicts_found,
        "projections": g.projections,
        "counts_agree": (g.conflicts_found, g.projections)
        == (res["vector"].conflicts_found, res["vector"].projections),
        "max_abs_diff_rel": err,
        "t_vector_s": t["vector"],
        "t_gram_s": t["gram"],
        "ratio_vector_gram": t["vector"] / t["gram"],
        "peak_GFLOPs": peak / 1e9,
        "ddt_by": "numba" if use_gram_kernel(m) else "syrk",
        "ddt_GFLOPs": ddt_flops / t["ddt"] / 1e9,
        "ddt_of_peak": ddt_flops / t["ddt"] / peak,
        "probe_GBps": bw / 1e9,
        "final_GBps": D.nbytes / t["final"] / 1e9,
        "final_of_probe": D.nbytes / t["final"] / bw,
        "gram_flops": flops,
        "gram_bytes": nbytes,
        "roofline_s": roof,
        "bound": "flops" if t_flops >= t_bytes else "bytes",
        "gram_over_roofline": t["gram"] / roof,
        "gram_over_parts": t["gram"] / (t["ddt"] + t["final"]),
        "t_ddt_s": t["ddt"],
        "t_final_s": t["final"],
        "share_ddt": t["ddt"] / t["gram"],
        "share_final": t["final"] / t["gram"],
        "share_rest": 1.0 - (t["ddt"] + t["final"]) / t["gram"],
    }


def measure_default_path(m: int, d: int, repeats: int, seed: int = 0) -> dict:
    """The step of an experiment's FedFV rule, as ``fairagg.simulate`` builds it from its name
    (``backend="auto"``: numba here; α = 0.1, τ = 1, the defaults), on the threads the process
    has, against its roofline on those threads (module doc, "Default path")."""
    from fairagg.simulation import _rule_on_backend
    from fairagg.types import make_reports

    D, losses = make_round(m, d, seed)
    theta = np.random.default_rng([seed, m, d, 2]).standard_normal(d)
    reports = make_reports(D, np.full(m, 10), losses=losses, client_ids=np.arange(m), num_clients=m)
    rule = _rule_on_backend("fedfv", "auto")
    state = rule.init(theta, m)
    A = np.random.default_rng([seed, m, d, 3]).standard_normal((PEAK_N, PEAK_N))
    W = np.random.default_rng([seed, m, d, 4]).standard_normal((2, m))
    copy = np.ones_like(D)
    flat = D.reshape(-1)
    fns = {
        "step": lambda: rule.step(theta, reports, state),
        "peak": lambda: A @ A,
        "probe": lambda: read_probe(flat),
        # the step's two passes alone: the Gram matrix (with the window's copy written on the
        # way, here into an array written before) and W @ D
        "ddt_copy": lambda: _gram_pass(D, copy, rule.hyperparams["backend"]),
        "final": lambda: _combine(W, D, D[:0], rule.hyperparams["backend"]),
    }
    t = median_time(fns, repeats, settle=0.2)
    flops = m * (m + 1) * d + 4 * m * d + 4 * m**3
    nbytes = 3 * D.nbytes  # read for DDᵀ, read for W @ D, the window's copy written
    peak, bw = 2 * PEAK_N**3 / t["peak"], D.nbytes / t["probe"]
    roof = max(flops / peak, nbytes / bw)
    return {
        "m": m,
        "d": d,
        "backend": rule.hyperparams["backend"],
        "threads": numba_num_threads(),
        "t_step_s": t["step"],
        "peak_GFLOPs": peak / 1e9,
        "probe_GBps": bw / 1e9,
        "roofline_s": roof,
        "bound": "flops" if flops / peak >= nbytes / bw else "bytes",
        "step_over_roofline": t["step"] / roof,
        "t_ddt_copy_s": t["ddt_copy"],
        "t_final_s": t["final"],
        "share_ddt_copy": t["ddt_copy"] / t["step"],
        "share_final": t["final"] / t["step"],
        "share_rest": 1.0 - (t["ddt_copy"] + t["final"]) / t["step"],
    }


def _gram_pass(D: np.ndarray, out: np.ndarray, backend: str) -> np.ndarray:
    """The default step's first pass: G with the copy of D written into ``out`` where Numba's
    kernel computes G (``use_gram_kernel``), else G on ``backend`` then the copy."""
    if backend == "numba" and use_gram_kernel(D.shape[0]):
        return _gram_and_copy(D, out)
    G = gram(D, backend)
    out[...] = D
    return G


def print_table(rows: list[dict], threads_used: int, load: str = "idle") -> None:
    tag = f"[{load}]"
    print(
        f"{tag} FedFV direction, alpha = 0, tau = 0, float64, {threads_used} thread(s): medians of "
        "interleaved repeats"
    )
    print(
        f"{'m':>5}{'d':>9}{'conflicts':>11}{'proj.':>7}{'vector ms':>11}{'gram ms':>10}"
        f"{'ratio':>8}{'max|Δg|/|mean|':>16}"
    )
    for r in rows:
        print(
            f"{r['m']:>5}{r['d']:>9}{r['conflicts_found']:>6}/{r['pairs']:<4}{r['projections']:>7}"
            f"{r['t_vector_s'] * 1e3:>11.1f}{r['t_gram_s'] * 1e3:>10.2f}"
            f"{r['ratio_vector_gram']:>7.1f}x{r['max_abs_diff_rel']:>16.1e}"
        )
    print()
    print(
        f"{tag} Gram path against the roofline max(flops / peak GEMM, 2·m·d·8 bytes / read probe):"
    )
    print(
        f"{'m':>5}{'d':>9}{'peak GF/s':>11}{'DDᵀ by':>8}{'DDᵀ GF/s':>10}{'of peak':>9}"
        f"{'probe GB/s':>12}{'roof ms':>9}{'bound':>7}{'× roof':>8}{'× parts':>9}"
        f"{'DDᵀ':>7}{'final':>7}{'rest':>7}"
    )
    for r in rows:
        print(
            f"{r['m']:>5}{r['d']:>9}{r['peak_GFLOPs']:>11.1f}{r['ddt_by']:>8}"
            f"{r['ddt_GFLOPs']:>10.1f}{r['ddt_of_peak']:>9.2f}{r['probe_GBps']:>12.1f}"
            f"{r['roofline_s'] * 1e3:>9.2f}{r['bound']:>7}{r['gram_over_roofline']:>8.2f}"
            f"{r['gram_over_parts']:>9.2f}"
            + "".join(f"{r['share_' + k]:>7.0%}" for k in ("ddt", "final", "rest"))
        )
    print("(DDᵀ, final, rest: shares of the Gram path's time; see the module docstring)")
    for r in rows:
        if (r["m"], r["d"]) == TARGET_CASE:
            ok = r["ratio_vector_gram"] >= TARGET_RATIO
            print(
                f"{tag} target: vector / gram >= {TARGET_RATIO:g}x at m = {r['m']}, d = {r['d']}: "
                f"{r['ratio_vector_gram']:.1f}x, {'met' if ok else 'NOT met'}"
            )
        if (r["m"], r["d"]) in TARGET_ROOF_CASES:
            ok = r["gram_over_roofline"] <= TARGET_ROOF
            print(
                f"{tag} target: gram <= {TARGET_ROOF:g}x roofline at m = {r['m']}, d = {r['d']}: "
                f"{r['gram_over_roofline']:.2f}x, {'met' if ok else 'NOT met'}"
            )


def print_default_path(rows: list[dict], load: str) -> None:
    tag = f"[{load}]"
    print()
    print(
        f"{tag} Default path: rule.step of fedfv as simulate builds it (backend='auto', alpha "
        "0.1, tau 1), all threads, against max(flops / peak GEMM, 3·m·d·8 bytes / read probe):"
    )
    print("(DDᵀ+copy, final, rest: shares of the step's time, the passes timed alone)")
    print(f"{'m':>5}{'d':>9}{'backend':>9}{'threads':>9}{'step ms':>9}{'roof ms':>9}{'bound':>7}"
          f"{'× roof':>8}{'DDᵀ+copy':>10}{'final':>7}{'rest':>7}")  # fmt: skip
    for r in rows:
        print(
            f"{r['m']:>5}{r['d']:>9}{r['backend']:>9}{r['threads']:>9}{r['t_step_s'] * 1e3:>9.2f}"
            f"{r['roofline_s'] * 1e3:>9.2f}{r['bound']:>7}{r['step_over_roofline']:>8.2f}"
            + "".join(f"{r['share_' + k]:>{w}.0%}" for k, w in (("ddt_copy", 10), ("final", 7)))
            + f"{r['share_rest']:>7.0%}"
        )
        if (r["m"], r["d"]) not in TARGET_ROOF_CASES:
            continue
        ok = r["step_over_roofline"] <= TARGET_ROOF
        print(
            f"{tag} target: the default step <= {TARGET_ROOF:g}x its roofline on {r['threads']} "
            f"threads at m = {r['m']}, d = {r['d']}: {r['step_over_roofline']:.2f}x, "
            f"{'met' if ok else 'NOT met'}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--quick", action="store_true", help="only d = 1e5, fewer repeats")
    ap.add_argument("--repeats", type=int, default=None, help="override every case's repeats")
    ap.add_argument("--threads", type=int, default=1, help="BLAS and Numba threads")
    ap.add_argument(
        "--cases", type=parse_cases, default=None, help="MxD,MxD,... instead of the table"
    )
    ap.add_argument("--seed", type=int, default=0)
    add_load_argument(ap)
    args = ap.parse_args(argv)
    if (args.repeats is not None and args.repeats < 1) or args.threads < 1:
        ap.error("--repeats and --threads must be >= 1")
    if args.cases is not None:
        cases = [(m, d, args.repeats or 3) for m, d in args.cases]
    else:
        cases = [(m, d, args.repeats or r) for m, d, r in (QUICK if args.quick else CASES)]
    start = time.perf_counter()
    rows = []
    with threads(args.threads):
        for load in loads(args.load):
            for m, d, repeats in cases:
                settle = 0.2 if args.threads > 1 else 0.0
                rows.append({"load": load, **measure(m, d, repeats, args.seed, settle)})
                r = rows[-1]
                print(
                    f"[{load}] m={m} d={d}: vector {r['t_vector_s'] * 1e3:.1f} ms, gram "
                    f"{r['t_gram_s'] * 1e3:.2f} ms ({r['ratio_vector_gram']:.1f}x), "
                    f"{r['gram_over_roofline']:.2f}x roofline",
                    flush=True,
                )
    default_rows = []
    for load in loads(args.load):  # on every thread the process has, as an experiment runs
        for m, d, repeats in cases:
            row = measure_default_path(m, d, repeats, args.seed)
            default_rows.append({"load": load, **row})
    elapsed = time.perf_counter() - start
    for load in LOADS[args.load]:
        print()
        print_table([r for r in rows if r["load"] == load], args.threads, load)
        print_default_path([r for r in default_rows if r["load"] == load], load)
    try:
        from threadpoolctl import threadpool_info

        blas = [
            {k: i.get(k) for k in ("internal_api", "version", "architecture")}
            for i in threadpool_info()
        ]
    except ImportError:
        blas = []
    meta = {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": args.threads,
        "numpy": np.__version__,
        "blas": blas,
        "peak_matmul_n": PEAK_N,
        "gram_max_m": GRAM_MAX_M,
        "seed": args.seed,
        "quick": args.quick,
        "alpha": 0.0,
        "tau": 0,
        "agree_tol": AGREE_TOL,
        "seconds": elapsed,
        "load": args.load,
    }
    write_results(args.out, "bench_fedfv", rows, meta)
    write_results(args.out, "bench_fedfv_default", default_rows, meta)
    print(f"total {elapsed:.0f} s; wrote {args.out}/bench_fedfv.csv and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
