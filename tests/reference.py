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
from scipy import stats
from scipy.special import logsumexp


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


def engine_heterogeneous_positive(sizes, rng):
    """Positive samples, one client per entry of ``sizes``, whose means differ by two orders of magnitude."""
    scales = np.geomspace(0.2, 20.0, len(sizes))
    return [rng.gamma(4.0, s / 4.0, size=int(n)) for s, n in zip(scales, sizes)]


# =====================================================================================
# ---- FedMLS and non-smooth problems (issue 7) ----
# Written from the FedMLS paper's formulas without using fedmm code: the dense
# losses/subgradients, a projected subgradient method (the reference for F*),
# MOPES in its matrix form (4)-(5) on the product space (7), and Algorithm 1
# with one Python loop per client (the "plain NumPy" loop of the benchmark).
# =====================================================================================


def nonsmooth_design(kind, A, fit_intercept):
    """Rows a_j, with a trailing 1 when the problem has a bias."""
    A = np.asarray(A, dtype=np.float64)
    return np.hstack([A, np.ones((A.shape[0], 1))]) if fit_intercept else A


def nonsmooth_loss(kind, A, y, w, fit_intercept):
    """f_i(w) = Σ_j ℓ(a_jᵀw, y_j) for kind in {"hinge", "l1"}."""
    z = nonsmooth_design(kind, A, fit_intercept) @ w
    if kind == "hinge":
        return float(np.sum(np.clip(1.0 - y * z, 0.0, None)))
    return float(np.sum(np.abs(z - y)))


def nonsmooth_subgradient(kind, A, y, w, fit_intercept):
    """One subgradient of f_i at w (hinge: −Σ_{y z<1} y_j a_j; l1: Σ sign(z_j − y_j) a_j)."""
    X = nonsmooth_design(kind, A, fit_intercept)
    z = X @ w
    g = np.zeros(X.shape[1])
    for a, label, zj in zip(X, y, z):  # deliberately plain: an independent reference
        if kind == "hinge":
            if label * zj < 1.0:
                g -= label * a
        else:
            g += np.sign(zj - label) * a
    return g


def nonsmooth_subgradient_vectorized(kind, X, y, w):
    """Same subgradient as :func:`nonsmooth_subgradient`, vectorized, on the design X."""
    z = X @ w
    coef = np.where(y * z < 1.0, -y, 0.0) if kind == "hinge" else np.sign(z - y)
    return X.T @ coef


def nonsmooth_objective(kind, datas, w, fit_intercept):
    """F(w) = (1/n) Σ_i f_i(w)."""
    return sum(nonsmooth_loss(kind, A, y, w, fit_intercept) for A, y in datas) / len(datas)


def projected_subgradient_min(kind, datas, fit_intercept, *, radius=None, n_iter=20000, step0=1.0):
    """Centralized projected subgradient method with normalized steps step0/√t.

    Returns (best value, every evaluated value): every value is an upper bound on F*
    (every iterate is feasible), and the best converges to F* as O(1/√n_iter).
    """
    n = len(datas)
    X = np.vstack([nonsmooth_design(kind, A, fit_intercept) for A, _ in datas])
    y = np.concatenate([b for _, b in datas])
    loss = (lambda z: np.clip(1.0 - y * z, 0.0, None)) if kind == "hinge" else (lambda z: np.abs(z - y))
    w = np.zeros(X.shape[1])
    values = []
    for t in range(1, n_iter + 1):
        values.append(loss(X @ w).sum() / n)
        g = nonsmooth_subgradient_vectorized(kind, X, y, w) / n
        gn = np.linalg.norm(g)
        if gn == 0.0:
            break
        w = w - step0 / np.sqrt(t) * g / gn
        if radius is not None and np.linalg.norm(w) > radius:
            w = w * radius / np.linalg.norm(w)
    values.append(loss(X @ w).sum() / n)
    return min(values), np.array(values)


def mopes_product_space(subgradient, n, p, n_rounds, local_steps, lam, radius):
    """MOPES, eqs. (4)-(5), literally, on X ∈ R^{p×n} for problem (7).

    ``subgradient(i, u)`` returns a subgradient of f_i at u; F(X) = (1/n) Σ f_i(x^i) so
    column i of ∇F(U) is subgradient(i, u^i)/n.  𝒳 = consensus set (projection = column
    mean), 𝒳' = columns in the ball of radius R.  ``local_steps(k)``, ``lam(k)``.
    Returns the consensus columns x_k (server iterates) of X_1..X_K as an array (K, p).
    """
    X = np.zeros((p, n))
    Z = np.zeros((p, n))
    Xp = np.zeros((p, n))
    Zp = np.zeros((p, n))
    out = []
    for k in range(1, n_rounds + 1):
        lam_k = lam(k)
        beta = 4.0 / (lam_k * k)
        gamma = 2.0 / (k + 1)
        Y = (1 - gamma) * X + gamma * Z
        Yp = (1 - gamma) * Xp + gamma * Zp
        W = Z - (Y - Yp) / (beta * lam_k)
        Z_new = np.repeat(W.mean(axis=1, keepdims=True), n, axis=1)  # proj onto consensus
        V = Zp - (Yp - Y) / (beta * lam_k)
        U = Zp.copy()
        U_avg = Zp.copy()
        for t in range(1, local_steps(k) + 1):
            grad = np.column_stack([subgradient(i, U[:, i]) for i in range(n)]) / n
            U_hat = U - (grad / beta + U - V) / (1 + t / 2)
            if radius is not None:
                norms = np.linalg.norm(U_hat, axis=0)
                U_hat = U_hat * np.minimum(1.0, radius / np.maximum(norms, 1e-300))
            U = U_hat
            theta = 2 * (t + 1) / (t * (t + 3))
            U_avg = (1 - theta) * U_avg + theta * U
        Z, Zp = Z_new, U
        X = (1 - gamma) * X + gamma * Z
        Xp = (1 - gamma) * Xp + gamma * U_avg
        out.append(X[:, 0].copy())
    return np.array(out)


def fedmls_per_client(subgradient, n, p, n_rounds, local_steps, lam, radius, minibatch=None):
    """FedMLS Algorithm 1 with a Python loop over clients (plain NumPy).

    ``minibatch``: None (exact subgradients) or a callable ``(i) -> idx`` giving the
    rows of client i's next minibatch; ``subgradient(i, u, idx)`` then estimates.
    Returns the server iterates x_1..x_K, shape (K, p).
    """
    x = np.zeros(p)
    z = np.zeros(p)
    y = np.zeros(p)
    xs = [np.zeros(p) for _ in range(n)]
    zs = [np.zeros(p) for _ in range(n)]
    ys = [np.zeros(p) for _ in range(n)]
    out = []
    for k in range(1, n_rounds + 1):
        lam_k = lam(k)
        beta = 4.0 / (lam_k * k)
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        for i in range(n):
            v = zs[i] - (ys[i] - y) / (beta * lam_k)
            u = zs[i].copy()
            u_avg = zs[i].copy()
            for t in range(1, local_steps(k) + 1):
                g = subgradient(i, u) if minibatch is None else subgradient(i, u, minibatch(i))
                u_hat = u - (g / (n * beta) + u - v) / (1 + t / 2)
                norm = np.linalg.norm(u_hat)
                u = u_hat if radius is None or norm <= radius else u_hat * (radius / norm)
                theta = 2 * (t + 1) / (t * (t + 3))
                u_avg = (1 - theta) * u_avg + theta * u
            zs[i] = u
            xs[i] = (1 - gamma) * xs[i] + gamma * u_avg
            ys[i] = (1 - gamma_next) * xs[i] + gamma_next * zs[i]
        x = (1 - gamma) * x + gamma * z
        y = (1 - gamma_next) * x + gamma_next * z
        z = z - (y - sum(ys) / n) * (k + 1) / 4.0
        out.append(x.copy())
    return np.array(out)


def centralized_subgradient_descent(subgradient, n, p, n_iter, step):
    """x_{t+1} = x_t − step(t) (1/n) Σ_i g_i(x_t) from 0; returns x_1..x_T, shape (T, p)."""
    x = np.zeros(p)
    out = []
    for t in range(1, n_iter + 1):
        x = x - step(t) * sum(subgradient(i, x) for i in range(n)) / n
        out.append(x.copy())
    return np.array(out)


def nonsmooth_toy_data(kind, n_clients=4, m=15, d=3, seed=1):
    """Small heterogeneous client data sets: client i's features are shifted by its own mean.

    hinge: labels sign(a·(1, −1, 0.5, …) + noise) in {−1, +1}; l1: b = A·1 + t(2) noise + i.
    """
    rng = np.random.default_rng(seed)
    direction = np.resize([1.0, -1.0, 0.5], d)
    datas = []
    for i in range(n_clients):
        A = rng.normal(size=(m, d)) + 1.5 * rng.normal(size=d)
        if kind == "hinge":
            y = np.where(A @ direction + rng.normal(size=m) > 0, 1.0, -1.0)
        else:
            y = A @ np.ones(d) + rng.standard_t(2, size=m) + i
        datas.append((A, y))
    return datas


# =============================================================================
# EM family (issue 6): textbook EM for the tied Gaussian mixture, Poisson with
# a latent shift, rank-r SVD, simplex projection.  Written from the textbook
# formulas (log-densities from scipy.stats), not from fedmm's parameterization.
# =============================================================================
def gmm_tied_log_joint(Y, weights, means, cov):
    """``log π_ℓ + log 𝒩(y_j; μ_ℓ, Σ)``, shape (N, G), from scipy.stats."""
    return np.stack(
        [np.log(w) + stats.multivariate_normal(mean=mu, cov=cov).logpdf(Y) for w, mu in zip(weights, means)],
        axis=1,
    ).reshape(len(Y), len(weights))


def gmm_tied_loglik(Y, weights, means, cov):
    """Mean log-likelihood of the tied-covariance mixture (nats per example)."""
    return float(logsumexp(gmm_tied_log_joint(Y, weights, means, cov), axis=1).mean())


def gmm_tied_em_step(Y, weights, means, cov):
    """One textbook EM iteration (E-step responsibilities, weighted M-step with pooled covariance)."""
    log_joint = gmm_tied_log_joint(Y, weights, means, cov)
    resp = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    nk = resp.sum(axis=0)
    new_weights = nk / len(Y)
    new_means = (resp.T @ Y) / nk[:, None]
    new_cov = np.zeros((Y.shape[1], Y.shape[1]))
    for k in range(len(weights)):
        d = Y - new_means[k]
        new_cov += (resp[:, k, None] * d).T @ d
    return new_weights, new_means, new_cov / len(Y)


def poisson_latent_posterior(Z, theta, support, probabilities):
    """Posterior of the latent shift given counts, from scipy.stats.poisson, shape (N, K)."""
    logp = np.log(probabilities) + stats.poisson.logpmf(np.asarray(Z)[:, None], np.exp(theta + np.asarray(support)))
    return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))


def poisson_latent_objective(Z, theta, support, probabilities, lam):
    """FedMM eq. (43): mean −log Σ_k w_k Poisson(Z; e^{θ+h_k}) + λ eᶿ."""
    logp = np.log(probabilities) + stats.poisson.logpmf(np.asarray(Z)[:, None], np.exp(theta + np.asarray(support)))
    return float(-logsumexp(logp, axis=1).mean() + lam * np.exp(theta))


def rank_r_svd(X, r):
    """Best rank-r approximation of X (Eckart–Young)."""
    u, s, vt = np.linalg.svd(X, full_matrices=False)
    return (u[:, :r] * s[:r]) @ vt[:r]


def project_capped_simplex_bisection(v, floor):
    """Projection onto {x ≥ floor, Σx = 1} by bisection on the KKT multiplier."""
    lo, hi = v.min() - 1.0, v.max()
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        if np.maximum(v - tau, floor).sum() > 1.0:
            lo = tau
        else:
            hi = tau
    return np.maximum(v - 0.5 * (lo + hi), floor)


def gmm_full_projection(s, G, p, min_weight):
    """The full mixture's statistic projection from NumPy alone (issue 25): the weights onto the capped
    simplex (bisection), then each ``s3_ℓ`` onto ``{X : X − s2_ℓ s2_ℓᵀ / s1_ℓ ⪰ 0}`` by an eigh clip of
    the symmetrized difference (``s1_ℓ > 0``)."""
    s = np.array(s, dtype=np.float64, copy=True)
    w = project_capped_simplex_bisection(s[:G], min_weight)
    s2 = s[G:G + G * p].reshape(G, p)
    s3 = s[G + G * p:].reshape(G, p, p)
    out3 = np.empty_like(s3)
    for ell in range(G):
        B = np.outer(s2[ell], s2[ell]) / w[ell]
        out3[ell] = B + psd_projection_eigh(s3[ell] - B)
    return np.concatenate([w, s2.ravel(), out3.ravel()])


# ---- sparse coding / linalg (issue 3) ---------------------------------------


def lasso_objective(D, Z, H, lam):
    """Per-column 1/2 ||z_j - D h_j||^2 + lam ||h_j||_1."""
    R = Z - D @ H
    return 0.5 * np.sum(R * R, axis=0) + lam * np.abs(H).sum(axis=0)


def lasso_duality_gap(D, Z, H, lam):
    """Per-column duality gap of ``min_h 1/2 ||z - D h||^2 + lam ||h||_1``.

    The dual is ``max_u 1/2 ||z||^2 - 1/2 ||z - u||^2`` s.t. ``||D^T u||_inf <= lam``;
    the scaled residual ``u = r min(1, lam / ||D^T r||_inf)`` is dual feasible, so
    ``P(h) - D(u)`` bounds ``P(h) - P*`` from above: a certificate of optimality
    that needs no reference solver (used where solvers disagree or crawl, K >> p).
    """
    R = Z - D @ H
    corr = np.abs(D.T @ R).max(axis=0)
    scale = np.minimum(1.0, lam / np.maximum(corr, np.finfo(float).tiny))
    U = R * scale
    primal = lasso_objective(D, Z, H, lam)
    dual = 0.5 * np.sum(Z * Z, axis=0) - 0.5 * np.sum((Z - U) ** 2, axis=0)
    return primal - dual


def lasso_kkt_violation(D, Z, H, lam, positive=False):
    """Largest KKT violation per column, relative to lam.

    With g = D^T (z - D h): on the support g_k = lam sign(h_k); off the support
    |g_k| <= lam (positive LASSO: g_k <= lam).  Returns max over k of the
    violation divided by lam.
    """
    g = D.T @ (Z - D @ H)
    on = H != 0
    off_violation = np.maximum(g if positive else np.abs(g), lam) - lam
    on_violation = np.abs(g - lam * np.sign(H))
    return np.where(on, on_violation, off_violation).max(axis=0) / lam


def lasso_sklearn(D, Z, lam, positive=False, tol=1e-13, max_iter=200_000):
    """Reference codes from scikit-learn's ``Lasso``, one column at a time.

    sklearn minimizes (1 / (2 n)) ||y - X w||^2 + alpha ||w||_1 with n = p
    samples here, so alpha = lam / p gives our problem scaled by 1/p.
    """
    from sklearn.linear_model import Lasso

    p, K = D.shape
    H = np.zeros((K, Z.shape[1]))
    model = Lasso(alpha=lam / p, fit_intercept=False, positive=positive, tol=tol,
                  max_iter=max_iter, selection="cyclic")
    for j in range(Z.shape[1]):
        H[:, j] = model.fit(D, Z[:, j]).coef_
    return H


def psd_projection_eigh(A):
    """Projection of sym(A) onto the PSD cone by eigh and clipping (stack-aware)."""
    S = 0.5 * (A + np.swapaxes(A, -1, -2))
    w, V = np.linalg.eigh(S)
    return (V * np.maximum(w, 0.0)[..., None, :]) @ np.swapaxes(V, -1, -2)


def dictionary_surrogate(D, A, B, eta=0.0):
    """U(D) = 1/2 tr(D^T D A) - tr(D^T B) + eta ||D||_F^2."""
    return 0.5 * np.trace(D.T @ D @ A) - np.trace(D.T @ B) + eta * np.sum(D * D)


def sparse_codes(rng, K, b, density=0.2):
    """Codes with ``density`` N(0, 1) nonzeros (the §6 synthetic model)."""
    return rng.standard_normal((K, b)) * (rng.random((K, b)) < density)
def gmm_full_em_step(Y, weights, means, covs):
    """One textbook EM iteration of the mixture with one covariance per component.

    Returns the new (weights, means, covariances) and the mean log-likelihood at the input parameters.
    """
    log_joint = np.stack(
        [np.log(w) + stats.multivariate_normal(mean=mu, cov=c).logpdf(Y) for w, mu, c in zip(weights, means, covs)],
        axis=1,
    ).reshape(len(Y), len(weights))
    resp = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    nk = resp.sum(axis=0)
    new_means = (resp.T @ Y) / nk[:, None]
    new_covs = np.stack([((resp[:, k, None] * (Y - new_means[k])).T @ (Y - new_means[k])) / nk[k]
                         for k in range(len(nk))])
    return nk / len(Y), new_means, new_covs, float(logsumexp(log_joint, axis=1).mean())


# =============================================================================
# ---- runtimes (issue 8): FedMM rounds with dropped clients ----
# =============================================================================
from fedmm.models import DictionaryLearning, InverseToy  # noqa: E402 - only the runtime helpers below need fedmm


def fedmm_rounds_with_drops(algo, datas, n_rounds, seed, failing, init=None):
    """Algorithm 2 run in process where the clients in ``failing`` never answer.

    A dropped client is treated as an inactive one (lines 10-11: no message,
    ``V_{t+1,i} = V_{t,i}``): the server aggregates the other active clients'
    payloads with the nominal ``1/p``.  Returns the per-round
    ``(ids, E_s, Ŝ_{t+1})`` and the final ``(Ŝ, θ)``.
    """
    server, clients = algo.build(datas, seed=seed, init=init)
    setup = server.setup_message()
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    rounds = []
    for t in range(n_rounds):
        ids = server.select(t)
        message = server.broadcast(t)
        payloads = {i: clients[i].step(message) for i in ids if i not in failing}
        record = server.aggregate(t, payloads)
        rounds.append((ids, record["E_s"], server.S.copy()))
    return rounds, server.S, server.theta_vector


class _FailOnMark:
    """Mixin: the oracle raises on a client whose data start with ``FAIL_MARK`` (a broken worker)."""

    FAIL_MARK = 1000.0

    def statistic(self, data, theta, idx=None, **kwargs):
        if np.ravel(data)[0] == self.FAIL_MARK:
            raise RuntimeError("simulated client failure")
        return super().statistic(data, theta, idx, **kwargs)

    def statistic_batch(self, datas, theta, idxs, **kwargs):
        if any(np.ravel(d)[0] == self.FAIL_MARK for d in datas):
            raise RuntimeError("simulated client failure")
        return super().statistic_batch(datas, theta, idxs, **kwargs)


class FailingInverseToy(_FailOnMark, InverseToy):
    """``InverseToy`` with a failing client (see :class:`_FailOnMark`)."""


class FailingDictionaryLearning(_FailOnMark, DictionaryLearning):
    """``DictionaryLearning`` with a failing client (see :class:`_FailOnMark`)."""


# =============================================================================
# ---- extension points (issue 13): the recipes of docs/extending.md ----
# =============================================================================
import functools  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

EXTENDING_DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, body)`` of the ```python fenced blocks of a Markdown text, in order."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)]


@functools.lru_cache(maxsize=None)
def extending_recipes() -> types.ModuleType:
    """Every ```python block of docs/extending.md executed in order in one module (its asserts run too).

    The module is registered in ``sys.modules`` as ``extending_recipes`` so that its classes behave
    as if imported (dataclasses, ``inspect``, pickling by reference).
    """
    module = types.ModuleType("extending_recipes")
    module.__file__ = str(EXTENDING_DOC)
    sys.modules[module.__name__] = module
    for line, block in python_blocks(EXTENDING_DOC.read_text(encoding="utf-8")):
        # Padded so that tracebacks give the line numbers of the Markdown file.
        exec(compile("\n" * (line - 1) + block, str(EXTENDING_DOC), "exec"), module.__dict__)
    return module


def participation_kwargs(value):
    """``FedMM``'s participation arguments for a test parameter: an int is a count of clients per round,
    a float a Bernoulli probability."""
    if isinstance(value, int):
        return {"clients_per_round": value}
    return {"participation_prob": value}


# =============================================================================
# ---- compiled backend (issue 13): the Python and the compiled backends agree ----
# =============================================================================
def assert_backends_agree(make_algorithm, datas, n_rounds, *, seed=0, init=None, threads=(1, 2), **run_kw):
    """``make_algorithm(backend, n_threads)`` run on the Python backend and on the compiled one (each of
    ``threads``) gives equal Histories (records and final ``S``, ``theta``), bit for bit; then the
    same rounds driven by :class:`fedmm.federation.LocalRuntime` on fresh Server/Client objects leave
    equal server and client states (``V``, ``V_i``, parameters).  Returns the Python History."""
    from fedmm.federation import LocalRuntime
    from fedmm.history import History

    ref = make_algorithm("python", 1).run(datas, n_rounds, seed=seed, init=init, **run_kw)
    assert ref.config["backend"] == "python"
    for n_threads in threads:
        h = make_algorithm("compiled", n_threads).run(datas, n_rounds, seed=seed, init=init, **run_kw)
        assert h.config["backend"] == "compiled"
        assert h.equals(ref), f"n_threads={n_threads}: the compiled History differs from the Python one"
        assert set(h.state) == set(ref.state)
        for key in ref.state:
            np.testing.assert_array_equal(h.state[key], ref.state[key])
    states = []
    for compiled in (False, True):
        server, clients = make_algorithm("python", 1).build(datas, seed=seed, init=init)
        LocalRuntime(n_threads=max(threads), compiled=compiled).run(server, clients, n_rounds, history=History())
        states.append((server.export_state().to_arrays(), [c.export_state().to_arrays() for c in clients]))
    (srv_py, cl_py), (srv_c, cl_c) = states
    assert set(srv_py) == set(srv_c)
    for key in srv_py:
        np.testing.assert_array_equal(srv_c[key], srv_py[key])
    for a, b in zip(cl_py, cl_c, strict=True):
        assert set(a) == set(b)
        for key in a:
            np.testing.assert_array_equal(b[key], a[key])
    return ref


def cli_status(argv):
    """Exit status of ``fedmm.cli.main(argv)``: its return value, or the code of the SystemExit it raised."""
    from fedmm.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code

