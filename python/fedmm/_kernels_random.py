# SPDX-License-Identifier: BSD-3-Clause
"""Checked Python face of ``random.c``: sampling without replacement from a NumPy generator."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm import _rounds
from fedmm._memory import check_allocation
from fedmm._validation import as_rng, check_int

__all__ = ["sample_without_replacement"]


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
