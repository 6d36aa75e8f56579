"""FedFa on the four Synthetic datasets, in miniature: the FedFa paper's Table 2 and Fig. 2 set-up.

What the paper reports (Huang et al., "Fairness and Accuracy in Federated Learning", 2020, §4.3,
Table 2): statistics of the final per-device *test* accuracies (average, mean of the worst and of
the best 20 % of the devices, variance in percent²) for FedAvg, FedProx and FedFa, one run each:

    dataset            method    Average   Worst 20%   Best 20%   Variance
    Synthetic_iid      FedAvg     89.11      78.17      100.00       68.04
                       FedProx    71.92      55.46       86.09      129.09
                       FedFa      85.70      71.46      100.00       98.74
    Synthetic_0_0      FedAvg     54.67       6.81       98.18     1112.46
                       FedProx    75.02      37.21      100.00      611.10
                       FedFa      78.25      43.41      100.00      530.27
    Synthetic_0.5_0.5  FedAvg     40.24       0.00       98.18     1448.46
                       FedProx    67.84      33.60      100.00      618.00
                       FedFa      73.30      41.27      100.00      464.81
    Synthetic_1_1      FedAvg     54.78       1.38       96.85     1069.37
                       FedProx    64.75       9.72      100.00     1088.87
                       FedFa      76.88      37.03      100.00      603.69

The paper's reading: on the IID data FedFa is "slightly inferior to FedAvg, but performs better
than FedProx"; on the three non-IID sets FedFa has the highest average and worst / best 20 % and
the lowest variance. §4.3 runs FedFa with (α, β) = (0.5, 0.5), (0, 1) and (1, 0) but Table 2 has
one FedFa row and does not say which; we print it beside each of our three FedFa rows. §4.2 (its
Fig. 2) shows that FedFa's double momentum, "without applying the weighting strategy", converges
faster than FedAvg and FedProx on all four sets, and that server momentum suits heterogeneous data
better than client momentum.

Set-up, and where each choice comes from:

- Data: ``fairagg.data.synthetic``, the FedProx generator (60 features, 10 classes, n_k =
  floor(LogNormal(4, 2)) + 50), 30 devices (§4.1: "30 devices in total for all synthetic
  datasets"): Synthetic_iid (``iid=True``, α = β = 0: one shared model, v_k = 0) and
  Synthetic(α, β) for (0, 0), (0.5, 0.5), (1, 1). Each device splits 80 % train / 20 % test
  (§4.1). The draw is fixed (``--data-seed``, default 0: 5385 samples, 50-889 per device); the
  split is redrawn per seed (``split_seed = s``); ``--vary-data`` also redraws the data per seed
  (generator seed s; the log-normal tail then makes some seeds 10 times larger and slower).
  ``--max-samples`` clips n_k (default: no clip, as FedProx's generator).
- Model: multinomial logistic regression, zero initialisation (the "mclr" of FedProx's code).
- Local training (§4.2 fixes E = 20 "to study how statistical heterogeneity affects convergence",
  the FedProx synthetic set-up, whose public run scripts also use batch 10, 10 devices per round
  and 200 rounds): 10 of 30 devices per round (§4.1), E = 20 epochs of minibatch SGD with batch 10.
- Sampling: uniform without replacement for every method, with the same devices and shuffles for
  every method of a seed (``simulate(seed=s)``), so that differences between methods are paired.
  The FedFa paper only says that the selection "is random each round". FedProx's public code
  (``flearn/trainers/fedbase.py``: ``select_clients``, ``aggregate``) samples uniformly without
  replacement and averages the returned models with weights ∝ n_k; we do the same.
- FedAvg: weights ∝ n_k over the selected devices (eq. 8 of the FedFa paper), lr 0.01.
- FedProx: the same, with the proximal term μ/2 ||w − θ^t||² in local training, μ = 1
  (``--prox-mu``). μ = 1 is FedProx's choice for its synthetic data (Li et al., MLSys 2020): its
  public code reproduces the synthetic figures with ``run_fedprox.sh synthetic_* 0 1`` (μ = 1 on
  all four sets, README) and its ``plot_final_e20.py`` uses μ = 1 for Synthetic(1,1); the FedFa
  paper says its FedAvg and FedProx settings are "strictly referenced to the settings in [15]".
- FedFa (``fairagg.rules.fedfa``, whose formulas are reconstructed: our copy of the paper lost
  its equations): (α, β) ∈ {(0.5, 0.5), (1, 0), (0, 1)} (§4.3); server momentum γ = 0.5 and
  client momentum 0.9 on Synthetic_iid and (0, 0), 0.5 on (0.5, 0.5) and (1, 1) (§4.1-4.2;
  ``--client-momentum`` overrides it for every set); η_s = 1 (``--eta-s``; the paper gives no
  value), τ = 1 (``--tau``; §4.4 also uses 3); the reported accuracy is that of the received
  model (``--accuracy-source``, the library's default); the paper's sign of the server momentum
  (``--variant``).
- Learning rate: 0.01 for every method (``--lr``; ``--fedfa-lr`` sets FedFa's alone). The paper
  runs FedFa at 0.0001 and the baselines at 0.01 (§4.1), and compares them "at the same learning
  rate" in its Fig. 5; one rate for all is the comparison that isolates the aggregation rule, and
  0.01 is FedProx's rate for these data. FedFa's client momentum 0.9 at lr 0.01 does not diverge,
  but it is a step of lr/(1 − 0.9) = 0.1 per batch, and on Synthetic(0, 0) it settles at a worse
  model than no momentum at all (the ablation below shows it).
- Control: uniform weights 1/m (the library's ``fairavg``), no momentum. FedFa's weights differ
  from FedAvg's in two ways, they ignore n_k and they use the accuracy / participation information;
  the control separates the two.
- Momentum ablation (Fig. 2), on every set: FedFa's (0.5, 0.5) weights with (a) no momentum
  (client momentum 0, η_s = 0), (b) client momentum only, (c) server momentum only, (d) both
  (= the FedFa (0.5, 0.5) row); and, as the paper's Fig. 2 ("only the momentum mechanism, without
  the weighting strategy"), the same momenta on FedAvg's weights ∝ n_k (``momentum_only_rule``:
  FedAvg's average followed by FedFa's server step; with neither momentum it is FedAvg itself).
  "AUC" is the mean test accuracy averaged over the evaluations, a number for convergence speed.
- Rounds: 100 by default, so that the 144 runs (4 sets × 12 methods × 3 seeds) take under three
  minutes on two cores; FedProx's public scripts run 200 (``--rounds 200``, results below). Seeds:
  s = 1, 2, 3 seed the split and the run; the table gives mean ± std (population) over seeds.
- Metrics: ``fairagg.metrics.fairness_summary`` of the final test accuracies: average
  (sample-weighted over the devices' test sets, as FedProx's code logs it), worst / best 20 % (mean
  of the 6 lowest / highest of 30 device accuracies), variance (population, percent²). The verdict
  compares each FedFa setting with FedAvg and FedProx by the paired difference over seeds (same
  split, devices and shuffles): "beyond noise" when |mean| > 2 standard errors.

What this script showed (default run: 144 runs in 2 min 46 s on two cores). Final test accuracy,
average / worst 20 % / variance, mean over 3 seeds (the std over seeds is in ``table.txt``):

  set             FedAvg         FedProx     uniform w.    FedFa .5,.5      FedFa 1,0      FedFa 0,1
  iid       81.6/68.7/71   67.1/52.7/105   77.1/63.6/79   91.1/81.0/41   91.0/81.0/40   91.0/81.0/40
  0_0      76.9/13.1/988   84.3/45.6/445  81.9/46.0/463  71.4/25.5/754  71.4/27.3/719  71.0/23.6/792
  0.5_0.5  85.6/23.9/938   88.2/27.7/871  90.1/43.7/543  90.8/47.1/467  91.0/49.3/445  90.6/45.6/491
  1_1      79.2/7.7/1233  84.5/13.6/1196  83.0/32.3/733  87.8/49.0/445  88.4/50.7/417  86.1/41.6/599

- Where FedFa beats the baselines: on Synthetic(0.5, 0.5) and (1, 1) every FedFa setting has a
  higher average and worst 20 % and a lower variance than both FedAvg and FedProx, beyond noise
  (every seed), as the paper's Table 2 says: +1.6 to +3.9 points of average and +18 to +37 of worst
  20 % over FedProx. On Synthetic_iid too (+9.5 over FedAvg), which the paper does not have
  (85.70 against FedAvg's 89.11): with the same learning rate the momenta make FedFa converge
  faster, and FedAvg is still climbing at round 100 (and at 200: 85.2 against FedFa's 92.4).
- Where it does not: on Synthetic(0, 0) every FedFa setting is worse than FedProx on all three
  metrics and worse than FedAvg on average (−5.5), beyond noise (it keeps a higher worst 20 % and
  a lower variance than FedAvg). The cause is the client momentum 0.9 the paper prescribes for
  this set: at lr 0.01 it is a step of 0.1 per batch, and 20 local epochs of it drift. FedFa's
  weights without momentum (82.2 / 46.1 / 453) or with server momentum only (83.6 / 48.3 / 412)
  are level with FedProx (84.3 / 45.6 / 445); client momentum 0.5 (``--client-momentum 0.5``)
  gives 80.1 / 44.2 / 479.
- What the weighting buys is mostly not weighting by n_k: the uniform control gets most of
  FedFa's gain over FedAvg on the non-IID sets; FedFa's information adds to uniform weights beyond
  noise only on (0.5, 0.5) (+0.2 average, +1.2 worst 20 %) and (1, 1) (+2.1, +10.1). On IID both
  lose about 4.6 points of (sample-weighted) average to n_k weights, which optimise it. The three
  (α, β) settings have averages within 2.3 points of each other; (1, 0) (accuracy only) is the
  best and (0, 1) (participation only) the weakest (worst 20 % on (1, 1): 50.7 against 41.6):
  under uniform sampling the participation counts are nearly equal, so the participation part of
  the weights is nearly uniform.
- Momentum (Fig. 2): server momentum speeds convergence on every set with either weighting (AUC
  +1.3 to +6.0 points, lower final loss, beyond noise). Client momentum helps only on IID (AUC
  +12 to +15) and hurts on the three non-IID sets, most on (0, 0) at 0.9 (AUC −10). Both together
  beat no momentum on iid, (0.5, 0.5) and (1, 1) and lose on (0, 0). So the paper's remark that
  server momentum suits heterogeneous data better than client momentum holds; its claim that the
  double momentum speeds convergence on all four synthetic sets fails on (0, 0) at lr 0.01.
- 200 rounds (``--rounds 200``, 5 min 14 s): the same picture (a few of the smaller differences
  fall within noise), with FedAvg closer (Synthetic_iid 85.2 against 92.4; on (1, 1) FedFa (0.5,
  0.5) 89.8 / 55.0 / 361 against FedProx 87.0 / 33.1 / 742 and uniform weights 87.7 / 52.8 / 408).
- The paper's learning rates (``--fedfa-lr 0.0001``, baselines 0.01) reproduce its pattern on the
  three non-IID sets, (0, 0) included: FedFa (0.5, 0.5) 84.5 / 50.6 / 383 against FedProx 84.3 /
  45.6 / 445 (worst 20 % and variance beyond noise), 91.0 / 61.0 / 264 on (1, 1); on IID it falls
  below both baselines (64.3 against 81.6 and 67.1; the paper has it between them). The smaller
  step does much of this: FedAvg at lr 0.001 (``--lr 0.001``), about the step of FedFa at 0.0001
  with momentum 0.9, gives 64.6 on IID and 82.8 on (0, 0), and uniform weights at 0.001 give 83.7
  / 48.9 / 409 on (0, 0) and 86.4 / 43.6 / 564 on (1, 1), where FedFa stays clearly ahead.
- τ = 3 (``--tau 3``; the paper's Fig. 9 finds it more stable) gives 85.4 / 44.9 / 507 on (1, 1),
  a little below τ = 1. ``--variant flgo`` (the public code's sign) steps by η_s = lr by default,
  as the public code does: with ``--eta-s 1`` its sign pulls each round back toward the previous
  model (θ^{t+1} → θ^t once m settles) and FedFa (0.5, 0.5) ends at 34.8 % on (1, 1).
- Our absolute numbers are not the paper's: its data draw and code are not public, and its FedAvg
  (40-55 % on the non-IID sets) is far below ours (77-86 %). Our draw (data seed 0) has 5385
  samples, 50 to 889 per device.

Run: ``python validate/fedfa_synthetic.py [--out runs/fedfa_synthetic] [--seeds 1,2,3]
[--rounds 100] [--lr 0.01] [--fedfa-lr LR] [--datasets iid,0_0,0.5_0.5,1_1] [--methods KEY,...]
[--quick]`` (``--help`` lists the rest). Local training runs serially (``parallel=False``) with
one Numba thread (``--threads``; the previous count is restored on exit): on two shared cores
Numba's threads made the per-device evaluation 2.5 times slower when the cores were otherwise
idle and about 30 times slower when other work kept them busy. ``--quick`` (12 devices of
at most 100 samples, 5 per round, one seed, 4 rounds, E = 2) is the smoke test. Progress goes to
standard error, the tables and the verdict to standard output.

Writes, in ``--out``: ``runs.csv`` (one row per (dataset, method, seed), appended as each run
finishes, so a run stopped midway keeps what it did), ``accuracies.csv`` (every device's final
test accuracy, likewise), ``curves.csv`` (mean test accuracy and training loss along the rounds,
likewise), ``table.csv`` / ``table.txt`` (mean ± std per dataset and method beside the paper's
Table 2, the momentum ablation and the verdict), ``summary.json`` (configuration, data sizes, every
run with its curves, the tables, the verdict and the findings), ``momentum_ablation.png`` (mean
test accuracy and training loss along the rounds, per set) and ``final_accuracies.png`` (the
devices' final accuracies per method, with the paper's average and worst 20 %).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fairagg.data import FederatedData, synthetic
from fairagg.metrics import fairness_summary
from fairagg.models import LogisticRegression
from fairagg.rules import make_rule
from fairagg.rules.fedavg import apply_weighted_update, fedavg_weights
from fairagg.rules.fedfa import FedFaState, fedfa, fedfa_server_step
from fairagg.simulation import simulate
from fairagg.types import Aggregate, RoundReports, Rule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _output import (  # noqa: E402
    CsvAppender,
    cell,
    int_list,
    log,
    mean_std,
    numba_threads,
    render_columns,
    write_csv,
)

# ------------------------------------------------------------------------------------------------
# the paper and the experiment grid

#: (key, label, α, β, iid, the paper's client momentum (§4.2)).
DATASETS: tuple[tuple[str, str, float, float, bool, float], ...] = (
    ("iid", "Synthetic_iid", 0.0, 0.0, True, 0.9),
    ("0_0", "Synthetic_0_0", 0.0, 0.0, False, 0.9),
    ("0.5_0.5", "Synthetic_0.5_0.5", 0.5, 0.5, False, 0.5),
    ("1_1", "Synthetic_1_1", 1.0, 1.0, False, 0.5),
)
DATASET_KEYS = tuple(d[0] for d in DATASETS)

#: Table 2 of the FedFa paper: dataset → method → (average, worst 20 %, best 20 %, variance).
PAPER_TABLE2: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "iid": {
        "FedAvg": (89.11, 78.17, 100.00, 68.04),
        "FedProx": (71.92, 55.46, 86.09, 129.09),
        "FedFa": (85.70, 71.46, 100.00, 98.74),
    },
    "0_0": {
        "FedAvg": (54.67, 6.81, 98.18, 1112.46),
        "FedProx": (75.02, 37.21, 100.00, 611.10),
        "FedFa": (78.25, 43.41, 100.00, 530.27),
    },
    "0.5_0.5": {
        "FedAvg": (40.24, 0.00, 98.18, 1448.46),
        "FedProx": (67.84, 33.60, 100.00, 618.00),
        "FedFa": (73.30, 41.27, 100.00, 464.81),
    },
    "1_1": {
        "FedAvg": (54.78, 1.38, 96.85, 1069.37),
        "FedProx": (64.75, 9.72, 100.00, 1088.87),
        "FedFa": (76.88, 37.03, 100.00, 603.69),
    },
}
PAPER_KEYS = ("average", "worst_20", "best_20", "variance")

#: (key, label, kind, α or None, client momentum on, server momentum on, paper row or None).
#: kind: "fedavg", "fedprox", "uniform" (FedAvg with weights 1/m, the library's ``fairavg``: a
#: control that separates FedFa's information weighting from merely not weighting by n_k),
#: "fedfa" (FedFa's weights) or "momentum" (n_k weights + FedFa's momenta, the paper's Fig. 2).
#: α is FedFa's accuracy weight, β = 1 − α.
METHODS: tuple[tuple[str, str, str, float | None, bool, bool, str | None], ...] = (
    ("fedavg", "FedAvg", "fedavg", None, False, False, "FedAvg"),
    ("fedprox", "FedProx", "fedprox", None, False, False, "FedProx"),
    ("uniform", "Uniform weights", "uniform", None, False, False, None),
    ("fedfa-0.5-0.5", "FedFa (0.5,0.5)", "fedfa", 0.5, True, True, "FedFa"),
    ("fedfa-1-0", "FedFa (1,0)", "fedfa", 1.0, True, True, "FedFa"),
    ("fedfa-0-1", "FedFa (0,1)", "fedfa", 0.0, True, True, "FedFa"),
    ("fedfa-none", "FedFa w. no momentum", "fedfa", 0.5, False, False, None),
    ("fedfa-client", "FedFa w. client mom.", "fedfa", 0.5, True, False, None),
    ("fedfa-server", "FedFa w. server mom.", "fedfa", 0.5, False, True, None),
    ("mom-client", "n_k w. client mom.", "momentum", None, True, False, None),
    ("mom-server", "n_k w. server mom.", "momentum", None, False, True, None),
    ("mom-both", "n_k w. both mom.", "momentum", None, True, True, None),
)
METHOD_KEYS = tuple(m[0] for m in METHODS)
TABLE_KEYS = ("fedavg", "fedprox", "uniform", "fedfa-0.5-0.5", "fedfa-1-0", "fedfa-0-1")
FEDFA_KEYS = ("fedfa-0.5-0.5", "fedfa-1-0", "fedfa-0-1")
#: The momentum ablation: weights → (none, client, server, both) method keys.
ABLATION: dict[str, tuple[str, str, str, str]] = {
    "FedFa (0.5,0.5) weights": ("fedfa-none", "fedfa-client", "fedfa-server", "fedfa-0.5-0.5"),
    "FedAvg weights (n_k)": ("fedavg", "mom-client", "mom-server", "mom-both"),
}
MOMENTA = ("none", "client", "server", "both")
#: Rows of the ablation table without momentum, for reference: (weights, key).
ABLATION_REFERENCE = (("n_k, FedProx prox. term", "fedprox"), ("uniform (1/m)", "uniform"))
#: What each part of FedFa buys: (what, method, baseline), paired over seeds.
DECOMPOSITION = (
    ("FedFa's weights alone (no momentum) vs FedAvg", "fedfa-none", "fedavg"),
    ("FedFa's weights vs uniform weights (both without momentum)", "fedfa-none", "uniform"),
    ("uniform weights vs FedAvg's n_k weights", "uniform", "fedavg"),
    ("FedFa's momenta alone (on n_k weights, Fig. 2) vs FedAvg", "mom-both", "fedavg"),
    ("FedFa's momenta on top of its weights", "fedfa-0.5-0.5", "fedfa-none"),
)

FULL = {
    "seeds": "1,2,3",
    "rounds": 100,
    "devices": 30,
    "clients_per_round": 10,
    "epochs": 20,
    "max_samples": 0,
}
QUICK = {
    "seeds": "1",
    "rounds": 4,
    "devices": 12,
    "clients_per_round": 5,
    "epochs": 2,
    "max_samples": 100,
}
#: A paired difference counts as more than seed-to-seed noise beyond this many standard errors.
SE_FACTOR = 2.0
#: Which direction is better, per metric.
HIGHER_IS_BETTER = {
    "average": True,
    "worst_20": True,
    "best_20": True,
    "variance": False,
    "train_loss": False,
    "auc": True,
}
SUMMARY_KEYS = (
    "average",
    "client_mean",
    "worst_20",
    "best_20",
    "worst_10",
    "best_10",
    "min",
    "max",
    "variance",
    "std",
)
RUN_FIELDS = [
    "dataset",
    "method",
    "label",
    "seed",
    "data_seed",
    "split_seed",
    "rounds",
    "lr",
    "hyperparams",
    "status",
    "seconds",
    *SUMMARY_KEYS,
    "train_loss",
    "auc",
    "weights_min",
    "weights_sum_error",
]


# ------------------------------------------------------------------------------------------------
# FedFa's momenta on FedAvg's weights (the paper's Fig. 2)


def momentum_only_rule(
    *,
    gamma: float = 0.5,
    eta_s: float = 1.0,
    tau: int = 1,
    client_momentum: float = 0.9,
    variant: str = "paper",
) -> Rule:
    """FedFa's double momentum without its weighting strategy (the FedFa paper's Fig. 2).

    Each round averages the updates with FedAvg's weights a_k = n_k / Σ_S n (FedFa's eq. 8) and
    then takes FedFa's server step (``fairagg.rules.fedfa.fedfa_server_step``, every τ-th
    round); the clients run FedFa's momentum SGD (``client_momentum``). The rule is the library's
    ``fedfa`` with its weights p_k replaced by a_k: its state, validation and
    ``LocalSpec`` are ``fedfa``'s. With ``eta_s = 0`` and ``client_momentum =
    0`` it is FedAvg.
    """
    base = fedfa(
        gamma=gamma, eta_s=eta_s, tau=tau, client_momentum=client_momentum, variant=variant
    )
    g, eta, period = base.hyperparams["gamma"], base.hyperparams["eta_s"], base.hyperparams["tau"]

    def step(params: np.ndarray, reports: RoundReports, state: FedFaState) -> Aggregate:
        a = fedavg_weights(reports.num_samples)
        avg = apply_weighted_update(params, reports.deltas, a)
        t = state.rounds + 1
        apply = t % period == 0
        res = fedfa_server_step(
            params, avg, state.momentum, gamma=g, eta_s=eta, apply=apply, variant=variant
        )
        info = {"weights": a, "server_correction": bool(apply)}
        return Aggregate(res.params, FedFaState(res.momentum, t), info)

    hyper = {**base.hyperparams, "weights": "n_k (FedAvg)"}
    return Rule("fedfa-momentum-only", base.init, step, hyper, base.local)


# ------------------------------------------------------------------------------------------------
# arguments


def _keys(text: str | None, allowed: tuple[str, ...], what: str) -> list[str]:
    if text is None:
        return list(allowed)
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in allowed]
    if bad or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown {what} key(s) {bad}; choose from {', '.join(allowed)}"
        )
    return [k for k in allowed if k in keys]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/fedfa_synthetic"))
    ap.add_argument("--seeds", default=None, help=f"comma list (default {FULL['seeds']})")
    ap.add_argument("--rounds", type=int, default=None, help=f"default {FULL['rounds']}")
    ap.add_argument(
        "--datasets", default=None, help=f"comma list (default all: {','.join(DATASET_KEYS)})"
    )
    ap.add_argument(
        "--methods", default=None, help=f"comma list of keys (default all: {','.join(METHOD_KEYS)})"
    )
    ap.add_argument("--devices", type=int, default=None, help=f"default {FULL['devices']}")
    ap.add_argument(
        "--clients-per-round", type=int, default=None, help=f"default {FULL['clients_per_round']}"
    )
    ap.add_argument("--epochs", type=int, default=None, help=f"default {FULL['epochs']}")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01, help="local step of every method")
    ap.add_argument(
        "--fedfa-lr", type=float, default=None, help="FedFa's local step (default --lr; paper 1e-4)"
    )
    ap.add_argument("--prox-mu", type=float, default=1.0, help="FedProx's μ")
    ap.add_argument("--gamma", type=float, default=0.5, help="FedFa's server momentum γ")
    ap.add_argument(
        "--eta-s",
        type=float,
        default=None,
        help="FedFa's server step η_s (default 1, or FedFa's lr with --variant flgo)",
    )
    ap.add_argument("--tau", type=int, default=1, help="FedFa's server momentum period τ")
    ap.add_argument(
        "--client-momentum",
        default="paper",
        help="'paper' (0.9 on iid and 0_0, 0.5 on 0.5_0.5 and 1_1) or one number for every set",
    )
    ap.add_argument("--accuracy-source", choices=("global", "local"), default="global")
    ap.add_argument(
        "--variant",
        choices=("paper", "flgo"),
        default="paper",
        help="FedFa's server momentum sign ('flgo': the public code's, η_s = lr by default)",
    )
    ap.add_argument("--test-fraction", type=float, default=0.2)
    ap.add_argument("--max-samples", type=int, default=None, help="clip n_k (0: no clip)")
    ap.add_argument("--data-seed", type=int, default=0, help="generator seed of the data draw")
    ap.add_argument(
        "--vary-data", action="store_true", help="redraw the data per seed (generator seed s)"
    )
    ap.add_argument("--eval-every", type=int, default=None, help="default: rounds // 50")
    ap.add_argument("--threads", type=int, default=1, help="Numba threads during the runs")
    ap.add_argument("--quick", action="store_true", help="tiny run for the smoke test")
    args = ap.parse_args(argv)
    base = QUICK if args.quick else FULL
    try:
        args.seeds = int_list(args.seeds if args.seeds is not None else base["seeds"])
        args.datasets = _keys(args.datasets, DATASET_KEYS, "dataset")
        args.methods = _keys(args.methods, METHOD_KEYS, "method")
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    for name in ("rounds", "devices", "clients_per_round", "epochs", "max_samples"):
        if getattr(args, name) is None:
            setattr(args, name, base[name])
    if args.eval_every is None:
        args.eval_every = max(1, args.rounds // 50)
    if min(args.rounds, args.devices, args.epochs, args.batch, args.eval_every, args.tau) < 1:
        ap.error("--rounds, --devices, --epochs, --batch, --eval-every and --tau must be >= 1")
    if args.max_samples < 0 or args.clients_per_round < 1:
        ap.error("--max-samples must be >= 0 and --clients-per-round >= 1")
    args.clients_per_round = min(args.clients_per_round, args.devices)
    if args.fedfa_lr is None:
        args.fedfa_lr = args.lr
    if args.eta_s is None:  # the library's defaults: 1, or the clients' lr for the flgo sign
        args.eta_s = 1.0 if args.variant == "paper" else args.fedfa_lr
    for name in ("lr", "fedfa_lr"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0):
            ap.error(f"--{name.replace('_', '-')} must be > 0")
    if not (math.isfinite(args.prox_mu) and args.prox_mu >= 0):
        ap.error("--prox-mu must be >= 0")
    if args.client_momentum.strip().lower() == "paper":
        args.client_momentum = None
    else:
        try:
            args.client_momentum = float(args.client_momentum)
        except ValueError:
            ap.error(f"--client-momentum must be 'paper' or a number; got {args.client_momentum!r}")
        if not 0.0 <= args.client_momentum < 1.0:
            ap.error("--client-momentum must be in [0, 1)")
    if not 0 < args.test_fraction < 1:
        ap.error("--test-fraction must be in (0, 1)")
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    return args


# ------------------------------------------------------------------------------------------------
# helpers


def _dataset(key: str) -> tuple[str, str, float, float, bool, float]:
    return next(d for d in DATASETS if d[0] == key)


def _method(key: str) -> tuple[str, str, str, float | None, bool, bool, str | None]:
    return next(m for m in METHODS if m[0] == key)


def _client_momentum(args: argparse.Namespace, dataset: str) -> float:
    return _dataset(dataset)[5] if args.client_momentum is None else args.client_momentum


def _data_stats(data: FederatedData) -> dict[str, Any]:
    n_train, n_test = np.diff(data.train_offsets), np.diff(data.test_offsets)
    n = n_train + n_test
    return {
        "devices": int(n.size),
        "samples": int(n.sum()),
        "samples_per_device_min": int(n.min()),
        "samples_per_device_median": float(np.median(n)),
        "samples_per_device_max": int(n.max()),
        "test_samples_min": int(n_test.min()),
    }


# ------------------------------------------------------------------------------------------------
# one run


def _build(key: str, args: argparse.Namespace, dataset: str) -> tuple[Rule, float, float, dict]:
    """(rule, lr, prox_mu, hyper-parameters for the record) of method ``key`` on ``dataset``."""
    _, _, kind, alpha, client, server, _ = _method(key)
    if kind in ("fedavg", "fedprox"):
        mu = args.prox_mu if kind == "fedprox" else 0.0
        return make_rule("fedavg"), args.lr, mu, {"prox_mu": mu}
    if kind == "uniform":
        return make_rule("fairavg"), args.lr, 0.0, {"weights": "1/m"}
    hyper = {
        "gamma": args.gamma,
        "eta_s": args.eta_s if server else 0.0,
        "tau": args.tau,
        "client_momentum": _client_momentum(args, dataset) if client else 0.0,
        "variant": args.variant,
    }
    if kind == "fedfa":
        hyper.update(alpha=alpha, beta=1.0 - alpha, accuracy_source=args.accuracy_source)
        return make_rule("fedfa", **hyper), args.fedfa_lr, 0.0, hyper
    return momentum_only_rule(**hyper), args.fedfa_lr, 0.0, {**hyper, "weights": "n_k"}


def _run_one(
    key: str,
    model: LogisticRegression,
    data: FederatedData,
    args: argparse.Namespace,
    dataset: str,
    seed: int,
    data_seed: int,
) -> dict[str, Any]:
    rule, lr, prox_mu, hyper = _build(key, args, dataset)
    row: dict[str, Any] = {
        "dataset": dataset,
        "method": key,
        "label": _method(key)[1],
        "seed": seed,
        "data_seed": data_seed,
        "split_seed": seed,
        "rounds": args.rounds,
        "lr": lr,
        "hyperparams": json.dumps(hyper, sort_keys=True),
    }
    t0 = time.perf_counter()
    try:
        hist = simulate(
            rule,
            model,
            data,
            rounds=args.rounds,
            clients_per_round=args.clients_per_round,
            epochs=args.epochs,
            batch_size=args.batch,
            lr=lr,
            prox_mu=prox_mu,
            sampling="uniform",
            seed=seed,
            eval_every=args.eval_every,
            parallel=False,  # serial local training: these devices are too small for threads
        )
    except Exception as exc:  # record it and go on: a failed run must not lose the others
        partial = getattr(exc, "history", None)
        done = 0 if partial is None else partial.num_rounds
        row.update(
            {
                "status": f"failed after {done} rounds: {type(exc).__name__}: {exc}",
                "seconds": time.perf_counter() - t0,
                "ok": False,
                "final": None,
                "curve_round": [],
                "curve_accuracy": [],
                "curve_loss": [],
            }
        )
        return row
    n_test = np.diff(data.test_offsets)
    final = hist.test_accuracy[-1]
    summary = fairness_summary(final, n_test)
    acc_curve = hist.mean_test_accuracy()
    loss_curve = hist.mean_train_loss()
    weights = hist.weights
    row.update({"status": hist.status, "seconds": time.perf_counter() - t0, "ok": True})
    row.update({k: summary[k] for k in SUMMARY_KEYS})
    row["train_loss"] = float(loss_curve[-1])
    # Mean over the evaluations after round 0 of the mean test accuracy: the area under the
    # accuracy curve per round, a single number for the speed of convergence.
    row["auc"] = float(acc_curve[1:].mean())
    row["weights_min"] = float(weights.min())
    row["weights_sum_error"] = float(np.abs(weights.sum(axis=1) - 1.0).max())
    row["final"] = final
    row["curve_round"] = [int(t) for t in hist.eval_round]
    row["curve_accuracy"] = np.round(acc_curve, 4).tolist()
    row["curve_loss"] = np.round(loss_curve, 6).tolist()
    return row


# ------------------------------------------------------------------------------------------------
# tables and verdict


def _paired(
    runs: list[dict[str, Any]], dataset: str, method: str, base: str, metric: str
) -> dict[str, Any] | None:
    """Paired difference method − base of ``metric`` over the seeds both completed."""
    by_seed = {
        r["seed"]: r[metric]
        for r in runs
        if r["dataset"] == dataset and r["method"] == base and r["ok"]
    }
    diffs = [
        r[metric] - by_seed[r["seed"]]
        for r in runs
        if r["dataset"] == dataset and r["method"] == method and r["ok"] and r["seed"] in by_seed
    ]
    if not diffs:
        return None
    d = np.asarray(diffs, dtype=np.float64)
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else None
    sign = 1.0 if HIGHER_IS_BETTER[metric] else -1.0
    better = int(np.sum(sign * d > 0))
    worse = int(np.sum(sign * d < 0))
    mean = float(d.mean())
    if se is None:
        beyond = None
    else:
        beyond = bool(abs(mean) > SE_FACTOR * se) if se > 0 else bool(mean != 0.0)
    if mean == 0.0 and (se is None or se == 0.0):
        word = "tie"
    else:
        word = "better" if sign * mean > 0 else "worse"
    return {
        "mean": mean,
        "se": se,
        "n": int(d.size),
        "better_seeds": better,
        "worse_seeds": worse,
        "beyond_noise": beyond,
        "word": word,
    }


def _table(runs: list[dict[str, Any]], datasets: list[str], methods: list[str]) -> list[dict]:
    rows = []
    for ds in datasets:
        for key in methods:
            done = [r for r in runs if r["dataset"] == ds and r["method"] == key and r["ok"]]
            row: dict[str, Any] = {
                "dataset": ds,
                "method": key,
                "label": _method(key)[1],
                "runs": len(done),
            }
            for name in (*SUMMARY_KEYS, "train_loss", "auc"):
                row[f"{name}_mean"], row[f"{name}_std"] = mean_std([r[name] for r in done])
            paper = _method(key)[6]
            for i, name in enumerate(PAPER_KEYS):
                row[f"paper_{name}"] = PAPER_TABLE2[ds][paper][i] if paper else None
            rows.append(row)
    return rows


def _text_tables(rows: list[dict[str, Any]], args: argparse.Namespace, caption: str) -> str:
    out = [caption, ""]
    head = ["method", "n", "Average (%)", "Worst 20%", "Best 20%", "Variance", "train loss"]
    head += ["| paper:", "Average", "Worst 20%", "Best 20%", "Variance"]
    for ds in args.datasets:
        sub = [r for r in rows if r["dataset"] == ds and r["method"] in TABLE_KEYS]
        if not sub:
            continue
        lines = []
        for r in sub:
            cells = [r["label"], str(r["runs"])]
            cells += [cell(r[f"{k}_mean"], r[f"{k}_std"]) for k in ("average", "worst_20")]
            cells += [cell(r["best_20_mean"], r["best_20_std"])]
            cells += [cell(r["variance_mean"], r["variance_std"], 0)]
            cells += [cell(r["train_loss_mean"], r["train_loss_std"], 3), "|"]
            if r["paper_average"] is None:
                cells += ["-"] * 4
            else:
                cells += [f"{r[f'paper_{k}']:.2f}" for k in PAPER_KEYS]
            lines.append(cells)
        mom = _client_momentum(args, ds)
        out.append(f"{_dataset(ds)[1]} (FedFa client momentum {mom:g})")
        out += render_columns(head, lines)
        out.append("")
    out += [
        "Average: sample-weighted over the devices' test sets; Worst/Best 20%: mean of the 20% "
        "lowest/highest",
        "device accuracies; Variance: population variance of the device accuracies (%²); mean ± "
        "std over seeds.",
        "The paper's Table 2 has one FedFa row, (α, β) unstated: it is printed beside each of our "
        "FedFa rows.",
        "",
        "Momentum ablation (the paper's Fig. 2): final mean test accuracy (%), worst 20% (%), "
        "training loss, and the",
        "mean test accuracy averaged over the evaluations (AUC per round, higher = faster "
        "convergence); mean ± std over seeds.",
    ]
    by = {(r["dataset"], r["method"]): r for r in rows}
    head2 = ["weights", "momentum", "n", "Average", "Worst 20%", "train loss", "AUC"]
    for ds in args.datasets:
        lines = []
        cells = [
            (weights, mom, key)
            for weights, keys in ABLATION.items()
            for mom, key in zip(MOMENTA, keys, strict=True)
        ]
        cells += [(weights, "none", key) for weights, key in ABLATION_REFERENCE]
        for weights, mom, key in cells:
            r = by.get((ds, key))
            if r is None:
                continue
            lines.append(
                [
                    weights,
                    mom,
                    str(r["runs"]),
                    cell(r["average_mean"], r["average_std"]),
                    cell(r["worst_20_mean"], r["worst_20_std"]),
                    cell(r["train_loss_mean"], r["train_loss_std"], 3),
                    cell(r["auc_mean"], r["auc_std"]),
                ]
            )
        if lines:
            out += ["", f"{_dataset(ds)[1]} (client momentum {_client_momentum(args, ds):g}):"]
            out += render_columns(head2, lines)
    return "\n".join(out)


def _diff_text(p: dict[str, Any] | None, dec: int) -> str:
    if p is None:
        return "n/a"
    if p["se"] is None:
        return f"{p['mean']:+.{dec}f} (one seed) {p['word']}"
    noise = "beyond noise" if p["beyond_noise"] else "within noise"
    return (
        f"{p['mean']:+.{dec}f} ± {p['se']:.{dec}f} ({p['better_seeds']}/{p['n']} seeds better, "
        f"{noise}) {p['word'].upper() if p['beyond_noise'] else p['word']}"
    )


def _verdict(
    runs: list[dict[str, Any]], rows: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[dict[str, Any], list[str]]:
    """FedFa against FedAvg and FedProx per set, paired over seeds; the paper's claims."""
    have = {(r["dataset"], r["method"]) for r in rows if r["runs"] > 0}
    lines = [
        "verdict (paired differences FedFa − baseline over seeds, mean ± SE; 'beyond noise' = "
        f"|mean| > {SE_FACTOR:g} SE;",
        "better = higher average / worst 20%, lower variance):",
    ]
    out: dict[str, Any] = {"comparisons": {}, "claims": {}, "momentum": {}}
    metrics = (("average", 1), ("worst_20", 1), ("variance", 0))
    for ds in args.datasets:
        lines.append(f"  {_dataset(ds)[1]}:")
        out["comparisons"][ds] = {}
        for fk in FEDFA_KEYS:
            if (ds, fk) not in have:
                continue
            for base in ("fedavg", "fedprox"):
                if (ds, base) not in have:
                    continue
                comp = {m: _paired(runs, ds, fk, base, m) for m, _ in metrics}
                out["comparisons"][ds][f"{fk} vs {base}"] = comp
                text = "; ".join(
                    f"{m.replace('_20', ' 20%')} {_diff_text(comp[m], dec)}" for m, dec in metrics
                )
                lines.append(f"    {_method(fk)[1]} vs {_method(base)[1]:<7}: {text}")
    # How often each FedFa setting beats each baseline, over the sets.
    lines.append(
        "  tally over the sets (better beyond noise / better within noise / worse within "
        "noise / worse beyond noise):"
    )
    tally: dict[str, Any] = {}
    for fk in FEDFA_KEYS:
        for base in ("fedavg", "fedprox"):
            parts = []
            for m, _ in metrics:
                counts = [0, 0, 0, 0]
                for ds in args.datasets:
                    p = out["comparisons"].get(ds, {}).get(f"{fk} vs {base}", {}).get(m)
                    if p is None or p["word"] == "tie":
                        continue
                    good = p["word"] == "better"
                    idx = (
                        (0 if p["beyond_noise"] else 1) if good else (3 if p["beyond_noise"] else 2)
                    )
                    counts[idx] += 1
                tally[f"{fk} vs {base} {m}"] = counts
                parts.append(f"{m.replace('_20', ' 20%')} {'/'.join(map(str, counts))}")
            if any(f"{fk} vs {base}" in out["comparisons"].get(ds, {}) for ds in args.datasets):
                lines.append(f"    {_method(fk)[1]} vs {_method(base)[1]:<7}: " + ", ".join(parts))
    out["tally"] = tally

    # The paper's claims, for each FedFa setting.
    lines.append("  the paper's claims, for each FedFa setting (means over seeds):")
    by = {(r["dataset"], r["method"]): r for r in rows if r["runs"] > 0}
    for fk in FEDFA_KEYS:
        claims: dict[str, Any] = {}
        if all((d, k) in by for d in ("iid",) for k in ("fedavg", "fedprox", fk)):
            a = {k: by[("iid", k)]["average_mean"] for k in ("fedavg", "fedprox", fk)}
            ok = a["fedprox"] < a[fk] < a["fedavg"]
            claims["iid_between_fedprox_and_fedavg"] = ok
            lines.append(
                f"    {_method(fk)[1]}: on Synthetic_iid FedProx < FedFa < FedAvg in average "
                f"(paper 71.92 < 85.70 < 89.11): {'yes' if ok else 'no'} ({a['fedprox']:.1f}, "
                f"{a[fk]:.1f}, {a['fedavg']:.1f})"
            )
        for ds in ("0_0", "0.5_0.5", "1_1"):
            if not all((ds, k) in by for k in ("fedavg", "fedprox", fk)):
                continue
            f, base = by[(ds, fk)], [by[(ds, k)] for k in ("fedavg", "fedprox")]
            checks = {
                "average": all(f["average_mean"] > b["average_mean"] for b in base),
                "worst_20": all(f["worst_20_mean"] > b["worst_20_mean"] for b in base),
                "best_20": all(f["best_20_mean"] >= b["best_20_mean"] for b in base),
                "variance": all(f["variance_mean"] < b["variance_mean"] for b in base),
            }
            claims[ds] = checks
            lines.append(
                f"    {_method(fk)[1]}: on {_dataset(ds)[1]} above both baselines in average / "
                f"worst 20% / best 20% (≥) and below in variance: "
                + " / ".join("yes" if checks[k] else "no" for k in checks)
            )
        out["claims"][fk] = claims

    # Momentum: does each momentum speed convergence (AUC) and lower the final training loss?
    lines.append(
        "  momentum ablation (AUC = mean test accuracy over the rounds; paired against no "
        "momentum):"
    )
    for ds in args.datasets:
        for weights, keys in ABLATION.items():
            none_key = keys[0]
            if (ds, none_key) not in have:
                continue
            parts, res = [], {}
            for mom, key in zip(MOMENTA[1:], keys[1:], strict=True):
                if (ds, key) not in have:
                    continue
                p_auc = _paired(runs, ds, key, none_key, "auc")
                p_loss = _paired(runs, ds, key, none_key, "train_loss")
                p_avg = _paired(runs, ds, key, none_key, "average")
                res[mom] = {"auc": p_auc, "train_loss": p_loss, "average": p_avg}
                parts.append(
                    f"{mom}: AUC {_short(p_auc, 1)}, loss {_short(p_loss, 3)}, "
                    f"final avg {_short(p_avg, 1)}"
                )
            out["momentum"][f"{ds} {weights}"] = res
            if parts:
                lines.append(f"    {_dataset(ds)[1]}, {weights}: " + "; ".join(parts))
    lines.append("  what each part of FedFa buys (paired; average / worst 20% / variance):")
    out["decomposition"] = {}
    for what, key, base in DECOMPOSITION:
        res = {}
        for ds in args.datasets:
            if (ds, key) in have and (ds, base) in have:
                res[ds] = {m: _paired(runs, ds, key, base, m) for m, _ in metrics}
        out["decomposition"][f"{key} vs {base}"] = res
        if res:
            lines.append(f"    {what}:")
            for ds, comp in res.items():
                lines.append(
                    f"      {_dataset(ds)[1]:<17} "
                    + "; ".join(f"{_diff_text(comp[m], dec)}" for m, dec in metrics)
                )
    out["comparable"] = any(out["comparisons"].get(ds) for ds in args.datasets)
    if not out["comparable"]:
        lines.append("  nothing to compare (FedFa or the baselines are missing)")
    return out, lines


def _short(p: dict[str, Any] | None, dec: int) -> str:
    if p is None:
        return "n/a"
    mark = "" if p["se"] is None or p["beyond_noise"] else " (noise)"
    return f"{p['mean']:+.{dec}f}{mark}"


def _findings(verdict: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """Per (FedFa setting, baseline) and metric, the sets where FedFa is better / worse, beyond
    the seed-to-seed noise or not; then what each part of FedFa buys."""
    found = []
    names = {"average": "average", "worst_20": "worst 20%", "variance": "variance"}
    one_seed = len(args.seeds) < 2

    def sets(items: list[str]) -> str:
        return "{" + ", ".join(items) + "}" if items else "none"

    for fk in FEDFA_KEYS:
        for base in ("fedavg", "fedprox"):
            parts = []
            for m, name in names.items():
                groups: dict[str, list[str]] = {"better+": [], "worse+": [], "within": []}
                for ds in args.datasets:
                    comp = verdict["comparisons"].get(ds, {}).get(f"{fk} vs {base}") or {}
                    p = comp.get(m)
                    if p is None:
                        continue
                    if one_seed:
                        groups["better+" if p["word"] == "better" else "worse+"].append(ds)
                    elif p["beyond_noise"] and p["word"] != "tie":
                        groups[p["word"] + "+"].append(ds)
                    else:
                        groups["within"].append(ds)
                if not any(groups.values()):
                    continue
                if one_seed:
                    parts.append(
                        f"{name} better on {sets(groups['better+'])}, worse on "
                        f"{sets(groups['worse+'])}"
                    )
                else:
                    parts.append(
                        f"{name} better on {sets(groups['better+'])}, worse on "
                        f"{sets(groups['worse+'])}, within noise on {sets(groups['within'])}"
                    )
            if parts:
                tail = " (one seed: no spread to judge by)" if one_seed else ""
                found.append(f"{_method(fk)[1]} vs {_method(base)[1]}: " + "; ".join(parts) + tail)
    for what, key, base in DECOMPOSITION:
        parts = []
        for ds in args.datasets:
            p = verdict["decomposition"].get(f"{key} vs {base}", {}).get(ds)
            if p is not None:
                vals = [_short(p[m], 0 if m == "variance" else 1) for m in names]
                parts.append(f"{ds} {' / '.join(vals)}")
        if parts:
            found.append(f"{what} (average / worst 20% / variance): " + "; ".join(parts))
    return found


# ------------------------------------------------------------------------------------------------
# plots


STYLE = {
    "fedavg": ("black", "-"),
    "fedprox": ("tab:gray", "-"),
    "uniform": ("tab:cyan", ":"),
    "fedfa-none": ("tab:blue", "-"),
    "fedfa-client": ("tab:orange", "-"),
    "fedfa-server": ("tab:green", "-"),
    "fedfa-0.5-0.5": ("tab:red", "-"),
    "fedfa-1-0": ("tab:purple", "-"),
    "fedfa-0-1": ("tab:brown", "-"),
    "mom-client": ("tab:orange", "--"),
    "mom-server": ("tab:green", "--"),
    "mom-both": ("tab:red", "--"),
}
ABLATION_LABELS = {
    "fedavg": "FedAvg (n_k w., no momentum)",
    "fedprox": "FedProx",
    "uniform": "uniform w. (1/m), no momentum",
    "fedfa-none": "FedFa w., no momentum",
    "fedfa-client": "FedFa w., client momentum",
    "fedfa-server": "FedFa w., server momentum",
    "fedfa-0.5-0.5": "FedFa w., both (FedFa (0.5,0.5))",
    "mom-client": "n_k w., client momentum",
    "mom-server": "n_k w., server momentum",
    "mom-both": "n_k w., both (Fig. 2's FedFa)",
}


def _plot_ablation(runs: list[dict[str, Any]], args: argparse.Namespace, path: Path, cap: str):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    n = len(args.datasets)
    fig, axes = plt.subplots(2, n, figsize=(4.6 * n, 8.0), squeeze=False)
    for j, ds in enumerate(args.datasets):
        ax_acc, ax_loss = axes[0, j], axes[1, j]
        for key, label in ABLATION_LABELS.items():
            curves = [r for r in runs if r["dataset"] == ds and r["method"] == key and r["ok"]]
            if not curves:
                continue
            m = min(len(r["curve_round"]) for r in curves)
            t = np.asarray(curves[0]["curve_round"][:m])
            acc = np.mean([r["curve_accuracy"][:m] for r in curves], axis=0)
            loss = np.mean([r["curve_loss"][:m] for r in curves], axis=0)
            color, ls = STYLE[key]
            lw = 2.2 if key in ("fedavg", "fedprox") else 1.3
            ax_acc.plot(t, acc, color=color, ls=ls, lw=lw, label=label)
            ax_loss.plot(t, loss, color=color, ls=ls, lw=lw, label=label)
        mom = _client_momentum(args, ds)
        ax_acc.set_title(f"{_dataset(ds)[1]} (client momentum {mom:g})", fontsize=10)
        ax_acc.set(xlabel="round", ylabel="mean test accuracy (%)")
        ax_loss.set(xlabel="round", ylabel="mean training loss", yscale="log")
        for ax in (ax_acc, ax_loss):
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(cap, fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_final(runs: list[dict[str, Any]], args: argparse.Namespace, path: Path, cap: str):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    keys = [k for k in TABLE_KEYS if k in args.methods]
    n = len(args.datasets)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 4.8), squeeze=False)
    jitter = np.random.default_rng(0)
    for j, ds in enumerate(args.datasets):
        ax = axes[0, j]
        for i, key in enumerate(keys):
            done = [r for r in runs if r["dataset"] == ds and r["method"] == key and r["ok"]]
            if not done:
                continue
            pooled = 100.0 * np.concatenate([r["final"] for r in done])
            color = STYLE[key][0]
            x = i + jitter.uniform(-0.2, 0.2, pooled.size)
            ax.scatter(x, pooled, s=6, alpha=0.35, color=color, linewidths=0)
            avg = np.mean([r["average"] for r in done])
            worst = np.mean([r["worst_20"] for r in done])
            ax.plot([i - 0.3, i + 0.3], [avg, avg], color="black", lw=2)
            ax.plot([i - 0.3, i + 0.3], [worst, worst], color="black", lw=1, ls=":")
            paper = _method(key)[6]
            if paper is not None:
                p = PAPER_TABLE2[ds][paper]
                ax.plot(i + 0.35, p[0], "r*", ms=9)
                ax.plot(i + 0.35, p[1], "rv", ms=6)
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([_method(k)[1] for k in keys], rotation=30, ha="right", fontsize=8)
        ax.set(ylabel="final test accuracy of a device (%)", ylim=(-3, 103))
        ax.set_title(_dataset(ds)[1], fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    fig.text(
        0.5,
        0.01,
        "dots: devices, pooled over seeds; black line: average (solid), worst 20% (dotted); "
        "red: the paper's average (*) and worst 20% (v), its one FedFa row beside each FedFa",
        ha="center",
        fontsize=8,
    )
    fig.suptitle(cap, fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# main


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with numba_threads(args.threads):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs_csv = CsvAppender(out / "runs.csv", RUN_FIELDS)
    acc_csv = CsvAppender(
        out / "accuracies.csv",
        ["dataset", "method", "seed", "device", "test_samples", "test_accuracy"],
    )
    curve_csv = CsvAppender(
        out / "curves.csv",
        ["dataset", "method", "seed", "round", "mean_test_accuracy", "mean_train_loss"],
    )
    total = len(args.datasets) * len(args.methods) * len(args.seeds)
    log(
        f"FedFa on Synthetic: {args.devices} devices, {args.clients_per_round} per round "
        f"(uniform), {args.rounds} rounds, E={args.epochs}, batch {args.batch}, lr {args.lr:g} "
        f"(FedFa {args.fedfa_lr:g}), FedProx μ={args.prox_mu:g}, FedFa γ={args.gamma:g} "
        f"η_s={args.eta_s:g} τ={args.tau}; sets {args.datasets}; seeds {args.seeds}; {total} runs"
    )
    start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    data_stats: dict[str, Any] = {}
    model = LogisticRegression(60, 10)
    done = 0
    for ds in args.datasets:
        _, name, a, b, iid, _ = _dataset(ds)
        for seed in args.seeds:
            data_seed = seed if args.vary_data else args.data_seed
            data = synthetic(
                a,
                b,
                num_clients=args.devices,
                iid=iid,
                seed=data_seed,
                test_fraction=args.test_fraction,
                split_seed=seed,
                max_samples_per_client=args.max_samples or None,
            )
            data_stats[f"{ds} seed {seed}"] = {
                "data_seed": data_seed,
                "split_seed": seed,
                **_data_stats(data),
            }
            n_test = np.diff(data.test_offsets)
            for key in args.methods:
                row = _run_one(key, model, data, args, ds, seed, data_seed)
                done += 1
                runs_csv.write([{k: row.get(k) for k in RUN_FIELDS}])
                if row["ok"]:
                    final = row["final"]
                    acc_csv.write(
                        [
                            {
                                "dataset": ds,
                                "method": key,
                                "seed": seed,
                                "device": k,
                                "test_samples": int(n_test[k]),
                                "test_accuracy": float(final[k]),
                            }
                            for k in range(final.size)
                        ]
                    )
                    curve_csv.write(
                        [
                            {
                                "dataset": ds,
                                "method": key,
                                "seed": seed,
                                "round": t,
                                "mean_test_accuracy": acc,
                                "mean_train_loss": loss,
                            }
                            for t, acc, loss in zip(
                                row["curve_round"],
                                row["curve_accuracy"],
                                row["curve_loss"],
                                strict=True,
                            )
                        ]
                    )
                    what = (
                        f"avg {row['average']:5.1f}  worst20 {row['worst_20']:5.1f}  best20 "
                        f"{row['best_20']:5.1f}  var {row['variance']:6.0f}  loss "
                        f"{row['train_loss']:.3f}"
                    )
                else:
                    what = row["status"]
                log(
                    f"[{done:>{len(str(total))}}/{total}] {name:<17} seed {seed:<2} "
                    f"{row['label']:<21} {what}  ({row['seconds']:.1f} s; elapsed "
                    f"{time.perf_counter() - start:.0f} s)"
                )
                runs.append(row)
    elapsed = time.perf_counter() - start

    rows = _table(runs, args.datasets, args.methods)
    caption = (
        f"FedAvg / FedProx (μ={args.prox_mu:g}) / FedFa on Synthetic, {args.devices} devices, "
        f"{args.clients_per_round}/round (uniform), {args.rounds} rounds, E={args.epochs}, batch "
        f"{args.batch}, lr {args.lr:g} (FedFa {args.fedfa_lr:g}), FedFa γ={args.gamma:g}, "
        f"η_s={args.eta_s:g}, τ={args.tau}; final test accuracy, mean ± std over "
        f"{len(args.seeds)} seed(s)"
    )
    text = _text_tables(rows, args, caption)
    verdict, verdict_lines = _verdict(runs, rows, args)
    findings = _findings(verdict, args)
    finding_lines = [
        "findings (sets by key; better = higher average / worst 20%, lower variance; beyond "
        f"noise = paired |mean| > {SE_FACTOR:g} SE over seeds; '(noise)' marks a difference "
        "within noise):"
    ]
    finding_lines += [f"  - {f}" for f in findings]
    (out / "table.txt").write_text(
        text + "\n\n" + "\n".join(verdict_lines) + "\n\n" + "\n".join(finding_lines) + "\n"
    )
    write_csv(out / "table.csv", rows)
    if any(r["ok"] for r in runs):
        _plot_ablation(runs, args, out / "momentum_ablation.png", caption)
        _plot_final(runs, args, out / "final_accuracies.png", caption)
    summary = {
        "config": {
            "datasets": {d: _dataset(d)[1] for d in args.datasets},
            "devices": args.devices,
            "clients_per_round": args.clients_per_round,
            "sampling": "uniform",
            "rounds": args.rounds,
            "epochs": args.epochs,
            "batch_size": args.batch,
            "lr": args.lr,
            "fedfa_lr": args.fedfa_lr,
            "prox_mu": args.prox_mu,
            "gamma": args.gamma,
            "eta_s": args.eta_s,
            "tau": args.tau,
            "client_momentum": {d: _client_momentum(args, d) for d in args.datasets},
            "accuracy_source": args.accuracy_source,
            "variant": args.variant,
            "test_fraction": args.test_fraction,
            "max_samples_per_device": args.max_samples or None,
            "data_seed": "per seed" if args.vary_data else args.data_seed,
            "seeds": args.seeds,
            "eval_every": args.eval_every,
            "methods": {
                k: json.loads(next(r["hyperparams"] for r in runs if r["method"] == k))
                for k in args.methods
            },
            "model": "multinomial logistic regression (zero init)",
            "numba_threads": args.threads,
        },
        "data": data_stats,
        "elapsed_seconds": elapsed,
        "table": rows,
        "verdict": verdict,
        "findings": findings,
        "paper_table2": {
            ds: {m: dict(zip(PAPER_KEYS, v, strict=True)) for m, v in t.items()}
            for ds, t in PAPER_TABLE2.items()
        },
        "runs": [{k: v for k, v in r.items() if k != "final"} for r in runs],
    }
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=1, allow_nan=False, default=float)
    print(text + "\n")
    print("\n".join(verdict_lines) + "\n")
    print("\n".join(finding_lines))
    failed = sum(not r["ok"] for r in runs)
    print(
        f"\n{total} runs ({failed} failed) in {elapsed:.0f} s; wrote runs.csv, accuracies.csv, "
        f"curves.csv, table.csv, table.txt, summary.json, momentum_ablation.png and "
        f"final_accuracies.png to {out}"
    )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
