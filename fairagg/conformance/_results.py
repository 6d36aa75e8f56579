"""Results computed elsewhere, per golden case, compared with the golden files
(``fairagg vectors --compare``), within the same error bounds the files carry and
[`check`][fairagg.conformance.check] uses."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._tolerance import DEFAULT_SOLVER_TOL, Tolerance, blanket, check_precision
from .._worker import WorkerError, decode
from ..vectors import load_case
from ._checker import AFTER, Row
from ._compare import close, differences
from ._report import ConformanceReport


def _result_value(v: Any, where: str) -> Any:
    """An output from a results file: a golden-style encoded array, a nested list of numbers,
    or a number (non-finite numbers as "nan", "inf", "-inf" or the bare JSON tokens)."""
    try:
        return decode(v) if isinstance(v, dict) else np.asarray(decode(v), dtype=np.float64)
    except (TypeError, ValueError, WorkerError) as exc:
        raise ValueError(f"results: {where} cannot be read as numbers ({exc})") from None


def file_tolerance(
    entry: dict[str, Any], want: Any, precision: str, solver_tol: float
) -> Tolerance:
    """The tolerance a golden file's ``tolerance`` entry gives at ``precision``."""
    if entry.get("exact"):
        return Tolerance(exact=True)
    if precision == "float32":
        sub = entry.get("float32")
        if sub is None:
            raise ValueError("the golden files carry no float32 tolerance (rewrite them)")
        tol = Tolerance(float(sub["rtol"]), float(sub["atol"]))
    else:
        tol = Tolerance(float(entry["rtol"]), float(entry["atol"]))
    if precision == "solver":
        w = np.asarray(want, dtype=np.float64)
        fin = w[np.isfinite(w)]
        tol = tol.widened(solver_tol, float(np.max(np.abs(fin), initial=0.0)) if fin.size else 0.0)
    return tol


def compare_results(
    results: Any, golden: Any, *, precision: str = "float64", rtol: float | None = None,
    atol: float | None = None, solver_tol: float = DEFAULT_SOLVER_TOL,
) -> ConformanceReport:  # fmt: skip
    """Compare outputs you computed per golden case with the golden files' expectations.

    Parameters
    ----------
    results : str or path
        A JSON file: ``{"rules/afl/small": {"rounds": [{"params": [...], "mixture": [...]},
        ...]}, "formulas/project_simplex/small": {"out": [...]}, ...}``, one entry per case you
        ran (keys as the golden files' paths without ``.json``), each output named as the
        golden file names it; arrays as nested lists or encoded as the golden files encode them.
        A golden case that expects an error (fairagg refuses the input) is answered with
        ``{"error": "..."}``: both refuse.
    golden : str or path
        A folder of golden vectors (``fairagg vectors --out``, or the repository's
        ``tests/golden``).
    precision : {"float64", "solver", "float32"}
        What your code computes in: each output is compared within the error bound its
        ``tolerance`` entry gives (the float64 one, its ``float32`` one, or the float64 one
        plus ``solver_tol``), the bounds [`check`][fairagg.conformance.check] uses.
    rtol, atol : float, optional
        A blanket tolerance in place of the files' (as [`check`][fairagg.conformance.check]'s).
    solver_tol : float
        ``precision="solver"``'s accuracy.

    Returns
    -------
    ConformanceReport
        ``rows`` holds every comparison (``str(report)`` is the table and a summary; there is
        no minimised difference: the cases are yours); ``failed`` counts the cases that differ,
        ``skipped`` the golden cases your file does not have, ``not_returned`` the outputs it
        never gave. Cases of your file that the golden folder lacks are an error, and so is a
        file that compares nothing.
    """
    from ._check import _user_tolerance

    if not isinstance(results, (str, Path)) or not isinstance(golden, (str, Path)):
        raise TypeError("results and golden must be paths (str or pathlib.Path)")
    solver = check_precision(precision, solver_tol)
    user_tol = _user_tolerance(rtol, atol)
    root = Path(golden)
    mine, index = _load(Path(results), root)
    out = _Compared()
    for key, entry in index.items():
        if key not in mine:
            continue
        case = load_case(root / entry["file"])
        _compare_case(key, case, mine[key], user_tol, precision, solver, out)
    n = sum(1 for k in index if k in mine)
    return ConformanceReport(
        "golden files", n, 0, len(index) - n, None, 0, tuple(out.rows), out.failed,
        tuple(sorted(out.not_returned)), refused=out.refused, keep_going=True,
    )  # fmt: skip


def _load(res_path: Path, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(your results by case, the golden index by case), each results' case in the index."""
    if not res_path.is_file():
        raise FileNotFoundError(f"results: no file {str(res_path)!r}")
    if not (root / "index.json").is_file():
        raise FileNotFoundError(f"golden: {str(root)!r} holds no index.json (fairagg vectors)")
    try:
        mine = json.loads(res_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"results: {res_path} is not JSON ({exc})") from None
    if not isinstance(mine, dict):
        raise ValueError("results: the file must hold a JSON object keyed by case")
    index = {
        e["file"][: -len(".json")]: e
        for e in json.loads((root / "index.json").read_text())["cases"]
    }
    unknown = sorted(set(mine) - set(index))
    if unknown:
        raise ValueError(
            f"results: no golden case {', '.join(map(repr, unknown[:5]))}"
            f"{' ...' if len(unknown) > 5 else ''} in {root} (keys are like 'rules/afl/small')"
        )
    if not mine:
        raise ValueError("results: the file holds no case: nothing would be compared")
    return mine, index


@dataclass
class _Compared:
    """The rows of every case compared so far, and what they came to."""

    rows: list[Row] = field(default_factory=list)
    failed: int = 0
    refused: int = 0
    not_returned: set[str] = field(default_factory=set)


def _compare_case(
    key: str, case: dict[str, Any], got_all: Any, user_tol: tuple[float, float] | None,
    precision: str, solver: float, out: _Compared,
) -> None:  # fmt: skip
    """Compare your results of one golden case with its expectations, into ``out``."""
    label = f"golden case {key}"
    want = case["expected"]
    rows = out.rows
    if not isinstance(got_all, dict):
        raise ValueError(f"results: {key} must be a JSON object of named outputs")
    if "error" in want:
        if "error" in got_all:
            rows.append(Row(label, None, "refusal", None, None, "", "both refuse"))
            out.refused += 1
        else:
            rows.append(Row(label, None, "refusal", None, None, "",
                            "differs: fairagg refuses this input"))  # fmt: skip
            out.failed += 1
        return
    pairs: list[tuple[int | None, tuple[Any, Any]]]
    if case["kind"] == "rule":
        rounds_got = got_all.get("rounds")
        if not isinstance(rounds_got, list):
            raise ValueError(f'results: {key} must hold "rounds", a list of rounds')
        pairs = list(enumerate(zip(want["rounds"], rounds_got, strict=False)))
        n_want = len(want["rounds"])
    else:
        pairs = [(None, (want, got_all))]
        n_want = 1
    tols = blanket(want, *user_tol) if user_tol is not None else None
    differs = False
    for t, (w, g) in pairs:
        if differs:
            rows.append(Row(label, t, "(round)", None, None, "", AFTER))
            continue
        for k, wv in w.items():
            if tols is not None:
                tol = tols[k]
            else:
                tol = file_tolerance(case["tolerance"][k], wv, precision, solver)
            if k not in g:
                out.not_returned.add(k)
                rows.append(Row(label, t, k, None, None, tol.text(), "not returned"))
                continue
            gv = _result_value(g[k], f"{key} {k}")
            why = close(gv, wv, tol)
            a, r = differences(gv, wv)
            verdict = "agrees" if why is None else "differs"
            if why is not None and a is None:  # no entrywise difference: say why
                verdict = f"differs: {why}"
            rows.append(Row(label, t, k, a, r, tol.text(), verdict))
            differs |= why is not None
    if case["kind"] == "rule" and len(pairs) < n_want and not differs:
        for t in range(len(pairs), n_want):
            rows.append(Row(label, t, "(round)", None, None, "", "not returned"))
    out.failed += differs
