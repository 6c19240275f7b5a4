/* SPDX-License-Identifier: BSD-3-Clause */
#include "fedmm_kernels.h"

const char *fedmm_strerror(int status)
{
    switch (status) {
    case FEDMM_OK: return "success";
    case FEDMM_EINVAL: return "invalid argument";
    case FEDMM_ENOMEM: return "out of memory";
    case FEDMM_ENONFINITE: return "non-finite value (NaN or infinity) in input";
    case FEDMM_EFORMAT: return "malformed payload";
    case FEDMM_ELAPACK: return "LAPACK routine failed (info != 0)";
    case FEDMM_ENOCONV: return "iteration limit reached before convergence";
    case FEDMM_EINTR: return "interrupted";
    case FEDMM_ERANGE: return "value beyond the range the model handles (|x| > statistic_max)";
    default: return "unknown fedmm status";
    }
}
