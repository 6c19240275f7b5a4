# SPDX-License-Identifier: BSD-3-Clause
"""Runtimes: move the encoded messages of ``fedmm.algorithms`` Server and Client objects.

A runtime knows nothing of the mathematics: it asks the server whom to
contact, delivers its broadcast, collects the clients' bytes and hands them
back.  :class:`LocalRuntime` does this in process on a thread pool;
:class:`RayRuntime` shards the clients over Ray actors (Ray is imported on
first use: ``pip install 'fedmm[ray]'``).  Flower deployments use the
submodule :mod:`fedmm.runtime.flower` (``pip install 'fedmm[flower]'``), which
is not imported here: ``import fedmm.runtime.flower`` (or ``from fedmm.runtime
import flower``) imports Flower, and raises an ``ImportError`` naming the extra
when it is missing.

Every runtime satisfies :class:`fedmm.protocols.Runtime`.
"""
from fedmm.runtime.local import LocalRuntime
from fedmm.runtime.ray import RayRuntime

__all__ = ["LocalRuntime", "RayRuntime"]
