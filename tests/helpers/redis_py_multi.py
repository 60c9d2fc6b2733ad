#!/usr/bin/python3
"""redis_py_multi.py HOST PORT -- transactions through redis-py, as applications use them.

Run by tests/unit/multi.tcl with Debian's /usr/bin/python3 and its
python3-redis, against Mooncake and (in development mode) redis-server:
the default pipeline() (MULTI ... EXEC), optimistic locking with
WATCH/MULTI/EXEC raising WatchError, Redis.transaction()'s retry loop, and
errors inside a transaction. Prints one line per check and "ALL OK" at the
end; a failed check raises, so the exit status is non-zero.
"""
import sys
import threading

import redis


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError("%s failed %s" % (name, detail))
    print("ok", name)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    print("redis-py", redis.__version__)
    r = redis.Redis(host=host, port=port, socket_timeout=10)
    other = redis.Redis(host=host, port=port, socket_timeout=10)
    r.delete("tx:a", "tx:b", "tx:counter", "tx:w")

    # pipeline() is transaction=True by default: MULTI ... EXEC in one write.
    with r.pipeline() as p:
        p.set("tx:a", "1").set("tx:b", "2").get("tx:a").mget("tx:a", "tx:b")
        res = p.execute()
    check("pipeline transaction", res == [True, True, b"1", [b"1", b"2"]], repr(res))

    with r.pipeline(transaction=False) as p:
        p.set("tx:a", "x").get("tx:a")
        check("pipeline without transaction", p.execute() == [True, b"x"])

    # A runtime error inside EXEC: the others ran, the error is raised
    # (raise_on_error) or returned in place.
    with r.pipeline() as p:
        p.set("tx:a", "y").execute_command("SET", "tx:b", "z", "BADOPTION").get("tx:a")
        try:
            p.execute()
            raised = False
        except redis.ResponseError as e:
            raised = "syntax" in str(e)
    check("runtime error raised after EXEC", raised)
    check("commands around the error ran", r.get("tx:a") == b"y" and r.get("tx:b") == b"2")
    with r.pipeline() as p:
        p.set("tx:a", "y2").execute_command("SET", "tx:b", "z", "BADOPTION").get("tx:a")
        res = p.execute(raise_on_error=False)
    check("runtime error returned in place",
          res[0] is True and isinstance(res[1], redis.ResponseError) and res[2] == b"y2", repr(res))

    # A command refused while queueing: EXECABORT, nothing ran.
    with r.pipeline() as p:
        p.set("tx:a", "never").execute_command("SET", "tx:b")
        try:
            p.execute()
            err = ""
        except redis.ResponseError as e:
            err = str(e)
    check("queueing error aborts (EXECABORT)", "EXECABORT" in err or "wrong number" in err, err)
    check("nothing of the aborted transaction ran", r.get("tx:a") == b"y2")

    # Optimistic locking: WATCH, read, MULTI, write, EXEC.
    r.set("tx:counter", 10)
    with r.pipeline() as p:
        p.watch("tx:counter")
        v = int(p.get("tx:counter"))
        p.multi()
        p.set("tx:counter", v + 1)
        check("watched transaction runs when nothing changed", p.execute() == [True])
    check("counter incremented", r.get("tx:counter") == b"11")

    with r.pipeline() as p:
        p.watch("tx:counter")
        v = int(p.get("tx:counter"))
        other.set("tx:counter", 100)  # another client changes it
        p.multi()
        p.set("tx:counter", v + 1)
        try:
            p.execute()
            aborted = False
        except redis.WatchError:
            aborted = True
    check("WatchError when a watched key changed", aborted)
    check("the other client's write stands", r.get("tx:counter") == b"100")

    # Redis.transaction(): retries the function until EXEC succeeds. The
    # first attempt is spoiled by another client.
    attempts = []

    def incr(pipe):
        cur = int(pipe.get("tx:counter"))
        if not attempts:
            other.set("tx:counter", cur + 1000)
        attempts.append(cur)
        pipe.multi()
        pipe.set("tx:counter", cur + 1)

    r.transaction(incr, "tx:counter")
    check("transaction() retried after WatchError", len(attempts) == 2, repr(attempts))
    check("transaction() result", r.get("tx:counter") == b"1101")

    # Concurrent increments with WATCH: none lost.
    r.set("tx:w", 0)

    def worker():
        c = redis.Redis(host=host, port=port, socket_timeout=10)
        for _ in range(50):
            def step(pipe):
                cur = int(pipe.get("tx:w"))
                pipe.multi()
                pipe.set("tx:w", cur + 1)
            c.transaction(step, "tx:w")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("no increment lost under contention", r.get("tx:w") == b"200", repr(r.get("tx:w")))

    # An empty transaction, and UNWATCH through reset().
    with r.pipeline() as p:
        check("empty transaction", p.execute() == [])
    with r.pipeline() as p:
        p.watch("tx:a")
        p.reset()  # UNWATCH
    other.set("tx:a", "changed")
    with r.pipeline() as p:
        p.set("tx:b", "after-unwatch")
        check("pipeline after an UNWATCHed key changed", p.execute() == [True])

    # RESP3 is not in redis-py 4.3; the nil EXEC under RESP3 is tested in Tcl.
    r.delete("tx:a", "tx:b", "tx:counter", "tx:w")
    print("ALL OK")


if __name__ == "__main__":
    main()
