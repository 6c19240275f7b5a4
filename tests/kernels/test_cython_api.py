# SPDX-License-Identifier: BSD-3-Clause
"""The public Cython API: a downstream module ``cimport``s ``fedmm.fedmm_kernels``
(and one kernel family's own ``.pxd``, ``fedmm.fedmm_lasso``, whose declarations must be
the umbrella's very ones), is compiled in a temporary directory and calls kernels through
their option structs (``fedmm_quantizer_t``, ``fedmm_lasso_options_t``) on a NumPy Generator."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import fedmm

PYX = textwrap.dedent(
    '''
    # cython: language_level=3
    import numpy as np
    from cpython.pycapsule cimport PyCapsule_GetPointer
    from fedmm.fedmm_kernels cimport (FEDMM_LASSO_AUTO, FEDMM_NORM_L2, FEDMM_OK, FEDMM_SCHEME_BLOCKP,
                                      fedmm_bitgen_t, fedmm_lasso_gram, fedmm_lasso_gram_work,
                                      fedmm_lasso_options_t, fedmm_quantize_f64, fedmm_quantizer_apply,
                                      fedmm_quantizer_check, fedmm_quantizer_t, fedmm_strerror)
    # one family's .pxd: its function takes the umbrella's fedmm_lasso_options_t (the same type)
    from fedmm.fedmm_lasso cimport fedmm_lasso_gram as family_lasso_gram

    cdef fedmm_bitgen_t *bitgen(generator):
        return <fedmm_bitgen_t *>PyCapsule_GetPointer(generator.bit_generator.capsule, "BitGenerator")

    def blockp(const double[::1] x, Py_ssize_t block, generator):
        out = np.empty(x.shape[0])
        cdef double[::1] o = out
        cdef fedmm_quantizer_t spec = fedmm_quantizer_t(FEDMM_SCHEME_BLOCKP, 2, FEDMM_NORM_L2, block)
        cdef fedmm_bitgen_t *rng = bitgen(generator)
        cdef int status
        with generator.bit_generator.lock, nogil:
            status = fedmm_quantize_f64(&x[0], x.shape[0], &spec, rng, &o[0])
        if status != FEDMM_OK:
            raise ValueError(fedmm_strerror(status).decode())
        return out

    def apply(const double[::1] x, int scheme, int bits, int norm, size_t block, generator):
        out = np.empty(x.shape[0])
        cdef double[::1] o = out
        cdef fedmm_quantizer_t spec
        spec.scheme, spec.bits, spec.norm, spec.block = scheme, bits, norm, block
        if fedmm_quantizer_check(&spec, x.shape[0]) != FEDMM_OK:
            raise ValueError("invalid quantizer")
        cdef fedmm_bitgen_t *rng = bitgen(generator)
        cdef int status
        with generator.bit_generator.lock, nogil:
            status = fedmm_quantizer_apply(&spec, &x[0], x.shape[0], rng, &o[0])
        if status != FEDMM_OK:
            raise ValueError(fedmm_strerror(status).decode())
        return out

    def lasso_gram(const double[::1, :] G, const double[::1, :] C, double lam, bint positive):
        cdef int K = G.shape[0], b = C.shape[1]
        H = np.zeros((K, b), order="F")
        cdef double[::1, :] h = H
        cdef double[::1] work = np.empty(fedmm_lasso_gram_work(K))
        cdef fedmm_lasso_options_t opts
        opts.lam, opts.positive, opts.tol, opts.max_iter = lam, positive, 1e-12, 1000
        opts.warm_start, opts.method = 0, FEDMM_LASSO_AUTO
        cdef int status
        with nogil:
            status = family_lasso_gram(K, b, &G[0, 0], K, &C[0, 0], K, NULL, &opts, &h[0, 0], K,
                                       NULL, NULL, &work[0])
        if status != FEDMM_OK:
            raise ValueError(fedmm_strerror(status).decode())
        return H
    '''
)

SETUP = textwrap.dedent(
    '''
    import sys
    from Cython.Build import cythonize
    from setuptools import Extension, setup

    include, libdir, cyinc = sys.argv.pop(1), sys.argv.pop(1), sys.argv.pop(1)
    ext = Extension("downstream", ["downstream.pyx"], include_dirs=[include],
                    library_dirs=[libdir], libraries=["fedmm_kernels", "m"])
    setup(name="downstream", ext_modules=cythonize([ext], include_path=[cyinc], quiet=True))
    '''
)

CHECK = textwrap.dedent(
    '''
    import numpy as np
    import downstream
    from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
    from fedmm.kernels import lasso_gram, quantize_blockp
    x = np.random.default_rng(0).standard_normal(1000)
    ours = downstream.blockp(x, 100, np.random.default_rng(42))
    ref = quantize_blockp(x, block_size=100, rng=np.random.default_rng(42))
    assert np.array_equal(ours.view(np.uint64), ref.view(np.uint64)), "results differ"
    try:
        downstream.blockp(np.array([1.0, np.nan]), 2, np.random.default_rng(0))
    except ValueError as exc:
        assert "non-finite" in str(exc)
    else:
        raise AssertionError("NaN not reported")
    # fedmm_quantizer_apply on the (scheme, bits, norm, block) of each compressor
    for comp, spec in [(BlockQuantizer(64), (1, 2, 1, 64)), (StochasticRounding(8, "inf", 100), (2, 8, 2, 100)),
                       (Identity(), (0, 0, 0, 0))]:
        ours = downstream.apply(x, *spec, np.random.default_rng(7))
        assert np.array_equal(ours.view(np.uint64), comp.quantize(x, np.random.default_rng(7)).view(np.uint64)), comp
    try:
        downstream.apply(x, 1, 3, 1, 64, np.random.default_rng(0))
    except ValueError as exc:
        assert "invalid quantizer" in str(exc)
    else:
        raise AssertionError("bad spec accepted")
    # fedmm_lasso_gram with a fedmm_lasso_options_t
    D = np.random.default_rng(1).standard_normal((20, 8))
    Z = np.random.default_rng(2).standard_normal((20, 5))
    G, C = np.asfortranarray(D.T @ D), np.asfortranarray(D.T @ Z)
    for positive in (False, True):
        ours = downstream.lasso_gram(G, C, 0.3, positive)
        ref = lasso_gram(G, C, 0.3, positive=positive, tol=1e-12)
        assert np.array_equal(ours, ref), positive
    print("OK")
    '''
)


def test_downstream_cython_module_cimports_the_kernels(tmp_path):
    pytest.importorskip("Cython", reason="Cython is needed to build the downstream module")
    pytest.importorskip("setuptools", reason="setuptools is needed to build the downstream module")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on PATH")
    (tmp_path / "downstream.pyx").write_text(PYX)
    (tmp_path / "setup.py").write_text(SETUP)
    (tmp_path / "check.py").write_text(CHECK)
    build = subprocess.run(
        [sys.executable, "setup.py", fedmm.get_include(), fedmm.get_library_dir(),
         fedmm.get_cython_include(), "build_ext", "--inplace", "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CFLAGS": "-O0"},  # a fast compile is all this test needs
    )
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([sys.executable, "check.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
