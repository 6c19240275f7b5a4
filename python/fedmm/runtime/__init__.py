# SPDX-License-Identifier: BSD-3-Clause
"""Runtimes: move the encoded messages of ``fedmm.algorithms`` Server and Client objects.

A runtime knows nothing of the mathematics: it asks the server whom to
contact, delivers its broadcast, collects the clients' bytes and hands them
back.  :class:`LocalRuntime` does this in process on a thread pool.
"""
from fedmm.runtime.local import LocalRuntime

__all__ = ["LocalRuntime"]
