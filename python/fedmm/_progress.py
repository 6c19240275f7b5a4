# SPDX-License-Identifier: BSD-3-Clause
"""One rule for progress bars everywhere (library API and command line).

``progress=None`` (the default everywhere) means *automatic*: a bar is shown
only when standard error is a terminal, so logs and redirected output never
receive tqdm's carriage-return updates; ``True`` forces the bar on (still on
standard error), ``False`` turns it off.
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_enabled", "progress_bar"]


def progress_enabled(progress: bool | None, stream: Any = None) -> bool:
    """Whether to show a progress bar.

    Parameters
    ----------
    progress : bool or None
        ``True`` on, ``False`` off, ``None`` on exactly when ``stream`` is a terminal.
    stream : file-like, optional
        Where the bar would be written (default ``sys.stderr`` at call time).

    Returns
    -------
    bool

    Raises
    ------
    TypeError
        ``progress`` is not a bool or None.
    """
    if progress is None:
        stream = sys.stderr if stream is None else stream
        isatty = getattr(stream, "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (ValueError, OSError):  # a closed or detached stream is no terminal
            return False
    if not isinstance(progress, bool):
        raise TypeError(f"Expected 'progress' to be True, False or None (automatic), got {progress!r}")
    return progress


def progress_bar(progress: bool | None, *, total: int | None, desc: str = "", unit: str = "round",
                 initial: int = 0) -> Any:
    """A tqdm bar on ``sys.stderr``, disabled unless :func:`progress_enabled` says otherwise.

    The returned object always supports ``update(n)`` and ``close()`` (a
    disabled tqdm bar writes nothing).

    Parameters
    ----------
    progress : bool or None
        See :func:`progress_enabled`.
    total : int or None
        Length of the bar (in ``unit``).
    desc : str
        Label.
    unit : str
        What one step counts.
    initial : int
        Steps already done (a resumed run).
    """
    from tqdm import tqdm

    enabled = progress_enabled(progress, sys.stderr)
    return tqdm(total=total, initial=initial, desc=desc or None, unit=unit, file=sys.stderr,
                disable=not enabled, dynamic_ncols=True, leave=True)
