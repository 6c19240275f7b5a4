# SPDX-License-Identifier: BSD-3-Clause
"""Data settings of the papers' experiments and loaders for user files.

Everything here uses one sample per **row**: a client's data is an
``(N_i, p)`` float64 C-ordered array (so ``data[idx].T`` is the ``(p, b)``
column-sample view the kernels take).

- :func:`synthetic_dictionary`, :func:`split_homogeneous` — FedMM §6 synthetic data.
- :func:`constrained_kmeans`, :func:`balanced_assignment`,
  :func:`split_by_constrained_kmeans` — exact equal-size k-means split
  (the heterogeneous setting).
- :func:`image_patches` — 8×8 patches of scikit-learn's sample images.
- :func:`load_movielens_ratings`, :func:`load_client_arrays`,
  :func:`as_client_datasets` — user files.
- :func:`synthetic_lowrank` — low-rank matrices with heterogeneous observers and missing entries (FedMissEM).
"""
from __future__ import annotations

from fedmm.data.files import as_client_datasets, load_client_arrays, load_movielens_ratings
from fedmm.data.images import SAMPLE_IMAGES, image_patches
from fedmm.data.partition import balanced_assignment, constrained_kmeans, split_by_constrained_kmeans
from fedmm.data.synthetic import split_homogeneous, synthetic_dictionary

from fedmm.data.lowrank import LowRankProblem, synthetic_lowrank

__all__ = [
    "LowRankProblem",
    "synthetic_lowrank",
    "SAMPLE_IMAGES",
    "as_client_datasets",
    "balanced_assignment",
    "constrained_kmeans",
    "image_patches",
    "load_client_arrays",
    "load_movielens_ratings",
    "split_by_constrained_kmeans",
    "split_homogeneous",
    "synthetic_dictionary",
]
