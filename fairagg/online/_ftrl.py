"""AAgFF-S's FTRL step: the next decision as the exact simplex minimiser of the FTRL QP, solved
densely by [`fairagg.simplex`][fairagg.simplex]'s active-set method (through its internal
interface, the ``_solve`` and ``_scan`` modules, with a kept Cholesky factor between rounds) or
through A's low-rank structure (``_low_rank``) (SPEC §5)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numba
import numpy as np

from .._checks import as_float_array, check_choice, check_real
from ..simplex._scan import absmax, all_finite
from ..simplex._solve import (
    IllConditionedQPError,
    QPFactor,
    QPResult,
    SingularSystemError,
    factor_rank_one,
    new_factor,
    solve_checked,
    solve_with_factor,
)
from ._low_rank import _FTRL_KKT_TOL, _ftrl_kkt_residual, _low_rank_qp
from ._response import VARIANTS
from ._sums import (
    LowRankFTRL,
    QuadraticFTRL,
    _add_round,
    _check_ftrl_state,
    _check_round,
    _state_arrays,
    quadratic_ftrl_problem,
)


@numba.njit(cache=True)
def _ftrl_system(outer, gs, cs, alpha, beta, paper):  # pragma: no cover - compiled
    """[`quadratic_ftrl_problem`][fairagg.online.quadratic_ftrl_problem]'s A (row by row, as a
    flat array of K² entries: reshaped by the caller) and b, the same IEEE operations (the same
    bits), with what the QP's input check would find: max |A| and whether A is exactly symmetric
    and A and b are finite (``ok``).

    Loops only: an array expression (``gs − β cs``), ``.copy()`` and ``.ravel()`` would each
    compile functions of their own on a process's first round (0.1-0.3 s each); the flat A is
    the one signature (1-D) of the scans' other calls.
    """
    K = gs.shape[0]
    flat = np.empty(K * K)
    for i in range(K):
        for j in range(K):
            flat[i * K + j] = beta * outer[i, j]
    diag = alpha if paper else alpha * (1.0 + beta)
    for i in range(K):
        flat[i * K + i] += diag
    b = np.empty(K)
    for i in range(K):
        b[i] = gs[i] - beta * cs[i] if paper else gs[i]
    unequal = 0
    for i in range(K):
        for j in range(i):
            unequal += flat[i * K + j] != flat[j * K + i]
    ok = unequal == 0 and all_finite(flat) and all_finite(b)
    return flat, b, absmax(flat), ok


# Up to this many clients a low-rank solve that ends off its KKT conditions is redone dense.
_DENSE_FALLBACK_CLIENTS = 4096


def _solve_low_rank(
    state: LowRankFTRL,
    alpha: float,
    beta: float,
    variant: str,
    x0: Any,
    shown: tuple[Any, Any],
    *,
    x0_checked: bool = False,
) -> QPResult:
    K = state.grad_sum.size
    with np.errstate(over="ignore", invalid="ignore"):
        d = alpha if variant == "paper" else alpha * (1.0 + beta)
        b = state.grad_sum - beta * state.cross_sum if variant == "paper" else state.grad_sum
        big = beta * float(np.max(np.einsum("ij,ij->j", state.rows, state.rows), initial=0.0))
    if not (math.isfinite(d) and math.isfinite(d + big) and np.isfinite(b).all()):
        raise _overflow(*shown)
    if x0 is not None and not x0_checked:
        x0 = as_float_array(x0, "x0", shape=(K,), dtype=np.float64, allow_int=True)
    try:
        try:
            return _low_rank_qp(d, beta, state.rows, np.asarray(b, dtype=np.float64), x0)
        except IllConditionedQPError:
            if K > _DENSE_FALLBACK_CLIENTS:
                raise
        # βΣggᵀ near 1/ε times α: the dense active-set solve (its KKT residual checked too)
        # resolves more of these than the Woodbury iterations, at O(K²) memory.
        A, bd = quadratic_ftrl_problem(state, alpha, beta, variant)
        out = solve_with_factor(A, bd, 0.0, np.inf, 1.0, x0, None, False, None)
        return _kkt_checked(A, bd, *out)[0]
    except SingularSystemError as exc:
        raise _ill_conditioned(*shown) from exc
    except IllConditionedQPError as exc:
        raise _too_ill_conditioned(*shown) from exc


def _kkt_checked(
    A: np.ndarray, b: np.ndarray, res: QPResult, factor: QPFactor
) -> tuple[QPResult, QPFactor]:
    """The dense solve's (result, factor), or ``IllConditionedQPError`` when the KKT residual of
    its point, recomputed from A and b (not the solver's own figure), exceeds ``_FTRL_KKT_TOL``:
    with βΣggᵀ ≳ 1e14 α the solver could end off its KKT conditions and say nothing."""
    with np.errstate(over="ignore", invalid="ignore"):
        amax = float(np.max(np.abs(np.diag(A))))
        r = _ftrl_kkt_residual(lambda y: A @ y, amax, b, res.x, ~res.active_lower, res.multiplier)
    if not r <= _FTRL_KKT_TOL:
        raise IllConditionedQPError(
            f"the QP is too ill-conditioned for float64: the active-set method ended {r:.3g} off "
            "its KKT conditions"
        )
    return res, factor


def _solve_ftrl(
    state: QuadraticFTRL,
    alpha: float,
    beta: float,
    variant: str,
    x0: Any,
    factor: QPFactor | None,
    shown: tuple[Any, Any],
    *,
    x0_checked: bool = False,
) -> tuple[QPResult, QPFactor]:
    """The simplex minimiser of [`quadratic_ftrl_problem`][fairagg.online.quadratic_ftrl_problem]
    (checked α, β and variant), warm-started from ``x0`` (the caller's, checked here after the
    problem as [`solve_simplex_qp`][fairagg.simplex.solve_simplex_qp] does, unless ``x0_checked``)
    or cold, from ``factor``'s buffers. ``shown``: the caller's alpha and beta, as its error
    messages name them.

    A = αI + β Σ g gᵀ (or α(1 + β)I + β Σ g gᵀ) with α > 0 is positive definite by construction,
    so a warm start skips the solver's Cholesky proof of that. The usual sums (float64 arrays,
    Σggᵀ exactly symmetric, everything finite) take the compiled path, which builds A and b and
    checks them in one call; anything else takes
    [`fairagg.simplex.solve_simplex_qp`][fairagg.simplex.solve_simplex_qp]'s checks, with their
    messages. Both give the same bits."""
    arrays = _state_arrays(state)
    if arrays is not None:
        flat, b, amax, ok = _ftrl_system(*arrays, alpha, beta, variant == "paper")
        A = flat.reshape(b.size, b.size)
        overflow = not ok and not (all_finite(flat) and all_finite(b))
        if overflow and all(np.isfinite(v).all() for v in arrays):  # finite sums, as ours are
            raise _overflow(*shown)
    try:
        if arrays is None or not ok:
            A, b = quadratic_ftrl_problem(state, alpha, beta, variant)
            return _kkt_checked(
                A, b, *solve_with_factor(A, b, 0.0, np.inf, 1.0, x0, None, False, factor)
            )
        K = b.size
        if x0 is None:
            start, warm = np.zeros(K), 0
        else:
            start, warm = x0, 1
            if not x0_checked:
                start = as_float_array(x0, "x0", shape=(K,), dtype=np.float64, allow_int=True)
        box = np.zeros(K), np.full(K, np.inf)
        out = solve_checked(A, b, amax, *box, 1.0, start, warm, 20 * K + 100, False, factor)
        try:
            return _kkt_checked(A, b, *out)
        except IllConditionedQPError:
            if factor is None or factor.size < 0:
                raise
        # a kept (rank-one updated) factor that drifted: solve again from a fresh one
        out = solve_checked(A, b, amax, *box, 1.0, start, warm, 20 * K + 100, False, new_factor(K))
        return _kkt_checked(A, b, *out)
    except SingularSystemError as exc:
        raise _ill_conditioned(*shown) from exc
    except IllConditionedQPError as exc:
        raise _too_ill_conditioned(*shown) from exc


def quadratic_ftrl_step(
    state: QuadraticFTRL | LowRankFTRL,
    alpha: float,
    beta: float,
    variant: str = "paper",
    x0: Any = None,
) -> QPResult:
    """AAgFF-S's next decision p^{t+1}, the exact simplex minimiser of
    [`quadratic_ftrl_problem`][fairagg.online.quadratic_ftrl_problem] (warm-started from ``x0``,
    e.g. p^t).

    A = αI + β Σ g gᵀ (or α(1 + β)I + β Σ g gᵀ) with α > 0 is positive definite by construction,
    so the solver skips its Cholesky proof of that on a warm start.
    """
    _check_ftrl_state(state)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", VARIANTS)
    if isinstance(state, LowRankFTRL):
        return _solve_low_rank(state, a, bt, variant, x0, (alpha, beta))
    return _solve_ftrl(state, a, bt, variant, x0, None, (alpha, beta))[0]


def _overflow(alpha: float, beta: float) -> ValueError:
    return ValueError(
        f"alpha = {alpha!r} and beta = {beta!r} make the FTRL problem overflow float64: "
        "β Σ g gᵀ, β Σ g ⟨g, p⟩ or the diagonal α (1 + β) exceeds about 1.8e308; make them "
        "smaller"
    )


def _ill_conditioned(alpha: float, beta: float) -> ValueError:
    return ValueError(
        f"A = αI + βΣggᵀ is singular to working precision with alpha = {alpha!r} and "
        f"beta = {beta!r}: make beta / alpha smaller"
    )


def _too_ill_conditioned(alpha: float, beta: float) -> ValueError:
    return ValueError(
        f"alpha = {alpha!r} and beta = {beta!r} make the FTRL problem too ill-conditioned for "
        "float64: A = αI + βΣggᵀ spans more than float64 resolves, or is negligible against "
        "b = Σg − βΣg⟨g, p⟩; make alpha larger (or beta smaller)"
    )


class FTRLRound(NamedTuple):
    """One AAgFF-S round: the new sums, the QP solution (``result.x`` = p^{t+1}) and the Cholesky
    factor to hand to the next round (opaque)."""

    state: QuadraticFTRL | LowRankFTRL
    result: QPResult
    factor: QPFactor | None


def quadratic_ftrl_round(
    state: QuadraticFTRL | LowRankFTRL,
    grad: Any,
    decision: Any,
    alpha: float,
    beta: float,
    variant: str = "paper",
    factor: QPFactor | None = None,
) -> FTRLRound:
    """One round of AAgFF-S: [`quadratic_ftrl_update`][fairagg.online.quadratic_ftrl_update] with
    (g_t, p_t), then [`quadratic_ftrl_step`][fairagg.online.quadratic_ftrl_step] warm-started at
    p_t, the decision just played.

    ``factor``, the one the previous round returned, lets the solver begin from its Cholesky
    factor of the free block updated by β g_tgₜᵀ (A grows by exactly that, in both variants), O(K²),
    instead of factorising afresh, O(K³); the active set usually changes by a coordinate or two
    between rounds. A factor of another (α, β, variant, t) is ignored, as is None (the first
    round). The answer is the same exact minimiser either way (to round-off), and the function is
    pure: ``factor`` is copied, not modified.
    """
    g, p = _check_round(state, grad, decision)
    new_state = _add_round(state, g, p)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", VARIANTS)
    if isinstance(new_state, LowRankFTRL):
        res = _solve_low_rank(new_state, a, bt, variant, p, (alpha, beta), x0_checked=True)
        return FTRLRound(new_state, res, None)
    key = (a, bt, variant, new_state.rounds)
    if isinstance(factor, QPFactor) and factor.key == (a, bt, variant, state.rounds):
        start = factor_rank_one(factor, math.sqrt(bt) * g, key)
    else:
        start = new_factor(g.size)
    res, end = _solve_ftrl(new_state, a, bt, variant, p, start, (alpha, beta), x0_checked=True)
    return FTRLRound(new_state, res, end._replace(key=key))
