"""Mooncake's Python store API, on Mooncake-C.

``from mooncake.store import MooncakeDistributedStore`` as vLLM's
MooncakeStoreConnector, SGLang's HiCache and LMCache's mooncakestore backend
import it: the same method names, argument order and return conventions (0
or a negative Mooncake error code, bytes where Mooncake returns bytes, one
int per key for batches). What differs, and why, is in the README
("Python").

- ``master_server_addr`` is our server's ``host:port`` (any node of a
  cluster); ``metadata_server`` is accepted whatever it says (our server is
  its own metadata service).
- ``global_segment_size > 0`` mounts that much of this process's memory as
  a segment named ``local_hostname``: other clients' replicas may land here,
  and on the same host they are read over shared memory.
- ``protocol``/``rdma_devices``: the library picks shared memory, RDMA or
  TCP per segment by itself; ``local_buffer_size`` is accepted and unused
  (nothing is staged).
- A password (our server's requirepass or an ACL user) comes from the
  keywords ``password``/``user`` or $MOONCAKE_PASSWORD/$MOONCAKE_USER.
"""
import enum as _enum
import os as _os
import re as _re

from . import _mooncake

# Mooncake's error codes (negative int32) that engines test.
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SEGMENT_NOT_FOUND = -101
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
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
    _mooncake.ERR_TOO_SMALL: BUFFER_OVERFLOW,
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

# Mooncake's default soft-pin time when with_soft_pin is set without one.
_SOFT_PIN_DEFAULT_MS = 30 * 60 * 1000


def _code(rc):
    return rc if rc >= 0 else _CODE.get(rc, INTERNAL_ERROR)


class SoftPinAction(_enum.IntEnum):
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicateConfig:
    """How many replicas and where (Mooncake's ReplicateConfig)."""

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False, preferred_segment="",
                 preferred_segments=None, soft_pin_action=SoftPinAction.PRESERVE, soft_pin_ttl_ms=None):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = list(preferred_segments or [])
        self.soft_pin_action = soft_pin_action
        self.soft_pin_ttl_ms = soft_pin_ttl_ms

    @property
    def soft_pin_ttl_ms(self):
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 1 << 64):
            raise TypeError("soft_pin_ttl_ms must be None or a non-negative int that fits 64 bits")
        self._soft_pin_ttl_ms = v

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num}, with_soft_pin={self.with_soft_pin}, "
                f"with_hard_pin={self.with_hard_pin}, preferred_segment={self.preferred_segment!r})")


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


class MooncakeDistributedStore:
    """Mooncake's store client (see the module's comment for what the
    arguments mean here)."""

    def __init__(self):
        self._c = None
        self._hostname = ""
        self._mounted = False

    # -- lifetime -----------------------------------------------------------
    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=0, local_buffer_size=0,
              protocol="tcp", rdma_devices="", master_server_addr=None, *, password=None, user=None,
              **ignored):
        if isinstance(local_hostname, dict):
            d = dict(local_hostname)
            try:
                return self.setup(d.get("local_hostname"), d.get("metadata_server"),
                                  _size(d.get("global_segment_size", 0)), _size(d.get("local_buffer_size", 0)),
                                  d.get("protocol", "tcp"), d.get("rdma_devices", ""),
                                  d.get("master_server_addr") or d.get("master_server_address"),
                                  password=d.get("password"), user=d.get("user"))
            except ValueError:
                return INVALID_PARAMS
        if self._c is not None:
            self.close()
        if not master_server_addr or not isinstance(master_server_addr, str):
            return INVALID_PARAMS
        try:
            seg = _size(global_segment_size)
            _size(local_buffer_size)
        except ValueError:
            return INVALID_PARAMS
        password = password if password is not None else _os.environ.get("MOONCAKE_PASSWORD")
        user = user if user is not None else _os.environ.get("MOONCAKE_USER")
        try:
            self._c = _mooncake.Client(master_server_addr, user=user, password=password)
        except (ConnectionError, PermissionError, OSError):
            return RPC_FAIL
        self._hostname = local_hostname or "localhost"
        if seg > 0:
            rc = self._c.mount(seg, self._hostname)
            if rc < 0:
                self._c.close()
                self._c = None
                return _code(rc)
            self._mounted = True
        return 0

    def init_all(self, protocol, device_name, mount_segment_size=0):
        return 0 if self._c is not None else INVALID_PARAMS

    def close(self):
        if self._c is not None:
            self._c.close()
            self._c = None
            self._mounted = False
        return 0

    def get_hostname(self):
        return self._hostname

    # -- helpers ------------------------------------------------------------
    def _client(self):
        return self._c

    def _opts(self, config, replace=False):
        if config is None:
            return (0, None, 0, False, replace)
        prefer = config.preferred_segment or (config.preferred_segments[0] if config.preferred_segments else "")
        if prefer and prefer == self._hostname and not self._mounted:
            prefer = ""  # our own name but nothing mounted: no such segment, so no preference
        pin = 0
        action = getattr(config, "soft_pin_action", SoftPinAction.PRESERVE)
        if (config.with_soft_pin and action != SoftPinAction.DISABLE) or action == SoftPinAction.ENABLE:
            ttl = getattr(config, "soft_pin_ttl_ms", None)
            pin = ttl if ttl else _SOFT_PIN_DEFAULT_MS
        return (int(config.replica_num or 0), prefer or None, pin, bool(config.with_hard_pin), replace)

    def _put(self, keys, bufs, sizes, config, replace):
        if self._c is None:
            return [RPC_FAIL] * len(keys)
        try:
            rcs = self._c.put(keys, bufs, sizes, self._opts(config, replace))
        except (TypeError, ValueError):
            return [INVALID_PARAMS] * len(keys)
        # Mooncake: a put of a key that exists succeeds and leaves the value.
        return [0 if rc == _mooncake.ERR_EXISTS else _code(rc) for rc in rcs]

    def _get_into(self, keys, bufs, sizes):
        if self._c is None:
            return [RPC_FAIL] * len(keys)
        try:
            return [_code(rc) for rc in self._c.get_into(keys, bufs, sizes)]
        except (TypeError, ValueError):
            return [INVALID_PARAMS] * len(keys)

    # -- single keys --------------------------------------------------------
    def put(self, key, value, config=None):
        return self._put([key], [value], None, config, False)[0]

    def upsert(self, key, value, config=None):
        return self._put([key], [value], None, config, True)[0]

    def put_parts(self, key, *parts, config=None):
        if not parts:
            return INVALID_PARAMS
        return self._put([key], [list(parts)], None, config, False)[0]

    def get(self, key):
        if self._c is None:
            return b""
        r = self._c.get([key])[0]
        return b"" if isinstance(r, int) else r

    def put_from(self, key, buffer_ptr, size, config=None):
        return self._put([key], [buffer_ptr], [size], config, False)[0]

    def upsert_from(self, key, buffer_ptr, size, config=None):
        return self._put([key], [buffer_ptr], [size], config, True)[0]

    def get_into(self, key, buffer_ptr, size):
        return self._get_into([key], [buffer_ptr], [size])[0]

    def register_buffer(self, buffer_ptr, size):
        if self._c is None:
            return RPC_FAIL
        return _code(self._c.register(buffer_ptr, size))

    def unregister_buffer(self, buffer_ptr):
        if self._c is None:
            return RPC_FAIL
        return _code(self._c.unregister(buffer_ptr))

    def is_exist(self, key):
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys):
        if self._c is None:
            return [RPC_FAIL] * len(keys)
        n, res = self._c.exists(list(keys))
        return [_code(r) for r in res]

    def remove(self, key, force=False):
        if self._c is None:
            return RPC_FAIL
        rc = self._c.remove(key)
        return OBJECT_NOT_FOUND if rc == 0 else (0 if rc > 0 else _code(rc))

    def batch_remove(self, keys, force=False):
        return [self.remove(k, force) for k in keys]

    def remove_all(self):
        if self._c is None:
            return RPC_FAIL
        return _code(self._c.remove_all())

    def get_size(self, key):
        if self._c is None:
            return RPC_FAIL
        return _code(self._c.size(key))

    # -- batches ------------------------------------------------------------
    def put_batch(self, keys, values, config=None):
        rcs = self._put(list(keys), list(values), None, config, False)
        return next((rc for rc in rcs if rc < 0), 0)

    def upsert_batch(self, keys, values, config=None):
        rcs = self._put(list(keys), list(values), None, config, True)
        return next((rc for rc in rcs if rc < 0), 0)

    def get_batch(self, keys):
        if self._c is None:
            return [b""] * len(keys)
        return [b"" if isinstance(r, int) else r for r in self._c.get(list(keys))]

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._put(list(keys), list(buffer_ptrs), list(sizes), config, False)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return self._put(list(keys), list(buffer_ptrs), list(sizes), config, True)

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        return self._get_into(list(keys), list(buffer_ptrs), list(sizes))

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        return self._put(list(keys), [list(p) for p in all_buffer_ptrs], [list(s) for s in all_sizes], config,
                         False)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, prefer_same_node=True):
        return self._get_into(list(keys), [list(p) for p in all_buffer_ptrs], [list(s) for s in all_sizes])

    # -- non-blocking (Mooncake-C's own; Mooncake has none) -------------------
    def batch_put_from_async(self, keys, buffer_ptrs, sizes, config=None):
        """Like batch_put_from, but returns a mooncake.Future at once:
        ``fut.result()`` (or ``await fut``) gives the list of codes."""
        from . import Future
        keys = list(keys)
        op = self._c.put_async(keys, list(buffer_ptrs), list(sizes), self._opts(config)) if self._c else RPC_FAIL
        if isinstance(op, int):
            return Future([_code(op)] * len(keys), keys, lambda k, r: r)
        return Future(op, keys, lambda k, r: [0 if rc == _mooncake.ERR_EXISTS else _code(rc) for rc in r])

    def batch_get_into_async(self, keys, buffer_ptrs, sizes):
        from . import Future
        keys = list(keys)
        op = self._c.get_async(keys, list(buffer_ptrs), list(sizes)) if self._c else RPC_FAIL
        if isinstance(op, int):
            return Future([_code(op)] * len(keys), keys, lambda k, r: r)
        return Future(op, keys, lambda k, r: [_code(rc) for rc in r])

    def batch_prefix_exist(self, keys):
        """How many leading keys are stored, in one round trip (Mooncake-C's own)."""
        if self._c is None:
            return RPC_FAIL
        n, _ = self._c.exists(list(keys), prefix=True)
        return _code(n)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass
