# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of the public C API in ``fedmm_kernels.h``.

Downstream Cython code writes ``from fedmm.fedmm_kernels cimport ...`` and
compiles with ``include_dirs=[fedmm.get_include()]``, linking
``fedmm.get_library_dir()/libfedmm_kernels.a``.

Every kernel family has its own ``.pxd`` over its own header (``fedmm_quantize.pxd``
over ``fedmm_quantize.h``, ...); this module cimports them all, so that
``from fedmm.fedmm_kernels cimport X`` and ``from fedmm.fedmm_<family> cimport X``
name the same declaration.
"""
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from fedmm.fedmm_common cimport *
from fedmm.fedmm_blas cimport *
from fedmm.fedmm_quantize cimport *
from fedmm.fedmm_wire cimport *
from fedmm.fedmm_lasso cimport *
from fedmm.fedmm_random cimport *
from fedmm.fedmm_linalg cimport *
from fedmm.fedmm_model cimport *
from fedmm.fedmm_engine cimport *
from fedmm.fedmm_pool cimport *
from fedmm.fedmm_models cimport *
from fedmm.fedmm_nonsmooth cimport *
