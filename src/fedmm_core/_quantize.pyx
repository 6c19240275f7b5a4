# SPDX-License-Identifier: BSD-3-Clause
"""Cython wrappers of the compression kernels (``quantize.c``, ``wire.c``).

Private module: the checked public faces are :mod:`fedmm.kernels` and
:mod:`fedmm.compression`.  Inputs must already be 1-D contiguous float32 or
float64 arrays (the Python layer copies strided or non-native-order input
once); outputs are allocated here with the GIL, and every kernel runs
without it -- random kernels inside ``with rng.bit_generator.lock, nogil:``.
A compressor is passed as the four fields of the C ``fedmm_quantizer_t``,
``scheme, bits, norm, block`` in that order (the tuple
``Compressor.quantizer_spec(q)`` returns).
"""
import numpy as np

cimport numpy as cnp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint64_t

# The public declarations, one .pxd per kernel family (python/fedmm/fedmm_<family>.pxd,
# installed with the package; fedmm.fedmm_kernels cimports them all).
from fedmm.fedmm_common cimport FEDMM_ENONFINITE, FEDMM_OK, fedmm_bitgen_t
from fedmm.fedmm_quantize cimport (
    fedmm_encode_f32,
    fedmm_encode_f64,
    fedmm_quantize_f32,
    fedmm_quantize_f64,
    fedmm_quantizer_t,
)
from fedmm.fedmm_wire cimport (
    fedmm_identity_encode_f32,
    fedmm_identity_encode_f64,
    fedmm_wire_decode,
    fedmm_wire_header_t,
    fedmm_wire_nbytes,
    fedmm_wire_read_header,
)

cnp.import_array()

SCHEME_IDENTITY = 0
SCHEME_BLOCKP = 1
SCHEME_DITHER = 2


include "bitgen.pxi"
include "status.pxi"


cdef inline bint _is_vector(object x) noexcept:
    """``x`` is a non-empty, C-contiguous, native float32/float64 ndarray of one dimension.

    Checked through the C API: per-call overhead matters for small messages.
    """
    if type(x) is not np.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int t = cnp.PyArray_TYPE(a)
    return (cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_DIM(a, 0) > 0 and cnp.PyArray_IS_C_CONTIGUOUS(a)
            and cnp.PyArray_ISNOTSWAPPED(a) and (t == cnp.NPY_DOUBLE or t == cnp.NPY_FLOAT))


def ready_vector(object x):
    """``x`` itself if the kernels can read it as it is (see ``_is_vector``), else None."""
    return x if _is_vector(x) else None


cdef const void *_vector_data(object x) except NULL:
    if not _is_vector(x):
        raise ValueError("Expected 'x' to be a non-empty contiguous 1-D native float32 or float64 array")
    return cnp.PyArray_DATA(<cnp.ndarray>x)


cdef dict _MESSAGES = {FEDMM_ENONFINITE: "Expected 'x' to contain only finite values (no NaN or inf)"}


cdef int _raise(int status, str what, object x=None) except -1:
    if status != FEDMM_ENONFINITE and x is not None and np.abs(x).max() > 2.0**1023:
        raise ValueError("Expected 'x' with entries of magnitude at most 2**1023 (about 9e307)")
    return check_status(status, f"{what} failed", _MESSAGES)


cdef inline fedmm_quantizer_t _spec(int scheme, int bits, int norm, Py_ssize_t block) noexcept:
    """The C quantizer spec (a negative block becomes an invalid 0 for a quantizer)."""
    cdef fedmm_quantizer_t spec
    spec.scheme = scheme
    spec.bits = bits
    spec.norm = norm
    spec.block = <size_t>block if block > 0 else 0
    return spec


def payload_nbytes(int scheme, int bits, int norm, Py_ssize_t block, uint64_t q, int value_nbytes):
    """Exact payload size in bytes (0 when the fields are invalid)."""
    cdef fedmm_quantizer_t spec = _spec(scheme, bits, norm, block)
    return fedmm_wire_nbytes(&spec, q, value_nbytes)


def quantize(object x, int scheme, int bits, int norm, Py_ssize_t block, object generator):
    """Fused quantize-and-dequantize of contiguous 1-D float32/float64 ``x``.

    Returns a new float64 array of the same length.
    """
    cdef const void *src = _vector_data(x)
    cdef bint f32 = cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT
    cdef Py_ssize_t q = cnp.PyArray_DIM(<cnp.ndarray>x, 0)
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(1, <cnp.npy_intp *>&q, cnp.NPY_DOUBLE, 0)
    cdef double *dst = <double *>cnp.PyArray_DATA(out)
    cdef fedmm_quantizer_t spec = _spec(scheme, bits, norm, block)
    bit_generator = generator.bit_generator
    cdef fedmm_bitgen_t *rng = _bitgen(bit_generator)
    cdef int status
    with bit_generator.lock, nogil:
        if f32:
            status = fedmm_quantize_f32(<const float *>src, q, &spec, rng, dst)
        else:
            status = fedmm_quantize_f64(<const double *>src, q, &spec, rng, dst)
    if status != FEDMM_OK:
        _raise(status, "quantize", x)
    return out


def quantize_rows(const double[:, ::1] X, int scheme, int bits, int norm, Py_ssize_t block,
                  list generators):
    """Row ``k`` of the result is ``quantize(X[k], scheme, bits, norm, block, generators[k])``.

    One call for several clients' float64 messages (each row drawn from its
    own generator, under that generator's lock); returns a new (m, q) array.
    """
    cdef Py_ssize_t m = X.shape[0], q = X.shape[1], k
    if len(generators) != m:
        raise ValueError(f"Expected one generator per row ({m}), got {len(generators)}")
    cdef cnp.ndarray out = np.empty((m, q), dtype=np.float64)
    if q == 0:
        return out
    cdef double[:, ::1] out_v = out
    cdef fedmm_quantizer_t spec = _spec(scheme, bits, norm, block)
    cdef fedmm_bitgen_t *rng
    cdef int status
    for k in range(m):
        bit_generator = generators[k].bit_generator
        rng = _bitgen(bit_generator)
        with bit_generator.lock, nogil:
            status = fedmm_quantize_f64(&X[k, 0], q, &spec, rng, &out_v[k, 0])
        if status != FEDMM_OK:
            _raise(status, "quantize", np.asarray(X[k]))
    return out

def encode(object x, int scheme, int bits, int norm, Py_ssize_t block, object generator):
    """Quantize contiguous 1-D float32/float64 ``x`` and return the payload bytes."""
    cdef const void *src = _vector_data(x)
    cdef bint f32 = cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT
    cdef Py_ssize_t q = cnp.PyArray_DIM(<cnp.ndarray>x, 0)
    cdef fedmm_quantizer_t spec = _spec(scheme, bits, norm, block)
    cdef uint64_t nbytes = fedmm_wire_nbytes(&spec, q, 4 if f32 else 8)
    if nbytes == 0:
        raise ValueError(
            f"invalid compressor parameters: scheme={scheme}, q={q}, block={block}, "
            f"bits={bits}, norm={norm}"
        )
    # written in place: the kernel fills every byte
    cdef bytes payload = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>nbytes)
    cdef uint8_t *dst = <uint8_t *>PyBytes_AS_STRING(payload)
    bit_generator = generator.bit_generator
    cdef fedmm_bitgen_t *rng = _bitgen(bit_generator)
    cdef int status
    with bit_generator.lock, nogil:
        if f32:
            status = fedmm_encode_f32(<const float *>src, q, &spec, rng, dst, nbytes)
        else:
            status = fedmm_encode_f64(<const double *>src, q, &spec, rng, dst, nbytes)
    if status != FEDMM_OK:
        _raise(status, "encode", x)
    return payload


def identity_encode(object x):
    """Identity payload of contiguous 1-D float32/float64 ``x``."""
    cdef const void *src = _vector_data(x)
    cdef bint f32 = cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT
    cdef Py_ssize_t q = cnp.PyArray_DIM(<cnp.ndarray>x, 0)
    cdef fedmm_quantizer_t spec = _spec(SCHEME_IDENTITY, 0, 0, 0)
    cdef uint64_t nbytes = fedmm_wire_nbytes(&spec, q, 4 if f32 else 8)
    if nbytes == 0:
        raise ValueError(f"invalid identity payload length q={q}")
    cdef bytes payload = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>nbytes)
    cdef uint8_t *dst = <uint8_t *>PyBytes_AS_STRING(payload)
    cdef int status
    with nogil:
        if f32:
            status = fedmm_identity_encode_f32(<const float *>src, q, dst, nbytes)
        else:
            status = fedmm_identity_encode_f64(<const double *>src, q, dst, nbytes)
    if status != FEDMM_OK:
        _raise(status, "identity encode")
    return payload


cdef fedmm_wire_header_t _checked_header(const uint8_t[::1] payload) except *:
    """The payload's header, validated by the C reader (``ValueError`` with its reason)."""
    cdef fedmm_wire_header_t h
    cdef const char *reason = NULL
    cdef size_t n = payload.shape[0]
    cdef uint8_t empty = 0
    cdef const uint8_t *src = &empty  # never dereferenced when n == 0
    if n > 0:
        src = &payload[0]
    if fedmm_wire_read_header(src, n, &h, &reason) != FEDMM_OK:
        raise ValueError(f"malformed payload: {reason.decode()}")
    return h


def read_header(const uint8_t[::1] payload):
    """Validated header fields as a dict (``ValueError`` with the reason if malformed)."""
    cdef fedmm_wire_header_t h = _checked_header(payload)
    return {
        "version": h.version, "scheme": h.scheme, "value_nbytes": h.value_nbytes,
        "norm": h.norm, "bits": h.bits, "q": h.q, "block": h.block,
    }


def decode(const uint8_t[::1] payload, out=None):
    """Decode untrusted payload bytes into a float64 vector (``out`` if given)."""
    cdef fedmm_wire_header_t h = _checked_header(payload)
    cdef const char *reason = NULL
    cdef size_t n = payload.shape[0]  # > 0: a valid header was read
    cdef const uint8_t *src = &payload[0]
    cdef int status
    if out is None:
        out = np.empty(<Py_ssize_t>h.q, dtype=np.float64)
    elif not (isinstance(out, np.ndarray) and out.dtype == np.float64 and out.ndim == 1
              and out.flags.c_contiguous and out.flags.writeable and <uint64_t>out.shape[0] == h.q):
        raise ValueError(
            f"Expected 'out' to be a writeable contiguous float64 array of shape ({h.q},)"
        )
    cdef double[::1] out_v = out
    with nogil:
        status = fedmm_wire_decode(src, n, &out_v[0], out_v.shape[0], &reason)
    if status != FEDMM_OK:
        raise ValueError(f"malformed payload: {reason.decode()}")
    return out
