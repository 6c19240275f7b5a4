# SPDX-License-Identifier: BSD-3-Clause
"""Bounded and interruptible work (issue 15, item 3).

Every compiled loop with a user-set count stops on Ctrl-C (checked in a child
process that receives SIGINT) or is refused up front, and sizes that cannot fit
in memory are refused before anything is allocated, with the size named.
Results for normal sizes do not depend on the slicing or polling (bit for bit).
"""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from reference import nonsmooth_toy_data

import fedmm
import fedmm._kernels_engine as kernels_engine
import fedmm.kernels as kernels
from fedmm.algorithms import FedMM
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold, ShareOracle
from fedmm.data import split_homogeneous
from fedmm.models import DictionaryLearning
from fedmm.models.nonsmooth import HingeSVM

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt",
                                reason="POSIX signals needed")


def _interrupted(code: str, *, wait: float = 1.0, limit: float = 10.0) -> str:
    """Run ``code`` in a child Python, send SIGINT ``wait`` s after it prints 'start', and return its
    stderr; asserts it ended with KeyboardInterrupt within ``limit`` s (the child is killed by PID)."""
    # the child restores Python's SIGINT handler: a shell's background job inherits SIGINT ignored
    prologue = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    proc = subprocess.Popen([sys.executable, "-c", prologue + textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "start", (line, proc.stderr.read() if proc.poll() is not None else "")
        time.sleep(wait)
        assert proc.poll() is None, "the call finished before the interrupt: the test proves nothing"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=limit)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err, err[-2000:]
    return err


# -- fedmls_local_round ---------------------------------------------------------------------------
def _local_round_problem(minibatch: bool, n_steps: int):
    rng = np.random.default_rng(0)
    design = rng.normal(size=(9, 3))
    target = np.sign(rng.normal(size=9))
    offsets = np.array([0, 4, 9])
    V = rng.normal(size=(2, 3))
    U = rng.normal(size=(2, 3))
    kw = dict(weight=0.3, radius=2.0)
    if minibatch:
        rows = np.hstack([rng.integers(0, 4, size=(n_steps, 2)), rng.integers(4, 9, size=(n_steps, 3))])
        kw.update(rows=rows, row_offsets=np.array([0, 2, 5]), scale=np.array([2.0, 5 / 3]))
    return design, target, offsets, V, U, kw


@pytest.mark.parametrize("minibatch", [False, True])
@pytest.mark.parametrize("loss", ["hinge", "l1"])
def test_local_round_in_pieces_equals_one_call_bit_for_bit(loss, minibatch):
    # 300000 steps cross the wrapper's internal slices (~1e5 steps each here) at other places than
    # the pieces below, so both the slicing and the resumption (first_step=) are checked
    T = 300_000
    design, target, offsets, V, U0, kw = _local_round_problem(minibatch, T)
    U, U_avg = U0.copy(), np.empty_like(U0)
    kernels.fedmls_local_round(loss, design, target, offsets, V, U, U_avg, n_steps=T, **kw)
    U2, U2_avg = U0.copy(), np.empty_like(U0)
    rows = kw.pop("rows", None)
    for first, count in ((0, 7), (7, 123_456), (123_463, T - 123_463)):
        part = {} if rows is None else {"rows": rows[first:first + count]}
        kernels.fedmls_local_round(loss, design, target, offsets, V, U2, U2_avg, n_steps=count,
                                   first_step=first, **kw, **part)
    assert np.array_equal(U, U2) and np.array_equal(U_avg, U2_avg)


def test_local_round_rejects_step_counter_overflow_naming_the_argument():
    design, target, offsets, V, U, kw = _local_round_problem(False, 1)
    with pytest.raises(ValueError, match=f"'first_step' in \\[0, {2**63 - 3}\\]"):
        kernels.fedmls_local_round("hinge", design, target, offsets, V, U, np.empty_like(U),
                                   n_steps=2, first_step=2**63 - 2, **kw)
    for n_steps in (2**31, 2**40, 2**63):  # above MAX_ITERATIONS = 2**31 - 1
        with pytest.raises(ValueError, match="'n_steps' in \\[0, 2147483647\\]"):
            kernels.fedmls_local_round("hinge", design, target, offsets, V, U, np.empty_like(U), n_steps=n_steps,
                                       **kw)


def test_local_round_with_2_to_31_steps_stops_on_ctrl_c():
    _interrupted("""
        import numpy as np
        from fedmm.kernels import fedmls_local_round
        rng = np.random.default_rng(0)
        design, target = rng.normal(size=(40, 5)), np.sign(rng.normal(size=40))
        U, U_avg = np.zeros((2, 5)), np.zeros((2, 5))
        print("start", flush=True)
        fedmls_local_round("hinge", design, target, [0, 20, 40], np.zeros((2, 5)), U, U_avg,
                           n_steps=2**31 - 1, weight=0.1)
    """)


# -- local_steps of the non-smooth algorithms -----------------------------------------------------
@pytest.mark.parametrize("cls", [FedAvg, Scaffold, FedMLS])
def test_absurd_local_steps_are_refused_naming_the_argument(cls):
    kw = dict(prox_weight=1.0) if cls is FedMLS else dict(local_lr=0.01)
    with pytest.raises(ValueError, match="'local_steps' in \\[1, 2147483647\\]"):
        cls(HingeSVM(), local_steps=2**62, **kw)
    alg = cls(HingeSVM(), local_steps=lambda k: 2**62 * k, **kw)  # a schedule: checked when it is used
    datas = nonsmooth_toy_data("hinge", n_clients=2, m=6, d=3, seed=0)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="'local_steps\\(1\\)' in \\[1, 2147483647\\]"):
        alg.run(datas, 2, seed=0)
    assert time.monotonic() - t0 < 10.0
    with pytest.raises(ValueError, match="'max_local_steps'"):
        Scaffnew(HingeSVM(), local_lr=0.01, max_local_steps=2**62)


@pytest.mark.parametrize("algorithm", [
    "FedAvg(HingeSVM(), local_steps=2**31 - 1, local_lr=0.01)",
    "Scaffold(HingeSVM(), local_steps=2**31 - 1, local_lr=0.01)",
    "FedMLS(HingeSVM(), local_steps=2**31 - 1, prox_weight=1.0)",
    "FedMLS(HingeSVM(), local_steps=2**31 - 1, prox_weight=1.0, oracle='full')",
])
def test_a_round_with_2_to_31_local_steps_stops_on_ctrl_c(algorithm):
    # minibatch oracles draw their rows in bounded chunks: no (2**31, B) array is ever allocated
    _interrupted(f"""
        import numpy as np
        from fedmm.algorithms.fedmls import FedMLS
        from fedmm.algorithms.nonsmooth import FedAvg, Scaffold
        from fedmm.models.nonsmooth import HingeSVM
        rng = np.random.default_rng(0)
        datas = []
        for _ in range(2):
            X = rng.normal(size=(30, 4))
            datas.append((X, np.sign(X[:, 0] + 0.1)))
        alg = {algorithm}
        print("start", flush=True)
        alg.run(datas, 1, seed=0)
    """)


@pytest.mark.parametrize("make", [
    lambda: FedMLS(HingeSVM(), local_steps=("linear", 7), prox_weight=1.0),
    lambda: FedMLS(HingeSVM(), local_steps=("linear", 7), prox_weight=1.0, backend="python"),
    lambda: FedAvg(HingeSVM(), local_steps=("linear", 7), local_lr=0.01),
    lambda: Scaffold(HingeSVM(), local_steps=("linear", 7), local_lr=0.01),
])
def test_chunked_minibatch_draws_give_the_same_runs(make, monkeypatch):
    datas = nonsmooth_toy_data("hinge", n_clients=3, m=20, d=4, seed=1)
    whole = make().run(datas, 4, seed=3)
    monkeypatch.setattr(ShareOracle, "ROWS_AHEAD", 5)  # a few steps per chunk
    chunked = make().run(datas, 4, seed=3)
    for key in whole.state:
        assert np.array_equal(whole.state[key], chunked.state[key]), key


# -- data ---------------------------------------------------------------------------------------------
def test_split_homogeneous_refuses_a_size_that_cannot_fit_before_allocating():
    t0 = time.monotonic()
    with pytest.raises(MemoryError, match=r"n_clients=4611686018427387904 .* would need "
                                          r"7968993439842526298112 bytes"):
        split_homogeneous(np.zeros((40, 5)), 2**62)
    assert time.monotonic() - t0 < 5.0
    datas = split_homogeneous(np.arange(6.0).reshape(3, 2), 2)
    assert len(datas) == 2 and all(np.array_equal(d, np.arange(6.0).reshape(3, 2)) for d in datas)


def test_constrained_kmeans_with_2_to_31_starts_stops_on_ctrl_c():
    # a Python loop over starts, each of bounded work (Lloyd iterations ≤ max_iter on the data)
    _interrupted("""
        import numpy as np
        from fedmm.data import split_by_constrained_kmeans
        X = np.random.default_rng(0).normal(size=(60, 3))
        print("start", flush=True)
        split_by_constrained_kmeans(X, 3, n_init=2**31 - 1, seed=0)
    """)


# -- other kernels with user-set counts ---------------------------------------------------------------
def test_sample_without_replacement_refuses_a_table_that_cannot_fit():
    with pytest.raises(MemoryError, match="sample_without_replacement with n=4611686018427387904"):
        kernels.sample_without_replacement(2**62, 1, rng=0)
    assert kernels.sample_without_replacement(2**62, 0, rng=0).shape == (0,)


def test_unit_norm_dictionary_update_in_slices_is_bit_for_bit_and_stops_on_ctrl_c():
    rng = np.random.default_rng(0)
    p, K = 40, 50  # ~20 sweeps per slice
    H = rng.normal(size=(K, 200))
    A, B = H @ H.T / 200, rng.normal(size=(p, K))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        D = kernels.dictionary_update(A, B, constraint="unit_norm", tol=0.0, max_iter=97)
        D1 = kernels.dictionary_update(A, B, constraint="unit_norm", tol=0.0, max_iter=13)
        D2 = kernels.dictionary_update(A, B, D1, constraint="unit_norm", tol=0.0, max_iter=84)
    assert np.array_equal(D, D2)
    _interrupted("""
        import numpy as np
        from fedmm.kernels import dictionary_update
        rng = np.random.default_rng(0)
        A = rng.normal(size=(50, 50))
        A, B = A @ A.T / 50, rng.normal(size=(40, 50))  # no exact fixed point within 20000 sweeps
        print("start", flush=True)
        dictionary_update(A, B, constraint="unit_norm", tol=0.0, max_iter=2**31 - 1)
    """)


# -- LASSO kernels (coordinate descent and active set poll for Ctrl-C) --------------------------------
_LONG_LASSO = """
    import numpy as np
    import fedmm.kernels as kernels
    rng = np.random.default_rng(0)
    D, Z = rng.normal(size=(30, 60)), rng.normal(size=(30, 2))  # overcomplete, tiny lam: no gap below 2.2e-13
    print("start", flush=True)
"""


@pytest.mark.parametrize("call", [
    "kernels.lasso(D, Z, 1e-6, method='cd', tol=0.0, max_iter=2**31 - 1)",
    "kernels.lasso_gram(D.T @ D, D.T @ Z, 1e-6, method='cd', tol=0.0, max_iter=2**31 - 1)",
    "kernels.dictionary_statistics(D, Z, 1e-6, segments=[0, 1, 2], method='cd', tol=0.0, max_iter=2**31 - 1)",
], ids=["lasso", "lasso_gram", "dictionary_statistics"])
def test_a_lasso_with_2_to_31_iterations_stops_on_ctrl_c(call):
    # one column alone would run for hours (about 2e-5 s per sweep here)
    _interrupted(_LONG_LASSO + "    " + call + "\n")


def test_a_dictionary_run_with_2_to_31_lasso_iterations_stops_on_ctrl_c():
    # above the compiled model's bound the rounds run on the Python backend, whose LASSO polls; θ_0
    # with nearly duplicated atoms and a tiny λ keep the solver's coordinate descent from converging
    _interrupted("""
        import numpy as np
        from fedmm.algorithms import FedMM
        from fedmm.models import DictionaryLearning
        rng = np.random.default_rng(0)
        datas = [np.ascontiguousarray(rng.normal(size=(8, 60))) for _ in range(2)]
        theta0 = rng.normal(size=(60, 30))
        theta0[:, 15:] = theta0[:, :15] + 1e-4 * rng.normal(size=(60, 15))
        init = np.concatenate([np.eye(30).ravel(), 1.2 * theta0.ravel()])  # T(init) = theta0 (eta = 0.1)
        model = DictionaryLearning(30, 1e-6, 0.1, tol=0.0, max_iter=2**31 - 1, warm_start=False)
        print("start", flush=True)
        FedMM(model, participation_prob=1.0, batch_size=4).run(datas, 1, seed=0, init=init)
    """)


def _lasso_cases():
    rng = np.random.default_rng(4)
    for p, K, lam in ((30, 60, 1e-6), (40, 15, 0.05), (12, 30, 0.02)):
        D = rng.normal(size=(p, K))
        D[:, -1] = D[:, 0] + 1e-3 * rng.normal(size=p)  # a nearly duplicated atom
        yield D, rng.normal(size=(p, 6)), lam


@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("method", ["cd", "active_set", "homotopy", "auto"])
def test_polling_for_ctrl_c_leaves_the_lasso_results_bit_for_bit(method, positive):
    """The kernels poll only in the main thread: a worker thread's call is the unpolled reference.

    With K = 60 and 2000 sweeps per column the main-thread solves poll dozens of times."""
    def solve(D, Z, lam):
        kw = dict(method=method, positive=positive, tol=0.0, max_iter=2000, return_n_iter=True)
        H, it = kernels.lasso(D, Z, lam, **kw)
        Hg, itg = kernels.lasso_gram(D.T @ D, D.T @ Z, lam, **kw)
        A, B, Hs, obj = kernels.dictionary_statistics(D, Z, lam, segments=[0, 2, 6], method=method,
                                                      positive=positive, max_iter=2000, H0=np.abs(H),
                                                      return_codes=True, return_objective=True)
        return [H, it, Hg, itg, A, B, Hs, obj]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernels.ConvergenceWarning)
        for D, Z, lam in _lasso_cases():
            polled = solve(D, Z, lam)
            with ThreadPoolExecutor(max_workers=1) as pool:
                unpolled = pool.submit(solve, D, Z, lam).result()
            for a, b in zip(polled, unpolled, strict=True):
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


# -- the compiled dictionary model bounds its LASSO work up front -------------------------------------
def test_compiled_dictionary_model_refuses_a_max_iter_that_would_make_a_round_unbounded():
    K = 15
    bound = kernels_engine.dictionary_model_max_iter(K)
    assert bound == 2**32 // (K * K + 4 * K)
    assert kernels.dictionary_model(4, K, 0.1, max_iter=bound).q == K * K + 4 * K
    with pytest.raises(ValueError, match=f"'max_iter' <= {bound} for n_components={K}"):
        kernels.dictionary_model(4, K, 0.1, max_iter=bound + 1)
    with pytest.raises(ValueError, match="'max_iter' in \\[1, 2147483647\\]"):
        DictionaryLearning(K, 0.1, max_iter=2**31)
    rng = np.random.default_rng(0)
    datas = [np.ascontiguousarray(rng.normal(size=(10, 4))) for _ in range(2)]
    assert DictionaryLearning(K, 0.1, n_features=4, max_iter=bound).compiled_model() is not None
    model = DictionaryLearning(K, 0.1, 0.1, n_features=4, max_iter=bound + 1)
    assert model.compiled_model() is None  # its rounds run on the (interruptible) Python backend
    h = FedMM(model, participation_prob=1.0, batch_size=5).run(datas, 2, seed=1)
    assert h.config["backend"] == "python" and "compiled_model() is None" in h.config["backend_reason"]
    with pytest.raises(ValueError, match="backend='compiled' cannot run"):
        FedMM(model, participation_prob=1.0, batch_size=5, backend="compiled").run(datas, 2, seed=1)


_C_INTERRUPT = r"""
#include <stdio.h>
#include <string.h>
#include "fedmm_kernels.h"

typedef struct { int calls; int stop_at; } counter_t;

static int poll(void *arg)
{
    counter_t *c = (counter_t *)arg;
    return ++c->calls == c->stop_at;
}

#define K 40
#define B 3
int main(void)
{
    /* G = D^T D of an overcomplete D (p = 20 < K), C = D^T Z; a fixed LCG fills D and Z */
    static double D[20 * K], Z[20 * B], G[K * K], C[K * B], H0[K * B], H1[K * B], work[1 << 14];
    int it0[B], it1[B];
    unsigned long long s = 12345;
    for (int i = 0; i < 20 * K; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        D[i] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    for (int i = 0; i < 20 * B; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        Z[i] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    for (int a = 0; a < K; ++a)
        for (int b = 0; b < K; ++b) {
            double acc = 0;
            for (int i = 0; i < 20; ++i) acc += D[a * 20 + i] * D[b * 20 + i];
            G[b * K + a] = acc;
        }
    for (int a = 0; a < K; ++a)
        for (int j = 0; j < B; ++j) {
            double acc = 0;
            for (int i = 0; i < 20; ++i) acc += D[a * 20 + i] * Z[j * 20 + i];
            C[j * K + a] = acc;
        }
    if (fedmm_lasso_gram_work(K) > sizeof work / sizeof work[0]) return 1;
    for (int method = 0; method <= FEDMM_LASSO_HOMOTOPY; ++method) {
        const fedmm_lasso_options_t opts = {1e-6, 0, 0.0, 20000, 0, method};
        int64_t bad0 = 0, bad1 = 0;
        if (fedmm_lasso_gram(K, B, G, K, C, K, NULL, &opts, H0, K, it0, &bad0, work) != FEDMM_OK) return 2;
        counter_t never = {0, -1};
        const fedmm_interrupt_t watch = {poll, &never};
        if (fedmm_lasso_gram_interruptible(K, B, G, K, C, K, NULL, &opts, H1, K, it1, &bad1, work, &watch)
            != FEDMM_OK)
            return 3;
        /* polled without stopping: the same codes and counts, bit for bit */
        if (memcmp(H0, H1, sizeof H0) != 0 || memcmp(it0, it1, sizeof it0) != 0 || bad0 != bad1) return 4;
        /* the active set and the homotopy end in ~60 steps; the others run 20000 sweeps */
        if (method < FEDMM_LASSO_ACTIVE_SET) {
            if (never.calls < 10) return 5; /* 3 x 20000 sweeps of ~K^2 work: dozens of polls */
            counter_t third = {0, 3};
            const fedmm_interrupt_t stop = {poll, &third};
            if (fedmm_lasso_gram_interruptible(K, B, G, K, C, K, NULL, &opts, H1, K, it1, &bad1, work, &stop)
                != FEDMM_EINTR)
                return 6;
            if (third.calls != 3) return 7; /* nothing polled after the stop */
        }
        const fedmm_interrupt_t none = {NULL, NULL}; /* no poll function: never stopped */
        if (fedmm_lasso_gram_interruptible(K, B, G, K, C, K, NULL, &opts, H1, K, it1, &bad1, work, &none) != FEDMM_OK ||
            memcmp(H0, H1, sizeof H0) != 0) return 8;
    }
    if (strcmp(fedmm_strerror(FEDMM_EINTR), "interrupted") != 0) return 9;
    printf("OK\n");
    return 0;
}
"""


def test_c_callers_interrupt_the_lasso_through_their_own_poll(tmp_path):
    """``fedmm_lasso_gram_interruptible`` from C: a poll that never stops changes nothing (bit for bit), one
    that stops at its third call gets FEDMM_EINTR after exactly three calls."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) on PATH")
    source, exe = tmp_path / "lasso_interrupt.c", tmp_path / "lasso_interrupt"
    source.write_text(_C_INTERRUPT)
    build = subprocess.run([cc, "-std=c99", "-O1", "-Wall", "-Werror", "-I", fedmm.get_include(), str(source),
                            "-L", fedmm.get_library_dir(), "-lfedmm_kernels", "-lm", "-o", str(exe)],
                           capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout.strip()) == (0, "OK"), run.stdout + run.stderr
