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

import numpy as np

from fedmm import _rounds

__all__ = ["RoundStream", "party_seed", "check_seed", "seed_repr", "init_generator"]

SERVER_PARTY = 0
CLIENT_PARTY = 1


def party_seed(seed: int | np.random.SeedSequence, party: int, index: int = 0) -> np.random.SeedSequence:
    """The ``SeedSequence`` of one party, derived without mutating ``seed``."""
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (party, index))


class RoundStream:
    """A Philox generator that is reset to the start of round ``t``'s block on demand.

    Not shared between threads: one instance per party, used by one thread at a time.
    """

    def __init__(self, seed_seq: np.random.SeedSequence) -> None:
        self._setup(seed_seq.generate_state(2, np.uint64))

    def __getstate__(self) -> dict:
        return {"key": self._key}

    def __setstate__(self, state: dict) -> None:
        # Pickled copies (e.g. Ray's zero-copy arrays) may be read-only: rebuild writable buffers.
        self._setup(np.array(state["key"], dtype=np.uint64, copy=True))

    def _setup(self, key: np.ndarray) -> None:
        self._key = key
        # The NumPy generator is built at the first at(): compiled rounds only need the key.
        self._bitgen: np.random.Philox | None = None
        self.generator: np.random.Generator | None = None
        # Reused state dict: only the round word of the counter changes.
        self._state = {
            "bit_generator": "Philox",
            "state": {"counter": np.zeros(4, dtype=np.uint64), "key": self._key},
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }

    @property
    def key(self) -> np.ndarray:
        """The 128-bit Philox key as two uint64 (the compiled rounds seed their own replica with it)."""
        return self._key

    def sample(self, t: int, n: int, b: int) -> np.ndarray:
        """``b`` distinct indices of ``range(n)``: the first draw of round ``t``'s stream.

        Equal to ``fedmm.kernels.sample_without_replacement(n, b, self.at(t))``,
        drawn from the compiled replica of the stream (no generator state to set).
        """
        return _rounds.philox_sample_without_replacement(self._key, t, n, b)

    def at(self, t: int) -> np.random.Generator:
        """The generator positioned at the start of round ``t``'s stream (counter ``(0, t, 0, 0)``)."""
        if self._bitgen is None:
            self._bitgen = np.random.Philox(key=self._key)
            self.generator = np.random.Generator(self._bitgen)
        counter = self._state["state"]["counter"]
        counter[:] = 0
        counter[1] = t
        self._bitgen.state = self._state
        return self.generator

def check_seed(seed: object, name: str = "seed") -> int | np.random.SeedSequence:
    """Accept a non-negative int or a ``SeedSequence`` (the root of all run randomness)."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and int(seed) >= 0:
        return int(seed)
    raise TypeError(f"Expected '{name}' to be a non-negative int or a numpy.random.SeedSequence, got {seed!r}")


def seed_repr(seed: int | np.random.SeedSequence) -> object:
    """A JSON-friendly description of a seed for History.config."""
    if isinstance(seed, np.random.SeedSequence):
        return {"entropy": str(seed.entropy), "spawn_key": list(seed.spawn_key)}
    return seed


def init_generator(seed: int | np.random.SeedSequence) -> np.random.Generator:
    """The generator that draws the initial statistic ``Ŝ_0`` (shared by SA-SSMM, FedMM and the baseline)."""
    return RoundStream(party_seed(seed, SERVER_PARTY, 1)).at(0)
