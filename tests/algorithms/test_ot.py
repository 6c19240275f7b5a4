# SPDX-License-Identifier: BSD-3-Clause
"""Input-convex potentials, the OT objective (33), FedMM-OT (Algorithm 3) and FedAdam (FedMM paper §7)."""
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
pytest.importorskip("optax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')

from scipy.linalg import sqrtm  # noqa: E402

from fault_injection import ANY_ROUND, FaultyClient  # noqa: E402
from fedmm.algorithms import FedAdam, FedMMOT  # noqa: E402
from fedmm.compression import Identity, StochasticRounding  # noqa: E402
from fedmm.federation import LocalRuntime, OTServerState  # noqa: E402
from fedmm.models import ICNN, TransportMap, TransportProblem  # noqa: E402
from fedmm.history import History  # noqa: E402


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def small_problem():
    """One small problem shared by the algorithm tests: its compiled loops are built once."""
    return TransportProblem(2, hidden_sizes=[8, 8], batch_size=16)


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(3)
    datas = [rng.normal(loc=i, size=(40 + 5 * i, 2)) for i in range(4)]
    target = rng.normal(loc=1.0, scale=0.7, size=(60, 2))
    return datas, target


def _random_params(f, seed, scale=0.5):
    """Parameters in Θ with larger weights than ``init`` (a more curved potential)."""
    rng = np.random.default_rng(seed)
    return f.project(scale * rng.standard_normal(f.n_params))


# --------------------------------------------------------------------------- ICNN
def test_default_hidden_sizes_are_mmv2():
    assert ICNN(16).hidden_sizes == (64, 64, 32)
    assert ICNN(64).hidden_sizes == (128, 128, 64)
    f = ICNN(3, [5, 4], rank=2)
    # A_k (3, 2, h), W_k (h, 3), b_k (h,) per layer, C_1 (4, 5), w (4,)
    assert f.n_params == (3 * 2 * 5 + 5 * 3 + 5) + (3 * 2 * 4 + 4 * 3 + 4) + 4 * 5 + 4
    assert int(f.convex_mask.sum()) == 4 * 5 + 4


@pytest.mark.parametrize("activation", ["celu", "softplus"])
@pytest.mark.parametrize("c", [0.0, 0.5])
def test_icnn_gradient_is_monotone(activation, c):
    # <∇f(x) − ∇f(y), x − y> >= c ‖x − y‖² for a c-strongly convex f, on random pairs.
    f = ICNN(3, [16, 16, 8], rank=2, strong_convexity=c, activation=activation)
    rng = np.random.default_rng(1)
    for seed in range(3):
        p = _random_params(f, seed)
        x, y = 2 * rng.standard_normal((2, 500, 3))
        inner = np.sum((f.gradient(p, x) - f.gradient(p, y)) * (x - y), axis=1)
        bound = c * np.sum((x - y) ** 2, axis=1)
        assert (inner - bound >= -1e-10 * (1 + np.abs(inner))).all()


def test_icnn_outside_theta_is_not_convex():
    # The check above can fail: with negative convex-path weights the gradient is not monotone.
    f = ICNN(2, [16, 16], strong_convexity=0.0)
    rng = np.random.default_rng(0)
    p = 0.5 * rng.standard_normal(f.n_params)
    p[f.convex_mask] = -np.abs(p[f.convex_mask])
    x, y = 2 * rng.standard_normal((2, 2000, 2))
    inner = np.sum((f.gradient(p, x) - f.gradient(p, y)) * (x - y), axis=1)
    assert inner.min() < -1e-3


def test_projection_onto_theta():
    f = ICNN(3, [6, 5])
    p = np.random.default_rng(0).standard_normal(f.n_params)
    q = f.project(p)
    assert (q[f.convex_mask] >= 0).all()
    np.testing.assert_array_equal(q[~f.convex_mask], p[~f.convex_mask])
    np.testing.assert_array_equal(q[f.convex_mask], np.maximum(p[f.convex_mask], 0))
    np.testing.assert_array_equal(f.project(q), q)  # idempotent
    assert (f.init(5)[f.convex_mask] >= 0).all()


def test_icnn_layout_matches_formula():
    # f(x) = w·z_L + c/2 ‖x‖², z_1 = q_1(x), z_2 = celu(C_1 z_1 + q_2(x)), from the documented layout.
    f = ICNN(3, [4, 5], rank=2, strong_convexity=0.3)
    p = _random_params(f, 0)
    b = f.unflatten(p)
    x = np.random.default_rng(1).standard_normal((7, 3))

    def q(k):
        return np.einsum("nrh->nh", np.einsum("nd,drh->nrh", x, b[f"A{k}"]) ** 2) + x @ b[f"W{k}"].T + b[f"b{k}"]

    def celu(u):
        return np.where(u > 0, u, np.expm1(np.minimum(u, 0)))

    z = celu(q(0) @ b["C0"].T + q(1))
    expected = z @ b["w"] + 0.15 * np.sum(x * x, axis=1)
    np.testing.assert_allclose(f.value(p, x), expected, rtol=1e-12)


def test_icnn_gradients_match_finite_differences():
    f = ICNN(3, [8, 6], rank=1, strong_convexity=0.1)
    p = _random_params(f, 2)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3))
    h = 1e-6
    g = f.gradient(p, x)
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        fd = (f.value(p, x + e) - f.value(p, x - e)) / (2 * h)
        np.testing.assert_allclose(g[:, j], fd, rtol=1e-6, atol=1e-7)
    gp = f.param_gradient(p, x)
    for k in rng.choice(f.n_params, size=12, replace=False):
        e = np.zeros(f.n_params)
        e[k] = h
        fd = (f.value(p + e, x).sum() - f.value(p - e, x).sum()) / (2 * h)
        assert abs(gp[k] - fd) <= 1e-6 * (1 + abs(fd))


@pytest.mark.parametrize("conjugate_step", ["joint", "cycle"])
def test_objective_gradients_match_finite_differences(conjugate_step):
    # ∇_ω W against central differences of W (both modes); the θ-direction against central differences of
    # W ('joint') or of λ R_Q = W_λ − W_0 ('cycle': the Fenchel-Young term is not differentiated in θ).
    problem = TransportProblem(2, hidden_sizes=[6, 5], cycle_weight=0.7, strong_convexity=0.2,
                               conjugate_step=conjugate_step)
    no_cycle = TransportProblem(2, hidden_sizes=[6, 5], cycle_weight=0.0, strong_convexity=0.2,
                                conjugate_step="joint")
    f = problem.potential
    omega, theta = _random_params(f, 0, 0.3), _random_params(f, 1, 0.3)
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((9, 2)), rng.standard_normal((11, 2)) + 1

    def theta_objective(t):
        if conjugate_step == "joint":
            return problem.loss(omega, t, x, y)
        return problem.loss(omega, t, x, y) - no_cycle.loss(omega, t, x, y)

    go, gt = problem.grad_omega(omega, theta, x, y), problem.grad_theta(omega, theta, y)
    h = 1e-6
    for k in rng.choice(f.n_params, size=10, replace=False):
        e = np.zeros(f.n_params)
        e[k] = h
        fd_o = (problem.loss(omega + e, theta, x, y) - problem.loss(omega - e, theta, x, y)) / (2 * h)
        fd_t = (theta_objective(theta + e) - theta_objective(theta - e)) / (2 * h)
        assert abs(go[k] - fd_o) <= 1e-6 * (1 + abs(fd_o))
        assert abs(gt[k] - fd_t) <= 1e-6 * (1 + abs(fd_t))


def test_conjugate_step_cycle_needs_a_cycle_weight():
    with pytest.raises(ValueError, match="cycle_weight"):
        TransportProblem(2, hidden_sizes=[4], cycle_weight=0.0)
    with pytest.raises(ValueError, match="conjugate_step"):
        TransportProblem(2, hidden_sizes=[4], conjugate_step="max")
    assert TransportProblem(2, hidden_sizes=[4]).config()["conjugate_step"] == "cycle"


def _theta_adam_residuals(problem, omega, theta, y, n_steps, lr=1e-2):
    """Cycle residuals E‖∇f_ω(∇f_θ(y)) − y‖² before and after projected Adam on problem.grad_theta."""
    f = problem.potential

    def residual(t):
        return float(np.mean(np.sum((f.gradient(omega, f.gradient(t, y)) - y) ** 2, axis=1)))

    start = residual(theta)
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for k in range(1, n_steps + 1):
        g = problem.grad_theta(omega, theta, y)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        theta = f.project(theta - lr * (m / (1 - 0.9**k)) / (np.sqrt(v / (1 - 0.999**k)) + 1e-8))
    return start, residual(theta)


def test_theta_steps_invert_a_flat_potential():
    # f_ω(x) = c/2 ‖x‖² (all network weights 0), c = 0.3, whose gradient's inverse is y ↦ y / c.  Along
    # ∇f_θ(y) = t the joint θ-objective is ⟨t, y⟩ − c‖t‖²/2 + λ‖c t − y‖², with curvature c(2λc − 1) < 0
    # for λ = 0.5 < 1/(2c): minimizing it pushes ∇f_θ away from the inverse (the cycle residual grows),
    # which is what made the centralized scheme diverge with λ = 1 on the known-map benchmark.  The
    # 'cycle' direction is λ∇_θ of the non-negative R_Q, zero at the inverse: Adam on it brings R_Q down.
    c, lam = 0.3, 0.5
    y = np.random.default_rng(7).standard_normal((64, 2))
    residuals = {}
    for mode in ("cycle", "joint"):
        problem = TransportProblem(2, hidden_sizes=[4, 4], cycle_weight=lam, strong_convexity=c,
                                   conjugate_step=mode)
        omega, theta = np.zeros(problem.n_params), problem.potential.init(0)
        residuals[mode] = _theta_adam_residuals(problem, omega, theta, y, 300)
    start, end = residuals["cycle"]
    assert end < 0.1 * start, residuals
    start, end = residuals["joint"]
    assert end > start, residuals


def test_objective_value_matches_definition():
    # W_i = E_P f_ω(X) + E_Q[<∇f_θ(Y), Y> − f_ω(∇f_θ(Y))] + λ E_Q ‖∇f_ω(∇f_θ(Y)) − Y‖² (eq. (33)).
    problem = TransportProblem(2, hidden_sizes=[6, 5], cycle_weight=2.0)
    f = problem.potential
    omega, theta = _random_params(f, 3, 0.3), _random_params(f, 4, 0.3)
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((9, 2)), rng.standard_normal((11, 2))
    ty = f.gradient(theta, y)
    expected = (f.value(omega, x).mean() + np.mean(np.sum(ty * y, axis=1) - f.value(omega, ty))
                + 2.0 * np.mean(np.sum((f.gradient(omega, ty) - y) ** 2, axis=1)))
    assert problem.loss(omega, theta, x, y) == pytest.approx(expected, rel=1e-12)


def test_transport_map_is_a_plain_numpy_callable():
    problem = TransportProblem(2, hidden_sizes=[6, 5])
    omega, theta = problem.init(0)
    m = problem.transport_map(omega, theta)
    assert isinstance(m, TransportMap)
    x = np.random.default_rng(0).standard_normal((4, 2))
    out = m(x)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64 and out.shape == (4, 2)
    np.testing.assert_array_equal(out, problem.potential.gradient(omega, x))
    np.testing.assert_array_equal(m.inverse(x), problem.potential.gradient(theta, x))
    m2 = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(m2(x), out)


def test_identity_warm_start():
    problem = TransportProblem(2, hidden_sizes=[8, 8])
    omega, theta = problem.init(0, identity_steps=300)
    np.testing.assert_array_equal(omega, theta)
    x = np.random.default_rng(1).normal(scale=2.0, size=(500, 2))
    err = np.mean(np.sum((problem.transport_map(omega, theta)(x) - x) ** 2, axis=1))
    assert err < 0.01 * np.mean(np.sum(x * x, axis=1))
    # the same seed gives the same parameters
    np.testing.assert_array_equal(problem.init(0, identity_steps=300)[0], omega)


# --------------------------------------------------------------------------- validation
def test_bad_inputs_raise_clear_errors(small_problem, small_data):
    datas, target = small_data
    with pytest.raises(ValueError, match="hidden_sizes"):
        ICNN(2, [4, 0])
    with pytest.raises(ValueError, match="hidden_sizes"):
        TransportProblem(2, hidden_sizes=[-3])
    with pytest.raises(ValueError, match="hidden_sizes"):
        ICNN(2, [])
    with pytest.raises(ValueError, match="dim"):
        ICNN(0)
    with pytest.raises(ValueError, match="cycle_weight"):
        TransportProblem(2, cycle_weight=-1.0)
    with pytest.raises(TypeError, match="'model'"):
        FedMMOT(ICNN(2, [4]))
    algo = FedMMOT(small_problem)
    bad_dim = [datas[0], np.zeros((10, 3))]
    with pytest.raises(ValueError, match=r"datas\[1\].*\(N, 2\)"):
        algo.run(bad_dim, 1, target=target, seed=0)
    with pytest.raises(ValueError, match="target"):
        algo.run(datas, 1, target=np.zeros((10, 3)), seed=0)
    nan_data = [d.copy() for d in datas]
    nan_data[2][3, 1] = np.nan
    with pytest.raises(ValueError, match=r"datas\[2\]"):
        algo.run(nan_data, 1, target=target, seed=0)
    nan_target = target.copy()
    nan_target[0, 0] = np.inf
    with pytest.raises(ValueError, match="target"):
        algo.run(datas, 1, target=nan_target, seed=0)
    with pytest.raises(ValueError, match="clients_per_round"):
        FedMMOT(small_problem, clients_per_round=9).run(datas, 1, target=target, seed=0)
    with pytest.raises(ValueError, match="at most one"):
        FedMMOT(small_problem, clients_per_round=2, participation_prob=0.5)
    with pytest.raises(ValueError, match="local_lr"):
        FedAdam(small_problem, local_lr=0.0)
    omega, theta = small_problem.init(0)
    bad = omega.copy()
    bad[np.flatnonzero(small_problem.potential.convex_mask)[0]] = -1.0
    with pytest.raises(ValueError, match="Θ"):
        algo.run(datas, 1, target=target, seed=0, init=(bad, theta))
    with pytest.raises(ValueError, match="omega"):
        small_problem.grad_omega(omega[:-1], theta, datas[0], target)


def test_import_without_jax_fails_only_when_ot_is_used():
    code = (
        "import sys\n"
        "sys.modules['jax'] = None\n"
        "sys.modules['optax'] = None\n"
        "import fedmm, fedmm.models, fedmm.algorithms\n"
        "from fedmm.models import ICNN, TransportProblem\n"
        "from fedmm.algorithms import FedMMOT, FedAdam\n"
        "for build in (lambda: ICNN(2), lambda: TransportProblem(2)):\n"
        "    try:\n"
        "        build()\n"
        "    except ImportError as exc:\n"
        "        assert 'pip install \"fedmm[ot]\"' in str(exc), exc\n"
        "    else:\n"
        "        raise SystemExit('no ImportError')\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# --------------------------------------------------------------------------- Gaussian to Gaussian
def _gaussian_case(d, seed):
    """Source N(m1, Σ1), target N(m2, Σ2) and the closed-form W2 map x ↦ A(x − m1) + m2."""
    rng = np.random.default_rng(seed)
    B1, B2 = rng.standard_normal((2, d, d))
    S1 = B1 @ B1.T / d + 0.5 * np.eye(d)
    S2 = B2 @ B2.T / d + 0.5 * np.eye(d)
    m1, m2 = np.zeros(d), rng.standard_normal(d)
    r1 = np.real(sqrtm(S1))
    r1_inv = np.linalg.inv(r1)
    A = r1_inv @ np.real(sqrtm(r1 @ S2 @ r1)) @ r1_inv
    return m1, S1, m2, S2, A


def test_gaussian_closed_form_map_is_the_push_forward():
    # The reference itself: A is symmetric positive definite (a gradient of a convex quadratic) and A Σ1 A = Σ2.
    m1, S1, m2, S2, A = _gaussian_case(3, 0)
    np.testing.assert_allclose(A, A.T, atol=1e-12)
    assert np.linalg.eigvalsh(A).min() > 0
    np.testing.assert_allclose(A @ S1 @ A, S2, atol=1e-10)


def test_fedmmot_recovers_the_gaussian_map():
    d = 2
    m1, S1, m2, S2, A = _gaussian_case(d, 0)
    rng = np.random.default_rng(1)
    source = rng.multivariate_normal(m1, S1, size=4000)
    target = rng.multivariate_normal(m2, S2, size=4000)
    test_x = rng.multivariate_normal(m1, S1, size=4000)
    truth = (test_x - m1) @ A.T + m2

    def l2_uvp(m):
        return {"l2_uvp": 100 * np.mean(np.sum((m(test_x) - truth) ** 2, axis=1)) / np.trace(S2)}

    problem = TransportProblem(d, hidden_sizes=[16, 16], batch_size=128)
    algo = FedMMOT(problem, local_lr=0.05, theta_steps=10, identity_steps=200, step=0.02)  # omega_step='adam'
    h = algo.run(np.array_split(source, 4), 60, target=target, seed=0, evaluate=l2_uvp, evaluate_every=10)
    assert h.config["initial_evaluation"]["l2_uvp"] > 10  # the warm start (identity) is far from the map
    assert h["l2_uvp"][-1] <= 1.0
    np.testing.assert_array_equal(h.transport_map.omega, h.state["omega"])
    assert l2_uvp(h.transport_map)["l2_uvp"] == h["l2_uvp"][-1]


# --------------------------------------------------------------------------- equivalences
def _adam_reference(theta, grad_fn, n_steps, state, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, project=None):
    """Adam (Kingma & Ba) written out, each step followed by ``project``; ``state`` = (t, m, v)."""
    t, m, v = state
    for _ in range(n_steps):
        g = grad_fn(theta)
        t += 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        theta = theta - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        theta = project(theta)
    return theta, (t, m, v)


def test_fedmmot_one_client_equals_centralized_alternating_scheme():
    # One client, p = 1, no compression, α = 0, γ = 1, full batches: each round is one projected gradient
    # step on ω at θ_t, then K Adam steps on θ ↦ W(ω_{t+1}, θ) (Adam state kept across rounds).
    problem = TransportProblem(2, hidden_sizes=[6, 5], batch_size=None)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((30, 2)), rng.standard_normal((25, 2)) + 1.0
    lr, K, T = 0.05, 3, 4
    init = problem.init(7, identity_steps=50)
    h = FedMMOT(problem, local_lr=lr, theta_steps=K, omega_step="sgd").run([x], T, target=y, seed=7, init=init)
    omega, theta = init
    project = problem.potential.project
    state = (0, np.zeros_like(theta), np.zeros_like(theta))
    for _ in range(T):
        omega = project(omega - lr * problem.grad_omega(omega, theta, x, y))
        theta, state = _adam_reference(theta, lambda th, o=omega: problem.grad_theta(o, th, y), K, state,
                                       project=project)
    np.testing.assert_allclose(h.state["omega"], omega, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(h.state["theta"], theta, rtol=1e-9, atol=1e-12)


def test_fedmmot_adaptive_omega_step_one_client_equals_alternating_adam():
    # omega_step='adam': ω_{t+1} = Π(ω_t − γ Adam(−H)) with H = Π(ω_t − η∇_ω W) − ω_t (the client's step), one
    # Adam state for ω and another for θ, both kept across rounds; the θ-steps as with omega_step='sgd'.
    problem = TransportProblem(2, hidden_sizes=[6, 5], batch_size=None)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((30, 2)), rng.standard_normal((25, 2)) + 0.5
    lr, gamma, theta_lr, K, T = 0.05, 0.02, 0.01, 2, 4
    init = problem.init(3, identity_steps=50)
    h = FedMMOT(problem, local_lr=lr, omega_step="adam", step=gamma, theta_steps=K, theta_lr=theta_lr).run(
        [x], T, target=y, seed=3, init=init)
    omega, theta = init
    project = problem.potential.project
    omega_state = (0, np.zeros_like(omega), np.zeros_like(omega))
    theta_state = (0, np.zeros_like(theta), np.zeros_like(theta))
    for _ in range(T):
        H = project(omega - lr * problem.grad_omega(omega, theta, x, y)) - omega
        omega, omega_state = _adam_reference(omega, lambda _o, g=-H: g, 1, omega_state, lr=gamma, project=project)
        theta, theta_state = _adam_reference(theta, lambda th, o=omega: problem.grad_theta(o, th, y), K,
                                             theta_state, lr=theta_lr, project=project)
    np.testing.assert_allclose(h.state["omega"], omega, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(h.state["theta"], theta, rtol=1e-9, atol=1e-12)
    assert h.config["omega_step"] == "adam" and h.config["step"] == "0.02"
    assert h.config["theta_steps"] == K and h.config["theta_lr"] == theta_lr and "server_lr" not in h.config


def test_fedadam_one_client_equals_its_definition():
    problem = TransportProblem(2, hidden_sizes=[6, 5], batch_size=None)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((30, 2)), rng.standard_normal((25, 2)) - 1.0
    lr, server_lr, T = 0.05, 0.01, 3
    omega, theta = problem.init(7, identity_steps=50)
    h = FedAdam(problem, local_lr=lr, server_lr=server_lr).run([x], T, target=y, seed=7, init=(omega, theta))
    project = problem.potential.project
    n = problem.n_params
    params = np.concatenate([omega, theta])
    state = (0, np.zeros(2 * n), np.zeros(2 * n))
    for _ in range(T):
        o, th = params[:n], params[n:]
        delta = np.concatenate([project(o - lr * problem.grad_omega(o, th, x, y)) - o,
                                project(th - lr * problem.grad_theta(o, th, y)) - th])
        params, state = _adam_reference(params, lambda _p, g=-delta: g, 1, state, lr=server_lr,
                                        project=lambda p: np.concatenate([project(p[:n]), project(p[n:])]))
    np.testing.assert_allclose(h.state["omega"], params[:n], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(h.state["theta"], params[n:], rtol=1e-9, atol=1e-12)


def test_fedadam_server_theta_steps_equal_their_definition(small_problem, small_data):
    # theta_steps=K: after its Adam step on (ω, θ), the server takes K Adam steps on θ alone along the
    # θ-direction at ω_{t+1} (learning rate theta_lr, its own Adam state kept across rounds), as FedMM-OT's.
    problem = TransportProblem(2, hidden_sizes=[6, 5], batch_size=None)
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((30, 2)), rng.standard_normal((25, 2)) - 1.0
    lr, server_lr, theta_lr, K, T = 0.05, 0.01, 0.02, 3, 3
    omega, theta = problem.init(2, identity_steps=50)
    h = FedAdam(problem, local_lr=lr, server_lr=server_lr, theta_steps=K, theta_lr=theta_lr).run(
        [x], T, target=y, seed=2, init=(omega, theta))
    assert h.config["theta_steps"] == K and h.config["theta_lr"] == theta_lr
    project = problem.potential.project
    n = problem.n_params
    params = np.concatenate([omega, theta])
    state = (0, np.zeros(2 * n), np.zeros(2 * n))
    theta_state = (0, np.zeros(n), np.zeros(n))
    for _ in range(T):
        o, th = params[:n], params[n:]
        delta = np.concatenate([project(o - lr * problem.grad_omega(o, th, x, y)) - o,
                                project(th - lr * problem.grad_theta(o, th, y)) - th])
        params, state = _adam_reference(params, lambda _p, g=-delta: g, 1, state, lr=server_lr,
                                        project=lambda p: np.concatenate([project(p[:n]), project(p[n:])]))
        o = params[:n]
        th, theta_state = _adam_reference(params[n:], lambda t, o=o: problem.grad_theta(o, t, y), K, theta_state,
                                          lr=theta_lr, project=project)
        params = np.concatenate([o, th])
    np.testing.assert_allclose(h.state["omega"], params[:n], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(h.state["theta"], params[n:], rtol=1e-9, atol=1e-12)
    # The θ-steps' Adam state is part of the server's state: restoring it replays a round bit for bit.
    datas, target = small_data
    server, clients = FedAdam(small_problem, theta_steps=2, identity_steps=0).build(datas, target=target, seed=1)
    payloads = {i: clients[i].step(server.broadcast(0)) for i in server.select(0)}
    saved = server.export_state().to_arrays()
    assert {k for k in saved if k.startswith("theta_adam_")} == {"theta_adam_0", "theta_adam_1", "theta_adam_2"}
    server.aggregate(0, payloads)
    first = server.export_state().to_arrays()
    server.import_state(OTServerState.from_arrays(saved))
    server.aggregate(0, payloads)
    for k, v in server.export_state().to_arrays().items():
        np.testing.assert_array_equal(v, first[k], err_msg=k)
    assert not any(k.startswith("theta_adam_") for k in FedAdam(small_problem).build(
        datas, target=target, seed=1, init=(server.omega, server.theta))[0].export_state().to_arrays())
    with pytest.raises(ValueError, match="theta_steps"):
        FedAdam(small_problem, theta_steps=-1)
    with pytest.raises(ValueError, match="theta_lr"):
        FedAdam(small_problem, theta_lr=0.0)


# --------------------------------------------------------------------------- reproducibility
def _full_config(problem, **kw):
    return FedMMOT(problem, clients_per_round=3, control_variate_step=0.5, step=0.8, omega_step="sgd", local_steps=2,
                   local_lr=0.05,
                   theta_steps=2, compressor=StochasticRounding(bits=8), identity_steps=20, **kw)


def test_same_seed_same_history(small_problem, small_data):
    datas, target = small_data
    for algo in (_full_config(small_problem),
                 FedAdam(small_problem, participation_prob=0.6, local_steps=2, server_lr=0.01,
                         compressor=StochasticRounding(bits=8), identity_steps=20)):
        h1 = algo.run(datas, 4, target=target, seed=11)
        h2 = algo.run(datas, 4, target=target, seed=11)
        h3 = algo.run(datas, 4, target=target, seed=12)
        assert h1.equals(h2)
        np.testing.assert_array_equal(h1.state["omega"], h2.state["omega"])
        np.testing.assert_array_equal(h1.state["theta"], h2.state["theta"])
        assert not np.array_equal(h1.state["omega"], h3.state["omega"])


def test_threads_do_not_change_the_numbers(small_problem, small_data):
    datas, target = small_data
    algo = _full_config(small_problem)
    h1 = algo.run(datas, 3, target=target, seed=3, runtime=LocalRuntime(n_threads=1, compiled=False))
    h2 = algo.run(datas, 3, target=target, seed=3, runtime=LocalRuntime(n_threads=2, compiled=False))
    assert h1.equals(h2)
    np.testing.assert_array_equal(h1.state["theta"], h2.state["theta"])


def test_participation_rules(small_problem, small_data):
    datas, target = small_data
    h = FedMMOT(small_problem, clients_per_round=2, identity_steps=0, local_lr=0.01).run(
        datas, 6, target=target, seed=0)
    assert all(len(r["active"]) == 2 for r in h.records)
    T, p = 40, 0.5
    h = FedMMOT(small_problem, participation_prob=p, identity_steps=0, local_lr=0.01, theta_steps=0).run(
        datas, T, target=target, seed=0)
    counts = np.array([len(r["active"]) for r in h.records])
    # mean of T Binomial(4, p) counts: within 4 standard deviations of 4p
    assert abs(counts.mean() - 4 * p) <= 4 * np.sqrt(4 * p * (1 - p) / T)
    assert len(set(counts.tolist())) > 1


def test_control_variates_stay_consistent(small_problem, small_data):
    # V_t = Σ_i μ_i V_{t,i} after every round (Algorithm 3 lines 8, 11, 17), with compression and sampling.
    datas, target = small_data
    algo = _full_config(small_problem)
    server, clients = algo.build(datas, target=target, seed=5)
    from fedmm.history import History
    LocalRuntime(compiled=False).run(server, clients, 3, history=History())
    assert np.abs(server.V).max() > 0
    np.testing.assert_allclose(server.V, sum(w * c.V for w, c in zip(server.weights, clients)), atol=1e-12)


def test_default_control_variate_step_is_positive_and_cancels_with_full_participation(small_problem, small_data):
    # Algorithm 3 requires α > 0.  With every client active and no compression, V_t = Σ μ_i V_{t,i} makes
    # H = Σ μ_i (ω_i − ω_t) whatever α: the iterates equal α = 0's up to float64 rounding, not bit for bit.
    datas, target = small_data
    assert FedMMOT(small_problem).control_variate_step > 0
    init = small_problem.init(0)
    runs = {a: FedMMOT(small_problem, control_variate_step=a, theta_steps=2).run(datas, 12, target=target,
                                                                                  seed=2, init=init)
            for a in (0.0, FedMMOT(small_problem).control_variate_step)}
    h0, h1 = runs.values()
    assert h1.config["control_variate_step"] > 0
    for key in ("omega", "theta"):
        assert np.abs(h1.state[key] - init[0]).max() > 1e-3  # the run moved
        np.testing.assert_allclose(h1.state[key], h0.state[key], rtol=0, atol=1e-12)
    # ... while with sampled clients α matters (the control variates no longer cancel).
    sampled = {a: FedMMOT(small_problem, control_variate_step=a, clients_per_round=2, theta_steps=2).run(
        datas, 12, target=target, seed=2, init=init).state["omega"] for a in (0.0, 0.5)}
    assert np.abs(sampled[0.0] - sampled[0.5]).max() > 1e-6


def test_defaults_are_the_ot_experiments_settings():
    # One source of truth: `fedmm experiment ot` reads the settings it shares with the classes from their defaults.
    from fedmm.experiments.ot import DEFAULTS

    problem = TransportProblem(2, hidden_sizes=[4])
    fedmm, fedadam = FedMMOT(problem), FedAdam(problem)
    assert problem.batch_size == DEFAULTS["batch_size"] == 128
    assert fedmm.batch_size == fedadam.batch_size == 128
    assert fedmm.local_lr == fedadam.local_lr == DEFAULTS["local_lr"] == 0.003
    assert fedmm.theta_steps == DEFAULTS["theta_steps"] == 30
    assert fedmm.theta_lr == fedadam.theta_lr == DEFAULTS["theta_lr"] == 1e-3
    assert fedmm.omega_step == DEFAULTS["omega_step"] == "adam"
    assert problem.cycle_weight == DEFAULTS["cycle_weight"] and problem.conjugate_step == DEFAULTS["conjugate_step"]
    # the tuned steps on the default pair (docs/figures/README.md): γ = 3e-3 and FedAdam's lr 3e-3 at every d
    assert fedmm.schedule(1) == 3e-3 and FedMMOT(problem, omega_step="sgd").schedule(1) == 1.0
    assert fedadam.server_lr == 3e-3 and fedadam.theta_steps == 0

def test_server_validates_payloads_before_changing_state(small_problem, small_data):
    datas, target = small_data
    server, clients = FedMMOT(small_problem, identity_steps=0).build(datas, target=target, seed=0)
    for c in clients:
        c.setup(server.setup_message())
    ids = server.select(0)
    message = server.broadcast(0)
    payloads = {i: clients[i].step(message) for i in ids}
    before = server.export_state().to_arrays()
    bad = dict(payloads)
    bad[ids[-1]] = StochasticRounding(bits=8).encode(np.zeros(5), np.random.default_rng(0))
    with pytest.raises(ValueError, match=f"Client {ids[-1]}"):
        server.aggregate(0, bad)
    for k, v in server.export_state().to_arrays().items():
        np.testing.assert_array_equal(v, before[k])
    dropped = []
    server.aggregate(0, bad, on_invalid=lambda i, reason: dropped.append(i))
    assert dropped == [ids[-1]]


# --------------------------------------------------------------------------- a failing server step
ABSURD = 2  # the client whose messages make the server step fail


def _absurd(client):
    """A well-formed Identity payload of 1e200 everywhere: a valid message (finite), but the server step it
    enters overflows (the θ-steps' or Adam's moments become non-finite)."""
    return Identity().encode(np.full(client.message_size, 1e200))


class _AbsurdClient:
    """Client :data:`ABSURD` runs its step, then sends :func:`_absurd` (everything else is the client's)."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        return getattr(self.client, name)

    def step(self, message):
        self.client.step(message)
        return _absurd(self.client)


def _failing_step_algorithms(problem):
    # FedMM-OT's θ-steps and Adam's moments overflow; FedAdam's moments overflow
    return [FedMMOT(problem, identity_steps=0, theta_steps=2, omega_step="sgd", step=0.8, control_variate_step=0.5,
                    clients_per_round=3),
            FedAdam(problem, identity_steps=0, server_lr=0.01)]


def _assert_same_state(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes(), k


@pytest.mark.parametrize("which", [0, 1], ids=["FedMMOT", "FedAdam"])
def test_a_failing_ot_server_step_changes_nothing_or_goes_on_without_the_failing_message(which, small_problem,
                                                                                          small_data):
    datas, target = small_data
    algo = _failing_step_algorithms(small_problem)[which]

    def fresh():
        server, clients = algo.build(datas, target=target, seed=3)
        for c in clients:
            c.setup(server.setup_message())
        return server, clients

    server, clients = fresh()
    ids = server.select(0)
    assert ABSURD in ids
    message = server.broadcast(0)
    payloads = {i: clients[i].step(message) for i in ids}
    bad = {**payloads, ABSURD: _absurd(clients[ABSURD])}
    before = server.export_state().to_arrays()
    with pytest.raises(ValueError, match=r"Round 0: the server step failed \(ValueError: the server step's new .*"
                                         r"not finite\); the server's state is unchanged"):
        server.aggregate(0, bad)
    _assert_same_state(server.export_state().to_arrays(), before)
    dropped = []
    record = server.aggregate(0, bad, on_invalid=lambda i, reason: dropped.append((i, reason)))
    assert [i for i, _ in dropped] == [ABSURD]
    assert re.search(r"its message made the server step fail .*not finite.*without the 1 largest of the "
                     f"{len(ids)} messages.*about 1e20[01]", dropped[0][1]), dropped[0][1]
    # bit for bit the step of the other messages alone
    ref, _ = fresh()
    assert ref.aggregate(0, {i: b for i, b in payloads.items() if i != ABSURD}) == record
    _assert_same_state(server.export_state().to_arrays(), ref.export_state().to_arrays())
    assert all(np.isfinite(np.asarray(v)).all() for v in server.export_state().to_arrays().values())


class _WrappingRuntime(LocalRuntime):
    """The in-process runtime, client :data:`ABSURD` wrapped by ``wrap``."""

    def __init__(self, wrap):
        super().__init__(compiled=False)
        self.wrap = wrap

    def run(self, server, clients, n_rounds, **kwargs):
        return super().run(server, [self.wrap(c) if c.index == ABSURD else c for c in clients], n_rounds, **kwargs)


@pytest.mark.parametrize("which", [0, 1], ids=["FedMMOT", "FedAdam"])
def test_a_client_whose_messages_make_the_ot_step_fail_is_dropped_and_the_run_goes_on(which, small_problem,
                                                                                       small_data):
    # Every round that contacts client ABSURD drops it with the reason, and the run equals one in which the
    # client's step fails instead (its message never arrives): the server steps of the other messages, bit for bit.
    datas, target = small_data
    algo = _failing_step_algorithms(small_problem)[which]
    got = algo.run(datas, 4, target=target, seed=3, runtime=_WrappingRuntime(_AbsurdClient))
    ref = algo.run(datas, 4, target=target, seed=3,
                   runtime=_WrappingRuntime(lambda c: FaultyClient(c, {(ANY_ROUND, ABSURD): "raise"})))
    contacted = [r for r in got.records if ABSURD in r["dropped"]]
    assert len(got.records) == 4 and contacted  # the run went on past the failing steps
    for r in got.records:
        assert ABSURD not in r["active"]
        if ABSURD in r["dropped"]:
            assert "its message made the server step fail" in r["drop_reasons"][r["dropped"].index(ABSURD)]
    assert [r["dropped"] for r in got.records] == [r["dropped"] for r in ref.records]
    assert got.equals(ref, ignore=("wall_time", "monitor_time", "drop_reasons"))
    for k in ("omega", "theta"):
        assert got.state[k].tobytes() == ref.state[k].tobytes(), k


def test_adaptive_omega_step_state_round_trip(small_problem, small_data):
    # The server's Adam state on ω is part of its state: restoring it replays a round bit for bit.
    datas, target = small_data
    algo = FedMMOT(small_problem, omega_step="adam", step=0.01, identity_steps=0, theta_steps=1)
    server, clients = algo.build(datas, target=target, seed=4)
    for c in clients:
        c.setup(server.setup_message())
    for t in range(2):
        server.aggregate(t, {i: clients[i].step(server.broadcast(t)) for i in server.select(t)})
    saved = server.export_state().to_arrays()
    assert {k for k in saved if k.startswith("omega_adam_")} == {"omega_adam_0", "omega_adam_1", "omega_adam_2"}
    payloads = {i: clients[i].step(server.broadcast(2)) for i in server.select(2)}
    server.aggregate(2, payloads)
    first = server.export_state().to_arrays()
    server.import_state(OTServerState.from_arrays(saved))
    server.aggregate(2, payloads)
    for k, v in server.export_state().to_arrays().items():
        np.testing.assert_array_equal(v, first[k], err_msg=k)
    broken = {k: v for k, v in saved.items() if k != "omega_adam_1"}
    with pytest.raises(ValueError, match="omega_adam_1"):
        server.import_state(OTServerState.from_arrays(broken))
    with pytest.raises(ValueError, match="omega_step"):
        FedMMOT(small_problem, omega_step="newton")


def test_evaluate_cadence(small_problem, small_data):
    datas, target = small_data
    calls = []

    def evaluate(m):
        calls.append(m)
        return {"shift": float(np.mean(m(target) - target))}

    h = FedMMOT(small_problem, identity_steps=0, local_lr=0.01).run(
        datas, 5, target=target, seed=0, evaluate=evaluate, evaluate_every=2)
    shift = h["shift"]
    assert np.isnan(shift[[0, 2]]).all() and np.isfinite(shift[[1, 3, 4]]).all()
    assert "shift" in h.config["initial_evaluation"] and len(calls) == 4
    assert h.initial["shift"] == h.config["initial_evaluation"]["shift"] == h.series("shift")[0]
    assert all(isinstance(m, TransportMap) for m in calls)


# --------------------------------------------------------------------------- runtimes
def test_parties_satisfy_the_protocols(small_problem, small_data):
    from protocol_check import assert_satisfies

    from fedmm import protocols as P

    datas, target = small_data
    for algo in (FedMMOT(small_problem, identity_steps=0), FedAdam(small_problem, identity_steps=0)):
        server, clients = algo.build(datas, target=target, seed=0)
        assert_satisfies(server, P.ServerParty)
        assert_satisfies(clients[0], P.StatefulClientParty)
        assert_satisfies(server.broadcast(0), P.Message)
        message = server.broadcast(0)
        arrays = message.to_arrays()
        back = type(message).from_arrays(arrays)
        assert back.t == 0 and np.array_equal(back.omega, message.omega) and np.array_equal(back.theta, message.theta)
        # a client rebuilt from its state continues bit for bit
        clients[1].setup(server.setup_message())
        state = clients[1].export_state()
        first = clients[1].step(message)
        clients[1].import_state(state)
        assert clients[1].step(message) == first


@pytest.mark.parametrize("module", ["fedmm.models.ot", "fedmm.algorithms.ot"])
def test_docstring_examples(module):
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0 and failures == 0


# --------------------------------------------------------------------------- the one vocabulary (issue 24)
def test_the_ot_parties_keep_the_model_as_model(small_problem, small_data):
    # OTSteps(model, ...) and the servers' .model (was 'problem'), as the front ends'
    import inspect

    from fedmm.algorithms.ot import OTSteps

    assert "model" in inspect.signature(OTSteps.__init__).parameters
    datas, target = small_data
    for cls in (FedMMOT, FedAdam):
        algo = cls(small_problem, local_lr=0.05, identity_steps=5)
        descriptions = [algo.describe_data(d, i) for i, d in enumerate(datas)]
        server = algo.remote_server(len(datas), descriptions=descriptions, seed=0, public_data=target)
        assert server.model is small_problem and server.steps.model is small_problem
        assert not hasattr(server, "problem") and not hasattr(server.steps, "problem")


def test_one_name_for_the_server_theta_steps_in_both_classes(small_problem, small_data):
    # theta_steps/theta_lr: the server's Adam steps on θ in FedMM-OT and FedAdam alike; server_lr: only
    # FedAdam's Adam step on the averaged (ω, θ) update (FedMM-OT's server step on ω is `step`).
    from fedmm.algorithms.ot import OTSteps

    datas, target = small_data
    for cls in (FedMMOT, FedAdam):
        algo = cls(small_problem, theta_steps=4, theta_lr=0.02, identity_steps=0)
        assert (algo.theta_steps, algo.theta_lr) == (4, 0.02)
        assert algo.config()["theta_steps"] == 4 and algo.config()["theta_lr"] == 0.02
        assert "server_steps" not in algo.config() and not hasattr(algo, "server_steps")
        server = algo.build(datas, target=target, seed=0)[0]
        assert server.theta_steps == 4
    fedmm_server = FedMMOT(small_problem, theta_lr=0.02, identity_steps=0).build(datas, target=target, seed=0)[0]
    assert fedmm_server.steps.lr == 0.02  # FedMM-OT's steps: its θ-steps' rate
    fedadam = FedAdam(small_problem, server_lr=0.05, theta_steps=2, theta_lr=0.02, identity_steps=0)
    assert fedadam.config()["server_lr"] == 0.05 and "server_lr" not in FedMMOT(small_problem).config()
    server = fedadam.build(datas, target=target, seed=0)[0]
    assert (server.steps.lr, server.theta_lr) == (0.05, 0.02)  # the step on (ω, θ), the θ-steps
    with pytest.raises(TypeError, match="server_lr"):
        FedMMOT(small_problem, server_lr=1e-3)
    for cls in (FedMMOT, FedAdam):
        with pytest.raises(TypeError, match="server_steps"):
            cls(small_problem, server_steps=3)
    # OTSteps(lr=) was OTSteps(server_lr=): a copy pickled before the rename still loads
    steps = OTSteps(small_problem, lr=0.02, b1=0.9, b2=0.999, eps=1e-8)
    old = steps.__getstate__()
    old["server_lr"] = old.pop("lr")
    loaded = OTSteps.__new__(OTSteps)
    loaded.__setstate__(old)
    assert loaded.lr == 0.02 and not hasattr(loaded, "server_lr")


@pytest.mark.parametrize("cls", [FedMMOT, FedAdam])
def test_history_params_and_callback_state(cls, small_problem, small_data):
    datas, target = small_data
    algo = cls(model=small_problem, local_lr=0.05, identity_steps=5)
    assert algo.model is small_problem
    seen = []
    h = algo.run(datas, 3, target=target, seed=0, callback=lambda t, state: seen.append((t, state)))
    assert [t for t, _ in seen] == [0, 1, 2] and h.config["model"] == small_problem.config()
    assert sorted(h.params) == ["omega", "theta"]
    np.testing.assert_array_equal(h.params["omega"], h.state["omega"])
    np.testing.assert_array_equal(h.params["theta"], h.state["theta"])
    last = seen[-1][1]
    np.testing.assert_array_equal(last["potential"], h.state["omega"])
    np.testing.assert_array_equal(last["theta"], h.state["theta"])
    np.testing.assert_array_equal(last["params"]["omega"], h.params["omega"])
    with pytest.raises(TypeError):
        last["potential"] = None
    assert History.from_dict(h.to_dict()).equals(h)  # params saved with the History
