# SPDX-License-Identifier: BSD-3-Clause
"""Public Python face of the compiled kernels (the C API is ``fedmm_kernels.h``, see :func:`fedmm.get_include`).

Each family validates its arguments (names, shapes, dtypes, ranges) in a
private module and calls a private Cython extension (``fedmm._<family>``)
that runs the C kernel without the GIL.  This module only re-exports them,
and it is the only gate to compiled code: the rest of the package (the
compressors, the models, the algorithms and the engine) calls the kernels
through the names listed here, never through a private extension module
(``tests/quality/test_architecture.py`` checks it).  Besides the user-facing faces,
a few names serve those layers' hot paths with their operands already
resolved (``quantize_spec``, ``pack_spec``, ``fused_dictionary_statistics``,
``dictionary_sa_step``, ``weighted_row_sum``, ...): they convert nothing and
leave the argument checks to their caller and to the kernel.
"""
from __future__ import annotations

from fedmm._kernels_compression import (  # noqa: F401
    SCHEME_BLOCKP,
    SCHEME_DITHER,
    SCHEME_IDENTITY,
    as_vector,
    effective_block,
    norm_code,
    pack_identity,
    pack_spec,
    quantize_blockp,
    quantize_dither,
    quantize_rows_spec,
    quantize_spec,
    pack,
    unpack,
    wire_header,
)
from fedmm._kernels_sparse import (  # noqa: F401
    convergence_warning_class,
    dictionary_sa_step,
    dictionary_statistics,
    dictionary_update,
    dictionary_update_ridge_flat,
    fused_dictionary_statistics,
    lasso,
    lasso_gram,
    warn_unconverged,
)
from fedmm._kernels_linalg import project_psd  # noqa: F401
from fedmm._kernels_nonsmooth import fedmls_local_round  # noqa: F401
from fedmm._kernels_random import (  # noqa: F401
    philox_sample_without_replacement,
    sample_without_replacement,
    squared_distance,
    weighted_row_sum,
)
from fedmm._kernels_engine import (  # noqa: F401
    DICTIONARY_MODEL_MAX_WORK,
    CompiledModel,
    dictionary_model,
    dictionary_model_max_iter,
    floor_eigenvalues,
    full_statistics,
    gaussian_mixture_model,
    gaussian_mixture_responsibilities,
    inverse_toy_model,
    poisson_latent_model,
    project_capped_simplex,
    run_rounds,
    sample_model,
    WorkerPool,
)

__all__ = [
    # compression
    "quantize_blockp",
    "quantize_dither",
    "pack",
    "unpack",
    "wire_header",
    # compression with the quantizer spec resolved (fedmm.compression's compressors)
    "SCHEME_IDENTITY",
    "SCHEME_BLOCKP",
    "SCHEME_DITHER",
    "norm_code",
    "as_vector",
    "effective_block",
    "quantize_spec",
    "quantize_rows_spec",
    "pack_spec",
    "pack_identity",
    # sparse coding and surrogate-space linear algebra
    "ConvergenceWarning",  # noqa: F822 (module __getattr__: built on first lookup)
    "lasso",
    "lasso_gram",
    "dictionary_statistics",
    "dictionary_update",
    "project_psd",
    "warn_unconverged",
    # the dictionary model's per-round faces (operands in the kernels' layout)
    "fused_dictionary_statistics",
    "dictionary_update_ridge_flat",
    "dictionary_sa_step",
    # random streams
    "sample_without_replacement",
    "philox_sample_without_replacement",
    # aggregation helpers of the round engine
    "weighted_row_sum",
    "squared_distance",
    # non-smooth problems (FedMLS local loop)
    "fedmls_local_round",
    # compiled surrogate models and the round engine
    "CompiledModel",
    "dictionary_model",
    "dictionary_model_max_iter",
    "DICTIONARY_MODEL_MAX_WORK",
    "sample_model",
    "gaussian_mixture_model",
    "gaussian_mixture_responsibilities",
    "poisson_latent_model",
    "inverse_toy_model",
    "run_rounds",
    "full_statistics",
    "WorkerPool",
    # EM-family linear algebra
    "project_capped_simplex",
    "floor_eigenvalues",
]


def __getattr__(name: str) -> type[Warning]:
    """``ConvergenceWarning``, a subclass of scikit-learn's, built on first lookup (see
    ``convergence_warning_class`` in :mod:`fedmm._kernels_sparse`: scikit-learn is imported only then)."""
    if name == "ConvergenceWarning":
        return convergence_warning_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "ConvergenceWarning"})
