# SPDX-License-Identifier: BSD-3-Clause
"""
FederatedGaussianMixture: a scikit-learn estimator fitted by federated EM
=========================================================================

Three Gaussian clusters in the plane, held by four clients that each see one part of the plane
(the rows are split by their direction from the origin: two clients share the left cluster and each
of the two others holds (almost) one cluster alone).
:class:`fedmm.estimators.FederatedGaussianMixture` takes the owner of each row as
``fit(X, clients=...)`` and runs FedEM (:class:`fedmm.algorithms.FedMM` with an EM model): each
round, every client computes the E-step statistics of its own rows, the server averages them and
takes the M-step.  With every client contacted and full local batches this is EM on the pooled rows,
so it finds the clusters that :class:`sklearn.mixture.GaussianMixture` finds on the pooled data,
although no client could have found them alone.  With only two clients of four drawn per round
(``clients_per_round=2``, with decreasing steps ``γ_t = t^{-1/2}``) the fit gets there too, in more
rounds.
"""
# %%
# Data: four clients, split by angle
# ----------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from fedmm.estimators import FederatedGaussianMixture

rng = np.random.default_rng(0)
centres = np.array([[-3.0, 0.0], [2.0, 2.5], [2.5, -2.5]])
shapes = [np.array([[1.0, 0.6], [0.6, 0.8]]), np.array([[0.5, 0.0], [0.0, 1.2]]),
          np.array([[1.0, -0.4], [-0.4, 0.4]])]
X = np.concatenate([rng.multivariate_normal(m, c, size=200) for m, c in zip(centres, shapes)])
angle = np.arctan2(X[:, 1], X[:, 0])
clients = np.digitize(angle, [-np.pi / 2, 0.0, np.pi / 2])  # four quadrants of directions
print("rows per client:", np.bincount(clients).tolist())

# %%
# Fits
# ----
full = FederatedGaussianMixture(3, n_rounds=60, random_state=0).fit(X, clients=clients)
partial = FederatedGaussianMixture(3, n_rounds=200, clients_per_round=2, step=("inverse_sqrt", 1.0),
                                   random_state=0).fit(X, clients=clients)
sk = SkGaussianMixture(3, random_state=0).fit(X)
for name, est in [("FedEM, all 4 clients", full), ("FedEM, 2 of 4 per round", partial),
                  ("scikit-learn, pooled rows", sk)]:
    print(f"{name:28s} mean log-likelihood {est.score(X):.4f}")

# %%
# The fitted components
# ---------------------
# Ellipses at two standard deviations; the points are coloured by client.


def ellipse(mean, cov, k=2.0):
    """Points (2, 100) of the ellipse ``(x − mean)ᵀ cov⁻¹ (x − mean) = k²``."""
    values, vectors = np.linalg.eigh(cov)
    t = np.linspace(0, 2 * np.pi, 100)
    return mean[:, None] + k * (vectors * np.sqrt(values)) @ np.array([np.cos(t), np.sin(t)])


fig, ax = plt.subplots(figsize=(6.0, 5.0))
for c in np.unique(clients):
    ax.scatter(*X[clients == c].T, s=6, alpha=0.5, label=f"client {c}")
styles = [(full, "k", "-", "FedEM, all clients"), (partial, "tab:red", "--", "FedEM, 2 of 4 per round"),
          (sk, "tab:gray", ":", "scikit-learn (pooled)")]
for est, color, line, name in styles:
    for g in range(3):
        pts = ellipse(est.means_[g], est.covariances_[g])
        ax.plot(pts[0], pts[1], color=color, linestyle=line, linewidth=1.6, label=name if g == 0 else None)
ax.set_aspect("equal")
ax.set_xlabel("$x_1$")
ax.set_ylabel("$x_2$")
ax.set_title("Components fitted by FederatedGaussianMixture")
ax.legend(loc="lower left", fontsize=8, ncol=2)
fig.tight_layout()
