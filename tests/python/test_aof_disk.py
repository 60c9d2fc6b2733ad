"""The disk refusing the log's writes, for real rather than through DEBUG
AOF-WRITE-ERROR: the log's file past the server's RLIMIT_FSIZE (set on the
running server with prlimit(2), as an operator's limits or a quota would
be). The server must refuse writes it cannot persist (-MISCONF), say so in
INFO and its log, keep serving reads, take writes again once the disk
does, and lose nothing it acknowledged."""
import os
import resource
import shutil
import time

import pytest
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


def lose(srv, how):
    d = os.path.join(srv.dir, "appendonlydir")
    if how == "delete the increment":
        os.unlink(incr_path(srv))
    elif how == "replace the increment":
        other = os.path.join(d, "other")
        with open(other, "wb") as f:
            f.write(b"*1\r\n$8\r\nFLUSHALL\r\n")
        os.replace(other, incr_path(srv))
    elif how == "delete the manifest":
        os.unlink(os.path.join(d, "appendonly.aof.manifest"))
    elif how == "delete the directory":
        shutil.rmtree(d)


@pytest.mark.parametrize("how", ["delete the increment", "replace the increment", "delete the manifest",
                                 "delete the directory"])
def test_log_files_deleted_or_replaced_under_the_server(how):
    """Writes into a deleted (or replaced) file succeed, into an inode no
    start reads: the server notices, refuses writes (MISCONF) until a
    rewrite has put the dataset in new files, and nothing acknowledged --
    before, during or after -- is lost at the next start."""
    srv = LoggedServer("--appendfsync", "everysec")
    try:
        r = redis.Redis(port=srv.port)
        acked = []
        for j in range(20):
            r.set(f"k:{j}", j)
            acked.append(j)
        lose(srv, how)
        for j in range(20, 2000):  # bounded: until the server has noticed and rebuilt the log
            try:
                r.set(f"k:{j}", j)
                acked.append(j)
            except redis.ResponseError as e:  # while it rebuilds
                assert str(e).startswith("MISCONF") and "deleted or replaced" in str(e), e
            if "the log is whole again" in srv.log():
                break
            time.sleep(0.005)
        assert "writes are refused until a rewrite" in srv.log(), srv.log()[-2000:]
        assert "the log is whole again" in srv.log(), srv.log()[-2000:]
        assert r.set("after", 1)
        assert r.info("persistence")["aof_last_write_status"] == "ok"
        r.close()
        srv.kill9()
        srv.start()
        r = redis.Redis(port=srv.port)
        got = r.mget([f"k:{j}" for j in acked])
        lost = [j for j, v in zip(acked, got) if v != str(j).encode()]
        assert lost == [], f"acknowledged and lost: {lost[:10]}"
        assert r.get("after") == b"1"
        r.close()
    finally:
        srv.stop()
