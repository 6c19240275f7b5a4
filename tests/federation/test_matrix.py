# SPDX-License-Identifier: BSD-3-Clause
"""The engine-feature matrix of the federation skeleton (issue 24): every algorithm × runtime × {full, partial
participation where the method defines it} × {no compression, 8-bit} with one faulty client and an interrupt
then a resume from the checkpoint file.

Each case asserts the three properties that matter: the faulty client is dropped with its reason in every
round it is contacted (and never aggregated), the interrupted-then-resumed run equals the uninterrupted one
bit for bit, and every runtime gives the in-process History bit for bit.  The in-process runtime runs the
whole product, with each backend of the methods that have two (FedMM and its Θ-space baseline: Python and
compiled rounds, the compiled column without the fault wrapper, which forces Python rounds; FedMLS: NumPy and
compiled local loops); Ray runs every cell too, interrupted on Ray and resumed on Ray.  The cells are
tests/matrix_cases.py's; Flower runs every cell of every algorithm, interrupted and resumed on Flower, in
tests/runtime/test_runtime_flower.py (its simulations grouped so that one set of simulated nodes serves many cells).
"""
import numpy as np
import pytest
from fault_injection import FaultyClient
from matrix_cases import (ALGORITHMS, N_ROUNDS, OT_ALGORITHMS, PLAN, STOP, FaultyLocalRuntime, all_cells,
                          assert_faulty_client_dropped, cell_id, ot_algorithm, stop_callback)

# Ray drops handles of its helper processes while they run (a ResourceWarning, not ours).
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _cases():
    for name, partial, compressed in all_cells():
        yield pytest.param(name, partial, compressed, id=cell_id(name, partial, compressed))


def _setup(name, partial, compressed, request):
    """``(make, datas, run keywords)`` of a case."""
    if name in OT_ALGORITHMS:
        problem, datas, target = request.getfixturevalue("ot_toy")  # tests/conftest.py
        return (lambda: ot_algorithm(name, problem, partial, compressed)), datas, dict(target=target)
    factory, data, kw, _ = ALGORITHMS[name]
    return (lambda: factory(partial, compressed)), data(), kw


def _interrupt_and_resume_in_process(make, datas, kw, path, partial=False):
    """The uninterrupted in-process run with client :data:`FAULTY` raising, then the same run interrupted after
    round :data:`STOP` and resumed from its checkpoint at ``path``: both Histories (the resumed one is checked
    equal to the uninterrupted one bit for bit, final state included)."""
    full = make().run(datas, N_ROUNDS, seed=11, runtime=FaultyLocalRuntime(compiled=False), **kw)
    assert len(full) == N_ROUNDS
    assert_faulty_client_dropped(full)
    if partial:
        assert any(len(r["active"]) + len(r["dropped"]) < len(datas) for r in full.records)
    with pytest.raises(KeyboardInterrupt) as info:
        make().run(datas, N_ROUNDS, seed=11, runtime=FaultyLocalRuntime(compiled=False), callback=stop_callback,
                   checkpoint_path=path, **kw)
    assert len(info.value.history) == STOP + 1
    resumed = make().run(datas, N_ROUNDS, runtime=FaultyLocalRuntime(compiled=False), resume=path, **kw)
    assert resumed.equals(full)
    for key in full.state:
        assert np.array_equal(np.asarray(resumed.state[key]), np.asarray(full.state[key])), key
    return full, resumed


@pytest.mark.parametrize("name, partial, compressed", list(_cases()))
def test_in_process_faulty_client_interrupt_and_resume(name, partial, compressed, request, tmp_path):
    make, datas, kw = _setup(name, partial, compressed, request)
    _interrupt_and_resume_in_process(make, datas, kw, tmp_path / "run.ckpt", partial)


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
        factory(partial, compressed, backend="compiled").run(datas, N_ROUNDS, seed=12, callback=stop_callback,
                                                             checkpoint_path=path, **kw)
    resumed = factory(partial, compressed, backend="compiled").run(datas, N_ROUNDS, resume=path, **kw)
    assert resumed.equals(python)


@pytest.mark.parametrize("compressed", [False, True])
def test_fedmls_python_backend_faulty_client_interrupt_and_resume(compressed, tmp_path):
    # FedMLS's other backend: the matrix's FedMLS cells resolve backend="auto" to the compiled local loops
    # (L1Regression has a kernel_loss); the NumPy loops get the same cells (faulty client, interrupt, resume).
    factory, data, kw, _ = ALGORITHMS["FedMLS"]
    datas = data()

    def make():
        return factory(False, compressed, backend="python")

    path = tmp_path / "run.ckpt"
    full, resumed = _interrupt_and_resume_in_process(make, datas, kw, path)
    assert full.config["backend"] == "python" and resumed.config["backend"] == "python"
    # a checkpoint of one backend does not resume on the other (their numbers differ by rounding)
    compiled = factory(False, compressed, backend="compiled")
    with pytest.raises(ValueError, match="backend"):
        compiled.run(datas, N_ROUNDS, runtime=FaultyLocalRuntime(compiled=False), resume=path, **kw)


# --------------------------------------------------------------------------- Ray
def _faulty_ray(**kwargs):
    from fedmm.runtime import RayRuntime

    class FaultyRayRuntime(RayRuntime):
        """Ray with client :data:`FAULTY` raising in every round (the wrapper travels to the actor)."""

        def run(self, server, clients, n_rounds, **kw):
            return super().run(server, [FaultyClient(c, PLAN) for c in clients], n_rounds, **kw)

    return FaultyRayRuntime(**kwargs)


@pytest.mark.integration
@pytest.mark.parametrize("name, partial, compressed", list(_cases()))
def test_ray_equals_in_process_with_a_faulty_client_and_resumes_on_ray(name, partial, compressed, ray_session,
                                                                       request, tmp_path):
    # Every cell on Ray: interrupted on Ray after round STOP, resumed on Ray from the checkpoint, the History of the
    # uninterrupted in-process run bit for bit, the faulty client dropped with its reason.
    make, datas, kw = _setup(name, partial, compressed, request)
    reference = make().run(datas, N_ROUNDS, seed=13, runtime=FaultyLocalRuntime(compiled=False), **kw)
    path = tmp_path / "ray.ckpt"
    with pytest.raises(KeyboardInterrupt) as info:
        make().run(datas, N_ROUNDS, seed=13, runtime=_faulty_ray(n_actors=1), callback=stop_callback,
                   checkpoint_path=path, **kw)
    assert len(info.value.history) == STOP + 1
    resumed = make().run(datas, N_ROUNDS, runtime=_faulty_ray(n_actors=1), resume=path, **kw)
    assert_faulty_client_dropped(resumed)
    if partial:
        assert any(len(r["active"]) + len(r["dropped"]) < len(datas) for r in resumed.records)
    assert resumed.equals(reference)
    for key in reference.state:
        assert np.array_equal(np.asarray(resumed.state[key]), np.asarray(reference.state[key])), key
