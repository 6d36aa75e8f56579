"""FedFV, federated fair averaging (Wang et al., IJCAI 2021, Algs. 1-3; SPEC §7).

One round, given the selected clients' updates δ_1..δ_m (arrival order) and their losses F_k(θ^t):

1. **Order** (Alg. 1, line 6): sort the clients by loss, ascending, ties in arrival order
   (``order="loss"``). The ablations of the paper's Table 4: ``"reverse"`` (that order reversed)
   and ``"random"`` (a permutation seeded by ``(seed, t)``).
2. **Keep set** (Alg. 2, line 1): if α > 0 the clients in the last m − ⌈(m − 1)(1 − α)⌉ positions
   of the order keep their original δ; α = 0 keeps none, α = 1 keeps all.
3. **Internal conflicts** (Alg. 2): every other client i starts from g̃_i = δ_i and, for each j
   along the order (j ≠ i), if δ_j·g̃_i < 0 projects g̃_i ← g̃_i − (δ_j·g̃_i/‖δ_j‖²) δ_j onto the
   normal plane of the **original** δ_j (a zero δ_j is skipped). ḡ = (1/m) Σ_i g̃_i.
4. **External conflicts** (Alg. 3): the server keeps each client's latest original update and the
   round it was sent. For each round r of the window, oldest first, C = the clients whose latest
   round is r and whose update conflicts with the current ḡ; if C ≠ ∅ and ḡ·g_con < 0 for
   g_con = Σ_{c∈C} δ_c, then ḡ ← ḡ − (ḡ·g_con/‖g_con‖²) g_con. Rounds are counted from t = 0
   (Alg. 1, line 2). ``variant="paper"``: Alg. 1, line 9 runs Alg. 3 when t ≥ τ, over the rounds
   t−τ, …, t−1 (Alg. 3, line 1), so the first look back is in round t = τ, at rounds 0..τ−1.
   ``variant="flgo"``: the maintained public code (FLGo 0.4.4's ``fedfv.Server``) counts rounds
   from R = 1 and projects when R ≥ τ over the rounds R−τ+1, …, R; in fairagg's count that is
   rounds t−τ+1, …, t (the current round's originals included), first in round t = τ − 1, at
   rounds 0..τ−1. τ = 0 turns the step off in both.
5. **Rescale** (Alg. 1, line 11): g = ḡ ‖(1/m) Σ_k δ_k‖ / ‖ḡ‖ and θ^{t+1} = θ^t − g; ḡ = 0
   gives g = 0.

**Round-off.** Projections leave dot products that are 0 in exact arithmetic (g̃_i after its
projection onto δ_j, ḡ against a pair of antiparallel updates) as ±round-off, and Alg. 3's
conflict set, unlike the projections, jumps with their sign. So with g = Σ_l c_l u_l over the
vectors u_l involved, u·g counts as a conflict only when u·g < −ρ ‖u‖ Σ_l |c_l| ‖u_l‖, and ḡ counts
as 0 when ‖ḡ‖ ≤ ρ Σ_l |c_l| ‖u_l‖ (its direction would be noise blown up to full length), with
ρ = ``RHO`` = 1e-11. An update whose squared norm is subnormal relative to the largest one
(‖δ_k‖² < 2^-1022 P, P the largest power of two ≤ max_l ‖δ_l‖², so ‖δ_k‖ below about 1.5e-154
times the largest norm) counts as zero: it is no projection target, is not projected and
conflicts with nothing.

Every scale. g is positively homogeneous in the updates (round and window together): every test
and projection is scale-free. Where a squared norm leaves [2^-968, 2^1000] (updates beyond about
1e±145), the direction is computed on the updates divided by one power of two (exact) and scaled
back, so it is the same at every scale where the inputs and the step are finite; a step beyond
float64 is a ValueError.

Two implementations compute the same numbers (to round-off; ``method=``):

- ``"vector"``: the algorithm as written, on d-vectors, O(m² d) sequential BLAS-1 work. The
  readable specification.
- ``"gram"`` (the default): every g̃_i and ḡ stays in the span of the round's updates and the
  window's earlier ones, U = [δ_1..δ_m; h_1..h_w], so the procedure runs on coefficient vectors
  over the Gram matrix G = U Uᵀ: one GEMM (O((m+w)² d)), O(m³ + w m) work on G, and one more
  (2, m+w) × (m+w, d) product for ḡ and the mean update. Its two passes over the updates run
  on ``backend="numpy"`` (BLAS), ``"numba"`` (a register-tiled Numba Gram kernel up to
  ``kernels.cpu.GRAM_MAX_M`` updates, BLAS's SYRK above, and a one-pass Numba kernel for the
  product: the fastest on a CPU; the rule's step has that Gram kernel also write the copy of
  the round's updates that its state keeps for the window, as it reads them) or ``"cuda"``
  ([`fairagg.kernels`][fairagg.kernels]); the
  coefficient-space work on G is O(m³), independent of d, on the host for every backend (its
  projection loop compiled by Numba).

Both also return the coefficient matrix of the g̃_i and the final weights, so that
θ^{t+1} = θ^t − Σ_k a_k δ_k − Σ_h b_h h_h.

The keep count: ``variant="paper"`` evaluates ⌈(m − 1)(1 − α)⌉ with a 1e-9 relative snap, so that
α = 1/3 or 0.7 given as floats mean the fractions they stand for (in float64, (10 − 1)(1 − 1/3)
is 6.0000000000000009 and its ceiling 7); ``variant="flgo"`` evaluates it literally in float64,
as the public code does.

t counts the rule's own steps from ``init`` (Alg. 1's round index, from 0); the reports'
``round_index`` is not read.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, NamedTuple

import numba
import numpy as np

from .._checks import (
    SQ_HIGH,
    SQ_LOW,
    as_float_array,
    as_int_array,
    check_choice,
    check_count,
    check_finite,
    check_int,
    check_real,
)
from ..kernels import check_backend, gram, two_combinations
from ..kernels._threads import blas_single_thread
from ..types import Aggregate, RoundReports, Rule, check_reports, check_state, client_indices

__all__ = [
    "FEDFV_METHODS",
    "FEDFV_ORDERS",
    "FEDFV_VARIANTS",
    "FedFVHistory",
    "FedFVResult",
    "FedFVState",
    "fedfv",
    "fedfv_direction",
    "fedfv_keep_count",
    "fedfv_order",
]

FEDFV_ORDERS = ("loss", "reverse", "random")
FEDFV_VARIANTS = ("paper", "flgo")
FEDFV_METHODS = ("gram", "vector")

#: Round-off threshold: u·g counts as a conflict only below −RHO ‖u‖ Σ_l |c_l| ‖u_l‖ for
#: g = Σ_l c_l u_l, and ḡ counts as 0 when ‖ḡ‖ ≤ RHO Σ_l |c_l| ‖u_l‖.
RHO = 1e-11


class FedFVHistory(NamedTuple):
    """The latest original update of clients seen in earlier rounds (Alg. 1, line 5: GH).

    Attributes
    ----------
    updates : ndarray, shape (h, d)
        One row per client: its latest δ.
    rounds : ndarray of int64, shape (h,)
        The round each row was sent in.
    client_ids : ndarray of int64, shape (h,)
        Whose update each row is (distinct).
    """

    updates: np.ndarray
    rounds: np.ndarray
    client_ids: np.ndarray


class FedFVResult(NamedTuple):
    """One FedFV aggregation (see the module docstring).

    Attributes
    ----------
    direction : ndarray of float64, shape (d,)
        g, the rescaled combined update: θ^{t+1} = θ^t − g.
    weights : ndarray, shape (m,)
        a_k, the coefficient of δ_k in g.
    history_weights : ndarray, shape (h,)
        b_h, the coefficient of ``history.updates[h]`` in g (0 outside the window).
    coefficients : ndarray, shape (m, m)
        Row i: g̃_i = Σ_j C_ij δ_j after the internal projections (identity rows for kept
        clients).
    order : ndarray of int64, shape (m,)
        The projection order (indices into the round's clients, first target first).
    kept : ndarray of bool, shape (m,)
        Clients that kept their original update.
    conflicts_found : int
        Pairs i < j of the round's clients whose original updates conflict, δ_i·δ_j < 0.
    projections : int
        Internal projections made (each removes one conflict of a g̃_i with a target).
    external_conflicts : int
        Updates of the window found conflicting with ḡ (Alg. 3, line 5).
    external_projections : int
        External projections made (Alg. 3, line 11).
    conflicts_remaining : int
        Clients of the round whose original δ_k still conflicts with g.
    """

    direction: np.ndarray
    weights: np.ndarray
    history_weights: np.ndarray
    coefficients: np.ndarray
    order: np.ndarray
    kept: np.ndarray
    conflicts_found: int
    projections: int
    external_conflicts: int
    external_projections: int
    conflicts_remaining: int


class FedFVState(NamedTuple):
    """The rule's state: K, the rounds aggregated so far (t of the next round) and the history of
    latest updates that a later window can still reach."""

    num_clients: int
    rounds: int
    history: FedFVHistory


def fedfv_keep_count(num_clients: int, alpha: float, variant: str = "paper") -> int:
    """How many clients keep their original update: 0 if α = 0, else m − ⌈(m − 1)(1 − α)⌉
    (Alg. 2, line 1; SPEC §7). See the module docstring for the float64 snap of the paper
    variant."""
    m = check_count(num_clients, "num_clients", low=1)
    a = check_real(alpha, "alpha", low=0.0, high=1.0)
    check_choice(variant, "variant", FEDFV_VARIANTS)
    if a == 0.0:
        return 0
    x = (m - 1) * (1.0 - a)
    if variant == "paper":
        x -= 1e-9 * max(1.0, x)
    return m - max(0, math.ceil(x))


def fedfv_order(
    num_clients: int, losses: Any = None, order: str = "loss", seed: int = 0, round_index: int = 0
) -> np.ndarray:
    """The projection order of Alg. 1, line 6 (first target first), or an ablation.

    ``"loss"``: ascending losses, ties in arrival order (a stable sort); ``"reverse"``: that order
    reversed; ``"random"``: ``numpy.random.default_rng((seed, round_index)).permutation(m)``
    (``losses`` unused).
    """
    m = check_count(num_clients, "num_clients", low=1)
    check_choice(order, "order", FEDFV_ORDERS)
    if order == "random":
        seq = (check_int(seed, "seed", low=0), check_int(round_index, "round_index", low=0))
        return np.random.default_rng(seq).permutation(m).astype(np.int64)
    if losses is None:
        raise ValueError(f"order={order!r} needs the clients' losses; got None")
    F = as_float_array(losses, "losses", shape=(m,), dtype=np.float64, allow_int=True)
    idx = np.argsort(F, kind="stable").astype(np.int64)
    return idx[::-1].copy() if order == "reverse" else idx


def _check_history(history: Any, d: int, t: int, ids: np.ndarray | None) -> FedFVHistory:
    if not isinstance(history, FedFVHistory):
        raise TypeError(
            f"history must be a FedFVHistory (updates, rounds, client_ids); got "
            f"{type(history).__name__}"
        )
    H = as_float_array(history.updates, "history.updates", ndim=2, shape=(None, d))
    h = H.shape[0]
    rounds = as_int_array(history.rounds, "history.rounds", min_value=0)
    hid = as_int_array(history.client_ids, "history.client_ids", min_value=0)
    if rounds.shape != (h,) or hid.shape != (h,):
        raise ValueError(
            f"history.rounds and history.client_ids must have shape ({h},) to match "
            f"history.updates; got {rounds.shape} and {hid.shape}"
        )
    if h and rounds.max() >= t:
        raise ValueError(
            f"history.rounds must be earlier than round_index = {t}; got {rounds.max()}"
        )
    if np.unique(hid).size != h:
        raise ValueError("history.client_ids must be distinct (one latest update per client)")
    if ids is not None and np.intersect1d(ids, hid).size:
        raise ValueError(
            "history must not hold clients of this round: their latest update is this round's"
        )
    return FedFVHistory(H, rounds, hid)


def _window(rounds: np.ndarray, t: int, tau: int, variant: str, m: int) -> list[np.ndarray]:
    """Alg. 3's groups, oldest first, as row indices into U = [δ_1..δ_m; history.updates].

    ``"paper"``: Alg. 1 counts rounds t = 0, 1, … and runs Alg. 3 when t ≥ τ over the rounds
    t − τ, …, t − 1 (all ≥ 0). ``"flgo"``: FLGo counts rounds R = t + 1 = 1, 2, … and projects
    when R ≥ τ over the rounds R − τ + 1, …, R, i.e. t − τ + 1, …, t, first when t = τ − 1 (τ ≥ 1;
    τ = 0 is an empty window in both).
    """
    if tau == 0:
        return []
    if variant == "paper":
        if t < tau:
            return []
        first, last = t - tau, t - 1
    else:
        if t + 1 < tau:
            return []
        first, last = t - tau + 1, t
    groups = []
    for r in range(first, last + 1):
        if r == t:
            groups.append(np.arange(m))
        else:
            rows = np.flatnonzero(rounds == r)
            if rows.size:
                groups.append(m + rows)
    return groups


def fedfv_direction(
    deltas: Any,
    losses: Any = None,
    *,
    alpha: float = 0.1,
    order: str = "loss",
    seed: int = 0,
    round_index: int = 0,
    history: FedFVHistory | None = None,
    tau: int = 0,
    variant: str = "paper",
    method: str = "gram",
    client_ids: Any = None,
    rescale: bool = True,
    backend: str = "numpy",
) -> FedFVResult:
    """FedFV's combined update g for one round (Algs. 1-3; SPEC §7; module docstring).

    Parameters
    ----------
    deltas : array_like, shape (m, d)
        δ_k of the round's clients, finite.
    losses : array_like, shape (m,), optional
        F_k(θ^t); needed unless ``order="random"``.
    alpha : float
        α ∈ [0, 1], the fraction of high-loss clients that keep their update.
    order : {"loss", "reverse", "random"}
        Projection order (see [`fedfv_order`][fairagg.rules.fedfv.fedfv_order]).
    seed : int
        Seed of the random order.
    round_index : int
        t, this round's index from 0.
    history : FedFVHistory, optional
        Latest updates of clients seen before round t (none of this round's).
    tau : int
        τ ≥ 0, the window of Alg. 3 (0: no external mitigation).
    variant : {"paper", "flgo"}
        The window (and the keep count's arithmetic), see the module docstring.
    method : {"gram", "vector"}
        Coefficient space on the Gram matrix, or the direct vector version.
    client_ids : array_like of int, shape (m,), optional
        This round's clients, to check that ``history`` holds none of them.
    rescale : bool
        Rescale ḡ to the mean update's length (Alg. 1, line 11). False returns ḡ itself, the
        update that the convergence proofs of Theorems 3 and 4 analyse.
    backend : {"numpy", "numba", "cuda"}
        Backend of the Gram path's two passes over the updates: the Gram matrix and the final
        combination W @ D ([`fairagg.kernels`][fairagg.kernels]). The coefficient-space work on the
        small (m + w)² matrix runs on the host, the same code on every backend (NumPy, and its
        projection loop compiled by Numba). ``method="vector"`` is the readable
        specification and runs only on ``"numpy"``; ``"numba"`` runs its BLAS calls (the small
        products on the Gram matrix, the norms) on one BLAS thread, its two passes on Numba's
        threads (``fairagg.kernels._threads``).

    Returns
    -------
    FedFVResult
    """
    check_choice(method, "method", FEDFV_METHODS)
    _check_method_backend(method, backend)
    args = (deltas, losses, alpha, order, seed, round_index, history, tau, variant, method)
    return _dispatch(args, client_ids, rescale, backend)


def _dispatch(
    args: tuple, client_ids: Any, rescale: bool, backend: str, copy_to: np.ndarray | None = None
) -> FedFVResult:
    """``_fedfv_direction`` on ``backend``'s BLAS threads; ``copy_to``: see there."""
    # passed by name only when given (the positional call is the one tests watch)
    extra: dict[str, Any] = {} if copy_to is None else {"copy_to": copy_to}
    full = (*args, client_ids, rescale, backend)
    if backend == "numba":
        # BLAS's threads spin for a while after each call and took the second core from the
        # Numba threads (2 threads were 8x slower than 1 at m = 10, d = 1e5)
        with blas_single_thread():
            return _fedfv_direction(*full, **extra)
    return _fedfv_direction(*full, **extra)


def _fedfv_direction(
    deltas, losses, alpha, order, seed, round_index, history, tau, variant, method, client_ids,
    rescale, backend, copy_to=None,
) -> FedFVResult:  # fmt: skip
    """[`fedfv_direction`][fairagg.rules.fedfv.fedfv_direction] once ``method`` and ``backend`` are
    checked. ``copy_to`` (the rule's step): an (m, d) float64 array that receives a copy of the
    updates, written by the Gram pass where that is Numba's kernel (no pass of its own)."""
    # The Gram path finds a non-finite entry in the Gram matrix's diagonal instead of a separate
    # pass over the (m, d) updates (that pass costs about a tenth of the step).
    D = as_float_array(deltas, "deltas", ndim=2, min_size=1, finite=method == "vector")
    m, d = D.shape
    check_choice(variant, "variant", FEDFV_VARIANTS)
    if not isinstance(rescale, (bool, np.bool_)):
        raise TypeError(f"rescale must be a bool; got {type(rescale).__name__}")
    t = check_int(round_index, "round_index", low=0)
    tau = check_int(tau, "tau", low=0)
    check_int(seed, "seed", low=0)
    perm = fedfv_order(m, losses, order, seed, t)
    kept = np.zeros(m, dtype=bool)
    kept[perm[m - fedfv_keep_count(m, alpha, variant) :]] = True
    ids = None
    if client_ids is not None:
        ids = as_int_array(client_ids, "client_ids", min_value=0)
        if ids.shape != (m,):
            raise ValueError(f"client_ids must have shape ({m},); got {ids.shape}")
    if history is None:
        history = FedFVHistory(
            np.zeros((0, d)), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        )
    history = _check_history(history, d, t, ids)
    groups = _window(history.rounds, t, tau, variant, m)
    # Only the window's rows of the history take part.
    used = np.unique(np.concatenate([g[g >= m] - m for g in groups] + [np.zeros(0, np.int64)]))
    remap = np.full(history.updates.shape[0], -1, dtype=np.int64)
    remap[used] = m + np.arange(used.size)
    groups = [g if g[0] < m else remap[g - m] for g in groups]  # a group is all current or all old
    D64 = D.astype(np.float64, copy=False)
    H = history.updates
    H64 = (H if used.size == H.shape[0] else H[used]).astype(np.float64, copy=False)

    def run(D_: np.ndarray, H_: np.ndarray, copy: np.ndarray | None = None) -> tuple | None:
        with np.errstate(over="ignore", invalid="ignore"):  # out of range: None, scaled below
            if method == "gram":
                return _gram(D_, H_, perm, kept, groups, backend, copy)
            return _vector(D_, H_, perm, kept, groups)

    fused = (
        copy_to is not None
        and method == "gram"
        and backend == "numba"
        and D64.flags.c_contiguous
        and copy_to.dtype == np.float64
        and _cpu().use_gram_kernel(m)
    )
    out = run(D64, H64, copy_to if fused else None)  # the copy is of the unscaled updates
    if copy_to is not None and not fused:
        copy_to[...] = D
    e = 0
    if out is None:
        # Squared norms out of [2^-968, 2^1000]: the direction is positively homogeneous in the
        # updates (tests and projections are scale-free), so compute it on the updates divided
        # by one power of two (exact) that puts the largest entry in [2^30, 2^31), and scale
        # back. The Gram path skipped the finiteness pass: a NaN or inf input is reported here.
        check_finite(D, "deltas")
        top = max(float(np.max(np.abs(D64))), float(np.max(np.abs(H64), initial=0.0)))
        e = math.frexp(top)[1] - 31  # largest entry in [2^30, 2^31): its square ≥ 2^60
        out = run(np.ldexp(D64, -e), np.ldexp(H64, -e))
        assert out is not None  # every squared norm of the scaled updates is in range
    c, C, counts, g_bar, mean, norms, dots = out
    # Rescale (Alg. 1, line 11); a ḡ cancelled to round-off is 0.
    size = float(np.abs(c) @ norms)
    g_norm = float(np.linalg.norm(g_bar))
    target = float(np.linalg.norm(mean))
    if g_norm <= RHO * size:
        scale = 0.0
    elif not rescale:
        scale = 1.0
    else:
        scale = target / g_norm
    with np.errstate(over="ignore"):
        direction = np.ldexp(g_bar * scale, e)
    if not np.all(np.isfinite(direction)):
        raise ValueError(
            "deltas are too large: the FedFV step (as long as the mean update) has entries "
            "beyond float64's range (about 1.8e308)"
        )
    history_weights = np.zeros(history.updates.shape[0])
    history_weights[used] = c[m:] * scale
    remaining = 0
    if scale > 0.0:
        tol = RHO * norms[:m] * size
        remaining = int(np.count_nonzero((dots < -tol) & (tol > 0.0)))
    return FedFVResult(
        direction,
        c[:m] * scale,
        history_weights,
        C,
        perm,
        kept,
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        remaining,
    )


def _check_method_backend(method: str, backend: str) -> None:
    check_backend(backend)
    if method == "vector" and backend != "numpy":
        raise ValueError(
            f"backend={backend!r} needs method='gram': the vector method is the readable "
            "specification and runs only on backend='numpy'"
        )


def _conflict(dot: float, scale: float) -> bool:
    """u·g is a conflict: below −ρ ‖u‖ Σ|c_l|‖u_l‖ (``scale``), which must be > 0."""
    return scale > 0.0 and dot < -RHO * scale


def _in_range(sq: np.ndarray, D: np.ndarray, H: np.ndarray) -> bool:
    """Every decision of ``_norms`` and every Gram entry it keeps are exact to rounding
    (the plain computation; elsewhere fedfv_direction scales the updates):
    the squares are finite and ≤ 2^1000, and each one is ≥ 2^-968 (no digits lost to
    underflow), or below it where the zero threshold 2^-1022 P is ≥ 2^-967 (P ≥ 2^55: its true
    value, at most 2^-968 + d 2^-1022 even if every product was flushed, is below the
    threshold: a zero update either way), or the exact 0 of a zero row."""
    if not np.all(np.isfinite(sq)) or sq.max(initial=0.0) > SQ_HIGH:
        return False
    small = sq < SQ_LOW
    if not small.any() or sq.max(initial=0.0) >= 2.0**55:
        return True
    rows = np.flatnonzero(small)
    if np.any(sq[rows]):
        return False
    m = D.shape[0]  # zero squares: zero rows only, not squares that underflowed
    return not (np.any(D[rows[rows < m]]) or np.any(H[rows[rows >= m] - m]))


def _norms(sq: np.ndarray) -> np.ndarray:
    """‖u‖ from ‖u‖², 0 for an update whose squared norm is below 2^-1022 P, P the largest
    power of two ≤ max ‖u_l‖² (subnormal relative to the largest): a scale-free test, decided
    between normal numbers on both paths (BLAS kernels may flush subnormals to 0, a dot product
    may not: both must see the same zeros)."""
    top = float(sq.max(initial=0.0))
    if top == 0.0:
        return np.zeros_like(sq)
    threshold = math.ldexp(1.0, math.frexp(top)[1] - 1 - 1022)
    return np.sqrt(np.where(sq >= threshold, sq, 0.0))


def _vector(D, H, perm, kept, groups):
    """Algs. 2-3 on d-vectors, as written. Returns (c, C, counts, ḡ, mean update, ‖U_l‖,
    δ_k·ḡ), or None if a squared norm is not finite."""
    m = D.shape[0]
    U = np.concatenate([D, H]) if H.shape[0] else D
    sq_all = np.array([float(u @ u) for u in U])
    if not _in_range(sq_all, D, H):
        return None
    norms = _norms(sq_all)
    sq = norms[:m] ** 2
    found = sum(
        _conflict(float(D[i] @ D[j]), norms[i] * norms[j])
        for i in range(m)
        for j in range(i + 1, m)
    )
    C = np.eye(m)
    g_tilde = D.copy()
    projections = 0
    for i in range(m):
        if kept[i] or norms[i] == 0.0:
            continue
        g = D[i].copy()
        size = norms[i]  # Σ_l |C_il| ‖δ_l‖, the scale of the round-off in g
        for j in perm:
            if j == i or sq[j] == 0.0:
                continue
            dot = float(D[j] @ g)
            if _conflict(dot, norms[j] * size):
                g -= (dot / sq[j]) * D[j]
                C[i, j] -= dot / sq[j]
                size += abs(dot / sq[j]) * norms[j]
                projections += 1
        g_tilde[i] = g
    g_bar = g_tilde.sum(axis=0) / m
    c = np.zeros(U.shape[0])
    c[:m] = C.sum(axis=0) / m
    g_bar, ext_found, ext_proj = _external_vector(U, g_bar, c, norms, groups)
    counts = (int(found), projections, ext_found, ext_proj)
    return c, C, counts, g_bar, D.sum(axis=0) / m, norms, D @ g_bar


def _external_vector(
    U: np.ndarray, g_bar: np.ndarray, c: np.ndarray, norms: np.ndarray, groups: list[np.ndarray]
) -> tuple[np.ndarray, int, int]:
    """Alg. 3 on d-vectors: ḡ projected off each window group's conflicting old updates, oldest
    first; ``c`` (ḡ's coefficients over U) is updated in place. Returns (ḡ, conflicts found,
    projections made)."""
    found = made = 0
    for rows in groups:
        size = float(np.abs(c) @ norms)
        conflicting = [r for r in rows if _conflict(float(U[r] @ g_bar), norms[r] * size)]
        if not conflicting:
            continue
        found += len(conflicting)
        g_con = U[conflicting].sum(axis=0)
        dot = float(g_bar @ g_con)
        nn = float(g_con @ g_con)
        if dot < 0.0 and nn > 0.0:
            g_bar = g_bar - (dot / nn) * g_con
            c[conflicting] -= dot / nn
            made += 1
    return g_bar, found, made


def _gram(D, H, perm, kept, groups, backend, copy=None):
    """Algs. 2-3 in coefficient space over G = U Uᵀ. Returns what ``_vector`` does. ``copy``:
    an array that Numba's Gram kernel fills with D on its way (``backend="numba"``, m ≤
    ``kernels.cpu.GRAM_MAX_M``, float64 C-contiguous D)."""
    m, h = D.shape[0], H.shape[0]
    if backend == "cuda" and h:  # one kernel over U = [D; H] rather than three transfers
        G = gram(np.concatenate([D, H]), backend)
    else:
        G = np.empty((m + h, m + h))
        if copy is None:
            G[:m, :m] = gram(D, backend)  # one SYRK (or kernel): the round's Gram matrix
        else:  # the same kernel as gram(D, "numba"), copying D on its way
            G[:m, :m] = _cpu()._gram_and_copy(D, copy)
        if h:
            G[m:, :m] = H @ D.T
            G[:m, m:] = G[m:, :m].T
            G[m:, m:] = H @ H.T
    if not _in_range(np.diag(G), D, H):
        return None  # a non-finite update, or squared norms out of range
    norms = _norms(np.diag(G))
    Gd = G[:m, :m]
    diag = norms[:m] ** 2
    tol = RHO * np.outer(norms[:m], norms[:m])
    found = int(np.count_nonzero(np.triu((Gd < -tol) & (tol > 0.0), 1)))
    C = np.eye(m)
    active = ~kept & (norms[:m] > 0.0)
    size = norms[:m].copy()
    projections = _projections(
        np.ascontiguousarray(Gd), np.asarray(perm, dtype=np.int64), diag, norms[:m], active,
        RHO, C, size,
    )  # fmt: skip
    c = np.zeros(m + h)
    c[:m] = C.sum(axis=0) / m
    ext_found = ext_proj = 0
    for rows in groups:
        dots = G[rows] @ c
        tol = RHO * norms[rows] * float(np.abs(c) @ norms)
        hit = (dots < -tol) & (tol > 0.0)
        conflicting = rows[hit]
        if conflicting.size == 0:
            continue
        ext_found += int(conflicting.size)
        dot = float(dots[hit].sum())
        nn = float(G[np.ix_(conflicting, conflicting)].sum())
        if dot < 0.0 and nn > 0.0:
            c[conflicting] -= dot / nn
            ext_proj += 1
    # ḡ and the mean update as vectors, in one pass over the updates: their norms are taken on
    # the vectors, which keeps them accurate where ḡ has cancelled (cᵀGc would not).
    rows = np.zeros((2, m + h))
    rows[0] = c
    rows[1, :m] = 1.0 / m
    V = _combine(rows, D, H, backend)
    return c, C, (found, projections, ext_found, ext_proj), V[0], V[1], norms, G[:m] @ c


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _dots(C, g, out):  # pragma: no cover - compiled
    """out = C g (rows of C against g, reassociated so that each dot product vectorises)."""
    for i in range(C.shape[0]):
        Ci = C[i]
        acc = 0.0
        for k in range(Ci.size):
            acc += Ci[k] * g[k]
        out[i] = acc


@numba.njit(cache=True, nogil=True)
def _projections(Gd, perm, diag, norms, active, rho, C, size):  # pragma: no cover - compiled
    """Alg. 2 on coefficients: for each target j in ``perm``, every active g̃_i (i ≠ j, row i of
    ``C``) in conflict with δ_j is projected, C_ij −= (δ_j·g̃_i) / ‖δ_j‖². Returns the number of
    projections; ``C`` and ``size`` are updated in place.

    δ_j·g̃_i = (C G)_ij, G exactly symmetric so that row j of G is its column. ``size_i`` =
    Σ_l |C_il| ‖δ_l‖, the scale of g̃_i's round-off, is summed as ``_vector`` sums it: from
    ‖δ_i‖, adding each projection's |coefficient| · ‖δ_j‖ in the order of ``perm`` (each column
    j of C changes once, from 0), and the conflict test is ``_conflict``'s, associated the
    same way (no fast-math flags here: only the dot products are reassociated). Compiled: the
    NumPy loop over targets cost about 10 µs of interpreter a target (0.95 ms at m = 100, against
    0.07 ms here)."""
    m = Gd.shape[0]
    dots = np.empty(m)
    count = 0
    for jj in range(perm.size):
        j = perm[jj]
        if diag[j] == 0.0:
            continue
        _dots(C, Gd[j], dots)
        nj = norms[j]
        for i in range(m):
            if i != j and active[i] and dots[i] < -rho * (nj * size[i]):
                coef = dots[i] / diag[j]
                C[i, j] -= coef
                size[i] += abs(coef) * nj
                count += 1
    return count


def _combine(W: np.ndarray, D: np.ndarray, H: np.ndarray, backend: str) -> np.ndarray:
    """W @ [D; H] for a (2, m + h) W: one pass over the updates on ``"numba"`` and ``"cuda"``
    ([`fairagg.kernels.two_combinations`][fairagg.kernels.two_combinations]), the matrix product on
    ``"numpy"``."""
    m = D.shape[0]
    V = two_combinations(W[:, :m], D, backend)
    if H.shape[0]:
        V += W[:, m:] @ H
    return V


def _cpu():
    """``fairagg.kernels.cpu``, imported when the numba backend first needs it."""
    from ..kernels import cpu

    return cpu


def _first_next(t: int, tau: int, variant: str) -> int:
    """The first round of the next round's window (it may be empty)."""
    return (t + 1 - tau) if variant == "paper" else (t + 2 - tau)


class _Lease:
    """The owner, as NumPy sees it, of one array that ``_BufferPool.empty`` hands out: that array
    is made from this object's ``__array_interface__`` (so its ``base`` is this object), and every
    array derived from it (a slice, a reshape, a view of a view, ``np.frombuffer`` of its
    ``memoryview``) keeps it, or this object, alive: NumPy collapses a view's base only down to
    an array whose base is not an ndarray. ``buffer`` is the pooled memory."""

    __slots__ = ("__array_interface__", "__weakref__", "buffer")
    __array_interface__: dict[str, Any]
    buffer: np.ndarray


class _BufferPool:
    """Reuse of the large arrays a rule's states keep, once nothing can reach them any more.

    The rule API is functional: a caller may keep an old state and step it again, so memory a
    state holds is never written while that state, or any array derived from its arrays, is
    alive. ``empty`` hands out an array whose NumPy base is a fresh ``_Lease`` over a pooled
    1-D buffer; a ``weakref.finalize`` on the lease puts the buffer back when the lease is
    collected, which is after the last array that shares its memory (see ``_Lease``). At most
    ``keep`` free buffers are kept (more are freed), and a buffer serves a request of n items
    only if it holds between n and 2n. Arrays below ``min_bytes`` come from ``np.empty``.

    Why: a fresh (m, d) array for each step's history is memory the system maps and zeroes
    again at its first write (NumPy's large allocations are mapped and returned on free). At
    m = 100, d = 10⁵ on two threads (the shared 2-core host) the step's Gram pass took 39 ms
    into fresh memory and 26 ms into memory written before, in a 45 ms step.
    """

    def __init__(self, keep: int = 2, min_bytes: int = 1 << 20) -> None:
        self.keep = keep
        self.min_bytes = min_bytes
        self._free: list[np.ndarray] = []
        self._lock = threading.RLock()  # a finalizer may run in any thread, or inside ``empty``

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype``, writeable; from
        ``min_bytes`` on, it starts on a 64-byte boundary (a cache line: the Numba Gram pass then
        writes whole lines of it)."""
        dt = np.dtype(dtype)
        n = math.prod(shape)
        if n * dt.itemsize < self.min_bytes:
            return np.empty(shape, dt)
        size = n + 64 // dt.itemsize  # room to start on a 64-byte boundary
        buf = None
        with self._lock:
            fits = [
                (b.size, i)
                for i, b in enumerate(self._free)
                if b.dtype == dt and size <= b.size <= 2 * size
            ]
            if fits:
                buf = self._free.pop(min(fits)[1])
        if buf is None:
            buf = np.empty(size, dt)
        lease = _Lease()
        lease.buffer = buf
        lease.__array_interface__ = {
            "shape": tuple(shape),
            "typestr": dt.str,
            "data": (buf.ctypes.data + (-buf.ctypes.data % 64), False),
            "version": 3,
        }
        out = np.asarray(lease)
        done = weakref.finalize(lease, self._put_back, buf)
        done.atexit = False
        return out

    def _put_back(self, buf: np.ndarray) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(buf)


def _history_rows(
    history: FedFVHistory,
    D: np.ndarray,
    t: int,
    tau: int,
    variant: str,
    pool: _BufferPool | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """An uninitialised array for the updates of ``_next_history``'s result, and its rows for this
    round's updates (None where they are not kept). New memory, or from ``pool`` memory that
    nothing can reach any more: a state a caller holds is never written again."""
    first_next = _first_next(t, tau, variant)
    kept = int(np.count_nonzero(history.rounds >= first_next))
    here = t >= first_next
    shape = (kept + (D.shape[0] if here else 0), D.shape[1])
    dtype = history.updates.dtype
    updates = np.empty(shape, dtype) if pool is None else pool.empty(shape, dtype)
    return updates, (updates[kept:] if here else None)


def _next_history(
    history: FedFVHistory,
    D: np.ndarray,
    ids: np.ndarray,
    t: int,
    tau: int,
    variant: str,
    updates: np.ndarray | None = None,
    copied: bool = False,
) -> FedFVHistory:
    """The history a later round's window can reach: ``history`` (which holds none of this
    round's clients) and this round's updates, kept from the next window's first round on.
    ``updates``: the array from ``_history_rows`` to fill, its rows of this round already
    written where ``copied``."""
    first_next = _first_next(t, tau, variant)
    keep = np.flatnonzero(history.rounds >= first_next)
    rounds = [history.rounds[keep]]
    who = [history.client_ids[keep]]
    here = t >= first_next  # this round's updates stay reachable
    if here:
        rounds.append(np.full(ids.size, t, dtype=np.int64))
        who.append(ids)
    # one copy of each kept row, written where it ends up (a round's updates are the largest
    # array a step touches: copied twice, by np.array and np.concatenate, they cost the step
    # as much as its Gram matrix; the numba step writes them in its Gram pass)
    if updates is None:
        updates = _history_rows(history, D, t, tau, variant)[0]
    np.take(history.updates, keep, axis=0, out=updates[: keep.size])
    if here and not copied:
        updates[keep.size :] = D
    new = FedFVHistory(updates, np.concatenate(rounds), np.concatenate(who))
    for a in new:
        a.flags.writeable = False
    return new


def fedfv(
    *,
    alpha: float = 0.1,
    tau: int = 1,
    order: str = "loss",
    variant: str = "paper",
    seed: int = 0,
    method: str = "gram",
    rescale: bool = True,
    backend: str = "numpy",
) -> Rule:
    """FedFV as a rule (Algs. 1-3; SPEC §7; see the module docstring).

    Parameters
    ----------
    alpha : float
        α ∈ [0, 1] (default 0.1, the public code's): the high-loss fraction that keeps its update.
    tau : int
        τ ≥ 0 (default 1, the public code's): the window of earlier rounds whose latest updates
        are protected from conflict; 0 turns external mitigation off.
    order : {"loss", "reverse", "random"}
        Projection order; ``"random"`` is seeded by ``(seed, t)``.
    variant : {"paper", "flgo"}
        Window t−τ..t−1 from round t = τ on (paper), or t−τ+1..t from round t = τ − 1 on (the
        public code, which counts rounds from 1); t counts from 0.
    seed : int
        Seed of the random order.
    method : {"gram", "vector"}
        Coefficient space on the Gram matrix (default) or the direct vector version.
    rescale : bool
        Alg. 1's rescaling to the mean update's length (default); False steps by ḡ itself, the
        update analysed by Theorems 3 and 4.
    backend : {"numpy", "numba", "cuda"}
        Backend of the Gram path's passes over the updates (see
        [`fedfv_direction`][fairagg.rules.fedfv.fedfv_direction]); ``"numba"`` is the fastest on a
        CPU.

    Notes
    -----
    ``info``: ``"weights"`` a_k on the round's δ_k, ``"history_weights"`` and
    ``"history_clients"`` for the window's earlier updates (θ^{t+1} = θ^t − Σ a_k δ_k −
    Σ b_h h_h), ``"coefficients"`` (m, m), ``"order"``, ``"kept"``, ``"conflicts_found"``,
    ``"projections"``, ``"external_conflicts"``, ``"external_projections"``,
    ``"conflicts_remaining"``. The state keeps the latest update of every client a later window
    can reach (none when τ = 0).

    References
    ----------
    .. [1] Z. Wang, X. Fan, J. Qi, C. Wen, C. Wang, R. Yu, "Federated Learning with Fair Averaging",
       IJCAI 2021.
    .. [2] The fairagg Specification: [SPEC §7 FedFV][spec-7],
       [SPEC §0 What a selected client reports][spec-0].
    """
    a = check_real(alpha, "alpha", low=0.0, high=1.0)
    tau = check_int(tau, "tau", low=0)
    check_choice(order, "order", FEDFV_ORDERS)
    check_choice(variant, "variant", FEDFV_VARIANTS)
    check_choice(method, "method", FEDFV_METHODS)
    _check_method_backend(method, backend)
    seed = check_int(seed, "seed", low=0)
    if not isinstance(rescale, (bool, np.bool_)):
        raise TypeError(f"rescale must be a bool; got {type(rescale).__name__}")
    needs = () if order == "random" else ("losses",)
    pool = _BufferPool()  # the states' history arrays, reused once unreachable

    def init(params: np.ndarray, num_clients: int) -> FedFVState:
        theta = as_float_array(params, "params", ndim=1, finite=False)
        K = check_count(num_clients, "num_clients", low=1)
        empty = FedFVHistory(
            np.zeros((0, theta.shape[0])), np.zeros(0, dtype=np.int64), np.zeros(0, np.int64)
        )
        return FedFVState(K, 0, empty)

    def step(params: np.ndarray, reports: RoundReports, state: FedFVState) -> Aggregate:
        check_state(state, FedFVState, "fedfv")
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_reports(reports, theta, needs=needs)
        assert reports.deltas is not None  # check_reports raised otherwise (needs no gradients)
        ids = client_indices(reports, state.num_clients)
        t = state.rounds
        # A client of this round has this round's update as its latest: drop its older one.
        others = ~np.isin(state.history.client_ids, ids)
        past = state.history
        if not others.all():
            past = FedFVHistory(*(a[others] for a in state.history))
        # the next state's history, whose rows for this round the direction writes (the
        # numba backend in its Gram pass, which reads the updates anyway)
        updates, slot = _history_rows(past, reports.deltas, t, tau, variant, pool)
        args = (reports.deltas, reports.losses, a, order, seed, t, past, tau, variant, method)
        res = _dispatch(args, ids, bool(rescale), backend, slot)
        check_finite(theta, "params")
        with np.errstate(over="ignore", invalid="ignore"):
            new = np.subtract(theta, res.direction, dtype=np.result_type(theta, reports.deltas))
        if not np.all(np.isfinite(new)):
            raise ValueError(
                "params minus the FedFV step overflows float64 (both are near 1.8e308 in magnitude)"
            )
        history = _next_history(past, reports.deltas, ids, t, tau, variant, updates, True)
        info = {
            "weights": res.weights,
            "history_weights": res.history_weights,
            "history_clients": past.client_ids,
            "coefficients": res.coefficients,
            "order": res.order,
            "kept": res.kept,
            "conflicts_found": res.conflicts_found,
            "projections": res.projections,
            "external_conflicts": res.external_conflicts,
            "external_projections": res.external_projections,
            "conflicts_remaining": res.conflicts_remaining,
        }
        return Aggregate(new, FedFVState(state.num_clients, t + 1, history), info)

    hyper = {"alpha": a, "tau": tau, "order": order, "variant": variant, "seed": seed}
    extra = {"method": method, "rescale": bool(rescale), "backend": backend}
    return Rule("fedfv", init, step, {**hyper, **extra})
