#!/usr/bin/env bash
# tests/fuzz/run.sh -- a short libFuzzer run of the RESP parser, as a test.
#
# Builds build/fuzz/fuzz_resp when it is missing or older than its sources,
# fuzzes for ${FUZZ_SECONDS:-20} seconds on a scratch copy of tests/fuzz/seeds
# (inputs up to 4096 bytes), prints libFuzzer's summary and ends with the
# line the test runner sums: "1 passed, 0 failed" or "0 passed, 1 failed".
# Without clang's libFuzzer runtime (Debian: clang libclang-rt-14-dev) it
# says so and ends with "0 passed, 0 failed".
#
# A crash leaves its input in build/fuzz/ (crash-*, printed in hex here);
# replay it with:  build/fuzz/fuzz_resp build/fuzz/crash-...
#
# It may be run from anywhere, or through a symlink such as
# build/tests/test_fuzz_resp: the repository is found from the script's own
# location (or $MC_ROOT).
set -u

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
CLANG=${CLANG:-clang}

skip() {
    echo "SKIP: $*"
    echo "0 passed, 0 failed"
    exit 0
}

failed() {
    echo "FAIL: $*"
    echo "0 passed, 1 failed"
    exit 1
}

# ---- where things are ------------------------------------------------------
if [ -n "${MC_ROOT:-}" ]; then
    ROOT=$MC_ROOT
else
    self=$(readlink -f "$0" 2>/dev/null || echo "$0")
    ROOT=$(cd "$(dirname "$self")/../.." 2>/dev/null && pwd)
    [ -f "$ROOT/tests/fuzz/fuzz_resp.c" ] || ROOT=$(pwd)
fi
SRC=$ROOT/src
FUZZ_SRC=$ROOT/tests/fuzz/fuzz_resp.c
SEEDS=$ROOT/tests/fuzz/seeds
OUTDIR=$ROOT/build/fuzz
BIN=$OUTDIR/fuzz_resp
[ -f "$FUZZ_SRC" ] || failed "cannot find tests/fuzz/fuzz_resp.c (set MC_ROOT to the repository)"
[ -d "$SEEDS" ] || failed "cannot find $SEEDS"

# ---- is there a libFuzzer to link with? -------------------------------------
command -v "$CLANG" >/dev/null 2>&1 || skip "clang not found (Debian: apt-get install clang libclang-rt-14-dev)"
probe_dir=$(mktemp -d "${TMPDIR:-/tmp}/fuzzprobe.XXXXXX") || failed "mktemp"
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    > "$probe_dir/probe.c"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.c" -o "$probe_dir/probe" \
        >"$probe_dir/log" 2>&1; then
    sed 's/^/  /' "$probe_dir/log" | head -5
    rm -rf "$probe_dir"
    skip "clang cannot link -fsanitize=fuzzer (Debian: apt-get install libclang-rt-14-dev)"
fi
rm -rf "$probe_dir"

# ---- build if needed --------------------------------------------------------
# The parser and what it calls, with coverage and sanitizers: the same
# line as the fuzz target in src/Makefile.
DEPS="$FUZZ_SRC $SRC/resp.c $SRC/resp.h $SRC/util.c $SRC/util.h $SRC/sds.c $SRC/sds.h $SRC/zmalloc.c $SRC/zmalloc.h"
need_build=0
[ -x "$BIN" ] || need_build=1
# A change of FUZZ_CFLAGS (e.g. -DFUZZ_RESP_NO_LEFTOVER_CHECK) rebuilds too.
[ "$(cat "$BIN.flags" 2>/dev/null)" = "${FUZZ_CFLAGS:-}" ] || need_build=1
if [ $need_build -eq 0 ]; then
    for f in $DEPS; do
        if [ "$f" -nt "$BIN" ]; then need_build=1; break; fi
    done
fi
if [ $need_build -eq 1 ]; then
    mkdir -p "$OUTDIR" || failed "cannot create $OUTDIR"
    echo "building $BIN"
    # shellcheck disable=SC2086  # FUZZ_CFLAGS is a list of flags
    (cd "$SRC" && "$CLANG" -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined \
        ${FUZZ_CFLAGS:-} -I. "$FUZZ_SRC" resp.c util.c sds.c zmalloc.c -o "$BIN") ||
        failed "building the fuzz target"
    printf '%s\n' "${FUZZ_CFLAGS:-}" >"$BIN.flags"
fi

# ---- fuzz -------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzzresp.XXXXXX") || failed "mktemp"
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$work/corpus" "$work/artifacts"
cp "$SEEDS"/* "$work/corpus/" || failed "copying seeds"

echo "fuzzing the RESP parser for ${FUZZ_SECONDS}s ($(find "$work/corpus" -type f | wc -l) seeds)"
"$BIN" -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1
rc=$?

# libFuzzer's own summary: the last status line, the totals and the stats.
grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$work/log" | tail -1
grep -E '^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$work/log"

if [ $rc -ne 0 ]; then
    # The report: the sanitizer's lines and the frames in our code.
    grep -E 'ERROR:|SUMMARY:|#[0-9]+ .* in (LLVMFuzzerTestOneInput|parse|feed|run|feedBigArg|argDone|inlineRequest|respReq|headerLine|sds|string2ll)' "$work/log" | head -20
    # A trap is a broken invariant: show which one.
    line=$(grep -o 'fuzz_resp\.c:[0-9]*' "$work/log" | head -1 | cut -d: -f2)
    if [ -n "$line" ]; then
        echo "first frame in fuzz_resp.c, line $line:"
        sed -n "$((line > 3 ? line - 3 : 1)),${line}p" "$FUZZ_SRC" | sed 's/^/  | /'
    fi
    for a in "$work"/artifacts/*; do
        [ -f "$a" ] || continue
        mkdir -p "$OUTDIR"
        keep="$OUTDIR/$(basename "$a")"
        cp "$a" "$keep"
        echo "reproducer ($(wc -c <"$a") bytes) saved as $keep; hex:"
        od -An -tx1 -v "$a" | tr -d ' \n' | fold -w 96
        echo
    done
    failed "fuzz_resp exited with status $rc"
fi
echo "1 passed, 0 failed"
exit 0
