"""The same APIs against a three-node cluster (utils/create-cluster on free
ports, with its own etcd): any node's address works, keys spread over every
shard, batches and prefix lookups span slots, and a store that contributes
memory gets a slice on every primary. Skipped without etcd."""
import os
import shutil
import socket
import subprocess
import tempfile

import numpy as np
import pytest

import mooncake
from mooncake.store import MooncakeDistributedStore

from conftest import ROOT, SERVER, child_env, free_port

SCRIPT = os.path.join(ROOT, "utils", "create-cluster")


def free_run(n):
    """A first port with n free ports from it, and their cluster bus ports
    (port + 10000) free too: below the kernel's ephemeral range."""
    import random
    for _ in range(200):
        base = random.randint(20000, 30000)
        ok = True
        for p in [*range(base, base + n), *range(base + 10000, base + 10000 + n)]:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="module")
def cluster():
    if not shutil.which("etcd") or not shutil.which("redis-cli"):
        pytest.skip("etcd or redis-cli is not installed (make deps-test installs etcd-server, redis-tools)")
    base = free_run(3)
    d = tempfile.mkdtemp(prefix="pycluster-")
    env = child_env(KIND="mooncake", NODES="3", PORT=str(base), DIR=os.path.join(d, "data"), BIN=SERVER,
               NAME=f"py-{os.getpid()}", ETCD_PORT=str(free_port()), ETCD_PEER_PORT=str(free_port()),
               SEGMENT_SIZE="128mb", TIMEOUT="2000")

    def run(cmd):
        return subprocess.run([SCRIPT, cmd], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=120)
    try:
        for cmd in ("start", "create"):
            r = run(cmd)
            if r.returncode != 0:
                pytest.fail(f"create-cluster {cmd}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        yield [f"127.0.0.1:{base + i}" for i in range(3)]
    finally:
        run("stop")
        run("clean")
        shutil.rmtree(d, ignore_errors=True)


def owners(addr, keys):
    import redis
    host, port = addr.split(":")
    r = redis.Redis(host=host, port=int(port))
    try:
        return {r.execute_command("CLUSTER", "KEYSLOT", k) for k in keys}
    finally:
        r.close()


def test_any_node_and_every_shard(cluster):
    keys = [f"cl:{i}" for i in range(60)]
    vals = [os.urandom(1000 + i) for i in range(60)]
    with mooncake.connect(cluster[1]) as s:
        assert s.batch_put(keys, vals) == [None] * 60
    assert len(owners(cluster[0], keys)) > 30          # many slots, so every shard
    with mooncake.connect(cluster[2]) as s:            # another node reads them all
        bufs = [bytearray(len(v)) for v in vals]
        assert s.batch_get_into(keys, bufs) == [len(v) for v in vals]
        assert [bytes(b) for b in bufs] == vals
        assert s.get("cl:7") == vals[7]
        # the keys are spread: each node's DBSIZE holds a share
        import redis
        sizes = [redis.Redis(port=int(a.split(":")[1])).dbsize() for a in cluster]
        assert all(n > 0 for n in sizes) and sum(sizes) >= 60


def test_prefix_lookup_across_slots(cluster):
    keys = [f"pfx:{i}" for i in range(20)]
    with mooncake.connect(cluster[0]) as s:
        s.batch_put(keys[:12], [b"x" * 100] * 12)
        assert s.prefix_length(keys) == 12
        s.remove(keys[5])
        assert s.prefix_length(keys) == 5
        assert s.exists_many(keys[4:7]) == [True, False, True]


def test_scatter_gather_and_async_across_slots(cluster):
    with mooncake.connect(cluster[2]) as s:
        keys = [f"sg:{i}" for i in range(16)]
        k = [np.random.default_rng(i).integers(0, 255, 4096, dtype=np.uint8) for i in range(16)]
        v = [np.random.default_rng(100 + i).integers(0, 255, 4096, dtype=np.uint8) for i in range(16)]
        assert s.batch_put_async(keys, [[a, b] for a, b in zip(k, v)]).result() == [None] * 16
        ok, ov = [np.zeros(4096, np.uint8) for _ in keys], [np.zeros(4096, np.uint8) for _ in keys]
        assert s.batch_get_into_async(keys, [[a, b] for a, b in zip(ok, ov)]).result() == [8192] * 16
        assert all(np.array_equal(a, b) for a, b in zip(k + v, ok + ov))


def test_mooncake_class_with_a_segment(cluster):
    st = MooncakeDistributedStore()
    assert st.setup("pyhost", "P2PHANDSHAKE", 48 << 20, 0, "tcp", "", cluster[1]) == 0
    try:
        buf = np.arange(1 << 20, dtype=np.uint8)
        assert st.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        keys = [f"seg:{i}" for i in range(30)]
        ptrs = [buf.ctypes.data + i * 4096 for i in range(30)]
        from mooncake.store import ReplicateConfig
        cfg = ReplicateConfig(preferred_segment=st.get_hostname())
        assert st.batch_put_from(keys, ptrs, [4096] * 30, cfg) == [0] * 30
        out = np.zeros(30 * 4096, np.uint8)
        assert st.register_buffer(out.ctypes.data, out.nbytes) == 0
        assert st.batch_get_into(keys, [out.ctypes.data + i * 4096 for i in range(30)], [4096] * 30) == [4096] * 30
        assert np.array_equal(out, buf[: 30 * 4096])
        assert st.batch_is_exist(keys + ["seg:none"]) == [1] * 30 + [0]
        assert st.remove_all() >= 30
    finally:
        st.close()


def test_remove_by_regex_walks_every_shard(cluster):
    """remove_by_regex of a pattern that is not a list of names looks at
    every key of every primary (mc_scan_keys), so keys in all three shards
    go, and only those that match."""
    st = MooncakeDistributedStore()
    assert st.setup("rx", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster[2]) == 0
    try:
        gone = [f"rx:{i}:drop" for i in range(40)]
        kept = [f"rx:{i}:keep" for i in range(40)]
        for k in gone + kept:
            assert st.put(k, k.encode()) == 0
        assert len(owners(cluster[0], gone)) > 20          # spread over the shards
        assert st.remove_by_regex(r"^rx:\d+:drop$") == 40
        assert st.batch_is_exist(gone + kept) == [0] * 40 + [1] * 40
        assert st.remove_by_regex(r"^(?:rx:1:keep|rx:2:keep)$") == 2
        assert st.remove_by_regex("keep") == 38
    finally:
        st.close()
