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
