"""Entropic steps on the simplex: the AAgFF poster's exponentiated-gradient step (the OCO view
of FedAvg, q-FedAvg, TERM and PropFair) and entropic FTRL (SPEC §4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import as_float_array, check_real
from ..simplex import check_simplex_point, kl_step


def exponentiated_gradient(p: Any, r: Any, eta: float) -> np.ndarray:
    """One exponentiated-gradient step p_i^+ = p_i e^{r_i/η} / Σ_j p_j e^{r_j/η} (SPEC §4).

    The AAgFF poster's closed form; it is argmin_{x∈Δ} −⟨x, r⟩ + η KL(x ‖ p) (the poster writes the
    negative entropy; with the previous decision in the closed form the regulariser is the KL
    divergence to p). Computed in log space with a max-shift. See
    [`fairagg.simplex.kl_step`][fairagg.simplex.kl_step].

    Parameters
    ----------
    p : array_like, shape (K,)
        Last decision, a point of the simplex.
    r : array_like, shape (K,)
        Response (the negative gradient of the linear decision loss −⟨p, r⟩).
    eta : float
        Step parameter η > 0.

    Returns
    -------
    ndarray of float64, shape (K,)
    """
    return kl_step(p, r, eta)


def entropic_ftrl(grad_sum: Any, eta: float, prior: Any = None) -> np.ndarray:
    """Entropic FTRL: argmin_{p∈Δ} ⟨G, p⟩ + η Σ_i p_i log(p_i / prior_i) = prior ⊙ e^{−G/η} / Z.

    With the uniform prior (default) the regulariser is the negative entropy of the AAgFF poster's
    FTRL; the closed form is a max-shifted softmax of −G/η.

    Parameters
    ----------
    grad_sum : array_like, shape (K,)
        G = Σ_τ g_τ, the cumulative (linearised) loss gradients.
    eta : float
        Regularisation weight η > 0.
    prior : array_like, shape (K,), optional
        A point of the simplex (uniform by default).
    """
    G = as_float_array(grad_sum, "grad_sum", ndim=1, dtype=np.float64, min_size=1)
    e = check_real(eta, "eta", low=0.0, low_open=True)
    if prior is None:
        return kl_step(np.full(G.size, 1.0 / G.size), -G, e)
    pv = check_simplex_point(prior, "prior")
    if pv.size != G.size:
        raise ValueError(f"prior must have shape ({G.size},); got {pv.shape}")
    return kl_step(pv, -G, e)
