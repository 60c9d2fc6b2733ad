#!/usr/bin/env bash
# tests/fuzz/run.sh -- short libFuzzer runs of every parser that reads the
# wire or a file, as a test: the server's RESP parser, the DUMP payload
# parser, what cluster mode reads from etcd, the append-only log's reader
# (also the replication stream's records), the server's own text parsers
# (the config file, CONFIG SET values, ACL SETUSER rules, the ACL file),
# the replication link's handshake as each side reads it (with the
# pipeline prefetch scan, which reads client pipelines and the replica's
# records), and libmooncake's two: the replies a client reads from
# servers and hosts, and the requests a hosted segment reads from peers.
# (HTTP is parsed by libmicrohttpd; http.c only compares the path, looks at
# Content-Length's digits and decodes Basic credentials with util.c's
# base64Decode, which fuzz_etcd covers: etcd's bytes fields are base64.
# mooncake-cli reads replies through libmooncake's mc_conn, and
# mooncake-check-aof through aofformat.c, both fuzzed here. And the
# server's reader of a segment host's replies to SEG.AUTH and SEG.READ
# (relay.c, rrParse), which runs inside the whole server: fuzz_relay.)
#
# Builds build/fuzz/fuzz_resp, fuzz_dump, fuzz_etcd, fuzz_aof, fuzz_mcreply,
# fuzz_mchost, fuzz_config, fuzz_repl and fuzz_relay when missing or older
# than their sources (fuzz_config, fuzz_repl and fuzz_relay link the whole
# server: their first build takes a minute each), fuzzes them for ${FUZZ_SECONDS:-28} seconds
# in all (about half for the RESP parser, which has more state to explore,
# a tenth or so each for the others), each on a scratch copy of its seeds
# (tests/fuzz/seeds, seeds_dump, seeds_etcd, seeds_aof, seeds_mcreply,
# seeds_mchost, seeds_config, seeds_repl, seeds_relay; inputs up to 4096
# bytes), with
# the target's dictionary (tests/fuzz/NAME.dict: the keywords, lengths and
# framing its parsers look for, which mutation alone is slow to spell), prints
# libFuzzer's summary for each and ends with the line the test runner
# sums: one pass or failure per target, e.g. "9 passed, 0 failed". Without
# clang's libFuzzer runtime (Debian: clang libclang-rt-14-dev) it says so
# and ends with "0 passed, 0 failed".
#
# Undefined behaviour is a crash like any other: the targets are built with
# -fno-sanitize-recover=all, as SANITIZER=address builds the server, so a
# signed overflow, an overlong shift or a misaligned load stops the run with
# the input saved. (UBSan's default is to print "runtime error" and go on,
# which libFuzzer does not count as a failure: a run full of them passed.)
# The probe checks it: a probe whose overflow did not stop it fails here.
#
# A crash leaves its input in build/fuzz/ (crash-*, printed in hex here);
# replay it with:  build/fuzz/fuzz_resp build/fuzz/crash-...  (or the target that
# found it)
#
# FUZZ_COVERAGE=1 measures instead of fuzzing: the targets are built with
# clang's source-based coverage (-fprofile-instr-generate -fcoverage-mapping,
# no sanitizer) in build/fuzz-cov/, each runs its seeds once -- and
# $FUZZ_CORPUS/NAME too when that folder is there, e.g. the corpus of a
# long run -- and the share of regions and branches run is printed for the
# files the target is for (those it includes, or its own short list less
# sds.c, zmalloc.c, util.c, ae.c, anet.c, crc.c). llvm-profdata and llvm-cov
# ($LLVM_PROFDATA, $LLVM_COV) read the profiles; then, e.g.
#   llvm-cov show build/fuzz-cov/fuzz_resp -instr-profile=<the profdata it names> src/resp.c
# shows the lines and branches never run.
#
# It may be run from anywhere, or through a symlink such as
# build/tests/test_fuzz_resp: the repository is found from the script's own
# location (or $MC_ROOT).
set -u

FUZZ_SECONDS=${FUZZ_SECONDS:-28}
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
OUTDIR=$ROOT/build/fuzz
[ -f "$ROOT/tests/fuzz/fuzz_resp.c" ] || failed "cannot find tests/fuzz/fuzz_resp.c (set MC_ROOT to the repository)"

# ---- is there a libFuzzer to link with? -------------------------------------
command -v "$CLANG" >/dev/null 2>&1 || skip "clang not found (Debian: apt-get install clang libclang-rt-14-dev)"
SAN_FLAGS="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
if [ -n "${FUZZ_COVERAGE:-}" ]; then
    SAN_FLAGS="-fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping"
    OUTDIR=$ROOT/build/fuzz-cov
    LLVM_PROFDATA=${LLVM_PROFDATA:-llvm-profdata}
    LLVM_COV=${LLVM_COV:-llvm-cov}
    if ! command -v "$LLVM_PROFDATA" >/dev/null 2>&1 || ! command -v "$LLVM_COV" >/dev/null 2>&1; then
        skip "llvm-profdata or llvm-cov not found (Debian: apt-get install llvm)"
    fi
fi
probe_dir=$(mktemp -d "${TMPDIR:-/tmp}/fuzzprobe.XXXXXX") || failed "mktemp"
# The probe overflows an int when given a byte 'u'.
printf '%s\n' '#include <limits.h>' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {' \
    '    volatile int x = INT_MAX - 1;' \
    '    if (n == 1 && d[0] == 0x75) x += 2;' \
    '    return x == 0;' \
    '}' >"$probe_dir/probe.c"
# shellcheck disable=SC2086  # SAN_FLAGS is a list of flags
if ! "$CLANG" $SAN_FLAGS "$probe_dir/probe.c" -o "$probe_dir/probe" >"$probe_dir/log" 2>&1; then
    sed 's/^/  /' "$probe_dir/log" | head -5
    rm -rf "$probe_dir"
    skip "clang cannot link -fsanitize=fuzzer (Debian: apt-get install libclang-rt-14-dev)"
fi
printf u >"$probe_dir/ub"
if [ -z "${FUZZ_COVERAGE:-}" ]; then
    if "$probe_dir/probe" "$probe_dir/ub" >"$probe_dir/log" 2>&1 || ! grep -q 'runtime error' "$probe_dir/log"; then
        sed 's/^/  /' "$probe_dir/log" | tail -5
        rm -rf "$probe_dir"
        failed "undefined behaviour does not stop a fuzz run built with $SAN_FLAGS"
    fi
fi
rm -rf "$probe_dir"

work=$(mktemp -d "${TMPDIR:-/tmp}/fuzzrun.XXXXXX") || failed "mktemp"
trap 'rm -rf "$work"' EXIT INT TERM

# ---- one target ---------------------------------------------------------------
# coverage_one NAME BIN SEEDS SOURCES...: FUZZ_COVERAGE's run of one target
# (see the header). Returns 0 if the seeds ran clean.
coverage_one() {
    local name=$1 bin=$2 seeds=$3 dir=$work/$1 files="" f corpus=
    shift 3
    [ $# -le 10 ] || set -- # the whole server: only what it includes
    for f in ${EXTRA_DEPS:-} "$@"; do
        f=${f#"$SRC"/}
        case $f in sds.c | zmalloc.c | util.c | ae.c | anet.c | crc.c | *.h) ;; *) files="$files $f" ;; esac
    done
    [ -n "${FUZZ_CORPUS:-}" ] && [ -d "$FUZZ_CORPUS/$name" ] && corpus=$FUZZ_CORPUS/$name
    mkdir -p "$dir"
    # -runs=0: each input once, nothing written into the folders.
    LLVM_PROFILE_FILE="$dir/%p.profraw" "$bin" -runs=0 -max_len=4096 -timeout=10 "$seeds" ${corpus:+"$corpus"} \
        >"$dir/log" 2>&1 || { tail -5 "$dir/log"; echo "FAIL: $name on its inputs"; return 1; }
    mkdir -p "$OUTDIR/profiles"
    "$LLVM_PROFDATA" merge -sparse "$dir"/*.profraw -o "$OUTDIR/profiles/$name.profdata" ||
        { echo "FAIL: merging $name's profiles"; return 1; }
    echo "coverage of $name over $seeds${corpus:+ and $corpus} ($OUTDIR/profiles/$name.profdata):"
    "$LLVM_COV" report "$bin" -instr-profile="$OUTDIR/profiles/$name.profdata" 2>/dev/null | awk -v files="$files" '
        BEGIN { n = split(files, want, " ") }
        {
            for (i = 1; i <= n; i++) {
                f = want[i]
                if ($1 == f || substr($1, length($1) - length(f)) == "/" f)
                    printf "  %-28s regions %7s  branches %7s\n", f, $4, $13
            }
        }'
}

# fuzz_one NAME SECONDS SEEDS "WHAT" "FRAMES" SOURCES...: builds the target if
# needed (the same line as the fuzz rule in src/Makefile), fuzzes it, prints
# the summary, and on a crash the report and the reproducer. SOURCES are in
# src/ and, with their headers, decide when to rebuild. FRAMES is a regexp of
# function names worth showing from the sanitizer's stack. Returns 0 if the
# run was clean. LIBS (libraries to link), DEFS (compiler flags) and
# EXTRA_DEPS (files that also decide a rebuild, e.g. a source the target
# #includes) may be set per call.
fuzz_one() {
    local name=$1 secs=$2 seeds=$3 what=$4 frames=$5
    shift 5
    local fuzz_src=$ROOT/tests/fuzz/$name.c bin=$OUTDIR/$name dir=$work/$name
    [ -f "$fuzz_src" ] || { echo "FAIL: cannot find $fuzz_src"; return 1; }
    [ -d "$seeds" ] || { echo "FAIL: cannot find $seeds"; return 1; }
    local deps="$fuzz_src ${EXTRA_DEPS:-}" f need_build=0
    for f in "$@"; do
        deps="$deps $SRC/$f"
        [ -f "$SRC/${f%.c}.h" ] && deps="$deps $SRC/${f%.c}.h"
    done
    [ -x "$bin" ] || need_build=1
    # A change of the sanitizers or of FUZZ_CFLAGS (e.g.
    # -DFUZZ_RESP_NO_LEFTOVER_CHECK) rebuilds too.
    [ "$(cat "$bin.flags" 2>/dev/null)" = "$SAN_FLAGS ${FUZZ_CFLAGS:-}" ] || need_build=1
    if [ $need_build -eq 0 ]; then
        for f in $deps; do
            if [ "$f" -nt "$bin" ]; then need_build=1; break; fi
        done
    fi
    if [ $need_build -eq 1 ]; then
        mkdir -p "$OUTDIR" || { echo "FAIL: cannot create $OUTDIR"; return 1; }
        echo "building $bin"
        # shellcheck disable=SC2086  # SAN_FLAGS and FUZZ_CFLAGS are lists of flags
        (cd "$SRC" && "$CLANG" -std=c11 -D_GNU_SOURCE -O1 -g $SAN_FLAGS \
            ${FUZZ_CFLAGS:-} ${DEFS:-} -I. "$fuzz_src" "$@" -pthread ${LIBS:-} -o "$bin") ||
            { echo "FAIL: building $name"; return 1; }
        printf '%s\n' "$SAN_FLAGS ${FUZZ_CFLAGS:-}" >"$bin.flags"
    fi

    if [ -n "${FUZZ_COVERAGE:-}" ]; then
        coverage_one "$name" "$bin" "$seeds" "$@"
        return
    fi

    mkdir -p "$dir/corpus" "$dir/artifacts"
    cp "$seeds"/* "$dir/corpus/" || { echo "FAIL: copying seeds"; return 1; }
    local dict=$ROOT/tests/fuzz/$name.dict
    [ -f "$dict" ] || dict=
    echo "fuzzing $what for ${secs}s ($(find "$dir/corpus" -type f | wc -l) seeds)"
    "$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 ${dict:+-dict="$dict"} \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1
    local rc=$?

    # libFuzzer's own summary: the last status line, the totals and the stats.
    grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$dir/log" | tail -1
    grep -E '^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$dir/log"
    [ $rc -eq 0 ] && return 0

    # The report: the sanitizer's lines and the frames in our code.
    grep -E "ERROR:|SUMMARY:|#[0-9]+ .* in (LLVMFuzzerTestOneInput|$frames)" "$dir/log" | head -20
    # A trap is a broken invariant: show which one.
    local line
    line=$(grep -o "$name\.c:[0-9]*" "$dir/log" | head -1 | cut -d: -f2)
    if [ -n "$line" ]; then
        echo "first frame in $name.c, line $line:"
        sed -n "$((line > 3 ? line - 3 : 1)),${line}p" "$fuzz_src" | sed 's/^/  | /'
    fi
    local a keep
    for a in "$dir"/artifacts/*; do
        [ -f "$a" ] || continue
        mkdir -p "$OUTDIR"
        keep="$OUTDIR/$(basename "$a")"
        cp "$a" "$keep"
        echo "reproducer ($(wc -c <"$a") bytes) saved as $keep; hex:"
        od -An -tx1 -v "$a" | tr -d ' \n' | fold -w 96
        echo
    done
    echo "FAIL: $name exited with status $rc"
    return 1
}

# ---- fuzz ---------------------------------------------------------------------
# The budget is shared; each target gets at least a second.
dump_secs=$((FUZZ_SECONDS / 10))
[ $dump_secs -ge 1 ] || dump_secs=1
etcd_secs=$dump_secs
aof_secs=$dump_secs
mcreply_secs=$dump_secs
mchost_secs=$dump_secs
config_secs=$dump_secs
repl_secs=$dump_secs
relay_secs=$dump_secs
resp_secs=$((FUZZ_SECONDS - dump_secs - etcd_secs - aof_secs - mcreply_secs - mchost_secs - config_secs - repl_secs -
    relay_secs))
[ $resp_secs -ge 1 ] || resp_secs=1

passed=0
nfailed=0
# Runs its arguments (fuzz_one and its own) and counts the verdict; LIBS,
# DEFS and EXTRA_DEPS set before it reach fuzz_one.
tally() {
    if "$@"; then passed=$((passed + 1)); else nfailed=$((nfailed + 1)); fi
}
tally fuzz_one fuzz_resp "$resp_secs" "$ROOT/tests/fuzz/seeds" "the RESP parser" \
        'parse|feed|run|feedBigArg|argDone|inlineRequest|respReq|headerLine|sds|string2ll' \
        resp.c util.c sds.c zmalloc.c
tally fuzz_one fuzz_dump "$dump_secs" "$ROOT/tests/fuzz/seeds_dump" "the DUMP payload parser" \
        'dump[A-Za-z]*|crc64|sds[A-Za-z]*' \
        dump.c crc.c sds.c zmalloc.c
LIBS="-lcurl -ljansson" EXTRA_DEPS="$SRC/etcd.c $SRC/etcd.h $SRC/cluster.h" \
        tally fuzz_one fuzz_etcd "$etcd_secs" "$ROOT/tests/fuzz/seeds_etcd" \
        "what cluster mode reads from etcd (replies, watch lines, node records)" \
        'etcd[A-Za-z]*|cluster[A-Za-z]*|sds[A-Za-z]*' \
        cluster_node.c ae.c sds.c util.c zmalloc.c
tally fuzz_one fuzz_aof "$aof_secs" "$ROOT/tests/fuzz/seeds_aof" "the append-only log's reader (records, manifest)" \
        'aof[A-Za-z]*|readHeader|dump[A-Za-z]*|sds[A-Za-z]*|string2ll' \
        aofformat.c dump.c crc.c sds.c zmalloc.c util.c
tally fuzz_one fuzz_mcreply "$mcreply_secs" "$ROOT/tests/fuzz/seeds_mcreply" \
        "what libmooncake reads from servers and hosts (replies, CLUSTER SLOTS, redirections, RDMA descriptors)" \
        'mc[A-Z][A-Za-z]*|readReply[A-Za-z]*|readLine|readHeader|fill|parseLL|check[A-Za-z]*' \
        libmooncake/mc_conn.c libmooncake/mc_cluster.c libmooncake/mc_rdma.c anet.c crc.c
EXTRA_DEPS="$SRC/libmooncake/mc_host.c $SRC/libmooncake/mc_host.h" \
        tally fuzz_one fuzz_mchost "$mchost_secs" "$ROOT/tests/fuzz/seeds_mchost" \
        "a hosted segment's requests from its peers (SEG.*, AUTH, SHM.ATTACH)" \
        'serve[A-Za-z]*|readExact|readLine|parseLen|parseU64|checkRange|admitted[A-Za-z]*|drain' \
        anet.c
# The whole server but main: config.c and acl.c come in through the target.
# The list is the Makefile's (print-layout), so a new server source is
# linked here too: a list of our own once missed latencymon.c, and both
# targets failed to link.
SERVER_SRCS=$(make -s --no-print-directory -C "$SRC" print-layout | sed -n 's/^SERVER_OBJ //p' | tr ' ' '\n' |
    sed -n 's/\.o$/.c/p' | grep -v -x -e config.c -e acl.c | tr '\n' ' ')
if [ -z "$SERVER_SRCS" ]; then
    echo "FAIL: no server sources from make -C $SRC print-layout (fuzz_config, fuzz_repl, fuzz_relay)"
    echo "$passed passed, $((nfailed + 3)) failed"
    exit 1
fi
SERVER_PKGS="numa libcurl jansson libmicrohttpd"
# A target linked with the whole server but main, less the sources it
# #includes itself (INCLUDED: their static readers), config.c and acl.c
# linked unless it includes them. DEPS: the files that also decide a
# rebuild. Its seeds are tests/fuzz/seeds_<name less fuzz_>.
fuzz_server() {
    local name=$1 secs=$2 what=$3 frames=$4 included=$5 deps=$6 srcs=" $SERVER_SRCS config.c acl.c " f
    # shellcheck disable=SC2001  # dash (make fuzz runs sh) has no ${v//a/b}
    for f in $included; do srcs=$(echo "$srcs" | sed "s/ ${f%.c}\.c / /"); done
    # shellcheck disable=SC2046,SC2086  # word lists
    LIBS="$(pkg-config --libs $SERVER_PKGS 2>/dev/null) -lm" \
        DEFS="-Dmain=mooncakeServerMain -DMOONCAKE_VERSION=\"fuzz\" $(pkg-config --cflags $SERVER_PKGS 2>/dev/null)" \
        EXTRA_DEPS="$deps" \
        tally fuzz_one "$name" "$secs" "$ROOT/tests/fuzz/seeds_${name#fuzz_}" "$what" "$frames" $srcs
}
fuzz_server fuzz_config "$config_secs" "the config file, CONFIG SET values, ACL SETUSER rules and the ACL file" \
    'load[A-Za-z]*|set[A-Z][A-Za-z]*|get[A-Z][A-Za-z]*|formatConfigLine|splitValue|check[A-Za-z]*|applyRules?|parseAclFile|describeUser|catWord|sds[A-Za-z]*' \
    "config.c acl.c" "$SRC/config.c $SRC/acl.c $SRC/acl.h $SRC/server.h $SRC/sds.c"
# replication_replica.c and prefetch.c included: their static readers.
fuzz_server fuzz_repl "$repl_secs" \
    "the replication link (what a replica reads from its primary, what a primary reads from a replica) and the pipeline prefetch scan" \
    'processLinkInput|takeLine|linkReadHandler|applyRecord|handshakeRefused|psyncCommand|replconfCommand|backlog[A-Za-z]*|snapshot[A-Za-z]*|scan[A-Z][A-Za-z]*|prefetch[A-Za-z]*|aof[A-Za-z]*|sds[A-Za-z]*' \
    "replication_replica.c prefetch.c" \
    "$SRC/replication_replica.c $SRC/prefetch.c $SRC/prefetch.h $SRC/replication_internal.h $SRC/server.h"
# relay.c included: its static reader and connection set.
fuzz_server fuzz_relay "$relay_secs" \
    "what the server reads from a segment's host when it relays a read (SEG.AUTH and SEG.READ replies)" \
    'rr[A-Z][A-Za-z]*|idle[A-Z][A-Za-z]*|conn[A-Z][A-Za-z]*|clientPump|relay[A-Za-z]*|sds[A-Za-z]*' \
    "relay.c" "$SRC/relay.c $SRC/relay.h $SRC/server.h"
echo "$passed passed, $nfailed failed"
[ $nfailed -eq 0 ]
