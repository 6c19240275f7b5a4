# SPDX-License-Identifier: BSD-3-Clause
"""The compiled client round of dictionary learning: every active client of a round in one GIL-free call.

:meth:`fedmm.algorithms.Client.step_many` evaluates the clients' statistics
in one kernel call but still samples, subtracts, quantizes and updates the
control variates client by client in Python.  For the configuration of the
FedMM paper's experiments (:class:`~fedmm.models.DictionaryLearning`,
minibatch oracles, Algorithm 2, messages in S-space or, for the Θ-space
baseline with the ridge ``T``, in Θ-space, any compressor of
:mod:`fedmm.compression`) ``fedmm_dictionary_client_round`` (``rounds.c``)
does the whole client round in C, on several threads: it calls the same
kernels on the same operands, and draws from a C replica of each client's
Philox stream at the same counter, so the payloads, control variates and
remembered codes are the ones :meth:`Client.step_many` produces, bit for bit
(``tests/test_engine_fused.py``).  Any other configuration returns None and
the caller takes the Python path.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm import _rounds, _sparse
from fedmm._kernels_sparse import _warn_unconverged
from fedmm.algorithms._metrics import step_record
from fedmm.algorithms._oracle import _PERMUTATION_MAX
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.models.dictionary import DictionaryLearning

__all__ = ["dictionary_client_rounds", "dictionary_fedmm_rounds"]

_LASSO_AUTO = _sparse.METHODS["auto"]  # the method DictionaryLearning's statistics use


def _compressor_args(comp: Any, q: int) -> tuple[int, int, int, int] | None:
    """``(scheme, bits, norm, block)`` of a compressor the kernel implements, else None."""
    if type(comp) is Identity:
        return 0, 0, 0, 0
    if type(comp) in (StochasticRounding, BlockQuantizer):
        return comp._scheme_id, comp.bits, comp._norm_code, comp._effective_block(q)
    return None


def _workspace(client: Any, model: DictionaryLearning, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The client's own kernel workspaces (float64 and int64), allocated at its first compiled round
    and reused after (scratch memory: nothing carries over)."""
    work = client._fused_work
    n_doubles, n_ints = _rounds.client_round_work_sizes(model.n_features, model.n_components, batch,
                                                        client.oracle.n_samples)
    if work is None or work[0].shape[0] < n_doubles or work[1].shape[0] < n_ints:
        work = client._fused_work = (np.empty(n_doubles), np.empty(n_ints, dtype=np.int64))
    return work


def _client_arguments(clients: Sequence[Any], model: DictionaryLearning, space: str, q: int,
                      workspaces: bool = True) -> tuple[int, tuple[int, int, int, int], dict[str, list]] | None:
    """``(batch, compressor arguments, buffers)`` of clients the compiled round can run, else None.

    ``buffers`` holds the per-client lists the kernels take (data, remembered
    codes, Philox keys, control variates and, with ``workspaces``, each
    client's kernel workspaces); control variates that
    are not writable contiguous float64 are replaced by such copies first.
    """
    first = clients[0]
    batch = first.oracle.batch_size
    comp_args = _compressor_args(first.compressor, q)
    if comp_args is None:
        return None
    for c in clients:
        o = c.oracle
        if (c.model is not model or c.space != space or c.mode != "select" or o.kind != "minibatch"
                or o.batch_size != batch or o.n_samples > _PERMUTATION_MAX or c.compressor is not first.compressor
                or c.alpha != first.alpha or c.p != first.p or c.V is None or c.V.shape != (q,)):
            return None
    buffers: dict[str, list] = {"datas": [], "codes": [], "keys": [], "Vs": [], "works": [], "iworks": []}
    for c in clients:
        if not (c.V.flags.c_contiguous and c.V.flags.writeable and c.V.dtype == np.float64):
            c.V = np.array(c.V, dtype=np.float64)
        buffers["datas"].append(c.data)
        buffers["codes"].append(None if c.oracle.memory is None else model._warm_codes(c.oracle.memory, c.data, None))
        buffers["keys"].append(c.stream.key)
        buffers["Vs"].append(c.V)
        if workspaces:
            work = _workspace(c, model, batch)
            buffers["works"].append(work[0])
            buffers["iworks"].append(work[1])
    return batch, comp_args, buffers


def _v_step(client: Any) -> float:
    """``α/p`` of ``V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ)``, evaluated as the Python path does."""
    return client.alpha / client.p if client.alpha else 0.0


def dictionary_client_rounds(clients: Sequence[Any], message: Any, n_threads: int) -> list[Any] | None:
    """Run :meth:`Client.step` of every client in ``clients`` for ``message`` in one compiled call.

    Returns the clients' payloads (:class:`SimulatedMessage`), or None when
    this configuration has no compiled round (then nothing was changed).
    """
    first = clients[0]
    model = first.model
    space = first.space
    if type(model) is not DictionaryLearning:
        return None
    if space == "statistic":
        if message.statistic is None:
            return None
        ref, q = message.statistic, model.layout.size
    elif model.constraint is None:  # the Θ-space baseline, with the ridge T the kernel implements
        ref, q = message.theta_vector, model.n_features * model.n_components
    else:
        return None
    args = _client_arguments(clients, model, space, q)
    if args is None:
        return None
    batch, (scheme, bits, norm, block), buf = args
    theta = np.asfortranarray(message.theta, dtype=np.float64)
    ref = np.ascontiguousarray(ref, dtype=np.float64)
    values, n_bad = _rounds.dictionary_client_rounds(
        theta, model.lam, model.tol, model.max_iter, _LASSO_AUTO, buf["datas"], buf["codes"], buf["keys"],
        message.t, _rounds.SPACES[space], ref, model.eta, buf["Vs"], _v_step(first), scheme, bits, norm, block,
        batch, buf["works"], buf["iworks"], n_threads)
    _warn_unconverged(n_bad, batch * len(clients), "dictionary_statistics", model.max_iter)
    return [c._simulated(values[k]) for k, c in enumerate(clients)]


def dictionary_fedmm_rounds(
    server: Any, clients: Sequence[Any], t0: int, n_rounds: int, n_threads: int, max_seconds: float = float("inf")
) -> list[tuple[dict[str, Any], list[int], int, float]] | None:
    """Rounds ``t0, …, t0 + n_rounds − 1`` of FedMM (or its Θ-space baseline) in one compiled call.

    The whole round (Algorithm 2: selection, every active client's round on
    ``n_threads`` OpenMP threads, aggregation, SA step, projection, ridge
    ``T``, control variates) runs without returning to Python, through the
    kernels :class:`Server` and :meth:`Client.step` call, on the same
    operands and random streams: the numbers are those of the per-round
    path, bit for bit (``tests/test_engine_fused.py``).  For dictionary
    learning with the ridge ``T``, Algorithm 2, minibatch oracles and a
    compressor of :mod:`fedmm.compression`; None (nothing done) otherwise.

    Returns one ``(server record, active clients, bytes up, seconds)`` per
    round run: the call stops early, after at least one round, once it has
    run for ``max_seconds``.  The server's state afterwards is that of the
    per-round path after the last of them.
    """
    model = server.model
    space = server.space
    n = server.n_clients
    if (type(model) is not DictionaryLearning or model.constraint is not None or server.mode != "select"
            or len(clients) != n or n == 0 or any(c.index != i for i, c in enumerate(clients))
            or server.projection not in ("euclidean", None) or space not in ("statistic", "parameter")):
        return None
    q = server._size
    if (not (type(server.V) is np.ndarray and server.V.shape == (q,)) or clients[0].p != server.p
            or clients[0].alpha != server.alpha):
        return None
    args = _client_arguments(clients, model, space, q, workspaces=False)  # the kernel keeps one per thread
    if args is None:
        return None
    batch, (scheme, bits, norm, block), buf = args
    gammas = np.array([server.schedule(t + 1) for t in range(t0, t0 + n_rounds)], dtype=np.float64)
    theta_vector = np.array(server.theta_vector, dtype=np.float64)
    D = np.array(theta_vector.reshape(model.n_features, model.n_components), order="F")  # never a view
    theta_prev = np.empty_like(theta_vector)
    S = None if space == "parameter" else np.array(server.S, dtype=np.float64)
    V = np.array(server.V, dtype=np.float64)
    active, n_active, dist, seconds, n_bad = _rounds.dictionary_fedmm_rounds(
        D, theta_vector, theta_prev, S, V, model.lam, model.tol, model.max_iter, _LASSO_AUTO, buf["datas"],
        buf["codes"], buf["keys"], buf["Vs"], _rounds.SPACES[space], model.eta,
        _v_step(clients[0]), scheme, bits, norm, block, batch, server.stream.key,
        -1 if server.count is None else server.count, server.p, server.weights / server.p, t0, gammas,
        server.alpha, server.projection == "euclidean", n_threads, max_seconds)
    _warn_unconverged(n_bad, batch * int(n_active.sum()), "dictionary_statistics", model.max_iter)
    if len(n_active) == 0:
        return []
    # The server's state after the last round, in the forms Server.aggregate leaves.
    server.theta_vector_prev = theta_prev
    server.theta_vector = theta_vector
    server.theta = D if space == "statistic" else model.theta_from_vector(theta_vector, server._theta_like)
    if S is not None:
        server.S = S
    if server.alpha:
        server.V = V
    server._coins = None
    payload_nbytes = int(clients[0].compressor.payload_nbytes(q))
    out = []
    # Python floats and ints once (the records are what Server.aggregate returns, to the bit)
    for gamma, (d_s, d_theta), ids, count, wall in zip(gammas.tolist(), dist.tolist(), active.tolist(),
                                                       n_active.tolist(), seconds.tolist()):  # rounds run
        record = step_record(gamma, d_theta, d_s if space == "statistic" else None)
        del ids[count:]
        out.append((record, ids, payload_nbytes * count, wall))
    return out
