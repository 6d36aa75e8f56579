"""Comparing a user's outputs with fairagg's: entry by entry within each output's error bound,
and, where an argmin is not unique, by the optimality conditions of the problem."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._tolerance import Tolerance
from ..vectors import NON_UNIQUE
from ._common import Json

Tolerances = Mapping[str, Tolerance]


class Bounds(Mapping[str, Tolerance]):
    """Each output's tolerance, its error bound computed only when needed.

    Most comparisons pass on the bound's relative part alone (``quick``: the user's entry
    within ``rtol`` of fairagg's, bit-identical results included), which needs no perturbed
    runs; ``close_bounded`` tries it first and computes the whole bound (``compute``, once)
    only where that fails."""

    def __init__(
        self,
        discrete: Mapping[str, bool],
        rtol: float,
        compute: Callable[[], Mapping[str, Tolerance]],
        parts: tuple[Bounds, ...] = (),
    ) -> None:
        self._discrete = dict(discrete)
        self._rtol = rtol
        self._compute = compute
        self._full: Mapping[str, Tolerance] | None = None
        self._parts = parts

    def quick(self, k: str) -> Tolerance:
        for b in self._parts:
            if k in b:
                return b.quick(k)
        return Tolerance(exact=True) if self._discrete[k] else Tolerance(self._rtol, 0.0)

    def __getitem__(self, k: str) -> Tolerance:
        for b in self._parts:
            if k in b:
                return b[k]
        if k not in self._discrete:
            raise KeyError(k)
        if self._full is None:
            self._full = self._compute()
        return self._full[k]

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for b in self._parts:
            for k in b:
                if k not in seen:
                    seen.add(k)
                    yield k
        yield from (k for k in self._discrete if k not in seen)

    def __len__(self) -> int:
        return len(set(self))

    def __contains__(self, k: object) -> bool:
        return k in self._discrete or any(k in b for b in self._parts)

    def union(self, other: Mapping[str, Tolerance]) -> Bounds:
        """These bounds, and ``other``'s for the outputs these do not have."""
        if not isinstance(other, Bounds):
            other = Bounds({k: t.exact for k, t in other.items()}, 0.0, lambda: other)
        return Bounds({}, 0.0, dict, (self, other))


def close_bounded(got: Any, want: Any, tols: Tolerances, k: str) -> str | None:
    """``close`` within ``tols[k]``, trying the bound's relative part first."""
    if isinstance(tols, Bounds) and close(got, want, tols.quick(k)) is None:
        return None
    return close(got, want, tols[k])


def _index(a: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of the largest entry of ``a``, as plain ints."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(a)), shape)) if shape else ()


def _as_arrays(got: Any, want: Any) -> tuple[np.ndarray, np.ndarray] | str:
    try:
        g = np.asarray(got)
        w = np.asarray(want)
    except Exception as exc:  # noqa: BLE001 - the user's object may fail to convert in any way
        return f"yours cannot be read as an array ({exc})"
    if g.dtype.kind not in "biuf":
        return f"yours is not numeric ({type(got).__name__})"
    if g.shape != w.shape:
        return f"shape {g.shape} where fairagg's is {w.shape}"
    return g, w


def close(got: Any, want: Any, tol: Tolerance) -> str | None:
    """None when ``got`` agrees with ``want``; else how it differs. Equal entries agree (an
    infinity fairagg reports, and NaN where the other value is NaN too); otherwise an entry must
    be finite and within the tolerance."""
    arrays = _as_arrays(got, want)
    if isinstance(arrays, str):
        return arrays
    g, w = arrays
    if w.dtype.kind in "biu" or tol.exact:
        if np.array_equal(g, w):
            return None
        bad = g != w
        idx = _index(bad, g.shape)
        return f"yours is {g[idx]!r} at index {idx} where fairagg's is {w[idx]!r} (exact)"
    g, w = g.astype(np.float64), w.astype(np.float64)
    if g.size == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g - w)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        ok = same | (np.isfinite(g) & np.isfinite(w) & (err <= tol.atol + tol.rtol * np.abs(w)))
    if np.all(ok):
        return None
    bad = ~ok
    idx = _index(bad, g.shape)
    if not (np.isfinite(g[idx]) and np.isfinite(w[idx])):
        return f"yours is {g[idx]} at index {idx} where fairagg's is {w[idx]}"
    e = np.where(bad, err, 0.0)
    idx = _index(e, g.shape)
    return (
        f"largest difference {float(e[idx]):.3g} at index {idx} (tolerance {tol.text()}: "
        f"{tol.atol + tol.rtol * abs(float(w[idx])):.3g} there)"
    )


def error(got: Any, want: Any, tol: Tolerance) -> float:
    """max |got − want| / (atol + rtol·|want|) over the entries: at most 1 where they agree
    (``close``); inf where the shapes differ, where one is not finite and the other is, or
    where integers differ. Used to fit a continuous value."""
    arrays = _as_arrays(got, want)
    if isinstance(arrays, str):
        return math.inf
    g, w = arrays
    if w.dtype.kind in "biu" or tol.exact:
        return 0.0 if np.array_equal(g, w) else math.inf
    g, w = g.astype(np.float64), w.astype(np.float64)
    if g.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        if not np.all(same | (np.isfinite(g) & np.isfinite(w))):
            return math.inf
        bound = tol.atol + tol.rtol * np.abs(w)
        err = np.where(same, 0.0, np.abs(g - w))
        ratio = np.where(err == 0.0, 0.0, err / np.where(bound > 0, bound, np.inf))
        ratio = np.where((err > 0) & (bound == 0), np.inf, ratio)
    return float(np.max(ratio))


def differences(got: Any, want: Any) -> tuple[float | None, float | None]:
    """(largest |got − want|, largest |got − want| / |want|) over the entries, or Nones."""
    try:
        g = np.asarray(got, dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return None, None
    if g.shape != w.shape or g.size == 0:
        return None, None
    with np.errstate(all="ignore"):
        err = np.abs(g - w)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        err = np.where(same, 0.0, err)
        rel = np.where(same, 0.0, err / np.abs(w))
    err = np.where(np.isnan(err), np.inf, err)
    rel = np.where(np.isnan(rel), np.inf, rel)
    return float(np.max(err)), float(np.max(rel))


@dataclass
class Diff:
    """The first quantity of one comparison that differs."""

    quantity: str
    formula: str
    round: int | None
    got: Any
    want: Any
    detail: str
    yours: list[Json] = field(default_factory=list)  # your named outputs of each round so far


DIFF_FIELDS = ("quantity", "formula", "round", "got", "want", "detail")


def first_diff(
    got: Json,
    want: Json,
    order: Sequence[str],
    texts: Mapping[str, str],
    rnd: int | None,
    tols: Tolerances,
    another_optimum: Callable[[str, Json], bool] | None = None,
) -> Diff | None:
    """The first of ``order`` that ``got`` and ``want`` both have and that differs (an argmin
    that is not unique passes when ``another_optimum`` says yours is another minimiser)."""
    for k in order:
        if k in got and k in want:
            why = close_bounded(got[k], want[k], tols, k)
            if why is not None and another_optimum is not None and another_optimum(k, got):
                continue  # a different minimiser of a problem whose argmin is not unique
            if why is not None:
                return Diff(k, texts.get(k, ""), rnd, got[k], want[k], why)
    return None


def agrees(got: Json, other: Json, tols: Tolerances, keys: Sequence[str] | None = None) -> bool:
    """Whether every quantity both have (of ``keys``, if given) agrees; False when none is
    shared."""
    common = [k for k in (keys if keys is not None else got) if k in got and k in other]
    return bool(common) and all(close_bounded(got[k], other[k], tols, k) is None for k in common)


def all_finite(got: Json) -> bool:
    """Every numeric output in ``got`` is finite (non-numeric values are not judged here)."""
    for v in got.values():
        try:
            a = np.asarray(v)
        except (TypeError, ValueError):
            continue
        if a.dtype.kind in "biuf" and not np.all(np.isfinite(a.astype(np.float64))):
            return False
    return True


# ------------------------------------------------------------------------ non-unique argmins
# Outputs whose argmin is not unique (vectors.NON_UNIQUE) pass when they are feasible, have
# fairagg's objective value and meet the KKT conditions (min_norm_optimal). The unique
# quantities built from them (the min-norm vector, its norm, FedMGDA+'s θ^{t+1}) are still
# compared entry by entry.


def min_norm_optimal(
    G: np.ndarray, lower: Any, upper: Any, lam: Any, value: float, tol: Tolerance
) -> bool:
    """Whether ``lam`` minimises λᵀGλ over {Σλ = 1, lower ≤ λ ≤ upper} as fairagg's point does
    (objective ``value``): feasible, the same objective and the KKT conditions
    max_{λ_i > lower_i} (Gλ)_i ≤ min_{λ_i < upper_i} (Gλ)_i (a multiplier of Σλ = 1 exists),
    each to the tolerance of λ (atol + rtol) scaled by m·max(1, max G_ii), the size of the
    error an entrywise tolerance on λ allows there. Feasibility and either condition alone
    prove optimality for this convex problem; both are checked. Anything not finite fails (a
    NaN compares False with every tolerance, so each test is written to pass only when
    true)."""
    try:
        x = np.asarray(lam, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    m = G.shape[0]
    if x.shape != (m,) or not (np.all(np.isfinite(x)) and np.all(np.isfinite(G))):
        return False
    lo = np.broadcast_to(np.asarray(lower, dtype=np.float64), (m,))
    hi = np.broadcast_to(np.asarray(upper, dtype=np.float64), (m,))
    eps = tol.atol + tol.rtol
    if abs(float(x.sum()) - 1.0) > m * eps or np.any(x < lo - eps) or np.any(x > hi + eps):
        return False
    slack = m * eps * max(1.0, float(np.max(np.abs(np.diag(G)))))
    g = G @ x
    if not abs(float(x @ g) - value) <= slack:
        return False
    down, up = x > lo + eps, x < hi - eps
    return not (down.any() and up.any() and not float(g[down].max() - g[up].min()) <= slack)


def _fedmgda_problem(
    deltas: Any, num_samples: Any, epsilon: float, server_lr: float, switches: Json
):
    """(G, lower, upper, the weight of λ_k in a_k) of FedMGDA+'s QP, from the restated terms
    (with a mistake's switches: its own problem)."""
    from ._restate import fedmgda_terms

    t = fedmgda_terms(deltas, num_samples, epsilon, server_lr, **switches)
    G = t["g_hat"] @ t["g_hat"].T
    lam0 = t["lambda0"]
    eps = epsilon if switches.get("box", True) else 1.0
    per = t["inv_norms"] if switches.get("normalise", True) else np.ones_like(t["inv_norms"])
    return G, np.maximum(0.0, lam0 - eps), np.minimum(1.0, lam0 + eps), per


def another_optimum(
    target: str,
    inputs: Json,
    params: Json,
    want: Json,
    tols: Tolerances,
    switches: Mapping[str, Any] | None = None,
) -> Callable[[str, Json], bool] | None:
    """For a target of ``NON_UNIQUE``: a test of whether your output ``k`` is another
    minimiser of the case's problem (see ``min_norm_optimal``; with a mistake's
    ``switches``, of the mistaken problem). The problem is built only when an output differs
    from fairagg's."""
    if target not in NON_UNIQUE:
        return None
    switches = dict(switches or {})
    if switches.get("clip_after"):
        return None  # a clipped λ minimises nothing: compared entry by entry
    key = {"min_norm_weights": "x", "pareto_certificate": "weights"}.get(target, "mixture")

    @functools.cache
    def problem() -> tuple[np.ndarray, Any, Any, np.ndarray | None, float]:
        scale_back = None
        if target == "min_norm_weights":
            G = np.asarray(inputs["gram"], dtype=np.float64)
            G = (G + G.T) / 2
            lo, hi = params.get("lower", 0.0), params.get("upper", np.inf)
        elif target == "pareto_certificate":
            grads = np.asarray(inputs["grads"], dtype=np.float64)
            G, lo, hi = grads @ grads.T, 0.0, np.inf
        else:  # FedMGDA+, the formula or a round of the rule (ĝ_k are unit vectors)
            eta = float(params.get("server_lr", 1.0))
            G, lo, hi, per = _fedmgda_problem(
                inputs["deltas"], inputs["num_samples"], params["epsilon"], eta, switches
            )
            scale_back = eta * per
        lam_want = np.asarray(want[key], dtype=np.float64)
        return G, lo, hi, scale_back, float(lam_want @ G @ lam_want)

    def check(k: str, got: Json) -> bool:
        if k != key and not (k == "weights" and key == "mixture" and key in got):
            return False
        G, lo, hi, scale_back, value = problem()
        if not min_norm_optimal(G, lo, hi, got[key], value, tols[key]):
            return False
        if k == key:
            return True
        # FedMGDA+'s weights are η λ_k/‖δ_k‖ of *your* λ, itself a minimiser
        assert scale_back is not None  # k == "weights" only for FedMGDA+, whose problem sets it
        mine = scale_back * np.asarray(got[key], dtype=np.float64)
        return close(got[k], mine, tols[k]) is None

    return check
