# utils/tick.sh -- a running elapsed-time counter for the long-running shell
# tools (bench-vs-redis.sh, bench-cluster.sh, create-cluster), sourced by
# them; POSIX sh, so create-cluster can use it too.
#
#   tick_start [LABEL]   on a terminal: print LABEL, then " [N s]" after it,
#                        rewritten every TICK_INTERVAL seconds (default 1) by
#                        a background process; nothing when stdout is not
#                        a terminal
#   tick_stop            stop it and erase what tick_start printed, so the
#                        cursor is back where tick_start found it
#
# Why a suffix that erases itself rather than a line of its own: the tools
# already print one plain line per phase, which logs and pipes keep; on a
# terminal the counter rides on that line while a step runs (a redis-benchmark
# case, a reshard, a node's start-up) and leaves nothing behind, so what a
# terminal ends up showing is what a redirected run writes. A step that
# prints nothing of its own passes a LABEL, which goes away with the counter.
# The cursor is moved with ANSI CUB/EL sequences, which every terminal
# emulator in use understands; they are never written anywhere else.
#
# One counter at a time; tick_start stops a running one first. Callers kill
# it on exit too (tick_stop in their cleanup), or it would outlive them for
# up to one interval.

TICK_PID=""
TICK_LABEL=""

tick_start() {
    tick_stop
    [ -t 1 ] || return 0
    TICK_LABEL=${1:-}
    printf '%s' "$TICK_LABEL"
    (
        trap - EXIT INT TERM
        t0=$(date +%s)
        while sleep "${TICK_INTERVAL:-1}"; do
            s=" [$(($(date +%s) - t0)) s]"
            # Print the counter, then step back over it: the cursor stays
            # just after the label, where the next counter or tick_stop
            # starts. One printf is one write, so a kill never cuts it.
            printf '%s\033[%dD' "$s" "${#s}" || exit 0
        done
    ) &
    TICK_PID=$!
}

tick_stop() {
    [ -n "$TICK_PID" ] || return 0
    kill "$TICK_PID" 2>/dev/null || true
    wait "$TICK_PID" 2>/dev/null || true
    TICK_PID=""
    printf '\033[K'
    if [ -n "$TICK_LABEL" ]; then printf '\033[%dD\033[K' "${#TICK_LABEL}"; fi
    TICK_LABEL=""
}
