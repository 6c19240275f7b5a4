# SPDX-License-Identifier: BSD-3-Clause
"""Unbiased compressors for client messages and their wire format.

Every compressor ``C`` satisfies assumption A6 of the FedEM paper
(Dieuleveut et al., 2021): ``E[C(x)] = x`` and
``E||C(x) - x||^2 <= ω(q) ||x||^2`` for every ``x`` in ``R^q`` (the paper's ``ω``, given by
:meth:`Compressor.variance_bound`).

* :class:`Identity` -- no compression, ``variance_bound(q) = 0``.
* :class:`BlockQuantizer` -- block-p quantization (FedEM, Appendix B).
* :class:`StochasticRounding` -- random dithering with ``s = 2**(bits-1) - 1``
  levels (QSGD; FedEM Section 2).

Each has ``quantize(x, rng)`` (fused, returns float64 values, for simulation),
``encode(x, rng) -> bytes`` (the wire payload), ``decode(payload) -> ndarray``,
``variance_bound(q)`` and ``payload_nbytes(q)``.  ``decode(encode(x, rng))`` equals
``quantize(x, rng2)`` bit for bit when ``rng2`` starts from the same state.
``x`` is a 1-D float32 or float64 array in any memory layout (strided input
is copied once).  The byte layout is documented in ``docs/wire-format.md``;
the C kernels (``quantize.c`` quantizes and packs, ``wire.c`` validates and
decodes) write and read it.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from fedmm import kernels
from fedmm._validation import as_rng, check_int
from fedmm.kernels import as_vector, effective_block, norm_code, unpack

__all__ = ["Compressor", "Identity", "BlockQuantizer", "StochasticRounding", "decode",
           "dither_variance_bound"]

#: Size in bytes of the fixed payload header.
HEADER_NBYTES = 32

_NORM_L2 = 1


def _itemsize(dtype: Any) -> int:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"Expected 'dtype' float32 or float64, got {dt}")
    return dt.itemsize


def decode(payload: Any) -> np.ndarray:
    """Decode a payload of any fedmm compressor into a float64 vector.

    Parameters
    ----------
    payload : bytes-like
        Untrusted bytes; header, size, norms and padding are validated before
        anything is written, and nothing outside ``payload`` is read.

    Returns
    -------
    ndarray of shape (q,), float64

    Raises
    ------
    TypeError
        If ``payload`` is not bytes-like.
    ValueError
        ``"malformed payload: <reason>"``.

    Examples
    --------
    A block-2 quantized vector: each coordinate becomes ``±‖x‖₂`` or ``0``.

    >>> import numpy as np
    >>> payload = BlockQuantizer(block_size=4).encode(np.array([3.0, -4.0, 0.0, 0.0]), rng=0)
    >>> decode(payload)
    array([ 5., -5.,  0.,  0.])
    >>> decode(payload[:-1])
    Traceback (most recent call last):
    ...
    ValueError: malformed payload: payload size does not match its header
    """
    return unpack(payload)


class Compressor(ABC):
    """Common interface of the unbiased compressors (see the module docstring)."""

    @abstractmethod
    def quantize(self, x: Any, rng: Any = None) -> np.ndarray:
        """``Quant(x)`` as float64 values (the simulation path, no packing)."""

    @abstractmethod
    def encode(self, x: Any, rng: Any = None) -> bytes:
        """``Quant(x)`` packed into a self-describing payload (docs/wire-format.md)."""

    def quantize_many(self, X: np.ndarray, rngs: list) -> np.ndarray:
        """``quantize`` of every row: row ``k`` is ``quantize(X[k], rngs[k])`` bit for bit.

        Parameters
        ----------
        X : ndarray of shape (m, q), float64
            One message per row (several clients' messages of one round).
        rngs : list of m numpy.random.Generator
            Each row's own generator (advanced as ``quantize`` would).

        Returns
        -------
        ndarray of shape (m, q), float64
        """
        if len(rngs) != len(X):
            raise ValueError(f"Expected one generator per row of 'X' ({len(X)}), got {len(rngs)}")
        return np.array([self.quantize(x, rng) for x, rng in zip(X, rngs)], dtype=np.float64).reshape(np.shape(X))

    def decode(self, payload: Any) -> np.ndarray:
        """Decode any fedmm payload (its header says which scheme); see :func:`decode`."""
        return decode(payload)

    @abstractmethod
    def variance_bound(self, q: int) -> float:
        """Variance constant of assumption A4: ``E‖Quant(x) − x‖² ≤ ω‖x‖²`` for length ``q``."""

    @abstractmethod
    def payload_nbytes(self, q: int, dtype: Any = np.float64) -> int:
        """Exact size in bytes of :meth:`encode`'s payload for a length-``q`` vector."""

    def quantizer_spec(self, q: int) -> tuple[int, int, int, int] | None:
        """What the compiled round engine needs to run this compressor on length-``q`` messages.

        Returns ``(scheme, bits, norm, block)`` (the fields of the C
        ``fedmm_quantizer_t``) when the compiled kernels implement the
        compressor exactly (``quantize`` equal bit for bit), or None: then
        rounds that use it run on the Python backend (``encode``/``decode``).
        A compressor written in Python returns None (the default).
        """
        return None


class Identity(Compressor):
    """No compression: ``C(x) = x``, ``variance_bound(q) = 0``.

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
        arr = as_vector(x)
        if not np.isfinite(arr).all():
            raise ValueError("Expected 'x' to contain only finite values (no NaN or inf)")
        return arr.astype(np.float64, copy=True)

    def encode(self, x: Any, rng: Any = None) -> bytes:
        """Header + the raw little-endian values of ``x`` (float32 or float64)."""
        return kernels.pack_identity(x)

    def variance_bound(self, q: int) -> float:
        """0: the identity adds no variance."""
        check_int(q, "q", low=1)
        return 0.0

    def payload_nbytes(self, q: int, dtype: Any = np.float64) -> int:
        """``32 + q * itemsize`` bytes (itemsize 8 for float64, 4 for float32 input)."""
        q = check_int(q, "q", low=1)
        return HEADER_NBYTES + q * _itemsize(dtype)

    def quantizer_spec(self, q: int) -> tuple[int, int, int, int]:
        """``(SCHEME_IDENTITY, 0, 0, 0)``: the compiled engine copies the message."""
        check_int(q, "q", low=1)
        return (0, 0, 0, 0)

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
    one norm per block (float32 for float32 input, float64 otherwise).

    Parameters
    ----------
    bits : int in [2, 16]
        Bits per coordinate on the wire (the FedMM experiments use 8).
    norm : {2, 'inf'}
        Norm used to scale each block.
    block_size : int or None
        Coordinates per block; ``None`` = one block for the whole vector.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.compression import StochasticRounding
    >>> c = StochasticRounding(bits=8)
    >>> x = np.linspace(-1.0, 1.0, 5)
    >>> bool(np.array_equal(c.decode(c.encode(x, rng=7)), c.quantize(x, rng=7)))
    True
    >>> c.payload_nbytes(5)
    45
    """

    _scheme_id = kernels.SCHEME_DITHER

    def __init__(self, bits: int = 8, norm: Any = 2, block_size: int | None = None) -> None:
        self.bits = check_int(bits, "bits", low=2, high=16)
        self.norm = norm
        self._norm_code = norm_code(norm)
        self.block_size = None if block_size is None else check_int(block_size, "block_size", low=1)

    def _effective_block(self, q: int) -> int:
        return q if self.block_size is None else min(self.block_size, q)

    @property
    def levels(self) -> int:
        """Number of rounding levels ``s = 2**(bits-1) - 1``."""
        return (1 << (self.bits - 1)) - 1

    def quantize(self, x: Any, rng: Any = None) -> np.ndarray:
        """Fused quantize-and-dequantize: the float64 values a receiver decodes.

        Parameters
        ----------
        x : array_like of shape (q,), float32 or float64
        rng : None, int seed or numpy.random.Generator

        Returns
        -------
        ndarray of shape (q,), float64
        """
        arr = as_vector(x)  # parameters were checked by __init__
        return kernels.quantize_spec(arr, self._scheme_id, self.bits, self._norm_code,
                                     self._effective_block(arr.shape[0]), as_rng(rng))

    def quantize_many(self, X: np.ndarray, rngs: list) -> np.ndarray:
        """``quantize`` of every row in one compiled call (see :meth:`Compressor.quantize_many`)."""
        if not (type(X) is np.ndarray and X.ndim == 2 and X.dtype == np.float64 and X.flags.c_contiguous
                and X.shape[1] > 0 and all(type(r) is np.random.Generator for r in rngs)):
            return super().quantize_many(X, rngs)
        if len(rngs) != X.shape[0]:
            raise ValueError(f"Expected one generator per row of 'X' ({X.shape[0]}), got {len(rngs)}")
        return kernels.quantize_rows_spec(X, self._scheme_id, self.bits, self._norm_code,
                                          self._effective_block(X.shape[1]), list(rngs))

    def encode(self, x: Any, rng: Any = None) -> bytes:
        """Quantize ``x`` and pack it into a self-describing payload of
        :meth:`payload_nbytes` bytes."""
        arr = as_vector(x)
        return kernels.pack_spec(arr, self._scheme_id, self.bits, self._norm_code,
                                 self._effective_block(arr.shape[0]), as_rng(rng))

    def variance_bound(self, q: int) -> float:
        """Variance constant of A6 for vectors of length ``q`` (see :func:`dither_variance_bound`)."""
        q = check_int(q, "q", low=1)
        return dither_variance_bound(effective_block(self.block_size, q), self.levels, self._norm_code)

    def payload_nbytes(self, q: int, dtype: Any = np.float64) -> int:
        """``32 + m * itemsize + ceil(q * bits / 8)`` with ``m = ceil(q / block)``."""
        q = check_int(q, "q", low=1)
        block = effective_block(self.block_size, q)
        m = -(-q // block)
        return HEADER_NBYTES + m * _itemsize(dtype) + -(-q * self.bits // 8)

    def quantizer_spec(self, q: int) -> tuple[int, int, int, int]:
        """``(scheme, bits, norm code, effective block)`` of the C quantizer for length ``q``."""
        q = check_int(q, "q", low=1)
        return (int(self._scheme_id), int(self.bits), int(self._norm_code), int(self._effective_block(q)))

    def __repr__(self) -> str:
        return f"StochasticRounding(bits={self.bits}, norm={self.norm!r}, block_size={self.block_size!r})"


class BlockQuantizer(StochasticRounding):
    """Block-p quantization (FedEM Appendix B, eq. (13)-(14)).

    Per block ``x_l``, ``N = ||x_l||_p`` and each coordinate becomes
    ``N sign(x_j) U_j`` with ``U_j ~ Bernoulli(|x_j| / N)``: ternary values,
    2 bits per coordinate on the wire plus one norm per block.  This is
    stochastic rounding with one level (``bits = 2``, ``s = 1``).

    Parameters
    ----------
    block_size : int or None
        Coordinates per block ``q_l`` (the last block may be shorter);
        ``None`` = one block.
    norm : {2, 'inf'}
        The ``p`` of block-p quantization.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.compression import BlockQuantizer
    >>> c = BlockQuantizer(block_size=256)
    >>> c.payload_nbytes(1000), round(c.variance_bound(1000), 6)
    (314, 15.0)
    """

    _scheme_id = kernels.SCHEME_BLOCKP

    def __init__(self, block_size: int | None = None, norm: Any = 2) -> None:
        super().__init__(bits=2, norm=norm, block_size=block_size)

    def __repr__(self) -> str:
        return f"BlockQuantizer(block_size={self.block_size!r}, norm={self.norm!r})"


def dither_variance_bound(block: int, levels: int, norm_code: int) -> float:
    """Variance constant of stochastic rounding with blocks of at most ``block`` coordinates.

    With ``a_j = s|x_j|/N`` and ``f_j = a_j - floor(a_j)``, each block has
    ``E||Q(x_l) - x_l||^2 = (N/s)^2 sum_j f_j (1 - f_j)``.  Since
    ``f(1-f) <= min(a, 1/4)`` the block error is at most
    ``min(N ||x_l||_1 / s, q_l N^2 / (4 s^2))``, and with
    ``||x||_1 ||x||_2 <= sqrt(q) ||x||_2^2``,
    ``||x||_1 ||x||_inf <= (1 + sqrt(q))/2 ||x||_2^2`` (tight) and
    ``||x||_inf <= ||x||_2``:

    * ``r = 2``:   ``omega = min(sqrt(q_l)/s, q_l/(4 s^2))`` (QSGD's bound, with 1/4);
    * ``r = inf``: ``omega = min((1 + sqrt(q_l))/(2 s), q_l/(4 s^2))``.

    For ``s = 1`` (block-p) ``f_j = a_j`` and Lemma 5 gives the exact error
    ``sum_l (N_l ||x_l||_1 - ||x_l||^2)``, hence ``omega = sqrt(q_l) - 1``
    (p = 2, the paper's constant) and ``(sqrt(q_l) - 1)/2`` (p = inf).
    ``q_l`` is the largest block, ``min(block_size, q)``.

    Parameters
    ----------
    block : int >= 1
        ``q_l``, the number of coordinates of the largest block.
    levels : int >= 1
        ``s``, the number of positive levels (``2**(bits − 1) − 1``; 1 for block-p).
    norm_code : {1, 2}
        The block norm: 1 for the 2-norm, 2 for the max-norm.

    Returns
    -------
    float
        ``ω``, finite and non-negative.

    Raises
    ------
    TypeError, ValueError
        For a non-integer argument, ``block`` or ``levels`` below 1, or another ``norm_code``.

    Examples
    --------
    >>> dither_variance_bound(16, 1, 1)  # block-p, 2-norm: sqrt(16) - 1
    3.0
    """
    block = check_int(block, "block", low=1)
    levels = check_int(levels, "levels", low=1)
    norm_code = check_int(norm_code, "norm_code", low=1, high=2)
    root = math.sqrt(block)
    if levels == 1:
        return root - 1.0 if norm_code == _NORM_L2 else (root - 1.0) / 2.0
    first = root / levels if norm_code == _NORM_L2 else (1.0 + root) / (2.0 * levels)
    return min(first, block / (4.0 * levels * levels))
