"""Acknowledged writes survive failures: the history checker of history.py
run for a few seeded rounds (MC_HISTORY_ROUNDS raises them; `history.py
--rounds N` runs long ones by hand), and the checker itself shown to find
each anomaly it looks for, so that a clean run means something. The
cluster run is skipped without etcd."""
import os
import shutil

import pytest

import history

ROUNDS = int(os.environ.get("MC_HISTORY_ROUNDS", "2"))


def op(f, k, v, t0, r, node=None, p=0):
    return dict(p=p, f=f, k=k, v=v, t0=t0, t1=t0 + 0.5, r=r, node=node)


def test_checker_finds_each_anomaly():
    base = [op("set", "s0:1", "0.1", 1, "ok", 7001), op("set", "s0:1", "0.2", 2, "info"),
            op("set", "s0:1", "0.3", 3, "fail"), op("put", "p0:1", "0.4", 4, "ok"),
            op("set", "d0:1", "0.5", 5, "ok", 7001), op("del", "d0:1", None, 6, "ok", 7001)]
    final, puts = {"s0:1": "0.2", "d0:1": None}, {"p0:1": "0.4"}
    assert history.check(base, final, puts)[0] == []
    assert history.check(base, {**final, "s0:1": "0.1"}, puts)[0] == []     # the open write was lost: allowed
    # an acknowledged write lost, a put lost, a refused write applied, a value from nowhere
    assert history.check(base, {**final, "s0:1": None}, puts)[0][0].startswith("lost: s0:1")
    assert history.check(base, final, {"p0:1": None})[0][0].startswith("lost: p0:1")
    assert history.check(base, {**final, "s0:1": "0.3"}, puts)[0][0].startswith("lost: s0:1")
    assert history.check(base, {**final, "s0:1": "9.9"}, puts)[0][0].startswith("never written")
    # reads: of a refused write, of nothing written
    assert "refused write" in history.check(base + [op("get", "s0:1", "0.3", 7, "ok")], final, puts)[0][0]
    assert "never written" in history.check(base + [op("get", "s0:1", "x", 7, "ok")], final, puts)[0][0]
    # a put read back torn (its bytes not all of one version)
    torn = history.put_version(b"0.4:" + bytes([4]) * 50 + bytes([5]))
    assert "never written" in history.check(base + [op("pget", "p0:1", torn, 7, "ok")], final, puts)[0][0]
    assert history.put_version(b"0.4:" + bytes([4]) * 51) == "0.4"
    # a deleted key read as missing, then found again
    again = [op("dget", "d0:1", None, 7, "ok"), op("dget", "d0:1", "0.5", 8, "ok")]
    assert "came back" in history.check(base + again, final, puts)[0][0]
    assert any("came back" in b for b in history.check(base + again[:1], {**final, "d0:1": "0.5"}, puts)[0])
    # two primaries: 7001, then 7002, then 7001 again with no nemesis step between
    two = base + [op("set", "s0:2", "0.6", 10, "ok", 7002), op("set", "s0:2", "0.7", 11, "okn", 7001)]
    final2 = {**final, "s0:2": "0.7"}
    assert history.check(two, final2, puts)[0][0].startswith("two primaries")
    assert history.check(two, final2, puts, steps=[10.6])[0] == []           # a failover between: fine


@pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")
@pytest.mark.parametrize("schedule", [("stop-primary", "kill-primary-etcd-down"),
                                      ("partition-primary", "restart-primary-fast")])
def test_cluster_history(schedule):
    bad, stats = history.run_cluster(ROUNDS, seed=1, schedule=schedule)
    print(f"\ncluster history: {stats}")
    assert stats["acked_writes"] > 100, stats
    assert bad == [], bad[:10]


def test_aof_always_history_kill9():
    bad, stats = history.run_aof(ROUNDS + 1, seed=1)
    print(f"\naof history: {stats}")
    assert stats["acked_writes"] > 100, stats
    assert bad == [], bad[:10]


@pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")
@pytest.mark.parametrize("data", ["no-log", "log-lost"])
def test_a_primary_restarted_at_once_without_its_data_loses_nothing(data):
    # kill -9 and a restart within the lease's TTL (a supervisor's restart):
    # the alive key never lapses, so no failover starts, and the node came
    # back owning its slots with an empty keyspace that both replicas then
    # synced -- every acknowledged write gone (found by the history
    # checker's restart-primary-fast step). It now holds back until a
    # replica has taken over, then syncs from it. log-lost: appendonly yes,
    # but the log's directory is gone at the restart (a replaced disk, a
    # wiped volume): the node has no data either, and was not held.
    cl = history.Cluster(extra=("--appendonly", "yes") if data == "log-lost" else ())
    try:
        p = cl.primary()
        c = history.Conn(p.port)
        for i in range(100):
            assert c("SET", f"k{i}", f"v{i}") == "OK"
        assert c("WAIT", 2, 5000) == 2
        c.close()
        p.kill()
        if data == "log-lost":
            shutil.rmtree(os.path.join(p.dir, "appendonlydir"))
        p.start()
        history.wait_until(cl.healthy, 30, "one primary with both replicas linked")
        q = cl.primary()
        got = [history.call(q.port, "GET", f"k{i}") for i in range(100)]
        assert got == [f"v{i}".encode() for i in range(100)], f"{got.count(None)} of 100 acknowledged writes lost"
        # held, then a replica took over (or, were the restart slower than
        # the TTL, the failover came first and it restarted as a replica)
        assert q is not p
        assert ("restarted without its data" in p.log()) == ("a replica took our slots" in p.log())
        # the old primary, now a replica (healthy: linked), has it all too
        r = history.Conn(p.port)
        assert r("READONLY") == "OK" and r("GET", "k99") == b"v99"
        r.close()
    finally:
        cl.close()
    cl.cleanup()


@pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")
def test_a_primary_restarted_without_data_serves_again_when_no_replica_can_take_over():
    # every node killed and started again at once: the replicas are alive
    # but never synced since their start, so none may take over; the
    # primary's hold ends after the failover window and it serves its slots
    # (empty: the data was nowhere)
    cl = history.Cluster()
    try:
        p = cl.primary()
        assert history.call(p.port, "SET", "k", "v") == "OK"
        for n in cl.nodes:
            n.kill()
        for n in cl.nodes[::-1]:        # the replicas first: alive in etcd when the primary reads it
            n.start()
        history.wait_until(cl.healthy, 30, "the cluster to serve again")
        assert cl.primary() is p and "no replica took over within the failover window" in p.log()
    finally:
        cl.close()
    cl.cleanup()
