"""Geometry of the probability simplex: exact projections, the simplex-constrained QP, min-norm
points and entropic (KL) steps (SPEC §3-§5, §8; AAgFF poster; FedMGDA+).

Everything here is *exact*: each argmin is found by a finite algorithm (a sort, a sweep over
breakpoints, an active-set method) and is correct up to floating-point round-off, never "to a
solver tolerance". ``fairagg.oracles`` solves the same problems with cvxpy as an independent check.

Sets used below, for a length-K vector x:

- the simplex Δ = {x : x ≥ 0, Σ x = total} (``total`` = 1 unless stated);
- the box-simplex {x : lower ≤ x ≤ upper, Σ x = total}, ``lower``/``upper`` scalars or length-K
  arrays, ``upper`` may be ``inf``. It is non-empty iff lower ≤ upper and Σ lower ≤ total ≤ Σ upper.

Conventions: inputs are validated once (``ValueError``/``TypeError`` naming the argument); the
projections keep a float32/float64 input's dtype; the QP machinery computes and returns float64.
"""

from __future__ import annotations

# In the order of the concepts, not sorted: the API page lists the names so.
# isort: off
from ._projection import project_simplex, check_box, project_box_simplex
from ._solve import QPResult, QPFactor, solve_simplex_qp, a_norm_projection
from ._solve import SingularSystemError, IllConditionedQPError
from ._min_norm import MinNormResult, min_norm_weights, min_norm_point
from ._entropic import log_normalize, kl_step, check_simplex_point
# isort: on

# The public names are documented, compared and pickled as fairagg.simplex's (their rooms are
# private modules: _projection, _free_set and _active_set (the compiled QP), _solve (its Python
# layer, also fairagg.online's interface with _scan), _min_norm and _entropic).
for _obj in (check_simplex_point, kl_step, log_normalize, MinNormResult, min_norm_point,
             min_norm_weights, check_box, project_box_simplex, project_simplex,
             IllConditionedQPError, QPFactor, QPResult, SingularSystemError, a_norm_projection,
             solve_simplex_qp):  # fmt: skip
    _obj.__module__ = __name__
del _obj

__all__ = [
    "MinNormResult",
    "QPFactor",
    "QPResult",
    "a_norm_projection",
    "check_box",
    "check_simplex_point",
    "kl_step",
    "log_normalize",
    "min_norm_point",
    "min_norm_weights",
    "project_box_simplex",
    "project_simplex",
    "solve_simplex_qp",
]
