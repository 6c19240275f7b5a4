# SPDX-License-Identifier: BSD-3-Clause
"""Counter-based random streams: party ``i`` at round ``t`` draws from ``Philox(key_i, counter=t)``.

Each party (the server, each client) gets a 128-bit Philox key from one
``SeedSequence``; the stream a party uses at round ``t`` starts at counter
``(0, t, 0, 0)``.  Its randomness is thus a pure function of (seed, party,
round): results do not depend on thread scheduling, on which other clients
were active, or on how many numbers an earlier round consumed — which is what
lets Algorithm 2 and Algorithm 4 be coupled exactly, and a stateless remote
client reproduce an in-process run.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np


from fedmm._validation import check_seed
from fedmm.federation.skeleton import PhiloxRounds

__all__ = ["RoundStream", "derive_seed", "party_seed", "party_keys", "check_seed", "seed_repr", "seed_from_repr",
           "init_generator"]

SERVER_PARTY = 0
CLIENT_PARTY = 1


def derive_seed(seed: int | np.random.SeedSequence, *key: int) -> np.random.SeedSequence:
    """The child ``SeedSequence(seed.entropy, spawn_key=seed.spawn_key + key)``, without mutating ``seed``.

    ``derive_seed(seed, i)`` is the ``i``-th child ``seed.spawn`` would give a
    ``SeedSequence`` that has not spawned yet, but it is a pure function of
    ``seed``: a run can be replayed from the recorded seed alone.

    Parameters
    ----------
    seed : SeedSequence or int
        A seed normalized by :func:`check_seed` (a non-negative int is read
        as ``SeedSequence(seed)``).
    *key : int
        Appended to the spawn key.

    Examples
    --------
    >>> import numpy as np
    >>> child = derive_seed(np.random.SeedSequence(5), 2)
    >>> same = child.generate_state(2) == np.random.SeedSequence(5).spawn(3)[2].generate_state(2)
    >>> child.spawn_key, bool(same.all())
    ((2,), True)
    """
    root = seed if isinstance(seed, np.random.SeedSequence) else check_seed(int(seed))
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + tuple(int(k) for k in key),
                                  pool_size=root.pool_size)


def party_seed(seed: int | np.random.SeedSequence, party: int, index: int = 0) -> np.random.SeedSequence:
    """The ``SeedSequence`` of one party of the FedMM engine: ``derive_seed(seed, party, index)``."""
    return derive_seed(seed, party, index)


class RoundStream(PhiloxRounds):
    """:class:`fedmm.federation.PhiloxRounds` keyed by a party's ``SeedSequence`` (its first two uint64 words).

    Not shared between threads: one instance per party, used by one thread at a time.
    """

    def __init__(self, seed_seq: np.random.SeedSequence) -> None:
        super().__init__(seed_seq.generate_state(2, np.uint64))

    @classmethod
    def from_key(cls, key: np.ndarray) -> "RoundStream":
        """The stream whose key is ``key`` (a row of :func:`party_keys`: ``RoundStream(party_seed(...))``'s key)."""
        stream = cls.__new__(cls)
        PhiloxRounds.__init__(stream, key)
        return stream


# NumPy's SeedSequence constants (numpy/random/bit_generator.pyx, after O'Neill's seed_seq): 32-bit words
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R, _XSHIFT, _MASK32 = 0xCA01F9DD, 0x4973F715, 16, 0xFFFFFFFF


def party_keys(seed: int | np.random.SeedSequence, party: int, n: int) -> np.ndarray:
    """The Philox keys of the parties ``(party, 0)``, ..., ``(party, n − 1)``, all at once.

    Row ``i`` is ``party_seed(seed, party, i).generate_state(2, np.uint64)``,
    the key of ``RoundStream(party_seed(seed, party, i))``.  A ``SeedSequence``
    hashes its entropy words one after the other into a pool of 32-bit words
    with multipliers that do not depend on the data; the words of
    ``(seed, party)`` are common to every ``i``, so NumPy's own pool of the
    ``SeedSequence`` with spawn key ``(..., party)`` is the pool before the
    last word ``i``, and only that word's mixing and the output hash run
    here, as uint32 array operations over every ``i`` (building a run of
    10,000 clients one ``SeedSequence`` each costs about 0.1 s).  Rows 0 and
    ``n − 1`` are checked against NumPy's derivation; should they differ (a
    NumPy that changed the algorithm, which its stability policy excludes),
    every key is derived one at a time instead.

    Parameters
    ----------
    seed : SeedSequence or int
        The run seed (normalized by :func:`check_seed`).
    party : int
        The party number (``0`` server, ``1`` clients).
    n : int
        Number of keys, ``0 <= n < 2**32`` (an index is one 32-bit word of the spawn key).

    Returns
    -------
    ndarray of shape (n, 2), dtype uint64
    """
    root = seed if isinstance(seed, np.random.SeedSequence) else check_seed(int(seed))
    n = int(n)
    if not 0 <= n < 2**32:
        raise ValueError(f"Expected 0 <= n < 2**32 parties, got {n}")
    if n == 0:
        return np.empty((0, 2), dtype=np.uint64)
    prefix = derive_seed(root, party)
    size = prefix.pool_size
    run_words, spawn_words = _word_count(root.entropy), _word_count(tuple(prefix.spawn_key))
    if run_words is None or spawn_words is None:
        return np.stack([party_seed(root, party, j).generate_state(2, np.uint64) for j in range(n)])
    pool = np.tile(np.asarray(prefix.pool, dtype=np.uint32), (n, 1))
    # hashmix calls before the last word: the pool's first words, the pool's all-pairs mixing, then `size`
    # per remaining word of the prefix's entropy (the run entropy padded to the pool size, the spawn key)
    n_words = max(run_words, size) + spawn_words
    calls = size + size * (size - 1) + (n_words - size) * size
    hash_const = (_INIT_A * pow(_MULT_A, calls, 2**32)) & _MASK32
    index = np.arange(n, dtype=np.uint32)
    for dst in range(size):  # mix(pool[dst], hashmix(i)) for the last word i
        value = index ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_A) & _MASK32
        value = value * np.uint32(hash_const)
        value ^= value >> np.uint32(_XSHIFT)
        mixed = pool[:, dst] * np.uint32(_MIX_MULT_L) - value * np.uint32(_MIX_MULT_R)
        pool[:, dst] = mixed ^ (mixed >> np.uint32(_XSHIFT))
    words = np.empty((n, 4), dtype=np.uint32)  # generate_state(2, uint64): four 32-bit words, pool in cycle
    hash_const = _INIT_B
    for dst in range(4):
        value = pool[:, dst % size] ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_B) & _MASK32
        value = value * np.uint32(hash_const)
        words[:, dst] = value ^ (value >> np.uint32(_XSHIFT))
    keys = np.ascontiguousarray(words.astype("<u4").view("<u8").astype(np.uint64))
    for i in {0, n - 1}:
        if not np.array_equal(keys[i], party_seed(root, party, i).generate_state(2, np.uint64)):
            return np.stack([party_seed(root, party, j).generate_state(2, np.uint64) for j in range(n)])
    return keys


def _word_count(value: Any) -> int | None:
    """How many 32-bit words a ``SeedSequence`` makes of an entropy or spawn-key value (an int: at least one),
    or None for a value of another kind (the keys are then derived one at a time)."""
    if isinstance(value, (int, np.integer)):
        return max(1, (int(value).bit_length() + 31) // 32)
    if isinstance(value, np.ndarray) and value.dtype == np.uint32:
        return value.size
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, np.ndarray)):
        return None
    counts = [_word_count(v) for v in value]
    return None if None in counts else sum(counts)


_DEFAULT_POOL_SIZE = np.random.SeedSequence(0).pool_size


def seed_repr(seed: int | np.random.SeedSequence) -> Any:
    """A JSON value that records a normalized seed exactly (for ``History.config["seed"]``).

    Parameters
    ----------
    seed : SeedSequence or int
        A seed normalized by :func:`check_seed` (a non-negative int is read as
        ``SeedSequence(seed)``).

    Returns
    -------
    int or dict
        The entropy itself (an int, up to 128 bits for OS entropy or a seed
        drawn from a ``Generator``) when ``seed`` is ``SeedSequence(entropy)``
        with no spawn key; otherwise ``{"entropy": int or list of int,
        "spawn_key": list of int}`` (plus ``"pool_size"`` when not the
        default).  :func:`seed_from_repr` inverts it; an int can also be
        passed back as ``seed=`` directly.

    Examples
    --------
    >>> import numpy as np
    >>> seed_repr(np.random.SeedSequence(5))
    5
    >>> seed_repr(np.random.SeedSequence(5, spawn_key=(1, 2)))
    {'entropy': 5, 'spawn_key': [1, 2]}
    """
    if not isinstance(seed, np.random.SeedSequence):
        seed = check_seed(seed)
    entropy = seed.entropy
    entropy = int(entropy) if isinstance(entropy, numbers.Integral) else [int(v) for v in entropy]
    if not seed.spawn_key and isinstance(entropy, int) and seed.pool_size == _DEFAULT_POOL_SIZE:
        return entropy
    out: dict[str, Any] = {"entropy": entropy, "spawn_key": [int(v) for v in seed.spawn_key]}
    if seed.pool_size != _DEFAULT_POOL_SIZE:
        out["pool_size"] = int(seed.pool_size)
    return out


def seed_from_repr(value: Any) -> np.random.SeedSequence:
    """The ``SeedSequence`` recorded by :func:`seed_repr` (e.g. ``History.config["seed"]``).

    Passing it as ``seed=`` reruns the recorded run bit for bit, including
    runs made with ``seed=None`` or a ``Generator``.

    Parameters
    ----------
    value : int or dict
        An output of :func:`seed_repr`, possibly after a JSON round trip
        (entropy written as a decimal string by fedmm 0.1 is accepted).

    Returns
    -------
    numpy.random.SeedSequence

    Examples
    --------
    >>> import numpy as np
    >>> ss = np.random.SeedSequence()               # fresh OS entropy
    >>> seed_from_repr(seed_repr(ss)).entropy == ss.entropy
    True
    """
    if isinstance(value, dict):
        if "entropy" not in value:
            raise ValueError(f"Expected a recorded seed with an 'entropy' field, got keys {sorted(value)}")
        entropy = value["entropy"]
        if isinstance(entropy, str):
            entropy = int(entropy) if entropy.strip().isdigit() else [int(v) for v in entropy.strip("[]").split(",")]
        spawn_key = tuple(int(v) for v in value.get("spawn_key", ()))
        pool_size = int(value.get("pool_size", _DEFAULT_POOL_SIZE))
        return np.random.SeedSequence(entropy, spawn_key=spawn_key, pool_size=pool_size)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return check_seed(value, "value")
    raise TypeError(f"Expected 'value' to be a recorded seed (an int or a dict from seed_repr), "
                    f"got {type(value).__name__}")


def init_generator(seed: int | np.random.SeedSequence) -> np.random.Generator:
    """The generator that draws the initial statistic ``Ŝ_0`` (shared by SA-SSMM, FedMM and the baseline).

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        The run's seed (as normalized by :func:`check_seed`).

    Returns
    -------
    numpy.random.Generator
        The server's stream of the initial draw: every runtime that builds
        ``Ŝ_0`` (in process, Flower) draws the same numbers from it.
    """
    return RoundStream(party_seed(seed, SERVER_PARTY, 1)).at(0)
