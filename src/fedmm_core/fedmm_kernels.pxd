# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of the public C API in ``fedmm_kernels.h``.

Downstream Cython code writes ``from fedmm.fedmm_kernels cimport ...`` and
compiles with ``include_dirs=[fedmm.get_include()]``, linking
``fedmm.get_library_dir()/libfedmm_kernels.a``.
"""
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "fedmm_kernels.h" nogil:
    int FEDMM_KERNELS_VERSION_MAJOR
    int FEDMM_KERNELS_VERSION_MINOR

    int FEDMM_OK
    int FEDMM_EINVAL
    int FEDMM_ENOMEM
    int FEDMM_ENONFINITE
    int FEDMM_EFORMAT
    int FEDMM_ELAPACK
    int FEDMM_ENOCONV
    int FEDMM_EINTR
    int FEDMM_ERANGE

    const char *fedmm_strerror(int status)
    int64_t FEDMM_INTERRUPT_WORK
    ctypedef int (*fedmm_poll_fn)(void *arg) noexcept nogil
    ctypedef struct fedmm_interrupt_t:
        fedmm_poll_fn poll
        void *arg

    ctypedef struct fedmm_bitgen_t:
        void *state
        uint64_t (*next_uint64)(void *st) noexcept nogil
        uint32_t (*next_uint32)(void *st) noexcept nogil
        double (*next_double)(void *st) noexcept nogil
        uint64_t (*next_raw)(void *st) noexcept nogil

    ctypedef int fedmm_blas_int

    ctypedef void (*fedmm_dgemm_t)(const char *, const char *, const fedmm_blas_int *,
                                   const fedmm_blas_int *, const fedmm_blas_int *,
                                   const double *, const double *, const fedmm_blas_int *,
                                   const double *, const fedmm_blas_int *, const double *,
                                   double *, const fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dsyrk_t)(const char *, const char *, const fedmm_blas_int *,
                                   const fedmm_blas_int *, const double *, const double *,
                                   const fedmm_blas_int *, const double *, double *,
                                   const fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dgemv_t)(const char *, const fedmm_blas_int *,
                                   const fedmm_blas_int *, const double *, const double *,
                                   const fedmm_blas_int *, const double *,
                                   const fedmm_blas_int *, const double *, double *,
                                   const fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dpotrf_t)(const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dpotrs_t)(const char *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const double *,
                                    const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dsyevr_t)(const char *, const char *, const char *,
                                    const fedmm_blas_int *, double *, const fedmm_blas_int *,
                                    const double *, const double *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const double *, fedmm_blas_int *,
                                    double *, double *, const fedmm_blas_int *,
                                    fedmm_blas_int *, double *, const fedmm_blas_int *,
                                    fedmm_blas_int *, const fedmm_blas_int *,
                                    fedmm_blas_int *) noexcept nogil

    ctypedef void (*fedmm_dsytrf_t)(const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil

    ctypedef void (*fedmm_dsyevd_t)(const char *, const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, double *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dtrtri_t)(const char *, const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dsytrd_t)(const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, double *, double *, double *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dstebz_t)(const char *, const char *, const fedmm_blas_int *, const double *,
                                    const double *, const fedmm_blas_int *, const fedmm_blas_int *,
                                    const double *, const double *, const double *, fedmm_blas_int *,
                                    fedmm_blas_int *, double *, fedmm_blas_int *, fedmm_blas_int *,
                                    double *, fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dstein_t)(const fedmm_blas_int *, const double *, const double *,
                                    const fedmm_blas_int *, const double *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, double *, const fedmm_blas_int *, double *,
                                    fedmm_blas_int *, fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dorm2r_t)(const char *, const char *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const fedmm_blas_int *, const double *,
                                    const fedmm_blas_int *, const double *, double *,
                                    const fedmm_blas_int *, double *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dormtr_t)(const char *, const char *, const char *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const double *, const fedmm_blas_int *,
                                    const double *, double *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil

    ctypedef struct fedmm_blas_t:
        fedmm_dgemm_t dgemm
        fedmm_dsyrk_t dsyrk
        fedmm_dgemv_t dgemv
        fedmm_dpotrf_t dpotrf
        fedmm_dpotrs_t dpotrs
        fedmm_dsyevr_t dsyevr
        fedmm_dsytrf_t dsytrf
        fedmm_dsyevd_t dsyevd
        fedmm_dtrtri_t dtrtri
        fedmm_dsytrd_t dsytrd
        fedmm_dstebz_t dstebz
        fedmm_dstein_t dstein
        fedmm_dorm2r_t dorm2r
        fedmm_dormtr_t dormtr

    # ---- kernel families: one section per C source file ----

    # ---- quantizers (quantize.c) ----
    int FEDMM_SCHEME_IDENTITY
    int FEDMM_SCHEME_BLOCKP
    int FEDMM_SCHEME_DITHER
    int FEDMM_NORM_NONE
    int FEDMM_NORM_L2
    int FEDMM_NORM_LINF

    ctypedef struct fedmm_quantizer_t:
        int scheme
        int bits
        int norm
        size_t block

    int fedmm_quantizer_check(const fedmm_quantizer_t *spec, size_t q)
    int fedmm_quantize_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                           fedmm_bitgen_t *rng, double *out)
    int fedmm_quantize_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                           fedmm_bitgen_t *rng, double *out)
    int fedmm_quantizer_apply(const fedmm_quantizer_t *spec, const double *x, size_t q,
                              fedmm_bitgen_t *rng, double *out)
    int fedmm_encode_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                         fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
    int fedmm_encode_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                         fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)

    # ---- wire format (wire.c) ----
    const char *FEDMM_WIRE_MAGIC
    int FEDMM_WIRE_VERSION
    int FEDMM_WIRE_HEADER_NBYTES

    ctypedef struct fedmm_wire_header_t:
        int version
        int scheme
        int value_nbytes
        int norm
        int bits
        uint64_t q
        uint64_t block

    uint64_t fedmm_wire_nbytes(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes)
    int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes)
    int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes)
    int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                               fedmm_wire_header_t *hdr, const char **reason)
    int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                          size_t out_len, const char **reason)

    # ---- sparse coding (lasso.c) ----
    int FEDMM_LASSO_AUTO
    int FEDMM_LASSO_CD
    int FEDMM_LASSO_ACTIVE_SET
    int FEDMM_LASSO_HOMOTOPY
    ctypedef struct fedmm_lasso_options_t:
        double lam
        int positive
        double tol
        int max_iter
        int warm_start
        int method
    size_t fedmm_lasso_gram_work(fedmm_blas_int K)
    int fedmm_lasso_gram(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                         fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                         const double *znorm2, const fedmm_lasso_options_t *opts, double *H,
                         fedmm_blas_int ldh, int *n_iter, int64_t *n_unconverged, double *work)
    int fedmm_lasso_gram_interruptible(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                                       fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                                       const double *znorm2, const fedmm_lasso_options_t *opts,
                                       double *H, fedmm_blas_int ldh, int *n_iter,
                                       int64_t *n_unconverged, double *work,
                                       const fedmm_interrupt_t *interrupt)
    size_t fedmm_dictionary_statistics_work(fedmm_blas_int p, fedmm_blas_int K,
                                            fedmm_blas_int max_segment, int want_objective)
    int fedmm_dictionary_statistics(fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b,
                                    const double *D, fedmm_blas_int ldd, const double *Z,
                                    fedmm_blas_int ldz, const fedmm_lasso_options_t *opts,
                                    int64_t n_segments, const int64_t *offsets, double *H,
                                    double *A, double *B, double *objective, int *n_iter,
                                    int64_t *n_unconverged, double *work, const fedmm_blas_t *blas)
    int fedmm_dictionary_statistics_interruptible(
        fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b, const double *D, fedmm_blas_int ldd,
        const double *Z, fedmm_blas_int ldz, const fedmm_lasso_options_t *opts, int64_t n_segments,
        const int64_t *offsets, double *H, double *A, double *B, double *objective, int *n_iter,
        int64_t *n_unconverged, double *work, const fedmm_blas_t *blas,
        const fedmm_interrupt_t *interrupt)

    # ---- counter-based random streams and sampling (random.c) ----
    ctypedef struct fedmm_philox_t:
        uint64_t counter[4]
        uint64_t key[2]
        uint64_t buffer[4]
        int buffer_pos
        int has_uint32
        uint32_t uinteger
    void fedmm_philox_seek(fedmm_philox_t *state, const uint64_t *key, const uint64_t *counter)
    uint64_t fedmm_philox_next_uint64(void *state)
    uint32_t fedmm_philox_next_uint32(void *state)
    double fedmm_philox_next_double(void *state)
    void fedmm_philox_bitgen(fedmm_philox_t *state, fedmm_bitgen_t *bitgen)
    int fedmm_sample_without_replacement(fedmm_bitgen_t *rng, int64_t n, int64_t b, int64_t *out,
                                         int64_t *work)

    # ---- aggregation and update sizes (engine.c) ----
    int FEDMM_SPACE_STATISTIC
    int FEDMM_SPACE_PARAMETER
    void fedmm_weighted_sum(int64_t m, size_t q, const double *weights, const double *const *rows,
                            double *out)
    void fedmm_weighted_sum_columns(int64_t m, size_t lo, size_t hi, const double *weights,
                                    const double *const *rows, double *out)
    double fedmm_squared_distance(size_t n, const double *a, const double *b)

    # ---- dictionary update and PSD projection (linalg.c) ----
    size_t fedmm_dictionary_update_ridge_work(fedmm_blas_int p, fedmm_blas_int K)
    int fedmm_dictionary_update_ridge(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                      fedmm_blas_int lda, const double *B, fedmm_blas_int ldb,
                                      double eta, double *D, fedmm_blas_int ldd, double *work,
                                      const fedmm_blas_t *blas)
    int fedmm_dictionary_update_unit_norm(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                          fedmm_blas_int lda, const double *B,
                                          fedmm_blas_int ldb, double eta, double tol,
                                          int max_iter, double *D, fedmm_blas_int ldd,
                                          int *n_iter, double *work)
    size_t fedmm_project_psd_work(fedmm_blas_int K)
    size_t fedmm_project_psd_iwork(fedmm_blas_int K)
    int fedmm_project_psd(fedmm_blas_int K, int64_t n_matrices, const double *A, double *out,
                          double *work, fedmm_blas_int *iwork, int *path,
                          const fedmm_blas_t *blas)

    size_t fedmm_dictionary_update_ridge_flat_work(fedmm_blas_int p, fedmm_blas_int K)
    int fedmm_dictionary_update_ridge_flat(fedmm_blas_int p, fedmm_blas_int K, const double *s,
                                           double eta, double *D, fedmm_blas_int ldd, double *work,
                                           const fedmm_blas_t *blas)
    size_t fedmm_dictionary_sa_step_work(fedmm_blas_int p, fedmm_blas_int K)
    int fedmm_dictionary_sa_step(fedmm_blas_int p, fedmm_blas_int K, const double *S,
                                 const double *H, double gamma, double eta, int project,
                                 double *S_new, double *D, double *work, fedmm_blas_int *iwork,
                                 const fedmm_blas_t *blas)

    # ---- compiled surrogate models and the FedMM round engine (engine.c) ----
    ctypedef size_t (*fedmm_statistic_work_fn)(const void *ctx, int64_t b) noexcept nogil
    ctypedef int (*fedmm_statistic_fn)(const void *ctx, const double *theta, const double *data,
                                       int64_t n_samples, const int64_t *idx, int64_t b,
                                       double *memory, double *out, int64_t *n_unconverged,
                                       double *work) noexcept nogil
    ctypedef int (*fedmm_inplace_fn)(const void *ctx, double *x, double *work) noexcept nogil
    ctypedef int (*fedmm_map_fn)(const void *ctx, const double *s, double *theta,
                                 double *work) noexcept nogil
    ctypedef struct fedmm_model_t:
        const void *ctx
        int64_t q
        int64_t d
        int64_t theta_size
        int64_t sample_size
        int64_t memory_size
        size_t server_work
        fedmm_statistic_work_fn statistic_work
        fedmm_statistic_fn statistic
        fedmm_inplace_fn project
        fedmm_map_fn T
        fedmm_inplace_fn derive
        fedmm_inplace_fn project_theta
    int fedmm_model_check(const fedmm_model_t *model)

    int FEDMM_MODE_SELECT
    int FEDMM_MODE_COMPRESS
    int FEDMM_MODE_COMPRESS_LOCAL
    int FEDMM_ORACLE_MINIBATCH
    int FEDMM_ORACLE_FULL
    ctypedef struct fedmm_round_config_t:
        int space
        int mode
        int oracle
        int project
        int64_t batch
        double p
        double alpha
        double statistic_max
    ctypedef struct fedmm_client_t:
        const double *data
        int64_t n_samples
        double *memory
        double *V
        uint64_t key[2]
        fedmm_quantizer_t quantizer
    int64_t fedmm_message_size(const fedmm_model_t *model, const fedmm_round_config_t *cfg)
    size_t fedmm_client_round_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                                   int64_t max_n_samples)
    size_t fedmm_client_round_iwork(int64_t max_n_samples)
    int fedmm_client_round(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                           fedmm_client_t *client, uint64_t t, int coin, const double *theta,
                           const double *ref, double *out, int *sent, int64_t *n_unconverged,
                           double *work, int64_t *iwork)
    int fedmm_server_select(const uint64_t *key, uint64_t t, int64_t n, int64_t count, double p,
                            int mode, int64_t *ids, int64_t *m, uint8_t *coins, int64_t *work)
    size_t fedmm_server_step_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                                  int64_t m)
    int fedmm_server_step(const fedmm_model_t *model, const fedmm_round_config_t *cfg, int64_t m,
                          const double *weights, const double *values, double gamma, double *S,
                          double *V, double *theta, double *dist, double *work)
    size_t fedmm_server_update_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg)
    int fedmm_server_update(const fedmm_model_t *model, const fedmm_round_config_t *cfg, const double *acc,
                            double gamma, double *S, double *V, double *theta, double *dist, double *work)
    int fedmm_check_range(size_t n, const double *x, double bound)
    double fedmm_message_bound(const fedmm_round_config_t *cfg)
    ctypedef struct fedmm_pool_t:
        pass
    ctypedef void (*fedmm_pool_task_fn)(void *ctx, int64_t item, int worker) noexcept nogil
    int fedmm_pool_create(int n_threads, int64_t spin_ns, fedmm_pool_t **pool)
    void fedmm_pool_destroy(fedmm_pool_t *pool)
    int fedmm_pool_size(const fedmm_pool_t *pool)
    int fedmm_pool_run(fedmm_pool_t *pool, int64_t n_items, fedmm_pool_task_fn fn, void *ctx)

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

    # ---- non-smooth problems, FedMLS (nonsmooth.c) ----
    int FEDMM_LOSS_HINGE
    int FEDMM_LOSS_L1
    int fedmm_fedmls_local_round(int loss, size_t n, size_t p, const double *design,
                                 const double *target, const int64_t *offsets, size_t n_steps,
                                 const int64_t *rows, size_t row_stride,
                                 const int64_t *row_offsets, const double *scale,
                                 double weight, double radius, const double *V, double *U,
                                 double *U_avg, double *work)
    int fedmm_fedmls_local_steps(int loss, size_t n, size_t p, const double *design,
                                 const double *target, const int64_t *offsets, size_t first_step,
                                 size_t n_steps, const int64_t *rows, size_t row_stride,
                                 const int64_t *row_offsets, const double *scale,
                                 double weight, double radius, const double *V, double *U,
                                 double *U_avg, double *work)
