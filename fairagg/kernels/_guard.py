"""The structural check of the backend kernels' own entry points.

[`fairagg.kernels`][fairagg.kernels] validates and converts what callers pass, then hands the
compiled kernels float arrays of matching shapes. Someone who calls ``fairagg.kernels.cpu`` or
``fairagg.kernels.cuda`` directly gets this O(1) check instead: arrays of the right kind,
number of axes and lengths, so that nothing a caller passes can reach compiled code that
indexes out of bounds or fails to compile. Values are not read: NaN and infinity pass through
these raw kernels (the validated entry points refuse them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import FLOAT_DTYPES, check_device_array, is_device_array


def kernel_arrays(function: str, *, device: bool = False, **arrays: tuple[Any, int]) -> None:
    """Check that each ``name=(array, ndim)`` is a float32/float64 ndarray (or, with
    ``device``, a CUDA device array) with ``ndim`` axes; raise TypeError/ValueError naming it."""
    for name, (a, ndim) in arrays.items():
        if device and is_device_array(a):
            check_device_array(a, name, ndim=ndim)
            continue
        if not isinstance(a, np.ndarray) or a.dtype not in FLOAT_DTYPES:
            what = f"dtype {a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__
            raise TypeError(
                f"{name} must be a float32 or float64 NumPy array (this backend kernel takes "
                f"validated arrays; fairagg.kernels.{function} converts any array-like); "
                f"got {what}"
            )
        if a.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D; got shape {a.shape}")


def same_length(name: str, length: int, other: str, other_length: int) -> None:
    """Raise ValueError if two lengths differ, naming both arguments."""
    if length != other_length:
        raise ValueError(f"{name} has length {length} but {other} has {other_length}")
