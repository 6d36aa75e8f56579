"""The round loop: reproducibility, what History records, failure handling."""

from __future__ import annotations

import functools
import importlib

import numpy as np
import pytest

from fairagg import (
    History,
    LocalSpec,
    fairavg,
    fairavg_weights,
    fedavg,
    make_reports,
    make_rule,
    simulate,
)
from fairagg.data import synthetic
from fairagg.local import client_gradients, train_clients
from fairagg.models import MLP, LogisticRegression
from fairagg.rules.afl import afl
from fairagg.rules.qffl import qfedsgd
from fairagg.sampling import sample_clients
from fairagg.types import Aggregate, EmptyState, Rule
from tests.tolerances import assert_close

ROUNDS = 4


@pytest.fixture(scope="module")
def data():
    return synthetic(1, 1, 8, seed=3, max_samples_per_client=80)


@pytest.fixture(scope="module")
def model():
    return LogisticRegression(60, 10)


def _run(rule, model, data, **kw):
    args = dict(rounds=ROUNDS, clients_per_round=3, epochs=2, batch_size=10, lr=0.05, seed=7)
    args.update(kw)
    return simulate(rule, model, data, **args)


def test_history_shapes(model, data):
    h = _run(fedavg(), model, data)
    K = data.num_clients
    assert h.num_rounds == ROUNDS and h.status == "completed"
    assert h.round.tolist() == list(range(1, ROUNDS + 1))
    assert h.selected.shape == h.weights.shape == h.reported_losses.shape == (ROUNDS, 3)
    assert h.eval_round.tolist() == list(range(ROUNDS + 1))  # round 0 = initial model
    for name in ("test_accuracy", "test_loss", "train_accuracy", "train_loss"):
        assert getattr(h, name).shape == (ROUNDS + 1, K)
    assert h.final_params.shape == (model.num_params,)
    assert np.all((h.test_accuracy >= 0) & (h.test_accuracy <= 1))
    assert set(h.summary()) >= {"average", "worst_10", "variance", "angle", "kl"}
    assert h.latest("round") == ROUNDS
    assert np.array_equal(h.latest("test_accuracy"), h.test_accuracy[-1])
    with pytest.raises(ValueError, match="no 'round'"):
        History().latest("round")


def test_run_is_bitwise_reproducible(model, data):
    a = _run(fedavg(), model, data)
    b = _run(fedavg(), model, data)
    assert np.array_equal(a.final_params, b.final_params)
    assert np.array_equal(a.test_accuracy, b.test_accuracy)


def test_serial_and_parallel_runs_are_bitwise_identical(data):
    mlp = MLP(60, 10, n_hidden=5)
    a = _run(fairavg(), mlp, data, parallel=True)
    b = _run(fairavg(), mlp, data, parallel=False)
    assert np.array_equal(a.final_params, b.final_params)


def test_rules_see_identical_samples(model, data):
    a = _run(fedavg(), model, data)
    b = _run(fairavg(), model, data)
    assert np.array_equal(a.selected, b.selected)
    assert not np.array_equal(a.final_params, b.final_params)


def test_different_seeds_differ(model, data):
    a = _run(fedavg(), model, data, seed=1)
    b = _run(fedavg(), model, data, seed=2)
    assert not np.array_equal(a.selected, b.selected)


def test_one_round_equals_the_spine_by_hand(model, data):
    """Round 1 of simulate = sample with default_rng([seed, 0, 0]), train, FairAvg."""
    h = _run(fairavg(), model, data, rounds=1)
    theta0 = model.init_params(7)
    S = sample_clients(data.num_clients, 3, np.random.default_rng([7, 0, 0]))
    local = train_clients(model, theta0, data, S, epochs=2, batch_size=10, lr=0.05, seed=7)
    expected = theta0 - fairavg_weights(3) @ local.deltas
    assert np.array_equal(h.selected[0], S)
    assert_close(h.final_params, expected)
    assert_close(h.reported_losses[0], local.losses)


def test_weights_recorded_are_the_rules(model, data):
    h = _run(fedavg(), model, data)
    n = data.num_train_samples[h.selected]
    assert_close(h.weights, n / n.sum(axis=1, keepdims=True))


def test_fedavg_learns_on_iid_data():
    d = synthetic(0, 0, 6, iid=True, seed=0, max_samples_per_client=200)
    m = LogisticRegression(60, 10)
    h = simulate(fedavg(), m, d, rounds=15, clients_per_round=6, epochs=1, batch_size=10, lr=0.05)
    acc = h.mean_test_accuracy()
    assert acc[-1] > acc[0] + 20.0
    assert h.mean_train_loss()[-1] < 0.7 * h.mean_train_loss()[0]


def _recording_rule(log, fail_at=None):
    def init(params, num_clients):
        return EmptyState()

    def step(params, reports, state):
        if fail_at is not None and reports.round_index == fail_at:
            raise RuntimeError("planted failure")
        log.append(reports)
        w = np.full(reports.deltas.shape[0], 1.0 / reports.deltas.shape[0])
        return Aggregate(params - w @ reports.deltas, state, {"weights": w})

    return Rule("recording", init, step, {})


def test_reports_carry_participations_and_ids(model, data):
    log = []
    h = _run(_recording_rule(log), model, data, rounds=6)
    counts = np.zeros(data.num_clients, dtype=int)
    for t, rep in enumerate(log):
        counts[rep.client_ids] += 1
        assert rep.round_index == t and rep.num_clients == data.num_clients
        assert np.array_equal(rep.participations, counts[rep.client_ids])
        assert np.array_equal(rep.client_ids, h.selected[t])
        assert np.array_equal(rep.num_samples, data.num_train_samples[rep.client_ids])


def test_failure_midway_keeps_recorded_rounds(model, data, tmp_path):
    history = History()
    with pytest.raises(RuntimeError, match="planted failure") as info:
        _run(_recording_rule([], fail_at=2), model, data, history=history)
    assert info.value.history is history
    assert history.num_rounds == 2 and history.status.startswith("stopped: RuntimeError")
    assert history.test_accuracy.shape[0] == 3
    loaded = History.load(history.save(tmp_path / "partial.npz"))
    assert loaded.num_rounds == 2 and loaded.status == history.status


def test_divergence_raises_floating_point_error(data):
    # With an L2 term each step multiplies the weights by (1 - lr*l2): |1 - 1e30| overflows
    # float64 within a dozen steps. (Cross-entropy alone has bounded gradients.)
    m = LogisticRegression(60, 10, l2=1.0)
    with pytest.raises(FloatingPointError, match="lower lr"):
        _run(fedavg(), m, data, lr=1e30, epochs=3)


def nan_rule(from_round: int) -> Rule:
    """An unweighted mean whose step returns NaN parameters from round ``from_round`` (t + 1)
    on: a rule that diverges."""

    def init(params, num_clients):
        return EmptyState()

    def step(params, reports, state):
        m = reports.deltas.shape[0]
        w = np.full(m, 1.0 / m)
        new = params - w @ reports.deltas
        if reports.round_index + 1 >= from_round:
            new = np.full_like(new, np.nan)
        return Aggregate(new, state, {"weights": w})

    return Rule("nan", init, step, {})


def test_a_rule_that_diverges_stops_the_run_before_its_round_counts(model, data, tmp_path):
    """The shared round's non-finite check (fairagg._round) raises simulate's FloatingPointError,
    and the round that diverged is committed nowhere: the history, the checkpoint written on
    the way out and its participation counts all stop at round 2."""
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(FloatingPointError) as info:
        _run(nan_rule(3), model, data, checkpoint=ckpt)
    assert str(info.value) == "rule 'nan' produced non-finite parameters in round 3"
    h = info.value.history
    assert h.num_rounds == 2
    from fairagg.simulation import load_checkpoint

    saved = load_checkpoint(ckpt)
    assert saved["round"] == 2
    selected = np.bincount(h.selected.ravel(), minlength=data.num_clients)
    np.testing.assert_array_equal(saved["counts"], selected)


def server_checks(names, fn):
    """How often fairagg checks each of the real arguments ``names`` (``check_real(x, name)``)
    while ``fn()`` runs, leaving out the checks made inside the clients' training
    ([`train_clients`][fairagg.local.train_clients],
    [`client_gradients`][fairagg.local.client_gradients]) and inside a rule's step: public
    functions that check their own arguments, once per client or round."""
    import sys
    from pathlib import Path

    import fairagg.rules
    from fairagg import _checks

    rules = Path(fairagg.rules.__file__).parent
    check = _checks.check_real.__code__
    inside = {train_clients.__code__, client_gradients.__code__}
    counts = dict.fromkeys(names, 0)

    def counted(frame) -> bool:
        while frame is not None:
            if frame.f_code in inside or Path(frame.f_code.co_filename).is_relative_to(rules):
                return False
            frame = frame.f_back
        return True

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is check and frame.f_locals.get("name") in names:
            if counted(frame.f_back):
                counts[frame.f_locals["name"]] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


def test_lr_and_momentum_are_checked_once_per_run(model, data):
    """simulate checks lr and momentum once, where they enter (its TrainingSettings), however
    many rounds it runs: the round reads them as checked (it had checked each twice)."""
    for rounds in (1, 4):
        run = functools.partial(_run, fedavg(), model, data, rounds=rounds, momentum=0.5)
        counts = server_checks(("lr", "momentum"), run)
        assert counts == {"lr": 1, "momentum": 1}, (rounds, counts)


def test_experiment_settings_build_the_rule_once_for_the_run(model, data, monkeypatch):
    """The rule ExperimentSettings builds when it checks its hyper-parameters is the one a run
    takes (``built_rule``), not built again, and runs as the rule built by name does."""
    settings_module = importlib.import_module("fairagg._settings")
    builds = []
    real = settings_module.make_rule
    monkeypatch.setattr(
        settings_module, "make_rule", lambda *a, **k: builds.append(a) or real(*a, **k)
    )
    s = settings_module.ExperimentSettings(
        rule="qfedavg", rule_arg=(("q", 2.0),), backend="numpy", lr=0.05, seed=7
    )
    rule = s.built_rule
    assert s.built_rule is rule and len(builds) == 1
    assert rule.name == "qfedavg" and rule.hyperparams["q"] == 2.0
    assert rule.hyperparams["backend"] == "numpy"
    a = _run(rule, model, data, lr=s.lr, seed=s.seed)
    b = _run(make_rule("qfedavg", q=2.0, backend="numpy"), model, data, lr=s.lr, seed=s.seed)
    np.testing.assert_array_equal(a.final_params, b.final_params)


def test_save_load_round_trip(model, data, tmp_path):
    h = _run(fedavg(), model, data)
    g = History.load(h.save(tmp_path / "h.npz"))
    assert g.config == h.config and g.status == "completed"
    for name in ("round", "selected", "weights", "test_accuracy", "train_loss", "final_params"):
        assert np.array_equal(getattr(g, name), getattr(h, name))
    assert g.summary() == h.summary()


def test_eval_every_keeps_first_and_last(model, data):
    h = _run(fedavg(), model, data, rounds=5, eval_every=2)
    assert h.eval_round.tolist() == [0, 2, 4, 5]


def test_rule_by_name_and_bad_inputs(model, data):
    assert _run("fairavg", model, data, rounds=1).config["rule"] == "fairavg"
    with pytest.raises(ValueError, match="rule must be one of"):
        _run("nope", model, data)
    with pytest.raises(ValueError, match="clients_per_round"):
        _run(fedavg(), model, data, clients_per_round=data.num_clients + 1)
    with pytest.raises(ValueError, match="features"):
        _run(fedavg(), LogisticRegression(5, 10), data)
    with pytest.raises(ValueError, match="rounds"):
        _run(fedavg(), model, data, rounds=0)
    with pytest.raises(TypeError, match="rule"):
        _run(object(), model, data)


# --------------------------------------------------------------------------------------------
# what the clients compute: LocalSpec
# --------------------------------------------------------------------------------------------


def _spec_rule(log, local):
    """A rule that records its reports and takes a FairAvg step on whatever matrix it gets."""

    def init(params, num_clients):
        return EmptyState()

    def step(params, reports, state):
        log.append(reports)
        M = reports.gradients if reports.deltas is None else reports.deltas
        w = np.full(M.shape[0], 1.0 / M.shape[0])
        return Aggregate(params - w @ M, state, {"weights": w})

    return Rule("spec", init, step, {}, local)


def test_gradient_rules_get_full_batch_gradients_and_the_round_lr(model, data):
    log = []
    # One round: the simulator refills one buffer each round, and the log keeps references.
    h = _run(_spec_rule(log, LocalSpec(report="gradients")), model, data, rounds=1, lr=0.3)
    theta0 = model.init_params(7)
    rep = log[0]
    assert rep.deltas is None and rep.lr == 0.3
    full = client_gradients(model, theta0, data, h.selected[0])
    assert_close(rep.gradients, full.deltas)
    assert_close(rep.losses, full.losses)
    assert h.config["local"]["report"] == "gradients"


def test_minibatch_gradient_spec_is_passed_through(model, data):
    log = []
    _run(
        _spec_rule(log, LocalSpec(report="gradients", gradient_batch_size=4)), model, data, rounds=1
    )
    S = log[0].client_ids
    mb = client_gradients(model, model.init_params(7), data, S, batch_size=4, seed=7)
    assert_close(log[0].gradients, mb.deltas)


def test_propfair_spec_trains_on_the_surrogate(model, data):
    log = []
    spec = LocalSpec(propfair_m=3.0, propfair_epsilon=0.2, propfair_huber=True)
    _run(_spec_rule(log, spec), model, data, rounds=1)
    S = log[0].client_ids
    ref = train_clients(
        model,
        model.init_params(7),
        data,
        S,
        epochs=2,
        batch_size=10,
        lr=0.05,
        seed=7,
        propfair_m=3.0,
        propfair_huber=True,
    )
    assert_close(log[0].deltas, ref.deltas)


def test_qfedsgd_q0_full_participation_is_gradient_descent_on_the_mean_loss(model, data):
    K = data.num_clients
    h = _run(qfedsgd(q=0.0), model, data, rounds=1, clients_per_round=K, lr=0.2)
    theta0 = model.init_params(7)
    G = client_gradients(model, theta0, data, np.arange(K)).deltas
    assert_close(h.final_params, theta0 - 0.2 * G.mean(axis=0))


def test_afl_evaluates_and_keeps_the_average_of_its_iterates(model, data):
    K = data.num_clients
    rule = afl(lambda_lr=0.1)
    h = _run(rule, model, data, rounds=3, clients_per_round=K, lr=0.2)
    theta = model.init_params(7)
    state = rule.init(theta, K)
    for t in range(3):
        g = client_gradients(model, theta, data, h.selected[t])
        rep = make_reports(
            None,
            data.num_train_samples[h.selected[t]],
            losses=g.losses,
            gradients=g.deltas,
            client_ids=h.selected[t],
            lr=0.2,
            num_clients=K,
        )
        agg = rule.step(theta, rep, state)
        theta, state = agg.params, agg.state
    assert_close(h.final_params, state.average)
    test_loss, _ = model.evaluate_clients(
        state.average, data.X_test, data.y_test, data.test_offsets
    )
    assert_close(h.test_loss[-1], test_loss)


def _unchecked_spec(**fields):
    """A LocalSpec built past its own validation (as a hand-made tuple subclass could be), to
    check that the simulator validates what it is given too."""
    return tuple.__new__(LocalSpec, tuple({**LocalSpec()._asdict(), **fields}.values()))


def test_invalid_local_spec_is_rejected(model, data):
    with pytest.raises(ValueError, match="LocalSpec.report"):
        LocalSpec(report="hessians")
    bad = _spec_rule([], _unchecked_spec(report="hessians"))
    with pytest.raises(ValueError, match="report"):
        _run(bad, model, data)
    bad = _spec_rule([], _unchecked_spec(report="gradients", propfair_m=3.0))
    with pytest.raises(ValueError, match="propfair_m"):
        _run(bad, model, data)
    bad = _spec_rule([], "gradients")
    with pytest.raises(TypeError, match="LocalSpec"):
        _run(bad, model, data)


def test_rule_prescribed_client_momentum_drives_local_training(model, data):
    log = []
    h = _run(_spec_rule(log, LocalSpec(momentum=0.5)), model, data, rounds=1)
    S = log[0].client_ids
    kw = dict(epochs=2, batch_size=10, lr=0.05, seed=7)
    ref = train_clients(model, model.init_params(7), data, S, momentum=0.5, **kw)
    plain = train_clients(model, model.init_params(7), data, S, **kw)
    assert_close(log[0].deltas, ref.deltas)
    assert not np.allclose(ref.deltas, plain.deltas)  # the momentum matters here
    assert h.config["momentum"] == 0.5
    # The same value given explicitly is accepted; a contradicting one is refused.
    _run(_spec_rule([], LocalSpec(momentum=0.5)), model, data, rounds=1, momentum=0.5)
    with pytest.raises(ValueError, match="momentum = 0.0 contradicts"):
        _run(_spec_rule([], LocalSpec(momentum=0.5)), model, data, rounds=1, momentum=0.0)
    # Without a prescription the caller's momentum (default 0) is used.
    assert _run(fairavg(), model, data, rounds=1).config["momentum"] == 0.0
    assert _run(fairavg(), model, data, rounds=1, momentum=0.3).config["momentum"] == 0.3


def test_local_accuracy_source_reports_the_trained_models_accuracy(model, data):
    glob, loc = [], []
    _run(_spec_rule(glob, LocalSpec()), model, data, rounds=1)
    _run(_spec_rule(loc, LocalSpec(accuracy_source="local")), model, data, rounds=1)
    S = loc[0].client_ids
    theta0 = model.init_params(7)
    o = data.train_offsets
    want = [
        model.accuracy(
            theta0 - loc[0].deltas[i], data.X_train[o[k] : o[k + 1]], data.y_train[o[k] : o[k + 1]]
        )
        for i, k in enumerate(S)
    ]
    assert_close(loc[0].accuracies, want)
    before = [
        model.accuracy(theta0, data.X_train[o[k] : o[k + 1]], data.y_train[o[k] : o[k + 1]])
        for k in S
    ]
    assert_close(glob[0].accuracies, before)
    # Training helped on its own data (one client's majority class already gave its accuracy).
    assert np.all(loc[0].accuracies >= glob[0].accuracies)
    assert np.sum(loc[0].accuracies > glob[0].accuracies) >= 2


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"report": "gradients", "momentum": 0.5}, "LocalSpec.momentum"),
        ({"momentum": 1.0}, "LocalSpec.momentum"),
        ({"accuracy_source": "best"}, "accuracy_source"),
        ({"report": "gradients", "accuracy_source": "local"}, "accuracy_source"),
    ],
)
def test_invalid_momentum_and_accuracy_source_are_rejected(model, data, fields, match):
    with pytest.raises(ValueError, match=match):
        LocalSpec(**fields)
    with pytest.raises(ValueError, match=match):
        _run(_spec_rule([], _unchecked_spec(**fields)), model, data)


# ------------------------------------------------------------------ checkpoints and resume
def _same_history(a: History, b: History) -> None:
    """Bitwise equal parameters and metrics (the timings are the only fields that differ)."""
    for k in ("round", "selected", "weights", "reported_losses", "eval_round", "test_accuracy",
              "test_loss", "train_accuracy", "train_loss"):  # fmt: skip
        x, y = getattr(a, k), getattr(b, k)
        assert x.shape == y.shape and np.array_equal(x, y), k
    assert np.array_equal(a.final_params, b.final_params)


@pytest.mark.parametrize("rule", ["fedavg", "afl", "fedfv", "aaggff-s", "fedfa", "term"])
def test_a_run_resumed_to_more_rounds_equals_one_that_never_stopped(model, data, tmp_path, rule):
    m = data.num_clients if rule in ("afl", "aaggff-s") else 3
    kw = {"clients_per_round": m, "epochs": 1, "eval_every": 2, "seed": 3}
    whole = simulate(rule, model, data, rounds=5, **kw)
    ckpt = tmp_path / "run.ckpt"
    first = simulate(rule, model, data, rounds=3, checkpoint=ckpt, **kw)
    assert first.eval_round.tolist() == [0, 2, 3]  # round 3 evaluated as the last
    resumed = simulate(rule, model, data, rounds=5, checkpoint=ckpt, resume=True, **kw)
    assert resumed.eval_round.tolist() == [0, 2, 4, 5]
    _same_history(resumed, whole)
    assert resumed.status == "completed"
    # resuming a finished run of as many rounds is a no-op
    again = simulate(rule, model, data, rounds=5, checkpoint=ckpt, resume=True, **kw)
    _same_history(again, whole)


def test_a_run_stopped_midway_resumes_bitwise(model, data, tmp_path):
    ckpt = tmp_path / "run.ckpt"
    kw = {"clients_per_round": 3, "epochs": 1, "seed": 1}
    whole = simulate("qfedavg", model, data, rounds=4, **kw)

    def stop(h):
        if h.num_rounds == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate("qfedavg", model, data, rounds=4, checkpoint=ckpt, callback=stop, **kw)
    from fairagg.simulation import load_checkpoint

    assert load_checkpoint(ckpt)["round"] == 2
    resumed = simulate("qfedavg", model, data, rounds=4, checkpoint=ckpt, resume=True, **kw)
    _same_history(resumed, whole)


def test_resume_refuses_other_settings(model, data, tmp_path):
    ckpt = tmp_path / "run.ckpt"
    simulate("fedavg", model, data, rounds=2, clients_per_round=3, epochs=1, checkpoint=ckpt)
    with pytest.raises(ValueError, match="differ from the checkpoint's in lr, seed"):
        simulate("fedavg", model, data, rounds=3, clients_per_round=3, epochs=1, seed=1,
                 lr=0.02, checkpoint=ckpt, resume=True)  # fmt: skip
    with pytest.raises(ValueError, match="the checkpoint holds 2 rounds; rounds=1 is fewer"):
        simulate("fedavg", model, data, rounds=1, clients_per_round=3, epochs=1,
                 checkpoint=ckpt, resume=True)  # fmt: skip
    with pytest.raises(ValueError, match="resume=True needs checkpoint="):
        simulate("fedavg", model, data, rounds=1, clients_per_round=3, resume=True)
    (tmp_path / "junk").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="is not a fairagg checkpoint"):
        simulate("fedavg", model, data, rounds=1, clients_per_round=3,
                 checkpoint=tmp_path / "junk", resume=True)  # fmt: skip


def test_a_failure_while_recording_a_round_checkpoints_the_round_before(
    model, data, tmp_path, monkeypatch
):
    # the evaluation after round 2 fails: the checkpoint holds round 1's state, consistent
    # (its θ, rule state, counts and history all of round 1), and resuming ends bitwise as a
    # run that never failed

    from fairagg.simulation import load_checkpoint

    sim = importlib.import_module("fairagg.simulation")
    ckpt = tmp_path / "run.ckpt"
    kw = {"clients_per_round": 3, "epochs": 1, "seed": 2}
    whole = simulate("fedfa", model, data, rounds=3, **kw)
    real, calls = sim._EvaluationSets.evaluate, [0]

    def failing(*args):
        calls[0] += 1
        if calls[0] == 3:  # round 0, round 1, then round 2's evaluation
            raise RuntimeError("evaluation failed (planted)")
        return real(*args)

    monkeypatch.setattr(sim._EvaluationSets, "evaluate", failing)
    with pytest.raises(RuntimeError, match="planted"):
        simulate("fedfa", model, data, rounds=3, checkpoint=ckpt, **kw)
    monkeypatch.setattr(sim._EvaluationSets, "evaluate", real)
    saved = load_checkpoint(ckpt)
    assert saved["round"] == 1 and saved["history"].num_rounds == 1
    assert saved["counts"].sum() == 3  # one round of 3 clients
    resumed = simulate("fedfa", model, data, rounds=3, checkpoint=ckpt, resume=True, **kw)
    _same_history(resumed, whole)


def _compiled_in(module: str):
    """A new Numba function whose Python function says it belongs to ``module``: calling it
    starts a compilation (no cache)."""
    import numba

    def plus_one(x):
        return x + 1

    plus_one.__module__ = module
    return numba.njit(plus_one)


def test_a_run_with_a_progress_bar_says_once_why_it_compiles(model, data, capsys, monkeypatch):
    # The first run after install spends its first round compiling: a run with a progress bar
    # says so once per process, when the first of fairagg's kernels starts compiling (not for
    # another package's, and not in a run without the bar); the bar then counts the rounds.
    from fairagg import simulation

    monkeypatch.setattr(simulation._CompileNotice, "said", False)

    def compile_after(module, rounds):
        def callback(history):
            if history.num_rounds in rounds:
                _compiled_in(module)(1)

        return callback

    _run(fedavg(), model, data, callback=compile_after("fairagg.probe", {1}))
    _run(fedavg(), model, data, progress=True, callback=compile_after("numpy.probe", {1}))
    assert simulation._CompileNotice.MESSAGE not in capsys.readouterr().err
    h = _run(fedavg(), model, data, progress=True, callback=compile_after("fairagg.probe", {1, 3}))
    err = capsys.readouterr().err
    assert err.count(simulation._CompileNotice.MESSAGE) == 1
    assert f"{ROUNDS}/{ROUNDS}" in err and h.status == "completed"
    _run(fedavg(), model, data, progress=True, callback=compile_after("fairagg.probe", {2}))
    assert simulation._CompileNotice.MESSAGE not in capsys.readouterr().err  # said already
    # the listener is gone after the run, also after a failing one
    from numba.core import event

    def fail(history):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(fedavg(), model, data, progress=True, callback=fail)
    assert not any(
        isinstance(x, simulation._CompileNotice) for x in event._registered["numba:compile"]
    )
    # a message that cannot be written is dropped, not raised into the compilation
    import tqdm.auto

    def broken(*args, **kwargs):
        raise OSError("stderr is closed")

    monkeypatch.setattr(simulation._CompileNotice, "said", False)
    monkeypatch.setattr(tqdm.auto.tqdm, "write", broken)
    h = _run(fedavg(), model, data, progress=True, callback=compile_after("fairagg.probe", {1}))
    assert h.status == "completed" and simulation._CompileNotice.said
