"""kill -9 in the middle of a write load, with each appendfsync policy:
every write acknowledged before the kill is there after the restart, with
its value (the log is written before the replies under every policy; the
policies differ only in what a power cut could take, which a test cannot
cut). Writes run from a thread of their own, each waiting for its reply,
so the one in flight at the kill is the only one whose fate is open."""
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


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_acknowledged_writes_survive_kill9(policy):
    srv = LoggedServer("--appendfsync", policy)
    try:
        acked, stop = [0], threading.Event()
        t = threading.Thread(target=writer, args=(srv.port, acked, stop))
        t.start()
        r = redis.Redis(port=srv.port)
        while acked[0] < 3000:  # wait for the load to be under way, not for time
            t.join(0.01)
            assert t.is_alive()
        srv.kill9()
        stop.set()
        t.join(30)
        n = acked[0]
        srv.start()
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
