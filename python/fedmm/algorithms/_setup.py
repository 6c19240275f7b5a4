# SPDX-License-Identifier: BSD-3-Clause
"""Set-up shared by every federated algorithm: client weights, participation, compressors.

One definition of each rule, so that FedMM, parameter averaging, FedMM-OT and
FedAdam validate their arguments the same way and say the same thing when
they refuse one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm._validation import check_in, check_real
from fedmm.federation.local import CLIENT_ERROR_POLICIES

__all__ = ["check_datas_list", "normalized_weights", "participation", "compressor_list", "client_compressor",
           "checked_compressors", "check_control_variate_step", "check_weights", "check_compressor",
           "check_runtime", "client_error_policy", "CLIENT_ERROR_POLICIES"]


def check_control_variate_step(value: Any, name: str = "control_variate_step") -> float:
    """The control-variate step ``α`` of Algorithms 2-4 of the FedMM paper: a real number in ``[0, 1]``.

    Theorem 1 of the FedMM paper runs FedMM with ``α ∈ [0, 1]`` without
    compression and with full participation, and ``α ∈ (0, 1/(1 + ω_p)]``
    otherwise (FedEM: ``α = 1/(1 + ω)``); no value above 1 is covered, and a
    huge one only makes the control variates overflow rounds later.

    Parameters
    ----------
    value : float
        The value to check.
    name : str, default 'control_variate_step'
        The argument's name in the error message.

    Returns
    -------
    float

    Examples
    --------
    >>> check_control_variate_step(0.01)
    0.01
    >>> check_control_variate_step(2.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Expected 'control_variate_step' in [0, 1] (the control-variate step of FedMM ..., got 2.0
    """
    value = check_real(value, name, low=0.0)
    if value > 1.0:
        raise ValueError(f"Expected '{name}' in [0, 1] (the control-variate step of FedMM paper Theorem 1, at most "
                         f"1/(1 + omega_p) with compression or partial participation), got {value!r}")
    return value


def check_weights(weights: Any) -> list[float] | None:
    """The constructors' ``weights``: None, or a non-empty 1-D sequence of finite non-negative numbers
    that are not all zero (their number is checked against the clients by :func:`normalized_weights`)."""
    if weights is None:
        return None
    if isinstance(weights, (str, bytes)):
        raise TypeError(f"Expected 'weights' to be a sequence of non-negative numbers, got {type(weights).__name__}")
    try:
        w = np.asarray(weights)
    except Exception as exc:  # ragged sequences
        raise TypeError(f"Expected 'weights' to be a sequence of non-negative numbers: {exc}") from exc
    if w.dtype.kind not in "iuf":
        raise TypeError(f"Expected 'weights' to be a sequence of real numbers, got dtype {w.dtype}")
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"Expected 'weights' to be a non-empty 1-D sequence (one per client), got shape {w.shape}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("Expected 'weights' to be finite, non-negative and not all zero")
    return w.tolist()


def check_compressor(compressor: Any) -> Any:
    """The constructors' ``compressor``: one object with ``encode``/``decode`` (shared by every client) or a
    non-empty list or tuple of them (one per client).

    Parameters
    ----------
    compressor : Compressor or sequence of Compressor
        See :class:`fedmm.protocols.Compressor`.

    Returns
    -------
    object
        ``compressor``, as given.

    Raises
    ------
    ValueError
        An empty sequence.
    TypeError
        An element without callable ``encode`` and ``decode``.
    """
    comps = list(compressor) if isinstance(compressor, (list, tuple)) else [compressor]
    if not comps:
        raise ValueError("Expected 'compressor' to be a compressor or a non-empty sequence of them, got an empty one")
    for c in comps:
        if not (callable(getattr(c, "encode", None)) and callable(getattr(c, "decode", None))):
            raise TypeError("Expected 'compressor' to be a compressor of fedmm.compression (encode/decode methods) "
                            f"or a sequence of them, got {type(c).__name__}")
    return compressor


def check_runtime(runtime: Any) -> Any:
    """``run``'s ``runtime``: None or an object with a ``run`` method (:class:`fedmm.protocols.Runtime`)."""
    if runtime is not None and not callable(getattr(runtime, "run", None)):
        raise TypeError("Expected 'runtime' to be None or a runtime with run(server, clients, n_rounds, *, history, "
                        "monitor, callback, progress) (fedmm.protocols.Runtime: fedmm.runtime.LocalRuntime, "
                        f"RayRuntime, ...), got {type(runtime).__name__}")
    return runtime


def client_error_policy(on_client_error: Any, runtime: Any) -> str:
    """``run``'s ``on_client_error``: the default runtime's fault policy.

    None means ``'drop'``.  With a ``runtime`` given the runtime applies its own
    policy (``LocalRuntime(on_client_error=...)``): an explicit value must
    then agree with it, rather than be silently ignored.
    """
    if on_client_error is None:
        return getattr(runtime, "on_client_error", "drop") if runtime is not None else "drop"
    check_in(on_client_error, "on_client_error", CLIENT_ERROR_POLICIES)
    if runtime is not None:
        own = getattr(runtime, "on_client_error", None)
        if own != on_client_error:
            raise ValueError(f"Expected 'on_client_error' to be None with runtime={type(runtime).__name__}(...), "
                             f"whose own policy ({own!r}) applies; got {on_client_error!r}: set the policy on the "
                             "runtime, e.g. LocalRuntime(on_client_error=...)")
    return on_client_error


def check_datas_list(datas: Any, what: str = "one data set per client") -> None:
    """``TypeError`` unless ``datas`` is a non-empty list or tuple (one entry per client)."""
    if isinstance(datas, np.ndarray) or not isinstance(datas, (list, tuple)):
        raise TypeError(f"Expected 'datas' to be a list with {what}, got {type(datas).__name__}")
    if len(datas) == 0:
        raise ValueError("Expected at least one client in 'datas', got an empty list")


def normalized_weights(weights: Any, n: int) -> np.ndarray:
    """``μ = w / Σ w`` as float64 of shape ``(n,)``.

    Raises ``ValueError`` naming ``weights`` for a wrong length, non-finite or
    negative entries, or a zero sum.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"Expected 'weights' of length n_clients={n}, got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("Expected 'weights' to be finite, non-negative and not all zero")
    return w / w.sum()


def participation(clients_per_round: int | None, participation_prob: float | None,
                  n: int) -> tuple[int | None, float]:
    """``(count, p)`` for ``n`` clients: a fixed count per round (``p = count / n``), or None and the
    Bernoulli probability (1 when neither is given).  Both arguments are already validated
    (:func:`fedmm._validation.check_participation`); this checks ``count <= n``."""
    if clients_per_round is not None:
        if clients_per_round > n:
            raise ValueError(f"Expected 'clients_per_round' <= n_clients={n}, got {clients_per_round}")
        return clients_per_round, clients_per_round / n
    return None, 1.0 if participation_prob is None else participation_prob


def _per_client(compressor: Any, n: int) -> bool:
    """True for a sequence of compressors (one per client: checked to have ``n``), False for one shared."""
    if not isinstance(compressor, (list, tuple)):
        return False
    if len(compressor) != n:
        raise ValueError(f"Expected one compressor per client (n_clients={n}), got {len(compressor)}")
    return True


def compressor_list(compressor: Any, n: int) -> list[Any]:
    """One compressor per client: ``compressor`` repeated, or the sequence itself (length ``n``)."""
    return list(compressor) if _per_client(compressor, n) else [compressor] * n


def client_compressor(compressor: Any, n: int, index: int) -> Any:
    """Client ``index``'s entry of :func:`compressor_list` (same checks), without building the list: building
    every client of a run costs O(n) instead of O(n²)."""
    return compressor[index] if _per_client(compressor, n) else compressor


def checked_compressors(compressor: Any, n: int, size: int) -> list[Any]:
    """:func:`compressor_list`, each distinct compressor probed once on a zero message of length ``size``
    (``encode``/``decode`` present; the round trip keeps the shape)."""
    comps = compressor_list(compressor, n)
    checked: set[int] = set()
    for i, c in enumerate(comps):
        if id(c) in checked:  # one compressor shared by every client is probed once
            continue
        checked.add(id(c))
        if not all(hasattr(c, m) for m in ("encode", "decode")):
            raise TypeError(f"Expected compressor {i} to have encode/decode methods, got {type(c).__name__}")
        try:
            out = c.decode(c.encode(np.zeros(size), np.random.default_rng(0)))
        except Exception as exc:
            raise ValueError(f"Compressor {i} ({c!r}) cannot encode messages of length {size}: {exc}") from exc
        if np.shape(out) != (size,):
            raise ValueError(f"Compressor {i} ({c!r}) turned a message of length {size} into shape {np.shape(out)}")
    return comps

