#!/bin/sh
# gpu-check.sh -- the GPU paths of libmooncake in one command, on a machine
# with a GPU: test_cuda, test_mooncake's device group (on the GPU and
# against the fake runtime), the Python CUDA tests, and gpu-bench (device
# put/get over shm and tcp at 1, 16 and 64 MiB, printed beside cudaMemcpy
# between the same device buffer and pinned memory, measured in the same run).
#
#   utils/gpu-check.sh                 from a checkout built with `make`
#   utils/gpu-check.sh --pack DIR      (on the build machine) DIR gets the
#                                      binaries and every shared library they
#                                      need but glibc, libstdc++ and libgcc
#   utils/gpu-check.sh --bin DIR       (on the GPU machine, from the checkout)
#                                      the binaries of DIR, LD_LIBRARY_PATH=DIR;
#                                      the Python extension is compiled there
#                                      against DIR/libmooncake.a when the
#                                      checkout has none for that python3
#
# GPU machines may have no network and no Debian packages (see
# docs/PROTOCOL.md, "Device memory"): --pack/--bin is the way binaries built
# elsewhere run there, e.g. `utils/gpu-check.sh --pack build/gpu-pack` here
# (build/ is ignored by git: carry it, about 25 MB), then
# `utils/gpu-check.sh --bin build/gpu-pack` there, from the same checkout. The CUDA runtime is found as libmooncake finds it
# (MC_CUDA_LIBRARY, else libcudart.so.13/.12/.11.0, else /usr/local/cuda/lib64);
# set MC_CUDA_LIBRARY to choose. With MC_CUDA_LIBRARY=build/tests/libfakecuda.so
# the whole check runs on a machine without a GPU (a dry run: figures are
# memcpy's). PYTHON names the python3 to use (one with pytest). Exit status
# 0 when every step passed, 1 when a step failed, 2 when something a step
# needs is missing: then nothing runs (see preflight).
#
#   utils/gpu-check.sh [--bin DIR] --preflight
#                                      only the check of what the steps need
set -u
# Run with a bare environment (env -i, a job runner) PATH may be unset:
# the shell still finds cc, but cc then cannot find its own cc1 (seen: the
# Python step failed with "cannot execute 'cc1'" after three steps ran).
: "${PATH:=/usr/local/bin:/usr/bin:/bin}"
export PATH
PY=${PYTHON:-python3}   # the python3 with pytest (and torch, for the real-GPU tensor test)
ROOT=$(cd "$(dirname "$0")/.." && pwd)

pack() {
    dir=$1
    mkdir -p "$dir" || exit 1
    for f in "$ROOT/src/mooncake-server" "$ROOT/build/tests/test_cuda" "$ROOT/build/tests/test_mooncake" \
             "$ROOT/build/tests/gpu-bench" "$ROOT/build/tests/libfakecuda.so" \
             "$ROOT/src/libmooncake/libmooncake.a" "$ROOT/src/libmooncake/mooncake.h"; do
        [ -f "$f" ] || { echo "gpu-check: $f is not built (make -C src all unit-tests)" >&2; exit 1; }
        cp "$f" "$dir/"
    done
    # Every library the programs load, but the C runtime the target has.
    for bin in "$dir/mooncake-server" "$dir/test_cuda" "$dir/test_mooncake" "$dir/gpu-bench"; do
        ldd "$bin" | awk '/=> \//{print $3}'
    done | sort -u | while read -r lib; do
        case $(basename "$lib") in
            libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*|libcudart.so*) ;;
            *) cp -L "$lib" "$dir/" ;;
        esac
    done
    echo "gpu-check: $dir holds $(ls "$dir" | wc -l) files ($(du -sh "$dir" | cut -f1)); on the GPU machine: utils/gpu-check.sh --bin $dir"
}

BIN= ONLY_PREFLIGHT=
while [ $# -gt 0 ]; do
    case $1 in
        --pack) pack "${2:?--pack DIR}"; exit 0 ;;
        --bin) BIN=$(cd "${2:?--bin DIR}" && pwd) || exit 2; shift ;;
        --preflight) ONLY_PREFLIGHT=1 ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        *) echo "gpu-check: unknown option $1" >&2; sed -n '2,31p' "$0" >&2; exit 2 ;;
    esac
    shift
done

if [ -n "$BIN" ]; then
    SERVER=$BIN/mooncake-server TEST_CUDA=$BIN/test_cuda TEST_MOONCAKE=$BIN/test_mooncake
    GPU_BENCH=$BIN/gpu-bench FAKE=$BIN/libfakecuda.so
    export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    SERVER=$ROOT/src/mooncake-server TEST_CUDA=$ROOT/build/tests/test_cuda TEST_MOONCAKE=$ROOT/build/tests/test_mooncake
    GPU_BENCH=$ROOT/build/tests/gpu-bench FAKE=$ROOT/build/tests/libfakecuda.so
fi
export MC_SERVER=$SERVER MOONCAKE_SERVER=$SERVER MC_FAKE_CUDA_LIBRARY=$FAKE
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
FAILED=

step() { # name command...
    name=$1
    shift
    echo
    echo "==== $name"
    if "$@"; then echo "==== $name: ok"; else echo "==== $name: FAILED"; FAILED="$FAILED
  $name"; fi
}

# The real runtime, as libmooncake would find it (for the runs that name it).
CUDART=${MC_CUDA_LIBRARY:-}
if [ -z "$CUDART" ]; then
    for c in $(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.[0-9]/{print $NF}') \
             /usr/local/cuda/lib64/libcudart.so.13 /usr/local/cuda/lib64/libcudart.so.12; do
        [ -f "$c" ] && { CUDART=$c; break; }
    done
fi
echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "CUDA runtime: ${CUDART:-none found}; binaries: ${BIN:-the checkout}"

run_test_cuda() { MC_CUDA_LIBRARY=${MC_CUDA_LIBRARY:-} "$TEST_CUDA"; }
run_device_gpu() { [ -n "$CUDART" ] && MC_CUDA_LIBRARY=$CUDART "$TEST_MOONCAKE" device; }
run_device_fake() { MC_CUDA_LIBRARY=$FAKE "$TEST_MOONCAKE" device; }

python_path() {
    # The checkout's build when it imports; else the extension compiled here.
    if PYTHONPATH=$ROOT/build/python $PY -c 'import mooncake' 2>/dev/null && [ -z "$BIN" ]; then
        echo "$ROOT/build/python"
        return 0
    fi
    [ -n "$BIN" ] || return 1
    inc=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    suf=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    libs=
    for l in libnuma.so.1 libibverbs.so.1 librdmacm.so.1; do [ -f "$BIN/$l" ] && libs="$libs $BIN/$l"; done
    mkdir -p "$TMP/site/mooncake" && cp "$ROOT"/python/mooncake/*.py "$TMP/site/mooncake/" &&
        cc -O2 -shared -fPIC -I"$inc" -I"$BIN" "$ROOT/python/_mooncake.c" "$ROOT/python/_mooncake_args.c" \
            "$ROOT/python/_mooncake_buffer.c" "$ROOT/python/_mooncake_async.c" "$ROOT/python/_mooncake_session.c" \
            "$BIN/libmooncake.a" $libs \
            -ldl -pthread -o "$TMP/site/mooncake/_mooncake$suf" >&2 &&
        echo "$TMP/site"
}

run_python() {
    pp=$(python_path) || { echo "no Python binding (build it with make, or pass --bin)"; return 1; }
    PYTHONPATH=$pp $PY -m pytest -q -p no:cacheprovider "$ROOT/tests/python/test_cuda_fake.py" \
        "$ROOT/tests/python/test_store.py" -k "cuda"
}

run_bench() {
    port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$SERVER" --port "$port" --bind 127.0.0.1 --unixsocket "$TMP/mc.sock" --dir "$TMP" --segment-size 2gb \
        >"$TMP/server.log" 2>&1 &
    spid=$!
    i=0
    while [ ! -S "$TMP/mc.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    MC_CUDA_LIBRARY=${CUDART:-} "$GPU_BENCH" "unix://$TMP/mc.sock" "127.0.0.1:$port" 1 16 64
    rc=$?
    kill "$spid" && wait "$spid"
    return $rc
}

# What the steps need, all of it asked before any runs: a machine that
# lacks a piece (a library not carried along, no pytest, no compiler for the
# Python extension, no CUDA runtime) is told so at once, with every missing
# piece named, instead of running the steps that can and failing the others
# one by one with the loader's or the compiler's words in between.
preflight() {
    missing=
    need() { missing="$missing
  $1"; }
    for b in "$SERVER" "$TEST_CUDA" "$TEST_MOONCAKE" "$GPU_BENCH"; do
        if [ ! -x "$b" ]; then
            if [ -n "$BIN" ]; then need "$b: not there (utils/gpu-check.sh --pack on the build machine)"
            else need "$b: not there (make -C src all unit-tests)"; fi
            continue
        fi
        # What ldd prints, from the loader itself (ldd may not be installed).
        libs=$(LD_TRACE_LOADED_OBJECTS=1 "$b" 2>&1 | awk '/not found/{print $1}' | tr '\n' ' ')
        [ -z "$libs" ] || need "$(basename "$b") cannot load: $libs"
    done
    [ -f "$FAKE" ] || need "$FAKE: not there"
    [ -n "$CUDART" ] || need "a CUDA runtime (libcudart.so.13/.12/.11.0 in ldconfig or /usr/local/cuda/lib64; or set MC_CUDA_LIBRARY)"
    if ! command -v "$PY" >/dev/null 2>&1; then
        need "$PY (set PYTHON to a python3 with pytest)"
    elif ! "$PY" -c 'import pytest' >/dev/null 2>&1; then
        need "pytest for $PY (set PYTHON to a python3 that has it)"
    elif [ -n "$BIN" ] || ! PYTHONPATH=$ROOT/build/python "$PY" -c 'import mooncake' >/dev/null 2>&1; then
        # The extension is compiled here: a C compiler and Python.h.
        inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
        if [ -z "$BIN" ]; then
            need "the Python binding (make -C src python), or pass --bin"
        elif ! command -v cc >/dev/null 2>&1; then
            need "cc, to compile the Python extension"
        elif ! printf '#include <Python.h>\nint main(void) { return 0; }\n' |
                cc -fsyntax-only -x c -I"$inc" - >"$TMP/cc.out" 2>&1; then
            need "cc cannot compile against Python.h ($inc): $(head -n 3 "$TMP/cc.out" | tr '\n' ' ')"
        fi
    fi
    if [ -n "$missing" ]; then
        echo "gpu-check: missing, nothing run:$missing"
        return 1
    fi
    echo "gpu-check: preflight: everything the steps need is there"
}

preflight || exit 2
[ -z "$ONLY_PREFLIGHT" ] || exit 0

step "test_cuda" run_test_cuda
step "test_mooncake device (the GPU: ${CUDART:-no runtime})" run_device_gpu
step "test_mooncake device (the fake runtime)" run_device_fake
step "Python CUDA tests" run_python
step "gpu-bench: device put/get beside cudaMemcpy to pinned memory" run_bench

echo
if [ -n "$FAILED" ]; then
    echo "gpu-check: FAILED:$FAILED"
    exit 1
fi
echo "gpu-check: all passed"
