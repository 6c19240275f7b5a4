# SPDX-License-Identifier: BSD-3-Clause
"""The non-smooth family on the common API (issue 13, item 5): identity with the pre-redesign numbers,
the Server/Client/runtime split on every thread count, seeds recorded and replayable, callbacks."""
import math
from pathlib import Path

import numpy as np
import pytest
from reference import nonsmooth_toy_data

from fedmm import History
from fedmm.algorithms import FedAvg, FedMLS, Scaffnew, Scaffold, seed_from_repr
from fedmm.models.nonsmooth import HingeSVM, L1Regression
from fedmm.runtime import LocalRuntime

# -- identity with the code before the redesign ----------------------------------------------------------
# tests/fixtures/nonsmooth_reference.npz holds Histories written by tests/fixtures/make_nonsmooth_reference.py with
# the code of commit ed3cf4d (each method a single-process loop over all clients, old names).  The same
# cases on the new API must give the same numbers with tolerance 0: the same per-client streams are drawn
# in the same order and every float operation is the same, only distributed over Server and Client.
_REFERENCE = np.load(str(Path(__file__).resolve().parents[1] / "fixtures" / "nonsmooth_reference.npz"))
_RENAMED = {"eta": "step", "lam": "prox_weight", "probability": "communication_prob", "T": "local_steps",
            "local_steps": "total_local_steps"}


def _reference_datas(kind):
    datas, i = [], 0
    while f"data/{kind}/{i}/A" in _REFERENCE.files:
        datas.append((_REFERENCE[f"data/{kind}/{i}/A"], _REFERENCE[f"data/{kind}/{i}/y"]))
        i += 1
    return datas


def _reference_cases():
    svm, lad = HingeSVM(), L1Regression()
    return {  # the cases of make_nonsmooth_reference.py, in the new names
        "fedavg_hinge_mb": (FedAvg(svm, local_lr=0.05), "hinge", 12, {"seed": 3}),
        "fedavg_l1_full": (FedAvg(lad, local_lr=lambda k: 0.01 / k, local_steps=2, oracle="full"), "l1", 10, {}),
        "scaffold_hinge_mb": (Scaffold(svm, local_lr=0.05), "hinge", 12, {"seed": 3}),
        "scaffold_l1_mb": (Scaffold(lad, local_lr=lambda s: 0.02 / np.sqrt(s), local_steps=3, server_lr=1.5,
                                    batch_size=0.3),
                           "l1", 10, {"seed": np.random.SeedSequence(7), "init": np.full(4, 0.5)}),
        "scaffnew_hinge_mb": (Scaffnew(svm, local_lr=0.05), "hinge", 12, {"seed": 3}),
        "scaffnew_l1_full": (Scaffnew(lad, local_lr=lambda s: 0.01, communication_prob=0.3, oracle="full"), "l1", 10,
                             {"seed": 4}),
        "fedmls_hinge_mb_c": (FedMLS(svm, prox_weight=("inverse", 1.0), radius=5.0), "hinge", 12, {"seed": 3}),
        "fedmls_l1_mb_numpy": (FedMLS(lad, local_steps=("linear", 2), prox_weight=("inverse", 0.5),
                                      backend="python"), "l1", 10, {"seed": 5}),
    }


@pytest.mark.parametrize("runtime", [LocalRuntime(1), LocalRuntime(2), LocalRuntime(2, batched=False)],
                         ids=["1-thread", "2-threads", "2-threads-per-client"])
@pytest.mark.parametrize("case", sorted(_reference_cases()))
def test_histories_equal_the_pre_redesign_reference(case, runtime):
    algo, kind, n_rounds, kwargs = _reference_cases()[case]
    datas = _reference_datas(kind)
    h = algo.run(datas, n_rounds, evaluate_every=1, runtime=runtime, **kwargs)
    assert h["t"].tolist() == list(range(n_rounds))  # 0-based rounds (the old records had k = t + 1)
    n, p = len(datas), datas[0][0].shape[1] + (kind == "hinge")
    checked = 0
    for key in _REFERENCE.files:
        if not key.startswith(case + "/"):
            continue
        _, where, field = key.split("/")
        old = _REFERENCE[key]
        if where == "state":
            np.testing.assert_array_equal(h.state[field], old, err_msg=field)
        elif field == "bytes_down" and not case.startswith("fedmls"):
            # the old baselines counted the vectors only; the messages now also carry two 8-byte scalars
            # (T_k and η_k, or the first local step and the step count)
            np.testing.assert_array_equal(h[field], old + 16 * n)
        else:
            np.testing.assert_array_equal(h[_RENAMED.get(field, field)], old, err_msg=field)
        checked += 1
    assert checked >= 7
    assert h.state["x"].shape == (p,)


# -- the Server/Client/runtime split -------------------------------------------------------------------------
def _algorithms(problem):
    return [
        FedAvg(problem, local_lr=0.05),
        Scaffold(problem, local_lr=0.05),
        Scaffnew(problem, local_lr=0.05),
        FedMLS(problem, prox_weight=("inverse", 1.0), radius=5.0, backend="python"),
    ]


@pytest.mark.parametrize("oracle", ["minibatch", "full"])
def test_every_method_gives_the_same_history_on_any_thread_count_and_batching(oracle):
    # clients of unequal sizes: shares of 2 and 3 clients with different minibatch sizes
    datas = _reference_datas("hinge")
    for algo in _algorithms(HingeSVM()):
        algo.oracle = oracle
        reference = algo.run(datas, 9, seed=8, evaluate_every=2, runtime=LocalRuntime(1))
        for runtime in (LocalRuntime(2), LocalRuntime(1, batched=False), LocalRuntime(2, batched=False)):
            assert algo.run(datas, 9, seed=8, evaluate_every=2, runtime=runtime).equals(reference), algo.name
        # the constructor's n_threads/batched configure the default runtime, with the same numbers
        algo.n_threads, algo.batched = 2, False
        assert algo.run(datas, 9, seed=8, evaluate_every=2).equals(reference), algo.name
        assert reference.records[0]["active"] == [0, 1, 2, 3, 4]
        assert reference.records[0]["dropped"] == []


def test_payload_and_message_sizes():
    datas = _reference_datas("l1")  # 4 clients, p = 4
    n, p = 4, 4
    expected = {"FedAvg": (8 * p, 8 * p + 16), "Scaffold": (16 * p, 16 * p + 16),
                "Scaffnew": (8 * p, 8 * p + 16), "FedMLS": (8 * p, 8 * p + 24)}
    for algo in _algorithms(L1Regression()):
        h = algo.run(datas, 3, seed=0)
        up, down = expected[algo.name]
        assert h["bytes_up"].tolist() == [n * up] * 3, algo.name
        assert h["bytes_down"].tolist() == [n * down] * 3, algo.name


def test_scaffnew_rounds_are_communications_and_scaffold_counts_local_steps_over_the_run():
    datas = _reference_datas("hinge")
    h = Scaffnew(HingeSVM(), local_lr=0.05, communication_prob=lambda s: 1.0 if s % 3 == 0 else 1e-12).run(
        datas, 4, seed=1)
    assert h["local_steps"].tolist() == [3, 3, 3, 3] and h["total_local_steps"].tolist() == [3, 6, 9, 12]
    assert h["communication_prob"].tolist() == [1.0] * 4
    assert h["step"].tolist() == [0.05 * s ** -0.5 for s in (3, 6, 9, 12)]
    h = Scaffold(HingeSVM(), local_lr=0.05).run(datas, 3, seed=1)
    assert h["local_steps"].tolist() == [1, 2, 3] and h["total_local_steps"].tolist() == [1, 3, 6]
    assert h["gamma"].tolist() == [math.sqrt(5)] * 3  # η_g = √n


def test_zero_rounds_return_the_initial_point_and_init_is_copied():
    datas = _reference_datas("l1")
    init = np.arange(4.0)
    for algo in _algorithms(L1Regression()):
        h = algo.run(datas, 0, init=init, evaluate_every=1)
        assert len(h) == 0
        np.testing.assert_array_equal(h.state["x"], init)
        assert h.config["initial_objective"] == L1Regression().objective(datas, init)
    np.testing.assert_array_equal(init, np.arange(4.0))


def test_callback_gets_0_based_rounds_and_the_server_state():
    datas = _reference_datas("hinge")
    for algo in _algorithms(HingeSVM()):
        seen = []
        h = algo.run(datas, 4, seed=2, callback=lambda t, state: seen.append((t, state)))
        assert [t for t, _ in seen] == [0, 1, 2, 3]
        np.testing.assert_array_equal(seen[-1][1]["x"], h.state["x"])
        assert seen[0][1]["x"] is not seen[1][1]["x"]  # copies
    seen.clear()
    Scaffold(HingeSVM(), local_lr=0.05).run(datas, 2, seed=2, callback=lambda t, state: seen.append(sorted(state)))
    assert seen == [["c", "params", "x"], ["c", "params", "x"]]


def test_objective_cadence_initial_objective_and_evaluate_data():
    problem = HingeSVM()
    datas = _reference_datas("hinge")
    held_out = nonsmooth_toy_data("hinge", n_clients=2, m=10, d=3, seed=4)
    algo = FedAvg(problem, local_lr=0.05)
    h = algo.run(datas, 7, seed=0, evaluate_every=3)
    assert [r["t"] for r in h.records if "objective" in r] == [2, 5, 6]
    assert h.config["initial_objective"] == problem.objective(datas, np.zeros(4))
    assert "objective" not in algo.run(datas, 3, seed=0).keys()  # evaluate_every=0: never
    h2 = algo.run(datas, 7, seed=0, evaluate_every=7, evaluate_data=held_out)
    assert h2["objective"][-1] == problem.objective(held_out, h.state["x"])
    with pytest.raises(ValueError, match="'evaluate_data' with the features of 'datas'"):
        algo.run(datas, 1, evaluate_every=1, evaluate_data=nonsmooth_toy_data("hinge", n_clients=1, d=2))


def test_history_config_records_the_new_names():
    datas = _reference_datas("hinge")
    configs = {a.name: a.run(datas, 1, seed=0).config for a in _algorithms(HingeSVM())}
    assert configs["FedAvg"]["local_lr"] == "inverse_sqrt(0.05)" and configs["FedAvg"]["local_steps"] == "linear(1)"
    assert configs["Scaffold"]["local_lr"] == "0.05/(server_lr*s)"
    assert configs["Scaffnew"]["communication_prob"] == "inverse_sqrt(1.0)"
    assert configs["FedMLS"]["prox_weight"] == "inverse(1.0)" and configs["FedMLS"]["radius"] == 5.0
    for config in configs.values():
        assert config["seed"] == 0 and config["n_rounds"] == 1 and config["n_clients"] == 5


# -- seeds ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("index", range(4), ids=["FedAvg", "Scaffold", "Scaffnew", "FedMLS"])
def test_generator_and_none_seeds_are_recorded_and_replayable(tmp_path, index):
    datas = _reference_datas("hinge")
    algo = _algorithms(HingeSVM())[index]
    # an int and its SeedSequence are the same seed
    assert algo.run(datas, 5, seed=3).equals(algo.run(datas, 5, seed=np.random.SeedSequence(3)))
    # a Generator: advanced by the run, the run replayable from History.config (after a JSON round trip)
    rng = np.random.default_rng(42)
    h1 = algo.run(datas, 5, seed=rng, evaluate_every=1)
    h2 = algo.run(datas, 5, seed=rng, evaluate_every=1)
    assert not np.array_equal(h1.state["x"], h2.state["x"])  # the generator moved on
    h1.save(tmp_path / "h.json")
    loaded = History.load(tmp_path / "h.json")
    replay = algo.run(datas, 5, seed=seed_from_repr(loaded.config["seed"]), evaluate_every=1)
    assert replay.equals(h1)
    assert algo.run(datas, 5, seed=np.random.default_rng(42), evaluate_every=1).equals(h1)
    # None: fresh OS entropy, recorded as an int that can be passed back as is
    h3 = algo.run(datas, 5, evaluate_every=1)
    assert isinstance(h3.config["seed"], int) and h3.config["seed"] >= 0
    assert algo.run(datas, 5, seed=h3.config["seed"], evaluate_every=1).equals(h3)
    # a SeedSequence with a spawn key is recorded as a dict, and is not spawned from
    ss = np.random.SeedSequence(9, spawn_key=(4,))
    h4 = algo.run(datas, 5, seed=ss)
    assert h4.config["seed"] == {"entropy": 9, "spawn_key": [4]} and ss.n_children_spawned == 0
    assert algo.run(datas, 5, seed=seed_from_repr(h4.config["seed"])).equals(h4)


@pytest.mark.parametrize("module", ["fedmm.algorithms.nonsmooth", "fedmm.algorithms.fedmls"])
def test_module_examples(module):
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert failures == 0 and tried > 0


# -- the package's one vocabulary (issue 24, item 5) ---------------------------------------------------------
def test_batch_size_is_a_fraction_as_a_float_and_a_count_as_an_int():
    # 5 clients of 20 samples: 0.1 of 20 is 2 samples, the same minibatches as batch_size=2, bit for bit
    datas = nonsmooth_toy_data("hinge", n_clients=5, m=20, d=3, seed=1)
    for make in (lambda b: FedAvg(HingeSVM(), local_lr=0.05, batch_size=b),
                 lambda b: FedMLS(HingeSVM(), prox_weight=1.0, batch_size=b)):
        fraction, count = make(0.1).run(datas, 4, seed=2), make(2).run(datas, 4, seed=2)
        np.testing.assert_array_equal(fraction.state["x"], count.state["x"])
        assert fraction.config["batch_size"] == 0.1 and count.config["batch_size"] == 2
    # a count beyond a client's size is clipped to it: the full local batch, as the fraction 1.0
    whole, clipped = (FedAvg(HingeSVM(), local_lr=0.05, batch_size=b).run(datas, 3, seed=2) for b in (1.0, 10**6))
    np.testing.assert_array_equal(whole.state["x"], clipped.state["x"])
    for bad, error in ((0, ValueError), (1.5, ValueError), (True, TypeError), ("0.1", TypeError)):
        with pytest.raises(error, match="'batch_size'"):
            FedAvg(HingeSVM(), local_lr=0.05, batch_size=bad)


def test_fedmls_backends_are_auto_python_compiled_and_the_old_names_are_refused():
    assert FedMLS(HingeSVM(), prox_weight=1.0).backend == "compiled"  # 'auto': the problem has a kernel
    datas = _reference_datas("hinge")
    runs = {b: FedMLS(HingeSVM(), prox_weight=1.0, backend=b).run(datas, 2, seed=0) for b in ("auto", "compiled")}
    assert runs["auto"].config["backend"] == "compiled" and runs["auto"].equals(runs["compiled"])
    for old, new in (("c", "compiled"), ("numpy", "python")):
        with pytest.raises(ValueError, match=f"backend='{old}' is now backend='{new}'.*'auto', 'python', 'compiled'"):
            FedMLS(HingeSVM(), prox_weight=1.0, backend=old)


def test_the_parties_take_and_keep_the_model_as_model():
    # the first argument and attribute of every party is 'model', as the front ends' (was 'problem')
    import inspect

    from fedmm.algorithms.fedmls import FedMLSClient
    from fedmm.algorithms.fedprox import FedProx, FedProxClient
    from fedmm.algorithms.nonsmooth import (FedAvgClient, ScaffnewClient, ScaffoldClient, ShareOracle,
                                            SubgradientClient, SubgradientOracle)

    for cls in (SubgradientOracle, SubgradientClient, FedAvgClient, FedProxClient, ScaffoldClient, ScaffnewClient,
                FedMLSClient):
        params = list(inspect.signature(cls.__init__).parameters)
        assert "model" in params and "problem" not in params, (cls.__name__, params)
    datas = _reference_datas("hinge")
    model = HingeSVM()
    for algo in (FedAvg(model, local_lr=0.05), FedProx(model, local_lr=0.05), Scaffold(model, local_lr=0.05),
                 Scaffnew(model, local_lr=0.05), FedMLS(model, prox_weight=1.0)):
        client = algo.remote_client(0, datas[0], n_clients=len(datas), seed=1)
        assert client.model is model and client.oracle.model is model, algo.name
        assert ShareOracle([client], 1).model is model
        assert not hasattr(client, "problem") and not hasattr(client.oracle, "problem")


def test_callback_state_is_read_only_with_the_params():
    datas = _reference_datas("hinge")
    seen = []
    h = FedAvg(HingeSVM(), local_lr=0.05).run(datas, 2, seed=2, callback=lambda t, state: seen.append(state))
    np.testing.assert_array_equal(seen[-1]["params"]["x"], h.params["x"])
    with pytest.raises(TypeError):
        seen[-1]["x"] = None
