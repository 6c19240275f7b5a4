# SPDX-License-Identifier: BSD-3-Clause
"""FedMM-OT and FedAdam on a chosen JAX device: the ``device`` argument, ``jax.default_device``, the record
in ``History.config`` and float64 everywhere (issue 28 item 6)."""
import pickle

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
pytest.importorskip("optax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')

from fedmm.algorithms import FedAdam, FedMMOT  # noqa: E402
from fedmm.models import TransportProblem  # noqa: E402
from fedmm.models.ot import check_device, device_info  # noqa: E402

CPU = jax.devices("cpu")[0]
CPU_ONLY = jax.devices()[0].platform == "cpu"


@pytest.fixture(scope="module")
def problem():
    return TransportProblem(2, hidden_sizes=[8, 8], batch_size=16)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    return [rng.normal(loc=i, size=(30, 2)) for i in range(3)], rng.normal(1.0, 0.7, size=(50, 2))


def _algorithms(problem, device=None):
    return [FedMMOT(problem, clients_per_round=2, control_variate_step=0.5, theta_steps=3, local_lr=0.02,
                    identity_steps=10, device=device),
            FedAdam(problem, participation_prob=0.7, server_lr=0.01, local_lr=0.02, identity_steps=10,
                    device=device)]


def _evaluate(m):
    x = np.linspace(-1.0, 1.0, 8).reshape(4, 2)
    return {"norm": float(np.linalg.norm(m(x))), "inverse": float(np.linalg.norm(m.inverse(x)))}


def test_config_records_the_device(problem, data):
    datas, target = data
    default = jax.devices()[0]
    for algo in _algorithms(problem):
        assert algo.device is None
        h = algo.run(datas, 1, target=target, seed=0)
        assert h.config["device"] == {"platform": default.platform, "device_kind": default.device_kind}
    for algo in _algorithms(problem, CPU):
        assert algo.device is CPU
        h = algo.run(datas, 1, target=target, seed=0)
        assert h.config["device"] == {"platform": "cpu", "device_kind": CPU.device_kind}
        assert h.state["omega"].dtype == np.float64 and h.state["theta"].dtype == np.float64


def test_jax_default_device_is_recorded():
    with jax.default_device(CPU):
        assert device_info() == {"platform": "cpu", "device_kind": CPU.device_kind}
    with jax.default_device("cpu"):  # JAX also takes a platform name here
        assert device_info()["platform"] == "cpu"


@pytest.mark.parametrize("bad, error", [(3, TypeError), (["cpu"], TypeError), ("no-such-platform", ValueError)])
def test_invalid_device_is_refused(problem, bad, error):
    for cls in (FedMMOT, FedAdam):
        with pytest.raises(error, match="'device'"):
            cls(problem, device=bad)
    with pytest.raises(error, match="'device'"):
        check_device(bad)


def test_platform_name_resolves_to_its_first_device(problem):
    assert FedMMOT(problem, device="cpu").device is CPU
    assert check_device(None) is None and check_device(CPU) is CPU


@pytest.mark.skipif(not CPU_ONLY, reason="JAX's default device here is not the CPU")
def test_pinned_cpu_equals_the_default_bit_for_bit(problem, data):
    datas, target = data
    for default, pinned, named in zip(_algorithms(problem), _algorithms(problem, CPU), _algorithms(problem, "cpu")):
        ref = default.run(datas, 4, target=target, seed=3, evaluate=_evaluate, evaluate_every=2)
        for algo in (pinned, named):
            got = algo.run(datas, 4, target=target, seed=3, evaluate=_evaluate, evaluate_every=2)
            assert got.equals(ref), algo.name
            assert got.config == ref.config
            for k in ("omega", "theta"):
                assert np.array_equal(got.state[k], ref.state[k]), (algo.name, k)
        with jax.default_device(CPU):
            assert default.run(datas, 4, target=target, seed=3, evaluate=_evaluate, evaluate_every=2).equals(ref)


def test_pinned_device_survives_pickling(problem, data):
    datas, target = data
    for algo in _algorithms(problem, CPU):
        copy = pickle.loads(pickle.dumps(algo))
        assert copy.device is CPU
        _, clients = algo.build(datas, target=target, seed=0)
        assert pickle.loads(pickle.dumps(clients[0])).steps.device is CPU
        assert copy.run(datas, 2, target=target, seed=1).equals(algo.run(datas, 2, target=target, seed=1))
