"""Pareto stationarity (FedMGDA+ and FedFV, SPEC §7-§8).

A point w is Pareto-stationary for the client objectives F_1..F_K when some convex combination of
their gradients vanishes. The certificate

.. math::

    c(w) = \\min_{\\lambda \\in \\Delta} \\Big\\lVert \\sum_k \\lambda_k \\nabla F_k(w) \\Big\\rVert

is 0 exactly at Pareto-stationary points (for convex F_k: at Pareto-optimal points), and the λ
attaining it is the MGDA direction's weights. It is computed exactly by the min-norm solver
:func:`fairagg.simplex.min_norm_weights` on the Gram matrix of the gradients.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from models import FlatModel

from ._checks import as_float_array
from .local import client_gradients
from .simplex import min_norm_weights

__all__ = ["ParetoCertificate", "model_pareto_certificate", "pareto_certificate"]


class ParetoCertificate(NamedTuple):
    """``value`` = min_{λ∈Δ} ‖Σ λ_k g_k‖, ``weights`` = a λ attaining it, ``direction`` =
    Σ λ_k g_k (unique, even where λ is not)."""

    value: float
    weights: np.ndarray
    direction: np.ndarray


def pareto_certificate(grads: Any) -> ParetoCertificate:
    """The Pareto-stationarity certificate of the gradients ``grads`` (shape (K, d), finite)."""
    G = as_float_array(grads, "grads", ndim=2, dtype=np.float64, min_size=1)
    lam = min_norm_weights(G @ G.T).x
    direction = lam @ G
    return ParetoCertificate(float(np.linalg.norm(direction)), lam, direction)


def model_pareto_certificate(model: FlatModel, params: Any, data: Any) -> ParetoCertificate:
    """:func:`pareto_certificate` of the full-batch gradients ∇F_k(w) of every client of the
    federated ``data`` (training splits) for ``model`` at ``params``."""
    K = int(np.asarray(data.train_offsets).size - 1)
    res = client_gradients(model, params, data, np.arange(K))
    return pareto_certificate(res.deltas)
