# SPDX-License-Identifier: BSD-3-Clause
"""SA-SSMM: Stochastic Approximation Stochastic Surrogate MM (FedMM paper, Algorithm 1)."""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from fedmm._validation import check_in, check_int
from fedmm.engine import record_initial
from fedmm.engine.metrics import squared_distance, step_record
from fedmm.algorithms._monitor import Cadence
from fedmm.algorithms._oracle import LocalOracle, check_oracle_args
from fedmm.algorithms._random import CLIENT_PARTY, RoundStream, check_seed, init_generator, party_seed, seed_repr
from fedmm.algorithms._schedule import StepSchedule
from fedmm.history import History
from fedmm.models.base import SurrogateModel

__all__ = ["SASSMM"]


class SASSMM:
    """Centralized stochastic surrogate MM (FedMM paper, Algorithm 1).

    Repeats, for ``t = 0, 1, ...``::

        S_{t+1}  = oracle of E_π[S̄(Z, T(Ŝ_t))]
        Ŝ_{t+1}  = Π( Ŝ_t + γ_{t+1} (S_{t+1} − Ŝ_t) )

    With ``γ_t = 1/t`` the iterate is the running mean of the oracles; with
    ``γ = 1`` and the full-batch oracle it is the deterministic MM iteration.

    Parameters
    ----------
    model : SurrogateModel
    step : float, '1/t', ('sqrt', beta) or callable
        Step sizes ``γ_t`` (see :class:`fedmm.algorithms.StepSchedule`).
    batch_size : int or None
        Minibatch size ``b``; ``None`` means the full batch.
    oracle : {'minibatch', 'full', 'spider'}
        See :class:`fedmm.algorithms._oracle.LocalOracle`.
    k_in : int, optional
        Rounds per SPIDER epoch (required for ``oracle='spider'``).
    projection : {'euclidean', None}
        Apply ``model.project`` after each update.  Algorithm 1 needs none
        (``𝒮`` is convex and ``γ_t ∈ (0, 1]``), but SPIDER oracles may leave ``𝒮``.

    Examples
    --------
    With full-batch oracles and ``γ_t = 1/t`` the statistic of :class:`~fedmm.models.InverseToy`
    is the sample mean after the first iteration, so ``θ = mean(Z)^{-1/2}``:

    >>> import numpy as np
    >>> from fedmm.models import InverseToy
    >>> Z = np.random.default_rng(0).uniform(1, 3, 1000)
    >>> h = SASSMM(InverseToy(), step="1/t", batch_size=None).run(Z, 5, seed=0)
    >>> len(h), bool(abs(h.state["theta"][0] - Z.mean() ** -0.5) < 1e-12)
    (5, True)
    """

    def __init__(self, model: SurrogateModel, *, step: Any = "1/t", batch_size: int | None = None,
                 oracle: str = "minibatch", k_in: int | None = None,
                 projection: str | None = "euclidean") -> None:
        if not isinstance(model, SurrogateModel):
            raise TypeError(f"Expected 'model' to be a fedmm SurrogateModel, got {type(model).__name__}")
        self.model = model
        self.schedule = StepSchedule(step)
        self.oracle, self.batch_size, self.k_in = check_oracle_args(oracle, batch_size, k_in)
        self.projection = check_in(projection, "projection", ("euclidean", None))

    def run(self, data: Any, n_iter: int, *, seed: Any = None,
            init: np.ndarray | None = None, objective_every: int = 0,
            callback: Callable[[int, np.ndarray, Any], None] | None = None) -> History:
        """Run ``n_iter`` iterations on ``data``.

        Parameters
        ----------
        data : data set in the model's format
        n_iter : int
        seed : int, SeedSequence, Generator or None
            All randomness (initial statistic, minibatches) derives from it
            (normalized as NumPy does; recorded in ``History.config["seed"]``).
        init : ndarray of shape (layout.size,), optional
            The initial statistic ``Ŝ_0`` (default ``model.init_statistic``).
        objective_every : int
            Record ``objective`` every this many iterations and at the last one
            (0: never); its value at ``θ_0`` goes to ``history.initial``.
        callback : callable(t, S, theta), optional
            Called after each iteration with ``Ŝ_{t+1}`` and ``T(Ŝ_{t+1})``.

        Returns
        -------
        History
            Per iteration ``t``, ``gamma``, ``E_s``, ``E_ps``, ``wall_time``
            (cumulative, monitoring excluded), ``monitor_time`` (cumulative
            seconds of objective evaluations) and ``objective`` when computed;
            ``initial`` the values at ``θ_0 = T(Ŝ_0)`` (``objective`` with a
            cadence); ``state`` holds the final ``S`` and ``theta`` (flat),
            ``params`` the final parameter as named arrays
            (``model.theta_to_dict``) and ``theta`` the model's own object.
        """
        model = self.model
        n_iter = check_int(n_iter, "n_iter", low=0)
        seed = check_seed(seed)
        cadence = Cadence(objective_every, n_iter)
        data = model.check_data(data, "data")
        if init is None:
            # init_statistic first: it may set up what depends on the data (GaussianMixture's p, its moments)
            S = model.init_statistic([data], init_generator(seed))
        else:
            # the layout is read only after check_data has seen the data (it may fix p)
            S = np.array(model.layout.check(init, "init"), dtype=np.float64, copy=True)
        if not model.in_domain(S):
            raise ValueError("Expected 'init' in the surrogate domain 𝒮 (model.project(init) != init)")
        oracle = LocalOracle(model, data, self.oracle, self.batch_size, self.k_in)
        stream = RoundStream(party_seed(seed, CLIENT_PARTY, 0))
        history = History("SASSMM", {
            "model": repr(model), "step": self.schedule.description, "batch_size": self.batch_size,
            "oracle": self.oracle, "k_in": self.k_in, "projection": self.projection, "seed": seed_repr(seed),
            "n_iter": n_iter,
        })
        theta = model.T(S)
        theta_vec = model.theta_vector(theta)
        record_initial(history, (lambda: model.objective(data, theta)) if cadence else None)
        elapsed = 0.0
        monitor_time = history.initial["monitor_time"]
        for t in range(n_iter):
            start = time.perf_counter()
            gamma = self.schedule(t + 1)
            oracle_value = oracle.evaluate(t, theta, stream.at(t))
            # Ŝ_{t+1} = Π(Ŝ_t + γ (S̄ − Ŝ_t)) and θ = T(Ŝ_{t+1}), by the model (one compiled call where it has one)
            S_new, theta = model.sa_step(S, oracle_value - S, gamma, self.projection is not None)
            new_vec = model.theta_vector(theta)
            record = {"t": t,
                      **step_record(gamma, squared_distance(new_vec, theta_vec), squared_distance(S_new, S))}
            S, theta_vec = S_new, new_vec
            elapsed += time.perf_counter() - start
            record["wall_time"] = elapsed
            if cadence.due(t):
                start = time.perf_counter()
                record["objective"] = model.objective(data, theta)
                monitor_time += time.perf_counter() - start
            record["monitor_time"] = monitor_time
            history.append(**record)
            if callback is not None:
                callback(t, S, theta)
        history.state["S"] = S
        history.state["theta"] = theta_vec
        history.params = model.theta_to_dict(theta)
        history.theta = theta
        return history

