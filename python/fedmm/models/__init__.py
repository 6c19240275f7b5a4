# SPDX-License-Identifier: BSD-3-Clause
"""Surrogate models (DESIGN §2): the statistic ``S̄``, the map ``T`` and the projection ``Π``."""
from fedmm.models.base import StatisticLayout, SurrogateModel
from fedmm.models.proximal import ProximalGradient
from fedmm.models.toy import InverseToy

__all__ = ["StatisticLayout", "SurrogateModel", "InverseToy", "ProximalGradient"]
