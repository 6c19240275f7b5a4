# SPDX-License-Identifier: BSD-3-Clause
"""User models at compiled speed: per-sample functions written in Python, compiled by numba.

A :class:`NumbaModel` takes plain Python functions with NumPy-array semantics
(the per-sample statistic ``S̄(z, θ)``, the map ``T`` and optionally the
projection ``Π``), compiles them with :func:`numba.cfunc` to the C signatures
of ``fedmm_sample_model_t`` (``fedmm_models.h``)::

    int statistic(const double *constants, const double *theta, const double *z, double *out)
    int T(const double *constants, const double *s, double *theta)
    int project(const double *constants, double *s)

and hands their addresses to :func:`fedmm.kernels.sample_model`.  The
compiled round engine then runs whole stretches of rounds of the model with
the GIL released, and the Python backend calls the very same machine code
through the :class:`fedmm.kernels.CompiledModel` methods, so that the two
backends agree bit for bit.

numba is an optional dependency (``pip install 'fedmm[numba]'``): it is
imported when a :class:`NumbaModel` is first built, never by ``import fedmm``.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import as_array, check_index, check_int, check_statistic, index_range_error
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["NumbaModel"]

_INSTALL_HINT = "pip install 'fedmm[numba]'"

#: Compiled cfunc triples by (functions, lengths): a model built twice from the same
#: functions and sizes (tests, benchmarks, unpickling) compiles once per process.
_CFUNC_CACHE: dict[tuple, tuple[Any, Any, Any]] = {}
_CFUNC_LOCK = threading.Lock()


def import_numba() -> Any:
    """The ``numba`` module, or an ImportError that says how to install it."""
    try:
        import numba
    except ImportError as exc:
        raise ImportError(f"fedmm.models.NumbaModel needs numba, an optional dependency: {_INSTALL_HINT}") from exc
    return numba


def _dispatcher(numba: Any, fn: Any, role: str) -> Any:
    """``fn`` compiled by ``numba.njit`` with ``inline="always"`` (and NumPy's floating-point error
    model unless a jitted ``fn`` chose another): inlined at numba's IR level into the kernel that
    views the C pointers as arrays, it is optimized with the vector lengths known, like a
    hand-written C function (a plain call cost 25-70% more per sample on the example's statistic)."""
    if numba.extending.is_jitted(fn):
        options = {"error_model": "numpy", **fn.targetoptions, "inline": "always"}
        options.pop("nopython", None)
        return numba.njit(fn.py_func, **options)
    if not callable(fn):
        raise TypeError(f"Expected '{role}' to be a Python function, got {type(fn).__name__}")
    return numba.njit(fn, error_model="numpy", inline="always")


def _returns_status(numba: Any, disp: Any, lengths: tuple[int, ...], role: str, names: str) -> bool:
    """Compile ``disp`` for contiguous float64 vectors; True if it returns an int status, False for None."""
    array = numba.types.Array(numba.types.float64, 1, "C")
    args = (array,) * len(lengths)
    name = getattr(disp, "__name__", role)
    signature = ", ".join(f"{n} ({k})" for n, k in zip(names.split(), lengths))
    try:
        disp.compile(args)
    except Exception as exc:
        raise TypeError(f"numba could not compile the {role} function {name!r} in nopython mode for "
                        f"float64 vectors {signature}: {exc}") from exc
    for sig in disp.nopython_signatures:
        if tuple(sig.args) == args:
            if sig.return_type == numba.types.none:
                return False
            if isinstance(sig.return_type, numba.types.Integer):
                return True
            raise TypeError(f"Expected the {role} function {name!r} to return None or an int status, "
                            f"numba infers {sig.return_type}")
    raise TypeError(f"numba did not compile the {role} function {name!r} for {args}")  # pragma: no cover


def _cfunc(numba: Any, fn: Any, lengths: tuple[int, ...], role: str, names: str) -> Any:
    """``int f(double *, …)`` (one pointer per length) running ``fn`` on ``numba.carray`` views.

    Two levels, because numba's ``try``/``except`` does not catch what an
    IR-inlined callee raises: a kernel on the raw pointers (``fn`` inlined,
    lengths as closure constants) returns ``fn``'s status or 0, and the cfunc
    calls it inside ``try``, turning any exception into status 1.
    """
    user = _dispatcher(numba, fn, role)
    status = _returns_status(numba, user, lengths, role, names)
    carray = numba.carray
    ptr = numba.types.CPointer(numba.types.float64)
    if len(lengths) == 4:
        n0, n1, n2, n3 = lengths

        def kernel(p0, p1, p2, p3):  # pragma: no cover - compiled by numba
            result = user(carray(p0, n0), carray(p1, n1), carray(p2, n2), carray(p3, n3))
            return result if status else 0

        def entry(p0, p1, p2, p3):  # pragma: no cover - compiled by numba
            try:
                code = compiled(p0, p1, p2, p3)
            except Exception:
                return 1
            return code
    elif len(lengths) == 3:
        n0, n1, n2 = lengths

        def kernel(p0, p1, p2):  # pragma: no cover - compiled by numba
            result = user(carray(p0, n0), carray(p1, n1), carray(p2, n2))
            return result if status else 0

        def entry(p0, p1, p2):  # pragma: no cover - compiled by numba
            try:
                code = compiled(p0, p1, p2)
            except Exception:
                return 1
            return code
    else:
        n0, n1 = lengths

        def kernel(p0, p1):  # pragma: no cover - compiled by numba
            result = user(carray(p0, n0), carray(p1, n1))
            return result if status else 0

        def entry(p0, p1):  # pragma: no cover - compiled by numba
            try:
                code = compiled(p0, p1)
            except Exception:
                return 1
            return code
    compiled = numba.njit(kernel, error_model="numpy")
    return numba.cfunc(numba.types.intc(*([ptr] * len(lengths))), error_model="numpy")(entry)


def _compile_cfuncs(numba: Any, statistic: Any, T: Any, project: Any, n_constants: int, q: int, d: int,
                    sample_size: int) -> tuple[Any, Any, Any]:
    """The ``numba.cfunc`` objects ``(statistic, T, project)`` (``project`` None without one) with the C
    signatures of ``fedmm_sample_model_t``; an exception raised by the user's code becomes status 1
    (the call then fails with ``ValueError``)."""
    stat = _cfunc(numba, statistic, (n_constants, d, sample_size, q), "statistic", "constants theta z out")
    t_map = _cfunc(numba, T, (n_constants, q, d), "T", "constants s theta")
    proj = None if project is None else _cfunc(numba, project, (n_constants, q), "project", "constants s")
    return stat, t_map, proj


class NumbaModel(SurrogateModel):
    """A surrogate model from per-sample Python functions compiled by numba (GIL-free, compiled backend).

    The model is linearly parameterized (FedMM paper MM-1/MM-2): a client's
    oracle is the mean of ``S̄(z_j, θ)`` over its rows ``z_j`` and the server
    maps a statistic to the parameter with ``T``.  The functions take NumPy
    vectors and write their result in place (return None, or an int status
    where 0 means success)::

        def statistic(constants, theta, z, out):   # out[:] = S̄(z, θ), shape (q,)
        def T(constants, s, theta):                # theta[:] = T(s), shape (d,)
        def project(constants, s):                 # s[:] = Π(s) in place, shape (q,)

    ``constants`` (shape ``(n_constants,)``), ``theta`` (``(d,)``) and ``z``
    (``(sample_size,)``, one data row) are read-only.  ``T`` must write every
    entry of ``theta`` without reading it, and every function must be
    deterministic and free of global state (the engine calls them from
    several threads at once).  They are compiled with ``numba.njit``
    (``error_model="numpy"``: a division by zero gives inf or NaN instead of
    raising; ``inline="always"``, so that each is optimized with its vector
    lengths known and runs as fast as a hand-written C function of the same
    arithmetic) and wrapped in ``numba.cfunc``s; an exception inside them, or
    a nonzero status, makes the call fail with ``ValueError`` ("invalid
    argument"; on the compiled backend the message names the client and the
    round).  Functions already decorated with ``numba.njit`` are recompiled
    from their Python source with their options plus ``inline="always"``.

    Parameters
    ----------
    statistic, T : callable
        The per-sample statistic ``S̄(z, θ)`` and the map ``T(s)``.
    q : int
        Length of the flat statistic.
    d : int
        Length of the flat parameter.
    sample_size : int
        Values per data row: a client's data is a float64 array of shape ``(N_i, sample_size)``.
    constants : array_like of shape (n_constants,), optional
        Values every function receives (say a matrix fitted at set-up);
        :meth:`set_constants` replaces them (same length).  The cfuncs are
        compiled for ``n_constants``.
    project : callable, optional
        ``Π``, the Euclidean projection onto the surrogate domain ``𝒮``
        (default: ``𝒮`` is the whole space).
    n_constants : int, optional
        Number of constants when ``constants`` is not known yet (set them
        later with :meth:`set_constants`); default ``len(constants)``.
    layout : StatisticLayout, optional
        Named blocks of the statistic (size ``q``); default one block ``"S"``.
    objective : callable(data, theta) -> float, optional
        ``f(θ) + g(θ)`` on a client's data, for monitoring (``evaluate_every``).
    init : callable(datas, rng) -> ndarray of shape (q,), optional
        ``Ŝ_0``; default ``Π(0)``.
    name : str, optional
        Used in error messages and the model's repr.

    Notes
    -----
    The parameter θ is a flat float64 vector of shape ``(d,)`` (``T``
    returns it).  The cfuncs are compiled once per process for given
    functions and lengths (a second model with the same ones reuses them);
    compilation takes a few seconds.  A model pickles without its compiled
    code (it is rebuilt on first use), so module-level functions are needed
    to send it to another process.

    Examples
    --------
    The Remark 1 toy (``S̄(z, θ) = z``, ``T(s) = s^{-1/2}``) written as user code
    (needs numba):

    >>> import numpy as np
    >>> from fedmm.algorithms import FedMM
    >>> def statistic(c, theta, z, out):
    ...     out[0] = z[0]
    >>> def T(c, s, theta):
    ...     theta[0] = 1.0 / np.sqrt(s[0])
    >>> model = NumbaModel(statistic, T, q=1, d=1, sample_size=1)
    >>> datas = [np.full((10, 1), 1.0), np.full((30, 1), 5.0)]
    >>> h = FedMM(model, step=1.0, oracle="full").run(datas, 1, init=np.ones(1))
    >>> h.config["backend"], float(h.state["theta"][0])
    ('compiled', 0.5)
    """

    _data_ndim = (2,)  # statistic() reads float64 arrays of this ndim without check_data

    def __init__(self, statistic: Callable[..., Any], T: Callable[..., Any], *, q: int, d: int, sample_size: int,
                 constants: Any = None, project: Callable[..., Any] | None = None, n_constants: int | None = None,
                 layout: StatisticLayout | None = None, objective: Callable[[Any, Any], float] | None = None,
                 init: Callable[[Sequence[Any], np.random.Generator], np.ndarray] | None = None,
                 name: str | None = None) -> None:
        import_numba()  # fail early, with the install hint
        for fn, role in ((statistic, "statistic"), (T, "T"), (project, "project")):
            if fn is not None and not callable(fn):
                raise TypeError(f"Expected '{role}' to be a Python function, got {type(fn).__name__}")
        self.statistic_function = statistic
        self.T_function = T
        self.project_function = project
        self.q = check_int(q, "q", low=1)
        self.d = check_int(d, "d", low=1)
        self.sample_size = check_int(sample_size, "sample_size", low=1)
        if constants is None and n_constants is None:
            n_constants = 0
        if n_constants is None:
            n_constants = int(np.size(constants))
        self.n_constants = check_int(n_constants, "n_constants", low=0)
        self.layout = StatisticLayout([("S", (self.q,))]) if layout is None else layout
        if self.layout.size != self.q:
            raise ValueError(f"Expected a 'layout' of size q={self.q}, got {self.layout.size}")
        self.objective_function = objective
        self.init_function = init
        self.name = name or getattr(statistic, "__name__", "NumbaModel")
        self._cfuncs: tuple[Any, Any, Any] | None = None
        self._compiled: Any = None
        self.constants: np.ndarray | None = None
        if constants is not None or self.n_constants == 0:
            self.set_constants(np.zeros(0) if constants is None else constants)

    # -- constants and compiled code ------------------------------------------
    def set_constants(self, constants: Any) -> None:
        """Replace the constants (same length ``n_constants``, finite); the compiled model is rebuilt."""
        c = np.array(as_array(constants, "constants", dtype=np.float64).ravel(), dtype=np.float64, copy=True)
        if c.shape != (self.n_constants,):
            raise ValueError(f"Expected {self.n_constants} constants (the length the functions are compiled "
                             f"for), got {c.shape[0]}")
        c.setflags(write=False)
        self.constants = c
        self._compiled = None

    @property
    def cfuncs(self) -> tuple[Any, Any, Any]:
        """The ``numba.cfunc`` objects ``(statistic, T, project)`` (``project`` None without one), compiled
        on first use; their ``address`` is what the engine calls."""
        if self._cfuncs is None:
            key = (self.statistic_function, self.T_function, self.project_function, self.n_constants,
                   self.q, self.d, self.sample_size)
            with _CFUNC_LOCK:
                if key not in _CFUNC_CACHE:
                    _CFUNC_CACHE[key] = _compile_cfuncs(import_numba(), *key)
                self._cfuncs = _CFUNC_CACHE[key]
        return self._cfuncs

    def compiled_model(self) -> Any:
        """The :class:`fedmm.kernels.CompiledModel` of the cfuncs (:func:`fedmm.kernels.sample_model`)."""
        if self._compiled is None:
            if self.constants is None:
                raise RuntimeError(f"{self.name}: the constants are not set yet (set_constants, or the model's "
                                   "set-up such as fit_global_moments)")
            stat, T, proj = self.cfuncs
            self._compiled = kernels.sample_model(
                self.q, self.d, self.sample_size, statistic=stat.address, T=T.address,
                project=0 if proj is None else proj.address,
                constants=self.constants if self.n_constants else None, name=self.name)
        return self._compiled

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_cfuncs=None, _compiled=None)  # machine code does not travel: rebuilt on first use
        return state

    # -- data -----------------------------------------------------------------
    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        """A client's rows as a C-ordered float64 array of shape ``(N_i, sample_size)`` (finite, non-empty)."""
        arr = as_array(data, name, ndim=(1, 2), dtype=np.float64, order="C")
        if arr.ndim == 1 and self.sample_size == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2 or arr.shape[1] != self.sample_size or arr.shape[0] == 0:
            raise ValueError(f"Expected '{name}' of shape (N, {self.sample_size}) with N >= 1, got {arr.shape}")
        return arr

    def _theta(self, theta: Any) -> np.ndarray:
        th = np.ascontiguousarray(self.theta_vector(theta), dtype=np.float64)
        if th.shape != (self.d,):
            raise ValueError(f"Expected 'theta' with {self.d} values, got shape {th.shape}")
        return th

    # -- the protocol, through the compiled functions ---------------------------
    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """``b⁻¹ Σ_{j∈idx} S̄(z_j, θ)`` in row order (all rows if ``idx`` is None), by the compiled engine."""
        arr = self._statistic_data(data)
        idx = check_index(idx, arr.shape[0], bounds=False)
        try:
            out, _ = self.compiled_model().statistic(self._theta(theta), arr, idx)
        except IndexError:  # the compiled loop tests every index (see check_index)
            raise index_range_error(idx, arr.shape[0]) from None
        return out

    def T(self, s: np.ndarray) -> np.ndarray:
        """``T(s)``, shape ``(d,)``, by the compiled ``T``."""
        return self.compiled_model().T(check_statistic(s, self.layout.size))

    def project(self, s: np.ndarray) -> np.ndarray:
        """``Π(s)`` (a new array) by the compiled projection; ``s`` itself when ``𝒮`` is the whole space."""
        if self.project_function is None:
            return check_statistic(s, self.layout.size)
        return self.compiled_model().project(check_statistic(s, self.layout.size))

    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """``init(datas, rng)`` if given, else ``Π(0)``."""
        if self.init_function is not None:
            return np.array(self.layout.check(self.init_function(datas, rng), "init(datas, rng)"),
                            dtype=np.float64)
        return self.project(np.zeros(self.q))

    def theta_vector(self, theta: Any) -> np.ndarray:
        return as_array(theta, "theta", finite=False).reshape(-1)

    def objective(self, data: Any, theta: Any) -> float:
        """``objective(data, theta)`` as given to the constructor."""
        if self.objective_function is None:
            raise NotImplementedError(f"{self.name}: no 'objective' was given to NumbaModel, so the objective "
                                      "cannot be monitored (evaluate_every=0)")
        return float(self.objective_function(data, theta))

    def __repr__(self) -> str:
        return (f"NumbaModel({self.name!r}, q={self.q}, d={self.d}, sample_size={self.sample_size}, "
                f"n_constants={self.n_constants})")
