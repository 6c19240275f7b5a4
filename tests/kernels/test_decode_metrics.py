# SPDX-License-Identifier: BSD-3-Clause
"""Issue 15 item 4: payloads that decode to non-finite values are rejected (leaving ``out``
untouched), and the monitoring quantities are never silently inf."""
import sys
from fractions import Fraction

import numpy as np
import pytest

from fedmm import _rounds, compression, kernels
from fedmm.algorithms import FedMM
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.federation.metrics import squared_distance, step_record, update_size
from fedmm.models import InverseToy

from reference import engine_heterogeneous_positive

DBL_MAX = sys.float_info.max
HEADER = 32


def _decoders():
    """Every public decode path: (name, decode(payload, out) or None when it takes no ``out``)."""
    return [("unpack", lambda p, out: kernels.unpack(p, out=out)),
            ("unpack-new", lambda p, out: kernels.unpack(p)),
            ("compression.decode", lambda p, out: compression.decode(p)),
            ("Compressor.decode", lambda p, out: Identity().decode(p))]


def _set_norm(payload, block, value, dtype):
    p = bytearray(payload)
    size = np.dtype(dtype).itemsize
    p[HEADER + block * size:HEADER + (block + 1) * size] = np.array([value], dtype=dtype).astype("<" + dtype).tobytes()
    return bytes(p)


def _rejects(payload, match):
    """Every decode path raises ``ValueError(match)``; ``out`` is left as it was."""
    for name, dec in _decoders():
        out = np.full(kernels.wire_header(payload)["q"], 7.0)
        with pytest.raises(ValueError, match=f"malformed payload: {match}"):
            dec(payload, out)
        assert np.all(out == 7.0), name


@pytest.mark.parametrize("bits", [3, 8, 16])
def test_a_dbl_max_norm_whose_top_level_overflows_is_rejected(bits):
    x = np.zeros(40)
    x[5] = 1.0  # level s in the first block
    payload = _set_norm(StochasticRounding(bits, norm="inf", block_size=20).encode(x, rng=0), 0, DBL_MAX, "f8")
    _rejects(payload, "a decoded value overflows to inf")
    # same norm, no coordinate at a level that overflows: decoded, finite
    y = np.zeros(40)
    y[5:9] = [1.0, -1.0, 1.0, 1.0]  # |y_j| / ||y||_2 = 1/2: levels <= ceil(s/2) < s
    ok = _set_norm(StochasticRounding(bits, norm=2, block_size=20).encode(y, rng=0), 0, DBL_MAX, "f8")
    values = kernels.unpack(ok)
    assert np.all(np.isfinite(values)) and np.abs(values).max() > 1e307


def test_a_dbl_max_norm_in_the_last_block_is_rejected_before_any_write():
    x = np.zeros(50)
    x[45] = -1.0
    payload = _set_norm(StochasticRounding(8, block_size=20).encode(x, rng=1), 2, DBL_MAX, "f8")
    _rejects(payload, "a decoded value overflows to inf")


def test_two_bits_and_a_dbl_max_norm_decode_to_dbl_max():
    """s = 1: level * (N / 1) == N, never above DBL_MAX (block-p and 2-bit dithering)."""
    x = np.array([1.0, 0.0, -1.0, 0.0])
    for c in (StochasticRounding(2, norm="inf"), BlockQuantizer(block_size=4, norm="inf")):
        values = kernels.unpack(_set_norm(c.encode(x, rng=0), 0, DBL_MAX, "f8"))
        assert np.array_equal(np.abs(values), [DBL_MAX, 0.0, DBL_MAX, 0.0])


@pytest.mark.parametrize("dtype", ["f8", "f4"])
@pytest.mark.parametrize("bad", [np.inf, np.nan, -np.inf])
def test_non_finite_norms_are_rejected(dtype, bad):
    x = np.linspace(-1.0, 1.0, 30).astype(dtype)
    payload = _set_norm(StochasticRounding(8, block_size=10).encode(x, rng=0), 1, bad, dtype)
    _rejects(payload, "a block norm is not finite")


def test_negative_norm_is_rejected():
    payload = _set_norm(StochasticRounding(4, block_size=10).encode(np.ones(30), rng=0), 2, -1.0, "f8")
    _rejects(payload, "a block norm is negative")


@pytest.mark.parametrize("dtype", ["f8", "f4"])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
@pytest.mark.parametrize("where", [0, 9, 19])
def test_identity_payloads_with_non_finite_values_are_rejected_before_any_write(dtype, bad, where):
    payload = bytearray(Identity().encode(np.arange(20, dtype=dtype)))
    size = np.dtype(dtype).itemsize
    payload[HEADER + where * size:HEADER + (where + 1) * size] = np.array([bad], dtype="<" + dtype).tobytes()
    _rejects(bytes(payload), r"identity payload holds a non-finite value")


def test_valid_payloads_still_decode_into_out():
    x = np.random.default_rng(0).standard_normal(257)
    for c in (Identity(), StochasticRounding(8), StochasticRounding(3, block_size=16), BlockQuantizer(block_size=32)):
        out = np.empty(257)
        assert kernels.unpack(c.encode(x, rng=3), out=out) is out
        assert np.array_equal(out, c.quantize(x, rng=3))


# --------------------------------------------------------------------------- monitoring quantities


def test_squared_distance_underflow_is_computed_in_a_scaled_form():
    for scale in (1e-160, 1e-200 * 2**60, 3e-170):
        a = np.array([scale, -2 * scale, 0.5 * scale, scale, 3 * scale])
        exact = sum(Fraction(float(v)) ** 2 for v in a)
        assert squared_distance(a, np.zeros(5)) == float(exact)  # the plain sum underflows to ~0
    assert squared_distance(np.zeros(5), np.zeros(5)) == 0.0
    assert np.isnan(squared_distance([np.nan, 1.0], [0.0, 0.0]))


def test_squared_distance_is_inf_only_when_the_true_value_overflows():
    big = DBL_MAX / 4
    assert squared_distance([1e154, 1e153], [0.0, 0.0]) == 1e154 * 1e154 + 1e153 * 1e153  # finite: the plain sum
    assert squared_distance([1e154, 1e154], [0.0, 0.0]) == np.inf  # 2e308
    assert squared_distance([big], [-big]) == np.inf  # the difference overflows: so does its square
    # the documented order is kept wherever nothing over- or underflows (n = 525 in test_federation_compiled)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(9) * 1e100, rng.standard_normal(9) * 1e100
    d = a - b
    s = [0.0] * 4
    for j in range(8):
        s[j % 4] += d[j] * d[j]
    s[0] += d[8] * d[8]
    assert _rounds.squared_distance(a, b) == (s[0] + s[1]) + (s[2] + s[3])


def test_update_sizes_that_overflow_warn_naming_the_quantity():
    with pytest.warns(RuntimeWarning, match="E_s = .*exceeds the largest float64"):
        rec = step_record(0.5, 1.0, np.inf)
    assert rec["E_s"] == np.inf and rec["E_ps"] == 4.0
    with pytest.warns(RuntimeWarning, match="E_p = "):
        assert step_record(1e-5, 1e300)["E_p"] == np.inf  # finite distance, too large once divided by γ²
    with pytest.warns(RuntimeWarning, match="E_sp = .*not a number"):
        assert np.isnan(update_size("E_sp", np.nan, 0.5))


def _toy_run(scale, backend, n_rounds=6):
    datas = [d * scale for d in engine_heterogeneous_positive([30, 20, 40], np.random.default_rng(5))]
    return FedMM(InverseToy(), clients_per_round=2, compressor=StochasticRounding(8), control_variate_step=0.1,
                 step=0.5,
                 batch_size=5, backend=backend).run(datas, n_rounds, seed=3)


def test_a_run_on_data_scaled_by_1e150_records_finite_update_sizes_on_both_backends():
    runs = [_toy_run(1e150, backend) for backend in ("compiled", "python")]
    assert [h.config["backend"] for h in runs] == ["compiled", "python"]
    assert runs[0].equals(runs[1])
    e_s = np.array([r["E_s"] for r in runs[0].records])
    e_ps = np.array([r["E_ps"] for r in runs[0].records])
    assert np.all(np.isfinite(e_s)) and e_s.max() > 1e290
    assert np.all(np.isfinite(e_ps)) and e_ps.min() > 0.0  # θ ~ 1e-75: ‖Δθ‖² ~ 1e-152, not flushed to 0


@pytest.mark.parametrize("backend", ["compiled", "python"])
def test_a_run_whose_true_update_size_overflows_warns_instead_of_silently_inf(backend):
    with pytest.warns(RuntimeWarning, match="update size E_s "):
        h = _toy_run(1e160, backend, n_rounds=3)
    assert any(r["E_s"] == np.inf for r in h.records)
    assert all(np.isfinite(r["E_ps"]) for r in h.records)


def _documented_order(a, b):
    d = np.asarray(a) - np.asarray(b)
    s = [0.0] * 4
    n = len(d)
    for j in range(n - n % 4):
        s[j % 4] += d[j] * d[j]
    for j in range(n - n % 4, n):
        s[0] += d[j] * d[j]
    return (s[0] + s[1]) + (s[2] + s[3])


def test_the_scaled_path_equals_the_plain_sum_where_nothing_underflows():
    """Sums below 2^-900 take the scaled path; scaling by a power of two is exact, so where no
    square is subnormal the result is the documented plain sum to the bit."""
    rng = np.random.default_rng(7)
    for n in (1, 5, 8, 131):
        a, b = rng.standard_normal(n) * 1e-140, rng.standard_normal(n) * 1e-140
        assert _documented_order(a, b) < 2.0**-900
        assert squared_distance(a, b) == _documented_order(a, b)


def test_a_run_with_tiny_parameter_steps_and_overflowing_statistic_steps_agrees_across_backends():
    """Data ~1e290: ‖ΔŜ‖² ~ 1e580 overflows (warned, both backends); ‖Δθ‖² ~ 1e-291 takes the scaled path."""
    runs = []
    for backend in ("compiled", "python"):
        with pytest.warns(RuntimeWarning, match="update size E_s "):
            runs.append(_toy_run(1e290, backend, n_rounds=4))
    assert runs[0].equals(runs[1])
    e_ps = np.array([r["E_ps"] for r in runs[0].records])
    assert np.all(np.isfinite(e_ps)) and e_ps.min() > 0.0
