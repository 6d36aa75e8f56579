"""Benchmark: Synthetic(α, β) generation and the evaluation of all clients, at K = 10⁴ clients.

What it shows (issue 38, item 4), every figure measured in one run:

* **Generation.** ``fairagg.data.synthetic(1, 1, K)`` against the generator it replaced (the
  per-client list of ``synthetic_clients`` concatenated and split by ``from_client_arrays``,
  written out below as ``reference_synthetic``), both timed interleaved; seconds per million
  rows, the ratio of the two, and the floor: NumPy's ``standard_normal`` drawing the 60 normals
  of every row into a preallocated array, which no generator of the same draws can beat. Target:
  at most 2.5 s per million rows where the replaced generator took 3.7 s, i.e. a ratio ≤ 0.68.
* **Peak memory**, traced by ``tracemalloc`` (NumPy reports its allocations to it) in a separate
  call, over the bytes of the arrays returned. Target ≤ 2.
* **Bit identity**: the two generators' outputs compared with ``np.array_equal``.
* **Evaluation of all clients**: ``FlatModel.evaluate_clients`` (the evaluation of a run's
  ``_EvaluationSets``) of the logistic model and the 60-32-10 MLP on all training rows, against the
  same-shape GEMM (``X @ W`` for each layer, BLAS float64), on one thread (Numba and BLAS pinned)
  and on all threads. Target: ≤ 2× the GEMM.

``--load`` ``idle`` (default), ``busy`` (beside a process this benchmark starts spinning on one
core) or ``both``: everything above measured under each load in turn, every line printed
labelled ``[idle]`` / ``[busy]`` and a ``load`` column in the CSV and JSON.

Run: ``python validate/bench_data.py [--clients K] [--repeats R] [--load L] [--out DIR]``; writes
``DIR/bench_data.{csv,json}`` (default ``runs/bench``). At K = 10⁴ the replaced generator needs
about 6 GB of memory; ``--no-reference`` skips it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import add_load_argument, loads, median_time, threads, write_results  # noqa: E402

from fairagg.data import FederatedData, _concat_clients, _split, synthetic  # noqa: E402
from fairagg.kernels._threads import num_threads  # noqa: E402
from fairagg.models import MLP, LogisticRegression  # noqa: E402

#: Issue 38's targets.
TARGET_S_PER_MROW, BEFORE_S_PER_MROW, TARGET_PEAK, TARGET_EVAL = 2.5, 3.7, 2.0, 2.0


def reference_synthetic(alpha: float, beta: float, K: int, seed: int) -> FederatedData:
    """``synthetic(alpha, beta, K, seed=seed)`` as fairagg computed it before issue 38: a list of
    per-client arrays, concatenated and split as ``from_client_arrays`` does (same draws)."""
    d, c = 60, 10
    rng = np.random.default_rng(seed)
    n = np.floor(rng.lognormal(4.0, 2.0, K)).astype(np.int64) + 50
    u = rng.normal(0.0, alpha, K)
    B = rng.normal(0.0, beta, K)
    v = [rng.normal(B[k], 1.0, d) for k in range(K)]
    sigma = np.sqrt(np.arange(1, d + 1, dtype=np.float64) ** -1.2)
    clients = []
    for k in range(K):
        W = rng.normal(u[k], 1.0, (d, c))
        b = rng.normal(u[k], 1.0, c)
        x = v[k] + rng.standard_normal((int(n[k]), d)) * sigma
        clients.append((x, np.argmax(x @ W + b, axis=1).astype(np.int64)))
    X, y, parts = _concat_clients(clients, c)
    split = np.random.default_rng([seed, 1])
    return _split(X, y, parts, c, 0.2, 0.0, split, f"synthetic({alpha:g},{beta:g})")


def nbytes(data: FederatedData) -> int:
    return sum(a.nbytes for a in data if isinstance(a, np.ndarray))


def peak_ratio(fn) -> float:
    """Peak traced memory of ``fn()`` over the bytes of the arrays it returns."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak / nbytes(out)


def same(a: FederatedData, b: FederatedData) -> bool:
    return all(
        (x is None and y is None)
        or (x == y if not isinstance(x, np.ndarray) else np.array_equal(x, y))
        for x, y in zip(a, b, strict=True)
    )


def measure(args: argparse.Namespace, load: str) -> list[dict]:
    """The rows of one load, printed as they come."""
    K, seed = args.clients, args.seed
    rows: list[dict] = []
    tag = f"[{load}]"

    # --- generation: time (interleaved), floor, peak memory, bit identity ----------------------
    data = synthetic(1, 1, K, seed=seed)
    N = data.X_train.shape[0] + data.X_test.shape[0]
    Z = np.empty((N, 60))
    gen = np.random.default_rng(seed)
    fns = {
        "synthetic": lambda: synthetic(1, 1, K, seed=seed),
        "draws": lambda Z=Z: gen.standard_normal(out=Z),
    }
    if not args.no_reference:
        fns["reference"] = lambda: reference_synthetic(1, 1, K, seed)
    t = median_time(fns, args.repeats)
    del fns, Z
    peak = peak_ratio(lambda: synthetic(1, 1, K, seed=seed))
    row = {
        "what": "synthetic(1,1)",
        "K": K,
        "rows": N,
        "s_per_mrow": t["synthetic"] / N * 1e6,
        "draws_s_per_mrow": t["draws"] / N * 1e6,
        "vs_draws": t["synthetic"] / t["draws"],
        "peak_over_returned": peak,
    }
    if not args.no_reference:
        ref_peak = peak_ratio(lambda: reference_synthetic(1, 1, K, seed))
        row |= {
            "reference_s_per_mrow": t["reference"] / N * 1e6,
            "vs_reference": t["synthetic"] / t["reference"],
            "reference_peak_over_returned": ref_peak,
            "bit_identical": same(data, reference_synthetic(1, 1, K, seed)),
        }
    rows.append({"load": load, **row})
    print(f"{tag} Synthetic(1,1), K = {K}, {N} rows ({nbytes(data) / 2**30:.2f} GiB returned)")
    print(
        f"{tag}   fairagg {row['s_per_mrow']:.2f} s per million rows; the 60 normals of each "
        f"row alone {row['draws_s_per_mrow']:.2f} s (ratio {row['vs_draws']:.2f})"
    )
    if not args.no_reference:
        print(
            f"{tag}   replaced generator {row['reference_s_per_mrow']:.2f} s per million rows: "
            f"ratio {row['vs_reference']:.2f} (target <= "
            f"{TARGET_S_PER_MROW / BEFORE_S_PER_MROW:.2f} = {TARGET_S_PER_MROW} / "
            f"{BEFORE_S_PER_MROW}); bit-identical: {row['bit_identical']}"
        )
    print(
        f"{tag}   peak memory / returned arrays: {peak:.2f} (target <= {TARGET_PEAK:g})"
        + (
            ""
            if args.no_reference
            else f"; replaced generator {row['reference_peak_over_returned']:.2f}"
        )
    )
    del data

    # --- evaluation of all clients against the same-shape GEMM ----------------------------------
    data = synthetic(1, 1, K, seed=seed)
    X, y, off = data.X_train, data.y_train, data.train_offsets
    rng = np.random.default_rng(1)
    for model in (LogisticRegression(60, 10), MLP(60, 10, n_hidden=32)):
        theta = rng.normal(0, 0.1, model.num_params)
        H, _ = model._kernel_dims()
        Ws = [rng.random((60, 10))] if not H else [rng.random((60, H)), rng.random((H, 10))]

        def gemm(Ws=Ws):
            Z = X
            for W in Ws:
                Z = Z @ W
            return Z

        def evaluate(model=model, theta=theta):
            return model.evaluate_clients(theta, X, y, off)

        for n in sorted({1, num_threads()}):
            with threads(n):
                t = median_time(
                    {"eval": evaluate, "gemm": gemm}, args.repeats, block=2, settle=0.05
                )
            ratio = t["eval"] / t["gemm"]
            rows.append(
                {"load": load, "what": f"evaluate {type(model).__name__}", "K": K,
                 "rows": X.shape[0], "threads": n, "eval_s": t["eval"], "gemm_s": t["gemm"],
                 "eval_over_gemm": ratio}
            )  # fmt: skip
            print(
                f"{tag} evaluate_clients {type(model).__name__}, {X.shape[0]} rows, {n} thread(s): "
                f"{t['eval'] * 1e3:.0f} ms, same-shape GEMM {t['gemm'] * 1e3:.0f} ms: ratio "
                f"{ratio:.2f} (target <= {TARGET_EVAL:g})"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-reference", action="store_true", help="skip the replaced generator")
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    add_load_argument(ap)
    args = ap.parse_args(argv)
    rows = [row for load in loads(args.load) for row in measure(args, load)]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{k: r.get(k, "") for k in keys} for r in rows]
    write_results(args.out, "bench_data", rows, {"when": time.strftime("%Y-%m-%d %H:%M:%S")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
