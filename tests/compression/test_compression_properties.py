# SPDX-License-Identifier: BSD-3-Clause
"""Property-based tests (hypothesis) of the compressors and of the decoder."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedmm.compression import BlockQuantizer, Identity, StochasticRounding, decode

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

compressors = st.one_of(
    st.builds(
        BlockQuantizer,
        block_size=st.one_of(st.none(), st.integers(1, 300)),
        norm=st.sampled_from([2, "inf"]),
    ),
    st.builds(
        StochasticRounding,
        bits=st.integers(2, 16),
        norm=st.sampled_from([2, "inf"]),
        block_size=st.one_of(st.none(), st.integers(1, 300)),
    ),
    st.just(Identity()),
)


@st.composite
def vectors(draw):
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    n = draw(st.integers(1, 400))
    bound = 2.0**1000 if dtype == np.float64 else float(np.finfo(np.float32).max)
    elements = st.floats(-bound, bound, allow_nan=False, allow_infinity=False,
                         width=64 if dtype == np.float64 else 32)
    return draw(arrays(dtype, n, elements=elements))


def _bits_equal(a, b):
    return a.dtype == b.dtype == np.float64 and np.array_equal(a.view(np.uint64), b.view(np.uint64))


@SETTINGS
@given(comp=compressors, x=vectors(), seed=st.integers(0, 2**32 - 1))
def test_round_trip_equals_fused_quantize(comp, x, seed):
    payload = comp.encode(x, np.random.default_rng(seed))
    assert len(payload) == comp.payload_nbytes(x.shape[0], dtype=x.dtype)
    decoded = comp.decode(payload)
    assert _bits_equal(decoded, comp.quantize(x, np.random.default_rng(seed)))
    assert np.all(np.isfinite(decoded))
    # the sign is kept; quantizers map zeros to +0.0 (Identity keeps -0.0)
    nz = decoded != 0
    assert np.all(np.sign(decoded[nz]) == np.sign(x[nz]))
    if not isinstance(comp, Identity):
        assert not np.any(np.signbit(decoded[x == 0]))


@st.composite
def valid_payloads(draw):
    comp = draw(compressors)
    x = draw(vectors())
    return comp.encode(x, draw(st.integers(0, 2**32 - 1)))


def _decode_or_value_error(data: bytes):
    try:
        out = decode(data)
    except ValueError:
        return None
    assert out.dtype == np.float64 and out.ndim == 1
    assert np.all(np.isfinite(out))
    return out


@SETTINGS
@given(data=st.binary(max_size=200))
def test_decoder_on_random_bytes_only_raises_value_error(data):
    _decode_or_value_error(data)


@SETTINGS
@given(data=st.binary(min_size=0, max_size=120))
def test_decoder_on_random_bytes_with_valid_magic(data):
    _decode_or_value_error(b"FMMQ\x01" + data)


@SETTINGS
@given(payload=valid_payloads(), cut=st.integers(0, 10**6))
def test_decoder_on_truncated_payloads(payload, cut):
    cut = cut % len(payload)  # strictly shorter
    assert _decode_or_value_error(payload[:cut]) is None


@SETTINGS
@given(payload=valid_payloads(), flips=st.lists(st.integers(0, 10**7), min_size=1, max_size=4))
def test_decoder_on_bit_flipped_payloads(payload, flips):
    corrupted = bytearray(payload)
    for f in flips:
        pos = f % (8 * len(payload))
        corrupted[pos // 8] ^= 1 << (pos % 8)
    out = _decode_or_value_error(bytes(corrupted))
    if out is not None:
        q = int.from_bytes(bytes(corrupted[16:24]), "little")
        assert out.shape == (q,)
