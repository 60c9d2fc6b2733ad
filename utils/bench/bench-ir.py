#!/usr/bin/env python3
"""utils/bench/bench-ir.py -- instructions per request, this server beside
redis-server, counted by valgrind's callgrind.

    utils/bench/bench-ir.py [--quick] [--only REGEX] [--keep DIR] [NAME=BINARY[,ARG...]]...

Why instructions and why callgrind: the project's machines are shared cores
in VMs with no hardware counters (`perf stat -e instructions` answers
<not supported>), so neither throughput nor CPU time is steady enough to see
a 10-30 % difference in per-request work. Callgrind counts every user-space
instruction the server executes, all threads together, the same in every
run whatever the neighbours do. It does not count the kernel (socket
copies, epoll), which is the same work for both servers given the same
traffic; and it slows the server ~50x, so the client always has requests
waiting and each read finds more of them than it would natively: per-request
loop overhead is a little lower than on bare metal, equally for both.

Each SERVER (default: ours=src/mooncake-server and redis=redis) runs under
callgrind for the whole session; before each case the counters are zeroed
(callgrind_control -z), after it they are dumped (-d), so prefilling keys,
starting up and the cases before are not counted, and the dump's total over
the case's requests is the row's figure. Ours runs with --busy-poll-us 0: a
spin's instructions depend on time, which callgrind distorts; Redis has no
spin. Neither persists (save "", appendonly no).

The cases are redis-benchmark's: PING, INCR, EXISTS, DEL, and SET, GET, MSET
(10 keys), MGET (10 keys) at 16 B, 1 KiB, 64 KiB and 1 MiB, each at -P 1 and
-P 32, over keys prefilled with values of the row's size; then the same
small commands (16 B values as a literal argument) on t: keys for three
users: the default user, `acl` (allkeys, +@all -@dangerous: a command bit
test) and `tenant` (~t:* +@all: a user restricted to a key prefix, indexed
by the server). Prints one line per case and, at the end, a table (Ir per
request per server and the ratio to redis).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from benchutil import free_port, resp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))




class Server:
    def __init__(self, name, binary, args, tmp):
        self.name, self.port = name, free_port()
        self.out = os.path.join(tmp, name)
        os.makedirs(self.out)
        if binary == "redis":
            cmd = ["/usr/bin/redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", self.out]
        else:
            cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", self.out, "--busy-poll-us", "0",
                   "--segment-size", "1gb"]
        cmd += args
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s/cg.%%p" % self.out] + cmd,
            stdout=open(os.path.join(self.out, "log"), "w"), stderr=subprocess.STDOUT)
        for _ in range(600):
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.1)
        raise RuntimeError("%s did not start" % name)

    def cli(self, *args, user=None):
        auth = ["--user", user, "--pass", "pass"] if user else []
        r = subprocess.run(["redis-cli", "-p", str(self.port), "--no-auth-warning"] + auth
                           + list(args), capture_output=True, text=True)
        return r.stdout

    def pipe(self, data):
        r = subprocess.run(["redis-cli", "-p", str(self.port), "--pipe"], input=data,
                           capture_output=True)
        if b"errors: 0" not in r.stdout:
            raise RuntimeError("prefill: %s" % r.stdout[-300:])

    def ctl(self, opt):
        subprocess.run(["callgrind_control", opt, str(self.proc.pid)], check=True,
                       capture_output=True)

    def count(self, bench):
        """Ir of the server while bench (a redis-benchmark argv) runs."""
        before = set(glob.glob(self.out + "/cg.*.*"))
        self.ctl("-z")
        r = subprocess.run(bench, capture_output=True, text=True)
        self.ctl("-d")
        if r.returncode != 0 or re.search(r"ERR|NOPERM|rror", r.stdout + r.stderr):
            raise RuntimeError("%s: %s" % (" ".join(bench), (r.stdout + r.stderr)[-400:]))
        new = sorted(set(glob.glob(self.out + "/cg.*.*")) - before,
                     key=lambda p: int(p.rsplit(".", 1)[1]))
        with open(new[-1]) as f:
            for line in f:
                if line.startswith("totals:"):
                    return int(line.split()[1]), new[-1]
        raise RuntimeError("no totals in " + new[-1])

    def stop(self):
        self.cli("SHUTDOWN", "NOSAVE")
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


SIZES = [(16, "16B", 100000), (1024, "1KiB", 100000), (65536, "64KiB", 2000),
         (1 << 20, "1MiB", 100)]


def cases(quick):
    """(name, prefill (size, keyspace, prefix) or None, redis-benchmark args, user)."""
    out = []
    scale = 5 if quick else 1
    for p in (1, 32):
        n = (20000 if p == 1 else 100000) // scale
        base = ["-c", "10", "-P", str(p)]
        out.append(("PING P%d" % p, None, base + ["-n", str(n), "-t", "ping_mbulk"], None))
        out.append(("INCR P%d" % p, None, base + ["-n", str(n), "-r", "100000", "-t", "incr"], None))
        for size, label, keys in SIZES:
            big = size >= 65536
            nn = n // (50 if size >= 1 << 20 else 10 if big else 1)
            if quick and big:
                nn = max(nn // 4, 20)
            b = ["-c", "1" if size >= 1 << 20 else "10", "-P", str(p), "-n", str(nn),
                 "-r", str(keys), "-d", str(size)]
            pre = (size, keys, "key:")
            out.append(("SET %s P%d" % (label, p), pre, b + ["-t", "set"], None))
            out.append(("GET %s P%d" % (label, p), pre, b + ["-t", "get"], None))
            out.append(("MSET %s P%d" % (label, p), pre, b + ["-t", "mset"], None))
            # 32 replies of 10 MiB in flight: a server under callgrind took
            # so long that redis-benchmark gave up on the connection.
            if not (p == 32 and size >= 1 << 20):
                out.append(("MGET10 %s P%d" % (label, p), pre, b + ["MGET"] + ["key:__rand_int__"] * 10, None))
        b = base + ["-n", str(n), "-r", "100000"]
        out.append(("EXISTS P%d" % p, (16, 100000, "key:"), b + ["EXISTS", "key:__rand_int__"], None))
        out.append(("DEL P%d" % p, (16, 100000, "key:"), b + ["DEL", "key:__rand_int__"], None))
        for user in (None, "acl", "tenant"):
            u = user or "default"
            pre = (16, 100000, "t:")
            out.append(("%s SET16 P%d" % (u, p), pre, b + ["SET", "t:__rand_int__", "x" * 16], user))
            out.append(("%s GET P%d" % (u, p), pre, b + ["GET", "t:__rand_int__"], user))
            out.append(("%s INCR P%d" % (u, p), None, b + ["INCR", "t:n:__rand_int__"], user))
            out.append(("%s MGET10 P%d" % (u, p), pre, b + ["MGET"] + ["t:__rand_int__"] * 10, user))
            out.append(("%s EXISTS P%d" % (u, p), pre, b + ["EXISTS", "t:__rand_int__"], user))
            out.append(("%s DEL P%d" % (u, p), pre, b + ["DEL", "t:__rand_int__"], user))
    return out


def store_cases(quick):
    """PUT.START+PUT.END pairs, GET.REPLICAS, and their batch forms (16 keys),
    64-byte reservations, every key named once (--sequential), so GET.REPLICAS
    finds the keys the pairs wrote; -n counts a pair, a GET.REPLICAS, or a
    batch command."""
    out = []
    for p in (1, 32):
        n = (20000 if p == 1 else 100000) // (5 if quick else 1)
        b = ["mc", "-c", "10", "-P", str(p), "-d", "64", "-r", str(n), "--sequential"]
        out.append(("PUT.START+END P%d" % p, None, b + ["-n", str(n), "-t", "putpair"], None))
        out.append(("GET.REPLICAS P%d" % p, None, b + ["-n", str(n), "-t", "getrep"], None))
        out.append(("BATCH.PUT 16 P%d" % p, None, b + ["-n", str(n // 16), "-t", "batchput"], None))
        out.append(("BATCH.GET.REPLICAS 16 P%d" % p, None,
                    b + ["-n", str(n // 16), "-t", "batchget"], None))
    return out


def prefill(srv, size, keys, prefix, done):
    if done.get(srv.name) == (size, keys, prefix):
        return
    val = b"x" * size
    chunk = []
    for i in range(keys):
        chunk.append(resp("SET", "%s%012d" % (prefix, i), val))
        if len(chunk) * size > 64 << 20:
            srv.pipe(b"".join(chunk))
            chunk = []
    if chunk:
        srv.pipe(b"".join(chunk))
    done[srv.name] = (size, keys, prefix)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", default="", help="copy the callgrind dumps here")
    ap.add_argument("--store", action="store_true",
                    help="only the store commands, by mooncake-benchmark, ours only")
    ap.add_argument("servers", nargs="*")
    o = ap.parse_args()
    specs = o.servers or ["ours=" + os.path.join(ROOT, "src/mooncake-server"), "redis=redis"]
    tmp = tempfile.mkdtemp(prefix="bench-ir-")
    servers = []
    try:
        for s in specs:
            name, rest = s.split("=", 1)
            parts = rest.split(",")
            servers.append(Server(name, parts[0], parts[1:], tmp))
        for srv in servers:
            srv.cli("ACL", "SETUSER", "acl", "on", ">pass", "~*", "&*", "+@all", "-@dangerous")
            srv.cli("ACL", "SETUSER", "tenant", "on", ">pass", "~t:*", "+@all")
        rows, filled = [], {}
        sel = re.compile(o.only)
        if o.store:
            servers = [s for s in servers if s.name != "redis"]
        for name, pre, args, user in (store_cases(o.quick) if o.store else cases(o.quick)):
            if not sel.search(name):
                continue
            n = int(args[args.index("-n") + 1])
            row = [name]
            for srv in servers:
                if pre:
                    prefill(srv, *pre, filled)
                bench = ["redis-benchmark", "-p", str(srv.port), "-q"]
                cargs = args
                if args[0] == "mc":
                    bench = [os.path.join(ROOT, "src/mooncake-benchmark"), "-p", str(srv.port),
                             "-q", "--no-progress"]
                    cargs = args[1:]
                if user:
                    bench += ["--user", user, "-a", "pass"]
                bench += cargs
                ir, dump = srv.count(bench)
                if o.keep:
                    os.makedirs(o.keep, exist_ok=True)
                    shutil.copy(dump, os.path.join(o.keep, "%s.%s.cg" % (
                        srv.name, re.sub(r"\W+", "_", name))))
                row.append(ir / n)
                if "DEL" in name:
                    filled.pop(srv.name, None)
            rows.append(row)
            ratio = " ".join("%.2f" % (v / row[-1]) for v in row[1:-1]) if len(row) > 2 else ""
            print("%-22s %s  %s" % (name, " ".join("%10.0f" % v for v in row[1:]), ratio), flush=True)
        print()
        print("| case | " + " | ".join(s.name for s in servers) + " | " +
              " | ".join("%s/%s" % (s.name, servers[-1].name) for s in servers[:-1]) + " |")
        print("|---" * (2 * len(servers)) + "|")
        for row in rows:
            print("| %s | %s | %s |" % (row[0], " | ".join("%.0f" % v for v in row[1:]),
                                       " | ".join("%.2f" % (v / row[-1]) for v in row[1:-1])))
    finally:
        for srv in servers:
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
