"""Benchmark: whole rounds of the default experiment, idle and beside a busy process.

What it shows: the wall time of one round of ``fairagg.simulate`` — local training, aggregation
and the evaluation of every client — for FedAvg on Synthetic(1,1) with 30 clients, 10 a round,
E = 20 local epochs, batch 10, logistic regression and evaluation every round, in three settings
measured in one run:

- ``1 thread``: Numba and BLAS pinned to one thread;
- ``default``: fairagg's defaults (every core the process may use);
- ``default, busy core``: the defaults beside a process this benchmark starts itself, which spins
  on one core for the whole measurement (the normal case on a shared two-core machine).

Two data sets: the default one (power-law client sizes, n_k = ⌊LogNormal(4, 2)⌋ + 50) and the same
rows split into 30 equal clients. Rounds are timed in interleaved repeats and the medians printed
with the ratios the targets are stated in (issue "Fast on the machine people actually have"):
default / 1 thread idle (≥ 1.5× on equal clients) and default busy / 1 thread busy (≤ 1 within
noise: the defaults never lose). A breakdown per round (local training, aggregation, evaluation)
comes from the runs' own history. The runs are checked to give bitwise the same θ whatever the
thread count, so the benchmark compares equal computations.

Then the evaluation alone: nanoseconds per evaluated row of ``FlatModel.evaluate_clients``' round
path (test and training splits, logistic 60 × 10 and the default MLP 60-32-10) on one thread and
with the defaults, against the single-thread BLAS product of the same rows with the first layer's
weights (the GEMM the evaluation cannot avoid) measured in the same run; and the share of a round
the evaluation takes at K = 1000 clients with ``fairagg run``'s settings (MLP, m = 10, E = 20,
evaluation every round; means over rounds, since power-law sizes make some rounds far longer).

Run: ``python validate/bench_e2e.py [--rounds R] [--repeats N] [--out DIR]``; writes
``DIR/bench_e2e.{csv,json}`` and ``DIR/bench_e2e_eval.{csv,json}`` (default ``runs/bench``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import Spinner, median_time, threads, write_results  # noqa: E402
from _output import log  # noqa: E402

from fairagg import simulate  # noqa: E402
from fairagg.data import federate, partition_iid, synthetic  # noqa: E402
from fairagg.models import MLP, LogisticRegression  # noqa: E402


def datasets() -> dict[str, object]:
    """The default data (power-law sizes) and its rows re-split into 30 equal clients."""
    power = synthetic(1, 1, 30, seed=0)
    X = np.concatenate([power.X_train, power.X_test])
    y = np.concatenate([power.y_train, power.y_test])
    equal = federate(X, y, partition_iid(len(y), 30, seed=0), n_classes=10, seed=0)
    return {"power-law": power, "equal": equal}


def one_run(data, rounds: int):
    model = LogisticRegression(60, 10)
    t0 = time.perf_counter()
    h = simulate(
        "fedavg", model, data, rounds=rounds, clients_per_round=10, epochs=20, batch_size=10,
        lr=0.01, seed=0, eval_every=1,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    return wall / rounds, h


def measure(data, rounds: int, repeats: int) -> dict[str, dict]:
    """Per-round medians with one thread and with the defaults, interleaved repeats."""
    out = {"1 thread": [], "default": []}
    parts = {k: [] for k in out}
    thetas = {}
    for _ in range(repeats):
        for mode in out:
            if mode == "1 thread":
                with threads(1):
                    per_round, h = one_run(data, rounds)
            else:
                per_round, h = one_run(data, rounds)
            out[mode].append(per_round)
            parts[mode].append(
                (
                    float(np.median(h.time_local)),
                    float(np.median(h.time_aggregate)),
                    float(np.median(h.time_eval)),
                )
            )
            thetas[mode] = h.final_params
    if not np.array_equal(thetas["1 thread"], thetas["default"]):
        raise SystemExit("θ differs between one thread and the defaults: not bitwise")
    return {
        mode: {
            "round_ms": 1e3 * float(np.median(v)),
            "local_ms": 1e3 * float(np.median([p[0] for p in parts[mode]])),
            "aggregate_ms": 1e3 * float(np.median([p[1] for p in parts[mode]])),
            "eval_ms": 1e3 * float(np.median([p[2] for p in parts[mode]])),
        }
        for mode, v in out.items()
    }


def evaluation_rows(repeats: int) -> list[dict]:
    """ns per evaluated row, one thread and default, against the first layer's GEMM."""
    from threadpoolctl import threadpool_limits

    rows = []
    for K in (30, 1000):
        data = synthetic(1, 1, K, seed=0)
        for model in (LogisticRegression(60, 10), MLP(60, 10, n_hidden=32)):
            theta = model.init_params(0)
            sets = [
                model._evaluation_set(X, y, off, theta.dtype)
                for X, y, off in (
                    (data.X_test, data.y_test, data.test_offsets),
                    (data.X_train, data.y_train, data.train_offsets),
                )
            ]
            n = sum(s[0].shape[0] for s in sets)
            sl, shape = next(iter(model.layout().values()))  # the first weight block
            first = theta[sl].reshape(shape)

            def evaluate(theta=theta, sets=sets, model=model):
                for s in sets:
                    model._evaluate_rows(theta, *s)

            def gemm(sets=sets, first=first):
                for s in sets:
                    s[0] @ first.T

            with threads(1):
                with threadpool_limits(1):
                    t = median_time({"eval": evaluate, "gemm": gemm}, repeats, block=3)
            t_all = median_time({"eval": evaluate}, repeats, block=3)
            rows.append(
                {
                    "clients": K,
                    "model": type(model).__name__,
                    "rows": n,
                    "ns_per_row_1thread": 1e9 * t["eval"] / n,
                    "ns_per_row_default": 1e9 * t_all["eval"] / n,
                    "gemm_ns_per_row_1thread": 1e9 * t["gemm"] / n,
                    "eval_over_gemm_1thread": t["eval"] / t["gemm"],
                }
            )
    return rows


def share_at_1000(rounds: int) -> dict:
    """Evaluation's share of a round at K = 1000 with fairagg run's settings (MLP 60-32-10)."""
    data = synthetic(1, 1, 1000, seed=0)
    model = MLP(60, 10, n_hidden=32)
    kw = dict(clients_per_round=10, epochs=20, batch_size=10, lr=0.01, seed=0)
    simulate("fedavg", model, data, rounds=1, **kw)
    h = simulate("fedavg", model, data, rounds=rounds, **kw)
    local, agg = float(np.mean(h.time_local)), float(np.mean(h.time_aggregate))
    ev = float(np.mean(h.time_eval[1:]))
    return {"local_ms": 1e3 * local, "aggregate_ms": 1e3 * agg, "eval_ms": 1e3 * ev,
            "eval_share": ev / (local + agg + ev)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import numba

    rows = []
    for name, data in datasets().items():
        one_run(data, 2)  # compile, fault pages in
        with threads(1):
            one_run(data, 2)
        for busy in (False, True):
            log(f"{name} clients, {'beside a busy core' if busy else 'idle'} ...")
            if busy:
                with Spinner():
                    res = measure(data, args.rounds, args.repeats)
            else:
                res = measure(data, args.rounds, args.repeats)
            for mode, r in res.items():
                rows.append(
                    {"sizes": name, "load": "busy" if busy else "idle", "threads": mode, **r}
                )
    meta = {
        "cpus": sorted(os.sched_getaffinity(0)),
        "numba_threads": numba.get_num_threads(),
        "threading_layer": _layer(),
        "rounds": args.rounds,
        "repeats": args.repeats,
        "experiment": "fedavg, synthetic(1,1), K=30, m=10, E=20, B=10, lr=0.01, logistic, "
        "eval every round",
    }
    write_results(args.out, "bench_e2e", rows, meta)
    print(
        f"One round of the default experiment (FedAvg, E = 20, B = 10, evaluation every round); "
        f"{len(meta['cpus'])} CPUs, Numba threading layer {meta['threading_layer']}"
    )
    print(
        f"{'clients':<10}{'load':<6}{'threads':<10}{'round ms':>10}{'local':>8}{'agg':>8}"
        f"{'eval':>8}"
    )
    for r in rows:
        print(
            f"{r['sizes']:<10}{r['load']:<6}{r['threads']:<10}{r['round_ms']:>10.2f}"
            f"{r['local_ms']:>8.2f}{r['aggregate_ms']:>8.2f}{r['eval_ms']:>8.2f}"
        )
    print("ratios (1 thread / default: above 1 is a speed-up of the defaults)")
    for name in ("equal", "power-law"):
        for load in ("idle", "busy"):
            t = {
                r["threads"]: r["round_ms"]
                for r in rows
                if r["sizes"] == name and r["load"] == load
            }
            print(f"  {name:<10} {load:<5} {t['1 thread'] / t['default']:.2f}x")
    log("evaluation alone ...")
    ev_rows = evaluation_rows(args.repeats)
    share = share_at_1000(args.rounds // 3 or 1)
    write_results(args.out, "bench_e2e_eval", ev_rows, {**meta, "k1000_share": share})
    print("Evaluation (test and training rows of every client), ns per row")
    print(
        f"{'K':>5}  {'model':<20}{'rows':>8}{'1 thread':>10}{'default':>9}{'GEMM 1t':>9}"
        f"{'eval/GEMM':>11}"
    )
    for r in ev_rows:
        print(
            f"{r['clients']:>5}  {r['model']:<20}{r['rows']:>8}{r['ns_per_row_1thread']:>10.1f}"
            f"{r['ns_per_row_default']:>9.1f}{r['gemm_ns_per_row_1thread']:>9.1f}"
            f"{r['eval_over_gemm_1thread']:>10.2f}x"
        )
    print(
        f"K = 1000, MLP, m = 10, E = 20 (means over rounds): local {share['local_ms']:.1f} ms, "
        f"evaluation {share['eval_ms']:.1f} ms: {100 * share['eval_share']:.0f} % of a round "
        "(target <= 40 %)"
    )
    print(f"wrote {args.out}/bench_e2e.csv, bench_e2e_eval.csv and their .json")


def _layer() -> str:
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run yet
        return "not started"


if __name__ == "__main__":
    main()
