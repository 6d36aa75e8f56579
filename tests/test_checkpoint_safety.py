"""A run folder is safe to open (issue 37, item 10): checkpoints are data only (arrays in an
.npz, the rest JSON, rule states rebuilt from fairagg's own types), every rule resumes from one
bitwise, and files that try to run code get one clear error and never run it."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import shutil
from typing import NamedTuple

import numpy as np
import pytest

from fairagg import RULES, History, make_rule, simulate
from fairagg.cli import main
from fairagg.data import synthetic
from fairagg.models import LogisticRegression
from fairagg.simulation import load_checkpoint
from fairagg.types import Aggregate, Rule

SIM = importlib.import_module("fairagg.simulation")
SMALL3 = ["--clients", "6", "--clients-per-round", "3", "--rounds", "3", "--epochs", "1",
          "--model", "logistic", "--quiet", "--data", "synthetic:0.5,0.5"]  # fmt: skip


@pytest.fixture(scope="module")
def data():
    return synthetic(1, 1, 6, seed=3, max_samples_per_client=60)


@pytest.fixture(scope="module")
def model():
    return LogisticRegression(60, 10)


def _same_tree(a, b, where="state") -> None:
    """The same value, type for type and bit for bit."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_tree(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same_tree(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b or (a != a and b != b), where


def _same_history(a: History, b: History) -> None:
    for k in ("round", "selected", "weights", "reported_losses", "eval_round", "test_accuracy",
              "test_loss", "train_accuracy", "train_loss"):  # fmt: skip
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), k
    assert np.array_equal(a.final_params, b.final_params)


@pytest.mark.parametrize("rule", list(RULES))
def test_every_rule_resumes_bitwise_from_a_data_only_checkpoint(
    rule, model, data, tmp_path, monkeypatch
):
    m = data.num_clients if RULES[rule].full_participation else 3
    kw = {"clients_per_round": m, "epochs": 1, "eval_every": 2, "seed": 4}
    whole = simulate(rule, model, data, rounds=5, **kw)
    ckpt, written = tmp_path / "checkpoint.npz", []
    real = SIM._write_checkpoint

    def keep(path, payload, types=None):  # the state as the run holds it, beside what is written
        written.append(payload)
        real(path, payload, types)

    monkeypatch.setattr(SIM, "_write_checkpoint", keep)
    simulate(rule, model, data, rounds=3, checkpoint=ckpt, **kw)
    with np.load(ckpt, allow_pickle=False) as z:  # every entry is data: no pickle anywhere
        assert all(z[k].dtype.kind != "O" for k in z.files)
    saved = load_checkpoint(ckpt)
    _same_tree(written[-1]["state"], saved["state"])  # the rule's state round-trips exactly
    _same_tree(written[-1]["params"], saved["params"], "params")
    _same_tree(written[-1]["config"], saved["config"], "config")
    resumed = simulate(rule, model, data, rounds=5, checkpoint=ckpt, resume=True, **kw)
    _same_history(resumed, whole)
    _same_tree(written[-1]["state"], load_checkpoint(ckpt)["state"])


# ------------------------------------------------------------ files that try to execute code
class _Plant:
    """Unpickled, it creates the folder ``marker``: the proof that a file ran code."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    run = tmp_path_factory.mktemp("template") / "run"
    assert main(["run", *SMALL3, "--out", str(run)]) == 0
    return run


def _npz_entries(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _legacy_pickle(run, plant):
    (run / "checkpoint.npz").unlink()
    (run / "checkpoint.pkl").write_bytes(pickle.dumps({"version": 1, "round": plant}))
    return run / "checkpoint.pkl"


def _pickle_named_npz(run, plant):
    (run / "checkpoint.npz").write_bytes(pickle.dumps({"round": plant}))
    return run / "checkpoint.npz"


def _object_array(run, plant):
    entries = _npz_entries(run / "checkpoint.npz")
    entries["a0"] = np.array([plant, 1], dtype=object)  # θ, as the description names it
    np.savez(run / "checkpoint.npz", **entries)  # numpy pickles object arrays
    return run / "checkpoint.npz"


def _object_description(run, plant):
    entries = _npz_entries(run / "checkpoint.npz")
    entries["__description__"] = np.array([plant], dtype=object)
    np.savez(run / "checkpoint.npz", **entries)
    return run / "checkpoint.npz"


def _foreign_type(run, plant):
    del plant  # no pickle: the description names a class that is no fairagg state
    entries = _npz_entries(run / "checkpoint.npz")
    text = str(entries["__description__"])
    assert '"fairagg.types.EmptyState"' in text
    entries["__description__"] = np.array(text.replace("fairagg.types.EmptyState", "os.system"))
    np.savez(run / "checkpoint.npz", **entries)
    return run / "checkpoint.npz"


def _history_object_array(run, plant):
    (run / "checkpoint.npz").unlink()  # --resume reads history.npz to see what the run holds
    entries = _npz_entries(run / "history.npz")
    entries["round"] = np.array([plant], dtype=object)
    np.savez(run / "history.npz", **entries)
    return run / "history.npz"


@pytest.mark.parametrize(
    ("craft", "needle"),
    [
        (_legacy_pickle, "holds checkpoint.pkl, an older fairagg's checkpoint: a pickle"),
        (_pickle_named_npz, "it is a pickle, and fairagg never unpickles a file"),
        (_object_array, "Object arrays cannot be loaded when allow_pickle=False"),
        (_object_description, "Object arrays cannot be loaded when allow_pickle=False"),
        (_foreign_type, "the type 'os.system' is not one of fairagg's own rule-state types"),
        (_history_object_array, "is not a fairagg history"),
    ],
)
def test_a_folder_whose_files_try_to_run_code_is_refused_and_runs_none(
    template, tmp_path, capsys, craft, needle
):
    run, marker = tmp_path / "run", tmp_path / "marker"
    shutil.copytree(template, run)
    path = craft(run, _Plant(marker))
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()
    assert main(["run", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairagg: error: --resume: "), err
    assert needle in err and str(run if craft is _legacy_pickle else path) in err, err
    assert not marker.exists()  # nothing ran
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing written
    if craft is not _foreign_type:  # the file is a real threat: unpickled, it runs the plant
        if path.name == "checkpoint.pkl" or craft is _pickle_named_npz:
            pickle.loads(path.read_bytes())
        else:
            with np.load(path, allow_pickle=True) as z:
                [z[k] for k in z.files]
        assert marker.is_dir()


def test_report_refuses_a_history_that_tries_to_run_code(template, tmp_path, capsys):
    run, marker = tmp_path / "run", tmp_path / "marker"
    shutil.copytree(template, run)
    _history_object_array(run, _Plant(marker))
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairagg: error: "), err
    assert "allow_pickle=False" in err and not marker.exists()
    with pytest.raises(ValueError, match="is not a fairagg history"):
        History.load(run / "history.npz")
    assert not marker.exists()


def test_load_checkpoint_never_unpickles(tmp_path):
    marker = tmp_path / "marker"
    for name in ("checkpoint.pkl", "checkpoint.npz", "anything"):
        (tmp_path / name).write_bytes(pickle.dumps(_Plant(marker)))
        with pytest.raises(ValueError, match="is a pickle, and fairagg never unpickles"):
            load_checkpoint(tmp_path / name)
    assert not marker.exists()


class _MyState(NamedTuple):
    steps: int
    seen: np.ndarray


class _Opaque:  # a state that is an object, not data
    def __init__(self, steps):
        self.steps = steps


def _counting_rule(state_of):
    base = make_rule("fedavg")

    def step(params, reports, state):
        agg = base.step(params, reports, base.init(params, 1))
        return Aggregate(agg.params, state_of(state.steps + 1, reports.client_ids), agg.info)

    return Rule("mine", lambda params, k: state_of(0, np.zeros(0, np.int64)), step, {}, base.local)


def test_a_users_rule_with_its_own_namedtuple_state_resumes_bitwise(model, data, tmp_path):
    # the rule's own NamedTuple type is known from the state its init returns in this process;
    # the file names it, and only that type (with field values) is rebuilt
    mine = _counting_rule(lambda n, c: _MyState(n, np.asarray(c)))
    kw = {"clients_per_round": 3, "seed": 2}
    whole = simulate(mine, model, data, rounds=3, **kw)
    ckpt = tmp_path / "c.npz"
    simulate(mine, model, data, rounds=1, checkpoint=ckpt, **kw)
    saved = load_checkpoint(ckpt, state_types=[_MyState])
    assert type(saved["state"]) is _MyState and saved["state"].steps == 1
    with pytest.raises(ValueError, match="_MyState' is not one of fairagg's own"):
        load_checkpoint(ckpt)  # not named by the caller: refused, never imported by name
    with pytest.raises(TypeError, match="state_types must be NamedTuple classes"):
        load_checkpoint(ckpt, state_types=[dict])
    resumed = simulate(mine, model, data, rounds=3, checkpoint=ckpt, resume=True, **kw)
    assert np.array_equal(resumed.final_params, whole.final_params)
    assert load_checkpoint(ckpt, state_types=[_MyState])["state"].steps == 3


def test_a_rule_whose_state_a_checkpoint_cannot_hold_is_refused_before_training(
    model, data, tmp_path
):
    mine = _counting_rule(lambda n, c: _Opaque(n))
    with pytest.raises(TypeError, match="rule 'mine'.*_Opaque, which is not data"):
        simulate(mine, model, data, rounds=2, clients_per_round=3, checkpoint=tmp_path / "c")
    assert not (tmp_path / "c").exists()
    assert simulate(mine, model, data, rounds=2, clients_per_round=3).num_rounds == 2


def test_a_checkpoint_is_one_npz_of_arrays_and_json(template):
    with np.load(template / "checkpoint.npz", allow_pickle=False) as z:
        desc = json.loads(str(z["__description__"]))["dict"]  # JSON objects are tagged
        assert all(z[k].dtype.kind != "O" for k in z.files)
    assert desc["format"] == "fairagg checkpoint" and desc["round"] == 3
    assert desc["state"] == {"type": "fairagg.types.EmptyState", "fields": {}}
    assert not (template / "checkpoint.pkl").exists()


def test_aaggff_s_low_rank_sums_round_trip_through_a_checkpoint(tmp_path):
    # from LOW_RANK_CLIENTS clients on, AAgFF-S keeps its sums low-rank: a checkpoint holds
    # them as data and rebuilds them, type and bits, without being told the type
    from fairagg._checkpoint import read_npz_tree, write_npz_tree
    from fairagg.online import LowRankFTRL, quadratic_ftrl_init, quadratic_ftrl_round

    rng = np.random.default_rng(3)
    state, p = quadratic_ftrl_init(6, low_rank=True), np.full(6, 1 / 6)
    for _ in range(3):
        out = quadratic_ftrl_round(state, rng.normal(size=6), p, 1.0, 0.5)
        state, p = out.state, out.result.x
    write_npz_tree(tmp_path / "s.npz", state)
    back = read_npz_tree(tmp_path / "s.npz")
    assert type(back) is LowRankFTRL
    _same_tree(state, back)


# ------------------------------------------------- damaged checkpoints (issue 37, review 4)
def _edit_checkpoint(edit):
    """A craft that rewrites the run's checkpoint.npz with ``edit(payload)`` applied (data
    only: the tree as ``read_npz_tree`` gives it, written back as fairagg writes one)."""

    def craft(run):
        from fairagg._checkpoint import read_npz_tree, write_npz_tree

        path = run / "checkpoint.npz"
        payload = read_npz_tree(path)
        edit(payload)
        write_npz_tree(path, payload)
        return path

    return craft


def _set(key, value):
    return lambda p: p.__setitem__(key, value(p[key]))


def _set_row(field, value):
    return lambda p: p["history"]["rows"].__setitem__(field, value(p["history"]["rows"][field]))


def _cut_params(p):
    p["params"], p["history"]["final_params"] = p["params"][:-1], p["history"]["final_params"][:-1]


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_set("counts", lambda c: c[:2]), "its counts has shape (2,), not (6,)"),
        (_set("params", lambda x: x.astype(str)), "its params is not a float32 or float64 array"),
        (_set("params", lambda x: np.full_like(x, np.nan)), "its params holds NaN or infinity"),
        (_set_row("selected", lambda s: s[:1]), "its history's selected has 1 rows, not 3"),
        (_set_row("eval_round", lambda e: e[:2]), "its history's test_accuracy has 4 rows, not 2"),
        (_set("counts", lambda c: c + 1), "its counts are not the participations"),
        (
            lambda p: (
                p.__setitem__("params", p["params"].astype(np.float32)),
                p["history"].__setitem__("final_params", p["params"]),
            ),
            "cannot be continued: the checkpoint's parameters are float32; this run's are float64",
        ),
        (
            lambda p: p["config"].__setitem__("rule", "fairavg"),
            "cannot be continued: this run's settings differ from the checkpoint's in rule",
        ),
        (_cut_params, "cannot be continued: the checkpoint's parameters do not fit this model"),
    ],
    ids=[
        "counts-cut",
        "params-str",
        "params-nan",
        "selected-cut",
        "evals-cut",
        "counts-wrong",
        "params-float32",
        "rule-differs",
        "params-short",
    ],  # fmt: skip
)
def test_a_damaged_checkpoint_is_refused_before_anything_is_written(
    template, tmp_path, capsys, edit, needle
):
    # before: tracebacks (IndexError, TypeError), a corrupt history.npz written, a float32
    # run continued as float64, or a refusal after config.json and the rest were rewritten
    run = tmp_path / "run"
    shutil.copytree(template, run)
    path = _edit_checkpoint(edit)(run)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir()}
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--rounds", "5"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("fairagg: error: --resume: "), err
    assert str(path) in err and needle in err, err
    assert out == "" and "Traceback" not in err
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir()} == before
