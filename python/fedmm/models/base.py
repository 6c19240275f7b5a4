# SPDX-License-Identifier: BSD-3-Clause
"""The surrogate-model protocol of FedMM (FedMM paper §2, assumptions MM-1/MM-2).

A model describes one majorize-minimization problem whose surrogates are
linearly parameterized by a statistic ``s`` in a convex set ``𝒮``::

    U(θ; s) = g(θ) + ψ(θ) − ⟨s, φ(θ)⟩,          T(s) = argmin_θ U(θ; s),

and a client's "oracle" is an unbiased estimate of the local mean field
``E_{π_i}[S̄(Z, θ)]``.  Statistics always travel as **one flat float64 vector**
whose blocks are described by a :class:`StatisticLayout`.

Conventions
-----------
- A client's *data* is whatever the model documents (usually an ndarray of
  shape ``(N_i, p)``, one sample per row); :meth:`SurrogateModel.check_data`
  validates it and :meth:`SurrogateModel.n_samples` counts it.
- ``statistic(data, theta, idx)`` is the deterministic primitive: the mean of
  ``S̄(Z_j, θ)`` over the samples ``idx`` (all samples when ``idx`` is None).
  Minibatch oracles and SPIDER/VR oracles are built on it by the algorithms,
  so a model only implements the mathematics.  Argument checks: every
  public method checks its arguments and names the one it refuses
  (``data``, ``idx``, ``theta``, ``s``, ``vector``).  ``idx`` must be a
  non-empty 1-D integer array in ``[0, N)`` (floats, booleans and negative
  indices are refused, not truncated, converted or wrapped;
  :func:`fedmm._validation.check_index`); ``s`` must have shape
  ``(layout.size,)`` and be finite.  On the per-round path the checks are
  O(1) or O(b): ``statistic`` reads data that :meth:`SurrogateModel.check_data`
  returned (a float64 ndarray, or the model's checked container) without
  scanning the values again (:meth:`SurrogateModel._statistic_data`), and
  the compiled models leave the index range test to the C loop that tests
  every index anyway.  Read-only arrays are accepted everywhere.
  A model may also provide a
  compiled form (:meth:`SurrogateModel.compiled_model`) that the compiled
  round engine (:mod:`fedmm.federation`) runs without Python.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from fedmm._memory import check_allocation
from fedmm._validation import as_array, check_statistic

__all__ = ["StatisticLayout", "SurrogateModel"]

#: The methods through which a round flows on the Python backend and that a model's compiled
#: form (:meth:`SurrogateModel.compiled_model`) replaces on the compiled backend: the clients'
#: statistic, the server's step (``sa_step``, ``project``, ``T``, ``project_theta``) and the
#: flat parameter the records and messages are computed from.
COMPILED_ROUND_METHODS = ("statistic", "statistic_batch", "T", "project", "project_theta", "sa_step",
                          "theta_vector", "theta_from_vector")


class StatisticLayout:
    """Named blocks of a flat statistic vector.

    Parameters
    ----------
    blocks : sequence of (str, tuple of int)
        Block names and shapes, in storage order.  Each block is stored in C
        order inside the flat vector.

    Examples
    --------
    >>> lay = StatisticLayout([("A", (2, 2)), ("B", (3, 2))])
    >>> lay.size
    10
    >>> s = lay.join(A=np.eye(2), B=np.ones((3, 2)))
    >>> lay.split(s)["A"]
    array([[1., 0.],
           [0., 1.]])
    """

    def __init__(self, blocks: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        if isinstance(blocks, (str, bytes)) or not isinstance(blocks, (Sequence, tuple)) or not all(
                isinstance(b, (tuple, list)) and len(b) == 2 and isinstance(b[1], (tuple, list)) for b in blocks):
            raise TypeError(f"Expected 'blocks' to be a sequence of (name, shape) pairs with shape a tuple of ints, "
                            f"got {blocks!r:.80}")
        for name, shape in blocks:
            if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
                raise ValueError(f"Expected 'blocks' shapes of non-negative ints, got {shape!r} for block {name!r}")
        names = [str(n) for n, _ in blocks]
        if len(set(names)) != len(names):
            raise ValueError(f"Expected distinct block names in 'blocks', got {names}")
        self.blocks: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
            (str(n), tuple(int(d) for d in shape)) for n, shape in blocks
        )
        self._slices: dict[str, slice] = {}
        start = 0
        for name, shape in self.blocks:
            size = math.prod(shape)  # Python ints: no silent int64 overflow for absurd shapes
            self._slices[name] = slice(start, start + size)
            start += size
        # a statistic (and the server's copies of it) must fit in memory: refuse absurd model sizes up front
        check_allocation(8 * start, f"A flat float64 statistic with blocks {list(self.blocks)} (from the model's "
                                    "dimensions, e.g. n_components, n_features)")
        self.size: int = start

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.blocks)

    def shape(self, name: str) -> tuple[int, ...]:
        return dict(self.blocks)[name]

    def block(self, s: np.ndarray, name: str) -> np.ndarray:
        """A view of block ``name`` of the flat vector ``s`` with its shape."""
        return s[self._slices[name]].reshape(self.shape(name))

    def split(self, s: np.ndarray) -> dict[str, np.ndarray]:
        """Views of every block of ``s`` (shape ``(size,)``)."""
        self.check(s, "s")
        return {name: self.block(s, name) for name in self.names}

    def join(self, **blocks: np.ndarray) -> np.ndarray:
        """Pack blocks given by name into a new flat float64 vector."""
        missing = set(self.names) - set(blocks)
        extra = set(blocks) - set(self.names)
        if missing or extra:
            raise ValueError(f"Expected blocks {self.names}, missing {sorted(missing)}, unknown {sorted(extra)}")
        out = np.empty(self.size, dtype=np.float64)
        for name, shape in self.blocks:
            b = np.asarray(blocks[name], dtype=np.float64)
            if b.shape != shape:
                raise ValueError(f"Expected block '{name}' of shape {shape}, got {b.shape}")
            out[self._slices[name]] = b.ravel()
        return out

    def check(self, s: Any, name: str = "s") -> np.ndarray:
        """``s`` as an ndarray of shape ``(size,)``: ``TypeError`` naming ``name`` for anything but real
        numbers (a complex, string or object array), ``ValueError`` for another shape."""
        if not (type(s) is np.ndarray and s.dtype == np.float64):
            s = as_array(s, name, dtype=None, finite=False)
        if s.shape != (self.size,):
            raise ValueError(f"Expected '{name}' to be a flat statistic of shape ({self.size},), got {s.shape}")
        return s

    def __repr__(self) -> str:
        return f"StatisticLayout({list(self.blocks)})"


class SurrogateModel(ABC):
    """Base class of FedMM surrogate models (FedMM paper §2, MM-1/MM-2).

    Subclasses set ``self.layout`` and implement :meth:`statistic`, :meth:`T`,
    :meth:`objective` and :meth:`init_statistic`; they override
    :meth:`project` when ``𝒮`` is not the whole space and
    :meth:`statistic_batch` when several clients' statistics can be computed
    in one compiled call.
    """

    layout: StatisticLayout

    #: The step schedule ``γ_t`` that ``FedMM(model)`` uses when no ``step`` is given (any
    #: ``step`` form of :class:`fedmm.algorithms.StepSchedule`).  The base class declares
    #: ``('inverse_sqrt', 1.0)``, ``γ_t = t^{-1/2}`` (``γ_1 = 1``: the first aggregate replaces
    #: the arbitrary ``Ŝ_0``; then a Robbins-Monro decrease that averages out minibatch,
    #: participation and compression noise).  Models override it: the EM models and the
    #: deterministic ones declare ``1.0`` (with full-batch oracles ``γ = 1`` is exact EM/MM).
    default_step: Any = ("inverse_sqrt", 1.0)

    #: True when :meth:`statistic` accepts ``memory=`` and :meth:`statistic_batch`
    #: ``memories=``: a dict per data holder that the algorithm keeps between
    #: calls (e.g. warm starts of an inner solver).  The result must not depend
    #: on the memory beyond the inner solver's tolerance.
    uses_memory: bool = False

    #: The largest magnitude of an entry of a statistic that :meth:`project` and :meth:`T` are
    #: made for (``inf``, the default: any finite value).  The FedMM server refuses a client
    #: message with an entry beyond it like a non-finite one, and a step whose aggregate ``H``,
    #: ``Ŝ_{t+1}`` or ``V_{t+1}`` would hold one (both backends): let into the state, such a value
    #: breaks a later round, where no message is at fault.  A model whose ``Π`` or ``T`` forms
    #: squares or products of entries (eigenvalues, Cholesky factors, Frobenius norms) declares
    #: the range where they stay finite, e.g. ``2.0**480`` for sums of up to ``2**62`` squares.
    statistic_bound: float = float("inf")

    # -- client side --------------------------------------------------------
    @abstractmethod
    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """Mean of ``S̄(Z_j, θ)`` over samples ``idx`` of ``data`` (all if None).

        Returns
        -------
        ndarray of shape (layout.size,), float64
        """

    def statistic_batch(
        self, datas: Sequence[Any], theta: Any, idxs: Sequence[np.ndarray | None]
    ) -> np.ndarray:
        """Statistics of several clients at one ``θ``: shape ``(len(datas), layout.size)``.

        The default loops over clients; models with a segmented kernel override it.
        The result must equal, bit for bit, the stacked :meth:`statistic` calls.
        """
        out = np.empty((len(datas), self.layout.size), dtype=np.float64)
        for i, (d, idx) in enumerate(zip(datas, idxs)):
            out[i] = self.statistic(d, theta, idx)
        return out

    def prepare(self, datas: Sequence[Any]) -> None:
        """Learn what the model needs from the clients' data before a run (the default does nothing).

        Called by ``FedMM.build`` (so by every ``run``) and ``SASSMM.run``
        once, after :meth:`check_data` on every client's data and before
        :attr:`layout`, :meth:`init_statistic` or :meth:`T` is used.  A model
        whose dimensions or constants come from the data sets them here:
        ``GaussianMixture`` learns ``p`` and aggregates the global moments
        its M-step needs, ``MissingValues`` the matrix shape,
        ``PoissonLatent('explicit_mean')`` the mean count.  It must be
        idempotent (a second call on the same data changes nothing) and
        refuse data inconsistent with what the model already knows, naming
        the client (``datas[i]``).  In a deployment where the server never
        sees the data, the equivalent start-up exchange is the model's own
        (e.g. ``GaussianMixture.local_moments`` / ``set_global_moments``).

        Parameters
        ----------
        datas : sequence of client data
            One entry per client, each already returned by :meth:`check_data`.
        """
        return None

    def n_samples(self, data: Any) -> int:
        """Number of samples in a client's data (first axis by default)."""
        return int(data.shape[0]) if type(data) is np.ndarray else int(np.shape(data)[0])

    def check_data(self, data: Any, name: str = "data") -> Any:
        """Validate one client's data (shape, dtype, finiteness, non-empty) and return it (C-contiguous
        float64, what :meth:`statistic`'s fast path and the compiled kernels read)."""
        arr = as_array(data, name, order="C")  # finite values checked there
        if arr.ndim < 1 or arr.shape[0] == 0:
            raise ValueError(f"Expected '{name}' to hold at least one sample, got shape {arr.shape}")
        return arr

    #: Number(s) of dimensions of a float64 ndarray that :meth:`statistic` accepts without
    #: running :meth:`check_data` (see :meth:`_statistic_data`).
    _data_ndim: tuple[int, ...] = (1, 2)

    def _statistic_data(self, data: Any, name: str = "data") -> Any:
        """``data`` as :meth:`statistic` reads it: the cheap check of the hot path.

        A C-contiguous float64 ndarray of an accepted number of dimensions with
        at least one sample passes unchanged (it is what :meth:`check_data`
        returns, which the algorithms run once per client at start-up; values
        are not scanned again per call); anything else goes through
        :meth:`check_data`, so None, strings, lists and empty data get its
        messages.
        """
        if (type(data) is np.ndarray and data.dtype == np.float64 and data.ndim in self._data_ndim
                and data.shape[0] > 0 and data.flags.c_contiguous):
            return data
        return self.check_data(data, name)

    # -- server side --------------------------------------------------------
    @abstractmethod
    def T(self, s: np.ndarray) -> Any:
        """``argmin_θ g(θ) + ψ(θ) − ⟨s, φ(θ)⟩`` for a statistic ``s`` in ``𝒮``."""

    def project(self, s: np.ndarray) -> np.ndarray:
        """Euclidean projection of ``s`` onto ``𝒮`` (identity by default: ``𝒮`` is the whole space).

        The default checks ``s`` (shape ``(layout.size,)``, finite) and returns
        it, the same object when it is a float64 ndarray.
        """
        return check_statistic(s, self.layout.size)

    def sa_step(self, S: np.ndarray, H: np.ndarray, gamma: float, project: bool = True) -> tuple[np.ndarray, Any]:
        """The server's update (FedMM Alg. 2 lines 15-16, then ``T`` for line 4).

        ``Ŝ_{t+1} = Π(Ŝ_t + γ H)`` (without ``Π`` when ``project`` is False)
        and ``θ_{t+1} = T(Ŝ_{t+1})``; returns ``(Ŝ_{t+1}, θ_{t+1})``.  Models
        override it with one compiled call where they have one (same numbers).
        """
        S_half = S + gamma * H
        S_new = self.project(S_half) if project else S_half
        return S_new, self.T(S_new)

    def in_domain(self, s: np.ndarray, tol: float = 1e-10) -> bool:
        """Whether ``s`` lies in ``𝒮`` up to ``tol`` (used by tests and monitors)."""
        atol = tol * max(1.0, float(np.abs(s).max(initial=0.0)))
        return bool(np.allclose(self.project(np.array(s, copy=True)), s, rtol=0.0, atol=atol))

    @abstractmethod
    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """A valid starting statistic ``Ŝ_0`` in ``𝒮``."""

    def theta_vector(self, theta: Any) -> np.ndarray:
        """Flatten a parameter for distances such as ``‖T(Ŝ_{t+1}) − T(Ŝ_t)‖²``."""
        if isinstance(theta, dict):
            return np.concatenate([np.ravel(as_array(theta[k], f"theta[{k!r}]", finite=False)) for k in sorted(theta)])
        if isinstance(theta, (tuple, list)):
            return np.concatenate([np.ravel(as_array(t, f"theta[{i}]", finite=False)) for i, t in enumerate(theta)])
        return np.ravel(as_array(theta, "theta", finite=False))

    def theta_from_vector(self, vector: np.ndarray, like: Any) -> Any:
        """Inverse of :meth:`theta_vector`: rebuild a parameter shaped like ``like``.

        Used by the Θ-space baseline, whose messages are flat parameter
        vectors.  Arrays, tuples/lists of arrays and dicts of arrays (keys in
        sorted order, as in :meth:`theta_vector`) are supported.

        Parameters
        ----------
        vector : ndarray of shape (d,)
            Flat float64 parameter.
        like : parameter
            A parameter of the model (e.g. ``T(Ŝ_0)``) giving the structure.
        """
        vector = as_array(vector, "vector", finite=False)
        if isinstance(like, dict):
            keys = sorted(like)
            parts = [np.shape(like[k]) for k in keys]
        elif isinstance(like, (tuple, list)):
            parts = [np.shape(t) for t in like]
        else:
            parts = [np.shape(like)]
        sizes = [int(np.prod(sh, dtype=np.int64)) for sh in parts]
        if vector.shape != (sum(sizes),):
            raise ValueError(f"Expected 'vector' to be a flat parameter of shape ({sum(sizes)},), got {vector.shape}")
        pieces, start = [], 0
        for sh, size in zip(parts, sizes):
            pieces.append(vector[start:start + size].reshape(sh))
            start += size
        if isinstance(like, dict):
            return dict(zip(keys, pieces))
        if isinstance(like, (tuple, list)):
            return type(like)(pieces)
        return pieces[0]

    def theta_to_dict(self, theta: Any) -> dict[str, np.ndarray]:
        """The parameter as named float64 arrays (what :class:`fedmm.History` saves as ``params``).

        The default names an array parameter ``"theta"``, keeps the keys of a
        dict of arrays, and names the items of a tuple or list ``"0"``,
        ``"1"``, ...; models whose parameter is an object of their own
        override it (e.g. ``weights``, ``means``, ``covariance`` of a Gaussian
        mixture).  :meth:`theta_from_dict` is its inverse.

        Parameters
        ----------
        theta : parameter
            A parameter of the model (e.g. ``T(s)``).

        Returns
        -------
        dict of str to ndarray
            Copies (float64, original shapes).
        """
        if isinstance(theta, dict):
            return {str(k): np.array(as_array(v, f"theta[{k!r}]", finite=False), dtype=np.float64, copy=True)
                    for k, v in theta.items()}
        if isinstance(theta, (tuple, list)):
            return {str(i): np.array(as_array(v, f"theta[{i}]", finite=False), dtype=np.float64, copy=True)
                    for i, v in enumerate(theta)}
        return {"theta": np.array(as_array(theta, "theta", finite=False), dtype=np.float64, copy=True)}

    def theta_from_dict(self, arrays: dict[str, Any]) -> Any:
        """Inverse of :meth:`theta_to_dict`: the model's parameter from its named arrays.

        The default returns the array of a single ``"theta"`` entry, a tuple
        for keys ``"0"``, ``"1"``, ... and a dict of float64 arrays otherwise.

        Parameters
        ----------
        arrays : dict of str to array_like
            E.g. ``History.load(path).params``.

        Raises
        ------
        TypeError
            ``arrays`` is not a non-empty dict.
        """
        if not isinstance(arrays, dict) or not arrays:
            raise TypeError(f"Expected 'arrays' to be a non-empty dict of named arrays, got {arrays!r}")
        out = {str(k): np.array(as_array(v, f"arrays[{k!r}]", finite=False), dtype=np.float64, copy=True)
               for k, v in arrays.items()}
        if list(out) == ["theta"]:
            return out["theta"]
        if list(out) == [str(i) for i in range(len(out))]:
            return tuple(out.values())
        return out

    def project_theta(self, theta: Any) -> Any:
        """Projection of a parameter onto the constraint set ``Θ`` (``dom g``).

        Only the Θ-space baseline needs it (its averaged parameters may leave
        ``Θ``); the identity by default, where ``Θ`` is the whole space.
        """
        return theta

    # -- compiled backend (optional) ----------------------------------------
    def compiled_model(self) -> Any:
        """The model as the compiled round engine runs it, or None (the default: Python backend only).

        A model returns a :class:`fedmm.kernels.CompiledModel` (built by a
        factory of :mod:`fedmm.kernels`, e.g. :func:`fedmm.kernels.sample_model`
        from numba ``cfunc`` addresses) whose callbacks compute exactly what
        :meth:`statistic`, :meth:`project` and :meth:`T` compute, so that the
        compiled and Python backends agree.  It may return None for
        configurations it does not compile (the engine then runs the Python
        backend and records why in ``History.config``).  A subclass that
        redefines one of the ``COMPILED_ROUND_METHODS`` (:mod:`fedmm.models.base`) without
        redefining ``compiled_model`` runs on the Python backend
        (:meth:`compiled_overrides`).
        """
        return None

    def compiled_overrides(self) -> tuple[str, ...]:
        """The round methods this model computes in Python that its compiled form does not know about.

        The compiled form is the :meth:`compiled_model` of the most derived
        class that defines one (its *owner*); it replaces the
        ``COMPILED_ROUND_METHODS`` of that class.  Every one of them that
        ``type(self)`` (a subclass, a mixin) or the instance itself redefines
        is returned, in the order of ``COMPILED_ROUND_METHODS``: the
        compiled backend would bypass it, so the engine runs such a model on
        the Python backend (``backend='auto'``, with the reason in
        ``History.config['backend_reason']``) or refuses it
        (``backend='compiled'``).  A subclass whose override the compiled
        form does compute declares it by redefining ``compiled_model`` too.
        Empty for a model without a compiled form of its own.

        Examples
        --------
        >>> import numpy as np
        >>> from fedmm.models import InverseToy
        >>> class Shifted(InverseToy):
        ...     def statistic(self, data, theta, idx=None):
        ...         return super().statistic(data, theta, idx) + 1.0
        >>> Shifted().compiled_overrides(), InverseToy().compiled_overrides()
        (('statistic',), ())
        """
        cls = type(self)
        owner = next((c for c in cls.__mro__ if "compiled_model" in vars(c)), SurrogateModel)
        if owner is SurrogateModel:
            return ()
        own = vars(self)
        return tuple(name for name in COMPILED_ROUND_METHODS
                     if name in own or getattr(cls, name, None) is not getattr(owner, name, None))

    def compiled_data(self, data: Any) -> np.ndarray:
        """A client's data as the compiled statistic reads it: C-ordered float64 rows ``(N_i, sample_size)``."""
        arr = np.ascontiguousarray(data, dtype=np.float64)
        return arr.reshape(arr.shape[0], -1)

    def compiled_memory(self, memory: dict | None, data: Any) -> np.ndarray | None:
        """The per-sample memory array (``(N_i, memory_size)``, updated in place) inside a client's
        memory dict, created if missing; None when the model keeps none."""
        return None

    def compiled_theta(self, theta: Any, compiled: Any) -> np.ndarray:
        """The compiled parameter buffer of ``theta``: its flat vector, then ``compiled.derive``'s part."""
        return compiled.derive(self.theta_vector(theta))

    def theta_from_compiled(self, buffer: np.ndarray, like: Any) -> Any:
        """The parameter (model structure) of a compiled parameter buffer (inverse of :meth:`compiled_theta`)."""
        d = self.theta_vector(like).shape[0]
        return self.theta_from_vector(np.array(buffer[:d], copy=True), like)

    # -- monitoring ---------------------------------------------------------
    @abstractmethod
    def objective(self, data: Any, theta: Any) -> float:
        """``f(θ) + g(θ)`` where ``f`` is the mean loss over ``data`` (reporting only)."""
