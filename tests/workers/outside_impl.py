"""Implementations written as outside code would be: NumPy only, nothing from fairagg.

The conformance tests copy the worker template (``fairagg check --template``), point its
``FORMULAS`` and ``RULES`` at this module and drive it through ``fairagg check --cmd``. A
``--mistake NAME`` argument on the worker's command line plants one known mistake. Importing
fairagg from here fails: the point is code that cannot reach fairagg's own functions.
"""

import sys

import numpy as np


class _NoFairagg:
    """An import hook that refuses fairagg, so this worker provably computes on its own."""

    def find_spec(self, name, path=None, target=None):
        if name == "fairagg" or name.startswith("fairagg."):
            raise ImportError("the outside worker must not import fairagg")
        return None


sys.meta_path.insert(0, _NoFairagg())
MISTAKE = sys.argv[sys.argv.index("--mistake") + 1] if "--mistake" in sys.argv else None


def project_simplex(y, total=1.0):
    """Sort-based projection onto the simplex; ``--mistake off-by-one`` is the public q-FFL
    (fair_flearn) code's loop, whose ρ test sums the entries before the i-th only."""
    u = sorted(y, reverse=True)
    rho = 0
    for i in range(len(u)):
        before = np.sum(u[:i]) if MISTAKE == "off-by-one" else np.sum(u[: i + 1])
        if u[i] + (total - before) / (i + 1) > 0:
            rho = i + 1
    tau = (total - np.sum(u[:rho])) / rho
    return np.maximum(np.asarray(y) + tau, 0.0)


def qfedavg(params, deltas, losses, lr, q, epsilon, lipschitz=None):
    """q-FedAvg (q-FFL Alg. 1, the public codes' Δw = L δ), stateless."""
    L = 1.0 / lr if lipschitz is None else lipschitz
    dw = L * deltas
    if MISTAKE == "shared-loss":  # one loss for every client, as Flower's QFedAvg
        losses = np.full_like(losses, np.mean(losses))
    eps = {"no-epsilon": 0.0, "flgo-epsilon": 1e-8}.get(MISTAKE, epsilon)
    F = losses + eps
    norm = np.sum(dw * dw, axis=1)
    if MISTAKE == "norm-not-squared":
        norm = np.sqrt(norm)
    Fq = F**q
    h = L * Fq if q == 0 else q * F ** (q - 1) * norm + L * Fq
    return params - (Fq @ dw) / h.sum()


class AFL:
    """AFL (Mohri et al.): one state per case, λ over all K clients."""

    def __init__(self, params, num_clients, lambda_lr, lr=None):
        self.lam = np.full(num_clients, 1.0 / num_clients)
        self.lambda_lr, self.lr = lambda_lr, lr

    def round(self, params, gradients, losses, client_ids, lr):
        gw = self.lr if self.lr is not None else lr
        lam = self.lam[client_ids]
        new = params - gw * (lam @ gradients)
        self.lam[client_ids] = project_simplex(lam + self.lambda_lr * losses)
        return {"params": new, "mixture": self.lam.copy()}


def fedavg_from_one(params, deltas, num_samples, round_index):
    """FedAvg that counts rounds from 1, as FLGo does: it refuses a round 0."""
    if round_index < 1:
        raise ValueError(f"rounds count from 1; got {round_index}")
    w = num_samples / num_samples.sum()
    return params - w @ deltas


def domain_limited(params, deltas, num_samples):
    """FedAvg for two or more clients only: one client is outside its domain by design."""
    if deltas.shape[0] < 2:
        raise SKIP("one client")
    w = num_samples / num_samples.sum()
    return params - w @ deltas


SKIP = Exception  # replaced by the worker with its Skip class
FORMULAS = {"project_simplex": project_simplex}
RULES = {"qfedavg": qfedavg, "afl": AFL, "fedavg": fedavg_from_one}
if MISTAKE == "domain":
    RULES["fedavg"] = domain_limited
