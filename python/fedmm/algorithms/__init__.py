# SPDX-License-Identifier: BSD-3-Clause
"""Algorithms (DESIGN §3): SA-SSMM, FedMM (Algorithms 1, 2 and 4 of the FedMM paper), the Θ-space baseline,
and FedMLS with its non-smooth baselines FedAvg, Scaffold and Scaffnew (FedMLS paper).

``Server`` and ``Client`` hold the mathematics of a round and exchange only
messages (:class:`Broadcast` arrays down, compressed bytes up); runtimes in
``fedmm.runtime`` move those messages.
"""
from fedmm.algorithms._schedule import StepSchedule
from fedmm.algorithms.federated import Broadcast, Client, FedMM, ParameterAveraging, Server
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
from fedmm.algorithms.sassmm import SASSMM

__all__ = ["SASSMM", "FedMM", "ParameterAveraging", "Server", "Client", "Broadcast", "StepSchedule",
           "FedMLS", "FedAvg", "Scaffold", "Scaffnew"]
