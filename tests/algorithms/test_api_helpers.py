# SPDX-License-Identifier: BSD-3-Clause
"""The helpers every algorithm shares (issue 13, item 5): the one seed normalizer and the recorded seed,
the one schedule type, the monitoring cadence."""
import math
import pickle

import numpy as np
import pytest

from fedmm import History
from fedmm._validation import as_rng
from fedmm.algorithms import Cadence, Schedule, StepSchedule, check_seed, seed_from_repr, seed_repr
from fedmm.algorithms._random import check_seed as random_check_seed
import fedmm.algorithms._random as random_streams
from fedmm.algorithms._random import RoundStream, derive_seed, party_keys, party_seed


# -- seeds ------------------------------------------------------------------------------------------------------
def test_check_seed_normalizes_like_numpy():
    assert random_check_seed is check_seed  # one normalizer, re-exported where the engine imports it
    assert check_seed(5).entropy == 5 and check_seed(np.int64(5)).entropy == 5
    np.testing.assert_array_equal(np.random.default_rng(check_seed(5)).random(3), np.random.default_rng(5).random(3))
    np.testing.assert_array_equal(np.random.default_rng(check_seed([1, 2])).random(3),
                                  np.random.default_rng([1, 2]).random(3))
    ss = np.random.SeedSequence(3, spawn_key=(1,))
    assert check_seed(ss) is ss
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    a = check_seed(rng)
    assert rng.bit_generator.state != before  # a Generator is advanced, as NumPy functions do
    assert check_seed(rng).entropy != a.entropy
    assert check_seed(np.random.default_rng(0)).entropy == a.entropy  # a pure function of the generator state
    bitgen = np.random.PCG64(1)
    assert check_seed(bitgen).entropy == check_seed(np.random.Generator(np.random.PCG64(1))).entropy
    assert check_seed(None).entropy != check_seed(None).entropy
    for bad, error, match in [(True, TypeError, "got bool"), (1.5, TypeError, "got float"), ("3", TypeError, "str"),
                              (-1, ValueError, "non-negative seed, got -1"), ([], ValueError, "non-empty"),
                              ([1, -2], ValueError, "non-negative integers")]:
        with pytest.raises(error, match=match):
            check_seed(bad, "seed")


def test_as_rng_accepts_the_same_inputs():
    rng = np.random.default_rng(3)
    assert as_rng(rng) is rng
    np.testing.assert_array_equal(as_rng(3).random(2), np.random.default_rng(3).random(2))
    np.testing.assert_array_equal(as_rng(np.random.SeedSequence(3)).random(2), np.random.default_rng(3).random(2))
    assert isinstance(as_rng(None), np.random.Generator)
    assert isinstance(as_rng(np.random.Philox(1)), np.random.Generator)
    with pytest.raises(ValueError, match="'rng' to be a non-negative seed"):
        as_rng(-2)


def test_seed_repr_round_trips_through_json():
    for ss in [np.random.SeedSequence(7), np.random.SeedSequence(), np.random.SeedSequence([3, 4]),
               np.random.SeedSequence(7, spawn_key=(2, 5)), np.random.SeedSequence(7, pool_size=8)]:
        h = History("x", {"seed": seed_repr(ss)})
        back = seed_from_repr(History.from_dict(h.to_dict()).config["seed"])
        assert (back.entropy, back.spawn_key, back.pool_size) == (ss.entropy, ss.spawn_key, ss.pool_size)
        assert np.array_equal(back.generate_state(4), ss.generate_state(4))
    assert seed_repr(np.random.SeedSequence(7)) == 7 and seed_repr(7) == 7
    assert seed_from_repr({"entropy": "12", "spawn_key": [1]}).entropy == 12  # fedmm 0.1 wrote entropy as str
    with pytest.raises(TypeError, match="'value' to be a recorded seed"):
        seed_from_repr(1.5)
    # party_seed keeps the int mapping of the FedMM engine: n and SeedSequence(n) give the streams of before
    before = np.random.SeedSequence(4, spawn_key=(1, 2)).generate_state(2)  # fedmm 0.1's party_seed(4, 1, 2)
    assert np.array_equal(party_seed(4, 1, 2).generate_state(2), before)
    assert np.array_equal(party_seed(check_seed(4), 1, 2).generate_state(2), before)


def test_derive_seed_is_spawn_without_mutation():
    root = np.random.SeedSequence(11, spawn_key=(3,))
    children = [derive_seed(root, i) for i in range(4)]
    assert root.n_children_spawned == 0
    spawned = np.random.SeedSequence(11, spawn_key=(3,)).spawn(4)
    for a, b in zip(children, spawned):
        assert a.spawn_key == b.spawn_key and np.array_equal(a.generate_state(4), b.generate_state(4))
    assert derive_seed(5, 1, 2).spawn_key == (1, 2) and derive_seed(5, 1, 2).entropy == 5


SEEDS = [0, 1, 12345, 2**40 + 7, 2**200 + 3, [1, 2, 3, 4, 5, 6], np.random.SeedSequence(5, spawn_key=(3,)),
         np.random.SeedSequence(9, pool_size=8), np.random.SeedSequence(np.arange(7, dtype=np.uint32)),
         np.random.SeedSequence(np.array([1, 2, 2**40]), spawn_key=[np.uint64(3)]), np.random.SeedSequence()]


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_party_keys_are_numpys_keys_from_one_vectorized_pass(seed, monkeypatch):
    root = check_seed(seed)
    calls = []

    def counted(*args):
        calls.append(args)
        return party_seed(*args)

    monkeypatch.setattr(random_streams, "party_seed", counted)
    for party, n in [(0, 3), (1, 257), (2**33, 5)]:
        calls.clear()
        keys = party_keys(root, party, n)
        # NumPy's own derivation, one SeedSequence per party
        reference = np.stack([party_seed(root, party, i).generate_state(2, np.uint64) for i in range(n)])
        assert keys.dtype == np.uint64 and keys.shape == (n, 2) and keys.flags.c_contiguous
        np.testing.assert_array_equal(keys, reference)
        np.testing.assert_array_equal(keys[n - 1], RoundStream(party_seed(root, party, n - 1)).key)
        # the vectorized pass, not the one-at-a-time fallback: NumPy is asked only for the two rows it checks
        assert len(calls) == 2


def test_party_keys_falls_back_to_numpy_when_its_check_fails(monkeypatch):
    root = check_seed(3)
    reference = np.stack([party_seed(root, 1, i).generate_state(2, np.uint64) for i in range(40)])
    monkeypatch.setattr(random_streams, "_MULT_B", random_streams._MULT_B ^ 2)  # a hash NumPy does not use
    np.testing.assert_array_equal(party_keys(root, 1, 40), reference)
    assert party_keys(root, 1, 0).shape == (0, 2)
    for bad in (-1, 2**32):
        with pytest.raises(ValueError, match=r"Expected 0 <= n < 2\*\*32 parties"):
            party_keys(root, 1, bad)


def test_round_stream_from_a_key_draws_as_from_its_seed_sequence():
    seq = party_seed(8, 1, 4)
    a, b = RoundStream(seq), RoundStream.from_key(party_keys(8, 1, 5)[4])
    assert type(b) is RoundStream
    np.testing.assert_array_equal(a.at(3).random(4), b.at(3).random(4))


# -- schedules and cadence -----------------------------------------------------------------------------------
def test_schedule_forms_values_and_domains():
    k = np.arange(1, 30)
    assert [Schedule(("linear", 2), domain="count")(i) for i in (1, 3)] == [2, 6]
    assert isinstance(Schedule(("linear", 2), domain="count")(3), int)
    # the exact float formulas of the schedules they replace (bit for bit)
    assert [Schedule(("inverse", 0.7))(i) for i in k] == [0.7 * i ** -1.0 for i in k]
    assert [Schedule(("inverse_sqrt", 0.3))(i) for i in k] == [0.3 * i ** -0.5 for i in k]
    assert [StepSchedule(("sqrt", 0.05))(i) for i in k] == [0.05 / math.sqrt(0.05 + i) for i in k]
    assert [StepSchedule("1/t")(i) for i in k] == [1.0 / i for i in k]
    assert StepSchedule("1/(t+1)")(4) == 0.25 and StepSchedule(0.3).description == "0.3"
    assert Schedule(lambda i: 4.0, domain="count")(1) == 4  # integral floats become counts
    assert Schedule(3, domain="count").description == "3"
    # a Schedule is re-checked against the domain of its new use
    unbounded = Schedule(("linear", 1))
    assert unbounded(5) == 5
    with pytest.raises(ValueError, match=r"'gamma_2' in \(0.0, 1.0\], got 2"):
        StepSchedule(unbounded)(2)
    with pytest.raises(ValueError, match=r"'p' in \(0.0, 1.0\], got 2.0"):
        Schedule(Schedule(2.0), domain="unit", name="p")
    with pytest.raises(TypeError, match=r"'local_steps\(1\)' to be an integer, got float \(0.5\)"):
        Schedule(("linear", 0.5), domain="count", name="local_steps")(1)
    with pytest.raises(ValueError, match="'T' tuple to be \\(form, parameter\\)"):
        Schedule(("log", 1.0), name="T")
    with pytest.raises(ValueError, match="'step coefficient' in"):
        Schedule(("inverse", -1.0), name="step")
    with pytest.raises(TypeError, match="'eta' to be a number, '1/t'"):
        Schedule([1.0], name="eta")
    with pytest.raises(ValueError, match="'domain' to be one of"):
        Schedule(1.0, domain="negative")
    # picklable (runtimes ship schedules to remote clients)
    s = pickle.loads(pickle.dumps(Schedule(("inverse_sqrt", 0.1), domain="unit", name="p")))
    assert s(4) == 0.05 and s.domain == "unit" and repr(s) == "Schedule(inverse_sqrt(0.1), domain='unit')"


def test_cadence():
    assert [t for t in range(10) if Cadence(4, 10).due(t)] == [3, 7, 9]
    assert [t for t in range(3) if Cadence(1, 3).due(t)] == [0, 1, 2]
    assert not Cadence(0, 5) and not any(Cadence(0, 5).due(t) for t in range(5))
    with pytest.raises(ValueError, match=r"'evaluate_every' in \[0, inf\]"):
        Cadence(-1, 5)
    with pytest.raises(ValueError, match=r"'monitor_every' in \[0, inf\]"):
        Cadence(-1, 5, name="monitor_every")


@pytest.mark.parametrize("module", ["fedmm.algorithms._schedule", "fedmm.algorithms._monitor",
                                    "fedmm.algorithms._random", "fedmm._validation"])
def test_module_examples(module):
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert failures == 0 and tried > 0
