"""The OCO view of fair aggregation: FedAvg, q-FedAvg, TERM and PropFair as one exponentiated-
gradient step from the sample-size weights (AAgFF poster, table "Fair FL algorithms are OCO
algorithms"; SPEC §4).

Each rule takes the last decision p^t = w (w_i = n_i / Σ_{j∈S} n_j over the selected clients), a
response r_i built from the pre-training losses F_i(θ^t) and a step η, and aggregates with the EG
step p_i ∝ w_i exp(r_i/η)
([`fairagg.online.exponentiated_gradient`][fairagg.online.exponentiated_gradient]):

======== ===================== ===== =========================
rule     response r_i          η     new decision
======== ===================== ===== =========================
FedAvg   0                     1     ∝ w_i
q-FedAvg q log F_i             1     ∝ w_i F_i^q (q → ∞: AFL)
TERM     F_i                   1/λ   ∝ w_i exp(λ F_i)
PropFair −log(M − F_i)         1     ∝ w_i / (M − F_i)
======== ===================== ===== =========================

then θ^{t+1} = θ^t − Σ_{i∈S} p_i δ_i. These are the aggregation-weight views only: the full q-FedAvg
(with its Lipschitz step), TERM's running normaliser and PropFair's client-side surrogate are
separate rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import as_float_array, check_real
from ..online import exponentiated_gradient
from ..types import Rule
from .fedavg import fedavg_weights, stateless_rule

__all__ = [
    "eg_fedavg_weights",
    "eg_propfair_weights",
    "eg_qffl_weights",
    "eg_term_weights",
    "propfair_eg",
    "qffl_eg",
    "term_eg",
]


def _losses(losses: Any, m: int) -> np.ndarray:
    F = as_float_array(losses, "losses", shape=(m,), dtype=np.float64, allow_int=True)
    if np.any(F < 0):
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    return F


def eg_fedavg_weights(num_samples: Any) -> np.ndarray:
    """FedAvg row: r = 0, η = 1 from p = w, so the EG step returns w (∝ n_i)."""
    w = fedavg_weights(num_samples)
    return exponentiated_gradient(w, np.zeros(w.size), 1.0)


def eg_qffl_weights(losses: Any, num_samples: Any, q: float) -> np.ndarray:
    """q-FedAvg row: r_i = q log F_i, η = 1 from p = w, giving p_i ∝ w_i F_i^q.

    q = 0 gives w. Clients with F_i = 0 get weight 0 for q > 0 (the limit q log 0 = −∞); all-zero
    losses with q > 0 raise ``ValueError``. As q → ∞ the weight concentrates on argmax F (AFL).

    Parameters
    ----------
    losses : array_like, shape (m,)
        F_i(θ^t) ≥ 0 of the selected clients.
    num_samples : array_like of int, shape (m,)
        n_i.
    q : float
        Fairness parameter q ≥ 0.
    """
    w = fedavg_weights(num_samples)
    F = _losses(losses, w.size)
    qv = check_real(q, "q", low=0.0)
    if qv == 0.0:
        return exponentiated_gradient(w, np.zeros(w.size), 1.0)
    pos = F > 0
    if not np.any(pos):
        raise ValueError(
            "losses are all zero: q-FedAvg's weights ∝ w_i F_i^q are undefined for q > 0"
        )
    # F_i = 0 is the limit r_i → −∞: restrict the last decision to the clients with F_i > 0.
    p0 = np.where(pos, w, 0.0)
    r = np.zeros(w.size)
    # r_i = q log F_i, shifted by −q log max F (the EG step is invariant to a common shift) so that
    # a huge q gives −inf for the smaller losses instead of overflowing.
    with np.errstate(over="ignore"):
        r[pos] = qv * (np.log(F[pos]) - np.log(F.max()))
    return exponentiated_gradient(p0 / p0.sum(), r, 1.0)


def eg_term_weights(losses: Any, num_samples: Any, tilt: float) -> np.ndarray:
    """TERM row: r_i = F_i, η = 1/λ from p = w, giving p_i ∝ w_i exp(λ F_i).

    λ = ``tilt`` (any real; λ = 0 gives w, λ < 0 down-weights high losses).
    """
    w = fedavg_weights(num_samples)
    F = _losses(losses, w.size)
    lam = check_real(tilt, "tilt")
    if lam == 0.0:
        return exponentiated_gradient(w, np.zeros(w.size), 1.0)
    # η = 1/λ; exp(r/η) = exp(λ F). The step is invariant to a common shift of r, so it is taken
    # as r = λ(F − F_ref), η = 1 with F_ref the loss that maximises λF: no overflow for any finite
    # λ (including λ < 0, where η = 1/λ would be negative).
    ref = F.max() if lam > 0 else F.min()
    with np.errstate(over="ignore"):
        r = lam * (F - ref)
    return exponentiated_gradient(w, r, 1.0)


def eg_propfair_weights(losses: Any, num_samples: Any, M: float) -> np.ndarray:
    """PropFair row: r_i = −log(M − F_i), η = 1 from p = w, giving p_i ∝ w_i / (M − F_i).

    Requires M > max_i F_i (``ValueError`` naming M otherwise).
    """
    w = fedavg_weights(num_samples)
    F = _losses(losses, w.size)
    Mv = check_real(M, "M", low=0.0, low_open=True)
    if not Mv > F.max():
        raise ValueError(
            f"losses must all be below M (PropFair needs M > F_i); got M = {Mv}, max loss {F.max()}"
        )
    return exponentiated_gradient(w, -np.log(Mv - F), 1.0)


def _eg_rule(name: str, weights_of: Any, hyper: dict[str, Any], backend: str) -> Rule:
    return stateless_rule(name, weights_of, backend, needs=("losses",), hyperparams=hyper)


def qffl_eg(*, q: float = 1.0, backend: str = "numpy") -> Rule:
    """q-FedAvg's aggregation weights as an EG step: weights ∝ w_i F_i^q
    ([`eg_qffl_weights`][fairagg.rules.oco.eg_qffl_weights]).

    Parameters
    ----------
    q : float
        q ≥ 0; q = 0 gives FedAvg's weights ∝ n_k.
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    Notes
    -----
    ``info["weights"]`` holds the weights over the selected clients.

    References
    ----------
    .. [1] S.-J. Hahn, G.-S. Kim, J. Lee, "Pursuing Overall Welfare in Federated Learning through
       Sequential Decision Making", ICML 2024.
    .. [2] T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated
       Learning", ICLR 2020.
    .. [3] The fairagg Specification: [SPEC §4 Fair FL as online learning][spec-4],
       [SPEC §2 q-FFL][spec-2].
    """
    qv = check_real(q, "q", low=0.0)
    return _eg_rule(
        "qffl-eg", lambda r: eg_qffl_weights(r.losses, r.num_samples, qv), {"q": qv}, backend
    )


def term_eg(*, tilt: float = 1.0, backend: str = "numpy") -> Rule:
    """TERM's aggregation weights as an EG step: ∝ w_i exp(λ F_i)
    ([`eg_term_weights`][fairagg.rules.oco.eg_term_weights]).

    Parameters
    ----------
    tilt : float
        λ, any real; 0 gives FedAvg's weights ∝ n_k, λ > 0 favours high-loss clients.
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    References
    ----------
    .. [1] S.-J. Hahn, G.-S. Kim, J. Lee, "Pursuing Overall Welfare in Federated Learning through
       Sequential Decision Making", ICML 2024.
    .. [2] T. Li, A. Beirami, M. Sanjabi, V. Smith, "Tilted Empirical Risk Minimization", ICLR 2021.
    .. [3] The fairagg Specification: [SPEC §4 Fair FL as online learning][spec-4],
       [SPEC §6 TERM and PropFair][spec-6].
    """
    lam = check_real(tilt, "tilt")
    return _eg_rule(
        "term-eg", lambda r: eg_term_weights(r.losses, r.num_samples, lam), {"tilt": lam}, backend
    )


def propfair_eg(*, M: float = 10.0, backend: str = "numpy") -> Rule:
    """PropFair's aggregation weights as an EG step: ∝ w_i/(M − F_i)
    ([`eg_propfair_weights`][fairagg.rules.oco.eg_propfair_weights]).

    Parameters
    ----------
    M : float
        M > 0, above every loss the rule sees (``ValueError`` otherwise); raise the default 10
        for losses that can exceed it (10 is four times the loss of a uniform 10-class
        predictor).
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    References
    ----------
    .. [1] S.-J. Hahn, G.-S. Kim, J. Lee, "Pursuing Overall Welfare in Federated Learning through
       Sequential Decision Making", ICML 2024.
    .. [2] G. Zhang, S. Malekmohammadi, X. Chen, Y. Yu, "Proportional Fairness in Federated
       Learning", TMLR 2023.
    .. [3] The fairagg Specification: [SPEC §4 Fair FL as online learning][spec-4],
       [SPEC §6 TERM and PropFair][spec-6].
    """
    Mv = check_real(M, "M", low=0.0, low_open=True)
    return _eg_rule(
        "propfair-eg",
        lambda r: eg_propfair_weights(r.losses, r.num_samples, Mv),
        {"M": Mv},
        backend,
    )
