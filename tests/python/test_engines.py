"""The engines' call sequences, unchanged, with 2 and 4 tensor-parallel
ranks per host: each rank a process of its own calling the drop-in exactly
as vLLM's MooncakeStoreConnector, SGLang's HiCache MooncakeStore and
LMCache's mooncakestore connector do (tests/python/engine_ranks.py has the
sequences and says where they come from). Before this worked, the second
rank's setup failed: every rank mounted a segment under the same hostname."""
import multiprocessing as mp

import pytest

import engine_ranks
from conftest import Server, free_port


def run_ranks(engine, n, server, **opts):
    server.cli("REMOVE.ALL")  # each engine starts from an empty store
    addr = server.addr
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    # Bounds only (a failing run says so when they pass): four spawned ranks
    # beside both CI suites on two cores can be slow to reach a barrier.
    barrier = ctx.Barrier(n, timeout=150)
    procs = [ctx.Process(target=engine_ranks.rank_main, args=(engine, r, q, n, addr, barrier, opts))
             for r in range(n)]
    for p in procs:
        p.start()
    out = {}
    try:
        for _ in range(n):
            status, rank, info = q.get(timeout=300)
            out[rank] = (status, info)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    errs = {r: info for r, (status, info) in out.items() if status != "ok"}
    # Each rank's exception first (a suite's log keeps the message's first
    # line), then the tracebacks.
    assert not errs, "; ".join(f"rank {r}: {str(tb).strip().splitlines()[-1]}" for r, tb in sorted(errs.items())) + \
        "\n" + "\n".join(f"rank {r}:\n{tb}" for r, tb in sorted(errs.items()))
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [out[r][1] for r in range(n)]


@pytest.mark.parametrize("n", [2, 4])
def test_vllm_embedded_ranks(server, n):
    names = run_ranks("vllm", n, server)
    # every rank mounted a segment of its own, named host:port
    assert len(set(names)) == n and all(x.startswith("127.0.0.1:") for x in names)


@pytest.mark.parametrize("n", [2, 4])
def test_vllm_preferred_segment_that_does_not_exist(server, n):
    # extra_config's preferred_segment names a standalone store that is not
    # there: Mooncake places the replicas elsewhere, and so does this store
    run_ranks("vllm", n, server, preferred_segment="no-such-owner:12345")


def test_vllm_standalone_store_ranks(server):
    run_ranks("vllm", 2, server, mode="standalone-store")


@pytest.fixture(scope="module")
def http_server():
    """A server with its HTTP port open, as SGLang's check_server expects
    (master_metrics_port)."""
    port = free_port()
    s = Server("--http-port", str(port))
    s.http_port = port
    yield s
    s.stop()


@pytest.mark.parametrize("n", [2, 4])
def test_sglang_mha_ranks(http_server, n):
    names = run_ranks("sglang", n, http_server, http=http_server.http_port)
    assert len(set(names)) == n
    # what check_server polls: one segment name per line (the pool, "self", at least)
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{http_server.http_port}/get_all_segments", timeout=3) as r:
        body = r.read().decode()
    assert body.endswith("\n") and "self" in body.splitlines()


@pytest.mark.parametrize("n", [2, 4])
def test_sglang_mla_ranks_share_pages(server, n):
    # all ranks put the same page keys at once: the losers of each race get
    # 0 (the key exists), and everyone reads the same bytes back
    run_ranks("sglang", n, server, mla=True)


def test_sglang_standalone_storage(server):
    run_ranks("sglang", 2, server, standalone=True)


@pytest.mark.parametrize("n", [2, 4])
def test_lmcache_chunk_meta_ranks(server, n):
    infos = run_ranks("lmcache", n, server)
    assert len({i["name"] for i in infos}) == n
    # (LMCache counts a put that takes over 1 s as failed: how long they
    # take is utils/bench/bench-engines.py's business, not a timed assertion here)


@pytest.fixture(scope="module")
def unix_server(tmp_path_factory):
    """Ranks on the server's host, as engines are deployed: shared memory."""
    sock = str(tmp_path_factory.mktemp("engines") / "mc.sock")
    s = Server("--unixsocket", sock)
    yield s
    s.stop()


def test_lmcache_chunk_meta_ranks_read_views(unix_server):
    # batch_get_buffer's handles are views there (no copy into the local buffer)
    run_ranks("lmcache", 2, unix_server, views=True)


@pytest.mark.parametrize("n", [2, 4])
def test_lmcache_zero_copy_ranks(server, n):
    run_ranks("lmcache", n, server, save_chunk_meta=False)


@pytest.mark.parametrize("n", [2])
def test_vllm_cuda_kv_cache_ranks(server, n):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the GPU paths run where one is lent (shared/notes/gpu-device.md)")
    run_ranks("vllm", n, server, cuda=True)
