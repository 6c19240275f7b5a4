# SPDX-License-Identifier: BSD-3-Clause
"""fedmm: federated majorize-minimization.

Clients send the parameters of a *surrogate function* (a statistic ``S``);
the server aggregates them in S-space, projects onto the valid set and
minimizes the aggregated surrogate, ``theta = T(S)``.  See the FedMM paper
(Dieuleveut, Fort, Hegazy, Wai, 2025) and ``shared/DESIGN.md``.
"""
from __future__ import annotations

import os as _os

from fedmm.history import History

__version__ = "0.1.0"

__all__ = ["History", "__version__", "get_include", "get_library_dir"]


def get_include() -> str:
    """Directory holding ``fedmm_kernels.h`` (the public C API).

    Returns
    -------
    str
        Absolute path; pass it as an include directory when compiling C or
        Cython code that uses the kernels.
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


def get_library_dir() -> str:
    """Directory holding the static library ``libfedmm_kernels.a``.

    Returns
    -------
    str
        Absolute path; link with ``-L<dir> -lfedmm_kernels -lm``.
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "lib")
