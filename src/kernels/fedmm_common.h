/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_common.h -- status codes, the interrupt check and the random-number generator type (common.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_COMMON_H
#define FEDMM_COMMON_H

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
#define FEDMM_EINTR (-7)      /* stopped by the caller's fedmm_interrupt_t  */
#define FEDMM_ERANGE (-8)     /* a value beyond the range a model handles  */

/* Human-readable text of a status code (static storage, never NULL). */
const char *fedmm_strerror(int status);

/* An optional interrupt check for kernels whose loops can run long (the
 * *_interruptible entry points).  The kernel calls poll(arg) after about
 * every FEDMM_INTERRUPT_WORK multiply-adds of its loop; a nonzero return
 * stops it with FEDMM_EINTR (outputs undefined, as on every error).  poll
 * only observes: a run it never stops gives the same results, bit for bit,
 * as a run without it.  The Python package polls for Ctrl-C (taking the GIL
 * back for that moment); a C program may poll a flag set by its own signal
 * handler or a deadline. */
#define FEDMM_INTERRUPT_WORK ((int64_t)1 << 22)
typedef int (*fedmm_poll_fn)(void *arg);
typedef struct fedmm_interrupt {
    fedmm_poll_fn poll;
    void *arg;
} fedmm_interrupt_t;

/* ---- random numbers ---------------------------------------------------- */
/* Layout-identical to NumPy's bitgen_t. */
typedef struct fedmm_bitgen {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} fedmm_bitgen_t;

/* ---- dense matrix views -------------------------------------------------- */
/* A read-only view of a rows x cols matrix of doubles, column-major with
 * leading dimension ld: entry (i, j) is data[i + j * ld].  The struct-taking
 * entry points (fedmm_dictionary_statistics_ex, fedmm_lasso_gram_ex,
 * fedmm_dictionary_update_unit_norm_ex) take one in place of the (rows,
 * cols, pointer, leading dimension) arguments of a matrix. */
typedef struct fedmm_matrix {
    const double *data;
    int64_t rows;
    int64_t cols;
    int64_t ld;
} fedmm_matrix_t;

/* The same view of a matrix the kernel writes (an output, or an input it
 * updates in place, such as a warm start). */
typedef struct fedmm_matrix_mut {
    double *data;
    int64_t rows;
    int64_t cols;
    int64_t ld;
} fedmm_matrix_mut_t;

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_COMMON_H */
