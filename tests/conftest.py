# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures and settings shared by several test modules.

JAX's persistent compilation cache: the optimal-transport tests compile the same small programs again in
every process they start (Ray actors, Flower's simulated nodes, the scripts run in a fresh interpreter);
a cache directory for the session, inherited by those processes through the environment, lets each
program compile once.  The compiled programs are the same, so every result is too.  A directory the caller
set (``JAX_COMPILATION_CACHE_DIR``) is left as it is.
"""
import os
import shutil
import sys
import tempfile

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
