# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_models.h``: compiled models: dictionary learning, per-sample
functions, the EM family.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t
from fedmm.fedmm_blas cimport fedmm_blas_int, fedmm_blas_t
from fedmm.fedmm_lasso cimport fedmm_lasso_options_t
from fedmm.fedmm_model cimport fedmm_model_t

cdef extern from "fedmm_models.h" nogil:
    ctypedef struct fedmm_dictionary_model_t:
        fedmm_blas_int p
        fedmm_blas_int K
        double eta
        fedmm_lasso_options_t lasso
        const fedmm_blas_t *blas
    int fedmm_dictionary_model(const fedmm_dictionary_model_t *ctx, fedmm_model_t *model)

    ctypedef int (*fedmm_sample_statistic_fn)(const double *constants, const double *theta,
                                              const double *z, double *out) noexcept nogil
    ctypedef int (*fedmm_sample_map_fn)(const double *constants, const double *s,
                                        double *theta) noexcept nogil
    ctypedef int (*fedmm_sample_project_fn)(const double *constants, double *s) noexcept nogil
    ctypedef struct fedmm_sample_model_t:
        const double *constants
        int64_t q
        int64_t d
        int64_t sample_size
        fedmm_sample_statistic_fn sample_statistic
        fedmm_sample_map_fn T
        fedmm_sample_project_fn project
    int fedmm_sample_model(const fedmm_sample_model_t *ctx, fedmm_model_t *model)

    # ---- EM-family surrogate models as compiled models (models_em.c) ----
    int fedmm_project_capped_simplex(int64_t n, const double *v, double floor, double *out,
                                     double *work)
    size_t fedmm_floor_eigenvalues_work(fedmm_blas_int p)
    size_t fedmm_floor_eigenvalues_iwork(fedmm_blas_int p)
    int fedmm_floor_eigenvalues(fedmm_blas_int p, int64_t n_matrices, double *A, double floor,
                                int *clipped, double *work, fedmm_blas_int *iwork,
                                const fedmm_blas_t *blas)
    int FEDMM_GMM_TIED
    int FEDMM_GMM_FULL
    int FEDMM_GMM_CHUNK
    ctypedef struct fedmm_gmm_model_t:
        fedmm_blas_int G
        fedmm_blas_int p
        int covariance
        double reg_covar
        double min_weight
        const double *second_moment
        const double *known_covariance
        const fedmm_blas_t *blas
    int fedmm_gmm_model(const fedmm_gmm_model_t *ctx, fedmm_model_t *model)
    size_t fedmm_gmm_responsibilities_work(const fedmm_gmm_model_t *ctx)
    int fedmm_gmm_responsibilities(const fedmm_gmm_model_t *ctx, const double *theta, const double *data,
                                   int64_t n_samples, double *rho, double *log_norm, double *work) nogil
    int FEDMM_POISSON_JOINT
    int FEDMM_POISSON_EXPLICIT_MEAN
    ctypedef struct fedmm_poisson_model_t:
        int64_t K
        const double *support
        const double *log_prior
        const double *exp_support
        double lam
        double min_mean
        double mean_count
        int parameterization
    int fedmm_poisson_model(const fedmm_poisson_model_t *ctx, fedmm_model_t *model)
    ctypedef struct fedmm_inverse_toy_model_t:
        double floor
    int fedmm_inverse_toy_model(const fedmm_inverse_toy_model_t *ctx, fedmm_model_t *model)
