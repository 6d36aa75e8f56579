"""Golden vectors (``fairagg vectors``): the stored set equals what fairagg computes today, it
regenerates bit for bit from its seed, covers every rule and formula, and its check catches a
changed expectation."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from fairagg import RULES
from fairagg.cli import main
from fairagg.vectors import (
    FORMULAS,
    INLINE_MAX,
    SCHEMA,
    _encode,
    _exact_gram,
    check_vectors,
    compare_vectors,
    load_case,
    write_vectors,
)

GOLDEN = Path(__file__).parent / "golden"
COMMON_RULE_CASES = {"small", "medium", "ties", "zero_updates", "single_client", "extreme_losses"}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("vectors")
    write_vectors(out)
    return out


def _index(root: Path) -> list[dict]:
    return json.loads((root / "index.json").read_text())["cases"]


def test_stored_vectors_equal_what_fairagg_computes_today():
    """Regenerate the stored set with ``fairagg vectors --out tests/golden`` after a deliberate
    change of a formula (and say why in the commit)."""
    assert check_vectors(GOLDEN) == []


def test_vectors_regenerate_bit_for_bit_from_the_seed(fresh):
    stored = sorted(p.relative_to(GOLDEN) for p in GOLDEN.rglob("*") if p.is_file())
    again = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    assert stored == again  # no stale, no missing case
    for rel in stored:
        if rel.suffix == ".npy" and ".inputs." in rel.name:
            assert (GOLDEN / rel).read_bytes() == (fresh / rel).read_bytes(), rel
        if rel.suffix == ".json" and rel.name not in ("index.json", "schema.json"):
            a, b = json.loads((GOLDEN / rel).read_text()), json.loads((fresh / rel).read_text())
            for key in ("inputs", "params", "description", "formula", "seed", "args"):
                assert a.get(key) == b.get(key), (rel, key)
            assert a["tolerance"].keys() == b["tolerance"].keys()


def test_inputs_are_exact_sums_independent_of_blas():
    """Derived inputs (a Gram matrix, a QP's A) are the correctly rounded sums of the products,
    so they regenerate bit for bit on any machine (a BLAS product's last digits depend on its
    kernel); the stored ones equal math.fsum recomputed here."""
    gram = load_case(GOLDEN / "formulas" / "min_norm_weights" / "medium.json")["inputs"]["gram"]
    rng = np.random.default_rng(0)
    V = rng.standard_normal((30, 10)) * np.exp(rng.standard_normal((30, 1)))
    G = _exact_gram(V)
    want = np.array([[math.fsum(V[i] * V[j]) for j in range(30)] for i in range(30)])
    np.testing.assert_array_equal(G, want)
    np.testing.assert_array_equal(G, G.T)
    assert gram.shape == (30, 30)
    np.testing.assert_array_equal(gram, gram.T)


def test_compare_reports_each_cases_distance_in_ulps(fresh, tmp_path, capsys):
    """A set generated here is bit-identical (0 ulps everywhere); moving one stored entry by
    3 ulps of its output's scale is reported as 3 ulps of that case, a passing comparison, and
    a line of ``fairagg vectors --check``."""
    checks = compare_vectors(fresh)
    assert checks and all(c.fails == [] and c.ulps == 0.0 for c in checks)
    root = tmp_path / "nudged"
    shutil.copytree(fresh, root)
    path = root / "rules" / "fedavg" / "small.json"
    body = json.loads(path.read_text())
    tol = body["tolerance"]["params"]
    scale = tol["atol"] / tol["rtol"]
    body["expected"]["rounds"][1]["params"]["data"][2] += 3 * float(np.spacing(scale))
    path.write_text(json.dumps(body))
    by_case = {c.where: c for c in compare_vectors(root)}
    moved = by_case["rule fedavg/small"]
    assert moved.fails == []
    assert moved.ulps == pytest.approx(3.0, abs=0.5)
    assert 0 < moved.tolerance_used < 1e-3
    assert all(c.ulps == 0.0 for w, c in by_case.items() if w != "rule fedavg/small")
    assert main(["vectors", "--check", "--out", str(root)]) == 0
    out = capsys.readouterr().out
    assert "rule fedavg/small" in out
    n = len(checks)
    assert f"{n} of {n} cases agree with this fairagg ({n - 1} bit-identical" in out


def test_every_rule_and_formula_has_its_cases():
    index = _index(GOLDEN)
    by_name: dict[tuple[str, str], set[str]] = {}
    for c in index:
        by_name.setdefault((c["kind"], c["name"]), set()).add(c["case"])
    assert {n for k, n in by_name if k == "rule"} == set(RULES)
    assert {n for k, n in by_name if k == "formula"} == set(FORMULAS)
    for name in RULES:
        assert COMMON_RULE_CASES <= by_name[("rule", name)], name
    for name in FORMULAS:
        assert len(by_name[("formula", name)]) >= 2, name
    # Errors are expected results only where the library documents them (PropFair's M).
    errors = {(c["name"], c["case"]) for c in index if c["error"]}
    assert errors == {("propfair", "extreme_losses"), ("propfair-eg", "extreme_losses")}


def test_case_files_follow_the_schema():
    required = set(SCHEMA["required"])
    for entry in _index(GOLDEN):
        body = json.loads((GOLDEN / entry["file"]).read_text())
        assert required <= body.keys(), entry["file"]
        assert body["kind"] == entry["kind"] and body["name"] == entry["name"]
        if body["kind"] == "formula":
            assert body["args"] == list(FORMULAS[body["name"]].args)
        expected = body["expected"]
        if "error" in expected:
            assert expected["error"]["type"] in ("ValueError", "TypeError")
            continue
        outputs = expected["rounds"][0].keys() if "rounds" in expected else expected.keys()
        assert set(outputs) == set(body["tolerance"]), entry["file"]
        for tol in body["tolerance"].values():
            # an error bound: rtol > 0, atol ≥ 0 (0 where no perturbation moves the output)
            assert tol.get("exact") is True or (tol["rtol"] > 0 and tol["atol"] >= 0)
            if not tol.get("exact"):
                f32 = tol["float32"]  # the float32 bound is the wider one
                assert f32["rtol"] > tol["rtol"] and f32["atol"] >= tol["atol"], tol


def test_arrays_round_trip_through_json_and_npy():
    case = load_case(GOLDEN / "rules" / "qfedavg" / "medium.json")
    D = case["inputs"]["rounds"][0]["deltas"]
    assert isinstance(D, np.ndarray) and D.dtype == np.float64 and D.size > INLINE_MAX
    files: dict[str, np.ndarray] = {}
    again = _encode(case["inputs"], files, "medium", "inputs")
    body = json.loads((GOLDEN / "rules" / "qfedavg" / "medium.json").read_text())
    assert again == body["inputs"]
    for name, arr in files.items():
        assert np.array_equal(np.load(GOLDEN / "rules" / "qfedavg" / name), arr)


def _perturb_json(path: Path, mutate) -> None:
    body = json.loads(path.read_text())
    mutate(body)
    path.write_text(json.dumps(body))


def test_check_catches_changed_expectations(tmp_path):
    """The check can fail: a 1e-9 relative change of one stored output, a changed array in a
    ``.npy`` file, an expected error that no longer happens, and an error that now happens."""
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root)

    def nudge(body):
        body["expected"]["rounds"][1]["params"]["data"][2] *= 1 + 1e-9

    _perturb_json(root / "rules" / "fedavg" / "small.json", nudge)
    big = root / "formulas" / "fedfv_direction" / "medium.expected.coefficients.npy"
    arr = np.load(big)
    arr[5, 3] += 1e-6
    np.save(big, arr)

    def no_error(body):
        body["expected"] = {"out": {"dtype": "float64", "shape": [1], "data": [0.0]}}
        body["tolerance"] = {"out": {"rtol": 1e-12, "atol": 1e-12}}

    _perturb_json(root / "rules" / "propfair" / "extreme_losses.json", no_error)

    def error(body):
        body["expected"] = {"error": {"type": "ValueError", "message": "planted"}}

    _perturb_json(root / "formulas" / "project_simplex" / "small.json", error)
    fails = check_vectors(root)
    assert len(fails) == 4, fails
    assert any("fedavg/small round 1: params differs" in f for f in fails)
    assert any("fedfv_direction/medium: coefficients differs" in f for f in fails)
    assert any("propfair/extreme_losses: raised ValueError" in f for f in fails)
    assert any("project_simplex/small: expected ValueError, computed a result" in f for f in fails)


def test_cli_writes_and_checks(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["vectors", "--out", str(out)]) == 0
    assert (out / "schema.json").is_file() and (out / "index.json").is_file()
    assert main(["vectors", "--check", "--out", str(out)]) == 0
    assert f"{len(_index(out))} of {len(_index(out))} cases agree" in capsys.readouterr().out

    def nudge(body):
        body["expected"]["out"]["data"][0] += 1e-6

    _perturb_json(out / "formulas" / "fedavg_weights" / "small.json", nudge)
    assert main(["vectors", "--check", "--out", str(out)]) == 1
    assert "fedavg_weights/small: out differs" in capsys.readouterr().out
    assert main(["vectors", "--check", "--out", str(tmp_path / "none")]) == 2
    assert main(["vectors", "--out", str(out), "--seed", "-1"]) == 2


def test_another_seed_draws_other_inputs(tmp_path):
    write_vectors(tmp_path, seed=7)
    a = load_case(tmp_path / "rules" / "fedavg" / "small.json")
    b = load_case(GOLDEN / "rules" / "fedavg" / "small.json")
    assert a["seed"] == 7 and not np.array_equal(a["inputs"]["params0"], b["inputs"]["params0"])
    assert check_vectors(tmp_path) == []


def test_stored_non_unique_outputs_say_which_problem_they_minimise():
    # Every stored case of a target with a non-unique argmin marks those outputs, so that a
    # reader of the JSON knows to compare the objective and KKT conditions there.
    from fairagg.vectors import NON_UNIQUE

    seen = 0
    for path in sorted(GOLDEN.rglob("*.json")):
        if path.name in ("index.json", "schema.json"):
            continue
        case = json.loads(path.read_text())
        for k, text in NON_UNIQUE.get(case["name"], {}).items():
            if k in case["tolerance"]:
                assert case["tolerance"][k]["argmin"] == text, path
                seen += 1
    assert seen >= 30


def test_every_case_states_every_parameter_it_runs_with(tmp_path):
    import shutil

    from fairagg.vectors import compare_vectors, resolved_params, schema

    root = Path(__file__).parent / "golden"
    assert json.loads((root / "schema.json").read_text()) == json.loads(json.dumps(schema()))
    afl = json.loads((root / "rules" / "afl" / "large_lambda_step.json").read_text())
    assert afl["params"] == {"lambda_lr": 1.0}
    assert afl["resolved_params"] == {"batch_size": None, "lambda_lr": 1.0, "lr": None}
    fedfv = json.loads((root / "rules" / "fedfv" / "flgo.json").read_text())
    assert fedfv["resolved_params"]["variant"] == "flgo" and fedfv["resolved_params"]["tau"] == 2
    assert resolved_params("formula", "min_norm_weights", {})["upper"] == np.inf
    assert schema()["defaults"]["formulas"]["min_norm_weights"]["upper"] == "inf"
    # a file whose stated parameters are not what this fairagg resolves is a failure
    copy = tmp_path / "golden"
    shutil.copytree(root, copy)
    path = copy / "rules" / "afl" / "small.json"
    body = json.loads(path.read_text())
    body["resolved_params"]["lambda_lr"] = 0.02
    path.write_text(json.dumps(body))
    fails = [c for c in compare_vectors(copy) if c.fails]
    assert [c.where for c in fails] == ["rule afl/small"]
    assert "resolved_params" in fails[0].fails[0]


def test_public_names_are_fairagg_vectors_names():
    # The package's rooms are private modules; its public functions and classes are documented
    # and compared as fairagg.vectors's.
    import inspect

    from fairagg import vectors

    for name in vectors.__all__:
        obj = getattr(vectors, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert obj.__module__ == "fairagg.vectors", name
