#!/usr/bin/env bash
# utils/bench/bench-vs-redis.sh -- mooncake-server beside Debian's redis-server,
# under the same redis-benchmark invocations, with a table of ratios.
#
#   utils/bench/bench-vs-redis.sh [--quick] [-n SCALE] [--runs K] [options]
#
#   --quick            a fast pass: 1/5 of the requests, 200k keys in the
#                      memory case (still 1 run unless --runs says otherwise)
#   -n, --scale F      multiply every request count by F (default 1)
#   --runs K           run every case K times and report the median (default 1)
#   --keys N           keys loaded in the memory case (default 1000000)
#   --no-memory        skip the memory case
#   --no-mb            skip the second section (mooncake-benchmark as the client)
#   --no-lib           skip the third section (libmooncake against memcpy, raw
#                      TCP and Redis SET/GET of the same bytes)
#   --segment-size S   mooncake's pool (default 2gb)
#   --server PATH      mooncake-server binary (default src/mooncake-server)
#   --redis PATH       redis-server binary (default /usr/bin/redis-server)
#
# Both servers listen on free ports of 127.0.0.1 and are stopped on exit.
# They run side by side but are loaded one at a time: every case runs
# against one server, then the other (order alternating between runs), so
# on a small machine (2 cores) they never compete for the CPU with each
# other -- only with redis-benchmark, equally for both. Nothing is pinned.
#
# Cases: SET/GET of 64 B values by 50 clients, without and with -P 16;
# SET/GET of 64 KiB, 1 MiB and 4 MiB values by a few clients, also in GB/s
# (ops/s x value size, 1 GB = 1e9 B); and a memory case: 64-byte values
# under N keys loaded with redis-cli --pipe, compared as bytes per key.
# Redis's figure is INFO used_memory; ours is INFO used_memory (the heap:
# keys and object headers) plus INFO store's store_pool_used (the values),
# each measured from an empty server.
#
# On a terminal every step that runs for more than a second shows the
# seconds it has taken so far after its line (utils/tick.sh); the output of
# a redirected run is unchanged.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
SCALE=1
RUNS=1
QUICK=0
KEYS=""
MEMORY=1
MB=1
LIB=1
SEGMENT=2gb
MC_BIN=$ROOT/src/mooncake-server
REDIS_BIN=/usr/bin/redis-server

# shellcheck source=utils/tick.sh
. "$ROOT/utils/tick.sh"
die() { tick_stop; echo "bench-vs-redis: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    -n|--scale) [ $# -ge 2 ] || die "$1 needs a value"; SCALE=$2; shift ;;
    --runs) [ $# -ge 2 ] || die "$1 needs a value"; RUNS=$2; shift ;;
    --keys) [ $# -ge 2 ] || die "$1 needs a value"; KEYS=$2; shift ;;
    --no-memory) MEMORY=0 ;;
    --no-mb) MB=0 ;;
    --no-lib) LIB=0 ;;
    --segment-size) [ $# -ge 2 ] || die "$1 needs a value"; SEGMENT=$2; shift ;;
    --server) [ $# -ge 2 ] || die "$1 needs a value"; MC_BIN=$2; shift ;;
    --redis) [ $# -ge 2 ] || die "$1 needs a value"; REDIS_BIN=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 1 >&2 ;;
    esac
    shift
done
[[ $SCALE =~ ^[0-9]*\.?[0-9]+$ ]] || die "-n wants a positive number, not '$SCALE'"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs wants a positive integer, not '$RUNS'"
if [ $QUICK -eq 1 ]; then
    SCALE=$(awk -v s="$SCALE" 'BEGIN { print s / 5 }')
    : "${KEYS:=200000}"
fi
: "${KEYS:=1000000}"
[[ $KEYS =~ ^[1-9][0-9]*$ ]] || die "--keys wants a positive integer, not '$KEYS'"

for tool in redis-benchmark redis-cli awk; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (Debian: apt-get install redis-tools gawk)"
done
[ -x "$REDIS_BIN" ] || die "$REDIS_BIN not found (Debian: apt-get install redis-server, or --redis PATH)"
[ -x "$MC_BIN" ] || die "$MC_BIN not found: build it with 'make' (or --server PATH)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-vs-redis.XXXXXX")
REDIS_PID=""
MC_PID=""

stopServer() {  # pid
    local pid=$1 i
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    tick_stop
    stopServer "$MC_PID"
    stopServer "$REDIS_PID"
    MC_PID="" REDIS_PID=""
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port nobody listens on: the kernel's pick (python3), else a random
# one that does not answer.
freePort() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
        return
    fi
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
}

waitReady() {  # name pid port log
    local name=$1 pid=$2 port=$3 log=$4 i
    for i in $(seq 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "---- $log ----" >&2; tail -20 "$log" >&2
            die "$name exited during start-up"
        fi
        if [ "$(redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = "PONG" ]; then return 0; fi
        sleep 0.1
    done
    echo "---- $log ----" >&2; tail -20 "$log" >&2
    die "$name did not answer PING on port $port within 30 s"
}

rcli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

# INFO field as a number.
infoField() {  # port section field
    rcli "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2; found = 1 } END { if (!found) print "" }'
}

REDIS_PORT=$(freePort)
"$REDIS_BIN" --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --protected-mode no --logfile "" >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
MC_PORT=$(freePort)
[ "$MC_PORT" != "$REDIS_PORT" ] || MC_PORT=$(freePort)
"$MC_BIN" --port "$MC_PORT" --bind 127.0.0.1 --segment-size "$SEGMENT" --protected-mode no \
    --unixsocket "$WORK/mc.sock" \
    >"$WORK/mooncake.log" 2>&1 &
MC_PID=$!
waitReady redis-server "$REDIS_PID" "$REDIS_PORT" "$WORK/redis.log"
waitReady mooncake-server "$MC_PID" "$MC_PORT" "$WORK/mooncake.log"

# The pool is pre-faulted by a background thread: let it finish, or it
# competes with the first cases for the CPU.
for i in $(seq 600); do
    size=$(infoField "$MC_PORT" store store_pool_size)
    done_b=$(infoField "$MC_PORT" store store_pool_prefaulted)
    [ -z "$size" ] || [ -z "$done_b" ] || [ "$done_b" -ge "$size" ] && break
    if [ "$i" -eq 1 ]; then
        echo "waiting for mooncake's pool ($SEGMENT) to be pre-faulted..."
        tick_start "  "
    fi
    sleep 0.2
done
tick_stop

REDIS_VER=$("$REDIS_BIN" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
MC_VER=$(infoField "$MC_PORT" server mooncake_version)
[ -n "$MC_VER" ] || MC_VER=$("$MC_BIN" --version 2>/dev/null | head -1 || true)
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "redis-server $REDIS_VER on port $REDIS_PORT; mooncake-server ${MC_VER:-?} on port $MC_PORT (segment-size $SEGMENT)"
echo "scale $SCALE, runs $RUNS (median), $(redis-benchmark --version 2>/dev/null | head -1)"
echo

count() { awk -v b="$1" -v s="$SCALE" 'BEGIN { n = int(b * s); if (n < 1) n = 1; print n }'; }

# One redis-benchmark run; appends "server<TAB>case<TAB>test<TAB>rps<TAB>p50<TAB>p99"
# lines to $WORK/results. 7.0's --csv columns: test, rps, avg, min, p50, p95, p99, max.
benchOnce() {  # server port case args...
    local server=$1 port=$2 case=$3
    shift 3
    if ! redis-benchmark -h 127.0.0.1 -p "$port" --csv "$@" >"$WORK/bench.out" 2>"$WORK/bench.err"; then
        tick_stop
        echo "redis-benchmark failed against $server ($*):" >&2
        grep -v 'Could not fetch server CONFIG' "$WORK/bench.err" | tail -5 >&2
        exit 1
    fi
    local lines
    lines=$(awk -F'","' -v s="$server" -v c="$case" '
        NR > 1 && NF >= 7 {
            gsub(/"/, "", $1); gsub(/"/, "", $7)
            printf "%s\t%s\t%s\t%s\t%s\t%s\n", s, c, $1, $2, $5, $7
        }' "$WORK/bench.out")
    if [ -z "$lines" ]; then
        tick_stop
        echo "no CSV results from redis-benchmark against $server ($*):" >&2
        cat "$WORK/bench.out" >&2
        grep -v 'Could not fetch server CONFIG' "$WORK/bench.err" | tail -5 >&2
        exit 1
    fi
    printf '%s\n' "$lines" >>"$WORK/results"
    # A server that died under load is a result too, but not a table.
    kill -0 "$REDIS_PID" 2>/dev/null || die "redis-server died (log: $(tail -3 "$WORK/redis.log"))"
    if ! kill -0 "$MC_PID" 2>/dev/null; then
        tick_stop
        tail -20 "$WORK/mooncake.log" >&2
        die "mooncake-server died during: redis-benchmark $*"
    fi
}

# name|value size|redis-benchmark arguments
CASES=(
    "64B c50|64|-t set,get -d 64 -c 50 -n $(count 200000)"
    "64B c50 P16|64|-t set,get -d 64 -c 50 -P 16 -n $(count 2000000)"
    "64KiB c8|65536|-t set,get -d 65536 -c 8 -n $(count 40000)"
    "1MiB c4|1048576|-t set,get -d 1048576 -c 4 -n $(count 4000)"
    "4MiB c4|4194304|-t set,get -d 4194304 -c 4 -n $(count 1000)"
)

: >"$WORK/results"
for spec in "${CASES[@]}"; do
    IFS='|' read -r name size args <<<"$spec"
    for run in $(seq "$RUNS"); do
        printf '  %-12s run %d/%d: ' "$name" "$run" "$RUNS"
        # Alternate who goes first, so warm caches favour neither.
        if [ $((run % 2)) -eq 1 ]; then order="redis mooncake"; else order="mooncake redis"; fi
        for server in $order; do
            if [ "$server" = redis ]; then port=$REDIS_PORT; else port=$MC_PORT; fi
            tick_start
            # shellcheck disable=SC2086
            benchOnce "$server" "$port" "$name" $args
            tick_stop
            printf '%s ' "$server"
        done
        echo
    done
done

# ---- the same efficient client against both -------------------------------------
# redis-benchmark copies every reply and rebuilds every request, so for large
# values it measures itself (at 16 MiB it manages ~0.2 GB/s against either
# server). src/mooncake-benchmark sends values from one pre-faulted buffer
# with writev and reads replies in place, so these rows compare the servers.
MB_BIN=$ROOT/src/mooncake-benchmark
MB_CASES=(
    "64B c50|64|-c 50 -d 64 --duration $(count 3)"
    "64B c50 P16|64|-c 50 -P 16 -d 64 --duration $(count 3)"
    "64KiB c4|65536|-c 4 -d 64k --check --duration $(count 3)"
    "1MiB c4|1048576|-c 4 -d 1m --check --duration $(count 3)"
    "4MiB c4|4194304|-c 4 -d 4m --check --duration $(count 3)"
    "16MiB c4|16777216|-c 4 -d 16m --check --duration $(count 4)"
)
: >"$WORK/mbresults"
if [ "$MB" -eq 1 ] && [ -x "$MB_BIN" ]; then
    for spec in "${MB_CASES[@]}"; do
        IFS='|' read -r name size args <<<"$spec"
        for run in $(seq "$RUNS"); do
            printf '  mb %-12s run %d/%d: ' "$name" "$run" "$RUNS"
            if [ $((run % 2)) -eq 1 ]; then order="redis mooncake"; else order="mooncake redis"; fi
            for server in $order; do
                if [ "$server" = redis ]; then port=$REDIS_PORT; else port=$MC_PORT; fi
                tick_start
                # shellcheck disable=SC2086
                if ! "$MB_BIN" -p "$port" -t set,get --csv $args >"$WORK/mb.out" 2>"$WORK/mb.err"; then
                    tick_stop
                    tail -5 "$WORK/mb.err" >&2
                    die "mooncake-benchmark failed against $server ($args)"
                fi
                # "test","size","bytes","requests","seconds","ops_per_sec","gb_per_sec","p50_ms","p99_ms",...
                awk -F, -v s="$server" -v c="$name" 'NR > 1 { gsub(/"/, "", $1)
                    printf "%s\t%s\t%s\t%s\t%s\t%s\n", s, c, $1, $6, $8, $9 }' "$WORK/mb.out" >>"$WORK/mbresults"
                tick_stop
                printf '%s ' "$server"
            done
            echo
        done
    done
elif [ "$MB" -eq 1 ]; then
    echo "  (no $MB_BIN: build it with make to get the second section)"
fi

# ---- libmooncake: the data plane against its ceilings and Redis ------------------
# One client thread everywhere, so the baselines (one-thread memcpy, one
# loopback TCP stream) are the ceilings of what one caller can get. Redis
# moves the same bytes with SET/GET through the same client engine.
: >"$WORK/libresults"
libRun() {  # tag args...
    local tag=$1
    shift
    if ! "$MB_BIN" --csv -c 1 "$@" >"$WORK/lib.out" 2>"$WORK/lib.err"; then
        tick_stop
        tail -5 "$WORK/lib.err" >&2
        die "mooncake-benchmark $* failed"
    fi
    awk -F, -v t="$tag" 'NR > 1 { gsub(/"/, "", $1); gsub(/"/, "", $2)
        printf "%s\t%s %s\t%s\t%s\t%s\n", t, $1, $2, $6, $7, $9 }' "$WORK/lib.out" >>"$WORK/libresults"
}
if [ "$LIB" -eq 1 ] && [ -x "$MB_BIN" ]; then
    n1=$(count 2000); n16=$(count 200); nb=$(count 200)
    for run in $(seq "$RUNS"); do
        printf '  lib run %d/%d: baselines, redis, shm, tcp, batches' "$run" "$RUNS"
        tick_start
        libRun base -t memcpy,rawtcp -d 1m -n "$n1"
        libRun base -t memcpy,rawtcp -d 16m -n "$n16"
        libRun redis -p "$REDIS_PORT" -t set,get -d 1m -n "$n1"
        libRun redis -p "$REDIS_PORT" -t set,get -d 16m -n "$n16"
        libRun mc -s "$WORK/mc.sock" -t mcput,mcget --transport shm -d 1m -n "$n1"
        libRun mc -s "$WORK/mc.sock" -t mcput,mcget --transport shm -d 16m -n "$n16"
        libRun mc -p "$MC_PORT" -t mcput,mcget --transport tcp -d 1m -n "$n1"
        libRun mc -p "$MC_PORT" -t mcput,mcget --transport tcp -d 16m -n "$n16"
        # One connection per transfer (the default stripes over one per CPU).
        libRun mc -p "$MC_PORT" -t mcput,mcget --transport tcp --streams 1 -d 1m -n "$n1"
        libRun mc -p "$MC_PORT" -t mcput,mcget --transport tcp --streams 1 -d 16m -n "$n16"
        libRun redis -p "$REDIS_PORT" -t mset,mget --batch 128 -d 4k -n "$nb"
        libRun mc -s "$WORK/mc.sock" -t mcbput,mcbget --batch 128 --transport shm -d 4k -n "$nb"
        libRun mc -p "$MC_PORT" -t mcbput,mcbget --batch 128 --transport tcp -d 4k -n "$nb"
        rcli "$MC_PORT" FLUSHALL >/dev/null
        rcli "$REDIS_PORT" FLUSHALL >/dev/null
        tick_stop
        echo
    done
elif [ "$LIB" -eq 1 ]; then
    echo "  (no $MB_BIN: build it with make to get the libmooncake section)"
fi

# ---- the memory case -----------------------------------------------------------
MEM_LINES=()
if [ "$MEMORY" -eq 1 ]; then
    printf '  memory: generating %s SETs of 64-byte values' "$KEYS"
    tick_start
    awk -v n="$KEYS" 'BEGIN {
        v = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        for (i = 0; i < n; i++)
            printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$64\r\n%s\r\n", i, v
    }' >"$WORK/load.resp"
    tick_stop
    echo
    for server in redis mooncake; do
        if [ "$server" = redis ]; then port=$REDIS_PORT; else port=$MC_PORT; fi
        rcli "$port" FLUSHALL >/dev/null
        sleep 0.5
        heap0=$(infoField "$port" memory used_memory)
        pool0=0
        [ "$server" = mooncake ] && pool0=$(infoField "$port" store store_pool_used)
        tick_start "  memory: loading $server"
        t0=$(date +%s.%N)
        rcli "$port" --pipe <"$WORK/load.resp" >"$WORK/pipe.out" 2>&1 ||
            { tick_stop; cat "$WORK/pipe.out" >&2; die "redis-cli --pipe failed against $server"; }
        t1=$(date +%s.%N)
        tick_stop
        grep -q "errors: 0, replies: $KEYS" "$WORK/pipe.out" ||
            { cat "$WORK/pipe.out" >&2; die "loading $server: not $KEYS clean replies"; }
        n=$(rcli "$port" DBSIZE)
        [ "$n" = "$KEYS" ] || die "$server holds $n keys after loading $KEYS"
        heap1=$(infoField "$port" memory used_memory)
        pool1=0
        [ "$server" = mooncake ] && pool1=$(infoField "$port" store store_pool_used)
        extra=""
        [ "$server" = mooncake ] && extra=", store_pool_used $pool0 -> $pool1"
        echo "  memory: $server loaded $KEYS keys: used_memory $heap0 -> $heap1$extra"
        MEM_LINES+=("$server $heap0 $heap1 $pool0 $pool1 $t0 $t1")
        rcli "$port" FLUSHALL >/dev/null
    done
fi
echo

# ---- the table -------------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
pick() {  # results-file server case test column(4=rps 5=p50 6=p99)
    awk -F'\t' -v s="$2" -v c="$3" -v t="$4" -v k="$5" '$1 == s && $2 == c && $3 == t { print $k }' "$1" | median
}

fmt='%-20s %13s %15s %7s %18s %20s %10s %13s\n'
# printTable results-file case-spec...: one row per case and test, medians of the runs.
printTable() {
    local results=$1 spec name size args t r_rps m_rps ratio r_gbs m_gbs
    shift
    # shellcheck disable=SC2059
    printf "$fmt" "test" "redis ops/s" "mooncake ops/s" "ratio" "redis p50/p99 ms" "mooncake p50/p99 ms" "redis GB/s" "mooncake GB/s"
    # shellcheck disable=SC2059
    printf "$fmt" "--------------------" "-------------" "---------------" "-------" "------------------" "--------------------" "----------" "------------"
    for spec in "$@"; do
        IFS='|' read -r name size args <<<"$spec"
        for t in SET GET; do
            r_rps=$(pick "$results" redis "$name" "$t" 4); m_rps=$(pick "$results" mooncake "$name" "$t" 4)
            if [ -z "$r_rps" ] || [ -z "$m_rps" ]; then continue; fi
            read -r ratio r_gbs m_gbs < <(awk -v r="$r_rps" -v m="$m_rps" -v s="$size" 'BEGIN {
                ratio = r > 0 ? sprintf("%.2f", m / r) : "-"
                if (s >= 65536) printf "%s %.2f %.2f\n", ratio, r * s / 1e9, m * s / 1e9
                else printf "%s - -\n", ratio }')
            # shellcheck disable=SC2059
            printf "$fmt" "$t $name" "$(printf '%.0f' "$r_rps")" "$(printf '%.0f' "$m_rps")" "$ratio" \
                "$(pick "$results" redis "$name" "$t" 5)/$(pick "$results" redis "$name" "$t" 6)" \
                "$(pick "$results" mooncake "$name" "$t" 5)/$(pick "$results" mooncake "$name" "$t" 6)" "$r_gbs" "$m_gbs"
        done
    done
}

printTable "$WORK/results" "${CASES[@]}"
if [ -s "$WORK/mbresults" ]; then
    echo
    echo "Same client for both servers: src/mooncake-benchmark (values sent from one buffer, replies read in place)"
    printTable "$WORK/mbresults" "${MB_CASES[@]}"
fi

if [ -s "$WORK/libresults" ]; then
    # libresults: tag <TAB> "label size" <TAB> ops/s <TAB> GB/s <TAB> p99 ms
    lpick() { awk -F'\t' -v r="$1" -v k="$2" '$2 == r { print $k }' "$WORK/libresults" | median; }
    echo
    echo "libmooncake, one client thread (GB/s = 1e9 B/s); x = ratio to the baseline named"
    lfmt='%-20s %9s %9s %13s %13s\n'
    # shellcheck disable=SC2059
    printf "$lfmt" "test" "GB/s" "p99 ms" "x baseline" "x redis"
    for size in 1MiB 16MiB; do
        mem=$(lpick "memcpy $size" 4); tcp=$(lpick "raw TCP $size" 4)
        rset=$(lpick "SET $size" 4); rget=$(lpick "GET $size" 4)
        for row in "memcpy $size|$mem|-" "raw TCP $size|$tcp|-" "SET $size|$rset|-" "GET $size|$rget|-" \
                   "mc_put shm $size|$mem|$rset" "mc_get shm $size|$mem|$rget" \
                   "mc_put tcp $size|$tcp|$rset" "mc_get tcp $size|$tcp|$rget" \
                   "mc_put tcp x1 $size|$tcp|$rset" "mc_get tcp x1 $size|$tcp|$rget"; do
            IFS='|' read -r label base red <<<"$row"
            g=$(lpick "$label" 4)
            [ -n "$g" ] || continue
            xb="-"; xr="-"
            case "$label" in mc_*)
                xb=$(awk -v a="$g" -v b="$base" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
                xr=$(awk -v a="$g" -v b="$red" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }') ;;
            esac
            # shellcheck disable=SC2059
            printf "$lfmt" "$label" "$g" "$(lpick "$label" 5)" "$xb" "$xr"
        done
    done
    echo
    lfmt2='%-26s %12s %9s\n'
    # shellcheck disable=SC2059
    printf "$lfmt2" "4 KiB, batches of 128" "keys/s" "p99 ms"
    for label in "MSET 4KiB" "MGET 4KiB" "mc_batch_put shm 4KiB" "mc_batch_get shm 4KiB" \
                 "mc_batch_put tcp 4KiB" "mc_batch_get tcp 4KiB"; do
        o=$(lpick "$label" 3)
        [ -n "$o" ] || continue
        # MSET/MGET count commands (128 keys each); the library rows count keys.
        case "$label" in M*) o=$(awk -v o="$o" 'BEGIN { print o * 128 }') ;; esac
        # shellcheck disable=SC2059
        printf "$lfmt2" "$label" "$(printf '%.0f' "$o")" "$(lpick "$label" 5)"
    done
fi

if [ ${#MEM_LINES[@]} -eq 2 ]; then
    echo
    printf '%-44s %14s %14s\n' "memory, $KEYS keys x 64 B values" "redis" "mooncake"
    read -r _ rh0 rh1 _ _ rt0 rt1 <<<"${MEM_LINES[0]}"
    read -r _ mh0 mh1 mp0 mp1 mt0 mt1 <<<"${MEM_LINES[1]}"
    awk -v k="$KEYS" -v rh0="$rh0" -v rh1="$rh1" -v mh0="$mh0" -v mh1="$mh1" -v mp0="$mp0" -v mp1="$mp1" \
        -v rt="$(awk -v a="$rt0" -v b="$rt1" 'BEGIN { print b - a }')" \
        -v mt="$(awk -v a="$mt0" -v b="$mt1" 'BEGIN { print b - a }')" 'BEGIN {
        f = "%-44s %14s %14s\n"
        printf f, "heap (INFO used_memory) bytes/key", sprintf("%.1f", (rh1 - rh0) / k), sprintf("%.1f", (mh1 - mh0) / k)
        printf f, "values (store_pool_used) bytes/key", "-", sprintf("%.1f", (mp1 - mp0) / k)
        rt_ = (rh1 - rh0) / k; mt_ = (mh1 - mh0 + mp1 - mp0) / k
        printf f, "total bytes/key", sprintf("%.1f", rt_), sprintf("%.1f", mt_)
        printf f, "ratio (mooncake / redis)", "", sprintf("%.2f", rt_ > 0 ? mt_ / rt_ : 0)
        printf f, "load with redis-cli --pipe, SETs/s", sprintf("%.0f", rt > 0 ? k / rt : 0), sprintf("%.0f", mt > 0 ? k / mt : 0)
    }'
fi
echo
echo "ratio = mooncake / redis; latencies are redis-benchmark's per-request p50/p99 (ms)."
