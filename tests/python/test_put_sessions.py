"""Put sessions: Mooncake's batch_put_session_start / _end / _revoke and
batch_put_from_multi_buffer_ranges (libmooncake's mc_put_session_*).

vLLM's layerwise saving checks for all seven session calls (these four and
the three get-session ones) and uses them only when every one exists: an
object reserved per KV block, each layer's slice written into place when
the layer has run, the block published whole at the end. Without them it
saves each layer as an object of its own. These tests run the calls as the
engines and Mooncake's documentation do, and check what must hold: bytes
land where their offsets say in every replica, nothing is visible before
the end, a refused write changes nothing, a revoke or a close gives the
space back, and a session dies with the connection that started it.
"""
import ctypes

import numpy as np
import pytest

import mooncake.store as ms
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

INVALID = ms.INVALID_PARAMS


def new_store(server, seg=0, host="ps", **kw):
    s = MooncakeDistributedStore()
    assert s.setup(host, "P2PHANDSHAKE", seg, 16 << 20, "tcp", "", server.addr, **kw) == 0
    return s


def registered(store, n, fill=0):
    a = np.full(n, fill, dtype=np.uint8)
    assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    return a


def pending_puts(server):
    return int(server.cli("INFO", "store")["store_puts_pending"])


def until_pending(server, n, timeout=10):
    """The server's sweep gives back a closed connection's puts on its next
    pass: polled, not assumed."""
    import time
    deadline = time.time() + timeout
    while pending_puts(server) != n and time.time() < deadline:
        time.sleep(0.02)
    return pending_puts(server)


@pytest.mark.parametrize("where", ["server pool", "own segment", "two replicas"])
def test_layerwise_save_as_mooncake_documents_it(server, where):
    """Mooncake's example: 2 blocks of 4 layers, one layer's page per call,
    then a get session reads them back layer by layer."""
    s = new_store(server, seg=32 << 20 if where != "server pool" else 0, host="lw")
    cfg = None
    if where == "own segment":
        cfg = ReplicateConfig(preferred_segment=s.get_hostname())
    elif where == "two replicas":
        cfg = ReplicateConfig(replica_num=2, preferred_segment=s.get_hostname())
    page, layers = 1024 + 3, 4
    keys = [f"lw:{where}:{b}" for b in range(2)]
    src = [registered(s, page, 0) for _ in range(layers)]
    for layer in range(layers):
        src[layer][:] = np.random.default_rng(layer).integers(0, 256, page, dtype=np.uint8)
    assert s.batch_put_session_start(keys, [page * layers] * 2, cfg) == [0, 0]
    for layer in range(layers):
        assert s.is_exist(keys[0]) == 0  # nothing visible before the end
        rcs = s.batch_put_from_multi_buffer_ranges(
            keys, [[src[layer].ctypes.data]] * 2, [[page]] * 2, [[layer * page]] * 2)
        assert rcs == [page, page]
    assert s.batch_put_session_end(keys) == [0, 0]
    whole = b"".join(bytes(x) for x in src)
    assert [s.get(k) for k in keys] == [whole, whole]
    dst = [registered(s, page) for _ in range(layers)]
    assert s.batch_get_session_start(keys) == [0, 0]
    for layer in range(layers):
        rcs = s.batch_get_into_multi_buffer_ranges(keys[:1], [[dst[layer].ctypes.data]], [[page]], [[layer * page]])
        assert rcs == [page]
    assert s.batch_get_session_end(keys) == 0
    assert b"".join(bytes(x) for x in dst) == whole
    if where == "two replicas":
        # every replica was written: with this store's segment gone (and
        # its replica with it), the server's pool answers the same bytes
        assert len(s.get_replica_desc(keys[0])) == 2
        s.close()
        other = new_store(server, host="lw2")
        assert len(other.get_replica_desc(keys[0])) == 1
        assert [other.get(k) for k in keys] == [whole, whole]
        other.close()
        return
    s.close()


def test_scattered_ranges_several_buffers_per_key(server):
    """A key's call may carry several buffers at any offsets, in any order;
    bytes never written are zeros once the object is published."""
    s = new_store(server, host="sc")
    buf = registered(s, 4096)
    buf[:] = np.arange(4096) % 251
    assert s.batch_put_session_start(["sc:a"], [10000]) == [0]
    p = buf.ctypes.data
    assert s.batch_put_from_multi_buffer_ranges(["sc:a"], [[p + 100, p]], [[50, 10]], [[9950, 0]]) == [60]
    assert s.batch_put_from_multi_buffer_ranges(["sc:a"], [[p + 2000]], [[0]], [[10000]]) == [0]  # empty, at the end
    assert s.batch_put_session_end(["sc:a"]) == [0]
    want = bytearray(10000)
    want[0:10] = bytes(buf[:10])
    want[9950:10000] = bytes(buf[100:150])
    assert s.get("sc:a") == bytes(want)
    s.close()


def test_refused_calls_change_nothing(server):
    s = new_store(server, host="rf")
    buf = registered(s, 8192, 7)
    p = buf.ctypes.data
    assert s.put("rf:stored", b"x" * 100) == 0
    # start: a stored key, a size of 0, a key twice, mismatched lists
    assert s.batch_put_session_start(["rf:stored", "rf:zero"], [100, 0]) == [ms.OBJECT_ALREADY_EXISTS, INVALID]
    assert s.batch_put_session_start(["rf:k", "rf:k"], [100, 100]) == [0, INVALID]
    assert s.batch_put_session_start(["rf:k"], [100]) == [INVALID]  # a session already
    assert s.batch_put_session_start(["rf:k2"], [100, 200]) == [INVALID]
    with pytest.raises(TypeError):  # not a size_t: upstream's pybind refuses it too
        s.batch_put_session_start(["rf:k2"], ["many"])
    assert s.is_exist("rf:k2") == 0
    # a second store cannot start the same key: it is being put
    other = new_store(server, host="rf2")
    assert other.batch_put_session_start(["rf:k"], [100]) == [ms.OBJECT_ALREADY_EXISTS]
    # its writes and ends of another store's session are refused
    assert other.batch_put_from_multi_buffer_ranges(["rf:k"], [[p]], [[10]], [[0]]) == [INVALID]
    assert other.batch_put_session_end(["rf:k"]) == [INVALID]
    other.close()
    # write: past the object, across its end, unregistered memory, no session,
    # mismatched lists, a negative size -- each refused whole
    loose = np.full(64, 9, dtype=np.uint8)
    assert s.batch_put_from_multi_buffer_ranges(["rf:k"], [[p, p]], [[10, 10]], [[0, 95]]) == [INVALID]
    assert s.batch_put_from_multi_buffer_ranges(["rf:k"], [[p]], [[1]], [[100]]) == [INVALID]
    assert s.batch_put_from_multi_buffer_ranges(["rf:k"], [[loose.ctypes.data]], [[10]], [[0]]) == [INVALID]
    assert s.batch_put_from_multi_buffer_ranges(["rf:none"], [[p]], [[10]], [[0]]) == [INVALID]
    assert s.batch_put_from_multi_buffer_ranges(["rf:k"], [[p]], [[10, 1]], [[0]]) == [INVALID]
    for sizes, offs in (([[-1]], [[0]]), ([[10]], [[1 << 64]]), ([[10.0]], [[0]])):  # no size_t: TypeError
        with pytest.raises(TypeError):
            s.batch_put_from_multi_buffer_ranges(["rf:k"], [[p]], sizes, offs)
    # NumPy integers are numbers, as upstream reads them
    assert s.batch_put_from_multi_buffer_ranges(["rf:k"], [[np.uint64(p)]], [[np.int64(10)]], [[np.int32(0)]]) == [10]
    assert s.batch_put_session_end(["rf:k", "rf:k", "rf:none"]) == [0, INVALID, INVALID]
    # only the accepted write landed: the refused ones (7s at 95..100) did not
    assert s.get("rf:k") == b"\x07" * 10 + b"\x00" * 90
    assert s.batch_put_session_revoke(["rf:k"]) == [INVALID]  # ended: no session any more
    s.close()
    # a closed store: codes, no exceptions -- the README's -900 for a store
    # closed (or not set up), as every other call; these said -600, which
    # reads as a bad value (upstream's "Client is not initialized" code)
    assert s.batch_put_session_start(["rf:c"], [10]) == [ms.RPC_FAIL]
    assert s.batch_put_from_multi_buffer_ranges(["rf:c"], [[p]], [[10]], [[0]]) == [ms.RPC_FAIL]
    assert s.batch_put_session_end(["rf:c"]) == [ms.RPC_FAIL]
    assert s.batch_put_session_revoke(["rf:c"]) == [ms.RPC_FAIL]
    assert s.batch_get_session_start(["rf:c"]) == [ms.RPC_FAIL]
    assert s.batch_get_into_multi_buffer_ranges(["rf:c"], [[p]], [[10]], [[0]]) == [ms.RPC_FAIL]
    never = MooncakeDistributedStore()  # before setup: the same
    assert never.batch_put_session_start(["rf:c"], [10]) == [ms.RPC_FAIL]
    assert never.batch_get_session_start(["rf:c"]) == [ms.RPC_FAIL]


def test_revoke_and_close_give_the_space_back(fresh_server):
    srv = fresh_server
    s = new_store(srv, host="rv")
    buf = registered(s, 4096, 1)
    used0 = int(srv.cli("INFO", "memory")["used_memory_pool"]) if "used_memory_pool" in srv.cli("INFO", "memory") \
        else None
    assert s.batch_put_session_start(["rv:a", "rv:b"], [1 << 20, 1 << 20]) == [0, 0]
    assert pending_puts(srv) == 2
    assert s.batch_put_from_multi_buffer_ranges(["rv:a"], [[buf.ctypes.data]], [[4096]], [[0]]) == [4096]
    assert s.batch_put_session_revoke(["rv:a", "rv:zz"]) == [0, INVALID]
    assert pending_puts(srv) == 1
    assert s.is_exist("rv:a") == 0
    # the key is free again, for anyone
    other = new_store(srv, host="rv2")
    assert other.put("rv:a", b"new") == 0 and other.get("rv:a") == b"new"
    # close revokes what is left: at once, not after put-timeout
    s.close()
    assert until_pending(srv, 0) == 0
    assert other.batch_put_session_start(["rv:b"], [10]) == [0]
    assert other.batch_put_session_end(["rv:b"]) == [0]
    assert other.get("rv:b") == b"\x00" * 10
    other.close()
    if used0 is not None:
        assert int(srv.cli("INFO", "memory")["used_memory_pool"]) <= used0 + (1 << 20)


def test_a_session_dies_with_its_connection(fresh_server):
    """The server gives a put back when the connection that started it
    closes; the session must then refuse writes and its end (nothing of it
    is ever published), and a revoke is still fine."""
    srv = fresh_server
    s = new_store(srv, host="dc")
    buf = registered(s, 4096, 3)
    assert s.batch_put_session_start(["dc:a", "dc:b"], [4096, 4096]) == [0, 0]
    assert s.batch_put_from_multi_buffer_ranges(["dc:a"], [[buf.ctypes.data]], [[4096]], [[0]]) == [4096]
    srv.cli("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert until_pending(srv, 0) == 0
    assert s.batch_put_from_multi_buffer_ranges(["dc:a"], [[buf.ctypes.data]], [[4096]], [[0]]) == [ms.RPC_FAIL]
    assert s.batch_put_session_end(["dc:a"]) == [ms.RPC_FAIL]
    assert s.batch_put_session_revoke(["dc:b"]) == [0]
    assert s.is_exist("dc:a") == 0 and s.is_exist("dc:b") == 0
    # the store itself rides on: a new session works
    assert s.batch_put_session_start(["dc:a"], [4096]) == [0]
    assert s.batch_put_from_multi_buffer_ranges(["dc:a"], [[buf.ctypes.data]], [[4096]], [[0]]) == [4096]
    assert s.batch_put_session_end(["dc:a"]) == [0]
    assert s.get("dc:a") == b"\x03" * 4096
    s.close()


def test_a_tenants_sessions_are_under_its_prefix(fresh_server):
    srv = fresh_server
    srv.cli("ACL", "SETUSER", "pt", "on", ">pt-pw", "~pt:*", "+@all", "-@dangerous")
    t = new_store(srv, host="pt", tenant_id="pt", password="pt-pw")
    buf = registered(t, 100, 5)
    assert t.batch_put_session_start(["k"], [100]) == [0]
    assert t.batch_put_from_multi_buffer_ranges(["k"], [[buf.ctypes.data]], [[100]], [[0]]) == [100]
    assert t.batch_put_session_end(["k"]) == [0]
    assert t.get("k") == b"\x05" * 100
    assert srv.cli("EXISTS", "pt:k") == 1 and srv.cli("EXISTS", "k") == 0
    t.close()


def test_sessions_from_several_threads(server):
    """Each thread's sessions and writes are its own; they share the
    store's session connection."""
    import threading
    s = new_store(server, seg=16 << 20, host="th")
    n, size = 8, 64 << 10
    bufs = [registered(s, size, i + 1) for i in range(n)]
    errors = []

    def run(i):
        try:
            k = f"th:{i}"
            assert s.batch_put_session_start([k], [size]) == [0]
            for part in range(4):
                q = size // 4
                r = s.batch_put_from_multi_buffer_ranges([k], [[bufs[i].ctypes.data + part * q]], [[q]], [[part * q]])
                assert r == [q], r
            assert s.batch_put_session_end([k]) == [0]
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert [s.get(f"th:{i}") for i in range(n)] == [bytes([i + 1]) * size for i in range(n)]
    s.close()


def test_device_style_pointers_are_checked_before_use(server):
    """A pointer the binding cannot vouch for (not registered, not mapped
    readable) is refused before anything reads it."""
    s = new_store(server, host="dv")
    assert s.batch_put_session_start(["dv:a"], [64]) == [0]
    bogus = ctypes.addressof(ctypes.c_char.from_buffer(bytearray(1)))
    assert s.batch_put_from_multi_buffer_ranges(["dv:a"], [[bogus]], [[64]], [[0]]) == [INVALID]
    assert s.batch_put_from_multi_buffer_ranges(["dv:a"], [[0]], [[64]], [[0]]) == [INVALID]
    assert s.batch_put_session_revoke(["dv:a"]) == [0]
    s.close()
