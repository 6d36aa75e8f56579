"""The argument parser of the ``fairagg`` command line: one builder per command.

The flags ``run`` and ``compare`` share (the experiment's data, model and training, and the
folder flags ``--out``, ``--overwrite``, ``--resume``) are added by one helper each, so that the
two commands spell and explain them alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .. import __version__
from .._tolerance import DEFAULT_SOLVER_TOL
from ..rules import RULES

#: The most generated examples ``fairagg check --generated`` runs (each one is a call of the
#: worker; a million take hours).
_MAX_GENERATED = 1_000_000


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


def _add_experiment_args(p: argparse.ArgumentParser, quiet: str = "no progress bar") -> None:
    from ..data import DATA_SPECS

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


def _add_folder_args(
    p: argparse.ArgumentParser,
    *,
    out: Path | None,
    out_help: str,
    overwrite_help: str,
    resume_help: str | None = None,
) -> None:
    """``--out`` (default ``out``), ``--overwrite`` and, where ``resume_help`` is given,
    ``--resume DIR``: the folder flags of the commands that write a folder of results."""
    p.add_argument("--out", type=_path, default=out, help=out_help)
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    if resume_help is not None:
        p.add_argument("--resume", type=_path, default=None, metavar="DIR", help=resume_help)


def _add_run(sub: Any) -> None:
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
    _add_folder_args(
        run,
        out=None,
        out_help="output folder (default: runs/RULE-sSEED); a folder that holds a run is refused",
        overwrite_help="replace the run in --out (its files are removed first, so nothing is "
        "mixed)",
        resume_help="continue the run in DIR (finished, interrupted or killed) from its "
        "checkpoint, as configured there; --rounds T runs it to T rounds",
    )
    run.add_argument(
        "--config",
        type=_path,
        default=None,
        metavar="FILE",
        help="run the configuration of a saved config.json; flags given beside it override",
    )
    _add_experiment_args(run, quiet="print nothing unless the run fails (no progress bar)")


def _add_compare(sub: Any) -> None:
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
    _add_folder_args(
        cmp_,
        out=Path("runs/compare"),
        out_help="output folder (default: runs/compare); a folder that holds a comparison is "
        "refused",
        overwrite_help="replace the comparison in --out (its files and runs/ are removed first)",
        resume_help="continue the comparison in DIR (interrupted or killed) as its config.json "
        "says: each run from its checkpoint; runs that completed are kept, runs not begun are run",
    )
    _add_experiment_args(cmp_, quiet="print nothing unless the comparison fails (no progress bar)")


def _add_rules(sub: Any) -> None:
    rules_p = sub.add_parser("rules", help="list the registered rules, or describe one")
    rules_p.add_argument(
        "rule",
        nargs="?",
        choices=list(RULES),
        metavar="RULE",
        help="a rule: its hyper-parameters with defaults, ranges, meaning and variants",
    )


def _add_report(sub: Any) -> None:
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
    _add_folder_args(
        rep,
        out=Path("runs/report"),
        out_help="output folder (default: %(default)s); a folder that holds a report is refused",
        overwrite_help="replace the report in --out (its own files)",
    )


def _add_vectors(sub: Any) -> None:
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


def _add_check(sub: Any) -> None:
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


def _build_parser() -> _Parser:
    parser = _Parser(prog="fairagg", description="Fair federated-learning aggregation, exactly.")
    parser.add_argument("--version", action="version", version=f"fairagg {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True
    for add in (_add_run, _add_compare, _add_rules, _add_report, _add_vectors, _add_check):
        add(sub)
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``command`` among ``parser``'s subcommands."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _explicit(argv: Sequence[str] | None, command: str = "run") -> set[str]:
    """The options of ``command`` given on the command line (not their defaults)."""
    parser = _build_parser()
    for action in _subparser(parser, command)._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command"}
