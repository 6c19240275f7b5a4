# SPDX-License-Identifier: BSD-3-Clause
"""Tests of fedmm.data: generators, the exact equal-size k-means split, file loaders."""
from __future__ import annotations

import numpy as np
import pytest

from fedmm.data import (
    as_client_datasets,
    balanced_assignment,
    constrained_kmeans,
    image_patches,
    load_client_arrays,
    load_movielens_ratings,
    split_by_constrained_kmeans,
    split_homogeneous,
    synthetic_dictionary,
)
from reference import balanced_assignment_cost_lsa


def _within_cluster_cost(X, labels):
    return sum(((X[labels == j] - X[labels == j].mean(axis=0)) ** 2).sum() for j in np.unique(labels))


# ---- synthetic generator --------------------------------------------------------------------------


def test_synthetic_dictionary_matches_paper_model():
    Z, theta, codes = synthetic_dictionary(300, 12, 15, seed=3)
    assert Z.shape == (300, 12) and theta.shape == (12, 15) and codes.shape == (300, 15)
    assert Z.flags.c_contiguous and Z.dtype == np.float64
    # 20 % of K = 15 atoms: exactly 3 non-zero entries per code, at varying positions.
    np.testing.assert_array_equal((codes != 0).sum(axis=1), 3)
    assert len({tuple(np.flatnonzero(c)) for c in codes}) > 50
    np.testing.assert_allclose(Z, codes @ theta.T, rtol=1e-12, atol=1e-12)
    # N(0,1) entries: the sample moments of 180 + 900 draws are within a few standard errors.
    assert abs(theta.mean()) < 4 / np.sqrt(theta.size)
    nz = codes[codes != 0]
    assert abs(nz.var() - 1.0) < 4 * np.sqrt(2 / nz.size)


def test_synthetic_dictionary_is_seed_deterministic():
    a = synthetic_dictionary(50, 8, 10, seed=7, noise=0.1)
    b = synthetic_dictionary(50, 8, 10, seed=np.random.default_rng(7), noise=0.1)
    c = synthetic_dictionary(50, 8, 10, seed=8, noise=0.1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


def test_synthetic_dictionary_noise_level():
    Z0, theta, codes = synthetic_dictionary(2000, 10, 5, seed=1)
    Z1, _, _ = synthetic_dictionary(2000, 10, 5, seed=1, noise=0.5)
    residual = Z1 - Z0
    # Same seed, noise drawn last: the residual is the noise, of variance 0.25.
    assert abs(residual.var() - 0.25) < 4 * 0.25 * np.sqrt(2 / residual.size)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_samples=0, p=3, K=2), "n_samples"),
        (dict(n_samples=5, p=3, K=2, density=0.0), "density"),
        (dict(n_samples=5, p=3, K=2, noise=-1.0), "noise"),
        (dict(n_samples=5, p=3, K=2, seed=-1), "seed"),
    ],
)
def test_synthetic_dictionary_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        synthetic_dictionary(**kwargs)


def test_split_homogeneous_gives_independent_copies():
    Z, _, _ = synthetic_dictionary(25, 4, 3, seed=0)
    datas = split_homogeneous(Z, 5)
    assert len(datas) == 5
    for d in datas:
        np.testing.assert_array_equal(d, Z)
    datas[0][0, 0] += 1.0
    assert datas[1][0, 0] == Z[0, 0]
    with pytest.raises(ValueError, match="'Z'"):
        split_homogeneous(Z[0], 3)


# ---- exact equal-size k-means --------------------------------------------------------------------


@pytest.mark.parametrize("case", range(12))
def test_balanced_assignment_is_optimal_against_hungarian(case):
    rng = np.random.default_rng(case)
    n_samples, n_clusters = int(rng.integers(5, 70)), int(rng.integers(1, 8))
    n_clusters = min(n_clusters, n_samples)
    cost = rng.random((n_samples, n_clusters)) * 10 ** rng.uniform(-3, 3)
    if case % 3 == 0:
        cost = np.round(cost, 1)  # many ties
    labels = balanced_assignment(cost)
    capacities = np.bincount(labels, minlength=n_clusters)
    assert capacities.max() - capacities.min() <= 1 and capacities.sum() == n_samples
    ours = cost[np.arange(n_samples), labels].sum()
    reference = balanced_assignment_cost_lsa(cost, capacities)
    assert ours == pytest.approx(reference, rel=1e-12, abs=1e-12)


def test_balanced_assignment_warm_start_and_capacities():
    rng = np.random.default_rng(5)
    cost = rng.random((30, 3))
    capacities = np.array([5, 10, 15])
    start = np.repeat([0, 1, 2], capacities)
    labels = balanced_assignment(cost, capacities, labels0=start)
    np.testing.assert_array_equal(np.bincount(labels), capacities)
    assert cost[np.arange(30), labels].sum() == pytest.approx(balanced_assignment_cost_lsa(cost, capacities))
    with pytest.raises(ValueError, match="capacities"):
        balanced_assignment(cost, np.array([5, 10, 14]))
    with pytest.raises(ValueError, match="labels0"):
        balanced_assignment(cost, capacities, labels0=np.zeros(30, dtype=int))


def test_constrained_kmeans_equal_sizes_and_lower_cost_than_random_split():
    Z, _, _ = synthetic_dictionary(400, 6, 5, seed=2)
    labels, centers, inertia = constrained_kmeans(Z, 8, seed=0, n_init=2)
    np.testing.assert_array_equal(np.bincount(labels, minlength=8), 50)
    assert inertia == pytest.approx(_within_cluster_cost(Z, labels), rel=1e-10)
    np.testing.assert_allclose(centers, [Z[labels == j].mean(axis=0) for j in range(8)], atol=1e-12)
    # At convergence the assignment step is exact for the final centers.
    cost = ((Z[:, None, :] - centers[None]) ** 2).sum(axis=2)
    assert cost[np.arange(400), labels].sum() == pytest.approx(
        balanced_assignment_cost_lsa(cost, np.full(8, 50)), rel=1e-10
    )
    rng = np.random.default_rng(0)
    random_costs = [_within_cluster_cost(Z, rng.permutation(np.repeat(np.arange(8), 50))) for _ in range(20)]
    assert inertia < 0.8 * min(random_costs)


def test_split_by_constrained_kmeans_partitions_the_samples():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((103, 4))
    datas, labels = split_by_constrained_kmeans(X, 10, seed=4, return_labels=True)
    assert sorted(d.shape[0] for d in datas) == [10] * 7 + [11] * 3
    assert all(d.flags.c_contiguous and d.shape[1] == 4 for d in datas)
    stacked = np.concatenate(datas)
    np.testing.assert_array_equal(stacked[np.lexsort(stacked.T)], X[np.lexsort(X.T)])
    again = split_by_constrained_kmeans(X, 10, seed=4)
    for a, b in zip(datas, again):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="'n_clients' in \\[1, 103\\]"):
        split_by_constrained_kmeans(X, 104)


# ---- image patches ---------------------------------------------------------------------------------


def test_image_patches_normalized_and_deterministic():
    X = image_patches(300, seed=1)
    assert X.shape == (300, 64) and X.flags.c_contiguous
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(axis=0), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(X, image_patches(300, seed=1))
    assert not np.array_equal(X, image_patches(300, seed=2))
    with pytest.raises(ValueError, match="images"):
        image_patches(10, images=("nope.png",))


# ---- MovieLens ratings.dat -------------------------------------------------------------------------

_RATINGS = """\
1::10::5::978300760
1::20::3::978302109
1::30::4::978301968
2::10::4::978300275
2::20::2::978824291
3::10::1::978302268
3::40::5::978302039
4::30::3::978300719
4::10::2::978300000
"""


def test_movielens_keeps_most_active_movies_and_users(tmp_path):
    path = tmp_path / "ratings.dat"
    path.write_text(_RATINGS)
    ratings, users, movies = load_movielens_ratings(path, n_users=3, n_movies=2, return_ids=True)
    # Movie 10 has 4 ratings, 20 and 30 have 2 each (tie -> smaller id 20).
    np.testing.assert_array_equal(movies, [10, 20])
    # Ratings of kept movies: user 1 -> 2, user 2 -> 2, users 3 and 4 -> 1 (tie -> user 3).
    np.testing.assert_array_equal(users, [1, 2, 3])
    np.testing.assert_array_equal(ratings, [[5, 3], [4, 2], [1, 0]])
    full = load_movielens_ratings(path, n_users=4, n_movies=4)
    assert full.shape == (4, 4) and (full > 0).sum() == 9


@pytest.mark.parametrize(
    "bad_line, match",
    [
        ("2::30::4", "4 fields"),
        ("2::x::4::978300760", "integers"),
        ("2::30::four::978300760", "number"),
        ("2::30::7::978300760", r"\(0, 5\]"),
        ("0::30::3::978300760", "positive"),
        ("2::30::nan::978300760", r"\(0, 5\]"),
    ],
)
def test_movielens_rejects_malformed_line_naming_it(tmp_path, bad_line, match):
    lines = _RATINGS.splitlines()
    lines.insert(3, bad_line)
    path = tmp_path / "ratings.dat"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"ratings\.dat:4: malformed rating line.*{match}"):
        load_movielens_ratings(path, n_users=2, n_movies=2)


def test_movielens_rejects_binary_duplicates_and_oversized_requests(tmp_path):
    path = tmp_path / "ratings.dat"
    path.write_bytes(_RATINGS.encode() + b"5::10::\xff::1\n")
    with pytest.raises(ValueError, match=r"ratings\.dat:10: .*non-ASCII"):
        load_movielens_ratings(path, 2, 2)
    path.write_text(_RATINGS + "1::10::4::978300761\n")
    with pytest.raises(ValueError, match="user 1 rated movie 10 more than once"):
        load_movielens_ratings(path, 2, 2)
    path.write_text(_RATINGS)
    with pytest.raises(ValueError, match="asked for 5 movies but the file has 4"):
        load_movielens_ratings(path, 2, 5)
    path.write_text("")
    with pytest.raises(ValueError, match="empty file"):
        load_movielens_ratings(path, 1, 1)


# ---- per-client arrays -------------------------------------------------------------------------------


def test_load_client_arrays_from_directory_npz_and_list(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 3)) for n in (4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)]
    folder = tmp_path / "clients"
    folder.mkdir()
    for i, a in enumerate(arrays):
        np.save(folder / f"client_{i}.npy", a)
    for got, want in zip(load_client_arrays(folder), arrays):  # natural order: client_2 before client_10
        np.testing.assert_array_equal(got, want)
    np.savez(tmp_path / "clients.npz", *arrays)
    for got, want in zip(load_client_arrays(tmp_path / "clients.npz"), arrays):
        np.testing.assert_array_equal(got, want)
    files = [folder / "client_3.npy", folder / "client_1.npy"]
    got = load_client_arrays(files)
    np.testing.assert_array_equal(got[0], arrays[3])
    np.testing.assert_array_equal(got[1], arrays[1])


def test_load_client_arrays_rejects_bad_files(tmp_path):
    good, wide = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(good, np.ones((3, 2)))
    np.save(wide, np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"p=2 columns.*b\.npy"):
        load_client_arrays([good, wide])
    vector = tmp_path / "v.npy"
    np.save(vector, np.ones(3))
    with pytest.raises(ValueError, match=r"v\.npy.*2 dimension"):
        load_client_arrays([vector])
    pickled = tmp_path / "p.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"p\.npy: not a valid \.npy"):
        load_client_arrays([pickled])
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match=r"g\.npy: not a valid \.npy"):
        load_client_arrays([garbage])
    nan = tmp_path / "n.npy"
    np.save(nan, np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"n\.npy.*finite"):
        load_client_arrays([nan])
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(ValueError, match="no '\\*.npy' file"):
        load_client_arrays(empty_dir)
    with pytest.raises(TypeError, match="non-empty list"):
        as_client_datasets(np.ones((3, 2)))
