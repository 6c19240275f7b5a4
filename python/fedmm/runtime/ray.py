# SPDX-License-Identifier: BSD-3-Clause
"""A sharded Ray runtime: a few actors, each holding many clients; the server stays in the driver.

Each actor (:class:`_Shard`) holds a contiguous share of the
:class:`fedmm.algorithms.Client` objects — their data, control variates
``V_{t,i}`` and counter-based random streams.  Each round the driver sends
the server's :class:`~fedmm.algorithms.Broadcast` and the active clients'
indices to every actor that holds one of them, collects the payloads and
hands them to the server.  Client randomness is a pure function of (seed,
client, round), so the History equals the in-process one bit for bit.

The fault policy is :class:`fedmm.runtime.LocalRuntime`'s (``on_client_error``):
a client that raises, misses the round's ``timeout``, whose actor process
dies, or whose payload fails the server's validation is *dropped* for that
round — left out of the aggregation as an inactive client of Algorithm 2
(lines 10-11: ``V_{t+1,i} = V_{t,i}``), keeping its committed state — and
listed in the round's ``dropped`` / ``drop_reasons``; the run goes on.  The
driver keeps every client's committed state (each answer carries the
client's new state), so a dropped client is restored on its actor, a dead
actor is replaced by a fresh one, and ``V = Σ_i μ_i V_i`` holds after every
round.  Actors answer at 80 % of ``timeout`` with the results that are ready:
a slow client does not take the healthy clients of its actor with it.

Ray binds to ``127.0.0.1`` unless you connect to an existing cluster
(``address=``); see ``docs/runtime-ray.md``.
"""
from __future__ import annotations

import contextlib
import gc
import os
import pickle
import sys
import threading
import time
import traceback
import warnings
from collections import deque
from typing import Any, Callable, Iterator, Sequence

from fedmm._progress import progress_bar, progress_enabled
from fedmm._validation import check_bool, check_count, check_in, check_int, check_real
from fedmm.federation.local import CLIENT_ERROR_POLICIES
from fedmm.history import History
from fedmm.runtime.local import finish_round, split_contiguous, warn_all_dropped

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


# --------------------------------------------------------------------------- actor side
#: What an actor returns for one client: ``(i, payload or None, state after the step or None, failure or None)``;
#: a failure is ``(reason, traceback text, the exception if it pickles, else None)``.
_Result = tuple


def _failure(exc: BaseException) -> tuple[str, str, BaseException | None]:
    """``(reason, traceback, exc or None)`` of a client's exception (None when it would not pickle)."""
    reason = f"{type(exc).__name__}: {exc}"
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=4))
    try:
        pickle.dumps(exc)
    except Exception:
        exc = None
    return reason, text, exc


def _late(reason: str) -> tuple[str, str, None]:
    return reason, "", None


class _Shard:
    """Ray actor body: a share of the clients, run round by round.

    The driver is the authority on every client's state: each successful
    step returns the client's new :meth:`Client.export_state` value with its payload,
    and a client whose last round was not aggregated (dropped, late, invalid
    payload) gets its committed state back with its next task (``restore``).
    With a deadline, the round's clients run on worker threads (one, plus
    one more whenever every worker has been stuck on one client for
    ``stall`` seconds) and the task returns at the deadline with the
    results that are ready; a client still running then is *busy*: its late
    result is discarded, and it is reported busy until its step ends.
    """

    def __init__(self, clients: Sequence[Any]) -> None:
        self.clients = {c.index: c for c in clients}
        self.busy: dict[int, int] = {}  # client -> round of a step that is still running past its deadline
        self.cond = threading.Condition()

    def pid(self) -> int:
        """This actor's process id (a readiness probe)."""
        return os.getpid()

    def setup(self, message: Any) -> list[tuple[int, bytes, Any]]:
        """The set-up exchange: every held client initialises ``V_{0,i}``; ``(i, payload, state)``
        (errors propagate, as in process)."""
        return [(i, c.setup(message), c.export_state()) for i, c in self.clients.items()]

    def _one(self, i: int, message: Any, state: Any) -> _Result:
        client = self.clients[i]
        try:
            if state is not None:  # its last round was not aggregated: back to the committed state
                client.import_state(state, message.theta)
            payload = client.step(message)
            return i, payload, client.export_state(), None
        except Exception as exc:  # the client failed: dropped; the driver restores it next time
            return i, None, None, _failure(exc)

    def step(self, message: Any, ids: Sequence[int], restore: dict[int, Any], budget: float | None,
             deadline: float | None, t: int | None = None) -> list[_Result]:
        """Run the clients ``ids`` on round ``t``'s ``message`` (after restoring the states in ``restore``).

        ``budget`` (seconds from now) and ``deadline`` (``time.time()`` value)
        bound the task, whichever ends first; None runs every client to the end.
        ``t`` (the driver always passes it: a message need not carry its round,
        :class:`fedmm.protocols.Message`) names the round a late client is still
        running; None takes ``message.t`` (FedMM's and FedMM-OT's broadcasts carry it).
        """
        if budget is None:
            return [self._one(i, message, restore.get(i)) for i in ids]
        end = time.monotonic() + max(0.0, min(budget, deadline - time.time()))
        stall = max(0.01, budget / 8)
        results: dict[int, _Result] = {}
        queue: deque[int] = deque()
        running: dict[int, tuple[int, float]] = {}  # worker number -> (client, start)
        state = {"open": True, "workers": 0, "spawned": 0}
        t = int(message.t if t is None else t)

        def work(me: int) -> None:
            while True:
                with self.cond:
                    if not queue or not state["open"]:
                        state["workers"] -= 1
                        return
                    i = queue.popleft()
                    running[me] = (i, time.monotonic())
                result = self._one(i, message, restore.get(i))
                with self.cond:
                    del running[me]
                    if state["open"]:
                        results[i] = result
                    else:  # too late: the driver has dropped this client for round t
                        self.busy.pop(i, None)
                    self.cond.notify_all()

        def spawn() -> None:
            state["workers"] += 1
            state["spawned"] += 1
            threading.Thread(target=work, args=(state["spawned"],), daemon=True,
                             name=f"fedmm-client-{t}").start()

        with self.cond:
            for i in ids:
                if i in self.busy:
                    results[i] = (i, None, None, _late(f"timeout: still running round {self.busy[i]}"))
                else:
                    queue.append(i)
            if queue:
                spawn()
            while len(results) < len(ids):
                now = time.monotonic()
                if now >= end:
                    break
                self.cond.wait(min(end - now, stall))
                now = time.monotonic()
                if queue and state["workers"] < _MAX_WORKERS and all(now - s >= stall for _, s in running.values()):
                    spawn()  # every worker is stuck on a slow client: the others must not wait for it
            state["open"] = False
            for i in queue:
                results[i] = (i, None, None, _late("timeout: not started before the deadline"))
            queue.clear()
            for i, _ in running.values():
                self.busy[i] = t
                results[i] = (i, None, None, _late("timeout: no answer within the deadline"))
        return [results[i] for i in ids]


#: Most worker threads an actor's round starts (each one only after all the others are stuck).
_MAX_WORKERS = 32
#: Share of ``timeout`` an actor spends on its clients; the rest carries the answers to the driver.
_ACTOR_SHARE = 0.8


# --------------------------------------------------------------------------- driver side
class RayRuntime:
    """Run Server/Client rounds with the clients sharded over a few Ray actors.

    Parameters
    ----------
    n_actors : int >= 1
        Actors; client ``i`` lives on actor ``⌊i·n_actors/n⌋`` (contiguous
        shares; fewer actors when there are fewer clients).  Each reserves
        ``num_cpus_per_actor`` CPUs: a cluster with fewer is refused at set-up
        with a ``ValueError`` naming both numbers.
    timeout : float > 0, optional
        Seconds a round waits for the clients' answers (from the round's
        start).  The actors stop waiting for their clients at 80 % of it, so a
        slow client is dropped alone: the healthy clients of its actor are
        aggregated.  None waits for every answer.
    setup_timeout : float > 0
        Seconds to wait for the actors to start and answer the set-up
        exchange, and for a restarted actor to start; also how long a
        cluster whose CPUs are busy is given to free them.
    on_client_error : {'drop', 'raise'}
        The fault policy of :class:`fedmm.runtime.LocalRuntime`: a client
        whose step raises, misses the deadline, whose actor dies, or whose
        payload fails the server's validation is *dropped* for that round
        (left out of the aggregation, as an inactive client of Algorithm 2
        lines 10-11, keeping its start-of-round state; the record's
        ``dropped`` and ``drop_reasons`` say who and why) and the run goes
        on; ``'raise'`` propagates the error.
    address : str, optional
        An existing Ray cluster (``"auto"``, ``"ray://head:10001"``); default
        a local Ray on 127.0.0.1 (:func:`init_local_ray`), started on first use.
    num_cpus_per_actor : float >= 0
        Ray CPU reservation of each actor.
    shutdown : bool
        Shut Ray down after :meth:`run` if this runtime started it.
    errors : list, optional
        If given, ``(t, client, reason and traceback)`` of every dropped client is appended here.

    Attributes
    ----------
    restarts : int
        Actors restarted during the last :meth:`run` (after their process died or hung).

    Notes
    -----
    The driver keeps the committed state of every client: each answer carries
    the client's new :meth:`Client.export_state` value, which is copied into the
    driver's :class:`~fedmm.algorithms.Client` objects when its payload is
    aggregated.  So ``V = Σ_i μ_i V_i`` holds over the driver's clients after
    every round (a callback can check it), a dropped client's actor is sent
    its committed state with its next task, an actor whose process died (or
    that did not answer a round and is still busy at the next one) is
    replaced by a fresh one built from the driver's clients, and after
    :meth:`run` the driver's clients are where the in-process runtime would
    leave them, without a final collection.

    The same committed states make a run resumable: a checkpoint written
    after round ``t`` (``checkpoint=``) snapshots the server and the driver's
    clients, and a run continued from it (``start=``) ships those clients to
    fresh actors, so the History continues bit for bit, on Ray or in process.
    """

    #: :meth:`run` continues from a checkpoint and writes them (``start``, ``checkpoint``):
    #: :class:`fedmm.protocols.SupportsResume`.
    resumable = True

    def __init__(self, n_actors: int = 2, *, timeout: float | None = None, setup_timeout: float = 120.0,
                 on_client_error: str = "drop", address: str | None = None, num_cpus_per_actor: float = 1.0,
                 shutdown: bool = False, errors: list | None = None) -> None:
        self.n_actors = check_int(n_actors, "n_actors", low=1)
        self.timeout = None if timeout is None else check_real(timeout, "timeout", low=0.0, low_open=True)
        self.setup_timeout = check_real(setup_timeout, "setup_timeout", low=0.0, low_open=True)
        self.on_client_error = check_in(on_client_error, "on_client_error", CLIENT_ERROR_POLICIES)
        if address is not None and not isinstance(address, str):
            raise TypeError(f"Expected 'address' to be None or a Ray address string, got {type(address).__name__}")
        self.address = address
        self.num_cpus_per_actor = check_real(num_cpus_per_actor, "num_cpus_per_actor", low=0.0)
        self.shutdown = check_bool(shutdown, "shutdown")
        if errors is not None and not isinstance(errors, list):
            raise TypeError(f"Expected 'errors' to be None or a list (to collect the run's errors), "
                            f"got {type(errors).__name__}")
        self.errors = errors
        self.restarts = 0

    def _start(self) -> tuple[Any, bool]:
        ray = _import_ray()
        if ray.is_initialized():
            return ray, False
        if self.address is None:
            init_local_ray()
        else:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        return ray, True

    def _check_cpus(self, ray: Any, n_actors: int) -> None:
        """Refuse a cluster with fewer CPUs than the actors reserve; wait (bounded) for busy CPUs."""
        need = n_actors * self.num_cpus_per_actor
        if need == 0:
            return
        total = float(ray.cluster_resources().get("CPU", 0.0))
        if total < need:
            raise ValueError(f"RayRuntime(n_actors={n_actors}, num_cpus_per_actor={self.num_cpus_per_actor}) "
                             f"needs {need:g} CPUs but the Ray cluster has {total:g}: lower n_actors or "
                             "num_cpus_per_actor, or start Ray with more CPUs")
        deadline = time.monotonic() + self.setup_timeout
        while True:  # e.g. the actors of a previous run, killed but not yet released
            available = float(ray.available_resources().get("CPU", 0.0))
            if available >= need:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"RayRuntime(n_actors={n_actors}) needs {need:g} free CPUs; only "
                                   f"{available:g} of the cluster's {total:g} were free within "
                                   f"setup_timeout={self.setup_timeout} s")
            time.sleep(0.05)

    def _fail(self, t: int, i: int, reason: str, detail: str, reasons: dict[int, str]) -> None:
        reasons[i] = reason
        if self.errors is not None:
            self.errors.append((t, i, detail or reason))

    def run(self, server: Any, clients: Sequence[Any], n_rounds: int, *, history: History,
            monitor: Callable[[int, float], dict] | None = None,
            callback: Callable[[int], None] | None = None, progress: bool | None = None,
            start: int = 0, checkpoint: Any = None) -> History:
        """The set-up exchange and rounds ``start, ..., n_rounds − 1`` (records as
        :class:`fedmm.runtime.LocalRuntime`'s).

        ``progress``: a bar on standard error; None (default) shows it only when standard error is a terminal.

        ``start > 0`` continues a run whose server and (driver's) clients
        already hold the state after round ``start − 1`` and whose ``history``
        holds its ``start`` records: the actors are built from those clients,
        the set-up exchange is skipped and ``wall_time`` (and ``monitor_time``)
        go on from the last record.  ``callback(t)`` and then ``checkpoint(t)``
        (e.g. a :class:`fedmm.federation.CheckpointWriter`) are called after round
        ``t`` is committed: its record is in the History and the driver's
        clients hold their new states, so a checkpoint's snapshot is exact.
        An exception from either leaves round ``t`` in place (as in process).

        Raises
        ------
        ValueError
            The cluster has fewer CPUs than ``n_actors · num_cpus_per_actor``.
        TimeoutError
            The actors did not start and answer the set-up exchange within
            ``setup_timeout``; with ``on_client_error='raise'``, a client missed a round's deadline.
        KeyboardInterrupt
            With the History of the completed rounds as its ``history``
            attribute (the interrupted round left no trace); every other
            exception that ends the run carries it too.

        Warns
        -----
        RuntimeWarning
            At the end, naming the rounds in which every contacted client was dropped.
        """
        n_rounds = check_count(n_rounds, "n_rounds", low=0)
        start = check_int(start, "start", low=0, high=max(n_rounds, 0))
        if start and len(history.records) != start:
            raise ValueError(f"Expected a History of {start} records to continue from round {start}, "
                             f"got {len(history.records)}")
        show_progress = progress_enabled(progress)  # validated before any actor starts
        ray, started = self._start()
        clients = list(clients)
        shares = [[c.index for c in share] for share in split_contiguous(clients, self.n_actors)]
        self._check_cpus(ray, len(shares))
        fleet = _Fleet(ray, ray.remote(num_cpus=self.num_cpus_per_actor)(_Shard), clients, shares)
        self.restarts = 0
        bar = progress_bar(show_progress, total=n_rounds, initial=start, desc=history.algorithm or "rounds")
        elapsed = float(history.records[-1].get("wall_time", 0.0)) if start else 0.0
        try:
            fleet.start()  # from the driver's clients: after a checkpoint's states when resuming
            # Set-up exchange (as LocalRuntime): the clients' V_0,i, aggregated by the server; none when
            # setup_message() is None (fedmm.protocols.ServerParty) or when the run continues.
            setup = server.setup_message() if start == 0 else None
            if setup is not None:
                setup_ref = ray.put(setup)
                refs = [a.setup.remote(setup_ref) for a in fleet.actors]
                ready, late = ray.wait(refs, num_returns=len(refs), timeout=self.setup_timeout)
                if late:
                    raise TimeoutError(f"{len(late)} of {len(refs)} Ray actors did not start and answer the set-up "
                                       f"exchange within setup_timeout={self.setup_timeout} s")
                results = [r for part in ray.get(refs) for r in part]
                server.setup_aggregate({i: payload for i, payload, _ in results})
                for i, _, state in results:
                    fleet.clients[i].import_state(state, setup.theta)
                history.config["setup_bytes_up"] = sum(len(payload) for _, payload, _ in results)
                history.config["setup_bytes_down"] = len(clients) * setup.nbytes
            for t in range(start, n_rounds):
                down = self._replace_hung(fleet)
                elapsed = self._round(fleet, server, t, down, history, elapsed, monitor)
                bar.update(1)
                # round t is committed (server, driver's clients, record): the user's callback, then the
                # checkpoint, see it whole; what they raise leaves the round in place (as LocalRuntime)
                if callback is not None:
                    callback(t)
                if checkpoint is not None:
                    checkpoint(t)
        except (Exception, KeyboardInterrupt) as exc:
            exc.history = history  # the completed rounds; the interrupted or failed one left no trace
            raise
        finally:
            bar.close()
            fleet.stop()
            if started and self.shutdown:
                ray.shutdown()
        warn_all_dropped(history, start)
        return history

    def _replace_hung(self, fleet: "_Fleet") -> dict[int, str]:
        """Restart the actors that died, or whose late task of the last round has still not returned;
        returns the actors that could not be brought back (actor → reason)."""
        down: dict[int, str] = {}
        for a, ref in list(fleet.late_calls.items()):
            if ref is not None:
                done, _ = fleet.ray.wait([ref], timeout=0)
                if done:
                    del fleet.late_calls[a]
                    continue
            self.restarts += 1
            if fleet.restart(a, self.setup_timeout):
                del fleet.late_calls[a]
            else:
                down[a] = f"actor restarting: no answer within setup_timeout={self.setup_timeout} s"
                fleet.late_calls[a] = None  # try again next round
        return down

    def _round(self, fleet: "_Fleet", server: Any, t: int, down: dict[int, str], history: History,
               elapsed: float, monitor: Any) -> float:
        """Round ``t``, atomic: on an exception the server, the driver's clients and the History are left
        as they were; on return the round is committed (the caller's callback and checkpoint follow)."""
        from ray.exceptions import RayError, RayTaskError

        ray, raising = fleet.ray, self.on_client_error == "raise"
        start = time.perf_counter()
        # before select/broadcast: they may draw from the server's own streams (Scaffnew's coins)
        server_state = server.export_state()
        ids = server.select(t)
        message = server.broadcast(t)
        message_ref = ray.put(message)
        reasons: dict[int, str] = {}
        per_actor: dict[int, list[int]] = {}
        for i in ids:
            per_actor.setdefault(fleet.owner[i], []).append(i)
        budget = deadline = None
        if self.timeout is not None:
            budget = _ACTOR_SHARE * self.timeout
            deadline = time.time() + budget
        calls = {}
        for a, members in per_actor.items():
            if a in down:
                for i in members:
                    self._fail(t, i, down[a], "", reasons)
                continue
            restore = {i: fleet.clients[i].export_state() for i in members if i in fleet.dirty}
            calls[fleet.actors[a].step.remote(message_ref, members, restore, budget, deadline, t)] = a
        remaining = None if self.timeout is None else max(0.0, self.timeout - (time.perf_counter() - start))
        ready, late = ray.wait(list(calls), num_returns=len(calls), timeout=remaining)
        got: dict[int, tuple[bytes, Any]] = {}
        for ref in ready:
            a = calls[ref]
            try:
                answers = ray.get(ref)
            except RayTaskError:  # an error of the task itself (not of a client): a bug, never hidden
                raise
            except RayError as exc:  # its process died (exit, segfault, OOM kill): restarted next round
                fleet.late_calls[a] = None
                if raising:
                    raise
                for i in per_actor[a]:
                    self._fail(t, i, f"actor died: {type(exc).__name__}", str(exc), reasons)
                continue
            for i, payload, state, failure in answers:
                if failure is None:
                    got[i] = (payload, state)
                    continue
                reason, detail, exc = failure
                if raising:
                    if exc is not None and not reason.startswith("timeout"):
                        exc.add_note(f"client {i}, round {t}, in its Ray actor:\n{detail}")
                        raise exc
                    raise (TimeoutError if reason.startswith("timeout") else RuntimeError)(
                        f"client {i} failed in round {t}: {reason}")
                self._fail(t, i, reason, detail, reasons)
        for ref in late:  # not aggregated; the actor is replaced if it is still busy next round
            a = calls[ref]
            fleet.late_calls[a] = ref
            if raising:
                raise TimeoutError(f"Ray actor {a} (clients {per_actor[a]}) did not answer round {t} "
                                   f"within timeout={self.timeout} s")
            for i in per_actor[a]:
                self._fail(t, i, f"timeout: actor did not answer within {self.timeout} s", "", reasons)
        fleet.dirty.update(i for i in ids if i not in got)
        payloads = [got[i][0] if i in got else None for i in ids]
        invalid: set[int] = set()
        on_invalid = None
        if not raising:  # every server's aggregate takes on_invalid (fedmm.protocols.ServerParty)
            def on_invalid(i: int, reason: str) -> None:
                invalid.add(i)
                if self.errors is not None:
                    self.errors.append((t, i, f"invalid payload: {reason}"))

        n_records = len(history.records)
        before: dict[int, Any] = {}

        def commit(u: int) -> None:
            """The aggregated clients' new states become the committed ones (after the round's record)."""
            for i, (_, state) in got.items():
                if i in invalid:
                    fleet.dirty.add(i)
                else:
                    before[i] = fleet.clients[i].export_state()
                    fleet.clients[i].import_state(state, message.theta)

        done = False
        try:
            elapsed = finish_round(server, history, t, ids, payloads, message, start, elapsed, monitor, commit,
                                   reasons=reasons, on_invalid=on_invalid)
            done = True
        finally:
            if not done:  # undo the round: server, driver's clients, record
                for i, state in before.items():
                    fleet.clients[i].import_state(state, message.theta)
                fleet.dirty.update(got)
                if server_state is not None:
                    server.import_state(server_state)
                del history.records[n_records:]
        return elapsed


class _Fleet:
    """The actors of one :meth:`RayRuntime.run` and the driver's record of its clients.

    The driver's clients hold the committed states; ``dirty`` lists the
    clients whose actor copy may differ (dropped, late, invalid: their
    committed state goes with their next task); ``late_calls`` the actors
    whose last task missed its round (None: the actor died), checked and
    replaced before the next round.
    """

    def __init__(self, ray: Any, actor_cls: Any, clients: list[Any], shares: list[list[int]]) -> None:
        self.ray = ray
        self.actor_cls = actor_cls
        self.clients = clients
        self.shares = shares
        self.owner = {i: a for a, share in enumerate(shares) for i in share}
        self.actors: list[Any] = []
        self.dirty: set[int] = set()
        self.late_calls: dict[int, Any] = {}

    def start(self) -> None:
        self.actors = [self.actor_cls.remote([self.clients[i] for i in share]) for share in self.shares]

    def restart(self, a: int, setup_timeout: float) -> bool:
        """Replace actor ``a`` by a fresh one holding the driver's (committed) clients; True once it answers."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.actors[a])
        self.actors[a] = self.actor_cls.remote([self.clients[i] for i in self.shares[a]])
        self.dirty.difference_update(self.shares[a])
        ready, _ = self.ray.wait([self.actors[a].pid.remote()], timeout=setup_timeout)
        return bool(ready)

    def stop(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
