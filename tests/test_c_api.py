# SPDX-License-Identifier: BSD-3-Clause
"""The C API is usable without Python: compile and run a small C program that
includes ``fedmm_kernels.h`` and links ``libfedmm_kernels.a``."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import fedmm

SOURCE = Path(__file__).parent / "c_api" / "quantize_demo.c"


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) on PATH")
    return cc


def test_header_and_library_are_installed():
    assert Path(fedmm.get_include(), "fedmm_kernels.h").is_file()
    assert Path(fedmm.get_library_dir(), "libfedmm_kernels.a").is_file()


def test_c_program_quantizes_with_its_own_generator(tmp_path):
    exe = tmp_path / "quantize_demo"
    cmd = [
        _compiler(), "-std=c99", "-O1", "-Wall", "-Werror",
        "-I", fedmm.get_include(), str(SOURCE),
        "-L", fedmm.get_library_dir(), "-lfedmm_kernels", "-lm", "-o", str(exe),
    ]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
