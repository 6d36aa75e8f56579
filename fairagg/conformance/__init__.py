"""Conformance harness: check your own implementation of a rule or formula against fairagg.

[`check`][fairagg.conformance.check] calls your function on fairagg's golden inputs
([`fairagg.vectors`][fairagg.vectors]: small, medium and degenerate cases, and the rules' variants)
and on generated ones, compares what it returns with what fairagg computes, and reports the first
case that differs, minimised, with the quantity that differs and, where it is verified, why::

    from fairagg.conformance import check

    def my_qfedavg(params, deltas, losses, q, lr):   # your code, any argument order
        ...
        return new_params

    check(my_qfedavg, "qfedavg_step")   # raises ConformanceError with the minimised case

**Targets.** Any registered rule ([`fairagg.RULES`][fairagg.RULES]: ``"fedavg"``, ``"qfedavg"``,
...) or formula function ([`fairagg.vectors.FORMULAS`][fairagg.vectors.FORMULAS]:
``"qfedavg_step"``, ``"project_simplex"``, ...); [`targets`][fairagg.conformance.targets] lists them
and [`describe`][fairagg.conformance.describe] says what a target passes, its defaults, and the
causes it can name.

**Calling convention.** Your function is called with keyword arguments named as fairagg names
its inputs (a formula's arguments, e.g. ``params``, ``deltas``, ``losses``, and every parameter
fairagg uses, defaults included, e.g. ``q``, ``lr``, ``epsilon``), restricted to the names your
function's signature takes (all of them if it takes ``**kwargs``). A rule's function is called
once per round with ``params`` (θ^t, your own previous output), the round's report fields
(``deltas`` or ``gradients``, ``num_samples``, ``losses``, ``accuracies``, ``participations``,
``client_ids``, ``lr``, ``round_index``), ``num_clients`` and the rule's hyper-parameters; it
returns θ^{t+1}. A rule that keeps state across rounds is checked with
``Adapter(stateful=True)``: your function is then a factory, called once per case with
``params`` (θ⁰), ``num_clients`` and the hyper-parameters, returning the per-round function.
[`Adapter`][fairagg.conformance.Adapter] renames arguments, fixes extra ones, names the items of a
returned tuple, or takes over the call entirely.

**Outputs and terms.** Return an array (the target's main output: θ^{t+1} for a rule, a
formula's first output) or a dict. A dict may also hold intermediate terms of the formula (for
q-FedAvg ``Delta_w``, ``F_tilde``, ``Delta``, ``h``, ...; [`describe`][fairagg.conformance.describe]
lists them): they are compared first, in the order the formula computes them, so the report names
the first term that differs.

**One verdict in every mode.** Every golden case and every generated example runs, whatever
the mode: ``keep_going`` only adds a row per comparison to the report. Generated examples come
from fairagg's own generator, example i of a target the same for a seed in every process
(``seed``, default 0, printed in the report).

**Causes, named only when verified.** When your code differs, the harness tries the causes it
knows for the target ([`describe`][fairagg.conformance.describe] lists them): the registered
mistakes written as code (a norm not squared, ε missing, L missing, fair_flearn's off-by-one
projection, FedMGDA+'s box applied after the solve or its ‖δ‖ + c normalisation, FedFV's projections
onto already-projected updates, a tilt of the other sign, θ⁰ inside AFL's average, λ^{t+1} in AFL's
step, 1/m weights, one shared loss, ...), fairagg's other settings (``variant``, ``order``,
``weighting``, the CDF, the window, the booleans), fitted values (ε, q, α, a λ step, L, the c of
‖δ‖ + c), another round base, float32 and a solver's accuracy, and the formula computed
literally in float64. A cause is named only when fairagg changed by exactly it reproduces
your outputs on every differing case and still agrees where yours agreed; the report says
how to check with it taken into account (``params={'epsilon': 1e-08}``, ``--param
epsilon=1e-08``). Where several fit, more generated examples are run until one tells them
apart; where none does, all are listed as ambiguous. Where none fits: "cause not identified",
with the data. ``accept=`` declares documented deviations
([`ACCEPTABLE`][fairagg.conformance.ACCEPTABLE]): cases that differ only so are counted, not
reported.

**Tolerance.** Each output is compared within its own error bound: fairagg's outputs on
inputs perturbed by a few units of round-off show how far a correct implementation's may be
(``fairagg._tolerance``; the golden files carry the same bounds), in the precision your
code computes in: ``precision="float64"`` (default), ``"float32"``, or ``"solver"`` (float64
plus ``solver_tol``, an argmin from an iterative or conic solver). ``rtol``/``atol`` give a
blanket tolerance instead.

**Minimisation.** The case shown is minimised (rounds, clients and coordinates dropped,
numbers simplified) while the difference and its diagnosis stay the same.

The pytest fixture ``fairagg_conformance`` (``fairagg.pytest_plugin``, enabled by
``pytest_plugins = ["fairagg.pytest_plugin"]`` in a conftest) does the same and fails the test
with the report.
"""

from __future__ import annotations

from .._worker import Worker, WorkerError
from ._adapter import Adapter
from ._causes import MISTAKES, Cause, Mistake
from ._check import ACCEPTABLE, check
from ._checker import Row
from ._common import Skip, targets
from ._describe import describe
from ._report import ConformanceError, ConformanceReport, Mismatch
from ._results import compare_results

# The public names are documented, compared and pickled as fairagg.conformance's (their rooms
# are private modules).
for _obj in (Adapter, Cause, Mistake, check, Row, Skip, describe, targets, ConformanceError,
             ConformanceReport, Mismatch, compare_results):  # fmt: skip
    _obj.__module__ = __name__
del _obj

__all__ = [
    "ACCEPTABLE",
    "MISTAKES",
    "Adapter",
    "Cause",
    "ConformanceError",
    "ConformanceReport",
    "Mismatch",
    "Mistake",
    "Row",
    "Skip",
    "Worker",
    "WorkerError",
    "check",
    "compare_results",
    "describe",
    "targets",
]
