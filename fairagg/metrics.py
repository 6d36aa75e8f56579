"""Fairness metrics of a per-client accuracy vector, and the ACF of a per-round series (SPEC §10).

Every function takes the per-client test accuracies :math:`a_k \\in [0, 1]` (or, for the
scale-free uniformity measures, any non-negative vector such as per-client losses) as a 1-D
array with clients on the only axis, shape ``(m,)``. Lists and integer arrays are accepted and
cast to float64; NaN, infinity and (for accuracies) values outside ``[0, 1]`` raise
``ValueError`` naming the argument. All computation is in float64.

Metrics
-------
=========================  ============  =============================================
function                   unit          definition
=========================  ============  =============================================
[`average_accuracy`][fairagg.metrics.average_accuracy]   percent       client mean, or
sample-weighted
                                         :math:`\\sum_k a_k n_k / \\sum_k n_k`
[`worst_fraction`][fairagg.metrics.worst_fraction]     percent       mean of the
:math:`\\max(1, \\lfloor xN \\rfloor)` lowest [`best_fraction`][fairagg.metrics.best_fraction]
percent       mean of the :math:`\\max(1, \\lfloor xN \\rfloor)` highest
[`accuracy_variance`][fairagg.metrics.accuracy_variance]  percent²      population variance,
``np.var(a) * 1e4`` (q-FFL) [`accuracy_std`][fairagg.metrics.accuracy_std]       percent       its
square root [`angle_to_ones`][fairagg.metrics.angle_to_ones]      degrees       angle between ``a``
and **1** (q-FFL, Def. 4) [`kl_to_uniform`][fairagg.metrics.kl_to_uniform]      nats
:math:`KL(\\hat a \\| u)`, :math:`\\hat a = a/\\sum a` [`entropy`][fairagg.metrics.entropy]
nats          :math:`H(\\hat a)` (q-FFL, Def. 5) [`gini`][fairagg.metrics.gini]
unitless      population Gini (``sample=True``: × N/(N−1))
[`jain_index`][fairagg.metrics.jain_index]         unitless      :math:`(\\sum a)^2 / (N \\sum a^2)`
[`alpha_fair_utility`][fairagg.metrics.alpha_fair_utility] as input
:math:`\\sum_k u_\\alpha(a_k)` (Mo & Walrand) [`acf`][fairagg.metrics.acf]                unitless
FairAvg, eq. 6-7 [`fairness_summary`][fairagg.metrics.fairness_summary]   mixed         all of the
above in one JSON-ready dict
=========================  ============  =============================================

Conventions
-----------
- Accuracy-valued outputs are in **percent** (the inputs are fractions in ``[0, 1]``).
- Variance is the **population** variance (divide by N), of percent accuracies, as in q-FFL's
  tables.
- Logarithms are **natural**; :math:`0 \\log 0 = 0`.
- The uniformity measures (angle, KL, entropy, Gini, Jain) are undefined for an all-zero vector
  and raise ``ValueError`` for it ([`fairness_summary`][fairagg.metrics.fairness_summary] reports
  ``None`` instead); they never return NaN. They are scale-free and are evaluated on ``a / max(a)``,
  so tiny or huge inputs neither underflow nor overflow.
- The count of "worst/best x%" clients reads ``fraction`` as the decimal it prints as, so
  ``0.29`` of 100 clients is 29 clients (``0.29 * 100 == 28.999999999999996`` in floating point).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_float_array, as_int_array, check_int, check_real, check_same_length

__all__ = [
    "accuracy_std",
    "accuracy_variance",
    "acf",
    "alpha_fair_utility",
    "angle_to_ones",
    "average_accuracy",
    "best_fraction",
    "entropy",
    "fairness_summary",
    "gini",
    "jain_index",
    "kl_to_uniform",
    "worst_fraction",
]


# ----------------------------------------------------------------------------------------------
# validation helpers


def _as_vector(x: ArrayLike, name: str) -> np.ndarray:
    """A finite 1-D float64 array with at least one entry (integers accepted)."""
    return as_float_array(x, name, ndim=1, dtype=np.float64, allow_int=True, min_size=1)


def _as_accuracies(accuracies: ArrayLike, name: str = "accuracies") -> np.ndarray:
    """Validate per-client accuracies: finite, 1-D, non-empty, in ``[0, 1]``."""
    a = _as_vector(accuracies, name)
    lo, hi = float(a.min()), float(a.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"{name} must lie in [0, 1] (fractions, not percent); got values in [{lo}, {hi}]"
        )
    return a


def _as_nonnegative(values: ArrayLike, name: str = "values") -> np.ndarray:
    """Validate a finite, 1-D, non-empty, non-negative vector."""
    v = _as_vector(values, name)
    lo = float(v.min())
    if lo < 0.0:
        raise ValueError(f"{name} must be non-negative; got minimum {lo}")
    return v


def _normalised(values: ArrayLike, what: str) -> np.ndarray:
    """Validate a non-negative vector and divide it by its maximum (scale-free measures only).

    After the division the largest entry is 1, so sums lie in ``[1, N]`` and no product below can
    underflow to a zero denominator or overflow.
    """
    v = _as_nonnegative(values)
    top = float(v.max())
    if top == 0.0:
        raise ValueError(f"values is all zero: {what} is undefined")
    return v / top


def _fraction_count(fraction: float, n: int) -> int:
    """``max(1, floor(fraction * n))`` with ``fraction`` read as its printed decimal."""
    f = check_real(fraction, "fraction", low=0.0, high=1.0, low_open=True)
    return max(1, math.floor(Fraction(repr(f)) * n))


# ----------------------------------------------------------------------------------------------
# accuracy-valued metrics (percent)


def average_accuracy(accuracies: ArrayLike, num_samples: ArrayLike | None = None) -> float:
    """Average accuracy in percent, over clients or over samples.

    .. math::

        \\bar a = \\frac{100}{N} \\sum_{k=1}^{N} a_k
        \\qquad\\text{or}\\qquad
        \\bar a_n = 100 \\, \\frac{\\sum_k a_k n_k}{\\sum_k n_k}

    (SPEC §10). With ``num_samples`` the second form is the accuracy over all test samples pooled,
    :math:`\\sum_k \\text{correct}_k / \\sum_k n_k`.

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Per-client accuracies in ``[0, 1]``.
    num_samples : array_like of int, shape (m,), optional
        Per-client test-set sizes, positive integers.

    Returns
    -------
    float
        The average accuracy in percent.
    """
    a = _as_accuracies(accuracies)
    if num_samples is None:
        return float(100.0 * np.mean(a))
    n = as_int_array(num_samples, "num_samples", min_value=1)  # 1-D
    check_same_length("accuracies", a, "num_samples", n)
    w = n.astype(np.float64)
    return float(100.0 * np.dot(w, a) / np.sum(w))


def worst_fraction(accuracies: ArrayLike, fraction: float) -> float:
    """Mean accuracy (percent) of the worst ``fraction`` of clients.

    .. math::

        \\text{worst}_x = \\frac{100}{K} \\sum_{i=1}^{K} a_{(i)}, \\qquad
        K = \\max(1, \\lfloor x N \\rfloor)

    with :math:`a_{(1)} \\le \\dots \\le a_{(N)}` the sorted accuracies (SPEC §10; q-FFL's
    "worst 10%" is ``fraction=0.1``).

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Per-client accuracies in ``[0, 1]``.
    fraction : float
        The share of clients, in ``(0, 1]``. It is read as the decimal it prints as, so the count
        is exact for decimal fractions (``0.29`` of 100 clients is 29 clients).

    Returns
    -------
    float
        Mean of the ``K`` lowest accuracies, in percent.
    """
    a = _as_accuracies(accuracies)
    k = _fraction_count(fraction, a.size)
    return float(100.0 * np.mean(np.sort(a)[:k]))


def best_fraction(accuracies: ArrayLike, fraction: float) -> float:
    """Mean accuracy (percent) of the best ``fraction`` of clients.

    .. math::

        \\text{best}_x = \\frac{100}{K} \\sum_{i=N-K+1}^{N} a_{(i)}, \\qquad
        K = \\max(1, \\lfloor x N \\rfloor)

    (SPEC §10). See [`worst_fraction`][fairagg.metrics.worst_fraction] for how ``K`` is counted.

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Per-client accuracies in ``[0, 1]``.
    fraction : float
        The share of clients, in ``(0, 1]``.

    Returns
    -------
    float
        Mean of the ``K`` highest accuracies, in percent.
    """
    a = _as_accuracies(accuracies)
    k = _fraction_count(fraction, a.size)
    return float(100.0 * np.mean(np.sort(a)[a.size - k :]))


def accuracy_variance(accuracies: ArrayLike) -> float:
    """Population variance of the percent accuracies (q-FFL, Def. 3; SPEC §10).

    .. math::

        \\operatorname{Var}(a) = \\frac{1}{N} \\sum_{k=1}^{N} (100 a_k - 100 \\bar a)^2
        = 10^4 \\, \\texttt{np.var}(a)

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Per-client accuracies in ``[0, 1]``.

    Returns
    -------
    float
        The variance in percent² (divide by N, not N − 1: the convention of q-FFL's tables).
    """
    a = _as_accuracies(accuracies)
    return float(np.var(a) * 1e4)


def accuracy_std(accuracies: ArrayLike) -> float:
    """Population standard deviation of the percent accuracies (SPEC §10).

    .. math::

        \\sigma(a) = \\sqrt{\\operatorname{Var}(a)} = 100 \\, \\texttt{np.std}(a)

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Per-client accuracies in ``[0, 1]``.

    Returns
    -------
    float
        The square root of [`accuracy_variance`][fairagg.metrics.accuracy_variance], in percent.
        Accuracies so small that the variance underflows (below about 1e-150) are rescaled by a
        power of two first, so the deviation stays exact wherever it is representable.
    """
    a = _as_accuracies(accuracies)
    top = float(np.max(a, initial=0.0))
    if 0.0 < top < 2.0**-400:
        s = math.ldexp(1.0, math.frexp(top)[1])  # exact rescaling
        return float(math.sqrt(np.var(a / s) * 1e4) * s)
    return math.sqrt(float(np.var(a) * 1e4))


# ----------------------------------------------------------------------------------------------
# uniformity measures (scale-free, any non-negative vector)


def angle_to_ones(values: ArrayLike) -> float:
    """Angle in degrees between ``values`` and the all-ones vector (q-FFL, Def. 4).

    .. math::

        \\theta = \\arccos \\frac{\\sum_k v_k}{\\sqrt{N} \\, \\lVert v \\rVert_2}
        = \\operatorname{atan2}\\!\\left(\\lVert v - \\bar v \\mathbf{1} \\rVert_2,\\;
          \\sqrt{N} \\, \\bar v\\right)

    The second form (perpendicular over parallel component) is what is evaluated: it equals the
    first exactly in real arithmetic, cannot leave the domain of the inverse function, and keeps
    full precision near :math:`\\theta = 0`, where ``arccos`` of a rounded cosine loses half the
    digits.

    Parameters
    ----------
    values : array_like, shape (m,)
        A non-negative vector: accuracies (any unit) or losses.

    Returns
    -------
    float
        The angle in degrees, in ``[0, 90)``; 0 exactly when all entries are equal.

    Raises
    ------
    ValueError
        If ``values`` is all zero (the angle is undefined) or has a negative entry.
    """
    v = _normalised(values, "the angle to the all-ones vector")
    mean = float(np.mean(v))
    perpendicular = float(np.sqrt(np.sum((v - mean) ** 2)))
    parallel = mean * math.sqrt(v.size)
    return math.degrees(math.atan2(perpendicular, parallel))


def _distribution(values: ArrayLike, what: str) -> np.ndarray:
    """:math:`\\hat v = v / \\sum v` of a validated non-negative, not all-zero vector."""
    v = _normalised(values, what)
    v_hat: np.ndarray = v / np.sum(v)
    return v_hat


def kl_to_uniform(values: ArrayLike) -> float:
    """KL divergence of the normalised vector from the uniform distribution (q-FFL, Def. 5).

    .. math::

        KL(\\hat v \\,\\|\\, u) = \\sum_{k=1}^{N} \\hat v_k \\log (N \\hat v_k)
        = \\log N - H(\\hat v),
        \\qquad \\hat v = v / \\textstyle\\sum_j v_j, \\quad 0 \\log 0 = 0

    Parameters
    ----------
    values : array_like, shape (m,)
        A non-negative vector, not all zero.

    Returns
    -------
    float
        The divergence in nats, in ``[0, log N]`` (rounding below 0 is clipped to 0).

    Raises
    ------
    ValueError
        If ``values`` is all zero or has a negative entry.
    """
    p = _distribution(values, "KL(a || uniform)")
    pos = p[p > 0.0]
    kl = float(np.sum(pos * np.log(pos * p.size)))
    return max(0.0, kl)


def entropy(values: ArrayLike) -> float:
    """Shannon entropy of the normalised vector (q-FFL, Def. 5).

    .. math::

        H(\\hat v) = -\\sum_{k=1}^{N} \\hat v_k \\log \\hat v_k,
        \\qquad \\hat v = v / \\textstyle\\sum_j v_j, \\quad 0 \\log 0 = 0

    Parameters
    ----------
    values : array_like, shape (m,)
        A non-negative vector, not all zero.

    Returns
    -------
    float
        The entropy in nats, in ``[0, log N]`` (rounding outside is clipped); ``log N`` for a
        constant vector.

    Raises
    ------
    ValueError
        If ``values`` is all zero or has a negative entry.
    """
    p = _distribution(values, "the entropy")
    pos = p[p > 0.0]
    h = float(np.sum(pos * -np.log(pos)))
    return max(0.0, min(h, math.log(p.size)))


def gini(values: ArrayLike, sample: bool = False) -> float:
    """Gini coefficient of a non-negative vector (SPEC §10).

    .. math::

        G = \\frac{\\sum_{i=1}^{N} \\sum_{j=1}^{N} |v_i - v_j|}{2 N^2 \\bar v}
          = \\frac{\\sum_{i=1}^{N} (2i - N - 1) \\, v_{(i)}}{N \\sum_{k} v_k}

    with :math:`v_{(1)} \\le \\dots \\le v_{(N)}` sorted, so the cost is :math:`O(N \\log N)`.
    ``sample=True`` multiplies by :math:`N / (N - 1)` (the unbiased form, which reaches 1 when
    one client holds everything).

    Parameters
    ----------
    values : array_like, shape (m,)
        A non-negative vector, not all zero.
    sample : bool
        Use the sample form :math:`G \\cdot N/(N-1)`; needs ``N >= 2``.

    Returns
    -------
    float
        The Gini coefficient: in ``[0, 1 - 1/N]`` (population) or ``[0, 1]`` (sample).

    Raises
    ------
    ValueError
        If ``values`` is all zero or has a negative entry, or ``sample=True`` with one value.
    """
    if not isinstance(sample, (bool, np.bool_)):
        raise TypeError(f"sample must be a bool; got {type(sample).__name__} {sample!r}")
    v = _normalised(values, "the Gini coefficient")
    n = v.size
    if sample and n == 1:
        raise ValueError("sample=True needs at least two values (factor N/(N-1)); got N = 1")
    x = np.sort(v)
    # Shifting by the minimum changes no |v_i - v_j| and makes a constant vector exactly 0.
    d = x - x[0]
    coeff = 2.0 * np.arange(1, n + 1, dtype=np.float64) - (n + 1)
    g = max(0.0, float(np.dot(coeff, d) / (n * np.sum(v))))
    return g * n / (n - 1) if sample else g


def jain_index(values: ArrayLike) -> float:
    """Jain's fairness index (SPEC §10).

    .. math::

        J = \\frac{\\left(\\sum_{k=1}^{N} v_k\\right)^2}{N \\sum_{k=1}^{N} v_k^2}
          = \\frac{1}{1 + \\operatorname{Var}(v) / \\bar v^2}
          = \\cos^2 \\theta

    with :math:`\\theta` the angle of [`angle_to_ones`][fairagg.metrics.angle_to_ones]. The middle
    form is what is evaluated, so the result is exactly 1 for a constant vector and never exceeds 1.

    Parameters
    ----------
    values : array_like, shape (m,)
        A non-negative vector, not all zero.

    Returns
    -------
    float
        The index, in ``[1/N, 1]``.

    Raises
    ------
    ValueError
        If ``values`` is all zero or has a negative entry.
    """
    v = _normalised(values, "Jain's index")
    mean = float(np.mean(v))
    var = float(np.mean((v - mean) ** 2))
    return 1.0 / (1.0 + var / mean**2)


def alpha_fair_utility(values: ArrayLike, alpha: float) -> float:
    """Total α-fair utility of a non-negative vector (Mo & Walrand, 2000; q-FFL, App. C).

    .. math::

        U_\\alpha(v) = \\sum_{k=1}^{N} u_\\alpha(v_k), \\qquad
        u_\\alpha(x) = \\begin{cases}
            x^{1-\\alpha} / (1 - \\alpha) & \\alpha \\ne 1 \\\\
            \\log x & \\alpha = 1
        \\end{cases}

    α = 0 is the total (utilitarian), α = 1 proportional fairness, α → ∞ max-min fairness.
    No unit conversion is applied: the utility is of ``values`` as given.

    Parameters
    ----------
    values : array_like, shape (m,)
        A non-negative vector (e.g. accuracies).
    alpha : float
        The fairness parameter, ``alpha >= 0``.

    Returns
    -------
    float
        The utility. ``-inf`` when ``alpha >= 1`` and some entry is 0 (:math:`u_\\alpha(0) =
        -\\infty` there), returned without a warning; ``±inf`` likewise where a term overflows
        (e.g. a tiny entry with a large α).
    """
    v = _as_nonnegative(values)
    alpha = check_real(alpha, "alpha", low=0.0)
    if alpha >= 1.0 and bool(np.any(v == 0.0)):
        return -math.inf
    if alpha == 1.0:
        return float(np.sum(np.log(v)))
    with np.errstate(over="ignore"):
        return float(np.sum(np.power(v, 1.0 - alpha) / (1.0 - alpha)))


# ----------------------------------------------------------------------------------------------
# time series


def acf(series: ArrayLike, max_lag: int) -> np.ndarray:
    """Autocorrelation function of a per-round series (FairAvg, eq. 6-7).

    .. math::

        r[l] = \\frac{1}{T} \\sum_{t=1}^{T-l} (f_t - \\bar f)(f_{t+l} - \\bar f), \\qquad
        \\mathrm{ACF}[l] = \\frac{r[l]}{r[0]}, \\qquad l = 0, \\dots, L

    with :math:`\\bar f = \\frac{1}{T} \\sum_t f_t`. The ACF is invariant to shifting and scaling
    the series; it is evaluated on the series scaled by a power of two and on deviations scaled to
    a maximum of 1, so no product under- or overflows.

    Parameters
    ----------
    series : array_like, shape (T,)
        The per-round values :math:`f_1, \\dots, f_T` (e.g. accuracy after each round).
    max_lag : int
        The largest lag :math:`L`, in ``[0, T - 1]``.

    Returns
    -------
    ndarray, shape (max_lag + 1,)
        ``ACF[0], ..., ACF[L]`` in float64; ``ACF[0] == 1``.

    Raises
    ------
    ValueError
        If ``max_lag`` is outside ``[0, T - 1]`` or the series is constant (:math:`r[0] = 0`).
    """
    f = _as_vector(series, "series")
    big_t = f.size
    max_lag = check_int(max_lag, "max_lag", low=0, high=big_t - 1)
    if bool(np.all(f == f[0])):
        raise ValueError(
            f"series is constant (all {big_t} values equal {float(f[0])}): the ACF is undefined"
        )
    _, exponent = np.frexp(np.max(np.abs(f)))
    g = np.ldexp(f, -int(exponent))  # exact scaling into [-1, 1]: the mean cannot overflow
    dev = g - np.mean(g)
    dev = dev / np.max(np.abs(dev))  # r[0] >= 1/T: no underflow to a zero denominator
    r = np.array([np.dot(dev[: big_t - lag], dev[lag:]) for lag in range(max_lag + 1)]) / big_t
    acf: np.ndarray = r / r[0]
    return acf


# ----------------------------------------------------------------------------------------------
# summary


def fairness_summary(
    accuracies: ArrayLike, num_samples: ArrayLike | None = None
) -> dict[str, float | None]:
    """All fairness metrics of one accuracy vector, as a JSON-ready dict (SPEC §10).

    Parameters
    ----------
    accuracies : array_like, shape (m,)
        Per-client accuracies in ``[0, 1]``.
    num_samples : array_like of int, shape (m,), optional
        Per-client test-set sizes; when given, ``average`` is the sample-weighted average.

    Returns
    -------
    dict of str to float or None
        Plain Python floats under these keys, in this order:

        - ``average`` (%): [`average_accuracy`][fairagg.metrics.average_accuracy] with
          ``num_samples`` (client mean without);
        - ``client_mean`` (%): the unweighted client mean;
        - ``worst_10``, ``best_10``, ``worst_20``, ``best_20`` (%):
          [`worst_fraction`][fairagg.metrics.worst_fraction] and
          [`best_fraction`][fairagg.metrics.best_fraction] at 0.1 and 0.2;
        - ``min``, ``max`` (%);
        - ``variance`` (%²), ``std`` (%): population form;
        - ``angle`` (degrees), ``kl``, ``entropy`` (nats), ``gini`` (population), ``jain``.

        For an all-zero accuracy vector ``angle``, ``kl``, ``entropy``, ``gini`` and ``jain`` are
        undefined and reported as ``None``; every other entry is still a float.
    """
    a = _as_accuracies(accuracies)
    summary: dict[str, float | None] = {
        "average": average_accuracy(a, num_samples),
        "client_mean": average_accuracy(a),
        "worst_10": worst_fraction(a, 0.1),
        "best_10": best_fraction(a, 0.1),
        "worst_20": worst_fraction(a, 0.2),
        "best_20": best_fraction(a, 0.2),
        "min": float(100.0 * np.min(a)),
        "max": float(100.0 * np.max(a)),
        "variance": accuracy_variance(a),
        "std": accuracy_std(a),
    }
    defined = bool(np.any(a > 0.0))
    summary["angle"] = angle_to_ones(a) if defined else None
    summary["kl"] = kl_to_uniform(a) if defined else None
    summary["entropy"] = entropy(a) if defined else None
    summary["gini"] = gini(a) if defined else None
    summary["jain"] = jain_index(a) if defined else None
    return summary
