# SPDX-License-Identifier: BSD-3-Clause
"""Client-rounds per second of a numba user model (issue 13 item 3).

The model is the worked example ``examples/numba_logistic.py`` (logistic
regression with Böhning's quadratic majorizer, p = 20 features + intercept),
timed three ways in the same run:

- ``numba-compiled``: the numba cfuncs called by the compiled round engine
  (whole stretches of rounds in ``engine.c``, GIL released, one thread);
- ``numba-python``: the same model on the Python backend (``Client.step`` with
  real payload bytes and ``Server.aggregate``; the statistic still runs in the
  engine's compiled per-sample loop, through ``CompiledModel.statistic``);
- ``c-compiled``: a hand-written C per-sample statistic and ``T`` of the same
  cost (the same arithmetic in the same order, lengths as compile-time
  constants as in the numba cfuncs), built at benchmark time with the system
  C compiler into a temporary shared library (``$CC``, default ``cc``; flags
  ``$FEDMM_BENCH_CFLAGS``, default ``-O2``, the package's optimization level) and
  passed to :func:`fedmm.kernels.sample_model` by address.

Two settings: ``minibatch`` (100 clients of 200 rows, 75% Bernoulli
participation, minibatches of 20, 8-bit stochastic rounding, α = 0.01: the
FedEM Fig. 1 shape, where the engine's own work is a large part of a client
round) and ``full-batch`` (20 clients of 500 rows, every client, full local
batches, no compression: the per-sample function is nearly all the work).
``extra_info`` holds ``client_rounds_per_s`` and, for the numba runs, the
ratio of their median time to the C model's (``time_ratio_vs_c``; target ≤ 2
for ``numba-compiled``), and the same from the calling thread's CPU time
(``client_rounds_per_cpu_s``, ``cpu_time_ratio_vs_c``: with one engine thread
every round runs on the calling thread, so this is the work done, whatever
else the host runs).

The host's speed drifts on a shared machine, which skews a ratio of medians
taken from separate tests, so ``test_numba_vs_c_paired`` also alternates the C
and numba runs (compiled backend) within each timed call and reports the median
over pairs of (numba time / C time) as ``paired_time_ratio_vs_c`` (and
``paired_cpu_ratio_vs_c`` from CPU times), for both settings and for ``statistic-only``: one
``CompiledModel.statistic`` call over
100,000 rows, the per-sample functions and the engine's averaging loop alone.

Run: ``python -m pytest benchmarks/bench_numba.py --benchmark-only``
(``--benchmark-json FILE`` keeps ``extra_info``).
"""
from __future__ import annotations

import ctypes
import os
import time
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

try:
    import numba  # noqa: F401
except ImportError:
    pytest.skip("numba is not installed (pip install 'fedmm[numba]')", allow_module_level=True)

from fedmm import kernels  # noqa: E402
from fedmm.algorithms import FedMM  # noqa: E402
from fedmm.compression import Identity, StochasticRounding  # noqa: E402

from _timing import median_seconds, per_second  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples"))
from numba_logistic import BohningLogistic  # noqa: E402

P, RHO = 20, 1e-2

SETTINGS = {
    "minibatch": dict(n_clients=100, n_rows=200, n_rounds=100,
                      algo=dict(participation_prob=0.75, batch_size=20, compressor=StochasticRounding(bits=8),
                                control_variate_step=0.01, step=0.5)),
    "full-batch": dict(n_clients=20, n_rows=500, n_rounds=50,
                       algo=dict(participation_prob=1.0, oracle="full", compressor=Identity(), step=1.0)),
}
IMPLS = ["c-compiled", "numba-compiled", "numba-python"]  # C first: the numba runs report their ratio to it

C_SOURCE = r"""
#include <math.h>
/* The example's cfuncs by hand: P features, D = P + 1 (intercept), row z = (x, y). */
int logistic_statistic(const double *constants, const double *w, const double *z, double *out)
{
    (void)constants;
    double u = 0.0;
    for (int k = 0; k < P; ++k) u += z[k] * w[k];
    u += w[P];
    const double y = z[P];
    const double a = 0.25 * u + y / (1.0 + exp(y * u));
    for (int k = 0; k < P; ++k) out[k] = a * z[k];
    out[P] = a;
    return 0;
}

int logistic_T(const double *constants, const double *s, double *w)
{
    for (int i = 0; i < D; ++i) {
        double acc = 0.0;
        for (int j = 0; j < D; ++j) acc += constants[i * D + j] * s[j];
        w[i] = acc;
    }
    return 0;
}
"""

_MEDIANS: dict[tuple[str, str], tuple[float, float]] = {}  # (wall, CPU) medians


class CLogistic(BohningLogistic):
    """The example model with its compiled functions replaced by the hand-written C ones."""

    def __init__(self, library: ctypes.CDLL) -> None:
        super().__init__(P, RHO)
        self.library = library
        self._c_model = None

    def set_constants(self, constants):
        super().set_constants(constants)
        self._c_model = None

    def compiled_model(self):
        if self._c_model is None:
            address = lambda name: ctypes.cast(getattr(self.library, name), ctypes.c_void_p).value  # noqa: E731
            self._c_model = kernels.sample_model(self.q, self.d, self.sample_size,
                                                 statistic=address("logistic_statistic"), T=address("logistic_T"),
                                                 constants=self.constants, name="hand-written C logistic")
        return self._c_model


@pytest.fixture(scope="module")
def c_library(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc!r}) for the hand-written C model")
    folder = tmp_path_factory.mktemp("c_logistic")
    source, library = folder / "logistic.c", folder / "liblogistic.so"
    source.write_text(C_SOURCE)
    flags = shlex.split(os.environ.get("FEDMM_BENCH_CFLAGS", "-O2"))
    subprocess.run([cc, *flags, "-std=c99", "-fPIC", "-shared", f"-DP={P}", f"-DD={P + 1}", str(source), "-o",
                    str(library), "-lm"], check=True)
    return ctypes.CDLL(str(library))


def _clients(n_clients, n_rows, seed=0):
    """Heterogeneous clients: shifted features, labels from one logistic model."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(P) / np.sqrt(P)
    datas = []
    for _ in range(n_clients):
        X = rng.standard_normal((n_rows, P)) + rng.normal(0.0, 1.0, P)
        y = rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(X @ w + 0.3)))
        datas.append(BohningLogistic.client_data(X, y))
    return datas


def _model(impl, c_library, datas):
    model = CLogistic(c_library) if impl == "c-compiled" else BohningLogistic(P, RHO)
    model.fit_global_moments(datas)
    model.compiled_model()  # numba compiles here, outside the timing
    return model


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_numba_client_rounds(benchmark, c_library, setting, impl):
    cfg = SETTINGS[setting]
    datas = _clients(cfg["n_clients"], cfg["n_rows"])
    model = _model(impl, c_library, datas)
    backend = "python" if impl == "numba-python" else "compiled"
    algo = FedMM(model, backend=backend, **cfg["algo"])
    S0 = np.zeros(model.q)
    # same answer before timing: the C and numba models agree (they do the same arithmetic)
    reference = FedMM(_model("numba-compiled", c_library, datas), **cfg["algo"]).run(datas, 5, seed=0, init=S0)
    np.testing.assert_allclose(algo.run(datas, 5, seed=0, init=S0).state["theta"], reference.state["theta"],
                               rtol=1e-12, atol=1e-14)
    histories, cpu = [], []

    def run():
        start = time.thread_time()
        histories.append(algo.run(datas, cfg["n_rounds"], seed=0, init=S0))
        cpu.append(time.thread_time() - start)

    benchmark.group = f"numba-logistic-{setting}"
    benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1)
    assert histories[-1].config["backend"] == backend
    client_rounds = sum(len(r["active"]) for r in histories[-1].records)
    median = median_seconds(benchmark)
    info = dict(setting=setting, impl=impl, backend=backend, n_clients=cfg["n_clients"], rounds=cfg["n_rounds"],
                client_rounds=client_rounds, client_rounds_per_s=per_second(client_rounds, benchmark))
    if median is not None:
        cpu_median = float(np.median(cpu[1:]))  # the warm-up call left out
        info["client_rounds_per_cpu_s"] = client_rounds / cpu_median
        _MEDIANS[setting, impl] = (median, cpu_median)
        c_medians = _MEDIANS.get((setting, "c-compiled"))
        if impl != "c-compiled" and c_medians is not None:
            info["time_ratio_vs_c"] = median / c_medians[0]
            info["cpu_time_ratio_vs_c"] = cpu_median / c_medians[1]
    benchmark.extra_info.update(info)


PAIRED = ["minibatch", "full-batch", "statistic-only"]


@pytest.mark.parametrize("setting", PAIRED)
def test_numba_vs_c_paired(benchmark, c_library, setting):
    """numba and C runs alternated, so that both see the same machine state (see the module docstring)."""
    if setting == "statistic-only":
        datas = _clients(1, 100_000)
        w = np.random.default_rng(1).standard_normal(P + 1) / np.sqrt(P)
        calls = {impl: (lambda c=_model(impl, c_library, datas).compiled_model(): c.statistic(w, datas[0]))
                 for impl in ("c-compiled", "numba-compiled")}
        np.testing.assert_allclose(calls["numba-compiled"]()[0], calls["c-compiled"]()[0], rtol=1e-12, atol=1e-14)
    else:
        cfg = SETTINGS[setting]
        datas = _clients(cfg["n_clients"], cfg["n_rows"])
        S0 = np.zeros(P + 1)
        calls = {impl: (lambda a=FedMM(_model(impl, c_library, datas), backend="compiled", **cfg["algo"]):
                        a.run(datas, cfg["n_rounds"], seed=0, init=S0))
                 for impl in ("c-compiled", "numba-compiled")}
    ratios, cpu_ratios = [], []

    def pair():
        wall, cpu = {}, {}
        for impl, call in (calls.items() if len(ratios) % 2 == 0 else reversed(list(calls.items()))):
            start, start_cpu = time.perf_counter(), time.thread_time()
            call()
            wall[impl], cpu[impl] = time.perf_counter() - start, time.thread_time() - start_cpu
        ratios.append(wall["numba-compiled"] / wall["c-compiled"])
        cpu_ratios.append(cpu["numba-compiled"] / cpu["c-compiled"])

    benchmark.group = "numba-vs-c-paired"
    benchmark.pedantic(pair, rounds=15, iterations=1, warmup_rounds=2)
    kept = slice(2, None) if len(ratios) > 2 else slice(None)  # the warm-up pairs left out
    benchmark.extra_info.update(
        setting=setting, paired_time_ratio_vs_c=float(np.median(ratios[kept])),
        paired_ratio_quartiles=[float(q) for q in np.percentile(ratios[kept], [25, 75])],
        # CPU time of the calling thread (one engine thread): insensitive to the host's other load
        paired_cpu_ratio_vs_c=float(np.median(cpu_ratios[kept])),
        paired_cpu_ratio_quartiles=[float(q) for q in np.percentile(cpu_ratios[kept], [25, 75])])
