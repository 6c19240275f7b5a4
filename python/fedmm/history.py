# SPDX-License-Identifier: BSD-3-Clause
"""Per-round record of a run (:class:`History`), saved to and loaded from JSON."""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any, Iterable

import numpy as np

__all__ = ["History", "RunSet", "load"]

_FORMAT = "fedmm-history"
_FORMAT_VERSION = 1


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    return value


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.asarray(value["__ndarray__"], dtype=value["dtype"]).reshape(value["shape"])
        if "__float__" in value:
            return float(value["__float__"])
        return {k: _from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value


class History:
    """Per-round record of a federated run.

    Each round appends one record: a dict of scalars (``objective``, ``E_s``,
    ``E_ps``, ``E_p``, ``E_sp``, ``bytes_up``, ``bytes_down``, ``wall_time``,
    ...) and small lists (``active`` client indices, ``dropped`` clients).
    Names of the monitoring quantities follow the FedMM paper §6:

    - ``E_s``  = ``‖Ŝ_{t+1} − Ŝ_t‖² / γ²_{t+1}`` (surrogate-space update size),
    - ``E_ps`` = ``‖T(Ŝ_{t+1}) − T(Ŝ_t)‖² / γ²_{t+1}`` (its parameter image),
    - ``E_p``  = ``‖θ_{t+1} − θ_t‖² / γ²_{t+1}`` (Θ-space baseline),
    - ``E_sp`` = the surrogate-space image of the baseline's update.

    Parameters
    ----------
    algorithm : str
        Name of the algorithm that produced the run.
    config : dict, optional
        JSON-serializable configuration (hyper-parameters, seed, ...).

    Attributes
    ----------
    records : list of dict
        One dict per round, in order.
    state : dict of str to ndarray
        Final arrays of the run (e.g. ``S`` and ``theta`` as flat float64 vectors); saved by :meth:`save`.
    theta : object or None
        The final parameter in the model's own structure (e.g. a ``(p, K)`` dictionary or
        ``GaussianMixtureParams``), set by the algorithm that ran; kept in memory only (after
        :meth:`load` it is None: rebuild it with ``model.theta_from_vector(state["theta"], like)``).
    """

    def __init__(self, algorithm: str = "", config: dict | None = None) -> None:
        self.algorithm = str(algorithm)
        self.config: dict = dict(config or {})
        self.records: list[dict] = []
        self.state: dict[str, np.ndarray] = {}
        self.theta: Any = None

    # -- building -----------------------------------------------------------
    def append(self, **fields: Any) -> None:
        """Append the record of one round."""
        self.records.append(fields)

    # -- reading ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.records)

    def keys(self) -> list[str]:
        """Names present in at least one record, in first-seen order."""
        seen: dict[str, None] = {}
        for r in self.records:
            for k in r:
                seen.setdefault(k, None)
        return list(seen)

    def column(self, name: str, default: float = np.nan) -> np.ndarray:
        """One scalar field over rounds as a float64 array (``default`` where absent or None)."""
        if name not in self.keys():
            raise KeyError(f"History has no field {name!r}; fields are {self.keys()}")
        out = np.full(len(self.records), default, dtype=np.float64)
        for i, r in enumerate(self.records):
            v = r.get(name)
            if v is not None:
                out[i] = float(v)
        return out

    def __getitem__(self, name: str) -> np.ndarray:
        return self.column(name)

    def __repr__(self) -> str:
        return f"History(algorithm={self.algorithm!r}, rounds={len(self)}, fields={self.keys()})"

    # -- comparison ---------------------------------------------------------
    def equals(self, other: "History", *, ignore: Iterable[str] = ("wall_time",)) -> bool:
        """Exact equality of records and final state, ignoring the named fields."""
        ignore = set(ignore)
        if len(self) != len(other):
            return False
        for a, b in zip(self.records, other.records):
            ka = {k for k in a if k not in ignore}
            kb = {k for k in b if k not in ignore}
            if ka != kb:
                return False
            for k in ka:
                va, vb = a[k], b[k]
                if isinstance(va, np.ndarray) or isinstance(vb, np.ndarray):
                    if not np.array_equal(np.asarray(va), np.asarray(vb)):
                        return False
                elif isinstance(va, float) and isinstance(vb, float) and math.isnan(va) and math.isnan(vb):
                    continue
                elif va != vb:
                    return False
        if set(self.state) != set(other.state):
            return False
        return all(np.array_equal(self.state[k], other.state[k]) for k in self.state)

    # -- persistence --------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-serializable dict (floats round-trip exactly)."""
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "algorithm": self.algorithm,
            "config": _to_jsonable(self.config),
            "records": _to_jsonable(self.records),
            "state": _to_jsonable(self.state),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "History":
        """Inverse of :meth:`to_dict`; validates the format tag and version."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"Not a fedmm history: expected format {_FORMAT!r}")
        if data.get("version") != _FORMAT_VERSION:
            raise ValueError(
                f"Unsupported fedmm history version {data.get('version')!r}; expected {_FORMAT_VERSION}"
            )
        h = cls(data.get("algorithm", ""), _from_jsonable(data.get("config", {})))
        h.records = _from_jsonable(data.get("records", []))
        h.state = _from_jsonable(data.get("state", {}))
        return h

    def save(self, path: str | os.PathLike) -> None:
        """Write the history as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "History":
        """Read a history written by :meth:`save`."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))


# --------------------------------------------------------------------------- several runs in one file
_RUNSET_FORMAT = "fedmm-runset"
_RUNSET_VERSION = 1


class RunSet(Mapping):
    """Several named runs (:class:`History`) and their shared metadata, in one JSON file.

    What every ``fedmm experiment`` and ``fedmm demo`` writes: one entry per
    run, named ``"<curve>/seed=<s>"`` (with a ``"<setting>/"`` prefix where
    a figure has several data settings), and the experiment's configuration,
    tuning results and references in :attr:`metadata`.  Read any fedmm JSON
    with :func:`load`.

    Parameters
    ----------
    runs : mapping of str to History, optional
        The runs, in order.
    metadata : dict, optional
        JSON-serializable description shared by the runs (NumPy arrays and
        non-finite floats are allowed, as in :meth:`History.to_dict`).

    Examples
    --------
    >>> from fedmm.history import History, RunSet, load
    >>> h = History("FedMM", {"seed": 0})
    >>> h.append(t=0, objective=1.5)
    >>> runs = RunSet({"FedMM/seed=0": h}, metadata={"experiment": "example"})
    >>> runs["FedMM/seed=0"].column("objective")
    array([1.5])
    >>> RunSet.from_dict(runs.to_dict()).metadata
    {'experiment': 'example'}
    """

    def __init__(self, runs: Mapping[str, History] | None = None, *, metadata: dict | None = None) -> None:
        self.runs: dict[str, History] = {}
        for name, history in dict(runs or {}).items():
            if not isinstance(history, History):
                raise TypeError(f"Expected 'runs[{name!r}]' to be a fedmm.History, got {type(history).__name__}")
            self.runs[str(name)] = history
        self.metadata: dict = dict(metadata or {})

    def __getitem__(self, name: str) -> History:
        return self.runs[name]

    def __iter__(self):
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:
        return f"RunSet({len(self)} runs: {list(self.runs)[:4]}{' ...' if len(self) > 4 else ''})"

    def to_dict(self) -> dict:
        """A JSON-serializable dict: ``format``, ``kind = "runset"``, ``version``, ``metadata``, ``runs``."""
        return {
            "format": _RUNSET_FORMAT,
            "kind": "runset",
            "version": _RUNSET_VERSION,
            "metadata": _to_jsonable(self.metadata),
            "runs": {name: h.to_dict() for name, h in self.runs.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> "RunSet":
        """Inverse of :meth:`to_dict`; validates the format tag and version."""
        if not isinstance(data, dict) or data.get("format") != _RUNSET_FORMAT:
            raise ValueError(f"Not a fedmm run set: expected format {_RUNSET_FORMAT!r}")
        if data.get("version") != _RUNSET_VERSION:
            raise ValueError(f"Unsupported fedmm run set version {data.get('version')!r}; expected {_RUNSET_VERSION}")
        runs = {name: History.from_dict(h) for name, h in data.get("runs", {}).items()}
        return cls(runs, metadata=_from_jsonable(data.get("metadata", {})))

    def save(self, path: str | os.PathLike) -> None:
        """Write the run set as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RunSet":
        """Read a run set written by :meth:`save`."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))


def load(path: str | os.PathLike) -> "History | RunSet":
    """Read any JSON file fedmm writes: a :class:`History` or a :class:`RunSet`.

    The file's ``kind`` field (``"runset"``; a single run's file carries
    ``format = "fedmm-history"``) decides which.

    Parameters
    ----------
    path : path-like
        A file written by :meth:`History.save`, :meth:`RunSet.save`, or any
        ``fedmm experiment`` / ``fedmm demo`` run file.

    Raises
    ------
    ValueError
        The file is JSON of another kind.
    """
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    kind = data.get("kind", data.get("format")) if isinstance(data, dict) else None
    if kind in ("runset", _RUNSET_FORMAT):
        return RunSet.from_dict(data)
    if kind in ("history", _FORMAT):
        return History.from_dict(data)
    raise ValueError(f"Expected {os.fspath(path)!r} to be a fedmm History or RunSet JSON file, "
                     f"got kind {kind!r}")
