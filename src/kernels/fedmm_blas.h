/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_blas.h -- the BLAS / LAPACK table every kernel that needs BLAS receives.
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_BLAS_H
#define FEDMM_BLAS_H

#include "fedmm_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- BLAS / LAPACK table ----------------------------------------------- */
/* Integer type of the BLAS/LAPACK interface (LP64).  The Python build checks
 * at compile time that SciPy's cython_blas uses the same width. */
typedef int fedmm_blas_int;

typedef void (*fedmm_dgemm_t)(const char *transa, const char *transb,
                              const fedmm_blas_int *m, const fedmm_blas_int *n,
                              const fedmm_blas_int *k, const double *alpha,
                              const double *a, const fedmm_blas_int *lda,
                              const double *b, const fedmm_blas_int *ldb,
                              const double *beta, double *c,
                              const fedmm_blas_int *ldc);
typedef void (*fedmm_dsyrk_t)(const char *uplo, const char *trans,
                              const fedmm_blas_int *n, const fedmm_blas_int *k,
                              const double *alpha, const double *a,
                              const fedmm_blas_int *lda, const double *beta,
                              double *c, const fedmm_blas_int *ldc);
typedef void (*fedmm_dgemv_t)(const char *trans, const fedmm_blas_int *m,
                              const fedmm_blas_int *n, const double *alpha,
                              const double *a, const fedmm_blas_int *lda,
                              const double *x, const fedmm_blas_int *incx,
                              const double *beta, double *y,
                              const fedmm_blas_int *incy);
typedef void (*fedmm_dpotrf_t)(const char *uplo, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda,
                               fedmm_blas_int *info);
typedef void (*fedmm_dpotrs_t)(const char *uplo, const fedmm_blas_int *n,
                               const fedmm_blas_int *nrhs, const double *a,
                               const fedmm_blas_int *lda, double *b,
                               const fedmm_blas_int *ldb, fedmm_blas_int *info);
typedef void (*fedmm_dsyevr_t)(const char *jobz, const char *range,
                               const char *uplo, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda,
                               const double *vl, const double *vu,
                               const fedmm_blas_int *il, const fedmm_blas_int *iu,
                               const double *abstol, fedmm_blas_int *m,
                               double *w, double *z, const fedmm_blas_int *ldz,
                               fedmm_blas_int *isuppz, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *iwork,
                               const fedmm_blas_int *liwork, fedmm_blas_int *info);

typedef void (*fedmm_dsytrf_t)(const char *uplo, const fedmm_blas_int *n, double *a,
                               const fedmm_blas_int *lda, fedmm_blas_int *ipiv, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *info);

typedef void (*fedmm_dsyevd_t)(const char *jobz, const char *uplo, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda, double *w, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *iwork,
                               const fedmm_blas_int *liwork, fedmm_blas_int *info);

typedef void (*fedmm_dtrtri_t)(const char *uplo, const char *diag, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda, fedmm_blas_int *info);

/* Symmetric tridiagonal reduction and the pieces of a partial eigensolver
 * (project_psd's few-negative-eigenvalues path). */
typedef void (*fedmm_dsytrd_t)(const char *uplo, const fedmm_blas_int *n, double *a,
                               const fedmm_blas_int *lda, double *d, double *e, double *tau,
                               double *work, const fedmm_blas_int *lwork, fedmm_blas_int *info);
typedef void (*fedmm_dstebz_t)(const char *range, const char *order, const fedmm_blas_int *n,
                               const double *vl, const double *vu, const fedmm_blas_int *il,
                               const fedmm_blas_int *iu, const double *abstol, const double *d,
                               const double *e, fedmm_blas_int *m, fedmm_blas_int *nsplit,
                               double *w, fedmm_blas_int *iblock, fedmm_blas_int *isplit,
                               double *work, fedmm_blas_int *iwork, fedmm_blas_int *info);
typedef void (*fedmm_dstein_t)(const fedmm_blas_int *n, const double *d, const double *e,
                               const fedmm_blas_int *m, const double *w,
                               const fedmm_blas_int *iblock, const fedmm_blas_int *isplit,
                               double *z, const fedmm_blas_int *ldz, double *work,
                               fedmm_blas_int *iwork, fedmm_blas_int *ifail, fedmm_blas_int *info);
typedef void (*fedmm_dorm2r_t)(const char *side, const char *trans, const fedmm_blas_int *m,
                               const fedmm_blas_int *n, const fedmm_blas_int *k, const double *a,
                               const fedmm_blas_int *lda, const double *tau, double *c,
                               const fedmm_blas_int *ldc, double *work, fedmm_blas_int *info);
typedef void (*fedmm_dormtr_t)(const char *side, const char *uplo, const char *trans,
                               const fedmm_blas_int *m, const fedmm_blas_int *n, const double *a,
                               const fedmm_blas_int *lda, const double *tau, double *c,
                               const fedmm_blas_int *ldc, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *info);

/* Triangular solve with one right-hand side (project_psd's Lanczos path). */
typedef void (*fedmm_dtrsv_t)(const char *uplo, const char *trans, const char *diag,
                              const fedmm_blas_int *n, const double *a, const fedmm_blas_int *lda,
                              double *x, const fedmm_blas_int *incx);

typedef struct fedmm_blas {
    fedmm_dgemm_t dgemm;
    fedmm_dsyrk_t dsyrk;
    fedmm_dgemv_t dgemv;
    fedmm_dpotrf_t dpotrf;
    fedmm_dpotrs_t dpotrs;
    fedmm_dsyevr_t dsyevr;
    fedmm_dsytrf_t dsytrf; /* symmetric indefinite LDL^T (no kernel uses it since 0.2; kept for the layout) */
    fedmm_dsyevd_t dsyevd; /* all eigenpairs (divide and conquer); NULL: dsyevr is used */
    /* Members appended later stay at the end (callers built against an older
     * header leave them zero): NULL means "not available", and a kernel that
     * needs one returns FEDMM_EINVAL (documented where it applies). */
    fedmm_dtrtri_t dtrtri; /* triangular inverse (the Gaussian mixture's whitening) */
    /* project_psd's partial eigensolver (dsytrd, dstebz, dstein and dormtr, or it
     * falls back to dsyevr; dorm2r is no longer called, kept for the layout) */
    fedmm_dsytrd_t dsytrd;
    fedmm_dstebz_t dstebz;
    fedmm_dstein_t dstein;
    fedmm_dorm2r_t dorm2r;
    fedmm_dormtr_t dormtr;
    fedmm_dtrsv_t dtrsv; /* project_psd's Lanczos solves (NULL: plain loops) */
} fedmm_blas_t;

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_BLAS_H */
