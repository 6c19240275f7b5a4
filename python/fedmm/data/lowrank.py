# SPDX-License-Identifier: BSD-3-Clause
"""Synthetic low-rank count/real matrices with heterogeneous observers and missing entries.

The FedMissEM setting of the FedEM paper (§4, App. F.2): observers record a
``J × L`` (sites × time stamps) matrix whose entries follow an exponential
family with natural parameter ``θ*_{jl}``, ``θ* = U* V*ᵀ`` of rank ``r``, and
observe only a subset of the entries.  Observers are heterogeneous in how
much and where they observe: observer ``i`` has its own observation rate
``p_i ~ Uniform(rate_low, rate_high)`` and a random set of *home* rows (sites)
that it visits four times as often as the others.  Observers are sorted by
rate before being split into clients, so clients differ too.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedmm._memory import check_allocation
from fedmm._validation import as_rng, check_in, check_int, check_real

__all__ = ["LowRankProblem", "synthetic_lowrank"]


class LowRankProblem(NamedTuple):
    """Output of :func:`synthetic_lowrank`.

    Attributes
    ----------
    datas : list of (values, mask)
        Per client: ``values`` of shape (m, J, L) float64 with NaN where
        unobserved, ``mask`` of shape (m, J, L) bool (True = observed).
    theta_star : ndarray of shape (J, L)
        True natural parameter (mean for "gaussian", log-intensity for
        "poisson", log-odds for "bernoulli").
    complete : list of ndarray of shape (m, J, L)
        The full matrices before masking (to score imputation).
    """

    datas: list
    theta_star: np.ndarray
    complete: list


def synthetic_lowrank(
    n_clients: int,
    observers_per_client: int,
    n_rows: int,
    n_cols: int,
    rank: int,
    *,
    family: str = "gaussian",
    rate_low: float = 0.2,
    rate_high: float = 0.8,
    scale: float = 1.0,
    seed=None,
) -> LowRankProblem:
    """Draw a FedMissEM problem.

    Parameters
    ----------
    n_clients, observers_per_client : int
        ``n`` clients with ``m`` observers each.
    n_rows, n_cols : int
        ``J`` sites and ``L`` time stamps.
    rank : int
        Rank ``r`` of ``θ*`` (``r ≤ min(J, L)``).
    family : {"gaussian", "poisson", "bernoulli"}
        Gaussian entries have unit variance around ``θ*``; Poisson counts have
        intensity ``exp(θ*)``; Bernoulli entries have log-odds ``θ*``.
    rate_low, rate_high : float
        Range of the observers' observation rates (0 < low ≤ high ≤ 1).
    scale : float in (0, 1e100]
        Entries of ``θ*`` have standard deviation ``scale`` (plus ``log 3``
        for "poisson", so intensities are around 3).
    seed : int or numpy.random.Generator, optional

    Returns
    -------
    LowRankProblem
    """
    n = check_int(n_clients, "n_clients", low=1)
    m = check_int(observers_per_client, "observers_per_client", low=1)
    J = check_int(n_rows, "n_rows", low=1)
    L = check_int(n_cols, "n_cols", low=1)
    r = check_int(rank, "rank", low=1, high=min(J, L))
    check_allocation(8 * (n * m * (J + 2) + J * L + (J + L) * r) + n * m * J,
                     f"synthetic_lowrank with n_clients={n}, observers_per_client={m}, n_rows={J}, n_cols={L}")
    check_in(family, "family", ("gaussian", "poisson", "bernoulli"))
    lo = check_real(rate_low, "rate_low", low=0.0, high=1.0, low_open=True)
    hi = check_real(rate_high, "rate_high", low=lo, high=1.0)
    scale = check_real(scale, "scale", low=0.0, high=1e100, low_open=True)  # larger: θ* and its data overflow
    rng = as_rng(seed, "seed")

    U = rng.standard_normal((J, r))
    V = rng.standard_normal((L, r))
    theta = (U @ V.T) * (scale / np.sqrt(r))
    if family == "poisson":
        theta += np.log(3.0)

    total = n * m
    rates = np.sort(rng.uniform(lo, hi, size=total))
    home = rng.random((total, J)) < 0.3
    # home rows are visited 4x as often; rates are renormalized so the mean stays p_i
    row_weight = np.where(home, 4.0, 1.0)
    row_weight /= row_weight.mean(axis=1, keepdims=True)
    prob = np.clip(rates[:, None, None] * row_weight[:, :, None], 0.0, 1.0)
    mask = rng.random((total, J, L)) < prob
    if family == "gaussian":
        full = theta + rng.standard_normal((total, J, L))
    elif family == "poisson":
        full = rng.poisson(np.exp(theta), size=(total, J, L)).astype(np.float64)
    else:
        full = (rng.random((total, J, L)) < 1.0 / (1.0 + np.exp(-theta))).astype(np.float64)
    values = np.where(mask, full, np.nan)
    datas, complete = [], []
    for c in range(n):
        sl = slice(c * m, (c + 1) * m)
        datas.append((values[sl].copy(), mask[sl].copy()))
        complete.append(full[sl].copy())
    return LowRankProblem(datas, theta, complete)
