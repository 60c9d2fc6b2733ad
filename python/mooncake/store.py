"""Mooncake's Python store API, on Mooncake-C.

``from mooncake.store import MooncakeDistributedStore`` as vLLM's
MooncakeStoreConnector, SGLang's HiCache and LMCache's mooncakestore backend
import it: the same method names, positional and keyword arguments, defaults
and return conventions (0 or a negative Mooncake error code, bytes where
Mooncake returns bytes, one int per key for batches). The README's "Python"
section lists every call, supported or not, and what differs.

How Mooncake's setup arguments map onto this store:

- ``master_server_addr`` is our server's ``host:port`` (any node of a
  cluster), or Mooncake's HA form ``etcd://host:port[,host:port...]`` (``;``
  separates too): the cluster's nodes are read from that etcd (the records
  ``/mooncake/<cluster-name>/nodes/<id>`` the nodes keep there, docs/PROTOCOL.md
  "The topology in etcd") and the first that answers is the one connected
  to; libmooncake learns the rest from it. ``<cluster-name>`` is
  ``$MC_STORE_CLUSTER_ID``, as Mooncake's clients and master take their
  cluster id, else ``mooncake`` (Mooncake's default and the server's
  ``cluster-name`` default). ``metadata_server`` is accepted whatever it says
  (the server is its own metadata service), and so is ``engine`` (a
  TransferEngine to share: libmooncake opens its own transports).
- A failover or a server restart is a pause, not an error: libmooncake
  reconnects and retries by itself (redirections, ``-TRYAGAIN``,
  ``-CLUSTERDOWN``, a lost connection) for up to its I/O timeout (30 s).
- ``global_segment_size > 0`` mounts that much of this process's memory as a
  segment. Its name is ``local_hostname`` with the port of the segment's
  listener appended (``host:port``, a port of 12300-14300 as Mooncake's
  clients take), unless ``local_hostname`` carries a port already --
  Mooncake's rule, so tensor-parallel ranks that share a hostname get
  segments of their own; ``get_hostname()`` returns it.
- ``local_buffer_size`` bounds what the staged calls hold at once, as
  Mooncake's registered staging buffer does: put/get of bytes, put_parts,
  get_buffer handles still alive that are copies. Zero-copy calls (put_from,
  get_into and their batch forms) use none of it, nor do get_buffer handles
  that are views: where the object is in shared memory on this host, the
  handle is the object in place, read-only, held by the store until the
  handle is freed (MC_STORE_VIEWS=0: copies, as Mooncake's).
- ``tenant_id`` other than ``"default"`` logs in as the ACL user of that
  name and keeps its keys under ``<tenant_id>:``, which an ACL user made with
  ``~<tenant_id>:*`` confines: isolation is the server's, never lost.
- ``protocol``/``rdma_devices``: the library picks shared memory, RDMA or
  TCP per segment by itself.
- A password (the server's requirepass or the ACL user's) comes from the
  keywords ``password``/``user`` or $MOONCAKE_PASSWORD/$MOONCAKE_USER.
"""
import ctypes as _ctypes
import enum as _enum
import logging as _logging
import mmap as _mmap
import operator as _operator
import os as _os
import re as _re
import threading as _threading
import weakref as _weakref

from . import _mooncake

_log = _logging.getLogger("mooncake.store")

# get_buffer's handles are views of the stored objects where they lie (no
# copy) unless MC_STORE_VIEWS=0: then copies in the local buffer, as
# Mooncake's own are (batch_get_buffer).
_VIEWS = _os.environ.get("MC_STORE_VIEWS", "1") != "0"

# Mooncake's error codes (negative int32) that engines test.
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SEGMENT_NOT_FOUND = -101
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
INVALID_REPLICA = -702
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800
RPC_FAIL = -900
RPC_TIMEOUT = -901

_CODE = {
    _mooncake.ERR_NOT_FOUND: OBJECT_NOT_FOUND,
    _mooncake.ERR_EXISTS: OBJECT_ALREADY_EXISTS,
    _mooncake.ERR_NOSPACE: NO_AVAILABLE_HANDLE,
    _mooncake.ERR_LEASE_EXPIRED: LEASE_EXPIRED,
    _mooncake.ERR_TOO_SMALL: INVALID_PARAMS,  # Mooncake: "User buffer too small" is INVALID_PARAMS
    _mooncake.ERR_INVALID: INVALID_PARAMS,
    _mooncake.ERR_AUTH: INTERNAL_ERROR,
    _mooncake.ERR_PROTOCOL: INTERNAL_ERROR,
    _mooncake.ERR_IO: RPC_FAIL,
    _mooncake.ERR_UNSUPPORTED: INVALID_PARAMS,
    _mooncake.ERR_NOT_READY: REPLICA_IS_NOT_READY,
    _mooncake.ERR_SERVER: INTERNAL_ERROR,
    _mooncake.ERR_NOMEM: INTERNAL_ERROR,
    _mooncake.ERR_CLOSED: RPC_FAIL,
}

# Mooncake's defaults: setup's sizes (16 MiB each), the master's default
# and largest soft-pin times.
_DEFAULT_SEGMENT = 16 << 20
_DEFAULT_LOCAL_BUFFER = 16 << 20
_SOFT_PIN_DEFAULT_MS = 30 * 60 * 1000
_SOFT_PIN_MAX_MS = 24 * 60 * 60 * 1000
_TENANT_RE = _re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def _code(rc):
    return rc if rc >= 0 else _CODE.get(rc, INTERNAL_ERROR)


# The types of the arguments, checked as upstream's binding (pybind11)
# converts them, before anything is sent: a key is str or bytes, a list of
# keys is a sequence of them (never one str, which pybind refuses rather
# than iterate), an address or a size is an int of 0 .. 2**64-1 (NumPy and
# torch integers too, by their __index__), a value has the buffer
# protocol, a config is a ReplicateConfig (or None). Anything else raises
# TypeError naming the call and the argument: a caller's bug shows at its
# first call, as upstream shows it, instead of every put failing with
# INVALID_PARAMS (which LMCache and SGLang count as a miss, quietly). Values
# of the right type that the store refuses -- ptr 0, size 0, an address
# outside registered memory, lists of mismatched lengths -- stay negative
# codes, as upstream's are.
_U64 = 1 << 64
_NOT_A_LIST = (str, bytes, bytearray, memoryview)


def _type_error(fn, arg, v, want):
    return TypeError(f"{fn}(): incompatible function arguments: {arg} must be {want}, "
                     f"not {type(v).__name__} {v!r:.60}")


def _arg_key(fn, k, arg="key"):
    if isinstance(k, (str, bytes)):
        return k
    raise _type_error(fn, arg, k, "str or bytes")


def _arg_list(fn, v, arg):
    if isinstance(v, _NOT_A_LIST):
        raise _type_error(fn, arg, v, "a list")
    try:
        return list(v)
    except TypeError:
        raise _type_error(fn, arg, v, "a list") from None


def _arg_keys(fn, keys, arg="keys"):
    keys = _arg_list(fn, keys, arg)
    for k in keys:
        if not isinstance(k, (str, bytes)):
            raise _type_error(fn, arg + "[i]", k, "str or bytes")
    return keys


def _arg_uint(fn, v, arg):
    try:
        n = _operator.index(v)
    except TypeError:
        raise _type_error(fn, arg, v, "an int") from None
    if not 0 <= n < _U64:
        raise _type_error(fn, arg, v, "an int of 0 .. 2**64-1")
    return n


def _arg_uints(fn, v, arg, depth=1):
    """A list (depth 1), list of lists (2)... of addresses or sizes; depth
    None: each item one or a list of them (the async calls take both)."""
    v = _arg_list(fn, v, arg)
    if depth is None:
        return [_arg_uints(fn, x, arg + "[i]") if isinstance(x, (list, tuple)) else _arg_uint(fn, x, arg + "[i]")
                for x in v]
    if depth == 1:
        return [_arg_uint(fn, x, arg + "[i]") for x in v]
    return [_arg_uints(fn, x, arg + "[i]", depth - 1) for x in v]


def _arg_config(fn, config):
    if config is None or isinstance(config, ReplicateConfig):
        return config
    raise _type_error(fn, "config", config, "a ReplicateConfig")


def _arg_value(fn, v, arg="value"):
    """The size of a value with the buffer protocol."""
    try:
        return memoryview(v).nbytes
    except TypeError:
        raise _type_error(fn, arg, v, "bytes-like (the buffer protocol)") from None


class SoftPinAction(_enum.IntEnum):
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(_enum.IntEnum):
    """What an object holds (upstream tracks it for policies to come and
    acts on none yet; accepted here and not acted on either)."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(_enum.IntEnum):
    """ReplicaDescriptor.status: a replica described here is COMPLETE (a
    put in progress is not listed)."""
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


# ReplicateConfig's fields, checked when set as upstream's def_readwrite
# converts them: a wrong type is a TypeError at the assignment, and a name
# that is no field is an AttributeError (__slots__), where a typo such as
# cfg.replica_nmu = 2 used to be kept and ignored.
def _cfg_count(name, v):
    if isinstance(v, (str, bytes, float)):
        raise TypeError(f"ReplicateConfig.{name} must be an int of 0 .. 2**64-1, not {type(v).__name__}")
    try:
        n = _operator.index(v)
    except TypeError:
        raise TypeError(f"ReplicateConfig.{name} must be an int of 0 .. 2**64-1, not {type(v).__name__}") from None
    if not 0 <= n < _U64:
        raise TypeError(f"ReplicateConfig.{name} must be an int of 0 .. 2**64-1, not {n}")
    return n


def _cfg_bool(name, v):
    if v is None or isinstance(v, (bool, int)) or type(v).__name__ == "bool_":  # NumPy's too
        return bool(v)
    raise TypeError(f"ReplicateConfig.{name} must be a bool, not {type(v).__name__}")


def _cfg_str(name, v):
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode()
    raise TypeError(f"ReplicateConfig.{name} must be str, not {type(v).__name__}")


def _cfg_strs(name, v):
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
        raise TypeError(f"ReplicateConfig.{name} must be a list of str, not {type(v).__name__}")
    return [_cfg_str(name + "[i]", x) for x in v]


def _cfg_enum(enum):
    def check(name, v):
        try:
            return enum(v)  # an int of a member, as our IntEnums compare
        except (ValueError, TypeError):
            raise TypeError(f"ReplicateConfig.{name} must be a {enum.__name__}, not {v!r}") from None
    return check


def _cfg_ttl(name, v):
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= _U64):
        raise TypeError("soft_pin_ttl_ms must be None or a non-negative int that fits 64 bits")
    return v


def _cfg_field(name, check):
    slot = "_" + name

    def get(self):
        return getattr(self, slot)

    def put(self, v):
        setattr(self, slot, check(name, v))
    return property(get, put)


class ReplicateConfig:
    """How many replicas and where (Mooncake's ReplicateConfig), with its
    fields and defaults; the constructor also takes them by keyword.
    ``with_soft_pin`` is the older spelling of ``soft_pin_action=ENABLE``.
    NoF and DFS replicas (``nof_replica_num``, ``dfs_replica_num`` > 0)
    are tiers this store does not have: a put asking for them is
    INVALID_PARAMS; ``preferred_nof_segments`` and ``data_type`` are kept
    and not acted on.

    No group_ids field on purpose: vLLM and SGLang probe
    hasattr(ReplicateConfig(), "group_ids") to turn on Mooncake's group
    semantics (a group's objects evicted together, a read refreshing every
    member's lease), which this store does not have; without the attribute
    they log that it is off and put as before. Code that sets it anyway
    (written for a Mooncake that has it) still may: the value is kept,
    typed as upstream's (None or a list of str), and not acted on."""

    _FIELDS = {"replica_num": (_cfg_count, 1), "nof_replica_num": (_cfg_count, 0),
               "dfs_replica_num": (_cfg_count, 0), "with_soft_pin": (_cfg_bool, False),
               "with_hard_pin": (_cfg_bool, False), "preferred_segment": (_cfg_str, ""),
               "preferred_segments": (_cfg_strs, ()), "preferred_nof_segments": (_cfg_strs, ()),
               "soft_pin_action": (_cfg_enum(SoftPinAction), SoftPinAction.PRESERVE),
               "soft_pin_ttl_ms": (_cfg_ttl, None), "prefer_alloc_in_same_node": (_cfg_bool, False),
               "data_type": (_cfg_enum(ObjectDataType), ObjectDataType.UNKNOWN)}
    __slots__ = tuple("_" + f for f in _FIELDS) + ("_group_ids",)

    def __setattr__(self, name, v):
        if name == "group_ids":
            name, v = "_group_ids", None if v is None else _cfg_strs(name, v)
        object.__setattr__(self, name, v)

    def __getattr__(self, name):  # only when the ordinary lookup failed
        if name == "group_ids":
            return self._group_ids  # AttributeError until set: hasattr() says no
        raise AttributeError(f"'ReplicateConfig' object has no attribute {name!r}")

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False, preferred_segment="",
                 preferred_segments=None, soft_pin_action=SoftPinAction.PRESERVE, soft_pin_ttl_ms=None, *,
                 nof_replica_num=0, dfs_replica_num=0, preferred_nof_segments=None, prefer_alloc_in_same_node=False,
                 data_type=ObjectDataType.UNKNOWN):
        self.replica_num = replica_num
        self.nof_replica_num = nof_replica_num
        self.dfs_replica_num = dfs_replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = [] if preferred_segments is None else preferred_segments
        self.preferred_nof_segments = [] if preferred_nof_segments is None else preferred_nof_segments
        self.soft_pin_action = soft_pin_action
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.data_type = data_type

    def __repr__(self):
        return "ReplicateConfig(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self._FIELDS) + ")"

    __str__ = __repr__


for _f, (_check, _) in ReplicateConfig._FIELDS.items():
    setattr(ReplicateConfig, _f, _cfg_field(_f, _check))
del _f, _check


_SIZE_RE = _re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", _re.I)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
          "tib": 1 << 40}


def _size(v):
    """An int, or "16MB" / "16 MB" / "4GB" (binary units, as Mooncake reads them)."""
    if isinstance(v, bool):
        raise ValueError("a size is not a bool")
    if isinstance(v, int):
        if v < 0:
            raise ValueError("a size cannot be negative")
        return v
    if isinstance(v, str):
        m = _SIZE_RE.match(v)
        if m and (m.group(2) or "").lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    raise ValueError(f"not a size: {v!r}")


def _etcd_nodes(addr, cluster=None, timeout=2.0):
    """``etcd://h:p[,h:p]``: the ``host:port`` of every node of the cluster
    whose records that etcd holds (v3 JSON gateway, one range read), those
    alive first; [] when no etcd answered or it knows no node."""
    import base64
    import json
    import urllib.request
    cluster = cluster or _os.environ.get("MC_STORE_CLUSTER_ID") or "mooncake"
    prefix = f"/mooncake/{cluster}/".encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    body = json.dumps({"key": base64.b64encode(prefix).decode(),
                       "range_end": base64.b64encode(end).decode()}).encode()
    for ep in _re.split(r"[,;]", addr[len("etcd://"):]):
        ep = ep.strip().rstrip("/")
        if not ep:
            continue
        url = ep if ep.startswith(("http://", "https://")) else "http://" + ep
        try:
            req = urllib.request.Request(url + "/v3/kv/range", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=timeout) as r:
                kvs = json.loads(r.read().decode()).get("kvs", [])
        except (OSError, ValueError):
            continue
        nodes, alive = [], set()
        for kv in kvs:
            try:
                key = base64.b64decode(kv["key"]).decode()
                val = base64.b64decode(kv.get("value", "")).decode()
                rest = key[len(prefix):]
                if rest.startswith("nodes/"):
                    rec = json.loads(val)
                    nodes.append((rest[6:], f"{rec['ip']}:{int(rec['port'])}"))
                elif rest.startswith("alive/"):
                    alive.add(rest[6:])
            except (KeyError, ValueError, TypeError, UnicodeDecodeError):
                continue
        nodes.sort(key=lambda n: n[0] not in alive)
        return [a for _, a in nodes]
    return []


def _has_port(hostname):
    """Does a local_hostname name its port already ("host:1234", "[::1]:1234")?"""
    if hostname.startswith("["):
        m = _re.match(r"^\[[^\]]*\]:(\d+)$", hostname)
    elif hostname.count(":") == 1:
        m = _re.match(r"^[^:]+:(\d+)$", hostname)
    else:
        return False
    return bool(m) and 0 < int(m.group(1)) < 65536


def _client_port_range():
    """Mooncake's clients listen on a port of $MC_STORE_CLIENT_MIN_PORT ..
    $MC_STORE_CLIENT_MAX_PORT (12300-14300 unless set; an invalid pair is
    the default), so a firewall can let exactly those through; so does the
    segment listener here."""
    lo, hi = 12300, 14300
    try:
        elo = int(_os.environ.get("MC_STORE_CLIENT_MIN_PORT", lo))
        ehi = int(_os.environ.get("MC_STORE_CLIENT_MAX_PORT", hi))
        if 0 < elo <= ehi < 65536:
            lo, hi = elo, ehi
    except ValueError:
        pass
    return lo, hi


class _LocalBuffer:
    """Mooncake's local buffer: memory of local_buffer_size, mapped and
    faulted in once at setup and registered with the library, that the
    staged calls draw on. get_buffer handles are windows on it (a get lands
    there without a copy or a page fault, and the handle gives its window
    back when it is freed); put/put_parts/put_batch of bytes reserve their
    size while they run, as Mooncake stages them there, so a value that
    does not fit is refused as Mooncake refuses it. First fit over a sorted
    free list: a handful of windows are live at once."""

    ALIGN = 64

    def __init__(self, size):
        self.size = size
        self._free = [(0, size)] if size else []
        self._lock = _threading.Lock()
        self.map = self.addr = None
        if size:
            self.map = _mmap.mmap(-1, size, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
            self.addr = _ctypes.addressof(_ctypes.c_char.from_buffer(self.map))
            _ctypes.memset(self.addr, 0, size)  # fault it in now, not during gets

    def take(self, n):
        """The offset of a window of n bytes, or None when none fits."""
        n = max(n, 1)
        n = (n + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        with self._lock:
            for i, (off, ln) in enumerate(self._free):
                if ln >= n:
                    if ln == n:
                        del self._free[i]
                    else:
                        self._free[i] = (off + n, ln - n)
                    return off
        return None

    def give(self, off, n):
        n = max(n, 1)
        n = (n + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        with self._lock:
            f = self._free
            lo, hi = 0, len(f)
            while lo < hi:
                mid = (lo + hi) // 2
                if f[mid][0] < off:
                    lo = mid + 1
                else:
                    hi = mid
            f.insert(lo, (off, n))
            if lo + 1 < len(f) and f[lo][0] + f[lo][1] == f[lo + 1][0]:  # merge with the next
                f[lo] = (f[lo][0], f[lo][1] + f[lo + 1][1])
                del f[lo + 1]
            if lo > 0 and f[lo - 1][0] + f[lo - 1][1] == f[lo][0]:        # and the previous
                f[lo - 1] = (f[lo - 1][0], f[lo - 1][1] + f[lo][1])
                del f[lo]

    def trim(self, off, reserved, n):
        """A window of `reserved` bytes at off now needs only n: gives the
        rest back, returns what it keeps."""
        keep = (max(n, 1) + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        have = (max(reserved, 1) + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        if have > keep:
            self.give(off + keep, have - keep)
        return keep


# get_buffer's result: the object's bytes with the buffer protocol
# (memoryview(h), numpy.frombuffer(h), torch.frombuffer(h)), h.ptr(),
# h.size() and len(h): a window on the local buffer, valid while the handle
# lives, given back when it is freed (Mooncake's handles hold their share of
# the local buffer the same way).
BufferHandle = _mooncake.Buffer


class ReplicaDescriptor:
    """One replica of an object (Mooncake's ReplicaDescriptor): always a
    memory replica here (this store has no disk tier yet)."""

    class _Buffer:
        __slots__ = ("size_", "buffer_address_", "protocol_", "transport_endpoint_", "segment_name_")

        def __repr__(self):
            return (f"<Descriptor size={self.size_} buffer_address={self.buffer_address_} "
                    f"transport_endpoint={self.transport_endpoint_}>")

    class _Memory:
        __slots__ = ("buffer_descriptor",)

    def __init__(self, segment, offset, size, endpoint, status=ReplicaStatus.COMPLETE):
        b = ReplicaDescriptor._Buffer()
        b.size_, b.buffer_address_, b.protocol_, b.transport_endpoint_, b.segment_name_ = (
            size, offset, endpoint.split("://", 1)[0] if "://" in endpoint else "tcp", endpoint, segment)
        self._memory = ReplicaDescriptor._Memory()
        self._memory.buffer_descriptor = b
        self.status = status

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def is_local_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._memory

    def get_disk_descriptor(self):
        raise RuntimeError("not a disk replica")

    def __repr__(self):
        b = self._memory.buffer_descriptor
        return f"ReplicaDescriptor(segment={b.segment_name_!r}, size={b.size_}, status={self.status})"


# Every MooncakeHostMemAllocator hands out and takes back memory of one
# process-wide table, as upstream's are views of its one ShmHelper: memory
# one allocator (SGLang's, or a store's alloc_from_mem_pool) handed out is
# given back by free() on any other, instead of -1 and a mapping kept until
# the process exits.
_HOST_MAPS = {}
_HOST_MAPS_LOCK = _threading.Lock()


def _host_alloc(size):
    m = _mmap.mmap(-1, size, flags=_mmap.MAP_SHARED | _mmap.MAP_ANONYMOUS)
    ptr = _ctypes.addressof(_ctypes.c_char.from_buffer(m))
    with _HOST_MAPS_LOCK:
        _HOST_MAPS[ptr] = m
    return ptr


class MooncakeHostMemAllocator:
    """Mooncake's allocator of host memory for the standalone mode
    (SGLang's MooncakeHostTensorAllocator): ``alloc(size)`` returns the
    address of page-aligned shared memory, ``free(ptr)`` gives it back (0,
    or -1 for an address no allocator of this process handed out). Here the
    engine's process is the store's client itself, so the memory only needs
    to be registrable; it is shared so that a helper process could map it
    too."""

    def alloc(self, size):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError("alloc needs a positive size")
        return _host_alloc(size)

    def free(self, ptr):
        with _HOST_MAPS_LOCK:
            m = _HOST_MAPS.pop(ptr, None)
        if m is None:
            return -1
        try:
            m.close()
        except BufferError:  # a tensor still views it: let it go with the last view
            with _HOST_MAPS_LOCK:
                _HOST_MAPS[ptr] = m
            return -1
        return 0


def bind_to_numa_node(node):
    """Run this thread on NUMA node ``node`` and prefer its memory for
    later allocations (Mooncake's module function; LMCache calls it before
    setup). Like Mooncake it only warns when NUMA is unavailable or the
    node is invalid."""
    try:
        numa = _ctypes.CDLL("libnuma.so.1")
    except OSError:
        _log.warning("NUMA is not available on this system (no libnuma); binding skipped")
        return None
    if numa.numa_available() < 0:
        _log.warning("NUMA is not available on this system; binding skipped")
        return None
    max_node = numa.numa_max_node()
    if not isinstance(node, int) or node < 0 or node > max_node:
        _log.warning("Invalid NUMA node: %s. Valid range: 0-%d", node, max_node)
        return None
    if numa.numa_run_on_node(_ctypes.c_int(node)) != 0:
        _log.warning("numa_run_on_node failed for node %d", node)
    numa.numa_set_bind_policy(_ctypes.c_int(0))
    numa.numa_set_preferred(_ctypes.c_int(node))
    return None


_MISSING = object()


_REGEX_SPECIAL = frozenset(".^$*+?{}[]\\|()")


def _anchored_literals(pat):
    """The keys a compiled pattern can match when it is ``^lit$`` or
    ``^(?:lit|lit...)$`` of literals (escapes of punctuation allowed, as
    re.escape writes them), no flags beyond the default; else None, and the
    caller looks at every key. ``$`` also matches before a final newline,
    so each literal comes with that key too: the list is exactly what the
    pattern matches, never more or fewer."""
    p = pat.pattern
    if not isinstance(p, str) or pat.flags & ~_re.UNICODE:
        return None
    if len(p) < 2 or p[0] != "^" or p[-1] != "$":
        return None
    body = p[1:-1]
    grouped = body.startswith("(?:") and body.endswith(")")
    if grouped:
        body = body[3:-1]
    alts, cur, i = [], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            # \d, \b, \1, \x41...: classes, anchors and codes, not literals
            if i + 1 == len(body) or body[i + 1].isalnum() or body[i + 1] == "_":
                return None
            cur.append(body[i + 1])
            i += 2
        elif ch == "|" and grouped:
            alts.append("".join(cur))
            cur = []
            i += 1
        elif ch in _REGEX_SPECIAL:
            return None  # also a | outside a group: ^a|b$ is (^a)|(b$)
        else:
            cur.append(ch)
            i += 1
    alts.append("".join(cur))
    if "" in alts:
        return None  # the empty key and "\n": rare enough to look at every key
    return list(dict.fromkeys(n for a in alts for n in (a, a + "\n")))


def _skip_empty(keys, miss, run):
    """run(idx) for the keys that are not empty (idx: their indexes, in
    order; it answers one result each), miss in the empty ones' places.
    Mooncake's master answers a read or remove of the empty key as of any
    key it does not hold (only PutStart refuses it, INVALID_PARAMS), and
    engines are written against that; libmooncake refuses it as an
    argument, which here raised ValueError, or failed every key of the
    batch with INVALID_PARAMS."""
    idx = [i for i, k in enumerate(keys) if len(k)]
    if len(idx) == len(keys):
        return run(idx)
    out = [miss] * len(keys)
    if idx:
        for i, r in zip(idx, run(idx)):
            out[i] = r
    return out


def _glob_escape(s):
    """s as a literal in a SCAN MATCH glob."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


class MooncakeDistributedStore:
    """Mooncake's store client (see the module's comment for what the
    arguments mean here)."""

    def __init__(self):
        self._c = None
        self._hostname = ""
        self._mounted = False
        self._prefix = ""
        self._budget = _LocalBuffer(0)
        self._sessions = {}
        self._put_sessions = {}  # key -> put session (a capsule), None while one starts
        self._size_hint = 0
        self._dummy = False  # set up by setup_dummy (alloc_from_mem_pool hands out memory)
        self._lock = _threading.Lock()

    # -- lifetime -----------------------------------------------------------
    def setup(self, local_hostname=_MISSING, metadata_server=_MISSING, global_segment_size=_MISSING,
              local_buffer_size=_MISSING, protocol=_MISSING, rdma_devices=_MISSING,
              master_server_addr=_MISSING, engine=None, enable_ssd_offload=False, ssd_offload_path="",
              tenant_id="default", enable_client_http_server=False, client_http_port=9300, *, config=_MISSING,
              password=None, user=None):
        """setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr,
        engine=None, enable_ssd_offload=False, ssd_offload_path="",
        tenant_id="default", enable_client_http_server=False,
        client_http_port=9300), or setup(config: dict) (also by its
        keyword, as upstream's overload names it). 0 or a negative code."""
        if config is not _MISSING:
            if local_hostname is not _MISSING or not isinstance(config, dict):
                raise TypeError("setup(): incompatible function arguments: config= is one dict, alone")
            return self._setup_dict(config, password, user)
        if isinstance(local_hostname, dict) and metadata_server is _MISSING:
            return self._setup_dict(local_hostname, password, user)
        required = (local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol,
                    rdma_devices, master_server_addr)
        if any(a is _MISSING for a in required):
            raise TypeError("setup(): incompatible function arguments: local_hostname, metadata_server, "
                            "global_segment_size, local_buffer_size, protocol, rdma_devices and "
                            "master_server_addr are required (or one dict)")
        for name, v in (("local_hostname", local_hostname), ("metadata_server", metadata_server),
                        ("protocol", protocol), ("rdma_devices", rdma_devices),
                        ("master_server_addr", master_server_addr), ("tenant_id", tenant_id)):
            if not isinstance(v, str):
                raise _type_error("setup", name, v, "str")
        for name, v in (("global_segment_size", global_segment_size), ("local_buffer_size", local_buffer_size)):
            if not isinstance(v, str):  # "16MB": our own leniency, read by _size
                _arg_uint("setup", v, name)
        if enable_ssd_offload:
            # No disk tier here yet: answer as a Mooncake without the
            # feature would, so callers that probe for it (SGLang retries
            # setup without the keyword) fall back instead of believing it.
            raise TypeError("setup() got an unexpected keyword argument 'enable_ssd_offload': "
                            "this store has no SSD tier yet")
        return self._setup(local_hostname, global_segment_size, local_buffer_size, master_server_addr,
                           tenant_id, password, user)

    def _setup_dict(self, d, password, user):
        d = dict(d)
        try:
            if str(d.get("enable_ssd_offload", "false")).lower() in ("1", "true", "yes", "on"):
                return INVALID_PARAMS
            return self._setup(d.get("local_hostname"), _size(d.get("global_segment_size", _DEFAULT_SEGMENT)),
                               _size(d.get("local_buffer_size", _DEFAULT_LOCAL_BUFFER)),
                               d.get("master_server_addr") or d.get("master_server_address") or "127.0.0.1:50051",
                               d.get("tenant_id", "default"), d.get("password", password), d.get("user", user))
        except ValueError:
            return INVALID_PARAMS

    def _setup(self, local_hostname, global_segment_size, local_buffer_size, master_server_addr, tenant_id,
               password, user, mount=True):
        if self._c is not None:
            self.close()
        self._dummy = False
        if not isinstance(local_hostname, str) or not local_hostname:
            return INVALID_PARAMS
        if not master_server_addr or not isinstance(master_server_addr, str):
            return INVALID_PARAMS
        try:
            seg = _size(global_segment_size)
            local = _size(local_buffer_size)
        except ValueError:
            return INVALID_PARAMS
        if tenant_id is None or tenant_id in ("", "default"):
            prefix = ""
        elif isinstance(tenant_id, str) and _TENANT_RE.match(tenant_id):
            if user is not None and user != tenant_id:
                return INVALID_PARAMS  # two identities named: which one isolates?
            user, prefix = tenant_id, tenant_id + ":"
        else:
            return INVALID_PARAMS
        password = password if password is not None else _os.environ.get("MOONCAKE_PASSWORD")
        user = user if user is not None else _os.environ.get("MOONCAKE_USER")
        addrs = [master_server_addr]
        if master_server_addr.startswith("etcd://"):
            addrs = _etcd_nodes(master_server_addr)
            if not addrs:
                _log.error("setup: no node of cluster %r found through %s",
                           _os.environ.get("MC_STORE_CLUSTER_ID") or "mooncake", master_server_addr)
                return RPC_FAIL
        c = None
        for addr in addrs:
            try:
                c = _mooncake.Client(addr, user=user, password=password)
                break
            except PermissionError:
                return RPC_FAIL
            except (ConnectionError, OSError):
                continue
        if c is None:
            return RPC_FAIL
        name = local_hostname
        if mount and seg > 0:
            rc = c.mount(seg, local_hostname if _has_port(local_hostname) else local_hostname + ":0",
                         *_client_port_range())
            if rc < 0:
                c.close()
                return _code(rc)
            name = c.mount_name() or local_hostname
        try:
            budget = _LocalBuffer(local)
        except (OSError, ValueError):
            c.close()
            return INVALID_PARAMS
        if local:
            rc = c.register(budget.addr, local)
            if rc < 0:
                c.close()
                return _code(rc)
        with self._lock:
            self._c, self._hostname, self._mounted, self._prefix = c, name, mount and seg > 0, prefix
            self._budget = budget
            self._size_hint = 0
            self._sessions = {}
        return 0

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Mooncake's standalone mode: the engine's process contributes no
        segment and reaches the store through ``server_address`` (here our
        server: there is no separate client process to run). mem_pool_size
        (the host memory it will register) is checked and otherwise unused."""
        try:
            _size(mem_pool_size)
        except ValueError:
            return INVALID_PARAMS
        rc = self._setup("localhost", 0, local_buffer_size, server_address, "default", None, None, mount=False)
        self._dummy = rc == 0
        return rc

    def alloc_from_mem_pool(self, size):
        """The standalone mode's memory to register (Mooncake's dummy
        client, whose own tests take every buffer from it): the address of
        ``size`` bytes of page-aligned shared memory from the process's pool
        that MooncakeHostMemAllocator draws on too (its ``free`` gives it
        back; else it lives as long as the process, as upstream's does). 0
        -- upstream's answer for a failed allocation -- for a size of 0, for
        memory that cannot be had, and on a store that setup_dummy did not
        set up (upstream's real client answers 0 always)."""
        size = _arg_uint("alloc_from_mem_pool", size, "size")
        if not self._dummy or self._c is None or size == 0:
            return 0
        try:
            return _host_alloc(size)
        except (OSError, ValueError, OverflowError):
            return 0

    def init_all(self, protocol, device_name, mount_segment_size=16 << 20):
        return 0 if self._c is not None else INVALID_PARAMS

    def close(self):
        with self._lock:
            c, self._c = self._c, None
            self._mounted = False
            self._dummy = False
            self._sessions = {}
            puts, self._put_sessions = [p for p in self._put_sessions.values() if p is not None], {}
        if c is not None:
            if puts:
                c.put_session_revoke(puts)  # their space back now, not at put-timeout
            c.close()
        return 0

    def get_hostname(self):
        return self._hostname

    def health_check(self):
        """0 healthy, 1 not set up or closed, 2 server unreachable (Mooncake's codes)."""
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return 1
        return 0 if c.exists([self._key("__mooncake_health__")])[1][0] >= 0 else 2

    # -- helpers ------------------------------------------------------------
    def _client(self):
        return self._c

    def _key(self, k):
        if not self._prefix:
            return k
        return self._prefix + k if isinstance(k, str) else self._prefix.encode() + bytes(k)

    def _keys(self, keys):
        return [self._key(k) for k in keys] if self._prefix else list(keys)

    def _opts(self, config, replace=False):
        """(replicas, prefer, pin_ms, hard_pin, replace, prefer_is_hint), or
        an error code for a config Mooncake refuses."""
        if config is None:
            return (0, None, 0, False, replace, True)
        try:
            return self._opts_of(config, replace)
        except (AttributeError, TypeError, ValueError):
            return INVALID_PARAMS  # fields of the wrong types (the type of config itself: _arg_config)

    def _opts_of(self, config, replace):
        if config.prefer_alloc_in_same_node:
            return INVALID_PARAMS  # Mooncake: "prefer_alloc_in_same_node is not supported" for puts
        if config.nof_replica_num or config.dfs_replica_num:
            return INVALID_PARAMS  # replicas in tiers this store does not have
        prefer = config.preferred_segment or (config.preferred_segments[0] if config.preferred_segments else "")
        action, ttl = config.soft_pin_action, config.soft_pin_ttl_ms
        pin = 0
        if action == SoftPinAction.ENABLE or (config.with_soft_pin and action == SoftPinAction.PRESERVE):
            pin = _SOFT_PIN_DEFAULT_MS if ttl is None else ttl
            if pin > _SOFT_PIN_MAX_MS:
                return INVALID_PARAMS
        elif ttl is not None:
            return INVALID_PARAMS  # a time without ENABLE (Mooncake: ttl_requires_enable)
        replicas = config.replica_num  # an int >= 0 (its setter); 0: the server's default
        if replicas > 8:
            return INVALID_PARAMS
        return (replicas, prefer or None, pin, config.with_hard_pin, replace, True)

    def _put(self, keys, bufs, sizes, config, replace):
        """keys, bufs (values, or addresses with their sizes) and config of
        the types checked (_arg_*) by the public method."""
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)
        opts = self._opts(config, replace)
        if isinstance(opts, int):
            return [opts] * len(keys)
        try:
            rcs = c.put(self._keys(keys), bufs, sizes, opts)
        except (TypeError, ValueError, OverflowError):
            return [INVALID_PARAMS] * len(keys)
        # Mooncake: a put of a key that exists succeeds and leaves the value.
        return [0 if rc == _mooncake.ERR_EXISTS else _code(rc) for rc in rcs]

    def _staged_put(self, fn, keys, values, config, replace):
        """put/put_parts/put_batch of bytes: the values pass through the
        local buffer in Mooncake, so each must fit in it (INVALID_PARAMS,
        Mooncake's answer, when it does not)."""
        config = _arg_config(fn, config)
        total = sum(sum(_arg_value(fn, p, "parts[i]") for p in v) if isinstance(v, list) else _arg_value(fn, v)
                    for v in values)
        if self._c is None:
            # Before setup (or after close) no budget exists yet: RPC_FAIL as
            # every call, not INVALID_PARAMS, which read as a bad value.
            return [RPC_FAIL] * len(keys)
        off = self._budget.take(total) if total else None
        if total and off is None:
            return [INVALID_PARAMS] * len(keys)
        try:
            return self._put(keys, values, None, config, replace)
        finally:
            if off is not None:
                self._budget.give(off, total)

    def _get_into(self, keys, bufs, sizes):
        """bufs and sizes: addresses and sizes (every caller is zero-copy),
        checked by the caller (_arg_uints)."""
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)

        def run(idx):
            try:
                return [_code(rc) for rc in c.get_into(self._keys([keys[i] for i in idx]), [bufs[i] for i in idx],
                                                       [sizes[i] for i in idx])]
            except (TypeError, ValueError, OverflowError):
                return [INVALID_PARAMS] * len(idx)
        return _skip_empty(keys, OBJECT_NOT_FOUND, run)

    def _sizes(self, c, keys):
        """Each key's size (>= 0) or code, in one round trip."""
        return [_code(r) if isinstance(r, int) else r[0] for r in c.replicas(self._keys(keys))]

    # -- single keys --------------------------------------------------------
    def put(self, key, value, config=None):
        return self._staged_put("put", [_arg_key("put", key)], [value], config, False)[0]

    def upsert(self, key, value, config=None):
        return self._staged_put("upsert", [_arg_key("upsert", key)], [value], config, True)[0]

    def put_parts(self, key, *parts, config=None):
        key = _arg_key("put_parts", key)
        if not parts:
            return INVALID_PARAMS
        return self._staged_put("put_parts", [key], [list(parts)], config, False)[0]

    def upsert_parts(self, key, *parts, config=None):
        key = _arg_key("upsert_parts", key)
        if not parts:
            return INVALID_PARAMS
        return self._staged_put("upsert_parts", [key], [list(parts)], config, True)[0]

    def get(self, key):
        h = self._get_buffers([_arg_key("get", key)])[0]
        return b"" if h is None else bytes(h)

    def get_buffer(self, key):
        return self._get_buffers([_arg_key("get_buffer", key)])[0]

    def batch_get_buffer(self, keys):
        return self._get_buffers(_arg_keys("batch_get_buffer", keys))

    def _get_buffers(self, keys):
        return _skip_empty(keys, None, lambda idx: self._get_buffers_of([keys[i] for i in idx]))

    def _get_buffers_of(self, keys):
        """One BufferHandle per key, or None (a miss, or no room left in the
        local buffer, as in Mooncake).

        Where the object is in shared memory (same host), the handle is a
        read-only view of it where it lies (Client.views): no copy, and the
        store holds the object -- not reused, not evicted, whatever happens
        to its key -- until the handle is freed (its release is sent with
        this store's next get_buffer call, or at close). Set
        MC_STORE_VIEWS=0 for handles that are copies (writable).

        Other keys are copied into the local buffer. KV-cache chunks are
        mostly of one size, so the handles are first reserved at the largest
        size the last batch saw and read into at once (one round trip; the
        unused tail of each window goes back right after); keys larger than
        that, or a first batch, are sized by one request for all of them,
        then read."""
        c = self._c  # once: close() on another thread sets it to None
        out = [None] * len(keys)
        if c is None or not keys:
            return out
        unread = list(range(len(keys)))
        if _VIEWS:
            absent = (_mooncake.ERR_NOT_FOUND, _mooncake.ERR_NOT_READY)
            unread = []
            for i, got in enumerate(c.views(self._keys(keys))):
                if not isinstance(got, int):
                    out[i] = got
                elif got not in absent:  # no shared memory path, the hold refused, an older server: copy it
                    unread.append(i)
            if not unread:
                return out
        hint = self._size_hint
        if hint:
            unread = self._read_windows(c, keys, unread, [hint] * len(keys), out)
        if unread:
            sizes = self._sizes(c, [keys[i] for i in unread])
            caps = [0] * len(keys)
            for i, n in zip(unread, sizes):
                caps[i] = n
            self._size_hint = max([n for n in sizes if n > 0], default=hint)
            self._read_windows(c, keys, [i for i in unread if caps[i] > 0], caps, out)
        return out

    def _read_windows(self, c, keys, idx, caps, out):
        """Reads keys[i] for i in idx into windows of caps[i] bytes; fills
        out[i] with a handle of the object's size. Returns the indexes
        whose object did not fit (to be sized and read again)."""
        b = self._budget
        win, retry = {}, []
        for i in idx:
            off = b.take(caps[i])
            if off is not None:
                win[i] = off
            else:
                retry.append(i)  # no room at this size: sized exactly, it may fit
        if not win:
            return retry
        got = c.get_into(self._keys([keys[i] for i in win]), [b.addr + off for off in win.values()],
                               [caps[i] for i in win])
        for (i, off), n in zip(win.items(), got):
            if n == _mooncake.ERR_TOO_SMALL:
                retry.append(i)
            if n <= 0:
                b.give(off, caps[i])
                continue
            kept = b.trim(off, caps[i], n)  # the tail beyond the object goes back now
            h = BufferHandle(n, b.map, b.addr + off)
            _weakref.finalize(h, b.give, off, kept)
            out[i] = h
        return retry

    def _from(self, fn, key, buffer_ptr, size, config, replace):
        key, ptr, size = _arg_key(fn, key), _arg_uint(fn, buffer_ptr, "buffer_ptr"), _arg_uint(fn, size, "size")
        return self._put([key], [ptr], [size], _arg_config(fn, config), replace)[0]

    def put_from(self, key, buffer_ptr, size, config=None):
        return self._from("put_from", key, buffer_ptr, size, config, False)

    def upsert_from(self, key, buffer_ptr, size, config=None):
        return self._from("upsert_from", key, buffer_ptr, size, config, True)

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, config=None):
        """One object: metadata_size bytes at metadata_buffer_ptr, then size
        bytes at buffer_ptr (both registered), as upstream lays it out. 0
        or a code; a size of 0 is INVALID_PARAMS as put_from's is (upstream
        answers 0 and stores nothing), and so are errors (upstream's are
        positive here, its codes negated twice)."""
        fn = "put_from_with_metadata"
        key, config = _arg_key(fn, key), _arg_config(fn, config)
        ptr, meta = _arg_uint(fn, buffer_ptr, "buffer_ptr"), _arg_uint(fn, metadata_buffer_ptr, "metadata_buffer_ptr")
        size, meta_size = _arg_uint(fn, size, "size"), _arg_uint(fn, metadata_size, "metadata_size")
        if size == 0:
            return INVALID_PARAMS
        ptrs, sizes = ([meta, ptr], [meta_size, size]) if meta_size else ([ptr], [size])
        return self._put([key], [ptrs], [sizes], config, False)[0]

    def get_offload_rpc_read_count(self):
        """Reads served from upstream's SSD offload tier: none here (0, as
        upstream answers without one)."""
        return 0

    def get_into(self, key, buffer_ptr, size):
        key = _arg_key("get_into", key)
        ptr, size = _arg_uint("get_into", buffer_ptr, "buffer_ptr"), _arg_uint("get_into", size, "size")
        return self._get_into([key], [ptr], [size])[0]

    def register_buffer(self, buffer_ptr, size):
        ptr, size = _arg_uint("register_buffer", buffer_ptr, "buffer_ptr"), _arg_uint("register_buffer", size, "size")
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        try:
            return _code(c.register(ptr, size))
        except OverflowError:  # past what the library's size type holds: no memory is that large
            return INVALID_PARAMS

    def unregister_buffer(self, buffer_ptr):
        ptr = _arg_uint("unregister_buffer", buffer_ptr, "buffer_ptr")
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        return _code(c.unregister(ptr))

    def is_exist(self, key):
        return self._is_exist([_arg_key("is_exist", key)])[0]

    def batch_is_exist(self, keys):
        return self._is_exist(_arg_keys("batch_is_exist", keys))

    def _is_exist(self, keys):
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)
        return _skip_empty(keys, 0, lambda idx: [_code(r) for r in c.exists(self._keys([keys[i] for i in idx]))[1]])

    def remove(self, key, force=False):
        key = _arg_key("remove", key)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        if not len(key):
            return OBJECT_NOT_FOUND  # as Mooncake's master answers it (_skip_empty)
        rc = c.remove(self._key(key))
        return OBJECT_NOT_FOUND if rc == 0 else (0 if rc > 0 else _code(rc))

    def batch_remove(self, keys, force=False):
        return [self.remove(k, force) for k in _arg_keys("batch_remove", keys)]

    def remove_all(self, force=False):
        """Removes every object this client may remove (a tenant: its own);
        the count, or a negative code. ``force`` is accepted: nothing here
        waits on leases or replication tasks (a removed object's space is
        reused once its readers' leases end)."""
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        return _code(c.remove_all())

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes every object whose key matches ``regex_pattern`` anywhere
        (re.search, as Mooncake's std::regex_search; a str, bytes or a
        compiled pattern): the count removed, INVALID_PARAMS for a pattern
        that does not compile, or the first failure. ``force`` is accepted:
        as with remove, a leased object goes at once and its space when its
        readers are done (upstream skips it without force).

        The server speaks no regular expressions. A pattern that can only
        match keys it names -- ``^key$`` or ``^(?:k1|k2)$`` of literals, the
        form vLLM's encoder cache evicts with, one call per entry -- removes
        those keys (a round trip each). Any other is matched here against the
        keys listed by SCAN on every node (a tenant's own, matched without
        its prefix): its cost is the keyspace's, as the master's walk is in
        Mooncake."""
        if not isinstance(regex_pattern, (str, bytes, _re.Pattern)):
            raise _type_error("remove_by_regex", "regex_pattern", regex_pattern, "str, bytes or a compiled pattern")
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        try:
            pat = regex_pattern if isinstance(regex_pattern, _re.Pattern) else _re.compile(regex_pattern)
        except _re.error:
            return INVALID_PARAMS
        named = _anchored_literals(pat)
        if named is not None:
            removed = 0
            for name in named:
                rc = c.remove(self._key(name))
                if rc < 0:
                    return _code(rc)
                removed += rc
            return removed
        prefix = self._prefix.encode()
        keys = c.scan(_glob_escape(self._prefix) + "*" if self._prefix else None)
        if isinstance(keys, int):
            return _code(keys)
        removed = 0
        for k in keys:
            if not k.startswith(prefix):
                continue
            name = k[len(prefix):]
            if isinstance(pat.pattern, str):
                name = name.decode("utf-8", "surrogateescape")
            if not pat.search(name):
                continue
            rc = c.remove(k)
            if rc < 0:
                return _code(rc)
            removed += rc  # 0: removed meanwhile by someone else
        return removed

    def get_size(self, key):
        key = _arg_key("get_size", key)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        if not len(key):
            return OBJECT_NOT_FOUND  # as Mooncake's master answers it (_skip_empty)
        return _code(c.size(self._key(key)))

    # -- batches ------------------------------------------------------------
    def _batch(self, fn, keys, values, config, replace):
        keys, values = _arg_keys(fn, keys), _arg_list(fn, values, "values")
        rcs = self._staged_put(fn, keys, values, config, replace)
        return next((rc for rc in rcs if rc < 0), 0)

    def put_batch(self, keys, values, config=None):
        return self._batch("put_batch", keys, values, config, False)

    def upsert_batch(self, keys, values, config=None):
        return self._batch("upsert_batch", keys, values, config, True)

    def get_batch(self, keys):
        return [b"" if h is None else bytes(h) for h in self._get_buffers(_arg_keys("get_batch", keys))]

    def _batch_from(self, fn, keys, ptrs, sizes, config, replace, depth=1):
        keys = _arg_keys(fn, keys)
        ptrs = _arg_uints(fn, ptrs, "buffer_ptrs" if depth == 1 else "all_buffer_ptrs", depth)
        sizes = _arg_uints(fn, sizes, "sizes" if depth == 1 else "all_sizes", depth)
        return self._put(keys, ptrs, sizes, _arg_config(fn, config), replace)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._batch_from("batch_put_from", keys, buffer_ptrs, sizes, config, False)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._batch_from("batch_upsert_from", keys, buffer_ptrs, sizes, config, True)

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        fn = "batch_get_into"
        return self._get_into(_arg_keys(fn, keys), _arg_uints(fn, buffer_ptrs, "buffer_ptrs"),
                              _arg_uints(fn, sizes, "sizes"))

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        return self._batch_from("batch_put_from_multi_buffers", keys, all_buffer_ptrs, all_sizes, config, False, 2)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=False):
        fn = "batch_get_into_multi_buffers"
        return self._get_into(_arg_keys(fn, keys), _arg_uints(fn, all_buffer_ptrs, "all_buffer_ptrs", 2),
                              _arg_uints(fn, all_sizes, "all_sizes", 2))

    # -- byte ranges and get sessions ------------------------------------------
    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes):
        """For buffer i, key j, fragment k: bytes [src, src+size) of object
        all_keys[i][j] to buffer_ptrs[i] + dst. The result has the same
        nesting, one int per fragment: bytes copied or a negative code.
        Buffers must be registered (a fragment outside them, or outside
        its object, is INVALID_PARAMS alone)."""
        fn = "get_into_ranges"
        buffer_ptrs = _arg_uints(fn, buffer_ptrs, "buffer_ptrs")
        groups = [[_arg_keys(fn, ks, "all_keys[i]") for ks in _arg_list(fn, all_keys, "all_keys")]]
        groups += [_arg_uints(fn, x, name, 3) for x, name in ((all_dst_offsets, "all_dst_offsets"),
                                                               (all_src_offsets, "all_src_offsets"),
                                                               (all_sizes, "all_sizes"))]
        c = self._c  # once: close() on another thread sets it to None
        shape = [[len(d) for d in dsts] for dsts in groups[1]] if len(groups[1]) == len(buffer_ptrs) else []
        out = [[[INVALID_PARAMS] * n for n in row] for row in shape]
        if c is None or any(len(g) != len(buffer_ptrs) for g in groups):
            return out
        keys, ranges, where = [], [], []
        for i, base in enumerate(buffer_ptrs):
            ks, dsts, srcs, sizes = (g[i] for g in groups)
            if not (len(ks) == len(dsts) == len(srcs) == len(sizes)):
                continue  # upstream leaves the buffer's fragments INVALID_PARAMS
            for j, k in enumerate(ks):
                d, o, n = dsts[j], srcs[j], sizes[j]
                if not (len(d) == len(o) == len(n)):
                    continue
                keys.append(k)
                ranges.append([(base + d[x], o[x], n[x]) for x in range(len(d))])
                where.append((i, j))
        if keys:
            for (i, j), res in zip(where, c.get_ranges(self._keys(keys), ranges)):
                out[i][j] = [_code(r) for r in res]
        return out

    def batch_get_session_start(self, keys):
        """Looks the keys up once for the range reads that follow: 0 per
        key found, or its code (-704 missing, -703 not complete yet). Here
        a session remembers the sizes; each range call takes its own read
        lease (one round trip), so a session never expires."""
        return self.batch_get_session_start_with_sources(keys)[0]

    def batch_get_session_start_with_sources(self, keys):
        """batch_get_session_start, and per key where its bytes are:
        "memory" (every replica here is in memory) or "" when not found."""
        keys = _arg_keys("batch_get_session_start", keys)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys), [""] * len(keys)  # the README's rule; upstream -600
        if not keys:
            return [], []
        codes, sources = [], []
        found = c.replicas(self._keys(keys))
        with self._lock:
            for k, r in zip(keys, found):
                if isinstance(r, int):
                    self._sessions.pop(k, None)
                    codes.append(_code(r))
                    sources.append("")
                else:
                    self._sessions[k] = r[0]
                    codes.append(0)
                    sources.append("memory")
        return codes, sources

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes, all_src_offsets):
        """For each key of a session: buffer j gets bytes [off_j,
        off_j+size_j) of the object. Per key the bytes read, or a code
        (INVALID_PARAMS for a key without a session, mismatched lists or a
        range outside the object)."""
        fn = "batch_get_into_multi_buffer_ranges"
        keys = _arg_keys(fn, keys)
        all_buffer_ptrs = _arg_uints(fn, all_buffer_ptrs, "all_buffer_ptrs", 2)
        all_sizes = _arg_uints(fn, all_sizes, "all_sizes", 2)
        all_src_offsets = _arg_uints(fn, all_src_offsets, "all_src_offsets", 2)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)
        res = [INVALID_PARAMS] * len(keys)
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets)):
            return res
        readable, ranges = [], []
        with self._lock:
            for i, k in enumerate(keys):
                ptrs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_src_offsets[i]
                size = self._sessions.get(k)
                if size is None or not (len(ptrs) == len(sizes) == len(offs)):
                    continue
                if any(o > size or n > size - o for o, n in zip(offs, sizes)):
                    continue
                readable.append(i)
                ranges.append(list(zip(ptrs, offs, sizes)))
        if readable:
            got = c.get_ranges(self._keys([keys[i] for i in readable]), ranges)
            for i, r in zip(readable, got):
                bad = next((x for x in r if x < 0), None)
                res[i] = _code(bad) if bad is not None else sum(r)
        return res

    def batch_get_session_end(self, keys):
        keys = _arg_keys("batch_get_session_end", keys)
        with self._lock:
            for k in keys:
                self._sessions.pop(k, None)
        return 0

    # -- put sessions -------------------------------------------------------------
    def batch_put_session_start(self, keys, sizes, config=None):
        """Reserves each key's object of sizes[i] bytes and opens a put
        session for it (libmooncake's mc_put_session_*): its bytes arrive by
        later batch_put_from_multi_buffer_ranges calls, and
        batch_put_session_end publishes it whole (or batch_put_session_revoke
        gives the space back). Per key 0 or a code: INVALID_PARAMS for a key
        with a session already (as upstream) or a size that is not positive,
        OBJECT_ALREADY_EXISTS for a key stored or being put."""
        fn = "batch_put_session_start"
        keys, sizes = _arg_keys(fn, keys), _arg_uints(fn, sizes, "sizes")
        config = _arg_config(fn, config)
        res = [INVALID_PARAMS] * len(keys)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)  # before setup or after close: the README's rule; upstream -600
        if len(sizes) != len(keys):
            return res
        opts = self._opts(config)
        if isinstance(opts, int):
            return [opts] * len(keys)
        start = []
        with self._lock:
            for i, k in enumerate(keys):
                if sizes[i] <= 0 or k in self._put_sessions:
                    continue
                self._put_sessions[k] = None  # taken: a second start of it is refused meanwhile
                start.append(i)
        if not start:
            return res
        try:
            got = c.put_session_start(self._keys([keys[i] for i in start]), [sizes[i] for i in start], opts)
        except (TypeError, ValueError, OverflowError):
            got = [INVALID_PARAMS] * len(start)
        with self._lock:
            for i, g in zip(start, got):
                if isinstance(g, int):
                    res[i] = _code(g)
                    self._put_sessions.pop(keys[i], None)
                else:
                    res[i] = 0
                    self._put_sessions[keys[i]] = g
        return res

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
        """For each key with a put session: buffer j's size_j bytes go to
        offset off_j of the object, in every replica, copied before the call
        returns. Per key the bytes written or a code: INVALID_PARAMS for a
        key without a session, mismatched lists, a range outside the object
        or outside registered memory (nothing of that key is written); a
        transfer that fails leaves the session for a revoke (its end would
        revoke it too)."""
        fn = "batch_put_from_multi_buffer_ranges"
        keys = _arg_keys(fn, keys)
        all_buffer_ptrs = _arg_uints(fn, all_buffer_ptrs, "all_buffer_ptrs", 2)
        all_sizes = _arg_uints(fn, all_sizes, "all_sizes", 2)
        all_dst_offsets = _arg_uints(fn, all_dst_offsets, "all_dst_offsets", 2)
        res = [INVALID_PARAMS] * len(keys)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets)):
            return res
        sessions, ranges, where = [], [], []
        with self._lock:
            for i, k in enumerate(keys):
                ptrs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_dst_offsets[i]
                s = self._put_sessions.get(k)
                if s is None or not (len(ptrs) == len(sizes) == len(offs)):
                    continue
                sessions.append(s)
                ranges.append(list(zip(ptrs, offs, sizes)))
                where.append(i)
        if sessions:
            try:
                got = c.put_session_write(sessions, ranges)
            except (TypeError, ValueError, OverflowError):
                return res
            for i, g in zip(where, got):
                res[i] = _code(g)
        return res

    def _finish_put_sessions(self, keys, publish):
        keys = _arg_keys("batch_put_session_end" if publish else "batch_put_session_revoke", keys)
        res = [INVALID_PARAMS] * len(keys)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return [RPC_FAIL] * len(keys)
        sessions, where = [], []
        with self._lock:
            for i, k in enumerate(keys):
                s = self._put_sessions.get(k)
                if s is None:
                    continue  # none, or still starting
                del self._put_sessions[k]
                sessions.append(s)
                where.append(i)
        if sessions:
            got = (c.put_session_end if publish else c.put_session_revoke)(sessions)
            for i, g in zip(where, got):
                res[i] = _code(g)
        return res

    def batch_put_session_end(self, keys):
        """Publishes each key's object (unwritten bytes are zeros). Per key 0
        or a code; the session is closed either way (one whose write failed
        is revoked, and answers that code)."""
        return self._finish_put_sessions(keys, True)

    def batch_put_session_revoke(self, keys):
        """Closes each key's put session and gives its space back: per key
        0, or INVALID_PARAMS for a key without a session."""
        return self._finish_put_sessions(keys, False)

    # -- replica descriptions and clearing -------------------------------------
    def _descs(self, keys):
        c = self._c  # once: close() on another thread sets it to None
        if c is None or not keys:
            return [None] * len(keys)
        out = []
        for r in c.replicas(self._keys(keys)):
            if isinstance(r, int):
                out.append(None)
            else:
                out.append([ReplicaDescriptor(name, off, ln, ep) for (_, name, off, ln, _, ep) in r[1]])
        return out

    def get_replica_desc(self, key):
        """The key's replicas (ReplicaDescriptor), or [] when not found."""
        return self._descs([_arg_key("get_replica_desc", key)])[0] or []

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor, ...]} for the keys found (as upstream,
        a missing key is left out)."""
        keys = _arg_keys("batch_get_replica_desc", keys)
        return {k: d for k, d in zip(keys, self._descs(keys)) if d is not None}

    def batch_replica_clear(self, keys, segment_name=""):
        """Gives memory back: each key whose object is complete and that no
        one is reading loses its replicas (all, or those in segment_name;
        an object that keeps replicas elsewhere is left). The keys cleared."""
        keys = _arg_keys("batch_replica_clear", keys)
        if not isinstance(segment_name, (str, bytes)):
            raise _type_error("batch_replica_clear", "segment_name", segment_name, "str")
        c = self._c  # once: close() on another thread sets it to None
        if c is None or not keys:
            return []
        _, res = c.replica_clear(self._keys(keys), segment_name or None)
        return [k for k, r in zip(keys, res) if r == 1]

    # -- non-blocking (Mooncake-C's own; Mooncake has none) -------------------
    def batch_put_from_async(self, keys, buffer_ptrs, sizes, config=None):
        """Like batch_put_from, but returns a mooncake.Future at once:
        ``fut.result()`` (or ``await fut``) gives the list of codes."""
        from . import Future
        fn = "batch_put_from_async"  # one address per key, or a list (an object of several buffers)
        keys = _arg_keys(fn, keys)
        ptrs, sizes = _arg_uints(fn, buffer_ptrs, "buffer_ptrs", None), _arg_uints(fn, sizes, "sizes", None)
        opts = self._opts(_arg_config(fn, config))
        if isinstance(opts, int):
            return Future([opts] * len(keys), keys, lambda k, r: r)  # Mooncake's code already
        c = self._c  # once: close() on another thread sets it to None
        try:
            op = c.put_async(self._keys(keys), ptrs, sizes, opts) if c else RPC_FAIL
        except (TypeError, ValueError, OverflowError):
            return Future([INVALID_PARAMS] * len(keys), keys, lambda k, r: r)  # as batch_put_from answers
        if isinstance(op, int):
            return Future([_code(op)] * len(keys), keys, lambda k, r: r)
        return Future(op, keys, lambda k, r: [0 if rc == _mooncake.ERR_EXISTS else _code(rc) for rc in r])

    def batch_get_into_async(self, keys, buffer_ptrs, sizes):
        from . import Future
        fn = "batch_get_into_async"  # one address per key, or a list (an object of several buffers)
        keys = _arg_keys(fn, keys)
        ptrs, sizes = _arg_uints(fn, buffer_ptrs, "buffer_ptrs", None), _arg_uints(fn, sizes, "sizes", None)
        c = self._c  # once: close() on another thread sets it to None
        try:
            op = c.get_async(self._keys(keys), ptrs, sizes) if c else RPC_FAIL
        except (TypeError, ValueError, OverflowError):
            return Future([INVALID_PARAMS] * len(keys), keys, lambda k, r: r)
        if isinstance(op, int):
            return Future([_code(op)] * len(keys), keys, lambda k, r: r)
        return Future(op, keys, lambda k, r: [_code(rc) for rc in r])

    def batch_prefix_exist(self, keys):
        """How many leading keys are stored, in one round trip (Mooncake-C's own)."""
        keys = _arg_keys("batch_prefix_exist", keys)
        c = self._c  # once: close() on another thread sets it to None
        if c is None:
            return RPC_FAIL
        n, _ = c.exists(self._keys(keys), prefix=True)
        return _code(n)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass
