# SPDX-License-Identifier: BSD-3-Clause
"""Equal-size (constrained) k-means and the heterogeneous client split of FedMM §6.

The assignment step of constrained k-means (Bradley, Bennett and Demiriz,
2000) is a transportation problem: send each of the ``N`` points to one of
``n`` clusters whose capacities ``c_j`` sum to ``N`` (``c_j = N/n`` when ``n``
divides ``N``), at cost ``‖x − c_j‖²``.  It is solved *exactly* here by
negative-cycle cancelling on the residual network of that min-cost flow.
Because every cluster is full, the residual network of a feasible
assignment only has cycles that move points around clusters; the cheapest
way to go from cluster ``j`` to cluster ``k`` moves the member ``x`` of ``j``
that minimizes ``‖x − c_k‖² − ‖x − c_j‖²``, which gives a dense ``n × n``
graph.  An assignment is optimal if and only if that graph has no negative
cycle (the min-cost-flow optimality condition), so the loop
"find a negative cycle (Bellman-Ford) → move one point along each of its
edges" ends at the exact optimum.  A regret-ordered greedy fill only
provides the first feasible assignment; k-means iterations warm-start from
the previous assignment, where few cycles remain.  The tests compare the
result with :func:`scipy.optimize.linear_sum_assignment` on the cost matrix
with every center replicated ``c_j`` times; that exact solver needs
``O(N³)`` time (about 30 s per assignment step at ``N = 5000``) where the
cycle cancelling needs well under a second.
"""
from __future__ import annotations

import numpy as np

from fedmm._validation import as_array, as_rng, check_count, check_int, check_real

__all__ = ["constrained_kmeans", "balanced_assignment", "split_by_constrained_kmeans"]


def _cluster_capacities(n_samples: int, n_clusters: int) -> np.ndarray:
    """Capacities ``N//n`` plus one for the first ``N mod n`` clusters (they sum to ``N``)."""
    capacities = np.full(n_clusters, n_samples // n_clusters, dtype=np.int64)
    capacities[: n_samples % n_clusters] += 1
    return capacities


def _greedy_fill(cost: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Feasible start: points with the largest regret pick their cheapest open cluster first."""
    n_samples, n_clusters = cost.shape
    order_within = np.argsort(cost, axis=1)
    sorted_cost = np.take_along_axis(cost, order_within, axis=1)
    regret = sorted_cost[:, 1] - sorted_cost[:, 0] if n_clusters > 1 else np.zeros(n_samples)
    labels = np.empty(n_samples, dtype=np.int64)
    remaining = capacities.copy()
    for point in np.argsort(-regret, kind="stable"):
        for cluster in order_within[point]:
            if remaining[cluster] > 0:
                labels[point] = cluster
                remaining[cluster] -= 1
                break
    return labels


def _predecessor_cycle(pred: list[int]) -> list[int] | None:
    """A cycle of the functional graph ``v -> pred[v]`` (``-1`` = none), in edge order, or None."""
    n_nodes = len(pred)
    state = [0] * n_nodes  # 0 unvisited, 1 on the current walk, 2 done
    for start in range(n_nodes):
        walk = []
        node = start
        while node != -1 and state[node] == 0:
            state[node] = 1
            walk.append(node)
            node = pred[node]
        if node != -1 and state[node] == 1:
            cycle = walk[walk.index(node):]
            cycle.reverse()  # pred edges point backwards: edges cycle[i] -> cycle[i+1]
            return cycle
        for visited in walk:
            state[visited] = 2
    return None


def _find_negative_cycle(weights: np.ndarray, tol: float) -> list[int] | None:
    """Bellman-Ford from a virtual source on a dense graph; a negative cycle or None.

    ``weights[j, k]`` is the cost of edge ``j → k`` (``inf`` when absent).
    A node is relaxed only when its distance drops by more than ``tol``, so
    float round-off cannot create spurious cycles.  Every cycle of the
    predecessor graph has negative weight, so the search stops at the first
    pass that closes one (usually long before the ``n``-th pass).
    """
    n_nodes = weights.shape[0]
    dist = np.zeros(n_nodes)
    pred = np.full(n_nodes, -1, dtype=np.int64)
    columns = np.arange(n_nodes)
    for _ in range(n_nodes + 1):
        candidate = dist[:, None] + weights
        best_from = candidate.argmin(axis=0)
        best = candidate[best_from, columns]
        improved = best < dist - tol
        if not improved.any():
            return None
        dist[improved] = best[improved]
        pred[improved] = best_from[improved]
        cycle = _predecessor_cycle(pred.tolist())
        if cycle is not None:
            return cycle
    raise RuntimeError("Bellman-Ford: improving after n passes without a predecessor cycle")  # pragma: no cover


def balanced_assignment(
    cost: np.ndarray,
    capacities: np.ndarray | None = None,
    *,
    labels0: np.ndarray | None = None,
    tol: float = 1e-10,
) -> np.ndarray:
    """Exact minimum-cost assignment of points to clusters of fixed sizes.

    Solves ``min Σ_x cost[x, label(x)]`` subject to ``#{x : label(x) = j} =
    capacities[j]`` by negative-cycle cancelling (see the module docstring).

    Parameters
    ----------
    cost : ndarray of shape (N, n)
        Cost of putting point ``x`` in cluster ``j`` (finite).
    capacities : ndarray of int of shape (n,), optional
        Cluster sizes, summing to ``N``.  Default: ``N//n``, plus one for the
        first ``N mod n`` clusters.
    labels0 : ndarray of int of shape (N,), optional
        A feasible assignment to start from (warm start).  Default: a
        regret-ordered greedy fill.
    tol : float
        Cycles whose cost is above ``-tol · (1 + max|cost|)`` are not
        cancelled (round-off guard).

    Returns
    -------
    labels : ndarray of int64 of shape (N,)
        An optimal assignment.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.data import balanced_assignment
    >>> cost = np.array([[0.0, 1.0], [0.0, 3.0], [0.0, 2.0], [5.0, 0.0]])
    >>> balanced_assignment(cost).tolist()
    [1, 0, 0, 1]
    """
    cost = as_array(cost, "cost", ndim=2)
    n_samples, n_clusters = cost.shape
    if n_samples == 0 or n_clusters == 0:
        raise ValueError(f"Expected 'cost' of shape (N, n) with N, n >= 1, got {cost.shape}")
    if capacities is None:
        capacities = _cluster_capacities(n_samples, n_clusters)
    else:
        capacities = np.asarray(capacities)
        if capacities.shape != (n_clusters,) or not np.issubdtype(capacities.dtype, np.integer):
            raise ValueError(
                f"Expected 'capacities' to be integers of shape ({n_clusters},), "
                f"got dtype {capacities.dtype} and shape {capacities.shape}"
            )
        if (capacities < 0).any() or int(capacities.sum()) != n_samples:
            raise ValueError(
                f"Expected non-negative 'capacities' summing to N={n_samples}, got sum "
                f"{int(capacities.sum())} and min {int(capacities.min())}"
            )
        capacities = capacities.astype(np.int64)
    if labels0 is None:
        labels = _greedy_fill(cost, capacities)
    else:
        try:
            labels = np.array(labels0, dtype=np.int64, copy=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"Expected 'labels0' to be integer cluster labels, got {type(labels0).__name__}: "
                            f"{exc}") from None
        if labels.shape != (n_samples,) or labels.min() < 0 or labels.max() >= n_clusters:
            raise ValueError(f"Expected 'labels0' of shape ({n_samples},) with values in [0, {n_clusters})")
        if not np.array_equal(np.bincount(labels, minlength=n_clusters), capacities):
            raise ValueError("Expected 'labels0' to fill every cluster exactly to its capacity")
    threshold = check_real(tol, "tol", low=0.0) * (1.0 + float(np.abs(cost).max()))

    # reduced[x, k]: cost change of moving x from its cluster to k.
    reduced = cost - cost[np.arange(n_samples), labels][:, None]
    weights = np.full((n_clusters, n_clusters), np.inf)
    movers = np.full((n_clusters, n_clusters), -1, dtype=np.int64)

    def refresh(cluster: int) -> None:
        members = (labels == cluster).nonzero()[0]
        if members.size == 0:
            weights[cluster] = np.inf
            movers[cluster] = -1
        else:
            local = reduced[members].argmin(axis=0)
            movers[cluster] = members[local]
            weights[cluster] = reduced[members[local], np.arange(n_clusters)]
        weights[cluster, cluster] = np.inf

    for cluster in range(n_clusters):
        refresh(cluster)
    # Each cancellation lowers the cost by more than the threshold; the cap is a hang guard only.
    for _ in range(100 * n_samples + 1000):
        cycle = _find_negative_cycle(weights, threshold)
        if cycle is None:
            return labels
        edges = list(zip(cycle, cycle[1:] + cycle[:1]))
        # Movers are read before any move: the edges of a simple cycle leave distinct clusters.
        moves = [(int(movers[src, dst]), dst) for src, dst in edges]
        for point, dst in moves:
            labels[point] = dst
            reduced[point] = cost[point] - cost[point, dst]
        for cluster in cycle:
            refresh(cluster)
    raise RuntimeError("balanced_assignment: cycle cancelling did not terminate")  # pragma: no cover


def _squared_distances(X: np.ndarray, centers: np.ndarray, x_norm2: np.ndarray) -> np.ndarray:
    dist = x_norm2[:, None] - 2.0 * (X @ centers.T) + np.einsum("ij,ij->i", centers, centers)[None, :]
    np.maximum(dist, 0.0, out=dist)
    return dist


def _kmeanspp(X: np.ndarray, x_norm2: np.ndarray, n_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (D² sampling)."""
    n_samples = X.shape[0]
    centers = np.empty((n_clusters, X.shape[1]))
    centers[0] = X[rng.integers(n_samples)]
    closest = _squared_distances(X, centers[:1], x_norm2)[:, 0]
    for j in range(1, n_clusters):
        total = closest.sum()
        idx = rng.choice(n_samples, p=closest / total) if total > 0 else rng.integers(n_samples)
        centers[j] = X[idx]
        np.minimum(closest, _squared_distances(X, centers[j : j + 1], x_norm2)[:, 0], out=closest)
    return centers


def constrained_kmeans(
    X,
    n_clusters: int,
    *,
    seed=None,
    n_init: int = 4,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Equal-size k-means: Lloyd iterations with an exact balanced assignment step.

    Minimizes the within-cluster sum of squares ``Σ_x ‖x − c_{label(x)}‖²``
    over centers and over assignments whose cluster sizes are ``N//n`` or
    ``N//n + 1`` (all equal to ``N/n`` when ``n`` divides ``N``).  Each
    iteration solves the assignment step exactly
    (:func:`balanced_assignment`) and moves every center to the mean of its
    cluster; it stops when the assignment no longer changes.  The best of
    ``n_init`` k-means++ starts is returned.

    Parameters
    ----------
    X : array_like of shape (N, p)
        Points, one per row.
    n_clusters : int
        Number of clusters ``n``, ``1 <= n <= N``.
    seed : int, Generator or None
        Randomness of the k-means++ starts.
    n_init : int
        Number of starts.
    max_iter : int
        Maximum Lloyd iterations per start.

    Returns
    -------
    labels : ndarray of int64 of shape (N,)
    centers : ndarray of shape (n, p)
    inertia : float
        Within-cluster sum of squared distances of the returned solution.

    Examples
    --------
    Seven points around ``(-5, -5)`` and five around ``(5, 5)`` in two clusters of six: one point of
    the larger group must join the other cluster.

    >>> import numpy as np
    >>> X = np.concatenate([np.full((7, 2), -5.0), np.full((5, 2), 5.0)])
    >>> X[6] = -4.0                       # the member of the first group nearest the second
    >>> labels, centers, inertia = constrained_kmeans(X, 2, seed=0)
    >>> np.bincount(labels).tolist(), bool(labels[6] == labels[7] != labels[0])
    ([6, 6], True)
    """
    X = as_array(X, "X", ndim=2, order="C")
    n_samples = X.shape[0]
    n_clusters = check_int(n_clusters, "n_clusters", low=1, high=max(1, n_samples))
    n_init = check_count(n_init, "n_init", low=1)
    max_iter = check_count(max_iter, "max_iter", low=1)
    rng = as_rng(seed, "seed")
    capacities = _cluster_capacities(n_samples, n_clusters)
    x_norm2 = np.einsum("ij,ij->i", X, X)
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(n_init):
        centers = _kmeanspp(X, x_norm2, n_clusters, rng)
        labels = None
        for _ in range(max_iter):
            cost = _squared_distances(X, centers, x_norm2)
            new_labels = balanced_assignment(cost, capacities, labels0=labels)
            converged = labels is not None and np.array_equal(new_labels, labels)
            labels = new_labels
            # Cluster means; every cluster has capacity >= 1 since n_clusters <= N.
            order = np.argsort(labels, kind="stable")
            starts = np.searchsorted(labels[order], np.arange(n_clusters))
            centers = np.add.reduceat(X[order], starts, axis=0) / capacities[:, None]
            if converged:
                break
        inertia = float(((X - centers[labels]) ** 2).sum())
        if best is None or inertia < best[2]:
            best = (labels, centers.copy(), inertia)
    assert best is not None
    return best


def split_by_constrained_kmeans(
    X,
    n_clients: int,
    *,
    seed=None,
    n_init: int = 4,
    max_iter: int = 100,
    return_labels: bool = False,
):
    """Heterogeneous federated split of FedMM §6: one equal-size k-means cluster per client.

    Parameters
    ----------
    X : array_like of shape (N, p)
        Samples, one per row.
    n_clients : int
        Number of clients ``n``; each receives ``N/n`` samples (``N//n`` or
        ``N//n + 1`` when ``n`` does not divide ``N``).
    seed : int, Generator or None
        Randomness of the k-means++ starts.
    n_init, max_iter : int
        See :func:`constrained_kmeans`.
    return_labels : bool
        Also return the cluster label of every sample.

    Returns
    -------
    datas : list of ndarray of shape (N_i, p), float64, C-ordered
        Client ``i`` holds the samples of cluster ``i`` in their original order.
    labels : ndarray of int64 of shape (N,)
        Only when ``return_labels`` is true.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.data import split_by_constrained_kmeans
    >>> X = np.random.default_rng(0).standard_normal((40, 3))
    >>> [d.shape for d in split_by_constrained_kmeans(X, 4, seed=0)]
    [(10, 3), (10, 3), (10, 3), (10, 3)]
    """
    X = as_array(X, "X", ndim=2, order="C")
    n_clients = check_int(n_clients, "n_clients", low=1, high=max(1, X.shape[0]))
    labels, _, _ = constrained_kmeans(X, n_clients, seed=seed, n_init=n_init, max_iter=max_iter)
    datas = [np.ascontiguousarray(X[labels == j]) for j in range(n_clients)]
    return (datas, labels) if return_labels else datas
