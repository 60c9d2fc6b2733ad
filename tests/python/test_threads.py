"""One Store shared by many threads, as SGLang's HiCache shares one store
between its I/O threads and LMCache / vLLM's connector run thread pools and
asyncio executors: every op kind at once on own and shared keys (byte-exact),
each thread's last_error() its own, and close() while the others are
inside calls (each call ends cleanly, nothing hangs). Bounded: fixed counts,
joins with a timeout."""
import hashlib
import struct
import threading

import pytest

import mooncake
from mooncake import _mooncake

N_THREADS = 12
ITERS = 30


def own_value(t, k, i):
    n = 1 + (t * 7919 + k * 104729 + i * 1299709) % 40_000
    return hashlib.sha256(f"{t}:{k}:{i}".encode()).digest() * (n // 32) + bytes(n % 32)


def shared_value(key, version):
    """A value naming its key and version, with a digest: a torn read fails."""
    body = hashlib.sha256(f"{key}:{version}".encode()).digest() * (1 + version % 500)
    return struct.pack("<QQ", key, version) + hashlib.sha256(body).digest() + body


def shared_ok(v, key):
    k, version = struct.unpack_from("<QQ", v)
    return k == key and v == shared_value(key, version)


def run_threads(target, n):
    errors = []

    def wrap(t):
        try:
            target(t)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(f"thread {t}: {e!r}")

    ts = [threading.Thread(target=wrap, args=(t,), daemon=True) for t in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts), "a thread is stuck"
    return errors


def test_every_op_from_12_threads_on_one_store(store):
    for k in range(3):
        store.put(f"tt:shared:{k}", shared_value(k, 0))

    def work(t):
        keys = [f"tt:{t}:{k}" for k in range(4)]
        for i in range(ITERS):
            op = (t + i) % 6
            if op == 0:
                v = own_value(t, 0, i)
                store.put(keys[0], v)
                assert store.get(keys[0]) == v
            elif op == 1:
                try:
                    store.put(f"tt:shared:{i % 3}", shared_value(i % 3, t * 1000 + i))
                except mooncake.ExistsError:
                    pass  # another thread's put of that key is in flight
                k = (i + t) % 3
                assert shared_ok(store.get(f"tt:shared:{k}"), k)
            elif op == 2:
                vals = [own_value(t, k, i) for k in range(4)]
                store.batch_put(keys, vals)
                assert store.exists_many(keys) == [True] * 4
                bufs = [bytearray(len(v)) for v in vals]
                assert store.batch_get_into(keys, bufs) == [len(v) for v in vals]
                assert [bytes(b) for b in bufs] == vals
            elif op == 3:
                store.put(keys[1], b"gone soon")
                assert store.remove(keys[1])
                assert not store.exists(keys[1])
                with pytest.raises(mooncake.NotFoundError):
                    store.get(keys[1])
            elif op == 4:
                vals = [own_value(t, k, i + 1000) for k in range(4)]
                assert store.batch_put_async(keys, vals).result(timeout=30) == [None] * 4
                bufs = [bytearray(len(v)) for v in vals]
                assert store.batch_get_into_async(keys, bufs).result(timeout=30) == [len(v) for v in vals]
                assert [bytes(b) for b in bufs] == vals
            else:
                # This thread's own failure, in words only it would cause.
                v = own_value(t, 2, i)
                store.put(keys[2], v)
                cap = 1 + t
                assert store._c.get_into([keys[2]], [bytearray(cap)])[0] == _mooncake.ERR_TOO_SMALL
                assert _mooncake.last_error() == f"value is {len(v)} bytes, buffer {cap}"

    assert run_threads(work, N_THREADS) == []


def test_close_while_threads_are_inside_calls(server):
    s = mooncake.connect(server.addr)
    v = bytes(range(256)) * 256
    s.put("tc:v", v)
    started = threading.Barrier(N_THREADS + 1, timeout=30)
    counts = [0] * N_THREADS

    def work(t):
        started.wait()
        out = bytearray(len(v))
        while True:
            try:
                s.put(f"tc:{t}", v)
                assert s.get_into("tc:v", out) == len(v) and out == v
                counts[t] += 1
            except mooncake.ClosedError:
                return

    threads = [threading.Thread(target=lambda t=t: errors_of(work, t), daemon=True) for t in range(N_THREADS)]
    errors = []

    def errors_of(fn, t):
        try:
            fn(t)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(f"thread {t}: {e!r}")

    for t in threads:
        t.start()
    started.wait()
    for _ in range(30_000):  # until the threads are well into their calls (bounded)
        if sum(counts) >= N_THREADS or errors:
            break
        threading.Event().wait(0.001)
    s.close()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a call hung across close()"
    assert errors == []
    assert s.closed
    with pytest.raises(mooncake.ClosedError):
        s.get("tc:v")
