"""Builds the mooncake package's extension for pip:

    pip install --no-build-isolation ./python

offline, with Debian's setuptools and python3-dev. In a checkout the
extension is linked with ../src/libmooncake/libmooncake.a, built by the project's own
Makefile (same flags, RDMA and CUDA as configured there); from elsewhere it
links an installed libmooncake found through pkg-config (make install).
`make` builds the same extension in place into build/python without pip.
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "src"))
LIBDIR = os.path.join(SRC, "libmooncake")


def version():
    for path in (os.path.join(HERE, "..", "VERSION"), os.path.join(HERE, "VERSION")):
        if os.path.exists(path):
            return open(path).read().strip()
    return subprocess.check_output(["pkg-config", "--modversion", "mooncake"], text=True).strip()


def library():
    if os.path.exists(os.path.join(LIBDIR, "mooncake.c")):
        subprocess.check_call(["make", "-s", "-C", SRC, "libmooncake.a"])
        libs = subprocess.check_output(["make", "-s", "--no-print-directory", "-C", SRC, "print-mc-libs"],
                                       text=True)
        return {"include_dirs": [LIBDIR], "extra_objects": [os.path.join(LIBDIR, "libmooncake.a")],
                "extra_link_args": shlex.split(libs)}
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "mooncake"], text=True)
        libs = subprocess.check_output(["pkg-config", "--libs", "mooncake"], text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("libmooncake not found: build from a Mooncake-C checkout, or `make install` first "
                         f"so that pkg-config finds mooncake ({e})")
    return {"extra_compile_args": shlex.split(cflags), "extra_link_args": shlex.split(libs)}


setup(
    version=version(),
    ext_modules=[Extension("mooncake._mooncake",
                           ["_mooncake.c", "_mooncake_args.c", "_mooncake_buffer.c", "_mooncake_async.c", "_mooncake_session.c"],
                           depends=["_mooncake.h"],
                           define_macros=[("MOONCAKE_VERSION", '"%s"' % version())], **library())],
)
