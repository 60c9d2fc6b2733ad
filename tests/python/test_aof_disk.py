

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
            if r.info("persistence")["aof_rewrites"] == 1 and not r.info("persistence")["aof_rewrite_in_progress"]:
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
        assert "the next automatic rewrite waits 1 s" in srv.log()
        before = len(listed(srv))
        time.sleep(2)  # the bug: some twenty tries (and increments) here; now at most two
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
