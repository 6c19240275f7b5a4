# SPDX-License-Identifier: BSD-3-Clause
"""The EM family on the compiled backend (issue 13, item 2): GaussianMixture (tied, known and full
covariances), PoissonLatent (both parameterizations) and InverseToy.

* Bit identity: a FedMM (and Θ-space baseline) run on the Python backend equals the compiled
  backend, on 1 and 2 threads, across both participation rules, Algorithm 4 (server and client
  coins), the three compressors and control variates on and off (Histories, final server and
  client states), through :func:`reference.assert_backends_agree`.
* Correctness of the compiled callbacks against independent references: scikit-learn's
  ``GaussianMixture`` E-step and log-likelihood, textbook EM steps written from scipy.stats
  densities, the Poisson posterior from scipy.stats, and the closed forms of Remark 1.
"""
import numpy as np
import pytest
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from fedmm import kernels
from fedmm.algorithms import FedMM, ParameterAveraging
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.models import DictionaryLearning, GaussianMixture, InverseToy, PoissonLatent
from reference import (
    assert_backends_agree,
    gmm_full_em_step,
    participation_kwargs,
    gmm_tied_em_step,
    gmm_tied_loglik,
    poisson_latent_posterior,
    project_capped_simplex_bisection,
)

SUPPORT = np.array([-1.0, -0.3, 0.4, 1.0])
PROBS = np.array([0.1, 0.4, 0.3, 0.2])


def _mixture(rng, n, p, G, spread=3.0):
    centers = rng.normal(0.0, spread, (G, p))
    A = np.eye(p) + 0.3 * rng.normal(size=(p, p))
    return centers[rng.integers(0, G, n)] + rng.normal(size=(n, p)) @ A.T


def _split(Y, sizes):
    bounds = np.cumsum([0, *sizes])
    return [np.ascontiguousarray(Y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


# Six clients of unequal sizes (one smaller than the minibatch of 7: its batch is capped).
SIZES = (40, 25, 60, 5, 45, 30)


def _gmm_datas(p=3, G=3, seed=0):
    rng = np.random.default_rng(seed)
    return _split(_mixture(rng, sum(SIZES), p, G), SIZES)


def _poisson_datas(seed=1):
    rng = np.random.default_rng(seed)
    thetas = (0.2, 0.6, 1.0, 1.4, 0.4, 0.8)
    return [rng.poisson(np.exp(th + rng.choice(SUPPORT, size=m, p=PROBS))).astype(np.float64)
            for m, th in zip(SIZES, thetas)]


def _toy_datas(seed=2):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 3.0 + i, m) for i, m in enumerate(SIZES)]


def _known_covariance():
    return np.array([[1.0, 0.3], [0.3, 0.7]])


MODELS = {
    "gmm-tied": (lambda: GaussianMixture(3), lambda: _gmm_datas()),
    "gmm-known": (lambda: GaussianMixture(2, known_covariance=_known_covariance()), lambda: _gmm_datas(p=2, G=2)),
    "gmm-full": (lambda: GaussianMixture(3, covariance="full"), lambda: _gmm_datas()),
    "poisson-joint": (lambda: PoissonLatent(SUPPORT, PROBS, lam=0.5), _poisson_datas),
    "poisson-explicit": (lambda: PoissonLatent(SUPPORT, PROBS, lam=0.5, parameterization="explicit_mean"),
                         _poisson_datas),
    "toy": (lambda: InverseToy(), _toy_datas),
}
COMPRESSORS = {"identity": Identity, "dither8": lambda: StochasticRounding(bits=8),
               "blockp4": lambda: BlockQuantizer(block_size=4)}
MODES = [("select", 3), ("select", 0.5), ("compress", 3), ("compress", 0.5), ("compress-local", 0.5)]


# The Θ-space baseline is left out for mixtures with estimated covariances (see the docstring below).
_CASES = [(name, algorithm) for name in MODELS for algorithm in (FedMM, ParameterAveraging)
          if not (algorithm is ParameterAveraging and name in ("gmm-tied", "gmm-full"))]


@pytest.mark.parametrize("name,algorithm", _CASES,
                         ids=[f"{n}-{'fedmm' if a is FedMM else 'baseline'}" for n, a in _CASES])
@pytest.mark.parametrize("mode,participation", MODES,
                         ids=["count", "bernoulli", "alg4-count", "alg4-bernoulli", "alg4-local"])
@pytest.mark.parametrize("compressor", list(COMPRESSORS))
@pytest.mark.parametrize("alpha", [0.0, 0.05], ids=["no-cv", "cv"])
def test_python_and_compiled_backends_agree(name, alpha, compressor, mode, participation, algorithm):
    """Same Histories, server and client states on both backends, 1 and 2 threads, bit for bit.

    The Θ-space baseline is not run on mixtures with estimated covariances: averaging (π, μ, Σ)
    with compressed, control-variate corrected messages leaves the positive-definite cone (block-p
    quantization makes Σ indefinite within a few rounds here) and the model has no projection
    onto Θ, so the baseline is not a valid algorithm for them;
    :func:`test_gmm_parameter_averaging_backends_agree_while_theta_stays_valid` covers the
    configurations where it provably stays in Θ.  With a known covariance the Σ block of every
    message is exactly zero and the baseline is well defined.
    """
    make_model, make_datas = MODELS[name]
    model, datas = make_model(), make_datas()
    S0 = model.init_statistic(datas, np.random.default_rng(3))

    def make(backend, n_threads):
        return algorithm(model, **participation_kwargs(participation), compressor=COMPRESSORS[compressor](),
                         control_variate_step=alpha, step=0.1, batch_size=7, n_threads=n_threads, backend=backend,
                         participation_mode=mode, control_variates="oracle" if alpha else "zero")

    ref = assert_backends_agree(make, datas, 12, seed=5, init=S0, evaluate_every=5)
    assert len(ref) == 12 and np.isfinite(ref.column("objective")[[4, 9, 11]]).all()
    assert sum(len(r["active"]) for r in ref.records) > 0


@pytest.mark.parametrize("mode,participation", MODES,
                         ids=["count", "bernoulli", "alg4-count", "alg4-bernoulli", "alg4-local"])
@pytest.mark.parametrize("covariance", ["tied", "full"])
def test_gmm_parameter_averaging_backends_agree_while_theta_stays_valid(covariance, mode, participation):
    """The baseline on mixtures where Θ is provably kept: uncompressed messages, no control variates
    and γ = 0.1, so θ_{t+1} = (1 − γc) θ_t + γ Σ_active (μ_i/p) θ_i with γc ≤ 0.2 here is a positive
    combination of valid parameters (positive weights, positive-definite covariances)."""
    model, datas = GaussianMixture(3, covariance=covariance), _gmm_datas()
    S0 = model.init_statistic(datas, np.random.default_rng(3))

    def make(backend, n_threads):
        return ParameterAveraging(model, **participation_kwargs(participation), compressor=Identity(),
                                  control_variate_step=0.0,
                                  step=0.1, batch_size=7, n_threads=n_threads, backend=backend,
                                  participation_mode=mode)

    assert_backends_agree(make, datas, 12, seed=5, init=S0, evaluate_every=5)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging], ids=["fedmm", "baseline"])
def test_backends_agree_with_full_oracles_weights_and_decreasing_steps(algorithm, name):
    """Full local batches, user weights μ_i, γ_t = 1/t and all clients: the other oracle of the engine."""
    make_model, make_datas = MODELS[name]
    model, datas = make_model(), make_datas()
    S0 = model.init_statistic(datas, np.random.default_rng(4))

    def make(backend, n_threads):
        return algorithm(model, compressor=StochasticRounding(bits=6), control_variate_step=0.1, step="1/t",
                         batch_size=None, weights=np.arange(1.0, len(datas) + 1.0), n_threads=n_threads,
                         backend=backend)

    assert_backends_agree(make, datas, 9, seed=6, init=S0)


@pytest.mark.parametrize("covariance", ["tied", "full"])
@pytest.mark.parametrize("p,G", [(1, 1), (1, 3), (4, 1), (20, 6)], ids=["p1G1", "p1G3", "p4G1", "p20G6"])
def test_gmm_backends_agree_on_degenerate_and_larger_shapes(covariance, p, G):
    """p = 1 or G = 1 (row- and column-major coincide), and a larger case with chunked full passes
    (clients of more than FEDMM_GMM_CHUNK = 256 rows)."""
    rng = np.random.default_rng(7)
    sizes = (300, 40, 270) if p == 20 else (30, 20, 25)
    datas = _split(_mixture(rng, sum(sizes), p, G, spread=4.0), sizes)
    model = GaussianMixture(G, covariance=covariance, reg_covar=1e-3)
    S0 = model.init_statistic(datas, np.random.default_rng(8))

    def make(backend, n_threads):
        return FedMM(model, clients_per_round=2, compressor=BlockQuantizer(block_size=4), control_variate_step=0.05,
                     step=0.2,
                     batch_size=None if p == 20 else 6, n_threads=n_threads, backend=backend,
                     control_variates="oracle")

    assert_backends_agree(make, datas, 6, seed=9, init=S0)


def _dictionary_datas():
    rng = np.random.default_rng(4)
    return [np.ascontiguousarray(rng.standard_normal((m, 5))) for m in SIZES]


# Every model with a compiled form: its class, constructor arguments and data.
COMPILED_MODELS = {
    "dictionary": (DictionaryLearning, (3, 0.1, 0.2), {}, _dictionary_datas),
    "gmm": (GaussianMixture, (3,), {}, _gmm_datas),
    "poisson": (PoissonLatent, (SUPPORT, PROBS), {"lam": 0.5}, _poisson_datas),
    "toy": (InverseToy, (), {}, _toy_datas),
}


def _shifted(base):
    """A subclass of ``base`` whose Python statistic differs from the compiled one (every entry + 0.25)."""

    class Shifted(base):
        def statistic(self, data, theta, idx=None, **kwargs):
            return super().statistic(data, theta, idx, **kwargs) + 0.25

    return Shifted


@pytest.mark.parametrize("name", sorted(COMPILED_MODELS))
def test_a_subclass_that_overrides_the_statistic_runs_it_on_every_backend(name):
    """backend='auto' falls back to the Python backend, naming the override; 'compiled' refuses it."""
    cls, args, kwargs, datas = COMPILED_MODELS[name]
    model = _shifted(cls)(*args, **kwargs)
    datas = datas()

    def algo(backend):
        return FedMM(model, clients_per_round=3, step=0.5, batch_size=7, backend=backend, start="model")

    auto, python = algo("auto").run(datas, 4, seed=3), algo("python").run(datas, 4, seed=3)
    assert auto.config["backend"] == "python"
    assert auto.config["backend_reason"].startswith("Shifted overrides statistic in Python")
    assert auto.equals(python)
    # the override was run: its shift moves the result away from the base model's run
    plain = FedMM(cls(*args, **kwargs), clients_per_round=3, step=0.5, batch_size=7, backend="python",
                  start="model").run(datas, 4, seed=3)
    assert not np.array_equal(auto.state["S"], plain.state["S"])
    with pytest.raises(ValueError, match="backend='compiled' cannot run .*Shifted overrides statistic"):
        algo("compiled").run(datas, 4, seed=3)
    assert model.compiled_overrides() == ("statistic",) and cls(*args, **kwargs).compiled_overrides() == ()


def test_compiled_overrides_names_every_bypassed_method_and_respects_a_redefined_compiled_model():
    class Mixin:
        def T(self, s):
            return super().T(s)

    class Both(Mixin, InverseToy):
        def project(self, s):
            return super().project(s)

    class Declared(Both):
        def compiled_model(self):  # declares that the compiled form computes its T and project
            return super().compiled_model()

    assert Both().compiled_overrides() == ("T", "project")
    assert Declared().compiled_overrides() == ()
    toy = InverseToy()
    toy.statistic = lambda data, theta, idx=None: np.array([1.0])  # an instance attribute counts too
    assert toy.compiled_overrides() == ("statistic",)
    datas = _toy_datas()
    h = FedMM(Both(), clients_per_round=3, step=0.5, batch_size=4).run(datas, 3, seed=0)
    assert h.config["backend"] == "python" and "overrides T, project in Python" in h.config["backend_reason"]
    assert FedMM(Declared(), clients_per_round=3, step=0.5, batch_size=4).run(datas, 3, seed=0
                                                                             ).config["backend"] == "compiled"


def test_models_pickle_without_their_compiled_callbacks():
    import pickle

    Y = _gmm_datas()[0]
    for model, data in ((GaussianMixture(3).fit_global_moments([Y]), Y),
                        (PoissonLatent(SUPPORT, PROBS), _poisson_datas()[0]), (InverseToy(), _toy_datas()[0])):
        theta = model.T(model.init_statistic([data], np.random.default_rng(0)))
        back = pickle.loads(pickle.dumps(model))
        np.testing.assert_array_equal(back.statistic(data, theta), model.statistic(data, theta))


def test_compiled_model_is_rebuilt_when_the_constants_change():
    rng = np.random.default_rng(10)
    datas = _gmm_datas()
    model = GaussianMixture(3)
    assert model.compiled_model() is None  # p unknown
    model = GaussianMixture(3, n_features=3)
    assert model.compiled_model() is None  # tied covariance to estimate: M₂ unknown
    S0 = model.init_statistic(datas, rng)
    first = model.compiled_model()
    assert first is model.compiled_model()  # cached
    theta = model.T(S0)
    model.fit_global_moments([2.0 * d for d in datas])  # new M₂: new callbacks, new T
    assert model.compiled_model() is not first
    np.testing.assert_allclose(model.T(S0).covariance - theta.covariance,
                               model.second_moment - model.second_moment / 4.0, atol=1e-12)
    pois = PoissonLatent(SUPPORT, PROBS, parameterization="explicit_mean")
    assert pois.compiled_model() is None  # E_π[Z] unknown
    pois.fit_global_moments(_poisson_datas())
    assert pois.compiled_model() is not None


# --------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("covariance", ["tied", "full"])
@pytest.mark.parametrize("p,G", [(2, 3), (5, 4), (12, 8)])
def test_gmm_statistic_is_sklearns_estep(covariance, p, G):
    """The compiled E-step (several chunks of rows; plain loops for small G p, BLAS otherwise) against
    scikit-learn's responsibilities."""
    rng = np.random.default_rng(11)
    Y = _mixture(rng, 700, p, G)
    model = GaussianMixture(G, covariance=covariance)
    theta = model.T(model.statistic(Y, model.T(model.init_statistic([Y], rng))))
    sk = SkGaussianMixture(G, covariance_type=covariance)
    sk.weights_, sk.means_, sk.covariances_ = theta.weights, theta.means, theta.covariance
    inv = np.linalg.inv(np.linalg.cholesky(theta.covariance))
    sk.precisions_cholesky_ = inv.T if covariance == "tied" else inv.transpose(0, 2, 1)
    resp = sk.predict_proba(Y)
    s = model.statistic(Y, theta)
    np.testing.assert_allclose(s[:G], resp.mean(axis=0), rtol=0, atol=1e-13)
    np.testing.assert_allclose(s[G:G + G * p], (resp.T @ Y / len(Y)).ravel(), rtol=0, atol=1e-12)
    if covariance == "full":
        second = np.einsum("jl,ji,jk->lik", resp, Y, Y) / len(Y)
        np.testing.assert_allclose(s[G + G * p:], second.ravel(), rtol=0, atol=1e-11)
    idx = rng.choice(len(Y), 37, replace=False)
    np.testing.assert_allclose(model.statistic(Y, theta, idx)[:G], resp[idx].mean(axis=0), rtol=0, atol=1e-13)
    assert model.objective(Y, theta) == pytest.approx(-sk.score(Y), rel=1e-13)


@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize("case", ["tied", "known", "full"])
def test_one_round_with_one_client_is_one_exact_em_step(case, backend):
    """p = 1, γ = 1, α = 0, Identity, full oracle, one client: Ŝ₁ = s̄(θ₀) and θ₁ = T(Ŝ₁) is one
    textbook EM iteration (scipy.stats densities), to rounding."""
    rng = np.random.default_rng(12)
    p, G = 3, 3
    Y = _mixture(rng, 500, p, G)
    if case == "known":
        cov = np.array([[1.0, 0.2, 0.0], [0.2, 1.5, 0.1], [0.0, 0.1, 0.8]])
        model = GaussianMixture(G, known_covariance=cov, reg_covar=0.0)
    else:
        model = GaussianMixture(G, covariance="tied" if case != "full" else "full", reg_covar=0.0)
    S0 = model.init_statistic([Y], rng)
    theta0 = model.T(S0)
    h = FedMM(model, compressor=Identity(), control_variate_step=0.0, step=1.0, batch_size=None,
              backend=backend).run([Y], 1, seed=0, init=S0)
    assert h.config["backend"] == backend
    theta1 = model.theta_from_vector(h.state["theta"])
    if case == "full":
        w, mu, cov, _ = gmm_full_em_step(Y, theta0.weights, theta0.means, theta0.covariance)
    else:
        w, mu, cov = gmm_tied_em_step(Y, theta0.weights, theta0.means, theta0.covariance)
        if case == "known":
            cov = theta0.covariance
    np.testing.assert_allclose(theta1.weights, w, rtol=0, atol=1e-14)
    np.testing.assert_allclose(theta1.means, mu, rtol=0, atol=2e-14 * np.abs(mu).max())
    np.testing.assert_allclose(theta1.covariance, cov, rtol=0, atol=2e-14 * np.abs(cov).max())
    if case == "tied":  # monotone EM on the reference log-likelihood
        assert gmm_tied_loglik(Y, w, mu, cov) >= gmm_tied_loglik(Y, theta0.weights, theta0.means, theta0.covariance)


@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize("parameterization", ["joint", "explicit_mean"])
def test_poisson_one_round_is_one_exact_em_step(parameterization, backend):
    """One full-oracle round with γ = 1 on one client: θ₁ = ln(mean Z / (λ + mean E[e^h | Z, θ₀])),
    with the posterior from scipy.stats."""
    rng = np.random.default_rng(13)
    Z = rng.poisson(np.exp(0.7 + rng.choice(SUPPORT, size=400, p=PROBS))).astype(np.float64)
    model = PoissonLatent(SUPPORT, PROBS, lam=0.5, parameterization=parameterization)
    S0 = model.init_statistic([Z], rng)
    theta0 = model.T(S0)
    h = FedMM(model, compressor=Identity(), control_variate_step=0.0, step=1.0, batch_size=None,
              backend=backend).run([Z], 1, seed=0, init=S0)
    assert h.config["backend"] == backend
    post = poisson_latent_posterior(Z, theta0, SUPPORT, PROBS) @ np.exp(SUPPORT)
    expected = np.log(Z.mean() / (0.5 + post.mean()))
    assert h.state["theta"][0] == pytest.approx(expected, rel=0, abs=1e-14)
    s = model.statistic(Z, theta0)
    np.testing.assert_allclose(s[-1], -post.mean(), rtol=1e-14)


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_inverse_toy_rounds_reach_the_closed_forms(backend):
    """Remark 1 with full oracles and γ = 1: S-space gives (Σ μ_i E_i Z)^{-1/2}, Θ-space Σ μ_i (E_i Z)^{-1/2}."""
    datas = _toy_datas()
    mu = np.array(SIZES, dtype=np.float64) / sum(SIZES)
    means = np.array([d.mean() for d in datas])
    kw = dict(compressor=Identity(), control_variate_step=0.0, step=1.0, batch_size=None, backend=backend)
    h = FedMM(InverseToy(), **kw).run(datas, 2, seed=0)
    g = ParameterAveraging(InverseToy(), **kw).run(datas, 2, seed=0)
    assert h.state["theta"][0] == pytest.approx((mu @ means) ** -0.5, rel=1e-15)
    assert g.state["theta"][0] == pytest.approx(mu @ means**-0.5, rel=1e-15)


def test_compiled_callbacks_equal_the_model_methods():
    """CompiledModel.statistic/project/T/derive are what the Python model computes (same numbers)."""
    rng = np.random.default_rng(14)
    Y = _mixture(rng, 80, 3, 2)
    for model, data in ((GaussianMixture(2), Y), (GaussianMixture(2, covariance="full"), Y),
                        (PoissonLatent(SUPPORT, PROBS), _poisson_datas()[0]), (InverseToy(), _toy_datas()[0])):
        S0 = model.init_statistic([data], rng)
        compiled = model.compiled_model()
        theta = model.T(S0)
        buf = model.compiled_theta(theta, compiled)
        np.testing.assert_array_equal(compiled.T(S0), buf)
        np.testing.assert_array_equal(compiled.derive(model.theta_vector(theta)), buf)
        rows = model.compiled_data(data)
        idx = np.array([3, 1, 4])
        np.testing.assert_array_equal(compiled.statistic(buf, rows, idx)[0], model.statistic(data, theta, idx))
        bad = S0.copy()
        bad[0] = -0.25
        np.testing.assert_array_equal(compiled.project(bad), model.project(bad))
        assert model.in_domain(model.project(bad))


def test_parameters_without_a_compiled_buffer_and_argument_errors():
    import dataclasses

    rng = np.random.default_rng(16)
    Y = _mixture(rng, 60, 2, 2)
    model = GaussianMixture(2)
    theta = model.T(model.init_statistic([Y], rng))
    assert not theta.weights.flags.writeable  # views into the read-only compiled parameter
    plain = dataclasses.replace(theta, buffer=None)  # e.g. built by hand: derived again from (π, μ, Σ)
    np.testing.assert_array_equal(model.statistic(Y, plain), model.statistic(Y, theta))
    np.testing.assert_array_equal(model.statistic(Y, theta, np.arange(60) % 2 == 0),
                                  model.statistic(Y, theta, np.arange(0, 60, 2)))
    with pytest.raises(ValueError, match="project it first"):
        model.T(model.layout.join(weights=[1.2, -0.2], means=np.zeros((2, 2))))
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        model.statistic(Y[:, :1], theta)
    with pytest.raises(IndexError):
        model.statistic(Y, theta, np.array([0, 60]))
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        model.parameters([0.5, 0.5], np.zeros((2, 2)), np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="project it first"):
        InverseToy().T(np.array([0.0]))
    with pytest.raises(ValueError, match="project s first"):
        PoissonLatent(SUPPORT, PROBS).T(np.array([1.0, 2.0]))


def test_capped_simplex_and_eigenvalue_floor_kernels():
    rng = np.random.default_rng(15)
    for n in (1, 2, 5, 40):
        for _ in range(20):
            v = rng.normal(size=n) * 3
            floor = 0.5 / n * rng.random()
            got = kernels.project_capped_simplex(v, floor)
            np.testing.assert_allclose(got, project_capped_simplex_bisection(v, floor), atol=1e-12)
            assert got.min() >= floor and got.sum() == pytest.approx(1.0, abs=1e-13)
    with pytest.raises(ValueError, match="floor"):
        kernels.project_capped_simplex([0.5, 0.5], 0.5)
    with pytest.raises(ValueError, match="finite|NaN"):
        kernels.project_capped_simplex([np.nan, 0.5], 0.0)
    for p in (1, 2, 6):
        M = rng.normal(size=(3, p, p))
        A = M @ M.transpose(0, 2, 1) + 0.1 * np.eye(p)
        A[1] -= 2.0 * np.eye(p)  # indefinite
        out, clipped = kernels.floor_eigenvalues(A, 0.05)
        assert clipped.tolist() == [np.linalg.eigvalsh(a).min() < 0.05 for a in A]
        for a, o, c in zip(A, out, clipped):
            lam, V = np.linalg.eigh(a)
            ref = (V * np.maximum(lam, 0.05)) @ V.T
            if c:
                np.testing.assert_allclose(o, ref, atol=1e-12 * max(1.0, np.abs(a).max()))
                np.testing.assert_array_equal(o, o.T)
            else:
                np.testing.assert_array_equal(o, a)  # untouched, bit for bit
        with pytest.raises(np.linalg.LinAlgError):
            kernels.floor_eigenvalues(A[1], 0.0)
