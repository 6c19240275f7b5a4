# SPDX-License-Identifier: BSD-3-Clause
"""The FedMM round engine: the compiled backend of the round (the Python reference backend is
:class:`fedmm.algorithms.Server` / :class:`fedmm.algorithms.Client`).

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
A :class:`Checkpoint` is the state of a run after a completed round, from which
``run(..., resume=...)`` continues bit for bit.
"""
from fedmm.engine.backend import compiled_start_statistics, compiled_unsupported
from fedmm.engine.checkpoint import Checkpoint, CheckpointWriter, data_digest
from fedmm.engine.compiled import CompiledRounds, compiled_rounds, compiled_statistics, config_unsupported
from fedmm.engine.local import LocalRuntime, finish_round, record_initial, round_record, run_monitor
from fedmm.engine.metrics import squared_distance, step_record, update_size
from fedmm.engine.state import ClientState, RoundConfig, ServerState

__all__ = ["Checkpoint", "CheckpointWriter", "ClientState", "CompiledRounds", "LocalRuntime", "RoundConfig",
           "ServerState", "data_digest", "compiled_rounds", "compiled_start_statistics", "compiled_statistics",
           "compiled_unsupported", "config_unsupported",
           "finish_round", "record_initial", "round_record", "run_monitor", "squared_distance", "step_record",
           "update_size"]
