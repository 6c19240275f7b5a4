# SPDX-License-Identifier: BSD-3-Clause
"""ruff over the package, the tests, the benchmarks, the examples and the docs' configuration.

The rule set and the line length are in ``[tool.ruff]`` of ``pyproject.toml`` (pyflakes ``F``: undefined
names, unused imports and variables, redefinitions; pycodestyle ``E``/``W``: syntax-level errors,
whitespace, line length).  Any finding fails the test with ruff's own report.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["python", "tests", "benchmarks", "examples", "docs"]


def test_ruff_finds_nothing():
    if not (ROOT / "pyproject.toml").is_file():  # pragma: no cover - tests run outside a checkout
        pytest.skip("not in a source checkout")
    pytest.importorskip("ruff", reason="ruff is in the 'test' extra: pip install '.[test]'")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
         *[t for t in TARGETS if (ROOT / t).exists()]],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"ruff check failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
