# SPDX-License-Identifier: BSD-3-Clause
"""Checkpoints of a run: the state after a completed round, from which the run continues bit for bit.

A :class:`Checkpoint` holds what a run carries between rounds and nothing
that can be rebuilt: the server's and every client's state (the
``to_arrays()`` of their ``export_state()`` values: :class:`~fedmm.federation.ServerState`,
:class:`~fedmm.federation.SubgradientServerState`, :class:`~fedmm.federation.OTClientState`, ...), the
History of the completed rounds, the index of the next round, and a
*fingerprint* of the run (algorithm, hyper-parameters, seed, number of
clients, digest of the clients' data) so that a checkpoint is never applied
to a different run.  Counter-based random streams (round ``t`` of party ``i``
draws from ``Philox(key_i, t)``: FedMM, FedMM-OT) need no saving; streams
that advance (the non-smooth family's minibatch streams, Scaffnew's coins)
are part of their party's state value.  :func:`import_arrays` puts such arrays back into a party.

File format (version 2): one ``.npz`` (ZIP) archive of the arrays and a
UTF-8 JSON header (member ``header``) with the format tag, version,
fingerprint, History and, for every array, its dtype, shape and SHA-256.
The archive's comment, the last 90 bytes of the file, is the trailer
``fedmm-checkpoint 2 sha256 <hex>``: the SHA-256 of every byte before it.
:meth:`Checkpoint.load` checks that digest before it parses anything, then
reads the archive with ``allow_pickle=False`` and checks the member set,
dtypes, shapes and per-array digests; any file that fails a check (a
truncated or altered file, one bit flipped anywhere, a file of another
format version) is refused with a ``ValueError`` naming the file.  The
digest detects corruption, not a deliberate forgery (it has no key).

Writes are atomic: a temporary file ``.<name>.fedmm-checkpoint-<random>.tmp``
in the same directory, locked while it is written, ``fsync``, ``os.replace``,
``fsync`` of the directory.  A write interrupted by ``kill -9`` leaves its
temporary file behind; the next write to the same path removes those no
process holds any more.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import zipfile
from typing import IO, Any, Mapping, Sequence

import numpy as np

from fedmm._validation import check_path
from fedmm.history import History
from fedmm.protocols import PartyState

try:
    import fcntl
except ImportError:  # Windows: an open temporary file cannot be removed, which is the lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["Checkpoint", "CheckpointWriter", "data_digest", "import_arrays"]

_FORMAT = "fedmm-checkpoint"
_FORMAT_VERSION = 2
_HEADER = "header"
#: The trailer (the archive's comment): format version and the SHA-256 of every byte before it.
_TRAILER = re.compile(rb"fedmm-checkpoint ([0-9]) sha256 ([0-9a-f]{64})")
_TRAILER_SIZE = len(b"fedmm-checkpoint 2 sha256 ") + 64
_CHUNK = 1 << 20
#: Array dtypes a checkpoint may hold (states are float64 vectors and integer oracle memories).
_DTYPES = {"float64", "int64", "int32", "uint64", "uint8", "bool"}


def _array_digest(arr: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(f"{arr.dtype.str}{arr.shape}".encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def data_digest(datas: Sequence[Any]) -> str:
    """A SHA-256 digest of the clients' data sets (arrays, sparse matrices, tuples of them).

    Two runs whose clients hold the same values in the same order, shapes and
    dtypes get the same digest; it is what ties a :class:`Checkpoint` to its data.

    Parameters
    ----------
    datas : sequence
        One data set per client, in the model's format.

    Returns
    -------
    str
        Hex digest.
    """
    h = hashlib.sha256()

    # The hasattr calls below dispatch on the type of client *data* (data conversion, as np.asarray does),
    # not on a party's capabilities: the parties' members are declared in fedmm.protocols.
    def feed(value: Any) -> None:
        if isinstance(value, np.ndarray):
            h.update(b"A")
            h.update(f"{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif hasattr(value, "tocsr") and hasattr(value, "shape"):  # SciPy sparse
            csr = value.tocsr()
            h.update(f"S{csr.shape}".encode())
            for part in (csr.data, csr.indices, csr.indptr):
                feed(np.asarray(part))
        elif isinstance(value, (list, tuple)):
            h.update(f"L{len(value)}".encode())
            for v in value:
                feed(v)
        elif isinstance(value, dict):
            h.update(f"D{len(value)}".encode())
            for k in sorted(value, key=str):
                h.update(str(k).encode())
                feed(value[k])
        elif value is None or isinstance(value, (bool, int, float, str, np.generic)):
            h.update(f"V{value!r}".encode())
        elif hasattr(value, "__array__"):
            feed(np.asarray(value))
        else:
            raise TypeError(f"Cannot fingerprint client data of type {type(value).__name__}")

    h.update(f"n{len(datas)}".encode())
    for d in datas:
        feed(d)
    return h.hexdigest()


def _state_arrays(state: Any, name: str) -> Mapping[str, Any]:
    """A state value's ``to_arrays()`` (a mapping of arrays passes as it is)."""
    if isinstance(state, Mapping):
        return state
    if isinstance(state, PartyState):
        return state.to_arrays()
    raise TypeError(f"Expected '{name}' to be a party's state value (export_state()) or a mapping of names to "
                    f"arrays, got {type(state).__name__}")


def import_arrays(party: Any, arrays: Mapping[str, Any], *args: Any) -> None:
    """Put the ``to_arrays()`` of a state (a checkpoint's) back into ``party``.

    ``party.import_state(cls.from_arrays(arrays), *args)``, where ``cls`` is the class of
    ``party.export_state()`` (:class:`fedmm.protocols.PartyState`): the state class of the party's family.

    Parameters
    ----------
    party : ServerParty or ClientParty
        A party built like the one whose state ``arrays`` hold.
    arrays : mapping of str to ndarray
        What ``party.export_state().to_arrays()`` gave.
    *args
        Passed on to ``import_state`` (``theta`` of a server, ``like_theta`` of a client).
    """
    party.import_state(type(party.export_state()).from_arrays(arrays), *args)


def _fsync_directory(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sha256_prefix(fh: IO[bytes], size: int) -> str:
    """SHA-256 of the first ``size`` bytes of ``fh`` (read from the start, in chunks)."""
    h = hashlib.sha256()
    fh.seek(0)
    while size > 0:
        chunk = fh.read(min(size, _CHUNK))
        if not chunk:
            raise EOFError("the file ended early")
        h.update(chunk)
        size -= len(chunk)
    return h.hexdigest()


def _seal(fh: IO[bytes]) -> None:
    """Set the archive's comment to the trailer: the format version and the SHA-256 of every byte before it."""
    fh.seek(0)
    with zipfile.ZipFile(fh, "a") as archive:
        archive.comment = bytes(_TRAILER_SIZE)  # placeholder of the trailer's size: the comment is the file's end
    end = fh.seek(0, os.SEEK_END)
    trailer = b"fedmm-checkpoint %d sha256 %s" % (_FORMAT_VERSION, _sha256_prefix(fh, end - _TRAILER_SIZE).encode())
    assert len(trailer) == _TRAILER_SIZE
    fh.seek(end - _TRAILER_SIZE)
    fh.write(trailer)


def _tmp_prefix(path: str) -> str:
    """The name prefix of ``path``'s temporary files (``.<name>.fedmm-checkpoint-``; long names shortened)."""
    name = os.path.basename(path)
    if len(name) > 100:
        name = f"{name[:64]}~{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"
    return f".{name}.fedmm-checkpoint-"


def _new_tmp(directory: str, prefix: str) -> tuple[int, str]:
    """Create and lock a temporary file (its lock tells :func:`_remove_orphans` a live write holds it)."""
    for _ in range(100):
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
        if fcntl is None:
            return fd, tmp
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while another write's cleanup looks at it
        except OSError:  # a file system without locks
            return fd, tmp
        try:
            mine = os.path.samestat(os.stat(tmp), os.fstat(fd))
        except OSError:
            mine = False
        if mine:
            return fd, tmp
        os.close(fd)  # removed by another write's cleanup before we locked it: take a new name
    raise OSError(f"Could not create a temporary checkpoint file in {directory!r}")


def _remove_orphans(directory: str, prefix: str) -> None:
    """Remove the temporary files of interrupted writes to one target (``prefix``) that no process holds."""
    pattern = re.compile(re.escape(prefix) + r"[A-Za-z0-9_]+\.tmp")
    try:
        names = [n for n in os.listdir(directory) if pattern.fullmatch(n)]
    except OSError:
        return
    for name in names:
        tmp = os.path.join(directory, name)
        if fcntl is None:
            try:
                os.unlink(tmp)  # fails while the writing process still has it open
            except OSError:
                pass
            continue
        try:  # never follows a link, never waits on a FIFO
            fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live write (or no locks here): keep it
            opened = os.fstat(fd)
            if stat.S_ISREG(opened.st_mode) and os.path.samestat(os.stat(tmp), opened):
                os.unlink(tmp)
        except OSError:
            pass
        finally:
            os.close(fd)


class Checkpoint:
    """The state of a run after a completed round.

    Parameters
    ----------
    fingerprint : dict
        JSON-serializable identity of the run (algorithm, hyper-parameters,
        seed, number of clients, data digest); :meth:`check_matches` compares it.
    next_round : int
        The round the run continues with (the number of completed rounds).
    server_state : state value or dict of str to ndarray
        ``server.export_state()`` after round ``next_round - 1`` (a :class:`fedmm.protocols.PartyState`,
        stored as its ``to_arrays()``), or those arrays.
    client_states : list of (state value or dict of str to ndarray)
        ``client.export_state()`` of every client, in client order (likewise).
    history : History
        The records of the completed rounds (and the run's configuration).

    Notes
    -----
    A run that is interrupted attaches one of these to the exception
    (``exc.checkpoint``); ``run(..., resume=checkpoint)`` (or the path of a
    saved one) continues it as if it had never stopped.
    """

    def __init__(self, *, fingerprint: dict, next_round: int, server_state: Any,
                 client_states: Sequence[Any], history: History) -> None:
        self.fingerprint = dict(fingerprint)
        self.next_round = int(next_round)
        server_state = _state_arrays(server_state, "server_state")
        client_states = [_state_arrays(s, f"client_states[{i}]") for i, s in enumerate(client_states)]
        self.server_state = {k: np.array(v, copy=True) for k, v in server_state.items()}
        self.client_states = [{k: np.array(v, copy=True) for k, v in s.items()} for s in client_states]
        self.history = history

    def __repr__(self) -> str:
        return (f"Checkpoint(algorithm={self.history.algorithm!r}, next_round={self.next_round}, "
                f"n_clients={len(self.client_states)})")

    # -- identity -----------------------------------------------------------
    def check_matches(self, fingerprint: dict) -> None:
        """Raise ``ValueError`` naming every field in which this checkpoint's run differs from ``fingerprint``."""
        mine = json.loads(json.dumps(self.fingerprint, sort_keys=True))
        theirs = json.loads(json.dumps(fingerprint, sort_keys=True))
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if differ:
            details = "; ".join(f"{k}: checkpoint {mine.get(k)!r}, this run {theirs.get(k)!r}" for k in differ)
            raise ValueError(f"Expected 'resume' to be a checkpoint of this run, but it differs in {details}")

    # -- persistence --------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {f"server/{k}": np.asarray(v) for k, v in self.server_state.items()}
        for i, state in enumerate(self.client_states):
            arrays.update({f"client/{i}/{k}": np.asarray(v) for k, v in state.items()})
        for name, arr in arrays.items():
            if arr.dtype.name not in _DTYPES:
                raise TypeError(f"Cannot checkpoint state array {name!r} of dtype {arr.dtype}")
        return arrays

    def save(self, path: str | os.PathLike) -> None:
        """Write the checkpoint to ``path`` atomically (write, fsync, rename, fsync the directory).

        A reader never sees a partial file: until the rename, ``path`` keeps
        its previous content (or does not exist).  Temporary files left by
        interrupted writes to ``path`` (``.<name>.fedmm-checkpoint-*.tmp``,
        held by no process) are removed first.
        """
        path = os.fsdecode(check_path(path))
        directory = os.path.dirname(os.path.abspath(path))
        arrays = self._arrays()
        header = {
            "format": _FORMAT, "version": _FORMAT_VERSION, "fingerprint": self.fingerprint,
            "next_round": self.next_round, "n_clients": len(self.client_states),
            "history": self.history.to_dict(),
            "arrays": {k: {"dtype": v.dtype.str, "shape": list(v.shape), "sha256": _array_digest(v)}
                       for k, v in arrays.items()},
        }
        blob = np.frombuffer(json.dumps(header, allow_nan=False).encode("utf-8"), dtype=np.uint8)
        prefix = _tmp_prefix(path)
        _remove_orphans(directory, prefix)
        fd, tmp = _new_tmp(directory, prefix)
        try:
            with os.fdopen(fd, "w+b") as fh:
                np.savez(fh, **{_HEADER: blob}, **arrays)
                _seal(fh)
                fh.flush()
                os.fsync(fh.fileno())
                if fcntl is not None:  # renamed while still locked (Windows cannot rename an open file)
                    os.replace(tmp, path)
            if fcntl is None:
                os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_directory(directory)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Checkpoint":
        """Read a checkpoint written by :meth:`save`, refusing any file that is not exactly one.

        Raises
        ------
        ValueError
            The file is not a fedmm checkpoint, is truncated or corrupted
            (its SHA-256 does not match its trailer, or a digest, dtype, shape
            or member does not match its header), or has another format
            version (checkpoints of format version 1 have no trailer and are
            refused).
        FileNotFoundError
            ``path`` does not exist.
        TypeError
            ``path`` is not a file name (``str`` or ``os.PathLike``).
        """
        path = check_path(path)
        where = f"checkpoint {path!r}"
        with open(path, "rb") as fh:
            _verify(fh, where)
            try:
                header, arrays = _parse(fh, where)
                return cls(**_contents(header, arrays, where))
            except ValueError as exc:
                if str(exc).startswith(where):
                    raise
                raise ValueError(f"{where} is corrupted or not a checkpoint: {exc}") from exc
            except Exception as exc:  # the digest matched: a file built to pass it, refused all the same
                raise ValueError(f"{where} is corrupted or not a checkpoint: {type(exc).__name__}: {exc}") from exc


def _verify(fh: IO[bytes], where: str) -> None:
    """Check the file's trailer and SHA-256 before anything in it is parsed (``ValueError`` naming ``where``)."""
    size = os.fstat(fh.fileno()).st_size
    trailer = b""
    if size > _TRAILER_SIZE:
        fh.seek(size - _TRAILER_SIZE)
        trailer = fh.read(_TRAILER_SIZE)
    match = _TRAILER.fullmatch(trailer)
    if match is None:
        if size > _TRAILER_SIZE and _looks_like_version_1(fh):
            raise ValueError(f"{where} has format version 1 (no integrity trailer) or is damaged; this fedmm "
                             f"reads checkpoints of format version {_FORMAT_VERSION} only: start the run again, "
                             "or resume it with the fedmm that wrote the checkpoint")
        raise ValueError(f"{where} is corrupted or not a checkpoint: no fedmm checkpoint trailer at its end")
    try:
        intact = _sha256_prefix(fh, size - _TRAILER_SIZE) == match[2].decode()
    except (OSError, EOFError) as exc:
        raise ValueError(f"{where} is corrupted or not a checkpoint: {type(exc).__name__}: {exc}") from exc
    version = int(match[1])
    if version != _FORMAT_VERSION:
        raise ValueError(f"{where} has format version {version}{'' if intact else ' (or is damaged)'}; "
                         f"this fedmm reads version {_FORMAT_VERSION}")
    if not intact:
        raise ValueError(f"{where} is corrupted: its SHA-256 does not match the digest in its trailer "
                         "(a truncated or altered file)")
    fh.seek(0)


def _looks_like_version_1(fh: IO[bytes]) -> bool:
    """Whether a file without a trailer is a ZIP archive with a checkpoint header (only to word the refusal)."""
    try:
        fh.seek(0)
        with zipfile.ZipFile(fh) as archive:
            return f"{_HEADER}.npy" in archive.namelist()
    except Exception:  # an unverified file: any failure just means "not a version-1 checkpoint"
        return False


def _parse(fh: IO[bytes], where: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and arrays of a verified checkpoint file, checked against each other."""
    with zipfile.ZipFile(fh) as members:
        # save() stores members uncompressed: anything else is not ours, and a compressed
        # member could expand far beyond the file's size
        if any(m.compress_type != zipfile.ZIP_STORED for m in members.infolist()):
            raise ValueError(f"{where} is not a fedmm checkpoint (compressed members)")
    fh.seek(0)
    archive = np.load(fh, allow_pickle=False)
    names = set(archive.files)
    if _HEADER not in names:
        raise ValueError(f"{where} is not a fedmm checkpoint (no header)")
    header = json.loads(archive[_HEADER].tobytes().decode("utf-8"))
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ValueError(f"{where} is not a fedmm checkpoint")
    if header.get("version") != _FORMAT_VERSION:
        raise ValueError(f"{where} has format version {header.get('version')!r}; "
                         f"this fedmm reads version {_FORMAT_VERSION}")
    declared = header.get("arrays")
    if not isinstance(declared, dict) or set(declared) != names - {_HEADER}:
        raise ValueError(f"{where} is corrupted: its arrays do not match its header")
    arrays = {}
    for name, meta in declared.items():
        arr = archive[name]
        if (not isinstance(meta, dict) or arr.dtype.str != meta.get("dtype") or list(arr.shape) != meta.get("shape")
                or _array_digest(arr) != meta.get("sha256")):
            raise ValueError(f"{where} is corrupted: array {name!r} does not match its digest")
        arrays[name] = arr
    return header, arrays


def _contents(header: dict, arrays: dict[str, np.ndarray], where: str) -> dict[str, Any]:
    """The :class:`Checkpoint` arguments held by a parsed header and its arrays."""
    n_clients = header.get("n_clients")
    next_round = header.get("next_round")
    if not isinstance(n_clients, int) or n_clients < 0 or not isinstance(next_round, int) or next_round < 0:
        raise ValueError(f"{where} is corrupted: bad 'n_clients' or 'next_round'")
    fingerprint = header.get("fingerprint")
    if not isinstance(fingerprint, dict):
        raise ValueError(f"{where} is corrupted: bad 'fingerprint'")
    server_state = {k[len("server/"):]: v for k, v in arrays.items() if k.startswith("server/")}
    client_states: list[dict[str, np.ndarray]] = [{} for _ in range(n_clients)]
    for name, arr in arrays.items():
        if name.startswith("client/"):
            _, index, key = (name.split("/", 2) + ["", ""])[:3]
            if not index.isdigit() or int(index) >= n_clients or not key:
                raise ValueError(f"{where} is corrupted: array {name!r} names no client")
            client_states[int(index)][key] = arr
        elif not name.startswith("server/"):
            raise ValueError(f"{where} is corrupted: array {name!r} is neither the server's nor a client's")
    try:
        history = History.from_dict(header.get("history"))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where} is corrupted: bad History: {exc}") from exc
    if len(history) != next_round:
        raise ValueError(f"{where} is corrupted: {len(history)} History records for {next_round} rounds")
    return dict(fingerprint=fingerprint, next_round=next_round, server_state=server_state,
                client_states=client_states, history=history)


class CheckpointWriter:
    """Writes a :class:`Checkpoint` of a running run every ``every`` rounds (and on demand).

    Runtimes call :meth:`due` to end a compiled stretch on a checkpoint
    round and call the writer after that round's record is in the History.

    Parameters
    ----------
    path : path-like
        Where to write (atomically, see :meth:`Checkpoint.save`).
    every : int >= 0
        Write after round ``t`` when ``(t + 1) % every == 0``; 0 only on demand.
    snapshot : callable() -> Checkpoint
        Builds the checkpoint of the current state.
    """

    def __init__(self, path: str | os.PathLike | None, every: int, snapshot: Any) -> None:
        self.path = None if path is None else os.fspath(path)
        self.every = int(every)
        self.snapshot = snapshot
        self.written = 0

    def due(self, t: int) -> bool:
        """Whether a checkpoint is written after round ``t``."""
        return self.path is not None and self.every > 0 and (t + 1) % self.every == 0

    def __call__(self, t: int) -> None:
        if self.due(t):
            self.write()

    def write(self) -> Checkpoint:
        """Build the checkpoint now and write it to ``path`` (if any); returns it."""
        checkpoint = self.snapshot()
        if self.path is not None:
            checkpoint.save(self.path)
            self.written += 1
        return checkpoint
