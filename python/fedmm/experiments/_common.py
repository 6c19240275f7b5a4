# SPDX-License-Identifier: BSD-3-Clause
"""Machinery shared by the paper-figure experiments.

Running independent tasks (one seed of one algorithm) serially or in worker
processes behind one progress bar counted in rounds, reading TOML configs,
mean ± one standard deviation over seeds, band plots and a plain-text table.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import queue
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._progress import progress_bar

__all__ = [
    "ExperimentError",
    "read_toml",
    "run_tasks",
    "seed_bands",
    "plot_band",
    "format_table",
]


class ExperimentError(ValueError):
    """A bad experiment option or config entry (reported without a traceback by the CLI)."""


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML config file into a dict, with errors naming the file.

    Raises
    ------
    ExperimentError
        Missing file or invalid TOML.
    """
    import tomllib

    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ExperimentError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"config file {path} is not valid TOML: {exc}") from None


def _worker(fn: Callable, task: Any, ticks: Any) -> Any:
    return fn(task, lambda n=1: ticks.put(n))


def run_tasks(
    fn: Callable[[Any, Callable[[int], None]], Any],
    tasks: Sequence[Any],
    *,
    jobs: int = 1,
    total: int | None = None,
    desc: str = "",
    progress: bool | None = None,
) -> list[Any]:
    """Run ``fn(task, tick)`` for every task; results in task order.

    Parameters
    ----------
    fn : callable(task, tick) -> result
        A module-level function (picklable); it calls ``tick(n)`` after every
        ``n`` units of work (rounds) so the progress bar moves.
    tasks : sequence
        Picklable task descriptions.
    jobs : int
        ``1`` runs in this process; more runs that many worker processes
        (``concurrent.futures.ProcessPoolExecutor``, spawn start method so
        that no thread state of the parent is inherited).
    total : int, optional
        Total number of ticks (the progress bar's length).
    desc : str
        Progress-bar label.
    progress : bool or None
        A tqdm bar on standard error: True on, False off, None (default) on
        only when standard error is a terminal (so log files never get its
        carriage-return updates).
    """
    bar = progress_bar(progress, total=total, desc=desc, unit="round")
    try:
        if jobs <= 1 or len(tasks) <= 1:
            return [fn(task, bar.update) for task in tasks]
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            ticks = manager.Queue()
            with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                futures = [pool.submit(_worker, fn, task, ticks) for task in tasks]
                pending = set(futures)
                while pending:
                    done, pending = concurrent.futures.wait(pending, timeout=0.2)
                    while True:
                        try:
                            bar.update(ticks.get_nowait())
                        except queue.Empty:
                            break
                    for future in done:
                        future.result()  # re-raise a worker's exception now, not at the end
                return [f.result() for f in futures]
    finally:
        bar.close()


def seed_bands(curves: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and one standard deviation over seeds, round by round.

    Parameters
    ----------
    curves : sequence of ndarray of shape (T,)
        One curve per seed (NaN where a round has no value).

    Returns
    -------
    rounds : ndarray of int of shape (T',)
        1-based rounds where at least one seed has a finite value.
    mean, std : ndarray of shape (T',)
        Over the seeds with a finite value at that round (population std).
    """
    values = np.vstack([np.asarray(c, dtype=np.float64) for c in curves])
    finite = np.isfinite(values)
    keep = finite.any(axis=0)
    counts = finite[:, keep].sum(axis=0)
    safe = np.where(finite, values, 0.0)[:, keep]
    mean = safe.sum(axis=0) / counts
    std = np.sqrt(np.where(finite[:, keep], (safe - mean) ** 2, 0.0).sum(axis=0) / counts)
    return np.flatnonzero(keep) + 1, mean, std


def plot_band(ax: Any, curves: Sequence[np.ndarray], *, label: str, color: str | None = None,
              log: bool = False) -> None:
    """Draw the mean over seeds and a shaded ±1 std band on a matplotlib axis."""
    rounds, mean, std = seed_bands(curves)
    line, = ax.plot(rounds, mean, label=label, color=color, lw=1.4)
    low, high = mean - std, mean + std
    if log:
        # A band below zero cannot be drawn on a log axis; clip it at a fraction of the mean.
        low = np.maximum(low, mean * 1e-3)
        ax.set_yscale("log")
    ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.25, lw=0)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
