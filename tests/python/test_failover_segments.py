"""Objects in client segments across a failover (issue 28 item 3): a process
hosts a segment on a primary with one replica and puts objects into its own
memory; the primary is killed (-9) and the replica promoted. The replica
learnt the segment and its objects from the stream and holds them detached,
as a restarted server holds those of its log; the host's heartbeat finds
its node gone, learns the slot's new owner from the map and mounts its
slice there with the identity it kept, and a reader in another process gets
every object back byte-exact from the new primary, nothing put again; the
old primary, back as a replica, learns them and takes them back in a planned
failover. A host that died during the failover never gets its objects
served. A promoted node restarted before the host is back still holds them
(its log). Skipped without etcd."""
import multiprocessing as mp
import os
import shutil
import signal

import pytest

from test_reattach import hosting_process, value_of
from test_replication import Conn, call, env, info, link_up, pair, wait_until  # noqa: F401 (env is a fixture)

pytestmark = pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")

NOBJ = 16
# owner-ttl long: the tests must not pass by it. A node timeout of 5 s, not
# the 2 s of the failover tests in test_replication.py: before its kill the
# primary has a hosting process started, objects put and a replica synced,
# and under ASan on a loaded machine a lease once lapsed in that time (a
# failover nobody asked for). The promotions below wait up to 30 s.
OWNER_TTL = ("--owner-ttl", "60000", "--cluster-node-timeout", "5000")


def start_host(port):
    ctx = mp.get_context("spawn")
    q, hold = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=hosting_process, args=(q, f"127.0.0.1:{port}", hold, NOBJ, "fo"))
    p.start()
    status, name = q.get(timeout=60)
    assert status == "ok", name
    return p, name, hold


def persistence(port, field):
    return int(info(port, "persistence")[field])


def segment_info(port, name):
    return dict(zip(*[iter(call(port, "SEGMENT.INFO", name))] * 2))


def read_all(port, name):
    """Every object, byte-exact, read by a process that is not the host."""
    from mooncake.store import MooncakeDistributedStore
    rd = MooncakeDistributedStore()
    assert rd.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", f"127.0.0.1:{port}") == 0
    try:
        for i in range(NOBJ):
            assert rd.get(f"fo:{name}:{i}") == value_of(name, i), i
    finally:
        rd.close()


def synced(a, b):
    """b is a replica of a and has applied all a sent (False while b is not
    a replica at all, so that a failover no one expected fails the wait that
    names it, not a KeyError)."""
    applied = info(b.port).get("slave_repl_offset")
    return applied is not None and applied == info(a.port).get("master_repl_offset")


def test_objects_in_a_client_segment_survive_a_failover(env):
    pytest.importorskip("mooncake")
    _, node = env
    a, b = pair(node, *OWNER_TTL)
    host, name, hold = start_host(a.port)
    try:
        seg_id = segment_info(a.port, name)[b"id"]
        wait_until(lambda: synced(a, b), 10, "the replica to catch up")
        # the replica holds them aside: not keys, its segment detached
        assert persistence(b.port, "detached_objects") == NOBJ
        assert segment_info(b.port, name)[b"state"] == b"detached"
        r = Conn(b.port)
        try:
            r("READONLY")
            assert r("EXISTS", f"fo:{name}:0") == 0
        finally:
            r.close()
        a.kill()
        wait_until(lambda: "myself,master" in b.nodes(), 30, "the promotion")
        wait_until(lambda: persistence(b.port, "reattached_objects") == NOBJ, 30,
                   f"the host to re-attach its objects on the new primary:\n{b.log()[-3000:]}")
        assert persistence(b.port, "detached_objects") == 0
        seg = segment_info(b.port, name)
        assert seg[b"id"] == seg_id and seg[b"state"] == b"active"
        read_all(b.port, name)
        # the old primary rejoins as a replica and learns them from the new one; a planned failover
        # back hands the slots to it, and the host follows from the demoted node (-NEEDREMOUNT, -READONLY)
        a.start()
        wait_until(lambda: link_up(a.port) and synced(b, a), 20, "the old primary to sync as a replica")
        assert persistence(a.port, "detached_objects") == NOBJ
        assert call(a.port, "CLUSTER", "FAILOVER") == "OK"
        wait_until(lambda: "myself,master" in a.nodes(), 30, "the planned failover")
        wait_until(lambda: persistence(a.port, "reattached_objects") == NOBJ, 30,
                   f"the host to follow the slots back:\n{a.log()[-3000:]}")
        assert segment_info(a.port, name)[b"id"] == seg_id
        read_all(a.port, name)
    finally:
        hold.set()
        host.join(30)


def test_a_host_that_died_during_the_failover_is_not_served(env):
    pytest.importorskip("mooncake")
    _, node = env
    a, b = pair(node, *OWNER_TTL)
    host, name, hold = start_host(a.port)
    wait_until(lambda: synced(a, b), 10, "the replica to catch up")
    assert persistence(b.port, "detached_objects") == NOBJ
    os.kill(host.pid, signal.SIGKILL)
    host.join(10)
    a.kill()
    wait_until(lambda: "myself,master" in b.nodes(), 30, "the promotion")
    # its host is probed once the replica is a primary: gone, so its objects go
    wait_until(lambda: persistence(b.port, "detached_objects_lost") == NOBJ, 30,
               f"the dead host's objects to go:\n{b.log()[-3000:]}")
    assert persistence(b.port, "detached_objects") == 0 and persistence(b.port, "reattached_objects") == 0
    for i in range(NOBJ):
        assert call(b.port, "EXISTS", f"fo:{name}:{i}") == 0
    assert call(b.port, "SEGMENT.INFO", name) is None


def test_a_promoted_node_restarted_before_the_host_remounts_still_holds_them(env):
    """The promoted node logs what it holds (appendonly yes): killed and restarted before the host
    is back (the host is frozen meanwhile), it still holds the objects, and the host re-attaches."""
    pytest.importorskip("mooncake")
    _, node = env
    a, b = pair(node, "--appendonly", "yes", "--appendfsync", "always", *OWNER_TTL)
    host, name, hold = start_host(a.port)
    try:
        wait_until(lambda: synced(a, b), 10, "the replica to catch up")
        os.kill(host.pid, signal.SIGSTOP)
        a.kill()
        wait_until(lambda: "myself,master" in b.nodes(), 30, "the promotion")
        assert persistence(b.port, "detached_objects") == NOBJ
        wait_until(lambda: persistence(b.port, "aof_buffer_length") == 0, 10, "the log written")
        b.kill()
        b.start()
        wait_until(lambda: persistence(b.port, "detached_objects") == NOBJ, 10,
                   f"the restarted node to hold them from its log:\n{b.log()[-3000:]}")
        os.kill(host.pid, signal.SIGCONT)
        wait_until(lambda: persistence(b.port, "reattached_objects") == NOBJ, 30,
                   f"the host to re-attach its objects:\n{b.log()[-3000:]}")
        read_all(b.port, name)
    finally:
        os.kill(host.pid, signal.SIGCONT)
        hold.set()
        host.join(30)
