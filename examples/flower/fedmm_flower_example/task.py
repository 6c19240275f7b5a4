# SPDX-License-Identifier: BSD-3-Clause
"""What both sides of the app share: the algorithm's configuration, the node's data, the server's start.

The data are synthetic (three Gaussian blobs in 2-D, mixed differently on
each node) and generated from ``(seed, partition id)``, so every node builds
its own partition without any download; replace :func:`load_partition` by
your data loader.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm.algorithms import FedMM
from fedmm.models import GaussianMixture

CENTERS = np.array([[-4.0, 0.0], [0.0, 4.0], [4.0, 0.0]])


def make_algorithm(config: Any) -> FedMM:
    """The FedMM configuration, from the app's run config (identical on the server and the nodes)."""
    model = GaussianMixture(int(config["n-components"]), n_features=CENTERS.shape[1])
    return FedMM(model, participation_prob=float(config["participation"]),
                 control_variate_step=float(config["control-variate-step"]), step=float(config["step"]),
                 batch_size=int(config["batch-size"]))


def load_partition(partition_id: int, config: Any) -> np.ndarray:
    """The ``(N_i, 2)`` data of node ``partition_id`` (heterogeneous mixing weights per node)."""
    n = int(config["samples-per-client"])
    rng = np.random.default_rng([int(config["seed"]), 1, int(partition_id)])
    weights = np.roll([0.6, 0.3, 0.1], int(partition_id))
    labels = rng.choice(len(CENTERS), size=n, p=weights)
    return CENTERS[labels] + rng.standard_normal((n, CENTERS.shape[1]))


def pilot_sample(config: Any) -> np.ndarray:
    """A small public sample the server may use to pick ``Ŝ_0`` (never a node's private data)."""
    rng = np.random.default_rng([int(config["seed"]), 2])
    labels = rng.integers(len(CENTERS), size=60)
    return CENTERS[labels] + rng.standard_normal((60, CENTERS.shape[1]))


def initial_statistic(config: Any) -> np.ndarray:
    """``Ŝ_0`` from the pilot sample (FedEM §4 initialization), drawn from a stream of the run's seed."""
    model = make_algorithm(config).model
    return model.init_statistic([pilot_sample(config)], np.random.default_rng([int(config["seed"]), 3]))
