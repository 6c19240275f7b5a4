/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * wire.c -- the wire format of compressed messages (docs/wire-format.md).
 *
 * A payload is a 32-byte little-endian header (magic "FMMQ", format version,
 * scheme, value dtype, norm kind, bits per coordinate, length q, block size),
 * then for the quantizers ceil(q/block) block norms (float32 or float64) and
 * the codes (sign << (bits-1) | level) packed LSB-first at `bits` bits each,
 * or for the identity the q raw values.  This file writes headers and
 * identity payloads, packs codes, and reads, validates and decodes untrusted
 * payloads.  The quantizer arithmetic (norms, random draws, levels) is in
 * quantize.c, whose fused encoder writes payloads through the helpers
 * declared in internal.h.
 */
/* No FMA contraction whatever the command line says (the decoded values are
 * part of the format: level * (N / s), one rounding each); -O3 as in
 * quantize.c for the unpacking loops. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "fedmm_kernels.h"
#include "internal.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* sizes and headers                                                         */

uint64_t fedmm_wire_nbytes(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes)
{
    /* q <= 2^58 (checked there) keeps every product below 2^64 */
    if ((value_nbytes != 4 && value_nbytes != 8) || !fedmm__quantizer_valid(spec, q)) return 0;
    if (spec->scheme == FEDMM_SCHEME_IDENTITY)
        return FEDMM_WIRE_HEADER_NBYTES + q * (uint64_t)value_nbytes;
    uint64_t block = (uint64_t)spec->block;
    uint64_t m = q / block + (q % block != 0);
    return FEDMM_WIRE_HEADER_NBYTES + m * (uint64_t)value_nbytes
           + (q * (uint64_t)spec->bits + 7) / 8;
}

static void write_header(uint8_t *p, const fedmm_quantizer_t *spec, int value_nbytes, uint64_t q)
{
    memset(p, 0, FEDMM_WIRE_HEADER_NBYTES);
    memcpy(p, FEDMM_WIRE_MAGIC, 4);
    p[4] = FEDMM_WIRE_VERSION;
    p[5] = (uint8_t)spec->scheme;
    p[6] = (uint8_t)value_nbytes;
    p[7] = (uint8_t)spec->norm;
    p[8] = (uint8_t)spec->bits;
    fedmm__store_u64_le(p + 16, q);
    fedmm__store_u64_le(p + 24, (uint64_t)spec->block);
}

int fedmm__wire_begin_payload(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes,
                              uint8_t *payload, size_t nbytes, uint8_t **norms,
                              uint8_t **packed)
{
    if (spec->scheme != FEDMM_SCHEME_BLOCKP && spec->scheme != FEDMM_SCHEME_DITHER)
        return FEDMM_EINVAL;
    uint64_t want = fedmm_wire_nbytes(spec, q, value_nbytes);
    if (want == 0 || want != (uint64_t)nbytes) return FEDMM_EINVAL;
    size_t nblocks = (size_t)(q / spec->block + (q % spec->block != 0));
    *norms = payload + FEDMM_WIRE_HEADER_NBYTES;
    *packed = *norms + nblocks * (size_t)value_nbytes;
    write_header(payload, spec, value_nbytes, q);
    memset(*packed, 0, (size_t)(payload + nbytes - *packed));
    return FEDMM_OK;
}

/* ------------------------------------------------------------------------ */
/* identity payloads                                                         */

static const fedmm_quantizer_t IDENTITY = {FEDMM_SCHEME_IDENTITY, 0, FEDMM_NORM_NONE, 0};

int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes)
{
    uint64_t want = fedmm_wire_nbytes(&IDENTITY, q, 8);
    if (x == NULL || payload == NULL || want == 0 || want != (uint64_t)nbytes) return FEDMM_EINVAL;
    for (size_t j = 0; j < q; ++j)
        if (!isfinite(x[j])) return FEDMM_ENONFINITE;
    write_header(payload, &IDENTITY, 8, q);
    for (size_t j = 0; j < q; ++j)
        fedmm__store_f64_le(payload + FEDMM_WIRE_HEADER_NBYTES + 8 * j, x[j]);
    return FEDMM_OK;
}

int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes)
{
    uint64_t want = fedmm_wire_nbytes(&IDENTITY, q, 4);
    if (x == NULL || payload == NULL || want == 0 || want != (uint64_t)nbytes) return FEDMM_EINVAL;
    for (size_t j = 0; j < q; ++j)
        if (!isfinite(x[j])) return FEDMM_ENONFINITE;
    write_header(payload, &IDENTITY, 4, q);
    for (size_t j = 0; j < q; ++j)
        fedmm__store_f32_le(payload + FEDMM_WIRE_HEADER_NBYTES + 4 * j, x[j]);
    return FEDMM_OK;
}

/* ------------------------------------------------------------------------ */
/* packing                                                                   */

void fedmm__wire_pack_codes(uint8_t *dst, uint64_t pos, const uint16_t *codes, size_t n,
                            int bits)
{
    size_t j = 0;
    if ((pos & 7) == 0) {
        uint8_t *p = dst + (pos >> 3);
        switch (bits) {
        case 2:
            for (; j + 4 <= n; j += 4)
                *p++ = (uint8_t)(codes[j] | codes[j + 1] << 2 | codes[j + 2] << 4
                                 | codes[j + 3] << 6);
            break;
        case 4:
            for (; j + 2 <= n; j += 2) *p++ = (uint8_t)(codes[j] | codes[j + 1] << 4);
            break;
        case 8:
            for (; j < n; ++j) *p++ = (uint8_t)codes[j];
            break;
        case 16:
            for (; j < n; ++j) {
                p[0] = (uint8_t)codes[j];
                p[1] = (uint8_t)(codes[j] >> 8);
                p += 2;
            }
            break;
        default:
            break;
        }
    }
    for (; j < n; ++j)
        fedmm__wire_put_bits(dst, pos + (uint64_t)j * (uint64_t)bits, codes[j], bits);
}

/* ------------------------------------------------------------------------ */
/* reading and decoding                                                      */

/* 1 when the host stores doubles little-endian, as the wire does: identity
 * payloads are then validated and copied with whole-word loads */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && \
    (!defined(__FLOAT_WORD_ORDER__) || __FLOAT_WORD_ORDER__ == __ORDER_LITTLE_ENDIAN__)
#define FEDMM__WIRE_HOST_LE 1
#else
#define FEDMM__WIRE_HOST_LE 0
#endif

#define FAIL(msg)                     \
    do {                              \
        if (reason) *reason = (msg);  \
        return FEDMM_EFORMAT;         \
    } while (0)

int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                           fedmm_wire_header_t *hdr, const char **reason)
{
    if (reason) *reason = "ok";
    if (payload == NULL || hdr == NULL) {
        if (reason) *reason = "NULL argument";
        return FEDMM_EINVAL;
    }
    if (nbytes < FEDMM_WIRE_HEADER_NBYTES) FAIL("payload shorter than the 32-byte header");
    if (memcmp(payload, FEDMM_WIRE_MAGIC, 4) != 0) FAIL("bad magic (expected \"FMMQ\")");
    if (payload[4] != FEDMM_WIRE_VERSION) FAIL("unsupported format version (expected 1)");
    for (int k = 9; k < 16; ++k)
        if (payload[k] != 0) FAIL("reserved header bytes 9..15 are not zero");
    hdr->version = payload[4];
    hdr->scheme = payload[5];
    hdr->value_nbytes = payload[6];
    hdr->norm = payload[7];
    hdr->bits = payload[8];
    hdr->q = fedmm__load_u64_le(payload + 16);
    hdr->block = fedmm__load_u64_le(payload + 24);
    if (hdr->scheme > FEDMM_SCHEME_DITHER) FAIL("unknown scheme (expected 0, 1 or 2)");
    if (hdr->value_nbytes != 4 && hdr->value_nbytes != 8)
        FAIL("bad value dtype code (expected 4 = float32 or 8 = float64)");
    if (hdr->q < 1) FAIL("length q is zero");
    if (hdr->scheme == FEDMM_SCHEME_IDENTITY) {
        if (hdr->norm != FEDMM_NORM_NONE || hdr->bits != 0 || hdr->block != 0)
            FAIL("identity payload must have norm kind 0, bits 0 and block size 0");
    } else {
        if (hdr->scheme == FEDMM_SCHEME_BLOCKP && hdr->bits != 2)
            FAIL("block-p payload must have bits = 2");
        if (hdr->bits < 2 || hdr->bits > 16) FAIL("bits per coordinate outside 2..16");
        if (hdr->norm != FEDMM_NORM_L2 && hdr->norm != FEDMM_NORM_LINF)
            FAIL("bad norm kind (expected 1 = L2 or 2 = Linf)");
        if (hdr->block < 1 || hdr->block > hdr->q) FAIL("block size outside 1..q");
    }
    if (hdr->q > FEDMM__WIRE_MAX_Q) FAIL("length q too large");
    if ((uint64_t)(size_t)hdr->q != hdr->q) FAIL("length q does not fit in memory");
    /* block <= q <= 2^58 here, so it fits in the size_t of the spec */
    const fedmm_quantizer_t spec = {hdr->scheme, hdr->bits, hdr->norm, (size_t)hdr->block};
    uint64_t want = fedmm_wire_nbytes(&spec, hdr->q, hdr->value_nbytes);
    if (want == 0) FAIL("inconsistent header");
    if ((uint64_t)nbytes != want) FAIL("payload size does not match its header");
    return FEDMM_OK;
}

/* signed level of each code packed in one byte, for the aligned fast paths:
 * value = LUT entry * scale reproduces fedmm__wire_code_value() exactly
 * ((-k) * s == -(k * s) in IEEE arithmetic; -0.0 for a sign bit on level 0). */
#define L2V(c) (((c) & 1) ? (((c) & 2) ? -1.0 : 1.0) : (((c) & 2) ? -0.0 : 0.0))
#define E2(b) {L2V((b) & 3), L2V(((b) >> 2) & 3), L2V(((b) >> 4) & 3), L2V(((b) >> 6) & 3)}
#define L4V(c) (((c) & 8) ? -(double)((c) & 7) : (double)((c) & 7))
#define E4(b) {L4V((b) & 15), L4V(((b) >> 4) & 15)}
#define L8V(b) (((b) & 128) ? -(double)((b) & 127) : (double)((b) & 127))

static const double LUT2[256][4] = {R256(E2)};
static const double LUT4[256][2] = {R256(E4)};
static const double LUT8[256] = {R256(L8V)};

static void unpack_block(const uint8_t *src, uint64_t pos, size_t n, int bits,
                         double scale, double *out)
{
    size_t j = 0;
    if ((pos & 7) == 0) {
        const uint8_t *p = src + (pos >> 3);
        switch (bits) {
        case 2:
            for (; j + 4 <= n; j += 4, ++p) {
                const double *e = LUT2[*p];
                out[j] = e[0] * scale;
                out[j + 1] = e[1] * scale;
                out[j + 2] = e[2] * scale;
                out[j + 3] = e[3] * scale;
            }
            break;
        case 4:
            for (; j + 2 <= n; j += 2, ++p) {
                const double *e = LUT4[*p];
                out[j] = e[0] * scale;
                out[j + 1] = e[1] * scale;
            }
            break;
        case 8:
            for (; j < n; ++j) out[j] = LUT8[p[j]] * scale;
            break;
        case 16:
            for (; j < n; ++j, p += 2)
                out[j] = fedmm__wire_code_value((uint32_t)p[0] | (uint32_t)p[1] << 8, 16, scale);
            break;
        default:
            break;
        }
    }
    for (; j < n; ++j)
        out[j] = fedmm__wire_code_value(fedmm__wire_get_bits(src, pos + (uint64_t)j * bits, bits),
                                        bits, scale);
}

int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                      size_t out_len, const char **reason)
{
    fedmm_wire_header_t h;
    int st = fedmm_wire_read_header(payload, nbytes, &h, reason);
    if (st != FEDMM_OK) return st;
    if (out == NULL || (uint64_t)out_len != h.q) {
        if (reason) *reason = "output length does not match q";
        return FEDMM_EINVAL;
    }
    const size_t q = (size_t)h.q;
    const int vb = h.value_nbytes;
    const uint8_t *body = payload + FEDMM_WIRE_HEADER_NBYTES;
    if (h.scheme == FEDMM_SCHEME_IDENTITY) {
        /* validate every value before writing any output: a value is NaN or
         * inf iff its exponent bits are all ones (one vectorizable pass) */
        int bad = 0;
        if (vb == 8) {
            const uint64_t exp = UINT64_C(0x7ff0000000000000);
#if FEDMM__WIRE_HOST_LE
            for (size_t j = 0; j < q; ++j) {
                uint64_t v;
                memcpy(&v, body + 8 * j, 8); /* one load; host order == wire order */
                bad |= (~v & exp) == 0;
            }
#else
            for (size_t j = 0; j < q; ++j) bad |= (~fedmm__load_u64_le(body + 8 * j) & exp) == 0;
#endif
        } else {
            for (size_t j = 0; j < q; ++j) {
                const uint8_t *v = body + 4 * j;
                const uint32_t w = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
                                   (uint32_t)v[3] << 24;
                bad |= (~w & UINT32_C(0x7f800000)) == 0;
            }
        }
        if (bad) FAIL("identity payload holds a non-finite value (NaN or inf)");
        if (vb == 8) {
#if FEDMM__WIRE_HOST_LE
            memcpy(out, body, q * 8);
#else
            for (size_t j = 0; j < q; ++j) out[j] = fedmm__load_f64_le(body + 8 * j);
#endif
        } else {
            for (size_t j = 0; j < q; ++j) out[j] = (double)fedmm__load_f32_le(body + 4 * j);
        }
        return FEDMM_OK;
    }
    const size_t block = (size_t)h.block;
    const int bits = h.bits;
    const size_t nblocks = q / block + (q % block != 0);
    const uint8_t *packed = body + nblocks * (size_t)vb;
    const double s = (double)((1 << (bits - 1)) - 1);
    /* validate everything before writing any output */
    uint64_t total_bits = (uint64_t)q * (uint64_t)bits;
    if (total_bits % 8 != 0) {
        uint8_t last = packed[total_bits / 8];
        if (last >> (total_bits % 8)) FAIL("padding bits of the last byte are not zero");
    }
    for (size_t b = 0; b < nblocks; ++b) {
        double nrm = vb == 8 ? fedmm__load_f64_le(body + 8 * b)
                             : (double)fedmm__load_f32_le(body + 4 * b);
        /* N <= 2^1023: level * (N / s) <= N (1 + 2^-52) < DBL_MAX, no level
         * can overflow (the usual case, one comparison) */
        if (nrm <= 0x1p1023 && !signbit(nrm)) continue;
        if (!isfinite(nrm)) FAIL("a block norm is not finite (NaN or inf)");
        if (signbit(nrm)) FAIL("a block norm is negative");
        const double scale = nrm / s;
        if (isfinite(s * scale)) continue;
        /* a norm within a rounding of DBL_MAX: the largest level whose value
         * level * scale is finite, then every code of the block against it */
        uint32_t safe = (uint32_t)s;
        while (safe > 0 && !isfinite((double)safe * scale)) --safe;
        const uint32_t mask = (1u << (bits - 1)) - 1u;
        size_t start = b * block;
        size_t len = q - start < block ? q - start : block;
        for (size_t j = 0; j < len; ++j) {
            uint32_t code = fedmm__wire_get_bits(packed, (uint64_t)(start + j) * (uint64_t)bits, bits);
            if ((code & mask) > safe)
                FAIL("a decoded value overflows to inf (block norm too large for its level)");
        }
    }
    for (size_t b = 0; b < nblocks; ++b) {
        double nrm = vb == 8 ? fedmm__load_f64_le(body + 8 * b)
                             : (double)fedmm__load_f32_le(body + 4 * b);
        size_t start = b * block;
        size_t len = q - start < block ? q - start : block;
        unpack_block(packed, (uint64_t)start * (uint64_t)bits, len, bits, nrm / s, out + start);
    }
    return FEDMM_OK;
}
