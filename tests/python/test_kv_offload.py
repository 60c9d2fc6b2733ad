"""KV-cache offload as inference engines do it, through the binding.

A paged KV cache (a torch.float16 tensor, filled with random values) is cut
into blocks of block_tokens tokens; each block of a prompt is keyed by a
chained prefix hash (the hash of the previous block's hash and this block's
token ids), as vLLM and SGLang key theirs, so a prompt that shares a prefix
with an earlier one finds the same keys. The tests save blocks, restore them
into a zeroed cache at other block ids (a new request gets other physical
blocks) and compare with torch.equal; they look up how long a stored prefix
is, save without blocking while the engine computes, and fill the store up.

Every test names its keys after a fresh model name, so the tests need not
rely on remove_all and cannot see each other's blocks.
"""
import asyncio
import hashlib
import os
import uuid

import pytest

torch = pytest.importorskip("torch")

import mooncake  # noqa: E402
from mooncake.store import (  # noqa: E402
    BUFFER_OVERFLOW,
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    OBJECT_NOT_FOUND,
    MooncakeDistributedStore,
    ReplicateConfig,
)

from conftest import Server  # noqa: E402

# Small enough for the test server's 256 MB pool: a block is 8 slices of 8 KiB.
LAYERS, BLOCKS, BLOCK_TOKENS, HEADS, HEAD_DIM = 4, 32, 16, 4, 64
DTYPE = torch.float16


# -- helpers ----------------------------------------------------------------

def random_cache(shape, gen):
    # randn in float32 then cast: random bits in every element, no NaN patterns.
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(DTYPE)


def layer_major_cache(gen=None):
    """vLLM's layout: [layers, 2 (K, V), blocks, block_tokens, heads, head_dim].
    A block is LAYERS*2 separate slices, each contiguous."""
    shape = (LAYERS, 2, BLOCKS, BLOCK_TOKENS, HEADS, HEAD_DIM)
    return random_cache(shape, gen) if gen is not None else torch.zeros(shape, dtype=DTYPE)


def nbytes(t):
    return t.numel() * t.element_size()


def slice_bytes():
    return BLOCK_TOKENS * HEADS * HEAD_DIM * torch.tensor([], dtype=DTYPE).element_size()


BLOCK_BYTES = LAYERS * 2 * slice_bytes()


def prompt_tokens(n_blocks, gen):
    return torch.randint(0, 32000, (n_blocks * BLOCK_TOKENS,), generator=gen, dtype=torch.int64)


def chained_hashes(tokens):
    """One hex digest per full block: sha256(previous digest + block tokens)."""
    out, prev = [], b""
    for i in range(0, len(tokens) - len(tokens) % BLOCK_TOKENS, BLOCK_TOKENS):
        prev = hashlib.sha256(prev + tokens[i:i + BLOCK_TOKENS].numpy().tobytes()).digest()
        out.append(prev.hex())
    return out


def vllm_keys(model, hashes):
    return [f"{model}@tp_rank:0@{h}" for h in hashes]


def new_model():
    return f"model-{uuid.uuid4().hex[:12]}"


def block_ptrs(cache, b):
    """vLLM's multi-buffer form of one block: a pointer and size per
    (layer, K/V) slice, in layer-major order."""
    ptrs = [cache[l, kv, b].data_ptr() for l in range(LAYERS) for kv in range(2)]
    return ptrs, [slice_bytes()] * len(ptrs)


def block_bytes_of(cache, b):
    """What the store holds for block b of a layer-major cache: its slices
    concatenated in the order they were given."""
    return b"".join(cache[l, kv, b].contiguous().view(torch.uint8).numpy().tobytes()
                    for l in range(LAYERS) for kv in range(2))


def assert_blocks_equal(src, src_blocks, dst, dst_blocks):
    for sb, db in zip(src_blocks, dst_blocks):
        assert torch.equal(src[:, :, sb], dst[:, :, db]), f"block {sb} restored into {db} differs"


def untouched_zero(dst, written):
    others = [b for b in range(BLOCKS) if b not in set(written)]
    return bool((dst[:, :, others] == 0).all())


@pytest.fixture
def gen():
    g = torch.Generator()
    g.manual_seed(int.from_bytes(os.urandom(4), "little"))
    return g


def block_table(gen, n):
    """n distinct physical blocks, in a random order."""
    return torch.randperm(BLOCKS, generator=gen)[:n].tolist()


# -- vLLM: one object per block from LAYERS*2 buffers -------------------------

def test_vllm_multi_buffer_save_restore(mstore, gen):
    src, dst = layer_major_cache(gen), layer_major_cache()
    assert mstore.register_buffer(src.data_ptr(), nbytes(src)) == 0
    assert mstore.register_buffer(dst.data_ptr(), nbytes(dst)) == 0
    n = 12
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(n, gen)))
    src_blocks, dst_blocks = block_table(gen, n), block_table(gen, n)

    # vLLM asks what exists first and writes only the rest: nothing yet.
    assert mstore.batch_is_exist(keys) == [0] * n
    ptrs, sizes = zip(*(block_ptrs(src, b) for b in src_blocks))
    assert mstore.batch_put_from_multi_buffers(keys, ptrs, sizes, ReplicateConfig()) == [0] * n
    assert mstore.batch_is_exist(keys) == [1] * n
    assert [mstore.get_size(k) for k in keys] == [BLOCK_BYTES] * n
    # The object is the slices concatenated in order.
    assert mstore.get(keys[0]) == block_bytes_of(src, src_blocks[0])
    assert mstore.get(keys[-1]) == block_bytes_of(src, src_blocks[-1])

    ptrs, sizes = zip(*(block_ptrs(dst, b) for b in dst_blocks))
    assert mstore.batch_get_into_multi_buffers(keys, ptrs, sizes) == [BLOCK_BYTES] * n
    assert_blocks_equal(src, src_blocks, dst, dst_blocks)
    assert untouched_zero(dst, dst_blocks)


def test_vllm_multi_buffer_errors(mstore, gen):
    src, dst = layer_major_cache(gen), layer_major_cache()
    assert mstore.register_buffer(src.data_ptr(), nbytes(src)) == 0
    assert mstore.register_buffer(dst.data_ptr(), nbytes(dst)) == 0
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(3, gen)))
    ptrs, sizes = block_ptrs(src, 0)
    assert mstore.batch_put_from_multi_buffers(keys[:1], [ptrs], [sizes]) == [0]

    # A destination one slice short: INVALID_PARAMS for that key only, the
    # other keys of the batch answer as they would alone.
    short_p, short_s = block_ptrs(dst, 1)
    full_p, full_s = block_ptrs(dst, 2)
    res = mstore.batch_get_into_multi_buffers(keys[:2] + keys[:1], [short_p[:-1], full_p, full_p],
                                              [short_s[:-1], full_s, full_s])
    assert res == [INVALID_PARAMS, OBJECT_NOT_FOUND, BLOCK_BYTES]
    assert torch.equal(dst[:, :, 2], src[:, :, 0])

    # A pointer outside registered memory is refused, not dereferenced.
    stray = layer_major_cache(gen)
    bad_p, bad_s = block_ptrs(stray, 0)
    res = mstore.batch_put_from_multi_buffers(keys[1:3], [bad_p, ptrs], [bad_s, sizes])
    assert res[0] == INVALID_PARAMS and res[1] == 0
    assert mstore.batch_is_exist(keys[1:3]) == [0, 1]


def test_block_major_layout_batch_put_from(mstore, gen):
    """A layout where a block is contiguous ([blocks, layers, 2, ...]): one
    pointer per block with batch_put_from/batch_get_into. The object is the
    same bytes vLLM's multi-buffer form writes, so the two layouts read each
    other's blocks."""
    layer_major = layer_major_cache(gen)
    block_major = layer_major.permute(2, 0, 1, 3, 4, 5).contiguous()  # [blocks, layers, 2, ...]
    assert nbytes(block_major[0]) == BLOCK_BYTES
    dst_bm = torch.zeros_like(block_major)
    dst_lm = layer_major_cache()
    for t in (block_major, dst_bm, layer_major, dst_lm):
        assert mstore.register_buffer(t.data_ptr(), nbytes(t)) == 0
    n = 10
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(2 * n, gen)))
    src_blocks = block_table(gen, 2 * n)

    # The first n blocks from the block-major cache, one buffer each.
    first = src_blocks[:n]
    assert mstore.batch_put_from(keys[:n], [block_major[b].data_ptr() for b in first],
                                 [BLOCK_BYTES] * n) == [0] * n
    # The next n from the layer-major cache, multi-buffer.
    ptrs, sizes = zip(*(block_ptrs(layer_major, b) for b in src_blocks[n:]))
    assert mstore.batch_put_from_multi_buffers(keys[n:], ptrs, sizes) == [0] * n

    # All 2n into the block-major cache (contiguous reads of both kinds).
    dst_blocks = block_table(gen, 2 * n)
    res = mstore.batch_get_into(keys, [dst_bm[b].data_ptr() for b in dst_blocks], [BLOCK_BYTES] * (2 * n))
    assert res == [BLOCK_BYTES] * (2 * n)
    for sb, db in zip(src_blocks, dst_blocks):
        assert torch.equal(block_major[sb], dst_bm[db])
    # And all 2n scattered into the layer-major cache.
    ptrs, sizes = zip(*(block_ptrs(dst_lm, b) for b in dst_blocks))
    assert mstore.batch_get_into_multi_buffers(keys, ptrs, sizes) == [BLOCK_BYTES] * (2 * n)
    assert_blocks_equal(layer_major, src_blocks, dst_lm, dst_blocks)
    assert untouched_zero(dst_lm, dst_blocks)

    # put of a key that exists succeeds and keeps the first value (Mooncake's rule).
    other = (src_blocks[0] + 1) % BLOCKS
    assert mstore.batch_put_from(keys[:1], [block_major[other].data_ptr()], [BLOCK_BYTES]) == [0]
    assert mstore.get(keys[0]) == block_major[src_blocks[0]].view(torch.uint8).numpy().tobytes()


# -- SGLang HiCache: two keys per page, K and V ------------------------------

def test_sglang_k_v_pages(mstore, gen):
    """A [2, pages, layers, tokens, heads, dim] cache: a page's K (and its V)
    for all layers is contiguous, stored as `<hash>_k` and `<hash>_v`.
    SGLang probes with batch_is_exist, counts the leading hits, and writes
    only the pages that are missing."""
    src = random_cache((2, BLOCKS, LAYERS, BLOCK_TOKENS, HEADS, HEAD_DIM), gen)
    dst = torch.zeros_like(src)
    page = nbytes(src[0, 0])
    assert mstore.register_buffer(src.data_ptr(), nbytes(src)) == 0
    assert mstore.register_buffer(dst.data_ptr(), nbytes(dst)) == 0
    n = 9
    hashes = chained_hashes(prompt_tokens(n, gen))
    tag = uuid.uuid4().hex[:8]
    keys = [f"{h}_{tag}_{kv}" for h in hashes for kv in ("k", "v")]
    pages = block_table(gen, n)
    ptrs = [src[kv, p].data_ptr() for p in pages for kv in (0, 1)]

    def stored_pages():
        hit = mstore.batch_is_exist(keys)
        count = 0
        for i in range(n):  # a page counts when both its keys are there
            if hit[2 * i] != 1 or hit[2 * i + 1] != 1:
                break
            count += 1
        return count

    assert stored_pages() == 0
    k = 4  # an earlier request stored the first k pages
    assert mstore.batch_put_from(keys[:2 * k], ptrs[:2 * k], [page] * (2 * k)) == [0] * (2 * k)
    assert stored_pages() == k
    missing = [i for i, e in enumerate(mstore.batch_is_exist(keys)) if e != 1]
    assert missing == list(range(2 * k, 2 * n))
    assert mstore.batch_put_from([keys[i] for i in missing], [ptrs[i] for i in missing],
                                 [page] * len(missing)) == [0] * len(missing)
    assert stored_pages() == n

    dst_pages = block_table(gen, n)
    dptrs = [dst[kv, p].data_ptr() for p in dst_pages for kv in (0, 1)]
    res = mstore.batch_get_into(keys, dptrs, [page] * (2 * n))
    assert all(r > 0 for r in res) and res == [page] * (2 * n)
    for sp, dp in zip(pages, dst_pages):
        assert torch.equal(src[:, sp], dst[:, dp])


# -- the Pythonic API: lists of tensor slices --------------------------------

def test_store_batch_put_tensor_slices(store, gen):
    src, dst = layer_major_cache(gen), layer_major_cache()
    n = 8
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(n, gen)))
    src_blocks, dst_blocks = block_table(gen, n), block_table(gen, n)

    def pieces(cache, b):
        return [cache[l, kv, b] for l in range(LAYERS) for kv in range(2)]

    assert store.exists_many(keys) == [False] * n
    assert store.batch_put(keys, [pieces(src, b) for b in src_blocks]) == [None] * n
    assert store.exists_many(keys) == [True] * n
    assert store.size(keys[0]) == BLOCK_BYTES
    assert store.get(keys[0]) == block_bytes_of(src, src_blocks[0])
    assert store.batch_get_into(keys, [pieces(dst, b) for b in dst_blocks]) == [BLOCK_BYTES] * n
    assert_blocks_equal(src, src_blocks, dst, dst_blocks)
    assert untouched_zero(dst, dst_blocks)

    # One block into a contiguous tensor of the block-major shape.
    flat = torch.zeros((LAYERS, 2, BLOCK_TOKENS, HEADS, HEAD_DIM), dtype=DTYPE)
    assert store.get_into(keys[1], flat) == BLOCK_BYTES
    assert torch.equal(flat, src[:, :, src_blocks[1]])

    # A slice across layers is not contiguous: refused, nothing copied behind our back.
    with pytest.raises(ValueError):
        store.put(keys[0] + "-strided", src[:, 0, 0])
    # A missing key in a batch: NotFoundError (a KeyError), or per key.
    missing = keys[0] + "-missing"
    with pytest.raises(KeyError):
        store.batch_get_into([keys[0], missing], [pieces(dst, 0), pieces(dst, 1)])
    res = store.batch_get_into([missing, keys[2]], [pieces(dst, 0), pieces(dst, dst_blocks[2])],
                               raise_on_error=False)
    assert isinstance(res[0], mooncake.NotFoundError) and res[1] == BLOCK_BYTES


# -- how long a stored prefix is ----------------------------------------------

def test_prefix_lookup(mstore, store, gen):
    src = layer_major_cache(gen)
    assert mstore.register_buffer(src.data_ptr(), nbytes(src)) == 0
    m = 10
    n = int(torch.randint(2, m - 1, (1,), generator=gen))
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(m, gen)))
    blocks = block_table(gen, m)

    def put(idx):
        ptrs, sizes = zip(*(block_ptrs(src, blocks[i]) for i in idx))
        assert mstore.batch_put_from_multi_buffers([keys[i] for i in idx], ptrs, sizes) == [0] * len(idx)

    def sglang_count(ks):
        count = 0
        for e in mstore.batch_is_exist(ks):
            if e != 1:
                break
            count += 1
        return count

    def all_ways(ks):
        ways = (sglang_count(ks), mstore.batch_prefix_exist(ks), store.prefix_length(ks))
        assert len(set(ways)) == 1, f"batch_is_exist, batch_prefix_exist, prefix_length: {ways}"
        return ways[0]

    assert all_ways(keys) == 0
    put(range(n))
    assert all_ways(keys) == n
    assert all_ways(keys[:n]) == n
    # A later block stored past a hole: the prefix still ends at the hole.
    put([n + 1])
    assert mstore.batch_is_exist(keys)[n:n + 2] == [0, 1]
    assert all_ways(keys) == n
    # A miss in the middle of the stored prefix.
    hole = int(torch.randint(1, n, (1,), generator=gen))
    assert mstore.remove(keys[hole]) == 0
    assert all_ways(keys) == hole
    # A prompt whose first block is another one's: zero.
    other = vllm_keys(new_model(), chained_hashes(prompt_tokens(m, gen)))
    assert all_ways(other + keys) == 0
    assert all_ways([keys[0]]) == 1
    assert mstore.batch_prefix_exist([]) == 0 and store.prefix_length([]) == 0
    # With a lease the answer is the same, and the blocks it found can be read.
    assert store.prefix_length(keys, lease=True) == hole
    dst = torch.zeros((LAYERS, 2, BLOCK_TOKENS, HEADS, HEAD_DIM), dtype=DTYPE)
    assert store.get_into(keys[hole - 1], dst) == BLOCK_BYTES
    assert torch.equal(dst, src[:, :, blocks[hole - 1]])


# -- saves that do not wait: submitted, then compute, then waited for -----------

def compute(gen):
    """Stand-in for a forward pass: a few matmuls while the save runs."""
    a = torch.randn((256, 256), generator=gen)
    for _ in range(8):
        a = torch.tanh(a @ a.T / 16)
    return a


def test_async_save_overlapped_with_compute(mstore, gen):
    src = random_cache((BLOCKS, LAYERS, 2, BLOCK_TOKENS, HEADS, HEAD_DIM), gen)  # block-major
    dst = torch.zeros_like(src)
    assert mstore.register_buffer(src.data_ptr(), nbytes(src)) == 0
    assert mstore.register_buffer(dst.data_ptr(), nbytes(dst)) == 0
    n = 16
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(n, gen)))
    blocks = block_table(gen, n)
    fut = mstore.batch_put_from_async(keys, [src[b].data_ptr() for b in blocks], [BLOCK_BYTES] * n,
                                      ReplicateConfig())
    assert isinstance(fut, mooncake.Future)
    out = compute(gen)
    assert torch.isfinite(out).all()
    assert fut.result(timeout=30) == [0] * n
    assert fut.done()
    assert mstore.batch_is_exist(keys) == [1] * n

    dst_blocks = block_table(gen, n)
    fut = mstore.batch_get_into_async(keys, [dst[b].data_ptr() for b in dst_blocks], [BLOCK_BYTES] * n)
    compute(gen)
    assert fut.result(timeout=30) == [BLOCK_BYTES] * n
    for sb, db in zip(blocks, dst_blocks):
        assert torch.equal(src[sb], dst[db])

    # A multi-buffer (vLLM) save without blocking as well.
    lm = layer_major_cache(gen)
    assert mstore.register_buffer(lm.data_ptr(), nbytes(lm)) == 0
    keys2 = vllm_keys(new_model(), chained_hashes(prompt_tokens(4, gen)))
    ptrs, sizes = zip(*(block_ptrs(lm, b) for b in range(4)))
    fut = mstore.batch_put_from_async(keys2, [list(p) for p in ptrs], [list(s) for s in sizes])
    compute(gen)
    assert fut.result(timeout=30) == [0] * 4
    assert mstore.get(keys2[3]) == block_bytes_of(lm, 3)


def test_async_store_api_and_asyncio(store, gen):
    src, dst = layer_major_cache(gen), layer_major_cache()
    n = 8
    keys = vllm_keys(new_model(), chained_hashes(prompt_tokens(n, gen)))
    blocks, dst_blocks = block_table(gen, n), block_table(gen, n)

    def pieces(cache, b):
        return [cache[l, kv, b] for l in range(LAYERS) for kv in range(2)]

    fut = store.batch_put_async(keys[:n // 2], [pieces(src, b) for b in blocks[:n // 2]])
    compute(gen)
    assert fut.result(timeout=30) == [None] * (n // 2)

    async def engine_step():
        # The rest saved from inside an event loop. A batch still running
        # when awaited must leave the loop free: the ticker task, ready to
        # run, then gets a turn before the await ends.
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        put = store.batch_put_async(keys[n // 2:], [pieces(src, b) for b in blocks[n // 2:]])
        pending = not put.done()
        put_res = await put
        loop_ran = ticks > 0
        # Composes with other coroutines as any awaitable does.
        get = store.batch_get_into_async(keys, [pieces(dst, b) for b in dst_blocks])
        get_res, _ = await asyncio.gather(get, asyncio.sleep(0.01))
        t.cancel()
        return put_res, get_res, pending, loop_ran

    put_res, get_res, pending, loop_ran = asyncio.run(engine_step())
    assert put_res == [None] * (n - n // 2)
    assert get_res == [BLOCK_BYTES] * n
    if pending:
        assert loop_ran, "awaiting a running batch blocked the event loop"
    assert_blocks_equal(src, blocks, dst, dst_blocks)
    assert untouched_zero(dst, dst_blocks)


# -- a full store -----------------------------------------------------------------

@pytest.fixture
def tiny_server():
    s = Server(pool="4mb")
    yield s
    s.stop()


def test_store_full_of_pinned_blocks(tiny_server, gen):
    ms = MooncakeDistributedStore()
    assert ms.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", tiny_server.addr) == 0
    st = mooncake.connect(tiny_server.addr)
    try:
        obj = 256 << 10
        n_buf = 64  # 16 MiB of blocks: four times the pool
        src = random_cache((n_buf, obj // 2), gen)
        assert ms.register_buffer(src.data_ptr(), nbytes(src)) == 0
        pinned = ReplicateConfig(with_hard_pin=True)
        model = new_model()
        stored, first_fail = [], None
        for i in range(n_buf):
            key = f"{model}@tp_rank:0@{i}"
            rc = ms.put_from(key, src[i].data_ptr(), obj, pinned)
            if rc != 0:
                first_fail = (i, rc)
                break
            stored.append(i)
        assert first_fail is not None, "a 4 MB pool took 16 MB of hard-pinned blocks"
        assert first_fail[1] == NO_AVAILABLE_HANDLE
        assert len(stored) >= 8  # most of the pool was usable

        # Every further put is refused the same way: pinned or not, alone or batched.
        later = [f"{model}@tp_rank:0@later{i}" for i in range(4)]
        assert ms.put_from(later[0], src[-1].data_ptr(), obj) == NO_AVAILABLE_HANDLE
        assert ms.put_from(later[0], src[-1].data_ptr(), obj, pinned) == NO_AVAILABLE_HANDLE
        assert ms.batch_put_from(later, [src[-1 - i].data_ptr() for i in range(4)], [obj] * 4,
                                 pinned) == [NO_AVAILABLE_HANDLE] * 4
        assert ms.batch_put_from_multi_buffers(later[:2], [[src[-1].data_ptr(), src[-2].data_ptr()]] * 2,
                                               [[obj, obj]] * 2) == [NO_AVAILABLE_HANDLE] * 2
        assert ms.put(later[1], b"x" * obj) == NO_AVAILABLE_HANDLE
        # The Pythonic API says so with NoSpaceError.
        with pytest.raises(mooncake.NoSpaceError):
            st.put(later[2], src[-3])
        with pytest.raises(mooncake.NoSpaceError):
            st.batch_put(later[:2], [src[-1], src[-2]], hard_pin=True)
        res = st.batch_put(later[:2], [src[-1], src[-2]], raise_on_error=False)
        assert all(isinstance(r, mooncake.NoSpaceError) for r in res)
        assert ms.batch_is_exist(later) == [0] * 4

        # What was stored is all still there and intact.
        keys = [f"{model}@tp_rank:0@{i}" for i in stored]
        assert ms.batch_is_exist(keys) == [1] * len(keys)
        dst = torch.zeros((len(stored), obj // 2), dtype=DTYPE)
        assert ms.register_buffer(dst.data_ptr(), nbytes(dst)) == 0
        assert ms.batch_get_into(keys, [dst[j].data_ptr() for j in range(len(stored))],
                                 [obj] * len(stored)) == [obj] * len(stored)
        assert torch.equal(dst, src[:len(stored)])
        assert st.get(keys[-1]) == src[stored[-1]].view(torch.uint8).numpy().tobytes()

        # Space comes back when an engine drops a block: the next save fits.
        assert ms.remove(keys[0]) == 0
        assert ms.put_from(later[3], src[-4].data_ptr(), obj, pinned) == 0
        assert tiny_server.proc.poll() is None, "the server exited"
    finally:
        st.close()
        ms.close()
