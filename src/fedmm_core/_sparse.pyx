# SPDX-License-Identifier: BSD-3-Clause
"""Private wrappers of the sparse-coding kernels (src/kernels/lasso.c).

Arguments are validated by :mod:`fedmm.kernels`; this layer checks only what
memory safety needs (shapes and leading dimensions), allocates outputs and
workspaces with the GIL, and runs each kernel entirely inside ``nogil``.

Called from the main thread, the kernels poll for signals (Ctrl-C) through a
``fedmm_interrupt_t`` every ``FEDMM_INTERRUPT_WORK`` multiply-adds, taking the
GIL back only for ``PyErr_CheckSignals``: a handler that raises (the default
``KeyboardInterrupt``) stops the solve and the exception propagates.  The poll
only observes, so results are the same bit for bit.  Other threads do not
poll (Python runs signal handlers in the main thread only, and taking the GIL
every few milliseconds would serialize clients solved in parallel).
"""
import threading

import numpy as np

from libc.stdint cimport int64_t

from fedmm.fedmm_kernels cimport *

include "blas_table.pxi"
include "status.pxi"


METHODS = {
    "auto": FEDMM_LASSO_AUTO,
    "cd": FEDMM_LASSO_CD,
    "active_set": FEDMM_LASSO_ACTIVE_SET,
    "homotopy": FEDMM_LASSO_HOMOTOPY,
}


cdef extern from "Python.h":
    # the raw C function (Cython's cpython.exc declaration propagates the exception, which a
    # noexcept callback cannot): -1 with the handler's exception set, 0 otherwise
    int _check_signals "PyErr_CheckSignals" () noexcept


cdef int _poll_signals(void *arg) noexcept nogil:
    with gil:
        return _check_signals() != 0


cdef fedmm_interrupt_t _SIGNALS
_SIGNALS.poll = _poll_signals
_SIGNALS.arg = NULL
cdef unsigned long _MAIN_THREAD = threading.main_thread().ident


cdef const fedmm_interrupt_t *_interrupt() noexcept:
    """The signal poll in the main thread, NULL (no polling) in any other."""
    return &_SIGNALS if threading.get_ident() == _MAIN_THREAD else NULL


cdef dict _STATISTICS_MESSAGES = {
    FEDMM_ENONFINITE: ("Expected 'Z' to contain only finite values (no NaN or inf; "
                       "a column's squared norm overflowed or was NaN)"),
}


cdef inline fedmm_lasso_options_t _options(double lam, bint positive, double tol, int max_iter,
                                           bint warm_start, int method) noexcept:
    cdef fedmm_lasso_options_t opts
    opts.lam = lam
    opts.positive = positive
    opts.tol = tol
    opts.max_iter = max_iter
    opts.warm_start = warm_start
    opts.method = method
    return opts


def lasso_gram(const double[::1, :] G, const double[::1, :] C, double lam, bint positive,
               double tol, int max_iter, H0, znorm2, int method):
    """Return ``(H, n_iter, n_unconverged)``; see fedmm.kernels.lasso_gram."""
    cdef fedmm_blas_int K = G.shape[0]
    cdef fedmm_blas_int b = C.shape[1]
    if G.shape[1] != K or C.shape[0] != K:
        raise ValueError(f"Expected G (K, K) and C (K, b), got {G.shape=}, {C.shape=}")
    H_arr = np.zeros((K, b), dtype=np.float64, order="F")
    cdef int warm = H0 is not None
    if warm:
        H_arr[...] = H0
    cdef double[::1, :] H = H_arr
    n_iter_arr = np.zeros(b, dtype=np.intc)
    cdef int[::1] n_iter = n_iter_arr
    cdef double[::1] zn
    cdef const double *zn_ptr = NULL
    if znorm2 is not None:
        zn = np.ascontiguousarray(znorm2, dtype=np.float64)
        if zn.shape[0] != b:
            raise ValueError(f"Expected 'znorm2' of shape ({b},), got {np.shape(znorm2)}")
        if b > 0:
            zn_ptr = &zn[0]
    cdef double[::1] work = np.empty(fedmm_lasso_gram_work(K), dtype=np.float64)
    cdef int64_t n_bad = 0
    cdef int status
    cdef fedmm_blas_int ldc = C.strides[1] // sizeof(double) if b > 1 else K
    cdef const double *C_ptr = &C[0, 0] if b > 0 else NULL
    cdef double *H_ptr = &H[0, 0] if b > 0 else &work[0]
    cdef int *it_ptr = &n_iter[0] if b > 0 else NULL
    cdef fedmm_lasso_options_t opts = _options(lam, positive, tol, max_iter, warm, method)
    cdef const fedmm_interrupt_t *interrupt = _interrupt()
    cdef fedmm_matrix_t G_view = fedmm_matrix_t(&G[0, 0], K, K, G.strides[1] // sizeof(double) if K > 1 else K)
    cdef fedmm_matrix_t C_view = fedmm_matrix_t(C_ptr, K, b, ldc)
    cdef fedmm_matrix_mut_t H_view = fedmm_matrix_mut_t(H_ptr, K, b, K)
    with nogil:
        status = fedmm_lasso_gram_ex(&G_view, &C_view, zn_ptr, &opts, &H_view, it_ptr, &n_bad, &work[0], interrupt)
    check_status(status, "lasso_gram")
    return H_arr, n_iter_arr, int(n_bad)


def dictionary_statistics(const double[::1, :] D, const double[::1, :] Z, double lam,
                          bint positive, double tol, int max_iter, H0,
                          const int64_t[::1] offsets, bint want_stats, bint want_objective,
                          int method):
    """Return ``(A, B, H, objective, n_iter, n_unconverged)``.

    ``A`` has shape (m, K, K) and ``B`` (m, p, K), both C-ordered stacks of
    symmetric/column-major blocks (see fedmm.kernels.dictionary_statistics);
    they are None unless ``want_stats``.
    """
    cdef fedmm_blas_int p = D.shape[0]
    cdef fedmm_blas_int K = D.shape[1]
    cdef fedmm_blas_int b = Z.shape[1]
    cdef int64_t m = offsets.shape[0] - 1
    if Z.shape[0] != p:
        raise ValueError(f"Expected 'Z' of shape (p, b) with p == D.shape[0], got {D.shape=}, {Z.shape=}")
    if m < 0 or offsets[0] != 0 or offsets[m] != b:
        raise ValueError(f"Expected 'segments' to start at 0 and end at b={b}")
    cdef int64_t s, max_seg = 0
    for s in range(m):
        if offsets[s + 1] < offsets[s]:
            raise ValueError("Expected 'segments' to be nondecreasing")
        max_seg = max(max_seg, offsets[s + 1] - offsets[s])
    H_arr = np.zeros((K, b), dtype=np.float64, order="F")
    cdef int warm = H0 is not None
    if warm:
        H_arr[...] = H0
    cdef double[::1, :] H = H_arr
    cdef double[::1] work = np.empty(
        fedmm_dictionary_statistics_work(p, K, <fedmm_blas_int>max_seg, want_objective),
        dtype=np.float64)
    # A[s] and B[s] are written column-major; A[s] is symmetric and B is
    # returned transposed back to (p, K) views of (K, p) C-ordered blocks.
    A_arr = B_arr = None
    cdef double *A_ptr = NULL
    cdef double *B_ptr = NULL
    cdef double[:, :, ::1] A_view, Bt_view
    if want_stats:
        A_arr = np.empty((m, K, K), dtype=np.float64)
        Bt_arr = np.empty((m, K, p), dtype=np.float64)
        B_arr = Bt_arr.transpose(0, 2, 1)
        if m > 0:
            A_view = A_arr
            Bt_view = Bt_arr
            A_ptr = &A_view[0, 0, 0]
            B_ptr = &Bt_view[0, 0, 0]
    obj_arr = None
    cdef double[::1] obj
    cdef double *obj_ptr = NULL
    if want_objective:
        obj_arr = np.empty(b, dtype=np.float64)
        if b > 0:
            obj = obj_arr
            obj_ptr = &obj[0]
    n_iter_arr = np.zeros(b, dtype=np.intc)
    cdef int[::1] n_iter = n_iter_arr
    cdef int64_t n_bad = 0
    cdef int status
    cdef fedmm_blas_int ldd = D.strides[1] // sizeof(double) if K > 1 else p
    cdef fedmm_blas_int ldz = Z.strides[1] // sizeof(double) if b > 1 else p
    cdef const double *Z_ptr = &Z[0, 0] if b > 0 else NULL
    cdef double *H_ptr = &H[0, 0] if b > 0 else &work[0]
    cdef int *it_ptr = &n_iter[0] if b > 0 else NULL
    cdef fedmm_lasso_options_t opts = _options(lam, positive, tol, max_iter, warm, method)
    cdef const fedmm_interrupt_t *interrupt = _interrupt()
    cdef fedmm_matrix_t D_view = fedmm_matrix_t(&D[0, 0], p, K, ldd)
    cdef fedmm_matrix_t Z_view = fedmm_matrix_t(Z_ptr, p, b, ldz)
    cdef fedmm_dictionary_statistics_out_t outputs = fedmm_dictionary_statistics_out_t(
        H_ptr, A_ptr, B_ptr, obj_ptr, it_ptr, &n_bad)
    with nogil:
        status = fedmm_dictionary_statistics_ex(&D_view, &Z_view, &opts, m, &offsets[0], &outputs, &work[0],
                                                &_BLAS, interrupt)
    check_status(status, "dictionary_statistics", _STATISTICS_MESSAGES)
    return A_arr, B_arr, H_arr, obj_arr, n_iter_arr, int(n_bad)
