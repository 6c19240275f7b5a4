/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_wire.h -- the self-describing wire format of compressed messages (wire.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_WIRE_H
#define FEDMM_WIRE_H

#include "fedmm_common.h"
#include "fedmm_quantize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- wire format (wire.c) ------------------------------------------------- */
/* Self-describing payloads (docs/wire-format.md): a 32-byte little-endian
 * header (magic "FMMQ", version, scheme, value dtype, norm kind, bits, q,
 * block), then for the quantizers ceil(q/block) norms (float32 or float64)
 * and the codes (sign << (bits-1) | level) packed LSB-first at `bits` bits
 * each, the last byte zero-padded; for the identity the q raw values. */
#define FEDMM_WIRE_MAGIC "FMMQ"
#define FEDMM_WIRE_VERSION 1
#define FEDMM_WIRE_HEADER_NBYTES 32

/* Decoded fixed header of a payload. */
typedef struct fedmm_wire_header {
    int version;      /* byte 4 */
    int scheme;       /* byte 5: FEDMM_SCHEME_* */
    int value_nbytes; /* byte 6: 4 = float32, 8 = float64 norms/values */
    int norm;         /* byte 7: FEDMM_NORM_* */
    int bits;         /* byte 8: bits per coordinate (0 for identity) */
    uint64_t q;       /* bytes 16..23: vector length */
    uint64_t block;   /* bytes 24..31: block size (0 for identity) */
} fedmm_wire_header_t;

/* Exact size in bytes of the payload of spec for q values with
 * value_nbytes (4 or 8) bytes per norm/value; 0 if they are invalid (as the
 * decoder would reject them: fedmm_quantizer_check, q <= 2^58).
 * Identity: 32 + q*value_nbytes; quantizers: 32 +
 * ceil(q/block)*value_nbytes + ceil(q*bits/8). */
uint64_t fedmm_wire_nbytes(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes);

/* Identity payload: header + the q raw values (little-endian).
 * nbytes == fedmm_wire_nbytes(identity spec, q, 8 or 4); FEDMM_ENONFINITE
 * on NaN/inf in x. */
int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes);
int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes);

/* Validate the header of untrusted bytes payload[0 .. nbytes) and that
 * nbytes is exactly the size it announces.  FEDMM_EFORMAT with *reason (a
 * static string, if reason != NULL) when malformed. */
int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                           fedmm_wire_header_t *hdr, const char **reason);

/* Decode any payload into out[0 .. out_len), out_len == q (float64).
 * Validates the header, the size, every norm (finite, >= 0), the padding
 * bits, that every decoded value is finite (identity: no NaN/inf value;
 * quantizers: no level * (N / s) overflows, possible only for a norm within
 * a rounding of DBL_MAX) before writing anything: out is left untouched on
 * any error.  Never reads outside payload[0 .. nbytes).  Decoded value:
 * (-1)^sign * (level * (N / s)), evaluated in double. */
int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                      size_t out_len, const char **reason);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_WIRE_H */
