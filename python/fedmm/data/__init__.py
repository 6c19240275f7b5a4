# SPDX-License-Identifier: BSD-3-Clause
"""Data sets and splits (DESIGN §7): one sample per row everywhere."""
from fedmm.data.lowrank import LowRankProblem, synthetic_lowrank

__all__ = ["LowRankProblem", "synthetic_lowrank"]
