"""Hypothesis strategies shared by the test suite (STYLE.md, "Tests").

Everything is kept small (n ≤ 40 samples, p ≤ 8 features, C ≤ 5 classes, H ≤ 6 hidden units,
m ≤ 8 clients) so that examples run in microseconds once the Numba kernels are compiled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg.models import MLP, FlatModel, LogisticRegression

__all__ = [
    "MAX_CLASSES",
    "MAX_FEATURES",
    "MAX_HIDDEN",
    "MAX_SAMPLES",
    "classification_data",
    "finite_floats",
    "flat_models",
    "flat_params",
    "l2_coefficients",
    "num_samples",
    "update_matrices",
]

MAX_SAMPLES = 40
MAX_FEATURES = 8
MAX_CLASSES = 5
MAX_HIDDEN = 6


def finite_floats(bound: float = 1.0, *, width: int = 64) -> st.SearchStrategy[float]:
    """Finite floats in [-bound, bound] (no subnormals: they only test the FPU, not the maths)."""
    return st.floats(
        -bound, bound, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=width
    )


def _float_array(shape: Any, bound: float, dtype: Any) -> st.SearchStrategy[np.ndarray]:
    dtype = np.dtype(dtype)
    # fill=st.nothing(): draw every entry independently (no long runs of one repeated value,
    # which would make ReLU pre-activations and logits tie far more often than real data does).
    return hnp.arrays(
        dtype,
        shape,
        elements=finite_floats(bound, width=8 * dtype.itemsize),
        fill=st.nothing(),
    )


@st.composite
def update_matrices(
    draw: st.DrawFn,
    *,
    min_m: int = 1,
    max_m: int = 6,
    min_d: int = 1,
    max_d: int = 8,
    bound: float = 10.0,
    dtype: Any = np.float64,
) -> np.ndarray:
    """A finite (m, d) update matrix δ, m ≥ min_m ≥ 1 and d ≥ min_d ≥ 1 (m = 1, d = 1 included)."""
    m = draw(st.integers(min_m, max_m))
    d = draw(st.integers(min_d, max_d))
    return draw(_float_array((m, d), bound, dtype))


def num_samples(m: int, *, max_value: int = 1000) -> st.SearchStrategy[np.ndarray]:
    """Positive int64 sample counts n_k, shape (m,)."""
    return hnp.arrays(np.int64, (m,), elements=st.integers(1, max_value))


@st.composite
def classification_data(
    draw: st.DrawFn,
    *,
    n_features: int | None = None,
    n_classes: int | None = None,
    min_n: int = 1,
    max_n: int = MAX_SAMPLES,
    bound: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(X, y, C)``: X float64 (n, p) with entries in [-bound, bound], y int64 labels in [0, C)."""
    n = draw(st.integers(min_n, max_n))
    p = n_features if n_features is not None else draw(st.integers(1, MAX_FEATURES))
    C = n_classes if n_classes is not None else draw(st.integers(2, MAX_CLASSES))
    X = draw(_float_array((n, p), bound, np.float64))
    y = draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, C - 1)))
    return X, y, C


def l2_coefficients(max_value: float = 1.0) -> st.SearchStrategy[float]:
    """λ ≥ 0, with λ = 0 drawn often (it switches a branch in the kernel)."""
    return st.one_of(
        st.just(0.0),
        st.floats(0.0, max_value, allow_nan=False, allow_subnormal=False),
    )


@st.composite
def flat_models(
    draw: st.DrawFn,
    kind: str,
    n_features: int,
    n_classes: int,
    *,
    activation: str | None = None,
    l2: bool = True,
) -> FlatModel:
    """A ``LogisticRegression`` (kind="logistic") or ``MLP`` (kind="mlp", H ≤ 6) for (p, C)."""
    lam = draw(l2_coefficients()) if l2 else 0.0
    if kind == "logistic":
        return LogisticRegression(n_features, n_classes, l2=lam)
    H = draw(st.integers(1, MAX_HIDDEN))
    act = activation if activation is not None else draw(st.sampled_from(["tanh", "relu"]))
    return MLP(n_features, n_classes, n_hidden=H, activation=act, l2=lam)


def flat_params(
    model: FlatModel, *, bound: float = 1.0, dtype: Any = np.float64
) -> st.SearchStrategy[np.ndarray]:
    """A flat parameter vector for ``model``, shape (num_params,), entries in [-bound, bound]."""
    return _float_array((model.num_params,), bound, dtype)


# --------------------------------------------------------------------------------------------
# Simplex geometry (tests/test_simplex.py): points to project, box bounds, SPD matrices,
# vector sets for min-norm points and points of the simplex. K ≤ 30 clients.
# --------------------------------------------------------------------------------------------

__all__ += [
    "MAX_CLIENTS",
    "box_bounds",
    "eps_boxes",
    "projection_points",
    "simplex_points",
    "spd_matrices",
    "vector_sets",
]

MAX_CLIENTS = 30


@st.composite
def projection_points(
    draw: st.DrawFn,
    *,
    min_k: int = 1,
    max_k: int = MAX_CLIENTS,
    max_log_scale: int = 6,
    mixed_scales: bool = True,
) -> np.ndarray:
    """A finite float64 point y, shape (K,), to project onto a (box-)simplex.

    Entries in [-10, 10], either drawn independently or from a pool of at most 3 values (ties:
    repeated entries), then multiplied by 10^e, |e| ≤ ``max_log_scale``: one e for the whole
    vector or, with ``mixed_scales``, one per entry (entries spanning up to 2·max_log_scale
    decades).
    """
    k = draw(st.integers(min_k, max_k))
    if draw(st.booleans()):
        pool = draw(st.lists(finite_floats(10.0), min_size=1, max_size=3))
        y = draw(hnp.arrays(np.float64, (k,), elements=st.sampled_from(pool)))
    else:
        y = draw(_float_array((k,), 10.0, np.float64))
    exps = st.integers(-max_log_scale, max_log_scale)
    if mixed_scales and draw(st.booleans()):
        e = draw(hnp.arrays(np.int64, (k,), elements=exps))
    else:
        e = np.full(k, draw(exps))
    return y * 10.0 ** e.astype(np.float64)


@st.composite
def box_bounds(
    draw: st.DrawFn, k: int, total: float = 1.0, *, negative_lower: bool = True
) -> tuple[Any, Any]:
    """``(lower, upper)`` of a non-empty box-simplex {lower ≤ x ≤ upper, Σx = total}, size k.

    Each bound is a scalar or a length-k array. ``upper`` may hold ``inf`` entries, coordinates
    with ``lower == upper`` are drawn, and Σupper = total (a single feasible point) is included.
    ``lower`` may be negative unless ``negative_lower`` is False.
    """
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind_lo = draw(st.sampled_from(["zero", "scalar", "array", "array"]))
    if kind_lo == "zero":
        lo = 0.0
    elif kind_lo == "scalar":
        lo = total / k * draw(st.floats(-1.0 if negative_lower else 0.0, 1.0))
    else:
        lo = total * draw(st.floats(0.0, 1.0)) * rng.dirichlet(np.ones(k))
        if negative_lower and draw(st.booleans()):
            lo = lo - rng.uniform(0.0, 1.0, k) * total
    lo_arr = np.broadcast_to(np.asarray(lo, dtype=np.float64), (k,))
    slack = total - lo_arr.sum()  # ≥ 0 up to round-off
    kind_hi = draw(st.sampled_from(["inf", "scalar", "array", "array", "tight"]))
    if kind_hi == "inf":
        hi: Any = np.inf
    elif kind_hi == "scalar":
        # hi ≥ max(lower) and k·hi ≥ total
        hi = max(float(np.max(lo_arr)), total / k) + total / k * draw(st.floats(0.0, 2.0))
    else:
        gap = max(slack, 0.0) * rng.dirichlet(np.ones(k) * 0.5)
        if kind_hi == "array":
            gap = gap * draw(st.floats(1.0, 3.0))
            gap[rng.random(k) < 0.3] = 0.0  # lower == upper there
            gap[0] += max(slack, 0.0)  # Σupper ≥ total after zeroing
        hi = lo_arr + gap
        if kind_hi == "array" and draw(st.booleans()):
            hi[rng.random(k) < 0.3] = np.inf
    return lo, hi


@st.composite
def spd_matrices(draw: st.DrawFn, k: int, *, max_log_cond: float = 3.0) -> np.ndarray:
    """A symmetric positive definite (k, k) matrix Q diag(λ) Qᵀ, condition number ≤ 10^max_log_cond.

    Q is a random orthogonal matrix, the eigenvalues log-spaced in [1, 10^c] with c drawn in
    [0, max_log_cond], or clustered (all equal: A = I up to rotation round-off) when c = 0.
    """
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    c = draw(st.floats(0.0, max_log_cond))
    q, _ = np.linalg.qr(rng.standard_normal((k, k)))
    lam = 10.0 ** (c * rng.random(k))
    lam[0], lam[-1] = 1.0, 10.0**c
    if k == 1:
        lam = np.array([10.0**c])
    a = (q * lam) @ q.T
    return (a + a.T) / 2


@st.composite
def vector_sets(
    draw: st.DrawFn, *, max_m: int = MAX_CLIENTS, max_d: int = 8
) -> tuple[np.ndarray, str]:
    """``(V, kind)``: an (m, d) float64 matrix of vectors v_k (rows) with entries of order 1.

    kinds: "generic" (Gaussian), "duplicated" (rows repeated), "antiparallel" (v and −c v, so
    the origin lies in the hull), "wide" (m > d), "shifted" (all in a half-space far from the
    origin), "single" (m = 1).
    """
    kind = draw(
        st.sampled_from(["generic", "duplicated", "antiparallel", "wide", "shifted", "single"])
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = draw(st.integers(1, max_d))
    if kind == "single":
        m = 1
    elif kind == "wide":
        m = draw(st.integers(min(d + 1, max_m), max_m))
    else:
        m = draw(st.integers(2 if kind in ("duplicated", "antiparallel") else 1, max_m))
    v = rng.standard_normal((m, d))
    if kind == "duplicated":
        v = v[rng.integers(0, max(1, m // 2), m)]
    elif kind == "antiparallel":
        h = m // 2
        v[h : 2 * h] = -v[:h] * rng.uniform(0.5, 2.0, (h, 1))
    elif kind == "shifted":
        v = v + 5.0 * rng.standard_normal(d)
    return v, kind


@st.composite
def eps_boxes(draw: st.DrawFn, m: int) -> tuple[np.ndarray, np.ndarray]:
    """FedMGDA+'s ε-box around a base point λ0 of the simplex: (max(λ0 − ε, 0), λ0 + ε)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lam0 = rng.dirichlet(np.ones(m))
    eps = draw(st.one_of(st.just(0.0), st.floats(0.0, 0.5)))
    return np.maximum(lam0 - eps, 0.0), lam0 + eps


@st.composite
def simplex_points(draw: st.DrawFn, k: int, *, allow_zeros: bool = True) -> np.ndarray:
    """A float64 point p of the probability simplex, shape (k,); some entries exactly 0 (not all).

    Positive entries are at least 1e-3 / k-ish (weights in [1e-3, 1] before normalising), ties
    included (weights drawn from a pool).
    """
    w = st.floats(1e-3, 1.0)
    if allow_zeros:
        w = st.one_of(st.just(0.0), w)
    p = draw(hnp.arrays(np.float64, (k,), elements=w))
    if not np.any(p > 0):
        p[draw(st.integers(0, k - 1))] = 1.0
    return p / p.sum()


def rule_round(name: str, m: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, Any, int]:
    """(θ, reports, K) of one random round for the registered rule ``name``: m clients, d
    parameters, everything a rule may read (losses in [0.1, 2), accuracies, participations,
    gradients in place of the updates for the rules whose clients report gradients);
    K = m for a rule that needs every client, else m + 2."""
    from fairagg import RULES, make_reports

    K = m if RULES[name].full_participation else m + 2
    theta = rng.standard_normal(d)
    reports = make_reports(
        rng.standard_normal((m, d)),
        rng.integers(1, 50, m),
        losses=rng.uniform(0.1, 2.0, m),
        accuracies=rng.uniform(0.0, 1.0, m),
        participations=rng.integers(1, 5, m),
        client_ids=np.arange(m),
        num_clients=K,
        gradients=rng.standard_normal((m, d)),
        lr=0.1,
    )
    if "gradients" in RULES[name].needs:
        reports = reports._replace(deltas=None)
    return theta, reports, K
