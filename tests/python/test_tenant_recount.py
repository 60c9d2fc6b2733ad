"""The tenants' counters (tenantkeys.c, acl.c) where the Tcl random walk
(tests/unit/tenant_recount.tcl) cannot take them: a restart from the log,
ACL LOAD, and a replica. After a seeded walk of a tenant's writes, DEBUG
TENANT-CHECK (a recount by a walk) must answer nothing, and the usage a
restart or a replica counts from the keys it finds must be the primary's.
A counter that drifted would refuse its tenant for ever, or leave it
unbounded, silently."""
import os
import random
import shutil
import tempfile

import pytest
import redis

from conftest import LoggedServer
from test_replication import Etcd, Node, call, pair, synced, wait_until, STEADY

ACL = ("user default on nopass ~* &* +@all\n"
       "user alice on >pa ~a:* ~a:b:* +@all -@dangerous\n"
       "user bob on >pb ~b:* ~a:b:x +@all -@dangerous\n"
       "user carol on >pc ~a:b:* +@all -@dangerous\n")
USERS = {"alice": ("pa", ["a:", "a:b:"]), "bob": ("pb", ["b:", "a:b:x"]), "carol": ("pc", ["a:b:"])}


def check(r, what):
    diffs = r.execute_command("DEBUG", "TENANT-CHECK")
    assert diffs == [], f"counters drifted after {what}: {diffs}"


def usage(r):
    info = r.info("tenants")
    return {u: (info[f"tenant_{u}"]["objects"], info[f"tenant_{u}"]["bytes"]) for u in USERS}


def walk(admin, conns, seed, steps, check_on=None):
    """A seeded walk of writes by the tenants and the server's user; the
    recount after each step. Puts end (or are revoked) within their step,
    so that what is left is values only (a restart keeps no put)."""
    rnd = random.Random(seed)
    for step in range(steps):
        name = rnd.choice(list(USERS) + ["admin"])
        c = admin if name == "admin" else conns[name]
        own = USERS["alice" if name == "admin" else name][1]
        p = rnd.choice(own)
        k = p if p == "a:b:x" else f"{p}{rnd.randrange(8)}"
        v = b"v" * rnd.choice([0, 1, 100, 3000, 33000 + rnd.randrange(20000)])
        op = rnd.choice(["set", "set", "setex", "append", "incr", "del", "expire", "put", "copy", "rename",
                         "getset", "mset"])
        try:
            if op == "set":
                c.set(k, v)
            elif op == "setex":
                c.setex(k, 1000, v)
            elif op == "append":
                c.append(k, v)
            elif op == "incr":
                c.incr(k)
            elif op == "del":
                c.delete(k)
            elif op == "expire":
                c.pexpire(k, rnd.choice([1, 100000]))
            elif op == "put":
                c.execute_command("PUT.START", k, 1 + rnd.randrange(60000), "REPLACE")
                c.execute_command("PUT.END" if rnd.randrange(2) else "PUT.REVOKE", k)
            elif op == "copy":
                c.copy(k, f"{p}{rnd.randrange(8)}" if p != "a:b:x" else k, replace=True)
            elif op == "rename":
                c.rename(k, f"{p}{rnd.randrange(8)}" if p != "a:b:x" else k)
            elif op == "getset":
                c.getset(k, v)
            elif op == "mset":
                c.mset({k: v, f"{own[0]}m": v})
        except redis.ResponseError:
            pass  # refusals (a wrong type, no such key, tenant-maxmemory) change nothing
        check(check_on or admin, f"seed {seed} step {step}: {op} {k} as {name}")


def expire_due(r):
    """The keys whose TTL passed, gone (each at its first touch; KEYS does
    not list them): the walk's TTLs are 1 ms or 100 s, so what is left is
    the same whenever counted. Every name the walk writes is touched."""
    names = ["a:b:x", "a:m", "b:m"] + [f"{p}{i}" for p in ("a:", "a:b:", "b:") for i in range(8)]
    for k in names:
        r.exists(k)


def connect(port, **kw):
    return redis.Redis(port=port, **kw)


def test_restart_and_acl_load_keep_the_counts_exact():
    d = tempfile.mkdtemp(prefix="tq-recount-")
    aclfile = os.path.join(d, "users.acl")
    with open(aclfile, "w") as f:
        f.write(ACL)
    srv = LoggedServer("--aclfile", aclfile, "--tenant-maxmemory", "300000", "--lease-ttl", "1")
    try:
        admin = connect(srv.port)
        conns = {u: connect(srv.port, username=u, password=pw) for u, (pw, _) in USERS.items()}
        walk(admin, conns, 11, 250)
        expire_due(admin)
        before = usage(admin)
        assert sum(o for o, _ in before.values()) > 0
        for c in list(conns.values()) + [admin]:
            c.close()
        srv.kill9()
        srv.start()
        admin = connect(srv.port)
        check(admin, "the restart")
        expire_due(admin)
        assert usage(admin) == before
        conns = {u: connect(srv.port, username=u, password=pw) for u, (pw, _) in USERS.items()}
        for c in conns.values():
            c.ping()
        # ACL LOAD: prefixes change (alice down to a:b:, carol up to a:),
        # bob goes with his connection, and comes back.
        with open(aclfile, "w") as f:
            f.write(ACL.replace("~a:* ~a:b:*", "~a:b:*").replace("user carol on >pc ~a:b:*", "user carol on >pc ~a:*")
                    .replace("user bob on >pb ~b:* ~a:b:x +@all -@dangerous\n", ""))
        assert admin.execute_command("ACL", "LOAD") == b"OK"
        check(admin, "ACL LOAD")
        with open(aclfile, "w") as f:
            f.write(ACL)
        assert admin.execute_command("ACL", "LOAD") == b"OK"
        check(admin, "ACL LOAD back")
        conns["bob"] = connect(srv.port, username="bob", password="pb")
        walk(admin, conns, 12, 100)
        for c in list(conns.values()) + [admin]:
            c.close()
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")
def test_a_replica_counts_what_its_primary_does():
    d = tempfile.mkdtemp(prefix="tq-replica-")
    aclfile = os.path.join(d, "users.acl")
    with open(aclfile, "w") as f:
        f.write(ACL)
    etcd = Etcd(d)
    nodes = []
    name = f"tq-{os.getpid()}"
    try:
        def node(*extra):
            return Node(d, etcd, name, *extra, track=nodes.append)
        a, b = pair(node, *STEADY, "--aclfile", aclfile, "--tenant-maxmemory", "300000")
        admin = connect(a.port)
        conns = {u: connect(a.port, username=u, password=pw) for u, (pw, _) in USERS.items()}
        walk(admin, conns, 21, 200)
        # The primary's expiry reaches the replica as deletions.
        expire_due(admin)
        wait_until(lambda: synced(a, b), 20, "the replica to apply the stream")
        rep = connect(b.port)
        check(rep, "the replica's sync")
        assert sum(o for o, _ in usage(admin).values()) > 0
        assert usage(rep) == usage(admin)
        assert call(b.port, "DBSIZE") == admin.dbsize()
        for c in list(conns.values()) + [admin, rep]:
            c.close()
    finally:
        for n in nodes:
            if n.proc and n.proc.poll() is None:
                n.kill()
        etcd.stop()
        shutil.rmtree(d, ignore_errors=True)
