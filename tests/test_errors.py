"""Errors and edge cases of the public surface (docs/pages/guides/errors.md).

Each test pins one refusal or one exact answer at an edge that once went wrong: a wrong
exception type, a message naming an internal variable instead of the caller's argument, bad input
accepted, or solver output on the terminal.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import fairagg
from fairagg import make_reports, models, oracles, pareto, types
from tests.tolerances import ORACLE_QP, assert_close

N2 = np.ones(2, dtype=np.int64)

# --------------------------------------------------------------------------------------------
# make_reports and the client indices the stateful rules read
# --------------------------------------------------------------------------------------------


def test_make_reports_refuses_duplicate_client_ids():
    with pytest.raises(ValueError, match="client_ids must be distinct.*1 appears more than once"):
        make_reports(np.ones((2, 3)), N2, client_ids=[1, 1])


def test_make_reports_refuses_client_ids_beyond_num_clients():
    with pytest.raises(ValueError, match=r"client_ids must lie in \[0, num_clients\) = \[0, 4\)"):
        make_reports(np.ones((2, 3)), N2, client_ids=[0, 4], num_clients=4)
    with pytest.raises(ValueError, match="deltas hold m = 2 clients, more than num_clients = 1"):
        make_reports(np.ones((2, 3)), N2, num_clients=1)
    with pytest.raises(ValueError, match="gradients hold m = 2 clients"):
        make_reports(None, N2, gradients=np.ones((2, 3)), num_clients=1)
    # The boundary is accepted; num_clients = 0 means "unknown" and checks nothing.
    assert make_reports(np.ones((2, 3)), N2, client_ids=[0, 3], num_clients=4).num_clients == 4
    assert make_reports(np.ones((2, 3)), N2, client_ids=[0, 9]).num_clients == 0


def test_rules_refuse_hand_built_reports_with_duplicate_ids():
    # RoundReports is a plain NamedTuple: reports built without make_reports are checked too.
    r = types.RoundReports(np.ones((2, 3)), N2, client_ids=np.array([1, 1]))
    rule = fairagg.fedavg()
    with pytest.raises(ValueError, match="reports.client_ids must be distinct"):
        rule.step(np.zeros(3), r, rule.init(np.zeros(3), 2))


def test_client_indices_names_its_arguments():
    r = make_reports(np.ones((2, 3)), N2)
    with pytest.raises(ValueError, match="num_clients must be >= 1; got 0"):
        types.client_indices(r, 0)
    with pytest.raises(TypeError, match="reports must be a fairagg.RoundReports.*NoneType"):
        types.client_indices(None, 4)
    np.testing.assert_array_equal(types.client_indices(r, 2), [0, 1])


# --------------------------------------------------------------------------------------------
# LocalSpec, make_rule, make_model, init_params
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "exc", "match"),
    [
        ({"report": "bogus"}, ValueError, "LocalSpec.report must be one of"),
        ({"report": None}, ValueError, "LocalSpec.report must be one of"),
        ({"gradient_batch_size": 0}, ValueError, "LocalSpec.gradient_batch_size must be >= 1"),
        ({"propfair_m": -1.0}, ValueError, "LocalSpec.propfair_m must be > 0"),
        ({"propfair_epsilon": 0.0}, ValueError, "LocalSpec.propfair_epsilon must be > 0"),
        ({"propfair_huber": "yes"}, TypeError, "LocalSpec.propfair_huber must be a bool"),
        ({"momentum": 1.0}, ValueError, "LocalSpec.momentum must be < 1"),
        ({"accuracy_source": "both"}, ValueError, "LocalSpec.accuracy_source must be one of"),
    ],
)
def test_local_spec_is_validated_when_built_and_replaced(fields, exc, match):
    with pytest.raises(exc, match=match):
        fairagg.LocalSpec(**fields)
    with pytest.raises(exc, match=match):
        fairagg.LocalSpec()._replace(**fields)


def test_local_spec_is_still_a_plain_value():
    spec = fairagg.LocalSpec("gradients", 5)
    assert spec == ("gradients", 5, None, 0.2, False, None, "global")
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec._replace(gradient_batch_size=None).gradient_batch_size is None


def test_make_rule_and_make_model_name_their_argument():
    with pytest.raises(ValueError, match="^name must be one of aaggff-d, .*; got 'bogus'$"):
        fairagg.make_rule("bogus")
    with pytest.raises(TypeError, match="name must be a registry name"):
        fairagg.make_rule(["fedavg"])
    with pytest.raises(ValueError, match="^name must be 'logistic' or 'mlp'; got 'bogus'$"):
        models.make_model("bogus", 3, 2)
    with pytest.raises(TypeError, match="name must be 'logistic' or 'mlp'"):
        models.make_model(None, 3, 2)


@pytest.mark.parametrize("model", [models.LogisticRegression(3, 2), models.MLP(3, 2, n_hidden=4)])
def test_init_params_checks_seed_and_dtype(model):
    with pytest.raises(ValueError, match="seed must be >= 0; got -1"):
        model.init_params(seed=-1)
    with pytest.raises(TypeError, match="seed must be an integer; got float 2.5"):
        model.init_params(seed=2.5)
    with pytest.raises(TypeError, match="seed must be an integer"):
        model.init_params(seed=True)
    with pytest.raises(ValueError, match="dtype must be float32 or float64; got float16"):
        model.init_params(dtype="float16")
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        model.init_params(dtype="no such dtype")
    assert model.init_params(dtype="float32").dtype == np.float32
    np.testing.assert_array_equal(model.init_params(seed=np.int64(3)), model.init_params(seed=3))


# --------------------------------------------------------------------------------------------
# Objects of the wrong kind, names that do not exist
# --------------------------------------------------------------------------------------------


def test_simulate_and_pareto_refuse_a_dataset_name_for_data():
    model = models.LogisticRegression(60, 10)
    with pytest.raises(TypeError, match=r"data must be a fairagg.data.FederatedData \(load it"):
        fairagg.simulate("fedavg", model, "synthetic", rounds=1, clients_per_round=2)
    with pytest.raises(TypeError, match="data must be a fairagg.data.FederatedData"):
        pareto.model_pareto_certificate(model, np.zeros(model.num_params), "digits")
    with pytest.raises(TypeError, match="model must be a fairagg.models.FlatModel; got str"):
        pareto.model_pareto_certificate("logistic", None, None)


def test_simulate_names_rule_for_a_bad_rule_name():
    model = models.LogisticRegression(60, 10)
    with pytest.raises(ValueError, match="^rule must be one of"):
        fairagg.simulate("nope", model, None, rounds=1, clients_per_round=2)


def test_case_inputs_lists_the_valid_names():
    from fairagg import vectors

    with pytest.raises(ValueError, match="name must be one of the formulas .*project_simplex"):
        vectors.case_inputs("formula", "bogus")
    with pytest.raises(ValueError, match="name must be one of the rules .*fedavg"):
        vectors.case_inputs("rule", "bogus")
    with pytest.raises(ValueError, match="kind must be one of 'rule', 'formula'"):
        vectors.case_inputs("rules", "fedavg")
    with pytest.raises(ValueError, match="seed must be >= 0"):
        vectors.case_inputs("rule", "fedavg", seed=-1)
    assert set(vectors.case_inputs("rule", "fedavg"))


def test_submodules_are_attributes_of_the_package():
    import subprocess
    import sys

    # A fresh interpreter: in this one the submodules are already imported by other tests.
    code = (
        "import fairagg, sys; "
        "assert 'fairagg.vectors' not in sys.modules; "
        "print(fairagg.vectors.__name__, fairagg.oracles.OracleError.__name__); "
        "getattr(fairagg, 'nope', None) is None or sys.exit(3)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["fairagg.vectors", "OracleError"]


# --------------------------------------------------------------------------------------------
# The cvxpy oracles: exact scaling where it is exact, a documented error class otherwise, and no
# solver output on the terminal
# --------------------------------------------------------------------------------------------


def test_oracle_refuses_data_osqp_reads_as_infinite_quietly(capfd):
    y = np.array([0.1, -0.5, 0.3, 1.2]) * 1e160
    with pytest.raises(oracles.OracleError, match="project_box_simplex: y has entries of magn"):
        oracles.project_box_simplex(y, 0.005, 0.5)
    with pytest.raises(RuntimeError):  # OracleError is a RuntimeError, as before
        oracles.project_simplex(y)
    assert capfd.readouterr() == ("", "")


def test_oracle_solver_failure_is_an_oracle_error_with_what_the_solver_printed(capfd):
    # A setting OSQP refuses: it prints its complaint from C, which the error carries and the
    # terminal never sees. (Data OSQP would read as infinite are refused before it runs, naming
    # the argument: below.)
    g = np.array([[1.0, -1.0, 2.0]])
    with pytest.raises(
        oracles.OracleError,
        match="quadratic_ftrl: OSQP did not solve.*OSQP printed: ERROR in validate_settings: "
        "eps_abs must be nonnegative",
    ):
        oracles.quadratic_ftrl(g, np.array([[0.2, 0.3, 0.5]]), 1.0, 1.0, eps_abs=-1.0)
    assert capfd.readouterr() == ("", "")
    with pytest.raises(oracles.OracleError, match="quadratic_ftrl: grads has entries of magn"):
        oracles.quadratic_ftrl(g * 1e160, np.array([[0.2, 0.3, 0.5]]), 1.0, 1.0)
    with pytest.raises(oracles.OracleError, match="quadratic_ftrl: beta has entries of magn"):
        oracles.quadratic_ftrl(g, np.array([[0.2, 0.3, 0.5]]), 1.0, 2.0**1000)
    assert capfd.readouterr() == ("", "")


def test_oracle_huge_finite_upper_bound_is_no_bound():
    y = np.array([0.1, -0.5, 0.3, 1.2])
    far = oracles.project_box_simplex(y, 0.005, 1e300).x
    unbounded = oracles.project_box_simplex(y, 0.005, np.inf).x
    np.testing.assert_allclose(far, unbounded, rtol=0, atol=ORACLE_QP)
    np.testing.assert_allclose(far, [0.005, 0.005, 0.045, 0.945], rtol=0, atol=ORACLE_QP)


@pytest.mark.parametrize("k", [-900, -300, -60, 0, 60, 300, 900])
def test_oracle_simplex_qp_is_exact_at_every_scale(k):
    rng = np.random.default_rng(1)
    M = rng.standard_normal((4, 4))
    A, b = M @ M.T, rng.standard_normal(4)
    ref = oracles.simplex_qp(A, b)
    got = oracles.simplex_qp(np.ldexp(A, k), np.ldexp(b, k))
    np.testing.assert_allclose(got.x, ref.x, rtol=0, atol=ORACLE_QP)
    assert_close(got.value, np.ldexp(ref.value, k), scale=1e3)  # the solver's ~1e-9 on values


# --------------------------------------------------------------------------------------------
# Right at every scale: the box-simplex projection
# --------------------------------------------------------------------------------------------


def _exact_box_projection(y, lo, hi, s):
    """The projection in exact rational arithmetic: τ solves Σ clip(y_i − τ, lo_i, hi_i) = s on
    the segment between the breakpoints where the (exact) sum crosses s."""
    from fractions import Fraction as F

    y = [F(float(v)) for v in y]
    lo = [F(float(v)) for v in lo]
    hi = [None if np.isinf(v) else F(float(v)) for v in hi]
    s = F(float(s))

    def clip(v, a, b):
        v = max(v, a)
        return v if b is None else min(v, b)

    def total(t):
        return sum(clip(yi - t, a, b) for yi, a, b in zip(y, lo, hi, strict=True))

    ev = sorted({yi - a for yi, a in zip(y, lo, strict=True)}
                | {yi - b for yi, b in zip(y, hi, strict=True) if b is not None})  # fmt: skip
    b_i = next(i for i, t in enumerate(ev) if total(t) <= s)
    t_b = ev[b_i]
    t_a = ev[b_i - 1] if b_i > 0 else t_b - 1 - abs(t_b)
    # S is linear on [t_a, t_b]: interpolate the crossing.
    Sa, Sb = total(t_a), total(t_b)
    tau = t_b if Sa == Sb else t_a + (Sa - s) / (Sa - Sb) * (t_b - t_a)
    return np.array([float(clip(yi - tau, a, b)) for yi, a, b in zip(y, lo, hi, strict=True)])


@pytest.mark.parametrize(
    ("y", "lower", "upper"),
    [
        ([0.1, -0.5, 0.3, 1.2], 0.005, 0.5),  # the example of the issue: [0.005, 0.005, 0.49, 0.5]
        ([0.1, -0.5, 0.3, 1.2], 0.005, 1e300),  # a finite bound that cannot bind
        ([0.1, -0.5, 0.3, 1.2], 0.0, np.inf),
        ([3.0, 3.0, -1.0, 2.0], [0.0, 0.1, 0.2, 0.0], [0.3, 0.4, 1.0, np.inf]),
    ],
)
@pytest.mark.parametrize("k", [-1060, -900, -532, -160, 0, 160, 532, 900, 1000])
def test_project_box_simplex_is_exact_at_every_scale(y, lower, upper, k):
    from fairagg import simplex

    yv = np.ldexp(np.array(y), k)
    assert np.all(np.isfinite(yv))  # |y| ≤ 3 and k ≤ 1000: the scaled point is finite
    K = len(y)
    lo = np.broadcast_to(np.asarray(lower, dtype=float), (K,))
    hi = np.broadcast_to(np.asarray(upper, dtype=float), (K,))
    got = simplex.project_box_simplex(yv, lower, upper)
    want = _exact_box_projection(yv, lo, hi, 1.0)
    assert_close(got, want)
    assert abs(got.sum() - 1.0) <= 4 * K * np.finfo(float).eps
    assert np.all(got >= lo) and np.all(got <= hi)


# --------------------------------------------------------------------------------------------
# Right at every scale, outside the rules: exact where representable, else a clear ValueError
# --------------------------------------------------------------------------------------------


def test_term_weights_never_overflow_at_any_tilt():
    import importlib

    term = importlib.import_module("fairagg.rules.term")
    with np.errstate(
        over="raise", invalid="raise", divide="raise"
    ):  # no RuntimeWarning reaches the caller either
        np.testing.assert_array_equal(term.term_weights(np.array([1.0, 2.0]), 1e308), [0, 1])
        np.testing.assert_array_equal(term.term_weights(np.array([1.0, 2.0]), -1e308), [1, 0])
        w = term.term_weights(np.array([1.0, 2.0, 2.0]), 1e308, [1, 2, 1])
    assert_close(w, [0.0, 2 / 3, 1 / 3])
    # Moderate tilts keep the closed form exp(t F_k) p_k / Σ.
    F, t = np.array([0.3, 1.1, 0.7]), 2.5
    ref = np.exp(t * F) / np.exp(t * F).sum()
    assert_close(term.term_weights(F, t), ref)


def test_qffl_objective_exact_wherever_representable():
    import importlib

    qffl = importlib.import_module("fairagg.rules.qffl")
    # F^2 overflows at 1.5e154 but f_q = F^2/2 = 1.125e308 does not.
    assert_close(qffl.qffl_objective(np.array([1.5e154, 1.5e154]), 1.0), 1.125e308)
    F = np.array([0.3, 0.7, 2.0])
    for q in (0.0, 0.5, 1.0, 3.0):
        ref = np.mean(F ** (q + 1)) / (q + 1)
        for k in (-400, 0, 300):  # f_q(2^k F) = 2^(k(q+1)) f_q(F)
            if abs(k * (q + 1)) > 1000:
                continue
            got = qffl.qffl_objective(np.ldexp(F, k), q)
            assert_close(got / 2.0 ** (k * (q + 1)), ref)
    with pytest.raises(ValueError, match="q-FFL objective overflows float64.*largest loss 2e"):
        qffl.qffl_objective(np.array([1e160, 2e160]), 1.0)
    assert qffl.qffl_objective(np.zeros(3), 2.0) == 0.0


def test_quadratic_ftrl_sums_refuse_overflow_and_wrong_states():
    from fairagg import online

    st = online.quadratic_ftrl_init(3)
    p = np.array([0.2, 0.3, 0.5])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        with pytest.raises(ValueError, match="grad is too large for the FTRL sums.*3e\\+160"):
            online.quadratic_ftrl_update(st, np.array([1e160, -2e160, 3e160]), p)
    for bad in (None, {}, (np.zeros(3), np.zeros((3, 3)), np.zeros(3), 0)):
        with pytest.raises(TypeError, match="state must be a fairagg.online.QuadraticFTRL"):
            online.quadratic_ftrl_update(bad, np.ones(3), p)
        with pytest.raises(TypeError, match="state must be a fairagg.online.QuadraticFTRL"):
            online.quadratic_ftrl_step(bad, 1.0, 1.0)
    # Large but representable sums are accepted.
    big = online.quadratic_ftrl_update(st, np.array([1e150, -2e150, 3e150]), p)
    assert np.isfinite(big.outer_sum).all()


def test_play_aaggff_d_is_scale_free_in_the_responses():
    from fairagg import online

    R = np.array([[0.1, 0.2, 0.3], [0.3, 0.1, 0.2], [0.2, 0.2, 0.1]])
    ref = online.play_aaggff_d(R * 1e100, seed=0, clients_per_round=2)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        for k in (1e160, 1e300):  # once an OverflowError (D² in the doubly-robust gradient)
            got = online.play_aaggff_d(R * k, seed=0, clients_per_round=2)
            assert_close(got, ref)


# --------------------------------------------------------------------------------------------
# Arguments of the simplex helpers and PropFair's check
# --------------------------------------------------------------------------------------------


def test_check_simplex_point_and_check_box_validate_their_own_arguments():
    from fairagg import simplex

    with pytest.raises(ValueError, match="rtol must be finite; got nan"):
        simplex.check_simplex_point(np.array([5.0, 1.0]), "p", rtol=float("nan"))
    with pytest.raises(TypeError, match="rtol must be a real number"):
        simplex.check_simplex_point(np.array([0.5, 0.5]), "p", rtol=None)
    with pytest.raises(ValueError, match="rtol must be >= 0"):
        simplex.check_simplex_point(np.array([0.5, 0.5]), "p", rtol=-1.0)
    with pytest.raises(ValueError, match="total must be finite; got nan"):
        simplex.check_box(0.0, 1.0, 3, float("nan"))
    with pytest.raises(TypeError, match="total must be a real number"):
        simplex.check_box(0.0, 1.0, 3, None)
    with pytest.raises(ValueError, match="size must be >= 1; got -1"):
        simplex.check_box(0.0, 1.0, -1)
    with pytest.raises(TypeError, match="size must be an integer"):
        simplex.check_box(0.0, 1.0, 2.5)


def test_propfair_check_losses_below_names_the_right_argument():
    import importlib

    propfair = importlib.import_module("fairagg.rules.propfair")
    check = propfair.check_losses_below
    with pytest.raises(ValueError, match="losses must be finite"):
        check(np.array([np.nan, 1.0]), 5.0)
    with pytest.raises(ValueError, match="losses must be finite"):
        check(np.array([-np.inf, 1.0]), 5.0)
    with pytest.raises(ValueError, match="losses must be non-negative"):
        check(np.array([-1.0, 1.0]), 5.0)
    with pytest.raises(ValueError, match="losses must be 1-dimensional"):
        check(np.ones((2, 2)), 5.0)
    with pytest.raises(TypeError, match="losses must be an array of real numbers"):
        check(np.ones(2, dtype=complex), 5.0)
    with pytest.raises(ValueError, match="m must be finite; got nan"):
        check(np.ones(2), float("nan"))
    with pytest.raises(ValueError, match="m must be > 0"):
        check(np.ones(2), 0.0)
    with pytest.raises(ValueError, match="below PropFair's M = 5.0; got a loss of 6.0"):
        check(np.array([1.0, 6.0]), 5.0)
    check(np.array([1.0, 4.9]), 5.0)  # below M: accepted
    with pytest.raises(TypeError, match="^M must be a real number; got NoneType$"):
        propfair.propfair(M=None)


def test_oracle_project_simplex_needs_a_positive_total():
    with pytest.raises(ValueError, match="total must be > 0"):
        oracles.project_simplex(np.ones(3), total=0.0)


def test_qfedsgd_with_a_zero_row_keeps_subnormal_gradients():
    # A zero row's exponent (frexp gives 0) once set the scale of subnormal gradients, whose
    # weighted sum then underflowed: the step came back 0 where the exact step is ~1e-234.
    import importlib
    from fractions import Fraction

    qffl = importlib.import_module("fairagg.rules.qffl")
    tiny = 2.0**-1074
    G = np.array([[tiny, 0.0, tiny, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -tiny, 0.0]])
    F, lr, eps = np.array([0.125, 1.25, 0.25]), 2.0**300, 1e-10
    got = qffl.qfedsgd_step(np.zeros(4), G, F, 1.0, lr, epsilon=eps).params
    # Exact: θ¹ = −Σ_k F̃_k g_k / Σ_k (F̃_k^0 ‖g_k‖² + L F̃_k), L = 1/lr, in rationals.
    Ft = [Fraction(f) + Fraction(eps) for f in F]
    h = sum(
        sum(Fraction(x) ** 2 for x in g) + Fraction(1) / Fraction(lr) * f
        for g, f in zip(G, Ft, strict=True)
    )
    want = [
        float(-sum(f * Fraction(g[j]) for g, f in zip(G, Ft, strict=True)) / h) for j in range(4)
    ]
    assert want[0] != 0.0
    # A few roundings of float64 (the ratio of two sums): well inside the closed-form 1e-12.
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------------
# import fairagg wherever the caller's code lives
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["module", "package"])
def test_import_fairagg_from_a_folder_with_its_own_models(tmp_path, layout):
    # ML projects often have their own models.py or models/ package; fairagg's models install
    # as fairagg.models, so the caller's never shadows them.
    import subprocess
    import sys

    if layout == "module":
        (tmp_path / "models.py").write_text("raise ImportError('the caller models.py')\n")
    else:
        (tmp_path / "models").mkdir()
        (tmp_path / "models" / "__init__.py").write_text("FlatModel = None\n")
    code = (
        "import fairagg, fairagg.local, fairagg.simulation, fairagg.pareto\n"
        "from fairagg.models import LogisticRegression, FlatModel\n"
        "assert FlatModel is not None and issubclass(LogisticRegression, FlatModel)\n"
        "print(fairagg.models.__name__)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["fairagg.models"]


# --------------------------------------------------------------------------------------------
# Found by the contract test (tests/contract): exact answers at the edges of float64
# --------------------------------------------------------------------------------------------


def test_min_norm_point_weights_do_not_depend_on_the_scale():
    from fairagg.simplex import min_norm_point

    V = np.array([[1.0, 0.5], [-0.5, 0.25], [0.3, -1.0]])
    ref = min_norm_point(V)
    for k in (-1000, -530, 530, 1000):
        res = min_norm_point(np.ldexp(V, k))
        assert_close(res.weights, ref.weights)
        assert_close(np.ldexp(res.point, -k), ref.point)
    assert min_norm_point(np.ldexp(V, 1000)).norm_sq == np.inf  # 2^2000 ‖p‖²: beyond float64
    assert min_norm_point(np.ldexp(V, -1000)).norm_sq == 0.0  # below the smallest subnormal


def test_accuracy_std_of_tiny_accuracies_is_exact():
    from fairagg.metrics import accuracy_std

    a = np.array([0.25, 0.5, 0.75, 1.0])
    want = float(np.ldexp(accuracy_std(a), -1000))  # std is of degree 1: exact rescaling
    assert_close(accuracy_std(np.ldexp(a, -1000)) / want, 1.0)


def test_qfedavg_at_a_huge_q_follows_the_largest_loss():
    # q = 2^1000: only the largest loss F = 1 + ε keeps weight, u = 1, and the step is
    # L δ F^q / (q F^(q-1) L² ‖δ‖² + L F^q) = L δ / (q L² ‖δ‖² / F + L), with L = 1/lr = 10,
    # ‖δ‖² = 3: 10 / (2^1000 · 300 / (1 + 1e-10) + 10) per entry; Σ h_k overflows to +inf.
    from fairagg.rules.qffl import qfedavg_step

    q = 2.0**1000
    out = qfedavg_step(np.zeros(3), np.ones((2, 3)), np.array([0.5, 1.0]), q, 0.1)
    F = 1.0 + 1e-10
    want = -10.0 / (q * 300.0 / F + 10.0)
    np.testing.assert_allclose(out.params, np.full(3, want), rtol=1e-12, atol=0)  # ~3e-303
    assert out.h_sum == np.inf


def test_qffl_objective_at_a_huge_q_rounds_to_zero_below_one():
    from fairagg.rules.qffl import qffl_objective

    # Σ p_k F_k^(q+1) / (q+1) with every F_k < 1 and q = 2^1000: far below 2^-1074
    assert qffl_objective(np.array([0.5, 0.9]), 2.0**1000) == 0.0


def test_qfedavg_scaled_step_keeps_a_column_far_below_another():
    # ‖δ‖² overflows (entries 2^600), so the step is taken in scaled form. The second column is
    # 1100 binades below the first: one power of two for the whole matrix flushed it to 0,
    # though its exact step, L δ / Σ h_k with h_k = q L² ‖δ_k‖² + L (F = 1, ε = 0), is ~1.5e-151.
    from fractions import Fraction

    from fairagg.rules.qffl import qfedavg_step

    D = np.array([[2.0**600, 2.0**-500], [2.0**600, 0.0]])
    q, lr = 5e-324, 2.0**1000
    out = qfedavg_step(np.zeros(2), D, np.ones(2), q, lr, epsilon=0.0)
    L, qq = 1 / Fraction(lr), Fraction(q)
    h = qq * L * L * (2 * Fraction(2) ** 1200 + Fraction(2) ** -1000) + 2 * L
    want = [-float(L * 2 * Fraction(2) ** 600 / h), -float(L * Fraction(2) ** -500 / h)]
    # relative only: the second entry is ~1e-151, far below any absolute tolerance
    np.testing.assert_allclose(out.params, want, rtol=1e-12, atol=0)
