"""Contract entries of the numerical core: kernels, simplex, online, oracles, metrics, pareto,
the rules and the types."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from fairagg.oracles import OracleError
from tests.contract.driver import CONSTANT, EXCEPTION, TYPE, Entry
from tests.contract.strategies import (
    close,
    counts,
    f64,
    floats,
    nonzero_floats,
    on_simplex,
    simplex_point,
    size,
    spd,
)


def _off_origin(v: np.ndarray) -> np.ndarray:
    v = np.array(v, dtype=np.float64)
    v[:, 0] = np.abs(v[:, 0]) + 0.5
    return v


def _md(draw: Any) -> tuple[int, int]:
    return size(draw, 1, 5), size(draw, 1, 6)


# --------------------------------------------------------------------------------------------
# kernels: the validated dispatch, and the backend modules behind it (compiled: child process)


def _weights_deltas(draw: Any) -> dict[str, Any]:
    m, d = _md(draw)
    return {"weights": floats(draw, m), "deltas": floats(draw, (m, d))}


def _deltas(draw: Any) -> dict[str, Any]:
    m, d = _md(draw)
    return {"deltas": floats(draw, (m, d))}


def _update(draw: Any) -> dict[str, Any]:
    m, d = _md(draw)
    return {"theta": floats(draw, d), "deltas": floats(draw, (m, d)), "weights": floats(draw, m)}


def _two(draw: Any) -> dict[str, Any]:
    m, d = _md(draw)
    return {"weights": floats(draw, (2, m)), "deltas": floats(draw, (m, d))}


def _backend(valid):
    def draw_with_backend(draw: Any) -> dict[str, Any]:
        return {**valid(draw), "backend": draw(st.sampled_from(["numpy", "numba"]))}

    return draw_with_backend


KERNELS = {
    "weighted_sum": (_weights_deltas, lambda k: f64(k["weights"]) @ f64(k["deltas"]), 1),
    "weighted_update": (_update, None, None),
    "weighted_sum_sq_norms": (_weights_deltas, None, (1, 2)),
    "row_sq_norms": (_deltas, lambda k: (f64(k["deltas"]) ** 2).sum(axis=1), 2),
    "gram": (_deltas, lambda k: f64(k["deltas"]) @ f64(k["deltas"]).T, 2),
    "two_combinations": (_two, lambda k: f64(k["weights"]) @ f64(k["deltas"]), 1),
}


_RAW_NONFINITE = tuple(
    f"{arg}:{family}"
    for arg in ("theta", "deltas", "weights", "rows")
    for family in ("NaN", "+inf", "-inf")
)


def _rows_named(valid):
    """The same draw with ``deltas`` passed as ``rows`` (cpu.two_combinations' name)."""

    def draw_rows(draw: Any) -> dict[str, Any]:
        return {("rows" if k == "deltas" else k): a for k, a in valid(draw).items()}

    return draw_rows


def _kernel_entries() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (valid, expected, degree) in KERNELS.items():
        check = close(expected) if expected else None
        scale = {"deltas": degree} if degree is not None else {}
        # documented: values are not read, NaN and infinity propagate (the rules validate)
        out[f"fairagg.kernels.{name}"] = Entry(
            valid=_backend(valid),
            check=check,
            scale=scale,
            subprocess=True,
            finite=False,
            nonfinite_ok=_RAW_NONFINITE,
        )
        cpu_valid = _rows_named(valid) if name == "two_combinations" else valid
        # the raw backend kernels refuse what cannot reach compiled code and pass NaN and
        # infinity through (the validated entry points above refuse them)
        raw = {"subprocess": True, "finite": False, "nonfinite_ok": _RAW_NONFINITE}
        out[f"fairagg.kernels.cpu.{name}"] = Entry(valid=cpu_valid, **raw)
        out[f"fairagg.kernels.cuda.{name}"] = Entry(valid=valid, examples=1, **raw)
    out["fairagg.kernels.available_backends"] = Entry(valid=lambda draw: {"simulator": False})
    out["fairagg.kernels.check_backend"] = Entry(
        valid=lambda draw: {"backend": draw(st.sampled_from(["numpy", "numba", "cuda"]))}
    )
    out["fairagg.kernels.resolve_backend"] = Entry(
        valid=lambda draw: {"backend": draw(st.sampled_from(["auto", "numpy", "numba", "cuda"]))}
    )
    out["fairagg.kernels.cuda.available"] = Entry(valid=lambda draw: {})
    out["fairagg.kernels.BACKENDS"] = CONSTANT
    out["fairagg.kernels.BACKEND_CHOICES"] = CONSTANT
    return out


# --------------------------------------------------------------------------------------------
# simplex


def _box(draw: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    lower = floats(draw, k, 0.0, 0.5 / k)
    upper = lower + floats(draw, k, 1.0 / k, 1.0)
    return lower, upper


def _project_box(draw: Any) -> dict[str, Any]:
    k = size(draw, 1, 6)
    lower, upper = _box(draw, k)
    return {"y": floats(draw, k), "lower": lower, "upper": upper, "total": 1.0}


def _qp(draw: Any) -> dict[str, Any]:
    k = size(draw, 1, 5)
    return {"A": spd(draw, k), "b": floats(draw, k)}


def _in_box(kwargs: dict[str, Any], result: Any) -> None:
    x = np.asarray(result[0] if isinstance(result, tuple) else result)
    tol = 1e-6 if x.dtype == np.float32 else 1e-12
    x = f64(x)
    lo = f64(kwargs.get("lower", 0.0))
    up = f64(kwargs.get("upper", np.inf))
    assert (x >= lo - tol).all() and (x <= up + tol).all(), f"{x} outside the box"
    on_simplex()(kwargs, result)


#: kl_step and exponentiated_gradient (the same step): documented, η = inf returns p and
#: r_i = -inf gives weight 0
_KL_STEP = Entry(
    valid=lambda draw: {
        "p": simplex_point(draw, k := size(draw)),
        "r": floats(draw, k),
        "eta": 1.0,
    },
    check=on_simplex(),
    nonfinite_ok=("eta:+inf", "r:-inf"),
)


def _check_point(draw: Any) -> dict[str, Any]:
    return {"p": simplex_point(draw, size(draw)), "name": "p", "rtol": 1e-9}


SIMPLEX = {
    "fairagg.simplex.project_simplex": Entry(
        valid=lambda draw: {"y": floats(draw, size(draw, 1, 6)), "total": 1.0},
        check=on_simplex(),
    ),
    "fairagg.simplex.project_box_simplex": Entry(
        valid=_project_box, check=_in_box, nonfinite_ok=("upper:+inf",)
    ),
    "fairagg.simplex.solve_simplex_qp": Entry(valid=_qp, check=_in_box),
    "fairagg.simplex.a_norm_projection": Entry(
        valid=lambda draw: {"y": floats(draw, (k := size(draw, 1, 5))), "A": spd(draw, k)},
        check=_in_box,
    ),
    "fairagg.simplex.min_norm_weights": Entry(
        # vectors off the origin, as for min_norm_point: at a minimum of 0 the multiplier is
        # round-off, of no degree
        valid=lambda draw: {"gram": (v := _off_origin(floats(draw, _md(draw)))) @ v.T},
        check=_in_box,
        scale={"gram": {"x": 0, "multiplier": 1}},
    ),
    "fairagg.simplex.min_norm_point": Entry(
        # the hull kept off the origin (first coordinate ≥ 1/2): where the min-norm point is
        # 0, the point returned is round-off of size eps max|v|, which no degree describes
        valid=lambda draw: {"vectors": _off_origin(floats(draw, _md(draw)))},
        check=_in_box,
        scale={"vectors": {"weights": 0, "point": 1, "norm_sq": 2}},
        overflow_ok=("qp",),  # its multiplier is of degree 2, like norm_sq
    ),
    "fairagg.simplex.check_box": Entry(
        valid=lambda draw: {
            **dict(zip(("lower", "upper"), _box(draw, k := size(draw)), strict=True)),
            "size": k,
        },
        nonfinite_ok=("upper:+inf",),
        finite=False,  # the returned upper bound may be +inf
    ),
    "fairagg.simplex.check_simplex_point": Entry(valid=_check_point, check=on_simplex()),
    "fairagg.simplex.kl_step": _KL_STEP,
    "fairagg.simplex.log_normalize": Entry(
        valid=lambda draw: {"log_weights": floats(draw, size(draw))},
        check=on_simplex(),
        nonfinite_ok=("log_weights:-inf",),  # documented: exact zeros
    ),
    "fairagg.simplex.MinNormResult": TYPE,
    "fairagg.simplex.QPFactor": TYPE,
    "fairagg.simplex.QPResult": TYPE,
}


# --------------------------------------------------------------------------------------------
# metrics


def _acc(draw: Any) -> dict[str, Any]:
    return {"accuracies": floats(draw, size(draw, 2, 6), 0.0, 1.0)}


def _pos(draw: Any) -> dict[str, Any]:
    return {"values": floats(draw, size(draw, 2, 6), 0.1, 1.0)}


METRICS = {
    "fairagg.metrics.accuracy_std": Entry(valid=_acc, scale={"accuracies": 1}),
    "fairagg.metrics.accuracy_variance": Entry(valid=_acc, scale={"accuracies": 2}),
    "fairagg.metrics.average_accuracy": Entry(
        valid=lambda draw: {**_acc(draw)}, scale={"accuracies": 1}
    ),
    "fairagg.metrics.best_fraction": Entry(
        valid=lambda draw: {**_acc(draw), "fraction": 0.5}, scale={"accuracies": 1}
    ),
    "fairagg.metrics.worst_fraction": Entry(
        valid=lambda draw: {**_acc(draw), "fraction": 0.5}, scale={"accuracies": 1}
    ),
    "fairagg.metrics.fairness_summary": Entry(valid=_acc),
    "fairagg.metrics.acf": Entry(
        # a constant series has no ACF (documented ValueError): add a ramp
        valid=lambda draw: {
            "series": floats(draw, n := size(draw, 3, 8)) + np.arange(n),
            "max_lag": 2,
        },
        scale={"series": 0},
    ),
    # documented: ±inf where a term overflows float64 (its correctly rounded value)
    "fairagg.metrics.alpha_fair_utility": Entry(
        valid=lambda draw: {**_pos(draw), "alpha": draw(st.sampled_from([0.0, 0.5, 2.0]))},
        finite=False,
    ),
    "fairagg.metrics.angle_to_ones": Entry(valid=_pos, scale={"values": 0}),
    "fairagg.metrics.entropy": Entry(valid=_pos, scale={"values": 0}),
    "fairagg.metrics.kl_to_uniform": Entry(valid=_pos, scale={"values": 0}),
    "fairagg.metrics.jain_index": Entry(valid=_pos, scale={"values": 0}),
    "fairagg.metrics.gini": Entry(valid=_pos, scale={"values": 0}),
}


# --------------------------------------------------------------------------------------------
# online


def _responses(draw: Any, t: int | None = None, k: int | None = None) -> np.ndarray:
    t = size(draw, 1, 4) if t is None else t
    k = size(draw, 1, 4) if k is None else k
    return floats(draw, (t, k), 0.0, 1.5)


def _decisions(draw: Any) -> dict[str, Any]:
    r = _responses(draw)
    p = np.stack([simplex_point(draw, r.shape[1]) for _ in range(r.shape[0])])
    return {"decisions": p, "responses": r}


def _ftrl_state(draw: Any):
    from fairagg.online import quadratic_ftrl_init, quadratic_ftrl_update

    k = size(draw, 1, 4)
    state = quadratic_ftrl_init(k)
    for _ in range(size(draw, 0, 2)):
        state = quadratic_ftrl_update(state, floats(draw, k), simplex_point(draw, k))
    return state


ONLINE = {
    "fairagg.online.aaggff_d_decision": Entry(
        valid=lambda draw: {"grad_sum": floats(draw, size(draw)), "rounds": 2, "lipschitz": 1.0},
        check=on_simplex(),
    ),
    "fairagg.online.aaggff_response": Entry(
        valid=lambda draw: {"losses": floats(draw, size(draw), 0.1, 3.0)},
        scale={"losses": 0},
    ),
    "fairagg.online.aaggff_s_defaults": Entry(valid=lambda draw: {"num_clients": size(draw)}),
    "fairagg.online.best_fixed_decision": Entry(
        valid=lambda draw: {"responses": _responses(draw)}, check=on_simplex()
    ),
    "fairagg.online.cumulative_regret": Entry(
        valid=lambda draw: {
            **(d := _decisions(draw)),
            "comparator": simplex_point(draw, d["responses"].shape[1]),
        }
    ),
    "fairagg.online.regret": Entry(valid=_decisions),
    "fairagg.online.decision_gradient": Entry(
        valid=lambda draw: {
            "p": simplex_point(draw, k := size(draw)),
            "r": floats(draw, k, 0.0, 1.5),
        }
    ),
    "fairagg.online.decision_loss": Entry(
        valid=lambda draw: {
            "p": simplex_point(draw, k := size(draw)),
            "r": floats(draw, k, 0.0, 1.5),
        }
    ),
    "fairagg.online.dr_gradient": Entry(
        valid=lambda draw: {
            "p": simplex_point(draw, k := size(draw)),
            "r_check": floats(draw, k, 0.0, 1.5),
            "r_bar": 0.5,
        }
    ),
    "fairagg.online.dr_response": Entry(
        valid=lambda draw: {
            "responses": floats(draw, 2, 0.0, 1.5),
            "selected": np.array([0, 2]),
            "num_clients": 4,
        }
    ),
    "fairagg.online.entropic_ftrl": Entry(
        valid=lambda draw: {"grad_sum": floats(draw, size(draw)), "eta": 1.0}, check=on_simplex()
    ),
    "fairagg.online.exponentiated_gradient": _KL_STEP,
    "fairagg.online.official_first_decision": Entry(
        valid=lambda draw: {"num_clients": size(draw), "inclusion_probability": 0.5}
    ),
    "fairagg.online.play_aaggff_d": Entry(valid=lambda draw: {"responses": _responses(draw)}),
    "fairagg.online.play_aaggff_s": Entry(valid=lambda draw: {"responses": _responses(draw)}),
    "fairagg.online.quadratic_ftrl_init": Entry(valid=lambda draw: {"num_clients": size(draw)}),
    "fairagg.online.quadratic_ftrl_problem": Entry(
        valid=lambda draw: {"state": _ftrl_state(draw), "alpha": 1.0, "beta": 0.5}
    ),
    "fairagg.online.quadratic_ftrl_step": Entry(
        valid=lambda draw: {"state": _ftrl_state(draw), "alpha": 1.0, "beta": 0.5},
        check=_in_box,
    ),
    "fairagg.online.quadratic_ftrl_update": Entry(
        valid=lambda draw: {
            "state": (s := _ftrl_state(draw)),
            "grad": floats(draw, k := s.grad_sum.shape[0]),
            "decision": simplex_point(draw, k),
        }
    ),
    "fairagg.online.quadratic_ftrl_round": Entry(
        valid=lambda draw: {
            "state": (s := _ftrl_state(draw)),
            "grad": floats(draw, k := s.grad_sum.shape[0]),
            "decision": simplex_point(draw, k),
            "alpha": 1.0,
            "beta": 0.5,
        }
    ),
    "fairagg.online.theorem1_bound": Entry(
        valid=lambda draw: {"num_clients": size(draw), "rounds": size(draw), "lipschitz": 1.0}
    ),
    "fairagg.online.theorem2_bound": Entry(
        valid=lambda draw: {"num_clients": size(draw), "rounds": size(draw), "lipschitz": 1.0}
    ),
    "fairagg.online.RESPONSE_CDFS": CONSTANT,
    "fairagg.online.BestFixedDecision": TYPE,
    "fairagg.online.FTRLRound": TYPE,
    "fairagg.online.QuadraticFTRL": TYPE,
    "fairagg.online.LowRankFTRL": TYPE,
}


# --------------------------------------------------------------------------------------------
# oracles (cvxpy: few examples)


def _oracle(valid, check=None) -> Entry:
    return Entry(valid=valid, check=check, allowed=(OracleError,), examples=1)


ORACLES = {
    "fairagg.oracles.project_simplex": _oracle(
        lambda draw: {"y": floats(draw, size(draw, 1, 4))}, on_simplex()
    ),
    "fairagg.oracles.project_box_simplex": Entry(
        valid=_project_box,
        check=_in_box,
        allowed=(OracleError,),
        examples=1,
        nonfinite_ok=("upper:+inf",),
    ),
    "fairagg.oracles.simplex_qp": _oracle(_qp, _in_box),
    "fairagg.oracles.a_norm_projection": _oracle(
        lambda draw: {"y": floats(draw, (k := size(draw, 1, 4))), "A": spd(draw, k)}, _in_box
    ),
    "fairagg.oracles.min_norm_point": _oracle(
        lambda draw: {"vectors": floats(draw, _md(draw))}, _in_box
    ),
    "fairagg.oracles.best_fixed_decision": _oracle(
        lambda draw: {"responses": _responses(draw)}, _in_box
    ),
    "fairagg.oracles.eg_step": _oracle(
        lambda draw: {
            "p": simplex_point(draw, k := size(draw, 1, 4), interior=True),
            "r": floats(draw, k),
            "eta": 1.0,
        },
        _in_box,
    ),
    "fairagg.oracles.entropic_ftrl": _oracle(
        lambda draw: {"grad_sum": floats(draw, size(draw, 1, 4)), "eta": 1.0}, _in_box
    ),
    "fairagg.oracles.quadratic_ftrl": _oracle(
        lambda draw: {
            "grads": floats(draw, (t := size(draw, 1, 3), k := size(draw, 1, 4))),
            "decisions": np.stack([simplex_point(draw, k) for _ in range(t)]),
            "alpha": 1.0,
            "beta": 0.5,
        },
        _in_box,
    ),
    "fairagg.oracles.MinimaxResult": TYPE,
    "fairagg.oracles.OracleResult": TYPE,
    "fairagg.oracles.OracleError": EXCEPTION,
}


# --------------------------------------------------------------------------------------------
# pareto


def _pareto_check(kwargs: dict[str, Any], result: Any) -> None:
    on_simplex()(kwargs, (result.weights,))


PARETO = {
    "fairagg.pareto.pareto_certificate": Entry(
        valid=lambda draw: {"grads": floats(draw, _md(draw))}, check=_pareto_check
    ),
    "fairagg.pareto.ParetoCertificate": TYPE,
}


ENTRIES: dict[str, Any] = {
    **_kernel_entries(),
    **SIMPLEX,
    **METRICS,
    **ONLINE,
    **ORACLES,
    **PARETO,
}

__all__ = ["ENTRIES", "counts", "nonzero_floats"]
