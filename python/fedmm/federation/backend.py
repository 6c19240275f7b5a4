# SPDX-License-Identifier: BSD-3-Clause
"""Which backend runs a server's rounds in this process: the questions a front end asks a server.

The compiled engine (:mod:`fedmm.federation.compiled`) works on values only; whether a server and its
clients can be turned into those values is the server's answer, through the members
:class:`fedmm.protocols.CompiledRoundsServer` declares.  These two functions put the question to
any server (one without compiled rounds, ``supports_compiled_rounds = False``, answers no).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["compiled_start_statistics", "compiled_unsupported"]


def compiled_unsupported(server: Any, clients: Sequence[Any]) -> str | None:
    """Why the compiled backend cannot run rounds of ``server`` and ``clients``, or None if it can
    (the server's :meth:`~fedmm.protocols.CompiledRoundsServer.compiled_unsupported`)."""
    if not server.supports_compiled_rounds:
        return f"{type(server).__name__} has no compiled rounds (supports_compiled_rounds = False)"
    return server.compiled_unsupported(clients)


def compiled_start_statistics(server: Any, clients: Sequence[Any], theta: Any, n_threads: int = 1,
                              pool: Any = None) -> list[np.ndarray | None] | None:
    """The start exchange's full local statistics of every client at ``theta`` in one compiled call,
    or None, with nothing computed, when :func:`compiled_unsupported` gives a reason (the server's
    :meth:`~fedmm.protocols.CompiledRoundsServer.compiled_start_statistics`)."""
    if not server.supports_compiled_rounds:
        return None
    return server.compiled_start_statistics(clients, theta, n_threads, pool)
