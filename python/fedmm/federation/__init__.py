# SPDX-License-Identifier: BSD-3-Clause
"""The federation skeleton's engine: what every algorithm's one ``run``
(:class:`fedmm.algorithms.FederatedAlgorithm`) drives — the in-process runtime
(:class:`LocalRuntime`: selection, broadcast, the clients' rounds on threads,
the fault policy and its roll-back, the records), checkpoints, the state
values that cross layers (:class:`RoundConfig`, :class:`ServerState`,
:class:`ClientState` of FedMM; :class:`SubgradientServerState`, :class:`SubgradientClientState`
of the non-smooth family; :class:`OTServerState`, :class:`OTClientState` of FedMM-OT and FedAdam)
and the compiled backend of the FedMM round (the Python reference backend is
:class:`fedmm.algorithms.Server` / :class:`fedmm.algorithms.Client`).
Formerly ``fedmm.engine``.

A round is defined twice, once per backend, and both give the same numbers:

- **Python backend** — :meth:`Client.step` on each contacted client, payload
  bytes through the compressors' ``encode``/``decode``, then
  :meth:`Server.aggregate`; any model, any compressor, any runtime.
- **Compiled backend** — :func:`compiled_rounds` runs whole stretches of
  rounds (selection, every contacted client's round on a WorkerPool's threads,
  aggregation, SA step, projection, ``T``, control variates) in one GIL-free
  call of ``engine.c``, for models whose :meth:`~fedmm.models.SurrogateModel.compiled_model`
  returns a :class:`fedmm.kernels.CompiledModel` and compressors whose
  :meth:`~fedmm.compression.Compressor.quantizer_spec` is not None.  It works on
  values: a :class:`RoundConfig`, a :class:`ServerState` and one :class:`ClientState`
  per client in, new states out (:meth:`Server.simulate_rounds` exports and imports them).

:func:`compiled_unsupported` says why a configuration runs on the Python backend.
The round mechanics every family shares (:mod:`fedmm.federation.skeleton`): :class:`PhiloxRounds` (round
``t``'s random stream of a key, every party's), :class:`ClientSelection`
(both participation rules and Algorithm 4's server coins), :func:`decode_payloads` (payload decoding, validation
and the fault policy), :func:`weighted_aggregate`, :func:`mean_aggregate` and :func:`sum_aggregate` (the
unweighted aggregation), :func:`control_variate_update` and :func:`guarded_step` (a failing server step under
the fault policy, with its retries).
A :class:`Checkpoint` is the state of a run after a completed round, from which
``run(..., resume=...)`` continues bit for bit.
"""
from fedmm.federation.backend import compiled_start_statistics, compiled_unsupported
from fedmm.federation.checkpoint import Checkpoint, CheckpointWriter, data_digest, import_arrays
from fedmm.federation.compiled import CompiledRounds, compiled_rounds, compiled_statistics, config_unsupported
from fedmm.federation.local import LocalRuntime, finish_round, record_initial, round_record, run_monitor
from fedmm.federation.metrics import squared_distance, step_record, update_size
from fedmm.federation.skeleton import (MAX_STEP_RETRIES, SELECTION_MODES, SUM_ORDERS, ClientSelection, PhiloxRounds,
                                      RoundSelection, check_message, control_variate_update, decode_payloads,
                                      empty_payload_reason, guarded_step, mean_aggregate, refuse,
                                      step_without_failing_messages, sum_aggregate, weighted_aggregate)
from fedmm.federation.state import (ArrayState, ClientState, OTClientState, OTServerState, RoundConfig, ServerState,
                                   SubgradientClientState, SubgradientServerState)

__all__ = ["ArrayState", "Checkpoint", "CheckpointWriter", "ClientSelection", "ClientState", "CompiledRounds",
           "LocalRuntime",
           "OTClientState", "OTServerState", "PhiloxRounds", "RoundConfig", "RoundSelection", "SELECTION_MODES",
           "ServerState", "SubgradientClientState", "SubgradientServerState", "data_digest",
           "compiled_rounds", "compiled_start_statistics", "compiled_statistics", "compiled_unsupported",
           "config_unsupported",
           "finish_round", "record_initial", "round_record", "run_monitor", "squared_distance", "step_record",
           "update_size", "check_message", "control_variate_update", "decode_payloads", "empty_payload_reason",
           "guarded_step", "import_arrays", "mean_aggregate", "refuse", "step_without_failing_messages",
           "sum_aggregate", "weighted_aggregate", "MAX_STEP_RETRIES", "SUM_ORDERS"]
