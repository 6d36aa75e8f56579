"""AAgFF-S's quadratic FTRL state: the running sums (dense, or low rank), their update each round,
and the QP ½pᵀAp + bᵀp they define (SPEC §5)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numba
import numpy as np

from .._checks import as_float_array, check_choice, check_count, check_real
from ..simplex import check_simplex_point
from ..simplex._scan import all_finite
from ._response import VARIANTS


class QuadraticFTRL(NamedTuple):
    """Running sums of AAgFF-S's FTRL objective after t rounds.

    Attributes
    ----------
    grad_sum : ndarray, shape (K,)
        Σ_τ g_τ.
    outer_sum : ndarray, shape (K, K)
        Σ_τ g_τ g_τᵀ.
    cross_sum : ndarray, shape (K,)
        Σ_τ g_τ ⟨g_τ, p_τ⟩.
    rounds : int
        t.
    """

    grad_sum: np.ndarray
    outer_sum: np.ndarray
    cross_sum: np.ndarray
    rounds: int


class LowRankFTRL(NamedTuple):
    """AAgFF-S's sums kept in O(K·min(t, 2K)) memory: Σ g gᵀ as RᵀR, never formed.

    The FTRL matrix A = αI + β Σ g gᵀ is diagonal plus rank ≤ t;
    [`quadratic_ftrl_step`][fairagg.online.quadratic_ftrl_step] and
    [`quadratic_ftrl_round`][fairagg.online.quadratic_ftrl_round] solve its QP through that
    structure ([`fairagg.online.quadratic_ftrl_init`][fairagg.online.quadratic_ftrl_init] with
    ``low_rank=True`` starts one). Same decisions as [`QuadraticFTRL`][fairagg.online.QuadraticFTRL]
    to round-off.

    Attributes
    ----------
    grad_sum : ndarray, shape (K,)
        Σ_τ g_τ.
    rows : ndarray, shape (r, K)
        R with RᵀR = Σ_τ g_τ g_τᵀ: the gradients g_τ themselves (r = t) until t reaches 2K, then
        the triangular factor of their QR decomposition (r = K), updated by appending each new
        gradient and re-factorising whenever r reaches 2K.
    cross_sum : ndarray, shape (K,)
        Σ_τ g_τ ⟨g_τ, p_τ⟩.
    rounds : int
        t.
    """

    grad_sum: np.ndarray
    rows: np.ndarray
    cross_sum: np.ndarray
    rounds: int

    @property
    def outer_sum(self) -> np.ndarray:
        """Σ_τ g_τ g_τᵀ = RᵀR, formed on request (K × K; the dense reference)."""
        return self.rows.T @ self.rows


def aaggff_s_defaults(
    num_clients: int, lipschitz: float | None = None
) -> tuple[float, float, float]:
    """SPEC §5 defaults (L∞, α, β) = (1/K, 4 K L∞, 1/(4 L∞)); ``lipschitz`` overrides L∞."""
    K = check_count(num_clients, "num_clients", low=1)
    L = 1.0 / K if lipschitz is None else check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    return L, 4.0 * K * L, 1.0 / (4.0 * L)


def quadratic_ftrl_init(num_clients: int, *, low_rank: bool = False) -> QuadraticFTRL | LowRankFTRL:
    """Empty sums for K clients (t = 0).

    ``low_rank=True`` keeps them as a [`LowRankFTRL`][fairagg.online.LowRankFTRL] (memory
    O(K·min(t, 2K)), each step O(K·t·min(t, |F|)) through A's diagonal-plus-low-rank structure)
    instead of the dense K × K Σ g gᵀ (memory O(K²), steps O(K²) to O(K³)); the decisions are the
    same to round-off. Worth it when the rounds t are fewer than the clients K.
    """
    K = check_count(num_clients, "num_clients", low=1)
    if not isinstance(low_rank, (bool, np.bool_)):
        raise TypeError(f"low_rank must be a bool; got {type(low_rank).__name__} {low_rank!r}")
    if low_rank:
        return LowRankFTRL(np.zeros(K), np.zeros((0, K)), np.zeros(K), 0)
    return QuadraticFTRL(np.zeros(K), np.zeros((K, K)), np.zeros(K), 0)


def quadratic_ftrl_update(
    state: QuadraticFTRL | LowRankFTRL, grad: Any, decision: Any
) -> QuadraticFTRL | LowRankFTRL:
    """Add round t's gradient g_t and played decision p_t to the sums (returns a new state)."""
    g, p = _check_round(state, grad, decision)
    return _add_round(state, g, p)


def _check_ftrl_state(state: Any) -> QuadraticFTRL | LowRankFTRL:
    if not isinstance(state, QuadraticFTRL | LowRankFTRL):
        raise TypeError(
            "state must be a fairagg.online.QuadraticFTRL (start from quadratic_ftrl_init, then "
            f"pass each round's returned state); got {type(state).__name__}"
        )
    return state


def _check_round(
    state: QuadraticFTRL | LowRankFTRL, grad: Any, decision: Any
) -> tuple[np.ndarray, np.ndarray]:
    K = _check_ftrl_state(state).grad_sum.size
    g = as_float_array(grad, "grad", shape=(K,), dtype=np.float64, allow_int=True)
    p = check_simplex_point(decision, "decision")
    if p.size != K:
        raise ValueError(f"decision must have shape ({K},); got {p.shape}")
    return g, p


def _state_arrays(state: QuadraticFTRL) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The sums as the compiled code takes them (float64, C-contiguous, shapes (K, K), (K,), (K,)),
    or None for a hand-made state that is not so (it then takes the NumPy path)."""
    outer, gs, cs = state.outer_sum, state.grad_sum, state.cross_sum
    for v, ndim in ((outer, 2), (gs, 1), (cs, 1)):
        if not (
            type(v) is np.ndarray
            and v.dtype == np.float64
            and v.ndim == ndim
            and v.flags.c_contiguous
        ):
            return None
    K = gs.shape[0]
    return (outer, gs, cs) if K > 0 and outer.shape == (K, K) and cs.shape == (K,) else None


@numba.njit(cache=True)
def _ftrl_sums(outer, gs, cs, g, gp):  # pragma: no cover - compiled
    """The sums after a round, Σggᵀ + ggᵀ (row by row, as a flat array of K² entries: reshaped
    by the caller), Σg + g and Σg⟨g, p⟩ + g·gp (gp = ⟨g, p⟩), entry by entry the IEEE operations
    of the NumPy code (np.outer, then +=; no fast-math, so no FMA): the same bits. Also returns
    whether all three are finite. Flat, so that ``all_finite`` is compiled for 1-D arrays only
    (each signature is one more compilation on a process's first round)."""
    K = g.shape[0]
    O2 = np.empty(K * K)
    gs2 = np.empty(K)
    cs2 = np.empty(K)
    for i in range(K):
        gi = g[i]
        for j in range(K):
            O2[i * K + j] = gi * g[j] + outer[i, j]
        gs2[i] = gs[i] + gi
        cs2[i] = cs[i] + gi * gp
    return O2, gs2, cs2, all_finite(O2) and all_finite(gs2) and all_finite(cs2)


def _add_round_low_rank(state: LowRankFTRL, g: np.ndarray, p: np.ndarray) -> LowRankFTRL:
    K = g.size
    with np.errstate(over="ignore", invalid="ignore"):
        rows = np.vstack([state.rows, g[None, :]])
        if rows.shape[0] >= 2 * K:  # keep r ≤ 2K: RᵀR = Σ g gᵀ with R triangular (K × K)
            rows = np.ascontiguousarray(np.linalg.qr(rows, mode="r"))
        new = LowRankFTRL(
            state.grad_sum + g, rows, state.cross_sum + g * float(g @ p), state.rounds + 1
        )
        # Σ g gᵀ's largest entry is its largest diagonal entry, Σ_τ g_τi²: finite iff the dense
        # sum would be.
        finite = (
            np.isfinite(new.grad_sum).all()
            and np.isfinite(new.cross_sum).all()
            and np.isfinite(np.einsum("ij,ij->j", rows, rows)).all()
        )
    if not finite:
        raise ValueError(
            "grad is too large for the FTRL sums: Σ g gᵀ and Σ g ⟨g, p⟩ overflow float64 "
            f"(largest |grad| entry {float(np.max(np.abs(g))):.3g}; products of entries must "
            "stay below about 1.8e308)"
        )
    return new


def _add_round(
    state: QuadraticFTRL | LowRankFTRL, g: np.ndarray, p: np.ndarray
) -> QuadraticFTRL | LowRankFTRL:
    if isinstance(state, LowRankFTRL):
        return _add_round_low_rank(state, g, p)
    arrays = _state_arrays(state)
    if arrays is not None and arrays[1].size == g.size:
        flat, gs, cs, finite = _ftrl_sums(*arrays, g, float(g @ p))
        new = QuadraticFTRL(gs, flat.reshape(gs.size, gs.size), cs, state.rounds + 1)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            outer = np.outer(g, g)
            outer += state.outer_sum
            new = QuadraticFTRL(
                state.grad_sum + g, outer, state.cross_sum + g * float(g @ p), state.rounds + 1
            )
        finite = (
            np.isfinite(new.grad_sum).all()
            and np.isfinite(new.outer_sum).all()
            and np.isfinite(new.cross_sum).all()
        )
    if not finite:
        raise ValueError(
            "grad is too large for the FTRL sums: Σ g gᵀ and Σ g ⟨g, p⟩ overflow float64 "
            f"(largest |grad| entry {float(np.max(np.abs(g))):.3g}; products of entries must "
            "stay below about 1.8e308)"
        )
    return new


def quadratic_ftrl_problem(
    state: QuadraticFTRL | LowRankFTRL, alpha: float, beta: float, variant: str = "paper"
) -> tuple[np.ndarray, np.ndarray]:
    """The QP ½pᵀAp + bᵀp whose simplex minimiser is AAgFF-S's next decision (SPEC §5).

    ``variant="paper"``: Σ_τ⟨g_τ, p⟩ + (α/2)‖p‖² + (β/2)Σ_τ⟨g_τ, p − p_τ⟩² expands (dropping the
    constant) to A = αI + β Σ g gᵀ, b = Σ g − β Σ g⟨g, p_τ⟩. ``variant="official"``: the public
    code's A = α(1 + β)I + β Σ g gᵀ, b = Σ g.
    """
    _check_ftrl_state(state)
    a = check_real(alpha, "alpha", low=0.0, low_open=True)
    bt = check_real(beta, "beta", low=0.0)
    check_choice(variant, "variant", VARIANTS)
    K = state.grad_sum.size
    A = bt * state.outer_sum
    if variant == "paper":
        A.flat[:: K + 1] += a
        return A, state.grad_sum - bt * state.cross_sum
    A.flat[:: K + 1] += a * (1.0 + bt)
    return A, state.grad_sum.copy()
