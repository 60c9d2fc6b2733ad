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


HOSTS = r"""
import sys
sys.path[:0] = sys.argv[2:]
from mooncake import _mooncake
hs = []
for i in range(10):
    h = _mooncake.Client(sys.argv[1])
    assert h.mount(1 << 20, "gone-%d" % i) > 0
    assert h.put(["gone%d" % i], [b"v" * 4096], None, (1, "gone-%d" % i, 0, False, True)) == [0]
    hs.append(h)
print("ready", flush=True)
sys.stdin.readline()  # lives until the test closes its stdin
"""

CHURN = r"""
import sys
sys.path[:0] = sys.argv[2:]
from mooncake import _mooncake
for i in range(1000):
    h = _mooncake.Client(sys.argv[1])
    assert h.mount(1 << 20, "churn-%d" % i) > 0
    h.close()
"""


def test_a_handle_idle_while_its_hosts_went_lets_their_memory_go_at_its_next_call(fresh_server):
    # A handle that read from a few hosted segments (fewer than the 16 a
    # count-based sweep waits for) kept their mappings and sockets through
    # every call made within 30 s of its last sweep: an engine idle while
    # its peers went held their memory (a mapping each, pinned for the
    # kernel) until a call came 30 s after. Its next call now sees the
    # closed data connections and sweeps. Counted, not timed: the 10
    # hosts' mappings are there after the reads and while the handle is
    # idle through 1000 mounts and unmounts of another client, and gone
    # after its next call.
    import os
    import subprocess
    import sys

    def held():
        with open("/proc/self/maps") as f:
            maps = sum(1 for line in f if "memfd:mooncake-segment" in line)
        return maps, len(os.listdir("/proc/self/fd"))
    c = __import__("mooncake")._mooncake.Client(fresh_server.addr)
    base = held()
    hosts = subprocess.Popen([sys.executable, "-c", HOSTS, fresh_server.addr] + sys.path, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert hosts.stdout.readline().strip() == "ready"
        for i in range(10):
            assert c.get(["gone%d" % i]) == [b"v" * 4096]
        mapped = held()
        assert mapped[0] == base[0] + 10, (base, mapped)
    finally:
        hosts.stdin.close()
        hosts.wait(timeout=60)
        hosts.stdout.close()
    churn = subprocess.run([sys.executable, "-c", CHURN, fresh_server.addr] + sys.path, capture_output=True,
                           text=True, timeout=300)
    assert churn.returncode == 0, churn.stderr[-2000:]
    assert held()[0] == mapped[0]  # idle: nothing happens in it
    # the server has unmounted them (the hosts' connections closed; a
    # bounded wait: it asks whether the process lives first)
    import time
    end = time.monotonic() + 30
    while len(fresh_server.cli("SEGMENTS")) > 1 and time.monotonic() < end:
        time.sleep(0.05)
    assert len(fresh_server.cli("SEGMENTS")) == 1  # its own pool
    assert c.size("gone0") == __import__("mooncake")._mooncake.ERR_NOT_FOUND  # gone with its segment
    assert held() == base
    c.close()
