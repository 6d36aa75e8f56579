"""FedFa, fairness and accuracy in federated learning (Huang et al., 2020; SPEC §9).

**The formulas below are reconstructed.** Our copy of the FedFa paper lost its equations; what is
left is the surrounding text (what each equation is for, the constants ε and the constraint
α + β = 1), the experiment settings, and a maintained public implementation (FLGo's
``fedfa.py``). SPEC §9 reconstructs the equations from those three sources, and this module
computes exactly SPEC §9. Where the public code differs from the paper's stated intent (the sign
of the server momentum), the intent is the default and the public code is ``variant="flgo"``.

**Weights** (eqs. 9-15). The m selected clients report their training accuracy acc_k of the
received model θ^t and their participation count f_k (rounds selected so far, this one included;
SPEC §0). With shares A_k = acc_k / Σ_S acc (eq. 9) and P_k = f_k / Σ_S f (eq. 10),

.. math::

    I^a_k = -\\log(A_k + \\varepsilon_a) \\ \\text{(eq. 11)}, \\qquad
    I^f_k = -\\log(1 - P_k + \\varepsilon_f) \\ \\text{(eq. 12)},

    p_k = \\alpha \\frac{I^a_k}{\\sum_S I^a} + \\beta \\frac{I^f_k}{\\sum_S I^f}
    \\quad \\text{(eqs. 13-15)}, \\qquad \\alpha + \\beta = 1,

ε_a = 1e-6, ε_f = 1e-5 (the log base cancels). Lower accuracy and more participation mean more
information, so more weight. The aggregate is θ̄ = Σ p_k θ_k = θ^t − Σ p_k δ_k.

Guards (SPEC §9 and this module's, so that the weights always lie on the simplex):

- m = 1: p = [1].
- All accuracies 0: the shares A are undefined (0/0); the accuracy part is uniform, 1/m.
- An information quantity is floored at 0. The ε shift exists to keep the logarithm finite,
  but it can push its argument above 1: A_k + ε_a > 1 when one client holds (nearly) all the
  accuracy (every other selected accuracy 0), and 1 − P_k + ε_f > 1 when P_k < ε_f. The
  literal formula then gives −log(1 + ε) ≈ −ε < 0 and a negative weight of order ε; the floor
  changes that quantity by at most ε. For m ≥ 2 the floored accuracy information always has a
  positive sum when ε_a < 1/2; the frequency information has one as long as the largest share
  P_k exceeds ε_f (always, for ε_f < 1/m), else [`fedfa_weights`][fairagg.rules.fedfa.fedfa_weights]
  raises ``ValueError``.

**Server momentum** (eqs. 3-7). With the server pseudo-gradient Δ_t = θ^t − θ̄ (old minus new,
so it points like a gradient),

.. math::

    m \\leftarrow \\gamma m + (1 - \\gamma) \\Delta_t \\quad (m = 0 \\text{ before round 1}),
    \\qquad
    \\theta^{t+1} = \\begin{cases} \\bar\\theta - \\eta_s m & t \\equiv 0 \\pmod \\tau \\\\
    \\bar\\theta & \\text{otherwise,} \\end{cases}

with t counting the rule's own steps from 1 (eq. 7 is the every-τ-rounds form; τ = 1 applies
the correction every round). m is updated every round; only its application waits for the
τ-th round. This accelerates along the recent direction of travel, as the paper intends
("the last update can act as a positive acceleration"). ``variant="flgo"`` uses the public
code's sign, Δ_t = θ̄ − θ^t, every round (τ must be 1), which pulls θ^{t+1} back toward θ^t:
it damps instead.

**Client momentum** (eqs. 1-2): v ← μ v + ∇ℓ(batch), w ← w − lr·v, v = 0 at the start of each
round. The clients run it ([`fairagg.local`][fairagg.local]); the rule asks for it through its
[`LocalSpec`][fairagg.types.LocalSpec] (``momentum=client_momentum``). The paper's text calls v "the
exponentially weighted average of the gradient", which would be v ← μv + (1 − μ)∇ℓ; SPEC §9 and
the public code (PyTorch's SGD momentum) use v ← μv + ∇ℓ, whose steps are 1/(1 − μ) times
larger. The two coincide with lr scaled by (1 − μ).

Differences of the public code, besides the sign: it uses one ``gamma`` (default 0.9) for the
client and the server momentum, the client learning rate as η_s, base-2 logarithms, and no
guards (0/0 when every accuracy is 0). To compare with it, pass ``variant="flgo"`` (whose η_s
defaults to the round's learning rate ``reports.lr``) and ``gamma=client_momentum=g``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._checks import as_float_array, as_int_array, check_choice, check_count, check_int, check_real
from ..kernels import check_backend
from ..types import (
    ACCURACY_SOURCES,
    Aggregate,
    LocalSpec,
    RoundReports,
    Rule,
    check_reports,
    check_state,
)
from .fedavg import apply_weighted_update

__all__ = [
    "FEDFA_VARIANTS",
    "FedFaInformation",
    "FedFaServerStep",
    "FedFaState",
    "fedfa",
    "fedfa_information",
    "fedfa_server_step",
    "fedfa_weights",
]

#: ``"paper"``: Δ_t = θ^t − θ̄ (acceleration); ``"flgo"``: the public code's Δ_t = θ̄ − θ^t.
FEDFA_VARIANTS = ("paper", "flgo")

#: The paper's constants of eqs. 11 and 12.
EPS_ACCURACY = 1e-6
EPS_FREQUENCY = 1e-5


class FedFaInformation(NamedTuple):
    """The terms of FedFa's weights (eqs. 9-14) for the m selected clients, each shape (m,).

    Attributes
    ----------
    accuracy_share : ndarray
        A_k = acc_k / Σ acc (eq. 9); uniform 1/m when every accuracy is 0.
    frequency_share : ndarray
        P_k = f_k / Σ f (eq. 10).
    accuracy_information : ndarray
        I^a_k = max(0, −log(A_k + ε_a)) (eq. 11, floored).
    frequency_information : ndarray
        I^f_k = max(0, −log(1 − P_k + ε_f)) (eq. 12, floored).
    accuracy_part : ndarray
        I^a_k / Σ I^a (eq. 13); uniform when every accuracy is 0, [1] when m = 1.
    frequency_part : ndarray
        I^f_k / Σ I^f (eq. 14); [1] when m = 1.
    """

    accuracy_share: np.ndarray
    frequency_share: np.ndarray
    accuracy_information: np.ndarray
    frequency_information: np.ndarray
    accuracy_part: np.ndarray
    frequency_part: np.ndarray


class FedFaServerStep(NamedTuple):
    """What [`fedfa_server_step`][fairagg.rules.fedfa.fedfa_server_step] returns.

    Attributes
    ----------
    params : ndarray, shape (d,)
        θ^{t+1}.
    momentum : ndarray, shape (d,)
        The updated server momentum m.
    pseudo_gradient : ndarray, shape (d,)
        Δ_t (θ^t − θ̄, or θ̄ − θ^t for ``variant="flgo"``).
    """

    params: np.ndarray
    momentum: np.ndarray
    pseudo_gradient: np.ndarray


class FedFaState(NamedTuple):
    """State of the ``fedfa`` rule: the server momentum m (shape (d,)) and the number of steps
    taken so far."""

    momentum: np.ndarray
    rounds: int


def _check_eps(eps_a: Any, eps_f: Any) -> tuple[float, float]:
    return (
        check_real(eps_a, "eps_a", low=0.0, high=0.5, low_open=True, high_open=True),
        check_real(eps_f, "eps_f", low=0.0, high=0.5, low_open=True, high_open=True),
    )


def _information(x: np.ndarray) -> np.ndarray:
    """−log x where x < 1, else 0 (the floor of the module docstring)."""
    out = np.zeros_like(x)
    below = x < 1.0
    out[below] = -np.log(x[below])
    return out


def fedfa_information(
    accuracies: Any,
    participations: Any,
    *,
    eps_a: float = EPS_ACCURACY,
    eps_f: float = EPS_FREQUENCY,
) -> FedFaInformation:
    """The shares, information quantities and normalised parts of FedFa's weights (eqs. 9-14).

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Training accuracies acc_k in [0, 1] (of θ^t before local training, by default).
    participations : array_like of int, shape (m,)
        f_k ≥ 1, rounds each client has been selected so far, this one included.
    eps_a, eps_f : float
        ε_a and ε_f of eqs. 11 and 12, in (0, 1/2) (defaults 1e-6 and 1e-5, the paper's).

    Returns
    -------
    FedFaInformation
        See the module docstring for the guards.

    Raises
    ------
    ValueError
        On bad input, naming the argument, or when ``eps_f`` is so large that no client has
        positive frequency information (every P_k ≤ ε_f).
    """
    acc = as_float_array(accuracies, "accuracies", ndim=1, dtype=np.float64, allow_int=True)
    if acc.size == 0:
        raise ValueError("accuracies must hold at least one client")
    if np.any(acc < 0.0) or np.any(acc > 1.0):
        raise ValueError(f"accuracies must lie in [0, 1]; got {acc.min()}..{acc.max()}")
    f = as_int_array(participations, "participations", min_value=1)
    m = acc.size
    if f.shape != (m,):
        raise ValueError(
            f"participations must have shape ({m},) to match accuracies; got {f.shape}"
        )
    eps_a, eps_f = _check_eps(eps_a, eps_f)
    total = acc.sum()
    A = acc / total if total > 0.0 else np.full(m, 1.0 / m)
    P = f / f.sum(dtype=np.float64)
    Ia = _information(A + eps_a)
    # 1 − P_k + ε_f, in log1p form: accurate where P_k is close to ε_f.
    If = np.zeros(m)
    pos = P > eps_f
    If[pos] = -np.log1p(eps_f - P[pos])
    if m == 1:
        one = np.ones(1)
        return FedFaInformation(A, P, Ia, If, one, one.copy())
    a_part = Ia / Ia.sum() if total > 0.0 else np.full(m, 1.0 / m)
    s = If.sum()
    if not s > 0.0:
        raise ValueError(
            f"eps_f = {eps_f} is at least every participation share (largest {P.max():.3g}): no "
            "client has positive frequency information; lower eps_f"
        )
    return FedFaInformation(A, P, Ia, If, a_part, If / s)


def _check_alpha_beta(alpha: Any, beta: Any) -> tuple[float, float]:
    a = check_real(alpha, "alpha", low=0.0, high=1.0)
    if beta is None:
        return a, 1.0 - a
    b = check_real(beta, "beta", low=0.0, high=1.0)
    if abs(a + b - 1.0) > 1e-12:
        raise ValueError(f"alpha + beta must equal 1 (eq. 15); got {a} + {b} = {a + b}")
    return a, b


def fedfa_weights(
    accuracies: Any,
    participations: Any,
    *,
    alpha: float = 0.5,
    beta: float | None = None,
    eps_a: float = EPS_ACCURACY,
    eps_f: float = EPS_FREQUENCY,
) -> np.ndarray:
    """FedFa's aggregation weights p_k = α I^a_k/Σ I^a + β I^f_k/Σ I^f (eq. 15, reconstructed).

    Parameters
    ----------
    accuracies, participations, eps_a, eps_f
        See [`fedfa_information`][fairagg.rules.fedfa.fedfa_information].
    alpha : float
        α ∈ [0, 1], the weight of the accuracy information (default 0.5).
    beta : float, optional
        β, the weight of the participation information; default 1 − α. When given, α + β must
        be 1 (to 1e-12).

    Returns
    -------
    ndarray of float64, shape (m,)
        Non-negative weights summing to 1.
    """
    a, b = _check_alpha_beta(alpha, beta)
    info = fedfa_information(accuracies, participations, eps_a=eps_a, eps_f=eps_f)
    return a * info.accuracy_part + b * info.frequency_part


def fedfa_server_step(
    params: Any,
    average: Any,
    momentum: Any,
    *,
    gamma: float,
    eta_s: float,
    apply: bool = True,
    variant: str = "paper",
) -> FedFaServerStep:
    """FedFa's server momentum step (eqs. 3-7, reconstructed; SPEC §9).

    Δ_t = θ^t − θ̄ (``variant="paper"``) or θ̄ − θ^t (``"flgo"``); m ← γ m + (1 − γ) Δ_t;
    θ^{t+1} = θ̄ − η_s m if ``apply`` (the rounds t ≡ 0 mod τ), else θ̄.

    Parameters
    ----------
    params : ndarray, shape (d,)
        θ^t.
    average : ndarray, shape (d,)
        θ̄ = Σ p_k θ_k, the information-weighted average of the round.
    momentum : ndarray, shape (d,)
        The server momentum before this round (zeros before round 1).
    gamma : float
        γ ∈ [0, 1]; γ = 1 keeps m at its initial 0.
    eta_s : float
        η_s ≥ 0, the server step on the momentum; 0 gives θ̄.
    apply : bool
        Whether this round applies the correction (eq. 7); m is updated either way.
    variant : {"paper", "flgo"}

    Returns
    -------
    FedFaServerStep
        New arrays in the promoted float dtype of the inputs.
    """
    theta = as_float_array(params, "params", ndim=1)
    avg = as_float_array(average, "average", shape=theta.shape)
    mom = as_float_array(momentum, "momentum", shape=theta.shape)
    g = check_real(gamma, "gamma", low=0.0, high=1.0)
    eta = check_real(eta_s, "eta_s", low=0.0)
    check_choice(variant, "variant", FEDFA_VARIANTS)
    if not isinstance(apply, (bool, np.bool_)):
        raise TypeError(f"apply must be a bool; got {type(apply).__name__}")
    dtype = np.result_type(theta, avg, mom)

    def server(
        th: np.ndarray, av: np.ndarray, mo: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        delta = np.subtract(th, av, dtype=dtype)
        if variant == "flgo":
            np.negative(delta, out=delta)
        new_m = (g * mo + (1.0 - g) * delta).astype(dtype, copy=False)
        new = np.subtract(av, eta * new_m, dtype=dtype) if apply else av.astype(dtype, copy=True)
        return new, new_m, delta

    with np.errstate(over="ignore", invalid="ignore"):
        out = server(theta, avg, mom)
        if not all(np.all(np.isfinite(a)) for a in out):
            # The step is homogeneous in (θ^t, θ̄, m): near float64's limit θ^t − θ̄ can
            # overflow where the result does not. Compute it on them divided by 2^8 (exact at
            # that end of the range) and scale back.
            small = server(*(np.ldexp(a, -8) for a in (theta, avg, mom)))
            out = tuple(np.ldexp(a, 8).astype(dtype, copy=False) for a in small)
    if not all(np.all(np.isfinite(a)) for a in out):
        raise ValueError(
            "the server step overflows float64: params, average and momentum near 1.8e308, or "
            "eta_s too large"
        )
    return FedFaServerStep(*out)


def fedfa(
    *,
    alpha: float = 0.5,
    beta: float | None = None,
    gamma: float = 0.5,
    eta_s: float | None = None,
    tau: int = 1,
    client_momentum: float = 0.9,
    eps_a: float = EPS_ACCURACY,
    eps_f: float = EPS_FREQUENCY,
    accuracy_source: str = "global",
    variant: str = "paper",
    backend: str = "numpy",
) -> Rule:
    """FedFa as a rule (SPEC §9; the formulas are reconstructed, see the module docstring).

    Parameters
    ----------
    alpha, beta : float
        Weights of the accuracy and the participation information, α + β = 1 (eq. 15); default
        α = β = 0.5, one of the paper's three settings.
    gamma : float
        Server momentum factor γ ∈ [0, 1] (default 0.5, the paper's in every experiment).
    eta_s : float, optional
        Server step η_s ≥ 0 on the momentum; 0 turns the server momentum off. Default: 1 for
        ``variant="paper"`` (the paper gives no value), and for ``variant="flgo"`` the round's
        client learning rate ``reports.lr``, as the public code does (with η_s = 1 its sign
        would cancel the round's step once m settles).
    tau : int
        τ ≥ 1: apply the server correction in rounds t ≡ 0 (mod τ), t counted from 1 (eq. 7;
        the paper also uses 3). τ larger than the number of rounds never applies it.
    client_momentum : float
        μ ∈ [0, 1) of the clients' momentum SGD (eqs. 1-2; default 0.9, the paper's for the
        less heterogeneous data, 0.5 for the more heterogeneous); 0 is plain SGD. The simulator
        reads it from ``rule.local.momentum``.
    eps_a, eps_f : float
        ε_a, ε_f of eqs. 11-12, in (0, 1/2).
    accuracy_source : {"global", "local"}
        Which training accuracy the clients report: of θ^t before local training (default, SPEC
        §0 and the public code) or of the locally trained model θ^t − δ_k (the paper's text,
        "the client trains the model locally and sends the training accuracy").
    variant : {"paper", "flgo"}
        Server momentum sign: acceleration (default) or the public code's damping (τ = 1 only).
    backend : {"numpy", "numba", "cuda"}
        Backend of the weighted average.

    Notes
    -----
    ``info``: ``"weights"`` p_k, the weights of θ̄ = θ^t − Σ p_k δ_k (θ^{t+1} = θ̄ − η_s m in
    correction rounds), ``"accuracy_part"``, ``"frequency_part"`` (eqs. 13-14) and
    ``"server_correction"`` (whether t ≡ 0 mod τ, so that this round applied −η_s m).

    References
    ----------
    .. [1] W. Huang, T. Li, D. Wang, S. Du, J. Zhang, "Fairness and Accuracy in Federated Learning",
       arXiv:2012.10069, 2020.
    .. [2] The fairagg Specification: [SPEC §9 FedFa (reconstructed)][spec-9],
       [SPEC §0 What a selected client reports][spec-0].
    """
    a, b = _check_alpha_beta(alpha, beta)
    g = check_real(gamma, "gamma", low=0.0, high=1.0)
    eta = None if eta_s is None else check_real(eta_s, "eta_s", low=0.0)
    if eta is None and variant == "paper":
        eta = 1.0
    tau = check_int(tau, "tau", low=1)
    mu = check_real(client_momentum, "client_momentum", low=0.0, high=1.0, high_open=True)
    e_a, e_f = _check_eps(eps_a, eps_f)
    check_choice(accuracy_source, "accuracy_source", ACCURACY_SOURCES)
    check_choice(variant, "variant", FEDFA_VARIANTS)
    check_backend(backend)
    if variant == "flgo" and tau != 1:
        raise ValueError(
            f"tau must be 1 with variant='flgo' (the public code corrects every round); got {tau}"
        )
    needs = ("accuracies", "participations")

    def init(params: np.ndarray, num_clients: int) -> FedFaState:
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_count(num_clients, "num_clients", low=1)
        return FedFaState(np.zeros(theta.shape[0], dtype=theta.dtype), 0)

    def step(params: np.ndarray, reports: RoundReports, state: FedFaState) -> Aggregate:
        check_state(state, FedFaState, "fedfa")
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_reports(reports, theta, needs=needs)
        info = fedfa_information(reports.accuracies, reports.participations, eps_a=e_a, eps_f=e_f)
        p = a * info.accuracy_part + b * info.frequency_part
        avg = apply_weighted_update(theta, reports.deltas, p, backend=backend)
        t = state.rounds + 1
        apply = t % tau == 0
        step_size = eta
        if step_size is None:  # variant="flgo": the clients' learning rate
            if reports.lr is None:
                raise ValueError(
                    "variant='flgo' takes eta_s from reports.lr (the clients' learning rate), "
                    "which is None: pass eta_s"
                )
            step_size = reports.lr
        res = fedfa_server_step(
            theta, avg, state.momentum, gamma=g, eta_s=step_size, apply=apply, variant=variant
        )
        out = {
            "weights": p,
            "accuracy_part": info.accuracy_part,
            "frequency_part": info.frequency_part,
            "server_correction": bool(apply),
        }
        return Aggregate(res.params, FedFaState(res.momentum, t), out)

    hyper = {
        "alpha": a,
        "beta": b,
        "gamma": g,
        "eta_s": eta,
        "tau": tau,
        "client_momentum": mu,
        "eps_a": e_a,
        "eps_f": e_f,
        "accuracy_source": accuracy_source,
        "variant": variant,
        "backend": backend,
    }
    return Rule("fedfa", init, step, hyper, LocalSpec(momentum=mu, accuracy_source=accuracy_source))
