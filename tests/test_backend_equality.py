"""What "equal" means between backends, rule by rule (docs: Conventions, "Backends").

Each registered rule's step on a compiled backend must stay within the bound its category
states against the NumPy specification: A (weights bitwise, the weighted sum to round-off),
B (weights read the updates' norms or Gram matrix: A's bound plus the weights' own difference)
or C (FedFa: A's bound carried through the server step). The table in the docs must list every
rule with the category this file holds it to.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fairagg import RULES, make_rule
from fairagg.kernels import BACKENDS
from tests.conftest import on_simulator
from tests.strategies import rule_round

U = np.finfo(np.float64).eps / 2

#: The bound each rule is held to: the docs' table must say the same.
CATEGORY = {
    "fedavg": "A",
    "fairavg": "A",
    "qfedavg": "B",
    "qfedsgd": "B",
    "afl": "A",
    "term": "A",
    "propfair": "A",
    "fedfv": "B",
    "fedmgda": "B",
    "fedfa": "C",
    "qffl-eg": "A",
    "term-eg": "A",
    "propfair-eg": "A",
    "aaggff-s": "A",
    "aaggff-d": "A",
}

DOC = Path(__file__).resolve().parents[1] / "docs" / "pages" / "guides" / "conventions.md"


def _sizes(backend):
    if backend == "cuda" and on_simulator():  # the simulator runs every thread in Python
        return ((4, 120),)
    return ((3, 200), (10, 3000), (40, 20000))


def _fedfa_factor(rule) -> float:
    """1 + η_s|1 − γ|: how the server step carries the average's round-off (η_s = the clients'
    lr where the rule takes it from the reports)."""
    hp = rule.hyperparams
    eta = hp.get("eta_s")
    eta = 0.1 if eta is None else eta  # _reports' lr
    return 1.0 + abs(eta) * abs(1.0 - hp["gamma"])


@pytest.mark.parametrize("backend", BACKENDS[1:])
@pytest.mark.parametrize("name", sorted(RULES))
def test_each_rule_is_within_its_bound_on_every_backend(name, backend):
    for m, d in _sizes(backend):
        for seed in range(2 if backend == "cuda" and on_simulator() else 3):
            theta, reports, K = rule_round(name, m, d, np.random.default_rng(seed))
            out = {}
            for b in ("numpy", backend):
                rule = make_rule(name, backend=b)
                out[b] = rule.step(theta, reports, rule.init(theta, K))
            ref, got = out["numpy"], out[backend]
            A = reports.deltas if reports.deltas is not None else reports.gradients
            w, w_b = ref.info["weights"], got.info["weights"]
            bound = 2 * (m + 1) * U * (np.abs(theta) + np.abs(w) @ np.abs(A))
            cat = CATEGORY[name]
            if cat == "A":
                assert np.array_equal(w_b, w), "category A: the weights are the same bits"
            elif cat == "B":
                assert np.all(np.abs(w_b - w) <= 4 * d * U * np.abs(w)), "weights beyond d·u"
                bound = bound + np.abs(w_b - w) @ np.abs(A)
            else:
                assert np.array_equal(w_b, w)
                bound = bound * _fedfa_factor(rule)
            diff = np.abs(got.params - ref.params)
            worst = int(np.argmax(diff - bound))
            assert np.all(diff <= bound), (
                f"{name} on {backend}, m={m}, d={d}, seed {seed}: |Δθ_{worst}| = "
                f"{diff[worst]:.3g} > bound {bound[worst]:.3g}"
            )
            if name == "fedfv":  # no Gram entry near zero here: the same projections
                assert got.info["projections"] == ref.info["projections"]


def _doc_table() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8").split("## Backends", 1)[1]
    return dict(re.findall(r"^\| `([a-z0-9-]+)` \| ([ABC]) \|", text, flags=re.M))


def test_the_docs_table_states_every_rules_bound():
    assert set(CATEGORY) == set(RULES), "a rule without a stated bound"
    assert _doc_table() == CATEGORY


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_scale_holds_on_the_compiled_backend(name):
    """tests/rules/test_scales.py proves each rule right at every float64 scale on numpy; the
    default path of an experiment runs numba, which must give the same step there (to
    round-off) or refuse with the same kind of error."""
    for k in (-1070, -1040, -1000, -600, 600, 1000, 1015, 1022):
        theta, reports, K = rule_round(name, 4, 300, np.random.default_rng(1))
        reports = reports._replace(
            deltas=None if reports.deltas is None else np.ldexp(reports.deltas, k),
            gradients=None if reports.gradients is None else np.ldexp(reports.gradients, k),
        )
        theta = np.ldexp(theta, k)
        out = {}
        for b in ("numpy", "numba"):
            rule = make_rule(name, backend=b)
            try:
                out[b] = rule.step(theta, reports, rule.init(theta, K)).params
            except (ValueError, TypeError, FloatingPointError) as exc:
                out[b] = type(exc)
        ref, got = out["numpy"], out["numba"]
        if isinstance(ref, type) or isinstance(got, type):
            assert got == ref, (name, k, ref, got)
            continue
        assert np.all(np.isfinite(got)), (name, k)
        scale = np.max(np.abs(ref))
        assert np.max(np.abs(got - ref)) <= 1e-10 * scale, (name, k)
