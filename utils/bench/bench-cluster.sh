#!/usr/bin/env bash
# utils/bench/bench-cluster.sh -- three mooncake-server nodes (cluster mode, etcd)
# beside a three-node Redis Cluster (Debian's redis-server), under the same
# redis-benchmark --cluster invocations, plus what slot routing costs a
# single node and what resharding costs live traffic.
#
#   utils/bench/bench-cluster.sh [--runs K] [-n REQUESTS] [--keys N] [--value BYTES]
#                          [--server PATH] [--baseline PATH] [--redis PATH]
#                          [--etcd-dir DIR] [--no-reshard]
#
#   --runs K         rounds of every throughput case, median reported (default 3)
#   -n REQUESTS      requests per throughput case (default 200000)
#   --keys N         keys loaded before resharding, spread over all slots (default 20000)
#   --value BYTES    their value size (default 4096)
#   --server PATH    mooncake-server (default src/mooncake-server)
#   --baseline PATH  an older mooncake-server without cluster support, run
#                    as a single node beside the current one (before/after)
#   --redis PATH     redis-server (default /usr/bin/redis-server)
#   --etcd-dir DIR   etcd's data dir parent (default a temp dir under /tmp,
#                    i.e. on the disk: every topology change is an fsync)
#   --no-reshard     skip the resharding section
#   --no-throughput  skip the first two sections
#   --mc-args "ARGS" extra directives for every mooncake node (e.g. "--busy-poll-us 0")
#
# Everything listens on free ports of 127.0.0.1 and is stopped on exit.
# Clusters are loaded one at a time, alternating which goes first in each
# round, so they compete only with redis-benchmark for the 2 cores. CPU is
# the servers' own (utime+stime from /proc, all three nodes), reported per
# request beside the throughput.
#
# On a terminal a status line says what runs (start-up, each run of a case,
# loading, resharding) with the seconds it has taken so far (utils/tick.sh),
# and is erased before the results; a redirected run prints only results.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
RUNS=3
REQS=200000
KEYS=20000
VALUE=4096
MC_BIN=$ROOT/src/mooncake-server
BASELINE=""
REDIS_BIN=/usr/bin/redis-server
ETCD_PARENT=""
RESHARD=1
THROUGHPUT=1
MC_ARGS=""

# shellcheck source=utils/tick.sh
. "$ROOT/utils/tick.sh"
die() { tick_stop; echo "bench-cluster: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --runs) [ $# -ge 2 ] || die "$1 needs a value"; RUNS=$2; shift ;;
    -n) [ $# -ge 2 ] || die "$1 needs a value"; REQS=$2; shift ;;
    --keys) [ $# -ge 2 ] || die "$1 needs a value"; KEYS=$2; shift ;;
    --value) [ $# -ge 2 ] || die "$1 needs a value"; VALUE=$2; shift ;;
    --server) [ $# -ge 2 ] || die "$1 needs a value"; MC_BIN=$(readlink -f "$2"); shift ;;
    --baseline) [ $# -ge 2 ] || die "$1 needs a value"; BASELINE=$(readlink -f "$2"); shift ;;
    --redis) [ $# -ge 2 ] || die "$1 needs a value"; REDIS_BIN=$2; shift ;;
    --etcd-dir) [ $# -ge 2 ] || die "$1 needs a value"; ETCD_PARENT=$2; shift ;;
    --no-reshard) RESHARD=0 ;;
    --no-throughput) THROUGHPUT=0 ;;
    --mc-args) [ $# -ge 2 ] || die "$1 needs a value"; MC_ARGS=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "bench-cluster: unknown option $1" >&2; usage 2 ;;
    esac
    shift
done

for t in redis-benchmark redis-cli etcd; do
    command -v "$t" >/dev/null || die "$t not found (Debian: redis-tools, etcd-server; or make deps-test)"
done
[ -x "$MC_BIN" ] || die "no server binary at $MC_BIN (run make)"
[ -x "$REDIS_BIN" ] || die "no redis-server at $REDIS_BIN"

WORK=$(mktemp -d "${ETCD_PARENT:-/tmp}/bench-cluster.XXXXXX")
PIDS=()
cleanup() {
    tick_stop
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# A transient status line with its running time; nothing when not a terminal.
say() { tick_start "$*"; }
done_say() { tick_stop; }

# A port p with p and p+10000 free (Redis Cluster's bus), never reused here;
# both below the kernel's ephemeral range, which outgoing connections use.
USED=" "
freePort() {
    local p
    while :; do
        p=$((10000 + RANDOM % 12000))  # p+10000 stays below the ephemeral range (32768+)
        case "$USED" in *" $p "*|*" $((p + 10000)) "*) continue ;; esac
        if ! ss -Hltn "sport = :$p or sport = :$((p + 10000))" 2>/dev/null | grep -q .; then
            USED="$USED$p $((p + 10000)) "
            echo "$p"
            return
        fi
    done
}

waitPing() {
    local port=$1 i
    for i in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    die "server on port $port did not answer"
}

cpuTicks() { # summed utime+stime of the given pids, in clock ticks
    local t=0 p
    for p in "$@"; do
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)

ETCD_PORT=$(freePort)
ETCD_PEER=$(freePort)
etcd --name bench --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "bench=http://127.0.0.1:$ETCD_PEER" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)
for i in $(seq 1 100); do
    curl -s "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q true && break
    sleep 0.1
done

MC_PORTS=() MC_PIDS=() RD_PORTS=() RD_PIDS=()
startMc() { # port [extra args...]
    local port=$1; shift
    mkdir -p "$WORK/mc$port"
    "$MC_BIN" --port "$port" --bind 127.0.0.1 --dir "$WORK/mc$port" --logfile "$WORK/mc$port/log" \
        --segment-size 1gb --save "" $MC_ARGS "$@" &
    PIDS+=($!)
    LAST_PID=$!
    waitPing "$port"
}
startRedis() { # port [extra args...]
    local port=$1; shift
    mkdir -p "$WORK/rd$port"
    "$REDIS_BIN" --port "$port" --bind 127.0.0.1 --dir "$WORK/rd$port" --logfile "$WORK/rd$port/log" \
        --save "" --appendonly no "$@" &
    PIDS+=($!)
    LAST_PID=$!
    waitPing "$port"
}

say "starting 3 mooncake nodes and 3 redis nodes..."
for i in 1 2 3; do
    p=$(freePort)
    startMc "$p" --cluster-enabled yes --cluster-etcd-endpoints "http://127.0.0.1:$ETCD_PORT" \
        --cluster-name bench --cluster-node-timeout 5000
    MC_PORTS+=("$p"); MC_PIDS+=("$LAST_PID")
    p=$(freePort)
    startRedis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 5000
    RD_PORTS+=("$p"); RD_PIDS+=("$LAST_PID")
done
createCluster() {
    local args=() p
    for p in "$@"; do args+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${args[@]}" --cluster-yes >"$WORK/create.log" 2>&1 ||
        { done_say; cat "$WORK/create.log" >&2; die "cluster create failed"; }
    for p in "$@"; do
        for i in $(seq 1 100); do
            redis-cli -p "$p" cluster info | grep -q cluster_state:ok && break
            sleep 0.1
        done
    done
}
say "creating the clusters..."
createCluster "${MC_PORTS[@]}"
createCluster "${RD_PORTS[@]}"
done_say

echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "mooncake: $("$MC_BIN" --version)"
echo "redis:    $("$REDIS_BIN" --version)"
echo "requests per case: $REQS, runs: $RUNS (median), redis-benchmark -c 50 -d 64"
echo

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print v[int((NR + 1) / 2)] }'; }

# benchOne KIND PORT "PIDS" args... -> prints "rps cpu_us_per_req"
benchOne() {
    local port=$1 pids=$2; shift 2
    local c0 c1 out rps
    c0=$(cpuTicks $pids)
    out=$(redis-benchmark -p "$port" -c 50 -d 64 -n "$REQS" -r 100000 -q "$@" 2>/dev/null | tr '\r' '\n' |
        grep -E 'requests per second' | tail -1)
    c1=$(cpuTicks $pids)
    rps=$(echo "$out" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p')
    [ -n "$rps" ] || rps=0
    awk -v r="$rps" -v c=$((c1 - c0)) -v hz="$HZ" -v n="$REQS" 'BEGIN { printf "%.0f %.2f\n", r, c / hz * 1e6 / n }'
}

# table NAME_A PORT_A PIDS_A NAME_B PORT_B PIDS_B -- case args...
compare() {
    local label=$1 na=$2 pa=$3 ida=$4 nb=$5 pb=$6 idb=$7; shift 7
    local ra=() rb=() ca=() cb=() r x
    for r in $(seq 1 "$RUNS"); do
        say "$label: run $r/$RUNS"
        if [ $((r % 2)) -eq 1 ]; then
            x=$(benchOne "$pa" "$ida" "$@"); ra+=("${x% *}"); ca+=("${x#* }")
            x=$(benchOne "$pb" "$idb" "$@"); rb+=("${x% *}"); cb+=("${x#* }")
        else
            x=$(benchOne "$pb" "$idb" "$@"); rb+=("${x% *}"); cb+=("${x#* }")
            x=$(benchOne "$pa" "$ida" "$@"); ra+=("${x% *}"); ca+=("${x#* }")
        fi
    done
    done_say
    local ma mb mca mcb
    ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
    mca=$(printf '%s\n' "${ca[@]}" | median); mcb=$(printf '%s\n' "${cb[@]}" | median)
    printf '%-28s %-10s %10s req/s %6s us-cpu/req | %-10s %10s req/s %6s us-cpu/req | ratio %s\n' \
        "$label" "$na" "$ma" "$mca" "$nb" "$mb" "$mcb" \
        "$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')"
    echo "    runs $na: ${ra[*]}  $nb: ${rb[*]}"
}

if [ "$THROUGHPUT" = 1 ]; then
echo "== redis-benchmark --cluster: 3 mooncake nodes vs 3-node Redis Cluster"
compare "SET" mooncake "${MC_PORTS[0]}" "${MC_PIDS[*]}" redis "${RD_PORTS[0]}" "${RD_PIDS[*]}" --cluster -t set
compare "GET" mooncake "${MC_PORTS[0]}" "${MC_PIDS[*]}" redis "${RD_PORTS[0]}" "${RD_PIDS[*]}" --cluster -t get
compare "SET -P 16" mooncake "${MC_PORTS[0]}" "${MC_PIDS[*]}" redis "${RD_PORTS[0]}" "${RD_PIDS[*]}" --cluster -t set -P 16
compare "GET -P 16" mooncake "${MC_PORTS[0]}" "${MC_PIDS[*]}" redis "${RD_PORTS[0]}" "${RD_PIDS[*]}" --cluster -t get -P 16
echo

echo "== slot routing on a single node: cluster mode (one node, all slots) vs plain"
p=$(freePort)
startMc "$p" --cluster-enabled yes --cluster-etcd-endpoints "http://127.0.0.1:$ETCD_PORT" --cluster-name single
SINGLE_PORT=$p SINGLE_PID=$LAST_PID
redis-cli -p "$SINGLE_PORT" cluster addslotsrange 0 16383 >/dev/null
for i in $(seq 1 100); do redis-cli -p "$SINGLE_PORT" cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
p=$(freePort)
startMc "$p"
PLAIN_PORT=$p PLAIN_PID=$LAST_PID
compare "SET -P 16" cluster "$SINGLE_PORT" "$SINGLE_PID" plain "$PLAIN_PORT" "$PLAIN_PID" -t set -P 16
compare "GET -P 16" cluster "$SINGLE_PORT" "$SINGLE_PID" plain "$PLAIN_PORT" "$PLAIN_PID" -t get -P 16
compare "GET" cluster "$SINGLE_PORT" "$SINGLE_PID" plain "$PLAIN_PORT" "$PLAIN_PID" -t get
if [ -n "$BASELINE" ]; then
    p=$(freePort)
    mkdir -p "$WORK/base$p"
    "$BASELINE" --port "$p" --bind 127.0.0.1 --dir "$WORK/base$p" --logfile "$WORK/base$p/log" --segment-size 1gb &
    PIDS+=($!); BASE_PID=$!; waitPing "$p"
    compare "SET -P 16" plain "$PLAIN_PORT" "$PLAIN_PID" baseline "$p" "$BASE_PID" -t set -P 16
    compare "GET -P 16" plain "$PLAIN_PORT" "$PLAIN_PID" baseline "$p" "$BASE_PID" -t get -P 16
fi
echo
fi

[ "$RESHARD" = 1 ] || exit 0


# Load KEYS keys of VALUE bytes, move a third of the slots from node 1 to
# node 2 with redis-cli --cluster reshard while redis-benchmark reads, and
# report keys/s and MB/s moved and the readers' latency before and during.
reshardCase() {
    local name=$1 from_port=$2 to_port=$3 pipe_port=$4
    # Keys spread over every slot (redis-benchmark --cluster would put each
    # node's keys in one slot, under one hash tag), loaded with redis-cli -c.
    say "$name: loading $KEYS keys of $VALUE bytes..."
    if [ ! -f "$WORK/load.txt" ]; then
        awk -v n="$KEYS" -v v="$VALUE" 'BEGIN { s = sprintf("%*s", v, ""); gsub(/ /, "x", s)
            for (i = 0; i < n; i++) printf "SET key:%d %s\n", i, s }' >"$WORK/load.txt"
    fi
    redis-cli -c -p "$pipe_port" <"$WORK/load.txt" >/dev/null 2>&1 || true
    local from_id to_id nslots keys_from i
    from_id=$(redis-cli -p "$from_port" cluster myid)
    to_id=$(redis-cli -p "$to_port" cluster myid)
    keys_from=$(redis-cli -p "$from_port" dbsize)
    nslots=1820
    # Readers: batches of GETs, each reporting its latency summary, so the
    # figures cover exactly the time the reshard ran.
    local batch='redis-benchmark -p '"$pipe_port"' --cluster -c 10 -n 20000 -r '"$KEYS"' -t get'
    say "$name: latency without resharding..."
    for i in 1 2 3; do $batch 2>/dev/null | tr '\r' '\n' | sed -n '/avg *min *p50/{n;p}' | tail -1; done >"$WORK/quiet.$name"
    (trap - EXIT INT TERM
     while [ ! -e "$WORK/stop.$name" ]; do
         $batch 2>/dev/null | tr '\r' '\n' | sed -n '/avg *min *p50/{n;p}' | tail -1
     done >"$WORK/during.$name") &
    local lb=$!
    sleep 0.5
    say "$name: resharding $nslots slots ($keys_from keys on the source)..."
    local t0 t1 moved
    t0=$(date +%s.%N)
    redis-cli --cluster reshard "127.0.0.1:$from_port" --cluster-from "$from_id" --cluster-to "$to_id" \
        --cluster-slots "$nslots" --cluster-yes >"$WORK/reshard.$name" 2>&1 || true
    t1=$(date +%s.%N)
    touch "$WORK/stop.$name"
    wait "$lb" 2>/dev/null || true
    moved=$((keys_from - $(redis-cli -p "$from_port" dbsize)))
    done_say
    awk -v n="$name" -v s="$nslots" -v k="$moved" -v v="$VALUE" -v t0="$t0" -v t1="$t1" 'BEGIN {
        t = t1 - t0; printf "%-9s %5d slots, %6d keys in %6.2f s: %7.0f keys/s %7.1f MB/s %6.1f slots/s\n",
        n, s, k, t, k / t, k * v / t / 1e6, s / t }'
    latRow quiet "$WORK/quiet.$name"
    latRow during "$WORK/during.$name"
    { grep -c -E 'ERR|error' "$WORK/reshard.$name" || true; } | awk '{ if ($1 > 0) print "          reshard errors: " $1 }'
}
# latRow LABEL FILE: batches' "avg min p50 p95 p99 max" -> median p50, worst p99 and max.
latRow() {
    local n p50 p99 mx
    n=$(grep -c . "$2" || true)
    if [ "$n" = 0 ]; then echo "          GET $1: no batch completed"; return; fi
    p50=$(awk '{ print $3 }' "$2" | median)
    p99=$(awk '{ print $5 }' "$2" | sort -n | tail -1)
    mx=$(awk '{ print $6 }' "$2" | sort -n | tail -1)
    printf '          GET %-6s %3d batches of 20000: p50 %s ms (median), p99 %s ms (worst), max %s ms\n' \
        "$1" "$n" "$p50" "$p99" "$mx"
}
echo "== resharding a third of the slots under a GET load ($KEYS keys x $VALUE B)"
reshardCase redis "${RD_PORTS[0]}" "${RD_PORTS[1]}" "${RD_PORTS[2]}"
reshardCase mooncake "${MC_PORTS[0]}" "${MC_PORTS[1]}" "${MC_PORTS[2]}"
