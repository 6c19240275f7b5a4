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
from fedmm.algorithms._oracle import _PERMUTATION_MAX
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.models.dictionary import DictionaryLearning

__all__ = ["dictionary_client_rounds"]

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
    theta = np.asfortranarray(message.theta, dtype=np.float64)
    ref = np.ascontiguousarray(ref, dtype=np.float64)
    codes, works, iworks = [], [], []
    for c in clients:
        if not (c.V.flags.c_contiguous and c.V.flags.writeable and c.V.dtype == np.float64):
            c.V = np.array(c.V, dtype=np.float64)
        codes.append(None if c.oracle.memory is None else model._warm_codes(c.oracle.memory, c.data, None))
        work = _workspace(c, model, batch)
        works.append(work[0])
        iworks.append(work[1])
    # V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ), with α/p evaluated as the Python path does.
    v_step = first.alpha / first.p if first.alpha else 0.0
    scheme, bits, norm, block = comp_args
    values, n_bad = _rounds.dictionary_client_rounds(
        theta, model.lam, model.tol, model.max_iter, _LASSO_AUTO, [c.data for c in clients], codes,
        [c.stream.key for c in clients], message.t, _rounds.SPACES[space], ref, model.eta, [c.V for c in clients],
        v_step, scheme, bits, norm, block, batch, works, iworks, n_threads)
    _warn_unconverged(n_bad, batch * len(clients), "dictionary_statistics", model.max_iter)
    return [c._simulated(values[k]) for k, c in enumerate(clients)]
