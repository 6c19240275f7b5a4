# SPDX-License-Identifier: BSD-3-Clause
"""
One run, three ways to execute it in process
============================================

The same FedMM run (dictionary learning, 20 heterogeneous clients, 10 per round, 8-bit stochastic
rounding, control variates) executed in process by :class:`fedmm.federation.LocalRuntime` (chosen with
``FedMM(backend=..., n_threads=...)``)

- on the **compiled backend** (whole stretches of rounds in one C call, no GIL),
- on the **Python backend** with one thread (``Client.step`` and ``Server.aggregate`` with real
  payload bytes),
- on the Python backend with two threads.

Every party draws its random numbers from its own counter-based stream, a function of (seed, party,
round) only, so the three Histories are equal bit for bit; only the wall time differs.  The same holds
for :class:`fedmm.runtime.RayRuntime` and the Flower runtime, which move the same messages between
processes or machines (not run here: they start servers).
"""
# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.data import split_by_constrained_kmeans, synthetic_dictionary
from fedmm.models import DictionaryLearning

Z, _, _ = synthetic_dictionary(2000, 20, 15, seed=0)
datas = split_by_constrained_kmeans(Z, 20, seed=0)
settings = {
    "compiled backend": dict(backend="compiled"),
    "Python backend, 1 thread": dict(backend="python", n_threads=1),
    "Python backend, 2 threads": dict(backend="python", n_threads=2),
}
histories, seconds = {}, {}
for name, setting in settings.items():
    algo = FedMM(DictionaryLearning(15, lam=0.1, ridge=0.2), clients_per_round=10,
                 compressor=StochasticRounding(bits=8), control_variate_step=0.01, step=("sqrt", 0.05), batch_size=50,
                 **setting)
    start = time.perf_counter()
    histories[name] = algo.run(datas, 100, seed=0, evaluate_every=10)
    seconds[name] = time.perf_counter() - start

# %%
# Same numbers
# ------------
# ``History.equals`` compares every recorded field of every round (not the wall time); the final
# dictionaries are compared bit for bit too.  ``History.config["backend"]`` says which backend ran.
reference = histories["compiled backend"]
for name, h in histories.items():
    same = h.equals(reference) and np.array_equal(h.state["theta"], reference.state["theta"])
    print(f"{name:28s} {seconds[name]:6.2f} s   identical to the compiled run: {same}   "
          f"(backend that ran: {h.config['backend']})")

# %%
# The runs' objectives lie on top of each other
# ---------------------------------------------
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for (name, h), (marker, size) in zip(histories.items(), [("o", 9), ("s", 6), ("x", 6)]):
    t, objective = h.column("t"), h.column("objective")
    keep = np.isfinite(objective)
    ax.plot(t[keep], objective[keep], marker=marker, markersize=size, linestyle="-" if marker == "o" else "",
            fillstyle="none", label=f"{name} ({seconds[name]:.2f} s)")
ax.set_xlabel("communication round")
ax.set_ylabel("mean min_h ½‖z − θh‖² + λ‖h‖₁  + η‖θ‖²")
ax.set_title("Identical runs on three in-process executions")
ax.legend()
fig.tight_layout()
