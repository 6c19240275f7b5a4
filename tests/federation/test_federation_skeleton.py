# SPDX-License-Identifier: BSD-3-Clause
"""The shared round mechanics of :mod:`fedmm.federation.skeleton` (issue 24 item 2): client selection under
both participation rules (and that it draws the clients the compiled engine draws), payload decoding and its
refusals, the weighted aggregation in client order, the control-variate step and the fault policy of a
failing server step."""
import math
import pickle

import numpy as np
import pytest

from fedmm import kernels
from fedmm.algorithms import FedMM
from fedmm.algorithms._random import RoundStream, party_seed
from fedmm.federation import (MAX_STEP_RETRIES, ClientSelection, PhiloxRounds, check_message, control_variate_update,
                              decode_payloads, guarded_step, mean_aggregate, sum_aggregate, weighted_aggregate)
from fedmm.models import GaussianMixture

KEY = RoundStream(party_seed(21, 0, 0)).key


# --------------------------------------------------------------------------- selection
@pytest.mark.parametrize("n, m", [(10, 3), (7, 7), (40, 1), (5, 0)])
def test_uniform_selection_draws_exactly_m_distinct_clients_in_increasing_order(n, m):
    selection = ClientSelection(n, clients_per_round=m, key=KEY)
    for t in range(300):
        ids = selection.select(t)
        assert len(ids) == m and len(set(ids)) == m
        assert ids == sorted(ids) and all(0 <= i < n for i in ids)
        assert ids == selection.select(t)  # a pure function of (key, t)


def test_uniform_selection_contacts_each_client_with_probability_m_over_n():
    n, m, rounds = 12, 4, 3000
    selection = ClientSelection(n, clients_per_round=m, key=KEY)
    counts = np.zeros(n)
    for t in range(rounds):
        counts[selection.select(t)] += 1
    # each client's count is Binomial(rounds, m/n); 5 standard deviations for each of the n clients
    p = m / n
    assert np.all(np.abs(counts - rounds * p) < 5 * math.sqrt(rounds * p * (1 - p))), counts


@pytest.mark.parametrize("p", [0.1, 0.5, 0.93])
def test_bernoulli_selection_frequency_within_a_binomial_bound(p):
    n, rounds = 50, 400
    selection = ClientSelection(n, participation_prob=p, key=KEY)
    draws = [selection.select(t) for t in range(rounds)]
    for ids in draws:
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    total = sum(len(ids) for ids in draws)  # Binomial(n * rounds, p): the coins are independent
    trials = n * rounds
    assert abs(total - trials * p) < 5 * math.sqrt(trials * p * (1 - p)), total
    assert len({tuple(ids) for ids in draws}) > rounds // 2  # rounds draw different sets


def test_selection_is_the_server_streams_first_draw():
    # the definition the runtimes rely on: round t's coins are the first n uniforms of Philox(key, counter=t);
    # the reference is NumPy's own Philox started at that counter (not PhiloxRounds, which the selection uses)
    def numpy_round(t):
        return np.random.Generator(np.random.Philox(key=KEY, counter=[0, t, 0, 0]))

    bernoulli = ClientSelection(9, participation_prob=0.4, key=KEY)
    uniform = ClientSelection(9, clients_per_round=4, key=KEY)
    for t in (0, 1, 17, 2**40):
        np.testing.assert_array_equal(bernoulli.uniforms(t), numpy_round(t).random(9))
        assert bernoulli.select(t) == np.flatnonzero(numpy_round(t).random(9) < 0.4).tolist()
        assert uniform.select(t) == sorted(kernels.sample_without_replacement(9, 4, numpy_round(t)).tolist())


def test_philox_rounds_survive_pickling_and_restart_each_round():
    rounds = PhiloxRounds(KEY)
    first = rounds.at(3).random(5)
    rounds.at(3).random(7)  # drawing on does not move round 3's start
    np.testing.assert_array_equal(rounds.at(3).random(5), first)
    copy = pickle.loads(pickle.dumps(rounds))
    np.testing.assert_array_equal(copy.at(3).random(5), first)
    assert not np.array_equal(rounds.at(4).random(5), first)
    with pytest.raises(ValueError, match="'key'"):
        PhiloxRounds(np.zeros(3, dtype=np.uint64))


@pytest.mark.parametrize("rule", [{"clients_per_round": 3}, {"participation_prob": 0.5}])
@pytest.mark.parametrize("mode", ["select", "compress"])
def test_selection_equals_the_compiled_engines(rule, mode):
    # the compiled engine draws round t's clients in C (fedmm_server_select); its History's 'active'
    # lists them (in 'compress' mode: the clients whose server coin is 1)
    rng = np.random.default_rng(2)
    datas = [rng.normal(size=(20, 2)) + i for i in range(7)]
    seed = 5
    history = FedMM(GaussianMixture(2, "full"), batch_size=8, backend="compiled", participation_mode=mode,
                    **rule).run(datas, 12, seed=seed)
    assert history.config["backend"] == "compiled"
    key = RoundStream(party_seed(seed, 0, 0)).key
    p = rule.get("participation_prob", 1.0)
    selection = ClientSelection(7, clients_per_round=rule.get("clients_per_round"), participation_prob=p, key=key,
                                mode=mode)
    for t, record in enumerate(history.records):
        drawn = selection.draw(t)
        if mode == "compress":
            assert drawn.ids == list(range(7))
            assert np.flatnonzero(drawn.coins).tolist() == record["active"]
        else:
            assert drawn.coins is None and drawn.ids == record["active"]


def test_compress_modes():
    coins = ClientSelection(8, clients_per_round=3, key=KEY, mode="compress").draw(4)
    assert coins.ids == list(range(8)) and coins.coins.dtype == np.bool_ and int(coins.coins.sum()) == 3
    assert (np.flatnonzero(coins.coins).tolist()
            == ClientSelection(8, clients_per_round=3, key=KEY).select(4))
    local = ClientSelection(8, participation_prob=0.3, mode="compress-local").draw(4)
    assert local.ids == list(range(8)) and local.coins is None


def test_full_participation_needs_no_key_and_draws_nothing():
    assert ClientSelection(5).select(3) == [0, 1, 2, 3, 4]
    assert ClientSelection(5, participation_prob=1.0).coins(3).all()


@pytest.mark.parametrize("kwargs, match", [
    ({"clients_per_round": 2}, "'key'"),
    ({"participation_prob": 0.5}, "'key'"),
    ({"clients_per_round": 6, "key": KEY}, "'clients_per_round' <= n_clients = 5"),
    ({"participation_prob": 0.0, "key": KEY}, "'participation_prob' in \\(0, 1\\]"),
    ({"participation_prob": 1.5, "key": KEY}, "'participation_prob' in \\(0, 1\\]"),
    ({"key": np.zeros(3, dtype=np.uint64)}, "'key' to be 2 uint64"),
    ({"mode": "everyone"}, "'mode'"),
])
def test_selection_refusals_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ClientSelection(5, **kwargs)


def test_selection_refuses_a_bool_probability():
    with pytest.raises(TypeError, match="'participation_prob'"):
        ClientSelection(5, participation_prob=True)


# --------------------------------------------------------------------------- decoding, aggregation
def _row(size):
    """A row hook: 8-byte float64 values, checked by check_message."""
    def decode(i, payload):
        return check_message(i, np.frombuffer(payload, dtype=np.float64), size)
    return decode


def _payload(*values):
    return np.array(values, dtype=np.float64).tobytes()


def test_decode_payloads_in_client_order_and_refusals_named():
    payloads = {3: _payload(1, 2), 0: _payload(3, 4), 2: _payload(1), 1: _payload(np.nan, 1), 4: _payload(5, 6)}
    dropped = []
    ids, rows = decode_payloads(0, payloads, _row(2), on_invalid=lambda i, why: dropped.append((i, why)),
                                selected=[0, 1, 2, 3])
    assert ids == [0, 3]
    np.testing.assert_array_equal(np.array(rows), [[3, 4], [1, 2]])
    assert dropped == [(1, "Client 1 sent non-finite values"),
                       (2, "Client 2 sent a message of length (1,), expected (2,)"),
                       (4, "Client 4 is not selected in round 0")]


@pytest.mark.parametrize("payloads, kwargs, match", [
    ({0: _payload(1, 2)}, {"selected": [0, 1]}, "Srv needs every client's message .* round 5 misses clients \\[1\\]"),
    ({0: _payload(1, 2), 2: _payload(1, 2)}, {"selected": [0]}, "Client 2 is not selected in round 5"),
    ({0: b""}, {"must_send": lambda i: True}, "Client 0 sent an empty payload, expected its message \\(it is "
                                                "active at round 5\\)"),
    ({0: _payload(1, np.inf)}, {}, "Client 0 sent non-finite values"),
    ({0: _payload(1, 2, 3)}, {}, "Client 0 sent a message of length \\(3,\\), expected \\(2,\\)"),
])
def test_decode_payloads_raises_without_the_drop_policy(payloads, kwargs, match):
    with pytest.raises(ValueError, match=match):
        decode_payloads(5, payloads, _row(2), owner="Srv", **kwargs)


def test_decode_payloads_turns_a_type_error_of_the_hook_into_a_value_error():
    def bad(i, payload):
        raise TypeError("not bytes")
    with pytest.raises(ValueError, match="not bytes"):
        decode_payloads(0, {0: 1}, bad)


def test_empty_payload_of_a_client_that_need_not_send_is_no_message():
    dropped = []
    ids, rows = decode_payloads(0, {0: b"", 1: _payload(1, 2)}, _row(2), must_send=lambda i: False,
                                on_invalid=lambda i, why: dropped.append(i))
    assert ids == [1] and not dropped


def test_check_message_bound_names_its_owner():
    with pytest.raises(ValueError, match="magnitude up to 1e\\+300, beyond the range of GaussianMixture's"):
        check_message(3, np.full(2, 1e300), 2, bound=1e10, owner="GaussianMixture")
    x = np.array([1.0, -2.0])
    assert check_message(0, x, 2, bound=2.0) is x


def test_weighted_aggregate_accumulates_in_the_given_order():
    rng = np.random.default_rng(4)
    rows = [rng.standard_normal(9) * 10.0 ** k for k in range(5)]
    w = rng.random(5)
    acc = np.zeros(9)
    for wk, r in zip(w, rows):
        acc += (wk / 0.3) * r
    got = weighted_aggregate(rows, w, 9, p=0.3)
    assert got.tobytes() == acc.tobytes()
    assert weighted_aggregate([], [], 4).tolist() == [0.0] * 4


def test_control_variate_update():
    V, acc = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    np.testing.assert_array_equal(control_variate_update(V, acc, 0.5), [1.25, 1.5])
    assert control_variate_update(V, acc, 0.0) is V


def _spread_rows(m, size, seed=5):
    """``m`` rows whose entries span many magnitudes: sums of them depend on the order of the additions."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, size)) * 10.0 ** rng.integers(-8, 8, (m, size))


@pytest.mark.parametrize("m, size", [(1, 3), (4, 5), (9, 1), (20, 3)])
def test_mean_aggregate_is_numpys_mean_bit_for_bit(m, size):
    # the subgradient family's recorded Histories averaged with np.mean(U, axis=0): the skeleton's mean is that
    rows = _spread_rows(m, size)
    expected = np.mean(rows, axis=0)
    assert mean_aggregate(rows, size).tobytes() == expected.tobytes()
    assert mean_aggregate(list(rows), size).tobytes() == expected.tobytes()  # a list of rows stacks alike
    np.testing.assert_array_equal(sum_aggregate(rows, size), np.sum(rows, axis=0))
    # FedMLS's order: the rows added one by one in client order, then divided by m
    acc = np.zeros(size)
    for r in rows:
        acc += r
    assert mean_aggregate(rows, size, order="client").tobytes() == (acc / m).tobytes()
    assert sum_aggregate(rows, size, order="client").tobytes() == acc.tobytes()


def test_the_two_orders_of_the_mean_differ_where_numpy_adds_pairwise():
    # one column of 9 rows: NumPy's reduction adds pairwise, the client order does not; each algorithm keeps its own
    rows = _spread_rows(9, 1)
    assert mean_aggregate(rows, 1).tobytes() != mean_aggregate(rows, 1, order="client").tobytes()


def test_mean_aggregate_of_a_column_block_is_the_mean_of_its_contiguous_copy():
    # Scaffold's messages (Δy_i, Δc_i) side by side: each half is averaged as an (m, p) array of its own
    deltas = _spread_rows(6, 8)
    left, right = deltas[:, :4], deltas[:, 4:]
    assert mean_aggregate(left, 4).tobytes() == np.ascontiguousarray(left).mean(axis=0).tobytes()
    assert sum_aggregate(right, 4).tobytes() == np.ascontiguousarray(right).sum(axis=0).tobytes()


def test_unweighted_aggregates_refuse_what_they_cannot_average():
    assert sum_aggregate([], 3).tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="at least one message in 'rows'"):
        mean_aggregate([], 3)
    with pytest.raises(ValueError, match=r"'rows' of shape \(m, 3\).*got shape \(2, 4\)"):
        mean_aggregate(np.ones((2, 4)), 3)
    with pytest.raises(ValueError, match="'order'"):
        mean_aggregate(np.ones((2, 3)), 3, order="pairwise")


def test_control_variate_update_divides_by_the_number_of_clients():
    # Scaffold's c + (sum_i Δc_i) / N: a division, whose bits differ from a product with 1/N
    rng = np.random.default_rng(6)
    c, total = rng.standard_normal(200), rng.standard_normal(200)
    got = control_variate_update(c, total, 1.0, n_clients=3)
    assert got.tobytes() == (c + total / 3).tobytes()
    assert got.tobytes() != (c + total * (1.0 / 3)).tobytes()
    np.testing.assert_array_equal(control_variate_update(c, total, 0.5, n_clients=4), c + 0.5 * total / 4)
    assert control_variate_update(c, total, 0.0, n_clients=3) is c
    with pytest.raises(ValueError, match="n_clients"):
        control_variate_update(c, total, 1.0, n_clients=0)


# --------------------------------------------------------------------------- the fault policy of a failing step
def _bounded_step(limit):
    """A server step that fails when the aggregate has an entry beyond ``limit``."""
    def step(rows, weights):
        acc = weighted_aggregate(rows, weights, 2)
        if np.abs(acc).max() > limit:
            raise ValueError("aggregate out of range")
        return acc
    return step


def test_guarded_step_raises_without_the_drop_policy():
    rows = [np.ones(2), np.full(2, 1e6)]
    with pytest.raises(ValueError, match="Round 3: the server step failed \\(ValueError: aggregate out of range\\)"):
        guarded_step(3, _bounded_step(10.0), [0, 1], rows, [0.5, 0.5])


def test_guarded_step_drops_the_largest_messages_first():
    rows = [np.ones(2), np.full(2, 1e6), np.full(2, 2.0), np.full(2, -1e3)]
    dropped = []
    acc = guarded_step(0, _bounded_step(10.0), [0, 2, 5, 7], rows, [0.25] * 4,
                       on_invalid=lambda i, why: dropped.append((i, why)))
    np.testing.assert_array_equal(acc, 0.25 * np.ones(2) + 0.25 * np.full(2, 2.0))
    assert [i for i, _ in dropped] == [2, 7]
    assert all("the 2 largest of the 4 messages" in why for _, why in dropped)


def test_guarded_step_goes_on_with_no_message_after_max_retries():
    rows = [np.full(2, 1e6)] * 5
    dropped = []
    acc = guarded_step(0, _bounded_step(10.0), list(range(5)), rows, [0.2] * 5,
                       on_invalid=lambda i, why: dropped.append((i, why)))
    assert acc.tolist() == [0.0, 0.0] and [i for i, _ in dropped] == [0, 1, 2, 3, 4]
    assert all(f"without the {MAX_STEP_RETRIES} largest; the round went on with no message" in why
               for _, why in dropped)


def test_guarded_step_refuses_a_step_that_fails_without_any_message():
    def broken(rows, weights):
        raise ArithmeticError("the server's own state")
    with pytest.raises(ValueError, match="fails even without the clients' messages"):
        guarded_step(1, broken, [0], [np.ones(2)], [1.0], on_invalid=lambda i, why: None)
