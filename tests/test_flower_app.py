"""The Flower App of ``examples/flower-app``: its own ServerApp and ClientApp objects, run with
its ``[tool.flwr.app.config]`` on virtual nodes (``InProcessGrid``: Flower's simulation engine
needs Ray), end with the model ``fairagg.simulate`` computes with the same settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.common.config import flatten_dict  # noqa: E402

import fairagg  # noqa: E402
from fairagg.flower import InProcessGrid  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "examples" / "flower-app"
# the run config as Flower gives it to the apps: nested tables flattened to dotted keys
CONFIG = flatten_dict(
    tomllib.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
)


@pytest.fixture(scope="module")
def app_modules():
    sys.path.insert(0, str(APP))
    try:
        from fairagg_app import client_app, server_app, task

        yield server_app, client_app, task
    finally:
        sys.path.remove(str(APP))
        for name in [n for n in sys.modules if n == "fairagg_app" or n.startswith("fairagg_app.")]:
            del sys.modules[name]


def test_the_app_names_its_components():
    flwr = tomllib.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert flwr["components"] == {
        "serverapp": "fairagg_app.server_app:app",
        "clientapp": "fairagg_app.client_app:app",
    }
    assert CONFIG["rule"] == "fedfv" and CONFIG["fedfv.alpha"] == 0.1


@pytest.mark.parametrize(
    "overrides",
    [{}, {"rule": "term"}, {"rule": "afl"}, {"rule": "qfedavg"}],
    ids=["fedfv-as-shipped", "term", "afl-every-client", "qfedavg"],
)
def test_the_app_equals_fairagg_simulate(overrides, app_modules, tmp_path):
    server_app, client_app, task = app_modules
    cfg = {**CONFIG, "num-server-rounds": 3, "out-dir": str(tmp_path)}
    for key, value in overrides.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    K = int(cfg["num-clients"])
    grid = InProcessGrid(client_app.app, K, run_config=cfg)
    context = Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config=cfg)
    server_app.app(grid, context)
    theta = np.load(tmp_path / "final_model.npz")["theta"]

    data = task.data_loader(cfg)()
    model = task.build_model(cfg, data.n_features, data.n_classes)
    rule = task.build_rule(cfg)
    m = K if fairagg.RULES[rule.name].full_participation else int(cfg["clients-per-round"])
    history = fairagg.simulate(
        rule, model, data, rounds=3, clients_per_round=m, epochs=int(cfg["local-epochs"]),
        batch_size=int(cfg["batch-size"]), lr=float(cfg["lr"]), seed=int(cfg["seed"]),
    )  # fmt: skip
    assert np.array_equal(theta, history.final_params)  # bit for bit
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["train"]) == {"1", "2", "3"}
    assert "fairagg-worst_10" in metrics["evaluate"]["3"]


def test_the_rules_hyper_parameters_come_from_the_config(app_modules):
    _, _, task = app_modules
    assert task.build_rule(CONFIG).hyperparams["alpha"] == 0.1
    assert task.build_rule({**CONFIG, "fedfv.alpha": 0.3}).hyperparams["alpha"] == 0.3
    assert task.build_rule({**CONFIG, "rule": "term"}).hyperparams["tilt"] == 1.0
    assert task.build_rule({**CONFIG, "rule": "term", "tilt": 2.0}).hyperparams["tilt"] == 2.0
    with pytest.raises(ValueError, match="no hyper-parameter .alphaa.; it takes alpha"):
        task.build_rule({**CONFIG, "fedfv.alphaa": 0.2})
    with pytest.raises(ValueError, match="'fedvf' is not a rule"):
        task.build_rule({**CONFIG, "fedvf.alpha": 0.2})
