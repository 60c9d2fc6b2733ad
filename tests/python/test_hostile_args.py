"""Bad arguments and bad timing, as an engine's bug would pass them: the
store lives in the inference server's process, so a crash here takes the
server down. Every call must answer misuse with its documented code or a
TypeError/ValueError/OverflowError, never crash, hang, store wrong bytes or
change what is stored. Each test is a case that once did one of those.

What could crash runs in a child interpreter (isolated()), so a regression
fails its test instead of ending the suite."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import mooncake
import mooncake.store as ms
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

INVALID, NOT_FOUND, RPC_FAIL = ms.INVALID_PARAMS, ms.OBJECT_NOT_FOUND, ms.RPC_FAIL


def new_store(server, local=16 << 20, **kw):
    s = MooncakeDistributedStore()
    assert s.setup("h", "P2PHANDSHAKE", 0, local, "tcp", "", server.addr, **kw) == 0
    return s


def isolated(server, code, timeout=60):
    """Runs code in a child python3 with ADDR set; its output, after
    checking that it exited normally (a crash is a failed assertion here)."""
    env = dict(os.environ, ADDR=server.addr, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"child exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    return p.stdout


# -- get_ranges / get_into_ranges -------------------------------------------------

def test_get_ranges_sized_from_what_the_sequence_yields(server):
    # A sequence whose len() is smaller than what it yields once wrote
    # ranges past the array sized from len(): a heap overflow.
    out = isolated(server, """
        import os, numpy as np
        from mooncake.store import MooncakeDistributedStore
        s = MooncakeDistributedStore()
        assert s.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", os.environ["ADDR"]) == 0
        buf = np.zeros(1 << 16, np.uint8); ptr = buf.ctypes.data
        assert s.register_buffer(ptr, buf.nbytes) == 0
        assert s.put("rk", b"0123456789") == 0
        class Liar:
            def __len__(self): return 1
            def __iter__(self): return iter([(ptr, 0, 1)] * 5000)
        class Few:
            def __len__(self): return 1000
            def __iter__(self): return iter([(ptr, 0, 2), (ptr + 8, 2, 3)])
        try:
            s._c.get_ranges(["rk"], [Liar()])
            print("no error")
        except ValueError as e:
            print("ValueError")
        print(s._c.get_ranges(["rk"], [Few()]), bytes(buf[:2]), bytes(buf[8:11]))
        s.close()
    """)
    assert out.split("\n")[:2] == ["ValueError", "[[2, 3]] b'01' b'234'"]


def test_put_session_ranges_sized_from_what_the_sequence_yields(server):
    # put_session_write had the same shape as get_ranges before its fix:
    # each session's ranges counted with len() and then copied as yielded.
    out = isolated(server, """
        import os, numpy as np
        from mooncake.store import MooncakeDistributedStore
        s = MooncakeDistributedStore()
        assert s.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", os.environ["ADDR"]) == 0
        buf = np.arange(1 << 16, dtype=np.uint8); ptr = buf.ctypes.data
        assert s.register_buffer(ptr, buf.nbytes) == 0
        sess = s._c.put_session_start(["ps"], [16])
        class Liar:
            def __len__(self): return 1
            def __iter__(self): return iter([(ptr, 0, 1)] * 5000)
        class Few:
            def __len__(self): return 1000
            def __iter__(self): return iter([(ptr, 0, 2), (ptr + 8, 2, 3)])
        try:
            s._c.put_session_write(sess, [Liar()])
            print("no error")
        except ValueError:
            print("ValueError")
        print(s._c.put_session_write(sess, [Few()]), s._c.put_session_write(sess, [[(ptr, 1 << 64, 1)]]))
        print(s._c.put_session_end(sess), s.get("ps")[:5])
        s.close()
    """)
    assert out.split("\n")[:3] == ["ValueError", "[5] [-6]", "[0] b'\\x00\\x01\\x08\\t\\n'"], out


def test_range_numbers_are_not_masked(server):
    # (address, offset, length) were read modulo 2^64: a destination offset
    # of 2^64 wrote at the buffer's start, -1 became the largest offset.
    s = new_store(server)
    buf = np.zeros(4096, np.uint8)
    ptr = buf.ctypes.data
    assert s.register_buffer(ptr, buf.nbytes) == 0
    assert s.put("rn", b"abcdefgh") == 0
    # a number that is no size_t is refused as upstream's pybind refuses it
    # (TypeError, the whole call), before any range is read
    for dst, src, n in ((1 << 64, 0, 4), (16, -1, 4), (16, 0, (1 << 64) + 4)):
        with pytest.raises(TypeError):
            s.get_into_ranges([ptr], [["rn"]], [[[8, dst]]], [[[2, src]]], [[[3, n]]])
    assert not buf.any()
    # a range past the object fails alone; a numpy integer is a number
    assert s.get_into_ranges([ptr], [["rn"]], [[[np.int64(8), 16]]], [[[2, 7]]], [[[3, 4]]]) == \
        [[[3, INVALID]]]
    assert bytes(buf[8:11]) == b"cde" and not buf[16:].any()
    with pytest.raises(TypeError):
        s._c.get_ranges(["rn"], [[(ptr, 0.5, 4)]])
    with pytest.raises(TypeError):
        s._c.get_ranges(["rn"], [[(ptr, 0)]])
    s.close()


def test_a_session_ended_while_other_threads_use_it(fresh_server):
    # put_session_end handed the session to the library without the GIL
    # and forgot it only after: a write or a second end queued behind it
    # on the session handle read the session the first end had freed (ASan:
    # heap-use-after-free in finishLocked), and could end another session
    # that got its address. The server is stopped so that a long write on
    # another session holds the handle while the calls queue behind it.
    pid = fresh_server.proc.pid
    out = isolated(fresh_server, f"""
        import os, signal, threading, time
        import numpy as np
        from mooncake import _mooncake
        c = _mooncake.Client(os.environ["ADDR"], transport=2)
        big = np.ones(32 << 20, np.uint8)
        data = np.arange(1024, dtype=np.uint32).view(np.uint8)
        assert c.register(big.ctypes.data, big.nbytes) == 0 and c.register(data.ctypes.data, 4096) == 0
        s_hold, s = c.put_session_start(["hold", "race"], [big.nbytes, 4096])
        assert not isinstance(s_hold, int) and not isinstance(s, int)
        r, words = {{}}, {{}}
        def run(name, f):
            r[name] = f()
            words[name] = _mooncake.last_error()
        ts = [threading.Thread(target=run, args=("hold", lambda: c.put_session_write(
                  [s_hold], [[(big.ctypes.data, 0, big.nbytes)]]))),
              threading.Thread(target=run, args=("w", lambda: c.put_session_write(
                  [s], [[(data.ctypes.data, 0, 4096)]]))),
              threading.Thread(target=run, args=("e1", lambda: c.put_session_end([s]))),
              threading.Thread(target=run, args=("e2", lambda: c.put_session_end([s])))]
        os.kill({pid}, signal.SIGSTOP)
        try:
            for t in ts:
                t.start()
                time.sleep(0.2)
        finally:
            os.kill({pid}, signal.SIGCONT)
        for t in ts:
            t.join(60)
        assert r["hold"] == [big.nbytes] and c.put_session_revoke([s_hold]) == [0], r
        # one end published it, the other found it gone; the write came
        # before the end (its bytes are the object's) or after (refused)
        assert sorted([r["e1"][0], r["e2"][0]]) == [_mooncake.ERR_INVALID, 0], r
        bad = "e1" if r["e1"][0] else "e2"
        assert "not an open put session" in words[bad], words
        got = c.get(["race"])[0]
        assert (r["w"], got) in (([4096], data.tobytes()), ([_mooncake.ERR_INVALID], bytes(4096))), (r, got[:16])
        # gone for good: no later call hands it to the library
        assert c.put_session_write([s], [[(data.ctypes.data, 0, 8)]]) == [_mooncake.ERR_INVALID]
        assert c.put_session_revoke([s]) == [_mooncake.ERR_INVALID]
        c.close()
        print(r["w"], r["e1"], r["e2"])
    """)
    assert out.split("\n")[0] in ("[4096] [0] [-6]", "[4096] [-6] [0]", "[-6] [0] [-6]", "[-6] [-6] [0]"), out


# -- futures ------------------------------------------------------------------------

def test_op_released_while_other_threads_wait(fresh_server):
    # release() freed the library's op while another thread was still in
    # results() on it (use after free, then the item codes read from freed
    # memory): a future that two threads wait on crashed the process. The
    # server is stopped so that the ops are still running when released.
    out = isolated(fresh_server, f"""
        import os, signal, threading, time
        import mooncake
        from mooncake import _mooncake
        c = _mooncake.Client(os.environ["ADDR"])
        st = mooncake.connect(os.environ["ADDR"])
        os.kill({fresh_server.proc.pid}, signal.SIGSTOP)
        threading.Timer(1.0, os.kill, ({fresh_server.proc.pid}, signal.SIGCONT)).start()
        op = c.put_async(["raw"], [b"x" * 4096])
        fut = st.batch_put_async(["f1", "f2"], [b"y" * 4096, b"z" * 10])
        got = {{}}
        def wait_raw():
            got["raw"] = op.results()
        def wait_fut(i):
            got[i] = fut.result()
        ts = [threading.Thread(target=wait_raw)] + [threading.Thread(target=wait_fut, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        op.release()   # while wait_raw waits
        op.release()
        try:
            op.results()
            print("no error")
        except ValueError:
            print("released")
        for t in ts:
            t.join(60)
        print(got["raw"], got[0], got[1], got[2], fut.result(timeout=-1), fut.done())
        print(c.get(["raw"])[0][:1], st.get("f1")[:1], st.get("f2"))
        st.close()
        c.close()
    """)
    assert out.split("\n")[:3] == ["released", "[0] [None, None] [None, None] [None, None] [None, None] True",
                                   "b'x' b'y' b'zzzzzzzzzz'"]


# -- registration -----------------------------------------------------------------------

def test_registration_reads_whole_lines_of_the_maps(server, tmp_path):
    # register() checks host memory in /proc/self/maps, read in 512-byte
    # pieces: the rest of a long line (a mapped file's path) was read as a
    # line of its own, so a file whose path spells "lo-hi rw-p" at byte 511
    # made memory mapped nowhere registrable, and a get into it a segfault.
    out = isolated(server, f"""
        import ctypes, mmap, os
        from mooncake import _mooncake
        c = _mooncake.Client(os.environ["ADDR"])
        gone = mmap.mmap(-1, 1 << 20)
        lo = ctypes.addressof(ctypes.c_char.from_buffer(gone))
        gone.close()  # an address range mapped nowhere now
        fake = f"{{lo:x}}-{{lo + (1 << 20):x}} rw-p 00000000 00:00 0"
        keep = []
        def line_of(path):
            fd = os.open(path, os.O_RDWR)
            m = mmap.mmap(fd, 4096)
            os.close(fd)
            keep.append(m)
            at = ctypes.addressof(ctypes.c_char.from_buffer(m))
            return next(l.rstrip("\\n") for l in open("/proc/self/maps") if int(l.split("-")[0], 16) == at)
        d = {str(tmp_path)!r}
        probe = os.path.join(d, "p")
        open(probe, "wb").write(bytes(4096))
        col = len(line_of(probe)) - len(probe)  # where a line's path starts
        dirs, left = d, 511 - col - len(d) - 1  # bytes of path before the fake entry, after d/
        while left > 200:
            dirs = os.path.join(dirs, "a" * 150)
            left -= 151
        os.makedirs(dirs, exist_ok=True)
        path = os.path.join(dirs, "c" * left + fake)
        open(path, "wb").write(bytes(4096))
        assert line_of(path).find(fake) == 511
        print(c.register(lo, 4096) < 0)
        assert c.put(["mk"], [b"z" * 4096]) == [0]
        print(c.get_into(["mk"], [lo], [4096]))
        c.close()
    """)
    assert out.split("\n")[:2] == ["True", f"[{mooncake._mooncake.ERR_INVALID}]"], out


# -- tensors ------------------------------------------------------------------------------

def test_a_packed_tensor_is_refused_not_overrun(server):
    # A quint4x2 tensor (two 4-bit values a byte) has numel() values of
    # element_size() 1 over a storage half that size, and its uint8 view
    # -- what the Store hands the extension -- claims the whole count: a
    # get into it wrote past the end of the allocation (ASan: heap-buffer-
    # overflow in the shm copy), a put sent bytes from past it.
    pytest.importorskip("torch")
    out = isolated(server, """
        import os, warnings
        import torch
        import mooncake
        warnings.simplefilter("ignore")
        st = mooncake.connect(os.environ["ADDR"])
        st.put("q4", b"\\xff" * 64)
        q = torch.quantize_per_tensor(torch.zeros(64), 1.0, 0, torch.quint4x2)
        for what, call in (("get_into", lambda: st.get_into("q4", q)), ("put", lambda: st.put("q4b", q)),
                           ("batch", lambda: st.batch_get_into(["q4"], [[q]])),
                           ("async", lambda: st.batch_get_into_async(["q4"], [q]).result())):
            try:
                print(what, call())
            except ValueError as e:
                print(what, "refused" if "storage" in str(e) else e)
        print(q.int_repr().sum().item(), st.exists("q4b"))
        # tensors whose bytes are theirs still go, offsets and all
        t = torch.zeros(128, dtype=torch.uint8)[64:]
        print(st.get_into("q4", t), bytes(t.numpy()) == b"\\xff" * 64)
        st.close()
    """)
    assert out.split("\n")[:6] == ["get_into refused", "put refused", "batch refused", "async refused", "0 False",
                                    "64 True"], out


# -- BufferHandle ---------------------------------------------------------------------

def test_buffer_handle_checks_what_it_is_given(server):
    # mooncake.store.BufferHandle is public and callable: BufferHandle(n,
    # owner, address) took any address (a handle onto unmapped memory: a
    # segfault at the first read; a writable window onto an immutable
    # bytes), and BufferHandle(n) handed out the allocator's old bytes.
    out = isolated(server, """
        import ctypes, mmap
        from mooncake.store import BufferHandle
        for bad in ((16, b"abc", 1), (16, bytearray(8), 0), (16, object(), 1)):
            try:
                BufferHandle(*bad)
                print("accepted", bad)
            except (TypeError, ValueError) as e:
                print(type(e).__name__)
        junk = [bytes([0xA5]) * 4000 for _ in range(64)]
        del junk
        print(all(not any(bytes(BufferHandle(n))) for n in (1, 100, 4000, 1 << 20)))
        b = b"immutable bytes!"
        at = ctypes.cast(b, ctypes.c_void_p).value
        h = BufferHandle(8, b, at + 8)
        print(bytes(h), memoryview(h).readonly)
        try:
            BufferHandle(9, b, at + 8)
        except ValueError:
            print("past the end")
        m = mmap.mmap(-1, 4096)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        h = BufferHandle(96, m, base + 4000)
        memoryview(h)[:3] = b"abc"
        print(m[4000:4003], h.ptr() == base + 4000)
        try:
            m.close()  # the window holds its owner: no unmapping under it
        except BufferError:
            print("held")
        del h
        m.close()
    """)
    assert out.split("\n")[:8] == ["ValueError", "ValueError", "TypeError", "True", "b'e bytes!' True",
                                    "past the end", "b'abc' True", "held"], out


def test_ctrl_c_interrupts_a_futures_wait_not_its_batch(fresh_server):
    # Future.result() waited for the whole batch in one C call without the
    # GIL, and Python runs signal handlers only between its own steps: with
    # the server gone, Ctrl-C did nothing until the I/O timeout. The server
    # is stopped here until a watchdog resumes it; the KeyboardInterrupt
    # must come before that, and the batch must still finish after it.
    pid = fresh_server.proc.pid
    out = isolated(fresh_server, f"""
        import os, signal, threading
        import mooncake
        st = mooncake.connect(os.environ["ADDR"], timeout=60)
        resumed = threading.Event()
        def resume():
            resumed.set()
            os.kill({pid}, signal.SIGCONT)
        os.kill({pid}, signal.SIGSTOP)
        watchdog = threading.Timer(10.0, resume)
        watchdog.start()
        fut = st.batch_put_async(["cc0", "cc1"], [b"a" * 4096, b"b" * 100])
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            fut.result()
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", "after" if resumed.is_set() else "before", "the server resumed")
        watchdog.cancel()
        resume()
        print(fut.result(), st.get("cc0") == b"a" * 4096, st.get("cc1") == b"b" * 100)
        st.close()
    """)
    assert out.split("\n")[:2] == ["interrupted before the server resumed", "[None, None] True True"], out


# -- the drop-in's arguments ------------------------------------------------------

def test_numpy_integers_are_addresses_not_values(server):
    # A NumPy integer has the buffer protocol: put_from(key, np.uint64(ptr),
    # n) stored the 8 bytes of the pointer itself, and NumPy sizes were
    # refused. Mooncake's binding takes them as the numbers they are.
    s = new_store(server)
    buf = np.zeros(4096, np.uint8)
    ptr = buf.ctypes.data
    assert s.register_buffer(ptr, buf.nbytes) == 0
    buf[:32] = np.arange(32)
    assert s.put_from("np1", np.uint64(ptr), 10) == 0
    assert s.get("np1") == bytes(range(10))
    assert s.get_into("np1", np.int64(ptr + 1000), np.int64(10)) == 10
    assert bytes(buf[1000:1010]) == bytes(range(10))
    assert s.batch_put_from(["np2", "np3"], np.array([ptr, ptr + 16], np.uint64), np.array([4, 4])) == [0, 0]
    assert s.get_batch(["np2", "np3"]) == [bytes(range(4)), bytes(range(16, 20))]
    assert s.batch_put_from_multi_buffers(["np4"], [[np.int64(ptr), ptr + 4]], [[np.int32(2), 2]]) == [0]
    assert s.batch_get_into_multi_buffers(["np4"], [[np.int64(ptr + 2000)]], [[np.int64(4)]]) == [4]
    assert bytes(buf[2000:2004]) == bytes([0, 1, 4, 5])
    assert s.batch_put_from_async(["np5"], [np.int64(ptr)], [np.int64(3)]).result() == [0]
    assert s.batch_get_into_async(["np5"], [np.int64(ptr + 3000)], [np.int64(3)]).result() == [3]
    # what is not an integer of 0 .. 2**64-1 is a TypeError, as upstream's
    # pybind raises it, and nothing is stored
    for bad in (float(ptr), b"12345678", None, 1 << 64, -1):
        for call in (lambda: s.put_from("bad", bad, 8), lambda: s.batch_put_from(["bad"], [bad], [8]),
                     lambda: s.batch_put_from_async(["bad"], [bad], [8]), lambda: s.get_into("np1", bad, 8),
                     lambda: s.put_from("bad", ptr, bad)):
            with pytest.raises(TypeError):
                call()
    assert s.put_from("bad", ptr, 1 << 63) == INVALID  # a size_t, but no such memory
    assert s.is_exist("bad") == 0
    s.close()


def test_bad_config_is_invalid_params(server):
    # A config that is not a ReplicateConfig raised AttributeError; an
    # async put refused by its config answered -1 (its code mapped twice).
    # Now: a TypeError naming it, as upstream's pybind raises.
    s = new_store(server)
    buf = np.zeros(64, np.uint8)
    assert s.register_buffer(buf.ctypes.data, 64) == 0
    for cfg in ({}, "x", 5, object()):
        with pytest.raises(TypeError, match="config"):
            s.put("cfg", b"v", cfg)
        with pytest.raises(TypeError, match="config"):
            s.batch_put_from(["cfg"], [buf.ctypes.data], [8], cfg)
    for bad in (dict(replica_num=-1), dict(preferred_segment=5)):  # fields of the wrong type: when set
        with pytest.raises(TypeError):
            ReplicateConfig(**bad)
    for bad in (dict(replica_num=10 ** 9), dict(dfs_replica_num=1)):  # more than this store can place
        cfg = ReplicateConfig(**bad)
        assert s.put("cfg", b"v", cfg) == INVALID
        assert s.batch_put_from_async(["cfg"], [buf.ctypes.data], [8], cfg).result() == [INVALID]
    assert s.is_exist("cfg") == 0
    s.close()


def test_calls_racing_close_answer_codes(server):
    # Every method read self._c twice (the check, then the call): close() on
    # another thread in between made the call raise AttributeError on None.
    s = new_store(server)
    stop, errors = threading.Event(), []

    def worker(i):
        while not stop.is_set():
            try:
                s.put(f"rc{i}", b"v")
                s.get(f"rc{i}")
                s.is_exist("x")
                s.batch_is_exist(["a"])
                s.get_buffer(f"rc{i}")
                s.get_size("x")
                s.remove("x")
                s.batch_get_into(["a"], [0], [4])
                s.batch_put_from_async(["a"], [0], [4]).result()
                s.batch_get_replica_desc(["a"])
            except Exception as e:  # noqa: BLE001 -- any exception is the failure
                errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for _ in range(5):  # close while they run, and set up again
        threading.Event().wait(0.02)
        s.close()
        threading.Event().wait(0.01)
        assert s.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", server.addr) == 0
    stop.set()
    for t in threads:
        t.join(30)
    s.close()
    assert errors == []
