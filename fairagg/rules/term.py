"""TERM, tilted empirical risk minimisation at the client level (Li, Beirami, Sanjabi & Smith,
ICLR 2021), as a federated aggregation rule (SPEC §6).

``variant="paper"``: the tilted weights over the selected clients,

.. math::

    \\omega_k = \\frac{p_k e^{t F_k}}{\\sum_{j \\in S} p_j e^{t F_j}}, \\qquad
    \\theta^{t+1} = \\theta^t - \\sum_{k \\in S} \\omega_k \\delta_k,

p_k = n_k / Σ_S n (``weighting="samples"``) or uniform; the gradient of the tilted objective
(1/t) log Σ p_k e^{t F_k} is Σ ω_k ∇F_k. t = 0 is FedAvg (or FairAvg), t → ∞ the worst client,
t < 0 down-weights high-loss clients.

``variant="official"`` (the federated TERM of the TERM authors' public code): a running
normaliser S⁰ = 0, S ← ½ S + ½ mean_{k∈S} e^{t(F_k − max F)} each round,
ω_k = e^{t(F_k − max F)} / (m S) and θ^{t+1} = θ^t − (1/m) Σ_k ω_k δ_k, the average of the
clients' θ^t − ω_k δ_k. Σ ω_k is 2 in the first round and tends to 1 as S settles, so the weights
on the δ_k sum to 2/m, then about 1/m: the official step is about 1/m of FairAvg's. ``weighting``
is ignored there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._checks import as_float_array, check_choice, check_real
from ..kernels import check_backend
from ..types import Aggregate, RoundReports, Rule, check_reports, check_state
from .fedavg import apply_weighted_update, as_params, fairavg_weights, fedavg_weights

__all__ = ["TERMState", "term", "term_official_weights", "term_weights"]


class TERMState(NamedTuple):
    """``normaliser`` S of the official variant (0 before the first round; unused by the paper
    variant)."""

    normaliser: float = 0.0


def _losses(losses: Any, m: int | None = None) -> np.ndarray:
    F = as_float_array(
        losses,
        "losses",
        ndim=1,
        shape=None if m is None else (m,),
        dtype=np.float64,
        allow_int=True,
        min_size=1,
    )
    if F.min() < 0:
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    return F


def term_weights(losses: Any, tilt: float, num_samples: Any = None) -> np.ndarray:
    """ω_k ∝ p_k exp(t F_k) over the selected clients (SPEC §6), summing to 1.

    ``num_samples`` gives p_k = n_k/Σ n; None gives uniform p_k. Computed as a softmax of
    t (F_k − F*) + log p_k shifted by its maximum, with F* the largest loss for t > 0 and the
    smallest for t < 0: t (F_k − F*) ≤ 0, so no tilt overflows (a product below the float range
    is −inf, the limit weight 0; ``term_weights([1, 2], 1e308)`` is [0, 1]).
    """
    F = _losses(losses)
    t = check_real(tilt, "tilt")
    p = fairavg_weights(F.size) if num_samples is None else fedavg_weights(num_samples)
    if p.size != F.size:
        raise ValueError(f"num_samples must have shape ({F.size},) to match losses")
    ref = F.max() if t > 0 else F.min()
    with np.errstate(over="ignore"):
        z = t * (F - ref) + np.log(p)
    w = np.exp(z - z.max())
    return w / w.sum()


def term_official_weights(losses: Any, tilt: float, normaliser: float) -> tuple[np.ndarray, float]:
    """The official variant's weights ω_k/m and the new normaliser S (SPEC §6).

    S ← ½ ``normaliser`` + ½ mean_k e^{t(F_k − max F)}; returns (e^{t(F_k − max F)}/(m² S), S),
    the weight of each δ_k in θ^{t+1} = θ^t − Σ_k weights_k δ_k.
    """
    F = _losses(losses)
    t = check_real(tilt, "tilt")
    S0 = check_real(normaliser, "normaliser", low=0.0)
    with np.errstate(over="ignore"):
        e = np.exp(t * (F - F.max()))
    if not np.all(np.isfinite(e)):
        raise ValueError(
            f"exp(tilt·(F_k − max F)) overflows for tilt = {t}: a negative tilt this large "
            "needs the paper variant"
        )
    S = 0.5 * S0 + 0.5 * float(e.mean())
    m = F.size
    return e / (m * m * S), S


def term(
    *,
    tilt: float = 1.0,
    weighting: str = "samples",
    variant: str = "paper",
    backend: str = "numpy",
) -> Rule:
    """TERM as a rule (SPEC §6; see the module docstring).

    Parameters
    ----------
    tilt : float
        t (any real; 0 gives FedAvg for ``weighting="samples"``).
    weighting : {"samples", "uniform"}
        p_k ∝ n_k or uniform (paper variant).
    variant : {"paper", "official"}
        The paper's batch tilted weights (default), or the public code's running normaliser S
        (see the module docstring).
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted update.

    Notes
    -----
    ``info``: ``"weights"`` the weight of each δ_k; ``"normaliser"`` S (official variant).

    References
    ----------
    .. [1] T. Li, A. Beirami, M. Sanjabi, V. Smith, "Tilted Empirical Risk Minimization", ICLR 2021.
    .. [2] The fairagg Specification: [SPEC §6 TERM and PropFair][spec-6],
       [SPEC §4 Fair FL as online learning][spec-4].
    """
    t = check_real(tilt, "tilt")
    check_choice(weighting, "weighting", ("samples", "uniform"))
    check_choice(variant, "variant", ("paper", "official"))
    check_backend(backend)

    def init(params: np.ndarray, num_clients: int) -> TERMState:
        del params, num_clients
        return TERMState(0.0)

    def step(params: np.ndarray, reports: RoundReports, state: TERMState) -> Aggregate:
        check_state(state, TERMState, "term")
        theta = as_params(params, backend)
        check_reports(reports, theta, needs=("losses",), device=backend == "cuda")
        info: dict[str, Any] = {}
        if variant == "official":
            w, S = term_official_weights(reports.losses, t, state.normaliser)
            new_state = TERMState(S)
            info["normaliser"] = S
        else:
            n = reports.num_samples if weighting == "samples" else None
            w = term_weights(reports.losses, t, n)
            new_state = state
        info["weights"] = w
        out = apply_weighted_update(theta, reports.deltas, w, backend=backend)
        return Aggregate(out, new_state, info)

    hyper = {"tilt": t, "weighting": weighting, "variant": variant, "backend": backend}
    return Rule("term", init, step, hyper)
