"""One mapping of the server's pool per process, however many library
handles a Store opens (src/libmooncake/mc_shm.c).

A Store shared by threads borrows a handle from its pool for each call and
opens another when all are busy; its non-blocking batches run on a clone of
a handle (mc_async.c). The pool arrives over shm as the server's memfd
(segment 'self'), so what the process maps of it is the "/memfd:self" lines
of /proc/self/maps: one, whatever the number of handles, and none once the
Store is closed. Nothing is timed: the threads read until the pool has
opened more than one handle.
"""
import threading

import pytest

import mooncake


def pool_mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith("/memfd:self (deleted)"))


@pytest.fixture(scope="module")
def unix_server(tmp_path_factory):
    from conftest import Server
    sock = str(tmp_path_factory.mktemp("mapping") / "mc.sock")
    srv = Server("--unixsocket", sock)
    srv.uri = "unix://" + sock
    yield srv
    srv.stop()


@pytest.fixture
def shm_store(unix_server):
    st = mooncake.connect(unix_server.uri, transport="shm")
    st.remove_all()
    yield st
    st.close()


def test_threads_of_one_store_share_one_mapping(shm_store):
    st = shm_store
    n = 16 << 20
    value = bytes(range(256)) * (n // 256)
    assert pool_mappings() == 0
    st.put("map:v", value)
    assert pool_mappings() == 1
    errors = []

    def work():
        buf = bytearray(n)
        try:
            # Until the pool has had to open handles of its own for
            # threads that found every handle busy (bounded).
            for _ in range(200):
                assert st.get_into("map:v", buf) == n
                assert buf == value
                if st._c.handles >= 3:
                    break
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert st._c.handles >= 2
    assert pool_mappings() == 1

    # A non-blocking batch runs on a clone of a handle: the same mapping.
    out = bytearray(n)
    assert st.batch_get_into_async(["map:v"], [out]).result() == [n]
    assert out == value
    assert pool_mappings() == 1


def test_mapping_goes_with_the_store(unix_server):
    st = mooncake.connect(unix_server.uri, transport="shm")
    st.put("map:w", b"x" * 4096)
    assert st.get("map:w") == b"x" * 4096
    assert pool_mappings() == 1
    st.close()
    assert pool_mappings() == 0
