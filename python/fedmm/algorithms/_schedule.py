# SPDX-License-Identifier: BSD-3-Clause
"""Step-size schedules ``{γ_t, t ≥ 1}`` of the stochastic-approximation updates."""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from fedmm._validation import check_real

__all__ = ["StepSchedule"]


class StepSchedule:
    """A ``(0, 1]``-valued step sequence ``γ_t``, ``t = 1, 2, ...``.

    Round ``t`` (0-based) of an algorithm uses ``γ_{t+1}``.

    Parameters
    ----------
    step : float, str, tuple or callable
        - a float in ``(0, 1]``: constant ``γ_t = step``;
        - ``"1/t"``: ``γ_t = 1/t`` (so ``Ŝ_t`` of SA-SSMM is the running mean
          of the oracles, FedMM paper §2.2);
        - ``("sqrt", β)`` with ``β > 0``: ``γ_t = β/√(β + t)`` (FedMM paper §6);
        - a callable ``t -> γ_t`` (``t ≥ 1``); each value is checked when used.

    Examples
    --------
    >>> StepSchedule("1/t")(3)
    0.3333333333333333
    >>> StepSchedule(("sqrt", 0.05))(1) == 0.05 / (1.05 ** 0.5)
    True
    """

    def __init__(self, step: Any) -> None:
        self.spec = step
        self._fn: Callable[[int], float]
        if isinstance(step, numbers.Real) and not isinstance(step, bool):
            value = check_real(step, "step", low=0.0, high=1.0, low_open=True)
            self._fn = lambda t: value
            self.description = repr(value)
        elif isinstance(step, str):
            if step not in ("1/t", "1/(t+1)"):
                raise ValueError(f"Expected 'step' string to be '1/t', got {step!r}")
            self._fn = lambda t: 1.0 / t
            self.description = "1/t"
        elif isinstance(step, tuple):
            if len(step) != 2 or step[0] != "sqrt":
                raise ValueError(f"Expected 'step' tuple ('sqrt', beta), got {step!r}")
            beta = check_real(step[1], "step beta", low=0.0, low_open=True)
            self._fn = lambda t: beta / math.sqrt(beta + t)
            self.description = f"sqrt(beta={beta!r})"
        elif callable(step):
            self._fn = step
            self.description = getattr(step, "__name__", "callable")
        else:
            raise TypeError(
                "Expected 'step' to be a float in (0, 1], '1/t', ('sqrt', beta) or a callable t -> gamma_t, "
                f"got {type(step).__name__}"
            )

    def __call__(self, t: int) -> float:
        """``γ_t`` for ``t ≥ 1``; raises ``ValueError`` outside ``(0, 1]``."""
        value = self._fn(t)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"Expected the step schedule to return a real number at t={t}, got {value!r}")
        value = float(value)
        if not (0.0 < value <= 1.0):
            raise ValueError(f"Expected step gamma_{t} in (0, 1], got {value}")
        return value

    def __repr__(self) -> str:
        return f"StepSchedule({self.description})"
