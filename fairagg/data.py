"""Federated datasets: Synthetic(α, β), partitions, per-client splits, shipped data (SPEC §11).

Layout
------
Every dataset is a [`FederatedData`][fairagg.data.FederatedData]: for each split (train, test,
optional validation) one C-contiguous float64 feature matrix holding **all clients' rows back to
back in client order**, one int64 label vector, and an int64 offsets vector of length K + 1, so that
client k owns rows ``offsets[k]:offsets[k + 1]``. This is exactly what the Numba local trainer
consumes (no Python list of per-client arrays on the hot path);
[`FederatedData.client_train`][fairagg.data.FederatedData.client_train] and friends return views.

Seeding
-------
Everything is deterministic from integer seeds; nothing touches NumPy's global random state.

* [`synthetic_clients`][fairagg.data.synthetic_clients] uses ONE ``np.random.default_rng(seed)`` and
  draws in this fixed order (see its docstring for the exact calls):

  1. sizes ``n_k = floor(LogNormal(4, 2)) + 50`` for all K clients;
  2. ``u_k ~ N(0, α²)`` for all clients (the mean of W_k and b_k);
  3. ``B_k ~ N(0, β²)`` for all clients;
  4. feature means: non-IID, for k in order, ``v_k ~ N(B_k, 1)`` (60 entries); IID, ``v_k = B_k·1``
     (no draw) and then the shared ``W ~ N(0, 1)`` (60×10) and ``b ~ N(0, 1)`` (10);
  5. for k in order: (non-IID only) ``W_k ~ N(u_k, 1)`` (60×10) then ``b_k ~ N(u_k, 1)`` (10);
     then ``x = v_k + Z·sqrt(j^-1.2)`` with ``Z`` standard normal (n_k×60); ``y = argmax(xW + b)``.

* Partitions ([`partition_iid`][fairagg.data.partition_iid],
  [`partition_power_law`][fairagg.data.partition_power_law],
  [`partition_shards`][fairagg.data.partition_shards],
  [`partition_dirichlet`][fairagg.data.partition_dirichlet]) each use their own
  ``np.random.default_rng(seed)``.
* The per-client train/test/validation split ([`federate`][fairagg.data.federate],
  [`from_client_arrays`][fairagg.data.from_client_arrays]) uses ``np.random.default_rng(seed)``
  consumed client by client in order. Composite builders ([`synthetic`][fairagg.data.synthetic],
  [`load_digits`][fairagg.data.load_digits]) seed the split with ``[seed, 1]`` unless told
  otherwise, a stream independent of the generator's or partition's ``default_rng(seed)``.

References
----------
.. [1] T. Li et al., "Federated Optimization in Heterogeneous Networks" (FedProx), MLSys 2020, and
   its public generator ``data/synthetic_*/generate_synthetic.py``.
.. [2] T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated Learning"
   (q-FFL), ICLR 2020, Appendix E.1 (the Synthetic(α, β) and synthetic_iid datasets).
.. [3] B. McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
   Data", AISTATS 2017 (label shards).
.. [4] T.-M. H. Hsu, H. Qi, M. Brown, "Measuring the Effects of Non-Identical Data Distribution for
   Federated Visual Classification", 2019 (Dirichlet label skew).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ._checks import as_float_array, as_int_array, check_choice, check_count, check_int, check_real

__all__ = [
    "DATA_SPECS",
    "FederatedData",
    "federate",
    "from_client_arrays",
    "load",
    "load_digits",
    "partition_dirichlet",
    "partition_iid",
    "partition_power_law",
    "partition_shards",
    "synthetic",
    "synthetic_clients",
]

#: Synthetic(α, β) feature dimension and number of classes (SPEC §11).
SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10

#: Data specs accepted by [`load`][fairagg.data.load] (human-readable, for the CLI help).
DATA_SPECS: tuple[str, ...] = (
    "synthetic:ALPHA,BETA (alpha, beta >= 0, e.g. synthetic:1,1 or synthetic:0.5,0.5)",
    "synthetic_iid",
    "digits (label shards)",
    "digits:iid",
    "digits:powerlaw",
    "digits:shards",
    "digits:dirichlet=ALPHA (ALPHA > 0, e.g. digits:dirichlet=0.5)",
)

_DIGITS_PARTITIONS = ("iid", "powerlaw", "shards", "dirichlet")
# Smallest client of the skewed digits partitions: enough for a train and a test row at any
# test_fraction a user is likely to pass.
_DIGITS_MIN_SIZE = 10


class FederatedData(NamedTuple):
    """A federated dataset in the concatenated layout the local trainer consumes (SPEC §11).

    Attributes
    ----------
    X_train : ndarray, shape (N_train, p)
        float64, C-contiguous; client k's rows are ``train_offsets[k]:train_offsets[k + 1]``.
    y_train : ndarray, shape (N_train,)
        int64 labels in ``[0, n_classes)``.
    train_offsets : ndarray, shape (K + 1,)
        int64, non-decreasing, ``train_offsets[0] == 0`` and ``train_offsets[-1] == N_train``.
    X_test, y_test, test_offsets
        The test split, same layout.
    n_classes : int
        Number of classes.
    name : str
        Human-readable name, e.g. ``"synthetic(1,1)"``.
    X_val, y_val, val_offsets
        The validation split, same layout; ``None`` unless a validation fraction was asked for.
    """

    X_train: np.ndarray
    y_train: np.ndarray
    train_offsets: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    test_offsets: np.ndarray
    n_classes: int
    name: str
    X_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    val_offsets: np.ndarray | None = None

    @property
    def num_clients(self) -> int:
        """Number of clients K."""
        return int(self.train_offsets.shape[0] - 1)

    @property
    def n_features(self) -> int:
        """Number of features p."""
        return int(self.X_train.shape[1])

    @property
    def num_train_samples(self) -> np.ndarray:
        """Training-set sizes n_k, int64 ndarray of shape (K,)."""
        return np.diff(self.train_offsets)

    @property
    def num_test_samples(self) -> np.ndarray:
        """Test-set sizes, int64 ndarray of shape (K,)."""
        return np.diff(self.test_offsets)

    @property
    def num_val_samples(self) -> np.ndarray | None:
        """Validation-set sizes, int64 ndarray of shape (K,); ``None`` if there is none."""
        return None if self.val_offsets is None else np.diff(self.val_offsets)

    def client_train(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(X, y)`` of client ``k``'s training rows, shapes (n_k, p) and (n_k,)."""
        return _client_slice(self.X_train, self.y_train, self.train_offsets, k, self.num_clients)

    def client_test(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(X, y)`` of client ``k``'s test rows."""
        return _client_slice(self.X_test, self.y_test, self.test_offsets, k, self.num_clients)

    def client_val(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(X, y)`` of client ``k``'s validation rows (``ValueError`` if there are none)."""
        if self.X_val is None or self.y_val is None or self.val_offsets is None:
            raise ValueError(f"dataset {self.name!r} has no validation split (val_fraction was 0)")
        return _client_slice(self.X_val, self.y_val, self.val_offsets, k, self.num_clients)


def _client_slice(
    X: np.ndarray, y: np.ndarray, offsets: np.ndarray, k: int, num_clients: int
) -> tuple[np.ndarray, np.ndarray]:
    k = check_int(k, "k", low=0, high=num_clients - 1)
    lo, hi = int(offsets[k]), int(offsets[k + 1])
    return X[lo:hi], y[lo:hi]


# --------------------------------------------------------------------------------------------
# Synthetic(alpha, beta)
# --------------------------------------------------------------------------------------------


def synthetic_clients(
    alpha: float,
    beta: float,
    num_clients: int = 30,
    *,
    iid: bool = False,
    seed: int = 0,
    max_samples_per_client: int | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    r"""Raw per-client data of Synthetic(α, β) as FedProx generates it (SPEC §11).

    For client k:

    .. math::

        u_k \sim N(0, \alpha^2),\quad B_k \sim N(0, \beta^2),\quad
        W_k \in \mathbb{R}^{60\times 10},\ b_k \in \mathbb{R}^{10} \text{ entries} \sim N(u_k, 1),

        v_k \text{ entries} \sim N(B_k, 1),\quad x \sim N(v_k, \mathrm{diag}(j^{-1.2})),\quad
        y = \arg\max_c\,(x^\top W_k + b_k)_c,

        n_k = \lfloor \mathrm{LogNormal}(4, 2) \rfloor + 50.

    The IID variant shares one ``W, b`` with entries ~ N(0, 1) across clients and sets
    ``v_k = B_k·1``; the standard ``synthetic_iid`` of q-FFL (Appendix E.1) uses α = β = 0, so all
    ``v_k = 0``. α and β are standard deviations, as in the public generator.

    Draw order (one ``rng = np.random.default_rng(seed)``, fixed and part of the contract):

    1. ``n = floor(rng.lognormal(4, 2, K)) + 50`` (int64), then clipped to
       ``max_samples_per_client`` if given;
    2. ``u = rng.normal(0, alpha, K)``;
    3. ``B = rng.normal(0, beta, K)``;
    4. non-IID: for k = 0..K-1, ``v_k = rng.normal(B[k], 1, 60)``;
       IID: ``v_k = B[k] * ones(60)`` (no draw), then ``W = rng.normal(0, 1, (60, 10))`` and
       ``b = rng.normal(0, 1, 10)`` once;
    5. for k = 0..K-1: non-IID only, ``W_k = rng.normal(u[k], 1, (60, 10))`` then
       ``b_k = rng.normal(u[k], 1, 10)``; then
       ``x = v_k + rng.standard_normal((n[k], 60)) * np.sqrt(np.arange(1, 61) ** -1.2)`` and
       ``y = np.argmax(x @ W_k + b_k, axis=1)`` (the first class on ties).

    Because the covariance is diagonal, step 5's ``x`` has exactly the distribution of
    ``multivariate_normal(v_k, diag(j^-1.2))`` used by FedProx (j = 1..60), but not the same draws:
    NumPy's ``multivariate_normal`` factorises the covariance by SVD. FedProx also draws
    ``W_k, b_k`` in the IID case and then discards them; we skip those draws. The data therefore
    follow the FedProx distribution exactly, not its bit stream.

    α does not change the labels. Entries of ``W_k`` and ``b_k`` are ``u_k`` plus N(0, 1)
    noise, so the shift adds ``u_k (Σ_j x_j + 1)`` to every class's score alike, and the argmax
    ignores it. The same noise is drawn whatever α is (``rng.normal(0, alpha, K)`` only scales
    its draws). So ``synthetic_clients(0, β, ...)`` and ``synthetic_clients(5, β, ...)`` give
    the same X and the same y, up to near-ties at rounding (none in 1.8 million rows tried).
    Clients differ through β (their feature means) and through their own noisy ``W_k, b_k``.
    This holds for FedProx's public generator too: its "Synthetic(α, β)" differs in α only by
    name.

    Parameters
    ----------
    alpha : float
        Standard deviation of ``u_k``, the mean of client k's model entries; ``>= 0`` (it does
        not change the data: see above).
    beta : float
        Standard deviation of ``B_k`` (how much the clients' feature means differ); ``>= 0``.
    num_clients : int
        Number of clients K, ``>= 1``.
    iid : bool
        Share one model ``W, b`` and use ``v_k = B_k·1`` (q-FFL's ``synthetic_iid`` has α = β = 0).
    seed : int
        Seed of the single generator, ``>= 0``.
    max_samples_per_client : int, optional
        Clip every ``n_k`` to at most this many samples (``>= 1``). ``None`` (default) is the exact
        SPEC behaviour; clipping exists to keep experiments small (LogNormal(4, 2) has a heavy
        tail). Clipping changes how many normals later clients consume, so a clipped dataset is
        *not* a row-prefix of the unclipped one beyond the first client.

    Returns
    -------
    list of (ndarray, ndarray)
        K pairs ``(X_k, y_k)``: ``X_k`` float64 of shape (n_k, 60), ``y_k`` int64 of shape (n_k,)
        with values in ``[0, 10)``; C-contiguous views of one (N, 60) array and one label
        vector holding the clients' rows back to back.

    References
    ----------
    FedProx (Li et al., MLSys 2020) public generator; q-FFL (Li et al., ICLR 2020), Appendix E.1.
    """
    alpha = check_real(alpha, "alpha", low=0.0)
    beta = check_real(beta, "beta", low=0.0)
    K = check_count(num_clients, "num_clients", low=1)
    if not isinstance(iid, (bool, np.bool_)):
        raise TypeError(f"iid must be a bool; got {type(iid).__name__} {iid!r}")
    seed = check_int(seed, "seed", low=0)
    if max_samples_per_client is not None:
        max_samples_per_client = check_count(
            max_samples_per_client, "max_samples_per_client", low=1
        )

    gen = _SyntheticStream(alpha, beta, K, iid, seed, max_samples_per_client)
    # One block holding every row: the clients are views of one (N, 60) array and one label vector.
    X, y = gen.empty_rows(int(gen.n.sum()))
    gen.fill(0, K, X, y)
    return [(X[lo:hi], y[lo:hi]) for lo, hi in zip(gen.starts[:-1], gen.starts[1:], strict=True)]


#: Rows of Synthetic(α, β) generated at a time by [`synthetic`][fairagg.data.synthetic] before
#: they are split into the train/test/validation arrays (3.75 MiB of features; a larger client
#: is generated whole): a block stays in the last-level cache while it is copied out.
_SYNTHETIC_BLOCK_ROWS = 2**13


class _SyntheticStream:
    """The draws of [`synthetic_clients`][fairagg.data.synthetic_clients], in its documented order,
    written into preallocated rows client by client.

    Steps 1-4 run on construction (``n``, ``u``, ``B``, the feature means ``v`` or the shared
    model); ``fill`` then runs step 5 for clients ``k0:k1``, which must follow the clients filled
    before (the generator's stream is consumed in client order). The numbers are those of the
    documented calls: ``rng.normal(B[k], 1, 60)`` for all k is ``B[k] + standard_normal`` in the
    same stream order, drawn as one (K, 60) array; ``v_k + Z·σ`` is computed in place in the
    output rows, ``Z`` drawn into them; in the IID case ``v_k = B[k]·1`` is the scalar ``B[k]``
    added (``B[k]·1.0`` is ``B[k]``).
    """

    def __init__(
        self, alpha: float, beta: float, K: int, iid: bool, seed: int, max_samples: int | None
    ) -> None:
        d, c = SYNTHETIC_DIM, SYNTHETIC_CLASSES
        rng = np.random.default_rng(seed)
        # (1) sizes
        n = np.floor(rng.lognormal(4.0, 2.0, K)).astype(np.int64) + 50
        if max_samples is not None:
            n = np.minimum(n, max_samples)
        # (2), (3) priors
        self.u = rng.normal(0.0, alpha, K)
        self.B = rng.normal(0.0, beta, K)
        # (4) feature means (and the shared model in the IID case)
        self.iid = iid
        if iid:
            self.v = None
            self.W_shared = rng.normal(0.0, 1.0, (d, c))
            self.b_shared = rng.normal(0.0, 1.0, c)
        else:
            self.v = rng.standard_normal((K, d))
            self.v += self.B[:, None]
        self.rng = rng
        self.n = n
        self.starts = np.zeros(K + 1, dtype=np.int64)
        np.cumsum(n, out=self.starts[1:])
        self.sigma = np.sqrt(np.arange(1, d + 1, dtype=np.float64) ** -1.2)

    @staticmethod
    def empty_rows(rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Uninitialised ``(X, y)`` for ``rows`` rows: float64 (rows, 60) and int64 (rows,)."""
        return np.empty((rows, SYNTHETIC_DIM)), np.empty(rows, dtype=np.int64)

    def fill(self, k0: int, k1: int, X: np.ndarray, y: np.ndarray) -> None:
        """Step 5 for clients ``k0:k1`` into ``X[: starts[k1] - starts[k0]]`` and ``y`` likewise,
        client k at rows ``starts[k] - starts[k0]`` onwards."""
        from .kernels._threads import blas_single_thread

        base = int(self.starts[k0])
        # One BLAS thread for the clients' small (n_k, 60) × (60, 10) products: OpenBLAS's threads
        # made the whole generator 2× slower on two cores (they spin between the many small
        # calls). The labels do not change: OpenBLAS shares a product between threads by blocks
        # of its output, each entry summed alike (checked against the multi-threaded output).
        with blas_single_thread():
            self._fill(k0, k1, X, y, base)

    def _fill(self, k0: int, k1: int, X: np.ndarray, y: np.ndarray, base: int) -> None:
        rng, u, sigma = self.rng, self.u, self.sigma
        d, c = SYNTHETIC_DIM, SYNTHETIC_CLASSES
        for k in range(k0, k1):
            if self.iid:
                W, b = self.W_shared, self.b_shared
            else:
                W = rng.normal(u[k], 1.0, (d, c))
                b = rng.normal(u[k], 1.0, c)
            lo, hi = int(self.starts[k]) - base, int(self.starts[k + 1]) - base
            x = X[lo:hi]
            rng.standard_normal(out=x)
            x *= sigma
            x += self.B[k] if self.v is None else self.v[k]
            np.argmax(x @ W + b, axis=1, out=y[lo:hi])


def synthetic(
    alpha: float,
    beta: float,
    num_clients: int = 30,
    *,
    iid: bool = False,
    seed: int = 0,
    test_fraction: float = 0.2,
    val_fraction: float = 0.0,
    split_seed: int | None = None,
    max_samples_per_client: int | None = None,
) -> FederatedData:
    """Synthetic(α, β) split per client into train/test(/validation) (SPEC §11; q-FFL App. E.1).

    Generates [`synthetic_clients`][fairagg.data.synthetic_clients] and splits each client with
    [`from_client_arrays`][fairagg.data.from_client_arrays]: the result is bit for bit that
    composition (tested), computed without it. The clients are generated a block of about 8192
    rows at a time (a larger client alone), in the documented draw order, and each block is split
    at once into the preallocated train/test/validation arrays: the peak memory is the returned
    arrays plus one block and a few per-row index arrays of the block (1.2× the returned arrays
    at K = 400, tested ≤ 2×, 1.02× at K = 10⁴; the composition peaked above 3×; data smaller
    than a block are one block, about 2×). The small per-client products
    ``x W_k`` run on one BLAS thread, which leaves their bits as they are.

    Parameters
    ----------
    alpha, beta, num_clients, iid, seed, max_samples_per_client
        As in [`synthetic_clients`][fairagg.data.synthetic_clients].
    test_fraction, val_fraction : float
        Per-client split fractions, as in [`federate`][fairagg.data.federate].
    split_seed : int, optional
        Seed of the split. ``None`` (default) seeds it with ``[seed, 1]``, a stream independent of
        the generator's.

    Returns
    -------
    FederatedData
        60 features, 10 classes, named ``"synthetic(ALPHA,BETA)"``, ``"synthetic_iid"`` (iid with
        α = β = 0) or ``"synthetic_iid(ALPHA,BETA)"``.
    """
    # Validate everything before generating anything.
    test_fraction, val_fraction = _check_fractions(test_fraction, val_fraction)
    seed = check_int(seed, "seed", low=0)
    split_entropy = [seed, 1] if split_seed is None else check_int(split_seed, "split_seed", low=0)
    alpha = check_real(alpha, "alpha", low=0.0)
    beta = check_real(beta, "beta", low=0.0)
    K = check_count(num_clients, "num_clients", low=1)
    if not isinstance(iid, (bool, np.bool_)):
        raise TypeError(f"iid must be a bool; got {type(iid).__name__} {iid!r}")
    if max_samples_per_client is not None:
        max_samples_per_client = check_count(
            max_samples_per_client, "max_samples_per_client", low=1
        )
    a, b = float(alpha), float(beta)
    if iid:
        name = "synthetic_iid" if a == 0.0 and b == 0.0 else f"synthetic_iid({a:g},{b:g})"
    else:
        name = f"synthetic({a:g},{b:g})"
    gen = _SyntheticStream(alpha, beta, K, bool(iid), seed, max_samples_per_client)
    sizes = [_split_sizes(k, int(n_k), test_fraction, val_fraction) for k, n_k in enumerate(gen.n)]
    # The output arrays, filled block by block: generated rows are split into them at once, so
    # the rows never exist twice but for one block (peak memory: the returned arrays + a block).
    counts = np.array(sizes, dtype=np.int64).reshape(K, 3)  # (n_test, n_val, n_train) per client
    outs = []
    for j in (2, 0, 1):  # train, test, validation: FederatedData's order
        offsets = np.zeros(K + 1, dtype=np.int64)
        np.cumsum(counts[:, j], out=offsets[1:])
        outs.append((*gen.empty_rows(int(offsets[-1])), offsets))
    split = np.random.default_rng(split_entropy)
    # a block holds whole clients, at most _SYNTHETIC_BLOCK_ROWS rows unless one client has more
    Xb, yb = gen.empty_rows(max(min(_SYNTHETIC_BLOCK_ROWS, int(gen.starts[-1])), int(gen.n.max())))
    k0 = 0
    while k0 < K:
        k1 = k0 + 1  # whole clients, at least one, up to _SYNTHETIC_BLOCK_ROWS rows
        while k1 < K and gen.starts[k1 + 1] - gen.starts[k0] <= _SYNTHETIC_BLOCK_ROWS:
            k1 += 1
        gen.fill(k0, k1, Xb, yb)
        # the split of _split, client by client in order, rows numbered within the block
        idx: tuple[list[np.ndarray], ...] = ([], [], [])
        for k in range(k0, k1):
            n_test, n_val, _ = sizes[k]
            lo = int(gen.starts[k] - gen.starts[k0])
            perm = split.permutation(int(gen.n[k]))
            idx[1].append(np.sort(perm[:n_test]) + lo)
            idx[2].append(np.sort(perm[n_test : n_test + n_val]) + lo)
            idx[0].append(np.sort(perm[n_test + n_val :]) + lo)
        for (X, y, offsets), rows in zip(outs, idx, strict=True):
            if y.shape[0]:
                flat = np.concatenate(rows)
                lo, hi = int(offsets[k0]), int(offsets[k1])
                np.take(Xb, flat, axis=0, out=X[lo:hi], mode="clip")
                np.take(yb, flat, out=y[lo:hi], mode="clip")
        k0 = k1
    X_va: np.ndarray | None
    y_va: np.ndarray | None
    o_va: np.ndarray | None
    (X_tr, y_tr, o_tr), (X_te, y_te, o_te), (X_va, y_va, o_va) = outs
    if val_fraction == 0:
        X_va = y_va = o_va = None
    return FederatedData(
        X_train=X_tr,
        y_train=y_tr,
        train_offsets=o_tr,
        X_test=X_te,
        y_test=y_te,
        test_offsets=o_te,
        n_classes=SYNTHETIC_CLASSES,
        name=name,
        X_val=X_va,
        y_val=y_va,
        val_offsets=o_va,
    )


# --------------------------------------------------------------------------------------------
# Partitions
# --------------------------------------------------------------------------------------------


def _check_counts(num_items: int, num_clients: int) -> tuple[int, int]:
    num_items = check_count(num_items, "num_items", low=1)
    num_clients = check_count(num_clients, "num_clients", low=1)
    if num_items < num_clients:
        raise ValueError(
            f"cannot give each of num_clients={num_clients} clients at least one item: "
            f"only num_items={num_items}"
        )
    return num_items, num_clients


def _check_labels(labels: Any) -> np.ndarray:
    y = as_int_array(labels, "labels", ndim=1)
    if y.shape[0] == 0:
        raise ValueError("labels must be non-empty; got shape (0,)")
    return y


def partition_iid(num_items: int, num_clients: int, *, seed: int = 0) -> list[np.ndarray]:
    """Split ``range(num_items)`` uniformly at random into near-equal parts (SPEC §11).

    A random permutation ``np.random.default_rng(seed).permutation(num_items)`` is cut into
    ``num_clients`` consecutive parts whose sizes differ by at most one (the first
    ``num_items % num_clients`` parts are one larger).

    Parameters
    ----------
    num_items : int
        Number of items N, ``>= num_clients``.
    num_clients : int
        Number of clients K, ``>= 1``.
    seed : int
        Seed of the permutation.

    Returns
    -------
    list of ndarray
        K disjoint non-empty int64 index arrays covering ``range(N)``.
    """
    num_items, num_clients = _check_counts(num_items, num_clients)
    seed = check_int(seed, "seed", low=0)
    perm = np.random.default_rng(seed).permutation(num_items).astype(np.int64)
    return [np.ascontiguousarray(p) for p in np.array_split(perm, num_clients)]


def _largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers >= 0 summing exactly to ``total``, proportional to ``weights`` (Hamilton's method).

    Each share gets ``floor(total·w/Σw)``; the leftover units go one each to the largest fractional
    parts (ties to the lower index).
    """
    quota = total * (weights / weights.sum())
    sizes = np.floor(quota).astype(np.int64)
    left = total - int(sizes.sum())
    if left > 0:
        order = np.argsort(-(quota - sizes), kind="stable")
        sizes[order[:left]] += 1
    return sizes


def partition_power_law(
    num_items: int,
    num_clients: int,
    *,
    exponent: float = 1.5,
    min_size: int = 1,
    seed: int = 0,
) -> list[np.ndarray]:
    r"""Split ``range(num_items)`` into parts with power-law (Pareto) sizes (SPEC §11).

    With ``rng = np.random.default_rng(seed)``:

    1. client weights :math:`w_k = U_k^{-1/a}`, :math:`U_k = 1 - \text{rng.random()} \in (0, 1]`,
       i.e. Pareto with :math:`x_{\min} = 1` and tail index :math:`a` = ``exponent``
       (:math:`P(w > t) = t^{-a}`);
    2. sizes: ``min_size`` each, plus the remaining ``N - K·min_size`` items allocated
       proportionally to ``w`` by largest-remainder rounding, so the total is exactly N;
    3. ``rng.permutation(N)`` is cut consecutively by those sizes.

    Parameters
    ----------
    num_items : int
        Number of items N, ``>= num_clients · min_size``.
    num_clients : int
        Number of clients K, ``>= 1``.
    exponent : float
        Pareto tail index a > 0; smaller means more skewed sizes.
    min_size : int
        Least number of items per client, ``>= 1``.
    seed : int
        Seed of the generator.

    Returns
    -------
    list of ndarray
        K disjoint non-empty int64 index arrays covering ``range(N)``.
    """
    num_items, num_clients = _check_counts(num_items, num_clients)
    exponent = check_real(exponent, "exponent", low=0.0, low_open=True)
    min_size = check_int(min_size, "min_size", low=1)
    seed = check_int(seed, "seed", low=0)
    if num_items < num_clients * min_size:
        raise ValueError(
            f"num_items={num_items} is too few for num_clients={num_clients} clients of at least "
            f"min_size={min_size} items each"
        )
    rng = np.random.default_rng(seed)
    U = 1.0 - rng.random(num_clients)
    # w = U**(-1/a), computed max-shifted in log space: only the ratios of w matter, and a small
    # exponent would otherwise overflow.
    log_w = -np.log(U) / exponent
    w = np.exp(log_w - log_w.max())
    sizes = min_size + _largest_remainder(num_items - num_clients * min_size, w)
    perm = rng.permutation(num_items).astype(np.int64)
    return [np.ascontiguousarray(p) for p in np.split(perm, np.cumsum(sizes)[:-1])]


def partition_shards(
    labels: Any, num_clients: int, *, shards_per_client: int = 2, seed: int = 0
) -> list[np.ndarray]:
    """Label-shard partition of McMahan et al. (2017) (SPEC §11).

    Indices are stable-sorted by label and cut into ``num_clients · shards_per_client`` consecutive
    shards of near-equal size (``np.array_split``); ``np.random.default_rng(seed).permutation`` of
    the shards gives client k the shards ``perm[k·s:(k+1)·s]`` (s = ``shards_per_client``),
    concatenated in that order. When every shard lies inside one class (e.g. class sizes are
    multiples of the shard size), each client sees at most s distinct labels.

    Parameters
    ----------
    labels : array_like of int, shape (N,)
        Labels of the items (any integers).
    num_clients : int
        Number of clients K, ``>= 1``.
    shards_per_client : int
        Shards per client s, ``>= 1``; N must be ``>= K·s``.
    seed : int
        Seed of the shard permutation.

    Returns
    -------
    list of ndarray
        K disjoint non-empty int64 index arrays covering ``range(N)``.
    """
    y = _check_labels(labels)
    num_clients = check_count(num_clients, "num_clients", low=1)
    s = check_int(shards_per_client, "shards_per_client", low=1)
    seed = check_int(seed, "seed", low=0)
    num_shards = num_clients * s
    if y.shape[0] < num_shards:
        raise ValueError(
            f"cannot cut {y.shape[0]} labels into num_clients·shards_per_client = "
            f"{num_clients}·{s} = {num_shards} non-empty shards"
        )
    order = np.argsort(y, kind="stable").astype(np.int64)
    shards = np.array_split(order, num_shards)
    perm = np.random.default_rng(seed).permutation(num_shards)
    return [
        np.concatenate([shards[j] for j in perm[k * s : (k + 1) * s]]) for k in range(num_clients)
    ]


def partition_dirichlet(
    labels: Any,
    num_clients: int,
    alpha: float,
    *,
    min_size: int = 1,
    max_tries: int = 100,
    seed: int = 0,
) -> list[np.ndarray]:
    r"""Dirichlet(α) label-skew partition (Hsu et al., 2019) (SPEC §11).

    With ``rng = np.random.default_rng(seed)``, one try is: for each class c in ascending order,
    draw proportions ``p = rng.dirichlet(alpha·1_K)``, shuffle that class's indices with
    ``rng.permutation``, and cut them at ``np.rint(cumsum(p)[:-1] · n_c)`` (round half to even),
    client k receiving the k-th piece. A client's indices are its pieces concatenated by class.
    If some client ends with fewer than ``min_size`` items the whole try is redrawn (continuing the
    same generator), at most ``max_tries`` times.

    Small α concentrates each class on few clients (strong label skew); large α approaches an IID
    split.

    Parameters
    ----------
    labels : array_like of int, shape (N,)
        Labels of the items (any integers).
    num_clients : int
        Number of clients K, ``>= 1``.
    alpha : float
        Dirichlet concentration, ``> 0``.
    min_size : int
        Least number of items per client, ``>= 1``.
    max_tries : int
        Number of tries before giving up, ``>= 1``.
    seed : int
        Seed of the generator.

    Returns
    -------
    list of ndarray
        K disjoint non-empty int64 index arrays covering ``range(N)``.

    Raises
    ------
    ValueError
        If no try within ``max_tries`` gives every client ``min_size`` items.
    """
    y = _check_labels(labels)
    num_clients = check_count(num_clients, "num_clients", low=1)
    alpha = check_real(alpha, "alpha", low=0.0, low_open=True)
    min_size = check_int(min_size, "min_size", low=1)
    max_tries = check_int(max_tries, "max_tries", low=1)
    seed = check_int(seed, "seed", low=0)
    if y.shape[0] < num_clients * min_size:
        raise ValueError(
            f"{y.shape[0]} labels are too few for num_clients={num_clients} clients of at least "
            f"min_size={min_size} items each"
        )
    classes = np.unique(y)
    by_class = [np.flatnonzero(y == c).astype(np.int64) for c in classes]
    rng = np.random.default_rng(seed)
    conc = np.full(num_clients, alpha)
    for _ in range(max_tries):
        pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            p = rng.dirichlet(conc)
            idx = rng.permutation(idx)
            cuts = np.rint(np.cumsum(p)[:-1] * idx.shape[0]).astype(np.int64)
            for k, piece in enumerate(np.split(idx, np.clip(cuts, 0, idx.shape[0]))):
                pieces[k].append(piece)
        parts = [np.concatenate(pk) for pk in pieces]
        if min(part.shape[0] for part in parts) >= min_size:
            return parts
    raise ValueError(
        f"partition_dirichlet could not give every one of {num_clients} clients at least "
        f"min_size={min_size} items in max_tries={max_tries} tries with alpha={alpha}; "
        "increase alpha or max_tries, or lower min_size"
    )


# --------------------------------------------------------------------------------------------
# Per-client splits
# --------------------------------------------------------------------------------------------


def _check_fractions(test_fraction: float, val_fraction: float) -> tuple[float, float]:
    t = check_real(test_fraction, "test_fraction", low=0.0, high=1.0, high_open=True)
    v = check_real(val_fraction, "val_fraction", low=0.0, high=1.0, high_open=True)
    if t + v >= 1.0:
        raise ValueError(f"test_fraction + val_fraction must be < 1; got {t} + {v} = {t + v}")
    return t, v


def _concat_clients(
    clients: Sequence[tuple[Any, Any]], n_classes: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence):
        raise TypeError(
            f"clients must be a sequence of (X_k, y_k) pairs; got {type(clients).__name__}"
        )
    if len(clients) == 0:
        raise ValueError("clients must hold at least one (X_k, y_k) pair; got none")
    Xs, ys, parts = [], [], []
    start = 0
    p = None
    for k, pair in enumerate(clients):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"clients[{k}] must be a pair (X_k, y_k)")
        Xk = as_float_array(pair[0], f"clients[{k}] X", ndim=2, dtype=np.float64, allow_int=True)
        yk = as_int_array(pair[1], f"clients[{k}] y", ndim=1, min_value=0)
        if Xk.shape[0] != yk.shape[0]:
            raise ValueError(
                f"clients[{k}]: X has {Xk.shape[0]} rows but y has {yk.shape[0]} labels"
            )
        if p is None:
            p = Xk.shape[1]
        elif Xk.shape[1] != p:
            raise ValueError(f"clients[{k}] X has {Xk.shape[1]} features but clients[0] X has {p}")
        if yk.size and yk.max() >= n_classes:
            raise ValueError(
                f"clients[{k}] y must be in [0, n_classes) = [0, {n_classes}); got maximum "
                f"{yk.max()}"
            )
        Xs.append(Xk)
        ys.append(yk)
        parts.append(np.arange(start, start + yk.shape[0], dtype=np.int64))
        start += yk.shape[0]
    return np.concatenate(Xs, axis=0), np.concatenate(ys), parts


def _split_sizes(
    k: int, n_k: int, test_fraction: float, val_fraction: float
) -> tuple[int, int, int]:
    """``(n_test, n_val, n_train)`` of client ``k`` with ``n_k`` rows, by the rule documented in
    [`federate`][fairagg.data.federate]; ``ValueError`` if no training row is left."""
    n_test = max(1, round(test_fraction * n_k))
    n_val = max(1, round(val_fraction * n_k)) if val_fraction > 0 else 0
    n_train = n_k - n_test - n_val
    if n_train < 1:
        raise ValueError(
            f"client {k} has {n_k} sample(s): too few for {n_test} test + {n_val} validation "
            "+ at least 1 training sample; drop or merge small clients or lower the fractions"
        )
    return n_test, n_val, n_train


def _split(
    X: np.ndarray,
    y: np.ndarray,
    parts: Sequence[np.ndarray],
    n_classes: int,
    test_fraction: float,
    val_fraction: float,
    rng: np.random.Generator,
    name: str,
) -> FederatedData:
    """Split validated data client by client (the rule documented in
    [`federate`][fairagg.data.federate])."""
    train_idx, test_idx, val_idx = [], [], []
    for k, part in enumerate(parts):
        n_k = int(part.shape[0])
        n_test, n_val, _ = _split_sizes(k, n_k, test_fraction, val_fraction)
        perm = rng.permutation(n_k)
        test_idx.append(part[np.sort(perm[:n_test])])
        val_idx.append(part[np.sort(perm[n_test : n_test + n_val])])
        train_idx.append(part[np.sort(perm[n_test + n_val :])])

    def gather(idx: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum([i.shape[0] for i in idx], out=offsets[1:])
        flat = np.concatenate(idx)
        return np.ascontiguousarray(X[flat]), np.ascontiguousarray(y[flat]), offsets

    X_tr, y_tr, o_tr = gather(train_idx)
    X_te, y_te, o_te = gather(test_idx)
    X_va: np.ndarray | None
    y_va: np.ndarray | None
    o_va: np.ndarray | None
    if val_fraction > 0:
        X_va, y_va, o_va = gather(val_idx)
    else:
        X_va = y_va = o_va = None
    return FederatedData(
        X_train=X_tr,
        y_train=y_tr,
        train_offsets=o_tr,
        X_test=X_te,
        y_test=y_te,
        test_offsets=o_te,
        n_classes=int(n_classes),
        name=name,
        X_val=X_va,
        y_val=y_va,
        val_offsets=o_va,
    )


def federate(
    X: Any,
    y: Any,
    parts: Sequence[Any],
    *,
    n_classes: int | None = None,
    test_fraction: float = 0.2,
    val_fraction: float = 0.0,
    seed: int = 0,
    name: str = "",
) -> FederatedData:
    """Assemble a [`FederatedData`][fairagg.data.FederatedData] from labelled arrays and a partition
    (SPEC §11).

    Each client k (items ``parts[k]``, n_k of them) is split with
    ``rng = np.random.default_rng(seed)``, consumed client by client in order:
    ``n_test = max(1, round(test_fraction·n_k))``,
    ``n_val = max(1, round(val_fraction·n_k))`` if ``val_fraction > 0`` else 0, and
    ``n_train = n_k - n_test - n_val``, which must be ``>= 1``. With ``perm = rng.permutation(n_k)``
    the test rows are ``perm[:n_test]``, the validation rows the next ``n_val`` and the training
    rows the rest, each kept in the order they have in ``parts[k]``. ``round`` is Python's (half to
    even). Every client therefore has at least one training and one test sample.

    Parameters
    ----------
    X : array_like, shape (N, p)
        Finite real features (integer features are cast to float64).
    y : array_like of int, shape (N,)
        Labels in ``[0, n_classes)``.
    parts : sequence of array_like of int
        K non-empty index arrays into ``range(N)``, e.g. from a ``partition_*`` function. Overlap
        and incomplete cover are allowed (rows are copied); the partitions never produce them.
    n_classes : int, optional
        Number of classes; ``None`` means ``max(y) + 1``.
    test_fraction : float
        In ``[0, 1)``.
    val_fraction : float
        In ``[0, 1)``, with ``test_fraction + val_fraction < 1``; 0 means no validation split.
    seed : int
        Seed of the split.
    name : str
        Name of the dataset.

    Returns
    -------
    FederatedData
        The concatenated layout, K clients in the order of ``parts``.
    """
    Xa = as_float_array(X, "X", ndim=2, dtype=np.float64, allow_int=True, min_size=1)
    ya = as_int_array(y, "y", ndim=1, min_value=0)
    if Xa.shape[0] != ya.shape[0]:
        raise ValueError(f"X and y must have the same length; got {Xa.shape[0]} and {ya.shape[0]}")
    if n_classes is None:
        n_classes = int(ya.max()) + 1
    else:
        n_classes = check_count(n_classes, "n_classes", low=1)
        if ya.max() >= n_classes:
            raise ValueError(
                f"y must be in [0, n_classes) = [0, {n_classes}); got maximum {ya.max()}"
            )
    test_fraction, val_fraction = _check_fractions(test_fraction, val_fraction)
    seed = check_int(seed, "seed", low=0)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}")
    if isinstance(parts, (str, bytes, np.ndarray)) or not isinstance(parts, Sequence):
        raise TypeError(f"parts must be a sequence of index arrays; got {type(parts).__name__}")
    if len(parts) == 0:
        raise ValueError("parts must hold at least one client's index array; got none")
    idx = []
    N = Xa.shape[0]
    for k, part in enumerate(parts):
        pk = as_int_array(part, f"parts[{k}]", ndim=1)
        if pk.shape[0] == 0:
            raise ValueError(f"parts[{k}] is empty: every client needs at least one item")
        if pk.min() < 0 or pk.max() >= N:
            raise ValueError(
                f"parts[{k}] must index rows in [0, {N}); got values in [{pk.min()}, {pk.max()}]"
            )
        idx.append(pk)
    return _split(
        Xa, ya, idx, n_classes, test_fraction, val_fraction, np.random.default_rng(seed), name
    )


def from_client_arrays(
    clients: Sequence[tuple[Any, Any]],
    *,
    n_classes: int,
    test_fraction: float = 0.2,
    val_fraction: float = 0.0,
    seed: int = 0,
    name: str = "",
) -> FederatedData:
    """Assemble a [`FederatedData`][fairagg.data.FederatedData] from per-client arrays (SPEC §11).

    Equivalent to [`federate`][fairagg.data.federate] on the clients' rows concatenated in order,
    with client k's part being its own rows; the split rule and seeding are those of
    [`federate`][fairagg.data.federate].

    Parameters
    ----------
    clients : sequence of (array_like, array_like)
        K pairs ``(X_k, y_k)``, shapes (n_k, p) and (n_k,), the same p for all.
    n_classes : int
        Number of classes; every label must be in ``[0, n_classes)``.
    test_fraction, val_fraction, seed, name
        As in [`federate`][fairagg.data.federate].

    Returns
    -------
    FederatedData
    """
    n_classes = check_count(n_classes, "n_classes", low=1)
    test_fraction, val_fraction = _check_fractions(test_fraction, val_fraction)
    seed = check_int(seed, "seed", low=0)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}")
    X, y, parts = _concat_clients(clients, n_classes)
    return _split(
        X, y, parts, n_classes, test_fraction, val_fraction, np.random.default_rng(seed), name
    )


# --------------------------------------------------------------------------------------------
# Shipped data and the CLI spec parser
# --------------------------------------------------------------------------------------------


def load_digits(
    num_clients: int = 10,
    *,
    partition: str = "shards",
    alpha: float = 0.5,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> FederatedData:
    """scikit-learn's bundled 8×8 digits (1797 images), federated (SPEC §11).

    The images ship inside scikit-learn, so nothing is downloaded. Features are the 64 pixel
    intensities divided by 16 (range [0, 1]); 10 classes. The partition uses
    ``seed``; the per-client split ([`federate`][fairagg.data.federate]) uses ``[seed, 1]``.

    Parameters
    ----------
    num_clients : int
        Number of clients K.
    partition : {"iid", "powerlaw", "shards", "dirichlet"}
        [`partition_iid`][fairagg.data.partition_iid];
        [`partition_power_law`][fairagg.data.partition_power_law] (exponent 1.5, at least 10 images
        per client); [`partition_shards`][fairagg.data.partition_shards] (2 shards per client);
        [`partition_dirichlet`][fairagg.data.partition_dirichlet] (concentration ``alpha``, at least
        10 images per client).
    alpha : float
        Dirichlet concentration (used by ``partition="dirichlet"`` only), ``> 0``.
    seed : int
        Seed of the partition (and, via ``[seed, 1]``, of the split).
    test_fraction : float
        Per-client test fraction, as in [`federate`][fairagg.data.federate].

    Returns
    -------
    FederatedData
        64 features, 10 classes, named ``"digits-PARTITION"`` (``"digits-dirichlet(ALPHA)"``).

    Raises
    ------
    ImportError
        If scikit-learn is not installed.
    """
    num_clients = check_count(num_clients, "num_clients", low=1)
    partition = check_choice(partition, "partition", _DIGITS_PARTITIONS)
    alpha = check_real(alpha, "alpha", low=0.0, low_open=True)
    seed = check_int(seed, "seed", low=0)
    test_fraction, _ = _check_fractions(test_fraction, 0.0)
    try:
        from sklearn.datasets import load_digits as _sk_load_digits
    except ImportError as exc:  # pragma: no cover - sklearn is in the test extra
        raise ImportError(
            "load_digits needs scikit-learn, which ships the digits images: "
            "pip install 'fairagg[digits]'"
        ) from exc
    bunch = _sk_load_digits()
    X = np.ascontiguousarray(bunch.data, dtype=np.float64) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    N = y.shape[0]
    if partition == "iid":
        parts = partition_iid(N, num_clients, seed=seed)
        name = "digits-iid"
    elif partition == "powerlaw":
        parts = partition_power_law(N, num_clients, min_size=_DIGITS_MIN_SIZE, seed=seed)
        name = "digits-powerlaw"
    elif partition == "shards":
        parts = partition_shards(y, num_clients, shards_per_client=2, seed=seed)
        name = "digits-shards"
    else:
        parts = partition_dirichlet(y, num_clients, alpha, min_size=_DIGITS_MIN_SIZE, seed=seed)
        name = f"digits-dirichlet({alpha:g})"
    return _split(X, y, parts, 10, test_fraction, 0.0, np.random.default_rng([seed, 1]), name)


def _bad_spec(spec: str, why: str) -> ValueError:
    return ValueError(
        f"bad data spec {spec!r} ({why}); accepted forms are: " + "; ".join(DATA_SPECS)
    )


def _parse_number(text: str, spec: str, what: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad_spec(spec, f"{what} {text!r} is not a number") from None
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise _bad_spec(spec, f"{what} must be {'> 0' if positive else '>= 0'}, got {text}")
    return value


def load(
    spec: str, *, num_clients: int = 30, seed: int = 0, test_fraction: float = 0.2
) -> FederatedData:
    """Load a dataset from a CLI data spec (SPEC §11); the accepted forms are in ``DATA_SPECS``.

    ``synthetic:ALPHA,BETA`` → [`synthetic`][fairagg.data.synthetic] (``ALPHA, BETA >= 0``);
    ``synthetic_iid`` → ``synthetic(0, 0, iid=True)``; ``digits`` (label shards), ``digits:iid``,
    ``digits:powerlaw``, ``digits:shards``, ``digits:dirichlet=ALPHA`` (``ALPHA > 0``) →
    [`load_digits`][fairagg.data.load_digits].

    Parameters
    ----------
    spec : str
        The data spec.
    num_clients : int
        Number of clients K.
    seed : int
        Seed of the generator or partition.
    test_fraction : float
        Per-client test fraction.

    Returns
    -------
    FederatedData

    Raises
    ------
    ValueError
        For a spec not of an accepted form, with one sentence listing the forms.
    """
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str; got {type(spec).__name__}")
    s = spec.strip()
    head, sep, rest = s.partition(":")
    if head == "synthetic" and sep:
        fields = rest.split(",")
        if len(fields) != 2:
            raise _bad_spec(spec, "synthetic needs two numbers ALPHA,BETA")
        a = _parse_number(fields[0].strip(), spec, "ALPHA", positive=False)
        b = _parse_number(fields[1].strip(), spec, "BETA", positive=False)
        return synthetic(a, b, num_clients, seed=seed, test_fraction=test_fraction)
    if s == "synthetic_iid":
        return synthetic(0.0, 0.0, num_clients, iid=True, seed=seed, test_fraction=test_fraction)
    if head == "digits":
        if not sep:
            kind, alpha = "shards", 0.5
        elif rest in ("iid", "powerlaw", "shards"):
            kind, alpha = rest, 0.5
        elif rest.startswith("dirichlet="):
            kind = "dirichlet"
            alpha = _parse_number(rest[len("dirichlet=") :], spec, "ALPHA", positive=True)
        else:
            raise _bad_spec(spec, f"unknown digits partition {rest!r}")
        return load_digits(
            num_clients, partition=kind, alpha=alpha, seed=seed, test_fraction=test_fraction
        )
    raise _bad_spec(spec, "unknown dataset")
