# SPDX-License-Identifier: BSD-3-Clause
"""Set-up shared by every federated algorithm: client weights, participation, compressors.

One definition of each rule, so that FedMM, parameter averaging, FedMM-OT and
FedAdam validate their arguments the same way and say the same thing when
they refuse one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_datas_list", "normalized_weights", "participation", "compressor_list", "checked_compressors"]


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


def compressor_list(compressor: Any, n: int) -> list[Any]:
    """One compressor per client: ``compressor`` repeated, or the sequence itself (length ``n``)."""
    comps = list(compressor) if isinstance(compressor, (list, tuple)) else [compressor] * n
    if len(comps) != n:
        raise ValueError(f"Expected one compressor per client (n_clients={n}), got {len(comps)}")
    return comps


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

