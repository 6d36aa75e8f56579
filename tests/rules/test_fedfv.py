"""Tests of fairagg.rules.fedfv (FedFV, SPEC §7): the Gram coefficient-space version against the
direct vector version, the reductions (α = 1, no conflicts), hand-computed rounds, the history
window of both variants, the order ablations, the rule's state, and bad input.

The theorems of the FedFV paper are in tests/rules/test_fedfv_theory.py.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import make_reports
from fairagg.rules.fedfv import (
    RHO,
    FedFVHistory,
    fedfv,
    fedfv_direction,
    fedfv_keep_count,
    fedfv_order,
)
from tests.strategies import finite_floats
from tests.tolerances import assert_close


@st.composite
def fedfv_rounds(draw, max_m=20, max_d=10, history=True):
    """(deltas, losses, kwargs) of one round: magnitudes over six decades, planted zero,
    parallel and antiparallel rows (also between the history and the round), tied losses, and a
    history window of either variant."""
    m = draw(st.integers(1, max_m))
    d = draw(st.integers(1, max_d))
    D = draw(hnp.arrays(np.float64, (m, d), elements=finite_floats(1.0), fill=st.nothing()))
    D *= 10.0 ** draw(hnp.arrays(np.float64, (m, 1), elements=st.floats(-3.0, 3.0)))
    for i, j, c in draw(
        st.lists(
            st.tuples(
                st.integers(0, m - 1),
                st.integers(0, m - 1),
                st.sampled_from([0.0, 2.0, 1.0, -1.0, -0.5, -3.0]),
            ),
            max_size=3,
        )
    ):
        if i != j:
            D[i] = c * D[j]
    losses = draw(hnp.arrays(np.float64, (m,), elements=st.integers(0, 3)))
    t = draw(st.integers(0, 6))
    h = draw(st.integers(0, 6)) if history and t > 0 else 0
    H = draw(hnp.arrays(np.float64, (h, d), elements=finite_floats(1.0), fill=st.nothing()))
    if h and draw(st.booleans()):
        H[0] = draw(st.sampled_from([-1.0, -2.0, 0.5])) * D[draw(st.integers(0, m - 1))]
    rounds = draw(hnp.arrays(np.int64, (h,), elements=st.integers(0, max(t - 1, 0))))
    kwargs = {
        "alpha": draw(st.sampled_from([0.0, 0.1, 1 / 3, 0.5, 2 / 3, 1.0])),
        "order": draw(st.sampled_from(["loss", "reverse", "random"])),
        "round_index": t,
        "history": FedFVHistory(H, rounds, np.arange(100, 100 + h)),
        "tau": draw(st.integers(0, 4)),
        "variant": draw(st.sampled_from(["paper", "flgo"])),
    }
    return D, losses, kwargs


def norm(x, axis=None):
    """The Euclidean norm at any scale (np.linalg.norm squares, so it underflows below about
    1e-154 and overflows above 1e154): each vector divided by its largest |entry| first."""
    x = np.asarray(x, dtype=np.float64)
    top = np.max(np.abs(x), axis=axis, keepdims=True, initial=0.0)
    scaled = np.divide(x, top, out=np.zeros_like(x), where=top > 0)
    return np.squeeze(top, axis=axis) * np.linalg.norm(scaled, axis=axis)


def roundoff_scale(D, H, res):
    """Σ_l |c_l| ‖u_l‖ over the vectors the result combines: the size of its round-off."""
    return float(
        np.abs(res.weights) @ norm(D, axis=1) + np.abs(res.history_weights) @ norm(H, axis=1)
    )


def near_rho_tie(U: np.ndarray) -> bool:
    """Whether two rows of U have a cosine within 1e-14 of −ρ, the conflict threshold: there the
    conflict test's outcome is decided by the last bits of the dot product and its threshold."""
    n = norm(U, axis=1)
    keep = n > 0
    V = U[keep] / n[keep, None]
    cos = V @ V.T
    np.fill_diagonal(cos, 0.0)
    return bool(np.any(np.abs(cos + RHO) <= 1e-14))


@settings(max_examples=300, deadline=None)
@given(r=fedfv_rounds())
def test_gram_version_equals_the_vector_version(r):
    """The two implementations make the same decisions (every count equal) and agree to 1e-12
    of the round-off scale Σ|c_l|‖u_l‖; the rescaled direction to 1e-12 times its condition
    number ‖mean δ‖ Σ|c_l|‖u_l‖ / ‖ḡ‖ (the rescaling divides by ‖ḡ‖, which has cancelled)."""
    D, losses, kw = r
    H = kw["history"].updates
    # A pair whose cosine is −ρ to round-off (the strategy's grid of magnitudes reaches it, e.g.
    # (−0.53, 0) and (1.78e-11, 1.78)) is a conflict for one summation order and not for the
    # other: both decisions are right there, so such rounds are not compared.
    assume(not near_rho_tie(np.vstack([D, H])))
    raw = {m: fedfv_direction(D, losses, method=m, rescale=False, **kw) for m in ("gram", "vector")}
    g, v = raw["gram"], raw["vector"]
    np.testing.assert_array_equal(g.order, v.order)
    np.testing.assert_array_equal(g.kept, v.kept)
    assert g[6:] == v[6:]  # conflicts found, projections, external ones, remaining
    scale = max(roundoff_scale(D, H, v), 1e-300)
    np.testing.assert_allclose(g.direction, v.direction, rtol=0, atol=1e-12 * scale)
    # Coefficients: each term C_ij δ_j to 1e-12 of its row's round-off scale.
    norms = norm(D, axis=1)
    row_scale = np.abs(v.coefficients) @ norms
    err = np.abs(g.coefficients - v.coefficients) * norms[None, :]
    assert np.all(err <= 1e-12 * row_scale[:, None] + 1e-300)
    np.testing.assert_allclose(g.weights * norms, v.weights * norms, rtol=0, atol=1e-12 * scale)
    # Rescaled.
    out = {m: fedfv_direction(D, losses, method=m, **kw) for m in ("gram", "vector")}
    target = norm(D.mean(axis=0))
    g_norm = norm(v.direction)
    if g_norm == 0.0:
        assert not np.any(out["gram"].direction) and not np.any(out["vector"].direction)
        return
    cond = target * (scale / g_norm)  # the ratio first: the product underflows at 1e-160
    # The rescaling's target ‖mean δ‖ comes from a weighted product (BLAS or the kernel, with
    # FMA) on one path and from NumPy's mean on the other: where the exact mean is 0 (deltas
    # (0.375 e_5, 0, −0.375 e_5)) one gives 0 and the other the round-off of a product,
    # 6.9e-18; the rescaled direction's length carries that difference.
    mean_roundoff = 4 * np.finfo(np.float64).eps * norm(np.abs(D).mean(axis=0))
    np.testing.assert_allclose(
        out["gram"].direction, out["vector"].direction, rtol=0, atol=1e-12 * cond + mean_roundoff
    )


@given(r=fedfv_rounds(history=False), method=st.sampled_from(["gram", "vector"]))
def test_alpha_one_is_the_uniform_mean(r, method):
    """α = 1: every client keeps its update, so without a window the step is (1/m) Σ δ_k."""
    D, losses, kw = r
    kw.update(alpha=1.0, tau=0)
    res = fedfv_direction(D, losses, method=method, **kw)
    assert res.projections == 0 and res.kept.all()
    assert_close(res.direction, D.mean(axis=0), scale=max(1.0, np.abs(D).max()))


@given(
    D=hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 12), st.integers(1, 6)),
        elements=st.floats(0.0, 1.0),
    ),
    alpha=st.sampled_from([0.0, 0.5, 1.0]),
    method=st.sampled_from(["gram", "vector"]),
)
def test_no_conflicts_is_the_uniform_mean(D, alpha, method):
    """Non-negative updates never conflict: nothing is projected and the step is the mean."""
    res = fedfv_direction(D, np.arange(D.shape[0]), alpha=alpha, method=method)
    assert res.conflicts_found == 0 and res.projections == 0
    assert_close(res.direction, D.mean(axis=0))


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_a_conflict_is_strictly_below_minus_rho_times_the_norms(method):
    """δ_i·δ_j = −ρ ‖δ_i‖ ‖δ_j‖ exactly (unit norms, as float64 rounds them) is no conflict;
    twice that is one."""
    for dot, found in [(-RHO, 0), (-2 * RHO, 1)]:
        D = np.array([[1.0, 0.0], [dot, 1.0]])  # ‖δ_1‖² = 1 + dot² rounds to 1
        res = fedfv_direction(D, [0.0, 1.0], alpha=0.0, method=method)
        assert res.conflicts_found == found
        # the projections use the same strict test (each g̃_i is still δ_i, of scale 1)
        assert res.projections == 2 * found


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_the_conflict_tolerance_grows_with_every_projection(method):
    """The round-off scale of a projected g̃_i is Σ_l |C_il| ‖δ_l‖ (RHO): after δ_0 is projected
    on δ_1 (coefficient ~1e-3), δ_2·g̃_0 ≈ −1e-12 is within ρ × that scale (≈ 1e-11) and is no
    conflict; only the mutual conflict of δ_0 and δ_1 is projected, once each way."""
    D = np.array([[1.0, 0.0, 0.0], [-1e-3, 1.0, 0.0], [-1e-12, 0.0, 1.0]])
    res = fedfv_direction(D, [2.0, 0.0, 1.0], alpha=0.0, method=method)
    assert (res.conflicts_found, res.projections) == (1, 2)


@pytest.mark.parametrize("method", ["gram", "vector"])
@pytest.mark.parametrize("x, projections", [(3.2, 3), (3.7, 4)])
def test_the_conflict_tolerance_adds_each_projections_coefficient_times_its_norm(
    method, x, projections
):
    """Order δ_1, δ_2, δ_0 (losses 0, 1, 2), δ_2 = (−xρ, 0, 1). g̃_0 = δ_0 + ½δ_1 = (½, ½, 0) after
    its projection on δ_1, of scale Σ_l |C_0l| ‖δ_l‖ = 1 + ½√2 ≈ 1.71, so g̃_0·δ_2 = −xρ/2 is a
    conflict iff x > 3.41. With x = 3.2 it is none (a scale left at ‖δ_0‖ = 1, or grown by the
    coefficient ½ alone, 1.5, would make it one); with x = 3.7 it is one (a scale grown by
    ½ ‖δ_1‖² = 1, 2, would not). δ_0·δ_2 = −xρ is a conflict either way: δ_2 is projected on δ_0,
    and δ_1 on δ_0."""
    D = np.array([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-x * RHO, 0.0, 1.0]])
    res = fedfv_direction(D, [2.0, 0.0, 1.0], alpha=0.0, method=method)
    assert list(res.order) == [1, 2, 0]
    assert (res.conflicts_found, res.projections) == (2, projections)


@settings(max_examples=200, deadline=None)
@given(r=fedfv_rounds(history=False), method=st.sampled_from(["gram", "vector"]))
def test_no_projected_update_conflicts_with_the_last_target(r, method):
    """Alg. 2 ends every projected g̃_i (i ≠ last) with the last target in the order, so none
    conflicts with it beyond round-off; with α > 0 the last client keeps its update."""
    D, losses, kw = r
    res = fedfv_direction(D, losses, method=method, rescale=False, **kw)
    last = res.order[-1]
    sq = np.einsum("ij,ij->i", D, D)
    # fedfv_direction's zero updates: ‖δ‖² below 2^-1022 P, P the largest power of two ≤ the
    # largest ‖δ_l‖² (scale-free; such a δ_last is no target and leaves g̃_i in conflict with it)
    top = sq.max(initial=0.0)
    zero = sq < (math.ldexp(1.0, math.frexp(top)[1] - 1 - 1022) if top > 0.0 else np.inf)
    norms = np.sqrt(np.where(zero, 0.0, sq))
    if norms[last] == 0.0:
        return
    for i in range(D.shape[0]):
        if i == last or res.kept[i] or norms[i] == 0.0:
            continue
        g_i = res.coefficients[i] @ D
        # RHO: a conflict within round-off of 0 is no conflict, and is not projected away.
        bound = (RHO + 1e-12) * norms[last] * (np.abs(res.coefficients[i]) @ norms)
        assert g_i @ D[last] >= -bound
    assert res.kept[last] == (kw["alpha"] > 0)


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_an_update_below_the_scale_free_zero_threshold_is_no_target(method):
    """‖δ_1‖² ≈ 4.6e-307 is a normal number but below 2^-1022 · 64 (64 the largest power of two
    ≤ ‖δ_0‖² = 100): δ_1 counts as a zero update, so δ_0 is not projected on it although
    δ_0·δ_1 < 0 (a draw of the property test above, whose own zero rule was float64's tiny)."""
    D = np.array([[10.0], [-6.80183426e-154]])
    res = fedfv_direction(D, [0.0, 0.0], alpha=0.0, method=method, rescale=False)
    assert (res.conflicts_found, res.projections) == (0, 0)
    assert np.array_equal(res.coefficients, np.eye(2))


def test_alpha_zero_can_leave_the_last_client_in_conflict():
    """With α = 0 the last client's own g̃ is projected too and can end in conflict with its
    update, and then so can the average. δ1 = (0, −½), δ2 = (−½, −½), δ3 = (½, 1) in that order:
    g̃3 = δ3 + 2δ1 = (½, 0), then + ½δ2 = (¼, −¼), and g̃3·δ3 = −⅛; g̃1 = δ1 + 0.4 δ3 = (0.2, −0.1),
    g̃2 = δ2 + 0.6 δ3 = (−0.2, 0.1), so ḡ = (1/12, −1/12) and ḡ·δ3 = −1/24. (The paper's proof of
    Theorem 1 says the final average never conflicts with the last target; that needs its
    assumption that every projection is made.)"""
    D = np.array([[0.0, -0.5], [-0.5, -0.5], [0.5, 1.0]])
    for method in ("gram", "vector"):
        res = fedfv_direction(D, [0.0, 1.0, 2.0], alpha=0.0, rescale=False, method=method)
        assert_close(
            res.coefficients, np.array([[1.0, 0.0, 0.4], [0.0, 1.0, 0.6], [2.0, 0.5, 1.0]])
        )
        assert_close(res.direction, np.array([1.0, -1.0]) / 12)
        assert_close(res.coefficients[2] @ D @ D[2], -1 / 8)
        assert res.conflicts_remaining == 1


def test_two_clients_by_hand():
    """δ1 = (1, 0), δ2 = (−1, 1), losses 0.1 < 0.2 (order: client 1 first).

    α = 0: g̃1 = δ1 − (−1/2) δ2 = (1/2, 1/2), g̃2 = δ2 − (−1/1) δ1 = (0, 1), ḡ = (1/4, 3/4), mean
    δ = (0, 1/2), g = ḡ · (1/2)/‖ḡ‖. α = 1/2: 2 − ⌈1 · 1/2⌉ = 1 client (the larger loss) keeps δ2,
    so ḡ = ((1/2, 1/2) + (−1, 1))/2 = (−1/4, 3/4).
    """
    D = np.array([[1.0, 0.0], [-1.0, 1.0]])
    for method in ("gram", "vector"):
        res = fedfv_direction(D, [0.1, 0.2], alpha=0.0, method=method)
        g_bar = np.array([0.25, 0.75])
        assert_close(res.direction, g_bar * 0.5 / norm(g_bar))
        assert_close(res.coefficients, np.array([[1.0, 0.5], [1.0, 1.0]]))
        assert_close(res.weights, np.array([1.0, 0.75]) * 0.5 / norm(g_bar))
        assert (res.conflicts_found, res.projections, res.conflicts_remaining) == (1, 2, 0)
        half = fedfv_direction(D, [0.1, 0.2], alpha=0.5, method=method, rescale=False)
        assert_close(half.direction, np.array([-0.25, 0.75]))
        np.testing.assert_array_equal(half.kept, [False, True])


def test_external_conflicts_by_hand_in_both_windows():
    """Round t = 2, τ = 1, one round's update δ = (1, 0) and a history client whose latest
    update h = (−1, −1) is from round 1. The paper's window (round 1) finds h in conflict with
    ḡ = δ and projects: ḡ = (1, 0) − (−1/2)(−1, −1) = (1/2, −1/2), rescaled to length 1. The
    public code's window (rounds 2..2) holds only this round's own update: nothing changes."""
    D = np.array([[1.0, 0.0]])
    hist = FedFVHistory(np.array([[-1.0, -1.0]]), np.array([1]), np.array([7]))
    for method in ("gram", "vector"):
        paper = fedfv_direction(D, [1.0], round_index=2, history=hist, tau=1, method=method)
        assert_close(paper.direction, np.array([1.0, -1.0]) / np.sqrt(2.0))
        assert (paper.external_conflicts, paper.external_projections) == (1, 1)
        assert_close(paper.history_weights, [0.5 / np.sqrt(0.5)])
        flgo = fedfv_direction(
            D, [1.0], round_index=2, history=hist, tau=1, variant="flgo", method=method
        )
        assert_close(flgo.direction, D[0])
        assert flgo.external_conflicts == 0
        # Outside the window (round 0 with τ = 1 at t = 2), or before t ≥ τ, nothing happens.
        old = hist._replace(rounds=np.array([0]))
        assert_close(
            fedfv_direction(D, [1.0], round_index=2, history=old, tau=1, method=method).direction,
            D[0],
        )
        assert_close(
            fedfv_direction(D, [1.0], round_index=2, history=hist, tau=3, method=method).direction,
            D[0],
        )


def test_flgo_window_looks_back_in_round_tau_minus_one_as_flgo_does():
    """FLGo 0.4.4's fedfv.Server counts rounds from R = 1 and projects against the rounds
    R−τ+1..R once R ≥ τ; fairagg's t = R − 1, so with τ = 1 the flgo variant mitigates external
    conflicts already in the first round (t = 0), against that round's own updates.

    θ = (0, 0), δ₀ = (1, 0), δ₁ = (−1, 1), losses (1, 2), α = 1/2. Keep count
    2 − ⌈(2 − 1)(1 − 1/2)⌉ = 1: the larger loss (client 1) keeps δ₁. Client 0: δ₁·δ₀ = −1 < 0, so
    g̃₀ = (1, 0) − (−1/‖δ₁‖²)(−1, 1) = (1, 0) + ½(−1, 1) = (½, ½).
    ḡ = ((½, ½) + (−1, 1))/2 = (−¼, ¾).
    External, round 0 (the current round): δ₀·ḡ = −¼ < 0 conflicts, δ₁·ḡ = ¼ + ¾ = 1 does not;
    g_con = δ₀, ḡ·g_con = −¼ < 0: ḡ ← (−¼, ¾) − (−¼/1)(1, 0) = (0, ¾).
    Rescale to ‖(δ₀ + δ₁)/2‖ = ‖(0, ½)‖ = ½: g = (0, ½), θ¹ = θ − g = (0, −½), FLGo's answer.
    The paper variant waits for t ≥ τ = 1: g = ḡ·½/‖ḡ‖ = (−¼, ¾)/√10·2 = (−0.1581…, 0.4743…)."""
    D = np.array([[1.0, 0.0], [-1.0, 1.0]])
    losses = np.array([1.0, 2.0])
    for method in ("gram", "vector"):
        flgo = fedfv_direction(
            D, losses, alpha=0.5, round_index=0, tau=1, variant="flgo", method=method
        )
        assert_close(flgo.direction, [0.0, 0.5])
        assert (flgo.external_conflicts, flgo.external_projections) == (1, 1)
        # In the updates: ḡ = ½(δ₀ + ½δ₁ + δ₁) + ¼δ₀ = ¾δ₀ + ¾δ₁, times ½/‖ḡ‖ = ½/¾.
        assert_close(flgo.weights, [0.5, 0.5])
        paper = fedfv_direction(D, losses, alpha=0.5, round_index=0, tau=1, method=method)
        assert_close(paper.direction, np.array([-0.25, 0.75]) * 0.5 / np.sqrt(0.625))
        assert paper.external_conflicts == 0
    rule = fedfv(alpha=0.5, tau=1, variant="flgo")
    theta = np.zeros(2)
    agg = rule.step(theta, reports(D, losses, [0, 1], 2), rule.init(theta, 2))
    assert_close(agg.params, [0.0, -0.5])


@pytest.mark.parametrize("tau", [1, 2, 3])
def test_each_variant_first_looks_back_where_its_algorithm_says(tau):
    """Paper (Alg. 1, line 9: t ≥ τ): the first round with an external step is t = τ, over rounds
    0..τ−1. flgo (R = t + 1 ≥ τ): t = τ − 1, over rounds 0..τ−1 (the current one included). A
    single client δ = (1, 0) each round, and a history client from round 0 with h = (−1, −1):
    it conflicts with every ḡ = δ, so the step happens exactly where the window reaches round 0
    or, for flgo with τ = 1, the current round (which holds no conflict: nothing projected)."""
    D = np.array([[1.0, 0.0]])
    hist = FedFVHistory(np.array([[-1.0, -1.0]]), np.array([0]), np.array([7]))
    for t in range(1, tau + 2):
        for variant, first in (("paper", tau), ("flgo", tau - 1)):
            res = fedfv_direction(D, [1.0], round_index=t, history=hist, tau=tau, variant=variant)
            lo = t - tau if variant == "paper" else t - tau + 1
            reaches_round_0 = t >= first and lo <= 0
            assert res.external_projections == int(reaches_round_0), (variant, t)


@pytest.mark.parametrize("scale_exp", [0, -600, 600])
def test_an_update_subnormal_relative_to_the_largest_counts_as_zero(scale_exp):
    """Rows (1e-160, 0, 0), (−1, ½, 0), (0.3, −1, 0.2): the first squared norm, 1e-320, is
    below 2^-1022 times the largest, so the first update is no projection target and is not
    projected: the round is the round with that row replaced by 0 (the mean moves by 1e-160/3,
    invisible), and the same decision is taken at every scale (the rows × 2^±600 included).
    Taken as a target, δ₁·δ₀ = −1e-160 < 0 would remove δ₁'s first component."""
    D = np.ldexp(np.array([[1e-160, 0.0, 0.0], [-1.0, 0.5, 0.0], [0.3, -1.0, 0.2]]), scale_exp)
    Z = D.copy()
    Z[0] = 0.0
    losses = [0.1, 0.2, 0.3]
    for method in ("gram", "vector"):
        got = fedfv_direction(D, losses, alpha=0.0, method=method)
        want = fedfv_direction(Z, losses, alpha=0.0, method=method)
        back = [np.ldexp(r.direction, -scale_exp) for r in (got, want)]  # exact
        assert_close(*back)
        assert_close(got.coefficients, want.coefficients)
        np.testing.assert_array_equal(got.coefficients[0], [1.0, 0.0, 0.0])
        assert got.projections == want.projections


def test_external_window_goes_oldest_first_and_sums_only_conflicting_updates():
    """δ = (1, 1) alone (ḡ = δ) at t = 2 with τ = 2: round 0 holds h1 = (−1, 0) and
    h2 = (0, 1), round 1 holds h3 = (1, −1). Round 0 first: only h1 conflicts, g_con = h1,
    ḡ ← (1, 1) + h1 = (0, 1); then round 1: h3·ḡ = −1, ḡ ← (0, 1) + ½ h3 = (½, ½), rescaled to
    ‖δ‖: (1, 1). Newest first would give (0, 1) (h3·δ = 0 is no conflict)."""
    D = np.array([[1.0, 1.0]])
    hist = FedFVHistory(
        np.array([[-1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]), np.array([0, 0, 1]), np.array([4, 5, 6])
    )
    for method in ("gram", "vector"):
        raw = fedfv_direction(
            D, [0.0], round_index=2, history=hist, tau=2, method=method, rescale=False
        )
        assert_close(raw.direction, np.array([0.5, 0.5]))
        assert_close(raw.weights, [1.0])
        assert_close(raw.history_weights, [1.0, 0.0, 0.5])
        assert (raw.external_conflicts, raw.external_projections) == (2, 2)
        res = fedfv_direction(D, [0.0], round_index=2, history=hist, tau=2, method=method)
        assert_close(res.direction, np.array([1.0, 1.0]))


@pytest.mark.parametrize(
    "m, alpha, paper, flgo",
    [
        (3, 0.0, 0, 0),
        (3, 1 / 3, 1, 1),
        (3, 2 / 3, 2, 2),
        (3, 1.0, 3, 3),
        (10, 0.1, 1, 1),
        (10, 1 / 3, 4, 3),  # (10 − 1)(1 − 1/3) is 6.0000000000000009 in float64
        (10, 2 / 3, 7, 6),
        (11, 0.7, 8, 7),
        (1, 0.5, 1, 1),
        (5, 1e-9, 1, 1),
    ],
)
def test_keep_count(m, alpha, paper, flgo):
    assert fedfv_keep_count(m, alpha) == paper
    assert fedfv_keep_count(m, alpha, "flgo") == flgo


def test_orders():
    losses = np.array([0.3, 0.1, 0.3, 0.2, 0.1])
    np.testing.assert_array_equal(fedfv_order(5, losses), [1, 4, 3, 0, 2])  # stable ties
    np.testing.assert_array_equal(fedfv_order(5, losses, "reverse"), [2, 0, 3, 4, 1])
    r1 = fedfv_order(5, None, "random", seed=3, round_index=7)
    np.testing.assert_array_equal(r1, fedfv_order(5, losses, "random", seed=3, round_index=7))
    assert sorted(r1) == list(range(5))
    others = {tuple(fedfv_order(5, None, "random", seed=3, round_index=t)) for t in range(20)}
    assert len(others) > 5  # a new permutation each round
    # The order decides the result: reversing it changes which update is the last target.
    D = np.array([[1.0, 0.0], [-1.0, 1.0], [0.2, -1.0]])
    a = fedfv_direction(D, [0.0, 1.0, 2.0], alpha=0.0).direction
    b = fedfv_direction(D, [0.0, 1.0, 2.0], alpha=0.0, order="reverse").direction
    assert not np.allclose(a, b)


def test_zero_and_cancelling_updates_give_zero_not_nan():
    for method in ("gram", "vector"):
        zero = fedfv_direction(np.zeros((3, 4)), [1.0, 2.0, 3.0], method=method)
        assert not np.any(zero.direction) and np.all(np.isfinite(zero.weights))
        # Antiparallel pair of different lengths: each projects the other away, ḡ = 0 up to
        # round-off, while the mean update is not 0: the direction is 0, not noise.
        D = np.array([[0.3, -0.7, 1.1], [-0.6, 1.4, -2.2]])
        res = fedfv_direction(D, [0.0, 1.0], alpha=0.0, method=method)
        assert not np.any(res.direction)
        # One zero update among others is skipped as a target and adds 0.
        D3 = np.array([[1.0, 0.0], [0.0, 0.0], [-1.0, 1.0]])
        r3 = fedfv_direction(D3, [0.0, 1.0, 2.0], alpha=0.0, method=method, rescale=False)
        assert_close(r3.direction, np.array([0.5, 1.5]) / 3)


def test_float32_updates():
    rng = np.random.default_rng(0)
    D, losses = rng.normal(size=(6, 9)), rng.random(6)
    a = fedfv_direction(D.astype(np.float32), losses)
    b = fedfv_direction(D.astype(np.float32).astype(np.float64), losses)
    assert a.direction.dtype == np.float64
    np.testing.assert_array_equal(a.direction, b.direction)


def reports(D, losses, ids, K):
    return make_reports(D, np.ones(len(D), np.int64), losses=losses, client_ids=ids, num_clients=K)


@pytest.mark.parametrize("variant", ["paper", "flgo"])
@pytest.mark.parametrize("tau", [0, 1, 2, 3])
def test_rule_keeps_the_latest_update_of_each_client_and_equals_the_function(variant, tau):
    """Five rounds of 3 of 6 clients: the rule's step equals fedfv_direction given the latest
    update and round of every client seen before (the full history, built independently here),
    and its state holds exactly the rows a later window can reach."""
    rng = np.random.default_rng(tau)
    K, d = 6, 5
    rule = fedfv(alpha=0.0, tau=tau, variant=variant)
    theta = rng.normal(size=d)
    state = rule.init(theta, K)
    latest: dict[int, tuple[np.ndarray, int]] = {}
    for t in range(5):
        ids = rng.choice(K, 3, replace=False)
        D = rng.normal(size=(3, d))
        losses = rng.random(3)
        agg = rule.step(theta, reports(D, losses, ids, K), state)
        seen = sorted(k for k in latest if k not in ids)
        full = FedFVHistory(
            np.array([latest[k][0] for k in seen]).reshape(-1, d),
            np.array([latest[k][1] for k in seen], dtype=np.int64),
            np.array(seen, dtype=np.int64),
        )
        want = fedfv_direction(
            D,
            losses,
            alpha=0.0,
            round_index=t,
            history=full,
            tau=tau,
            variant=variant,
            client_ids=ids,
        )
        assert_close(agg.params, theta - want.direction)
        assert agg.info["external_conflicts"] == want.external_conflicts
        for k in ids:
            latest[int(k)] = (D[list(ids).index(k)].copy(), t)
        first_next = t + 1 - tau if variant == "paper" else t + 2 - tau
        kept = {k for k, (_, r) in latest.items() if r >= first_next}
        assert set(agg.state.history.client_ids.tolist()) == kept
        for k, r, row in zip(
            agg.state.history.client_ids,
            agg.state.history.rounds,
            agg.state.history.updates,
            strict=True,
        ):
            assert latest[int(k)][1] == r
            np.testing.assert_array_equal(latest[int(k)][0], row)
        theta, state = agg.params, agg.state
        assert state.rounds == t + 1


def test_rule_info_and_purity():
    rule = fedfv(alpha=1 / 3, tau=0)
    D = np.array([[1.0, 0.0], [-1.0, 1.0], [0.5, -2.0]])
    r = reports(D, [0.2, 0.1, 0.3], [2, 0, 1], 3)
    agg = rule.step(np.zeros(2), r, rule.init(np.zeros(2), 3))
    for key in (
        "weights",
        "history_weights",
        "history_clients",
        "coefficients",
        "order",
        "kept",
        "conflicts_found",
        "projections",
        "external_conflicts",
        "external_projections",
        "conflicts_remaining",
    ):
        assert key in agg.info
    assert agg.info["coefficients"].shape == (3, 3)
    np.testing.assert_array_equal(agg.info["order"], [1, 0, 2])
    assert_close(agg.params, -(agg.info["weights"] @ D))
    assert agg.state.history.updates.shape == (0, 2)  # τ = 0 keeps nothing
    vec = fedfv(alpha=1 / 3, tau=0, method="vector")
    assert_close(vec.step(np.zeros(2), r, vec.init(np.zeros(2), 3)).params, agg.params)


def test_random_order_needs_no_losses():
    rule = fedfv(order="random", seed=1)
    agg = rule.step(np.zeros(2), make_reports(np.eye(2), [1, 1]), rule.init(np.zeros(2), 2))
    assert np.all(np.isfinite(agg.params))
    with pytest.raises(ValueError, match="losses"):
        fedfv().step(np.zeros(2), make_reports(np.eye(2), [1, 1]), fedfv().init(np.zeros(2), 2))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"alpha": -0.1}, ValueError, "alpha"),
        ({"alpha": 1.5}, ValueError, "alpha"),
        ({"alpha": float("nan")}, ValueError, "alpha"),
        ({"tau": -1}, ValueError, "tau"),
        ({"tau": 1.0}, TypeError, "tau"),
        ({"order": "size"}, ValueError, "order"),
        ({"variant": "official"}, ValueError, "variant"),
        ({"method": "fast"}, ValueError, "method"),
        ({"rescale": 1}, TypeError, "rescale"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_bad_hyperparameters_raise_naming_them(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fedfv(**kwargs)
    with pytest.raises(exc, match=match):
        fedfv_direction(np.eye(2), [0.0, 1.0], **kwargs)


def test_bad_round_input_raises_naming_the_argument():
    D = np.eye(2)
    for method in ("gram", "vector"):
        for bad in (np.nan, np.inf):
            with pytest.raises(ValueError, match="deltas must be finite"):
                fedfv_direction(np.array([[1.0, 0.0], [bad, 1.0]]), [0.0, 1.0], method=method)
        # Squares beyond float64 are no error: the direction is computed on scaled updates.
        big = np.array([[1.0, 0.0], [1e200, 1.0]])
        scaled = fedfv_direction(np.ldexp(big, -700), [0.0, 1.0], method=method).direction
        got = fedfv_direction(big, [0.0, 1.0], method=method).direction
        np.testing.assert_array_equal(got, np.ldexp(scaled, 700))
    # A step whose sum with params leaves float64 is an error naming params.
    rule = fedfv(alpha=0.0, tau=0)
    theta = np.array([-1.5e308, 0.0])
    with pytest.raises(ValueError, match="params"):
        rule.step(theta, reports(np.array([[1e308, 0.0]]), [1.0], [0], 1), rule.init(theta, 1))
    with pytest.raises(ValueError, match="losses"):
        fedfv_direction(D, [0.0])
    with pytest.raises(ValueError, match="losses"):
        fedfv_direction(D, None)
    with pytest.raises(TypeError, match="history"):
        fedfv_direction(D, [0.0, 1.0], history=(np.zeros((1, 2)), [0], [3]), round_index=1)
    bad_shape = FedFVHistory(np.zeros((1, 3)), np.array([0]), np.array([3]))
    with pytest.raises(ValueError, match="history.updates"):
        fedfv_direction(D, [0.0, 1.0], history=bad_shape, round_index=1)
    late = FedFVHistory(np.zeros((1, 2)), np.array([1]), np.array([3]))
    with pytest.raises(ValueError, match="history.rounds"):
        fedfv_direction(D, [0.0, 1.0], history=late, round_index=1)
    twice = FedFVHistory(np.zeros((2, 2)), np.array([0, 0]), np.array([3, 3]))
    with pytest.raises(ValueError, match="distinct"):
        fedfv_direction(D, [0.0, 1.0], history=twice, round_index=1)
    ok = FedFVHistory(np.zeros((1, 2)), np.array([0]), np.array([1]))
    with pytest.raises(ValueError, match="this round"):
        fedfv_direction(D, [0.0, 1.0], history=ok, round_index=1, client_ids=[0, 1])
    with pytest.raises(ValueError, match="history.rounds"):
        fedfv_direction(D, [0.0, 1.0], history=ok._replace(rounds=np.array([0, 0])), round_index=1)


@pytest.mark.parametrize(
    ("history", "exc", "match"),
    [
        (
            (1, 2, 3),
            TypeError,
            r"^history must be a FedFVHistory \(updates, rounds, client_ids\); "
            r"got tuple$",
        ),
        (
            ([0.0, 0.0], [0], [5]),
            ValueError,
            r"^history\.updates must be 2-dimensional; got shape \(2,\)$",
        ),
        (
            ([[0.0, 0.0, 0.0]], [0], [5]),
            ValueError,
            r"^history\.updates must have shape \(\*, 2\); got \(1, 3\)$",
        ),
        (([[0.0, 0.0]], [-1], [5]), ValueError, r"^history\.rounds must be >= 0; got minimum -1$"),
        (
            ([[0.0, 0.0]], [1.5], [5]),
            TypeError,
            r"^history\.rounds must hold integers; got non-integral values$",
        ),
        (
            ([[0.0, 0.0]], [0], [-1]),
            ValueError,
            r"^history\.client_ids must be >= 0; got minimum -1$",
        ),
        (
            ([[0.0, 0.0]], [0], [1.5]),
            TypeError,
            r"^history\.client_ids must hold integers; got non-integral values$",
        ),
        (
            ([[0.0, 0.0], [0.0, 0.0]], [0, 0], [3, 3]),
            ValueError,
            r"^history\.client_ids must be distinct \(one latest update per client\)$",
        ),
        (
            ([[0.0, 0.0]], [0], [1]),
            ValueError,
            r"^history must not hold clients of this round: their latest update is this round's$",
        ),
    ],
)
def test_history_errors_name_the_field_and_the_bound(history, exc, match):
    if isinstance(history[0], list):
        history = FedFVHistory(*(np.array(a) for a in history))
    with pytest.raises(exc, match=match):
        fedfv_direction(np.eye(2), [0.0, 1.0], history=history, round_index=3, client_ids=[0, 1])


def test_rule_defaults_and_hyperparameters():
    """The documented defaults: α = 0.1, τ = 1, loss order, the paper's window, seed 0, the Gram
    method with rescaling, on NumPy; every hyper-parameter is reported under its own name."""
    rule = fedfv()
    assert rule.name == "fedfv"
    assert dict(rule.hyperparams) == {
        "alpha": 0.1,
        "tau": 1,
        "order": "loss",
        "variant": "paper",
        "seed": 0,
        "method": "gram",
        "rescale": True,
        "backend": "numpy",
    }
    kw = dict(alpha=0.5, tau=2, order="random", variant="flgo", seed=3, method="vector")
    assert dict(fedfv(rescale=False, **kw).hyperparams) == {
        **kw,
        "rescale": False,
        "backend": "numpy",
    }


def _round_with_conflicts(dtype=np.float64):
    rng = np.random.default_rng(11)
    D = rng.normal(size=(4, 50)).astype(dtype)
    return D, rng.random(4)


@pytest.mark.parametrize(
    ("kwargs", "defaults"),
    [
        ({"order": "random", "seed": 5}, {"order": "random", "seed": 0}),
        ({"method": "vector"}, {"method": "gram"}),
        ({"rescale": False}, {"rescale": True}),
        ({"backend": "numba"}, {"backend": "numpy"}),
    ],
)
def test_rule_passes_each_hyperparameter_to_the_direction(kwargs, defaults):
    """The rule's step is fedfv_direction with the rule's seed, method, rescaling and backend,
    bit for bit; on this round each of them changes the result from its default's."""
    D, losses = _round_with_conflicts()
    rule = fedfv(alpha=0.0, tau=0, **kwargs)
    theta = np.zeros(D.shape[1])
    agg = rule.step(theta, reports(D, losses, [0, 1, 2, 3], 4), rule.init(theta, 4))
    want = fedfv_direction(D, losses, alpha=0.0, **kwargs)
    np.testing.assert_array_equal(agg.params, -want.direction)
    default = fedfv_direction(D, losses, alpha=0.0, **defaults)
    assert not np.array_equal(want.direction, default.direction)


@pytest.mark.parametrize(
    ("params_dtype", "deltas_dtype"),
    [(np.float32, np.float32), (np.float64, np.float32), (np.float32, np.float64)],
)
def test_rule_result_has_the_promoted_dtype_of_params_and_deltas(params_dtype, deltas_dtype):
    D, losses = _round_with_conflicts(deltas_dtype)
    theta = np.zeros(D.shape[1], dtype=params_dtype)
    rule = fedfv()
    agg = rule.step(theta, reports(D, losses, [0, 1, 2, 3], 4), rule.init(theta, 4))
    assert agg.params.dtype == np.result_type(params_dtype, deltas_dtype)


def test_rule_state_history_is_int64_and_read_only():
    D, losses = _round_with_conflicts()
    theta = np.zeros(D.shape[1])
    rule = fedfv(tau=2)
    state = rule.init(theta, 6)
    assert state.history.rounds.dtype == np.int64 and state.history.client_ids.dtype == np.int64
    assert state.history.updates.shape == (0, D.shape[1])
    for _ in range(2):
        agg = rule.step(theta, reports(D, losses, [0, 1, 2, 3], 6), state)
        state = agg.state
    h = state.history
    assert h.rounds.dtype == np.int64 and h.client_ids.dtype == np.int64
    assert h.updates.dtype == np.float64 and h.updates.shape == (4, D.shape[1])
    for a in h:
        assert not a.flags.writeable


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize(("m", "d"), [(1, 700), (5, 1541), (13, 1541), (19, 3)])
@pytest.mark.parametrize("deltas_dtype", [np.float64, np.float32])
def test_rule_state_keeps_an_exact_copy_of_the_rounds_updates(backend, m, d, deltas_dtype):
    """The next round's window holds this round's updates bit for bit, in float64, and not the
    caller's array (a client writes its next update into the same buffer): on numba the Gram
    pass writes the copy (six-row panels, four-row tiles and single rows, column blocks and a
    partial last one); a later round that reads it equals the numpy rule's to round-off."""
    rng = np.random.default_rng(m * d)
    D = rng.normal(size=(m, d)).astype(deltas_dtype)
    losses = rng.random(m)
    theta = np.zeros(d)
    rule = fedfv(tau=1, backend=backend)
    ids = np.arange(m)
    agg = rule.step(theta, reports(D, losses, ids, m + 3), rule.init(theta, m + 3))
    h = agg.state.history
    np.testing.assert_array_equal(h.updates, D.astype(np.float64))
    assert h.updates.dtype == np.float64 and not np.shares_memory(h.updates, D)
    np.testing.assert_array_equal(h.client_ids, ids)
    D[...] = 0.0  # the caller reuses its buffer: the state does not move
    want = np.random.default_rng(m * d).normal(size=(m, d)).astype(deltas_dtype)
    np.testing.assert_array_equal(h.updates, want.astype(np.float64))
    # round 1: three new clients, the window is round 0's updates
    D1 = -rng.normal(size=(3, d)) + h.updates[: min(m, 3)].mean(axis=0)
    r1 = reports(D1, rng.random(3), [m, m + 1, m + 2], m + 3)
    got = rule.step(agg.params, r1, agg.state)
    ref = fedfv(tau=1).step(agg.params, r1, agg.state)
    np.testing.assert_allclose(got.params, ref.params, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got.info["history_clients"], ids)


def test_rule_init_reads_only_the_shape_of_params():
    """init builds an empty history of params' length; it does not read the values."""
    rule = fedfv()
    state = rule.init(np.full(3, np.nan), 2)
    assert state.num_clients == 2 and state.rounds == 0 and state.history.updates.shape == (0, 3)


def test_rule_checks_reports_before_the_values_of_params():
    """A round without the losses the loss order needs is refused as such, whatever params."""
    rule = fedfv()
    state = rule.init(np.zeros(2), 2)
    with pytest.raises(ValueError, match=r"this rule needs reports\.losses"):
        rule.step(np.full(2, np.nan), make_reports(np.eye(2), [1, 1]), state)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: fedfv(alpha=2.0), ValueError, r"^alpha must be <= 1\.0; got 2\.0$"),
        (lambda: fedfv(tau=-1), ValueError, r"^tau must be >= 0; got -1$"),
        (lambda: fedfv(order="size"), ValueError, r"^order must be one of"),
        (lambda: fedfv(variant="x"), ValueError, r"^variant must be one of"),
        (lambda: fedfv(method="fast"), ValueError, r"^method must be one of"),
        (lambda: fedfv(seed=-2), ValueError, r"^seed must be >= 0; got -2$"),
        (lambda: fedfv(rescale=1), TypeError, r"^rescale must be a bool; got int$"),
        (
            lambda: fedfv(method="vector", backend="numba"),
            ValueError,
            r"^backend='numba' needs method='gram'",
        ),
        (lambda: fedfv().init(np.zeros((2, 2)), 2), ValueError, r"^params must be 1-dim"),
        (lambda: fedfv().init(np.zeros(2), 0), ValueError, r"^num_clients must be >= 1; got 0$"),
        (
            lambda: fedfv().step(np.zeros(2), reports(np.eye(2), [0, 1], [0, 1], 2), ()),
            TypeError,
            r"^state must be the FedFVState that fedfv's init returns",
        ),
        (
            lambda: fedfv().step(
                np.zeros((1, 2)),
                reports(np.eye(2), [0, 1], [0, 1], 2),
                fedfv().init(np.zeros(2), 2),
            ),
            ValueError,
            r"^params must be 1-dim",
        ),
        (
            lambda: fedfv().step(
                np.array([np.nan, 0.0]),
                reports(np.eye(2), [0, 1], [0, 1], 2),
                fedfv().init(np.zeros(2), 2),
            ),
            ValueError,
            r"^params must be finite",
        ),
        (
            lambda: fedfv(tau=0).step(
                np.array([-1.5e308, 0.0]),
                reports(np.array([[1e308, 0.0]]), [1.0], [0], 1),
                fedfv().init(np.zeros(2), 1),
            ),
            ValueError,
            r"^params minus the FedFV step overflows float64 \(both are near 1\.8e308 in",
        ),
    ],
)
def test_rule_errors_name_the_argument_and_the_bound(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_cuda_backend_with_a_history_is_the_numpy_answer():
    """On backend="cuda" the Gram matrix of [D; H] is one kernel (here numba's simulator): the
    same step, history weights and counts as NumPy's, with an external projection."""
    rng = np.random.default_rng(1)
    D = rng.normal(size=(3, 4))
    hist = FedFVHistory(rng.normal(size=(2, 4)), np.array([1, 1]), np.array([7, 8]))
    kw = dict(alpha=0.0, history=hist, round_index=2, tau=1)
    ref = fedfv_direction(D, [0.5, 1.0, 2.0], **kw)
    got = fedfv_direction(D, [0.5, 1.0, 2.0], backend="cuda", **kw)
    assert ref.external_projections == 1
    assert got.external_projections == ref.external_projections
    assert_close(got.direction, ref.direction)
    assert_close(got.history_weights, ref.history_weights)


# ---------------------------------------------------------------- found by mutation testing
def test_keep_count_checks_num_clients_naming_it():
    for bad, exc in ((0, ValueError), (-3, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match=r"^num_clients must be"):
            fedfv_keep_count(bad, 0.1)
    with pytest.raises(ValueError) as info:
        fedfv_keep_count(0, 0.1)
    assert str(info.value) == "num_clients must be >= 1; got 0"


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_the_paper_window_never_holds_this_round(method):
    """The α = 0 round above leaves δ3 in conflict with ḡ (ḡ·δ3 = −1/24). With τ = 1 in round
    t = 1 the paper's window is round 0 alone, which holds no update here: nothing external is
    found, ḡ stays (1/12, −1/12). This round's clients are never a group of Alg. 3 (they
    would project δ3 out of ḡ)."""
    D = np.array([[0.0, -0.5], [-0.5, -0.5], [0.5, 1.0]])
    for t in (1, 2, 5):
        res = fedfv_direction(
            D, [0.0, 1.0, 2.0], alpha=0.0, rescale=False, method=method, tau=1, round_index=t
        )
        assert res.external_conflicts == 0 and res.external_projections == 0
        assert_close(res.direction, np.array([1.0, -1.0]) / 12)
        assert res.conflicts_remaining == 1


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_a_zero_history_update_in_the_window_is_ignored(method):
    """A client whose latest update was exactly 0, in the window, beside this round's updates
    (squared norms below 2^55, so the zero rows are looked at one by one): it has norm 0, is
    never a conflict, and the round equals the round without it."""
    D = np.array([[1.0, 0.0], [-1.0, 0.5], [0.3, -1.0]])
    H = FedFVHistory(np.zeros((2, 2)), np.array([0, 0]), np.array([7, 8]))
    with_zero = fedfv_direction(D, [1.0, 2.0, 3.0], tau=1, round_index=1, history=H, method=method)
    alone = fedfv_direction(D, [1.0, 2.0, 3.0], tau=1, round_index=1, method=method)
    np.testing.assert_array_equal(with_zero.direction, alone.direction)
    np.testing.assert_array_equal(with_zero.history_weights, [0.0, 0.0])
    assert with_zero.external_conflicts == 0


def _tiny_history_case():
    # This round's updates near 1e-100 and a conflicting history update near 1e-170: its square
    # (1e-340) underflows to 0, yet relative to the round it is an ordinary update.
    D = np.array([[1.0, 0.0], [0.2, 1.0]]) * 1e-100
    H = FedFVHistory(np.array([[-1.0, -0.3]]) * 1e-170, np.array([0]), np.array([5]))
    return D, H


def _mixed_magnitude_case():
    # One update of squared norm 121 (below 2^55) and one whose squared norm (about 2^-1018)
    # is a sum of a normal square and 63 subnormal ones, each rounded: only the scaled
    # computation keeps its digits.
    row1 = np.full(64, 1.5 * 2.0**-537)
    row1[0] = -(2.0**-509)
    row0 = np.zeros(64)
    row0[0] = 11.0
    return np.array([row0, row1]), None


@pytest.mark.parametrize("method", ["gram", "vector"])
@pytest.mark.parametrize("case", [_tiny_history_case, _mixed_magnitude_case])
def test_direction_is_exactly_homogeneous_where_squares_underflow(method, case):
    """g(2^k U) = 2^k g(U) bit for bit, C and the counts unchanged: at k = 300 every square is
    an ordinary number and the plain computation is exact to rounding; at k = 0 some squares
    under- or lose digits, and the direction must come from the same scaled updates."""
    D, H = case()
    kw = {"tau": 1, "round_index": 1} if H is not None else {}

    def run(k):
        hist = None if H is None else H._replace(updates=np.ldexp(H.updates, k))
        return fedfv_direction(
            np.ldexp(D, k), [1.0, 2.0], alpha=0.0, history=hist, method=method, **kw
        )

    ref = run(300)
    if H is not None:
        assert ref.external_conflicts == 1  # the tiny old update is a real conflict
    for k in (0, -20, 300, 600):
        got = run(k)
        np.testing.assert_array_equal(got.direction, np.ldexp(ref.direction, k - 300))
        np.testing.assert_array_equal(got.coefficients, ref.coefficients)
        np.testing.assert_array_equal(got.history_weights, ref.history_weights)
        assert got[6:] == ref[6:]


@pytest.mark.parametrize("method", ["gram", "vector"])
@pytest.mark.parametrize("k", [-40, 0, 500])
def test_the_zero_threshold_is_2_to_the_minus_1022_of_the_largest_square(method, k):
    """δ0 = (1, 0) and δ1 = (−s, 0), scaled by 2^k: ‖δ1‖² = s² counts as zero exactly when it
    is below 2^-1022 P, P = 1 the largest square. Non-zero, δ1 conflicts with δ0 and each
    projection removes the other's whole update (g̃0 = δ0 − (δ0·δ1/s²) δ1 = 0, likewise g̃1):
    ḡ = 0. Zero, δ1 is neither projected nor a target: ḡ = (δ0 + δ1)/2 = (½, 0) to rounding."""
    for c, zero in ((0.74, True), (0.999, True), (1.0, False), (1.5, False), (1.99, False)):
        s = math.sqrt(c) * 2.0**-511
        if c == 1.0:
            s = 2.0**-511  # s² = 2^-1022 exactly: the threshold itself counts as non-zero
        D = np.ldexp(np.array([[1.0, 0.0], [-s, 0.0]]), k)
        res = fedfv_direction(D, [1.0, 2.0], alpha=0.0, rescale=False, method=method)
        want = np.ldexp(np.array([0.5, 0.0]), k) if zero else np.zeros(2)
        np.testing.assert_array_equal(res.direction, want, err_msg=f"c = {c}")
        assert res.projections == (0 if zero else 2)


def _one_old(u, D):
    """fedfv_direction in round 1, τ = 1, with one old update u (from round 0)."""
    H = FedFVHistory(np.array([u], dtype=float), np.array([0]), np.array([9]))
    return lambda method: fedfv_direction(
        np.array(D, dtype=float), np.arange(len(D), dtype=float), alpha=0.0, tau=1,
        round_index=1, history=H, method=method, rescale=False,
    )  # fmt: skip


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_an_external_conflict_is_strictly_below_minus_rho_times_the_scales(method):
    """Alg. 3's test is u·ḡ < −ρ ‖u‖ Σ_l |c_l| ‖u_l‖. One client δ = (s, 0) (c = 1, scale s) and
    u = (−x, 1) (norm 1 as float64 rounds it): u·ḡ = −x s is a conflict iff x > ρ, whatever s."""
    for s in (1.0, 2.0, 0.25):
        for x, hit in ((RHO, False), (RHO / 2, False), (2 * RHO, True), (RHO * 1.5, True)):
            res = _one_old([-x, 1.0], [[s, 0.0]])(method)
            assert res.external_conflicts == int(hit), (s, x)


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_an_old_update_subnormal_relative_to_the_round_is_never_a_conflict(method):
    """u = (−1, −0.3)·2^-520: ‖u‖² is below 2^-1022 P (P the largest square, here 1): it counts
    as zero, so it is no conflict although u·ḡ < 0 (projecting on it would remove ḡ's whole
    component along u)."""
    res = _one_old(np.ldexp([-1.0, -0.3], -520), [[1.0, 0.0], [0.2, 1.0]])(method)
    assert res.external_conflicts == 0
    np.testing.assert_array_equal(res.history_weights, [0.0])
    assert_close(res.direction, np.array([0.6, 0.5]))


_D3 = np.array([[1.0, 0.0], [-1.0, 0.5], [0.3, -1.0]])
_L3 = [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: fedfv_order(0, _L3), ValueError, "num_clients must be >= 1; got 0"),
        (
            lambda: fedfv_order(3, _L3, "bad"),
            ValueError,
            "order must be one of 'loss', 'reverse', 'random'; got 'bad'",
        ),
        (lambda: fedfv_order(3, None, "random", -1), ValueError, "seed must be >= 0; got -1"),
        (
            lambda: fedfv_order(3, None, "random", 0, -1),
            ValueError,
            "round_index must be >= 0; got -1",
        ),
        (lambda: fedfv_order(3, [1.0, 2.0]), ValueError, "losses must have shape (3,); got (2,)"),
        (
            lambda: fedfv_direction(_D3, _L3, method="bad"),
            ValueError,
            "method must be one of 'gram', 'vector'; got 'bad'",
        ),
        (
            lambda: fedfv_direction(_D3, _L3, method="vector", backend="numba"),
            ValueError,
            "backend='numba' needs method='gram': the vector method is the readable "
            "specification and runs only on backend='numpy'",
        ),
        (
            lambda: fedfv_direction(_D3[0], _L3),
            ValueError,
            "deltas must be 2-dimensional; got shape (2,)",
        ),
        (
            lambda: fedfv_direction(np.zeros((0, 2)), []),
            ValueError,
            "deltas must have at least 1 entry along its first axis; got shape (0, 2)",
        ),
        (
            lambda: fedfv_direction(_D3, _L3, variant="bad"),
            ValueError,
            "variant must be one of 'paper', 'flgo'; got 'bad'",
        ),
        (
            lambda: fedfv_direction(_D3, _L3, rescale=1),
            TypeError,
            "rescale must be a bool; got int",
        ),
        (
            lambda: fedfv_direction(_D3, _L3, round_index=-1),
            ValueError,
            "round_index must be >= 0; got -1",
        ),
        (lambda: fedfv_direction(_D3, _L3, tau=-1), ValueError, "tau must be >= 0; got -1"),
        (lambda: fedfv_direction(_D3, _L3, seed=-1), ValueError, "seed must be >= 0; got -1"),
        (
            lambda: fedfv_direction(_D3, _L3, client_ids=[0, 1, -1]),
            ValueError,
            "client_ids must be >= 0; got minimum -1",
        ),
        (
            lambda: fedfv_direction(_D3, _L3, client_ids=[0, 1]),
            ValueError,
            "client_ids must have shape (3,); got (2,)",
        ),
    ],
)
def test_order_and_direction_errors_are_exact(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


def test_order_defaults_and_a_stable_sort_of_many_ties():
    np.testing.assert_array_equal(
        fedfv_order(7, order="random"), np.random.default_rng((0, 0)).permutation(7)
    )
    # 100 losses in two tied groups: a stable sort keeps arrival order inside each (an
    # unstable sort, NumPy's default introsort, does not at this size)
    losses = np.tile([2.0, 1.0], 50)
    want = np.concatenate([np.arange(1, 100, 2), np.arange(0, 100, 2)])
    np.testing.assert_array_equal(fedfv_order(100, losses), want)


def test_direction_defaults_seed_0_tau_0_and_the_round_index_of_the_random_order():
    rng = np.random.default_rng(3)
    D = rng.standard_normal((6, 4))
    kw = {"order": "random", "alpha": 0.0}
    base = fedfv_direction(D, **kw)
    assert_close(base.direction, fedfv_direction(D, seed=0, **kw).direction)
    np.testing.assert_array_equal(base.order, fedfv_order(6, None, "random", 0, 0))
    r1 = fedfv_direction(D, round_index=1, **kw)
    np.testing.assert_array_equal(r1.order, fedfv_order(6, None, "random", 0, 1))
    assert not np.array_equal(r1.order, base.order)
    # τ = 0 by default: a conflicting old update in the round-0 window is not looked at
    H = FedFVHistory(-r1.direction[None, :], np.array([0]), np.array([9]))  # opposes ḡ
    with_h = fedfv_direction(D, round_index=1, history=H, **kw)
    np.testing.assert_array_equal(with_h.direction, r1.direction)
    assert fedfv_direction(D, round_index=1, history=H, tau=1, **kw).external_conflicts == 1


def test_direction_keeps_the_flgo_variants_count():
    # m = 11, α = 0.7: (m − 1)(1 − α) = 3.0000000000000004 in float64; the paper variant
    # snaps it to 3 (keeps 8), FLGo's ceil gives 4 (keeps 7): the kept set follows the variant
    D = np.random.default_rng(0).standard_normal((11, 3))
    losses = np.arange(11.0)
    assert fedfv_direction(D, losses, alpha=0.7).kept.sum() == 8
    assert fedfv_direction(D, losses, alpha=0.7, variant="flgo").kept.sum() == 7


def test_keep_count_snap_is_relative_to_the_count_and_at_least_1e9():
    # x = (m − 1)(1 − α) is snapped down by 1e-9·max(1, x) before the ceiling (module docstring):
    # 100 + 5e-10 lies within 1e-9·x of 100 (snapped: ⌈x⌉ = 100, keep 1001 − 100), where a snap
    # of 1e-9/x would not reach it; 1 + 1.5e-9 lies beyond 1e-9·max(1, x) of 1 (⌈x⌉ = 2).
    assert fedfv_keep_count(1001, 1 - 100.0000000005 / 1000) == 901
    assert fedfv_keep_count(3, (1 - 1.5e-9) / 2) == 1
    assert fedfv_keep_count(1001, 1 - 100.0000000005 / 1000, "flgo") == 900  # literal: no snap


def test_keep_count_names_alpha_and_variant_exactly():
    with pytest.raises(ValueError) as info:
        fedfv_keep_count(5, 1.5)
    assert str(info.value) == "alpha must be <= 1.0; got 1.5"
    with pytest.raises(ValueError) as info:
        fedfv_keep_count(5, 0.5, "x")
    assert str(info.value) == "variant must be one of 'paper', 'flgo'; got 'x'"


@pytest.mark.parametrize("method", ["gram", "vector"])
def test_a_subnormal_squared_norm_that_counts_is_computed_exactly(method):
    # ‖δ_1‖² ≈ 2^-1060 is subnormal (14 bits left), yet 2^-1000 of the largest (2^-60), so δ_1
    # is no zero update and δ_0 is projected onto it with coefficient δ_1·g/‖δ_1‖²: computed
    # plainly it is off by 1e-6; fedfv_direction scales the updates first. The reference runs on
    # the updates times 2^500, where every square is normal (the direction is homogeneous).
    D = np.array([[1.0, 0.3], [-0.7, 1.0]])
    D[0] *= 2.0**-30
    D[1] *= 2.0**-530
    losses = np.array([1.0, 2.0])
    got = fedfv_direction(D, losses, alpha=0.0, method=method)
    ref = fedfv_direction(np.ldexp(D, 500), losses, alpha=0.0, method=method)
    assert got.projections == 2
    np.testing.assert_allclose(got.direction, np.ldexp(ref.direction, -500), rtol=1e-13)


def test_a_direction_beyond_float64_is_one_clear_error_and_no_warning():
    # nine updates (1.7, 1.7)·1e308 and one (0.5, −1.7)·1e308 in conflict with them: the mean
    # has length 2.1e308 and the projected ḡ points along the first axis, so g = ḡ ‖mean‖/‖ḡ‖
    # has a first entry of 2.0e308: the step itself is not representable
    D = np.array([[1.7, 1.7]] * 9 + [[0.5, -1.7]]) * 1e308
    for method in ("gram", "vector"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an overflow is the error below, not a warning
            with pytest.raises(ValueError) as info:
                fedfv_direction(D, np.arange(10.0), alpha=0.0, method=method)
        assert str(info.value) == (
            "deltas are too large: the FedFV step (as long as the mean update) has entries "
            "beyond float64's range (about 1.8e308)"
        )


@pytest.mark.parametrize("k", [-1000, -540, 540, 1020])
def test_updates_out_of_the_squares_range_warn_nothing(k):
    # the first, plain attempt over- or underflows its squares and is redone on scaled updates:
    # nothing of that may reach the user as a RuntimeWarning (the reference: the same updates
    # times 2^-k, exactly, all squares in range)
    D = np.ldexp(np.array([[1.0, 0.5], [-0.8, 0.3], [0.2, -1.0]]), k)
    for method in ("gram", "vector"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            res = fedfv_direction(D, [0.3, 0.1, 0.2], alpha=0.0, method=method)
        ref = fedfv_direction(np.ldexp(D, -k), [0.3, 0.1, 0.2], alpha=0.0, method=method)
        np.testing.assert_allclose(np.ldexp(res.direction, -k), ref.direction, rtol=1e-14)


def test_two_old_updates_of_one_round_are_two_conflicts_and_one_projection():
    # Alg. 3 projects ḡ once per round of the window, onto the sum of its conflicting updates:
    # ḡ = (1, 0); old h₁ = (−1, −1), h₂ = (−1, 0.5), both from round 1, both h·ḡ = −1 < 0
    D = np.array([[1.0, 0.0]])
    hist = FedFVHistory(np.array([[-1.0, -1.0], [-1.0, 0.5]]), np.array([1, 1]), np.array([3, 4]))
    for method in ("gram", "vector"):
        res = fedfv_direction(D, [1.0], round_index=2, history=hist, tau=1, method=method,
                              rescale=False)  # fmt: skip
        assert (res.external_conflicts, res.external_projections) == (2, 1)
        g_con = np.array([-2.0, -0.5])
        assert_close(res.direction, D[0] - (D[0] @ g_con) / (g_con @ g_con) * g_con)


def test_a_cancelled_direction_leaves_no_conflict_counted():
    # δ and −δ project each other to 0: ḡ = 0, g = 0, and nothing remains in conflict with it
    D = np.array([[1.0, 0.0], [-1.0, 0.0]])
    for method in ("gram", "vector"):
        res = fedfv_direction(D, [1.0, 2.0], alpha=0.0, method=method)
        assert np.array_equal(res.direction, np.zeros(2))
        assert res.conflicts_remaining == 0 and isinstance(res.conflicts_remaining, int)
