# SPDX-License-Identifier: BSD-3-Clause
"""fedmm algorithms on Flower (Message API, ``flwr>=1.41,<1.42``): a server strategy and a ClientApp factory.

The server side (:class:`FedMMStrategy`) runs an algorithm's server party;
each Flower node runs the matching client party, built by the ClientApp of
:func:`client_app`.  Nothing mathematical happens here: the strategy moves the
server's broadcast down as arrays and the clients' payloads up as bytes.  Both
sides talk to the algorithm only through its declared contract,
:class:`fedmm.protocols.RemoteAlgorithm` (implemented by every algorithm of
:mod:`fedmm.algorithms`: FedMM, FedMM-OT, FedAdam, FedMLS, FedAvg, Scaffold,
Scaffnew; a user's algorithm may implement it too), and to the parties only
through :class:`fedmm.protocols.ServerParty` and
:class:`fedmm.protocols.ClientParty`.  This module imports no algorithm and
probes nothing: an object without the contract is refused with a
``TypeError`` naming the protocol (:func:`remote_algorithm`).

Wire conventions (``fedmm/payload-v1``):

- down, message type ``train`` (``train.fedmm_setup`` for a set-up exchange
  such as FedMM's oracle control variates): an ``ArrayRecord``
  ``"fedmm.broadcast"`` with the arrays of the broadcast's ``to_arrays()``
  under the keys ``"0"``, ``"1"``, ... (``broadcast_to_arrays``; FedMM: ``t``
  as int64 of shape (1,), ``Ŝ_t``, ``θ_t`` flattened by
  ``model.theta_vector``, the coins of Algorithm 4; FedMM-OT and FedAdam:
  ``t``, ``ω_t``, ``θ_t``; the subgradient family: the message's vectors,
  then its scalars) and a ``ConfigRecord`` ``"fedmm.config"`` with the
  client's ``index``, ``n-clients``, the run ``seed`` (decimal string), the
  ``round``, the broadcast's ``layout`` (FedMM: the parameter's structure),
  ``accepted-round`` (see below) and the strategy's ``strategy-token`` (a
  random hex string per strategy object);
- up: an ``ArrayRecord`` ``"fedmm.payload"`` holding one
  ``Array(dtype="uint8", shape=(n,), stype="fedmm/payload-v1", data=payload)``
  (the compressor's self-describing bytes, ``docs/wire-format.md``) and a
  ``ConfigRecord`` ``"fedmm.reply"`` with the client's ``partition-id`` and round.
- start-up, message type ``query.fedmm_hello``: every node answers with its
  ``partition-id`` (from ``context.node_config``) and an ``ArrayRecord``
  ``"fedmm.hello"``, the algorithm's description of its data
  (``describe_data``: its number of samples ``n-samples``, the default
  weights ``μ_i = N_i/N``, and what else the algorithm needs: the local
  moments of a model with global moments (the Gaussian mixture), the length
  of ``x`` for the subgradient family).
- start, message type ``train.fedmm_start`` (FedMM with ``start='mean_statistic'``
  and no ``init``): the broadcast of round ``-2`` carries ``θ_0``; every node
  answers with its full local statistic at ``θ_0`` (Identity wire format),
  which the server averages into ``Ŝ_0`` before the set-up exchange.  Under
  ``on_client_error='drop'`` a node whose answer is an error, missing, late or
  invalid is left out of ``Ŝ_0`` (μ re-weighted over the others) and listed in
  ``history.initial["dropped"]`` / ``["drop_reasons"]``; the run fails only
  when no node answers.
- end, message type ``query.fedmm_state`` (only for an algorithm whose History
  holds the clients' final state, ``remote_finish_needs_clients``: FedMLS's
  ``z_clients``): every node answers with its last accepted client state in
  an ``ArrayRecord`` ``"fedmm.state"``.
- checkpoints (``FedMMStrategy.run(..., checkpoint_path=...)``): the config
  says ``send-state = True``, and every answer to the set-up exchange and to a
  round also carries the client's state after it (``client_state``) in an
  ``ArrayRecord`` ``"fedmm.state"``; the server keeps the state of the
  payloads it aggregated (the node's accepted state), so a checkpoint is
  written on the server without asking the nodes.  A reply without it is
  malformed (the client is dropped).
- resume, message type ``train.fedmm_restore`` (``run(..., resume=...)``):
  every client whose state the checkpoint holds gets it in an ``ArrayRecord``
  ``"fedmm.state"`` and stores it as its accepted state under the new
  strategy's token; it answers with an empty payload in round ``-3``
  (``RESTORE_ROUND``).  Every such client must answer.

Client state.  The client's state as arrays (``client_state(client).to_arrays()``: ``V_{t,i}``
and the SPIDER memory, Scaffold's ``c_i``, the subgradient family's random
streams, ...) lives in ``context.state.array_records["fedmm"]`` and is put
back into the freshly built client of each message (``client_state_from_arrays``, ``restore_client``).
A client's update is first stored as *pending* for round ``t``; it becomes the client's state only when the
server's next message to it says that the round-``t`` payload was aggregated
(``accepted-round == t``).  A payload lost on the way, a reply after the
timeout or a client error therefore leave ``V_{t,i}`` and the server's
``V_t = Σ μ_i V_{t,i}`` consistent: the client is *dropped* for that round,
exactly as an inactive client of Algorithm 2 (lines 10-11), and listed in the
History's ``dropped`` field with the reason in ``drop_reasons`` (the fault
policy of :class:`fedmm.runtime.LocalRuntime`; ``on_client_error='raise'``
propagates instead).  The state is tagged with the strategy's token: state
left by another strategy of the same Flower run (a ServerApp that runs
several strategies in turn) is ignored.

Checkpoints and resume.  :meth:`FedMMStrategy.run` writes a
:class:`fedmm.federation.Checkpoint` every ``checkpoint_every`` rounds and
when the run ends with an error or an interrupt (``exc.checkpoint``), and
continues a run from one (``resume=``) with the History of the uninterrupted
run bit for bit.  The checkpoint holds the server's state, every client's
accepted ``client_state`` (sent up with the payloads, see above) and the
History of the completed rounds; a resumed strategy sends each client its
state back (``train.fedmm_restore``) and skips the start and set-up
exchanges.  Its fingerprint ties it to the run: the algorithm and its
configuration, the seed, the number of clients, the nodes' data descriptions,
``init``, ``init_datas``, ``public_data`` and whether an ``objective`` is
evaluated (``runtime = "flower"``: a Flower checkpoint resumes on Flower, not
in process, since its client states are the nodes' ``client_state``).

Node IDs are kept as Python ints (never NumPy: 64-bit IDs would become floats).
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"fedmm.runtime.flower needs Flower: pip install 'fedmm[flower]' (flwr>=1.41,<1.42) ({exc})"
    ) from exc

from fedmm._validation import check_count, check_in, check_int, check_real, check_seed
from fedmm.federation.checkpoint import Checkpoint, CheckpointWriter, data_digest, import_arrays
from fedmm.federation.local import CLIENT_ERROR_POLICIES
from fedmm.history import History
from fedmm.protocols import RemoteAlgorithm
from fedmm.runtime.local import record_initial, record_start_drops, round_record, run_monitor, warn_all_dropped

__all__ = ["FedMMStrategy", "client_app", "RemoteAlgorithm", "remote_algorithm", "PAYLOAD_STYPE", "STATE_KEY",
           "START_ROUND", "RESTORE_ROUND", "payload_array", "payload_bytes"]

#: ``stype`` of the Array that carries a client's payload bytes.
PAYLOAD_STYPE = "fedmm/payload-v1"
#: Key of the client's state in ``context.state.array_records``.
STATE_KEY = "fedmm"
#: The round index of the start exchange in ``errors`` and in the start replies (the set-up exchange is ``-1``).
START_ROUND = -2
#: The round index of the restore exchange of a resumed run (its replies and ``errors``).
RESTORE_ROUND = -3
#: The members of :class:`fedmm.protocols.RemoteAlgorithm` (named in the refusal of an object without them).
_REMOTE_MEMBERS = ("name", "remote_config", "describe_data", "remote_server", "remote_client", "setup_exchange",
                   "start_exchange", "start_message", "start_reply", "restart_server", "broadcast_layout",
                   "broadcast_to_arrays", "broadcast_from_arrays", "client_state", "client_state_from_arrays",
                   "restore_client", "estimate",
                   "remote_finish_needs_clients", "remote_finish")
_BROADCAST = "fedmm.broadcast"
_CONFIG = "fedmm.config"
_PAYLOAD = "fedmm.payload"
_REPLY = "fedmm.reply"
_DESCRIPTION = "fedmm.hello"
_HELLO = "query.fedmm_hello"
_SETUP = "train.fedmm_setup"
_START = "train.fedmm_start"
_FINAL = "query.fedmm_state"
_RESTORE = "train.fedmm_restore"
_SEND_STATE = "send-state"
_STATE = "fedmm.state"
_TRAIN = "train"
_PENDING = "pending."
_N_SAMPLES = "n-samples"
_TOKEN = "strategy-token"


# --------------------------------------------------------------------------- wire helpers
def payload_array(payload: bytes) -> Array:
    """Wrap payload bytes as ``Array(dtype="uint8", shape=(n,), stype=PAYLOAD_STYPE, data=payload)``."""
    payload = bytes(payload)
    return Array(dtype="uint8", shape=(len(payload),), stype=PAYLOAD_STYPE, data=payload)


def payload_bytes(array: Array) -> bytes:
    """The payload bytes of an Array made by :func:`payload_array` (validated)."""
    if not isinstance(array, Array):
        raise TypeError(f"Expected a flwr Array, got {type(array).__name__}")
    if array.stype != PAYLOAD_STYPE or array.dtype != "uint8" or len(array.shape) != 1:
        raise ValueError(f"Expected a uint8 vector Array with stype {PAYLOAD_STYPE!r}, "
                         f"got dtype={array.dtype!r}, shape={array.shape}, stype={array.stype!r}")
    data = bytes(array.data)
    if len(data) != array.shape[0]:
        raise ValueError(f"Payload Array declares {array.shape[0]} bytes but holds {len(data)}")
    return data


def _arrays_record(arrays: Sequence[np.ndarray]) -> ArrayRecord:
    """A broadcast's arrays under the keys ``"0"``, ``"1"``, ..."""
    return ArrayRecord({str(k): Array(np.ascontiguousarray(a)) for k, a in enumerate(arrays)})


def _record_arrays(record: ArrayRecord) -> list[np.ndarray]:
    """Inverse of :func:`_arrays_record`."""
    n = len(record)
    if sorted(record) != sorted(str(k) for k in range(n)):
        raise ValueError(f"Expected broadcast arrays keyed '0'..'{n - 1}', got {sorted(record)}")
    return [record[str(k)].numpy() for k in range(n)]


def _last_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of ``text`` (at most ``limit`` characters), prefixed as ``text`` was."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if len(lines) <= 1:
        return str(text)[:limit]
    prefix = lines[0].split(":", 1)[0] + ": " if ":" in lines[0] else ""
    return (prefix + lines[-1])[:limit]


# --------------------------------------------------------------------------- the algorithm's side
def remote_algorithm(algorithm: Any) -> RemoteAlgorithm:
    """``algorithm`` itself, checked to implement :class:`fedmm.protocols.RemoteAlgorithm`.

    Every algorithm of :mod:`fedmm.algorithms` implements it; a user's
    algorithm may too.  Nothing is adapted or probed here: the strategy and
    the ClientApp call the protocol's members and nothing else.

    Raises
    ------
    TypeError
        When ``algorithm`` lacks a member of the protocol (the message names it).
    """
    if isinstance(algorithm, RemoteAlgorithm):
        return algorithm
    missing = [m for m in _REMOTE_MEMBERS if m not in dir(algorithm)]
    raise TypeError(f"Expected 'algorithm' to implement fedmm.protocols.RemoteAlgorithm (a fedmm algorithm such as "
                    f"FedMM, FedMMOT, FedAdam, FedMLS, FedAvg, Scaffold, Scaffnew), got {type(algorithm).__name__}, "
                    f"which lacks {missing}")


# --------------------------------------------------------------------------- server
class FedMMStrategy(Strategy):
    """A Flower Message-API strategy that runs the server of any fedmm algorithm (FedMM, FedMM-OT, FedAdam,
    FedMLS, FedAvg, Scaffold, Scaffnew, or a user's :class:`fedmm.protocols.RemoteAlgorithm`).

    Parameters
    ----------
    algorithm : RemoteAlgorithm
        The algorithm's configuration (model or transport problem,
        participation, compressor, steps, ...); the same object the clients
        are built from.  Anything that does not implement
        :class:`fedmm.protocols.RemoteAlgorithm` is refused with a
        ``TypeError``, and so is a configuration whose ``remote_config``
        refuses to run apart.
    n_clients : int
        Nodes to wait for; their ``partition-id`` must be ``0..n_clients-1``.
    seed : int
        Run seed (server sampling of its own, per-client streams); with the
        same seed and ``init`` the History equals ``algorithm.run(datas, ...)``.
    init : optional
        FedMM: ``Ŝ_0``, ndarray of shape (q,).  Default: the algorithm's
        ``start``.  With ``'model'``, ``model.init_statistic(init_datas, rng)``
        with the generator ``FedMM.run`` uses (``init_datas`` default: no
        data, which suits models whose initialization does not look at the
        data, e.g. dictionary learning); with ``'mean_statistic'``, that
        statistic gives ``θ_0`` and a start exchange (every client must
        answer) gives ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))``, the numbers of
        ``FedMM.run`` bit for bit.  FedMM-OT, FedAdam: ``(ω_0, θ_0)``; default
        ``model.init`` on the run's initialization stream, as their ``run``.
        FedAvg, Scaffold, Scaffnew: ``x_0`` (default zeros); FedMLS takes
        none (its clients start at ``x_0 = 0`` too).
    init_datas : list of client data, optional
        FedMM only: data the server may use for ``init_statistic`` (public or pilot data).
    public_data : optional
        Data every party holds: FedMM-OT and FedAdam need the public target
        samples ``(M, d)`` here (and in :func:`client_app`); FedMM takes none.
    objective : callable, optional
        Evaluated on the server after each round on the current estimate
        (the algorithm's ``estimate``; FedMM: ``θ``; FedMM-OT, FedAdam: the
        :class:`~fedmm.models.TransportMap`; the subgradient family: ``x``)
        and recorded as ``objective``.
    wait_nodes : float
        Seconds to wait for ``n_clients`` nodes to connect.
    on_client_error : {'drop', 'raise'}
        A client whose reply is an error (its ClientApp raised), missing or
        late (``timeout`` of :meth:`run`), malformed, or whose payload fails
        the server's validation (wrong length, non-finite values, a corrupted
        payload) is *dropped* for that round: left out of the aggregation,
        its ``V_{t,i}`` unchanged (the pending update is not confirmed), the
        record's ``dropped`` and ``drop_reasons`` say who and why, and the
        run goes on.  ``'raise'`` raises instead (``RuntimeError`` for an
        error reply, ``TimeoutError`` for a missing one, the server's
        ``ValueError`` for an invalid payload), out of :meth:`run`.  Every
        family's server drops a client this way, as in process.

    Notes
    -----
    A run is resumable: :meth:`run` writes checkpoints (``checkpoint_every``,
    ``checkpoint_path``; on an error or interrupt, ``exc.checkpoint``) and a
    new strategy with the same arguments continues one (``resume``) with the
    History of the uninterrupted run bit for bit, for every family.  The
    clients' state moves through the contract's ``client_state`` and
    ``restore_client``, as between the rounds of a run.

    Attributes
    ----------
    history : History
        Filled by :meth:`run`, one record per round with the fields of the
        in-process runtime (``dropped`` lists clients whose reply was
        missing, late, an error or invalid; ``drop_reasons`` why).
    remote : RemoteAlgorithm
        The algorithm (checked by :func:`remote_algorithm`).
    server : server party of the algorithm
    errors : list of (round, partition id or node id, str)
    token : str
        Random hex string that tags the clients' state with this strategy.
    """

    def __init__(self, algorithm: Any, n_clients: int, *, seed: int = 0, init: Any = None,
                 init_datas: Sequence[Any] | None = None, public_data: Any = None,
                 objective: Callable[[Any], float] | None = None, wait_nodes: float = 120.0,
                 on_client_error: str = "drop") -> None:
        self.remote = remote_algorithm(algorithm)
        config = self.remote.remote_config()  # refuses a configuration that cannot run apart
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError("Expected 'seed' to be an int for Flower (it travels as a decimal string)")
        check_seed(seed)  # non-negative
        seed = int(seed)
        self.algorithm = algorithm
        self.n_clients = check_int(n_clients, "n_clients", low=1)
        if objective is not None and not callable(objective):
            raise TypeError(f"Expected 'objective' to be callable, got {type(objective).__name__}")
        self.seed = seed
        self.init = init
        self._descriptions: list[Mapping[str, np.ndarray]] = []  # every node's describe_data, by partition
        self.init_datas = init_datas
        self.public_data = public_data
        self.objective = objective
        self.wait_nodes = check_real(wait_nodes, "wait_nodes", low=0.0, low_open=True)
        self.on_client_error = check_in(on_client_error, "on_client_error", CLIENT_ERROR_POLICIES)
        self._timeout = 0.0
        self.history = History(self.remote.name, {**config, "seed": seed,
                                                   "n_clients": self.n_clients, "runtime": "flower"})
        self.server: Any = None
        self.errors: list[tuple[int, int, str]] = []
        self.node_of: dict[int, int] = {}  # partition id -> node id (Python ints)
        self._partition_of: dict[int, int] = {}
        self._accepted_round: dict[int, int] = {}
        self._layout = ""
        #: Tags the clients' state with this strategy (not the numbers: only which state belongs to the run).
        self.token = uuid.uuid4().hex
        self._round: dict[str, Any] = {}
        self._elapsed = 0.0
        self._first = 0  # the first round this strategy runs (a resumed run's checkpoint's next_round)
        # checkpoints: whether clients send their state up, and the state after the last completed round
        self._send_state = False
        self._client_states: dict[int, dict[str, np.ndarray]] = {}  # partition id -> accepted client_state
        self._committed: tuple[int, Any] = (0, {})  # (completed rounds, server.export_state())
        self._writer: CheckpointWriter | None = None
        self._fingerprint: dict[str, Any] | None = None

    # -- start-up -----------------------------------------------------------
    def _config(self, index: int, **extra: Any) -> ConfigRecord:
        return ConfigRecord({"index": index, "n-clients": self.n_clients, "seed": str(self.seed),
                             "layout": self._layout, "strategy-token": self.token,
                             "accepted-round": self._accepted_round.get(index, -1),
                             _SEND_STATE: self._send_state, **extra})

    def _broadcast_message(self, message: Any, index: int, message_type: str, t: int, **kwargs: Any) -> Message:
        record = _arrays_record(self.remote.broadcast_to_arrays(message))
        return Message(RecordDict({_BROADCAST: record, _CONFIG: self._config(index, round=t)}), self.node_of[index],
                       message_type, **kwargs)

    def _hello(self, grid: Grid, timeout: float) -> dict[int, dict[str, np.ndarray]]:
        deadline = time.monotonic() + self.wait_nodes
        node_ids = [int(n) for n in grid.get_node_ids()]
        while len(node_ids) < self.n_clients and time.monotonic() < deadline:
            time.sleep(0.5)
            node_ids = [int(n) for n in grid.get_node_ids()]
        if len(node_ids) < self.n_clients:
            raise RuntimeError(f"Expected {self.n_clients} Flower nodes within {self.wait_nodes} s, "
                               f"got {len(node_ids)}")
        messages = [Message(RecordDict({}), node_id, _HELLO) for node_id in node_ids]
        replies = {}
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                self.errors.append((-1, int(reply.metadata.src_node_id), str(reply.error.reason)))
                continue
            replies[int(reply.metadata.src_node_id)] = reply.content
        for node_id, content in replies.items():
            pid = int(content.config_records[_REPLY]["partition-id"])
            if not 0 <= pid < self.n_clients or pid in self.node_of:
                raise ValueError(f"Node {node_id} reported partition-id {pid}: expected distinct ids "
                                 f"in [0, {self.n_clients})")
            self.node_of[pid] = node_id
            self._partition_of[node_id] = pid
        missing = sorted(set(range(self.n_clients)) - set(self.node_of))
        if missing:
            raise RuntimeError(f"No Flower node answered for partition ids {missing}: {self.errors}")
        return {pid: {k: v.numpy() for k, v in replies[node].array_records[_DESCRIPTION].items()}
                for pid, node in self.node_of.items()}

    def _start_server(self, descriptions: dict[int, dict[str, np.ndarray]]) -> None:
        self._descriptions = [descriptions[i] for i in range(self.n_clients)]
        self.server = self.remote.remote_server(self.n_clients, descriptions=self._descriptions,
                                               seed=self.seed, init=self.init, init_datas=self.init_datas,
                                               public_data=self.public_data)
        self._layout = self.remote.broadcast_layout(self.server)

    def _start_exchange(self, grid: Grid, timeout: float) -> None:
        """The start exchange: the clients' answers to the start message rebuild the server
        (FedMM's ``start='mean_statistic'``: ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))``).

        Under ``on_client_error='drop'`` a client whose answer is an error,
        missing, late or invalid is left out of ``Ŝ_0`` (μ re-weighted over
        the others; ``history.initial["dropped"]`` and ``["drop_reasons"]``
        say who and why), as :meth:`fedmm.algorithms.FedMM.build` does in process.
        """
        message = self.remote.start_message(self.server)
        messages = [self._broadcast_message(message, pid, _START, START_ROUND) for pid in self.node_of]
        payloads, errors, _ = self._collect(grid.send_and_receive(messages, timeout=timeout), START_ROUND)
        reasons = {i: _last_line(reason) for _, i, reason in errors if 0 <= i < self.n_clients}
        for i in range(self.n_clients):
            if i not in payloads and i not in reasons:
                reasons[i] = f"timeout: no reply within {timeout:g} s"
        missing = sorted(set(range(self.n_clients)) - set(payloads))
        if missing and (self.on_client_error == "raise" or not payloads):
            raise RuntimeError(f"start='mean_statistic' needs {'every' if payloads else 'at least one'} client's "
                               f"statistic at θ_0; missing {missing}: {errors} (pass init= or build the FedMM "
                               "with start='model')")
        on_invalid = None
        if self.on_client_error == "drop":
            def on_invalid(i: int, reason: str) -> None:
                reasons[i] = f"invalid payload: {reason}"
                self.errors.append((START_ROUND, i, reasons[i]))

        # the fault policy's hook only under 'drop' (a RemoteAlgorithm written before it takes none otherwise)
        self.server = self.remote.restart_server(self.server, payloads, n_clients=self.n_clients,
                                                 descriptions=self._descriptions, seed=self.seed,
                                                 **({} if on_invalid is None else {"on_invalid": on_invalid}))
        record_start_drops(self.history, reasons)
        self.history.config["start_bytes_up"] = sum(len(b) for b in payloads.values())
        self.history.config["start_bytes_down"] = self.n_clients * message.nbytes

    def _setup_exchange(self, grid: Grid, timeout: float) -> None:
        setup = self.server.setup_message()
        messages = [self._broadcast_message(setup, pid, _SETUP, -1) for pid in self.node_of]
        payloads, errors, states = self._collect(grid.send_and_receive(messages, timeout=timeout), -1)
        if len(payloads) != self.n_clients:
            raise RuntimeError("The set-up exchange (e.g. control_variates='oracle') needs every client's answer; "
                               f"missing {sorted(set(range(self.n_clients)) - set(payloads))}: {errors}")
        self.server.setup_aggregate(payloads)
        for pid in payloads:
            self._accepted_round[pid] = -1
        self._client_states.update(states)
        self.history.config["setup_bytes_up"] = sum(len(b) for b in payloads.values())
        self.history.config["setup_bytes_down"] = self.n_clients * setup.nbytes

    def _collect(self, replies: Iterable[Message],
                 t: int) -> tuple[dict[int, bytes], list, dict[int, dict[str, np.ndarray]]]:
        """The payloads of the well-formed replies of round ``t``, the errors of the others, and the client
        states the replies carry (set-up and rounds, while checkpointing: a reply without one is malformed)."""
        payloads: dict[int, bytes] = {}
        states: dict[int, dict[str, np.ndarray]] = {}
        errors = []
        want_state = self._send_state and t >= -1
        for reply in replies:
            node_id = int(reply.metadata.src_node_id)
            pid = self._partition_of.get(node_id)
            try:
                if reply.has_error():
                    raise RuntimeError(f"client error: {reply.error.reason}")
                meta = reply.content.config_records[_REPLY]
                if pid is None or int(meta["partition-id"]) != pid or int(meta["round"]) != t:
                    raise ValueError(f"unexpected reply (partition {meta['partition-id']}, round {meta['round']})")
                payload = payload_bytes(reply.content.array_records[_PAYLOAD]["payload"])
                if want_state:
                    if _STATE not in reply.content.array_records:
                        raise ValueError("reply without the client's state (the run writes checkpoints)")
                    states[pid] = {k: v.numpy() for k, v in reply.content.array_records[_STATE].items()}
                payloads[pid] = payload
            except Exception as exc:  # a malformed or failed reply drops this client for the round
                errors.append((t, node_id if pid is None else pid, str(exc)))
        self.errors.extend(errors)
        return payloads, errors, states

    def run(self, grid: Grid, n_rounds: int, *, timeout: float = 600.0, resume: Any = None,
            checkpoint_every: int = 0, checkpoint_path: Any = None) -> History:
        """Start-up exchanges, then ``n_rounds`` rounds through :meth:`Strategy.start`.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
        n_rounds : int
        timeout : float
            Seconds to wait for replies each round (and for each start-up
            exchange); clients whose reply comes later are dropped.
        resume : Checkpoint or path, optional
            Continue the Flower run that wrote this
            :class:`fedmm.federation.Checkpoint` (or the file it was saved to)
            from its next round up to ``n_rounds``: after the hello, the
            server takes the checkpoint's state, every client whose state it
            holds gets that state back (``train.fedmm_restore``; each must
            answer), the start and set-up exchanges are skipped, and the
            History equals the uninterrupted run's bit for bit.  The run must
            be the same: algorithm and configuration, ``seed``, number of
            clients, the nodes' data descriptions, ``init``, ``init_datas``,
            ``public_data`` and whether ``objective`` is given; a checkpoint
            of another run (or of an in-process or Ray run) is refused with a
            ``ValueError`` naming what differs.
        checkpoint_every : int >= 0
            Write a checkpoint to ``checkpoint_path`` after every this many
            rounds (0: only when the run ends with an error or an interrupt).
        checkpoint_path : path-like, optional
            Where checkpoints go (atomic writes, :meth:`fedmm.federation.Checkpoint.save`).
            With it, every client sends its state up with its payload (not
            counted in ``bytes_up``, which stays the algorithm's), and an
            exception that ends the run once its rounds have begun
            (``KeyboardInterrupt``, a client error under
            ``on_client_error='raise'``, a failing ``objective``) carries
            ``exc.history`` (the completed rounds) and ``exc.checkpoint`` (the
            state after the last completed round, also written to
            ``checkpoint_path``).  Without it the clients send no state and
            the exception carries ``exc.history`` only.

        Raises
        ------
        ValueError
            ``checkpoint_every > 0`` without ``checkpoint_path``; ``n_rounds``
            below the rounds ``resume`` has completed; a ``resume`` of another
            run, or a file that is not an intact checkpoint.
        RuntimeError
            A client of a resumed run did not take its state back.
        """
        n_rounds = check_count(n_rounds, "n_rounds", low=0)
        self._timeout = check_real(timeout, "timeout", low=0.0, low_open=True)
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", low=0)
        if checkpoint_every and checkpoint_path is None:
            raise ValueError("Expected 'checkpoint_path' (where to write) with 'checkpoint_every' > 0")
        resumed = None
        if resume is not None:
            resumed = resume if isinstance(resume, Checkpoint) else Checkpoint.load(resume)
            if resumed.next_round > n_rounds:
                raise ValueError(f"Expected 'n_rounds' >= {resumed.next_round}, the rounds the checkpoint "
                                 f"has completed, got {n_rounds}")
        self._send_state = checkpoint_path is not None
        self._start_server(self._hello(grid, timeout))
        if resumed is not None or self._send_state:
            self._fingerprint = self.fingerprint()
        if resumed is not None:
            resumed.check_matches(self._fingerprint)
            self._resume(grid, timeout, resumed)
        else:
            if self.remote.start_exchange(self.init):
                self._start_exchange(grid, timeout)
            if self.remote.setup_exchange():
                self._setup_exchange(grid, timeout)
            else:  # e.g. V_0,i = 0 needs no exchange: each client sets it on its first round
                self.history.config["setup_bytes_up"] = 0
                self.history.config["setup_bytes_down"] = 0
            record_initial(self.history, None if self.objective is None else
                           (lambda: self.objective(self.remote.estimate(self.server))))
        if self._send_state:
            self._committed = (len(self.history.records), self.server.export_state())
            self._writer = CheckpointWriter(checkpoint_path, checkpoint_every, self._snapshot)
        try:
            self.start(grid, self._state_record(), num_rounds=int(n_rounds) - self._first, timeout=timeout)
        except (Exception, KeyboardInterrupt) as exc:
            exc.history = self.history  # the completed rounds, as the other runtimes
            if self._writer is not None:
                try:
                    exc.checkpoint = self._writer.write()
                except Exception as failure:  # e.g. the disk that failed the run: the run's own error goes on
                    exc.checkpoint = None
                    exc.add_note(f"fedmm: no checkpoint of the completed rounds ({type(failure).__name__}: "
                                 f"{failure})")
            raise
        states = None
        if self.remote.remote_finish_needs_clients():
            states = {i: self.remote.client_state_from_arrays(arrays)
                      for i, arrays in self._final_states(grid, timeout).items()}
        self.remote.remote_finish(self.server, self.history, states)
        warn_all_dropped(self.history, self._first)
        return self.history

    # -- checkpoints --------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """What ties a checkpoint to this run (known after the hello: it includes the nodes' data descriptions).

        The algorithm's name and :meth:`~fedmm.protocols.RemoteAlgorithm.remote_config`
        (without ``n_threads``), the seed, the number of clients,
        ``runtime = "flower"``, SHA-256 digests (:func:`fedmm.federation.data_digest`)
        of the nodes' descriptions, ``init``, ``init_datas`` and ``public_data``
        (the server never sees the clients' data), and whether an
        ``objective`` is evaluated (it adds record fields).
        """
        config = {k: v for k, v in self.remote.remote_config().items() if k != "n_threads"}
        return {"algorithm": self.remote.name, "config": config, "seed": self.seed, "n_clients": self.n_clients,
                "runtime": "flower", "descriptions": _digest(self._descriptions), "init": _digest(self.init),
                "init_datas": _digest(self.init_datas), "public_data": _digest(self.public_data),
                "objective": self.objective is not None}

    def _snapshot(self) -> Checkpoint:
        """The checkpoint of the state after the last completed round (a round that raised is not in it)."""
        completed, server_state = self._committed
        history = self.history.copy()
        history.records = history.records[:completed]
        return Checkpoint(fingerprint=self._fingerprint, next_round=completed, server_state=server_state,
                          client_states=[self._client_states.get(i, {}) for i in range(self.n_clients)],
                          history=history)

    def _resume(self, grid: Grid, timeout: float, resumed: Checkpoint) -> None:
        """The server, the History and the clients' states of a checkpoint (the clients' sent back to their nodes)."""
        import_arrays(self.server, resumed.server_state)
        self._layout = self.remote.broadcast_layout(self.server)
        self.history = resumed.history.copy()
        self._first = resumed.next_round
        self._elapsed = float(self.history.records[-1].get("wall_time", 0.0)) if self.history.records else 0.0
        self._client_states = {i: dict(state) for i, state in enumerate(resumed.client_states) if state}
        messages = [Message(RecordDict({_STATE: ArrayRecord({k: Array(np.array(v, order="C"))
                                                             for k, v in state.items()}),
                                        _CONFIG: self._config(pid, round=RESTORE_ROUND)}),
                            self.node_of[pid], _RESTORE)
                    for pid, state in self._client_states.items()]
        payloads, errors, _ = self._collect(grid.send_and_receive(messages, timeout=timeout), RESTORE_ROUND)
        missing = sorted(set(self._client_states) - set(payloads))
        if missing:
            raise RuntimeError(f"Resuming needs every client whose state the checkpoint holds to take it back; "
                               f"missing {missing}: {errors}")

    def _final_states(self, grid: Grid, timeout: float) -> dict[int, dict[str, np.ndarray]]:
        """Every client's last accepted state (``client_state``), for an algorithm whose History holds them."""
        messages = [Message(RecordDict({_CONFIG: self._config(pid)}), self.node_of[pid], _FINAL)
                    for pid in self.node_of]
        states: dict[int, dict[str, np.ndarray]] = {}
        errors = []
        for reply in grid.send_and_receive(messages, timeout=timeout):
            node_id = int(reply.metadata.src_node_id)
            pid = self._partition_of.get(node_id)
            if reply.has_error() or pid is None:
                errors.append((node_id if pid is None else pid,
                               str(reply.error.reason) if reply.has_error() else "unknown node"))
                continue
            states[pid] = {k: v.numpy() for k, v in reply.content.array_records[_STATE].items()}
        missing = sorted(set(range(self.n_clients)) - set(states))
        if missing:
            raise RuntimeError(f"{self.history.algorithm} needs every client's final state for its History; "
                               f"missing {missing}: {errors}")
        return states

    def _state_record(self) -> ArrayRecord:
        """The server's state (``export_state().to_arrays()``) for Flower's bookkeeping of the rounds."""
        state = self.server.export_state().to_arrays()
        return ArrayRecord({k: Array(np.array(v, order="C")) for k, v in state.items()})

    # -- Strategy interface -----------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Select the round's clients (the server's own seeded sampling) and address their nodes."""
        t = server_round - 1 + self._first
        start = time.perf_counter()
        ids = self.server.select(t)
        message = self.server.broadcast(t)
        self._round = {"t": t, "ids": ids, "message": message, "start": start}
        return [self._broadcast_message(message, i, _TRAIN, t, group_id=str(t)) for i in ids]

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decode the payloads, drop failed, missing, late and invalid clients, and take the server's step."""
        t, ids, message = self._round["t"], self._round["ids"], self._round["message"]
        payloads, errors, states = self._collect(replies, t)
        # drop_reasons get the last line of a (possibly multi-line, traceback-carrying) reason; errors the whole
        reasons = {i: _last_line(reason) for _, i, reason in errors if i in ids}
        for i in ids:
            if i not in payloads and i not in reasons:
                reasons[i] = f"timeout: no reply within {self._timeout:g} s"
        if self.on_client_error == "raise":
            for i in ids:
                if i in reasons:
                    kind = TimeoutError if reasons[i].startswith("timeout") else RuntimeError
                    raise kind(f"client {i} failed in round {t}: {reasons[i]}")
            server_record = self.server.aggregate(t, payloads)
        else:
            def on_invalid(i: int, reason: str) -> None:
                reasons[i] = f"invalid payload: {reason}"
                self.errors.append((t, i, reasons[i]))

            server_record = self.server.aggregate(t, payloads, on_invalid=on_invalid)
        for i in list(payloads):
            if i in reasons:  # invalid: not aggregated, its pending update is not confirmed
                del payloads[i]
            else:
                self._accepted_round[i] = t
        ordered = [payloads.get(i) for i in ids]
        self._elapsed += time.perf_counter() - self._round["start"]
        record = round_record(t, server_record, ids, ordered, message, self._elapsed, reasons)
        record.update(run_monitor(self._monitor, t, record["gamma"], self.history, due=self.objective is not None))
        self.history.append(**record)
        if self._writer is not None:  # the round is complete: it is what a checkpoint holds from now on
            self._client_states.update({i: states[i] for i in payloads})
            self._committed = (len(self.history.records), self.server.export_state())
            self._writer(t)
        # the server's scalar record fields (FedMM: gamma, E_s, E_ps; FedMM-OT: gamma, E_omega, E_theta)
        metrics = MetricRecord({**{k: float(v) for k, v in server_record.items()
                                   if isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)},
                                "n_dropped": len(record["dropped"])})
        return self._state_record(), metrics

    def _monitor(self, t: int, gamma: float) -> dict:
        """The round's monitored fields: ``objective`` at the server's estimate when an objective was given."""
        if self.objective is None:
            return {}
        return {"objective": float(self.objective(self.remote.estimate(self.server)))}

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """No federated evaluation round (pass ``objective=`` for a server-side one)."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Nothing to aggregate."""
        return None

    def summary(self) -> None:
        """Log nothing beyond Flower's own start-up lines."""


# --------------------------------------------------------------------------- client
def _digest(value: Any) -> str:
    """SHA-256 of ``value`` (:func:`fedmm.federation.data_digest`), or its type's name when it holds
    something other than arrays, numbers, strings and containers of them."""
    try:
        return data_digest([value])
    except TypeError:
        return f"<{type(value).__name__}>"


def _load_state(context: Context, token: str) -> dict[str, np.ndarray]:
    """The node's stored client state, or {} when there is none or another strategy left it."""
    record = context.state.array_records.get(STATE_KEY)
    if record is None or _TOKEN not in record or bytes(record[_TOKEN].numpy()).decode() != token:
        return {}
    return {k: record[k].numpy() for k in record if k != _TOKEN}


def _save_state(context: Context, state: dict[str, np.ndarray], token: str) -> None:
    arrays = {k: Array(np.array(v, order="C")) for k, v in state.items()}
    arrays[_TOKEN] = Array(np.frombuffer(token.encode(), dtype=np.uint8).copy())
    context.state.array_records[STATE_KEY] = ArrayRecord(arrays)


def _partition_id(context: Context) -> int:
    node_config = context.node_config
    if "partition-id" not in node_config:
        raise KeyError("fedmm ClientApp: the node has no 'partition-id' in its node config "
                       "(start flower-supernode with --node-config \"partition-id=i num-partitions=n\")")
    return int(node_config["partition-id"])


def _accepted_state(context: Context, token: str, accepted: int) -> dict[str, np.ndarray]:
    """The node's client state as the server knows it: the pending update of round ``accepted`` when the
    server aggregated it, else the state committed before it ({} when there is none)."""
    stored = _load_state(context, token)
    committed = {k: v for k, v in stored.items() if not k.startswith(_PENDING)}
    pending = {k[len(_PENDING):]: v for k, v in stored.items() if k.startswith(_PENDING)}
    if pending and int(pending.pop("t")[0]) == accepted:
        return pending  # the server aggregated that round's payload: the update stands
    return committed


def client_app(algorithm: Any, load_data: Callable[[int, Context], Any], *, public_data: Any = None) -> ClientApp:
    """A Flower ClientApp that runs a client of a fedmm algorithm on this node's data.

    Parameters
    ----------
    algorithm : RemoteAlgorithm, or callable(context) -> RemoteAlgorithm
        The same configuration as the server's (a callable is called on
        every message, e.g. to read ``context.run_config``); it must
        implement :class:`fedmm.protocols.RemoteAlgorithm` (every fedmm
        algorithm does), else the message fails with a ``TypeError`` naming it.
    load_data : callable(partition_id, context) -> client data
        The node's data (in the model's format; FedMM-OT, FedAdam: its
        ``(N_i, d)`` source samples; the subgradient family: its ``(A, y)``)
        for its ``partition-id``.
    public_data : object or callable(context) -> object, optional
        Data every party holds: the public target samples ``(M, d)`` of
        FedMM-OT and FedAdam (the same as the strategy's ``public_data``).

    Returns
    -------
    flwr.clientapp.ClientApp
        Handles ``query.fedmm_hello``, ``train.fedmm_start``, ``train.fedmm_setup``, ``train``,
        ``train.fedmm_restore`` and ``query.fedmm_state``.
    """
    app = ClientApp()

    def get_remote(context: Context) -> RemoteAlgorithm:
        if isinstance(algorithm, RemoteAlgorithm) or not callable(algorithm):
            return remote_algorithm(algorithm)
        return remote_algorithm(algorithm(context))

    def get_public(context: Context) -> Any:
        return public_data(context) if callable(public_data) else public_data

    def build(msg: Message, context: Context) -> tuple[RemoteAlgorithm, Any, Any, ConfigRecord]:
        remote = get_remote(context)
        config = msg.content.config_records[_CONFIG]
        pid = _partition_id(context)
        if int(config["index"]) != pid:
            raise ValueError(f"Message for client {config['index']} reached the node of partition {pid}")
        message = remote.broadcast_from_arrays(_record_arrays(msg.content.array_records[_BROADCAST]),
                                               str(config["layout"]))
        client = remote.remote_client(pid, load_data(pid, context), n_clients=int(config["n-clients"]),
                                      seed=int(str(config["seed"])), public_data=get_public(context))
        return remote, client, message, config

    def reply(msg: Message, payload: bytes, pid: int, t: int,
              state: Mapping[str, np.ndarray] | None = None) -> Message:
        content = RecordDict({_PAYLOAD: ArrayRecord({"payload": payload_array(payload)}),
                              _REPLY: ConfigRecord({"partition-id": pid, "round": t})})
        if state is not None and bool(msg.content.config_records[_CONFIG].get(_SEND_STATE, False)):
            # the server writes checkpoints: it keeps the state of the payloads it aggregates
            content.array_records[_STATE] = ArrayRecord({k: Array(np.array(v, order="C")) for k, v in state.items()})
        return Message(content, reply_to=msg)

    @app.query("fedmm_hello")
    def hello(msg: Message, context: Context) -> Message:
        remote = get_remote(context)
        pid = _partition_id(context)
        description = remote.describe_data(load_data(pid, context), pid)
        content = RecordDict({_REPLY: ConfigRecord({"partition-id": pid}),
                              _DESCRIPTION: ArrayRecord({k: Array(np.ascontiguousarray(v))
                                                         for k, v in description.items()})})
        return Message(content, reply_to=msg)

    @app.train("fedmm_start")
    def start(msg: Message, context: Context) -> Message:
        remote, client, message, _ = build(msg, context)
        return reply(msg, remote.start_reply(client, message), _partition_id(context), START_ROUND)

    @app.train("fedmm_setup")
    def setup(msg: Message, context: Context) -> Message:
        remote, client, message, config = build(msg, context)
        payload = client.setup(message)
        state = remote.client_state(client).to_arrays()
        _save_state(context, state, str(config["strategy-token"]))
        return reply(msg, payload, _partition_id(context), -1, state)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        remote, client, message, config = build(msg, context)
        token, t = str(config["strategy-token"]), int(config["round"])
        committed = _accepted_state(context, token, int(config["accepted-round"]))
        if committed:
            remote.restore_client(client, remote.client_state_from_arrays(committed), message)
        elif remote.setup_exchange():
            raise RuntimeError("This node has no client state (e.g. V_0,i; it was lost): "
                               "this configuration needs the set-up exchange (control_variates='oracle')")
        else:
            client.setup(message)  # e.g. V_0,i = 0: no set-up exchange was needed
        payload = client.step(message)
        state = remote.client_state(client).to_arrays()
        new_state = {**committed, **{_PENDING + k: v for k, v in state.items()},
                     _PENDING + "t": np.array([t], dtype=np.int64)}
        _save_state(context, new_state, token)
        return reply(msg, payload, _partition_id(context), t, state)

    @app.train("fedmm_restore")
    def restore(msg: Message, context: Context) -> Message:
        # a resumed run: the checkpoint's state of this client becomes its accepted state under the new token
        config = msg.content.config_records[_CONFIG]
        pid = _partition_id(context)
        if int(config["index"]) != pid:
            raise ValueError(f"Message for client {config['index']} reached the node of partition {pid}")
        state = {k: v.numpy() for k, v in msg.content.array_records[_STATE].items()}
        _save_state(context, state, str(config["strategy-token"]))
        return reply(msg, b"", pid, RESTORE_ROUND)

    @app.query("fedmm_state")
    def final_state(msg: Message, context: Context) -> Message:
        config = msg.content.config_records[_CONFIG]
        state = _accepted_state(context, str(config["strategy-token"]), int(config["accepted-round"]))
        if not state:
            # no round of this client was ever aggregated (it failed or was dropped every time): its state is
            # the one it was built with, as the in-process client that never stepped
            remote, pid = get_remote(context), _partition_id(context)
            client = remote.remote_client(pid, load_data(pid, context), n_clients=int(config["n-clients"]),
                                          seed=int(str(config["seed"])), public_data=get_public(context))
            state = remote.client_state(client).to_arrays()
        content = RecordDict({_REPLY: ConfigRecord({"partition-id": _partition_id(context)}),
                              _STATE: ArrayRecord({k: Array(np.array(v, order="C")) for k, v in state.items()})})
        return Message(content, reply_to=msg)

    return app
