"""A Jepsen-style history checker: client processes write unique values and
read them back while a nemesis kills, freezes and restarts the primary and
etcd; every operation is recorded with its outcome, and a checker then says
whether the cluster kept its promises (docs/PROTOCOL.md, "Replicas and
failover"):

- every acknowledged write is readable after the failures, with its value
  (a SET is acknowledged when WAIT 1 after it answered 1; a put through the
  binding -- PUT.START, SEG.WRITE, PUT.END -- when it returned, the cluster
  running with cluster-replica-ack yes, which holds PUT.END's reply until
  the live replicas have the object);
- no read returned a value that was never written, or one whose write was
  refused;
- no two primaries accepted writes at once: within one nemesis step (at
  most one change of primary), writes acknowledged by X, then Y, then X
  again in real time mean the old primary took writes beside the new one;
- a deleted key read as missing stays missing.

Why it is shaped so: the workers know nothing of the nemesis. Each owns its
keys (one writer per key, one operation at a time), so a key's writes are
totally ordered and the checker needs no search over interleavings: the
final value must be the last acknowledged write's or that of a later write
whose fate is open (an error that may have been applied, a connection lost
after the request went out). Everything is seeded, every wait bounded.

Used by test_history.py (a few rounds, inside make test) and run by hand
for long runs:
    PYTHONPATH=build/python MOONCAKE_SERVER=src/mooncake-server \\
        /usr/bin/python3 tests/python/history.py --rounds 50 [--seed N] [--aof]
"""
import argparse
import bisect
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import LoggedServer, free_port  # noqa: E402
from test_replication import Conn, Etcd, Node, RespError, call, info, link_up, wait_until  # noqa: E402

NODE_TIMEOUT_MS = 3000
OP_TIMEOUT = 5.0          # a socket read longer than this: the request's fate is open
RETRY_FOR = 4.0           # a request refused (MOVED, CLUSTERDOWN, refused connection) is retried this long


# -- clients ---------------------------------------------------------------

class Unknown(Exception):
    """The request went out and no answer came: it may have been applied."""


class Router:
    """A small cluster client over raw RESP: follows -MOVED, waits out
    -CLUSTERDOWN / -TRYAGAIN, tries the other nodes when one cannot be
    reached. A request that went out and got no answer raises Unknown;
    one refused every time until RETRY_FOR raises RespError (not applied)."""

    def __init__(self, ports):
        self.ports = list(ports)
        self.cur = self.ports[0]
        self.conns = {}

    def _conn(self, port):
        c = self.conns.get(port)
        if c is None:
            c = Conn(port, timeout=OP_TIMEOUT)
            self.conns[port] = c
        return c

    def drop(self, port):
        c = self.conns.pop(port, None)
        if c:
            try:
                c.close()
            except OSError:
                pass

    def close(self):
        for p in list(self.conns):
            self.drop(p)

    def call(self, *args, then=None):
        """args on the primary; then(conn, reply) runs on the same
        connection after it (WAIT). Returns (port, reply, then's result)."""
        deadline = time.time() + RETRY_FOR
        last = None
        i = 0
        while time.time() < deadline:
            port = self.cur
            try:
                c = self._conn(port)
            except OSError as e:
                last = e
                i += 1
                self.cur = self.ports[i % len(self.ports)]
                time.sleep(0.02)
                continue
            try:
                c.send(*args)
            except OSError as e:           # not sent whole: a partial request is never run
                self.drop(port)
                last = e
                continue
            try:
                r = c.read()
                extra = then(c, r) if then else None
                return port, r, extra
            except RespError as e:
                msg = str(e)
                last = e
                if msg.startswith("MOVED"):
                    self.cur = int(msg.split()[2].rsplit(":", 1)[1])
                    continue
                if msg.startswith(("CLUSTERDOWN", "TRYAGAIN", "READONLY")):
                    if not msg.startswith("TRYAGAIN"):   # another node may know the new primary
                        i += 1
                        self.cur = self.ports[i % len(self.ports)]
                    time.sleep(0.05)
                    continue
                raise
            except (OSError, ConnectionError, ValueError) as e:
                self.drop(port)
                raise Unknown(f"{port}: {e}") from None
        raise RespError(f"refused until the deadline: {last}")


def put_version(body):
    """The version a put's bytes name ("<worker>.<seq>"), once every byte
    is checked: a torn or mixed object reads as a version never written."""
    v, _, fill = body.partition(b":")
    v = v.decode(errors="replace")
    seq = v.rsplit(".", 1)[-1]
    if not seq.isdigit() or not fill or fill.count(bytes([int(seq) % 251])) != len(fill):
        return "torn:" + v
    return v


def worker(wid, seed, ports, stop, out, nkeys, with_puts, wait_replicas, puts_acked=True):
    """One client process: operations chosen by its seed until stop is set;
    puts its history on out."""
    rng = random.Random(seed * 1000 + wid)
    rt = Router(ports)
    store = None
    if with_puts:
        import mooncake
        store = mooncake.connect(f"127.0.0.1:{ports[0]}", timeout=10)
    out.put((wid, None))       # ready: the nemesis waits for every worker
    hist = []
    seq = 0
    dkeys = []                 # delete keys in use: (key, state) state 'set' | 'deleted'
    dnext = 0

    def rec(f, k, v, t0, r, node=None):
        hist.append(dict(p=wid, f=f, k=k, v=v, t0=t0, t1=time.monotonic(), r=r, node=node))

    def wait_then(c, r):
        if r != "OK" and r != 1 and r != 0:
            return None
        if wait_replicas == 0:
            return 1
        try:
            return c("WAIT", wait_replicas, 2000)
        except (OSError, ConnectionError, RespError):
            return None

    def write(f, k, v, *args):
        t0 = time.monotonic()
        try:
            port, r, acked = rt.call(*args, then=wait_then)
        except Unknown:
            rec(f, k, v, t0, "info")
            return "info"
        except RespError as e:
            r = "fail" if str(e).startswith(("refused until", "MOVED", "CLUSTERDOWN", "TRYAGAIN", "READONLY")) \
                else "info"                      # an error we do not know: open
            rec(f, k, v, t0, r, str(e)[:80])
            return r
        r = "ok" if acked and acked >= 1 else "okn"
        rec(f, k, v, t0, r, port)
        return r

    def read(f, k):
        t0 = time.monotonic()
        try:
            port, r, _ = rt.call("GET", k)
        except (Unknown, RespError):
            return rec(f, k, None, t0, "fail")
        rec(f, k, r.decode() if r is not None else None, t0, "ok", port)

    while not stop.is_set():
        x = rng.random()
        if x < 0.35:
            k = f"s{wid}:{rng.randrange(nkeys)}"
            seq += 1
            v = f"{wid}.{seq}"
            write("set", k, v, "SET", k, v)
        elif x < 0.55:
            read("get", f"s{wid}:{rng.randrange(nkeys)}")
        elif x < 0.65 and store is not None:
            k = f"p{wid}:{rng.randrange(nkeys)}"
            seq += 1
            v = f"{wid}.{seq}"
            body = (v + ":").encode() + bytes([seq % 251]) * rng.randrange(64, 8192)
            t0 = time.monotonic()
            try:
                store.put(k, body)
                rec("put", k, v, t0, "ok" if puts_acked else "okn")
            except Exception as e:               # the binding rode through and gave up: open
                rec("put", k, v, t0, "info", repr(e)[:80])
        elif x < 0.75 and store is not None:
            k = f"p{wid}:{rng.randrange(nkeys)}"
            t0 = time.monotonic()
            try:
                rec("pget", k, put_version(store.get(k)), t0, "ok")
            except KeyError:
                rec("pget", k, None, t0, "ok")
            except Exception:
                rec("pget", k, None, t0, "fail")
        elif x < 0.85:
            # the life of a delete key: written, deleted, then only read
            live = [d for d in dkeys if d[1] == "set"]
            if live and rng.random() < 0.5:
                d = rng.choice(live)
                r = write("del", d[0], None, "DEL", d[0])
                d[1] = "deleted" if r == "ok" else "set" if r == "fail" else "open"
            else:
                k = f"d{wid}:{dnext}"
                dnext += 1
                seq += 1
                v = f"{wid}.{seq}"
                if write("set", k, v, "SET", k, v) != "fail":
                    dkeys.append([k, "set"])
        else:
            dead = [d for d in dkeys if d[1] == "deleted"]
            if dead:
                read("dget", rng.choice(dead)[0])
        if rng.random() < 0.05:
            time.sleep(0.005)
    rt.close()
    if store is not None:
        store.close()
    out.put((wid, hist))


# -- the checker -----------------------------------------------------------

def check(hist, final, final_puts, steps=()):
    """hist: every worker's operations; final: key -> value read at the
    end (set and delete keys), final_puts: key -> version read at the end;
    steps: monotonic times the nemesis acted at. Returns (anomalies, stats)."""
    bad = []
    writes = {}                          # key -> [op] in the writer's order
    for op in hist:
        if op["f"] in ("set", "del", "put"):
            writes.setdefault(op["k"], []).append(op)
    # 1. every acknowledged write survives; nothing else appears
    for k, ws in writes.items():
        got = (final_puts if k.startswith("p") else final).get(k)
        last = max((i for i, w in enumerate(ws) if w["r"] == "ok"), default=-1)
        allowed = {ws[last]["v"]} if last >= 0 else {None}
        allowed |= {w["v"] for w in ws[last + 1:] if w["r"] in ("okn", "info")}
        if got not in allowed:
            written = {w["v"] for w in ws}
            kind = "lost" if got in written or got is None else "never written"
            bad.append(f"{kind}: {k} reads {got!r} at the end; acknowledged last "
                       f"{ws[last]['v'] if last >= 0 else None!r} ({ws[last]['r'] if last >= 0 else '-'}), "
                       f"open after it {sorted(a for a in allowed if a)}")
    # 2. reads see only written values; a refused write is never seen
    # (a read older than the last write acknowledged before it began is
    # counted as stale, not wrong: a deposed primary serves reads until it
    # learns it was replaced, as Redis's)
    index = {k: {} for k in writes}          # key -> value -> [positions]
    acked = {k: [] for k in writes}          # key -> [(t1, position)] of acknowledged writes
    for k, ws in writes.items():
        for i, w in enumerate(ws):
            index[k].setdefault(w["v"], []).append(i)
            if w["r"] == "ok":
                acked[k].append((w["t1"], i))
    stale = 0
    for op in hist:
        if op["f"] not in ("get", "pget", "dget") or op["r"] != "ok" or op["v"] is None:
            continue
        ws = writes.get(op["k"], [])
        pos = index.get(op["k"], {}).get(op["v"], [])
        if not pos:
            bad.append(f"read of a value never written: {op['k']} = {op['v']!r}")
        elif all(ws[i]["r"] == "fail" for i in pos):
            bad.append(f"read of a refused write: {op['k']} = {op['v']!r}")
        else:
            a = acked[op["k"]]
            j = bisect.bisect_left(a, (op["t0"], -1)) - 1
            if j >= 0 and pos[-1] < a[j][1]:
                stale += 1
    # 3. a key read as deleted stays deleted
    gone = {}
    for op in sorted((o for o in hist if o["f"] == "dget" and o["r"] == "ok"), key=lambda o: o["t0"]):
        if not any(w["f"] == "del" and w["r"] == "ok" for w in writes.get(op["k"], [])):
            continue
        if op["v"] is None:
            gone.setdefault(op["k"], op["t1"])
        elif op["k"] in gone and gone[op["k"]] < op["t0"]:
            bad.append(f"deleted key came back: {op['k']} = {op['v']!r} after it read as missing")
    for k, t in gone.items():
        if final.get(k) is not None:
            bad.append(f"deleted key came back: {k} = {final[k]!r} at the end")
    # 4. no two primaries at once: X, then Y, then X again within one step
    bounds = [float("-inf"), *sorted(steps), float("inf")]
    acks = sorted((o for o in hist if o["f"] in ("set", "del") and o["r"] in ("ok", "okn")), key=lambda o: o["t0"])
    for lo, hi in zip(bounds, bounds[1:]):
        seen = [o for o in acks if lo <= o["t0"] < hi]
        first_end, last = {}, {}             # node -> earliest t1, its latest op
        for o in seen:
            first_end[o["node"]] = min(first_end.get(o["node"], o["t1"]), o["t1"])
            if o["node"] not in last or last[o["node"]]["t0"] < o["t0"]:
                last[o["node"]] = o
        found = None
        for y in seen:
            for x, t in first_end.items():
                if x != y["node"] and t < y["t0"] and last[x]["t0"] > y["t1"]:
                    found = (y, last[x])
                    break
            if found:
                break
        if found:
            y, x2 = found
            bad.append(f"two primaries: {x2['node']} acknowledged {x2['k']}={x2['v']} "
                       f"after {y['node']} had acknowledged {y['k']}={y['v']}")
    stats = {r: sum(1 for o in hist if o["r"] == r) for r in ("ok", "okn", "fail", "info")}
    stats["ops"] = len(hist)
    stats["stale_reads"] = stale
    stats["acked_writes"] = sum(1 for o in hist if o["f"] in ("set", "del", "put") and o["r"] == "ok")
    return bad, stats


# -- the system under test and its nemesis ---------------------------------

class EtcdLink:
    """A node's way to etcd, which the nemesis can cut: a TCP forwarder
    that, while blocked, closes every connection and each new one at once
    (the node sees etcd unreachable, its clients still reach it)."""

    def __init__(self, etcd_port):
        self.target = etcd_port
        self.blocked = False
        self.lock = threading.Lock()
        self.socks = []
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                if self.blocked:
                    raise OSError("blocked")
                u = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def block(self, yes):
        self.blocked = yes
        if yes:
            with self.lock:
                socks, self.socks = self.socks, []
            for x in socks:
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()

    def close(self):
        self.block(True)
        self.ls.close()


class Cluster:
    """etcd and three nodes: one primary with every slot, two replicas,
    cluster-replica-ack yes (or no). Each node reaches etcd through an
    EtcdLink."""

    def __init__(self, replica_ack=True, extra=()):
        self.d = tempfile.mkdtemp(prefix="history-")
        self.etcd = Etcd(self.d)
        self.name = f"hist-{os.getpid()}-{free_port()}"
        self.nodes = []
        self.down = set()          # nodes killed
        self.frozen = set()        # nodes stopped, or cut off from etcd
        try:
            self._start(replica_ack, extra)
        except BaseException:
            self.close()                # nothing left running when the set-up fails
            raise

    def _start(self, replica_ack, extra):
        for _ in range(3):
            link = EtcdLink(self.etcd.port)

            def track(n, link=link):       # before it starts: close() stops it even if it never answers
                n.link = link
                self.nodes.append(n)
            Node(self.d, link, self.name, "--cluster-replica-ack", "yes" if replica_ack else "no",
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS), *extra, track=track)
        a, b, c = self.nodes
        assert call(a.port, "CLUSTER", "ADDSLOTSRANGE", 0, 16383) == "OK"
        for r in (b, c):
            assert call(r.port, "CLUSTER", "MEET", "127.0.0.1", a.port) == "OK"
            wait_until(lambda: a.id in r.nodes(), 10, "meet")
            assert call(r.port, "CLUSTER", "REPLICATE", a.id) == "OK"
        wait_until(lambda: link_up(b.port) and link_up(c.port), 20, "replicas linked")

    @property
    def ports(self):
        return [n.port for n in self.nodes]

    def primary(self):
        """The one live node that says it is a primary with slots, else None."""
        found = []
        for n in self.nodes:
            if n in self.down or n in self.frozen:
                continue
            try:
                me = [l for l in n.nodes().splitlines() if "myself" in l][0].split()
            except (OSError, RespError, ConnectionError, IndexError):
                continue
            if "master" in me[2] and len(me) > 8:
                found.append(n)
        return found[0] if len(found) == 1 else None

    def healthy(self):
        """One primary, every node up and linked: a write waited for by both replicas."""
        p = self.primary()
        if p is None or self.down or self.frozen:
            return False
        others = [n for n in self.nodes if n is not p]
        if not all(link_up(n.port) for n in others):
            return False
        c = Conn(p.port, timeout=5)
        try:
            c("SET", "nemesis-probe", "1")
            return c("WAIT", 2, 2000) == 2
        except RespError:
            return False
        finally:
            c.close()

    def heal(self):
        for n in list(self.frozen):
            n.proc.send_signal(signal.SIGCONT)
            n.link.block(False)
            self.frozen.discard(n)
        for n in list(self.down):
            n.start()
            self.down.discard(n)
        if self.etcd.proc.poll() is not None:
            self.etcd.restart()
        wait_until(self.healthy, 60, "the cluster to heal (one primary, both replicas linked)")

    def close(self):
        for n in self.nodes:
            n.link.close()
            if n.proc and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGCONT)
                n.kill()
        if self.etcd.proc.poll() is None:
            self.etcd.stop()

    def cleanup(self):
        shutil.rmtree(self.d, ignore_errors=True)

    def nemesis(self, rng, log, what=None):
        """One failure, what or one chosen by rng; returns its name."""
        p = self.primary()
        what = what or rng.choice(["kill-primary", "stop-primary", "restart-etcd", "kill-primary-etcd-down",
                           "lapsed-replica-then-kill-primary", "kill-replica", "restart-primary-fast",
                           "wipe-etcd", "partition-primary", "pause-primary-about-ttl",
                           "cut-primary-about-ttl", "partition-replica-then-kill-primary"])
        if p is None:
            what = "restart-etcd"
        log(f"nemesis: {what} ({p.port if p else '-'})")
        promoted = lambda: self.primary() not in (None, p)  # noqa: E731
        if what == "kill-primary":
            p.kill()
            self.down.add(p)
            wait_until(promoted, 40, "a replica promoted")
        elif what == "stop-primary":
            p.proc.send_signal(signal.SIGSTOP)
            self.frozen.add(p)
            wait_until(promoted, 40, "a replica promoted")
        elif what == "kill-primary-etcd-down":
            # no failover can happen while etcd is down; the primary dies meanwhile
            self.etcd.stop()
            time.sleep(rng.uniform(0.1, 1.0))
            p.kill()
            self.down.add(p)
            time.sleep(rng.uniform(0.1, 1.0))
            self.etcd.restart()
            wait_until(promoted, 60, "a replica promoted")
        elif what == "lapsed-replica-then-kill-primary":
            # a replica frozen past its lease (the primary stops waiting
            # for it and acknowledges without it), woken, then the primary
            # dies: the replica that missed writes must not win
            r = rng.choice([n for n in self.nodes if n is not p])
            r.proc.send_signal(signal.SIGSTOP)
            time.sleep(NODE_TIMEOUT_MS / 1000 * rng.uniform(1.2, 2.0))
            r.proc.send_signal(signal.SIGCONT)
            time.sleep(rng.uniform(0, 0.3))
            p.kill()
            self.down.add(p)
            wait_until(promoted, 60, "a replica promoted")
        elif what == "restart-primary-fast":
            # killed and started again within the lease's TTL (a supervisor's
            # restart): its alive key never lapses, and it has no data
            p.kill()
            p.start()
        elif what == "partition-primary":
            # cut off from etcd, not from its clients: it must fence itself
            # before a replica is promoted, and take no write after
            p.link.block(True)
            self.frozen.add(p)
            wait_until(promoted, 40, "a replica promoted")
        elif what in ("pause-primary-about-ttl", "cut-primary-about-ttl"):
            # frozen, or cut off from etcd, for about the lease's TTL: a
            # failover may or may not begin, and the primary comes back
            # while it does -- the race the fence is for
            stop = what.startswith("pause")
            if stop:
                p.proc.send_signal(signal.SIGSTOP)
            else:
                p.link.block(True)
            time.sleep(NODE_TIMEOUT_MS / 1000 * rng.uniform(0.6, 1.4))
            if stop:
                p.proc.send_signal(signal.SIGCONT)
            else:
                p.link.block(False)
        elif what == "partition-replica-then-kill-primary":
            # a replica cut off from etcd past its lease (it cannot see
            # its own key lapse), let back, then the primary dies
            r = rng.choice([n for n in self.nodes if n is not p])
            r.link.block(True)
            time.sleep(NODE_TIMEOUT_MS / 1000 * rng.uniform(1.2, 2.0))
            r.link.block(False)
            time.sleep(rng.uniform(0, 0.3))
            p.kill()
            self.down.add(p)
            wait_until(promoted, 60, "a replica promoted")
        elif what == "wipe-etcd":
            # etcd recreated empty: the nodes write their records again
            self.etcd.stop()
            shutil.rmtree(os.path.join(self.d, "etcd"), ignore_errors=True)
            time.sleep(rng.uniform(0.1, 1.0))
            self.etcd.restart()
        elif what == "kill-replica":
            r = rng.choice([n for n in self.nodes if n is not p])
            r.kill()
            self.down.add(r)
        else:
            self.etcd.stop()
            time.sleep(rng.uniform(0.2, NODE_TIMEOUT_MS / 1000 * 1.5))
            self.etcd.restart()
        return what


def read_final(ports, hist, with_puts):
    """Every key the history touched, read from the primary (raw GET; puts
    through the binding). Returns (final, final_puts)."""
    rt = Router(ports)
    keys = sorted({o["k"] for o in hist})
    final, final_puts = {}, {}
    for k in keys:
        if k.startswith("p"):
            continue
        _, r, _ = rt.call("GET", k)
        final[k] = r.decode() if r is not None else None
    rt.close()
    if with_puts:
        import mooncake
        st = mooncake.connect(f"127.0.0.1:{ports[0]}", timeout=30)
        for k in keys:
            if not k.startswith("p"):
                continue
            try:
                final_puts[k] = put_version(st.get(k))
            except KeyError:
                final_puts[k] = None
        st.close()
    return final, final_puts


def run_workers(ports, seed, nworkers, nkeys, with_puts, wait_replicas, body, puts_acked=True):
    """Starts the workers, runs body() (the nemesis), stops them, returns
    the merged history."""
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(w, seed, ports, stop, out, nkeys, with_puts, wait_replicas, puts_acked))
          for w in range(nworkers)]
    for p in ps:
        p.start()
    hist = []
    ready = 0
    try:
        while ready < len(ps):
            wid, h = out.get(timeout=60)
            assert h is None, "a worker ended before it started"
            ready += 1
        body()
    finally:
        stop.set()
        got = 0
        deadline = time.time() + 120
        while got < len(ps) and time.time() < deadline:
            try:
                _, h = out.get(timeout=5)
                hist += h
                got += 1
            except Exception:
                if not any(p.is_alive() for p in ps):
                    break
        for p in ps:
            p.join(10)
            if p.is_alive():
                p.kill()
    assert got == len(ps), f"only {got} of {len(ps)} workers reported"
    return hist


def run_cluster(rounds, seed=1, nworkers=3, nkeys=8, with_puts=True, run_s=1.0, log=print, schedule=None,
                replica_ack=True, extra=()):
    """rounds nemesis steps under load (schedule: their names in turn, else
    chosen by the seed); returns (anomalies, stats)."""
    rng = random.Random(seed)
    cl = Cluster(replica_ack, extra)
    steps, actions = [], []
    ok = False
    try:
        def body():
            time.sleep(run_s)
            for i in range(rounds):
                steps.append(time.monotonic())
                actions.append(cl.nemesis(rng, log, schedule[i % len(schedule)] if schedule else None))
                time.sleep(run_s * rng.uniform(0.3, 1.0))
                cl.heal()
                steps.append(time.monotonic())
                time.sleep(run_s)
        # without cluster-replica-ack a put's return promises nothing (no
        # WAIT on the binding's connection): only SET + WAIT 1 is acknowledged
        hist = run_workers(cl.ports, seed, nworkers, nkeys, with_puts, 1, body, puts_acked=replica_ack)
        cl.heal()
        final, final_puts = read_final(cl.ports, hist, with_puts)
        bad, stats = check(hist, final, final_puts, steps)
        stats["actions"] = {a: actions.count(a) for a in sorted(set(actions))}
        ok = not bad
        if bad:
            log(f"node logs kept in {cl.d}")
        return bad, stats
    finally:
        cl.close()
        if ok:
            cl.cleanup()


def run_aof(rounds, seed=1, nworkers=3, nkeys=8, with_puts=True, run_s=1.0, log=print):
    """A single node, appendonly yes and appendfsync always, killed -9 under
    load (half the times during or just after a BGREWRITEAOF) and started
    again each round: every acknowledged write is there (an OK or a
    returned put; no replica, so no WAIT)."""
    rng = random.Random(seed)
    srv = LoggedServer("--appendfsync", "always")
    steps = []
    ok = False
    try:
        def body():
            for i in range(rounds):
                time.sleep(run_s * rng.uniform(0.5, 1.5))
                if rng.random() < 0.5:
                    # killed while the log is being rewritten (or just after)
                    try:
                        srv.cli("BGREWRITEAOF")
                    except Exception:                # one already under way: as good
                        pass
                    time.sleep(rng.uniform(0, 0.2))
                steps.append(time.monotonic())
                log(f"nemesis: kill -9 ({srv.port})")
                srv.kill9()
                srv.start()
                steps.append(time.monotonic())
            time.sleep(run_s)
        hist = run_workers([srv.port], seed, nworkers, nkeys, with_puts, 0, body)
        final, final_puts = read_final([srv.port], hist, with_puts)
        bad, stats = check(hist, final, final_puts, steps)
        ok = not bad
        if bad:
            log(f"server log kept in {srv.dir}")
        return bad, stats
    finally:
        if ok:
            srv.stop()
        else:
            srv.proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--aof", action="store_true", help="the single node with appendfsync always")
    ap.add_argument("--no-puts", action="store_true")
    ap.add_argument("--replica-ack", default="yes", choices=("yes", "no"))
    ap.add_argument("--node-args", default="", help="more arguments for every cluster node, e.g. '--appendonly yes'")
    ap.add_argument("--schedule", help="nemesis steps in turn, comma-separated (default: chosen by the seed)")
    a = ap.parse_args()
    # SIGTERM as ^C: the finally clauses stop the nodes and etcd
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t = time.time()
    if a.aof:
        bad, stats = run_aof(a.rounds, a.seed, a.workers, with_puts=not a.no_puts)
    else:
        bad, stats = run_cluster(a.rounds, a.seed, a.workers, with_puts=not a.no_puts,
                                 schedule=a.schedule.split(",") if a.schedule else None,
                                 replica_ack=a.replica_ack == "yes", extra=a.node_args.split())
    print(f"{'aof' if a.aof else 'cluster'} rounds={a.rounds} seed={a.seed} {time.time() - t:.1f} s: {stats}")
    for b in bad[:50]:
        print("ANOMALY:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
