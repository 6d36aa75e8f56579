"""A one-hidden-layer perceptron (two dense layers) on one flat parameter vector.

Parameter layout (length ``d = H*p + H + C*H + C``), row-major blocks concatenated, weight
matrices (out, in) like PyTorch's ``nn.Linear.weight``: ``W1 (H, p) | b1 (H,) | W2 (C, H) |
b2 (C,)``. The model computes ``h = σ(W1 x + b1)``, logits ``z = W2 h + b2`` with σ = tanh
(default, smooth) or ReLU (derivative taken as 0 at 0), and the loss

.. math::

    F(\\theta) = \\frac{1}{n} \\sum_{i=1}^n \\Big(\\log \\sum_c e^{z_{ic}} - z_{i y_i}\\Big)
      + \\frac{\\lambda}{2} \\big(\\lVert W_1 \\rVert_F^2 + \\lVert W_2 \\rVert_F^2\\big).

The NumPy methods are the specification; the Numba kernel in ``models/_kernels.py`` is tested
equal to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _kernels
from ._base import FlatModel, check_dims, check_init_args, l2_penalty

__all__ = ["MLP"]

_ACTIVATIONS = {"tanh": _kernels.ACT_TANH, "relu": _kernels.ACT_RELU}


@dataclass(frozen=True)
class MLP(FlatModel):
    """Dense → σ → dense → softmax.

    Parameters
    ----------
    n_features : int
        Input dimension p.
    n_classes : int
        Number of classes C (at least 2).
    n_hidden : int
        Hidden width H.
    activation : {"tanh", "relu"}
    l2 : float
        Coefficient λ ≥ 0 of the penalty on both weight matrices (not the biases).
    """

    n_features: int
    n_classes: int
    n_hidden: int = 32
    activation: str = "tanh"
    l2: float = 0.0

    def __post_init__(self) -> None:
        if self.n_hidden is None:
            raise TypeError("n_hidden must be an integer; got NoneType")
        check_dims(self.n_features, self.n_classes, self.l2, self.n_hidden)
        if self.activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}; got {self.activation!r}"
            )

    @property
    def num_params(self) -> int:
        """Length d = H·p + H + C·H + C of the flat parameter vector."""
        p, H, C = self.n_features, self.n_hidden, self.n_classes
        return H * p + H + C * H + C

    def layout(self) -> dict[str, tuple[slice, tuple[int, ...]]]:
        """Name → (slice of the flat vector, shape) for each parameter block."""
        p, H, C = self.n_features, self.n_hidden, self.n_classes
        out: dict[str, tuple[slice, tuple[int, ...]]] = {}
        start = 0
        for name, shape in (("W1", (H, p)), ("b1", (H,)), ("W2", (C, H)), ("b2", (C,))):
            size = int(np.prod(shape))
            out[name] = (slice(start, start + size), shape)
            start += size
        return out

    def unpack(self, params: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Views ``(W1, b1, W2, b2)`` of a flat parameter vector."""
        theta = self._check_params(params)
        W1, b1, W2, b2 = (theta[sl].reshape(shape) for sl, shape in self.layout().values())
        return W1, b1, W2, b2

    def init_params(self, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
        """Glorot-uniform weights drawn from ``np.random.default_rng(seed)`` (W1 then W2), zero
        biases."""
        seed, dtype = check_init_args(seed, dtype)
        rng = np.random.default_rng(seed)
        theta = np.zeros(self.num_params, dtype=np.float64)
        for name in ("W1", "W2"):
            sl, (fan_out, fan_in) = self.layout()[name]
            bound = np.sqrt(6.0 / (fan_in + fan_out))
            theta[sl] = rng.uniform(-bound, bound, size=fan_in * fan_out)
        return theta.astype(dtype, copy=False)

    def _kernel_dims(self) -> tuple[int, int] | None:
        # the compiled kernel computes this class's NumPy methods, not a subclass's own
        if not self._same_maths(MLP):
            return None
        return self.n_hidden, _ACTIVATIONS[self.activation]

    def _hidden(self, A: np.ndarray) -> np.ndarray:
        return np.tanh(A) if self.activation == "tanh" else np.maximum(A, 0.0)

    def logits(self, params: Any, X: Any) -> np.ndarray:
        """Logits ``σ(X W1ᵀ + b1) W2ᵀ + b2``, shape (n, C)."""
        W1, b1, W2, b2 = self.unpack(params)
        return self._hidden(self._check_X(X) @ W1.T + b1) @ W2.T + b2

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        """Mean cross-entropy (+ L2) and its gradient by backpropagation, NumPy reference."""
        W1, b1, W2, b2 = self.unpack(params)
        X, y = self._check_data(X, y)
        n = X.shape[0]
        A = X @ W1.T + b1
        Hh = self._hidden(A)
        Z = Hh @ W2.T + b2
        Z = Z - Z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(Z).sum(axis=1))
        rows = np.arange(n)
        loss = float(np.mean(lse - Z[rows, y]) + l2_penalty(self.l2, W1, W2))
        dZ = np.exp(Z - lse[:, None])
        dZ[rows, y] -= 1.0
        dZ /= n
        gW2 = dZ.T @ Hh + self.l2 * W2
        gb2 = dZ.sum(axis=0)
        dH = dZ @ W2
        dA = dH * (1.0 - Hh * Hh) if self.activation == "tanh" else dH * (A > 0.0)
        gW1 = dA.T @ X + self.l2 * W1
        gb1 = dA.sum(axis=0)
        return loss, np.concatenate([gW1.ravel(), gb1, gW2.ravel(), gb2])
