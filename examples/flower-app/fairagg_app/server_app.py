"""The ServerApp: ``FairaggStrategy`` with the rule and its hyper-parameters of the run config.

With ``clients-per-round`` the strategy samples client ids as ``fairagg.simulate`` does, so the
run ends with the model ``fairagg.simulate`` computes with the same settings, bit for bit. The
final model (``final_model.npz``) and the rounds' metrics (``metrics.json``) are written to
``out-dir``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fairagg import RULES
from fairagg.flower import FairaggStrategy, params_to_arrays

from .task import build_model, build_rule, data_loader

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` rounds of the configured rule."""
    cfg = context.run_config
    data = data_loader(cfg)()
    model = build_model(cfg, data.n_features, data.n_classes)
    rule = build_rule(cfg)
    K = int(cfg["num-clients"])
    m = int(cfg["clients-per-round"])
    if RULES[rule.name].full_participation:
        m = K  # AFL and AAgFF-S take every client every round
    strategy = FairaggStrategy(
        rule,
        K,
        clients_per_round=m,
        epochs=int(cfg["local-epochs"]),
        batch_size=int(cfg["batch-size"]),
        lr=float(cfg["lr"]),
        seed=int(cfg["seed"]),
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        min_available_nodes=K,
        min_evaluate_nodes=1,
    )
    theta0 = model.init_params(int(cfg["seed"]))
    result = strategy.start(
        grid=grid, initial_arrays=params_to_arrays(theta0), num_rounds=int(cfg["num-server-rounds"])
    )
    out = Path(str(cfg["out-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "final_model.npz", theta=strategy.reported_params)
    metrics = {
        "train": {str(r): dict(v) for r, v in result.train_metrics_clientapp.items()},
        "evaluate": {str(r): dict(v) for r, v in result.evaluate_metrics_clientapp.items()},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=float) + "\n")
    print(f"wrote {out}/final_model.npz and metrics.json")
