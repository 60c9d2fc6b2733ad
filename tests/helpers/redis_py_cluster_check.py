#!/usr/bin/python3
"""redis_py_cluster_check.py HOST PORT PORTS [--store] -- a cluster through
redis-py's RedisCluster.

PORTS is the comma-separated list of every master's port, to compare with
what the client discovered.  With --store the Mooncake store commands
(PUT.START, PUT.END, GET.REPLICAS, REMOVE) are routed too: redis-py finds
their keys from COMMAND, so this fails if their key positions are wrong.

Run by tests/integration/cluster.tcl with Debian's /usr/bin/python3 and its
python3-redis (4.3.4); talks only to the given host.  Prints one line per
check and "ALL OK" at the end; any failed check raises (exit status != 0).
"""
import sys

import redis
from redis.cluster import RedisCluster


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError("%s failed %s" % (name, detail))
    print("ok", name)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    ports = sorted(int(p) for p in sys.argv[3].split(","))
    store = "--store" in sys.argv[4:]
    print("redis-py", redis.__version__)
    rc = RedisCluster(host=host, port=port, socket_timeout=10, socket_connect_timeout=5)

    primaries = rc.get_primaries()
    got = sorted(n.port for n in primaries)
    check("discovered masters", got == ports, "(got %r, want %r)" % (got, ports))
    check("no replicas", rc.get_replicas() == [])
    check("ping all", rc.ping(target_nodes=RedisCluster.ALL_NODES) is True)

    for k in ["a", "foo", "{user1}x", "a{}b", "{}", "123456789", "\u00e9t\u00e9"]:
        check("keyslot %r" % k, rc.keyslot(k) == rc.cluster_keyslot(k),
              "(client %d, server %d)" % (rc.keyslot(k), rc.cluster_keyslot(k)))

    # DBSIZE and KEYS go to one node unless told otherwise.
    primaries = RedisCluster.PRIMARIES
    rc.flushall()
    check("flushall", rc.dbsize(target_nodes=primaries) == 0)
    keys = ["py:k:%d" % i for i in range(300)]
    for i, k in enumerate(keys):
        rc.set(k, "value-%d" % i)
    check("get across slots", all(rc.get(k) == ("value-%d" % i).encode()
                                  for i, k in enumerate(keys)))
    slots = {rc.keyslot(k) for k in keys}
    owners = {rc.get_node_from_key(k).port for k in keys}
    check("keys spread over every master", owners == set(ports), "(%r)" % owners)
    check("many slots", len(slots) > 250, "(%d)" % len(slots))

    # Each key lives on its owner; any other master redirects to it.
    for k in keys[:30]:
        owner = rc.get_node_from_key(k)
        direct = redis.Redis(host=owner.host, port=owner.port, socket_timeout=10)
        check("owner %s has %s" % (owner.port, k), direct.get(k) is not None)
        direct.close()
        other = [p for p in ports if p != owner.port][0]
        o = redis.Redis(host=host, port=other, socket_timeout=10)
        try:
            o.get(k)
            check("MOVED from %d for %s" % (other, k), False, "(no error)")
        except redis.exceptions.ResponseError as e:
            want = "MOVED %d %s:%d" % (rc.keyslot(k), owner.host, owner.port)
            check("MOVED from %d for %s" % (other, k), str(e) == want,
                  "(%r, want %r)" % (str(e), want))
        o.close()

    n = rc.dbsize(target_nodes=primaries)
    check("dbsize sums the masters", n == 300, "(%r)" % n)
    check("keys merges the masters", len(rc.keys("py:k:*", target_nodes=primaries)) == 300)
    check("scan_iter walks every master", len(set(rc.scan_iter(match="py:k:*", count=50))) == 300)

    rc.mset_nonatomic({"py:m:%d" % i: str(i) for i in range(50)})
    check("mget_nonatomic", rc.mget_nonatomic(["py:m:%d" % i for i in range(50)])
          == [str(i).encode() for i in range(50)])
    check("mset same hash tag", rc.mset({"{py}a": "1", "{py}b": "2"}) is True)
    check("mget same hash tag", rc.mget(["{py}a", "{py}b", "{py}c"]) == [b"1", b"2", None])

    binary = bytes(range(256)) * 8
    rc.set(b"py:bin\x00\xff", binary)
    check("binary key and value", rc.get(b"py:bin\x00\xff") == binary)

    p = rc.pipeline()
    for i in range(100):
        p.set("py:pipe:%d" % i, i)
    for i in range(100):
        p.get("py:pipe:%d" % i)
    res = p.execute()
    check("pipeline across slots", res[:100] == [True] * 100
          and res[100:] == [str(i).encode() for i in range(100)])

    check("exists across slots", rc.exists("py:k:1", "py:k:2", "py:k:3", "py:nokey") == 3)
    check("expire", rc.expire("py:k:1", 100) is True)
    check("ttl", 90 <= rc.ttl("py:k:1") <= 100)
    check("delete across slots", rc.delete("py:k:1", "py:k:2", "py:k:3", "py:nokey") == 3)
    check("deleted", rc.get("py:k:2") is None)
    info = rc.cluster_info()
    check("cluster_info", info.get("cluster_state") == "ok", "(%r)" % info.get("cluster_state"))

    if store:
        for i in range(20):
            k = "py:store:%d" % i
            reps = rc.execute_command("PUT.START", k, 100)
            check("PUT.START %s" % k, isinstance(reps, list) and len(reps) >= 1, "(%r)" % reps)
            check("PUT.END %s" % k, rc.execute_command("PUT.END", k) in (b"OK", "OK", True))
            gr = rc.execute_command("GET.REPLICAS", k)
            check("GET.REPLICAS %s" % k, isinstance(gr, list) and int(gr[1]) == 100, "(%r)" % gr)
        check("REMOVE", rc.execute_command("REMOVE", "py:store:0") == 1)
        check("removed", rc.execute_command("GET.REPLICAS", "py:store:0") is None)

    rc.flushall()
    rc.close()
    print("ALL OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
