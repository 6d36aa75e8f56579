"""The JSON Schema of a case file (``schema.json``), with every rule's and formula's default
parameters."""

from __future__ import annotations

from .. import RULES
from ._encoding import SCHEMA_VERSION, Json, _json_value
from ._formulas import FORMULAS
from ._generate import resolved_params
from ._tolerances import BOUND, PRECISIONS

_ARRAY = {
    "type": "object",
    "required": ["dtype", "shape"],
    "properties": {
        "dtype": {"enum": ["float64", "int64", "bool"]},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "data": {"type": "array", "description": "the entries, flattened in C order"},
        "file": {"type": "string", "description": "a .npy file beside the JSON file"},
    },
    "oneOf": [{"required": ["data"]}, {"required": ["file"]}],
}
SCHEMA: Json = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "fairagg golden vector case",
    "description": (
        "One case of a rule (several rounds, state carried) or a formula function: inputs, "
        "parameters, the outputs fairagg computes in float64 (or the error it raises), and "
        "the tolerance of each output: |got - want| <= atol + rtol*|want| entrywise with the "
        "output's float64 error bound (rtol, atol; its float32 bound under float32), or exact "
        "equality (see precisions and bound)."
    ),
    "precisions": {
        name: {
            **p,
            "rule": "|got - want| <= atol + rtol*|want| entrywise with the output's tolerance "
            "entry (float32: its float32 entry; solver: the float64 entry plus solver_tol, "
            "relative and absolute times max(1, max|want|)); integers and booleans exactly",
        }
        for name, p in PRECISIONS.items()
    },
    "bound": {
        **BOUND,
        "rule": "each output's error bound: fairagg's outputs on the inputs perturbed by up to "
        "perturbation*u relative (u the unit round-off), runs times; atol = safety * the "
        "largest move of the output, rtol = safety * perturbation * u",
    },
    "type": "object",
    "required": [
        "schema_version",
        "kind",
        "name",
        "case",
        "params",
        "resolved_params",
        "inputs",
        "expected",
        "tolerance",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "seed": {"type": "integer"},
        "kind": {"enum": ["rule", "formula"]},
        "name": {"type": "string"},
        "case": {"type": "string"},
        "description": {"type": "string"},
        "formula": {"type": "string"},
        "function": {"type": "string", "description": "formulas: the fairagg function"},
        "args": {"type": "array", "items": {"type": "string"}},
        "params": {"type": "object", "description": "the case's own settings"},
        "resolved_params": {
            "type": "object",
            "description": "every parameter the case runs with, defaults included (a rule's "
            "hyper-parameters and variant, a formula's keyword arguments; an infinite default "
            'as the string "inf"); see defaults',
        },
        "inputs": {"type": "object"},
        "expected": {"type": "object"},
        "tolerance": {
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["rtol", "atol"],
                        "properties": {
                            "rtol": {"type": "number"},
                            "atol": {"type": "number"},
                            "float32": {
                                "type": "object",
                                "required": ["rtol", "atol"],
                                "description": "the output's float32 error bound",
                            },
                            "argmin": {"type": "string"},
                        },
                    },
                    {"type": "object", "required": ["exact"]},
                ]
            },
        },
    },
    "$defs": {"array": _ARRAY},
}


def schema() -> Json:
    """The JSON schema written as ``schema.json``: ``SCHEMA`` with the default parameters of
    every rule and formula (what a case's ``resolved_params`` holds when it sets nothing)."""
    defaults = {
        "rules": {n: {k: _json_value(v) for k, v in resolved_params("rule", n, {}).items()}
                  for n in RULES},
        "formulas": {
            n: {k: _json_value(v) for k, v in resolved_params("formula", n, {}).items()}
            for n in FORMULAS
        },
    }  # fmt: skip
    return {**SCHEMA, "defaults": defaults}
