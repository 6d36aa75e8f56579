"""Every command's flags given bad values: one ``fairagg: error:`` line naming the flag, exit
status 2, no traceback, and the file system as it was (issue 37, items 2-4 and 11)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fairagg import History
from fairagg.cli import EXPERIMENT_RULE_ARGS, main
from fairagg.cli._parser import _build_parser

REPO = Path(__file__).resolve().parents[1]
GOLDEN = str(REPO / "tests" / "golden")
#: A folder the file system will not make (as root too): /proc takes no new entries.
NO_FOLDER = "/proc/fairagg-cannot-be-made"
#: A small experiment (K' = K = 10, by default), given before a case's own flags.
SMALL = ["--clients", "10", "--rounds", "2", "--epochs", "1", "--model", "logistic",
         "--data", "synthetic:0.5,0.5", "--quiet"]  # fmt: skip

#: A run's config.json with one entry changed (written as {tmp}/bad.json by the case).
BAD_CONFIGS = {
    "rounds-str": ({"rounds": "two"}, "'rounds' must be an integer"),
    "lr-str": ({"lr": "0.1"}, "'lr' must be a real number"),
    "rule-unknown": ({"rule": "nope"}, "'rule' must be one of"),
    "rounds-null": ({"rounds": None}, "'rounds' must be an integer"),
    "rounds-float": ({"rounds": 1.5}, "'rounds' must be an integer"),
    "rounds-zero": ({"rounds": 0}, "'rounds' must be at least 1"),
    "lr-nan": ({"lr": float("nan")}, "'lr' must be finite"),
    "momentum-bool": ({"momentum": True}, "'momentum' must be a real number"),
    "data-int": ({"data": 5}, "'data' must be a data spec"),
    "rule-arg-str": ({"rule_arg": "x"}, "'rule_arg' must map hyper-parameter names"),
    "rule-arg-list": ({"rule_arg": ["q", 2]}, "'rule_arg' must map hyper-parameter names"),
    "rule-arg-value": (
        {"rule": "qfedavg", "rule_arg": {"q": "abc"}},
        "'rule_arg' entry 'q': q must be",
    ),
    "rule-arg-scope": ({"rule_arg": {"nope.q": 1}}, "'rule_arg' entry 'nope.q': 'nope' is not a"),
    "unknown-key": ({"colour": "red"}, "unknown setting 'colour'"),
    "backend-unknown": ({"backend": "gpu"}, "'backend' must be one of"),
    "backend-int": ({"backend": 1}, "'backend' must be a str"),
    "kprime-above-k": ({"clients_per_round": 99}, "'clients_per_round' must be between 1"),
    # entries that are not settings: of a run's own types (not used), or flags only
    "out-int": ({"out": 5}, "'out' must be a str"),
    "quiet-str": ({"quiet": "yes"}, "'quiet' must be a bool"),
    "overwrite": ({"overwrite": True}, "'overwrite' is not a setting a config file gives"),
    "resume": ({"resume": "x"}, "'resume' is not a setting a config file gives"),
    "config": ({"config": "x.json"}, "'config' is not a setting a config file gives"),
}

# (argv, what the error line must contain); {tmp}: the test's folder (the working directory),
# {run}: a finished run, {file}: a file that is not JSON, {worker}: a conformance worker.
CASES = [
    # no command, an unknown one, an unknown flag
    ([], "required"),
    (["frobnicate"], "invalid choice"),
    (["run", "--nope"], "unrecognized arguments: --nope"),
    # run: wrong types, out of range, unknown names
    (["run", "--rounds", "x"], "--rounds"),
    (["run", "--rounds", "0"], "--rounds"),
    (["run", "--epochs", "0"], "--epochs"),
    (["run", "--batch", "0"], "--batch"),
    (["run", "--batch", str(2**64)], "--batch"),
    (["run", "--eval-every", str(2**80)], "--eval-every"),
    (["run", "--clients", "0"], "--clients"),
    (["run", "--clients-per-round", "99"], "--clients-per-round"),
    (["run", "--hidden", "0"], "--hidden"),
    (["run", "--lr", "0"], "--lr"),
    (["run", "--lr", "nan"], "--lr"),
    (["run", "--lr", "fast"], "--lr"),
    (["run", "--momentum", "1"], "--momentum"),
    (["run", "--prox-mu", "-1"], "--prox-mu"),
    (["run", "--l2", "inf"], "--l2"),
    (["run", "--test-fraction", "1"], "--test-fraction"),
    (["run", "--data-seed", "-1"], "--data-seed"),
    (["run", "--seed", "-1"], "--seed"),
    (["run", "--seed", "1.5"], "--seed"),
    (["run", "--rule", "nope"], "--rule"),
    (["run", "--model", "cnn"], "--model"),
    (["run", "--activation", "sigmoid"], "--activation"),
    (["run", "--sampling", "random"], "--sampling"),
    (["run", "--backend", "gpu"], "--backend"),
    (["run", "--rule-arg", "backend=numpy"], "--rule-arg backend: the backend is not a hyper"),
    (["run", "--data", "mnist"], "bad data spec 'mnist'"),
    (["run", "--data", "synthetic:1"], "bad data spec"),
    # run: rule hyper-parameters (the rule's factory checks them, the error names the flag)
    (["run", "--rule", "qfedavg", "--rule-arg", "q=abc"], "--rule-arg q: q must be a real"),
    (["run", "--rule", "fedfv", "--rule-arg", "tau=1.5"], "--rule-arg tau: tau must be an int"),
    (["run", "--rule", "fedfv", "--rule-arg", "rescale=maybe"], "--rule-arg rescale: rescale"),
    (["run", "--rule", "term", "--rule-arg", "variant=nope"], "--rule-arg variant"),
    (["run", "--rule-arg", "nope=1"], "--rule-arg nope: rule 'fedavg' has no hyper-parameter"),
    (["run", "--rule-arg", "nope.q=1"], "--rule-arg nope.q: 'nope' is not a registered rule"),
    (["run", "--rule-arg", "fedfv.tau=2"], "'fedfv' is not one of the rules run"),
    (["run", "--rule-arg", "q"], "--rule-arg"),
    (["run", "--rule", "fedfa", "--momentum", "0.2"], "--momentum 0.2 contradicts rule 'fedfa'"),
    (["run", "--rule", "afl", "--clients-per-round", "3"], "--clients-per-round must equal"),
    (["run", "--clients-per-round", "11"], "--clients-per-round must be between 1 and"),
    # ... where the rule's experiment default (a note on standard error) would come first
    (["run", "--rule", "qfedavg", "--data", "mnist"], "bad data spec"),
    (["run", "--rule", "afl", "--clients", "12", "--rounds", "0"], "--rounds"),
    # run: paths
    (["run", "--out", NO_FOLDER], f"--out {NO_FOLDER}: cannot write to"),
    (["run", "--out", "{file}"], "is a file, not a folder"),
    (["run", "--out", "{file}/x"], "which is a file, not a folder"),
    (["run", "--out", "{run}"], "already holds a run"),
    (["run", "--resume", "{tmp}/nothing"], "--resume: no such file"),
    (["run", "--resume", "{run}", "--lr", "0.1"], "only --rounds and --quiet"),
    (["run", "--resume", "{run}", "--rounds", "1"], "--rounds 1 is fewer than the 2 rounds"),
    (["run", "--config", "{tmp}/missing.json"], "--config: no such file"),
    (["run", "--config", "{file}"], "is not a fairagg config.json"),
    (["run", "--config", "{tmp}"], "--config: no such file"),
    # run: config files, one schema with the flags
    *[
        (["run", "--config", f"{{tmp}}/{name}.json"], f"--config: {needle}")
        for name, (_, needle) in BAD_CONFIGS.items()
    ],  # fmt: skip
    (["run", "--config", "{tmp}/rounds-str.json", "--rounds", "0"], "--rounds"),
    (["run", "--config", "{tmp}/deep.json"], "--config: {tmp}/deep.json is not a fairagg config"),
    (["run", "--out", ""], "argument --out: expected a path; got an empty one"),
    (["run", "--resume", ""], "argument --resume: expected a path; got an empty one"),
    (["run", "--config", ""], "argument --config: expected a path; got an empty one"),
    # compare
    (["compare", "--rules", "fedavg,nope"], "--rules: unknown rule 'nope'"),
    (["compare", "--rules", "fedavg,fedavg"], "--rules lists fedavg more than once"),
    (["compare", "--seeds", "a"], "--seeds"),
    (["compare", "--seeds", "-1"], "--seeds must be >= 0"),
    (["compare", "--seeds", "0,0"], "--seeds lists 0 more than once"),
    (["compare", "--clients-per-round", "0"], "--clients-per-round"),
    (["compare", "--clients-per-round", "2,x"], "--clients-per-round"),
    (["compare", "--rounds", "0"], "--rounds"),
    (["compare", "--rules", "qfedavg", "--rule-arg", "q=abc"], "--rule-arg q: q must be"),
    (["compare", "--rules", "fedavg,qfedavg", "--rule-arg", "q=2"], "--rule-arg q: rule 'fedavg'"),
    (["compare", "--rules", "qfedavg,afl", "--data", "mnist"], "bad data spec"),
    (["compare", "--out", NO_FOLDER], "--out"),
    (["compare", "--out", "{file}"], "is a file, not a folder"),
    (["compare", "--resume", "{tmp}/nothing"], "--resume"),
    (["compare", "--out", ""], "argument --out: expected a path"),
    (["compare", "--rules", "fedavg,"], "--rules: an empty rule name in 'fedavg,'"),
    (["compare", "--rules", "fedavg,,fairavg"], "--rules: an empty rule name"),
    (["compare", "--seeds", "0,"], "--seeds: an empty integer in '0,'"),
    (["compare", "--resume", "{tmp}/deep"], "--resume: {tmp}/deep/config.json is not a comp"),
    # report
    (["report"], "required"),
    (["report", "{tmp}/nothing"], "nothing"),
    (["report", "{file}"], "is not a saved history"),
    (["report", ""], "argument RUN: expected a path"),
    (["report", "{run}", "--out", NO_FOLDER], "--out"),
    (["report", "{run}", "--out", "{file}"], "is a file, not a folder"),
    # rules
    (["rules", "nope"], "RULE"),
    (["rules", "fedavg", "fairavg"], "unrecognized arguments"),
    # vectors
    (["vectors", "--seed", "-1"], "--seed"),
    (["vectors", "--seed", "x"], "--seed"),
    (["vectors", "--out", NO_FOLDER], "--out"),
    (["vectors", "--out", "{file}"], "is a file, not a folder"),
    (["vectors", "--check"], "--out runs/vectors holds no golden vectors"),
    (["vectors", "--check", "--out", "{tmp}"], "holds no golden vectors"),
    (["vectors", "--compare", "{tmp}/missing.json", "--out", GOLDEN], "--compare"),
    (["vectors", "--compare", "{tmp}", "--out", GOLDEN], "--compare"),
    (["vectors", "--compare", "{file}", "--out", GOLDEN], "--compare"),
    (["vectors", "--compare", "{tmp}/empty.json", "--out", GOLDEN], "--compare"),
    (["vectors", "--compare", "{tmp}/empty.json", "--out", "{tmp}"], "no golden vectors"),
    (["vectors", "--compare", "{file}", "--check", "--out", GOLDEN], "give one"),
    (["vectors", "--solver-tol", "0"], "--solver-tol"),
    (["vectors", "--precision", "float16"], "--precision"),
    (["vectors", "--solver-tol", "1e-3"], "--solver-tol applies to --compare RESULTS only"),
    (["vectors", "--precision", "float32"], "--precision applies to --compare RESULTS only"),
    (["vectors", "--precision", "float64", "--out", GOLDEN], "--precision applies to --compare"),
    (
        ["vectors", "--compare", "{tmp}/empty.json", "--out", GOLDEN, "--solver-tol", "1e-3"],
        "--solver-tol applies to --compare with --precision solver",
    ),
    (["vectors", "--compare", "{tmp}/deep.json", "--out", GOLDEN], "nested too deeply"),
    (["vectors", "--out", ""], "argument --out: expected a path"),
    # check
    (["check"], "TARGET"),
    (["check", "nope", "--describe"], "target must be a registered rule"),
    (["check", "fedavg_weights"], "--cmd"),
    (["check", "fedavg_weights", "--cmd", ""], "--cmd"),
    (["check", "fedavg_weights", "--cmd", "'unbalanced"], "--cmd"),
    (["check", "fedavg_weights", "--cmd", "{tmp}/no-such-program"], "--cmd"),
    (["check", "fedavg_weights", "--cmd", "w", "--generated", "-1"], "--generated"),
    (["check", "fedavg_weights", "--cmd", "w", "--seed", "-1"], "--seed"),
    (["check", "fedavg_weights", "--cmd", "w", "--round-base", "-1"], "--round-base"),
    (["check", "fedavg_weights", "--cmd", "w", "--round-base", "1e3"], "--round-base"),
    (["check", "fedavg_weights", "--cmd", "w", "--rtol", "-1"], "--rtol"),
    (["check", "fedavg_weights", "--cmd", "w", "--atol", "nan"], "--atol"),
    (["check", "fedavg_weights", "--cmd", "w", "--timeout", "0"], "--timeout"),
    (["check", "fedavg_weights", "--cmd", "w", "--solver-tol", "1e-6"], "--solver-tol"),
    (["check", "fedavg_weights", "--cmd", "w", "--golden", ","], "--golden"),
    (["check", "fedavg_weights", "--cmd", "w", "--golden", "none", "--generated", "0"], "--golden"),
    (["check", "fedavg_weights", "--cmd", "w", "--precision", "float16"], "--precision"),
    (
        ["check", "fedavg_weights", "--cmd", "w", "--generated", "99999999999999999999"],
        "--generated must be between 0 and 1000000",
    ),
    (["check", "fedavg_weights", "--cmd", "w", "--seed", "1", "--random"], "--seed and --random"),
    (["check", "--list", "--template"], "--list and --template are two different actions"),
    (["check", "fedavg", "--list"], "--list takes no TARGET; got 'fedavg'"),
    (["check", "fedavg", "--template"], "--template takes no TARGET"),
    (["check", "fedavg", "--describe", "--list"], "--list and --describe are two different"),
    # ... and those the harness checks once the worker answers
    (["check", "fedavg_weights", "--cmd", "{worker}", "--param", "nope=1"], "--param"),
    (["check", "qfedavg", "--cmd", "{worker}", "--param", "q=abc"], "--param q: q must be a real"),
    (["check", "fedavg_weights", "--cmd", "{worker}", "--accept", "nope"], "--accept"),
    (["check", "fedavg_weights", "--cmd", "{worker}", "--golden", "nope"], "--golden"),
]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run of two rounds, its folder never to change."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(["run", *SMALL, "--out", str(run)]) == 0
    return run


def _tree(*roots: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``roots``: its kind, its modification time and a file's bytes."""
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            out[str(p)] = ("file", st.st_mtime_ns, p.read_bytes()) if p.is_file() else (
                "folder", st.st_mtime_ns, b""
            )  # fmt: skip
    return out


def _prepare(tmp: Path, run: Path) -> dict[str, str]:
    (tmp / "not-json.txt").write_text("not json\n")
    (tmp / "empty.json").write_text("{}\n")
    base = json.loads((run / "config.json").read_text())
    for name, (entries, _) in BAD_CONFIGS.items():
        (tmp / f"{name}.json").write_text(json.dumps({**base, **entries}))
    (tmp / "deep.json").write_text("[" * 100_000)  # deeper than Python's stack
    (tmp / "deep").mkdir()
    (tmp / "deep" / "config.json").write_text("[" * 100_000)
    worker = tmp / "worker.py"
    worker.write_text(_worker_source())
    return {
        "{tmp}": str(tmp),
        "{run}": str(run),
        "{file}": str(tmp / "not-json.txt"),
        "{worker}": f"{sys.executable} {worker}",
    }


def _worker_source() -> str:
    return (REPO / "fairagg" / "_worker_template.py").read_text(encoding="utf-8")


def _fill(argv: list[str], where: dict[str, str]) -> list[str]:
    """``argv`` with its placeholders filled in; ``run`` and ``compare`` on a small experiment
    (a saved run's settings where it names one)."""
    out = []
    for a in argv:
        for key, value in where.items():
            a = a.replace(key, value)
        out.append(a)
    if out[:1] in (["run"], ["compare"]):
        saved = "--config" in argv or "--resume" in argv
        out = [out[0], *(["--quiet"] if saved else SMALL), *out[1:]]
    return out


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[" ".join(a) or "-" for a, _ in CASES])
def test_a_bad_argument_is_one_line_exit_2_and_changes_nothing(
    argv, needle, tmp_path, monkeypatch, capsys, finished_run
):
    monkeypatch.chdir(tmp_path)  # a command's default folders (runs/...) land here
    where = _prepare(tmp_path, finished_run)
    full = _fill(argv, where)
    before = _tree(tmp_path, finished_run)
    capsys.readouterr()
    try:
        rc = main(full)
    except SystemExit as exc:  # argparse's own errors exit from parse_args
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (full, rc, out, err)
    assert err.startswith("fairagg: error: ") and err.count("\n") == 1, err
    assert needle.replace("{tmp}", str(tmp_path)) in err, (needle, err)
    assert "Traceback" not in out + err
    assert _tree(tmp_path, finished_run) == before  # nothing written, nothing removed


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--rule", "qfedavg", "--rule-arg", "q=abc"],
        ["run", "--config", "{tmp}/rounds-float.json"],
    ],
)
def test_the_console_entry_point_exits_2_with_one_line(argv, tmp_path, finished_run):
    where = _prepare(tmp_path, finished_run)
    before = _tree(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fairagg", *_fill(argv, where)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("fairagg: error: ") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
    assert _tree(tmp_path) == before


def test_a_config_file_with_a_real_number_of_rounds_writes_no_folder(tmp_path, finished_run):
    # before: "rounds": 1.5 passed every check, wrote config.json, rounds.csv and history.npz,
    # then crashed, leaving a folder that blocked a rerun and could not be resumed
    where = _prepare(tmp_path, finished_run)
    out = tmp_path / "out"
    argv = ["run", "--config", where["{tmp}"] + "/rounds-float.json", "--out", str(out)]
    assert main(argv) == 2
    assert not out.exists()


# ------------------------------------------------------------------------ the settings object
def test_the_settings_are_one_frozen_object_checked_where_made():
    from fairagg._settings import ExperimentSettings, SettingsTypeError, SettingsValueError

    s = ExperimentSettings(lr=1, rule="qfedavg", rule_arg={"q": 2, "qfedavg.lipschitz": 1})
    assert s.lr == 1.0 and isinstance(s.lr, float)  # normalised: JSON's 1 is the real 1.0
    assert s.rule_arg == (("q", 2), ("qfedavg.lipschitz", 1))
    assert s.hyperparams == {"q": 2, "lipschitz": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.lr = 0.1  # type: ignore[misc]
    for kw, cls, key in [
        ({"rounds": "two"}, SettingsTypeError, "rounds"),
        ({"rounds": True}, SettingsTypeError, "rounds"),
        ({"lr": -1.0}, SettingsValueError, "lr"),
        ({"rule": "afl"}, SettingsValueError, "clients_per_round"),
        ({"rule": "fedfv", "rule_arg": {"tau": 1.5}}, SettingsTypeError, "rule_arg"),
    ]:
        with pytest.raises(cls) as info:
            ExperimentSettings(**kw)
        assert info.value.key == key and str(info.value).startswith(key)


def test_the_parsers_defaults_and_choices_are_the_settings():
    from fairagg._settings import ExperimentSettings

    defaults = ExperimentSettings()
    parser = _build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    run = sub.choices["run"]
    for action in run._actions:
        if action.dest in {f.name for f in dataclasses.fields(defaults)}:
            if action.dest == "rule_arg":
                continue
            assert action.default == getattr(defaults, action.dest), action.dest
            if action.choices is not None:  # every choice is a valid setting, and no other
                for choice in action.choices:
                    ExperimentSettings(**{action.dest: choice, "clients_per_round": 30})


# -------------------------------------------------------------------------------- item 11
@pytest.mark.parametrize("rule", sorted(EXPERIMENT_RULE_ARGS))
def test_rules_says_the_command_lines_own_hyper_parameters(rule, capsys):
    assert main(["rules", rule]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for key, value in EXPERIMENT_RULE_ARGS[rule].items():
        assert f"fairagg run and fairagg compare set {key} = {value!r}" in text, text
        assert f"--rule-arg {rule}.{key}=none for the default" in text


def test_rule_arg_none_gives_the_librarys_default(tmp_path, capsys):
    out = tmp_path / "q"
    argv = ["run", *SMALL, "--rule", "qfedavg", "--rule-arg", "qfedavg.lipschitz=none"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "lipschitz = 1.0" not in capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["rule_arg"] == {"qfedavg.lipschitz": None}
    assert History.load(out / "history.npz").config["rule_hyperparams"]["lipschitz"] is None


def test_the_docs_type_vectors_check_with_the_folder_it_checks():
    # a fresh install has no runs/vectors: `fairagg vectors --check` alone fails there
    pages = [REPO / "README.md", *sorted((REPO / "docs" / "pages").rglob("*.md"))]
    typed = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"fairagg vectors[^`\n]*--check[^`\n]*", text):
            typed.append((page.name, m.group(0)))
    assert typed
    for page, command in typed:
        assert "--out" in command and "[--check]" not in command, (page, command)


def test_running_out_of_memory_is_one_line(tmp_path, monkeypatch, capsys):
    import fairagg.cli._run as run

    def too_big(args):
        raise MemoryError("Unable to allocate 745. GiB for an array")

    monkeypatch.setattr(run, "_make_experiment", too_big)
    assert main(["run", *SMALL, "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fairagg: error: out of memory") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_a_config_files_out_is_not_used_and_a_note_says_so(tmp_path, monkeypatch, capsys):
    # before: "out": "o" in a --config file wrote to runs/fedavg-s0, and nothing said so
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.json"
    assert main(["run", *SMALL, "--out", str(tmp_path / "first")]) == 0
    saved = json.loads((tmp_path / "first" / "config.json").read_text())
    config.write_text(json.dumps({**saved, "out": "o", "quiet": False}))
    capsys.readouterr()
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "second")]) == 0
    err = capsys.readouterr().err
    assert f"--config: its out (o) is not used; this run goes to --out {tmp_path / 'second'}" in err
    assert not (tmp_path / "o").exists() and (tmp_path / "second" / "history.npz").is_file()
