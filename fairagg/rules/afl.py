"""Agnostic Federated Learning (Mohri, Sivek & Suresh 2019), as the q-FFL and FedFV papers run
it (SPEC §3).

AFL solves min_θ max_{λ∈Δ} Σ_k λ_k F_k(θ) by simultaneous gradient descent-ascent with every
one of the K clients in every round:

.. math::

    \\theta^{t+1} = \\theta^t - \\gamma_w \\sum_k \\lambda^t_k g_k, \\qquad
    \\lambda^{t+1} = \\Pi_\\Delta\\big(\\lambda^t + \\gamma_\\lambda F(\\theta^t)\\big),

g_k the (full-batch or minibatch) gradient ∇F_k(θ^t), F(θ^t) the vector of the clients' losses,
Π_Δ the exact Euclidean simplex projection
([`fairagg.simplex.project_simplex`][fairagg.simplex.project_simplex], the sort with the inclusive
sum, not the public q-FFL code's off-by-one), λ⁰ = 1/K. The reported model is the average θ̄^T =
(1/T) Σ_{t=1}^T θ^t of the iterates after each round.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._checks import as_float_array, check_count, check_int, check_real
from ..kernels import check_backend, weighted_update
from ..simplex import check_simplex_point, project_simplex
from ..types import (
    Aggregate,
    LocalSpec,
    RoundReports,
    Rule,
    check_reports,
    check_state,
    client_indices,
)

__all__ = ["AFLState", "AFLStep", "afl", "afl_step"]


class AFLStep(NamedTuple):
    """One AFL round: ``params`` θ^{t+1} and ``mixture`` λ^{t+1}."""

    params: np.ndarray
    mixture: np.ndarray


class AFLState(NamedTuple):
    """State of the ``afl`` rule.

    Attributes
    ----------
    mixture : ndarray, shape (K,)
        λ^t on the simplex, indexed by client id.
    average : ndarray, shape (d,)
        θ̄ = mean of the iterates θ^1..θ^t (the initial parameters before the first round).
    rounds : int
        t, the number of rounds taken.
    """

    mixture: np.ndarray
    average: np.ndarray
    rounds: int


def afl_step(
    params: Any,
    grads: Any,
    losses: Any,
    mixture: Any,
    lr: float,
    lambda_lr: float,
    *,
    backend: str = "numpy",
) -> AFLStep:
    """One round of AFL's descent-ascent (SPEC §3).

    Parameters
    ----------
    params : array_like, shape (d,)
        θ^t.
    grads : array_like, shape (K, d)
        g_k = ∇F_k(θ^t) of every client.
    losses : array_like, shape (K,)
        F_k(θ^t), non-negative.
    mixture : array_like, shape (K,)
        λ^t, a point of the simplex.
    lr, lambda_lr : float
        γ_w > 0 and γ_λ > 0.
    backend : {"numpy", "numba", "cuda"}
        Backend of the descent step's pass over the (K, d) gradients
        ([`fairagg.kernels`][fairagg.kernels]).

    Returns
    -------
    AFLStep
        θ^{t+1} = θ^t − γ_w Σ_k λ_k g_k and λ^{t+1} = Π_Δ(λ^t + γ_λ F(θ^t)).
    """
    theta = as_float_array(params, "params", ndim=1, dtype=np.float64)
    G = as_float_array(grads, "grads", ndim=2, dtype=np.float64, min_size=1)
    if G.shape[1] != theta.size:
        raise ValueError(f"grads must have shape (K, {theta.size}) to match params")
    K = G.shape[0]
    F = as_float_array(losses, "losses", shape=(K,), dtype=np.float64, allow_int=True)
    if F.min() < 0:
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    lam = check_simplex_point(
        as_float_array(mixture, "mixture", shape=(K,), dtype=np.float64), "mixture"
    )
    gw = check_real(lr, "lr", low=0.0, low_open=True)
    gl = check_real(lambda_lr, "lambda_lr", low=0.0, low_open=True)
    check_backend(backend)
    with np.errstate(over="ignore", invalid="ignore"):  # diagnosed below
        new, maybe_finite = weighted_update(theta, G, gw * lam, backend)
    if not maybe_finite and not np.all(np.isfinite(new)):
        raise ValueError("the AFL step overflowed float64: lr or grads are too large")
    return AFLStep(new, project_simplex(lam + gl * F))


def afl(
    *,
    lr: float | None = None,
    lambda_lr: float = 0.01,
    batch_size: int | None = None,
    backend: str = "numpy",
) -> Rule:
    """AFL as a rule (full participation; the clients report gradients).

    Parameters
    ----------
    lr : float, optional
        γ_w > 0. Default: the simulation's learning rate (``reports.lr``).
    lambda_lr : float
        γ_λ > 0, the mixture's step.
    batch_size : int, optional
        Gradients on one minibatch of this size per client (None: full batch).
    backend : {"numpy", "numba", "cuda"}
        Backend of the descent step (see [`afl_step`][fairagg.rules.afl.afl_step]).

    Notes
    -----
    ``info``: ``"weights"`` γ_w λ_k, the weight of g_k in the step; ``"mixture"`` λ^{t+1}
    (indexed by client id); ``"model"`` the reported average θ̄ of the iterates, which the
    simulator evaluates. The returned ``params`` is the iterate θ^{t+1} the next round starts
    from.

    References
    ----------
    .. [1] M. Mohri, G. Sivek, A. T. Suresh, "Agnostic Federated Learning", ICML 2019.
    .. [2] The fairagg Specification: [SPEC §3 AFL][spec-3],
       [SPEC §0 What a selected client reports][spec-0].
    """
    gw0 = None if lr is None else check_real(lr, "lr", low=0.0, low_open=True)
    gl = check_real(lambda_lr, "lambda_lr", low=0.0, low_open=True)
    bsz = None if batch_size is None else check_int(batch_size, "batch_size", low=1)
    check_backend(backend)

    def init(params: np.ndarray, num_clients: int) -> AFLState:
        theta = as_float_array(params, "params", ndim=1)
        K = check_count(num_clients, "num_clients", low=1)
        return AFLState(np.full(K, 1.0 / K), theta.copy(), 0)

    def step(params: np.ndarray, reports: RoundReports, state: AFLState) -> Aggregate:
        check_state(state, AFLState, "afl")
        theta = as_float_array(params, "params", ndim=1, finite=False)
        check_reports(reports, theta, needs=("losses", "gradients"))
        K = state.mixture.size
        ids = client_indices(reports, K)
        if ids.size != K:
            raise ValueError(
                f"afl needs every one of the K = {K} clients in every round; got m = {ids.size}"
            )
        gw = gw0 if gw0 is not None else reports.lr
        if gw is None:
            raise ValueError("afl needs γ_w: build it with lr=..., or pass reports with lr set")
        lam = state.mixture[ids]  # in report order
        res = afl_step(theta, reports.gradients, reports.losses, lam, gw, gl, backend=backend)
        mixture = np.empty(K)
        mixture[ids] = res.mixture
        t = state.rounds + 1
        new = res.params.astype(theta.dtype, copy=False)
        average = state.average + (new - state.average) / t
        info = {"weights": gw * lam, "mixture": mixture, "model": average}
        return Aggregate(new, AFLState(mixture, average, t), info)

    hyper = {"lr": gw0, "lambda_lr": gl, "batch_size": bsz, "backend": backend}
    return Rule("afl", init, step, hyper, LocalSpec(report="gradients", gradient_batch_size=bsz))
