# SPDX-License-Identifier: BSD-3-Clause
"""Refuse allocations that cannot fit in memory up front, with the size named.

A request for more bytes than the machine's physical memory (or one whose size
overflows) would otherwise allocate until the operating system kills the
process, or fail deep inside NumPy without saying which argument was too large.
"""
from __future__ import annotations

import os

__all__ = ["physical_memory", "check_allocation"]


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the platform does not say."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return int(pages) * int(page_size)


def _human(nbytes: int) -> str:
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def check_allocation(nbytes: int, what: str) -> int:
    """Raise ``MemoryError`` naming ``what`` and the size if ``nbytes`` cannot fit in memory.

    ``nbytes`` is computed by the caller with Python integers (no overflow);
    the limit is the machine's physical memory (``2**63 − 1`` bytes where it is
    unknown).  Returns ``nbytes``.
    """
    limit = physical_memory()
    limit = 2**63 - 1 if limit is None else min(limit, 2**63 - 1)
    if nbytes > limit:
        raise MemoryError(f"{what} would need {nbytes} bytes ({_human(nbytes)}), more than this machine's "
                          f"{limit} bytes ({_human(limit)}) of memory")
    return nbytes
