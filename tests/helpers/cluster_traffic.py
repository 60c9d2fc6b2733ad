#!/usr/bin/python3
"""cluster_traffic.py -- live traffic against a cluster while it changes.

    cluster_traffic.py --port P [--host H] [--keys N] [--prefix S]
                       [--seconds S] [--max-ops N] [--stop-file F]
                       [--ready-file F]

Run by tests/integration/cluster.tcl around `redis-cli --cluster reshard`
and the like, with Debian's /usr/bin/python3 and its python3-redis.  Through
redis-py's RedisCluster (which follows MOVED and ASK by itself) it first
writes every key PREFIX:0 .. PREFIX:N-1, creates the ready file, then keeps
overwriting keys with new values and reading keys back, checking that every
read returns the value last written (a missing key or an older value is
"stale").  It stops when the stop file appears, after --seconds, or after
--max-ops operations, whichever comes first; then it reads every key once
more.  It never leaves 127.0.0.1 unless told another host.

Output: one line "traffic ops=... writes=... reads=... errors=... stale=...
first_ms=... last_ms=... final_ok=0|1 moved=... ask=... other_retries=..."
(times are Unix milliseconds of the first and last operation of the live
phase; moved/ask count the redirections redis-py followed, other_retries
what else it retried by itself: TRYAGAIN, connection errors), then a line
per kind of such retry and up to 10 lines describing problems.  Exit status 0 only if there were no errors and no stale reads.
"""
import argparse
import logging
import os
import random
import sys
import time

import redis
from redis.cluster import RedisCluster


def now_ms():
    return int(time.time() * 1000)


class RedirectCounter(logging.Handler):
    """redis-py logs every redirection it follows (MOVED, ASK, TRYAGAIN,
    a connection retry) on the redis.cluster logger: count them instead of
    printing tracebacks."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.counts = {}

    def emit(self, record):
        name = record.msg if isinstance(record.msg, str) else getattr(record.msg, "__name__", str(record.msg))
        self.counts[name] = self.counts.get(name, 0) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--prefix", default="traffic")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--max-ops", type=int, default=1000000)
    ap.add_argument("--stop-file", default=None)
    ap.add_argument("--ready-file", default=None)
    args = ap.parse_args()

    deadline = time.time() + args.seconds
    counter = RedirectCounter()
    log = logging.getLogger("redis.cluster")
    log.addHandler(counter)
    log.propagate = False
    rc = RedisCluster(host=args.host, port=args.port, socket_timeout=10,
                      socket_connect_timeout=5)
    expected = {}
    problems = []
    errors = 0
    stale = 0

    def note(msg):
        if len(problems) < 10:
            problems.append(msg)

    def key(i):
        return "%s:%d" % (args.prefix, i)

    # Seed every key, so that migrations have real keys to move.
    for i in range(args.keys):
        v = "v%d:0" % i
        rc.set(key(i), v)
        expected[i] = v.encode()

    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write("ready\n")

    ops = writes = reads = 0
    first_ms = last_ms = 0
    gen = 0
    rnd = random.Random(12345)
    while ops < args.max_ops and time.time() < deadline:
        if args.stop_file and ops % 50 == 0 and os.path.exists(args.stop_file):
            break
        i = rnd.randrange(args.keys)
        try:
            if ops % 2 == 0:
                gen += 1
                v = ("v%d:%d" % (i, gen)).encode()
                if rc.set(key(i), v) is not True:
                    errors += 1
                    note("SET %s did not answer OK" % key(i))
                else:
                    expected[i] = v
                writes += 1
            else:
                got = rc.get(key(i))
                if got != expected[i]:
                    stale += 1
                    note("GET %s = %r, last written %r" % (key(i), got, expected[i]))
                reads += 1
        except redis.exceptions.RedisError as e:
            errors += 1
            note("%s on %s: %s" % (type(e).__name__, key(i), e))
        ops += 1
        if not first_ms:
            first_ms = now_ms()
        last_ms = now_ms()

    final_ok = 1
    for i in range(args.keys):
        try:
            got = rc.get(key(i))
        except redis.exceptions.RedisError as e:
            errors += 1
            final_ok = 0
            note("final %s on %s: %s" % (type(e).__name__, key(i), e))
            continue
        if got != expected[i]:
            stale += 1
            final_ok = 0
            note("final GET %s = %r, last written %r" % (key(i), got, expected[i]))

    print("traffic ops=%d writes=%d reads=%d errors=%d stale=%d first_ms=%d last_ms=%d final_ok=%d"
          " moved=%d ask=%d other_retries=%d"
          % (ops, writes, reads, errors, stale, first_ms, last_ms, final_ok,
             counter.counts.pop("MovedError", 0), counter.counts.pop("AskError", 0),
             sum(counter.counts.values())))
    for name, n in sorted(counter.counts.items()):
        print("retried: %s x%d" % (name, n))
    for p in problems:
        print("problem:", p)
    sys.stdout.flush()
    return 0 if errors == 0 and stale == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
