"""The rest of Mooncake's store API the engines and Mooncake's own wheel
tests reach for, with upstream's arguments, defaults and codes: setup in all
its forms (the engine argument, keywords, tenant_id), process-unique names,
get_buffer/batch_get_buffer and the local buffer they draw on, setup_dummy
with MooncakeHostMemAllocator, remove_all(force), bind_to_numa_node, soft
pins and preferred segments as preferences."""
import logging

import numpy as np
import pytest

import mooncake.store as ms
from mooncake.store import (BufferHandle, MooncakeDistributedStore, MooncakeHostMemAllocator, ReplicateConfig,
                            SoftPinAction, bind_to_numa_node)

INVALID, NOT_FOUND = ms.INVALID_PARAMS, ms.OBJECT_NOT_FOUND


def new_store(server, seg=0, local=16 << 20, host="h", **kw):
    s = MooncakeDistributedStore()
    assert s.setup(host, "P2PHANDSHAKE", seg, local, "tcp", "", server.addr, **kw) == 0
    return s


# -- setup ------------------------------------------------------------------------

def test_setup_positional_engine_and_keywords(server):
    s = MooncakeDistributedStore()
    # SGLang: eight positional arguments, the eighth a TransferEngine or None
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 1 << 20, 16 << 20, "tcp", "", server.addr, None) == 0
    s.close()
    # every keyword upstream has, by name
    assert s.setup(local_hostname="h", metadata_server="P2PHANDSHAKE", global_segment_size=0,
                   local_buffer_size=1 << 20, protocol="tcp", rdma_devices="", master_server_addr=server.addr,
                   engine=object(), enable_ssd_offload=False, ssd_offload_path="/nonexistent",
                   tenant_id="default", enable_client_http_server=False, client_http_port=9300) == 0
    assert s.put("kw", b"1") == 0
    s.close()


def test_the_empty_key_is_answered_as_upstreams_master_answers_it(server):
    # Upstream's master refuses the empty key only at PutStart
    # (INVALID_PARAMS); a read, an existence check or a remove of it finds
    # no such object. Here libmooncake's refusal of the argument came
    # through: get/is_exist/remove/get_size raised ValueError, and a batch
    # with one empty key failed every key with INVALID_PARAMS.
    s = new_store(server)
    buf = np.zeros(64, np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert s.put("", b"x") == INVALID
    assert s.put("ek", b"value") == 0
    assert s.get("") == b""
    assert s.get_buffer("") is None
    assert s.is_exist("") == 0
    assert s.remove("") == NOT_FOUND
    assert s.get_size("") == NOT_FOUND
    assert s.get_into("", buf.ctypes.data, 64) == NOT_FOUND
    # in a batch, the other keys are answered as without it
    assert s.get_batch(["", "ek"]) == [b"", b"value"]
    hs = s.batch_get_buffer(["ek", ""])
    assert hs[1] is None and bytes(hs[0]) == b"value"
    assert s.batch_is_exist(["", "ek"]) == [0, 1]
    assert s.batch_get_into(["", "ek"], [buf.ctypes.data, buf.ctypes.data + 32], [32, 32]) == [NOT_FOUND, 5]
    assert bytes(buf[32:37]) == b"value"
    assert s.batch_remove(["", "ek"]) == [NOT_FOUND, 0]
    assert s.is_exist("ek") == 0
    s.close()


def test_setup_misuse_is_a_type_error(server):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError):
        s.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "")  # master_server_addr missing
    with pytest.raises(TypeError):
        s.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", server.addr, None, bogus=1)
    # No SSD tier here: answered as a Mooncake without the keyword, which is
    # what SGLang's setup loop catches to retry without it
    with pytest.raises(TypeError, match="enable_ssd_offload"):
        s.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", server.addr, None, enable_ssd_offload=True)
    assert s.setup({"master_server_addr": server.addr, "enable_ssd_offload": "true"}) == INVALID
    assert s.setup("", "P2PHANDSHAKE", 0, 0, "tcp", "", server.addr) == INVALID
    with pytest.raises(TypeError):  # no size_t, as upstream's pybind refuses it
        s.setup("h", "P2PHANDSHAKE", -1, 0, "tcp", "", server.addr)


def test_ranks_sharing_a_hostname_get_names_of_their_own(server):
    stores = [new_store(server, seg=4 << 20, host="node7") for _ in range(3)]
    names = [s.get_hostname() for s in stores]
    assert len(set(names)) == 3 and all(n.startswith("node7:") for n in names)
    assert all(12300 <= int(n.split(":")[1]) <= 14300 for n in names)  # Mooncake's client port range
    segs = server.cli("SEGMENTS")
    for n in names:
        assert n.encode() in repr(segs).encode()
    # each name leads to its own memory: a preferred put lands there
    for i, s in enumerate(stores):
        cfg = ReplicateConfig(preferred_segment=names[i])
        assert s.put(f"own{i}", bytes([i]) * 4096, cfg) == 0
        info = server.cli("OBJECT.INFO", f"own{i}")
        seg_ids = [r[0] for r in dict(zip(info[::2], info[1::2]))[b"replicas"]]
        seginfo = server.cli("SEGMENT.INFO", names[i])
        assert dict(zip(seginfo[::2], seginfo[1::2]))[b"id"] in seg_ids
    for s in stores:
        s.close()
    # an explicit port is taken as it is
    a = new_store(server, seg=4 << 20, host="node7:4000")
    assert a.get_hostname() == "node7:4000"
    a.close()


def test_client_port_range_from_the_environment(server, monkeypatch):
    import socket
    held = []
    for _ in range(100):  # two neighbouring free ports, held by this test from the start
        a, b = socket.socket(), socket.socket()
        a.bind(("127.0.0.1", 0))
        lo = a.getsockname()[1]
        try:
            b.bind(("127.0.0.1", lo + 1))
        except OSError:
            a.close()
            b.close()
            continue
        held = [a, b]
        break
    assert held, "no two neighbouring free ports in 100 tries"
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", str(lo))
    monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", str(lo + 1))
    s = MooncakeDistributedStore()
    # every port of the range taken: the mount fails, and setup says so
    assert s.setup("pr", "P2PHANDSHAKE", 1 << 20, 1 << 20, "tcp", "", server.addr) == ms.RPC_FAIL
    held.pop().close()  # lo + 1 is free again
    assert s.setup("pr", "P2PHANDSHAKE", 1 << 20, 1 << 20, "tcp", "", server.addr) == 0
    assert s.get_hostname() == f"pr:{lo + 1}"
    s.close()
    held.pop().close()


def test_tenant_id_maps_onto_the_servers_tenants(fresh_server):
    srv = fresh_server
    for t in ("ta", "tb"):
        srv.cli("ACL", "SETUSER", t, "on", f">{t}-pw", f"~{t}:*", "+@all", "-@dangerous", "+remove.all")
    a = MooncakeDistributedStore()
    assert a.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", srv.addr, tenant_id="ta", password="ta-pw") == 0
    b = MooncakeDistributedStore()
    assert b.setup({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE", "global_segment_size": 0,
                    "master_server_addr": srv.addr, "tenant_id": "tb", "password": "tb-pw"}) == 0
    # the same key names, two tenants: two objects, each seen only by its owner
    assert a.put("k", b"A") == 0 and b.put("k", b"B") == 0
    assert a.get("k") == b"A" and b.get("k") == b"B"
    assert sorted(srv.cli("KEYS", "*")) == [b"ta:k", b"tb:k"]
    assert a.batch_is_exist(["k", "other"]) == [1, 0]
    # a tenant's remove_all removes its own objects only
    assert a.remove_all(force=True) == 1
    assert a.get("k") == b"" and b.get("k") == b"B"
    a.close()
    b.close()
    # isolation is never dropped silently: an unknown tenant, a wrong
    # password or a malformed id fails setup
    c = MooncakeDistributedStore()
    assert c.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", srv.addr, tenant_id="nobody", password="x") < 0
    assert c.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", srv.addr, tenant_id="ta", password="wrong") < 0
    assert c.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", srv.addr, tenant_id="t a", password="x") == INVALID
    assert c.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", srv.addr, tenant_id="ta", password="ta-pw",
                   user="tb") == INVALID


# -- get_buffer and the local buffer ---------------------------------------------

def test_get_buffer_handles(server):
    s = new_store(server, local=1 << 20)
    val = bytes(range(256)) * 64
    assert s.put("gb", val) == 0
    h = s.get_buffer("gb")
    assert isinstance(h, BufferHandle)
    assert len(h) == h.size() == len(val) and h.ptr() != 0
    assert bytes(memoryview(h)) == val
    assert np.array_equal(np.frombuffer(h, dtype=np.uint8), np.frombuffer(val, dtype=np.uint8))
    torch = pytest.importorskip("torch")
    t = torch.frombuffer(h, dtype=torch.uint8, offset=16, count=32)
    assert bytes(t.numpy()) == val[16:48]
    ptr = h.ptr()
    del t
    assert h.ptr() == ptr  # its address does not move while it lives
    assert s.get_buffer("missing") is None
    hs = s.batch_get_buffer(["gb", "missing", "gb"])
    assert hs[1] is None and bytes(hs[0]) == bytes(hs[2]) == val
    s.close()


def test_local_buffer_bounds_staged_calls(server):
    s = new_store(server, local=64 << 10)
    assert s.put("small", b"a" * (40 << 10)) == 0
    # larger than the local buffer: Mooncake cannot stage it
    assert s.put("big", b"b" * (65 << 10)) == INVALID
    assert s.put_parts("big", b"b" * (33 << 10), b"c" * (32 << 10)) == INVALID
    assert s.put_batch(["x", "y"], [b"1" * (40 << 10), b"2" * (40 << 10)]) == INVALID
    # live handles hold their share: a second 40 KiB handle does not fit
    h1 = s.get_buffer("small")
    assert h1 is not None
    assert s.get_buffer("small") is None
    assert s.get("small") == b""
    del h1  # freed: its share is back
    assert s.get("small") == b"a" * (40 << 10)
    # zero-copy calls use none of it
    buf = np.zeros(256 << 10, dtype=np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert s.put_from("zc", buf.ctypes.data, buf.nbytes) == 0
    assert s.get_into("zc", buf.ctypes.data, buf.nbytes) == buf.nbytes
    s.close()


def test_get_buffer_sizes_vary(server):
    # handles are first reserved at the last batch's largest size: smaller
    # objects give the rest back at once, larger ones are sized and read again
    s = new_store(server, local=2 << 20)
    big, bigger = b"B" * (1500 << 10), b"C" * (1800 << 10)
    small = [bytes([i]) * (4 << 10) for i in range(10)]
    assert s.put("vs:big", big) == 0 and s.put("vs:bigger", bigger) == 0
    assert s.put_batch([f"vs:s{i}" for i in range(10)], small) == 0
    h = s.get_buffer("vs:big")
    assert bytes(h) == big
    del h
    hs = s.batch_get_buffer([f"vs:s{i}" for i in range(10)])  # 10 windows of 1.5 MiB would not fit
    assert [bytes(x) for x in hs] == small
    g = s.get_buffer("vs:bigger")                              # over the hint: sized, read again
    assert g is not None and bytes(g) == bigger
    assert s.get_buffer("vs:big") is None                      # 1.8 MiB + 40 KiB held: no room
    del g
    assert bytes(s.get_buffer("vs:big")) == big
    del hs
    s.close()


# -- standalone mode ----------------------------------------------------------------

def test_setup_dummy_with_host_mem_allocator(server, refused_addr):
    alloc = MooncakeHostMemAllocator()
    size = 1 << 20
    ptr = alloc.alloc(size)
    assert ptr % 4096 == 0
    s = MooncakeDistributedStore()
    assert s.setup_dummy(size, 16 << 20, server.addr) == 0
    assert s.register_buffer(ptr, size) == 0
    import ctypes
    view = np.frombuffer((ctypes.c_byte * size).from_address(ptr), dtype=np.uint8)
    view[:4096] = 9
    assert s.batch_put_from(["sd"], [ptr], [4096]) == [0]
    assert s.batch_get_into(["sd"], [ptr + 4096], [4096]) == [4096]
    assert (view[4096:8192] == 9).all()
    assert s.unregister_buffer(ptr) == 0
    s.close()
    del view
    assert alloc.free(ptr) == 0
    assert alloc.free(ptr) == -1
    with pytest.raises(ValueError):
        alloc.alloc(0)
    assert MooncakeDistributedStore().setup_dummy(size, 0, refused_addr) < 0


def test_alloc_from_mem_pool_as_upstreams_dummy_client_tests_use_it(server):
    # Mooncake's tests of its standalone (dummy) client take every buffer
    # from store.alloc_from_mem_pool(size), register it and put/get through
    # it: here that was an AttributeError.
    import ctypes
    s = MooncakeDistributedStore()
    assert s.setup_dummy(64 << 20, 16 << 20, server.addr) == 0
    size = 1 << 20
    ptr = s.alloc_from_mem_pool(size)
    assert ptr and ptr % 4096 == 0
    assert s.register_buffer(ptr, size) == 0
    view = np.frombuffer((ctypes.c_byte * size).from_address(ptr), dtype=np.uint8)
    view[:8192] = 3
    assert s.put_from("amp", ptr, 8192) == 0
    assert s.get_into("amp", ptr + 8192, 8192) == 8192
    assert (view[8192:16384] == 3).all()
    assert s.remove("amp") == 0
    assert s.unregister_buffer(ptr) == 0
    del view
    assert MooncakeHostMemAllocator().free(ptr) == 0  # the process's one pool
    assert s.alloc_from_mem_pool(0) == 0
    with pytest.raises(TypeError):
        s.alloc_from_mem_pool("1MB")
    s.close()
    assert s.alloc_from_mem_pool(size) == 0  # closed
    # a real client answers 0, as upstream's RealClient does
    r = new_store(server, seg=1 << 20)
    assert r.alloc_from_mem_pool(size) == 0
    r.close()


def test_host_memory_is_one_pool_for_every_allocator():
    # Upstream's allocators are views of one process-wide pool (ShmHelper):
    # memory one handed out, another gives back. Here free() on another
    # allocator answered -1 and the mapping stayed until the process exited.
    a, b = MooncakeHostMemAllocator(), MooncakeHostMemAllocator()
    ptr = a.alloc(1 << 16)
    assert b.free(ptr) == 0
    assert a.free(ptr) == -1 and b.free(ptr) == -1  # gone for every one of them
    assert a.free(12345) == -1


# -- remove_all, NUMA, health ----------------------------------------------------------

def test_remove_all_force_and_health(server):
    s = new_store(server)
    assert s.health_check() == 0
    assert s.put_batch([f"r{i}" for i in range(5)], [b"v"] * 5) == 0
    assert s.remove_all(force=True) >= 5
    assert s.remove_all(True) == 0
    s.close()
    assert s.health_check() == 1


def test_bind_to_numa_node(caplog):
    assert bind_to_numa_node(0) is None  # node 0 exists wherever NUMA is available
    with caplog.at_level(logging.WARNING, logger="mooncake.store"):
        assert bind_to_numa_node(4096) is None
    assert any("NUMA" in r.getMessage() for r in caplog.records)


# -- placement options ----------------------------------------------------------------

def _pin(server, key):
    info = server.cli("OBJECT.INFO", key)
    return dict(zip(info[::2], info[1::2]))[b"pin"]


def test_soft_pin_semantics(server):
    s = new_store(server)
    cfg = ReplicateConfig()
    assert s.put("sp0", b"v", cfg) == 0 and _pin(server, "sp0") == b"none"
    cfg.soft_pin_action = SoftPinAction.ENABLE
    assert s.put("sp1", b"v", cfg) == 0 and _pin(server, "sp1") == b"soft"
    cfg.soft_pin_ttl_ms = 60000
    assert s.put("sp2", b"v", cfg) == 0 and _pin(server, "sp2") == b"soft"
    cfg.soft_pin_ttl_ms = 24 * 3600 * 1000 + 1  # over Mooncake's largest soft pin
    assert s.put("sp3", b"v", cfg) == INVALID and s.is_exist("sp3") == 0
    # a time without ENABLE is refused (Mooncake: ttl_requires_enable)
    for action in (SoftPinAction.PRESERVE, SoftPinAction.DISABLE):
        cfg = ReplicateConfig(soft_pin_action=action, soft_pin_ttl_ms=1000)
        assert s.put("sp4", b"v", cfg) == INVALID
    # the older with_soft_pin flag is ENABLE; DISABLE overrides it
    assert s.put("sp5", b"v", ReplicateConfig(with_soft_pin=True)) == 0 and _pin(server, "sp5") == b"soft"
    cfg = ReplicateConfig(with_soft_pin=True, soft_pin_action=SoftPinAction.DISABLE)
    assert s.put("sp6", b"v", cfg) == 0 and _pin(server, "sp6") == b"none"
    assert s.put("sp7", b"v", ReplicateConfig(with_hard_pin=True)) == 0 and _pin(server, "sp7") == b"hard"
    with pytest.raises(TypeError):
        ReplicateConfig(soft_pin_ttl_ms=-1)
    s.close()


def test_preferred_segments_are_preferences(server):
    s = new_store(server, seg=4 << 20, host="pref")
    name = s.get_hostname()
    # a name that does not exist: placed elsewhere (Mooncake's behaviour)
    assert s.put("pf0", b"v" * 100, ReplicateConfig(preferred_segment="gone:1")) == 0
    # one that exists is used, by preferred_segment or the first of
    # preferred_segments
    seg = dict(zip(*[iter(server.cli("SEGMENT.INFO", name))] * 2))
    for i, cfg in enumerate([ReplicateConfig(preferred_segment=name), ReplicateConfig(preferred_segments=[name])]):
        assert s.put(f"pf1{i}", b"v" * 100, cfg) == 0
        info = dict(zip(*[iter(server.cli("OBJECT.INFO", f"pf1{i}"))] * 2))
        assert [r[0] for r in info[b"replicas"]] == [seg[b"id"]]
    # the server keeps PREFER strict for its own protocol; HINT is the preference
    with pytest.raises(Exception, match="no such segment"):
        server.cli("PUT.START", "raw", "10", "PREFER", "gone:1")
    import redis
    r = redis.Redis(port=server.port)
    rep = r.execute_command("PUT.START", "raw", "10", "HINT", "gone:1", "HINT", name)
    assert rep[0][0] == seg[b"id"]
    r.execute_command("PUT.REVOKE", "raw")
    r.close()
    # prefer_alloc_in_same_node is refused for puts, as upstream does
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    assert s.put("pf2", b"v", cfg) == INVALID
    s.close()


# -- byte ranges, get sessions, replica descriptions, clearing ---------------------

@pytest.fixture
def ranged(server):
    s = new_store(server)
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    b = rng.integers(0, 256, 64 << 10, dtype=np.uint8).tobytes()
    assert s.put("rg:a", a) == 0 and s.put("rg:b", b) == 0
    dst = np.zeros(4 << 20, dtype=np.uint8)
    assert s.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    yield s, a, b, dst
    s.close()


def test_get_into_ranges(ranged, server):
    s, a, b, dst = ranged
    p0, p1 = dst.ctypes.data, dst.ctypes.data + (2 << 20)
    res = s.get_into_ranges([p0, p1],
                            [["rg:a", "rg:b"], ["rg:a", "rg:missing"]],
                            [[[0, 4096], [8192]], [[0, 100], [0]]],
                            [[[100, (1 << 20) - 10], [0]], [[5, (1 << 20) - 1], [0]]],
                            [[[1000, 10], [64 << 10]], [[10, 2], [10]]])
    # buffer 0: two fragments of a, all of b; buffer 1: a fragment and one
    # past a's end (INVALID alone), then a missing key
    assert res == [[[1000, 10], [64 << 10]], [[10, INVALID], [NOT_FOUND]]]
    assert bytes(dst[0:1000]) == a[100:1100]
    assert bytes(dst[4096:4106]) == a[(1 << 20) - 10:]
    assert bytes(dst[8192:8192 + (64 << 10)]) == b
    assert bytes(dst[2 << 20:(2 << 20) + 10]) == a[5:15]
    # an unregistered destination, mismatched nesting
    junk = np.zeros(100, dtype=np.uint8)
    assert s.get_into_ranges([junk.ctypes.data], [["rg:a"]], [[[0]]], [[[0]]], [[[10]]]) == [[[INVALID]]]
    assert s.get_into_ranges([p0, p1], [["rg:a"]], [[[0]], [[0]]], [[[0]], [[0]]], [[[1]], [[1]]]) == \
        [[[INVALID]], [[INVALID]]]
    assert s.get_into_ranges([p0], [["rg:a", "rg:b"]], [[[0], [0]]], [[[0]]], [[[1], [1]]]) == [[[INVALID], [INVALID]]]
    assert s.get_into_ranges([], [], [], [], []) == []
    # registered but read-only memory is no place to read into (refused,
    # not a fault)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    ro = libc.mmap(None, 4096, 1, 0x22, -1, 0)  # PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS
    assert ro not in (None, ctypes.c_void_p(-1).value)
    assert s.register_buffer(ro, 4096) == 0
    assert s.get_into_ranges([ro], [["rg:b"]], [[[0, 100]]], [[[0, 0]]], [[[10, 5]]]) == [[[INVALID, INVALID]]]
    assert s.unregister_buffer(ro) == 0
    libc.munmap(ctypes.c_void_p(ro), ctypes.c_size_t(4096))


def test_get_sessions(ranged, server):
    s, a, b, dst = ranged
    import redis
    r = redis.Redis(port=server.port)
    r.execute_command("PUT.START", "rg:pending", "100")
    assert s.batch_get_session_start(["rg:a", "rg:missing", "rg:pending"]) == [0, NOT_FOUND, ms.REPLICA_IS_NOT_READY]
    assert s.batch_get_session_start_with_sources(["rg:b", "rg:missing"]) == ([0, NOT_FOUND], ["memory", ""])
    p = dst.ctypes.data
    # SGLang's layer-wise load: per layer, one range of every key into its pages
    for layer in range(4):
        res = s.batch_get_into_multi_buffer_ranges(
            ["rg:a", "rg:b", "rg:missing", "rg:a"],
            [[p + layer * 8192, p + layer * 8192 + 4096], [p + (1 << 20) + layer * 1024], [p], [p]],
            [[4096, 4096], [1024], [1], [(1 << 20) + 1]],
            [[layer * 8192, layer * 8192 + 4096], [layer * 1024], [0], [0]])
        assert res == [8192, 1024, INVALID, INVALID]  # no session; past the end
    assert bytes(dst[:32768]) == a[:32768]
    assert bytes(dst[1 << 20:(1 << 20) + 4096]) == b[:4096]
    assert s.batch_get_into_multi_buffer_ranges(["rg:a"], [[p]], [[1, 2]], [[0]]) == [INVALID]
    assert s.batch_get_session_end(["rg:a", "rg:b"]) == 0
    assert s.batch_get_into_multi_buffer_ranges(["rg:a"], [[p]], [[1]], [[0]]) == [INVALID]
    r.execute_command("PUT.REVOKE", "rg:pending")
    r.close()


def test_replica_descriptions(server):
    s = new_store(server, seg=4 << 20, host="rd")
    assert s.put("rd:pool", b"p" * 5000, ReplicateConfig(preferred_segment="self")) == 0  # the server's pool
    assert s.put("rd:mine", b"m" * 3000, ReplicateConfig(preferred_segment=s.get_hostname())) == 0
    d = s.batch_get_replica_desc(["rd:pool", "rd:mine", "rd:missing"])
    assert sorted(d) == ["rd:mine", "rd:pool"]  # a missing key is left out
    for key, size in (("rd:pool", 5000), ("rd:mine", 3000)):
        (rep,) = d[key]
        assert rep.is_memory_replica() and not rep.is_disk_replica() and not rep.is_local_disk_replica()
        bd = rep.get_memory_descriptor().buffer_descriptor
        assert bd.size_ == size and bd.transport_endpoint_
    assert d["rd:mine"][0].get_memory_descriptor().buffer_descriptor.segment_name_ == s.get_hostname()
    assert d["rd:pool"][0].get_memory_descriptor().buffer_descriptor.segment_name_ == "self"
    assert s.get_replica_desc("rd:missing") == []
    assert len(s.get_replica_desc("rd:pool")) == 1
    s.close()


def test_batch_replica_clear(fresh_server):
    server = fresh_server
    server.cli("CONFIG", "SET", "lease-ttl", "200")
    s = new_store(server, seg=4 << 20, host="rc")
    keys = [f"rcl:{i}" for i in range(4)]
    assert s.put_batch(keys, [b"v" * 100] * 4) == 0
    assert s.put("rcl:mine", b"m" * 100, ReplicateConfig(preferred_segment=s.get_hostname())) == 0
    # just written: leased for lease-ttl, as Mooncake's put leaves it
    assert s.batch_replica_clear(keys) == []
    import time
    time.sleep(0.3)
    assert s.get("rcl:0") == b"v" * 100          # a finished read holds nothing
    server.cli("LEASE", "rcl:1", "60000")        # a reader still at it: skipped
    assert s.batch_replica_clear(keys + ["rcl:missing"]) == ["rcl:0", "rcl:2", "rcl:3"]
    assert s.batch_is_exist(keys) == [0, 1, 0, 0]
    # by segment: only what lives there
    assert s.batch_replica_clear(["rcl:mine", "rcl:1"], s.get_hostname()) == ["rcl:mine"]
    assert s.batch_replica_clear([]) == []
    s.close()


# -- remove_by_regex --------------------------------------------------------------

def test_remove_by_regex_as_vllm_ec_store_calls_it(fresh_server):
    """vLLM's encoder-cache Mooncake store evicts a pooled entry and its
    metadata key with remove_by_regex(f"^(?:{key}|{meta})$"), and removes a
    batch with a compiled \\b(k1|k2)\\b pattern; Mooncake matches anywhere
    (regex_search) and answers the count removed."""
    import re
    srv = fresh_server
    s = new_store(srv, seg=4 << 20, host="rx")
    for k in ("ec:img1", "ec:img1_metadata", "ec:img10", "ec:img2", "other"):
        assert s.put(k, k.encode()) == 0
    key, meta = re.escape("ec:img1"), re.escape("ec:img1_metadata")
    assert s.remove_by_regex(f"^(?:{key}|{meta})$") == 2
    assert s.batch_is_exist(["ec:img1", "ec:img1_metadata", "ec:img10"]) == [0, 0, 1]
    # a compiled pattern, as that store's batch_remove passes; \b keeps img10
    assert s.remove_by_regex(re.compile(r"\b(ec:img2)\b")) == 1
    assert s.remove_by_regex("img1", force=True) == 1          # search, not match
    assert s.remove_by_regex(regex_pattern="^nothing$") == 0
    assert s.remove_by_regex("(unclosed") == INVALID            # as upstream's regex_error
    assert s.batch_is_exist(["ec:img10", "ec:img2", "other"]) == [0, 0, 1]
    s.close()
    assert s.remove_by_regex(".*") == ms.RPC_FAIL                # closed store: a code, not a crash


def test_remove_by_regex_sees_a_tenants_own_keys(fresh_server):
    srv = fresh_server
    for t in ("ra", "rb"):
        srv.cli("ACL", "SETUSER", t, "on", f">{t}-pw", f"~{t}:*", "+@all", "-@dangerous")
    a = MooncakeDistributedStore()
    assert a.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", srv.addr, tenant_id="ra", password="ra-pw") == 0
    b = MooncakeDistributedStore()
    assert b.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", srv.addr, tenant_id="rb", password="rb-pw") == 0
    assert a.put("k1", b"a") == 0 and a.put("k2", b"a") == 0 and b.put("k1", b"b") == 0
    # anchored at the tenant's own key names, and only its keys
    assert a.remove_by_regex("^k") == 2
    assert b.get("k1") == b"b" and b.remove_by_regex("^k1$") == 1
    a.close()
    b.close()


def test_replicate_config_does_not_claim_group_semantics(server):
    """vLLM's store worker and SGLang's HiCache probe
    hasattr(ReplicateConfig, "group_ids") or hasattr(ReplicateConfig(), ...)
    before they turn on group semantics; there are none here, so the probe
    must say so (they then log it and put as before), and a config that sets
    the attribute anyway still puts."""
    assert not hasattr(ReplicateConfig, "group_ids")
    assert not hasattr(ReplicateConfig(), "group_ids")
    s = new_store(server, host="grp")
    cfg = ReplicateConfig()
    cfg.group_ids = ["g"]
    assert s.put("grp:k", b"v", cfg) == 0 and s.get("grp:k") == b"v"
    s.close()


def _scan_calls(srv):
    return srv.cli("INFO", "commandstats").get("cmdstat_scan", {}).get("calls", 0)


def test_remove_by_regex_of_named_keys_lists_no_keyspace(fresh_server):
    """vLLM's encoder cache calls remove_by_regex once per evicted entry; a
    pattern that names its keys must cost those keys, not a walk of every
    key (SCAN), while any other pattern still looks at them all."""
    import re
    srv = fresh_server
    s = new_store(srv, seg=4 << 20, host="rn")
    for k in ("ec:a.b", "ec:a.b_metadata", "ec:aXb", "ec:a", "keep"):
        assert s.put(k, k.encode()) == 0
    before = _scan_calls(srv)
    assert s.remove_by_regex(f"^(?:{re.escape('ec:a.b')}|{re.escape('ec:a.b_metadata')})$") == 2
    assert s.remove_by_regex("^ec:gone$") == 0
    assert _scan_calls(srv) == before
    assert s.batch_is_exist(["ec:a.b", "ec:a.b_metadata", "ec:aXb", "ec:a"]) == [0, 0, 1, 1]
    # '.' unescaped is any character: not a name, so every key is looked at
    assert s.remove_by_regex("^ec:a.b$") == 1
    assert _scan_calls(srv) > before
    assert s.batch_is_exist(["ec:aXb", "ec:a", "keep"]) == [0, 1, 1]
    s.close()


def test_named_keys_are_exactly_what_the_pattern_matches():
    """The shortcut above must never remove more or fewer keys than
    re.search would: every pattern over a small alphabet of literals and
    regex syntax, against every short key over the same characters."""
    import itertools
    import re
    alphabet = ["a", "b", "|", ".", "\\.", "\\d", "*", "(?:", ")", "$", "^", "\n", "\\|", " "]
    keys = ["".join(t) for n in range(0, 4) for t in itertools.product("ab.|\n d$^", repeat=n)]
    tried = shortcut = 0
    for n in range(0, 4):
        for parts in itertools.product(alphabet, repeat=n):
            for wrap in ("^%s$", "^(?:%s)$", "%s"):
                src = wrap % "".join(parts)
                try:
                    pat = re.compile(src)
                except re.error:
                    continue
                tried += 1
                named = ms._anchored_literals(pat)
                if named is None:
                    continue
                shortcut += 1
                matched = sorted(k for k in keys if pat.search(k))
                assert sorted(k for k in named if len(k) <= 3) == matched, src
    assert tried > 1000 and shortcut > 100
