# SPDX-License-Identifier: BSD-3-Clause
"""Unbiased compressors for client messages and their wire format.

Every compressor ``C`` satisfies assumption A6 of the FedEM paper
(Dieuleveut et al., 2021): ``E[C(x)] = x`` and
``E||C(x) - x||^2 <= omega(q) ||x||^2`` for every ``x`` in ``R^q``.

* :class:`Identity` -- no compression, ``omega = 0``.
* :class:`BlockQuantizer` -- block-p quantization (FedEM, Appendix B).
* :class:`StochasticRounding` -- random dithering with ``s = 2**(bits-1) - 1``
  levels (QSGD; FedEM Section 2).

Each has ``quantize(x, rng)`` (fused, returns float64 values, for simulation),
``encode(x, rng) -> bytes`` (the wire payload), ``decode(payload) -> ndarray``,
``omega(q)`` and ``payload_nbytes(q)``.  ``decode(encode(x, rng))`` equals
``quantize(x, rng2)`` bit for bit when ``rng2`` starts from the same state.
The byte layout is documented in ``docs/wire-format.md``.
"""
from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from fedmm._validation import as_array, as_rng, check_in, check_int

__all__ = ["Compressor", "Identity", "BlockQuantizer", "StochasticRounding", "decode"]

#: Magic bytes opening every payload.
MAGIC = b"FMMQ"
#: Wire-format version written by this module.
FORMAT_VERSION = 1
#: Size in bytes of the fixed header.
HEADER_NBYTES = 32

SCHEME_IDENTITY = 0
SCHEME_BLOCKP = 1
SCHEME_DITHER = 2

NORM_NONE = 0
NORM_L2 = 1
NORM_LINF = 2

# < little-endian: magic, version, scheme, value itemsize, norm kind, bits,
# 7 reserved bytes, q (uint64), block size (uint64).
_HEADER = struct.Struct("<4sBBBBB7xQQ")
assert _HEADER.size == HEADER_NBYTES


def _as_vector(x: Any) -> np.ndarray:
    """Validate ``x`` (1-D, float32/float64, finite, non-empty); keep its dtype."""
    arr = as_array(x, "x", ndim=1, dtype=None)
    if arr.shape[0] == 0:
        raise ValueError("Expected 'x' with at least one element, got shape (0,)")
    return arr


def _norm_code(norm: Any) -> int:
    if isinstance(norm, str):
        check_in(norm.lower(), "norm", ("2", "l2", "inf", "linf"))
        return NORM_L2 if norm.lower() in ("2", "l2") else NORM_LINF
    if norm == 2:
        return NORM_L2
    if isinstance(norm, float) and math.isinf(norm) and norm > 0:
        return NORM_LINF
    raise ValueError(f"Expected 'norm' to be 2 or 'inf' (or numpy.inf), got {norm!r}")


def _itemsize(dtype: Any) -> int:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"Expected 'dtype' float32 or float64, got {dt}")
    return dt.itemsize


class Compressor:
    """Common interface of the unbiased compressors (see module docstring)."""

    def quantize(self, x: Any, rng: Any = None) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def encode(self, x: Any, rng: Any = None) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def decode(self, payload: bytes) -> np.ndarray:
        """Decode any fedmm payload (the header says which scheme it uses).

        Parameters
        ----------
        payload : bytes-like
            Untrusted bytes; validated completely before being read.

        Returns
        -------
        ndarray of shape (q,), float64

        Raises
        ------
        ValueError
            With the reason, when the payload is malformed.
        """
        return decode(payload)

    def omega(self, q: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def payload_nbytes(self, q: int, dtype: Any = np.float64) -> int:  # pragma: no cover
        raise NotImplementedError


class Identity(Compressor):
    """No compression: ``C(x) = x``, ``omega = 0``.

    The payload is the 32-byte header followed by the ``q`` values in the
    input's dtype (float32 or float64), little-endian.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.compression import Identity
    >>> c = Identity()
    >>> x = np.array([1.5, -2.0])
    >>> c.decode(c.encode(x))
    array([ 1.5, -2. ])
    >>> c.payload_nbytes(2)
    48
    """

    def quantize(self, x: Any, rng: Any = None) -> np.ndarray:
        """Return ``x`` as a new float64 array (``rng`` is accepted and unused)."""
        return np.array(_as_vector(x), dtype=np.float64, copy=True)

    def encode(self, x: Any, rng: Any = None) -> bytes:
        """Header + the raw little-endian values of ``x`` (float32 or float64)."""
        arr = _as_vector(x)
        header = _HEADER.pack(
            MAGIC, FORMAT_VERSION, SCHEME_IDENTITY, arr.dtype.itemsize, NORM_NONE, 0, arr.shape[0], 0
        )
        little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        return header + np.ascontiguousarray(little).tobytes()

    def omega(self, q: int) -> float:
        """0: the identity adds no variance."""
        check_int(q, "q", low=1)
        return 0.0

    def payload_nbytes(self, q: int, dtype: Any = np.float64) -> int:
        """``32 + q * itemsize`` bytes."""
        q = check_int(q, "q", low=1)
        return HEADER_NBYTES + q * _itemsize(dtype)

    def __repr__(self) -> str:
        return "Identity()"


class StochasticRounding(Compressor):
    """Random dithering (stochastic rounding) with ``s = 2**(bits-1) - 1`` levels.

    Per block ``x_l`` with norm ``N = ||x_l||_r`` (``r`` = 2 or inf), every
    coordinate becomes ``sign(x_j) N k_j / s`` where the level
    ``k_j = floor(s|x_j|/N + xi_j)``, ``xi_j ~ U[0, 1)`` (FedEM Section 2):
    ``k_j`` is ``floor(a_j)`` or ``floor(a_j) + 1`` with probability
    ``a_j - floor(a_j)``, ``a_j = s|x_j|/N``, so ``E[k_j] = a_j``.
    On the wire: one sign bit and ``bits - 1`` level bits per coordinate plus
    one norm per block.

    Parameters
    ----------
    bits : int in [2, 16]
        Bits per coordinate on the wire.
    norm : {2, 'inf'}
        Norm used to scale each block.
    block_size : int or None
        Coordinates per block; ``None`` = one block for the whole vector.
    """

    _scheme = SCHEME_DITHER

    def __init__(self, bits: int = 8, norm: Any = 2, block_size: int | None = None) -> None:
        self.bits = check_int(bits, "bits", low=2, high=16)
        self.norm = norm
        self._norm_code = _norm_code(norm)
        self.block_size = None if block_size is None else check_int(block_size, "block_size", low=1)

    @property
    def levels(self) -> int:
        """Number of rounding levels ``s = 2**(bits-1) - 1``."""
        return (1 << (self.bits - 1)) - 1

    def _block(self, q: int) -> int:
        return q if self.block_size is None else min(self.block_size, q)

    def quantize(self, x: Any, rng: Any = None) -> np.ndarray:
        """Fused quantize-and-dequantize: the float64 values a receiver decodes."""
        from fedmm import _quantize

        arr = _as_vector(x)
        gen = as_rng(rng)
        return _quantize.dither_quantize(arr, self.bits, self._block(arr.shape[0]), self._norm_code, gen)

    def encode(self, x: Any, rng: Any = None) -> bytes:
        """Quantize ``x`` and pack it into a self-describing payload."""
        from fedmm import _quantize

        arr = _as_vector(x)
        gen = as_rng(rng)
        return _quantize.dither_encode(
            arr, self.bits, self._block(arr.shape[0]), self._norm_code, gen, self._scheme
        )

    def omega(self, q: int) -> float:
        """Variance constant of A6 (see :func:`dither_omega`)."""
        q = check_int(q, "q", low=1)
        return dither_omega(self._block(q), self.levels, self._norm_code)

    def payload_nbytes(self, q: int, dtype: Any = np.float64) -> int:
        """``32 + m * itemsize + ceil(q * bits / 8)`` with ``m = ceil(q / block)``."""
        q = check_int(q, "q", low=1)
        block = self._block(q)
        m = -(-q // block)
        return HEADER_NBYTES + m * _itemsize(dtype) + -(-q * self.bits // 8)

    def __repr__(self) -> str:
        return f"StochasticRounding(bits={self.bits}, norm={self.norm!r}, block_size={self.block_size!r})"


class BlockQuantizer(StochasticRounding):
    """Block-p quantization (FedEM Appendix B, eq. (13)-(14)).

    Per block ``x_l``, ``N = ||x_l||_p`` and each coordinate becomes
    ``N sign(x_j) U_j`` with ``U_j ~ Bernoulli(|x_j| / N)``: ternary values,
    2 bits per coordinate on the wire plus one norm per block.  This is
    stochastic rounding with one level (``bits = 2``).

    Parameters
    ----------
    block_size : int or None
        Coordinates per block ``q_l`` (the last block may be shorter);
        ``None`` = one block.
    norm : {2, 'inf'}
        The ``p`` of block-p quantization.
    """

    _scheme = SCHEME_BLOCKP

    def __init__(self, block_size: int | None = None, norm: Any = 2) -> None:
        super().__init__(bits=2, norm=norm, block_size=block_size)

    def omega(self, q: int) -> float:
        """Lemma 5: ``max_l (sqrt(q_l) - 1)`` for p = 2, ``max_l (sqrt(q_l) - 1) / 2`` for inf."""
        q = check_int(q, "q", low=1)
        return dither_omega(self._block(q), 1, self._norm_code)

    def __repr__(self) -> str:
        return f"BlockQuantizer(block_size={self.block_size!r}, norm={self.norm!r})"


def dither_omega(block: int, levels: int, norm_code: int) -> float:
    """Variance constant of stochastic rounding for blocks of at most ``block`` coordinates.

    With ``a_j = s|x_j|/N`` and ``f_j`` its fractional part,
    ``E||Q(x) - x||^2 = (N/s)^2 sum_j f_j (1 - f_j)`` per block, and
    ``f(1-f) <= min(a, 1/4)``, so the block error is at most
    ``min(N ||x||_1 / s, q N^2 / (4 s^2))``.  With
    ``||x||_1 ||x||_2 <= sqrt(q) ||x||^2`` and
    ``||x||_1 ||x||_inf <= (1 + sqrt(q))/2 ||x||^2``:

    * ``r = 2``:   ``omega = min(sqrt(q)/s, q/(4 s^2))``;
    * ``r = inf``: ``omega = min((1 + sqrt(q))/(2 s), q/(4 s^2))``.

    For ``s = 1`` (block-p) ``f_j = a_j`` and Lemma 5 gives the exact error
    ``N ||x||_1 - ||x||^2``, hence ``sqrt(q) - 1`` (p = 2) and
    ``(sqrt(q) - 1)/2`` (p = inf).
    """
    root = math.sqrt(block)
    if levels == 1:
        return root - 1.0 if norm_code == NORM_L2 else (root - 1.0) / 2.0
    first = root / levels if norm_code == NORM_L2 else (1.0 + root) / (2.0 * levels)
    return min(first, block / (4.0 * levels * levels))


def decode(payload: Any) -> np.ndarray:
    """Decode a payload of any fedmm compressor into a float64 vector.

    Parameters
    ----------
    payload : bytes-like
        Untrusted bytes; every field and length is validated before use.

    Returns
    -------
    ndarray of shape (q,), float64

    Raises
    ------
    TypeError
        If ``payload`` is not bytes-like.
    ValueError
        With the reason, when the payload is malformed.
    """
    try:
        view = memoryview(payload).cast("B")
    except TypeError as exc:
        raise TypeError(f"Expected 'payload' to be bytes-like, got {type(payload).__name__}") from exc
    if view.nbytes < HEADER_NBYTES:
        raise ValueError(f"payload too short for the header: {view.nbytes} < {HEADER_NBYTES} bytes")
    magic, version, scheme, itemsize, norm, bits, q, block = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise ValueError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {version}, expected {FORMAT_VERSION}")
    if bytes(view[9:16]) != b"\0" * 7:
        raise ValueError("reserved header bytes 9..15 must be zero")
    if itemsize not in (4, 8):
        raise ValueError(f"bad value dtype code {itemsize}, expected 4 (float32) or 8 (float64)")
    if q < 1:
        raise ValueError("payload length q must be at least 1")
    if scheme == SCHEME_IDENTITY:
        if norm != NORM_NONE or bits != 0 or block != 0:
            raise ValueError("identity payload must have norm kind 0, bits 0 and block size 0")
        want = HEADER_NBYTES + q * itemsize
        if view.nbytes != want:
            raise ValueError(f"identity payload of q={q} must be {want} bytes, got {view.nbytes}")
        dt = np.dtype("<f4" if itemsize == 4 else "<f8")
        values = np.frombuffer(view, dtype=dt, count=q, offset=HEADER_NBYTES).astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError("identity payload holds non-finite values")
        return values
    from fedmm import _quantize

    return _quantize.decode(view)
