# SPDX-License-Identifier: BSD-3-Clause
"""Dictionary learning by variational surrogate (FedMM paper §2.3 eq. (14)-(18) and §6 eq. (28))."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm.kernels import dictionary_model_max_iter, warn_unconverged
from fedmm._validation import (as_array, check_bool, check_count, check_in, check_index, check_int, check_real,
                               check_statistic)
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["DictionaryLearning"]


class DictionaryLearning(SurrogateModel):
    """Sparse dictionary learning, ``min_θ Σ_i μ_i E_{π_i}[min_h ½‖Z − θh‖² + λ‖h‖₁] + η‖θ‖²_F``.

    With the ½ convention of eq. (28),
    ``ℓ̃(Z, h, θ) = ½‖Z‖² + λ‖h‖₁ − ⟨Z hᵀ, θ⟩ + ½⟨h hᵀ, θᵀθ⟩``, so::

        S̄(Z, θ) = (h hᵀ, Z hᵀ),   h = argmin_h ½‖Z − θh‖² + λ‖h‖₁   (batched LASSO kernel)
        𝒮 = 𝕄_K⁺ × ℝ^{p×K},       Π(s) = (proj_PSD(sym(s⁽¹⁾)), s⁽²⁾)
        T(s) = s⁽²⁾ (s⁽¹⁾ + 2ηI)⁻¹                       (constraint=None, Cholesky solve)
        T(s) = argmin_{‖θ_k‖ ≤ 1} ½tr(θᵀθ s⁽¹⁾) − tr(θᵀs⁽²⁾) + η‖θ‖²_F   (constraint='unit_norm',
                                                           Mairal's block-coordinate update)

    Parameters
    ----------
    n_components : int
        Number of atoms ``K``.
    lam : float in (0, 1e150]
        ``λ`` of the codes' ℓ1 penalty (the LASSO's objective holds ``λ²``-sized terms, which must stay
        finite in float64; any ``λ`` above ``max|Dᵀz|`` already gives zero codes).
    ridge : float in [0, 1e150], default 0.0
        Ridge weight ``η`` (the paper's notation) of ``g(θ) = η‖θ‖²_F`` (``T`` adds ``2η`` to ``s⁽¹⁾``'s
        diagonal; its square must stay finite in float64).  With ``constraint=None``
        and ``η = 0``, ``T`` needs ``s⁽¹⁾`` positive definite.
    constraint : {None, 'unit_norm'}
        Optional constraint ``‖θ_k‖₂ ≤ 1`` on the atoms.
    n_features : int, optional
        Signal dimension ``p``; taken from the first data checked if None.
    tol, max_iter : float, int
        LASSO solver tolerance (relative duality gap) and iteration cap
        (``1 <= max_iter <= 2**31 − 1``; the solves check for Ctrl-C while
        they run).  The compiled backend runs a round without checking for
        Ctrl-C, so it takes only ``max_iter <= 2**32 // (K² + 4K)`` (one
        column below 2**32 multiply-adds, the bound of
        :func:`fedmm.kernels.dictionary_model`); above it
        :meth:`compiled_model` is None and rounds run on the Python backend.
    update_tol, update_max_iter : float, int
        Tolerance (largest column step) and sweep cap of the block-coordinate
        descent that computes ``T`` under ``constraint='unit_norm'`` (see
        :func:`fedmm.kernels.dictionary_update`); unused by the ridge closed
        form.  The sweeps converge linearly and slowly on the ill-conditioned
        ``s⁽¹⁾`` of sparse codes (about 100 sweeps to 1e-10 with K = 100), so a
        training run may trade the default's accuracy for speed, as it does
        with ``tol``.
    warm_start : bool, default True
        Each client remembers the code of each of its samples and restarts
        the LASSO from it (θ_t moves little between rounds, so a few
        iterations suffice).  The statistics agree with cold starts to the
        solver tolerance; ``False`` gives cold starts at every call.

    Notes
    -----
    A client's data is an ndarray of shape ``(N_i, p)``, one signal per row
    (C order); ``data[idx].T`` is the F-ordered ``(p, b)`` block the kernels
    read without copying.  ``θ`` is an ndarray of shape ``(p, K)``.  The
    statistic is the flat vector ``[vec(s⁽¹⁾), vec(s⁽²⁾)]`` (blocks ``"A"``
    of shape (K, K) and ``"B"`` of shape (p, K), C order).

    Examples
    --------
    Deterministic MM iterations ``θ ← T(S̄(Z, θ))`` on one client's data decrease the objective:

    >>> import numpy as np
    >>> from fedmm.data import synthetic_dictionary
    >>> Z, theta_star, _ = synthetic_dictionary(500, 8, 5, seed=0)
    >>> model = DictionaryLearning(5, lam=0.1, ridge=0.1, n_features=8)
    >>> theta = model.T(model.init_statistic([Z], np.random.default_rng(0)))
    >>> f0 = model.objective(Z, theta)
    >>> for _ in range(20):
    ...     theta = model.T(model.statistic(Z, theta))
    >>> theta.shape, bool(model.objective(Z, theta) < 0.5 * f0)
    ((8, 5), True)
    """

    _data_ndim = (2,)  # statistic() reads float64 arrays of this ndim without check_data

    #: ``γ_t = t^{-1/2}``.  The FedMM paper's §6 schedule ``γ_t = β/√(β + t)`` with ``β = 0.05``
    #: (tuned there for its figures, and still what the experiments pass) moves too little
    #: per round to be a default: on 2000 synthetic points (p = 20, K = 15, λ = 0.1, unit-norm
    #: atoms, 4 clients, full batches) it leaves the objective at 2.90 after 400 rounds, where
    #: ``t^{-1/2}`` reaches scikit-learn's one-pass objective (1.95) in 60 rounds, 80 with
    #: minibatches of 50, 2 of 4 clients per round and 8-bit stochastic rounding.
    default_step = ("inverse_sqrt", 1.0)
    #: ``Π`` (PSD projection: Cholesky, eigenvalues) and ``T`` (Cholesky of ``s⁽¹⁾ + 2ηI``) work
    #: on squares and products of the entries of ``s⁽¹⁾``; below ``2**480`` (about 3.1e144) every
    #: sum of up to ``2**62`` of those squares is a finite float64.  Beyond it the server refuses
    #: the message or the step (:attr:`SurrogateModel.statistic_bound`): a statistic of 1e300
    #: may pass one ``T`` and then break the projection of a later round.
    statistic_bound = 2.0**480

    def __init__(self, n_components: int, lam: float, ridge: float = 0.0, constraint: str | None = None, *,
                 n_features: int | None = None, tol: float = 1e-9, max_iter: int = 1000,
                 warm_start: bool = True, update_tol: float = 1e-10, update_max_iter: int = 500) -> None:
        self.n_components = check_int(n_components, "n_components", low=1)
        self.lam = check_real(lam, "lam", low=0.0, high=1e150, low_open=True)
        self.ridge = check_real(ridge, "ridge", low=0.0, high=1e150)
        self.constraint = check_in(constraint, "constraint", (None, "unit_norm"))
        self.n_features = None if n_features is None else check_int(n_features, "n_features", low=1)
        self.tol = check_real(tol, "tol", low=0.0)
        self.max_iter = check_count(max_iter, "max_iter", low=1)
        self.update_tol = check_real(update_tol, "update_tol", low=0.0)
        self.update_max_iter = check_count(update_max_iter, "update_max_iter", low=1)
        self.warm_start = check_bool(warm_start, "warm_start")
        self._layout: StatisticLayout | None = None

    # -- layout -------------------------------------------------------------
    @property
    def layout(self) -> StatisticLayout:  # type: ignore[override]
        if self.n_features is None:
            raise ValueError("DictionaryLearning does not know the signal dimension p yet: pass n_features "
                             "or call check_data on a client's data first")
        if self._layout is None:
            K, p = self.n_components, self.n_features
            self._layout = StatisticLayout([("A", (K, K)), ("B", (p, K))])
        return self._layout

    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        arr = as_array(data, name, ndim=2, order="C")
        if arr.shape[0] == 0:
            raise ValueError(f"Expected '{name}' to hold at least one sample, got shape {arr.shape}")
        if self.n_features is None:
            self.n_features = arr.shape[1]
        elif arr.shape[1] != self.n_features:
            raise ValueError(f"Expected '{name}' of shape (N, p) with p = {self.n_features}, got {arr.shape}")
        return arr

    def _split(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        K = self.n_components
        s = self.layout.check(s)
        return s[: K * K].reshape(K, K), s[K * K:].reshape(self.n_features, K)

    # -- client side --------------------------------------------------------
    @property
    def uses_memory(self) -> bool:  # type: ignore[override]
        """Warm starts: each client remembers the last code of each of its samples."""
        return self.warm_start

    def _warm_codes(self, memory: dict | None, data: np.ndarray, idx: np.ndarray | None) -> np.ndarray | None:
        """Remembered codes of the samples ``idx``, shape (b, K), or None on a cold start."""
        if memory is None:
            return None
        codes = memory.get("codes")
        if codes is None:
            # Zero codes are the solver's own cold start: the first call equals a cold call.
            codes = memory["codes"] = np.zeros((data.shape[0], self.n_components))
        elif not (type(codes) is np.ndarray and codes.dtype == np.float64 and codes.flags.c_contiguous
                  and codes.flags.writeable):
            # The new codes are written into this array (here and by the compiled rounds): memory that came
            # back read-only (Ray's object store, a pickle's out-of-band buffer) or in another layout is
            # replaced by an owned, writable copy first.
            codes = memory["codes"] = np.array(codes, dtype=np.float64, order="C")
        return codes if idx is None else codes[idx]

    @staticmethod
    def _remember(memory: dict | None, idx: np.ndarray | None, codes: np.ndarray) -> None:
        """Store the new codes (shape (b, K), one row per sample of ``idx``)."""
        if memory is not None:
            if idx is None:
                memory["codes"][...] = codes
            else:
                memory["codes"][idx] = codes

    def _fused_statistics(self, theta: Any, Z: np.ndarray, H0: np.ndarray | None,
                          offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``kernels.dictionary_statistics(theta, Z, lam, segments=offsets, H0=H0, ...)`` on the hot path.

        ``lam``, ``tol`` and ``max_iter`` were checked by ``__init__``, ``Z``
        (F-ordered float64 ``(p, b)``) comes from data checked by
        :meth:`check_data`, ``offsets`` and ``H0`` (``(K, b)``, previous
        kernel outputs) are built here: only ``θ`` is checked per call, and the
        compiled kernel is called directly (same numbers as the public wrapper,
        which any other ``θ`` goes through).
        """
        p, K = self.n_features, self.n_components
        if not (type(theta) is np.ndarray and theta.dtype == np.float64 and theta.shape == (p, K)
                and theta.flags.f_contiguous and self.lam > 0 and np.isfinite(theta).all()):
            theta = as_array(theta, "theta", ndim=2)
            if theta.shape != (p, K):
                raise ValueError(f"Expected 'theta' of shape (p, K) = ({p}, {K}), got {theta.shape}")
            return kernels.dictionary_statistics(theta, Z, self.lam, segments=offsets, H0=H0, tol=self.tol,
                                                 max_iter=self.max_iter, return_codes=True)
        A, B, H, n_bad = kernels.fused_dictionary_statistics(theta, Z, self.lam, offsets, H0, tol=self.tol,
                                                             max_iter=self.max_iter)
        warn_unconverged(n_bad, Z.shape[1], "dictionary_statistics", self.max_iter)
        return A, B, H

    def statistic(self, data: np.ndarray, theta: Any, idx: np.ndarray | None = None, *,
                  memory: dict | None = None) -> np.ndarray:
        """``b⁻¹ Σ_j (h_j h_jᵀ, z_j h_jᵀ)`` over the samples ``idx`` (eq. (18)), one fused kernel call.

        ``memory`` (a dict owned by the client, used when ``warm_start``) keeps
        the last code of every local sample: the LASSO solves start from them
        and store the new codes.  The codes are the same minimizers to the
        solver tolerance; only the number of iterations changes.
        """
        return self.statistic_batch([data], theta, [idx], memories=None if memory is None else [memory])[0]

    def statistic_batch(self, datas: Sequence[np.ndarray], theta: Any,
                        idxs: Sequence[np.ndarray | None], *,
                        memories: Sequence[dict | None] | None = None) -> np.ndarray:
        """All clients' statistics at one ``θ`` with one segmented kernel call (rows equal :meth:`statistic`)."""
        m = len(datas)
        if len(idxs) != m:
            raise ValueError(f"Expected one entry of 'idxs' per data set ({m}), got {len(idxs)}")
        one = m == 1
        datas = [self._statistic_data(d, "data" if one else f"datas[{j}]") for j, d in enumerate(datas)]
        p, K = self.n_features, self.n_components
        for j, d in enumerate(datas):
            if d.shape[1] != p:
                raise ValueError(f"Expected '{'data' if one else f'datas[{j}]'}' of shape (N, {p}), got {d.shape}")
        idxs = [check_index(idx, d.shape[0], "idx" if one else f"idxs[{j}]")
                for j, (d, idx) in enumerate(zip(datas, idxs))]
        bounds = [0]
        for d, idx in zip(datas, idxs):
            bounds.append(bounds[-1] + (d.shape[0] if idx is None else len(idx)))
        segments = np.array(bounds, dtype=np.int64)
        # The minibatches (and their remembered codes) are gathered straight into one buffer each.
        Z_rows = np.empty((bounds[-1], p))
        H0_rows = None if memories is None else np.empty((bounds[-1], K))
        for j, (d, idx) in enumerate(zip(datas, idxs)):
            lo, hi = bounds[j], bounds[j + 1]
            # take() without out= (its out= is buffered in 'raise' mode) keeps the bounds check.
            Z_rows[lo:hi] = d if idx is None else d.take(idx, axis=0)
            if H0_rows is not None:
                codes = self._warm_codes(memories[j], d, None)
                H0_rows[lo:hi] = codes if idx is None else codes.take(idx, axis=0)
        A, B, H = self._fused_statistics(theta, Z_rows.T, None if H0_rows is None else H0_rows.T, segments)
        if memories is not None:
            codes_rows = H.T
            for j, (mem, idx) in enumerate(zip(memories, idxs)):
                self._remember(mem, idx, codes_rows[bounds[j]:bounds[j + 1]])
        out = np.empty((m, self.layout.size))
        out[:, : K * K] = A.reshape(m, K * K)
        out[:, K * K:].reshape(B.shape)[...] = B
        return out

    # -- server side --------------------------------------------------------
    def T(self, s: np.ndarray) -> np.ndarray:
        """The dictionary update ``T(s)`` (ridge closed form or unit-norm BCD), shape (p, K)."""
        s = check_statistic(s, self.layout.size)
        if self.constraint is None:
            # Per-round server call: the compiled ridge update on the operands the public
            # wrapper would build, sym(A) and B (ridge was checked by __init__, s is finite float64).
            return kernels.dictionary_update_ridge_flat(np.ascontiguousarray(s), self.n_components,
                                                        self.n_features, self.ridge)
        A, B = self._split(s)
        constraint = "ridge" if self.constraint is None else "unit_norm"
        return kernels.dictionary_update(A, B, constraint=constraint, ridge=self.ridge, tol=self.update_tol,
                                         max_iter=self.update_max_iter)

    def sa_step(self, S: np.ndarray, H: np.ndarray, gamma: float, project: bool = True) -> tuple[np.ndarray, Any]:
        """``(Π(S + γH), T(Π(S + γH)))`` as :meth:`SurrogateModel.sa_step`; one compiled call for the ridge ``T``."""
        if (self.constraint is None and type(S) is np.ndarray and type(H) is np.ndarray
                and S.dtype == np.float64 and H.dtype == np.float64 and S.shape == H.shape == (self.layout.size,)):
            return kernels.dictionary_sa_step(np.ascontiguousarray(S), np.ascontiguousarray(H), float(gamma),
                                              self.n_components, self.n_features, self.ridge, bool(project))
        return super().sa_step(S, H, gamma, project)

    def project(self, s: np.ndarray) -> np.ndarray:
        """``(proj_PSD(sym(s⁽¹⁾)), s⁽²⁾)``: the Euclidean projection onto ``𝒮 = 𝕄_K⁺ × ℝ^{p×K}``."""
        K = self.n_components
        out = np.array(check_statistic(s, self.layout.size), dtype=np.float64, copy=True)
        A = out[: K * K].reshape(K, K)
        kernels.project_psd(A, out=A)
        return out

    def project_theta(self, theta: Any) -> np.ndarray:
        """Atoms scaled back into the unit ball for ``'unit_norm'``; the identity otherwise."""
        theta = np.asarray(theta, dtype=np.float64)
        if self.constraint is None:
            return theta
        norms = np.linalg.norm(theta, axis=0)
        return theta / np.maximum(norms, 1.0)

    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """``Ŝ_0 = (I_K, (1 + 2η) θ_0)`` with ``θ_0`` of N(0, 1) entries (unit atoms for 'unit_norm'),
        so that ``T(Ŝ_0) = θ_0``; the server never looks at the data."""
        p, K = self.layout.shape("B")
        theta0 = rng.standard_normal((p, K))
        if self.constraint == "unit_norm":
            theta0 /= np.linalg.norm(theta0, axis=0)
        return self.layout.join(A=np.eye(K), B=(1.0 + 2.0 * self.ridge) * theta0)

    def theta_vector(self, theta: Any) -> np.ndarray:
        return as_array(theta, "theta", finite=False).ravel()

    def theta_to_dict(self, theta: Any) -> dict[str, np.ndarray]:
        """``{"D": the (p, K) dictionary}`` (a float64 copy)."""
        return {"D": np.array(as_array(theta, "theta", ndim=2, finite=False), dtype=np.float64, copy=True)}

    def theta_from_dict(self, arrays: dict[str, Any]) -> np.ndarray:
        """Inverse of :meth:`theta_to_dict`: the ``(p, K)`` dictionary (Fortran order, as :meth:`T` returns it)."""
        if not isinstance(arrays, dict) or set(arrays) != {"D"}:
            raise ValueError(f"Expected 'arrays' with the single key 'D', got {arrays!r}")
        return np.asfortranarray(as_array(arrays["D"], "arrays['D']", ndim=2), dtype=np.float64)

    # -- compiled backend -------------------------------------------------------
    def compiled_model(self) -> Any:
        """:func:`fedmm.kernels.dictionary_model` for the ridge ``T`` (None for ``'unit_norm'``, whose
        iterative ``T`` runs on the Python backend, and for a ``max_iter`` above the compiled model's
        bound ``2**32 // (K² + 4K)``: those rounds run on the interruptible Python backend).  A subclass
        that overrides :meth:`statistic`, :meth:`T`, ... runs on the Python backend
        (:meth:`~fedmm.models.SurrogateModel.compiled_overrides`)."""
        if (self.constraint is not None or self.n_features is None
                or self.max_iter > dictionary_model_max_iter(self.n_components)):
            return None
        return kernels.dictionary_model(self.n_features, self.n_components, self.lam, self.ridge, tol=self.tol,
                                        max_iter=self.max_iter, method="auto")

    def compiled_memory(self, memory: dict | None, data: Any) -> np.ndarray | None:
        """The remembered codes ``(N_i, K)`` of a client (warm starts), None without warm starts."""
        if memory is None or not self.warm_start:
            return None
        return self._warm_codes(memory, data, None)

    def theta_from_compiled(self, buffer: np.ndarray, like: Any) -> np.ndarray:
        """The dictionary ``(p, K)`` (Fortran order, as :meth:`T` returns it) of a compiled parameter."""
        pk = self.n_features * self.n_components
        return np.array(buffer[pk:2 * pk].reshape((self.n_features, self.n_components), order="F"), order="F")

    # -- monitoring ---------------------------------------------------------
    def objective(self, data: np.ndarray, theta: Any) -> float:
        """``mean_j [½‖z_j − θh_j‖² + λ‖h_j‖₁] + η‖θ‖²_F`` with the optimal codes ``h_j``."""
        data = self.check_data(data)
        theta = as_array(theta, "theta", ndim=2)
        if theta.shape != (self.n_features, self.n_components):
            raise ValueError(f"Expected 'theta' of shape (p, K) = ({self.n_features}, {self.n_components}), "
                             f"got {theta.shape}")
        *_, per_column = kernels.dictionary_statistics(theta, data.T, self.lam, tol=self.tol,
                                                        max_iter=self.max_iter, return_objective=True)
        theta = np.asarray(theta)
        return float(np.mean(per_column)) + self.ridge * float(np.sum(theta * theta))

    def __repr__(self) -> str:
        return (f"DictionaryLearning(n_components={self.n_components}, lam={self.lam!r}, ridge={self.ridge!r}, "
                f"constraint={self.constraint!r})")
