"""fairagg check --cmd: code in another process, driven over the worker protocol.

The worker is the template users copy (``fairagg check --template``) with its examples replaced
by ``tests/workers/outside_impl.py``, which cannot import fairagg (an import hook refuses it).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fairagg import cli
from fairagg.conformance import Adapter, ConformanceError, Worker, WorkerError, check
from tests.workers import make_worker, worker_command

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def worker_dir(tmp_path_factory) -> Path:
    return make_worker(tmp_path_factory.mktemp("worker"))


def cmd(folder: Path, *extra: str) -> str:
    return worker_command(folder, *extra)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------------------------- the CLI
def test_template_prints_a_worker_that_imports_nothing_from_fairagg(capsys):
    rc, out, _ = run_cli(capsys, "--template")
    assert rc == 0
    assert "def main():" in out and "PROTOCOL = 1" in out
    imported = set()
    for node in ast.walk(ast.parse(out)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported == {"inspect", "json", "math", "sys", "traceback", "numpy"}


def test_a_stateless_rule_conforms_through_the_cli(worker_dir, capsys):
    rc, out, _ = run_cli(capsys, "qfedavg", "--cmd", cmd(worker_dir), "--generated", "25")
    assert rc == 0, out
    assert out.startswith("qfedavg: conforms on ") and "25 generated examples" in out


def test_a_stateful_rule_conforms_through_the_cli(worker_dir, capsys):
    rc, out, _ = run_cli(capsys, "afl", "--cmd", cmd(worker_dir), "--generated", "25")
    assert rc == 0, out
    assert out.startswith("afl: conforms on ")


def test_a_formula_conforms_and_a_planted_mistake_is_caught_and_named(worker_dir, capsys):
    rc, out, _ = run_cli(capsys, "project_simplex", "--cmd", cmd(worker_dir))
    assert rc == 0, out
    rc, out, _ = run_cli(
        capsys, "project_simplex", "--cmd", cmd(worker_dir, "--mistake", "off-by-one")
    )
    assert rc == 1
    assert "your implementation differs from fairagg" in out
    assert "the public q-FFL code's simplex projection (fair_flearn's project)" in out


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        ("norm-not-squared", "your norm is not squared"),
        ("no-epsilon", "ε is missing"),
        ("flgo-epsilon", "is epsilon = 1e-08 where this check has epsilon = 1e-10"),
        ("shared-loss", "your step uses one loss for every client"),
    ],
)
def test_a_planted_qfedavg_mistake_is_caught_and_named_through_the_worker(
    worker_dir, capsys, mistake, named
):
    rc, out, _ = run_cli(
        capsys, "qfedavg", "--cmd", cmd(worker_dir, "--mistake", mistake), "--generated", "100"
    )
    assert rc == 1
    assert named in out


def test_a_declared_difference_is_accepted_and_the_rest_checked(worker_dir, capsys):
    worker = cmd(worker_dir, "--mistake", "flgo-epsilon")
    # another ε shows only where losses are near 0: 100 examples reach such a case
    rc, out, _ = run_cli(capsys, "qfedavg", "--cmd", worker, "--generated", "100")
    assert rc == 1
    rc, out, _ = run_cli(
        capsys, "qfedavg", "--cmd", worker, "--generated", "100", "--accept", "epsilon=1e-8"
    )
    assert rc == 0, out
    assert "accepted as declared differences (epsilon = 1e-08)" in out
    assert "generated examples drew: q in [0, 20]" in out
    # another ε than the one declared is not accepted
    rc, out, _ = run_cli(
        capsys, "qfedavg", "--cmd", worker, "--generated", "100", "--accept", "epsilon=1e-9"
    )
    assert rc == 1 and "is epsilon = 1e-08" in out
    rc, _, err = run_cli(capsys, "qfedavg", "--cmd", worker, "--accept", "eps")
    assert rc == 2 and "accept: unknown difference 'eps'" in err
    rc, _, err = run_cli(capsys, "qfedavg", "--cmd", worker, "--accept", "epsilon")
    assert rc == 2 and "'epsilon' needs the value your code uses" in err


def test_round_base_feeds_the_outside_code_its_own_round_numbers(worker_dir, capsys):
    rc, out, _ = run_cli(capsys, "fedavg", "--cmd", cmd(worker_dir), "--generated", "10")
    assert rc == 1
    assert "ValueError: rounds count from 1; got 0" in out
    rc, out, _ = run_cli(
        capsys, "fedavg", "--cmd", cmd(worker_dir), "--generated", "10", "--round-base", "1"
    )
    assert rc == 0, out


def test_a_skip_reply_counts_the_case_as_outside_the_domain(worker_dir, capsys):
    rc, out, _ = run_cli(
        capsys, "fedavg", "--cmd", cmd(worker_dir, "--mistake", "domain"), "--generated", "30"
    )
    assert rc == 0, out
    n_out = int(out.split("; ")[1].split(" cases outside")[0])
    assert n_out >= 1  # single_client at least


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["afl"], "check needs --cmd"),
        ([], "check needs a TARGET"),
        (["nosuch", "--cmd", "true"], "target must be a registered rule"),
        (["aaggff-s", "--cmd", "{py}"], "does not implement 'aaggff-s'"),
        (["fedavg", "--cmd", "{py}", "--generated", "-1"], "--generated must be between 0 and"),
        (["fedavg", "--cmd", "{py}", "--param", "q=2"], "'fedavg' has no parameter 'q'"),
        (["fedavg", "--cmd", "{py}", "--golden", "nosuch"], "has no case 'nosuch'"),
        (["fedavg", "--cmd", "/nonexistent/worker"], "cannot start the worker"),
        (["fedavg", "--cmd", "true"], "exited (status 0) before answering request 1"),
    ],
)
def test_usage_errors_are_one_line_and_status_2(worker_dir, capsys, argv, message):
    argv = [a.replace("{py}", cmd(worker_dir)) for a in argv]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2
    assert out == ""
    assert err.startswith("fairagg: error: ") and message in err


# ---------------------------------------------------------------------------- the Worker API
def test_check_takes_a_worker_and_raises_with_the_named_mistake(worker_dir):
    with Worker(cmd(worker_dir, "--mistake", "off-by-one")) as w:
        assert w.targets == [
            "afl", "fedavg", "fedfv", "fedmgda", "project_simplex", "propfair", "qfedavg", "term"
        ]  # fmt: skip
        with pytest.raises(ConformanceError, match="code's simplex projection") as info:
            check(w, "project_simplex", hypothesis=False)
    assert info.value.mismatch.quantity == "out"


def test_the_worker_reports_what_the_code_raised_as_its_result(tmp_path):
    worker = tmp_path / "raises.py"
    worker.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    if req['op'] == 'hello':\n"
        "        targets = ['project_simplex']\n"
        "        res = {'id': req['id'], 'result': {'protocol': 1, 'targets': targets}}\n"
        "    else:\n"
        "        res = {'id': req['id'], 'error': {'type': 'ZeroDivisionError', 'message': 'x'}}\n"
        "    print(json.dumps(res), flush=True)\n",
        encoding="utf-8",
    )
    with Worker([sys.executable, str(worker)]) as w:
        report = check(w, "project_simplex", hypothesis=False, raise_on_mismatch=False)
    assert report.mismatch.quantity == "exception"
    assert report.mismatch.detail == "your function raised ZeroDivisionError: x"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("print('hello there', flush=True)", "wrote a line that is not JSON on its stdout"),
        ("print(json.dumps({'id': 99, 'result': None}), flush=True)", "answered request 1 with"),
        (
            "import time; time.sleep(30)",
            "sent no reply to request 1 (hello) within the timeout, 1 s",
        ),
        ("sys.stderr.write('boom\\n'); sys.exit(3)", "exited (status 3)"),
        (
            "print(json.dumps({'id': 1, 'result': {'protocol': 2}}), flush=True)",
            "answered hello with",
        ),
    ],
)
def test_a_broken_worker_is_a_clear_worker_error(tmp_path, body, message):
    worker = tmp_path / "broken.py"
    worker.write_text(f"import json, sys\nsys.stdin.readline()\n{body}\n", encoding="utf-8")
    with pytest.raises(WorkerError, match="the worker .*") as info:
        Worker([sys.executable, str(worker)], timeout=1)
    assert message in str(info.value)
    if "status 3" in message:
        assert "its stderr ends with:\nboom" in str(info.value)


def test_worker_arguments_are_checked():
    with pytest.raises(ValueError, match="command must not be empty"):
        Worker("  ")
    with pytest.raises(ValueError, match="command cannot be split into arguments"):
        Worker("python 'w.py")
    with pytest.raises(TypeError, match="command must be a string"):
        Worker(3)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        Worker("true", timeout=0)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        Worker("true", timeout=2.0**1000)
    with pytest.raises(TypeError, match="timeout must be a number of seconds"):
        Worker("true", timeout="1")


def test_non_finite_numbers_travel_as_strings():
    from fairagg._worker import decode, encode

    a = np.array([1.5, np.inf, -np.inf, np.nan])
    enc = encode({"x": a, "s": np.float64(np.inf), "i": np.int64(3), "b": np.array([True])})
    assert enc["x"]["data"][1:] == ["inf", "-inf", "nan"]
    assert enc["s"] == "inf" and enc["i"] == 3
    back = decode(enc)
    np.testing.assert_array_equal(back["x"], a)
    assert back["b"].dtype == bool
    np.testing.assert_array_equal(decode([1, "inf", 2.5]), [1.0, np.inf, 2.5])
    assert decode(["fedavg", "afl"]) == ["fedavg", "afl"]


# ------------------------------------------------------- the same options for Python functions
def _fedavg_weights(num_samples):
    return num_samples / num_samples.sum()


def test_skip_assume_and_domain_count_cases_outside_instead_of_failing():
    import hypothesis

    from fairagg.conformance import Skip

    def skips(num_samples):
        if num_samples.size < 2:
            raise Skip("one client")
        return _fedavg_weights(num_samples)

    def assumes(num_samples):
        hypothesis.assume(num_samples.size >= 2)
        return _fedavg_weights(num_samples)

    for fn in (skips, assumes):
        report = check(fn, "fedavg_weights", max_examples=40)
        assert report and report.outside >= 1, report
        assert "cases outside your domain" in str(report)

    def wrong_on_one(num_samples):
        return num_samples * 0.0 if num_samples.size < 2 else _fedavg_weights(num_samples)

    assert not check(wrong_on_one, "fedavg_weights", max_examples=40, raise_on_mismatch=False)
    report = check(
        wrong_on_one,
        "fedavg_weights",
        max_examples=40,
        domain=lambda inputs, params: np.size(inputs["num_samples"]) >= 2,
    )
    assert report and report.outside >= 1
    plain = check(_fedavg_weights, "fedavg_weights", max_examples=40)
    assert plain.outside == 0 and "outside" not in str(plain)


def test_round_base_and_domain_for_a_python_rule():
    def from_one(params, deltas, num_samples, round_index):
        if round_index < 1:
            raise ValueError("rounds count from 1")
        return params - _fedavg_weights(num_samples) @ deltas

    assert not check(from_one, "fedavg", max_examples=5, raise_on_mismatch=False)
    assert check(from_one, "fedavg", max_examples=5, round_base=1)
    with pytest.raises(TypeError, match="round_base must be an int"):
        check(from_one, "fedavg", round_base=1.0)
    with pytest.raises(TypeError, match="domain must be callable"):
        check(from_one, "fedavg", domain=3)
    with pytest.raises(TypeError, match="domain raised ZeroDivisionError"):
        check(from_one, "fedavg", round_base=1, domain=lambda i, p: 1 / 0)


def test_fair_flearn_afl_projection_is_caught_by_the_default_golden_cases_and_named(
    worker_dir, capsys
):
    # The public q-FFL code's projection (its ρ test sums the entries before the j-th only)
    # agrees with the exact one whenever no entry is clipped. The golden case with γ_λ = 1
    # clips, and so does the one at the published step 0.01 whose λ reaches a face of the
    # simplex; the generated cases draw γ_λ up to 2.
    worker = cmd(worker_dir, "--mistake", "off-by-one")
    rc, out, _ = run_cli(capsys, "afl", "--cmd", worker, "--generated", "0")
    assert rc == 1
    assert "golden case rules/afl/large_lambda_step" in out
    assert "the public q-FFL code's simplex projection (fair_flearn's project)" in out
    # at the published step alone (the large-step golden case is then skipped), still caught
    rc, out, _ = run_cli(
        capsys, "afl", "--cmd", worker, "--generated", "0", "--param", "lambda_lr=0.01"
    )
    assert rc == 1, out
    assert "golden case rules/afl/clipping_at_default_step" in out
    assert "fair_flearn's project" in out
    rc, out, _ = run_cli(capsys, "afl", "--cmd", worker, "--golden", "none", "--generated", "100")
    assert rc == 1 and "fair_flearn's project" in out


# ------------------------------------------------------------------ keep going, report all
def _project_fair_flearn(y, total):
    u = np.sort(y)[::-1]
    css = np.cumsum(u)
    j = np.arange(1, y.size + 1)
    rho = np.nonzero(u + (total - (css - u)) / j > 0)[0][-1]
    return np.maximum(y + (total - css[rho]) / (rho + 1), 0.0)


def test_keep_going_compares_every_case_and_tabulates_every_quantity():
    first = check(_project_fair_flearn, "project_simplex", raise_on_mismatch=False, max_examples=30)
    assert first.failed >= 2 and first.rows == ()
    report = check(
        _project_fair_flearn,
        "project_simplex",
        keep_going=True,
        raise_on_mismatch=False,
        max_examples=30,
    )
    golden = [r for r in report.rows if r.case.startswith("golden case")]
    assert {r.case for r in golden} == {
        f"golden case formulas/project_simplex/{c}"
        for c in ("small", "medium", "ties", "inside", "single", "total_two")
    }
    verdicts = {r.case.rsplit("/", 1)[1]: r.verdict for r in golden if r.quantity == "out"}
    assert verdicts["small"] == "differs" and verdicts["single"] == "agrees"
    differs = [r for r in golden if r.verdict == "differs"]
    assert all(r.max_abs > 1e-3 for r in differs)
    assert report.failed == first.failed and report.generated == 30  # the same cases ran
    assert any(r.case.startswith("generated ") for r in report.rows)
    text = str(report)
    assert text.splitlines()[0].split()[:3] == ["case", "round", "quantity"]
    assert f"project_simplex: differs on {report.failed} of 36 cases compared" in text
    assert "generated (30 examples)" in text
    assert "the first difference:" in text and "fair_flearn's project" in text
    # the first difference is the minimised one, as without keep_going
    assert report.mismatch.inputs["y"].size == first.mismatch.inputs["y"].size


def test_keep_going_marks_rounds_after_a_difference_and_what_was_not_returned():
    def wrong_in_round_1(params, deltas, num_samples, round_index):
        w = num_samples / num_samples.sum()
        return params - w @ deltas * (1.5 if round_index == 1 else 1.0)

    report = check(
        wrong_in_round_1, "fedavg", keep_going=True, hypothesis=False, raise_on_mismatch=False
    )
    small = [r for r in report.rows if r.case == "golden case rules/fedavg/small"]
    assert [(r.round, r.quantity, r.verdict) for r in small] == [  # the formula's order
        (0, "weights", "not returned"),
        (0, "params", "agrees"),
        (1, "weights", "not returned"),
        (1, "params", "differs"),
        (2, "(round)", "not compared (after a difference, from your θ)"),
    ]
    assert report.not_returned == ("weights",)
    assert "not checked, as your code did not return them: weights" in str(report)


def test_every_report_says_what_was_not_checked():
    def afl(params, num_clients, lambda_lr, lr=None):
        lam = np.full(num_clients, 1.0 / num_clients)

        def step(params, gradients, losses, client_ids, lr):
            nonlocal lam
            new = params - lr * lam[client_ids] @ gradients
            lam = _project_fair_flearn(lam + lambda_lr * losses, 1.0)  # exact: one client set
            return new

        return step

    from fairagg.conformance import Adapter

    report = check(afl, "afl", adapter=Adapter(stateful=True), golden=["small"], hypothesis=False)
    assert report.not_returned == ("mixture", "model", "weights")
    assert str(report).endswith(
        "not checked, as your code did not return them: mixture, model, weights"
    )


def test_the_cli_keep_going_prints_the_table(worker_dir, capsys):
    rc, out, _ = run_cli(
        capsys,
        "project_simplex",
        "--cmd",
        cmd(worker_dir, "--mistake", "off-by-one"),
        "--keep-going",
        "--generated",
        "10",
    )
    assert rc == 1
    assert out.splitlines()[0].split()[:3] == ["case", "round", "quantity"]
    assert "golden case formulas/project_simplex/total_two" in out
    assert "the first difference:" in out


def test_one_tolerance_definition_by_precision():
    from fairagg._tolerance import PERTURBATION, RUNS, SAFETY
    from fairagg.vectors import BOUND, PRECISIONS, SCHEMA

    assert PRECISIONS == {
        "float64": {"unit_roundoff": 2.0**-53},
        "float32": {"unit_roundoff": 2.0**-24},
        "solver": {"unit_roundoff": 2.0**-53, "solver_tol": 1e-6},
    }
    assert BOUND == {"perturbation": PERTURBATION, "safety": SAFETY, "runs": RUNS}
    assert {k: {kk: vv for kk, vv in v.items() if kk != "rule"}
            for k, v in SCHEMA["precisions"].items()} == PRECISIONS  # fmt: skip

    def float32_weights(num_samples):
        n = np.asarray(num_samples, dtype=np.float32)
        return n / n.sum()

    off = check(float32_weights, "fedavg_weights", raise_on_mismatch=False, max_examples=50)
    assert not off and "(tolerance rtol" in off.mismatch.detail
    # the float32 cause is named: fairagg within float32's error bound reproduces yours
    assert off.mismatch.diagnosis.startswith("your outputs agree with fairagg's within float32")
    assert "precision='float32' (--precision float32)" in off.mismatch.diagnosis
    assert check(float32_weights, "fedavg_weights", precision="float32", max_examples=50)
    tight = check(
        float32_weights, "fedavg_weights", precision="float32", rtol=1e-9, atol=1e-9,
        raise_on_mismatch=False, max_examples=50,
    )  # fmt: skip
    assert not tight
    with pytest.raises(ValueError, match="precision must be one of 'float64', 'solver', "):
        check(float32_weights, "fedavg_weights", precision="float16")


def test_the_error_bound_is_per_output_and_sees_what_a_blanket_1e_9_passed():
    # FLGo's loss offset 1e-8 (fairagg: 1e-10) moves θ^{t+1} by less than 1e-9 where losses
    # are near 1: a blanket tolerance of 1e-9 passed it. Each output's error bound does not.
    from fairagg.conformance._checker import Checker

    def flgo(params, deltas, losses, q, lr):
        L = 1.0 / lr
        dw = L * deltas
        f = losses + 1e-8
        h = q * f ** (q - 1) * np.sum(dw * dw, axis=1) + L * f**q
        return params - (f**q) @ dw / h.sum()

    small = check(flgo, "qfedavg_step", golden=["small"], hypothesis=False,
                  raise_on_mismatch=False)  # fmt: skip
    assert not small
    assert check(flgo, "qfedavg_step", golden=["small"], hypothesis=False, rtol=1e-9, atol=1e-9)
    # the bound is the spread of fairagg's own outputs under round-off-sized perturbations:
    # per output, far below 1e-9 on this well-conditioned case
    from fairagg.conformance._common import Case
    from fairagg.vectors import case_inputs

    _, inputs, params = case_inputs("formula", "qfedavg_step")["small"]
    checker = Checker(flgo, "qfedavg_step", Adapter(), {})
    o = checker.run(Case("golden", "small", inputs, params))
    assert o.tols["params"].atol < 1e-13 and o.tols["params"].rtol < 1e-13


def test_solver_precision_takes_the_solver_tolerance():
    from fairagg.rules.fedmgda import fedmgda_weights

    def noisy(deltas, num_samples, epsilon, server_lr=1.0):  # an argmin good to about 3e-5
        w = fedmgda_weights(deltas, num_samples, epsilon, server_lr)
        return {"min_norm": w.min_norm * (1 + 3e-5) + 3e-5}

    assert not check(noisy, "fedmgda_weights", precision="solver", raise_on_mismatch=False,
                     max_examples=20)  # fmt: skip
    report = check(noisy, "fedmgda_weights", precision="solver", solver_tol=1e-4, max_examples=20)
    assert report
    with pytest.raises(ValueError, match="solver_tol must be a finite positive number"):
        check(noisy, "fedmgda_weights", precision="solver", solver_tol=0.0)


def test_the_cli_takes_the_precision(worker_dir, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["check", "fedavg", "--cmd", cmd(worker_dir), "--precision", "float16"])
    assert info.value.code == 2
    assert "invalid choice: 'float16'" in capsys.readouterr().err
    rc, out, _ = run_cli(
        capsys, "qfedavg", "--cmd", cmd(worker_dir), "--precision", "float32", "--generated", "5"
    )
    assert rc == 0 and out.startswith("qfedavg: conforms")


# --------------------------------------------------------- results written per case and round
def test_vectors_compare_reads_results_per_case_and_round(tmp_path, capsys):
    from fairagg.conformance import compare_results
    from fairagg.vectors import load_case

    golden = Path(__file__).parent / "golden"
    small = load_case(golden / "formulas" / "project_simplex" / "small.json")["expected"]["out"]
    afl = load_case(golden / "rules" / "afl" / "small.json")["expected"]["rounds"]
    rounds = [{"params": r["params"].tolist(), "mixture": r["mixture"].tolist()} for r in afl]
    rounds[1]["mixture"] = (np.asarray(rounds[1]["mixture"]) * 1.01).tolist()
    results = {
        "formulas/project_simplex/small": {"out": (small * (1 + 2e-16)).tolist()},
        "formulas/project_simplex/single": {"out": [0.5]},
        "rules/afl/small": {"rounds": rounds},
    }
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(results))
    report = compare_results(path, golden)
    assert report.failed == 2 and report.golden == 3
    verdicts = [(r.case.split("/", 1)[1], r.round, r.quantity, r.verdict) for r in report.rows]
    assert ("project_simplex/small", None, "out", "agrees") in verdicts
    assert ("project_simplex/single", None, "out", "differs") in verdicts
    assert ("afl/small", 1, "mixture", "differs") in verdicts
    assert ("afl/small", 2, "(round)", "not compared (after a difference, from your θ)") in verdicts
    assert report.not_returned == ("model", "weights")
    rc = cli.main(["vectors", "--compare", str(path), "--out", str(golden)])
    out = capsys.readouterr().out
    assert rc == 1 and "golden files: differs on 2 of 3 cases compared" in out
    # float32 results pass at the float32 precision
    as32 = [{k: np.asarray(r[k], np.float32).tolist() for k in ("params", "mixture")} for r in afl]
    path.write_text(json.dumps({"rules/afl/small": {"rounds": as32}}))
    assert not compare_results(path, golden).failed == 0
    assert compare_results(path, golden, precision="float32").failed == 0
    # errors name the argument
    path.write_text(json.dumps({"rules/afl/nosuch": {}}))
    with pytest.raises(ValueError, match="results: no golden case 'rules/afl/nosuch'"):
        compare_results(path, golden)
    with pytest.raises(FileNotFoundError, match="golden: .* holds no index.json"):
        compare_results(path, tmp_path)


def test_check_and_the_golden_files_use_the_same_error_bounds():
    # one definition: what check compares a golden case within is what its file carries
    from fairagg.conformance._check import _golden_cases
    from fairagg.conformance._checker import Checker
    from fairagg.conformance._results import file_tolerance
    from fairagg.vectors import load_case

    golden = Path(__file__).parent / "golden"
    compared = 0
    for target, names in (("qfedavg", ["small", "near_zero_losses"]), ("fedfv_direction",
                          ["cancelling"]), ("project_simplex", ["medium"])):  # fmt: skip
        kind = "rules" if target == "qfedavg" else "formulas"
        for case in _golden_cases(target, names):
            for precision in ("float64", "float32"):
                checker = Checker(lambda **kw: None, target, Adapter(), {}, precision)
                params = checker.params_of(case)
                want = checker.compute(case.inputs, params)
                bounds = checker.tolerances(case.inputs, params, want)
                stored = load_case(golden / kind / target / f"{case.label.rsplit('/', 1)[1]}.json")
                for k, entry in stored["tolerance"].items():
                    ours = bounds[k]
                    theirs = file_tolerance(entry, 0.0, precision, 1e-6)
                    assert ours.exact == theirs.exact, (target, k)
                    np.testing.assert_allclose([ours.rtol, ours.atol], [theirs.rtol, theirs.atol],
                                               rtol=1e-12, atol=0.0)  # fmt: skip
                    compared += 1
    assert compared >= 10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fedavg", "--round-base", "-1"], "--round-base must be >= 0"),
        (["fedavg", "--solver-tol", "1e-3"], "--solver-tol applies to --precision solver"),
        (["fedavg", "--precision", "solver", "--solver-tol", "0"], "--solver-tol must be"),
        (["fedavg", "--golden", "none", "--generated", "0"], "leave nothing to check"),
        (["qfedavg", "--accept", "epsilon=1e-8", "--accept", "epsilon=1e-9"], "declared twice"),
        (["fedavg", "--seed", "-2"], "--seed must be >= 0"),
    ],
)
def test_options_that_cannot_mean_anything_are_usage_errors(worker_dir, capsys, argv, message):
    rc, out, err = run_cli(capsys, *argv[:1], "--cmd", cmd(worker_dir), *argv[1:])
    assert rc == 2 and out == "", out
    assert err.startswith("fairagg: error: ") and message in err, err


def test_the_python_api_takes_the_command_lines_options():
    def fedavg(params, deltas, num_samples):
        return params - (num_samples / num_samples.sum()) @ deltas

    report = check(fedavg, "fedavg", generated=0)
    assert report.conforms and report.generated == 0 and report.golden >= 6
    assert check(fedavg, "fedavg", generated=7, golden=False).generated == 7
    with pytest.raises(ValueError, match="solver_tol applies to precision='solver'"):
        check(fedavg, "fedavg", solver_tol=1e-3)
    with pytest.raises(ValueError, match="round_base must be >= 0"):
        check(fedavg, "fedavg", round_base=-1)
    with pytest.raises(ValueError, match="no golden case and no generated example"):
        check(fedavg, "fedavg", golden=False, generated=0)
