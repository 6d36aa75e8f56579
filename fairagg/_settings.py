"""The settings of one experiment: frozen objects, validated once where they are made.

``fairagg run`` and ``fairagg compare`` build an ``ExperimentSettings`` from their flags and
``--config`` file, one schema for both, before anything is written. An invalid value raises
``SettingsValueError`` or ``SettingsTypeError`` (a ``ValueError`` or ``TypeError``) that carries
the setting's key, so that the command line can say which flag or config entry was wrong.

``TrainingSettings`` is the part that [`simulate`][fairagg.simulation.simulate] and
[`FairaggStrategy`][fairagg.flower.FairaggStrategy] share: what the selected clients compute each
round (the rule's [`LocalSpec`][fairagg.types.LocalSpec] with the caller's epochs, batch size,
lr, momentum and proximal term). Each of them builds it once from its arguments, with the
messages its arguments have always had, and hands it to the round and the clients; nothing
downstream of it checks or renames a value again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._checks import check_choice, check_count, check_int, check_real
from .kernels import BACKEND_CHOICES, resolve_backend
from .local import check_propfair
from .rules import RULES, make_rule
from .sampling import SAMPLING_SCHEMES
from .types import LocalSpec, check_local_spec

__all__ = [
    "ACTIVATIONS",
    "MODELS",
    "ExperimentSettings",
    "SettingsError",
    "SettingsTypeError",
    "SettingsValueError",
    "TrainingSettings",
    "check_setting",
    "rule_kwargs",
]

#: The models the command line builds (``fairagg.models.make_model``).
MODELS = ("mlp", "logistic")
#: The MLP's hidden activations.
ACTIVATIONS = ("tanh", "relu")
#: The largest count a setting may hold: sizes and counts reach NumPy as int64.
_MAX_COUNT = 2**63 - 1


class SettingsError(Exception):
    """An invalid setting: ``key`` (a field of the settings), ``item`` (for ``rule_arg``, the
    hyper-parameter's ``NAME`` or ``RULE.NAME``) and what is wrong, ``requirement``.

    ``str(exc)`` names the field as Python does; ``named()`` names it as a caller's user knows
    it (a command-line flag, a config file's entry).
    """

    def __init__(self, key: str, requirement: str, item: str | None = None) -> None:
        self.key = key
        self.item = item
        self.requirement = requirement
        super().__init__(self.named(key if item is None else f"{key} {item!r}"))

    def named(self, label: str) -> str:
        """The message with the setting called ``label``."""
        sep = ": " if self.item is not None else " "  # a rule's own message follows its name
        return f"{label}{sep}{self.requirement}"


class SettingsValueError(SettingsError, ValueError):
    """A setting of the right type with a value out of range or not allowed."""


class SettingsTypeError(SettingsError, TypeError):
    """A setting of the wrong type."""


def _raised(key: str, check: Callable[..., Any], value: Any, **kw: Any) -> Any:
    """``check(value, key, **kw)`` with its error re-raised as a settings error for ``key``."""
    try:
        return check(value, key, **kw)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        text = text[len(key) + 1 :] if text.startswith(f"{key} ") else f"is invalid: {text}"
        cls = SettingsTypeError if isinstance(exc, TypeError) else SettingsValueError
        raise cls(key, text) from None


def _count(low: int) -> Callable[[Any, str], int]:
    def check(value: Any, key: str) -> int:
        v = _raised(key, check_int, value)
        if v < low:
            raise SettingsValueError(key, f"must be at least {low}; got {v}")
        if v > _MAX_COUNT:
            raise SettingsValueError(key, f"must be at most 2**63 - 1; got {v}")
        return v

    return check


def _seed(value: Any, key: str) -> int:
    return _raised(key, check_int, value, low=0)


def _real(low: float, *, low_open: bool = False, high: float | None = None, high_open=False):
    def check(value: Any, key: str) -> float:
        return _raised(
            key, check_real, value, low=low, low_open=low_open, high=high, high_open=high_open
        )

    return check


def _choice(choices: Sequence[str]) -> Callable[[Any, str], str]:
    def check(value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise SettingsTypeError(key, f"must be a str; got {type(value).__name__}")
        return _raised(key, check_choice, value, choices=tuple(choices))

    return check


def _momentum(value: Any, key: str) -> float | None:
    if value is None:
        return None
    return _raised(key, check_real, value, low=0.0, high=1.0, high_open=True)


def _backend(value: Any, key: str) -> str:
    """A backend choice that runs here (``"cuda"`` needs a GPU numba can use)."""
    value = _choice(BACKEND_CHOICES)(value, key)
    try:
        resolve_backend(value)
    except ValueError as exc:
        raise SettingsValueError(key, f"cannot be {value!r} here: {exc}") from None
    return value


def _data(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise SettingsTypeError(key, f"must be a data spec (a str); got {type(value).__name__}")
    if not value.strip():
        raise SettingsValueError(key, "must be a data spec; got an empty one")
    return value


def _rule_arg(value: Any, key: str) -> tuple[tuple[str, Any], ...]:
    """``{NAME: VALUE}`` or ``[(NAME, VALUE), ...]``; NAME is a hyper-parameter, or
    ``RULE.NAME`` for one registered rule only."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 for p in value
    ):
        pairs = [tuple(p) for p in value]
    else:
        raise SettingsTypeError(
            key,
            "must map hyper-parameter names to values ({NAME: VALUE}, or RULE.NAME for one "
            f"rule); got {type(value).__name__}",
        )
    for name, _ in pairs:
        if not isinstance(name, str) or not name:
            raise SettingsTypeError(key, f"names must be non-empty str; got {name!r}")
        scope, dot, param = name.rpartition(".")
        if dot and (scope not in RULES or not param):
            raise SettingsValueError(
                key, f"{scope!r} is not a registered rule ({', '.join(RULES)})", name
            )
        if (param if dot else name) == "backend":
            raise SettingsValueError(
                key,
                "the backend is not a hyper-parameter: it is its own setting (--backend)",
                name,
            )
    return tuple((str(n), v) for n, v in pairs)


#: One check per field: ``check(value, key) -> normalised value`` (int, float, str, tuple).
_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "rule": _choice(tuple(RULES)),
    "rule_arg": _rule_arg,
    "data": _data,
    "clients": _count(1),
    "test_fraction": _real(0.0, low_open=True, high=1.0, high_open=True),
    "data_seed": _seed,
    "model": _choice(MODELS),
    "hidden": _count(1),
    "activation": _choice(ACTIVATIONS),
    "l2": _real(0.0),
    "rounds": _count(1),
    "epochs": _count(1),
    "batch": _count(1),
    "lr": _real(0.0, low_open=True),
    "momentum": _momentum,
    "prox_mu": _real(0.0),
    "sampling": _choice(SAMPLING_SCHEMES),
    "eval_every": _count(1),
    "clients_per_round": _count(1),
    "seed": _seed,
    "backend": _backend,
}


def check_setting(key: str, value: Any) -> Any:
    """Check one setting on its own (its type and range) and return it normalised.

    Parameters
    ----------
    key : str
        A field of ``ExperimentSettings``.
    value : object
        Its value, as a flag or a JSON config file gives it.

    Returns
    -------
    object
        The value as the settings hold it (an int, float, str, None or tuple of pairs).

    Raises
    ------
    SettingsTypeError, SettingsValueError
        If ``value`` is not allowed for ``key``; ``key`` not a field is a ``SettingsValueError``
        too.
    """
    if key not in _CHECKS:
        raise SettingsValueError(key, f"is not a setting (settings: {', '.join(_CHECKS)})")
    return _CHECKS[key](value, key)


def rule_kwargs(pairs: Sequence[tuple[str, Any]], rule: str) -> dict[str, Any]:
    """The hyper-parameters of ``rule`` among ``pairs``: ``NAME`` goes to every rule,
    ``RULE.NAME`` only to RULE; where two give one hyper-parameter, the later one holds."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        scope, dot, name = key.rpartition(".")
        if not dot:
            out[key] = value
        elif scope == rule:
            out[name] = value
    return out


@dataclass(frozen=True)
class ExperimentSettings:
    """The settings of one run of ``fairagg run`` or one run of ``fairagg compare``.

    Every field is checked, and normalised (ints as ``int``, reals as ``float``, ``rule_arg``
    as a tuple of pairs), when the object is made; so are the constraints between fields
    (``clients_per_round`` against ``clients`` and the rule; the hyper-parameters, by building
    the rule; ``momentum`` against the rule's own client momentum). The defaults are
    ``fairagg run``'s: the FairAvg paper's Synthetic set-up.

    Attributes
    ----------
    rule : str
        A registered rule (``fairagg.RULES``).
    rule_arg : tuple of (str, object)
        Hyper-parameters: ``(NAME, VALUE)`` for every rule, ``(RULE.NAME, VALUE)`` for one.
    data : str
        A data spec (``fairagg.data.DATA_SPECS``; its form is checked when the data is made).
    clients, test_fraction, data_seed : int, float, int
        Number of clients K (>= 1), per-client test split in (0, 1), seed of the data (>= 0).
    model, hidden, activation, l2 : str, int, str, float
        ``"mlp"`` or ``"logistic"``, MLP width (>= 1), ``"tanh"`` or ``"relu"``, L2 penalty
        (finite, >= 0).
    rounds, epochs, batch : int
        Rounds T, local epochs F, local batch size (each >= 1).
    lr, momentum, prox_mu : float, float or None, float
        Local SGD step (finite, > 0); client momentum in [0, 1) or None (the rule's own, else
        0); FedProx μ (finite, >= 0).
    sampling : str
        ``"uniform"`` or ``"proportional"``.
    eval_every, clients_per_round, seed : int
        Evaluation period (>= 1), reporting clients K' (1 <= K' <= K; K' = K for a rule that
        needs every client), run seed (>= 0).
    backend : str
        ``"auto"`` (the default: numba on a CPU, cuda with a GPU), ``"numpy"``, ``"numba"`` or
        ``"cuda"``: the backend of the rule's aggregation
        ([`resolve_backend`][fairagg.kernels.resolve_backend]).

    Raises
    ------
    SettingsTypeError, SettingsValueError
        For the first invalid field, naming it (``exc.key``; ``exc.item`` for a
        hyper-parameter).
    """

    rule: str = "fedavg"
    rule_arg: tuple[tuple[str, Any], ...] = ()
    data: str = "synthetic:1,1"
    clients: int = 30
    test_fraction: float = 0.2
    data_seed: int = 0
    model: str = "mlp"
    hidden: int = 32
    activation: str = "tanh"
    l2: float = 0.0
    rounds: int = 200
    epochs: int = 20
    batch: int = 10
    lr: float = 0.01
    momentum: float | None = None
    prox_mu: float = 0.0
    sampling: str = "uniform"
    eval_every: int = 1
    clients_per_round: int = 10
    seed: int = 0
    backend: str = "auto"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, check_setting(f.name, getattr(self, f.name)))
        k, kpr = self.clients, self.clients_per_round
        if kpr > k:
            raise SettingsValueError(
                "clients_per_round", f"must be between 1 and the number of clients ({k}); got {kpr}"
            )
        if RULES[self.rule].full_participation and kpr != k:
            raise SettingsValueError(
                "clients_per_round",
                f"must equal the number of clients ({k}) for {self.rule}, which needs every "
                f"client every round; got {kpr}",
            )
        rule = self._build_rule()
        object.__setattr__(self, "_rule", rule)  # not a field: kept for built_rule
        mu = rule.local.momentum
        if self.momentum is not None and mu is not None and self.momentum != mu:
            raise SettingsValueError(
                "momentum",
                f"{self.momentum} contradicts rule {self.rule!r}, which sets the client momentum "
                f"to {mu} (leave it unset, or set the rule's own)",
            )

    @property
    def hyperparams(self) -> dict[str, Any]:
        """The rule's hyper-parameters among ``rule_arg``."""
        return rule_kwargs(self.rule_arg, self.rule)

    @property
    def resolved_backend(self) -> str:
        """The backend the rule runs on (``"auto"`` resolved on this machine)."""
        return resolve_backend(self.backend)

    def _build_rule(self) -> Any:
        """The rule with its hyper-parameters; where that fails, the error names the entry of
        ``rule_arg`` that fails on its own (else all of them)."""
        kwargs = self.hyperparams
        source = {}  # hyper-parameter -> the rule_arg entry that gave its value
        for key, _ in self.rule_arg:
            scope, dot, name = key.rpartition(".")
            if not dot or scope == self.rule:
                source[name] = key
        try:
            return make_rule(self.rule, backend=self.resolved_backend, **kwargs)
        except (TypeError, ValueError) as exc:
            error, item = exc, ", ".join(source[n] for n in kwargs)
        for name, value in kwargs.items():
            try:
                make_rule(self.rule, **{name: value})
            except (TypeError, ValueError) as exc:
                error, item = exc, source[name]
                break
        cls = SettingsTypeError if isinstance(error, TypeError) else SettingsValueError
        raise cls("rule_arg", str(error), item)

    @property
    def built_rule(self) -> Any:
        """The rule with its hyper-parameters on ``resolved_backend``, as built once when the
        settings were made (a run passes it on instead of building it again)."""
        return self.__dict__["_rule"]


def _client_momentum(momentum: Any, spec: LocalSpec, rule_name: str) -> float:
    """The clients' momentum: the caller's, the rule's (``spec.momentum``), or 0."""
    if momentum is None:
        return 0.0 if spec.momentum is None else float(spec.momentum)
    mu = check_real(momentum, "momentum", low=0.0, high=1.0, high_open=True)
    if spec.momentum is not None and mu != spec.momentum:
        raise ValueError(
            f"momentum = {mu} contradicts rule {rule_name!r}, which sets the client momentum to "
            f"{spec.momentum} (change it through the rule, or pass momentum=None)"
        )
    return mu


@dataclass(frozen=True)
class TrainingSettings:
    """What the selected clients compute each round: the rule's
    [`LocalSpec`][fairagg.types.LocalSpec] with the caller's local-training settings.

    [`simulate`][fairagg.simulation.simulate] and
    [`FairaggStrategy`][fairagg.flower.FairaggStrategy] each build one from their arguments;
    every field is checked and normalised (ints as ``int``, reals as ``float``, ``momentum``
    resolved against the rule's) when it is made, in the order ``epochs``, ``batch_size``,
    ``lr``, ``momentum``, ``prox_mu`` and the rule's PropFair surrogate, and never again: the
    round reads ``lr`` as it is (``RoundReports.lr``) and the clients train with these values.

    Attributes
    ----------
    local : LocalSpec
        What the clients compute (``rule.local``).
    rule : str
        The rule's name (for messages).
    epochs, batch_size : int
        Local epochs and batch size (each >= 1).
    lr : float
        The clients' step (finite, > 0); also the ``RoundReports.lr`` the rules read.
    momentum : float
        The client momentum in [0, 1): the one given, else the rule's
        (``local.momentum``), else 0; a given one that contradicts the rule's is a
        ``ValueError``.
    prox_mu : float
        FedProx μ (finite, >= 0).
    propfair : tuple of (float, float, bool)
        PropFair's surrogate (M, ε, huber) from ``local``; M = 0.0 trains on the loss
        ([`check_propfair`][fairagg.local.check_propfair]).

    Raises
    ------
    TypeError, ValueError
        For the first invalid field, naming it as the callers' arguments name it.
    """

    local: LocalSpec = LocalSpec()
    rule: str = ""
    epochs: int = 1
    batch_size: int = 10
    lr: float = 0.01
    momentum: float | None = None
    prox_mu: float = 0.0
    propfair: tuple[float, float, bool] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        local = check_local_spec(self.local)
        values = {
            "epochs": check_count(self.epochs, "epochs", low=1),
            "batch_size": check_count(self.batch_size, "batch_size", low=1),
            "lr": check_real(self.lr, "lr", low=0.0, low_open=True),
            "momentum": _client_momentum(self.momentum, local, self.rule),
            "prox_mu": check_real(self.prox_mu, "prox_mu", low=0.0),
            "propfair": check_propfair(
                local.propfair_m, local.propfair_epsilon, local.propfair_huber
            ),
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def gradients(self) -> bool:
        """Whether the clients report one gradient each (``local.report == "gradients"``)
        instead of training."""
        return self.local.report == "gradients"
