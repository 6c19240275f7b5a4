# SPDX-License-Identifier: BSD-3-Clause
"""Cython wrappers of ``random.c`` and of ``engine.c``'s aggregation helpers: Philox streams,
sampling, weighted sums and squared distances.

Private module: :mod:`fedmm.kernels` and :mod:`fedmm.federation` expose the checked
public faces.  Arguments arrive already validated.
"""
import numpy as np

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uint64_t

from fedmm.fedmm_kernels cimport *

include "bitgen.pxi"
include "status.pxi"

cnp.import_array()




def philox_draws(const uint64_t[::1] key, const uint64_t[::1] counter, str kinds):
    """Draws of the C Philox replica from ``(key, counter)``: one per letter of
    ``kinds`` ('q' uint64, 'l' uint32, 'd' double), as a list (test helper)."""
    cdef fedmm_philox_t state
    fedmm_philox_seek(&state, &key[0], &counter[0])
    out = []
    for kind in kinds:
        if kind == "q":
            out.append(fedmm_philox_next_uint64(&state))
        elif kind == "l":
            out.append(fedmm_philox_next_uint32(&state))
        elif kind == "d":
            out.append(fedmm_philox_next_double(&state))
        else:
            raise ValueError(f"Expected 'kinds' made of 'q', 'l', 'd', got {kind!r}")
    return out


def sample_without_replacement(object generator, int64_t n, int64_t b):
    """``b`` distinct indices of ``range(n)`` drawn from ``generator`` (``0 <= b <= n``)."""
    cdef cnp.ndarray out = np.empty(b, dtype=np.int64)
    if b == 0:
        return out
    cdef int64_t[::1] out_v = out
    cdef int64_t[::1] work = np.empty(n, dtype=np.int64)
    cdef fedmm_bitgen_t *rng = _bitgen(generator.bit_generator)
    cdef int status
    with generator.bit_generator.lock, nogil:
        status = fedmm_sample_without_replacement(rng, n, b, &out_v[0], &work[0])
    check_status(status, "sample_without_replacement", {FEDMM_EINVAL: f"Expected 0 <= b <= n, got n={n}, b={b}"})
    return out


def philox_sample_without_replacement(const uint64_t[::1] key, uint64_t t, int64_t n, int64_t b):
    """:func:`sample_without_replacement` from the stream ``Philox(key)`` at counter ``(0, t, 0, 0)``.

    Equal to ``sample_without_replacement(RoundStream.at(t), n, b)`` without
    building a NumPy generator state (the server's per-round selection).
    """
    cdef cnp.ndarray out = np.empty(b, dtype=np.int64)
    if b == 0:
        return out
    cdef int64_t[::1] out_v = out
    cdef int64_t[::1] work = np.empty(n, dtype=np.int64)
    cdef fedmm_philox_t state
    cdef fedmm_bitgen_t bitgen
    cdef uint64_t counter[4]
    counter[0] = 0
    counter[1] = t
    counter[2] = 0
    counter[3] = 0
    fedmm_philox_seek(&state, &key[0], counter)
    fedmm_philox_bitgen(&state, &bitgen)
    if fedmm_sample_without_replacement(&bitgen, n, b, &out_v[0], &work[0]) != FEDMM_OK:
        raise ValueError(f"Expected 0 <= b <= n, got n={n}, b={b}")
    return out


def weighted_row_sum(list rows, const double[::1] weights, Py_ssize_t q):
    """``Σ_k weights[k] * rows[k]`` accumulated in list order (``fedmm_weighted_sum``).

    ``rows[k]``: float64 vectors of length ``q`` (copied once if not
    contiguous).  Returns a new vector.
    """
    cdef Py_ssize_t m = len(rows), k
    if weights.shape[0] != m:
        raise ValueError(f"Expected one weight per row ({m}), got {weights.shape[0]}")
    cdef cnp.ndarray out = np.empty(q, dtype=np.float64)
    cdef double[::1] out_v = out
    if q == 0:
        return out
    rows = [row if type(row) is np.ndarray and (<cnp.ndarray>row).dtype == np.float64
            and cnp.PyArray_IS_C_CONTIGUOUS(row) else np.ascontiguousarray(row, dtype=np.float64)
            for row in rows]
    cdef const double **ptr = <const double **>PyMem_Malloc(max(m, 1) * sizeof(double *))
    cdef cnp.ndarray arr
    if ptr == NULL:
        raise MemoryError()
    try:
        for k in range(m):
            arr = rows[k]
            if arr.ndim != 1 or arr.shape[0] != q:
                raise ValueError(f"Expected row {k} to be a vector of length {q}, got shape {(<object>arr).shape}")
            ptr[k] = <const double *>cnp.PyArray_DATA(arr)
        with nogil:
            fedmm_weighted_sum(m, q, &weights[0] if m > 0 else NULL, ptr, &out_v[0])
    finally:
        PyMem_Free(ptr)
    return out


def squared_distance(const double[::1] a, const double[::1] b):
    """``‖a − b‖²`` of two contiguous float64 vectors of equal length (``fedmm_squared_distance``)."""
    cdef Py_ssize_t n = a.shape[0]
    if b.shape[0] != n:
        raise ValueError(f"Expected vectors of equal length, got {n} and {b.shape[0]}")
    if n == 0:
        return 0.0
    cdef double out
    with nogil:
        out = fedmm_squared_distance(n, &a[0], &b[0])
    return out
