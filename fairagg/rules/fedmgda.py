"""FedMGDA+ (Hu, Shaloudegi, Zhang & Yu 2020): the min-norm convex combination of the normalised
client updates within an ε-box around FedAvg's weights (SPEC §8).

With ĝ_k = δ_k/‖δ_k‖ (a zero δ_k contributes ĝ_k = 0) and λ0_k = n_k/Σ_S n_j,

.. math::

    \\lambda^* = \\arg\\min_{\\lambda \\in \\Delta,\\; \\max(0, \\lambda^0_k - \\varepsilon)
        \\le \\lambda_k \\le \\min(1, \\lambda^0_k + \\varepsilon)}
        \\Big\\lVert \\sum_k \\lambda_k \\hat g_k \\Big\\rVert^2, \\qquad
    \\theta^{t+1} = \\theta^t - \\eta \\sum_k \\lambda^*_k \\hat g_k .

ε = 0 gives λ* = λ0 (FedAvg on normalised updates); ε ≥ 1 gives plain MGDA (the min-norm point of
the convex hull). The QP is solved exactly by
[`fairagg.simplex.min_norm_weights`][fairagg.simplex.min_norm_weights] on the Gram matrix of the ĝ_k
(one (m, m) product of the updates, then O(m³) work).

Every scale. λ* and the step depend on the directions ĝ_k alone. Where a squared norm of the raw
updates leaves [2^-968, 2^1000] (updates beyond about 1e±145), each row is divided by its largest
entry's power of two (exact) before the Gram matrix is formed, so the answer is the same at every
scale; only an exactly zero row counts as zero. The weights a_k = η λ*_k / ‖δ_k‖ on the raw δ_k
are a ValueError where they exceed float64 (a row of only subnormal entries).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .._checks import (
    as_float_array,
    check_device_array,
    check_real,
    is_device_array,
    squares_in_range,
)
from ..kernels import check_backend, weighted_sum
from ..kernels import gram as kernel_gram
from ..simplex import min_norm_weights
from ..types import RoundReports, Rule
from .fedavg import fedavg_weights, stateless_rule

__all__ = ["MGDAWeights", "fedmgda", "fedmgda_weights"]


class MGDAWeights(NamedTuple):
    """FedMGDA+'s weights for one round.

    Attributes
    ----------
    mixture : ndarray, shape (m,)
        λ*, a point of the ε-box-simplex.
    weights : ndarray, shape (m,)
        a_k = η λ*_k / ‖δ_k‖ (0 for a zero update): θ^{t+1} = θ^t − Σ_k a_k δ_k.
    min_norm : float
        ‖Σ_k λ*_k ĝ_k‖, the length of the common direction (before η).
    """

    mixture: np.ndarray
    weights: np.ndarray
    min_norm: float


def fedmgda_weights(
    deltas: Any, num_samples: Any, epsilon: float, server_lr: float = 1.0, *, backend: str = "numpy"
) -> MGDAWeights:
    """λ* and the update weights of FedMGDA+ (SPEC §8) for the (m, d) updates ``deltas``.

    Parameters
    ----------
    deltas : array_like, shape (m, d)
        δ_k, finite; on ``backend="cuda"`` also a CUDA device array (only the m × m Gram
        matrix then leaves the device).
    num_samples : array_like of int, shape (m,)
        n_k ≥ 1, giving λ0 = n/Σn.
    epsilon : float
        ε ≥ 0, the half-width of the box around λ0.
    server_lr : float
        η ≥ 0.
    backend : {"numpy", "numba", "cuda"}
        Backend of the Gram matrix ([`fairagg.kernels.gram`][fairagg.kernels.gram]).
    """
    on_device = is_device_array(deltas)
    if on_device:  # only the (m, m) Gram matrix leaves the device
        if backend != "cuda":
            raise TypeError(
                f"deltas is a CUDA device array: it needs backend='cuda'; got {backend!r}"
            )
        D = check_device_array(deltas, "deltas", ndim=2, min_size=1)
    else:
        D = as_float_array(deltas, "deltas", ndim=2, min_size=1)
    lam0 = fedavg_weights(num_samples)
    m = D.shape[0]
    if lam0.size != m:
        raise ValueError(f"num_samples must have shape ({m},) to match deltas")
    eps = check_real(epsilon, "epsilon", low=0.0)
    eta = check_real(server_lr, "server_lr", low=0.0)
    check_backend(backend)
    with np.errstate(over="ignore", invalid="ignore"):
        gram = kernel_gram(D, backend)  # one GEMM; ⟨ĝ_i, ĝ_j⟩ = G_ij / (‖δ_i‖ ‖δ_j‖)
    sq = np.diag(gram)
    if on_device and np.any(np.isnan(sq)):  # a NaN reached ‖δ_k‖² (an inf may be an overflow)
        raise ValueError("deltas must be finite (a NaN reached the Gram matrix's diagonal)")
    e = np.zeros(m, dtype=np.int64)
    if not _gram_in_range(sq, D, on_device):
        # ĝ_k does not depend on ‖δ_k‖: divide each row by its largest entry's power of two
        # (exact) and take the Gram matrix of those rows, whose squares cannot over- or
        # underflow. Rare (updates beyond about 1e±145), so a device array comes to the host.
        H = D.copy_to_host() if on_device else np.asarray(D, dtype=np.float64)
        if on_device and not np.all(np.isfinite(H)):
            raise ValueError("deltas must be finite (a NaN or infinity is on the device)")
        e = np.frexp(np.max(np.abs(H), axis=1))[1].astype(np.int64)
        R = np.ldexp(H, -e[:, None].astype(np.int32))
        gram = kernel_gram(R, "numpy" if on_device else backend)
        sq = np.diag(gram)
        rows, rows_backend = R, ("numpy" if on_device else backend)
    else:
        rows, rows_backend = D, backend
    norms = np.sqrt(np.maximum(sq, 0.0))  # ‖δ_k‖ 2^-e_k
    inv = np.divide(1.0, norms, out=np.zeros(m), where=norms > 0)
    G = gram * inv[:, None] * inv[None, :]
    lo = np.maximum(0.0, lam0 - eps)
    hi = np.minimum(1.0, lam0 + eps)
    if eps == 0.0:
        lam = lam0.copy()  # the box is the single point λ0
    else:
        lam = min_norm_weights(G, lower=lo, upper=hi).x
    # ‖Σ λ_k ĝ_k‖ from the vector itself, one pass over the rows (δ_k 2^-e_k): λᵀGλ would
    # lose every digit below √eps ≈ 1.5e-8 where the ĝ_k cancel.
    with np.errstate(over="ignore", invalid="ignore"):
        v = weighted_sum(lam * inv, rows, rows_backend)
    if not isinstance(v, np.ndarray):  # a CUDA device array
        v = v.copy_to_host()
    top = float(np.max(np.abs(v)))
    min_norm = top * float(np.linalg.norm(v / top)) if top > 0 else 0.0
    with np.errstate(over="ignore"):
        weights = np.ldexp(eta * lam * inv, -e.astype(np.int32))  # η λ_k / ‖δ_k‖
    if not np.all(np.isfinite(weights)):
        k = int(np.flatnonzero(~np.isfinite(weights))[0])
        raise ValueError(
            f"deltas[{k}] is too short: the weight η λ_k / ‖δ_k‖ = η λ_k / "
            f"{math.ldexp(float(norms[k]), int(e[k])):.3g} on it exceeds float64 (a row of "
            "only subnormal entries); scale the updates up"
        )
    return MGDAWeights(lam, weights, min_norm)


def _gram_in_range(sq: np.ndarray, D: Any, on_device: bool) -> bool:
    """The Gram matrix of the raw updates is exact to rounding (no product or partial sum,
    bounded by Cauchy-Schwarz, over- or underflows beyond the norms it is divided by)."""

    def rows(idx: np.ndarray) -> np.ndarray:
        H = D[int(idx[0]) : int(idx[-1]) + 1]
        H = H.copy_to_host() if on_device else np.asarray(H)
        return H[idx - idx[0]]

    return squares_in_range(sq, rows)


def fedmgda(*, epsilon: float = 0.1, server_lr: float = 1.0, backend: str = "numpy") -> Rule:
    """FedMGDA+ as a rule (SPEC §8; see the module docstring).

    Parameters
    ----------
    epsilon : float
        ε ≥ 0 (0: FedAvg on normalised updates; ≥ 1: plain MGDA).
    server_lr : float
        η ≥ 0, the global step.
    backend : {"numpy", "numba", "cuda"}
        Backend of the Gram matrix and of the weighted update.

    Notes
    -----
    ``info``: ``"weights"`` a_k on δ_k, ``"mixture"`` λ*, ``"min_norm"`` ‖Σ λ*_k ĝ_k‖.

    References
    ----------
    .. [1] Z. Hu, K. Shaloudegi, G. Zhang, Y. Yu, "Federated Learning Meets Multi-objective
       Optimization", IEEE Transactions on Network Science and Engineering, 2022 (arXiv:2006.11489,
       2020).
    .. [2] The fairagg Specification: [SPEC §8 FedMGDA+][spec-8].
    """
    eps = check_real(epsilon, "epsilon", low=0.0)
    eta = check_real(server_lr, "server_lr", low=0.0)

    def weights_of(reports: RoundReports) -> tuple[np.ndarray, dict[str, Any]]:
        res = fedmgda_weights(reports.deltas, reports.num_samples, eps, eta, backend=backend)
        return res.weights, {"mixture": res.mixture, "min_norm": res.min_norm}

    return stateless_rule(
        "fedmgda", weights_of, backend, hyperparams={"epsilon": eps, "server_lr": eta}
    )
