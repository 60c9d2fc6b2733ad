"""A rank that dies leaves no trap: when a process hosting a segment is
killed (SIGKILL, no close()), the server stops placing objects in its
segment as soon as its connection drops, reports the objects that lived
only there as lost, and the surviving ranks' puts -- and those of the rank
restarted under the same hostname -- succeed at once, without waiting for
owner-ttl (set to a minute here, so only the fast path can pass). A rank
killed in the middle of its saves (put sessions open, a batch in flight)
leaves no half-written object and no key held from the others."""
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


@pytest.mark.parametrize("n", [3, 4])
def test_tp_rank_killed_mid_batch(server, n):
    """n tensor-parallel ranks, each a process with its own store and
    segment, save their blocks (keys of their own and MLA keys all share);
    the last is SIGKILLed while it holds put sessions on the next MLA pages
    and saves a batch. The others then find every object whole or absent,
    save the pages the dead rank was writing (its puts went with its
    connection) and their own lost blocks, and the rank restarted under the
    same hostname sees a full prefix hit over every rank."""
    server.cli("REMOVE.ALL")
    ctx = mp.get_context("spawn")
    q, barrier, dead, done = ctx.Queue(), ctx.Barrier(n, timeout=150), ctx.Event(), ctx.Event()
    # The victim talks on a queue of its own: killed while its queue's
    # feeder holds the queue's lock, it would wedge every other writer.
    victim_q = ctx.Queue()

    def start(rank, **opts):
        p = ctx.Process(target=engine_ranks.tp_rank_killed_mid_batch,
                        args=(rank, n, server.addr, victim_q if rank == n - 1 and not opts else q, barrier,
                              dead, done, opts))
        p.start()
        return p

    procs, back = [start(r) for r in range(n)], None
    try:
        got = [q.get(timeout=180) for _ in range(n - 1)] + [victim_q.get(timeout=180)]
        assert [g[0] for g in got] == ["ready"] * (n - 1) + ["mid"], "\n".join(f"rank {r}: {s}\n{i}" for s, r, i in got)
        vname = got[-1][2]
        os.kill(procs[-1].pid, signal.SIGKILL)
        procs[-1].join(30)
        # Until the server has seen the owner go (at once, or within its
        # probe), the dead segment's objects still read: the survivors start
        # from the state an engine finds once the rank is known dead
        deadline = time.time() + 30
        while vname in segment_names(server):
            assert time.time() < deadline, "the dead rank's segment stayed"
            time.sleep(0.05)
        dead.set()
        for _ in range(n - 1):
            status, rank, info = q.get(timeout=120)
            assert status == "ok" and info == "survived", f"rank {rank}:\n{info}"
        back = start(n - 1, rejoin=True)
        status, rank, info = q.get(timeout=120)
        assert status == "ok" and info == "rejoined", info
        back.join(30)
        assert back.exitcode == 0
        done.set()
        for _ in range(n - 1):
            status, rank, info = q.get(timeout=60)
            assert status == "ok" and info == "closed", f"rank {rank}:\n{info}"
    finally:
        done.set()
        for p in procs + [back] * (back is not None):
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs[:-1]] == [0] * (n - 1)
