"""A fairagg rule in Flower's simulation engine (Ray) equals ``fairagg.simulate``, and what the
engine costs per round.

For each number K of virtual clients (``--clients 10,100``) the script runs the same federated
training three times, from the same θ^0 = ``model.init_params(seed)``:

- ``fairagg``: ``fairagg.simulate`` (the clients' local SGD in parallel Numba threads);
- ``flower-ray``: Flower's simulation engine, ``flwr.simulation.run_simulation`` with the Ray
  backend and K virtual SuperNodes, a ``ServerApp`` running
  ``fairagg.flower.FairaggStrategy`` and the ``ClientApp`` of
  ``fairagg.flower.fairagg_client_app`` (each virtual client trains its own partition in a
  Ray actor, ``--client-cpus`` CPUs each);
- ``flower-inprocess``: the same strategy and ClientApp through
  ``fairagg.flower.InProcessGrid`` (no Ray: Flower's messages, serially, in this process),
  which separates the cost of the strategy and the messages from Ray's transport.

The strategy samples clients with fairagg's sampler and seeds, and each client trains with the
shuffles of ``default_rng([seed, 1, t, k])``, so the three runs see the same clients and the same
updates: the final models must agree to float64 round-off (in fact bit for bit). The script
reports, per K and engine, max |θ_engine − θ_fairagg| / ‖θ_fairagg‖ (and whether the selected
clients matched), the first round's wall time (Ray actors start, each loads the data and the
Numba kernels; Flower's run also asks every node for its client id), the median wall time of the
other rounds, and its ratio to fairagg's. A round's time is ``configure_train`` to the end of
``aggregate_train`` for Flower (sending θ^t, the clients' work, receiving, the rule) and local
training plus aggregation for ``fairagg.simulate``; no run evaluates during training. Flower's
simulation engine collects replies by polling its in-memory Grid every 0.1 s
(``InMemoryGrid.pull_interval``), so a Ray round never takes less than 0.1 s.

Data: ``--data`` (default ``synthetic:1,1``, FedProx's Synthetic(1, 1)) with K clients, data
seed 0; model: multinomial logistic regression (``--model mlp`` for a one-hidden-layer MLP).
Defaults: every client every round (``--clients-per-round all``; an integer m, or a fraction of
K, samples uniformly without replacement), 5 rounds, 1 epoch of SGD with batch 10 and lr 0.01,
rule ``fedavg`` (``--rule``, any registry name).

Ray: by default ``run_simulation`` starts a local Ray instance (``--num-cpus`` caps it; default all
cores) and stops it at the end. ``--ray-address auto`` (or ``HOST:PORT``) passes ``address`` in
Ray's ``init_args`` and joins an existing cluster started with ``ray start --head`` (plus
``ray start --address=HEAD:6379`` on the other machines): the ClientApps then run on every
machine of the cluster. Each machine needs the same Python environment (``pip install
'fairagg[flower-sim]'``); the data are not shipped, each actor rebuilds them from the loader.

Run: ``python validate/flower_simulation.py --clients 10,100`` (25 s on two cores, 10 s of which
start Ray). ``--engines inprocess`` leaves Ray out (the ``flower`` extra suffices).
Writes ``--out`` (default ``runs/flower``): ``results.csv`` (one row per K and engine, written as
each finishes), ``rounds.csv`` (every round's wall time per engine) and ``summary.json``;
progress on standard error, the table on standard output. Exit status 1 when a Flower run does
not agree with fairagg's to round-off (relative difference above 1e-12).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _output import CsvAppender, log  # noqa: E402

import fairagg  # noqa: E402
from fairagg import RULES, make_rule, simulate  # noqa: E402
from fairagg.data import load  # noqa: E402
from fairagg.models import make_model  # noqa: E402

#: Relative agreement that counts as float64 round-off.
TOLERANCE = 1e-12
RESULT_FIELDS = (
    "clients",
    "clients_per_round",
    "engine",
    "rounds",
    "rel_diff",
    "same_clients",
    "first_round_s",
    "median_round_s",
    "ratio_to_fairagg",
    "total_s",
)


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers >= 2; got {text!r}")
    return values


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rule", default="fedavg", choices=sorted(RULES))
    ap.add_argument("--clients", type=_ints, default=[30], help="comma list of K (default 30)")
    ap.add_argument(
        "--clients-per-round",
        default="all",
        help="'all', an integer m, or a fraction of K in (0, 1) (default all)",
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="synthetic:1,1")
    ap.add_argument("--model", choices=("logistic", "mlp"), default="logistic")
    ap.add_argument("--out", type=Path, default=Path("runs/flower"))
    ap.add_argument("--client-cpus", type=float, default=1.0, help="Ray CPUs per virtual client")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance")
    ap.add_argument(
        "--ray-address",
        default=None,
        help="join an existing Ray cluster ('auto' or HOST:PORT) instead of starting one",
    )
    ap.add_argument(
        "--engines",
        default="inprocess,ray",
        help="comma list of the Flower runs: inprocess (InProcessGrid), ray (default both)",
    )
    ap.add_argument("--verbose", action="store_true", help="keep Flower's INFO log")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be >= 2 (the first round is timed apart)")
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not args.engines or set(args.engines) - {"inprocess", "ray"}:
        ap.error(f"--engines must name inprocess and/or ray; got {args.engines}")
    if args.ray_address and args.num_cpus:
        ap.error("--num-cpus sizes a local Ray instance; it cannot be combined with --ray-address")
    return args


def _clients_per_round(text: str, K: int, rule: str) -> int:
    if RULES[rule].full_participation or text == "all":
        return K
    try:
        v = float(text)
    except ValueError:
        raise SystemExit(
            f"--clients-per-round must be 'all', an integer or a fraction; got {text!r}"
        ) from None
    m = int(v) if v >= 1 else max(1, round(v * K))
    if not 1 <= m <= K:
        raise SystemExit(f"--clients-per-round gives m = {m}, outside [1, K = {K}]")
    return m


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
    }


def _run_fairagg(rule, model, data, m: int, args) -> dict[str, Any]:
    # Warm-up: Numba loads (or compiles) its kernels on the first call.
    simulate(rule, model, data, rounds=1, clients_per_round=m, eval_every=1, **_settings(args))
    t0 = time.perf_counter()
    h = simulate(
        rule,
        model,
        data,
        rounds=args.rounds,
        clients_per_round=m,
        eval_every=args.rounds,
        **_settings(args),
    )
    total = time.perf_counter() - t0
    return {
        "params": np.asarray(h.final_params),
        "selected": h.selected,
        "round_s": (h.time_local + h.time_aggregate).tolist(),
        "total_s": total,
    }


def _strategy(rule, K: int, m: int, args):
    from fairagg.flower import FairaggStrategy

    return FairaggStrategy(
        rule, K, clients_per_round=m, fraction_evaluate=0.0, **_settings(args)
    )  # the clients' settings travel in the train config


def _run_flower_ray(rule, model, loader, K: int, m: int, args) -> dict[str, Any]:
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from fairagg.flower import fairagg_client_app, params_to_arrays

    box: dict[str, Any] = {}
    server = ServerApp()

    @server.main()
    def _main(grid, context) -> None:
        strategy = _strategy(rule, K, m, args)
        box["strategy"] = strategy
        strategy.start(
            grid=grid,
            initial_arrays=params_to_arrays(model.init_params(args.seed)),
            num_rounds=args.rounds,
        )

    init_args: dict[str, Any] = {}
    if args.ray_address:
        init_args["address"] = args.ray_address
    elif args.num_cpus:
        init_args["num_cpus"] = args.num_cpus
    backend_config = {
        "client_resources": {"num_cpus": args.client_cpus, "num_gpus": 0.0},
        "init_args": init_args,
    }
    client = fairagg_client_app(model, loader)  # Ray ships the loader, not the arrays
    t0 = time.perf_counter()
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=K,
        backend_config=backend_config,
    )
    total = time.perf_counter() - t0
    strategy = box.get("strategy")
    if strategy is None or len(strategy.rounds) != args.rounds:
        done = 0 if strategy is None else len(strategy.rounds)
        raise RuntimeError(f"the Flower simulation completed {done} of {args.rounds} rounds")
    return _flower_result(strategy, total)


def _run_flower_inprocess(rule, model, data, K: int, m: int, args) -> dict[str, Any]:
    from fairagg.flower import InProcessGrid, fairagg_client_app, params_to_arrays

    strategy = _strategy(rule, K, m, args)
    grid = InProcessGrid(fairagg_client_app(model, data), K, seed=args.seed)
    t0 = time.perf_counter()
    strategy.start(
        grid=grid,
        initial_arrays=params_to_arrays(model.init_params(args.seed)),
        num_rounds=args.rounds,
    )
    return _flower_result(strategy, time.perf_counter() - t0)


def _flower_result(strategy, total: float) -> dict[str, Any]:
    return {
        "params": np.asarray(strategy.reported_params),
        "selected": np.stack([r.client_ids for r in strategy.rounds]),
        "round_s": [r.seconds for r in strategy.rounds],
        "total_s": total,
    }


def _row(K: int, m: int, engine: str, res: dict, ref: dict, args) -> dict[str, Any]:
    rel = float(np.max(np.abs(res["params"] - ref["params"])) / np.linalg.norm(ref["params"]))
    median = float(np.median(res["round_s"][1:]))
    ref_median = float(np.median(ref["round_s"][1:]))
    return {
        "clients": K,
        "clients_per_round": m,
        "engine": engine,
        "rounds": args.rounds,
        "rel_diff": rel,
        "same_clients": bool(np.array_equal(res["selected"], ref["selected"])),
        "first_round_s": float(res["round_s"][0]),
        "median_round_s": median,
        "ratio_to_fairagg": median / ref_median,
        "total_s": float(res["total_s"]),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'K':>4} {'m':>4}  {'engine':<17}{'rel. diff':>10}  {'same S':<7}"
        f"{'round 1 (s)':>12}{'median round (s)':>18}{'x fairagg':>11}{'total (s)':>11}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['clients']:>4} {r['clients_per_round']:>4}  {r['engine']:<17}"
            f"{r['rel_diff']:>10.1e}  {'yes' if r['same_clients'] else 'NO':<7}"
            f"{r['first_round_s']:>12.3f}{r['median_round_s']:>18.4f}"
            f"{r['ratio_to_fairagg']:>11.1f}{r['total_s']:>11.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        import flwr

        ray = importlib.import_module("ray") if "ray" in args.engines else None
    except ImportError as exc:
        log(
            "this script needs Flower's simulation engine: pip install 'fairagg[flower-sim]' "
            f"({exc})"
        )
        return 2
    if not args.verbose:
        logging.getLogger("flwr").setLevel(logging.WARNING)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results = CsvAppender(out / "results.csv", RESULT_FIELDS)
    per_round = CsvAppender(out / "rounds.csv", ("clients", "engine", "round", "seconds"))
    rule = make_rule(args.rule)
    rows: list[dict[str, Any]] = []
    for K in args.clients:
        m = _clients_per_round(args.clients_per_round, K, args.rule)
        loader = functools.partial(load, args.data, num_clients=K, seed=0)
        data = loader()
        model = make_model(args.model, data.n_features, data.n_classes)
        log(f"K = {K}, m = {m}: fairagg.simulate ({args.rounds} rounds)")
        ref = _run_fairagg(rule, model, data, m, args)
        runs = {"fairagg": ref}
        if "inprocess" in args.engines:
            log(f"K = {K}: Flower through InProcessGrid (no Ray)")
            runs["flower-inprocess"] = _run_flower_inprocess(rule, model, data, K, m, args)
        if "ray" in args.engines:
            log(f"K = {K}: Flower's simulation engine (Ray), {K} virtual SuperNodes")
            runs["flower-ray"] = _run_flower_ray(rule, model, loader, K, m, args)
        for engine, res in runs.items():
            row = _row(K, m, engine, res, ref, args)
            rows.append(row)
            results.write([row])
            per_round.write(
                [
                    {"clients": K, "engine": engine, "round": i + 1, "seconds": s}
                    for i, s in enumerate(res["round_s"])
                ]
            )
            log(
                f"  {engine:<17} rel. diff {row['rel_diff']:.1e}, median round "
                f"{row['median_round_s']:.4f} s ({row['ratio_to_fairagg']:.1f} x fairagg)"
            )
    table = _table(rows)
    print(
        f"rule {args.rule}, data {args.data}, model {args.model}, {args.rounds} rounds, "
        f"{args.epochs} epoch(s), batch {args.batch_size}, lr {args.lr}, seed {args.seed}; "
        f"Flower {flwr.__version__}, Ray {ray.__version__ if ray else '-'}, "
        f"{os.cpu_count()} cores"
    )
    print(table)
    ok = all(r["rel_diff"] <= TOLERANCE and r["same_clients"] for r in rows)
    verdict = (
        f"every Flower run equals fairagg.simulate to {TOLERANCE:g} (relative)"
        if ok
        else "a Flower run differs from fairagg.simulate beyond round-off"
    )
    print(verdict)
    summary = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "versions": {
            "fairagg": fairagg.__version__,
            "flwr": flwr.__version__,
            "ray": ray.__version__ if ray else None,
            "python": platform.python_version(),
        },
        "cpu_count": os.cpu_count(),
        "results": rows,
        "agree": ok,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
