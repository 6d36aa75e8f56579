"""``describe``: what a target passes to the user's code, its defaults, the terms it compares
and the causes the harness can name for it."""

from __future__ import annotations

import numpy as np

from .. import RULES, make_rule
from ..vectors import FORMULAS
from ._causes import FITS, SETTINGS, mistakes_for
from ._common import default_params, formula_text, kind_of
from ._restate import terms_of


def _defaults(params: dict) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in params.items()) or "none"


def describe(target: str) -> str:
    """What [`check`][fairagg.conformance.check] passes to a function checked against ``target``
    (with every parameter's default), what it compares, and the causes it can name."""
    kind = kind_of(target)
    lines = [f"{target} ({kind}): {formula_text(target)}"]
    if kind == "formula":
        f = FORMULAS[target]
        defaults = default_params(target, {})
        example = next(iter(f.cases(np.random.default_rng(0)).values()))[2]
        required = {k: v for k, v in example.items() if k not in defaults}
        lines.append("inputs: " + ", ".join(f.args))
        lines.append("parameters (defaults): " + _defaults(defaults))
        if required:
            lines.append("parameters without a default (a golden case's values): "
                         + _defaults(required))  # fmt: skip
        params = {**defaults, **example}
    else:
        spec = RULES[target]
        key = "gradients" if make_rule(target).local.report == "gradients" else "deltas"
        lines.append(
            f"each round: params (θ^t), {key}, num_samples, losses, accuracies, participations, "
            "client_ids, lr, round_index, num_clients"
            + (" (every client every round)" if spec.full_participation else "")
        )
        params = default_params(target, {})
        lines.append("hyper-parameters (defaults): " + _defaults(params))
        lines.append("returns θ^{t+1}; a dict may add the rule's info (e.g. weights)")
    terms = terms_of(target)
    if terms is not None:
        lines.append("terms a returned dict may hold:")
        lines += [f"  {k}: {v}" for k, v in terms.texts.items()]
    mistakes = mistakes_for(target)
    if mistakes:
        lines.append("registered mistakes (named when verified):")
        lines += [f"  {m.name} ({m.term}): {m.text}" for m in mistakes]
    tried = [k for k in SETTINGS if k in params]
    if tried:
        lines.append("other settings tried: " + ", ".join(tried))
    fits = FITS.get(target, ())
    if fits:
        lines.append("values fitted to your outputs: " + ", ".join(f.param for f in fits))
    if kind == "rule":
        lines.append("also tried: round base ±1, float32 precision")
    else:
        lines.append("also tried: float32 precision")
    return "\n".join(lines)
