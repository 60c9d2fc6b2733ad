#!/usr/bin/env python3
"""bench-sessions.py -- a layerwise KV save three ways, through the Python
drop-in (mooncake.store.MooncakeDistributedStore), interleaved in one run:

  session     batch_put_session_start(N blocks of L*page bytes), then per
              layer one batch_put_from_multi_buffer_ranges writing that
              layer's page of every block in place, then
              batch_put_session_end: N objects (vLLM's layerwise path when
              the seven session calls exist);
  per-layer   per layer one batch_put_from of N objects of one page: N*L
              objects (vLLM's layerwise fallback without sessions);
  at-end      after the last layer one batch_put_from_multi_buffers of N
              objects of L buffers each (the non-layerwise save, which
              waits for the whole forward pass).

Run by hand (not by `make test`); its table goes to BENCHMARKS.md:

    make -C src all python && PYTHONPATH=build/python /usr/bin/python3 \\
        utils/bench/bench-sessions.py [--blocks 64] [--layers 32] [--page 64k] \\
        [--rounds 5] [--transport shm|tcp]

It starts its own mooncake-server (a 1 GiB pool, a unix socket for shm)
and stops it. Each row's objects are removed, and the freed extents zeroed,
before the next row runs; the rows' order rotates every round. Reported
per row: the median wall time of the save, its rate, the server's CPU time
for it, and the objects and commands it made.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import parse_size  # noqa: E402
from conftest import Server  # noqa: E402 (benchutil put tests/python on the path)


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def commands(srv):
    stats = srv.cli("INFO", "commandstats")
    return sum(v.get("calls", 0) for v in stats.values())


def settle(srv):
    deadline = time.time() + 60
    while time.time() < deadline:
        st = srv.cli("INFO", "store")
        if int(st.get("store_pool_zeroing_bytes", 0) or 0) == 0:
            return
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--page", default="64k")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--transport", choices=["shm", "tcp"], default="shm")
    a = ap.parse_args()
    page = parse_size(a.page)
    n, layers = a.blocks, a.layers
    import numpy as np
    try:
        import mooncake  # noqa: F401 -- $PYTHONPATH wins (an installed binding, another build)
    except ImportError:  # run from the checkout as BENCHMARKS.md writes it: this tree's build
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                        "build", "python"))
    import mooncake._mooncake as _mc
    from mooncake.store import MooncakeDistributedStore

    d = tempfile.mkdtemp(prefix="bench-sessions-")
    sock = os.path.join(d, "mc.sock")
    srv = Server("--unixsocket", sock, pool="1gb")
    try:
        st = MooncakeDistributedStore()
        assert st.setup("bench", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", srv.addr) == 0
        old = st._c
        st._c = _mc.Client("unix://" + sock if a.transport == "shm" else srv.addr,
                           transport={"shm": 1, "tcp": 2}[a.transport])
        assert st._c.register(st._budget.addr, 16 << 20) == 0
        old.close()
        # The KV cache: per layer a buffer holding every block's page.
        kv = [np.random.default_rng(l).integers(0, 256, n * page, dtype=np.uint8) for l in range(layers)]
        for x in kv:
            assert st.register_buffer(x.ctypes.data, x.nbytes) == 0
        keys = [f"blk:{b}" for b in range(n)]

        def session():
            assert st.batch_put_session_start(keys, [layers * page] * n) == [0] * n
            for l in range(layers):
                base = kv[l].ctypes.data
                got = st.batch_put_from_multi_buffer_ranges(
                    keys, [[base + b * page] for b in range(n)], [[page]] * n, [[l * page]] * n)
                assert got == [page] * n, got[:4]
            assert st.batch_put_session_end(keys) == [0] * n

        def per_layer():
            for l in range(layers):
                base = kv[l].ctypes.data
                got = st.batch_put_from([f"{k}:{l}" for k in keys], [base + b * page for b in range(n)], [page] * n)
                assert got == [0] * n, got[:4]

        def at_end():
            got = st.batch_put_from_multi_buffers(
                keys, [[kv[l].ctypes.data + b * page for l in range(layers)] for b in range(n)],
                [[page] * layers] * n)
            assert got == [0] * n, got[:4]

        rows = [("session", session), ("per-layer", per_layer), ("at-end", at_end)]
        res = {name: [] for name, _ in rows}
        for r in range(a.rounds + 1):  # round 0 warms the pool's pages and the mappings
            order = rows[r % 3:] + rows[:r % 3]
            for name, fn in order:
                assert st.remove_all() >= 0
                settle(srv)
                c0, k0, t0 = proc_cpu(srv.proc.pid), commands(srv), time.perf_counter()
                fn()
                t1 = time.perf_counter()
                c1, k1 = proc_cpu(srv.proc.pid), commands(srv)
                objs = int(srv.cli("DBSIZE"))
                if r:
                    res[name].append((t1 - t0, c1 - c0, k1 - k0 - 1, objs))
        # Byte-exact: the session's objects are the layers side by side.
        assert st.remove_all() >= 0
        session()
        for b in (0, n - 1):
            want = b"".join(kv[l][b * page:(b + 1) * page].tobytes() for l in range(layers))
            assert st.get(keys[b]) == want
        st.close()
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)  # the socket's directory: it was left in /tmp after every run
    total = n * layers * page
    print(f"{n} blocks x {layers} layers x {page} B = {total / 2**20:.0f} MiB per save, {a.transport}, "
          f"{a.rounds} rounds (median; server CPU and commands per save)")
    print(f"{'row':10} {'ms':>8} {'GB/s':>7} {'range':>15} {'server CPU ms':>14} {'commands':>9} {'objects':>8}")
    base = statistics.median(x[0] for x in res["session"])
    for name, _ in rows:
        ts = [x[0] for x in res[name]]
        med = statistics.median(ts)
        line = (f"{name:10} {med * 1e3:8.1f} {total / med / 1e9:7.2f} {min(ts) * 1e3:7.1f}-{max(ts) * 1e3:<7.1f}"
                f"{statistics.median(x[1] for x in res[name]) * 1e3:14.0f} {res[name][0][2]:9d} {res[name][0][3]:8d}")
        if name != "session":
            line += f"   {base / med:5.2f}x the session's rate"
        print(line)

if __name__ == "__main__":
    main()
