"""Tests of fairagg.data: Synthetic(α, β), partitions, per-client splits, loaders (SPEC §11)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.datasets import load_digits as sk_load_digits

from fairagg.data import (
    DATA_SPECS,
    FederatedData,
    federate,
    from_client_arrays,
    load,
    load_digits,
    partition_dirichlet,
    partition_iid,
    partition_power_law,
    partition_shards,
    synthetic,
    synthetic_clients,
)

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def reference_synthetic(alpha, beta, K, *, iid, seed, max_samples=None):
    """The draw order documented in ``synthetic_clients``, written out independently."""
    rng = np.random.default_rng(seed)
    n = np.floor(rng.lognormal(4, 2, K)).astype(np.int64) + 50
    if max_samples is not None:
        n = np.minimum(n, max_samples)
    u = rng.normal(0, alpha, K)
    B = rng.normal(0, beta, K)
    if iid:
        v = [np.ones(60) * B[k] for k in range(K)]
        W_global = rng.normal(0, 1, (60, 10))
        b_global = rng.normal(0, 1, 10)
    else:
        v = [rng.normal(B[k], 1, 60) for k in range(K)]
    std = np.sqrt(np.arange(1, 61, dtype=np.float64) ** -1.2)
    clients, models = [], []
    for k in range(K):
        if iid:
            W, b = W_global, b_global
        else:
            W = rng.normal(u[k], 1, (60, 10))
            b = rng.normal(u[k], 1, 10)
        x = v[k] + rng.standard_normal((n[k], 60)) * std
        clients.append((x, np.argmax(x @ W + b, axis=1)))
        models.append((W, b))
    return clients, v, models


def assert_exact_cover(parts, num_items):
    allidx = np.concatenate(parts)
    assert all(p.dtype == np.int64 and p.ndim == 1 for p in parts)
    assert all(p.shape[0] >= 1 for p in parts)
    assert allidx.shape[0] == num_items  # no index twice ...
    np.testing.assert_array_equal(np.sort(allidx), np.arange(num_items))  # ... and every one once


def assert_same_parts(a, b):
    assert len(a) == len(b)
    for pa, pb in zip(a, b, strict=True):
        np.testing.assert_array_equal(pa, pb)


def assert_layout(data: FederatedData, p: int):
    for X, y, off in (
        (data.X_train, data.y_train, data.train_offsets),
        (data.X_test, data.y_test, data.test_offsets),
    ):
        assert X.dtype == np.float64 and X.flags.c_contiguous and X.shape[1] == p
        assert y.dtype == np.int64 and y.shape == (X.shape[0],)
        assert off.dtype == np.int64 and off.shape == (data.num_clients + 1,)
        assert off[0] == 0 and off[-1] == X.shape[0] and np.all(np.diff(off) >= 1)
        assert y.min() >= 0 and y.max() < data.n_classes


def id_data(N, p=3, n_classes=4, seed=0):
    """Features whose column 0 is the row id, so rows can be traced through a split."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.arange(N, dtype=np.float64), rng.normal(size=(N, p - 1))])
    y = rng.integers(0, n_classes, N)
    return X, y


# --------------------------------------------------------------------------------------------
# Synthetic(alpha, beta)
# --------------------------------------------------------------------------------------------


def test_synthetic_clients_shapes_dtypes_sizes_and_labels():
    clients = synthetic_clients(1.0, 1.0, 30, seed=0)
    assert len(clients) == 30
    for X, y in clients:
        assert X.dtype == np.float64 and X.ndim == 2 and X.shape[1] == 60
        assert y.dtype == np.int64 and y.shape == (X.shape[0],)
        assert X.shape[0] >= 50  # n_k = floor(LogNormal(4, 2)) + 50
        assert y.min() >= 0 and y.max() < 10
        assert np.all(np.isfinite(X))


@pytest.mark.parametrize(("alpha", "beta", "iid"), [(1.0, 1.0, False), (0.5, 0.5, False),
                                                    (0.0, 0.0, False), (0.0, 0.0, True),
                                                    (0.7, 0.3, True)])  # fmt: skip
def test_synthetic_clients_follow_documented_draw_order_exactly(alpha, beta, iid):
    got = synthetic_clients(alpha, beta, 12, iid=iid, seed=3)
    want, _, _ = reference_synthetic(alpha, beta, 12, iid=iid, seed=3)
    assert len(got) == len(want)
    for (X, y), (Xr, yr) in zip(got, want, strict=True):
        np.testing.assert_array_equal(X, Xr)
        np.testing.assert_array_equal(y, yr)


def test_synthetic_clients_deterministic_in_seed():
    a = synthetic_clients(1.0, 1.0, 5, seed=7)
    b = synthetic_clients(1.0, 1.0, 5, seed=7)
    c = synthetic_clients(1.0, 1.0, 5, seed=8)
    for (Xa, ya), (Xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(Xa, Xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a[0][0][:50], c[0][0][:50])


def test_synthetic_iid_all_clients_share_one_labelling_rule():
    clients = synthetic_clients(0.0, 0.0, 8, iid=True, seed=1)
    _, v, models = reference_synthetic(0.0, 0.0, 8, iid=True, seed=1)
    W, b = models[0]
    for k, (X, y) in enumerate(clients):
        np.testing.assert_array_equal(v[k], np.zeros(60))  # alpha = beta = 0: all v_k = 0
        np.testing.assert_array_equal(y, np.argmax(X @ W + b, axis=1))


def test_synthetic_features_have_documented_mean_and_variance():
    clients = synthetic_clients(1.0, 1.0, 100, seed=0)
    _, v, _ = reference_synthetic(1.0, 1.0, 100, iid=False, seed=0)
    k = int(np.argmax([y.shape[0] for _, y in clients]))
    X = clients[k][0]
    n = X.shape[0]
    assert n >= 3000
    var = np.arange(1, 61, dtype=np.float64) ** -1.2
    # Per feature, the sample mean has standard error sqrt(var_j / n) and the sample variance a
    # relative standard error sqrt(2 / (n - 1)) (Gaussian data); 5 standard errors bounds all 60
    # features with a failure probability below 1e-4 (and the data are fixed by the seed).
    assert np.all(np.abs(X.mean(axis=0) - v[k]) <= 5 * np.sqrt(var / n))
    assert np.all(np.abs(X.var(axis=0, ddof=1) / var - 1) <= 5 * np.sqrt(2 / (n - 1)))


def test_synthetic_max_samples_per_client_clips_sizes():
    full = synthetic_clients(1.0, 1.0, 30, seed=0)
    clipped = synthetic_clients(1.0, 1.0, 30, seed=0, max_samples_per_client=100)
    n_full = np.array([y.shape[0] for _, y in full])
    n_clip = np.array([y.shape[0] for _, y in clipped])
    assert n_full.max() > 100
    np.testing.assert_array_equal(n_clip, np.minimum(n_full, 100))
    want, _, _ = reference_synthetic(1.0, 1.0, 30, iid=False, seed=0, max_samples=100)
    for (X, y), (Xr, yr) in zip(clipped, want, strict=True):
        np.testing.assert_array_equal(X, Xr)
        np.testing.assert_array_equal(y, yr)


def test_synthetic_federated_layout_and_counts():
    data = synthetic(1, 1, 30, seed=0)
    assert data.name == "synthetic(1,1)"
    assert data.num_clients == 30 and data.n_features == 60 and data.n_classes == 10
    assert_layout(data, 60)
    raw = synthetic_clients(1, 1, 30, seed=0)
    n_k = np.array([y.shape[0] for _, y in raw])
    np.testing.assert_array_equal(data.num_train_samples + data.num_test_samples, n_k)
    assert data.X_val is None and data.y_val is None and data.val_offsets is None
    assert synthetic(0, 0, 5, iid=True).name == "synthetic_iid"
    assert synthetic(0.5, 0.5, 5).name == "synthetic(0.5,0.5)"


def test_synthetic_split_seed_changes_split_not_data():
    a = synthetic(1, 1, 5, seed=0, split_seed=1)
    b = synthetic(1, 1, 5, seed=0, split_seed=2)
    assert not np.array_equal(a.X_test, b.X_test)
    all_a = np.sort(np.concatenate([a.X_train[:, 0], a.X_test[:, 0]]))
    all_b = np.sort(np.concatenate([b.X_train[:, 0], b.X_test[:, 0]]))
    np.testing.assert_array_equal(all_a, all_b)


def test_synthetic_val_fraction_adds_validation_split():
    data = synthetic(1, 1, 5, seed=0, val_fraction=0.1)
    assert data.X_val is not None and data.val_offsets is not None
    assert np.all(np.diff(data.val_offsets) >= 1)
    Xv, yv = data.client_val(0)
    assert Xv.shape[0] == data.num_val_samples[0] and yv.shape == (Xv.shape[0],)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"alpha": -1.0}, ValueError, "alpha"),
        ({"beta": -0.1}, ValueError, "beta"),
        ({"alpha": float("nan")}, ValueError, "alpha"),
        ({"num_clients": 0}, ValueError, "num_clients"),
        ({"num_clients": 2.0}, TypeError, "num_clients"),
        ({"seed": -1}, ValueError, "seed"),
        ({"iid": "yes"}, TypeError, "iid"),
        ({"max_samples_per_client": 0}, ValueError, "max_samples_per_client"),
    ],
)
def test_synthetic_clients_rejects_bad_input_naming_argument(kwargs, exc, match):
    args = {"alpha": 1.0, "beta": 1.0, "num_clients": 3} | kwargs
    with pytest.raises(exc, match=match):
        synthetic_clients(**args)


def test_synthetic_rejects_bad_fractions_before_generating():
    with pytest.raises(ValueError, match="test_fraction"):
        synthetic(1, 1, 3, test_fraction=1.0)
    with pytest.raises(ValueError, match="split_seed"):
        synthetic(1, 1, 3, split_seed=-2)


# --------------------------------------------------------------------------------------------
# Partitions
# --------------------------------------------------------------------------------------------

sizes = st.integers(1, 40).flatmap(lambda K: st.tuples(st.just(K), st.integers(K, 400)))


@given(sizes, st.integers(0, 2**32 - 1))
def test_partition_iid_exact_cover_sizes_within_one(kn, seed):
    K, N = kn
    parts = partition_iid(N, K, seed=seed)
    assert len(parts) == K
    assert_exact_cover(parts, N)
    lengths = [p.shape[0] for p in parts]
    assert max(lengths) - min(lengths) <= 1


@given(sizes, st.integers(1, 3), st.floats(0.3, 5.0), st.integers(0, 2**32 - 1))
def test_partition_power_law_exact_cover_and_min_size(kn, min_size, exponent, seed):
    K, N = kn
    N = max(N, K * min_size)
    parts = partition_power_law(N, K, exponent=exponent, min_size=min_size, seed=seed)
    assert len(parts) == K
    assert_exact_cover(parts, N)
    assert min(p.shape[0] for p in parts) >= min_size


@given(
    st.integers(1, 15),
    st.integers(1, 3),
    st.integers(1, 6),
    st.integers(0, 300),
    st.integers(0, 2**32 - 1),
)
def test_partition_shards_exact_cover(K, s, n_classes, extra, seed):
    N = K * s + extra
    labels = np.random.default_rng(seed).integers(0, n_classes, N)
    parts = partition_shards(labels, K, shards_per_client=s, seed=seed)
    assert len(parts) == K
    assert_exact_cover(parts, N)


@given(
    st.integers(1, 8),
    st.integers(1, 5),
    st.floats(1.0, 20.0),
    st.integers(0, 2**32 - 1),
)
def test_partition_dirichlet_exact_cover(K, n_classes, alpha, seed):
    N = 25 * K
    labels = np.random.default_rng(seed).integers(0, n_classes, N)
    parts = partition_dirichlet(labels, K, alpha, seed=seed)
    assert len(parts) == K
    assert_exact_cover(parts, N)


def test_partitions_deterministic_in_seed():
    labels = np.repeat(np.arange(5), 40)
    for make in (
        lambda s: partition_iid(200, 7, seed=s),
        lambda s: partition_power_law(200, 7, seed=s),
        lambda s: partition_shards(labels, 7, seed=s),
        lambda s: partition_dirichlet(labels, 7, 0.5, seed=s),
    ):
        assert_same_parts(make(4), make(4))
        assert not all(np.array_equal(a, b) for a, b in zip(make(4), make(5), strict=True))


def test_partition_power_law_sizes_are_skewed_with_exact_total():
    parts = partition_power_law(10_000, 50, exponent=1.5, seed=0)
    lengths = np.array([p.shape[0] for p in parts])
    assert lengths.sum() == 10_000
    # Pareto(1.5) weights: the largest of 50 is typically ~50^(1/1.5) ≈ 14 times the smallest,
    # while an IID split has a ratio of at most (200 + 1) / 200.
    assert lengths.max() >= 5 * np.median(lengths)


def test_partition_power_law_sizes_follow_largest_remainder():
    N, K, min_size = 1000, 7, 3
    rng = np.random.default_rng(11)
    w = (1.0 - rng.random(K)) ** (-1 / 1.5)
    quota = (N - K * min_size) * w / w.sum()
    lengths = np.array([p.shape[0] for p in partition_power_law(N, K, min_size=min_size, seed=11)])
    assert lengths.sum() == N
    # Hamilton rounding: every share is its quota rounded down or up.
    assert np.all(np.abs(lengths - min_size - quota) < 1)


def test_partition_shards_two_labels_per_client_when_shards_are_pure():
    # 10 classes of 20 items, 10 clients x 2 shards of 10: every shard lies inside one class.
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 20))
    parts = partition_shards(labels, 10, shards_per_client=2, seed=0)
    assert_exact_cover(parts, 200)
    assert all(p.shape[0] == 20 for p in parts)
    assert all(np.unique(labels[p]).shape[0] <= 2 for p in parts)


@pytest.mark.parametrize("seed", range(6))
def test_partition_dirichlet_is_the_documented_draw(seed):
    """The docstring's algorithm, written out here: per try, for each class in ascending order,
    p = rng.dirichlet(α·1_K), the class's indices permuted by rng.permutation and cut at
    rint(cumsum(p)[:-1]·n_c) (half to even); a try with a client below min_size is redrawn from
    the same generator. Floor instead of rint, another class order or a fresh generator per try
    would give other parts."""
    labels = np.repeat([2, 0, 1], [13, 9, 11])[np.random.default_rng(99).permutation(33)]
    K, alpha, min_size = 4, 0.7, 2
    rng = np.random.default_rng(seed)
    while True:
        pieces = [[] for _ in range(K)]
        for c in (0, 1, 2):
            p = rng.dirichlet(np.full(K, alpha))
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = np.rint(np.cumsum(p)[:-1] * idx.size).astype(int)
            for k, piece in enumerate(np.split(idx, cuts)):
                pieces[k].append(piece)
        want = [np.concatenate(pk) for pk in pieces]
        if min(w.size for w in want) >= min_size:
            break
    got = partition_dirichlet(labels, K, alpha, min_size=min_size, seed=seed)
    assert len(got) == K
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_partition_dirichlet_small_alpha_is_more_label_skewed():
    labels = np.repeat(np.arange(10), 100)

    def mean_distinct(alpha):
        parts = partition_dirichlet(labels, 10, alpha, seed=0)
        return np.mean([np.unique(labels[p]).shape[0] for p in parts])

    skewed, flat = mean_distinct(0.1), mean_distinct(100.0)
    assert flat == 10.0  # with alpha = 100 each client gets about 10 items of every class
    assert skewed < flat - 2


def test_partition_dirichlet_respects_min_size():
    labels = np.repeat(np.arange(4), 50)
    parts = partition_dirichlet(labels, 5, 0.5, min_size=15, seed=0)
    assert min(p.shape[0] for p in parts) >= 15


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: partition_iid(3, 5), ValueError, "num_clients"),
        (lambda: partition_iid(10, 0), ValueError, "num_clients"),
        (lambda: partition_iid(10.0, 2), TypeError, "num_items"),
        (lambda: partition_power_law(10, 5, min_size=3), ValueError, "min_size"),
        (lambda: partition_power_law(10, 2, exponent=0.0), ValueError, "exponent"),
        (lambda: partition_shards(np.arange(5), 3), ValueError, "shards"),
        (lambda: partition_shards(np.arange(5), 2, shards_per_client=0), ValueError,
         "shards_per_client"),
        (lambda: partition_shards([0.5, 1.0], 1), TypeError, "labels"),
        (lambda: partition_dirichlet(np.arange(10), 2, 0.0), ValueError, "alpha"),
        (lambda: partition_dirichlet(np.arange(10), 2, 1.0, max_tries=0), ValueError,
         "max_tries"),
        (lambda: partition_dirichlet(np.zeros((2, 5), int), 2, 1.0), ValueError, "labels"),
    ],
)  # fmt: skip
def test_partitions_reject_bad_input_naming_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_partition_dirichlet_gives_up_naming_min_size_and_alpha():
    # alpha = 0.01 puts (almost) all of each of the 2 classes on one client: a third client
    # never reaches 20 items.
    labels = np.repeat(np.arange(2), 50)
    with pytest.raises(ValueError, match="min_size=20.*alpha=0.01"):
        partition_dirichlet(labels, 3, 0.01, min_size=20, max_tries=5, seed=0)


# --------------------------------------------------------------------------------------------
# federate / from_client_arrays
# --------------------------------------------------------------------------------------------


def expected_split_sizes(n, test_fraction, val_fraction):
    n_test = max(1, round(test_fraction * n))
    n_val = max(1, round(val_fraction * n)) if val_fraction > 0 else 0
    return n - n_test - n_val, n_test, n_val


def test_federate_splits_each_client_disjointly_by_the_rule():
    X, y = id_data(300)
    parts = partition_power_law(300, 9, min_size=4, seed=1)
    data = federate(X, y, parts, n_classes=4, test_fraction=0.25, val_fraction=0.1, seed=3)
    assert_layout(data, 3)
    assert data.n_classes == 4
    for k, part in enumerate(parts):
        splits = (data.client_train(k), data.client_test(k), data.client_val(k))
        ids = [Xs[:, 0].astype(np.int64) for Xs, _ in splits]
        assert tuple(i.shape[0] for i in ids) == expected_split_sizes(part.shape[0], 0.25, 0.1)
        np.testing.assert_array_equal(np.sort(np.concatenate(ids)), np.sort(part))  # disjoint cover
        for i, (Xs, ys) in zip(ids, splits, strict=True):
            np.testing.assert_array_equal(Xs, X[i])  # rows and labels travel together
            np.testing.assert_array_equal(ys, y[i])
        assert ids[0].shape[0] >= 1 and ids[1].shape[0] >= 1


def test_federate_rows_match_source_rows():
    X, y = id_data(120, p=4)
    data = federate(X, y, partition_iid(120, 6, seed=0), seed=0)
    for Xs, ys in ((data.X_train, data.y_train), (data.X_test, data.y_test)):
        ids = Xs[:, 0].astype(np.int64)
        np.testing.assert_array_equal(Xs, X[ids])
        np.testing.assert_array_equal(ys, y[ids])


@given(st.integers(2, 400), st.floats(0.0, 0.6), st.floats(0.0, 0.3), st.integers(0, 1000))
def test_federate_split_sizes_follow_rule(n, test_fraction, val_fraction, seed):
    X, y = id_data(n)
    want = expected_split_sizes(n, test_fraction, val_fraction)
    if want[0] < 1:
        with pytest.raises(ValueError, match="client 0"):
            federate(X, y, [np.arange(n)], test_fraction=test_fraction, val_fraction=val_fraction)
        return
    data = federate(
        X, y, [np.arange(n)], test_fraction=test_fraction, val_fraction=val_fraction, seed=seed
    )
    got_val = 0 if data.val_offsets is None else int(data.num_val_samples[0])
    assert (int(data.num_train_samples[0]), int(data.num_test_samples[0]), got_val) == want


def test_federate_deterministic_in_seed():
    X, y = id_data(200)
    parts = partition_iid(200, 5, seed=0)
    a, b, c = (federate(X, y, parts, seed=s) for s in (1, 1, 2))
    for field in ("X_train", "y_train", "train_offsets", "X_test", "y_test", "test_offsets"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.X_test, c.X_test)


def test_federated_data_views_and_sizes():
    X, y = id_data(100)
    data = federate(X, y, partition_iid(100, 4, seed=0), name="toy")
    assert data.name == "toy" and data.num_clients == 4 and data.n_features == 3
    assert data.num_train_samples.dtype == np.int64 and data.num_train_samples.shape == (4,)
    np.testing.assert_array_equal(data.num_train_samples, np.diff(data.train_offsets))
    Xk, yk = data.client_train(2)
    assert np.shares_memory(Xk, data.X_train) and np.shares_memory(yk, data.y_train)
    assert Xk.shape == (data.num_train_samples[2], 3)
    Xt, _ = data.client_test(3)
    assert np.shares_memory(Xt, data.X_test) and Xt.shape[0] == data.num_test_samples[3]
    assert data.num_val_samples is None
    with pytest.raises(ValueError, match="validation"):
        data.client_val(0)
    with pytest.raises(ValueError, match="k"):
        data.client_train(4)


def test_federate_infers_n_classes_and_accepts_int_features():
    X = np.arange(40).reshape(20, 2)
    y = np.arange(20) % 3
    data = federate(X, y, [np.arange(10), np.arange(10, 20)])
    assert data.n_classes == 3
    assert data.X_train.dtype == np.float64


def test_from_client_arrays_equals_federate_on_concatenation():
    X, y = id_data(90)
    clients = [(X[:30], y[:30]), (X[30:50], y[30:50]), (X[50:], y[50:])]
    parts = [np.arange(30), np.arange(30, 50), np.arange(50, 90)]
    a = from_client_arrays(clients, n_classes=4, test_fraction=0.3, val_fraction=0.1, seed=5)
    b = federate(X, y, parts, n_classes=4, test_fraction=0.3, val_fraction=0.1, seed=5)
    for field in FederatedData._fields:
        va, vb = getattr(a, field), getattr(b, field)
        if isinstance(va, np.ndarray):
            np.testing.assert_array_equal(va, vb)
        else:
            assert va == vb


def test_federate_rejects_too_small_client_naming_it():
    X, y = id_data(10)
    with pytest.raises(ValueError, match="client 1 has 1 sample"):
        federate(X, y, [np.arange(5), np.array([5]), np.arange(6, 10)])
    with pytest.raises(ValueError, match="client 0 has 2 sample"):
        federate(X, y, [np.arange(2), np.arange(2, 10)], val_fraction=0.1)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"X": np.full((10, 3), np.nan)}, ValueError, "X must be finite"),
        ({"X": np.zeros(10)}, ValueError, "X must be 2-dimensional"),
        ({"X": np.array([["a"] * 3] * 10)}, TypeError, "X"),
        ({"y": np.arange(9)}, ValueError, "same length"),
        ({"y": np.full(10, 0.5)}, TypeError, "y"),
        ({"y": -np.ones(10, dtype=int)}, ValueError, "y must be >= 0"),
        ({"n_classes": 2}, ValueError, "n_classes"),
        ({"test_fraction": 1.0}, ValueError, "test_fraction"),
        ({"test_fraction": -0.1}, ValueError, "test_fraction"),
        ({"val_fraction": 0.9}, ValueError, "test_fraction \\+ val_fraction"),
        ({"parts": []}, ValueError, "parts"),
        ({"parts": [np.arange(5), np.array([], dtype=int)]}, ValueError, "parts\\[1\\]"),
        ({"parts": [np.arange(5), np.array([10])]}, ValueError, "parts\\[1\\]"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_federate_rejects_bad_input_naming_argument(kwargs, exc, match):
    args = {
        "X": np.zeros((10, 3)),
        "y": np.arange(10) % 3,
        "parts": [np.arange(5), np.arange(5, 10)],
        "n_classes": 3,
    } | kwargs
    X, y, parts = args.pop("X"), args.pop("y"), args.pop("parts")
    with pytest.raises(exc, match=match):
        federate(X, y, parts, **args)


def test_from_client_arrays_rejects_bad_clients():
    ok = (np.zeros((5, 2)), np.zeros(5, dtype=int))
    with pytest.raises(ValueError, match=r"clients\[1\] X has 3 features"):
        from_client_arrays([ok, (np.zeros((5, 3)), np.zeros(5, dtype=int))], n_classes=2)
    with pytest.raises(ValueError, match=r"clients\[0\] y must be in \[0, n_classes\)"):
        from_client_arrays([(np.zeros((5, 2)), np.full(5, 2))], n_classes=2)
    with pytest.raises(ValueError, match="clients"):
        from_client_arrays([], n_classes=2)


# --------------------------------------------------------------------------------------------
# Shipped data and the spec parser
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", ["iid", "powerlaw", "shards", "dirichlet"])
def test_load_digits_shapes_and_ranges(partition):
    data = load_digits(10, partition=partition, seed=0)
    assert_layout(data, 64)
    assert data.num_clients == 10 and data.n_classes == 10
    assert data.name.startswith(f"digits-{partition}")
    ref = sk_load_digits()
    assert data.X_train.shape[0] + data.X_test.shape[0] == ref.data.shape[0] == 1797
    for X in (data.X_train, data.X_test):
        assert X.min() >= 0.0 and X.max() <= 1.0
    # Every image is used exactly once: compare the multisets of (pixel sum, label).
    got = np.concatenate([data.X_train, data.X_test]).sum(axis=1) * 16
    got_labels = np.concatenate([data.y_train, data.y_test])
    key = np.lexsort((got, got_labels))
    ref_key = np.lexsort((ref.data.sum(axis=1), ref.target))
    np.testing.assert_allclose(got[key], ref.data.sum(axis=1)[ref_key], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(got_labels[key], ref.target[ref_key])


def test_load_digits_rejects_unknown_partition():
    with pytest.raises(ValueError, match="partition"):
        load_digits(10, partition="random")


@pytest.mark.parametrize(
    ("spec", "name", "p"),
    [
        ("synthetic:1,1", "synthetic(1,1)", 60),
        ("synthetic:0.5,0.5", "synthetic(0.5,0.5)", 60),
        ("synthetic:0,0", "synthetic(0,0)", 60),
        ("synthetic_iid", "synthetic_iid", 60),
        ("digits", "digits-shards", 64),
        ("digits:iid", "digits-iid", 64),
        ("digits:powerlaw", "digits-powerlaw", 64),
        ("digits:shards", "digits-shards", 64),
        ("digits:dirichlet=0.5", "digits-dirichlet(0.5)", 64),
    ],
)
def test_load_accepts_every_documented_spec(spec, name, p):
    data = load(spec, num_clients=12, seed=0)
    assert data.name == name and data.num_clients == 12 and data.n_features == p
    assert_layout(data, p)


def test_load_synthetic_equals_synthetic():
    a = load("synthetic:1,1", num_clients=5, seed=2, test_fraction=0.3)
    b = synthetic(1.0, 1.0, 5, seed=2, test_fraction=0.3)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)


@pytest.mark.parametrize(
    "spec",
    ["synthetic:1", "synthetic:1,2,3", "synthetic:a,b", "synthetic:-1,1", "synthetic:nan,1",
     "synthetic", "mnist", "", "digits:dirichlet=-1", "digits:dirichlet=0", "digits:dirichlet=x",
     "digits:foo"],
)  # fmt: skip
def test_load_rejects_bad_spec_listing_accepted_forms(spec):
    with pytest.raises(ValueError, match="accepted forms are") as info:
        load(spec, num_clients=5)
    assert all(form in str(info.value) for form in DATA_SPECS)


def test_load_rejects_non_string_spec():
    with pytest.raises(TypeError, match="spec"):
        load(3)  # type: ignore[arg-type]


def test_data_specs_is_a_tuple_of_strings():
    assert isinstance(DATA_SPECS, tuple) and all(isinstance(s, str) for s in DATA_SPECS)
    assert any(s.startswith("synthetic:") for s in DATA_SPECS) and "synthetic_iid" in DATA_SPECS
