#!/usr/bin/env python3
"""bench-engines.py -- the inference engines' call patterns through the
Python drop-in (mooncake.store.MooncakeDistributedStore), several
tensor-parallel rank processes at once, beside libmooncake moving the same
bytes from C in the same run (issue 24's performance goal).

Run by hand (not by `make test`); its table goes to BENCHMARKS.md:

    make -C src && PYTHONPATH=build/python python3 utils/bench/bench-engines.py [--quick]

(python3 with numpy: Debian's /usr/bin/python3, the one the binding is
built for.) It starts its own mooncake-server on a free port (a unix
socket, as mooncake.conf has it, so that same-host clients move bytes over
shared memory; a 2 GiB pool) and stops it. For 2 and then 4 ranks it spawns
that many rank processes (multiprocessing's spawn, as the engines run one
process per rank), kept for all rounds as an engine's workers live on, each
with a MooncakeDistributedStore of its own set up as vLLM's embedded mode
does -- setup("127.0.0.1", "P2PHANDSHAKE", 64 MiB segment, 64 MiB local
buffer, "tcp", "", server) -- so every rank also contributes a segment that
the server places objects in (placement is random over the pool and the
segments: the report says how much landed where). Each rank registers a
source and a destination buffer of its share of `--total` (1 GiB by
default, split over the ranks).

Before measuring, each rank in turn writes over the whole pool once, and a
warm-up round runs every row once and checks every byte loaded. The reason
is this project's CI machines: VMs with shadow paging, where the first
access of a process to each page costs ~10 us however the mapping was
populated (0.4 GB/s; a second pass over the same pages runs at memory
speed). A long-lived engine paid that long ago, and has every chunk of the
pool it copies often in its mapping; the ranks run with MC_SHM_WARM_AFTER=0
(--shm-warm-after), so that one pass of the warm-up maps them as that
engine's have been (libmooncake otherwise copies a chunk through the
segment's file for its first few visits: mc_shm.c). mooncake-benchmark, a fresh
process per row, cannot be warmed so, and pays it for the pool pages it
writes: see "the C rows" below.

Then `--rounds` rounds, the order of the patterns rotating every round:

  1. KV save and load in each engine's call pattern (shapes as
     tests/python/engine_ranks.py makes them, at benchmark sizes):
     - vLLM (MooncakeStoreConnector): per call 32 blocks of two 512 KiB
       slices (K and V, from a K/V-first registered buffer
       [2, blocks, 512 KiB]); save: batch_is_exist(keys) then
       batch_put_from_multi_buffers of the missing ones with a
       ReplicateConfig; load: batch_get_into_multi_buffers.
     - SGLang (HiCache): two objects per page, <hash>_<rank>_k and _v, of
       512 KiB, 64 objects per call; save: batch_is_exist then
       batch_put_from of the missing ones; load: batch_get_into.
     - LMCache (save_chunk_meta, its default): save: put_parts(key, 28 B of
       chunk metadata, 1 MiB of KV) one chunk per call; load:
       batch_get_buffer of 16 keys, the header unpacked and the payload
       read through memoryview/numpy.frombuffer and copied into the
       registered ("pinned") destination, as LMCache fills its memory
       object.
     Every rank saves its share of new keys, all meet at a barrier, then
     every rank loads it back, --load-passes times (default 4, so that the
     phase lasts long enough to time on a shared machine; --load-other:
     the next rank's share). The
     phase's wall time is measured between the barriers (this process is a
     party to them), so aggregate GB/s = all ranks' bytes / that time.
     A third phase, a control: the load's calls again, but of the first
     batch of keys into the same memory over and over, as mooncake-
     benchmark's rows do -- the same bytes, C's working set.
  2. The C rows beside each pattern, right after it. By default
     (--c-rows inrank) the same rank processes run the pattern again
     from C: the libmooncake linked into the binding's extension (it
     exports the mc_* calls), through ctypes, its arguments built before
     the clock: mc_batch_put of the rank's share of objects of the
     pattern's size and keys per call from the same source memory,
     mc_batch_get of them into the same destination, the control's one
     batch again and again -- the same bytes, memory, mappings, phases and
     barriers, in warm processes. What is left between the rows is the
     binding and the engine's calls. Each round runs the two rows
     --row-samples times each, alternating E C C E E C, and takes each
     row's fastest run of a phase (pooled() says why). With --c-rows benchmark, as before: src/mooncake-
     benchmark's library rows with as many client threads as ranks, each
     its own handle: mcbput/mcbget of the same object size and keys per
     call (LMCache's put: one object per call), the same bytes in all (the
     get row: as many as the load's passes). They
     replace one batch of keys per client (so their puts walk the pool and,
     being a fresh process, pay the first touch of its pages) and read that
     batch again and again (a cache-warm source and destination).
     Goal: every engine pattern's save and load >= 0.8x its C row, the
     median of the rounds' ratios (each round's engine row against the same
     round's C row).
  3. With 4 ranks: batch_is_exist of 1024 keys (vLLM-shaped, 512 of them
     stored), polled for --exist-seconds by rank 0 alone, then by all 4
     at once (the prefix lookup of SGLang's and vLLM's ranks): calls/s
     and keys/s aggregate, p50/p99 per call.

Each row reports GB/s (10^9 bytes of KV payload per second; the median over
rounds, and the range) and the CPU time spent per GB moved: the clients'
(every rank process, from /proc; for the C rows mooncake-benchmark, less the
CPU of a run of one call) and the server's (/proc, 10 ms ticks). Between
rows every object is removed and the pool's background zeroing of freed
extents is waited for, so one row's cleanup does not land on the next. Each
rank also times its calls, so the report says where a pattern's time goes:
the library calls, the exist probes, the copy out of get_buffer's handles,
or Python between calls.
"""
import argparse
import csv
import hashlib
import io
import multiprocessing
import os
import queue
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchutil import stop_process, GiB, KiB, MiB, Sample, children_cpu, fmt_size, free_port, parse_size, size_arg  # noqa: E402,F401

try:
    import mooncake  # noqa: F401 -- $PYTHONPATH wins (an installed binding, another build)
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    os.environ["PYTHONPATH"] = os.path.join(ROOT, "build", "python") + (
        os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")

CLK_TCK = os.sysconf("SC_CLK_TCK")
PATTERNS = ("vllm", "sglang", "lmcache")
NAMES = {"vllm": "vLLM", "sglang": "SGLang", "lmcache": "LMCache"}
# Per pattern: object bytes, objects per save call, objects per load call.
SHAPES = {"vllm": (MiB, 32, 32), "sglang": (512 * KiB, 64, 64), "lmcache": (MiB, 1, 16)}
META = struct.Struct("<iiiiiii")  # LMCache's chunk header: 28 bytes
BARRIER_TIMEOUT = 300
# A pattern's phases: save, load, and load again with mooncake-benchmark's
# working set (the first batch of keys into the same memory, over and over).
PHASES = ("save", "load", "hot")


# -- the server ------------------------------------------------------------------

class Resp:
    """The few RESP commands this script sends itself (INFO, SEGMENTS)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t in (b"$", b"="):
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode(errors="replace")
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        if t == b"%":
            return {self._read(): self._read() for _ in range(int(rest))}
        if t == b"_":
            return None
        raise RuntimeError(f"unexpected reply {line!r}")

    def info(self, section):
        return dict(line.split(":", 1) for line in self.cmd("INFO", section).splitlines() if ":" in line)

    def close(self):
        self.sock.close()


def proc_stat(pid):
    """A process's CPU seconds so far (user + system, all threads) and its
    minor page faults."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[7])
    except OSError:
        return 0.0, 0


def proc_cpu(pid):
    return proc_stat(pid)[0]


class Server:
    """mooncake-server on a free port with a unix socket, in a scratch directory."""

    def __init__(self, binary, pool):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="bench-engines-")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--unixsocket", os.path.join(self.dir, "mc.sock"), "--unixsocketperm", "700",
                                      "--segment-size", size_arg(pool), "--dir", self.dir],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mooncake-server exited: {open(self.log.name).read()[-2000:]}")
            try:
                self.r = Resp(self.port)
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("mooncake-server did not start")
                time.sleep(0.05)
        # The pool is pre-faulted in the background; measuring before that
        # ends would charge page faults to whichever row runs first.
        deadline = time.time() + 60
        while time.time() < deadline:
            info = self.r.info("store")
            if int(info.get("store_pool_prefaulted", pool)) >= int(info.get("store_pool_size", pool)):
                break
            time.sleep(0.2)

    def cpu(self):
        return proc_cpu(self.proc.pid)

    def settle(self):
        """Wait until freed pool extents are zeroed (zerofree.c's thread)."""
        deadline = time.time() + 60
        while time.time() < deadline:
            info = self.r.info("store")
            if int(info.get("store_pool_zeroing_bytes", 0)) == 0 and int(info.get("store_pending_puts", 0)) == 0:
                return
            time.sleep(0.01)

    def placement(self):
        """Bytes used per segment: (pool, [rank segments])."""
        pool, ranks = 0, []
        for seg in self.r.cmd("SEGMENTS"):
            d = dict(zip(seg[0::2], seg[1::2])) if isinstance(seg, list) else seg
            if d.get("name") == "self":
                pool = int(d.get("used", 0))
            else:
                ranks.append(int(d.get("used", 0)))
        return pool, ranks

    def stop(self):
        try:
            self.r.close()
        except OSError:
            pass
        stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- a rank (runs in a process of its own) ---------------------------------------------

def fill_pattern(arr, rank):
    """Bytes that differ per rank and per offset, cheap to make and to check."""
    u = arr.view("uint64")
    import numpy as np
    step = 2 * MiB
    for i in range(0, u.size, step):
        j = min(u.size, i + step)
        u[i:j] = np.arange(i, j, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(rank + 1)


def equal_pattern(arr, rank):
    import numpy as np
    u = arr.view("uint64")
    step = 2 * MiB
    for i in range(0, u.size, step):
        j = min(u.size, i + step)
        if not np.array_equal(u[i:j], np.arange(i, j, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                              + np.uint64(rank + 1)):
            return False
    return True


class Rank:
    def __init__(self, rank, n, addr, opts):
        import numpy as np
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        self.np = np
        self.rank, self.n, self.opts = rank, n, opts
        self.addr, self._c = addr, None
        self.st = MooncakeDistributedStore()
        # vLLM's MooncakeStoreWorker: seven positional arguments, embedded
        # mode: the rank contributes a segment.
        rc = self.st.setup("127.0.0.1", "P2PHANDSHAKE", opts["segment"], opts["local_buffer"], "tcp", "", addr)
        if rc != 0:
            raise RuntimeError(f"setup: {rc}")
        self.cfg = ReplicateConfig()
        self.share = opts["share"]
        self.src = np.empty(self.share, dtype=np.uint8)
        self.dst = np.empty(self.share, dtype=np.uint8)
        fill_pattern(self.src, rank)
        self.dst.fill(0)  # faulted in before any clock runs
        for a in (self.src, self.dst):
            if self.st.register_buffer(a.ctypes.data, a.nbytes) != 0:
                raise RuntimeError("register_buffer failed")
        self.sp, self.dp = self.src.ctypes.data, self.dst.ctypes.data
        self.t, self.phase = {}, 0

    def warm(self):
        """Untimed: small objects land on every segment (random placement),
        so this rank attaches and maps them all before any clock runs."""
        keys = [f"warm:{self.rank}:{i}" for i in range(96)]
        ptrs = [self.sp + i * 4096 for i in range(96)]
        check(self.st.batch_put_from(keys, ptrs, [4096] * 96), 0, "warm put")
        check(self.st.batch_get_into(keys, [self.dp + i * 4096 for i in range(96)], [4096] * 96), 4096, "warm get")
        self.st.batch_remove(keys)
        self.dst[:96 * 4096] = 0

    def _passes(self, save, load):
        """save, load and the control, the loads read `load_passes` times."""
        k = self.opts["load_passes"]

        def loads(hot):
            for _ in range(k):
                load(hot)
        return save, lambda: loads(False), lambda: loads(True)

    # -- libmooncake from C, in this process (--c-rows inrank) --------------------------
    def clib(self):
        """libmooncake from C, through ctypes: a handle of its own on the
        same server, the rank's source and destination registered. The
        library is the very copy the binding uses (its extension links
        libmooncake statically and exports the mc_* calls), so the C rows
        share the binding's mappings of the pool: libmooncake.so would be a
        second copy with mappings of its own, and on this VM which mapping
        last touched a page decides the speed of the next copy (measured:
        rows 4x apart either way, depending on which ran just before)."""
        if self._c is None:
            import ctypes as C
            from mooncake import _mooncake
            lib = C.CDLL(_mooncake.__file__)
            lib.mc_connect.restype = C.c_void_p
            lib.mc_connect.argtypes = [C.c_char_p, C.c_char_p, C.c_char_p, C.c_size_t]
            lib.mc_register.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t, C.c_int]
            lib.mc_batch_put.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p, C.c_void_p, C.c_void_p]
            lib.mc_batch_get.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p, C.c_void_p]
            lib.mc_remove_all.argtypes = [C.c_void_p]
            lib.mc_remove_all.restype = C.c_longlong
            lib.mc_close.argtypes = [C.c_void_p]
            err = C.create_string_buffer(256)
            h = lib.mc_connect(self.addr.encode(), None, err, 256)
            if not h:
                raise RuntimeError(f"mc_connect: {err.value.decode()}")
            for a in (self.src, self.dst):
                if lib.mc_register(h, a.ctypes.data, a.nbytes, 1) != 0:
                    raise RuntimeError("mc_register failed")

            class KV(C.Structure):
                _fields_ = [("key", C.c_void_p), ("keylen", C.c_size_t), ("buf", C.c_void_p), ("len", C.c_size_t)]
            self._c = (C, lib, h, KV)
        return self._c

    def ccalls(self, keys, base, size, batch):
        """Prebuilt mc_batch_* arguments: per call (items, count, results),
        object i at base + i * size."""
        C, lib, h, KV = self.clib()
        calls = []
        for lo in range(0, len(keys), batch):
            ks = keys[lo:lo + batch]
            items = (KV * len(ks))(*[KV(C.cast(k, C.c_void_p), len(k), base + (lo + i) * size, size)
                                     for i, k in enumerate(ks)])
            calls.append((items, len(ks), (C.c_longlong * len(ks))(), ks))  # ks: the keys stay alive
        return calls

    def cpat(self, pat, tag, peer):
        """The pattern's object size and keys per call, from C: mc_batch_put
        of the rank's share from its source, mc_batch_get of the peer's into
        its destination, the same bytes as the engine's phases."""
        size, bsave, bload = SHAPES[pat]
        C, lib, h, KV = self.clib()
        nobj = self.share // size

        def keys_of(r):
            return [f"c:{pat}:{tag}:{r}:{i}".encode() for i in range(nobj)]
        put = self.ccalls(keys_of(self.rank), self.sp, size, bsave)
        get = self.ccalls(keys_of(peer), self.dp, size, bload)
        hot = get[:1] * len(get)

        def save():
            for items, m, res, _ in put:
                t0 = time.perf_counter()
                rc = lib.mc_batch_put(h, m, items, None, res)
                self._tick("C call", t0)
                if rc != m:
                    raise RuntimeError(f"mc_batch_put: {rc} of {m}")

        def load(hot_batch=False):
            for items, m, res, _ in (hot if hot_batch else get):
                t0 = time.perf_counter()
                rc = lib.mc_batch_get(h, m, items, res)
                self._tick("C call", t0)
                if rc != m:
                    raise RuntimeError(f"mc_batch_get: {rc} of {m}")
        return self._passes(save, load)

    def c_vllm(self, tag, peer):
        return self.cpat("vllm", tag, peer)

    def c_sglang(self, tag, peer):
        return self.cpat("sglang", tag, peer)

    def c_lmcache(self, tag, peer):
        return self.cpat("lmcache", tag, peer)

    def touch(self, capacity):
        """Untimed: write `capacity` bytes of 8 MiB objects, so that this
        process has touched every page of the pool and of the other ranks'
        segments through its own mappings. On a VM with shadow paging (this
        project's CI kind) the first access of a process to each page costs
        ~10 us however the mapping was populated (0.4 GB/s); a long-lived
        engine has paid that long ago, and a benchmark should not charge it
        to whichever row touches a page first."""
        size, batch = min(8 * MiB, self.share), 8
        keys = [f"touch:{self.rank}:{i}" for i in range(capacity // size)]
        for lo in range(0, len(keys), batch):
            ks = keys[lo:lo + batch]
            res = self.st.batch_put_from(ks, [self.sp] * len(ks), [size] * len(ks))
            if any(r != 0 for r in res):
                break  # full: the rest is touched already
        self.st.remove_all()

    # timing of the parts of a phase, for the report's breakdown
    def _tick(self, what, t0):
        t1 = time.perf_counter()
        key = f"{self.phase}/{what}"
        self.t[key] = self.t.get(key, 0.0) + t1 - t0
        return t1

    # -- vLLM ------------------------------------------------------------------------
    def vllm(self, tag, peer):
        size, bsave, bload = SHAPES["vllm"]
        half = size // 2
        nblocks = self.share // size
        kv_off = nblocks * half  # K/V-first: [2, nblocks, half]

        def key(r, b):
            h = hashlib.sha256(f"{tag}/{r}/{b}".encode()).hexdigest()
            return f"bench-model@tp_rank:{r}@pcp0@dcp0@pp_rank:0@group:0@{h}"

        mine = [key(self.rank, b) for b in range(nblocks)]
        theirs = [key(peer, b) for b in range(nblocks)]
        st, cfg = self.st, self.cfg

        def save():
            for lo in range(0, nblocks, bsave):
                t0 = time.perf_counter()
                keys = mine[lo:lo + bsave]
                # KVCacheStoreSendingThread: skip the blocks stored already
                exists = st.batch_is_exist(keys)
                t0 = self._tick("exist probe", t0)
                missing = [i for i, e in enumerate(exists) if e != 1]
                addrs = [[self.sp + (lo + i) * half, self.sp + kv_off + (lo + i) * half] for i in missing]
                sizes = [[half, half] for _ in missing]
                t0 = self._tick("python", t0)
                res = st.batch_put_from_multi_buffers([keys[i] for i in missing], addrs, sizes, cfg)
                t0 = self._tick("put call", t0)
                check(res, 0, "batch_put_from_multi_buffers")

        def load(hot=False):
            for lo in range(0, nblocks, bload):
                t0 = time.perf_counter()
                lo = 0 if hot else lo  # hot: the first batch again and again, as mooncake-benchmark does
                keys = theirs[lo:lo + bload]
                addrs = [[self.dp + b * half, self.dp + kv_off + b * half] for b in range(lo, lo + len(keys))]
                sizes = [[half, half]] * len(keys)
                t0 = self._tick("python", t0)
                res = st.batch_get_into_multi_buffers(keys, addrs, sizes)
                t0 = self._tick("get call", t0)
                check(res, size, "batch_get_into_multi_buffers")
        return self._passes(save, load)

    # -- SGLang -----------------------------------------------------------------------
    def sglang(self, tag, peer):
        size, bsave, bload = SHAPES["sglang"]
        nobj = self.share // size

        def keys_of(r):
            out = []
            for p in range(nobj // 2):
                h = hashlib.sha256(f"{tag}/{p}".encode()).hexdigest()
                out += [f"{h}_{r}_k", f"{h}_{r}_v"]
            return out

        mine, theirs = keys_of(self.rank), keys_of(peer)
        st = self.st

        def save():
            for lo in range(0, nobj, bsave):
                t0 = time.perf_counter()
                keys = mine[lo:lo + bsave]
                # batch_set_v1: probe, then put only the missing keys
                exists = st.batch_is_exist(keys)
                t0 = self._tick("exist probe", t0)
                missing = [i for i, e in enumerate(exists) if e != 1]
                t0 = self._tick("python", t0)
                res = st.batch_put_from([keys[i] for i in missing], [self.sp + (lo + i) * size for i in missing],
                                        [size] * len(missing))
                t0 = self._tick("put call", t0)
                check(res, 0, "batch_put_from")

        def load(hot=False):
            for lo in range(0, nobj, bload):
                t0 = time.perf_counter()
                lo = 0 if hot else lo
                keys = theirs[lo:lo + bload]
                ptrs = [self.dp + (lo + i) * size for i in range(len(keys))]
                t0 = self._tick("python", t0)
                res = st.batch_get_into(keys, ptrs, [size] * len(keys))
                t0 = self._tick("get call", t0)
                if not all(r > 0 for r in res):
                    raise RuntimeError(f"batch_get_into: {res}")
        return self._passes(save, load)

    # -- LMCache ----------------------------------------------------------------------
    def lmcache(self, tag, peer):
        chunk, _, bload = SHAPES["lmcache"]
        nchunks = self.share // chunk
        np = self.np
        mine = [f"vllm@bench-model@{self.n}@{self.rank}@{tag}{i:x}" for i in range(nchunks)]
        theirs = [f"vllm@bench-model@{self.n}@{peer}@{tag}{i:x}" for i in range(nchunks)]
        st = self.st
        srcmv = memoryview(self.src)
        dst = self.dst

        def save():
            for i, k in enumerate(mine):
                t0 = time.perf_counter()
                meta = META.pack(chunk, 2, 16, 8, 128, 1, 0)  # RemoteMetadata, per chunk
                kv = srcmv[i * chunk:(i + 1) * chunk]
                t0 = self._tick("python", t0)
                rc = st.put_parts(k, meta, kv)
                t0 = self._tick("put call", t0)
                if rc != 0:
                    raise RuntimeError(f"put_parts: {rc}")

        def load(hot=False):
            for lo in range(0, nchunks, bload):
                t0 = time.perf_counter()
                lo = 0 if hot else lo
                keys = theirs[lo:lo + bload]
                bufs = st.batch_get_buffer(keys)
                t0 = self._tick("get call", t0)
                for j, b in enumerate(bufs):
                    if b is None:
                        raise RuntimeError(f"batch_get_buffer: chunk {lo + j} missing")
                    view = memoryview(b)
                    if len(view) != META.size + chunk or META.unpack(view[:META.size])[0] != chunk:
                        raise RuntimeError("batch_get_buffer: a chunk of another shape")
                    # copy into the memory object (the registered, "pinned" buffer)
                    o = (lo + j) * chunk
                    np.copyto(dst[o:o + chunk], np.frombuffer(b, dtype=np.uint8, offset=META.size, count=chunk))
                t0 = self._tick("copy out", t0)
                del bufs, view, b
                self._tick("free handles", t0)
        return self._passes(save, load)

    # -- batch_is_exist polling ---------------------------------------------------------
    def exist(self, tag, seconds):
        """1024 keys of vLLM's shape, the even ones stored (4 KiB each)."""
        keys = [f"bench-model@tp_rank:{self.rank}@pcp0@dcp0@pp_rank:0@group:0@"
                f"{hashlib.sha256(f'{tag}/{i}'.encode()).hexdigest()}" for i in range(1024)]
        have = keys[0::2]
        check(self.st.batch_put_from(have, [self.sp + i * 4096 for i in range(len(have))], [4096] * len(have)),
              0, "exist setup put")
        want = [1, 0] * 512
        if self.st.batch_is_exist(keys) != want:
            raise RuntimeError("batch_is_exist: not the keys stored")
        st = self.st

        def poll(alone):
            def run():
                if alone and self.rank != 0:
                    return
                lat = []
                end = time.perf_counter() + seconds
                while True:
                    t0 = time.perf_counter()
                    res = st.batch_is_exist(keys)
                    t1 = time.perf_counter()
                    lat.append(t1 - t0)
                    if len(res) != 1024:
                        raise RuntimeError("batch_is_exist: a short answer")
                    if t1 >= end:
                        break
                self.lat.setdefault("exist1" if alone else "existN", []).extend(lat)
            return run
        return poll(True), poll(False)


def check(res, want, what):
    bad = [r for r in res if r != want]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of {len(res)} failed (first: {bad[0]})")


def rank_main(rank, n, addr, opts, cmd_q, res_q, barrier):
    """A rank: set up, then run the commands the parent sends, meeting it at
    the barrier before and after every phase."""
    try:
        r = Rank(rank, n, addr, opts)
        barrier.wait(BARRIER_TIMEOUT)  # every rank's segment is mounted
        r.warm()
        res_q.put((rank, "ready", os.getpid()))
    except BaseException:  # noqa: BLE001 -- reported to the parent
        res_q.put((rank, "err", traceback.format_exc()))
        barrier.abort()
        return
    while True:
        cmd = cmd_q.get()
        if cmd[0] == "stop":
            break
        kind, tag, arg = cmd
        try:
            if kind == "touch":
                r.touch(arg)
                res_q.put((rank, "ok", None))
                continue
            r.t, r.lat, r.phase = {}, {}, 0
            peer = (rank + 1) % n if opts["load_other"] else rank
            if kind == "exist":
                phases = r.exist(tag, arg)
            else:
                phases = getattr(r, kind)(tag, peer)
                if arg:  # checked round: the load must fill what is zero now
                    r.dst.fill(0)
            barrier.wait(BARRIER_TIMEOUT)  # ready: the parent reads CPU counters
            walls = []
            for r.phase, fn in enumerate(phases):
                barrier.wait(BARRIER_TIMEOUT)  # go
                t0 = time.perf_counter()
                fn()
                walls.append(time.perf_counter() - t0)
                barrier.wait(BARRIER_TIMEOUT)  # done
            if kind != "exist" and arg and not equal_pattern(r.dst, peer):
                raise RuntimeError(f"{kind}: rank {rank} loaded other bytes than rank {peer} saved")
            res_q.put((rank, "ok", {"walls": walls, "t": r.t, "lat": r.lat}))
        except BaseException:  # noqa: BLE001
            res_q.put((rank, "err", traceback.format_exc()))
            barrier.abort()
            return
    if r._c is not None:
        r._c[1].mc_close(r._c[2])
    r.st.close()


class Pool:
    """n rank processes and the barrier they share with this process."""

    def __init__(self, n, addr, opts):
        ctx = multiprocessing.get_context("spawn")
        self.n = n
        self.barrier = ctx.Barrier(n + 1)
        self.res_q = ctx.Queue()
        self.cmd_qs = [ctx.Queue() for _ in range(n)]
        self.procs = [ctx.Process(target=rank_main, args=(i, n, addr, opts, self.cmd_qs[i], self.res_q, self.barrier),
                                  daemon=True) for i in range(n)]
        for p in self.procs:
            p.start()
        try:
            self.barrier.wait(BARRIER_TIMEOUT)
        except threading.BrokenBarrierError:
            pass  # a rank failed: collect() says why
        self.collect()

    def collect(self):
        """One report per rank; a rank's error raised (all of them: the
        first to fail broke the barrier for the others)."""
        out, errs = {}, []
        while len(out) + len(errs) < self.n:
            try:
                rank, status, info = self.res_q.get(timeout=BARRIER_TIMEOUT)
            except queue.Empty:
                errs.append("a rank did not report (it died?)")
                break
            if status == "err":
                errs.append(f"rank {rank}:\n{info}")
            else:
                out[rank] = info
        if errs:
            raise RuntimeError("\n".join(errs))
        return [out[i] for i in range(self.n)]

    def stat(self):
        """CPU seconds and minor faults of all ranks."""
        st = [proc_stat(p.pid) for p in self.procs]
        return sum(c for c, _ in st), sum(f for _, f in st)

    def touch(self, server, capacity):
        """One rank at a time, so that each writes over the whole pool."""
        for i, q in enumerate(self.cmd_qs):
            q.put(("touch", "", capacity))
            rank, status, info = self.res_q.get(timeout=BARRIER_TIMEOUT)
            if status == "err":
                raise RuntimeError(f"rank {rank}:\n{info}")
            server.settle()

    def run(self, server, cmd, nphases, after_phase=None):
        """Send cmd to every rank; per phase (wall, client CPU, server CPU),
        and the ranks' reports."""
        for q in self.cmd_qs:
            q.put(cmd)
        out = []
        try:
            self.barrier.wait(BARRIER_TIMEOUT)  # ready
            for i in range(nphases):
                (c0, f0), s0 = self.stat(), server.cpu()
                self.barrier.wait(BARRIER_TIMEOUT)
                t0 = time.perf_counter()
                self.barrier.wait(BARRIER_TIMEOUT)
                t1 = time.perf_counter()
                (c1, f1), s1 = self.stat(), server.cpu()
                out.append((t1 - t0, c1 - c0, s1 - s0, f1 - f0))
                if after_phase:
                    after_phase(i)
        except threading.BrokenBarrierError:
            self.collect()  # raises the ranks' errors
            raise
        return out, self.collect()

    def stop(self):
        for q in self.cmd_qs:
            q.put(("stop",))
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()


# -- measuring -------------------------------------------------------------------

def c_argv(args, server, test, size, batch, clients, calls):
    return [args.benchmark, "-p", str(server.port), "-t", test, "-d", size_arg(size), "--batch", str(batch),
            "-c", str(clients), "-n", str(calls), "-q", "--csv", "--no-progress"]


def c_startup(args, server, test, size, batch, clients):
    """CPU of a run of one call: start-up, buffers filled, a warm call per client."""
    c0 = children_cpu()
    subprocess.run(c_argv(args, server, test, size, batch, clients, 1), check=True, capture_output=True)
    return children_cpu() - c0


def c_row(args, server, test, size, batch, clients, total, startup):
    calls = max(1, total // (size * batch))
    s0, c0 = server.cpu(), children_cpu()
    out = subprocess.run(c_argv(args, server, test, size, batch, clients, calls), check=True, capture_output=True,
                         text=True).stdout
    c1, s1 = children_cpu(), server.cpu()
    rows = list(csv.DictReader(io.StringIO(out)))
    if len(rows) != 1 or int(rows[0]["errors"]) or int(rows[0]["nil"]):
        raise RuntimeError(f"mooncake-benchmark {test} {size}: {out.strip()}")
    row = rows[0]
    # startup is a run of one call (and the warm call per client): what is
    # left is calls - 1 calls' CPU, scaled to all of them.
    cli = max(0.0, c1 - c0 - startup) * calls / (calls - 1) if calls > 1 else c1 - c0
    return Sample(int(row["bytes"]) * int(row["requests"]), float(row["seconds"]), cli, s1 - s0,
                  float(row["gb_per_sec"]))


def pooled(first, more):
    """One Sample of a row's runs of a phase in a round (`more`: (wall,
    client CPU, server CPU, faults) of the runs after the first): the
    fastest run's rate, and the CPU per byte of all of them. This VM has
    slow spells (other guests, and its shadow page tables refilled after
    the host's DAMON clears accessed bits) that only ever slow a phase
    down, as long as a phase or longer; the fastest of a few runs is each
    row's own speed, where a sum or a median would be whichever row the
    spells happened to hit."""
    if not more:
        return first
    n = len(more) + 1
    best = min([first.wall] + [m[0] for m in more])
    return Sample(first.nbytes * n, first.wall + sum(m[0] for m in more),
                  first.client_cpu + sum(m[1] for m in more), first.server_cpu + sum(m[2] for m in more),
                  first.nbytes / best / 1e9)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# -- the run ---------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="one round, 256 MiB in all, a 512 MiB pool, exist polling 0.5 s (a smoke run, under a minute)")
    p.add_argument("--total", default="1g", help="KV bytes per row, split over the ranks (default 1g)")
    p.add_argument("--ranks", default="2,4", help="rank counts, comma separated (default 2,4)")
    p.add_argument("--patterns", default=",".join(PATTERNS), help="engine patterns (default vllm,sglang,lmcache)")
    p.add_argument("--load-other", action="store_true", help="each rank loads the next rank's share")
    p.add_argument("--load-passes", type=int, default=4,
                   help="times each load phase reads the share (and its C row the same bytes; default 4: a "
                        "single pass of 1 GiB is ~0.1 s, too short to time on a shared machine)")
    p.add_argument("--exist-seconds", type=float, default=2.0, help="batch_is_exist polling per row (default 2)")
    p.add_argument("--c-rows", choices=("inrank", "benchmark"), default="inrank",
                   help="the C rows: inrank (default) -- the ranks themselves call libmooncake from C, the same "
                        "objects from and into the same memory, warm; benchmark -- mooncake-benchmark processes "
                        "re-reading one batch per client")
    p.add_argument("--row-samples", type=int, default=3,
                   help="times each round runs a pattern's engine row and its C row, in the order E C C E E C "
                        "(default 3); each phase's rate in a round is the fastest of its runs (see pooled())")
    p.add_argument("--rank-segment", default="64m", help="segment each rank contributes (default 64m)")
    p.add_argument("--local-buffer", default="64m", help="local_buffer_size of each rank (default 64m)")
    p.add_argument("--segment-size", default=None,
                   help="mooncake-server's pool (default 2 GiB or 2x --total; --quick: 512 MiB)")
    p.add_argument("--server", default=os.path.join(ROOT, "src", "mooncake-server"))
    p.add_argument("--benchmark", default=os.path.join(ROOT, "src", "mooncake-benchmark"))
    p.add_argument("--shm-warm-after", default="0",
                   help="MC_SHM_WARM_AFTER for the ranks (default 0: every chunk copied through the mapping, "
                        "the steady state of a long-lived engine, which the warm-up stands in for; 'auto': the "
                        "library's own policy, under which the rows also time its fd copies of chunks it has "
                        "copied few times)")
    args = p.parse_args()
    inrank = args.c_rows == "inrank"
    # Spawned ranks inherit the environment.
    if args.shm_warm_after == "auto":
        os.environ.pop("MC_SHM_WARM_AFTER", None)
    else:
        os.environ["MC_SHM_WARM_AFTER"] = args.shm_warm_after

    total, rounds, exist_s = parse_size(args.total), args.rounds, args.exist_seconds
    if args.quick:
        rounds, total, exist_s = 1, min(total, 256 * MiB), min(exist_s, 0.5)
    ranks = [int(x) for x in args.ranks.split(",") if x]
    patterns = [x for x in args.patterns.split(",") if x]
    for pat in patterns:
        if pat not in SHAPES:
            p.error(f"unknown pattern {pat}")
    pool_bytes = parse_size(args.segment_size) if args.segment_size else \
        max(512 * MiB if args.quick else 2 * GiB, 2 * total)
    # Every rank's share is whole calls of every pattern.
    unit = max(s * max(b, c) for s, b, c in (SHAPES[x] for x in patterns))

    from mooncake.store import MooncakeDistributedStore

    server = Server(args.server, pool_bytes)
    addr = f"127.0.0.1:{server.port}"
    samples = {}    # (pattern, ranks, phase, "py"|"C") -> [Sample]
    ratios = {}     # (pattern, ranks, phase) -> [engine/C per round]
    breakdown = {}  # (pattern, ranks, phase) -> {part: seconds summed over ranks and rounds}, and walls
    landed = {}     # (pattern, ranks) -> (pool bytes, rank segment bytes) after the first save
    exist = {}      # (label) -> {"calls": [per round], "lat": [...], "cli": s, "srv": s, "wall": s}
    startup = {}
    t_start = time.time()
    try:
        ms = MooncakeDistributedStore()
        if ms.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", addr) != 0:
            raise RuntimeError("setup of the parent's store failed")
        import numpy as np
        probe = np.zeros(4096, dtype=np.uint8)
        ms.register_buffer(probe.ctypes.data, probe.nbytes)
        if ms.put_from("bench:probe", probe.ctypes.data, 4096) != 0:
            raise RuntimeError("probe put failed")
        names = {0: "auto", 1: "shm", 2: "tcp", 3: "rdma"}
        print(f"transport: {names.get(ms._c.last_transport(), '?')}", flush=True)
        ms.remove("bench:probe")

        def clean():
            ms.remove_all()
            server.settle()

        for n in [] if inrank else ranks:
            for pat in patterns:
                size, bsave, bload = SHAPES[pat]
                for test, batch in (("mcbput", bsave), ("mcbget", bload)):
                    if (test, size, batch, n) not in startup:
                        startup[(test, size, batch, n)] = c_startup(args, server, test, size, batch, n)
        clean()

        for n in ranks:
            share = total // n // unit * unit
            if share == 0:
                raise SystemExit(f"--total {total} is too small for {n} ranks (a rank needs {unit} bytes)")
            opts = {"segment": parse_size(args.rank_segment), "local_buffer": parse_size(args.local_buffer),
                    "share": share, "load_other": args.load_other, "load_passes": args.load_passes,
                    "c_inrank": inrank}
            print(f"{n} ranks: starting them ...", file=sys.stderr, flush=True)
            pool = Pool(n, addr, opts)
            nbytes = share * n
            try:
                print(f"{n} ranks: each writes over the whole pool once (untimed) ...", file=sys.stderr, flush=True)
                pool.touch(server, int(0.97 * (pool_bytes + n * opts["segment"])))
                # Round 0 is a warm-up, not measured (--quick: measured):
                # every phase and C row once, and every byte loaded checked.
                warmup = 0 if args.quick else 1
                for rnd in range(rounds + warmup):
                    measured = rnd >= warmup
                    print(f"{n} ranks: {'round %d/%d' % (rnd + 1 - warmup, rounds) if measured else 'warm-up round'}"
                          " ...",
                          file=sys.stderr, flush=True)
                    k = rnd % len(patterns)
                    for pat in patterns[k:] + patterns[:k]:
                        size, bsave, bload = SHAPES[pat]

                        def after(i, pat=pat, n=n, measured=measured):
                            if i == 0 and measured and (pat, n) not in landed:
                                pl, segs = server.placement()
                                landed[(pat, n)] = (pl, sum(segs))

                        phases, reports = pool.run(server, (pat, f"r{rnd}", rnd == 0), 3, after)
                        clean()
                        crow = {}
                        if inrank:
                            # The same ranks, from C: the same bytes, memory and phases.
                            cph, _ = pool.run(server, ("c_" + pat, f"r{rnd}", rnd == 0), 3)
                            clean()
                            for phase, (wall, cli, srv, _) in zip(PHASES, cph):
                                crow[phase] = Sample(nbytes * (1 if phase == "save" else args.load_passes), wall,
                                                     cli, srv)
                        for phase, test, batch in () if inrank else (("save", "mcbput", bsave),
                                                                     ("load", "mcbget", bload)):
                            if test == "mcbget" and batch != bsave:
                                # every client's keys of the get's batch (its warm call writes them)
                                subprocess.run(c_argv(args, server, "mcbput", size, batch, n, 1), check=True,
                                               capture_output=True)
                                server.settle()
                            crow[phase] = c_row(args, server, test, size, batch, n,
                                                nbytes * (args.load_passes if phase == "load" else 1),
                                                startup[(test, size, batch, n)])
                        clean()
                        if not measured:
                            continue
                        # The rows again, C first, then the engine, and so on (E C C E ...):
                        # each row gets its runs at the same places in the sequence.
                        extra = {"py": [], "C": []}
                        for j in range(1, args.row_samples if inrank else 1):
                            for who in (("C", "py") if j % 2 else ("py", "C")):
                                kind = "c_" + pat if who == "C" else pat
                                ph, _ = pool.run(server, (kind, f"r{rnd}x{j}", False), 3)
                                clean()
                                extra[who].append(ph)
                        for idx, (phase, (wall, cli, srv, flt)) in enumerate(zip(PHASES, phases)):
                            py = Sample(nbytes * (1 if phase == "save" else args.load_passes), wall, cli, srv)
                            c = crow[phase] if inrank else crow["save" if phase == "save" else "load"]
                            py = pooled(py, [ph[idx] for ph in extra["py"]])
                            c = pooled(c, [ph[idx] for ph in extra["C"]])
                            samples.setdefault((pat, n, phase, "py"), []).append(py)
                            samples.setdefault((pat, n, phase, "C"), []).append(c)
                            ratios.setdefault((pat, n, phase), []).append(py.gbps / c.gbps)
                            b = breakdown.setdefault((pat, n, phase), {"wall": 0.0, "rank wall": 0.0, "parts": {},
                                                                       "faults": 0})
                            b["wall"] += wall
                            b["faults"] += flt
                            for rep in reports:
                                b["rank wall"] += rep["walls"][idx] / n
                                # each rank's timed parts ("<phase index>/<part>")
                                for part, secs in rep["t"].items():
                                    i, name = part.split("/", 1)
                                    if int(i) == idx:
                                        b["parts"][name] = b["parts"].get(name, 0.0) + secs / n
                    if n == max(ranks) and measured:
                        phases, reports = pool.run(server, ("exist", f"r{rnd}", exist_s), 2)
                        clean()
                        for (wall, cli, srv, _), label, key in zip(phases, ("1 rank alone", f"{n} ranks at once"),
                                                                ("exist1", "existN")):
                            lat = [x for rep in reports for x in rep["lat"].get(key, [])]
                            e = exist.setdefault(label, {"rate": [], "lat": [], "cli": 0.0, "srv": 0.0, "calls": 0})
                            e["rate"].append(len(lat) / wall)
                            e["lat"] += lat
                            e["cli"] += cli
                            e["srv"] += srv
                            e["calls"] += len(lat)
            finally:
                pool.stop()
                clean()
        elapsed = time.time() - t_start
        ms.close()
    finally:
        server.stop()

    report(samples, ratios, breakdown, landed, exist, rounds, elapsed, total, ranks, patterns, args, exist_s)


def report(samples, ratios, breakdown, landed, exist, rounds, elapsed, total, ranks, patterns, args, exist_s):
    def med_range(xs, fmt="%.2f"):
        return (fmt % statistics.median(xs)) + " (" + (fmt % min(xs)) + "-" + (fmt % max(xs)) + ")"

    def per_gb(ss, attr):
        return sum(getattr(s, attr) for s in ss) / (sum(s.nbytes for s in ss) / 1e9)

    calls = {
        ("vllm", "save"): "batch_is_exist + batch_put_from_multi_buffers, 32 x (2 x 512 KiB)",
        ("vllm", "load"): "batch_get_into_multi_buffers, 32 x (2 x 512 KiB)",
        ("sglang", "save"): "batch_is_exist + batch_put_from, 64 x 512 KiB",
        ("sglang", "load"): "batch_get_into, 64 x 512 KiB",
        ("lmcache", "save"): "put_parts(key, 28 B, 1 MiB), 1 per call",
        ("lmcache", "load"): "batch_get_buffer, 16 x 1 MiB, + copy out",
    }
    cdesc = {("vllm", "save"): "mcbput 1m x32", ("vllm", "load"): "mcbget 1m x32",
             ("sglang", "save"): "mcbput 512k x64", ("sglang", "load"): "mcbget 512k x64",
             ("lmcache", "save"): "mcbput 1m x1", ("lmcache", "load"): "mcbget 1m x16"}

    def cname(pat, cp):
        d = cdesc[(pat, cp)]
        return d.replace("mcbput", "mc_batch_put").replace("mcbget", "mc_batch_get") + ", in the ranks" if args.c_rows == "inrank" else d

    print(f"\n{rounds} round(s), {elapsed:.0f} s; {fmt_size(total)} of KV per row, split over the ranks; "
          f"GB/s = 10^9 B/s of payload, median (min-max) over rounds;")
    print("ratio = engine row / C row of the same round, median (min-max); CPU: seconds per GB moved, "
          "clients (all ranks; mooncake-benchmark less its start-up) and server.")

    print("\nwhere the objects landed (after the first measured save): pool / the ranks' segments")
    for (pat, n), (pl, segs) in sorted(landed.items(), key=lambda x: (x[0][1], patterns.index(x[0][0]))):
        tot = pl + segs
        print(f"  {NAMES[pat]:<8} {n} ranks: pool {pl / MiB:.0f} MiB, rank segments {segs / MiB:.0f} MiB "
              f"({100 * segs / tot if tot else 0:.0f} %)")

    print("\nwhere a rank's time goes (ms per rank per round, and % of its phase; 'other': loop and barrier)")
    for n in ranks:
        for pat in patterns:
            for phase in PHASES:
                b = breakdown.get((pat, n, phase))
                if not b:
                    continue
                rw = b["rank wall"] / rounds
                parts = b["parts"]
                known = sum(parts.values()) / rounds
                line = ", ".join(f"{k} {v / rounds * 1e3:.0f} ({100 * v / rounds / rw:.0f}%)" for k, v in parts.items())
                print(f"  {NAMES[pat]:<8} {n} ranks {phase:<4}: phase {b['wall'] / rounds * 1e3:.0f}, "
                      f"rank {rw * 1e3:.0f}: {line}, other {(rw - known) * 1e3:.0f} ({100 * (rw - known) / rw:.0f}%); "
                      f"minor faults {b['faults'] / rounds:.0f}")

    # The Markdown table.
    print("\n| pattern | ranks | phase: calls | engine GB/s | C GB/s | engine / C | >= 0.8x | "
          "client s/GB engine / C | server s/GB engine / C |")
    print("|---|---|---|---|---|---|---|---|---|")
    misses = []
    for n in ranks:
        for pat in patterns:
            for phase in PHASES:
                py, c = samples.get((pat, n, phase, "py")), samples.get((pat, n, phase, "C"))
                if not py or not c:
                    continue
                r = ratios[(pat, n, phase)]
                cp = "save" if phase == "save" else "load"
                if phase == "hot":
                    what, verdict = "load, C's working set (control)", ""
                else:
                    what = f"{phase}: {calls[(pat, phase)]}"
                    met = statistics.median(r) >= 0.8
                    verdict = "met" if met else "MISSED"
                    if not met:
                        misses.append(f"{NAMES[pat]} {n} ranks {phase}")
                print(f"| {NAMES[pat]} | {n} | {what} | {med_range([s.gbps for s in py])} | "
                      f"{med_range([s.gbps for s in c])} ({cname(pat, cp)}) | {med_range(r)}x | {verdict} | "
                      f"{per_gb(py, 'client_cpu'):.3f} / {per_gb(c, 'client_cpu'):.3f} | "
                      f"{per_gb(py, 'server_cpu'):.3f} / {per_gb(c, 'server_cpu'):.3f} |")
    if exist:
        print(f"\n| batch_is_exist, 1024 keys (512 stored), {exist_s:g} s per row | calls/s | keys/s | "
              f"p50 ms | p99 ms | client CPU us/call | server CPU us/call |")
        print("|---|---|---|---|---|---|---|")
        for label, e in exist.items():
            print(f"| {label} | {med_range(e['rate'], '%.0f')} | {statistics.median(e['rate']) * 1024 / 1e6:.2f} M | "
                  f"{pct(e['lat'], 50) * 1e3:.2f} | {pct(e['lat'], 99) * 1e3:.2f} | "
                  f"{e['cli'] / e['calls'] * 1e6:.0f} | {e['srv'] / e['calls'] * 1e6:.0f} |")
    print(f"\ngoal (every engine pattern's save and load >= 0.8x C, median of the rounds' ratios): "
          f"{'met' if not misses else 'MISSED by ' + ', '.join(misses)}")


if __name__ == "__main__":
    main()
