"""`pip install .` in a fresh venv, then `import cgdr`, works; so does the
wheel `pip wheel .` makes, installed into another fresh venv.

The first is a user's install: build isolation (scikit-build-core and
pybind11 fetched into a new environment, the build directory started
afresh), in its own build directory so that build-pip/ stays the
incremental one. It compiles the scalar target alone
(cmake.define.CGDR_HWY_TARGETS): what isolation can break is the build's
tools and the bindings, not the kernels, and every SIMD target, cold, took
6 of test-clients' minutes on AMD EPYC Zen 1, where `make test-clients` has
already built them all with the same CMake for its own `pip install .`. The
wheel is built by the running venv without isolation, which reuses
build-pip/: every target."""
import ast
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = ("import cgdr, numpy as np; "
         "x = np.ones((1, 3, 1, 4), np.float32); b = np.full((1, 3, 1), 0.5, np.float32); "
         "o, s = cgdr.chunk_gated_delta_rule(x, x, x, None, b, output_final_state=True); "
         "print(repr((cgdr.__version__, cgdr.active_target(), o.shape, s.shape, cgdr.__file__)))")


def run(*cmd, cwd=None):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def fresh_venv(path):
    run(sys.base_prefix + "/bin/python3", "-m", "venv", str(path))
    return str(path / "bin" / "python")


def imports_installed_cgdr(python, tmp_path):
    version, target, o_shape, s_shape, where = ast.literal_eval(run(python, "-c", CHECK, cwd=str(tmp_path)))
    assert o_shape == (1, 3, 1, 4) and s_shape == (1, 1, 4, 4) and target
    assert where.startswith(str(tmp_path)), where  # the venv's copy, not the source tree's
    return target


def test_pip_install_dot_in_fresh_venv(tmp_path):
    python = fresh_venv(tmp_path / "venv")
    # --config-settings, not -C: the venv's pip is Python's bundled one (23.0 on Debian 12), which lacks -C
    run(python, "-m", "pip", "install", "-q", "--config-settings", f"build-dir={tmp_path / 'build'}",
        "--config-settings", "cmake.define.CGDR_HWY_TARGETS=(HWY_SCALAR)", ROOT, cwd=str(tmp_path))
    assert imports_installed_cgdr(python, tmp_path) in ("SCALAR", "EMU128")


def test_wheel_imports_in_fresh_venv(tmp_path):
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), ROOT)
    (wheel,) = os.listdir(wheels)
    assert wheel.startswith("cgdr-") and wheel.endswith(".whl"), wheel
    python = fresh_venv(tmp_path / "venv")
    run(python, "-m", "pip", "install", "-q", str(wheels / wheel), cwd=str(tmp_path))
    imports_installed_cgdr(python, tmp_path)
