/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_kernels.h -- public C API of the fedmm compiled kernels.
 *
 * Pure C99.  No Python, no NumPy, no linked BLAS: every kernel that needs
 * BLAS/LAPACK receives a table of function pointers (fedmm_blas_t) filled by
 * the caller (the Python package fills it from scipy.linalg.cython_blas and
 * cython_lapack; a C program passes its own Fortran BLAS symbols).  Every
 * kernel that draws random numbers receives a fedmm_bitgen_t, which has the
 * exact memory layout of NumPy's bitgen_t (numpy/random/bitgen.h), so the
 * state of a numpy.random.Generator can be used directly.
 *
 * Conventions
 *   - Every kernel returns an int status: FEDMM_OK (0) or a negative
 *     FEDMM_E* code; outputs are undefined on error.
 *   - Matrices are column-major (Fortran order) with an explicit leading
 *     dimension unless a kernel documents otherwise.
 *   - Kernels never allocate unless they document it; workspaces are passed in.
 *   - Kernels are reentrant: no global state.
 */
#ifndef FEDMM_KERNELS_H
#define FEDMM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FEDMM_KERNELS_VERSION_MAJOR 0
#define FEDMM_KERNELS_VERSION_MINOR 1

/* ---- status codes ------------------------------------------------------ */
#define FEDMM_OK 0
#define FEDMM_EINVAL (-1)     /* an argument is out of range               */
#define FEDMM_ENOMEM (-2)     /* an allocation failed                      */
#define FEDMM_ENONFINITE (-3) /* NaN or infinity in an input               */
#define FEDMM_EFORMAT (-4)    /* malformed serialized payload              */
#define FEDMM_ELAPACK (-5)    /* a LAPACK routine returned info != 0       */
#define FEDMM_ENOCONV (-6)    /* an iterative solver hit its iteration cap */

/* Human-readable text of a status code (static storage, never NULL). */
const char *fedmm_strerror(int status);

/* ---- random numbers ---------------------------------------------------- */
/* Layout-identical to NumPy's bitgen_t. */
typedef struct fedmm_bitgen {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} fedmm_bitgen_t;

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

typedef struct fedmm_blas {
    fedmm_dgemm_t dgemm;
    fedmm_dsyrk_t dsyrk;
    fedmm_dgemv_t dgemv;
    fedmm_dpotrf_t dpotrf;
    fedmm_dpotrs_t dpotrs;
    fedmm_dsyevr_t dsyevr;
} fedmm_blas_t;

/* ---- kernel families ---------------------------------------------------- */
/* Each family has its own section below (one header section per source file). */

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_KERNELS_H */
