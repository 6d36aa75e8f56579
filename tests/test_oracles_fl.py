"""The federated cvxpy oracles: exact q-FFL and AFL optima of a logistic-regression model.

``oracles.qffl_optimum`` and ``oracles.afl_optimum`` are checked only against computations that
share nothing with cvxpy: the model's own NumPy loss and gradient (``model.loss``,
``model.grad``), ``qffl_objective``, a SciPy L-BFGS solve, and the q-FFL paper's Lemmas 6 and 7
(Li et al., ICLR 2020, Appendix). Softmax is invariant to adding a constant to every bias, so the
minimisers are not unique: every check compares objective values or stationarity, never θ.

Tolerances. Clarabel usually ends "almost solved" on the tighter rungs of the oracles' ladder and
returns its answer at its default tolerance 1e-8 (see the oracles' docstrings). Measured on 60
random problems like these: values within ~3e-8 (q ≤ 1) and ~1e-7 (q = 5) relative of the true
optimum; f_q at the returned θ within ~5e-9 relative of an L-BFGS optimum; gradients at the
returned θ up to ~1e-4 of their scale (an objective accurate to ε leaves a gradient of order
√ε). The tolerances below sit five (values) to a hundred (f_q at θ) times above the worst
values measured.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairagg import oracles
from fairagg.models import MLP, LogisticRegression
from fairagg.rules.qffl import qffl_objective
from tests.strategies import finite_floats

#: Relative error of a returned value (q ≤ 1; times q + 1 beyond, see ``value_rtol``).
VALUE_RTOL = 1e-7
#: ‖gradient at the returned θ‖ / its scale (see ``gradient_scale``): worst measured ~1e-4.
STATIONARITY_RTOL = 1e-3
#: f_q at the returned θ against an L-BFGS optimum, relative: worst measured ~5e-9.
ARGMIN_RTOL = 1e-7


def value_rtol(q):
    """Tolerance on ``value``: s_k ≥ F_k(θ) holds to ~1e-8 relative, raised to the power q + 1."""
    return VALUE_RTOL * (q + 1)


# --------------------------------------------------------------------------------------------
# Data and the independent NumPy side
# --------------------------------------------------------------------------------------------


def make_problem(seed, *, K=None, p=None, C=None, l2=None):
    """A small federated problem ``(model, X, y, offsets)`` with heterogeneous clients.

    K = 2..5 clients of 5..15 rows, p = 2..4 features, C = 2..3 classes, l2 in [0.05, 1]. Each
    client has its own feature shift and its own labelling model (plus label noise), so that the
    clients' losses differ at every θ. Every class occurs in the data, so the optimum exists.
    """
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 6)) if K is None else K
    p = int(rng.integers(2, 5)) if p is None else p
    C = int(rng.integers(2, 4)) if C is None else C
    l2 = float(rng.uniform(0.05, 1.0)) if l2 is None else l2
    sizes = rng.integers(5, 16, size=K)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    X = np.empty((offsets[-1], p))
    y = np.empty(offsets[-1], dtype=np.int64)
    for k in range(K):
        rows = slice(offsets[k], offsets[k + 1])
        X[rows] = rng.normal(size=(sizes[k], p)) + 1.5 * rng.normal(size=p)
        W = rng.normal(size=(C, p))
        y[rows] = np.argmax(X[rows] @ W.T + rng.gumbel(size=(sizes[k], C)), axis=1)
    y[:C] = np.arange(C)  # every class occurs
    return LogisticRegression(p, C, l2=l2), X, y, offsets


def client_losses_grads(model, theta, X, y, offsets):
    """F_k(θ) and ∇F_k(θ) of every client from the model's NumPy reference, shapes (K,), (K, d)."""
    K = offsets.size - 1
    parts = [(X[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]]) for k in range(K)]
    losses = np.array([model.loss(theta, Xk, yk) for Xk, yk in parts])
    grads = np.array([model.grad(theta, Xk, yk) for Xk, yk in parts])
    return losses, grads


def normalised(weights, K):
    return np.full(K, 1.0 / K) if weights is None else np.asarray(weights) / np.sum(weights)


def qffl_value_and_grad(model, theta, X, y, offsets, q, weights=None):
    """f_q(θ) = Σ p_k F_k^{q+1}/(q+1) and its gradient Σ p_k F_k^q ∇F_k."""
    L, G = client_losses_grads(model, theta, X, y, offsets)
    pk = normalised(weights, L.size)
    return qffl_objective(L, q, weights), (pk * L**q) @ G


def gradient_scale(model, theta, X, y, offsets, coef):
    """Scale of a stationarity residual ‖Σ_k c_k ∇F_k(θ)‖ with coefficients c_k ≥ 0.

    The larger of Σ_k c_k ‖∇F_k(θ)‖ (the size of the terms that cancel at the optimum) and the
    same residual at θ = 0 (the start of any descent method), so that neither clients that are
    nearly optimal on their own nor a nearly optimal θ = 0 make the scale vanish.
    """
    _, G = client_losses_grads(model, theta, X, y, offsets)
    _, G0 = client_losses_grads(model, model.init_params(), X, y, offsets)
    return max(float(coef @ np.linalg.norm(G, axis=1)), float(np.linalg.norm(coef @ G0)))


def lbfgs_qffl(model, X, y, offsets, q, weights=None):
    """argmin f_q by SciPy's L-BFGS-B from θ = 0, checked to have converged."""
    res = scipy.optimize.minimize(
        lambda th: qffl_value_and_grad(model, th, X, y, offsets, q, weights),
        model.init_params(),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000, "maxcor": 30},
    )
    _, g = qffl_value_and_grad(model, res.x, X, y, offsets, q, weights)
    # The reference itself: a gradient of 1e-6 leaves f_q within ~1e-12 / l2 of the optimum.
    assert np.linalg.norm(g) <= 1e-6, res.message
    return res.x


# --------------------------------------------------------------------------------------------
# q-FFL
# --------------------------------------------------------------------------------------------

CASES = [
    pytest.param(0, None, id="seed0"),
    pytest.param(1, None, id="seed1"),
    pytest.param(2, "sizes", id="seed2-n_k-weights"),
    pytest.param(3, "random", id="seed3-random-weights"),
]


def case_weights(kind, offsets, seed):
    if kind is None:
        return None
    if kind == "sizes":
        return np.diff(offsets)  # the paper's p_k ∝ n_k, unnormalised on purpose
    return np.random.default_rng(seed + 100).uniform(0.1, 1.0, size=offsets.size - 1)


@pytest.mark.parametrize("q", [0, 1, 5])
@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_qffl_optimum_is_stationary_and_its_value_is_the_objective_at_x(seed, kind, q):
    model, X, y, offsets = make_problem(seed)
    weights = case_weights(kind, offsets, seed)
    res = oracles.qffl_optimum(model, X, y, offsets, q, weights=weights)
    assert isinstance(res, oracles.OracleResult)
    assert res.x.dtype == np.float64 and res.x.shape == (model.num_params,)
    assert isinstance(res.value, float)
    assert res.status == "optimal" and res.solver == "CLARABEL"

    L, _ = client_losses_grads(model, res.x, X, y, offsets)
    np.testing.assert_allclose(res.value, qffl_objective(L, q, weights), rtol=value_rtol(q))

    # ∇f_q = Σ p_k F_k^q ∇F_k, computed by the model's NumPy gradient: 0 at the optimum.
    coef = normalised(weights, L.size) * L**q
    _, g = qffl_value_and_grad(model, res.x, X, y, offsets, q, weights)
    scale = gradient_scale(model, res.x, X, y, offsets, coef)
    assert np.linalg.norm(g) <= STATIONARITY_RTOL * scale


@pytest.mark.parametrize("q", [0, 1, 5])
@pytest.mark.parametrize("seed", [4, 5, 6])
def test_qffl_optimum_agrees_with_lbfgs(seed, q):
    # q = 0 is the plain (unweighted) mean-loss minimiser; q > 0 the same check of eq. 2.
    model, X, y, offsets = make_problem(seed)
    res = oracles.qffl_optimum(model, X, y, offsets, q)
    ref = lbfgs_qffl(model, X, y, offsets, q)
    f_ref, _ = qffl_value_and_grad(model, ref, X, y, offsets, q)
    f_x, _ = qffl_value_and_grad(model, res.x, X, y, offsets, q)
    np.testing.assert_allclose(f_x, f_ref, rtol=ARGMIN_RTOL)
    np.testing.assert_allclose(res.value, f_ref, rtol=value_rtol(q))


def test_qffl_optimum_with_q_zero_minimises_the_mean_of_the_client_losses():
    # q = 0 with uniform p_k is min (1/K) Σ_k F_k: one more statement of it, as one model.loss
    # per client of the concatenated data, independent of qffl_objective.
    model, X, y, offsets = make_problem(7, K=3)
    res = oracles.qffl_optimum(model, X, y, offsets, 0.0)
    K = offsets.size - 1
    parts = [(X[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]]) for k in range(K)]
    ref = scipy.optimize.minimize(
        lambda th: (
            np.mean([model.loss(th, Xk, yk) for Xk, yk in parts]),
            np.mean([model.grad(th, Xk, yk) for Xk, yk in parts], axis=0),
        ),
        model.init_params(),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000},
    )
    np.testing.assert_allclose(res.value, ref.fun, rtol=VALUE_RTOL)


def test_qffl_optimum_ignores_the_scale_of_the_weights_and_drops_zero_weight_clients():
    model, X, y, offsets = make_problem(8, K=4)
    w = np.array([1.0, 2.0, 0.0, 3.0])
    a = oracles.qffl_optimum(model, X, y, offsets, 1.0, weights=w)
    b = oracles.qffl_optimum(model, X, y, offsets, 1.0, weights=10 * w)
    np.testing.assert_allclose(a.value, b.value, rtol=value_rtol(1))
    # Client 2 has weight 0: the optimum is that of the other three clients alone.
    keep = np.r_[offsets[0] : offsets[2], offsets[3] : offsets[4]]
    sub = np.array([0, offsets[1], offsets[2], offsets[2] + offsets[4] - offsets[3]])
    c = oracles.qffl_optimum(model, X[keep], y[keep], sub, 1.0, weights=w[[0, 1, 3]])
    np.testing.assert_allclose(a.value, c.value, rtol=value_rtol(1))


@st.composite
def federated_problems(draw):
    """``(model, X, y, offsets)``: K = 2..5 clients of 5..15 rows, p = 2..4, C = 2..3."""
    K = draw(st.integers(2, 5))
    p = draw(st.integers(2, 4))
    C = draw(st.integers(2, 3))
    l2 = draw(st.floats(0.05, 1.0))
    sizes = draw(hnp.arrays(np.int64, (K,), elements=st.integers(5, 15)))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    X = draw(hnp.arrays(np.float64, (n, p), elements=finite_floats(3.0), fill=st.nothing()))
    y = draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, C - 1)))
    y[:C] = np.arange(C)  # every class occurs, so the optimum exists
    return LogisticRegression(p, C, l2=l2), X, y, offsets


@settings(max_examples=15, deadline=None)
@given(problem=federated_problems())
def test_qffl_lemmas_6_and_7_q_one_is_fairer_than_q_zero(problem):
    """q-FFL Lemma 6 (variance) and Lemma 7 (cosine with 1) at the exact optima w₀*, w₁*.

    The proofs use only optimality: w₀* minimises mean F and w₁* minimises mean F², so
    mean F(w₁*) ≥ mean F(w₀*) and mean F²(w₁*) ≤ mean F²(w₀*); then
    Var = mean F² − (mean F)² and cos = mean F / √(mean F²) both move the fair way.
    Note: the paper's proof of Lemma 7 states the second inequality the wrong way round
    ("mean F²(w₁*) ≥ mean F²(w₀*)"); it is ≤, since w₁* minimises mean F², and ≤ is what the
    conclusion needs: a larger numerator over a smaller denominator. The conclusion holds.
    """
    model, X, y, offsets = problem
    L0, _ = client_losses_grads(
        model, oracles.qffl_optimum(model, X, y, offsets, 0).x, X, y, offsets
    )
    L1, _ = client_losses_grads(
        model, oracles.qffl_optimum(model, X, y, offsets, 1).x, X, y, offsets
    )
    # f_q at the returned θ is within ~5e-9 relative of the optimum (module docstring): each
    # inequality below holds up to a few times that, relative to the second moment.
    tol = 1e-7 * float(np.mean(L0**2))
    assert np.mean(L1) >= np.mean(L0) - tol  # w₀* minimises mean F
    assert np.mean(L1**2) <= np.mean(L0**2) + tol  # w₁* minimises mean F² (not ≥)
    assert np.var(L1) <= np.var(L0) + 3 * tol  # Lemma 6

    def cosine(L):
        return np.mean(L) / np.sqrt(np.mean(L**2))

    assert cosine(L1) >= cosine(L0) - 1e-7  # Lemma 7 (cosine in (0, 1])


# --------------------------------------------------------------------------------------------
# AFL
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [10, 11, 12, 13])
def test_afl_optimum_mixture_is_on_the_simplex_and_theta_minimises_the_mixture(seed):
    model, X, y, offsets = make_problem(seed)
    res = oracles.afl_optimum(model, X, y, offsets)
    assert isinstance(res, oracles.MinimaxResult)
    assert res.x.shape == (model.num_params,) and res.weights.shape == (offsets.size - 1,)
    assert res.status == "optimal" and res.solver == "CLARABEL"
    lam = res.weights
    # λ* is a point of the simplex (interior-point duals: not clipped, so up to round-off).
    assert lam.min() >= -1e-9
    assert abs(lam.sum() - 1.0) <= 1e-8

    L, G = client_losses_grads(model, res.x, X, y, offsets)
    # The value is attained at x: V* = max_k F_k(θ*).
    np.testing.assert_allclose(res.value, L.max(), rtol=VALUE_RTOL)
    # Complementary slackness: only clients at the maximum loss carry weight.
    assert np.all(lam * (res.value - L) <= 1e-7 * res.value)
    # Stationarity: θ* minimises Σ λ*_k F_k, i.e. Σ λ*_k ∇F_k(θ*) = 0 (model.grad).
    scale = gradient_scale(model, res.x, X, y, offsets, np.clip(lam, 0, None))
    assert np.linalg.norm(lam @ G) <= STATIONARITY_RTOL * scale


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_afl_weights_are_the_worst_case_mixture(seed):
    # Strong duality: min_θ Σ λ*_k F_k(θ) = V* (for any other λ of the simplex it is ≤ V*).
    model, X, y, offsets = make_problem(seed)
    res = oracles.afl_optimum(model, X, y, offsets)
    lam = np.clip(res.weights, 0.0, None)  # the oracle's round-off, see the test above
    mixed = oracles.qffl_optimum(model, X, y, offsets, 0, weights=lam)
    np.testing.assert_allclose(mixed.value, res.value, rtol=VALUE_RTOL)
    uniform = oracles.qffl_optimum(model, X, y, offsets, 0)
    assert uniform.value <= res.value * (1 + VALUE_RTOL)


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_afl_value_is_below_the_worst_loss_of_every_other_point(seed):
    # V* = min_θ max_k F_k(θ): no point tried has a smaller worst client loss.
    model, X, y, offsets = make_problem(seed)
    res = oracles.afl_optimum(model, X, y, offsets)
    rng = np.random.default_rng(seed)
    mean_opt = oracles.qffl_optimum(model, X, y, offsets, 0).x
    points = [model.init_params(), mean_opt]
    points += [mean_opt + rng.normal(scale=s, size=mean_opt.size) for s in (1e-3, 0.1, 1.0)]
    points += [res.x + rng.normal(scale=s, size=res.x.size) for s in (1e-4, 1e-2)]
    for theta in points:
        L, _ = client_losses_grads(model, theta, X, y, offsets)
        assert L.max() >= res.value * (1 - VALUE_RTOL)


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_qffl_worst_loss_tends_to_the_afl_value(seed):
    """V* ≤ max_k F_k(θ_q*) ≤ K^{1/(q+1)} V* (uniform p_k), and the gap shrinks as q grows.

    Proof of the bound: θ_q* minimises Σ_k F_k^{q+1}, so max_k F_k(θ_q*)^{q+1} ≤
    Σ_k F_k(θ_q*)^{q+1} ≤ Σ_k F_k(θ_AFL)^{q+1} ≤ K V*^{q+1}. The monotone decrease of the gap is
    not a theorem: it is observed on these instances (q = 20 solves reliably with the oracle's
    norm formulation).
    """
    model, X, y, offsets = make_problem(seed)
    K = offsets.size - 1
    V = oracles.afl_optimum(model, X, y, offsets).value
    gaps = []
    for q in (1, 5, 20):
        L, _ = client_losses_grads(
            model, oracles.qffl_optimum(model, X, y, offsets, q).x, X, y, offsets
        )
        assert V * (1 - VALUE_RTOL) <= L.max() <= K ** (1 / (q + 1)) * V * (1 + VALUE_RTOL)
        gaps.append(L.max() - V)
    assert gaps[0] >= gaps[1] - 1e-7 * V and gaps[1] >= gaps[2] - 1e-7 * V
    assert gaps[2] < gaps[0]  # and it does move


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


def qffl(*args, **kwargs):
    return oracles.qffl_optimum(*args, 1.0, **kwargs)


BOTH = [pytest.param(qffl, id="qffl"), pytest.param(oracles.afl_optimum, id="afl")]


@pytest.fixture
def problem():
    return make_problem(20, K=3, p=2, C=3)


@pytest.mark.parametrize("oracle", BOTH)
@pytest.mark.parametrize(
    ("mutate", "error", "match"),
    [
        (lambda m, X, y, o: (MLP(2, 3, n_hidden=2), X, y, o), TypeError, "model"),
        (lambda m, X, y, o: ("logistic", X, y, o), TypeError, "model"),
        (lambda m, X, y, o: (m, X[:, :1], y, o), ValueError, "X must have"),
        (lambda m, X, y, o: (m, X[0], y, o), ValueError, "X must be 2-dimensional"),
        (lambda m, X, y, o: (m, np.where(X > 1, np.nan, X), y, o), ValueError, "X must be fin"),
        (lambda m, X, y, o: (m, X, y[:-1], o), ValueError, "y must have shape"),
        (lambda m, X, y, o: (m, X, y + 0.5, o), TypeError, "y must hold integers"),
        (lambda m, X, y, o: (m, X, np.where(y == 2, 3, y), o), ValueError, r"y must hold class"),
        (lambda m, X, y, o: (m, X, np.where(y == 2, 0, y), o), ValueError, "y must contain ever"),
        (lambda m, X, y, o: (m, X, y, o[1:]), ValueError, "offsets must be a 1-D"),
        (lambda m, X, y, o: (m, X, y, o[:-1]), ValueError, "offsets must be a 1-D"),
        (lambda m, X, y, o: (m, X, y, [0]), ValueError, "offsets must be a 1-D"),
        (lambda m, X, y, o: (m, X, y, [0, 12, 8, len(X)]), ValueError, "non-decreasing"),
        (lambda m, X, y, o: (m, X, y, [0, 5, 5, len(X)]), ValueError, "at least one row"),
        (lambda m, X, y, o: (m, X, y, o + 0.5), TypeError, "offsets must hold integers"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(problem, oracle, mutate, error, match):
    with pytest.raises(error, match=match):
        oracle(*mutate(*problem))


@pytest.mark.parametrize("oracle", BOTH)
def test_a_single_client_is_accepted(problem, oracle):
    model, X, y, _ = problem
    res = oracle(model, X, y, [0, len(X)])
    L, _ = client_losses_grads(model, res.x, X, y, np.array([0, len(X)]))
    np.testing.assert_allclose(L.max(), model.loss(res.x, X, y), rtol=1e-15)


@pytest.mark.parametrize(
    ("q", "error"),
    [(-0.5, ValueError), (float("nan"), ValueError), ("1", TypeError), (True, TypeError)],
)
def test_qffl_rejects_a_bad_q(problem, q, error):
    with pytest.raises(error, match="q must"):
        oracles.qffl_optimum(*problem, q)


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ([1.0, -1.0, 1.0], "weights must be non-negative"),
        ([0.0, 0.0, 0.0], "weights must have a positive sum"),
        ([1.0, 1.0], r"weights must have shape \(3,?\)"),  # _checks writes "(3)"
        ([1.0, np.inf, 1.0], "weights must be finite"),
    ],
)
def test_qffl_rejects_bad_weights(problem, weights, match):
    with pytest.raises(ValueError, match=match):
        oracles.qffl_optimum(*problem, 1.0, weights=weights)


def test_qffl_needs_every_class_among_the_clients_with_positive_weight():
    # Client 0 alone holds class 2 (rows 0..4); with weight 0 the objective has no minimiser
    # (the bias of class 2 would go to -inf), with a positive weight it has one.
    model = LogisticRegression(2, 3, l2=0.1)
    X = np.random.default_rng(0).normal(size=(15, 2))
    y = np.array([2, 2, 2, 2, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1])
    offsets = np.array([0, 5, 10, 15])
    with pytest.raises(ValueError, match="y must contain every class"):
        oracles.qffl_optimum(model, X, y, offsets, 1.0, weights=[0.0, 1.0, 1.0])
    oracles.qffl_optimum(model, X, y, offsets, 1.0, weights=[0.1, 1.0, 1.0])


@pytest.mark.parametrize("oracle", BOTH)
def test_a_failed_solve_raises_and_names_the_retries(problem, oracle):
    # Two iterations cannot reach any rung: the ladder fails, is retried with shorter steps,
    # and the error says so; passing max_step_fraction turns the retries off.
    with pytest.raises(RuntimeError, match="retried with Clarabel's max_step_fraction"):
        oracle(*problem, max_iter=2)
    with pytest.raises(RuntimeError, match=r"did not solve .*other solver options\.$"):
        oracle(*problem, max_iter=2, max_step_fraction=0.99)
