# SPDX-License-Identifier: BSD-3-Clause
"""Checked Python faces of ``fedmm._rounds`` (re-exported by ``fedmm.kernels``).

``random.c``: sampling without replacement from a NumPy generator or from a
Philox stream at a round's counter; ``engine.c``'s aggregation helpers: the
weighted sum of client rows and the squared distance of two vectors.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm import _rounds
from fedmm._memory import check_allocation
from fedmm._validation import as_rng, check_int

__all__ = ["sample_without_replacement", "philox_sample_without_replacement", "weighted_row_sum",
           "squared_distance"]


def sample_without_replacement(n: int, b: int, rng: Any = None) -> np.ndarray:
    """``b`` distinct indices drawn uniformly from ``range(n)``, in random order.

    A partial Fisher-Yates shuffle: ``out[i]`` is a uniform pick among the
    ``n − i`` indices not taken yet, each pick one bounded integer drawn by
    masked rejection (``next_uint32`` while ``n − 1 − i < 2**32``), so every
    ordered ``b``-tuple of distinct indices has probability
    ``(n − b)! / n!``.  This is how FedMM clients draw their minibatches (the
    compiled client rounds replay it bit for bit from the same stream).

    Parameters
    ----------
    n : int >= 0
        Population size.
    b : int, 0 <= b <= n
        Sample size.
    rng : seed, SeedSequence, BitGenerator or numpy.random.Generator
        Source of randomness (advanced; its lock is held while drawing).

    Returns
    -------
    ndarray of shape (b,), int64

    Notes
    -----
    Costs ``O(n)`` time and memory (the shuffled index table) plus ``b`` draws;
    an ``n`` whose table exceeds the machine's memory raises ``MemoryError``
    naming the size before anything is allocated.

    Examples
    --------
    >>> import numpy as np
    >>> sample_without_replacement(10, 4, rng=0)
    array([1, 9, 2, 4])
    >>> np.unique(sample_without_replacement(1000, 1000, rng=1)).size   # a permutation
    1000
    """
    n = check_int(n, "n", low=0)
    b = check_int(b, "b", low=0, high=n)
    if b > 0:  # the O(n) index table, refused up front when it cannot fit
        check_allocation(8 * (n + b), f"sample_without_replacement with n={n} (an index table of n int64)")
    return _rounds.sample_without_replacement(as_rng(rng), n, b)


def philox_sample_without_replacement(key: Any, t: int, n: int, b: int) -> np.ndarray:
    """:func:`sample_without_replacement` from the stream ``Philox(key)`` at counter ``(0, t, 0, 0)``.

    Equal, bit for bit, to ``sample_without_replacement(n, b,
    rng=numpy.random.Generator(numpy.random.Philox(key=key, counter=[0, t, 0, 0])))``
    without building a NumPy generator: how a server draws the clients of
    round ``t`` from its round stream.

    Parameters
    ----------
    key : array_like of shape (2,), uint64
        The Philox key of the stream.
    t : int >= 0
        The round, i.e. the counter's second word.
    n : int >= 0
        Population size.
    b : int, 0 <= b <= n
        Sample size.

    Returns
    -------
    ndarray of shape (b,), int64

    Examples
    --------
    >>> import numpy as np
    >>> key = np.array([1, 2], dtype=np.uint64)
    >>> rng = np.random.Generator(np.random.Philox(key=key, counter=[0, 3, 0, 0]))
    >>> bool((philox_sample_without_replacement(key, 3, 10, 4) == sample_without_replacement(10, 4, rng)).all())
    True
    """
    if not (type(key) is np.ndarray and key.dtype == np.uint64 and key.shape == (2,) and key.flags.c_contiguous):
        key = np.ascontiguousarray(key)
        if key.dtype != np.uint64 or key.shape != (2,):
            raise ValueError(f"Expected 'key' of shape (2,) and dtype uint64, got {key.dtype} {key.shape}")
    t = check_int(t, "t", low=0)
    n = check_int(n, "n", low=0)
    b = check_int(b, "b", low=0, high=n)
    if b > 0:
        check_allocation(8 * (n + b), f"philox_sample_without_replacement with n={n} (an index table of n int64)")
    return _rounds.philox_sample_without_replacement(key, t, n, b)


def weighted_row_sum(rows: Sequence[Any], weights: Any, q: int) -> np.ndarray:
    """``Σ_k weights[k] * rows[k]``, accumulated in list order (``fedmm_weighted_sum``).

    The server's aggregation of the clients' messages: the order of the
    additions is fixed, so the sum is the same bit for bit on every backend
    and runtime.

    Parameters
    ----------
    rows : sequence of array_like of shape (q,), float64
        The vectors (copied once when not contiguous float64).
    weights : array_like of shape (len(rows),), float64
    q : int >= 0
        Length of every row.

    Returns
    -------
    ndarray of shape (q,), float64
        A new vector.

    Raises
    ------
    ValueError
        A row of another length, or not one weight per row.

    Examples
    --------
    >>> import numpy as np
    >>> weighted_row_sum([np.ones(3), np.arange(3.0)], [0.5, 2.0], 3)
    array([0.5, 2.5, 4.5])
    """
    if not (type(weights) is np.ndarray and weights.dtype == np.float64 and weights.flags.c_contiguous):
        weights = np.ascontiguousarray(weights, dtype=np.float64)
    if weights.ndim != 1:
        raise ValueError(f"Expected 'weights' to be a vector, got shape {weights.shape}")
    return _rounds.weighted_row_sum(list(rows), weights, check_int(q, "q", low=0))


def squared_distance(a: Any, b: Any) -> float:
    """``‖a − b‖²`` of two vectors of equal length, in float64 (``fedmm_squared_distance``, one pass).

    The plain sum of squares in a fixed order; where it would overflow or
    underflow, computed on differences scaled by a power of two (as LAPACK's
    ``dnrm2``), so the result is finite whenever ``‖a − b‖²`` is representable.

    Parameters
    ----------
    a, b : array_like of shape (n,)
        Converted to contiguous float64 (no copy when they already are).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> squared_distance(np.array([1.0, 2.0]), np.array([4.0, 6.0]))
    25.0
    """
    return _rounds.squared_distance(np.ascontiguousarray(a, dtype=np.float64),
                                    np.ascontiguousarray(b, dtype=np.float64))
