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

__all__ = ["RoundStream", "derive_seed", "party_seed", "check_seed", "seed_repr", "seed_from_repr",
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
