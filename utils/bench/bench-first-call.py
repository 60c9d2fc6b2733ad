#!/usr/bin/env python3
"""bench-first-call.py -- what a process's first shared-memory calls cost.

    make -C src && /usr/bin/python3 utils/bench/bench-first-call.py [--pool 8gb] [--procs 4] \\
        [name=MC_SHM_WARM_AFTER value or 'auto' ...]

Starts its own mooncake-server (a unix socket and a pool of --pool, pre-
faulted before the clock) on a free port, puts objects over tcp, then runs
--procs fresh processes per policy, interleaved: policy A's process, policy
B's, A's, ... Each loads libmooncake.so with ctypes and, with the policy's
MC_SHM_WARM_AFTER in its environment (absent for 'auto'):

  start    a tcp handle's get of a 16 MiB object into the process's buffer:
           the library's once-per-process start-up, off the clock, and the
           buffer's first use by the kernel (as an engine's buffers have had)
  h1 16M   a new shm handle: mc_connect, then its first get of a 16 MiB
           object no process has read over shm (the clock is on the get)
  h2 16M   a second new handle's first get of the same object
  h3 4K    a third new handle's first get of a 4 KiB object
  fresh    the first get of another unread 16 MiB object into a buffer only
           user code has touched (memset): under a hypervisor that shadows
           page tables, the kernel's first access to it is charged here

and one more fresh process per policy for the threads row: a Python Store
(the binding's pool of handles) over the unix socket reads 32 objects of
16 MiB with one thread, ten times (the last pass is the reference rate: the
steady state, past the library's switch of a chunk from its file to its
mapping, which takes at most 8 copies), then
with four threads at once (8 objects each; three of them on handles the
pool opens for them then), each into a buffer of its own that the kernel
has used; the row is the four threads' aggregate rate over the one warm
thread's (and both rates). Each row is the median over the processes, with the range.
Default policies: map=0 (every chunk populated and copied through the
mapping at its first copy, the library before cold chunks went through the
file) against auto (measured per process).
"""
import argparse
import ctypes as C
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import free_port, parse_size, stop_process  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "src", "libmooncake", "libmooncake.so")
MiB = 1 << 20
ROWS = ("h1 16M", "h2 16M", "h3 4K", "fresh")
NOBJ = 32
WARM_PASSES = 10  # past the library's switch of a chunk from its file to its mapping (at most 8 copies)


def load_lib():
    lib = C.CDLL(LIB)
    lib.mc_connect.restype = C.c_void_p
    lib.mc_connect.argtypes = [C.c_char_p, C.c_char_p, C.c_char_p, C.c_size_t]
    lib.mc_set_transport.argtypes = [C.c_void_p, C.c_int]
    lib.mc_put.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_void_p, C.c_size_t, C.c_void_p]
    lib.mc_get.restype = C.c_longlong
    lib.mc_get.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_void_p, C.c_size_t]
    lib.mc_close.argtypes = [C.c_void_p]
    return lib


def connect(lib, uri, transport):
    err = C.create_string_buffer(256)
    h = lib.mc_connect(uri.encode(), None, err, 256)
    if not h:
        raise SystemExit(f"mc_connect({uri}): {err.value.decode()}")
    lib.mc_set_transport(h, transport)  # 1 shm, 2 tcp (mooncake.h)
    return h


def get(lib, h, key, buf, n):
    t = time.perf_counter()
    got = lib.mc_get(h, key.encode(), len(key), buf, n)
    ms = (time.perf_counter() - t) * 1e3
    if got != n:
        raise SystemExit(f"mc_get({key}) = {got}")
    return ms


def child(tcp, unix, tag):
    """One fresh process's first calls; prints its row values."""
    lib = load_lib()
    buf = C.create_string_buffer(16 * MiB)
    fresh = C.create_string_buffer(16 * MiB)
    C.memset(fresh, 1, 16 * MiB)
    t = connect(lib, tcp, 2)
    get(lib, t, f"{tag}:warm", buf, 16 * MiB)
    out = []
    for key, n, dst in ((f"{tag}:a", 16 * MiB, buf), (f"{tag}:a", 16 * MiB, buf), (f"{tag}:s", 4096, buf),
                        (f"{tag}:b", 16 * MiB, fresh)):
        h = connect(lib, unix, 1)
        out.append(get(lib, h, key, dst, n))
    print(" ".join(f"{x:.3f}" for x in out), flush=True)


def child_threads(unix, tag):
    """4 threads with new handles against 1 warm thread, one Store; prints the ratio."""
    import threading
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import mooncake
    st = mooncake.Store(f"unix://{unix}", transport="shm")
    bufs = [bytearray(16 * MiB) for _ in range(4)]
    with open("/dev/zero", "rb") as z:  # the kernel's first use of the buffers, off the clock
        for b in bufs:
            z.readinto(b)
    keys = [f"{tag}:t{i}" for i in range(NOBJ)]

    def one_pass():
        t = time.perf_counter()
        for k in keys:
            st.get_into(k, bufs[0])
        return time.perf_counter() - t

    for _ in range(WARM_PASSES - 1):
        one_pass()
    warm = one_pass()
    go = threading.Barrier(5)

    def work(i):
        go.wait()
        for k in keys[i::4]:
            st.get_into(k, bufs[i])

    ths = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in ths:
        th.start()
    go.wait()
    t = time.perf_counter()
    for th in ths:
        th.join()
    four = time.perf_counter() - t
    gb = NOBJ * 16 * MiB / 1e9
    print(f"{warm / four:.2f}x ({gb / four:.1f} / {gb / warm:.1f} GB/s)", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(*sys.argv[2:5])
    if len(sys.argv) > 1 and sys.argv[1] == "--child-threads":
        return child_threads(*sys.argv[2:4])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pool", default="8gb")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("policies", nargs="*", default=["map=0", "auto=auto"])
    args = ap.parse_args()
    policies = [p.split("=", 1) for p in args.policies]
    port, d = free_port(), tempfile.mkdtemp(prefix="bench-first-call-")
    sock = os.path.join(d, "s.sock")
    server = subprocess.Popen([os.path.join(ROOT, "src", "mooncake-server"), "--port", str(port), "--bind",
                               "127.0.0.1", "--dir", d, "--segment-size", args.pool, "--unixsocket", sock],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis  # INFO, to wait for the pool's pre-fault
        r = redis.Redis(port=port)
        for _ in range(600):
            try:
                info = r.info("store")
                if int(info.get("store_pool_prefaulted", 0)) >= parse_size(args.pool):
                    break
            except redis.ConnectionError:
                pass
            time.sleep(0.1)
        lib = load_lib()
        h = connect(lib, f"tcp://127.0.0.1:{port}", 2)
        val = os.urandom(16 * MiB)
        runs = [(name, env, i) for i in range(args.procs) for name, env in policies]
        for name, env, i in runs:
            objs = [(f"{name}{i}:{x}", n) for x, n in (("warm", 16 * MiB), ("a", 16 * MiB), ("b", 16 * MiB),
                                                       ("s", 4096))]
            if (name, env, i) == runs[0]:  # the threads rows' objects, one set for all policies
                objs += [(f"threads:t{j}", 16 * MiB) for j in range(NOBJ)]
            for key, n in objs:
                key = key.encode()
                if lib.mc_put(h, key, len(key), val, n, None) != 0:
                    raise SystemExit(f"mc_put({key}) failed")
        lib.mc_close(h)
        got = {name: [] for name, _ in policies}
        ratio = {}

        def env_of(env):
            e = dict(os.environ)
            e.pop("MC_SHM_WARM_AFTER", None)
            if env != "auto":
                e["MC_SHM_WARM_AFTER"] = env
            return e

        def run_child(env, *argv):
            p = subprocess.run([sys.executable, __file__, *argv], env=env_of(env), capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"{' '.join(argv)}: {p.stdout}{p.stderr}")
            return p.stdout

        for name, env, i in runs:
            out = run_child(env, "--child", f"tcp://127.0.0.1:{port}", f"unix://{sock}", f"{name}{i}")
            got[name].append([float(x) for x in out.split()])
        for name, env in policies:
            ratio[name] = run_child(env, "--child-threads", sock, "threads").strip()
        print(f"pool {args.pool}, {args.procs} processes per policy; ms, median (range)\n")
        print("| call | " + " | ".join(name for name, _ in policies) + " |")
        print("|---|" + "---|" * len(policies))
        for j, row in enumerate(ROWS):
            cells = []
            for name, _ in policies:
                xs = [v[j] for v in got[name]]
                cells.append(f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})")
            print(f"| {row} | " + " | ".join(cells) + " |")
        print("| 4 threads, new handles / 1 thread warm | " + " | ".join(ratio[n] for n, _ in policies) + " |")
    finally:
        stop_process(server)
        subprocess.run(["rm", "-rf", d], check=False)


if __name__ == "__main__":
    main()
