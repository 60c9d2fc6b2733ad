#!/usr/bin/env bash
# utils/bench/bench-compare.sh -- the regression guard (issue 27): builds REV
# beside the working tree and runs the core benchmarks interleaved against
# both, printing this tree's ratio to REV with its spread.
#
# Why a script of its own: a change to a hot path is judged against the
# build before it, on the same machine in the same minutes, not against a
# figure in BENCHMARKS.md from another day and another load. The rows are
# the ones issues have been filed about; each runs against both builds in
# turn, the order rotated every round (bench-interleaved.py), so a slow
# moment of a shared machine lands on both alike.
usage() {
    cat <<'EOF'
utils/bench/bench-compare.sh -- this working tree beside an older revision,
the core benchmarks interleaved, ratios (this tree / REV) with their spread.

  utils/bench/bench-compare.sh [--runs K] [--no-python] [--no-build] [--keep] REV

  REV          any git revision (a commit, HEAD~1, main^); it is exported with
               git archive into a temp dir and built there (make -C src all),
               beside this tree's own build (make -C src all, here)
  --runs K     interleaved rounds (default 3; the spread is over the rounds)
  --no-python  leave out the Python binding's rows
  --no-build   do not run make in this tree (use its current build)
  --keep       keep the temp dir with REV's build (its path is printed)

Rows (redis-benchmark and mooncake-benchmark through bench-interleaved.py):
  small SET/GET, plain and 16-deep pipelined (3-byte values, 50 clients);
  GET.REPLICAS (getrep); BATCH.GET.REPLICAS of 128 keys (batchget/128, per
  key); PUT.START+PUT.END (putpair); mc_put/mc_get of 16 MiB over shm and
  over tcp (mcput/mcget, libmooncake of each build).
Python binding (bench-python.py's group d, with each build's binding and
server): one and four threads sharing one Store, 16 MiB objects, put and get.

Each line: the row, this tree's median, REV's median, and the ratio's median
with its range over the rounds (throughput; > 1 is faster here), then the
server CPU per request ratio (< 1 is cheaper here). Run it before resolving
an issue that touches a hot path, and quote what it printed.
EOF
}

set -euo pipefail

RUNS=3
PYTHON_ROWS=1
BUILD=1
KEEP=0
REV=
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --no-python) PYTHON_ROWS=0; shift ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -*) echo "unknown option: $1 (--help lists them)" >&2; exit 2 ;;
    *) [ -z "$REV" ] || { echo "one REV only" >&2; exit 2; }; REV=$1; shift ;;
    esac
done
[ -n "$REV" ] || { usage >&2; exit 2; }
case "$RUNS" in '' | *[!0-9]* | 0) echo "--runs takes a positive number" >&2; exit 2 ;; esac

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
git rev-parse --verify --quiet "$REV^{commit}" >/dev/null || { echo "not a revision: $REV" >&2; exit 2; }
SHA=$(git rev-parse --short "$REV^{commit}")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare.XXXXXX")
cleanup() {
    if [ "$KEEP" = 1 ]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

echo "bench-compare: this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo '+changes')) vs $REV ($SHA), $RUNS round(s)"
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"

mkdir -p "$WORK/base"
git archive "$SHA" | tar -x -C "$WORK/base"
echo "building $SHA in $WORK/base ..." >&2
make -j"$(nproc)" -C "$WORK/base/src" all >"$WORK/base-build.log" 2>&1 ||
    { tail -20 "$WORK/base-build.log" >&2; echo "building $REV failed" >&2; exit 1; }
if [ "$BUILD" = 1 ]; then
    echo "building this tree ..." >&2
    make -j"$(nproc)" -C src all >"$WORK/build.log" 2>&1 ||
        { tail -20 "$WORK/build.log" >&2; echo "building this tree failed" >&2; exit 1; }
fi

TESTS=set:1,get:1,set:16,get:16,getrep:1,batchget/128:1,putpair:1,mcput/16m/shm:1,mcget/16m/shm:1,mcput/16m/tcp:1,mcget/16m/tcp:1
# REV first: bench-interleaved.py gives each server's ratio to the first named.
"$PY" utils/bench/bench-interleaved.py "$RUNS" "$TESTS" \
    "base=$WORK/base/src/mooncake-server,bench=$WORK/base/src/mooncake-benchmark" \
    "new=$ROOT/src/mooncake-server,bench=$ROOT/src/mooncake-benchmark" >"$WORK/interleaved.out" 2>&1 ||
    { cat "$WORK/interleaved.out" >&2; exit 1; }
echo
echo "core rows (ratio = this tree / $SHA; throughput > 1 is faster, server CPU/req < 1 is cheaper)"
awk '/^medians/ { on = 1; next } on && / new / { print "  " $0 }' "$WORK/interleaved.out"

if [ "$PYTHON_ROWS" = 1 ]; then
    [ -d "$WORK/base/build/python/mooncake" ] && [ -d "$ROOT/build/python/mooncake" ] ||
        { echo "no Python binding built (python3-dev missing?): --no-python"; exit 0; }
    for r in $(seq "$RUNS"); do
        if [ $((r % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
        for who in $order; do
            if [ "$who" = base ]; then tree=$WORK/base; else tree=$ROOT; fi
            echo "python round $r/$RUNS: $who" >&2
            PYTHONPATH=$tree/build/python "$PY" utils/bench/bench-python.py --rounds 1 --volume 256m \
                --thread-size 16m --threads 4 --skip c-lib,redis,offload \
                --server "$tree/src/mooncake-server" --benchmark "$tree/src/mooncake-benchmark" \
                >"$WORK/py.$who.$r" 2>&1 || { cat "$WORK/py.$who.$r" >&2; exit 1; }
        done
    done
    echo
    echo "Python binding, one Store shared by 1 and 4 threads, 16 MiB objects (GB/s)"
    "$PY" - "$WORK" "$RUNS" <<'EOF'
import os, re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
rows = {}
# bench-python.py's table: "py 4 threads get   16 MiB   3.21   3.10-3.30 ..."
pat = re.compile(r'^(py \d+ threads? (?:put|get))\s+\d+ \S+\s+([\d.]+)\s+[\d.]+-')
for who in ('base', 'new'):
    for rnd in range(1, runs + 1):
        for line in open(os.path.join(work, f'py.{who}.{rnd}')):
            m = pat.match(line)
            if m:
                rows.setdefault(m.group(1), {}).setdefault(who, {})[rnd] = float(m.group(2))
for row, by in rows.items():
    if 'base' not in by or 'new' not in by:
        continue
    rounds = sorted(set(by['base']) & set(by['new']))
    ratio = [by['new'][r] / by['base'][r] for r in rounds if by['base'][r] > 0]
    if not ratio:
        continue
    print(f"  {row:<20} new {statistics.median(by['new'].values()):6.2f}  base {statistics.median(by['base'].values()):6.2f}"
          f"  x base {statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})")
EOF
fi
