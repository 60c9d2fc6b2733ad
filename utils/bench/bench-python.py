#!/usr/bin/env python3
"""bench-python.py -- what the Python binding costs, measured beside the C
library, redis-py and itself in the shapes inference engines use.

Run by hand (not by `make test`); its table goes to BENCHMARKS.md:

    make -C src && PYTHONPATH=build/python python3 utils/bench/bench-python.py [--quick]

It starts its own mooncake-server and redis-server on free ports (and stops
them), then runs `--rounds` interleaved rounds of every group, so that a
slow moment of the machine lands on all rows alike rather than on one:

  a. put_from / get_into (MooncakeDistributedStore, registered buffer) at
     1 MiB and 16 MiB, and the C library's mc_put / mc_get at the same sizes
     (src/mooncake-benchmark's library rows, same server, same run). Like
     for like, the binding's rows do what mooncake-benchmark's do (one key,
     replaced by each put: upsert_from); rows of new keys, as an engine
     writes, come beside them. Goal: binding >= 0.9x C.
  b. redis-py SET / GET of the same bytes to redis-server.
     Goal: binding >= 4x redis-py at 16 MiB.
  c. KV-cache offload: a float16 paged cache [layers, 2, blocks, tokens,
     heads, head_dim] (1 GiB by default) saved with
     batch_put_from_multi_buffers (one object per block from its
     layers*2 slices, as vLLM writes it) and restored with
     batch_get_into_multi_buffers; and batch_put_from / batch_get_into of
     contiguous blocks (one pointer per block, as a block-major layout or
     SGLang's pages give).
  d. one store shared by 1 and by 4 threads (each its own keys and buffer):
     if the GIL serialised transfers, 4 threads would gain nothing.

Each row reports GB/s (10^9 bytes of values per second, as
mooncake-benchmark does; the median over rounds, and the range), and the CPU
time spent per GB moved: the client's (this process, or mooncake-benchmark
for the C rows) and the server's (read from /proc), so that a row that is
fast only by burning more CPU shows it.
"""
import argparse
import csv
import hashlib
import io
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchutil import stop_process, GiB, MiB, Sample, children_cpu, fmt_size, free_port, parse_size, size_arg  # noqa: E402,F401

try:
    import mooncake  # noqa: F401 -- $PYTHONPATH wins (an installed binding, another build)
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
from mooncake.store import MooncakeDistributedStore  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- processes ------------------------------------------------------------------

class Server:
    """A server of ours on a free port, in a scratch directory."""

    def __init__(self, name, argv, port):
        self.name, self.port = name, port
        self.dir = tempfile.mkdtemp(prefix=f"bench-python-{name}-")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(argv + ["--dir", self.dir], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {open(self.log.name).read()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"{name} did not start")
                time.sleep(0.05)

    def cpu(self):
        """The server's CPU seconds so far (user + system, all threads)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self):
        stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        if getattr(self, "sockdir", None):
            shutil.rmtree(self.sockdir, ignore_errors=True)


def start_mooncake(binary, pool):
    port = free_port()
    # With a unix socket, as mooncake.conf has it: the library then moves the
    # bytes over shared memory (clients that connect by TCP are told its
    # path). The TCP data plane is what a client on another host gets.
    sockdir = tempfile.mkdtemp(prefix="bench-python-sock-")
    s = Server("mooncake-server", [binary, "--port", str(port), "--bind", "127.0.0.1",
                                   "--unixsocket", os.path.join(sockdir, "mc.sock"), "--unixsocketperm", "700",
                                   "--segment-size", size_arg(pool)], port)
    s.sockdir = sockdir
    # The pool is pre-faulted in the background; measuring before that ends
    # would charge page faults to whichever row runs first.
    import redis
    r = redis.Redis(port=port)
    deadline = time.time() + 60
    while time.time() < deadline:
        info = r.info("all")
        if info.get("store_pool_prefaulted", pool) >= info.get("store_pool_size", pool):
            break
        time.sleep(0.2)
    r.close()
    return s


def start_redis(binary):
    port = free_port()
    return Server("redis-server", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--protected-mode", "no"], port)


# -- measuring --------------------------------------------------------------------

def self_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def timed(server, nbytes, fn):
    """Run fn() and charge it this process's CPU and the server's."""
    s0, c0, t0 = server.cpu(), self_cpu(), time.perf_counter()
    fn()
    t1, c1, s1 = time.perf_counter(), self_cpu(), server.cpu()
    return Sample(nbytes, t1 - t0, c1 - c0, s1 - s0)


def check_codes(what, codes, want):
    bad = [c for c in codes if c != want]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of {len(codes)} failed (first: {bad[0]})")


# -- a. the C library (mooncake-benchmark's library rows) -------------------------

def c_row(args, server, test, size, volume, clients=1):
    """mc_put or mc_get of `size` bytes, one thread, the same count of calls
    as the binding's row; mooncake-benchmark times its calls itself, so its
    GB/s leaves out its start-up; its CPU is a child's, so getrusage has it
    once it has been waited for."""
    n = max(1, volume // size)
    argv = [args.benchmark, "-p", str(server.port), "-t", test, "-d", size_arg(size), "-n", str(n),
            "-c", str(clients), "-q", "--csv", "--no-progress"]
    s0, c0 = server.cpu(), children_cpu()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    c1, s1 = children_cpu(), server.cpu()
    rows = list(csv.DictReader(io.StringIO(out)))
    if len(rows) != 1 or int(rows[0]["errors"]):
        raise RuntimeError(f"mooncake-benchmark {test} {size}: {out.strip()}")
    row = rows[0]
    # Its CPU includes start-up (mapping the server's pool, filling its
    # buffers), which a long-lived engine pays once: take off what a run of
    # one call costs.
    return Sample(int(row["bytes"]) * int(row["requests"]), float(row["seconds"]),
                  max(0.0, c1 - c0 - args.c_startup_cpu), s1 - s0, float(row["gb_per_sec"]))


def c_startup_cpu(args, server):
    """CPU seconds of a mooncake-benchmark run of one small call."""
    argv = [args.benchmark, "-p", str(server.port), "-t", "mcput", "-d", "4k", "-n", "1", "-q", "--csv",
            "--no-progress"]
    c0 = children_cpu()
    subprocess.run(argv, check=True, capture_output=True)
    return children_cpu() - c0


# -- a. the binding, one call at a time ------------------------------------------

def binding_rows(ms, server, size, volume, tag, buf, check):
    """Two shapes of n calls each way. As mooncake-benchmark's rows do: one
    key, replaced by every put (upsert_from: Mooncake's put of a key that
    exists succeeds without moving a byte), then read n times -- the
    like-for-like comparison with C. And as an engine does: put_from of n
    new keys, then get_into of each (new memory every call: no cache-hot
    source or destination)."""
    n = max(1, volume // size)
    one = f"bench:{tag}:{size}:one"
    keys = [f"bench:{tag}:{size}:{i}" for i in range(n)]
    src, dst = buf.ctypes.data, buf.ctypes.data + 16 * MiB
    codes = []
    out = {}

    def run(name, fn, want):
        codes.clear()
        out[name] = timed(server, n * size, fn)
        check_codes(name, codes, want)

    run("py upsert_from (1 key)", lambda: codes.extend(ms.upsert_from(one, src, size) for _ in range(n)), 0)
    run("py get_into (1 key)", lambda: codes.extend(ms.get_into(one, dst, size) for _ in range(n)), size)
    run("py put_from (new keys)", lambda: codes.extend(ms.put_from(k, src, size) for k in keys), 0)
    run("py get_into (new keys)", lambda: codes.extend(ms.get_into(k, dst, size) for k in keys), size)
    if check and buf[:size].tobytes() != buf[16 * MiB:16 * MiB + size].tobytes():
        raise RuntimeError("get_into returned other bytes than put_from stored")
    ms.remove_all()
    return out


# -- b. redis-py -------------------------------------------------------------------

def redis_rows(r, server, size, volume, value):
    """SET then GET of one key, as redis-benchmark does (values are bytes:
    redis-py takes and returns bytes)."""
    n = max(1, volume // size)
    key = f"bench:{size}"
    got = []

    def put():
        for _ in range(n):
            r.set(key, value)

    def get():
        for _ in range(n):
            got.append(len(r.get(key)))

    sp = timed(server, n * size, put)
    sg = timed(server, n * size, get)
    if got != [size] * n:
        raise RuntimeError("redis GET returned another size")
    r.delete(key)
    return sp, sg


# -- c. KV-cache offload -----------------------------------------------------------

class KVCache:
    """A float16 paged cache [layers, 2, blocks, tokens, heads, head_dim]
    and a second, zeroed one to restore into. A block is layers*2 slices of
    tokens*heads*head_dim values; block b's slice (l, kv) is at
    ((l*2 + kv)*blocks + b) * slice bytes."""

    def __init__(self, nbytes, layers=32, tokens=16, heads=8, head_dim=128):
        import torch
        self.layers, self.slice = layers, tokens * heads * head_dim * 2
        self.blocks = max(1, nbytes // (layers * 2 * self.slice))
        self.block = layers * 2 * self.slice
        shape = (layers, 2, self.blocks, tokens, heads, head_dim)
        n = layers * 2 * self.blocks * self.slice
        # Random bytes (not randn: 1 GiB of it takes seconds); the values are never computed on.
        self.src = torch.empty(n, dtype=torch.uint8).random_().view(torch.float16).view(shape)
        self.dst = torch.zeros(shape, dtype=torch.float16)
        self.nbytes = n

    def slices(self, cache, b):
        base = cache.data_ptr()
        ptrs = [base + ((l * 2 + kv) * self.blocks + b) * self.slice for l in range(self.layers)
                for kv in range(2)]
        return ptrs, [self.slice] * len(ptrs)

    def keys(self, tag):
        """vLLM's keys: a chained sha256 of each block's token ids (made-up
        tokens: what matters is the key's shape and length)."""
        out, prev = [], b""
        for b in range(self.blocks):
            prev = hashlib.sha256(prev + b.to_bytes(8, "little") + tag.encode()).digest()
            out.append(f"bench-model@tp_rank:0@{prev.hex()}")
        return out


def offload_rows(ms, server, kv, tag, batch, check):
    """Save the whole cache and restore it, `batch` blocks per call, in the
    two forms: multi-buffer (layer-major cache, vLLM) and one contiguous
    buffer per block (the same memory read as [blocks, block bytes])."""
    keys = kv.keys(tag)
    spans = [range(i, min(i + batch, kv.blocks)) for i in range(0, kv.blocks, batch)]
    out = {}
    codes = []

    def save_multi():
        for sp in spans:
            ptrs, sizes = zip(*(kv.slices(kv.src, b) for b in sp))
            codes.extend(ms.batch_put_from_multi_buffers([keys[b] for b in sp], ptrs, sizes))

    def restore_multi():
        for sp in spans:
            ptrs, sizes = zip(*(kv.slices(kv.dst, b) for b in sp))
            codes.extend(ms.batch_get_into_multi_buffers([keys[b] for b in sp], ptrs, sizes))

    out["save multi"] = timed(server, kv.nbytes, save_multi)
    check_codes("batch_put_from_multi_buffers", codes, 0)
    codes.clear()
    kv.dst.zero_()
    out["restore multi"] = timed(server, kv.nbytes, restore_multi)
    check_codes("batch_get_into_multi_buffers", codes, kv.block)
    codes.clear()
    if check:
        import torch
        if not torch.equal(kv.src.view(torch.uint8), kv.dst.view(torch.uint8)):  # bytes: random ones hold NaNs
            raise RuntimeError("the restored cache differs from the saved one")
    ms.remove_all()

    ckeys = [k + ":c" for k in keys]
    src, dst = kv.src.data_ptr(), kv.dst.data_ptr()

    def save_contig():
        for sp in spans:
            codes.extend(ms.batch_put_from([ckeys[b] for b in sp], [src + b * kv.block for b in sp],
                                           [kv.block] * len(sp)))

    def restore_contig():
        for sp in spans:
            codes.extend(ms.batch_get_into([ckeys[b] for b in sp], [dst + b * kv.block for b in sp],
                                           [kv.block] * len(sp)))

    out["save contig"] = timed(server, kv.nbytes, save_contig)
    check_codes("batch_put_from", codes, 0)
    codes.clear()
    out["restore contig"] = timed(server, kv.nbytes, restore_contig)
    check_codes("batch_get_into", codes, kv.block)
    if check:
        import torch
        if not torch.equal(kv.src.view(torch.uint8), kv.dst.view(torch.uint8)):
            raise RuntimeError("the restored blocks differ from the saved ones")
    ms.remove_all()
    return out


# -- d. threads sharing one store --------------------------------------------------

def thread_rows(ms, server, nthreads, size, volume, tag, bufs):
    """nthreads threads, each with its own buffer and keys, put_from then
    get_into volume/nthreads bytes; wall time from the start signal to the
    last thread's end."""
    per = max(1, volume // size // nthreads)
    out = {}
    for phase in ("warm", "put", "get"):
        barrier = threading.Barrier(nthreads + 1)
        codes = [[] for _ in range(nthreads)]

        def work(t):
            ptr = bufs[t].ctypes.data
            keys = [f"bench:{tag}:t{t}:{i}" for i in range(per)]
            barrier.wait()
            if phase == "warm":
                # All threads at once, so the store's pool opens a handle per
                # thread (connections, the segment mapped) before the clock runs.
                codes[t] = [ms.put_from(keys[0] + ":warm", ptr, size), ms.remove(keys[0] + ":warm")]
            elif phase == "put":
                codes[t] = [ms.put_from(k, ptr, size) for k in keys]
            else:
                codes[t] = [ms.get_into(k, ptr, size) for k in keys]

        threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
        for th in threads:
            th.start()

        def run():
            barrier.wait()
            for th in threads:
                th.join()

        out[phase] = timed(server, per * nthreads * size, run)
        check_codes(f"{nthreads} threads {phase}", [c for cs in codes for c in cs], size if phase == "get" else 0)
    del out["warm"]
    ms.remove_all()
    return out


# -- the run -------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="one round, a quarter of the volumes and a 256 MiB cache (a smoke run)")
    p.add_argument("--volume", default="1g", help="bytes moved per row of a and d (default 1g)")
    p.add_argument("--redis-volume", default="512m",
                   help="bytes per redis-py row (default 512m: redis-py is the slow side)")
    p.add_argument("--cache", default="1g", help="KV cache size for c (default 1g)")
    p.add_argument("--offload-batch", type=int, default=32, help="blocks per batch call in c (default 32)")
    p.add_argument("--threads", type=int, default=4, help="threads for d (default 4)")
    p.add_argument("--thread-size", default="1m",
                   help="object size in d (default 1m: many calls, so a GIL held during them would show)")
    p.add_argument("--segment-size", default=None, help="mooncake-server's pool (default 2 GiB or twice the cache)")
    p.add_argument("--server", default=os.path.join(ROOT, "src", "mooncake-server"))
    p.add_argument("--benchmark", default=os.path.join(ROOT, "src", "mooncake-benchmark"))
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    p.add_argument("--skip", default="", help="groups to leave out, comma separated: c-lib,redis,offload,threads")
    args = p.parse_args()

    volume, redis_volume = parse_size(args.volume), parse_size(args.redis_volume)
    cache_bytes, rounds = parse_size(args.cache), args.rounds
    if args.quick:
        rounds, volume, redis_volume, cache_bytes = 1, volume // 4, redis_volume // 4, min(cache_bytes, 256 * MiB)
    thread_size = parse_size(args.thread_size)
    skip = set(filter(None, args.skip.split(",")))
    pool = parse_size(args.segment_size) if args.segment_size else max(2 * GiB, 2 * cache_bytes)
    sizes = (MiB, 16 * MiB)

    import numpy as np
    import redis

    mc = start_mooncake(args.server, pool)
    rs = start_redis(args.redis_server) if "redis" not in skip else None
    samples = {}  # (group, row, size) -> [Sample]

    def add(key, s):
        samples.setdefault(key, []).append(s)

    try:
        ms = MooncakeDistributedStore()
        # As vLLM's connector sets up: no segment of its own, the server's pool holds the data.
        rc = ms.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", f"127.0.0.1:{mc.port}")
        if rc != 0:
            raise RuntimeError(f"setup: {rc}")
        # Two object-sized halves: put_from from the first, get_into the second (then compared).
        buf = np.frombuffer(os.urandom(16 * MiB), dtype=np.uint8)
        buf = np.concatenate([buf, np.zeros(16 * MiB, dtype=np.uint8)])
        if ms.register_buffer(buf.ctypes.data, buf.nbytes) != 0:
            raise RuntimeError("register_buffer failed")
        # Say which path the bytes take (shm on this host, through the unix socket).
        if ms.put_from("bench:probe", buf.ctypes.data, 4096) != 0:
            raise RuntimeError("probe put failed")
        names = {0: "auto", 1: "shm", 2: "tcp", 3: "rdma"}
        print(f"transport: {names.get(ms._c.last_transport(), '?')}", flush=True)
        ms.remove("bench:probe")
        tbufs = [np.frombuffer(os.urandom(thread_size), dtype=np.uint8).copy() for _ in range(args.threads)]
        for b in tbufs:
            ms.register_buffer(b.ctypes.data, b.nbytes)
        kv = None
        if "offload" not in skip:
            kv = KVCache(cache_bytes)
            for t in (kv.src, kv.dst):
                if ms.register_buffer(t.data_ptr(), kv.nbytes) != 0:
                    raise RuntimeError("register_buffer of the KV cache failed")
        r = redis.Redis(port=rs.port) if rs else None
        args.c_startup_cpu = c_startup_cpu(args, mc) if "c-lib" not in skip else 0.0
        # One untimed call each way: the first call opens the data path.
        ms.put_from("bench:warm", buf.ctypes.data, MiB)
        ms.get_into("bench:warm", buf.ctypes.data + 16 * MiB, MiB)
        ms.remove_all()

        t_start = time.time()
        for rnd in range(rounds):
            print(f"round {rnd + 1}/{rounds} ...", file=sys.stderr, flush=True)
            first = rnd == 0
            for size in sizes:
                if "c-lib" not in skip:
                    add(("a", "C mc_put", size), c_row(args, mc, "mcput", size, volume))
                    add(("a", "C mc_get", size), c_row(args, mc, "mcget", size, volume))
                for row, s in binding_rows(ms, mc, size, volume, f"r{rnd}", buf, first).items():
                    add(("a", row, size), s)
                if r is not None:
                    value = buf[:size].tobytes()
                    sp, sg = redis_rows(r, rs, size, redis_volume, value)
                    add(("b", "redis-py SET", size), sp)
                    add(("b", "redis-py GET", size), sg)
            if kv is not None:
                for row, s in offload_rows(ms, mc, kv, f"r{rnd}", args.offload_batch, first).items():
                    add(("c", row, kv.block), s)
            if "threads" not in skip:
                for n in sorted({1, args.threads}):
                    for phase, s in thread_rows(ms, mc, n, thread_size, volume, f"r{rnd}n{n}", tbufs).items():
                        add(("d", f"py {n} thread{'s' if n > 1 else ''} {phase}", thread_size), s)
                    # The C library with as many threads (each its own handle):
                    # what this machine allows, so a shortfall of the binding's
                    # threads is told apart from the machine's.
                    if "c-lib" not in skip:
                        for test, phase in (("mcput", "put"), ("mcget", "get")):
                            add(("d", f"C {n} thread{'s' if n > 1 else ''} {phase}", thread_size),
                                c_row(args, mc, test, thread_size, volume, n))
        elapsed = time.time() - t_start
        ms.close()
        if r is not None:
            r.close()
    finally:
        mc.stop()
        if rs:
            rs.stop()

    report(samples, rounds, elapsed, kv, args, volume, redis_volume, thread_size)


def report(samples, rounds, elapsed, kv, args, volume, redis_volume, thread_size):
    groups = {"a": f"a. one call at a time, {fmt_size(volume)} per row (C: mooncake-benchmark's library rows)",
              "b": f"b. redis-py to redis-server, {fmt_size(redis_volume)} per row",
              "c": "c. KV-cache offload" + (f": {fmt_size(kv.nbytes)} float16 cache, {kv.blocks} blocks of "
                                            f"{kv.layers}x2 slices of {kv.slice // 1024} KiB, "
                                            f"{args.offload_batch} blocks per call" if kv else ""),
              "d": f"d. threads sharing one store, {fmt_size(volume)} per row in {fmt_size(thread_size)} objects"}
    med, best = {}, {}
    print(f"\n{rounds} round(s), {elapsed:.0f} s; GB/s = 10^9 bytes/s, median (min-max) over rounds;")
    print("CPU: seconds per GB moved, client (this process; mooncake-benchmark for C, less its")
    print("start-up: %.3f s) and server (/proc, 10 ms ticks: rough for short rows);" % args.c_startup_cpu)
    print("client CPU % = client CPU time / wall time.\n")
    hdr = f"{'row':<26} {'size':>8} {'GB/s':>7} {'range':>13} {'cli s/GB':>9} {'srv s/GB':>9} {'cli CPU%':>9}"
    last = None
    # Rows by group (they were measured interleaved), in the order first measured.
    for (g, row, size), ss in sorted(samples.items(), key=lambda kv: kv[0][0]):
        if g != last:
            print(f"\n{groups[g]}\n{hdr}\n{'-' * len(hdr)}")
            last = g
        gb = [s.gbps for s in ss]
        m = statistics.median(gb)
        med[(row, size)] = m
        best[(row, size)] = max(gb)
        moved = sum(s.nbytes for s in ss) / 1e9
        cli = sum(s.client_cpu for s in ss) / moved
        srv = sum(s.server_cpu for s in ss) / moved
        pct = 100 * sum(s.client_cpu for s in ss) / sum(s.wall for s in ss)
        print(f"{row:<26} {fmt_size(size):>8} {m:7.2f} {min(gb):6.2f}-{max(gb):<6.2f} {cli:9.3f} {srv:9.3f} "
              f"{pct:8.0f}%")

    # Medians, and bests beside them: on a shared machine another load
    # slows some rounds, and the best round is the one it touched least.
    print(f"\nratios{'':<40} median    best")

    def ratio(what, a, b, goal):
        if a in med and b in med and med[b] > 0:
            x, y = med[a] / med[b], best[a] / best[b]
            verdict = "" if goal is None else ("  goal >= %.2gx: %s" % (goal, "met" if x >= goal else "MISSED"))
            print(f"  {what:<44} {x:6.2f}x {y:6.2f}x{verdict}")
    for size in (MiB, 16 * MiB):
        ratio(f"upsert_from / mc_put (1 key), {fmt_size(size)}", ("py upsert_from (1 key)", size),
              ("C mc_put", size), 0.9)
        ratio(f"get_into / mc_get (1 key), {fmt_size(size)}", ("py get_into (1 key)", size), ("C mc_get", size), 0.9)
        ratio(f"put_from (new keys) / mc_put, {fmt_size(size)}", ("py put_from (new keys)", size),
              ("C mc_put", size), None)
        ratio(f"get_into (new keys) / mc_get, {fmt_size(size)}", ("py get_into (new keys)", size),
              ("C mc_get", size), None)
    for size in (MiB, 16 * MiB):
        goal = 4 if size == 16 * MiB else None
        ratio(f"upsert_from / redis-py SET, {fmt_size(size)}", ("py upsert_from (1 key)", size),
              ("redis-py SET", size), goal)
        ratio(f"get_into / redis-py GET, {fmt_size(size)}", ("py get_into (1 key)", size), ("redis-py GET", size),
              goal)
    n = args.threads
    for lang in ("py", "C"):
        for phase in ("put", "get"):
            ratio(f"{lang} {n} threads / 1 thread, {phase}", (f"{lang} {n} threads {phase}", thread_size),
                  (f"{lang} 1 thread {phase}", thread_size), None)
    for phase in ("put", "get"):
        ratio(f"py / C, {n} threads {phase}", (f"py {n} threads {phase}", thread_size),
              (f"C {n} threads {phase}", thread_size), None)


if __name__ == "__main__":
    main()
