# SPDX-License-Identifier: BSD-3-Clause
"""Per-round record of a run (:class:`History`), saved to and loaded from JSON."""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any, Iterable, Sequence

import numpy as np

from fedmm._validation import check_path

__all__ = ["History", "RunSet", "TIMING_FIELDS", "load", "seed_bands"]

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


def _from_jsonable(value: Any, where: str = "value") -> Any:
    """Inverse of :func:`_to_jsonable`; ``ValueError`` naming the field (``where``) of a malformed encoding."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _ndarray_from_jsonable(value, where)
        if "__float__" in value:
            text = value["__float__"]
            try:
                if not isinstance(text, str):
                    raise TypeError
                return float(text)
            except (TypeError, ValueError):
                raise _field_error(where, "an encoded float ({'__float__': 'nan'|'inf'|'-inf'})", value) from None
        return {k: _from_jsonable(v, f"{where}[{k!r}]" if isinstance(v, (dict, list)) else where)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_from_jsonable(v, f"{where}[{i}]" if isinstance(v, (dict, list)) else where)
                for i, v in enumerate(value)]
    return value


def _ndarray_from_jsonable(value: dict, where: str) -> np.ndarray:
    """An encoded array ``{"__ndarray__": nested list, "dtype": str, "shape": list of int}`` of numbers or bools."""
    expected = "an encoded numeric array ({'__ndarray__': nested list, 'dtype': str, 'shape': list of int})"
    dtype, shape = value.get("dtype"), value.get("shape")
    if (not isinstance(dtype, str) or not isinstance(shape, list)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise _field_error(where, expected, value)
    try:
        dtype = np.dtype(dtype)
        data = np.asarray(value["__ndarray__"])
        if dtype.kind not in "biuf" or (data.size and data.dtype.kind not in "biuf"):
            raise TypeError("not numbers")
        return data.astype(dtype).reshape(shape)
    except (TypeError, ValueError, OverflowError):
        raise _field_error(where, expected, value) from None


def _field_error(where: str, expected: str, value: Any) -> ValueError:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return ValueError(f"Expected field {where} to be {expected}, got {text}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Types of the record (and :attr:`History.initial`) fields that History and the algorithms read:
#: (test, what is expected); None is allowed (a value not recorded) except for ``t``.
_FIELD_TYPES = {
    "t": (_is_count, "a non-negative integer"),
    **dict.fromkeys(("bytes_up", "bytes_down"), (_is_count, "a non-negative integer or None")),
    **dict.fromkeys(("objective", "E_s", "E_ps", "E_p", "E_sp", "gamma", "wall_time", "monitor_time",
                     "local_steps", "total_local_steps"), (_is_real, "a real number or None")),
    **dict.fromkeys(("active", "dropped"), (lambda v: isinstance(v, list) and all(_is_count(i) for i in v),
                                            "a list of client indices (non-negative integers)")),
    "drop_reasons": (lambda v: isinstance(v, list) and all(isinstance(r, str) for r in v), "a list of str"),
}


def _check_fields(fields: Any, where: str) -> dict:
    """``fields`` (a record or :attr:`History.initial`) as a dict whose known fields have their types."""
    if not isinstance(fields, dict):
        raise _field_error(where, "a dict of fields", fields)
    for key, value in fields.items():
        test, expected = _FIELD_TYPES.get(key, (None, ""))
        if test is not None and not test(value) and not (value is None and key != "t"):
            raise _field_error(f"{where}[{key!r}]", expected, value)
    return fields


def _check_arrays(arrays: Any, where: str) -> dict:
    """``arrays`` (:attr:`History.state` or :attr:`History.params`) as a dict of str to numeric arrays."""
    if not isinstance(arrays, dict):
        raise _field_error(where, "a dict of str to arrays", arrays)
    for key, value in arrays.items():
        if not (isinstance(value, np.ndarray) or _is_real(value)):
            raise _field_error(f"{where}[{key!r}]", "a numeric array", value)
    return arrays


#: What every History file has held since the first version (``initial`` and ``params`` came later).
_HISTORY_KEYS = ("algorithm", "config", "records", "state")


def _check_present(data: dict, keys: tuple, prefix: str = "") -> None:
    missing = [f"{prefix}{k}" for k in keys if k not in data]
    if missing:
        raise ValueError(f"Expected field(s) {', '.join(missing)}, which every file of this format has: missing")


def _history_from_dict(cls: type, data: Any, prefix: str = "") -> "History":
    """:meth:`History.from_dict` with the fields named as ``prefix + name`` (a run set's ``runs[...]``)."""
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        where = f" (field {prefix[:-1]})" if prefix else ""
        raise ValueError(f"Not a fedmm history{where}: expected format {_FORMAT!r}")
    if data.get("version") != _FORMAT_VERSION:
        raise ValueError(f"Unsupported fedmm history version {data.get('version')!r}; expected {_FORMAT_VERSION}")
    _check_present(data, _HISTORY_KEYS, prefix)
    algorithm = data["algorithm"]
    if not isinstance(algorithm, str):
        raise _field_error(f"{prefix}algorithm", "a str", algorithm)
    config = _from_jsonable(data["config"], f"{prefix}config")
    if not isinstance(config, dict):
        raise _field_error(f"{prefix}config", "a dict", config)
    h = cls(algorithm, config)
    records = _from_jsonable(data["records"], f"{prefix}records")
    if not isinstance(records, list):
        raise _field_error(f"{prefix}records", "a list of dicts (one per round)", records)
    h.records = [_check_fields(r, f"{prefix}records[{i}]") for i, r in enumerate(records)]
    h.state = _check_arrays(_from_jsonable(data["state"], f"{prefix}state"), f"{prefix}state")
    h.params = _check_arrays(_from_jsonable(data.get("params", {}), f"{prefix}params"), f"{prefix}params")
    h.initial = _check_fields(_from_jsonable(data.get("initial", {}), f"{prefix}initial"), f"{prefix}initial")
    if "initial" not in data and "initial_objective" in h.config:
        value = h.config["initial_objective"]
        if value is not None and not _is_real(value):
            raise _field_error(f"{prefix}config['initial_objective']", "a real number or None", value)
        h.initial["objective"] = value
    return h


def _read_json(path: Any) -> tuple[str | bytes, Any]:
    """``path`` (a file name, never a descriptor) and its JSON content; ``ValueError`` naming it if unreadable."""
    path = check_path(path)
    with open(path, encoding="utf-8") as fh:
        try:
            return path, json.load(fh)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
            what = "nested too deeply" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"
            raise ValueError(f"{path!r} is not a fedmm JSON file (UTF-8 JSON): {what}") from exc


def _parse_file(path: str | bytes, parse: Any, data: Any) -> Any:
    """``parse(data)`` with its refusal (a malformed field, nesting too deep) naming the file ``path``."""
    try:
        return parse(data)
    except RecursionError as exc:
        raise ValueError(f"{path!r} is not a valid fedmm file: it is nested too deeply") from exc
    except ValueError as exc:
        raise ValueError(f"{path!r} is not a valid fedmm file: {exc}") from exc


#: Fields that measure time, ignored by :meth:`History.equals` by default.
TIMING_FIELDS = ("wall_time", "monitor_time")

#: Axis labels in words (with units) of the fields the algorithms record.
_LABELS = {
    "objective": "objective F(θ) = Σ_i μ_i f_i(θ) + g(θ)",
    "E_s": "E_s = ‖Ŝ_{t+1} − Ŝ_t‖² / γ²",
    "E_ps": "E_ps = ‖T(Ŝ_{t+1}) − T(Ŝ_t)‖² / γ²",
    "E_p": "E_p = ‖θ_{t+1} − θ_t‖² / γ²",
    "E_sp": "E_sp = ‖𝒯(θ_{t+1}) − 𝒯(θ_t)‖² / γ²",
    "gamma": "step size γ",
    "t": "round index t (0-based)",
    "wall_time": "wall time, monitoring excluded (s)",
    "monitor_time": "monitoring time (s)",
    "bytes_up": "bytes sent by the clients in the round",
    "bytes_down": "bytes broadcast in the round",
    "local_steps": "local steps in the round",
    "total_local_steps": "local steps so far",
}


def _records_equal(a: dict, b: dict, ignore: set) -> bool:
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
    return True


def _pandas_column(pd: Any, values: list) -> Any:
    """A pandas array of one field over rows: nullable Int64/Float64/boolean (None → <NA>, NaN kept) or object."""
    present = [v for v in values if v is not None]
    mask = np.array([v is None for v in values], dtype=bool)
    if present and all(isinstance(v, (bool, np.bool_)) for v in present):
        data = np.array([bool(v) if v is not None else False for v in values], dtype=bool)
        return pd.arrays.BooleanArray(data, mask)
    if present and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in present):
        data = np.array([int(v) if v is not None else 0 for v in values], dtype=np.int64)
        return pd.arrays.IntegerArray(data, mask)
    if present and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                       for v in present):
        data = np.array([float(v) if v is not None else 0.0 for v in values], dtype=np.float64)
        return pd.arrays.FloatingArray(data, mask)
    return pd.array(values, dtype=object)


class History:
    """Per-round record of a federated run.

    Each round appends one record: a dict of scalars (``objective``, ``E_s``,
    ``E_ps``, ``E_p``, ``E_sp``, ``gamma``, ``bytes_up``, ``bytes_down``,
    ``wall_time``, ``monitor_time``, ...) and small lists (``active`` client
    indices, ``dropped`` clients, with ``drop_reasons`` when there are any).
    A round in which every contacted client was dropped also has
    ``all_dropped = True`` (:attr:`all_dropped_rounds` lists those rounds).  Record ``k`` (field ``t = k``, 0-based) is
    the state *after* round ``t``, i.e. at ``θ_{t+1}``; the values at the
    starting point ``θ_0`` are in :attr:`initial`.  :meth:`to_pandas` and
    :meth:`series` put both together, indexed by ``round`` = the number of
    rounds completed (0 for ``θ_0``, ``t + 1`` for record ``t``).

    Names of the monitoring quantities follow the FedMM paper §6:

    - ``E_s``  = ``‖Ŝ_{t+1} − Ŝ_t‖² / γ²_{t+1}`` (surrogate-space update size),
    - ``E_ps`` = ``‖T(Ŝ_{t+1}) − T(Ŝ_t)‖² / γ²_{t+1}`` (its parameter image),
    - ``E_p``  = ``‖θ_{t+1} − θ_t‖² / γ²_{t+1}`` (Θ-space baseline),
    - ``E_sp`` = the surrogate-space image of the baseline's update.

    Timing fields, in seconds since the start of the first round:

    - ``wall_time``: cumulative time of the rounds themselves (selection,
      client work, communication, aggregation), **monitoring excluded**;
    - ``monitor_time``: cumulative time spent on monitoring (the objective
      and, for the Θ-space baseline, ``E_sp``), including the evaluation at
      ``θ_0`` (``initial["monitor_time"]``).  ``wall_time + monitor_time`` is
      the run's elapsed time up to that round.

    The objective is evaluated only at the ``evaluate_every`` cadence: in
    other rounds the field is absent (a missing value in :meth:`to_pandas`,
    NaN in :meth:`column`/:meth:`series`).

    Parameters
    ----------
    algorithm : str
        Name of the algorithm that produced the run.
    config : dict, optional
        JSON-serializable configuration (hyper-parameters, seed, ...).

    Attributes
    ----------
    records : list of dict
        One dict per round, in order (``len(history)`` is the number of rounds).
    initial : dict
        Values at the starting point ``θ_0``, before the first round (e.g.
        ``objective`` when an objective cadence was asked, ``wall_time = 0``,
        ``monitor_time``; after a start exchange, ``dropped``: the clients
        left out of ``Ŝ_0``, with ``drop_reasons``); saved by :meth:`save`.
    state : dict of str to ndarray
        Final arrays of the run (e.g. ``S`` and ``theta`` as flat float64 vectors); saved by :meth:`save`.
    params : dict of str to ndarray
        The final parameter as named arrays in the model's structure (for a
        surrogate model, :meth:`fedmm.models.SurrogateModel.theta_to_dict`,
        e.g. ``weights``, ``means``, ``covariance`` of a Gaussian mixture; for
        the non-smooth family, ``x``); saved by :meth:`save`.  Rebuild the
        model's own object with ``model.theta_from_dict(history.params)``.
    theta : object or None
        The final parameter as the model's own object (e.g. a ``(p, K)``
        dictionary or ``GaussianMixtureParams``), set by the algorithm that
        ran; in memory only (None after :meth:`load`: see ``params``).

    Examples
    --------
    >>> h = History("demo")
    >>> h.initial.update(objective=4.0, wall_time=0.0)
    >>> h.append(t=0, objective=2.0, wall_time=0.1)
    >>> h.append(t=1, wall_time=0.2)
    >>> h.series("objective").tolist()
    [4.0, 2.0, nan]
    >>> h.rounds().tolist()
    [0, 1, 2]
    >>> History.from_dict(h.to_dict()).equals(h)
    True
    """

    def __init__(self, algorithm: str = "", config: dict | None = None) -> None:
        self.algorithm = str(algorithm)
        self.config: dict = dict(config or {})
        self.records: list[dict] = []
        self.initial: dict[str, Any] = {}
        self.state: dict[str, np.ndarray] = {}
        self.params: dict[str, np.ndarray] = {}
        self.theta: Any = None

    # -- building -----------------------------------------------------------
    def append(self, **fields: Any) -> None:
        """Append the record of one round."""
        self.records.append(fields)

    # -- reading ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.records)

    @property
    def all_dropped_rounds(self) -> list[int]:
        """Rounds ``t`` in which every contacted client was dropped (their records have ``all_dropped``):
        the server aggregated no client message there.  Saved with the records; ``[]`` for older files."""
        return [int(r.get("t", k)) for k, r in enumerate(self.records) if r.get("all_dropped")]

    def keys(self) -> list[str]:
        """Names present in at least one record, in first-seen order (not counting :attr:`initial`)."""
        seen: dict[str, None] = {}
        for r in self.records:
            for k in r:
                seen.setdefault(k, None)
        return list(seen)

    def _all_keys(self, include_initial: bool) -> list[str]:
        seen: dict[str, None] = dict.fromkeys(self.keys())
        if include_initial:
            for k in self.initial:
                seen.setdefault(k, None)
        return list(seen)

    def column(self, name: str, default: float = np.nan) -> np.ndarray:
        """One scalar field over the records as a float64 array of shape ``(len(self),)``.

        ``default`` where the field is absent or None (e.g. rounds where the
        objective was not evaluated).  See :meth:`series` for the same with the
        value at ``θ_0`` first.
        """
        if name not in self.keys():
            raise KeyError(f"History has no field {name!r}; fields are {self.keys()}")
        out = np.full(len(self.records), default, dtype=np.float64)
        for i, r in enumerate(self.records):
            v = r.get(name)
            if v is not None:
                out[i] = float(v)
        return out

    def rounds(self, include_initial: bool = True) -> np.ndarray:
        """Rounds completed at each row: ``[0, 1, …, len(self)]`` (``[1, …]`` without the initial row).

        Returns
        -------
        ndarray of int64 of shape (len(self) + 1,) or (len(self),)
        """
        return np.arange(0 if include_initial else 1, len(self.records) + 1, dtype=np.int64)

    def series(self, name: str, *, include_initial: bool = True) -> np.ndarray:
        """One scalar field as a float64 array aligned with :meth:`rounds`.

        Parameters
        ----------
        name : str
            A record field (or a field of :attr:`initial` only).
        include_initial : bool
            Put the value at ``θ_0`` (``initial[name]``, NaN when absent) first.

        Returns
        -------
        ndarray of float64 of shape (len(self) + 1,) or (len(self),)
            NaN where the field was not recorded (e.g. the objective between
            its evaluations); :meth:`to_pandas` tells "not recorded" (``<NA>``)
            apart from a recorded NaN.
        """
        if name not in self._all_keys(include_initial):
            raise KeyError(f"History has no field {name!r}; fields are {self._all_keys(include_initial)}")
        rows = ([self.initial] if include_initial else []) + self.records
        out = np.full(len(rows), np.nan, dtype=np.float64)
        for i, r in enumerate(rows):
            v = r.get(name)
            if v is not None:
                out[i] = float(v)
        return out

    def to_pandas(self, columns: Sequence[str] | None = None, *, include_initial: bool = True,
                  dropna: bool = False) -> Any:
        """The records as a :class:`pandas.DataFrame`, one row per round (needs pandas).

        Parameters
        ----------
        columns : sequence of str, optional
            Fields to keep, in this order (default: every field, first-seen order).
        include_initial : bool
            Start with the row of ``θ_0`` (:attr:`initial`, ``round`` 0).
        dropna : bool
            Keep only the rows where every selected column has a value, e.g.
            ``to_pandas(["objective"], dropna=True)`` for the objective's evaluations.

        Returns
        -------
        pandas.DataFrame
            Indexed by ``round`` (int64, rounds completed: 0 for ``θ_0``,
            ``t + 1`` for the record of round ``t``).  Integer, float and bool
            fields get pandas' nullable dtypes (``Int64``, ``Float64``,
            ``boolean``): a field that was not recorded in a round (the
            objective between its evaluations, ``t`` or ``bytes_up`` in the
            initial row) is ``<NA>``, while a recorded non-finite value stays
            NaN or inf.  Lists (``active``, ``dropped``) are object columns.

        Raises
        ------
        ImportError
            pandas is not installed (``pip install pandas`` or ``pip install 'fedmm[analysis]'``).
        KeyError
            A name in ``columns`` is not a field.
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("History.to_pandas needs pandas: pip install pandas "
                              "(or pip install 'fedmm[analysis]')") from exc
        fields = self._all_keys(include_initial)
        if columns is None:
            columns = fields
        else:
            if isinstance(columns, str):
                raise TypeError(f"Expected 'columns' to be a sequence of field names, got the string {columns!r}")
            columns = list(columns)
            unknown = [c for c in columns if c not in fields]
            if unknown:
                raise KeyError(f"History has no field(s) {unknown}; fields are {fields}")
        rows = ([self.initial] if include_initial else []) + self.records
        index = pd.Index(self.rounds(include_initial), name="round")
        frame = pd.DataFrame({name: _pandas_column(pd, [r.get(name) for r in rows]) for name in columns},
                             index=index)
        if dropna and columns:
            frame = frame.dropna(how="any")
        return frame

    def plot(self, y: str = "objective", *, x: str = "round", ax: Any = None, logy: bool | None = None,
             label: str | None = None, **kwargs: Any) -> Any:
        """Plot one field against another with matplotlib; returns the Axes.

        Rows where either field was not recorded are left out, so a field
        recorded every few rounds (the objective) is drawn as one connected
        line through its evaluations; the initial row (``θ_0``) is included.

        Parameters
        ----------
        y : str
            Field on the vertical axis (default ``"objective"``).
        x : str
            ``"round"`` (rounds completed, 0 = ``θ_0``; default) or a field
            such as ``"wall_time"`` or ``"t"``.
        ax : matplotlib.axes.Axes, optional
            Axes to draw on (default: the current Axes, ``plt.gca()``, so
            successive calls overlay, as pandas does).
        logy : bool, optional
            Log-scaled y axis; by default when every value is positive and
            the values span at least two decades (``max/min ≥ 100``).
        label : str, optional
            Legend entry (default: the algorithm's name).
        **kwargs
            Passed to ``Axes.plot`` (e.g. ``marker``, ``linestyle``, ``color``).

        Returns
        -------
        matplotlib.axes.Axes
        """
        if not isinstance(y, str) or not isinstance(x, str):
            raise TypeError(f"Expected 'x' and 'y' to be field names (str), got {x!r} and {y!r}")
        if logy is not None and not isinstance(logy, bool):
            raise TypeError(f"Expected 'logy' to be a bool or None, got {logy!r}")
        ys = self.series(y)
        xs = self.rounds().astype(np.float64) if x == "round" else self.series(x)
        keep = ~(np.isnan(xs) | np.isnan(ys))
        xs, ys = xs[keep], ys[keep]
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.gca()
        line, = ax.plot(xs, ys, label=self.algorithm if label is None else label, **kwargs)
        if logy is None:
            finite = ys[np.isfinite(ys)]
            logy = bool(finite.size and finite.min() > 0 and finite.max() >= 100.0 * finite.min())
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(self.axis_label(x))
        ax.set_ylabel(self.axis_label(y))
        if line.get_label() and not line.get_label().startswith("_"):
            ax.legend()
        return ax

    def axis_label(self, name: str) -> str:
        """A plot label in words for a field (with its unit), e.g. ``"wall time, monitoring excluded (s)"``."""
        if name == "round":
            return "iterations completed" if self.algorithm == "SASSMM" else "communication rounds completed"
        return _LABELS.get(name, name)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.column(name)

    def __repr__(self) -> str:
        return f"History(algorithm={self.algorithm!r}, rounds={len(self)}, fields={self.keys()})"

    def copy(self) -> "History":
        """A copy whose record list, config, initial values, state and params can change without
        affecting this one (the records themselves are shared: they are not modified once appended)."""
        other = type(self)(self.algorithm, dict(self.config))
        other.records = list(self.records)
        other.initial = dict(self.initial)
        other.state = dict(self.state)
        other.params = dict(self.params)
        other.theta = self.theta
        return other

    # -- comparison ---------------------------------------------------------
    def equals(self, other: "History", *, ignore: Iterable[str] = TIMING_FIELDS) -> bool:
        """Exact equality of records, initial values, final state and parameters, ignoring the named fields.

        By default the timing fields (``wall_time``, ``monitor_time``) are ignored.
        """
        ignore = set(ignore)
        if len(self) != len(other):
            return False
        pairs = [*zip(self.records, other.records), (self.initial, other.initial)]
        if not all(_records_equal(a, b, ignore) for a, b in pairs):
            return False
        for mine, theirs in ((self.state, other.state), (self.params, other.params)):
            if set(mine) != set(theirs):
                return False
            if not all(np.array_equal(mine[k], theirs[k]) for k in mine):
                return False
        return True

    # -- persistence --------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-serializable dict (floats round-trip exactly)."""
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "algorithm": self.algorithm,
            "config": _to_jsonable(self.config),
            "initial": _to_jsonable(self.initial),
            "records": _to_jsonable(self.records),
            "state": _to_jsonable(self.state),
            "params": _to_jsonable(self.params),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "History":
        """Inverse of :meth:`to_dict`; validates the format tag, version and structure.

        Files written before :attr:`initial` existed get ``initial["objective"]``
        from ``config["initial_objective"]``.

        Raises
        ------
        ValueError
            ``data`` is not a fedmm History of this version, or a field has
            the wrong type (named, e.g. ``records[3]['t']``).
        """
        try:
            return _history_from_dict(cls, data)
        except RecursionError as exc:
            raise ValueError("Not a fedmm history: nested too deeply") from exc

    def save(self, path: str | os.PathLike) -> None:
        """Write the history as JSON to ``path`` (records, initial values, config, state and params)."""
        with open(check_path(path), "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "History":
        """Read a history written by :meth:`save` (``theta`` is None: rebuild it from ``params``).

        Raises
        ------
        TypeError
            ``path`` is not a file name (``str`` or ``os.PathLike``; an
            integer is not taken for a file descriptor).
        ValueError
            The file is not UTF-8 JSON, not a fedmm History, or malformed
            (the message names the file and the field).
        """
        path, data = _read_json(path)
        return _parse_file(path, cls.from_dict, data)


# --------------------------------------------------------------------------- several runs in one file
_RUNSET_FORMAT = "fedmm-runset"
_RUNSET_VERSION = 1
#: A ``key=value`` part of a run's name (a label); ``FedMMOT(step=0.001)`` is not one.
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


def _fields(history: History, include_initial: bool) -> list[str]:
    """A run's field names, first-seen order: its records', then (optionally) those only in ``initial``."""
    return list(dict.fromkeys([*history.keys(), *(history.initial if include_initial else ())]))


def _label_value(text: str) -> int | float | str:
    """A label's value as an int or a float when it reads as one, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


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
        """Inverse of :meth:`to_dict`; validates the format tag, version and structure (``ValueError``)."""
        if not isinstance(data, dict) or data.get("format") != _RUNSET_FORMAT:
            raise ValueError(f"Not a fedmm run set: expected format {_RUNSET_FORMAT!r}")
        if data.get("version") != _RUNSET_VERSION:
            raise ValueError(f"Unsupported fedmm run set version {data.get('version')!r}; expected {_RUNSET_VERSION}")
        _check_present(data, ("metadata", "runs"))
        runs = data["runs"]
        if not isinstance(runs, dict):
            raise _field_error("runs", "a dict of run name to History", runs)
        try:
            runs = {name: _history_from_dict(History, h, f"runs[{name!r}].") for name, h in runs.items()}
            metadata = _from_jsonable(data["metadata"], "metadata")
        except RecursionError as exc:
            raise ValueError("Not a fedmm run set: nested too deeply") from exc
        if not isinstance(metadata, dict):
            raise _field_error("metadata", "a dict", metadata)
        return cls(runs, metadata=metadata)

    def save(self, path: str | os.PathLike) -> None:
        """Write the run set as JSON to ``path``."""
        with open(check_path(path), "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RunSet":
        """Read a run set written by :meth:`save` (refusals as :meth:`History.load`)."""
        path, data = _read_json(path)
        return _parse_file(path, cls.from_dict, data)

    # -- analysis -----------------------------------------------------------
    def labels(self, name: str) -> dict[str, Any]:
        """The labels of a run, read from its name (``"d=16/FedAdam/seed=0"``: ``d``, ``curve``, ``seed``).

        The name's ``/``-separated parts of the form ``key=value`` give the
        label ``key`` (the value as an int or a float when it reads as one,
        else a string); the last other part is the ``curve``, and the other
        parts before it, joined by ``/``, the ``setting`` (the data setting or
        panel of the experiments' ``"<setting>/<curve>/seed=<s>"`` names).

        Parameters
        ----------
        name : str
            A run's name (any string: not necessarily one of this set's runs).

        Returns
        -------
        dict of str to int, float or str
            In the order the labels appear in the name, ``curve`` and ``setting`` where the bare parts were.

        Examples
        --------
        >>> RunSet().labels("homogeneous/FedMM/seed=3")
        {'setting': 'homogeneous', 'curve': 'FedMM', 'seed': 3}
        >>> RunSet().labels("d=16/FedMMOT(step=0.001)/seed=0")
        {'d': 16, 'curve': 'FedMMOT(step=0.001)', 'seed': 0}
        """
        if not isinstance(name, str):
            raise TypeError(f"Expected 'name' to be a run name (str), got {type(name).__name__}")
        parts = name.split("/")
        bare = [i for i, part in enumerate(parts) if not _LABEL.fullmatch(part)]
        out: dict[str, Any] = {}
        for i, part in enumerate(parts):
            if i not in bare:
                key, value = part.split("=", 1)
                out[key] = _label_value(value)
            elif i == bare[-1]:
                if len(bare) > 1:
                    out["setting"] = "/".join(parts[j] for j in bare[:-1])
                out["curve"] = part
        return out

    def to_pandas(self, columns: Sequence[str] | None = None, *, include_initial: bool = True,
                  dropna: bool = False, labels: bool = True) -> Any:
        """Every run's :meth:`History.to_pandas` rows in one tidy :class:`pandas.DataFrame` (needs pandas).

        The frame has a ``run`` column (the run's name), one column per label
        of the names (:meth:`labels`: e.g. ``curve``, ``seed``, ``setting``,
        ``d``), the ``round`` column and the runs' fields: one row per run and
        round, ready for ``groupby`` or seaborn (``hue="curve"``).  A field
        that a run does not record (``E_s`` of ParameterAveraging, which
        records ``E_sp``) is ``<NA>`` in that run's rows, as is a label that
        its name does not carry.

        Parameters
        ----------
        columns : sequence of str, optional
            Fields to keep, in this order (default: every field of every run,
            first-seen order); each must be a field of at least one run.
        include_initial : bool
            Start each run with the row of ``θ_0`` (``round`` 0).
        dropna : bool
            Keep only the rows where every selected column that the run
            records has a value (as :meth:`History.to_pandas` run by run).
        labels : bool
            Add the label columns (default); False keeps ``run`` only.

        Returns
        -------
        pandas.DataFrame
            Columns ``run``, the labels, ``round``, the fields; a fresh
            ``RangeIndex``; the fields' dtypes as in :meth:`History.to_pandas`,
            numeric labels likewise (``seed`` is ``Int64``), ``run`` and the
            text labels pandas' default for strings.  An empty run
            set gives an empty frame with the columns ``run`` and ``round``.

        Raises
        ------
        ImportError
            pandas is not installed.
        KeyError
            A name in ``columns`` is a field of no run.
        ValueError
            A label has the name of a field or of ``run``/``round`` (pass ``labels=False``).

        Examples
        --------
        >>> a, b = History("FedMM"), History("FedMM")
        >>> a.initial["objective"] = b.initial["objective"] = 4.0
        >>> a.append(t=0, objective=2.0)
        >>> b.append(t=0, objective=3.0)
        >>> runs = RunSet({"FedMM/seed=0": a, "FedMM/seed=1": b})
        >>> frame = runs.to_pandas()
        >>> list(frame.columns)
        ['run', 'curve', 'seed', 'round', 't', 'objective']
        >>> frame.groupby("round")["objective"].mean().tolist()
        [4.0, 2.5]
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("RunSet.to_pandas needs pandas: pip install pandas "
                              "(or pip install 'fedmm[analysis]')") from exc
        if isinstance(columns, str):
            raise TypeError(f"Expected 'columns' to be a sequence of field names, got the string {columns!r}")
        fields = {name: _fields(h, include_initial) for name, h in self.runs.items()}
        if columns is not None:
            columns = list(columns)
            known = {f for fs in fields.values() for f in fs}
            unknown = [c for c in columns if c not in known]
            if unknown:
                raise KeyError(f"No run has the field(s) {unknown}; fields are {sorted(known)}")
        frames = {name: h.to_pandas(None if columns is None else [c for c in columns if c in fields[name]],
                                    include_initial=include_initial, dropna=dropna)
                  for name, h in self.runs.items()}
        if not frames:
            return pd.DataFrame({"run": pd.Series(dtype=object), "round": pd.Series(dtype=np.int64)})
        frame = pd.concat(frames, names=["run"]).reset_index()
        frame["run"] = pd.Series(frame["run"].tolist(), index=frame.index)  # pandas' default string dtype
        if columns is not None:
            frame = frame[["run", "round", *columns]]
        if labels:
            per_run = {name: self.labels(name) for name in self.runs}
            keys = list(dict.fromkeys(k for labels_ in per_run.values() for k in labels_))
            clash = [k for k in keys if k in frame.columns]
            if clash:
                raise ValueError(f"The run names' label(s) {clash} are also column names; "
                                 "pass labels=False to keep the run names only")
            names = frame["run"].tolist()
            for position, key in enumerate(keys, start=1):
                values = [per_run[n].get(key) for n in names]
                text = all(isinstance(v, str) for v in values if v is not None)
                column = pd.Series(values, index=frame.index) if text else _pandas_column(pd, values)
                frame.insert(position, key, column)
        return frame

    def plot(self, y: str = "objective", *, x: str = "round", by: Any = "auto", ax: Any = None,
             logy: bool | None = None, band: bool = True, **kwargs: Any) -> Any:
        """Plot one field of every run with matplotlib, or its mean ± one standard deviation per group.

        Parameters
        ----------
        y : str
            Field on the vertical axis (default ``"objective"``).
        x : str
            ``"round"`` (rounds completed, 0 = ``θ_0``; default) or a field
            such as ``"wall_time"``; with groups of several runs it must be
            ``"round"`` (the mean is taken round by round).
        by : "auto", None, str or sequence of str
            How runs are grouped.  ``"auto"`` (default): the runs whose names
            differ only in their ``seed=`` part form a group (one curve of an
            experiment over its seeds); a run with no such sibling is a group
            of one.  None: one line per run.  A label name or several
            (:meth:`labels`, e.g. ``"curve"``): the runs with the same values
            of these labels form a group.
        ax : matplotlib.axes.Axes, optional
            Axes to draw on (default: the current Axes, ``plt.gca()``).
        logy : bool, optional
            Log-scaled y axis; by default when every drawn value is positive
            and they span at least two decades, as :meth:`History.plot`.
        band : bool
            Shade ± one standard deviation over a group's runs (population
            standard deviation of the runs that have a value in that round;
            on a log axis, clipped below at 10⁻³ × the mean).
        **kwargs
            Passed to ``Axes.plot`` for every line (e.g. ``marker``).

        Returns
        -------
        matplotlib.axes.Axes
            One line per group (a group of one: its run, as :meth:`History.plot`
            draws it), labelled by the run's name without ``seed=…`` (by
            ``"auto"``), by the run's name (by None) or by the labels'
            ``key=value`` (by labels), with the group's size when it is more
            than one run (``"FedMM (3 runs)"``); points where no run of the
            group has a value are left out.

        Raises
        ------
        TypeError
            ``x``, ``y`` or ``by`` of the wrong type.
        ValueError
            ``by`` names a label that some run lacks, or groups of several
            runs with ``x`` other than ``"round"``.
        KeyError
            ``y`` (or ``x``) is a field of no run.

        Examples
        --------
        >>> from matplotlib.figure import Figure
        >>> runs = RunSet()
        >>> for seed, final in enumerate([2.0, 3.0]):
        ...     h = History("FedMM")
        ...     h.initial["objective"] = 4.0
        ...     h.append(t=0, objective=final)
        ...     runs.runs[f"FedMM/seed={seed}"] = h
        >>> ax = runs.plot("objective", ax=Figure().add_subplot())
        >>> line, = ax.get_lines()
        >>> line.get_label(), line.get_ydata().tolist()
        ('FedMM (2 runs)', [4.0, 2.5])
        """
        if not isinstance(y, str) or not isinstance(x, str):
            raise TypeError(f"Expected 'x' and 'y' to be field names (str), got {x!r} and {y!r}")
        if logy is not None and not isinstance(logy, bool):
            raise TypeError(f"Expected 'logy' to be a bool or None, got {logy!r}")
        groups = self._groups(by)
        for field in {y, x} - {"round"}:
            if not any(field in _fields(h, True) for h in self.runs.values()):
                known = sorted({f for h in self.runs.values() for f in _fields(h, True)})
                raise KeyError(f"No run has the field {field!r}; fields are {known}")
        if x != "round" and any(len(names) > 1 for names in groups.values()):
            raise ValueError(f"Expected x='round' to average groups of several runs, got x={x!r}; "
                             "pass by=None for one line per run")
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.gca()
        drawn = []
        for label, names in groups.items():
            curves = [self.runs[n] for n in names if y in _fields(self.runs[n], True)]
            if not curves:
                continue
            if len(curves) == 1:
                h = curves[0]
                ys = h.series(y)
                xs = h.rounds().astype(np.float64) if x == "round" else h.series(x)
                keep = ~(np.isnan(xs) | np.isnan(ys))
                ax.plot(xs[keep], ys[keep], label=label, **kwargs)
                drawn.append(ys[keep])
                continue
            length = max(len(h) for h in curves) + 1
            values = np.full((len(curves), length), np.nan)
            for i, h in enumerate(curves):
                series = h.series(y)
                values[i, :series.size] = series
            rounds, mean, std = seed_bands(values)
            xs = (rounds - 1).astype(np.float64)  # column 0 of ``values`` is round 0 (θ_0)
            line, = ax.plot(xs, mean, label=f"{label} ({len(curves)} runs)", **kwargs)
            drawn.append(mean)
            if band:
                low = mean - std
                if logy or (logy is None and np.all(mean > 0)):
                    low = np.maximum(low, mean * 1e-3)
                ax.fill_between(xs, low, mean + std, color=line.get_color(), alpha=0.2, lw=0)
        if logy is None:
            finite = np.concatenate(drawn) if drawn else np.empty(0)
            finite = finite[np.isfinite(finite)]
            logy = bool(finite.size and finite.min() > 0 and finite.max() >= 100.0 * finite.min())
        if logy:
            ax.set_yscale("log")
        first = next(iter(self.runs.values()), History())
        ax.set_xlabel(first.axis_label(x))
        ax.set_ylabel(first.axis_label(y))
        if drawn:
            ax.legend()
        return ax

    def _groups(self, by: Any) -> dict[str, list[str]]:
        """Legend label → names of the runs in the group, in the runs' order."""
        groups: dict[str, list[str]] = {}
        if by is None:
            return {name: [name] for name in self.runs}
        if isinstance(by, str) and by == "auto":
            for name in self.runs:
                key = "/".join(p for p in name.split("/") if not p.startswith("seed=")) or "all runs"
                groups.setdefault(key, []).append(name)
            return groups
        keys = [by] if isinstance(by, str) else by
        if not isinstance(keys, (list, tuple)) or not keys or not all(isinstance(k, str) for k in keys):
            raise TypeError(f"Expected 'by' to be 'auto', None, a label name or a sequence of label names, got {by!r}")
        for name in self.runs:
            labels_ = self.labels(name)
            missing = [k for k in keys if k not in labels_]
            if missing:
                raise ValueError(f"Expected every run name to carry the label(s) {keys} of 'by', but "
                                 f"{name!r} has no {missing}; its labels are {list(labels_)}")
            groups.setdefault(", ".join(f"{k}={labels_[k]}" for k in keys), []).append(name)
        return groups


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
    TypeError
        ``path`` is not a file name (``str`` or ``os.PathLike``; an integer
        is not taken for a file descriptor).
    ValueError
        The file is not UTF-8 JSON, is JSON of another kind, or is malformed
        (the message names the file and the field).
    """
    path, data = _read_json(path)
    kind = data.get("kind", data.get("format")) if isinstance(data, dict) else None
    if kind in ("runset", _RUNSET_FORMAT):
        return _parse_file(path, RunSet.from_dict, data)
    if kind in ("history", _FORMAT):
        return _parse_file(path, History.from_dict, data)
    raise ValueError(f"Expected {path!r} to be a fedmm History or RunSet JSON file, got kind {kind!r}")
