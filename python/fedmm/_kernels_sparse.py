# SPDX-License-Identifier: BSD-3-Clause
"""Sparse coding and surrogate-space linear algebra kernels (re-exported by ``fedmm.kernels``).

Each family validates its arguments here and calls a private extension
module (``fedmm._<family>``) that runs the C kernel without the GIL.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np

from fedmm._validation import as_array, check_bool, check_count, check_in, check_real

__all__: list[str] = []

# ---- sparse coding and surrogate-space linear algebra ------------------------
from fedmm import _linalg, _sparse  # noqa: E402

__all__ += [
    "ConvergenceWarning",  # noqa: F822 (module __getattr__: built on first lookup)
    "convergence_warning_class",
    "lasso",
    "lasso_gram",
    "dictionary_statistics",
    "dictionary_update",
    "warn_unconverged",
    "fused_dictionary_statistics",
    "dictionary_update_ridge_flat",
    "dictionary_sa_step",
]


_FLOAT64 = np.dtype(np.float64)


_CONVERGENCE_WARNING: type[Warning] | None = None
_CONVERGENCE_WARNING_LOCK = threading.Lock()


def convergence_warning_class() -> type[Warning]:
    """fedmm's ``ConvergenceWarning``: a subclass of :class:`sklearn.exceptions.ConvergenceWarning`.

    An iterative kernel stopped at ``max_iter`` before reaching ``tol``.  Being
    scikit-learn's subclass (hence a ``UserWarning``), a filter on
    scikit-learn's class, e.g. ``warnings.simplefilter("ignore",
    sklearn.exceptions.ConvergenceWarning)``, applies to fedmm's too.  The
    class is built on first use (the first warning, or the first lookup of
    ``fedmm.kernels.ConvergenceWarning``): importing scikit-learn costs about
    a second, four times ``import fedmm``, which code that never needs the
    class does not pay.  Every use gets the same class object.
    """
    global _CONVERGENCE_WARNING
    with _CONVERGENCE_WARNING_LOCK:
        if _CONVERGENCE_WARNING is None:
            from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning

            _CONVERGENCE_WARNING = type("ConvergenceWarning", (SklearnConvergenceWarning,), {
                "__doc__": "An iterative kernel stopped at ``max_iter`` before reaching ``tol`` "
                           "(a subclass of :class:`sklearn.exceptions.ConvergenceWarning`).",
                "__module__": "fedmm.kernels", "__qualname__": "ConvergenceWarning"})
        return _CONVERGENCE_WARNING


def __getattr__(name: str) -> Any:
    if name == "ConvergenceWarning":
        return convergence_warning_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _as_fortran_matrix(x: Any, name: str, *, check_finite: bool = True) -> np.ndarray:
    """float64 2-D, F-contiguous; F-ordered float64 input is not copied.

    ``check_finite=False`` leaves the check to the kernel (signals: the C code
    rejects a column whose squared norm is not finite, without a pass here).
    """
    if type(x) is np.ndarray and x.dtype is _FLOAT64 and x.ndim == 2:
        arr = x if x.flags.f_contiguous else np.asfortranarray(x)
        if check_finite and not np.isfinite(arr).all():
            raise ValueError(f"Expected '{name}' to contain only finite values (no NaN or inf)")
        return arr
    return np.asfortranarray(as_array(x, name, ndim=2, finite=check_finite))


def _dictionary_and_signals(D: Any, Z: Any) -> tuple[np.ndarray, np.ndarray]:
    D = _as_fortran_matrix(D, "D")
    Z = _as_fortran_matrix(Z, "Z", check_finite=False)
    if Z.shape[0] != D.shape[0]:
        raise ValueError(
            f"Expected 'Z' of shape (p, b) with p == D.shape[0], got {D.shape=}, {Z.shape=}"
        )
    return D, Z


#: Messages of the statuses of ``_linalg.check_gram``.
_GRAM_PROBLEMS = {
    1: "Expected 'G' to contain only finite values (no NaN or inf)",
    2: "Expected 'G' to be symmetric (a Gram matrix D^T D)",
    3: "Expected 'G' to be positive semidefinite (a Gram matrix D^T D), got a negative diagonal entry",
    4: "Expected 'C' to contain only finite values (no NaN or inf)",
}


def _lasso_options(
    lam: Any, tol: Any, max_iter: Any, method: Any
) -> tuple[float, float, int, int]:
    lam = check_real(lam, "lam", low=0.0, low_open=True)
    tol = check_real(tol, "tol", low=0.0)
    max_iter = check_count(max_iter, "max_iter", low=1)
    method = check_in(method, "method", tuple(_sparse.METHODS))
    return lam, tol, max_iter, _sparse.METHODS[method]


def _check_codes(H0: Any, K: int, b: int) -> np.ndarray | None:
    if H0 is None:
        return None
    H0 = as_array(H0, "H0", ndim=2)
    if H0.shape != (K, b):
        raise ValueError(f"Expected 'H0' of shape (K, b) = ({K}, {b}), got {H0.shape}")
    return H0


def warn_unconverged(n_bad: int, total: int, what: str, max_iter: int) -> None:
    """Warn (:class:`ConvergenceWarning`) when ``n_bad`` of ``total`` LASSO columns hit ``max_iter``.

    The one message of every LASSO-based kernel and of its callers in
    ``fedmm.models`` and ``fedmm.algorithms`` (the solver returns the count;
    the warning is raised with the GIL held, two frames above this call).

    Parameters
    ----------
    n_bad : int
        Columns whose duality gap did not meet ``tol`` (nothing happens when 0).
    total : int
        Columns solved.
    what : str
        The kernel's name, first word of the message.
    max_iter : int
        The iteration cap that was reached.
    """
    if n_bad:
        warnings.warn(
            f"{what}: {n_bad} of {total} columns reached max_iter={max_iter} before the "
            "duality gap met tol; increase max_iter or tol",
            convergence_warning_class(),
            stacklevel=3,
        )


def lasso(
    D: Any,
    Z: Any,
    lam: float,
    *,
    H0: Any = None,
    tol: float = 1e-9,
    max_iter: int = 1000,
    positive: bool = False,
    method: str = "auto",
    return_n_iter: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""Solve one LASSO per column of ``Z`` on the dictionary ``D``.

    .. math::

        H = \operatorname{argmin}_{H} \tfrac12 \|Z - D H\|_F^2 + \lambda \|H\|_1,

    i.e. :math:`h_j = \operatorname{argmin}_h \tfrac12\|z_j - D h\|^2 + \lambda\|h\|_1`
    for every column (FedMM paper eq. (16) with the 1/2 convention of eq. (28)).
    The Gram matrix :math:`G = D^\top D` and :math:`C = D^\top Z` are formed
    with BLAS-3; each column is solved on :math:`G` by an active-set
    (feature-sign) search and/or coordinate descent with Newton steps on the
    support (``method``), and stops when its duality gap is at most
    ``tol`` :math:`\cdot \tfrac12\|z_j\|^2`.  Both solvers end on the exact
    solution of the support's linear system, so the KKT conditions
    :math:`|d_k^\top(z_j - D h_j)| \le \lambda`, with equality and the sign
    of :math:`h_{kj}` on the support, hold to rounding error (about 1e-12
    relative) in practice, well below what ``tol`` alone guarantees.

    Parameters
    ----------
    D : array_like of shape (p, K)
        Dictionary, one atom per column.  Zero and duplicated atoms and
        ``K > p`` are allowed.
    Z : array_like of shape (p, b)
        Signals, one per column.  F-ordered float64 input (e.g.
        ``data[idx].T`` for C-ordered ``data`` of shape (N, p)) is used
        without a copy; any other layout or dtype is converted once.
    lam : float
        Penalty :math:`\lambda > 0`.
    H0 : array_like of shape (K, b), optional
        Warm start (negative entries are clipped when ``positive``).
    tol : float, default 1e-9
        Relative duality-gap tolerance (floored at 2.2e-13, the accuracy to
        which the gap can be evaluated).
    max_iter : int, default 1000
        Maximum number of iterations (coordinate sweeps plus active-set
        steps, each at most about :math:`K^2 + 4K` multiply-adds) per
        column, at most 2**31 − 1; columns that reach it raise a
        :class:`ConvergenceWarning`.  A long solve (``tol=0`` with a large
        ``max_iter`` can run for hours) stops on Ctrl-C: called from the
        main thread, the kernel checks for signals every 2**22
        multiply-adds (a few milliseconds) and a handler's exception (the
        default ``KeyboardInterrupt``) propagates.  The check only observes:
        results are the same bit for bit.  Calls from other threads are not
        checked (Python runs signal handlers in the main thread only).
    positive : bool, default False
        Constrain :math:`H \ge 0` (non-negative LASSO).
    method : {"auto", "cd", "active_set", "homotopy"}, default "auto"
        ``"cd"``: cyclic coordinate descent on :math:`G` with a Newton step
        on a stable support; ``"active_set"``: feature-sign active-set search
        (Lee et al. 2007), exact after finitely many steps, handing over to
        ``"cd"`` if its support matrix becomes singular; ``"homotopy"``: the
        LARS-lasso path (Osborne et al. 2000, Efron et al. 2004) from
        :math:`h = 0` at :math:`\lambda_0 = \|D^\top z\|_\infty` down to
        :math:`\lambda`, piecewise linear in :math:`\lambda`: on the active
        set :math:`A` with signs :math:`s_A`,
        :math:`h_A(t) = G_{AA}^{-1}(c_A - t\, s_A)` until an atom's
        correlation reaches :math:`t` (it joins) or a coefficient reaches 0
        (it leaves), with Cholesky up- and downdates of :math:`G_{AA}` and a
        final exact solve at :math:`\lambda`; a nonzero warm start, a
        numerically dependent atom (duplicates) or a failed final KKT/gap check
        hands the column to ``"active_set"``.  ``"auto"`` runs the
        active set while the support has at most min(24, max(4, K/2)) atoms and
        continues with ``"cd"`` beyond (dense codes), except when
        :math:`2K > p` (nearly square ``D``, where ``"cd"`` crawls) where the
        active set runs alone, and :math:`K > p` (overcomplete ``D``, large
        supports) where it runs the homotopy; :func:`lasso_gram` (p unknown)
        always uses the first rule, so pass ``method="homotopy"`` for an
        overcomplete Gram matrix.  Measured in ``benchmarks/bench_sparse.py``.
    return_n_iter : bool, default False
        Also return the number of iterations used per column.

    Returns
    -------
    H : ndarray of shape (K, b), float64, F-ordered
        The codes.
    n_iter : ndarray of shape (b,), int
        Iterations per column (only when ``return_n_iter``).

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import lasso
    >>> D = np.array([[1.0, 0.0], [0.0, 2.0]])
    >>> Z = np.array([[3.0], [2.0]])
    >>> lasso(D, Z, 1.0)  # h_1 = 3 - 1, h_2 = (2*2 - 1) / 4
    array([[2.  ],
           [0.75]])
    """
    lam, tol, max_iter, method_code = _lasso_options(lam, tol, max_iter, method)
    D, Z = _dictionary_and_signals(D, Z)
    H0 = _check_codes(H0, D.shape[1], Z.shape[1])
    offsets = np.array([0, Z.shape[1]], dtype=np.int64)
    _, _, H, _, n_iter, n_bad = _sparse.dictionary_statistics(
        D, Z, lam, check_bool(positive, "positive"), tol, max_iter, H0, offsets, False, False, method_code
    )
    warn_unconverged(n_bad, Z.shape[1], "lasso", max_iter)
    return (H, n_iter) if check_bool(return_n_iter, "return_n_iter") else H


def lasso_gram(
    G: Any,
    C: Any,
    lam: float,
    *,
    H0: Any = None,
    tol: float = 1e-9,
    max_iter: int = 1000,
    positive: bool = False,
    znorm2: Any = None,
    method: str = "auto",
    return_n_iter: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""Solve the LASSO of :func:`lasso` from its Gram form.

    .. math::

        h_j = \operatorname{argmin}_h \tfrac12 h^\top G h - c_j^\top h + \lambda\|h\|_1,
        \qquad G = D^\top D,\; C = D^\top Z.

    Parameters
    ----------
    G : array_like of shape (K, K)
        Symmetric positive semidefinite Gram matrix (symmetry is checked).
    C : array_like of shape (K, b)
        Correlations :math:`D^\top Z`, one column per signal.
    lam : float
        Penalty :math:`\lambda > 0`.
    H0, tol, max_iter, positive, method, return_n_iter
        As in :func:`lasso`.
    znorm2 : array_like of shape (b,), optional
        :math:`\|z_j\|^2`.  With it the stopping rule is the exact duality gap
        relative to :math:`\tfrac12\|z_j\|^2`; without it a certified upper
        bound of that ratio computed from ``G`` and ``C`` alone is used
        (never looser, sometimes a few sweeps more).

    Returns
    -------
    H : ndarray of shape (K, b)
    n_iter : ndarray of shape (b,), only when ``return_n_iter``

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import lasso_gram
    >>> lasso_gram(np.eye(2), np.array([[3.0], [-0.5]]), 1.0)
    array([[2.],
           [0.]])
    """
    lam, tol, max_iter, method_code = _lasso_options(lam, tol, max_iter, method)
    # finiteness, symmetry and the diagonal are checked in one GIL-free pass below (_linalg.check_gram),
    # not by NumPy temporaries, which cost a third of a b = 50 call
    G = _as_fortran_matrix(G, "G", check_finite=False)
    C = _as_fortran_matrix(C, "C", check_finite=False)
    K = G.shape[0]
    if G.shape != (K, K):
        raise ValueError(f"Expected 'G' to be square (K, K), got shape {G.shape}")
    if C.shape[0] != K:
        raise ValueError(f"Expected 'C' of shape (K, b) with K == G.shape[0], got {G.shape=}, {C.shape=}")
    problem = _linalg.check_gram(G, C)
    if problem:
        raise ValueError(_GRAM_PROBLEMS[problem])
    H0 = _check_codes(H0, K, C.shape[1])
    if znorm2 is not None:
        znorm2 = as_array(znorm2, "znorm2", ndim=1)
        if znorm2.shape != (C.shape[1],):
            raise ValueError(f"Expected 'znorm2' of shape ({C.shape[1]},), got {znorm2.shape}")
        if (znorm2 < 0).any():
            raise ValueError("Expected 'znorm2' to be nonnegative (squared norms)")
    H, n_iter, n_bad = _sparse.lasso_gram(
        G, C, lam, check_bool(positive, "positive"), tol, max_iter, H0, znorm2, method_code
    )
    warn_unconverged(n_bad, C.shape[1], "lasso_gram", max_iter)
    return (H, n_iter) if check_bool(return_n_iter, "return_n_iter") else H


def dictionary_statistics(
    D: Any,
    Z: Any,
    lam: float,
    *,
    segments: Any = None,
    H0: Any = None,
    tol: float = 1e-9,
    max_iter: int = 1000,
    positive: bool = False,
    method: str = "auto",
    return_codes: bool = False,
    return_objective: bool = False,
) -> tuple[np.ndarray, ...]:
    r"""Dictionary-learning statistics fused with the LASSO solve (FedMM eq. (18)).

    With :math:`H = ` :func:`lasso` ``(D, Z, lam)``,

    .. math::

        A = \frac1b H H^\top \in \mathbb{R}^{K\times K}, \qquad
        B = \frac1b Z H^\top \in \mathbb{R}^{p\times K},

    the mean of :math:`\bar S(z, D) = (h h^\top, z h^\top)` over the columns.

    Parameters
    ----------
    D : array_like of shape (p, K)
        Dictionary :math:`\theta`.
    Z : array_like of shape (p, b)
        Signals, one per column (F-ordered float64 is used without a copy,
        e.g. ``data[idx].T``; other layouts are converted once).
    lam : float
        Penalty :math:`\lambda > 0`.
    segments : array_like of int, shape (m + 1,), optional
        Offsets of ``m`` consecutive column segments (``segments[0] == 0``,
        nondecreasing, ``segments[-1] == b``), e.g. several clients'
        minibatches.  Each segment's statistics are normalized by its own
        length (an empty segment gives zeros) and are bit-for-bit equal to a
        separate call on that segment.
    H0, tol, max_iter, positive, method
        As in :func:`lasso`.
    return_codes : bool, default False
        Also return ``H`` (K, b).
    return_objective : bool, default False
        Also return the per-column objective
        :math:`\tfrac12\|z_j - D h_j\|^2 + \lambda\|h_j\|_1` (shape (b,)),
        computed from the explicit residual.

    Returns
    -------
    A : ndarray of shape (K, K), or (m, K, K) with ``segments``
        Symmetric.
    B : ndarray of shape (p, K), or (m, p, K) with ``segments``
    H : ndarray of shape (K, b), only when ``return_codes``
    objective : ndarray of shape (b,), only when ``return_objective``

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import dictionary_statistics
    >>> D = np.eye(2)
    >>> Z = np.array([[3.0, 0.0], [0.0, -2.0]])
    >>> A, B = dictionary_statistics(D, Z, 1.0)  # H = [[2, 0], [0, -1]]
    >>> A
    array([[2. , 0. ],
           [0. , 0.5]])
    >>> B
    array([[3., 0.],
           [0., 1.]])
    """
    lam, tol, max_iter, method_code = _lasso_options(lam, tol, max_iter, method)
    D, Z = _dictionary_and_signals(D, Z)
    p, K = D.shape
    b = Z.shape[1]
    H0 = _check_codes(H0, K, b)
    if segments is None:
        offsets = np.array([0, b], dtype=np.int64)
    else:
        seg = np.asarray(segments)
        if seg.ndim != 1 or seg.size < 1 or not (
            np.issubdtype(seg.dtype, np.integer) or seg.size == 0
        ):
            raise ValueError(
                f"Expected 'segments' to be a 1-D integer array of offsets, got dtype {seg.dtype}, "
                f"shape {seg.shape}"
            )
        offsets = np.ascontiguousarray(seg, dtype=np.int64)
        if offsets[0] != 0 or offsets[-1] != b or (np.diff(offsets) < 0).any():
            raise ValueError(
                f"Expected 'segments' nondecreasing from 0 to b={b}, got {offsets.tolist()}"
            )
    A, B, H, obj, _, n_bad = _sparse.dictionary_statistics(
        D, Z, lam, check_bool(positive, "positive"), tol, max_iter, H0, offsets, True,
        check_bool(return_objective, "return_objective"),
        method_code,
    )
    warn_unconverged(n_bad, b, "dictionary_statistics", max_iter)
    if segments is None:
        A, B = A[0], B[0]
    out: tuple[np.ndarray, ...] = (A, B)
    if check_bool(return_codes, "return_codes"):
        out += (H,)
    if return_objective:
        out += (obj,)
    return out


def dictionary_update(
    A: Any,
    B: Any,
    D0: Any = None,
    *,
    constraint: str | None = "ridge",
    ridge: float = 0.0,
    tol: float = 1e-10,
    max_iter: int = 500,
) -> np.ndarray:
    r"""The map :math:`T` of the dictionary-learning model (FedMM eq. (17), (28)).

    Minimizes the surrogate

    .. math::

        U(D) = \tfrac12 \operatorname{tr}(D^\top D A) - \operatorname{tr}(D^\top B)
               + \eta \|D\|_F^2 .

    * ``constraint="ridge"`` (or None): no constraint, the closed form
      :math:`D = B (A + 2\eta I)^{-1}` by a Cholesky solve.
    * ``constraint="unit_norm"``: columns constrained to
      :math:`\|d_k\| \le 1`; block-coordinate descent on the columns
      (Mairal et al. 2010, Alg. 2) warm-started from ``D0``,
      :math:`d_k \leftarrow u / \max(1, \|u\|)`,
      :math:`u = (b_k - \sum_{j\ne k} d_j A_{jk}) / (A_{kk} + 2\eta)`, swept
      until the largest column step :math:`\max_k\|\Delta d_k\|` is
      :math:`\le` ``tol``.  An unused atom (:math:`A_{kk} + 2\eta = 0`)
      becomes :math:`v/\|v\|` when its linear term :math:`v` is nonzero and is
      kept otherwise.  Each column step minimizes :math:`U` exactly, so
      :math:`U` decreases monotonically.

    Parameters
    ----------
    A : array_like of shape (K, K)
        First statistic block (symmetric positive semidefinite, e.g. after
        :func:`project_psd`); symmetrized here.
    B : array_like of shape (p, K)
        Second statistic block.
    D0 : array_like of shape (p, K), optional
        Warm start for ``"unit_norm"`` (default: the columns of ``B``
        normalized); ignored by ``"ridge"``.
    constraint : {"ridge", None, "unit_norm"}
    ridge : float, default 0.0
        Ridge weight :math:`\eta \ge 0` of :math:`g(D) = \eta\|D\|_F^2` (the paper's
        :math:`\eta`, :class:`fedmm.models.DictionaryLearning`'s ``ridge``).
    tol : float, default 1e-10
        Column-step tolerance of ``"unit_norm"``.
    max_iter : int, default 500
        Sweep limit of ``"unit_norm"`` (:class:`ConvergenceWarning` when hit).

    Returns
    -------
    D : ndarray of shape (p, K), float64, F-ordered

    Raises
    ------
    numpy.linalg.LinAlgError
        ``"ridge"`` with :math:`A + 2\eta I` not positive definite.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.kernels import dictionary_update
    >>> dictionary_update(np.eye(2), np.array([[1.0, 2.0]]), ridge=0.5)
    array([[0.5, 1. ]])
    """
    constraint = check_in(constraint, "constraint", ("ridge", None, "unit_norm"))
    ridge = check_real(ridge, "ridge", low=0.0)
    A = as_array(A, "A", ndim=2)
    B = _as_fortran_matrix(B, "B")
    p, K = B.shape
    if A.shape != (K, K):
        raise ValueError(f"Expected 'A' of shape (K, K) = ({K}, {K}) for B of shape {B.shape}, got {A.shape}")
    A = np.asfortranarray(0.5 * (A + A.T))
    # every argument is checked whatever the constraint (the ridge update reads neither D0 nor tol/max_iter)
    tol = check_real(tol, "tol", low=0.0)
    max_iter = check_count(max_iter, "max_iter", low=1)
    if D0 is not None:
        D0 = as_array(D0, "D0", ndim=2)
        if D0.shape != (p, K):
            raise ValueError(f"Expected 'D0' of shape (p, K) = ({p}, {K}), got {D0.shape}")
    if constraint in ("ridge", None):
        return _linalg.dictionary_update_ridge(A, B, ridge)
    if D0 is None:
        norms = np.linalg.norm(B, axis=0)
        D0 = B / np.where(norms > 0, norms, 1.0)
    D, n_iter, converged = _linalg.dictionary_update_unit_norm(A, B, D0, ridge, tol, max_iter)
    if not converged:
        warnings.warn(
            f"dictionary_update: unit_norm block-coordinate descent reached max_iter={max_iter} "
            f"with column steps above tol={tol}",
            convergence_warning_class(),
            stacklevel=2,
        )
    return D


# ---- the dictionary model's per-round faces: operands already in the kernels' layout ----
def fused_dictionary_statistics(D: np.ndarray, Z: np.ndarray, lam: float, segments: np.ndarray,
                                H0: np.ndarray | None = None, *, tol: float = 1e-9,
                                max_iter: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per-segment dictionary statistics of the LASSO codes, for operands already in the kernel's layout.

    The hot path of :class:`fedmm.models.DictionaryLearning` (one call per
    round for every client): the numbers of :func:`dictionary_statistics`
    with ``segments``, ``H0``, ``return_codes=True``, without converting or
    copying the operands and without the :class:`ConvergenceWarning`: the
    count of unconverged columns is returned for the caller to report
    (:func:`warn_unconverged`).

    Parameters
    ----------
    D : ndarray of shape (p, K), float64, Fortran-ordered
        The dictionary (finite, as checked by the caller).
    Z : ndarray of shape (p, b), float64, Fortran-ordered
        The signals, one per column.
    lam : float > 0
    segments : ndarray of shape (m + 1,), int64, contiguous
        Column offsets, nondecreasing from 0 to ``b`` (checked by the kernel).
    H0 : ndarray of shape (K, b), optional
        Warm-start codes.
    tol : float
    max_iter : int >= 1

    Returns
    -------
    A : ndarray of shape (m, K, K)
    B : ndarray of shape (m, p, K)
    H : ndarray of shape (K, b), Fortran-ordered
        The codes.
    n_unconverged : int
        Columns that reached ``max_iter``.

    Raises
    ------
    ValueError
        Operands of the wrong dtype, layout or shape, bad segments, or
        non-finite signals.
    """
    A, B, H, _, _, n_bad = _sparse.dictionary_statistics(D, Z, lam, False, tol, max_iter, H0, segments, True,
                                                         False, _sparse.METHODS["auto"])
    return A, B, H, n_bad


def dictionary_update_ridge_flat(s: np.ndarray, n_components: int, n_features: int, ridge: float) -> np.ndarray:
    """The ridge dictionary update ``T(s) = B (sym(A) + 2ηI)⁻¹`` of a flat statistic ``s = [vec(A), vec(B)]``.

    The numbers of ``dictionary_update(sym(A), B, ridge=ridge)`` (:func:`dictionary_update`)
    read straight from the flat statistic (C order): the server's per-round
    ``T`` of :class:`fedmm.models.DictionaryLearning`.

    Parameters
    ----------
    s : ndarray of shape (K*K + p*K,), float64, contiguous
    n_components : int
        ``K``.
    n_features : int
        ``p``.
    ridge : float >= 0
        ``η``.

    Returns
    -------
    ndarray of shape (p, K), float64, Fortran-ordered

    Raises
    ------
    ValueError
        ``s`` of another length.
    numpy.linalg.LinAlgError
        ``sym(A) + 2ηI`` not positive definite.
    """
    return _linalg.dictionary_update_ridge_flat(s, n_components, n_features, ridge)


def dictionary_sa_step(S: np.ndarray, H: np.ndarray, gamma: float, n_components: int, n_features: int,
                       ridge: float, project: bool) -> tuple[np.ndarray, np.ndarray]:
    """The server's stochastic-approximation step of the ridge dictionary model in one compiled call.

    ``S_new = Π(S + γH)`` (``Π`` the projection onto ``𝕄_K⁺ × ℝ^{p×K}`` when
    ``project``, else the identity) and ``D = T(S_new)`` as
    :func:`dictionary_update_ridge_flat`.

    Parameters
    ----------
    S, H : ndarray of shape (K*K + p*K,), float64, contiguous
    gamma : float
    n_components, n_features : int
        ``K`` and ``p``.
    ridge : float >= 0
        ``η``.
    project : bool

    Returns
    -------
    S_new : ndarray of shape (K*K + p*K,), float64
    D : ndarray of shape (p, K), float64, Fortran-ordered

    Raises
    ------
    ValueError
        Statistics of another length, or ``S + γH`` not finite.
    numpy.linalg.LinAlgError
        The eigensolver failed or ``sym(A) + 2ηI`` is not positive definite.
    """
    return _linalg.dictionary_sa_step(S, H, gamma, n_components, n_features, ridge, project)
