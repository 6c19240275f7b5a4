# SPDX-License-Identifier: BSD-3-Clause
"""The optimal-transport commands without their optional extra (runs whether or not JAX is installed)."""
from __future__ import annotations

import sys

import pytest

from reference import cli_status


@pytest.mark.parametrize("command", ["ot", "ot-ablation", "ot-pair"])
def test_ot_commands_without_the_ot_extra_exit_2_saying_which_extra(command, monkeypatch, tmp_path, capsys):
    # optax missing (a None entry in sys.modules makes its import fail): the command names the extra to install
    # and exits 2, before it creates anything
    monkeypatch.setitem(sys.modules, "optax", None)
    out = tmp_path / "out"
    assert cli_status(["experiment", command, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"fedmm experiment {command} needs the 'ot' extra" in err and "pip install 'fedmm[ot]'" in err
    assert "Traceback" not in err
