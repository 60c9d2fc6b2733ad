#!/usr/bin/python3
"""redis_py_diff.py -- the same redis-py calls against mooncake-server and
redis-server, results compared as redis-py parses them.

redis_diff.py compares raw RESP; this compares what a client library makes
of it: redis-py's response callbacks parse CONFIG GET into a dict, INFO and
CLIENT LIST/INFO line by line, SLOWLOG, ACL GETUSER/LOG, COMMAND, LCS IDX,
TIME and the rest, so a reply the raw comparison takes (a field order, a
type byte two clients read alike) but that a parser chokes on shows here.
Each call's result (its repr) or exception (class and text) must be the
same on both servers, after the reductions written next to each call where
the values are each server's (counts, clocks, figures, field sets).

Debian's python3-redis is 4.3.4, RESP2 only (protocol=3 came in redis-py
5); hiredis-py is not packaged. RESP3 is compared raw by redis_diff.py and
hiredis (C) by tests/c/test_hiredis.c.

Left out: commands this server answers in its own way on purpose
(SAVE/BGSAVE refused, SWAPDB of 0 only, LASTSAVE, LATENCY and MEMORY
STATS/DOCTOR figures, CLIENT PAUSE timing) and CLIENT TRACKING, which it
does not serve: PROTOCOL.md says how each answers; tests/unit/tooling.tcl
checks them.

Usage: redis_py_diff.py   (prints "[ok] redis-py: N calls" or the
differences, exit 1; "[skip] ..." and exit 0 without redis-py or
redis-server)
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_diff as rd  # noqa: E402  (the servers and their arguments)

try:
    import redis
except ImportError:
    redis = None


def keys_of(d, wanted):
    return sorted(set(d) & set(wanted))


CALLS = [
    ("set", lambda r: r.set("k", "v")),
    ("get", lambda r: r.get("k")),
    ("role", lambda r: r.role()),
    ("wait", lambda r: r.wait(0, 0)),
    ("wait timeout", lambda r: r.wait(1, 50)),
    ("set ex", lambda r: r.set("k", "1", ex=100000)),
    ("ttl", lambda r: r.ttl("k") > 99000),
    ("pttl", lambda r: r.pttl("k") > 99000000),
    ("getex persist", lambda r: r.getex("k", persist=True)),
    ("incr", lambda r: r.incr("k")),
    ("incrbyfloat", lambda r: r.incrbyfloat("k", 1.5)),
    ("object encoding", lambda r: r.object("encoding", "k")),
    ("config get pattern", lambda r: sorted(r.config_get("slowlog-*").items())),
    ("config get case", lambda r: r.config_get("MAXMEMORY")),
    ("config set refused", lambda r: r.config_set("maxmemory", "-1")),
    ("config set", lambda r: r.config_set("slowlog-max-len", 128)),
    ("info", lambda r: keys_of(r.info(), ["redis_version", "connected_clients", "used_memory", "db0"])),
    ("info keyspace db0", lambda r: r.info("keyspace")["db0"]),
    ("client list", lambda r: keys_of(r.client_list()[0], ["id", "addr", "name", "flags", "cmd", "db", "age"])),
    ("client info", lambda r: keys_of(r.client_info(), ["id", "addr", "name", "flags", "cmd", "db"])),
    ("client setname", lambda r: r.client_setname("x")),
    ("client getname", lambda r: r.client_getname()),
    ("client id", lambda r: type(r.client_id()).__name__),
    ("client kill none", lambda r: r.client_kill_filter(_id=999999)),
    ("slowlog get", lambda r: type(r.slowlog_get(1)).__name__),
    ("slowlog len", lambda r: type(r.slowlog_len()).__name__),
    ("time", lambda r: [type(x).__name__ for x in r.time()]),
    ("dbsize", lambda r: r.dbsize()),
    ("memory usage", lambda r: type(r.memory_usage("k")).__name__),
    ("memory usage nil", lambda r: r.memory_usage("nosuch")),
    ("scan match", lambda r: sorted(r.scan_iter(match="k*"))),
    ("scan type", lambda r: sorted(r.scan_iter(_type="string"))),
    ("keys", lambda r: sorted(r.keys())),
    ("type", lambda r: r.type("k")),
    ("lcs", lambda r: (r.set("a", "ohmytext"), r.set("b", "mynewtext"), r.lcs("a", "b"),
                       r.lcs("a", "b", idx=True, withmatchlen=True, minmatchlen=2))),
    ("command count", lambda r: type(r.command_count()).__name__),
    ("command info", lambda r: r.command_info("get")),
    ("command getkeys", lambda r: r.command_getkeys("mset", "a", "1", "b", "2")),
    ("command get", lambda r: {k: v for k, v in r.command()["get"].items() if k != "flags"}),
    ("pubsub numsub", lambda r: r.pubsub_numsub("a", "b")),
    ("pubsub numpat", lambda r: r.pubsub_numpat()),
    ("pubsub channels", lambda r: r.pubsub_channels()),
    ("acl whoami", lambda r: r.acl_whoami()),
    ("acl setuser", lambda r: r.acl_setuser("u1", enabled=True, passwords=["+pw"], keys=["k*"], commands=["+get"])),
    ("acl getuser", lambda r: {k: v for k, v in r.acl_getuser("u1").items()
                               if k in ("flags", "keys", "channels", "enabled", "passwords")}),
    ("acl users", lambda r: r.acl_users()),
    ("acl log", lambda r: type(r.acl_log()).__name__),
    ("acl deluser", lambda r: r.acl_deluser("u1")),
    ("hello", lambda r: sorted(r.execute_command("HELLO", "2"))[:0]),
    ("echo", lambda r: r.echo("x")),
    ("bitcount", lambda r: r.bitcount("k", 0, -1)),
    ("bitpos", lambda r: r.bitpos("k", 1)),
    ("setbit", lambda r: r.setbit("bits", 7, 1)),
    ("getrange", lambda r: r.getrange("k", 0, -1)),
    ("mget", lambda r: r.mget("k", "nosuch", "a")),
    ("msetnx", lambda r: r.msetnx({"a": 1, "z": 2})),
    ("copy", lambda r: r.copy("k", "k2", replace=True)),
    ("rename", lambda r: r.rename("k2", "k3")),
    ("exists", lambda r: r.exists("k", "k3", "x")),
    ("expire gt", lambda r: r.expire("k3", 1000, gt=True)),
    ("persist", lambda r: r.persist("k3")),
    ("dump nil", lambda r: r.dump("nosuch")),
    ("watch multi exec", lambda r: (lambda p: (p.watch("k"), p.multi(), p.set("k", "2"), p.get("k"),
                                               p.execute()))(r.pipeline())[-1]),
    ("pipeline with errors", lambda r: r.pipeline().set("a", "1").incr("a").incr("nosuch:x")
     .execute_command("INCRBY", "a", "x").get("a").execute(raise_on_error=False)),
    ("incr refused", lambda r: r.set("a", "x") and r.incr("a")),
    ("wrong arity", lambda r: r.execute_command("GET")),
    ("unknown command", lambda r: r.execute_command("NOSUCH", "a")),
    ("select 1", lambda r: r.execute_command("SELECT", 1)),
    ("strlen", lambda r: r.strlen("zz")),
    ("setrange", lambda r: r.setrange("sr", 5, "x")),
    ("append", lambda r: r.append("sr", "yy")),
    ("get padded", lambda r: r.get("sr")),
    ("getdel", lambda r: r.getdel("z")),
    ("unlink", lambda r: r.unlink("a", "b")),
    ("touch", lambda r: r.touch("sr")),
    ("flushdb", lambda r: r.flushdb()),
    ("flushall async", lambda r: r.flushall(asynchronous=True)),
]


def run(port):
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    r.flushall()
    out = []
    for _, f in CALLS:
        try:
            out.append(("ok", repr(f(r))))
        except Exception as e:  # the exception is the result compared
            out.append((type(e).__name__, str(e)))
    r.close()
    return out


def main():
    if redis is None:
        print("[skip] redis-py is not installed: apt-get install python3-redis")
        return 0
    if not os.access(rd.REDIS, os.X_OK):
        print("[skip] redis-server is not installed (%s)" % rd.REDIS)
        return 0
    scratch = tempfile.mkdtemp(prefix="redis-py-diff-")
    servers = []
    try:
        try:
            for name, argv in (("mooncake", rd.mooncake_argv), ("redis", rd.redis_argv)):
                servers.append(rd.Server(name, argv, scratch))
        except RuntimeError as e:
            print("[err] %s" % e)
            return 2
        a, b = run(servers[0].port), run(servers[1].port)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    bad = [(n, x, y) for (n, _), x, y in zip(CALLS, a, b) if x != y]
    if not bad:
        print("[ok] redis-py %s: %d calls" % (redis.__version__, len(CALLS)))
        return 0
    print("[err] redis-py %s: %d of %d calls differ" % (redis.__version__, len(bad), len(CALLS)))
    for n, x, y in bad:
        print("  %s\n    mooncake: %s\n    redis:    %s" % (n, x, y))
    return 1


if __name__ == "__main__":
    sys.exit(main())
