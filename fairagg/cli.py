"""The ``fairagg`` command line: ``run``, ``compare``, ``rules``, ``vectors`` and ``check``.

``fairagg run`` with no argument reproduces the FairAvg paper's Synthetic set-up (Table 1: 30
clients, power-law sizes, a two-dense-layer network, SGD with lr 0.01, F = 20 local epochs,
batch 10, 200 rounds, K' = 10 reporting clients) on Synthetic(1, 1). Bad arguments print one line
and exit with status 2; a run that fails midway keeps the rounds it recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import inspect
import json
import os
import re
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from . import __version__
from ._settings import ExperimentSettings, SettingsError, check_setting, rule_kwargs
from ._tolerance import DEFAULT_SOLVER_TOL
from .kernels import resolve_backend
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


def _entries(text: str, what: str) -> list[str]:
    """The comma-separated entries of ``text``; an empty one (``a,,b``, ``a,``) is refused."""
    entries = [v.strip() for v in text.split(",")]
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected at least one {what}")
    if not all(entries):
        raise argparse.ArgumentTypeError(f"an empty {what} in {text!r}")
    return entries


def _int_list(text: str) -> list[int]:
    entries = _entries(text, "integer")
    try:
        return [int(v) for v in entries]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _rule_list(text: str) -> list[str]:
    names = _entries(text, "rule name")
    unknown = [n for n in names if n not in RULES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown rule {', '.join(unknown) or text!r}; choose from {', '.join(RULES)}"
        )
    return names


def _path(text: str) -> Path:
    """A path argument; an empty one is refused (``Path("")`` would be the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path; got an empty one")
    return Path(text)


#: Words of a ``K=V`` value read as Python constants (any case); other words stay strings.
_CONSTANTS = {"true": True, "false": False, "none": None, "null": None}


def _rule_arg(text: str) -> tuple[str, Any]:
    """``K=V``: V as an int, a float, true/false, none/null (the factory's default None, such
    as q-FedAvg's L = 1/lr), else the string itself; the rule checks its type and range."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    for cast in (int, float):
        try:
            return key, cast(raw)
        except ValueError:
            pass
    return key, _CONSTANTS.get(raw.lower(), raw)


def _rule_kwargs(pairs: Sequence[tuple[str, Any]], rule_name: str) -> dict[str, Any]:
    """Hyper-parameters for ``rule_name`` from ``--rule-arg``: ``K=V`` goes to every rule,
    ``RULE.K=V`` only to RULE."""
    return rule_kwargs(pairs, rule_name)


def _add_experiment_args(p: argparse.ArgumentParser, quiet: str = "no progress bar") -> None:
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
        "--backend",
        choices=("auto", "numpy", "numba", "cuda"),
        default="auto",
        help="backend of the aggregation: auto (default) is numba on a CPU, cuda with a GPU; "
        "equal to numpy, the specification, to round-off (docs: Conventions, Backends)",
    )
    g.add_argument(
        "--rule-arg",
        type=_rule_arg,
        action="append",
        default=[],
        metavar="K=V",
        help="hyper-parameter passed to every rule, or RULE.K=V to one rule only (e.g. "
        "qffl-eg.q=5); repeatable",
    )
    p.add_argument("--quiet", action="store_true", help=quiet)


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
        type=_path,
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
        type=_path,
        default=None,
        metavar="DIR",
        help="continue the run in DIR (finished, interrupted or killed) from its checkpoint, "
        "as configured there; --rounds T runs it to T rounds",
    )
    run.add_argument(
        "--config",
        type=_path,
        default=None,
        metavar="FILE",
        help="run the configuration of a saved config.json; flags given beside it override",
    )
    _add_experiment_args(run, quiet="print nothing unless the run fails (no progress bar)")

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
        type=_path,
        default=Path("runs/compare"),
        help="output folder (default: runs/compare); a folder that holds a comparison is refused",
    )
    cmp_.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the comparison in --out (its files and runs/ are removed first)",
    )
    cmp_.add_argument(
        "--resume",
        type=_path,
        default=None,
        metavar="DIR",
        help="continue the comparison in DIR (interrupted or killed) as its config.json says: "
        "each run from its checkpoint; runs that completed are kept, runs not begun are run",
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
        "(mean ± std, shaded bands); other groups are put side by side. A run that stopped "
        "before its last round is reported with the rounds it completed and why it stopped. "
        "A folder that holds a report is refused unless --overwrite.",
    )
    rep.add_argument("runs", nargs="+", type=_path, metavar="RUN", help="a run folder or history")
    rep.add_argument(
        "--out",
        type=_path,
        default=Path("runs/report"),
        help="output folder (default: %(default)s); a folder that holds a report is refused",
    )
    rep.add_argument(
        "--overwrite", action="store_true", help="replace the report in --out (its own files)"
    )
    vec = sub.add_parser(
        "vectors",
        help="write golden vectors of every rule and formula (or --check a folder of them)",
    )
    vec.add_argument(
        "--out",
        type=_path,
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
        type=_path,
        metavar="RESULTS",
        help="compare your outputs per case (a JSON file keyed like 'rules/afl/small') with "
        "the golden cases under --out, and print every comparison",
    )
    vec.add_argument(
        "--precision",
        choices=("float64", "solver", "float32"),
        default=None,
        help="with --compare: what your code computes in (each output's error bound in that "
        "precision, as the golden files carry it; default float64)",
    )
    vec.add_argument(
        "--solver-tol",
        type=float,
        default=None,
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
        help=f"generated examples to check (default: 100; 0 for none; at most "
        f"{_MAX_GENERATED}), drawn from --seed",
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
        default=None,
        help="seed of the generated examples (default 0; the report prints it)",
    )
    chk.add_argument(
        "--random",
        action="store_true",
        help="a new seed on every run (printed in the report; not with --seed)",
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
#: The fields of ExperimentSettings: the settings a run's config.json holds.
_SETTINGS = tuple(f.name for f in dataclasses.fields(ExperimentSettings))


def _flag(key: str, compare: bool) -> str:
    """The flag that sets the setting ``key`` (compare's list flags for rule and seed)."""
    if compare and key in ("rule", "seed"):
        return f"--{key}s"
    return "--" + key.replace("_", "-")


def _setting_error(exc: SettingsError, origins: dict[str, str], compare: bool) -> ValueError:
    """``exc`` as the command line says it: naming the flag, or the config file's entry
    (``origins``: the label of each setting a config file gave)."""
    if exc.key in origins:
        label = origins[exc.key]
        if exc.item is not None:
            label = f"{label} entry {exc.item!r}"
    else:
        label = _flag(exc.key, compare)
        if exc.item is not None:
            label = f"{label} {exc.item}"
    return ValueError(exc.named(label))


def _check_args(
    args: argparse.Namespace, origins: dict[str, str] | None = None
) -> list[ExperimentSettings]:
    """The validated settings of the runs ``args`` asks for (one for ``run``; for ``compare``
    one per rule and K', and one per further seed), made before any data is generated or file
    written; an invalid value is a ``ValueError`` naming its flag or, for a setting in
    ``origins`` (key -> label), the config file's entry."""
    origins = origins or {}
    compare = isinstance(getattr(args, "rules", None), list)
    rules = args.rules if compare else [args.rule]
    kprs = args.clients_per_round if compare else [args.clients_per_round]
    seeds = args.seeds if compare else [args.seed]
    if compare:
        for flag, values in (("--rules", rules), ("--seeds", seeds), ("--clients-per-round", kprs)):
            twice = sorted({str(v) for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"{flag} lists {', '.join(twice)} more than once")
    per_run = ("rule", "clients_per_round", "seed")
    common = {k: getattr(args, k) for k in _SETTINGS if k not in per_run}
    # every constraint between settings involves the rule or K', none the seed: each rule at
    # each K', and each other seed once, check every combination the command runs
    runs = [(r, k, seeds[0]) for r in rules for k in kprs]
    runs += [(rules[0], kprs[0], s) for s in seeds[1:]]
    made = []
    for rule, kpr, seed in runs:
        try:
            made.append(ExperimentSettings(**common, rule=rule, clients_per_round=kpr, seed=seed))
        except SettingsError as exc:
            raise _setting_error(exc, origins, compare) from None
    for key, _ in made[0].rule_arg:
        scope, dot, _ = key.rpartition(".")
        if dot and scope not in rules:
            raise ValueError(
                f"--rule-arg {key}=...: {scope!r} is not one of the rules run ({', '.join(rules)})"
            )
    return made


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
#: The unit of each key of [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary],
#: as printed.
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


def _rounds_row(t: int, test_accuracy, train_loss, time_local, time_aggregate, h) -> list[Any]:
    """The rounds.csv row of round ``t`` (``test_accuracy`` and ``train_loss`` are None where
    the round was not evaluated)."""
    row: list[Any] = [int(t)]
    if test_accuracy is not None:
        s = fairness_summary(test_accuracy, h.num_test_samples)
        row += [
            f"{s[k]:.4f}" for k in ("average", "client_mean", "worst_10", "best_10", "variance")
        ]
        n = h.num_train_samples
        row.append(f"{train_loss @ n / n.sum():.6f}")
    else:
        row += [""] * 6
    return [*row, f"{float(time_local):.5f}", f"{float(time_aggregate):.6f}"]


def _latest_rounds_row(h) -> list[Any]:
    """The rounds.csv row of the round ``h`` recorded last."""
    t = int(h.latest("round"))
    evaluated = int(h.latest("eval_round")) == t
    return _rounds_row(
        t,
        h.latest("test_accuracy") if evaluated else None,
        h.latest("train_loss") if evaluated else None,
        h.latest("time_local"),
        h.latest("time_aggregate"),
        h,
    )


def _write_rounds_csv(path: Path, h) -> None:
    """Write rounds.csv with one row per round the history ``h`` holds, and nothing else: to a
    temporary file renamed over ``path`` (an interruption leaves the old file or the new)."""
    import io

    from ._checkpoint import write_atomically

    evals = {int(t): j for j, t in enumerate(h.eval_round.tolist())}
    acc, loss = h.test_accuracy, h.train_loss
    text = io.StringIO(newline="")
    w = csv.writer(text)
    w.writerow(_ROUNDS_HEADER)
    for t, tl, ta in zip(h.round, h.time_local, h.time_aggregate, strict=True):
        j = evals.get(int(t))
        ev_acc, ev_loss = (acc[j], loss[j]) if j is not None else (None, None)
        w.writerow(_rounds_row(t, ev_acc, ev_loss, tl, ta, h))
    write_atomically(path, lambda fh: fh.write(text.getvalue().encode("utf-8")))


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block ends, then raise it: the files that record a run
    (history.npz, rounds.csv, summary.json) are written whole once their writing has begun. Only
    where Python's own handler is installed, in the main thread; elsewhere the block runs as is."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    caught: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if caught:
            raise KeyboardInterrupt


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
    saves its history; ``resume`` continues it from the checkpoint.

    rounds.csv always holds the rounds the run recorded, once each: a resumed run rebuilds it
    from the checkpoint's history (not from the old rows, which may hold a round the checkpoint
    does not, or miss one it does), appends a row after each round, and rewrites it from the
    history (the rounds completed) when the run ends, however it ends."""
    from .rules import make_rule
    from .simulation import History, load_checkpoint, simulate

    rule = make_rule(
        rule_name, backend=resolve_backend(args.backend), **_rule_kwargs(args.rule_arg, rule_name)
    )
    history = History()
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"{label}rounds.csv"
    ckpt = out / f"{label}{CHECKPOINT_FILE}"
    saved = load_checkpoint(ckpt)["history"] if resume and ckpt.exists() else History()
    _write_rounds_csv(csv_path, saved)
    fh = open(csv_path, "a", newline="")
    try:
        writer = csv.writer(fh)

        def on_round(h: History) -> None:
            writer.writerow(_latest_rounds_row(h))
            fh.flush()

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
        fh.close()
        if history.num_test_samples is not None:  # simulate began (or resumed) the run
            try:
                with _sigint_deferred():  # a Ctrl-C now is raised once both files are written
                    history.config.update(data=args.data, data_seed=args.data_seed)
                    try:
                        history.save(out / f"{label}history.npz")
                    finally:
                        _write_rounds_csv(csv_path, history)
            except KeyboardInterrupt as exc:  # it carries the run, as simulate's own do
                exc.history = history  # type: ignore[attr-defined]
                raise
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


def _experiment_rule_args(
    args: argparse.Namespace, rules: Sequence[str], *, say: Any = print
) -> None:
    """Add ``EXPERIMENT_RULE_ARGS`` to ``args.rule_arg`` where the user did not set them,
    each said (with ``say``) on standard error."""
    given = {key for key, _ in args.rule_arg}
    for rule in rules:
        for key, value in EXPERIMENT_RULE_ARGS.get(rule, {}).items():
            if key in given or f"{rule}.{key}" in given:
                continue
            args.rule_arg.append((f"{rule}.{key}", value))
            say(
                f"{rule}: {key} = {value} in this experiment (--rule-arg {rule}.{key}=VALUE "
                "to change it; see the docs' Results page, default runs)",
                file=sys.stderr,
            )


#: The checkpoint of a run folder (``{label}checkpoint.npz`` in a comparison's runs/): data only,
#: see [`fairagg.simulation.load_checkpoint`][fairagg.simulation.load_checkpoint].
CHECKPOINT_FILE = "checkpoint.npz"
#: The pickle checkpoint of older versions: refused, never loaded; removed by --overwrite.
LEGACY_CHECKPOINT_FILE = "checkpoint.pkl"
#: The files ``fairagg run`` writes into its folder (and removes first with --overwrite).
RUN_FILES = (
    "config.json",
    "rounds.csv",
    "clients.csv",
    "summary.json",
    "history.npz",
    CHECKPOINT_FILE,
    LEGACY_CHECKPOINT_FILE,
    "acf.png",
    *REPORT_FILES,  # the run's own report, curves.png and accuracy_distribution.png among them
)
#: Entries of a run's config.json that are not settings of the run: where it was written and
#: whether it printed. A config file (--config, --resume) may hold them, of these types, and they
#: are not used: --out (or --resume DIR) names the folder, --quiet silences a run.
_RECORD_ENTRIES = {"out": str, "quiet": bool}
#: Flags that a config file cannot give (config.json never holds them): refused in one.
_FLAGS_ONLY = ("command", "overwrite", "resume", "config")


def _explicit(argv: Sequence[str] | None, command: str = "run") -> set[str]:
    """The options of ``command`` given on the command line (not their defaults)."""
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command"}


def _read_config(path: Path, what: str) -> dict[str, Any]:
    """The JSON object of a run's config.json at ``path`` (given by the flag ``what``)."""
    if not path.is_file():
        raise ValueError(f"{what}: no such file: {path}")
    config = _json_object(path, what, "a fairagg config.json")
    if "rule" not in config:
        raise ValueError(f"{what}: {path} is not a fairagg run's config.json")
    return config


def _json_object(path: Path, what: str, kind: str) -> dict[str, Any]:
    """The JSON object in the file ``path`` (given by the flag ``what``), or a ValueError that
    says it is not ``kind``."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: {path} is not {kind} ({exc})") from None
    except RecursionError:  # [[[... deeper than Python's stack
        raise ValueError(f"{what}: {path} is not {kind} (JSON nested too deeply)") from None
    if not isinstance(config, dict):
        raise ValueError(f"{what}: {path} is not {kind} (not a JSON object)")
    return config


def _apply_config(
    args: argparse.Namespace, config: dict[str, Any], keep: set[str], what: str
) -> dict[str, str]:
    """Set ``args`` from a saved config, except the options in ``keep`` (given explicitly).

    Each entry is checked on its own as it is read (its type and range, by the schema of
    ``ExperimentSettings``), so that nothing downstream meets a value of the wrong type; the
    settings as a whole are checked by ``_check_args``. Returns the label of each setting the
    config gave (``--config: 'rounds'``), for its errors there."""
    origins: dict[str, str] = {}
    for key, value in config.items():
        label = f"{what}: {key!r}"
        if key in _FLAGS_ONLY:
            flag = "--" + key
            raise ValueError(
                f"{label} is not a setting a config file gives ({flag} is a command-line flag)"
            )
        if key in _RECORD_ENTRIES:
            kind = _RECORD_ENTRIES[key]
            if type(value) is not kind:
                raise ValueError(
                    f"{label} must be a {kind.__name__} (where the run was written: not used, "
                    f"--{key} decides); got {type(value).__name__}"
                )
            continue
        if key in keep:
            continue
        if key not in _SETTINGS:
            raise ValueError(
                f"{what}: unknown setting {key!r} in the config (settings: {', '.join(_SETTINGS)})"
            )
        try:
            value = check_setting(key, value)
        except SettingsError as exc:
            raise _setting_error(exc, {key: label}, False) from None
        setattr(args, key, list(value) if key == "rule_arg" else value)
        origins[key] = label
    return origins


def _quiet(*args: Any, **kwargs: Any) -> None:
    """``print`` under --quiet: nothing."""


def _resumed_rounds(folder: Path) -> int:
    """The rounds the run in ``folder`` (``--resume``) holds: its checkpoint's, or 0 for a run
    stopped before its first checkpoint, which recorded no round."""
    from .simulation import History, load_checkpoint

    ckpt = folder / CHECKPOINT_FILE
    if ckpt.is_file():
        try:
            return int(load_checkpoint(ckpt)["round"])
        except ValueError as exc:
            raise ValueError(f"--resume: {exc}") from None
    if (folder / LEGACY_CHECKPOINT_FILE).exists():
        raise ValueError(
            f"--resume: {folder} holds {LEGACY_CHECKPOINT_FILE}, an older fairagg's checkpoint: a "
            "pickle, which fairagg never loads (unpickling runs whatever code the file names); "
            f"run it again with --config {folder / 'config.json'} --out {folder} --overwrite"
        )
    recorded = 0
    if (folder / "history.npz").is_file():
        try:
            recorded = History.load(folder / "history.npz").num_rounds
        except ValueError as exc:
            raise ValueError(f"--resume: {exc}") from None
    if (folder / "rounds.csv").is_file():
        with open(folder / "rounds.csv", newline="") as fh:
            recorded = max(recorded, sum(1 for _ in fh) - 1)
    if recorded:
        raise ValueError(
            f"--resume: {folder} has no {CHECKPOINT_FILE} to continue from (its files hold "
            f"{recorded} rounds)"
        )
    return 0  # stopped before its first checkpoint: it starts again from round 1


def _check_resumable(args: argparse.Namespace, data: Any, model: Any) -> None:
    """Refuse, before anything is written, a checkpoint of ``--resume`` that the run as
    configured cannot continue (its settings or parameters not this run's), with the error
    [`fairagg.simulate`][fairagg.simulation.simulate] would raise on resuming."""
    from .rules import make_rule
    from .simulation import _check_resume, load_checkpoint

    ckpt = args.resume / CHECKPOINT_FILE
    if not ckpt.is_file():  # stopped before its first checkpoint: it begins again
        return
    try:
        saved = load_checkpoint(ckpt)
        rule = make_rule(
            args.rule, backend=resolve_backend(args.backend),
            **_rule_kwargs(args.rule_arg, args.rule),
        )  # fmt: skip
        _check_resume(
            saved, rule, model, data, rounds=args.rounds,
            clients_per_round=args.clients_per_round, epochs=args.epochs, batch_size=args.batch,
            lr=args.lr, momentum=args.momentum, prox_mu=args.prox_mu, sampling=args.sampling,
            seed=args.seed, eval_every=args.eval_every,
        )  # fmt: skip
    except ValueError as exc:
        text = str(exc).removeprefix("resume: ")
        raise ValueError(f"--resume: {ckpt} cannot be continued: {text}") from None


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


def _write_summary(out: Path, h) -> None:
    """``summary.json``: what the run did (its status, the rounds asked and completed, the round
    of its last evaluation; ``fairagg.report.run_state``), then the
    [`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary] of that evaluation (none
    without one)."""
    from ._checkpoint import write_atomically
    from .report import run_state

    record = {**run_state(h), **(h.summary() if h._rows["test_accuracy"] else {})}
    text = json.dumps(record, indent=2) + "\n"
    write_atomically(out / "summary.json", lambda fh: fh.write(text.encode("utf-8")))


def _write_stopped_summary(out: Path, exc: BaseException) -> None:
    """``summary.json`` of a run that stopped on ``exc`` (Ctrl-C, divergence), from the history
    it carries; the exception itself is left to propagate."""
    h = getattr(exc, "history", None)
    if h is None or h.num_test_samples is None:  # stopped before the run began
        return
    try:
        _write_summary(out, h)
    except Exception as err:  # noqa: BLE001 - keep the run's own error
        if hasattr(exc, "add_note"):
            exc.add_note(f"fairagg: summary.json could not be written: {err}")


def _cmd_run(args: argparse.Namespace, explicit: set[str] | None = None) -> int:
    from .plots import plot_acf

    explicit = set() if explicit is None else explicit
    origins: dict[str, str] = {}  # the settings a config file gave, for their errors
    saved: dict[str, Any] = {}  # the config file read, if any
    resume = args.resume is not None
    if resume:
        others = sorted(explicit - {"resume", "rounds", "quiet"})
        if others:
            flags = ", ".join("--" + k.replace("_", "-") for k in others)
            raise ValueError(
                f"--resume continues the run as its config.json says; only --rounds and "
                f"--quiet may go with it (got {flags})"
            )
        saved = _read_config(args.resume / "config.json", "--resume")
        origins = _apply_config(args, saved, explicit, "--resume")
        if "backend" not in saved:  # written before --backend: those runs ran on numpy
            args.backend = "numpy"
        done = _resumed_rounds(args.resume)
        if args.rounds < done:  # before config.json is rewritten with --rounds
            raise ValueError(
                f"--rounds {args.rounds} is fewer than the {done} rounds {args.resume} holds"
            )
        args.out = args.resume
    elif args.config is not None:
        saved = _read_config(args.config, "--config")
        origins = _apply_config(args, saved, explicit, "--config")
    if args.out is None:
        args.out = Path("runs") / f"{args.rule}-s{args.seed}"
    say = _quiet if args.quiet else print  # --quiet: nothing on success
    notes: list[str] = []  # said once every check has passed: an error is then the only line
    if args.config is not None and "out" in saved and Path(saved["out"]) != args.out:
        notes.append(
            f"--config: its out ({saved['out']}) is not used; this run goes to --out {args.out}"
        )
    if (
        RULES[args.rule].full_participation
        and "clients_per_round" not in explicit
        and args.clients_per_round != args.clients
    ):
        notes.append(
            f"{args.rule} takes every client in every round: --clients-per-round {args.clients}"
        )
        args.clients_per_round = args.clients
    rule_name = args.rule
    out: Path = args.out
    if not resume:  # a resumed run's config.json holds them already
        _experiment_rule_args(args, [rule_name], say=lambda text, **_: notes.append(text))
    _check_args(args, origins)  # every setting, the rule's hyper-parameters among them
    _check_out(out, overwrite=args.overwrite, resume=resume)
    data, model = _make_experiment(args)
    if resume:  # the checkpoint against this run, before config.json or any file is rewritten
        _check_resumable(args, data, model)
    for text in notes:
        say(text, file=sys.stderr)
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
    say(
        f"{data.name}: {data.num_clients} clients, {int(data.num_train_samples.sum())} train / "
        f"{int(data.num_test_samples.sum())} test samples; model {model!r}",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    try:
        h = _run_one(
            args, data, model, rule_name, args.clients_per_round, args.seed, out, "", resume=resume
        )
    except BaseException as exc:  # summary.json says where the run stopped, never a stale end
        with _sigint_deferred():
            _write_stopped_summary(out, exc)
        raise
    elapsed = time.perf_counter() - t0
    summary = h.summary()
    with _sigint_deferred():
        _write_summary(out, h)
    try:
        _write_client_csv(out / "clients.csv", data, h)
        from .report import write_report

        write_report([out / "history.npz"], out)  # curves.png, accuracy_distribution.png, ...
        plot_acf({rule_name: h}, out / "acf.png")
    except KeyboardInterrupt:
        print(
            f"fairagg: interrupted after the run completed; {out} holds all of it but its "
            f"report: `fairagg report {out} --out {out}/report` writes one",
            file=sys.stderr,
        )
        return 130
    rows = [[k, _fmt(v, ".4f"), SUMMARY_UNITS.get(k, "")] for k, v in summary.items()]
    # a resumed run's time is that of its new rounds only: said so, beside the rounds in all
    new = h.num_rounds - done if resume else h.num_rounds
    took = f"{new} new in {elapsed:.1f} s, from round {done}" if resume else f"{elapsed:.1f} s"
    say(
        f"\n{rule_name} after {h.num_rounds} rounds ({took}), over "
        f"{data.num_clients} clients' test splits:"
    )
    say(_table(rows, ["metric", "value", "unit"]))
    for line in _collapse(h):
        say(f"warning: {line}")
    say(
        f"\nwrote {out}/: config.json rounds.csv {CHECKPOINT_FILE} clients.csv summary.json "
        "history.npz report.html report.md report.csv curves.png accuracy_distribution.png acf.png"
    )
    return 0


#: What ``fairagg compare`` writes into its folder, besides its runs/ folder.
COMPARE_FILES = ("config.json", "summary.csv", "table.txt", "acf.png", *REPORT_FILES)
#: The suffixes of the files of one run in compare's runs/ folder.
_COMPARE_RUN_SUFFIXES = (
    "-rounds.csv",
    "-history.npz",
    f"-{CHECKPOINT_FILE}",
    f"-{LEGACY_CHECKPOINT_FILE}",
)


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
        for path in runs.iterdir():
            if path.is_file() and path.name.endswith(_COMPARE_RUN_SUFFIXES):
                path.unlink()


def _check_out_path(out: Path) -> None:
    """--out must be a folder or a path where one can be made: no file on the way, and the
    nearest folder that exists writable (a folder the file system refuses to make is said when
    it is made: ``main`` names --out in that error)."""
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is" if parent == out else f"is inside {parent}, which is"
            raise ValueError(f"--out: {out} {what} a file, not a folder")
        if parent.is_dir():
            if not os.access(parent, os.W_OK | os.X_OK):
                where = "" if parent == out else f": {parent} is not writable"
                raise ValueError(f"--out: cannot write to {out}{where}")
            break


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


#: Entries of a comparison's config.json that are not settings of the comparison.
_NOT_COMPARE_SETTINGS = ("command", "out", "overwrite", "resume", "quiet")


def _stored_compare_args(folder: Path) -> argparse.Namespace:
    """The settings of the comparison in ``folder``, read from its config.json and checked as
    the command line checks them (each entry is given to the ``compare`` parser as its flag)."""
    path = folder / "config.json"
    if not path.is_file():
        raise ValueError(f"--resume: {folder} holds no comparison (no config.json)")
    config = _json_object(path, "--resume", "a comparison's config.json")
    if not isinstance(config.get("rules"), list):
        raise ValueError(f"--resume: {path} is not a comparison's config.json (no rules)")
    argv = []
    for key, value in config.items():
        if key in _NOT_COMPARE_SETTINGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if key == "rule_arg" and isinstance(value, dict):
            argv += [f"{flag}={k}={v}" for k, v in value.items()]
        elif isinstance(value, list):
            argv.append(f"{flag}={','.join(map(str, value))}")
        else:
            argv.append(f"{flag}={value}")
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cmp_ = sub.choices["compare"]

    def refuse(message: str) -> NoReturn:
        raise ValueError(f"--resume: {path} does not hold valid settings: {message}")

    cmp_.error = refuse
    if "backend" not in config:  # written before --backend: those comparisons ran on numpy
        argv.append("--backend=numpy")
    stored = cmp_.parse_args(argv)
    try:
        _check_args(stored)
    except ValueError as exc:
        refuse(str(exc))
    return stored


def _resume_compare_args(args: argparse.Namespace, explicit: set[str]) -> None:
    """Set ``args`` to the settings of the comparison ``args.resume`` continues; a flag given
    beside ``--resume`` must say what its config.json says."""
    folder: Path = args.resume
    if "overwrite" in explicit:
        raise ValueError("--overwrite and --resume: give one (--overwrite removes the runs)")
    stored = _stored_compare_args(folder)
    differ = []
    for key in sorted(explicit - {"resume", "quiet", "overwrite"}):
        flag = "--" + key.replace("_", "-")
        mine, theirs = getattr(args, key), getattr(stored, key, None)
        if key == "out":
            theirs = folder
            same = mine.resolve() == folder.resolve()
        elif key == "rule_arg":
            saved = dict(theirs or ())
            same = all(k in saved and saved[k] == v for k, v in mine)
            mine = " ".join(f"{k}={v}" for k, v in mine)
            theirs = " ".join(f"{k}={v}" for k, v in saved.items())
        else:
            same = mine == theirs
        if not same:
            show = [",".join(map(str, v)) if isinstance(v, list) else v for v in (mine, theirs)]
            differ.append(f"{flag} {show[0]} (config.json: {show[1]})")
    if differ:
        raise ValueError(
            f"--resume continues the comparison as {folder / 'config.json'} says; only --quiet "
            f"may differ, got {'; '.join(differ)}"
        )
    for key, value in vars(stored).items():
        if key not in _NOT_COMPARE_SETTINGS:
            setattr(args, key, value)
    args.out = folder


def _continue_one(args, data, model, rule_name: str, k_per_round: int, seed: int, out: Path,
                  label: str):  # fmt: skip
    """A run of a resumed comparison: the saved history of a run that completed its rounds,
    else the run continued from its checkpoint, or begun where it has none."""
    from .simulation import History

    try:
        h = History.load(out / f"{label}history.npz")
    except (OSError, ValueError):  # none, or one cut short by a kill: the checkpoint decides
        h = None
    want = {"rule": rule_name, "clients_per_round": k_per_round, "seed": seed,
            "rounds": args.rounds}  # fmt: skip
    if (
        h is not None
        and h.status == "completed"
        and h.num_rounds == args.rounds
        and all(h.config.get(k) == v for k, v in want.items())
    ):
        return h
    resume = (out / f"{label}{CHECKPOINT_FILE}").is_file()
    return _run_one(args, data, model, rule_name, k_per_round, seed, out, label, resume=resume)


def _compare_progress(args: argparse.Namespace, runs: Path) -> str:
    """How far the comparison in ``runs`` got: runs completed, to continue, not begun."""
    from .simulation import History

    done = begun = 0
    for kpr in args.clients_per_round:
        for seed in args.seeds:
            for rule_name in args.rules:
                label = f"{rule_name}-k{kpr}-s{seed}-"
                try:
                    completed = History.load(runs / f"{label}history.npz").status == "completed"
                except (OSError, ValueError):
                    completed = False
                if completed:
                    done += 1
                elif (runs / f"{label}{CHECKPOINT_FILE}").is_file():
                    begun += 1
    n = len(args.clients_per_round) * len(args.seeds) * len(args.rules)
    return f"{done} of {n} runs completed, {begun} to continue, {n - done - begun} to begin"


def _cmd_compare(args: argparse.Namespace, explicit: set[str] | None = None) -> int:
    from .plots import plot_acf

    resume = getattr(args, "resume", None) is not None
    if resume:
        _resume_compare_args(args, set() if explicit is None else explicit)
    out: Path = args.out
    notes: list[str] = []
    _check_args(args)
    if resume:
        _check_out_path(out)
    else:
        _check_compare_out(out, overwrite=args.overwrite)
        # a resumed comparison's config.json has them; said once the data is made
        _experiment_rule_args(args, args.rules, say=lambda text, **_: notes.append(text))
    data, model = _make_experiment(args)
    for text in notes:
        print(text, file=sys.stderr)
    if args.overwrite:
        _remove_compare(out)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        config = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k != "resume"
        }
        config["rule_arg"] = dict(args.rule_arg)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"{data.name}: {data.num_clients} clients; model {model!r}", file=sys.stderr)
    if resume:
        print(f"--resume {out}: {_compare_progress(args, out / 'runs')}", file=sys.stderr)
    records: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    run = _continue_one if resume else _run_one
    try:
        for kpr in args.clients_per_round:
            for seed in args.seeds:
                for rule_name in args.rules:
                    label = f"{rule_name}-k{kpr}-s{seed}-"
                    h = run(args, data, model, rule_name, kpr, seed, out / "runs", label)
                    records.append(
                        {"rule": rule_name, "clients_per_round": kpr, "seed": seed, **h.summary()}
                    )
                    if kpr == args.clients_per_round[0] and seed == args.seeds[0]:
                        first[rule_name] = h
    except KeyboardInterrupt:
        print(f"fairagg compare --resume {out} continues the comparison", file=sys.stderr)
        raise
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
    from .report import find_runs, write_report

    find_runs(args.runs)  # a bad RUN before the folder
    _check_out_path(args.out)
    held = [f for f in REPORT_FILES if (args.out / f).exists()]
    if held and not args.overwrite:
        raise ValueError(
            f"--out: {args.out} already holds a report ({', '.join(held[:3])}); pass "
            "--overwrite to replace it"
        )
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


#: A docstring's cross-reference to the docs site, ``[`name`][fairagg.path]``.
_XREF = re.compile(r"\[`?([^\]`]+?)`?\]\[[\w.]+\]")


def _plain(text: str) -> str:
    """``text`` of a docstring as the terminal shows it: a cross-reference is its name alone and
    a literal (````name````) loses its backticks."""
    return _XREF.sub(r"\1", text).replace("``", "")


def _wrap(text: str, indent: str, width: int = 100) -> str:
    return textwrap.fill(
        text, width=width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )


def _describe_rule(name: str) -> str:
    spec = RULES[name]
    params = inspect.signature(spec.factory).parameters
    docs = _doc_parameters(spec.factory.__doc__ or "")
    first = " ".join(inspect.cleandoc(spec.factory.__doc__ or "").split("\n\n")[0].split())
    who = "every client, every round" if spec.full_participation else "any clients per round"
    lines = [
        _wrap(f"{name}: {spec.summary}", ""),
        _wrap(f"{spec.paper}, {spec.equations}. {_plain(first)}", "  "),
        f"  reports: {', '.join(('deltas', 'num_samples', *spec.needs))}; clients: {who}",
        "",
        "hyper-parameters (--rule-arg NAME=VALUE):",
    ]
    for p in params.values():
        default = "required" if p.default is inspect.Parameter.empty else repr(p.default)
        kind, text = docs.get(p.name, ("", ""))
        lines.append(f"  {p.name} = {default}" + (f"    ({kind})" if kind else ""))
        if text:
            lines.append(_wrap(_plain(text), "      "))
    for key, value in EXPERIMENT_RULE_ARGS.get(name, {}).items():
        lines += [
            "",
            _wrap(
                f"fairagg run and fairagg compare set {key} = {value!r}, not the default "
                f"{params[key].default!r} above, unless --rule-arg sets it (--rule-arg "
                f"{name}.{key}=none for the default; why: the docs' Results page, default runs)",
                "",
            ),
        ]
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


def _check_solver_tol(args: argparse.Namespace, applies_to: str) -> None:
    """``--solver-tol``, where given: only with ``--precision solver`` (``applies_to`` says how
    the command spells that), a finite number > 0."""
    if args.solver_tol is None:
        return
    if args.precision != "solver":
        raise ValueError(f"--solver-tol applies to {applies_to}")
    if not (np.isfinite(args.solver_tol) and args.solver_tol > 0):
        raise ValueError(f"--solver-tol must be a finite number > 0; got {args.solver_tol}")


def _cmd_vectors(args: argparse.Namespace) -> int:
    from . import vectors

    _check_out_path(args.out)
    for flag, value in (("--precision", args.precision), ("--solver-tol", args.solver_tol)):
        if value is not None and args.compare is None:
            raise ValueError(f"{flag} applies to --compare RESULTS only")
    _check_solver_tol(args, "--compare with --precision solver")
    precision = "float64" if args.precision is None else args.precision
    solver_tol = DEFAULT_SOLVER_TOL if args.solver_tol is None else args.solver_tol
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be >= 0; got {args.seed}")
    if args.compare is not None and args.check:
        raise ValueError("--compare and --check are two different checks: give one")
    if args.compare is not None and not args.compare.is_file():
        what = "is a folder, not a file" if args.compare.is_dir() else "no such file"
        raise ValueError(f"--compare: {args.compare}: {what}")
    if args.compare is not None or args.check:
        if not (args.out / "index.json").is_file():
            raise ValueError(
                f"--out {args.out} holds no golden vectors (no index.json): fairagg vectors "
                "--out DIR writes a set, and a clone of the repository holds one in tests/golden"
            )
    if args.compare is not None:
        from .conformance import compare_results

        try:
            report = compare_results(
                args.compare, args.out, precision=precision, solver_tol=solver_tol
            )
        except UnicodeDecodeError as exc:
            raise ValueError(f"--compare: {args.compare} is not JSON text ({exc})") from None
        except RecursionError:
            raise ValueError(f"--compare: {args.compare} is JSON nested too deeply") from None
        except ValueError as exc:  # the results file's own errors say "results: ..."
            text = str(exc)
            if text.startswith("results: "):
                raise ValueError(f"--compare {args.compare}: {text[9:]}") from None
            raise
        print(report)
        return 1 if report.failed else 0

    if args.check:
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
    paths = vectors.write_vectors(args.out, seed)
    print(f"wrote {len(paths)} cases to {args.out} (index.json, schema.json)")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from . import conformance

    modes = [f for f in ("list", "template", "describe") if getattr(args, f)]
    if len(modes) > 1:
        raise ValueError(f"--{modes[0]} and --{modes[1]} are two different actions: give one")
    if modes and modes[0] != "describe" and args.target is not None:
        raise ValueError(f"--{modes[0]} takes no TARGET; got {args.target!r}")
    if args.template:
        print(Path(__file__).with_name("_worker_template.py").read_text(encoding="utf-8"), end="")
        return 0
    if args.list:
        print("\n".join(conformance.targets()))
        return 0
    if args.target is None:
        raise ValueError("check needs a TARGET (fairagg check --list names them)")
    try:
        described = conformance.describe(args.target)  # an unknown target, before the worker
    except ValueError as exc:
        raise _check_flag_error(exc) from None
    if args.describe:
        print(described)
        return 0
    if args.cmd is None:
        raise ValueError("check needs --cmd COMMAND, the command that starts your worker")
    for flag, value in (("--rtol", args.rtol), ("--atol", args.atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{flag} must be a finite number >= 0; got {value}")
    if not (np.isfinite(args.timeout) and args.timeout > 0):
        raise ValueError(f"--timeout must be a finite number of seconds > 0; got {args.timeout}")
    if not 0 <= args.generated <= _MAX_GENERATED:
        raise ValueError(
            f"--generated must be between 0 and {_MAX_GENERATED}; got {args.generated}"
        )
    if args.seed is not None and args.random:
        raise ValueError("--seed and --random: give one (--random draws a new seed)")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be >= 0; got {args.seed}")
    _check_solver_tol(args, "--precision solver")
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
                seed=None if args.random else (args.seed or 0),
                raise_on_mismatch=False,
                keep_going=args.keep_going,
                precision=args.precision,
                solver_tol=args.solver_tol,
                accept=args.accept,
                **tol,
            )
    except (conformance.WorkerError, TypeError, ValueError) as exc:
        raise _check_flag_error(ValueError(str(exc)), list(params)) from None
    print(report)
    return 0 if report else 1


#: The most generated examples ``fairagg check --generated`` runs (each one is a call of the
#: worker; a million take hours).
_MAX_GENERATED = 1_000_000
#: How the conformance harness names its arguments, and the flags of ``fairagg check`` that
#: give them.
_CHECK_NAMES = (
    ("command ", "--cmd "),
    ("cannot start the worker", "--cmd: cannot start the worker"),
    ("params: ", "--param: "),
    ("accept: ", "--accept: "),
    ("golden: ", "--golden: "),
    ("timeout ", "--timeout "),
    ("rtol ", "--rtol "),
    ("atol ", "--atol "),
)


def _check_flag_error(exc: ValueError, params: Sequence[str] = ()) -> ValueError:
    """A usage error of the conformance harness, naming the flag of ``fairagg check`` (for a
    value of a parameter in ``params``, ``--param NAME``)."""
    text = str(exc)
    for name, flag in _CHECK_NAMES:
        if text.startswith(name):
            return ValueError(flag + text[len(name) :])
    for name in params:
        if text.startswith(f"{name} "):
            return ValueError(f"--param {name}: {text}")
    return exc


def _os_error(exc: OSError, args: argparse.Namespace) -> str:
    """``exc`` in one line, naming the path argument (``--out``, ``RUN``, ...) it concerns."""
    if exc.filename is None:
        return str(exc)
    name = os.fsdecode(exc.filename)
    what = exc.strerror or type(exc).__name__
    path = Path(os.path.abspath(name))
    for dest, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, Path):
                continue
            mine = Path(os.path.abspath(v))
            if path == mine or mine in path.parents or path in mine.parents:
                flag = "RUN" if dest == "runs" else "--" + dest.replace("_", "-")
                verb = "cannot write to" if dest == "out" else "cannot use"
                return f"{flag} {v}: {verb} {name} ({what})"
    return f"{name}: {what}"


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
        "compare": lambda a: _cmd_compare(
            a, _explicit(argv if argv is not None else sys.argv[1:], "compare")
        ),
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
    except OSError as exc:  # a path the file system refuses (a folder it will not make, ...)
        print(f"fairagg: error: {_os_error(exc, args)}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"fairagg: error: out of memory ({exc})", file=sys.stderr)
        return 1
    except FloatingPointError as exc:
        print(f"fairagg: error: {exc}; the rounds before it are saved", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fairagg: interrupted; the rounds completed so far are saved", file=sys.stderr)
        # wake the training threads, which may wait for work that will never come (a Ctrl-C
        # inside the pool's start-up can leave one unknown to the interpreter's exit, which
        # then waits for it for ever)
        from .kernels._threads import shutdown_pool

        shutdown_pool()
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
