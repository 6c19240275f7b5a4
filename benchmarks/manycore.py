# SPDX-License-Identifier: BSD-3-Clause
"""Thread scaling of the compiled round engine against the machine's own ceiling (issue 28).

A standalone script (numpy, scipy and the built ``fedmm`` only; no pytest)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/manycore.py            # 1, 2, 4, ..., nproc threads
    OPENBLAS_NUM_THREADS=1 python benchmarks/manycore.py --quick --threads 1,2
    OPENBLAS_NUM_THREADS=1 python benchmarks/manycore.py --old-path /tmp/old_target   # adds (c)
    OPENBLAS_NUM_THREADS=1 python benchmarks/manycore.py --workloads '' --old-path /tmp/old_target --pin

It prints one table per workload, with the columns threads, client-rounds/s,
speedup (one-thread time / k-thread time), ceiling and efficiency = speedup /
ceiling, where the ceiling is what k independent one-thread processes side by
side reach: k × (time of one such process alone) / (time of the slowest of k
side by side), measured in the same run, alternating with the threaded runs,
so that both see the same machine.  Figures are medians over ``--repeats``
calls; the time is that of the rounds (the History's ``wall_time``: the
compiled stretches, selection to server step), or of whole ``FedMM.run``
calls (build, start and set-up exchanges included) with ``--whole-run``.

Workloads (every run goes through the public API, ``FedMM.run``):

(a) ``dl400``: dictionary learning (p = 64, K = 15, λ = 0.1, η = 0.2), 400
    clients of 250 signals, 200 clients per round, minibatches of 50, 8-bit
    stochastic rounding, α = 0.01, ``start="model"``;
(b) ``fedem2000``: the FedEM Fig. 1 Gaussian mixture (2-D, 2 components,
    known covariance) over 2,000 clients of 100 points, 75% participation,
    minibatches of 20, block-p quantization (blocks of 4), α = γ = 0.01;
(c) with ``--old-path DIR`` (a ``sys.path`` entry holding an older build of
    ``fedmm``, e.g. ``pip install --no-deps --target DIR`` of commit c1dfe98):
    one-thread medians of this build against the old one, the two alternated
    call by call, on the FedMM paper §6 dictionary-learning round (20
    clients, 10 per round, p = 64, 500 rounds; default start and
    ``start="model"``) and on the FedEM Fig. 1 round (100 clients, 200
    rounds).  Ratio = old time / new time (> 1: this build is faster).  With ``--pin`` both
    workers run on the same CPU: unpinned, the same build's speed moved by up to 25% between
    tables of one run on the 16-core device machine (the two workers land on different cores).

Each measured configuration runs in its own worker process (this script with
``--worker``), which builds the run once, warms it up and then times one
``FedMM.run`` per request; the data are generated once by the parent and
handed to every worker in a temporary ``.npz`` file, so that old and new
builds see the same bytes.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.abspath(__file__)

#: workload -> (rounds of a timed call, rounds with --quick)
ROUNDS = {"dl400": (12, 3), "fedem2000": (60, 12), "dl20": (500, 100), "dl20-model": (500, 100),
          "fig1": (200, 50)}


# --------------------------------------------------------------------------- data (parent only)
def _dictionary_data(n_clients, n_per_client, p, K, seed=0):
    """``fedmm.data.synthetic_dictionary`` signals: split by constrained k-means (the paper's heterogeneous
    clients) up to 20 clients, in generation order beyond (k-means on 100,000 signals takes minutes)."""
    from fedmm.data import split_by_constrained_kmeans, synthetic_dictionary

    Z, _, _ = synthetic_dictionary(n_clients * n_per_client, p, K, seed=seed)
    if n_clients <= 20:
        return split_by_constrained_kmeans(Z, n_clients, seed=seed)
    return [np.ascontiguousarray(part) for part in np.array_split(Z, n_clients)]


def _fig1_data(n_clients, per_client=100, seed=0):
    """FedEM Fig. 1: two 2-D Gaussians (weights 0.3/0.7) with one covariance, split at random."""
    rng = np.random.default_rng(seed)
    weights, means = np.array([0.3, 0.7]), np.array([[-1.0, 1.0], [1.5, -0.5]])
    cov = np.array([[1.0, 0.4], [0.4, 0.8]])
    n = n_clients * per_client
    labels = rng.choice(2, size=n, p=weights)
    Y = means[labels] + rng.standard_normal((n, 2)) @ np.linalg.cholesky(cov).T
    return [np.ascontiguousarray(part) for part in np.array_split(Y, n_clients)], cov


def _write_data(path, workload):
    if workload == "dl400":
        datas = _dictionary_data(400, 250, 64, 15)
        extra = {}
    elif workload in ("dl20", "dl20-model"):
        datas = _dictionary_data(20, 250, 64, 15)
        extra = {}
    elif workload == "fedem2000":
        datas, cov = _fig1_data(2000)
        extra = {"cov": cov}
    elif workload == "fig1":
        datas, cov = _fig1_data(100)
        extra = {"cov": cov}
    else:
        raise ValueError(f"Expected a known workload, got {workload!r}")
    np.savez(path, n=len(datas), **{f"d{i}": d for i, d in enumerate(datas)}, **extra)


# --------------------------------------------------------------------------- worker process
def _algorithm(workload, n_threads, data):
    """(FedMM object, run keyword arguments) for either API generation of fedmm."""
    from fedmm.algorithms import FedMM
    from fedmm.compression import BlockQuantizer, StochasticRounding
    from fedmm.models import DictionaryLearning, GaussianMixture

    params = inspect.signature(FedMM).parameters
    kwargs = {"n_threads": n_threads}
    if "backend" in params:
        kwargs["backend"] = "compiled"
    step_name = "alpha" if "alpha" in params else "control_variate_step"
    datas = [data[f"d{i}"] for i in range(int(data["n"]))]
    if workload.startswith("dl"):
        model = DictionaryLearning(15, 0.1, 0.2)
        count = 200 if workload == "dl400" else 10
        kwargs.update({step_name: 0.01, "step": ("sqrt", 0.05), "batch_size": 50,
                       "compressor": StochasticRounding(bits=8)})
        if workload in ("dl400", "dl20-model") and "start" in params:
            kwargs["start"] = "model"
        part = count
        run_kwargs = {}
    else:
        model = GaussianMixture(2, known_covariance=data["cov"])
        kwargs.update({step_name: 1e-2, "step": 1e-2, "batch_size": 20,
                       "compressor": BlockQuantizer(block_size=4)})
        part = 0.75
        S0 = model.init_statistic(datas, np.random.default_rng(0))
        run_kwargs = {"init" if "init" in inspect.signature(FedMM.run).parameters else "S0": S0}
    if "clients_per_round" in params:
        kwargs["clients_per_round" if isinstance(part, int) else "participation_prob"] = part
    else:
        kwargs["participation"] = part
    return FedMM(model, **kwargs), datas, run_kwargs


def _use_path(path):
    """Import ``fedmm`` from ``path``: first on ``sys.path``, and any import hook that would load another copy
    (an editable install's finder on ``sys.meta_path``) set aside."""
    import importlib.machinery

    sys.path.insert(0, path)
    root = os.path.realpath(path) + os.sep
    for finder in list(sys.meta_path):
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec("fedmm", None)
        except Exception:
            continue
        if spec is not None and not os.path.realpath(spec.origin or "").startswith(root):
            sys.meta_path.remove(finder)


def _worker(args):
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.path:
        _use_path(args.path)
    data = np.load(args.data)
    algo, datas, run_kwargs = _algorithm(args.worker, args.n_threads, data)
    import fedmm

    if args.path and not os.path.realpath(fedmm.__file__).startswith(os.path.realpath(args.path) + os.sep):
        raise RuntimeError(f"Expected fedmm from {args.path}, got {fedmm.__file__}")
    rounds = args.rounds
    algo.run(datas, max(2, rounds // 4), seed=0, **run_kwargs)  # first-call costs out of the timings
    print("ready", flush=True)
    for _ in sys.stdin:
        start, cpu = time.perf_counter(), time.process_time()
        history = algo.run(datas, rounds, seed=0, **run_kwargs)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        client_rounds = sum(len(r["active"]) for r in history.records)
        rounds_seconds = float(history.records[-1]["wall_time"]) if history.records else seconds
        print(json.dumps({"seconds": seconds, "cpu": cpu, "rounds_seconds": rounds_seconds,
                          "client_rounds": client_rounds}), flush=True)


class _Worker:
    """A ``--worker`` child process; :meth:`ask` starts one timed run, :meth:`answer` reads its result."""

    def __init__(self, workload, data, rounds, n_threads=1, path=None, cpu=None):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [sys.executable, HERE, "--worker", workload, "--data", data, "--rounds", str(rounds),
               "--n-threads", str(n_threads)]
        if path:
            cmd += ["--path", path]
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ready(self):
        line = self.process.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"a worker did not start ({line!r})")

    def ask(self):
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def answer(self):
        return json.loads(self.process.stdout.readline())

    def run(self):
        self.ask()
        return self.answer()

    def close(self):
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


def _side_by_side(workers, key):
    """Release the workers at once; the slowest one's ``key`` seconds."""
    for w in workers:
        w.ask()
    return max(w.answer()[key] for w in workers)


# --------------------------------------------------------------------------- the tables
def scaling(workload, threads, repeats, quick, tmp, key="rounds_seconds", path=None):
    data = os.path.join(tmp, f"{workload}.npz")
    _write_data(data, workload)
    rounds = ROUNDS[workload][1 if quick else 0]
    kmax = max(threads)
    threaded = {k: _Worker(workload, data, rounds, n_threads=k, path=path) for k in threads}
    singles = [_Worker(workload, data, rounds, path=path) for _ in range(kmax)]
    try:
        for w in list(threaded.values()) + singles:
            w.ready()
        rows = {k: {"seconds": [], "alone": [], "side": []} for k in threads}
        client_rounds = None
        for _ in range(repeats):
            for k in threads:
                res = threaded[k].run()
                client_rounds = res["client_rounds"]
                rows[k]["seconds"].append(res[key])
                rows[k]["alone"].append(singles[0].run()[key])
                rows[k]["side"].append(_side_by_side(singles[:k], key))
    finally:
        for w in list(threaded.values()) + singles:
            w.close()
    one = np.median(rows[threads[0]]["seconds"]) if threads[0] == 1 else None
    what = "the rounds (History wall_time)" if key == "rounds_seconds" else "whole FedMM.run calls"
    print(f"\n{workload}: {client_rounds} client-rounds per run, medians of {repeats}, timing {what}")
    print(f"{'threads':>7} {'client-rounds/s':>16} {'speedup':>8} {'ceiling':>8} {'efficiency':>10}")
    table = []
    for k in threads:
        r = {key: np.asarray(v) for key, v in rows[k].items()}
        seconds = float(np.median(r["seconds"]))
        ceiling = float(np.median(k * r["alone"] / r["side"]))
        speedup = float(one / seconds) if one is not None else float("nan")
        table.append({"threads": k, "client_rounds_per_s": client_rounds / seconds, "speedup": speedup,
                      "ceiling": ceiling, "efficiency": speedup / ceiling})
        print(f"{k:>7} {client_rounds / seconds:>16,.0f} {speedup:>8.2f} {ceiling:>8.2f} {speedup / ceiling:>10.0%}")
    return table


def old_vs_new(old_path, workloads, repeats, quick, tmp, cpu=None):
    where = "" if cpu is None else f", both pinned to CPU {cpu}"
    print(f"\none thread, this build against {old_path} (alternated call by call{where}), medians of {repeats}")
    print(f"{'workload':>11} {'new client-rounds/s':>20} {'old client-rounds/s':>20} {'ratio old/new time':>19} "
          f"{'ratio old/new CPU':>18}")
    out = {}
    for workload in workloads:
        data = os.path.join(tmp, f"{workload}.npz")
        _write_data(data, workload)
        rounds = ROUNDS[workload][1 if quick else 0]
        new, old = _Worker(workload, data, rounds, cpu=cpu), _Worker(workload, data, rounds, path=old_path, cpu=cpu)
        try:
            new.ready()
            old.ready()
            t_new, t_old, c_new, c_old, client_rounds = [], [], [], [], None
            for _ in range(repeats):
                res = new.run()
                t_new.append(res["seconds"])
                c_new.append(res["cpu"])
                client_rounds = res["client_rounds"]
                res = old.run()
                t_old.append(res["seconds"])
                c_old.append(res["cpu"])
        finally:
            new.close()
            old.close()
        ratio = float(np.median(np.divide(t_old, t_new)))
        cpu_ratio = float(np.median(np.divide(c_old, c_new)))
        out[workload] = {"new": client_rounds / np.median(t_new), "old": client_rounds / np.median(t_old),
                         "ratio": ratio, "cpu_ratio": cpu_ratio, "new_seconds": t_new, "old_seconds": t_old,
                         "new_cpu": c_new, "old_cpu": c_old}
        print(f"{workload:>11} {out[workload]['new']:>20,.0f} {out[workload]['old']:>20,.0f} {ratio:>19.2f} "
              f"{cpu_ratio:>18.2f}")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats (a check that it runs)")
    parser.add_argument("--threads", default=None,
                        help="comma-separated thread counts (default 1, 2, 4, ... and the CPU count)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per configuration (default 5, 2 quick)")
    parser.add_argument("--workloads", default="dl400,fedem2000",
                        help="comma-separated scaling workloads among dl400, fedem2000 ('' for none)")
    parser.add_argument("--old-path", default=None, help="sys.path entry of an older fedmm build: adds table (c)")
    parser.add_argument("--old-workloads", default="dl20,dl20-model,fig1",
                        help="comma-separated workloads of table (c) among dl20, dl20-model, fig1")
    parser.add_argument("--pin", action="store_true",
                        help="table (c): run both builds' workers on one CPU (the last this process may use), so "
                             "that a faster or quieter core cannot favour one build")
    parser.add_argument("--whole-run", action="store_true",
                        help="time whole FedMM.run calls (build and set-up included) instead of the rounds alone")
    parser.add_argument("--scaling-path", default=None,
                        help="sys.path entry of the fedmm build whose scaling is measured (default: the one imported)")
    parser.add_argument("--json", default=None, help="also write the tables to this JSON file")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--n-threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if args.threads:
        threads = sorted({int(x) for x in args.threads.split(",")})
        if threads[0] < 1:
            raise ValueError(f"Expected thread counts >= 1 in '--threads', got {args.threads!r}")
    else:
        threads = sorted({2 ** i for i in range(ncpu.bit_length()) if 2 ** i <= ncpu} | {ncpu})
    repeats = args.repeats or (2 if args.quick else 5)
    if repeats < 1:
        raise ValueError(f"Expected '--repeats' >= 1, got {repeats}")
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in ("dl400", "fedem2000"):
            raise ValueError(f"Expected '--workloads' among dl400, fedem2000, got {w!r}")
    print(f"{ncpu} CPUs; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; threads {threads}")
    result = {"cpus": ncpu, "threads": threads, "repeats": repeats, "quick": args.quick}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for w in workloads:
            result[w] = scaling(w, threads, repeats, args.quick, tmp,
                                "seconds" if args.whole_run else "rounds_seconds", args.scaling_path)
        if args.old_path:
            old = [w for w in args.old_workloads.split(",") if w]
            for w in old:
                if w not in ("dl20", "dl20-model", "fig1"):
                    raise ValueError(f"Expected '--old-workloads' among dl20, dl20-model, fig1, got {w!r}")
            cpu = max(os.sched_getaffinity(0)) if args.pin and hasattr(os, "sched_getaffinity") else None
            result["old_vs_new"] = old_vs_new(os.path.abspath(args.old_path), old, repeats, args.quick, tmp, cpu)
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
