# SPDX-License-Identifier: BSD-3-Clause
"""FedMM on Flower (Message API, ``flwr>=1.41,<1.42``): a server strategy and a ClientApp factory.

The server side (:class:`FedMMStrategy`) runs a :class:`fedmm.algorithms.Server`;
each Flower node runs a :class:`fedmm.algorithms.Client` built by the
ClientApp of :func:`client_app`.  Nothing mathematical happens here: the
strategy moves the server's :class:`~fedmm.algorithms.Broadcast` down as
float64 arrays and the clients' compressed payloads up as bytes.

Wire conventions (``fedmm/payload-v1``):

- down, message type ``train`` (``train.fedmm_setup`` for the initial control
  variates): an ``ArrayRecord`` ``"fedmm.broadcast"`` with arrays ``t``
  (int64, shape (1,)), ``statistic`` (``Ŝ_t``), ``theta`` (``θ_t`` flattened by
  ``model.theta_vector``), ``coins`` (Algorithm 4) and a ``ConfigRecord``
  ``"fedmm.config"`` with the client's ``index``, ``n-clients``, the run
  ``seed`` (decimal string), the parameter's structure and ``accepted-round``
  (see below);
- up: an ``ArrayRecord`` ``"fedmm.payload"`` holding one
  ``Array(dtype="uint8", shape=(n,), stype="fedmm/payload-v1", data=payload)``
  (the compressor's self-describing bytes, ``docs/wire-format.md``) and a
  ``ConfigRecord`` ``"fedmm.reply"`` with the client's ``partition-id`` and round.
- start-up, message type ``query.fedmm_hello``: every node answers with its
  ``partition-id`` (from ``context.node_config``), its number of samples
  (the default weights ``μ_i = N_i/N``) and, for models with
  ``local_moments``/``set_global_moments`` (the Gaussian mixture), its local moments.
- start, message type ``train.fedmm_start`` (``start='mean_statistic'`` without
  ``init``): the broadcast of round ``-2`` carries ``θ_0``; every node answers
  with its full local statistic at ``θ_0`` (Identity wire format), which the
  server averages into ``Ŝ_0`` before the set-up exchange.

Client state.  ``V_{t,i}`` (and the SPIDER memory) live in
``context.state.array_records["fedmm"]``.  A client's update is first stored
as *pending* for round ``t``; it becomes the client's state only when the
server's next message to it says that the round-``t`` payload was aggregated
(``accepted-round == t``).  A payload lost on the way, a reply after the
timeout or a client error therefore leave ``V_{t,i}`` and the server's
``V_t = Σ μ_i V_{t,i}`` consistent: the client is *dropped* for that round,
exactly as an inactive client of Algorithm 2 (lines 10-11), and listed in the
History's ``dropped`` field with the reason in ``drop_reasons`` (the fault
policy of :class:`fedmm.runtime.LocalRuntime`; ``on_client_error='raise'``
propagates instead).

Node IDs are kept as Python ints (never NumPy: 64-bit IDs would become floats).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Sequence

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

from fedmm.algorithms import Broadcast, FedMM
from fedmm.algorithms.federated import START_ROUND
from fedmm._validation import check_in
from fedmm.algorithms._random import check_seed, init_generator
from fedmm.engine.local import CLIENT_ERROR_POLICIES
from fedmm.history import History
from fedmm.runtime.local import record_initial, round_record, run_monitor

__all__ = ["FedMMStrategy", "client_app", "PAYLOAD_STYPE", "STATE_KEY", "payload_array", "payload_bytes"]

#: ``stype`` of the Array that carries a client's payload bytes.
PAYLOAD_STYPE = "fedmm/payload-v1"
#: Key of the client's state in ``context.state.array_records``.
STATE_KEY = "fedmm"
_BROADCAST = "fedmm.broadcast"
_CONFIG = "fedmm.config"
_PAYLOAD = "fedmm.payload"
_REPLY = "fedmm.reply"
_MOMENTS = "fedmm.moments"
_HELLO = "query.fedmm_hello"
_SETUP = "train.fedmm_setup"
_START = "train.fedmm_start"
_TRAIN = "train"
_PENDING = "pending."
_BROADCAST_KEYS = ("t", "statistic", "theta", "coins")


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


def _theta_structure(theta: Any) -> str:
    """The parameter's container structure (what ``model.theta_from_vector`` needs of ``like``)."""
    def shape(x: Any) -> str:
        return ",".join(str(d) for d in np.shape(x))

    if isinstance(theta, dict):
        return "dict:" + ";".join(f"{k}={shape(theta[k])}" for k in sorted(theta))
    if isinstance(theta, (tuple, list)) and not hasattr(theta, "_fields"):
        return "seq:" + ";".join(shape(x) for x in theta)
    if isinstance(theta, (np.ndarray, np.generic, float, int)):
        return "array:" + shape(theta)
    return "model:"  # a model-specific parameter object; its theta_from_vector needs no template


def _theta_template(structure: str) -> Any:
    """A stand-in ``like`` for ``model.theta_from_vector`` built from :func:`_theta_structure`."""
    kind, _, body = structure.partition(":")

    def empty(spec: str) -> np.ndarray:
        return np.empty(tuple(int(d) for d in spec.split(",") if d), dtype=np.float64)

    if kind == "dict":
        return {k: empty(v) for k, v in (item.split("=") for item in body.split(";"))} if body else {}
    if kind == "seq":
        return tuple(empty(s) for s in body.split(";")) if body else ()
    if kind == "array":
        return empty(body)
    if kind == "model":
        return None
    raise ValueError(f"Unknown parameter structure {structure!r} in a fedmm message")


def _broadcast_record(message: Broadcast) -> ArrayRecord:
    record = ArrayRecord()
    for key, arr in zip(_BROADCAST_KEYS, message.to_arrays()):
        record[key] = Array(np.ascontiguousarray(arr))
    return record


def _last_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of ``text`` (at most ``limit`` characters), prefixed as ``text`` was."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if len(lines) <= 1:
        return str(text)[:limit]
    prefix = lines[0].split(":", 1)[0] + ": " if ":" in lines[0] else ""
    return (prefix + lines[-1])[:limit]


# --------------------------------------------------------------------------- server
class FedMMStrategy(Strategy):
    """A Flower Message-API strategy that runs the FedMM server (Algorithm 2 / 4).

    Parameters
    ----------
    algorithm : FedMM
        The algorithm's configuration (model, participation, compressor,
        alpha, step, oracle, control variates, ...); the same object the
        clients are built from.  Only the surrogate-space FedMM is supported
        (clients need ``Ŝ_t`` to rebuild ``θ_t``'s structure).
    n_clients : int
        Nodes to wait for; their ``partition-id`` must be ``0..n_clients-1``.
    seed : int
        Run seed (server sampling of its own, per-client streams); with the
        same seed and ``init`` the History equals ``algorithm.run(datas, ...)``.
    init : ndarray of shape (q,), optional
        ``Ŝ_0``.  Default: the algorithm's ``start``.  With ``'model'``,
        ``model.init_statistic(init_datas, rng)`` with the generator
        ``FedMM.run`` uses (``init_datas`` default: no data, which suits
        models whose initialization does not look at the data, e.g.
        dictionary learning); with ``'mean_statistic'``, that statistic
        gives ``θ_0`` and a start exchange (every client must answer) gives
        ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))``, the numbers of ``FedMM.run`` bit for bit.
    init_datas : list of client data, optional
        Data the server may use for ``init_statistic`` (public or pilot data).
    objective : callable(theta) -> float, optional
        Evaluated on the server after each round (e.g. on held-out data) and
        recorded as ``objective``.
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
        ``ValueError`` for an invalid payload), out of :meth:`run`.

    Attributes
    ----------
    history : History
        Filled by :meth:`run`, one record per round with the fields of the
        in-process runtime (``dropped`` lists clients whose reply was
        missing, late, an error or invalid; ``drop_reasons`` why).
    server : fedmm.algorithms.Server
    errors : list of (round, partition id or node id, str)
    """

    def __init__(self, algorithm: FedMM, n_clients: int, *, seed: int = 0, init: Any = None,
                 init_datas: Sequence[Any] | None = None, objective: Callable[[Any], float] | None = None,
                 wait_nodes: float = 120.0, on_client_error: str = "drop") -> None:
        if not isinstance(algorithm, FedMM) or algorithm.space != "statistic":
            raise TypeError("Expected 'algorithm' to be a fedmm FedMM instance (surrogate-space aggregation; "
                            f"use fedmm.runtime.RayRuntime for the Θ-space baseline), got {type(algorithm).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError("Expected 'seed' to be an int for Flower (it travels as a decimal string)")
        check_seed(seed)  # non-negative
        seed = int(seed)
        self.algorithm = algorithm
        self.n_clients = int(n_clients)
        if self.n_clients < 1:
            raise ValueError(f"Expected 'n_clients' >= 1, got {n_clients}")
        self.seed = seed
        self.init = init
        self._weights: Any = None  # μ_i (or the sample counts), set by _start_server
        self.init_datas = init_datas
        self.objective = objective
        self.wait_nodes = float(wait_nodes)
        self.on_client_error = check_in(on_client_error, "on_client_error", CLIENT_ERROR_POLICIES)
        self._timeout = 0.0
        self.history = History(algorithm.name, {**algorithm.config(), "seed": seed,
                                                 "n_clients": self.n_clients, "runtime": "flower"})
        self.server: Any = None
        self.errors: list[tuple[int, int, str]] = []
        self.node_of: dict[int, int] = {}  # partition id -> node id (Python ints)
        self._partition_of: dict[int, int] = {}
        self._accepted_round: dict[int, int] = {}
        self._structure = ""
        self._round: dict[str, Any] = {}
        self._elapsed = 0.0

    # -- start-up -----------------------------------------------------------
    def _config(self, index: int, **extra: Any) -> ConfigRecord:
        return ConfigRecord({"index": index, "n-clients": self.n_clients, "seed": str(self.seed),
                             "theta-structure": self._structure,
                             "accepted-round": self._accepted_round.get(index, -1), **extra})

    def _hello(self, grid: Grid, timeout: float) -> dict[int, ConfigRecord]:
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
            raise RuntimeError(f"No Flower node answered for partition ids {missing}")
        return {pid: replies[node] for pid, node in self.node_of.items()}

    def _start_server(self, hello: dict[int, RecordDict]) -> None:
        algo = self.algorithm
        model = algo.model
        if algo.weights is None:
            weights = [float(hello[pid].config_records[_REPLY]["n-samples"]) for pid in range(self.n_clients)]
        else:
            weights = algo.weights
        S0 = self.init
        if S0 is None:
            try:
                S0 = model.init_statistic(list(self.init_datas or []), init_generator(self.seed))
            except Exception as exc:
                raise ValueError(f"{model!r} cannot build Ŝ_0 without data ({exc}): pass init= or init_datas= "
                                 "to FedMMStrategy") from exc
        if hasattr(model, "set_global_moments"):
            moments = []
            for pid in range(self.n_clients):
                arrays = hello[pid].array_records[_MOMENTS]
                moments.append((int(arrays["n"].numpy()[0]), arrays["sum"].numpy(), arrays["sumsq"].numpy()))
            model.set_global_moments(moments)  # after init_statistic, which may fit pilot moments
        self._weights = weights
        self.server = algo.build_server(self.n_clients, weights=weights, init=S0, seed=self.seed)
        self._structure = _theta_structure(self.server.theta)

    def _start_from_mean_statistic(self, grid: Grid, timeout: float) -> None:
        """``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))`` from every client's full local statistic (``start='mean_statistic'``)."""
        message = self.server.start_message()
        record = _broadcast_record(message)
        messages = [Message(RecordDict({_BROADCAST: record, _CONFIG: self._config(pid)}), node, _START)
                    for pid, node in self.node_of.items()]
        payloads, errors = self._collect(grid.send_and_receive(messages, timeout=timeout), START_ROUND)
        if len(payloads) != self.n_clients:
            raise RuntimeError("start='mean_statistic' needs every client's statistic at θ_0; missing "
                               f"{sorted(set(range(self.n_clients)) - set(payloads))}: {errors} (pass init= "
                               "or build the FedMM with start='model')")
        S0 = self.server.mean_statistic(payloads)
        self.server = self.algorithm.build_server(self.n_clients, weights=self._weights, init=S0, seed=self.seed)
        self.history.config["start_bytes_up"] = sum(len(b) for b in payloads.values())
        self.history.config["start_bytes_down"] = self.n_clients * message.nbytes

    def _setup_control_variates(self, grid: Grid, timeout: float) -> None:
        record = _broadcast_record(self.server.setup_message())
        messages = [Message(RecordDict({_BROADCAST: record, _CONFIG: self._config(pid)}), node, _SETUP)
                    for pid, node in self.node_of.items()]
        payloads, errors = self._collect(grid.send_and_receive(messages, timeout=timeout), -1)
        if len(payloads) != self.n_clients:
            raise RuntimeError("control_variates='oracle' needs every client's V_0,i; missing "
                               f"{sorted(set(range(self.n_clients)) - set(payloads))}: {errors}")
        self.server.setup_aggregate(payloads)
        for pid in payloads:
            self._accepted_round[pid] = -1
        self.history.config["setup_bytes_up"] = sum(len(b) for b in payloads.values())
        self.history.config["setup_bytes_down"] = self.n_clients * self.server.setup_message().nbytes

    def _collect(self, replies: Iterable[Message], t: int) -> tuple[dict[int, bytes], list]:
        payloads: dict[int, bytes] = {}
        errors = []
        for reply in replies:
            node_id = int(reply.metadata.src_node_id)
            pid = self._partition_of.get(node_id)
            try:
                if reply.has_error():
                    raise RuntimeError(f"client error: {reply.error.reason}")
                meta = reply.content.config_records[_REPLY]
                if pid is None or int(meta["partition-id"]) != pid or int(meta["round"]) != t:
                    raise ValueError(f"unexpected reply (partition {meta['partition-id']}, round {meta['round']})")
                payloads[pid] = payload_bytes(reply.content.array_records[_PAYLOAD]["payload"])
            except Exception as exc:  # a malformed or failed reply drops this client for the round
                errors.append((t, node_id if pid is None else pid, str(exc)))
        self.errors.extend(errors)
        return payloads, errors

    def run(self, grid: Grid, n_rounds: int, *, timeout: float = 600.0) -> History:
        """Start-up exchanges, then ``n_rounds`` rounds through :meth:`Strategy.start`.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
        n_rounds : int
        timeout : float
            Seconds to wait for replies each round (and for each start-up
            exchange); clients whose reply comes later are dropped.
        """
        self._timeout = float(timeout)
        hello = self._hello(grid, timeout)
        self._start_server(hello)
        if self.init is None and self.algorithm.start == "mean_statistic":
            self._start_from_mean_statistic(grid, timeout)
        if self.algorithm.control_variates == "oracle":
            self._setup_control_variates(grid, timeout)
        else:  # V_0,i = 0 needs no exchange: each client sets it on its first round
            self.history.config["setup_bytes_up"] = 0
            self.history.config["setup_bytes_down"] = 0
        record_initial(self.history, None if self.objective is None else (lambda: self.objective(self.server.theta)))
        self.start(grid, self._state_record(), num_rounds=int(n_rounds), timeout=timeout)
        self.history.state["S"] = self.server.S
        self.history.state["theta"] = self.server.theta_vector
        self.history.params = self.algorithm.model.theta_to_dict(self.server.theta)
        self.history.theta = self.server.theta
        return self.history

    def _state_record(self) -> ArrayRecord:
        return ArrayRecord({"S": Array(self.server.S), "theta": Array(self.server.theta_vector)})

    # -- Strategy interface -----------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Select the round's clients (the server's own seeded sampling) and address their nodes."""
        t = server_round - 1
        start = time.perf_counter()
        ids = self.server.select(t)
        message = self.server.broadcast(t)
        record = _broadcast_record(message)
        self._round = {"t": t, "ids": ids, "message": message, "start": start}
        return [Message(RecordDict({_BROADCAST: record, _CONFIG: self._config(i)}), self.node_of[i], _TRAIN,
                        group_id=str(t)) for i in ids]

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decode the payloads, drop failed, missing, late and invalid clients, and take the server's step."""
        t, ids, message = self._round["t"], self._round["ids"], self._round["message"]
        payloads, errors = self._collect(replies, t)
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
        metrics = MetricRecord({"E_s": record["E_s"], "n_dropped": len(record["dropped"])})
        return self._state_record(), metrics

    def _monitor(self, t: int, gamma: float) -> dict:
        """The round's monitored fields: ``objective`` at the server's ``θ`` when an objective was given."""
        return {} if self.objective is None else {"objective": float(self.objective(self.server.theta))}

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
def _load_state(context: Context) -> dict[str, np.ndarray]:
    record = context.state.array_records.get(STATE_KEY)
    return {} if record is None else {k: record[k].numpy() for k in record}


def _save_state(context: Context, state: dict[str, np.ndarray]) -> None:
    context.state.array_records[STATE_KEY] = ArrayRecord({k: Array(np.ascontiguousarray(v))
                                                          for k, v in state.items()})


def _partition_id(context: Context) -> int:
    node_config = context.node_config
    if "partition-id" not in node_config:
        raise KeyError("fedmm ClientApp: the node has no 'partition-id' in its node config "
                       "(start flower-supernode with --node-config \"partition-id=i num-partitions=n\")")
    return int(node_config["partition-id"])


def client_app(algorithm: FedMM | Callable[[Context], FedMM],
               load_data: Callable[[int, Context], Any]) -> ClientApp:
    """A Flower ClientApp that runs a FedMM client on this node's data.

    Parameters
    ----------
    algorithm : FedMM or callable(context) -> FedMM
        The same configuration as the server's (a callable is called on
        every message, e.g. to read ``context.run_config``).
    load_data : callable(partition_id, context) -> client data
        The node's data (in the model's format) for its ``partition-id``.

    Returns
    -------
    flwr.clientapp.ClientApp
        Handles ``query.fedmm_hello``, ``train.fedmm_start``, ``train.fedmm_setup`` and ``train``.
    """
    app = ClientApp()

    def get_algorithm(context: Context) -> FedMM:
        algo = algorithm(context) if callable(algorithm) and not isinstance(algorithm, FedMM) else algorithm
        if not isinstance(algo, FedMM):
            raise TypeError(f"Expected the ClientApp's algorithm to be a FedMM, got {type(algo).__name__}")
        return algo

    def build(msg: Message, context: Context) -> tuple[FedMM, Any, Broadcast, int]:
        algo = get_algorithm(context)
        config = msg.content.config_records[_CONFIG]
        pid = _partition_id(context)
        if int(config["index"]) != pid:
            raise ValueError(f"Message for client {config['index']} reached the node of partition {pid}")
        record = msg.content.array_records[_BROADCAST]
        arrays = [record[k].numpy() for k in _BROADCAST_KEYS]
        message = Broadcast.from_arrays(arrays, algo.model, _theta_template(str(config["theta-structure"])))
        client = algo.build_client(pid, load_data(pid, context), n_clients=int(config["n-clients"]),
                                   seed=int(str(config["seed"])))
        return algo, client, message, int(config["accepted-round"])

    def reply(msg: Message, payload: bytes, pid: int, t: int) -> Message:
        content = RecordDict({_PAYLOAD: ArrayRecord({"payload": payload_array(payload)}),
                              _REPLY: ConfigRecord({"partition-id": pid, "round": t})})
        return Message(content, reply_to=msg)

    @app.query("fedmm_hello")
    def hello(msg: Message, context: Context) -> Message:
        algo = get_algorithm(context)
        pid = _partition_id(context)
        data = algo.model.check_data(load_data(pid, context), f"partition {pid}")
        content = RecordDict({_REPLY: ConfigRecord({"partition-id": pid,
                                                    "n-samples": int(algo.model.n_samples(data))})})
        if hasattr(algo.model, "local_moments"):
            n, s, ss = algo.model.local_moments(data)
            content[_MOMENTS] = ArrayRecord({"n": Array(np.array([n], dtype=np.int64)), "sum": Array(s),
                                           "sumsq": Array(ss)})
        return Message(content, reply_to=msg)

    @app.train("fedmm_start")
    def start(msg: Message, context: Context) -> Message:
        _, client, message, _ = build(msg, context)
        return reply(msg, client.start_statistic(message), client.index, START_ROUND)

    @app.train("fedmm_setup")
    def setup(msg: Message, context: Context) -> Message:
        _, client, message, _ = build(msg, context)
        payload = client.setup(message)
        _save_state(context, client.get_state())
        return reply(msg, payload, client.index, -1)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        algo, client, message, accepted = build(msg, context)
        stored = _load_state(context)
        committed = {k: v for k, v in stored.items() if not k.startswith(_PENDING)}
        pending = {k[len(_PENDING):]: v for k, v in stored.items() if k.startswith(_PENDING)}
        if pending and int(pending.pop("t")[0]) == accepted:
            committed = pending  # the server aggregated that round's payload: the update stands
        if "V" not in committed:
            if algo.control_variates != "zero":
                raise RuntimeError("This node has no control variate V_0,i (its state was lost): "
                                   "control_variates='oracle' needs the set-up exchange")
            client.setup(message)  # V_0,i = 0: no set-up exchange was needed
        client.set_state(committed, message.theta)
        payload = client.step(message)
        new_state = {**committed, **{_PENDING + k: v for k, v in client.get_state().items()},
                     _PENDING + "t": np.array([message.t], dtype=np.int64)}
        _save_state(context, new_state)
        return reply(msg, payload, client.index, message.t)

    return app
