# SPDX-License-Identifier: BSD-3-Clause
# Included by the extension modules that draw from a NumPy generator: the
# bitgen_t behind a numpy.random.BitGenerator (draw under its lock).
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

# The cast below is sound only if fedmm_bitgen_t has NumPy's bitgen_t layout:
# this header asserts it at compile time (size, and offset, size and type of
# every field), so a mismatch fails the build instead of corrupting memory.
cdef extern from "bitgen_check.h":
    pass


cdef fedmm_bitgen_t *_bitgen(object bit_generator) except NULL:
    capsule = bit_generator.capsule
    if not PyCapsule_IsValid(capsule, "BitGenerator"):
        raise TypeError("Expected 'rng' backed by a NumPy BitGenerator capsule")
    return <fedmm_bitgen_t *>PyCapsule_GetPointer(capsule, "BitGenerator")
