# SPDX-License-Identifier: BSD-3-Clause
"""Write ``nonsmooth_reference.npz``: Histories of the non-smooth family from the pre-redesign code.

Run once with the code of commit ed3cf4d (before FedAvg, Scaffold and Scaffnew moved onto the
Server/Client/runtime split and the API of issue 13)::

    git worktree add /tmp/old ed3cf4d && cd /tmp/old && pip install --no-build-isolation -e .
    python tests/data/make_nonsmooth_reference.py

It uses the old API (positional hyper-parameters, ``eta``/``lam``/``probability``/``x0``,
``Linear``/``Inverse``); ``tests/test_nonsmooth_api.py`` runs the same cases with the new one
and asserts equality with tolerance 0.  Kept for the record: it does not run on the new API.
"""
import os

import numpy as np

from fedmm.algorithms.fedmls import FedMLS, Inverse, Linear
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
from fedmm.models.nonsmooth import HingeSVM, L1Regression


def reference_datas():
    """Clients of unequal sizes (different minibatch sizes per client)."""
    rng = np.random.default_rng(20240601)
    hinge = []
    for i, m in enumerate([13, 25, 7, 31, 18]):
        A = rng.normal(size=(m, 3)) + rng.normal(size=3)
        y = np.where(A @ np.array([1.0, -1.0, 0.5]) + 0.5 * rng.normal(size=m) > 0.2 * i, 1.0, -1.0)
        hinge.append((A, y))
    l1 = []
    for i, m in enumerate([9, 20, 15, 30]):
        A = rng.normal(size=(m, 4)) + rng.normal(size=4)
        l1.append((A, A @ np.ones(4) + rng.standard_t(2, size=m) + i))
    return hinge, l1


def cases(hinge, l1):
    svm, lad = HingeSVM(), L1Regression()
    return {
        "fedavg_hinge_mb": (FedAvg(svm, Linear(1), 0.05), hinge, 12, {"seed": 3}),
        "fedavg_l1_full": (FedAvg(lad, 2, lambda k: 0.01 / k, oracle="full"), l1, 10, {}),
        "scaffold_hinge_mb": (Scaffold(svm, Linear(1), 0.05), hinge, 12, {"seed": 3}),
        "scaffold_l1_mb": (Scaffold(lad, 3, lambda t: 0.02 / np.sqrt(t), global_step=1.5, batch_fraction=0.3),
                           l1, 10, {"seed": np.random.SeedSequence(7), "x0": np.full(4, 0.5)}),
        "scaffnew_hinge_mb": (Scaffnew(svm, 0.05), hinge, 12, {"seed": 3}),
        "scaffnew_l1_full": (Scaffnew(lad, lambda t: 0.01, probability=0.3, oracle="full"), l1, 10, {"seed": 4}),
        "fedmls_hinge_mb_c": (FedMLS(svm, Linear(1), Inverse(1.0), 5.0), hinge, 12, {"seed": 3}),
        "fedmls_l1_mb_numpy": (FedMLS(lad, Linear(2), Inverse(0.5), None, backend="numpy"), l1, 10, {"seed": 5}),
    }


def main():
    hinge, l1 = reference_datas()
    out = {}
    for i, (A, y) in enumerate(hinge):
        out[f"data/hinge/{i}/A"], out[f"data/hinge/{i}/y"] = A, y
    for i, (A, y) in enumerate(l1):
        out[f"data/l1/{i}/A"], out[f"data/l1/{i}/y"] = A, y
    for name, (algo, datas, n_rounds, kwargs) in cases(hinge, l1).items():
        h = algo.run(datas, n_rounds, **kwargs)
        for key in h.keys():
            if key in ("wall_time", "active", "dropped", "t"):
                continue
            out[f"{name}/records/{key}"] = h.column(key)
        for key, value in h.state.items():
            out[f"{name}/state/{key}"] = value
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nonsmooth_reference.npz")
    np.savez_compressed(path, **out)
    print(f"wrote {path}: {sorted(k for k in out if not k.startswith('data/'))}")


if __name__ == "__main__":
    main()
