# SPDX-License-Identifier: BSD-3-Clause
"""Hyper-parameter schedules: one type, :class:`Schedule`, for every sequence ``a_k, k = 1, 2, ...``.

The SA step sizes ``γ_t`` of SA-SSMM and FedMM (:class:`StepSchedule`), FedMLS's
local step counts ``T_k`` and prox weights ``λ_k``, the baselines' step sizes
``η_k`` and Scaffnew's communication probabilities ``p_t`` are all schedules;
they differ only in the set their values must lie in (the ``domain``).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from fedmm._validation import MAX_ITERATIONS, check_count, check_in, check_real

__all__ = ["Schedule", "StepSchedule"]

#: Largest value of a ``"count"`` schedule: ``MAX_ITERATIONS = 2**31 − 1``, the bound of every
#: iteration count (:data:`fedmm._validation.MAX_ITERATIONS`).  Counts are step indices that the
#: local loops turn into float64 step sizes (exact far beyond it) and that add up in
#: int64 counters; a larger count is refused with the argument named instead of running
#: for centuries or wrapping a counter.
MAX_COUNT = MAX_ITERATIONS

#: Largest value of a ``"positive"`` schedule (``1e300``): step sizes and prox weights multiply
#: subgradients and iterates, and a larger value overflows float64 in the first local step.
MAX_POSITIVE = 1e300

_DOMAINS = ("positive", "unit", "count")
_NAMED = ("sqrt", "linear", "inverse", "inverse_sqrt")


class Schedule:
    r"""A sequence :math:`a_k`, :math:`k = 1, 2, \dots`, whose values are checked against a domain.

    The index ``k`` is 1-based: an algorithm's 0-based round ``t`` uses
    ``a_{t+1}`` (or, for per-local-step schedules, ``k`` counts local steps).

    Parameters
    ----------
    spec : float, int, str, tuple, callable or Schedule
        - a number ``c``: the constant :math:`a_k = c` (checked here);
        - ``"1/t"``: :math:`a_k = 1/k` (``"1/(t+1)"`` is accepted as an alias:
          it is the same sequence seen from the 0-based round ``t = k − 1``);
        - ``("sqrt", β)``, ``β > 0``: :math:`a_k = β/\sqrt{β + k}` (FedMM paper §6);
        - ``("linear", c)``, ``c > 0``: :math:`a_k = c\,k` (an int when ``c`` is one;
          ``("linear", 1)`` is FedMLS's :math:`T_k = k`);
        - ``("inverse", c)``, ``c > 0``: :math:`a_k = c\,k^{-1}` (FedMLS's :math:`λ_k = λ_0/k`);
        - ``("inverse_sqrt", c)``, ``c > 0``: :math:`a_k = c\,k^{-1/2}`
          (the baselines' :math:`η_k = η_0/\sqrt{k}`, Scaffnew's :math:`p_t = 1/\sqrt{t}`);
        - a callable ``k -> a_k``, each value checked when it is used;
        - a :class:`Schedule`: the same sequence, checked against this ``domain``.
    domain : {"positive", "unit", "count"}
        Where the values must lie: ``"positive"`` :math:`(0, 10^{300}]`, ``"unit"``
        :math:`(0, 1]` (step sizes of a convex combination, probabilities),
        ``"count"`` the integers in ``[1, MAX_COUNT]`` with ``MAX_COUNT = 2**31 - 1`` (an
        integral float from a callable is converted to ``int``).
    name : str
        Argument name used in error messages and descriptions.

    Attributes
    ----------
    spec : object
        ``spec`` as given.
    description : str
        A short, JSON-friendly description (recorded in ``History.config``).

    Raises
    ------
    TypeError, ValueError
        At construction for a malformed ``spec`` or a constant outside
        ``domain``; at evaluation for a value outside ``domain``.

    Examples
    --------
    >>> Schedule(("linear", 1), domain="count", name="local_steps")(3)
    3
    >>> Schedule(("inverse", 2.0), name="prox_weight")(4)
    0.5
    >>> Schedule("1/t", domain="unit")(4)
    0.25
    >>> Schedule(lambda k: 2.0 / k, domain="unit", name="gamma")(1)
    Traceback (most recent call last):
    ...
    ValueError: Expected 'gamma(1)' in (0.0, 1.0], got 2.0
    """

    def __init__(self, spec: Any, *, domain: str = "positive", name: str = "schedule") -> None:
        self.domain = check_in(domain, "domain", _DOMAINS)
        self.name = str(name)
        if isinstance(spec, Schedule):
            spec = spec.spec  # the same rule, checked against this schedule's domain
        self.spec = spec
        self._fn: Callable[[int], Any] | None = None
        self._param: Any = None
        if isinstance(spec, numbers.Real) and not isinstance(spec, bool):
            self._form = "constant"
            self._param = self._check(spec, self.name)
            self.description = repr(self._param)
        elif isinstance(spec, str):
            if spec not in ("1/t", "1/(t+1)"):
                raise ValueError(f"Expected '{self.name}' string to be '1/t', got {spec!r}")
            self._form, self.description = "1/t", "1/t"
        elif isinstance(spec, tuple):
            if len(spec) != 2 or spec[0] not in _NAMED:
                raise ValueError(f"Expected '{self.name}' tuple to be (form, parameter) with form one of "
                                 f"{_NAMED} (e.g. ('sqrt', beta)), got {spec!r}")
            self._form = spec[0]
            label = f"{self.name} beta" if self._form == "sqrt" else f"{self.name} coefficient"
            param = check_real(spec[1], label, low=0.0, low_open=True)
            if self._form == "linear" and isinstance(spec[1], numbers.Integral):
                param = int(spec[1])
            self._param = param
            self.description = (f"sqrt(beta={param!r})" if self._form == "sqrt" else f"{self._form}({param!r})")
        elif callable(spec):
            self._form, self._fn = "callable", spec
            self.description = getattr(spec, "__name__", "callable")
        else:
            raise TypeError(
                f"Expected '{self.name}' to be a number, '1/t', ('sqrt', beta), ('linear', c), ('inverse', c), "
                f"('inverse_sqrt', c), a callable k -> value or a Schedule, got {type(spec).__name__}"
            )

    def _raw(self, k: int) -> Any:
        form = self._form
        if form == "constant":
            return self._param
        if form == "1/t":
            return 1.0 / k
        if form == "sqrt":
            return self._param / math.sqrt(self._param + k)
        if form == "linear":
            return self._param * k
        if form == "inverse":
            return self._param * k ** -1.0
        if form == "inverse_sqrt":
            return self._param * k ** -0.5
        return self._fn(k)

    def _check(self, value: Any, label: str) -> Any:
        # fast paths (per local step on hot loops); anything else goes through the checks with messages
        if self.domain == "count":
            if type(value) is int and 1 <= value <= MAX_COUNT:
                return value
        elif isinstance(value, float) and 0.0 < value and (value <= 1.0 if self.domain == "unit"
                                                           else value <= MAX_POSITIVE):
            return float(value)
        if self.domain == "count":
            if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)) \
                    and math.isfinite(value) and float(value).is_integer():
                value = int(value)
            return check_count(value, label, low=1)
        if self.domain == "unit":
            return check_real(value, label, low=0.0, high=1.0, low_open=True)
        return check_real(value, label, low=0.0, high=MAX_POSITIVE, low_open=True)

    def _label(self, k: int) -> str:
        return f"{self.name}({k})"

    def __call__(self, k: int) -> Any:
        """:math:`a_k` for ``k ≥ 1``, checked against the domain (``int`` for ``"count"``, else ``float``)."""
        if self._form == "constant":
            return self._param
        return self._check(self._raw(k), self._label(k))

    def __repr__(self) -> str:
        return f"Schedule({self.description}, domain={self.domain!r})"


class StepSchedule(Schedule):
    r"""The SA step sizes :math:`γ_t \in (0, 1]`, :math:`t = 1, 2, \dots` (a :class:`Schedule` with ``domain="unit"``).

    Round ``t`` (0-based) of an algorithm uses ``γ_{t+1}``.

    Parameters
    ----------
    step : float, str, tuple, callable or Schedule
        - a float in ``(0, 1]``: constant ``γ_t = step``;
        - ``"1/t"``: ``γ_t = 1/t`` (so ``Ŝ_t`` of SA-SSMM is the running mean
          of the oracles, FedMM paper §2.2);
        - ``("sqrt", β)`` with ``β > 0``: ``γ_t = β/√(β + t)`` (FedMM paper §6);
        - any other form of :class:`Schedule`, or a callable ``t -> γ_t``
          (``t ≥ 1``); each value is checked when used.

    Examples
    --------
    >>> StepSchedule("1/t")(3)
    0.3333333333333333
    >>> StepSchedule(("sqrt", 0.05))(1) == 0.05 / (1.05 ** 0.5)
    True
    """

    def __init__(self, step: Any) -> None:
        super().__init__(step, domain="unit", name="step")

    def _label(self, k: int) -> str:
        return f"gamma_{k}"

    def __repr__(self) -> str:
        return f"StepSchedule({self.description})"
