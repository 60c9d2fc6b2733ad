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

        h.signal(signal.SIGSTOP)
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
        h.signal(signal.SIGSTOP)
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
