# SPDX-License-Identifier: BSD-3-Clause
"""Engine features of the non-smooth family (FedMLS, FedAvg, Scaffold, Scaffnew): compressed client messages,
client sampling where the method's paper defines it (FedAvg, Scaffold), the fault policy, and state that
resumes bit for bit."""
import numpy as np
import pytest
import re

from fault_injection import ANY_ROUND, CAUSES, FaultyClient
from reference import nonsmooth_toy_data

from fedmm import History
from fedmm.algorithms import FedAvg, FedMLS, FedProx, Scaffnew, Scaffold
from fedmm.algorithms.nonsmooth import encode_vector
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.models.nonsmooth import HingeSVM, L1Regression
from fedmm.runtime import LocalRuntime

N_CLIENTS, DIM = 5, 4
DATAS = nonsmooth_toy_data("l1", n_clients=N_CLIENTS, m=12, d=DIM, seed=4)
INIT = np.array([0.5, -1.0, 0.25, 2.0])


def make(name, **kw):
    """One method of the family on L1Regression (``kw`` override the defaults)."""
    problem = L1Regression()
    if name == "FedAvg":
        return FedAvg(problem, **{"local_lr": 0.05, "local_steps": 3, **kw})
    if name == "Scaffold":
        return Scaffold(problem, **{"local_lr": 0.05, "local_steps": 3, **kw})
    if name == "Scaffnew":
        return Scaffnew(problem, **{"local_lr": 0.05, "communication_prob": 0.5, **kw})
    return FedMLS(problem, **{"prox_weight": ("inverse", 1.0), "radius": 10.0, **kw})


METHODS = ["FedAvg", "Scaffold", "Scaffnew", "FedMLS"]


def run_rounds(server, clients, n_rounds, runtime=None, start=0, history=None):
    """``n_rounds`` rounds of built parties on a runtime (default: in process, one client per call)."""
    runtime = LocalRuntime(batched=False) if runtime is None else runtime
    history = History("test") if history is None else history
    return runtime.run(server, clients, n_rounds, history=history, start=start)


def server_vector(name, server):
    """What a round changes on the server: ``x`` (``x`` and ``c`` for Scaffold, ``z`` for FedMLS)."""
    if name == "Scaffold":
        return np.concatenate([server.x, server.c])
    return server.z if name == "FedMLS" else server.x


# -- (a) compression is unbiased -----------------------------------------------------------------------------
def one_round(algo, name, seed):
    """The server vector after round 0 from ``INIT`` with exact subgradients, and the clients' uncompressed
    messages relative to what the server holds (float64 payloads of an uncompressed run)."""
    server, clients = algo.build(DATAS, seed=seed, init=INIT)
    ids = server.select(0)
    message = server.broadcast(0)
    reference = server.y.copy() if name == "FedMLS" else server.x.copy()
    payloads = {i: clients[i].step(message) for i in ids}
    server.aggregate(0, payloads)
    return server_vector(name, server), payloads, reference


@pytest.mark.parametrize("compressor", [StochasticRounding(bits=8), BlockQuantizer()], ids=["8-bit", "block"])
@pytest.mark.parametrize("name", METHODS)
def test_the_mean_compressed_update_is_the_uncompressed_one(name, compressor):
    # Each client's compression error e_i has E e_i = 0 and E‖e_i‖² <= ω ‖d_i‖² (d_i its message relative to
    # the server's vector), the clients' errors are independent, and the round's server vector is affine in
    # (1/n) Σ_i e_i with scale L: the mean of S runs is within k·sqrt(L² ω Σ_i ‖d_i‖² / (n² S)) of the exact
    # vector except with probability <= 1/k² (Chebyshev).  A biased aggregate (e.g. the difference taken
    # from another point than the one the server adds back) misses by far more than that.
    kw = {"oracle": "full"} | ({"communication_prob": 1.0} if name == "Scaffnew" else {})
    exact, payloads, reference = one_round(make(name, **kw), name, seed=0)
    assert all(len(b) == 8 * DIM * (2 if name == "Scaffold" else 1) for b in payloads.values())
    messages = np.array([np.frombuffer(b, dtype="<f8") for b in payloads.values()])
    n_runs, omega = 300, compressor.variance_bound(DIM)
    if name == "Scaffold":
        server_lr = np.sqrt(N_CLIENTS)
        spread = server_lr ** 2 * np.sum(messages[:, :DIM] ** 2) + np.sum(messages[:, DIM:] ** 2)
    else:
        scale = {"FedMLS": 2 / 4.0}.get(name, 1.0)  # z_2 = z_1 − ((k+1)/4)(y_2 − mean_i y_2^i), k = 1
        spread = scale ** 2 * np.sum((messages - reference) ** 2)
    tolerance = 5.0 * np.sqrt(omega * spread / (N_CLIENTS ** 2 * n_runs))
    algo = make(name, compressor=compressor, **kw)
    runs = np.array([one_round(algo, name, seed)[0] for seed in range(n_runs)])
    assert np.linalg.norm(runs.mean(axis=0) - exact) <= tolerance
    # the runs differ (the compression is random) and the tolerance is small against the update itself
    assert np.ptp(runs, axis=0).max() > 0
    assert tolerance < 0.25 * np.linalg.norm(exact - server_vector(name, algo.build(DATAS, seed=0, init=INIT)[0]))


@pytest.mark.parametrize("name", METHODS)
def test_compressed_runs_reproduce_and_count_their_payload_bytes(name):
    compressor = StochasticRounding(bits=8)
    algo = make(name, compressor=compressor)
    h = algo.run(DATAS, 6, seed=3, evaluate_every=2)
    again = algo.run(DATAS, 6, seed=3, evaluate_every=2, runtime=LocalRuntime(n_threads=2, batched=True))
    assert h.equals(again)
    parts = 2 if name == "Scaffold" else 1
    per_client = parts * compressor.payload_nbytes(DIM) + (4 * parts if parts > 1 else 0)
    assert h["bytes_up"].tolist() == [N_CLIENTS * per_client] * 6
    assert h.config["compressor"] == repr(compressor)
    assert np.isfinite(h["objective"][~np.isnan(h["objective"])]).all()


def test_scaffold_keeps_its_control_variate_invariant_under_compression_sampling_and_faults():
    # c = (1/N) Σ_i c_i: each client adds to c_i exactly the decoded Δc_i that the server adds (over N) to c;
    # unselected and dropped clients keep theirs.
    algo = make("Scaffold", compressor=BlockQuantizer(), clients_per_round=3)
    server, clients = algo.build(DATAS, seed=5)
    wrapped = FaultyClient(clients[1], {(t, 1): "raise" for t in range(8)})  # fails whenever it is selected
    wrapped.step = counting_step(wrapped)
    h = run_rounds(server, [wrapped if c.index == 1 else c for c in clients], 8)
    assert any(r["dropped"] == [1] for r in h.records)
    np.testing.assert_allclose(server.c, np.mean([c.c for c in clients], axis=0), rtol=1e-12, atol=1e-12)
    assert np.array_equal(clients[1].c, np.zeros(DIM))  # always dropped: never updated


def test_scaffnew_keeps_its_control_variates_summing_to_zero_under_compression():
    # ProxSkip keeps Σ_i h_i = 0; with compression each client updates h_i with the value the server decoded.
    algo = make("Scaffnew", compressor=BlockQuantizer())
    server, clients = algo.build(DATAS, seed=2)
    run_rounds(server, clients, 6)
    pending = [c.h + c.ratio * (server.x - c.x_hat) for c in clients]  # the update due at the next round
    assert np.linalg.norm(np.sum(pending, axis=0)) <= 1e-9 * max(1.0, max(np.linalg.norm(h) for h in pending))


# -- (b) the identity is the uncompressed run ----------------------------------------------------------------
@pytest.mark.parametrize("name", METHODS)
def test_identity_compression_reproduces_the_uncompressed_history_bit_for_bit(name):
    reference = make(name).run(DATAS, 8, seed=1, evaluate_every=2)
    for compressor in (Identity(), [Identity()] * N_CLIENTS):
        assert make(name, compressor=compressor).run(DATAS, 8, seed=1, evaluate_every=2).equals(reference)
    parts = 2 if name == "Scaffold" else 1
    assert reference["bytes_up"].tolist() == [N_CLIENTS * 8 * DIM * parts] * 8  # raw float64, no header


def test_one_compressing_client_among_uncompressed_ones():
    compressors = [Identity()] * N_CLIENTS
    compressors[2] = StochasticRounding(bits=8)
    h = make("FedAvg", compressor=compressors).run(DATAS, 3, seed=0)
    assert h.records[0]["bytes_up"] == 4 * 8 * DIM + StochasticRounding(bits=8).payload_nbytes(DIM)
    assert not h.equals(make("FedAvg").run(DATAS, 3, seed=0))


def _head_data():
    """The data of the pre-change reference run below (5 clients, 4 features)."""
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(15 + 3 * i, 4)) + i * 0.3, rng.normal(size=15 + 3 * i)) for i in range(5)]


def test_full_participation_scaffold_with_unit_server_step_is_the_pre_change_scaffold():
    # Final state of Scaffold(L1Regression(), local_lr=0.05, server_lr=1.0), 12 rounds, seed 0, from
    # init linspace(-0.3, 0.4, 4), recorded with the code before compression and sampling existed.
    x = ["-0x1.685f261b69ac0p-9", "0x1.78e4ed4aadd00p-11", "-0x1.645e4e6d4fa6bp-3", "0x1.b5201e58bb014p-4"]
    c = ["-0x1.c4e3847742474p+0", "0x1.7c2dd5fa0deb0p+1", "-0x1.0826fc14ccd64p-1", "-0x1.326578fbf057cp+1"]
    datas = _head_data()
    for kw in ({}, {"clients_per_round": 5}, {"participation_prob": 1.0}):
        h = Scaffold(L1Regression(), local_lr=0.05, server_lr=1.0, **kw).run(
            datas, 12, seed=0, init=np.linspace(-0.3, 0.4, 4))
        assert [v.hex() for v in h.state["x"]] == x and [v.hex() for v in h.state["c"]] == c, kw


# -- (c) client sampling: FedAvg and Scaffold ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["FedAvg", "Scaffold"])
def test_clients_per_round_selects_that_many_distinct_clients_reproducibly(name):
    algo = make(name, clients_per_round=2)
    h = algo.run(DATAS, 20, seed=7)
    selections = [r["active"] for r in h.records]
    assert all(len(s) == 2 and len(set(s)) == 2 and s == sorted(s) for s in selections)
    assert all(0 <= i < N_CLIENTS for s in selections for i in s)
    assert len({tuple(s) for s in selections}) > 3  # uniform draws, not one fixed pair
    message_nbytes = 8 * DIM * (2 if name == "Scaffold" else 1) + 16  # x (and c), two scalars
    assert h["bytes_down"].tolist() == [2 * message_nbytes] * 20
    assert h.config["clients_per_round"] == 2
    again = algo.run(DATAS, 20, seed=7, runtime=LocalRuntime(n_threads=2, batched=False))
    assert again.equals(h)
    other = algo.run(DATAS, 20, seed=8)
    assert [r["active"] for r in other.records] != selections


@pytest.mark.parametrize("name", ["FedAvg", "Scaffold"])
def test_bernoulli_participation_selects_each_client_with_its_probability(name):
    h = make(name, participation_prob=0.4, local_steps=1).run(DATAS, 300, seed=1)
    counts = np.array([len(r["active"]) for r in h.records])
    assert counts.min() == 0 and counts.max() >= 4  # independent coins: the count varies
    # mean of 300 Binomial(5, 0.4) counts: sd sqrt(5·0.4·0.6/300) ≈ 0.063
    assert abs(counts.mean() - 2.0) < 5 * 0.063
    assert make(name, participation_prob=0.4, local_steps=1).run(DATAS, 300, seed=1).equals(h)


def test_scaffold_sampled_round_is_algorithm_1_of_karimireddy_et_al():
    # x ← x + (η_g/|S|) Σ_{i∈S} Δy_i, c ← c + (1/N) Σ_{i∈S} Δc_i
    algo = make("Scaffold", clients_per_round=3, server_lr=1.7)
    server, clients = algo.build(DATAS, seed=3, init=INIT)
    ids = server.select(0)
    message = server.broadcast(0)
    payloads = {i: clients[i].step(message) for i in ids}
    deltas = np.array([np.frombuffer(payloads[i], dtype="<f8") for i in ids])
    server.aggregate(0, payloads)
    np.testing.assert_allclose(server.x, INIT + 1.7 / 3 * deltas[:, :DIM].sum(axis=0), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(server.c, deltas[:, DIM:].sum(axis=0) / N_CLIENTS, rtol=1e-14, atol=1e-15)
    for i in range(N_CLIENTS):  # the sampled clients' c_i moved by Δc_i, the others' stayed 0
        expected = deltas[ids.index(i), DIM:] if i in ids else np.zeros(DIM)
        np.testing.assert_array_equal(clients[i].c, expected)


def test_fedavg_idle_round_keeps_the_server_point():
    algo = make("FedAvg", participation_prob=0.2)
    server, _ = algo.build(DATAS, seed=0, init=INIT)
    t = next(t for t in range(100) if not server.select(t))
    server.broadcast(t)
    server.aggregate(t, {})
    np.testing.assert_array_equal(server.x, INIT)


def test_too_many_clients_per_round_is_refused_at_build():
    with pytest.raises(ValueError, match="'clients_per_round' <= n_clients=5"):
        make("FedAvg", clients_per_round=6).run(DATAS, 1)
    with pytest.raises(ValueError, match="at most one of 'clients_per_round'"):
        make("Scaffold", clients_per_round=2, participation_prob=0.5)


# -- (d) FedMLS and Scaffnew do not sample clients -------------------------------------------------------------
@pytest.mark.parametrize("name, why", [("FedMLS", "Algorithm 1 of the FedMLS paper.*§5"),
                                       ("Scaffnew", "ProxSkip's Scaffnew.*TAMUNA")])
@pytest.mark.parametrize("arg, value", [("clients_per_round", 2), ("participation_prob", 0.5)])
def test_methods_without_client_sampling_refuse_it_naming_the_argument_and_why(name, why, arg, value):
    with pytest.raises(ValueError, match=f"{name} does not sample clients: {why}.*expected '{arg}' to be None"):
        make(name, **{arg: value})
    assert make(name, participation_prob=1.0).config()["participation_prob"] == 1.0  # every client: accepted


# -- (e) the fault policy -------------------------------------------------------------------------------------
def counting_step(client):
    """``FaultyClient.step`` for messages without a round index: the round is the client's call count."""
    calls = iter(range(10**6))

    def step(message):
        t = next(calls)
        cause = client.plan.get((t, client.index))
        if cause == "raise":
            raise RuntimeError("injected failure")
        payload = client.client.step(message)
        if cause == "nan":
            return np.full(len(payload) // 8, np.nan).tobytes()
        return payload[:-3] if cause == "truncate" else payload
    return step


def expected_after_round_0(name, algo, messages):
    """The server vector after round 0 from ``INIT`` given the decoded messages of the clients that answered."""
    rows = np.array(messages)
    if name == "Scaffold":
        server_lr = np.sqrt(N_CLIENTS)
        return np.concatenate([INIT + server_lr * rows[:, :DIM].mean(axis=0), rows[:, DIM:].sum(axis=0) / N_CLIENTS])
    if name == "FedMLS":  # k = 1: x_1 = z_1 = y_1 = INIT, y_2 = INIT, z_2 = z_1 − (2/4)(y_2 − mean_i y_2^i)
        return INIT - 0.5 * (INIT - rows.mean(axis=0))
    return rows.mean(axis=0)


@pytest.mark.parametrize("cause", ["raise", "nan", "truncate"])
@pytest.mark.parametrize("name", METHODS)
def test_a_faulty_client_is_dropped_with_its_reason_and_the_others_are_averaged(name, cause):
    faulty_index = 2
    algo = make(name)
    server, clients = algo.build(DATAS, seed=4, init=INIT)
    before = clients[faulty_index].export_state().to_arrays()
    wrapped = FaultyClient(clients[faulty_index], {(0, faulty_index): cause})
    wrapped.step = counting_step(wrapped)
    parties = [wrapped if c.index == faulty_index else c for c in clients]
    h = run_rounds(server, parties, 1)
    record = h.records[0]
    assert record["dropped"] == [faulty_index]
    assert record["active"] == [i for i in range(N_CLIENTS) if i != faulty_index]
    reason = record["drop_reasons"][0]
    if cause == "raise":
        assert reason.startswith(CAUSES["raise"])
    else:
        assert reason.startswith(f"invalid payload: Expected the payload of client {faulty_index}")
    assert record["bytes_up"] == (N_CLIENTS - 1) * 8 * DIM * (2 if name == "Scaffold" else 1)
    # the server averaged the others' messages: those of fresh clients on the same message
    fresh_server, fresh = algo.build(DATAS, seed=4, init=INIT)
    message = fresh_server.broadcast(0)
    messages = [np.frombuffer(fresh[i].step(message), dtype="<f8") for i in range(N_CLIENTS) if i != faulty_index]
    np.testing.assert_allclose(server_vector(name, server), expected_after_round_0(name, algo, messages),
                               rtol=1e-14, atol=1e-15)
    # the dropped client's state (control variates, iterates, streams) is that of the start of the round
    after = clients[faulty_index].export_state().to_arrays()
    assert_states_equal(after, before)


def assert_states_equal(a, b):
    assert set(a) == set(b)
    for key in a:
        if isinstance(a[key], dict):
            assert_states_equal(a[key], b[key])
        elif isinstance(a[key], list):
            assert len(a[key]) == len(b[key])
            for u, v in zip(a[key], b[key]):
                assert_states_equal(u, v) if isinstance(u, dict) else np.testing.assert_array_equal(u, v)
        else:
            np.testing.assert_array_equal(a[key], b[key])


def test_without_the_drop_policy_a_missing_or_invalid_message_raises():
    server, clients = make("FedAvg").build(DATAS, seed=0)
    message = server.broadcast(0)
    payloads = {i: c.step(message) for i, c in enumerate(clients)}
    with pytest.raises(ValueError, match="every client's message.*misses clients \\[3\\]"):
        server.aggregate(0, {i: b for i, b in payloads.items() if i != 3})
    with pytest.raises(ValueError, match="payload of client 1"):
        server.aggregate(0, {**payloads, 1: b"\x00" * 5})
    dropped = []
    server.aggregate(0, {**payloads, 1: b"\x00" * 5}, on_invalid=lambda i, reason: dropped.append(i))
    assert dropped == [1]


def test_a_compressed_payload_that_fails_validation_is_dropped():
    for name, cut_reason in (("FedAvg", "malformed payload"), ("Scaffold", "part 1 to be 44 bytes, got 43")):
        server, clients = make(name, compressor=StochasticRounding(bits=8)).build(DATAS, seed=0)
        message = server.broadcast(0)
        payloads = {i: c.step(message) for i, c in enumerate(clients)}
        reasons = {}
        bad = {**payloads, 0: payloads[0][:-1], 4: payloads[4] + b"\x00"}
        x_before = server.x.copy()
        server.aggregate(0, bad, on_invalid=reasons.__setitem__)
        assert sorted(reasons) == [0, 4], name
        assert cut_reason in reasons[0], reasons[0]
        assert ("malformed payload" if name == "FedAvg" else "to end after its 2 parts") in reasons[4], reasons[4]
        assert not np.array_equal(server.x, x_before)  # the round went on with the three valid messages


# -- (e') a server step that fails on valid messages ----------------------------------------------------------
LARGEST = np.finfo(np.float64).max


def huge_payload(payload, value=LARGEST):
    """A valid uncompressed payload as long as ``payload``, every value ``value``: finite, so it passes the
    decoding checks, but huge enough that a sum of two such messages overflows."""
    return encode_vector(np.full(len(payload) // 8, value))


def make_any(name, **kw):
    """:func:`make`, and FedProx (FedAvg's server) on the same problem."""
    if name == "FedProx":
        return FedProx(L1Regression(), **{"local_lr": 0.05, "local_steps": 3, "mu": 0.1, **kw})
    return make(name, **kw)


@pytest.mark.parametrize("name", METHODS + ["FedProx"])
def test_a_failing_subgradient_server_step_changes_nothing_or_goes_on_without_the_failing_message(name):
    # Clients 2 and 3 send finite values near the largest float64: each message is valid, but the mean's sum
    # (FedAvg's, Scaffnew's and FedMLS's, Scaffold's x and c) overflows.  (A single finite message cannot make
    # a mean overflow; it can make Scaffold's x + eta_g mean overflow: see the whole run below.)
    algo = make_any(name)

    def fresh():
        server, clients = algo.build(DATAS, seed=4, init=INIT)
        return server, clients, server.broadcast(0)

    server, clients, message = fresh()
    payloads = {i: clients[i].step(message) for i in server.select(0)}
    bad = {**payloads, 2: huge_payload(payloads[2]), 3: huge_payload(payloads[3], 1e308)}
    before = server.export_state().to_arrays()
    with pytest.raises(ValueError, match=r"Round 0: the server step failed \(ValueError: the server step's new .*"
                                         r"not finite\); the server's state is unchanged"):
        server.aggregate(0, bad)
    assert_states_equal(server.export_state().to_arrays(), before)  # bit for bit: array_equal of the same floats
    for key, value in before.items():
        assert np.asarray(server.export_state().to_arrays()[key]).tobytes() == np.asarray(value).tobytes(), key
    dropped = []
    record = server.aggregate(0, bad, on_invalid=lambda i, reason: dropped.append((i, reason)))
    assert [i for i, _ in dropped] == [2]  # the largest message, alone: without it the step succeeds
    assert re.search(r"its message made the server step fail .*not finite.*without the 1 largest of the "
                     rf"{N_CLIENTS} messages.*about 1e3\d\d", dropped[0][1]), dropped[0][1]
    # bit for bit the step over the other messages (client 3's huge one included: it does not fail the step)
    ref, _, _ = fresh()
    refused = []  # client 2's message is missing: the 'drop' policy, which refuses nothing here
    assert ref.aggregate(0, {i: b for i, b in bad.items() if i != 2}, on_invalid=lambda *a: refused.append(a)) == record
    assert refused == []
    got, want = server.export_state().to_arrays(), ref.export_state().to_arrays()
    assert sorted(got) == sorted(want)
    for key in got:
        assert np.asarray(got[key]).tobytes() == np.asarray(want[key]).tobytes(), key
    assert all(np.isfinite(server_vector(name if name != "FedProx" else "FedAvg", server)))


class HugeClient:
    """A client that runs its step, then sends :func:`huge_payload` (everything else is the client's)."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        return getattr(self.client, name)

    def step(self, message):
        return huge_payload(self.client.step(message))


def test_a_client_whose_messages_make_the_scaffold_step_overflow_is_dropped_and_the_run_goes_on():
    # Two clients a round: x + sqrt(5) (1/2) (Delta y_i + Delta y_j) overflows when one Delta y is the largest
    # float64.  Every round that contacts client 2 drops it with the reason, and the run equals the one in
    # which its step fails instead (its message never arrives), bit for bit.
    absurd, n_rounds = 2, 6
    algo = make("Scaffold", clients_per_round=2)

    def run(wrap):
        server, clients = algo.build(DATAS, seed=5, init=INIT)
        return run_rounds(server, [wrap(c) if c.index == absurd else c for c in clients], n_rounds), server

    got, server = run(HugeClient)
    ref, ref_server = run(lambda c: FaultyClient(c, {(ANY_ROUND, absurd): "raise"}))
    contacted = [r for r in got.records if absurd in r["dropped"]]
    assert len(got.records) == n_rounds and 0 < len(contacted) < n_rounds  # the run went on past the failing steps
    for r in got.records:
        assert absurd not in r["active"]
        if absurd in r["dropped"]:
            assert "its message made the server step fail" in r["drop_reasons"][r["dropped"].index(absurd)]
    assert [r["dropped"] for r in got.records] == [r["dropped"] for r in ref.records]
    assert got.equals(ref, ignore=("wall_time", "monitor_time", "drop_reasons"))
    for key in ("x", "c"):
        assert getattr(server, key).tobytes() == getattr(ref_server, key).tobytes(), key
        assert np.isfinite(getattr(server, key)).all(), key


# -- (4) state resumes bit for bit ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", METHODS)
def test_party_states_resume_a_compressed_sampled_run_bit_for_bit(name):
    kw = {"compressor": StochasticRounding(bits=8)}
    if name in ("FedAvg", "Scaffold"):
        kw["clients_per_round"] = 3
    algo = make(name, **kw)
    server, clients = algo.build(DATAS, seed=6)
    whole = run_rounds(server, clients, 8)
    first_server, first_clients = algo.build(DATAS, seed=6)
    history = run_rounds(first_server, first_clients, 4)
    saved = first_server.export_state(), [c.export_state() for c in first_clients]
    resumed_server, resumed_clients = algo.build(DATAS, seed=6)  # fresh parties: only the saved states carry over
    resumed_server.import_state(saved[0])
    for c, state in zip(resumed_clients, saved[1]):
        c.import_state(state)
    resumed = run_rounds(resumed_server, resumed_clients, 8, start=4, history=history)
    assert resumed.equals(whole)
    assert_states_equal(resumed_server.export_state().to_arrays(), server.export_state().to_arrays())
    for a, b in zip(resumed_clients, clients):
        assert_states_equal(a.export_state().to_arrays(), b.export_state().to_arrays())


# -- other runtimes -------------------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_ray_reproduces_bernoulli_participation(ray_session):  # the session's local Ray: tests/conftest.py
    # The matrix (tests/federation/test_matrix.py) runs every method on Ray with clients_per_round=, compression
    # and a faulty client; the other participation rule, participation_prob=, on Ray here.
    from fedmm.runtime.ray import RayRuntime

    datas = nonsmooth_toy_data("hinge", n_clients=5, m=20, d=3, seed=3)
    problem, q = HingeSVM(), StochasticRounding(bits=8)
    algo = Scaffold(problem, local_lr=0.05, participation_prob=0.6, compressor=q)
    reference = algo.run(datas, 5, seed=2, evaluate_every=1)
    assert algo.run(datas, 5, seed=2, evaluate_every=1, runtime=RayRuntime(2)).equals(reference)
