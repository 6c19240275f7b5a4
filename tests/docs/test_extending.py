# SPDX-License-Identifier: BSD-3-Clause
"""docs/extending.md: its code blocks run as written, and its recipes do what the document says.

The recipes are executed from the Markdown file itself (``reference.extending_recipes``), so the
document cannot drift from what is tested.
"""
from pathlib import Path

import numpy as np
import pytest

from fedmm.algorithms import FedMM
from fedmm.compression import Identity, StochasticRounding
from fedmm.runtime import LocalRuntime
from reference import EXTENDING_DOC, extending_recipes, python_blocks


@pytest.fixture(scope="module")
def recipes():
    return extending_recipes()


def _clients(n_features=2, sizes=(20, 30, 40, 50), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=i, scale=1.0 + i, size=(n, n_features)) for i, n in enumerate(sizes)]


def test_every_block_runs_and_each_recipe_names_its_files(recipes):
    text = EXTENDING_DOC.read_text(encoding="utf-8")
    assert len(python_blocks(text)) >= 8  # two per recipe: the code and its check
    sections = text.split("\n## ")[1:]
    assert [s.split("\n", 1)[0] for s in sections] == ["1. Add a model", "2. Add a compressor",
                                                       "3. Add a runtime", "4. Add an algorithm"]
    for section in sections:
        assert "Touches one" in section, section.split("\n", 1)[0]


# --------------------------------------------------------------------------- 1. a model
@pytest.mark.parametrize("n_features", [1, 3])
def test_python_model_fixed_point_is_the_pooled_mean(recipes, n_features):
    # Full participation, no compression, step 1: Ŝ_1 = Σ μ_i mean_i = pooled mean (μ_i = N_i/N), and it stays.
    datas = _clients(n_features)
    pooled = np.concatenate(datas).mean(axis=0)
    history = FedMM(recipes.GaussianMean(n_features), step=1.0).run(datas, 4, seed=2, evaluate_every=1)
    np.testing.assert_allclose(history.state["theta"], pooled, rtol=0.0, atol=1e-12)
    np.testing.assert_allclose(history.state["S"], pooled, rtol=0.0, atol=1e-12)
    # The objective is minimal at the pooled mean: ½ (mean squared norm of the centred data).
    expected = 0.5 * np.mean(np.sum((np.concatenate(datas) - pooled) ** 2, axis=1))
    assert history["objective"][-1] == pytest.approx(expected, rel=1e-12)


def test_python_model_1d_data_and_errors(recipes):
    model = recipes.GaussianMean()
    assert model.check_data([1.0, 2.0, 4.0]).shape == (3, 1)
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        recipes.GaussianMean(2).check_data(np.zeros((5, 3)))
    datas = [np.array([1.0, 2.0]), np.array([10.0])]
    history = FedMM(model, step=1.0).run(datas, 1, seed=0)
    assert history.state["theta"][0] == pytest.approx(13.0 / 3.0, abs=1e-12)


# --------------------------------------------------------------------------- 2. a compressor
def _sparsified_moments(datas, n_rounds, p):
    """Mean and per-coordinate variance of ``Ŝ_T`` for FedMM with step 1, full participation, α = 0
    and a Bernoulli(p) sparsifier, full-batch oracles, ``Ŝ_0 = 0``.

    Per coordinate, with ``c = (1 − p)/p`` and ``S̄ = Σ μ_i S_i``: ``Ŝ_{t+1} = Ŝ_t + Σ μ_i (B_i/p)(S_i − Ŝ_t)``,
    so ``E[Ŝ_{t+1} | Ŝ_t] = S̄`` and ``Var(Ŝ_{t+1} | Ŝ_t) = c Σ μ_i² (S_i − Ŝ_t)²``; hence ``E[Ŝ_T] = S̄`` and
    ``v_1 = c Σ μ_i² S_i²``, ``v_{t+1} = c Σ μ_i² ((S_i − S̄)² + v_t)``.
    """
    means = np.stack([d.mean(axis=0) for d in datas])
    mu = np.array([len(d) for d in datas], dtype=np.float64)
    mu /= mu.sum()
    target = mu @ means
    c = (1.0 - p) / p
    v = c * (mu**2) @ means**2
    for _ in range(n_rounds - 1):
        v = c * (mu**2) @ ((means - target) ** 2 + v)
    return target, v


def test_python_compressor_end_to_end_is_unbiased_with_its_variance(recipes):
    # The pure-Python sparsifier on the wire path (encode per client, decode on the server) over many
    # seeds: the mean of Ŝ_T is S̄ within 5 standard errors of the variance the compressor implies.
    datas = _clients(3)
    p, n_rounds, n_seeds = 0.5, 3, 300
    algo = FedMM(recipes.GaussianMean(3), compressor=recipes.BernoulliSparsifier(p), step=1.0, backend="python")
    finals = np.stack([algo.run(datas, n_rounds, seed=s).state["S"] for s in range(n_seeds)])
    target, variance = _sparsified_moments(datas, n_rounds, p)
    np.testing.assert_array_less(np.abs(finals.mean(axis=0) - target), 5.0 * np.sqrt(variance / n_seeds))
    # The spread is the compressor's (not zero, not a different law): sample variance near the formula.
    ratio = finals.var(axis=0, ddof=1) / variance
    assert np.all((ratio > 0.6) & (ratio < 1.6)), ratio


def test_python_compressor_bytes_are_the_real_payloads(recipes):
    datas = _clients(2)
    comp = recipes.BernoulliSparsifier(0.25)
    history = FedMM(recipes.GaussianMean(2), compressor=comp, step=0.5, backend="python").run(datas, 30, seed=4)
    sizes = set(history["bytes_up"].tolist())
    # 4 clients, each 8 + 2 + 8·(kept ∈ {0, 1, 2}) bytes: the byte count varies with what was kept.
    assert len(sizes) > 1 and all(4 * 10 <= s <= 4 * comp.payload_nbytes(2) for s in sizes)


def test_python_compressor_decode_rejects_malformed_payloads(recipes):
    comp = recipes.BernoulliSparsifier(0.5)
    good = comp.encode(np.arange(1.0, 4.0), np.random.default_rng(1))
    for bad in [b"", good[:7], good[:-1], good + b"\x00", good[:8] + b"\x02" + good[9:],
                b"\xff" * 8 + good[8:]]:
        with pytest.raises(ValueError, match="malformed payload"):
            comp.decode(bad)
    np.testing.assert_array_equal(comp.decode(bytearray(good)), comp.decode(good))


def test_python_compressor_as_a_per_client_list(recipes):
    # One instance per client (the same law): the server decodes each payload with its client's own.
    datas = _clients(2)
    comps = [recipes.BernoulliSparsifier(1.0) for _ in datas]
    got = FedMM(recipes.GaussianMean(2), compressor=comps, step=0.5, backend="python").run(datas, 5, seed=0)
    ref = FedMM(recipes.GaussianMean(2), compressor=Identity(), step=0.5, backend="python").run(datas, 5, seed=0)
    np.testing.assert_array_equal(got.state["S"], ref.state["S"])


# Limitations of the 0.1 engine, fixed by the round-engine redesign (issue 13).
def test_python_compressor_with_oracle_control_variates(recipes):
    """The set-up exchange sends V_0,i in the Identity format, decoded as such whatever the compressor."""
    datas = _clients(2)
    h = FedMM(recipes.GaussianMean(2), compressor=recipes.BernoulliSparsifier(0.5), control_variate_step=0.5, step=0.5,
              control_variates="oracle", backend="python").run(datas, 2, seed=0)
    assert h.config["setup_bytes_up"] == len(datas) * Identity().payload_nbytes(2)


def test_mixed_python_and_builtin_compressors(recipes):
    """Each client's payload is decoded with its own compressor (a Python format next to built-in ones)."""
    datas = _clients(2)
    comps = [recipes.BernoulliSparsifier(1.0), Identity(), StochasticRounding(8), Identity()]
    h = FedMM(recipes.GaussianMean(2), compressor=comps, step=0.5).run(datas, 2, seed=0)
    assert h.config["backend"] == "python"
    assert h.records[0]["bytes_up"] == sum(c.payload_nbytes(2) for c in comps)


def test_python_compressor_on_the_default_backend(recipes):
    """A compressor with encode/decode only runs on the Python backend (no quantize needed)."""
    datas = _clients(2)
    h = FedMM(recipes.GaussianMean(2), compressor=recipes.BernoulliSparsifier(0.5), step=0.5).run(datas, 2, seed=0)
    assert h.config["backend"] == "python"


# --------------------------------------------------------------------------- 3. a runtime
def test_sequential_runtime_equals_local_runtime_with_partial_participation(recipes):
    datas = _clients(2)
    algo = FedMM(recipes.GaussianMean(2), participation_prob=0.5, compressor=StochasticRounding(4),
                 control_variate_step=0.3,
                 step=("sqrt", 0.5), batch_size=5, oracle="spider", k_in=2)
    ours = algo.run(datas, 8, seed=5, runtime=recipes.SequentialRuntime(), evaluate_every=3)
    assert ours.equals(algo.run(datas, 8, seed=5, runtime=LocalRuntime(compiled=False), evaluate_every=3))
    assert ours.equals(algo.run(datas, 8, seed=5, evaluate_every=3))  # the default backend


# --------------------------------------------------------------------------- 4. an algorithm
def test_fedgd_algorithm_on_both_runtimes(recipes):
    datas = _clients(2)
    pooled = np.concatenate(datas).mean(axis=0)
    runs = [recipes.FedGD(lr=0.5).run(datas, 60, runtime=rt)
            for rt in (recipes.SequentialRuntime(), LocalRuntime(compiled=False),
                       LocalRuntime(n_threads=2, compiled=False))]
    for h in runs:
        np.testing.assert_allclose(h.state["theta"], pooled, rtol=0.0, atol=1e-12)
        assert h.equals(runs[0])
    # θ_t − m = (1 − lr)^t (θ_0 − m): the recorded gradient norms halve every round.
    norms = runs[0]["grad_norm"]
    np.testing.assert_allclose(norms[1:10] / norms[:9], 0.5, rtol=1e-9)
    assert runs[0]["bytes_up"][0] == 4 * 16 and runs[0].records[0]["active"] == [0, 1, 2, 3]


# --------------------------------------------------------------------------- 4b. FedProx, one file of hooks
def test_the_fedprox_recipe_is_the_shipped_file_verbatim(recipes):
    # The recipe's hooks are python/fedmm/algorithms/fedprox.py from its imports on (the doc cannot drift from
    # the file that tests/algorithms/test_fedprox.py, test_runtime_ray.py and test_runtime_flower.py run), and they run.
    import fedmm.algorithms.fedprox as shipped

    source = Path(shipped.__file__).read_text(encoding="utf-8")
    hooks = source[source.index("from fedmm.algorithms.base import"):].replace(
        '__all__ = ["FedProx", "FedProxServer", "FedProxClient", "FedProxMessage"]\n\n\n', "")
    blocks = [body for _, body in python_blocks(EXTENDING_DOC.read_text(encoding="utf-8")) if "class FedProx(" in body]
    assert len(blocks) == 1 and blocks[0].rstrip().endswith(hooks.rstrip())
    assert recipes.FedProx.parameter_constraints["mu"].check(0.5, "mu") == 0.5
