"""cvxpy formulations of the argmin problems of the simplex and online-learning layer.

Each function states one convex problem literally in cvxpy and returns the solver's answer, so
that an exact implementation (a sort, an active-set method, a closed form) can be checked against
an independent computation. The package does not import this module; import it explicitly::

    from fairagg import oracles

    res = oracles.project_simplex([0.3, 1.2, -0.5])
    res.x, res.value, res.status, res.solver

Sets, for a length-K vector x:

- the simplex Δ = {x : x ≥ 0, Σx = total} (``total`` = 1 unless stated);
- the box-simplex {x : lower ≤ x ≤ upper, Σx = total}, ``lower``/``upper`` scalars or length-K
  arrays, ``lower`` finite, ``upper`` possibly ``+inf`` (no upper bound on that entry).

Accuracy. Every answer carries the solver's accuracy: nothing is clipped, renormalised or
otherwise post-processed, so an entry that is 0 at the optimum may come back as ±1e-13 and Σx may
differ from ``total`` in the last digits. Each docstring states the typical accuracy of its default
solver. Defaults:

- quadratic programs: OSQP with ``eps_abs = eps_rel = 1e-12``, solution polishing and up to 200 000
  iterations. Polishing solves the KKT system of the detected active set, which makes the answer
  exact up to round-off (about 1e-15) whenever the active set is identified;
- exponential-cone problems (``rel_entr``, ``entr``, ``log``): Clarabel with
  ``tol_gap_abs = tol_gap_rel = tol_feas = 1e-12``. Clarabel often stops just short of so tight a
  target ("almost solved"); the solve is then repeated with the tolerances loosened one decade at a
  time down to Clarabel's default 1e-8, and the first fully optimal answer is returned. These
  objectives are divided by η (or by the number of rounds) before solving, which leaves the argmin
  unchanged and makes Clarabel markedly more reliable; ``value`` is scaled back.

Federated optima. [`qffl_optimum`][fairagg.oracles.qffl_optimum] and
[`afl_optimum`][fairagg.oracles.afl_optimum] state the q-FFL objective and the AFL minimax problem
of a ``fairagg.models.LogisticRegression`` on federated data (rows of all clients concatenated,
client k owning ``offsets[k]:offsets[k+1]``) as exponential- and power-cone programs (Clarabel by
default). They are the slowest oracles (~30-100 ms on the small problems of the tests) and the least
accurate: the tighter rungs usually end "almost solved", so they are solved to Clarabel's default
1e-8, which leaves values accurate to ~1e-8 relative but gradients at the returned argmin of up to
~1e-4 of their scale (see their docstrings). Where every rung ends "almost solved", the ladder is
run again with Clarabel's step length capped at 0.9, then 0.8.

The same tolerance ladders are used when ``solver="OSQP"`` or ``solver="CLARABEL"`` is passed to
any oracle; other solvers run with cvxpy's defaults (SCS: about 1e-3 to 1e-5). ``**solver_options``
are passed to ``cvxpy.Problem.solve`` and override the defaults (an overridden tolerance applies to
every rung, so overriding all of them leaves a single solve). Every oracle raises
[`OracleError`][fairagg.oracles.OracleError] (a ``RuntimeError``), naming the oracle, the statuses
and anything the solver printed, unless the solver reports the problem solved to optimality; nothing
a solver prints reaches the terminal. OSQP reads magnitudes of 1e30 and above as infinite, so a
quadratic program whose data (after the exact power-of-two scaling of
[`simplex_qp`][fairagg.oracles.simplex_qp], [`min_norm_point`][fairagg.oracles.min_norm_point] and
[`a_norm_projection`][fairagg.oracles.a_norm_projection]) has such entries is refused up front with
an [`OracleError`][fairagg.oracles.OracleError] naming the argument; bad input is a
``ValueError``/``TypeError`` as everywhere in fairagg.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Any, NamedTuple

import cvxpy as cp
import numpy as np

from ._checks import as_float_array, as_int_array, check_choice, check_real

__all__ = [
    "MinimaxResult",
    "OracleError",
    "OracleResult",
    "a_norm_projection",
    "afl_optimum",
    "best_fixed_decision",
    "eg_step",
    "entropic_ftrl",
    "min_norm_point",
    "project_box_simplex",
    "project_simplex",
    "qffl_optimum",
    "quadratic_ftrl",
    "simplex_qp",
]


class OracleError(RuntimeError):
    """An oracle's solver did not reach an optimal solution (or cannot take the problem's
    data): the message names the oracle and what the solver reported. A subclass of
    ``RuntimeError``, so code that caught that before still does."""


class OracleResult(NamedTuple):
    """The solver's answer to one oracle problem.

    Attributes
    ----------
    x : ndarray of float64
        The argmin (argmax for [`best_fixed_decision`][fairagg.oracles.best_fixed_decision]),
        exactly as the solver returned it.
    value : float
        The optimal objective value, in the problem's own sign and scale.
    status : str
        cvxpy's status of the accepted solve (always ``"optimal"``: anything else raises).
    solver : str
        Name of the solver that produced the answer, e.g. ``"OSQP"``.
    """

    x: np.ndarray
    value: float
    status: str
    solver: str


# --------------------------------------------------------------------------------------------
# Solving
# --------------------------------------------------------------------------------------------

_QP_SOLVER = "OSQP"
_CONE_SOLVER = "CLARABEL"
#: Points of the simplex passed as data must sum to 1 within this absolute tolerance.
_SIMPLEX_ATOL = 1e-9


def _osqp_polish_key() -> str:
    # OSQP renamed its "polish" setting to "polishing" in version 1.0.
    import osqp

    major = osqp.__version__.split(".", 1)[0]
    return "polishing" if major.isdigit() and int(major) >= 1 else "polish"


def _ladder(solver: str) -> list[dict[str, Any]]:
    """Default option sets for ``solver``, tightest first (one empty set for other solvers)."""
    if solver == "OSQP":
        return [
            {"eps_abs": tol, "eps_rel": tol, _osqp_polish_key(): True, "max_iter": 200_000}
            for tol in (1e-12, 1e-10, 1e-8)
        ]
    if solver == "CLARABEL":
        return [
            {
                "tol_gap_abs": tol,
                "tol_gap_rel": tol,
                "tol_feas": tol,
                "tol_ktratio": min(1e-6, 100 * tol),
                "max_iter": 500,
            }
            for tol in (1e-12, 1e-11, 1e-10, 1e-9, 1e-8)
        ]
    return [{}]


def _check_solver(solver: Any, default: str) -> str:
    if solver is None:
        return default
    if not isinstance(solver, str):
        raise TypeError(f"solver must be None or a solver name; got {type(solver).__name__}")
    name = solver.upper()
    installed = cp.installed_solvers()
    if name not in installed:
        raise ValueError(
            f"solver must be one of the installed solvers {', '.join(installed)}; got {solver!r}"
        )
    return name


def _solve(
    problem: cp.Problem,
    variable: cp.Variable,
    solver: Any,
    default: str,
    solver_options: dict[str, Any],
    oracle: str,
) -> tuple[np.ndarray, float, str, str]:
    """Solve ``problem`` down the tolerance ladder; return (x, value, status, solver name)."""
    name = _check_solver(solver, default)
    attempts: list[dict[str, Any]] = []
    for rung in _ladder(name):
        opts = {"warm_start": False, **rung, **solver_options}
        if opts not in attempts:
            attempts.append(opts)
    outcomes = []
    printed = ""
    for opts in attempts:
        with warnings.catch_warnings(), _CapturedOutput(not opts.get("verbose")) as out:
            # An inaccurate solve is detected from the status below and either retried with
            # looser tolerances or reported as an OracleError: cvxpy's warning adds nothing.
            warnings.filterwarnings(
                "ignore", message="Solution may be inaccurate", category=UserWarning
            )
            failed = None
            try:
                problem.solve(solver=name, **opts)
            except cp.error.SolverError as exc:
                failed = f"solver error ({exc})"
        printed = printed or out.text()
        if failed is not None:
            outcomes.append(failed)
            continue
        status = problem.status
        if status == cp.OPTIMAL and variable.value is not None and problem.value is not None:
            x = np.array(variable.value, dtype=np.float64).reshape(variable.shape)
            return x, float(problem.value), status, problem.solver_stats.solver_name
        outcomes.append(f"status {status!r}")
    said = f" {name} printed: {' / '.join(printed.splitlines()).rstrip('.')}." if printed else ""
    raise OracleError(
        f"{oracle}: {name} did not solve the problem to optimality ({'; '.join(outcomes)}).{said} "
        "Try another solver or other solver options."
    )


def _flush_c_stdio() -> None:
    """fflush(NULL): write out what C code has buffered on its stdio streams."""
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to reach (some platforms)
        pass


class _CapturedOutput:
    """Redirects the process's stdout and stderr file descriptors (where the solvers' C code
    prints, e.g. OSQP's "ERROR in osqp_setup") into a temporary file while a solve runs, and
    restores them; ``text()`` is what was printed. Python-level output is flushed first."""

    def __init__(self, active: bool = True) -> None:
        self._active = active  # off when the caller asked the solver to be verbose

    def __enter__(self) -> _CapturedOutput:
        import os
        import sys
        import tempfile

        self._text = ""
        self._saved: list[tuple[int, int]] = []
        self._file = None
        if not self._active:
            return self
        try:
            fds = [sys.__stdout__.fileno(), sys.__stderr__.fileno()]  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no real descriptors (embedded Python)
            return self
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):
                pass
        _flush_c_stdio()
        self._file = tempfile.TemporaryFile(mode="w+b")
        for fd in dict.fromkeys(fds):
            self._saved.append((fd, os.dup(fd)))
            os.dup2(self._file.fileno(), fd)
        # Extension modules may also print through Python's sys.stdout (OSQP 1.x does).
        self._streams = (sys.stdout, sys.stderr)
        self._py = io.StringIO()
        sys.stdout = sys.stderr = self._py
        return self

    def __exit__(self, *exc: Any) -> None:
        import os
        import sys

        if self._file is None:
            return
        sys.stdout, sys.stderr = self._streams
        _flush_c_stdio()  # C's stdout is block-buffered when it is not a terminal
        for fd, saved in self._saved:
            os.dup2(saved, fd)
            os.close(saved)
        self._file.seek(0)
        text = self._py.getvalue() + self._file.read().decode("utf-8", "replace")
        self._text = text.strip()
        self._file.close()

    def text(self) -> str:
        return self._text


def _pow2_exponent(*arrays: np.ndarray) -> int:
    """e such that the largest |entry| of ``arrays``, divided by 2**e, lies in [1/2, 1) (0 when
    all are zero): dividing by 2**e is exact and keeps solvers' absolute tolerances meaningful."""
    top = max(float(np.max(np.abs(a), initial=0.0)) for a in arrays)
    return math.frexp(top)[1] if top > 0 else 0


#: OSQP reads data of this magnitude as infinite (its OSQP_INFTY).
_OSQP_INFINITY = 1e30


def _osqp_data(solver: Any, oracle: str, **arrays: Any) -> None:
    """Refuse data OSQP would read as infinite (only when OSQP solves: the default for QPs)."""
    if _check_solver(solver, _QP_SOLVER) != "OSQP":
        return
    for name, a in arrays.items():
        v = np.asarray(a, dtype=np.float64)
        top = float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0))
        if top >= _OSQP_INFINITY / 1e10:
            raise OracleError(
                f"{oracle}: {name} has entries of magnitude {top:.3g}; OSQP reads 1e30 and above "
                f"as infinite and loses all accuracy well before, so this oracle takes {name} "
                "below 1e20 in magnitude (scale the problem, or pass solver='CLARABEL')"
            )


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _vector(y: Any, name: str) -> np.ndarray:
    return as_float_array(y, name, ndim=1, dtype=np.float64, allow_int=True, min_size=1)


def _square(A: Any, name: str, k: int) -> np.ndarray:
    """A finite (k, k) matrix, symmetrised, checked positive semidefinite."""
    M = as_float_array(A, name, shape=(k, k), dtype=np.float64, allow_int=True)
    S = (M + M.T) / 2
    eig = np.linalg.eigvalsh(S)
    scale = max(float(np.abs(eig).max()), np.finfo(np.float64).tiny)
    if eig[0] < -1e-10 * scale:
        raise ValueError(
            f"{name} must be positive semidefinite; its symmetric part has eigenvalue "
            f"{float(eig[0])!r} (largest magnitude {scale!r})"
        )
    return S


def _box(lower: Any, upper: Any, k: int, total: float) -> tuple[np.ndarray, np.ndarray]:
    """Validate box bounds for a length-k box-simplex; return float64 arrays of shape (k,)."""
    lo = as_float_array(lower, "lower", dtype=np.float64, allow_int=True)
    hi = as_float_array(upper, "upper", dtype=np.float64, allow_int=True, finite=False)
    if np.any(np.isnan(hi)) or np.any(hi == -np.inf):
        raise ValueError("upper must hold real numbers or +inf; got NaN or -inf")
    for name, arr in (("lower", lo), ("upper", hi)):
        if arr.ndim != 0 and arr.shape != (k,):
            raise ValueError(f"{name} must be a scalar or have shape ({k},); got shape {arr.shape}")
    lo = np.broadcast_to(lo, (k,)).copy()
    hi = np.broadcast_to(hi, (k,)).copy()
    if np.any(lo > hi):
        i = int(np.argmax(lo > hi))
        raise ValueError(
            f"lower must not exceed upper; lower[{i}] = {float(lo[i])!r} > "
            f"upper[{i}] = {float(hi[i])!r}"
        )
    # Slack of a bound on the rounding error of the sums, so that e.g. lower = upper = 1/K passes.
    eps = np.finfo(np.float64).eps
    if lo.sum() > total + 4 * k * eps * max(1.0, abs(total), float(np.abs(lo).sum())):
        raise ValueError(
            f"the box-simplex is empty: sum(lower) = {float(lo.sum())!r} > total = {total!r}"
        )
    finite_hi = hi[np.isfinite(hi)]
    if np.all(np.isfinite(hi)) and hi.sum() < total - 4 * k * eps * max(
        1.0, abs(total), float(np.abs(finite_hi).sum())
    ):
        raise ValueError(
            f"the box-simplex is empty: sum(upper) = {float(hi.sum())!r} < total = {total!r}"
        )
    # An upper bound above total − Σ_{j≠i} lower_j can never bind (p_i ≤ total − Σ_{j≠i} p_j):
    # dropping the far larger ones is exact and keeps huge finite bounds away from the solver.
    hi[hi > 2.0 * (abs(total) + float(np.abs(lo).sum())) + 1.0] = np.inf
    return lo, hi


def _box_constraints(
    p: cp.Variable, lo: np.ndarray, hi: np.ndarray, total: float
) -> list[cp.Constraint]:
    constraints = [cp.sum(p) == total, p >= lo]
    bounded = np.flatnonzero(np.isfinite(hi))
    if bounded.size == hi.size:
        constraints.append(p <= hi)
    elif bounded.size:
        constraints.append(p[bounded] <= hi[bounded])
    return constraints


def _simplex_point(p: Any, name: str) -> np.ndarray:
    pv = _vector(p, name)
    if np.any(pv < 0):
        raise ValueError(
            f"{name} must be non-negative (a point of the simplex); minimum {float(pv.min())!r}"
        )
    if abs(pv.sum() - 1.0) > _SIMPLEX_ATOL:
        raise ValueError(
            f"{name} must sum to 1 (a point of the simplex); sums to {float(pv.sum())!r}"
        )
    return pv


def _finite_ratio(v: np.ndarray, e: float, name: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = v / e
    if not np.all(np.isfinite(z)):
        raise ValueError(f"{name} overflows: eta = {e!r} is too small for these values")
    return z


# --------------------------------------------------------------------------------------------
# Quadratic programs (OSQP by default)
# --------------------------------------------------------------------------------------------


def project_simplex(
    y: Any, total: float = 1.0, *, solver: str | None = None, **solver_options: Any
) -> OracleResult:
    """Euclidean projection onto the simplex: argmin_{p ≥ 0, Σp = total} ½‖p − y‖².

    Typical accuracy with the default OSQP settings: exact up to round-off (~1e-15) once
    polishing identifies the support; Clarabel ~1e-11.

    Parameters
    ----------
    y : array_like, shape (K,)
        Point to project, finite, K ≥ 1.
    total : float
        The sum constraint, > 0 (as
        [`fairagg.simplex.project_simplex`][fairagg.simplex.project_simplex]).
    solver : str, optional
        A cvxpy solver name; OSQP by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve`` (see the module docstring).

    Returns
    -------
    OracleResult
        ``x`` = p*, ``value`` = ½‖p* − y‖².
    """
    yv = _vector(y, "y")
    s = check_real(total, "total", low=0.0, low_open=True)
    _osqp_data(solver, "project_simplex", y=yv, total=s)
    p = cp.Variable(yv.shape[0])
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(p - yv)), [cp.sum(p) == s, p >= 0])
    return OracleResult(*_solve(problem, p, solver, _QP_SOLVER, solver_options, "project_simplex"))


def project_box_simplex(
    y: Any,
    lower: Any = 0.0,
    upper: Any = np.inf,
    total: float = 1.0,
    *,
    solver: str | None = None,
    **solver_options: Any,
) -> OracleResult:
    """Euclidean projection onto the box-simplex.

    argmin ½‖p − y‖² s.t. Σp = total, lower ≤ p ≤ upper.

    Typical accuracy with the default OSQP settings: exact up to round-off (~1e-15) once
    polishing identifies the active bounds; Clarabel ~1e-11.

    Parameters
    ----------
    y : array_like, shape (K,)
        Point to project, finite, K ≥ 1.
    lower : float or array_like, shape (K,)
        Finite lower bounds.
    upper : float or array_like, shape (K,)
        Upper bounds; ``inf`` entries are unbounded.
    total : float
        The sum constraint.
    solver : str, optional
        A cvxpy solver name; OSQP by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = p*, ``value`` = ½‖p* − y‖².

    Raises
    ------
    ValueError
        If the box-simplex is empty: lower > upper somewhere, Σlower > total or Σupper < total.
    """
    yv = _vector(y, "y")
    s = check_real(total, "total")
    lo, hi = _box(lower, upper, yv.shape[0], s)
    _osqp_data(solver, "project_box_simplex", y=yv, lower=lo, upper=hi, total=s)
    p = cp.Variable(yv.shape[0])
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(p - yv)), _box_constraints(p, lo, hi, s))
    return OracleResult(
        *_solve(problem, p, solver, _QP_SOLVER, solver_options, "project_box_simplex")
    )


def simplex_qp(
    A: Any,
    b: Any,
    lower: Any = 0.0,
    upper: Any = np.inf,
    total: float = 1.0,
    *,
    solver: str | None = None,
    **solver_options: Any,
) -> OracleResult:
    """The box-simplex QP: argmin ½pᵀAp + bᵀp s.t. Σp = total, lower ≤ p ≤ upper.

    ``A`` is replaced by its symmetric part (A + Aᵀ)/2, which defines the same quadratic form, and
    must be positive semidefinite (singular is fine). The argmin is unique only where A is
    positive definite on the face that holds it; otherwise the solver returns one of the minimisers.

    Typical accuracy with the default OSQP settings: ~1e-15 (polished; observed on random
    K = 30 problems against the exact KKT solution of the active set); Clarabel ~1e-11.

    Parameters
    ----------
    A : array_like, shape (K, K)
        Positive semidefinite matrix (up to -1e-10 relative eigenvalues, round-off of a Gram
        matrix).
    b : array_like, shape (K,)
        Linear term, K ≥ 1.
    lower, upper, total
        The box-simplex, as in [`project_box_simplex`][fairagg.oracles.project_box_simplex].
    solver : str, optional
        A cvxpy solver name; OSQP by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = p*, ``value`` = ½p*ᵀAp* + bᵀp*.
    """
    bv = _vector(b, "b")
    k = bv.shape[0]
    S = _square(A, "A", k)
    s = check_real(total, "total")
    lo, hi = _box(lower, upper, k, s)
    # A and b divided by one power of two (exact): the argmin is unchanged, the value scales.
    e = _pow2_exponent(S, bv)
    S, bv = np.ldexp(S, -e), np.ldexp(bv, -e)
    _osqp_data(solver, "simplex_qp", lower=lo, upper=hi, total=s)
    p = cp.Variable(k)
    objective = 0.5 * cp.quad_form(p, cp.psd_wrap(S)) + bv @ p
    problem = cp.Problem(cp.Minimize(objective), _box_constraints(p, lo, hi, s))
    x, value, status, name = _solve(problem, p, solver, _QP_SOLVER, solver_options, "simplex_qp")
    return OracleResult(x, math.ldexp(value, e), status, name)


def min_norm_point(
    vectors: Any,
    lower: Any = 0.0,
    upper: Any = np.inf,
    *,
    solver: str | None = None,
    **solver_options: Any,
) -> OracleResult:
    """Minimum-norm point of the (box-constrained) convex hull of m vectors.

    argmin ‖Σ_k λ_k v_k‖² over λ with Σλ = 1 and lower ≤ λ ≤ upper, formulated as
    ``sum_squares(vectors.T @ λ)`` (better conditioned than the Gram matrix VVᵀ).

    The point Σλ_k v_k is unique; the weights λ are not when the v_k are affinely dependent, and
    are returned as the solver gives them: compare points (``vectors.T @ x``) or values, not
    weights, in that case.

    The problem is solved on the vectors divided by the power of two that brings their largest
    entry into [½, 1) (exact; the argmin is unchanged and the value is scaled back): a solver's
    absolute tolerances would otherwise stop it early on tiny vectors (OSQP returned λ = (½, ½)
    for v = (1.4e-6, 0), whose minimiser is (0, 1)). Typical accuracy with the default OSQP
    settings: ~1e-13 or better on the point and the value relative to that scale (polished);
    Clarabel ~1e-11. On degenerate hulls (affinely dependent vectors, near-parallel faces) both
    can do much worse: OSQP may stop at its iteration limit (RuntimeError) or at a looser rung
    of its tolerance ladder, Clarabel short of the optimum (points 1e-7 to 1e-6 off on
    (2⁻⁸, 1), (0, 1), (1, 1)). A check that holds whatever the solver's accuracy: the min-norm
    point p* satisfies ‖p* − q‖² ≤ ‖q‖² − ‖p*‖² for every point q of the hull, so a point
    ``vectors.T @ x`` of the hull bounds the distance to p*.

    Parameters
    ----------
    vectors : array_like, shape (m, d)
        The vectors v_k as rows, finite, m ≥ 1, d ≥ 1.
    lower, upper
        Bounds on λ, as in [`project_box_simplex`][fairagg.oracles.project_box_simplex] (total 1).
    solver : str, optional
        A cvxpy solver name; OSQP by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = λ, ``value`` = ‖Σ_k λ_k v_k‖² (the squared norm).
    """
    V = as_float_array(vectors, "vectors", ndim=2, dtype=np.float64, allow_int=True, min_size=1)
    if V.shape[1] == 0:
        raise ValueError(f"vectors must have at least one column; got shape {V.shape}")
    lo, hi = _box(lower, upper, V.shape[0], 1.0)
    top = float(np.max(np.abs(V)))
    e = math.frexp(top)[1] if top > 0 else 0
    W = np.ldexp(V, -e)  # largest entry in [1/2, 1): the argmin is scale-free
    lam = cp.Variable(V.shape[0])
    problem = cp.Problem(cp.Minimize(cp.sum_squares(W.T @ lam)), _box_constraints(lam, lo, hi, 1.0))
    x, value, status, name = _solve(problem, lam, solver, _QP_SOLVER, solver_options,
                                    "min_norm_point")  # fmt: skip
    return OracleResult(x, math.ldexp(value, 2 * e), status, name)


def a_norm_projection(
    y: Any,
    A: Any,
    lower: Any = 0.0,
    upper: Any = np.inf,
    *,
    solver: str | None = None,
    **solver_options: Any,
) -> OracleResult:
    """Projection in the A-norm onto the box-simplex.

    argmin ½(p − y)ᵀA(p − y) s.t. Σp = 1, lower ≤ p ≤ upper.

    ``A`` is replaced by its symmetric part and must be positive semidefinite.

    Typical accuracy with the default OSQP settings: ~1e-15 (polished); Clarabel ~1e-11.

    Parameters
    ----------
    y : array_like, shape (K,)
        Point to project, finite, K ≥ 1.
    A : array_like, shape (K, K)
        Positive semidefinite matrix.
    lower, upper
        The box, as in [`project_box_simplex`][fairagg.oracles.project_box_simplex] (total 1).
    solver : str, optional
        A cvxpy solver name; OSQP by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = p*, ``value`` = ½(p* − y)ᵀA(p* − y).
    """
    yv = _vector(y, "y")
    k = yv.shape[0]
    S = _square(A, "A", k)
    lo, hi = _box(lower, upper, k, 1.0)
    e = _pow2_exponent(S)  # A divided by a power of two (exact): the argmin is unchanged
    S = np.ldexp(S, -e)
    _osqp_data(solver, "a_norm_projection", y=yv, lower=lo, upper=hi)
    p = cp.Variable(k)
    objective = 0.5 * cp.quad_form(p - yv, cp.psd_wrap(S))
    problem = cp.Problem(cp.Minimize(objective), _box_constraints(p, lo, hi, 1.0))
    x, value, status, name = _solve(
        problem, p, solver, _QP_SOLVER, solver_options, "a_norm_projection"
    )
    return OracleResult(x, math.ldexp(value, e), status, name)


def quadratic_ftrl(
    grads: Any,
    decisions: Any,
    alpha: float,
    beta: float,
    variant: str = "paper",
    *,
    solver: str | None = None,
    **solver_options: Any,
) -> OracleResult:
    """The AAgFF-S step: follow the regularised leader with quadratic (second-order) terms.

    With rows g_τ of ``grads`` and p_τ of ``decisions`` (the decision played at round τ),

    - ``variant="paper"``: argmin_{p∈Δ} Σ_τ ⟨g_τ, p⟩ + (α/2)‖p‖² + (β/2) Σ_τ ⟨g_τ, p − p_τ⟩²,
      formulated literally as ``sum(G p) + α/2 sum_squares(p) + β/2 sum_squares(G p − c)`` with
      c_τ = ⟨g_τ, p_τ⟩, not through the expanded quadratic form (an independent check of it);
    - ``variant="official"``: argmin_{p∈Δ} Σ_τ ⟨g_τ, p⟩ + (α/2)‖p‖² + (β/2) pᵀ(αI + Σ_τ g_τ g_τᵀ)p,
      the form of the authors' public code, formulated as
      ``β/2 (α sum_squares(p) + sum_squares(G p))``. ``decisions`` is validated but unused.

    Both objectives are strongly convex (α > 0), so the argmin is unique. Typical accuracy with
    the default OSQP settings: ~1e-15 (polished); Clarabel ~1e-11.

    Parameters
    ----------
    grads : array_like, shape (t, K)
        Past gradients g_τ as rows, K ≥ 1; t may be 0 (then both variants give the uniform point).
    decisions : array_like, shape (t, K)
        Past decisions p_τ as rows.
    alpha : float
        α > 0.
    beta : float
        β ≥ 0.
    variant : {"paper", "official"}
        Which objective, see above.
    solver : str, optional
        A cvxpy solver name; OSQP by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = p*, ``value`` = the objective of ``variant`` at p*.
    """
    G = as_float_array(grads, "grads", ndim=2, dtype=np.float64, allow_int=True)
    if G.shape[1] == 0:
        raise ValueError(f"grads must have at least one column (K ≥ 1); got shape {G.shape}")
    P = as_float_array(decisions, "decisions", shape=G.shape, dtype=np.float64, allow_int=True)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", ("paper", "official"))
    _osqp_data(solver, "quadratic_ftrl", grads=G, alpha=a, beta=bt)
    t, k = G.shape
    p = cp.Variable(k)
    objective = (a / 2) * cp.sum_squares(p)
    if t:
        objective = objective + cp.sum(G @ p)
        if variant == "paper":
            c = np.einsum("tk,tk->t", G, P)
            objective = objective + (bt / 2) * cp.sum_squares(G @ p - c)
        else:
            objective = objective + (bt / 2) * (a * cp.sum_squares(p) + cp.sum_squares(G @ p))
    elif variant == "official":
        objective = objective + (bt / 2) * a * cp.sum_squares(p)
    problem = cp.Problem(cp.Minimize(objective), [cp.sum(p) == 1, p >= 0])
    return OracleResult(*_solve(problem, p, solver, _QP_SOLVER, solver_options, "quadratic_ftrl"))


# --------------------------------------------------------------------------------------------
# Exponential-cone problems (Clarabel by default)
# --------------------------------------------------------------------------------------------


def eg_step(
    p: Any, r: Any, eta: float, *, solver: str | None = None, **solver_options: Any
) -> OracleResult:
    """Exponentiated-gradient step as an argmin: argmin_{q∈Δ} −⟨q, r⟩ + η·KL(q ‖ p).

    KL(q ‖ p) = Σ_i q_i log(q_i / p_i) is written ``sum(rel_entr(q, p))`` and the problem is
    solved divided by η, as argmin_{q∈Δ} −⟨q, r/η⟩ + Σ rel_entr(q, p) (same argmin). Where p_i = 0
    the KL term forces q_i = 0, so the problem is posed over the support of ``p`` only and those
    entries of ``x`` are exactly 0. The closed form is q_i ∝ p_i exp(r_i / η).

    Typical accuracy with the default Clarabel settings: 1e-12 to 1e-9; worse, up to ~1e-5, when
    the answer's entries span many orders of magnitude (small η, large r), where the solve may
    also fail (RuntimeError).

    Parameters
    ----------
    p : array_like, shape (K,)
        Current point: non-negative, sums to 1 (within 1e-9), K ≥ 1.
    r : array_like, shape (K,)
        Finite reward vector.
    eta : float
        η > 0.
    solver : str, optional
        A cvxpy solver supporting the exponential cone; Clarabel by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = q*, ``value`` = −⟨q*, r⟩ + η KL(q* ‖ p).
    """
    pv = _simplex_point(p, "p")
    rv = as_float_array(r, "r", shape=pv.shape, dtype=np.float64, allow_int=True)
    e = check_real(eta, "eta", low=0.0, low_open=True)
    z = _finite_ratio(rv, e, "r / eta")
    support = np.flatnonzero(pv > 0)
    q = cp.Variable(support.size)
    # The objective divided by η (same argmin): posed unscaled, Clarabel often fails for large η.
    # rel_entr's domain holds q ≥ 0.
    objective = -z[support] @ q + cp.sum(cp.rel_entr(q, pv[support]))
    problem = cp.Problem(cp.Minimize(objective), [cp.sum(q) == 1])
    xs, value, status, name = _solve_cone(problem, q, solver, solver_options, "eg_step")
    x = np.zeros(pv.shape[0])
    x[support] = xs
    return OracleResult(x, e * value, status, name)


def entropic_ftrl(
    grad_sum: Any, eta: float, *, solver: str | None = None, **solver_options: Any
) -> OracleResult:
    """Entropic follow-the-regularised-leader: argmin_{q∈Δ} ⟨G, q⟩ + η Σ_i q_i log q_i.

    Σ q log q is written ``-sum(entr(q))`` and the problem is solved divided by η, as
    argmin_{q∈Δ} ⟨G/η, q⟩ − Σ entr(q) (same argmin). The closed form is q = softmax(−G / η).

    Typical accuracy with the default Clarabel settings: 1e-12 to 1e-9; worse, up to ~1e-5, when
    the answer's entries span many orders of magnitude (small η, large G), where the solve may
    also fail (RuntimeError).

    Parameters
    ----------
    grad_sum : array_like, shape (K,)
        Cumulative gradient G, finite, K ≥ 1.
    eta : float
        η > 0.
    solver : str, optional
        A cvxpy solver supporting the exponential cone; Clarabel by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = q*, ``value`` = ⟨G, q*⟩ + η Σ q*_i log q*_i.
    """
    Gv = _vector(grad_sum, "grad_sum")
    e = check_real(eta, "eta", low=0.0, low_open=True)
    z = _finite_ratio(Gv, e, "grad_sum / eta")
    q = cp.Variable(Gv.shape[0])
    # The objective divided by η (same argmin), as in eg_step; entr's domain holds q ≥ 0.
    objective = z @ q - cp.sum(cp.entr(q))
    problem = cp.Problem(cp.Minimize(objective), [cp.sum(q) == 1])
    x, value, status, name = _solve_cone(problem, q, solver, solver_options, "entropic_ftrl")
    return OracleResult(x, e * value, status, name)


def best_fixed_decision(
    responses: Any, *, solver: str | None = None, **solver_options: Any
) -> OracleResult:
    """Best fixed decision in hindsight: argmax_{p∈Δ} Σ_t log(1 + ⟨p, r_t⟩).

    The decision loss of round t is −log(1 + ⟨p, r_t⟩), so the minimal cumulative decision loss
    over fixed decisions (the comparator of the regret) is ``-value``. The problem is solved as
    the maximum of the mean (1/T) Σ_t log(1 + ⟨p, r_t⟩) (same argmax); ``value`` is T times it.
    The argmax is unique when the r_t span the directions of the simplex; otherwise the solver
    returns one of the maximisers (``value`` is unique).

    Typical accuracy with the default Clarabel settings: 1e-12 to 1e-9 on x, worst observed ~2e-6
    (checked against a Newton solve of the KKT conditions on the support).

    Parameters
    ----------
    responses : array_like, shape (T, K)
        Rows r_t, finite, T ≥ 1, K ≥ 1, with 1 + min_i r_{t,i} > 0 for every t, i.e.
        1 + ⟨p, r_t⟩ > 0 on all of Δ.
    solver : str, optional
        A cvxpy solver supporting the exponential cone; Clarabel by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = p*, ``value`` = max Σ_t log(1 + ⟨p*, r_t⟩) (the positive sense).
    """
    R = as_float_array(responses, "responses", ndim=2, dtype=np.float64, allow_int=True, min_size=1)
    if R.shape[1] == 0:
        raise ValueError(f"responses must have at least one column (K ≥ 1); got shape {R.shape}")
    worst = 1.0 + R.min(axis=1)
    if np.any(worst <= 0):
        t = int(np.argmin(worst))
        raise ValueError(
            f"responses must satisfy 1 + r[t, i] > 0 for all t, i (so that 1 + <p, r_t> > 0 on "
            f"the whole simplex); row {t} has 1 + min_i r[{t}, i] = {float(worst[t])!r}"
        )
    T, k = R.shape
    p = cp.Variable(k)
    # The mean rather than the sum of the logs (same argmax): Clarabel is more reliable on it.
    objective = cp.sum(cp.log(1 + R @ p)) / T
    problem = cp.Problem(cp.Maximize(objective), [cp.sum(p) == 1, p >= 0])
    x, value, status, name = _solve_cone(problem, p, solver, solver_options, "best_fixed_decision")
    return OracleResult(x, T * value, status, name)


# --------------------------------------------------------------------------------------------
# Federated objectives of a logistic-regression model (Clarabel by default)
# --------------------------------------------------------------------------------------------


class MinimaxResult(NamedTuple):
    """The solver's answer to a minimax problem min_θ max_k F_k(θ).

    Attributes
    ----------
    x : ndarray of float64
        A minimiser θ*, exactly as the solver returned it.
    value : float
        The minimax value V* = min_θ max_k F_k(θ).
    weights : ndarray of float64, shape (K,)
        The optimal mixture λ*: the dual variables of the constraints F_k(θ) ≤ t, a point of the
        simplex (up to the solver's accuracy; not clipped or renormalised). θ* minimises
        Σ_k λ*_k F_k and λ* maximises min_θ Σ_k λ_k F_k(θ) over the simplex.
    status : str
        cvxpy's status of the accepted solve (always ``"optimal"``: anything else raises).
    solver : str
        Name of the solver that produced the answer, e.g. ``"CLARABEL"``.
    """

    x: np.ndarray
    value: float
    weights: np.ndarray
    status: str
    solver: str


class _Federated(NamedTuple):
    """Validated federated data of a logistic-regression model."""

    X: np.ndarray
    y: np.ndarray
    offsets: np.ndarray
    n_classes: int
    n_features: int
    l2: float


def _federated(model: Any, X: Any, y: Any, offsets: Any) -> _Federated:
    """Validate (model, X, y, offsets) for the federated oracles."""
    from .models.logistic import LogisticRegression

    if not isinstance(model, LogisticRegression):
        raise TypeError(
            f"model must be a fairagg.models.LogisticRegression; got {type(model).__name__}"
        )
    C, p = int(model.n_classes), int(model.n_features)
    Xv = as_float_array(X, "X", ndim=2, dtype=np.float64, allow_int=True, min_size=1)
    if Xv.shape[1] != p:
        raise ValueError(f"X must have model.n_features = {p} columns; got shape {Xv.shape}")
    n = Xv.shape[0]
    yv = as_int_array(y, "y", ndim=1)
    if yv.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match X; got {yv.shape}")
    if yv.min() < 0 or yv.max() >= C:
        raise ValueError(
            f"y must hold class labels in [0, {C}) (model.n_classes = {C}); "
            f"got range [{int(yv.min())}, {int(yv.max())}]"
        )
    off = as_int_array(offsets, "offsets", ndim=1)
    if off.size < 2 or off[0] != 0 or off[-1] != n:
        raise ValueError(
            f"offsets must be a 1-D integer array of length K + 1 ≥ 2 running from 0 to "
            f"len(X) = {n}; got {off.tolist()}"
        )
    sizes = np.diff(off)
    if np.any(sizes < 0):
        k = int(np.argmax(sizes < 0))
        raise ValueError(
            f"offsets must be non-decreasing; offsets[{k}] = {int(off[k])} > "
            f"offsets[{k + 1}] = {int(off[k + 1])}"
        )
    if np.any(sizes == 0):
        k = int(np.argmax(sizes == 0))
        raise ValueError(f"offsets must give every client at least one row; client {k} has none")
    return _Federated(Xv, yv, off, C, p, float(model.l2))


#: Clarabel's step-length cap (its default is 0.99) for the retries of the federated oracles.
_FEDERATED_RETRY_STEPS = (0.9, 0.8)


def _solve_cone(
    problem: cp.Problem,
    variable: cp.Variable,
    solver: Any,
    solver_options: dict[str, Any],
    oracle: str,
) -> tuple[np.ndarray, float, str, str]:
    """``_solve`` with Clarabel by default, retried with shorter interior-point steps.

    On the federated problems (hundreds of exponential cones, a power cone) Clarabel's default
    run stalls just short of even its default tolerance 1e-8 on a few per cent of small random
    instances (status "almost solved" on every rung of the ladder); on the entropic simplex
    problems it can fail outright (e.g. eg_step with a uniform p of 22 clients and three non-zero
    responses). Capping the step length at 0.9, then 0.8, of the distance to the cone boundary
    changes the iterates and solved every such instance tried. The retries run only for Clarabel
    and only when ``max_step_fraction`` was not passed.
    """
    try:
        return _solve(problem, variable, solver, _CONE_SOLVER, solver_options, oracle)
    except RuntimeError as exc:
        if _check_solver(solver, _CONE_SOLVER) != "CLARABEL" or (
            "max_step_fraction" in solver_options
        ):
            raise
        error = exc
    for step in _FEDERATED_RETRY_STEPS:
        options = {**solver_options, "max_step_fraction": step}
        try:
            return _solve(problem, variable, solver, _CONE_SOLVER, options, oracle)
        except RuntimeError as exc:
            error = exc
    steps = " and ".join(map(str, _FEDERATED_RETRY_STEPS))
    raise OracleError(
        f"{error} (also retried with Clarabel's max_step_fraction = {steps})"
    ) from error


def _client_weights(weights: Any, k: int) -> np.ndarray:
    """p_k: uniform 1/K by default, else non-negative ``weights`` normalised to sum 1."""
    if weights is None:
        return np.full(k, 1.0 / k)
    w = as_float_array(weights, "weights", shape=(k,), dtype=np.float64, allow_int=True)
    if np.any(w < 0):
        raise ValueError(f"weights must be non-negative; minimum {float(w.min())!r}")
    total = float(w.sum())
    if not total > 0:
        raise ValueError("weights must have a positive sum; got all zeros")
    return w / total


def _check_classes_present(fd: _Federated, clients: np.ndarray) -> None:
    """Every class must occur among ``clients``' rows, or the loss has no minimiser.

    The bias is not penalised: for a class c absent from the data, lowering b_c lowers every
    client's loss, so the infimum is approached only as b_c → −∞.
    """
    rows = np.concatenate([fd.y[fd.offsets[k] : fd.offsets[k + 1]] for k in clients])
    missing = np.setdiff1d(np.arange(fd.n_classes), rows)
    if missing.size:
        raise ValueError(
            f"y must contain every class 0..{fd.n_classes - 1} (among the clients with positive "
            f"weight): the bias is not penalised, so without class {int(missing[0])} the loss "
            "has no minimiser (it decreases as that class's bias goes to -inf)"
        )


def _client_loss_expressions(fd: _Federated, theta: cp.Variable) -> cp.Expression:
    """F(θ) ∈ R^K: each client's mean cross-entropy plus l2/2 ‖W‖², stated literally in cvxpy.

    With W the first C·p entries of θ in row-major order and b the last C, the logits of the N
    rows are Z = X Wᵀ + 1 bᵀ; row i's cross-entropy is log_sum_exp(Z_i) − Z_{i, y_i}; client k's
    mean is taken over its rows offsets[k]:offsets[k+1].
    """
    C, p = fd.n_classes, fd.n_features
    n = fd.X.shape[0]
    W = cp.reshape(theta[: C * p], (C, p), order="C")
    b = cp.reshape(theta[C * p :], (1, C), order="C")
    Z = fd.X @ W.T + np.ones((n, 1)) @ b
    Y = np.zeros((n, C))
    Y[np.arange(n), fd.y] = 1.0
    cross_entropy = cp.log_sum_exp(Z, axis=1) - cp.sum(cp.multiply(Y, Z), axis=1)
    sizes = np.diff(fd.offsets)
    K = sizes.size
    # A[k, i] = 1/n_k for the rows i of client k: A @ cross_entropy are the clients' means.
    A = np.zeros((K, n))
    for k in range(K):
        A[k, fd.offsets[k] : fd.offsets[k + 1]] = 1.0 / sizes[k]
    return A @ cross_entropy + (fd.l2 / 2) * cp.sum_squares(W)


def qffl_optimum(
    model: Any,
    X: Any,
    y: Any,
    offsets: Any,
    q: float,
    *,
    weights: Any = None,
    solver: str | None = None,
    **solver_options: Any,
) -> OracleResult:
    """The exact q-FFL optimum of a logistic-regression model on federated data.

    min_θ f_q(θ) = Σ_k p_k F_k(θ)^{q+1} / (q+1) (q-FFL eq. 2), with F_k client k's mean
    cross-entropy plus the model's penalty l2/2 ‖W‖² (``model.loss`` on the client's rows).
    Epigraph form, stated in cvxpy::

        minimise    (Σ_k p_k s_k^{q+1})^{1/(q+1)}     (Σ_k p_k s_k for q = 0)
        subject to  F_k(θ) ≤ s_k,  s ≥ 0,

    F_k written literally with ``log_sum_exp`` of the logits minus the picked logits, averaged
    over the client's rows, plus l2/2 ``sum_squares(W)``. The objective is the (q+1)-th root of
    (q+1) f_q, the p-weighted (q+1)-norm of the loss vector (``pnorm(p^{1/(q+1)} s, q + 1,
    approx=False)``, exact power cones; the form of the paper's Appendix proofs): a monotone
    transform with the same argmin, homogeneous of degree 1, so its optimal value is on the
    scale of the losses for every q. Posed as Σ p_k s_k^{q+1}/(q+1) itself, the objective shrinks
    like (loss)^{q+1}, Clarabel's absolute gap test stops early and the answer degrades: about
    10x worse values at q = 20 and a wrong argmin (gradient 1e-2) by q = 100, against ~1e-4 with
    the norm. ``value`` = (optimal norm)^{q+1} / (q+1).

    The minimiser exists when ``model.l2 > 0`` and every class occurs among the rows of the
    clients with p_k > 0 (checked); with ``l2 = 0`` it may not (separable data), and the solve
    then typically fails (RuntimeError). It is unique in W (when l2 > 0) but never in the bias:
    softmax is invariant to adding a constant to every b_c, so compare objective values or
    stationarity, not θ.

    Typical accuracy with the default Clarabel settings (small problems: K ≤ 5 clients of 5-15
    rows, p ≤ 4, C ≤ 3, l2 ≥ 0.05): f_q(``x``) within ~1e-9 relative of the optimum (an
    independent L-BFGS solve); ``value`` within ~3e-8 (q ≤ 1), ~1e-7 (q = 5) and ~3e-7
    (q = 20) relative, a relative error ε of the epigraph variables s_k ≥ F_k(x) being (q+1)ε in
    f_q; ‖∇f_q(x)‖ up to ~1e-4 of Σ_k p_k F_k^q ‖∇F_k(x)‖ (the terms that cancel at the optimum).
    The ladder usually stops at its last rung (Clarabel's default 1e-8): on these problems the
    tighter rungs end "almost solved".

    Parameters
    ----------
    model : fairagg.models.LogisticRegression
        Gives n_features p, n_classes C and l2; ``x`` is in its flat layout (W row-major, then b).
    X : array_like, shape (N, p)
        All clients' rows, concatenated in client order; finite.
    y : array_like of int, shape (N,)
        Labels in [0, C).
    offsets : array_like of int, shape (K + 1,)
        Client k owns rows ``offsets[k]:offsets[k + 1]``: non-decreasing from 0 to N, every client
        at least one row (as ``FederatedData.train_offsets``).
    q : float
        q ≥ 0.
    weights : array_like, shape (K,), optional
        p_k, non-negative with a positive sum, normalised to sum 1; uniform 1/K by default (the
        unweighted objective that q-FedSGD with full participation minimises; pass n_k for the
        paper's sample-size weights).
    solver : str, optional
        A cvxpy solver supporting exponential and power cones; Clarabel by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    OracleResult
        ``x`` = θ* (length C·p + C), ``value`` = f_q(θ*) in its own scale.
    """
    fd = _federated(model, X, y, offsets)
    qv = check_real(q, "q", low=0.0)
    K = fd.offsets.size - 1
    pk = _client_weights(weights, K)
    _check_classes_present(fd, np.flatnonzero(pk > 0))
    theta = cp.Variable(fd.n_classes * fd.n_features + fd.n_classes)
    s = cp.Variable(K, nonneg=True)
    power = qv + 1.0
    if qv == 0:
        objective = pk @ s
    else:
        # (Σ p_k s_k^{q+1})^{1/(q+1)}: same argmin as f_q, on the losses' scale (docstring).
        # The ignore: cvxpy annotates p as int | str, but pnorm takes any real p ≥ 1.
        objective = cp.pnorm(
            cp.multiply(pk ** (1.0 / power), s),
            power,  # type: ignore[arg-type]
            approx=False,
        )
    problem = cp.Problem(cp.Minimize(objective), [_client_loss_expressions(fd, theta) <= s])
    x, norm, status, name = _solve_cone(problem, theta, solver, solver_options, "qffl_optimum")
    with np.errstate(over="ignore"):  # beyond float64 the value is +inf, as in qffl_objective
        value = float(np.float64(norm) ** power / power)
    return OracleResult(x, value, status, name)


def afl_optimum(
    model: Any,
    X: Any,
    y: Any,
    offsets: Any,
    *,
    solver: str | None = None,
    **solver_options: Any,
) -> MinimaxResult:
    """The AFL minimax optimum of a logistic-regression model: min_θ max_k F_k(θ).

    Agnostic federated learning (Mohri et al. 2019) over the whole simplex of client mixtures:
    min_θ max_{λ∈Δ} Σ_k λ_k F_k(θ) = min_θ max_k F_k(θ), with F_k as in
    [`qffl_optimum`][fairagg.oracles.qffl_optimum]. Epigraph form, stated literally in cvxpy::

        minimise t  subject to  F_k(θ) ≤ t  for every k.

    The dual variables of the K constraints are the optimal mixture λ* (stationarity in t gives
    Σ λ*_k = 1): θ* minimises Σ λ*_k F_k, λ*_k = 0 for every client whose loss at θ* is below
    V*, and V* = min_θ Σ λ*_k F_k(θ). The q-FFL optimum tends to this one as q → ∞:
    V* ≤ max_k F_k(θ_q*) ≤ K^{1/(q+1)} V* (uniform p_k).

    Existence and uniqueness as in [`qffl_optimum`][fairagg.oracles.qffl_optimum] (every class must
    occur in ``y``); λ* may also be non-unique. Typical accuracy with the default Clarabel settings
    (the small problems of [`qffl_optimum`][fairagg.oracles.qffl_optimum]): ``value`` ≥ max_k
    F_k(``x``) by at most ~1e-8 relative; Σλ* = 1 to ~1e-9, λ* entries ≥ 0 up to round-off (the
    interior-point duals of inactive constraints are ~1e-11, not 0); ‖Σ λ*_k ∇F_k(x)‖ up to ~1e-4 of
    the largest ‖∇F_k(x)‖.

    Parameters
    ----------
    model, X, y, offsets
        As in [`qffl_optimum`][fairagg.oracles.qffl_optimum].
    solver : str, optional
        A cvxpy solver supporting the exponential cone; Clarabel by default.
    **solver_options
        Passed to ``cvxpy.Problem.solve``.

    Returns
    -------
    MinimaxResult
        ``x`` = θ*, ``value`` = V* = max_k F_k(θ*), ``weights`` = λ*.
    """
    fd = _federated(model, X, y, offsets)
    K = fd.offsets.size - 1
    _check_classes_present(fd, np.arange(K))
    theta = cp.Variable(fd.n_classes * fd.n_features + fd.n_classes)
    t = cp.Variable()
    constraint = _client_loss_expressions(fd, theta) <= t
    problem = cp.Problem(cp.Minimize(t), [constraint])
    x, value, status, name = _solve_cone(problem, theta, solver, solver_options, "afl_optimum")
    lam = np.array(constraint.dual_value, dtype=np.float64).reshape(K)
    return MinimaxResult(x, value, lam, status, name)
