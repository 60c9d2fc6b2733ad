#!/usr/bin/python3
"""bench-store-full.py -- what a put does when the store is full of objects
that readers just read (BENCHMARKS.md, "Store full").

Starts its own mooncake-server (a small pool, on a free port), fills the pool
with values, has a reader GET.REPLICAS every object, then times puts of new
objects in three states of the readers:

  held      the readers hold their leases (still reading): nothing may be
            evicted, so a put fails with NOSPACE -- how fast it says so;
  released  the readers sent LEASE.RELEASE (what libmooncake does after each
            get): puts evict the least recently used and succeed;
  expired   no release, lease-ttl ran out (the behaviour before releases).

Usage: utils/bench/bench-store-full.py [--pool-mb 256] [--value-kb 1024] [--puts 200]
                                 [--lease-ttl-ms 2000] [--server src/mooncake-server]
Prints one line per state: puts ok / NOSPACE, put latency p50 and p99, rate.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import redis


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else 0.0


def put_round(r, prefix, n, size):
    """PUT.START + PUT.END of n new keys (no bytes written: the metadata
    path is what a full store changes). Returns (ok, nospace, latencies)."""
    ok = nospace = 0
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        try:
            r.execute_command("PUT.START", f"{prefix}:{i}", size)
            r.execute_command("PUT.END", f"{prefix}:{i}")
            ok += 1
        except redis.ResponseError as e:
            if not str(e).startswith("NOSPACE"):
                raise
            nospace += 1
        lat.append((time.perf_counter() - t0) * 1e6)
    return ok, nospace, lat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool-mb", type=int, default=256)
    ap.add_argument("--value-kb", type=int, default=1024)
    ap.add_argument("--puts", type=int, default=200)
    ap.add_argument("--lease-ttl-ms", type=int, default=2000)
    ap.add_argument("--server", default=os.path.join(os.path.dirname(__file__), "..", "..", "src", "mooncake-server"))
    a = ap.parse_args()
    size = a.value_kb * 1024
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="mc-storefull-")
    log = open(os.path.join(tmp, "server.log"), "w")
    srv = subprocess.Popen([a.server, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                            "--segment-size", f"{a.pool_mb}mb", "--lease-ttl", str(a.lease_ttl_ms),
                            "--busy-poll-us", "0", "--evict-high-watermark", "1.0"], stdout=log, stderr=subprocess.STDOUT)
    try:
        r = redis.Redis(port=port)
        reader = redis.Redis(port=port)
        for _ in range(200):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        print(f"pool {a.pool_mb} MiB, values {a.value_kb} KiB, {a.puts} puts per state, "
              f"lease-ttl {a.lease_ttl_ms} ms")
        for state in ("held", "released", "expired"):
            r.flushall()
            # Exactly as many as fit (eviction would make room for more).
            n = (a.pool_mb * 1024) // a.value_kb
            for i in range(n):
                r.execute_command("PUT.START", f"fill:{i}", size)
                r.execute_command("PUT.END", f"fill:{i}")
            keys = [f"fill:{i}" for i in range(n)]
            for k in keys:
                reader.execute_command("GET.REPLICAS", k)
            if state == "released":
                for k in keys:
                    reader.execute_command("LEASE.RELEASE", k)
            elif state == "expired":
                time.sleep(a.lease_ttl_ms / 1000 + 0.2)
            t0 = time.perf_counter()
            ok, nospace, lat = put_round(r, f"new-{state}", a.puts, size)
            secs = time.perf_counter() - t0
            for k in keys:  # let the next state start from an empty pool
                reader.execute_command("LEASE.RELEASE", k)
            print(f"{state:9s} objects {n:4d}  puts ok {ok:4d}  NOSPACE {nospace:4d}  "
                  f"p50 {pct(lat, 50):7.1f} us  p99 {pct(lat, 99):7.1f} us  {a.puts / secs:8.0f} puts/s")
    finally:
        srv.terminate()
        srv.wait()
        log.close()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
