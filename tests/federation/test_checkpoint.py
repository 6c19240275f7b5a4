# SPDX-License-Identifier: BSD-3-Clause
"""Checkpoint and resume of FedMM runs.

An interrupted run (Ctrl-C, here a callback raising ``KeyboardInterrupt`` or a real SIGINT sent to a
child process) hands back the History of its completed rounds and a checkpoint; resuming from it,
in memory or from the file written atomically, gives the uninterrupted run's History bit for bit,
on either backend.  A checkpoint of another run, or a damaged file, is refused with a clear error.
"""
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import zipfile

import numpy as np
import pytest

from fedmm.algorithms import FedMM, ParameterAveraging
from fedmm.compression import StochasticRounding
from fedmm.federation import Checkpoint, LocalRuntime, import_arrays
from fedmm.history import TIMING_FIELDS, History
from fedmm.models import GaussianMixture

N_ROUNDS = 40


def _datas(n_clients: int = 6, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(150, 2)) + 0.8 * i for i in range(n_clients)]


def _fedmm(backend: str = "auto", **overrides) -> FedMM:
    kw = dict(clients_per_round=3, step=0.5, control_variate_step=0.1, batch_size=20, backend=backend,
              compressor=StochasticRounding(bits=4, block_size=4))
    kw.update(overrides)
    return FedMM(GaussianMixture(3, n_features=2), **kw)


def _interrupt_at(stop: int):
    def callback(t, state):
        if t == stop:
            raise KeyboardInterrupt
    return callback


def _interrupted(algorithm, datas, stop, **kw):
    with pytest.raises(KeyboardInterrupt) as info:
        algorithm.run(datas, N_ROUNDS, seed=7, evaluate_every=5, callback=_interrupt_at(stop), **kw)
    return info.value


@pytest.fixture(scope="module")
def uninterrupted():
    return _fedmm().run(_datas(), N_ROUNDS, seed=7, evaluate_every=5)


@pytest.mark.parametrize("first", ["compiled", "python"])
@pytest.mark.parametrize("second", ["compiled", "python"])
def test_interrupted_run_resumes_bit_for_bit(uninterrupted, first, second):
    datas = _datas()
    exc = _interrupted(_fedmm(first), datas, stop=16)
    checkpoint = exc.checkpoint
    # the interrupted round left no trace or completed (rounds are atomic): either way the History
    # holds exactly the completed rounds, equal to the uninterrupted run's
    assert checkpoint.next_round == len(exc.history) in (16, 17)
    assert [r["t"] for r in checkpoint.history.records] == list(range(checkpoint.next_round))
    for a, b in zip(checkpoint.history.records, uninterrupted.records):
        assert ({k: v for k, v in a.items() if k not in TIMING_FIELDS}
                == {k: v for k, v in b.items() if k not in TIMING_FIELDS})
    resumed = _fedmm(second).run(datas, N_ROUNDS, resume=checkpoint, evaluate_every=5)
    assert resumed.equals(uninterrupted)
    assert resumed.config["initial_objective"] == uninterrupted.config["initial_objective"]
    # wall_time and monitor_time go on from the completed rounds
    assert np.all(np.diff(resumed["wall_time"]) >= 0)
    assert np.all(np.diff(resumed.series("monitor_time")) >= 0)
    assert resumed.initial["objective"] == uninterrupted.initial["objective"]


def test_server_control_variate_is_the_weighted_sum_of_the_clients_after_resume():
    datas = _datas()
    algorithm = _fedmm(control_variates="oracle")
    exc = _interrupted(algorithm, datas, stop=11)
    server, clients = algorithm.build(datas, seed=7)
    import_arrays(server, exc.checkpoint.server_state)
    V_clients = np.array([s["V"] for s in exc.checkpoint.client_states])
    np.testing.assert_allclose(server.V, server.weights @ V_clients, rtol=1e-12, atol=1e-12)


def test_checkpoint_every_writes_atomically_and_resumes_from_the_file(tmp_path, uninterrupted):
    datas = _datas()
    path = tmp_path / "run.ckpt"
    history = _fedmm().run(datas, N_ROUNDS, seed=7, evaluate_every=5, checkpoint_every=12, checkpoint_path=path)
    assert history.equals(uninterrupted)  # checkpointing does not change the numbers
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]  # no temporary file left behind
    last = Checkpoint.load(path)
    assert last.next_round == 36  # written after rounds 11, 23 and 35
    assert last.history.equals(Checkpoint.load(path).history)
    # the file written on interrupt is the state after the last completed round (round 20: the callback
    # runs once its round is committed)
    exc = _interrupted(_fedmm("python"), datas, stop=20, checkpoint_every=100, checkpoint_path=path)
    assert Checkpoint.load(path).next_round == exc.checkpoint.next_round == 21
    resumed = _fedmm().run(datas, N_ROUNDS, resume=path, evaluate_every=5)
    assert resumed.equals(uninterrupted)


def test_parameter_averaging_resumes_bit_for_bit():
    datas = _datas()
    model_kw = dict(clients_per_round=3, step=0.5, control_variate_step=0.1, batch_size=20)
    full = ParameterAveraging(GaussianMixture(3, n_features=2), **model_kw).run(
        datas, 30, seed=3, evaluate_every=5, monitor_every=5)
    algorithm = ParameterAveraging(GaussianMixture(3, n_features=2), **model_kw)
    with pytest.raises(KeyboardInterrupt) as info:
        algorithm.run(datas, 30, seed=3, evaluate_every=5, monitor_every=5, callback=_interrupt_at(13))
    resumed = algorithm.run(datas, 30, resume=info.value.checkpoint, evaluate_every=5, monitor_every=5)
    assert resumed.equals(full)


def test_failed_checkpoint_write_keeps_the_previous_file(tmp_path, monkeypatch):
    datas = _datas()
    path = tmp_path / "run.ckpt"
    _fedmm().run(datas, 10, seed=7, checkpoint_every=10, checkpoint_path=path)
    before = path.read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(OSError, match="No space"):
        _fedmm().run(datas, 10, seed=7, checkpoint_every=5, checkpoint_path=path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]


# -- refusals -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "run.ckpt"
    _fedmm().run(_datas(), 10, seed=7, evaluate_every=5, checkpoint_every=5, checkpoint_path=path)
    return path


@pytest.mark.parametrize("change, field", [
    (dict(seed=8), "seed"),
    (dict(control_variate_step=0.2), "config"),
    (dict(data_seed=1), "data"),
    (dict(n_clients=5), "n_clients"),
    (dict(evaluate_every=2), "evaluate_every"),
])
def test_checkpoint_of_another_run_is_refused_naming_the_difference(checkpoint_file, change, field):
    datas = _datas(change.pop("n_clients", 6), change.pop("data_seed", 0))
    run_kw = dict(evaluate_every=change.pop("evaluate_every", 5))
    if "seed" in change:
        run_kw["seed"] = change.pop("seed")
    with pytest.raises(ValueError, match=rf"checkpoint of this run, but it differs in .*\b{field}\b"):
        _fedmm(**change).run(datas, 20, resume=checkpoint_file, **run_kw)


TRAILER_SIZE = 90  # b"fedmm-checkpoint 2 sha256 " + 64 hex digits, the archive's comment (module docstring)


def _sealed(members: dict, *, compressed: bool = False, version: int = 2) -> bytes:
    """A checkpoint file of ``members`` with a valid trailer, built as the module docstring describes it:
    what a forger (or a bug) that keeps the SHA-256 right would write, for the checks behind the digest."""
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **members)
    buffer.seek(0)
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.comment = bytes(TRAILER_SIZE)
    data = buffer.getvalue()[:-TRAILER_SIZE]
    return data + b"fedmm-checkpoint %d sha256 %s" % (version, hashlib.sha256(data).hexdigest().encode())


def _members(path) -> dict:
    with np.load(path) as archive:  # a checkpoint is a plain .npz archive
        return {k: archive[k] for k in archive.files}


def _header_blob(header: dict) -> np.ndarray:
    return np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)


def test_damaged_checkpoints_are_refused(checkpoint_file, tmp_path):
    data = checkpoint_file.read_bytes()
    assert data[-TRAILER_SIZE:].startswith(b"fedmm-checkpoint 2 sha256 ")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="corrupted or not a checkpoint"):
        Checkpoint.load(truncated)
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(ValueError, match="corrupted or not a checkpoint"):
        Checkpoint.load(garbage)
    history_json = tmp_path / "history.json"
    _fedmm().run(_datas(), 2, seed=1).save(history_json)
    with pytest.raises(ValueError, match="not a checkpoint"):
        Checkpoint.load(history_json)
    npy = tmp_path / "array.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(ValueError, match="not a checkpoint"):
        Checkpoint.load(npy)
    members = _members(checkpoint_file)
    header = json.loads(members["header"].tobytes())
    # behind an intact digest: an array that no longer matches its recorded digest
    tampered = tmp_path / "tampered.ckpt"
    tampered.write_bytes(_sealed({**members, "server/V": members["server/V"] + 1e-12}))
    with pytest.raises(ValueError, match="does not match its digest"):
        Checkpoint.load(tampered)
    # another format version, in the header and in the trailer
    newer = tmp_path / "newer.ckpt"
    newer.write_bytes(_sealed({**members, "header": _header_blob({**header, "version": 99})}))
    with pytest.raises(ValueError, match="format version 99"):
        Checkpoint.load(newer)
    newer.write_bytes(_sealed(members, version=3))
    with pytest.raises(ValueError, match=r"format version 3; this fedmm reads version 2"):
        Checkpoint.load(newer)
    # a missing array, compressed members, a History that is not one
    missing = tmp_path / "missing.ckpt"
    missing.write_bytes(_sealed({k: v for k, v in members.items() if k != "server/V"}))
    with pytest.raises(ValueError, match="arrays do not match its header"):
        Checkpoint.load(missing)
    compressed = tmp_path / "compressed.ckpt"
    compressed.write_bytes(_sealed(members, compressed=True))
    with pytest.raises(ValueError, match="compressed members"):
        Checkpoint.load(compressed)
    bad_history = tmp_path / "bad_history.ckpt"
    bad_history.write_bytes(_sealed({**members, "header": _header_blob(
        {**header, "history": {**header["history"], "records": "abc"}})}))
    with pytest.raises(ValueError, match="bad History: .*field records"):
        Checkpoint.load(bad_history)
    assert zipfile.is_zipfile(checkpoint_file)
    with pytest.raises(FileNotFoundError):
        Checkpoint.load(tmp_path / "absent.ckpt")
    with pytest.raises(TypeError, match="'path'"):
        Checkpoint.load(3)  # not a file descriptor


def test_the_digest_covers_the_header(checkpoint_file, tmp_path):
    """An edited header in a well-formed archive (ZIP checksums right) is refused, with or without the
    original trailer; so is a checkpoint of format version 1, which had no trailer."""
    members = _members(checkpoint_file)
    header = json.loads(members["header"].tobytes())
    header["fingerprint"]["seed"] = header["fingerprint"]["seed"] + 1
    header["history"]["records"][0]["gamma"] = 0.25
    edited = io.BytesIO()
    np.savez(edited, **{**members, "header": _header_blob(header)})
    path = tmp_path / "edited.ckpt"
    path.write_bytes(edited.getvalue())
    with pytest.raises(ValueError, match=r"edited\.ckpt.*(no integrity trailer|not a checkpoint)"):
        Checkpoint.load(path)
    edited.seek(0)
    with zipfile.ZipFile(edited, "a") as archive:
        archive.comment = checkpoint_file.read_bytes()[-TRAILER_SIZE:]  # the original file's trailer
    path.write_bytes(edited.getvalue())
    with pytest.raises(ValueError, match=r"edited\.ckpt' is corrupted: its SHA-256 does not match"):
        Checkpoint.load(path)
    old = io.BytesIO()
    np.savez(old, **{**members, "header": _header_blob({**header, "version": 1})})
    path = tmp_path / "version1.ckpt"
    path.write_bytes(old.getvalue())
    with pytest.raises(ValueError, match=r"version1\.ckpt' has format version 1 .*reads checkpoints of format "
                                         r"version 2"):
        Checkpoint.load(path)


def _assert_every_flip_is_refused(path, positions):
    data = path.read_bytes()
    flipped = path.with_name("flipped.ckpt")
    flipped.write_bytes(data)
    message = re.escape(repr(str(flipped)))
    with open(flipped, "r+b", buffering=0) as fh:
        for bit in positions:
            byte = int(bit) // 8
            fh.seek(byte)
            fh.write(bytes([data[byte] ^ (1 << (int(bit) % 8))]))
            with pytest.raises(ValueError, match=message):
                Checkpoint.load(flipped)
            fh.seek(byte)
            fh.write(data[byte:byte + 1])
    assert Checkpoint.load(flipped).next_round >= 1  # restored: the intact file loads


def test_every_single_bit_flip_of_a_small_checkpoint_is_refused(tmp_path):
    history = History("FedMM", {"seed": 0})
    history.initial.update(objective=2.5, wall_time=0.0)
    history.append(t=0, gamma=0.5, objective=1.25, active=[0, 1], dropped=[], wall_time=0.01)
    history.state["S"] = np.arange(3.0)
    small = Checkpoint(fingerprint={"seed": 0}, next_round=1, server_state={"S": np.arange(3.0)},
                       client_states=[{"V": np.ones(2)}, {}], history=history)
    path = tmp_path / "small.ckpt"
    small.save(path)
    assert Checkpoint.load(path).history.equals(history)
    _assert_every_flip_is_refused(path, range(8 * path.stat().st_size))


def test_sampled_bit_flips_of_a_run_checkpoint_are_refused(checkpoint_file, tmp_path):
    path = tmp_path / "run.ckpt"
    path.write_bytes(checkpoint_file.read_bytes())
    n_bits = 8 * path.stat().st_size
    rng = np.random.default_rng(27)
    _assert_every_flip_is_refused(path, rng.choice(n_bits, size=min(n_bits, 2_000), replace=False))


# -- temporary files of interrupted writes --------------------------------------------------------
KILLED_WRITER = """
import os, signal, sys
import numpy as np
from fedmm.federation import Checkpoint
from fedmm.history import History

def savez_then_die(fh, **arrays):
    fh.write(b"PK\\x03\\x04 half an archive")
    fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)

np.savez = savez_then_die
Checkpoint(fingerprint={}, next_round=0, server_state={"S": np.zeros(2)}, client_states=[],
           history=History("x")).save(sys.argv[1])
"""


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL needed")
def test_the_next_write_removes_the_temporary_file_of_a_killed_write(tmp_path):
    path = tmp_path / "run.ckpt"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED_WRITER), str(path)], capture_output=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    orphans = list(tmp_path.glob(".run.ckpt.fedmm-checkpoint-*.tmp"))
    assert len(orphans) == 1 and not path.exists()
    # temporary files that are not this target's: another target's, the old unnamed pattern, a user's file
    others = [".other.ckpt.fedmm-checkpoint-abcd1234.tmp", ".fedmm-checkpoint-abcd1234.tmp",
              ".run.ckpt.fedmm-checkpoint-abcd1234.tmp.mine", "run.ckpt.fedmm-checkpoint-abcd1234.tmp"]
    for name in others:
        (tmp_path / name).write_bytes(b"not ours to remove")
    # names of our pattern that a write never creates: a link, a FIFO (opening it must not block)
    (tmp_path / ".run.ckpt.fedmm-checkpoint-link0000.tmp").symlink_to(tmp_path / others[0])
    os.mkfifo(tmp_path / ".run.ckpt.fedmm-checkpoint-fifo0000.tmp")
    others += [".run.ckpt.fedmm-checkpoint-link0000.tmp", ".run.ckpt.fedmm-checkpoint-fifo0000.tmp"]
    _fedmm().run(_datas(), 2, seed=0, checkpoint_every=1, checkpoint_path=path)
    assert sorted(os.listdir(tmp_path)) == sorted(["run.ckpt", *others])
    assert Checkpoint.load(path).next_round == 2


@pytest.mark.skipif(os.name == "nt", reason="POSIX file locks")
def test_the_temporary_file_of_a_live_write_is_kept(tmp_path):
    import fcntl

    path = tmp_path / "run.ckpt"
    live = tmp_path / ".run.ckpt.fedmm-checkpoint-live0000.tmp"
    with open(live, "wb") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # what a write in progress holds
        _fedmm().run(_datas(), 2, seed=0, checkpoint_every=1, checkpoint_path=path)
        assert live.exists()
    _fedmm().run(_datas(), 2, seed=0, checkpoint_every=1, checkpoint_path=path)  # released: an orphan now
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]


def test_bad_resume_and_checkpoint_arguments(checkpoint_file, tmp_path):
    datas = _datas()
    with pytest.raises(ValueError, match="'init' to be None"):
        _fedmm().run(datas, 20, resume=checkpoint_file, evaluate_every=5, init=np.zeros(3))
    with pytest.raises(ValueError, match=r"'n_rounds' >= 10"):
        _fedmm().run(datas, 9, resume=checkpoint_file, evaluate_every=5)
    with pytest.raises(ValueError, match="'checkpoint_path'"):
        _fedmm().run(datas, 5, seed=1, checkpoint_every=2)
    with pytest.raises(ValueError, match="checkpoint_every"):
        _fedmm().run(datas, 5, seed=1, checkpoint_every=-1, checkpoint_path=tmp_path / "x")

    class RuntimeWithoutResume:
        def run(self, server, clients, n_rounds, *, history, monitor=None, callback=None, progress=False):
            return LocalRuntime().run(server, clients, n_rounds, history=history, monitor=monitor,
                                      callback=callback, progress=progress)

    with pytest.raises(ValueError, match="cannot resume or checkpoint"):
        _fedmm().run(datas, 20, resume=checkpoint_file, evaluate_every=5, runtime=RuntimeWithoutResume())


def test_resume_takes_the_checkpoint_seed(checkpoint_file):
    full = _fedmm().run(_datas(), 20, seed=7, evaluate_every=5)
    resumed = _fedmm().run(_datas(), 20, resume=checkpoint_file, evaluate_every=5)
    assert resumed.equals(full)


# -- a real SIGINT to a child process -------------------------------------------------------------
CHILD = """
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started from a background job
import numpy as np
from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.models import GaussianMixture

rng = np.random.default_rng(0)
datas = [rng.normal(size=(150, 2)) + 0.8 * i for i in range(6)]
algorithm = FedMM(GaussianMixture(3, n_features=2), clients_per_round=3, step=0.5, control_variate_step=0.1,
                  batch_size=20, backend=sys.argv[2], compressor=StochasticRounding(bits=4, block_size=4))
try:
    algorithm.run(datas, int(sys.argv[3]), seed=7, evaluate_every=50, checkpoint_every=25,
                  checkpoint_path=sys.argv[1])
except KeyboardInterrupt as exc:
    print(json.dumps({"interrupted": True, "next_round": exc.checkpoint.next_round}), flush=True)
    sys.exit(130)
print(json.dumps({"interrupted": False}), flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt", reason="POSIX signals needed")
@pytest.mark.parametrize("backend, n_rounds", [("compiled", 200_000), ("python", 20_000)])
def test_sigint_to_a_child_process_then_resume_equals_the_uninterrupted_run(tmp_path, backend, n_rounds):
    path = tmp_path / "child.ckpt"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(path), backend, str(n_rounds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.exists(), proc.communicate(timeout=10) if proc.poll() is not None else "no checkpoint in 120 s"
        time.sleep(0.3)  # let it run on past the first checkpoint
        assert proc.poll() is None, "the run finished before the interrupt: the test proves nothing"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    checkpoint = Checkpoint.load(path)
    assert report["interrupted"] and checkpoint.next_round == report["next_round"]
    assert 25 <= checkpoint.next_round < n_rounds
    # continue a little past the interruption and compare with the same rounds run in one go
    total = checkpoint.next_round + 30
    algorithm = FedMM(GaussianMixture(3, n_features=2), clients_per_round=3, step=0.5, control_variate_step=0.1,
                      batch_size=20,
                      compressor=StochasticRounding(bits=4, block_size=4))
    resumed = algorithm.run(_datas(), total, resume=path, evaluate_every=50)
    straight = algorithm.run(_datas(), total, seed=7, evaluate_every=50)
    # the interrupted run had n_rounds rounds to go, so its last-round objective is not in the prefix
    assert resumed.equals(straight)
