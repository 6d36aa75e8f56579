"""The ``fairagg`` console script: parse, run the command, and turn its errors into one line
and an exit status."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ._compare import _cmd_compare
from ._describe import _cmd_rules
from ._parser import _build_parser, _explicit
from ._run import _cmd_run
from ._tools import _cmd_check, _cmd_report, _cmd_vectors


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
        from ..kernels._threads import shutdown_pool

        shutdown_pool()
        return 130
