# SPDX-License-Identifier: BSD-3-Clause
"""Independent NumPy/SciPy reference implementations used by the tests (one section per family)."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

# ---- data (issue 5): exact balanced assignment --------------------------------------------------


def balanced_assignment_cost_lsa(cost: np.ndarray, capacities: np.ndarray) -> float:
    """Optimal cost of assigning points to clusters of fixed sizes, by the Hungarian method.

    Every cluster ``j`` is replicated ``capacities[j]`` times, which turns the
    transportation problem into a square assignment problem solved exactly by
    :func:`scipy.optimize.linear_sum_assignment` (``O(N³)``, small N only).
    """
    replicated = np.repeat(cost, capacities, axis=1)
    rows, cols = linear_sum_assignment(replicated)
    return float(replicated[rows, cols].sum())
