# SPDX-License-Identifier: BSD-3-Clause
"""Models whose Python methods run their own compiled callbacks (one implementation for both backends).

A model with this mixin builds one :class:`fedmm.kernels.CompiledModel` from
its constants (:meth:`CompiledCallbacks._build_compiled`), keeps it while the
constants it was built from (:meth:`CompiledCallbacks._compiled_key`) stay the
same, and evaluates its statistic, projection and ``T`` with it.  The
compiled round engine runs the very same callbacks, so the Python and the
compiled backends agree bit for bit.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CompiledCallbacks", "array_key"]


def array_key(value: Any) -> Any:
    """A hashable, exact fingerprint of an optional float64 array (its shape and bytes)."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float64)
    return arr.shape, arr.tobytes()


class CompiledCallbacks:
    """Mixin of the models that evaluate themselves with their compiled callbacks."""

    def _compiled_key(self) -> Any:
        """The constants the compiled model is built from (any change rebuilds it)."""
        raise NotImplementedError

    def _build_compiled(self) -> Any:
        """A new :class:`fedmm.kernels.CompiledModel` for the current constants."""
        raise NotImplementedError

    def _kernel(self) -> Any:
        """The cached compiled model of the current constants (rebuilt when they changed)."""
        key = self._compiled_key()
        cache = self.__dict__.get("_compiled_cache")
        if cache is not None and cache[0] == key:
            return cache[1]
        compiled = self._build_compiled()
        # one tuple assignment: a concurrent reader sees the old pair or the new one
        self.__dict__["_compiled_cache"] = (key, compiled)
        return compiled

    def __getstate__(self) -> dict:
        # the compiled model holds C pointers: it is rebuilt after unpickling, not pickled
        state = self.__dict__.copy()
        state.pop("_compiled_cache", None)
        return state
