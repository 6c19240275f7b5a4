# SPDX-License-Identifier: BSD-3-Clause
"""Local stochastic oracles of ``E_{π_i}[S̄(Z, θ)]``: minibatch, full batch and SPIDER.

An oracle works in two halves:
:meth:`LocalOracle.plan` draws the minibatch and says which samples must be
evaluated at ``θ_t``; :meth:`LocalOracle.finish` receives that statistic and
returns the oracle ``S_{t+1,i}`` (for SPIDER it also evaluates the previous
parameter on the same minibatch and updates its memory).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import check_count, check_in, check_int
from fedmm.federation.compiled import MINIBATCH_SHUFFLE_MAX
from fedmm.models.base import SurrogateModel

__all__ = ["LocalOracle", "check_oracle_args"]

ORACLES = ("minibatch", "full", "spider")


def check_oracle_args(oracle: str, batch_size: int | None, k_in: int | None) -> tuple[str, int | None, int | None]:
    """Validate the oracle configuration shared by SA-SSMM and FedMM."""
    check_in(oracle, "oracle", ORACLES)
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size", low=1)
    if oracle == "minibatch" and batch_size is None:
        oracle = "full"  # no batch size: the full local batch (documented default)
    if oracle == "spider":
        if batch_size is None:
            raise ValueError("Expected 'batch_size' for oracle='spider' (the inner-loop minibatch size)")
        if k_in is None:
            raise ValueError("Expected 'k_in' (inner loops between full refreshes) for oracle='spider'")
        k_in = check_count(k_in, "k_in", low=1)
    elif k_in is not None:
        raise ValueError(f"'k_in' only applies to oracle='spider', got oracle={oracle!r} and k_in={k_in!r}")
    return oracle, batch_size, k_in


class LocalOracle:
    """The oracle of one data holder (a client, or the single node of SA-SSMM).

    Parameters
    ----------
    model : SurrogateModel
    data : client data, already checked by ``model.check_data``
    kind : {'minibatch', 'full', 'spider'}
        - ``'minibatch'``: ``b⁻¹ Σ_{j∈B} S̄(Z_j, θ_t)``, ``B`` drawn uniformly
          without replacement (``b`` is capped at ``N_i``);
        - ``'full'``: ``N_i⁻¹ Σ_j S̄(Z_j, θ_t)``;
        - ``'spider'``: the SPIDER estimator of VR-FedEM (FedEM paper Alg. 2,
          lines 8 and 20): a full pass at the first round of every epoch of
          ``k_in`` rounds, else ``S ← S + b⁻¹ Σ_{j∈B} (S̄(Z_j, θ_t) − S̄(Z_j, θ_prev))``
          where ``θ_prev`` is the parameter of this holder's previous oracle.
          Under partial participation a client refreshes at its first
          activation within an epoch, and otherwise corrects from the last
          parameter it saw (the increments telescope, so the estimator stays
          anchored at its last full pass).
    batch_size : int or None
    k_in : int or None
    """

    def __init__(self, model: SurrogateModel, data: Any, kind: str, batch_size: int | None,
                 k_in: int | None) -> None:
        self.model = model
        self.data = data
        self.kind = kind
        self.n_samples = model.n_samples(data)
        self.batch_size = None if batch_size is None else min(batch_size, self.n_samples)
        self.k_in = k_in
        # Per-holder memory of models that keep one (warm starts), owned by this holder.
        self.memory: dict | None = {} if model.uses_memory else None
        # SPIDER memory.
        self._spider_S: np.ndarray | None = None
        self._spider_theta: Any = None
        self._spider_epoch = -1

    def __setstate__(self, state: dict) -> None:
        """Unpickling (a Ray actor, a process pool): the memory's arrays become owned, writable copies.

        Arrays deserialized from Ray's object store (or from a pickle's
        out-of-band buffers) are read-only views; a model updates its memory
        in place (e.g. dictionary learning's warm-start codes), so the
        holder must own it, as after :meth:`set_state`.
        """
        self.__dict__.update(state)
        if self.memory:
            self.memory = {name: np.array(value, copy=True) if isinstance(value, np.ndarray) else value
                           for name, value in self.memory.items()}

    def get_state(self, copy: bool = True) -> dict[str, np.ndarray]:
        """The oracle's memory as arrays: the model's per-client memory (warm starts, keys
        ``memory:<name>``) and the SPIDER memory (empty when there is none).

        Runtimes that rebuild clients between rounds (Flower, Ray) carry this
        state, so a remote client reproduces the in-process numbers bit for bit.
        ``copy=False`` returns the memory's own arrays (the caller copies what it keeps).
        """
        state: dict[str, np.ndarray] = {}
        if self.memory:
            for name, value in self.memory.items():
                state[f"memory:{name}"] = np.array(value, copy=True) if copy else value
        if self.kind != "spider" or self._spider_S is None:
            return state
        state.update({"spider_S": np.array(self._spider_S, dtype=np.float64, copy=True) if copy else self._spider_S,
                      "spider_theta": self.model.theta_vector(self._spider_theta),
                      "spider_epoch": np.array([self._spider_epoch], dtype=np.int64)})
        return state

    def set_state(self, state: dict[str, np.ndarray], like_theta: Any, copy: bool = True) -> None:
        """Inverse of :meth:`get_state`; ``like_theta`` gives the parameter's structure.

        ``copy=False`` keeps the given arrays (read-only ones included: :meth:`statistic` copies
        a read-only memory array before the model may write into it)."""
        if self.memory is not None:
            self.memory.clear()
            for key, value in state.items():
                if key.startswith("memory:"):
                    self.memory[key[len("memory:"):]] = np.array(value, copy=True) if copy else value
        if self.kind != "spider":
            return
        if "spider_S" not in state:  # no full pass yet
            self._spider_S, self._spider_theta, self._spider_epoch = None, None, -1
            return
        self._spider_S = np.array(state["spider_S"], dtype=np.float64, copy=copy)
        self._spider_theta = self.model.theta_from_vector(np.asarray(state["spider_theta"], dtype=np.float64),
                                                          like_theta)
        self._spider_epoch = int(np.asarray(state["spider_epoch"]).reshape(-1)[0])

    def plan(self, t: int, rng: np.random.Generator) -> tuple[np.ndarray | None, bool]:
        """Samples to evaluate at ``θ_t`` (None = all) and whether this is a SPIDER refresh."""
        if self.kind == "full":
            return None, False
        if self.kind == "spider":
            epoch = t // self.k_in
            if epoch != self._spider_epoch or self._spider_S is None:
                return None, True
        return self._sample(rng), False

    def _sample(self, rng: np.random.Generator) -> np.ndarray:
        """``b`` distinct indices, uniformly (a partial Fisher-Yates shuffle for small ``N_i``)."""
        if self.n_samples <= MINIBATCH_SHUFFLE_MAX:  # the draw the compiled rounds replay bit for bit
            return kernels.sample_without_replacement(self.n_samples, self.batch_size, rng)
        return rng.choice(self.n_samples, self.batch_size, replace=False, shuffle=False)

    def finish(self, t: int, theta: Any, idx: np.ndarray | None, refresh: bool,
               stat: np.ndarray) -> np.ndarray:
        """The oracle ``S_{t+1}`` from the statistic ``stat`` of the planned samples at ``θ_t``."""
        if self.kind != "spider":
            return stat
        if refresh:
            self._spider_S = stat
            self._spider_epoch = t // self.k_in
        else:
            previous = self.model.statistic(self.data, self._spider_theta, idx)
            self._spider_S = self._spider_S + (stat - previous)
        self._spider_theta = theta
        return self._spider_S

    def writable_memory(self) -> dict | None:
        """The model's memory, each read-only array replaced by a writable copy first (arrays imported
        from a :class:`fedmm.federation.ClientState` are read-only; the model updates its memory in place)."""
        memory = self.memory
        if memory:
            for name, value in memory.items():
                if isinstance(value, np.ndarray) and not value.flags.writeable:
                    memory[name] = np.array(value, copy=True)
        return memory

    def statistic(self, theta: Any, idx: np.ndarray | None) -> np.ndarray:
        """``model.statistic`` on this holder's data, with its memory when the model keeps one."""
        if self.memory is None:
            return self.model.statistic(self.data, theta, idx)
        return self.model.statistic(self.data, theta, idx, memory=self.writable_memory())

    @staticmethod
    def statistic_batch(oracles: Sequence["LocalOracle"], theta: Any,
                        idxs: Sequence[np.ndarray | None]) -> np.ndarray:
        """Several holders' statistics at one ``θ`` in one ``model.statistic_batch`` call."""
        model = oracles[0].model
        datas = [o.data for o in oracles]
        if not model.uses_memory:
            return model.statistic_batch(datas, theta, idxs)
        return model.statistic_batch(datas, theta, idxs, memories=[o.writable_memory() for o in oracles])

    def evaluate(self, t: int, theta: Any, rng: np.random.Generator) -> np.ndarray:
        """``plan`` + one statistic evaluation + ``finish``."""
        idx, refresh = self.plan(t, rng)
        return self.finish(t, theta, idx, refresh, self.statistic(theta, idx))
