# SPDX-License-Identifier: BSD-3-Clause
"""Surrogate models (DESIGN §2): the statistic ``S̄``, the map ``T`` and the projection ``Π``."""
from fedmm.models.base import StatisticLayout, SurrogateModel
from fedmm.models.dictionary import DictionaryLearning
from fedmm.models.proximal import ProximalGradient
from fedmm.models.toy import InverseToy
from fedmm.models.numba_model import NumbaModel  # numba itself is imported on first use
from fedmm._validation import SampleIndexError  # what the models raise for indices out of range

# -- EM family (issue 6) --
from fedmm.models.gmm import GaussianMixture, GaussianMixtureParams
from fedmm.models.missing import LowRankParams, MissingData, MissingValues
from fedmm.models.poisson import PoissonLatent

# -- optimal transport (issue 14; JAX is imported only when these are used) --
from fedmm.models.ot import ICNN, TransportMap, TransportProblem

__all__ = [
    "StatisticLayout",
    "SurrogateModel",
    "DictionaryLearning",
    "InverseToy",
    "ProximalGradient",
    "NumbaModel",
    "SampleIndexError",
    # -- EM family (issue 6) --
    "GaussianMixture",
    "GaussianMixtureParams",
    "LowRankParams",
    "MissingData",
    "MissingValues",
    "PoissonLatent",
    # -- optimal transport (issue 14) --
    "ICNN",
    "TransportMap",
    "TransportProblem",
]
