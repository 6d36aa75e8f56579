"""The round loop (the Layout guide, "The spine: one round"): sample → local train → reports →
rule → evaluate → history.

The arguments are checked once, where they enter: the clients' training settings become one
``TrainingSettings`` (``fairagg._settings``) that every round reads as it is, and the rule's side
of a round (the reports, the step, the non-finite check, the state and participation counts
committed once the round is recorded) is ``fairagg._round``'s ``ServerRound``, the one the Flower
strategy ([`FairaggStrategy`][fairagg.flower.FairaggStrategy]) runs too.

Seeding: round t samples its clients with ``np.random.default_rng([seed, 0, t])``; client k's
local shuffles in round t come from ``default_rng([seed, 1, t, k])`` (see
[`fairagg.local`][fairagg.local]); the initial parameters from ``model.init_params(seed)``. Runs
with the same ``seed`` and data therefore see identical client samples and shuffles whatever the
rule, which is what ``fairagg compare`` relies on.

A run that fails midway (divergence, an error in a rule, Ctrl-C) keeps what it recorded: the
[`History`][fairagg.simulation.History] passed in (or ``exc.history`` on the exception that
propagates) holds every completed round, and its ``status`` says why the run stopped.

Checkpoints (``simulate(..., checkpoint=path)``) hold the complete state after a round: θ, the
rule's state, the participation counts and the history. As every random draw of round t comes
from ``(seed, t)``, nothing else carries over, and ``simulate(..., checkpoint=path,
resume=True)`` continues a run (finished, interrupted or killed) to the same parameters and
metrics, bit for bit, as a run that never stopped; only the timings differ. A checkpoint is data
only, safe to open whoever made it: one ``.npz`` file of arrays and a JSON description, read
with ``allow_pickle=False``, whose rule state is rebuilt only as one of fairagg's own state
types (``fairagg._checkpoint``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numba.core import event as numba_event

from ._checkpoint import (
    STATE_TYPES,
    NotData,
    _type_name,
    encode,
    known_state_types,
    read_npz_tree,
    write_atomically,
    write_npz_tree,
)
from ._checks import as_int_array, check_choice, check_federated_data, check_int
from ._round import ServerRound
from ._settings import TrainingSettings
from .kernels import BACKEND_CHOICES, resolve_backend
from .local import client_gradients, train_clients, trained_accuracies
from .metrics import fairness_summary
from .models import FlatModel
from .rules import check_rule_name, make_rule
from .sampling import SAMPLING_SCHEMES, sample_clients
from .types import Aggregate, RoundReports, Rule

__all__ = ["CHECKPOINT_OVERHEAD", "History", "load_checkpoint", "simulate"]

#: The largest share of a run's time spent writing checkpoints: a checkpoint is written after
#: a round once the run has gone on for its writing time / CHECKPOINT_OVERHEAD since the last
#: one (and always after the last round, and when the run stops on an error or Ctrl-C).
CHECKPOINT_OVERHEAD = 0.05
_CHECKPOINT_VERSION = 2
#: What a checkpoint says it is (the first entry of its JSON).
_CHECKPOINT_FORMAT = "fairagg checkpoint"

#: Stream tag of client sampling in ``default_rng([seed, tag, round])``.
SAMPLING_STREAM = 0

_ROUND_FIELDS = ("round", "selected", "weights", "reported_losses", "time_local", "time_aggregate")
_EVAL_FIELDS = (
    "eval_round",
    "test_accuracy",
    "test_loss",
    "train_accuracy",
    "train_loss",
    "time_eval",
)


class History:
    """Everything a simulation records, appended round by round.

    Per aggregation round (R rounds, m clients each): ``round`` (R,) the round number t = 1..R,
    ``selected`` (R, m) client indices in arrival order, ``weights`` (R, m) the rule's effective
    weights, ``reported_losses`` (R, m) F_k(θ^t), ``time_local`` / ``time_aggregate`` (R,) seconds.

    Per evaluation (E evaluations; round 0 is the initial model): ``eval_round`` (E,),
    ``test_accuracy``, ``test_loss``, ``train_accuracy``, ``train_loss`` (E, K) per client,
    ``time_eval`` (E,).

    ``status`` is ``"running"``, ``"completed"`` or ``"stopped: <reason>"``.
    """

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        num_train_samples: Any = None,
        num_test_samples: Any = None,
    ) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"config must be a dict; got {type(config).__name__}")
        self.config: dict[str, Any] = dict(config or {})
        self.num_train_samples = (
            None
            if num_train_samples is None
            else as_int_array(num_train_samples, "num_train_samples", ndim=1, min_value=0)
        )
        self.num_test_samples = (
            None
            if num_test_samples is None
            else as_int_array(num_test_samples, "num_test_samples", ndim=1, min_value=0)
        )
        self._rows: dict[str, list[Any]] = {k: [] for k in _ROUND_FIELDS + _EVAL_FIELDS}
        self.final_params: np.ndarray | None = None
        self.status = "running"

    # --- recording ----------------------------------------------------------------------------
    def record_round(self, t: int, selected, weights, reported_losses, time_local, time_agg):
        for key, val in zip(
            _ROUND_FIELDS,
            (t, selected, weights, reported_losses, time_local, time_agg),
            strict=True,
        ):
            self._rows[key].append(np.array(val, copy=True))

    def record_eval(self, t: int, test_acc, test_loss, train_acc, train_loss, time_eval):
        for key, val in zip(
            _EVAL_FIELDS, (t, test_acc, test_loss, train_acc, train_loss, time_eval), strict=True
        ):
            self._rows[key].append(np.array(val, copy=True))

    # --- reading ------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> np.ndarray:
        rows = self.__dict__.get("_rows", {})
        if name in rows:
            vals = rows[name]
            return np.stack(vals) if vals else np.empty(0)
        raise AttributeError(name)

    def latest(self, name: str) -> np.ndarray:
        """The last recorded row of field ``name`` (no stacking: O(1) per call)."""
        rows = self._rows[name]
        if not rows:
            raise ValueError(f"the history holds no {name!r} yet")
        return rows[-1]

    @property
    def num_rounds(self) -> int:
        """Number of completed aggregation rounds."""
        return len(self._rows["round"])

    def summary(self, which: int = -1) -> dict[str, float | None]:
        """[`fairagg.metrics.fairness_summary`][fairagg.metrics.fairness_summary] of the test
        accuracies of evaluation ``which`` (the last by default), sample-weighted by the clients'
        test-set sizes."""
        if not self._rows["test_accuracy"]:
            raise ValueError("the history holds no evaluation yet")
        return fairness_summary(self._rows["test_accuracy"][which], self.num_test_samples)

    def mean_test_accuracy(self) -> np.ndarray:
        """Sample-weighted mean test accuracy (percent) at each evaluation, shape (E,)."""
        acc = self.test_accuracy
        n = self.num_test_samples
        if n is None:
            raise ValueError("the history holds no evaluation yet")
        return 100.0 * (acc @ n) / n.sum()

    def mean_train_loss(self) -> np.ndarray:
        """Sample-weighted mean training loss at each evaluation, shape (E,)."""
        n = self.num_train_samples
        if n is None:
            raise ValueError("the history holds no evaluation yet")
        return (self.train_loss @ n) / n.sum()

    # --- persistence --------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the history to ``path`` (``.npz``, added to a name without it): arrays without
        pickles, the config and status as JSON inside. The file is written beside ``path`` and
        renamed over it, so an interruption leaves the old file or the new one, never a part.
        Returns the path written."""
        path = Path(path)
        if path.suffix != ".npz":  # as np.savez names it
            path = path.with_name(path.name + ".npz")
        arrays = {k: getattr(self, k) for k in _ROUND_FIELDS + _EVAL_FIELDS}
        meta = json.dumps({"config": self.config, "status": self.status})
        for key in ("num_train_samples", "num_test_samples", "final_params"):
            val = getattr(self, key)
            if val is not None:
                arrays[key] = np.asarray(val)
        for key, val in arrays.items():
            if val.dtype.hasobject:
                raise TypeError(f"history: {key} holds Python objects; a history holds numbers")
        write_atomically(path, lambda fh: np.savez(fh, _meta=np.array(meta), **arrays))
        return path

    @classmethod
    def load(cls, path: str | Path) -> History:
        """Read a history written by [`save`][fairagg.simulation.History.save]. Nothing is
        unpickled: a file that is no such history (a pickle, an object array, another ``.npz``) is a
        ``ValueError``."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"history: no such file: {path}")
        try:
            z = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"history: {path} is not a fairagg history ({exc})") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(f"history: {path} is not a fairagg history (not an .npz file)")
        with z:
            try:
                meta = json.loads(str(z["_meta"]))
                h = cls(
                    meta["config"],
                    z["num_train_samples"] if "num_train_samples" in z else None,
                    z["num_test_samples"] if "num_test_samples" in z else None,
                )
                h.status = str(meta["status"])
                for key in _ROUND_FIELDS + _EVAL_FIELDS:
                    h._rows[key] = list(z[key])
                if "final_params" in z:
                    h.final_params = z["final_params"]
            except (KeyError, TypeError, ValueError, zipfile.BadZipFile, OSError) as exc:
                raise ValueError(f"history: {path} is not a fairagg history ({exc})") from None
        return h


class _EvaluationSets:
    """The test and training splits checked once per dtype of the evaluated model, as
    ``FlatModel._evaluate_rows`` takes them: the evaluations of a run skip the full scans of
    ``evaluate_clients``."""

    def __init__(self, model: FlatModel, data: Any) -> None:
        self.model, self.data = model, data
        self.sets: dict[np.dtype, Any] = {}

    def evaluate(self, theta: np.ndarray):
        """Loss and accuracy of θ on every client's test and training rows, and the time taken."""
        t0 = time.perf_counter()
        p = np.ascontiguousarray(theta)
        if p.dtype not in self.sets:
            d, m = self.data, self.model
            self.sets[p.dtype] = (
                m._evaluation_set(d.X_test, d.y_test, d.test_offsets, p.dtype),
                m._evaluation_set(d.X_train, d.y_train, d.train_offsets, p.dtype),
            )
        test, train = self.sets[p.dtype]
        test_loss, test_acc = self.model._evaluate_rows(p, *test)
        train_loss, train_acc = self.model._evaluate_rows(p, *train)
        return test_acc, test_loss, train_acc, train_loss, time.perf_counter() - t0


def _history_state(h: History, rounds: int) -> dict[str, Any]:
    """The history's content after ``rounds`` rounds (a round in progress is left out)."""
    rows = {k: list(h._rows[k][:rounds]) for k in _ROUND_FIELDS}
    n_eval = sum(int(r) <= rounds for r in h._rows["eval_round"])
    n_eval = min(n_eval, *(len(h._rows[k]) for k in _EVAL_FIELDS))  # an evaluation half recorded
    rows.update({k: list(h._rows[k][:n_eval]) for k in _EVAL_FIELDS})
    return {
        "config": dict(h.config),
        "rows": rows,
        "num_train_samples": h.num_train_samples,
        "num_test_samples": h.num_test_samples,
        "final_params": h.final_params,
        "status": h.status,
    }


def _stacked(rows: list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """A field's rows as one array where they stack (the same shape and dtype), else the list."""
    if rows and all(r.shape == rows[0].shape and r.dtype == rows[0].dtype for r in rows):
        return np.stack(rows)
    return rows


def _unstacked(value: Any, key: str) -> list[np.ndarray]:
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return [np.array(r) for r in value]
    if isinstance(value, list) and all(isinstance(r, np.ndarray) for r in value):
        return value
    raise ValueError(f"its history's {key} is not a list of rows")


def _write_checkpoint(
    path: Path, payload: dict[str, Any], types: dict[str, type] | None = None
) -> None:
    """Write ``payload`` (``_Run.checkpoint``) to ``path`` as data only (arrays in an
    ``.npz``, the rest as JSON inside it), atomically: a crash at any moment leaves the old
    checkpoint or the new one."""
    hs = payload["history"]
    history = {**hs, "rows": {k: _stacked(v) for k, v in hs["rows"].items()}}
    write_npz_tree(path, {"format": _CHECKPOINT_FORMAT, **payload, "history": history}, types)


def _checkpoint_path(checkpoint: Any) -> Path:
    if isinstance(checkpoint, bytes) or not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(
            f"checkpoint must be a file path (str or os.PathLike); got {type(checkpoint).__name__}"
        )
    if str(checkpoint) == "" or "\x00" in str(checkpoint):
        raise ValueError(f"checkpoint must be a file path; got {str(checkpoint)!r}")
    return Path(checkpoint)


def load_checkpoint(checkpoint: str | Path, *, state_types: Sequence[type] = ()) -> dict[str, Any]:
    """Read a checkpoint written by [`simulate`][fairagg.simulation.simulate] (``checkpoint=``): a
    dict with ``round`` (the rounds completed), ``config``, ``params``, ``state``, ``counts`` and
    ``history`` (a [`History`][fairagg.simulation.History]).

    A checkpoint is data only, and reading one runs no code whoever made it: its arrays are
    read with ``np.load(..., allow_pickle=False)``, everything else is JSON, and the rule's
    state is rebuilt only as one of fairagg's own state types or of ``state_types``.

    Parameters
    ----------
    checkpoint : str or Path
        The file.
    state_types : sequence of NamedTuple classes, optional
        The NamedTuple types of your own rule's state (fairagg's own are always known):
        [`simulate`][fairagg.simulation.simulate] passes those of the state its rule's ``init``
        returns. A type is rebuilt from field values only; nothing is imported by name.

    Raises
    ------
    FileNotFoundError
        When there is no such file.
    ValueError
        When the file is not a checkpoint of this fairagg: a pickle (older versions wrote
        pickles; they are never unpickled), an object array, another type of state, or a file
        damaged or made by something else. The message says which.
    """
    path = _checkpoint_path(checkpoint)
    extra = tuple(state_types)
    bad = [t for t in extra if not (isinstance(t, type) and hasattr(t, "_fields"))]
    if bad:
        raise TypeError(f"state_types must be NamedTuple classes; got {bad[0]!r}")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint: no such file: {path}")
    try:
        payload = read_npz_tree(path, {**STATE_TYPES, **{_type_name(t): t for t in extra}})
        if not isinstance(payload, dict) or payload.get("format") != _CHECKPOINT_FORMAT:
            raise ValueError("it does not say it is one")
        if payload.get("version") != _CHECKPOINT_VERSION:
            raise ValueError(
                f"it is of version {payload.get('version')!r}, not {_CHECKPOINT_VERSION}"
            )
        hs = payload["history"]
        if not isinstance(hs, dict) or not isinstance(hs.get("rows"), dict):
            raise ValueError("its history is not a dict of rows")
        if set(hs["rows"]) != set(_ROUND_FIELDS + _EVAL_FIELDS):
            raise ValueError("its history's fields are not a History's")
        h = History(hs["config"], hs["num_train_samples"], hs["num_test_samples"])
        h._rows = {k: _unstacked(hs["rows"][k], k) for k in _ROUND_FIELDS + _EVAL_FIELDS}
        h.final_params, h.status = hs["final_params"], str(hs["status"])
        done = payload["round"]
        if type(done) is not int or done != len(h._rows["round"]):
            raise ValueError("its round is not the number of rounds its history holds")
        _check_saved_run(payload, h)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint: {path} is not a fairagg checkpoint ({exc})") from None
    payload.pop("format")
    return {**payload, "history": h}


def _check_saved_run(payload: dict[str, Any], h: History) -> None:
    """Refuse a checkpoint whose parts do not fit together: its parameters, counts and history
    against each other and against its config (sizes, dtypes, finite values), so that a damaged
    file is refused when read, never met halfway through a resumed run."""
    config, done = payload["config"], payload["round"]
    if not isinstance(config, dict):
        raise ValueError("its config is not a dict")
    sizes = {}
    for key in ("num_clients", "clients_per_round", "rounds", "eval_every"):
        v = config.get(key)
        if type(v) is not int or v < 1:
            raise ValueError(f"its config's {key} is not an integer >= 1")
        sizes[key] = v
    K, m = sizes["num_clients"], sizes["clients_per_round"]
    if m > K or done > sizes["rounds"]:
        raise ValueError("its config's clients_per_round, num_clients and rounds do not agree")

    def array(value: Any, what: str, kinds: str, shape: tuple[int, ...], finite=True) -> Any:
        if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
            kind = {"f": "real", "iu": "integer"}.get(kinds, kinds)
            raise ValueError(f"its {what} is not a {kind} array")
        if value.shape != shape:
            raise ValueError(f"its {what} has shape {value.shape}, not {shape}")
        if finite and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ValueError(f"its {what} holds NaN or infinity")
        return value

    params = payload["params"]
    if not isinstance(params, np.ndarray) or params.dtype not in (np.float32, np.float64):
        raise ValueError("its params is not a float32 or float64 array")
    if params.ndim != 1 or not params.size:
        raise ValueError(f"its params has shape {params.shape}, not (d,) with d >= 1")
    array(params, "params", "f", params.shape)
    counts = array(payload["counts"], "counts", "iu", (K,))
    if h.final_params is not None:
        array(h.final_params, "history's final_params", "f", params.shape)
    for key, n in (("num_train_samples", h.num_train_samples), ("num_test_samples",
                                                                h.num_test_samples)):  # fmt: skip
        if n is None or n.shape != (K,):
            raise ValueError(f"its history's {key} does not have {K} entries")
    rows = h._rows
    for key in _ROUND_FIELDS:
        if len(rows[key]) != done:
            raise ValueError(f"its history's {key} has {len(rows[key])} rows, not {done}")
    E = len(rows["eval_round"])
    for key in _EVAL_FIELDS:
        if len(rows[key]) != E:
            raise ValueError(f"its history's {key} has {len(rows[key])} rows, not {E}")
    for t in range(done):
        array(rows["round"][t], "history's round", "iu", ())
        if int(rows["round"][t]) != t + 1:
            raise ValueError("its history's rounds are not 1, 2, ...")
        S = array(rows["selected"][t], "history's selected", "iu", (m,))
        if S.size and (S.min() < 0 or S.max() >= K or np.unique(S).size != m):
            raise ValueError(f"its history's selected clients are not {m} of 0..{K - 1}")
        array(rows["weights"][t], "history's weights", "f", (m,))
        array(rows["reported_losses"][t], "history's reported_losses", "f", (m,), finite=False)
        array(rows["time_local"][t], "history's time_local", "f", ())
        array(rows["time_aggregate"][t], "history's time_aggregate", "f", ())
    evals = [int(array(r, "history's eval_round", "iu", ())) for r in rows["eval_round"]]
    if evals[:1] != [0] or np.any(np.diff(evals) <= 0) or evals[-1] > done:
        raise ValueError(f"its history's eval_round is not rising from 0 to at most {done}")
    for key in ("test_accuracy", "test_loss", "train_accuracy", "train_loss"):
        for r in rows[key]:  # a loss may be infinite (log 0), an accuracy never
            array(r, f"history's {key}", "f", (K,), finite="accuracy" in key)
    for r in rows["time_eval"]:
        array(r, "history's time_eval", "f", ())
    if done and not np.array_equal(np.bincount(np.concatenate(rows["selected"]), minlength=K),
                                   counts):  # fmt: skip
        raise ValueError("its counts are not the participations its history records")
    if not done and np.any(counts):
        raise ValueError("its counts are not the participations its history records")


#: Configuration entries a resumed run may change: the number of rounds only.
_RESUMABLE = frozenset({"rounds"})


def _same(a: Any, b: Any) -> bool:
    """Equal settings: arrays element by element, containers item by item, NaN equal to NaN."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if np.shape(a) != np.shape(b):
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:  # no NaN in strings
            return bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b) or (a != a and b != b)  # noqa: PLR0124 - NaN


def _rule_on_backend(rule: Any, backend: Any, argname: str = "rule") -> Rule:
    """The rule an experiment runs: a registry name built on ``backend`` (``"auto"``: see
    [`resolve_backend`][fairagg.kernels.resolve_backend]) with its default hyper-parameters, or
    a [`Rule`][fairagg.types.Rule] as it was built. A ``backend`` other than ``"auto"`` beside a
    built rule must be the backend it was built on (``ValueError`` otherwise): it cannot be
    rebuilt on another without its factory's arguments."""
    if isinstance(backend, str) and backend == "auto":
        resolved = None
    else:
        check_choice(backend, "backend", BACKEND_CHOICES)
        resolved = resolve_backend(backend)
    if isinstance(rule, str):
        name = check_rule_name(rule, argname)  # every registered rule takes backend= (tested)
        return make_rule(name, backend=resolved or resolve_backend("auto"))
    if not isinstance(rule, Rule):
        raise TypeError(
            f"{argname} must be a fairagg.Rule or a registry name; got {type(rule).__name__}"
        )
    built = rule.hyperparams.get("backend") if isinstance(rule.hyperparams, dict) else None
    if resolved is not None and built != resolved:
        raise ValueError(
            f"backend={backend!r} cannot change a built rule: {argname} {rule.name!r} was built "
            f"with backend={built!r}; build it on the backend you want "
            f"(make_rule({rule.name!r}, backend={resolved!r}, ...)), or pass its name"
        )
    return rule


def _prepared(
    rule: Any, model: Any, data: Any, *, rounds: Any, clients_per_round: Any, epochs: Any,
    batch_size: Any, lr: Any, momentum: Any, prox_mu: Any, sampling: Any, seed: Any,
    eval_every: Any, params: Any, backend: Any = "auto",
) -> tuple[Rule, Any, np.ndarray, dict[str, Any], TrainingSettings]:  # fmt: skip
    """The arguments of [`simulate`][fairagg.simulation.simulate] checked, each once: the rule,
    the data, θ⁰, the run's configuration (what a checkpoint records) and the clients' training
    settings."""
    rule = _rule_on_backend(rule, backend)
    if not isinstance(model, FlatModel):
        raise TypeError(f"model must be a fairagg.models.FlatModel; got {type(model).__name__}")
    data = check_federated_data(data)
    training = TrainingSettings(
        rule.local, rule.name, epochs=epochs, batch_size=batch_size, lr=lr, momentum=momentum,
        prox_mu=prox_mu,
    )  # fmt: skip
    K = int(np.asarray(data.train_offsets).size - 1)
    T = check_int(rounds, "rounds", low=1)
    m = check_int(clients_per_round, "clients_per_round", low=1, high=K)
    check_choice(sampling, "sampling", SAMPLING_SCHEMES)
    eval_every = check_int(eval_every, "eval_every", low=1)
    seed = check_int(seed, "seed", low=0)
    if data.n_features != model.n_features or data.n_classes != model.n_classes:
        raise ValueError(
            f"model expects {model.n_features} features and {model.n_classes} classes; the data "
            f"has {data.n_features} and {data.n_classes}"
        )
    theta = model.init_params(seed) if params is None else model._check_params(params).copy()
    config = {
        "rule": rule.name,
        "rule_hyperparams": dict(rule.hyperparams),
        "model": repr(model),
        "data": getattr(data, "name", ""),
        "num_clients": K,
        "rounds": T,
        "clients_per_round": m,
        "epochs": training.epochs,
        "batch_size": training.batch_size,
        "lr": training.lr,
        "momentum": training.momentum,
        "prox_mu": training.prox_mu,
        "sampling": sampling,
        "seed": seed,
        "eval_every": eval_every,
        "local": training.local._asdict(),
    }
    return rule, data, theta, config, training


def _check_restorable(saved: dict[str, Any], config: dict[str, Any], theta: np.ndarray) -> None:
    """Refuse a checkpoint (``load_checkpoint``'s dict) that a run of ``config`` starting from
    ``theta`` cannot continue: other settings than ``rounds``, more rounds than it runs,
    parameters of another size or dtype."""
    changed = sorted(
        k
        for k in set(config) | set(saved["config"])
        if k not in _RESUMABLE and not _same(saved["config"].get(k), config.get(k))
    )
    if changed:
        raise ValueError(
            f"resume: this run's settings differ from the checkpoint's in "
            f"{', '.join(changed)} (only rounds may change)"
        )
    done, T = int(saved["round"]), config["rounds"]
    if done > T:
        raise ValueError(f"resume: the checkpoint holds {done} rounds; rounds={T} is fewer")
    if np.shape(saved["params"]) != theta.shape:
        raise ValueError("resume: the checkpoint's parameters do not fit this model")
    if saved["params"].dtype != theta.dtype:
        raise ValueError(
            f"resume: the checkpoint's parameters are {saved['params'].dtype}; this run's are "
            f"{theta.dtype}"
        )


def _check_resume(saved: dict[str, Any], rule: Any, model: Any, data: Any, **settings: Any) -> None:
    """Raise the ``ValueError`` that ``simulate(rule, model, data, **settings, resume=True)``
    would raise on restoring ``saved`` (a [`load_checkpoint`][fairagg.simulation.load_checkpoint]
    dict), before anything is trained or written: the command line checks ``--resume`` with it."""
    settings.setdefault("params", None)
    _, _, theta, config, _ = _prepared(rule, model, data, **settings)
    _check_restorable(saved, config, theta)


def simulate(
    rule: Rule | str,
    model: FlatModel,
    data: Any,
    *,
    rounds: int,
    clients_per_round: int,
    epochs: int = 1,
    batch_size: int = 10,
    lr: float = 0.01,
    momentum: float | None = None,
    prox_mu: float = 0.0,
    sampling: str = "uniform",
    seed: int = 0,
    eval_every: int = 1,
    params: np.ndarray | None = None,
    history: History | None = None,
    callback: Callable[[History], None] | None = None,
    progress: bool = False,
    parallel: bool = True,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    backend: str = "auto",
) -> History:
    """Run ``rounds`` rounds of federated training with ``rule``.

    Parameters
    ----------
    rule : Rule or str
        A rule, or a registry name (built with default hyper-parameters on ``backend``).
    model : fairagg.models.FlatModel
    data : fairagg.data.FederatedData
    rounds : int
        T ≥ 1 aggregation rounds.
    clients_per_round : int
        m in [1, K] clients sampled each round without replacement.
    epochs, batch_size, lr, momentum, prox_mu
        Local training (see [`fairagg.local.train_clients`][fairagg.local.train_clients]).
        ``momentum=None`` (the default) takes the client momentum the rule prescribes
        (``rule.local.momentum``: FedFa's), or 0; a value that contradicts the rule's raises
        ``ValueError``. What the clients compute is
        the rule's [`LocalSpec`][fairagg.types.LocalSpec]: local training (on PropFair's surrogate
        for ``propfair``), or, for the SGD-type rules (``qfedsgd``, ``afl``), one gradient per
        client ([`fairagg.local.client_gradients`][fairagg.local.client_gradients]), for which these
        settings are unused.
    sampling : {"uniform", "proportional"}
        Uniform, or ∝ n_k (see
        [`fairagg.sampling.sample_clients`][fairagg.sampling.sample_clients]).
    seed : int
        Seeds sampling, shuffles and the initial parameters.
    eval_every : int
        Evaluate every client's train and test split every this many rounds (round 0, the
        initial model, and the last round are always evaluated).
    params : ndarray, shape (d,), optional
        Initial parameters (default ``model.init_params(seed)``); float32 runs in float32.
    history : History, optional
        Filled in place; pass one to keep partial results if the run fails.
    callback : callable, optional
        Called with the history after every round.
    progress : bool
        Show a progress bar on standard error and, if the run compiles fairagg's Numba CPU
        kernels (the first run on a machine: tens of seconds), a line saying so, once per
        process.
    parallel : bool
        Train the selected clients in parallel threads.
    checkpoint : str or Path, optional
        A file to keep the run's complete state in (written atomically after a round, at most
        [`CHECKPOINT_OVERHEAD`][fairagg.simulation.CHECKPOINT_OVERHEAD] of the run's time, after the
        last round and when the run stops on an error or Ctrl-C).
    resume : bool
        Continue from ``checkpoint`` if it exists (a run finished, interrupted or killed),
        possibly to more ``rounds``: the result equals, bit for bit, a run of ``rounds``
        rounds that never stopped. Every other setting must be the checkpoint's
        (``ValueError`` otherwise), and so must ``model``, ``data`` and ``params``, which
        the checkpoint cannot check beyond their shapes.
    backend : {"auto", "numpy", "numba", "cuda"}
        The backend of a rule given by name. ``"auto"`` (the default) is the fastest backend
        proven equal to the NumPy specification here (``"numba"`` on a CPU, ``"cuda"`` with a
        GPU; [`resolve_backend`][fairagg.kernels.resolve_backend]); its results equal a
        ``"numpy"`` run's to round-off, with the bound each rule's tests check (the docs'
        Conventions page, "Backends"), not bit for bit. A built ``Rule`` keeps its own
        backend; another backend named beside one is a ``ValueError``.

    Returns
    -------
    History
        ``final_params`` holds θ^T, or the model the rule reports in ``info["model"]`` (AFL's
        average of its iterates), which is also the model evaluated.

    Raises
    ------
    FloatingPointError
        When local training or the rule produces non-finite numbers (diverged: lower ``lr``).
    """
    rule, data, theta, config, training = _prepared(
        rule, model, data, rounds=rounds, clients_per_round=clients_per_round, epochs=epochs,
        batch_size=batch_size, lr=lr, momentum=momentum, prox_mu=prox_mu, sampling=sampling,
        seed=seed, eval_every=eval_every, params=params, backend=backend,
    )  # fmt: skip
    if history is not None and not isinstance(history, History):
        raise TypeError(f"history must be a fairagg.History or None; got {type(history).__name__}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None; got {type(callback).__name__}")
    history = History() if history is None else history
    saver = _Checkpoints(checkpoint, resume)
    run = _Run(rule, model, data, config, history, training, parallel=parallel)
    with _CompileNotice() if progress else contextlib.nullcontext():
        return _run_rounds(run, saver, theta, progress, callback)


def _run_rounds(
    run: _Run,
    saver: _Checkpoints,
    theta: np.ndarray,
    progress: bool,
    callback: Callable[[History], None] | None,
) -> History:
    """``simulate``'s rounds: begin or resume ``run``, then round after round with the progress
    bar, the callback and the checkpoints; on any exception the history keeps the completed
    rounds and says why it stopped."""
    history = run.history
    saver.start(run, theta)  # begin at round 0, or restore the checkpoint's round
    bar = _ProgressBar(run) if progress else None
    try:
        saver.first(run)
        for t in range(run.done, run.T):
            run.round(t)  # sample, train, report, aggregate, record
            if bar is not None:
                bar.update()
            if callback is not None:  # before the checkpoint that says the round exists
                callback(history)
            saver.after_round(run)
        history.status = "completed"
        saver.last(run)
    except BaseException as exc:
        # the history and the checkpoint hold the same rounds: those completed (a round
        # recorded in part when the run stopped is left out)
        run.truncate_history()
        history.status = f"stopped: {type(exc).__name__}: {exc}"
        saver.stopped(run, exc)
        if hasattr(exc, "add_note"):
            exc.add_note(f"fairagg: the history keeps the {history.num_rounds} completed rounds")
        exc.history = history  # type: ignore[attr-defined]
        raise
    finally:
        if bar is not None:
            bar.close()
    return history


class _Checkpoints:
    """Where and when a run keeps its checkpoint (``checkpoint=None``: never): after a round
    once the run has gone on for the last write's time / CHECKPOINT_OVERHEAD, after the last
    round, and when the run stops."""

    def __init__(self, checkpoint: Any, resume: Any) -> None:
        self.path = None if checkpoint is None else _checkpoint_path(checkpoint)
        if not isinstance(resume, (bool, np.bool_)):
            raise TypeError(f"resume must be a bool; got {type(resume).__name__}")
        if resume and self.path is None:
            raise ValueError("resume=True needs checkpoint=, the file to continue from")
        if self.path is not None and not self.path.parent.is_dir():
            raise ValueError(f"checkpoint: the folder {self.path.parent} does not exist")
        if self.path is not None and self.path.is_dir():
            raise ValueError(f"checkpoint: {self.path} is a folder; name a file in it")
        self.resume = bool(resume)
        self.types: dict[str, type] | None = None
        self.cost, self.last_save = 0.0, time.perf_counter()

    def start(self, run: _Run, theta: np.ndarray) -> None:
        """Begin ``run`` from θ⁰, or restore it from the checkpoint when resuming one that
        exists; then check that the rule's state is one a checkpoint can hold."""
        # the rule's own NamedTuple state types (a user's rule may have its own) are what a
        # checkpoint may rebuild besides fairagg's: found in the state init makes in this process
        if self.path is not None:
            self.types = known_state_types(run.rule.init(theta, run.K))
        if self.resume and self.path is not None and self.path.exists():
            saved = load_checkpoint(self.path, state_types=tuple((self.types or {}).values()))
            _check_restorable(saved, run.config, theta)
            run.restore(saved)
        else:
            run.begin(theta)
        run.history.config.update(run.config)
        h, d = run.history, run.data
        h.num_train_samples = np.diff(np.asarray(d.train_offsets, dtype=np.int64))
        h.num_test_samples = np.diff(np.asarray(d.test_offsets, dtype=np.int64))
        if self.path is not None:  # a state a checkpoint cannot hold fails now, not after a round
            try:
                encode(run.state, {}, "state", self.types)
            except NotData as exc:
                raise TypeError(
                    f"checkpoint: rule {run.rule.name!r}'s {exc}; a checkpoint is data only (no "
                    "pickles) and holds arrays, numbers, strings, lists, tuples, dicts with str "
                    "keys and NamedTuples of these: give the rule such a state, or run it "
                    "without checkpoint="
                ) from None
        self.cost, self.last_save = 0.0, time.perf_counter()

    def save(self, run: _Run) -> None:
        assert self.path is not None  # save is called only for a run with a checkpoint
        t0 = time.perf_counter()
        _write_checkpoint(self.path, run.checkpoint(), self.types)
        self.cost, self.last_save = time.perf_counter() - t0, time.perf_counter()

    def first(self, run: _Run) -> None:
        """The checkpoint of round 0, for a run that begins."""
        if self.path is not None and run.done == 0:
            self.save(run)

    def after_round(self, run: _Run) -> None:
        if (
            self.path is not None
            and run.done < run.T  # the last round's is written by last(), with the status
            and (time.perf_counter() - self.last_save) * CHECKPOINT_OVERHEAD >= self.cost
        ):
            self.save(run)

    def last(self, run: _Run) -> None:
        if self.path is not None:
            self.save(run)

    def stopped(self, run: _Run, exc: BaseException) -> None:
        """The state of the last completed round, written when the run stops on ``exc``; a
        failure to write it is a note on ``exc``, which stays the error raised."""
        if self.path is None:
            return
        try:
            self.save(run)
        except Exception as err:  # noqa: BLE001 - keep the original error
            if hasattr(exc, "add_note"):
                exc.add_note(f"fairagg: the checkpoint could not be written: {err}")


class _CompileNotice(numba_event.Listener):
    """While a run shows a progress bar (a context manager around it, listening to Numba's
    compile events): says once per process on standard error, as the first of fairagg's Numba
    CPU kernels starts compiling, why the run is slow to start (a run that finds them in Numba's
    cache compiles nothing and says nothing). numba-cuda reports its kernels' compilations
    through a registry of its own, not listened to here: on a GPU the line comes from the CPU
    kernels (local training), which every run compiles too."""

    MESSAGE = (
        "fairagg: compiling its Numba kernels for this machine (the first run after install; "
        "this takes tens of seconds, and later runs load them from Numba's cache)"
    )
    said = False  # in this process
    _lock = threading.Lock()

    def __enter__(self) -> _CompileNotice:
        numba_event.register("numba:compile", self)
        return self

    def __exit__(self, *exc: object) -> None:
        numba_event.unregister("numba:compile", self)

    def on_start(self, event: Any) -> None:
        """Numba starts a compilation. This runs inside it: a failure to write the line (a
        closed or missing stderr) is dropped, never raised into the compilation, which would
        fail the run."""
        fn = getattr(event.data.get("dispatcher"), "py_func", None)
        if not (getattr(fn, "__module__", "") or "").startswith("fairagg"):
            return
        with _CompileNotice._lock:
            if _CompileNotice.said:
                return
            _CompileNotice.said = True
        try:
            from tqdm.auto import tqdm

            tqdm.write(self.MESSAGE, file=sys.stderr)
        except Exception:  # noqa: BLE001 - a message only
            pass

    def on_end(self, event: Any) -> None:
        pass


class _ProgressBar:
    """A progress bar on standard error showing the last evaluation's mean test accuracy."""

    def __init__(self, run: _Run) -> None:
        from tqdm.auto import tqdm

        self.history = run.history
        self.bar = tqdm(total=run.T, initial=run.done, desc=run.rule.name, unit="round", leave=True)

    def update(self) -> None:
        n_test = self.history.num_test_samples
        self.bar.update(1)
        acc = self.history.latest("test_accuracy") @ n_test / n_test.sum()
        self.bar.set_postfix(acc=f"{100.0 * acc:.1f}%", refresh=False)

    def close(self) -> None:
        self.bar.close()


class _Run:
    """The round loop of one simulation. Its state, exactly what a checkpoint holds, is the
    rounds done, θ^t, the rule's state and the clients' participation counts (its
    [`ServerRound`][fairagg._round.ServerRound]), the model the rule reported last and the
    history; everything random in round t is drawn from (seed, t)."""

    def __init__(self, rule, model, data, config, history, training, *, parallel) -> None:
        self.rule, self.model, self.data, self.training = rule, model, data, training
        self.config, self.history, self.parallel = config, history, parallel
        self.K, self.m = config["num_clients"], config["clients_per_round"]
        self.T, self.seed, self.eval_every = config["rounds"], config["seed"], config["eval_every"]
        self.n_train = np.diff(np.asarray(data.train_offsets, dtype=np.int64))
        self.server = ServerRound(rule, self.K, training, FloatingPointError)
        self.done = 0
        # set by begin() or restore(), before any round
        self.params: np.ndarray = np.empty(0)
        self.reported: np.ndarray = np.empty(0)
        self.deltas: np.ndarray | None = None  # one (m, d) buffer, refilled every round
        self.evaluation = _EvaluationSets(model, data)

    @property
    def state(self) -> Any:
        """The rule's state after the last completed round."""
        return self.server.state

    # --- the state ----------------------------------------------------------------------------
    def begin(self, theta: np.ndarray) -> None:
        self.params = theta
        self.server.begin(theta)
        self.history.record_eval(0, *self.evaluation.evaluate(theta))
        self.reported = self.history.final_params = theta.copy()
        self.deltas = np.empty((self.m, theta.size), dtype=theta.dtype)

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue from ``saved``, which ``_check_restorable`` accepted."""
        done = int(saved["round"])
        old = saved["history"]
        # the last round of the shorter run was evaluated because it was last: drop it if a
        # run of T rounds would not evaluate there
        if done < self.T and done % self.eval_every and old._rows["eval_round"]:
            if int(old._rows["eval_round"][-1]) == done:
                for k in _EVAL_FIELDS:
                    old._rows[k].pop()
        self.done, self.params = done, saved["params"]
        self.server.restore(saved["state"], saved["counts"])
        self.history._rows, self.history.status = old._rows, "running"
        self.reported = self.history.final_params = old.final_params
        self.deltas = np.empty((self.m, self.params.size), dtype=self.params.dtype)

    def truncate_history(self) -> None:
        """Cut the history back to the rounds completed (a round recorded in part when the run
        stopped is left out), as the checkpoint holds it."""
        kept = _history_state(self.history, self.done)["rows"]
        self.history._rows = kept
        self.history.final_params = self.reported

    def checkpoint(self) -> dict[str, Any]:
        return {
            "version": _CHECKPOINT_VERSION,
            "round": self.done,
            "config": dict(self.config),
            "params": self.params,
            "state": self.server.state,
            "counts": self.server.participations.copy(),
            "history": {
                **_history_state(self.history, self.done),
                "final_params": self.reported,
            },
        }

    # --- one round (the papers' Algorithm 1) --------------------------------------------------
    def round(self, t: int) -> None:
        S = self.sample(t)
        t0 = time.perf_counter()
        local, accuracies = self.train(S, t)
        t1 = time.perf_counter()
        reports = self.report(S, t, local, accuracies)
        agg, reported = self.aggregate(reports, t)
        t2 = time.perf_counter()
        # the model the rule reports (AFL: the average of its iterates) is what is evaluated
        self.record(t, S, agg, local.losses, reported, t1 - t0, t2 - t1)
        # the state moves to round t + 1 only once the round is recorded (a failure before
        # leaves the state, and a checkpoint written then, at round t)
        self.server.commit(reports, agg)
        self.done, self.params, self.reported = t + 1, agg.params, reported

    def sample(self, t: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, SAMPLING_STREAM, t])
        return sample_clients(
            self.K, self.m, rng, scheme=self.config["sampling"], num_samples=self.n_train
        )

    def train(self, S: np.ndarray, t: int):
        """Local training (or one gradient) of the clients S from θ^t into ``self.deltas``."""
        s, spec, theta, deltas = self.training, self.training.local, self.params, self.deltas
        assert deltas is not None  # the rounds' buffer, made by begin() or restore()
        if s.gradients:
            local = client_gradients(
                self.model, theta, self.data, S, batch_size=spec.gradient_batch_size,
                seed=self.seed, round_index=t, out=deltas,
            )  # fmt: skip
        else:
            pm, pe, ph = s.propfair
            local = train_clients(
                self.model, theta, self.data, S, epochs=s.epochs, batch_size=s.batch_size,
                lr=s.lr, momentum=s.momentum, prox_mu=s.prox_mu, seed=self.seed, round_index=t,
                out=deltas, parallel=self.parallel, propfair_m=pm or None, propfair_epsilon=pe,
                propfair_huber=ph,
            )  # fmt: skip
        accuracies = local.accuracies
        if spec.accuracy_source == "local":
            accuracies = trained_accuracies(self.model, theta, deltas, self.data, S)
        # deltas.sum() is a one-pass witness (no (m, d) temporary): any NaN or infinity makes it
        # non-finite; only then, or on an overflow of the sum, is every entry checked.
        finite = np.all(np.isfinite(local.losses)) and (
            np.isfinite(deltas.sum()) or np.all(np.isfinite(deltas))
        )
        if not finite:
            bad = S[~np.isfinite(deltas).all(axis=1) | ~np.isfinite(local.losses)]
            what = "gradients" if s.gradients else "parameters"
            raise FloatingPointError(
                f"local training diverged in round {t + 1}: clients {bad.tolist()} produced "
                f"non-finite {what} or losses (lower lr, currently {s.lr})"
            )
        return local, accuracies

    def report(self, S, t, local, accuracies) -> RoundReports:
        assert self.deltas is not None  # the rounds' buffer, made by begin() or restore()
        return self.server.reports(self.deltas, self.n_train[S], local.losses, accuracies, S, t)

    def aggregate(self, reports: RoundReports, t: int) -> tuple[Aggregate, np.ndarray]:
        """The rule's step on round t's reports (``FloatingPointError`` if it diverges)."""
        return self.server.step(self.params, reports)

    def record(self, t, S, agg, losses, reported, time_local, time_aggregate) -> None:
        h = self.history
        h.record_round(t + 1, S, agg.info["weights"], losses, time_local, time_aggregate)
        h.final_params = reported  # rules return new arrays; nothing mutates them
        if (t + 1) % self.eval_every == 0 or t + 1 == self.T:
            h.record_eval(t + 1, *self.evaluation.evaluate(reported))
