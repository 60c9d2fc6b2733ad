"""The disk refusing the log's writes, for real rather than through DEBUG
AOF-WRITE-ERROR: the log's file past the server's RLIMIT_FSIZE (set on the
running server with prlimit(2), as an operator's limits or a quota would
be). The server must refuse writes it cannot persist (-MISCONF), say so in
INFO and its log, keep serving reads, take writes again once the disk
does, and lose nothing it acknowledged."""
import os
import resource
import time

import redis

from conftest import LoggedServer


def incr_path(srv):
    d = os.path.join(srv.dir, "appendonlydir")
    with open(os.path.join(d, "appendonly.aof.manifest")) as f:
        incrs = [line.split()[1] for line in f if line.split()[-1] == "i"]
    return os.path.join(d, incrs[-1])


def test_file_size_limit_refuses_writes_and_recovers():
    srv = LoggedServer("--appendfsync", "everysec")
    try:
        r = redis.Redis(port=srv.port)
        for j in range(5):
            r.set(f"before:{j}", j)
        size = os.path.getsize(incr_path(srv))
        pid = srv.proc.pid
        # The soft limit only: the hard one stays, so it can be lifted again.
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size + 50000, resource.RLIM_INFINITY))
        val = b"v" * 10000
        acked, refused = [], None
        for j in range(100):  # 1 MB: far past the limit
            try:
                r.set(f"k:{j}", val)
                acked.append(j)
            except redis.ResponseError as e:
                refused = str(e)
                break
        # Before SIGXFSZ was ignored, the signal killed the server here (a
        # ConnectionError above), with nothing in its log.
        assert refused is not None and refused.startswith("MISCONF"), refused
        assert 2 <= len(acked) <= 10
        assert r.info("persistence")["aof_last_write_status"] == "err"
        assert "AOF: write error: File too large" in srv.log()
        assert r.get("before:3") == b"3"  # reads go on
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        for _ in range(200):  # the retry runs from the event loop: bounded wait
            if r.info("persistence")["aof_last_write_status"] == "ok":
                break
            time.sleep(0.02)
        assert r.set("after", 1)
        assert "AOF: writes succeed again" in srv.log()
        r.close()
        srv.kill9()
        srv.start()
        r = redis.Redis(port=srv.port)
        for j in acked:
            assert r.get(f"k:{j}") == val, f"k:{j} acknowledged, lost"
        assert r.get("after") == b"1" and r.get("before:4") == b"4"
        r.close()
    finally:
        srv.stop()
