# SPDX-License-Identifier: BSD-3-Clause
"""fedmm: federated majorize-minimization.

Clients send the parameters of a *surrogate function* (a statistic ``S``);
the server aggregates them in S-space, projects onto the valid set and
minimizes the aggregated surrogate, ``theta = T(S)``.  See the FedMM paper
(Dieuleveut, Fort, Hegazy, Wai, 2025) and the user guide of the documentation
("Aggregate surrogates, not parameters").
"""
from __future__ import annotations

import os as _os

from fedmm.history import History, RunSet, load

__version__ = "0.1.0"

__all__ = ["History", "RunSet", "__version__", "get_cython_include", "get_include", "get_library_dir", "load"]


_PKG_DIR = _os.path.dirname(_os.path.abspath(__file__))


def _meson_build_dir() -> str | None:
    """Build directory of an editable (meson-python) install, else None.

    In an editable install the package sources stay in ``python/fedmm`` while
    the compiled modules live in the meson build directory; we find it from a
    compiled module's path (``<build>/src/fedmm_core/_quantize*.so``).
    """
    # Located, not imported: fedmm.kernels is the only module that loads compiled code.
    from importlib.util import find_spec

    try:
        spec = find_spec("fedmm._quantize")
    except ImportError:  # pragma: no cover - broken install
        return None
    if spec is None or spec.origin is None:  # pragma: no cover - broken install
        return None
    ext_dir = _os.path.dirname(_os.path.abspath(spec.origin))
    if _os.path.normcase(ext_dir) == _os.path.normcase(_PKG_DIR):
        return None  # regular install: extensions sit in the package
    return _os.path.dirname(_os.path.dirname(ext_dir))


def get_include() -> str:
    """Directory holding ``fedmm_kernels.h`` (the public C API).

    Returns
    -------
    str
        Absolute path; pass it as an include directory when compiling C or
        Cython code that uses the kernels.  Installed package:
        ``<site-packages>/fedmm/include``; editable install: the source
        directory ``src/kernels``.

    Examples
    --------
    >>> import os
    >>> import fedmm
    >>> os.path.isfile(os.path.join(fedmm.get_include(), "fedmm_kernels.h"))
    True
    """
    installed = _os.path.join(_PKG_DIR, "include")
    if _os.path.isfile(_os.path.join(installed, "fedmm_kernels.h")):
        return installed
    source = _os.path.join(_os.path.dirname(_os.path.dirname(_PKG_DIR)), "src", "kernels")
    if _os.path.isfile(_os.path.join(source, "fedmm_kernels.h")):
        return source
    return installed


def get_library_dir() -> str:
    """Directory holding the static library ``libfedmm_kernels.a``.

    Returns
    -------
    str
        Absolute path; link with ``-L<dir> -lfedmm_kernels -lm``.  Installed
        package: ``<site-packages>/fedmm/lib``; editable install: the meson
        build directory ``<build>/src/kernels``.
    """
    installed = _os.path.join(_PKG_DIR, "lib")
    if _os.path.isfile(_os.path.join(installed, "libfedmm_kernels.a")):
        return installed
    build = _meson_build_dir()
    if build is not None:
        return _os.path.join(build, "src", "kernels")
    return installed


def get_cython_include() -> str:
    """Directory to put on Cython's include path for ``from fedmm.fedmm_kernels cimport ...``.

    Returns
    -------
    str
        The directory holding the ``fedmm`` package, where ``fedmm/fedmm_kernels.pxd``
        and the per-family ``fedmm/fedmm_<family>.pxd`` live (installed package:
        site-packages, which Cython also finds through ``sys.path``; editable
        install: the source directory ``python``).
    """
    return _os.path.dirname(_PKG_DIR)
