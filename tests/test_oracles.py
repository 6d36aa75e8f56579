"""The cvxpy oracles against answers known in closed form (fairagg.oracles).

The oracles are the independent check of the exact solvers, so they are tested here only against
analytic answers and hand-computed cases, never against fairagg.simplex.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fairagg import oracles
from fairagg.simplex import kl_step

# OSQP with eps 1e-12 and polishing: exact to ~1e-15 once polishing finds the active set, ~1e-10
# from the ADMM iterates alone; these easy cases must be well inside 1e-9.
QP_ATOL = 1e-9
# Clarabel on exponential cones: 1e-12 to 1e-9 on these mild cases; 1e-6 leaves room for the
# looser rungs of the oracles' tolerance ladder (down to Clarabel's default 1e-8).
CONE_ATOL = 1e-6


def sort_projection(y, total=1.0):
    """Euclidean projection onto {x ≥ 0, Σx = total} by the sort-based closed form."""
    u = np.sort(y)[::-1]
    css = np.cumsum(u) - total
    j = np.arange(1, y.size + 1)
    rho = np.nonzero(u - css / j > 0)[0][-1]
    return np.maximum(y - css[rho] / (rho + 1), 0.0)


def softmax(z):
    e = np.exp(z - z.max())  # max-shift: no overflow
    return e / e.sum()


def logsumexp(z):
    m = z.max()
    return m + np.log(np.sum(np.exp(z - m)))


def assert_result(res, solver):
    assert isinstance(res, oracles.OracleResult)
    assert isinstance(res.x, np.ndarray) and res.x.dtype == np.float64
    assert isinstance(res.value, float)
    assert res.status == "optimal"
    assert res.solver == solver


# --------------------------------------------------------------------------------------------
# Euclidean projections
# --------------------------------------------------------------------------------------------


def test_projection_of_a_simplex_point_is_the_point():
    y = np.array([0.1, 0.2, 0.3, 0.4])
    res = oracles.project_simplex(y)
    assert_result(res, "OSQP")
    np.testing.assert_allclose(res.x, y, rtol=0, atol=QP_ATOL)
    assert abs(res.value) <= QP_ATOL


@pytest.mark.parametrize("total", [1.0, 2.5])
def test_projection_of_a_constant_vector_is_uniform(total):
    y = np.full(5, 3.7)
    res = oracles.project_simplex(y, total)
    np.testing.assert_allclose(res.x, np.full(5, total / 5), rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 0.5 * np.sum((total / 5 - y) ** 2), rtol=QP_ATOL)


def test_projection_of_a_big_gap_vector_is_a_vertex():
    y = np.array([0.5, 10.0, -1.0, 0.0])
    res = oracles.project_simplex(y)
    np.testing.assert_allclose(res.x, [0.0, 1.0, 0.0, 0.0], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 0.5 * np.sum((res.x - y) ** 2), rtol=QP_ATOL)


def test_projection_equals_sort_closed_form():
    y = np.random.default_rng(0).standard_normal(12)
    res = oracles.project_simplex(y)
    np.testing.assert_allclose(res.x, sort_projection(y), rtol=0, atol=QP_ATOL)


def test_projection_edge_cases():
    np.testing.assert_allclose(oracles.project_simplex([-3.0]).x, [1.0], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(oracles.project_simplex([4.0], 2.0).x, [2.0], rtol=0, atol=QP_ATOL)
    # total = 0 (the single point 0) is refused, as by the exact simplex.project_simplex that
    # this oracle checks.
    with pytest.raises(ValueError, match="total must be > 0"):
        oracles.project_simplex([1.0, 2.0], 0.0)


def test_box_simplex_with_equal_bounds_is_uniform():
    k = 7  # 7 * (1/7) is not exactly 1 in floating point: the emptiness check must allow for it
    res = oracles.project_box_simplex(np.arange(k, dtype=float), 1 / k, 1 / k)
    np.testing.assert_allclose(res.x, np.full(k, 1 / k), rtol=0, atol=QP_ATOL)


@pytest.mark.parametrize(
    ("y", "lower", "upper", "want"),
    [
        # p_i = clip(y_i − τ, lower, upper) with τ chosen so that Σp = 1, solved by hand.
        ([5.0, 0.0, 0.0], 0.0, 0.5, [0.5, 0.25, 0.25]),
        ([1.0, 0.0, 0.0], 0.2, np.inf, [0.6, 0.2, 0.2]),
        ([1.0, 0.2, 0.0], 0.0, [0.3, np.inf, np.inf], [0.3, 0.45, 0.25]),
    ],
)
def test_box_simplex_hand_computed(y, lower, upper, want):
    res = oracles.project_box_simplex(np.array(y), lower, upper)
    np.testing.assert_allclose(res.x, want, rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 0.5 * np.sum((np.array(want) - y) ** 2), rtol=QP_ATOL)


def test_box_simplex_without_bounds_is_the_simplex_projection():
    y = np.random.default_rng(1).standard_normal(9)
    res = oracles.project_box_simplex(y, total=3.0)
    np.testing.assert_allclose(res.x, sort_projection(y, 3.0), rtol=0, atol=QP_ATOL)


# --------------------------------------------------------------------------------------------
# QPs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "y", [[0.1, 0.2, 0.3, 0.4], [3.7, 3.7, 3.7, 3.7], [0.5, 10.0, -1.0, 0.0], [0.9, -0.4, 0.3, 0.8]]
)
def test_qp_with_identity_is_the_projection(y):
    y = np.array(y)
    res = oracles.simplex_qp(np.eye(4), -y)
    want = sort_projection(y)
    np.testing.assert_allclose(res.x, want, rtol=0, atol=QP_ATOL)
    # ½‖p‖² − yᵀp, of size O(1).
    np.testing.assert_allclose(res.value, 0.5 * want @ want - y @ want, rtol=0, atol=QP_ATOL)


def test_qp_uses_the_symmetric_part():
    y = np.array([0.9, -0.4, 0.3])
    skew = np.array([[0.0, 2.0, -1.0], [-2.0, 0.0, 3.0], [1.0, -3.0, 0.0]])
    res = oracles.simplex_qp(np.eye(3) + skew, -y)
    np.testing.assert_allclose(res.x, sort_projection(y), rtol=0, atol=QP_ATOL)


def test_qp_with_zero_matrix_is_the_linear_program():
    # A = 0 is PSD and singular: min bᵀp over the simplex is the vertex of the smallest b_i.
    res = oracles.simplex_qp(np.zeros((3, 3)), np.array([3.0, 1.0, 2.0]))
    np.testing.assert_allclose(res.x, [0.0, 1.0, 0.0], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 1.0, rtol=0, atol=QP_ATOL)


def test_qp_with_box_and_total():
    # A = I, b = −y, box [0, 0.5], total 1.5 on y = (5, 0, 0): p = (0.5, 0.5, 0.5).
    res = oracles.simplex_qp(np.eye(3), -np.array([5.0, 0.0, 0.0]), 0.0, 0.5, 1.5)
    np.testing.assert_allclose(res.x, [0.5, 0.5, 0.5], rtol=0, atol=QP_ATOL)


def test_qp_k1():
    res = oracles.simplex_qp([[2.0]], [1.0])
    np.testing.assert_allclose(res.x, [1.0], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 2.0, rtol=0, atol=QP_ATOL)


def test_a_norm_projection():
    y = np.array([0.1, 0.2, 0.3, 0.4])
    res = oracles.a_norm_projection(y, np.diag([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(res.x, y, rtol=0, atol=QP_ATOL)
    assert abs(res.value) <= QP_ATOL
    # ½(p0 − 1)² + 2(p1 − 1)² on p0 + p1 = 1: stationarity p0 − 1 = 4(p1 − 1) gives p = (0.2, 0.8).
    res = oracles.a_norm_projection([1.0, 1.0], np.diag([1.0, 4.0]))
    np.testing.assert_allclose(res.x, [0.2, 0.8], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 0.5 * 0.64 + 2 * 0.04, rtol=0, atol=QP_ATOL)
    y = np.array([0.9, -0.4, 0.3])
    res = oracles.a_norm_projection(y, np.eye(3))
    np.testing.assert_allclose(res.x, sort_projection(y), rtol=0, atol=QP_ATOL)


# --------------------------------------------------------------------------------------------
# Min-norm point
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [([1.0, 1.0], [-1.0, 2.0]), ([1.0, 0.0], [2.0, 0.0]), ([3.0, -1.0], [-2.0, 0.5])],
)
def test_min_norm_point_of_two_points(a, b):
    a, b = np.array(a), np.array(b)
    # min over λ ∈ [0, 1] of ‖λa + (1 − λ)b‖²: λ = clip(⟨b, b − a⟩ / ‖b − a‖², 0, 1).
    lam = np.clip(b @ (b - a) / ((b - a) @ (b - a)), 0.0, 1.0)
    point = lam * a + (1 - lam) * b
    res = oracles.min_norm_point(np.stack([a, b]))
    assert_result(res, "OSQP")
    np.testing.assert_allclose(res.x, [lam, 1 - lam], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, point @ point, rtol=0, atol=QP_ATOL)


def test_min_norm_point_with_origin_in_the_hull():
    # λ is not unique here (the v_k are affinely dependent): compare the point and the value.
    V = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    res = oracles.min_norm_point(V)
    np.testing.assert_allclose(V.T @ res.x, 0.0, rtol=0, atol=QP_ATOL)
    assert abs(res.value) <= QP_ATOL


def test_min_norm_point_single_vector_and_box():
    res = oracles.min_norm_point([[3.0, 4.0]])
    np.testing.assert_allclose(res.x, [1.0], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 25.0, rtol=QP_ATOL)
    # Unconstrained answer λ = (1, 0); the cap 0.5 forces (0.5, 0.5), point (1.5, 0).
    res = oracles.min_norm_point([[1.0, 0.0], [2.0, 0.0]], upper=0.5)
    np.testing.assert_allclose(res.x, [0.5, 0.5], rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(res.value, 2.25, rtol=QP_ATOL)


# --------------------------------------------------------------------------------------------
# Quadratic FTRL
# --------------------------------------------------------------------------------------------


def test_quadratic_ftrl_without_beta_is_a_projection():
    rng = np.random.default_rng(2)
    G = rng.standard_normal((5, 6))
    P = rng.dirichlet(np.ones(6), size=5)
    alpha = 0.7
    res = oracles.quadratic_ftrl(G, P, alpha, 0.0)
    # Σ⟨g, p⟩ + (α/2)‖p‖² = (α/2)‖p + G/α‖² + const, G the column sum.
    want = sort_projection(-G.sum(axis=0) / alpha)
    np.testing.assert_allclose(res.x, want, rtol=0, atol=QP_ATOL)
    np.testing.assert_allclose(
        res.x, oracles.project_simplex(-G.sum(axis=0) / alpha).x, rtol=0, atol=QP_ATOL
    )


@pytest.mark.parametrize(("variant", "u"), [("paper", 0.25), ("official", 1 / 3)])
def test_quadratic_ftrl_hand_computed(variant, u):
    # One round, g = (1, −1), p_1 = (½, ½), α = 2, β = 1, p = (u, 1 − u). Setting the derivative
    # to 0: paper 2u − 1 = −2/(α + 2β) = −½; official 2u − 1 = −2/(α + αβ + 2β) = −⅓.
    g, p1, alpha, beta = np.array([[1.0, -1.0]]), np.array([[0.5, 0.5]]), 2.0, 1.0
    res = oracles.quadratic_ftrl(g, p1, alpha, beta, variant)
    np.testing.assert_allclose(res.x, [u, 1 - u], rtol=0, atol=QP_ATOL)
    p = np.array([u, 1 - u])
    lin, sq = g[0] @ p, p @ p
    if variant == "paper":
        value = lin + alpha / 2 * sq + beta / 2 * (g[0] @ (p - p1[0])) ** 2
    else:
        value = lin + alpha / 2 * sq + beta / 2 * (alpha * sq + lin**2)
    np.testing.assert_allclose(res.value, value, rtol=0, atol=QP_ATOL)


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_quadratic_ftrl_edge_cases(variant):
    res = oracles.quadratic_ftrl(np.empty((0, 4)), np.empty((0, 4)), 1.0, 0.5, variant)
    np.testing.assert_allclose(res.x, np.full(4, 0.25), rtol=0, atol=QP_ATOL)
    res = oracles.quadratic_ftrl([[2.0], [-1.0]], [[1.0], [1.0]], 1.0, 0.5, variant)
    np.testing.assert_allclose(res.x, [1.0], rtol=0, atol=QP_ATOL)


# --------------------------------------------------------------------------------------------
# Exponential-cone oracles
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eta", [0.3, 1.0, 10.0])
def test_eg_step_closed_form(eta):
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(6))
    r = rng.standard_normal(6)
    res = oracles.eg_step(p, r, eta)
    assert_result(res, "CLARABEL")
    np.testing.assert_allclose(res.x, softmax(np.log(p) + r / eta), rtol=0, atol=CONE_ATOL)
    # min −⟨q, r⟩ + η KL(q ‖ p) = −η log Σ p_i exp(r_i / η), of size O(1).
    np.testing.assert_allclose(res.value, -eta * logsumexp(np.log(p) + r / eta), atol=CONE_ATOL)


def test_eg_step_on_a_face_and_k1():
    p = np.array([0.5, 0.0, 0.3, 0.2, 0.0])
    r = np.array([1.0, 50.0, -0.5, 0.2, 3.0])
    res = oracles.eg_step(p, r, 0.8)
    assert res.x[1] == 0.0 and res.x[4] == 0.0  # off the support: zero by construction
    with np.errstate(divide="ignore"):  # log 0 = −inf gives weight 0, as the closed form says
        want = softmax(np.log(p) + r / 0.8)
    np.testing.assert_allclose(res.x, want, rtol=0, atol=CONE_ATOL)
    res = oracles.eg_step([1.0], [2.0], 0.5)
    np.testing.assert_allclose(res.x, [1.0], rtol=0, atol=CONE_ATOL)
    np.testing.assert_allclose(res.value, -2.0, rtol=0, atol=CONE_ATOL)


@pytest.mark.parametrize("eta", [0.5, 2.0, 100.0])
def test_entropic_ftrl_is_softmax(eta):
    G = np.random.default_rng(4).standard_normal(7) * 2
    res = oracles.entropic_ftrl(G, eta)
    assert_result(res, "CLARABEL")
    np.testing.assert_allclose(res.x, softmax(-G / eta), rtol=0, atol=CONE_ATOL)
    # min ⟨G, q⟩ + η Σ q log q = −η log Σ exp(−G_i / η); |value| ≤ ~5 here.
    np.testing.assert_allclose(res.value, -eta * logsumexp(-G / eta), rtol=0, atol=CONE_ATOL)


def test_entropic_ftrl_k1():
    res = oracles.entropic_ftrl([3.0], 0.1)
    np.testing.assert_allclose(res.x, [1.0], rtol=0, atol=CONE_ATOL)
    np.testing.assert_allclose(res.value, 3.0, rtol=0, atol=CONE_ATOL)


def test_best_fixed_decision_one_round_is_the_best_vertex():
    r = np.array([[0.1, 0.5, -0.2]])
    res = oracles.best_fixed_decision(r)
    assert_result(res, "CLARABEL")
    np.testing.assert_allclose(res.x, [0.0, 1.0, 0.0], rtol=0, atol=CONE_ATOL)
    np.testing.assert_allclose(res.value, np.log(1.5), rtol=0, atol=CONE_ATOL)


def test_best_fixed_decision_symmetric_and_k1():
    # Symmetric in the two coordinates and strictly concave there: p = (½, ½), 1 + ⟨p, r_t⟩ = 1.25.
    res = oracles.best_fixed_decision([[1.0, -0.5], [-0.5, 1.0]])
    np.testing.assert_allclose(res.x, [0.5, 0.5], rtol=0, atol=CONE_ATOL)
    np.testing.assert_allclose(res.value, 2 * np.log(1.25), rtol=0, atol=CONE_ATOL)
    r = np.array([[0.5], [-0.9], [2.0]])
    res = oracles.best_fixed_decision(r)
    np.testing.assert_allclose(res.x, [1.0], rtol=0, atol=CONE_ATOL)
    np.testing.assert_allclose(res.value, np.sum(np.log1p(r)), rtol=0, atol=CONE_ATOL)


# --------------------------------------------------------------------------------------------
# Solvers and failures
# --------------------------------------------------------------------------------------------


def test_other_solver_and_options():
    y = np.array([0.9, -0.4, 0.3])
    res = oracles.project_simplex(y, solver="clarabel")
    assert res.solver == "CLARABEL"
    # Clarabel at gap 1e-12 on a QP: ~1e-11.
    np.testing.assert_allclose(res.x, sort_projection(y), rtol=0, atol=1e-8)
    res = oracles.project_simplex(y, eps_abs=1e-10, eps_rel=1e-10)
    np.testing.assert_allclose(res.x, sort_projection(y), rtol=0, atol=QP_ATOL)


def test_non_optimal_status_raises():
    y = np.random.default_rng(5).standard_normal(20)
    with pytest.raises(RuntimeError, match="status"):
        oracles.project_simplex(y, max_iter=1, polishing=False)


def test_package_does_not_import_oracles():
    code = "import sys, fairagg; sys.exit('fairagg.oracles' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

Y3 = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: oracles.project_simplex(np.ones((2, 2))), "y"),
        (lambda: oracles.project_simplex([]), "y"),
        (lambda: oracles.project_simplex([1.0, np.nan]), "y"),
        (lambda: oracles.project_simplex(Y3, -1.0), "total"),
        (lambda: oracles.project_box_simplex(Y3, 0.5, 0.4), "lower"),
        (lambda: oracles.project_box_simplex(Y3, 0.4), "lower"),
        (lambda: oracles.project_box_simplex(Y3, 0.0, 0.3), "upper"),
        (lambda: oracles.project_box_simplex(Y3, [0.0, 0.1]), "lower"),
        (lambda: oracles.project_box_simplex(Y3, 0.0, [1.0, np.nan, 1.0]), "upper"),
        (lambda: oracles.project_box_simplex(Y3, np.nan), "lower"),
        (lambda: oracles.simplex_qp(np.eye(2), Y3), "A"),
        (lambda: oracles.simplex_qp(-np.eye(3), Y3), "A"),
        (lambda: oracles.simplex_qp(np.eye(3), [1.0, np.inf, 0.0]), "b"),
        (lambda: oracles.min_norm_point(Y3), "vectors"),
        (lambda: oracles.min_norm_point(np.ones((2, 0))), "vectors"),
        (lambda: oracles.a_norm_projection(Y3, np.ones((3, 2))), "A"),
        (lambda: oracles.quadratic_ftrl(np.ones((2, 3)), np.ones((1, 3)), 1.0, 1.0), "decisions"),
        (lambda: oracles.quadratic_ftrl(np.ones((2, 3)), np.ones((2, 3)), 0.0, 1.0), "alpha"),
        (lambda: oracles.quadratic_ftrl(np.ones((2, 3)), np.ones((2, 3)), 1.0, -1.0), "beta"),
        (lambda: oracles.quadratic_ftrl(np.ones((2, 3)), np.ones((2, 3)), 1, 1, "x"), "variant"),
        (lambda: oracles.quadratic_ftrl(np.full((1, 2), np.nan), np.ones((1, 2)), 1, 1), "grads"),
        (lambda: oracles.eg_step(Y3, Y3, 0.0), "eta"),
        (lambda: oracles.eg_step(Y3, Y3, -1.0), "eta"),
        (lambda: oracles.eg_step([0.5, 0.6], [0.0, 0.0], 1.0), "p"),
        (lambda: oracles.eg_step([1.5, -0.5], [0.0, 0.0], 1.0), "p"),
        (lambda: oracles.eg_step(Y3, [0.0, 1.0], 1.0), "r"),
        (lambda: oracles.eg_step(Y3, [0.0, np.nan, 1.0], 1.0), "r"),
        (lambda: oracles.entropic_ftrl(Y3, 0.0), "eta"),
        (lambda: oracles.entropic_ftrl(np.ones((2, 2)), 1.0), "grad_sum"),
        (lambda: oracles.best_fixed_decision([[0.5, -1.0]]), "responses"),
        (lambda: oracles.best_fixed_decision([[0.5, 0.1], [0.0, -1.5]]), "responses"),
        (lambda: oracles.best_fixed_decision(np.empty((0, 3))), "responses"),
        (lambda: oracles.best_fixed_decision([[0.5, np.nan]]), "responses"),
        (lambda: oracles.project_simplex(Y3, solver="NO_SUCH_SOLVER"), "solver"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError, match="eta"):
        oracles.entropic_ftrl(Y3, "1.0")
    with pytest.raises(TypeError, match="solver"):
        oracles.project_simplex(Y3, solver=1)


def test_eg_step_oracle_retries_with_shorter_steps_where_clarabel_fails():
    # Clarabel's default run fails outright on this entropic problem (uniform p over 22 clients,
    # three non-zero responses); a shorter interior-point step solves it.
    p = np.full(22, 1 / 22)
    r = np.zeros(22)
    r[:3] = [-2.75, 2.61328125, -0.375]
    ref = oracles.eg_step(p, r, 1.0)
    np.testing.assert_allclose(ref.x, kl_step(p, r, 1.0), rtol=0, atol=np.sqrt(2 * CONE_ATOL))
