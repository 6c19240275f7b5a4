# SPDX-License-Identifier: BSD-3-Clause
"""Non-smooth problems' local loop for FedMLS (re-exported by ``fedmm.kernels``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm._validation import as_array, check_count, check_int, check_real
from fedmm import _nonsmooth

__all__ = ["fedmls_local_round"]

#: Largest step index: the kernel's counter is a signed 64-bit integer.
_MAX_STEP = 2**63 - 1

_LOSS_CODES = {"hinge": _nonsmooth.LOSS_HINGE, "l1": _nonsmooth.LOSS_L1}


def _index_array(x: Any, name: str, shape_desc: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != ndim or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"Expected '{name}' to be an integer array of shape {shape_desc}, "
                         f"got dtype {arr.dtype} and shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _check_rows(rows: np.ndarray, row_offsets: np.ndarray, offsets: np.ndarray, n_steps: int) -> None:
    """Every minibatch index in its client's range, checked before any output is written."""
    n = offsets.shape[0] - 1
    B = rows.shape[1]
    if rows.shape[0] < n_steps:
        raise ValueError(f"Expected 'rows' with at least n_steps={n_steps} rows, got shape {rows.shape}")
    if row_offsets[0] < 0 or row_offsets[-1] > B or np.any(np.diff(row_offsets) <= 0):
        raise ValueError(f"Expected 'row_offsets' increasing within [0, {B}] with non-empty clients, "
                         f"got {row_offsets}")
    if n_steps == 0:
        return
    for i in range(n):
        block = rows[:n_steps, row_offsets[i]:row_offsets[i + 1]]
        if block.min() < offsets[i] or block.max() >= offsets[i + 1]:
            raise ValueError(f"Expected the 'rows' of client {i} in [{offsets[i]}, {offsets[i + 1]}), "
                             f"got values in [{block.min()}, {block.max()}] (invalid argument)")


def _inplace_matrix(x: Any, name: str, shape: tuple) -> np.ndarray:
    if not (isinstance(x, np.ndarray) and x.dtype == np.float64 and x.flags.c_contiguous
            and x.flags.writeable and x.shape == shape):
        got = f"{type(x).__name__} {getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}"
        raise ValueError(f"Expected '{name}' to be a writeable C-contiguous float64 array of shape {shape}, "
                         f"got {got}")
    return x


def fedmls_local_round(
    loss: str,
    design: Any,
    target: Any,
    offsets: Any,
    V: Any,
    U: np.ndarray,
    U_avg: np.ndarray,
    *,
    n_steps: int,
    first_step: int = 0,
    weight: float,
    radius: float | None = None,
    rows: Any = None,
    row_offsets: Any = None,
    scale: Any = None,
) -> None:
    """The local loop of one FedMLS round for all clients, in place (FedMLS paper eq. (9)).

    For every client ``i``, from ``u_0 = U[i]`` and ``ũ_0 = u_0``, for ``t = 1..n_steps``::

        û_t = u_{t−1} − (weight · ĝ_i(u_{t−1}) + u_{t−1} − V[i]) / (1 + t/2)
        u_t = û_t · min(1, radius/‖û_t‖₂)
        ũ_t = (1 − θ_t) ũ_{t−1} + θ_t u_t,      θ_t = 2(t+1)/(t(t+3))

    then ``U[i] = u_T`` and ``U_avg[i] = ũ_T``.  With ``first_step = s > 0`` the call
    resumes a loop: it runs steps ``t = s+1 .. s+n_steps`` from ``U[i] = u_s`` and
    ``U_avg[i] = ũ_s``, so consecutive calls give the same numbers bit for bit as one.

    The loop runs without the GIL in slices of a few milliseconds and checks for
    interrupts between them: any ``n_steps`` can be stopped with Ctrl-C
    (``KeyboardInterrupt``; ``U`` and ``U_avg`` then hold an intermediate step).
    ``ĝ_i(u) = s_i Σ_j ℓ'(a_jᵀu, y_j) a_j``
    over client ``i``'s rows (all of them, or the step's minibatch).

    Parameters
    ----------
    loss : {"hinge", "l1"}
        ``ℓ(z, y) = max(0, 1 − y z)`` or ``|z − y|``.
    design : ndarray of shape (N, p)
        Rows ``a_j`` of all clients, client by client (converted to C-ordered float64).
    target : ndarray of shape (N,)
    offsets : int array of shape (n + 1,)
        Client ``i`` owns rows ``offsets[i]:offsets[i+1]`` (non-empty, ``offsets[0] = 0``,
        ``offsets[-1] = N``).
    V : ndarray of shape (n, p)
        Prox centres ``v^i``.
    U, U_avg : ndarray of shape (n, p), float64, C-contiguous, writeable
        In: ``z_{k−1}^i`` (``U``); out: ``u_T`` and ``ũ_T``.
    n_steps : int
        ``T ≥ 0`` (with ``first_step + n_steps < 2**63``).
    first_step : int, default 0
        Steps already run (``U_avg`` is an input when ``first_step > 0``).
    weight : float
        ``1/(n β_k) ≥ 0``.
    radius : float, optional
        Ball radius; None for no projection.
    rows : int array of shape (≥ n_steps, B), optional
        Per step (``rows[r]`` is step ``first_step + 1 + r``), the global rows of every client's minibatch
        (client ``i`` in columns
        ``row_offsets[i]:row_offsets[i+1]``; indices outside its range raise).
    row_offsets : int array of shape (n + 1,)
    scale : ndarray of shape (n,)
        Minibatch factors ``s_i`` (``m_i/b_i`` for unbiased estimates).
    """
    code = _LOSS_CODES.get(loss)
    if code is None:
        raise ValueError(f"Expected 'loss' to be one of {tuple(_LOSS_CODES)}, got {loss!r}")
    design = as_array(design, "design", ndim=2, order="C")
    N, p = design.shape
    target = as_array(target, "target", ndim=1)
    if target.shape != (N,):
        raise ValueError(f"Expected 'target' of shape ({N},), got shape {target.shape}")
    offsets = _index_array(offsets, "offsets", "(n + 1,)", 1)
    n = offsets.shape[0] - 1
    if n < 1 or offsets[0] != 0 or offsets[-1] != N or np.any(np.diff(offsets) <= 0):
        raise ValueError(f"Expected 'offsets' increasing from 0 to N={N} with non-empty clients, got {offsets}")
    V = as_array(V, "V", ndim=2, order="C")
    if V.shape != (n, p):
        raise ValueError(f"Expected 'V' of shape ({n}, {p}), got shape {V.shape}")
    U = _inplace_matrix(U, "U", (n, p))
    U_avg = _inplace_matrix(U_avg, "U_avg", (n, p))
    if not np.isfinite(U).all():
        raise ValueError("Expected 'U' to contain only finite values (no NaN or inf)")
    n_steps = check_count(n_steps, "n_steps", low=0)
    first_step = check_int(first_step, "first_step", low=0, high=_MAX_STEP - n_steps)
    weight = check_real(weight, "weight", low=0.0)
    radius = -1.0 if radius is None else check_real(radius, "radius", low=0.0, low_open=True)
    if rows is not None:
        rows = _index_array(rows, "rows", "(n_steps, B)", 2)
        row_offsets = _index_array(row_offsets, "row_offsets", "(n + 1,)", 1)
        if row_offsets.shape != (n + 1,):
            raise ValueError(f"Expected 'row_offsets' of shape ({n + 1},), got shape {row_offsets.shape}")
        scale = as_array(scale, "scale", ndim=1)
        if scale.shape != (n,):
            raise ValueError(f"Expected 'scale' of shape ({n},), got shape {scale.shape}")
        _check_rows(rows, row_offsets, offsets, n_steps)
    _nonsmooth.fedmls_local_round(code, design, target, offsets, first_step, n_steps, rows, row_offsets, scale,
                                  weight, radius, V, U, U_avg)
