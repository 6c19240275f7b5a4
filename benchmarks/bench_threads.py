# SPDX-License-Identifier: BSD-3-Clause
"""Threads of the compiled round engine against the machine's own ceiling, on a quiet and on a busy machine.

The workload is the round of ``test_rounds.py`` (FedMM paper §6 dictionary
learning: 20 clients, 10 active per round, minibatches of 50, K = 15,
8-bit stochastic rounding; 200 rounds per run, compiled backend).  Every
timed call measures, one after the other so that all see the same machine,
for every thread count k of 1, 2, 4, ... and the number of CPUs:

(a) one run with k threads;
(b) the machine's own ceiling at k: one 1-thread run in a separate process,
    then k such processes side by side (all released at once); the ceiling
    is k × (time alone) / (time of the slowest of the k);

and, with two or more CPUs, the busy machine:
(c) two threads while a CPU-bound process (a Python busy loop, started for
    the measurement and killed by its PID after it) runs;
(d) one thread while such a process runs.

``extra_info`` holds the medians over timed calls of ``speedup_<k>`` =
(a at 1) / (a at k), ``ceiling_<k>`` = (b) and ``efficiency_<k>`` =
``speedup_<k>`` / ``ceiling_<k>`` for every k, and, as before,
``speedup_quiet``, ``ceiling`` and ``efficiency_quiet`` (k = 2; target
``speedup_quiet`` ≥ 1.6 on two idle cores) and ``ratio_busy`` = (d) / (c)
(target ≥ 0.95: two threads are never slower than one when another process
holds a core); the runs' seconds are there too.  ``benchmarks/manycore.py``
prints the same kind of table for larger workloads, without pytest.

Run: ``OPENBLAS_NUM_THREADS=1 python -m pytest benchmarks/bench_threads.py
--benchmark-only -s --benchmark-json threads.json`` on an otherwise idle
machine: other load makes every figure noisy.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.data import split_by_constrained_kmeans, synthetic_dictionary
from fedmm.models import DictionaryLearning

N_CLIENTS, ACTIVE, BATCH, P, K, LAM, ETA, ALPHA, BITS = 20, 10, 50, 20, 15, 0.1, 0.2, 0.01, 8
ROUNDS = 200
CALLS, WARMUP = 7, 1

# A process that runs one 1-thread run per "go" line on stdin and prints its seconds.
_RUNNER = f"""
import sys, time
from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.data import split_by_constrained_kmeans, synthetic_dictionary
from fedmm.models import DictionaryLearning
Z, _, _ = synthetic_dictionary(5000, {P}, {K}, seed=0)
datas = split_by_constrained_kmeans(Z, {N_CLIENTS}, seed=0)
algo = FedMM(DictionaryLearning({K}, {LAM}, {ETA}), clients_per_round={ACTIVE},
             compressor=StochasticRounding(bits={BITS}), control_variate_step={ALPHA}, step=("sqrt", 0.05),
             batch_size={BATCH}, n_threads=1)
algo.run(datas, {ROUNDS}, seed=0)
print("ready", flush=True)
for line in sys.stdin:
    start = time.perf_counter()
    algo.run(datas, {ROUNDS}, seed=0)
    print(time.perf_counter() - start, flush=True)
"""


def _datas():
    Z, _, _ = synthetic_dictionary(5000, P, K, seed=0)
    return split_by_constrained_kmeans(Z, N_CLIENTS, seed=0)


def _fedmm(n_threads):
    return FedMM(DictionaryLearning(K, LAM, ETA), clients_per_round=ACTIVE, compressor=StochasticRounding(bits=BITS),
                 control_variate_step=ALPHA, step=("sqrt", 0.05), batch_size=BATCH, n_threads=n_threads)


def _seconds(algo, datas):
    start = time.perf_counter()
    algo.run(datas, ROUNDS, seed=0)
    return time.perf_counter() - start


class _Busy:
    """A CPU-bound child process for the duration of a ``with`` block (killed by its PID)."""

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
        time.sleep(0.05)  # let it start spinning
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


def _runner():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-c", _RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=env)
    if process.stdout.readline().strip() != "ready":
        process.kill()
        raise RuntimeError("the side-by-side runner did not start")
    return process


def _ask(processes):
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    return [float(process.stdout.readline()) for process in processes]


def _thread_counts():
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return sorted({2 ** i for i in range(ncpu.bit_length()) if 2 ** i <= ncpu} | {ncpu, 2}), ncpu


@pytest.mark.benchmark(group="threads")
def bench_threads_against_the_ceiling_quiet_and_busy(benchmark):
    datas = _datas()
    counts, ncpu = _thread_counts()
    algos = {n: _fedmm(n) for n in counts}
    for algo in algos.values():
        algo.run(datas, 20, seed=0)  # first-call costs (compiled-model set-up) out of the timings
    runners = [_runner() for _ in range(max(counts))]
    rows = []

    def measure():
        row = {}
        for k in counts:
            row[f"threads_{k}"] = _seconds(algos[k], datas)
            row[f"alone_{k}"] = _ask(runners[:1])[0]
            row[f"side_by_side_{k}"] = max(_ask(runners[:k]))
        if ncpu >= 2:
            with _Busy():
                row["two_busy"] = _seconds(algos[2], datas)
                row["one_busy"] = _seconds(algos[1], datas)
        rows.append(row)

    try:
        benchmark.pedantic(measure, rounds=CALLS, warmup_rounds=WARMUP)
    finally:
        for process in runners:
            process.kill()
            process.wait()
            process.stdin.close()
            process.stdout.close()
    kept = rows[WARMUP:] if len(rows) > WARMUP else rows
    table = {key: np.array([row[key] for row in kept]) for key in kept[0]}
    info = benchmark.extra_info
    info["thread_counts"] = counts
    for k in counts:
        speedup = table["threads_1"] / table[f"threads_{k}"]
        ceiling = k * table[f"alone_{k}"] / table[f"side_by_side_{k}"]
        info[f"speedup_{k}"] = float(np.median(speedup))
        info[f"ceiling_{k}"] = float(np.median(ceiling))
        info[f"efficiency_{k}"] = float(np.median(speedup / ceiling))
    info["speedup_quiet"] = info["speedup_2"]
    info["ceiling"] = info["ceiling_2"]
    info["efficiency_quiet"] = info["efficiency_2"]
    if ncpu >= 2:
        info["ratio_busy"] = float(np.median(table["one_busy"] / table["two_busy"]))
    for key, values in table.items():
        info[f"seconds_{key}"] = float(np.median(values))
    print(f"\n{'threads':>7} {'speedup':>8} {'ceiling':>8} {'efficiency':>10}")
    for k in counts:
        print(f"{k:>7} {info[f'speedup_{k}']:>8.2f} {info[f'ceiling_{k}']:>8.2f} {info[f'efficiency_{k}']:>10.0%}")
    if ncpu >= 2:
        print(f"busy machine: one thread / two threads = {info['ratio_busy']:.2f}")
