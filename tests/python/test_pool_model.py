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
