# SPDX-License-Identifier: BSD-3-Clause
"""The ``fedmm demo`` command (small sizes)."""
import os

import json

import numpy as np

import fedmm
from fedmm.cli import main


def test_demo_writes_histories_plot_and_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    status = main(["demo", "--out", str(out), "--rounds", "6", "--samples", "240", "--clients", "4",
                   "--no-progress"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "FedMM" in printed and "ParameterAveraging" in printed and "client-rounds/s" in printed
    runs = fedmm.load(out / "demo.json")
    assert isinstance(runs, fedmm.RunSet) and list(runs) == ["FedMM/seed=0", "ParameterAveraging/seed=0"]
    fed, naive = runs["FedMM/seed=0"], runs["ParameterAveraging/seed=0"]
    table = json.loads((out / "demo_summary.json").read_text())
    assert [row["run"] for row in table["rows"]] == ["FedMM (seed 0)", "ParameterAveraging (seed 0)"]
    final = fed.column("objective")[np.isfinite(fed.column("objective"))][-1]
    assert float(table["rows"][0]["objective"]) == np.round(final, 5)
    assert len(fed) == len(naive) == 6
    assert {"E_s", "E_ps", "objective"} <= set(fed.keys()) and {"E_p", "E_sp"} <= set(naive.keys())
    assert all(len(r["active"]) <= 2 for r in fed.records)
    assert np.isfinite(fed.column("objective")[-1])
    with open(out / "demo.png", "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(out / "demo.png") > 10_000


def test_cli_without_command_prints_help(capsys):
    assert main([]) == 2
    assert "demo" in capsys.readouterr().err
