# SPDX-License-Identifier: BSD-3-Clause
"""The base of every federated algorithm family: declared parameter constraints and one ``run``.

:class:`FederatedAlgorithm` owns everything a run does around the rounds, the
same for FedMM, parameter averaging, FedMLS, FedAvg, Scaffold, Scaffnew,
FedMM-OT and FedAdam: argument checks, the seed, resuming from a
:class:`~fedmm.federation.Checkpoint` (fingerprint checked), the
:class:`~fedmm.History` and its initial values, the default runtime, the
``callback(t, state)`` of every round, checkpoints (every ``checkpoint_every``
rounds and on any error or interrupt), the early stop of :class:`StopRun` and
the final ``state``/``params``/``theta``.  A family supplies small hooks (see
the class docstring): how to build its server and clients, its monitor, its
final state.

Constructor arguments are checked in one place too: a family declares
``parameter_constraints`` (argument → :class:`Constraint`, as scikit-learn's
``_parameter_constraints``) and its constructor calls
:meth:`FederatedAlgorithm.set_parameters`.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping, Sequence

from fedmm._validation import (check_bool, check_callable, check_count, check_in, check_int, check_real,
                               check_seed)
from fedmm.algorithms._random import seed_from_repr, seed_repr
from fedmm.algorithms._setup import check_runtime, client_error_policy
from fedmm.federation import LocalRuntime
from fedmm.federation.checkpoint import Checkpoint, CheckpointWriter, import_arrays
from fedmm.history import History
from fedmm.protocols import SupportsResume

__all__ = ["FederatedAlgorithm", "StopRun", "Constraint", "Options", "Integer", "Real", "Boolean", "Rule",
           "OptionalConstraint"]


class StopRun(Exception):
    """Raised by the ``callback`` of an algorithm's ``run`` to end the run after the round it was called for.

    ``run`` then returns normally: the History holds the completed rounds
    (``len(history)`` of them, ``history.config['stopped_early'] = True``) and
    the server's state after the last of them, as a run of that many rounds
    would.  Early stopping rules (e.g. a tolerance on the change of the
    objective) are written as callbacks that raise it.  Every family's ``run``
    (:meth:`FederatedAlgorithm.run`) honours it.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.algorithms import FedMM
    >>> from fedmm.models import GaussianMixture
    >>> Y = np.random.default_rng(0).normal(size=(50, 2))
    >>> def stop_after_three(t, state):
    ...     if t == 2:
    ...         raise StopRun
    >>> len(FedMM(GaussianMixture(1, "full")).run([Y], 10, seed=0, callback=stop_after_three))
    3
    """


# --------------------------------------------------------------------------- constraints
class Constraint:
    """A rule one constructor argument must satisfy (an entry of ``parameter_constraints``).

    :meth:`check` returns the value as the algorithm stores it, or raises a
    ``TypeError``/``ValueError`` whose message names the argument.
    """

    def check(self, value: Any, name: str) -> Any:
        """``value`` normalized, or ``TypeError``/``ValueError`` naming ``name``."""
        raise NotImplementedError  # pragma: no cover

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Options(Constraint):
    """One of a fixed tuple of values (``ValueError`` listing them otherwise).

    Parameters
    ----------
    *choices
        The accepted values.
    """

    def __init__(self, *choices: Any) -> None:
        self.choices = tuple(choices)

    def check(self, value: Any, name: str) -> Any:
        return check_in(value, name, self.choices)


class Integer(Constraint):
    """An integer in ``[low, high]`` (``high=None``: up to int64); ``count=True`` bounds it by
    ``MAX_ITERATIONS`` (``2**31 − 1``) as every iteration count is.

    Parameters
    ----------
    low, high : int or None
    count : bool
    """

    def __init__(self, low: int | None = None, high: int | None = None, *, count: bool = False) -> None:
        self.low, self.high, self.count = low, high, count

    def check(self, value: Any, name: str) -> int:
        if self.count:
            return check_count(value, name, low=0 if self.low is None else self.low)
        return check_int(value, name, low=self.low, high=self.high)


class Real(Constraint):
    """A finite real number in an interval (open or closed at each end).

    Parameters
    ----------
    low, high : float or None
    low_open, high_open : bool
    """

    def __init__(self, low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False) -> None:
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    def check(self, value: Any, name: str) -> float:
        return check_real(value, name, low=self.low, high=self.high, low_open=self.low_open,
                          high_open=self.high_open)


class Boolean(Constraint):
    """``True`` or ``False`` (Python or NumPy bool; anything else is a ``TypeError``)."""

    def check(self, value: Any, name: str) -> bool:
        return check_bool(value, name)


class Rule(Constraint):
    """A check written as a function ``rule(value, name) -> value`` (e.g. a schedule specification).

    Parameters
    ----------
    rule : callable(value, name)
        Returns the normalized value or raises ``TypeError``/``ValueError`` naming ``name``.
    description : str
        What the rule accepts (for ``repr`` and the documentation).
    """

    def __init__(self, rule: Callable[[Any, str], Any], description: str = "") -> None:
        self.rule, self.description = rule, description

    def check(self, value: Any, name: str) -> Any:
        return self.rule(value, name)

    def __repr__(self) -> str:
        return f"Rule({self.description or getattr(self.rule, '__name__', 'rule')!r})"


class OptionalConstraint(Constraint):
    """None, or a value satisfying ``inner``.

    Parameters
    ----------
    inner : Constraint
    """

    def __init__(self, inner: Constraint) -> None:
        self.inner = inner

    def check(self, value: Any, name: str) -> Any:
        return None if value is None else self.inner.check(value, name)


# --------------------------------------------------------------------------- the base
class FederatedAlgorithm:
    """Base of every federated algorithm family: parameter constraints and the one :meth:`run`.

    :meth:`run` is the same for every family; a family supplies these hooks
    (each documented on its method):

    ==============================  ==========================================================================
    hook                            what the family says
    ==============================  ==========================================================================
    :meth:`config`                  its hyper-parameters (``History.config``; the checkpoint fingerprint)
    :meth:`check_run_args`          its own ``run`` arguments (e.g. FedMM-OT's ``target``), checked
    :meth:`build_parties`           the server and clients of a run (calls the family's ``build``)
    :meth:`check_evaluate_data`     ``evaluate_data`` checked (refused where the family has none)
    :meth:`make_monitor`            the monitor the runtime calls after rounds (or None)
    :meth:`record_start`            ``history.initial``: the values at the starting point
    :meth:`choose_runtime`          the runtime that runs the rounds (default: the in-process one)
    :meth:`fingerprint_fields`      what ties a checkpoint to its run besides hyper-parameters and seed
    :meth:`server_params`           the server's parameter as named arrays (``History.params``, callbacks)
    :meth:`callback_state`          the rest of the mapping a ``callback`` receives
    :meth:`final_state`             ``History.state`` at the end
    :meth:`final_theta`             ``History.theta`` at the end (the parameter as the model's object)
    :meth:`finish`                  anything else the History gets at the end (optional)
    ==============================  ==========================================================================

    Attributes
    ----------
    name : str
        The algorithm's name in ``History.algorithm`` (a class attribute).
    parameter_constraints : dict of str to Constraint
        Constructor argument → the :class:`Constraint` it must satisfy (a
        class attribute; subclasses extend their parent's).  The constructor
        checks them with :meth:`set_parameters`; arguments whose checks
        depend on each other (e.g. ``clients_per_round`` and
        ``participation_prob``) are checked by the constructor itself.
    default_evaluate_every : int
        ``evaluate_every`` when :meth:`run` gets None (a class attribute).
    """

    name: ClassVar[str] = ""
    parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    default_evaluate_every: ClassVar[int] = 0

    # -- parameters -------------------------------------------------------------------
    @classmethod
    def check_parameters(cls, **values: Any) -> dict[str, Any]:
        """Each value checked against its entry of :attr:`parameter_constraints`, in the order given.

        Parameters
        ----------
        **values
            Constructor argument name → value.

        Returns
        -------
        dict
            The normalized values, in the same order.

        Raises
        ------
        TypeError, ValueError
            From the first value that breaks its constraint, naming the argument.
        KeyError
            A name without a constraint (a programming error of the family).
        """
        return {name: cls.parameter_constraints[name].check(value, name) for name, value in values.items()}

    def set_parameters(self, **values: Any) -> None:
        """:meth:`check_parameters`, then each normalized value set as the attribute of its name."""
        for name, value in self.check_parameters(**values).items():
            setattr(self, name, value)

    def config(self) -> dict[str, Any]:
        """JSON-friendly hyper-parameters (stored in ``History.config``)."""
        raise NotImplementedError  # pragma: no cover

    # -- run hooks ----------------------------------------------------------------------
    def check_run_args(self, n_rounds: int, evaluate_every: Any, **family_args: Any) -> dict[str, Any]:
        """The run's ``evaluate_every`` and the family's own ``run`` arguments, checked.

        Parameters
        ----------
        n_rounds : int
            The run's rounds (already checked).
        evaluate_every : int
            The cadence of the family's evaluation (0: never).
        **family_args
            Arguments only this family's ``run`` has (FedMM's ``monitor_every``,
            FedMM-OT's ``target`` and ``evaluate``).

        Returns
        -------
        dict
            ``evaluate_every`` and the family's arguments, normalized: the
            ``run_args`` every later hook receives.
        """
        if family_args:
            raise TypeError(f"{type(self).__name__}.run() got unexpected keyword argument(s) {sorted(family_args)}")
        return {"evaluate_every": check_int(evaluate_every, "evaluate_every", low=0)}

    def build_parties(self, datas: Sequence[Any], *, seed: Any, init: Any, on_client_error: str,
                      run_args: dict[str, Any]) -> tuple[Any, list[Any]]:
        """The server and the clients of a run on ``datas``.

        Parameters
        ----------
        datas : sequence
            The clients' data sets (validated here).
        seed : SeedSequence
            The run's normalized seed.
        init : object or None
            The starting point the user gave.
        on_client_error : {'drop', 'raise'}
            The run's fault policy (for exchanges the family runs itself before the rounds).
        run_args : dict
            :meth:`check_run_args`'s result; a family may add derived values
            for its later hooks (e.g. the stacked data its monitor evaluates).

        Returns
        -------
        server : ServerParty
        clients : list of ClientParty
        """
        raise NotImplementedError  # pragma: no cover

    def check_evaluate_data(self, evaluate_data: Any, *, server: Any, clients: Sequence[Any]) -> Any:
        """``evaluate_data`` checked against the run (default: only None is accepted)."""
        if evaluate_data is not None:
            raise ValueError(f"Expected 'evaluate_data' to be None: {type(self).__name__} does not evaluate on "
                             "separate data")
        return None

    def make_monitor(self, server: Any, clients: Sequence[Any], *, n_rounds: int, evaluate_data: Any,
                     run_args: dict[str, Any]) -> Any:
        """The :class:`fedmm.protocols.Monitor` the runtime calls after rounds, or None (default)."""
        return None

    def record_start(self, history: History, *, server: Any, clients: Sequence[Any], monitor: Any, init: Any,
                     run_args: dict[str, Any]) -> None:
        """Fill ``history.initial`` (the values at the starting point) before the first round of a new run
        (not on resume: the checkpoint's History has them)."""
        raise NotImplementedError  # pragma: no cover

    def choose_runtime(self, runtime: Any, *, server: Any, clients: Sequence[Any], history: History,
                       on_client_error: str) -> Any:
        """The runtime that runs the rounds: ``runtime`` when given, else an in-process
        :class:`~fedmm.federation.LocalRuntime` with this algorithm's ``n_threads`` and the fault policy.

        A family may record its choice in ``history.config`` (FedMM's ``backend``).
        """
        if runtime is not None:
            return runtime
        return LocalRuntime(n_threads=self.n_threads, on_client_error=on_client_error)

    def fingerprint_config(self) -> dict[str, Any]:
        """The hyper-parameters a checkpoint must match: :meth:`config` without ``n_threads``
        (the numbers do not depend on it)."""
        return {k: v for k, v in self.config().items() if k != "n_threads"}

    def fingerprint_fields(self, server: Any, clients: Sequence[Any], *, evaluate_data: Any,
                           run_args: dict[str, Any]) -> dict[str, Any]:
        """What ties a checkpoint to its run besides the algorithm, :meth:`fingerprint_config`, the
        seed, the number of clients and ``evaluate_every``: the clients' data digest
        (:func:`fedmm.federation.checkpoint.data_digest`), ``evaluate_data``'s, the family's run arguments."""
        raise NotImplementedError  # pragma: no cover

    def server_params(self, server: Any) -> dict[str, Any]:
        """The server's current parameter as named arrays (``History.params``; ``state["params"]``
        of a ``callback``)."""
        raise NotImplementedError  # pragma: no cover

    def callback_state(self, server: Any, clients: Sequence[Any]) -> dict[str, Any]:
        """What a ``callback`` receives besides ``"params"`` (default nothing)."""
        return {}

    def final_state(self, server: Any, clients: Sequence[Any]) -> dict[str, Any]:
        """``History.state`` at the end of a run (flat arrays)."""
        raise NotImplementedError  # pragma: no cover

    def final_theta(self, server: Any, clients: Sequence[Any]) -> Any:
        """``History.theta`` at the end of a run: the parameter as the model's own object (in memory only)."""
        raise NotImplementedError  # pragma: no cover

    def finish(self, history: History, server: Any, clients: Sequence[Any]) -> None:
        """Anything else the History gets at the end of a run (default nothing)."""

    # -- the run ------------------------------------------------------------------------
    def fingerprint(self, server: Any, clients: Sequence[Any], *, seed: Any, evaluate_data: Any,
                    run_args: dict[str, Any]) -> dict[str, Any]:
        """What ties a checkpoint to this run (everything that changes its numbers or records)."""
        return {"algorithm": self.name, "config": self.fingerprint_config(), "seed": seed_repr(seed),
                "n_clients": len(clients), "evaluate_every": run_args["evaluate_every"],
                **self.fingerprint_fields(server, clients, evaluate_data=evaluate_data, run_args=run_args)}

    # -- defaults of the remote contract (fedmm.protocols.RemoteAlgorithm) ------------------------------------
    # For a family without set-up or start exchange whose round messages are flat arrays (the non-smooth and
    # OT families); FedMM overrides them.
    def setup_exchange(self) -> bool:
        """False: no set-up exchange travels (the clients set up on their first round)."""
        return False

    def start_exchange(self, init: Any) -> bool:
        """False: the starting point comes from ``init`` or the seed, not from the clients."""
        return False

    def start_refused(self) -> TypeError:
        """The error of a start-exchange call on a family that has none."""
        return TypeError(f"{self.name} has no start exchange (start_exchange() is False)")

    def start_message(self, server: Any) -> Any:
        """Refused: no start exchange (:meth:`start_refused`)."""
        raise self.start_refused()

    def start_reply(self, client: Any, message: Any) -> bytes:
        """Refused: no start exchange (:meth:`start_refused`)."""
        raise self.start_refused()

    def restart_server(self, server: Any, payloads: Mapping[int, bytes], *, n_clients: int,
                       descriptions: Sequence[Mapping[str, Any]], seed: int,
                       on_invalid: Callable[[int, str], None] | None = None) -> Any:
        """Refused: no start exchange (:meth:`start_refused`)."""
        raise self.start_refused()

    def broadcast_layout(self, server: Any) -> str:
        """Empty: the round messages are flat arrays."""
        return ""

    def broadcast_to_arrays(self, message: Any) -> list[Any]:
        """The message's own ``to_arrays()``."""
        return message.to_arrays()

    def run(self, datas: Sequence[Any], n_rounds: int, *, seed: Any = None, init: Any = None, runtime: Any = None,
            on_client_error: str | None = None, progress: bool | None = None,
            callback: Callable[[int, Mapping[str, Any]], None] | None = None, evaluate_every: int | None = None,
            evaluate_data: Any = None, resume: Any = None, checkpoint_every: int = 0, checkpoint_path: Any = None,
            **family_args: Any) -> History:
        """Run ``n_rounds`` rounds on the clients' data ``datas`` (every family's ``run`` forwards here).

        Parameters
        ----------
        datas : list of client data sets (the family's format)
        n_rounds : int in [0, 2**31 - 1]
        seed : int, SeedSequence, Generator or None
            Root of all randomness, normalized as NumPy does (a Generator is
            drawn from, None takes fresh OS entropy); recorded in
            ``History.config["seed"]`` (:func:`fedmm.algorithms.seed_from_repr`
            gives it back), so a run is reproducible bit for bit.
        init : optional
            The starting point (the family's format); None: the family's default.
        runtime : object, optional
            Anything with ``run(server, clients, n_rounds, history=, monitor=,
            callback=, progress=)`` (:class:`fedmm.protocols.Runtime`); default
            the family's in-process runtime (:meth:`choose_runtime`).
        on_client_error : {'drop', 'raise'} or None
            The default runtime's fault policy: a client whose round raises or
            whose payload fails validation is dropped for that round (recorded
            in ``dropped`` / ``drop_reasons``) and the run goes on, or the
            error propagates.  None: ``'drop'``.  With ``runtime`` given, the
            runtime's own policy applies; a value that differs from it is
            refused.  Every family's server can leave a client out.
        progress : bool or None
            A tqdm progress bar on standard error: True on, False off, None
            on only when standard error is a terminal.
        callback : callable(t, state), optional
            Called after each round ``t`` with a read-only mapping
            (``types.MappingProxyType``): ``state["params"]`` is the server's
            parameter as named arrays (what ``History.params`` holds at the
            end), the other keys the family's (:meth:`callback_state`).
            Raising :class:`StopRun` ends the run there: ``run`` returns the
            History of the completed rounds (``config['stopped_early'] = True``).
        evaluate_every : int or None
            The cadence of the family's evaluation (e.g. the objective);
            None: :attr:`default_evaluate_every`.
        evaluate_data : optional
            Data on which the family evaluates instead of ``datas`` (where it has such an evaluation).
        resume : Checkpoint or path, optional
            Continue the run that wrote this :class:`fedmm.federation.Checkpoint`
            (or the file :meth:`~fedmm.federation.Checkpoint.save` wrote) from its
            next round up to ``n_rounds``, as if it had never stopped: the
            result equals the uninterrupted run's bit for bit.  The run must be
            the same (hyper-parameters, seed, number of clients, their data,
            ``evaluate_every``, the family's run arguments; ``n_threads`` may
            differ): a checkpoint of another run is refused with a
            ``ValueError`` naming what differs.  ``seed=None`` takes the
            checkpoint's seed; ``init`` must be None.
        checkpoint_every : int >= 0
            Write a checkpoint to ``checkpoint_path`` after every this many
            rounds (0: only when the run ends with an error or an interrupt).
            Writes are atomic.
        checkpoint_path : path-like, optional
            Where checkpoints go.  Whatever the path, an exception that ends
            the run once its rounds have begun (``KeyboardInterrupt``, a client
            error under ``on_client_error='raise'``, a failed server step, a
            callback's error) carries ``exc.history`` (the completed rounds)
            and ``exc.checkpoint`` (a :class:`~fedmm.federation.Checkpoint` to pass
            as ``resume``), also written to ``checkpoint_path`` when given.
            Checkpoints need a runtime that declares ``resumable = True``
            (:class:`fedmm.protocols.SupportsResume`; ``LocalRuntime`` and ``RayRuntime`` do).  On
            Flower, ``fedmm.runtime.flower.FedMMStrategy.run`` takes the same ``resume``,
            ``checkpoint_every`` and ``checkpoint_path``.
        **family_args
            The family's own arguments (checked by :meth:`check_run_args`).

        Returns
        -------
        History
            One record per round (fields: the family's), ``initial`` the values
            at the starting point, ``state`` (:meth:`final_state`), ``params``
            (:meth:`server_params`) and ``theta`` (:meth:`final_theta`).
        """
        n_rounds = check_count(n_rounds, "n_rounds", low=0)
        run_args = self.check_run_args(n_rounds, self.default_evaluate_every if evaluate_every is None
                                       else evaluate_every, **family_args)
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", low=0)
        check_callable(callback, "callback")
        on_client_error = client_error_policy(on_client_error, check_runtime(runtime))
        if checkpoint_every and checkpoint_path is None:
            raise ValueError("Expected 'checkpoint_path' (where to write) with 'checkpoint_every' > 0")
        resumed = None
        if resume is not None:
            resumed = resume if isinstance(resume, Checkpoint) else Checkpoint.load(resume)
            if init is not None:
                raise ValueError("Expected 'init' to be None with 'resume' (the checkpoint holds the state)")
            if resumed.next_round > n_rounds:
                raise ValueError(f"Expected 'n_rounds' >= {resumed.next_round}, the rounds the checkpoint "
                                 f"has completed, got {n_rounds}")
            if seed is None:
                seed = seed_from_repr(resumed.history.config.get("seed"))
        seed = check_seed(seed)  # once: a Generator is drawn from, None draws fresh entropy
        server, clients = self.build_parties(datas, seed=seed, init=init, on_client_error=on_client_error,
                                             run_args=run_args)
        evaluate_data = self.check_evaluate_data(evaluate_data, server=server, clients=clients)
        fingerprint = None
        if resumed is not None or checkpoint_path is not None:
            fingerprint = self.fingerprint(server, clients, seed=seed, evaluate_data=evaluate_data, run_args=run_args)
        if resumed is not None:
            resumed.check_matches(fingerprint)
            import_arrays(server, resumed.server_state)
            for c, state in zip(clients, resumed.client_states):
                import_arrays(c, state, server.theta)
            history = resumed.history.copy()
            history.config["n_rounds"] = n_rounds
        else:
            history = History(self.name, {**self.config(), "seed": seed_repr(seed), "n_clients": len(clients),
                                          "n_rounds": n_rounds})
        monitor = self.make_monitor(server, clients, n_rounds=n_rounds, evaluate_data=evaluate_data,
                                    run_args=run_args)
        if resumed is None:
            self.record_start(history, server=server, clients=clients, monitor=monitor, init=init, run_args=run_args)
        runtime = self.choose_runtime(runtime, server=server, clients=clients, history=history,
                                      on_client_error=on_client_error)
        round_callback = None
        if callback is not None:
            def round_callback(t: int) -> None:
                callback(t, MappingProxyType({"params": self.server_params(server),
                                              **self.callback_state(server, clients)}))

        def snapshot() -> Checkpoint:
            nonlocal fingerprint
            if fingerprint is None:  # computed on demand: hashing the data costs a pass over it
                fingerprint = self.fingerprint(server, clients, seed=seed, evaluate_data=evaluate_data,
                                               run_args=run_args)
            return Checkpoint(fingerprint=fingerprint, next_round=len(history.records),
                              server_state=server.export_state(), client_states=[c.export_state() for c in clients],
                              history=history.copy())

        writer = CheckpointWriter(checkpoint_path, checkpoint_every, snapshot)
        extra: dict[str, Any] = {}
        if resumed is not None or checkpoint_path is not None:
            # declared, not probed: a runtime with resumable = True (fedmm.protocols.SupportsResume)
            if not (isinstance(runtime, SupportsResume) and runtime.resumable):
                raise ValueError(f"runtime {type(runtime).__name__} cannot resume or checkpoint a run (it does not "
                                 "declare resumable = True, fedmm.protocols.SupportsResume); use the in-process "
                                 "runtime")
            extra = {"start": 0 if resumed is None else resumed.next_round,
                     "checkpoint": writer if checkpoint_path is not None else None}
        try:
            runtime.run(server, clients, n_rounds, history=history, monitor=monitor, callback=round_callback,
                        progress=progress, **extra)
        except StopRun:  # the callback's early stop: the completed rounds are the result
            history.config["stopped_early"] = True
        except (Exception, KeyboardInterrupt) as exc:
            # Rounds are atomic: the server and clients hold the state after the last completed round.
            exc.history = history
            try:
                exc.checkpoint = writer.write()
            except Exception as failure:  # e.g. the disk that failed the run: the run's own error goes on
                exc.checkpoint = None
                exc.add_note(f"fedmm: no checkpoint of the completed rounds ({type(failure).__name__}: {failure})")
            raise
        history.state.update(self.final_state(server, clients))
        history.params = self.server_params(server)
        history.theta = self.final_theta(server, clients)
        self.finish(history, server, clients)
        return history
