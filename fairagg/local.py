"""Local training of the selected clients: Numba-jitted minibatch SGD (the Layout guide, "The
spine: one round", step 2).

Each selected client k starts from the global parameters θ^t and runs ``epochs`` passes of
minibatch SGD over its training rows:

.. math::

    g &= \\nabla F_k(w; \\text{batch}) + \\mu_{\\text{prox}} (w - \\theta^t) \\\\
    v &\\leftarrow \\mu v + g, \\qquad w \\leftarrow w - \\text{lr}\\, v \\qquad (v = 0
    \\text{ at the start of every round})

(plain SGD for μ = 0; the proximal term is FedProx's μ/2 ||w − θ^t||²; the momentum form is
FedFa's client momentum, SPEC §9). With ``propfair_m = M`` the client trains on PropFair's
surrogate instead of its loss (SPEC §6): the minibatch gradient ∇f of the minibatch loss f is
scaled by 1/(M − f), the gradient of −log(1 − f/M), and where M − f < ε by 1/M (the
continuation f/M) or, with ``propfair_huber``, by 1/ε (the Huber continuation f/ε).

The client then reports (SPEC §0) its update δ_k = θ^t − w, written straight into row i of the
caller's (m, d) buffer, together with F_k(θ^t) and the training accuracy of θ^t, both computed on
its whole training split **before** training (the loss itself, whatever the training objective).

Conventions
-----------
- Each epoch visits the client's rows in a fresh random order; batches are consecutive slices of
  that order, of ``batch_size`` rows except the last, which holds the remaining ``n_k mod B`` rows
  when B does not divide n_k (nothing is dropped). Each step uses the batch's mean gradient.
- The order of client k in round t comes from ``np.random.default_rng([seed, 1, t, k])``:
  ``epochs`` successive calls of ``rng.permutation(n_k)`` (see
  [`client_shuffles`][fairagg.local.client_shuffles]). It depends on nothing else, so a run is
  bitwise reproducible and a client's update is the same whether the clients are trained one by one
  or in parallel, and whoever else was selected. The kernel draws these orders itself (NumPy's
  SeedSequence, PCG64 and shuffle, re-implemented and tested equal to NumPy's generator): creating a
  NumPy generator per client cost as much as a small client's training.
- [`sgd_reference`][fairagg.local.sgd_reference] is the same algorithm in plain NumPy on the model's
  NumPy gradient: the specification the Numba kernel is tested against. The kernel takes the
  same steps in another order of floating-point operations (a whole minibatch at a time, in
  zero-padded scratch arrays, with vectorised e^x and tanh within a few ulp of NumPy's), so it
  equals the reference to round-off, not bit for bit: after every step its update differs from
  the reference's by at most 1e-12 of the update's largest entry in float64 (tested for every
  variant: both models, tanh and ReLU, momentum, the proximal term, L2, PropFair's branches,
  float32 to the float32 tolerance). On one thread of a busy two-core host it ran the default
  experiment's round 18-55× (logistic regression) and 8-16× (the 60-32-10 MLP) faster than the
  reference loop (``validate/bench_local_sgd.py``).
- A model of your own (a subclass of [`FlatModel`][models.FlatModel] providing the NumPy methods
  its docstring lists) has no compiled kernel: ``train_clients`` runs the reference loop itself
  for it, with the same shuffles, and ``client_gradients`` its NumPy gradient; nothing in
  fairagg changes for it. So does a subclass of a built-in model that redefines one of its NumPy
  methods.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._checks import (
    as_float_array,
    as_int_array,
    check_count,
    check_federated_data,
    check_int,
    check_real,
)
from .kernels._threads import run_tasks, threads_for
from .models import FlatModel
from .models._base import SegmentEvaluation
from .models._kernels import gradient_one_client, sgd_one_client

__all__ = [
    "LocalResult",
    "check_propfair",
    "client_gradients",
    "client_shuffles",
    "propfair_scale",
    "sgd_reference",
    "train_clients",
    "trained_accuracies",
]

#: Stream tag of the local-training shuffles in ``default_rng([seed, tag, round, client])``.
SHUFFLE_STREAM = 1

#: The most shuffled row indices one ``client_shuffles`` call may hold (epochs · rows), and the
#: most rows of one client that ``train_clients`` (or a minibatch ``client_gradients``)
#: shuffles: 2^31 int64s are 16 GiB.
MAX_SHUFFLE = 2**31


class LocalResult(NamedTuple):
    """What [`train_clients`][fairagg.local.train_clients] returns for the m clients it trained.

    Attributes
    ----------
    deltas : ndarray, shape (m, d)
        δ_k = θ^t − θ_k (the caller's buffer when one was passed).
    losses : ndarray of float64, shape (m,)
        F_k(θ^t): mean training loss of the received model, before training.
    accuracies : ndarray of float64, shape (m,)
        Training accuracy of θ^t, before training.
    num_samples : ndarray of int64, shape (m,)
        n_k, the size of each client's training split.
    """

    deltas: np.ndarray
    losses: np.ndarray
    accuracies: np.ndarray
    num_samples: np.ndarray


def client_shuffles(num_samples: int, epochs: int, seed: int, round_index: int, client: int):
    """The visiting order of one client's rows in one round, shape (epochs, num_samples).

    Row e is ``rng.permutation(num_samples)`` for the e-th call on
    ``rng = np.random.default_rng([seed, 1, round_index, client])``.
    """
    num_samples = check_count(num_samples, "num_samples", low=1)
    epochs = check_count(epochs, "epochs", low=1)
    _check_shuffle_size(num_samples, epochs)
    seed = check_int(seed, "seed", low=0)
    round_index = check_int(round_index, "round_index", low=0)
    client = check_int(client, "client", low=0)
    rng = np.random.default_rng([seed, SHUFFLE_STREAM, round_index, client])
    out = np.empty((epochs, num_samples), dtype=np.int64)
    for e in range(epochs):
        out[e] = rng.permutation(num_samples)
    return out


def _seed_words(*values: int) -> list[int]:
    """The 32-bit words NumPy's SeedSequence reads from the non-negative integers ``values``
    (least significant first, one word for 0): ``default_rng([a, b, ...])`` hashes them in this
    order. The kernels' shuffles start from them (``models._kernels.shuffles``)."""
    out = []
    for v in values:
        if v < 0:
            raise ValueError(f"seed words come from integers >= 0; got {v}")
        out.append(v & 0xFFFFFFFF)
        v >>= 32
        while v:
            out.append(v & 0xFFFFFFFF)
            v >>= 32
    return out


def _check_shuffle_size(num_samples: int, epochs: int) -> None:
    if num_samples * epochs > MAX_SHUFFLE:
        raise ValueError(
            f"epochs · num_samples = {epochs}·{num_samples} exceeds {MAX_SHUFFLE} entries"
        )


def _check_shuffled_sizes(ids: np.ndarray, sizes: np.ndarray, what: str) -> None:
    """Refuse a client whose rows ``what`` would shuffle beyond ``MAX_SHUFFLE``, naming it."""
    if sizes.size and sizes.max() > MAX_SHUFFLE:
        i = int(np.argmax(sizes))
        raise ValueError(
            f"client {int(ids[i])} has {int(sizes[i])} training rows; {what} shuffles at most"
            f" {MAX_SHUFFLE} rows a client"
        )


def _check_hyper(epochs: Any, batch_size: Any, lr: Any, momentum: Any, prox_mu: Any):
    return (
        check_count(epochs, "epochs", low=1),
        check_count(batch_size, "batch_size", low=1),
        check_real(lr, "lr", low=0.0, low_open=True),
        check_real(momentum, "momentum", low=0.0, high=1.0, high_open=True),
        check_real(prox_mu, "prox_mu", low=0.0),
    )


def check_propfair(
    m: Any,
    epsilon: Any,
    huber: Any,
    names: tuple[str, str, str] = ("propfair_m", "propfair_epsilon", "propfair_huber"),
) -> tuple[float, float, bool]:
    """Validate PropFair's surrogate settings; returns (M, ε, huber), M = 0.0 when ``m`` is None
    (train on the loss itself). ``names`` are the argument names used in error messages."""
    if not isinstance(huber, (bool, np.bool_)):
        raise TypeError(f"{names[2]} must be a bool; got {type(huber).__name__}")
    eps = check_real(epsilon, names[1], low=0.0, low_open=True)
    if m is None:
        return 0.0, eps, bool(huber)
    M = check_real(m, names[0], low=0.0, low_open=True)
    if not M > eps:
        raise ValueError(f"{names[0]} must exceed {names[1]} = {eps}; got {M}")
    return M, eps, bool(huber)


def propfair_scale(f: float, m: float, epsilon: float, huber: bool) -> float:
    """The factor PropFair's surrogate puts on the gradient of a minibatch loss f (SPEC §6):
    d/df of −log(1 − f/M) = 1/(M − f) where M − f ≥ ε, else 1/M (1/ε with ``huber``).
    M > ε > 0, as [`check_propfair`][fairagg.local.check_propfair] requires."""
    f = check_real(f, "f")
    m = check_real(m, "m")
    m, epsilon, huber = check_propfair(m, epsilon, huber, ("m", "epsilon", "huber"))
    return _propfair_factor(f, m, epsilon, huber)


def _propfair_factor(f: float, m: float, epsilon: float, huber: bool) -> float:
    gap = m - f
    if gap >= epsilon:
        return 1.0 / gap
    return 1.0 / epsilon if huber else 1.0 / m


def train_clients(
    model: FlatModel,
    params: np.ndarray,
    data: Any,
    clients: Any,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float = 0.0,
    prox_mu: float = 0.0,
    seed: int = 0,
    round_index: int = 0,
    out: np.ndarray | None = None,
    parallel: bool = True,
    propfair_m: float | None = None,
    propfair_epsilon: float = 0.2,
    propfair_huber: bool = False,
) -> LocalResult:
    """Train the clients ``clients`` locally from ``params`` and collect their reports.

    Parameters
    ----------
    model : fairagg.models.FlatModel
        ``LogisticRegression``, ``MLP`` (compiled kernels) or a subclass of your own (the NumPy
        reference loop of [`sgd_reference`][fairagg.local.sgd_reference], client by client in
        the calling thread, with the same shuffles: see [`FlatModel`][models.FlatModel]).
    params : ndarray, shape (d,)
        θ^t, float32 or float64; training runs in this dtype.
    data : fairagg.data.FederatedData
        Uses ``X_train``, ``y_train`` and ``train_offsets``.
    clients : array_like of int, shape (m,)
        Indices of the selected clients; row i of the outputs belongs to ``clients[i]``.
    epochs, batch_size, lr : int, int, float
        E ≥ 1 passes, batch size B ≥ 1, step lr > 0.
    momentum : float
        μ in [0, 1); v is reset to 0 each round.
    prox_mu : float
        Coefficient ≥ 0 of the proximal term μ/2 ||w − θ^t||² (FedProx).
    seed, round_index : int
        Select the shuffles (see [`client_shuffles`][fairagg.local.client_shuffles]).
    out : ndarray, shape (m, d), optional
        Preallocated C-contiguous buffer of the dtype of ``params`` that receives the updates.
    parallel : bool
        Train clients in parallel threads, the largest first, each client by one thread
        (``fairagg.kernels._threads``); the result is bitwise identical to ``False``. Models
        without the compiled kernel train in the calling thread.
    propfair_m, propfair_epsilon, propfair_huber : float or None, float, bool
        Train on PropFair's surrogate with constant M (> ε), see the module docstring; None
        trains on the loss.

    Returns
    -------
    LocalResult
    """
    _check_model(model)
    theta = np.ascontiguousarray(model.check_params(params))
    epochs, batch_size, lr, momentum, prox_mu = _check_hyper(
        epochs, batch_size, lr, momentum, prox_mu
    )
    pf = check_propfair(propfair_m, propfair_epsilon, propfair_huber)
    seed, round_index = _check_seeds(seed, round_index)
    ids, X, y, los, his = _client_rows(clients, data, theta.dtype)
    m, d = ids.size, theta.size
    out = _check_out(out, m, d, theta.dtype)
    sizes = his - los
    _check_shuffled_sizes(ids, sizes, "local SGD")  # the kernel's shuffles draw 32-bit words
    losses = np.empty(m, dtype=np.float64)
    accs = np.empty(m, dtype=np.float64)
    dims = model._kernel_dims()
    if dims is None:  # a model without the compiled kernel: the NumPy reference loop
        for i in range(m):
            lo, hi = los[i], his[i]
            Xk, yk = model.check_data(X[lo:hi], y[lo:hi])
            order = client_shuffles(int(hi - lo), epochs, seed, round_index, int(ids[i]))
            w, losses[i], accs[i] = _reference_sgd(
                model, theta, Xk, yk, order, batch_size, lr, momentum, prox_mu, pf
            )
            out[i] = theta - w
        return LocalResult(out, losses, accs, sizes)
    H, act = dims
    hyper = (
        epochs,
        batch_size,
        lr,
        momentum,
        prox_mu,
        H,
        model.n_classes,
        act,
        float(model.l2),
        *pf,
    )
    # F_k(θ^t) and the accuracy of θ^t: the model's evaluation of each client's rows (the same
    # numbers as ``model.evaluate_clients(θ^t, X_k, y_k, [0, n_k])``), its dense half in the
    # client's task, the rest for all clients at once afterwards
    evaluation = SegmentEvaluation(model, theta, sizes)
    stream = _seed_words(seed, SHUFFLE_STREAM, round_index)

    def client(i: int) -> None:
        # the kernel draws the client's shuffles itself: client_shuffles' orders (tested equal)
        lo, hi = int(los[i]), int(his[i])
        entropy = np.array(stream + _seed_words(int(ids[i])), dtype=np.uint64)
        sgd_one_client(theta, X, y, lo, hi - lo, entropy, hyper, out[i])
        evaluation.client(i, X, y, lo)

    work = 3 * epochs * int(sizes.sum()) * model._macs_per_row()  # forward and backward
    run_tasks(client, _largest_first(sizes), threads_for(work) if parallel else 1)
    losses, accs = evaluation.finish(model._penalty(theta))
    return LocalResult(out, losses, accs, sizes)


def _check_model(model: Any) -> None:
    """Refuse a model that is not a [`FlatModel`][models.FlatModel] (the contract local
    training relies on: see its docstring)."""
    if not isinstance(model, FlatModel):
        raise TypeError(f"model must be a fairagg.models.FlatModel; got {type(model).__name__}")


def _largest_first(sizes: np.ndarray) -> list[int]:
    """Client positions by decreasing size (ties in position order): the dynamic schedule then
    ends with the shortest tasks."""
    return np.argsort(-sizes, kind="stable").tolist()


def trained_accuracies(
    model: FlatModel, params: np.ndarray, deltas: np.ndarray, data: Any, clients: Any
) -> np.ndarray:
    """Training accuracy of each locally trained model θ^t − δ_k on its client's training split,
    shape (m,): the ``accuracy_source="local"`` report (FedFa, SPEC §0). Row i of ``deltas``
    belongs to ``clients[i]``."""
    _check_model(model)
    theta = model.check_params(params)
    ids, X, y, los, his = _client_rows(clients, data, theta.dtype)
    D = as_float_array(deltas, "deltas", ndim=2)
    if D.shape != (ids.size, theta.size):
        raise ValueError(f"deltas must have shape ({ids.size}, {theta.size}); got {D.shape}")
    out = np.empty(ids.size, dtype=np.float64)
    for i in range(ids.size):
        w = theta - D[i]
        out[i] = model.accuracy(w, X[los[i] : his[i]], y[los[i] : his[i]])
    return out


def _check_seeds(seed: Any, round_index: Any) -> tuple[int, int]:
    return check_int(seed, "seed", low=0), check_int(round_index, "round_index", low=0)


def _client_rows(clients: Any, data: Any, dtype: Any):
    """Validated client indices, the training arrays in ``dtype`` and each client's row range."""
    data = check_federated_data(data)
    ids = as_int_array(clients, "clients", ndim=1, min_value=0)
    offsets = np.asarray(data.train_offsets, dtype=np.int64)
    K = offsets.size - 1
    if ids.size == 0:
        raise ValueError("clients must name at least one client")
    if ids.max() >= K:
        raise ValueError(f"clients must be indices in [0, {K}); got {ids.max()}")
    X = np.ascontiguousarray(data.X_train, dtype=dtype)
    y = np.ascontiguousarray(data.y_train, dtype=np.int64)
    los, his = offsets[ids], offsets[ids + 1]
    sizes = his - los
    if np.any(sizes == 0):
        raise ValueError(f"clients {ids[sizes == 0].tolist()} have no training rows")
    return ids, X, y, los, his


def _check_out(out: Any, m: int, d: int, dtype: Any) -> np.ndarray:
    if out is None:
        return np.empty((m, d), dtype=dtype)
    if not (
        isinstance(out, np.ndarray)
        and out.shape == (m, d)
        and out.dtype == dtype
        and out.flags.c_contiguous
    ):
        raise ValueError(
            f"out must be a C-contiguous {np.dtype(dtype)} array of shape ({m}, {d}); got "
            + (f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__)
        )
    return out


def client_gradients(
    model: FlatModel,
    params: np.ndarray,
    data: Any,
    clients: Any,
    *,
    batch_size: int | None = None,
    seed: int = 0,
    round_index: int = 0,
    out: np.ndarray | None = None,
) -> LocalResult:
    """One gradient g_k = ∇F_k(θ^t) per selected client, for the SGD-type rules (SPEC §0).

    ``batch_size=None`` gives the full-batch gradient of the client's mean training loss. An
    integer B gives the mean gradient over the first B rows of the client's shuffle of the round,
    ``client_shuffles(n_k, 1, seed, round_index, k)[0][:B]`` (the full batch when n_k ≤ B).
    ``LocalResult.deltas`` holds the gradients (the caller's ``out`` buffer when given), with
    F_k(θ^t) and the training accuracy of θ^t over all the client's rows. Clients run in
    parallel threads; each gradient is computed by one thread, so results are reproducible. A
    model without the compiled kernel (a subclass of [`FlatModel`][models.FlatModel] of your
    own) computes them with its NumPy ``loss_and_grad``, ``loss``, ``grad`` and ``accuracy``,
    client by client in the calling thread.
    """
    _check_model(model)
    theta = np.ascontiguousarray(model.check_params(params))
    bsz = None if batch_size is None else check_count(batch_size, "batch_size", low=1)
    seed, round_index = _check_seeds(seed, round_index)
    ids, X, y, los, his = _client_rows(clients, data, theta.dtype)
    m, d = ids.size, theta.size
    out = _check_out(out, m, d, theta.dtype)
    sizes = his - los
    if bsz is None:
        bsz = int(sizes.max())
        perms, p0s = np.zeros(1, dtype=np.int64), np.zeros(m, dtype=np.int64)
    else:
        _check_shuffled_sizes(ids[sizes > bsz], sizes[sizes > bsz], "a minibatch gradient")
        take = np.minimum(sizes, bsz)
        p0s = np.concatenate([[0], np.cumsum(take)[:-1]]).astype(np.int64)
        perms = np.empty(int(take.sum()), dtype=np.int64)
        for i in range(m):
            if sizes[i] > bsz:
                order = client_shuffles(int(sizes[i]), 1, seed, round_index, int(ids[i]))[0]
                perms[p0s[i] : p0s[i] + bsz] = order[:bsz] + los[i]
    losses = np.empty(m, dtype=np.float64)
    accs = np.empty(m, dtype=np.float64)
    kernel = model._kernel_dims()
    if kernel is None:  # a model without the compiled kernel: its NumPy methods
        for i in range(m):
            lo, hi = los[i], his[i]
            Xk, yk = model.check_data(X[lo:hi], y[lo:hi])
            accs[i] = model.accuracy(theta, Xk, yk)
            if sizes[i] > bsz:
                losses[i] = model.loss(theta, Xk, yk)
                rows = perms[p0s[i] : p0s[i] + bsz]
                out[i] = model.grad(theta, X[rows], y[rows])
            else:
                losses[i], out[i] = model.loss_and_grad(theta, Xk, yk)
        return LocalResult(out, losses, accs, sizes)
    H, act = kernel
    dims = (H, model.n_classes, act, float(model.l2))
    all_rows = np.arange(X.shape[0], dtype=np.int64)

    def client(i: int) -> None:
        losses[i], accs[i] = gradient_one_client(
            theta, X, y, all_rows, los[i], his[i], perms, p0s[i], bsz, dims, out[i]
        )

    work = (int(sizes.sum()) + 2 * int(np.minimum(sizes, bsz).sum())) * model._macs_per_row()
    run_tasks(client, _largest_first(sizes), threads_for(work))
    return LocalResult(out, losses, accs, sizes)


def sgd_reference(
    model: FlatModel,
    params: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    order: np.ndarray,
    *,
    batch_size: int,
    lr: float,
    momentum: float = 0.0,
    prox_mu: float = 0.0,
    propfair_m: float | None = None,
    propfair_epsilon: float = 0.2,
    propfair_huber: bool = False,
) -> tuple[np.ndarray, float, float]:
    """One client's local SGD in plain NumPy: the specification of
    [`train_clients`][fairagg.local.train_clients].

    Parameters
    ----------
    model : fairagg.models.FlatModel
    params : ndarray, shape (d,)
        θ^t.
    X, y : ndarray, shapes (n, p) and (n,)
        The client's training rows.
    order : ndarray of int, shape (epochs, n)
        Visiting order of each epoch (e.g. from [`client_shuffles`][fairagg.local.client_shuffles]).
    batch_size, lr, momentum, prox_mu, propfair_m, propfair_epsilon, propfair_huber
        As in [`train_clients`][fairagg.local.train_clients].

    Returns
    -------
    delta : ndarray, shape (d,)
        θ^t − w after training.
    loss, accuracy : float
        F_k(θ^t) and the training accuracy of θ^t.
    """
    _check_model(model)
    theta = model.check_params(params)
    X, y = model.check_data(X, y)
    _, batch_size, lr, momentum, prox_mu = _check_hyper(1, batch_size, lr, momentum, prox_mu)
    pf_m, pf_eps, pf_huber = check_propfair(propfair_m, propfair_epsilon, propfair_huber)
    order = as_int_array(order, "order", ndim=2, min_value=0)
    if order.size and order.max() >= X.shape[0]:
        raise ValueError(f"order must index the {X.shape[0]} rows of X; got {order.max()}")
    pf = (pf_m, pf_eps, pf_huber)
    w, loss0, acc0 = _reference_sgd(
        model, theta, X, y, order, batch_size, lr, momentum, prox_mu, pf
    )
    if not np.all(np.isfinite(w)):
        raise FloatingPointError(
            f"local training diverged: non-finite parameters (lower lr, currently {lr})"
        )
    return theta - w, loss0, acc0


def _reference_sgd(
    model: FlatModel,
    theta: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    order: np.ndarray,
    batch_size: int,
    lr: float,
    momentum: float,
    prox_mu: float,
    pf: tuple[float, float, bool],
) -> tuple[np.ndarray, float, float]:
    """[`sgd_reference`][fairagg.local.sgd_reference] on checked arguments: the parameters w
    after training, F_k(θ^t) and the training accuracy of θ^t. Stops at the first step whose
    parameters are not finite and returns them (the caller reports the divergence)."""
    pf_m, pf_eps, pf_huber = pf
    loss0 = model.loss(theta, X, y)
    acc0 = model.accuracy(theta, X, y)
    w = theta.copy()
    v = np.zeros_like(w)
    n = order.shape[1]
    # a diverging run overflows on its way: reported once, at the end, as simulate does
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for perm in order:
            for s in range(0, n, batch_size):
                batch = perm[s : s + batch_size]
                g = model.grad(w, X[batch], y[batch])
                if pf_m > 0:
                    f = model.loss(w, X[batch], y[batch])
                    g = g * _propfair_factor(f, pf_m, pf_eps, pf_huber)
                g = g + prox_mu * (w - theta)
                v = momentum * v + g
                w = w - lr * v
                if not np.all(np.isfinite(w)):
                    return w, loss0, acc0
    return w, loss0, acc0
