"""A stateful fuzzer of store command sequences (issue 25).

Why. The hostile-client findings of issue 25 were each a sequence, not a
command: a put started and abandoned, a write refused after it had evicted,
a tenant reading what another left behind. A parser fuzzer never reaches
them. This one drives the store with random but reproducible sequences from
several clients at once -- the admin and two tenants, each with more than
one connection, the connections interleaved step by step -- and checks
after every step what must always hold:

- the pool is accounted for: used + free == size, and every byte is in
  exactly one state: values + pending puts + deferred (leased old versions)
  + zeroing + free == size;
- the keyspace matches a model: a key that answers holds exactly the bytes
  last acknowledged for it (a refused write, -OOM, leaves the old bytes and
  the key itself in place); with a pool large enough for the model nothing
  is ever missing, with a small one a key may be evicted but never altered;
- a tenant never sees another tenant's key: every key that KEYS, SCAN and
  RANDOMKEY give a tenant is its own, and reading, replacing or removing
  another's key is refused and changes nothing;
- at the end, with every client gone and put-release-timeout passed, the
  pool is whole again: after REMOVE.ALL every byte is free.

Reproducible: each case is a fixed seed (MC_FUZZ_SEEDS="1 2 3" adds or
replaces seeds, MC_FUZZ_STEPS the steps per seed); a failure prints the
seed, the step and the recent operations, and re-running with that seed
replays the same sequence. The server's timing (put-release-timeout,
zeroing) is waited for by polling, never assumed.
"""
import os
import random
import time

import pytest
import redis

from conftest import Server

TENANTS = ("fza", "fzb")
KEYS_PER_OWNER = 24
STEPS = int(os.environ.get("MC_FUZZ_STEPS", "1200"))
SEEDS = [int(s) for s in os.environ.get("MC_FUZZ_SEEDS", "11 23 37").split()]
# (pool size, a pool the model always fits in)
POOLS = {"roomy": ("64mb", True), "tight": ("2mb", False)}
MAX_VALUE = 96 * 1024


class Failure(AssertionError):
    pass


def info_store(r):
    return r.info("store")


def as_int(d, k):
    return int(d.get(k, "0"))


class Fuzz:
    def __init__(self, srv, seed, roomy):
        self.srv = srv
        self.rng = random.Random(seed)
        self.seed = seed
        self.roomy = roomy
        self.admin = self.connect(None)
        for t in TENANTS:
            self.admin.execute_command("ACL", "SETUSER", t, "on", ">pw-" + t, f"~{t}:*", "&*", "+@all")
        self.owners = [None, *TENANTS]
        self.conns = {o: [self.connect(o), self.connect(o)] for o in self.owners}
        self.model = {o: {} for o in self.owners}   # key -> bytes acknowledged
        self.pending = {}                            # (owner, idx, key) -> [replicas]
        self.objects = {o: set() for o in self.owners}  # keys whose value a put made (not strings)
        self.log = []
        self.step_no = 0

    def connect(self, owner):
        kw = {} if owner is None else {"username": owner, "password": "pw-" + owner}
        return redis.Redis(port=self.srv.port, single_connection_client=True, socket_timeout=30, **kw)

    def key(self, owner, i=None):
        i = self.rng.randrange(KEYS_PER_OWNER) if i is None else i
        return (f"{owner}:k{i}" if owner else f"adm:k{i}").encode()

    def value(self):
        n = self.rng.choice((0, 1, 17, 4096, self.rng.randrange(1, MAX_VALUE)))
        return self.rng.randbytes(n)

    def fail(self, msg):
        recent = "\n  ".join(self.log[-25:])
        raise Failure(f"seed {self.seed} step {self.step_no}: {msg}\n  recent operations:\n  {recent}")

    def note(self, s):
        self.log.append(s)

    # -- operations -------------------------------------------------------------------
    def op_set(self, owner, r):
        k, v = self.key(owner), self.value()
        self.note(f"{owner} SET {k!r} {len(v)} B")
        try:
            r.set(k, v)
            self.model[owner][k] = v
            self.objects[owner].discard(k)
        except redis.ResponseError as e:
            if not str(e).startswith("OOM"):
                self.fail(f"SET {k!r}: {e}")
            self.check_key(owner, r, k, "after a refused SET")

    def op_append(self, owner, r):
        k, v = self.key(owner), self.value()
        self.note(f"{owner} APPEND {k!r} {len(v)} B")
        old = self.model[owner].get(k)
        try:
            n = r.append(k, v)
        except redis.ResponseError as e:
            if str(e).startswith("WRONGTYPE") and k in self.objects[owner]:
                return  # a put's object is not a string to edit
            if not str(e).startswith("OOM"):
                self.fail(f"APPEND {k!r}: {e}")
            self.check_key(owner, r, k, "after a refused APPEND")
            return
        want = len(old or b"") + len(v)
        if n != want:
            if self.roomy or n != len(v):
                self.fail(f"APPEND {k!r} answered {n}, the model says {want}")
            old = None  # the old value was evicted before the append
        self.model[owner][k] = (old or b"") + v
        self.objects[owner].discard(k)

    def op_get(self, owner, r):
        k = self.key(owner)
        self.note(f"{owner} GET {k!r}")
        self.check_key(owner, r, k, "GET")

    def op_del(self, owner, r):
        k = self.key(owner)
        cmd = self.rng.choice(("DEL", "REMOVE", "UNLINK"))
        self.note(f"{owner} {cmd} {k!r}")
        try:
            r.execute_command(cmd, k)
        except redis.ResponseError as e:
            # REMOVE of a leased or pinned object, or of a pending put, may be refused
            self.note(f"  -> {e}")
            return
        self.model[owner].pop(k, None)
        self.objects[owner].discard(k)
        if r.exists(k):
            # a pending put under the key survives DEL of the complete one
            if not any(p[0] == owner and p[2] == k for p in self.pending):
                self.fail(f"{cmd} {k!r}: the key still exists")

    def op_put_start(self, owner, r, idx):
        k = self.key(owner)
        if any(p[0] == owner and p[2] == k for p in self.pending):
            return
        v = self.value() or b"x"
        args = ["PUT.START", k, len(v)]
        if self.rng.random() < 0.3:
            args.append("REPLACE")
        if self.rng.random() < 0.1:
            args += ["PIN", 60000]
        self.note(f"{owner}/{idx} PUT.START {k!r} {len(v)} {args[3:]}")
        try:
            reps = r.execute_command(*args)
        except redis.ResponseError as e:
            if str(e).split()[0] not in ("EXISTS", "NOSPACE", "OOM"):
                self.fail(f"PUT.START {k!r}: {e}")
            self.note(f"  -> {e}")
            self.check_key(owner, r, k, "after a refused PUT.START")
            return
        self.pending[(owner, idx, k)] = (v, reps, args)

    def op_put_finish(self, owner, r, idx):
        mine = [p for p in self.pending if p[0] == owner and p[1] == idx]
        if not mine:
            return self.op_put_start(owner, r, idx)
        p = self.rng.choice(mine)
        k = p[2]
        v, reps, _ = self.pending.pop(p)
        how = self.rng.choice(("end", "end", "end", "revoke", "partial-end"))
        self.note(f"{owner}/{idx} put of {k!r}: {how}")
        for rep in reps:
            seg, off, n = int(rep[0]), int(rep[1]), int(rep[2])
            if n != len(v):
                self.fail(f"PUT.START {k!r}: a replica of {n} bytes for {len(v)}")
            data = v if how != "partial-end" else v[: len(v) // 2]
            if data:
                try:
                    r.execute_command("SEG.WRITE", seg, off, data)
                except redis.ResponseError as e:
                    # taken over by another put of the key after put-timeout
                    self.note(f"  SEG.WRITE -> {e}")
        if how == "revoke":
            try:
                r.execute_command("PUT.REVOKE", k)
            except redis.ResponseError as e:
                self.note(f"  PUT.REVOKE -> {e}")
            return
        try:
            r.execute_command("PUT.END", k)
        except redis.ResponseError as e:
            self.note(f"  PUT.END -> {e}")
            return
        if how == "partial-end":
            v = v[: len(v) // 2] + bytes(len(v) - len(v) // 2)  # unwritten bytes read as zeros
        self.model[owner][k] = v
        self.objects[owner].add(k)

    def op_replicas(self, owner, r):
        k = self.key(owner)
        self.note(f"{owner} GET.REPLICAS {k!r}")
        try:
            rep = r.execute_command("GET.REPLICAS", k)
        except redis.ResponseError as e:
            if str(e).split()[0] not in ("NOTREADY", "WRONGTYPE"):
                self.fail(f"GET.REPLICAS {k!r}: {e}")
            return
        want = self.model[owner].get(k)
        if rep is None:
            if want is not None and self.roomy:
                self.fail(f"GET.REPLICAS {k!r}: nil for a key of {len(want)} bytes")
            return
        if want is not None and int(rep[1]) != len(want):
            self.fail(f"GET.REPLICAS {k!r}: size {rep[1]}, the model says {len(want)}")
        if self.rng.random() < 0.8:
            r.execute_command("LEASE.RELEASE", k)

    def op_pin(self, owner, r):
        k = self.key(owner)
        cmd = self.rng.choice((("PIN", k, 500), ("UNPIN", k)))
        self.note(f"{owner} {cmd}")
        try:
            r.execute_command(*cmd)
        except redis.ResponseError as e:
            self.note(f"  -> {e}")

    def op_cross(self, owner, r):
        """Another tenant's key: refused, and unchanged."""
        if owner is None:
            return
        other = self.rng.choice([o for o in self.owners if o != owner and o is not None])
        k = self.key(other)
        cmd = self.rng.choice((("GET", k), ("SET", k, b"intruder"), ("DEL", k), ("REMOVE", k),
                               ("GET.REPLICAS", k), ("PUT.START", k, 10), ("APPEND", k, b"x")))
        self.note(f"{owner} cross {cmd[0]} {k!r}")
        try:
            out = r.execute_command(*cmd)
        except redis.exceptions.NoPermissionError:
            return  # -NOPERM (redis-py drops the code from the message)
        except redis.ResponseError as e:
            self.fail(f"{owner}'s {cmd[0]} of {k!r}: {e} (want NOPERM)")
        self.fail(f"{owner}'s {cmd[0]} of another tenant's {k!r} answered {out!r}")

    def op_enumerate(self, owner, r):
        if owner is None:
            return
        self.note(f"{owner} KEYS/SCAN/RANDOMKEY/DBSIZE")
        mine = owner.encode() + b":"
        seen = set(r.keys("*"))
        seen |= set(r.scan_iter(count=7))
        for _ in range(4):
            k = r.randomkey()
            if k is not None:
                seen.add(k)
        for k in seen:
            if not k.startswith(mine):
                self.fail(f"tenant {owner} saw {k!r}")

    def op_reconnect(self, owner, idx):
        """Drop a connection, its pending puts abandoned; a new one takes its place."""
        self.note(f"{owner}/{idx} disconnects")
        self.conns[owner][idx].close()
        for p in [p for p in self.pending if p[0] == owner and p[1] == idx]:
            self.pending.pop(p)
        self.conns[owner][idx] = self.connect(owner)

    # -- checks -----------------------------------------------------------------------
    def check_key(self, owner, r, k, why):
        want = self.model[owner].get(k)
        try:
            got = r.get(k)
        except redis.ResponseError as e:
            self.fail(f"GET {k!r} ({why}): {e}")
        if got == want:
            return
        if got is None and not self.roomy:
            self.note(f"  {k!r} evicted")
            self.model[owner].pop(k, None)
            if "refused" in why:
                self.fail(f"GET {k!r} {why}: the key is gone (a refused write must not evict it)")
            return
        self.fail(f"GET {k!r} ({why}): {len(got) if got is not None else None} bytes, "
                  f"the model says {len(want) if want is not None else None}"
                  + ("" if got is None or want is None else " (bytes differ)"))

    def check_pool(self):
        """Every byte of the pool is in exactly one state. The fuzzer reads every reply
        before asking, so no object is held by a reply still being sent."""
        s = info_store(self.admin)
        size, used, free = as_int(s, "store_pool_size"), as_int(s, "store_pool_used"), as_int(s, "store_pool_free")
        if used + free != size:
            self.fail(f"pool: used {used} + free {free} != size {size} ({s})")
        parts = {k: as_int(s, k) for k in ("store_pool_values", "store_pool_pending", "store_pool_deferred",
                                           "store_pool_zeroing", "store_pool_free")}
        if sum(parts.values()) != size:
            self.fail(f"pool: values + pending + deferred + zeroing + free = {sum(parts.values())} != size {size}: "
                      f"{parts}")

    # -- the run ----------------------------------------------------------------------
    def run(self, steps):
        ops = (("set", 5), ("append", 2), ("get", 5), ("del", 2), ("put_start", 3), ("put_finish", 4),
               ("replicas", 2), ("pin", 1), ("cross", 1), ("enumerate", 1), ("reconnect", 0.4))
        names = [o for o, _ in ops]
        weights = [w for _, w in ops]
        for self.step_no in range(steps):
            owner = self.rng.choice(self.owners)
            idx = self.rng.randrange(2)
            r = self.conns[owner][idx]
            op = self.rng.choices(names, weights)[0]
            if op in ("put_start", "put_finish"):
                getattr(self, "op_" + op)(owner, r, idx)
            elif op == "reconnect":
                self.op_reconnect(owner, idx)
            elif op == "cross":
                self.op_cross(owner, r)
            else:
                getattr(self, "op_" + op)(owner, r)
            self.check_pool()
        # every key of the model, as acknowledged
        for owner in self.owners:
            for k in list(self.model[owner]):
                self.check_key(owner, self.conns[owner][0], k, "final read")

    def drain(self):
        """Every client gone, its puts abandoned: put-release-timeout gives their space back
        without anyone's help, and after REMOVE.ALL every byte of the pool is free."""
        for owner in self.owners:
            for c in self.conns[owner]:
                c.close()
        self.pending.clear()
        self.poll(lambda s: as_int(s, "store_pending_puts") == 0 and as_int(s, "store_puts_pending") == 0,
                  "the abandoned puts were not given back")
        self.admin.execute_command("REMOVE.ALL")
        self.poll(lambda s: as_int(s, "store_pool_free") == as_int(s, "store_pool_size"),
                  "the pool did not come back whole after REMOVE.ALL")

    def poll(self, cond, what):
        deadline = time.time() + 30
        while True:
            s = info_store(self.admin)
            if cond(s):
                return
            if time.time() > deadline:
                self.fail(f"{what}: {s}")
            time.sleep(0.05)


@pytest.mark.parametrize("pool", sorted(POOLS))
@pytest.mark.parametrize("seed", SEEDS)
def test_store_sequences(seed, pool):
    size, roomy = POOLS[pool]
    # Short put timeouts, so that abandoned and taken-over puts happen within the run
    srv = Server("--put-timeout", "50", "--put-release-timeout", "100", "--lease-ttl", "200",
                 "--maxmemory-policy", "allkeys-lru", pool=size)
    try:
        f = Fuzz(srv, seed, roomy)
        f.run(STEPS)
        f.drain()
        assert srv.proc.poll() is None, "the server died"
    finally:
        srv.stop()
