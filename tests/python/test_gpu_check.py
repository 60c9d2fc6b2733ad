"""utils/gpu-check.sh as a GPU machine meets it: binaries carried in a
folder (--bin), run with a bare environment (env -i: no PATH, no PYTHONPATH),
as notes/gpu-device.md describes. What it needs is asked before any step
runs: a machine that lacks a piece is told which, and nothing half-runs.

The folder here holds links to this checkout's build, which is enough for
the script: it reads files and runs them with LD_LIBRARY_PATH set to the
folder. Nothing in these tests starts a server or touches a GPU (only the
preflight runs), so they run on every machine the build does.
"""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "utils", "gpu-check.sh")
FILES = {
    "mooncake-server": "src/mooncake-server",
    "test_cuda": "build/tests/test_cuda",
    "test_mooncake": "build/tests/test_mooncake",
    "gpu-bench": "build/tests/gpu-bench",
    "libfakecuda.so": "build/tests/libfakecuda.so",
    "libmooncake.a": "src/libmooncake/libmooncake.a",
    "mooncake.h": "src/libmooncake/mooncake.h",
}


def carried(tmp_path, leave_out=()):
    """A --bin folder: the built files, linked, but those left out."""
    for rel in FILES.values():
        if not os.path.exists(os.path.join(ROOT, rel)):
            pytest.skip(f"{rel} is not built (make -C src all unit-tests)")
    d = tmp_path / "pack"
    d.mkdir()
    for name, rel in FILES.items():
        if name not in leave_out:
            os.symlink(os.path.join(ROOT, rel), d / name)
    return d


def bare(*args, **env):
    """The script under env -i, with only the variables given."""
    cmd = ["env", "-i"] + [f"{k}={v}" for k, v in env.items()] + ["/bin/sh", SCRIPT] + list(args)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, cwd="/")


def test_bare_environment_has_all_it_needs(tmp_path):
    # Before: with PATH unset the shell found cc but cc could not find cc1,
    # and the Python step failed after three steps had run.
    d = carried(tmp_path)
    r = bare("--bin", str(d), "--preflight", MC_CUDA_LIBRARY=d / "libfakecuda.so", PYTHON="/usr/bin/python3",
             TMPDIR=tmp_path)
    assert r.returncode == 0, r.stdout
    assert "everything the steps need is there" in r.stdout


def test_missing_pieces_are_named_and_nothing_runs(tmp_path):
    # Before: every step ran that could (test_cuda, the device group, ...)
    # and the others failed one by one, the bench after a 10 s wait.
    d = carried(tmp_path, leave_out=("gpu-bench", "libfakecuda.so"))
    r = bare("--bin", str(d), MC_CUDA_LIBRARY=os.path.join(ROOT, "build/tests/libfakecuda.so"),
             PYTHON="/nonexistent/python3", TMPDIR=tmp_path)
    assert r.returncode == 2, r.stdout
    assert "missing, nothing run" in r.stdout
    for piece in ("gpu-bench: not there", "libfakecuda.so: not there", "/nonexistent/python3"):
        assert piece in r.stdout, r.stdout
    assert "====" not in r.stdout  # no step began

