# SPDX-License-Identifier: BSD-3-Clause
"""Argument checks shared by the public API.

Every message names the argument and says what was expected and what was
received, so that a user can fix the call without reading the source.
"""
from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

__all__ = [
    "as_array",
    "as_rng",
    "check_seed",
    "check_int",
    "check_count",
    "check_callable",
    "check_bool",
    "MAX_ITERATIONS",
    "MAX_INT",
    "check_real",
    "check_probability",
    "check_participation",
    "check_in",
    "check_path",
    "check_index",
    "index_range_error",
    "SampleIndexError",
    "check_statistic",
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
    if (type(x) is np.ndarray and x.dtype == _FLOAT64 and not copy and (dtype is None or dtype is np.float64)
            and (order is None or (order == "C" and x.flags.c_contiguous) or (order == "F" and x.flags.f_contiguous))):
        # what the general path returns for a float64 ndarray already in the layout asked for: x itself, checked
        # (building a run checks every client's data this way, so its Python overhead counts per client)
        arr = x
    else:
        arr = _converted(x, name, dtype, allowed_dtypes, order, copy)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(str(a) for a in allowed)
            raise ValueError(
                f"Expected '{name}' with {want} dimension(s), got shape {arr.shape}"
            )
    if finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"Expected '{name}' to contain only finite values (no NaN or inf)")
    return arr


_FLOAT64 = np.dtype(np.float64)


def _converted(x: Any, name: str, dtype: Any, allowed_dtypes: tuple, order: str | None, copy: bool) -> np.ndarray:
    """:func:`as_array`'s conversion: ``x`` as an ndarray of the target dtype and layout (real numbers only)."""
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
    return arr


def check_seed(seed: Any, name: str = "seed") -> np.random.SeedSequence:
    """Normalize a seed the way NumPy does, into the ``SeedSequence`` at the root of a run's randomness.

    This is the package's one seed normalizer: every ``seed`` and ``rng``
    argument goes through it (directly, or through :func:`as_rng`).

    Parameters
    ----------
    seed : None, int, sequence of int, SeedSequence, Generator or BitGenerator
        - a non-negative int ``n``: ``SeedSequence(n)`` (the same numbers as
          ``numpy.random.default_rng(n)``);
        - a sequence of non-negative ints: ``SeedSequence(list(seed))``;
        - a ``SeedSequence``: returned as is (never spawned from or mutated);
        - a ``Generator`` (or a bare ``BitGenerator``): a ``SeedSequence`` whose
          128-bit entropy is drawn from it, so passing a generator advances it,
          as NumPy and SciPy functions that take one do;
        - None: fresh entropy from the operating system (not reproducible
          unless the entropy is recorded, see ``fedmm.algorithms.seed_repr``).
    name : str
        Argument name used in error messages.

    Returns
    -------
    numpy.random.SeedSequence

    Raises
    ------
    TypeError
        For any other type (bool, float, str, ...).
    ValueError
        For a negative integer or an empty sequence.

    Examples
    --------
    >>> import numpy as np
    >>> check_seed(7).entropy
    7
    >>> rng = np.random.default_rng(0)
    >>> a, b = check_seed(rng), check_seed(rng)   # the generator advanced in between
    >>> a.entropy != b.entropy
    True
    """
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, np.random.BitGenerator):
        seed = np.random.Generator(seed)
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(int.from_bytes(seed.bytes(16), "little"))
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError(f"Expected '{name}' to be None, an int, a SeedSequence or a numpy.random.Generator, got bool")
    if isinstance(seed, numbers.Integral):
        if int(seed) < 0:
            raise ValueError(f"Expected '{name}' to be a non-negative seed, got {int(seed)}")
        return np.random.SeedSequence(int(seed))
    if isinstance(seed, (list, tuple, np.ndarray)):
        values = np.asarray(seed)
        if values.ndim == 1 and values.size and (np.issubdtype(values.dtype, np.integer) or all(
                isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in seed)):
            if (values < 0).any():
                raise ValueError(f"Expected '{name}' to hold non-negative integers, got {list(seed)}")
            return np.random.SeedSequence([int(v) for v in seed])
        raise ValueError(f"Expected '{name}' as a sequence to be a non-empty 1-D list of integers, got {seed!r}")
    raise TypeError(
        f"Expected '{name}' to be None, a non-negative int, a sequence of such ints, a numpy.random.SeedSequence "
        f"or a numpy.random.Generator, got {type(seed).__name__}"
    )


def as_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """A ``Generator`` from the inputs :func:`check_seed` accepts.

    A ``Generator`` is returned as is (its draws advance it); a
    ``BitGenerator`` is wrapped; anything else goes through
    :func:`check_seed`, so ``as_rng(n)`` draws the same numbers as
    ``numpy.random.default_rng(n)``.  ``None`` gives fresh OS entropy.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, np.random.BitGenerator):
        return np.random.Generator(rng)
    return np.random.default_rng(check_seed(rng, name))


#: Largest integer any argument may take (``2**63 − 1``, the int64 range the kernels and the
#: NumPy arrays index with): :func:`check_int` refuses a larger value even without ``high``.
MAX_INT = 2**63 - 1

#: Documented upper bound of every iteration count of the public API (``2**31 − 1``): rounds,
#: iterations of a solver (``max_iter``), restarts (``n_init``), local and inner steps
#: (``n_steps``, ``local_steps``, ``k_in``, ``theta_steps``, ...).  A count above it is refused by
#: :func:`check_count` with the argument named, instead of running for centuries or wrapping a
#: 32-bit counter of the C kernels; every loop below the bound stops on Ctrl-C.
MAX_ITERATIONS = 2**31 - 1


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """Check an integer argument lies in ``[low, high]`` and return it as ``int``.

    ``high`` defaults to :data:`MAX_INT` (``2**63 − 1``): no argument exceeds int64.

    Examples
    --------
    >>> check_int(3, "k", low=1)
    3
    >>> check_int(2**64, "k")
    Traceback (most recent call last):
    ...
    ValueError: Expected 'k' in [-inf, 2**63 - 1] (an int64), got 18446744073709551616
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Expected '{name}' to be an integer, got {type(value).__name__} ({value!r})")
    v = int(value)
    lo = "-inf" if low is None else low
    if high is None and v > MAX_INT:
        raise ValueError(f"Expected '{name}' in [{lo}, 2**63 - 1] (an int64), got {v}")
    if (low is not None and v < low) or (high is not None and v > high):
        hi = "inf" if high is None else high
        raise ValueError(f"Expected '{name}' in [{lo}, {hi}], got {v}")
    return v


def check_count(value: Any, name: str, *, low: int = 1) -> int:
    """An iteration count: an integer in ``[low, MAX_ITERATIONS]`` (``MAX_ITERATIONS = 2**31 − 1``).

    Examples
    --------
    >>> check_count(100, "max_iter")
    100
    >>> check_count(2**40, "n_rounds", low=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Expected 'n_rounds' in [0, 2147483647] (MAX_ITERATIONS = 2**31 - 1, ...), got 1099511627776
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Expected '{name}' to be an integer, got {type(value).__name__} ({value!r})")
    v = int(value)
    if v < low or v > MAX_ITERATIONS:
        raise ValueError(f"Expected '{name}' in [{low}, {MAX_ITERATIONS}] (MAX_ITERATIONS = 2**31 - 1, the bound "
                         f"of every iteration count), got {v}")
    return v


def check_callable(value: Any, name: str) -> Any:
    """``value`` itself when it is None or callable; ``TypeError`` naming ``name`` otherwise."""
    if value is not None and not callable(value):
        raise TypeError(f"Expected '{name}' to be None or callable, got {type(value).__name__} ({value!r:.60})")
    return value


def check_bool(value: Any, name: str) -> bool:
    """``value`` as ``bool`` when it is a Python or NumPy bool; ``TypeError`` naming ``name`` otherwise
    (a string such as ``"no"`` would be truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"Expected '{name}' to be True or False, got {type(value).__name__} ({value!r:.60})")
    return bool(value)


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


def check_participation(clients_per_round: Any, participation_prob: Any) -> tuple[int | None, float | None]:
    """Check the two ways of setting partial participation (at most one: a count ``m >= 1`` or a
    probability in ``(0, 1]``) and return them as ``(int or None, float or None)``."""
    if clients_per_round is not None and participation_prob is not None:
        raise ValueError("Expected at most one of 'clients_per_round' (a count) and 'participation_prob' "
                         f"(a probability), got {clients_per_round!r} and {participation_prob!r}")
    count = None if clients_per_round is None else check_int(clients_per_round, "clients_per_round", low=1)
    prob = None if participation_prob is None else check_probability(participation_prob, "participation_prob")
    return count, prob


def check_in(value: Any, name: str, choices: tuple) -> Any:
    """Check ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"Expected '{name}' to be one of {choices!r}, got {value!r}")
    return value


def check_path(value: Any, name: str = "path") -> str | bytes:
    """Check ``value`` names a file (``str``, ``bytes`` or :class:`os.PathLike`) and return ``os.fspath(value)``.

    An integer is refused: ``open`` would take it for a file descriptor, read
    the caller's descriptor and close it.
    """
    if not isinstance(value, (str, bytes, os.PathLike)):
        hint = " (file descriptors are not accepted)" if isinstance(value, numbers.Integral) else ""
        raise TypeError(f"Expected '{name}' to be a file name (str or os.PathLike){hint}, "
                        f"got {type(value).__name__} ({value!r})")
    return os.fspath(value)


def check_index(idx: Any, n: int, name: str = "idx", *, bounds: bool = True) -> np.ndarray | None:
    """Sample indices of a model's public ``statistic``: None (all samples) or distinct rows ``[0, n)``.

    Cheap (a dtype test, a shape test, one ``min`` and one ``max``): it runs on
    every public ``statistic`` call, the hot path of the Python backend.  With
    ``bounds=False`` the range test is left to the caller: the compiled
    statistic (:meth:`fedmm.kernels.CompiledModel.statistic`) tests every index
    in its C loop anyway, and the models turn its ``IndexError`` into
    :func:`index_range_error`'s ``ValueError`` at no cost on the hot path.

    Parameters
    ----------
    idx : None, array_like of int of shape (b,), or boolean mask of shape (n,)
        Integer indices (floats, which would be truncated, are refused;
        negative indices are refused, not wrapped) or a boolean mask over all
        ``n`` samples (as ``data[mask]``; any other boolean shape is refused).
    n : int
        Number of samples of the data indexed.
    name : str
        Argument name used in error messages.
    bounds : bool
        Test the range ``[0, n)`` here (see above).

    Returns
    -------
    None or ndarray of shape (b,), integer dtype
        ``idx`` itself, or a writeable copy of a read-only array.

    Raises
    ------
    TypeError
        For a dtype other than integer or boolean.
    ValueError
        For a shape other than ``(b,)`` with ``b >= 1`` (``(n,)`` for a mask) or
        an empty selection.
    SampleIndexError
        For an index outside ``[0, n)``: a ``ValueError`` that is also an
        ``IndexError`` (as NumPy's ``AxisError``).

    Examples
    --------
    >>> check_index([2, 0], 3)
    array([2, 0])
    >>> check_index([-1], 3)
    Traceback (most recent call last):
    ...
    fedmm._validation.SampleIndexError: Expected 'idx' to hold sample indices in [0, 3), got values in [-1, -1]
    """
    if idx is None:
        return None
    arr = idx if type(idx) is np.ndarray else np.asarray(idx)
    if arr.dtype.kind == "b":
        if arr.shape != (n,):
            raise ValueError(f"Expected '{name}' to be integer sample indices or a boolean mask of shape ({n},), "
                             f"got a boolean array of shape {arr.shape}")
        arr = np.flatnonzero(arr)
        if arr.shape[0] == 0:
            raise ValueError(f"Expected the boolean mask '{name}' to select at least one sample, got none")
        return arr
    if arr.dtype.kind not in "iu":
        raise TypeError(f"Expected '{name}' to be integer sample indices (or a boolean mask of shape ({n},)), "
                        f"got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(f"Expected '{name}' to be a non-empty 1-D array of sample indices, got shape {arr.shape}")
    if bounds:
        lo, hi = arr.min(), arr.max()
        if lo < 0 or hi >= n:
            raise index_range_error(arr, n, name)
    if not arr.flags.writeable:  # the compiled statistic takes a (non-const) int64 memoryview
        arr = arr.copy()
    return arr


class SampleIndexError(ValueError, IndexError):
    """Sample indices outside ``[0, N)``: a ``ValueError`` (a bad argument) that is also an ``IndexError``."""


def index_range_error(idx: np.ndarray, n: int, name: str = "idx") -> SampleIndexError:
    """The error for integer indices outside ``[0, n)`` (built once the range test failed)."""
    return SampleIndexError(f"Expected '{name}' to hold sample indices in [0, {n}), got values in "
                      f"[{idx.min()}, {idx.max()}]")


def check_statistic(s: Any, size: int, name: str = "s") -> np.ndarray:
    """A flat statistic: real, shape ``(size,)``, finite; returned as float64 (no copy when it already is).

    Examples
    --------
    >>> check_statistic([1.0, 2.0], 2)
    array([1., 2.])
    """
    if type(s) is np.ndarray and s.dtype == np.float64:
        arr = s
    else:
        arr = as_array(s, name, finite=False)
    if arr.shape != (size,):
        raise ValueError(f"Expected '{name}' to be a flat statistic of shape ({size},), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"Expected '{name}' to contain only finite values (no NaN or inf)")
    return arr
