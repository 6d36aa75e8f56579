"""The Flower App of ``examples/flower-app``: its own ServerApp and ClientApp objects, run with
its ``[tool.flwr.app.config]`` on virtual nodes (``InProcessGrid``: Flower's simulation engine
needs Ray), end with the model ``fairagg.simulate`` computes with the same settings."""

from __future__ import annotations

import json
import re
import shlex
import sys
import warnings
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
    auto = "cuda" if "cuda" in fairagg.kernels.available_backends() else "numba"
    assert task.build_rule(CONFIG).hyperparams["backend"] == auto
    assert task.build_rule({**CONFIG, "backend": "numpy"}).hyperparams["backend"] == "numpy"
    assert task.build_rule(CONFIG).hyperparams["alpha"] == 0.1
    assert task.build_rule({**CONFIG, "fedfv.alpha": 0.3}).hyperparams["alpha"] == 0.3
    assert task.build_rule({**CONFIG, "rule": "term"}).hyperparams["tilt"] == 1.0
    assert task.build_rule({**CONFIG, "rule": "term", "tilt": 2.0}).hyperparams["tilt"] == 2.0
    with pytest.raises(ValueError, match="no hyper-parameter .alphaa.; it takes alpha"):
        task.build_rule({**CONFIG, "fedfv.alphaa": 0.2})
    with pytest.raises(ValueError, match="'fedvf' is not a rule"):
        task.build_rule({**CONFIG, "fedvf.alpha": 0.2})


# --------------------------------------------------------------------------------------------
# The README's commands, parsed by the installed Flower's own command-line parsers
# --------------------------------------------------------------------------------------------

README = APP / "README.md"
#: The shell expansions the README's commands use, with the value of the first loop pass.
EXPANSIONS = {"$((9094 + i))": "9094", "$i": "0", "SUPERLINK_IP": "192.0.2.1"}
FLOWER_COMMANDS = ("flower-superlink", "flower-supernode", "flwr")


def _readme_commands() -> list[list[str]]:
    """Every Flower command of the README's bash blocks, as the shell splits it: continuation
    lines joined, comments, redirections and a trailing ``&`` dropped, the README's shell
    expansions replaced by their first value (any other ``$`` is left, and fails the tests)."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            for old, new in EXPANSIONS.items():
                line = line.replace(old, new)
            words = shlex.split(line, comments=True)
            if not words or words[0] not in FLOWER_COMMANDS:
                continue
            while words and (words[-1] == "&" or words[-1].startswith(("2>", ">"))):
                words.pop()
            if len(words) >= 2 and words[-2] == ">":
                del words[-2:]
            commands.append(words)
    return commands


def _parse(words: list[str]) -> dict:
    """``words`` parsed by the installed Flower's parser of that command (its options as a
    dict); a word the parser rejects fails the test, naming the command."""
    from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

    command = " ".join(words)
    assert "$" not in command, f"an unexpanded shell word in the README: {command}"
    if words[0] == "flwr":
        import click
        import typer

        with warnings.catch_warnings():  # Flower 1.42's CLI passes typer deprecated arguments
            warnings.simplefilter("ignore", DeprecationWarning)
            from flwr.cli.app import app

        cli = typer.main.get_command(app)
        sub = cli.get_command(cli.make_context("flwr", list(words[1:2])), words[1])
        assert sub is not None, f"flwr has no command {words[1]!r}: {command}"
        try:
            return dict(sub.make_context(words[1], list(words[2:])).params)
        except click.UsageError as exc:
            pytest.fail(f"the README's `{command}` does not parse: {exc}")
    parser = {
        "flower-superlink": _parse_args_run_superlink,
        "flower-supernode": _parse_args_run_supernode,
    }[words[0]]()
    try:
        return vars(parser.parse_args(words[1:]))
    except SystemExit:
        pytest.fail(f"the README's `{command}` does not parse (its error is printed above)")


def _by_name(name: str, sub: str | None = None) -> list[list[str]]:
    found = [w for w in _readme_commands() if w[0] == name and (sub is None or w[1] == sub)]
    assert found, f"the README has no {name} {sub or ''} command"
    return found


def test_the_readmes_flower_commands_parse_with_the_installed_flower():
    commands = _readme_commands()
    assert {w[0] for w in commands} == set(FLOWER_COMMANDS)
    for words in commands:
        _parse(words)


def test_the_readmes_ports_are_flowers_defaults():
    from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

    superlink_port = _parse_args_run_superlink().parse_args([]).port
    supernode_port = _parse_args_run_supernode().parse_args([]).port
    links = [_parse(w) for w in _by_name("flower-superlink")]
    assert {args["port"] for args in links} == {superlink_port}
    for words in _by_name("flower-supernode"):
        args = _parse(words)
        assert int(args["superlink"].rsplit(":", 1)[1]) == superlink_port, " ".join(words)
        assert args["insecure"], " ".join(words)  # as the SuperLink runs
    # the SuperNodes sharing a machine: their own ports, from Flower's default up
    local = [_parse(w) for w in _by_name("flower-supernode") if "127.0.0.1:" in " ".join(w)]
    assert [args["port"] for args in local] == [supernode_port]  # the loop's first pass
    assert "--port $((9094 + i))" in README.read_text()
    assert supernode_port == 9094
    # the connection `flwr run` uses points at the SuperLink, as insecure as it is
    toml = re.search(r"<<'EOF'\n(.*?)\nEOF", README.read_text(), flags=re.S).group(1)
    connections = tomllib.loads(toml)["superlink"]
    (name,) = connections
    assert connections[name] == {"address": f"127.0.0.1:{superlink_port}", "insecure": True}
    named = {_parse(w)["superlink"] for w in _by_name("flwr", "run")} - {None}
    assert named == {name}  # the simulation's runs name none: Flower's local SuperLink


def test_the_readmes_runs_wait_and_use_keys_the_config_has():
    from flwr.common.config import parse_config_args
    from flwr.supercore.utils import simulation_config_from_json

    partitions = set()
    for words in _by_name("flower-supernode"):
        node = parse_config_args([_parse(words)["node_config"]])
        assert set(node) == {"partition-id", "num-partitions"}, " ".join(words)
        partitions.add(node["num-partitions"])
    assert partitions == {CONFIG["num-clients"]}
    for words in _by_name("flwr", "run"):
        args = _parse(words)
        assert args["stream"], f"`{' '.join(words)}` returns before the run ends: add --stream"
        overrides = parse_config_args(list(args["run_config_overrides"]))
        assert set(overrides) <= set(CONFIG), f"not in the config: {set(overrides) - set(CONFIG)}"
        federation = parse_config_args(list(args["federation_config_overrides"]))
        if federation:
            simulation_config_from_json({k.replace("-", "_"): v for k, v in federation.items()})
            assert federation["num-supernodes"] == CONFIG["num-clients"]
    assert CONFIG["out-dir"] == "outputs" and "`outputs/`" in README.read_text()
