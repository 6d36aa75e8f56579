"""Benchmark: Numba local SGD against the same SGD in plain NumPy, measured in one run.

What it shows: the throughput (sample-gradients per second) of ``fairagg.local.train_clients``
against ``fairagg.local.sgd_reference`` — the identical algorithm (same shuffles, batches,
momentum) written in NumPy — for the clients of one round of the default experiment
(Synthetic(1,1), 30 clients, 10 per round, batch 10, lr 0.01) with the logistic model and the
60-32-10 tanh MLP. Both run on one thread (Numba and BLAS pinned) so the ratio compares code, not
core counts; the Numba trainer on all threads (parallel over clients) is reported too.

It also reports the one-thread kernel's arithmetic rate against the single-core GEMM rate (a
float64 ``A @ B``, n = 1000, on one BLAS thread): the flops of a call are those of the dense
layers (forward 2 per multiply-add, the weight gradients 2, the hidden layer's input gradient 2)
over every training step, plus one forward pass over the clients' rows for the reported
F_k(θ^t); the softmax, tanh and update are not counted. The same rounds time the training
kernel alone (``sgd_one_client`` called for the same clients as ``train_clients`` calls it,
without the reports and the checks), and its rate of the training flops is printed beside the
call's. On a shared machine one GEMM figure can be off by 2× (two runs of an earlier version
read 23.7 and 44.7 GFLOP/s), so the GEMM is timed in the same interleaved rounds as the
trainers (round after round, each callable once a round) and every figure is the median over
the rounds: a slow phase of the machine then slows them all, and the ratios move less. The
GEMM's 24 MB of operands evict the clients' rows (about 1 MB) from cache once a round; the
trainers reload them at the start of their calls.

Targets (issue 38, item 5), for both models: at least 15× the NumPy loop and at least 25 % of
the GEMM rate, one thread each.

``--load`` ``idle`` (default), ``busy`` (beside a process spinning on one core) or ``both``:
each printed line labelled ``[idle]`` / ``[busy]``, a ``load`` column in the CSV and JSON.

Run: ``python validate/bench_local_sgd.py [--out DIR] [--epochs E] [--repeats R] [--load L]``;
writes ``DIR/bench_local_sgd.{csv,json}`` (default ``runs/bench``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _bench import LOADS, add_load_argument, loads, median_time, threads, write_results  # noqa: E402

from fairagg.data import synthetic  # noqa: E402
from fairagg.local import (  # noqa: E402
    SHUFFLE_STREAM,
    _seed_words,
    client_shuffles,
    sgd_reference,
    train_clients,
)
from fairagg.models import MLP, LogisticRegression  # noqa: E402
from fairagg.models._kernels import sgd_one_client  # noqa: E402
from fairagg.sampling import sample_clients  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    add_load_argument(ap)
    args = ap.parse_args(argv)

    data = synthetic(1, 1, 30, seed=0)
    S = sample_clients(30, 10, np.random.default_rng([0, 0, 0]))
    n = data.num_train_samples[S]
    E, B, lr = args.epochs, 10, 0.01
    steps = int(n.sum()) * E  # sample-gradients per call
    rows = []
    A, Bm = np.random.default_rng(0).random((2, GEMM_N, GEMM_N))
    models = (LogisticRegression(60, 10), MLP(60, 10, n_hidden=32))
    # the spinner of "busy" runs while that load's models are measured (see _bench.loads)
    for load, model in ((load, model) for load in loads(args.load) for model in models):
        theta = model.init_params(0) + 0.01
        orders = [client_shuffles(int(n[i]), E, 0, 0, int(k)) for i, k in enumerate(S)]
        parts = [data.client_train(int(k)) for k in S]
        out = np.empty((S.size, theta.size))

        def numba_1t(model=model, theta=theta, out=out):
            return train_clients(
                model, theta, data, S, epochs=E, batch_size=B, lr=lr, out=out, parallel=False
            )

        def numba_all(model=model, theta=theta, out=out):
            return train_clients(
                model, theta, data, S, epochs=E, batch_size=B, lr=lr, out=out, parallel=True
            )

        def numpy_ref(model=model, theta=theta, orders=orders, parts=parts):
            return [
                sgd_reference(model, theta, X, y, o, batch_size=B, lr=lr)
                for (X, y), o in zip(parts, orders, strict=True)
            ]

        X_all = np.ascontiguousarray(data.X_train)
        H, act = model._kernel_dims()
        hyper = (E, B, lr, 0.0, 0.0, H, model.n_classes, act, float(model.l2), 0.0, 0.2, False)
        tasks = [
            (
                int(data.train_offsets[k]),
                int(data.num_train_samples[k]),
                np.array(_seed_words(0, SHUFFLE_STREAM, 0, int(k)), dtype=np.uint64),
            )
            for k in S
        ]

        def training(theta=theta, X=X_all, y=data.y_train, tasks=tasks, hyper=hyper, out=out):
            # train_clients' kernel calls alone: no reports, no argument checks
            for i, (lo, nk, entropy) in enumerate(tasks):
                sgd_one_client(theta, X, y, lo, nk, entropy, hyper, out[i])

        # Same numbers first: the benchmark compares equal computations.
        ref = np.stack([d for d, _, _ in numpy_ref()])
        err = float(np.abs(numba_1t().deltas - ref).max() / np.abs(ref).max())
        training()
        assert np.array_equal(out, numba_1t().deltas)  # the same kernel calls as train_clients
        with threads(1):
            # one set of interleaved rounds: the three medians share the machine's slow phases
            t1 = median_time(
                {
                    "numba": numba_1t,
                    "numpy": numpy_ref,
                    "gemm": lambda A=A, Bm=Bm: A @ Bm,
                    "training": training,
                },
                args.repeats,
            )
        gemm_rate = 2.0 * GEMM_N**3 / t1["gemm"]
        train, forward = call_flops(model, steps, int(n.sum()))
        rate = (train + forward) / t1["numba"]
        train_rate = train / t1["training"]
        tall = median_time({"numba_all": numba_all}, args.repeats)
        row = {
            "load": load,
            "model": type(model).__name__,
            "d": model.num_params,
            "sample_gradients": steps,
            "numpy_1thread_per_s": steps / t1["numpy"],
            "numba_1thread_per_s": steps / t1["numba"],
            "numba_all_threads_per_s": steps / tall["numba_all"],
            "speedup_1thread": t1["numpy"] / t1["numba"],
            "speedup_all_threads": t1["numpy"] / tall["numba_all"],
            "max_rel_diff": err,
            "numba_1thread_gflops": rate / 1e9,
            "gemm_1thread_gflops": gemm_rate / 1e9,
            "numba_over_gemm": rate / gemm_rate,
            "training_share": t1["training"] / t1["numba"],
            "training_only_gflops": train_rate / 1e9,
            "training_only_over_gemm": train_rate / gemm_rate,
            "meets_targets": bool(
                t1["numpy"] / t1["numba"] >= TARGET_SPEEDUP and rate / gemm_rate >= TARGET_GEMM
            ),
        }
        rows.append(row)
    meta = {"clients": S.tolist(), "epochs": E, "batch_size": B, "cpus": os.cpu_count(),
            "load": args.load}  # fmt: skip
    write_results(args.out, "bench_local_sgd", rows, meta)
    for load in LOADS[args.load]:
        tag = f"[{load}] "
        load_rows = [r for r in rows if r["load"] == load]
        print(
            f"{tag}Local SGD, one round of the default experiment ({steps} sample-gradients "
            "per call)"
        )
        print(
            f"{'model':<20}{'NumPy /s':>12}{'Numba 1t /s':>14}{'ratio':>8}{'Numba all /s':>15}"
            f"{'ratio':>8}{'max rel diff':>14}"
        )
        for r in load_rows:
            print(
                f"{r['model']:<20}{r['numpy_1thread_per_s']:>12.3g}{r['numba_1thread_per_s']:>14.3g}"
                f"{r['speedup_1thread']:>7.1f}x{r['numba_all_threads_per_s']:>15.3g}"
                f"{r['speedup_all_threads']:>7.1f}x{r['max_rel_diff']:>14.1e}"
            )
        print(f"\n{tag}One thread, against the single-core GEMM (A @ B, n = {GEMM_N}) of this run:")
        for r in load_rows:
            print(
                f"{tag}{r['model']:<20}{r['numba_1thread_gflops']:>7.2f} GFLOP/s of "
                f"{r['gemm_1thread_gflops']:.1f}: {r['numba_over_gemm']:.0%} (target >= "
                f"{TARGET_GEMM:.0%}); {r['speedup_1thread']:.1f}x NumPy (target >= "
                f"{TARGET_SPEEDUP:.0f}x): {'met' if r['meets_targets'] else 'NOT met'}"
            )
        print(
            f"{tag}The training kernel alone (its calls for the same clients, timed in the same "
            "rounds):"
        )
        for r in load_rows:
            print(
                f"{r['model']:<20}{r['training_only_gflops']:>7.2f} GFLOP/s: "
                f"{r['training_only_over_gemm']:.0%} of the GEMM, {r['training_share']:.0%} of the"
                " call's time"
            )
    print(f"wrote {args.out}/bench_local_sgd.csv and .json")


#: Side of the single-core GEMM probe.
GEMM_N = 1000


#: Issue 38, item 5 (one thread): speed-up over the NumPy loop, fraction of the GEMM rate.
TARGET_SPEEDUP, TARGET_GEMM = 15.0, 0.25


def call_flops(model, steps: int, rows: int) -> tuple[float, float]:
    """Flops of one train_clients call in the dense layers: (training, reports), for ``steps``
    training sample-steps (forward, weight gradients, the hidden layer's input gradient) and one
    forward pass over ``rows`` for the reported losses."""
    p, C = model.n_features, model.n_classes
    H = getattr(model, "n_hidden", 0)
    if H:
        forward = 2 * (p * H + H * C)
        train = forward + 2 * (p * H + H * C) + 2 * H * C
    else:
        forward = 2 * p * C
        train = 2 * forward
    return float(steps * train), float(rows * forward)


if __name__ == "__main__":
    main()
