"""Tests of fairagg.types: building and checking the per-round reports (SPEC §0)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from fairagg import EmptyState, RoundReports, make_reports
from fairagg.types import check_reports
from tests.strategies import num_samples, update_matrices

D2 = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]])


def test_make_reports_defaults_and_dtypes():
    r = make_reports(D2, [10, 20])
    assert isinstance(r, RoundReports)
    assert r.deltas is D2  # a valid float64 array is not copied
    assert r.num_samples.dtype == np.int64
    np.testing.assert_array_equal(r.num_samples, [10, 20])
    assert r.losses is None and r.accuracies is None
    assert r.participations is None and r.client_ids is None
    assert r.round_index == 0 and r.num_clients == 0


def test_make_reports_all_fields():
    r = make_reports(
        D2,
        [10, 20],
        losses=[1, 0.5],
        accuracies=[0.0, 1.0],
        participations=[1, 4],
        client_ids=[7, 2],
        round_index=5,
        num_clients=9,
    )
    assert r.losses.dtype == np.float64  # integer losses are accepted and cast
    np.testing.assert_array_equal(r.losses, [1.0, 0.5])
    np.testing.assert_array_equal(r.accuracies, [0.0, 1.0])
    assert r.participations.dtype == np.int64 and r.client_ids.dtype == np.int64
    np.testing.assert_array_equal(r.client_ids, [7, 2])
    assert (r.round_index, r.num_clients) == (5, 9)


def test_make_reports_keeps_float32_deltas():
    r = make_reports(D2.astype(np.float32), [1, 1])
    assert r.deltas.dtype == np.float32


@given(update_matrices(), update_matrices(dtype=np.float32))
def test_make_reports_accepts_any_finite_update_matrix(D64, D32):
    for D in (D64, D32):
        r = make_reports(D, np.ones(D.shape[0], dtype=np.int64))
        np.testing.assert_array_equal(r.deltas, D)
        assert check_reports(r, np.zeros(D.shape[1])) is r


@given(update_matrices().flatmap(lambda D: num_samples(D.shape[0]).map(lambda n: (D, n))))
def test_make_reports_num_samples_round_trip(Dn):
    D, n = Dn
    np.testing.assert_array_equal(make_reports(D, n).num_samples, n)


# --------------------------------------------------------------------------------------------
# make_reports validation: one case per field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"losses": [np.nan, 1.0]}, ValueError, "losses"),
        ({"losses": [np.inf, 1.0]}, ValueError, "losses"),
        ({"losses": [-0.1, 1.0]}, ValueError, "losses"),
        ({"losses": [1.0]}, ValueError, "losses"),
        ({"losses": ["a", "b"]}, TypeError, "losses"),
        ({"accuracies": [0.5, 1.01]}, ValueError, "accuracies"),
        ({"accuracies": [-0.01, 0.5]}, ValueError, "accuracies"),
        ({"accuracies": [np.nan, 0.5]}, ValueError, "accuracies"),
        ({"accuracies": [0.5, 0.5, 0.5]}, ValueError, "accuracies"),
        ({"participations": [0, 1]}, ValueError, "participations"),
        ({"participations": [1]}, ValueError, "participations"),
        ({"participations": [1.5, 2]}, TypeError, "participations"),
        ({"client_ids": [-1, 0]}, ValueError, "client_ids"),
        ({"client_ids": [0, 1, 2]}, ValueError, "client_ids"),
        ({"round_index": -1}, ValueError, "round_index"),
        ({"round_index": 1.0}, TypeError, "round_index"),
        ({"num_clients": -1}, ValueError, "num_clients"),
    ],
)
def test_make_reports_rejects_bad_optional_field(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_reports(D2, [10, 20], **kwargs)


@pytest.mark.parametrize(
    ("deltas", "n", "exc", "match"),
    [
        (np.ones((2, 3), dtype=np.int64), [1, 1], TypeError, "deltas"),
        (np.ones((2, 3), dtype=bool), [1, 1], TypeError, "deltas"),
        (np.ones((2, 3), dtype=complex), [1, 1], TypeError, "deltas"),
        (np.ones(3), [1], ValueError, "deltas"),
        (np.ones((0, 3)), [], ValueError, "deltas"),
        (np.array([[1.0, np.nan]]), [1], ValueError, "deltas"),
        (D2, [10, 0], ValueError, "num_samples"),
        (D2, [10], ValueError, "num_samples"),
        (D2, [10, 20, 30], ValueError, "num_samples"),
        (D2, [10.5, 0.0], ValueError, "num_samples"),
    ],
    ids=[
        "int-deltas",
        "bool-deltas",
        "complex-deltas",
        "1d-deltas",
        "no-clients",
        "nan-deltas",
        "zero-samples",
        "short-samples",
        "long-samples",
        "zero-weight",
    ],
)
def test_make_reports_rejects_bad_deltas_or_num_samples(deltas, n, exc, match):
    with pytest.raises(exc, match=match):
        make_reports(deltas, n)


# --------------------------------------------------------------------------------------------
# check_reports
# --------------------------------------------------------------------------------------------


def test_check_reports_needs_missing_losses():
    r = make_reports(D2, [1, 2])
    with pytest.raises(ValueError, match="losses"):
        check_reports(r, np.zeros(3), needs=("losses",))


@pytest.mark.parametrize("field", ["losses", "accuracies", "participations", "client_ids"])
def test_check_reports_needs_each_optional_field(field):
    r = make_reports(D2, [1, 2])
    with pytest.raises(ValueError, match=field):
        check_reports(r, np.zeros(3), needs=(field,))


def test_check_reports_passes_when_needed_field_present():
    r = make_reports(D2, [1, 2], losses=[0.3, 0.4])
    assert check_reports(r, np.zeros(3), needs=("losses",)) is r


@pytest.mark.parametrize(
    ("reports", "params", "exc", "match"),
    [
        ((D2, np.array([1, 2])), np.zeros(3), TypeError, "reports"),
        (EmptyState(), np.zeros(3), TypeError, "reports"),
        (RoundReports(D2.astype(np.int64), np.array([1, 2])), np.zeros(3), TypeError, "deltas"),
        (RoundReports(D2[0], np.array([1])), np.zeros(3), TypeError, "deltas"),
        (
            RoundReports(np.ones((0, 3)), np.array([], dtype=np.int64)),
            np.zeros(3),
            ValueError,
            "at least one",
        ),
        (RoundReports(D2, np.array([1, 2])), np.zeros(4), ValueError, "deltas"),
        (RoundReports(D2, np.array([1, 2, 3])), np.zeros(3), ValueError, "num_samples"),
        (RoundReports(D2, np.array([1, 2]), losses=np.ones(3)), np.zeros(3), ValueError, "losses"),
        (
            RoundReports(D2, np.array([1, 2]), client_ids=np.ones((2, 1))),
            np.zeros(3),
            ValueError,
            "client_ids",
        ),
    ],
    ids=[
        "tuple",
        "other-namedtuple",
        "int-deltas",
        "1d-deltas",
        "no-clients",
        "width",
        "num-samples-length",
        "losses-length",
        "client-ids-shape",
    ],
)
def test_check_reports_rejects_malformed_reports(reports, params, exc, match):
    with pytest.raises(exc, match=match):
        check_reports(reports, params)
