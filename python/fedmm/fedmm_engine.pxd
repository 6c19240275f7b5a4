# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_engine.h``: the FedMM round engine: aggregation, update sizes,
client round, server step.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t, uint8_t, uint64_t
from fedmm.fedmm_model cimport fedmm_model_t
from fedmm.fedmm_quantize cimport fedmm_quantizer_t

cdef extern from "fedmm_engine.h" nogil:
    int FEDMM_SPACE_STATISTIC
    int FEDMM_SPACE_PARAMETER
    void fedmm_weighted_sum(int64_t m, size_t q, const double *weights, const double *const *rows,
                            double *out)
    void fedmm_weighted_sum_columns(int64_t m, size_t lo, size_t hi, const double *weights,
                                    const double *const *rows, double *out)
    double fedmm_squared_distance(size_t n, const double *a, const double *b)

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
        double control_variate_step
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
