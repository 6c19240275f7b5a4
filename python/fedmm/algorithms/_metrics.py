# SPDX-License-Identifier: BSD-3-Clause
"""The update sizes the algorithms record every round (FedMM paper §6: ``E^s``, ``E^{p,s}``, ``E^p``, ...)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm import _rounds

__all__ = ["squared_distance"]


def squared_distance(a: Any, b: Any) -> float:
    """``‖a − b‖²`` of two vectors, in float64 (one compiled pass)."""
    return _rounds.squared_distance(np.ascontiguousarray(a, dtype=np.float64),
                                    np.ascontiguousarray(b, dtype=np.float64))
