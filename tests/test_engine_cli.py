# SPDX-License-Identifier: BSD-3-Clause
"""The ``fedmm demo`` command (small sizes)."""
import os

import numpy as np

from fedmm import History
from fedmm.cli import main


def test_demo_writes_histories_plot_and_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    status = main(["demo", "--out", str(out), "--rounds", "6", "--samples", "240", "--clients", "4",
                   "--no-progress"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "FedMM" in printed and "ParameterAveraging" in printed and "client-rounds/s" in printed
    fed = History.load(out / "FedMM.json")
    naive = History.load(out / "ParameterAveraging.json")
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
