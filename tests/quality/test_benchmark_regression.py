# SPDX-License-Identifier: BSD-3-Clause
"""The benchmark regression workflow (benchmarks/regression.py): same-run ratios, baseline, threshold.

The compare logic runs on synthetic pytest-benchmark reports; one small real run of
benchmarks/bench_psd.py checks that a kernel slowed by a monkeypatch is flagged (no wall-clock
limit is asserted: the slowed kernel spins for nine times its own duration, so its ratio grows
about tenfold, past the +400% threshold)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("benchmark_regression", ROOT / "benchmarks" / "regression.py")
regression = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regression)


def _row(name, median, **info):
    return {"fullname": name, "name": name, "group": "g", "extra_info": info,
            "stats": {"median": median, "rounds": 5}}


def _report(fedmm=2.0, numpy=1.0, own_ratio=3.0, machine="host"):
    return {"machine_info": {"node": machine}, "commit_info": {"id": "abc"}, "benchmarks": [
        _row("kernel[fedmm]", fedmm, ratio_role="fedmm", ratio_key="k"),
        _row("kernel[fedmm-out]", fedmm / 2, ratio_role="fedmm", ratio_key="k"),
        _row("kernel[numpy]", numpy, ratio_role="reference", ratio_key="k"),
        _row("paired", 10.0, reference_ratio=own_ratio),
        _row("unreferenced", 5.0),
    ]}


def test_ratios_pair_rows_by_key_and_read_recorded_ratios():
    assert regression.ratios(_report()) == {"kernel[fedmm]": 2.0, "kernel[fedmm-out]": 1.0, "paired": 3.0}


def test_ratios_cancel_a_uniform_slowdown_of_the_machine():
    # a loaded machine slows fedmm and its reference alike: the ratios do not move, nothing is flagged
    base = regression.make_baseline([_report()])
    rows, missing = regression.compare(base, _report(fedmm=40.0, numpy=20.0))
    assert not missing and not any(r[4] for r in rows)
    assert all(abs(r[3]) < 1e-12 for r in rows if r[0].startswith("kernel"))


def test_identical_reports_flag_nothing():
    report = _report()
    rows, missing = regression.compare(regression.make_baseline([report]), report)
    assert len(rows) == 3 and not missing
    assert [r[3] for r in rows] == [0.0, 0.0, 0.0] and not any(r[4] for r in rows)


def test_a_slower_kernel_is_flagged_and_a_faster_one_is_not():
    base = regression.make_baseline([_report()])
    rows, _ = regression.compare(base, _report(fedmm=12.0))  # fedmm 6x as slow, reference unchanged
    flagged = {r[0] for r in rows if r[4]}
    assert flagged == {"kernel[fedmm]", "kernel[fedmm-out]"}
    rows, _ = regression.compare(base, _report(fedmm=1.0, own_ratio=1.0))
    assert not any(r[4] for r in rows) and min(r[3] for r in rows) < 0
    rows, _ = regression.compare(base, _report(own_ratio=3.0 * 1.5), threshold=0.4)
    assert {r[0] for r in rows if r[4]} == {"paired"}
    rows, _ = regression.compare(base, _report(own_ratio=3.0 * 1.3), threshold=0.4)
    assert not any(r[4] for r in rows)


def test_baseline_averages_runs_and_records_spread_and_provenance():
    base = regression.make_baseline([_report(fedmm=2.0), _report(fedmm=8.0)], command="the command")
    assert base["ratios"]["kernel[fedmm]"] == pytest.approx(4.0)  # geometric mean of 2 and 8
    assert base["spread"]["kernel[fedmm]"] == pytest.approx(3.0)
    assert base["command"] == "the command" and base["machine"]["node"] == "host" and base["commit"] == "abc"
    assert base["threshold"] == regression.THRESHOLD and base["runs"] == 2


def test_missing_reference_and_missing_rows():
    report = _report()
    report["benchmarks"] = [r for r in report["benchmarks"] if r["fullname"] != "kernel[numpy]"]
    assert set(regression.ratios(report)) == {"paired"}
    rows, missing = regression.compare(regression.make_baseline([_report()]), report)
    assert [r[0] for r in rows] == ["paired"] and missing == ["kernel[fedmm-out]", "kernel[fedmm]"]


def test_refusals_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="report"):
        regression.ratios({"nothing": []})
    with pytest.raises(ValueError, match="baseline"):
        regression.compare({"no": 1}, _report())
    with pytest.raises(ValueError, match="threshold"):
        regression.compare(regression.make_baseline([_report()]), _report(), threshold=-1)
    with pytest.raises(ValueError, match="reports"):
        regression.make_baseline([])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        regression.load(bad)


def test_cli_compare_exit_status(tmp_path, capsys):
    base, same, slow = tmp_path / "base.json", tmp_path / "same.json", tmp_path / "slow.json"
    same.write_text(json.dumps(_report()))
    slow.write_text(json.dumps(_report(fedmm=12.0)))
    assert regression.main(["baseline", str(same), "-o", str(base)]) == 0
    assert regression.main(["compare", str(base), str(same)]) == 0
    assert "0 flagged" in capsys.readouterr().out
    assert regression.main(["compare", str(base), str(slow)]) == 1
    out = capsys.readouterr().out
    assert "2 flagged" in out and "SLOWER" in out and "kernel[fedmm]" in out


def test_committed_baseline_is_well_formed():
    base = regression.load(regression.BASELINE)
    assert base["ratios"] and all(v > 0 for v in base["ratios"].values())
    assert base["command"] and base["machine"] and base["threshold"] == regression.THRESHOLD


SLOWDOWN_PLUGIN = textwrap.dedent('''
    import time

    def pytest_collection_modifyitems(items):
        for module in {item.module for item in items}:
            kernel = module.project_psd

            def slowed(*args, **kwargs):
                start = time.perf_counter()
                out = kernel(*args, **kwargs)
                spin_until = time.perf_counter() + 49 * (time.perf_counter() - start)  # 50x: far past any noise
                while time.perf_counter() < spin_until:
                    pass
                return out

            module.project_psd = slowed
''')


def _bench_psd(tmp_path, name, *plugin):
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "benchmarks/bench_psd.py", "-k", "test_project_psd and 50-psd-",
           "--benchmark-only", "-p", "no:cacheprovider", "-q", "--benchmark-min-rounds=20",
           "--benchmark-max-time=0.2", f"--benchmark-json={out}", *plugin]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return regression.load(out)


@pytest.mark.slow
def test_real_run_flags_a_monkeypatched_slowdown(tmp_path):
    (tmp_path / "slowdown_plugin.py").write_text(SLOWDOWN_PLUGIN)
    first = _bench_psd(tmp_path, "first")
    assert len(regression.ratios(first)) == 1  # the fedmm row, over its NumPy row of the same run
    baseline = regression.make_baseline([first])
    rows, _ = regression.compare(baseline, first)
    assert not any(r[4] for r in rows)
    rows, missing = regression.compare(baseline, _bench_psd(tmp_path, "slowed", "-p", "slowdown_plugin"))
    assert not missing and [r[4] for r in rows] == [True], rows
