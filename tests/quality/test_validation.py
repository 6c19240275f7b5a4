# SPDX-License-Identifier: BSD-3-Clause
import numpy as np
import pytest

from fedmm._validation import as_array, as_rng, check_int, check_probability, check_real


def test_as_array_messages_name_the_argument():
    with pytest.raises(ValueError, match="'Z' to contain only finite"):
        as_array([1.0, np.nan], "Z")
    with pytest.raises(ValueError, match=r"'D' with 2 dimension\(s\), got shape \(3,\)"):
        as_array([1.0, 2.0, 3.0], "D", ndim=2)
    with pytest.raises(TypeError, match="'x' to be real"):
        as_array([1j], "x")
    with pytest.raises(TypeError, match="'x' to hold real numbers"):
        as_array(["a"], "x")


def test_as_array_dtype_and_order():
    a = as_array(np.arange(6, dtype=np.float32).reshape(2, 3), "a", dtype=None, order="F")
    assert a.dtype == np.float32 and a.flags.f_contiguous
    b = as_array(np.arange(3), "b", dtype=None)
    assert b.dtype == np.float64


def test_scalar_checks():
    assert check_int(3, "k", low=1) == 3
    with pytest.raises(ValueError, match=r"'k' in \[1, inf\], got 0"):
        check_int(0, "k", low=1)
    with pytest.raises(TypeError, match="'k' to be an integer"):
        check_int(1.5, "k")
    with pytest.raises(ValueError, match=r"'p' in \(0.0, 1.0\], got 0.0"):
        check_probability(0.0, "p")
    assert check_probability(1, "p") == 1.0
    with pytest.raises(ValueError, match="'lam' to be finite"):
        check_real(float("nan"), "lam")


def test_as_rng_is_deterministic_and_strict():
    a = as_rng(5).random(3)
    b = as_rng(np.random.default_rng(5)).random(3)
    assert np.array_equal(a, b)
    with pytest.raises(TypeError, match="'rng'"):
        as_rng("seed")
    with pytest.raises(ValueError, match="non-negative seed"):
        as_rng(-1)
