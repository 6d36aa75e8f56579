"""Entropic (KL) steps on the simplex: the max-shifted softmax
[`log_normalize`][fairagg.simplex.log_normalize], the mirror step
[`kl_step`][fairagg.simplex.kl_step] (SPEC §4), and the check of a point of the simplex
([`check_simplex_point`][fairagg.simplex.check_simplex_point]) they and
[`fairagg.online`][fairagg.online] take.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import as_float_array, check_real


def log_normalize(log_weights: Any) -> np.ndarray:
    """p_i = exp(s_i) / Σ_j exp(s_j) with a max-shift, so it never overflows (STYLE.md).

    ``-inf`` entries give exact zeros; ``+inf`` and NaN are rejected; at least one entry must be
    finite.
    """
    s = as_float_array(log_weights, "log_weights", ndim=1, min_size=1, finite=False)
    if np.any(np.isnan(s)) or np.any(s == np.inf):
        raise ValueError("log_weights must not hold NaN or +inf")
    top = np.max(s)
    if top == -np.inf:
        raise ValueError("log_weights must hold at least one finite entry (all weights are zero)")
    with np.errstate(over="ignore"):  # s − top below the float range: a zero weight
        e = np.exp(s - top)
    return e / e.sum()


def kl_step(p: Any, r: Any, eta: float) -> np.ndarray:
    """Entropic mirror step p_i^+ ∝ p_i exp(r_i / η) (SPEC §4; AAgFF poster, EG closed form).

    This is argmin_{x ∈ Δ} −⟨x, r⟩ + η KL(x ‖ p), computed in log space: log p_i + r_i/η,
    max-shifted, exponentiated, normalised. Entries with p_i = 0 stay 0 (KL(x ‖ p) is finite only
    if x_i = 0 there).

    Parameters
    ----------
    p : array_like, shape (K,)
        A point of the simplex (non-negative, Σp = 1 within 1e-9 relative).
    r : array_like, shape (K,)
        Response (the negative loss gradient); −inf entries get weight 0, NaN and +inf are
        rejected.
    eta : float
        Positive step parameter; η = inf returns p.

    Returns
    -------
    ndarray of float64, shape (K,)
    """
    pv = check_simplex_point(p, "p")
    rv = as_float_array(r, "r", shape=(pv.size,), dtype=np.float64, allow_int=True, finite=False)
    if np.any(np.isnan(rv)) or np.any(rv == np.inf):
        raise ValueError("r must not hold NaN or +inf (-inf is the limit of a zero weight)")
    if np.max(rv[pv > 0]) == -np.inf:
        raise ValueError("r must be finite somewhere on the support of p")
    if isinstance(eta, (int, float, np.floating, np.integer)) and eta == np.inf:
        return pv.copy()
    e = check_real(eta, "eta", low=0.0, low_open=True)
    supp = pv > 0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        logp = np.log(pv)
        # Shift r by its maximum over the support of p before dividing by η: the step is invariant
        # to the shift, r/η cannot overflow, and at a tie of the maxima the small log p_i are not
        # rounded away against a huge r/η (the weights then split exactly ∝ p).
        z = (rv - np.max(rv[supp])) / e
    z[~supp] = 0.0  # log p_i = −inf there already
    z[np.isnan(z)] = -np.inf
    return log_normalize(logp + z)


def check_simplex_point(p: Any, name: str, *, rtol: float = 1e-9) -> np.ndarray:
    """Validate a point of the probability simplex: float64, finite, ≥ 0, sums to 1 (±rtol).
    ``name`` is the caller's name for ``p`` in the messages."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}")
    tol = check_real(rtol, "rtol", low=0.0)
    pv = as_float_array(p, name, ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    low = pv.min()
    if low < 0:
        raise ValueError(f"{name} must be non-negative; minimum is {low}")
    total = pv.sum()
    if abs(total - 1.0) > tol:
        raise ValueError(f"{name} must sum to 1 (a point of the simplex); sums to {total!r}")
    return pv
