"""The pool's promises: a model of them checked step by step under eviction,
and the defects that model found, one test each.

Why. The pool is where a user loses data silently if anything is wrong:
an object evicted while a reader holds its address, a refused write that
took other keys with it, a counter that says everything is fine while a
key vanished. test_store_fuzz.py checks that the pool's bytes are
accounted for and that keys read back; this one keeps a model of every
version -- its bytes, pins, leases, holds, TTL, the segment it lives in --
and after every step asks the server for everything the model can assert:

- what is protected is never evicted: hard-pinned, leased (a GET.REPLICAS
  grant not yet released), held (HOLD.REPLICAS), or a put not yet ended
  (which must still end and read back);
- a soft-pinned object goes only when no unpinned object of its segment
  is left to evict;
- a key that vanished without our asking was evicted, is gone everywhere
  (GET, EXISTS, GET.REPLICAS, SCAN, DBSIZE) and is counted: evicted_keys
  and store_evictions grow by exactly the keys that vanished;
- a key that is there reads back byte-exact (through a CLIENT NO-TOUCH
  connection, so the checks do not change what eviction picks);
- a refused write (OOM, NOSPACE) changes nothing: no key, no pending put,
  no eviction (with maxmemory: unless the dataset was already over it,
  where Redis's rule evicts down to it before any command runs);
- INFO agrees with the model: DBSIZE = keys = store_objects, expires,
  store_bytes, the pool's values / pending / deferred bytes exactly, and
  values + pending + deferred + zeroing + free = pool size; pool use
  within the pool's limit; a mounted segment's `used` is its objects';
- at the end, with every lease, hold and put given back and everything
  removed, the pool and the mounted segments are whole again: one free
  range, and an object of the pool's whole limit fits.

Leases and pins are given long lives (lease-ttl, soft-pin-ttl) so that
none ends by time during a run: the model's "leased" is exact, and
nothing here depends on timing. The eviction watermark is 1.0, so in the
`pool` mode (no maxmemory) every eviction happens inside a write command
and a refused write may evict nothing at all.

Reproducible: seeds from MC_POOL_SEEDS ("1 2" by default), steps from
MC_POOL_STEPS; a failure names the seed, the step and the recent
operations.
"""
import os
import random
import time

import pytest
import redis

from conftest import Server

SEEDS = [int(s) for s in os.environ.get("MC_POOL_SEEDS", "1 2").split()]
STEPS = int(os.environ.get("MC_POOL_STEPS", "500"))
NKEYS = 32
ALIGN = 16
# mode -> (segment-size, maxmemory or None)
MODES = {"pool": ("1mb", None), "maxmemory": ("2mb", "1mb")}
CSEG_SIZE = 96 * 1024
PUT_RELEASE_S = 2


def rnd(n):
    return (n + ALIGN - 1) & ~(ALIGN - 1)


class Failure(AssertionError):
    pass


class Ver:
    """One version of a key: what the server keeps until its last holder goes."""
    _ids = 0

    def __init__(self, size, data, seg, kind):
        Ver._ids += 1
        self.id = Ver._ids
        self.size = size
        self.data = data        # bytes, or None where a client segment holds them
        self.seg = seg          # segment id of its one replica (1: the pool)
        self.kind = kind        # "str" (SET) or "obj" (a put)
        self.hard = False
        self.soft = False
        self.leases = 0         # grants of the reader not yet released
        self.holds = 0
        self.linked = True      # in the keyspace (or pending); False once unlinked

    def protected(self):
        return self.hard or self.leases > 0 or self.holds > 0

    def __repr__(self):
        flags = "".join(f for f, on in (("H", self.hard), ("S", self.soft)) if on)
        return f"v{self.id}({self.size}B seg{self.seg} {self.kind} {flags} l{self.leases} h{self.holds})"


class PoolModel:
    def __init__(self, srv, seed, maxmemory):
        self.srv = srv
        self.seed = seed
        self.rng = random.Random(seed)
        self.maxmemory = maxmemory
        self.w = self.conn()            # writes, and reads that touch the LRU
        self.rd = self.conn()           # the reader: leases and holds
        self.chk = self.conn()          # checks, without touching the LRU
        self.chk.execute_command("CLIENT", "NO-TOUCH", "ON")
        self.mnt = self.conn()          # hosts the mounted segments (keeps their owner alive)
        # which keys eviction took, by name: the key being written may be one
        self.w.config_set("notify-keyspace-events", "Ee")
        self.sub = redis.Redis(port=self.srv.port, socket_timeout=30).pubsub(ignore_subscribe_messages=True)
        self.sub.subscribe("__keyevent@0__:evicted")
        self.keys = {}                  # key -> Ver
        self.ttl = set()                # keys with a TTL (long: never reached)
        self.pending = {}               # key -> Ver
        self.grants = []                # [key named, Ver] of the reader, oldest first
        self.holdlist = []              # the same for holds
        self.abandoned = []             # (Ver, when) of puts REMOVE abandoned
        self.segs = []                  # mounted segment ids
        self.log = []
        self.step_no = 0
        self.evicted_total = 0
        self.announced = []             # evictions announced, not yet matched with SCAN
        self.early = []                 # announcements read before evicted_keys counted them
        self.refused = 0
        self.last = self.stats()
        self.over = False               # the dataset was over maxmemory at the last check
        self.may_evict_soft = True

    def conn(self):
        return redis.Redis(port=self.srv.port, single_connection_client=True, socket_timeout=30)

    def fail(self, msg):
        recent = "\n  ".join(self.log[-int(os.environ.get("MC_POOL_LOG", "30")):])
        raise Failure(f"seed {self.seed} step {self.step_no}: {msg}\n  recent operations:\n  {recent}")

    def note(self, s):
        self.log.append(s)

    def key(self):
        return b"k%d" % self.rng.randrange(NKEYS)

    def size(self):
        r = self.rng.random()
        if r < 0.05:
            return 0
        if r < 0.15:
            return self.rng.choice((1, 15, 16, 17))
        if r < 0.75:
            return self.rng.randrange(1, 64 * 1024)
        return self.rng.randrange(64 * 1024, 256 * 1024)

    def stats(self):
        s = self.chk.info("stats")
        return s["evicted_keys"], self.chk.info("store")["store_evictions"]

    def unlink(self, v):
        v.linked = False

    # -- operations -------------------------------------------------------------------
    def op_set(self):
        k, n = self.key(), self.size()
        v = self.rng.randbytes(n)
        args = ["SET", k, v]
        ttl = self.rng.random() < 0.2
        if ttl:
            args += ["EX", 3600]
        self.note(f"SET {k!r} {n}B{' EX' if ttl else ''}")
        try:
            self.w.execute_command(*args)
        except redis.ResponseError as e:
            if not str(e).startswith("OOM"):
                self.fail(f"SET {k!r}: {e}")
            self.note(f"  -> {e}")
            return "refused"
        old = self.keys.get(k)
        if old:
            self.unlink(old)
        self.keys[k] = Ver(n, v, 1, "str")
        self.ttl.discard(k)
        if ttl:
            self.ttl.add(k)
        return k

    def op_huge(self):
        """A value no pool can hold: refused, and nothing evicted for it."""
        k = self.key()
        n = self.pool_limit + self.rng.choice((1, 4096))
        self.note(f"huge SET/PUT.START {k!r} {n}B")
        try:
            if self.rng.random() < 0.5:
                self.w.execute_command("SET", k, b"\0" * n)
            else:
                self.w.execute_command("PUT.START", k, n, "REPLACE")
        except redis.ResponseError as e:
            if str(e).split()[0] not in ("OOM", "NOSPACE") and not (k in self.pending and "EXISTS" in str(e)):
                self.fail(f"huge write of {k!r}: {e}")
            return "refused"
        self.fail(f"a write of {n} bytes into a pool of {self.pool_limit} succeeded")

    def op_get(self):
        k = self.key()
        v = self.keys.get(k)
        self.note(f"GET {k!r}")
        if v is not None and v.data is None:
            return  # its bytes are in a client segment with no endpoint
        try:
            got = self.w.get(k)
        except redis.ResponseError as e:
            self.fail(f"GET {k!r}: {e}")
        self.expect_bytes(k, got, "GET")

    def op_del(self):
        k = self.key()
        cmd = self.rng.choice(("DEL", "UNLINK", "REMOVE"))
        self.note(f"{cmd} {k!r}")
        n = self.w.execute_command(cmd, k)
        want = int(k in self.keys or (cmd == "REMOVE" and k in self.pending))
        if n != want:
            self.fail(f"{cmd} {k!r} answered {n}, the model says {want}")
        if k in self.keys:
            self.unlink(self.keys.pop(k))
            self.ttl.discard(k)
        if cmd == "REMOVE" and k in self.pending:
            # abandoned: its space waits put-release-timeout (its writer may still write)
            v = self.pending.pop(k)
            self.unlink(v)
            self.abandoned.append((v, time.monotonic()))

    def op_expire(self):
        k = self.key()
        how = self.rng.choice(("EXPIRE", "PERSIST", "PAST"))
        self.note(f"{how} {k!r}")
        if how == "EXPIRE":
            n = self.w.execute_command("EXPIRE", k, 3600)
            if k in self.keys:
                self.ttl.add(k)
        elif how == "PERSIST":
            n = self.w.execute_command("PERSIST", k)
            if n != int(k in self.ttl):
                self.fail(f"PERSIST {k!r} answered {n}, the model says {int(k in self.ttl)}")
            self.ttl.discard(k)
            return
        else:
            n = self.w.execute_command("PEXPIREAT", k, 1)  # in the past: deleted now
            if k in self.keys:
                self.unlink(self.keys.pop(k))
                self.ttl.discard(k)
        if n != (1 if (k in self.keys or how == "PAST" and n) else 0):
            self.fail(f"{how} {k!r} answered {n}")

    def op_put_start(self):
        k = self.key()
        if k in self.pending:
            return self.op_put_end(k)
        n = self.size() or 1
        args = ["PUT.START", k, n]
        replace = k in self.keys or self.rng.random() < 0.3
        if replace:
            args.append("REPLACE")
        pin = self.rng.random()
        if pin < 0.1:
            args.append("HARDPIN")
        elif pin < 0.2:
            args += ["PIN", 3600000]
        if self.segs and self.rng.random() < 0.4:
            args += ["PREFER", self.rng.choice(self.segs)]
        self.note(f"PUT.START {k!r} {n} {args[3:]}")
        try:
            reps = self.w.execute_command(*args)
        except redis.ResponseError as e:
            if str(e).split()[0] != "NOSPACE":
                self.fail(f"PUT.START {k!r}: {e}")
            self.note(f"  -> {e}")
            return "refused"
        if len(reps) != 1 or int(reps[0][2]) != n:
            self.fail(f"PUT.START {k!r}: replicas {reps}")
        seg, off = int(reps[0][0]), int(reps[0][1])
        data = None
        if seg == 1:
            data = self.rng.randbytes(n)
            upto = n if self.rng.random() < 0.8 else n // 2
            if upto:
                self.w.execute_command("SEG.WRITE", 1, off, data[:upto])
            data = data[:upto] + bytes(n - upto)  # unwritten bytes read as zeros
        elif seg not in self.segs:
            self.fail(f"PUT.START {k!r}: a replica in segment {seg}, which is not mounted")
        v = Ver(n, data, seg, "obj")
        v.hard = "HARDPIN" in args
        v.soft = "PIN" in args
        self.pending[k] = v
        self.note(f"  -> {v}")
        return k

    def op_put_end(self, k=None):
        if k is None:
            if not self.pending:
                return self.op_put_start()
            k = self.rng.choice(sorted(self.pending))
        v = self.pending.pop(k)
        how = "END" if self.rng.random() < 0.85 else "REVOKE"
        self.note(f"PUT.{how} {k!r} {v}")
        try:
            self.w.execute_command("PUT." + how, k)
        except redis.ResponseError as e:
            self.fail(f"PUT.{how} of a put the model holds pending: {e}")
        if how == "REVOKE":
            self.unlink(v)
            return
        old = self.keys.get(k)
        if old:
            self.unlink(old)
        self.keys[k] = v
        self.ttl.discard(k)
        return k

    def op_replicas(self):
        k = self.key()
        self.note(f"GET.REPLICAS {k!r}")
        try:
            rep = self.rd.execute_command("GET.REPLICAS", k)
        except redis.ResponseError as e:
            if str(e).startswith("NOTREADY") and k in self.pending and k not in self.keys:
                return
            self.fail(f"GET.REPLICAS {k!r}: {e}")
        v = self.keys.get(k)
        if rep is None:
            if v is not None:
                self.fail(f"GET.REPLICAS {k!r}: nil for {v}")
            return
        if v is None:
            self.fail(f"GET.REPLICAS {k!r}: {rep} for a key the model has not")
        if int(rep[1]) != v.size:
            self.fail(f"GET.REPLICAS {k!r}: size {rep[1]}, the model says {v}")
        v.leases += 1
        self.grants.append([k, v])
        self.note(f"  -> {v}")

    def op_release(self):
        if not self.grants:
            return self.op_replicas()
        k = self.rng.choice(self.grants)[0]
        self.note(f"LEASE.RELEASE {k!r}")
        n = self.rd.execute_command("LEASE.RELEASE", k)
        if n != 1:
            self.fail(f"LEASE.RELEASE {k!r} answered {n}: the reader holds a grant on it")
        g = next(g for g in self.grants if g[0] == k)  # the oldest
        self.grants.remove(g)
        g[1].leases -= 1

    def op_hold(self):
        if self.holdlist and self.rng.random() < 0.5:
            k = self.rng.choice(self.holdlist)[0]
            self.note(f"HOLD.RELEASE {k!r}")
            n = self.rd.execute_command("HOLD.RELEASE", k)
            if n != 1:
                self.fail(f"HOLD.RELEASE {k!r} answered {n}")
            g = next(g for g in self.holdlist if g[0] == k)
            self.holdlist.remove(g)
            g[1].holds -= 1
            return
        k = self.key()
        self.note(f"HOLD.REPLICAS {k!r}")
        try:
            rep = self.rd.execute_command("HOLD.REPLICAS", k)[0]
        except redis.ResponseError as e:
            self.fail(f"HOLD.REPLICAS {k!r}: {e}")
        v = self.keys.get(k)
        if isinstance(rep, redis.ResponseError):
            if str(rep).startswith("NOTREADY") and k in self.pending and v is None:
                return
            self.fail(f"HOLD.REPLICAS {k!r}: {rep}")
        if (rep is None) != (v is None):
            self.fail(f"HOLD.REPLICAS {k!r}: {rep}, the model says {v}")
        if v is not None:
            v.holds += 1
            self.holdlist.append([k, v])

    def op_pin(self):
        k = self.key()
        what = self.rng.choice(("HARD", "SOFT", "UNPIN"))
        v = self.keys.get(k) or self.pending.get(k)
        self.note(f"PIN {what} {k!r} {v}")
        args = ("UNPIN", k) if what == "UNPIN" else ("PIN", k, "HARD") if what == "HARD" else ("PIN", k)
        try:
            self.w.execute_command(*args)
        except redis.ResponseError as e:
            if v is None and str(e).startswith("NOKEY"):
                return
            self.fail(f"{args}: {e}")
        if v is None:
            self.fail(f"{args} succeeded on a key the model has not")
        if what == "HARD":
            v.hard = True
        elif what == "SOFT":
            v.soft = True
        else:
            v.hard = v.soft = False

    def op_rename(self):
        a, b = self.key(), self.key()
        if a == b:
            return
        self.note(f"RENAME {a!r} {b!r}")
        try:
            self.w.execute_command("RENAME", a, b)
        except redis.ResponseError as e:
            if a not in self.keys and "no such key" in str(e):
                return
            self.fail(f"RENAME {a!r} {b!r}: {e}")
        if a not in self.keys:
            self.fail(f"RENAME of {a!r}, which the model has not, succeeded")
        old = self.keys.get(b)
        if old:
            self.unlink(old)
        self.keys[b] = self.keys.pop(a)
        self.ttl.discard(b)
        if a in self.ttl:
            self.ttl.discard(a)
            self.ttl.add(b)
        return b

    def op_mount(self):
        if len(self.segs) >= 3:
            return
        name = f"cseg{len(self.segs)}"
        sid = int(self.mnt.execute_command("MOUNT", name, CSEG_SIZE))
        self.note(f"MOUNT {name} -> {sid}")
        self.segs.append(sid)

    # -- checks -----------------------------------------------------------------------
    def expect_bytes(self, k, got, why):
        v = self.keys.get(k)
        want = v.data if v else None
        if got != want:
            self.fail(f"{why} {k!r}: {len(got) if got is not None else None} bytes, "
                      f"the model says {v}" + ("" if got is None or want is None else " (bytes differ)"))

    def check(self, written, refused):
        """_check, again if the cron evicted while it read the server. With
        maxmemory a write may cross it and the cron then evicts, at a moment of
        its own (a round of evict-ratio of the objects, in slices): an eviction
        between two of the check's reads made them disagree -- DBSIZE and SCAN,
        SCAN and INFO, an announcement and SCAN (seen under the sanitizer build,
        and 1 run in 3 beside CPU hogs). A disagreement while the eviction count
        moved is checked again from the server's new state; the evictions
        already taken in stay taken (self.announced)."""
        for _ in range(50):
            ev0 = self.stats()
            try:
                return self._check(written, refused)
            except Failure:
                if not self.maxmemory or self.stats() == ev0:
                    raise
                self.note("  the cron evicted during the check: again")
        self.fail("the cron kept evicting through 50 checks")

    def _check(self, written, refused):
        c = self.chk
        present = set(c.scan_iter(count=1000))
        dbsize = c.dbsize()
        if dbsize != len(present):
            self.fail(f"DBSIZE {dbsize}, SCAN found {len(present)}")
        extra = present - set(self.keys)
        if extra:
            self.fail(f"keys the model has not: {sorted(extra)}")
        gone = [k for k in self.keys if k not in present]
        ev = self.stats()
        if ev[0] != ev[1]:
            self.fail(f"evicted_keys {ev[0]}, store_evictions {ev[1]}")
        self.announced += self.evicted_names(ev[0] - self.last[0])
        self.last = ev
        evicted = self.announced
        for k in gone:
            if k not in evicted:
                self.fail(f"{k!r} {self.keys[k]} vanished, and no eviction of it was announced ({evicted})")
        for k in evicted:
            if k in gone:
                continue
            # evicted, and there again: only the key this step wrote
            if k != written:
                self.fail(f"{k!r} was evicted (announced) but SCAN still finds it")
            # Without maxmemory every eviction is the write's own making room, which never
            # takes the key written. With it, a write may cross maxmemory (Redis's rule:
            # the command that crosses it runs) and the cron then evicts down to it, any key.
            if not self.maxmemory:
                self.fail(f"{k!r} was evicted by its own write")
        for k in gone:
            v = self.keys[k]
            self.note(f"  evicted {k!r} {v}")
            if v.protected():
                self.fail(f"{k!r} was evicted, but it is {v}")
            if c.exists(k) or c.get(k) is not None or self.replicas_of(k) is not None:
                self.fail(f"{k!r} is not in SCAN but EXISTS/GET/GET.REPLICAS still find it")
        if any(self.keys[k].soft for k in gone):
            # a soft-pinned version goes only once no unpinned one of its segment is left
            for k in gone:
                if not self.keys[k].soft:
                    continue
                seg = self.keys[k].seg
                left = [j for j, v in self.keys.items() if j in present and v.seg == seg and not v.soft
                        and not v.protected() and j != written and v.size > 0]
                if left:
                    self.fail(f"soft-pinned {k!r} {self.keys[k]} evicted while unpinned {left[:5]} stay")
        for k in gone:
            self.unlink(self.keys.pop(k))
            self.ttl.discard(k)
        if refused and evicted and not self.over:
            self.fail(f"a refused write evicted {evicted} (the dataset was not over maxmemory)")
        self.evicted_total += len(evicted)
        self.announced = []

        # a few keys byte-exact, and every key now and then
        sample = list(self.keys) if self.step_no % 50 == 0 else self.rng.sample(sorted(self.keys),
                                                                               min(3, len(self.keys)))
        for k in sample:
            v = self.keys[k]
            if v.data is None:
                info = c.execute_command("OBJECT.INFO", k)
                info = dict(zip(info[::2], info[1::2]))
                if info[b"size"] != v.size or int(info[b"replicas"][0][0]) != v.seg:
                    self.fail(f"OBJECT.INFO {k!r}: {info}, the model says {v}")
            else:
                self.expect_bytes(k, c.get(k), "GET (check)")

        info = c.info("everything")
        pool_size, limit = info["store_pool_size"], info["pool_limit"]
        if info["store_objects"] != len(self.keys) or info.get("db0", {}).get("keys", 0) != len(self.keys):
            self.fail(f"store_objects {info['store_objects']}, db0 {info.get('db0')}, model {len(self.keys)}")
        if info.get("db0", {}).get("expires", 0) != len(self.ttl):
            self.fail(f"db0 {info.get('db0')}, the model has {len(self.ttl)} keys with a TTL")
        if info["store_bytes"] != sum(v.size for v in self.keys.values()):
            self.fail(f"store_bytes {info['store_bytes']}, model {sum(v.size for v in self.keys.values())}")
        values = sum(rnd(v.size) for v in self.keys.values() if v.seg == 1)
        pending = sum(rnd(v.size) for v in self.pending.values() if v.seg == 1)
        deferred = sum(rnd(v.size) for v in self.waiting() if v.seg == 1)
        young, old = self.abandoned_bytes(1)
        got = (info["store_pool_values"], info["store_pool_pending"])
        if got != (values, pending):
            self.fail(f"pool values/pending {got}, the model says {(values, pending)}")
        if not deferred + young <= info["store_pool_deferred"] <= deferred + young + old:
            self.fail(f"store_pool_deferred {info['store_pool_deferred']}: the model says {deferred} leased "
                      f"+ {young} abandoned puts + up to {old} abandoned puts whose wait may be over")
        parts = sum(info[f] for f in ("store_pool_values", "store_pool_pending", "store_pool_deferred",
                                      "store_pool_zeroing", "store_pool_free"))
        if parts != pool_size or info["store_pool_used"] + info["store_pool_free"] != pool_size:
            self.fail(f"pool parts sum to {parts}, size {pool_size}")
        if info["store_pool_used"] > limit or info["used_memory_pool"] > limit:
            self.fail(f"pool use {info['store_pool_used']} / used_memory_pool {info['used_memory_pool']} "
                      f"over pool_limit {limit}")
        if info["store_pending_puts"] != len(self.pending):
            self.fail(f"store_pending_puts {info['store_pending_puts']}, model {len(self.pending)}")
        for sid in self.segs:
            seg = c.execute_command("SEGMENT.INFO", sid)
            seg = dict(zip(seg[::2], seg[1::2]))
            want = sum(rnd(v.size) for v in [*self.keys.values(), *self.pending.values(), *self.waiting()]
                       if v.seg == sid)
            young, old = self.abandoned_bytes(sid)
            if not want + young <= seg[b"used"] <= want + young + old:
                self.fail(f"segment {sid} used {seg[b'used']}, the model says {want} "
                          f"+ {young} abandoned + up to {old} abandoned whose wait may be over")
        if self.maxmemory:
            self.over = info["used_memory_dataset"] > info["maxmemory"]
            self.note(f"  dataset {info['used_memory_dataset']} heap {info['used_memory_heap']}")

    def evicted_names(self, n):
        """The n keys announced evicted since the last call (each eviction is announced
        before its command's reply; the subscriber's socket may lag a little)."""
        names, self.early = self.early[:n], self.early[n:]
        # Scaled as every wait of the suite (MC_TEST_TIME_SCALE): a CI run beside the
        # other suite and builds once saw none of 4 announcements within 10 s.
        deadline = time.time() + 10 * float(os.environ.get("MC_TEST_TIME_SCALE", "3"))
        while len(names) < n and time.time() < deadline:
            m = self.sub.get_message(timeout=0.5)
            if m and m["type"] == "message":
                names.append(m["data"])
        if len(names) != n:
            # What the server says of the subscriber: still there, still subscribed, its
            # output queued or not -- a lost message and a slow one read differently.
            subs = [c for c in self.chk.client_list() if c.get("sub") != "0" or c.get("psub") != "0"]
            self.fail(f"evicted_keys grew by {n}, {len(names)} evictions announced: {names}; "
                      f"subscribers the server lists: {subs}")
        m = self.sub.get_message(timeout=0)
        if m and m["type"] == "message":
            # kept for the next call: the cron may have evicted since evicted_keys was read
            self.early.append(m["data"])
            self.fail(f"an eviction announced beyond evicted_keys: {m}")
        return names

    def replicas_of(self, k):
        """GET.REPLICAS through the checker, a pending put's NOTREADY as nil."""
        try:
            return self.chk.execute_command("GET.REPLICAS", k)
        except redis.ResponseError as e:
            if str(e).startswith("NOTREADY") and k in self.pending:
                return None
            raise

    def abandoned_bytes(self, sid):
        """Bytes of abandoned puts in segment sid: those surely still waiting (well within
        put-release-timeout by our clock, which starts after the server's), and the rest."""
        now = time.monotonic()
        young = sum(rnd(v.size) for v, t in self.abandoned if v.seg == sid and now - t < PUT_RELEASE_S / 2)
        old = sum(rnd(v.size) for v, t in self.abandoned if v.seg == sid and now - t >= PUT_RELEASE_S / 2)
        return young, old

    def waiting(self):
        """Unlinked versions a lease or hold keeps."""
        seen = {}
        for _, v in self.grants + self.holdlist:
            if not v.linked:
                seen[v.id] = v
        return seen.values()

    # -- the run ----------------------------------------------------------------------
    def run(self, steps):
        self.pool_limit = self.chk.info("memory")["pool_limit"]
        self.op_mount()
        ops = (("set", 8), ("get", 3), ("del", 2), ("expire", 1), ("put_start", 5), ("put_end", 4),
               ("replicas", 3), ("release", 3), ("hold", 1.5), ("pin", 2), ("rename", 1.5),
               ("mount", 0.1), ("huge", 0.3))
        names = [o for o, _ in ops]
        weights = [w for _, w in ops]
        for self.step_no in range(1, steps + 1):
            op = self.rng.choices(names, weights)[0]
            out = getattr(self, "op_" + op)()
            refused = out == "refused"
            self.refused += refused
            self.check(out if isinstance(out, bytes) else None, refused)

    def drain(self):
        """Everything given back: the pool and the mounted segments are whole again."""
        for k, _ in list(self.grants):
            self.rd.execute_command("LEASE.RELEASE", k)
        for k, _ in list(self.holdlist):
            self.rd.execute_command("HOLD.RELEASE", k)
        self.grants.clear()
        self.holdlist.clear()
        for k in list(self.pending):
            self.w.execute_command("PUT.REVOKE", k)
        self.pending.clear()
        self.w.execute_command("REMOVE.ALL")
        self.keys.clear()
        self.ttl.clear()
        self.check(None, False)
        deadline = time.time() + 30 + PUT_RELEASE_S
        while True:
            s = self.chk.info("store")
            segs_used = [self.seginfo(sid)[b"used"] for sid in self.segs]
            if (s["store_pool_free"] == s["store_pool_size"] and s["store_pool_deferred"] == 0 and s["store_pool_free_ranges"] == 1
                    and s["store_pool_largest_free"] == self.pool_limit and not any(segs_used)):
                break
            if time.time() > deadline:
                self.fail(f"the pool did not come back whole: {s}, segments used {segs_used}")
            time.sleep(0.05)
        # an object of the pool's whole limit fits, and one of each mounted segment's size
        rep = self.w.execute_command("PUT.START", b"max", self.pool_limit, "PREFER", "self")
        if int(rep[0][0]) != 1:
            self.fail(f"the pool-sized put went to {rep}")
        self.w.execute_command("PUT.REVOKE", b"max")
        for sid in self.segs:
            rep = self.w.execute_command("PUT.START", b"max", CSEG_SIZE, "PREFER", sid)
            if int(rep[0][0]) != sid:
                self.fail(f"a put of segment {sid}'s whole size went to {rep}")
            self.w.execute_command("PUT.REVOKE", b"max")

    def seginfo(self, sid):
        seg = self.chk.execute_command("SEGMENT.INFO", sid)
        return dict(zip(seg[::2], seg[1::2]))


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("seed", SEEDS)
def test_pool_model(seed, mode):
    size, maxmemory = MODES[mode]
    args = ["--maxmemory-policy", "allkeys-lru", "--lease-ttl", "3600000", "--put-timeout", "3600000",
            "--evict-high-watermark", "1.0",
            "--put-release-timeout", str(PUT_RELEASE_S * 1000)]
    if maxmemory:
        args += ["--maxmemory", maxmemory]
    srv = Server(*args, pool=size)
    try:
        m = PoolModel(srv, seed, maxmemory)
        m.run(STEPS)
        m.drain()
        assert m.evicted_total > 0, "the run never evicted: the pool is not under pressure"
        assert srv.proc.poll() is None, "the server died"
    finally:
        srv.stop()


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


def test_over_maxmemory_a_reserved_put_is_written_and_a_segment_mounted():
    """Over maxmemory with nothing evictable, every denyoom command is refused with -OOM.
    SEG.WRITE and MOUNT were denyoom: a put whose extent PUT.START had already reserved (and
    charged) could not be written, so it could only be revoked, and a segment mounted to add
    memory -- what helps -- was refused. Neither adds to the dataset. Found by test_pool_model
    (maxmemory mode: an -OOM its model did not expect, 1 run in CI)."""
    srv = Server("--maxmemory-policy", "allkeys-lru", "--maxmemory", "1mb", "--evict-high-watermark", "1.0",
                 pool="2mb")
    try:
        w = redis.Redis(port=srv.port, single_connection_client=True)
        reps = w.execute_command("PUT.START", "reserved", 4096)
        seg, off = int(reps[0][0]), int(reps[0][1])
        i = 0
        while w.info("memory")["used_memory_dataset"] <= w.info("memory")["maxmemory"]:
            w.set(f"pinned{i}", b"p" * 20000)  # the write that crosses maxmemory runs (Redis's rule)
            w.execute_command("PIN", f"pinned{i}", "HARD")
            i += 1
        try:
            w.set("more", "x")
            raise AssertionError("a SET over maxmemory with nothing evictable ran")
        except redis.ResponseError as e:
            assert str(e).startswith("OOM"), e
        assert w.execute_command("SEG.WRITE", seg, off, b"r" * 4096) in (b"OK", "OK", True)
        assert w.execute_command("PUT.END", "reserved") in (b"OK", "OK", True)
        assert w.get("reserved") == b"r" * 4096
        assert int(w.execute_command("MOUNT", "more-memory", 65536)) > 1
    finally:
        srv.stop()


def wait_until(cond, what, timeout=10):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("seed", SEEDS)
def test_fragmented_pool_holds_its_largest_free(seed):
    """Many sizes, freed in random order: store_pool_largest_free is what the allocator
    promises (alloc.c: the largest of the first ALLOC_SCAN_LIMIT ranges of the top bin,
    within 8/9 of the true largest hole), so a value of exactly that size fits with nothing
    evicted; with at most 16 free ranges the true largest hole is found as well. The holes
    are computed from the live values' offsets (OBJECT.INFO)."""
    rng = random.Random(seed)
    srv = Server("--maxmemory-policy", "noeviction", pool="1mb")
    try:
        w = redis.Redis(port=srv.port, single_connection_client=True)
        keys = []
        while True:
            n = rng.choice((rng.randrange(1, 300), rng.randrange(300, 5000), rng.randrange(5000, 60000)))
            try:
                w.set(b"f%d" % len(keys), rng.randbytes(n))
            except redis.ResponseError as e:
                assert str(e).startswith("OOM")
                break
            keys.append(b"f%d" % len(keys))
        rng.shuffle(keys)
        w.delete(*keys[: len(keys) * rng.choice((3, 5, 7)) // 8])
        s = w.info("store")
        live = []
        for k in w.keys("*"):
            oi = w.execute_command("OBJECT.INFO", k)
            rep = dict(zip(oi[::2], oi[1::2]))[b"replicas"][0]
            live.append((int(rep[1]), rnd(int(rep[2]))))
        holes, pos = [], 0
        for off, size in sorted(live):
            if off > pos:
                holes.append(off - pos)
            pos = off + size
        holes.append(s["store_pool_size"] - pos)
        holes = [h for h in holes if h]
        assert sum(holes) == s["store_pool_free"] and len(holes) == s["store_pool_free_ranges"], (holes, s)
        largest = s["store_pool_largest_free"]
        assert max(holes) * 8 // 9 <= largest <= max(holes), (largest, max(holes))
        tries = [largest] + ([max(holes)] if len(holes) <= 16 else [])
        for n in tries:
            assert w.set(b"probe", b"p" * n) is True, f"a value of {n} bytes did not fit: {s}"
            w.delete(b"probe")
            w.info("store")  # settles the freed extent's zeroing
        assert w.info("stats")["evicted_keys"] == 0
    finally:
        srv.stop()


def test_timed_lease_wall_ends_with_its_deadline():
    """Eviction's walls (evict.c) cache the runs a leased value interrupts; a lease that
    ends by time (LEASE key ms: not releasable) must end the wall too. While every value is
    leased a write that needs their space is refused and evicts nothing; once the leases'
    time is up the same write evicts and fits. A leased value removed meanwhile waits for
    its deadline, then its space comes back without anyone's help."""
    srv = Server("--maxmemory-policy", "allkeys-lru", pool="1mb")
    try:
        w = redis.Redis(port=srv.port, single_connection_client=True)
        for i in range(5):
            w.set(b"v%d" % i, b"%d" % i * 200000)
            assert w.execute_command("LEASE", b"v%d" % i, 400) == 400
        for _ in range(2):  # the second time the runs are cached
            with pytest.raises(redis.ResponseError, match="OOM"):
                w.set(b"new", b"n" * 300000)
        assert w.info("stats")["evicted_keys"] == 0 and w.dbsize() == 5
        w.delete(b"v4")  # leased: its space waits for the deadline
        assert w.info("store")["store_pool_deferred"] == 200000
        wait_until(lambda: all(dict(zip(o[::2], o[1::2]))[b"lease-ms"] == 0
                               for o in (w.execute_command("OBJECT.INFO", b"v%d" % i) for i in range(4))),
                   "the leases to run out")
        wait_until(lambda: w.info("store")["store_pool_deferred"] == 0, "the removed version's space")
        assert w.set(b"new", b"n" * 300000) is True
        assert w.info("stats")["evicted_keys"] >= 1 and w.get(b"new") == b"n" * 300000
    finally:
        srv.stop()
