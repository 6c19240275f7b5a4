# SPDX-License-Identifier: BSD-3-Clause
"""Surrogate models (FedMM paper §2, MM-1/MM-2): the statistic ``S̄``, the map ``T`` and the projection ``Π``."""
from fedmm.models.base import StatisticLayout, SurrogateModel
from fedmm.models.dictionary import DictionaryLearning
from fedmm.models.proximal import ProximalGradient
from fedmm.models.toy import InverseToy
from fedmm.models.numba_model import NumbaModel  # numba itself is imported on first use
from fedmm._validation import SampleIndexError  # what the models raise for indices out of range

# -- EM family (FedEM paper) --
from fedmm.models.gmm import GaussianMixture, GaussianMixtureParams
from fedmm.models.missing import LowRankParams, MissingData, MissingValues
from fedmm.models.poisson import PoissonLatent

# -- optimal transport (FedMM paper §7; JAX is imported only when these are used) --
from fedmm.models.ot import ICNN, TransportMap, TransportProblem

__all__ = [
    "StatisticLayout",
    "SurrogateModel",
    "DictionaryLearning",
    "InverseToy",
    "ProximalGradient",
    "NumbaModel",
    "SampleIndexError",
    # -- EM family (FedEM paper) --
    "GaussianMixture",
    "GaussianMixtureParams",
    "LowRankParams",
    "MissingData",
    "MissingValues",
    "PoissonLatent",
    # -- optimal transport (FedMM paper §7) --
    "ICNN",
    "TransportMap",
    "TransportProblem",
]
