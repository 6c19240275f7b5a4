# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures and settings shared by several test modules.

JAX's persistent compilation cache: the optimal-transport tests compile the same small programs again in
every process they start (Ray actors, Flower's simulated nodes, the scripts run in a fresh interpreter);
a cache directory for the session, inherited by those processes through the environment, lets each
program compile once.  The compiled programs are the same, so every result is too.  A directory the caller
set (``JAX_COMPILATION_CACHE_DIR``) is left as it is.

One local Ray for the session (``ray_session``): starting Ray costs seconds (far more on a loaded machine), and
the Ray runtime's tests, the Flower simulations and the federation matrix all run on the same two-CPU,
loopback-only cluster; each run makes its own actors and kills them at its end.
"""
import gc
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import pytest

_JAX_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = tempfile.mkdtemp(prefix="fedmm-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    # every program, however small or quick to compile (the defaults keep only those over one second)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    if "jax" in sys.modules:  # imported before this file (a plugin): its configuration is already read
        import jax

        jax.config.update("jax_compilation_cache_dir", _JAX_CACHE)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture(scope="session")
def _ray_shutdown_at_the_end():
    """Shuts Ray down at the session's end if ``ray_session`` started it (and nothing shut it down since)."""
    started = []
    yield started
    ray = sys.modules.get("ray")
    if started and ray is not None and ray.is_initialized():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # Ray's handles of its helper processes
            ray.shutdown()
            gc.collect()


@pytest.fixture
def ray_session(_ray_shutdown_at_the_end):
    """The ``ray`` module, with the session's local Ray up: two CPUs, bound to 127.0.0.1
    (:func:`fedmm.runtime.ray.init_local_ray`), its workers on the test session's ``sys.path``.

    Started by the first test that asks for it and kept for the next ones (a test that needs Ray in
    another state, e.g. a documentation page run as a reader would, shuts it down; the next user starts it
    again).  Skips without the ``ray`` extra.
    """
    ray = pytest.importorskip("ray", reason="the 'ray' extra is not installed: pip install 'fedmm[ray]'")
    from fedmm.runtime.ray import init_local_ray

    if not ray.is_initialized():
        init_local_ray(num_cpus=2)
        _ray_shutdown_at_the_end.append(True)
    assert ray.cluster_resources().get("CPU") == 2, "the session's Ray has two CPUs (a Ray started elsewhere?)"
    return ray


def pytest_unconfigure(config):
    if _JAX_CACHE is not None:
        shutil.rmtree(_JAX_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def ot_toy():
    """``(problem, datas, target)``: one small optimal-transport problem (two features, an [8, 8] ICNN) with
    four clients of 30, 35, 40 and 45 samples and a target sample of 40 points.

    Session-scoped: the problem's steps compile once for every module that runs FedMM-OT or FedAdam on it
    (tests/algorithms/test_algorithm_base.py, tests/federation/test_matrix.py).  Skips without the ``ot`` extra.
    """
    pytest.importorskip("jax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
    pytest.importorskip("optax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
    from fedmm.models import TransportProblem

    problem = TransportProblem(2, hidden_sizes=[8, 8], batch_size=16)
    rng = np.random.default_rng(3)
    datas = [rng.normal(loc=i, size=(30 + 5 * i, 2)) for i in range(4)]
    target = rng.normal(loc=1.0, scale=0.7, size=(40, 2))
    return problem, datas, target
