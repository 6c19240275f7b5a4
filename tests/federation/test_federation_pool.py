# SPDX-License-Identifier: BSD-3-Clause
"""The compiled engine's worker pool (``pool.c``, :class:`fedmm.kernels.WorkerPool`): numbers that do
not depend on the thread count, failures that surface as with one thread, and no thread left behind."""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from fedmm import kernels
from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.federation import LocalRuntime
from fedmm.history import History
from fedmm.models import DictionaryLearning

P, K, LAM, ETA = 8, 5, 0.1, 0.2


def _datas(n_clients=7, seed=0):
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((P, K))
    out = []
    for i in range(n_clients):
        n = 30 + 3 * i
        codes = rng.standard_normal((n, K)) * (rng.random((n, K)) < 0.5)
        out.append(np.ascontiguousarray(codes @ D.T + 0.05 * rng.standard_normal((n, P))))
    return out


def _algorithm(**kwargs):
    return FedMM(DictionaryLearning(K, LAM, ETA), clients_per_round=5, compressor=StochasticRounding(bits=8),
                 control_variate_step=0.05, step=("sqrt", 0.05), batch_size=6, **kwargs)


def _set_up(datas, seed=0):
    server, clients = _algorithm().build(datas, seed=seed)
    setup = server.setup_message()
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    return server, clients


def _state(server, clients):
    return [np.array(server.S, copy=True), np.array(server.V, copy=True), np.array(server.theta, copy=True)] + [
        np.array(c.V, copy=True) for c in clients]


def _n_os_threads(expected=None, wait=2.0):
    """This process's OS threads; with ``expected``, the count once it equals ``expected`` or after ``wait``
    seconds.  A joined thread can still be listed for a moment: ``pthread_join`` returns when the kernel
    clears the thread's id, before it removes the thread from ``/proc/self/task``."""
    count = len(os.listdir("/proc/self/task"))
    deadline = time.monotonic() + wait
    while expected is not None and count != expected and time.monotonic() < deadline:
        time.sleep(0.01)
        count = len(os.listdir("/proc/self/task"))
    return count


def _os_thread_names():
    """``{tid: name}`` of this process's OS threads (to name the ones a failing check finds extra)."""
    names = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as fh:
                names[tid] = fh.read().strip()
        except FileNotFoundError:  # exited meanwhile
            pass
    return names


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="no /proc/self/task")


@pytest.mark.parametrize("n_threads", [2, 3, 5])
def test_histories_equal_the_one_thread_run_bit_for_bit(n_threads):
    datas = _datas()
    one = _algorithm(n_threads=1).run(datas, 30, seed=4, evaluate_every=10)
    many = _algorithm(n_threads=n_threads).run(datas, 30, seed=4, evaluate_every=10)
    assert one.config["backend"] == many.config["backend"] == "compiled"
    assert many.equals(one)
    for key in ("S", "theta"):
        np.testing.assert_array_equal(many.state[key], one.state[key])


@pytest.mark.parametrize("n_threads", [2, 3])
def test_the_parallel_weighted_sum_gives_the_one_thread_and_python_bits(n_threads):
    # 40 senders of 21 * 24 + 21**2 = 945 values: past the size where the aggregation's weighted sum runs on
    # the pool by column blocks (every column still sums the senders in client order)
    rng = np.random.default_rng(3)
    D = rng.standard_normal((24, 21))
    datas = [np.ascontiguousarray((rng.standard_normal((12, 21)) * (rng.random((12, 21)) < 0.3)) @ D.T)
             for _ in range(50)]

    def run(backend, n):
        return FedMM(DictionaryLearning(21, LAM, ETA), clients_per_round=40, compressor=StochasticRounding(bits=8),
                     control_variate_step=0.05, step=("sqrt", 0.05), batch_size=4, backend=backend, n_threads=n,
                     start="model").run(datas, 4, seed=1)

    ref = run("python", 1)
    for h in (run("compiled", 1), run("compiled", n_threads)):
        assert h.config["backend"] == "compiled"
        assert h.equals(ref)
        for key in ("S", "theta"):
            np.testing.assert_array_equal(h.state[key], ref.state[key])


def test_one_pool_across_calls_equals_pools_made_per_call():
    """Stretches sharing one WorkerPool give the state of one-thread stretches, bit for bit."""
    datas = _datas()
    states = []
    for pool in (None, kernels.WorkerPool(3)):
        server, clients = _set_up(datas)
        t = 0
        for n_rounds in (1, 4, 2, 7):  # several calls on the same workers
            done = server.simulate_rounds(clients, t, n_rounds, 1, pool=pool)
            assert len(done) == n_rounds
            t += n_rounds
        states.append(_state(server, clients))
        if pool is not None:
            pool.close()
            assert pool.closed
    for a, b in zip(*states, strict=True):
        np.testing.assert_array_equal(a, b)


def _first_failure(n_threads):
    """Rounds one at a time until client 3 (NaN data) fails: the round, the result, the states around it."""
    server, clients = _set_up(_datas())
    clients[3].data[0, 0] = np.nan  # after the set-up exchange: the compiled round meets it first
    for t in range(40):
        before = _state(server, clients)
        done = server.simulate_rounds(clients, t, 1, n_threads)
        if "failed" in done[-1]:
            return t, done, before, _state(server, clients)
    raise AssertionError("client 3 was never contacted")


@pytest.mark.parametrize("n_threads", [2, 3])
def test_a_failing_client_round_is_reported_and_undone_as_with_one_thread(n_threads):
    """A client whose round fails (NaN data: a non-finite statistic) ends the stretch at that round with
    the failure of the one-thread run, and the round leaves no trace."""
    t1, done1, _, _ = _first_failure(1)
    t, done, before, after = _first_failure(n_threads)
    assert (t, done) == (t1, done1)
    assert done == [{"failed": done[0]["failed"], "t": t, "client": 3}]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_failing_client_is_dropped_by_the_runtime_whatever_the_thread_count():
    """A compiled round that fails on 3 threads is rerun on the Python backend, which drops the client,
    and the run equals the one-thread run."""
    runs = []
    for n_threads in (1, 3):
        server, clients = _set_up(_datas())
        clients[3].data[:] = np.inf
        h = LocalRuntime(n_threads=n_threads).run(server, clients, 12, history=History("FedMM"))
        runs.append((h, _state(server, clients)))
    (h1, state1), (h3, state3) = runs
    assert any(3 in r["dropped"] for r in h1.records)
    for r1, r3 in zip(h1.records, h3.records, strict=True):
        for key in ("t", "active", "dropped", "drop_reasons", "gamma", "E_s", "E_ps"):
            assert r1.get(key) == r3.get(key), (r1["t"], key)
    for a, b in zip(state1, state3, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_proc
def test_no_thread_outlives_a_run_or_a_closed_pool():
    datas = _datas()
    _algorithm().run(datas, 2, seed=0)  # threads that outlive any first run (not the pool's)
    before_os, before_py, names = _n_os_threads(), threading.active_count(), _os_thread_names()
    _algorithm(n_threads=3).run(datas, 10, seed=0)
    extra = {t: n for t, n in _os_thread_names().items() if t not in names}
    assert (_n_os_threads(before_os), threading.active_count()) == (before_os, before_py), extra
    server, clients = _set_up(datas)
    server.simulate_rounds(clients, 0, 3, 4)  # a pool made for the call
    assert _n_os_threads(before_os) == before_os
    pool = kernels.WorkerPool(4)
    assert _n_os_threads(before_os + pool.n_threads - 1) == before_os + pool.n_threads - 1
    server.simulate_rounds(clients, 3, 3, pool=pool)
    pool.close()
    pool.close()  # idempotent
    assert _n_os_threads(before_os) == before_os
    with kernels.WorkerPool(2) as pool:
        assert not pool.closed
    assert pool.closed and _n_os_threads(before_os) == before_os


@needs_proc
def test_a_run_interrupted_in_a_callback_leaves_no_thread():
    datas = _datas()
    _algorithm().run(datas, 2, seed=0)  # threads that outlive any first run (not the pool's)
    before = _n_os_threads()

    def stop(t, state):
        if t == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        _algorithm().run(datas, 20, seed=0, runtime=LocalRuntime(n_threads=3), callback=stop)
    assert len(info.value.history.records) == 5
    assert _n_os_threads(before) == before


def test_worker_pool_arguments_and_state_are_checked():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="'n_threads'"):
            kernels.WorkerPool(bad)
    with pytest.raises(ValueError, match="'spin_ns'"):
        kernels.WorkerPool(2, spin_ns=-1)
    pool = kernels.WorkerPool(2, spin_ns=0)
    assert (pool.n_threads, pool.spin_ns) == (2, 0)
    assert repr(pool) == "WorkerPool(n_threads=2, spin_ns=0, open)"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(pool)
    pool.close()
    server, clients = _set_up(_datas())
    with pytest.raises(ValueError, match="closed WorkerPool"):
        server.simulate_rounds(clients, 0, 2, pool=pool)
    with pytest.raises(TypeError, match="'pool'"):
        server.simulate_rounds(clients, 0, 2, pool=2)


def test_spin_length_does_not_change_the_numbers():
    datas = _datas()
    states = []
    for spin_ns in (0, 1_000_000):
        server, clients = _set_up(datas)
        with kernels.WorkerPool(2, spin_ns=spin_ns) as pool:
            server.simulate_rounds(clients, 0, 15, pool=pool)
        states.append(_state(server, clients))
    for a, b in zip(*states, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt", reason="POSIX signals needed")
def test_ctrl_c_stops_a_two_thread_compiled_run_with_its_completed_rounds():
    """A real SIGINT reaches the main thread (the workers block signals), which stops at the end of the
    stretch with the completed rounds in the History and every worker joined."""
    code = textwrap.dedent("""
        import os, signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, sys.argv[1])
        from test_federation_pool import _algorithm, _datas, _n_os_threads
        datas = _datas()
        _algorithm().run(datas, 2, seed=0)  # threads that outlive any first run (not the pool's)
        before = _n_os_threads()
        print("start", flush=True)
        try:
            _algorithm(n_threads=2).run(datas, 10**7, seed=0)
        except KeyboardInterrupt as exc:
            h = exc.history
            assert h.config["backend"] == "compiled" and len(h.records) > 0
            assert [r["t"] for r in h.records] == list(range(len(h.records)))
            assert _n_os_threads(before) == before, (_n_os_threads(), before)
            print("interrupted", len(h.records), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "start"
        time.sleep(1.5)
        assert proc.poll() is None, "the run ended before the interrupt: the test proves nothing"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert out.startswith("interrupted"), (out, err[-2000:])
