# SPDX-License-Identifier: BSD-3-Clause
"""Public Python face of the compiled kernels (the C API is ``fedmm_kernels.h``, see :func:`fedmm.get_include`).

Each family validates its arguments (names, shapes, dtypes, ranges) in a
private module and calls a private Cython extension (``fedmm._<family>``)
that runs the C kernel without the GIL.  This module only re-exports them.
"""
from __future__ import annotations

from fedmm._kernels_compression import (  # noqa: F401
    quantize_blockp,
    quantize_dither,
    pack,
    unpack,
    wire_header,
)
from fedmm._kernels_sparse import (  # noqa: F401
    convergence_warning_class,
    dictionary_statistics,
    dictionary_update,
    lasso,
    lasso_gram,
    project_psd,
)
from fedmm._kernels_nonsmooth import fedmls_local_round  # noqa: F401
from fedmm._kernels_random import sample_without_replacement  # noqa: F401
from fedmm._kernels_engine import (  # noqa: F401
    CompiledModel,
    dictionary_model,
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
    # sparse coding and surrogate-space linear algebra
    "ConvergenceWarning",  # noqa: F822 (module __getattr__: built on first lookup)
    "lasso",
    "lasso_gram",
    "dictionary_statistics",
    "dictionary_update",
    "project_psd",
    # random streams
    "sample_without_replacement",
    # non-smooth problems (FedMLS local loop)
    "fedmls_local_round",
    # compiled surrogate models and the round engine
    "CompiledModel",
    "dictionary_model",
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
