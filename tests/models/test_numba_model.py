# SPDX-License-Identifier: BSD-3-Clause
"""User models compiled by numba (fedmm.models.NumbaModel) and the worked example
``examples/numba_logistic.py`` (logistic regression with Böhning's quadratic majorizer).

* deterministic FedMM on heterogeneous clients reaches scikit-learn's
  ``LogisticRegression`` objective on the pooled data to 1e-6 relative (both
  objectives computed by one NumPy function of this file);
* the compiled backend (whole stretches of rounds in engine.c, calling the
  numba cfuncs without the GIL) equals the Python backend (``Client.step`` and
  ``Server.aggregate``, calling the same cfuncs through ``CompiledModel``) bit
  for bit, with minibatches, both participation rules, Algorithm 4, every
  compressor, control variates and 1 or 2 threads;
* without numba, ``import fedmm`` and everything else work and the helper
  raises an ImportError that says how to install it.
"""
import doctest
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fedmm.algorithms import FedMM, ParameterAveraging
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.models import InverseToy, NumbaModel

try:
    import numba  # noqa: F401
except ImportError:
    HAVE_NUMBA = False
else:
    HAVE_NUMBA = True
needs_numba = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed (pip install 'fedmm[numba]')")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RHO = 1e-2


@pytest.fixture(scope="module")
def example():
    """examples/numba_logistic.py as the module ``numba_logistic`` (importable by name, so models pickle)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import numba_logistic
    finally:
        sys.path.remove(str(EXAMPLES))
    return numba_logistic


@pytest.fixture(scope="module")
def clients(example):
    return example.breast_cancer_clients(5, seed=0)


@pytest.fixture(scope="module")
def fitted(example, clients):
    """A BohningLogistic with B fitted on the clients (the cfuncs are compiled once per process)."""
    X, _, datas = clients
    return example.BohningLogistic(X.shape[1], RHO).fit_global_moments(datas)


def pooled_objective(X, y, w, rho):
    """``mean_j log(1 + exp(−y_j (x_jᵀ coef + b))) + (ρ/2)‖coef‖²`` with y in {0, 1}, ``w = (coef, b)``."""
    signs = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    margins = signs * (X @ w[:-1] + w[-1])
    return float(np.mean(np.logaddexp(0.0, -margins)) + 0.5 * rho * np.dot(w[:-1], w[:-1]))


# --------------------------------------------------------------------------- without numba
def test_fedmm_works_without_numba_and_the_helper_says_how_to_install_it():
    code = textwrap.dedent("""
        import sys
        sys.modules["numba"] = None  # any import of numba fails, as when it is not installed
        import numpy as np
        import fedmm, fedmm.models, fedmm.algorithms, fedmm.kernels
        from fedmm.algorithms import FedMM
        from fedmm.models import InverseToy, NumbaModel
        h = FedMM(InverseToy(), step=1.0).run([np.full(5, 4.0)], 2, seed=0)
        assert h.state["theta"][0] == 0.5
        try:
            NumbaModel(lambda c, t, z, o: None, lambda c, s, t: None, q=1, d=1, sample_size=1)
        except ImportError as exc:
            print(exc)
        else:
            raise AssertionError("NumbaModel without numba did not raise ImportError")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'fedmm[numba]'" in out.stdout


# --------------------------------------------------------------------------- the worked example
@needs_numba
def test_deterministic_fedmm_reaches_the_sklearn_objective(example, clients):
    X, y, datas = clients
    assert len({d.shape[0] for d in datas}) == len(datas)  # heterogeneous: unequal k-means clusters
    assert len({round(float(np.mean(d[:, -1] > 0)), 2) for d in datas}) > 1  # ... and label mixes
    model = example.BohningLogistic(X.shape[1], RHO)
    h = FedMM(model, participation_prob=1.0, step=1.0, oracle="full", compressor=Identity()).run(
        datas, 1000, seed=0, evaluate_every=100)
    assert h.config["backend"] == "compiled"
    objectives = [r["objective"] for r in h.records if "objective" in r]
    assert all(b <= a + 1e-15 for a, b in zip(objectives, objectives[1:]))  # MM descends
    ours = pooled_objective(X, y, h.state["theta"], RHO)
    ref = pooled_objective(X, y, example.sklearn_coefficients(X, y, RHO), RHO)
    assert abs(ours - ref) <= 1e-6 * abs(ref)
    assert ours - ref <= 1e-12 * abs(ref)  # not below scikit-learn's optimum either (to rounding)
    pooled = example.BohningLogistic.client_data(X, y)
    np.testing.assert_allclose(model.objective(pooled, h.state["theta"]), ours, rtol=1e-14)


@needs_numba
def test_example_main_prints_the_gap(example, capsys):
    gap = example.main(n_rounds=1000)
    assert abs(gap) <= 1e-6
    assert "relative gap" in capsys.readouterr().out


@needs_numba
def test_compiled_statistic_and_T_match_numpy(fitted, clients):
    X, _, datas = clients
    model = fitted
    rng = np.random.default_rng(0)
    data = datas[1]
    w = rng.standard_normal(model.d)
    idx = rng.permutation(data.shape[0])[:17]
    Xt = np.column_stack([data[idx, :-1], np.ones(idx.size)])
    yv = data[idx, -1]
    u = Xt @ w
    expected = Xt.T @ (0.25 * u + yv / (1.0 + np.exp(yv * u))) / idx.size  # mean of ¼x̃x̃ᵀw − ∇ℓ
    np.testing.assert_allclose(model.statistic(data, w, idx), expected, rtol=1e-12, atol=1e-14)
    s = rng.standard_normal(model.q)
    R = RHO * np.eye(model.d)
    R[-1, -1] = 0.0
    np.testing.assert_allclose(model.T(s), np.linalg.solve(model.B + R, s), rtol=1e-10, atol=1e-12)
    # the pooled B is ¼ E[x̃x̃ᵀ] over all rows of all clients
    Xall = np.column_stack([X, np.ones(X.shape[0])])
    np.testing.assert_allclose(model.B, 0.25 * Xall.T @ Xall / X.shape[0], rtol=1e-12, atol=1e-15)
    # the Python backend's statistic runs the compiled engine: the CompiledModel gives the same bits
    out, n_bad = model.compiled_model().statistic(w, data, idx)
    assert n_bad == 0
    np.testing.assert_array_equal(model.statistic(data, w, idx), out)


# --------------------------------------------------------------------------- both backends, bit for bit
CONFIGS = {
    # Algorithm 2, Bernoulli participation, minibatches, 8-bit stochastic rounding, control variates
    "bernoulli-dither8-cv": dict(participation_prob=0.6, compressor=StochasticRounding(bits=8),
                                 control_variate_step=0.1,
                                 batch_size=16, control_variates="oracle", step=("sqrt", 0.5)),
    # a fixed count of clients, block-p quantization, no control variates
    "count-blockp": dict(clients_per_round=3, compressor=BlockQuantizer(block_size=8, norm="inf"),
                         control_variate_step=0.0,
                         batch_size=10, step=("sqrt", 0.5)),
    # Algorithm 4, server-drawn coins
    "alg4-dither8": dict(participation_prob=0.5, participation_mode="compress", compressor=StochasticRounding(bits=8),
                         control_variate_step=0.05, batch_size=16, step=0.3),
    # Algorithm 4, client-drawn coins, full local batches, no compression
    "alg4-local-full": dict(participation_prob=0.7, participation_mode="compress-local", compressor=Identity(),
                            control_variate_step=0.2, oracle="full", step=0.5),
}


def _runs(algorithm, model, datas, kwargs, n_rounds=25):
    out = []
    for backend, n_threads in (("compiled", 1), ("compiled", 2), ("python", 1), ("python", 2)):
        h = algorithm(model, backend=backend, n_threads=n_threads, **kwargs).run(datas, n_rounds, seed=3,
                                                                                 evaluate_every=5)
        assert h.config["backend"] == backend
        out.append(h)
    return out


@needs_numba
@pytest.mark.parametrize("config", list(CONFIGS))
def test_compiled_and_python_backends_identical(fitted, clients, config):
    _, _, datas = clients
    runs = _runs(FedMM, fitted, datas, CONFIGS[config])
    assert any(len(r["active"]) < len(datas) for r in runs[0].records) or config == "alg4-local-full"
    for h in runs[1:]:
        assert h.equals(runs[0])


@needs_numba
def test_parameter_averaging_backends_identical(fitted, clients):
    _, _, datas = clients
    runs = _runs(ParameterAveraging, fitted, datas, CONFIGS["bernoulli-dither8-cv"])
    for h in runs[1:]:
        assert h.equals(runs[0])


# --------------------------------------------------------------------------- the helper itself
def _toy_statistic(c, theta, z, out):
    out[0] = z[0]


def _toy_T(c, s, theta):
    theta[0] = 1.0 / np.sqrt(s[0])


def _toy_project(c, s):
    if s[0] < c[0]:
        s[0] = c[0]


@needs_numba
def test_projection_and_a_toy_against_the_builtin_model():
    """Remark 1's toy as user code, with the projection onto [floor, ∞) through ``project``."""
    floor = 1e-3
    toy = NumbaModel(_toy_statistic, _toy_T, project=_toy_project, q=1, d=1, sample_size=1,
                     constants=[floor], init=lambda datas, rng: np.array([rng.uniform(0.5, 2.0)]),
                     objective=lambda data, theta: float(np.mean(data) * theta[0] + 1.0 / theta[0]))
    np.testing.assert_array_equal(toy.project(np.array([-2.0])), [floor])
    np.testing.assert_array_equal(toy.project(np.array([3.0])), [3.0])
    assert not toy.in_domain(np.array([-1.0])) and toy.in_domain(np.array([1.0]))
    rng = np.random.default_rng(1)
    datas = [rng.uniform(1, 2, 40), rng.uniform(5, 9, 25), rng.uniform(0.1, 0.5, 60)]
    kwargs = dict(participation_prob=0.7, compressor=StochasticRounding(bits=4), control_variate_step=0.1, batch_size=5,
                  step=("sqrt", 0.9))
    runs = _runs(FedMM, toy, datas, {k: v for k, v in kwargs.items()}, n_rounds=40)
    for h in runs[1:]:
        assert h.equals(runs[0])
    # the same runs with the built-in InverseToy agree to rounding (different summation order)
    builtin = FedMM(InverseToy(floor=floor), backend="python", **kwargs).run(datas, 40, seed=3)
    np.testing.assert_allclose(runs[0].state["theta"], builtin.state["theta"], rtol=1e-10)


def _status_statistic(c, theta, z, out):
    out[0] = z[0]
    if z[0] < 0:
        return 7  # a user-defined failure code
    return 0


def _raising_statistic(c, theta, z, out):
    out[0] = z[0]
    if z[0] < 0:
        raise ValueError("negative sample")


@needs_numba
@pytest.mark.parametrize("statistic", [_status_statistic, _raising_statistic], ids=["status", "exception"])
@pytest.mark.parametrize("backend", ["compiled", "python"])
def test_user_failures_become_errors(statistic, backend):
    model = NumbaModel(statistic, _toy_T, q=1, d=1, sample_size=1)
    good = np.full((4, 1), 2.0)
    np.testing.assert_array_equal(model.statistic(good, np.ones(1)), [2.0])
    with pytest.raises(ValueError, match="invalid argument"):
        FedMM(model, step=1.0, backend=backend).run([good, np.full((3, 1), -1.0)], 2, init=np.ones(1),
                                                    on_client_error="raise")
    # the default fault policy drops the failing client every round and goes on with the other
    h = FedMM(model, step=1.0, backend=backend).run([good, np.full((3, 1), -1.0)], 2, init=np.ones(1))
    assert [r["dropped"] for r in h.records] == [[1], [1]] and [r["active"] for r in h.records] == [[0], [0]]
    assert all("invalid argument" in r["drop_reasons"][0] for r in h.records)


def _float_T(c, s, theta):
    theta[0] = s[0]
    return 1.5


def _untyped(c, s, theta):
    theta[0] = {"a": object()}["a"]


@needs_numba
def test_argument_checks():
    with pytest.raises(TypeError, match="return None or an int"):
        NumbaModel(_toy_statistic, _float_T, q=1, d=1, sample_size=1).compiled_model()
    with pytest.raises(TypeError, match="could not compile the T function"):
        NumbaModel(_toy_statistic, _untyped, q=1, d=1, sample_size=1).compiled_model()
    with pytest.raises(TypeError, match="'T' to be a Python function"):
        NumbaModel(_toy_statistic, 3, q=1, d=1, sample_size=1)
    with pytest.raises(ValueError, match="2 constants"):
        NumbaModel(_toy_statistic, _toy_T, q=1, d=1, sample_size=1, n_constants=2).set_constants([1.0])
    with pytest.raises(RuntimeError, match="constants are not set"):
        NumbaModel(_toy_statistic, _toy_T, q=1, d=1, sample_size=1, n_constants=2).compiled_model()
    with pytest.raises(ValueError, match=r"shape \(N, 1\)"):
        NumbaModel(_toy_statistic, _toy_T, q=1, d=1, sample_size=1).check_data(np.ones((3, 2)))
    with pytest.raises(NotImplementedError, match="objective"):
        NumbaModel(_toy_statistic, _toy_T, q=1, d=1, sample_size=1).objective(np.ones((3, 1)), np.ones(1))


@needs_numba
def test_pickles_without_its_machine_code(fitted, clients):
    _, _, datas = clients
    w = np.linspace(-1, 1, fitted.d)
    clone = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(clone.statistic(datas[0], w), fitted.statistic(datas[0], w))
    np.testing.assert_array_equal(clone.T(w), fitted.T(w))


@needs_numba
def test_module_examples():
    import fedmm.models.numba_model as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@needs_numba
def test_jitted_functions_are_accepted():
    """A function the user already decorated with ``numba.njit`` gives the same numbers as the plain one."""
    import numba

    plain = NumbaModel(_toy_statistic, _toy_T, q=1, d=1, sample_size=1)
    jitted = NumbaModel(numba.njit(_toy_statistic), numba.njit(fastmath=False)(_toy_T), q=1, d=1, sample_size=1)
    data = np.random.default_rng(2).uniform(1, 2, (50, 1))
    np.testing.assert_array_equal(jitted.statistic(data, np.ones(1)), plain.statistic(data, np.ones(1)))
    np.testing.assert_array_equal(jitted.T(np.array([3.0])), plain.T(np.array([3.0])))
