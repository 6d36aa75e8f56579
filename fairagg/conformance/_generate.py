"""Generated cases: small random inputs drawn from a seed, the same in every mode and process.

Example i of a target is drawn from its own generator, ``numpy.random.default_rng((seed,
crc32(target), i))``: the examples do not depend on how many are asked for, on what else the
process has imported, or on the mode of the check (``--keep-going``, golden cases on or off,
the command line or Python). The draws lean towards what breaks formulas: the ends of each
range, 0 and 1, ties, losses near 0, all-zero, antiparallel, repeated and tiny updates, mixtures
near a vertex of the simplex, and (for rules) now and then many rounds.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

import numpy as np

from .. import RULES, make_rule
from ..vectors import FORMULAS
from ._common import GENERATED, Case, Json, kind_of

#: The ranges generated examples draw a formula's scalar inputs and parameters from (ints
#: where the bounds are ints). q reaches 20, where F̃^q spans many binades; AFL's λ step 2,
#: where the projection clips.
SCALARS: dict[str, tuple[float, float]] = {
    "q": (0.0, 20.0),
    "lr": (0.01, 1.0),
    "tilt": (-2.0, 2.0),
    "normaliser": (0.1, 5.0),
    "lambda_lr": (0.001, 2.0),
    "alpha": (0.0, 1.0),
    "eta": (0.1, 5.0),
    "rounds": (1, 50),
    "lipschitz": (0.1, 5.0),
    "r_bar": (0.0, 1.0),
    "total": (0.1, 5.0),
    "gamma": (0.0, 0.99),
    "eta_s": (0.0, 2.0),
    "server_lr": (0.0, 2.0),
    "scale": (0.01, 2.0),
    "num_clients": (1, 50),
}
#: The ranges generated rule cases draw each rule's hyper-parameters from (the others keep
#: their defaults, or the values ``params`` fixes). FedFV's τ up to 3 looks back over every
#: earlier round of most generated cases.
RULE_HYPER: dict[str, dict[str, tuple[float, float]]] = {
    "qfedavg": {"q": (0.0, 20.0)},
    "qfedsgd": {"q": (0.0, 20.0)},
    "term": {"tilt": (-2.0, 2.0)},
    "term-eg": {"tilt": (-2.0, 2.0)},
    "qffl-eg": {"q": (0.0, 5.0)},
    "fedmgda": {"epsilon": (0.0, 1.2)},
    "fedfv": {"alpha": (0.0, 1.0), "tau": (0, 3)},
    "afl": {"lambda_lr": (0.001, 2.0)},
}


class _Draw:
    """Edge-biased draws from one generator."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def integer(self, lo: int, hi: int) -> int:
        if self.chance(0.2):
            return int(self.rng.choice([lo, hi]))
        return int(self.rng.integers(lo, hi + 1))

    def scalar(self, lo: float, hi: float) -> float:
        specials = [lo, hi, *(v for v in (0.0, 1.0, 0.5, -1.0, 2.0) if lo <= v <= hi)]
        u = self.rng.random()
        if u < 0.2:
            return float(self.rng.choice(specials))
        if u < 0.3:
            return float(np.round(self.rng.uniform(lo, hi), 1).clip(lo, hi))
        return float(self.rng.uniform(lo, hi))

    def floats(self, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
        n = int(np.prod(shape))
        out = self.rng.uniform(lo, hi, n)
        if n and self.chance(0.1):  # all equal
            out[:] = self.scalar(lo, hi)
            return out.reshape(shape)
        specials = [lo, hi, *(v for v in (0.0, 1.0, 0.5, -1.0) if lo <= v <= hi)]
        for i in range(n):
            u = self.rng.random()
            if u < 0.12:
                out[i] = self.rng.choice(specials)
            elif u < 0.2 and i:
                out[i] = out[self.rng.integers(0, i)]  # a tie
            elif u < 0.27 and lo <= 0.0 < hi:
                out[i] = min(hi, 10.0 ** self.rng.uniform(-12.0, -2.0))  # near 0
            elif u < 0.33:
                out[i] = np.clip(np.round(out[i], 1), lo, hi)
        return out.reshape(shape)

    def ints(self, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
        n = int(np.prod(shape))
        if n and self.chance(0.15):
            return np.full(shape, self.integer(lo, hi), dtype=np.int64)
        return np.array([self.integer(lo, hi) for _ in range(n)], dtype=np.int64).reshape(shape)

    def updates(self, m: int, d: int, lo: float, hi: float) -> np.ndarray:
        """(m, d) updates: some rows zero, tiny, repeated or antiparallel to another row."""
        U = self.floats((m, d), lo, hi)
        for i in range(m):
            u = self.rng.random()
            if u < 0.08:
                U[i] = 0.0
            elif u < 0.14:
                U[i] *= 10.0 ** self.rng.uniform(-10.0, -5.0)
            elif u < 0.24 and i:
                j = int(self.rng.integers(0, i))
                U[i] = -U[j] * float(self.rng.choice([1.0, 0.5, 2.0]))  # antiparallel
            elif u < 0.3 and i:
                U[i] = U[int(self.rng.integers(0, i))]
        return U

    def simplex(self, n: int) -> np.ndarray:
        a = self.rng.uniform(0.01, 1.0, n)
        if n > 1 and self.chance(0.3):  # near a face: some entries tiny
            tiny = self.rng.random(n) < 0.5
            a[tiny] = 10.0 ** self.rng.uniform(-8.0, -3.0, int(tiny.sum()))
        return a / a.sum()


def _seeded(seed: int, target: str, index: int) -> _Draw:
    return _Draw(np.random.default_rng([seed, zlib.crc32(target.encode()), index]))


@functools.cache
def _template(target: str) -> tuple[Json, Json]:
    """(inputs, params) of a formula's first golden case: what generated examples vary."""
    return next(iter(FORMULAS[target].cases(np.random.default_rng(0)).values()))[1:]


def _scalar_ranges(target: str) -> dict[str, tuple[float, float]]:
    ranges = dict(SCALARS)
    if target == "fedmgda_weights":
        ranges["epsilon"] = (0.0, 1.2)
    return ranges


def drawn(target: str, fixed: Json) -> tuple[str, ...]:
    """The hyper-parameters and scalar inputs generated examples draw, with their ranges."""
    if kind_of(target) == "rule":
        ranges = {k: v for k, v in RULE_HYPER.get(target, {}).items() if k not in fixed}
    else:
        inputs, params = _template(target)
        all_ranges = _scalar_ranges(target)
        ranges = {
            k: all_ranges[k]
            for k, v in {**inputs, **params}.items()
            if k in all_ranges
            and k not in fixed
            and not isinstance(v, (bool, np.bool_, str, np.ndarray))
        }
        if target == "dr_response":
            ranges.pop("num_clients", None)  # K, the clients of the drawn case
    return tuple(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in ranges.items())


def _draw_range(draw: _Draw, lo: float, hi: float) -> Any:
    if isinstance(lo, int) and isinstance(hi, int):
        return draw.integer(lo, hi)
    return draw.scalar(lo, hi)


def _formula_case(target: str, fixed: Json, draw: _Draw, label: str) -> Case:
    template_inputs, template_params = _template(target)
    ranges = _scalar_ranges(target)
    m = draw.integer(1, 5)
    d = draw.integer(1, 4)
    K = m + draw.integer(0, 3)
    arrays = {
        "params": lambda: draw.floats((d,), -4, 4),
        "average": lambda: draw.floats((d,), -4, 4),
        "momentum": lambda: draw.floats((d,), -4, 4),
        "deltas": lambda: draw.updates(m, d, -4, 4),
        "grads": lambda: draw.updates(m, d, -4, 4),
        "losses": lambda: draw.floats((m,), 0.0, 20.0),
        "num_samples": lambda: draw.ints((m,), 1, 500),
        "weights": lambda: draw.floats((m,), -2, 2),
        "mixture": lambda: draw.simplex(m),
        "p": lambda: draw.simplex(K if "selected" in template_inputs else m),
        "prior": lambda: draw.simplex(m),
        "accuracies": lambda: draw.floats((m,), 0.0, 1.0),
        "participations": lambda: draw.ints((m,), 1, 20),
        "y": lambda: draw.floats((m,), -5, 5),
        "b": lambda: draw.floats((m,), -3, 3),
        "r": lambda: draw.floats((m,), -2, 2),
        "r_check": lambda: draw.floats((m,), -2, 2),
        "grad_sum": lambda: draw.floats((m,), -5, 5),
        "responses": lambda: draw.floats((m,), 0.0, 1.0),
        "gram": lambda: (lambda v: v @ v.T)(draw.updates(m, d, -3, 3)),
        "A": lambda: (lambda v: v @ v.T + 0.5 * np.eye(m))(draw.floats((m, m), -2, 2)),
        "selected": lambda: (
            np.sort(draw.rng.permutation(K)[:m]).astype(np.int64)
            if draw.chance(0.5)
            else draw.rng.permutation(K)[:m].astype(np.int64)
        ),
    }

    def value(name: str, template: Any) -> Any:
        if name in fixed:
            return fixed[name]
        if name in arrays and isinstance(template, np.ndarray):
            return arrays[name]()
        if name in ranges and not isinstance(template, (bool, np.bool_, str)):
            return _draw_range(draw, *ranges[name])
        if isinstance(template, (bool, np.bool_)):
            return draw.chance(0.5)
        return template

    inputs = {k: value(k, v) for k, v in template_inputs.items()}
    params = {k: value(k, v) for k, v in template_params.items()}
    if target == "dr_response":
        params["num_clients"] = K
    if target == "propfair_scale":
        inputs["m"] = draw.scalar(0.5, 20.0)
        inputs["f"] = inputs["m"] * draw.scalar(0.0, 0.999)
        inputs["epsilon"] = draw.scalar(0.01, 1.0)
    if target == "eg_propfair_weights":
        params["M"] = float(np.max(inputs["losses"])) + draw.scalar(0.1, 10.0)
    return Case(GENERATED, label, inputs, params)


def _rule_case(target: str, fixed: Json, draw: _Draw, label: str) -> Case:
    spec = RULES[target]
    gradients = make_rule(target).local.report == "gradients"
    K = draw.integer(1, 5)
    m = K if spec.full_participation else draw.integer(1, K)
    d = draw.integer(1, 4)
    T = draw.integer(4, 12) if draw.chance(0.15) else draw.integer(1, 3)
    lr = draw.scalar(0.01, 1.0)
    counts = np.zeros(K, dtype=np.int64)
    rounds = []
    for t in range(T):
        ids = np.sort(draw.rng.permutation(K)[:m]).astype(np.int64)
        counts[ids] += 1
        r = {
            "num_samples": draw.ints((m,), 1, 500),
            "losses": draw.floats((m,), 0.0, 9.0),  # below PropFair's default M = 10
            "accuracies": draw.floats((m,), 0.0, 1.0),
            "participations": counts[ids].copy(),
            "client_ids": ids,
            "lr": lr,
            "round_index": t,
        }
        r["gradients" if gradients else "deltas"] = draw.updates(m, d, -2.0, 2.0)
        rounds.append(r)
    hyper = {
        k: _draw_range(draw, lo, hi)
        for k, (lo, hi) in RULE_HYPER.get(target, {}).items()
        if k not in fixed
    }
    inputs = {"params0": draw.floats((d,), -4.0, 4.0), "num_clients": K, "rounds": rounds}
    return Case(GENERATED, label, inputs, hyper)


def generated_case(target: str, fixed: Json, seed: int, index: int) -> Case:
    """Example ``index`` (from 0) of ``target`` for ``seed``."""
    draw = _seeded(seed, target, index)
    label = f"generated example {index + 1} (seed {seed})"
    if kind_of(target) == "rule":
        return _rule_case(target, fixed, draw, label)
    return _formula_case(target, fixed, draw, label)
