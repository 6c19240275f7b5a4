# SPDX-License-Identifier: BSD-3-Clause
"""``RunSet.to_pandas`` and ``RunSet.plot``: what a CLI output file gives for analysis.

The frames are checked against ``pd.concat`` of each run's ``History.to_pandas`` built here, and the
plots against means and standard deviations computed here from the runs' own series.
"""
from __future__ import annotations

import numpy as np
import pytest

from fedmm.history import History, RunSet

pd = pytest.importorskip("pandas")


def _run(algorithm: str, objectives: list[float], field: str, values: list[float]) -> History:
    """A run whose objective is evaluated every other round (absent in the others)."""
    h = History(algorithm, {"seed": 0})
    h.initial.update(objective=objectives[0], wall_time=0.0)
    for t, v in enumerate(values):
        record = {"t": t, field: v, "wall_time": 0.1 * (t + 1), "active": [t % 3]}
        if t % 2 == 0:
            record["objective"] = objectives[1 + t // 2]
        h.append(**record)
    return h


def _runset() -> RunSet:
    """Two curves over two seeds, with the §6 fields of each (E_s vs E_sp), as ``fedmm demo`` writes them."""
    return RunSet({
        "FedMM/seed=0": _run("FedMM", [8.0, 4.0, 2.0], "E_s", [1.0, 0.5, 0.25]),
        "FedMM/seed=1": _run("FedMM", [8.0, 6.0, 3.0], "E_s", [2.0, 1.0, 0.5]),
        "ParameterAveraging/seed=0": _run("ParameterAveraging", [8.0, 5.0, 5.0], "E_sp", [3.0, 3.0, 3.0]),
        "ParameterAveraging/seed=1": _run("ParameterAveraging", [8.0, 7.0, 6.0], "E_sp", [4.0, 4.0, 4.0]),
    }, metadata={"experiment": "demo"})


def _axes():
    from matplotlib.figure import Figure

    return Figure().add_subplot()


# --------------------------------------------------------------------------- labels
@pytest.mark.parametrize("name, expected", [
    ("FedMM/seed=0", {"curve": "FedMM", "seed": 0}),
    ("homogeneous/FedMM(alpha=0)/seed=12", {"setting": "homogeneous", "curve": "FedMM(alpha=0)", "seed": 12}),
    ("d=16/FedMMOT(step=0.001)/seed=0", {"d": 16, "curve": "FedMMOT(step=0.001)", "seed": 0}),
    ("a/b/FedAdam/lr=0.5", {"setting": "a/b", "curve": "FedAdam", "lr": 0.5}),
    ("FedMM", {"curve": "FedMM"}),
    ("seed=x", {"seed": "x"}),
])
def test_labels_come_from_the_name(name, expected):
    labels = RunSet().labels(name)
    assert labels == expected and list(labels) == list(expected)
    assert all(type(labels[k]) is type(expected[k]) for k in expected)


# --------------------------------------------------------------------------- to_pandas
def _expected(runs: RunSet, **kwargs) -> "pd.DataFrame":
    """pd.concat of the runs' own frames, keyed by name, with the labels typed in by hand."""
    frame = pd.concat({name: h.to_pandas(**kwargs) for name, h in runs.items()}, names=["run"]).reset_index()
    frame["run"] = frame["run"].astype(str)
    curve = pd.Series([name.split("/")[0] for name in frame["run"]])
    seed = frame["run"].str.rsplit("seed=").str[1].astype("Int64")
    frame.insert(1, "curve", curve)
    frame.insert(2, "seed", seed)
    return frame


def test_to_pandas_is_every_runs_frame_with_its_labels():
    runs = _runset()
    frame = runs.to_pandas()
    pd.testing.assert_frame_equal(frame, _expected(runs))
    assert list(frame.columns[:4]) == ["run", "curve", "seed", "round"]
    assert len(frame) == sum(len(h) + 1 for h in runs.values())
    # a field a run does not record is missing in its rows, not zero
    pa = frame[frame["curve"] == "ParameterAveraging"]
    assert pa["E_s"].isna().all() and pa.loc[pa["round"] > 0, "E_sp"].notna().all()
    # the objective between its evaluations stays <NA>, as in History.to_pandas
    assert frame["objective"].isna().sum() == 4
    # one groupby gives the mean over seeds
    mean = frame.groupby(["curve", "round"])["objective"].mean()
    assert mean[("FedMM", 3)] == pytest.approx(2.5) and mean[("ParameterAveraging", 1)] == pytest.approx(6.0)


def test_to_pandas_columns_dropna_and_without_initial():
    runs = _runset()
    frame = runs.to_pandas(["objective", "E_s"], dropna=True, include_initial=False)
    kept = {name: h.to_pandas([c for c in ("objective", "E_s") if c in h.keys()], dropna=True,
                              include_initial=False) for name, h in runs.items()}
    expected = pd.concat(kept, names=["run"]).reset_index()[["run", "round", "objective", "E_s"]]
    expected["run"] = expected["run"].astype(str)
    expected.insert(1, "curve", pd.Series([name.split("/")[0] for name in expected["run"]], index=expected.index))
    expected.insert(2, "seed", expected["run"].str.rsplit("seed=").str[1].astype("Int64"))
    pd.testing.assert_frame_equal(frame, expected)
    assert (frame["round"] > 0).all() and frame["objective"].notna().all()
    plain = runs.to_pandas(["objective"], labels=False)
    assert list(plain.columns) == ["run", "round", "objective"]


def test_to_pandas_labels_across_different_names():
    h = _run("FedAdam", [3.0, 2.0], "E_p", [1.0])
    runs = RunSet({"d=16/FedAdam/seed=0": h, "d=32/FedAdam/seed=0": h, "linear map": History("linear")})
    frame = runs.to_pandas(["objective"])
    assert list(frame.columns) == ["run", "d", "curve", "seed", "round", "objective"]
    assert frame["d"].tolist() == [16, 16, 32, 32, pd.NA] and str(frame["d"].dtype) == "Int64"
    assert frame["curve"].tolist() == ["FedAdam"] * 4 + ["linear map"]
    # a run with no record still has its initial row (with no objective)
    assert frame["round"].tolist() == [0, 1, 0, 1, 0] and pd.isna(frame["objective"].iloc[-1])


def test_to_pandas_refusals_and_empty_set():
    runs = _runset()
    with pytest.raises(KeyError, match="loss"):
        runs.to_pandas(["objective", "loss"])
    with pytest.raises(TypeError, match="columns"):
        runs.to_pandas("objective")
    clash = RunSet({"FedMM/t=3": _run("FedMM", [1.0, 1.0], "E_s", [1.0])})
    with pytest.raises(ValueError, match=r"\['t'\].*labels=False"):
        clash.to_pandas()
    assert "t" in clash.to_pandas(labels=False)
    empty = RunSet().to_pandas()
    assert list(empty.columns) == ["run", "round"] and len(empty) == 0


def test_to_pandas_of_a_loaded_file(tmp_path):
    import fedmm

    runs = _runset()
    runs.save(tmp_path / "runs.json")
    pd.testing.assert_frame_equal(fedmm.load(tmp_path / "runs.json").to_pandas(), runs.to_pandas())


# --------------------------------------------------------------------------- plot
def _mean_std(curves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = np.vstack(curves)
    keep = np.isfinite(rows).any(axis=0)
    mean = np.nanmean(rows[:, keep], axis=0)
    std = np.nanstd(rows[:, keep], axis=0)
    return np.flatnonzero(keep).astype(float), mean, std


def test_plot_by_default_draws_the_mean_and_band_of_each_curve_over_its_seeds():
    runs = _runset()
    ax = runs.plot("objective", ax=_axes())
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["FedMM (2 runs)", "ParameterAveraging (2 runs)"]
    for line, curve in zip(lines, ("FedMM", "ParameterAveraging")):
        x, mean, std = _mean_std([runs[f"{curve}/seed={s}"].series("objective") for s in (0, 1)])
        np.testing.assert_array_equal(line.get_xdata(), x)  # rounds 0, 1, 3: round 2 was not evaluated
        np.testing.assert_allclose(line.get_ydata(), mean)
        assert x.tolist() == [0.0, 1.0, 3.0]
    # one shaded band per curve, from mean - std to mean + std
    bands = ax.collections
    assert len(bands) == 2
    x, mean, std = _mean_std([runs[f"FedMM/seed={s}"].series("objective") for s in (0, 1)])
    vertices = bands[0].get_paths()[0].vertices
    for xi, lo, hi in zip(x, mean - std, mean + std):
        ys = vertices[np.isclose(vertices[:, 0], xi), 1]
        assert ys.min() == pytest.approx(lo) and ys.max() == pytest.approx(hi)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["FedMM (2 runs)", "ParameterAveraging (2 runs)"]
    assert ax.get_xlabel() == "communication rounds completed" and ax.get_ylabel().startswith("objective")


def test_plot_one_line_per_run_and_by_label():
    runs = _runset()
    ax = runs.plot("E_s", x="wall_time", by=None, ax=_axes(), marker="o")
    # E_s is recorded by FedMM only: two lines, each the run's own values (the θ_0 row has no E_s)
    assert [line.get_label() for line in ax.get_lines()] == ["FedMM/seed=0", "FedMM/seed=1"]
    for line, name in zip(ax.get_lines(), ("FedMM/seed=0", "FedMM/seed=1")):
        np.testing.assert_allclose(line.get_xdata(), runs[name].column("wall_time"))
        np.testing.assert_array_equal(line.get_ydata(), runs[name].column("E_s"))
        assert line.get_marker() == "o"
    assert len(ax.collections) == 0 and ax.get_yscale() == "linear"
    ax = runs.plot("objective", by="seed", ax=_axes(), band=False)
    assert [line.get_label() for line in ax.get_lines()] == ["seed=0 (2 runs)", "seed=1 (2 runs)"]
    _, mean, _ = _mean_std([runs[f"{c}/seed=1"].series("objective") for c in ("FedMM", "ParameterAveraging")])
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), mean)
    assert len(ax.collections) == 0


def test_plot_a_single_run_per_group_is_drawn_as_history_plot_draws_it():
    runs = RunSet({"FedMM/seed=0": _run("FedMM", [8.0, 4.0, 2.0], "E_s", [100.0, 10.0, 1.0])})
    ours = runs.plot("E_s", ax=_axes())
    theirs = runs["FedMM/seed=0"].plot("E_s", ax=_axes())
    (a,), (b,) = ours.get_lines(), theirs.get_lines()
    np.testing.assert_array_equal(a.get_xydata(), b.get_xydata())
    assert a.get_label() == "FedMM" and ours.get_yscale() == theirs.get_yscale() == "log"


def test_plot_refusals():
    runs = _runset()
    with pytest.raises(KeyError, match="loss"):
        runs.plot("loss", ax=_axes())
    with pytest.raises(ValueError, match="x='round'"):
        runs.plot("objective", x="wall_time", ax=_axes())
    with pytest.raises(ValueError, match="'d'"):
        runs.plot("objective", by="d", ax=_axes())
    with pytest.raises(TypeError, match="'by'"):
        runs.plot("objective", by=3, ax=_axes())
    with pytest.raises(TypeError, match="logy"):
        runs.plot("objective", logy="yes", ax=_axes())


def test_plot_writes_a_readable_figure(tmp_path):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = _runset().plot("objective", ax=fig.add_subplot())
    fig.tight_layout()
    fig.savefig(tmp_path / "runset.png", dpi=80)
    assert (tmp_path / "runset.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and ax.get_legend() is not None
