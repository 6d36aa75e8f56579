"""Hypothesis strategies shared by the test suite (STYLE.md, "Tests").

Everything is kept small (n ≤ 40 samples, p ≤ 8 features, C ≤ 5 classes, H ≤ 6 hidden units,
m ≤ 8 clients) so that examples run in microseconds once the Numba kernels are compiled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from models import MLP, FlatModel, LogisticRegression

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
