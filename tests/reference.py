# SPDX-License-Identifier: BSD-3-Clause
"""Independent NumPy/SciPy reference implementations used by the tests.

One labeled section per kernel family.  Nothing here imports fedmm's
compiled code: these are written from the papers and from the documented
formats (docs/wire-format.md), so agreement with the kernels is evidence.
"""
from __future__ import annotations
import math
import struct
import numpy as np
from scipy.optimize import linear_sum_assignment


# ======================================================================
# compression
# ======================================================================
# Block-p quantization (FedEM App. B) and stochastic rounding (FedEM Sec. 2)
# written from the paper's formulas, the wire format written from
# docs/wire-format.md, and a bit-exact replica of the documented random-stream
# consumption of quantize.c.

WIRE_HEADER = struct.Struct("<4sBBBBB7xQQ")
NORM_CODES = {2: 1, "inf": 2}


def block_slices(q: int, block: int):
    """Slices of the blocks of a length-q vector (last block possibly shorter)."""
    return [slice(start, min(start + block, q)) for start in range(0, q, block)]


def block_norms(x: np.ndarray, block: int, norm) -> np.ndarray:
    """``||x_l||_r`` per block with numpy.linalg.norm (r = 2 or inf)."""
    order = 2 if norm == 2 else np.inf
    x = np.asarray(x, dtype=np.float64)
    return np.array([np.linalg.norm(x[sl], ord=order) for sl in block_slices(x.shape[0], block)])


def lemma5_error(x: np.ndarray, block: int, norm) -> float:
    """FedEM Lemma 5: ``E||Q(x)-x||^2 = sum_l (||x_l||_1 ||x_l||_p - ||x_l||_2^2)``."""
    x = np.asarray(x, dtype=np.float64)
    order = 2 if norm == 2 else np.inf
    total = 0.0
    for sl in block_slices(x.shape[0], block):
        xl = x[sl]
        total += np.abs(xl).sum() * np.linalg.norm(xl, ord=order) - xl @ xl
    return float(total)


def dither_moments(x: np.ndarray, norms: np.ndarray, block: int, bits: int):
    """Exact mean-squared error and per-coordinate variance of stochastic rounding.

    With ``a = s|x|/N`` and ``f = a - floor(a)``, ``Q_j - x_j`` is
    ``(N/s)(1 - f)`` w.p. ``f`` and ``-(N/s) f`` otherwise (times sign), so
    ``Var(Q_j) = (N/s)^2 f (1 - f)``; ``E||Q-x||^2`` is their sum, and the
    variance of ``||Q-x||^2`` is ``sum_j f(1-f) (N/s)^4 ((1-f)^2 - f^2)^2``.

    Returns
    -------
    mse : float
    var_coord : ndarray of shape (q,)
    var_sqerr : float
        Variance of the squared error of one draw.
    """
    s = (1 << (bits - 1)) - 1
    x = np.asarray(x, dtype=np.float64)
    var = np.zeros(x.shape[0])
    var_sq = 0.0
    for nrm, sl in zip(norms, block_slices(x.shape[0], block)):
        if nrm == 0:
            continue
        a = s * np.abs(x[sl]) / nrm
        f = a - np.floor(a)
        h = nrm / s
        var[sl] = h * h * f * (1 - f)
        var_sq += float(np.sum(f * (1 - f) * h**4 * ((1 - f) ** 2 - f**2) ** 2))
    return float(var.sum()), var, var_sq


def replica_dither(x: np.ndarray, norms: np.ndarray, block: int, bits: int, bitgen) -> np.ndarray:
    """Bit-exact replica of quantize.c's documented sampling, given the block norms.

    Per block (skipped when N == 0), per chunk of 256 coordinates: draw
    ceil(n/8) uint64, byte k of draw g serves coordinate 8g+k;
    ``A = |x| * inv256`` with ``inv256 = 256 s / N`` raised by ulps until
    ``N * inv256 >= 256 s``; level =
    ``floor(A) >> 8`` plus one when the byte is below ``floor(A) mod 256``;
    on equality, ``r = A - floor(A)`` is compared with further 64-bit draws.
    ``bitgen`` must be a PCG64 whose raw output is its ``next_uint64``.
    """
    s = (1 << (bits - 1)) - 1
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(x.shape[0])
    for nrm, sl in zip(norms, block_slices(x.shape[0], block)):
        nrm = float(nrm)
        if nrm == 0:
            continue
        xb = x[sl]
        tiny = nrm < 2.0**-1000
        pre = 2.0**600 if tiny else 1.0
        n_scaled = nrm * pre
        inv256 = 256.0 * s / n_scaled
        while n_scaled * inv256 < 256.0 * s:  # |x| == N must give level s exactly
            inv256 = np.nextafter(inv256, np.inf)
        scale = nrm / s
        for c0 in range(0, xb.shape[0], 256):
            xc = xb[c0 : c0 + 256] * pre
            n = xc.shape[0]
            raw = np.asarray(bitgen.random_raw(-(-n // 8)), dtype="<u8")
            u = raw.view(np.uint8)[:n].astype(np.int64)
            ax = np.abs(xc)
            big_a = ax * inv256
            ai = np.floor(big_a).astype(np.int64)
            level = (ai >> 8) + (u < (ai & 255))
            for j in np.nonzero(u == (ai & 255))[0]:
                r = float(big_a[j] - ai[j])
                while r != 0.0:
                    big = r * 2.0**64
                    whole = math.floor(big)
                    v = int(bitgen.random_raw())
                    if v != whole:
                        level[j] += v < whole
                        break
                    r = big - whole
            level = np.minimum(level, s)
            values = level.astype(np.float64) * scale
            out[sl][c0 : c0 + n] = np.where((xc < 0) & (level > 0), -values, values)
    return out


def numpy_dither_encode(x, bits: int, block: int, norm, rng: np.random.Generator, scheme: int) -> bytes:
    """The obvious vectorized NumPy stochastic rounding + wire packing.

    Uses ``rng.random`` for the rounding and ``np.packbits`` for the bits;
    follows docs/wire-format.md (norms in the input's float type).
    """
    x = np.asarray(x)
    dt = np.float32 if x.dtype == np.float32 else np.float64
    x = x.astype(dt, copy=False)
    q = x.shape[0]
    s = (1 << (bits - 1)) - 1
    m = -(-q // block)
    padded = np.zeros(m * block, dtype=np.float64)
    padded[:q] = x
    rows = padded.reshape(m, block)
    order = 2 if norm == 2 else np.inf
    norms = np.linalg.norm(rows, ord=order, axis=1).astype(dt).astype(np.float64)
    safe = np.where(norms > 0, norms, 1.0)[:, None]
    a = np.minimum(s * np.abs(rows) / safe, s)
    low = np.floor(a)
    level = (low + (rng.random(rows.shape) < a - low)).astype(np.uint32).ravel()[:q]
    code = level | (((x < 0) & (level > 0)).astype(np.uint32) << (bits - 1))
    bitplanes = ((code[:, None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    packed = np.packbits(bitplanes.ravel(), bitorder="little")
    header = WIRE_HEADER.pack(b"FMMQ", 1, scheme, np.dtype(dt).itemsize, NORM_CODES[norm], bits, q, block)
    return header + norms.astype(np.dtype(dt).newbyteorder("<")).tobytes() + packed.tobytes()


def numpy_decode(payload: bytes) -> np.ndarray:
    """Decode a quantizer payload per docs/wire-format.md (no validation)."""
    magic, version, scheme, itemsize, norm, bits, q, block = WIRE_HEADER.unpack_from(payload, 0)
    m = -(-q // block)
    dt = np.dtype("<f4" if itemsize == 4 else "<f8")
    norms = np.frombuffer(payload, dtype=dt, count=m, offset=32).astype(np.float64)
    packed = np.frombuffer(payload, dtype=np.uint8, offset=32 + m * itemsize)
    planes = np.unpackbits(packed, bitorder="little")[: q * bits].reshape(q, bits).astype(np.uint32)
    code = planes @ (np.uint32(1) << np.arange(bits, dtype=np.uint32))
    s = (1 << (bits - 1)) - 1
    level = (code & s).astype(np.float64)
    scale = np.repeat(norms / s, block)[:q]
    values = level * scale
    return np.where(code >> (bits - 1), -values, values)


# ---- data (issue 5): exact balanced assignment --------------------------------------------------


def balanced_assignment_cost_lsa(cost: np.ndarray, capacities: np.ndarray) -> float:
    """Optimal cost of assigning points to clusters of fixed sizes, by the Hungarian method.

    Every cluster ``j`` is replicated ``capacities[j]`` times, which turns the
    transportation problem into a square assignment problem solved exactly by
    :func:`scipy.optimize.linear_sum_assignment` (``O(N³)``, small N only).
    """
    replicated = np.repeat(cost, capacities, axis=1)
    rows, cols = linear_sum_assignment(replicated)
    return float(replicated[rows, cols].sum())


# =========================================================================== engine
# References for the FedMM engine (issue 4): the deterministic iterations the
# algorithms must reproduce, written as plain loops.


def engine_centralized_mm(statistic, T, datas, weights, S0, n_iter):
    """FedMM paper eq. (22): ``s_{t+1} = Σ_i μ_i E_{π_i}[S̄(Z, T(s_t))]``.

    ``statistic(data, theta)`` is the full-batch mean of ``S̄`` on one client's data.
    Returns the list ``[s_0, s_1, ..., s_{n_iter}]``.
    """
    s = np.array(S0, dtype=np.float64)
    out = [s]
    for _ in range(n_iter):
        theta = T(s)
        s = sum(w * statistic(d, theta) for w, d in zip(weights, datas))
        out.append(s)
    return out


def engine_ista(X, y, lam, rho, n_iter, theta0=None):
    """Proximal gradient (ISTA) on ``mean ½(y − Xθ)² + lam ‖θ‖₁`` with step ``rho``."""
    theta = np.zeros(X.shape[1]) if theta0 is None else np.array(theta0, dtype=np.float64)
    for _ in range(n_iter):
        grad = X.T @ (X @ theta - y) / X.shape[0]
        z = theta - rho * grad
        theta = np.sign(z) * np.maximum(np.abs(z) - rho * lam, 0.0)
    return theta


def engine_heterogeneous_positive(n_clients, n_per_client, rng):
    """Positive samples whose client means differ by an order of magnitude (Remark 1 data)."""
    scales = np.geomspace(0.2, 20.0, n_clients)
    return [rng.gamma(4.0, s / 4.0, size=n_per_client) for s in scales]
