#!/usr/bin/env python3
"""soak.py -- run a mixed load against one mooncake-server for N minutes and
check that nothing grows with use.

A storage server runs for months. Whatever it allocates for a connection, a
put, a lease, a hold, a subscription or a mounted segment must be given back
when that thing ends, however it ends: a clean QUIT, a reset in the middle of
a command, a half-closed socket, CLIENT KILL, a segment host killed with
SIGKILL. A unit test checks one path once; this driver runs all of them at
once, for minutes, and then asks whether the server came back to where it
started:

  1. start a server (the binary given, a normal or an ASan build) with a
     small pool (64 MiB) and short timers (owner-ttl, put-timeout,
     put-release-timeout, lease-ttl) so that everything abandoned is due
     within seconds of the load stopping;
  2. warm up for --warmup seconds with the full mix, quiesce, and take the
     baseline (a warm one: one-time growth such as jemalloc's arenas, the
     command table's stats, the ACL log ring, is not drift);
  3. run the mix for --minutes, sampling every --every seconds: the server's
     RSS, heap (INFO used_memory_heap), store_meta_bytes, clients, pool
     figures, pending puts, holds, deferred frees, open fds and threads, and
     the RSS, fds and threads of a long-lived libmooncake client process;
  4. stop the load, FLUSHALL, wait for the segment hosts' owners to die and
     the timers to run out, and compare with the baseline: the heap within
     --heap-slack bytes, fds and clients equal, the pool fully free, no
     pending puts, holds, deferred frees, segments other than self, owners.

It exits 1 and says which figure drifted. With --csv the samples are
written for plotting. It is not part of `make test` (minutes, and two cores
busy); run it by hand against a build, e.g.

  utils/soak.py --minutes 4 --server src/mooncake-server
  make SANITIZER=address -C src all && utils/soak.py --minutes 3 --asan

With --asan the server is stopped with SIGTERM at the end and its
LeakSanitizer report (in the server's log) is a failure too.

The workers are threads of this process speaking RESP over raw sockets (so
that a connection can be reset or half-closed at any byte), plus processes
of the Python binding (build/python): a long-lived client that puts and gets
through libmooncake for the whole run, and short-lived segment hosts that
MOUNT 8 MiB of their memory, put objects there and are closed or killed.
"""
import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "utils", "bench"))
from benchutil import resp  # noqa: E402  (one RESP encoder for the utilities)
PASS = "soak-pw"
USERS = [(None, None), ("alice", PASS), ("tA", PASS)]  # default, a server user, a tenant
MIB = 1 << 20


# ---------------------------------------------------------------- RESP -----
class Conn:
    """A RESP connection on a plain socket: enough of the protocol for the
    load, and the socket at hand to reset or half-close it."""

    def __init__(self, port, timeout=10.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    encode = staticmethod(resp)  # benchutil's

    def send(self, *args):
        self.s.sendall(self.encode(*args))

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise ConnectionError("closed by server")
        self.buf += d

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+", b"("):
            return rest
        if t == b"-" or t == b"!":
            return RuntimeError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b",":
            return float(rest)
        if t == b"_":
            return None
        if t == b"#":
            return rest == b"t"
        if t in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v
        if t in (b"*", b">", b"~"):
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        if t == b"%" or t == b"|":
            n = int(rest)
            d = {}
            for _ in range(n):
                k = self.read()
                d[k] = self.read()
            return d if t == b"%" else self.read()
        raise ConnectionError("bad reply type %r" % line[:20])

    def call(self, *args):
        self.send(*args)
        return self.read()

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def reset(self):
        """Close with RST: SO_LINGER 0."""
        try:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()


def info(port):
    c = Conn(port)
    try:
        raw = c.call("INFO", "everything")
    finally:
        c.close()
    out = {}
    for line in raw.decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def proc_stats(pid):
    """rss bytes, open fds, threads of a process (None if it is gone)."""
    try:
        st = open(f"/proc/{pid}/status").read()
        rss = int(st.split("VmRSS:")[1].split()[0]) * 1024
        thr = int(st.split("Threads:")[1].split()[0])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds, thr
    except (OSError, IndexError, ValueError):
        return None, None, None


def fd_names(pid):
    """What each open descriptor of pid is: a path, or for a socket its
    addresses (from /proc/net), so that a leaked one says whose it is."""
    socks = {}
    for proto in ("tcp", "tcp6", "unix"):
        try:
            lines = open(f"/proc/{pid}/net/{proto}").read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if proto == "unix":
                if len(f) >= 7:
                    socks[f[6]] = "unix " + (f[7] if len(f) > 7 else "(unnamed)")
            elif len(f) >= 10:
                def addr(h):
                    ip, port = h.split(":")
                    return "%s:%d" % (ip, int(port, 16))
                socks[f[9]] = "%s %s->%s st=%s" % (proto, addr(f[1]), addr(f[2]), f[3])
    out = []
    try:
        for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                t = socks.get(t[8:-1], t)
            out.append(t)
    except OSError:
        pass
    return out


# ------------------------------------------------------------ workload -----
class Load:
    def __init__(self, port, seed):
        self.port = port
        self.stop = threading.Event()
        self.ops = 0
        self.errors = {}
        self.lock = threading.Lock()
        self.seed = seed
        self.big = os.urandom(MIB)

    def note(self, what):
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1

    def login(self, c, rnd):
        user, pw = rnd.choice(USERS)
        if rnd.random() < 0.3:
            r = c.call("HELLO", "3", *(("AUTH", user, pw) if user else ()))
        else:
            r = c.call("AUTH", user, pw) if user else None
        if isinstance(r, RuntimeError):
            raise r
        c.call("CLIENT", "SETNAME", "victim" if rnd.random() < 0.2 else "soak")
        return user

    def key(self, rnd, user):
        k = "k:%d" % rnd.randrange(400)
        return ("tA:" + k) if user == "tA" else k

    # one short-lived connection: a few commands, then one way of ending
    def short_conn(self, rnd):
        c = Conn(self.port)
        try:
            user = self.login(c, rnd)
            for _ in range(rnd.randrange(1, 8)):
                self.one_op(c, rnd, user)
            end = rnd.random()
            if end < 0.15:  # RST in the middle of a 1 MiB SET
                frame = c.encode("SET", self.key(rnd, user), self.big)
                c.s.sendall(frame[:rnd.randrange(20, len(frame) - 1)])
                c.reset()
            elif end < 0.25:  # RST with a reply pending
                c.send("GET", self.key(rnd, user))
                c.reset()
            elif end < 0.35:  # half-closed: the request sent, then FIN; read the reply
                c.send("SET", self.key(rnd, user), "half")
                c.s.shutdown(socket.SHUT_WR)
                try:
                    c.read()
                    c.read()  # the server then closes
                except (ConnectionError, OSError):
                    pass
                c.close()
            elif end < 0.45:  # half-closed in the middle of a command
                frame = c.encode("PUT.START", self.key(rnd, user), 4096)
                c.s.sendall(frame[:len(frame) // 2])
                c.s.shutdown(socket.SHUT_WR)
                c.s.settimeout(5)
                try:
                    c.read()
                except (ConnectionError, OSError):
                    pass
                c.close()
            elif end < 0.6:
                c.call("QUIT")
                c.close()
            else:
                c.close()
        except (ConnectionError, OSError, RuntimeError) as e:
            self.note(type(e).__name__ + ":" + str(e)[:60])
            c.reset()

    def put(self, c, rnd, k, size, end=True):
        r = c.call("PUT.START", k, size, "REPLACE")
        if not isinstance(r, list):
            return r
        for seg, off, ln in r:
            if seg == 1:  # the server's pool: the TCP data plane; others belong to hosts
                n = min(ln, 65536)
                c.call("SEG.WRITE", seg, off, os.urandom(n))
        if end == "revoke":
            return c.call("PUT.REVOKE", k)
        return c.call("PUT.END", k) if end else r

    def one_op(self, c, rnd, user):
        k = self.key(rnd, user)
        x = rnd.random()
        if x < 0.15:
            c.call("SET", k, "v" * rnd.randrange(1, 2000))
        elif x < 0.22:
            c.call("SET", k, self.big, "PX", rnd.randrange(50, 3000))
        elif x < 0.32:
            c.call("GET", k)
        elif x < 0.37:
            c.call("DEL", k, self.key(rnd, user))
        elif x < 0.42:
            c.call("EXPIRE", k, rnd.randrange(1, 3))
        elif x < 0.52:
            self.put(c, rnd, k, rnd.choice((4096, 65536, MIB)))
        elif x < 0.57:
            self.put(c, rnd, k, rnd.choice((4096, MIB)), end=False)  # abandoned
        elif x < 0.60:
            self.put(c, rnd, k, 8192, end="revoke")
        elif x < 0.68:
            r = c.call("GET.REPLICAS", k)
            if isinstance(r, list) and rnd.random() < 0.7:
                c.call("LEASE.RELEASE", k)
        elif x < 0.71:
            c.call("LEASE", k, rnd.randrange(100, 2000))
        elif x < 0.78:
            keys = [k, self.key(rnd, user)]
            c.call("HOLD.REPLICAS", *keys)
            if rnd.random() < 0.6:
                c.call("HOLD.RELEASE", *keys)
        elif x < 0.83:
            c.send("MULTI")
            c.read()
            c.send("SET", k, "m")
            c.send("GET", k)
            c.send("PUT.START", self.key(rnd, user), 4096, "REPLACE")
            for _ in range(3):
                c.read()
            c.call("EXEC" if rnd.random() < 0.8 else "DISCARD")
        elif x < 0.86:
            c.call("MSET", k, "a", self.key(rnd, user), "b")
        elif x < 0.89:
            c.call("OBJECT.INFO", k)
        elif x < 0.92:
            c.call("BATCH.EXISTS", 2, k, self.key(rnd, user), "PREFIX", "LEASE")
        elif x < 0.95:
            c.call("SCAN", 0, "COUNT", 50)
        elif x < 0.97:
            c.call("REMOVE", k)
        else:
            c.call("CLIENT", "INFO")
        with self.lock:
            self.ops += 1

    def worker(self, wid):
        rnd = random.Random(self.seed * 1000 + wid)
        while not self.stop.is_set():
            try:
                self.short_conn(rnd)
            except (ConnectionError, OSError) as e:
                self.note("connect:" + str(e)[:40])
                time.sleep(0.1)

    def subscriber(self, wid):
        rnd = random.Random(self.seed * 1000 + 100 + wid)
        while not self.stop.is_set():
            try:
                c = Conn(self.port)
                user = self.login(c, rnd)
                chans = ["__store@0__:*", "__keyspace@0__:*", "__keyevent@0__:*"]
                if rnd.random() < 0.5:
                    c.call("PSUBSCRIBE", *rnd.sample(chans, rnd.randrange(1, 3)))
                else:
                    c.call("SUBSCRIBE", "__store@0__:put", "__keyevent@0__:set", "chan:%d" % wid)
                deadline = time.time() + rnd.uniform(0.5, 4)
                reading = rnd.random() < 0.8  # some never read: their queue grows
                c.s.settimeout(0.5)
                while time.time() < deadline and not self.stop.is_set():
                    if reading:
                        try:
                            c.read()
                        except socket.timeout:
                            pass
                    else:
                        time.sleep(0.1)
                if rnd.random() < 0.3:
                    c.reset()
                elif rnd.random() < 0.5:
                    c.s.settimeout(5)
                    c.send("UNSUBSCRIBE")
                    c.send("PUNSUBSCRIBE")
                    c.close()
                else:
                    c.close()
                _ = user
            except (ConnectionError, OSError, RuntimeError) as e:
                self.note("sub:" + str(e)[:40])
                time.sleep(0.1)

    def admin(self):
        rnd = random.Random(self.seed * 1000 + 999)
        live = [("lease-ttl", lambda: rnd.choice((1000, 2000, 3000))),
                ("put-timeout", lambda: rnd.choice((500, 1000, 2000))),
                ("slowlog-log-slower-than", lambda: rnd.choice((0, 100, 10000))),
                ("notify-keyspace-events", lambda: rnd.choice(("AKES", "KEA", "S", "Kg$"))),
                ("evict-policy", lambda: "lru"),
                ("remote-get-timeout", lambda: rnd.choice((1000, 2000)))]
        while not self.stop.is_set():
            try:
                c = Conn(self.port)
                name, val = rnd.choice(live)
                c.call("CONFIG", "SET", name, val())
                if rnd.random() < 0.5:
                    c.call("CLIENT", "KILL", "TYPE", "pubsub") if rnd.random() < 0.2 else None
                    lst = c.call("CLIENT", "LIST")
                    for line in (lst or b"").decode().splitlines():
                        if "name=victim" in line and rnd.random() < 0.5:
                            cid = line.split("id=")[1].split()[0]
                            c.call("CLIENT", "KILL", "ID", cid)
                c.call("PUBLISH", "chan:%d" % rnd.randrange(4), "x" * 100)
                c.call("SLOWLOG", "RESET") if rnd.random() < 0.1 else None
                c.close()
            except (ConnectionError, OSError, RuntimeError) as e:
                self.note("admin:" + str(e)[:40])
            self.stop.wait(0.3)

    def relay_reader(self):
        """Plain GETs of keys the segment hosts put in their own segments:
        the server relays them from the host (which may be dying)."""
        rnd = random.Random(self.seed * 1000 + 555)
        while not self.stop.is_set():
            try:
                c = Conn(self.port)
                for _ in range(20):
                    pre = rnd.choice(("", "tA:"))  # the tenant's hosts' keys carry its prefix
                    c.call("GET", pre + "host:%d:%d" % (rnd.randrange(4), rnd.randrange(16)))
                    c.call("GET.REPLICAS", pre + "host:%d:%d" % (rnd.randrange(4), rnd.randrange(16)))
                if rnd.random() < 0.3:
                    c.send("GET", "host:%d:%d" % (rnd.randrange(4), rnd.randrange(16)))
                    c.reset()  # gone while its relay is in flight
                else:
                    c.close()
            except (ConnectionError, OSError, RuntimeError) as e:
                self.note("relay:" + str(e)[:40])
                time.sleep(0.1)

    def hosts(self, addr):
        """Segment hosts, one after another per slot: MOUNT, put, then closed
        cleanly or killed (SIGKILL, SIGSTOP+SIGKILL)."""
        rnd = random.Random(self.seed * 1000 + 777)
        procs = {}
        while not self.stop.is_set():
            for slot in range(2):
                p = procs.get(slot)
                if p is None or p.poll() is not None:
                    procs[slot] = subprocess.Popen(
                        [sys.executable, os.path.abspath(__file__), "--role", "host", "--addr", addr,
                         "--slot", str(2 * rnd.randrange(2) + rnd.randrange(2))],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        env=child_env())
                    procs[slot].born = time.time()
                elif time.time() - p.born > rnd.uniform(2, 6):
                    how = rnd.random()
                    if how < 0.5:
                        p.kill()
                    else:
                        try:
                            p.stdin.close()  # clean close()
                        except OSError:
                            pass
                    try:
                        p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            self.stop.wait(0.5)
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("SOAK_PYTHONPATH") or os.path.join(ROOT, "build", "python")
    env.pop("LD_PRELOAD", None)
    return env


# ---------------------------------------------------- child processes ------
def role_host(addr, slot):
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    st = MooncakeDistributedStore()
    # odd slots: the tenant tA's process, whose segment is a tenant segment
    # and whose owner is the tenant's own (per-tenant owner names)
    tenant = dict(tenant_id="tA", password=PASS) if slot % 2 else {}
    if st.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MIB, 4 * MIB, "tcp", "", addr, **tenant) != 0:
        sys.exit(2)
    cfg = ReplicateConfig(preferred_segment=st.get_hostname())
    for i in range(16):
        st.put("host:%d:%d" % (slot, i), bytes([i]) * random.choice((4096, 65536, 262144)), cfg)
    sys.stdin.read()  # until the driver closes our stdin (or kills us)
    st.close()


def role_client(addr):
    """The long-lived libmooncake client: puts, gets, batches, leased probes
    for the whole run. Its stdin steers it, a line at a time: "pause" (it
    answers "paused" once idle), "go", "quit"."""
    import mooncake
    st = mooncake.connect(addr)
    rnd = random.Random(7)
    running = threading.Event()
    idle = threading.Event()
    running.set()
    big = os.urandom(MIB)
    buf = bytearray(MIB)

    def load():
        while True:
            if not running.is_set():
                idle.set()
                running.wait()
                idle.clear()
            k = "lc:%d" % rnd.randrange(64)
            x = rnd.random()
            try:
                if x < 0.3:
                    st.put(k, big[:rnd.choice((4096, 65536, MIB))])
                elif x < 0.55:
                    st.get(k)
                elif x < 0.65:
                    st.get_into(k, buf)
                elif x < 0.75:
                    keys = ["lc:%d" % rnd.randrange(64) for _ in range(8)]
                    st.batch_put(keys, [big[:4096]] * 8)
                    st.batch_get(keys)
                elif x < 0.85:
                    st.exists_many(["lc:%d" % i for i in range(16)])
                    st.prefix_length(["lc:%d" % i for i in range(16)], lease=True)
                elif x < 0.95:
                    st.remove(k)
                else:
                    st.batch_put_async([k], [big[:65536]]).result(10)
            except (mooncake.Error, KeyError, ValueError):
                pass
    threading.Thread(target=load, daemon=True).start()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "pause":
            running.clear()
            idle.wait()
            print("paused", flush=True)
        elif cmd == "go":
            running.set()
        else:
            break
    running.clear()
    idle.wait(30)
    st.close()


# ------------------------------------------------------------- driver ------
FIELDS = ["t", "rss", "heap", "dataset", "meta", "clients", "objects", "pool_used", "pending", "holds",
          "deferred", "segments", "owners", "fds", "threads", "c_rss", "c_fds", "c_threads"]


# INFO fields that are state, not counters: after the load they should read
# as at the baseline (printed when they do not).
DRIFT_FIELDS = {"used_memory_heap", "used_memory_dataset", "store_meta_bytes", "connected_clients",
                "blocked_clients", "pubsub_channels", "pubsub_patterns", "store_objects", "store_pool_used",
                "store_pool_free_ranges", "store_pending_puts", "store_holds", "store_deferred_frees",
                "segments", "owners", "owners_orphaned", "owner_probes_in_flight", "remote_get_in_flight",
                "tenant_prefixes", "tenant_index_entries", "lazyfree_pending_objects", "store_evict_pending",
                "client_recent_max_input_buffer", "client_recent_max_output_buffer", "detached_objects"}


def tell(proc, cmd):
    proc.stdin.write(cmd + "\n")
    proc.stdin.flush()
    if cmd == "pause":
        proc.stdout.readline()


def sample(port, pid, cpid, t0):
    i = info(port)
    rss, fds, thr = proc_stats(pid)
    c = proc_stats(cpid) if cpid else (None, None, None)
    return dict(t=round(time.time() - t0), rss=rss, heap=int(i["used_memory_heap"]),
                dataset=int(i["used_memory_dataset"]),
                meta=int(i["store_meta_bytes"]), clients=int(i["connected_clients"]),
                objects=int(i["store_objects"]), pool_used=int(i["store_pool_used"]),
                pending=int(i["store_pending_puts"]), holds=int(i["store_holds"]),
                deferred=int(i["store_deferred_frees"]), segments=int(i["segments"]),
                owners=int(i["owners"]), fds=fds, threads=thr, c_rss=c[0], c_fds=c[1], c_threads=c[2],
                _info=i, _fds=fd_names(pid))


def fmt(s):
    return " ".join("%s=%s" % (f, s[f]) for f in FIELDS)


QUIET = {"segments": "1", "owners": "0", "store_pending_puts": "0", "store_holds": "0",
         "store_deferred_frees": "0", "store_pool_used": "0", "store_pool_zeroing": "0",
         "remote_get_in_flight": "0", "store_objects": "0", "blocked_clients": "0"}


def quiesce(port, timeout=60):
    """After the load: FLUSHALL, then wait for owners to die, puts and
    leases to run out, deferred frees and zeroing to finish. Returns what
    is still not quiet ("" when all is)."""
    c = Conn(port)
    c.call("CONFIG", "SET", "notify-keyspace-events", "")
    c.close()
    deadline = time.time() + timeout
    while True:
        c = Conn(port)
        c.call("FLUSHALL")
        c.close()
        i = info(port)
        left = " ".join("%s=%s" % (k, i[k]) for k, v in QUIET.items() if i[k] != v)
        if not left or time.time() > deadline:
            break
        time.sleep(0.5)
    # connections kept for relayed reads close after 10 s idle (relay.c)
    time.sleep(11)
    return left


PARTS = ("conns", "subs", "admin", "relay", "hosts", "client")


def run_load(load, addr, seconds, every, port, pid, cpid, t0, rows, csv, parts=PARTS):
    load.stop.clear()
    threads = []
    if "conns" in parts:
        threads += [threading.Thread(target=load.worker, args=(i,)) for i in range(6)]
    if "subs" in parts:
        threads += [threading.Thread(target=load.subscriber, args=(i,)) for i in range(3)]
    if "admin" in parts:
        threads.append(threading.Thread(target=load.admin))
    if "relay" in parts:
        threads.append(threading.Thread(target=load.relay_reader))
    if "hosts" in parts:
        threads.append(threading.Thread(target=load.hosts, args=(addr,)))
    for t in threads:
        t.daemon = True
        t.start()
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(min(every, max(0.1, end - time.time())))
        s = sample(port, pid, cpid, t0)
        rows.append(s)
        print(fmt(s) + " ops=%d" % load.ops, flush=True)
        if csv:
            csv.write(",".join(str(s[f]) for f in FIELDS) + "\n")
            csv.flush()
    load.stop.set()
    for t in threads:
        t.join(60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="driver", choices=("driver", "host", "client"))
    ap.add_argument("--addr")
    ap.add_argument("--slot", type=int, default=0)
    ap.add_argument("--server", default=os.path.join(ROOT, "src", "mooncake-server"))
    ap.add_argument("--minutes", type=float, default=4)
    ap.add_argument("--warmup", type=float, default=30, help="seconds of load before the baseline")
    ap.add_argument("--every", type=float, default=10, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heap-slack", type=int, default=128 * 1024,
                    help="bytes the heap (beside the dataset's tables) may end above the baseline")
    ap.add_argument("--asan", action="store_true", help="SIGTERM the server and read LeakSanitizer's report")
    ap.add_argument("--csv")
    ap.add_argument("--only", default=",".join(PARTS),
                    help="the parts of the load to run, of " + ",".join(PARTS) + " (all by default)")
    a = ap.parse_args()
    if a.role == "host":
        return role_host(a.addr, a.slot)
    if a.role == "client":
        return role_client(a.addr)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tempfile.mkdtemp(prefix="soak-")
    log = open(os.path.join(d, "server.log"), "w")
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    srv = subprocess.Popen([a.server, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                            "--segment-size", "64mb", "--owner-ttl", "2000", "--put-timeout", "1000",
                            "--put-release-timeout", "2000", "--lease-ttl", "2000",
                            "--notify-keyspace-events", "AKES", "--maxclients", "1000"],
                           stdout=log, stderr=subprocess.STDOUT, env=env)
    addr = "127.0.0.1:%d" % port
    for _ in range(200):
        try:
            Conn(port).close()
            break
        except OSError:
            time.sleep(0.05)
    c = Conn(port)
    c.call("ACL", "SETUSER", "alice", "on", ">" + PASS, "allkeys", "allchannels", "+@all")
    c.call("ACL", "SETUSER", "tA", "on", ">" + PASS, "~tA:*", "&*", "+@all")
    c.close()
    print("server pid %d port %d dir %s" % (srv.pid, port, d), flush=True)

    client = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "client", "--addr", addr],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(), text=True)
    load = Load(port, a.seed)
    rows = []
    csv = open(a.csv, "w") if a.csv else None
    if csv:
        csv.write(",".join(FIELDS) + "\n")
    t0 = time.time()
    cold = sample(port, srv.pid, client.pid, t0)
    print("cold     " + fmt(cold), flush=True)
    parts = a.only.split(",")
    if "client" not in parts:
        tell(client, "pause")
    run_load(load, addr, a.warmup, a.every, port, srv.pid, client.pid, t0, [], None, parts)
    if "client" in parts:
        tell(client, "pause")
    left = quiesce(port)
    base = sample(port, srv.pid, client.pid, t0)
    print("baseline " + fmt(base) + (" (not quiet: %s)" % left if left else ""), flush=True)
    if "client" in parts:
        tell(client, "go")
    run_load(load, addr, a.minutes * 60, a.every, port, srv.pid, client.pid, t0, rows, csv, parts)
    if "client" in parts:
        tell(client, "pause")
    bad = []
    cstats_end = proc_stats(client.pid)
    cstats_first = (base["c_rss"], base["c_fds"], base["c_threads"])
    left = quiesce(port)
    end = sample(port, srv.pid, client.pid, t0)
    print("end      " + fmt(end) + (" (not quiet: %s)" % left if left else ""), flush=True)
    changed = []
    for k, v in sorted(end["_info"].items()):
        b = base["_info"].get(k)
        if b != v and k in DRIFT_FIELDS:
            changed.append("%s %s->%s" % (k, b, v))
    print("INFO figures that moved: " + (" ".join(changed) or "none"))
    extra = list(end["_fds"])
    for f in base["_fds"]:
        if f in extra:
            extra.remove(f)
    if extra:
        print("server descriptors not open at the baseline: " + "; ".join(extra))
    if left:
        bad.append("not quiet after the load: " + left)
    print("errors seen by the load (expected kinds: refused, killed, timeouts):")
    for k, v in sorted(load.errors.items(), key=lambda kv: -kv[1])[:15]:
        print("  %6d %s" % (v, k))

    # The heap beside the dataset's structures (used_memory_dataset: the
    # key dicts' tables and the deferred-free wheel's arrays, which keep
    # up to 64 slots in each of 1024 buckets, 512 KiB at most, by design):
    # that must come back. The dataset part may only grow by that bound.
    def rest(smp):
        return smp["heap"] - int(smp["_info"]["used_memory_dataset"])
    if rest(end) - rest(base) > a.heap_slack:
        bad.append("heap (without the dataset's tables) grew %d -> %d (+%d)"
                   % (rest(base), rest(end), rest(end) - rest(base)))
    ds0, ds1 = int(base["_info"]["used_memory_dataset"]), int(end["_info"]["used_memory_dataset"])
    if ds1 - ds0 > 512 * 1024 + 64 * 1024:
        bad.append("used_memory_dataset with no key grew %d -> %d" % (ds0, ds1))
    # store_meta_bytes with no key left is the tables' and the pool
    # allocator's node array (32 bytes a node), which keep their peak size:
    # a high-water mark, bounded by the pool's most extents at once. More
    # than a few doublings of it in one run is growth with use.
    if end["meta"] - base["meta"] > 256 * 1024:
        bad.append("store_meta_bytes grew %d -> %d" % (base["meta"], end["meta"]))
    for f in ("fds", "threads", "clients", "pending", "holds", "deferred", "segments", "owners",
              "pool_used", "objects"):
        if end[f] != base[f]:
            bad.append("%s %s -> %s" % (f, base[f], end[f]))
    # a libmooncake handle keeps up to 16 (MC_SEG_SWEEP_MIN) described
    # segments before it asks which are gone: two descriptors each
    if cstats_end[1] is not None and cstats_first[1] is not None and cstats_end[1] > cstats_first[1] + 34:
        bad.append("client fds %s -> %s" % (cstats_first[1], cstats_end[1]))
    if cstats_end[2] is not None and cstats_first[2] is not None and cstats_end[2] > cstats_first[2]:
        bad.append("client threads %s -> %s" % (cstats_first[2], cstats_end[2]))
    print("client (libmooncake) first sample rss/fds/threads %s, end %s" % (cstats_first, cstats_end))
    i = end["_info"]
    if i["store_pool_free"] != i["store_pool_size"]:
        bad.append("pool not fully free: %s of %s" % (i["store_pool_free"], i["store_pool_size"]))

    try:
        client.stdin.write("quit\n")
        client.stdin.flush()
        client.wait(20)
    except (OSError, subprocess.TimeoutExpired):
        client.kill()
    srv.send_signal(signal.SIGTERM)
    try:
        srv.wait(60)
    except subprocess.TimeoutExpired:
        srv.kill()
        bad.append("server did not exit on SIGTERM")
    log.close()
    text = open(os.path.join(d, "server.log"), errors="replace").read()
    if "LeakSanitizer" in text or "AddressSanitizer" in text or "runtime error:" in text:
        i = text.find("Sanitizer")
        bad.append("sanitizer report in %s/server.log:\n%s" % (d, text[max(0, i - 200):i + 4000]))
    if bad:
        print("DRIFT:\n  " + "\n  ".join(bad))
        return 1
    print("OK: back to the baseline (heap %+d bytes)" % (end["heap"] - base["heap"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
