# SPDX-License-Identifier: BSD-3-Clause
"""The update sizes the algorithms record every round (FedMM paper §6: ``E^s``, ``E^{p,s}``, ``E^p``, ...)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm import _rounds

__all__ = ["squared_distance", "step_record"]


def squared_distance(a: Any, b: Any) -> float:
    """``‖a − b‖²`` of two vectors, in float64 (one compiled pass)."""
    return _rounds.squared_distance(np.ascontiguousarray(a, dtype=np.float64),
                                    np.ascontiguousarray(b, dtype=np.float64))


def step_record(gamma: float, theta_dist: float, statistic_dist: float | None = None) -> dict[str, float]:
    """The round's update sizes from the squared distances of its step (FedMM paper §6).

    S-space (``statistic_dist`` given): ``E_s = ‖Ŝ_{t+1} − Ŝ_t‖²/γ²`` and
    ``E_ps = ‖T(Ŝ_{t+1}) − T(Ŝ_t)‖²/γ²``; Θ-space: ``E_p = ‖θ_{t+1} − θ_t‖²/γ²``.
    One formula for every path that records them (Python server, compiled
    stretches, SA-SSMM), so that their Histories agree to the bit.
    """
    if statistic_dist is None:
        return {"gamma": gamma, "E_p": theta_dist / gamma**2}
    return {"gamma": gamma, "E_s": statistic_dist / gamma**2, "E_ps": theta_dist / gamma**2}
