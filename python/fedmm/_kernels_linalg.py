# SPDX-License-Identifier: BSD-3-Clause
"""The PSD projection of the surrogate-space linear algebra (``linalg.c``), re-exported by ``fedmm.kernels``.

One family's checked wrapper: it validates its arguments here and calls the
private extension module ``fedmm._linalg``, which runs the C kernel
``fedmm_project_psd`` without the GIL.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm import _linalg
from fedmm._validation import as_array

__all__ = ["project_psd"]

_FLOAT64 = np.dtype(np.float64)


def project_psd(A: Any, *, out: np.ndarray | None = None) -> np.ndarray:
    r"""Euclidean (Frobenius) projection onto the positive semidefinite cone.

    For :math:`S = (A + A^\top)/2` with eigendecomposition
    :math:`S = \sum_i \lambda_i v_i v_i^\top`, returns
    :math:`\Pi(S) = \sum_i \max(\lambda_i, 0)\, v_i v_i^\top
    = S - \sum_{\lambda_i < 0} \lambda_i v_i v_i^\top` (the projection
    :math:`\Pi` of the first statistic block in FedMM §6,
    :math:`\mathcal S = \mathbb M_K^+ \times \mathbb R^{p\times K}`).
    Positive definite input is detected by a Cholesky attempt and returned
    symmetrized.  Otherwise the column where Cholesky stopped bounds the number
    of negative eigenvalues (Cauchy interlacing); when at most :math:`K/4` are
    possible, only the negative eigenpairs are computed (tridiagonal
    reduction, bisection, inverse iteration) and
    :math:`P = S - \sum_{\lambda_i < 0} \lambda_i v_i v_i^\top`, else all
    of them.  From :math:`K = 24`, a nearly PSD :math:`S` (Cholesky past its
    first :math:`K/4` columns) with at most 4 negative eigenvalues, counted by
    the :math:`LDL^\top` factorization of the Schur complement of the rows
    where Cholesky stopped, has them found by shift-invert Lanczos
    instead of the tridiagonal reduction; the result is accepted only when
    the count, the residuals and the gap certify it, otherwise the exact path
    runs.

    Parameters
    ----------
    A : array_like of shape (K, K) or (m, K, K)
        One matrix or a stack; finite values only.
    out : ndarray, optional
        C-contiguous float64 array of the same shape to write into (may be
        ``A`` itself for an in-place projection).

    Returns
    -------
    ndarray of the shape of ``A``, float64
        Symmetric positive semidefinite.

    Raises
    ------
    ValueError
        Non-square, wrong number of dimensions, NaN or infinity.
    numpy.linalg.LinAlgError
        The eigensolver failed.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import project_psd
    >>> P = project_psd(np.array([[1.0, 2.0], [2.0, 1.0]]))  # eigenvalues 3 and -1
    >>> np.round(P, 12)
    array([[1.5, 1.5],
           [1.5, 1.5]])
    """
    # C-contiguous float64 ndarrays go straight to the kernel (a per-round call
    # on small matrices); finiteness is checked while the kernel symmetrizes
    if not (type(A) is np.ndarray and A.dtype is _FLOAT64):
        A = as_array(A, "A", ndim=(2, 3), finite=False)
    if out is not None and not isinstance(out, np.ndarray):
        raise ValueError(f"Expected 'out' to be an ndarray, got {type(out).__name__}")
    return _linalg.project_psd(A, out)
