# SPDX-License-Identifier: BSD-3-Clause
"""Benchmarks reuse the NumPy references of tests/reference.py (one copy only)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))
