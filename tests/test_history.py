# SPDX-License-Identifier: BSD-3-Clause
import math

import numpy as np
import pytest

from fedmm import History


def _history():
    h = History("FedMM", {"seed": 3, "alpha": 0.01})
    h.append(E_s=0.1 + 0.2, active=[0, 4], bytes_up=123, objective=None, wall_time=0.5)
    h.append(E_s=1 / 3, active=[1], bytes_up=7, objective=2.0, wall_time=0.25)
    h.state["S"] = np.array([1.0, np.pi, -2.5e-300])
    return h


def test_json_round_trip_is_exact(tmp_path):
    h = _history()
    path = tmp_path / "h.json"
    h.save(path)
    g = History.load(path)
    assert g.equals(h, ignore=())
    assert g.column("E_s")[0] == 0.1 + 0.2  # floats survive bit for bit
    assert g.state["S"].dtype == np.float64
    assert g.records[0]["active"] == [0, 4]


def test_column_fills_missing_values():
    h = _history()
    obj = h.column("objective")
    assert math.isnan(obj[0]) and obj[1] == 2.0
    with pytest.raises(KeyError, match="no field 'nope'"):
        h.column("nope")


def test_equals_detects_differences_and_ignores_wall_time():
    h, g = _history(), _history()
    g.records[1]["wall_time"] = 99.0
    assert h.equals(g)
    g.records[1]["bytes_up"] = 8
    assert not h.equals(g)
    g = _history()
    g.state["S"] = g.state["S"] + 1e-16
    assert not h.equals(g)


def test_non_finite_floats_round_trip(tmp_path):
    h = History("x")
    h.append(E_s=float("inf"), objective=float("nan"))
    h.save(tmp_path / "h.json")
    g = History.load(tmp_path / "h.json")
    assert g.records[0]["E_s"] == float("inf") and math.isnan(g.records[0]["objective"])


def test_load_rejects_foreign_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="Not a fedmm history"):
        History.load(p)
