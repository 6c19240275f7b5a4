# SPDX-License-Identifier: BSD-3-Clause
"""Cython wrappers of ``random.c`` and ``rounds.c``: Philox streams, sampling, fused client rounds.

Private module: :mod:`fedmm.kernels` exposes the checked public faces, and
:class:`fedmm.algorithms.Client` calls :func:`dictionary_client_rounds` on its
batched path.  Arguments arrive already validated.
"""
import numpy as np
from numpy.linalg import LinAlgError

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cython.parallel cimport prange, threadid
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

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


cdef int _client_workspaces(list works, list iworks, Py_ssize_t k, size_t work_size, size_t iwork_size,
                            double **work_ptr, int64_t **iwork_ptr) except -1:
    cdef cnp.ndarray arr = works[k]
    if arr.dtype != np.float64 or arr.ndim != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(arr) \
            or <size_t>arr.shape[0] < work_size:
        raise ValueError(f"Expected works[{k}] to be at least {work_size} contiguous float64")
    work_ptr[k] = <double *>cnp.PyArray_DATA(arr)
    arr = iworks[k]
    if arr.dtype != np.int64 or arr.ndim != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(arr) \
            or <size_t>arr.shape[0] < iwork_size:
        raise ValueError(f"Expected iworks[{k}] to be at least {iwork_size} contiguous int64")
    iwork_ptr[k] = <int64_t *>cnp.PyArray_DATA(arr)
    return 0


cdef int _client_pointers(list datas, list codes, list keys, list Vs, list works, list iworks,
                          fedmm_blas_int p, fedmm_blas_int K, Py_ssize_t q, int64_t batch,
                          const double **data_ptr, int64_t *n_samples, double **code_ptr, double **V_ptr,
                          double **work_ptr, int64_t **iwork_ptr, const uint64_t **key_ptr) except -1:
    """Check every client's buffers against the shapes the kernel assumes and take their addresses."""
    cdef Py_ssize_t m = len(datas), k
    cdef size_t work_size = fedmm_dictionary_client_round_work(p, K, batch)
    cdef cnp.ndarray arr
    for name, items in (("codes", codes), ("keys", keys), ("Vs", Vs), ("works", works), ("iworks", iworks)):
        if items is not None and len(items) != m:
            raise ValueError(f"Expected one entry of '{name}' per client ({m}), got {len(items)}")
    for k in range(m):
        # memory safety: every buffer the kernel reads or writes has the shape it assumes
        arr = datas[k]
        _check_buffer(arr, 2, arr.shape[0] if arr.ndim >= 1 else -1, p, "datas", k)
        data_ptr[k] = <const double *>cnp.PyArray_DATA(arr)
        n_samples[k] = arr.shape[0]
        if not 1 <= batch <= n_samples[k]:
            raise ValueError(f"Expected a minibatch size in [1, {n_samples[k]}] for client #{k}, got {batch}")
        arr = codes[k]
        if arr is not None:
            _check_buffer(arr, 2, n_samples[k], K, "codes", k)
        code_ptr[k] = NULL if arr is None else <double *>cnp.PyArray_DATA(arr)
        arr = Vs[k]
        _check_buffer(arr, 1, q, -1, "Vs", k)
        V_ptr[k] = <double *>cnp.PyArray_DATA(arr)
        if works is None:  # the caller supplies per-thread workspaces
            work_ptr[k] = NULL
            iwork_ptr[k] = NULL
        else:
            _client_workspaces(works, iworks, k, work_size,
                               fedmm_dictionary_client_round_iwork(K, batch, n_samples[k]), work_ptr, iwork_ptr)
        arr = keys[k]
        if arr.dtype != np.uint64 or arr.ndim != 1 or arr.shape[0] != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(arr):
            raise ValueError(f"Expected keys[{k}] to be two contiguous uint64")
        key_ptr[k] = <const uint64_t *>cnp.PyArray_DATA(arr)
    return 0


cdef class _ClientTable:
    """The C view of ``m`` clients' buffers (pointers into arrays the caller keeps alive), plus one
    cache-line-padded Philox slot per client: states drawn from on different threads must not share
    a line (false sharing on every draw)."""
    cdef Py_ssize_t m
    cdef char *stream_mem
    cdef char *slots
    cdef void **ptrs
    cdef int64_t *n_samples
    cdef const double **data
    cdef double **codes
    cdef double **V
    cdef double **work
    cdef int64_t **iwork
    cdef const uint64_t **key

    def __cinit__(self, Py_ssize_t m):
        self.m = m
        self.stream_mem = <char *>PyMem_Malloc(max(m, 1) * _STREAM_SLOT + _CACHE_LINE)
        self.ptrs = <void **>PyMem_Malloc(6 * max(m, 1) * sizeof(void *))
        self.n_samples = <int64_t *>PyMem_Malloc(max(m, 1) * sizeof(int64_t))
        if self.stream_mem == NULL or self.ptrs == NULL or self.n_samples == NULL:
            raise MemoryError()
        self.slots = <char *>((<size_t>self.stream_mem + _CACHE_LINE - 1) & ~(<size_t>_CACHE_LINE - 1))
        self.data = <const double **>self.ptrs
        self.codes = <double **>(self.ptrs + m)
        self.V = <double **>(self.ptrs + 2 * m)
        self.work = <double **>(self.ptrs + 3 * m)
        self.iwork = <int64_t **>(self.ptrs + 4 * m)
        self.key = <const uint64_t **>(self.ptrs + 5 * m)

    def __dealloc__(self):
        PyMem_Free(self.stream_mem)
        PyMem_Free(self.ptrs)
        PyMem_Free(self.n_samples)

    cdef int fill(self, list datas, list codes, list keys, list Vs, list works, list iworks,
                  fedmm_blas_int p, fedmm_blas_int K, Py_ssize_t q, int64_t batch) except -1:
        return _client_pointers(datas, codes, keys, Vs, works, iworks, p, K, q, batch, self.data,
                                self.n_samples, self.codes, self.V, self.work, self.iwork, self.key)

    cdef inline void seek(self, Py_ssize_t slot, Py_ssize_t client, uint64_t t) noexcept nogil:
        """Slot ``slot`` positioned at the start of client ``client``'s round-``t`` stream."""
        cdef uint64_t counter[4]
        counter[0] = 0
        counter[1] = t
        counter[2] = 0
        counter[3] = 0
        fedmm_philox_seek(_slot_philox(self.slots, slot), self.key[client], counter)
        fedmm_philox_bitgen(_slot_philox(self.slots, slot), _slot_bitgen(self.slots, slot))


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
    cdef int64_t[::1] n_bad = np.zeros(m, dtype=np.int64)
    cdef int[::1] status = np.zeros(m, dtype=np.intc)
    cdef _ClientTable table = _ClientTable(m)
    table.fill(datas, codes, keys, Vs, works, iworks, p, K, q, batch)
    for k in range(m):
        table.seek(k, k, t)
    for k in prange(m, nogil=True, num_threads=n_threads, schedule="dynamic"):
        status[k] = fedmm_dictionary_client_round(
            p, K, &D[0, 0], p, lam, tol, max_iter, method, table.data[k], table.n_samples[k], batch,
            table.codes[k], _slot_bitgen(table.slots, k), space, &ref[0], eta, table.V[k], v_step, scheme,
            bits, norm, block, &values_v[k, 0], &n_bad[k], table.work[k], table.iwork[k], &_BLAS)
    for k in range(m):
        if status[k] != FEDMM_OK:
            raise ValueError(f"dictionary client round failed for client #{k}: "
                             f"{fedmm_strerror(status[k]).decode()}")
    return values, int(np.sum(n_bad))


cdef Py_ssize_t _padded(size_t n) noexcept:
    """``n`` 8-byte items rounded up to whole ``_CACHE_LINE`` blocks."""
    cdef size_t per_line = _CACHE_LINE // 8
    return <Py_ssize_t>((n + per_line - 1) // per_line * per_line)


def _aligned_empty(shape, dtype):
    """An uninitialised C-ordered array whose data starts on a ``_CACHE_LINE`` boundary."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(size + _CACHE_LINE, dtype=np.uint8)
    start = (-raw.ctypes.data) % _CACHE_LINE
    return raw[start:start + size].view(dtype).reshape(shape)


cdef inline double _seconds() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)  # the clock of time.perf_counter on Linux
    return ts.tv_sec + 1e-9 * ts.tv_nsec


def dictionary_fedmm_rounds(double[::1, :] D, double[::1] theta, double[::1] theta_prev, S, double[::1] V_server,
                            double lam, double tol, int max_iter, int method, list datas, list codes, list keys,
                            list Vs, int space, double eta, double v_step, int scheme, int bits, int norm,
                            Py_ssize_t block, int64_t batch,
                            const uint64_t[::1] server_key, int64_t count, double p_active,
                            const double[::1] weights, uint64_t t0, const double[::1] gammas, double alpha,
                            bint project, int n_threads, double max_seconds=float("inf")):
    """Whole FedMM rounds ``t0, …, t0 + R − 1`` (``R = len(gammas)``) of dictionary learning, in one call.

    Per round ``t``: the server's selection (``count`` clients drawn by
    ``fedmm_sample_without_replacement`` from ``Philox(server_key)`` at
    counter ``(0, t, 0, 0)``, sorted; ``count < 0``: independent coins
    ``u_i < p_active`` from that stream), every selected client's
    ``fedmm_dictionary_client_round`` on ``n_threads`` OpenMP threads (client
    buffers as in :func:`dictionary_client_rounds`, ``datas`` etc. listing all
    ``n`` clients), then ``fedmm_dictionary_server_round`` with
    ``weights[i] = μ_i / p`` and step ``gammas[r]``.  The server state ``D``
    (``θ`` column-major), ``theta`` (row-major), ``S`` (S-space; None in
    Θ-space) and ``V_server`` is updated in place; ``theta_prev`` receives
    ``θ`` before the last round.  The call stops after the first round that
    ends more than ``max_seconds`` after it started (at least one round runs),
    so that the caller gets control back at a bounded interval.  Returns
    ``(active, n_active, dist, seconds, n_unconverged)``, one row per round
    run: the selected clients of round ``r`` in
    ``active[r, :n_active[r]]`` (increasing), ``dist[r] = (‖Ŝ_{t+1} − Ŝ_t‖²,
    ‖θ_{t+1} − θ_t‖²)``, ``seconds[r]`` the round's wall time, and the number
    of LASSO columns that hit ``max_iter``.
    """
    cdef fedmm_blas_int p = D.shape[0], K = D.shape[1]
    cdef Py_ssize_t n = len(datas), R = gammas.shape[0], r, k, i, j
    cdef Py_ssize_t q = K * K + p * K if space == FEDMM_SPACE_STATISTIC else p * K
    cdef double[::1] S_v
    cdef double *S_ptr = NULL
    if space == FEDMM_SPACE_STATISTIC:
        S_v = S
        if S_v.shape[0] != q:
            raise ValueError(f"Expected 'S' of length {q}, got {S_v.shape[0]}")
        S_ptr = &S_v[0]
    if theta.shape[0] != p * K or theta_prev.shape[0] != p * K or V_server.shape[0] != q:
        raise ValueError(f"Expected 'theta', 'theta_prev' of length {p * K} and 'V_server' of length {q}")
    if weights.shape[0] != n or server_key.shape[0] != 2 or n == 0:
        raise ValueError(f"Expected one weight per client ({n}) and a two-word server key")
    if count > n:
        raise ValueError(f"Expected 'count' <= {n}, got {count}")
    cdef Py_ssize_t m_max = n if count < 0 else count
    active = np.zeros((R, max(n, 1)), dtype=np.int64)
    n_active = np.zeros(R, dtype=np.int64)
    dist = np.zeros((R, 2), dtype=np.float64)
    seconds = np.zeros(R, dtype=np.float64)
    cdef int64_t[:, ::1] active_v = active
    cdef int64_t[::1] n_active_v = n_active
    cdef double[:, ::1] dist_v = dist
    cdef double[::1] seconds_v = seconds
    cdef double[:, ::1] values = np.empty((max(m_max, 1), q), dtype=np.float64)
    cdef double[::1] w_sel = np.empty(max(m_max, 1), dtype=np.float64)
    cdef int64_t[::1] sel = np.empty(max(n, 1), dtype=np.int64)
    cdef int64_t[::1] sel_work = np.empty(max(n, 1), dtype=np.int64)
    cdef int64_t[::1] n_bad = np.zeros(max(m_max, 1), dtype=np.int64)
    cdef int[::1] status = np.zeros(max(m_max, 1), dtype=np.intc)
    cdef double[::1] server_work = np.empty(fedmm_dictionary_server_round_work(p, K, m_max), dtype=np.float64)
    cdef fedmm_blas_int[::1] server_iwork = np.empty(max(<Py_ssize_t>fedmm_project_psd_iwork(K), 1),
                                                     dtype=np.intc)
    cdef _ClientTable table = _ClientTable(n)
    table.fill(datas, codes, keys, Vs, None, None, p, K, q, batch)
    # Scratch memory per thread, not per client (nothing carries over between rounds): the threads'
    # working sets stay small enough for their caches.  Rows padded to whole cache-line pairs.
    n_threads = max(1, n_threads)
    cdef Py_ssize_t work_stride = _padded(fedmm_dictionary_client_round_work(p, K, batch))
    cdef Py_ssize_t iwork_stride = _padded(max(fedmm_dictionary_client_round_iwork(K, batch, table.n_samples[i])
                                               for i in range(n)))
    cdef double[:, ::1] thread_work = _aligned_empty((n_threads, work_stride), np.float64)
    cdef int64_t[:, ::1] thread_iwork = _aligned_empty((n_threads, iwork_stride), np.int64)
    cdef int tid
    cdef fedmm_philox_t server_state
    cdef fedmm_bitgen_t server_bitgen
    cdef uint64_t counter[4]
    cdef int64_t m = 0, total_bad = 0, tmp
    cdef int failed = FEDMM_OK, server_status = FEDMM_OK
    cdef Py_ssize_t failed_client = -1
    cdef uint64_t t
    cdef double clock, started
    cdef Py_ssize_t n_run = 0
    with nogil:
        clock = _seconds()
        started = clock
        for r in range(R):
            t = t0 + r
            # Algorithm 2 line 2: the active clients, as Server.select draws them
            counter[0] = 0
            counter[1] = t
            counter[2] = 0
            counter[3] = 0
            fedmm_philox_seek(&server_state, &server_key[0], counter)
            if count >= 0:
                fedmm_philox_bitgen(&server_state, &server_bitgen)
                fedmm_sample_without_replacement(&server_bitgen, n, count, &sel[0], &sel_work[0])
                m = count
                for k in range(1, m):  # insertion sort: the ids in increasing order
                    tmp = sel[k]
                    j = k - 1
                    while j >= 0 and sel[j] > tmp:
                        sel[j + 1] = sel[j]
                        j = j - 1
                    sel[j + 1] = tmp
            else:
                m = 0
                for i in range(n):
                    if fedmm_philox_next_double(&server_state) < p_active:
                        sel[m] = i
                        m = m + 1
            for k in range(m):
                table.seek(k, sel[k], t)
                w_sel[k] = weights[sel[k]]
                n_bad[k] = 0
                status[k] = FEDMM_OK
            # lines 5-11 on every active client
            for k in prange(m, num_threads=n_threads, schedule="dynamic"):
                tid = threadid()
                status[k] = fedmm_dictionary_client_round(
                    p, K, &D[0, 0], p, lam, tol, max_iter, method, table.data[sel[k]], table.n_samples[sel[k]],
                    batch, table.codes[sel[k]], _slot_bitgen(table.slots, k), space,
                    S_ptr if space == FEDMM_SPACE_STATISTIC else &theta[0], eta, table.V[sel[k]], v_step,
                    scheme, bits, norm, block, &values[k, 0], &n_bad[k], &thread_work[tid, 0],
                    &thread_iwork[tid, 0], &_BLAS)
            for k in range(m):
                total_bad = total_bad + n_bad[k]
                if status[k] != FEDMM_OK and failed == FEDMM_OK:
                    failed = status[k]
                    failed_client = sel[k]
            if failed != FEDMM_OK:
                break
            # lines 13-17, then T for the next round's line 4
            memcpy(&theta_prev[0], &theta[0], p * K * sizeof(double))
            server_status = fedmm_dictionary_server_round(
                p, K, space, m, &w_sel[0], &values[0, 0], gammas[r], alpha, eta, project, S_ptr,
                &V_server[0], &theta[0], &D[0, 0], &dist_v[r, 0], &server_work[0], &server_iwork[0], &_BLAS)
            if server_status != FEDMM_OK:
                break
            for k in range(m):
                active_v[r, k] = sel[k]
            n_active_v[r] = m
            seconds_v[r] = _seconds() - clock
            clock = clock + seconds_v[r]
            n_run = r + 1
            if clock - started > max_seconds:
                break
    if failed != FEDMM_OK:
        raise ValueError(f"dictionary client round failed for client #{failed_client} at round {t}: "
                         f"{fedmm_strerror(failed).decode()}")
    if server_status == FEDMM_ENONFINITE:
        raise ValueError(f"Expected a finite server state at round {t} (NaN or inf in the server step)")
    if server_status == FEDMM_ELAPACK:
        raise LinAlgError(f"FedMM server step at round {t}: LAPACK failed (eigensolver, or A + 2*eta*I "
                          "not positive definite)")
    if server_status != FEDMM_OK:
        raise ValueError(f"FedMM server step at round {t}: {fedmm_strerror(server_status).decode()}")
    return active[:n_run], n_active[:n_run], dist[:n_run], seconds[:n_run], int(total_bad)


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
