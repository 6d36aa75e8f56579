"""The ``fairagg`` command line: ``run``, ``compare``, ``rules``, ``vectors`` and ``check``.

``fairagg run`` with no argument reproduces the FairAvg paper's Synthetic set-up (Table 1: 30
clients, power-law sizes, a two-dense-layer network, SGD with lr 0.01, F = 20 local epochs,
batch 10, 200 rounds, K' = 10 reporting clients) on Synthetic(1, 1). Bad arguments print one line
and exit with status 2; a run that fails midway keeps the rounds it recorded.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from . import __version__
from ._tolerance import DEFAULT_SOLVER_TOL
from .metrics import fairness_summary
from .report import REPORT_FILES
from .rules import RULES

__all__ = ["main"]

#: Columns of the per-run summary tables, with their headers.
TABLE_COLUMNS = (
    ("average", "Average"),
    ("worst_10", "Worst 10%"),
    ("best_10", "Best 10%"),
    ("variance", "Variance"),
    ("angle", "Angle (°)"),
    ("kl", "KL(a||u)"),
    ("gini", "Gini×100"),
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fairagg: error: {message}\n")


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return vals


def _rule_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in RULES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown rule {', '.join(unknown) or text!r}; choose from {', '.join(RULES)}"
        )
    return names


def _rule_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    for cast in (int, float):
        try:
            return key, cast(raw)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(raw.lower(), raw)


def _rule_kwargs(pairs: Sequence[tuple[str, Any]], rule_name: str) -> dict[str, Any]:
    """Hyper-parameters for ``rule_name`` from ``--rule-arg``: ``K=V`` goes to every rule,
    ``RULE.K=V`` only to RULE."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        scope, dot, name = key.rpartition(".")
        if not dot:
            out[key] = value
        elif scope == rule_name:
            out[name] = value
    return out


def _add_experiment_args(p: argparse.ArgumentParser) -> None:
    from .data import DATA_SPECS

    g = p.add_argument_group("data")
    g.add_argument(
        "--data",
        default="synthetic:1,1",
        metavar="SPEC",
        help=f"dataset: {'; '.join(DATA_SPECS)} (default: %(default)s)",
    )
    g.add_argument("--clients", type=int, default=30, help="number of clients K (default: 30)")
    g.add_argument(
        "--test-fraction", type=float, default=0.2, help="per-client test split (default: 0.2)"
    )
    g.add_argument("--data-seed", type=int, default=0, help="seed of the data (default: 0)")
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        choices=("mlp", "logistic"),
        default="mlp",
        help="mlp: two dense layers as in the FairAvg paper (default); logistic",
    )
    g.add_argument("--hidden", type=int, default=32, help="MLP hidden width (default: 32)")
    g.add_argument("--activation", choices=("tanh", "relu"), default="tanh")
    g.add_argument("--l2", type=float, default=0.0, help="L2 penalty on weights (default: 0)")
    g = p.add_argument_group("training")
    g.add_argument("--rounds", type=int, default=200, help="rounds T (default: 200)")
    g.add_argument("--epochs", type=int, default=20, help="local epochs F (default: 20)")
    g.add_argument("--batch", type=int, default=10, help="local batch size (default: 10)")
    g.add_argument("--lr", type=float, default=0.01, help="local SGD step (default: 0.01)")
    g.add_argument(
        "--momentum",
        type=float,
        default=None,
        help="client momentum (default: the rule's own, FedFa's client_momentum, else 0)",
    )
    g.add_argument("--prox-mu", type=float, default=0.0, help="FedProx term μ (default: 0)")
    g.add_argument(
        "--sampling",
        choices=("uniform", "proportional"),
        default="uniform",
        help="client sampling without replacement (default: uniform)",
    )
    g.add_argument("--eval-every", type=int, default=1, help="evaluate every N rounds")
    g.add_argument(
        "--rule-arg",
        type=_rule_arg,
        action="append",
        default=[],
        metavar="K=V",
        help="hyper-parameter passed to every rule, or RULE.K=V to one rule only (e.g. "
        "qffl-eg.q=5); repeatable",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _build_parser() -> _Parser:
    parser = _Parser(prog="fairagg", description="Fair federated-learning aggregation, exactly.")
    parser.add_argument("--version", action="version", version=f"fairagg {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="train with one rule and write results to --out")
    run.add_argument(
        "--rule",
        choices=list(RULES),
        default="fedavg",
        metavar="RULE",
        help=f"one of {', '.join(RULES)} (default: fedavg)",
    )
    run.add_argument(
        "--clients-per-round",
        type=int,
        default=10,
        help="reporting clients K' per round (default: 10)",
    )
    run.add_argument("--seed", type=int, default=0, help="run seed (default: 0)")
    run.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: runs/RULE-sSEED); a folder that holds a run is refused",
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out (its files are removed first, so nothing is mixed)",
    )
    run.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run in DIR (finished, interrupted or killed) from its checkpoint, "
        "as configured there; --rounds T runs it to T rounds",
    )
    run.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="run the configuration of a saved config.json; flags given beside it override",
    )
    _add_experiment_args(run)

    cmp_ = sub.add_parser("compare", help="run several rules on identical data, samples, seeds")
    cmp_.add_argument(
        "--rules",
        type=_rule_list,
        default=["fedavg", "fairavg"],
        help="comma-separated rule names (default: fedavg,fairavg)",
    )
    cmp_.add_argument(
        "--clients-per-round",
        type=_int_list,
        default=[10],
        metavar="K'[,K'...]",
        help="one or more values of K' (default: 10)",
    )
    cmp_.add_argument(
        "--seeds", type=_int_list, default=[0], metavar="S[,S...]", help="run seeds (default: 0)"
    )
    cmp_.add_argument(
        "--out",
        type=Path,
        default=Path("runs/compare"),
        help="output folder (default: runs/compare); a folder that holds a comparison is refused",
    )
    cmp_.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the comparison in --out (its files and runs/ are removed first)",
    )
    _add_experiment_args(cmp_)

    rules_p = sub.add_parser("rules", help="list the registered rules, or describe one")
    rules_p.add_argument(
        "rule",
        nargs="?",
        choices=list(RULES),
        metavar="RULE",
        help="a rule: its hyper-parameters with defaults, ranges, meaning and variants",
    )

    rep = sub.add_parser(
        "report",
        help="tables, plots and an HTML page from saved runs, without training",
        description="Read saved runs (run folders, history files, or a compare folder) and "
        "write report.html (tables, plots, configurations), report.md, report.csv, curves.png "
        "and accuracy_distribution.png. Runs that differ only in their seed are one group "
        "(mean ± std, shaded bands); other groups are put side by side.",
    )
    rep.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="a run folder or history")
    rep.add_argument(
        "--out", type=Path, default=Path("runs/report"), help="output folder (default: %(default)s)"
    )
    vec = sub.add_parser(
        "vectors",
        help="write golden vectors of every rule and formula (or --check a folder of them)",
    )
    vec.add_argument(
        "--out",
        type=Path,
        default=Path("runs/vectors"),
        help="output folder (default: runs/vectors)",
    )
    vec.add_argument(
        "--seed", type=int, default=None, help="seed of the inputs (default: the library's)"
    )
    vec.add_argument(
        "--check",
        action="store_true",
        help="instead of writing, recompute every case under --out and report differences",
    )
    vec.add_argument(
        "--compare",
        type=Path,
        metavar="RESULTS",
        help="compare your outputs per case (a JSON file keyed like 'rules/afl/small') with "
        "the golden cases under --out, and print every comparison",
    )
    vec.add_argument(
        "--precision",
        choices=("float64", "solver", "float32"),
        default="float64",
        help="with --compare: what your code computes in (each output's error bound in that "
        "precision, as the golden files carry it; default float64)",
    )
    vec.add_argument(
        "--solver-tol",
        type=float,
        default=DEFAULT_SOLVER_TOL,
        metavar="TOL",
        help=f"with --compare --precision solver: your solver's accuracy (default "
        f"{DEFAULT_SOLVER_TOL:g})",
    )

    chk = sub.add_parser(
        "check",
        help="check your implementation of a rule or formula, run by --cmd in any environment",
        description="Start COMMAND once (a worker: fairagg check --template prints one for "
        "Python), drive it over stdin/stdout on fairagg's golden and generated cases, and "
        "report where it differs. Exit status 0: it conforms; 1: it differs; 2: a usage error.",
    )
    chk.add_argument("target", nargs="?", help="a rule or formula name (fairagg check --list)")
    chk.add_argument("--cmd", help='the command that starts your worker, e.g. "python w.py"')
    chk.add_argument(
        "--param",
        type=_rule_arg,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter fixed for every case (repeatable), e.g. --param q=2",
    )
    chk.add_argument(
        "--golden",
        default="all",
        help="golden cases to check: all (default), none, or comma-separated case names",
    )
    chk.add_argument(
        "--generated",
        type=int,
        default=100,
        metavar="N",
        help="generated examples to check (default: 100; 0 for none), drawn from --seed",
    )
    chk.add_argument(
        "--round-base",
        type=int,
        default=0,
        help="your code's number for fairagg's round 0 (1 if it counts rounds from 1)",
    )
    chk.add_argument(
        "--precision",
        choices=("float64", "solver", "float32"),
        default="float64",
        help="what your code computes in: each output is compared within its error bound in "
        "that precision (default float64); solver adds --solver-tol (an iterative or conic "
        "solver's argmin)",
    )
    chk.add_argument(
        "--solver-tol",
        type=float,
        default=None,
        metavar="TOL",
        help=f"with --precision solver: your solver's accuracy (default {DEFAULT_SOLVER_TOL:g})",
    )
    chk.add_argument(
        "--accept",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="a declared difference (repeatable): epsilon=VALUE (the q-FFL loss offset your "
        "code uses) or nan-on-zero-update (NaN caused by an all-zero update); such cases are "
        "counted as accepted and the check goes on",
    )
    chk.add_argument("--rtol", type=float, default=None, help="relative tolerance (overrides)")
    chk.add_argument("--atol", type=float, default=None, help="absolute tolerance (overrides)")
    chk.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for each reply (default 60)"
    )
    chk.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the generated examples (default 0; the report prints it)",
    )
    chk.add_argument(
        "--random", action="store_true", help="a new seed on every run (printed in the report)"
    )
    chk.add_argument(
        "--keep-going",
        action="store_true",
        help="also print one table of every comparison before the summary and the first "
        "difference (every case runs in every mode: the verdict and counts are the same)",
    )
    chk.add_argument(
        "--describe",
        action="store_true",
        help="print what TARGET passes to your code and what it compares, then exit",
    )
    chk.add_argument("--list", action="store_true", help="list the targets, then exit")
    chk.add_argument(
        "--template",
        action="store_true",
        help="print a Python worker to copy (it imports nothing from fairagg), then exit",
    )
    return parser


# ------------------------------------------------------------------------------------------------
def _check_args(args: argparse.Namespace) -> None:
    """Range checks with the flags' own names, before any data is generated or file written."""
    kpr = (
        args.clients_per_round
        if isinstance(args.clients_per_round, list)
        else [args.clients_per_round]
    )
    checks = [
        ("--clients", args.clients >= 1, "at least 1"),
        (
            "--clients-per-round",
            all(1 <= k <= args.clients for k in kpr),
            f"between 1 and --clients ({args.clients})",
        ),
        ("--rounds", args.rounds >= 1, "at least 1"),
        ("--epochs", args.epochs >= 1, "at least 1"),
        ("--batch", args.batch >= 1, "at least 1"),
        ("--lr", np.isfinite(args.lr) and args.lr > 0, "a finite number > 0"),
        ("--momentum", args.momentum is None or 0 <= args.momentum < 1, "in [0, 1)"),
        ("--prox-mu", np.isfinite(args.prox_mu) and args.prox_mu >= 0, "a finite number >= 0"),
        ("--l2", np.isfinite(args.l2) and args.l2 >= 0, "a finite number >= 0"),
        ("--hidden", args.hidden >= 1, "at least 1"),
        ("--eval-every", args.eval_every >= 1, "at least 1"),
        ("--test-fraction", 0 < args.test_fraction < 1, "in (0, 1)"),
        ("--data-seed", args.data_seed >= 0, ">= 0"),
    ]
    seeds = getattr(args, "seeds", None) or [args.seed]
    checks.append(("--seed" if hasattr(args, "seed") else "--seeds", min(seeds) >= 0, ">= 0"))
    for flag, ok, want in checks:
        if not ok:
            raise ValueError(f"{flag} must be {want}")
    for flag, values in (
        ("--rules", getattr(args, "rules", None)),
        ("--seeds", getattr(args, "seeds", None)),
        ("--clients-per-round", kpr if isinstance(args.clients_per_round, list) else None),
    ):
        twice = sorted({str(v) for v in values or () if list(values).count(v) > 1})
        if twice:
            raise ValueError(f"{flag} lists {', '.join(twice)} more than once")
    rules = getattr(args, "rules", None) or [getattr(args, "rule", None)]
    for name in rules:
        if name in RULES and RULES[name].full_participation and any(k != args.clients for k in kpr):
            raise ValueError(
                f"--clients-per-round must equal --clients ({args.clients}) for {name}, which "
                "needs every client every round"
            )
    for key, _ in getattr(args, "rule_arg", []):
        scope, dot, _ = key.rpartition(".")
        if dot and scope not in rules:
            raise ValueError(
                f"--rule-arg {key}=...: {scope!r} is not one of the rules run ({', '.join(rules)})"
            )


def _make_experiment(args: argparse.Namespace):
    from .data import load
    from .models import make_model

    data = load(
        args.data, num_clients=args.clients, seed=args.data_seed, test_fraction=args.test_fraction
    )
    kw: dict[str, Any] = {"l2": args.l2}
    if args.model == "mlp":
        kw.update(n_hidden=args.hidden, activation=args.activation)
    model = make_model(args.model, data.n_features, data.n_classes, **kw)
    return data, model


#: rounds.csv: accuracies in percent (the average weighted by the clients' test samples, the
#: client mean unweighted), the variance in %², the training loss weighted by train samples.
_ROUNDS_HEADER = [
    "round",
    "average_pct",
    "client_mean_pct",
    "worst_10_pct",
    "best_10_pct",
    "variance_pct2",
    "train_loss_weighted",
    "time_local_s",
    "time_aggregate_s",
]
#: The unit of each key of :func:`fairagg.metrics.fairness_summary`, as printed.
SUMMARY_UNITS = {
    "average": "% (weighted by test samples)",
    "client_mean": "% (unweighted)",
    "worst_10": "%",
    "best_10": "%",
    "worst_20": "%",
    "best_20": "%",
    "min": "%",
    "max": "%",
    "variance": "%² (unweighted)",
    "std": "% (unweighted)",
    "angle": "degrees",
    "kl": "nats",
    "entropy": "nats",
    "gini": "fraction in [0, 1)",
}


def _rounds_csv(path: Path, keep: int | None) -> Any:
    """``rounds.csv`` opened for appending rows: new, or (``keep``) cut back to the rows of
    the rounds a resumed run keeps, written to a temporary file and renamed over the old."""
    if keep is None or not path.exists():
        fh = open(path, "w", newline="")
        csv.writer(fh).writerow(_ROUNDS_HEADER)
        return fh
    with open(path, newline="") as old:
        rows = [r for r in csv.reader(old)][1:]
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_ROUNDS_HEADER)
        w.writerows(r for r in rows if r and r[0].isdigit() and int(r[0]) <= keep)
    tmp.replace(path)
    return open(path, "a", newline="")


def _run_one(
    args,
    data,
    model,
    rule_name: str,
    k_per_round: int,
    seed: int,
    out: Path,
    label: str,
    *,
    resume: bool = False,
):
    """One simulation that streams its per-round CSV to ``out``, keeps a checkpoint there and
    saves its history; ``resume`` continues it from the checkpoint."""
    from .rules import make_rule
    from .simulate import History, load_checkpoint, simulate

    rule = make_rule(rule_name, **_rule_kwargs(args.rule_arg, rule_name))
    history = History()
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"{label}rounds.csv"
    ckpt = out / f"{label}checkpoint.pkl"
    keep = load_checkpoint(ckpt)["round"] if resume else None
    with _rounds_csv(csv_path, keep) as fh:
        writer = csv.writer(fh)

        def on_round(h: History) -> None:
            t = int(h.latest("round"))
            row: list[Any] = [t]
            if int(h.latest("eval_round")) == t:
                s = fairness_summary(h.latest("test_accuracy"), h.num_test_samples)
                keys = ("average", "client_mean", "worst_10", "best_10", "variance")
                row += [f"{s[k]:.4f}" for k in keys]
                n = h.num_train_samples
                row.append(f"{h.latest('train_loss') @ n / n.sum():.6f}")
            else:
                row += [""] * 6
            row += [f"{h.latest('time_local'):.5f}", f"{h.latest('time_aggregate'):.6f}"]
            writer.writerow(row)
            fh.flush()

        try:
            simulate(
                rule,
                model,
                data,
                rounds=args.rounds,
                clients_per_round=k_per_round,
                epochs=args.epochs,
                batch_size=args.batch,
                lr=args.lr,
                momentum=args.momentum,
                prox_mu=args.prox_mu,
                sampling=args.sampling,
                seed=seed,
                eval_every=args.eval_every,
                history=history,
                callback=on_round,
                progress=not args.quiet and sys.stderr.isatty(),
                checkpoint=ckpt,
                resume=resume,
            )
        finally:
            history.config.update(data=args.data, data_seed=args.data_seed)
            history.save(out / f"{label}history.npz")
    return history


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        cells = zip(r, widths, strict=True)
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(cells))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def _write_client_csv(path: Path, data, h) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "client",
                "n_train",
                "n_test",
                "test_accuracy_pct",
                "test_loss",
                "train_accuracy_pct",
                "train_loss",
            ]
        )
        for k in range(data.num_clients):
            w.writerow(
                [
                    k,
                    int(h.num_train_samples[k]),
                    int(h.num_test_samples[k]),
                    f"{100.0 * h.test_accuracy[-1][k]:.4f}",
                    f"{h.test_loss[-1][k]:.6f}",
                    f"{100.0 * h.train_accuracy[-1][k]:.4f}",
                    f"{h.train_loss[-1][k]:.6f}",
                ]
            )


#: Hyper-parameters the command line gives a rule unless --rule-arg sets them: where the
#: library's default (the paper's) takes no sensible step in the command line's experiment
#: (FairAvg's Synthetic set-up: 20 local epochs, lr 0.01, one gradient per round for AFL). The
#: docs' Results page (default runs) shows the effect; a note on standard error says when one is
#: used, and config.json records it.
EXPERIMENT_RULE_ARGS: dict[str, dict[str, Any]] = {
    # q-FedAvg's L = 1/lr = 100 weighs h_k's q F^(q-1) ‖L δ_k‖² term 10^4 times: after 20
    # epochs the step is about 1/100 of FedAvg's (53 % average, 0 % worst-10 % at 200 rounds)
    "qfedavg": {"lipschitz": 1.0},
    # AFL takes one full-batch gradient step per round: at γ_w = lr = 0.01 200 steps end at
    # 64 % average and 0 % worst-10 %
    "afl": {"lr": 0.1},
}


def _experiment_rule_args(args: argparse.Namespace, rules: Sequence[str]) -> None:
    """Add :data:`EXPERIMENT_RULE_ARGS` to ``args.rule_arg`` where the user did not set them."""
    given = {key for key, _ in args.rule_arg}
    for rule in rules:
        for key, value in EXPERIMENT_RULE_ARGS.get(rule, {}).items():
            if key in given or f"{rule}.{key}" in given:
                continue
            args.rule_arg.append((f"{rule}.{key}", value))
            print(
                f"{rule}: {key} = {value} in this experiment (--rule-arg {rule}.{key}=VALUE "
                "to change it; see the docs' Results page, default runs)",
                file=sys.stderr,
            )


#: The files ``fairagg run`` writes into its folder (and removes first with --overwrite).
RUN_FILES = (
    "config.json",
    "rounds.csv",
    "clients.csv",
    "summary.json",
    "history.npz",
    "checkpoint.pkl",
    "acf.png",
    *REPORT_FILES,  # the run's own report, curves.png and accuracy_distribution.png among them
)
#: Entries of a saved config.json that are not settings of the run.
_NOT_SETTINGS = ("command", "out", "overwrite", "resume", "config", "quiet")


def _explicit(argv: Sequence[str] | None) -> set[str]:
    """The ``run`` options given on the command line (not their defaults)."""
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices["run"]._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command"}


def _read_config(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"{what}: no such file: {path}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: {path} is not a fairagg config.json ({exc})") from None
    if not isinstance(config, dict) or "rule" not in config:
        raise ValueError(f"{what}: {path} is not a fairagg run's config.json")
    return config


def _apply_config(args: argparse.Namespace, config: dict[str, Any], keep: set[str], what: str):
    """Set ``args`` from a saved config, except the options in ``keep`` (given explicitly)."""
    known = set(vars(args))
    for key, value in config.items():
        if key in _NOT_SETTINGS or key in keep:
            continue
        if key not in known:
            raise ValueError(f"{what}: unknown setting {key!r} in the config")
        if key == "rule_arg":
            value = list(value.items()) if isinstance(value, dict) else value
        setattr(args, key, value)


def _check_out(out: Path, *, overwrite: bool, resume: bool) -> None:
    """Refuse an output folder that cannot hold this run, before anything is written."""
    _check_out_path(out)
    if resume:
        return
    held = [f for f in RUN_FILES if (out / f).exists()]
    if held and not overwrite:
        raise ValueError(
            f"--out: {out} already holds a run ({', '.join(held[:3])}); pass --overwrite to "
            f"replace it, or --resume {out} to continue it"
        )


def _cmd_run(args: argparse.Namespace, explicit: set[str] | None = None) -> int:
    from .plots import plot_acf
    from .rules import make_rule

    explicit = set() if explicit is None else explicit
    resume = args.resume is not None
    if resume:
        others = sorted(explicit - {"resume", "rounds", "quiet"})
        if others:
            flags = ", ".join("--" + k.replace("_", "-") for k in others)
            raise ValueError(
                f"--resume continues the run as its config.json says; only --rounds and "
                f"--quiet may go with it (got {flags})"
            )
        _apply_config(args, _read_config(args.resume / "config.json", "--resume"),
                      explicit, "--resume")  # fmt: skip
        if not (args.resume / "checkpoint.pkl").is_file():
            raise ValueError(f"--resume: {args.resume} has no checkpoint.pkl to continue from")
        from .simulate import load_checkpoint

        done = load_checkpoint(args.resume / "checkpoint.pkl")["round"]
        if args.rounds < done:  # before config.json is rewritten with --rounds
            raise ValueError(
                f"--rounds {args.rounds} is fewer than the {done} rounds {args.resume} holds"
            )
        args.out = args.resume
    elif args.config is not None:
        _apply_config(args, _read_config(args.config, "--config"), explicit, "--config")
    if args.out is None:
        args.out = Path("runs") / f"{args.rule}-s{args.seed}"
    if (
        RULES[args.rule].full_participation
        and "clients_per_round" not in explicit
        and args.clients_per_round != args.clients
    ):
        print(
            f"{args.rule} takes every client in every round: --clients-per-round {args.clients}",
            file=sys.stderr,
        )
        args.clients_per_round = args.clients
    rule_name = args.rule
    out: Path = args.out
    if not resume:  # a resumed run's config.json holds them already
        _experiment_rule_args(args, [rule_name])
    _check_args(args)
    from .simulate import _client_momentum

    rule = make_rule(rule_name, **_rule_kwargs(args.rule_arg, rule_name))  # a bad --rule-arg
    _client_momentum(args.momentum, rule.local, rule.name)  # --momentum against the rule's
    _check_out(out, overwrite=args.overwrite, resume=resume)
    data, model = _make_experiment(args)
    if args.overwrite:
        for f in RUN_FILES:
            (out / f).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("overwrite", "resume", "config", "command")
    }
    config["rule"] = rule_name
    config["rule_arg"] = dict(args.rule_arg)
    tmp = out / ".config.json.tmp"
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.replace(out / "config.json")
    print(
        f"{data.name}: {data.num_clients} clients, {int(data.num_train_samples.sum())} train / "
        f"{int(data.num_test_samples.sum())} test samples; model {model!r}",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    h = _run_one(
        args, data, model, rule_name, args.clients_per_round, args.seed, out, "", resume=resume
    )
    summary = h.summary()
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _write_client_csv(out / "clients.csv", data, h)
    from .report import write_report

    write_report([out / "history.npz"], out)  # curves.png, accuracy_distribution.png, report.*
    plot_acf({rule_name: h}, out / "acf.png")
    rows = [[k, _fmt(v, ".4f"), SUMMARY_UNITS.get(k, "")] for k, v in summary.items()]
    print(
        f"\n{rule_name} after {h.num_rounds} rounds ({time.perf_counter() - t0:.1f} s), over "
        f"{data.num_clients} clients' test splits:"
    )
    print(_table(rows, ["metric", "value", "unit"]))
    for line in _collapse(h):
        print(f"warning: {line}")
    print(
        f"\nwrote {out}/: config.json rounds.csv checkpoint.pkl clients.csv summary.json "
        "history.npz report.html report.md report.csv curves.png accuracy_distribution.png acf.png"
    )
    return 0


#: What ``fairagg compare`` writes into its folder, besides its runs/ folder.
COMPARE_FILES = ("config.json", "summary.csv", "table.txt", "acf.png", *REPORT_FILES)
#: The suffixes of the files of one run in compare's runs/ folder.
_COMPARE_RUN_SUFFIXES = ("-rounds.csv", "-history.npz", "-checkpoint.pkl")


def _check_compare_out(out: Path, *, overwrite: bool) -> None:
    _check_out_path(out)
    held = [f for f in COMPARE_FILES if (out / f).exists()]
    if (out / "runs").is_dir() and any((out / "runs").iterdir()):
        held.append("runs/")
    if held and not overwrite:
        raise ValueError(
            f"--out: {out} already holds a comparison ({', '.join(held[:3])}); pass "
            "--overwrite to replace it"
        )


def _remove_compare(out: Path) -> None:
    """Remove a comparison's own files (and nothing else) before it is replaced."""
    for f in COMPARE_FILES:
        (out / f).unlink(missing_ok=True)
    runs = out / "runs"
    if runs.is_dir():
        for f in runs.iterdir():
            if f.is_file() and f.name.endswith(_COMPARE_RUN_SUFFIXES):
                f.unlink()


def _check_out_path(out: Path) -> None:
    """--out must be a folder or a path where one can be made (no file on the way)."""
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is" if parent == out else f"is inside {parent}, which is"
            raise ValueError(f"--out: {out} {what} a file, not a folder")


def _collapse(h) -> list[str]:
    """Signs that a run collapsed: its worst clients at 0 %, or its training loss risen."""
    out = []
    s = h.summary()
    if s["worst_10"] is not None and s["worst_10"] <= 0.0:
        out.append("the worst 10 % of clients end at 0 % accuracy")
    loss = h.mean_train_loss()
    if loss.size > 1 and not loss[-1] <= loss[0]:
        out.append(f"the training loss rose from {loss[0]:.4g} to {loss[-1]:.4g}")
    return out


def _cmd_compare(args: argparse.Namespace) -> int:
    from .plots import plot_acf

    out: Path = args.out
    _check_args(args)
    _check_compare_out(out, overwrite=args.overwrite)
    _experiment_rule_args(args, args.rules)
    data, model = _make_experiment(args)
    if args.overwrite:
        _remove_compare(out)
    out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    config["rule_arg"] = dict(args.rule_arg)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"{data.name}: {data.num_clients} clients; model {model!r}", file=sys.stderr)
    records: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    for kpr in args.clients_per_round:
        for seed in args.seeds:
            for rule_name in args.rules:
                label = f"{rule_name}-k{kpr}-s{seed}-"
                h = _run_one(args, data, model, rule_name, kpr, seed, out / "runs", label)
                records.append(
                    {"rule": rule_name, "clients_per_round": kpr, "seed": seed, **h.summary()}
                )
                if kpr == args.clients_per_round[0] and seed == args.seeds[0]:
                    first[rule_name] = h
    keys = [k for k in records[0] if k not in ("rule", "clients_per_round", "seed")]
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["rule", "clients_per_round", "seed", *keys])
        w.writeheader()
        w.writerows(records)
    rows = []
    for kpr in args.clients_per_round:
        for rule_name in args.rules:
            sel = [r for r in records if r["rule"] == rule_name and r["clients_per_round"] == kpr]
            row = [rule_name, str(kpr)]
            for key, _ in TABLE_COLUMNS:
                vals = [r[key] for r in sel if r[key] is not None]
                if not vals:
                    row.append("n/a")
                else:
                    if key == "gini":  # a fraction in [0, 1); shown in percent like the others
                        vals = [100.0 * v for v in vals]
                    spec = ".4f" if key == "kl" else ".2f"
                    if len(sel) == 1:
                        row.append(f"{vals[0]:{spec}}")
                    else:
                        row.append(f"{np.mean(vals):{spec}} ± {np.std(vals):{spec}}")
            rows.append(row)
    header = ["rule", "K'"] + [h for _, h in TABLE_COLUMNS]
    table = _table(rows, header)
    n_seeds = len(args.seeds)
    caption = (
        f"Final test accuracy (%) over {data.num_clients} clients on {data.name}, "
        f"{args.rounds} rounds; mean ± std over {n_seeds} seed(s)"
        if n_seeds > 1
        else f"Final test accuracy (%) over {data.num_clients} clients on {data.name}, "
        f"{args.rounds} rounds, seed {args.seeds[0]}"
    )
    (out / "table.txt").write_text(caption + "\n" + table + "\n")
    from .report import write_report

    # the curves and distributions over every seed, grouped by rule and K' (fairagg report)
    write_report(
        [
            out / "runs" / f"{rule}-k{kpr}-s{seed}-history.npz"
            for kpr in args.clients_per_round
            for seed in args.seeds
            for rule in args.rules
        ],
        out,
    )  # in the order given: groups appear as the rules do
    plot_acf(first, out / "acf.png")
    print("\n" + caption)
    print(table)
    print(
        f"\nwrote {out}/: config.json summary.csv table.txt report.html report.md report.csv "
        "curves.png accuracy_distribution.png acf.png runs/"
    )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import write_report

    paths = write_report(args.runs, args.out)
    print(f"wrote {args.out}/: {' '.join(p.name for p in paths)}")
    return 0


def _doc_parameters(doc: str) -> dict[str, tuple[str, str]]:
    """``{name: (type, description)}`` from a numpydoc ``Parameters`` section."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: dict[str, tuple[str, str]] = {}
    try:
        i = lines.index("Parameters") + 2
    except ValueError:
        return out
    names: list[str] = []
    for line in lines[i:]:
        if not line.strip():
            if names and out[names[0]][1]:
                names = []  # a blank line after a description ends the section's entries
            continue
        if not line.startswith(" "):
            if line.startswith("``") or line.endswith(":") and " : " not in line:
                break  # prose after the section
            head, _, kind = line.partition(" : ")
            names = [n.strip() for n in head.split(",")]  # "alpha, beta : float"
            for n in names:
                out[n] = (kind.strip(), "")
        elif names:
            for n in names:
                kind, text = out[n]
                out[n] = (kind, f"{text} {line.strip()}".strip())
    return out


def _wrap(text: str, indent: str, width: int = 100) -> str:
    return textwrap.fill(
        text, width=width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )


def _describe_rule(name: str) -> str:
    spec = RULES[name]
    params = inspect.signature(spec.factory).parameters
    docs = _doc_parameters(spec.factory.__doc__ or "")
    first = inspect.cleandoc(spec.factory.__doc__ or "").splitlines()[0]
    who = "every client, every round" if spec.full_participation else "any clients per round"
    lines = [
        _wrap(f"{name}: {spec.summary}", ""),
        _wrap(f"{spec.paper}, {spec.equations}. {first}", "  "),
        f"  reports: {', '.join(('deltas', 'num_samples', *spec.needs))}; clients: {who}",
        "",
        "hyper-parameters (--rule-arg NAME=VALUE):",
    ]
    for p in params.values():
        default = "required" if p.default is inspect.Parameter.empty else repr(p.default)
        kind, text = docs.get(p.name, ("", ""))
        lines.append(f"  {p.name} = {default}" + (f"    ({kind})" if kind else ""))
        if text:
            lines.append(_wrap(text.replace("``", ""), "      "))
    return "\n".join(lines)


def _cmd_rules(args: argparse.Namespace) -> int:
    if args.rule is not None:
        print(_describe_rule(args.rule))
        return 0
    w_name = max(len(n) for n in RULES) + 2
    w_paper = max(len(s.paper) for s in RULES.values()) + 2
    print(f"{'rule':<{w_name}}{'paper':<{w_paper}}equations")
    for spec in RULES.values():
        print(f"{spec.name:<{w_name}}{spec.paper:<{w_paper}}{spec.equations}")
        needs = f" (reports {', '.join(spec.needs)})" if spec.needs else ""
        print(_wrap(spec.summary + needs, " " * 4))
    print("\nfairagg rules RULE: a rule's hyper-parameters, defaults, ranges and variants")
    return 0


def _cmd_vectors(args: argparse.Namespace) -> int:
    from . import vectors

    _check_out_path(args.out)
    if args.compare is not None:
        if args.check:
            raise ValueError("--compare and --check are two different checks: give one")
        from .conformance import compare_results

        if not (np.isfinite(args.solver_tol) and args.solver_tol > 0):
            raise ValueError(f"--solver-tol must be a finite number > 0; got {args.solver_tol}")
        report = compare_results(
            args.compare, args.out, precision=args.precision, solver_tol=args.solver_tol
        )
        print(report)
        return 1 if report.failed else 0

    if args.check:
        if not (args.out / "index.json").is_file():
            raise ValueError(f"--out {args.out} holds no golden vectors (no index.json)")
        checks = vectors.compare_vectors(args.out)
        for c in checks:
            for line in c.fails:
                print(line)
        # The distance of every case that is not bit-identical: expectations depend on the
        # machine's BLAS and SIMD maths in their last digits (docs/pages/guides/golden-vectors.md).
        moved = sorted((c for c in checks if c.ulps > 0), key=lambda c: -c.ulps)
        if moved:
            print(f"{'case':<44} {'ulps':>10} {'of tolerance':>13}")
            for c in moved:
                print(f"{c.where:<44} {c.ulps:>10.4g} {c.tolerance_used:>13.2g}")
        n = len(checks)
        bad = sum(1 for c in checks if c.fails)
        same = n - len(moved)
        print(
            f"{n - bad} of {n} cases agree with this fairagg ({same} bit-identical; "
            f"the largest distance {max((c.ulps for c in checks), default=0.0):.4g} ulps, "
            f"{max((c.tolerance_used for c in checks), default=0.0):.2g} of the tolerance)"
        )
        return 1 if bad else 0
    seed = vectors.DEFAULT_SEED if args.seed is None else args.seed
    if seed < 0:
        raise ValueError(f"--seed must be >= 0; got {seed}")
    paths = vectors.write_vectors(args.out, seed)
    print(f"wrote {len(paths)} cases to {args.out} (index.json, schema.json)")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from . import conformance

    if args.template:
        print(Path(__file__).with_name("_worker_template.py").read_text(encoding="utf-8"), end="")
        return 0
    if args.list:
        print("\n".join(conformance.targets()))
        return 0
    if args.target is None:
        raise ValueError("check needs a TARGET (fairagg check --list names them)")
    if args.describe:
        print(conformance.describe(args.target))
        return 0
    if args.cmd is None:
        raise ValueError("check needs --cmd COMMAND, the command that starts your worker")
    conformance.describe(args.target)  # an unknown target, before the worker starts
    if args.generated < 0:
        raise ValueError(f"--generated must be >= 0; got {args.generated}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0; got {args.seed}")
    if args.solver_tol is not None:
        if args.precision != "solver":
            raise ValueError("--solver-tol applies to --precision solver")
        if not (np.isfinite(args.solver_tol) and args.solver_tol > 0):
            raise ValueError(f"--solver-tol must be a finite number > 0; got {args.solver_tol}")
    if args.round_base < 0:
        raise ValueError(f"--round-base must be >= 0; got {args.round_base}")
    if args.golden == "none" and args.generated == 0:
        raise ValueError("--golden none and --generated 0 leave nothing to check")
    golden: bool | list[str]
    if args.golden == "all":
        golden = True
    elif args.golden == "none":
        golden = False
    else:
        golden = [g.strip() for g in args.golden.split(",") if g.strip()]
        if not golden:
            raise ValueError("--golden must be all, none or comma-separated case names")
    params = dict(args.param)
    tol = {k: v for k, v in (("rtol", args.rtol), ("atol", args.atol)) if v is not None}
    try:
        with conformance.Worker(args.cmd, timeout=args.timeout) as worker:
            report = conformance.check(
                worker,
                args.target,
                params=params,
                golden=golden,
                hypothesis=args.generated > 0,
                max_examples=max(args.generated, 1),
                round_base=args.round_base,
                seed=None if args.random else args.seed,
                raise_on_mismatch=False,
                keep_going=args.keep_going,
                precision=args.precision,
                solver_tol=args.solver_tol,
                accept=args.accept,
                **tol,
            )
    except (conformance.WorkerError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    print(report)
    return 0 if report else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fairagg`` console script; returns the exit status."""
    if argv is not None and (
        isinstance(argv, (str, bytes))
        or not isinstance(argv, Sequence)
        or not all(isinstance(a, str) for a in argv)
    ):
        raise TypeError(
            f"argv must be a sequence of str (the command line) or None; got {type(argv).__name__}"
        )
    parser = _build_parser()
    args = parser.parse_args(argv)
    command = {
        "run": lambda a: _cmd_run(a, _explicit(argv if argv is not None else sys.argv[1:])),
        "compare": _cmd_compare,
        "rules": _cmd_rules,
        "vectors": _cmd_vectors,
        "report": _cmd_report,
        "check": _cmd_check,
    }[args.command]
    try:
        return command(args)
    except BrokenPipeError:  # the reader went away (fairagg check ... | head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (ValueError, ImportError) as exc:
        print(f"fairagg: error: {exc}", file=sys.stderr)
        return 2
    except FloatingPointError as exc:
        print(f"fairagg: error: {exc}; the rounds before it are saved", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fairagg: interrupted; the rounds completed so far are saved", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
