"""Device memory through the Python binding, against the fake CUDA runtime.

libmooncake loads the CUDA runtime with dlopen (MC_CUDA_LIBRARY); here it is
build/tests/libfakecuda.so, whose device memory faults on any CPU access,
so a path that touched it without the runtime crashes the test. The runtime
is loaded once per process and its verdict kept, so every case runs in a
fresh python3 of its own (this file run as a script, the case's name as its
argument) with MC_CUDA_LIBRARY set: the pytest process itself never loads
the fake (a real GPU test in the same run keeps its real runtime).

Covered: mooncake.cuda_available() (the library's answer, a runtime with no
device, one that cannot be loaded); every drop-in form with registered
device pointers -- put_from/get_into, batch_put_from/batch_get_into, the
multi-buffer batches vLLM's connector uses (which answered -600), the async
batches (which refused device memory), ranged reads -- and the Store API
with CUDA tensors (a stand-in with torch's tensor interface over fake device
memory): put/get_into, scatter-gather with host pieces, batches, async
batches; over shm and tcp, byte-exact; one device copy per byte over shm;
the mapping page-locked window by window; a failing device copy.
"""
import ctypes
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FAKE = os.environ.get("MC_FAKE_CUDA_LIBRARY") or os.path.join(ROOT, "build", "tests", "libfakecuda.so")
MiB = 1 << 20


# ---- the pytest side: one fresh interpreter per case ------------------------------------

def run_case(case, server, **env):
    # FAKECUDA_ASYNC: asynchronous copies land at their stream's sync, as
    # they may on a GPU (a pipeline that runs ahead of them gets stale bytes).
    e = dict(os.environ, MC_CUDA_LIBRARY=FAKE, MC_TEST_ADDR=server.addr, MC_TEST_UNIX=server.unix, FAKECUDA_ASYNC="1")
    e.update(env)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), case], env=e, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{case}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert r.stdout.strip().endswith("ok"), r.stdout[-2000:]


@pytest.fixture(scope="module")
def userver():
    if not os.path.exists(FAKE):
        pytest.skip("build/tests/libfakecuda.so is not built (make -C src unit-tests)")
    from conftest import Server
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="pytest-cuda-")
    sock = os.path.join(d, "mc.sock")
    s = Server("--unixsocket", sock)
    s.unix = sock
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_cuda_available_is_the_librarys_answer(userver):
    run_case("available", userver)
    run_case("no_device", userver, FAKECUDA_DEVICES="0")
    run_case("no_runtime", userver, MC_CUDA_LIBRARY="/nonexistent/libcudart.so.99")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_dropin_device_pointers_every_form(userver, transport):
    run_case("dropin_" + transport, userver)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_store_cuda_tensors_every_form(userver, transport):
    run_case("store_" + transport, userver)


def test_one_device_copy_per_byte_over_shm(userver):
    run_case("counts", userver)


def test_mapping_page_locked_window_by_window(userver):
    run_case("windows", userver, MC_CUDA_REGISTER_WINDOW=str(4 * MiB))


def test_failing_device_copy(userver):
    run_case("failing_copy", userver)


def test_tensor_registrations_end_with_their_call(userver):
    run_case("registrations", userver)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_dropin_host_and_device_in_one_batch(userver, transport):
    run_case("mixed_" + transport, userver)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_put_sessions_from_device_memory(userver, transport):
    run_case("sessions_" + transport, userver)


# ---- the child side -----------------------------------------------------------------------

class Dev:
    """The fake runtime, as a program would call a real one."""

    def __init__(self):
        self.lib = ctypes.CDLL(os.environ["MC_CUDA_LIBRARY"])
        self.lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.lib.fakecudaCount.argtypes = [ctypes.c_char_p]
        self.lib.fakecudaCount.restype = ctypes.c_ulonglong
        self.lib.fakecudaFail.argtypes = [ctypes.c_char_p, ctypes.c_longlong, ctypes.c_longlong]

    def malloc(self, n):
        p = ctypes.c_void_p()
        assert self.lib.cudaMalloc(ctypes.byref(p), n) == 0
        return p.value

    def write(self, addr, data):
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        assert self.lib.cudaMemcpy(addr, buf, len(data), 4) == 0

    def fill(self, addr, n, byte=0xEE):
        self.write(addr, bytes([byte]) * n)

    def read(self, addr, n):
        buf = ctypes.create_string_buffer(n)
        assert self.lib.cudaMemcpy(buf, addr, n, 4) == 0
        return buf.raw

    def count(self, name):
        return self.lib.fakecudaCount(name.encode())

    def fail(self, call, skip, n):
        self.lib.fakecudaFail(call.encode(), skip, n)


class FakeCudaTensor:
    """What mooncake's Store reads of a CUDA tensor (data_ptr, is_cuda,
    contiguity, sizes), over fake device memory."""

    def __init__(self, addr, n):
        self.addr, self.n = addr, n

    is_cuda = True

    def data_ptr(self):
        return self.addr

    def is_contiguous(self):
        return True

    def numel(self):
        return self.n

    def element_size(self):
        return 1


FakeCudaTensor.__module__ = "torch.fake_cuda"  # the Store recognises tensors by their module


def pattern(n, seed):
    import random
    return random.Random(seed).randbytes(n)


def child_available():
    import mooncake
    assert mooncake.cuda_available() == (True, ""), mooncake.cuda_available()


def child_no_device():
    import mooncake
    ok, why = mooncake.cuda_available()
    assert not ok and why.startswith("no CUDA device: "), why


def child_no_runtime():
    import mooncake
    ok, why = mooncake.cuda_available()
    assert not ok and why.startswith("no CUDA runtime: MC_CUDA_LIBRARY=/nonexistent/"), why
    st = mooncake.connect(os.environ["MC_TEST_ADDR"])
    with pytest.raises(mooncake.Error, match="CUDA runtime"):
        st.register(0x7f0000000000, 4096)  # not host memory, and no runtime to ask
    st.close()


def dropin_on(transport):
    """Mooncake's class set up as an engine does, its calls then made over
    the transport under test on every handle it opens."""
    import mooncake._mooncake as _mc
    from mooncake.store import MooncakeDistributedStore
    ms = MooncakeDistributedStore()
    assert ms.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", os.environ["MC_TEST_ADDR"]) == 0
    old = ms._c
    ms._c = _mc.Client(("unix://" + os.environ["MC_TEST_UNIX"]) if transport == "shm" else os.environ["MC_TEST_ADDR"],
                       transport={"shm": 1, "tcp": 2}[transport])
    assert ms._c.register(ms._budget.addr, 16 << 20) == 0
    old.close()
    return ms


def dropin(transport):
    dev = Dev()
    ms = dropin_on(transport)
    ms.remove_all()
    size = 16 * MiB
    a, b = dev.malloc(size), dev.malloc(size)
    assert ms.register_buffer(a, size) == 0 and ms.register_buffer(b, size) == 0
    v = pattern(3 * MiB + 5, transport)
    dev.write(a, v)
    # put_from / get_into
    assert ms.put_from("single", a, len(v)) == 0
    assert ms._c.last_transport() == {"shm": 1, "tcp": 2}[transport]
    assert ms.get("single") == v
    dev.fill(b, 4 * MiB)
    assert ms.get_into("single", b + 10, 4 * MiB - 10) == len(v)
    assert dev.read(b, 10 + len(v) + 64) == b"\xee" * 10 + v + b"\xee" * 64
    # batch_put_from / batch_get_into, several keys
    keys = ["b0", "b1", "b2"]
    offs, sizes = [0, MiB, 2 * MiB + 3], [MiB, MiB + 3, 1000]
    assert ms.batch_put_from(keys, [a + o for o in offs], sizes) == [0, 0, 0]
    dev.fill(b, 4 * MiB)
    assert ms.batch_get_into(keys, [b + o for o in offs], sizes) == sizes
    got = dev.read(b, 4 * MiB)
    for o, n in zip(offs, sizes):
        assert got[o:o + n] == v[o:o + n]
    # the multi-buffer batches (vLLM's connector): answered -600 before
    mkeys = ["m0", "m1"]
    ptrs = [[a, a + 4096, a + 2 * MiB], [a + MiB, a + 5]]
    szs = [[4096, 100, MiB], [77, 50000]]
    assert ms.batch_put_from_multi_buffers(mkeys, ptrs, szs) == [0, 0]
    assert ms.get("m0") == v[:4196] + v[2 * MiB:3 * MiB]
    assert ms.get("m1") == v[MiB:MiB + 77] + v[5:50005]
    dev.fill(b, 4 * MiB)
    optrs = [[b, b + 8, b + 9000], [b + 3 * MiB, b + 3 * MiB + 100]]
    oszs = [[8, 4188, MiB], [77, 50000]]
    assert ms.batch_get_into_multi_buffers(mkeys, optrs, oszs) == [4196 + MiB, 50077]
    got = dev.read(b, 4 * MiB)
    m0 = v[:4196] + v[2 * MiB:3 * MiB]
    assert got[:4196] == m0[:4196] and got[9000:9000 + MiB] == m0[4196:]
    assert got[4196:9000] == b"\xee" * (9000 - 4196)
    assert got[3 * MiB:3 * MiB + 77] == v[MiB:MiB + 77] and got[3 * MiB + 100:3 * MiB + 50100] == v[5:50005]
    # async batches: refused device memory before
    fut = ms.batch_put_from_async(["as0", "as1"], [a, a + MiB], [MiB, 2 * MiB])
    assert fut.result() == [0, 0]
    assert ms.get("as1") == v[MiB:3 * MiB]
    dev.fill(b, 4 * MiB)
    fut = ms.batch_get_into_async(["as0", "as1"], [b, b + MiB], [MiB, 2 * MiB])
    assert fut.result() == [MiB, 2 * MiB]
    assert dev.read(b, 3 * MiB) == v[:3 * MiB]
    # ranged reads into device memory
    dev.fill(b, 4 * MiB)
    res = ms.get_into_ranges([b], [["single"]], [[[0, 5000]]], [[[100, 2 * MiB]]], [[[1000, MiB]]])
    assert res == [[[1000, MiB]]], res
    got = dev.read(b, 5000 + MiB + 64)
    assert got[:1000] == v[100:1100] and got[5000:5000 + MiB] == v[2 * MiB:3 * MiB]
    assert got[1000:5000] == b"\xee" * 4000
    # unregistered device memory: refused as upstream refuses it
    c = dev.malloc(MiB)
    assert ms.put_from("unreg", c, MiB) == -600
    ms.close()


def store(transport):
    import mooncake
    dev = Dev()
    uri = ("unix://" + os.environ["MC_TEST_UNIX"]) if transport == "shm" else os.environ["MC_TEST_ADDR"]
    st = mooncake.connect(uri, transport=transport)
    size = 8 * MiB
    a, b = dev.malloc(size), dev.malloc(size)
    v = pattern(2 * MiB + 7, transport + "store")
    dev.write(a, v)
    ta, tb = FakeCudaTensor(a, len(v)), FakeCudaTensor(b, len(v))
    st.put("t", ta)
    assert st._c.last_transport() == {"shm": 1, "tcp": 2}[transport]
    assert st.get("t") == v
    dev.fill(b, size)
    assert st.get_into("t", tb) == len(v)
    assert dev.read(b, len(v) + 64) == v + b"\xee" * 64
    # scatter-gather: a tensor between host pieces, both ways
    head, tail = b"head" * 10, bytearray(pattern(5000, 9))
    st.put("sg", [head, FakeCudaTensor(a, MiB), tail])
    whole = head + v[:MiB] + bytes(tail)
    assert st.get("sg") == whole
    h1, h2 = bytearray(20), bytearray(len(whole) - 20 - MiB)
    dev.fill(b, size)
    assert st.get_into("sg", [h1, FakeCudaTensor(b, MiB), h2]) == len(whole)
    assert bytes(h1) == whole[:20] and dev.read(b, MiB) == whole[20:20 + MiB] and bytes(h2) == whole[20 + MiB:]
    # batches
    st.batch_put(["x0", "x1"], [FakeCudaTensor(a, MiB), FakeCudaTensor(a + MiB, MiB + 7)])
    dev.fill(b, size)
    got = st.batch_get_into(["x0", "x1"], [FakeCudaTensor(b, MiB), FakeCudaTensor(b + 2 * MiB, 2 * MiB)])
    assert list(got) == [MiB, MiB + 7], got
    assert dev.read(b, MiB) == v[:MiB] and dev.read(b + 2 * MiB, MiB + 7) == v[MiB:]
    # async batches with tensors (refused before)
    st.batch_put_async(["y0", "y1"], [FakeCudaTensor(a, 100), FakeCudaTensor(a + 100, MiB)]).result()
    dev.fill(b, size)
    fut = st.batch_get_into_async(["y0", "y1"], [FakeCudaTensor(b, 100), FakeCudaTensor(b + MiB, MiB)])
    assert list(fut.result()) == [100, MiB]
    assert dev.read(b, 100) == v[:100] and dev.read(b + MiB, MiB) == v[100:100 + MiB]
    assert st._c.handles >= 1
    st.close()


def child_dropin_shm():
    dropin("shm")


def child_dropin_tcp():
    dropin("tcp")


def child_store_shm():
    store("shm")


def child_store_tcp():
    store("tcp")


def child_counts():
    import mooncake
    dev = Dev()
    st = mooncake.connect("unix://" + os.environ["MC_TEST_UNIX"], transport="shm")
    a = dev.malloc(16 * MiB)
    v = pattern(16 * MiB, "counts")
    dev.write(a, v)
    for i in range(3):
        b0, p0 = dev.count("memcpy_bytes"), dev.count("memcpy_pinned_bytes")
        st.put(f"c{i}", FakeCudaTensor(a, 16 * MiB))
        assert dev.count("memcpy_bytes") - b0 == 16 * MiB  # straight into the mapping
        assert dev.count("memcpy_pinned_bytes") - p0 == 16 * MiB  # which is page-locked
        b0 = dev.count("memcpy_bytes")
        assert st.get_into(f"c{i}", FakeCudaTensor(a, 16 * MiB)) == 16 * MiB
        assert dev.count("memcpy_bytes") - b0 == 16 * MiB
    assert dev.count("host_register") == 1  # once per mapping, not per transfer
    st.close()
    assert dev.count("host_registered") == 0  # unlocked when the mapping went


def child_windows():
    """Windows of 4 MiB (MC_CUDA_REGISTER_WINDOW) in the server's 256 MiB
    pool: a 16 MiB put page-locks the 4 or 5 windows it lies in, not the
    mapping (which pinned the whole pool at the first transfer, seconds on a
    large one); its copies are cut at window ends, so every byte goes pinned
    (a copy across two registrations is a pageable one); a read of the same
    bytes registers nothing more; the close unlocks them all."""
    import mooncake
    window = 4 * MiB
    dev = Dev()
    st = mooncake.connect("unix://" + os.environ["MC_TEST_UNIX"], transport="shm")
    a, b = dev.malloc(16 * MiB), dev.malloc(16 * MiB)
    v = pattern(16 * MiB, "windows")
    dev.write(a, v)
    r0, rb0 = dev.count("host_register"), dev.count("host_register_bytes")
    m0, p0 = dev.count("memcpy"), dev.count("memcpy_pinned_bytes")
    st.put("w", FakeCudaTensor(a, 16 * MiB))
    regs = dev.count("host_register") - r0
    assert regs in (4, 5), regs
    assert dev.count("host_register_bytes") - rb0 == regs * window
    assert dev.count("memcpy") - m0 == regs  # one copy per window
    assert dev.count("memcpy_pinned_bytes") - p0 == 16 * MiB
    p1 = dev.count("memcpy_pinned_bytes")
    assert st.get_into("w", FakeCudaTensor(b, 16 * MiB)) == 16 * MiB
    assert dev.read(b, 16 * MiB) == v
    assert dev.count("host_register") - r0 == regs  # the same windows: none registered again
    assert dev.count("memcpy_pinned_bytes") - p1 == 16 * MiB
    st.close()
    assert dev.count("host_registered") == 0


def child_failing_copy():
    import mooncake
    from mooncake.store import MooncakeDistributedStore
    dev = Dev()
    a = dev.malloc(MiB)
    dev.write(a, pattern(MiB, 1))
    for uri, t in (("unix://" + os.environ["MC_TEST_UNIX"], "shm"), (os.environ["MC_TEST_ADDR"], "tcp")):
        st = mooncake.connect(uri, transport=t)
        dev.fail("memcpy", 0, -1)
        with pytest.raises(mooncake.Error, match="cudaMemcpy"):
            st.put("f" + t, FakeCudaTensor(a, MiB))
        dev.fail("memcpy", 0, 0)
        with pytest.raises(KeyError):
            st.get("f" + t)  # the put was revoked
        st.close()
    ms = MooncakeDistributedStore()
    assert ms.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", os.environ["MC_TEST_ADDR"]) == 0
    assert ms.register_buffer(a, MiB) == 0
    dev.fail("memcpy", 0, -1)
    assert ms.put_from("fd", a, MiB) < 0
    assert ms.batch_put_from(["fd1", "fd2"], [a, a + 10], [10, 10]) != [0, 0]
    dev.fail("memcpy", 0, 0)
    assert ms.put_from("fd", a, MiB) == 0
    ms.close()


def child_registrations():
    """The Store registers each CUDA tensor for the length of its call. An
    async batch gave the registrations back only in result(): a future
    dropped unread, a submit that raised, or a put whose second tensor
    could not be registered left them for good -- one more region per call,
    and a raw address inside a freed tensor still allowed."""
    import gc
    import mooncake
    dev = Dev()
    st = mooncake.connect(os.environ["MC_TEST_ADDR"])
    a = dev.malloc(MiB)
    v = pattern(4096, "reg")
    dev.write(a, v)
    n = [0]

    def raw_put(addr):  # INVALID unless addr is registered
        n[0] += 1
        return st._c.put([f"raw{n[0]}"], [addr], [100])[0]

    assert raw_put(a) == mooncake.InvalidArgumentError.code
    # a future dropped unread: the batch finishes, then its tensors go
    fut = st.batch_put_async(["d0", "d1"], [FakeCudaTensor(a, 100), FakeCudaTensor(a + 4096, 100)])
    del fut
    gc.collect()
    assert st.get("d0") == v[:100] and st.get("d1") == bytes(100)
    fut = st.batch_get_into_async(["d0"], [FakeCudaTensor(a + 8192, 100)])
    del fut
    gc.collect()
    assert dev.read(a + 8192, 100) == v[:100]
    # a submit refused by the extension (not a buffer)
    with pytest.raises(TypeError):
        st.batch_put_async(["e0", "e1"], [FakeCudaTensor(a + 12288, 100), object()])
    with pytest.raises(TypeError):
        st.batch_get_into_async(["d0", "d1"], [FakeCudaTensor(a + 12288, 100), b"read-only"])
    # a second tensor that is no device memory
    bogus = FakeCudaTensor(a + 512 * MiB, 100)  # inside the fake's range, never allocated
    with pytest.raises(mooncake.Error):
        st.put("e2", [FakeCudaTensor(a + 16384, 100), bogus])
    with pytest.raises(mooncake.Error):
        st.batch_get_into_async(["d0", "d1"], [FakeCudaTensor(a + 16384, 100), bogus])
    for off in (0, 4096, 8192, 12288, 16384):
        assert raw_put(a + off) == mooncake.InvalidArgumentError.code, off
    # read or dropped, a future gives each registration back exactly once:
    # one the caller made itself stays
    st.register(a, MiB)
    fut = st.batch_put_async(["f0"], [FakeCudaTensor(a, 100)])
    assert fut.result() == [None]
    del fut
    gc.collect()
    assert raw_put(a) == 0
    st.unregister(a)
    assert raw_put(a) == mooncake.InvalidArgumentError.code
    # the caller's registration and a longer tensor's at the same address:
    # the call undoes its own, not the caller's (the first one found was)
    st.register(a, 4096)
    st.put("g0", FakeCudaTensor(a, 8192))
    assert raw_put(a) == 0 and raw_put(a + 5000) == mooncake.InvalidArgumentError.code
    assert st.batch_put_async(["g1"], [FakeCudaTensor(a, 8192)]).result() == [None]
    assert raw_put(a) == 0 and raw_put(a + 5000) == mooncake.InvalidArgumentError.code
    st.unregister(a)
    assert raw_put(a) == mooncake.InvalidArgumentError.code
    st.close()


def sessions(transport):
    """vLLM's layerwise save from device memory: each layer's slice written
    into its block's object from the GPU, over shm straight into the
    mapping (one device copy per byte per replica); a failing device copy
    fails its key's write, and the end of that session revokes it: a partly
    written object is never published."""
    import mooncake.store as mst
    dev = Dev()
    ms = dropin_on(transport)
    layers, page = 4, 256 * 1024 + 3
    a = dev.malloc(layers * page)
    v = pattern(layers * page, "sessions" + transport)
    dev.write(a, v)
    assert ms.register_buffer(a, layers * page) == 0
    keys = [f"ses{transport}:{i}" for i in range(2)]
    assert ms.batch_put_session_start(keys, [layers * page] * 2) == [0, 0]
    b0 = dev.count("memcpy_bytes")
    for layer in range(layers):
        got = ms.batch_put_from_multi_buffer_ranges(keys, [[a + layer * page]] * 2, [[page]] * 2, [[layer * page]] * 2)
        assert got == [page, page], got
    if transport == "shm":
        assert dev.count("memcpy_bytes") - b0 == 2 * layers * page  # straight from the device into the mapping
    assert ms.batch_put_session_end(keys) == [0, 0]
    for k in keys:
        got = ms.get(k)
        assert got == v, (k, len(got), ms.is_exist(k), next((i for i in range(min(len(v), len(got))) if got[i] != v[i]), None))
    bad, good = "bad" + transport, "good" + transport
    # device copies that fail: that key's write fails (after one more try),
    # while another session goes on
    assert ms.batch_put_session_start([bad, good], [page, page]) == [0, 0]
    dev.fail("memcpy", 0, -1)
    got = ms.batch_put_from_multi_buffer_ranges([bad], [[a]], [[page]], [[0]])
    dev.fail("memcpy", 0, 0)
    assert got[0] < 0, got
    assert ms.batch_put_from_multi_buffer_ranges([good, bad], [[a]] * 2, [[page]] * 2, [[0]] * 2) == \
        [page, mst.RPC_FAIL]  # a failed session takes no more writes
    assert ms.batch_put_session_end([bad, good]) == [mst.RPC_FAIL, 0]
    assert ms.is_exist(bad) == 0 and ms.get(good) == v[:page]
    # revoked by its end, not left pending: the key can be put again at once
    assert ms.batch_put_session_start([bad], [page]) == [0]
    assert ms.batch_put_session_revoke([bad]) == [0]
    assert ms.unregister_buffer(a) == 0
    ms.close()


def child_sessions_shm():
    sessions("shm")


def child_sessions_tcp():
    sessions("tcp")


def mixed(transport):
    """Host and device pointers side by side in one drop-in call: batch items
    of each kind, multi-buffer items that mix them, odd sizes and offsets,
    a device item past the tcp chunk; both ways, byte-exact."""
    dev = Dev()
    ms = dropin_on(transport)
    ms.remove_all()
    size = 16 * MiB
    a, b = dev.malloc(size), dev.malloc(size)
    host = ctypes.create_string_buffer(4 * MiB)
    haddr = ctypes.addressof(host)
    assert ms.register_buffer(a, size) == 0 and ms.register_buffer(b, size) == 0
    assert ms.register_buffer(haddr, 4 * MiB) == 0
    v = pattern(9 * MiB + 3, "mixed" + transport)
    dev.write(a, v)
    ctypes.memmove(haddr, v[:3 * MiB], 3 * MiB)
    keys = ["x0", "x1", "x2", "x3"]
    ptrs = [haddr + 1, a + 7, haddr + 2 * MiB, a + 3 * MiB]
    sizes = [4095, 1, 12345, 6 * MiB + 1]
    assert ms.batch_put_from(keys, ptrs, sizes) == [0, 0, 0, 0]
    want = [v[1:4096], v[7:8], v[2 * MiB:2 * MiB + 12345], v[3 * MiB:9 * MiB + 1]]
    for k, w in zip(keys, want):
        assert ms.get(k) == w, k
    dev.fill(b, size)
    ctypes.memset(haddr, 0, 4 * MiB)
    optrs = [b + 5, haddr + 3, b + MiB + 1, haddr + MiB]
    osizes = [4095, 1, 12345, 6 * MiB + 1]
    # the last item is larger than the host region: refused alone
    res = ms.batch_get_into(keys, optrs, osizes)
    assert res[:3] == [4095, 1, 12345] and res[3] < 0, res
    assert dev.read(b, 4100) == b"\xee" * 5 + want[0]
    assert host.raw[3:4] == want[1]
    assert dev.read(b + MiB, 12347) == b"\xee" + want[2] + b"\xee"
    assert ms.batch_get_into(["x3"], [b + 8 * MiB], [6 * MiB + 1]) == [6 * MiB + 1]
    assert dev.read(b + 8 * MiB, 6 * MiB + 1) == want[3]
    # multi-buffer items mixing host and device pieces
    ctypes.memmove(haddr, v[:3 * MiB], 3 * MiB)
    mkeys = ["mx0", "mx1"]
    mptrs = [[haddr, a + 5, haddr + 100], [a + 4 * MiB, haddr + 3 * MiB - 7, a + 1]]
    mszs = [[3, 4099, 77], [5 * MiB, 7, 1]]
    assert ms.batch_put_from_multi_buffers(mkeys, mptrs, mszs) == [0, 0]
    h = bytes(v[:3 * MiB])
    m0 = h[:3] + v[5:5 + 4099] + h[100:177]
    m1 = v[4 * MiB:9 * MiB] + h[3 * MiB - 7:3 * MiB] + v[1:2]
    assert ms.get("mx0") == m0 and ms.get("mx1") == m1
    dev.fill(b, size)
    ctypes.memset(haddr, 0, 4 * MiB)
    optrs = [[b, haddr + 10, b + 9000], [haddr + 3 * MiB, b + MiB, b + 7 * MiB]]
    oszs = [[2, 4000, 177], [MiB, 4 * MiB + 7, 1]]
    assert ms.batch_get_into_multi_buffers(mkeys, optrs, oszs) == [len(m0), len(m1)]
    assert dev.read(b, 2) == m0[:2] and host.raw[10:4010] == m0[2:4002] and dev.read(b + 9000, 177) == m0[4002:]
    assert host.raw[3 * MiB:4 * MiB] == m1[:MiB] and dev.read(b + MiB, 4 * MiB + 7) == m1[MiB:5 * MiB + 7]
    assert dev.read(b + 7 * MiB, 2) == m1[5 * MiB + 7:] + b"\xee"
    ms.close()


def child_mixed_shm():
    mixed("shm")


def child_mixed_tcp():
    mixed("tcp")


if __name__ == "__main__":
    globals()["child_" + sys.argv[1]]()
    print("ok")
