"""What one hostile or careless connection can make the server hold: each
thing that grows with a client's use has a bound, and is counted in INFO,
so the tests count instead of timing. Raw sockets, so that nothing reads
a reply the test does not mean to read."""
import socket
import time

import pytest

from conftest import Server, resp as enc


def cmd(srv, *args):
    """One command on a connection of its own; the reply, parsed just
    enough for these tests (status, error, integer, bulk)."""
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(enc(*args))
        f = s.makefile("rb")
        head = f.readline()
        if head[:1] == b"$":
            n = int(head[1:])
            return None if n < 0 else f.read(n + 2)[:-2]
        if head[:1] == b":":
            return int(head[1:])
        return head[1:-2]  # status or error, without its sign


def cmd_map(srv, *args):
    """A reply that is a flat array of name, integer pairs (RESP2 map)."""
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(enc(*args))
        f = s.makefile("rb")
        n = int(f.readline()[1:])
        out = {}
        for _ in range(n // 2):
            f.readline()
            name = f.readline()[:-2].decode()
            out[name] = int(f.readline()[1:])
        return out


def info(srv, field):
    for line in cmd(srv, "INFO", "all").decode().split("\r\n"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    raise KeyError(field)


def pauses(srv):
    return int(info(srv, "client_reply_pauses"))


def client_line(srv, cid):
    return cmd(srv, "CLIENT", "LIST", "ID", cid).decode()


def client_field(line, name):
    for kv in line.split():
        if kv.startswith(name + "="):
            return kv.split("=", 1)[1]
    raise KeyError(name)


def wait_until(cond, what, tries=500):
    for _ in range(tries):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def read_bulk(f):
    head = f.readline()
    assert head.startswith(b"$"), head
    n = int(head[1:])
    data = f.read(n + 2)
    return data[:-2]


@pytest.fixture
def srv():
    s = Server("--client-reply-pause-limit", "1mb", pool="64mb")
    yield s
    s.stop()


def unread_client(srv):
    """A connection with a small receive buffer, so the kernel soaks up
    little of what the server sends it; its id."""
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    c.connect(("127.0.0.1", srv.port))
    c.sendall(enc("CLIENT", "ID"))
    f = c.makefile("rb")
    cid = int(f.readline()[1:])
    return c, f, cid


def test_replies_not_read_pause_the_client_and_it_resumes_when_it_reads(srv):
    value = bytes(range(256)) * 400  # 100 KB: sent from the pool, counted as unread
    assert cmd(srv, "SET", "big", value) == b"OK"
    n = 200  # 20 MB of replies, far more than the kernel's buffers hold
    c, f, cid = unread_client(srv)
    before = pauses(srv)
    c.sendall(enc("GET", "big") * n + enc("PING"))
    # The server stops running the client's commands once 1 MB of replies
    # wait (before the fix it ran all of them and held 20 MB).
    wait_until(lambda: pauses(srv) > before, "the pause")
    line = client_line(srv, cid)
    # What it holds for the client is the limit and about one reply more.
    assert int(client_field(line, "omem")) < (1 << 20) + 2 * len(value), line
    assert int(client_field(line, "omem")) >= 1 << 20, line
    assert pauses(srv) == before + 1
    assert "qbuf=0 " not in line  # what it sent waits, unparsed
    # Reading resumes it: every reply arrives, whole and in order.
    for _ in range(n):
        assert read_bulk(f) == value
    assert f.readline() == b"+PONG\r\n"
    assert "cmd=ping" in client_line(srv, cid)
    c.close()


def test_a_paused_client_that_keeps_sending_is_closed_at_the_query_buffer_limit(srv):
    assert cmd(srv, "CONFIG", "SET", "client-query-buffer-limit", "1mb") == b"OK"
    assert cmd(srv, "SET", "big", b"x" * 100000) == b"OK"
    c, f, cid = unread_client(srv)
    closed = int(info(srv, "client_query_buffer_limit_disconnections"))
    req = enc("GET", "big") * 1000
    c.settimeout(10)
    try:
        for _ in range(200):  # 6 MB of requests, never reading
            c.sendall(req)
    except OSError:
        pass  # closed while we were still sending
    wait_until(lambda: int(info(srv, "client_query_buffer_limit_disconnections")) > closed, "the close")
    assert cmd(srv, "CLIENT", "LIST", "ID", cid) == b""
    assert cmd(srv, "PING") == b"PONG"
    c.close()


def test_subscribers_are_not_paused(srv):
    # A subscriber's output is the pubsub class's to bound: its commands
    # run with any number of messages unread (it must be able to
    # UNSUBSCRIBE), and it is closed only past its limit.
    c, f, cid = unread_client(srv)
    c.sendall(enc("SUBSCRIBE", "ch"))
    wait_until(lambda: "flags=P" in client_line(srv, cid), "the subscription")
    before = pauses(srv)
    for _ in range(30):
        assert cmd(srv, "PUBLISH", "ch", b"m" * 100000) == 1
    assert int(client_field(client_line(srv, cid), "omem")) > 1 << 20
    c.sendall(enc("UNSUBSCRIBE", "ch"))
    wait_until(lambda: "flags=P" not in client_line(srv, cid), "the UNSUBSCRIBE to run")
    assert pauses(srv) == before
    c.close()


def test_a_deep_pipeline_behind_a_pause_is_moved_o_1_times(srv):
    # Each resume runs a few commands; the unparsed tail behind them must
    # not be moved down every time (that was O(n^2) for the pipeline).
    assert cmd(srv, "SET", "v", b"x" * 8000) == b"OK"
    c, f, cid = unread_client(srv)
    n = 100000
    req = enc("GET", "v")
    assert cmd(srv, "DEBUG", "VISITS", "RESET") == b"OK"
    c.sendall(req * n)
    for _ in range(n):
        assert read_bulk(f) == b"x" * 8000
    visits = cmd_map(srv, "DEBUG", "VISITS")
    assert visits["querybuf-moved"] <= 2 * n * len(req), visits
    c.close()


def test_an_idle_partial_request_keeps_only_its_bytes(srv):
    # Slowloris: a byte now and then, the request never ended. The 32 KiB
    # the read made room for goes back once the client is idle; the
    # request still completes.
    conns = []
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", srv.port))
        c.sendall(b"*1\r\n$4\r\nPI")
        conns.append(c)

    def free_of_partial_clients():
        lines = [l for l in cmd(srv, "CLIENT", "LIST").decode().split("\n") if " qbuf=2 " in l and "cmd=NULL" in l]
        return [int(client_field(l, "qbuf-free")) for l in lines]

    assert len(free_of_partial_clients()) == 20
    # The cron visits every client once a second; idle means 2 s.
    wait_until(lambda: max(free_of_partial_clients()) < 1024, "the idle query buffers to shrink", tries=1000)
    for c in conns:
        c.sendall(b"NG\r\n")
        assert c.recv(16) == b"+PONG\r\n"
        c.close()
