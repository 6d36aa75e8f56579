"""Every stored case recomputed with this fairagg and compared with its expectations, each with
its distance (in ulps and as a fraction of its tolerance)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ._encoding import Json, _encode, _json_value
from ._files import _existing, load_case
from ._formulas import FORMULAS
from ._generate import _compute, resolved_params
from ._rules import _rule_rel
from ._tolerances import REL, _close, _self_tol


class CaseCheck(NamedTuple):
    """One case recomputed against its file ([`compare_vectors`][fairagg.vectors.compare_vectors]).

    Attributes
    ----------
    where : str
        ``"<kind> <name>/<case>"``.
    fails : list of str
        One line per failing comparison (empty: the case agrees).
    ulps : float
        The largest difference of a floating-point output, in units in the last place of the
        scale its tolerance measures it by, max(max |want|, 1): |got − want| / spacing(scale).
        0 where every output is bit-identical, a few where a sum was taken in another order or a
        SIMD exp/log rounded differently. inf where an integer or boolean output differs, the
        shapes differ, or the case raised where it should not.
    tolerance_used : float
        The largest |got − want| / (atol + rtol·|want|): ≤ 1 passes.
    """

    where: str
    fails: list[str]
    ulps: float
    tolerance_used: float


def _distance(got: Any, want: Any, tol: Json, rel: float = REL) -> tuple[float, float]:
    """(ulps, fraction of the tolerance) of one output; see
    [`CaseCheck`][fairagg.vectors.CaseCheck]."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return math.inf, math.inf
    if tol.get("exact"):
        same = bool(np.array_equal(g, w))
        return (0.0, 0.0) if same else (math.inf, math.inf)
    g, w = g.astype(np.float64), w.astype(np.float64)
    if g.size == 0:
        return 0.0, 0.0
    diff = np.abs(g - w)
    if not np.all(np.isfinite(diff)):
        same = bool(np.array_equal(g, w, equal_nan=True))
        return (0.0, 0.0) if same else (math.inf, math.inf)
    rtol, atol = _self_tol(tol, w, rel)
    scale = max(1.0, float(np.max(np.abs(w))))
    top = float(np.max(diff))
    ulps = top / float(np.spacing(max(scale, np.finfo(np.float64).tiny)))
    used = float(np.max(diff / (atol + rtol * np.abs(w))))
    return ulps, used


def _compare(
    got: Any, want: Any, tol: Json, where: str, rel: float = REL
) -> tuple[list[str], float, float]:
    """(failing comparisons, largest ulps, largest fraction of the tolerance)."""
    if isinstance(want, dict) and "rounds" in want:
        if len(got["rounds"]) != len(want["rounds"]):
            n, n_want = len(got["rounds"]), len(want["rounds"])
            return [f"{where}: {n} rounds, expected {n_want}"], math.inf, math.inf
        fails: list[str] = []
        ulps, used = 0.0, 0.0
        for t, (g, w) in enumerate(zip(got["rounds"], want["rounds"], strict=True)):
            f, u, x = _compare(g, w, tol, f"{where} round {t}", rel)
            fails, ulps, used = fails + f, max(ulps, u), max(used, x)
        return fails, ulps, used
    fails, ulps, used = [], 0.0, 0.0
    for k, w in want.items():
        if k not in got:
            fails.append(f"{where}: output {k!r} missing")
            ulps = used = math.inf
            continue
        u, x = _distance(got[k], w, tol[k], rel)
        ulps, used = max(ulps, u), max(used, x)
        if not _close(got[k], w, tol[k], rel):
            g = np.asarray(got[k], dtype=np.float64)
            err = np.max(np.abs(g - np.asarray(w, dtype=np.float64))) if g.shape else 0.0
            fails.append(f"{where}: {k} differs (max |Δ| = {err:.3g}, tolerance {tol[k]})")
    return fails, ulps, used


def compare_vectors(root: Path | str) -> list[CaseCheck]:
    """Recompute every case listed in ``root/index.json`` with this fairagg and compare with
    the stored expectations: one [`CaseCheck`][fairagg.vectors.CaseCheck] per case, in the index's
    order, with the failing comparisons and how far the recomputed outputs are from the stored ones
    (in ulps and as a fraction of the tolerance)."""
    base = _existing(root, "root", folder=True)
    if not (base / "index.json").is_file():
        raise FileNotFoundError(f"root {str(base)!r} holds no index.json (see write_vectors)")
    index = json.loads((base / "index.json").read_text())
    checks = []
    for entry in index["cases"]:
        case = load_case(base / entry["file"])
        where = f"{case['kind']} {case['name']}/{case['case']}"
        want = case["expected"]
        resolved = _encode(
            {
                k: _json_value(v)
                for k, v in resolved_params(case["kind"], case["name"], case["params"]).items()
            },
            {},
            "",
            "resolved_params",
        )
        stored = _encode(case.get("resolved_params"), {}, "", "resolved_params")
        if stored != resolved:
            fail = (
                f"{where}: resolved_params {stored} in the file; this fairagg resolves "
                f"{resolved} (a default changed?)"
            )
            checks.append(CaseCheck(where, [fail], math.inf, math.inf))
            continue
        try:
            got = _compute(case["kind"], case["name"], case["inputs"], case["params"])
        except (ValueError, TypeError) as exc:
            if "error" not in want:
                fail = f"{where}: raised {type(exc).__name__}: {exc}"
            elif want["error"]["type"] != type(exc).__name__:
                fail = f"{where}: raised {type(exc).__name__}, expected {want['error']}"
            else:
                checks.append(CaseCheck(where, [], 0.0, 0.0))
                continue
            checks.append(CaseCheck(where, [fail], math.inf, math.inf))
            continue
        if "error" in want:
            fail = f"{where}: expected {want['error']['type']}, computed a result"
            checks.append(CaseCheck(where, [fail], math.inf, math.inf))
            continue
        rel = _rule_rel(case["name"]) if case["kind"] == "rule" else FORMULAS[case["name"]].rel
        fails, ulps, used = _compare(got, want, case["tolerance"], where, rel)
        checks.append(CaseCheck(where, fails, ulps, used))
    return checks


def check_vectors(root: Path | str) -> list[str]:
    """Recompute every case listed in ``root/index.json`` with this fairagg and compare with
    the stored expectations; returns one line per failing comparison (empty: all agree). See
    [`compare_vectors`][fairagg.vectors.compare_vectors] for the distance of each case."""
    return [line for c in compare_vectors(root) for line in c.fails]
