# SPDX-License-Identifier: BSD-3-Clause
"""Cython wrappers of ``random.c`` and ``rounds.c``: Philox streams, sampling, fused client rounds.

Private module: :mod:`fedmm.kernels` exposes the checked public faces, and
:class:`fedmm.algorithms.Client` calls :func:`dictionary_client_rounds` on its
batched path.  Arguments arrive already validated.
"""
import numpy as np

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cython.parallel cimport prange
from libc.stdint cimport int64_t, uint64_t

from fedmm_kernels cimport *

include "blas_table.pxi"
include "bitgen.pxi"

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
    if status != FEDMM_OK:
        raise ValueError(f"Expected 0 <= b <= n, got n={n}, b={b}")
    return out


cdef enum:
    _CACHE_LINE = 128  # two 64-byte lines: adjacent-line prefetchers pair them
    _STREAM_SLOT = 256  # philox state in the first 128 bytes, its bitgen_t in the next 128


if sizeof(fedmm_philox_t) > _CACHE_LINE or sizeof(fedmm_bitgen_t) > _STREAM_SLOT - _CACHE_LINE:
    raise ImportError("fedmm._rounds: generator state larger than its cache-line slot")


cdef inline fedmm_philox_t *_slot_philox(char *slots, Py_ssize_t k) noexcept nogil:
    return <fedmm_philox_t *>(slots + k * _STREAM_SLOT)


cdef inline fedmm_bitgen_t *_slot_bitgen(char *slots, Py_ssize_t k) noexcept nogil:
    return <fedmm_bitgen_t *>(slots + k * _STREAM_SLOT + _CACHE_LINE)


cdef int _check_buffer(cnp.ndarray arr, int ndim, Py_ssize_t rows, Py_ssize_t cols, str name,
                       Py_ssize_t k) except -1:
    """``arr`` is a C-contiguous float64 array of shape (rows,) or (rows, cols) (writeable unless data)."""
    cdef bint ok = (arr.dtype == np.float64 and arr.ndim == ndim and cnp.PyArray_IS_C_CONTIGUOUS(arr)
                    and arr.shape[0] == rows and (ndim == 1 or arr.shape[1] == cols)
                    and (name == "datas" or cnp.PyArray_ISWRITEABLE(arr)))
    if not ok:
        shape = (<object>rows,) if ndim == 1 else (<object>rows, <object>cols)
        raise ValueError(f"Expected {name}[{k}] to be a C-contiguous float64 array of shape {shape}, "
                         f"got {arr.dtype} {(<object>arr).shape}")
    return 0


SPACES = {"statistic": FEDMM_SPACE_STATISTIC, "parameter": FEDMM_SPACE_PARAMETER}


def client_round_work_sizes(fedmm_blas_int p, fedmm_blas_int K, int64_t batch, int64_t n_samples):
    """``(doubles, int64s)`` of the workspaces one client's ``fedmm_dictionary_client_round`` needs."""
    return (int(fedmm_dictionary_client_round_work(p, K, batch)),
            int(fedmm_dictionary_client_round_iwork(K, batch, n_samples)))


def dictionary_client_rounds(const double[::1, :] D, double lam, double tol, int max_iter, int method,
                             list datas, list codes, list keys, uint64_t t, int space, const double[::1] ref,
                             double eta, list Vs, double v_step, int scheme, int bits, int norm, Py_ssize_t block,
                             int64_t batch, list works, list iworks, int n_threads):
    """One round of ``len(datas)`` dictionary-learning clients (``fedmm_dictionary_client_round``).

    Client ``k`` holds ``datas[k]`` (C-ordered float64 ``(N_k, p)``), its
    remembered codes ``codes[k]`` (C-ordered ``(N_k, K)``, updated in place;
    None: cold starts), its control variate ``Vs[k]`` (contiguous float64 of
    the message length: ``q = K*K + p*K`` in S-space, ``p*K`` in Θ-space
    (``space``, see ``SPACES``; ``ref`` is ``Ŝ_t`` or ``θ_t`` row-major, ``eta``
    the ridge weight of ``T``), updated in place), its Philox key ``keys[k]`` (two uint64;
    its stream starts at counter ``(0, t, 0, 0)``) and its own workspaces
    ``works[k]`` / ``iworks[k]`` (float64 / int64, sizes from
    :func:`client_round_work_sizes`; kept by the caller so that no round
    allocates or page-faults).  Clients run on ``n_threads`` threads (OpenMP,
    when the build has it).  Returns ``(values, n_unconverged)``: the
    ``(m, q)`` decoded messages and the number of LASSO columns that hit
    ``max_iter``.
    """
    cdef fedmm_blas_int p = D.shape[0], K = D.shape[1]
    cdef Py_ssize_t m = len(datas), k
    cdef Py_ssize_t q = K * K + p * K if space == FEDMM_SPACE_STATISTIC else p * K
    if ref.shape[0] != q:
        raise ValueError(f"Expected 'ref' of length {q}, got {ref.shape[0]}")
    cdef cnp.ndarray values = np.empty((m, q), dtype=np.float64)
    if m == 0:
        return values, 0
    cdef double[:, ::1] values_v = values
    cdef size_t work_size = fedmm_dictionary_client_round_work(p, K, batch)
    cdef int64_t[::1] n_bad = np.zeros(m, dtype=np.int64)
    cdef int[::1] status = np.zeros(m, dtype=np.intc)
    # Each client's generator state in its own cache lines: states drawn from on different threads
    # must not share a line (false sharing on every draw).
    cdef char *stream_mem = <char *>PyMem_Malloc(m * _STREAM_SLOT + _CACHE_LINE)
    cdef char *slots = <char *>((<size_t>stream_mem + _CACHE_LINE - 1) & ~(<size_t>_CACHE_LINE - 1))
    cdef void **ptrs = <void **>PyMem_Malloc(5 * m * sizeof(void *))
    cdef int64_t *n_samples = <int64_t *>PyMem_Malloc(m * sizeof(int64_t))
    cdef const double **data_ptr = <const double **>ptrs
    cdef double **code_ptr = <double **>(ptrs + m)
    cdef double **V_ptr = <double **>(ptrs + 2 * m)
    cdef double **work_ptr = <double **>(ptrs + 3 * m)
    cdef int64_t **iwork_ptr = <int64_t **>(ptrs + 4 * m)
    cdef uint64_t counter[4]
    cdef cnp.ndarray arr
    try:
        if stream_mem == NULL or ptrs == NULL or n_samples == NULL:
            raise MemoryError()
        counter[0] = 0
        counter[1] = t
        counter[2] = 0
        counter[3] = 0
        for k in range(m):
            # memory safety: every buffer the kernel reads or writes has the shape it assumes
            arr = datas[k]
            _check_buffer(arr, 2, arr.shape[0] if arr.ndim >= 1 else -1, p, "datas", k)
            data_ptr[k] = <const double *>cnp.PyArray_DATA(arr)
            n_samples[k] = arr.shape[0]
            arr = codes[k]
            if arr is not None:
                _check_buffer(arr, 2, n_samples[k], K, "codes", k)
            code_ptr[k] = NULL if arr is None else <double *>cnp.PyArray_DATA(arr)
            arr = Vs[k]
            _check_buffer(arr, 1, q, -1, "Vs", k)
            V_ptr[k] = <double *>cnp.PyArray_DATA(arr)
            arr = works[k]
            if <size_t>arr.shape[0] < work_size:
                raise ValueError(f"Expected works[{k}] of at least {work_size} doubles, got {arr.shape[0]}")
            work_ptr[k] = <double *>cnp.PyArray_DATA(arr)
            arr = iworks[k]
            if <size_t>arr.shape[0] < fedmm_dictionary_client_round_iwork(K, batch, n_samples[k]):
                raise ValueError(f"Expected iworks[{k}] of at least "
                                 f"{fedmm_dictionary_client_round_iwork(K, batch, n_samples[k])} int64, "
                                 f"got {arr.shape[0]}")
            iwork_ptr[k] = <int64_t *>cnp.PyArray_DATA(arr)
            arr = keys[k]
            if arr.dtype != np.uint64 or arr.ndim != 1 or arr.shape[0] != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(arr):
                raise ValueError(f"Expected keys[{k}] to be two contiguous uint64")
            fedmm_philox_seek(_slot_philox(slots, k), <const uint64_t *>cnp.PyArray_DATA(arr), counter)
            fedmm_philox_bitgen(_slot_philox(slots, k), _slot_bitgen(slots, k))
        for k in prange(m, nogil=True, num_threads=n_threads, schedule="dynamic"):
            status[k] = fedmm_dictionary_client_round(
                p, K, &D[0, 0], p, lam, tol, max_iter, method, data_ptr[k], n_samples[k], batch,
                code_ptr[k], _slot_bitgen(slots, k), space, &ref[0], eta, V_ptr[k], v_step, scheme, bits,
                norm, block,
                &values_v[k, 0], &n_bad[k], work_ptr[k], iwork_ptr[k], &_BLAS)
    finally:
        PyMem_Free(stream_mem)
        PyMem_Free(ptrs)
        PyMem_Free(n_samples)
    for k in range(m):
        if status[k] != FEDMM_OK:
            raise ValueError(f"dictionary client round failed for client #{k}: "
                             f"{fedmm_strerror(status[k]).decode()}")
    return values, int(np.sum(n_bad))


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
    """``‖a − b‖²`` of two contiguous float64 vectors of equal length (four partial sums)."""
    cdef Py_ssize_t n = a.shape[0], j
    if b.shape[0] != n:
        raise ValueError(f"Expected vectors of equal length, got {n} and {b.shape[0]}")
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, d0, d1, d2, d3
    with nogil:
        j = 0
        while j + 4 <= n:
            d0 = a[j] - b[j]
            d1 = a[j + 1] - b[j + 1]
            d2 = a[j + 2] - b[j + 2]
            d3 = a[j + 3] - b[j + 3]
            s0 += d0 * d0
            s1 += d1 * d1
            s2 += d2 * d2
            s3 += d3 * d3
            j += 4
        while j < n:
            d0 = a[j] - b[j]
            s0 += d0 * d0
            j += 1
    return (s0 + s1) + (s2 + s3)
