"""The settings of ``fairagg run`` and ``fairagg compare``: from flags and config files to
validated [`ExperimentSettings`][fairagg._settings.ExperimentSettings], with errors that name the
flag or the config file's entry, and the hyper-parameters the command line sets itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._settings import ExperimentSettings, SettingsError, check_setting

#: The fields of ExperimentSettings: the settings a run's config.json holds.
_SETTINGS = tuple(f.name for f in dataclasses.fields(ExperimentSettings))


def _flag(key: str, compare: bool) -> str:
    """The flag that sets the setting ``key`` (compare's list flags for rule and seed)."""
    if compare and key in ("rule", "seed"):
        return f"--{key}s"
    return "--" + key.replace("_", "-")


def _setting_error(exc: SettingsError, origins: dict[str, str], compare: bool) -> ValueError:
    """``exc`` as the command line says it: naming the flag, or the config file's entry
    (``origins``: the label of each setting a config file gave)."""
    if exc.key in origins:
        label = origins[exc.key]
        if exc.item is not None:
            label = f"{label} entry {exc.item!r}"
    else:
        label = _flag(exc.key, compare)
        if exc.item is not None:
            label = f"{label} {exc.item}"
    return ValueError(exc.named(label))


def _check_args(
    args: argparse.Namespace, origins: dict[str, str] | None = None
) -> list[ExperimentSettings]:
    """The validated settings of the runs ``args`` asks for (one for ``run``; for ``compare``
    one per rule and K', and one per further seed), made before any data is generated or file
    written; an invalid value is a ``ValueError`` naming its flag or, for a setting in
    ``origins`` (key -> label), the config file's entry."""
    origins = origins or {}
    compare = isinstance(getattr(args, "rules", None), list)
    rules = args.rules if compare else [args.rule]
    kprs = args.clients_per_round if compare else [args.clients_per_round]
    seeds = args.seeds if compare else [args.seed]
    if compare:
        for flag, values in (("--rules", rules), ("--seeds", seeds), ("--clients-per-round", kprs)):
            twice = sorted({str(v) for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"{flag} lists {', '.join(twice)} more than once")
    per_run = ("rule", "clients_per_round", "seed")
    common = {k: getattr(args, k) for k in _SETTINGS if k not in per_run}
    # every constraint between settings involves the rule or K', none the seed: each rule at
    # each K', and each other seed once, check every combination the command runs
    runs = [(r, k, seeds[0]) for r in rules for k in kprs]
    runs += [(rules[0], kprs[0], s) for s in seeds[1:]]
    made = []
    for rule, kpr, seed in runs:
        try:
            made.append(ExperimentSettings(**common, rule=rule, clients_per_round=kpr, seed=seed))
        except SettingsError as exc:
            raise _setting_error(exc, origins, compare) from None
    for key, _ in made[0].rule_arg:
        scope, dot, _ = key.rpartition(".")
        if dot and scope not in rules:
            raise ValueError(
                f"--rule-arg {key}=...: {scope!r} is not one of the rules run ({', '.join(rules)})"
            )
    return made


#: Hyper-parameters the command line gives a rule unless --rule-arg sets them: where the
#: library's default (the paper's) takes no sensible step in the command line's experiment
#: (FairAvg's Synthetic set-up: 20 local epochs, lr 0.01, one gradient per round for AFL). The
#: docs' Results page (default runs) shows the effect; a note on standard error says when one is
#: used, and config.json records it.
EXPERIMENT_RULE_ARGS: dict[str, dict[str, Any]] = {
    # q-FedAvg's L = 1/lr = 100 weighs h_k's q F^(q-1) ‖L δ_k‖² term 10^4 times: after 20
    # epochs the step is about 1/100 of FedAvg's (53 % average, 0 % worst-10 % at 200 rounds)
    "qfedavg": {"lipschitz": 1.0},
    # AFL takes one full-batch gradient step per round: at γ_w = lr = 0.01 200 steps end at
    # 64 % average and 0 % worst-10 %
    "afl": {"lr": 0.1},
}


def _experiment_rule_args(
    args: argparse.Namespace, rules: Sequence[str], *, say: Any = print
) -> None:
    """Add ``EXPERIMENT_RULE_ARGS`` to ``args.rule_arg`` where the user did not set them,
    each said (with ``say``) on standard error."""
    given = {key for key, _ in args.rule_arg}
    for rule in rules:
        for key, value in EXPERIMENT_RULE_ARGS.get(rule, {}).items():
            if key in given or f"{rule}.{key}" in given:
                continue
            args.rule_arg.append((f"{rule}.{key}", value))
            say(
                f"{rule}: {key} = {value} in this experiment (--rule-arg {rule}.{key}=VALUE "
                "to change it; see the docs' Results page, default runs)",
                file=sys.stderr,
            )


#: Entries of a run's config.json that are not settings of the run: where it was written and
#: whether it printed. A config file (--config, --resume) may hold them, of these types, and they
#: are not used: --out (or --resume DIR) names the folder, --quiet silences a run.
_RECORD_ENTRIES = {"out": str, "quiet": bool}
#: Flags that a config file cannot give (config.json never holds them): refused in one.
_FLAGS_ONLY = ("command", "overwrite", "resume", "config")


def _read_config(path: Path, what: str) -> dict[str, Any]:
    """The JSON object of a run's config.json at ``path`` (given by the flag ``what``)."""
    if not path.is_file():
        raise ValueError(f"{what}: no such file: {path}")
    config = _json_object(path, what, "a fairagg config.json")
    if "rule" not in config:
        raise ValueError(f"{what}: {path} is not a fairagg run's config.json")
    return config


def _json_object(path: Path, what: str, kind: str) -> dict[str, Any]:
    """The JSON object in the file ``path`` (given by the flag ``what``), or a ValueError that
    says it is not ``kind``."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: {path} is not {kind} ({exc})") from None
    except RecursionError:  # [[[... deeper than Python's stack
        raise ValueError(f"{what}: {path} is not {kind} (JSON nested too deeply)") from None
    if not isinstance(config, dict):
        raise ValueError(f"{what}: {path} is not {kind} (not a JSON object)")
    return config


def _apply_config(
    args: argparse.Namespace, config: dict[str, Any], keep: set[str], what: str
) -> dict[str, str]:
    """Set ``args`` from a saved config, except the options in ``keep`` (given explicitly).

    Each entry is checked on its own as it is read (its type and range, by the schema of
    ``ExperimentSettings``), so that nothing downstream meets a value of the wrong type; the
    settings as a whole are checked by ``_check_args``. Returns the label of each setting the
    config gave (``--config: 'rounds'``), for its errors there."""
    origins: dict[str, str] = {}
    for key, value in config.items():
        label = f"{what}: {key!r}"
        if key in _FLAGS_ONLY:
            flag = "--" + key
            raise ValueError(
                f"{label} is not a setting a config file gives ({flag} is a command-line flag)"
            )
        if key in _RECORD_ENTRIES:
            kind = _RECORD_ENTRIES[key]
            if type(value) is not kind:
                raise ValueError(
                    f"{label} must be a {kind.__name__} (where the run was written: not used, "
                    f"--{key} decides); got {type(value).__name__}"
                )
            continue
        if key in keep:
            continue
        if key not in _SETTINGS:
            raise ValueError(
                f"{what}: unknown setting {key!r} in the config (settings: {', '.join(_SETTINGS)})"
            )
        try:
            value = check_setting(key, value)
        except SettingsError as exc:
            raise _setting_error(exc, {key: label}, False) from None
        setattr(args, key, list(value) if key == "rule_arg" else value)
        origins[key] = label
    return origins
