# SPDX-License-Identifier: BSD-3-Clause
"""Input-convex potentials and the federated optimal-transport objective (FedMM paper §7, eq. (31)-(33)).

This module needs JAX and optax (``pip install "fedmm[ot]"``).  It imports
them only when an OT object is built, so ``import fedmm.models`` works without
them; building an :class:`ICNN`, a :class:`TransportProblem` or evaluating a
:class:`TransportMap` without JAX raises ``ImportError`` saying what to install.

Numerics.  Every JAX computation here runs in float64 inside the context
manager :func:`x64` (``jax.enable_x64(True)``, thread-local), never by flipping
``jax_enable_x64`` globally: the arrays that cross the boundary are NumPy
float64 vectors (the parameters travel through the compressors and the wire
format of :mod:`fedmm.compression`, which are float64), so float64 inside
avoids a rounding step at every round trip, keeps finite-difference checks and
step-for-step comparisons with an independent reference meaningful at
``1e-10``, and makes results a function of the seed only.  It costs about a
factor two in speed on CPU against float32 for the network sizes used here.

Devices.  JAX runs the computations on its default device (the first GPU when
JAX has a GPU backend, else the CPU; ``jax.default_device`` changes it);
``x64(device)`` also pins a ``jax.Device`` (:func:`check_device` accepts a
device or a platform name), float64 on any device.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Sequence

import numpy as np

from fedmm._validation import as_array, check_count, check_in, check_int, check_real, check_seed

__all__ = ["ICNN", "TransportProblem", "TransportMap", "default_hidden_sizes", "x64"]

#: Largest number of parameters of an :class:`ICNN` (``2**31 − 1``: 16 GiB of float64 per vector).
MAX_PARAMS = 2**31 - 1
#: Convex, non-decreasing activations of the convex path.
ACTIVATIONS = ("celu", "softplus")
#: What the θ-direction of :class:`TransportProblem` differentiates (see its ``conjugate_step``).
CONJUGATE_STEPS = ("cycle", "joint")

_EXTRA_HINT = 'the optimal-transport models need JAX and optax: pip install "fedmm[ot]"'


def require_jax() -> tuple[Any, Any]:
    """``(jax, jax.numpy)``, or ``ImportError`` saying to ``pip install "fedmm[ot]"``."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        raise ImportError(f"fedmm.models.ot: {_EXTRA_HINT} ({exc})") from exc
    return jax, jnp


def require_optax() -> Any:
    """The ``optax`` module, or ``ImportError`` saying to ``pip install "fedmm[ot]"``."""
    try:
        import optax
    except ImportError as exc:
        raise ImportError(f"fedmm.models.ot: {_EXTRA_HINT} ({exc})") from exc
    return optax


@contextlib.contextmanager
def x64(device: Any = None) -> Iterator[None]:
    """Run the enclosed JAX code in float64 (thread-local; no global configuration changes).

    ``jax.enable_x64(True)`` on JAX >= 0.6, ``jax.experimental.enable_x64()`` before.  With a
    ``device`` (a ``jax.Device``), the enclosed code also runs there (``jax.default_device(device)``);
    None keeps JAX's default device.
    """
    jax, _ = require_jax()
    with contextlib.ExitStack() as stack:
        enable = getattr(jax, "enable_x64", None)
        if enable is None:  # pragma: no cover - JAX < 0.6
            from jax.experimental import enable_x64 as enable_ctx

            stack.enter_context(enable_ctx())
        else:
            stack.enter_context(enable(True))
        if device is not None:
            stack.enter_context(jax.default_device(device))
        yield


def check_device(device: Any, name: str = "device") -> Any:
    """``device`` as a ``jax.Device``, or None (JAX's default device).

    Accepts None, a ``jax.Device`` (e.g. ``jax.devices("cpu")[0]``) or a platform name
    (``"cpu"``, ``"gpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``: that platform's first device).
    Anything else raises ``TypeError``, a platform without devices here ``ValueError``, both naming ``name``.
    """
    if device is None:
        return None
    jax, _ = require_jax()
    if isinstance(device, jax.Device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"Expected '{name}' to be None, a jax.Device (e.g. jax.devices()[0]) or a platform name "
                        f"such as 'cpu' or 'gpu', got {type(device).__name__}")
    try:
        found = jax.devices(device)
    except RuntimeError as exc:
        platforms = sorted({d.platform for d in jax.devices()})
        raise ValueError(f"Expected '{name}' to name a platform with devices here ({', '.join(platforms)}), "
                         f"got {device!r}") from exc
    return found[0]


def resolve_device(device: Any = None) -> Any:
    """The ``jax.Device`` that JAX code runs on: ``device`` when given, else JAX's default device
    (``jax.default_device``'s current value, or ``jax.devices()[0]``)."""
    if device is not None:
        return device
    jax, _ = require_jax()
    default = jax.config.jax_default_device
    if default is None:
        return jax.devices()[0]
    return check_device(default, "jax_default_device")


def device_info(device: Any = None) -> dict[str, str]:
    """``{"platform": ..., "device_kind": ...}`` of :func:`resolve_device` ``(device)`` (JSON-friendly),
    e.g. ``{"platform": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}``."""
    d = resolve_device(device)
    return {"platform": str(d.platform), "device_kind": str(d.device_kind)}


def default_hidden_sizes(dim: int) -> list[int]:
    """Hidden sizes of Korotin et al. (2021b, MMv2) for dimension ``D``: ``[max(2D, 64), max(2D, 64), max(D, 32)]``."""
    dim = check_int(dim, "dim", low=1)
    return [max(2 * dim, 64), max(2 * dim, 64), max(dim, 32)]


class _JitCache:
    """Objects that cache jit-compiled functions in ``self._jit``: pickled without them (rebuilt on first use)."""

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_jit"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class ICNN(_JitCache):
    r"""Dense input-convex neural network with quadratic input layers (Korotin et al. 2021a).

    For an input :math:`x \in \mathbb{R}^D` and hidden sizes
    :math:`h_1, \dots, h_L`:

    .. math::

        z_1 &= q_1(x), \qquad
        z_{k+1} = \sigma\big(C_k z_k + q_{k+1}(x)\big) \quad (k = 1, \dots, L-1), \\
        f(x) &= w^\top z_L + \tfrac{c}{2}\|x\|^2,

    with quadratic input layers
    :math:`q_k(x)_j = \sum_{r=1}^{R} (a_{k,r,j}^\top x)^2 + W_{k,j}^\top x + b_{k,j}`
    (rank :math:`R`), a convex non-decreasing activation :math:`\sigma`
    (CELU, :math:`\alpha = 1`, by default), convex-path weights
    :math:`C_k \geq 0`, :math:`w \geq 0` (the set :math:`\Theta`) and the strong
    convexity :math:`c`.  Each :math:`q_k` is convex, non-negative
    combinations and non-decreasing convex maps of convex functions are
    convex, so :math:`f` is :math:`c`-strongly convex on :math:`\Theta`, and
    :math:`\nabla f` is a monotone map (a transport map candidate).

    Parameters
    ----------
    dim : int >= 1
        Input dimension :math:`D`.
    hidden_sizes : sequence of int > 0, optional
        :math:`h_1, \dots, h_L`; default :func:`default_hidden_sizes`
        (``[max(2D, 64), max(2D, 64), max(D, 32)]``, MMv2).
    rank : int >= 1
        Rank :math:`R` of the quadratic input layers.
    strong_convexity : float >= 0
        :math:`c`.
    activation : {'celu', 'softplus'}

    Notes
    -----
    Parameters travel as one flat float64 vector of length :attr:`n_params`
    (NumPy at the boundary, JAX inside, jit-compiled and cached per
    instance).  Layout, in order, for ``k = 1..L``: ``A_k`` of shape
    ``(D, R, h_k)`` (the quadratic factors ``a_{k,r,j} = A_k[:, r, j]``),
    ``W_k`` of shape ``(h_k, D)``, ``b_k`` of shape ``(h_k,)``; then for
    ``k = 1..L-1`` the convex-path weights ``C_k`` of shape ``(h_{k+1}, h_k)``;
    then ``w`` of shape ``(h_L,)``.  All blocks are row-major.
    :attr:`convex_mask` marks the entries of ``C_k`` and ``w``.

    Examples
    --------
    >>> import numpy as np
    >>> f = ICNN(2, [8, 8])
    >>> p = f.init(0)
    >>> x = np.random.default_rng(0).normal(size=(5, 2))
    >>> f.gradient(p, x).shape, bool((f.project(p)[f.convex_mask] >= 0).all())
    ((5, 2), True)
    """

    def __init__(self, dim: int, hidden_sizes: Sequence[int] | None = None, *, rank: int = 1,
                 strong_convexity: float = 1e-4, activation: str = "celu") -> None:
        require_jax()
        self.dim = check_int(dim, "dim", low=1)
        sizes = default_hidden_sizes(self.dim) if hidden_sizes is None else hidden_sizes
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or len(sizes) == 0:
            raise ValueError(f"Expected 'hidden_sizes' to be a non-empty sequence of positive ints, got {sizes!r}")
        checked = []
        for k, h in enumerate(sizes):
            if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or int(h) <= 0:
                raise ValueError(f"Expected 'hidden_sizes' to hold positive ints, got hidden_sizes[{k}] = {h!r}")
            checked.append(int(h))
        self.hidden_sizes = tuple(checked)
        self.rank = check_int(rank, "rank", low=1)
        self.strong_convexity = check_real(strong_convexity, "strong_convexity", low=0.0)
        self.activation = check_in(activation, "activation", ACTIVATIONS)
        blocks: list[tuple[str, tuple[int, ...], bool]] = []
        for k, h in enumerate(self.hidden_sizes):
            blocks += [(f"A{k}", (self.dim, self.rank, h), False), (f"W{k}", (h, self.dim), False),
                       (f"b{k}", (h,), False)]
        for k in range(len(self.hidden_sizes) - 1):
            blocks.append((f"C{k}", (self.hidden_sizes[k + 1], self.hidden_sizes[k]), True))
        blocks.append(("w", (self.hidden_sizes[-1],), True))
        self.blocks = tuple(blocks)
        sizes = [math.prod(s) for _, s, _ in blocks]  # Python ints: no int64 overflow for absurd widths
        if sum(sizes) > MAX_PARAMS:
            raise ValueError(f"Expected 'hidden_sizes' (and 'dim', 'rank') giving at most {MAX_PARAMS} parameters "
                             f"(2**31 - 1, 16 GiB of float64), got {sum(sizes)} for dim={self.dim}, "
                             f"rank={self.rank}, hidden_sizes={self.hidden_sizes}")
        offsets = np.cumsum([0] + sizes)
        self.offsets = tuple(int(o) for o in offsets)
        self.n_params = self.offsets[-1]
        mask = np.zeros(self.n_params, dtype=np.bool_)
        for (_, _, nonneg), lo, hi in zip(blocks, self.offsets[:-1], self.offsets[1:]):
            mask[lo:hi] = nonneg
        mask.flags.writeable = False
        #: ndarray of shape (n_params,), bool: the convex-path entries (kept >= 0 by :meth:`project`).
        self.convex_mask = mask
        self._jit: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (f"ICNN(dim={self.dim}, hidden_sizes={list(self.hidden_sizes)}, rank={self.rank}, "
                f"strong_convexity={self.strong_convexity!r}, activation={self.activation!r})")

    def config(self) -> dict:
        """The constructor arguments (JSON-friendly)."""
        return {"dim": self.dim, "hidden_sizes": list(self.hidden_sizes), "rank": self.rank,
                "strong_convexity": self.strong_convexity, "activation": self.activation}

    # -- parameters -----------------------------------------------------------------
    def check_params(self, params: Any, name: str = "params") -> np.ndarray:
        """``params`` as a finite float64 vector of shape ``(n_params,)``, or ``ValueError`` naming ``name``."""
        p = as_array(params, name, ndim=1)
        if p.shape != (self.n_params,):
            raise ValueError(f"Expected '{name}' of shape ({self.n_params},) for {self!r}, got {p.shape}")
        return p

    def check_points(self, x: Any, name: str = "x") -> np.ndarray:
        """``x`` as a finite float64 array of shape ``(n, dim)`` (a ``(dim,)`` vector is one point)."""
        a = as_array(x, name, ndim=(1, 2))
        if a.ndim == 1:
            a = a[None, :]
        if a.shape[1] != self.dim:
            raise ValueError(f"Expected '{name}' of shape (n, {self.dim}), got {a.shape}")
        return a

    def init(self, seed: Any = None) -> np.ndarray:
        """Random parameters in ``Θ``: every entry ``N(0, 0.1²)`` (Korotin et al.), then :meth:`project`.

        Parameters
        ----------
        seed : int, SeedSequence, Generator or None
            Normalized by ``fedmm.algorithms.check_seed``.

        Returns
        -------
        ndarray of shape (n_params,), float64
        """
        rng = np.random.default_rng(check_seed(seed))
        return self.project(0.1 * rng.standard_normal(self.n_params))

    def project(self, params: Any) -> np.ndarray:
        """Euclidean projection onto ``Θ``: the convex-path entries clipped at 0, the rest unchanged."""
        p = self.check_params(params)
        return np.where(self.convex_mask, np.maximum(p, 0.0), p)

    # -- JAX-traceable functions (for code that composes them under jit) ---------------
    def unflatten(self, params: Any) -> dict[str, Any]:
        """The blocks of a flat parameter vector (NumPy or JAX) as a dict name -> array (views/slices)."""
        return {name: params[lo:hi].reshape(shape)
                for (name, shape, _), lo, hi in zip(self.blocks, self.offsets[:-1], self.offsets[1:])}

    def apply(self, params: Any, x: Any) -> Any:
        """``f(x)`` for each row of ``x``: JAX-traceable, ``(n_params,), (n, D) -> (n,)``."""
        jax, jnp = require_jax()
        blocks = self.unflatten(params)
        act = jax.nn.celu if self.activation == "celu" else jax.nn.softplus

        def quadratic(k: int) -> Any:
            proj = jnp.einsum("nd,drh->nrh", x, blocks[f"A{k}"])
            return jnp.sum(proj * proj, axis=1) + x @ blocks[f"W{k}"].T + blocks[f"b{k}"]

        z = quadratic(0)
        for k in range(1, len(self.hidden_sizes)):
            z = act(z @ blocks[f"C{k - 1}"].T + quadratic(k))
        return z @ blocks["w"] + 0.5 * self.strong_convexity * jnp.sum(x * x, axis=1)

    def apply_gradient(self, params: Any, x: Any) -> Any:
        """``∇_x f(x)`` for each row of ``x``: JAX-traceable, ``(n_params,), (n, D) -> (n, D)``."""
        jax, jnp = require_jax()
        return jax.grad(lambda z: jnp.sum(self.apply(params, z)))(x)

    # -- NumPy boundary -------------------------------------------------------------
    def _compiled(self, name: str) -> Any:
        fn = self._jit.get(name)
        if fn is None:
            jax, _ = require_jax()
            if name == "value":
                fn = jax.jit(self.apply)
            elif name == "gradient":
                fn = jax.jit(self.apply_gradient)
            elif name == "fit_identity":
                fn = jax.jit(self._fit_identity)
            else:  # "param_gradient": ∇_params Σ_j f(x_j)
                fn = jax.jit(jax.grad(lambda p, x: self.apply(p, x).sum()))
            self._jit[name] = fn
        return fn

    def _fit_identity(self, params: Any, xs: Any, lr: Any) -> Any:
        jax, jnp = require_jax()
        optax = require_optax()
        opt = optax.adam(lr)
        mask = self.convex_mask

        def loss(q: Any, x: Any) -> Any:
            return jnp.mean(jnp.sum((self.apply_gradient(q, x) - x) ** 2, axis=1))

        def body(carry: Any, x: Any) -> Any:
            q, state = carry
            upd, state = opt.update(jax.grad(loss)(q, x), state, q)
            q = optax.apply_updates(q, upd)
            return (jnp.where(mask, jnp.maximum(q, 0.0), q), state), None

        return jax.lax.scan(body, (params, opt.init(params)), xs)[0][0]

    def value(self, params: Any, x: Any) -> np.ndarray:
        """``f(x_j)`` for each row of ``x``.

        Parameters
        ----------
        params : ndarray of shape (n_params,)
        x : ndarray of shape (n, dim)

        Returns
        -------
        ndarray of shape (n,), float64
        """
        p, a = self.check_params(params), self.check_points(x)
        with x64():
            return np.asarray(self._compiled("value")(p, a), dtype=np.float64)

    def gradient(self, params: Any, x: Any) -> np.ndarray:
        """``∇_x f(x_j)`` for each row of ``x`` (the map ``x ↦ ∇f(x)``).

        Returns
        -------
        ndarray of shape (n, dim), float64
        """
        p, a = self.check_params(params), self.check_points(x)
        with x64():
            return np.asarray(self._compiled("gradient")(p, a), dtype=np.float64)

    def param_gradient(self, params: Any, x: Any) -> np.ndarray:
        """``∇_params Σ_j f(x_j)``, a float64 vector of shape ``(n_params,)``."""
        p, a = self.check_params(params), self.check_points(x)
        with x64():
            return np.asarray(self._compiled("param_gradient")(p, a), dtype=np.float64)

    def fit_identity(self, params: Any, *, seed: Any = None, n_steps: int = 500, scale: float = 3.0,
                     batch_size: int = 1024, lr: float = 1e-3) -> np.ndarray:
        r"""Adam steps on :math:`E\|\nabla f(X) - X\|^2`, :math:`X \sim N(0, \text{scale}^2 I)`, projected on ``Θ``.

        The usual warm start of Korotin et al. (``∇f ≈`` identity before
        training). Deterministic given ``seed``.

        Returns
        -------
        ndarray of shape (n_params,), float64
            The fitted parameters, in ``Θ``.
        """
        p = self.check_params(params)
        n_steps = check_count(n_steps, "n_steps", low=0)
        scale = check_real(scale, "scale", low=0.0, low_open=True)
        batch_size = check_int(batch_size, "batch_size", low=1)
        lr = check_real(lr, "lr", low=0.0, low_open=True)
        if n_steps == 0:
            return self.project(p)
        xs = scale * np.random.default_rng(check_seed(seed)).standard_normal((n_steps, batch_size, self.dim))
        with x64():
            return np.asarray(self._compiled("fit_identity")(p, xs, lr), dtype=np.float64)


class TransportMap:
    """A fitted transport map ``x ↦ ∇f_ω(x)`` (source → target) and its inverse ``y ↦ ∇f_θ(y)``.

    A plain callable on NumPy arrays: no JAX knowledge needed to use it
    (JAX must be installed).  It holds the two parameter vectors as NumPy
    float64 arrays and the potentials' configuration, and pickles as such.

    Parameters
    ----------
    potential : ICNN
        The architecture shared by ``f_ω`` and ``f_θ``.
    omega, theta : ndarray of shape (potential.n_params,)

    Examples
    --------
    >>> import numpy as np
    >>> problem = TransportProblem(2, hidden_sizes=[8, 8])
    >>> omega, theta = problem.init(0)
    >>> m = problem.transport_map(omega, theta)
    >>> m(np.zeros((3, 2))).shape, m.inverse(np.zeros((1, 2))).dtype
    ((3, 2), dtype('float64'))
    """

    def __init__(self, potential: ICNN, omega: Any, theta: Any) -> None:
        if not isinstance(potential, ICNN):
            raise TypeError(f"Expected 'potential' to be an ICNN, got {type(potential).__name__}")
        self.potential = potential
        self.omega = np.array(potential.check_params(omega, "omega"), copy=True)
        self.theta = np.array(potential.check_params(theta, "theta"), copy=True)
        self.omega.flags.writeable = False
        self.theta.flags.writeable = False

    @property
    def dim(self) -> int:
        """Dimension of the points."""
        return self.potential.dim

    def __call__(self, x: Any) -> np.ndarray:
        """``∇f_ω(x)`` row by row: an ``(n, dim)`` array of source points to ``(n, dim)`` float64."""
        return self.potential.gradient(self.omega, x)

    def inverse(self, y: Any) -> np.ndarray:
        """``∇f_θ(y)`` row by row: an ``(n, dim)`` array of target points to ``(n, dim)`` float64."""
        return self.potential.gradient(self.theta, y)

    def __repr__(self) -> str:
        return f"TransportMap({self.potential!r})"


class TransportProblem(_JitCache):
    r"""The federated Wasserstein-2 objective (33) of the FedMM paper with two ICNN potentials.

    For client ``i`` with source distribution :math:`P_i` and the public target :math:`Q`:

    .. math::

        W_i(\omega, \theta) = E_{P_i}[f_\omega(X)]
          + E_Q\big[\langle \nabla f_\theta(Y), Y\rangle - f_\omega(\nabla f_\theta(Y))\big]
          + \lambda\, E_Q\|\nabla f_\omega(\nabla f_\theta(Y)) - Y\|^2,

    and :math:`W = \sum_i \mu_i W_i` (eq. (33); the cycle regularizer
    :math:`R_Q` of Korotin et al. 2021a with weight :math:`\lambda`).
    :math:`\nabla f_\omega` maps :math:`P` to :math:`Q`, :math:`\nabla f_\theta`
    maps :math:`Q` back (the conjugate's gradient).  Only the first term sees
    client data; the :math:`\theta`-gradient needs target samples only (the
    decoupling §7.1 uses).  Expectations are sample means over the given
    arrays (minibatches are the caller's business).

    **The θ-direction.**  For fixed :math:`\omega` the middle term is, at every
    ``y``, the Fenchel-Young lower bound
    :math:`\langle t, y\rangle - f_\omega(t) \le f_\omega^*(y)` at
    :math:`t = \nabla f_\theta(y)`, tight exactly at
    :math:`t = (\nabla f_\omega)^{-1}(y)`: a quantity to be *maximized* over
    :math:`t`.  Minimizing :math:`W` over :math:`\theta` as written pushes
    :math:`t` away from the inverse and only the cycle term pulls it back; near
    the inverse the second-order form in :math:`\delta t` is
    :math:`\delta t^\top(\lambda H^2 - \tfrac12 H)\delta t`,
    :math:`H = \nabla^2 f_\omega`, so the inverse is not even a local
    minimum of the θ-problem wherever :math:`H \not\succeq I / (2\lambda)`
    (for a quadratic :math:`f_\omega` the θ-problem is then unbounded
    below), and for large
    :math:`\lambda` the cycle term swamps the transport signal.  Korotin et
    al. (2021a, Appendix C.1) therefore do not differentiate the middle term
    with respect to the conjugate's parameters.  ``conjugate_step='cycle'``
    (the default) does the same: the θ-direction of :meth:`grad_theta`, and of
    the algorithms' θ-steps, is :math:`\lambda \nabla_\theta R_Q`
    (the map :math:`\nabla f_\theta(y)` inside the middle term is held
    fixed, a ``stop_gradient``); ``'joint'`` is the full
    :math:`\nabla_\theta W` (the literal reading of eq. (33)).  Values of
    :math:`W` and the ω-direction are the same for both.

    Parameters
    ----------
    dim : int >= 1
    hidden_sizes : sequence of int > 0, optional
        Of both potentials (default :func:`default_hidden_sizes`).
    cycle_weight : float >= 0
        :math:`\lambda`.
    strong_convexity : float >= 0
        Of both potentials.
    rank : int >= 1
    activation : {'celu', 'softplus'}
    batch_size : int >= 1 or None
        Default minibatch size of the algorithms on this problem: 128,
        ``fedmm experiment ot``'s setting (Korotin et al.'s centralized runs
        use 1024); None means full batches.
    conjugate_step : {'cycle', 'joint'}
        The θ-direction: :math:`\lambda \nabla_\theta R_Q` (``'cycle'``,
        needs ``cycle_weight > 0``) or :math:`\nabla_\theta W` (``'joint'``);
        see above.

    Attributes
    ----------
    potential : ICNN
        The architecture of ``f_ω`` and ``f_θ``; ``Θ`` is its parameter set.
    n_params : int
        Length of ``ω`` and of ``θ``.
    """

    def __init__(self, dim: int, *, hidden_sizes: Sequence[int] | None = None, cycle_weight: float = 1.0,
                 strong_convexity: float = 1e-4, rank: int = 1, activation: str = "celu",
                 batch_size: int | None = 128, conjugate_step: str = "cycle") -> None:
        self.potential = ICNN(dim, hidden_sizes, rank=rank, strong_convexity=strong_convexity,
                              activation=activation)
        self.dim = self.potential.dim
        self.n_params = self.potential.n_params
        self.cycle_weight = check_real(cycle_weight, "cycle_weight", low=0.0)
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size", low=1)
        self.conjugate_step = check_in(conjugate_step, "conjugate_step", CONJUGATE_STEPS)
        if self.conjugate_step == "cycle" and self.cycle_weight == 0:
            raise ValueError("Expected 'cycle_weight' > 0 with conjugate_step='cycle' (the θ-direction is "
                             "the cycle term's gradient), got cycle_weight=0; use conjugate_step='joint'")
        self._jit: dict[str, Any] = {}

    def __repr__(self) -> str:
        p = self.potential
        return (f"TransportProblem(dim={self.dim}, hidden_sizes={list(p.hidden_sizes)}, "
                f"cycle_weight={self.cycle_weight!r}, strong_convexity={p.strong_convexity!r}, rank={p.rank}, "
                f"activation={p.activation!r}, batch_size={self.batch_size}, "
                f"conjugate_step={self.conjugate_step!r})")

    def config(self) -> dict:
        """The constructor arguments (JSON-friendly)."""
        p = self.potential
        return {"dim": self.dim, "hidden_sizes": list(p.hidden_sizes), "cycle_weight": self.cycle_weight,
                "strong_convexity": p.strong_convexity, "rank": p.rank, "activation": p.activation,
                "batch_size": self.batch_size, "conjugate_step": self.conjugate_step}

    # -- validation -------------------------------------------------------------------
    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        """One client's source samples as a finite float64 ``(N, dim)`` array with ``N >= 1``.

        Raises ``ValueError`` naming ``name`` for a wrong dimension (e.g. a
        mismatch with the target), NaN/inf samples or no samples.
        """
        a = as_array(data, name, ndim=2, order="C")
        if a.shape[1] != self.dim:
            raise ValueError(f"Expected '{name}' of shape (N, {self.dim}) (the problem's and the target's "
                             f"dimension), got {a.shape}")
        if a.shape[0] == 0:
            raise ValueError(f"Expected at least one sample in '{name}', got shape {a.shape}")
        return a

    def check_target(self, target: Any, name: str = "target") -> np.ndarray:
        """The public target samples as a finite float64 ``(M, dim)`` array (see :meth:`check_data`)."""
        return self.check_data(target, name)

    def check_omega(self, omega: Any) -> np.ndarray:
        """``ω`` as a finite float64 vector of shape ``(n_params,)``."""
        return self.potential.check_params(omega, "omega")

    def check_theta(self, theta: Any) -> np.ndarray:
        """``θ`` as a finite float64 vector of shape ``(n_params,)``."""
        return self.potential.check_params(theta, "theta")

    # -- parameters ---------------------------------------------------------------------
    def init(self, seed: Any = None, *, identity_steps: int = 0,
             identity_scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
        """Initial ``(ω_0, θ_0)`` in ``Θ²``.

        ``ω_0 = θ_0 =`` :meth:`ICNN.init` ``(seed)``, followed by
        ``identity_steps`` steps of :meth:`ICNN.fit_identity` (``∇f ≈`` identity on
        ``N(0, identity_scale² I)``, Korotin et al.'s warm start) when positive;
        ``θ_0`` is a copy of ``ω_0`` as in Korotin et al.

        Returns
        -------
        omega, theta : ndarray of shape (n_params,), float64
        """
        ss = check_seed(seed)
        init_ss = np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, 0), pool_size=ss.pool_size)
        fit_ss = np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, 1), pool_size=ss.pool_size)
        omega = self.potential.init(np.random.default_rng(init_ss))
        steps = check_count(identity_steps, "identity_steps", low=0)
        if steps:
            omega = self.potential.fit_identity(omega, seed=np.random.default_rng(fit_ss), n_steps=steps,
                                                scale=identity_scale)
        return omega, omega.copy()

    def project_omega(self, omega: Any) -> np.ndarray:
        """Projection of ``ω`` onto ``Θ`` (:meth:`ICNN.project`)."""
        return self.potential.project(self.check_omega(omega))

    def project_theta(self, theta: Any) -> np.ndarray:
        """Projection of ``θ`` onto ``Θ`` (:meth:`ICNN.project`)."""
        return self.potential.project(self.check_theta(theta))

    def transport_map(self, omega: Any, theta: Any) -> TransportMap:
        """The fitted :class:`TransportMap` ``(∇f_ω, ∇f_θ)``."""
        return TransportMap(self.potential, omega, theta)

    # -- JAX-traceable objective -----------------------------------------------------------
    def target_terms(self, omega: Any, theta: Any, y: Any) -> Any:
        r"""The :math:`Q`-part of :math:`W_i` (JAX-traceable): the mean over the rows ``y`` of

        .. math::

            \langle \nabla f_\theta(y), y\rangle - f_\omega(\nabla f_\theta(y))
            + \lambda\|\nabla f_\omega(\nabla f_\theta(y)) - y\|^2.

        With ``conjugate_step='cycle'`` the first two terms see
        :math:`\nabla f_\theta(y)` through ``stop_gradient``: same value,
        no θ-gradient (see the class docstring).
        """
        jax, jnp = require_jax()
        f = self.potential
        ty = f.apply_gradient(theta, y)
        t_corr = jax.lax.stop_gradient(ty) if self.conjugate_step == "cycle" else ty
        value = jnp.mean(jnp.sum(t_corr * y, axis=1) - f.apply(omega, t_corr))
        if self.cycle_weight:
            cycle = f.apply_gradient(omega, ty) - y
            value = value + self.cycle_weight * jnp.mean(jnp.sum(cycle * cycle, axis=1))
        return value

    def objective(self, omega: Any, theta: Any, x: Any, y: Any) -> Any:
        """:math:`W_i(ω, θ)` on source samples ``x`` and target samples ``y`` (JAX-traceable)."""
        _, jnp = require_jax()
        return jnp.mean(self.potential.apply(omega, x)) + self.target_terms(omega, theta, y)

    # -- NumPy boundary -------------------------------------------------------------------
    def compiled(self, name: str, build: Any) -> Any:
        """Per-instance cache of compiled functions: ``build()`` on the first call with ``name``.

        Algorithms on this problem keep their jit-compiled loops here, so that
        several runs (or several algorithm objects) on one problem compile
        once per input shape.  The cache is not pickled (a copy in another
        process compiles again).
        """
        fn = self._jit.get(name)
        if fn is None:
            fn = self._jit[name] = build()
        return fn

    def _compiled(self, name: str) -> Any:
        jax, _ = require_jax()
        builders = {"loss": lambda: jax.jit(self.objective),
                    "grad_omega": lambda: jax.jit(jax.grad(self.objective, argnums=0)),
                    "grad_theta": lambda: jax.jit(jax.grad(self.target_terms, argnums=1))}
        return self.compiled(name, builders[name])

    def _points(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.check_data(x, "x"), self.check_target(y, "y")

    def loss(self, omega: Any, theta: Any, x: Any, y: Any) -> float:
        """:math:`W_i(ω, θ)` estimated on source samples ``x`` ``(n, dim)`` and target samples ``y`` ``(m, dim)``."""
        o, t = self.check_omega(omega), self.check_theta(theta)
        xa, ya = self._points(x, y)
        with x64():
            return float(self._compiled("loss")(o, t, xa, ya))

    def grad_omega(self, omega: Any, theta: Any, x: Any, y: Any) -> np.ndarray:
        """:math:`\\nabla_\\omega W_i(ω, θ)` on ``x``, ``y``: float64 of shape ``(n_params,)``."""
        o, t = self.check_omega(omega), self.check_theta(theta)
        xa, ya = self._points(x, y)
        with x64():
            return np.asarray(self._compiled("grad_omega")(o, t, xa, ya), dtype=np.float64)

    def grad_theta(self, omega: Any, theta: Any, y: Any) -> np.ndarray:
        """The θ-direction on target samples ``y`` only: float64 of shape ``(n_params,)``.

        :math:`\\lambda \\nabla_\\theta R_Q(ω, θ)` with ``conjugate_step='cycle'``,
        :math:`\\nabla_\\theta W(ω, θ)` with ``'joint'`` (the source term does not depend on θ).
        """
        o, t = self.check_omega(omega), self.check_theta(theta)
        ya = self.check_target(y, "y")
        with x64():
            return np.asarray(self._compiled("grad_theta")(o, t, ya), dtype=np.float64)
