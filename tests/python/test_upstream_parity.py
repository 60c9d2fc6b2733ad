"""mooncake.store against upstream Mooncake's binding (store_py.cpp, pybind11):
where a caller moving from upstream would see a different answer for the
same call. Each test is a call upstream answers in a way callers rely on:

- an argument of the wrong type (a key that is not str/bytes, a keys list
  given as one str, a value without the buffer protocol, an address or size
  that is not an int of 0 .. 2**64-1, a config that is not a
  ReplicateConfig) is a TypeError raised before anything is sent, as
  pybind11 refuses to convert it; well-typed bad values (ptr 0, size 0, an
  unregistered address, mismatched list lengths) stay negative codes;
- ReplicateConfig takes only its own fields, each of its type, as pybind's
  def_readwrite does: a typo is an AttributeError, not a setting ignored;
- the enums and fields upstream exports exist (ReplicaStatus,
  ObjectDataType, nof/dfs replica counts, data_type);
- setup(config=dict) by keyword; put_from_with_metadata and
  get_offload_rpc_read_count exist.

The deliberate differences are in README.md, "Python".
"""
import numpy as np
import pytest

import mooncake.store as ms
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

INVALID = ms.INVALID_PARAMS


@pytest.fixture
def st(server):
    """A drop-in store without a segment and a registered 64 KiB buffer."""
    s = MooncakeDistributedStore()
    assert s.setup("parity", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", server.addr) == 0
    buf = np.zeros(1 << 16, np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    s.buf, s.ptr = buf, buf.ctypes.data
    yield s
    s.remove_all()
    s.close()


def test_setup_takes_its_dict_by_keyword(server):
    # Upstream's dict overload is setup(config: dict): setup(config={...})
    # was a TypeError here (unexpected keyword argument 'config').
    s = MooncakeDistributedStore()
    assert s.setup(config={"local_hostname": "kw", "metadata_server": "P2PHANDSHAKE",
                           "global_segment_size": 0, "local_buffer_size": "1MB",
                           "master_server_addr": server.addr}) == 0
    assert s.get_hostname() == "kw"
    assert s.put("par:kw", b"v") == 0 and s.get("par:kw") == b"v"
    assert s.remove("par:kw") == 0
    s.close()
    with pytest.raises(TypeError):
        s.setup("h", config={"master_server_addr": server.addr})
    with pytest.raises(TypeError):
        s.setup(config="local_hostname=h")
    assert s.get_hostname() == "kw" and s.health_check() == 1  # neither set it up


# Calls upstream's pybind refuses to convert (TypeError, nothing sent). Here
# they answered INVALID_PARAMS (-600), which LMCache and SGLang count as a
# miss, so a caller's bug never showed; a keys list given as one str was
# walked as its characters (batch_remove("abc") removed "a", "b" and "c").
WRONG_TYPES = {
    "put key int": lambda s: s.put(123, b"v"),
    "put value str": lambda s: s.put("par:t", "text"),
    "put value int": lambda s: s.put("par:t", 5),
    "put config str": lambda s: s.put("par:t", b"v", "cfg"),
    "put config dict": lambda s: s.put("par:t", b"v", {"replica_num": 1}),
    "upsert key None": lambda s: s.upsert(None, b"v"),
    "put_parts part str": lambda s: s.put_parts("par:t", b"a", "b"),
    "put_batch keys str": lambda s: s.put_batch("par:t", [b"v"]),
    "put_batch values bytes": lambda s: s.put_batch(["par:t"], b"v"),
    "put_batch value int": lambda s: s.put_batch(["par:t"], [7]),
    "put_from ptr float": lambda s: s.put_from("par:t", float(s.ptr), 8),
    "put_from ptr negative": lambda s: s.put_from("par:t", -1, 8),
    "put_from size negative": lambda s: s.put_from("par:t", s.ptr, -8),
    "put_from size 2**64": lambda s: s.put_from("par:t", s.ptr, 1 << 64),
    "put_from ptr bytes": lambda s: s.put_from("par:t", b"12345678", 8),
    "upsert_from size None": lambda s: s.upsert_from("par:t", s.ptr, None),
    "batch_put_from keys str": lambda s: s.batch_put_from("par:t", [s.ptr], [8]),
    "batch_put_from key int": lambda s: s.batch_put_from([1], [s.ptr], [8]),
    "batch_put_from ptrs int": lambda s: s.batch_put_from(["par:t"], s.ptr, [8]),
    "batch_put_from size negative": lambda s: s.batch_put_from(["par:t"], [s.ptr], [-1]),
    "batch_put_from config int": lambda s: s.batch_put_from(["par:t"], [s.ptr], [8], 1),
    "batch_upsert_from size float": lambda s: s.batch_upsert_from(["par:t"], [s.ptr], [8.0]),
    "multi put ptrs flat": lambda s: s.batch_put_from_multi_buffers(["par:t"], [s.ptr], [[8]]),
    "multi put size negative": lambda s: s.batch_put_from_multi_buffers(["par:t"], [[s.ptr]], [[-8]]),
    "session start size str": lambda s: s.batch_put_session_start(["par:t"], ["8"]),
    "remove key int": lambda s: s.remove(5),
    "remove_by_regex int": lambda s: s.remove_by_regex(5),
    "register size negative": lambda s: s.register_buffer(s.ptr, -1),
    "register size 2**70": lambda s: s.register_buffer(s.ptr, 1 << 70),
    "setup size float": lambda s: MooncakeDistributedStore().setup("h", "P2P", 1.5, 0, "tcp", "", "x:1"),
    "setup hostname int": lambda s: MooncakeDistributedStore().setup(5, "P2P", 0, 0, "tcp", "", "x:1"),
}

# The same against stored keys: nothing read, nothing removed.
WRONG_TYPES_READ = {
    "get key int": lambda s: s.get(1),
    "get_buffer key bytearray": lambda s: s.get_buffer(bytearray(b"k")),
    "get_batch keys str": lambda s: s.get_batch("par:a"),
    "batch_get_buffer keys bytes": lambda s: s.batch_get_buffer(b"par:a"),
    "is_exist key None": lambda s: s.is_exist(None),
    "batch_is_exist keys str": lambda s: s.batch_is_exist("par:a"),
    "batch_is_exist key int": lambda s: s.batch_is_exist(["par:a", 2]),
    "get_size key float": lambda s: s.get_size(1.0),
    "get_into ptr str": lambda s: s.get_into("par:a", "0x1000", 8),
    "get_into size negative": lambda s: s.get_into("par:a", s.ptr, -1),
    "batch_get_into sizes float": lambda s: s.batch_get_into(["par:a"], [s.ptr], [8.0]),
    "multi get sizes flat": lambda s: s.batch_get_into_multi_buffers(["par:a"], [[s.ptr]], [8]),
    "get_into_ranges offset negative": lambda s: s.get_into_ranges([s.ptr], [["par:a"]], [[[-1]]], [[[0]]],
                                                                   [[[1]]]),
    "get_into_ranges keys str": lambda s: s.get_into_ranges([s.ptr], ["par:a"], [[[0]]], [[[0]]], [[[1]]]),
    "session ranges size 2**64": lambda s: s.batch_get_into_multi_buffer_ranges(["par:a"], [[s.ptr]],
                                                                                [[1 << 64]], [[0]]),
    "replica_desc keys str": lambda s: s.batch_get_replica_desc("par:a"),
    "batch_remove keys str": lambda s: s.batch_remove("par:a"),  # removed "p", "a", "r"...
    "batch_remove key int": lambda s: s.batch_remove(["par:a", 1]),
}


@pytest.mark.parametrize("call", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_wrong_types_raise_and_store_nothing(st, call):
    with pytest.raises(TypeError):
        call(st)
    assert st.batch_is_exist(["par:t", "p", "a", "r", ":", "t"]) == [0] * 6
    assert st.is_exist("par:t") == 0


@pytest.mark.parametrize("call", WRONG_TYPES_READ.values(), ids=WRONG_TYPES_READ.keys())
def test_wrong_types_of_reads_raise_and_remove_nothing(st, call):
    assert st.put_batch(["par:a", "p", "a", "r"], [b"abcd", b"1", b"2", b"3"]) == 0
    st.buf[:16] = 0
    with pytest.raises(TypeError):
        call(st)
    assert st.batch_is_exist(["par:a", "p", "a", "r"]) == [1] * 4
    assert not st.buf[:16].any()  # nothing read into the buffer either


# Right types, values the store refuses: codes, as upstream's.
BAD_VALUES = {
    "put_from ptr 0": (lambda s: s.put_from("par:t", 0, 8), INVALID),
    "put_from size 0": (lambda s: s.put_from("par:t", s.ptr, 0), INVALID),
    "put_from unregistered": (lambda s: s.put_from("par:t", 0x1000, 8), INVALID),
    "put_from size 2**63": (lambda s: s.put_from("par:t", s.ptr, 1 << 63), INVALID),
    "batch_put_from short ptrs": (lambda s: s.batch_put_from(["par:t", "par:u"], [s.ptr], [8, 8]),
                                  [INVALID, INVALID]),
    "batch_put_from short keys": (lambda s: s.batch_put_from(["par:t"], [s.ptr, s.ptr], [8, 8]), [INVALID]),
    "multi put shapes differ": (lambda s: s.batch_put_from_multi_buffers(["par:t"], [[s.ptr, s.ptr]], [[8]]),
                                [INVALID]),
    "put_batch short values": (lambda s: s.put_batch(["par:t", "par:u"], [b"v"]), INVALID),
    "get_into ptr 0": (lambda s: s.get_into("par:t", 0, 8), INVALID),
    "register ptr 0": (lambda s: s.register_buffer(0, 8), INVALID),
    "remove missing": (lambda s: s.remove("par:t"), ms.OBJECT_NOT_FOUND),
}


@pytest.mark.parametrize("call,want", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values_are_codes(st, call, want):
    assert call(st) == want
    assert st.batch_is_exist(["par:t", "par:u"]) == [0, 0]


def test_huge_batches_answer_per_key(st):
    keys = [f"par:h{i}" for i in range(20000)]
    st.buf[:4] = 1
    assert st.batch_put_from(keys, [st.ptr] * len(keys), [4] * len(keys)) == [0] * len(keys)
    assert sum(st.batch_is_exist(keys + ["par:none"])) == len(keys)
    assert st.batch_get_into(keys[:3] + ["par:none"], [st.ptr + 64] * 4, [4] * 4) == [4, 4, 4, ms.OBJECT_NOT_FOUND]
    assert st.remove_all() >= len(keys)


# -- ReplicateConfig and the module's enums ------------------------------------

def test_replicate_config_fields_as_upstream_binds_them():
    # Upstream's fields and defaults; nof_replica_num, dfs_replica_num,
    # preferred_nof_segments and data_type were missing (AttributeError).
    c = ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert (c.with_hard_pin, c.prefer_alloc_in_same_node, c.soft_pin_ttl_ms) == (False, False, None)
    assert (c.preferred_segment, c.preferred_segments, c.preferred_nof_segments) == ("", [], [])
    assert c.soft_pin_action is ms.SoftPinAction.PRESERVE and c.data_type is ms.ObjectDataType.UNKNOWN
    c.data_type = ms.ObjectDataType.KVCACHE
    c.replica_num, c.preferred_segments = np.int64(2), ("a:1", "b:2")
    assert (c.replica_num, c.preferred_segments, c.data_type) == (2, ["a:1", "b:2"], ms.ObjectDataType.KVCACHE)
    assert not hasattr(c, "group_ids")  # no group semantics here: the engines' probe finds them off
    assert [m.name for m in ms.ReplicaStatus] == ["UNDEFINED", "INITIALIZED", "PROCESSING", "COMPLETE",
                                                  "REMOVED", "FAILED"]
    assert ms.ObjectDataType.GENERAL == 9


# A typo was a new attribute, silently ignored (cfg.replica_nmu = 2: one
# replica); a field of the wrong type was kept until a put answered -600.
# Upstream's def_readwrite raises at the assignment.
BAD_FIELDS = {
    "typo": ("replica_nmu", 2, AttributeError),
    "group_ids str": ("group_ids", "g", TypeError),
    "replica_num str": ("replica_num", "2", TypeError),
    "replica_num negative": ("replica_num", -1, TypeError),
    "replica_num float": ("replica_num", 2.0, TypeError),
    "preferred_segment int": ("preferred_segment", 5, TypeError),
    "preferred_segments str": ("preferred_segments", "seg:1", TypeError),
    "preferred_segments ints": ("preferred_segments", [1], TypeError),
    "with_hard_pin str": ("with_hard_pin", "yes", TypeError),
    "soft_pin_action 7": ("soft_pin_action", 7, TypeError),
    "data_type str": ("data_type", "KVCACHE", TypeError),
    "soft_pin_ttl_ms negative": ("soft_pin_ttl_ms", -1, TypeError),
}


@pytest.mark.parametrize("field,value,exc", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_replicate_config_refuses_bad_fields(field, value, exc):
    c = ReplicateConfig()
    before = repr(c)
    with pytest.raises(exc):
        setattr(c, field, value)
    assert repr(c) == before


def test_configs_of_tiers_not_here_are_refused(st):
    # NoF and DFS replicas: tiers this store does not have, refused rather
    # than silently stored in memory only; data_type is only a label.
    for field in ("nof_replica_num", "dfs_replica_num"):
        c = ReplicateConfig()
        setattr(c, field, 1)
        assert st.put("par:tier", b"v", c) == INVALID
        assert st.batch_put_from(["par:tier"], [st.ptr], [8], c) == [INVALID]
    assert st.is_exist("par:tier") == 0
    c = ReplicateConfig()
    c.data_type, c.preferred_nof_segments = ms.ObjectDataType.KVCACHE, ["nof:1"]
    assert st.put("par:tier", b"v", c) == 0 and st.get("par:tier") == b"v"


def test_replica_descriptor_status_is_the_enum(st):
    # status was the string "COMPLETE": upstream's is ReplicaStatus.COMPLETE.
    assert st.put("par:rd", b"x" * 100) == 0
    descs = st.get_replica_desc("par:rd")
    assert descs and all(d.status == ms.ReplicaStatus.COMPLETE for d in descs)
    assert st.batch_get_replica_desc(["par:rd"])["par:rd"][0].status is ms.ReplicaStatus.COMPLETE


def test_put_from_with_metadata(st):
    # Upstream's call was missing (AttributeError): the metadata bytes, then
    # the data, as one object.
    st.buf[:8] = np.frombuffer(b"METADATA", np.uint8)
    st.buf[100:110] = np.arange(10, dtype=np.uint8)
    assert st.put_from_with_metadata("par:md", st.ptr + 100, st.ptr, 10, 8) == 0
    assert st.get("par:md") == b"METADATA" + bytes(range(10))
    assert st.put_from_with_metadata("par:md0", st.ptr + 100, 0, 10, 0, ReplicateConfig()) == 0
    assert st.get("par:md0") == bytes(range(10))
    assert st.put_from_with_metadata("par:mdz", st.ptr, st.ptr, 0, 8) == INVALID
    assert st.put_from_with_metadata("par:mdu", 0x1000, st.ptr, 10, 8) == INVALID  # not registered
    with pytest.raises(TypeError):
        st.put_from_with_metadata("par:mdt", st.ptr, st.ptr, 10, -8)
    assert st.batch_is_exist(["par:mdz", "par:mdu", "par:mdt"]) == [0, 0, 0]
    assert st.get_offload_rpc_read_count() == 0
