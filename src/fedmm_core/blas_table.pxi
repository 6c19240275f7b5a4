# SPDX-License-Identifier: BSD-3-Clause
# Included by the extension modules that call BLAS/LAPACK from C: fills a
# module-level, read-only table of function pointers from SciPy's
# cython_blas / cython_lapack (we never link a BLAS ourselves).
from scipy.linalg.cython_blas cimport (dgemm as _sp_dgemm, dsyrk as _sp_dsyrk, dgemv as _sp_dgemv,
                                      dtrsv as _sp_dtrsv)
from scipy.linalg.cython_lapack cimport (dpotrf as _sp_dpotrf, dpotrs as _sp_dpotrs,
                                         dsyevd as _sp_dsyevd, dsyevr as _sp_dsyevr,
                                         dsytrf as _sp_dsytrf, dtrtri as _sp_dtrtri,
                                         dsytrd as _sp_dsytrd, dstebz as _sp_dstebz,
                                         dstein as _sp_dstein, dorm2r as _sp_dorm2r,
                                         dormtr as _sp_dormtr)

# Build-time check of the BLAS integer width: this assignment only compiles when
# SciPy's cython_blas uses a 32-bit ``int`` like ``fedmm_blas_int``.
cdef void (*_blas_width_check)(char *, char *, int *, int *, int *, double *, double *,
                               int *, double *, int *, double *, double *,
                               int *) noexcept nogil
_blas_width_check = _sp_dgemm

cdef fedmm_blas_t _BLAS
_BLAS.dgemm = <fedmm_dgemm_t>_sp_dgemm
_BLAS.dsyrk = <fedmm_dsyrk_t>_sp_dsyrk
_BLAS.dgemv = <fedmm_dgemv_t>_sp_dgemv
_BLAS.dpotrf = <fedmm_dpotrf_t>_sp_dpotrf
_BLAS.dpotrs = <fedmm_dpotrs_t>_sp_dpotrs
_BLAS.dsyevr = <fedmm_dsyevr_t>_sp_dsyevr
_BLAS.dsytrf = <fedmm_dsytrf_t>_sp_dsytrf
_BLAS.dsyevd = <fedmm_dsyevd_t>_sp_dsyevd
_BLAS.dtrtri = <fedmm_dtrtri_t>_sp_dtrtri
_BLAS.dsytrd = <fedmm_dsytrd_t>_sp_dsytrd
_BLAS.dstebz = <fedmm_dstebz_t>_sp_dstebz
_BLAS.dstein = <fedmm_dstein_t>_sp_dstein
_BLAS.dorm2r = <fedmm_dorm2r_t>_sp_dorm2r
_BLAS.dormtr = <fedmm_dormtr_t>_sp_dormtr
_BLAS.dtrsv = <fedmm_dtrsv_t>_sp_dtrsv
