"""mooncake.connect / Store: round trips of every kind of buffer, batches,
prefix lookups, threads sharing a handle, non-blocking batches and every
error the issue names (each a clear exception, never a crash)."""
import asyncio
import os
import signal
import threading

import numpy as np
import pytest

import mooncake

SIZES = [1, 2, 7, 4096, 65537, 1 << 20, (16 << 20) + 3, 64 << 20]


def rand_bytes(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("n", SIZES)
def test_bytes_round_trip(store, n):
    v = rand_bytes(n, n)
    store.put(f"b{n}", v)
    assert store.get(f"b{n}") == v
    assert store.size(f"b{n}") == n


@pytest.mark.parametrize("n", [1, 4096, 1 << 20, 64 << 20])
def test_get_into_bytearray_and_memoryview(store, n):
    v = rand_bytes(n, 3)
    store.put("k", bytearray(v))
    out = bytearray(n + 5)
    assert store.get_into("k", out) == n
    assert out[:n] == v and out[n:] == b"\0" * 5
    mv = memoryview(bytearray(n))
    assert store.get_into("k", mv) == n
    assert mv.tobytes() == v


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
def test_numpy_round_trip(store, dtype):
    a = (np.random.default_rng(1).standard_normal(300_001) * 100).astype(dtype)
    store.put("np", a)
    out = np.zeros_like(a)
    assert store.get_into("np", out) == a.nbytes
    assert np.array_equal(a, out)


@pytest.mark.parametrize("n", [1, 1000, 1 << 20, 16 << 20, 64 << 20])
def test_torch_round_trip(store, n):
    torch = pytest.importorskip("torch")
    for dtype in (torch.float16, torch.bfloat16, torch.float32)[: 1 if n > 16 << 20 else 3]:
        t = torch.randn(n // 4 + 1, dtype=dtype)
        store.put("t", t)
        out = torch.zeros_like(t)
        assert store.get_into("t", out) == t.numel() * t.element_size()
        assert torch.equal(t, out)
        assert store.get("t") == t.view(torch.uint8).numpy().tobytes()


def test_torch_non_contiguous_refused(store):
    torch = pytest.importorskip("torch")
    t = torch.randn(8, 8).t()
    with pytest.raises(ValueError, match="contiguous"):
        store.put("t", t)


def test_cuda_tensor_says_why(store):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        t = torch.randn(1024, device="cuda")
        store.put("cuda", t)
        out = torch.zeros_like(t)
        assert store.get_into("cuda", out) == 4096
        assert torch.equal(t, out)
    else:
        pytest.skip("no CUDA device here: torch.cuda.is_available() is False")


def test_scatter_gather(store):
    parts = [b"head", b"", rand_bytes(100_000, 5), np.arange(10, dtype=np.int32)]
    store.put("sg", parts)
    whole = b"".join(bytes(memoryview(p)) for p in parts)
    assert store.get("sg") == whole
    a, b, c = bytearray(3), bytearray(50_000), bytearray(len(whole))
    assert store.get_into("sg", [a, b, c]) == len(whole)
    assert bytes(a + b + c[: len(whole) - 50_003]) == whole


def test_put_replace_and_no_replace(store):
    store.put("r", b"one")
    store.put("r", b"two")
    assert store.get("r") == b"two"
    with pytest.raises(mooncake.ExistsError):
        store.put("r", b"three", replace=False)
    assert store.get("r") == b"two"


def test_missing_key_is_keyerror(store):
    with pytest.raises(KeyError):
        store.get("missing")
    with pytest.raises(mooncake.NotFoundError) as e:
        store.get_into("missing", bytearray(4))
    assert e.value.code == mooncake._mooncake.ERR_NOT_FOUND
    assert "no such key" in str(e.value)
    assert store.remove("missing") is False


def test_exists_remove(store):
    store.put("e1", b"x")
    assert store.exists("e1") is True
    assert store.exists_many(["e1", "nope", "e1"]) == [True, False, True]
    assert store.remove("e1") is True
    assert store.exists("e1") is False


def test_prefix_length(store):
    keys = [f"chunk:{i}" for i in range(10)]
    store.batch_put(keys[:6], [bytes([i]) * 100 for i in range(6)])
    assert store.prefix_length(keys) == 6
    assert store.prefix_length(keys[:3]) == 3
    assert store.prefix_length(["nothing"] + keys) == 0
    store.remove("chunk:2")
    assert store.prefix_length(keys) == 2
    assert store.prefix_length(keys, lease=True) == 2


def test_batches(store):
    keys = [f"bk{i}" for i in range(50)]
    vals = [rand_bytes(1000 + i * 997, i) for i in range(50)]
    assert store.batch_put(keys, vals) == [None] * 50
    bufs = [bytearray(len(v)) for v in vals]
    assert store.batch_get_into(keys, bufs) == [len(v) for v in vals]
    assert [bytes(b) for b in bufs] == vals
    got = store.batch_get(keys + ["nope"])
    assert got[:50] == vals and got[50] is None
    res = store.batch_get_into(["bk0", "nope"], [bytearray(5000), bytearray(5)], raise_on_error=False)
    assert res[0] == len(vals[0]) and isinstance(res[1], mooncake.NotFoundError)
    with pytest.raises(mooncake.NotFoundError):
        store.batch_get_into(["nope"], [bytearray(5)])


def test_batch_put_same_key_twice_last_wins(store):
    assert store.batch_put(["dup", "other", "dup"], [b"first", b"o", b"last"]) == [None, None, None]
    assert store.get("dup") == b"last"


def test_register_twice_unregister_once(store):
    buf = np.zeros(4096, dtype=np.uint8)
    addr = buf.ctypes.data
    store.register(addr, buf.nbytes)
    store.register(addr, buf.nbytes)
    store.unregister(addr)
    store.put_from("twice", addr, 100)          # still registered once
    store.unregister(addr)
    with pytest.raises(mooncake.InvalidArgumentError):
        store.put_from("twice", addr, 100)


def test_too_small_buffer(store):
    store.put("big", b"x" * 1000)
    with pytest.raises(mooncake.BufferTooSmallError):
        store.get_into("big", bytearray(999))
    with pytest.raises(ValueError):  # BufferTooSmallError is a ValueError too
        store.get_into("big", [bytearray(500), bytearray(499)])


def test_read_only_target_refused(store):
    store.put("ro", b"abc")
    with pytest.raises(TypeError, match="writable"):
        store.get_into("ro", b"xyz")
    a = np.zeros(3, dtype=np.uint8)
    a.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        store.get_into("ro", a)


def test_bad_values_refused(store):
    with pytest.raises(TypeError):
        store.put("k", 12345)
    with pytest.raises(TypeError):
        store.put("k", "a str is not bytes")
    with pytest.raises(TypeError):
        store.put(None, b"x")
    with pytest.raises(ValueError):
        store.put("", b"x")
    with pytest.raises(TypeError, match="contiguous"):
        store.put("k", np.arange(20)[::2])
    with pytest.raises(ValueError):
        store.batch_put(["a", "b"], [b"x"])
    with pytest.raises(mooncake.InvalidArgumentError):
        store.put("k", b"")


def test_raw_addresses_need_registration(store):
    buf = np.zeros(1 << 16, dtype=np.uint8)
    addr = buf.ctypes.data
    with pytest.raises(mooncake.InvalidArgumentError, match="register"):
        store.put_from("raw", addr, 100)
    store.register(addr, buf.nbytes)
    buf[:100] = 7
    store.put_from("raw", addr, 100)
    assert store.get("raw") == b"\x07" * 100
    assert store.get_into_addr("raw", addr + 1000, 100) == 100
    assert (buf[1000:1100] == 7).all()
    # outside the registered range, a wild pointer, a size that overflows
    for a, n in [(addr + buf.nbytes - 10, 100), (16, 100), (addr, 1 << 62)]:
        with pytest.raises(mooncake.InvalidArgumentError):
            store.put_from("raw", a, n)
        with pytest.raises(mooncake.InvalidArgumentError):
            store.get_into_addr("raw", a, n)
    store.unregister(addr)
    with pytest.raises(mooncake.InvalidArgumentError):
        store.put_from("raw", addr, 100)


def test_register_checks_the_memory(store):
    with pytest.raises(mooncake.Error):
        store.register(0x10, 4096)        # not mapped, not device memory
    with pytest.raises(mooncake.Error):
        store.register(0, 10)
    ro = np.frombuffer(b"\0" * 8192, dtype=np.uint8)  # bytes: a read-only mapping? no: heap
    store.register(ro.ctypes.data, ro.nbytes)       # readable memory registers
    store.unregister(ro.ctypes.data)
    with pytest.raises(mooncake.NotFoundError):
        store.unregister(ro.ctypes.data)


def test_threads_share_one_store(store):
    errors = []
    n_threads, per = 8, 40

    def work(t):
        try:
            for i in range(per):
                v = rand_bytes(10_000 + i, t * 1000 + i)
                store.put(f"th{t}:{i}", v)
                out = bytearray(len(v))
                assert store.get_into(f"th{t}:{i}", out) == len(v)
                assert out == v
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert 1 <= store._c.handles <= n_threads + 1


def test_gil_released_during_transfers(store):
    # While one thread moves 64 MiB values, another keeps running Python.
    v = rand_bytes(64 << 20, 9)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)

    c = threading.Thread(target=count)
    c.start()
    try:
        for _ in range(3):
            store.put("gil", v)
            store.get("gil")
    finally:
        stop.set()
        c.join()
    assert len(ticks) > 1000


def test_async_batch(store):
    keys = [f"as{i}" for i in range(64)]
    vals = [rand_bytes(64 << 10, i) for i in range(64)]
    fut = store.batch_put_async(keys, vals)
    # the store stays usable while the batch runs
    store.put("during", b"x")
    assert store.get("during") == b"x"
    assert fut.result(timeout=30) == [None] * 64
    assert fut.done()
    bufs = [bytearray(64 << 10) for _ in keys]
    fut = store.batch_get_into_async(keys + ["nope"], bufs + [bytearray(1)])
    res = fut.result()
    assert res[:64] == [64 << 10] * 64 and isinstance(res[64], mooncake.NotFoundError)
    assert [bytes(b) for b in bufs] == vals


def test_async_item_errors_say_why(store):
    # A key that failed alone in an async batch carried its code only
    # ("invalid argument"): the library kept the reason for a batch that
    # failed as a whole, and the future dropped even that. A synchronous
    # call's error says why (last_error()); engines log what they get.
    fut = store.batch_put_async(["why-ok", "k" * 5000], [b"1", b"2"])  # max-key-size is 4096
    res = fut.result(timeout=30)
    assert res[0] is None and isinstance(res[1], mooncake.InvalidArgumentError), res
    assert "key is too long" in str(res[1]), str(res[1])
    bufs = [bytearray(8), bytearray(8)]
    res = store.batch_get_into_async(["why-ok", "why-missing"], bufs).result(timeout=30)
    assert res[0] == 1 and isinstance(res[1], mooncake.NotFoundError), res  # a miss: no reason added


def test_async_await(store):
    async def main():
        keys = [f"aw{i}" for i in range(16)]
        vals = [rand_bytes(1 << 20, i) for i in range(16)]
        res = await store.batch_put_async(keys, vals)
        assert res == [None] * 16
        bufs = [bytearray(1 << 20) for _ in keys]
        sizes = await store.batch_get_into_async(keys, bufs)
        assert sizes == [1 << 20] * 16
        assert [bytes(b) for b in bufs] == vals
    asyncio.run(main())


def test_async_bad_address_fails_only_that_item(store):
    buf = np.zeros(4096, dtype=np.uint8)
    store.register(buf.ctypes.data, buf.nbytes)
    try:
        fut = store._c.put_async(["ok1", "bad"], [b"abc", 16], [0, 100])
        res = fut if isinstance(fut, list) else fut.results()
        assert res[0] == 0 and res[1] == mooncake._mooncake.ERR_INVALID
    finally:
        store.unregister(buf.ctypes.data)


def test_closed_store(server):
    s = mooncake.connect(server.addr)
    s.put("c", b"1")
    s.close()
    assert s.closed
    for call in (lambda: s.put("c", b"2"), lambda: s.get("c"), lambda: s.exists("c"),
                 lambda: s.get_into("c", bytearray(1)), lambda: s.remove("c")):
        with pytest.raises(mooncake.ClosedError):
            call()
    s.close()  # twice is fine


def test_context_manager(server):
    with mooncake.connect(server.addr) as s:
        s.put("cm", b"v")
        assert s.get("cm") == b"v"
    assert s.closed


def test_connect_failures(server, refused_addr):
    with pytest.raises(ConnectionError):
        mooncake.connect(refused_addr, connect_timeout=1)


def test_password(fresh_server):
    pw = "s3cret"
    mooncake.connect(fresh_server.addr).close()  # no password yet
    import redis
    redis.Redis(port=fresh_server.port).config_set("requirepass", pw)
    with pytest.raises(PermissionError):
        mooncake.connect(fresh_server.addr, password="wrong")
    with mooncake.connect(fresh_server.addr, password=pw) as s:
        s.put("p", b"v")
        assert s.get("p") == b"v"


def test_acl_tenant(fresh_server):
    import redis
    r = redis.Redis(port=fresh_server.port)
    r.execute_command("ACL", "SETUSER", "tenantA", "on", ">pa", "~tenantA:*", "+@all")
    with mooncake.connect(fresh_server.addr, user="tenantA", password="pa") as s:
        s.put("tenantA:x", b"mine")
        assert s.get("tenantA:x") == b"mine"
        with pytest.raises(mooncake.AuthError):
            s.put("tenantB:x", b"theirs")
        with pytest.raises(mooncake.AuthError):
            s.get("tenantB:x")


def test_server_gone(fresh_server):
    s = mooncake.connect(fresh_server.addr, timeout=2)
    s.put("g", b"v")
    fresh_server.stop(signal.SIGKILL)
    with pytest.raises(mooncake.ConnectionLostError):
        s.put("g", b"w")
    with pytest.raises(mooncake.ConnectionLostError):
        s.get("g")
    s.close()


def test_env_defaults(server, monkeypatch):
    monkeypatch.setenv("MOONCAKE_URI", server.addr)
    with mooncake.connect() as s:
        s.put("env", b"1")
        assert s.get("env") == b"1"


def test_unix_socket(tmp_path):
    from conftest import Server
    sock = str(tmp_path / "mc.sock")
    srv = Server("--unixsocket", sock)
    try:
        with mooncake.connect("unix://" + sock) as s:
            s.put("u", b"over unix")
            assert s.get("u") == b"over unix"
    finally:
        srv.stop()


def test_errors_are_typed():
    assert issubclass(mooncake.NotFoundError, KeyError)
    assert issubclass(mooncake.ConnectionLostError, ConnectionError)
    assert issubclass(mooncake.AuthError, PermissionError)
    for cls in (mooncake.NotFoundError, mooncake.NoSpaceError, mooncake.ClosedError):
        assert issubclass(cls, mooncake.Error)
    assert os.environ.get("PYTHONPATH") is None or "mooncake" in mooncake.__file__


def test_a_batch_larger_than_the_servers_pending_put_limit(fresh_server):
    """A batch holds all its keys' puts in progress between BATCH.PUT.START
    and BATCH.PUT.END, and a connection may hold client-max-pending-puts
    (16384) of them: libmooncake puts a larger batch in rounds, so every key
    lands, and the server's limit is never met (store_puts_nospace and the
    -LIMIT refusals stay at 0)."""
    n = 20000
    keys = [f"big:{i}" for i in range(n)]
    vals = [i.to_bytes(4, "little") * 8 for i in range(n)]
    with mooncake.connect(fresh_server.addr) as s:
        assert s.batch_put(keys, vals) == [None] * n
        bufs = [bytearray(32) for _ in range(n)]
        assert s.batch_get_into(keys, bufs) == [32] * n
        assert [bytes(b) for b in bufs] == vals
    info = fresh_server.cli("INFO", "store")
    assert int(info["store_puts_ended"]) == n and int(info["store_puts_pending"]) == 0
