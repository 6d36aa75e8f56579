"""Tests of fairagg.data: Synthetic(α, β), partitions, per-client splits, loaders (SPEC §11)."""

from __future__ import annotations

import re
import sys

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


def exactly(message):
    """A ``pytest.raises`` pattern matching the whole message and nothing else."""
    return f"^{re.escape(message)}$"


def assert_same_data(a: FederatedData, b: FederatedData):
    for field in FederatedData._fields:
        va, vb = getattr(a, field), getattr(b, field)
        if isinstance(va, np.ndarray):
            assert va.dtype == vb.dtype, field
            np.testing.assert_array_equal(va, vb, err_msg=field)
        else:
            assert va == vb, field


def reference_split(X, y, parts, test_fraction, val_fraction, rng):
    """The per-client split rule documented in ``federate``, written out independently: per
    client, n_test = max(1, round(t·n)), n_val = max(1, round(v·n)) if v > 0, the test rows are
    perm[:n_test] of rng.permutation(n), then n_val validation rows, then the training rows, each
    kept in its order in the part."""
    out = {"train": [], "test": [], "val": []}
    for part in parts:
        n = len(part)
        n_test = max(1, round(test_fraction * n))
        n_val = max(1, round(val_fraction * n)) if val_fraction > 0 else 0
        perm = rng.permutation(n)
        out["test"].append(part[np.sort(perm[:n_test])])
        out["val"].append(part[np.sort(perm[n_test : n_test + n_val])])
        out["train"].append(part[np.sort(perm[n_test + n_val :])])
    result = {}
    for split, idx in out.items():
        flat = np.concatenate(idx)
        offsets = np.concatenate([[0], np.cumsum([len(i) for i in idx])])
        result[split] = (X[flat], y[flat], offsets)
    return result


def assert_split_is(data: FederatedData, ref, *, with_val):
    for split, (X, y, off) in (("train", data[:3]), ("test", data[3:6])) + (
        (("val", (data.X_val, data.y_val, data.val_offsets)),) if with_val else ()
    ):
        Xr, yr, offr = ref[split]
        np.testing.assert_array_equal(X, Xr, err_msg=split)
        np.testing.assert_array_equal(y, yr, err_msg=split)
        np.testing.assert_array_equal(off, offr, err_msg=split)
    if not with_val:
        assert data.X_val is None and data.y_val is None and data.val_offsets is None


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


# u_k shifts every class's logit by the same u_k·(Σx + 1), so in exact arithmetic the labels do not
# depend on u at all (Synthetic(0, β) and Synthetic(5, β) with one seed have the same labels); only
# with a huge α, where rounding u_k + N(0, 1) decides near-ties, does the draw of u show in the
# labels, so that case pins ``u = rng.normal(0, alpha, K)``.
@pytest.mark.parametrize(("alpha", "beta", "iid"), [(1.0, 1.0, False), (0.5, 0.5, False),
                                                    (0.0, 0.0, False), (0.0, 0.0, True),
                                                    (0.7, 0.3, True),
                                                    (1e14, 1.0, False)])  # fmt: skip
def test_synthetic_clients_follow_documented_draw_order_exactly(alpha, beta, iid):
    got = synthetic_clients(alpha, beta, 12, iid=iid, seed=3)
    want, _, _ = reference_synthetic(alpha, beta, 12, iid=iid, seed=3)
    assert len(got) == len(want)
    for (X, y), (Xr, yr) in zip(got, want, strict=True):
        np.testing.assert_array_equal(X, Xr)
        np.testing.assert_array_equal(y, yr)


def test_synthetic_clients_defaults_are_30_clients_seed_0():
    got = synthetic_clients(1.0, 1.0, max_samples_per_client=3)
    want = synthetic_clients(1.0, 1.0, 30, iid=False, seed=0, max_samples_per_client=3)
    assert len(got) == 30
    for (X, y), (Xr, yr) in zip(got, want, strict=True):
        np.testing.assert_array_equal(X, Xr)
        np.testing.assert_array_equal(y, yr)


def test_synthetic_clients_accepts_smallest_sizes():
    clients = synthetic_clients(1.0, 1.0, 1, seed=0, max_samples_per_client=1)
    assert len(clients) == 1
    assert clients[0][0].shape == (1, 60) and clients[0][1].shape == (1,)


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


@pytest.mark.parametrize(
    ("alpha", "beta", "name"),
    [(0, 0, "synthetic_iid"), (0.7, 0.3, "synthetic_iid(0.7,0.3)"),
     (0.5, 0, "synthetic_iid(0.5,0)"), (0, 0.5, "synthetic_iid(0,0.5)")],
)  # fmt: skip
def test_synthetic_iid_name_carries_nonzero_alpha_beta(alpha, beta, name):
    assert synthetic(alpha, beta, 2, iid=True, max_samples_per_client=4).name == name


def test_synthetic_is_synthetic_clients_split_with_seed_1_stream():
    """synthetic() = synthetic_clients() with the same arguments, split per client by the rule of
    federate() with ``np.random.default_rng([seed, 1])`` when split_seed is None."""
    kw = {"iid": True, "seed": 5, "max_samples_per_client": 40}
    clients = synthetic_clients(0.7, 0.3, 4, **kw)
    X = np.concatenate([c[0] for c in clients])
    y = np.concatenate([c[1] for c in clients])
    starts = np.cumsum([0] + [c[1].shape[0] for c in clients])
    parts = [np.arange(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    data = synthetic(0.7, 0.3, 4, test_fraction=0.25, val_fraction=0.1, **kw)
    ref = reference_split(X, y, parts, 0.25, 0.1, np.random.default_rng([5, 1]))
    assert_split_is(data, ref, with_val=True)
    assert data.n_classes == 10


@pytest.mark.parametrize(
    ("alpha", "beta", "K", "iid", "seed", "max_samples", "val_fraction", "block"),
    [(1.0, 1.0, 40, False, 0, None, 0.0, 256),  # clients larger than a block, blocks of several
     (0.5, 0.5, 25, False, 7, 300, 0.1, 500),
     (0.7, 0.3, 30, True, 2, None, 0.05, 64),
     (1.0, 1.0, 12, False, 3, None, 0.0, 2**13)],  # the default block
)  # fmt: skip
def test_synthetic_in_blocks_is_the_documented_draws_split_per_client(
    monkeypatch, alpha, beta, K, iid, seed, max_samples, val_fraction, block
):
    """synthetic() generates and splits a block of clients at a time into preallocated arrays;
    whatever the block size, the result is bit for bit the documented draws of
    ``synthetic_clients`` concatenated and split by the rule of ``federate`` with
    ``default_rng([seed, 1])``."""
    import fairagg.data as data_module

    monkeypatch.setattr(data_module, "_SYNTHETIC_BLOCK_ROWS", block)
    clients, _, _ = reference_synthetic(alpha, beta, K, iid=iid, seed=seed, max_samples=max_samples)
    X = np.concatenate([c[0] for c in clients])
    y = np.concatenate([c[1] for c in clients])
    starts = np.cumsum([0] + [c[1].shape[0] for c in clients])
    assert block == 2**13 or starts[-1] > 3 * block  # several blocks
    parts = [np.arange(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    data = synthetic(
        alpha, beta, K, iid=iid, seed=seed, val_fraction=val_fraction,
        max_samples_per_client=max_samples,
    )  # fmt: skip
    ref = reference_split(X, y, parts, 0.2, val_fraction, np.random.default_rng([seed, 1]))
    assert_split_is(data, ref, with_val=val_fraction > 0)
    assert_layout(data, 60)


def test_synthetic_peak_memory_at_most_twice_the_arrays_returned():
    """Issue 38: the rows are generated a block at a time straight into the returned arrays, so the
    peak memory (NumPy's allocations, traced) stays within 2× the arrays returned; concatenating
    a per-client list and then gathering the splits peaked above 3×."""
    import tracemalloc

    synthetic(1, 1, 2, seed=0)  # imports and first-call allocations outside the trace
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        data = synthetic(1, 1, 400, seed=0, val_fraction=0.1)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    returned = sum(a.nbytes for a in data if isinstance(a, np.ndarray))
    assert returned > 40 * 2**20  # large against a block (3.75 MiB) and the largest client
    assert peak <= 2 * returned


def test_synthetic_defaults_are_30_clients_seed_0():
    assert_same_data(
        synthetic(1.0, 1.0, max_samples_per_client=3),
        synthetic(1.0, 1.0, 30, iid=False, seed=0, test_fraction=0.2, val_fraction=0.0,
                  max_samples_per_client=3),
    )  # fmt: skip


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
    ("kwargs", "exc", "message"),
    [
        ({"alpha": -1.0}, ValueError, "alpha must be >= 0.0; got -1.0"),
        ({"beta": -0.1}, ValueError, "beta must be >= 0.0; got -0.1"),
        ({"alpha": float("nan")}, ValueError, "alpha must be finite; got nan"),
        ({"num_clients": 0}, ValueError, "num_clients must be >= 1; got 0"),
        ({"num_clients": 2.0}, TypeError, "num_clients must be an integer; got float 2.0"),
        ({"seed": -1}, ValueError, "seed must be >= 0; got -1"),
        ({"iid": "yes"}, TypeError, "iid must be a bool; got str 'yes'"),
        ({"max_samples_per_client": 0}, ValueError, "max_samples_per_client must be >= 1; got 0"),
    ],
)
def test_synthetic_clients_rejects_bad_input_naming_argument(kwargs, exc, message):
    args = {"alpha": 1.0, "beta": 1.0, "num_clients": 3} | kwargs
    with pytest.raises(exc, match=exactly(message)):
        synthetic_clients(**args)
    with pytest.raises(exc, match=exactly(message)):
        synthetic(**args)


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"test_fraction": 1.0}, ValueError, "test_fraction must be < 1.0; got 1.0"),
        ({"split_seed": -2}, ValueError, "split_seed must be >= 0; got -2"),
        # seed is checked before split_seed, and before anything is generated
        ({"seed": -1, "split_seed": -2}, ValueError, "seed must be >= 0; got -1"),
        ({"seed": 1.5}, TypeError, "seed must be an integer; got float 1.5"),
    ],
)
def test_synthetic_rejects_bad_split_arguments_before_generating(kwargs, exc, message):
    with pytest.raises(exc, match=exactly(message)):
        synthetic(1, 1, 3, **kwargs)


def test_synthetic_accepts_split_seed_0():
    a = synthetic(1, 1, 2, split_seed=0, max_samples_per_client=10)
    b = synthetic(1, 1, 2, split_seed=1, max_samples_per_client=10)
    assert a.num_clients == 2 and not np.array_equal(a.X_test, b.X_test)


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


def test_partition_defaults_are_the_documented_values():
    labels = np.repeat(np.arange(3), 10)[np.random.default_rng(1).permutation(30)]
    assert_same_parts(partition_iid(10, 3), partition_iid(10, 3, seed=0))
    assert_same_parts(
        partition_power_law(100, 10),
        partition_power_law(100, 10, exponent=1.5, min_size=1, seed=0),
    )
    assert_same_parts(
        partition_shards(labels, 5), partition_shards(labels, 5, shards_per_client=2, seed=0)
    )
    # seed 3 gives a client a single item in the first try: min_size 1 keeps that try
    assert_same_parts(
        partition_dirichlet(labels, 4, 0.5, seed=3),
        partition_dirichlet(labels, 4, 0.5, min_size=1, max_tries=100, seed=3),
    )
    assert_same_parts(
        partition_dirichlet(labels, 4, 0.5), partition_dirichlet(labels, 4, 0.5, seed=0)
    )
    assert min(p.shape[0] for p in partition_dirichlet(labels, 4, 0.5, seed=3)) == 1


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


def reference_power_law(N, K, min_size, exponent, seed):
    """partition_power_law's documented steps with exact Hamilton rounding: floor of each quota,
    the leftover units one each to the largest fractional parts, ties to the lower index. The
    weights are max-shifted in log space as the implementation does (only their ratios matter), so
    that the quotas, and hence their ties, are bit-identical."""
    rng = np.random.default_rng(seed)
    log_w = -np.log(1.0 - rng.random(K)) / exponent
    w = np.exp(log_w - log_w.max())
    quota = (N - K * min_size) * (w / w.sum())
    sizes = [int(q) for q in np.floor(quota)]
    left = N - K * min_size - sum(sizes)
    for k in sorted(range(K), key=lambda k: (-(quota[k] - sizes[k]), k))[:left]:
        sizes[k] += 1
    perm = rng.permutation(N)
    return np.split(perm, np.cumsum([min_size + z for z in sizes])[:-1])


@pytest.mark.parametrize(
    ("N", "K", "min_size", "exponent", "seed"),
    [
        # one leftover unit, which goes to client 0 (largest fractional part 0.53), not to the
        # largest quota (client 1) nor the last client
        (50, 4, 1, 1.5, 7),
        # exponent 1e17 makes the weights equal to rounding: quotas tie in groups, and the ties go
        # to the lower index
        (1027, 40, 1, 1e17, 0),
        # a tiny exponent gives weights U^(-100) far beyond float64's range: only a log-space
        # shift keeps them finite
        (100, 5, 2, 0.01, 0),
    ],
)
def test_partition_power_law_is_the_documented_draw(N, K, min_size, exponent, seed):
    got = partition_power_law(N, K, exponent=exponent, min_size=min_size, seed=seed)
    assert_same_parts(got, reference_power_law(N, K, min_size, exponent, seed))


def test_partition_shards_is_the_documented_cut():
    """Stable sort by label (ties keep index order), array_split into K·s shards, the shards
    permuted by default_rng(seed), client k taking perm[k·s:(k+1)·s] in that order."""
    labels = np.random.default_rng(2).integers(0, 3, 61)
    K, s, seed = 4, 3, 5
    shards = np.array_split(np.argsort(labels, kind="stable"), K * s)
    perm = np.random.default_rng(seed).permutation(K * s)
    want = [np.concatenate([shards[j] for j in perm[k * s : (k + 1) * s]]) for k in range(K)]
    assert_same_parts(partition_shards(labels, K, shards_per_client=s, seed=seed), want)


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


_SEED_ERRORS = [
    ({"seed": -1}, ValueError, "seed must be >= 0; got -1"),
    ({"seed": 1.5}, TypeError, "seed must be an integer; got float 1.5"),
]
_TEN = np.arange(10)


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: partition_iid(3, 5), ValueError,
         "cannot give each of num_clients=5 clients at least one item: only num_items=3"),
        (lambda: partition_iid(0, 1), ValueError, "num_items must be >= 1; got 0"),
        (lambda: partition_iid(10, 0), ValueError, "num_clients must be >= 1; got 0"),
        (lambda: partition_iid(10.0, 2), TypeError, "num_items must be an integer; got float 10.0"),
        (lambda: partition_power_law(10, 5, min_size=3), ValueError,
         "num_items=10 is too few for num_clients=5 clients of at least min_size=3 items each"),
        (lambda: partition_power_law(10, 2, exponent=0.0), ValueError,
         "exponent must be > 0.0; got 0.0"),
        (lambda: partition_power_law(10, 2, min_size=0), ValueError,
         "min_size must be >= 1; got 0"),
        (lambda: partition_shards(np.arange(5), 3), ValueError,
         "cannot cut 5 labels into num_clients·shards_per_client = 3·2 = 6 non-empty shards"),
        (lambda: partition_shards(np.arange(5), 0), ValueError,
         "num_clients must be >= 1; got 0"),
        (lambda: partition_shards(np.arange(5), 2, shards_per_client=0), ValueError,
         "shards_per_client must be >= 1; got 0"),
        (lambda: partition_shards([0.5, 1.0], 1), TypeError,
         "labels must hold integers; got non-integral values"),
        (lambda: partition_shards([], 1), ValueError, "labels must be non-empty; got shape (0,)"),
        (lambda: partition_shards(np.zeros((2, 5), int), 1), ValueError,
         "labels must be 1-dimensional; got shape (2, 5)"),
        (lambda: partition_dirichlet(_TEN, 0, 1.0), ValueError,
         "num_clients must be >= 1; got 0"),
        (lambda: partition_dirichlet(_TEN, 2, 0.0), ValueError, "alpha must be > 0.0; got 0.0"),
        (lambda: partition_dirichlet(_TEN, 2, -1.0), ValueError, "alpha must be > 0.0; got -1.0"),
        (lambda: partition_dirichlet(_TEN, 2, 1.0, min_size=0), ValueError,
         "min_size must be >= 1; got 0"),
        (lambda: partition_dirichlet(_TEN, 2, 1.0, max_tries=0), ValueError,
         "max_tries must be >= 1; got 0"),
        (lambda: partition_dirichlet(_TEN, 3, 1.0, min_size=4), ValueError,
         "10 labels are too few for num_clients=3 clients of at least min_size=4 items each"),
        (lambda: partition_dirichlet(np.zeros((2, 5), int), 2, 1.0), ValueError,
         "labels must be 1-dimensional; got shape (2, 5)"),
    ]
    + [(lambda kw=kw: partition_iid(10, 2, **kw), exc, msg) for kw, exc, msg in _SEED_ERRORS]
    + [(lambda kw=kw: partition_power_law(10, 2, **kw), exc, msg)
       for kw, exc, msg in _SEED_ERRORS]
    + [(lambda kw=kw: partition_shards(_TEN, 2, **kw), exc, msg) for kw, exc, msg in _SEED_ERRORS]
    + [(lambda kw=kw: partition_dirichlet(_TEN, 2, 1.0, **kw), exc, msg)
       for kw, exc, msg in _SEED_ERRORS],
)  # fmt: skip
def test_partitions_reject_bad_input_naming_argument(call, exc, message):
    with pytest.raises(exc, match=exactly(message)):
        call()


def test_partition_dirichlet_accepts_boundary_sizes():
    # exactly K·min_size labels: the only valid partition is accepted (one client, every item)
    np.testing.assert_array_equal(
        np.sort(partition_dirichlet(np.arange(5) % 2, 1, 1.0, min_size=5)[0]), np.arange(5)
    )
    # one try is allowed
    parts = partition_dirichlet(np.repeat(np.arange(2), 20), 2, 100.0, max_tries=1, seed=0)
    assert_exact_cover(parts, 40)


def test_partition_dirichlet_gives_up_naming_min_size_and_alpha():
    # alpha = 0.01 puts (almost) all of each of the 2 classes on one client: a third client
    # never reaches 20 items.
    labels = np.repeat(np.arange(2), 50)
    with pytest.raises(ValueError, match=exactly(
        "partition_dirichlet could not give every one of 3 clients at least min_size=20 items in "
        "max_tries=5 tries with alpha=0.01; increase alpha or max_tries, or lower min_size"
    )):  # fmt: skip
        partition_dirichlet(labels, 3, 0.01, min_size=20, max_tries=5, seed=0)
    # the default max_tries is 100 (min_size 30 needs all three clients to share both classes)
    with pytest.raises(ValueError, match="in max_tries=100 tries"):
        partition_dirichlet(labels, 3, 0.01, min_size=30, seed=0)


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
    with pytest.raises(ValueError, match=exactly("k must be <= 3; got 4")):
        data.client_train(4)
    with pytest.raises(ValueError, match=exactly("k must be >= 0; got -1")):
        data.client_test(-1)


@pytest.mark.parametrize("missing", ["X_val", "y_val", "val_offsets"])
def test_client_val_needs_all_three_validation_arrays(missing):
    X, y = id_data(40)
    data = federate(X, y, partition_iid(40, 2, seed=0), val_fraction=0.2, name="toy")
    assert data.client_val(1)[0].shape[0] == data.num_val_samples[1]
    with pytest.raises(ValueError, match=exactly(
        "dataset 'toy' has no validation split (val_fraction was 0)"
    )):  # fmt: skip
        data._replace(**{missing: None}).client_val(0)


def test_federate_infers_n_classes_and_accepts_int_features():
    X = np.arange(40).reshape(20, 2)
    y = np.arange(20) % 3
    data = federate(X, y, [np.arange(10), np.arange(10, 20)])
    assert data.n_classes == 3
    assert data.X_train.dtype == np.float64


def test_federate_casts_float32_features_to_float64():
    X, y = id_data(20)
    data = federate(X.astype(np.float32), y, [np.arange(10), np.arange(10, 20)])
    assert data.X_train.dtype == np.float64 and data.X_test.dtype == np.float64
    ids = data.X_train[:, 0].astype(np.int64)
    np.testing.assert_array_equal(data.X_train, X.astype(np.float32).astype(np.float64)[ids])


def test_federate_accepts_one_row_one_class_and_overlapping_parts():
    # overlap is allowed: one row used twice gives a client one training and one test sample
    data = federate(np.ones((1, 2)), np.zeros(1, dtype=int), [np.array([0, 0])], n_classes=1)
    assert data.n_classes == 1
    np.testing.assert_array_equal(data.num_train_samples, [1])
    np.testing.assert_array_equal(data.num_test_samples, [1])


def test_federate_and_from_client_arrays_defaults():
    X, y = id_data(60)
    parts = [np.arange(25), np.arange(25, 60)]
    assert_same_data(
        federate(X, y, parts),
        federate(X, y, parts, n_classes=None, test_fraction=0.2, val_fraction=0.0, seed=0,
                 name=""),
    )  # fmt: skip
    clients = [(X[p], y[p]) for p in parts]
    assert_same_data(
        from_client_arrays(clients, n_classes=4),
        from_client_arrays(clients, n_classes=4, test_fraction=0.2, val_fraction=0.0, seed=0,
                           name=""),
    )  # fmt: skip


def test_from_client_arrays_casts_features_to_float64():
    y = np.array([0, 1, 0, 1, 1])
    a = from_client_arrays(
        [(np.arange(10).reshape(5, 2), y), (np.ones((5, 2), np.float32), y)], n_classes=2
    )
    b = from_client_arrays([(np.arange(10.0).reshape(5, 2), y), (np.ones((5, 2)), y)], n_classes=2)
    assert a.X_train.dtype == np.float64
    assert_same_data(a, b)
    single = from_client_arrays(
        [(np.ones((3, 2), np.float32), np.zeros(3, dtype=int))], n_classes=1
    )
    assert single.n_classes == 1 and single.X_train.dtype == np.float64


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
    with pytest.raises(ValueError, match=exactly(
        "client 1 has 1 sample(s): too few for 1 test + 0 validation + at least 1 training "
        "sample; drop or merge small clients or lower the fractions"
    )):  # fmt: skip
        federate(X, y, [np.arange(5), np.array([5]), np.arange(6, 10)])
    with pytest.raises(ValueError, match="client 0 has 2 sample"):
        federate(X, y, [np.arange(2), np.arange(2, 10)], val_fraction=0.1)


_FRACTION_ERRORS = [
    ({"test_fraction": 1.0}, ValueError, "test_fraction must be < 1.0; got 1.0"),
    ({"test_fraction": -0.1}, ValueError, "test_fraction must be >= 0.0; got -0.1"),
    ({"val_fraction": 1.0}, ValueError, "val_fraction must be < 1.0; got 1.0"),
    ({"val_fraction": -0.1}, ValueError, "val_fraction must be >= 0.0; got -0.1"),
    ({"val_fraction": float("nan")}, ValueError, "val_fraction must be finite; got nan"),
    ({"test_fraction": 0.5, "val_fraction": 0.5}, ValueError,
     "test_fraction + val_fraction must be < 1; got 0.5 + 0.5 = 1.0"),
    ({"test_fraction": 0.25, "val_fraction": 0.875}, ValueError,
     "test_fraction + val_fraction must be < 1; got 0.25 + 0.875 = 1.125"),
]  # fmt: skip
_COMMON_ERRORS = _FRACTION_ERRORS + [
    ({"n_classes": 0}, ValueError, "n_classes must be >= 1; got 0"),
    ({"n_classes": 2.0}, TypeError, "n_classes must be an integer; got float 2.0"),
    ({"seed": -1}, ValueError, "seed must be >= 0; got -1"),
    ({"seed": 1.5}, TypeError, "seed must be an integer; got float 1.5"),
    ({"name": 3}, TypeError, "name must be a str; got int"),
]


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    _COMMON_ERRORS + [
        ({"X": np.full((10, 3), np.nan)}, ValueError,
         "X must be finite; got 30 NaN and 0 infinite value(s) in an array of shape (10, 3)"),
        ({"X": np.zeros(10)}, ValueError, "X must be 2-dimensional; got shape (10,)"),
        ({"X": np.zeros((0, 3)), "y": np.zeros(0, dtype=int)}, ValueError,
         "X must have at least 1 entry along its first axis; got shape (0, 3)"),
        ({"X": np.array([["a"] * 3] * 10)}, TypeError,
         "X must be an array of real numbers; got an array of dtype <U1 and shape (10, 3)"),
        ({"y": np.arange(9)}, ValueError, "X and y must have the same length; got 10 and 9"),
        ({"y": np.zeros((10, 1), dtype=int)}, ValueError,
         "y must be 1-dimensional; got shape (10, 1)"),
        ({"y": np.full(10, 0.5)}, TypeError, "y must hold integers; got non-integral values"),
        ({"y": -np.ones(10, dtype=int)}, ValueError, "y must be >= 0; got minimum -1"),
        ({"n_classes": 2}, ValueError, "y must be in [0, n_classes) = [0, 2); got maximum 2"),
        ({"parts": []}, ValueError,
         "parts must hold at least one client's index array; got none"),
        ({"parts": np.arange(10).reshape(2, 5)}, TypeError,
         "parts must be a sequence of index arrays; got ndarray"),
        ({"parts": "01"}, TypeError, "parts must be a sequence of index arrays; got str"),
        ({"parts": [np.arange(5), np.arange(5, 10)[None]]}, ValueError,
         "parts[1] must be 1-dimensional; got shape (1, 5)"),
        ({"parts": [np.arange(5), np.array([], dtype=int)]}, ValueError,
         "parts[1] is empty: every client needs at least one item"),
        ({"parts": [np.arange(5), np.array([10])]}, ValueError,
         "parts[1] must index rows in [0, 10); got values in [10, 10]"),
    ],
)  # fmt: skip
def test_federate_rejects_bad_input_naming_argument(kwargs, exc, message):
    args = {
        "X": np.zeros((10, 3)),
        "y": np.arange(10) % 3,
        "parts": [np.arange(5), np.arange(5, 10)],
        "n_classes": 3,
    } | kwargs
    X, y, parts = args.pop("X"), args.pop("y"), args.pop("parts")
    with pytest.raises(exc, match=exactly(message)):
        federate(X, y, parts, **args)


_OK = (np.zeros((5, 2)), np.zeros(5, dtype=int))


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    _COMMON_ERRORS + [
        ({"clients": [_OK, (np.zeros((5, 3)), np.zeros(5, dtype=int))]}, ValueError,
         "clients[1] X has 3 features but clients[0] X has 2"),
        ({"clients": [(np.zeros((5, 2)), np.full(5, 2))]}, ValueError,
         "clients[0] y must be in [0, n_classes) = [0, 2); got maximum 2"),
        ({"clients": []}, ValueError, "clients must hold at least one (X_k, y_k) pair; got none"),
        ({"clients": iter([_OK])}, TypeError,
         "clients must be a sequence of (X_k, y_k) pairs; got list_iterator"),
        ({"clients": "ab"}, TypeError, "clients must be a sequence of (X_k, y_k) pairs; got str"),
        ({"clients": [_OK, (np.zeros((5, 2)),)]}, TypeError,
         "clients[1] must be a pair (X_k, y_k)"),
        ({"clients": [_OK, np.zeros((2, 5))]}, TypeError, "clients[1] must be a pair (X_k, y_k)"),
        ({"clients": [_OK, (np.zeros(5), np.zeros(5, dtype=int))]}, ValueError,
         "clients[1] X must be 2-dimensional; got shape (5,)"),
        ({"clients": [_OK, (np.zeros((5, 2)), np.zeros((5, 1), dtype=int))]}, ValueError,
         "clients[1] y must be 1-dimensional; got shape (5, 1)"),
        ({"clients": [_OK, (np.zeros((5, 2)), -np.ones(5, dtype=int))]}, ValueError,
         "clients[1] y must be >= 0; got minimum -1"),
        ({"clients": [_OK, (np.zeros((5, 2)), np.zeros(4, dtype=int))]}, ValueError,
         "clients[1]: X has 5 rows but y has 4 labels"),
    ],
)  # fmt: skip
def test_from_client_arrays_rejects_bad_input_naming_argument(kwargs, exc, message):
    args = {"clients": [_OK, _OK], "n_classes": 2} | kwargs
    clients = args.pop("clients")
    with pytest.raises(exc, match=exactly(message)):
        from_client_arrays(clients, **args)


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


_DIGITS_PARTS = {
    "iid": lambda N, y, K, seed: partition_iid(N, K, seed=seed),
    "powerlaw": lambda N, y, K, seed: partition_power_law(N, K, min_size=10, seed=seed),
    "shards": lambda N, y, K, seed: partition_shards(y, K, shards_per_client=2, seed=seed),
    "dirichlet": lambda N, y, K, seed: partition_dirichlet(y, K, 0.1, min_size=10, seed=seed),
}


@pytest.mark.parametrize("partition", list(_DIGITS_PARTS))
def test_load_digits_is_the_documented_partition_and_split(partition):
    """Pixels / 16; the documented partition (power law and Dirichlet with at least 10 images a
    client, 2 shards a client) seeded with ``seed``; the split of federate seeded with
    ``[seed, 1]``. With alpha = 0.1 and seed 1 the first Dirichlet try leaves a client below 10
    images, so min_size matters."""
    ref = sk_load_digits()
    X, y = ref.data / 16.0, ref.target
    parts = _DIGITS_PARTS[partition](1797, y, 10, 1)
    data = load_digits(10, partition=partition, alpha=0.1, seed=1, test_fraction=0.3)
    want = reference_split(X, y, parts, 0.3, 0.0, np.random.default_rng([1, 1]))
    assert_split_is(data, want, with_val=False)
    assert data.y_train.dtype == np.int64 and data.n_classes == 10


def test_load_digits_defaults():
    assert_same_data(
        load_digits(),
        load_digits(10, partition="shards", alpha=0.5, seed=0, test_fraction=0.2),
    )
    assert_same_data(
        load_digits(partition="dirichlet"),
        load_digits(10, partition="dirichlet", alpha=0.5, seed=0),
    )
    assert load_digits(partition="dirichlet").name == "digits-dirichlet(0.5)"
    assert load_digits(1).num_clients == 1


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"partition": "random"}, ValueError,
         "partition must be one of 'iid', 'powerlaw', 'shards', 'dirichlet'; got 'random'"),
        ({"num_clients": 0}, ValueError, "num_clients must be >= 1; got 0"),
        ({"num_clients": 2.0}, TypeError, "num_clients must be an integer; got float 2.0"),
        ({"alpha": 0.0}, ValueError, "alpha must be > 0.0; got 0.0"),
        ({"alpha": -1.0}, ValueError, "alpha must be > 0.0; got -1.0"),
        ({"alpha": "x"}, TypeError, "alpha must be a real number; got str 'x'"),
        ({"partition": "dirichlet", "alpha": 0.0}, ValueError, "alpha must be > 0.0; got 0.0"),
        ({"partition": "iid", "seed": -1}, ValueError, "seed must be >= 0; got -1"),
        # checked in order: num_clients, partition, alpha, seed, test_fraction
        ({"num_clients": 0, "partition": "random"}, ValueError, "num_clients must be >= 1; got 0"),
        ({"seed": -1, "test_fraction": 1.0}, ValueError, "seed must be >= 0; got -1"),
        ({"seed": 1.5}, TypeError, "seed must be an integer; got float 1.5"),
        ({"test_fraction": 1.0}, ValueError, "test_fraction must be < 1.0; got 1.0"),
    ],
)  # fmt: skip
def test_load_digits_rejects_bad_input_naming_argument(kwargs, exc, message):
    with pytest.raises(exc, match=exactly(message)):
        load_digits(**({"num_clients": 10} | kwargs))


def test_load_digits_without_scikit_learn_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    with pytest.raises(ImportError, match=exactly(
        "load_digits needs scikit-learn, which ships the digits images: "
        "pip install 'fairagg[digits]'"
    )):  # fmt: skip
        load_digits(10)


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


def test_load_passes_its_arguments_on():
    assert_same_data(
        load("synthetic_iid", num_clients=3, seed=2, test_fraction=0.3),
        synthetic(0.0, 0.0, 3, iid=True, seed=2, test_fraction=0.3),
    )
    for spec, partition, alpha in (("digits:iid", "iid", 0.5),
                                   ("digits:dirichlet=0.7", "dirichlet", 0.7)):  # fmt: skip
        assert_same_data(
            load(spec, num_clients=5, seed=3, test_fraction=0.3),
            load_digits(5, partition=partition, alpha=alpha, seed=3, test_fraction=0.3),
        )
    assert load("digits:dirichlet=0.7", num_clients=5).name == "digits-dirichlet(0.7)"


def test_load_defaults_are_30_clients_seed_0():
    assert_same_data(load("digits"), load("digits", num_clients=30, seed=0, test_fraction=0.2))


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


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("synthetic:1", "synthetic needs two numbers ALPHA,BETA"),
        ("synthetic:a,1", "ALPHA 'a' is not a number"),
        ("synthetic:1, b", "BETA 'b' is not a number"),
        ("synthetic:-1,1", "ALPHA must be >= 0, got -1"),
        ("synthetic:1,nan", "BETA must be >= 0, got nan"),
        ("digits:dirichlet=0", "ALPHA must be > 0, got 0"),
        ("digits:dirichlet=x", "ALPHA 'x' is not a number"),
        ("digits:foo", "unknown digits partition 'foo'"),
        ("mnist", "unknown dataset"),
    ],
)
def test_load_bad_spec_message_names_spec_and_reason(spec, why):
    message = f"bad data spec {spec!r} ({why}); accepted forms are: " + "; ".join(DATA_SPECS)
    with pytest.raises(ValueError) as info:
        load(spec, num_clients=5)
    assert str(info.value) == message


def test_load_rejects_non_string_spec():
    with pytest.raises(TypeError, match=exactly("spec must be a str; got int")):
        load(3)  # type: ignore[arg-type]


def test_data_specs_is_a_tuple_of_strings():
    assert isinstance(DATA_SPECS, tuple) and all(isinstance(s, str) for s in DATA_SPECS)
    assert any(s.startswith("synthetic:") for s in DATA_SPECS) and "synthetic_iid" in DATA_SPECS


def test_alpha_does_not_change_the_synthetic_data():
    # The docstring's claim: u_k shifts every class's score alike (argmax unchanged) and the same
    # noise is drawn for every α, so X and y do not depend on α.
    for seed in (0, 3):
        a = synthetic_clients(0.0, 1.0, 6, seed=seed)
        b = synthetic_clients(5.0, 1.0, 6, seed=seed)
        for (Xa, ya), (Xb, yb) in zip(a, b, strict=True):
            np.testing.assert_array_equal(Xa, Xb)
            np.testing.assert_array_equal(ya, yb)
    # β does change them: the clients' feature means move.
    c = synthetic_clients(0.0, 0.0, 6, seed=0)
    assert not np.array_equal(c[0][0], synthetic_clients(0.0, 1.0, 6, seed=0)[0][0])
