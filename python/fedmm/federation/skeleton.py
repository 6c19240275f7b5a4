# SPDX-License-Identifier: BSD-3-Clause
"""The round mechanics every algorithm family shares: client selection, payload decoding and validation,
the weighted aggregation, the fault policy and the control-variate step.

An algorithm's server supplies only its hooks (how one client's payload becomes a row of numbers, what
the server does with the aggregate); the pieces here are what the FedMM server
(:class:`fedmm.algorithms.Server`), the subgradient family's servers (FedMLS, FedAvg, Scaffold, Scaffnew,
FedProx) and the optimal-transport servers (FedMM-OT, FedAdam) have in common, written once:

- :class:`ClientSelection`: who is contacted at round ``t`` — ``clients_per_round`` clients uniformly without
  replacement, or each client with probability ``participation_prob`` (independent Bernoulli coins); in
  Algorithm 4's ``'compress'`` mode the same draw becomes the server's coins and every client is contacted.
  Round ``t``'s draw is the first draw of the server's stream ``Philox(key, counter=(0, t, 0, 0))``, the
  stream the compiled engine (``fedmm_server_select`` in ``engine.c``) draws from: the same clients on every
  backend and runtime, and nothing to checkpoint.
- :func:`decode_payloads`: a round's payloads, in increasing client order, through the family's row decoder
  (its wire format: the hook), with the checks every family makes — a payload from a client that was not
  selected, a selected client's missing payload, an empty payload from a client that must send — and each
  refusal handed to the fault policy (:func:`refuse`).  :func:`check_message` is the validation of a decoded
  message that the FedMM and OT servers share (length, finite values, a magnitude bound).
- :func:`weighted_aggregate`: ``Σ_k (w_k/p) v_k`` accumulated in the given (client) order, one compiled pass:
  the same bits on every backend and runtime (FedMM, FedMM-OT, FedAdam).  :func:`mean_aggregate` and
  :func:`sum_aggregate`: the unweighted ``(1/m) Σ_k v_k`` and ``Σ_k v_k`` of the subgradient family (FedAvg,
  FedProx, Scaffold, Scaffnew: NumPy's ``np.mean``/``np.sum`` over the clients; FedMLS: in client order).
- :func:`control_variate_update`: ``V_{t+1} = V_t + α · acc`` for the aggregate ``acc`` of the round, or
  Scaffold's ``c_{t+1} = c_t + acc / N``.
- :func:`guarded_step`: the fault policy of a server step that can fail on the round's messages (FedMM's
  ``Π``/``T``): it raises with the state unchanged, or, under the ``'drop'`` policy, retries without the
  messages at fault (:func:`step_without_failing_messages`, at most :data:`MAX_STEP_RETRIES` retries).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Collection, Mapping, NamedTuple, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import check_in, check_int

__all__ = ["ClientSelection", "PhiloxRounds", "RoundSelection", "SELECTION_MODES", "SUM_ORDERS", "check_message",
           "control_variate_update", "decode_payloads", "empty_payload_reason", "guarded_step", "mean_aggregate",
           "refuse", "step_without_failing_messages", "sum_aggregate", "weighted_aggregate", "MAX_STEP_RETRIES"]

#: How many extra server steps :func:`step_without_failing_messages` tries, each without one more of the
#: largest messages, before the round goes on with no message.
MAX_STEP_RETRIES = 3

#: The ``'drop'`` fault policy's callback: ``on_invalid(i, reason)`` leaves client ``i`` out of the round.
OnInvalid = Callable[[int, str], None]

#: Who draws the participation: ``'select'`` (the server contacts the drawn clients: Algorithm 2, FedAvg,
#: Scaffold, Algorithm 3), ``'compress'`` (the draw is the server's coins, every client is contacted:
#: Algorithm 4) and ``'compress-local'`` (every client is contacted and draws its own coin: Algorithm 4).
SELECTION_MODES = ("select", "compress", "compress-local")

#: How :func:`sum_aggregate` and :func:`mean_aggregate` add the rows: ``'numpy'`` (``np.sum``/``np.mean`` over
#: axis 0 of the stacked rows: NumPy's reduction, which adds pairwise where NumPy does, e.g. one column of 8
#: rows or more) or ``'client'`` (one compiled pass in client order, :func:`weighted_aggregate`'s with unit
#: weights).  The two may differ in the last bits: each algorithm keeps the order it was recorded with.
SUM_ORDERS = ("numpy", "client")


class PhiloxRounds:
    """Round ``t``'s random stream of a 128-bit Philox key: the generator reset to counter ``(0, t, 0, 0)``.

    The stream every party of every family draws its round from (the server's selection, a client's
    minibatch and quantization), and that the compiled engine replicates in C (``random.c``): a pure
    function of the key and ``t``, so nothing about it is checkpointed but the key.  Not shared between
    threads: one instance per party, used by one thread at a time.

    Parameters
    ----------
    key : array_like of 2 uint64

    Examples
    --------
    >>> import numpy as np
    >>> rounds = PhiloxRounds(np.array([1, 2], dtype=np.uint64))
    >>> a = rounds.at(3).random(2); b = rounds.at(3).random(2)
    >>> bool((a == b).all())
    True
    """

    def __init__(self, key: Any) -> None:
        self._setup(np.array(key, dtype=np.uint64, copy=True))

    def __getstate__(self) -> dict:
        return {"key": self._key}

    def __setstate__(self, state: dict) -> None:
        # pickled copies (e.g. Ray's zero-copy arrays) may be read-only: rebuild writable buffers
        self._setup(np.array(state["key"], dtype=np.uint64, copy=True))

    def _setup(self, key: np.ndarray) -> None:
        if key.shape != (2,):
            raise ValueError(f"Expected 'key' to be 2 uint64 (a 128-bit Philox key), got shape {key.shape}")
        self._key = key
        # the NumPy generator and its state dict are built at the first at(): compiled rounds only need the key
        # (and a run builds one stream per client)
        self._bitgen: np.random.Philox | None = None
        self.generator: np.random.Generator | None = None
        self._state: dict | None = None

    @property
    def key(self) -> np.ndarray:
        """The 128-bit Philox key as two uint64 (the compiled rounds seed their own replica with it)."""
        return self._key

    def sample(self, t: int, n: int, b: int) -> np.ndarray:
        """``b`` distinct indices of ``range(n)``: the first draw of round ``t``'s stream.

        Equal to ``fedmm.kernels.sample_without_replacement(n, b, self.at(t))``, drawn from the compiled
        replica of the stream (no generator state to set).
        """
        return kernels.philox_sample_without_replacement(self._key, t, n, b)

    def at(self, t: int) -> np.random.Generator:
        """The generator positioned at the start of round ``t``'s stream (counter ``(0, t, 0, 0)``)."""
        if self._bitgen is None:
            self._bitgen = np.random.Philox(key=self._key)
            self.generator = np.random.Generator(self._bitgen)
            # reused state dict: only the round word of the counter changes; the buffer is empty (a fresh block)
            self._state = {"bit_generator": "Philox",
                           "state": {"counter": np.zeros(4, dtype=np.uint64), "key": self._key},
                           "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4, "has_uint32": 0, "uinteger": 0}
        counter = self._state["state"]["counter"]
        counter[:] = 0
        counter[1] = t
        self._bitgen.state = self._state
        return self.generator


class RoundSelection(NamedTuple):
    """The outcome of :meth:`ClientSelection.draw` for one round.

    Attributes
    ----------
    ids : list of int
        The contacted clients, increasing.
    coins : ndarray of shape (n_clients,), bool, or None
        The server's coins in ``'compress'`` mode (client ``i`` sends a message iff ``coins[i]``); None
        otherwise.
    """

    ids: list[int]
    coins: np.ndarray | None


class ClientSelection:
    r"""Which clients round ``t`` contacts, as a pure function of the server's key and ``t``.

    Parameters
    ----------
    n_clients : int >= 1
        :math:`n`.
    clients_per_round : int in [0, n_clients] or None
        Draw this many clients uniformly without replacement
        (:func:`fedmm.kernels.philox_sample_without_replacement`), returned in increasing order.
    participation_prob : float in (0, 1]
        Without ``clients_per_round``: client :math:`i` takes part iff :math:`u_i < p` for the
        stream's first :math:`n` uniform doubles :math:`u_0, \dots, u_{n-1}` (independent
        Bernoulli(:math:`p`) coins; :math:`p = 1` contacts every client and draws nothing).
    key : array_like of 2 uint64, optional
        The server stream's 128-bit Philox key (:attr:`PhiloxRounds.key`).  Needed
        unless every client takes part in every round.
    mode : {'select', 'compress', 'compress-local'}
        See :data:`SELECTION_MODES`.

    Examples
    --------
    >>> import numpy as np
    >>> selection = ClientSelection(10, clients_per_round=3, key=np.array([1, 2], dtype=np.uint64))
    >>> ids = selection.select(0)
    >>> len(ids), ids == sorted(ids), ids == selection.select(0)
    (3, True, True)
    >>> ClientSelection(4).select(7)
    [0, 1, 2, 3]
    """

    def __init__(self, n_clients: int, *, clients_per_round: int | None = None, participation_prob: float = 1.0,
                 key: Any = None, mode: str = "select") -> None:
        self.n_clients = check_int(n_clients, "n_clients", low=1)
        if clients_per_round is not None:
            clients_per_round = check_int(clients_per_round, "clients_per_round", low=0)
            if clients_per_round > self.n_clients:
                raise ValueError(f"Expected 'clients_per_round' <= n_clients = {self.n_clients}, "
                                 f"got {clients_per_round}")
        self.clients_per_round = clients_per_round
        if isinstance(participation_prob, bool) or not isinstance(participation_prob, (int, float, np.floating)):
            raise TypeError(f"Expected 'participation_prob' to be a float in (0, 1], got {participation_prob!r}")
        self.participation_prob = float(participation_prob)
        if not 0.0 < self.participation_prob <= 1.0:
            raise ValueError(f"Expected 'participation_prob' in (0, 1], got {participation_prob!r}")
        self.mode = check_in(mode, "mode", SELECTION_MODES)
        self.draws = mode != "compress-local" and (clients_per_round is not None or self.participation_prob < 1.0)
        if key is None:
            if self.draws:
                raise ValueError("Expected the server stream's 'key' with partial participation "
                                 "(clients_per_round or participation_prob < 1)")
            self.key = None
        else:
            key = np.array(key, dtype=np.uint64, copy=True)
            if key.shape != (2,):
                raise ValueError(f"Expected 'key' to be 2 uint64 (a 128-bit Philox key), got shape {key.shape}")
            key.flags.writeable = False
            self.key = key
        self.stream = None if self.key is None else PhiloxRounds(self.key)

    def __repr__(self) -> str:
        return (f"ClientSelection({self.n_clients}, clients_per_round={self.clients_per_round}, "
                f"participation_prob={self.participation_prob}, mode={self.mode!r})")

    def uniforms(self, t: int) -> np.ndarray:
        """The first ``n_clients`` uniform doubles of round ``t``'s stream (what the Bernoulli coins compare
        with ``participation_prob``)."""
        if self.stream is None:
            raise ValueError("Expected the server stream's 'key' to draw round uniforms")
        return self.stream.at(t).random(self.n_clients)

    def coins(self, t: int) -> np.ndarray:
        """Round ``t``'s participation coins, one bool per client (the drawn clients are True)."""
        n = self.n_clients
        if not self.draws:
            return np.ones(n, dtype=np.bool_)
        if self.clients_per_round is None:
            return self.uniforms(t) < self.participation_prob
        coins = np.zeros(n, dtype=np.bool_)
        coins[self.stream.sample(t, n, self.clients_per_round)] = True
        return coins

    def draw(self, t: int) -> RoundSelection:
        """Round ``t``'s contacted clients and, in ``'compress'`` mode, the server's coins.

        Parameters
        ----------
        t : int >= 0
            The round.

        Returns
        -------
        RoundSelection
        """
        everyone = list(range(self.n_clients))
        if self.mode == "compress-local":
            return RoundSelection(everyone, None)
        if self.mode == "compress":
            return RoundSelection(everyone, self.coins(t))
        if not self.draws:
            return RoundSelection(everyone, None)
        if self.clients_per_round is None:
            return RoundSelection(np.flatnonzero(self.uniforms(t) < self.participation_prob).tolist(), None)
        drawn = self.stream.sample(t, self.n_clients, self.clients_per_round)
        return RoundSelection(sorted(drawn.tolist()), None)

    def select(self, t: int) -> list[int]:
        """The clients contacted at round ``t``, increasing (:meth:`draw`'s ``ids``)."""
        return self.draw(t).ids


# --------------------------------------------------------------------------- decoding and validation
def refuse(on_invalid: OnInvalid | None, i: int, reason: str | BaseException) -> None:
    """Apply the fault policy to client ``i``'s refused message.

    Parameters
    ----------
    on_invalid : callable(i, reason) or None
        The ``'drop'`` policy: called, the client is then left out of the round.  None (the
        ``'raise'`` policy): a ``ValueError`` is raised.
    i : int
        The client.
    reason : str or exception
        Why its message is refused (an exception: its message; a ``ValueError`` is re-raised as it is,
        any other exception is chained to the ``ValueError``).

    Raises
    ------
    ValueError
        Without ``on_invalid``.
    """
    if on_invalid is not None:
        on_invalid(i, str(reason))
        return
    if isinstance(reason, ValueError):
        raise reason
    if isinstance(reason, BaseException):
        raise ValueError(str(reason)) from reason
    raise ValueError(reason)


def empty_payload_reason(i: int, t: int | None = None) -> str:
    """Why client ``i``'s empty payload is refused (``t``: the round in which it is active, when known)."""
    reason = f"Client {i} sent an empty payload, expected its message"
    return reason if t is None else f"{reason} (it is active at round {t})"


def check_message(i: int, values: Any, size: int, *, bound: float = math.inf, owner: str = "the model") -> np.ndarray:
    """Client ``i``'s decoded message, checked: ``size`` finite values of magnitude at most ``bound``.

    Parameters
    ----------
    i : int
        The client (named in the refusals).
    values : ndarray
        The decoded message.
    size : int
        The expected length.
    bound : float > 0
        The largest magnitude accepted (``inf``: any finite value).  FedMM's server passes the model's
        ``statistic_bound``: an absurd but finite message would break a later round's projection.
    owner : str
        Who sets ``bound`` (named in the refusal).

    Returns
    -------
    ndarray of shape (size,)
        ``values`` itself.

    Raises
    ------
    ValueError
        ``Client i sent a message of length …``, ``Client i sent non-finite values`` or ``Client i sent
        values of magnitude up to …, beyond the range of …``.
    """
    if np.shape(values) != (size,):
        raise ValueError(f"Client {i} sent a message of length {np.shape(values)}, expected ({size},)")
    largest = float(np.max(np.abs(values))) if size else 0.0
    if not (math.isfinite(largest) and largest <= bound):
        if not np.isfinite(values).all():
            raise ValueError(f"Client {i} sent non-finite values")
        raise ValueError(f"Client {i} sent values of magnitude up to {largest:.3g}, beyond the range of {owner}'s "
                         f"statistics (statistic_bound = {bound:.3g})")
    return values


def decode_payloads(t: int, payloads: Mapping[int, Any], decode_row: Callable[[int, Any], np.ndarray], *,
                    on_invalid: OnInvalid | None = None, selected: Collection[int] | None = None,
                    must_send: Callable[[int], bool] | None = None, owner: str = "The server"
                    ) -> tuple[list[int], list[np.ndarray]]:
    """Round ``t``'s valid payloads, decoded in increasing client order.

    Parameters
    ----------
    t : int
        The round.
    payloads : dict of int to bytes
        Client index → payload; the clients whose step failed are absent.
    decode_row : callable(i, payload) -> ndarray
        The family's hook: client ``i``'s payload as a row of numbers, validated (its wire format, its
        compressor, :func:`check_message`); raises ``ValueError`` or ``TypeError`` with the reason.
    on_invalid : callable(i, reason), optional
        The ``'drop'`` fault policy (:func:`refuse`): a refused payload is left out after
        ``on_invalid(i, reason)``.  Without it a refusal raises ``ValueError``.
    selected : collection of int, optional
        The round's selected clients.  When given, a payload from another client is refused
        (``Client i is not selected in round t``) and, without ``on_invalid``, a selected client's
        missing payload raises (``owner`` needs every client's message).
    must_send : callable(i) -> bool, optional
        When given, an empty payload is not decoded: it is refused (:func:`empty_payload_reason`) from a
        client that must send, and counts as no message (left out, not refused) from the others
        (Algorithm 4's clients whose coin is 0).  Without it empty payloads go to ``decode_row``.
    owner : str
        Who needs the messages (named in the refusal of missing ones).

    Returns
    -------
    ids : list of int
        The clients whose message is aggregated, increasing.
    rows : list of ndarray
        Their decoded messages, in the order of ``ids``.
    """
    if selected is not None:
        selected = set(selected)
        if on_invalid is None:
            missing = sorted(selected - set(payloads))
            if missing:
                raise ValueError(f"{owner} needs every client's message without on_invalid (the 'drop' fault "
                                 f"policy); round {t} misses clients {missing}")
    ids, rows = [], []
    for i in sorted(payloads):
        payload = payloads[i]
        if selected is not None and i not in selected:
            refuse(on_invalid, i, f"Client {i} is not selected in round {t}")
            continue
        if must_send is not None and not payload:
            if must_send(i):
                refuse(on_invalid, i, empty_payload_reason(i, t))
            continue
        try:
            row = decode_row(i, payload)
        except (ValueError, TypeError) as exc:
            refuse(on_invalid, i, exc)
            continue
        ids.append(i)
        rows.append(row)
    return ids, rows


# --------------------------------------------------------------------------- aggregation
def weighted_aggregate(rows: Sequence[np.ndarray], weights: Sequence[float], size: int, *,
                       p: float = 1.0) -> np.ndarray:
    r""":math:`\sum_k (w_k / p)\, v_k`, accumulated in the order given (the clients' increasing order).

    One compiled pass (:func:`fedmm.kernels.weighted_row_sum`) whose additions run in a fixed order: the
    same bits as ``acc += (w_k / p) * v_k`` in NumPy, on every backend and runtime.

    Parameters
    ----------
    rows : sequence of ndarray of shape (size,)
        The decoded messages :math:`v_k`.
    weights : sequence of float
        :math:`w_k` (the clients' :math:`\mu_i`), one per row.
    size : int
        The length of a message (the result has it when ``rows`` is empty).
    p : float > 0
        The participation probability that unbiases the sum (1: a plain weighted sum).

    Returns
    -------
    ndarray of shape (size,)
        A new vector.

    Examples
    --------
    >>> import numpy as np
    >>> weighted_aggregate([np.ones(2), np.arange(2.0)], [0.25, 0.5], 2, p=0.5)
    array([0.5, 1.5])
    """
    return kernels.weighted_row_sum(list(rows), np.array(weights, dtype=np.float64) / p, size)


def _stacked(rows: Sequence[np.ndarray] | np.ndarray, size: int) -> np.ndarray:
    """The rows as one C-contiguous ``(m, size)`` float64 array (no copy when they already are one)."""
    stacked = np.ascontiguousarray(rows, dtype=np.float64)
    if stacked.ndim != 2 or stacked.shape[1] != size:
        raise ValueError(f"Expected 'rows' of shape (m, {size}) (one message of length {size} per client), got "
                         f"shape {stacked.shape}")
    return stacked


def sum_aggregate(rows: Sequence[np.ndarray] | np.ndarray, size: int, *, order: str = "numpy") -> np.ndarray:
    r""":math:`\sum_k v_k`, unweighted (Scaffold's :math:`\sum_{i \in R} \Delta c_i`).

    Parameters
    ----------
    rows : sequence of ndarray of shape (size,), or ndarray of shape (m, size)
        The decoded messages :math:`v_k`, in client order (a non-contiguous array, e.g. a column block of
        the messages, is copied to a contiguous one first).
    size : int
        The length of a message (the result has it when ``rows`` is empty: zeros).
    order : {'numpy', 'client'}
        How the rows are added (:data:`SUM_ORDERS`): ``np.sum(rows, axis=0)`` of the stacked rows, or
        one compiled pass in client order.

    Returns
    -------
    ndarray of shape (size,)
        A new vector.

    Examples
    --------
    >>> import numpy as np
    >>> sum_aggregate(np.array([[1.0, 2.0], [3.0, 4.0]]), 2)
    array([4., 6.])
    """
    check_in(order, "order", SUM_ORDERS)
    if len(rows) == 0:
        return np.zeros(size)
    if order == "client":
        return weighted_aggregate(rows, np.ones(len(rows)), size)
    return np.sum(_stacked(rows, size), axis=0)


def mean_aggregate(rows: Sequence[np.ndarray] | np.ndarray, size: int, *, order: str = "numpy") -> np.ndarray:
    r""":math:`\frac1m \sum_k v_k` of the ``m >= 1`` messages, unweighted: the subgradient family's server step
    (FedAvg's and Scaffnew's new ``x``, Scaffold's :math:`\frac1{|R|} \sum_{i \in R} \Delta y_i`, FedMLS's
    mean of the :math:`y^i_{k+1}`).

    ``order='numpy'`` is ``np.mean(rows, axis=0)`` of the stacked rows itself (NumPy's reduction, then the
    division by ``m``); ``order='client'`` divides :func:`sum_aggregate`'s client-order sum by ``m``.

    Parameters
    ----------
    rows : sequence of ndarray of shape (size,), or ndarray of shape (m, size)
        The decoded messages, in client order; at least one.
    size : int
        The length of a message.
    order : {'numpy', 'client'}
        See :data:`SUM_ORDERS`.

    Returns
    -------
    ndarray of shape (size,)
        A new vector.

    Raises
    ------
    ValueError
        ``rows`` is empty (the mean of no message is undefined: the server keeps its state), or not
        ``m`` messages of length ``size``.

    Examples
    --------
    >>> import numpy as np
    >>> mean_aggregate([np.ones(2), np.arange(2.0)], 2)
    array([0.5, 1. ])
    """
    check_in(order, "order", SUM_ORDERS)
    if len(rows) == 0:
        raise ValueError("Expected at least one message in 'rows' (the mean of no message is undefined)")
    if order == "client":
        return sum_aggregate(rows, size, order="client") / len(rows)
    return np.mean(_stacked(rows, size), axis=0)


def control_variate_update(V: np.ndarray, acc: np.ndarray, control_variate_step: float, *,
                           n_clients: int | None = None) -> np.ndarray:
    r"""The server's control variate after a round: :math:`V_{t+1} = V_t + \alpha \cdot acc`, or
    :math:`V_t + \alpha \cdot acc / N` with ``n_clients``.

    ``acc`` is the round's :func:`weighted_aggregate` :math:`\sum_i (\mu_i/p) \Delta_i` (FedMM's
    Algorithms 2 and 4, FedMM-OT's Algorithm 3), or, with ``n_clients`` :math:`= N` and
    ``control_variate_step = 1``, Scaffold's :math:`c_{t+1} = c_t + \frac1N \sum_{i \in R} \Delta c_i` for
    ``acc`` the :func:`sum_aggregate` of the :math:`\Delta c_i` (Karimireddy et al. 2020, Algorithm 1
    line 17: a division by :math:`N`, not a product with :math:`1/N`, whose bits may differ).  With
    ``control_variate_step = 0`` (no control variates) ``V`` itself is returned.

    Parameters
    ----------
    V : ndarray of shape (q,)
    acc : ndarray of shape (q,)
    control_variate_step : float
        :math:`\alpha \ge 0`.
    n_clients : int >= 1, optional
        :math:`N`, dividing :math:`\alpha \cdot acc`.

    Returns
    -------
    ndarray of shape (q,)
        A new vector (or ``V`` when ``control_variate_step == 0``).

    Examples
    --------
    >>> import numpy as np
    >>> control_variate_update(np.zeros(2), np.array([3.0, 6.0]), 1.0, n_clients=3)
    array([1., 2.])
    """
    if n_clients is not None:
        n_clients = check_int(n_clients, "n_clients", low=1)
    if not control_variate_step:
        return V
    if n_clients is None:
        return V + control_variate_step * acc
    return V + control_variate_step * acc / n_clients


# --------------------------------------------------------------------------- the fault policy of a failing step
#: A server step from decoded messages: ``step(rows, weights)`` returns the new state (nothing of the server
#: changes) or raises ``ValueError``/``ArithmeticError``.
Step = Callable[[Sequence[np.ndarray], Sequence[float]], Any]


def _log_contribution(row: np.ndarray, weight: float, p: float = 1.0) -> float:
    """``log ‖(weight/p) row‖`` without overflow (``-inf`` for a zero contribution)."""
    scale = float(np.max(np.abs(row))) if row.size else 0.0
    if scale == 0.0 or weight <= 0.0:
        return -math.inf
    return math.log(weight / p) + math.log(scale) + math.log(float(np.linalg.norm(row / scale)))


def step_without_failing_messages(t: int, step: Step, ids: Sequence[int], rows: Sequence[np.ndarray],
                                  weights: Sequence[float], error: BaseException, *, p: float = 1.0,
                                  max_retries: int = MAX_STEP_RETRIES) -> tuple[Any, list[tuple[int, str]]]:
    """After ``step(rows, weights)`` failed with ``error``: the step without the messages at fault.

    1. The step with no message at all must succeed, else the failure is the server's own (its state
       or its model) and a ``ValueError`` is raised, the state unchanged.
    2. The suspects are ranked by the size of their contribution to the aggregate,
       ``‖(w_k/p) v_k‖`` (computed in a scaled form, so that an absurd message ranks first even where
       the norm overflows); the step is retried without the ``k`` largest for ``k = 1, …,
       max_retries`` (at most that many extra steps), the others in client order as usual.
    3. If every retry fails, the round goes on with no message (step 1's step) and every sender is
       reported.

    Parameters
    ----------
    t : int
        The round (named in the refusal).
    step : callable(rows, weights)
        The server step (``Step``).
    ids, rows, weights : sequences
        The senders, their decoded messages and weights, in client order.
    error : exception
        Why the step with every message failed.
    p : float > 0
        The participation probability dividing the weights.
    max_retries : int >= 0

    Returns
    -------
    result
        The step to commit.
    dropped : list of (int, str)
        The clients left out and why.
    """
    try:
        empty = step([], [])
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(f"Round {t}: the server step fails even without the clients' messages "
                         f"({type(exc).__name__}: {exc}); the server's state is unchanged") from error
    why = f"{type(error).__name__}: {error}"
    m = len(rows)
    sizes = [_log_contribution(row, w, p) for row, w in zip(rows, weights)]
    order = sorted(range(m), key=lambda k: -sizes[k])  # stable: ties keep client order
    for k in range(1, min(max_retries, m - 1) + 1):
        keep = sorted(order[k:])
        try:
            result = step([rows[j] for j in keep], [weights[j] for j in keep])
        except (ValueError, ArithmeticError):
            continue
        return result, [(ids[j], f"its message made the server step fail ({why}); the step succeeds without "
                                 f"the {k} largest of the {m} messages, ranked by their weighted size ||(w_i/p) v_i|| "
                                 f"(this one: about 1e{sizes[j] / math.log(10):.0f})")
                        for j in sorted(order[:k])]
    return empty, [(ids[j], f"the server step failed with the round's messages ({why}) and without the "
                            f"{min(max_retries, max(m - 1, 0))} largest; the round went on with no message")
                   for j in range(m)]


def guarded_step(t: int, step: Step, ids: Sequence[int], rows: Sequence[np.ndarray], weights: Sequence[float], *,
                 p: float = 1.0, on_invalid: OnInvalid | None = None, max_retries: int = MAX_STEP_RETRIES) -> Any:
    """``step(rows, weights)`` under the fault policy.

    When the step fails (``ValueError``, including ``numpy.linalg.LinAlgError``, or ``ArithmeticError``):
    without ``on_invalid`` a ``ValueError`` says why (the step's exception chained) and nothing is
    committed; with it the round goes on without the messages that make it fail
    (:func:`step_without_failing_messages`), each of their clients reported by ``on_invalid(i, reason)``.
    The usual path costs nothing more: the retries run only after a failure.

    Parameters
    ----------
    t : int
        The round.
    step : callable(rows, weights)
        The server step (``Step``): computes the new state into new arrays, changes nothing.
    ids, rows, weights : sequences
        The senders, their decoded messages (:func:`decode_payloads`) and weights, in client order.
    p : float > 0
        The participation probability dividing the weights (ranks the suspects).
    on_invalid : callable(i, reason), optional
        The ``'drop'`` fault policy.
    max_retries : int >= 0

    Returns
    -------
    result : object
        The step's result, to commit.

    Raises
    ------
    ValueError
        The step failed and there is no ``on_invalid``, or it fails even without the messages.
    """
    try:
        return step(rows, weights)
    except (ValueError, ArithmeticError) as exc:
        if on_invalid is None:
            raise ValueError(f"Round {t}: the server step failed ({type(exc).__name__}: {exc}); the "
                             "server's state is unchanged (pass on_invalid to drop the clients whose "
                             "messages make it fail)") from exc
        result, dropped = step_without_failing_messages(t, step, ids, rows, weights, exc, p=p,
                                                        max_retries=max_retries)
        for i, reason in dropped:
            on_invalid(i, reason)
        return result
