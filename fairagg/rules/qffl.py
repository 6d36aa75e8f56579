"""q-FFL: the objective and the server steps of q-FedAvg and q-FedSGD (Li et al. 2020, eq. 2,
Algs. 1 and 3, Lemma 12; SPEC §2).

Registry rules: [`qfedavg`][fairagg.rules.qffl.qfedavg] (``"qfedavg"``) and
[`qfedsgd`][fairagg.rules.qffl.qfedsgd] (``"qfedsgd"``, whose clients report full-batch gradients).
Formula functions (plain arrays in, arrays out):

- [`qffl_objective`][fairagg.rules.qffl.qffl_objective]: f_q(w) = Σ_k p_k F_k(w)^{q+1}/(q+1);
- [`qfedavg_step`][fairagg.rules.qffl.qfedavg_step]: Alg. 1's server update from the clients'
  displacements δ_k = θ^t − θ_k;
- [`qfedsgd_step`][fairagg.rules.qffl.qfedsgd_step]: Alg. 3's, from full-batch gradients ∇F_k(θ^t);
- [`lipschitz_q`][fairagg.rules.qffl.lipschitz_q]: Lemma 12's L_q(w) = L f^q + q f^{q−1} ‖∇f‖².

Conventions (SPEC §2): L = 1/lr; F̃_k = F_k(θ^t) + ε with ε = 1e-10 by default; norms are over the
whole flattened parameter vector; the sums over the selected clients carry **no** n_k weights, so
q = 0 gives the unweighted mean of the client models.

Alg. 1's Δw_k. The paper's Alg. 1, line 6 writes Δw_k = w^t − w̄_k^{t+1} = δ_k, with L only in
h_k's L F_k^q. fairagg follows SPEC §2 and both public codes (the q-FFL authors' and FLGo's),
which use Δw_k = L·δ_k, the local update read as an estimate of the gradient times the step 1/L
(the paper's own derivation: "we replace the gradient of the local functions, ∇F_k, in the
q-FedSGD steps with the local update vectors"). The two differ whenever lr ≠ 1: the literal text
is [`qfedavg_step`][fairagg.rules.qffl.qfedavg_step] with ``lr=1`` on the same δ_k and L in h_k
only, which fairagg does not offer as a variant.

Every scale. Δ_k = F̃_k^q Δw_k and h_k = q F̃_k^{q−1}‖Δw_k‖² + L F̃_k^q share the factor F̃_k^q,
and the step Σ Δ_k / Σ h_k is unchanged when every F̃_k^q is divided by the largest one:
u_k = (F̃_k / max_j F̃_j)^q, so a large q (the AFL limit) never overflows. The plain computation
is used where every squared norm lies in [2^-968, 2^1000] and no u_k is below 2^-968; elsewhere
(updates near 1e±154 and beyond, lr far from 1, losses spanning hundreds of decades) the step
is computed in scaled form, each ‖δ_k‖² from its row divided by a power of two and Σ h_k as a
mantissa and a binary exponent, so the step is exact to rounding wherever it is representable,
and a ValueError where it is not. Only the reported Σ h_k, max F̃^q times the rest, may be +inf.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from .._checks import SQ_LOW, as_float_array, check_int, check_real, squares_in_range
from ..kernels import check_backend, weighted_sum, weighted_sum_sq_norms
from ..types import Aggregate, EmptyState, LocalSpec, RoundReports, Rule, check_reports

__all__ = [
    "QStep",
    "lipschitz_q",
    "qfedavg",
    "qfedavg_step",
    "qfedsgd",
    "qfedsgd_step",
    "qffl_objective",
]

#: SPEC §2: F̃_k = F_k + ε keeps F̃^{q−1} finite for a client with zero loss.
DEFAULT_EPSILON = 1e-10


class QStep(NamedTuple):
    """A q-FedAvg / q-FedSGD server step.

    Attributes
    ----------
    params : ndarray, shape (d,)
        θ^{t+1} = θ^t − Σ_k Δ_k / Σ_k h_k.
    h_sum : float
        Σ_k h_k (Alg. 1's step denominator; +inf where it exceeds float64, the step itself being
        computed in scaled form).
    weights : ndarray, shape (m,)
        The weight of each client's Δw_k in the step, F̃_k^q / Σ_j h_j (they need not sum to 1).
    """

    params: np.ndarray
    h_sum: float
    weights: np.ndarray


def _check_q(q: float) -> float:
    return check_real(q, "q", low=0.0)


def _check_losses(losses: Any, m: int) -> np.ndarray:
    F = as_float_array(losses, "losses", shape=(m,), dtype=np.float64, allow_int=True)
    if F.size and F.min() < 0:
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    return F


def qffl_objective(losses: Any, q: float, weights: Any = None) -> float:
    """f_q = Σ_k p_k F_k^{q+1}/(q+1) (q-FFL eq. 2) for the losses F_k(w) of one model.

    ``weights`` p_k default to uniform 1/m (pass n_k/n for the paper's sample-size weights); they
    must be non-negative and are normalised to sum to 1. q = 0 gives the weighted mean loss.

    Computed as F*^(q+1) Σ_k p_k (F_k/F*)^(q+1)/(q+1) with F* the largest loss among the
    clients of positive weight (a client of weight 0 adds nothing, and its loss must not set
    the scale that the others are divided by), and F*^(q+1) split into a power of two and a
    factor in float64's range where it leaves that range, so that no power over- or
    underflows on the way: the value is right to a few ulps wherever it is representable
    (losses of 1.5e154 with q = 1 give 1.1e308), and a value beyond float64's range is a
    ValueError.
    """
    F = as_float_array(losses, "losses", ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    if F.min() < 0:
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    qv = _check_q(q)
    if weights is None:
        p = np.full(F.size, 1.0 / F.size)
    else:
        p = as_float_array(weights, "weights", shape=(F.size,), dtype=np.float64, allow_int=True)
        if p.min() < 0 or not p.sum() > 0:
            raise ValueError("weights must be non-negative with a positive sum")
        p = p / p.sum()
    top = float(F[p > 0].max())
    if top == 0.0:
        return 0.0
    with np.errstate(under="ignore"):  # ratios far below 1 vanish next to the top term's 1
        S = float(p @ ((np.minimum(F, top) / top) ** (qv + 1.0))) / (qv + 1.0)
    with np.errstate(over="ignore", under="ignore"):
        top_q = float(np.float64(top) ** (qv + 1.0))
    if math.isfinite(top_q) and top_q >= np.finfo(np.float64).tiny:
        value = S * top_q
    else:
        # top^(q+1) leaves float64's range: top^(q+1) = 2^x with x = (q+1) log2 top. With
        # top = t 2^k (t ∈ [1/2, 1)), x = k (q+1) + (q+1) log2 t: the first part exactly (a
        # Fraction), the second in float64 (|(q+1) log2 t| ≤ q+1, so its error is a few ulps
        # of q+1, the conditioning of top^(q+1) in top itself); then 2^x = 2^f 2^n with n the
        # integer part. A plain log form 2^((q+1) log2 top) loses |x| ulps (up to ~1000).
        t, k = math.frexp(top)
        x = Fraction(k) * Fraction(qv + 1.0) + Fraction((qv + 1.0) * math.log2(t))
        n = math.floor(x)
        mant = S * 2.0 ** float(x - n)  # S ∈ (0, 1], 2^f ∈ [1, 2)
        with np.errstate(over="ignore", under="ignore"):
            value = float(np.ldexp(mant, int(np.clip(n, -4000, 4000))))
    if not math.isfinite(value):
        raise ValueError(
            f"the q-FFL objective overflows float64 (q = {qv}, largest loss {top:.3g}): "
            "f_q = Σ p_k F_k^(q+1)/(q+1) exceeds about 1.8e308"
        )
    return value


def _directions(params: Any, updates: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    theta = as_float_array(params, "params", ndim=1, dtype=np.float64)
    D = as_float_array(updates, name, ndim=2, dtype=np.float64, min_size=1)
    if D.shape[1] != theta.size:
        raise ValueError(f"{name} must have shape (m, {theta.size}) to match params")
    return theta, D


def _q_step(
    theta: np.ndarray,
    D: np.ndarray,
    losses: Any,
    q: float,
    L: float,
    eps: float,
    static: bool,
    scale: float = 1.0,
    backend: str = "numpy",
) -> QStep:
    """θ − Σ_k Δ_k / Σ_k h_k with Δw_k = ``scale`` × the rows of D (validated); the scaled
    (m, d) matrix itself is never formed. ``backend="numpy"`` is the reference; the others read
    D once for both the norms in h_k and the weighted sum (the sum's direction, Σ_k u_k δ_k, does
    not depend on the norms, only its scale does)."""
    m = D.shape[0]
    F = _check_losses(losses, m)
    Ft = F + eps
    if q > 0 and Ft.min() <= 0:
        raise ValueError(
            "losses + epsilon must be positive for q > 0 (F̃^(q-1) is undefined at 0); "
            "keep epsilon > 0 or pass positive losses"
        )
    if static:
        # h_k = L: θ − Σ_k F̃_k^q g_k / (m L), a fixed step lr on the gradient of the unweighted
        # objective (1/m) Σ F_k^{q+1}/(q+1). No common factor cancels here.
        with np.errstate(over="ignore"):
            Fq = np.ones(m) if q == 0 else Ft**q
        if not np.all(np.isfinite(Fq)):
            raise ValueError(
                f"losses^q overflows float64 (q = {q}, largest loss {F.max()}); with "
                "static_step=True the step is lr times F̃^q-weighted gradients: lower q"
            )
        w = Fq / (m * L)
        step = _scaled_weighted_sum(scale * w, D, backend)
        return QStep(_subtract(theta, step), m * L, w)
    # u_k = F̃_k^q / max_j F̃_j^q = (F̃_k / max_j F̃_j)^q (relative error about q·eps; the log
    # form exp(q log F̃_k − log max F̃^q) errs by eps·|log|, up to 700 eps), exactly 1 when q = 0
    # (0^0 = 1 for a zero loss). A ratio that underflows leaves the plain path (see _in_range).
    log_max = 0.0 if q == 0 else q * float(np.log(Ft).max())  # log max_j F̃_j^q
    with np.errstate(under="ignore"):
        u = np.ones(m) if q == 0 else (Ft / Ft.max()) ** q
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if backend == "numpy":
            sq_raw = np.einsum("ij,ij->i", D, D)  # ‖δ_k‖² over the flattened vector
        else:
            direction, sq_raw = weighted_sum_sq_norms(u, D, backend)  # one pass over D
        sq = scale * scale * sq_raw
        h_rel = np.full(m, L) if q == 0 else q * sq / Ft + L
        denom = float(u @ h_rel)
    if q == 0 or (u.min() >= SQ_LOW and _in_range(sq_raw, D, h_rel, denom)):
        w = u / denom
        with np.errstate(over="ignore", invalid="ignore"):
            step = (scale * w) @ D if backend == "numpy" else direction * (scale / denom)
        if np.all(np.isfinite(step)):
            # Σ h_k = max_j F̃_j^q · Σ_k u_k h_rel_k (+inf only where it exceeds float64)
            return QStep(_subtract(theta, step), _h_sum(denom, 0, log_max), w)
    # Where a ratio underflowed, u_k in log form keeps the digits its q u_k / F̃_k may need:
    # q (log F̃_k − max_j log F̃_j), exactly 0 for the largest loss at any q (q log F̃_k − log_max
    # would cancel two numbers near 1e308 at a huge q).
    logF = np.log(Ft)
    with np.errstate(under="ignore"):
        u = np.exp(q * (logF - logF.max()))
    return _q_step_scaled(theta, D, Ft, u, log_max, q, L, scale, backend)


_LN2 = math.log(2.0)


def _in_range(sq: np.ndarray, D: np.ndarray, h_rel: np.ndarray, denom: float) -> bool:
    """The plain computation is exact to rounding: the squared norms are (see
    ``fairagg._checks.squares_in_range``) and the denominator is finite and positive."""
    if not (np.all(np.isfinite(h_rel)) and math.isfinite(denom) and denom > 0):
        return False
    return squares_in_range(sq, lambda idx: D[idx])


def _scaled_sum(values: np.ndarray, exps: np.ndarray) -> tuple[float, int]:
    """Σ_k values_k 2^exps_k (values ≥ 0) as (mantissa, exponent): neither the terms nor the sum
    over- or underflow, and terms below 2^-1074 of the largest vanish as they would in an exact
    sum rounded to float64."""
    keep = values > 0
    if not keep.any():
        return 0.0, 0
    mant, e = np.frexp(values[keep])
    tot = e.astype(np.int64) + exps[keep]
    top = int(tot.max())
    return float(np.ldexp(mant, (tot - top).astype(np.int32)).sum()), top


def _ldexp(x: Any, e: int) -> Any:
    """x · 2^e without an exception: ±inf where it overflows, (sub)normal rounding below."""
    e = int(np.clip(e, -4000, 4000))
    with np.errstate(over="ignore", under="ignore"):
        return np.ldexp(x, e)


def _q_step_scaled(
    theta: np.ndarray,
    D: np.ndarray,
    Ft: np.ndarray,
    u: np.ndarray,
    log_max: float,
    q: float,
    L: float,
    scale: float,
    backend: str,
) -> QStep:
    """The q-FedAvg / q-FedSGD step where norms or sums leave float64's range (updates near
    1e±154 and beyond, lr far from 1, losses near 0 or 1e308), exact to rounding: each
    ‖δ_k‖² = ‖δ_k 2^-e_k‖² 2^(2 e_k) from the row scaled by its largest entry's power of two,
    each coefficient q F̃_k^(q-1) / max_j F̃_j^q in log form, Σ h_k as a (mantissa, exponent)
    pair, and the step x Σ_k u_k δ_k / Σ_k h_k with Σ_k u_k δ_k over the updates scaled by one
    power of two and x = ``scale`` formed with ldexp, so that nothing overflows before the
    result and nothing underflows that the result keeps."""
    m = D.shape[0]
    row_max = np.max(np.abs(D), axis=1)
    e = np.frexp(row_max)[1].astype(np.int64)  # row_max = f 2^e, f ∈ [1/2, 1); 0 for a 0 row
    R = np.ldexp(D, -e[:, None].astype(np.int32))  # each row's largest entry in [1/2, 1)
    sq_rows = np.einsum("ij,ij->i", R, R)
    ms, es = math.frexp(scale)  # x = ms 2^es
    # h_k = q F̃_k^(q-1) x² ‖δ_k‖² + L F̃_k^q, divided by max_j F̃_j^q: the first terms carry the
    # factor x² 2^(2 e_k), the last is L u_k (exponent 0).
    if q == 0:
        coef = np.zeros(m)
        coef_exp = np.zeros(m, dtype=np.int64)
    else:
        logF = np.log(Ft)
        log_c = math.log(q) - logF + q * (logF - logF.max())  # log(q u_k / F̃_k)
        # Below e^-7000 a term is under 2^-5900 after its largest factors x² 2^(2 e_k)
        # (≤ 2^4200), and the sum holds u_k L ≥ 2^-1023 for the largest loss: it vanishes.
        tiny = log_c < -7000.0
        log_c = np.where(tiny, 0.0, log_c)
        coef_exp = np.floor(log_c / _LN2).astype(np.int64)
        coef = np.where(tiny, 0.0, np.exp(log_c - coef_exp * _LN2))  # in [1, 2), or 0
    terms = np.concatenate([coef * sq_rows * ms * ms, u * L])
    exps = np.concatenate([coef_exp + 2 * e + 2 * es, np.zeros(m, dtype=np.int64)])
    dm, E = _scaled_sum(terms, exps)  # Σ_k u_k h_rel_k = dm 2^E
    # One power of two per column, that of its largest entry (exact; entries ≤ 1 in magnitude):
    # a column whose entries lie more than 1074 binades below another column's keeps its bits,
    # which one scale for the whole matrix would flush to 0 (a zero column keeps exponent 0).
    top = np.frexp(np.max(np.abs(D), axis=0))[1].astype(np.int64)
    U = np.ldexp(D, -top[None, :].astype(np.int32))
    V = weighted_sum(u, U, backend)  # Σ_k u_k δ_kj 2^-top_j
    with np.errstate(over="ignore", under="ignore"):
        step = np.ldexp(
            np.asarray(V, dtype=np.float64) * (ms / dm),
            np.clip(es + top - E, -4000, 4000).astype(np.int32),
        )
    if not np.all(np.isfinite(step)):
        raise ValueError(
            "the q-FFL step overflows float64 for these deltas (or grads) and lr: its entries "
            "exceed about 1.8e308"
        )
    w = _ldexp(u / dm, -E)
    return QStep(_subtract(theta, step), _h_sum(dm, E, log_max), w)


def _h_sum(mant: float, exp: int, log_max: float) -> float:
    """Σ h_k = mant 2^exp · e^log_max (log_max = log max_j F̃_j^q), +inf where it exceeds
    float64: e^log_max split into e^(log_max − n ln 2) 2^n so that neither factor overflows
    before the product does."""
    if not math.isfinite(log_max) or log_max > 4000.0:
        return math.inf  # Σ h_k ≥ max_j F̃_j^q exceeds float64 (the step does not)
    n = math.floor(log_max / _LN2)
    return float(_ldexp(mant * math.exp(log_max - n * _LN2), exp + n))


def _scaled_weighted_sum(w: np.ndarray, D: np.ndarray, backend: str) -> np.ndarray:
    """Σ_k w_k D_k, exact to rounding where the result is representable: where the plain sum
    overflows in a partial sum (or underflows to subnormals), it is taken over D scaled by one
    power of two per column and scaled back; a result beyond float64 is a ValueError."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(weighted_sum(w, D, backend), dtype=np.float64)
    big = float(np.max(np.abs(out))) if out.size else 0.0
    if np.all(np.isfinite(out)) and (big == 0.0 or big >= 2.0**-968):
        return out
    # One power of two per column (entries far below another column's largest keep their bits).
    top = np.frexp(np.max(np.abs(D), axis=0))[1].astype(np.int64)
    ww, ew = np.frexp(w)
    tw = int(ew[w != 0].max()) if np.any(w != 0) else 0  # a zero weight's exponent 0 is no scale
    V = weighted_sum(
        np.ldexp(ww, (ew - tw).astype(np.int32)),
        np.ldexp(D, -top[None, :].astype(np.int32)),
        backend,
    )
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(
            np.asarray(V, dtype=np.float64), np.clip(top + tw, -4000, 4000).astype(np.int32)
        )
    if not np.all(np.isfinite(out)):
        raise ValueError(
            "the step overflows float64 for these grads, losses and lr: its entries exceed "
            "about 1.8e308"
        )
    return out


def _subtract(theta: np.ndarray, step: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        new = theta - step
    if not np.all(np.isfinite(new)):
        raise ValueError(
            "params minus the step overflows float64 (both are near 1.8e308 in magnitude)"
        )
    return new


def qfedavg_step(
    params: Any,
    deltas: Any,
    losses: Any,
    q: float,
    lr: float,
    epsilon: float = DEFAULT_EPSILON,
    *,
    backend: str = "numpy",
) -> QStep:
    """q-FedAvg's server update (q-FFL Alg. 1; SPEC §2).

    With L = 1/lr, Δw_k = L δ_k (δ_k = θ^t − θ_k, SPEC §0; the public codes' reading of Alg. 1,
    whose text has Δw_k = δ_k: the two differ whenever lr ≠ 1, see the module docstring),
    F̃_k = F_k(θ^t) + ε:
    Δ_k = F̃_k^q Δw_k, h_k = q F̃_k^{q−1}‖Δw_k‖² + L F̃_k^q, θ^{t+1} = θ^t − Σ_k Δ_k / Σ_k h_k.
    q = 0 gives the unweighted mean of the client models θ_k.

    Parameters
    ----------
    params : array_like, shape (d,)
        θ^t.
    deltas : array_like, shape (m, d)
        δ_k of the selected clients.
    losses : array_like, shape (m,)
        F_k(θ^t), the received model's loss before local training; non-negative.
    q : float
        q ≥ 0.
    lr : float
        The clients' local learning rate; L = 1/lr.
    epsilon : float
        ε ≥ 0 (losses + ε must be positive when q > 0).
    backend : {"numpy", "numba", "cuda"}
        ``"numpy"`` is the reference; the others compute the norms and the weighted sum in one
        pass over ``deltas``
        ([`fairagg.kernels.weighted_sum_sq_norms`][fairagg.kernels.weighted_sum_sq_norms]).

    Returns
    -------
    QStep
        ``weights`` w_k with θ^{t+1} = θ^t − Σ_k w_k Δw_k (so the weight on δ_k is L·w_k).
    """
    qv = _check_q(q)
    L = 1.0 / check_real(lr, "lr", low=0.0, low_open=True)
    eps = check_real(epsilon, "epsilon", low=0.0)
    check_backend(backend)
    return _qfedavg_with_l(params, deltas, losses, qv, L, eps, backend)


def _qfedavg_with_l(
    params: Any, deltas: Any, losses: Any, q: float, L: float, eps: float, backend: str
) -> QStep:
    """[`qfedavg_step`][fairagg.rules.qffl.qfedavg_step] given L itself (q, L, ε and the backend
    checked): the rule passes its L on as it is, never through lr = 1/L and back."""
    theta, D = _directions(params, deltas, "deltas")
    return _q_step(theta, D, losses, q, L, eps, static=False, scale=L, backend=backend)


def qfedsgd_step(
    params: Any,
    grads: Any,
    losses: Any,
    q: float,
    lr: float,
    epsilon: float = DEFAULT_EPSILON,
    static_step: bool = False,
    *,
    backend: str = "numpy",
) -> QStep:
    """q-FedSGD's server update (q-FFL Alg. 3; SPEC §2): q-FedAvg with Δw_k replaced by the
    full-batch gradient ∇F_k(θ^t). q = 0 is the gradient step θ^t − lr · mean_k ∇F_k.

    ``static_step=True`` sets h_k = L (SPEC §2): θ^{t+1} = θ^t − lr · (1/m) Σ_k F̃_k^q ∇F_k, the
    fixed-step FedSGD on the q-FFL objective that the paper compares q-FedSGD's dynamic step
    with (its Fig. 3, "FedSGD with a best-tuned step-size"). F̃^q is not rescaled there: a
    ValueError reports an overflow. ``backend`` as in
    [`qfedavg_step`][fairagg.rules.qffl.qfedavg_step].
    """
    qv = _check_q(q)
    L = 1.0 / check_real(lr, "lr", low=0.0, low_open=True)
    eps = check_real(epsilon, "epsilon", low=0.0)
    if not isinstance(static_step, (bool, np.bool_)):
        raise TypeError(f"static_step must be a bool; got {type(static_step).__name__}")
    check_backend(backend)
    return _qfedsgd_with_l(params, grads, losses, qv, L, eps, bool(static_step), backend)


def _qfedsgd_with_l(
    params: Any,
    grads: Any,
    losses: Any,
    q: float,
    L: float,
    eps: float,
    static: bool,
    backend: str,
) -> QStep:
    """[`qfedsgd_step`][fairagg.rules.qffl.qfedsgd_step] given L itself (checked), as
    ``_qfedavg_with_l``."""
    theta, G = _directions(params, grads, "grads")
    return _q_step(theta, G, losses, q, L, eps, static=static, backend=backend)


def lipschitz_q(loss: float, grad_norm_sq: float, L: float, q: float) -> float:
    """Lemma 12: L_q(w) = L f(w)^q + q f(w)^{q−1} ‖∇f(w)‖², an upper bound on the Lipschitz
    constant of ∇(f^{q+1}/(q+1)) near w when ∇f is L-Lipschitz and f ≥ 0.

    ``loss`` f(w) ≥ 0 (> 0 when 0 < q < 1), ``grad_norm_sq`` ‖∇f(w)‖² ≥ 0, ``L`` > 0, q ≥ 0.
    """
    f = check_real(loss, "loss", low=0.0)
    g2 = check_real(grad_norm_sq, "grad_norm_sq", low=0.0)
    Lv = check_real(L, "L", low=0.0, low_open=True)
    qv = _check_q(q)
    if qv == 0:
        return Lv
    if f == 0 and qv < 1:
        raise ValueError("loss must be positive for 0 < q < 1 (f^(q-1) is undefined at 0)")
    return Lv * f**qv + qv * f ** (qv - 1.0) * g2


# --------------------------------------------------------------------------------------------
# Registry rules
# --------------------------------------------------------------------------------------------


def _lipschitz_of(lipschitz: float | None, reports: RoundReports, name: str) -> float:
    """L: the rule's ``lipschitz`` if given, else 1/reports.lr (SPEC §2: L = 1/lr), computed
    once here and passed on as L."""
    if lipschitz is not None:
        return lipschitz
    if reports.lr is None:
        raise ValueError(
            f"{name} needs L = 1/lr: build it with lipschitz=L, or pass reports with lr set "
            "(fairagg.simulate does)"
        )
    return 1.0 / check_real(reports.lr, "lr", low=0.0, low_open=True)


def _check_rule_hyper(
    q: float, lipschitz: float | None, epsilon: float
) -> tuple[float, float | None, float]:
    qv = _check_q(q)
    L = None if lipschitz is None else check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    return qv, L, check_real(epsilon, "epsilon", low=0.0)


def qfedavg(
    *,
    q: float = 1.0,
    lipschitz: float | None = None,
    epsilon: float = DEFAULT_EPSILON,
    backend: str = "numpy",
) -> Rule:
    """q-FedAvg (q-FFL Alg. 1; SPEC §2) as a rule: [`qfedavg_step`][fairagg.rules.qffl.qfedavg_step]
    on the round's reports.

    Parameters
    ----------
    q : float
        q ≥ 0; q = 0 is the unweighted mean of the client models.
    lipschitz : float, optional
        L > 0. Default 1/lr with lr the clients' learning rate of the round (``reports.lr``),
        as in the paper and its public code.
    epsilon : float
        ε ≥ 0 added to the losses.
    backend : {"numpy", "numba", "cuda"}
        Backend of the fused norms-and-sum reduction
        ([`qfedavg_step`][fairagg.rules.qffl.qfedavg_step]).

    Notes
    -----
    ``info``: ``"weights"`` the weight L·w_k on each δ_k (θ^{t+1} = θ^t − Σ_k weights_k δ_k),
    ``"h_sum"`` Σ_k h_k. The result has the dtype of ``params``.

    References
    ----------
    .. [1] T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated
       Learning", ICLR 2020.
    .. [2] The fairagg Specification: [SPEC §2 q-FFL][spec-2],
       [SPEC §0 What a selected client reports][spec-0].
    """
    qv, L0, eps = _check_rule_hyper(q, lipschitz, epsilon)
    check_backend(backend)

    def init(params: np.ndarray, num_clients: int) -> EmptyState:
        del params, num_clients
        return EmptyState()

    def step(params: np.ndarray, reports: RoundReports, state: EmptyState) -> Aggregate:
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_reports(reports, theta, needs=("losses",))
        L = _lipschitz_of(L0, reports, "qfedavg")
        res = _qfedavg_with_l(theta, reports.deltas, reports.losses, qv, L, eps, backend)
        info = {"weights": L * res.weights, "h_sum": res.h_sum}
        return Aggregate(res.params.astype(theta.dtype, copy=False), state, info)

    hyper = {"q": qv, "lipschitz": L0, "epsilon": eps, "backend": backend}
    return Rule("qfedavg", init, step, hyper)


def qfedsgd(
    *,
    q: float = 1.0,
    lipschitz: float | None = None,
    epsilon: float = DEFAULT_EPSILON,
    static_step: bool = False,
    batch_size: int | None = None,
    backend: str = "numpy",
) -> Rule:
    """q-FedSGD (q-FFL Alg. 3; SPEC §2) as a rule: [`qfedsgd_step`][fairagg.rules.qffl.qfedsgd_step]
    on the clients' gradients ∇F_k(θ^t).

    Parameters
    ----------
    q, lipschitz, epsilon
        As in [`qfedavg`][fairagg.rules.qffl.qfedavg]; L defaults to 1/lr with lr the simulation's
        learning rate.
    static_step : bool
        h_k = L: fixed-step FedSGD on the q-FFL objective (the paper's tuned-FedSGD baseline).
    batch_size : int, optional
        Gradients on one minibatch of this size per client (None: full batch, as in the paper).
    backend : {"numpy", "numba", "cuda"}
        As in [`qfedavg`][fairagg.rules.qffl.qfedavg].

    Notes
    -----
    ``info``: ``"weights"`` w_k with θ^{t+1} = θ^t − Σ_k w_k ∇F_k, ``"h_sum"`` Σ_k h_k.

    References
    ----------
    .. [1] T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated
       Learning", ICLR 2020.
    .. [2] The fairagg Specification: [SPEC §2 q-FFL][spec-2],
       [SPEC §0 What a selected client reports][spec-0].
    """
    qv, L0, eps = _check_rule_hyper(q, lipschitz, epsilon)
    if not isinstance(static_step, (bool, np.bool_)):
        raise TypeError(f"static_step must be a bool; got {type(static_step).__name__}")
    static = bool(static_step)
    bsz = None if batch_size is None else check_int(batch_size, "batch_size", low=1)
    check_backend(backend)

    def init(params: np.ndarray, num_clients: int) -> EmptyState:
        del params, num_clients
        return EmptyState()

    def step(params: np.ndarray, reports: RoundReports, state: EmptyState) -> Aggregate:
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_reports(reports, theta, needs=("losses", "gradients"))
        L = _lipschitz_of(L0, reports, "qfedsgd")
        res = _qfedsgd_with_l(theta, reports.gradients, reports.losses, qv, L, eps, static, backend)
        info = {"weights": res.weights, "h_sum": res.h_sum}
        return Aggregate(res.params.astype(theta.dtype, copy=False), state, info)

    hyper = {
        "q": qv,
        "lipschitz": L0,
        "epsilon": eps,
        "static_step": static,
        "batch_size": bsz,
        "backend": backend,
    }
    return Rule(
        "qfedsgd", init, step, hyper, LocalSpec(report="gradients", gradient_batch_size=bsz)
    )
