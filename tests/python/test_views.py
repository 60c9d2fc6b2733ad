"""get_buffer's handles as views: on the same host, a handle is the stored
object where it lies (a read-only window on the segment's shared mapping,
held by the store while the handle lives), not a copy in the local buffer.
LMCache reads every chunk it loads through such a handle and copies it out
once; a handle that was itself a copy made that two copies per byte."""
import warnings

import numpy as np
import pytest

import mooncake.store as mstore
from mooncake.store import MooncakeDistributedStore


@pytest.fixture(scope="module")
def unix_server(tmp_path_factory):
    from conftest import Server
    sock = str(tmp_path_factory.mktemp("views") / "mc.sock")
    srv = Server("--unixsocket", sock, pool="64mb")
    yield srv
    srv.stop()


def holds(srv):
    return int(srv.cli("INFO", "store")["store_holds"])


def holds_become(srv, n):
    """Releases are sent without waiting for their reply: poll, up to 2 s."""
    import time
    for _ in range(200):
        if holds(srv) == n:
            return True
        time.sleep(0.01)
    return False


def shared_mapping_of(addr):
    """The /proc/self/maps line whose range holds addr."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return line.rstrip()
    return ""


@pytest.fixture
def st(unix_server):
    s = MooncakeDistributedStore()
    assert s.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", unix_server.addr) == 0
    s.remove_all()
    yield s
    s.close()


def test_handles_are_read_only_views_held_while_they_live(unix_server, st):
    val = bytes(range(256)) * 4096
    assert st.put("v:a", val) == 0 and st.put("v:b", val[::-1]) == 0
    h = st.get_buffer("v:a")
    assert bytes(h) == val and len(h) == h.size() == len(val)
    assert memoryview(h).readonly
    with pytest.raises(TypeError):
        memoryview(h)[0] = 1
    # the bytes are the pool's own, in its shared mapping: not a copy
    assert "memfd:" in shared_mapping_of(h.ptr())
    assert holds(unix_server) == 1
    hs = st.batch_get_buffer(["v:a", "v:missing", "v:b"])
    assert hs[1] is None and bytes(hs[0]) == val and bytes(hs[2]) == val[::-1]
    assert hs[0].ptr() == h.ptr()  # the same object, the same place
    assert holds(unix_server) == 3
    # freed: its hold ends with the store's next request, so a get() holds
    # nothing for the calls after it
    del h, hs
    assert st.is_exist("v:a") == 1
    assert holds_become(unix_server, 0)
    assert st.get("v:a") == val
    assert st.is_exist("v:a") == 1
    assert holds_become(unix_server, 0)


def test_a_handle_keeps_its_object_after_remove_and_overwrite(unix_server, st):
    unix_server.cli("CONFIG", "SET", "lease-ttl", "100")
    try:
        val = b"\x5a" * (1 << 20)
        assert st.put("v:gone", val) == 0
        h = st.get_buffer("v:gone")
        assert st.remove("v:gone") == 0
        import time
        time.sleep(0.3)  # lease-ttl is over: only the hold keeps the space
        other = b"\xa5" * (1 << 20)
        for i in range(128):  # twice the pool: every free extent rewritten
            assert st.upsert(f"v:fill{i % 40}", other) == 0
        assert bytes(h) == val
        del h
        assert st.is_exist("v:gone") == 0
        assert holds_become(unix_server, 0)
    finally:
        unix_server.cli("CONFIG", "SET", "lease-ttl", "10000")


def test_lmcache_reads_a_view_as_it_reads_a_copy(st):
    # LMCache: memoryview for the header, torch.frombuffer for the payload,
    # copied into its memory object
    torch = pytest.importorskip("torch")
    payload = np.arange(1 << 16, dtype=np.uint8)
    assert st.put_parts("v:chunk", b"H" * 28, payload.tobytes()) == 0
    buf = st.batch_get_buffer(["v:chunk"])[0]
    assert bytes(memoryview(buf)[:28]) == b"H" * 28
    dst = torch.empty(payload.size, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "the given buffer is not writable"
        dst.copy_(torch.frombuffer(buf, dtype=torch.uint8, offset=28, count=payload.size))
    assert np.array_equal(dst.numpy(), payload)
    assert np.array_equal(np.frombuffer(buf, dtype=np.uint8, offset=28), payload)


def test_views_can_be_turned_off(unix_server, st, monkeypatch):
    monkeypatch.setattr(mstore, "_VIEWS", False)
    assert st.put("v:c", b"c" * 4096) == 0
    h = st.get_buffer("v:c")
    assert not memoryview(h).readonly and bytes(h) == b"c" * 4096
    assert holds(unix_server) == 0  # a copy: nothing held


def test_handles_outlive_close(unix_server, st):
    assert st.put("v:d", b"d" * 8192) == 0
    h = st.get_buffer("v:d")
    st.close()
    assert holds_become(unix_server, 0)  # the connection's close ended the hold
    assert bytes(h) == b"d" * 8192  # still mapped
    del h
