# SPDX-License-Identifier: BSD-3-Clause
"""Argument checks of the models' public methods (issue 15, item 5).

Every public entry point (``statistic``, ``objective``, ``T``, ``project``,
``check_data``, ``theta_vector``) refuses bad inputs with ``TypeError`` or
``ValueError`` whose message names the argument; read-only inputs give the
same numbers as writeable ones; SA-SSMM sets up models whose layout depends on
the data (``GaussianMixture(3)``) in the right order.
"""
from __future__ import annotations

import numpy as np
import pytest

from fedmm.algorithms import SASSMM
from fedmm.models import (DictionaryLearning, GaussianMixture, InverseToy, MissingValues, PoissonLatent,
                          ProximalGradient)

try:
    import numba  # noqa: F401
    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False


def _toy_statistic(c, theta, z, out):
    out[0] = z[0] * theta[0]


def _toy_T(c, s, theta):
    theta[0] = s[0]


def _make(name):
    """(model, data, theta) with the model set up on the data."""
    rng = np.random.default_rng(0)
    if name == "dictionary":
        model, data = DictionaryLearning(3, 0.1), rng.standard_normal((30, 5))
    elif name == "gmm":
        model, data = GaussianMixture(2), np.concatenate([rng.normal(-3, 1, (15, 2)), rng.normal(3, 1, (15, 2))])
    elif name == "gmm_full":
        model, data = (GaussianMixture(2, "full"),
                       np.concatenate([rng.normal(-3, 1, (15, 2)), rng.normal(3, 1, (15, 2))]))
    elif name == "poisson":
        model, data = PoissonLatent([-0.5, 0.0, 0.5]), rng.poisson(3.0, 30).astype(np.float64)
    elif name == "toy":
        model, data = InverseToy(), rng.uniform(0.5, 2.0, 30)
    elif name == "missing":
        values = rng.standard_normal((30, 4, 3))
        mask = rng.random((30, 4, 3)) < 0.7
        model, data = MissingValues(2), (values, mask)
    elif name == "proximal":
        model, data = ProximalGradient("least_squares", "l1", 0.1, lam=0.1), (rng.standard_normal((30, 4)),
                                                                            rng.standard_normal(30))
    elif name == "numba":
        if not HAVE_NUMBA:
            pytest.skip("numba is not installed")
        from fedmm.models import NumbaModel
        model = NumbaModel(_toy_statistic, _toy_T, q=1, d=1, sample_size=1,
                           objective=lambda data, theta: float(np.mean(data) * theta[0]))
        data = rng.uniform(0.5, 2.0, (30, 1))
    else:  # pragma: no cover
        raise AssertionError(name)
    data = model.check_data(data)
    s0 = model.init_statistic([data], np.random.default_rng(1))
    return model, data, model.T(s0)


MODELS = ["dictionary", "gmm", "gmm_full", "poisson", "toy", "missing", "proximal", "numba"]
ARRAY_DATA = ["dictionary", "gmm", "gmm_full", "poisson", "toy", "numba"]


def _raises_naming(exc, arg, fn, *args):
    with pytest.raises(exc) as info:
        fn(*args)
    assert f"'{arg}" in str(info.value), str(info.value)
    return info


# ------------------------------------------------------------------------------------------- data
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("bad", [None, "abc", object()], ids=["None", "str", "object"])
def test_bad_data_types_are_type_errors_naming_data(name, bad):
    model, _, theta = _make(name)
    _raises_naming(TypeError, "data", model.check_data, bad)
    _raises_naming(TypeError, "data", model.statistic, bad, theta)
    if name != "numba":
        _raises_naming(TypeError, "data", model.objective, bad, theta)


@pytest.mark.parametrize("name", ARRAY_DATA)
def test_empty_data_is_a_value_error_not_a_nan_objective(name):
    model, data, theta = _make(name)
    empty = data[:0]
    _raises_naming(ValueError, "data", model.check_data, empty)
    _raises_naming(ValueError, "data", model.statistic, empty, theta)
    if name != "numba":
        _raises_naming(ValueError, "data", model.objective, empty, theta)


@pytest.mark.parametrize("name", ARRAY_DATA)
def test_list_data_equals_array_data(name):
    model, data, theta = _make(name)
    np.testing.assert_array_equal(model.statistic(data.tolist(), theta), model.statistic(data, theta))
    if name != "numba":
        assert model.objective(data.tolist(), theta) == model.objective(data, theta)


# ------------------------------------------------------------------------------------------- idx
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("idx, exc", [
    (np.array([0.0, 1.5]), TypeError),       # floats would be truncated
    (np.array([True, False]), ValueError),   # a boolean array is only a mask over all N samples
    (np.zeros(30, dtype=bool), ValueError),  # a mask selecting nothing
    (["a"], TypeError),
    (np.array([-1, 2]), ValueError),         # negative indices would wrap
    (np.array([0, 30]), ValueError),         # N = 30
    (np.array([], dtype=np.int64), ValueError),
    (np.array([[0, 1]]), ValueError),
], ids=["float", "short_mask", "empty_mask", "str", "negative", "too_large", "empty", "2d"])
def test_bad_idx_is_refused_naming_idx(name, idx, exc):
    model, data, theta = _make(name)
    info = _raises_naming(exc, "idx", model.statistic, data, theta, idx)
    if np.asarray(idx).dtype.kind == "i" and np.asarray(idx).size and np.asarray(idx).ndim == 1:
        assert isinstance(info.value, IndexError)  # out of range: both ValueError and IndexError


@pytest.mark.parametrize("name", MODELS)
def test_valid_idx_forms_agree(name):
    model, data, theta = _make(name)
    idx = np.array([3, 1, 7])
    ref = model.statistic(data, theta, idx)
    for other in ([3, 1, 7], idx.astype(np.int32), idx.astype(np.uint64)):
        np.testing.assert_array_equal(model.statistic(data, theta, other), ref)
    mask = np.zeros(30, dtype=bool)
    mask[idx] = True
    np.testing.assert_array_equal(model.statistic(data, theta, mask), model.statistic(data, theta, np.sort(idx)))


# ------------------------------------------------------------------------------------- s and theta
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", ["T", "project"])
def test_bad_statistic_is_refused_naming_s(name, method):
    model, data, theta = _make(name)
    q = model.layout.size
    fn = getattr(model, method)
    _raises_naming(ValueError, "s", fn, np.zeros(q + 1))
    _raises_naming(ValueError, "s", fn, np.full(q, np.nan))
    _raises_naming(TypeError, "s", fn, None)
    _raises_naming(TypeError, "s", fn, "abc")


@pytest.mark.parametrize("name", MODELS)
def test_bad_theta_is_refused_naming_theta(name):
    model, data, theta = _make(name)
    if name == "toy":  # S̄(Z, θ) = Z does not read θ; its objective does
        _raises_naming((TypeError, ValueError), "theta", model.objective, data, "abc")
        return
    for bad in (None, "abc"):
        _raises_naming((TypeError, ValueError), "theta", model.statistic, data, bad)
    _raises_naming((TypeError, ValueError), "theta", model.statistic, data, np.zeros(57))


# ------------------------------------------------------------------------------------------ read-only
def _frozen(x):
    if isinstance(x, tuple):
        return tuple(_frozen(v) for v in x)
    if isinstance(x, np.ndarray):
        y = np.array(x, copy=True)
        y.flags.writeable = False
        return y
    return x


@pytest.mark.parametrize("name", MODELS)
def test_read_only_inputs_give_the_same_results(name):
    model, data, theta = _make(name)
    s = model.statistic(data, theta)
    idx = np.array([4, 0, 9])
    theta_ro = _frozen(theta) if isinstance(theta, np.ndarray) else theta
    np.testing.assert_array_equal(model.statistic(_frozen(data), theta_ro, _frozen(idx)),
                                  model.statistic(data, theta, idx))
    np.testing.assert_array_equal(model.statistic(_frozen(data), theta_ro), s)
    np.testing.assert_array_equal(model.project(_frozen(s)), model.project(s))
    np.testing.assert_array_equal(model.theta_vector(model.T(_frozen(s))), model.theta_vector(model.T(s)))
    if name != "numba":
        assert model.objective(_frozen(data), theta_ro) == model.objective(data, theta)


# ------------------------------------------------------------------------------------- set-up order
def test_sassmm_sets_up_a_gaussian_mixture_from_the_data():
    rng = np.random.default_rng(0)
    centers = np.array([[-6.0, 0.0], [0.0, 6.0], [6.0, 0.0]])
    Y = np.concatenate([c + rng.standard_normal((100, 2)) for c in centers])
    model = GaussianMixture(3)
    h = SASSMM(model, batch_size=10).run(Y, 5, seed=0)
    assert len(h) == 5 and model.n_features == 2
    long = SASSMM(GaussianMixture(3), batch_size=10, step=0.5).run(Y, 200, seed=0, evaluate_every=200)
    means = np.sort(long.theta.means[:, 0])
    np.testing.assert_allclose(means, [-6.0, 0.0, 6.0], atol=0.5)
    assert np.isfinite(long["objective"][-1])


def test_sassmm_reads_the_layout_after_the_data_fixed_it():
    """DictionaryLearning learns p from check_data: a given 'init' is checked against that layout."""
    Y = np.random.default_rng(0).standard_normal((30, 4))
    with pytest.raises(ValueError, match="'init'"):
        SASSMM(DictionaryLearning(2, 0.1), batch_size=10).run(Y, 2, init=np.zeros(5))
    init = DictionaryLearning(2, 0.1, n_features=4).init_statistic([Y], np.random.default_rng(0))
    h = SASSMM(DictionaryLearning(2, 0.1), batch_size=10).run(Y, 2, init=init, seed=0)
    assert len(h) == 2


@pytest.mark.parametrize("name", MODELS)
def test_theta_vector_round_trip_and_bad_vectors(name):
    model, data, theta = _make(name)
    vec = model.theta_vector(theta)
    back = model.theta_from_vector(vec, theta)
    np.testing.assert_allclose(model.theta_vector(back), vec, rtol=1e-12, atol=1e-12)
    _raises_naming(ValueError, "vector", model.theta_from_vector, np.zeros(vec.size + 1), theta)
    _raises_naming(TypeError, "vector", model.theta_from_vector, "abc", theta)
    if name not in ("gmm", "gmm_full"):  # GaussianMixture refuses non-parameter objects (TypeError naming theta)
        _raises_naming(TypeError, "theta", model.theta_vector, "abc")
    else:
        _raises_naming(TypeError, "theta", model.theta_vector, np.zeros(3))


def test_missing_values_repr_rebuilds_the_model():
    """``repr`` of MissingValues is its constructor call (History.config stores it), not an address."""
    model = MissingValues(2, "poisson", lam=0.5, shape=(6, 4), max_iter=30, tol=1e-8, minibatch="entries")
    text = repr(model)
    assert " at 0x" not in text
    again = eval(text, {"MissingValues": MissingValues})
    assert repr(again) == text
    assert (again.rank, again.family, again.lam, again.shape, again.max_iter, again.tol, again.minibatch) == \
        (2, "poisson", 0.5, (6, 4), 30, 1e-8, "entries")
