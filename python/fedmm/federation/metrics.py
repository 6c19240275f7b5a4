# SPDX-License-Identifier: BSD-3-Clause
"""The update sizes the algorithms record every round (FedMM paper §6: ``E^s``, ``E^{p,s}``, ``E^p``, ...)."""
from __future__ import annotations

import math
import warnings
from typing import Any

from fedmm import kernels

__all__ = ["squared_distance", "step_record", "update_size"]


def squared_distance(a: Any, b: Any) -> float:
    """``‖a − b‖²`` of two vectors, in float64 (one compiled pass).

    The plain sum of squares in a fixed order; where it would overflow or
    underflow, computed on differences scaled by a power of two (as LAPACK's
    ``dnrm2``), so the result is finite whenever ``‖a − b‖²`` is representable
    and ``inf`` only when it exceeds the largest float64.
    """
    return kernels.squared_distance(a, b)


def update_size(name: str, dist: float, gamma: float) -> float:
    """``dist / γ²``, the recorded update size ``name`` (``E_s``, ``E_ps``, ``E_p``, ``E_sp``).

    Never silently infinite: a ``RuntimeWarning`` naming the quantity is
    issued when the value is not finite (its true value exceeds the largest
    float64, or a NaN reached the iterates); the value itself is recorded as
    computed (``inf`` or ``nan``).
    """
    value = dist / gamma**2
    if not math.isfinite(value):
        what = ("exceeds the largest float64 (1.8e308)" if value == math.inf
                else "is not a number")
        warnings.warn(f"update size {name} = ‖Δ‖²/γ² {what}; recorded as {value} "
                      f"(‖Δ‖² = {dist!r}, γ = {gamma!r})", RuntimeWarning, stacklevel=2)
    return value


def step_record(gamma: float, theta_dist: float, statistic_dist: float | None = None) -> dict[str, float]:
    """The round's update sizes from the squared distances of its step (FedMM paper §6).

    S-space (``statistic_dist`` given): ``E_s = ‖Ŝ_{t+1} − Ŝ_t‖²/γ²`` and
    ``E_ps = ‖T(Ŝ_{t+1}) − T(Ŝ_t)‖²/γ²``; Θ-space: ``E_p = ‖θ_{t+1} − θ_t‖²/γ²``.
    One formula for every path that records them (Python server, compiled
    stretches, SA-SSMM), so that their Histories agree to the bit. A value
    that is not finite comes with a ``RuntimeWarning`` naming it (:func:`update_size`).
    """
    if statistic_dist is None:
        return {"gamma": gamma, "E_p": update_size("E_p", theta_dist, gamma)}
    return {"gamma": gamma, "E_s": update_size("E_s", statistic_dist, gamma),
            "E_ps": update_size("E_ps", theta_dist, gamma)}
