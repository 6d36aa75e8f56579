"""AAgFF-D: the doubly-robust estimate of the full response from the selected clients, its
first-order gradient, and the entropic-FTRL decision (SPEC §5)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._checks import as_float_array, as_int_array, check_choice, check_count, check_int, check_real
from ..simplex import check_simplex_point, log_normalize
from ._response import VARIANTS


def dr_response(
    responses: Any,
    selected: Any,
    num_clients: int,
    *,
    inclusion_probability: float | None = None,
    variant: str = "paper",
) -> tuple[np.ndarray, float]:
    """Doubly-robust estimate ř ∈ R^K of the full response from the selected clients (SPEC §5).

    ``variant="paper"`` (the poster): r̄ = mean_{i∈S} r_i and
    ř_i = (1 − 𝟙[i∈S]/C) r̄ + (𝟙[i∈S]/C) r_i, i.e. r̄ for unselected clients and
    r̄ + (r_i − r̄)/C for selected ones. ``variant="official"``: the public code's (r_i − r̄)/C for
    selected clients (it drops + r̄), r̄ for the others. ``variant="leave-one-out"``: the paper's
    estimator with the baseline of client i taken over S∖{i} for selected clients.

    Unbiasedness. The poster states E[ř] = r. With the sample mean r̄ as the baseline this holds
    only for m = K: r̄ depends on whether i was sampled, and under uniform sampling of m of K
    E[ř_i] = r_i + (K − m)/(m (K − 1)) · (mean(r) − r_i) (e.g. K = 2, m = 1 gives E[ř] = mean(r)·1).
    The leave-one-out baseline is independent of 𝟙[i∈S] in mean, so that variant is exactly
    unbiased (m ≥ 2). The test suite checks all three by enumerating every m-subset.

    Parameters
    ----------
    responses : array_like, shape (m,)
        r_i of the selected clients, in the order of ``selected``.
    selected : array_like of int, shape (m,)
        Distinct client indices in [0, K).
    num_clients : int
        K.
    inclusion_probability : float, optional
        C = P(i ∈ S); default m/K, exact for uniform sampling of m of K without replacement.
    variant : {"paper", "official", "leave-one-out"}

    Returns
    -------
    r_check : ndarray of float64, shape (K,)
    r_bar : float
        The sample mean r̄ (which the first-order gradient expands around).
    """
    K = check_count(num_clients, "num_clients", low=1)
    idx = as_int_array(selected, "selected", min_value=0)
    r = as_float_array(responses, "responses", shape=(idx.size,), dtype=np.float64, allow_int=True)
    m = idx.size
    if m == 0:
        raise ValueError("selected must hold at least one client")
    if idx.max() >= K:
        raise ValueError(f"selected must hold indices below num_clients = {K}; got {idx.max()}")
    if np.unique(idx).size != m:
        raise ValueError("selected must hold distinct client indices")
    var = check_choice(variant, "variant", (*VARIANTS, "leave-one-out"))
    C = (
        m / K
        if inclusion_probability is None
        else check_real(
            inclusion_probability, "inclusion_probability", low=0.0, high=1.0, low_open=True
        )
    )
    r_bar = float(r.mean())
    out = np.full(K, r_bar)
    if var == "paper":
        out[idx] = r_bar + (r - r_bar) / C
    elif var == "official":
        out[idx] = (r - r_bar) / C
    else:
        if m < 2:
            raise ValueError("the leave-one-out baseline needs at least 2 selected clients")
        loo = (r.sum() - r) / (m - 1)
        out[idx] = loo + (r - loo) / C
    return out, r_bar


def dr_gradient(p: Any, r_check: Any, r_bar: float) -> np.ndarray:
    """First-order gradient estimate ĝ of g(r) = −r/(1 + ⟨p, r⟩) around r̄·1 (SPEC §5).

    With D = 1 + r̄ Σ_j p_j: ĝ = −ř/D + (r̄ ⟨p, ř − r̄ 1⟩ / D²) · 1, the Taylor expansion
    g(r̄1) + J(r̄1)(ř − r̄1) evaluated at the doubly-robust response ř (AAgFF-D).
    """
    pv = check_simplex_point(p, "p")
    rc = as_float_array(r_check, "r_check", shape=(pv.size,), dtype=np.float64, allow_int=True)
    rb = check_real(r_bar, "r_bar")
    return _dr_gradient(pv, rc, rb)


def _dr_gradient(p: np.ndarray, r_check: np.ndarray, r_bar: float) -> np.ndarray:
    # The formula for any non-negative p: the official AAgFF-D plays p¹ = C·1, off the simplex.
    D = 1.0 + r_bar * float(p.sum())
    if not D > 0:
        raise ValueError(f"dr_gradient needs 1 + r_bar * sum(p) > 0; got {D}")
    # (r̄/D)·(⟨p, ř − r̄1⟩/D) rather than r̄⟨p, ř − r̄1⟩/D²: both factors stay of the size of
    # the result, where D² or the product overflow for responses near 1e160.
    with np.errstate(over="ignore"):
        corr = (r_bar / D) * (float(p @ (r_check - r_bar)) / D)
        g = -r_check / D + corr * np.ones(p.size)
    if not np.all(np.isfinite(g)):
        raise ValueError(
            "the doubly-robust gradient overflows float64: responses beyond about 1e308 "
            f"(r_bar = {r_bar:.3g})"
        )
    return g


def official_first_decision(num_clients: int, inclusion_probability: float) -> np.ndarray:
    """The public AAgFF code's first decision p¹ = C·1 (``variant="official"``; SPEC §5's p¹ is
    uniform). Cross-silo C = 1 gives the all-ones vector; it is not a point of the simplex, and
    enters only the first round's gradient and decision loss (the aggregation of that round
    already uses p²)."""
    K = check_count(num_clients, "num_clients", low=1)
    C = check_real(inclusion_probability, "inclusion_probability", low=0.0, high=1.0, low_open=True)
    return np.full(K, C)


def aaggff_d_decision(grad_sum: Any, rounds: int, lipschitz: float) -> np.ndarray:
    """AAgFF-D's decision after t rounds: p_i ∝ exp(−√(log K) G_{t,i} / (L∞ √(t+1))) (SPEC §5).

    Entropic FTRL ([`entropic_ftrl`][fairagg.online.entropic_ftrl]) with η_{t+1} = L∞ √(t+1) / √(log
    K); t = 0 gives the uniform p¹; K = 1 gives [1].
    """
    G = as_float_array(grad_sum, "grad_sum", ndim=1, dtype=np.float64, min_size=1)
    t = check_int(rounds, "rounds", low=0)
    L = check_real(lipschitz, "lipschitz", low=0.0, low_open=True)
    K = G.size
    if K == 1:
        return np.ones(1)
    return log_normalize(-math.sqrt(math.log(K)) * G / (L * math.sqrt(t + 1)))
