"""The drop-in class, mooncake.store.MooncakeDistributedStore, called the way
Mooncake's Python API reference and the engines' connectors call it: the
documentation's examples (hello world, NumPy get/put, buffer registration,
the zero-copy workflow) with only the master address changed to the test
server, then every method's return convention and error code."""
import json

import numpy as np
import pytest

from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction
import mooncake.store as ms

NO_SPACE, NOT_FOUND, INVALID, OVERFLOW = -200, -704, -600, -10


def setup_store(addr, segment=512 * 1024 * 1024, metadata="http://localhost:8080/metadata"):
    store = MooncakeDistributedStore()
    rc = store.setup("localhost", metadata, segment, 128 * 1024 * 1024, "tcp", "", addr)
    assert rc == 0
    return store


# -- the reference's examples --------------------------------------------------

def test_doc_hello_world(server):
    store = setup_store(server.addr)
    store.put("hello_key", b"Hello, Mooncake Store!")
    assert store.get("hello_key").decode() == "Hello, Mooncake Store!"
    store.close()


def test_doc_p2p_hello_world(server):
    store = setup_store(server.addr, metadata="P2PHANDSHAKE")
    store.put("hello_key", b"Hello, Mooncake Store!")
    assert store.get("hello_key").decode() == "Hello, Mooncake Store!"
    store.close()


def test_doc_numpy_get_put(server):
    store = setup_store(server.addr)
    store.put("config", b'{"model": "llama-7b", "temperature": 0.7}')
    model_weights = np.random.randn(1000, 1000).astype(np.float32)
    store.put("weights", model_weights.tobytes())
    store.put("cache", b"some serialized cache data")
    config = json.loads(store.get("config").decode())
    weights = np.frombuffer(store.get("weights"), dtype=np.float32).reshape(1000, 1000)
    assert config["model"] == "llama-7b"
    assert np.array_equal(weights, model_weights)
    assert bool(store.is_exist("cache")) is True
    store.close()


def test_doc_buffer_registration(server):
    store = setup_store(server.addr)
    buffer = np.zeros(100 * 1024 * 1024, dtype=np.uint8)
    buffer_ptr = buffer.ctypes.data
    assert store.register_buffer(buffer_ptr, buffer.nbytes) == 0
    assert store.unregister_buffer(buffer_ptr) == 0
    store.close()


def test_doc_zero_copy_workflow(server):
    store = setup_store(server.addr, segment=512 * 1024 * 1024)
    original_data = np.random.randn(1000, 1000).astype(np.float32)
    buffer_ptr = original_data.ctypes.data
    size = original_data.nbytes
    assert store.register_buffer(buffer_ptr, size) == 0
    assert store.put_from("large_tensor", buffer_ptr, size) == 0
    retrieved_data = np.empty((1000, 1000), dtype=np.float32)
    recv_buffer_ptr = retrieved_data.ctypes.data
    recv_size = retrieved_data.nbytes
    assert store.register_buffer(recv_buffer_ptr, recv_size) == 0
    bytes_read = store.get_into("large_tensor", recv_buffer_ptr, recv_size)
    assert bytes_read == size
    assert np.array_equal(original_data, retrieved_data)
    store.unregister_buffer(buffer_ptr)
    store.unregister_buffer(recv_buffer_ptr)
    store.close()


# -- return conventions ----------------------------------------------------------

def test_put_get_conventions(mstore):
    assert mstore.put("k", b"v1") == 0
    assert mstore.put("k", b"v2") == 0          # exists: succeeds, value unchanged
    assert mstore.get("k") == b"v1"
    assert mstore.upsert("k", b"v3") == 0      # upsert replaces
    assert mstore.get("k") == b"v3"
    assert mstore.get("missing") == b""
    assert mstore.get_size("k") == 2
    assert mstore.get_size("missing") == NOT_FOUND
    assert mstore.is_exist("k") == 1 and mstore.is_exist("missing") == 0
    assert mstore.batch_is_exist(["k", "missing", "k"]) == [1, 0, 1]
    assert mstore.remove("k") == 0
    assert mstore.remove("k") == NOT_FOUND
    assert mstore.put_parts("parts", b"ab", b"cd", bytearray(b"ef")) == 0
    assert mstore.get("parts") == b"abcdef"


def test_batch_conventions(mstore):
    keys = [f"b{i}" for i in range(10)]
    vals = [bytes([i]) * (i + 1) * 1000 for i in range(10)]
    assert mstore.put_batch(keys, vals) == 0
    assert mstore.get_batch(keys + ["nope"]) == vals + [b""]
    assert mstore.upsert_batch(keys[:2], [b"x", b"y"]) == 0
    assert mstore.get_batch(keys[:2]) == [b"x", b"y"]
    assert mstore.batch_remove(keys[:2] + ["nope"]) == [0, 0, NOT_FOUND]
    assert mstore.remove_all() == 8
    assert mstore.batch_is_exist(keys) == [0] * 10


def test_zero_copy_batches_and_codes(mstore):
    buf = np.zeros(8 << 20, dtype=np.uint8)
    base = buf.ctypes.data
    assert mstore.register_buffer(base, buf.nbytes) == 0
    rng = np.random.default_rng(7)
    buf[: 4 << 20] = rng.integers(0, 256, 4 << 20, dtype=np.uint8)
    keys = [f"z{i}" for i in range(8)]
    ptrs = [base + i * (512 << 10) for i in range(8)]
    sizes = [512 << 10] * 8
    assert mstore.batch_put_from(keys, ptrs, sizes) == [0] * 8
    dst = [base + (4 << 20) + i * (512 << 10) for i in range(8)]
    assert mstore.batch_get_into(keys, dst, sizes) == sizes
    assert np.array_equal(buf[: 4 << 20], buf[4 << 20:])
    # a miss, a buffer too small, an unregistered pointer: one code each
    res = mstore.batch_get_into(["nope", "z0", "z1"], [dst[0], dst[0], 0x1000], [100, 100, 512 << 10])
    # (a buffer too small is INVALID_PARAMS in Mooncake's client: "User buffer too small")
    assert res == [NOT_FOUND, INVALID, INVALID]
    assert mstore.get_into("z0", dst[0], 100) == INVALID
    assert mstore.put_from("bad", 0x1000, 100) == INVALID
    assert mstore.put_from("bad", base, buf.nbytes + 1) == INVALID
    assert mstore.put_from("bad", base, 0) == INVALID
    assert mstore.is_exist("bad") == 0
    assert mstore.register_buffer(0x1000, 4096) < 0
    assert mstore.unregister_buffer(base) == 0
    assert mstore.put_from("z9", base, 100) == INVALID   # no longer registered


def test_size_rules_are_invalid_params(server, mstore):
    """A key past max-key-size or a value past max-object-size is a bad
    argument (INVALID_PARAMS), not INTERNAL_ERROR: the server's refusal is
    Redis's ERR word, which the library maps by its documented text."""
    buf = np.zeros(1 << 16, dtype=np.uint8)
    base = buf.ctypes.data
    assert mstore.register_buffer(base, buf.nbytes) == 0
    long_key = "k" * 5000  # max-key-size is 4096 by default
    assert mstore.put(long_key, b"v") == INVALID
    assert mstore.put_batch([long_key, "short"], [b"1", b"2"]) == INVALID
    assert mstore.put_from(long_key, base, 100) == INVALID
    assert mstore.batch_put_from([long_key, "ok1"], [base, base], [100, 100]) == [INVALID, 0]
    assert mstore.is_exist(long_key) == 0
    old = server.cli("CONFIG", "GET", "max-object-size")[1]
    server.cli("CONFIG", "SET", "max-object-size", "1000")
    try:
        assert mstore.put("big", b"x" * 2000) == INVALID
        assert mstore.put_from("big", base, 2000) == INVALID
        assert mstore.put("small", b"x" * 500) == 0
    finally:
        server.cli("CONFIG", "SET", "max-object-size", old)
    assert mstore.is_exist("big") == 0
    assert mstore.unregister_buffer(base) == 0


def test_multi_buffer_objects(mstore):
    buf = np.zeros(1 << 20, dtype=np.uint8)
    base = buf.ctypes.data
    assert mstore.register_buffer(base, buf.nbytes) == 0
    buf[:4096] = np.arange(4096) % 251
    # K at [0, 1000), V at [2000, 3000): one object each
    keys = ["blk0", "blk1"]
    ptrs = [[base, base + 2000], [base + 1000, base + 3000]]
    sizes = [[1000, 1000], [1000, 1096]]
    assert mstore.batch_put_from_multi_buffers(keys, ptrs, sizes, ReplicateConfig()) == [0, 0]
    assert mstore.get_size("blk0") == 2000 and mstore.get_size("blk1") == 2096
    assert mstore.get("blk0") == bytes(buf[:1000]) + bytes(buf[2000:3000])
    out = [[base + 10000, base + 20000], [base + 30000, base + 40000]]
    assert mstore.batch_get_into_multi_buffers(keys, out, sizes) == [2000, 2096]
    assert np.array_equal(buf[10000:11000], buf[:1000])
    assert np.array_equal(buf[20000:21000], buf[2000:3000])
    assert np.array_equal(buf[40000:41096], buf[3000:4096])
    # shapes that do not match
    assert mstore.batch_put_from_multi_buffers(["x"], [[base]], [[1, 2]]) == [INVALID]


def test_replicate_config(server):
    store = setup_store(server.addr, segment=64 << 20)
    try:
        cfg = ReplicateConfig()
        assert (cfg.replica_num, cfg.with_soft_pin, cfg.with_hard_pin, cfg.preferred_segment) == (1, False, False, "")
        cfg.replica_num = 2
        cfg.preferred_segment = store.get_hostname()
        assert store.put("two", b"x" * 100, cfg) == 0
        info = server.cli("OBJECT.INFO", "two")
        info = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
        assert len(info[b"replicas"]) == 2
        pin = ReplicateConfig()
        pin.with_soft_pin = True
        assert store.put("soft", b"x", pin) == 0
        hard = ReplicateConfig(with_hard_pin=True)
        assert store.put("hard", b"x", hard) == 0
        info = server.cli("OBJECT.INFO", "hard")
        info = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
        assert info[b"pin"] == b"hard"
        with pytest.raises(TypeError):
            ReplicateConfig().soft_pin_ttl_ms = -1
        with pytest.raises(TypeError):
            ReplicateConfig().soft_pin_ttl_ms = "10"
        c = ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=5000)
        assert store.put("ttl", b"x", c) == 0
    finally:
        store.close()


def test_preferred_own_hostname_without_segment(mstore):
    # LMCache passes get_hostname() as preferred_segment even when it mounts nothing.
    cfg = ReplicateConfig(replica_num=1, preferred_segment=mstore.get_hostname())
    assert mstore.put("lm", b"v", cfg) == 0


def test_setup_forms(server, refused_addr):
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "h1", "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": "16MB", "local_buffer_size": "16 MB",
                    "protocol": "tcp", "rdma_devices": "", "master_server_addr": server.addr}) == 0
    # Mooncake's rule: a hostname without a port gets the port of this
    # client's segment listener, so ranks sharing a hostname differ.
    host, port = s.get_hostname().rsplit(":", 1)
    assert host == "h1" and 0 < int(port) < 65536
    assert s.get_hostname() in server.cli("SEGMENTS").__repr__()
    assert s.put("d", b"1") == 0
    s.close()
    # close then setup again on the same object; no segment: the name as given
    assert s.setup("h2", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", server.addr) == 0
    assert s.get_hostname() == "h2"
    assert s.put("d2", b"2") == 0 and s.get("d2") == b"2"
    s.close()
    # local_buffer_size 0: the staged calls have no room (Mooncake answers
    # INVALID_PARAMS for a put and empty bytes for a get); zero-copy calls work
    assert s.setup("h3", "P2PHANDSHAKE", 0, 0, "tcp", "", server.addr) == 0
    assert s.put("d3", b"3") == ms.INVALID_PARAMS
    assert s.get("d2") == b""
    buf = np.frombuffer(bytearray(b"zc"), dtype=np.uint8)
    assert s.register_buffer(buf.ctypes.data, 2) == 0
    assert s.put_from("d3", buf.ctypes.data, 2) == 0
    assert s.get_into("d2", buf.ctypes.data, 2) == 1 and bytes(buf[:1]) == b"2"
    s.close()
    # a hostname with its own port is used as it is
    assert s.setup("h4:4321", "P2PHANDSHAKE", 1 << 20, 1 << 20, "tcp", "", server.addr) == 0
    assert s.get_hostname() == "h4:4321"
    s.close()
    assert s.setup({"global_segment_size": "50%", "master_server_addr": server.addr}) < 0
    assert MooncakeDistributedStore().setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", refused_addr) < 0


def test_closed_store_codes(server):
    s = setup_store(server.addr, segment=0)
    s.close()
    assert s.put("k", b"v") < 0
    assert s.get("k") == b""
    assert s.is_exist("k") < 0
    assert s.batch_put_from(["a"], [0x1000], [1]) == [ms.RPC_FAIL]


def test_store_not_set_up_codes():
    # The README: -900 "before setup or after close". The staged puts (bytes
    # through the local buffer) answered -600, INVALID_PARAMS, before setup:
    # the buffer they found too small was the one setup had not made yet, so
    # a forgotten setup read as a bad value; the other calls said -900.
    s = MooncakeDistributedStore()
    assert s.put("k", b"v") == ms.RPC_FAIL
    assert s.upsert("k", b"v") == ms.RPC_FAIL
    assert s.put_parts("k", b"v", b"w") == ms.RPC_FAIL
    assert s.put_batch(["k", "l"], [b"v", b"w"]) == ms.RPC_FAIL  # one code, as upstream's
    assert s.upsert_batch(["k"], [b"v"]) == ms.RPC_FAIL
    assert s.is_exist("k") == ms.RPC_FAIL and s.get_size("k") == ms.RPC_FAIL
    # argument types are still checked first, as on a set-up store
    with pytest.raises(TypeError):
        s.put(1, b"v")


def test_segment_is_used(server):
    # a store that contributes memory becomes a place for replicas
    s = setup_store(server.addr, segment=32 << 20)
    try:
        cfg = ReplicateConfig(preferred_segment=s.get_hostname())
        assert s.put("local", b"z" * 4096, cfg) == 0
        assert s.get("local") == b"z" * 4096
    finally:
        s.close()
    # its segment went away with it: the object had its only replica there
    t = setup_store(server.addr, segment=0)
    assert t.get("local") == b""
    t.close()


def test_async_and_prefix(mstore):
    buf = np.arange(1 << 20, dtype=np.uint8)
    base = buf.ctypes.data
    assert mstore.register_buffer(base, buf.nbytes) == 0
    keys = [f"p{i}" for i in range(16)]
    fut = mstore.batch_put_from_async(keys[:10], [base + i * 4096 for i in range(10)], [4096] * 10)
    assert fut.result() == [0] * 10
    assert mstore.batch_prefix_exist(keys) == 10
    hits = mstore.batch_is_exist(keys)
    assert hits == [1] * 10 + [0] * 6
    out = np.zeros(10 * 4096, dtype=np.uint8)
    assert mstore.register_buffer(out.ctypes.data, out.nbytes) == 0
    fut = mstore.batch_get_into_async(keys[:10], [out.ctypes.data + i * 4096 for i in range(10)], [4096] * 10)
    assert fut.result() == [4096] * 10
    assert np.array_equal(out, buf[: 10 * 4096])
