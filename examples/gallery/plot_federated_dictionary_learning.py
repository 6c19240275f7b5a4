# SPDX-License-Identifier: BSD-3-Clause
"""
FederatedDictionaryLearning: sparse codes of handwritten digits held by ten clients
===================================================================================

The 8×8 digit images of scikit-learn are split by label: client ``k`` holds the images of the digit
``k`` only, the most heterogeneous split there is.  :class:`fedmm.estimators.FederatedDictionaryLearning`
learns one dictionary of 18 atoms from all of them, the clients sending their surrogate statistics
(8-bit stochastic rounding) instead of their images, and never pooling the rows.  It is grown with
``partial_fit``, ten rounds at a time, and scored on held-out images after each call by
``score`` (minus the objective ``mean ½‖x − hD‖² + α‖h‖₁`` with the optimal codes ``h``, as in
:class:`sklearn.decomposition.MiniBatchDictionaryLearning`).  The grey lines are what a client
learns alone, from its own digit.  The right panel shows the federated atoms.
"""
# %%
# Data: ten clients, one digit each
# ---------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from fedmm.compression import StochasticRounding
from fedmm.estimators import FederatedDictionaryLearning

X, y = load_digits(return_X_y=True)
X = (X - X.mean(axis=0)) / 16.0  # pixel values 0..16, centred
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
alpha = 0.2
N_ATOMS = 18

# %%
# Federated fit, ten rounds per ``partial_fit``
# ---------------------------------------------
est = FederatedDictionaryLearning(N_ATOMS, alpha=alpha, n_rounds=10, compressor=StochasticRounding(bits=8),
                                  step=("inverse_sqrt", 1.0), random_state=0)
rounds, scores = [], []
for _ in range(4):
    est.partial_fit(X_train, clients=y_train)  # the same rows and clients: the run continues
    rounds.append(est.n_iter_)
    scores.append(est.score(X_test))
print("held-out objective after", rounds, "rounds:", np.round(-np.array(scores), 4))

# %%
# Each client alone
# -----------------
# Without federation, client ``k`` learns a dictionary from its own digit only; scored on the held-out
# images of every digit, even the best of these ten dictionaries does much worse.
alone = [FederatedDictionaryLearning(N_ATOMS, alpha=alpha, n_rounds=rounds[-1], random_state=0)
         .fit(X_train[y_train == k]).score(X_test) for k in range(10)]
print("each client alone:", np.round(-np.array(alone), 4))

# %%
# The held-out objective and the atoms
# ------------------------------------
fig = plt.figure(figsize=(9.0, 3.8))
ax = fig.add_gridspec(1, 1, left=0.08, right=0.5, top=0.88, bottom=0.14).subplots()
ax.plot(rounds, -np.array(scores), "o-", label="FedMM, 10 clients (one digit each), 8-bit messages")
ax.axhline(-max(alone), color="tab:gray", linestyle="--", label="best client alone (its own digit only)")
ax.axhline(-np.median(alone), color="tab:gray", linestyle=":", label="median client alone")
ax.set_xlabel("FedMM rounds (10 per partial_fit)")
ax.set_ylabel("held-out  mean ½‖x − hD‖² + α‖h‖₁")
ax.legend(fontsize=8)
grid = fig.add_gridspec(3, 6, left=0.56, right=0.98, top=0.88, bottom=0.06, wspace=0.08, hspace=0.08)
for k, atom in enumerate(est.components_):
    a = fig.add_subplot(grid[k // 6, k % 6])
    a.imshow(atom.reshape(8, 8), cmap="RdBu_r", vmin=-np.abs(atom).max(), vmax=np.abs(atom).max())
    a.set_xticks([])
    a.set_yticks([])
fig.suptitle("FederatedDictionaryLearning on digits split by label: held-out objective, and the 18 atoms")
