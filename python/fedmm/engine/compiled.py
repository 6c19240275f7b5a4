# SPDX-License-Identifier: BSD-3-Clause
"""The compiled backend: stretches of FedMM rounds in one call of ``engine.c``.

The arguments come from the public state of a :class:`fedmm.algorithms.Server`
and its :class:`fedmm.algorithms.Client` objects (data, control variates,
per-sample memory, stream keys, compressors' quantizer specs), and the
results go back through :meth:`Server.set_state` and the clients' public
arrays, which the C code updates in place.  Numbers are those of the
Python backend bit for bit: ``engine.c`` performs the operations of
:meth:`Client.step` and :meth:`Server.aggregate` in the same order, and the
Python backend calls the same compiled model callbacks.
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm.engine.metrics import step_record

__all__ = ["compiled_rounds", "compiled_start_statistics", "compiled_unsupported", "MINIBATCH_SHUFFLE_MAX"]

#: Minibatches of clients with at most this many samples are drawn by the compiled partial
#: Fisher-Yates shuffle (O(N_i) workspace); larger clients draw with NumPy (Python backend).
MINIBATCH_SHUFFLE_MAX = 4096


def _message_size(server: Any) -> int:
    return int(server.V.shape[0])


def compiled_unsupported(server: Any, clients: Sequence[Any]) -> str | None:
    """Why the compiled backend cannot run rounds of ``server`` and ``clients``, or None if it can."""
    model = server.model
    # before compiled_model(): building a compiled form costs (numba), and a bypassed override must be named
    overrides = model.compiled_overrides()
    if overrides:
        return (f"{type(model).__name__} overrides {', '.join(overrides)} in Python, which the compiled form it "
                "inherits does not run (redefine compiled_model() too if it does)")
    compiled = model.compiled_model()
    if compiled is None:
        return f"{type(model).__name__} has no compiled form in this configuration (compiled_model() is None)"
    n = server.n_clients
    if len(clients) != n or any(c.index != i for i, c in enumerate(clients)):
        return "the server does not hold every client in index order (a distributed runtime)"
    if server.projection not in ("euclidean", None):
        return f"projection={server.projection!r}"
    msg = _message_size(server)
    specs = _CompressorSpecs(msg)
    for c in clients:
        o = c.oracle
        if o.kind not in ("minibatch", "full"):
            return f"oracle={o.kind!r} (the SPIDER estimator runs on the Python backend)"
        if o.kind == "minibatch" and o.n_samples > MINIBATCH_SHUFFLE_MAX:
            return (f"client {c.index} has {o.n_samples} > {MINIBATCH_SHUFFLE_MAX} samples (its minibatches "
                    "are drawn by NumPy)")
        if (c.space != server.space or c.mode != server.mode or c.alpha != server.alpha or c.p != server.p
                or c.model is not model or o.kind != clients[0].oracle.kind):
            return f"client {c.index} is configured differently from the server"
        if c.V is not None and np.shape(c.V) != (msg,):
            return f"client {c.index} has no control variate of length {msg} (set-up not run)"
        if specs.spec(c.compressor) is None:
            return f"client {c.index}'s compressor {c.compressor!r} has no compiled quantizer (quantizer_spec)"
    return None


class _CompressorSpecs:
    """``quantizer_spec(msg)`` and ``payload_nbytes(msg)`` of the clients' compressors, asked once per
    compressor object (clients usually share one): a stretch's set-up then costs O(1) compressor calls
    instead of O(n).  Lives for one call, while the clients hold their compressors."""

    def __init__(self, msg: int) -> None:
        self.msg = msg
        self._specs: dict[int, Any] = {}
        self._nbytes: dict[int, int] = {}

    def spec(self, comp: Any) -> tuple[int, int, int, int] | None:
        key = id(comp)
        if key not in self._specs:
            spec = getattr(comp, "quantizer_spec", None)
            self._specs[key] = None if spec is None else spec(self.msg)
        return self._specs[key]

    def nbytes(self, comp: Any) -> int:
        key = id(comp)
        if key not in self._nbytes:
            self._nbytes[key] = int(comp.payload_nbytes(self.msg))
        return self._nbytes[key]


def compiled_start_statistics(server: Any, clients: Sequence[Any], theta: Any, n_threads: int = 1,
                              pool: kernels.WorkerPool | None = None) -> list[np.ndarray | None] | None:
    """The start exchange's full local statistics ``s̄_i(θ)`` of every client, in one compiled call.

    What :meth:`fedmm.algorithms.Client.start_statistic` computes (``model.statistic`` over the
    client's whole data set at the start broadcast's ``θ``, without per-sample memory), for all
    clients at once on ``pool`` (or a :class:`fedmm.kernels.WorkerPool` of ``n_threads`` made for the
    call), with the same numbers whatever the threads.  Returns one statistic per client, in client
    order (None for a client whose statistic failed: the caller reruns it in Python, which raises the
    error its fault policy handles), or None, with nothing computed, when :func:`compiled_unsupported`
    gives a reason.
    """
    if compiled_unsupported(server, clients) is not None:
        return None
    model = server.model
    compiled = model.compiled_model()
    datas = [model.compiled_data(c.data) for c in clients]
    theta_c = np.array(model.compiled_theta(theta, compiled), dtype=np.float64)
    S, status, n_bad = kernels.full_statistics(compiled, theta_c, datas, n_threads, pool)
    total = int(n_bad[status == 0].sum())
    if total:
        warnings.warn(f"{total} inner-solver columns hit their iteration cap in the start exchange's statistics",
                      kernels.ConvergenceWarning, stacklevel=3)
    return [S[i] if status[i] == 0 else None for i in range(len(clients))]


def compiled_rounds(server: Any, clients: Sequence[Any], t0: int, n_rounds: int, n_threads: int = 1,
                    max_seconds: float = float("inf"), pool: kernels.WorkerPool | None = None
                    ) -> list[dict[str, Any]] | None:
    """Rounds ``t0, …, t0 + n_rounds − 1`` of ``server`` with all its ``clients``, in one compiled call.

    Returns one dict per round run (``record``: what :meth:`Server.aggregate`
    returns; ``active``: the clients whose message was aggregated;
    ``n_contacted``; ``bytes_up``; ``bytes_down``; ``seconds``), or None,
    with nothing changed, when :func:`compiled_unsupported` gives a reason.
    Fewer rounds (at least one) run when they take more than ``max_seconds``.
    Rounds are atomic: when a client's round or the server step fails in
    round ``t``, the rounds before it are committed and the list ends with
    ``{"failed": reason, "t": t, "client": i}`` (``i = -1``: the server
    step), round ``t`` having left the server and the clients' control
    variates as they were; the caller reruns it on the Python backend,
    which applies its fault policy.

    The contacted clients of a round run on ``pool`` when given (its
    threads persist across calls; ``n_threads`` is then ignored), else on a
    :class:`fedmm.kernels.WorkerPool` of ``n_threads`` made for this call
    (none for one thread).  The numbers do not depend on either.
    """
    if pool is not None and not isinstance(pool, kernels.WorkerPool):
        raise TypeError(f"Expected 'pool' to be a fedmm.kernels.WorkerPool or None, got {type(pool).__name__}")
    if n_rounds < 1 or compiled_unsupported(server, clients) is not None or any(c.V is None for c in clients):
        return None
    model = server.model
    compiled = model.compiled_model()
    msg = _message_size(server)
    datas, memories, Vs, nbytes, quantizers = [], [], [], [], []
    specs = _CompressorSpecs(msg)
    for c in clients:
        if not (type(c.V) is np.ndarray and c.V.dtype == np.float64 and c.V.flags.c_contiguous
                and c.V.flags.writeable):
            c.V = np.array(c.V, dtype=np.float64)  # the kernel updates it in place
        datas.append(model.compiled_data(c.data))
        memories.append(model.compiled_memory(c.oracle.memory, c.data))
        Vs.append(c.V)
        quantizers.append(specs.spec(c.compressor))
        nbytes.append(specs.nbytes(c.compressor))
    quantizers = np.array(quantizers, dtype=np.int64).reshape(len(clients), 4)
    keys = np.ascontiguousarray(np.stack([c.stream.key for c in clients]), dtype=np.uint64)
    first = clients[0].oracle
    batch = max(c.oracle.batch_size or 1 for c in clients) if first.kind == "minibatch" else 1
    gammas = np.array([server.schedule(t + 1) for t in range(t0, t0 + n_rounds)], dtype=np.float64)
    theta = np.array(model.compiled_theta(server.theta, compiled), dtype=np.float64)
    theta_prev = np.empty_like(theta)
    S = None if server.space == "parameter" else np.array(server.S, dtype=np.float64)
    V = np.array(server.V, dtype=np.float64)
    senders, n_senders, n_contacted, dist, seconds, n_bad, failure = kernels.run_rounds(
        compiled, server.space, server.mode, first.kind, server.projection == "euclidean", batch, server.p,
        server.alpha, -1 if server.count is None else server.count, server.weights / server.p,
        np.ascontiguousarray(server.stream.key, dtype=np.uint64), datas, memories, Vs, keys, quantizers, S, V,
        theta, theta_prev, t0, gammas, n_threads, max_seconds, pool, statistic_max=server.statistic_bound)
    if n_bad:
        warnings.warn(f"{n_bad} inner-solver columns hit their iteration cap in the compiled rounds "
                      f"{t0}..{t0 + len(n_senders) - 1}", kernels.ConvergenceWarning, stacklevel=3)
    failed = [] if failure is None else [{"failed": failure[2], "t": failure[0], "client": failure[1]}]
    if len(n_senders) == 0:
        return failed
    d = compiled.d
    theta_like = server.theta
    # S-space: θ = T(Ŝ) as the model's T builds it; Θ-space: θ rebuilt from its vector, as Server.aggregate does
    server.set_state({"S": S, "V": V, "theta_vector": theta[:d].copy(), "theta_vector_prev": theta_prev[:d].copy()},
                     theta=model.theta_from_compiled(theta, theta_like) if server.space == "statistic" else None)
    message_nbytes = int(server.broadcast_nbytes)
    # bytes up per round: the senders' payload sizes summed in int64 (exact), all rounds at once
    sent = np.arange(senders.shape[1]) < n_senders[:, None]
    bytes_up = np.where(sent, np.array(nbytes, dtype=np.int64)[senders], 0).sum(axis=1)
    out = []
    # Python floats and ints once (the records are what Server.aggregate returns, to the bit)
    for gamma, (d_s, d_theta), ids, count, contacted, wall, up in zip(
            gammas.tolist(), dist.tolist(), senders.tolist(), n_senders.tolist(), n_contacted.tolist(),
            seconds.tolist(), bytes_up.tolist()):
        del ids[count:]
        out.append({"record": step_record(gamma, d_theta, d_s if server.space == "statistic" else None),
                    "active": ids, "n_contacted": contacted, "bytes_up": up,
                    "bytes_down": contacted * message_nbytes, "seconds": wall})
    return out + failed
