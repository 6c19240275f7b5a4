# SPDX-License-Identifier: BSD-3-Clause
"""Algorithms: SA-SSMM, FedMM (Algorithms 1, 2 and 4 of the FedMM paper), the Θ-space baseline,
FedMLS with its non-smooth baselines FedAvg, Scaffold and Scaffnew (FedMLS paper), FedProx (Li et al.
2020; the algorithm recipe of docs/extending.md), and FedMM-OT
(FedMM paper §7, Algorithm 3) with its FedAdam baseline for optimal-transport maps.

``Server`` and ``Client`` hold the mathematics of a round and exchange only
messages (:class:`Broadcast` arrays down, compressed bytes up); runtimes in
``fedmm.runtime`` move those messages.

Every family (FedMM, the Θ-space baseline, FedMLS, FedAvg, FedProx, Scaffold,
Scaffnew, FedMM-OT, FedAdam) is a :class:`FederatedAlgorithm`: declared
parameter constraints and one ``run`` (seed, runtime, fault policy,
checkpoints and resumption, callbacks, the History).

Helpers shared by every algorithm: :class:`Schedule` (step sizes, local step
counts and other sequences of hyper-parameters; :class:`StepSchedule` is its
``γ_t`` use), :func:`check_seed` (the one seed normalizer), :func:`seed_repr`
and :func:`seed_from_repr` (a run's seed as recorded in ``History.config`` and
back), :func:`init_generator` (the stream that draws the initial statistic,
for runtimes that build it), :class:`Cadence` (the rounds a monitored quantity
is due), :func:`check_control_variate_step` and :func:`check_compressor` (the constructors'
checks, for front ends such as the estimators).
"""
from fedmm._validation import check_seed
from fedmm.algorithms._monitor import Cadence
from fedmm.algorithms._random import init_generator, seed_from_repr, seed_repr
from fedmm.algorithms._schedule import Schedule, StepSchedule
from fedmm.algorithms._setup import check_control_variate_step, check_compressor
from fedmm.algorithms.base import FederatedAlgorithm
from fedmm.algorithms.federated import Broadcast, Client, FedMM, ParameterAveraging, Server, StopRun
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.fedprox import FedProx
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
from fedmm.algorithms.sassmm import SASSMM
from fedmm.algorithms.ot import FedAdam, FedMMOT  # JAX is imported when they are used

__all__ = ["SASSMM", "FedMM", "ParameterAveraging", "Server", "Client", "Broadcast", "StopRun", "StepSchedule",
           "FedMLS", "FedAvg", "Scaffold", "Scaffnew", "Schedule", "Cadence", "check_seed", "seed_repr",
           "seed_from_repr", "FedMMOT", "FedAdam", "init_generator", "check_control_variate_step", "check_compressor",
           "FederatedAlgorithm", "FedProx"]
