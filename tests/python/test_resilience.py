"""The client when its server fails: a server that accepts and never answers
(stopped, wedged), one that answers garbage, one that closes half-way.
Each call must end in bounded time with an error that says why, and ask
no more of a dead server than its timeout allows.

The misbehaving servers are fakes in this process (FakeServer: a thread
that accepts, answers the client's connect probe as a server without
cluster support does, and then does what its mode says), so the test
controls every byte and counts the connections the client opens.
"""
import socket
import threading
import time

import pytest

from mooncake import _mooncake
import mooncake

# Generous bounds: a call held by the library's default timeouts takes 30 s;
# one held by the timeouts the test sets (300 ms) ends well within these.
BOUND_S = 15


def _commands(buf):
    """Complete RESP commands at the start of buf: (list of commands, rest)."""
    out = []
    while buf.startswith(b"*"):
        try:
            p = buf.index(b"\r\n")
            argc, pos, parts = int(buf[1:p]), p + 2, []
            for _ in range(argc):
                q = buf.index(b"\r\n", pos)
                n = int(buf[pos + 1:q])
                pos = q + 2
                if len(buf) < pos + n + 2:
                    raise ValueError
                parts.append(buf[pos:pos + n])
                pos += n + 2
        except ValueError:
            break
        out.append(parts)
        buf = buf[pos:]
    return out, buf


class FakeServer:
    """Listens on a free port. The connect probe (CLUSTER ...) is answered
    unless mode is "mute"; every other command: "silent" never answers,
    "garbage" answers a line that is not RESP, "hugebulk" a bulk header
    past any length the client takes, "bigbulk" one of 500 MB with ten of
    its bytes, "bigarrays" 8 nested headers of arrays of 16M elements (then
    silence), "drip" a 1000-byte bulk at a byte every 100 ms, "slowread"
    reads 4 KiB every 100 ms (a 4 KiB window) and answers nothing, "noseg" names
    a replica and closes the connection when asked about its segment."""

    def __init__(self, mode):
        self.mode = mode
        self.accepted = 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        if mode == "slowread":  # a small window: the client's bytes wait on the reads below
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.conns.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s):
        buf, slow = b"", False
        try:
            while True:
                if slow:  # 4 KiB every 100 ms, never an answer
                    time.sleep(0.1)
                    if not s.recv(4096):
                        return
                    continue
                d = s.recv(65536)
                if not d:
                    return
                cmds, buf = _commands(buf + d)
                for parts in cmds:
                    if self.mode == "mute":
                        continue
                    if parts[0].upper() == b"CLUSTER":
                        s.sendall(b"-ERR This instance has cluster support disabled\r\n")
                        if self.mode == "slowread":
                            slow = True
                            break
                    elif self.mode == "noseg" and parts[0].upper() == b"GET.REPLICAS":
                        # a lease, a size of 100, no tags, one replica in segment 1
                        s.sendall(b"*4\r\n:60000\r\n:100\r\n*0\r\n*3\r\n:1\r\n:0\r\n:100\r\n")
                    elif self.mode == "noseg":
                        s.close()  # SEGMENT.INFO: the connection closes instead
                        return
                    elif self.mode == "garbage":
                        s.sendall(b"?what\r\n")
                    elif self.mode == "hugebulk":
                        s.sendall(b"$999999999999\r\n")
                    elif self.mode == "bigbulk":  # announced, ten bytes of it sent
                        s.sendall(b"$500000000\r\n" + b"x" * 10)
                    elif self.mode == "bigarrays":  # nested 8 deep, no element yet
                        s.sendall(b"*16000000\r\n" * 8)
                    elif self.mode == "drip":  # a byte every 100 ms until the client goes
                        s.sendall(b"$1000\r\n")
                        while True:
                            s.sendall(b"x")
                            time.sleep(0.1)
        except OSError:
            return

    def close(self):
        self.sock.close()
        with self.lock:
            for s in self.conns:
                s.close()


def bounded(f):
    """f() on a thread, waited for BOUND_S at most: (finished, value or exception)."""
    box = {}

    def run():
        try:
            box["v"] = f()
        except Exception as e:  # noqa: BLE001 - the test looks at it
            box["v"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BOUND_S)
    return not t.is_alive(), box.get("v")


def test_connect_waits_the_timeouts_it_was_given():
    # The first handle of a store was connected with the library's defaults
    # and the store's timeouts applied after: a server that accepts and
    # never answers held connect() for 30 s whatever timeout= said (so did
    # every handle the pool opened later, during an outage).
    fake = FakeServer("mute")
    try:
        done, v = bounded(lambda: _mooncake.Client(fake.addr, connect_ms=300, io_ms=300))
        assert done, "Client() still waiting for the probe's reply"
        assert isinstance(v, ConnectionError) and "timed out" in str(v), v
        done, v = bounded(lambda: mooncake.connect(fake.addr, connect_timeout=0.3, timeout=0.3))
        assert done, "mooncake.connect() still waiting for the probe's reply"
        assert isinstance(v, ConnectionError) and "timed out" in str(v), v
    finally:
        fake.close()


def test_a_silent_or_refusing_address_fails_the_connect_as_documented(refused_addr):
    # PROTOCOL.md, connect_ms: a silent address (its listen backlog full:
    # the SYN is dropped) fails after connect_ms with "timed out", a
    # refusing one at once, neither retried within the connect. Pins what
    # a probe found to hold (no fix): the first with connect_ms 300, under
    # an I/O timeout far longer, ends within the bound.
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(0)
    fill = []
    try:
        for _ in range(3):  # one in the accept queue, then the SYN queue: the next is dropped
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(l.getsockname())
            fill.append(f)
        import select
        assert select.select([], fill[:1], [], 5)[1], "the first connection never got into the queue"
        addr = "127.0.0.1:%d" % l.getsockname()[1]
        done, v = bounded(lambda: _mooncake.Client(addr, connect_ms=300, io_ms=60000))
        assert done and isinstance(v, ConnectionError), v
        assert "timed out" in str(v), v
        done, v = bounded(lambda: _mooncake.Client(refused_addr, connect_ms=60000, io_ms=60000))
        assert done and isinstance(v, ConnectionError) and "refused" in str(v), v
    finally:
        for f in fill:
            f.close()
        l.close()


def test_a_silent_server_is_asked_once_per_call():
    # A command that timed out was sent again on a new connection within
    # the same call, whose deadline had passed: every call on a stopped
    # server waited two I/O timeouts, and opened a connection more.
    fake = FakeServer("silent")
    try:
        c = _mooncake.Client(fake.addr, connect_ms=300, io_ms=300)
        for call in (lambda: c.get(["k"]), lambda: c.put(["k"], [b"v" * 100]), lambda: c.size("k")):
            before = fake.accepted
            done, v = bounded(lambda: (call(), _mooncake.last_error()))  # the error is per thread
            assert done
            rc, why = v[0] if isinstance(v[0], int) else v[0][0], v[1]
            assert rc == _mooncake.ERR_IO and "timed out" in why, v
            # the first call uses the connection connect() opened; each
            # later one opens one, as its predecessor's timed out
            assert fake.accepted - before <= 1, fake.accepted - before
        c.close()
    finally:
        fake.close()


def test_a_session_lost_with_its_server_says_why(fresh_server):
    # A put session's write and end that failed per item (the session's
    # connection lost: its server killed) answered ERR_IO with last_error()
    # empty: the binding kept the library's words only when the call as a
    # whole failed, not when an item did.
    import signal
    import numpy as np
    c = _mooncake.Client(fresh_server.addr, io_ms=2000)
    data = np.ones(4096, np.uint8)
    assert c.register(data.ctypes.data, data.nbytes) == 0
    sess = c.put_session_start(["s"], [4096])[0]
    assert not isinstance(sess, int), sess
    fresh_server.stop(signal.SIGKILL)
    assert c.put_session_write([sess], [[(data.ctypes.data, 0, 4096)]]) == [_mooncake.ERR_IO]
    assert "connection that started the session was lost" in _mooncake.last_error()
    assert c.put_session_end([sess]) == [_mooncake.ERR_IO]
    assert "lost" in _mooncake.last_error(), _mooncake.last_error()
    c.close()


@pytest.mark.parametrize("mode", ["garbage", "hugebulk"])
def test_a_peer_that_is_not_a_mooncake_server_is_a_protocol_error(mode):
    # Bytes that are not RESP broke the connection like a lost one, and a
    # lost one is ridden through: every call reconnected to the peer again
    # and again (28 connections a second) until its I/O timeout, then
    # answered ERR_IO. No reconnect makes the peer speak RESP.
    fake = FakeServer(mode)
    try:
        c = _mooncake.Client(fake.addr, connect_ms=2000, io_ms=2000)
        # (call, the library calls it makes: get() asks each key's size
        # first, one call per key; each may open one connection, since its
        # predecessor's connection broke)
        for call, ncalls in ((lambda: c.get(["k"]), 1), (lambda: c.put(["k"], [b"v" * 100]), 1),
                             (lambda: c.size("k"), 1), (lambda: c.get(["k1", "k2"]), 2),
                             (lambda: c.exists(["k1", "k2"]), 1), (lambda: c.get_into(["k1", "k2"], [
                                 bytearray(8), bytearray(8)], [8, 8]), 1)):
            before = fake.accepted
            done, v = bounded(lambda: (call(), _mooncake.last_error()))
            assert done
            codes = [v[0]] if isinstance(v[0], int) else v[0][1] if isinstance(v[0], tuple) else v[0]
            assert codes and all(rc == _mooncake.ERR_PROTOCOL for rc in codes), v
            assert "protocol error" in v[1], v
            assert fake.accepted - before <= ncalls, (fake.accepted - before, v)
        c.close()
    finally:
        fake.close()


def test_a_segment_that_cannot_be_described_says_why_legibly():
    # A replica whose segment could not be described (SEGMENT.INFO's
    # connection closed) was reported by formatting the handle's error text
    # into itself: last_error() read "segment 1: segment 1: ction closed".
    fake = FakeServer("noseg")
    try:
        c = _mooncake.Client(fake.addr, connect_ms=2000, io_ms=300)
        buf = bytearray(b"\xee" * 200)
        done, v = bounded(lambda: (c.get_into(["k"], [buf], [100]), _mooncake.last_error()))
        assert done
        codes = v[0][1] if isinstance(v[0], tuple) else v[0]
        assert codes == [_mooncake.ERR_IO], v
        assert "segment 1: read: connection closed" in v[1], v
        assert buf == b"\xee" * 200  # nothing was read into it
        c.close()
    finally:
        fake.close()


def test_failed_calls_leave_nothing_behind(fresh_server):
    # Riding through reopens connections and the async worker its clone's:
    # after many calls on a server that is gone, the process holds the
    # descriptors and threads it held after the first few.
    import os
    import signal
    # The short timeouts keep the 400 failing calls fast; on a loaded
    # machine a 20 ms read may also time out while the server is up, so
    # the set-up is retried (a bounded number of times), not asserted.
    def retried(f):
        for _ in range(50):
            try:
                return f()
            except ConnectionError:
                pass
        return f()
    c = retried(lambda: _mooncake.Client(fresh_server.addr, connect_ms=200, io_ms=20))
    st = retried(lambda: mooncake.connect(fresh_server.addr, connect_timeout=0.2, timeout=0.02))
    assert any(c.put(["a"], [b"x" * 1000]) == [0] for _ in range(50))
    retried(lambda: st.put("b", b"y" * 1000))
    fresh_server.stop(signal.SIGKILL)

    def fail_some(n):
        for i in range(n):
            assert c.get(["a"]) == [_mooncake.ERR_IO]
            assert c.put(["a%d" % i], [b"x" * 1000]) == [_mooncake.ERR_IO]
            with pytest.raises(mooncake.ConnectionLostError):
                st.get("b")
            r = st.batch_put_async(["c"], [b"z"]).result()  # per key: the error, not raised
            assert isinstance(r[0], mooncake.ConnectionLostError), r
    fail_some(3)  # whatever the first failures open lazily
    fds, threads = len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))
    fail_some(100)
    assert (len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))) == (fds, threads)
    st.close()
    c.close()


def _vm_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))


def test_a_length_announced_is_not_allocated_before_it_comes():
    # The reply reader reserved what a header announced before any of it
    # came: a peer announcing a 500 MB bulk and sending ten bytes made the
    # client allocate 512 MiB, held until the next call closed the
    # connection. Counted in the process's address space, on the calling
    # thread (no thread's arena in between).
    fake = FakeServer("bigbulk")
    try:
        c = _mooncake.Client(fake.addr, connect_ms=2000, io_ms=300)
        before = _vm_kib()
        assert c.size("k") == _mooncake.ERR_IO
        assert "timed out" in _mooncake.last_error(), _mooncake.last_error()
        grown = _vm_kib() - before
        assert grown < 32 * 1024, "%d KiB reserved for a reply that sent 10 bytes" % grown
        c.close()
    finally:
        fake.close()


def test_a_reply_that_drips_fails_in_bounded_time():
    # io_ms bounded each wait, not the reply: a server that sends a byte of
    # a 1000-byte reply every 100 ms (io_ms 300) held the call for 100 s. A
    # reply now has io_ms to come, and another io_ms per 64 KiB that came.
    fake = FakeServer("drip")
    try:
        c = _mooncake.Client(fake.addr, connect_ms=2000, io_ms=300)
        done, v = bounded(lambda: (c.size("k"), _mooncake.last_error()))
        assert done, "the call still reading the drip"
        assert v[0] == _mooncake.ERR_IO and "timed out" in v[1], v
        c.close()
    finally:
        fake.close()


def test_array_headers_are_not_allocated_before_their_elements_come():
    # Each array header reserved its element table at once: 8 nested
    # headers of 16M elements, and nothing else, made the client hold
    # 1 GiB while it waited for the first element (freed when the read
    # timed out, so the address space is watched while the call waits).
    fake = FakeServer("bigarrays")
    try:
        c = _mooncake.Client(fake.addr, connect_ms=2000, io_ms=1000)
        box = {}
        before = _vm_kib()
        t = threading.Thread(target=lambda: box.setdefault("rc", c.size("k")), daemon=True)
        t.start()
        peak, end = 0, time.monotonic() + BOUND_S
        while t.is_alive() and time.monotonic() < end:
            peak = max(peak, _vm_kib() - before)
            time.sleep(0.005)
        t.join(0)
        assert box.get("rc") == _mooncake.ERR_IO, box
        # the call's thread (its stack, its malloc arena) is 72 MiB at most
        assert peak < 256 * 1024, "%d KiB reserved while no element had come" % peak
        c.close()
    finally:
        fake.close()


def test_a_peer_that_reads_slowly_fails_a_large_write_in_bounded_time():
    # SO_SNDTIMEO bounds one sendmsg, and each took a few KiB within it: a
    # peer reading 4 KiB every 100 ms (io_ms 300) held a call sending 32 MiB
    # (a key that long here: nothing before the server refuses it) for
    # over ten minutes. A write has a reply's budget: io_ms, and another
    # per 64 KiB taken.
    fake = FakeServer("slowread")
    try:
        c = _mooncake.Client(fake.addr, connect_ms=2000, io_ms=300)
        key = "k" * (32 << 20)
        done, v = bounded(lambda: (c.size(key), _mooncake.last_error()))
        assert done, "the call still writing to the slow reader"
        assert v[0] == _mooncake.ERR_IO and "timed out" in v[1], v
        c.close()
    finally:
        fake.close()
