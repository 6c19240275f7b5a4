# SPDX-License-Identifier: BSD-3-Clause
"""Synthetic sparse-coding data of the FedMM paper §6 and the homogeneous client split."""
from __future__ import annotations

import numpy as np

from fedmm._memory import check_allocation
from fedmm._validation import as_array, as_rng, check_int, check_real

__all__ = ["synthetic_dictionary", "split_homogeneous"]


def synthetic_dictionary(
    n_samples: int,
    p: int,
    K: int,
    *,
    density: float = 0.2,
    noise: float = 0.0,
    seed=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples ``Z_t = θ* h_t (+ noise)`` of the FedMM paper §6.

    ``θ*`` has i.i.d. ``N(0, 1)`` entries; each code ``h_t`` has exactly
    ``max(1, round(density · K))`` non-zero entries at uniformly random
    positions (20 % of ``K`` in the paper), each ``N(0, 1)``.

    Parameters
    ----------
    n_samples : int
        Number of samples ``N`` (the paper uses 250 for the homogeneous and
        5000 for the heterogeneous setting).
    p : int
        Signal dimension.
    K : int
        Number of atoms (columns of ``θ*``).
    density : float in (0, 1]
        Fraction of non-zero code entries.
    noise : float in [0, 1e100]
        Standard deviation of optional i.i.d. Gaussian noise added to ``Z``
        (0 in the paper).
    seed : int, Generator or None
        Source of randomness; the same seed gives the same arrays.

    Returns
    -------
    Z : ndarray of shape (N, p), float64, C-ordered
        One sample per row (``Z[t] = θ* @ codes[t]``).
    theta_star : ndarray of shape (p, K)
        The generating dictionary.
    codes : ndarray of shape (N, K)
        The sparse codes, one per row.

    Examples
    --------
    >>> from fedmm.data import synthetic_dictionary
    >>> Z, theta, codes = synthetic_dictionary(250, 20, 15, seed=0)
    >>> Z.shape, theta.shape, codes.shape, int((codes[0] != 0).sum())
    ((250, 20), (20, 15), (250, 15), 3)
    """
    n_samples = check_int(n_samples, "n_samples", low=1)
    p = check_int(p, "p", low=1)
    K = check_int(K, "K", low=1)
    check_allocation(8 * (n_samples * (2 * K + p) + p * K),
                     f"synthetic_dictionary with n_samples={n_samples}, p={p}, K={K}")
    density = check_real(density, "density", low=0.0, high=1.0, low_open=True)
    noise = check_real(noise, "noise", low=0.0, high=1e100)  # larger: samples and their squares overflow
    rng = as_rng(seed, "seed")
    theta_star = rng.standard_normal((p, K))
    n_nonzero = max(1, int(round(density * K)))
    # Row-wise random subsets of size n_nonzero: the first columns of a random permutation per row.
    support = np.argsort(rng.random((n_samples, K)), axis=1)[:, :n_nonzero]
    codes = np.zeros((n_samples, K))
    np.put_along_axis(codes, support, rng.standard_normal((n_samples, n_nonzero)), axis=1)
    Z = codes @ theta_star.T
    if noise > 0.0:
        Z += noise * rng.standard_normal(Z.shape)
    return np.ascontiguousarray(Z), theta_star, codes


def split_homogeneous(Z, n_clients: int) -> list[np.ndarray]:
    """Homogeneous setting of FedMM §6: every client holds its own copy of all of ``Z``.

    Parameters
    ----------
    Z : array_like of shape (N, p)
        Samples, one per row.
    n_clients : int
        Number of clients ``n``.

    Returns
    -------
    datas : list of n ndarrays of shape (N, p), float64, C-ordered
        Independent copies (a client may modify its array without affecting
        the others).

    Raises
    ------
    MemoryError
        Before allocating, if the ``n_clients`` copies would need more bytes than
        the machine's memory (the message names the size).

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.arange(6.0).reshape(3, 2)
    >>> datas = split_homogeneous(Z, 4)
    >>> len(datas), datas[3].shape, datas[0] is not datas[1]
    (4, (3, 2), True)
    """
    Z = as_array(Z, "Z", ndim=2)
    n_clients = check_int(n_clients, "n_clients", low=1)
    if Z.shape[0] == 0:
        raise ValueError(f"Expected 'Z' with at least one row, got shape {Z.shape}")
    # n copies of Z plus one array object and list slot each, refused up front when it cannot fit
    check_allocation(n_clients * (Z.shape[0] * Z.shape[1] * 8 + 128),
                     f"split_homogeneous with n_clients={n_clients} copies of 'Z' of shape {Z.shape}")
    return [np.array(Z, dtype=np.float64, order="C", copy=True) for _ in range(n_clients)]
