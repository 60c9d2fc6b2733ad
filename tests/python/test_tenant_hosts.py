"""A tenant attacking the bytes of another tenant's hosted segment.

Tenant bob's process hosts a segment (mc_mount) holding bob's object; the
host serves any range of it to whoever presents its token or bob's
credentials. Tenant alice, on the same machine and knowing the host's
endpoints, tries every way in: the peer protocol without a token, with her
own segment's token, with her own credentials, SHM.ATTACH on the unix
endpoint, and a segment of her own mounted over bob's endpoints so that the
server relays her GET there. Each is refused and bob's bytes stay his.
"""
import secrets
import socket

import pytest
import redis

import mooncake
from conftest import Server, resp


def send(sock, *args):
    sock.sendall(resp(*args))


def line(sock):
    """One reply line (a status, an error, or a bulk's header)."""
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            return buf + b"<closed>"
        buf += chunk
    return buf[:-2]


def endpoint(sock_uri):
    if sock_uri.startswith("tcp://"):
        host, port = sock_uri[len("tcp://"):].rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=5)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("\0" + sock_uri[len("unix://@"):])
    return s


@pytest.fixture
def tenants():
    srv = Server()
    try:
        srv.cli("ACL", "SETUSER", "alice", "on", ">pa", "~tenantA:*", "+@all")
        srv.cli("ACL", "SETUSER", "bob", "on", ">pb", "~tenantB:*", "+@all")
        bob = mooncake.connect(srv.addr, user="bob", password="pb")
        sid = bob._c.mount(4 << 20, "bob-seg")
        assert sid > 1
        secret = b"bob-secret-" * 500
        bob.put("tenantB:k", secret, prefer="bob-seg")
        info = srv.cli("OBJECT.INFO", "tenantB:k")
        assert info[info.index(b"replicas") + 1] == [[sid, 0, len(secret)]]
        seg = srv.cli("SEGMENT.INFO", sid)
        eps = [e.decode() for e in seg[seg.index(b"endpoints") + 1]]
        alice = redis.Redis(port=srv.port, username="alice", password="pa")
        yield srv, alice, bob, sid, eps, secret
        alice.close()
        bob.close()
    finally:
        srv.stop()


def test_a_tenant_gets_no_token_or_rkey_of_another_tenants_hosted_segment(tenants):
    srv, alice, bob, sid, eps, secret = tenants
    assert alice.execute_command("SEGMENT.TOKEN", sid) is None
    assert alice.execute_command("SEGMENT.TOKEN", "bob-seg") is None
    assert alice.execute_command("SEGMENT.INFO", sid) is None
    assert all(b"bob-seg" not in s for s in alice.execute_command("SEGMENTS"))


@pytest.mark.parametrize("which", ["tcp", "unix"])
def test_another_tenants_host_refuses_her_without_its_token(tenants, which):
    srv, alice, bob, sid, eps, secret = tenants
    ep = next(e for e in eps if e.startswith(which + "://"))
    # Her own segment, with a token she chose: good for her segment only.
    mine = secrets.token_hex(16)
    my_id = alice.execute_command("MOUNT", "alice-seg", "1mb", "OWNER", "alice-w", "TOKEN", mine,
                                  "ENDPOINT", "tcp://127.0.0.1:1")
    s = endpoint(ep)
    try:
        send(s, "SEG.READ", sid, 0, len(secret))
        assert line(s).startswith(b"-NOAUTH")
        send(s, "SEG.AUTH", sid, mine)
        assert line(s).startswith(b"-WRONGTOKEN")
        send(s, "SEG.AUTH", my_id, mine)
        assert line(s) == b"-ERR no such segment"
        send(s, "AUTH", "alice", "pa")
        assert line(s).startswith(b"-WRONGPASS")
        send(s, "AUTH", "pa")
        assert line(s).startswith(b"-WRONGPASS")
        send(s, "SEG.WRITE", sid, 0, b"X" * 100)
        assert line(s).startswith(b"-NOAUTH")
        if which == "unix":
            send(s, "SHM.ATTACH", sid)
            assert line(s).startswith(b"-NOAUTH")
        send(s, "SEG.READ", sid, 0, len(secret))
        assert line(s).startswith(b"-NOAUTH")
        send(s, "SEG.READV", sid, 0, 10)
        assert line(s).startswith(b"-NOAUTH")
    finally:
        s.close()
    assert bob.get("tenantB:k") == secret


def test_a_segment_of_her_own_over_another_tenants_endpoints_relays_nothing_of_its(tenants):
    srv, alice, bob, sid, eps, secret = tenants
    # alice mounts "her" segment at bob's endpoints, with her own token, and
    # puts an object there without writing it: a relayed GET of it would
    # read bob's host at offset 0, where bob's object lies.
    endpoints = []
    for e in eps:
        endpoints += ["ENDPOINT", e]
    mine = secrets.token_hex(16)
    my_id = alice.execute_command("MOUNT", "alice-over-bob", "4mb", "OWNER", "alice-w", "TOKEN", mine, *endpoints)
    rep = alice.execute_command("PUT.START", "tenantA:k", len(secret), "PREFER", "alice-over-bob")
    assert rep == [[my_id, 0, len(secret)]]
    assert alice.execute_command("PUT.END", "tenantA:k") == b"OK"
    with pytest.raises(redis.ResponseError) as e:
        alice.execute_command("GET", "tenantA:k")
    msg = str(e.value)
    assert msg.startswith("REMOTE cannot read the value"), msg
    # The server did reach bob's host, whose segment ids and tokens are its own.
    assert msg.count("ERR no such segment") == len(eps), msg
    with pytest.raises(redis.ResponseError):
        alice.execute_command("GETRANGE", "tenantA:k", 0, 10)
    assert bob.get("tenantB:k") == secret
