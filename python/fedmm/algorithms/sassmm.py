# SPDX-License-Identifier: BSD-3-Clause
"""SA-SSMM: Stochastic Approximation Stochastic Surrogate MM (FedMM paper, Algorithm 1)."""
from __future__ import annotations

import time
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from fedmm._validation import check_callable, check_count, check_in
from fedmm.federation import record_initial
from fedmm.federation.metrics import squared_distance, step_record
from fedmm.algorithms._monitor import Cadence
from fedmm.algorithms._oracle import LocalOracle, check_oracle_args
from fedmm.algorithms._random import CLIENT_PARTY, RoundStream, check_seed, init_generator, party_seed, seed_repr
from fedmm.algorithms._schedule import StepSchedule
from fedmm.algorithms.federated import STARTS
from fedmm.history import History
from fedmm.models.base import SurrogateModel

__all__ = ["SASSMM", "DETERMINISTIC_STEP", "STOCHASTIC_STEP"]

#: SA-SSMM's default step with a deterministic (full-batch) oracle: ``γ = 1``, the MM iteration itself.
DETERMINISTIC_STEP = 1.0
#: SA-SSMM's default step with a stochastic oracle: ``γ_t = t^{-1/2}`` (``γ_1 = 1``: the first oracle
#: replaces the arbitrary ``Ŝ_0``).
STOCHASTIC_STEP = ("inverse_sqrt", 1.0)


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
    step : float, '1/t', ('sqrt', beta), callable or None
        Step sizes ``γ_t`` (see :class:`fedmm.algorithms.StepSchedule`).
        None (the default) resolves to :data:`DETERMINISTIC_STEP` ``= 1.0``
        with a deterministic oracle (``oracle='full'``, or minibatch without
        ``batch_size``: the plain MM iteration) and to
        :data:`STOCHASTIC_STEP` ``= ('inverse_sqrt', 1.0)``, i.e.
        ``γ_t = t^{-1/2}``, with a stochastic one.  On dictionary learning
        (unit-norm atoms, ``λ = 0.1``, minibatches of 256) ``t^{-1/2}``
        reaches the objective of scikit-learn's one-pass
        ``MiniBatchDictionaryLearning`` in 30 steps on 8×8 image patches
        (K = 100) and 60 on the synthetic data of §6 (p = 20, K = 15), where
        ``γ_t = 1/t`` (Mairal's averaging) had not after 200.  The resolved
        schedule is recorded in ``History.config['step']``.
    batch_size : int or None
        Minibatch size ``b``; ``None`` means the full batch.
    oracle : {'minibatch', 'full', 'spider'}
        See :class:`fedmm.algorithms._oracle.LocalOracle`.
    k_in : int, optional
        Rounds per SPIDER epoch (required for ``oracle='spider'``).
    projection : {'euclidean', None}
        Apply ``model.project`` after each update.  Algorithm 1 needs none
        (``𝒮`` is convex and ``γ_t ∈ (0, 1]``), but SPIDER oracles may leave ``𝒮``.
    start : {'mean_statistic', 'model'}
        ``Ŝ_0`` when :meth:`run` gets no ``init``: ``'model'`` takes
        ``model.init_statistic``; ``'mean_statistic'`` (default) takes
        ``Ŝ_0 = Π(E_π[S̄(Z, θ_0)])`` with ``θ_0 = T(model.init_statistic(...))``,
        one full pass over the data, so that ``T(Ŝ_0)`` is one exact MM step
        from ``θ_0`` (as :class:`fedmm.algorithms.FedMM` with one client).

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

    def __init__(self, model: SurrogateModel, *, step: Any = None, batch_size: int | None = None,
                 oracle: str = "minibatch", k_in: int | None = None,
                 projection: str | None = "euclidean", start: str = "mean_statistic") -> None:
        if not isinstance(model, SurrogateModel):
            raise TypeError(f"Expected 'model' to be a fedmm SurrogateModel, got {type(model).__name__}")
        self.model = model
        self.oracle, self.batch_size, self.k_in = check_oracle_args(oracle, batch_size, k_in)
        if step is None:
            step = DETERMINISTIC_STEP if self.oracle == "full" else STOCHASTIC_STEP  # no batch_size: 'full'
        self.schedule = StepSchedule(step)
        self.projection = check_in(projection, "projection", ("euclidean", None))
        self.start = check_in(start, "start", STARTS)

    def run(self, data: Any, n_iter: int, *, seed: Any = None, init: np.ndarray | None = None,
            callback: Callable[[int, Mapping[str, Any]], None] | None = None,
            evaluate_every: int = 0) -> History:
        """Run ``n_iter`` iterations on ``data``.

        Parameters
        ----------
        data : data set in the model's format
        n_iter : int
        seed : int, SeedSequence, Generator or None
            All randomness (initial statistic, minibatches) derives from it
            (normalized as NumPy does; recorded in ``History.config["seed"]``).
        init : ndarray of shape (layout.size,), optional
            The initial statistic ``Ŝ_0`` (default: the start chosen by ``start``).
        callback : callable(t, state), optional
            Called after each iteration ``t`` with a read-only mapping
            (``types.MappingProxyType``) as :meth:`fedmm.algorithms.FedMM.run`'s:
            ``state["params"]`` is ``θ_{t+1} = T(Ŝ_{t+1})`` as named arrays
            (``model.theta_to_dict``, what ``History.params`` holds),
            ``state["theta"]`` the model's own object and ``state["statistic"]``
            ``Ŝ_{t+1}``.
        evaluate_every : int
            Record ``objective`` every this many iterations and at the last one
            (0: never); its value at ``θ_0`` goes to ``history.initial``.

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
            An exception that ends the run (Ctrl-C included) carries the
            completed iterations' History as ``exc.history``.
        """
        model = self.model
        n_iter = check_count(n_iter, "n_iter", low=0)
        check_callable(callback, "callback")
        seed = check_seed(seed)
        cadence = Cadence(evaluate_every, n_iter, name="evaluate_every")
        data = model.check_data(data, "data")
        model.prepare([data])  # what the model learns from the data (dimensions, global moments)
        if init is None:
            # init_statistic first: it may set up what depends on the data (GaussianMixture's p, its moments)
            S = model.init_statistic([data], init_generator(seed))
        else:
            # the layout is read only after check_data has seen the data (it may fix p)
            S = np.array(model.layout.check(init, "init"), dtype=np.float64, copy=True)
            if not np.isfinite(S).all():
                raise ValueError("Expected 'init' to contain only finite values")
        if not model.in_domain(S):
            raise ValueError("Expected 'init' in the surrogate domain 𝒮 (model.project(init) != init)")
        oracle = LocalOracle(model, data, self.oracle, self.batch_size, self.k_in)
        if init is None and self.start == "mean_statistic":
            # Ŝ_0 = Π(E_π[S̄(Z, θ_0)]): one full pass at θ_0 = T(init_statistic)
            full = LocalOracle(model, data, "full", None, None).statistic(model.T(S), None)
            S = np.array(model.project(np.asarray(full, dtype=np.float64)), dtype=np.float64, copy=True)
        stream = RoundStream(party_seed(seed, CLIENT_PARTY, 0))
        history = History("SASSMM", {
            "model": repr(model), "step": self.schedule.description, "batch_size": self.batch_size,
            "oracle": self.oracle, "k_in": self.k_in, "projection": self.projection, "start": self.start,
            "seed": seed_repr(seed),
            "n_iter": n_iter,
        })
        theta = model.T(S)
        theta_vec = model.theta_vector(theta)
        record_initial(history, (lambda: model.objective(data, theta)) if cadence else None)
        elapsed = 0.0
        monitor_time = history.initial["monitor_time"]
        try:
            for t in range(n_iter):
                start = time.perf_counter()
                gamma = self.schedule(t + 1)
                oracle_value = oracle.evaluate(t, theta, stream.at(t))
                # Ŝ_{t+1} = Π(Ŝ_t + γ (S̄ − Ŝ_t)) and θ = T(Ŝ_{t+1}), by the model (one compiled call where
                # it has one)
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
                    callback(t, MappingProxyType({"params": model.theta_to_dict(theta), "theta": theta,
                                                  "statistic": S}))
        except (Exception, KeyboardInterrupt) as exc:
            exc.history = history  # the completed iterations, as FedMM.run
            raise
        history.state["S"] = S
        history.state["theta"] = theta_vec
        history.params = model.theta_to_dict(theta)
        history.theta = theta
        return history

