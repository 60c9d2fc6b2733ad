"""Rank programs for test_engines.py: each function is one tensor-parallel
rank of an inference engine, making the calls that engine's Mooncake store
connector makes, in its order, with its arguments and the return codes it
tests (read from the connectors: vLLM's mooncake/store/worker.py, SGLang's
mem_cache/storage/mooncake_store/mooncake_store.py, LMCache's
storage_backend/connector/mooncakestore_connector.py; none of their code is
here). Every rank is a process of its own, started with multiprocessing's
spawn, as the engines run one process per rank.

A rank reports through its queue: ("ok", rank, info) or ("err", rank,
traceback). Ranks meet at a barrier between phases, so a rank can read what
the others wrote.
"""
import ctypes
import os
import struct
import time
import traceback
import uuid
import zlib

import numpy as np

PAGE = 16 << 10  # bytes per block per K or V slice


def _data(tag, rank, shape):
    """Deterministic bytes any rank can regenerate to check another's."""
    seed = zlib.crc32(f"{tag}/{rank}".encode())
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def _run(fn, rank, q, *args):
    try:
        info = fn(rank, *args)
        q.put(("ok", rank, info))
    except BaseException:  # noqa: BLE001 -- reported to the test
        q.put(("err", rank, traceback.format_exc()))


class _HostMirror:
    """Index a CUDA tensor as the numpy array of the host test does: reads
    copy to the host, writes copy to the device."""

    def __init__(self, t):
        self.t, self.nbytes = t, t.numel()

    def __getitem__(self, idx):
        return self.t[idx].cpu().numpy()

    def __setitem__(self, idx, value):
        import torch
        self.t[idx] = torch.from_numpy(np.ascontiguousarray(value)).to(self.t.device)


# -- vLLM: MooncakeStoreConnector's store worker -------------------------------

def vllm_rank(rank, n, addr, barrier, opts):
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    mode = opts.get("mode", "embedded")
    store = MooncakeDistributedStore()
    # MooncakeStoreWorker.__init__: seven positional arguments; embedded
    # ranks contribute a segment, standalone-store ranks contribute none.
    seg = 32 << 20 if mode == "embedded" else 0
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", seg, 16 << 20, "tcp", "", addr) == 0
    cfg = ReplicateConfig()
    if opts.get("preferred_segment") is not None:
        cfg.preferred_segment = opts["preferred_segment"]
    # register_kv_caches: the K/V-first layout (2, num_blocks, page) is one
    # registration and two segments of block_len each.
    nblocks = 64
    if opts.get("cuda"):
        # the paged KV cache in GPU memory, registered by its data_ptr
        import torch
        gpu = torch.zeros((2, nblocks, PAGE), dtype=torch.uint8, device="cuda")
        kv = _HostMirror(gpu)
        base = gpu.data_ptr()
    else:
        kv = np.zeros((2, nblocks, PAGE), dtype=np.uint8)
        base = kv.ctypes.data
    assert store.register_buffer(base, kv.nbytes) == 0
    seg_stride = nblocks * PAGE
    addrs = [base, base + seg_stride]

    def key(r, h):
        return f"model@tp_rank:{r}@pcp0@dcp0@pp_rank:0@group:0@{h:064x}"

    def block_meta(blocks):
        return ([[a + b * PAGE for a in addrs] for b in blocks], [[PAGE, PAGE] for _ in blocks])

    nkeys = 16
    hashes = [0xABC000 + i for i in range(nkeys)]
    mine = [key(rank, h) for h in hashes]
    kv[:, :nkeys] = _data("vllm", rank, (2, nkeys, PAGE))
    # KVCacheStoreSendingThread._handle_request: dedup, then one multi-buffer put
    exists = store.batch_is_exist(mine)
    assert exists == [0] * nkeys, exists
    a, s = block_meta(range(nkeys))
    res = store.batch_put_from_multi_buffers(mine, a, s, cfg)
    assert res == [0] * nkeys, res
    barrier.wait()
    # The scheduler's lookup (rank 0's lookup server): a block is a hit when
    # every TP rank has it.
    if rank == 0:
        cand = [key(r, h) for h in hashes for r in range(n)]
        assert store.batch_is_exist(cand) == [1] * len(cand)
    # KVCacheStoreRecvingThread: load the next rank's blocks into free blocks
    other = (rank + 1) % n
    dst = range(nkeys, 2 * nkeys)
    a, s = block_meta(dst)
    res = store.batch_get_into_multi_buffers([key(other, h) for h in hashes], a, s)
    assert res == [2 * PAGE] * nkeys, res
    assert np.array_equal(kv[:, nkeys:2 * nkeys], _data("vllm", other, (2, nkeys, PAGE)))
    # a second save of the same blocks is skipped by the dedup probe; a put
    # anyway succeeds and leaves the value (Mooncake's convention)
    assert store.batch_is_exist(mine) == [1] * nkeys
    a, s = block_meta(range(nkeys))
    assert store.batch_put_from_multi_buffers(mine[:2], a[:2], s[:2], cfg) == [0, 0]
    barrier.wait()
    # RESET: rank 0 clears the store (remove_all(force=True)) after the
    # others drained their queues
    if rank == 0:
        assert store.remove_all(force=True) >= n * nkeys
    barrier.wait()
    assert store.batch_is_exist(mine) == [0] * nkeys
    assert store.unregister_buffer(base) == 0
    name = store.get_hostname()
    store.close()
    return name


# -- SGLang HiCache: MooncakeStore ---------------------------------------------

def sglang_rank(rank, n, addr, barrier, opts):
    from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator
    mla = opts.get("mla", False)
    standalone = opts.get("standalone", False)
    if opts.get("http"):
        # check_server(): poll the master's /get_all_segments (3 s timeout
        # per try) until the body is not empty
        import urllib.request
        url = f"http://{addr.split(':')[0]}:{opts['http']}/get_all_segments"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=3) as resp:
                    if resp.read():
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the master's HTTP port never answered"
            time.sleep(0.1)
    store = MooncakeDistributedStore()
    npages, page_bytes = 24, PAGE
    pool_bytes = 2 * npages * 2 * page_bytes  # K and V, twice the pages used
    if standalone:
        # standalone_storage: the host pool comes from MooncakeHostMemAllocator
        # and the store is reached through setup_dummy
        alloc = MooncakeHostMemAllocator()
        ptr = alloc.alloc(pool_bytes)
        pool = np.frombuffer((ctypes.c_byte * pool_bytes).from_address(ptr), dtype=np.uint8)
        assert store.setup_dummy(pool_bytes, 16 << 20, addr) == 0
    else:
        alloc = None
        pool = np.zeros(pool_bytes, dtype=np.uint8)
        ptr = pool.ctypes.data
        # __init__: setup with eight positional arguments (transfer_engine
        # None when it cannot reuse one), the segment split over tp ranks
        per_tp = (64 << 20) // n
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", per_tp, 16 << 20, "tcp", "", addr, None) == 0
    # warmup(): a 4 KB put, then is_exist and get must agree
    wkey = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
    wval = bytes(4 * 1024)
    assert store.put(wkey, wval) == 0
    assert store.is_exist(wkey) == 1
    assert store.get(wkey) == wval
    # register_mem_pool_host: the host KV buffer
    assert store.register_buffer(ptr, pool_bytes) == 0

    page_keys = [f"{0x5EED00 + i:064x}" for i in range(npages)]
    if mla:  # one object per page, shared by every rank (mla_suffix "")
        keys = [f"{k}__k" for k in page_keys]
        mult = 1
    else:    # K and V per page, per rank
        keys = [f"{k}_{rank}_{kv}" for k in page_keys for kv in ("k", "v")]
        mult = 2

    def ptrs(first):
        return [ptr + (first + i) * page_bytes for i in range(len(keys))], [page_bytes] * len(keys)

    # MLA pages are shared: every rank holds the same bytes, and whichever
    # rank's put lands first stores them
    src_rank = 0 if mla else rank
    pool[:len(keys) * page_bytes] = _data("sglang", src_rank, len(keys) * page_bytes)
    # batch_set_v1: probe, then put only the missing keys with batch_put_from
    exist = store.batch_is_exist(keys)
    missing = [i for i, e in enumerate(exist) if e != 1]
    p, s = ptrs(0)
    res = store.batch_put_from([keys[i] for i in missing], [p[i] for i in missing], [s[i] for i in missing])
    assert all(r == 0 for r in res), res  # a rank that lost the race gets 0: the key exists
    barrier.wait()
    # batch_exists: pages whose every object is there, from the start
    ex = store.batch_is_exist(keys)
    hit = next((i // mult for i, e in enumerate(ex) if e != 1), len(keys) // mult)
    assert hit == npages, ex
    # batch_get_v1: into other pages; every result > 0
    p, s = ptrs(len(keys))
    res = store.batch_get_into(keys, p, s)
    assert all(r > 0 for r in res), res
    got = pool[len(keys) * page_bytes: 2 * len(keys) * page_bytes]
    assert np.array_equal(got, _data("sglang", src_rank, len(keys) * page_bytes))
    barrier.wait()
    if rank == 0:
        store.remove_all()  # clear()
    barrier.wait()
    assert store.batch_is_exist(keys) == [0] * len(keys)
    name = store.get_hostname()
    store.close()
    if alloc is not None:
        del pool
        alloc.free(ptr)
    return name


# -- LMCache: MooncakestoreConnector --------------------------------------------

META = struct.Struct("<iiiiiii")  # a fixed-size chunk header, as RemoteMetadata's


def lmcache_rank(rank, n, addr, barrier, opts):
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig, bind_to_numa_node
    bind_to_numa_node(0)  # NUMA mapping found: bind before setup
    store = MooncakeDistributedStore()
    # setup with seven positional arguments; its return value is not checked
    # by LMCache, but a failed setup would surface at the first call
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 32 << 20, "tcp", "", addr) == 0
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    cfg.preferred_segment = store.get_hostname()  # prefer_local_alloc
    chunk = 128 << 10
    nchunks = 12
    pin = np.zeros(2 * nchunks * chunk, dtype=np.uint8)
    assert store.register_buffer(pin.ctypes.data, pin.size) == 0  # _register_cpu_buffer
    keys = [f"vllm@model@{n}@{rank}@{0xC4A000 + i:x}" for i in range(nchunks)]
    data = _data("lmcache", rank, (nchunks, chunk))
    slow = 0.0
    if opts.get("save_chunk_meta", True):
        # put: put_parts(key, metadata, kv_bytes), each under a 1 s timeout
        for i, k in enumerate(keys):
            meta = META.pack(chunk, 2, 16, 8, 128, 1, 0)
            t0 = time.monotonic()
            assert store.put_parts(k, meta, memoryview(data[i])) == 0
            slow = max(slow, time.monotonic() - t0)
        barrier.wait()
        # contains: is_exist per key, counting hits from the start
        other = (rank + 1) % n
        okeys = [f"vllm@model@{n}@{other}@{0xC4A000 + i:x}" for i in range(nchunks)]
        assert sum(1 for k in okeys if store.is_exist(k)) == nchunks
        # batched_get: batch_get_buffer, then the header and the payload
        # read through the buffer protocol (memoryview, frombuffer)
        bufs = store.batch_get_buffer(okeys)
        odata = _data("lmcache", other, (nchunks, chunk))
        for i, b in enumerate(bufs):
            assert b is not None, f"chunk {i} missing"
            view = memoryview(b)
            if opts.get("views"):  # same host: the handles are the stored chunks in place
                assert view.readonly
            assert META.unpack(view[:META.size])[0] == chunk
            assert len(view) == META.size + chunk
            assert np.array_equal(np.frombuffer(b, dtype=np.uint8, offset=META.size, count=chunk), odata[i])
        del bufs, view
    else:
        # save_chunk_meta False: zero copy from the registered pool
        pin[:nchunks * chunk] = data.reshape(-1)
        ptrs = [pin.ctypes.data + i * chunk for i in range(nchunks)]
        res = store.batch_put_from(keys, ptrs, [chunk] * nchunks, cfg)
        assert res == [0] * nchunks, res
        barrier.wait()
        other = (rank + 1) % n
        okeys = [f"vllm@model@{n}@{other}@{0xC4A000 + i:x}" for i in range(nchunks)]
        dptrs = [pin.ctypes.data + (nchunks + i) * chunk for i in range(nchunks)]
        res = store.batch_get_into(okeys, dptrs, [chunk] * nchunks)
        assert res == [chunk] * nchunks, res
        assert np.array_equal(pin[nchunks * chunk:].reshape(nchunks, chunk), _data("lmcache", other, (nchunks, chunk)))
    barrier.wait()
    assert store.unregister_buffer(pin.ctypes.data) == 0  # close()
    name = store.get_hostname()
    store.close()
    return {"name": name, "slowest_put_s": slow}


RANKS = {"vllm": vllm_rank, "sglang": sglang_rank, "lmcache": lmcache_rank}


def rank_main(engine, rank, q, n, addr, barrier, opts):
    _run(RANKS[engine], rank, q, n, addr, barrier, opts)


def hosting_rank(q, addr, nobj, hold):
    """A rank that hosts a segment, writes nobj objects into it (preferring
    its own segment, as LMCache's prefer_local_alloc does), reports its
    name, then waits to be killed (or for `hold` to be set)."""
    try:
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", addr) == 0
        cfg = ReplicateConfig(preferred_segment=store.get_hostname())
        for i in range(nobj):
            assert store.put(f"dead:{store.get_hostname()}:{i}", bytes([i % 256]) * 4096, cfg) == 0
        q.put(("ok", store.get_hostname()))
    except BaseException:  # noqa: BLE001
        q.put(("err", traceback.format_exc()))
        return
    hold.wait(120)
    store.close()


# -- A tensor-parallel rank killed mid-batch (test_rank_death.py) --------------

def _kv_bytes(key, n):
    """The bytes of key's object, whoever writes it (MLA pages are written by
    every rank, so every writer must write the same bytes)."""
    return np.frombuffer(np.random.default_rng(zlib.crc32(key.encode())).bytes(n), dtype=np.uint8)


class _TPRank:
    """A vLLM-style rank: a segment of its own, a paged KV cache registered
    once (block slot i holds one object: its K page then its V page), keys
    of its own (model@tp_rank:r@hash) and MLA keys every rank shares
    (model@mla@hash)."""

    SLOTS = 96

    def __init__(self, rank, addr):
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        self.rank = rank
        self.store = MooncakeDistributedStore()
        assert self.store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", addr) == 0
        self.cfg = ReplicateConfig()
        self.kv = np.zeros((2, self.SLOTS, PAGE), dtype=np.uint8)
        self.base = self.kv.ctypes.data
        assert self.store.register_buffer(self.base, self.kv.nbytes) == 0

    @staticmethod
    def own(r, h):
        return f"model@tp_rank:{r}@{h:064x}"

    @staticmethod
    def shared(h):
        return f"model@mla@{h:064x}"

    def meta(self, slots):
        seg = self.SLOTS * PAGE
        return ([[self.base + s * PAGE, self.base + seg + s * PAGE] for s in slots], [[PAGE, PAGE] for _ in slots])

    def fill(self, keys, slots):
        for k, s in zip(keys, slots):
            b = _kv_bytes(k, 2 * PAGE)
            self.kv[0, s], self.kv[1, s] = b[:PAGE], b[PAGE:]

    def save(self, keys, slots):
        """The store worker's save: the dedup probe, then one multi-buffer
        put of the missing keys. Every result is 0 or a code."""
        self.fill(keys, slots)
        exist = self.store.batch_is_exist(keys)
        missing = [i for i, e in enumerate(exist) if e != 1]
        if not missing:
            return []
        a, s = self.meta([slots[i] for i in missing])
        res = self.store.batch_put_from_multi_buffers([keys[i] for i in missing], a, s, self.cfg)
        assert all(r == 0 or r < 0 for r in res), res
        return res

    def check(self, keys, scratch):
        """Reads keys into scratch slots: each is all its bytes, right, or a
        negative code; never a part or another object's bytes. The keys
        read."""
        a, s = self.meta(scratch[:len(keys)])
        res = self.store.batch_get_into_multi_buffers(keys, a, s)
        for k, r, slot in zip(keys, res, scratch):
            assert r == 2 * PAGE or r < 0, (k, r)
            if r > 0:
                got = np.concatenate([self.kv[0, slot], self.kv[1, slot]])
                assert np.array_equal(got, _kv_bytes(k, 2 * PAGE)), f"{k}: torn or foreign bytes"
        return [k for k, r in zip(keys, res) if r > 0]


def tp_rank_killed_mid_batch(rank, n, addr, q, barrier, dead, done, opts):
    """Ranks 0..n-2 survive; rank n-1 is the victim: after the common save it
    holds put sessions on the next MLA pages (half written, as vLLM's
    layerwise save leaves them between layers) and saves batches of its own
    until the test kills it. A survivor reports, then keeps its segment (and
    the objects in it) until `done`. A rank started with rejoin=True is the
    victim restarted under the same hostname."""
    def body():
        t = _TPRank(rank, addr)
        nblk = 16
        first = [0xB10C00 + i for i in range(nblk)]      # saved by every rank
        held = [0xB10C00 + nblk + i for i in range(nblk)]  # the victim's sessions
        own = [t.own(rank, h) for h in first]
        mla = [t.shared(h) for h in first]
        scratch = list(range(64, 96))
        if opts.get("rejoin"):
            t.save(own, list(range(nblk)))
            # the scheduler's lookup over every rank: a full hit again
            everyone = [t.own(r, h) for h in first for r in range(n)] + mla + [t.shared(h) for h in held]
            assert t.store.batch_is_exist(everyone) == [1] * len(everyone)
            for i in range(0, len(everyone), len(scratch)):
                part = everyone[i:i + len(scratch)]
                assert t.check(part, scratch) == part
            t.store.close()
            return "rejoined"
        res = t.save(own, list(range(nblk)))
        assert res in ([], [0] * nblk), res
        res = t.save(mla, list(range(nblk, 2 * nblk)))  # ranks race: the losers get 0 too
        assert all(r == 0 for r in res), res
        barrier.wait()
        if rank == n - 1:
            mid = [t.shared(h) for h in held]
            assert t.store.batch_put_session_start(mid, [2 * PAGE] * nblk) == [0] * nblk
            t.fill(mid, range(32, 48))
            a, _ = t.meta(range(32, 48))
            got = t.store.batch_put_from_multi_buffer_ranges(mid, [[x[0]] for x in a], [[PAGE]] * nblk,
                                                             [[0]] * nblk)
            assert got == [PAGE] * nblk, got
            i = 0
            while True:  # killed in here
                keys = [t.own(rank, 0xDEAD00 + i * nblk + j) for j in range(nblk)]
                t.save(keys, list(range(48, 48 + nblk)))
                if i == 0:
                    q.put(("mid", rank, t.store.get_hostname()))
                i += 1
        q.put(("ready", rank, None))
        assert dead.wait(120), "the victim was never killed"
        # What a survivor finds: every object there whole and right
        everyone = [t.own(r, h) for h in first for r in range(n)] + mla
        for i in range(0, len(everyone), len(scratch)):
            t.check(everyone[i:i + len(scratch)], scratch)
        # The MLA pages the victim was writing: a survivor's save of them
        # lands and loads well within put-timeout (the dead rank's puts were
        # abandoned with its connection, not left to hold the keys)
        mine = [t.shared(h) for h in held]
        deadline = time.monotonic() + 20
        while True:
            t.save(mine, list(range(32, 48)))
            if t.check(mine, scratch) == mine:
                break
            assert time.monotonic() < deadline, t.store.batch_is_exist(mine)
            time.sleep(0.05)
        # Its own blocks, saved again (what lived in the victim's segment is
        # gone, and the dedup probe puts just that back) until they load: an
        # MLA page another survivor is still putting answers -703 until it
        # lands (its put answered this rank 0, as Mooncake's does)
        deadline = time.monotonic() + 20
        while True:
            t.save(own, list(range(nblk)))
            t.save(mla, list(range(nblk, 2 * nblk)))
            if t.check(own + mla, scratch) == own + mla:
                break
            assert time.monotonic() < deadline, "blocks saved again never loaded"
            time.sleep(0.05)
        q.put(("ok", rank, "survived"))
        assert done.wait(120)
        t.store.close()
        return "closed"
    _run(lambda r: body(), rank, q)
