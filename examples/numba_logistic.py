# SPDX-License-Identifier: BSD-3-Clause
"""Federated logistic regression with Böhning's quadratic majorizer, as a numba user model.

Run it with ``python examples/numba_logistic.py`` (needs ``pip install 'fedmm[numba]'``): it
splits scikit-learn's breast-cancer data set across heterogeneous clients (k-means clusters),
runs deterministic FedMM (full participation, full local batches, no compression, step 1) on
the compiled backend and prints the objective gap to scikit-learn's ``LogisticRegression`` on
the pooled data.

The model
---------
The ℓ2-regularized mean logistic loss, with labels ``y ∈ {−1, +1}``, features ``x ∈ ℝᵖ``
extended by a constant ``x̃ = (x, 1)`` for the intercept (unpenalized, as scikit-learn does)::

    f(w) = mean_j ℓ(z_j, w) + (ρ/2) ‖w_{1..p}‖²,       ℓ(z, w) = log(1 + exp(−y x̃ᵀw)).

The Hessian of ``ℓ`` is ``σ(1 − σ) x̃ x̃ᵀ ≤ ¼ x̃ x̃ᵀ``, so with ``B = ¼ E[x̃ x̃ᵀ]`` (pooled over
all clients) and ``R = ρ diag(1, …, 1, 0)`` the quadratic

    U(w; w_t) = f(w_t) + ∇f(w_t)ᵀ(w − w_t) + ½ (w − w_t)ᵀ (B + R) (w − w_t)

majorizes ``f`` and touches it at ``w_t`` (Böhning & Lindsay 1988; Böhning 1992).  Up to
terms free of ``w`` it is ``½ wᵀ(B + R)w − ⟨s, w⟩`` with ``s = B w_t − ∇_w mean_j ℓ(z_j, w_t)``:
the surrogate is linearly parameterized (FedMM paper MM-1/MM-2) with ``φ(w) = w``,
``ψ(w) = ½ wᵀ(B + R)w`` and

    T(s) = (B + R)⁻¹ s,

whose fixed points ``s = E[S̄(Z, T(s))]`` satisfy ``∇f(w) = 0``.  The per-sample statistic is

    S̄(z, w) = ¼ x̃ x̃ᵀ w − ∇_w ℓ(z, w) = x̃ (¼ x̃ᵀw + y σ(−y x̃ᵀw)),

an O(p) computation whose mean over a client's rows is ``B_i w − ∇f_i(w)`` (with the client's
``B_i = ¼ mean_j x̃_j x̃_jᵀ``), so that the weighted mean over clients (``μ_i = N_i/N``) is
``B w − ∇(mean loss)(w)``: ``q = d = p + 1``.  ``B`` is aggregated once at set-up from the
clients' local sums (:meth:`BohningLogistic.local_moments`, :meth:`~BohningLogistic.set_global_moments`,
or :meth:`~BohningLogistic.fit_global_moments` in one process) and ``(B + R)⁻¹`` reaches the
compiled ``T`` through the model's constants.  Deterministic MM (``γ = 1``, every client, full
batches) is the classic Böhning iteration ``w_{t+1} = w_t − (B + R)⁻¹ ∇f(w_t)``, a monotone
descent method.

References
----------
D. Böhning and B. G. Lindsay, "Monotonicity of quadratic-approximation algorithms",
Annals of the Institute of Statistical Mathematics 40(4), 641-663, 1988.
D. Böhning, "Multinomial logistic regression algorithm", Annals of the Institute of
Statistical Mathematics 44(1), 197-200, 1992.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import scipy.linalg

from fedmm.models import NumbaModel


# --------------------------------------------------------------------------- the user code (numba)
def statistic(constants, w, z, out):
    """``out = S̄(z, w) = x̃ (¼ x̃ᵀw + y σ(−y x̃ᵀw))`` for one row ``z = (x, y)``."""
    d = w.shape[0]
    p = z.shape[0] - 1
    u = 0.0
    for k in range(p):
        u += z[k] * w[k]
    if d > p:  # intercept: x̃ = (x, 1)
        u += w[p]
    y = z[p]
    a = 0.25 * u + y / (1.0 + np.exp(y * u))  # y σ(−y u) = y / (1 + exp(y u))
    for k in range(p):
        out[k] = a * z[k]
    if d > p:
        out[p] = a


def T(constants, s, w):
    """``w = (B + R)⁻¹ s`` with the inverse stored row-major in ``constants``."""
    d = w.shape[0]
    for i in range(d):
        acc = 0.0
        for j in range(d):
            acc += constants[i * d + j] * s[j]
        w[i] = acc


# --------------------------------------------------------------------------- the model
class BohningLogistic(NumbaModel):
    """ℓ2-regularized logistic regression with Böhning's bound (see the module docstring).

    Parameters
    ----------
    n_features : int
        ``p``; a client's data is an array of shape ``(N_i, p + 1)``, rows ``(x, y)`` with
        ``y ∈ {−1, +1}`` (:meth:`client_data` builds it from ``X`` and 0/1 or ±1 labels).
    rho : float > 0
        ``ρ``; scikit-learn's ``LogisticRegression(C=1 / (ρ N))`` on the pooled ``N`` rows
        minimizes the same function.
    fit_intercept : bool, default True
        Append the unpenalized intercept (``θ = (w, b)``, ``d = p + 1``), else ``d = p``.
    """

    def __init__(self, n_features: int, rho: float, *, fit_intercept: bool = True) -> None:
        self.n_features = int(n_features)
        self.rho = float(rho)
        if self.n_features < 1 or not self.rho > 0:
            raise ValueError(f"Expected n_features >= 1 and rho > 0, got {n_features}, {rho}")
        self.fit_intercept = bool(fit_intercept)
        d = self.n_features + int(self.fit_intercept)
        super().__init__(statistic, T, q=d, d=d, sample_size=self.n_features + 1, n_constants=d * d,
                         name="BohningLogistic")
        self.B: np.ndarray | None = None

    @staticmethod
    def client_data(X: Any, y: Any) -> np.ndarray:
        """Rows ``(x, y)`` with labels mapped to ±1 (0/1, False/True or ±1 accepted)."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        labels = np.where(y.astype(np.float64) > 0, 1.0, -1.0)
        if X.ndim != 2 or y.shape != (X.shape[0],) or not np.isin(y, (-1, 0, 1)).all():
            raise ValueError(f"Expected X (N, p) and labels y (N,) in {{0, 1}} or {{-1, 1}}, got "
                             f"{X.shape}, {y.shape}")
        return np.ascontiguousarray(np.column_stack([X, labels]))

    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        arr = super().check_data(data, name)
        if not np.isin(arr[:, -1], (-1.0, 1.0)).all():
            raise ValueError(f"Expected the last column of '{name}' to hold labels in {{-1, +1}}")
        return arr

    def _design(self, data: np.ndarray) -> np.ndarray:
        X = data[:, :-1]
        return np.column_stack([X, np.ones(X.shape[0])]) if self.fit_intercept else X

    # -- set-up: the pooled bound B ----------------------------------------------
    def local_moments(self, data: Any) -> tuple[int, np.ndarray]:
        """A client's ``(N_i, Σ_j x̃_j x̃_jᵀ)``, sent once at set-up."""
        Xt = self._design(self.check_data(data))
        return Xt.shape[0], Xt.T @ Xt

    def set_global_moments(self, moments: Sequence[tuple[int, np.ndarray]],
                           weights: Sequence[float] | None = None) -> None:
        """``B = ¼ Σ_i μ_i N_i⁻¹ Σ_j x̃_j x̃_jᵀ`` (``μ_i = N_i / N`` by default, FedMM's default
        weights: pass FedMM's ``weights`` too if you change them) and ``(B + R)⁻¹`` into the constants."""
        sizes = np.array([m[0] for m in moments], dtype=np.float64)
        mu = sizes / sizes.sum() if weights is None else np.asarray(weights, dtype=np.float64) / np.sum(weights)
        B = sum(0.25 * w / n * np.asarray(s, dtype=np.float64) for w, n, (_, s) in zip(mu, sizes, moments))
        B = 0.5 * (B + B.T)
        R = self.rho * np.eye(self.d)
        if self.fit_intercept:
            R[-1, -1] = 0.0
        inverse = scipy.linalg.cho_solve(scipy.linalg.cho_factor(B + R), np.eye(self.d))
        self.B = B
        self.set_constants(0.5 * (inverse + inverse.T))

    def fit_global_moments(self, datas: Sequence[Any], weights: Sequence[float] | None = None) -> "BohningLogistic":
        """:meth:`local_moments` on every client then :meth:`set_global_moments`; returns ``self``."""
        self.set_global_moments([self.local_moments(d) for d in datas], weights)
        return self

    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """Fits ``B`` (:meth:`fit_global_moments`) and starts from ``w_0 = 0`` (``Ŝ_0 = 0``)."""
        self.fit_global_moments(datas)
        return np.zeros(self.q)

    def objective(self, data: Any, theta: Any) -> float:
        """``mean_j log(1 + exp(−y_j x̃_jᵀw)) + (ρ/2)‖w_{1..p}‖²`` on ``data``."""
        data = self.check_data(data)
        w = self.theta_vector(theta)
        margins = data[:, -1] * (self._design(data) @ w)
        coef = w[: self.n_features]
        return float(np.mean(np.logaddexp(0.0, -margins)) + 0.5 * self.rho * (coef @ coef))

    def __repr__(self) -> str:
        return f"BohningLogistic(n_features={self.n_features}, rho={self.rho!r}, fit_intercept={self.fit_intercept})"


# --------------------------------------------------------------------------- data and the run
def breast_cancer_clients(n_clients: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Standardized breast-cancer data (569 x 30), pooled ``(X, y)`` and split into ``n_clients``
    heterogeneous clients by k-means on the features (unequal sizes and label mixes)."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    clusters = KMeans(n_clusters=n_clients, n_init=10, random_state=seed).fit_predict(X)
    datas = [BohningLogistic.client_data(X[clusters == k], y[clusters == k]) for k in range(n_clients)]
    return X, y, datas


def sklearn_coefficients(X: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """``(coef, intercept)`` of scikit-learn's ``LogisticRegression(C = 1/(ρN))``, solved to machine precision."""
    from sklearn.linear_model import LogisticRegression

    sk = LogisticRegression(C=1.0 / (rho * X.shape[0]), solver="newton-cholesky", tol=1e-12, max_iter=1000)
    sk.fit(X, y)
    return np.concatenate([sk.coef_.ravel(), sk.intercept_])


def main(n_clients: int = 5, rho: float = 1e-2, n_rounds: int = 1000) -> float:
    """Run the example and return the relative objective gap to scikit-learn."""
    from fedmm.algorithms import FedMM
    from fedmm.compression import Identity

    X, y, datas = breast_cancer_clients(n_clients)
    model = BohningLogistic(X.shape[1], rho)
    start = time.perf_counter()
    model.fit_global_moments(datas).compiled_model()  # numba compiles the cfuncs here (once per process)
    compile_seconds = time.perf_counter() - start
    algo = FedMM(model, participation_prob=1.0, step=1.0, oracle="full", compressor=Identity())
    start = time.perf_counter()
    history = algo.run(datas, n_rounds, seed=0)
    seconds = time.perf_counter() - start
    w = history.state["theta"]
    w_sk = sklearn_coefficients(X, y, rho)
    pooled = BohningLogistic.client_data(X, y)
    ours, ref = model.objective(pooled, w), model.objective(pooled, w_sk)
    gap = (ours - ref) / abs(ref)
    sizes = [d.shape[0] for d in datas]
    print(f"{n_clients} clients of sizes {sizes}, rho = {rho}: numba compilation {compile_seconds:.2f} s, "
          f"{n_rounds} rounds on the {history.config['backend']} backend {seconds:.3f} s")
    print(f"objective: FedMM {ours:.15f}, scikit-learn {ref:.15f}, relative gap {gap:.3e}")
    print(f"max |w - w_sklearn| = {np.max(np.abs(w - w_sk)):.3e}")
    return gap


if __name__ == "__main__":
    main()
