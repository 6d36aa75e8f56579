"""The commands around the experiments: ``fairagg report`` (from saved runs), ``fairagg
vectors`` (golden vectors) and ``fairagg check`` (the conformance harness on another
implementation).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._tolerance import DEFAULT_SOLVER_TOL
from ..report import REPORT_FILES
from ._parser import _MAX_GENERATED
from ._train import _check_out_path


def _cmd_report(args: argparse.Namespace) -> int:
    from ..report import find_runs, write_report

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
    from .. import vectors

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
        from ..conformance import compare_results

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
    from .. import conformance

    modes = [f for f in ("list", "template", "describe") if getattr(args, f)]
    if len(modes) > 1:
        raise ValueError(f"--{modes[0]} and --{modes[1]} are two different actions: give one")
    if modes and modes[0] != "describe" and args.target is not None:
        raise ValueError(f"--{modes[0]} takes no TARGET; got {args.target!r}")
    if args.template:
        template = Path(__file__).parents[1] / "_worker_template.py"
        print(template.read_text(encoding="utf-8"), end="")
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
