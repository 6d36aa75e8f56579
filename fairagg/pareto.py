"""Pareto stationarity (FedMGDA+ and FedFV, SPEC §7-§8).

A point w is Pareto-stationary for the client objectives F_1..F_K when some convex combination of
their gradients vanishes. The certificate

.. math::

    c(w) = \\min_{\\lambda \\in \\Delta} \\Big\\lVert \\sum_k \\lambda_k \\nabla F_k(w) \\Big\\rVert

is 0 exactly at Pareto-stationary points (for convex F_k: at Pareto-optimal points), and the λ
attaining it is the MGDA direction's weights. It is computed exactly by the min-norm solver
[`fairagg.simplex.min_norm_weights`][fairagg.simplex.min_norm_weights] on the Gram matrix of the
gradients.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ._checks import as_float_array, check_federated_data
from .local import client_gradients
from .models import FlatModel
from .simplex import min_norm_weights

__all__ = ["ParetoCertificate", "model_pareto_certificate", "pareto_certificate"]


class ParetoCertificate(NamedTuple):
    """``value`` = min_{λ∈Δ} ‖Σ λ_k g_k‖, ``weights`` = a λ attaining it, ``direction`` =
    Σ λ_k g_k (unique, even where λ is not)."""

    value: float
    weights: np.ndarray
    direction: np.ndarray


def pareto_certificate(grads: Any) -> ParetoCertificate:
    """The Pareto-stationarity certificate of the gradients ``grads`` (shape (K, d), finite).

    Scale-free: the min-norm weights are computed on ``grads`` divided by the power of two that
    brings the largest |entry| into [½, 1) (exact), so the Gram matrix neither overflows (at
    gradients ~1e160) nor underflows to zero (at ~1e-170, where the value came out 0 and λ
    arbitrary); the direction and the value are scaled back.
    """
    G = as_float_array(grads, "grads", ndim=2, dtype=np.float64, min_size=1)
    top = float(np.max(np.abs(G)))
    e = math.frexp(top)[1] if top > 0 else 0
    S = np.ldexp(G, -e)
    lam = min_norm_weights(S @ S.T).x
    d = lam @ S
    return ParetoCertificate(math.ldexp(float(np.linalg.norm(d)), e), lam, np.ldexp(d, e))


def model_pareto_certificate(model: FlatModel, params: Any, data: Any) -> ParetoCertificate:
    """[`pareto_certificate`][fairagg.pareto.pareto_certificate] of the full-batch gradients ∇F_k(w)
    of every client of the federated ``data`` (training splits) for ``model`` at ``params``."""
    if not isinstance(model, FlatModel):
        raise TypeError(f"model must be a fairagg.models.FlatModel; got {type(model).__name__}")
    data = check_federated_data(data)
    K = int(np.asarray(data.train_offsets).size - 1)
    res = client_gradients(model, params, data, np.arange(K))
    return pareto_certificate(res.deltas)
