# SPDX-License-Identifier: BSD-3-Clause
"""The engine-feature matrix of the federation skeleton (issue 24): every algorithm × runtime × {full, partial
participation where the method defines it} × {no compression, 8-bit} with one faulty client and an interrupt
then a resume from the checkpoint file.

Each case asserts the three properties that matter: the faulty client is dropped with its reason in every
round it is contacted (and never aggregated), the interrupted-then-resumed run equals the uninterrupted one
bit for bit, and every runtime gives the in-process History bit for bit.  The in-process runtime runs the
whole product; Ray runs every algorithm with partial participation (where defined) and 8-bit compression,
interrupted on Ray and resumed on Ray.  Flower is covered per family, faulty client included, in
tests/runtime/test_runtime_flower.py, with its interrupt-then-resume cases (FedMM with partial participation and 8-bit
compression, Scaffold, FedAvg, FedMM-OT): each Flower simulation starts Ray, so they share a module.
"""
import numpy as np
import pytest
from fault_injection import ANY_ROUND, FaultyClient
from reference import nonsmooth_toy_data

from fedmm.algorithms import FedAvg, FedMLS, FedMM, FedProx, ParameterAveraging, Scaffnew, Scaffold
from fedmm.compression import StochasticRounding
from fedmm.federation import LocalRuntime
from fedmm.models import GaussianMixture, InverseToy
from fedmm.models.nonsmooth import HingeSVM, L1Regression

# Ray drops handles of its helper processes while they run (a ResourceWarning, not ours).
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

N_ROUNDS = 5
STOP = 2  # the interrupt: Ctrl-C in the callback of round STOP
FAULTY = 1  # client 1 raises whenever it is contacted
PLAN = {(ANY_ROUND, FAULTY): "raise"}


def _gmm_data():
    rng = np.random.default_rng(2)
    return [rng.normal(size=(30, 2)) + i for i in range(4)]


def _toy_data():
    rng = np.random.default_rng(3)
    return [rng.uniform(1, 2, 40), rng.uniform(5, 9, 40), rng.uniform(2, 3, 30), rng.uniform(1, 4, 30)]


def _hinge_data():
    return nonsmooth_toy_data("hinge", n_clients=4, m=20, d=3, seed=3)


def _l1_data():
    return nonsmooth_toy_data("l1", n_clients=4, m=20, d=3, seed=4)


def _q8(compressed):
    return StochasticRounding(bits=8) if compressed else None


def _sampling(partial, m=3):
    return {"clients_per_round": m} if partial else {}


#: name -> (factory(partial, compressed, **extra), data, run keywords, whether the method defines client sampling)
ALGORITHMS = {
    "FedMM": (lambda partial, compressed, **kw: FedMM(GaussianMixture(2, "full"), batch_size=8,
                                                      control_variate_step=0.5, compressor=_q8(compressed),
                                                      **_sampling(partial), **kw),
              _gmm_data, dict(evaluate_every=2), True),
    "ParameterAveraging": (lambda partial, compressed, **kw: ParameterAveraging(
        InverseToy(), step=0.5, batch_size=10, compressor=_q8(compressed), **_sampling(partial), **kw),
        _toy_data, dict(evaluate_every=2), True),
    "FedMLS": (lambda partial, compressed: FedMLS(L1Regression(), prox_weight=("inverse", 1.0), radius=10.0,
                                                  batch_size=5, compressor=_q8(compressed)),
               _l1_data, dict(evaluate_every=2), False),
    "FedAvg": (lambda partial, compressed: FedAvg(HingeSVM(), local_lr=0.05, local_steps=2, batch_size=4,
                                                  compressor=_q8(compressed), **_sampling(partial)),
               _hinge_data, dict(evaluate_every=2), True),
    "FedProx": (lambda partial, compressed: FedProx(HingeSVM(), mu=0.3, local_lr=0.05, local_steps=2, batch_size=4,
                                                    compressor=_q8(compressed), **_sampling(partial)),
                _hinge_data, dict(evaluate_every=2), True),
    "Scaffold": (lambda partial, compressed: Scaffold(HingeSVM(), local_lr=0.05, local_steps=2,
                                                      compressor=_q8(compressed), **_sampling(partial)),
                 _hinge_data, dict(evaluate_every=1), True),
    "Scaffnew": (lambda partial, compressed: Scaffnew(L1Regression(), local_lr=0.05, communication_prob=0.5,
                                                      batch_size=3, compressor=_q8(compressed)),
                 _l1_data, dict(), False),
}
OT_ALGORITHMS = ("FedMMOT", "FedAdam")


class FaultyLocalRuntime(LocalRuntime):
    """The in-process runtime (Python backend) with client :data:`FAULTY` raising in every round."""

    def run(self, server, clients, n_rounds, **kwargs):
        return super().run(server, [FaultyClient(c, PLAN) for c in clients], n_rounds, **kwargs)


def _stop(t, state):
    if t == STOP:
        raise KeyboardInterrupt


def _cases():
    for name, (_, _, _, samples) in {**ALGORITHMS, **{n: (None, None, None, True) for n in OT_ALGORITHMS}}.items():
        for partial in ((False, True) if samples else (False,)):
            for compressed in (False, True):
                yield pytest.param(name, partial, compressed,
                                   id=f"{name}-{'partial' if partial else 'full'}-{'8bit' if compressed else 'raw'}")


def _setup(name, partial, compressed, request):
    """``(make, datas, run keywords)`` of a case."""
    if name in OT_ALGORITHMS:
        from fedmm.algorithms import FedAdam, FedMMOT

        problem, datas, target = request.getfixturevalue("ot_toy")  # tests/conftest.py
        cls = FedMMOT if name == "FedMMOT" else FedAdam
        extra = {"control_variate_step": 0.5} if name == "FedMMOT" else {}

        def make():
            return cls(problem, local_lr=0.05, identity_steps=5, server_steps=1, compressor=_q8(compressed),
                       **_sampling(partial, 2), **extra)
        return make, datas, dict(target=target)
    factory, data, kw, _ = ALGORITHMS[name]
    return (lambda: factory(partial, compressed)), data(), kw


def _assert_faulty_client_dropped(history):
    contacted = [r for r in history.records if FAULTY in r["dropped"]]
    assert contacted, "the faulty client was never contacted"
    for record in history.records:
        assert FAULTY not in record["active"]
        if FAULTY in record["dropped"]:
            reason = record["drop_reasons"][record["dropped"].index(FAULTY)]
            assert reason.startswith("RuntimeError: injected failure"), reason


@pytest.mark.parametrize("name, partial, compressed", list(_cases()))
def test_in_process_faulty_client_interrupt_and_resume(name, partial, compressed, request, tmp_path):
    make, datas, kw = _setup(name, partial, compressed, request)
    full = make().run(datas, N_ROUNDS, seed=11, runtime=FaultyLocalRuntime(compiled=False), **kw)
    assert len(full) == N_ROUNDS
    _assert_faulty_client_dropped(full)
    if partial:
        assert any(len(r["active"]) + len(r["dropped"]) < len(datas) for r in full.records)
    path = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt) as info:
        make().run(datas, N_ROUNDS, seed=11, runtime=FaultyLocalRuntime(compiled=False), callback=_stop,
                   checkpoint_path=path, **kw)
    assert len(info.value.history) == STOP + 1
    resumed = make().run(datas, N_ROUNDS, runtime=FaultyLocalRuntime(compiled=False), resume=path, **kw)
    assert resumed.equals(full)
    for key in full.state:
        assert np.array_equal(np.asarray(resumed.state[key]), np.asarray(full.state[key])), key


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("name", ["FedMM", "ParameterAveraging"])
def test_compiled_backend_equals_python_and_resumes(name, partial, compressed, tmp_path):
    # The compiled backend runs whole stretches in C: the same History as the Python backend, and an
    # interrupted compiled run resumes bit for bit (a fault wrapper would force the Python backend, so the
    # faulty client is the Python column's).
    factory, data, kw, _ = ALGORITHMS[name]
    datas = data()
    python = factory(partial, compressed, backend="python").run(datas, N_ROUNDS, seed=12, **kw)
    compiled = factory(partial, compressed, backend="compiled").run(datas, N_ROUNDS, seed=12, **kw)
    assert compiled.config["backend"] == "compiled" and python.config["backend"] == "python"
    assert compiled.equals(python)
    path = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):
        factory(partial, compressed, backend="compiled").run(datas, N_ROUNDS, seed=12, callback=_stop,
                                                             checkpoint_path=path, **kw)
    resumed = factory(partial, compressed, backend="compiled").run(datas, N_ROUNDS, resume=path, **kw)
    assert resumed.equals(python)


# --------------------------------------------------------------------------- Ray
def _faulty_ray(**kwargs):
    from fedmm.runtime import RayRuntime

    class FaultyRayRuntime(RayRuntime):
        """Ray with client :data:`FAULTY` raising in every round (the wrapper travels to the actor)."""

        def run(self, server, clients, n_rounds, **kw):
            return super().run(server, [FaultyClient(c, PLAN) for c in clients], n_rounds, **kw)

    return FaultyRayRuntime(**kwargs)


@pytest.mark.integration
@pytest.mark.parametrize("name", [*ALGORITHMS, *OT_ALGORITHMS])
def test_ray_equals_in_process_with_a_faulty_client_and_resumes_on_ray(name, ray_session, request, tmp_path):
    samples = name in OT_ALGORITHMS or ALGORITHMS[name][3]
    make, datas, kw = _setup(name, samples, True, request)
    reference = make().run(datas, N_ROUNDS, seed=13, runtime=FaultyLocalRuntime(compiled=False), **kw)
    path = tmp_path / "ray.ckpt"
    with pytest.raises(KeyboardInterrupt):
        make().run(datas, N_ROUNDS, seed=13, runtime=_faulty_ray(n_actors=1), callback=_stop, checkpoint_path=path,
                   **kw)
    resumed = make().run(datas, N_ROUNDS, runtime=_faulty_ray(n_actors=1), resume=path, **kw)
    _assert_faulty_client_dropped(resumed)
    assert resumed.equals(reference)
