"""Minimal NumPy models with analytic gradients on one flat float64 parameter vector.

Each model has a NumPy reference (the specification) and Numba kernels for float32 and float64
used by the local trainer (``fairagg.local``). A model of your own is a subclass of
[`FlatModel`][models.FlatModel] that provides the NumPy methods its docstring lists; it trains
on the NumPy reference loop and needs no change to fairagg.
"""

from ._base import FlatModel
from .logistic import LogisticRegression
from .mlp import MLP

__all__ = ["MLP", "FlatModel", "LogisticRegression", "make_model"]


def make_model(name: str, n_features: int, n_classes: int, **kwargs) -> FlatModel:
    """Build a model by name: ``"logistic"`` or ``"mlp"`` (keyword arguments go to its class)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be 'logistic' or 'mlp' (a str); got {type(name).__name__}")
    if name == "logistic":
        return LogisticRegression(n_features, n_classes, **kwargs)
    if name == "mlp":
        return MLP(n_features, n_classes, **kwargs)
    raise ValueError(f"name must be 'logistic' or 'mlp'; got {name!r}")
