"""kill -9 in the middle of a write load, with each appendfsync policy:
every write acknowledged before the kill is there after the restart, with
its value (the log is written before the replies under every policy; the
policies differ only in what a power cut could take, which a test cannot
cut). Writes run from a thread of their own, each waiting for its reply,
so the one in flight at the kill is the only one whose fate is open."""
import os
import re
import time
import threading

import pytest
import redis

from conftest import LoggedServer


def writer(port, acked, stop):
    r = redis.Redis(port=port)
    i = 0
    try:
        while not stop.is_set():
            pipe = r.pipeline(transaction=False)
            for j in range(i, i + 16):
                pipe.set(f"w:{j}", f"v{j}:" + "x" * (j % 300))
            pipe.execute()
            i += 16
            acked[0] = i  # every write below i was acknowledged
    except (redis.ConnectionError, redis.TimeoutError):
        pass


def kill9_under_load(srv, writer, acked, target, after_start=None, before_kill=None):
    """writer(port, acked, stop) runs in a thread until acked[0] reaches
    target (the load under way, not a time), then the server is killed -9,
    the writer stopped and the server started again. Returns acked[0] at the
    kill: every write below it was acknowledged."""
    stop = threading.Event()
    t = threading.Thread(target=writer, args=(srv.port, acked, stop))
    t.start()
    if after_start:
        after_start()
    while acked[0] < target:
        t.join(0.01)
        assert t.is_alive()
    if before_kill:
        before_kill()
    srv.kill9()
    stop.set()
    t.join(30)
    srv.start()
    return acked[0]


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_acknowledged_writes_survive_kill9(policy):
    srv = LoggedServer("--appendfsync", policy)
    try:
        n = kill9_under_load(srv, writer, [0], 3000)
        r = redis.Redis(port=srv.port)
        pipe = r.pipeline(transaction=False)
        for j in range(n):
            pipe.get(f"w:{j}")
        got = pipe.execute()
        lost = [j for j in range(n) if got[j] != (f"v{j}:" + "x" * (j % 300)).encode()]
        assert lost == [], f"{len(lost)} acknowledged writes lost under appendfsync {policy}, first {lost[:5]}"
        # At most the batch in flight beyond the acknowledged ones.
        assert r.dbsize() <= n + 16
        r.close()
    finally:
        srv.stop()


def mixed_writer(port, acked, stop):
    """Rounds of every kind of write the log records, each round one
    pipeline, then a MULTI/EXEC and a store put; acked[0] is the last round
    whose every reply came back. Round i: s:i%50 = i, INCR counter, d:i set
    and d:(i-1) deleted, e:i set with EXPIRE, then tx:a and tx:b = i in one
    MULTI/EXEC, then p:i put through PUT.START, SEG.WRITE and PUT.END (a
    put in progress at the kill must not come back)."""
    r = redis.Redis(port=port)
    i = 0
    try:
        while not stop.is_set():
            pipe = r.pipeline(transaction=False)
            pipe.set(f"s:{i % 50}", i)
            pipe.incr("counter")
            pipe.set(f"d:{i}", i)
            pipe.delete(f"d:{i - 1}")
            pipe.set(f"e:{i}", i)
            pipe.expire(f"e:{i}", 100000)
            pipe.execute()
            tx = r.pipeline(transaction=True)
            tx.set("tx:a", i)
            tx.set("tx:b", i)
            tx.execute()
            val = f"put-{i}-".encode() * 8
            seg, off = r.execute_command("PUT.START", f"p:{i}", len(val))[0][:2]
            r.execute_command("SEG.WRITE", seg, off, val)
            r.execute_command("PUT.END", f"p:{i}")
            acked[0] = i
            i += 1
    except (redis.ConnectionError, redis.TimeoutError):
        pass


def check_mixed(r, n):
    """The state after rounds 0..n acknowledged (round n+1 may be half there,
    but never a half MULTI/EXEC or a half put)."""
    assert n >= 0
    got = r.mget([f"s:{j}" for j in range(50)])
    for j in range(50):
        last = max((k for k in range(n + 1) if k % 50 == j), default=None)
        if last is not None:
            v = int(got[j])
            assert v == last or v == last + 50, f"s:{j} is {v}, acknowledged {last}"
    assert int(r.get("counter")) in (n + 1, n + 2)
    for j in range(n):  # d:j was deleted in round j+1 <= n
        assert not r.exists(f"d:{j}"), f"d:{j} deleted and acknowledged, yet back"
    # d:n is there, unless round n+1's pipeline (in flight) deleted it with d:n+1 set.
    assert r.get(f"d:{n}") is not None or r.get(f"d:{n + 1}") is not None
    for j in range(n + 1):
        ttl = r.ttl(f"e:{j}")
        assert 0 < ttl <= 100000, f"e:{j} ttl {ttl}"
        assert r.get(f"p:{j}") == f"put-{j}-".encode() * 8, f"p:{j} acknowledged, not there whole"
    a, b = r.get("tx:a"), r.get("tx:b")
    assert a == b and int(a) in (n, n + 1), f"MULTI/EXEC half made: {a} {b}"
    # The put never ended is not a key, and nothing past round n+1 exists.
    assert r.get(f"p:{n + 2}") is None and r.get(f"d:{n + 2}") is None


@pytest.mark.parametrize("policy", ["always", "everysec"])
def test_mixed_writes_survive_kill9(policy):
    srv = LoggedServer("--appendfsync", policy)
    try:
        for target in (300, 600):  # two kills at different points of the load
            r = redis.Redis(port=srv.port)
            r.flushall()
            n = kill9_under_load(srv, mixed_writer, [-1], target)
            r = redis.Redis(port=srv.port)
            check_mixed(r, n)
            r.close()
    finally:
        srv.stop()


def test_kill9_during_rewrite_loses_nothing_and_leaves_no_temp_files():
    """BGREWRITEAOF slowed down (the child waits before each large value) so
    that the kill lands while it runs, three times: every acknowledged write
    is there, and no rewrite's temp file is left behind after the restart."""
    srv = LoggedServer("--appendfsync", "always")
    try:
        big = b"B" * (300 * 1024)  # >= 256 KiB: written from the pool, delayed in the rewrite
        r = redis.Redis(port=srv.port)
        for j in range(8):
            r.set(f"big:{j}", big)
        r.close()
        for kill in range(3):
            r = redis.Redis(port=srv.port)
            r.execute_command("DEBUG", "AOF-REWRITE-DELAY", 200)
            r.flushall()
            for j in range(8):
                r.set(f"big:{j}", big)

            def rewriting():
                assert r.info("persistence")["aof_rewrite_in_progress"] == 1

            n = kill9_under_load(srv, mixed_writer, [-1], 50, after_start=lambda: r.execute_command("BGREWRITEAOF"),
                                 before_kill=rewriting)
            r = redis.Redis(port=srv.port)
            try:
                check_mixed(r, n)
            except redis.ConnectionError:
                raise AssertionError(srv.log()[-3000:])
            for j in range(8):
                assert r.get(f"big:{j}") == big
            d = os.path.join(srv.dir, "appendonlydir")
            with open(os.path.join(d, "appendonly.aof.manifest")) as f:
                listed = {line.split()[1] for line in f if line.strip()}
            left = set(os.listdir(d)) - listed - {"appendonly.aof.manifest"}
            assert left == set(), f"after kill {kill}: left behind {left}"
            r.close()
    finally:
        srv.stop()


def listening_inodes(port):
    """The socket inodes listening on port (TCP, IPv4 and IPv6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    out.add(cols[9])
    return out


def test_rewrite_child_holds_no_listening_socket():
    """The rewrite child closes its copies of the server's listening sockets:
    a child dying after a kill -9 of the server (its memory goes before its
    files) kept the port open, so clients connected to a process that never
    answered and a server restarted at once could not bind."""
    srv = LoggedServer("--appendfsync", "always")
    try:
        r = redis.Redis(port=srv.port)
        for j in range(4):
            r.set(f"big:{j}", b"B" * (300 * 1024))
        r.execute_command("DEBUG", "AOF-REWRITE-DELAY", 2000)  # the child waits here: inspected meanwhile
        r.execute_command("BGREWRITEAOF")
        listeners = listening_inodes(srv.port)
        assert listeners
        deadline = time.time() + 10
        child = None
        while child is None and time.time() < deadline:
            m = re.findall(r"rewriting started by pid (\d+)", srv.log())
            child = int(m[-1]) if m else None
        assert child is not None
        held = set()
        for fd in os.listdir(f"/proc/{child}/fd"):
            try:
                link = os.readlink(f"/proc/{child}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                held.add(link[8:-1])
        assert r.info("persistence")["aof_rewrite_in_progress"] == 1  # still the same child
        assert held & listeners == set(), "the rewrite child holds the listening socket"
        r.execute_command("DEBUG", "AOF-REWRITE-DELAY", 0)
        r.close()
    finally:
        srv.stop()
