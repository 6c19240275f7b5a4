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


# ------------------------------------------------------------------ the t=0 row, pandas, plot
def _with_initial():
    h = History("FedMM")
    h.initial.update(objective=4.0, wall_time=0.0, monitor_time=0.01)
    h.append(t=0, gamma=1.0, objective=2.0, active=[0, 1], bytes_up=10, wall_time=0.1, monitor_time=0.02)
    h.append(t=1, gamma=0.5, active=[1], bytes_up=5, wall_time=0.2, monitor_time=0.02)
    h.append(t=2, gamma=0.25, objective=float("nan"), active=[], bytes_up=0, wall_time=0.3, monitor_time=0.03)
    return h


def test_series_puts_the_initial_value_first():
    h = _with_initial()
    np.testing.assert_array_equal(h.rounds(), [0, 1, 2, 3])
    np.testing.assert_array_equal(h.rounds(include_initial=False), [1, 2, 3])
    obj = h.series("objective")
    assert obj[0] == 4.0 and obj[1] == 2.0 and math.isnan(obj[2]) and math.isnan(obj[3])
    np.testing.assert_array_equal(h.series("gamma", include_initial=False), h.column("gamma"))
    assert math.isnan(h.series("gamma")[0])  # not recorded at θ_0
    assert len(h) == 3  # the records (rounds) only
    with pytest.raises(KeyError, match="no field 'nope'"):
        h.series("nope")


def test_to_pandas_rows_dtypes_and_missing_values():
    pd = pytest.importorskip("pandas")
    h = _with_initial()
    df = h.to_pandas()
    assert df.index.name == "round" and df.index.tolist() == [0, 1, 2, 3]
    assert str(df["objective"].dtype) == "Float64" and str(df["bytes_up"].dtype) == "Int64"
    assert str(df["t"].dtype) == "Int64" and df["active"].dtype == object
    assert df.loc[0, "objective"] == 4.0 and df.loc[1, "objective"] == 2.0
    # not evaluated (round 2) is <NA>, a recorded NaN (round 3) stays NaN: two different things
    assert df["objective"].isna().tolist() == [False, False, True, False]
    assert math.isnan(df.loc[3, "objective"])
    assert df.loc[0, "t"] is pd.NA and df.loc[0, "active"] is None
    assert df.loc[1, "active"] == [0, 1]
    np.testing.assert_array_equal(df["wall_time"].to_numpy(dtype=np.float64), [0.0, 0.1, 0.2, 0.3])
    # a column subset, and only the rounds where it was evaluated
    sub = h.to_pandas(["objective", "wall_time"], dropna=True)
    assert list(sub.columns) == ["objective", "wall_time"] and sub.index.tolist() == [0, 1, 3]
    no_initial = h.to_pandas(include_initial=False)
    assert no_initial.index.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(no_initial["gamma"].to_numpy(dtype=np.float64), h.column("gamma"))
    with pytest.raises(KeyError, match="nope"):
        h.to_pandas(["objective", "nope"])
    with pytest.raises(TypeError, match="columns"):
        h.to_pandas("objective")


def test_to_pandas_without_pandas_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` raise ImportError
    with pytest.raises(ImportError, match="pip install pandas"):
        _with_initial().to_pandas()


def _axes():
    from matplotlib.figure import Figure

    return Figure().add_subplot()


def test_plot_draws_the_recorded_values_and_labels_axes_in_words():
    h = _with_initial()
    ax = h.plot(ax=_axes())
    (line,) = ax.get_lines()
    # rounds 0 and 1 carry an objective; round 2 was not evaluated and round 3 is NaN: both left out
    np.testing.assert_array_equal(line.get_xdata(), [0.0, 1.0])
    np.testing.assert_array_equal(line.get_ydata(), [4.0, 2.0])
    assert ax.get_xlabel() == "communication rounds completed"
    assert ax.get_ylabel().startswith("objective")
    assert ax.get_yscale() == "linear"  # 2..4 spans less than two decades
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["FedMM"]
    ax = h.plot("gamma", x="wall_time", ax=_axes(), label="γ", marker="o")
    np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), [1.0, 0.5, 0.25])
    assert ax.get_xlabel() == "wall time, monitoring excluded (s)"
    with pytest.raises(TypeError, match="logy"):
        h.plot(ax=_axes(), logy="yes")


def test_plot_uses_a_log_axis_when_values_span_decades():
    h = History("x")
    h.initial["E_s"] = 1e3
    for t, v in enumerate([1e2, 1e1, 1e0]):
        h.append(t=t, E_s=v)
    assert h.plot("E_s", ax=_axes()).get_yscale() == "log"
    assert h.plot("E_s", ax=_axes(), logy=False).get_yscale() == "linear"
    h.append(t=3, E_s=-1.0)  # a non-positive value: no automatic log axis
    assert h.plot("E_s", ax=_axes()).get_yscale() == "linear"


def test_plot_on_the_current_axes_overlays():
    import matplotlib.pyplot as plt

    fig = plt.figure()
    try:
        a = _with_initial().plot()
        b = _with_initial().plot("gamma", label="second")
        assert a is b is plt.gca() and len(a.get_lines()) == 2
    finally:
        plt.close(fig)


def test_old_files_get_the_initial_objective_from_config():
    data = _history().to_dict()
    data.pop("initial")
    data.pop("params")
    data["config"]["initial_objective"] = 7.5
    h = History.from_dict(data)
    assert h.initial == {"objective": 7.5} and h.params == {}


def test_initial_and_params_round_trip_and_count_in_equals(tmp_path):
    h = _with_initial()
    h.params = {"means": np.arange(6.0).reshape(2, 3), "weights": np.array([0.25, 0.75])}
    h.save(tmp_path / "h.json")
    g = History.load(tmp_path / "h.json")
    assert g.equals(h, ignore=()) and g.initial == h.initial
    assert g.params["means"].shape == (2, 3) and g.theta is None
    g.initial["objective"] = 4.5
    assert not g.equals(h)
    g = History.load(tmp_path / "h.json")
    g.params["weights"] = g.params["weights"][::-1].copy()
    assert not g.equals(h)
    g = History.load(tmp_path / "h.json")
    g.records[1]["monitor_time"] = 9.0
    assert g.equals(h) and not g.equals(h, ignore=("wall_time",))  # timing fields are ignored by default
