"""Multinomial logistic regression on one flat parameter vector.

Parameter layout (length ``d = C*p + C``): ``params[:C*p]`` is the weight matrix ``W`` of shape
``(C, p)`` in row-major order (``W[c, j] = params[c*p + j]``; (out, in) like PyTorch's
``nn.Linear.weight``), ``params[C*p:]`` the bias ``b``. The model computes logits
``z = W x + b`` and the loss

.. math::

    F(\\theta) = \\frac{1}{n} \\sum_{i=1}^n \\Big(\\log \\sum_c e^{z_{ic}} - z_{i y_i}\\Big)
                 + \\frac{\\lambda}{2} \\lVert W \\rVert_F^2 ,

the mean cross-entropy plus an optional L2 penalty on the weights (not the bias). The NumPy
methods here are the specification; ``loss_and_grad_numba`` and the local trainer use the Numba
kernel in ``models/_kernels.py``, tested equal to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._base import FlatModel, check_dims, check_init_args, l2_penalty

__all__ = ["LogisticRegression"]


@dataclass(frozen=True)
class LogisticRegression(FlatModel):
    """Softmax regression over ``n_classes`` classes.

    Parameters
    ----------
    n_features : int
        Input dimension p.
    n_classes : int
        Number of classes C (at least 2).
    l2 : float
        Coefficient λ ≥ 0 of the penalty ``λ/2 ||W||²``.
    """

    n_features: int
    n_classes: int
    l2: float = 0.0

    def __post_init__(self) -> None:
        check_dims(self.n_features, self.n_classes, self.l2)

    @property
    def num_params(self) -> int:
        """Length d = C·p + C of the flat parameter vector."""
        return self.n_features * self.n_classes + self.n_classes

    def layout(self) -> dict[str, tuple[slice, tuple[int, ...]]]:
        """Name → (slice of the flat vector, shape) for each parameter block."""
        p, C = self.n_features, self.n_classes
        return {"W": (slice(0, C * p), (C, p)), "b": (slice(C * p, C * p + C), (C,))}

    def unpack(self, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(W, b)`` of a flat parameter vector."""
        theta = self._check_params(params)
        p, C = self.n_features, self.n_classes
        return theta[: C * p].reshape(C, p), theta[C * p :]

    def init_params(self, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
        """Zeros (the convex problem needs no symmetry breaking); ``seed`` is checked, unused."""
        _, dt = check_init_args(seed, dtype)
        return np.zeros(self.num_params, dtype=dt)

    def _kernel_dims(self) -> tuple[int, int] | None:
        # the compiled kernel computes this class's NumPy methods, not a subclass's own
        return (0, 0) if self._same_maths(LogisticRegression) else None

    def logits(self, params: Any, X: Any) -> np.ndarray:
        """Logits ``X Wᵀ + b``, shape (n, C)."""
        W, b = self.unpack(params)
        return self._check_X(X) @ W.T + b

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        """Mean cross-entropy (+ L2) and its gradient, NumPy float64 reference.

        With ``P = softmax(Z)`` and ``Y`` the one-hot labels, ``∂F/∂W = (P − Y)ᵀX/n + λW`` and
        ``∂F/∂b = mean(P − Y)``.
        """
        W, b = self.unpack(params)
        X, y = self._check_data(X, y)
        n = X.shape[0]
        Z = X @ W.T + b
        Z = Z - Z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(Z).sum(axis=1))
        rows = np.arange(n)
        loss = float(np.mean(lse - Z[rows, y]) + l2_penalty(self.l2, W))
        P = np.exp(Z - lse[:, None])
        P[rows, y] -= 1.0
        gW = P.T @ X / n + self.l2 * W
        gb = P.mean(axis=0)
        return loss, np.concatenate([gW.ravel(), gb])
