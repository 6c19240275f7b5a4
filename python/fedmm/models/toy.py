# SPDX-License-Identifier: BSD-3-Clause
"""The toy model of Remark 1 of the FedMM paper, where Θ-space averaging is provably wrong."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import as_array, check_index, check_real, check_statistic, index_range_error
from fedmm.models._compiled import CompiledCallbacks
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["InverseToy"]

_NO_THETA = np.zeros(1)  # the statistic does not depend on θ
_NO_THETA.flags.writeable = False


class InverseToy(CompiledCallbacks, SurrogateModel):
    """Loss ``ℓ(Z, θ) = Zθ + 1/θ`` on ``θ > 0`` (FedMM paper, Remark 1).

    With ``φ(θ) = −θ``, ``ψ(θ) = 1/θ`` and ``S̄(Z, θ) = Z`` the surrogate is
    linear in ``s`` and ``T(s) = 1/√s``.  The federated objective
    ``Σ_i μ_i E_i[Z] θ + 1/θ`` is minimized at
    ``θ* = (Σ_i μ_i E_i[Z])^{-1/2}``: aggregation in S-space finds it, while
    aggregation in Θ-space (eq. (21)) converges to ``Σ_i μ_i E_i[Z]^{-1/2}``.

    Parameters
    ----------
    floor : float, default 1e-12
        ``𝒮 = ℝ_{>0}`` is open; :meth:`project` maps onto the closed set
        ``[floor, ∞)`` so that ``T`` stays defined after compression or
        control-variate steps.  Likewise :meth:`project_theta` for ``Θ``.

    Notes
    -----
    A client's data is a 1-D array of shape ``(N_i,)`` of positive samples
    (Remark 1 assumes ``Z > 0`` almost surely); ``(N_i, 1)`` is accepted.
    The statistic is a vector of shape ``(1,)`` and θ an ndarray of shape ``(1,)``.
    The statistic, ``T`` and the projections run in C
    (:func:`fedmm.kernels.inverse_toy_model`), the callbacks of the compiled
    round engine: both FedMM backends give the same numbers bit for bit.

    Examples
    --------
    >>> import numpy as np
    >>> m = InverseToy()
    >>> m.T(np.array([4.0]))
    array([0.5])
    """

    _data_ndim = (1,)  # statistic() reads float64 arrays of this ndim without check_data

    #: ``γ = 1``: ``S̄(Z, θ) = Z`` does not depend on ``θ``, so one full-batch round with
    #: ``γ = 1`` lands on ``θ*``.
    default_step = 1.0

    def __init__(self, floor: float = 1e-12) -> None:
        self.floor = check_real(floor, "floor", low=0.0, low_open=True)
        self.layout = StatisticLayout([("Z", (1,))])

    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        arr = super().check_data(data, name)
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise ValueError(f"Expected '{name}' of shape (N,) or (N, 1), got {arr.shape}")
        if not (arr > 0).all():
            raise ValueError(f"Expected '{name}' to hold positive samples (Remark 1 needs Z > 0)")
        return arr

    def statistic(self, data: np.ndarray, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """Mean of ``S̄(Z_j, θ) = Z_j`` over ``idx`` (independent of θ; a sum in sample order, divided by ``b``)."""
        z = self._statistic_data(data)
        idx = check_index(idx, z.shape[0], bounds=False)
        try:
            return self._kernel().statistic(_NO_THETA, z.reshape(-1, 1), idx)[0]
        except IndexError:  # the compiled loop tests every index (see check_index)
            raise index_range_error(idx, z.shape[0]) from None

    def T(self, s: np.ndarray) -> np.ndarray:
        """``T(s) = s^{-1/2}``, shape (1,)."""
        s = check_statistic(s, 1)
        if not s[0] > 0.0:
            raise ValueError(f"Expected a finite statistic s > 0 (project it first), got {s}")
        return self._kernel().T(s)

    def project(self, s: np.ndarray) -> np.ndarray:
        """Projection onto ``[floor, ∞)``."""
        return self._kernel().project(check_statistic(s, 1))

    def project_theta(self, theta: Any) -> np.ndarray:
        """Projection of θ onto ``[floor, ∞)``."""
        return self._kernel().project_theta(np.asarray(theta, dtype=np.float64).reshape(1))

    # -- compiled backend -----------------------------------------------------
    def _compiled_key(self) -> Any:
        return self.floor

    def _build_compiled(self) -> Any:
        return kernels.inverse_toy_model(self.floor)

    def compiled_model(self) -> Any:
        """:func:`fedmm.kernels.inverse_toy_model` (the callbacks of :meth:`statistic`, :meth:`T` and the
        projections; a subclass that overrides them runs on the Python backend, see
        :meth:`~fedmm.models.SurrogateModel.compiled_overrides`)."""
        return self._kernel()

    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """``Ŝ_0`` uniform on ``[0.5, 2]`` (any positive value is valid)."""
        return np.array([rng.uniform(0.5, 2.0)], dtype=np.float64)

    def objective(self, data: np.ndarray, theta: Any) -> float:
        """``E[Z] θ + 1/θ`` on ``data``."""
        z = self.check_data(data)
        th = as_array(theta, "theta")
        if th.size != 1:
            raise ValueError(f"Expected 'theta' of shape (1,), got {th.shape}")
        th = float(th.reshape(-1)[0])
        return float(np.mean(z) * th + 1.0 / th)

    def minimizer(self, datas: Sequence[Any], weights: Sequence[float]) -> float:
        """``θ* = (Σ_i μ_i mean(Z_i))^{-1/2}`` for finite client samples."""
        m = sum(float(w) * float(np.mean(d)) for w, d in zip(weights, datas))
        return m ** -0.5

    def __repr__(self) -> str:
        return f"InverseToy(floor={self.floor!r})"
