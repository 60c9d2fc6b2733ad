"""tenant-maxmemory across a restart (tenantquota.c): the log is loaded
whole whatever the bound (a load runs no tenant's command), each tenant's
usage is counted again from the keys it finds, and the tenant's next write
brings it under a bound lowered meanwhile by evicting its own values."""
import os

import redis

from conftest import LoggedServer


def tenant_line(r, name):
    line = r.info("tenants").get(f"tenant_{name}")
    return line


def test_log_loads_whole_and_usage_is_counted_again():
    d = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tq-acl-{os.getpid()}")
    with open(d, "w") as f:
        f.write("user default on nopass ~* &* +@all\n")
        f.write("user alice on >pa ~tenantA:* +@all -@dangerous +info\n")
        f.write("user bob on >pb ~tenantB:* +@all -@dangerous\n")
    srv = LoggedServer("--aclfile", d, "--tenant-maxmemory", "600000")
    try:
        admin = redis.Redis(port=srv.port)
        alice = redis.Redis(port=srv.port, username="alice", password="pa")
        bob = redis.Redis(port=srv.port, username="bob", password="pb")
        for i in range(3):
            bob.set(f"tenantB:k{i}", os.urandom(100000))
        for i in range(10):
            alice.set(f"tenantA:k{i}", os.urandom(100000))
        before = tenant_line(admin, "alice")
        assert 4 <= before["objects"] <= 6 and before["bytes"] <= 600000
        kept = sorted(k for k in admin.keys("tenantA:*"))
        for c in (admin, alice, bob):
            c.close()
        srv.kill9()
        # Restarted under a bound the log's keys do not fit: loaded anyway.
        srv.args = ("--aclfile", d, "--tenant-maxmemory", "200000")
        srv.start()
        admin = redis.Redis(port=srv.port)
        alice = redis.Redis(port=srv.port, username="alice", password="pa")
        assert sorted(admin.keys("tenantA:*")) == kept
        assert admin.dbsize() == len(kept) + 3
        after = tenant_line(admin, "alice")
        assert (after["objects"], after["bytes"]) == (before["objects"], before["bytes"])
        assert tenant_line(admin, "bob")["objects"] == 3
        # The tenant's next write evicts its own values down to the new bound;
        # bob's stay.
        alice.set("tenantA:new", b"x" * 50000)
        assert tenant_line(admin, "alice")["bytes"] <= 200000
        assert tenant_line(admin, "bob")["objects"] == 3
        admin.close()
        alice.close()
    finally:
        srv.stop()
        os.unlink(d)
