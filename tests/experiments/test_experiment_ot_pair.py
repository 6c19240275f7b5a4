# SPDX-License-Identifier: BSD-3-Clause
"""``fedmm experiment ot-pair``: the trained-ICNN pair's weights, written and read back."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from fedmm.cli import main  # noqa: E402
from fedmm.data import icnn_map_benchmark  # noqa: E402
from fedmm.experiments.ot_pair import pair_hardness, target_mixture  # noqa: E402
from fedmm.models import ICNN  # noqa: E402
from reference import cli_status  # noqa: E402


def test_tiny_training_writes_weights_the_benchmark_reads(tmp_path):
    out = tmp_path / "pair"
    assert main(["experiment", "ot-pair", "--dims", "2", "--iterations", "30", "--samples", "300",
                 "--identity-steps", "5", "--quiet", "--out", str(out)]) == 0
    with np.load(out / "icnn_d2.npz", allow_pickle=False) as npz:
        params = npz["params"]
        architecture = json.loads(str(npz["architecture"]))
        provenance = json.loads(str(npz["provenance"]))
    assert params.dtype == np.float32 and np.isfinite(params).all()
    assert architecture == {"dim": 2, "hidden_sizes": [64, 64, 32], "rank": 1, "strong_convexity": 1e-4,
                            "activation": "celu"}
    assert provenance["iterations"] == 30 and provenance["spread"] == 3.0
    assert provenance["command"].startswith("fedmm experiment ot-pair --dims 2 --iterations 30")
    bench = icnn_map_benchmark(2, params=params.astype(np.float64), hidden_sizes=architecture["hidden_sizes"])
    # the summary's hardness is that of the pair the file defines, on the same points
    summary = json.loads((out / "ot_pair_summary.json").read_text())
    assert summary["pairs"][0]["hardness"] == pair_hardness(bench)
    # the rounded weights are the trained network's: the gradient equals JAX's on the float32 parameters
    x = bench.sample_source(50, seed=1)
    np.testing.assert_allclose(bench.true_map(x) / bench.output_scale,
                               ICNN(2).gradient(params.astype(np.float64), x), rtol=1e-12, atol=1e-12)


def test_target_mixture_is_standardized_and_deterministic():
    y = target_mixture(8, 20000, spread=3.0, seed=0)
    assert np.trace(np.cov(y, rowvar=False)) == pytest.approx(8, rel=1e-12)
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_array_equal(y, target_mixture(8, 20000, spread=3.0, seed=0))
    assert not np.array_equal(y, target_mixture(8, 20000, spread=3.0, seed=1))
    # ten clusters far apart: the within-cluster variance (standard deviations 0.3-0.8 against means of
    # spread 3, before the common rescaling) is a small part of the total
    labels = np.random.default_rng([0, 11]).integers(0, 10, 20000)
    within = sum(((y[labels == k] - y[labels == k].mean(axis=0)) ** 2).sum() for k in range(10)) / y.size
    assert within < 0.1 * np.trace(np.cov(y, rowvar=False)) / 8


@pytest.mark.parametrize("argv, option", [
    (["--dims", "0"], "--dims"),
    (["--iterations", "0"], "--iterations"),
    (["--spread", "-1"], "--spread"),
    (["--jobs", "0"], "--jobs"),
])
def test_bad_values_exit_2_naming_the_option(argv, option, tmp_path, capsys):
    assert cli_status(["experiment", "ot-pair", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
