"""Client segments survive a server restart (issue 28, item 2): a process
that hosts a segment keeps running while the server is killed (-9) and
restarted from its append-only log; libmooncake's heartbeat reconnects,
is told NEEDREMOUNT, mounts the segment again with the identity it drew for
that memory, and the server re-attaches the objects at their places, so a
reader in another process gets them back byte-exact. A host process that
died meanwhile is a new process if it comes back: its predecessor's
objects are never served from its memory."""
import multiprocessing as mp
import os
import signal
import time
import traceback

import pytest

from conftest import LoggedServer

NOBJ = 24


def value_of(name, i):
    seed = (sum(name.encode()) + 7 * i) % 251
    return bytes((seed + j) % 256 for j in range(4096 + 512 * i))


def hosting_process(q, addr, hold, nobj=NOBJ, prefix="ra"):
    """Hosts a segment, puts nobj objects there (<prefix>:<segment>:<i>),
    reports, then waits. test_failover_segments.py hosts its objects so too."""
    try:
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", addr) == 0
        name = store.get_hostname()
        cfg = ReplicateConfig(preferred_segment=name)
        for i in range(nobj):
            assert store.put(f"{prefix}:{name}:{i}", value_of(name, i), cfg) == 0
        q.put(("ok", name))
    except BaseException:  # noqa: BLE001
        q.put(("err", traceback.format_exc()))
        return
    hold.wait(120)
    store.close()


@pytest.fixture
def logged_server():
    s = LoggedServer("--appendfsync", "always", "--owner-ttl", "60000")
    yield s
    s.stop()


def wait_for(cond, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(what)


def start_host(ctx, addr):
    q, hold = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=hosting_process, args=(q, addr, hold))
    p.start()
    status, info = q.get(timeout=60)
    assert status == "ok", info
    return p, info, hold


def reader(addr):
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", addr) == 0
    return store


def test_objects_come_back_while_the_host_keeps_running(logged_server):
    srv = logged_server
    ctx = mp.get_context("spawn")
    host, name, hold = start_host(ctx, srv.addr)
    try:
        seg_id = dict(zip(*[iter(srv.cli("SEGMENT.INFO", name))] * 2))[b"id"]
        srv.kill9()
        srv.start()
        wait_for(lambda: srv.info("detached_objects") == 0 and srv.info("reattached_objects") == NOBJ,
                 f"the host did not re-attach its {NOBJ} objects:\n{srv.log()[-3000:]}")
        info = dict(zip(*[iter(srv.cli("SEGMENT.INFO", name))] * 2))
        assert info[b"id"] == seg_id and info[b"state"] == b"active"
        r = reader(srv.addr)
        try:
            for i in range(NOBJ):
                assert r.get(f"ra:{name}:{i}") == value_of(name, i), i
        finally:
            r.close()
    finally:
        hold.set()
        host.join(30)


def test_a_host_that_died_is_never_taken_for_its_successor(logged_server):
    srv = logged_server
    ctx = mp.get_context("spawn")
    host, name, hold = start_host(ctx, srv.addr)
    os.kill(host.pid, signal.SIGKILL)
    host.join(10)
    srv.kill9()
    srv.start()
    # A new process on the same machine: its own segment, and the log's
    # objects of the dead one go (the probe finds its host gone).
    host2, name2, hold2 = start_host(ctx, srv.addr)
    try:
        wait_for(lambda: srv.info("detached_objects") == 0, f"held objects did not go:\n{srv.log()[-3000:]}")
        assert srv.info("reattached_objects") == 0
        assert srv.info("detached_objects_lost") == NOBJ
        r = reader(srv.addr)
        try:
            for i in range(NOBJ):
                assert r.get(f"ra:{name}:{i}") == b""
                assert r.get(f"ra:{name2}:{i}") == value_of(name2, i)
        finally:
            r.close()
    finally:
        hold2.set()
        host2.join(30)
