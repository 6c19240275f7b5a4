# SPDX-License-Identifier: BSD-3-Clause
"""Compression kernels: block-p quantization, stochastic rounding, wire packing (re-exported by ``fedmm.kernels``).

Each family validates its arguments here (names, shapes, dtypes, ranges) and
calls a private Cython module that runs the C kernel without the GIL.  The
argument helpers :func:`norm_code`, :func:`as_vector` and
:func:`effective_block`, and the quantizer-spec faces (:func:`quantize_spec`,
:func:`quantize_rows_spec`, :func:`pack_spec`, :func:`pack_identity`: the
arguments already resolved, as :mod:`fedmm.compression`'s compressors hold
them) are what :mod:`fedmm.compression` calls.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm._validation import as_array, as_rng, check_in, check_int

# ---- compression (quantize.c, wire.c) ----
from fedmm import _quantize

__all__ = [
    # ---- compression (quantize.c, wire.c) ----
    "quantize_blockp",
    "quantize_dither",
    "pack",
    "unpack",
    "wire_header",
    # the quantizer-spec faces and their argument helpers (fedmm.compression)
    "SCHEME_IDENTITY",
    "SCHEME_BLOCKP",
    "SCHEME_DITHER",
    "norm_code",
    "as_vector",
    "effective_block",
    "quantize_spec",
    "quantize_rows_spec",
    "pack_spec",
    "pack_identity",
]

#: Wire scheme id of the identity payload (raw values), ``FEDMM_SCHEME_IDENTITY``.
SCHEME_IDENTITY: int = _quantize.SCHEME_IDENTITY
#: Wire scheme id of block-p quantization (``bits == 2``), ``FEDMM_SCHEME_BLOCKP``.
SCHEME_BLOCKP: int = _quantize.SCHEME_BLOCKP
#: Wire scheme id of stochastic rounding (random dithering), ``FEDMM_SCHEME_DITHER``.
SCHEME_DITHER: int = _quantize.SCHEME_DITHER

# ---- compression (quantize.c, wire.c) ----
_NORM_CODES = {"2": 1, "2.0": 1, "l2": 1, "inf": 2, "linf": 2}
_SCHEMES = {"blockp": _quantize.SCHEME_BLOCKP, "dither": _quantize.SCHEME_DITHER}


def norm_code(norm: Any) -> int:
    """The C code of a block norm: 1 for the 2-norm, 2 for the max-norm.

    Parameters
    ----------
    norm : {2, 'inf'}
        Also ``2.0``, ``'l2'``, ``'linf'`` and ``numpy.inf``.

    Returns
    -------
    int
        1 or 2 (``FEDMM_NORM_L2``, ``FEDMM_NORM_LINF``).

    Raises
    ------
    ValueError
        For any other value, naming ``norm``.
    """
    key = str(norm).lower()
    if isinstance(norm, bool) or key not in _NORM_CODES:
        raise ValueError(f"Expected 'norm' to be 2 or 'inf' (or numpy.inf), got {norm!r}")
    return _NORM_CODES[key]


def as_vector(x: Any) -> np.ndarray:
    """``x`` as the kernels read a message: 1-D, non-empty, native float32/float64, contiguous.

    Finiteness is checked by the C kernel in the same pass that computes the
    block norms (``ValueError`` on NaN/inf), so no extra pass is made here.

    Parameters
    ----------
    x : array_like of shape (q,), q >= 1
        Any memory layout.

    Returns
    -------
    ndarray of shape (q,)
        ``x`` itself when it already qualifies (checked in C: the per-call
        overhead matters for small messages), else one contiguous copy.
    """
    if _quantize.ready_vector(x) is not None:
        return x  # fast path, checked in C: per-call overhead matters for small messages
    arr = as_array(x, "x", ndim=1, dtype=None, finite=False)
    if arr.shape[0] == 0:
        raise ValueError("Expected 'x' with at least one element, got shape (0,)")
    return np.ascontiguousarray(arr)


def effective_block(block_size: int | None, q: int) -> int:
    """Coordinates per block for a length-``q`` vector: ``min(block_size, q)``, ``q`` for None.

    Parameters
    ----------
    block_size : int >= 1 or None
    q : int
        The vector's length.

    Returns
    -------
    int
    """
    if block_size is None:
        return q
    return min(check_int(block_size, "block_size", low=1), q)


def quantize_dither(
    x: Any, bits: int = 8, *, block_size: int | None = None, norm: Any = 2, rng: Any = None
) -> np.ndarray:
    """Stochastic rounding (random dithering), fused with dequantization.

    Per block ``x_l`` (``block_size`` coordinates, the last one possibly
    shorter) with ``N = ||x_l||_r`` and ``s = 2**(bits-1) - 1``:
    ``Q(x)_j = sign(x_j) * k_j * N / s`` with
    ``k_j = floor(a_j) + Bernoulli(a_j - floor(a_j))``, ``a_j = s|x_j|/N``,
    so that ``E[Q(x)] = x`` (FedEM Section 2; QSGD).

    Parameters
    ----------
    x : array_like of shape (q,), float32 or float64
        Any memory layout (strided input is copied once).
    bits : int in [2, 16]
        Bits per coordinate on the wire (sign + ``bits - 1`` level bits).
    block_size : int or None
        Coordinates per block; ``None`` = whole vector.
    norm : {2, 'inf'}
        Norm ``r`` scaling each block.
    rng : None, int, SeedSequence, BitGenerator or Generator
        Source of randomness (its lock is held while the kernel runs).

    Returns
    -------
    ndarray of shape (q,), float64
        Exactly the values :func:`unpack` returns for :func:`pack` called
        with a generator in the same state.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import quantize_dither
    >>> v = quantize_dither(np.array([3.0, -4.0]), bits=8, rng=0)
    >>> v.shape, bool(np.all(np.abs(v) <= 5.0))
    ((2,), True)
    """
    arr = as_vector(x)
    bits = check_int(bits, "bits", low=2, high=16)
    code = norm_code(norm)
    gen = as_rng(rng)
    return _quantize.quantize(arr, _quantize.SCHEME_DITHER, bits, code, effective_block(block_size, arr.shape[0]), gen)


def quantize_blockp(
    x: Any, *, block_size: int | None = None, norm: Any = 2, rng: Any = None
) -> np.ndarray:
    """Block-p quantization (FedEM Appendix B, eq. (13)-(14)), dequantized.

    Per block ``x_l``: ``Q(x)_j = ||x_l||_p sign(x_j) U_j`` with
    ``U_j ~ Bernoulli(|x_j| / ||x_l||_p)``; identical to
    ``quantize_dither(x, bits=2, ...)``.  Lemma 5:
    ``E||Q(x) - x||^2 = sum_l (||x_l||_1 ||x_l||_p - ||x_l||_2^2)``.

    Parameters
    ----------
    x, block_size, norm, rng
        As in :func:`quantize_dither`.

    Returns
    -------
    ndarray of shape (q,), float64
        Ternary values ``{-N_l, 0, N_l}`` per block.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import quantize_blockp
    >>> v = quantize_blockp(np.array([3.0, -4.0]), rng=0)
    >>> sorted(set(np.abs(v).tolist()) - {0.0}) in ([], [5.0])
    True
    """
    return quantize_dither(x, 2, block_size=block_size, norm=norm, rng=rng)


def pack(
    x: Any,
    bits: int = 8,
    *,
    block_size: int | None = None,
    norm: Any = 2,
    rng: Any = None,
    scheme: str = "dither",
) -> bytes:
    """Quantize ``x`` and pack it into a self-describing wire payload.

    Parameters
    ----------
    x, bits, block_size, norm, rng
        As in :func:`quantize_dither`.
    scheme : {'dither', 'blockp'}
        Scheme id written in the header; ``'blockp'`` requires ``bits == 2``.

    Returns
    -------
    bytes
        ``32 + ceil(q/block) * itemsize + ceil(q * bits / 8)`` bytes
        (``itemsize`` = 4 for float32 input, 8 for float64); layout in
        ``docs/wire-format.md``.
    """
    arr = as_vector(x)
    bits = check_int(bits, "bits", low=2, high=16)
    scheme_id = _SCHEMES[check_in(scheme, "scheme", tuple(_SCHEMES))]
    if scheme_id == _quantize.SCHEME_BLOCKP and bits != 2:
        raise ValueError(f"Expected 'bits' == 2 for scheme 'blockp', got {bits}")
    code = norm_code(norm)
    gen = as_rng(rng)
    return _quantize.encode(arr, scheme_id, bits, code, effective_block(block_size, arr.shape[0]), gen)


def _as_payload(payload: Any) -> memoryview:
    try:
        view = memoryview(payload)
    except TypeError as exc:
        raise TypeError(f"Expected 'payload' to be bytes-like, got {type(payload).__name__}") from exc
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B")


def unpack(payload: Any, *, out: np.ndarray | None = None) -> np.ndarray:
    """Decode a payload of any fedmm compressor (untrusted bytes).

    Parameters
    ----------
    payload : bytes-like
        Validated completely (header, size, norms, padding) before the output
        is written; nothing outside it is ever read.
    out : ndarray of shape (q,), float64, C-contiguous, optional
        Destination (avoids an allocation).

    Returns
    -------
    ndarray of shape (q,), float64

    Raises
    ------
    ValueError
        ``"malformed payload: <reason>"``.
    """
    return _quantize.decode(_as_payload(payload), out)


def wire_header(payload: Any) -> dict:
    """Validated header fields of a payload: version, scheme, value_nbytes, norm, bits, q, block."""
    return _quantize.read_header(_as_payload(payload))


# ---- the quantizer-spec faces: arguments already resolved (fedmm.compression's compressors) ----
def quantize_spec(x: Any, scheme: int, bits: int, norm: int, block: int, rng: Any) -> np.ndarray:
    """Fused quantize-and-dequantize of ``x`` with the C quantizer spec ``(scheme, bits, norm, block)``.

    The face :meth:`fedmm.compression.StochasticRounding.quantize` calls with
    its resolved parameters (:meth:`~fedmm.compression.StochasticRounding.quantizer_spec`);
    :func:`quantize_dither` checks and resolves user arguments first.

    Parameters
    ----------
    x : array_like of shape (q,), float32 or float64
        Converted by :func:`as_vector`.
    scheme : int
        :data:`SCHEME_DITHER` or :data:`SCHEME_BLOCKP`.
    bits : int in [2, 16]
    norm : int
        A :func:`norm_code`.
    block : int in [1, q]
        Coordinates per block (:func:`effective_block`).
    rng : seed, BitGenerator or numpy.random.Generator
        Its lock is held while the kernel runs.

    Returns
    -------
    ndarray of shape (q,), float64

    Raises
    ------
    ValueError
        An invalid spec, or ``x`` not finite.
    """
    return _quantize.quantize(as_vector(x), scheme, bits, norm, block, as_rng(rng))


def quantize_rows_spec(X: np.ndarray, scheme: int, bits: int, norm: int, block: int,
                       rngs: list) -> np.ndarray:
    """Row ``k`` is ``quantize_spec(X[k], scheme, bits, norm, block, rngs[k])``, in one compiled call.

    Parameters
    ----------
    X : ndarray of shape (m, q), float64, C-contiguous
    scheme, bits, norm, block : int
        As in :func:`quantize_spec`.
    rngs : list of numpy.random.Generator
        One per row; each row draws from its own generator under its lock.

    Returns
    -------
    ndarray of shape (m, q), float64
    """
    return _quantize.quantize_rows(X, scheme, bits, norm, block, list(rngs))


def pack_spec(x: Any, scheme: int, bits: int, norm: int, block: int, rng: Any) -> bytes:
    """Quantize ``x`` with the C quantizer spec ``(scheme, bits, norm, block)`` into a wire payload.

    The face :meth:`fedmm.compression.StochasticRounding.encode` calls;
    :func:`pack` checks and resolves user arguments first.  ``unpack(pack_spec(x,
    ..., rng))`` equals ``quantize_spec(x, ..., rng2)`` bit for bit when ``rng2``
    starts from the same state.

    Parameters
    ----------
    x, scheme, bits, norm, block, rng
        As in :func:`quantize_spec`.

    Returns
    -------
    bytes
        The payload (layout in ``docs/wire-format.md``).
    """
    return _quantize.encode(as_vector(x), scheme, bits, norm, block, as_rng(rng))


def pack_identity(x: Any) -> bytes:
    """The identity payload of ``x``: the header and the raw little-endian values (float32 or float64).

    Parameters
    ----------
    x : array_like of shape (q,), float32 or float64
        Converted by :func:`as_vector`.

    Returns
    -------
    bytes
        ``32 + q * itemsize`` bytes; :func:`unpack` returns ``x`` as float64.
    """
    return _quantize.identity_encode(as_vector(x))
