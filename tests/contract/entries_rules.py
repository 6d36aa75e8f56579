"""Contract entries of the rules, the registry, the types and client sampling."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from fairagg.types import Rule, make_reports
from tests.contract.driver import CONSTANT, TYPE, Entry
from tests.contract.strategies import counts, f64, floats, on_simplex, simplex_point, size


def _reports(draw: Any, m: int | None = None, d: int | None = None, *, num_clients: int = 0):
    m = size(draw, 1, 4) if m is None else m
    d = size(draw, 1, 5) if d is None else d
    deltas = floats(draw, (m, d))
    ids = np.arange(m)
    return make_reports(
        deltas,
        counts(draw, m).astype(np.int64),
        losses=floats(draw, m, 0.1, 3.0),
        accuracies=floats(draw, m, 0.0, 1.0),
        participations=np.ones(m, dtype=np.int64),
        client_ids=ids,
        num_clients=max(num_clients, m),
        gradients=floats(draw, (m, d)),
        lr=0.1,
    )


def _runs_a_round(hyper: tuple[str, ...]):
    """A rule built from valid hyper-parameters runs two rounds to finite parameters; an
    accepted hyper-parameter that fails only in a round must say which one."""

    def check(kwargs: dict[str, Any], rule: Any) -> None:
        assert isinstance(rule, Rule), f"returned {type(rule).__name__}, not a Rule"
        m, d = 3, 4
        rng = np.random.default_rng(0)
        theta = rng.normal(size=d)
        state = rule.init(theta, m)
        for t in range(2):
            reports = make_reports(
                rng.normal(size=(m, d)),
                np.array([3, 5, 2]),
                losses=rng.uniform(0.1, 2.0, m),
                accuracies=rng.uniform(0, 1, m),
                participations=np.full(m, t + 1),
                client_ids=np.arange(m),
                num_clients=m,
                round_index=t,
                gradients=rng.normal(size=(m, d)),
                lr=0.1,
            )
            try:
                out = rule.step(theta, reports, state)
            except (ValueError, TypeError) as exc:
                named = [h for h in kwargs if h in str(exc)]
                assert named, f"a round fails without naming a hyper-parameter: {exc!r}"
                return
            theta, state = out.params, out.state
            assert np.isfinite(f64(theta)).all(), f"round {t} gives non-finite parameters"

    return check


def _factory(valid: dict[str, Any] | None = None, **extra: Any) -> Entry:
    fixed = dict(valid or {})

    def draw_hyper(draw: Any) -> dict[str, Any]:
        return {**fixed, "backend": draw(st.sampled_from(["numpy", "numba"]))}

    return Entry(valid=draw_hyper, check=_runs_a_round(tuple(fixed)), **extra)


FACTORIES = {
    "fairagg.rules.fedavg.fedavg": _factory(),
    "fairagg.rules.fedavg.fairavg": _factory(),
    "fairagg.rules.qffl.qfedavg": _factory({"q": 1.0, "lipschitz": 1.0, "epsilon": 1e-10}),
    "fairagg.rules.qffl.qfedsgd": _factory({"q": 1.0, "lipschitz": 1.0, "static_step": False}),
    "fairagg.rules.afl.afl": _factory({"lr": 0.1, "lambda_lr": 0.01}),
    "fairagg.rules.term.term": _factory({"tilt": 1.0, "weighting": "samples", "variant": "paper"}),
    "fairagg.rules.propfair.propfair": _factory({"M": 10.0, "epsilon": 0.2, "huber": False}),
    "fairagg.rules.fedfv.fedfv": _factory(
        {"alpha": 0.5, "tau": 1, "order": "loss", "variant": "paper", "seed": 0, "method": "gram"}
    ),
    "fairagg.rules.fedmgda.fedmgda": _factory({"epsilon": 0.1, "server_lr": 1.0}),
    "fairagg.rules.fedfa.fedfa": _factory(
        {"alpha": 0.5, "gamma": 0.5, "tau": 1, "eps_a": 1e-6, "eps_f": 1e-5, "variant": "paper"}
    ),
    "fairagg.rules.oco.qffl_eg": _factory({"q": 1.0}),
    "fairagg.rules.oco.term_eg": _factory({"tilt": 1.0}),
    "fairagg.rules.oco.propfair_eg": _factory({"M": 10.0}),
    "fairagg.rules.aaggff.aaggff_s": _factory({"cdf": "weibull", "variant": "paper"}),
    "fairagg.rules.aaggff.aaggff_d": _factory({"cdf": "weibull", "variant": "paper"}),
}


def _params_deltas(draw: Any, name: str = "deltas") -> dict[str, Any]:
    m, d = size(draw, 1, 4), size(draw, 1, 5)
    return {"params": floats(draw, d), name: floats(draw, (m, d))}


def _losses(draw: Any, m: int) -> np.ndarray:
    return floats(draw, m, 0.1, 3.0)


def _with_losses(draw: Any, name: str = "deltas") -> dict[str, Any]:
    out = _params_deltas(draw, name)
    return {**out, "losses": _losses(draw, out[name].shape[0])}


def _eg(extra: dict[str, Any]):
    def valid(draw: Any) -> dict[str, Any]:
        m = size(draw)
        return {"losses": _losses(draw, m), "num_samples": counts(draw, m), **extra}

    return valid


def _fedfa_inputs(draw: Any) -> dict[str, Any]:
    m = size(draw)
    return {
        "accuracies": floats(draw, m, 0.0, 1.0),
        "participations": counts(draw, m),
    }


FUNCTIONS = {
    # fedavg
    "fairagg.rules.fedavg.apply_weighted_update": Entry(
        valid=lambda draw: {
            **(pd := _params_deltas(draw)),
            "weights": simplex_point(draw, pd["deltas"].shape[0]),
        }
    ),
    "fairagg.rules.fedavg.fairavg_weights": Entry(
        valid=lambda draw: {"num_clients": size(draw)}, check=on_simplex()
    ),
    "fairagg.rules.fedavg.fedavg_weights": Entry(
        valid=lambda draw: {"num_samples": counts(draw, size(draw))},
        check=on_simplex(),
        scale={"num_samples": 0},
    ),
    # oco
    "fairagg.rules.oco.eg_fedavg_weights": Entry(
        valid=lambda draw: {"num_samples": counts(draw, size(draw))},
        check=on_simplex(),
        scale={"num_samples": 0},
    ),
    "fairagg.rules.oco.eg_qffl_weights": Entry(
        valid=_eg({"q": 1.0}), check=on_simplex(), scale={"num_samples": 0, "losses": 0}
    ),
    "fairagg.rules.oco.eg_term_weights": Entry(
        valid=_eg({"tilt": 1.0}), check=on_simplex(), scale={"num_samples": 0}
    ),
    "fairagg.rules.oco.eg_propfair_weights": Entry(
        valid=_eg({"M": 10.0}), check=on_simplex(), scale={"num_samples": 0}
    ),
    # propfair
    "fairagg.rules.propfair.check_losses_below": Entry(
        valid=lambda draw: {"losses": _losses(draw, size(draw)), "m": 10.0}
    ),
    # qffl
    "fairagg.rules.qffl.qfedavg_step": Entry(
        valid=lambda draw: {**_with_losses(draw), "q": 1.0, "lr": 0.1},
        overflow_ok=("h_sum",),  # documented: inf where Σ h_k exceeds float64
    ),
    "fairagg.rules.qffl.qfedsgd_step": Entry(
        valid=lambda draw: {**_with_losses(draw, "grads"), "q": 1.0, "lr": 0.1},
        overflow_ok=("h_sum",),  # documented: inf where Σ h_k exceeds float64
    ),
    "fairagg.rules.qffl.qffl_objective": Entry(
        valid=lambda draw: {"losses": _losses(draw, size(draw)), "q": 1.0},
        scale={"losses": 2},
    ),
    "fairagg.rules.qffl.lipschitz_q": Entry(
        valid=lambda draw: {"loss": 0.5, "grad_norm_sq": 2.0, "L": 1.0, "q": 1.0}
    ),
    # afl
    "fairagg.rules.afl.afl_step": Entry(
        valid=lambda draw: {
            **(pg := _with_losses(draw, "grads")),
            "mixture": simplex_point(draw, pg["grads"].shape[0]),
            "lr": 0.1,
            "lambda_lr": 0.01,
        },
        check=lambda k, r: on_simplex()(k, (r.mixture,)),
    ),
    # term
    "fairagg.rules.term.term_weights": Entry(
        valid=lambda draw: {"losses": _losses(draw, size(draw)), "tilt": 1.0},
        check=on_simplex(),
    ),
    "fairagg.rules.term.term_official_weights": Entry(
        valid=lambda draw: {"losses": _losses(draw, size(draw)), "tilt": 1.0, "normaliser": 1.0},
    ),
    # aaggff
    "fairagg.rules.aaggff.aaggff_aggregate": Entry(
        valid=lambda draw: {
            **(pd := _params_deltas(draw)),
            "p": simplex_point(draw, k := pd["deltas"].shape[0] + 1),
            "selected": np.arange(k - 1),
        }
    ),
    "fairagg.types.client_indices": Entry(
        valid=lambda draw: {"reports": _reports(draw), "num_clients": 6}
    ),
    # fedfv
    "fairagg.rules.fedfv.fedfv_direction": Entry(
        valid=lambda draw: {
            "deltas": (dl := floats(draw, (size(draw, 1, 4), size(draw, 1, 5)))),
            "losses": _losses(draw, dl.shape[0]),
            "alpha": 0.5,
        },
        scale={"deltas": {"direction": 1}},
    ),
    "fairagg.rules.fedfv.fedfv_keep_count": Entry(
        valid=lambda draw: {"num_clients": size(draw), "alpha": 0.5}
    ),
    "fairagg.rules.fedfv.fedfv_order": Entry(
        valid=lambda draw: {"num_clients": (m := size(draw)), "losses": _losses(draw, m)}
    ),
    # fedmgda
    "fairagg.rules.fedmgda.fedmgda_weights": Entry(
        valid=lambda draw: {
            "deltas": (dl := floats(draw, (size(draw, 1, 4), size(draw, 1, 5)))),
            "num_samples": counts(draw, dl.shape[0]),
            "epsilon": 0.5,
        },
        check=lambda k, r: on_simplex()(k, (r.mixture,)),
        # the weights multiply the raw updates: λ_k / ‖δ_k‖, degree -1
        scale={"deltas": {"mixture": 0, "weights": -1}, "num_samples": {"mixture": 0}},
    ),
    # fedfa
    "fairagg.rules.fedfa.fedfa_information": Entry(valid=_fedfa_inputs),
    "fairagg.rules.fedfa.fedfa_weights": Entry(valid=_fedfa_inputs, check=on_simplex()),
    "fairagg.rules.fedfa.fedfa_server_step": Entry(
        valid=lambda draw: {
            "params": floats(draw, (d := size(draw))),
            "average": floats(draw, d),
            "momentum": floats(draw, d),
            "gamma": 0.5,
            "eta_s": 1.0,
        }
    ),
    # registry and types
    "fairagg.rules.make_rule": Entry(
        valid=lambda draw: {"name": draw(st.sampled_from(["fedavg", "qfedavg", "fedfv", "term"]))},
        check=_runs_a_round(()),
    ),
    "fairagg.types.make_reports": Entry(
        valid=lambda draw: {
            "deltas": (dl := floats(draw, (m := size(draw, 1, 4), size(draw, 1, 5)))),
            "num_samples": counts(draw, m).astype(np.int64),
            "losses": _losses(draw, m),
            "accuracies": floats(draw, m, 0.0, 1.0),
            "participations": np.ones(m, dtype=np.int64),
            "client_ids": np.arange(m),
            "round_index": 0,
            "num_clients": m,
            "gradients": dl.copy(),
            "lr": 0.1,
        }
    ),
    "fairagg.types.LocalSpec": Entry(
        valid=lambda draw: draw(
            st.sampled_from(
                [
                    {"report": "deltas", "momentum": 0.5, "accuracy_source": "global"},
                    {"report": "gradients", "gradient_batch_size": 4},
                ]
            )
        )
    ),
    "fairagg.sampling.sample_clients": Entry(
        valid=lambda draw: {
            "num_clients": (n := size(draw, 2, 6)),
            "clients_per_round": size(draw, 1, n),
            "rng": np.random.default_rng(draw(st.integers(0, 9))),
            "scheme": "uniform",
        },
        deterministic=False,  # the generator advances
        compare_copies=False,
    ),
}

TYPES = {
    "fairagg.types.Aggregate": TYPE,
    "fairagg.types.EmptyState": TYPE,
    "fairagg.types.RoundReports": TYPE,
    "fairagg.types.Rule": TYPE,
    "fairagg.rules.RuleSpec": TYPE,
    "fairagg.RULES": CONSTANT,
    "fairagg.rules.RULES": CONSTANT,
    "fairagg.sampling.SAMPLING_SCHEMES": CONSTANT,
    "fairagg.rules.aaggff.AAgFFDState": TYPE,
    "fairagg.rules.aaggff.AAgFFSState": TYPE,
    "fairagg.rules.aaggff.AAgFFUpdate": TYPE,
    "fairagg.rules.afl.AFLState": TYPE,
    "fairagg.rules.afl.AFLStep": TYPE,
    "fairagg.rules.fedfa.FEDFA_VARIANTS": CONSTANT,
    "fairagg.rules.fedfa.FedFaInformation": TYPE,
    "fairagg.rules.fedfa.FedFaServerStep": TYPE,
    "fairagg.rules.fedfa.FedFaState": TYPE,
    "fairagg.rules.fedfv.FEDFV_METHODS": CONSTANT,
    "fairagg.rules.fedfv.FEDFV_ORDERS": CONSTANT,
    "fairagg.rules.fedfv.FEDFV_VARIANTS": CONSTANT,
    "fairagg.rules.fedfv.FedFVHistory": TYPE,
    "fairagg.rules.fedfv.FedFVResult": TYPE,
    "fairagg.rules.fedfv.FedFVState": TYPE,
    "fairagg.rules.fedmgda.MGDAWeights": TYPE,
    "fairagg.rules.qffl.QStep": TYPE,
    "fairagg.rules.term.TERMState": TYPE,
}

ENTRIES: dict[str, Any] = {**FACTORIES, **FUNCTIONS, **TYPES}
