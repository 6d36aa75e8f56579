"""Minimising a case: drop rounds, clients and coordinates, then simplify numbers, while a
predicate (the difference and its diagnosis stay the same) holds."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ._common import Case, Json

#: Upper bound on the evaluations spent shrinking one case.
SHRINK_BUDGET = 250

_M_AXIS = {
    "losses", "num_samples", "weights", "mixture", "p", "prior", "accuracies", "participations",
    "y", "b", "r", "r_check", "grad_sum", "selected", "responses",
}  # fmt: skip
_MM_AXIS = {"gram", "A"}
_MD_AXIS = {"deltas", "grads", "gradients"}
_D_AXIS = {"params", "average", "momentum", "params0"}
#: Inputs whose entries may be simplified one by one (not the simplex points, whose entries
#: must keep their sum).
_SIMPLE = {"params", "average", "momentum", "params0", "deltas", "grads", "gradients", "losses",
           "y", "b", "r", "r_check", "grad_sum", "weights", "accuracies", "responses"}  # fmt: skip


def _drop(a: Any, i: int, axes: tuple[int, ...]) -> Any:
    for ax in axes:
        a = np.delete(a, i, axis=ax)
    return a


def _formula_smaller(case: Case) -> Iterator[Case]:
    """Each case with one client (m axis) or one coordinate (d axis) fewer."""
    inp, par = case.inputs, case.params
    cuts = _M_AXIS | _MD_AXIS | _MM_AXIS
    if "p" in inp and "selected" in inp:  # p is over all K clients; the m axis is S
        cuts = cuts - {"p"}
    sizes = {
        np.asarray(v).shape[0]
        for k, v in {**inp, **par}.items()
        if k in cuts and isinstance(v, np.ndarray) and v.ndim
    }
    if len(sizes) == 1 and (m := sizes.pop()) > 1:

        def cut(d: Json, i: int) -> Json:
            return {
                k: _drop(v, i, (0, 1) if k in _MM_AXIS else (0,))
                if k in cuts and isinstance(v, np.ndarray) and v.ndim
                else v
                for k, v in d.items()
            }

        for i in range(m):
            yield dataclasses.replace(case, inputs=cut(inp, i), params=cut(par, i))
    dsizes = {
        np.asarray(v).shape[-1]
        for k, v in inp.items()
        if k in _MD_AXIS | _D_AXIS and isinstance(v, np.ndarray) and v.ndim
    }
    if len(dsizes) == 1 and (d := dsizes.pop()) > 1:
        for j in range(d):
            yield dataclasses.replace(
                case,
                inputs={
                    k: _drop(v, j, (v.ndim - 1,))
                    if k in _MD_AXIS | _D_AXIS and isinstance(v, np.ndarray) and v.ndim
                    else v
                    for k, v in inp.items()
                },
            )


def _rule_smaller(case: Case) -> Iterator[Case]:
    """Each case with one round, one client or one coordinate fewer."""
    inp = case.inputs
    rounds = inp["rounds"]
    K = int(inp["num_clients"])
    for t in range(len(rounds) - 1, -1, -1):
        if len(rounds) > 1:
            kept = rounds[:t] + rounds[t + 1 :]
            renumbered = [{**r, "round_index": s} for s, r in enumerate(kept)]
            yield dataclasses.replace(case, inputs={**inp, "rounds": renumbered})
    if K > 1:
        for k in range(K):
            new = []
            for r in rounds:
                ids = np.asarray(r["client_ids"])
                keep = ids != k
                if not keep.any():
                    break
                nr = {
                    f: (np.asarray(v)[keep] if isinstance(v, np.ndarray) and v.ndim >= 1 else v)
                    for f, v in r.items()
                }
                nr["client_ids"] = np.where(ids[keep] > k, ids[keep] - 1, ids[keep])
                new.append(nr)
            else:
                yield dataclasses.replace(case, inputs={**inp, "num_clients": K - 1, "rounds": new})
    d = np.asarray(inp["params0"]).size
    if d > 1:
        for j in range(d):
            new = [
                {
                    f: (np.delete(v, j, axis=1) if f in _MD_AXIS and v is not None else v)
                    for f, v in r.items()
                }
                for r in rounds
            ]
            yield dataclasses.replace(
                case, inputs={**inp, "params0": np.delete(inp["params0"], j), "rounds": new}
            )


def _simpler_values(x: float) -> list[float]:
    """Simpler numbers to try in place of ``x``, simplest first."""
    out = []
    for v in (0.0, float(np.round(x)), float(np.round(x, 1)), float(np.round(x, 2))):
        if v != x and v not in out and abs(v - x) <= max(1.0, abs(x)):
            out.append(v)
    return out


def _entries(inputs: Json) -> Iterator[tuple[tuple, float]]:
    """(path, value) of each float entry that may be simplified."""
    for k, v in inputs.items():
        if k == "rounds":
            for t, r in enumerate(v):
                for f, a in r.items():
                    if f in _SIMPLE and isinstance(a, np.ndarray) and a.dtype.kind == "f":
                        for idx in np.ndindex(a.shape):
                            yield ("rounds", t, f, idx), float(a[idx])
        elif k in _SIMPLE and isinstance(v, np.ndarray) and v.dtype.kind == "f":
            for idx in np.ndindex(v.shape):
                yield (k, idx), float(v[idx])


def _with_entry(case: Case, path: tuple, value: float) -> Case:
    inputs = dict(case.inputs)
    if path[0] == "rounds":
        _, t, f, idx = path
        rounds = list(inputs["rounds"])
        r = dict(rounds[t])
        a = np.array(r[f], dtype=np.float64)
        a[idx] = value
        r[f] = a
        rounds[t] = r
        inputs["rounds"] = rounds
    else:
        k, idx = path
        a = np.array(inputs[k], dtype=np.float64)
        a[idx] = value
        inputs[k] = a
    return dataclasses.replace(case, inputs=inputs)


def _simpler(case: Case) -> Iterable[Case]:
    for path, x in list(_entries(case.inputs)):
        for v in _simpler_values(x):
            yield _with_entry(case, path, v)


def shrink(case: Case, kind: str, keeps: Callable[[Case], bool]) -> Case:
    """The smallest case found from ``case`` for which ``keeps`` holds: rounds, clients and
    coordinates dropped greedily, then each number replaced by a simpler one (0, an integer,
    one or two decimals). ``case.shrunk`` says whether anything changed."""
    budget = SHRINK_BUDGET
    changed = False
    for smaller in (_rule_smaller if kind == "rule" else _formula_smaller, _simpler):
        progress = True
        while progress and budget > 0:
            progress = False
            for cand in smaller(case):
                budget -= 1
                if budget < 0:
                    break
                if keeps(cand):
                    case, progress, changed = cand, True, True
                    break
    return dataclasses.replace(case, shrunk=case.shrunk or changed)
