"""AAgFF's bounded response with its six CDFs, and the decision loss −log(1 + ⟨p, r⟩) with its
gradient (SPEC §5)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import ndtr

from .._checks import as_float_array, check_choice, check_real
from ..simplex import check_simplex_point

VARIANTS = ("paper", "official")


def _frechet(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    pos = x > 0
    with np.errstate(over="ignore"):  # 1/x overflows for x < ~5.6e-309: e^{-inf} = 0, the limit
        out[pos] = np.exp(-1.0 / x[pos])
    return out


#: The six increasing CDFs on [0, ∞) of SPEC §5 that bound AAgFF's response.
RESPONSE_CDFS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "weibull": lambda x: -np.expm1(-(x**2)),  # 1 − e^{−x²}
    "exponential": lambda x: -np.expm1(-x),  # 1 − e^{−x}
    "frechet": _frechet,  # e^{−1/x}, 0 at x = 0
    "normal": lambda x: ndtr(x - 1.0),  # Φ_{N(1,1)}(x)
    "gumbel": lambda x: np.exp(-np.exp(-(x - 1.0))),  # exp(−e^{−(x−1)})
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-(x - 1.0))),  # 1/(1 + e^{−(x−1)})
}


def _official_normal(x: np.ndarray) -> np.ndarray:
    # The public code's "normal CDF": ½(erfc((x − 1)/√2) + 1) = 1.5 − Φ_{N(1,1)}(x), written as
    # ½ + Φ(1 − x) so that no digits cancel where Φ(x − 1) is near 1.
    return 0.5 + ndtr(1.0 - x)


def aaggff_response(
    losses: Any, *, cdf: str = "weibull", scale: float = 1.0, variant: str = "paper"
) -> np.ndarray:
    """AAgFF's bounded response r_i = Φ(F_i / mean_{j∈S} F_j) · s (SPEC §5).

    ``variant="official"`` computes what the public code (vaseline555/AAggFF,
    ``AaggffServer.update``) computes. Its five other CDFs are the paper's, but its "normal CDF"
    is ½(erfc((x − 1)/√2) + 1) = 1.5 − Φ_{N(1,1)}(x). That is *decreasing* in the loss, with
    values in (½, 1.5), so a worse client gets a smaller response.

    Parameters
    ----------
    losses : array_like, shape (m,)
        Non-negative, finite losses F_i(θ^t) of the selected clients.
    cdf : str
        One of [`RESPONSE_CDFS`][fairagg.online.RESPONSE_CDFS].
    scale : float
        s > 0: 1/K cross-silo, C = m/K cross-device.
    variant : {"paper", "official"}
        Only ``cdf="normal"`` differs between them.

    Returns
    -------
    ndarray of float64, shape (m,)
        Responses in [0, s] (in (s/2, 3s/2) for the official normal). If every loss is 0 the
        ratios are taken as 1 (all clients equal).
    """
    F = as_float_array(losses, "losses", ndim=1, dtype=np.float64, allow_int=True, min_size=1)
    if np.any(F < 0):
        raise ValueError(f"losses must be non-negative; minimum is {F.min()}")
    name = check_choice(cdf, "cdf", tuple(RESPONSE_CDFS))
    s = check_real(scale, "scale", low=0.0, low_open=True)
    var = check_choice(variant, "variant", VARIANTS)
    top = float(F.max())
    if top == 0.0:
        x = np.ones_like(F)
    else:
        # x_i is scale-free: divide by the power of two of the largest loss (exact) so that the
        # mean neither overflows (losses near 1.8e308) nor loses digits to subnormals.
        Fs = np.ldexp(F, -math.frexp(top)[1])
        x = Fs / Fs.mean()
    phi = _official_normal if var == "official" and name == "normal" else RESPONSE_CDFS[name]
    return phi(x) * s


def _check_response_pair(p: Any, r: Any) -> tuple[np.ndarray, np.ndarray, float]:
    pv = check_simplex_point(p, "p")
    rv = as_float_array(r, "r", shape=(pv.size,), dtype=np.float64, allow_int=True)
    z = 1.0 + float(pv @ rv)
    if not z > 0:
        raise ValueError(f"the decision loss needs 1 + <p, r> > 0; got {z}")
    return pv, rv, z


def decision_loss(p: Any, r: Any) -> float:
    """ℓ(p) = −log(1 + ⟨p, r⟩), the AAgFF decision loss (SPEC §5). Needs 1 + ⟨p, r⟩ > 0."""
    _, _, z = _check_response_pair(p, r)
    return -math.log(z)


def decision_gradient(p: Any, r: Any) -> np.ndarray:
    """∇ℓ(p) = −r / (1 + ⟨p, r⟩) (SPEC §5)."""
    _, rv, z = _check_response_pair(p, r)
    return -rv / z
