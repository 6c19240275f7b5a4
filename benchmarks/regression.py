# SPDX-License-Identifier: BSD-3-Clause
"""Benchmark regression check on a noisy machine: compare same-run *ratios*, not absolute times.

A benchmark's absolute median moves with the machine's load (identical code run twice on a shared
2-core host moved medians by up to +117%), so comparing medians across runs cries wolf.  Each
checked benchmark instead records its ratio to a reference timed in the same run, which sees the
same load:

- ``extra_info["reference_ratio"]``: a ratio the benchmark measured itself (fedmm time over its
  reference's time, interleaved call by call where the benchmark does so), or
- ``extra_info["ratio_role"]`` / ``["ratio_key"]`` (set by ``_timing.tag_ratio``): a ``'fedmm'`` row's
  ratio is its median over the median of the ``'reference'`` row (NumPy, SciPy, scikit-learn or the
  previous implementation) with the same key in the same run.

Rows with neither (the references themselves, and benchmarks without a reference) are not compared.
The committed baseline (``benchmarks/baseline.json``) holds the ratios only, with the machine and the
command that made it.  A row is flagged when its ratio grew by more than the threshold over the
baseline: ``current / baseline > 1 + threshold``.  Faster rows are reported, never flagged.

Usage (from the repository root)::

    python -m benchmarks.regression run                     # the whole suite, then compare
    python -m benchmarks.regression run -- -k psd           # a subset (extra pytest arguments)
    python -m benchmarks.regression compare benchmarks/baseline.json RUN.json
    python -m benchmarks.regression baseline RUN1.json [RUN2.json ...] -o benchmarks/baseline.json

The exit status is 1 when a row is flagged (or the run itself failed), 0 otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: Default threshold: flag a ratio that grew by more than this fraction over the baseline (i.e. to more
#: than 5x its baseline).  Measured on the shared 2-core development host (load average ~7), two runs of
#: identical code moved the 87 compared ratios by a median 30%, a 90th percentile 91%, a 95th percentile
#: 138% and at most 250%; a third run moved one ratio (a 3-round q = 1e7 decode) +328% from their mean:
#: the threshold sits above that.  On a quieter machine, write its own baseline and pass a smaller
#: ``--threshold``.
THRESHOLD = 4.0
#: The committed baseline, next to this file.
BASELINE = Path(__file__).resolve().with_name("baseline.json")
#: Keys of ``extra_info`` (written by ``_timing.record_ratio`` / ``_timing.tag_ratio``).
RATIO, ROLE, KEY = "reference_ratio", "ratio_role", "ratio_key"
#: What ``run`` executes (its JSON output path is appended).
SUITE = ["-m", "pytest", "benchmarks", "--benchmark-only", "-p", "no:cacheprovider", "-q"]


def load(path):
    """The parsed pytest-benchmark JSON (``--benchmark-json``) or baseline at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read the benchmark file {str(path)!r}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not JSON ({exc}); expected a --benchmark-json file") from exc


def ratios(report):
    """``{fullname: ratio}`` of the rows of one pytest-benchmark JSON report that carry a ratio.

    Parameters
    ----------
    report : dict
        The parsed ``--benchmark-json`` file.

    Returns
    -------
    dict of str to float
        fedmm time over reference time in the same run, per benchmark (``fullname``).
    """
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise ValueError("report must be a pytest-benchmark JSON report (a dict with a 'benchmarks' list)")
    references, out = {}, {}
    for row in report["benchmarks"]:
        info = row.get("extra_info") or {}
        if info.get(ROLE) == "reference" and row.get("stats"):
            references[info.get(KEY)] = row["stats"]["median"]
    for row in report["benchmarks"]:
        info = row.get("extra_info") or {}
        if info.get(RATIO) is not None:
            value = float(info[RATIO])
        elif info.get(ROLE) == "fedmm" and row.get("stats") and references.get(info.get(KEY)):
            value = row["stats"]["median"] / references[info[KEY]]
        else:
            continue
        if math.isfinite(value) and value > 0:
            out[row["fullname"]] = value
    return out


def make_baseline(reports, command=None):
    """A baseline from one or more reports of the same code: per row, the geometric mean of its ratios,
    and ``spread`` (the largest ``max/min - 1`` of a row's ratios over the reports, when there are several)."""
    if not reports:
        raise ValueError("reports must hold at least one pytest-benchmark JSON report")
    per_run = [ratios(r) for r in reports]
    names = sorted(set().union(*per_run))
    values = {name: [run[name] for run in per_run if name in run] for name in names}
    baseline = {
        "description": "Same-run ratios (fedmm time / reference time) of benchmarks/; see benchmarks/regression.py",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {k: reports[0].get("machine_info", {}).get(k) for k in ("node", "processor", "machine", "system",
                                                                            "release", "python_version")},
        "cpu": (reports[0].get("machine_info", {}).get("cpu") or {}).get("brand_raw"),
        "commit": (reports[0].get("commit_info") or {}).get("id"),
        "command": command,
        "runs": len(reports),
        "threshold": THRESHOLD,
        "ratios": {n: math.prod(v) ** (1 / len(v)) for n, v in values.items()},
    }
    if len(reports) > 1:
        spreads = {n: max(v) / min(v) - 1 for n, v in values.items() if len(v) > 1}
        baseline["spread"] = spreads
        baseline["max_spread"] = max(spreads.values(), default=0.0)
    return baseline


def compare(baseline, report, threshold=None):
    """Rows of ``report`` against ``baseline``: a list of ``(name, baseline ratio, current ratio, change, flagged)``
    sorted by decreasing change, and the baseline rows missing from the report.

    ``change = current / baseline - 1``; a row is flagged when ``change > threshold`` (default: the
    baseline's ``threshold``, else :data:`THRESHOLD`).
    """
    if not isinstance(baseline, dict) or not isinstance(baseline.get("ratios"), dict):
        raise ValueError("baseline must be a dict with a 'ratios' mapping (benchmarks/baseline.json)")
    threshold = baseline.get("threshold", THRESHOLD) if threshold is None else threshold
    if not (isinstance(threshold, (int, float)) and threshold > 0):
        raise ValueError(f"threshold must be a positive number, got {threshold!r}")
    current = ratios(report)
    rows = []
    for name, base in baseline["ratios"].items():
        if name in current:
            change = current[name] / base - 1
            rows.append((name, base, current[name], change, change > threshold))
    rows.sort(key=lambda r: -r[3])
    missing = sorted(set(baseline["ratios"]) - set(current))
    return rows, missing


def _print(rows, missing, threshold, out=None):
    out = sys.stdout if out is None else out
    flagged = [r for r in rows if r[4]]
    print(f"{len(rows)} ratios compared, threshold +{threshold:.0%}: {len(flagged)} flagged", file=out)
    if rows:
        changes = [r[3] for r in rows]
        print(f"change of the ratios: min {min(changes):+.1%}, median {sorted(changes)[len(changes) // 2]:+.1%}, "
              f"max {max(changes):+.1%}", file=out)
    for name, base, cur, change, flag in rows[:10] if not flagged else flagged:
        print(f"  {'SLOWER' if flag else '      '} {change:+8.1%}  {base:10.4g} -> {cur:10.4g}  {name}", file=out)
    if missing:
        print(f"{len(missing)} baseline rows not in this run (skipped or deselected)", file=out)


def _run_suite(pytest_args, json_path):
    cmd = [sys.executable, *SUITE, f"--benchmark-json={json_path}", *pytest_args]
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    print("$ python " + " ".join(cmd[1:]), flush=True)
    return subprocess.run(cmd, env=env).returncode


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.regression", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the benchmark suite and compare its ratios with the baseline")
    p_run.add_argument("--baseline", default=str(BASELINE))
    p_run.add_argument("--threshold", type=float)
    p_run.add_argument("--json", help="keep the run's pytest-benchmark JSON here")
    p_run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    p_cmp = sub.add_parser("compare", help="compare a --benchmark-json report with a baseline")
    p_cmp.add_argument("baseline")
    p_cmp.add_argument("report")
    p_cmp.add_argument("--threshold", type=float)
    p_base = sub.add_parser("baseline", help="write a baseline from one or more --benchmark-json reports")
    p_base.add_argument("reports", nargs="+")
    p_base.add_argument("-o", "--output", default=str(BASELINE))
    p_base.add_argument("--made-by", default="python -m pytest benchmarks --benchmark-only --benchmark-json=RUN.json",
                        help="the command that produced the reports (recorded in the baseline)")
    args = parser.parse_args(argv)

    if args.command == "baseline":
        baseline = make_baseline([load(p) for p in args.reports], command=args.made_by)
        Path(args.output).write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{len(baseline['ratios'])} ratios from {len(args.reports)} run(s) written to {args.output}"
              + (f"; largest spread between the runs +{baseline['max_spread']:.1%}" if "max_spread" in baseline
                 else ""))
        return 0
    baseline = load(args.baseline)
    threshold = args.threshold if args.threshold is not None else baseline.get("threshold", THRESHOLD)
    status = 0
    if args.command == "compare":
        report = load(args.report)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            json_path = args.json or os.path.join(tmp, "run.json")
            status = _run_suite(args.pytest_args, json_path)
            if not os.path.exists(json_path):
                print(f"the benchmark run wrote no report (pytest exit status {status})")
                return 1
            report = load(json_path)
    rows, missing = compare(baseline, report, threshold)
    _print(rows, missing, threshold)
    if status:
        print(f"the benchmark run itself failed (pytest exit status {status})")
    return 1 if status or any(r[4] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
