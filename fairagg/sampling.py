"""Client sampling for one round (SPEC §1): uniform, or with probability ∝ n_k, without
replacement.

``"proportional"`` draws the m clients one after another, each with probability proportional to
n_k among those not yet drawn (successive sampling, NumPy's ``Generator.choice(...,
replace=False, p=...)``). Clients are returned in draw order, which the simulator treats as their
arrival order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._checks import as_int_array, check_choice, check_count, check_int

__all__ = ["SAMPLING_SCHEMES", "sample_clients"]

SAMPLING_SCHEMES = ("uniform", "proportional")


def sample_clients(
    num_clients: int,
    clients_per_round: int,
    rng: np.random.Generator,
    *,
    scheme: str = "uniform",
    num_samples: Any = None,
) -> np.ndarray:
    """Draw m of K clients without replacement.

    Parameters
    ----------
    num_clients : int
        K ≥ 1.
    clients_per_round : int
        m in [1, K].
    rng : numpy.random.Generator
    scheme : {"uniform", "proportional"}
    num_samples : array_like of int, shape (K,)
        n_k, required by ``"proportional"``.

    Returns
    -------
    ndarray of int64, shape (m,)
        Distinct client indices in draw order.
    """
    K = check_count(num_clients, "num_clients", low=1)
    m = check_int(clients_per_round, "clients_per_round", low=1, high=K)
    check_choice(scheme, "scheme", SAMPLING_SCHEMES)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    if scheme == "uniform":
        return rng.choice(K, size=m, replace=False).astype(np.int64)
    if num_samples is None:
        raise ValueError("num_samples is required with scheme='proportional'")
    n = as_int_array(num_samples, "num_samples", min_value=1)
    if n.shape != (K,):
        raise ValueError(f"num_samples must have shape ({K},); got {n.shape}")
    return rng.choice(K, size=m, replace=False, p=n / n.sum()).astype(np.int64)
