# SPDX-License-Identifier: BSD-3-Clause
"""Argument checks shared by the public API.

Every message names the argument and says what was expected and what was
received, so that a user can fix the call without reading the source.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = [
    "as_array",
    "as_rng",
    "check_int",
    "check_real",
    "check_probability",
    "check_in",
]


def as_array(
    x: Any,
    name: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    dtype: Any = np.float64,
    allowed_dtypes: tuple = (np.float32, np.float64),
    finite: bool = True,
    order: str | None = None,
    copy: bool = False,
) -> np.ndarray:
    """Convert ``x`` to an ndarray and check it.

    Parameters
    ----------
    x : array_like
        Input.
    name : str
        Argument name used in error messages.
    ndim : int or tuple of int, optional
        Accepted numbers of dimensions.
    dtype : dtype or None
        Target dtype; ``None`` keeps ``x``'s dtype when it is one of
        ``allowed_dtypes`` and converts integers/bools to float64.
    allowed_dtypes : tuple of dtype
        Floating types accepted as-is when ``dtype`` is None.
    finite : bool
        Reject NaN and infinity with ``ValueError``.
    order : {'C', 'F', None}
        Memory layout of the result (a copy is made only if needed).
    copy : bool
        Always return a fresh array.

    Returns
    -------
    ndarray
    """
    try:
        arr = np.asarray(x)
    except Exception as exc:  # pragma: no cover - numpy message is kept
        raise TypeError(f"Expected '{name}' to be array-like, got {type(x).__name__}: {exc}") from exc
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise TypeError(f"Expected '{name}' to hold real numbers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"Expected '{name}' to be real, got complex dtype {arr.dtype}")
    if dtype is None:
        target = arr.dtype if arr.dtype in [np.dtype(d) for d in allowed_dtypes] else np.float64
    else:
        target = np.dtype(dtype)
    if order is None:
        arr = np.array(arr, dtype=target, copy=True) if copy else arr.astype(target, copy=False)
    else:
        arr = np.array(arr, dtype=target, order=order, copy=True) if copy else np.asarray(
            arr, dtype=target, order=order
        )
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(str(a) for a in allowed)
            raise ValueError(
                f"Expected '{name}' with {want} dimension(s), got shape {arr.shape}"
            )
    if finite and np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        raise ValueError(f"Expected '{name}' to contain only finite values (no NaN or inf)")
    return arr


def as_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """Normalize a seed, ``SeedSequence``, ``BitGenerator`` or ``Generator``.

    ``None`` gives fresh OS entropy (non-reproducible), as in NumPy.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (numbers.Integral, np.random.SeedSequence, np.random.BitGenerator)):
        if isinstance(rng, bool):
            raise TypeError(f"Expected '{name}' to be a seed or numpy.random.Generator, got bool")
        if isinstance(rng, numbers.Integral) and int(rng) < 0:
            raise ValueError(f"Expected '{name}' to be a non-negative seed, got {rng}")
        return np.random.default_rng(rng)
    raise TypeError(
        f"Expected '{name}' to be None, an int seed, a SeedSequence, a BitGenerator "
        f"or a numpy.random.Generator, got {type(rng).__name__}"
    )


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """Check an integer argument lies in ``[low, high]`` and return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Expected '{name}' to be an integer, got {type(value).__name__} ({value!r})")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"Expected '{name}' in [{lo}, {hi}], got {v}")
    return v


def check_real(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Check a finite real argument lies in the stated interval and return it as ``float``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Expected '{name}' to be a real number, got {type(value).__name__} ({value!r})")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"Expected '{name}' to be finite, got {v}")
    bad = (
        (low is not None and (v <= low if low_open else v < low))
        or (high is not None and (v >= high if high_open else v > high))
    )
    if bad:
        lb = "(" if low_open else "["
        hb = ")" if high_open else "]"
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"Expected '{name}' in {lb}{lo}, {hi}{hb}, got {v}")
    return v


def check_probability(value: Any, name: str) -> float:
    """Check ``value`` lies in ``(0, 1]``."""
    return check_real(value, name, low=0.0, high=1.0, low_open=True)


def check_in(value: Any, name: str, choices: tuple) -> Any:
    """Check ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"Expected '{name}' to be one of {choices!r}, got {value!r}")
    return value
