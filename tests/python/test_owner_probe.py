"""Processes that host a segment (the binding's MooncakeDistributedStore with
global_segment_size > 0) and die or stall without close() (issue 24, item 3).

The server must stop placing on a host the moment its connection closes,
ask the host's own endpoint whether the process lives (owner.c, probe.c),
and unmount at once when it does not: within a second or two, while
owner-ttl is a minute here. The survivors are untouched; a stopped host
(SIGSTOP) keeps everything; a host whose connection is cut while it lives
keeps its segment and takes new objects again once its heartbeat thread
reconnects. The stand-in hosts of tests/unit/owners.tcl cover the probe's
answers one by one; these are the real thing, SIGKILL's exit race included.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import Server

redis = pytest.importorskip("redis")

# A rank of an inference engine: mounts 16 MiB under hostname argv[1] (the
# segment is named argv[1]:port, Mooncake's rule), says "ready <name>",
# then lives until its stdin closes (or a signal ends it).
HOST = r"""
import sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup(sys.argv[1], "P2PHANDSHAKE", 16 << 20, 0, "tcp", "", sys.argv[2])
print("ready " + s.get_hostname() if rc == 0 else "setup failed: %d" % rc, flush=True)
sys.stdin.read()
s.close()
"""

TTL_MS = 60000


@pytest.fixture
def srv():
    s = Server("--owner-ttl", str(TTL_MS), "--notify-keyspace-events", "S")
    yield s
    s.stop()


class Host:
    """A process hosting segment `name`; the binding is imported as the test
    imports it (PYTHONPATH, and a sanitizer build's preloads, are kept)."""

    def __init__(self, srv, name):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-c", HOST, name, srv.addr], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=dict(os.environ))
        line = self.proc.stdout.readline().decode().strip()
        assert line.startswith(f"ready {name}:"), f"host {name}: {line!r}"
        self.name = line.split(" ", 1)[1]

    def signal(self, sig):
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def hosts(srv):
    made = []

    def make(*names):
        out = [Host(srv, n) for n in names]
        made.extend(out)
        return out
    yield make
    for h in made:
        h.stop()


def r_of(srv):
    return redis.Redis(port=srv.port)


def seg_info(r, name):
    """SEGMENT.INFO as a dict of str -> value, or None."""
    flat = r.execute_command("SEGMENT.INFO", name)
    if not flat:
        return None
    d = {}
    for k, v in zip(flat[0::2], flat[1::2]):
        d[k.decode()] = v.decode() if isinstance(v, bytes) else v
    return d


def info_int(r, field):
    return int(r.info("segments")[field])


def replica_segs(r, key):
    """Segment ids of key's replicas (GET.REPLICAS: lease, size, checksum, replica...)."""
    return [int(rep[0]) for rep in r.execute_command("GET.REPLICAS", key)[3:]]


def writer(srv):
    from mooncake.store import MooncakeDistributedStore
    w = MooncakeDistributedStore()
    assert w.setup("writer", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", srv.addr) == 0
    return w


def put_on(w, r, key, seg_name, seg_id):
    from mooncake.store import ReplicateConfig
    assert w.put(key, key.encode() * 64, ReplicateConfig(preferred_segment=seg_name)) == 0
    assert replica_segs(r, key) == [seg_id]


def wait_until(what, cond, timeout=5.0):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.02)
    return time.time() - t0


def lost_keys(sub, want, timeout=5.0):
    """Keys announced on __store@0__:lost until `want` many came (or timeout)."""
    got = []
    deadline = time.time() + timeout
    while len(got) < want and time.time() < deadline:
        m = sub.get_message(timeout=0.1)
        if m and m["type"] == "message":
            payload = m["data"].decode()
            got.append(payload[payload.index(" key=") + 5:])
    # Anything more already queued is a wrong announcement: take it too.
    time.sleep(0.2)
    while (m := sub.get_message(timeout=0.05)) is not None:
        if m["type"] == "message":
            payload = m["data"].decode()
            got.append(payload[payload.index(" key=") + 5:])
    return sorted(got)


@pytest.mark.parametrize("nhosts", [2, 4])
def test_sigkill_unmounts_at_once_others_unaffected(srv, hosts, nhosts):
    names = [f"rank{i}" for i in range(nhosts)]
    procs = hosts(*names)
    names = [p.name for p in procs]  # hostname:port, as Mooncake names them
    r = r_of(srv)
    ids = {n: int(seg_info(r, n)["id"]) for n in names}
    w = writer(srv)
    keys = {n: [f"{n}:k{i}" for i in range(5)] for n in names}
    for n in names:
        for k in keys[n]:
            put_on(w, r, k, n, ids[n])
    sub = r.pubsub()
    sub.subscribe("__store@0__:lost")
    assert sub.get_message(timeout=2)["type"] == "subscribe"

    victim = names[1]
    procs[1].signal(signal.SIGKILL)
    took = wait_until("the killed host's segment unmounted", lambda: seg_info(r, victim) is None)
    assert took < TTL_MS / 1000 / 10, f"{took:.1f} s: that is owner-ttl's doing, not the probe's"
    assert info_int(r, "owners_lost_by_probe") == 1
    assert lost_keys(sub, len(keys[victim])) == sorted(keys[victim])

    # The others: listed, active, their objects where they were and readable.
    for n in names:
        if n == victim:
            continue
        s = seg_info(r, n)
        assert s["id"] == ids[n] and s["state"] == "active" and s["objects"] == len(keys[n])
        for k in keys[n]:
            assert w.get(k) == k.encode() * 64
    # Another client's puts succeed at once; nothing goes to the dead host
    # (its id is never reused, so a replica there would show it).
    w2 = writer(srv)
    for i in range(40):
        assert w2.put(f"after:{i}", b"x" * 4096) == 0
        assert ids[victim] not in replica_segs(r, f"after:{i}")
        assert w2.get(f"after:{i}") == b"x" * 4096
    w2.close()
    w.close()
    sub.close()


def test_sigstop_changes_nothing(srv, hosts):
    (h,) = hosts("stopped")
    r = r_of(srv)
    sid = int(seg_info(r, h.name)["id"])
    w = writer(srv)
    put_on(w, r, "st:before", h.name, sid)
    h.signal(signal.SIGSTOP)
    time.sleep(1.5)
    s = seg_info(r, h.name)
    assert s["id"] == sid and s["state"] == "active"
    assert info_int(r, "owner_probes") == 0  # its connection is open: nothing to ask
    h.signal(signal.SIGCONT)
    put_on(w, r, "st:after", h.name, sid)
    assert w.get("st:before") == b"st:before" * 64
    w.close()


def test_connection_cut_host_stopped_orphaned_until_it_reconnects(srv, hosts):
    """A deterministic orphan: the host is stopped (it cannot reconnect, and
    its listener cannot answer the probe), then its connection is killed."""
    (h,) = hosts("cut")
    r = r_of(srv)
    r.config_set("owner-probe-timeout", 500)
    sid = int(seg_info(r, h.name)["id"])
    w = writer(srv)
    put_on(w, r, "cut:before", h.name, sid)
    h.signal(signal.SIGSTOP)
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # the writer's too
    wait_until("the probe of the stopped host timed out", lambda: info_int(r, "owner_probes_undecided") == 1)
    s = seg_info(r, h.name)
    assert s["id"] == sid and s["state"] == "orphaned"
    assert info_int(r, "owners_orphaned") == 1
    # Puts go elsewhere, a PREFER of the orphan included, and succeed.
    w2 = writer(srv)
    from mooncake.store import ReplicateConfig
    for i in range(20):
        cfg = ReplicateConfig(preferred_segment=h.name) if i % 2 else None
        assert w2.put(f"cut:during{i}", b"d" * 1000, cfg) == 0
        assert sid not in replica_segs(r, f"cut:during{i}")
    h.signal(signal.SIGCONT)
    wait_until("the host reconnected (state active)", lambda: seg_info(r, h.name)["state"] == "active")
    assert int(seg_info(r, h.name)["id"]) == sid
    put_on(w2, r, "cut:after", h.name, sid)
    assert w2.get("cut:before") == b"cut:before" * 64
    assert info_int(r, "owners_lost_by_probe") == 0
    w2.close()
    w.close()


def test_connection_cut_host_alive_keeps_its_segment(srv, hosts):
    (h,) = hosts("blip")
    r = r_of(srv)
    sid = int(seg_info(r, h.name)["id"])
    w = writer(srv)
    put_on(w, r, "blip:k", h.name, sid)
    w.close()
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_until("a probe started", lambda: info_int(r, "owner_probes") == 1)
    # The probe asks the host's unix socket and gets +PONG (unless the
    # heartbeat thread reconnected first, which cancels it): nothing is lost.
    wait_until("the host is back (heartbeat reconnect)", lambda: seg_info(r, h.name)["state"] == "active"
               and info_int(r, "owner_probes_in_flight") == 0)
    assert info_int(r, "owner_probes") == 1
    assert info_int(r, "owners_lost_by_probe") == 0
    assert int(seg_info(r, h.name)["id"]) == sid
    w = writer(srv)
    assert w.get("blip:k") == b"blip:k" * 64
    put_on(w, r, "blip:k2", h.name, sid)
    w.close()
    assert h.proc.poll() is None
