# SPDX-License-Identifier: BSD-3-Clause
"""When a monitored quantity (the objective, ``E_sp``, ...) is evaluated: :class:`Cadence`."""
from __future__ import annotations

from fedmm._validation import check_count, check_int

__all__ = ["Cadence"]


class Cadence:
    r"""The rounds at which a monitored quantity is due: every ``every`` rounds and at the last round.

    Round ``t`` (0-based) of an ``n_rounds``-round run is due when
    ``every > 0`` and (:math:`(t + 1) \bmod \text{every} = 0` or
    :math:`t = n_\text{rounds} − 1`); ``every = 0`` means never.

    Parameters
    ----------
    every : int >= 0
        The cadence in rounds (``evaluate_every`` of the algorithms' ``run``).
    n_rounds : int >= 0
        Rounds of the run (its last round is always due when ``every > 0``).
    name : str
        Argument name used in error messages.

    Examples
    --------
    >>> c = Cadence(3, 8)
    >>> [t for t in range(8) if c.due(t)]
    [2, 5, 7]
    >>> bool(Cadence(0, 8)), Cadence(0, 8).due(7)
    (False, False)
    """

    __slots__ = ("every", "n_rounds")

    def __init__(self, every: int, n_rounds: int, *, name: str = "evaluate_every") -> None:
        self.every = check_int(every, name, low=0)
        self.n_rounds = check_count(n_rounds, "n_rounds", low=0)

    def due(self, t: int) -> bool:
        """Whether round ``t`` (0-based) is due."""
        return bool(self.every) and ((t + 1) % self.every == 0 or t == self.n_rounds - 1)

    def __bool__(self) -> bool:
        """False when the quantity is never evaluated (``every == 0``)."""
        return self.every > 0

    def __repr__(self) -> str:
        return f"Cadence(every={self.every}, n_rounds={self.n_rounds})"
