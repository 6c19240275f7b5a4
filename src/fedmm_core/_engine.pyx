# SPDX-License-Identifier: BSD-3-Clause
"""Cython face of ``engine.c``: compiled models and whole stretches of FedMM rounds.

Private module: :mod:`fedmm.kernels` re-exports :class:`CompiledModel`, the
model factories and :func:`run_rounds` as its public, documented faces.
"""
import numpy as np

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uint8_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from fedmm.fedmm_kernels cimport *

include "blas_table.pxi"
include "status.pxi"

cnp.import_array()

SPACES = {"statistic": FEDMM_SPACE_STATISTIC, "parameter": FEDMM_SPACE_PARAMETER}
MODES = {"select": FEDMM_MODE_SELECT, "compress": FEDMM_MODE_COMPRESS,
         "compress-local": FEDMM_MODE_COMPRESS_LOCAL}
ORACLES = {"minibatch": FEDMM_ORACLE_MINIBATCH, "full": FEDMM_ORACLE_FULL}

cdef enum:
    _CACHE_LINE = 128  # two 64-byte lines: adjacent-line prefetchers pair them


# the wording of this module's errors (status.pxi maps the codes to exceptions)
cdef dict _MESSAGES = {FEDMM_ELAPACK: "{what}: LAPACK failed ({reason})", FEDMM_ENONFINITE: "{what}: NaN or infinity"}


cdef int _raise_status(int status, str what) except -1:
    return check_status(status, what, _MESSAGES)


cdef class CompiledModel:
    """A surrogate model the compiled round engine can run (a ``fedmm_model_t``).

    Built by the factories of :mod:`fedmm.kernels` (:func:`dictionary_model`,
    :func:`sample_model`, ...), never directly.  It owns the model's C
    context and keeps alive every object the context points into.  Its
    methods evaluate the model's compiled callbacks without the GIL; the
    Python reference backend calls them, so that both backends compute
    with the very same code.

    Attributes
    ----------
    q : int
        Length of the flat statistic ``S``.
    d : int
        Length of the flat parameter (``model.theta_vector(theta)``).
    theta_size : int
        Length of the compiled parameter buffer: the flat parameter, then
        quantities derived from it (``theta_size >= d``).
    sample_size : int
        float64 values per data row.
    memory_size : int
        float64 values of per-sample client memory (0: none).
    """
    cdef fedmm_model_t model
    cdef void *ctx_mem
    cdef object keep  # Python objects the context points into
    cdef readonly str name

    def __cinit__(self):
        self.ctx_mem = NULL
        memset(&self.model, 0, sizeof(fedmm_model_t))

    def __dealloc__(self):
        PyMem_Free(self.ctx_mem)

    cdef void *alloc_ctx(self, size_t nbytes) except NULL:
        self.ctx_mem = PyMem_Malloc(nbytes)
        if self.ctx_mem == NULL:
            raise MemoryError()
        memset(self.ctx_mem, 0, nbytes)
        return self.ctx_mem

    @property
    def q(self):
        return int(self.model.q)

    @property
    def d(self):
        return int(self.model.d)

    @property
    def theta_size(self):
        return int(self.model.theta_size)

    @property
    def sample_size(self):
        return int(self.model.sample_size)

    @property
    def memory_size(self):
        return int(self.model.memory_size)

    def __repr__(self):
        return (f"CompiledModel({self.name}, q={self.q}, d={self.d}, theta_size={self.theta_size}, "
                f"sample_size={self.sample_size}, memory_size={self.memory_size})")

    cdef const double *_theta(self, object theta) except NULL:
        cdef cnp.ndarray arr = theta
        if (arr.dtype != np.float64 or arr.ndim != 1 or arr.shape[0] != self.model.theta_size
                or not cnp.PyArray_IS_C_CONTIGUOUS(arr)):
            raise ValueError(f"Expected a compiled parameter of {self.model.theta_size} contiguous float64, "
                             f"got {arr.dtype} {(<object>arr).shape}")
        return <const double *>cnp.PyArray_DATA(arr)

    def statistic(self, theta, data, idx=None, memory=None):
        """``b⁻¹ Σ_{j∈idx} S̄(data[j], θ)`` (all rows if ``idx`` is None) and the solver's count of
        unconverged columns.

        Parameters
        ----------
        theta : ndarray of shape (theta_size,), float64
            Compiled parameter (see :meth:`derive`).
        data : ndarray of shape (n_samples, sample_size), float64, C order
        idx : ndarray of shape (b,), int64, optional
            Distinct rows in ``[0, n_samples)``.
        memory : ndarray of shape (n_samples, memory_size), float64, C order, optional
            The client's per-sample memory, read and updated at the rows ``idx``.

        Returns
        -------
        out : ndarray of shape (q,)
        n_unconverged : int
        """
        cdef const double *th = self._theta(theta)
        cdef cnp.ndarray D = data
        if (D.dtype != np.float64 or D.ndim != 2 or D.shape[1] != self.model.sample_size
                or not cnp.PyArray_IS_C_CONTIGUOUS(D) or D.shape[0] < 1):
            raise ValueError(f"Expected 'data' of shape (n, {self.model.sample_size}), C-contiguous float64, "
                             f"got {D.dtype} {(<object>D).shape}")
        cdef int64_t n = D.shape[0], b = n, j
        cdef const int64_t *idx_ptr = NULL
        cdef int64_t[::1] idx_v
        if idx is not None:
            idx_v = np.ascontiguousarray(idx, dtype=np.int64)
            b = idx_v.shape[0]
            if b < 1:
                raise ValueError("Expected a non-empty minibatch 'idx'")
            for j in range(b):
                if not 0 <= idx_v[j] < n:
                    raise IndexError(f"Expected 'idx' in [0, {n}), got {idx_v[j]}")
            idx_ptr = &idx_v[0]
        cdef double *mem = NULL
        cdef cnp.ndarray M
        if memory is not None:
            M = memory
            if (M.dtype != np.float64 or M.ndim != 2 or M.shape[0] != n or M.shape[1] != self.model.memory_size
                    or not cnp.PyArray_IS_C_CONTIGUOUS(M) or not cnp.PyArray_ISWRITEABLE(M)):
                raise ValueError(f"Expected 'memory' of shape ({n}, {self.model.memory_size}), writeable "
                                 f"C-contiguous float64, got {M.dtype} {(<object>M).shape}")
            mem = <double *>cnp.PyArray_DATA(M)
        cdef cnp.ndarray out = np.empty(self.model.q, dtype=np.float64)
        cdef double[::1] work = np.empty(max(<Py_ssize_t>self.model.statistic_work(self.model.ctx, b), 1))
        cdef int64_t n_bad = 0
        cdef int status
        cdef const double *data_ptr = <const double *>cnp.PyArray_DATA(D)
        cdef double *out_ptr = <double *>cnp.PyArray_DATA(out)
        with nogil:
            status = self.model.statistic(self.model.ctx, th, data_ptr, n, idx_ptr, b, mem, out_ptr, &n_bad,
                                          &work[0])
        if status != FEDMM_OK:
            _raise_status(status, f"{self.name} statistic")
        return out, int(n_bad)

    cdef cnp.ndarray _vector(self, object s, Py_ssize_t size, str name):
        arr = np.array(s, dtype=np.float64, copy=True, order="C")
        if arr.shape != (size,):
            raise ValueError(f"Expected '{name}' of shape ({size},), got {arr.shape}")
        return arr

    def project(self, s):
        """``Π(s)``: a new array (a copy of ``s`` when ``𝒮`` is the whole space)."""
        cdef cnp.ndarray out = self._vector(s, self.model.q, "s")
        cdef double[::1] work = np.empty(max(<Py_ssize_t>self.model.server_work, 1))
        cdef int status = FEDMM_OK
        cdef double *ptr = <double *>cnp.PyArray_DATA(out)
        if self.model.project != NULL:
            with nogil:
                status = self.model.project(self.model.ctx, ptr, &work[0])
        if status != FEDMM_OK:
            _raise_status(status, f"{self.name} projection")
        return out

    def T(self, s, theta_prev=None):
        """The compiled parameter ``T(s)`` (shape (theta_size,)); ``theta_prev`` warm-starts an iterative ``T``."""
        cdef cnp.ndarray s_arr = np.ascontiguousarray(s, dtype=np.float64)
        if s_arr.ndim != 1 or s_arr.shape[0] != self.model.q:
            raise ValueError(f"Expected 's' of shape ({self.model.q},), got {(<object>s_arr).shape}")
        cdef cnp.ndarray out = (np.zeros(self.model.theta_size) if theta_prev is None
                                else self._vector(theta_prev, self.model.theta_size, "theta_prev"))
        cdef double[::1] work = np.empty(max(<Py_ssize_t>self.model.server_work, 1))
        cdef int status
        cdef const double *s_ptr = <const double *>cnp.PyArray_DATA(s_arr)
        cdef double *ptr = <double *>cnp.PyArray_DATA(out)
        with nogil:
            status = self.model.T(self.model.ctx, s_ptr, ptr, &work[0])
        if status != FEDMM_OK:
            _raise_status(status, f"{self.name} T")
        return out

    def derive(self, theta_vector):
        """The compiled parameter of a flat parameter (shape (d,)): its derived part appended."""
        cdef cnp.ndarray out = np.zeros(self.model.theta_size, dtype=np.float64)
        vec = np.asarray(theta_vector, dtype=np.float64)
        if vec.shape != (self.model.d,):
            raise ValueError(f"Expected a flat parameter of shape ({self.model.d},), got {vec.shape}")
        out[:self.model.d] = vec
        cdef double[::1] work = np.empty(max(<Py_ssize_t>self.model.server_work, 1))
        cdef int status = FEDMM_OK
        cdef double *ptr = <double *>cnp.PyArray_DATA(out)
        if self.model.derive != NULL:
            with nogil:
                status = self.model.derive(self.model.ctx, ptr, &work[0])
        if status != FEDMM_OK:
            _raise_status(status, f"{self.name} parameter")
        return out

    def project_theta(self, theta):
        """The compiled parameter with its flat part projected onto ``Θ`` and its derived part rebuilt."""
        cdef cnp.ndarray out = self._vector(theta, self.model.theta_size, "theta")
        cdef double[::1] work = np.empty(max(<Py_ssize_t>self.model.server_work, 1))
        cdef int status = FEDMM_OK
        cdef double *ptr = <double *>cnp.PyArray_DATA(out)
        with nogil:
            if self.model.project_theta != NULL:
                status = self.model.project_theta(self.model.ctx, ptr, &work[0])
            if status == FEDMM_OK and self.model.derive != NULL:
                status = self.model.derive(self.model.ctx, ptr, &work[0])
        if status != FEDMM_OK:
            _raise_status(status, f"{self.name} parameter projection")
        return out

    @property
    def has_project_theta(self):
        """Whether ``Θ`` is a proper subset (the model has a parameter projection)."""
        return self.model.project_theta != NULL


def dictionary_model(fedmm_blas_int p, fedmm_blas_int K, double lam, double ridge, double tol, int max_iter,
                     int method):
    """Dictionary learning with the ridge ``T`` as a :class:`CompiledModel` (``fedmm_dictionary_model``)."""
    cdef CompiledModel m = CompiledModel.__new__(CompiledModel)
    cdef fedmm_dictionary_model_t *ctx = <fedmm_dictionary_model_t *>m.alloc_ctx(sizeof(fedmm_dictionary_model_t))
    ctx.p = p
    ctx.K = K
    ctx.eta = ridge
    ctx.lasso.lam = lam
    ctx.lasso.positive = 0
    ctx.lasso.tol = tol
    ctx.lasso.max_iter = max_iter
    ctx.lasso.warm_start = 0
    ctx.lasso.method = method
    ctx.blas = &_BLAS
    if fedmm_dictionary_model(ctx, &m.model) != FEDMM_OK:
        raise ValueError(f"Invalid dictionary model: p={p}, K={K}, lam={lam}, ridge={ridge}, tol={tol}, "
                         f"max_iter={max_iter}")
    m.name = "dictionary"
    return m


def sample_model(Py_ssize_t q, Py_ssize_t d, Py_ssize_t sample_size, uintptr_t statistic, uintptr_t T,
                 uintptr_t project=0, constants=None, str name="sample model"):
    """A :class:`CompiledModel` from C function addresses of a per-sample statistic (``fedmm_sample_model``).

    ``statistic(constants, theta, z, out)``, ``T(constants, s, theta)`` and
    the optional ``project(constants, s)`` are ``int`` C functions (for
    example numba ``cfunc`` addresses); ``constants`` is a float64 array
    they all receive (kept alive by the model).
    """
    if statistic == 0 or T == 0:
        raise ValueError("Expected the addresses of the statistic and T functions, got a null pointer")
    cdef CompiledModel m = CompiledModel.__new__(CompiledModel)
    cdef fedmm_sample_model_t *ctx = <fedmm_sample_model_t *>m.alloc_ctx(sizeof(fedmm_sample_model_t))
    cdef cnp.ndarray consts = np.ascontiguousarray(np.zeros(1) if constants is None else constants,
                                                   dtype=np.float64)
    m.keep = consts
    ctx.constants = <const double *>cnp.PyArray_DATA(consts)
    ctx.q = q
    ctx.d = d
    ctx.sample_size = sample_size
    ctx.sample_statistic = <fedmm_sample_statistic_fn>statistic
    ctx.T = <fedmm_sample_map_fn>T
    ctx.project = <fedmm_sample_project_fn>project if project else NULL
    if fedmm_sample_model(ctx, &m.model) != FEDMM_OK:
        raise ValueError(f"Invalid per-sample model: q={q}, d={d}, sample_size={sample_size}")
    m.name = name
    return m


cdef const double *_keep_array(list keep, object value, tuple shape, str name) except NULL:
    """A C-contiguous float64 copy of ``value`` of the given shape, kept alive in ``keep``."""
    cdef cnp.ndarray arr = np.array(value, dtype=np.float64, order="C", copy=True)
    if (<object>arr).shape != shape:
        raise ValueError(f"Expected '{name}' of shape {shape}, got {(<object>arr).shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"Expected '{name}' to be finite")
    arr.flags.writeable = False
    keep.append(arr)
    return <const double *>cnp.PyArray_DATA(arr)


def gaussian_mixture_model(fedmm_blas_int G, fedmm_blas_int p, str covariance, double reg_covar, double min_weight,
                           second_moment=None, known_covariance=None):
    """The Gaussian mixture as a :class:`CompiledModel` (``fedmm_gmm_model``); the moments are copied."""
    cdef CompiledModel m = CompiledModel.__new__(CompiledModel)
    cdef fedmm_gmm_model_t *ctx = <fedmm_gmm_model_t *>m.alloc_ctx(sizeof(fedmm_gmm_model_t))
    cdef list keep = []
    ctx.G = G
    ctx.p = p
    ctx.covariance = FEDMM_GMM_FULL if covariance == "full" else FEDMM_GMM_TIED
    ctx.reg_covar = reg_covar
    ctx.min_weight = min_weight
    ctx.second_moment = NULL
    ctx.known_covariance = NULL
    if second_moment is not None:
        ctx.second_moment = _keep_array(keep, second_moment, (p, p), "second_moment")
    if known_covariance is not None:
        ctx.known_covariance = _keep_array(keep, known_covariance, (p, p), "known_covariance")
    ctx.blas = &_BLAS
    m.keep = tuple(keep)
    if covariance not in ("tied", "full") or fedmm_gmm_model(ctx, &m.model) != FEDMM_OK:
        raise ValueError(f"Invalid Gaussian mixture: G={G}, p={p}, covariance={covariance!r}, "
                         f"reg_covar={reg_covar}, min_weight={min_weight}")
    m.name = "GaussianMixture"
    return m


def gaussian_mixture_responsibilities(CompiledModel model, theta, data, bint want_log_norm=False):
    """Posterior probabilities ``(N, G)`` of a :func:`gaussian_mixture_model` (``fedmm_gmm_responsibilities``).

    ``theta``: the derived parameter (``model.theta_size`` float64), ``data``:
    C-contiguous float64 ``(N, p)``.  Returns ``rho`` or ``(rho, log_norm)``.
    The GIL is released.
    """
    if model.name != "GaussianMixture":
        raise TypeError(f"Expected a GaussianMixture compiled model, got {model.name!r}")
    cdef const fedmm_gmm_model_t *ctx = <const fedmm_gmm_model_t *>model.model.ctx
    cdef const double *th = model._theta(theta)
    cdef cnp.ndarray D = data
    if (cnp.PyArray_NDIM(D) != 2 or cnp.PyArray_TYPE(D) != cnp.NPY_FLOAT64 or not cnp.PyArray_IS_C_CONTIGUOUS(D)
            or D.shape[1] != ctx.p):
        raise ValueError(f"Expected 'data' as a C-contiguous float64 array of shape (N, {ctx.p})")
    cdef int64_t n = D.shape[0]
    cdef cnp.ndarray rho = np.empty((n, ctx.G), dtype=np.float64)
    cdef cnp.ndarray log_norm = np.empty(n if want_log_norm else 0, dtype=np.float64)
    cdef double[::1] work = np.empty(max(<Py_ssize_t>fedmm_gmm_responsibilities_work(ctx), 1))
    cdef const double *data_ptr = <const double *>cnp.PyArray_DATA(D)
    cdef double *rho_ptr = <double *>cnp.PyArray_DATA(rho)
    cdef double *norm_ptr = <double *>cnp.PyArray_DATA(log_norm) if want_log_norm else NULL
    cdef int status
    with nogil:
        status = fedmm_gmm_responsibilities(ctx, th, data_ptr, n, rho_ptr, norm_ptr, &work[0])
    if status != FEDMM_OK:
        _raise_status(status, "gaussian_mixture_responsibilities")
    return (rho, log_norm) if want_log_norm else rho


def poisson_latent_model(support, log_prior, exp_support, double lam, double min_mean, double mean_count,
                         str parameterization):
    """The Poisson latent-shift model as a :class:`CompiledModel` (``fedmm_poisson_model``); arrays are copied."""
    cdef CompiledModel m = CompiledModel.__new__(CompiledModel)
    cdef fedmm_poisson_model_t *ctx = <fedmm_poisson_model_t *>m.alloc_ctx(sizeof(fedmm_poisson_model_t))
    cdef list keep = []
    cdef Py_ssize_t K = np.shape(support)[0]
    ctx.K = K
    ctx.support = _keep_array(keep, support, (K,), "support")
    ctx.log_prior = _keep_array(keep, log_prior, (K,), "log_prior")
    ctx.exp_support = _keep_array(keep, exp_support, (K,), "exp_support")
    ctx.lam = lam
    ctx.min_mean = min_mean
    ctx.mean_count = mean_count
    ctx.parameterization = FEDMM_POISSON_JOINT if parameterization == "joint" else FEDMM_POISSON_EXPLICIT_MEAN
    m.keep = tuple(keep)
    if (parameterization not in ("joint", "explicit_mean")
            or fedmm_poisson_model(ctx, &m.model) != FEDMM_OK):
        raise ValueError(f"Invalid Poisson latent model: K={K}, lam={lam}, min_mean={min_mean}, "
                         f"mean_count={mean_count}, parameterization={parameterization!r}")
    m.name = "PoissonLatent"
    return m


def inverse_toy_model(double floor):
    """The toy of FedMM Remark 1 as a :class:`CompiledModel` (``fedmm_inverse_toy_model``)."""
    cdef CompiledModel m = CompiledModel.__new__(CompiledModel)
    cdef fedmm_inverse_toy_model_t *ctx = <fedmm_inverse_toy_model_t *>m.alloc_ctx(
        sizeof(fedmm_inverse_toy_model_t))
    ctx.floor = floor
    if fedmm_inverse_toy_model(ctx, &m.model) != FEDMM_OK:
        raise ValueError(f"Invalid InverseToy: floor={floor}")
    m.name = "InverseToy"
    return m


def project_capped_simplex(const double[::1] v, double floor):
    """``fedmm_project_capped_simplex``: a new array, the projection of ``v`` onto ``{x ≥ floor, Σx = 1}``."""
    cdef Py_ssize_t n = v.shape[0]
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] out_v = out
    cdef double[::1] work = np.empty(max(n, 1), dtype=np.float64)
    cdef int status = FEDMM_EINVAL
    if n > 0:
        with nogil:
            status = fedmm_project_capped_simplex(n, &v[0], floor, &out_v[0], &work[0])
    if status != FEDMM_OK:
        _raise_status(status, "capped simplex projection")
    return out


def floor_eigenvalues(A, double floor):
    """``fedmm_floor_eigenvalues`` on a copy of the symmetric ``(p, p)`` matrix or ``(m, p, p)`` stack ``A``.

    Returns the floored copy and a boolean array (shape ``(m,)``) of the matrices rebuilt from their
    eigenpairs; a rebuilt matrix always has a Cholesky factor (where rounding would leave it without one,
    the floor is raised to ``2ᵏ p ε λ_max``, see ``fedmm_kernels.h``).  Raises ``LinAlgError`` when
    ``floor == 0`` and a matrix is not positive definite.
    """
    out = np.array(A, dtype=np.float64, order="C", copy=True)
    shape = out.shape  # (wraparound is off: no negative indices)
    if out.ndim not in (2, 3) or shape[out.ndim - 1] != shape[out.ndim - 2] or shape[out.ndim - 1] < 1:
        raise ValueError(f"Expected a square matrix or a stack of them, got shape {shape}")
    cdef fedmm_blas_int p = shape[out.ndim - 1]
    cdef int64_t m = 1 if out.ndim == 2 else shape[0]
    clipped = np.zeros(max(m, 1), dtype=np.intc)
    cdef int[::1] clipped_v = clipped
    cdef double[::1] work = np.empty(fedmm_floor_eigenvalues_work(p), dtype=np.float64)
    cdef fedmm_blas_int[::1] iwork = np.empty(fedmm_floor_eigenvalues_iwork(p), dtype=np.intc)
    cdef double *ptr = <double *>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef int status
    with nogil:
        status = fedmm_floor_eigenvalues(p, m, ptr, floor, &clipped_v[0], &work[0], &iwork[0], &_BLAS)
    if status != FEDMM_OK:
        _raise_status(status, "eigenvalue floor")
    return out, clipped[:m].astype(bool)


cdef inline double _seconds() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)  # the clock of time.perf_counter on Linux
    return ts.tv_sec + 1e-9 * ts.tv_nsec


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


#: How long an idle thread of a :class:`WorkerPool` spins before it sleeps, in nanoseconds.
DEFAULT_SPIN_NS = 35_000


cdef class WorkerPool:
    """``n_threads − 1`` persistent worker threads for :func:`run_rounds` (``fedmm_pool_t``).

    A job (one round's contacted clients) is shared by the calling thread
    and the workers through one atomic item counter (a dynamic schedule);
    each client's round writes only its own outputs, so the numbers depend
    neither on ``n_threads`` nor on which thread ran which client.  A thread
    with nothing to do spins for at most ``spin_ns`` nanoseconds, then
    sleeps on a condition variable: between rounds (while the calling
    thread aggregates) and between calls the workers use no CPU.  A round
    that took longer than the calling thread alone would have makes the
    next 1, 2, 4, …, 256 rounds run on the calling thread alone (a worker
    that another process keeps off its core then delays no round).  Workers
    block every signal, so Ctrl-C reaches the main thread.

    Parameters
    ----------
    n_threads : int >= 1
        Threads of a job, the calling thread included.  Builds without POSIX
        threads have ``n_threads == 1`` whatever was asked.
    spin_ns : int >= 0
        Longest spin of an idle thread before it sleeps.

    Attributes
    ----------
    n_threads : int
        Threads of a job, the calling thread included.
    spin_ns : int
        Longest spin of an idle thread before it sleeps, in nanoseconds.

    Notes
    -----
    One job at a time: a pool that is running rounds refuses another call
    (:class:`RuntimeError`).  :meth:`close` (or the end of a ``with`` block,
    or garbage collection) joins the workers.
    """
    cdef fedmm_pool_t *pool
    cdef readonly int n_threads
    cdef readonly int64_t spin_ns
    cdef bint busy

    def __cinit__(self, n_threads=1, spin_ns=DEFAULT_SPIN_NS):
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
            raise ValueError(f"Expected 'n_threads' to be an int >= 1, got {n_threads!r}")
        if isinstance(spin_ns, bool) or not isinstance(spin_ns, int) or spin_ns < 0:
            raise ValueError(f"Expected 'spin_ns' to be an int >= 0, got {spin_ns!r}")
        if n_threads > 4096:
            raise ValueError(f"Expected 'n_threads' <= 4096, got {n_threads}")
        cdef int status = fedmm_pool_create(n_threads, spin_ns, &self.pool)
        check_status(status, f"Could not start a pool of {n_threads} threads", None, RuntimeError)
        self.n_threads = fedmm_pool_size(self.pool)
        self.spin_ns = spin_ns

    def __dealloc__(self):
        if self.pool != NULL:
            with nogil:
                fedmm_pool_destroy(self.pool)
            self.pool = NULL

    def close(self):
        """Join the worker threads (idempotent); the pool cannot run rounds afterwards."""
        if self.busy:
            raise RuntimeError("Cannot close a WorkerPool while it runs rounds")
        if self.pool != NULL:
            with nogil:
                fedmm_pool_destroy(self.pool)
            self.pool = NULL

    @property
    def closed(self):
        """Whether :meth:`close` has joined the workers."""
        return self.pool == NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __reduce__(self):
        raise TypeError("A WorkerPool holds threads and cannot be pickled; make a new one")

    def __repr__(self):
        state = "closed" if self.pool == NULL else "open"
        return f"WorkerPool(n_threads={self.n_threads}, spin_ns={self.spin_ns}, {state})"


cdef struct _RoundTask:
    # one round's client work: item k is the k-th contacted client, ids[k]
    const fedmm_model_t *model
    const fedmm_round_config_t *cfg
    fedmm_client_t *clients
    const int64_t *ids
    const uint8_t *coins
    bint compress
    uint64_t t
    const double *theta
    const double *ref
    double *values
    Py_ssize_t values_stride
    int *sent
    int64_t *n_bad
    int *status
    double *work
    Py_ssize_t work_stride
    int64_t *iwork
    Py_ssize_t iwork_stride
    # the server's share, done here on the client's thread: V saved before the round (undone if it fails),
    # the message checked as fedmm_server_step checks it (status in range_status)
    double *V_saved
    Py_ssize_t msg
    double bound
    int *range_status


cdef void _client_task(void *ctx, int64_t k, int worker) noexcept nogil:
    """Item ``k`` of a round: the ``k``-th contacted client's round, on ``worker``'s workspace."""
    cdef _RoundTask *task = <_RoundTask *>ctx
    cdef int64_t i = task.ids[k]
    cdef double *out = task.values + k * task.values_stride
    memcpy(task.V_saved + k * task.values_stride, task.clients[i].V, task.msg * sizeof(double))
    task.n_bad[k] = 0
    task.sent[k] = 0
    task.range_status[k] = FEDMM_OK
    task.status[k] = fedmm_client_round(task.model, task.cfg, &task.clients[i], task.t,
                                        task.coins[i] if task.compress else 1, task.theta, task.ref,
                                        out, &task.sent[k], &task.n_bad[k],
                                        task.work + worker * task.work_stride,
                                        task.iwork + worker * task.iwork_stride)
    if task.status[k] == FEDMM_OK and task.sent[k]:
        task.range_status[k] = fedmm_check_range(task.msg, out, task.bound)


cdef struct _SumTask:
    # acc[j] = sum_k weights[k] rows[k][j] in k order, item b: the columns [b * block, (b + 1) * block)
    int64_t m
    size_t n
    size_t block
    const double *weights
    const double **rows
    double *out


cdef void _sum_task(void *ctx, int64_t b, int worker) noexcept nogil:
    cdef _SumTask *task = <_SumTask *>ctx
    cdef size_t lo = <size_t>b * task.block
    cdef size_t hi = lo + task.block
    if hi > task.n:
        hi = task.n
    fedmm_weighted_sum_columns(task.m, lo, hi, task.weights, task.rows, task.out)


cdef enum:
    _SUM_BLOCK = 64  # columns per item of the parallel weighted sum
    _SUM_PARALLEL_MIN = 32768  # multiply-adds below which the weighted sum stays on the calling thread


cdef class _Clients:
    """``n`` clients as ``fedmm_client_t`` records pointing into arrays the caller keeps alive."""
    cdef fedmm_client_t *items
    cdef Py_ssize_t n
    cdef int64_t max_n_samples

    def __cinit__(self, Py_ssize_t n):
        self.n = n
        self.items = <fedmm_client_t *>PyMem_Malloc(max(n, 1) * sizeof(fedmm_client_t))
        if self.items == NULL:
            raise MemoryError()
        memset(self.items, 0, max(n, 1) * sizeof(fedmm_client_t))

    def __dealloc__(self):
        PyMem_Free(self.items)

    cdef int fill(self, CompiledModel model, list datas, list memories, list Vs, const uint64_t[:, ::1] keys,
                  const int64_t[:, ::1] quantizers, Py_ssize_t msg) except -1:
        cdef Py_ssize_t k
        cdef cnp.ndarray arr
        cdef fedmm_client_t *c
        if len(datas) != self.n or len(memories) != self.n or len(Vs) != self.n or keys.shape[0] != self.n \
                or quantizers.shape[0] != self.n or keys.shape[1] != 2 or quantizers.shape[1] != 4:
            raise ValueError(f"Expected one data set, memory, V, key pair and quantizer row per client ({self.n})")
        self.max_n_samples = 1
        for k in range(self.n):
            c = &self.items[k]
            arr = datas[k]
            if (arr.dtype != np.float64 or arr.ndim != 2 or arr.shape[1] != model.model.sample_size
                    or arr.shape[0] < 1 or not cnp.PyArray_IS_C_CONTIGUOUS(arr)):
                raise ValueError(f"Expected datas[{k}] of shape (n, {model.model.sample_size}), C-contiguous "
                                 f"float64, got {arr.dtype} {(<object>arr).shape}")
            c.data = <const double *>cnp.PyArray_DATA(arr)
            c.n_samples = arr.shape[0]
            self.max_n_samples = max(self.max_n_samples, c.n_samples)
            if memories[k] is None:
                c.memory = NULL
            else:
                arr = memories[k]
                if (arr.dtype != np.float64 or arr.ndim != 2 or arr.shape[0] != c.n_samples
                        or arr.shape[1] != model.model.memory_size or not cnp.PyArray_IS_C_CONTIGUOUS(arr)
                        or not cnp.PyArray_ISWRITEABLE(arr)):
                    raise ValueError(f"Expected memories[{k}] of shape ({c.n_samples}, {model.model.memory_size}),"
                                     " writeable C-contiguous float64")
                c.memory = <double *>cnp.PyArray_DATA(arr)
            arr = Vs[k]
            if (arr.dtype != np.float64 or arr.ndim != 1 or arr.shape[0] != msg
                    or not cnp.PyArray_IS_C_CONTIGUOUS(arr) or not cnp.PyArray_ISWRITEABLE(arr)):
                raise ValueError(f"Expected Vs[{k}] to be {msg} writeable contiguous float64")
            c.V = <double *>cnp.PyArray_DATA(arr)
            c.key[0] = keys[k, 0]
            c.key[1] = keys[k, 1]
            c.quantizer.scheme = <int>quantizers[k, 0]
            c.quantizer.bits = <int>quantizers[k, 1]
            c.quantizer.norm = <int>quantizers[k, 2]
            c.quantizer.block = <size_t>quantizers[k, 3]
        return 0


def run_rounds(CompiledModel model, str space, str mode, str oracle, bint project, int64_t batch, double p,
               double control_variate_step, int64_t count, const double[::1] weights, const uint64_t[::1] server_key,
               list datas, list memories, list Vs, const uint64_t[:, ::1] keys, const int64_t[:, ::1] quantizers,
               S, double[::1] V, double[::1] theta, double[::1] theta_prev, uint64_t t0,
               const double[::1] gammas, int n_threads=1, double max_seconds=float("inf"),
               WorkerPool pool=None, double statistic_max=float("inf")):
    """Whole FedMM rounds ``t0, …, t0 + R − 1`` (``R = len(gammas)``) in one GIL-free call.

    Per round ``t``: ``fedmm_server_select``, every contacted client's
    ``fedmm_client_round`` on the threads of ``pool`` (one workspace per
    thread; without a pool, on a :class:`WorkerPool` of ``n_threads`` made
    for this call, or on the calling thread when ``n_threads == 1``), then ``fedmm_server_step`` on the senders' messages in
    client order with ``weights[i] = μ_i / p``.  The server state ``S``
    (S-space; None in Θ-space), ``V`` and ``theta`` (compiled parameter) is
    updated in place, and the clients' ``Vs`` and ``memories``; ``theta_prev``
    receives ``theta`` before the last completed round.  ``quantizers[i] = (scheme,
    bits, norm, block)`` of client ``i``'s compressor.  Stops after the
    first round that ends more than ``max_seconds`` after the call started
    (at least one round runs).  In S-space a round whose messages, aggregate
    ``H``, new ``S`` or new ``V`` hold an entry beyond ``statistic_max`` in
    magnitude (the model's ``statistic_bound``) fails with
    ``FEDMM_ERANGE``, as :meth:`fedmm.algorithms.Server.aggregate` refuses it.

    Returns
    -------
    senders : ndarray of shape (R', n), int64
        Row ``r``: the clients whose message round ``r`` aggregated, in
        ``senders[r, :n_senders[r]]`` (increasing).
    n_senders, n_contacted : ndarray of shape (R',), int64
    dist : ndarray of shape (R', 2)
        ``(‖Ŝ_{t+1} − Ŝ_t‖², ‖θ_{t+1} − θ_t‖²)`` (flat parameters).
    seconds : ndarray of shape (R',)
        Wall time of each round.
    n_unconverged : int
        Inner-solver columns that hit their iteration cap.
    failure : tuple or None
        ``(t, client, reason)`` when round ``t`` failed in a client's round
        (``client`` its index) or in the server step (``client = -1``); the
        rounds before it are complete, and round ``t`` left no trace: the
        contacted clients' ``V`` and the server state are as before it
        (per-sample memory, e.g. warm-start codes, may hold its new values).
    """
    cdef fedmm_round_config_t cfg
    cfg.space = SPACES[space]
    cfg.mode = MODES[mode]
    cfg.oracle = ORACLES[oracle]
    cfg.project = project
    cfg.batch = batch
    cfg.p = p
    cfg.control_variate_step = control_variate_step
    if not statistic_max > 0.0:
        raise ValueError(f"Expected 'statistic_max' > 0 (inf: any finite value), got {statistic_max!r}")
    cfg.statistic_max = statistic_max
    cdef fedmm_model_t *mdl = &model.model
    cdef Py_ssize_t n = len(datas), R = gammas.shape[0], r, k, i
    cdef Py_ssize_t msg = fedmm_message_size(mdl, &cfg), q = mdl.q
    cdef double[::1] S_v
    cdef double *S_ptr = NULL
    if cfg.space == FEDMM_SPACE_STATISTIC:
        S_v = S
        if S_v.shape[0] != q:
            raise ValueError(f"Expected 'S' of length {q}, got {S_v.shape[0]}")
        S_ptr = &S_v[0]
    if theta.shape[0] != mdl.theta_size or theta_prev.shape[0] != mdl.theta_size or V.shape[0] != msg:
        raise ValueError(f"Expected 'theta', 'theta_prev' of length {mdl.theta_size} and 'V' of length {msg}")
    if n == 0 or weights.shape[0] != n or server_key.shape[0] != 2:
        raise ValueError(f"Expected at least one client, one weight per client ({n}) and a two-word server key")
    if count > n:
        raise ValueError(f"Expected 'count' <= {n}, got {count}")
    cdef _Clients clients = _Clients(n)
    clients.fill(model, datas, memories, Vs, keys, quantizers, msg)
    cdef WorkerPool own_pool = None
    if pool is None and n_threads > 1:
        pool = own_pool = WorkerPool(n_threads)
    elif pool is not None:
        if pool.pool == NULL:
            raise ValueError("Expected an open 'pool', got a closed WorkerPool")
        if pool.busy:
            raise RuntimeError("The WorkerPool is running other rounds (one call at a time)")
    try:
        if pool is not None:
            pool.busy = True
        return _run_rounds(mdl, &cfg, clients, weights, server_key, count, S_ptr, V, theta, theta_prev, t0,
                           gammas, max_seconds, pool, n, R, msg)
    finally:
        if pool is not None:
            pool.busy = False
        if own_pool is not None:
            own_pool.close()


cdef tuple _run_rounds(fedmm_model_t *mdl, fedmm_round_config_t *cfg_ptr, _Clients clients,
                       const double[::1] weights, const uint64_t[::1] server_key, int64_t count, double *S_ptr,
                       double[::1] V, double[::1] theta, double[::1] theta_prev, uint64_t t0,
                       const double[::1] gammas, double max_seconds, WorkerPool pool, Py_ssize_t n, Py_ssize_t R,
                       Py_ssize_t msg):
    """The rounds of :func:`run_rounds` once its arguments are checked (``pool``: None for one thread)."""
    cdef fedmm_round_config_t cfg = cfg_ptr[0]
    cdef Py_ssize_t r, k
    cdef fedmm_pool_t *cpool = NULL if pool is None else pool.pool
    cdef int n_threads = 1 if pool is None else pool.n_threads
    senders = np.zeros((R, n), dtype=np.int64)
    n_senders = np.zeros(R, dtype=np.int64)
    n_contacted = np.zeros(R, dtype=np.int64)
    dist = np.zeros((R, 2), dtype=np.float64)
    seconds = np.zeros(R, dtype=np.float64)
    cdef int64_t[:, ::1] senders_v = senders
    cdef int64_t[::1] n_senders_v = n_senders, n_contacted_v = n_contacted
    cdef double[:, ::1] dist_v = dist
    cdef double[::1] seconds_v = seconds
    cdef double[:, ::1] values = np.empty((n, max(msg, 1)), dtype=np.float64)
    cdef double[::1] w_sent = np.empty(n, dtype=np.float64)
    cdef uintptr_t[::1] rows_mem = np.empty(n, dtype=np.uintp)  # the senders' messages, in client order
    cdef const double **rows = <const double **>&rows_mem[0]
    cdef double[::1] acc = np.empty(max(msg, 1), dtype=np.float64)
    cdef int[::1] range_status = np.zeros(n, dtype=np.intc)
    # the contacted clients' V and the parameter before a round: a failed round is undone (atomic rounds)
    cdef double[:, ::1] V_saved = np.empty((n, max(msg, 1)), dtype=np.float64)
    cdef double[::1] theta_saved = np.empty(max(<Py_ssize_t>mdl.theta_size, 1), dtype=np.float64)
    cdef int64_t[::1] ids = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] sel_work = np.empty(n, dtype=np.int64)
    cdef uint8_t[::1] coins = np.zeros(n, dtype=np.uint8)
    cdef int64_t[::1] n_bad = np.zeros(n, dtype=np.int64)
    cdef int[::1] status = np.zeros(n, dtype=np.intc)
    cdef int[::1] sent = np.zeros(n, dtype=np.intc)
    cdef double[::1] server_work = np.empty(max(<Py_ssize_t>fedmm_server_update_work(mdl, &cfg), 1),
                                            dtype=np.float64)
    cdef Py_ssize_t work_stride = _padded(fedmm_client_round_work(mdl, &cfg, clients.max_n_samples))
    cdef Py_ssize_t iwork_stride = _padded(fedmm_client_round_iwork(clients.max_n_samples))
    cdef double[:, ::1] thread_work = _aligned_empty((n_threads, work_stride), np.float64)
    cdef int64_t[:, ::1] thread_iwork = _aligned_empty((n_threads, iwork_stride), np.int64)
    cdef const double *ref = S_ptr if cfg.space == FEDMM_SPACE_STATISTIC else &theta[0]
    cdef _RoundTask task
    cdef _SumTask sum_task
    cdef int64_t m = 0, m_sent, total_bad = 0, n_blocks
    cdef int failed = FEDMM_OK, select_status = FEDMM_OK, server_status = FEDMM_OK
    cdef Py_ssize_t failed_client = -1, n_run = 0
    cdef uint64_t t = t0
    cdef double clock, started
    cdef bint compress = cfg.mode == FEDMM_MODE_COMPRESS
    task.model = mdl
    task.cfg = &cfg
    task.clients = clients.items
    task.ids = &ids[0]
    task.coins = &coins[0]
    task.compress = compress
    task.theta = &theta[0]
    task.ref = ref
    task.values = &values[0, 0]
    task.values_stride = values.shape[1]
    task.sent = &sent[0]
    task.n_bad = &n_bad[0]
    task.status = &status[0]
    task.work = &thread_work[0, 0]
    task.work_stride = work_stride
    task.iwork = &thread_iwork[0, 0]
    task.iwork_stride = iwork_stride
    task.V_saved = &V_saved[0, 0]
    task.msg = msg
    task.bound = fedmm_message_bound(&cfg)
    task.range_status = &range_status[0]
    sum_task.n = msg
    sum_task.block = _SUM_BLOCK
    sum_task.weights = &w_sent[0]
    sum_task.rows = rows
    sum_task.out = &acc[0]
    n_blocks = (msg + _SUM_BLOCK - 1) // _SUM_BLOCK
    with nogil:
        clock = _seconds()
        started = clock
        for r in range(R):
            t = t0 + r
            # Algorithm 2 line 2 (or Algorithm 4's coins)
            select_status = fedmm_server_select(&server_key[0], t, n, count, cfg.p, cfg.mode, &ids[0], &m,
                                                &coins[0], &sel_work[0])
            if select_status != FEDMM_OK:
                break
            # lines 5-11 on every contacted client (each saves its V first and checks its message)
            task.t = t
            if cpool == NULL:
                for k in range(m):
                    _client_task(&task, k, 0)
            else:
                fedmm_pool_run(cpool, m, _client_task, &task)
            m_sent = 0
            for k in range(m):
                total_bad = total_bad + n_bad[k]
                if status[k] != FEDMM_OK and failed == FEDMM_OK:
                    failed = status[k]
                    failed_client = ids[k]
                if sent[k]:
                    if range_status[k] != FEDMM_OK and server_status == FEDMM_OK:
                        server_status = range_status[k]  # fedmm_server_step refuses the first such message
                    rows[m_sent] = &values[k, 0]
                    w_sent[m_sent] = weights[ids[k]]
                    senders_v[r, m_sent] = ids[k]
                    m_sent = m_sent + 1
            if failed == FEDMM_OK and server_status == FEDMM_OK:
                # lines 13-17: acc = sum_k (mu_i / p) Quant_i in client order (columns shared by the threads:
                # every column sums its terms in the same order), then T for the next round's line 4
                sum_task.m = m_sent
                if cpool != NULL and n_blocks > 1 and m_sent * msg >= _SUM_PARALLEL_MIN:
                    fedmm_pool_run(cpool, n_blocks, _sum_task, &sum_task)
                else:
                    fedmm_weighted_sum(m_sent, msg, &w_sent[0], rows, &acc[0])
                memcpy(&theta_saved[0], &theta[0], mdl.theta_size * sizeof(double))
                server_status = fedmm_server_update(mdl, &cfg, &acc[0], gammas[r], S_ptr, &V[0], &theta[0],
                                                    &dist_v[r, 0], &server_work[0])
            if failed != FEDMM_OK or server_status != FEDMM_OK:
                for k in range(m):  # undo the round's client updates: V = sum_i mu_i V_i still holds
                    memcpy(clients.items[ids[k]].V, &V_saved[k, 0], msg * sizeof(double))
                break
            memcpy(&theta_prev[0], &theta_saved[0], mdl.theta_size * sizeof(double))
            n_senders_v[r] = m_sent
            n_contacted_v[r] = m
            seconds_v[r] = _seconds() - clock
            clock = clock + seconds_v[r]
            n_run = r + 1
            if clock - started > max_seconds:
                break
    if select_status != FEDMM_OK:
        _raise_status(select_status, f"server selection at round {t}")
    failure = None
    if failed != FEDMM_OK:
        failure = (int(t), int(failed_client), fedmm_strerror(failed).decode())
    elif server_status != FEDMM_OK:
        failure = (int(t), -1, fedmm_strerror(server_status).decode())
    return (senders[:n_run], n_senders[:n_run], n_contacted[:n_run], dist[:n_run], seconds[:n_run],
            int(total_bad), failure)


cdef struct _StatisticTask:
    # item k: client k's full statistic at theta (no minibatch, no memory)
    const fedmm_model_t *model
    const double *theta
    const double **datas
    const int64_t *n_samples
    double *out
    Py_ssize_t q
    int64_t *n_bad
    int *status
    double *work
    Py_ssize_t work_stride


cdef void _statistic_task(void *ctx, int64_t k, int worker) noexcept nogil:
    """Item ``k``: ``model.statistic`` of client ``k`` over all its rows, on ``worker``'s workspace."""
    cdef _StatisticTask *task = <_StatisticTask *>ctx
    task.n_bad[k] = 0
    task.status[k] = task.model.statistic(task.model.ctx, task.theta, task.datas[k], task.n_samples[k], NULL,
                                          task.n_samples[k], NULL, task.out + k * task.q, &task.n_bad[k],
                                          task.work + worker * task.work_stride)


def full_statistics(CompiledModel model, theta, list datas, int n_threads=1, WorkerPool pool=None):
    """Every client's full statistic ``s̄_i(θ) = N_i⁻¹ Σ_j S̄(z_j, θ)`` at one compiled parameter, GIL-free.

    The statistics of the start exchange (``start='mean_statistic'``): the
    model's statistic callback over all of client ``i``'s rows, without
    per-sample memory (a cold start), the clients shared by the threads of
    ``pool`` (or of a :class:`WorkerPool` of ``n_threads`` made for this
    call; one workspace per thread).  Each row of the result depends only
    on ``θ`` and ``datas[i]``: the numbers do not depend on the threads.

    Parameters
    ----------
    model : CompiledModel
    theta : ndarray of shape (theta_size,), float64
        Compiled parameter (see :meth:`CompiledModel.derive`).
    datas : list of ndarray of shape (N_i, sample_size), C-contiguous float64, N_i >= 1
    n_threads : int
    pool : WorkerPool, optional

    Returns
    -------
    S : ndarray of shape (n, q)
        Row ``i``: client ``i``'s statistic (undefined where ``status[i] != 0``).
    status : ndarray of shape (n,), int
        ``FEDMM_OK`` (0) or the callback's error code, per client.
    n_unconverged : ndarray of shape (n,), int64
        Inner-solver columns that hit their iteration cap, per client.
    """
    cdef const double *th = model._theta(theta)
    cdef fedmm_model_t *mdl = &model.model
    cdef Py_ssize_t n = len(datas)
    S = np.empty((n, mdl.q), dtype=np.float64)
    status = np.zeros(n, dtype=np.intc)
    n_bad = np.zeros(n, dtype=np.int64)
    if n == 0:
        return S, status, n_bad
    cdef int64_t[::1] sizes = np.empty(n, dtype=np.int64)
    cdef const double **ptrs = <const double **>PyMem_Malloc(n * sizeof(double *))
    if ptrs == NULL:
        raise MemoryError()
    try:
        return _full_statistics(mdl, th, datas, n_threads, pool, S, status, n_bad, ptrs, sizes)
    finally:
        PyMem_Free(ptrs)


cdef tuple _full_statistics(fedmm_model_t *mdl, const double *th, list datas, int n_threads, WorkerPool pool,
                            S, status, n_bad, const double **ptrs, int64_t[::1] sizes):
    """:func:`full_statistics` once the pointer array is allocated."""
    cdef Py_ssize_t n = len(datas), k, max_n = 1
    cdef cnp.ndarray arr
    for k in range(n):
        arr = datas[k]
        if (arr.dtype != np.float64 or arr.ndim != 2 or arr.shape[1] != mdl.sample_size or arr.shape[0] < 1
                or not cnp.PyArray_IS_C_CONTIGUOUS(arr)):
            raise ValueError(f"Expected datas[{k}] of shape (n, {mdl.sample_size}), C-contiguous float64, "
                             f"got {arr.dtype} {(<object>arr).shape}")
        ptrs[k] = <const double *>cnp.PyArray_DATA(arr)
        sizes[k] = arr.shape[0]
        max_n = max(max_n, arr.shape[0])
    cdef WorkerPool own_pool = None
    if pool is None and n_threads > 1 and n > 1:
        pool = own_pool = WorkerPool(min(n_threads, n))
    elif pool is not None:
        if pool.pool == NULL:
            raise ValueError("Expected an open 'pool', got a closed WorkerPool")
        if pool.busy:
            raise RuntimeError("The WorkerPool is running other rounds (one call at a time)")
    cdef int threads = 1 if pool is None else pool.n_threads
    cdef Py_ssize_t work_stride = _padded(max(<size_t>mdl.statistic_work(mdl.ctx, max_n), 1))
    cdef double[:, ::1] work = _aligned_empty((threads, work_stride), np.float64)
    cdef int[::1] status_v = status
    cdef int64_t[::1] bad_v = n_bad
    cdef double[:, ::1] S_v = S
    cdef _StatisticTask task
    task.model = mdl
    task.theta = th
    task.datas = ptrs
    task.n_samples = &sizes[0]
    task.out = &S_v[0, 0]
    task.q = mdl.q
    task.n_bad = &bad_v[0]
    task.status = &status_v[0]
    task.work = &work[0, 0]
    task.work_stride = work_stride
    try:
        if pool is None:
            with nogil:
                for k in range(n):
                    _statistic_task(&task, k, 0)
        else:
            pool.busy = True
            with nogil:
                fedmm_pool_run(pool.pool, n, _statistic_task, &task)
    finally:
        if pool is not None:
            pool.busy = False
        if own_pool is not None:
            own_pool.close()
    return S, status, n_bad
