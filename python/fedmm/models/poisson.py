# SPDX-License-Identifier: BSD-3-Clause
"""Poisson observations with a latent log-intensity shift (FedMM paper, Appendix C.1).

Conditionally on a latent ``h ~ μ``, a count ``Z`` is Poisson with intensity
``exp(θ + h)``; ``θ ∈ ℝ`` is estimated as the MAP under the prior
``∝ exp(−λ eᶿ)``, i.e. it minimizes (eq. (43))

.. math::

    F(θ) = \\mathbb E_π\\Big[-\\log \\sum_k w_k\\,\\mathrm{Poisson}(Z; e^{θ+h_k})\\Big] + λ e^{θ}.

``μ = Σ_k w_k δ_{h_k}`` has a finite support, so the posterior of ``h`` given
``(Z, θ)``, ``∝ w_k exp(Z h_k − eᶿ e^{h_k})``, and the E-step are exact.

Two parameterizations (both in the paper):

``"joint"``
    ``S(Z, h) = (Z, −e^h)``, ``φ(θ) = (θ, eᶿ)``, ``𝒮 = ℝ_{>0} × ℝ_{<0}`` and
    ``T(s₁, s₂) = ln(s₁ / (λ − s₂))``.
``"explicit_mean"``
    ``E_π[Z]`` is known (aggregated once at start-up), ``S(Z, h) = −e^h``,
    ``ψ(θ) = −θ E_π[Z]``, ``𝒮 = ℝ_{<0}`` and ``T(s) = ln(E_π[Z] / (λ − s))``.

The statistic, the projection and ``T`` run in C (``models_em.c``,
:func:`fedmm.kernels.poisson_latent_model`), the very callbacks of the
compiled round engine: both FedMM backends give the same numbers bit for bit.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.special import gammaln

from fedmm import kernels
from fedmm._validation import as_array, check_in, check_index, check_real, check_statistic, index_range_error
from fedmm.models._compiled import CompiledCallbacks, array_key
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["PoissonLatent"]


class PoissonLatent(CompiledCallbacks, SurrogateModel):
    """Scalar Poisson model with a latent log-intensity shift on a finite support.

    Parameters
    ----------
    support : array_like of shape (K,)
        Support points ``h_k`` of the latent shift (finite reals).
    probabilities : array_like of shape (K,), optional
        Prior weights ``w_k`` (positive; normalized to sum to one).  Uniform by default.
    lam : float, default 1.0
        Prior strength ``λ > 0`` (penalty ``g(θ) = λ eᶿ``).
    parameterization : {"joint", "explicit_mean"}
        See the module docstring.
    min_mean : float, default 1e-12
        Floor of the count block in :meth:`project` (``T`` needs ``s₁ > 0``).
    mean_count : float, optional
        ``E_π[Z]`` for ``"explicit_mean"``; otherwise set by
        :meth:`fit_global_moments` / :meth:`init_statistic`.

    Notes
    -----
    A client's data is a 1-D array of non-negative integer counts (any real
    dtype holding integer values).  Layout: ``("count", (1,))`` (joint only)
    then ``("neg_exp_shift", (1,))``.  :meth:`project` maps the count block to
    ``[min_mean, ∞)`` and the shift block to ``[−e^{max h}, −e^{min h}]``,
    the closed convex hull of the posterior means ``−E[e^h | Z, θ]``.
    ``θ`` is a Python float.

    Examples
    --------
    >>> model = PoissonLatent([-0.5, 0.0, 0.5], lam=1.0)
    >>> model.T(model.layout.join(count=[2.0], neg_exp_shift=[-1.0]))
    0.0
    """

    _data_ndim = (1,)  # statistic() reads float64 arrays of this ndim without check_data

    #: ``γ = 1``: exact EM with full-batch oracles (FedMM paper App. C.1).
    default_step = 1.0

    def __init__(
        self,
        support: Any,
        probabilities: Any = None,
        *,
        lam: float = 1.0,
        parameterization: str = "joint",
        min_mean: float = 1e-12,
        mean_count: float | None = None,
    ) -> None:
        h = as_array(support, "support", ndim=1)
        if h.shape[0] == 0:
            raise ValueError("Expected 'support' to hold at least one point")
        if probabilities is None:
            w = np.full(h.shape[0], 1.0 / h.shape[0])
        else:
            w = as_array(probabilities, "probabilities", ndim=1)
            if w.shape != h.shape:
                raise ValueError(f"Expected 'probabilities' of shape {h.shape} like 'support', got {w.shape}")
            if np.any(w <= 0.0):
                raise ValueError("Expected 'probabilities' to be positive")
            w = w / w.sum()
        self.support = np.array(h, dtype=np.float64)
        self.probabilities = w
        self._log_prior = np.log(w)
        self._exp_support = np.exp(self.support)
        self.lam = check_real(lam, "lam", low=0.0, low_open=True)
        self.parameterization = check_in(parameterization, "parameterization", ("joint", "explicit_mean"))
        self.min_mean = check_real(min_mean, "min_mean", low=0.0, low_open=True)
        self.mean_count = None if mean_count is None else check_real(mean_count, "mean_count", low=0.0, low_open=True)
        blocks = [("neg_exp_shift", (1,))]
        if self.parameterization == "joint":
            blocks.insert(0, ("count", (1,)))
        self.layout = StatisticLayout(blocks)

    # -- data ---------------------------------------------------------------
    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        Z = as_array(data, name, ndim=1, order="C")
        if Z.shape[0] == 0:
            raise ValueError(f"Expected '{name}' to hold at least one count, got shape {Z.shape}")
        if np.any(Z < 0) or np.any(Z != np.floor(Z)):
            raise ValueError(f"Expected '{name}' to hold non-negative integer counts")
        return Z

    def fit_global_moments(self, datas: Sequence[Any]) -> "PoissonLatent":
        """``E_π[Z]`` from the clients' local (count, sum) pairs, sent once at start-up."""
        sums = [(d.shape[0], float(d.sum())) for d in (self.check_data(x, f"datas[{i}]") for i, x in enumerate(datas))]
        total = sum(s for _, s in sums) / sum(n for n, _ in sums)
        if total <= 0.0:
            raise ValueError("Expected at least one positive count in 'datas' (otherwise the MAP is θ = −∞)")
        self.mean_count = total
        return self

    def prepare(self, datas: Sequence[Any]) -> None:
        """``"explicit_mean"``: :meth:`fit_global_moments` (``E_π[Z]``, as :meth:`init_statistic` does);
        ``"joint"`` needs nothing from the data."""
        if self.parameterization == "explicit_mean":
            self.fit_global_moments(datas)

    # -- E-step ---------------------------------------------------------------
    def posterior(self, data: Any, theta: float) -> np.ndarray:
        """Posterior probabilities of the support points given each count, shape ``(N, K)``."""
        Z = np.asarray(data, dtype=np.float64)
        logits = np.multiply.outer(Z, self.support)
        logits += self._log_prior
        logits -= np.exp(float(theta)) * self._exp_support
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
        return logits

    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """``mean_j (Z_j, −E[e^h | Z_j, θ])`` (joint) or ``−mean_j E[e^h | Z_j, θ]`` over the samples ``idx``
        (all if None), one compiled call."""
        Z = self._statistic_data(data)
        idx = check_index(idx, Z.shape[0], bounds=False)
        compiled = self._kernel()
        try:
            out, _ = compiled.statistic(compiled.derive(self.theta_vector(theta)), Z.reshape(-1, 1), idx)
        except IndexError:  # the compiled loop tests every index (see check_index)
            raise index_range_error(idx, Z.shape[0]) from None
        return out

    # -- M-step ---------------------------------------------------------------
    def T(self, s: np.ndarray) -> float:
        """``ln(s₁ / (λ − s₂))`` (joint) or ``ln(E_π[Z] / (λ − s))`` (explicit mean)."""
        s = check_statistic(s, self.layout.size)
        if not np.isfinite(s).all():
            raise ValueError("Expected 's' to be finite")
        if self.parameterization == "joint":
            s1, s2 = float(s[0]), float(s[1])
        else:
            if self.mean_count is None:
                raise RuntimeError("PoissonLatent(parameterization='explicit_mean') needs E_π[Z]: "
                                   "call fit_global_moments(datas)")
            s1, s2 = self.mean_count, float(s[0])
        if s1 <= 0.0 or self.lam - s2 <= 0.0:
            raise ValueError(f"Expected s₁ > 0 and s₂ < λ = {self.lam} (project s first), got s₁ = {s1}, s₂ = {s2}")
        return float(self._kernel().T(s)[0])

    def project(self, s: np.ndarray) -> np.ndarray:
        """The count block onto ``[min_mean, ∞)`` (joint) and the shift block onto ``[−e^{max h}, −e^{min h}]``."""
        return self._kernel().project(check_statistic(s, self.layout.size))

    # -- compiled backend -----------------------------------------------------
    def _compiled_key(self) -> Any:
        mean = self.mean_count if self.parameterization == "explicit_mean" else None
        return (array_key(self.support), array_key(self._log_prior), self.lam, self.parameterization,
                self.min_mean, mean)

    def _build_compiled(self) -> Any:
        return kernels.poisson_latent_model(
            self.support, self._log_prior, lam=self.lam, parameterization=self.parameterization,
            min_mean=self.min_mean, mean_count=self.mean_count if self.parameterization == "explicit_mean" else None)

    def compiled_model(self) -> Any:
        """:func:`fedmm.kernels.poisson_latent_model` with this model's constants (the callbacks its
        :meth:`statistic`, :meth:`project` and :meth:`T` run); None while ``E_π[Z]`` of the explicit-mean
        parameterization is unknown (a subclass that overrides those methods runs on the Python backend,
        see :meth:`~fedmm.models.SurrogateModel.compiled_overrides`)."""
        if self.parameterization == "explicit_mean" and self.mean_count is None:
            return None
        return self._kernel()

    def theta_vector(self, theta: Any) -> np.ndarray:
        return np.array([self._theta(theta)])

    @staticmethod
    def _theta(theta: Any) -> float:
        """``θ`` as a finite float (a real scalar or an array of one value)."""
        if type(theta) is float:  # what T returns: the per-round path
            th = theta
        elif isinstance(theta, (int, np.floating, np.integer)) and not isinstance(theta, (bool, np.bool_)):
            th = float(theta)
        else:
            arr = as_array(theta, "theta", finite=False)
            if arr.size != 1:
                raise ValueError(f"Expected 'theta' to be a real scalar, got shape {arr.shape}")
            th = float(arr.reshape(-1)[0])
        if not math.isfinite(th):
            raise ValueError(f"Expected a finite 'theta', got {th}")
        return th

    def theta_to_dict(self, theta: Any) -> dict[str, np.ndarray]:
        """``{"theta": θ}`` as a 0-d float64 array."""
        return {"theta": np.array(self._theta(theta), dtype=np.float64)}

    def theta_from_dict(self, arrays: dict[str, Any]) -> float:
        """Inverse of :meth:`theta_to_dict`: ``θ`` as a float."""
        if not isinstance(arrays, dict) or set(arrays) != {"theta"}:
            raise ValueError(f"Expected 'arrays' with the single key 'theta', got {arrays!r}")
        return self._theta(arrays["theta"])

    def theta_from_vector(self, vector: np.ndarray, like: Any = None) -> float:
        v = as_array(vector, "vector", ndim=1)
        if v.shape != (1,):
            raise ValueError(f"Expected 'vector' to be a flat parameter of shape (1,), got {v.shape}")
        return float(v[0])

    # -- start-up and monitoring ------------------------------------------
    def init_statistic(self, datas: Sequence[Any], rng: Any) -> np.ndarray:
        """``Ŝ₀ = s̄(θ₀)`` at the moment estimate ``θ₀ = ln(E_π[Z] / E_μ[e^h])`` (deterministic)."""
        datas = [self.check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
        self.fit_global_moments(datas)
        theta0 = float(np.log(self.mean_count / (self.probabilities @ self._exp_support)))
        n = sum(d.shape[0] for d in datas)
        s0 = np.zeros(self.layout.size)
        for d in datas:
            s0 += (d.shape[0] / n) * self.statistic(d, theta0)
        return self.project(s0)

    def objective(self, data: Any, theta: Any) -> float:
        """``F(θ)`` of eq. (43) on ``data``: mean negative log-likelihood (nats) plus ``λ eᶿ``."""
        Z = self.check_data(data)
        th = self._theta(theta)
        log_rate = th + self.support  # (K,)
        terms = np.multiply.outer(Z, log_rate) - np.exp(log_rate) + self._log_prior  # (N, K)
        top = terms.max(axis=1)
        log_mix = top + np.log(np.exp(terms - top[:, None]).sum(axis=1))
        return float(-(log_mix - gammaln(Z + 1.0)).mean() + self.lam * np.exp(th))
