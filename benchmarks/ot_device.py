# SPDX-License-Identifier: BSD-3-Clause
"""FedMM-OT and FedAdam on the CPU and on a GPU: client-rounds per second and how far the two runs differ.

At the settings of ``fedmm experiment ot`` (known-map benchmark, 10 clients of 500 samples, 5,000 public
target samples, one local step, FedMM-OT with Adam's step on ω, γ = 3e-3 and 30 server θ-steps, FedAdam
with server learning rate 3e-3; dense ICNNs of Korotin et al.'s MMv2 sizes) and minibatches of 128 and
4,096, each algorithm runs ``--rounds`` rounds from the same warm start (computed once, on the CPU) on
``jax.devices("cpu")[0]`` and, when JAX has one, on ``jax.devices("gpu")[0]``, pinned with the algorithms'
``device=`` argument (float64 on both).  A one-round run first compiles the steps for the device and is not
timed.  Printed per (algorithm, minibatch, device): client-rounds per second of the rounds themselves
(``History`` ``wall_time``; the L2-UVP evaluations are not timed), and per (algorithm, minibatch) the largest
absolute and relative differences between the CPU and GPU runs' final ``ω``, ``θ`` and L2-UVP curves
(evaluated every ``--evaluate-every`` rounds on ``--n-eval`` fixed source points, on the run's device).

Expected: the GPU run equals the CPU run to float64 rounding carried through the rounds (different summation
orders in the GPU's matrix products and reductions): relative difference of the final parameters (largest
absolute difference over the largest absolute value) and absolute difference of the L2-UVP curves (in
percent) below ``--rtol`` (default 1e-8) after ten rounds.  The script says PASS or FAIL against it, and
exits 1 on FAIL.  On a machine without a GPU the GPU half is skipped, with a line saying so.

Run from the repository root (about 3 minutes on a 16-core machine with an H100 at the defaults)::

    python benchmarks/ot_device.py                     # d = 64, minibatches 128 and 4096, 10 rounds
    python benchmarks/ot_device.py --quick             # a tiny smoke run (d = 2, small networks)
    python benchmarks/ot_device.py --json ot_device.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

N_CLIENTS = 10


def _devices():
    import jax

    devices = {"cpu": jax.devices("cpu")[0]}
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:  # no GPU backend here
        gpus = []
    if gpus:
        devices["gpu"] = gpus[0]
    return devices


def _run(algo, datas, target, init, rounds, evaluator, every):
    algo.run(datas, 1, target=target, seed=0, init=init)  # compiles for this device and minibatch
    curve = []

    def evaluate(m):
        est = evaluator(m)
        curve.append(est.value)
        return {"l2_uvp": est.value}

    h = algo.run(datas, rounds, target=target, seed=0, init=init, evaluate=evaluate, evaluate_every=every)
    seconds = h.records[-1]["wall_time"]
    return {"history": h, "curve": np.asarray(curve), "seconds": seconds,
            "client_rounds_per_s": N_CLIENTS * rounds / seconds}


def _differences(a, b):
    """Largest absolute difference and that over the largest absolute value of ``a`` (omega, theta, curve)."""
    out = {}
    for key in ("omega", "theta"):
        x, y = a["history"].state[key], b["history"].state[key]
        diff = float(np.max(np.abs(x - y)))
        out[f"{key}_max_abs"] = diff
        out[f"{key}_max_rel"] = diff / float(np.max(np.abs(x)))
    diff = float(np.max(np.abs(a["curve"] - b["curve"])))
    out["l2_uvp_max_abs"] = diff
    out["l2_uvp_max_rel"] = diff / float(np.max(np.abs(a["curve"])))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=64, help="dimension d (default 64)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 4096],
                        help="source and target minibatch sizes (default 128 4096)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds per run (default 10)")
    parser.add_argument("--evaluate-every", type=int, default=5, help="L2-UVP every this many rounds (default 5)")
    parser.add_argument("--n-eval", type=int, default=4096, help="L2-UVP evaluation points (default 4096)")
    parser.add_argument("--identity-steps", type=int, default=300, help="warm-start Adam steps (default 300)")
    parser.add_argument("--rtol", type=float, default=1e-8, help="tolerance for the CPU/GPU comparison")
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: d = 2, hidden sizes [8, 8], minibatch 16, 2 rounds")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    if min(args.dim, args.rounds, args.evaluate_every, args.n_eval, *args.batch_sizes) < 1 or args.identity_steps < 0:
        parser.error("--dim, --batch-sizes, --rounds, --evaluate-every and --n-eval must be >= 1, "
                     "--identity-steps >= 0")

    import jax

    from fedmm.algorithms import FedAdam, FedMMOT
    from fedmm.data import client_datasets, known_map_benchmark
    from fedmm.models import TransportProblem

    hidden, per_client, n_target = None, 500, 5000
    if args.quick:
        args.dim, args.batch_sizes, args.rounds, args.evaluate_every = 2, [16], 2, 1
        args.n_eval, args.identity_steps, hidden, per_client, n_target = 256, 10, [8, 8], 40, 200
    started = time.perf_counter()
    devices = _devices()
    print(f"JAX {jax.__version__}; devices: " + ", ".join(f"{k} = {v.device_kind}" for k, v in devices.items()))
    if "gpu" not in devices:
        print("no GPU: JAX has no 'gpu' backend here; the GPU half and the comparison are skipped")
    d = args.dim
    bench = known_map_benchmark(d, seed=0)
    datas = client_datasets(bench, N_CLIENTS, per_client, seed=[0, 1])
    target = bench.sample_target(n_target, seed=[0, 2])
    evaluator = bench.l2_uvp_evaluator(n_eval=args.n_eval, seed=[0, 3])
    problem = TransportProblem(d, hidden_sizes=hidden, batch_size=args.batch_sizes[0])
    with jax.default_device(devices["cpu"]):
        init = problem.init(0, identity_steps=args.identity_steps)
    results, failed = [], False
    print(f"d = {d}, {N_CLIENTS} clients x {per_client} samples, {args.rounds} rounds, n_params = {problem.n_params}")
    print(f"{'algorithm':9} {'batch':>6} {'device':6} {'client-rounds/s':>16} {'final L2-UVP %':>15}")
    for batch in args.batch_sizes:
        common = {"weights": [1.0 / N_CLIENTS] * N_CLIENTS, "batch_size": batch, "local_lr": 0.003}
        makers = {"FedMMOT": lambda dev: FedMMOT(problem, step=3e-3, omega_step="adam", theta_steps=30,
                                                 theta_lr=1e-3, device=dev, **common),
                  "FedAdam": lambda dev: FedAdam(problem, server_lr=3e-3, device=dev, **common)}
        for name, make in makers.items():
            runs = {}
            for kind, dev in devices.items():
                runs[kind] = _run(make(dev), datas, target, init, args.rounds, evaluator, args.evaluate_every)
                print(f"{name:9} {batch:6d} {kind:6} {runs[kind]['client_rounds_per_s']:16.1f} "
                      f"{runs[kind]['curve'][-1]:15.4f}", flush=True)
            row = {"algorithm": name, "batch_size": batch, "dim": d, "rounds": args.rounds,
                   **{f"{k}_client_rounds_per_s": r["client_rounds_per_s"] for k, r in runs.items()},
                   **{f"{k}_device": r["history"].config["device"] for k, r in runs.items()}}
            if "gpu" in runs:
                diff = _differences(runs["cpu"], runs["gpu"])
                worst = max(diff["omega_max_rel"], diff["theta_max_rel"], diff["l2_uvp_max_abs"])
                ok = bool(np.isfinite(worst) and worst <= args.rtol)
                failed |= not ok
                row.update(diff, gpu_speedup=runs["gpu"]["client_rounds_per_s"] / runs["cpu"]["client_rounds_per_s"],
                           within_rtol=ok)
                print(f"  CPU vs GPU: omega max abs {diff['omega_max_abs']:.2e} (rel {diff['omega_max_rel']:.2e}), "
                      f"theta max abs {diff['theta_max_abs']:.2e} (rel {diff['theta_max_rel']:.2e}), "
                      f"L2-UVP max abs {diff['l2_uvp_max_abs']:.2e} (rel {diff['l2_uvp_max_rel']:.2e}): "
                      f"{'PASS' if ok else 'FAIL'} (rtol {args.rtol:g}); GPU speed-up {row['gpu_speedup']:.1f}x")
            results.append(row)
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"jax": jax.__version__, "rtol": args.rtol, "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
