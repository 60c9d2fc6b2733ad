"""Stores across fork(): a child must never touch what its parent's stores
hold on the server.

Inference engines fork with stores open (vLLM's multiproc workers default to
fork on Linux, multiprocessing's 'fork', DataLoader workers). The child
inherits the store's library handles, whose sockets are the parent's: a
child that used one interleaved its requests with the parent's (replies read
by the wrong process: wrong bytes, protocol errors in the parent), and one
that closed it -- an explicit close(), or the finalizers of a normal exit --
sent PUT.REVOKE for the parent's pending puts and UNMOUNT for its segment.

Each test runs a parent program in a child interpreter (so that the forked
grandchild's exit runs the interpreter's real finalization): the parent
keeps putting and getting while its forked child uses the inherited stores,
closes one explicitly and leaves the others to the exit. Then the parent
checks that every value it read was byte-exact, that its segment is still
mounted, its pending put still its own to end, its view's hold still
standing; the child reports what its calls answered (INVALID_PARAMS from the
drop-in store, InvalidArgumentError from mooncake.Store, saying the store
belongs to another process) and that a store it makes itself works."""
import os
import subprocess
import sys
import textwrap

PROGRAM = r'''
import ctypes, json, os, sys, time
import redis
import mooncake, mooncake.store as ms
from mooncake.store import MooncakeDistributedStore

addr = os.environ["ADDR"]
host, port = addr.rsplit(":", 1)
r = redis.Redis(host=host, port=int(port))

def holds():
    return int(r.info("store")["store_holds"])

def val(tag, i, n=8192):
    b = f"{tag}:{i}:".encode()
    return (b * (n // len(b) + 1))[:n]

# The parent: the drop-in store as an engine sets it up (its own segment),
# and mooncake.Store beside it.
st = MooncakeDistributedStore()
assert st.setup("fk-host:0", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", addr) == 0
seg = st.get_hostname()
lo = mooncake.connect(addr)
own_seg = ms.ReplicateConfig()
own_seg.preferred_segment = seg
assert st.put("fk:seed", val("seed", 0), own_seg) == 0  # in its own segment: shared memory, so a view
view = st.get_buffer("fk:seed")  # one hold on the parent's connection
assert view is not None and bytes(view) == val("seed", 0)
holds0 = holds()
assert holds0 >= 1, holds0
src = ctypes.create_string_buffer(val("sess", 0), 8192)
assert st.register_buffer(ctypes.addressof(src), 8192) == 0
dst = ctypes.create_string_buffer(8192)
assert st.register_buffer(ctypes.addressof(dst), 8192) == 0
assert st.batch_put_session_start(["fk:sess"], [8192]) == [0]

rd, wr = os.pipe()
sys.stdout.flush(); sys.stderr.flush()
pid = os.fork()
if pid == 0:
    os.close(rd)
    rep = {"bad": [], "words": ""}
    def expect(ok, what):
        if not ok:
            rep["bad"].append(what)
    for i in range(20):
        expect(st.put(f"fk:c{i}", val("child", i)) == ms.INVALID_PARAMS, "put")
        expect(st.get_buffer("fk:seed") is None, "get_buffer")
        expect(st.is_exist("fk:seed") == ms.INVALID_PARAMS, "is_exist")
        expect(st.batch_get_buffer(["fk:seed", "fk:p0"]) == [None, None], "batch_get_buffer")
        try:
            lo.get("fk:seed")
            expect(False, "Store.get did not raise")
        except mooncake.InvalidArgumentError as e:
            rep["words"] = str(e)
    expect(st.batch_put_session_revoke(["fk:sess"]) == [ms.INVALID_PARAMS], "batch_put_session_revoke")
    expect(st.unregister_buffer(ctypes.addressof(src)) == ms.INVALID_PARAMS, "unregister_buffer")
    lo.close()  # explicit; st is left to the finalizers of the exit
    # Stores of the child's own work.
    mine = mooncake.connect(addr)
    mine.put("fk:child", val("mine", 0))
    expect(mine.get("fk:child") == val("mine", 0), "a new Store in the child")
    mine.close()
    own = MooncakeDistributedStore()
    # No segment of its own: the parent's values must not land in memory that goes with the child.
    expect(own.setup("fk-child", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", addr) == 0, "setup in the child")
    expect(own.put("fk:child2", val("mine", 1)) == 0 and own.get("fk:child2") == val("mine", 1),
           "a new MooncakeDistributedStore in the child")
    own.close()
    os.write(wr, json.dumps(rep).encode())
    os.close(wr)
    sys.exit(0)  # a normal exit: st's __del__ and the binding's finalizers run

os.close(wr)
# The parent keeps working while the child runs, and as long again after.
wrong, rounds, status, after = [], 0, None, None
deadline = time.monotonic() + 30
while after != 0:
    k = f"fk:p{rounds}"  # a new key each round: the drop-in put leaves an existing value
    v = val("parent", rounds)
    try:
        # Reads into registered memory, not views: the holds are counted below.
        rc = st.put(k, v) if rounds % 2 else (lo.put(k, v), 0)[1]
        if rounds % 2:
            got = lo.get(k)
        else:
            n = st.get_into(k, ctypes.addressof(dst), 8192)
            got = dst.raw[:n] if n >= 0 else b""
        if rc != 0 or got != v:
            wrong.append((k, rc, len(got)))
    except mooncake.Error as e:
        wrong.append((k, repr(e)))
    rounds += 1
    if after:
        after -= 1
    if status is None:
        w, st_ = os.waitpid(pid, os.WNOHANG)
        if w == pid:
            status = os.waitstatus_to_exitcode(st_)
            after = max(rounds, 20)
        elif time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status, after = "hung: killed", 5
rep = json.loads(os.read(rd, 1 << 16) or b"{}")
out = {"status": status, "child": rep, "wrong": wrong[:5], "rounds": rounds}
# Its view's hold stands (asked first: the gets below make views of their own).
out["holds"] = [holds0, holds()]
out["view_bytes"] = bytes(view) == val("seed", 0)
# The parent's segment is still mounted and takes replicas.
out["segment"] = r.execute_command("SEGMENT.INFO", seg) is not None
out["put_to_segment"] = st.put("fk:h", val("h", 0), own_seg)
out["get_from_segment"] = st.get("fk:h") == val("h", 0)
# Its pending put is still its own.
out["session_write"] = st.batch_put_from_multi_buffer_ranges(["fk:sess"], [[ctypes.addressof(src)]], [[8192]],
                                                               [[0]])
out["session_end"] = st.batch_put_session_end(["fk:sess"])
sv = st.get("fk:sess")
out["session_value"] = sv == val("sess", 0) or repr((len(sv), sv[:40]))  # what it was instead
del view
st.close()
lo.close()
print(json.dumps(out))
'''


def test_forked_child_never_touches_the_parents_stores(server):
    env = dict(os.environ, ADDR=server.addr, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    import json
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["status"] == 0, out
    assert out["child"]["bad"] == [], out["child"]
    assert "another process" in out["child"]["words"], out["child"]
    assert out["wrong"] == [] and out["rounds"] > 0, out
    assert out["segment"] and out["put_to_segment"] == 0 and out["get_from_segment"], out
    assert out["session_write"] == [8192] and out["session_end"] == [0] and out["session_value"] is True, out
    assert out["holds"][1] == out["holds"][0] and out["view_bytes"], out


VIEW_PROGRAM = r'''
import json, os
import mooncake.store as ms
from mooncake.store import MooncakeDistributedStore

st = MooncakeDistributedStore()
assert st.setup("fv-host:0", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", os.environ["ADDR"]) == 0
own = ms.ReplicateConfig(preferred_segment=st.get_hostname())
val = bytes(range(256)) * 64
assert st.put("fv:a", val, own) == 0
view = st.get_buffer("fv:a")
assert memoryview(view).readonly and bytes(view) == val  # a view of the object in place, held
rd, wr = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(rd)
    rep = {}
    try:
        rep["bytes"] = bytes(view)[:8].hex()
    except BufferError as e:
        rep["refused"] = str(e)
    rep["sizes"] = [len(view), view.size(), view.ptr()]
    os.write(wr, json.dumps(rep).encode())
    os._exit(0)
os.close(wr)
child = json.loads(os.read(rd, 65536).decode())
os.waitpid(pid, 0)
out = {"child": child, "parent": bytes(view) == val and len(view) == len(val)}
del view
st.close()
print(json.dumps(out))
'''


def test_a_view_in_a_forked_child_has_no_bytes(server):
    # A get_buffer view is the object where it lies, valid while its hold
    # stands -- a hold on the parent's connection, released whenever the
    # parent frees the handle. libmooncake gives an inherited view no data
    # (mc_view_data NULL), but the handle had kept the address from its
    # making: the child read the mapping with no hold of its own, bytes
    # that become any later object's once the parent lets go.
    env = dict(os.environ, ADDR=server.addr, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(VIEW_PROGRAM)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, f"exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    import json
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["parent"] is True, out
    assert "another process" in out["child"].get("refused", ""), out
    assert out["child"]["sizes"] == [0, 0, 0], out
