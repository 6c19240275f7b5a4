# SPDX-License-Identifier: BSD-3-Clause
"""A sharded Ray runtime: a few actors, each holding many clients; the server stays in the driver.

Each actor (:class:`_Shard`) holds a contiguous share of the
:class:`fedmm.algorithms.Client` objects — their data, control variates
``V_{t,i}`` and counter-based random streams.  Each round the driver sends
the server's :class:`~fedmm.algorithms.Broadcast` and the active clients'
indices to every actor that holds one of them, collects the payloads and
hands them to the server.  Client randomness is a pure function of (seed,
client, round), so the History equals the in-process one bit for bit.

A client that raises, or whose actor does not answer within ``timeout``
seconds, is *dropped* for that round: it is left out of the aggregation as an
inactive client of Algorithm 2 (lines 10-11: ``V_{t+1,i} = V_{t,i}``), its
state is rolled back to the start of the round, and it is listed in the
round's ``dropped`` field.

Ray binds to ``127.0.0.1`` unless you connect to an existing cluster
(``address=``); see ``docs/runtime-ray.md``.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Iterator, Sequence

from fedmm._progress import progress_bar, progress_enabled
from fedmm._validation import check_int, check_real
from fedmm.history import History
from fedmm.runtime.local import finish_round, split_contiguous

__all__ = ["RayRuntime", "init_local_ray", "local_ray"]

_EXTRA_HINT = "the Ray runtime needs Ray: pip install 'fedmm[ray]'"


def _import_ray() -> Any:
    # Before Ray starts: keep every Ray process on loopback and silence a FutureWarning of Ray 2.5x.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"fedmm.runtime.ray: {_EXTRA_HINT} ({exc})") from exc
    return ray


def init_local_ray(num_cpus: int | None = None, **kwargs: Any) -> Any:
    """Start a single-machine Ray bound to 127.0.0.1 (no dashboard), unless Ray is already up.

    Parameters
    ----------
    num_cpus : int, optional
        CPUs Ray may schedule on (default: all of this machine's).
    **kwargs
        More ``ray.init`` keyword arguments.

    Returns
    -------
    module
        The ``ray`` module.
    """
    ray = _import_ray()
    if not ray.is_initialized():
        # Workers see the driver's sys.path, so clients defined in local modules unpickle there.
        runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
        options = {"include_dashboard": False, "log_to_driver": False, "_node_ip_address": "127.0.0.1",
                   "runtime_env": runtime_env}
        options.update(kwargs)
        ray.init(num_cpus=num_cpus, **options)
    return ray


@contextlib.contextmanager
def local_ray(num_cpus: int | None = None, **kwargs: Any) -> Iterator[Any]:
    """:func:`init_local_ray` for the duration of a ``with`` block: Ray is shut down at its end if the
    block started it (tests, benchmarks, scripts).

    Ray leaves handles of its helper processes open at shutdown; the ``ResourceWarning`` that this
    causes is Ray's and is not shown.
    """
    started = not _import_ray().is_initialized()
    ray = init_local_ray(num_cpus, **kwargs)
    try:
        yield ray
    finally:
        if started:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                ray.shutdown()
                gc.collect()


class _Shard:
    """Ray actor body: a share of the clients, run round by round."""

    def __init__(self, clients: Sequence[Any]) -> None:
        self.clients = {c.index: c for c in clients}
        self._snapshots: dict[int, dict] = {}

    def setup(self, message: Any) -> list[tuple[int, bytes]]:
        """The set-up exchange: every held client initialises ``V_{0,i}`` (errors propagate, as in process)."""
        return [(i, c.setup(message)) for i, c in self.clients.items()]

    def rollback(self, ids: Sequence[int], like_theta: Any) -> None:
        """Restore the start-of-round state of ``ids`` (their payloads were not aggregated).

        ``like_theta`` is any parameter of the model (e.g. the round's ``θ_t``): it gives
        ``Client.set_state`` the parameter's structure.
        """
        for i in ids:
            if i in self._snapshots:
                self.clients[i].set_state(self._snapshots[i], like_theta)

    def _one(self, i: int, message: Any) -> tuple[Any, str | None]:
        try:
            return self.clients[i].step(message), None
        except Exception:  # the client failed: drop it, keep its start-of-round state
            self.rollback([i], message.theta)
            return None, traceback.format_exc(limit=3)

    def step(self, message: Any, ids: Sequence[int], rollback: Sequence[int]) -> list[tuple[int, Any, str | None]]:
        """Run the clients ``ids`` on ``message``; each result is ``(i, payload or None, error or None)``."""
        self.rollback(rollback, message.theta)
        self._snapshots = {i: self.clients[i].get_state() for i in ids}
        return [(i, *self._one(i, message)) for i in ids]

    def states(self) -> dict[int, dict]:
        """Every held client's :meth:`Client.get_state` (to copy the final state back)."""
        return {i: c.get_state() for i, c in self.clients.items()}


class RayRuntime:
    """Run Server/Client rounds with the clients sharded over a few Ray actors.

    Parameters
    ----------
    n_actors : int >= 1
        Actors; client ``i`` lives on actor ``⌊i·n_actors/n⌋`` (contiguous shares).
    timeout : float, optional
        Seconds to wait for the actors each round; clients of an actor that
        has not answered are dropped for the round.  None waits forever.
    address : str, optional
        An existing Ray cluster (``"auto"``, ``"ray://head:10001"``); default
        a local Ray on 127.0.0.1 (:func:`init_local_ray`), started on first use.
    num_cpus_per_actor : float
        Ray CPU reservation of each actor.
    shutdown : bool
        Shut Ray down after :meth:`run` if this runtime started it.
    errors : list, optional
        If given, ``(t, client, traceback)`` of every dropped client is appended here.

    Notes
    -----
    The driver's :class:`~fedmm.algorithms.Client` objects are shipped to the
    actors once; after :meth:`run` their states are copied back, so they end
    where the in-process runtime would leave them.
    """

    def __init__(self, n_actors: int = 2, *, timeout: float | None = None,
                 address: str | None = None, num_cpus_per_actor: float = 1.0, shutdown: bool = False,
                 errors: list | None = None) -> None:
        self.n_actors = check_int(n_actors, "n_actors", low=1)
        self.timeout = None if timeout is None else check_real(timeout, "timeout", low=0.0, low_open=True)
        self.address = address
        self.num_cpus_per_actor = check_real(num_cpus_per_actor, "num_cpus_per_actor", low=0.0)
        self.shutdown = bool(shutdown)
        self.errors = errors

    def _start(self) -> tuple[Any, bool]:
        ray = _import_ray()
        if ray.is_initialized():
            return ray, False
        if self.address is None:
            init_local_ray()
        else:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        return ray, True

    def run(self, server: Any, clients: Sequence[Any], n_rounds: int, *, history: History,
            monitor: Callable[[int, float], dict] | None = None,
            callback: Callable[[int], None] | None = None, progress: bool | None = None) -> History:
        """The set-up exchange and ``n_rounds`` rounds (records as :class:`fedmm.runtime.LocalRuntime`'s).

        ``progress``: a bar on standard error; None (default) shows it only when standard error is a terminal.
        """
        n_rounds = check_int(n_rounds, "n_rounds", low=0)
        show_progress = progress_enabled(progress)  # validated before any actor starts
        ray, started = self._start()
        shares = split_contiguous(list(clients), self.n_actors)
        actor_cls = ray.remote(num_cpus=self.num_cpus_per_actor)(_Shard)
        actors = [actor_cls.remote(share) for share in shares]
        owner = {c.index: a for a, share in enumerate(shares) for c in share}
        rollback: list[list[int]] = [[] for _ in actors]
        bar = progress_bar(show_progress, total=n_rounds, desc=history.algorithm or "rounds")
        elapsed = 0.0
        try:
            # Set-up exchange (as LocalRuntime): the clients' V_0,i, aggregated by the server.
            setup = server.setup_message()
            setup_ref = ray.put(setup)
            setup_payloads = dict(p for part in ray.get([a.setup.remote(setup_ref) for a in actors]) for p in part)
            server.setup_aggregate(setup_payloads)
            history.config["setup_bytes_up"] = sum(len(b) for b in setup_payloads.values())
            history.config["setup_bytes_down"] = len(clients) * setup.nbytes
            for t in range(n_rounds):
                start = time.perf_counter()
                ids = server.select(t)
                message = server.broadcast(t)
                message_ref = ray.put(message)
                per_actor: list[list[int]] = [[] for _ in actors]
                for i in ids:
                    per_actor[owner[i]].append(i)
                calls = {}
                for a, actor in enumerate(actors):
                    if per_actor[a] or rollback[a]:
                        calls[actor.step.remote(message_ref, per_actor[a], rollback[a])] = a
                        rollback[a] = []
                ready, late = ray.wait(list(calls), num_returns=len(calls), timeout=self.timeout)
                got: dict[int, Any] = {}
                for ref in ready:
                    for i, payload, error in ray.get(ref):
                        got[i] = payload
                        if error is not None and self.errors is not None:
                            self.errors.append((t, i, error))
                for ref in late:  # not aggregated: the actor rolls these clients back next time
                    a = calls[ref]
                    rollback[a] = list(per_actor[a])
                    if self.errors is not None:
                        self.errors.extend((t, i, f"timeout after {self.timeout} s") for i in per_actor[a])
                payloads = [got.get(i) for i in ids]
                elapsed = finish_round(server, history, t, ids, payloads, message, start, elapsed, monitor,
                                       callback)
                bar.update(1)
            for a, actor in enumerate(actors):
                if rollback[a]:
                    ray.get(actor.rollback.remote(rollback[a], server.theta))
                for i, state in ray.get(actor.states.remote()).items():
                    clients[i].set_state(state, server.theta)
        finally:
            bar.close()
            for actor in actors:
                ray.kill(actor)
            if started and self.shutdown:
                ray.shutdown()
        return history
