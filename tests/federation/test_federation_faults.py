# SPDX-License-Identifier: BSD-3-Clause
"""One fault policy in process (issue 15, first increment): a client whose round raises or whose payload
fails validation is dropped for the round (Algorithm 2 lines 10-11) and the run goes on; rounds are
atomic, so V = Σ μ_i V_i holds after every round, failed ones and Ctrl-C included; the server's step is
atomic too, so an absurd but finite message cannot leave the server unusable."""
import re

import numpy as np
import pytest

from fedmm.algorithms import FedMM, StopRun
from fedmm.compression import StochasticRounding
from fedmm.federation import LocalRuntime
from fedmm.history import History
from fedmm.models import DictionaryLearning, GaussianMixture, InverseToy

from fault_injection import FaultyClient, absurd_payload
from reference import FailingDictionaryLearning, FailingInverseToy, fedmm_rounds_with_drops


def _toy_datas(failing=4):
    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20) for _ in range(6)]
    if failing is not None:
        datas[failing] = np.full(20, FailingInverseToy.FAIL_MARK)
    return datas


def _invariant_gap(server, clients):
    """‖V − Σ_i μ_i V_i‖ / max(1, ‖V‖)."""
    total = sum(w * c.V for w, c in zip(server.weights, clients))
    return float(np.linalg.norm(server.V - total) / max(1.0, np.linalg.norm(server.V)))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_raising_client_is_dropped_and_the_run_equals_algorithm_2_without_it(n_threads):
    datas = _toy_datas()
    algo = FedMM(FailingInverseToy(), participation_prob=1.0, control_variate_step=0.5, step=0.5, batch_size=5,
                 n_threads=n_threads, start="model")  # the mean-statistic start would need client 4's statistic
    h = algo.run(datas, 4, seed=7)
    assert h.config["backend"] == "python"  # the subclass overrides statistic: no compiled form
    rounds, S, theta = fedmm_rounds_with_drops(algo, datas, 4, 7, failing={4})
    for rec, (ids, E_s, _) in zip(h.records, rounds, strict=True):
        assert rec["dropped"] == [4] and rec["active"] == [i for i in ids if i != 4]
        assert rec["drop_reasons"] == ["RuntimeError: simulated client failure"]
        assert rec["E_s"] == E_s
    np.testing.assert_array_equal(h.state["S"], S)
    np.testing.assert_array_equal(h.state["theta"], theta)
    with pytest.raises(RuntimeError, match="simulated client failure"):
        algo.run(datas, 4, seed=7, on_client_error="raise")


class _Garbling(StochasticRounding):
    """8-bit rounding whose payloads from the clients in ``bad`` are cut short (a corrupted message)."""

    def __init__(self, bad):
        super().__init__(bits=8)
        self.bad = bad

    def encode(self, x, rng=None):
        payload = super().encode(x, rng)
        return payload[:-3] if self.bad and np.any(x) else payload  # the set-up probe (zeros) passes

    def quantizer_spec(self, q):
        return None  # a user compressor: Python backend

    def __repr__(self):
        return f"_Garbling({self.bad})"


@pytest.mark.parametrize("alpha,caught_by", [(0.0, "invalid payload: malformed payload"),
                                             (0.2, "ValueError: malformed payload")],
                         ids=["server-validation", "client-decode"])
def test_an_invalid_payload_drops_its_client_and_restores_its_state(alpha, caught_by):
    """α = 0: the server's validation rejects the payload; α > 0: the client's own decode (for V) fails first."""
    rng = np.random.default_rng(0)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(4)]
    comps = [_Garbling(i == 2) for i in range(4)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), participation_prob=1.0, compressor=comps, control_variate_step=alpha,
                 batch_size=6, control_variates="oracle")
    server, clients = algo.build(datas, seed=1)
    h = LocalRuntime().run(server, clients, 5, history=History("FedMM"))
    assert all(r["dropped"] == [2] and r["active"] == [0, 1, 3] and r["drop_reasons"][0].startswith(caught_by)
               for r in h.records)
    assert _invariant_gap(server, clients) < 1e-14
    # client 2's control variate never moved: its messages were never aggregated
    fresh, fresh_clients = algo.build(datas, seed=1)
    setup = fresh.setup_message()
    fresh.setup_aggregate({c.index: c.setup(setup) for c in fresh_clients})
    np.testing.assert_array_equal(clients[2].V, fresh_clients[2].V)
    with pytest.raises(ValueError, match="malformed payload"):
        server2, clients2 = algo.build(datas, seed=1)
        LocalRuntime(on_client_error="raise").run(server2, clients2, 2, history=History("FedMM"))


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_ctrl_c_leaves_consistent_parties_and_attaches_the_completed_rounds(backend):
    rng = np.random.default_rng(2)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(5)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), clients_per_round=3, compressor=StochasticRounding(bits=8),
                 control_variate_step=0.3, batch_size=6, backend=backend)
    server, clients = algo.build(datas, seed=4)

    def interrupt(t):
        if t == 5:
            raise KeyboardInterrupt

    runtime = LocalRuntime(compiled=backend == "compiled")
    with pytest.raises(KeyboardInterrupt) as info:
        runtime.run(server, clients, 10, history=History("FedMM"), callback=interrupt)
    completed = info.value.history
    # both backends call the callback once its round is committed: the interrupted run holds rounds 0..5
    assert [r["t"] for r in completed.records] == list(range(6))
    assert _invariant_gap(server, clients) < 1e-14
    # and the parties are exactly where an uninterrupted run is after those rounds
    ref_server, ref_clients = algo.build(datas, seed=4)
    LocalRuntime(compiled=backend == "compiled").run(ref_server, ref_clients, len(completed.records),
                                                     history=History("FedMM"))
    for key, value in ref_server.export_state().to_arrays().items():
        np.testing.assert_array_equal(server.export_state().to_arrays()[key], value)


def test_a_failing_client_inside_a_compiled_stretch_commits_the_rounds_before_it():
    """The compiled backend reruns a failed round on the Python backend, which drops the client."""
    rng = np.random.default_rng(5)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(4)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), participation_prob=1.0, compressor=StochasticRounding(bits=8),
                 control_variate_step=0.1, batch_size=30, backend="compiled")
    server, clients = algo.build(datas, seed=3)
    h = LocalRuntime().run(server, clients, 3, history=History("FedMM"))
    assert all(r["dropped"] == [] for r in h.records)  # healthy: nothing dropped
    clients[1].data[:] = np.inf  # a client whose data went bad mid-run: its compiled round fails
    h2 = LocalRuntime().run(server, clients, 3, history=History("FedMM"))
    assert [r["dropped"] for r in h2.records] == [[1], [1], [1]]
    assert _invariant_gap(server, clients) < 1e-14


# -- an absurd but finite message cannot leave the server unusable --------------------------------------
def _dictionary_round(n_clients=6, seed=1, p=1.0):
    """A DictionaryLearning server after set-up, selected for round 0, and its clients' honest payloads
    (``p``: the participation probability the server unbiases the aggregate with, ``μ_i/p``)."""
    rng = np.random.default_rng(0)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(n_clients)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), participation_prob=p, batch_size=6)

    def fresh():
        server, clients = algo.build(datas, seed=seed)
        setup = server.setup_message()
        server.setup_aggregate({c.index: c.setup(setup) for c in clients})
        server.select(0)
        return server, clients

    server, clients = fresh()
    message = server.broadcast(0)
    return fresh, server, {c.index: c.step(message) for c in clients}


def _absurd(server, value=1e300):
    return absurd_payload(server.V.shape[0], value)


#: DictionaryLearning's statistic_bound (2**480): its Π and T work on squares of the entries of s⁽¹⁾
BOUND = DictionaryLearning.statistic_bound


def _too_large_together(server, fraction):
    """A message within the bound (``fraction`` of it) whose share ``(μ_i/p) Δ_i`` is beyond it at p = 0.05."""
    return _absurd(server, fraction * BOUND)


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key


def test_an_absurd_message_is_refused_like_a_non_finite_one_before_the_step():
    fresh, server, payloads = _dictionary_round()
    bad = {**payloads, 2: _absurd(server)}
    before, theta = server.export_state().to_arrays(), server.theta
    with pytest.raises(ValueError, match=r"Client 2 sent values of magnitude up to 1e\+300, beyond the range of "
                                         r"DictionaryLearning's statistics \(statistic_bound = 3.12e\+144\)"):
        server.aggregate(0, bad)
    _assert_same_state(server.export_state().to_arrays(), before)
    assert server.theta is theta
    dropped = []
    record = server.aggregate(0, bad, on_invalid=lambda i, reason: dropped.append((i, reason)))
    assert [i for i, _ in dropped] == [2] and dropped[0][1].startswith("Client 2 sent values of magnitude")
    # exactly the step of the other messages
    ref, _ = fresh()
    assert ref.aggregate(0, {i: b for i, b in payloads.items() if i != 2}) == record
    _assert_same_state(server.export_state().to_arrays(), ref.export_state().to_arrays())


def test_the_bound_refuses_the_first_float_beyond_it_and_accepts_the_bound():
    _, server, payloads = _dictionary_round()
    assert server.statistic_bound == BOUND == 2.0**480
    reasons = {}
    server.aggregate(0, {**payloads, 1: _absurd(server, np.nextafter(BOUND, np.inf)), 3: _absurd(server, -BOUND)},
                     on_invalid=reasons.__setitem__)
    assert reasons[1].startswith("Client 1 sent values of magnitude up to")
    assert not reasons.get(3, "").startswith("Client 3 sent")  # within the bound: it reached the step


def test_a_step_beyond_the_statistic_bound_fails_and_leaves_the_server_exactly_as_it_was():
    fresh, server, payloads = _dictionary_round(p=0.05)
    bad = {**payloads, 2: _too_large_together(server, 0.9)}
    before, theta = server.export_state().to_arrays(), server.theta
    with pytest.raises(ValueError, match="Round 0: the server step failed .*aggregate H .* beyond .*unchanged"):
        server.aggregate(0, bad)
    _assert_same_state(server.export_state().to_arrays(), before)
    assert server.theta is theta
    # still usable: the honest messages give exactly what a server that never saw the bad one gives
    record = server.aggregate(0, payloads)
    ref, _ = fresh()
    assert ref.aggregate(0, payloads) == record
    _assert_same_state(server.export_state().to_arrays(), ref.export_state().to_arrays())


@pytest.mark.parametrize("n_bad", [1, 2, 3])
def test_with_on_invalid_the_step_goes_on_without_the_failing_messages(n_bad):
    fresh, server, payloads = _dictionary_round(p=0.05)
    bad_ids = [4, 1, 3][:n_bad]
    bad = {**payloads, **{i: _too_large_together(server, -(0.5 + 0.1 * i)) for i in bad_ids}}
    dropped = []
    record = server.aggregate(0, bad, on_invalid=lambda i, reason: dropped.append((i, reason)))
    assert [i for i, _ in dropped] == sorted(bad_ids)
    for _, reason in dropped:  # each names the failure, the retry and its message's size (‖(μ_i/p) Δ_i‖ ~ 1e145)
        assert re.search(f"aggregate H .*beyond.*without the {n_bad} largest of the 6 messages.*about 1e14[56]",
                         reason)
    # bit for bit the step of the honest messages alone
    ref, _ = fresh()
    assert ref.aggregate(0, {i: b for i, b in payloads.items() if i not in bad_ids}) == record
    _assert_same_state(server.export_state().to_arrays(), ref.export_state().to_arrays())


def test_more_failing_messages_than_retries_drop_the_round_s_messages():
    fresh, server, payloads = _dictionary_round(p=0.05)
    from fedmm.algorithms.federated import MAX_STEP_RETRIES
    bad = {**payloads, **{i: _too_large_together(server, 0.9) for i in range(MAX_STEP_RETRIES + 1)}}
    dropped = []
    server.aggregate(0, bad, on_invalid=lambda i, reason: dropped.append((i, reason)))
    assert [i for i, _ in dropped] == list(range(6))
    assert all("the round went on with no message" in r for _, r in dropped)
    ref, _ = fresh()
    ref.aggregate(0, {})
    _assert_same_state(server.export_state().to_arrays(), ref.export_state().to_arrays())


class _BrokenT(InverseToy):
    """``T`` fails once ``broken`` is set (the server's own model is at fault, not a message)."""

    broken = False

    def T(self, s):
        if self.broken:
            raise np.linalg.LinAlgError("simulated failure of T")
        return super().T(s)


def test_a_step_that_fails_without_any_message_raises_and_drops_nobody():
    model = _BrokenT()
    datas = _toy_datas(failing=None)
    server, clients = FedMM(model, participation_prob=1.0, batch_size=5).build(datas, seed=2)
    setup = server.setup_message()
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    message = server.broadcast(0)
    payloads = {c.index: c.step(message) for c in clients}
    model.broken = True
    before = server.export_state().to_arrays()
    dropped = []
    with pytest.raises(ValueError, match="fails even without the clients' messages") as info:
        server.aggregate(0, payloads, on_invalid=lambda i, reason: dropped.append(i))
    assert isinstance(info.value.__cause__, np.linalg.LinAlgError)
    assert dropped == []
    _assert_same_state(server.export_state().to_arrays(), before)


def test_an_update_that_overflows_is_recorded_with_a_warning_not_silently():
    """A finite step whose E_s exceeds the largest float64 commits, and E_s = inf comes with a warning."""
    rng = np.random.default_rng(0)
    datas = [rng.standard_normal((30, 2)) for _ in range(4)]
    server, clients = FedMM(GaussianMixture(2), participation_prob=1.0, batch_size=6).build(datas, seed=1)
    setup = server.setup_message()
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    message = server.broadcast(0)
    payloads = {c.index: c.step(message) for c in clients}
    payloads[2] = _absurd(server)
    with pytest.warns(RuntimeWarning, match="update size E_s .* exceeds the largest float64"):
        record = server.aggregate(0, payloads)
    assert record["E_s"] == np.inf and np.isfinite(record["E_ps"])
    assert all(np.isfinite(v).all() for v in server.export_state().to_arrays().values())


def _absurd_toy_datas():
    """Nine clients of ten samples in [1, 3] and one of a thousand samples 4e307: its Δ is finite but its share
    (μ_i/p) Δ_i = (0.917/0.2) 4e307 overflows float64 whenever it is selected."""
    rng = np.random.default_rng(3)
    return [rng.uniform(1, 3, 10) for _ in range(9)] + [np.full(1000, 4e307)]


@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_absurd_statistics_are_dropped_alike_on_both_backends(alpha):
    """The compiled stretch stops at the round whose server step overflows (ENONFINITE), restores it and reruns it
    on the Python backend, which drops the client: both backends give the same run, bit for bit."""
    datas = _absurd_toy_datas()
    runs = {}
    for backend in ("python", "compiled"):
        algo = FedMM(InverseToy(), clients_per_round=2, control_variate_step=alpha, step=0.5, batch_size=4,
                     backend=backend,
                     start="model")  # client 9's absurd statistic is for the rounds, not the start exchange
        server, clients = algo.build(datas, seed=7)
        h = LocalRuntime(compiled=backend == "compiled").run(server, clients, 12, history=History("FedMM"))
        assert _invariant_gap(server, clients) < 1e-14
        runs[backend] = (h, server.export_state().to_arrays())
    h, state = runs["python"]
    hc, state_c = runs["compiled"]
    hit = [r["t"] for r in h.records if 9 in r["dropped"]]
    assert hit == [9]  # the one round that selects client 9 with this seed
    assert h.records[9]["active"] == [2]
    assert "made the server step fail" in h.records[9]["drop_reasons"][0]
    assert all(r["dropped"] == [] for r in h.records if r["t"] != 9)
    for rec, rec_c in zip(h.records, hc.records, strict=True):
        for key in ("t", "active", "dropped", "drop_reasons", "gamma", "E_s", "E_ps"):
            assert rec.get(key) == rec_c.get(key), (rec["t"], key)
    _assert_same_state(state, state_c)
    algo = FedMM(InverseToy(), clients_per_round=2, control_variate_step=alpha, step=0.5, batch_size=4, start="model")
    assert algo.run(datas, 12, seed=7).config["backend"] == "compiled"


# -- issue 27 item 3: one client sending absurd statistics round after round -----------------------------
def _run_with_faulty_client(algo, datas, plan, n_rounds, seed=0):
    server, inner = algo.build(datas, seed=seed)
    clients = [FaultyClient(c, plan) for c in inner]
    h = LocalRuntime(compiled=False).run(server, clients, n_rounds, history=History("FedMM"))
    assert _invariant_gap(server, inner) < 1e-14
    return h, server


# with eta = 0, a round whose only other client's message breaks the Cholesky T drops every message (in both runs)
@pytest.mark.filterwarnings("ignore:FedMM. every contacted client was dropped:RuntimeWarning")
def test_a_client_sending_1e300_everywhere_is_dropped_and_the_run_equals_one_where_it_fails():
    """The issue's scenario: dictionary learning without ridge (η = 0), control variates, two of four clients per
    round, client 1 sending 1e300 everywhere.  Its messages were let in whenever T survived them, Ŝ and V filled
    with 1e299, and round 7 ended the run ('the server step fails even without the clients' messages') under
    on_client_error='drop'.  Now each one is refused at decode, and the run is the run where client 1's round
    fails in the same rounds (records, states, bit for bit; only the drop reason differs)."""
    rng = np.random.default_rng(0)
    datas = [rng.standard_normal((30, 5)) for _ in range(4)]
    algo = FedMM(DictionaryLearning(3, 0.1, ridge=0.0), clients_per_round=2, control_variate_step=0.3, step=0.5,
                 batch_size=5,
                 backend="python")
    # 11 rounds: with eta = 0 the twelfth reaches a singular A even without messages (in both runs alike)
    n_rounds = 11
    h, server = _run_with_faulty_client(algo, datas, {(t, 1): "absurd" for t in range(n_rounds)}, n_rounds)
    ref, ref_server = _run_with_faulty_client(algo, datas, {(t, 1): "raise" for t in range(n_rounds)}, n_rounds)
    hit = [r["t"] for r in h.records if 1 in r["active"] or 1 in r["dropped"]]
    assert len(hit) >= 4 and all(1 in h.records[t]["dropped"] for t in hit)
    # other drops (eta = 0: a round whose remaining message makes A singular) are those of the reference run
    assert [r["dropped"] for r in h.records] == [r["dropped"] for r in ref.records]
    for t in hit:
        assert h.records[t]["drop_reasons"][0].startswith(
            "invalid payload: Client 1 sent values of magnitude up to 1e+300, beyond")
    assert h.equals(ref, ignore={"wall_time", "monitor_time", "drop_reasons"})
    assert h.all_dropped_rounds == ref.all_dropped_rounds
    _assert_same_state(server.export_state().to_arrays(), ref_server.export_state().to_arrays())


def _heavy_dictionary_datas():
    """Four clients of standard normal rows, client 1's scaled by 1e150: its statistics (h hᵀ, z hᵀ) ~ 1e300."""
    rng = np.random.default_rng(8)
    datas = [np.ascontiguousarray(rng.standard_normal((20, 5))) for _ in range(4)]
    datas[1] = datas[1] * 1e150
    return datas


# the LASSO of rows at 1e150 hits its iteration cap (the client's data are absurd, not the solver)
@pytest.mark.filterwarnings("ignore::fedmm.kernels.ConvergenceWarning")
@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_absurd_statistics_of_a_client_s_own_data_are_dropped_alike_on_both_backends(alpha):
    """The compiled round refuses the message beyond the state bound (ERANGE) and reruns the round on the Python
    backend, which drops the client: both backends give the run where that client fails, bit for bit."""
    datas = _heavy_dictionary_datas()
    kwargs = dict(clients_per_round=2, control_variate_step=alpha, step=0.5, batch_size=5, start="model")
    # without warm starts: a failed compiled round leaves the warm-start codes it wrote (fedmm.kernels.run_rounds),
    # so the Python rerun of that round starts its LASSO solves elsewhere (same minimizers, other last bits)
    model = dict(n_components=3, lam=0.1, ridge=0.0, warm_start=False)
    runs = {}
    for backend in ("python", "compiled"):
        algo = FedMM(DictionaryLearning(**model), backend=backend, **kwargs)
        runs[backend] = algo.run(datas, 10, seed=2)
        assert runs[backend].config["backend"] == backend
    h, hc = runs["python"], runs["compiled"]
    hit = [r["t"] for r in h.records if 1 in r["dropped"]]
    assert len(hit) >= 3 and all(r["dropped"] == ([1] if r["t"] in hit else []) for r in h.records)
    assert all(h.records[t]["drop_reasons"][0].startswith("invalid payload: Client 1 sent values of magnitude")
               for t in hit)
    assert hc.equals(h)
    # the run where client 1's round fails instead (its data marked: its statistic raises)
    failing = [d if i != 1 else np.full_like(d, FailingDictionaryLearning.FAIL_MARK) for i, d in enumerate(datas)]
    ref = FedMM(FailingDictionaryLearning(**model), backend="python", **kwargs).run(failing, 10, seed=2)
    assert h.equals(ref, ignore={"wall_time", "monitor_time", "drop_reasons"})


def test_large_but_valid_dictionary_statistics_are_not_dropped():
    """Data scaled by 1e60 (λ by 1e60, η by 1e120): statistics ~1e120, within the bound; no drop, the same dictionary
    (the mean-statistic start and every step are scale-equivariant), and the two backends agree bit for bit."""
    rng = np.random.default_rng(0)
    datas = [rng.standard_normal((30, 5)) for _ in range(4)]
    kwargs = dict(clients_per_round=2, control_variate_step=0.3, step=0.5, batch_size=5)
    runs = {}
    for scale in (1.0, 1e60):
        for backend in ("python", "compiled"):
            algo = FedMM(DictionaryLearning(3, 0.1 * scale, ridge=0.2 * scale**2), backend=backend, **kwargs)
            runs[scale, backend] = algo.run([d * scale for d in datas], 8, seed=0)
    big = runs[1e60, "python"]
    assert runs[1e60, "compiled"].equals(big) and runs[1e60, "compiled"].config["backend"] == "compiled"
    assert all(r["dropped"] == [] for r in big.records)
    assert np.abs(big.state["S"]).max() > 1e119
    np.testing.assert_allclose(big.state["theta"], runs[1.0, "python"].state["theta"], rtol=1e-6)


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_large_but_valid_statistics_are_not_dropped(backend):
    """A model whose Π and T take any finite statistic (InverseToy: statistic_bound = inf) is not bounded: the toy
    data scaled by 2**460 (statistics ~3e138, E_s ~1e277) give no drop, and exactly the scaled run (S scales by
    2**460, θ = S^{-1/2} by 2**-230, bit for bit)."""
    datas = _toy_datas(failing=None)
    scale = 2.0**460
    algo = FedMM(InverseToy(), clients_per_round=3, control_variate_step=0.3, step=0.5, batch_size=5, backend=backend)
    h = algo.run(datas, 8, seed=4)
    big = algo.run([d * scale for d in datas], 8, seed=4)
    assert big.config["backend"] == backend
    assert all(r["dropped"] == [] for r in big.records)
    assert [r["active"] for r in big.records] == [r["active"] for r in h.records]
    np.testing.assert_array_equal(big.state["S"], h.state["S"] * scale)
    np.testing.assert_array_equal(big.state["theta"], h.state["theta"] / 2.0**230)
    assert all(np.isfinite(r["E_s"]) and r["E_s"] > 1e270 for r in big.records)


@pytest.mark.parametrize("bound", [0.0, -1.0, float("nan"), "big", True])
def test_a_model_s_statistic_bound_must_be_a_positive_number(bound):
    class Bounded(InverseToy):
        statistic_bound = bound

    with pytest.raises(ValueError, match="Expected the model's 'statistic_bound' to be a number > 0"):
        FedMM(Bounded(), participation_prob=1.0, batch_size=5).run(_toy_datas(failing=None), 1, seed=0)


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_stop_run_from_the_callback_returns_the_completed_rounds(backend):
    """``StopRun`` raised by the callback after round t ends the run normally with rounds 0..t, on either
    backend, and the result is the run of t + 1 rounds."""
    rng = np.random.default_rng(3)
    datas = [np.ascontiguousarray(rng.standard_normal((40, 2)) + k) for k in range(3)]
    algo = FedMM(GaussianMixture(2, "full"), compressor=StochasticRounding(bits=8), step=0.5, backend=backend)

    def stop(t, state):
        if t == 4:
            raise StopRun

    history = algo.run(datas, 20, seed=1, callback=stop)
    ref = algo.run(datas, 5, seed=1)
    assert len(history) == 5 and history.config["stopped_early"] is True
    assert history.config["backend"] == backend
    np.testing.assert_array_equal(history.state["S"], ref.state["S"])
    np.testing.assert_array_equal(history.state["theta"], ref.state["theta"])
    np.testing.assert_array_equal(history.theta.means, ref.theta.means)
