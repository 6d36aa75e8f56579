"""Golden vectors: language-neutral test cases of every registered rule and formula.

``fairagg vectors --out DIR`` ([`write_vectors`][fairagg.vectors.write_vectors]) writes, for each
rule of [`fairagg.RULES`][fairagg.RULES] and each formula function of
[`FORMULAS`][fairagg.vectors.FORMULAS], a set of cases (``small``, ``medium`` and degenerate ones:
ties, zero updates, a single client, extreme losses, and the rule's variants) as JSON files: the
inputs, every parameter, the outputs fairagg computes in float64, and the tolerance each comparison
deserves. Arrays of more than [`INLINE_MAX`][fairagg.vectors.INLINE_MAX] entries go to ``.npy``
files beside the JSON. ``DIR/schema.json`` is a JSON Schema of a case file and ``DIR/index.json``
lists the cases.

Everything is generated deterministically from ``seed``: the inputs are bitwise reproducible on
any machine (derived inputs, such as a Gram matrix, are correctly rounded sums rather than BLAS
products); the expected outputs are bitwise reproducible on one machine and agree across
machines within their tolerances, a few ulps apart (BLAS may sum in another order, NumPy's SIMD
exp/log round differently by CPU). [`check_vectors`][fairagg.vectors.check_vectors] recomputes every
case with the library and reports the comparisons that fail
([`compare_vectors`][fairagg.vectors.compare_vectors] also each case's distance), which is how the
stored set in the test suite is kept equal to what fairagg computes today, and how another
implementation can be checked against the files.

Case file (``schema_version`` 1)::

    {"schema_version": 1, "kind": "rule" | "formula", "name": ..., "case": ...,
     "description": ..., "function": "fairagg.rules.qffl.qfedavg_step" (formulas),
     "formula": one line of what is computed, "args": [positional argument names],
     "params": {keyword arguments, or the rule's hyper-parameters},
     "inputs": {...}, "expected": {...} or {"error": {"type": ..., "message": ...}},
     "tolerance": {output name: {"rtol": r, "atol": a} or {"exact": true}}}

A tolerance entry may also carry ``"argmin"``, the problem the output minimises when its
minimiser is not unique (a min-norm weighting λ over a singular Gram matrix,
``NON_UNIQUE``): there another minimiser is as right as the stored one, so compare the
objective value and the optimality (KKT) conditions instead of the entries, as
[`fairagg.conformance.check`][fairagg.conformance.check] does.

An array is ``{"dtype": "float64" | "int64" | "bool", "shape": [...], "data": [flat, C order]}``
or, when large, ``{"dtype": ..., "shape": [...], "file": "NAME.npy"}``. A rule case's inputs are
``{"params0": θ⁰, "num_clients": K, "rounds": [report fields of each round]}`` (the
[`RoundReports`][fairagg.types.RoundReports] fields: ``deltas`` or ``gradients``, ``num_samples``,
``losses``, ``accuracies``, ``participations``, ``client_ids``, ``lr``, ``round_index``) and its
expected outputs ``{"rounds": [{"params": θ^{t+1}, "weights": ..., other numeric info}]}``,
the rule's state carried from round to round. A comparison passes when
|got − want| ≤ atol + rtol·|want| entrywise.
"""

from __future__ import annotations

# In the order of the concepts, not sorted: the API page lists the names so.
# isort: off
from ._encoding import SCHEMA_VERSION, INLINE_MAX
from ._formulas import FORMULAS, Formula
from ._check import CaseCheck
from ._generate import case_inputs, generate
from ._files import write_vectors, load_case
from ._check import compare_vectors, check_vectors
# isort: on

# Besides __all__, the names fairagg.conformance, the command line and the tests read here, and
# the old module's other constants, stay at their paths. The rooms: _encoding, _tolerances, the
# cases of the formulas (_formula_cases, _formulas) and of the rules (_rules), _generate,
# _schema, _files and _check.
from ._encoding import Json as Json
from ._encoding import _encode as _encode
from ._formula_cases import CANCELLING as CANCELLING
from ._formula_cases import NEAR_ZERO_LOSSES as NEAR_ZERO_LOSSES
from ._formula_cases import CaseInputs as CaseInputs
from ._formula_cases import _exact_gram as _exact_gram
from ._generate import DEFAULT_SEED as DEFAULT_SEED
from ._generate import _compute as _compute
from ._generate import resolved_params as resolved_params
from ._generate import tolerances as tolerances
from ._rules import AFL_CLIPPING_LOSSES as AFL_CLIPPING_LOSSES
from ._rules import DEGENERATE as DEGENERATE
from ._rules import RULE_EXCLUDE as RULE_EXCLUDE
from ._rules import RULE_VARIANTS as RULE_VARIANTS
from ._rules import VARIANT_KEYS as VARIANT_KEYS
from ._rules import _run_rule as _run_rule
from ._schema import SCHEMA as SCHEMA
from ._schema import schema as schema
from ._tolerances import BOUND as BOUND
from ._tolerances import NON_UNIQUE as NON_UNIQUE
from ._tolerances import PRECISIONS as PRECISIONS
from ._tolerances import REL as REL

# The public names are documented, compared and pickled as fairagg.vectors's.
for _obj in (CaseCheck, check_vectors, compare_vectors, load_case, write_vectors, Formula,
             case_inputs, generate):  # fmt: skip
    _obj.__module__ = __name__
del _obj

__all__ = [
    "FORMULAS",
    "INLINE_MAX",
    "SCHEMA_VERSION",
    "CaseCheck",
    "Formula",
    "case_inputs",
    "check_vectors",
    "compare_vectors",
    "generate",
    "load_case",
    "write_vectors",
]
