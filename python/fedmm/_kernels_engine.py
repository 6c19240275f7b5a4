# SPDX-License-Identifier: BSD-3-Clause
"""Checked Python faces of ``engine.c``: compiled surrogate models and stretches of FedMM rounds."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm import _engine
from fedmm._validation import check_int, check_real

__all__ = ["CompiledModel", "dictionary_model", "sample_model", "run_rounds", "LASSO_METHODS"]

#: The compiled model handle (``fedmm_model_t`` with its context), see :class:`fedmm._engine.CompiledModel`.
CompiledModel = _engine.CompiledModel
#: LASSO methods of the C solver, by name (``FEDMM_LASSO_*``).
LASSO_METHODS = {"auto": 0, "cd": 1, "active_set": 2}


def dictionary_model(n_features: int, n_components: int, lam: float, eta: float = 0.0, *, tol: float = 1e-9,
                     max_iter: int = 1000, method: str = "auto") -> CompiledModel:
    """Dictionary learning with the ridge ``T`` as a compiled model (``fedmm_dictionary_model``).

    Statistic ``[vec(H Hᵀ/b), vec(Z Hᵀ/b)]`` (FedMM paper eq. (18)) of the
    LASSO codes ``H`` (warm-started from the client's per-sample memory of
    ``n_components`` values), projection onto ``𝕄_K⁺ × ℝ^{p×K}``, and
    ``T(s) = s⁽²⁾ (sym(s⁽¹⁾) + 2ηI)⁻¹``.  The compiled parameter is the
    dictionary row-major, then column-major (``theta_size = 2 p K``).
    """
    p = check_int(n_features, "n_features", low=1)
    k = check_int(n_components, "n_components", low=1)
    lam = check_real(lam, "lam", low=0.0, low_open=True)
    eta = check_real(eta, "eta", low=0.0)
    tol = check_real(tol, "tol", low=0.0)
    max_iter = check_int(max_iter, "max_iter", low=1)
    if method not in LASSO_METHODS:
        raise ValueError(f"Expected 'method' in {sorted(LASSO_METHODS)}, got {method!r}")
    return _engine.dictionary_model(p, k, lam, eta, tol, max_iter, LASSO_METHODS[method])


def sample_model(q: int, d: int, sample_size: int, statistic: int, T: int, project: int = 0,
                 constants: Any = None, name: str = "sample model") -> CompiledModel:
    """A compiled model from the C addresses of per-sample functions (``fedmm_sample_model``).

    Parameters
    ----------
    q, d, sample_size : int
        Lengths of the statistic, of the flat parameter and of one data row.
    statistic : int
        Address of ``int f(const double *constants, const double *theta,
        const double *z, double *out)`` writing ``S̄(z, θ)`` (length ``q``)
        for one row ``z``; the engine averages over the minibatch in row
        order.  Returns 0, or a nonzero code on failure.
    T : int
        Address of ``int T(const double *constants, const double *s, double *theta)``.
    project : int, optional
        Address of ``int project(const double *constants, double *s)`` (0: ``𝒮`` is the whole space).
    constants : array_like of float64, optional
        Read-only values every function receives (kept alive by the model).
    name : str
        Used in error messages.
    """
    q = check_int(q, "q", low=1)
    d = check_int(d, "d", low=1)
    sample_size = check_int(sample_size, "sample_size", low=1)
    for value, label in ((statistic, "statistic"), (T, "T"), (project, "project")):
        check_int(value, label, low=0)
    consts = None if constants is None else np.ascontiguousarray(constants, dtype=np.float64).ravel()
    if consts is not None and not np.isfinite(consts).all():
        raise ValueError("Expected 'constants' to be finite")
    return _engine.sample_model(q, d, sample_size, int(statistic), int(T), int(project), consts, str(name))


def run_rounds(*args: Any, **kwargs: Any) -> tuple:
    """Whole FedMM rounds in one GIL-free call; see :func:`fedmm._engine.run_rounds` for the arguments.

    The engine layer (:mod:`fedmm.engine.compiled`) builds the arguments
    from the server's and the clients' public state.
    """
    return _engine.run_rounds(*args, **kwargs)
