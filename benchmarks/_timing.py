# SPDX-License-Identifier: BSD-3-Clause
"""Reading a pytest-benchmark result in a way that survives ``--benchmark-disable`` smoke runs."""


def median_seconds(benchmark):
    """The benchmark's median time in seconds, or None when timing is off (``--benchmark-disable``:
    the function ran once, untimed)."""
    return None if benchmark.stats is None else benchmark.stats.stats.median


def per_second(count, benchmark):
    """``count`` per median second, or None when timing is off."""
    median = median_seconds(benchmark)
    return None if median is None else count / median


#: ``extra_info`` keys read by ``benchmarks/regression.py`` (see its docstring).
RATIO = "reference_ratio"
ROLE = "ratio_role"
KEY = "ratio_key"


def tag_ratio(benchmark, role, key=None):
    """Tag this row for the regression ratio: ``role`` is ``'fedmm'`` (a row the regression command
    checks) or ``'reference'`` (the NumPy/SciPy/scikit-learn yardstick of the same run); the rows of a
    ``key`` (default: the benchmark's group) are paired, and each ``'fedmm'`` row's ratio is its median
    over the reference row's median."""
    if role not in ("fedmm", "reference"):
        raise ValueError(f"role must be 'fedmm' or 'reference', got {role!r}")
    benchmark.extra_info[ROLE] = role
    benchmark.extra_info[KEY] = key if key is not None else benchmark.group


def record_ratio(benchmark, ratio):
    """Record a ratio the benchmark measured itself (fedmm time over its reference's time in the same run,
    ideally interleaved call by call); larger means fedmm got slower.  None (timing off) records nothing."""
    if ratio is not None:
        benchmark.extra_info[RATIO] = float(ratio)
