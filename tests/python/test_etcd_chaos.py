"""etcd in trouble under a cluster: frozen, answering late, or racing
topology changes from several nodes. etcd is the source of truth: what it
holds must never contradict itself, and a node must never act on a view
etcd does not back. Each test starts its own etcd and nodes (the env
fixture of test_replication.py) and waits with bounded loops only.
Skipped without etcd."""
import json
import signal
import urllib.request
from base64 import b64decode, b64encode

from test_replication import STEADY, Conn, RespError, call, env, info, wait_until  # noqa: F401 (env is a fixture)


def etcd_nodes(etcd, name):
    """The node records under the cluster's prefix, as etcd holds them."""
    pre = f"/mooncake/{name}/nodes/"
    body = {"key": b64encode(pre.encode()).decode(),
            "range_end": b64encode(pre[:-1].encode() + bytes([ord(pre[-1]) + 1])).decode()}
    req = urllib.request.Request(etcd.url + "/v3/kv/range", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    return [json.loads(b64decode(kv["value"])) for kv in kvs]


def blocked(port):
    return info(port, "clients")["blocked_clients"] == "1"


def test_concurrent_addslots_of_one_slot_one_wins(env):
    """Two nodes of one cluster each ADDSLOTS the same free slot while etcd
    is frozen, so both plans are made before either commits. Comparing
    only the records each changes let both commit: both clients heard +OK
    and etcd kept two claims of the slot (the loser's to surface the day
    the winner lets it go). One must win, the other hear the slot is busy."""
    etcd, node = env
    a, b = node(*STEADY), node(*STEADY)
    assert call(b.port, "CLUSTER", "MEET", "127.0.0.1", a.port) == "OK"
    wait_until(lambda: a.id in b.nodes() and b.id in a.nodes(), 10, "meet")
    ca, cb = Conn(a.port, 60), Conn(b.port, 60)
    etcd.proc.send_signal(signal.SIGSTOP)
    try:
        ca.send("CLUSTER", "ADDSLOTS", 5)
        cb.send("CLUSTER", "ADDSLOTS", 5)
        # both planned against a view where slot 5 is free, and wait for etcd
        wait_until(lambda: blocked(a.port) and blocked(b.port), 10, "both ADDSLOTS waiting for etcd")
    finally:
        etcd.proc.send_signal(signal.SIGCONT)
    replies = []
    for c in (ca, cb):
        try:
            replies.append(c.read())
        except RespError as e:
            replies.append(str(e))
        c.close()
    assert sorted(replies) == ["ERR Slot 5 is already busy", "OK"], replies
    claims = [r["id"] for r in etcd_nodes(etcd, a.args[a.args.index("--cluster-name") + 1])
              if any(lo <= 5 <= hi for lo, hi in r["slots"])]
    winner = a if replies[0] == "OK" else b
    assert claims == [winner.id]
    for n in (a, b):
        wait_until(lambda: [l.split()[0] for l in n.nodes().splitlines() if l.endswith(" 5")] == [winner.id], 10,
                   "both nodes to see the winner own slot 5")
