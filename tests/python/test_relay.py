"""Relayed reads from a real host process that stops (issue 25, finding 2).

A plain GET of a value held only in a segment a client process hosts (the
binding's MooncakeDistributedStore with global_segment_size > 0, served by
libmooncake's mc_host) is read from that process by the server. A
SIGSTOPped host must hold up only the clients that asked for its values:
everyone else is served, and pipelined relayed GETs wait in their own
client's queue instead of adding up in the event loop. tests/unit/relay.tcl
covers the cases one by one with a stand-in host; this is the real thing.
Nothing here is timed: "served meanwhile" is a reply that arrives while the
server's own counters say the relayed reads are still in flight.
"""
import os
import signal
import socket

import pytest

from conftest import Server
from test_owner_probe import Host, put_on, r_of, seg_info, wait_until, writer

redis = pytest.importorskip("redis")


@pytest.fixture
def srv():
    # Long enough that only SIGCONT ends the wait.
    s = Server("--remote-get-timeout", "60000")
    yield s
    s.stop()


def get_request(*keys):
    return b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k.encode()) for k in keys)


def read_bulks(sock, n):
    """n bulk-string replies off a raw connection."""
    buf = b""
    out = []
    sock.settimeout(30)
    while len(out) < n:
        while b"\r\n" not in buf:
            buf += sock.recv(65536)
        line, rest = buf.split(b"\r\n", 1)
        assert line[:1] == b"$", line
        size = int(line[1:])
        while len(rest) < size + 2:
            rest += sock.recv(65536)
        out.append(rest[:size])
        buf = rest[size + 2:]
    return out


def stat(r, field):
    return int(r.info()[field])


def stop_host(h):
    """SIGSTOP, then wait until every thread of the host is stopped: kill()
    returns before they are, and one still running could answer."""
    h.signal(signal.SIGSTOP)

    def all_stopped():
        tasks = os.listdir(f"/proc/{h.proc.pid}/task")
        states = []
        for t in tasks:
            try:
                states.append(open(f"/proc/{h.proc.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass
        return states and all(st == "T" for st in states)

    wait_until("the host's threads stopped", all_stopped)


def test_stopped_host_holds_up_only_the_clients_reading_from_it(srv):
    h = Host(srv, "relayhost")
    try:
        r = r_of(srv)
        sid = int(seg_info(r, h.name)["id"])
        w = writer(srv)
        put_on(w, r, "rk:1", h.name, sid)
        put_on(w, r, "rk:2", h.name, sid)
        w.close()
        # Relayed from the live host, byte for byte.
        assert r.get("rk:1") == b"rk:1" * 64
        assert r.mget("rk:2", "nokey", "rk:1") == [b"rk:2" * 64, None, b"rk:1" * 64]

        stop_host(h)
        a = socket.create_connection(("127.0.0.1", srv.port))
        b = socket.create_connection(("127.0.0.1", srv.port))
        a.sendall(get_request("rk:1", "rk:2", "rk:1"))  # pipelined
        b.sendall(get_request("rk:2"))
        wait_until("both clients' reads started", lambda: stat(r, "remote_get_in_flight") == 2)
        # Everyone else is served while the host is stopped.
        assert r.ping()
        assert r.set("local", "v") and r.get("local") == b"v"
        assert r.execute_command("DBSIZE") == 3
        # Still waiting: one read per client, a's later GETs queued behind its first.
        assert stat(r, "remote_get_in_flight") == 2
        assert stat(r, "blocked_clients") == 2

        h.signal(signal.SIGCONT)
        assert read_bulks(a, 3) == [b"rk:1" * 64, b"rk:2" * 64, b"rk:1" * 64]
        assert read_bulks(b, 1) == [b"rk:2" * 64]
        a.close()
        b.close()
        assert stat(r, "remote_get_in_flight") == 0
        assert stat(r, "blocked_clients") == 0
    finally:
        h.stop()


def test_client_gone_while_its_host_is_stopped_leaves_nothing(srv):
    h = Host(srv, "relayhost2")
    try:
        r = r_of(srv)
        sid = int(seg_info(r, h.name)["id"])
        w = writer(srv)
        put_on(w, r, "rg:1", h.name, sid)
        w.close()
        stop_host(h)
        a = socket.create_connection(("127.0.0.1", srv.port))
        a.sendall(get_request("rg:1"))
        wait_until("the read started", lambda: stat(r, "remote_get_in_flight") == 1)
        a.close()
        wait_until("the read was cancelled", lambda: stat(r, "remote_get_in_flight") == 0)
        assert stat(r, "blocked_clients") == 0
        h.signal(signal.SIGCONT)
        # The host serves the next read normally.
        assert r.get("rg:1") == b"rg:1" * 64
    finally:
        h.stop()


def test_unix_endpoint_relay(srv):
    """A host reachable only on an abstract unix socket (what mc_host also
    listens on): the relay connects there, without a resolver, and the
    bytes come back exact. The host is a stand-in thread answering SEG.READ
    from a pattern."""
    import threading

    mem = bytes((i * 7 + 3) & 0xFF for i in range(1 << 20))
    name = f"mc-relay-test-{os.getpid()}"
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind("\0" + name)
    lsock.listen(8)
    served = []

    def serve():
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    break
                argv = []
                for _ in range(int(line[1:])):
                    size = int(f.readline()[1:])
                    argv.append(f.read(size + 2)[:size])
                if argv[0].upper() == b"SEG.READ":
                    off, size = int(argv[2]), int(argv[3])
                    # Recorded before the reply: once the reply is out the
                    # test may look at `served` (it must find this read).
                    served.append(size)
                    conn.sendall(b"$%d\r\n%s\r\n" % (size, mem[off:off + size]))
                else:
                    conn.sendall(b"-ERR unknown command\r\n")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        r = r_of(srv)
        r.execute_command("MOUNT", "ux", "1mb", "ENDPOINT", f"unix://@{name}", "OWNER", "uxhost")
        rep = r.execute_command("PUT.START", "ux:1", 3000, "PREFER", "ux")[0]
        off = int(rep[1])
        r.execute_command("PUT.END", "ux:1")
        assert r.get("ux:1") == mem[off:off + 3000]
        assert r.getrange("ux:1", 10, 19) == mem[off + 10:off + 20]
        assert served == [3000, 10]
    finally:
        lsock.close()
