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
 *
 * The API is split into one header per kernel family (fedmm_<family>.h, each
 * compiling on its own); this umbrella header includes them all.
 */
#ifndef FEDMM_KERNELS_H
#define FEDMM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "fedmm_common.h"
#include "fedmm_blas.h"
#include "fedmm_quantize.h"
#include "fedmm_wire.h"
#include "fedmm_lasso.h"
#include "fedmm_random.h"
#include "fedmm_linalg.h"
#include "fedmm_model.h"
#include "fedmm_engine.h"
#include "fedmm_pool.h"
#include "fedmm_models.h"
#include "fedmm_nonsmooth.h"

#endif /* FEDMM_KERNELS_H */
