# SPDX-License-Identifier: BSD-3-Clause
"""The JSON loaders (``History.load``, ``RunSet.load``, ``fedmm.load``) on damaged and malformed files.

Every damaged file is refused with a ``ValueError`` that names the file (and the offending field where
there is one), never a raw ``JSONDecodeError``/``UnicodeDecodeError``/``RecursionError`` or a History
that breaks later; a path that is not a file name is a ``TypeError`` naming ``path``, and an integer is
never taken for a file descriptor.  Valid files, old ones included, still load.
"""
import copy
import json
import os
import re

import numpy as np
import pytest

import fedmm
from fedmm import History, RunSet
from fedmm.algorithms import FedMM
from fedmm.models import GaussianMixture


def _run_history() -> History:
    rng = np.random.default_rng(0)
    datas = [rng.normal(size=(40, 2)) + i for i in range(3)]
    return FedMM(GaussianMixture(2, n_features=2), clients_per_round=2, batch_size=10, step=0.5).run(
        datas, 4, seed=0, evaluate_every=2)


@pytest.fixture(scope="module")
def history() -> History:
    return _run_history()


@pytest.fixture(scope="module")
def history_dict(history) -> dict:
    return json.loads(json.dumps(history.to_dict()))


def _write(tmp_path, content, name="h.json"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def _names(path) -> str:
    return re.escape(repr(str(path)))


HISTORY_LOADERS = [History.load, fedmm.load]
RUNSET_LOADERS = [RunSet.load, fedmm.load]


# -- the path argument ------------------------------------------------------------------------------
@pytest.mark.parametrize("loader", [History.load, RunSet.load, fedmm.load])
def test_an_integer_is_not_taken_for_a_file_descriptor(loader, tmp_path, history):
    path = tmp_path / "h.json"
    history.save(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(TypeError, match=r"Expected 'path' to be a file name .*file descriptors are not"):
            loader(fd)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # the caller's descriptor: not read, not closed
        assert os.fstat(fd).st_size == path.stat().st_size
    finally:
        os.close(fd)


@pytest.mark.parametrize("loader", [History.load, RunSet.load, fedmm.load])
@pytest.mark.parametrize("bad", [True, 3.5, None, ["h.json"]])
def test_a_path_that_is_not_a_file_name_is_a_type_error(loader, bad):
    with pytest.raises(TypeError, match="'path'"):
        loader(bad)


def test_save_does_not_take_an_integer_for_a_file_descriptor(tmp_path, history):
    fd = os.open(tmp_path / "target", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(TypeError, match="'path'"):
            history.save(fd)
        with pytest.raises(TypeError, match="'path'"):
            RunSet({"a": history}).save(fd)
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


# -- damaged files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("loader", HISTORY_LOADERS)
@pytest.mark.parametrize("cut", [0, 1, 10, 0.5, -1])
def test_truncated_files_are_refused_naming_the_file(loader, tmp_path, history, cut):
    text = json.dumps(history.to_dict())
    end = int(cut * len(text)) if isinstance(cut, float) else (len(text) + cut if cut < 0 else cut)
    path = _write(tmp_path, text[:end])
    with pytest.raises(ValueError, match=_names(path)) as info:
        loader(path)
    assert isinstance(info.value.__cause__, ValueError)  # the JSON error, chained


@pytest.mark.parametrize("loader", HISTORY_LOADERS)
def test_bit_flips_load_or_are_refused_naming_the_file(loader, tmp_path, history):
    """A JSON file has no digest: a flip in a digit is a different valid file; anything else is refused."""
    data = json.dumps(history.to_dict()).encode()
    rng = np.random.default_rng(6)
    refused = 0
    path = tmp_path / "flipped.json"
    for bit in rng.choice(8 * len(data), size=400, replace=False):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(flipped)
        try:
            loaded = loader(path)
        except ValueError as exc:
            assert repr(str(path)) in str(exc)
            refused += 1
        else:
            assert isinstance(loaded, History) and len(loaded) == len(history)
    assert refused > 200


@pytest.mark.parametrize("loader", HISTORY_LOADERS)
@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"\x00" * 16,
                                     '{"format": "fedmm-history", "algorithm": "\xe9"}'.encode("latin-1")])
def test_non_utf8_files_are_refused_naming_the_file(loader, tmp_path, content):
    path = _write(tmp_path, content)
    with pytest.raises(ValueError, match=_names(path)):
        loader(path)


@pytest.mark.parametrize("loader", HISTORY_LOADERS)
@pytest.mark.parametrize("depth", [500, 900, 5_000, 100_000])
@pytest.mark.parametrize("where", ["top", "config", "record"])
def test_deep_nesting_loads_or_is_refused_naming_the_file(loader, tmp_path, history_dict, depth, where):
    nested = "[" * depth + "]" * depth
    if where == "top":
        text = nested
    else:
        data = copy.deepcopy(history_dict)
        (data["config"] if where == "config" else data["records"][0])["deep"] = "@NESTED@"
        text = json.dumps(data).replace('"@NESTED@"', nested)
    path = _write(tmp_path, text)
    try:
        loaded = loader(path)
    except ValueError as exc:
        assert repr(str(path)) in str(exc)
    else:
        assert where != "top" and len(loaded) == len(history_dict["records"])


@pytest.mark.parametrize("loader", HISTORY_LOADERS)
@pytest.mark.parametrize("content", ["", "null", "[]", "3", '"fedmm-history"', '{"format": "fedmm-history"}'])
def test_json_that_is_not_a_history_is_refused_naming_the_file(loader, tmp_path, content):
    path = _write(tmp_path, content)
    with pytest.raises(ValueError, match=_names(path)):
        loader(path)


# -- wrong types, field by field --------------------------------------------------------------------
ARRAY = {"__ndarray__": [1.0, 2.0], "dtype": "float64", "shape": [2]}
WRONG_FIELDS = [
    # (path of the field in the file, bad value, what the message names); None as the value removes the key
    *[((key,), None, key) for key in ("algorithm", "config", "records", "state")],
    (("algorithm",), 5, "algorithm"),
    (("config",), ["seed", 0], "config"),
    (("config", "x"), {"__float__": "xyz"}, r"config\['x'\]"),
    (("records",), "abc", "records"),
    (("records",), {"0": {}}, "records"),
    (("records", 0), 1, r"records\[0\]"),
    (("records", 0, "t"), "zero", r"records\[0\]\['t'\]"),
    (("records", 0, "t"), -1, r"records\[0\]\['t'\]"),
    (("records", 0, "t"), True, r"records\[0\]\['t'\]"),
    (("records", 0, "t"), None, r"records\[0\]\['t'\]"),
    (("records", 1, "bytes_up"), "7", r"records\[1\]\['bytes_up'\]"),
    (("records", 1, "bytes_down"), 1.5, r"records\[1\]\['bytes_down'\]"),
    (("records", 1, "gamma"), [0.5], r"records\[1\]\['gamma'\]"),
    (("records", 1, "objective"), "low", r"records\[1\]\['objective'\]"),
    (("records", 1, "wall_time"), {"s": 1}, r"records\[1\]\['wall_time'\]"),
    (("records", 2, "E_s"), False, r"records\[2\]\['E_s'\]"),
    (("records", 2, "active"), "0,1", r"records\[2\]\['active'\]"),
    (("records", 2, "active"), [0, -1], r"records\[2\]\['active'\]"),
    (("records", 2, "dropped"), [1.5], r"records\[2\]\['dropped'\]"),
    (("records", 2, "drop_reasons"), [1], r"records\[2\]\['drop_reasons'\]"),
    (("records", 3, "objective"), {"__float__": 5}, r"records\[3\]\['objective'\]"),
    (("initial",), [], "initial"),
    (("initial", "objective"), "x", r"initial\['objective'\]"),
    (("state",), [], "state"),
    (("state", "S"), "xyz", r"state\['S'\]"),
    (("state", "S"), None, r"state\['S'\]"),
    (("state", "S"), {"__ndarray__": ["a", "b"], "dtype": "float64", "shape": [2]}, r"state\['S'\]"),
    (("state", "S"), {"__ndarray__": [1, 2], "dtype": "object", "shape": [2]}, r"state\['S'\]"),
    (("state", "S"), {"__ndarray__": [1, 2], "dtype": "nope", "shape": [2]}, r"state\['S'\]"),
    (("state", "S"), {**ARRAY, "shape": [3]}, r"state\['S'\]"),
    (("state", "S"), {**ARRAY, "shape": "2"}, r"state\['S'\]"),
    (("state", "S"), {**ARRAY, "__ndarray__": [[1.0], [2.0, 3.0]]}, r"state\['S'\]"),
    (("params", "means"), [[0.0]], r"params\['means'\]"),
]


def _with(data: dict, keys: tuple, value) -> dict:
    data = copy.deepcopy(data)
    target = data
    for key in keys[:-1]:
        target = target[key]
    if value is None and len(keys) == 1:
        del target[keys[0]]
    else:
        target[keys[-1]] = value
    return data


@pytest.mark.parametrize("loader", HISTORY_LOADERS)
@pytest.mark.parametrize("keys, value, field", WRONG_FIELDS, ids=[f"{'.'.join(map(str, k))}={v!r}"[:60]
                                                                   for k, v, _ in WRONG_FIELDS])
def test_a_field_of_the_wrong_type_is_refused_naming_the_file_and_field(loader, tmp_path, history_dict, keys, value,
                                                                          field):
    path = _write(tmp_path, _with(history_dict, keys, value))
    with pytest.raises(ValueError, match=rf"{_names(path)}.*\bfield(\(s\))? {field}"):
        loader(path)
    with pytest.raises(ValueError, match=rf"^Expected field(\(s\))? {field}"):
        History.from_dict(_with(history_dict, keys, value))


@pytest.mark.parametrize("loader", RUNSET_LOADERS)
@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(runs=[]), "runs"),
    (lambda d: d.pop("runs"), "runs"),
    (lambda d: d.update(metadata=[1]), "metadata"),
    (lambda d: d["metadata"].update(x={"__ndarray__": ["a"], "dtype": "float64", "shape": [1]}), r"metadata\['x'\]"),
    (lambda d: d["runs"]["b"].update(format="other"), r"Not a fedmm history \(field runs\['b'\]\)"),
    (lambda d: d["runs"]["b"].update(records="abc"), r"field runs\['b'\]\.records"),
    (lambda d: d["runs"]["a"]["state"].update(S="xyz"), r"field runs\['a'\]\.state\['S'\]"),
    (lambda d: d["runs"]["a"]["records"][0].update(t="zero"), r"field runs\['a'\]\.records\[0\]\['t'\]"),
])
def test_malformed_run_sets_are_refused_naming_the_file_and_field(loader, tmp_path, history, change, field):
    data = json.loads(json.dumps(RunSet({"a": history, "b": history}, metadata={"n": 2}).to_dict()))
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=rf"{_names(path)}.*{field}"):
        loader(path)


# -- valid files still load -------------------------------------------------------------------------
def test_valid_files_load_with_every_loader(tmp_path, history):
    history.save(tmp_path / "h.json")
    for loaded in (History.load(tmp_path / "h.json"), fedmm.load(str(tmp_path / "h.json")),
                   History.load(os.fsencode(tmp_path / "h.json"))):
        assert loaded.equals(history, ignore=())
    runs = RunSet({"FedMM/seed=0": history}, metadata={"x": np.arange(3.0), "inf": float("inf")})
    runs.save(tmp_path / "runs.json")
    for loaded in (RunSet.load(tmp_path / "runs.json"), fedmm.load(tmp_path / "runs.json")):
        assert loaded["FedMM/seed=0"].equals(history, ignore=())
        np.testing.assert_array_equal(loaded.metadata["x"], np.arange(3.0))


def test_old_files_and_free_form_fields_still_load(tmp_path, history_dict):
    old = copy.deepcopy(history_dict)
    old.pop("initial")
    old.pop("params")
    old["config"]["initial_objective"] = 7.5
    # fields History does not interpret may hold any JSON value; known ones may be None (not recorded)
    old["records"][0].update(note="warm start", extra={"a": [1, "b", None]}, objective=None, bytes_up=None)
    old["state"]["count"] = 3
    old["state"]["empty"] = {"__ndarray__": [], "dtype": "float64", "shape": [0, 2]}
    old["state"]["mask"] = {"__ndarray__": [True, False], "dtype": "bool", "shape": [2]}
    h = History.load(_write(tmp_path, old))
    assert h.initial == {"objective": 7.5} and h.params == {}
    assert h.records[0]["note"] == "warm start" and h.records[0]["extra"] == {"a": [1, "b", None]}
    assert h.state["empty"].shape == (0, 2) and h.state["mask"].dtype == bool
