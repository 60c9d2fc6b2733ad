"""etcd in trouble under a cluster: frozen, answering late, or racing
topology changes from several nodes. etcd is the source of truth: what it
holds must never contradict itself, and a node must never act on a view
etcd does not back. Each test starts its own etcd and nodes (the env
fixture of test_replication.py) and waits with bounded loops only.
Skipped without etcd."""
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from base64 import b64decode, b64encode

import pytest

from conftest import child_env, free_port
from test_replication import (STEADY, TIME_SCALE, Conn, RespError, call, env, info, link_up,  # noqa: F401 (env)
                              pair, wait_until, write)

pytestmark = pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")


class EtcdProxy:
    """Between one node and etcd: passes its HTTP requests on one by one,
    except those whose path is in hold, kept (unsent) until released. The
    replies, the watch's stream too, come back as they are."""

    def __init__(self, etcd):
        self.target = ("127.0.0.1", etcd.port)
        self.hold = set()
        self.held = []                      # paths of requests waiting here
        self.cv = threading.Condition()
        self.ls = socket.create_server(("127.0.0.1", free_port()))
        self.url = "http://127.0.0.1:%d" % self.ls.getsockname()[1]
        self.closed = False
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self):
        """Closes every connection open through here (the node reconnects)."""
        with self.cv:
            socks, self.socks = self.socks, []
        self._shut(*socks)

    def release(self, path):
        with self.cv:
            self.hold.discard(path)
            self.cv.notify_all()

    def close(self):
        self.closed = True
        self.release(None)
        self.ls.close()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target)
            except OSError:                 # etcd is down: so is the node's connection
                c.close()
                continue
            with self.cv:
                self.socks += [c, u]
            threading.Thread(target=self._replies, args=(u, c), daemon=True).start()
            threading.Thread(target=self._requests, args=(c, u), daemon=True).start()

    @staticmethod
    def _shut(*socks):
        """shutdown first: close alone leaves a socket open while a makefile() reader holds it."""
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _replies(self, u, c):
        try:
            while data := u.recv(65536):
                c.sendall(data)
        except OSError:
            pass
        self._shut(c, u)

    def _requests(self, c, u):
        f = c.makefile("rb")
        try:
            while line := f.readline():
                head = [line]
                while (h := f.readline()) not in (b"\r\n", b""):
                    head.append(h)
                n = [int(h.split(b":")[1]) for h in head if h.lower().startswith(b"content-length:")]
                req = b"".join(head) + b"\r\n" + (f.read(n[0]) if n else b"")
                path = line.split()[1].decode()
                with self.cv:
                    if path in self.hold:
                        self.held.append(path)
                        self.cv.wait_for(lambda: path not in self.hold or self.closed)
                        self.held.remove(path)
                u.sendall(req)
        except (OSError, IndexError, ValueError):
            pass
        self._shut(c, u)


def fenced(port):
    """A write on port is refused by the fence."""
    try:
        call(port, "SET", "probe", "1", timeout=1.0)
        return False
    except RespError as e:
        return "fencing" in str(e)


def etcd_post(etcd, path, body):
    req = urllib.request.Request(etcd.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10 * TIME_SCALE) as r:
        return json.loads(r.read())


def etcd_kvs(etcd, prefix):
    """The keys under prefix, as etcd's gateway gives them (base64)."""
    end = prefix[:-1].encode() + bytes([ord(prefix[-1]) + 1])
    return etcd_post(etcd, "/v3/kv/range", {"key": b64encode(prefix.encode()).decode(),
                                            "range_end": b64encode(end).decode()}).get("kvs", [])


def etcd_nodes(etcd, name):
    """The node records under the cluster's prefix, as etcd holds them."""
    return [json.loads(b64decode(kv["value"])) for kv in etcd_kvs(etcd, f"/mooncake/{name}/nodes/")]


def test_concurrent_addslots_of_one_slot_one_wins(env):
    """Two nodes of one cluster each ADDSLOTS the same free slot, both
    planned before either commits (each node's transaction is held at a
    proxy until both are there). Comparing only the records each changes
    let both commit: both clients heard +OK and etcd kept two claims of the
    slot (the loser's to surface the day the winner lets it go). One must
    win, the other hear the slot is busy."""
    etcd, node = env
    pa, pb = EtcdProxy(etcd), EtcdProxy(etcd)
    try:
        a = node(*STEADY, "--cluster-etcd-endpoints", pa.url)
        b = node(*STEADY, "--cluster-etcd-endpoints", pb.url)
        assert call(b.port, "CLUSTER", "MEET", "127.0.0.1", a.port) == "OK"
        wait_until(lambda: a.id in b.nodes() and b.id in a.nodes(), 10, "meet")
        ca, cb = Conn(a.port, 60), Conn(b.port, 60)
        pa.hold.add("/v3/kv/txn")
        pb.hold.add("/v3/kv/txn")
        ca.send("CLUSTER", "ADDSLOTS", 5)
        cb.send("CLUSTER", "ADDSLOTS", 5)
        # both planned against a view where slot 5 is free, and wait for etcd
        wait_until(lambda: "/v3/kv/txn" in pa.held and "/v3/kv/txn" in pb.held, 10, "both transactions")
        pa.release("/v3/kv/txn")
        pb.release("/v3/kv/txn")
        replies = []
        for c in (ca, cb):
            try:
                replies.append(c.read())
            except RespError as e:
                replies.append(str(e))
            c.close()
        assert sorted(replies) == ["ERR Slot 5 is already busy", "OK"], replies
        claims = [r["id"] for r in etcd_nodes(etcd, a.args[a.args.index("--cluster-name") + 1])
                  if any(lo <= 5 <= hi for lo, hi in r["slots"])]
        winner = a if replies[0] == "OK" else b
        assert claims == [winner.id]
        for n in (a, b):
            wait_until(lambda: [l.split()[0] for l in n.nodes().splitlines() if l.endswith(" 5")] == [winner.id],
                       10, "both nodes to see the winner own slot 5")
    finally:
        pa.close()
        pb.close()


def test_a_primary_whose_alive_key_is_gone_refuses_writes(env):
    """A lease can end before its TTL: revoked, or lost with an etcd
    recreated empty. A replica may take the slots as soon as the primary's
    alive key is gone, so from then on the primary must refuse writes until
    its key is back under a new lease -- the fence by the clock alone let it
    write on until its next renewal found the lease dead. Here the replica
    is killed (its record still names the primary, so the primary is
    fenced), the primary's lease is revoked in etcd, and its new lease is
    held back by a proxy so the gap lasts as long as the test needs."""
    etcd, node = env
    proxy = EtcdProxy(etcd)
    try:
        # a long TTL: fencing by the clock would come after 2/3 of it, far past the waits here
        a, b = pair(node, "--cluster-node-timeout", "120000", a_extra=("--cluster-etcd-endpoints", proxy.url))
        b.kill()
        assert call(a.port, "SET", "x", "1") == "OK"
        name = a.args[a.args.index("--cluster-name") + 1]
        lease = [kv["lease"] for kv in etcd_kvs(etcd, f"/mooncake/{name}/alive/")
                 if b64decode(kv["key"]).decode().endswith(a.id)][0]
        proxy.hold.add("/v3/lease/grant")
        etcd_post(etcd, "/v3/lease/revoke", {"ID": lease})

        def refused():
            try:
                call(a.port, "SET", "y", "1")    # taken until the watch shows the key gone
                return False
            except RespError as e:
                assert "fencing" in str(e)
                return True
        wait_until(refused, 10, "the primary to refuse writes once its alive key is gone")
        assert call(a.port, "GET", "x") == b"1"                       # reads are still served
        proxy.release("/v3/lease/grant")
        wait_until(lambda: call(a.port, "SET", "x", "3") == "OK", 20, "writes to resume under a new lease")
        assert any(b64decode(kv["key"]).decode().endswith(a.id) for kv in etcd_kvs(etcd, f"/mooncake/{name}/alive/"))
    finally:
        proxy.close()


def test_etcd_recreated_empty_fails_no_healthy_primary_over(env):
    """An etcd recreated empty holds no alive key at all. The primary puts
    its own back once it notices, but its replica, noticing first and
    synced again, took the missing key for a death and the slots with it: a
    healthy primary failed over (its data discarded, a full sync from the
    replica), only because etcd lost its data. After such a change, as
    after its own key went, a replica gives a missing alive key
    cluster-node-timeout to come back. Here the primary's new lease is held
    back by a proxy until the replica says it waits."""
    etcd, node = env
    proxy = EtcdProxy(etcd)
    try:
        timeout = ("--cluster-node-timeout", "30000")    # the replica's wait: far past this test's steps
        a, b = pair(node, *timeout, a_extra=("--cluster-etcd-endpoints", proxy.url))
        assert call(a.port, "SET", "x", "1") == "OK"
        proxy.hold.add("/v3/lease/grant")
        etcd.stop()
        shutil.rmtree(etcd.args[etcd.args.index("--data-dir") + 1])
        etcd.proc = subprocess.Popen(etcd.args, stdout=etcd.log, stderr=subprocess.STDOUT, env=child_env())
        # both write their records again; the primary's alive key stays missing, and the
        # replica, synced again, either takes the slots or says it waits
        wait_until(lambda: "failover done" in b.log() or "for it to come back before taking over" in b.log(), 20,
                   "the replica to act on its primary's missing alive key")
        assert "failover done" not in b.log() and info(b.port)["role"] == "slave"
        proxy.release("/v3/lease/grant")
        wait_until(lambda: call(a.port, "SET", "x", "2") == "OK", 20, "the primary to take writes again")
        assert "myself,master" in a.nodes() and info(b.port)["role"] == "slave"
        assert "failover done" not in b.log()
        wait_until(lambda: link_up(b.port), 20, "replica link up again")
    finally:
        proxy.close()


def test_a_watch_cut_past_a_compaction_reads_the_topology_again(env):
    """A node's watch is cut, the topology changes and etcd's history is
    compacted past where the watch would resume: the node must read the
    whole prefix again (nothing missed, no loop of failed watches), then
    follow the changes after it."""
    etcd, node = env
    proxy = EtcdProxy(etcd)
    try:
        a = node(*STEADY, "--cluster-etcd-endpoints", proxy.url)
        b = node(*STEADY)
        assert call(b.port, "CLUSTER", "MEET", "127.0.0.1", a.port) == "OK"
        wait_until(lambda: a.id in b.nodes() and b.id in a.nodes(), 10, "meet")
        proxy.hold.add("/v3/watch")
        proxy.cut()
        wait_until(lambda: "/v3/watch" in proxy.held, 10, "the node's new watch to wait at the proxy")
        # two changes: etcd keeps the compaction's own revision, so the
        # watch, resuming at the first, finds it compacted
        assert call(b.port, "CLUSTER", "ADDSLOTS", 100) == "OK"
        assert call(b.port, "CLUSTER", "ADDSLOTS", 101) == "OK"
        rev = int(etcd_post(etcd, "/v3/kv/range", {"key": b64encode(b"x").decode()})["header"]["revision"])
        etcd_post(etcd, "/v3/kv/compaction", {"revision": rev})
        proxy.release("/v3/watch")

        def owner_of(n, slots):
            return [l.split()[0] for l in n.nodes().splitlines() if l.endswith(" " + slots)]
        wait_until(lambda: owner_of(a, "100-101") == [b.id], 10, "the change made while the watch was away")
        assert call(b.port, "CLUSTER", "ADDSLOTS", 102) == "OK"
        wait_until(lambda: owner_of(a, "100-102") == [b.id], 10, "a change after the new watch began")
        assert a.log().count("keys from etcd at revision") >= 2      # at start, and again after the compaction
        assert "cluster_etcd_synced:1" in call(a.port, "CLUSTER", "INFO").decode()
    finally:
        proxy.close()


def test_etcd_frozen_past_the_lease_ttl_fails_nothing_over(env):
    """etcd SIGSTOPped for longer than the node timeout: when it resumes it
    expires every lease at once, the primary's and its replica's alive keys
    go together. The primary is fenced meanwhile, gets a new lease and
    takes writes again by itself; the replica, whose own key went too, does
    not take the missing key for its primary's death; nothing acknowledged
    is lost."""
    etcd, node = env
    # 6 s, not 3: with both CI suites and builds on the machine, the
    # primary's lease once lapsed outside the freeze (or its new alive key
    # came later than the replica's 3 s of patience), and the replica took
    # over, as it should then.
    a, b = pair(node, "--cluster-node-timeout", "6000")
    assert write(a.port, "SET", "before", "1") == "OK"
    etcd.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: fenced(a.port), 20, "the primary to refuse writes")
        time.sleep(7.5)                        # the scenario: etcd stays frozen past the 6 s TTL
    finally:
        etcd.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: call(a.port, "SET", "after", "1") == "OK", 30, "writes to resume on the primary")
    wait_until(lambda: link_up(b.port), 20, "the replica to sync again")
    assert "myself,master" in a.nodes() and info(b.port)["role"] == "slave"
    assert "failover done" not in b.log()
    assert call(a.port, "GET", "before") == b"1"


def test_etcd_recreated_past_our_revision_gets_our_record_back(env):
    """An etcd recreated empty is noticed when a reply's revision is below
    the last one seen. If others wrote to it first, so that its revision is
    already past ours when the node hears from it, no revision goes back:
    the node kept its old records' mod revisions, its registration compared
    against them and failed for ever, and etcd never got its record (and
    slots) back while it went on serving them. A record below the version
    held, or our own missing, says the same. Here the node's requests wait
    at a proxy while etcd is recreated and written past its revision."""
    etcd, node = env
    proxy = EtcdProxy(etcd)
    try:
        a = node(*STEADY, "--cluster-etcd-endpoints", proxy.url)
        assert call(a.port, "CLUSTER", "ADDSLOTSRANGE", 0, 16383) == "OK"
        name = a.args[a.args.index("--cluster-name") + 1]
        rev = int(etcd_post(etcd, "/v3/kv/range", {"key": b64encode(b"x").decode()})["header"]["revision"])
        for path in ("/v3/lease/keepalive", "/v3/lease/grant", "/v3/kv/range", "/v3/kv/put", "/v3/kv/txn",
                     "/v3/watch"):
            proxy.hold.add(path)
        etcd.stop()
        shutil.rmtree(etcd.args[etcd.args.index("--data-dir") + 1])
        etcd.proc = subprocess.Popen(etcd.args, stdout=etcd.log, stderr=subprocess.STDOUT, env=child_env())
        wait_until(lambda: etcd_post(etcd, "/v3/kv/range", {"key": b64encode(b"x").decode()}), 20, "etcd")
        for i in range(rev + 10):               # someone else's keys push the new revision past ours
            etcd_post(etcd, "/v3/kv/put", {"key": b64encode(b"/other/%d" % i).decode(),
                                           "value": b64encode(b"v").decode()})
        for path in list(proxy.hold):
            proxy.release(path)
        wait_until(lambda: [r["slots"] for r in etcd_nodes(etcd, name)] == [[[0, 16383]]], 20,
                   "the node to write its record, with its slots, back")
        wait_until(lambda: etcd_kvs(etcd, f"/mooncake/{name}/alive/"), 20, "its alive key")
        assert "etcd recreated or restored" in a.log()
    finally:
        proxy.close()
