"""A server restart, and a cluster node's, is a pause, not an error (issue 28
item 4), through Mooncake's drop-in store; and master_server_addr in
Mooncake's HA form, etcd://host:port, finds the cluster's nodes.

- a single server with the log on (appendfsync always) is killed with
  SIGKILL by a thread while the store puts and reads, and started again at
  once on the same port and directory: no call fails, every value reads
  back byte for byte, then and after.
- a node of a three-node cluster (utils/create-cluster, its own etcd) is
  killed and started again with the same dir and port (it keeps its id and
  slots): puts and gets of keys on every shard, its own included, go on
  without an error.
- setup(master_server_addr="etcd://...") connects through the nodes' etcd
  records; a cluster etcd does not know fails as a failed connect would.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

from mooncake import store as ms
from mooncake.store import MooncakeDistributedStore

from conftest import ROOT, SERVER, child_env, free_port

SCRIPT = os.path.join(ROOT, "utils", "create-cluster")


def value(i):
    n = 1 + (i * 7919) % 40000
    return (i.to_bytes(4, "little") * (n // 4 + 1))[:n]


class LoggedServer:
    """A mooncake-server with appendonly yes, restartable on its port and dir."""

    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="pytest-ride-")
        self.addr = f"127.0.0.1:{self.port}"
        self.proc = None
        self.launch()
        self.wait_up()

    def launch(self):
        log = open(os.path.join(self.dir, "server.log"), "a")
        self.proc = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--segment-size", "64mb",
             "--unixsocket", os.path.join(self.dir, "mc.sock"), "--appendonly", "yes", "--appendfsync", "always"],
            stdout=log, stderr=subprocess.STDOUT, env=child_env())
        log.close()

    def wait_up(self):
        import socket
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("server did not start")

    def kill_and_restart(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.launch()  # not waiting for it: the store's calls ride through that too

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def seen(got):
    """What a read that went wrong returned, short: its length (0: a miss)."""
    return None if got is None else len(got)


def ride_loop(store, nkeys, progress, prefix):
    """Puts and reads back nkeys keys (every tenth a batch of four); the
    list of what went wrong."""
    bad = []
    i = 0
    while i < nkeys:
        if i % 10 == 9:
            keys = [f"{prefix}{j}" for j in range(i, min(i + 4, nkeys))]
            vals = [value(j) for j in range(i, i + len(keys))]
            rc = store.put_batch(keys, vals)
            if rc != 0:
                bad.append(("put_batch", i, rc))
            progress[0] += 1
            got = store.get_batch(keys)
            if got != vals:
                bad.append(("get_batch", i, [seen(g) for g in got], progress[0]))
            i += len(keys)
        else:
            rc = store.put(f"{prefix}{i}", value(i))
            if rc != 0:
                bad.append(("put", i, rc))
            progress[0] += 1
            got = store.get(f"{prefix}{i}")
            if got != value(i):
                bad.append(("get", i, seen(got), progress[0]))
            j = (i * 31) % (i + 1)
            got = store.get(f"{prefix}{j}")
            if got != value(j):
                bad.append(("get older", j, seen(got), progress[0]))
            i += 1
        progress[0] += 1
    return bad


def test_server_restart_is_a_pause():
    srv = LoggedServer()
    s = MooncakeDistributedStore()
    try:
        assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", srv.addr) == 0
        progress = [0]
        marks = [60, 140]
        done = threading.Event()

        def killer():
            for m in marks:
                while progress[0] < m and not done.is_set():
                    time.sleep(0.001)
                if done.is_set():
                    return
                srv.kill_and_restart()
                srv.wait_up()

        t = threading.Thread(target=killer)
        t.start()
        try:
            bad = ride_loop(s, 150, progress, "pr:")
        finally:
            done.set()
            t.join()
        assert bad == []
        assert progress[0] >= marks[-1], "the loop ended before the second kill"
        for i in range(150):
            assert s.get(f"pr:{i}") == value(i), i
    finally:
        s.close()
        srv.close()


# ---- a cluster ------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    if not shutil.which("etcd") or not shutil.which("redis-cli"):
        pytest.skip("etcd or redis-cli is not installed (make deps-test installs etcd-server, redis-tools)")
    from test_cluster import free_run
    base = free_run(3)
    d = tempfile.mkdtemp(prefix="pyride-")
    name = f"ride-{os.getpid()}"
    etcd_port = free_port()
    env = child_env(KIND="mooncake", NODES="3", PORT=str(base), DIR=os.path.join(d, "data"), BIN=SERVER,
                    NAME=name, ETCD_PORT=str(etcd_port), ETCD_PEER_PORT=str(free_port()),
                    SEGMENT_SIZE="64mb", TIMEOUT="2000", EXTRA_ARGS="--appendonly yes --appendfsync always")

    def run(cmd):
        return subprocess.run([SCRIPT, cmd], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=120)
    try:
        for cmd in ("start", "create"):
            r = run(cmd)
            if r.returncode != 0:
                pytest.fail(f"create-cluster {cmd}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        yield {"nodes": [f"127.0.0.1:{base + i}" for i in range(3)], "ports": [base + i for i in range(3)],
               "etcd": f"127.0.0.1:{etcd_port}", "name": name, "dir": os.path.join(d, "data"), "run": run}
    finally:
        run("stop")
        run("clean")
        shutil.rmtree(d, ignore_errors=True)


def test_etcd_address_finds_the_cluster(cluster, monkeypatch):
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", cluster["name"])
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "",
                   f"etcd://127.0.0.1:1,{cluster['etcd']}") == 0  # a dead etcd first: the next one answers
    try:
        keys = [f"etcd:{i}" for i in range(40)]
        assert s.put_batch(keys, [value(i) for i in range(40)]) == 0
        assert s.get_batch(keys) == [value(i) for i in range(40)]
    finally:
        s.close()
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", "no-such-cluster")
    assert MooncakeDistributedStore().setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "",
                                            f"etcd://{cluster['etcd']}") == ms.RPC_FAIL


def test_node_restart_is_a_pause(cluster, monkeypatch):
    """A node killed and started again (same dir and port: same id, same
    slots): the store's calls to its slots wait for it, then succeed."""
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", cluster["name"])
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", f"etcd://{cluster['etcd']}") == 0
    victim = cluster["ports"][1]
    pidfile = os.path.join(cluster["dir"], str(victim), "pid")
    progress = [0]
    done = threading.Event()
    restarted = []

    def killer():
        while progress[0] < 40 and not done.is_set():
            time.sleep(0.001)
        if done.is_set():
            return
        os.kill(int(open(pidfile).read().strip()), signal.SIGKILL)
        r = cluster["run"]("start")  # starts what is not running: the victim, same dir and port
        restarted.append(r.returncode)

    t = threading.Thread(target=killer)
    t.start()
    try:
        bad = ride_loop(s, 120, progress, "node:")
    finally:
        done.set()
        t.join()
        s_ok = [s.get(f"node:{i}") == value(i) for i in range(120)]
        s.close()
    assert restarted == [0]
    assert bad == []
    assert all(s_ok)


def node_id(port):
    import redis
    r = redis.Redis(port=port)
    try:
        return r.execute_command("CLUSTER", "MYID").decode()
    finally:
        r.close()


def test_slot_migration_under_traffic(cluster, monkeypatch):
    """redis-cli --cluster reshard moves slots (MIGRATE, SETSLOT: -ASK,
    -TRYAGAIN, then -MOVED) while the store and a redis-py RedisCluster
    write and read keys of those slots: neither sees an error."""
    import redis
    from redis.cluster import RedisCluster
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", cluster["name"])
    p0, p1 = cluster["ports"][0], cluster["ports"][1]
    # Keys of the slots about to move: node 0's lowest ones (reshard takes from there).
    rc = RedisCluster(host="127.0.0.1", port=p0)
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster["nodes"][0]) == 0
    prefix = "mig{%d}:"
    moving = []
    i = 0
    while len(moving) < 12:
        if rc.keyslot(f"mig{{{i}}}:x") < 200:
            moving.append(i)
        i += 1
    progress = [0]
    stop = threading.Event()
    errors = []

    def traffic():
        n = 0
        while not stop.is_set() or n < 40:
            tag = moving[n % len(moving)]
            key = f"mig{{{tag}}}:{n}"
            try:
                if s.put(key, value(n)) != 0:
                    errors.append(("put", key))
                if s.get(key) != value(n):
                    errors.append(("get", key))
                rc.set(f"r{key}", value(n))
                if rc.get(f"r{key}") != value(n):
                    errors.append(("redis-py get", key))
            except redis.RedisError as e:
                errors.append(("redis-py", key, repr(e)))
            n += 1
            progress[0] = n

    t = threading.Thread(target=traffic)
    t.start()
    try:
        while progress[0] < 20:
            time.sleep(0.001)
        r = subprocess.run(["redis-cli", "--cluster", "reshard", f"127.0.0.1:{p0}", "--cluster-from", node_id(p0),
                            "--cluster-to", node_id(p1), "--cluster-slots", "200", "--cluster-yes"],
                           capture_output=True, text=True, timeout=120, env=child_env())
    finally:
        stop.set()
        t.join()
    try:
        assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
        assert errors == []
        for n in range(progress[0]):
            key = f"mig{{{moving[n % len(moving)]}}}:{n}"
            assert s.get(key) == value(n), key
        owners = {rc.keyslot(f"mig{{{tag}}}:x") for tag in moving}
        moved = redis.Redis(port=p1).execute_command("CLUSTER", "COUNTKEYSINSLOT", min(owners))
        assert moved > 0  # the keys are on the new owner now
    finally:
        s.close()
        rc.close()


def test_cluster_down_is_a_pause(cluster, monkeypatch):
    """A node down past cluster-node-timeout: the others flag it failed and
    answer -CLUSTERDOWN for every slot; the store's calls wait that out
    too, and succeed once it is back."""
    import redis
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", cluster["name"])
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", f"etcd://{cluster['etcd']}") == 0
    victim, other = cluster["ports"][2], cluster["ports"][0]
    pidfile = os.path.join(cluster["dir"], str(victim), "pid")
    assert s.put("down:0", value(0)) == 0
    os.kill(int(open(pidfile).read().strip()), signal.SIGKILL)
    r = redis.Redis(port=other)
    deadline = time.time() + 30
    while b"cluster_state:fail" not in r.execute_command("CLUSTER", "INFO") and time.time() < deadline:
        time.sleep(0.05)
    assert b"cluster_state:fail" in r.execute_command("CLUSTER", "INFO")
    restarted = []
    t = threading.Thread(target=lambda: restarted.append(cluster["run"]("start").returncode))
    t.start()
    try:
        bad = ride_loop(s, 30, [0], "down:")  # starts while every node answers -CLUSTERDOWN
    finally:
        t.join()
        s.close()
        r.close()
    assert restarted == [0]
    assert bad == []


def test_node_gone_map_from_another_node(cluster, monkeypatch):
    """A node killed for good and its slot given to another node (what a
    failover does, here by hand: CLUSTER SETSLOT on a live node): the store,
    whose map still names the dead node, reloads the map from a live one
    and its next put of that slot lands on the new owner."""
    import redis
    monkeypatch.setenv("MC_STORE_CLUSTER_ID", cluster["name"])
    ports = cluster["ports"]
    victim, heir = ports[2], ports[0]
    conns = [redis.Redis(port=p) for p in ports]
    s = MooncakeDistributedStore()
    try:
        for r in conns:  # the other slots of the dead node stay uncovered meanwhile
            r.execute_command("CONFIG", "SET", "cluster-require-full-coverage", "no")
        assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster["nodes"][0]) == 0
        vid = node_id(victim)
        key = next(f"gone{{{i}}}" for i in range(100000)
                   if conns[0].execute_command("CLUSTER", "KEYSLOT", f"gone{{{i}}}") in
                   {sl for a, b, *rest in conns[0].execute_command("CLUSTER", "SLOTS")
                    if rest[0][2].decode() == vid for sl in range(a, b + 1)})
        slot = conns[0].execute_command("CLUSTER", "KEYSLOT", key)
        assert s.put(key + ":before", value(1)) == 0  # the store's map now routes the slot to the victim
        os.kill(int(open(os.path.join(cluster["dir"], str(victim), "pid")).read().strip()), signal.SIGKILL)
        assert conns[0].execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(heir)) in (b"OK", "OK", True)
        assert s.put(key + ":after", value(2)) == 0
        assert s.get(key + ":after") == value(2)
        assert redis.Redis(port=heir).execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) >= 1
    finally:
        s.close()
        assert cluster["run"]("start").returncode == 0
        for r in conns:
            try:
                r.execute_command("CONFIG", "SET", "cluster-require-full-coverage", "yes")
            except redis.RedisError:
                pass
            r.close()
