# SPDX-License-Identifier: BSD-3-Clause
"""Compression kernels against the obvious vectorized NumPy implementation.

Each group holds fedmm and the NumPy reference (``np.random.Generator`` for the
rounding, ``np.packbits``/``np.unpackbits`` for the bits; tests/reference.py)
for the same operator, sizes and block size, timed in the same run:

    python -m pytest benchmarks/bench_compression.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=median,rounds

``extra_info['Gcoord_per_s']`` is q / median.  The q = 1e7 cases run few rounds.
"""
from __future__ import annotations

import numpy as np
import pytest

from fedmm.compression import BlockQuantizer, StochasticRounding, decode

from _timing import per_second, tag_ratio
from reference import numpy_decode, numpy_dither_encode

CASES = [
    (q, block, bits)
    for q in (10_000, 1_000_000, 10_000_000)
    for block in (256, 4096, None)
    for bits in (2,)
] + [(1_000_000, 256, 8), (1_000_000, None, 8)]


def _run(benchmark, fn, q):
    if q >= 10_000_000:
        result = benchmark.pedantic(fn, rounds=3, iterations=1, warmup_rounds=1)
    elif q >= 1_000_000:
        result = benchmark.pedantic(fn, rounds=10, iterations=1, warmup_rounds=1)
    else:
        result = benchmark(fn)
    rate = per_second(q, benchmark)
    benchmark.extra_info["Gcoord_per_s"] = None if rate is None else rate / 1e9
    return result


def _setup(q, block, bits):
    x = np.random.default_rng(0).standard_normal(q)
    comp = BlockQuantizer(block, 2) if bits == 2 else StochasticRounding(bits, 2, block)
    return x, comp, (q if block is None else block), (1 if bits == 2 else 2)


def _name(kind, q, block, bits):
    return f"{kind} q={q:.0e} block={block or 'whole'} bits={bits}"


@pytest.mark.parametrize("impl", ["fedmm", "numpy"])  # outermost: a case's rows run one after the other
@pytest.mark.parametrize("q, block, bits", CASES)
def bench_encode(benchmark, impl, q, block, bits):
    x, comp, b, scheme = _setup(q, block, bits)
    benchmark.group = _name("encode", q, block, bits)
    rng = np.random.default_rng(1)
    if impl == "fedmm":
        payload = _run(benchmark, lambda: comp.encode(x, rng), q)
    else:
        payload = _run(benchmark, lambda: numpy_dither_encode(x, bits, b, 2, rng, scheme), q)
    assert len(payload) == comp.payload_nbytes(q)
    tag_ratio(benchmark, "reference" if impl == "numpy" else "fedmm")


@pytest.mark.parametrize("impl", ["fedmm", "fedmm-out", "numpy"])
@pytest.mark.parametrize("q, block, bits", CASES)
def bench_decode(benchmark, impl, q, block, bits):
    x, comp, _, _ = _setup(q, block, bits)
    benchmark.group = _name("decode", q, block, bits)
    payload = comp.encode(x, 1)
    if impl == "fedmm":
        values = _run(benchmark, lambda: decode(payload), q)
    elif impl == "fedmm-out":  # into a preallocated array: no page faults
        from fedmm.kernels import unpack

        out = np.empty(q)
        values = _run(benchmark, lambda: unpack(payload, out=out), q)
    else:
        values = _run(benchmark, lambda: numpy_decode(payload), q)
    assert values.shape == (q,)
    tag_ratio(benchmark, "reference" if impl == "numpy" else "fedmm")
