#!/usr/bin/env python3
"""bench-get-buffer.py -- the read half of LMCache's pattern, taken apart.

    make -C src && /usr/bin/python3 utils/bench/bench-get-buffer.py [--procs 1,2] [--rounds 20]

Starts its own mooncake-server (a unix socket, so reads are shared memory,
as mooncake.conf sets it up) on a free port and stops it. Each process (1,
then 2 at once: the ranks of one host) writes 64 objects of a 28-byte
header and 1 MiB (LMCache's put_parts), then reads them 16 per call,
--rounds times, three ways:

  into       batch_get_into into a registered buffer (the zero-copy read)
  bufnocopy  batch_get_buffer, the handles dropped unread
  buffer     batch_get_buffer, then each payload copied out with
             numpy.frombuffer into the process's own array, as LMCache
             fills its memory object

and prints the aggregate GB/s of each. The same 64 MiB is read over and
over, so the pages are warm: this measures the calls, not the memory. The
difference between `into` and `bufnocopy` is what the handles cost; the
one between `bufnocopy` and `buffer` is LMCache's own copy.
"""
import argparse
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20


def rank(r, port, mode, rounds, q, barrier):
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import numpy as np
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("bench", "P2PHANDSHAKE", 0, 64 * MiB, "tcp", "", f"127.0.0.1:{port}") == 0
    val = np.random.default_rng(r).integers(0, 256, MiB, dtype=np.uint8).tobytes()
    keys = [f"r{r}:{mode}:{i}" for i in range(64)]
    for k in keys:
        assert s.put_parts(k, b"h" * 28, val) == 0
    dst = np.empty(16 * MiB, dtype=np.uint8)
    reg = np.empty(16 * (MiB + 64), dtype=np.uint8)
    assert s.register_buffer(reg.ctypes.data, reg.nbytes) == 0
    ptrs = [reg.ctypes.data + i * (MiB + 64) for i in range(16)]

    def load():
        for b in range(0, 64, 16):
            if mode == "into":
                assert s.batch_get_into(keys[b:b + 16], ptrs, [MiB + 28] * 16) == [MiB + 28] * 16
                continue
            bufs = s.batch_get_buffer(keys[b:b + 16])
            if mode == "buffer":
                for i, h in enumerate(bufs):
                    dst[i * MiB:(i + 1) * MiB] = np.frombuffer(h, dtype=np.uint8, offset=28, count=MiB)
            del bufs

    load()  # warm
    barrier.wait()
    t = time.perf_counter()
    for _ in range(rounds):
        load()
    q.put(time.perf_counter() - t)
    s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", default="1,2")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    d = tempfile.mkdtemp(prefix="bench-get-buffer-")
    server = subprocess.Popen([os.path.join(ROOT, "src", "mooncake-server"), "--port", str(port), "--bind",
                               "127.0.0.1", "--dir", d, "--segment-size", "2gb", "--unixsocket",
                               os.path.join(d, "s.sock")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        ctx = mp.get_context("spawn")
        print("| read | processes | aggregate GB/s |\n|---|---|---|")
        for mode in ("into", "bufnocopy", "buffer"):
            for n in (int(x) for x in args.procs.split(",")):
                q, barrier = ctx.Queue(), ctx.Barrier(n)
                ps = [ctx.Process(target=rank, args=(r, port, mode, args.rounds, q, barrier)) for r in range(n)]
                for p in ps:
                    p.start()
                times = [q.get(timeout=300) for _ in range(n)]
                for p in ps:
                    p.join()
                print(f"| {mode} | {n} | {n * args.rounds * 64 * MiB / max(times) / 1e9:.1f} |")
    finally:
        server.terminate()
        server.wait()
        subprocess.run(["rm", "-rf", d], check=False)


if __name__ == "__main__":
    main()
