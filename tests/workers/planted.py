"""Implementations written as outside code would be, NumPy only (cvxpy for FedMGDA+'s QP),
nothing from fairagg, each with the known mistakes it can be given (``MISTAKE``, one name of
``PLANTED``): the conformance tests check them in Python and, through the worker
``outside_impl.py``, with ``fairagg check --cmd``.

Without a mistake each computes its rule or formula as the specification (the docs'
Specification page) states it, with its round-off
decisions (FedFV's conflict and zero thresholds); each mistake changes exactly one thing.
"""

from __future__ import annotations

import math

import numpy as np

MISTAKE: str | None = None
SKIP: type[Exception] = Exception  # replaced by the worker with its Skip class

#: The registered mistake each planted one is (fairagg.conformance's name), by target.
PLANTED: dict[str, dict[str, str]] = {
    "qfedavg": {
        "norm-not-squared": "norm-not-squared",
        "no-epsilon": "epsilon-missing",
        "flgo-epsilon": "epsilon=1e-08",
        "no-lipschitz": "lipschitz-missing",
        "shared-loss": "shared-loss",
    },
    "project_simplex": {"off-by-one": "off-by-one-projection"},
    "afl": {
        "off-by-one": "off-by-one-projection",
        "next-mixture": "next-mixture",
        "theta0-in-average": "theta0-in-average",
    },
    "fedmgda": {
        "norm-plus-c": "norm-plus-c c=1e-08",
        "renormalised-after-clipping": "renormalised-after-clipping",
    },
    "fedfv": {"reverse": "order=reverse", "already-projected": "already-projected"},
    "term": {"tilt-sign": "tilt-sign"},
    "propfair": {"uniform-weights": "uniform-weights"},
    "fedavg": {"float32": "float32"},
}


# ------------------------------------------------------------------------------- q-FedAvg
def qfedavg(params, deltas, losses, lr, q, epsilon, lipschitz=None):
    """q-FedAvg (q-FFL Alg. 1, the public codes' Δw = L δ), stateless."""
    L = 1.0 / lr if lipschitz is None else lipschitz
    dw = deltas.copy() if MISTAKE == "no-lipschitz" else L * deltas
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


# ----------------------------------------------------------------------- the projection
def project_simplex(y, total=1.0):
    """Sort-based projection onto the simplex; ``off-by-one`` is the public q-FFL code's
    (fair_flearn) loop, whose ρ test sums the entries before the i-th only (where no entry
    passes it divides by ρ = 0, as the published code does)."""
    u = sorted(float(v) for v in y)[::-1]
    rho = 0
    for i in range(len(u)):
        before = sum(u[:i]) if MISTAKE == "off-by-one" else sum(u[: i + 1])
        if u[i] + (total - before) / (i + 1) > 0:
            rho = i + 1
    tau = (total - sum(u[:rho])) / rho  # ZeroDivisionError where rho = 0, as published
    return np.maximum(np.asarray(y, dtype=float) + tau, 0.0)


# ---------------------------------------------------------------------------------- AFL
class AFL:
    """AFL (Mohri et al.): one state per case, λ over all K clients, the averaged model."""

    def __init__(self, params, num_clients, lambda_lr, lr=None):
        self.lam = np.full(num_clients, 1.0 / num_clients)
        self.lambda_lr, self.lr = lambda_lr, lr
        first = MISTAKE == "theta0-in-average"
        self.total = np.array(params, dtype=float) if first else np.zeros(len(params))
        self.count = 1 if first else 0

    def round(self, params, gradients, losses, client_ids, lr):
        gw = self.lr if self.lr is not None else lr
        lam = self.lam[client_ids]
        new_lam = project_simplex(lam + self.lambda_lr * losses)
        step_lam = new_lam if MISTAKE == "next-mixture" else lam
        new = params - gw * (step_lam @ gradients)
        self.lam[client_ids] = new_lam
        self.total = self.total + new
        self.count += 1
        return {"params": new, "mixture": self.lam.copy(), "model": self.total / self.count}


# ------------------------------------------------------------------------------ FedMGDA+
def _min_norm(g, lo, hi):
    """argmin ‖Σ λ_k g_k‖² over {Σλ = 1, lo ≤ λ ≤ hi}, with cvxpy (CLARABEL, tight)."""
    import cvxpy as cp

    lam = cp.Variable(g.shape[0])
    obj = cp.Minimize(cp.sum_squares(g.T @ lam))
    cp.Problem(obj, [cp.sum(lam) == 1, lam >= lo, lam <= hi]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
    return np.asarray(lam.value, dtype=float)


def fedmgda(params, deltas, num_samples, epsilon, server_lr):
    """FedMGDA+ (SPEC §8), stateless: λ* over the ε-box around n/Σn, θ − η Σ λ_k ĝ_k."""
    top = np.max(np.abs(deltas), axis=1, keepdims=True)  # ‖δ_k‖ without underflow
    R = np.divide(deltas, top, out=np.zeros_like(deltas), where=top > 0)
    norms = top[:, 0] * np.linalg.norm(R, axis=1)
    if MISTAKE == "norm-plus-c":  # FLGo's normalisation
        g = deltas / (norms + 1e-8)[:, None]
    else:
        r = np.linalg.norm(R, axis=1)
        g = np.divide(R, r[:, None], out=np.zeros_like(R), where=r[:, None] > 0)
    lam0 = num_samples / num_samples.sum()
    lo, hi = np.maximum(0.0, lam0 - epsilon), np.minimum(1.0, lam0 + epsilon)
    if MISTAKE == "renormalised-after-clipping":  # the box imposed after the solve
        lam = np.clip(_min_norm(g, 0.0, 1.0), lo, hi)
        lam = lam / lam.sum()
    else:
        lam = lam0 if epsilon == 0 else _min_norm(g, lo, hi)
    return params - server_lr * (lam @ g)


# ---------------------------------------------------------------------------------- FedFV
RHO = 1e-11  # SPEC §7's round-off threshold


def _keep_count(m, alpha):
    if alpha == 0:
        return 0
    x = (m - 1) * (1.0 - alpha)
    x -= 1e-9 * max(1.0, x)
    return m - max(0, math.ceil(x))


class FedFV:
    """FedFV (Algs. 1-3, paper variant) with SPEC §7's round-off decisions: each g̃ is kept as
    coefficients over the original updates, u·g is a conflict below −ρ ‖u‖ Σ|c_l| ‖u_l‖ and ḡ
    is 0 at or below ρ Σ|c_l| ‖u_l‖. ``reverse`` sorts the other way; ``already-projected``
    projects onto the projected g̃_j."""

    def __init__(self, params, num_clients, alpha, tau, **hyper):
        self.alpha, self.tau = alpha, tau
        self.t = 0
        self.latest = {}  # client → (update, round sent)

    def round(self, params, deltas, losses, client_ids):
        D = np.asarray(deltas, dtype=float)
        m = D.shape[0]
        order = np.argsort(losses, kind="stable")
        if MISTAKE == "reverse":
            order = order[::-1]
        kept = set(order[m - _keep_count(m, self.alpha) :].tolist())
        past = {c: v for c, v in self.latest.items() if c not in set(client_ids.tolist())}
        H = [v[0] for v in past.values()]
        U = np.vstack([D, *H]) if H else D
        norms = np.linalg.norm(U, axis=1)
        n_all = U.shape[0]
        C = np.zeros((m, n_all))
        C[:, :m] = np.eye(m)
        for i in range(m):
            if i in kept or norms[i] == 0:
                continue
            for j in order:
                if j == i or norms[j] == 0:
                    continue
                if MISTAKE == "already-projected":
                    t, t_size = C[j] @ U, np.abs(C[j]) @ norms
                    if np.linalg.norm(t) <= RHO * t_size:
                        continue
                else:
                    t = D[j]
                g = C[i] @ U
                if t @ g < -RHO * np.linalg.norm(t) * (np.abs(C[i]) @ norms):
                    coef = (t @ g) / (t @ t)
                    if MISTAKE == "already-projected":
                        C[i] = C[i] - coef * C[j]
                    else:
                        C[i, j] -= coef
        c = C.sum(axis=0) / m
        if self.tau and self.t >= self.tau:  # Alg. 3 over rounds t − τ, ..., t − 1
            rounds = [v[1] for v in past.values()]
            for r in range(self.t - self.tau, self.t):
                rows = [m + k for k, rr in enumerate(rounds) if rr == r]
                g_bar = c @ U
                size = np.abs(c) @ norms
                conflicting = [
                    k for k in rows if U[k] @ g_bar < -RHO * norms[k] * size and norms[k] > 0
                ]
                if not conflicting:
                    continue
                g_con = U[conflicting].sum(axis=0)
                dot, nn = g_bar @ g_con, g_con @ g_con
                if dot < 0 and nn > 0:
                    c[conflicting] -= dot / nn
        g_bar = c @ U
        if np.linalg.norm(g_bar) <= RHO * (np.abs(c) @ norms):
            g = np.zeros_like(g_bar)
        else:
            g = g_bar * np.linalg.norm(D.mean(axis=0)) / np.linalg.norm(g_bar)
        first_next = self.t + 1 - self.tau  # the history a later window can reach
        self.latest = {k: v for k, v in past.items() if v[1] >= first_next}
        if self.t >= first_next:
            for k, cid in enumerate(client_ids.tolist()):
                self.latest[cid] = (D[k].copy(), self.t)
        self.t += 1
        return params - g


# --------------------------------------------------------------- TERM, PropFair, FedAvg
def term(params, deltas, losses, num_samples, tilt):
    """TERM's paper variant (SPEC §6): ω_k ∝ n_k exp(t F_k) over the round's clients."""
    t = -tilt if MISTAKE == "tilt-sign" else tilt
    z = t * losses
    w = num_samples * np.exp(z - z.max())
    return params - (w / w.sum()) @ deltas


def propfair(params, deltas, num_samples, losses, M):
    """PropFair's server: FedAvg's weights n_k/Σ_S n (SPEC §6); losses must be below M."""
    if np.any(losses >= M):
        raise ValueError(f"losses must be below M = {M}")
    m = deltas.shape[0]
    w = np.full(m, 1.0 / m) if MISTAKE == "uniform-weights" else num_samples / num_samples.sum()
    return params - w @ deltas


def fedavg(params, deltas, num_samples):
    """FedAvg; ``float32`` computes it in single precision."""
    if MISTAKE == "float32":
        p = np.asarray(params, np.float32)
        D = np.asarray(deltas, np.float32)
        n = np.asarray(num_samples, np.float32)
        return p - (n / n.sum()) @ D
    return params - (num_samples / num_samples.sum()) @ deltas


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


FORMULAS = {"project_simplex": project_simplex}
RULES = {
    "qfedavg": qfedavg,
    "afl": AFL,
    "fedavg": fedavg_from_one,
    "fedmgda": fedmgda,
    "fedfv": FedFV,
    "term": term,
    "propfair": propfair,
}
