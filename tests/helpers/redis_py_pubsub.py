#!/usr/bin/python3
"""redis_py_pubsub.py HOST PORT [--store] -- Pub/Sub through redis-py.

Run by tests/unit/pubsub.tcl and tests/unit/notify.tcl with Debian's
/usr/bin/python3 and its python3-redis: subscribing, pattern subscriptions,
handlers in a worker thread, PUBSUB introspection and keyspace
notifications as an application would use them. With --store, also the
store's own events (mooncake-server only). Prints one line per check and
"ALL OK" at the end; a failed check raises, so the exit status is non-zero.
"""
import sys
import threading
import time

import redis


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError("%s failed %s" % (name, detail))
    print("ok", name)


def next_message(p, timeout=5.0):
    """The next message (not a subscription confirmation), or None."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = p.get_message(timeout=0.1)
        if m and m["type"] in ("message", "pmessage"):
            return m
    return None


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    store = "--store" in sys.argv[3:]
    print("redis-py", redis.__version__)
    r = redis.Redis(host=host, port=port, socket_timeout=10)

    p = r.pubsub()
    p.subscribe("py:a", "py:b")
    confirms = [p.get_message(timeout=2) for _ in range(2)]
    check("subscribe confirmations", [m["type"] for m in confirms] == ["subscribe"] * 2
          and [m["data"] for m in confirms] == [1, 2], confirms)
    check("publish counts receivers", r.publish("py:a", "hello") == 1)
    m = next_message(p)
    check("message", m is not None and m["channel"] == b"py:a" and m["data"] == b"hello", m)

    p.psubscribe("py:*")
    p.get_message(timeout=2)
    check("publish to channel and pattern", r.publish("py:b", b"\x00bin \r\n") == 2)
    got = [next_message(p), next_message(p)]
    check("message then pmessage", [g["type"] for g in got] == ["message", "pmessage"]
          and got[1]["pattern"] == b"py:*" and all(g["data"] == b"\x00bin \r\n" for g in got), got)

    check("pubsub_channels", sorted(r.pubsub_channels("py:*")) == [b"py:a", b"py:b"])
    check("pubsub_numsub", r.pubsub_numsub("py:a", "py:none") == [(b"py:a", 1), (b"py:none", 0)])
    check("pubsub_numpat", r.pubsub_numpat() == 1)

    p.unsubscribe()
    p.punsubscribe()
    time.sleep(0.1)
    while p.get_message(timeout=0.1):
        pass
    check("all unsubscribed", r.pubsub_numsub("py:a") == [(b"py:a", 0)] and r.pubsub_numpat() == 0)
    p.close()

    # Handlers run by redis-py's worker thread.
    received = []
    done = threading.Event()

    def handler(msg):
        received.append(msg["data"])
        if len(received) == 3:
            done.set()

    p = r.pubsub(ignore_subscribe_messages=True)
    p.subscribe(**{"py:thread": handler})
    t = p.run_in_thread(sleep_time=0.01)
    deadline = time.time() + 5
    while r.pubsub_numsub("py:thread")[0][1] == 0 and time.time() < deadline:
        time.sleep(0.01)
    for i in range(3):
        r.publish("py:thread", "m%d" % i)
    done.wait(5)
    t.stop()
    t.join(5)
    p.close()
    check("run_in_thread handler", received == [b"m0", b"m1", b"m2"], received)

    # Keyspace notifications, as Redis names them.
    r.config_set("notify-keyspace-events", "KEA")
    check("notify-keyspace-events", r.config_get("notify-keyspace-events")["notify-keyspace-events"] == "AKE")
    p = r.pubsub(ignore_subscribe_messages=True)
    p.psubscribe("__keyevent@0__:*")
    time.sleep(0.05)
    r.set("py:k", "v", px=100000)
    r.delete("py:k")
    events = [next_message(p) for _ in range(3)]
    check("keyevent set/expire/del", [(e["channel"], e["data"]) for e in events if e] ==
          [(b"__keyevent@0__:set", b"py:k"), (b"__keyevent@0__:expire", b"py:k"), (b"__keyevent@0__:del", b"py:k")],
          events)
    p.close()

    if store:
        r.config_set("notify-keyspace-events", "S")
        p = r.pubsub(ignore_subscribe_messages=True)
        p.psubscribe("__store@0__:*")
        time.sleep(0.05)
        key = b"py store key"
        r.execute_command("PUT.START", key, 1234)
        r.execute_command("PUT.END", key)
        m = next_message(p)
        check("store put event", m is not None and m["channel"] == b"__store@0__:put", m)
        fields, k = m["data"].split(b" key=", 1)
        f = dict(kv.split(b"=", 1) for kv in fields.split(b" "))
        check("store put payload", k == key and f[b"size"] == b"1234" and f[b"segments"] == b"1"
              and len(f[b"node"]) == 40, m["data"])
        r.execute_command("REMOVE", key)
        m = next_message(p)
        check("store remove event", m is not None and m["channel"] == b"__store@0__:remove"
              and m["data"].endswith(b" key=" + key), m)
        p.close()

    r.config_set("notify-keyspace-events", "")
    print("ALL OK")


if __name__ == "__main__":
    main()
