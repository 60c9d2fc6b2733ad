"""A rank that dies leaves no trap: when a process hosting a segment is
killed (SIGKILL, no close()), the server stops placing objects in its
segment as soon as its connection drops, reports the objects that lived
only there as lost, and the surviving ranks' puts -- and those of the rank
restarted under the same hostname -- succeed at once, without waiting for
owner-ttl (set to a minute here, so only the fast path can pass)."""
import multiprocessing as mp
import os
import signal
import time

import pytest

import engine_ranks
from conftest import Server
from mooncake.store import MooncakeDistributedStore


@pytest.fixture
def slow_ttl_server():
    s = Server("--owner-ttl", "60000")
    yield s
    s.stop()


def start_host(ctx, addr, nobj=8):
    q, hold = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=engine_ranks.hosting_rank, args=(q, addr, nobj, hold))
    p.start()
    status, info = q.get(timeout=60)
    assert status == "ok", info
    return p, info, hold


def segment_names(server):
    out = []
    for seg in server.cli("SEGMENTS"):
        d = dict(zip(seg[::2], seg[1::2]))
        out.append(d[b"name"].decode())
    return out


@pytest.mark.parametrize("nhosts", [2, 4])
def test_killed_rank_leaves_placement_at_once(slow_ttl_server, nhosts):
    srv = slow_ttl_server
    ctx = mp.get_context("spawn")
    hosts = [start_host(ctx, srv.addr) for _ in range(nhosts)]
    names = [h[1] for h in hosts]
    assert set(names) <= set(segment_names(srv))
    victim, vname, _ = hosts[-1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    # one round trip: the server has read the victim's closed connection
    # before it reads anything sent after this
    srv.cli("PING")
    survivor = MooncakeDistributedStore()
    assert survivor.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 << 20, "tcp", "", srv.addr) == 0
    # puts spread over every segment: none may land in the dead one
    rcs = [survivor.put(f"after:{i}", b"x" * 65536) for i in range(64)]
    assert rcs == [0] * 64, rcs
    assert all(survivor.get(f"after:{i}") == b"x" * 65536 for i in range(64))
    # within a second or two (not owner-ttl), the segment is gone and the
    # objects that lived only there are no more
    deadline = time.time() + 5
    while time.time() < deadline and vname in segment_names(srv):
        time.sleep(0.05)
    assert vname not in segment_names(srv)
    assert survivor.batch_is_exist([f"dead:{vname}:{i}" for i in range(8)]) == [0] * 8
    # the others' objects are untouched
    for _, name, _ in hosts[:-1]:
        assert survivor.batch_is_exist([f"dead:{name}:{i}" for i in range(8)]) == [1] * 8
    # the rank restarts under the same hostname: a name of its own, puts work
    p2, name2, hold2 = start_host(ctx, srv.addr)
    assert name2 != vname and name2 in segment_names(srv)
    hold2.set()
    p2.join(30)
    for p, _, hold in hosts[:-1]:
        hold.set()
        p.join(30)
    survivor.close()
