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


def listed(srv):
    with open(os.path.join(srv.dir, "appendonlydir", "appendonly.aof.manifest")) as f:
        return [line.split()[1] for line in f if line.strip()]


def test_failing_automatic_rewrite_backs_off_and_piles_up_nothing():
    """A rewrite that keeps failing -- here its base is larger than the
    server's file-size limit, while the increments stay small -- is tried
    again after 1 s, 2 s, 4 s ..., not every cron tick, and a try does not
    open an increment of its own when the last one holds nothing. It forked
    the dataset ten times a second and added an increment each time, until
    the manifest was full and the server could no longer start."""
    srv = LoggedServer("--appendfsync", "everysec")
    try:
        r = redis.Redis(port=srv.port)
        for j in range(10):
            r.set(f"big:{j}", b"B" * 1000000)
        r.bgrewriteaof()
        for _ in range(500):
            info = r.info("persistence")
            if info["aof_rewrites"] == 1 and not info["aof_rewrite_in_progress"]:
                break
            time.sleep(0.01)
        resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE, (5000000, resource.RLIM_INFINITY))
        r.config_set("auto-aof-rewrite-min-size", "100kb")
        r.config_set("auto-aof-rewrite-percentage", "1")
        r.set("small", b"s" * 200000)  # the increment outgrows 1% of the base: a rewrite starts, and fails
        for _ in range(500):
            if "Background AOF rewrite failed (1 in a row)" in srv.log():
                break
            time.sleep(0.01)
        assert "the next automatic rewrite waits 1 s" in srv.log(), srv.log()[-2000:]
        before = len(listed(srv))
        time.sleep(2)  # the bug: some twenty tries (and increments) here; now at most two more
        tries = srv.log().count("Background AOF rewrite failed")
        assert 1 <= tries <= 3, tries
        assert len(listed(srv)) <= before + 1, listed(srv)
        assert r.get("small") == b"s" * 200000 and r.set("still", 1)  # the log itself goes on
        # The limit lifted, a rewrite succeeds and the failures are forgotten.
        resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        for _ in range(1000):
            info = r.info("persistence")
            if info["aof_rewrites"] >= 2 and not info["aof_rewrite_in_progress"]:
                break
            if not info["aof_rewrite_in_progress"]:
                try:
                    r.bgrewriteaof()
                except redis.ResponseError:
                    pass
            time.sleep(0.01)
        assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"
        r.config_set("auto-aof-rewrite-percentage", "0")
        r.close()
        srv.kill9()
        srv.start()
        r = redis.Redis(port=srv.port)
        assert r.get("big:9") == b"B" * 1000000 and r.get("still") == b"1"
        r.close()
    finally:
        srv.stop()
