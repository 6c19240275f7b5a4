# SPDX-License-Identifier: BSD-3-Clause
"""The C API is usable without Python: compile and run a small C program that
includes ``fedmm_kernels.h`` and links ``libfedmm_kernels.a``."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import fedmm

SOURCE = Path(__file__).parent / "c_api" / "quantize_demo.c"
HASH_SOURCE = Path(__file__).parent / "c_api" / "payload_hash.c"
FUZZ_SOURCE = Path(__file__).parent / "c_api" / "decode_fuzz.c"
LASSO_SOURCE = Path(__file__).parent / "c_api" / "lasso_demo.c"
CHECK_RANGE_SOURCE = Path(__file__).parent / "c_api" / "check_range.c"
FEDMLS_EX_SOURCE = Path(__file__).parent / "c_api" / "fedmls_ex.c"
LASSO_GRAM_EX_SOURCE = Path(__file__).parent / "c_api" / "lasso_gram_ex.c"
UNIT_NORM_EX_SOURCE = Path(__file__).parent / "c_api" / "unit_norm_ex.c"
# kernels sources (the quantizer, the wire codec), present in a source checkout only
KERNEL_SOURCES = [Path(__file__).parents[2] / "src" / "kernels" / name
                  for name in ("quantize.c", "wire.c", "common.c")]


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) on PATH")
    return cc


def test_header_and_library_are_installed():
    assert Path(fedmm.get_include(), "fedmm_kernels.h").is_file()
    assert Path(fedmm.get_library_dir(), "libfedmm_kernels.a").is_file()


#: The per-family headers next to the umbrella fedmm_kernels.h (installed or in the source tree).
FAMILY_HEADERS = sorted(p.name for p in Path(fedmm.get_include()).glob("fedmm_*.h") if p.name != "fedmm_kernels.h")


def test_umbrella_header_includes_every_family_header_and_declares_nothing_else():
    umbrella = Path(fedmm.get_include(), "fedmm_kernels.h").read_text(encoding="utf-8")
    included = re.findall(r'^#include "(fedmm_\w+\.h)"$', umbrella, flags=re.MULTILINE)
    assert len(included) >= 10 and sorted(included) == FAMILY_HEADERS
    # no declaration of its own: only comments and preprocessor lines
    code = re.sub(r"/\*.*?\*/", "", umbrella, flags=re.DOTALL)
    assert [line for line in code.splitlines() if line.strip() and not line.startswith("#")] == []


@pytest.mark.parametrize("header", FAMILY_HEADERS)
def test_family_header_compiles_on_its_own(header, tmp_path):
    # a C file that includes only this header (twice: the include guard), strict C99
    source = tmp_path / "only.c"
    source.write_text(f'#include "{header}"\n#include "{header}"\nint main(void) {{ return 0; }}\n')
    build = subprocess.run(
        [_compiler(), "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
         "-I", fedmm.get_include(), str(source)], capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr


MATRIX_VIEWS = r"""
#include <stdio.h>
#include "fedmm_lasso.h"
int main(void)
{
    double d[6] = {0}, z[4] = {0}, h[4], work[1];
    fedmm_lasso_options_t opts = {0.1, 0, 1e-10, 100, 0, FEDMM_LASSO_AUTO};
    int64_t offsets[2] = {0, 2};
    fedmm_dictionary_statistics_out_t out = {h, NULL, NULL, NULL, NULL, NULL};
    fedmm_matrix_t D = {d, 2, 3, 2}, Z = {z, 2, 2, 2}, Z3 = {z, 3, 2, 3}, wide = {d, 2, 3, (int64_t)1 << 40};
    /* refused before anything is read: NULL views or outputs, row counts that differ, sizes beyond the BLAS int */
    if (fedmm_dictionary_statistics_ex(NULL, &Z, &opts, 1, offsets, &out, work, NULL, NULL) != FEDMM_EINVAL ||
        fedmm_dictionary_statistics_ex(&D, &Z, &opts, 1, offsets, NULL, work, NULL, NULL) != FEDMM_EINVAL ||
        fedmm_dictionary_statistics_ex(&D, &Z3, &opts, 1, offsets, &out, work, NULL, NULL) != FEDMM_EINVAL ||
        fedmm_dictionary_statistics_ex(&wide, &Z, &opts, 1, offsets, &out, work, NULL, NULL) != FEDMM_EINVAL)
        return 1;
    /* valid views reach the kernel, which refuses the missing BLAS table as the plain call does */
    if (fedmm_dictionary_statistics_ex(&D, &Z, &opts, 1, offsets, &out, work, NULL, NULL) !=
        fedmm_dictionary_statistics(2, 3, 2, d, 2, z, 2, &opts, 1, offsets, h, NULL, NULL, NULL, NULL, NULL,
                                    work, NULL))
        return 2;
    printf("OK\n");
    return 0;
}
"""


def test_matrix_views_entry_point_checks_its_structs(tmp_path):
    # fedmm_dictionary_statistics_ex (fedmm_matrix_t views, one output struct); its numbers are checked
    # through fedmm.kernels.dictionary_statistics, whose Cython wrapper calls it (tests/kernels/test_lasso.py)
    source = tmp_path / "views.c"
    source.write_text(MATRIX_VIEWS)
    assert _run_installed(source, tmp_path) == "OK"


def _run_installed(source, tmp_path):
    """Build ``source`` against the installed header and library, run it, return its output."""
    exe = tmp_path / source.stem
    cmd = [
        _compiler(), "-std=c99", "-O1", "-Wall", "-Werror",
        "-I", fedmm.get_include(), str(source),
        "-L", fedmm.get_library_dir(), "-lfedmm_kernels", "-lm", "-o", str(exe),
    ]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.strip()


def test_c_program_quantizes_with_its_own_generator(tmp_path):
    # quantizer specs, fedmm_quantizer_check/apply, encode/decode round trip
    assert _run_installed(SOURCE, tmp_path) == "OK"


def test_c_program_solves_lasso_with_options(tmp_path):
    # fedmm_lasso_gram with a fedmm_lasso_options_t: every method, positive, warm start, bad options
    assert _run_installed(LASSO_SOURCE, tmp_path) == "OK"


def test_message_range_check_matches_a_plain_scan(tmp_path):
    # fedmm_check_range screens blocks of values without branches (SSE2 where available); whatever the length
    # and wherever NaN, +-inf or an out-of-range value sits, it must say what the first offending value says
    assert _run_installed(CHECK_RANGE_SOURCE, tmp_path) == "OK"


def test_fedmls_struct_entry_point_equals_the_flat_one(tmp_path):
    # fedmm_fedmls_local_steps_ex (fedmm_nonsmooth_data_t, fedmm_minibatches_t): the Cython wrapper calls it,
    # and its numbers are the flat function's bit for bit
    assert _run_installed(FEDMLS_EX_SOURCE, tmp_path) == "OK"


def test_lasso_gram_struct_entry_point_equals_the_flat_ones(tmp_path):
    # fedmm_lasso_gram_ex (fedmm_matrix_t / fedmm_matrix_mut_t views): the Cython wrapper calls it; the flat
    # fedmm_lasso_gram and fedmm_lasso_gram_interruptible give the same bits on padded leading dimensions,
    # the codes meet the KKT conditions, and views that do not fit are refused
    assert _run_installed(LASSO_GRAM_EX_SOURCE, tmp_path) == "OK"


def test_unit_norm_struct_entry_point_equals_the_flat_one(tmp_path):
    # fedmm_dictionary_update_unit_norm_ex (matrix views): the Cython wrapper calls it; the flat form gives the
    # same bits and status, converged or capped, and views that do not fit are refused
    assert _run_installed(UNIT_NORM_EX_SOURCE, tmp_path) == "OK"


def _build_and_run(cmd, exe):
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.strip()


ASAN_FLAGS = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")


def _require_asan(cc, tmp_path):
    probe = subprocess.run([cc, "-fsanitize=address,undefined", "-x", "c", "-", "-o",
                            str(tmp_path / "probe")], input="int main(void){return 0;}",
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("the C compiler has no AddressSanitizer runtime")


@pytest.mark.parametrize(
    "flags",
    [("-O0", "-DFEDMM_NO_SIMD"), ASAN_FLAGS],
    ids=["portable-O0", "simd-asan"],
)
def test_payloads_do_not_depend_on_build_flags(tmp_path, flags):
    # The installed library (optimized, AVX2 loops picked at run time on
    # x86) and the kernels compiled from source -- the portable loops at -O0,
    # or the SIMD loops under AddressSanitizer (exact-size heap buffers: no
    # access out of bounds) -- must write identical payloads and values and
    # consume the same random numbers: no FMA contraction or reassociation
    # anywhere.
    if not all(p.is_file() for p in KERNEL_SOURCES):
        pytest.skip("kernel sources not available (not a source checkout)")
    cc = _compiler()
    if flags == ASAN_FLAGS:
        _require_asan(cc, tmp_path)
    lib_hash = _build_and_run(
        [cc, "-std=c99", "-I", fedmm.get_include(), str(HASH_SOURCE),
         "-L", fedmm.get_library_dir(), "-lfedmm_kernels", "-lm", "-o", str(tmp_path / "lib_hash")],
        tmp_path / "lib_hash",
    )
    src_hash = _build_and_run(
        [cc, "-std=c99", *flags, "-D_POSIX_C_SOURCE=200809L",
         "-I", str(KERNEL_SOURCES[0].parent), str(HASH_SOURCE), *map(str, KERNEL_SOURCES),
         "-lm", "-o", str(tmp_path / "src_hash")],
        tmp_path / "src_hash",
    )
    assert len(lib_hash) == 16 and lib_hash == src_hash


def test_decoder_never_reads_out_of_bounds_under_asan(tmp_path):
    # Truncated, extended, bit-flipped and random payloads in exact-size heap
    # buffers, decoded by the kernels compiled from source with
    # AddressSanitizer: any out-of-bounds read aborts the program.
    if not all(p.is_file() for p in KERNEL_SOURCES):
        pytest.skip("kernel sources not available (not a source checkout)")
    cc = _compiler()
    _require_asan(cc, tmp_path)
    out = _build_and_run(
        [cc, "-std=c99", *ASAN_FLAGS, "-DFEDMM_NO_SIMD", "-D_POSIX_C_SOURCE=200809L",
         "-I", str(KERNEL_SOURCES[0].parent), str(FUZZ_SOURCE), *map(str, KERNEL_SOURCES),
         "-lm", "-o", str(tmp_path / "fuzz")],
        tmp_path / "fuzz",
    )
    words = out.split()
    assert words[0] == "OK" and int(words[1]) > 0 and int(words[2]) > 0, out


POOL_SOURCE = Path(__file__).parent / "c_api" / "pool_stress.c"
POOL_KERNEL_SOURCE = Path(__file__).parents[2] / "src" / "kernels" / "pool.c"


def test_c_program_runs_jobs_on_the_installed_worker_pool(tmp_path):
    # every item once, on a valid worker, its writes visible after fedmm_pool_run
    exe = tmp_path / "pool"
    out = _build_and_run(
        [_compiler(), "-std=c99", "-O1", "-Wall", "-Werror", "-pthread", "-I", fedmm.get_include(),
         str(POOL_SOURCE), "-L", fedmm.get_library_dir(), "-lfedmm_kernels", "-lm", "-o", str(exe)], exe)
    assert out == "OK 4"


@pytest.mark.parametrize("flags", [("-fsanitize=thread",), ("-DFEDMM_NO_THREADS",)], ids=["tsan", "no-threads"])
def test_worker_pool_from_source_is_race_free_and_has_a_serial_build(tmp_path, flags):
    # ThreadSanitizer aborts on any data race of the pool's protocol; the build without threads runs
    # every job on the calling thread (a pool of size 1)
    if not POOL_KERNEL_SOURCE.is_file():
        pytest.skip("kernel sources not available (not a source checkout)")
    cc = _compiler()
    exe = tmp_path / "pool"
    if flags[0] == "-fsanitize=thread":
        probe = subprocess.run([cc, "-fsanitize=thread", "-x", "c", "-", "-o", str(tmp_path / "probe")],
                               input="int main(void){return 0;}", capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            pytest.skip("the C compiler has no ThreadSanitizer runtime")
    cmd = [cc, "-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", *flags, "-D_POSIX_C_SOURCE=200809L",
           "-pthread", "-I", str(POOL_KERNEL_SOURCE.parent), str(POOL_SOURCE), str(POOL_KERNEL_SOURCE),
           "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TSAN_OPTIONS="halt_on_error=1"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == ("OK 1" if "-DFEDMM_NO_THREADS" in flags else "OK 4")
