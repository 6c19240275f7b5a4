# SPDX-License-Identifier: BSD-3-Clause
"""fedmm.runtime.flower: Flower's simulation and a real loopback deployment reproduce the in-process History."""
import gc
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the 'flower' extra is not installed: pip install 'fedmm[flower]'")

# Telemetry off and loopback-only Ray before Flower or Ray start (also inherited by the processes below).
os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
os.environ["FLWR_DISABLE_UPDATE_CHECK"] = "1"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = "0"

from flwr.serverapp import ServerApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

import fedmm.runtime.flower as ff  # noqa: E402
from fedmm.algorithms import FedMM  # noqa: E402
from fedmm.algorithms import FedAvg, FedMLS, FedProx, Scaffnew, Scaffold, init_generator  # noqa: E402
from fedmm.algorithms.federated import theta_structure, theta_template  # noqa: E402
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding  # noqa: E402
from fedmm.data import synthetic_dictionary  # noqa: E402
from fedmm.federation import Checkpoint  # noqa: E402
from fedmm.history import History  # noqa: E402
from fedmm.models import GaussianMixture  # noqa: E402
from fedmm.models.nonsmooth import HingeSVM, L1Regression  # noqa: E402
from fedmm.protocols import RemoteAlgorithm  # noqa: E402
from fedmm.runtime import LocalRuntime  # noqa: E402
from fault_injection import ANY_ROUND, CAUSES, FaultyClient, nan_payload  # noqa: E402
from reference import (FailingDictionaryLearning, FailingInverseToy, fedmm_rounds_with_drops,  # noqa: E402
                       nonsmooth_toy_data)
from matrix_cases import (ALGORITHMS, FAULTY, FLOWER_REASON, N_ROUNDS, OT_ALGORITHMS, STOP,  # noqa: E402
                          FaultyLocalRuntime, FaultyRemote, all_cells, assert_faulty_client_dropped, cell_id,
                          hinge_data)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "flower"
BIN = Path(sys.executable).parent
# Ray (under Flower's simulation) drops handles of helper processes while they run: not ours.
RAY_WARNINGS = pytest.mark.filterwarnings("ignore::ResourceWarning")


# --------------------------------------------------------------------------- unit level
def test_payload_array_round_trip_and_validation():
    payload = bytes(range(256)) * 3
    arr = ff.payload_array(payload)
    assert (arr.dtype, tuple(arr.shape), arr.stype) == ("uint8", (768,), ff.PAYLOAD_STYPE)
    assert ff.payload_bytes(arr) == payload
    assert ff.payload_bytes(ff.payload_array(b"")) == b""
    from flwr.app import Array

    with pytest.raises(ValueError, match="stype"):
        ff.payload_bytes(Array(dtype="uint8", shape=(3,), stype="numpy.ndarray", data=b"abc"))
    with pytest.raises(ValueError, match="declares 4 bytes"):
        ff.payload_bytes(Array(dtype="uint8", shape=(4,), stype=ff.PAYLOAD_STYPE, data=b"abc"))
    with pytest.raises(TypeError, match="flwr Array"):
        ff.payload_bytes(b"abc")


@pytest.mark.parametrize("theta", [np.zeros((3, 2)), np.float64(1.5), (np.zeros(2), np.ones((2, 2))),
                                   {"b": np.zeros(3), "a": np.ones((1, 2))}])
def test_theta_structure_rebuilds_the_parameter(theta):
    from fedmm.models.base import SurrogateModel

    template = theta_template(theta_structure(theta))
    vector = SurrogateModel.theta_vector(None, theta)
    rebuilt = SurrogateModel.theta_from_vector(None, vector, template)
    np.testing.assert_array_equal(SurrogateModel.theta_vector(None, rebuilt), vector)


def test_strategy_rejects_bad_arguments():
    algo = FedMM(FailingInverseToy())
    with pytest.raises(ValueError, match="n_clients"):
        ff.FedMMStrategy(algo, 0)
    with pytest.raises(TypeError, match="seed"):
        ff.FedMMStrategy(algo, 3, seed=np.random.SeedSequence(1))
    with pytest.raises(TypeError, match="fedmm.protocols.RemoteAlgorithm"):
        ff.FedMMStrategy("FedMM", 3)
    with pytest.raises(ValueError, match="on_client_error"):
        ff.FedMMStrategy(algo, 3, on_client_error="ignore")


def test_the_flower_module_lives_under_runtime():
    import importlib

    import fedmm.runtime

    assert ff.__name__ == "fedmm.runtime.flower" and fedmm.runtime.flower is ff
    with pytest.raises(ModuleNotFoundError, match="fedmm.flower"):
        importlib.import_module("fedmm.flower")  # renamed (issue 13): no shim at the old path


def test_missing_flower_gives_an_import_error_naming_the_extra():
    code = ("import sys; sys.modules['flwr'] = sys.modules['flwr.app'] = None\n"
            "try:\n    import fedmm.runtime.flower\nexcept ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'fedmm[flower]'" in out.stdout, out.stdout + out.stderr
    # Importing fedmm and its runtimes imports neither Flower nor Ray (both are optional extras).
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fedmm, fedmm.runtime; print(sorted(m for m in sys.modules "
                               "if m.split('.')[0] in ('flwr', 'ray') or m == 'fedmm.runtime.flower'))"],
        capture_output=True, text=True, timeout=120)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


# --------------------------------------------------------------------------- Flower simulation
def _run_simulation(server_app, client_app, n_nodes):
    """Flower's simulation on the session's local Ray (tests/conftest.py: ``ray_session``, two CPUs, one per
    ClientApp actor): Flower's Ray backend uses a Ray that is up, and its ``ray.shutdown()`` at the end is skipped
    so that the next simulation finds Ray up (each simulation starts its own actors and terminates them)."""
    import ray

    assert ray.is_initialized(), "a Flower simulation runs on the session's Ray: request the ray_session fixture"
    shutdown = ray.shutdown
    ray.shutdown = lambda *args, **kwargs: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            run_simulation(server_app, client_app, n_nodes, backend_config=SIM_BACKEND)
            gc.collect()
    finally:
        ray.shutdown = shutdown


class _Case:
    """One Flower simulation of the tests below: an algorithm, its clients' data, the rounds, the seed and the
    strategy's keyword arguments (``catch``: an exception out of the strategy's ``run`` is kept as its
    ``failure``).  With ``jobs`` (a function of a directory for the case's files returning functions of the grid),
    those run in turn instead, e.g. a run, its interrupt and its resumptions."""

    def __init__(self, algo, datas, n_rounds=None, seed=None, *, catch=False, jobs=None, **strategy_kwargs):
        self.algo, self.datas, self.n_rounds, self.seed = algo, datas, n_rounds, seed
        self.catch, self.jobs, self.strategy_kwargs = catch, jobs, strategy_kwargs

    def job(self, grid, directory):
        """The case's FedMMStrategy run on ``grid``: the strategy (``strategy.failure``: see ``catch``); with
        ``jobs``: ``(directory, [what each job returned])``."""
        if self.jobs is not None:
            return directory, [job(grid) for job in self.jobs(directory)]
        strategy = ff.FedMMStrategy(self.algo, len(self.datas), seed=self.seed, **self.strategy_kwargs)
        strategy.failure = None
        try:
            strategy.run(grid, self.n_rounds, timeout=120.0)
        except Exception as exc:
            if not self.catch:
                raise
            strategy.failure = exc
        return strategy


#: name -> function returning the test's :class:`_Case` (a fresh algorithm and data at every call: the in-process
#: reference of a test does not share objects with the simulation).  Filled next to the tests below.
CASES = {}
_SIMULATED = {}  # node count -> {case name: strategy, or the exception out of the case's job}


def _simulate_cases(cases, directory):
    """Run the ``cases`` (name -> :class:`_Case`, each with the same number of clients) in turn in ONE Flower
    simulation: one set of ClientApp actors for all of them (starting them is most of a simulation's cost).

    Each strategy has its own token, so the nodes hold every case's client states apart, as they do for the
    resumed runs below.  Before a case, the ServerApp writes its name to ``case_file``, which the ClientApp reads
    at every message for the case's algorithm and data (``fedmm.runtime.flower.client_app`` takes both as
    callables; the simulated nodes run on this machine).  Returns name -> what the case's job returned, or the
    exception that it raised (a failed assertion included: the other cases still run).  ``directory``: the case
    file, and a folder for each case's files."""
    n_nodes, = {len(case.datas) for case in cases.values()}
    case_file = directory / "case"
    out = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        for name, case in cases.items():
            case_file.write_text(name)
            (directory / name).mkdir()
            try:
                out[name] = case.job(grid, directory / name)
            except (Exception, pytest.fail.Exception) as exc:
                out[name] = exc

    algos = {name: case.algo for name, case in cases.items()}
    datas = {name: case.datas for name, case in cases.items()}
    _run_simulation(server_app, ff.client_app(lambda context: algos[case_file.read_text()],
                                              lambda pid, context: datas[case_file.read_text()][pid]), n_nodes)
    assert sorted(out) == sorted(cases), "the ServerApp did not finish"
    return out


@pytest.fixture
def simulated(ray_session, tmp_path_factory):
    """``simulated(name)``: the strategy that ran case ``name`` of :data:`CASES` in Flower's simulation.

    The first call runs every case with the same number of clients in one simulation (``_simulate_cases``);
    the results are kept for the session.  An exception out of the case's run is raised here."""
    def get(name):
        n_nodes = len(CASES[name]().datas)
        if n_nodes not in _SIMULATED:
            group = {k: case for k, case in ((k, make()) for k, make in sorted(CASES.items()))
                     if len(case.datas) == n_nodes}
            _SIMULATED[n_nodes] = _simulate_cases(group, tmp_path_factory.mktemp("flower-cases"))
        result = _SIMULATED[n_nodes][name]
        if isinstance(result, BaseException):
            raise result
        return result
    return get


def _gmm_clients(n_clients):
    rng = np.random.default_rng(4)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    return [centers[rng.choice(3, size=40, p=np.roll([0.6, 0.3, 0.1], i))] + rng.standard_normal((40, 2))
            for i in range(n_clients)]


def _gmm_fedmm(**oracle):
    """FedMM on the Gaussian mixture (EM surrogate): block quantization, a fixed count of 3 of 4 clients,
    control variates initialized by the oracle (set-up exchange); ``oracle``: the oracle's keywords."""
    return FedMM(GaussianMixture(3, n_features=2), clients_per_round=3, control_variate_step=0.3, step=0.5,
                 batch_size=8, control_variates="oracle", compressor=BlockQuantizer(4), **oracle)


def _gmm_spider_case():
    # SPIDER memory and V_i in context.state
    datas = _gmm_clients(4)
    algo = _gmm_fedmm(oracle="spider", k_in=2)
    S0 = GaussianMixture(3).init_statistic(datas, init_generator(9))
    return _Case(algo, datas, 4, 9, init=S0)


CASES["gmm-spider"] = _gmm_spider_case


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_simulation_reproduces_in_process_history(simulated):
    case = _gmm_spider_case()
    ref = case.algo.run(case.datas, 4, seed=9, init=case.strategy_kwargs["init"])
    strategy = simulated("gmm-spider")
    assert strategy.errors == []
    assert strategy.history.equals(ref)
    assert strategy.history.config["setup_bytes_up"] == ref.config["setup_bytes_up"] > 0
    assert [r["dropped"] for r in strategy.history.records] == [[]] * 4


def _gmm_mean_statistic_case():
    datas = _gmm_clients(4)
    return _Case(_gmm_fedmm(), datas, 3, 9, init_datas=datas)


CASES["gmm-mean-statistic"] = _gmm_mean_statistic_case


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_simulation_mean_statistic_start_reproduces_in_process_history(simulated):
    # The default start: θ_0 = T(init_statistic(init_datas)), then a start exchange gives Ŝ_0 = Π(Σ μ_i s̄_i(θ_0)),
    # bit for bit the Ŝ_0 that FedMM.run computes in process; control variates from the oracle at that Ŝ_0.
    case = _gmm_mean_statistic_case()
    algo, datas = case.algo, case.datas
    assert algo.start == "mean_statistic"
    ref = algo.run(datas, 3, seed=9)
    strategy = simulated("gmm-mean-statistic")
    assert strategy.errors == []
    assert strategy.history.equals(ref)
    np.testing.assert_array_equal(strategy.history.state["S"], ref.state["S"])
    one = len(Identity().encode(np.zeros(algo.model.layout.size), None))  # uncompressed, whatever the compressor
    assert strategy.history.config["start_bytes_up"] == 4 * one


def _failing_dictionary_case(**kwargs):
    Z, _, _ = synthetic_dictionary(90, 6, 3, seed=2)
    datas = [Z[:30], np.full((30, 6), FailingDictionaryLearning.FAIL_MARK), Z[60:]]
    algo = FedMM(FailingDictionaryLearning(3, 0.1, 0.2, n_features=6), participation_prob=1.0, control_variate_step=0.5,
                 step=0.5,
                 batch_size=10, compressor=StochasticRounding(bits=8), **kwargs)
    return _Case(algo, datas, 3 if kwargs.get("start") == "model" else 2, 7)


CASES["dictionary-failing-client"] = lambda: _failing_dictionary_case(start="model")
CASES["dictionary-failing-start"] = lambda: _failing_dictionary_case(backend="python")  # the override's backend


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_simulation_dictionary_learning_drops_and_reports_a_failing_client(simulated):
    # Dictionary learning (Ŝ_0 drawn by the server without data), 8-bit stochastic rounding, α > 0;
    # client 1 raises in every round: it is dropped and the others' rounds equal the in-process steps.
    case = CASES["dictionary-failing-client"]()
    algo, datas = case.algo, case.datas
    strategy = simulated("dictionary-failing-client")
    rounds, S, theta = fedmm_rounds_with_drops(algo, datas, 3, 7, failing={1})
    for rec, (ids, E_s, _) in zip(strategy.history.records, rounds):
        assert rec["dropped"] == [1] and rec["active"] == [0, 2]
        assert rec["E_s"] == E_s
    np.testing.assert_array_equal(strategy.history.state["S"], S)
    np.testing.assert_array_equal(strategy.history.state["theta"], theta)
    assert [(t, i) for t, i, _ in strategy.errors] == [(0, 1), (1, 1), (2, 1)]
    assert all("simulated client failure" in reason for *_, reason in strategy.errors)


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_simulation_start_exchange_drops_a_failing_client(simulated):
    # Issue 27 item 4: the default start with client 1 failing at θ_0: its error reply leaves it out of Ŝ_0
    # (μ re-weighted over clients 0 and 2), recorded in history.initial; the numbers are those of FedMM.run.
    case = CASES["dictionary-failing-start"]()
    algo, datas = case.algo, case.datas
    assert algo.start == "mean_statistic"
    ref = algo.run(datas, 2, seed=7)
    assert ref.initial["dropped"] == [1]
    strategy = simulated("dictionary-failing-start")
    h = strategy.history
    assert h.initial["dropped"] == [1] and "simulated client failure" in h.initial["drop_reasons"][0]
    assert all(r["dropped"] == [1] for r in h.records)
    # the reasons' wording differs between runtimes (a Flower error reply vs. the exception); the numbers do not
    assert h.equals(ref, ignore=("wall_time", "monitor_time", "drop_reasons"))
    assert [(t, i) for t, i, _ in strategy.errors] == [(ff.START_ROUND, 1), (0, 1), (1, 1)]


class _NaNPayloads(StochasticRounding):
    """8-bit rounding whose payloads decode to NaN (a corrupted client); the set-up probe (zeros) passes."""

    def encode(self, x, rng=None):
        payload = super().encode(x, rng)
        return nan_payload(len(x)) if np.any(x) else payload

    def quantizer_spec(self, q):
        return None  # a user compressor: Python backend

    def __repr__(self):
        return "_NaNPayloads()"


def _faulty_dictionary_run():
    """Three dictionary-learning clients: client 1 raises every round, client 2 sends NaN payloads (α = 0: only
    the server decodes them)."""
    Z, _, _ = synthetic_dictionary(90, 6, 3, seed=2)
    datas = [Z[:30], np.full((30, 6), FailingDictionaryLearning.FAIL_MARK), Z[60:]]
    comps = [StochasticRounding(bits=8), StochasticRounding(bits=8), _NaNPayloads(bits=8)]
    algo = FedMM(FailingDictionaryLearning(3, 0.1, 0.2, n_features=6), participation_prob=1.0, control_variate_step=0.0,
                 step=0.5,
                 batch_size=10, compressor=comps, start="model")
    return algo, datas


CASES["dictionary-failed-and-invalid"] = lambda: _Case(*_faulty_dictionary_run(), 3, 7)
CASES["dictionary-raise"] = lambda: _Case(*_faulty_dictionary_run(), 2, 7, catch=True, on_client_error="raise")


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_simulation_drops_failed_and_invalid_clients_with_their_reasons(simulated):
    algo, datas = _faulty_dictionary_run()
    strategy = simulated("dictionary-failed-and-invalid")
    rounds, S, theta = fedmm_rounds_with_drops(algo, datas, 3, 7, failing={1, 2})
    for rec, (ids, E_s, _) in zip(strategy.history.records, rounds, strict=True):
        assert rec["dropped"] == [1, 2] and rec["active"] == [0]
        assert "simulated client failure" in rec["drop_reasons"][0]
        assert rec["drop_reasons"][1].startswith(CAUSES["nan"])
        assert rec["E_s"] == E_s
    np.testing.assert_array_equal(strategy.history.state["S"], S)
    np.testing.assert_array_equal(strategy.history.state["theta"], theta)


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_on_client_error_raise_stops_the_run_at_the_first_failure(simulated):
    strategy = simulated("dictionary-raise")  # FedMMStrategy(..., on_client_error="raise").run(grid, 2)
    with pytest.raises(RuntimeError, match="(?s)client 1 failed in round 0: client error: .*simulated client failure"):
        raise strategy.failure
    assert len(strategy.history.records) == 0


# --------------------------------------------------------------------------- the subgradient family
SUBGRADIENT = {
    # minibatch oracles with their own streams (carried in the node's state), each method's schedules and state
    "FedMLS": lambda: FedMLS(HingeSVM(), prox_weight=("inverse", 1.0), radius=20.0, batch_size=0.3),
    "FedAvg": lambda: FedAvg(L1Regression(), local_lr=0.05, batch_size=4),
    # the recipe of docs/extending.md, with 8-bit compression of the clients' messages
    "FedProx": lambda: FedProx(HingeSVM(), mu=0.3, local_lr=0.05, batch_size=4, compressor=StochasticRounding(bits=8)),
    "Scaffold": lambda: Scaffold(HingeSVM(), local_lr=0.05, local_steps=2, batch_size=5),
    "Scaffnew": lambda: Scaffnew(L1Regression(), local_lr=0.05, communication_prob=0.5, batch_size=3),
}


def _subgradient_case(name):
    algo = SUBGRADIENT[name]()
    datas = nonsmooth_toy_data("hinge" if isinstance(algo.model, HingeSVM) else "l1", n_clients=3)
    stacked = algo.model.stack(datas)
    return _Case(algo, datas, 3, 6, objective=lambda x: algo.model.objective(stacked, x))


CASES.update({f"subgradient-{name}": (lambda name=name: _subgradient_case(name)) for name in SUBGRADIENT})


@pytest.mark.integration
@RAY_WARNINGS
@pytest.mark.parametrize("name", sorted(SUBGRADIENT))
def test_flower_simulation_carries_the_subgradient_family_with_the_in_process_history(name, simulated):
    # Every record (steps, schedules, objective at x, bytes), the final state (Scaffold's c, FedMLS's x, y, z and
    # its clients' z_K^i, collected at the end) equal the in-process run; no adapter: the algorithm is the contract.
    case = _subgradient_case(name)
    algo, datas = case.algo, case.datas
    ref = algo.run(datas, 3, seed=6, evaluate_every=1)
    strategy = simulated(f"subgradient-{name}")
    assert strategy.errors == []
    h = strategy.history
    assert h.equals(ref)
    assert sorted(h.state) == sorted(ref.state) and "objective" in h.records[-1] and "objective" in h.initial
    assert [r["active"] for r in h.records] == [[0, 1, 2]] * 3
    if name == "FedMLS":
        np.testing.assert_array_equal(h.state["z_clients"], ref.state["z_clients"])


class _FaultyFedAvg(FedAvg):
    """FedAvg whose client 1 raises in every round (tests/fault_injection.py): the runtime sees only the contract."""

    def remote_client(self, index, data, **kwargs):
        return FaultyClient(super().remote_client(index, data, **kwargs), {(ANY_ROUND, 1): "raise"})


CASES["subgradient-faulty-FedAvg"] = lambda: _Case(_FaultyFedAvg(L1Regression(), local_lr=0.05, batch_size=4),
                                                   nonsmooth_toy_data("l1", n_clients=3), 2, 6, catch=True)


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_simulation_of_a_faulty_subgradient_client_ends_as_in_process(simulated):
    # Client 1 fails in every round; under on_client_error='drop' Flower does what the in-process runtime does with
    # the same faulty client: the server leaves it out, with its reason, and averages the others.
    case = CASES["subgradient-faulty-FedAvg"]()
    algo, datas = case.algo, case.datas
    server, clients = algo.build(datas, seed=6)
    clients[1] = FaultyClient(clients[1], {(ANY_ROUND, 1): "raise"})
    ref = History(algo.name, {})
    LocalRuntime(batched=False, on_client_error="drop").run(server, clients, 2, history=ref)
    algo.remote_finish(server, ref)
    strategy = simulated("subgradient-faulty-FedAvg")
    assert [(t, i) for t, i, _ in strategy.errors][:1] == [(0, 1)]
    assert "injected failure" in strategy.errors[0][2]
    assert strategy.failure is None
    assert [r["dropped"] for r in ref.records] == [[1], [1]]
    assert strategy.history.equals(ref, ignore=("wall_time", "monitor_time", "drop_reasons"))
    assert all(r["dropped"] == [1] and "injected failure" in r["drop_reasons"][0] for r in strategy.history.records)


# --------------------------------------------------------------------------- real deployment
def _free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_for_port(port, proc, deadline):
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def _stop(procs):
    """SIGTERM each started process group (by its leader's PID), then SIGKILL what remains (bounded)."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:  # the process group also holds flower-superexec/flwr-clientapp children
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@pytest.mark.integration
def test_loopback_deployment_superlink_three_supernodes_flwr_run(tmp_path):
    link_port, *node_ports = _free_ports(4)
    # The venv's bin first: the SuperLink and SuperNodes spawn flower-superexec, flwr-serverapp, flwr-clientapp.
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "cli"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "config.toml").write_text(
        f'[superlink.loopback]\naddress = "127.0.0.1:{link_port}"\ninsecure = true\n')
    history_path = tmp_path / "history.json"
    procs = []
    logs = []

    def start(name, args, home):
        home.mkdir(exist_ok=True)
        log = open(tmp_path / f"{name}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([str(BIN / args[0]), *args[1:]], cwd=tmp_path, stdout=log,
                                      stderr=subprocess.STDOUT, env={**env, "FLWR_HOME": str(home)},
                                      start_new_session=True))
        return procs[-1]

    try:
        link = start("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link_port),
                                   "--disable-runtime-dependency-installation",
                                   "--database", ":flwr-in-memory:"], tmp_path / "link")
        deadline = time.monotonic() + 60
        try:
            _wait_for_port(link_port, link, deadline)
        except (RuntimeError, TimeoutError) as exc:
            raise AssertionError((tmp_path / "superlink.log").read_text()[-3000:]) from exc
        for i, port in enumerate(node_ports):
            start(f"supernode{i}", ["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link_port}",
                                    "--host", "127.0.0.1", "--port", str(port),
                                    "--node-config", f"partition-id={i} num-partitions=3"], tmp_path / f"node{i}")
        run = subprocess.run(
            [str(BIN / "flwr"), "run", str(EXAMPLE), "loopback", "--run-config",
             f"num-server-rounds=2 seed=5 history-path='{history_path}'"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        deadline = time.monotonic() + 240  # ~3 fresh clientapp processes per node, each importing fedmm
        while not history_path.exists() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), "a Flower process exited early"
            time.sleep(1.0)
        assert history_path.exists(), (tmp_path / "superlink.log").read_text()[-3000:]
        time.sleep(0.5)  # the ServerApp may still be writing
        got = History.load(history_path)
    finally:
        _stop(procs)
        for log in logs:
            log.close()

    sys.path.insert(0, str(EXAMPLE))
    try:
        from fedmm_flower_example import task
    finally:
        sys.path.remove(str(EXAMPLE))
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    config.update({"num-server-rounds": 2, "seed": 5})
    algo = task.make_algorithm(config)
    datas = [task.load_partition(i, config) for i in range(3)]
    S0 = task.initial_statistic(config)
    algo.model.fit_global_moments(datas)  # the strategy aggregated the same moments at start-up
    ref = algo.run(datas, 2, seed=5, init=S0)
    assert got.equals(ref)
    assert [r["active"] for r in got.records] == [[0, 1, 2], [0, 1, 2]]


# --------------------------------------------------------------------------- FedMM-OT and FedAdam
def test_every_algorithm_is_its_own_remote_algorithm_and_errors_name_what_is_wrong():
    from fedmm.algorithms import FedAdam, FedMMOT
    from fedmm.models import TransportProblem

    problem = TransportProblem(2, hidden_sizes=[4], batch_size=8)
    for algo in (FedMM(FailingInverseToy()), FedMMOT(problem), FedAdam(problem), FedAvg(L1Regression(), local_lr=0.1),
                 Scaffold(L1Regression(), local_lr=0.1), Scaffnew(L1Regression(), local_lr=0.1),
                 FedMLS(L1Regression(), prox_weight=1.0)):
        assert isinstance(algo, RemoteAlgorithm) and ff.remote_algorithm(algo) is algo  # no adapter
        assert ff.RemoteAlgorithm is RemoteAlgorithm
    assert FedMM(FailingInverseToy(), control_variates="oracle").setup_exchange()
    assert not FedMMOT(problem).setup_exchange()
    data = np.zeros((5, 2))
    assert FedMMOT(problem).describe_data(data, 0)["n-samples"].tolist() == [5]
    with pytest.raises(ValueError, match="partition 3"):
        FedAdam(problem).describe_data(np.zeros((5, 3)), 3)
    ot = FedAdam(problem, identity_steps=0)
    with pytest.raises(ValueError, match="public_data"):
        ot.remote_client(0, data, n_clients=2, seed=0)
    with pytest.raises(ValueError, match="public_data"):
        ot.remote_server(2, descriptions=[{"n-samples": np.array([5])}] * 2, seed=0)
    with pytest.raises(TypeError, match="init_datas"):
        ot.remote_server(2, descriptions=[{"n-samples": np.array([5])}] * 2, seed=0, init_datas=[data],
                         public_data=data)
    with pytest.raises(TypeError, match="public_data"):
        FedMM(FailingInverseToy()).remote_server(1, descriptions=[{"n-samples": np.array([3])}], seed=0,
                                                 init=np.array([1.0, 1.0]), public_data=data)
    with pytest.raises(TypeError, match="fedmm.protocols.RemoteAlgorithm"):
        ff.remote_algorithm(object())


def test_the_runtime_holds_no_adapter_and_imports_no_algorithm():
    import ast

    tree = ast.parse(Path(ff.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert not any(m and (m.startswith("fedmm.algorithms") or m == "inspect") for m in imported), imported
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "hasattr" not in calls and "getattr" not in calls
    # no type dispatch on algorithms or their messages: the one isinstance on an algorithm is the contract's own
    # check (a TypeError naming the protocol); the others look at data (seeds, payload arrays, record values)
    import fedmm.algorithms

    checked = {name.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
               and node.func.id == "isinstance" for name in ast.walk(node.args[1]) if isinstance(name, ast.Name)}
    assert "RemoteAlgorithm" in checked
    assert checked.isdisjoint({*fedmm.algorithms.__all__, "OTBroadcast", "Broadcast", "SurrogateModel"}), checked


def test_ot_remote_build_server_and_client_equal_the_in_process_parties():
    # The parties a Flower run builds (from sample counts, one client at a time) are those of algo.build.
    from fedmm.algorithms import FedMMOT
    from fedmm.models import TransportProblem

    rng = np.random.default_rng(0)
    datas = [rng.normal(size=(6 + i, 2)) for i in range(3)]
    target = rng.normal(size=(7, 2))
    algo = FedMMOT(TransportProblem(2, hidden_sizes=[4], batch_size=4), clients_per_round=2, identity_steps=0,
                   compressor=StochasticRounding(bits=8))
    server, clients = algo.build(datas, target=target, seed=3)
    remote = ff.remote_algorithm(algo)
    got = remote.remote_server(3, descriptions=[remote.describe_data(d, i) for i, d in enumerate(datas)], seed=3,
                               public_data=target)
    np.testing.assert_array_equal(got.weights, server.weights)
    for k, v in server.export_state().to_arrays().items():
        np.testing.assert_array_equal(got.export_state().to_arrays()[k], v)
    assert got.select(0) == server.select(0)
    message = remote.broadcast_from_arrays(remote.broadcast_to_arrays(server.broadcast(0)),
                                           remote.broadcast_layout(server))
    for i, c in enumerate(clients):
        mine = remote.remote_client(i, datas[i], n_clients=3, seed=3, public_data=target)
        assert (mine.p, mine.control_variate_step) == (c.p, c.control_variate_step)
        np.testing.assert_array_equal(mine.target, c.target)
        assert mine.step(message) == c.step(server.broadcast(0))  # same payload bytes


_OT_FLOWER_SCRIPT = """
import gc, os, tempfile, warnings
for k, v in {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
             "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}.items():
    os.environ[k] = v
warnings.simplefilter("ignore")
import numpy as np
from flwr.serverapp import ServerApp
from flwr.simulation import run_simulation
import fedmm.runtime.flower as ff
from fedmm.algorithms import FedAdam, FedMMOT
from fedmm.compression import Identity, StochasticRounding
from fedmm.models import TransportProblem


class NaNPayloads(StochasticRounding):
    # 8-bit rounding whose payloads decode to NaN (a corrupted client); the set-up probe (zeros) passes
    def encode(self, x, rng=None):
        payload = super().encode(x, rng)
        if not np.any(x):
            return payload
        head = Identity().encode(np.zeros(len(x)))
        return head[:len(head) - 8 * len(x)] + np.full(len(x), np.nan).tobytes()

    def __repr__(self):
        return "NaNPayloads()"


rng = np.random.default_rng(3)
datas = [rng.normal(loc=i, size=(30 + 5 * i, 2)) for i in range(3)]
target = rng.normal(loc=1.0, scale=0.7, size=(40, 2))
problem = TransportProblem(2, hidden_sizes=[8, 8], batch_size=16)
runs = [
    # FedMM-OT: 2 of 3 clients per round, control variates (alpha > 0), 8-bit stochastic rounding; two
    # strategies in turn in one Flower run (seeds 4, 6): the second ignores the client state of the first
    (FedMMOT(problem, clients_per_round=2, control_variate_step=0.5, step=0.8, omega_step="sgd", local_steps=2,
             local_lr=0.05, theta_steps=2,
             compressor=StochasticRounding(bits=8), identity_steps=20), [4, 6], []),
    # FedAdam: every client, client 2 sends NaN payloads: dropped with the server's reason, as in process
    (FedAdam(problem, server_lr=0.01, local_lr=0.05, identity_steps=20,
             compressor=[StochasticRounding(bits=8), StochasticRounding(bits=8), NaNPayloads(bits=8)]), [5], [2]),
]
backend = {"init_args": {"num_cpus": 2, "_node_ip_address": "127.0.0.1", "log_to_driver": False},
           "client_resources": {"num_cpus": 1}}
got = []
# Both algorithms in turn in one simulation (one set of ClientApp actors): before each, the ServerApp writes its
# index to a file that the ClientApp reads at every message for the algorithm (the simulated nodes run here).
case_file = os.path.join(tempfile.mkdtemp(), "case")
algos = [algo for algo, _, _ in runs]
server_app = ServerApp()


@server_app.main()
def main(grid, context):
    for k, (algo, seeds, failing) in enumerate(runs):
        with open(case_file, "w") as f:
            f.write(str(k))
        for seed in seeds:
            strategy = ff.FedMMStrategy(algo, len(datas), seed=seed, public_data=target)
            got.append((algo, seed, failing, strategy.run(grid, 3, timeout=300.0)))


def current_algorithm(context):
    with open(case_file) as f:
        return algos[int(f.read())]


run_simulation(server_app, ff.client_app(current_algorithm, lambda pid, context: datas[pid], public_data=target),
               len(datas), backend_config=backend)
gc.collect()
assert [(a.name, seed) for a, seed, _, _ in got] == [("FedMMOT", 4), ("FedMMOT", 6), ("FedAdam", 5)], got
for algo, seed, failing, h in got:  # JAX runs in this process only after Ray's start
    ref = algo.run(datas, 3, target=target, seed=seed)
    assert h.equals(ref), (algo.name, seed)
    for k in ("omega", "theta"):
        assert np.array_equal(h.state[k], ref.state[k]), algo.name
    assert h.transport_map(target[:3]).shape == (3, 2)
    assert [r["dropped"] for r in h.records] == [failing] * 3, (algo.name, [r["dropped"] for r in h.records])
    if failing:
        assert all(r["drop_reasons"] == ref.records[t]["drop_reasons"] and
                   r["drop_reasons"][0].startswith("invalid payload: ") for t, r in enumerate(h.records))
    print(algo.name, seed, [r["active"] for r in h.records])
print("ok")
"""


@pytest.mark.integration
def test_flower_simulation_carries_fedmmot_and_fedadam_with_the_in_process_history():
    # Flower's simulation runs the OT strategy and ClientApps on Ray; the History (every ω_t, θ_t, E_omega,
    # E_theta, active/dropped set, bytes) equals the in-process run.  In a fresh process: Ray must start
    # before JAX runs in the driver (JAX's threads and fork do not mix), as for the Ray runtime's test.
    out = subprocess.run([sys.executable, "-c", _OT_FLOWER_SCRIPT],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:]


# --------------------------------------------------------------------------- checkpoints and resume
RESUME_ROUNDS, RESUME_STOP, RESUME_FAULTY = N_ROUNDS, STOP, FAULTY  # the matrix's (tests/matrix_cases.py)
SIM_BACKEND = {"init_args": {"num_cpus": 2, "_node_ip_address": "127.0.0.1", "log_to_driver": False},
               "client_resources": {"num_cpus": 1}}


class _InterruptedStrategy(ff.FedMMStrategy):
    """Ctrl-C between rounds: right after round :data:`RESUME_STOP`'s record is in the History."""

    def aggregate_train(self, server_round, replies):
        out = super().aggregate_train(server_round, replies)
        if self.history.records[-1]["t"] == RESUME_STOP:
            raise KeyboardInterrupt
        return out


class _FailsAtRound:
    """An objective that raises in round ``t`` (after the server's step, before the round's record): the round
    is not complete, and the checkpoint holds the state before it."""

    def __init__(self, objective, t):
        self.objective, self.t, self.calls = objective, t, 0

    def __call__(self, estimate):
        self.calls += 1  # call 1 is θ_0's, call t + 2 is round t's
        if self.calls == self.t + 2:
            raise KeyboardInterrupt
        return self.objective(estimate)


def _interrupted(remote, n, path, cls=_InterruptedStrategy, **kwargs):
    """A job: a run that ends with KeyboardInterrupt; returns the exception (its history and checkpoint)."""
    def job(grid):
        with pytest.raises(KeyboardInterrupt) as info:
            cls(remote, n, **kwargs).run(grid, RESUME_ROUNDS, timeout=120.0, checkpoint_path=path)
        return info.value
    return job


def _gmm_resume_case():
    """The matrix's FedMM cell with 3 of 4 clients a round and 8-bit rounding (tests/matrix_cases.py)."""
    factory, data, _, _ = ALGORITHMS["FedMM"]
    return factory(True, True), data()


def _gmm_resume_jobs(remote, n, datas):
    kw = dict(seed=11, init_datas=datas)

    def jobs(directory):
        every, stopped = directory / "every.ckpt", directory / "stopped.ckpt"

        def full(grid):
            return ff.FedMMStrategy(remote, n, **kw).run(grid, RESUME_ROUNDS, timeout=120.0, checkpoint_every=2,
                                                         checkpoint_path=every)

        def resume(path):
            return lambda grid: ff.FedMMStrategy(remote, n, **kw).run(grid, RESUME_ROUNDS, timeout=120.0, resume=path)

        def refused(grid):  # another seed: the fingerprint says so, before any exchange but the hello
            with pytest.raises(ValueError, match="differs in seed"):
                ff.FedMMStrategy(remote, n, seed=12, init_datas=datas).run(grid, RESUME_ROUNDS, resume=stopped)
            return True

        return [full, _interrupted(remote, n, stopped, **kw), resume(stopped), resume(every), refused]
    return jobs


def _gmm_resume_simulation():
    algo, datas = _gmm_resume_case()
    remote = FaultyRemote(algo)
    return _Case(remote, datas, jobs=_gmm_resume_jobs(remote, len(datas), datas))


CASES["gmm-resume"] = _gmm_resume_simulation


@pytest.mark.integration
@RAY_WARNINGS
def test_flower_fedmm_resumes_bit_for_bit_from_an_interrupt_and_from_a_periodic_checkpoint(simulated):
    # FedMM (Gaussian mixture, start exchange for Ŝ_0, 3 of 4 clients per round, 8-bit rounding, α > 0) with
    # client 1 failing: a run with checkpoints every 2 rounds equals the in-process run; interrupted after round 2
    # and resumed, or resumed from the periodic checkpoint, it equals it again.  Each strategy has its own token, so
    # a resumed strategy finds the nodes as fresh nodes would be: without its state until it sends it back.
    algo, datas = _gmm_resume_case()
    n = len(datas)
    reference = algo.run(datas, RESUME_ROUNDS, seed=11, runtime=FaultyLocalRuntime(compiled=False))
    directory, (got, interrupt, resumed, resumed_every, _) = simulated("gmm-resume")
    every, stopped = directory / "every.ckpt", directory / "stopped.ckpt"
    assert got.equals(reference, ignore=("wall_time", "monitor_time", "drop_reasons"))
    assert_faulty_client_dropped(got, FLOWER_REASON)
    assert any(len(r["active"]) + len(r["dropped"]) < n for r in got.records)  # partial participation
    assert interrupt.checkpoint.next_round == RESUME_STOP + 1 == len(interrupt.history)
    assert Checkpoint.load(stopped).next_round == RESUME_STOP + 1
    assert Checkpoint.load(every).next_round == 4  # the last periodic write: after round 3
    assert resumed.equals(got) and resumed_every.equals(got)
    np.testing.assert_array_equal(resumed.state["S"], got.state["S"])
    np.testing.assert_array_equal(resumed.state["theta"], got.state["theta"])
    # a Flower checkpoint does not resume in process (its client states are the nodes')
    with pytest.raises(ValueError, match="differs in .*runtime"):
        algo.run(datas, RESUME_ROUNDS, runtime=FaultyLocalRuntime(compiled=False), resume=stopped)


#: The subgradient family's interrupt-and-resume cases: 8-bit rounding, 3 of 4 clients per round where the
#: method's paper defines client sampling (FedAvg, FedProx, Scaffold), every client otherwise (FedMLS, Scaffnew).
#: The matrix's cells (tests/matrix_cases.py), but Scaffold's, which takes minibatches here (full gradients there).
SUBGRADIENT_RESUME = {
    "Scaffold": lambda: (Scaffold(HingeSVM(), local_lr=0.05, local_steps=2, batch_size=4, clients_per_round=3,
                                  compressor=StochasticRounding(bits=8)), hinge_data()),
    **{name: (lambda name=name: (ALGORITHMS[name][0](ALGORITHMS[name][3], True), ALGORITHMS[name][1]()))
       for name in ("FedAvg", "FedProx", "FedMLS", "Scaffnew")},
}


def _subgradient_resume_case(name):
    """``(algorithm, datas, objective)`` of :data:`SUBGRADIENT_RESUME`'s case ``name``."""
    algo, datas = SUBGRADIENT_RESUME[name]()
    stacked = algo.model.stack(datas)

    def objective(x):
        return algo.model.objective(stacked, x)

    return algo, datas, objective


def _subgradient_resume_simulation(name):
    algo, datas, objective = _subgradient_resume_case(name)
    remote, n = FaultyRemote(algo), len(datas)

    def jobs(directory):
        path = directory / "run.ckpt"
        if name != "FedAvg":
            interrupted = _interrupted(remote, n, path, seed=13, objective=objective)
        else:
            interrupted = _interrupted(remote, n, path, cls=ff.FedMMStrategy, seed=13,
                                       objective=_FailsAtRound(objective, RESUME_STOP))
        return [lambda grid: ff.FedMMStrategy(remote, n, seed=13, objective=objective).run(grid, RESUME_ROUNDS,
                                                                                          timeout=120.0),
                interrupted,
                lambda grid: ff.FedMMStrategy(remote, n, seed=13, objective=objective).run(grid, RESUME_ROUNDS,
                                                                                          timeout=120.0, resume=path)]
    return _Case(remote, datas, jobs=jobs)


CASES.update({f"{name}-resume": (lambda name=name: _subgradient_resume_simulation(name))
              for name in SUBGRADIENT_RESUME})


@pytest.mark.integration
@RAY_WARNINGS
@pytest.mark.parametrize("name", sorted(SUBGRADIENT_RESUME))
def test_flower_subgradient_family_resumes_bit_for_bit_after_an_interrupt(name, simulated):
    # Every subgradient method (state on the nodes: Scaffold's c_i, FedMLS's x/y/z, Scaffnew's h_i, the
    # minibatch and compression streams), 8-bit, sampling where defined, client 1 failing; interrupted between
    # rounds, or (FedAvg) inside a round, by the objective after the server's step (the checkpoint holds the
    # rounds before it); resumed, the History equals the uninterrupted Flower run and the in-process one.
    algo, datas, _ = _subgradient_resume_case(name)
    reference = algo.run(datas, RESUME_ROUNDS, seed=13, evaluate_every=1, runtime=FaultyLocalRuntime(compiled=False))
    _, (got, interrupt, resumed) = simulated(f"{name}-resume")
    completed = RESUME_STOP if name == "FedAvg" else RESUME_STOP + 1
    assert len(interrupt.history) == interrupt.checkpoint.next_round == completed
    assert got.equals(reference, ignore=("wall_time", "monitor_time", "drop_reasons"))
    assert_faulty_client_dropped(got, FLOWER_REASON)
    assert resumed.equals(got)
    for key in got.state:
        np.testing.assert_array_equal(resumed.state[key], got.state[key])


# --------------------------------------------------------------------------- the matrix's Flower column
#: The cells of the matrix (tests/matrix_cases.py) that the tests above interrupt and resume on Flower: FedMM's
#: (partial, 8-bit) in ``gmm-resume``, and the subgradient methods' 8-bit cells with sampling where defined.
RESUMED_ABOVE = {("FedMM", True, True): "gmm-resume",
                 **{(name, ALGORITHMS[name][3], True): f"{name}-resume" for name in SUBGRADIENT_RESUME
                    if name != "Scaffold"}}
#: Every other cell of every algorithm but the optimal-transport family's (whose cells run in one script below).
MATRIX_CELLS = [cell for cell in all_cells() if cell[0] not in OT_ALGORITHMS and cell not in RESUMED_ABOVE]


def _matrix_simulation(name, partial, compressed):
    """A matrix cell on Flower: interrupted after round :data:`RESUME_STOP`, then resumed from its checkpoint."""
    factory, data, _, _ = ALGORITHMS[name]
    datas = data()
    remote, n = FaultyRemote(factory(partial, compressed)), len(datas)
    kw = dict(seed=13, init_datas=datas) if name in ("FedMM", "ParameterAveraging") else dict(seed=13)

    def jobs(directory):
        path = directory / "run.ckpt"
        return [_interrupted(remote, n, path, **kw),
                lambda grid: ff.FedMMStrategy(remote, n, **kw).run(grid, RESUME_ROUNDS, timeout=120.0, resume=path)]
    return _Case(remote, datas, jobs=jobs)


CASES.update({f"matrix-{cell_id(*cell)}": (lambda cell=cell: _matrix_simulation(*cell)) for cell in MATRIX_CELLS})


@pytest.mark.integration
@RAY_WARNINGS
@pytest.mark.parametrize("name, partial, compressed", [pytest.param(*cell, id=cell_id(*cell)) for cell in MATRIX_CELLS])
def test_flower_matrix_cell_resumes_to_the_in_process_history(name, partial, compressed, simulated):
    # The matrix's Flower column: each cell (full or partial participation, raw or 8-bit messages) with client 1
    # failing, interrupted on Flower after round 2 and resumed on Flower from the checkpoint, ends with the History
    # of the uninterrupted in-process run bit for bit; the faulty client dropped with Flower's reason every time.
    factory, data, _, _ = ALGORITHMS[name]
    datas = data()
    reference = factory(partial, compressed).run(datas, RESUME_ROUNDS, seed=13,
                                                 runtime=FaultyLocalRuntime(compiled=False))
    _, (interrupt, resumed) = simulated(f"matrix-{cell_id(name, partial, compressed)}")
    assert interrupt.checkpoint.next_round == len(interrupt.history) == RESUME_STOP + 1
    # the Θ-space baseline's E_sp (a pass over every client's data at the server) is not recorded apart
    ignore = ("wall_time", "monitor_time", "drop_reasons", *(("E_sp",) if name == "ParameterAveraging" else ()))
    assert resumed.equals(reference, ignore=ignore)
    assert_faulty_client_dropped(resumed, FLOWER_REASON)
    if partial:
        assert any(len(r["active"]) + len(r["dropped"]) < len(datas) for r in resumed.records)
    for key in reference.state:
        np.testing.assert_array_equal(resumed.state[key], reference.state[key])


def test_flower_checkpoint_arguments_are_checked_before_any_exchange(tmp_path):
    algo, datas = _gmm_resume_case()
    strategy = ff.FedMMStrategy(algo, 4, seed=1)
    with pytest.raises(ValueError, match="checkpoint_path"):
        strategy.run(None, 3, checkpoint_every=2)
    with pytest.raises(ValueError, match="checkpoint_every"):
        strategy.run(None, 3, checkpoint_every=-1, checkpoint_path=tmp_path / "x.ckpt")
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.ckpt"):
        strategy.run(None, 3, resume=tmp_path / "bad.ckpt")
    path = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt) as info:
        algo.run(datas, 3, seed=1, checkpoint_path=path, callback=_stop_at(1))
    with pytest.raises(ValueError, match="'n_rounds' >= 2"):
        strategy.run(None, 1, resume=info.value.checkpoint)


def _stop_at(stop):
    def callback(t, state):
        if t == stop:
            raise KeyboardInterrupt
    return callback


_OT_RESUME_SCRIPT = """
import gc, os, sys, tempfile, warnings
for k, v in {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
             "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}.items():
    os.environ[k] = v
warnings.simplefilter("ignore")
import numpy as np
from flwr.serverapp import ServerApp
from flwr.simulation import run_simulation
import fedmm.runtime.flower as ff
from fedmm.models import TransportProblem
sys.path.insert(0, sys.argv[1])  # tests/: the matrix's cells and fault injection
from matrix_cases import (FAULTY, FLOWER_REASON, OT_ALGORITHMS, FaultyLocalRuntime, FaultyRemote,
                          assert_faulty_client_dropped, cell_id, cells, ot_algorithm)

ROUNDS, STOP = 4, 1


class Interrupted(ff.FedMMStrategy):
    # Ctrl-C right after round STOP's record
    def aggregate_train(self, server_round, replies):
        out = super().aggregate_train(server_round, replies)
        if self.history.records[-1]["t"] == STOP:
            raise KeyboardInterrupt
        return out


rng = np.random.default_rng(3)
datas = [rng.normal(loc=i, size=(20 + 5 * i, 2)) for i in range(3)]
target = rng.normal(loc=1.0, scale=0.7, size=(30, 2))
problem = TransportProblem(2, hidden_sizes=[4], batch_size=8)
# every cell of the matrix: FedMM-OT (control variates V_i on the nodes) and FedAdam (the server's Adam moments and
# its theta-steps' own in the checkpoint), every client or 2 of 3 a round (Algorithm 3), raw or 8-bit messages
CELLS = {cell_id(name, partial, compressed): (name, partial, compressed)
         for name in OT_ALGORITHMS for partial, compressed in cells(True)}
FULL_RUN = {cell_id(name, True, True) for name in OT_ALGORITHMS}  # also run uninterrupted on Flower
remotes = {key: FaultyRemote(ot_algorithm(name, problem, partial, compressed))
           for key, (name, partial, compressed) in CELLS.items()}
got = {key: {} for key in CELLS}
CASE = os.path.join(tempfile.mkdtemp(), "case")  # which cell the nodes run (the simulated nodes read it)
server_app = ServerApp()


@server_app.main()
def main(grid, context):
    for key, remote in remotes.items():
        with open(CASE, "w") as f:
            f.write(key)
        path = os.path.join(tempfile.mkdtemp(), "ot.ckpt")
        if key in FULL_RUN:
            got[key]["full"] = ff.FedMMStrategy(remote, 3, seed=4, public_data=target).run(grid, ROUNDS,
                                                                                           timeout=300.0)
        try:
            Interrupted(remote, 3, seed=4, public_data=target).run(grid, ROUNDS, timeout=300.0,
                                                                   checkpoint_path=path)
        except KeyboardInterrupt as exc:
            got[key]["interrupt"] = exc
        got[key]["resumed"] = ff.FedMMStrategy(remote, 3, seed=4, public_data=target).run(
            grid, ROUNDS, timeout=300.0, resume=path)


def node_algorithm(context):
    with open(CASE) as f:
        return remotes[f.read()]


run_simulation(server_app, ff.client_app(node_algorithm, lambda pid, context: datas[pid], public_data=target),
               3,
               backend_config={"init_args": {"num_cpus": 2, "_node_ip_address": "127.0.0.1", "log_to_driver": False},
                               "client_resources": {"num_cpus": 1}})
gc.collect()
for key, (name, partial, compressed) in CELLS.items():
    run = got[key]
    assert sorted(run) == sorted(["interrupt", "resumed", *(["full"] if key in FULL_RUN else [])]), (key, sorted(run))
    assert run["interrupt"].checkpoint.next_round == len(run["interrupt"].history) == STOP + 1, key
    if name == "FedMMOT":
        assert any(np.any(s["V"]) for s in run["interrupt"].checkpoint.client_states if s), "no V to restore"
    else:
        assert any(k.startswith("theta_adam") for k in run["interrupt"].checkpoint.server_state), "no theta-Adam state"
    # JAX runs in this process only after Ray's start
    ref = remotes[key].algorithm.run(datas, ROUNDS, target=target, seed=4, runtime=FaultyLocalRuntime(compiled=False))
    assert run["resumed"].equals(ref, ignore=("wall_time", "monitor_time", "drop_reasons")), key
    assert_faulty_client_dropped(run["resumed"], FLOWER_REASON)
    assert any(len(r["active"]) + len(r["dropped"]) < 3 for r in run["resumed"].records) == partial, key
    for k in ("omega", "theta"):
        assert np.array_equal(run["resumed"].state[k], ref.state[k]), (key, k)
    if key in FULL_RUN:
        assert run["full"].equals(run["resumed"]), key
        # the faulty client was contacted before and after the interrupt
        assert [FAULTY in r["dropped"] for r in run["full"].records[STOP - 1:STOP + 2]] == [True] * 3, key
print("ok")
"""


@pytest.mark.integration
def test_flower_fedmmot_resumes_bit_for_bit_after_an_interrupt():
    # FedMM-OT (control variates on the nodes) and FedAdam (the server's Adam moments), each in every cell of the
    # matrix (every client or 2 of 3 a round, raw or 8-bit messages) with client 1 failing, interrupted after round
    # 1 and resumed from the checkpoint (one simulation, the nodes reading which cell runs from a file): the
    # in-process History bit for bit (and, with sampling and 8-bit, the uninterrupted Flower one), client 1 dropped
    # with its reason.  In a fresh process: Ray must start before JAX runs in the driver.
    out = subprocess.run([sys.executable, "-c", _OT_RESUME_SCRIPT, str(REPO / "tests")], capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:]
