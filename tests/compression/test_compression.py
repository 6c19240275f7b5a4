# SPDX-License-Identifier: BSD-3-Clause
"""Compressors: unbiasedness, Lemma 5, variance bounds, wire format, edge cases."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fedmm.compression import BlockQuantizer, Identity, StochasticRounding, decode
from fedmm.kernels import pack, quantize_blockp, quantize_dither, unpack, wire_header
from reference import (
    block_norms,
    block_slices,
    dither_moments,
    lemma5_error,
    numpy_decode,
    numpy_dither_encode,
    replica_dither,
)

COMPRESSORS = [
    BlockQuantizer(block_size=None, norm=2),
    BlockQuantizer(block_size=7, norm="inf"),
    BlockQuantizer(block_size=256, norm=2),
    StochasticRounding(bits=2, norm="inf", block_size=5),
    StochasticRounding(bits=3, norm=2, block_size=None),
    StochasticRounding(bits=8, norm=2, block_size=64),
    StochasticRounding(bits=8, norm="inf", block_size=13),
    StochasticRounding(bits=11, norm=2, block_size=9),
    StochasticRounding(bits=16, norm="inf", block_size=None),
]
IDS = [repr(c) for c in COMPRESSORS]


def _block(c, q):
    return q if c.block_size is None else min(c.block_size, q)


def _norm_key(c):
    return 2 if c._norm_code == 1 else "inf"


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float64 and np.array_equal(a.view(np.uint64), b.view(np.uint64))


# ---------------------------------------------------------------- unbiasedness


@pytest.mark.parametrize("comp", COMPRESSORS, ids=IDS)
def test_unbiased_within_four_standard_errors(comp):
    # Var(Q_j) = (N/s)^2 f(1-f) <= (N/s)^2 / 4, so M = 4000 draws give a
    # standard error <= N/(2 s sqrt(M)) ~ 0.008 N/s per coordinate; we test
    # |mean - x| <= 4 se_j with the exact se_j (and equality where se_j = 0).
    q, M = 40, 4000
    x = np.random.default_rng(11).standard_normal(q)
    x[3] = 0.0
    block = _block(comp, q)
    norms = block_norms(x, block, _norm_key(comp))
    _, var, _ = dither_moments(x, norms, block, comp.bits)
    rng = np.random.default_rng(12)
    total = np.zeros(q)
    for _ in range(M):
        total += comp.quantize(x, rng)
    mean = total / M
    se = np.sqrt(var / M)
    assert np.all(np.abs(mean - x) <= 4 * se + 1e-12 * np.abs(x))


def test_unbiased_large_vector_tiled():
    # M independent draws of Q(x) in one call: tile x M times with block = q.
    q, M = 32, 20000
    x = np.random.default_rng(3).standard_normal(q) * np.logspace(-3, 1, q)
    draws = quantize_blockp(np.tile(x, M), block_size=q, rng=4).reshape(M, q)
    norms = block_norms(x, q, 2)
    _, var, _ = dither_moments(x, norms, q, 2)
    assert np.all(np.abs(draws.mean(axis=0) - x) <= 4 * np.sqrt(var / M))


# ---------------------------------------------------------------- variance


@pytest.mark.parametrize("norm", [2, "inf"])
@pytest.mark.parametrize("block", [1, 8, 32])
def test_lemma5_variance_identity(norm, block):
    # E||Q(x)-x||^2 = sum_l (||x_l||_1 ||x_l||_p - ||x_l||^2) (FedEM Lemma 5).
    # The squared error of one draw has variance var_sq (exact, reference),
    # so the mean of M draws is within 4 sqrt(var_sq / M) of the identity.
    q, M = 32, 20000
    x = np.random.default_rng(5).standard_normal(q)
    target = lemma5_error(x, block, norm)
    draws = quantize_blockp(np.tile(x, M), block_size=block, norm=norm, rng=6)  # q % block == 0
    sq = ((draws.reshape(M, q) - x) ** 2).sum(axis=1)
    _, _, var_sq = dither_moments(x, block_norms(x, block, norm), block, 2)
    assert abs(sq.mean() - target) <= 4 * math.sqrt(var_sq / M) + 1e-12
    # the paper's constant: E||Q-x||^2 <= omega ||x||^2
    assert target <= BlockQuantizer(block, norm).variance_bound(q) * (x @ x) * (1 + 1e-12)


@pytest.mark.parametrize("bits", [3, 5, 8])
@pytest.mark.parametrize("norm", [2, "inf"])
def test_dither_variance_identity_and_bound(bits, norm):
    q, M, block = 48, 8000, 16
    x = np.random.default_rng(bits).standard_normal(q) ** 3
    comp = StochasticRounding(bits=bits, norm=norm, block_size=block)
    mse, _, var_sq = dither_moments(x, block_norms(x, block, norm), block, bits)
    draws = comp.quantize(np.tile(x, M), 9)  # blocks of 16 tile exactly
    sq = ((draws.reshape(M, q) - x) ** 2).sum(axis=1)
    assert abs(sq.mean() - mse) <= 4 * math.sqrt(var_sq / M) + 1e-12
    assert mse <= comp.variance_bound(q) * (x @ x)


@pytest.mark.parametrize("norm", [2, "inf"])
@pytest.mark.parametrize("bits", [2, 3, 8, 16])
def test_omega_bounds_exact_error_on_many_vectors(norm, bits):
    # E||Q-x||^2 (exact, from the reference) <= omega ||x||^2, including the
    # vectors that make the inf-norm bound of block-p tight.
    rng = np.random.default_rng(21)
    for q in (1, 2, 5, 17, 64):
        comp = StochasticRounding(bits=bits, norm=norm)
        cases = [rng.standard_normal(q), rng.standard_normal(q) ** 5, np.ones(q)]
        t = 1.0 / (math.sqrt(q) + 1.0)
        cases.append(np.r_[1.0, np.full(q - 1, t)])
        for x in cases:
            mse, _, _ = dither_moments(x, block_norms(x, q, norm), q, bits)
            assert mse <= comp.variance_bound(q) * (x @ x) * (1 + 1e-12) + 1e-300
    if bits == 2 and norm == "inf":
        q = 49
        x = np.r_[1.0, np.full(q - 1, 1.0 / (math.sqrt(q) + 1.0))]
        assert lemma5_error(x, q, "inf") == pytest.approx(BlockQuantizer(None, "inf").variance_bound(q) * (x @ x))


def test_omega_values():
    assert BlockQuantizer(None, 2).variance_bound(100) == pytest.approx(9.0)
    assert BlockQuantizer(25, 2).variance_bound(1000) == pytest.approx(4.0)
    assert BlockQuantizer(25, "inf").variance_bound(1000) == pytest.approx(2.0)
    assert StochasticRounding(8, 2).variance_bound(10**6) == pytest.approx(1000 / 127)
    assert StochasticRounding(8, 2).variance_bound(100) == pytest.approx(100 / (4 * 127**2))
    assert Identity().variance_bound(10) == 0.0


# ---------------------------------------------------------------- exactness


@pytest.mark.parametrize("comp", COMPRESSORS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_trip_bit_exact_and_payload_size(comp, dtype):
    for q in (1, 2, 7, 13, 100, 1000, 1031):
        x = (np.random.default_rng(q).standard_normal(q) * 10).astype(dtype)
        payload = comp.encode(x, np.random.default_rng(q + 1))
        assert isinstance(payload, bytes)
        assert len(payload) == comp.payload_nbytes(q, dtype=dtype)
        block = _block(comp, q)
        itemsize = np.dtype(dtype).itemsize
        assert len(payload) == 32 + -(-q // block) * itemsize + -(-q * comp.bits // 8)
        assert _bits_equal(comp.decode(payload), comp.quantize(x, np.random.default_rng(q + 1)))


def test_identity_round_trip_and_size():
    c = Identity()
    for dtype in (np.float64, np.float32):
        x = np.random.default_rng(0).standard_normal(33).astype(dtype)
        p = c.encode(x)
        assert len(p) == c.payload_nbytes(33, dtype=dtype) == 32 + 33 * np.dtype(dtype).itemsize
        assert _bits_equal(c.decode(p), x.astype(np.float64))
        assert _bits_equal(c.quantize(x, 0), x.astype(np.float64))
    with pytest.raises(ValueError, match="finite"):
        c.encode(np.array([1.0, np.nan]))


@pytest.mark.parametrize("bits", [2, 3, 8, 13, 16])
@pytest.mark.parametrize("block", [1, 5, 256, 300, None])
def test_sampling_matches_documented_replica(bits, block):
    # Independent replica of the documented stream consumption (reference.py):
    # identical values bit for bit, given the transmitted norms.
    q = 700
    x = np.random.default_rng(bits).standard_normal(q)
    x[40:60] = 0.0
    b = q if block is None else block
    payload = pack(x, bits, block_size=block, rng=np.random.Generator(np.random.PCG64(5)))
    m = -(-q // b)
    norms = np.frombuffer(payload, dtype="<f8", count=m, offset=32)
    np.testing.assert_allclose(norms, block_norms(x, b, 2), rtol=1e-14)
    ours = quantize_dither(x, bits, block_size=block, rng=np.random.Generator(np.random.PCG64(5)))
    replica = replica_dither(x, norms, b, bits, np.random.PCG64(5))
    assert _bits_equal(ours, replica)


@pytest.mark.parametrize("bits", [2, 5, 8, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_wire_format_interoperates_with_numpy_reference(bits, dtype):
    # A payload written by the NumPy reference (from docs/wire-format.md) is
    # accepted by our decoder, and ours decodes identically with the reference decoder.
    q, block = 999, 100
    x = np.random.default_rng(2).standard_normal(q).astype(dtype)
    theirs = numpy_dither_encode(x, bits, block, "inf", np.random.default_rng(3), scheme=2)
    assert _bits_equal(unpack(theirs), numpy_decode(theirs))
    ours = pack(x, bits, block_size=block, norm="inf", rng=4)
    assert len(ours) == len(theirs)
    assert _bits_equal(unpack(ours), numpy_decode(ours))
    hdr = wire_header(ours)
    assert hdr == {"version": 1, "scheme": 2, "value_nbytes": np.dtype(dtype).itemsize,
                   "norm": 2, "bits": bits, "q": q, "block": block}


def test_blockp_values_are_ternary_with_signs():
    x = np.random.default_rng(8).standard_normal(1000)
    v = quantize_blockp(x, block_size=100, rng=1)
    for sl, nrm in zip(block_slices(1000, 100), block_norms(x, 100, 2)):
        vals = v[sl]
        mags = np.unique(np.abs(vals[vals != 0]))
        assert mags.shape == (1,) and mags[0] == pytest.approx(nrm, rel=1e-14)
        assert np.all(np.sign(vals[vals != 0]) == np.sign(x[sl][vals != 0]))


def test_deterministic_for_a_seed_and_generator_advances():
    x = np.random.default_rng(0).standard_normal(500)
    c = StochasticRounding(4, block_size=50)
    assert _bits_equal(c.quantize(x, 3), c.quantize(x, 3))
    g = np.random.default_rng(3)
    first, second = c.quantize(x, g), c.quantize(x, g)
    assert not np.array_equal(first, second)


# ---------------------------------------------------------------- layouts and dtypes


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_memory_layouts_give_identical_results(dtype):
    mat = np.asfortranarray(np.random.default_rng(1).standard_normal((6, 50)).astype(dtype))
    row = mat[2]  # strided view of an F-ordered array
    col = mat[:, 3]  # contiguous column of an F-ordered array
    assert not row.flags.c_contiguous and col.flags.c_contiguous
    c = StochasticRounding(8, block_size=16)
    for v in (row, col, mat.T.copy(order="C")[3], np.ascontiguousarray(row[::-1])[::-1]):
        ref = c.quantize(np.ascontiguousarray(v), 2)
        assert _bits_equal(c.quantize(v, 2), ref)
        assert _bits_equal(c.decode(c.encode(v, 2)), ref)
    if dtype == np.float64:  # non-native byte order is converted once
        swapped = row.astype(row.dtype.newbyteorder(">"))
        assert _bits_equal(c.quantize(swapped, 2), c.quantize(np.ascontiguousarray(row), 2))


def test_float32_and_float64_agree_in_distribution():
    x32 = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    v32 = quantize_dither(x32, 8, rng=1)
    assert v32.dtype == np.float64
    nrm32 = float(np.float32(np.linalg.norm(x32.astype(np.float64))))
    assert np.all(np.abs(v32) <= nrm32 * (1 + 1e-15))
    M = 3000
    mean = quantize_dither(np.tile(x32, M), 8, block_size=64, rng=2).reshape(M, 64).mean(axis=0)
    _, var, _ = dither_moments(x32.astype(np.float64), np.array([nrm32]), 64, 8)
    assert np.all(np.abs(mean - x32) <= 4 * np.sqrt(var / M) + 1e-6 * np.abs(x32))


# ---------------------------------------------------------------- edge cases


@pytest.mark.parametrize("comp", COMPRESSORS, ids=IDS)
def test_zero_vector_and_zero_blocks(comp):
    g = np.random.default_rng(0)
    state = g.bit_generator.state
    z = np.zeros(20)
    assert _bits_equal(comp.quantize(z, g), np.zeros(20))
    assert g.bit_generator.state == state  # zero blocks draw no randomness
    assert _bits_equal(comp.decode(comp.encode(z, g)), np.zeros(20))
    x = np.random.default_rng(1).standard_normal(40)
    x[:13] = 0.0
    v = comp.quantize(x, 5)
    assert np.all(v[:13] == 0) and not np.any(np.signbit(v[:13]))


@pytest.mark.parametrize("comp", COMPRESSORS, ids=IDS)
def test_length_one_and_partial_last_block(comp):
    for val in (3.5, -2.0, 1e-300, -1e300):
        v = comp.quantize(np.array([val]), 0)
        np.testing.assert_allclose(v, [val], rtol=1e-15)  # |x| = N: level s exactly
    x = np.random.default_rng(2).standard_normal(23)
    v = comp.quantize(x, 1)
    for sl, nrm in zip(block_slices(23, _block(comp, 23)), block_norms(x, _block(comp, 23), _norm_key(comp))):
        assert np.all(np.abs(v[sl]) <= nrm * (1 + 1e-15))


def test_extreme_magnitudes():
    for x in (np.array([1e300, -1e300, 8e307]), np.array([5e-324, -1e-310, 0.0]),
              np.full(10, 2.0**1023)):
        for norm in (2, "inf"):
            v = quantize_dither(x, 8, norm=norm, rng=0)
            assert np.all(np.isfinite(v))
            p = pack(x, 8, norm=norm, rng=0)
            assert _bits_equal(unpack(p), v)
    big32 = np.full(4, np.finfo(np.float32).max, dtype=np.float32)
    assert np.all(np.isfinite(quantize_dither(big32, 8, rng=0)))
    with pytest.raises(ValueError, match="at most 2\\*\\*1023"):
        quantize_dither(np.array([1.0, 1e308]), 8, rng=0)


@pytest.mark.parametrize("comp", COMPRESSORS + [Identity()], ids=IDS + ["Identity"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_non_finite_input_raises(comp, bad, dtype):
    x = np.ones(300, dtype=dtype)
    x[299] = bad
    with pytest.raises(ValueError, match="finite"):
        comp.encode(x, 0)
    with pytest.raises(ValueError, match="finite"):
        comp.quantize(x, 0)


def test_argument_errors_name_the_argument():
    with pytest.raises(ValueError, match="'bits' in \\[2, 16\\]"):
        StochasticRounding(bits=17)
    with pytest.raises(ValueError, match="'norm'"):
        BlockQuantizer(norm=3)
    with pytest.raises(ValueError, match="'block_size'"):
        BlockQuantizer(block_size=0)
    with pytest.raises(ValueError, match="'x' with 1 dimension"):
        BlockQuantizer().quantize(np.ones((2, 2)), 0)
    with pytest.raises(ValueError, match="at least one element"):
        BlockQuantizer().encode(np.ones(0), 0)
    with pytest.raises(TypeError, match="'x' to be real"):
        BlockQuantizer().quantize(np.ones(3, dtype=complex), 0)
    with pytest.raises(TypeError, match="'rng'"):
        BlockQuantizer().quantize(np.ones(3), "seed")
    with pytest.raises(ValueError, match="'bits' == 2"):
        pack(np.ones(3), 8, scheme="blockp")
    with pytest.raises(TypeError, match="'payload' to be bytes-like"):
        decode(123)
    with pytest.raises(ValueError, match="'out'"):
        unpack(BlockQuantizer().encode(np.ones(3), 0), out=np.empty(4))


# ---------------------------------------------------------------- decoder validation


def _valid_payload():
    return StochasticRounding(bits=5, block_size=4).encode(np.linspace(-1, 1, 10), 0)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda p: p[:31], "shorter than the 32-byte header"),
        (lambda p: b"XMMQ" + p[4:], "bad magic"),
        (lambda p: p[:4] + b"\x02" + p[5:], "version"),
        (lambda p: p[:5] + b"\x07" + p[6:], "unknown scheme"),
        (lambda p: p[:6] + b"\x05" + p[7:], "value dtype"),
        (lambda p: p[:7] + b"\x09" + p[8:], "norm kind"),
        (lambda p: p[:8] + b"\x11" + p[9:], "bits"),
        (lambda p: p[:5] + b"\x01" + p[6:], "block-p payload must have bits = 2"),
        (lambda p: p[:12] + b"\x01" + p[13:], "reserved"),
        (lambda p: p[:16] + (0).to_bytes(8, "little") + p[24:], "q is zero"),
        (lambda p: p[:16] + (20).to_bytes(8, "little") + p[24:], "size does not match"),
        (lambda p: p[:16] + (2**63).to_bytes(8, "little") + p[24:], "too large"),
        (lambda p: p[:24] + (0).to_bytes(8, "little"), "block size"),
        (lambda p: p[:24] + (11).to_bytes(8, "little"), "block size"),
        (lambda p: p[:-1], "size does not match"),
        (lambda p: p + b"\0", "size does not match"),
        (lambda p: p[:32] + np.float64(np.nan).tobytes() + p[40:], "norm"),
        (lambda p: p[:32] + np.float64(-1.0).tobytes() + p[40:], "norm"),
        (lambda p: p[:-1] + bytes([p[-1] | 0x80]), "padding"),
    ],
)
def test_decoder_rejects_malformed_payloads_with_reason(mutate, reason):
    payload = _valid_payload()
    assert len(payload) == 32 + 3 * 8 + 7
    with pytest.raises(ValueError, match=reason):
        decode(mutate(payload))


def test_identity_payload_validation():
    p = Identity().encode(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="size does not match"):
        decode(p[:-1])
    with pytest.raises(ValueError, match="non-finite"):
        decode(p[:32] + np.float64(np.inf).tobytes() + p[40:])
    with pytest.raises(ValueError, match="identity payload must have"):
        decode(p[:8] + b"\x02" + p[9:])


# ---------------------------------------------------------------- threads


def test_thread_pool_equals_serial_run():
    xs = [np.random.default_rng(i).standard_normal(20000 + 37 * i) for i in range(12)]
    comps = [BlockQuantizer(256), StochasticRounding(8, "inf", 1000), StochasticRounding(5)]

    def task(i):
        c = comps[i % 3]
        return c.encode(xs[i], np.random.default_rng(100 + i)), c.quantize(xs[i], 200 + i)

    serial = [task(i) for i in range(12)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(task, range(12)))
    for (p1, v1), (p2, v2) in zip(serial, threaded):
        assert p1 == p2 and _bits_equal(v1, v2)
    with ThreadPoolExecutor(max_workers=4) as pool:
        decoded = list(pool.map(decode, [p for p, _ in serial]))
    for (p, _), d in zip(serial, decoded):
        assert _bits_equal(d, decode(p))


def test_shared_generator_across_threads_is_safe():
    # one Generator used from several threads: its lock serializes the draws;
    # every result must still be a valid quantization of x.
    x = np.random.default_rng(0).standard_normal(5000)
    g = np.random.default_rng(1)
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda _: quantize_blockp(x, block_size=500, rng=g), range(16)))
    for v in outs:
        for sl, nrm in zip(block_slices(5000, 500), block_norms(x, 500, 2)):
            assert np.allclose(np.abs(v[sl][v[sl] != 0]), nrm, rtol=1e-14, atol=0)


@pytest.mark.parametrize("comp", [StochasticRounding(bits=8, block_size=7), BlockQuantizer(block_size=5)])
def test_quantize_many_rows_equal_per_row_quantize(comp):
    # The batched simulation path quantizes all clients' messages in one call;
    # each row must be exactly quantize(row, its own generator), generators advanced alike.
    X = np.random.default_rng(3).standard_normal((4, 23))
    rngs = [np.random.default_rng(100 + k) for k in range(4)]
    twins = [np.random.default_rng(100 + k) for k in range(4)]
    out = comp.quantize_many(X, rngs)
    for k in range(4):
        assert np.array_equal(out[k], comp.quantize(X[k], twins[k]))
        assert rngs[k].random() == twins[k].random()
    with pytest.raises(ValueError, match="one generator per row"):
        comp.quantize_many(X, rngs[:3])
