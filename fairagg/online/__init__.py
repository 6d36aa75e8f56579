"""Fair federated learning as online convex optimisation over the simplex (SPEC §4, §5; AAgFF
poster, "Fair FL algorithms are OCO algorithms" and "AAgFF").

A server that picks mixing coefficients p ∈ Δ_{K−1} each round is an online learner: it plays p^t,
then sees a response vector r^t (a transform of the clients' losses) and suffers the decision loss
ℓ_t(p) = −log(1 + ⟨p, r^t⟩). This module holds that layer, once and exactly:

- [`exponentiated_gradient`][fairagg.online.exponentiated_gradient] (the poster's EG step; the OCO
  view of FedAvg, q-FedAvg, TERM and PropFair) and [`entropic_ftrl`][fairagg.online.entropic_ftrl];
- the AAgFF response [`aaggff_response`][fairagg.online.aaggff_response] with its six CDFs
  ([`RESPONSE_CDFS`][fairagg.online.RESPONSE_CDFS]);
- [`decision_loss`][fairagg.online.decision_loss],
  [`decision_gradient`][fairagg.online.decision_gradient], [`regret`][fairagg.online.regret] and the
  exactly solved [`best_fixed_decision`][fairagg.online.best_fixed_decision];
- AAgFF-S's quadratic FTRL ([`QuadraticFTRL`][fairagg.online.QuadraticFTRL],
  [`quadratic_ftrl_step`][fairagg.online.quadratic_ftrl_step]), solved exactly by
  [`fairagg.simplex.solve_simplex_qp`][fairagg.simplex.solve_simplex_qp];
- AAgFF-D's entropic FTRL ([`aaggff_d_decision`][fairagg.online.aaggff_d_decision]) with the
  doubly-robust response ([`dr_response`][fairagg.online.dr_response]) and its first-order gradient
  ([`dr_gradient`][fairagg.online.dr_gradient]);
- the regret bounds of Theorems 1-2 / Corollary 3 and two players
  ([`play_aaggff_s`][fairagg.online.play_aaggff_s], [`play_aaggff_d`][fairagg.online.play_aaggff_d])
  that run the learners on a response sequence.

The rules in [`fairagg.rules.oco`][fairagg.rules.oco] and
[`fairagg.rules.aaggff`][fairagg.rules.aaggff] are built from these functions;
[`fairagg.oracles`][fairagg.oracles] re-solves every argmin with cvxpy.
"""

from __future__ import annotations

# In the order of the concepts, not sorted: the API page lists the names so.
# isort: off
from ._entropic import exponentiated_gradient, entropic_ftrl
from ._response import RESPONSE_CDFS, aaggff_response, decision_loss, decision_gradient
from ._response import VARIANTS as VARIANTS
from ._regret import BestFixedDecision, cumulative_regret, best_fixed_decision, regret
from ._regret import theorem1_bound, theorem2_bound
from ._sums import QuadraticFTRL, LowRankFTRL, aaggff_s_defaults, quadratic_ftrl_init
from ._sums import quadratic_ftrl_update, quadratic_ftrl_problem
from ._ftrl import quadratic_ftrl_step, FTRLRound, quadratic_ftrl_round
from ._doubly_robust import dr_response, dr_gradient, official_first_decision, aaggff_d_decision
from ._doubly_robust import _dr_gradient as _dr_gradient  # fairagg.rules.aaggff's, unchecked
from ._players import play_aaggff_s, play_aaggff_d
# isort: on

# The public names are documented, compared and pickled as fairagg.online's (their rooms are
# private modules: _entropic, _response, _regret, _sums (AAgFF-S's state), _ftrl and _low_rank
# (its step), _doubly_robust (AAgFF-D) and _players).
for _obj in (aaggff_d_decision, dr_gradient, dr_response, official_first_decision, entropic_ftrl,
             exponentiated_gradient, FTRLRound, quadratic_ftrl_round, quadratic_ftrl_step,
             play_aaggff_d, play_aaggff_s, BestFixedDecision, best_fixed_decision,
             cumulative_regret, regret, theorem1_bound, theorem2_bound, aaggff_response,
             decision_gradient, decision_loss, LowRankFTRL, QuadraticFTRL, aaggff_s_defaults,
             quadratic_ftrl_init, quadratic_ftrl_problem, quadratic_ftrl_update):  # fmt: skip
    _obj.__module__ = __name__
del _obj

__all__ = [
    "RESPONSE_CDFS",
    "BestFixedDecision",
    "FTRLRound",
    "LowRankFTRL",
    "QuadraticFTRL",
    "aaggff_d_decision",
    "aaggff_response",
    "aaggff_s_defaults",
    "best_fixed_decision",
    "cumulative_regret",
    "decision_gradient",
    "decision_loss",
    "dr_gradient",
    "dr_response",
    "entropic_ftrl",
    "exponentiated_gradient",
    "official_first_decision",
    "play_aaggff_d",
    "play_aaggff_s",
    "quadratic_ftrl_init",
    "quadratic_ftrl_problem",
    "quadratic_ftrl_round",
    "quadratic_ftrl_step",
    "quadratic_ftrl_update",
    "regret",
    "theorem1_bound",
    "theorem2_bound",
]
