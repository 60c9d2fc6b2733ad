"""The pool's promises around leases, holds and pins, one defect per test
(the model-based run that found them is test_pool_model below)."""
import redis

from conftest import Server


def test_lease_release_leaves_a_held_version_alone():
    """A version both leased (GET.REPLICAS) and held (HOLD.REPLICAS), then removed: releasing
    the lease must not free it while the hold stands. It did: LEASE.RELEASE freed the extent
    (the next SET got the held bytes' offset, under a view still reading them), and the hold's
    own release later took the version off the deferred list a second time and the server
    died on an assertion. Found by test_pool_model (seed 8)."""
    srv = Server("--maxmemory-policy", "allkeys-lru", pool="1mb")
    try:
        rd = redis.Redis(port=srv.port, single_connection_client=True)
        w = redis.Redis(port=srv.port, single_connection_client=True)
        w.set("k", b"x" * 1000)
        held = rd.execute_command("GET.REPLICAS", "k")[3]
        rd.execute_command("HOLD.REPLICAS", "k")
        w.delete("k")
        assert w.info("store")["store_pool_deferred"] == 1008
        assert rd.execute_command("LEASE.RELEASE", "k") == 1
        assert w.info("store")["store_pool_deferred"] == 1008, "the held version's space was given back"
        w.set("other", b"y" * 1000)
        other = rd.execute_command("GET.REPLICAS", "other")[3]
        assert other[1] != held[1], f"a new value was placed over held bytes: {other} {held}"
        assert rd.execute_command("HOLD.RELEASE", "k") == 1
        s = w.info("store")
        assert s["store_pool_deferred"] == 0 and s["store_holds"] == 0
        assert srv.proc.poll() is None
    finally:
        srv.stop()


def test_a_large_set_is_not_over_maxmemory_by_its_own_value():
    """A SET value of 32 KiB or more is read straight into the pool before the command runs.
    maxmemory's check before a write counted those bytes as the store's: a store under
    maxmemory was "over" by the SET's own value, evicted unrelated keys to get under, and with
    nothing more to evict refused the SET with -OOM -- a refused write that had evicted, where
    the same SET of a shorter (copied) value ran, as the command that crosses maxmemory does.
    Found by test_pool_model (maxmemory mode: a refused SET evicted keys)."""
    srv = Server("--maxmemory-policy", "allkeys-lru", "--maxmemory", "1mb", "--evict-high-watermark", "1.0",
                 pool="2mb")
    try:
        w = redis.Redis(port=srv.port, single_connection_client=True)

        def margin():
            m = w.info("memory")
            return m["maxmemory"] - m["used_memory_dataset"]

        # hard-pinned keys hold most of maxmemory: heap (many small keys) and pool
        p = w.pipeline(transaction=False)
        for i in range(2000):
            p.set(f"t{i}", "x")
            p.execute_command("PIN", f"t{i}", "HARD")
        p.execute_command("MEMORY", "USAGE", "t0")
        p.execute()
        i = 0
        while margin() > 40000:
            w.set(f"f{i}", b"a" * 20000)
            w.execute_command("PIN", f"f{i}", "HARD")
            i += 1
        w.set("last", b"b" * (margin() - 15000))  # under 32 KiB: copied, not placed
        w.execute_command("PIN", "last", "HARD")
        w.set("victim", b"v" * 16)  # the one key eviction could take
        assert 0 < margin() < 20000
        evicted = w.info("stats")["evicted_keys"]
        pool = w.info("store")
        assert pool["store_pool_free"] > 40000 + (pool["store_pool_size"] - 1024 * 1024)  # room in the pool
        assert w.set("big", b"c" * 40000) is True  # under maxmemory before it: it runs
        assert w.info("stats")["evicted_keys"] == evicted
        assert w.get("victim") == b"v" * 16 and w.get("big") == b"c" * 40000
    finally:
        srv.stop()
