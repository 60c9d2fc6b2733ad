#!/usr/bin/python3
"""redis_py_check.py HOST PORT -- exercise the server through redis-py.

Run by tests/integration/redis-cli.tcl with Debian's /usr/bin/python3 and
its python3-redis. Prints one line per check and "ALL OK" at the end; any
failed check raises, so the exit status is non-zero.
"""
import sys

import redis


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError("%s failed %s" % (name, detail))
    print("ok", name)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    print("redis-py", redis.__version__)
    r = redis.Redis(host=host, port=port, socket_timeout=10)

    check("ping", r.ping() is True)
    r.flushdb()
    check("set", r.set("py:a", b"hello") is True)
    check("get", r.get("py:a") == b"hello")
    check("get missing", r.get("py:missing") is None)
    binary = bytes(range(256)) * 4
    r.set("py:bin", binary)
    check("binary round trip", r.get("py:bin") == binary)
    check("set nx refused", r.set("py:a", "x", nx=True) is None)
    check("set xx", r.set("py:a", "world", xx=True) is True)

    r.mset({"py:m1": "1", "py:m2": "2"})
    check("mget", r.mget(["py:m1", "py:missing", "py:m2"]) == [b"1", None, b"2"])
    check("exists", r.exists("py:m1", "py:m2", "py:missing") == 2)
    check("type", r.type("py:m1") == b"string")
    check("strlen", r.strlen("py:a") == 5)
    check("getrange", r.getrange("py:a", 0, 2) == b"wor")

    for i in range(300):
        r.set("py:scan:%d" % i, i)
    keys = set(r.scan_iter(match="py:scan:*", count=50))
    check("scan_iter", len(keys) == 300, "(got %d)" % len(keys))
    check("keys", len(r.keys("py:scan:*")) == 300)

    # No MULTI/EXEC in the server: a plain pipeline.
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set("py:pipe:%d" % i, i)
    p.get("py:pipe:42")
    res = p.execute()
    check("pipeline", res[:100] == [True] * 100 and res[100] == b"42")

    check("expire", r.expire("py:a", 100) is True)
    check("ttl", 90 <= r.ttl("py:a") <= 100)
    check("pexpire", r.pexpire("py:a", 50000) is True)
    check("pttl", 40000 <= r.pttl("py:a") <= 50000)
    check("persist", r.persist("py:a") is True and r.ttl("py:a") == -1)
    r.set("py:ex", "v", ex=100)
    check("set ex", 90 <= r.ttl("py:ex") <= 100)
    r.set("py:px", "v", px=100000)
    check("set px", 90000 <= r.pttl("py:px") <= 100000)

    info = r.info()
    check("info", "redis_version" in info and "connected_clients" in info)
    check("info keyspace", "db0" in r.info("keyspace"))
    check("config_get", "maxclients" in r.config_get("maxclients"))
    check("client_setname", r.client_setname("pyclient") is True)
    check("client_getname", r.client_getname() in ("pyclient", b"pyclient"))
    check("client_id", isinstance(r.client_id(), int))
    check("dbsize", r.dbsize() == len(r.keys("*")))
    check("delete", r.delete("py:m1", "py:m2", "py:missing") == 2)
    check("unlink", r.unlink("py:bin") == 1)
    check("echo", r.echo("hi") == b"hi")
    check("time", len(r.time()) == 2)

    try:
        r.execute_command("NO-SUCH-COMMAND")
        check("error reply", False)
    except redis.exceptions.ResponseError as e:
        check("error reply", "unknown command" in str(e))

    # RESP3 needs redis-py >= 5.
    try:
        r3 = redis.Redis(host=host, port=port, protocol=3, socket_timeout=10)
    except TypeError:
        print("skip hello protocol=3: redis-py %s has no RESP3" % redis.__version__)
    else:
        check("resp3 ping", r3.ping() is True)
        check("resp3 get", r3.get("py:ex") == b"v")
        check("resp3 missing", r3.get("py:missing") is None)
        check("resp3 config_get", "maxclients" in r3.config_get("maxclients"))

    r.flushdb()
    check("flushdb", r.dbsize() == 0)
    print("ALL OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
