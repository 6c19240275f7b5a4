/* SPDX-License-Identifier: BSD-3-Clause
 *
 * bitgen_check.h -- build-time proof that fedmm_bitgen_t (fedmm_kernels.h)
 * has exactly the memory layout of NumPy's bitgen_t
 * (<numpy/random/bitgen.h>): the extension modules cast the pointer in a
 * numpy.random.BitGenerator's capsule to fedmm_bitgen_t * (bitgen.pxi), so
 * the two must agree on the size and on the offset, size and type of every
 * field.  Included (through bitgen.pxi) by every extension module that draws
 * random numbers; a mismatch stops the build with an error naming the field.
 *
 * The project compiles C99, which has no _Static_assert: the classic
 * typedef of an array of negative size is the portable compile-time
 * assertion (C11 compilers get _Static_assert and a readable message).
 * Field types are compared where the compiler can (GCC, Clang).
 */
#ifndef FEDMM_BITGEN_CHECK_H
#define FEDMM_BITGEN_CHECK_H

#include <stddef.h>

#include <numpy/random/bitgen.h>

#include "fedmm_kernels.h"

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define FEDMM_BITGEN_ASSERT(name, cond) \
    _Static_assert(cond, "fedmm_bitgen_t differs from NumPy's bitgen_t: " #name)
#else
#define FEDMM_BITGEN_ASSERT(name, cond) \
    typedef char fedmm_bitgen_t_differs_from_numpy_bitgen_t_##name[(cond) ? 1 : -1]
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FEDMM_BITGEN_SAME_TYPE(field)                                            \
    __builtin_types_compatible_p(__typeof__(((fedmm_bitgen_t *)0)->field),       \
                                 __typeof__(((bitgen_t *)0)->field))
#else
#define FEDMM_BITGEN_SAME_TYPE(field) 1
#endif

#define FEDMM_BITGEN_SAME_FIELD(field)                                           \
    (offsetof(fedmm_bitgen_t, field) == offsetof(bitgen_t, field)                \
     && sizeof(((fedmm_bitgen_t *)0)->field) == sizeof(((bitgen_t *)0)->field)   \
     && FEDMM_BITGEN_SAME_TYPE(field))

FEDMM_BITGEN_ASSERT(size, sizeof(fedmm_bitgen_t) == sizeof(bitgen_t));
FEDMM_BITGEN_ASSERT(state, FEDMM_BITGEN_SAME_FIELD(state));
FEDMM_BITGEN_ASSERT(next_uint64, FEDMM_BITGEN_SAME_FIELD(next_uint64));
FEDMM_BITGEN_ASSERT(next_uint32, FEDMM_BITGEN_SAME_FIELD(next_uint32));
FEDMM_BITGEN_ASSERT(next_double, FEDMM_BITGEN_SAME_FIELD(next_double));
FEDMM_BITGEN_ASSERT(next_raw, FEDMM_BITGEN_SAME_FIELD(next_raw));

#endif /* FEDMM_BITGEN_CHECK_H */
