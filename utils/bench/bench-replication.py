#!/usr/bin/env python3
"""bench-replication.py -- 1 MiB SETs acknowledged by a replica (issue 28's
"replication of 1 MiB pool objects to a replica >= 1 GB/s on loopback").

    make -C src && /usr/bin/python3 utils/bench/bench-replication.py [--rounds 3] [name=path/to/mooncake-server ...]

For each build (default: src/mooncake-server), in interleaved rounds: its
own etcd and a primary owning every slot with one replica, synced, with
cluster-replica-ack yes (a SET is answered only once the replica has it),
then `redis-benchmark -t set -d 1048576 -c 4 -n 1500 -r 64` against the
primary. Prints MB/s acknowledged (10^6 bytes of values per second) per
round and the median, and the CPU each server spent per MiB. Everything
it starts is on 127.0.0.1, on free ports, and stopped at the end.

With --full-sync MIB, each round instead fills a primary's pool with MIB
values of 1 MiB, then makes a second node its replica and reports what the
full sync cost: the primary's longest slice of the snapshot (its event
loop serves nothing during one: its log's "the longest"; before slices,
the whole snapshot was built in one, "built in"), the seconds from CLUSTER
REPLICATE to the replica holding every value, and how much the primary's
memory grew (its peak RSS, VmHWM, over its RSS before; the pool is pre-
faulted, so this is the heap the sync took). --full-sync-keys N does the
same with N small keys (3-byte values, written with redis-cli --pipe). In
these modes a build named redis=redis runs redis-server instead, a primary
and a replica with diskless sync, the same data, REPLICAOF.
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import shutil
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import conftest  # noqa: E402  (SERVER, child_env, free_port)
import test_replication as tr  # noqa: E402  (Etcd, Node, call, wait_until)


def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def nodes_of(server):
    """A node factory on an etcd of its own, for one round; all stopped after."""
    d = tempfile.mkdtemp(prefix="bench-repl-")
    etcd = tr.Etcd(d)
    nodes = []
    tr.SERVER = server
    name = f"bench-{os.getpid()}-{conftest.free_port()}"

    def node(*extra):
        nodes.append(tr.Node(d, etcd, name, *extra))
        return nodes[-1]
    try:
        yield node
    finally:
        for x in nodes:
            x.kill()
        etcd.stop()
        shutil.rmtree(d, ignore_errors=True)


def meet(a, b):
    assert tr.call(b.port, "CLUSTER", "MEET", "127.0.0.1", a.port) == "OK"
    tr.wait_until(lambda: a.id in b.nodes(), 10, "meet")


def one_round(server, n, clients):
    with nodes_of(server) as node:
        extra = ("--segment-size", "512mb", "--cluster-replica-ack", "yes")
        a, b = node(*extra), node(*extra)
        assert tr.call(a.port, "CLUSTER", "ADDSLOTSRANGE", 0, 16383) == "OK"
        meet(a, b)
        assert tr.call(b.port, "CLUSTER", "REPLICATE", a.id) == "OK"
        tr.wait_until(lambda: tr.link_up(b.port), 20, "replica link up")
        ca, cb = cpu_of(a.proc.pid), cpu_of(b.proc.pid)
        out = subprocess.run(["redis-benchmark", "-p", str(a.port), "-t", "set", "-d", "1048576", "-c", str(clients),
                              "-n", str(n), "-r", "64", "--csv"], capture_output=True, text=True, check=True).stdout
        rps = float([line for line in out.splitlines() if line.startswith('"SET"')][0].split(",")[1].strip('"'))
        mib = n
        return rps * 1048576 / 1e6, (cpu_of(a.proc.pid) - ca) / mib * 1e3, (cpu_of(b.proc.pid) - cb) / mib * 1e3


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int([l for l in f if l.startswith(field + ":")][0].split()[1])


def fill(port, mib, keys):
    """A full-sync round's data: mib values of 1 MiB, 16 pipelined at a
    time, then keys small keys (3-byte values) through redis-cli --pipe."""
    val = os.urandom(1 << 20)
    c = tr.Conn(port, timeout=60)
    for i in range(0, mib, 16):
        for j in range(i, min(i + 16, mib)):
            c.send("SET", f"v{j}", val)
        for j in range(i, min(i + 16, mib)):
            assert c.read() == "OK"
    c.close()
    if keys:
        proto = b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$3\r\nabc\r\n" % (len(k), k)
                         for k in (b"key:%d" % i for i in range(keys)))
        out = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=proto, capture_output=True,
                             check=True).stdout.decode()
        assert "errors: 0" in out, out


def full_sync_round(server, mib, keys=0):
    with nodes_of(server) as node:
        pool = f"{mib + 128 + keys // 4096}mb"
        a = node("--segment-size", pool, *tr.STEADY)
        assert tr.call(a.port, "CLUSTER", "ADDSLOTSRANGE", 0, 16383) == "OK"
        fill(a.port, mib, keys)
        rss0 = status_kib(a.proc.pid, "VmRSS")
        b = node("--segment-size", pool, *tr.STEADY)
        meet(a, b)
        # The replica's pool is pre-faulted in the background at start; a
        # sync timed meanwhile would share the cores with that, which a
        # replica started long before its primary fails does not.
        tr.wait_until(lambda: prefaulted(b.port), 120, "the replica's pool pre-faulted")
        t0 = time.time()
        assert tr.call(b.port, "CLUSTER", "REPLICATE", a.id) == "OK"
        tr.wait_until(lambda: tr.link_up(b.port) and tr.synced(a, b), 300, "full sync")
        secs = time.time() - t0
        peak = status_kib(a.proc.pid, "VmHWM")
        return longest_stall_ms(a.log()), secs, (peak - rss0) / 1024


def redis_full_sync_round(mib, keys):
    """The same with redis-server: a primary (no persistence, diskless
    sync, no delay), the same data, then a replica's REPLICAOF. Its longest
    hold is the fork (INFO latest_fork_usec); the child's copy-on-write
    pages are not the primary's."""
    d = tempfile.mkdtemp(prefix="bench-repl-redis-")
    procs = []
    try:
        ports = []
        for name in ("a", "b"):
            port = conftest.free_port()
            os.makedirs(os.path.join(d, name))
            procs.append(subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "no", "--dir", os.path.join(d, name),
                                           "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port)
        for port in ports:
            tr.wait_until(lambda port=port: ping(port), 10, "redis-server up")
        a, b = ports
        fill(a, mib, keys)
        rss0 = status_kib(procs[0].pid, "VmRSS")
        t0 = time.time()
        assert tr.call(b, "REPLICAOF", "127.0.0.1", a) == "OK"
        tr.wait_until(lambda: b"master_link_status:up" in tr.call(b, "INFO", "replication"), 300, "redis sync")
        secs = time.time() - t0
        fork_ms = int(tr.info(a, "stats").get("latest_fork_usec", 0)) / 1000
        return fork_ms, secs, (status_kib(procs[0].pid, "VmHWM") - rss0) / 1024
    finally:
        for p in procs:
            conftest.stop_process(p)
        shutil.rmtree(d, ignore_errors=True)


def ping(port):
    try:
        return tr.call(port, "PING") == "PONG"
    except OSError:
        return False


def prefaulted(port):
    st = tr.info(port, "store")
    return int(st.get("store_pool_prefaulted", 0)) >= int(st.get("store_pool_size", 1))


def longest_stall_ms(log):
    """The longest the primary's event loop spent on the full sync at once:
    its longest slice, or (a build before slices) the whole snapshot."""
    done = [l for l in log.splitlines() if "full sync for replica" in l and ("built in" in l or "slices over" in l)][-1]
    if "built in" in done:
        return int(done.split("built in ")[1].split(" ms")[0])
    return int(done.split("the longest ")[1].split(" us")[0]) / 1000


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-n", type=int, default=1500, help="SETs per round (default 1500)")
    p.add_argument("-c", type=int, default=4, help="redis-benchmark clients (default 4)")
    p.add_argument("--full-sync", type=int, default=0, metavar="MIB",
                   help="measure a full sync of MIB values of 1 MiB instead")
    p.add_argument("--full-sync-keys", type=int, default=0, metavar="N",
                   help="measure a full sync of N small keys (3-byte values; with --full-sync, both)")
    p.add_argument("builds", nargs="*", help="name=path to a mooncake-server (default: this tree's)")
    args = p.parse_args()
    builds = [b.split("=", 1) for b in args.builds] or [["this", conftest.SERVER]]
    if args.full_sync or args.full_sync_keys:
        res = {name: [] for name, _ in builds}
        for r in range(args.rounds):
            for name, path in (builds if r % 2 == 0 else builds[::-1]):
                if path == "redis":
                    ms, secs, grew = redis_full_sync_round(args.full_sync, args.full_sync_keys)
                else:
                    ms, secs, grew = full_sync_round(os.path.abspath(path), args.full_sync, args.full_sync_keys)
                res[name].append((ms, secs, grew))
                print(f"round {r + 1} {name}: event loop held at most {ms:.1f} ms at once, synced in {secs:.2f} s, "
                      f"primary heap +{grew:.0f} MiB at its peak", flush=True)
        for name, rows in res.items():
            print(f"{name}: median longest hold {statistics.median([x[0] for x in rows]):.1f} ms, synced "
                  f"{statistics.median([x[1] for x in rows]):.2f} s, heap +{statistics.median([x[2] for x in rows]):.0f} MiB")
        return
    res = {name: [] for name, _ in builds}
    for r in range(args.rounds):
        for name, path in (builds if r % 2 == 0 else builds[::-1]):
            mbs, pa, pb = one_round(os.path.abspath(path), args.n, args.c)
            res[name].append((mbs, pa, pb))
            print(f"round {r + 1} {name}: {mbs:.0f} MB/s acknowledged; CPU ms per MiB: primary {pa:.2f}, "
                  f"replica {pb:.2f}", flush=True)
    for name, rows in res.items():
        m = [x[0] for x in rows]
        print(f"{name}: median {statistics.median(m):.0f} MB/s ({min(m):.0f}-{max(m):.0f}); CPU ms per MiB: "
              f"primary {statistics.median([x[1] for x in rows]):.2f}, replica {statistics.median([x[2] for x in rows]):.2f}")


if __name__ == "__main__":
    main()
