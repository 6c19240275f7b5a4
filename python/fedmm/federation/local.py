# SPDX-License-Identifier: BSD-3-Clause
"""The in-process runtime: the default runtime of every algorithm (compiled stretches of rounds, or the
Python backend's ``Client.step`` on a local thread pool).

It lives in the federation layer because the algorithms use it by default;
:mod:`fedmm.runtime` re-exports it next to the distributed runtimes.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

from fedmm import kernels
from fedmm._progress import progress_bar
from fedmm._validation import check_count, check_in, check_int
from fedmm.history import History
from fedmm.protocols import SupportsStepMany

__all__ = ["LocalRuntime", "finish_round", "record_initial", "record_start_drops", "round_record", "run_monitor",
           "split_contiguous", "warn_all_dropped"]

#: What happens to a client whose round fails: dropped for the round (Algorithm 2 lines 10-11), or raise.
CLIENT_ERROR_POLICIES = ("drop", "raise")

# Longest stretch of rounds per compiled call, in rounds (bounds its per-round outputs, n int64 per
# round) and in seconds (Python gets control back that often: Ctrl-C, progress bar).
_STRETCH = 256
_STRETCH_SECONDS = 0.2


def split_contiguous(items: Sequence[Any], k: int) -> list[list[Any]]:
    """``items`` split into at most ``k`` contiguous, near-equal, non-empty chunks."""
    n = len(items)
    k = min(k, n)
    bounds = [n * j // k for j in range(k + 1)]
    return [list(items[bounds[j]:bounds[j + 1]]) for j in range(k)]


def round_record(t: int, server_record: dict, ids: Sequence[int], payloads: Sequence[Any],
                 message: Any, elapsed: float, reasons: dict[int, str] | None = None) -> dict:
    """The History record of round ``t`` (shared by every runtime).

    ``payloads[k]`` is client ``ids[k]``'s message, or None when the client
    failed or timed out: it was *dropped* (left out of the aggregation, as an
    inactive client of Algorithm 2).  ``active`` lists the clients whose
    non-empty message was aggregated; bytes count what actually travelled.
    With ``reasons`` (client → why it was dropped) the record also gets
    ``drop_reasons``, aligned with ``dropped``.  A round in which every
    contacted client was dropped (at least one contacted) also gets
    ``all_dropped = True`` (:attr:`fedmm.History.all_dropped_rounds`; the
    runtimes warn about it at the end of the run, :func:`warn_all_dropped`).
    """
    sizes = [None if b is None else len(b) for b in payloads]
    dropped = [i for i, n in zip(ids, sizes) if n is None]
    record = _record(t, server_record, [i for i, n in zip(ids, sizes) if n], dropped,
                     sum(n for n in sizes if n is not None), len(ids) * message.nbytes, elapsed,
                     None if reasons is None else [reasons.get(i, "no answer") for i in dropped])
    if ids and len(dropped) == len(ids):
        record["all_dropped"] = True
    return record


def warn_all_dropped(history: History, first: int = 0, stacklevel: int = 2) -> None:
    """A ``RuntimeWarning`` naming the rounds from record ``first`` on in which every contacted client was
    dropped (records flagged ``all_dropped``); nothing when there are none.

    Such a round aggregated no client message (the server stepped with its
    control variate alone), so a run made only of them is no success.
    """
    rounds = [r.get("t", k) for k, r in enumerate(history.records[first:], start=first) if r.get("all_dropped")]
    if rounds:
        shown = ", ".join(str(t) for t in rounds[:20]) + (f", ... ({len(rounds)} rounds)" if len(rounds) > 20 else "")
        warnings.warn(f"{history.algorithm or 'run'}: every contacted client was dropped in round(s) {shown}; "
                      "those rounds aggregated no client message (see their records' 'drop_reasons'; "
                      "History.all_dropped_rounds lists them)", RuntimeWarning, stacklevel=stacklevel + 1)


def record_start_drops(history: History, drops: dict[int, str]) -> None:
    """Record the start exchange's outcome in ``history.initial``: ``dropped`` (clients left out of
    ``Ŝ_0``, ``[]`` when every client answered) and, when there are any, ``drop_reasons`` aligned with it
    (as a round's record)."""
    dropped = sorted(int(i) for i in drops)
    history.initial["dropped"] = dropped
    if dropped:
        history.initial["drop_reasons"] = [str(drops[i]) for i in dropped]


def _record(t: int, server_record: dict, active: list[int], dropped: list[int], bytes_up: int, bytes_down: int,
            elapsed: float, drop_reasons: list[str] | None = None) -> dict:
    """The fields of a round's record, in their order (shared by the per-round and compiled paths)."""
    record = {"t": t, **server_record, "active": active, "dropped": dropped}
    if drop_reasons:
        record["drop_reasons"] = drop_reasons
    record.update(bytes_up=bytes_up, bytes_down=bytes_down, wall_time=elapsed)
    return record


def monitor_time_so_far(history: History) -> float:
    """Cumulative monitoring seconds recorded so far: the last record's ``monitor_time``, else ``initial``'s, else 0."""
    for fields in (history.records[-1] if history.records else {}, history.initial):
        if fields.get("monitor_time") is not None:
            return float(fields["monitor_time"])
    return 0.0


def run_monitor(monitor: Callable[[int, float], dict] | None, t: int, gamma: float, history: History,
                due: bool = True) -> dict:
    """The monitor's fields for round ``t`` plus ``monitor_time`` (cumulative seconds of monitoring).

    With ``due=False`` (a round the monitor has nothing for: its ``due(t)`` is False) the monitor is
    not called and only ``monitor_time`` is carried over, so the column has a value in every round.
    Returns ``{}`` without a monitor.
    """
    if monitor is None:
        return {}
    so_far = monitor_time_so_far(history)
    if not due:
        return {"monitor_time": so_far}
    start = time.perf_counter()
    fields = dict(monitor(t, gamma))
    fields["monitor_time"] = so_far + (time.perf_counter() - start)
    return fields


def record_initial(history: History, objective: Callable[[], float] | None = None) -> None:
    """Record the values at the starting point ``θ_0`` in ``history.initial`` (before the first round).

    ``wall_time`` is 0; with ``objective`` (a callable evaluating it at ``θ_0``) ``objective`` is its
    value (also kept in ``history.config["initial_objective"]`` for readers of older files);
    ``monitor_time`` is the seconds that evaluation took (0 without one).
    """
    start = time.perf_counter()
    fields: dict = {"wall_time": 0.0}
    if objective is not None:
        fields["objective"] = float(objective())
        history.config["initial_objective"] = fields["objective"]
    fields["monitor_time"] = time.perf_counter() - start
    history.initial.update(fields)


def finish_round(server: Any, history: History, t: int, ids: Sequence[int], payloads: Sequence[Any],
                 message: Any, start: float, elapsed: float, monitor: Callable[[int, float], dict] | None,
                 callback: Callable[[int], None] | None, *, reasons: dict[int, str] | None = None,
                 on_invalid: Callable[[int, str], None] | None = None) -> float:
    """The end of round ``t`` shared by every runtime; returns the new cumulative round time.

    Aggregates the received payloads (``None`` = dropped client), adds the
    round's time since ``start`` (``time.perf_counter()``) to ``elapsed``,
    appends :func:`round_record` (plus the monitor's fields and
    ``monitor_time``, :func:`run_monitor`; the monitor is not counted in
    ``wall_time``) to ``history`` and calls ``callback(t)``.  With ``on_invalid``
    (every server's ``aggregate`` takes it, :class:`fedmm.protocols.ServerParty`), a payload that fails the
    server's validation drops its client instead of raising:
    ``on_invalid(i, reason)`` is called before the server's state changes,
    and ``reasons`` (updated in place) records why each client was dropped.
    """
    payloads = list(payloads)
    if on_invalid is None:
        record = server.aggregate(t, {i: b for i, b in zip(ids, payloads) if b is not None})
    else:
        invalid: dict[int, str] = {}

        def note_invalid(i: int, reason: str) -> None:
            invalid[i] = reason
            on_invalid(i, reason)

        record = server.aggregate(t, {i: b for i, b in zip(ids, payloads) if b is not None},
                                  on_invalid=note_invalid)
        for k, i in enumerate(ids):
            if i in invalid:
                payloads[k] = None
                if reasons is not None:
                    reasons[i] = f"invalid payload: {invalid[i]}"
    elapsed += time.perf_counter() - start
    record = round_record(t, record, ids, payloads, message, elapsed, reasons)
    due = monitor is not None and monitor.due(t)
    record.update(run_monitor(monitor, t, record["gamma"], history, due=due))
    history.append(**record)
    if callback is not None:
        callback(t)
    return elapsed


class LocalRuntime:
    """Run Server/Client rounds in this process.

    Each round on the Python backend: ``ids = server.select(t)``,
    ``message = server.broadcast(t)``, the contacted clients' ``step`` (the
    contacted clients are split into ``n_threads`` contiguous shares, one
    task per share), then ``server.aggregate(t, payloads)``.  With
    ``compiled=True``, when the server declares compiled rounds
    (``supports_compiled_rounds``) and its ``simulate_rounds`` accepts the
    configuration (see :func:`fedmm.federation.compiled_unsupported`), whole
    stretches of rounds run in one compiled call instead, with the same
    numbers; a stretch ends after each round the monitor is due on, after
    every round when there is a callback, and
    after at most 256 rounds or 0.2 s.  Clients draw from their own
    counter-based streams, so the numbers depend neither on ``n_threads``
    nor on the backend nor on thread scheduling.

    Parameters
    ----------
    n_threads : int >= 1
        Threads that run the contacted clients of a round: the calling
        thread and ``n_threads − 1`` workers (a :class:`fedmm.kernels.WorkerPool`
        kept for the run on the compiled backend, a thread pool on the
        Python backend).
    compiled : bool
        Use the compiled backend when the configuration allows it.
    batched : bool
        On the Python backend, use the client type's optional static
        ``step_many(clients, message)`` (several clients in one call, equal to
        their ``step`` results; FedMLS and its baselines have one) on each
        thread's share of clients, instead of one ``step`` per client.
    on_client_error : {'drop', 'raise'}
        A client whose round raises, or whose payload fails the server's
        validation, is *dropped* for that round (left out of the aggregation,
        as an inactive client of Algorithm 2 lines 10-11; its state restored
        to the start of the round; the record's ``dropped`` and
        ``drop_reasons`` say who and why) and the run goes on; ``'raise'``
        propagates the error (debugging).

    Rounds are atomic: a round either completes for the server and every
    contacted client or leaves them as they were, so ``V = Σ_i μ_i V_i``
    always holds.  A compiled stretch whose round ``t`` fails commits the
    rounds before it and reruns round ``t`` on the Python backend, which
    applies ``on_client_error``.  A ``KeyboardInterrupt`` during a round
    restores the round's clients and propagates with the History of the
    completed rounds attached as its ``history`` attribute; so does any
    other exception that ends :meth:`run`.  A run with rounds in which every
    contacted client was dropped ends with a ``RuntimeWarning`` naming them.

    Notes
    -----
    On the compiled backend the clients of a round go to whichever thread
    asks next (one shared counter), the calling thread included, and the
    calling thread never waits for a worker that has not started a client.
    A thread with nothing to do spins for at most 35 µs, then sleeps on a
    condition variable: while the calling thread aggregates, between
    stretches and while Python runs the monitor, the workers use no CPU.
    A round that took longer than the calling thread alone would have (a
    worker lost its core in the middle of a client to another process)
    makes the next 1, 2, 4, …, 256 rounds run on the calling thread alone,
    until a round gains from the workers again.  So ``n_threads = 2`` gains
    most of a second core when it is idle and costs little when another
    process keeps it busy; the numbers of
    ``extra_info`` in ``benchmarks/bench_threads.py`` measure both cases.
    More threads than cores only add waits.  The worker threads block every
    signal (Ctrl-C reaches the main thread, which defers it to the end of
    the stretch) and are joined when :meth:`run` returns or raises.

    On the Python backend each client's step is a sequence of small NumPy
    calls that hold the GIL, so extra pool threads mostly wait for it: on
    small problems two threads are slower than one.  That backend runs the
    real wire format (bytes encoded and decoded per client); the compiled
    backend is the fast one.

    Examples
    --------
    The thread count and the backend change the speed, never the numbers:

    >>> import numpy as np
    >>> from fedmm.algorithms import FedMM
    >>> from fedmm.models import InverseToy
    >>> rng = np.random.default_rng(0)
    >>> datas = [rng.uniform(1, 2, 100), rng.uniform(5, 9, 100), rng.uniform(2, 3, 50)]
    >>> algo = FedMM(InverseToy(), clients_per_round=2, step=0.5, batch_size=10)
    >>> h1 = algo.run(datas, 20, seed=3, runtime=LocalRuntime(n_threads=1, compiled=False))
    >>> h2 = algo.run(datas, 20, seed=3, runtime=LocalRuntime(n_threads=2))
    >>> h1.equals(h2)
    True
    """

    #: :meth:`run` continues from a checkpoint and writes them (``start``, ``checkpoint``):
    #: :class:`fedmm.protocols.SupportsResume`.
    resumable = True

    def __init__(self, n_threads: int = 1, compiled: bool = True, batched: bool = True,
                 on_client_error: str = "drop") -> None:
        self.n_threads = check_int(n_threads, "n_threads", low=1)
        for name, value in (("compiled", compiled), ("batched", batched)):
            if not isinstance(value, bool):
                raise TypeError(f"Expected '{name}' to be a bool, got {value!r}")
        self.compiled = compiled
        self.batched = batched
        self.on_client_error = check_in(on_client_error, "on_client_error", CLIENT_ERROR_POLICIES)

    def _one(self, client: Any, message: Any, reasons: dict[int, str]) -> Any:
        """``client.step(message)``, or None (dropped, reason noted) when it raises under 'drop'."""
        try:
            return client.step(message)
        except Exception as exc:
            if self.on_client_error == "raise":
                raise
            reasons[client.index] = f"{type(exc).__name__}: {exc}"
            return None

    def _work(self, share: list[Any], message: Any, reasons: dict[int, str],
              snapshots: dict[int, Any]) -> list[Any]:
        # A client type may offer a batched step of several clients (one kernel call, e.g. FedMLS)
        # (declared by the class: fedmm.protocols.SupportsStepMany)
        step_many = type(share[0]).step_many if self.batched and isinstance(share[0], SupportsStepMany) else None
        if step_many is not None:
            try:
                return step_many(share, message)
            except Exception:
                if self.on_client_error == "raise":
                    raise
                _restore(share, snapshots)  # find the failing client(s) one by one (same numbers)
        return [self._one(c, message, reasons) for c in share]

    def exchange(self, clients: Sequence[Any], message: Any, pool: ThreadPoolExecutor | None,
                 reasons: dict[int, str] | None = None, snapshots: dict[int, Any] | None = None) -> list[Any]:
        """Deliver ``message`` to ``clients`` and collect their payloads, in order (None: dropped).

        ``snapshots`` (client index → its start-of-round state) lets a
        failed batched share be rerun client by client; ``reasons`` receives
        why each dropped client failed.
        """
        if not clients:
            return []
        reasons = {} if reasons is None else reasons
        snapshots = {} if snapshots is None else snapshots
        shares = split_contiguous(clients, self.n_threads)
        if pool is None or len(shares) == 1:
            return [b for share in shares for b in self._work(share, message, reasons, snapshots)]
        # The calling thread works on the first share instead of idling on the futures.
        futures = [pool.submit(self._work, share, message, reasons, snapshots) for share in shares[1:]]
        try:
            payloads = self._work(shares[0], message, reasons, snapshots)
            return [*payloads, *(b for f in futures for b in f.result())]
        finally:
            for f in futures:  # never leave a pool thread running a client (Ctrl-C, errors)
                f.exception()

    @staticmethod
    def _stretch_end(t: int, n_rounds: int, monitor: Any, callback: Any, checkpoint: Any = None) -> int:
        """End (exclusive) of the compiled stretch starting at round ``t``: it stops after the first
        round the monitor or the checkpoint writer is due on (every round with a callback)."""
        if callback is not None:
            return t + 1
        end = min(n_rounds, t + _STRETCH)
        for u in range(t, end):
            if (monitor is not None and monitor.due(u)) or (checkpoint is not None and checkpoint.due(u)):
                return u + 1
        return end

    def run(self, server: Any, clients: Sequence[Any], n_rounds: int, *, history: History,
            monitor: Callable[[int, float], dict] | None = None,
            callback: Callable[[int], None] | None = None, progress: bool | None = None,
            start: int = 0, checkpoint: Any = None) -> History:
        """Run the set-up exchange (if the server has one) and rounds ``start, ..., n_rounds − 1``,
        one record per round.

        Record fields added here (:func:`round_record`): ``t``, ``active``
        (clients whose message was aggregated), ``dropped`` (clients dropped
        under ``on_client_error='drop'``) with ``drop_reasons`` when there
        were any, ``bytes_up``, ``bytes_down``, ``wall_time`` (cumulative
        seconds of the rounds, monitoring excluded); the server's record and
        the monitor's fields are merged in, with ``monitor_time`` (cumulative
        seconds of monitoring) when there is a monitor.  ``progress``: a bar
        on standard error; ``None`` (default) shows it only when standard
        error is a terminal.

        ``start > 0`` continues a run whose server and clients already hold
        the state after round ``start − 1`` and whose ``history`` holds its
        ``start`` records: the set-up exchange is skipped and ``wall_time``
        (and ``monitor_time``) go on from the last record.  ``checkpoint`` (e.g. a
        :class:`fedmm.federation.CheckpointWriter`: ``due(t)`` and a call after
        round ``t``) is called after every round's record and callback;
        compiled stretches end on its due rounds.
        """
        n_rounds = check_count(n_rounds, "n_rounds", low=0)
        start = check_int(start, "start", low=0, high=max(n_rounds, 0))
        if start and len(history.records) != start:
            raise ValueError(f"Expected a History of {start} records to continue from round {start}, "
                             f"got {len(history.records)}")
        bar = progress_bar(progress, total=n_rounds, initial=start, desc=history.algorithm or "rounds")
        pool = None  # the Python backend's thread pool
        workers = None  # the compiled backend's kernels.WorkerPool
        elapsed = float(history.records[-1].get("wall_time", 0.0)) if start else 0.0
        user_callback = callback  # only a user's callback forces one-round compiled stretches
        if checkpoint is not None:
            def callback(t: int) -> None:
                if user_callback is not None:
                    user_callback(t)
                checkpoint(t)
        try:
            # The set-up exchange (e.g. FedMM's initial control variates; setup_message() is None when
            # the algorithm has none): every client answers once, the server aggregates.
            setup = server.setup_message() if start == 0 else None
            if setup is not None:
                setup_payloads = [c.setup(setup) for c in clients]
                server.setup_aggregate({c.index: b for c, b in zip(clients, setup_payloads)})
                history.config["setup_bytes_up"] = sum(len(b) for b in setup_payloads)
                history.config["setup_bytes_down"] = len(clients) * setup.nbytes
            # Compiled: whole stretches of rounds in one call when the server has them for this
            # configuration (same numbers; Python runs only between stretches).
            # (declared by the server: supports_compiled_rounds, fedmm.protocols.CompiledRoundsServer)
            compiled = self.compiled and server.supports_compiled_rounds
            # the compiled stretches share one set of worker threads for the run
            stretch_kwargs = {}
            if compiled and self.n_threads > 1:
                workers = kernels.WorkerPool(self.n_threads)
                stretch_kwargs["pool"] = workers
            t = start
            while t < n_rounds:
                if compiled:
                    end = self._stretch_end(t, n_rounds, monitor, user_callback, checkpoint)
                    # Ctrl-C waits for the end of the stretch (at most _STRETCH_SECONDS of rounds): the
                    # server and clients hold its rounds as soon as the call returns, so their records
                    # must reach the History before KeyboardInterrupt can leave them inconsistent.
                    with _interrupts_deferred():
                        done = server.simulate_rounds(clients, t, end - t, self.n_threads, _STRETCH_SECONDS,
                                                      **stretch_kwargs)
                        if done is None:
                            compiled = False
                            continue
                        failed = done and "failed" in done[-1]
                        if failed:
                            done = done[:-1]  # committed rounds; the failed one reruns on the Python backend
                        for u, rnd in enumerate(done, start=t):
                            elapsed += rnd["seconds"]
                            record = _record(u, rnd["record"], rnd["active"], [], rnd["bytes_up"],
                                             rnd["bytes_down"], elapsed)
                            try:  # earlier rounds of the stretch were not due
                                record.update(run_monitor(monitor, u, record["gamma"], history, due=u == end - 1))
                            finally:
                                history.append(**record)  # the round happened, monitored or not
                            if callback is not None:
                                callback(u)
                    if bar is not None:
                        bar.update(len(done))
                    t += len(done)  # fewer than asked when the stretch ran out of time or a round failed
                    if failed:
                        if pool is None and self.n_threads > 1:
                            pool = ThreadPoolExecutor(max_workers=self.n_threads - 1)
                        elapsed = self._python_round(server, clients, t, pool, history, elapsed, monitor,
                                                     callback)
                        if bar is not None:
                            bar.update(1)
                        t += 1
                    continue
                if pool is None and self.n_threads > 1:
                    pool = ThreadPoolExecutor(max_workers=self.n_threads - 1)
                elapsed = self._python_round(server, clients, t, pool, history, elapsed, monitor, callback)
                if bar is not None:
                    bar.update(1)
                t += 1
        except (Exception, KeyboardInterrupt) as exc:
            exc.history = history  # the completed rounds; the interrupted or failed one left no trace
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            if workers is not None:
                workers.close()  # joins the threads: none outlives the run
            if bar is not None:
                bar.close()
        warn_all_dropped(history, start)
        return history

    def _python_round(self, server: Any, clients: Sequence[Any], t: int, pool: ThreadPoolExecutor | None,
                      history: History, elapsed: float, monitor: Any, callback: Any) -> float:
        """Round ``t`` on the Python backend, atomic: on any exception (Ctrl-C included) the server, the
        contacted clients and the History get their start-of-round states back.  ``callback(t)`` runs once
        the round is committed (as after a compiled stretch's rounds): an exception it raises leaves the
        round in place."""
        start = time.perf_counter()
        # before select/broadcast: they may draw from the server's own streams (Scaffnew's coins)
        server_state = server.export_state()
        ids = server.select(t)
        message = server.broadcast(t)
        contacted = [clients[i] for i in ids]
        snapshots = {c.index: c.export_state() for c in contacted}
        n_records = len(history.records)
        reasons: dict[int, str] = {}
        committed = False
        try:
            payloads = self.exchange(contacted, message, pool, reasons, snapshots)
            for c, b in zip(contacted, payloads):
                if b is None and c.index in snapshots:
                    c.import_state(snapshots[c.index])  # a failed client's round left no trace
            on_invalid = None
            # every server's aggregate takes on_invalid (fedmm.protocols.ServerParty): under 'drop' an
            # invalid payload drops its client (a server that needs every message raises instead)
            if self.on_client_error == "drop":
                def on_invalid(i: int, reason: str) -> None:
                    if i in snapshots:
                        clients[i].import_state(snapshots[i])
            elapsed = finish_round(server, history, t, ids, payloads, message, start, elapsed, monitor, None,
                                   reasons=reasons if (reasons or on_invalid) else None, on_invalid=on_invalid)
            committed = True
        except Exception as exc:
            if reasons:  # e.g. a server that needs every message: say which clients were dropped, and why
                exc.add_note(f"fedmm: round {t} failed after dropping client(s) "
                             + "; ".join(f"{i} ({why})" for i, why in sorted(reasons.items())))
            raise
        finally:
            if not committed:  # undo the whole round: server, clients and its record
                _restore(contacted, snapshots)
                if server_state is not None:
                    server.import_state(server_state)
                del history.records[n_records:]
        if callback is not None:
            callback(t)
        return elapsed


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold back SIGINT's ``KeyboardInterrupt`` until the block ends (main thread, default handler only).

    The signal is noted by a temporary handler and raised on exit, after the
    previous handler is back; elsewhere (other threads, a user's own
    handler) the block runs unchanged.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def _restore(clients: Sequence[Any], snapshots: dict[int, Any]) -> None:
    """Give ``clients`` their start-of-round states back (those that have one)."""
    for c in clients:
        if c.index in snapshots:
            c.import_state(snapshots[c.index])
