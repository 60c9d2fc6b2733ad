"""mooncake: the Python client of Mooncake-C, a distributed KVCache store.

Two APIs over one extension (_mooncake, libmooncake underneath):

- ``mooncake.connect(uri)`` returns a :class:`Store`: Pythonic, exceptions
  for errors, anything with the buffer protocol (bytes, bytearray,
  memoryview, NumPy arrays) or a PyTorch tensor as a value.
- ``mooncake.store.MooncakeDistributedStore``: Mooncake's own class, with its
  method names, argument order and integer return codes, for vLLM, SGLang
  and LMCache code that already calls it.

Both release the GIL for every transfer and round trip, and one object may
be shared by threads: each call borrows one of a pool of library handles
(its own connections), so threads move data at once.
"""
import asyncio as _asyncio
import os as _os
import threading as _threading
import time as _time
import weakref as _weakref

from . import _mooncake
from ._buffers import Pieces as _Pieces

__all__ = [
    "connect", "cuda_available", "Store", "Future", "Error", "NotFoundError", "ExistsError", "NoSpaceError",
    "LeaseExpiredError", "BufferTooSmallError", "InvalidArgumentError", "AuthError",
    "ProtocolError", "ConnectionLostError", "UnsupportedError", "NotReadyError",
    "ServerError", "ClosedError", "__version__",
]

__version__ = _mooncake.library_version


class Error(Exception):
    """A failure the store reported. ``code`` is libmooncake's MC_ERR_* value."""

    code = None

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFoundError(Error, KeyError):
    """No such key (a KeyError too, so ``except KeyError`` works)."""
    code = _mooncake.ERR_NOT_FOUND

    def __str__(self):  # KeyError would print the repr
        return str(self.args[0]) if self.args else ""


class ExistsError(Error):
    code = _mooncake.ERR_EXISTS


class NoSpaceError(Error):
    """No segment can hold the value (the store is full of leased or pinned data)."""
    code = _mooncake.ERR_NOSPACE


class LeaseExpiredError(Error):
    code = _mooncake.ERR_LEASE_EXPIRED


class BufferTooSmallError(Error, ValueError):
    code = _mooncake.ERR_TOO_SMALL


class InvalidArgumentError(Error, ValueError):
    code = _mooncake.ERR_INVALID


class AuthError(Error, PermissionError):
    code = _mooncake.ERR_AUTH


class ProtocolError(Error):
    code = _mooncake.ERR_PROTOCOL


class ConnectionLostError(Error, ConnectionError):
    """The server could not be reached, or went away, or timed out."""
    code = _mooncake.ERR_IO


class UnsupportedError(Error):
    code = _mooncake.ERR_UNSUPPORTED


class NotReadyError(Error):
    """The key exists but its put has not ended."""
    code = _mooncake.ERR_NOT_READY


class ServerError(Error):
    code = _mooncake.ERR_SERVER


class ClosedError(Error):
    code = _mooncake.ERR_CLOSED


_BY_CODE = {cls.code: cls for cls in (
    NotFoundError, ExistsError, NoSpaceError, LeaseExpiredError, BufferTooSmallError,
    InvalidArgumentError, AuthError, ProtocolError, ConnectionLostError, UnsupportedError,
    NotReadyError, ServerError, ClosedError)}


def _error(code, what=""):
    words = _mooncake.last_error() or _mooncake.strerror(code)
    cls = _BY_CODE.get(code, Error)
    return cls(f"{what}: {words}" if what else words, code)


def _check(code, what=""):
    if code < 0:
        raise _error(code, what)
    return code


def _uri(addr):
    if "://" in addr:
        return addr
    return addr  # host:port, as libmooncake reads it


def _after_op(op, cleanup):
    """A future's end, whether its result was read or it was dropped: the
    batch over (release() waits for it), then what was held for it given
    back -- never before, as the worker may still be moving those bytes."""
    if not isinstance(op, list):
        op.release()
    cleanup()


def _with_reason(results, why):
    """Per-key results whose errors say why, as a synchronous call's do
    (last_error()): the library's reason for the batch, or for its last
    failed key -- engines log what they get, and a code alone ("connection
    lost") does not say which host or what happened. Not on a miss or an
    existing key, which need none and whose reason it would not be."""
    if not why or not isinstance(results, list):
        return results
    return [type(r)(f"{r}: {why}", r.code) if isinstance(r, Error) and r.code not in
            (_mooncake.ERR_NOT_FOUND, _mooncake.ERR_EXISTS) else r for r in results]


class Future:
    """A batch running in the background. ``result(timeout=None)`` waits and
    returns the per-key results; ``await fut`` does the same in asyncio
    without blocking the loop (the library signals a descriptor)."""

    def __init__(self, op, keys, convert, keep=(), cleanup=None):
        self._op = op            # _mooncake.Op, or a list of results already known
        self._keys = keys
        self._convert = convert
        self._keep = keep
        self._result = None
        self._have = False
        # Threads may share a future: the first to finish it reads and
        # releases the op and converts once; the others wait here for that
        # result.
        self._finish_lock = _threading.Lock()
        # What the batch holds (the CUDA tensors' registrations) goes back
        # once, when the result is read or, for a future dropped unread,
        # when it is collected: a finalizer, not __del__, so it runs
        # exactly once either way.
        self._cleanup = _weakref.finalize(self, _after_op, op, cleanup) if cleanup else None

    def done(self):
        return self._have or isinstance(self._op, list) or self._op.done()

    def _finish(self):
        with self._finish_lock:
            if not self._have:
                raw = self._op if isinstance(self._op, list) else self._op.results()
                why = "" if isinstance(self._op, list) else self._op.error()
                if not isinstance(self._op, list):
                    self._op.release()
                if self._cleanup is not None:
                    self._cleanup()
                self._result = _with_reason(self._convert(self._keys, raw), why)
                self._have = True
                self._keep = ()
        return self._result

    # How long one wait in result() lets the GIL go at most: Python runs
    # signal handlers only between its own steps, so a wait of the whole
    # batch in one call kept Ctrl-C out until the batch ended (with a
    # server gone, the I/O timeout).
    _WAIT_SLICE = 0.2

    def result(self, timeout=None):
        """The per-key results, waiting up to timeout seconds (None: until
        the batch ends; 0 or less: a poll) else TimeoutError. Ctrl-C
        interrupts the wait, not the batch: it goes on, and result() may
        be called again."""
        if not self.done():
            end = None if timeout is None else _time.monotonic() + max(0.0, timeout)
            while True:
                left = self._WAIT_SLICE if end is None else min(self._WAIT_SLICE, max(0.0, end - _time.monotonic()))
                try:
                    rc = self._op.wait(int(left * 1000))
                except ValueError:  # released by another thread's result() meanwhile: it is done
                    break
                if rc != _mooncake.ERR_PENDING:
                    break
                if end is not None and _time.monotonic() >= end:
                    raise TimeoutError("the batch has not finished")
        return self._finish()

    def __await__(self):
        if not self.done():
            loop = _asyncio.get_running_loop()
            waiter = loop.create_future()
            fd = self._op.fileno()

            def ready():
                loop.remove_reader(fd)
                if not waiter.done():
                    waiter.set_result(None)
            loop.add_reader(fd, ready)
            try:
                yield from waiter.__await__()
            finally:
                loop.remove_reader(fd)
        return self._finish()


def _opts(replicas, prefer, pin_ms, hard_pin, replace):
    return (int(replicas or 0), prefer or None, int(pin_ms or 0), bool(hard_pin), bool(replace))


class Store:
    """A connection to a Mooncake-C server or cluster (any node's address).

    Values are anything with the buffer protocol, PyTorch tensors, or a list
    of those (one object made of several buffers: a get fills them in
    order). Safe to share between threads; a context manager.

    ``put`` overwrites by default, as Redis's SET does; ``replace=False``
    keeps an existing value and raises :class:`ExistsError`.
    """

    def __init__(self, uri, password=None, user=None, *, connect_timeout=None, timeout=None,
                 transport=None, streams=0, _client=None):
        self._c = _client or _mooncake.Client(
            _uri(uri), user=user, password=password,
            connect_ms=-1 if connect_timeout is None else int(connect_timeout * 1000),
            io_ms=-1 if timeout is None else int(timeout * 1000),
            transport={None: -1, "auto": 0, "shm": 1, "tcp": 2, "rdma": 3}[transport],
            streams=streams)
        self.uri = uri

    # -- plumbing ---------------------------------------------------------
    def _pieces(self, values, writable):
        """The values' pieces, their CUDA tensors registered (a failure
        gives back those registered before it)."""
        p = _Pieces()
        for v in values:
            p.add(v, writable)
        for i, (addr, n) in enumerate(p.device):
            rc = self._c.register(addr, n)
            if rc < 0:
                err = _error(rc, "CUDA tensor")
                for a, _ in p.device[:i]:
                    self._c.unregister(a)
                raise err
        return p

    def _done_with(self, p):
        for addr, _ in p.device:
            self._c.unregister(addr)

    # -- single keys --------------------------------------------------------
    def put(self, key, value, *, replicas=0, prefer=None, pin_ms=0, hard_pin=False, replace=True):
        """Store value under key (a new version if it exists, unless replace=False)."""
        p = self._pieces([value], False)
        try:
            rc = self._c.put([key], p.bufs, p.size_arg(),
                             _opts(replicas, prefer, pin_ms, hard_pin, replace))[0]
        finally:
            self._done_with(p)
        _check(rc, f"put {key!r}")

    def get(self, key):
        """The value as bytes; KeyError (NotFoundError) when missing."""
        r = self._c.get([key])[0]
        if isinstance(r, int):
            raise _error(r, f"get {key!r}")
        return r

    def get_into(self, key, buf):
        """Read into buf (a writable buffer, a tensor, or a list of them, filled
        in order); returns the value's size in bytes."""
        p = self._pieces([buf], True)
        try:
            rc = self._c.get_into([key], p.bufs, p.size_arg())[0]
        finally:
            self._done_with(p)
        return _check(rc, f"get {key!r}")

    def put_from(self, key, addr, size, **opts):
        """put from raw memory registered with register()."""
        rc = self._c.put([key], [addr], [size], _opts(opts.get("replicas"), opts.get("prefer"),
                                                     opts.get("pin_ms"), opts.get("hard_pin"),
                                                     opts.get("replace", True)))[0]
        _check(rc, f"put {key!r}")

    def get_into_addr(self, key, addr, size):
        return _check(self._c.get_into([key], [addr], [size])[0], f"get {key!r}")

    def register(self, addr, size):
        """Allow raw addresses in [addr, addr+size) (and pin it for RDMA/CUDA)."""
        _check(self._c.register(addr, size), "register")

    def unregister(self, addr):
        _check(self._c.unregister(addr), "unregister")

    def exists(self, key):
        return self.exists_many([key])[0]

    def exists_many(self, keys):
        """One round trip: a bool per key."""
        n, res = self._c.exists(list(keys))
        _check(n, "exists")
        return [r == 1 for r in res]

    def prefix_length(self, keys, lease=False):
        """How many leading keys are stored (stops at the first miss), in one
        round trip per node. lease=True holds what it found for the get that
        follows."""
        n, _ = self._c.exists(list(keys), prefix=True, lease=lease)
        return _check(n, "prefix lookup")

    def remove(self, key):
        """True if it was there."""
        return _check(self._c.remove(key), f"remove {key!r}") > 0

    def remove_all(self):
        return _check(self._c.remove_all(), "remove_all")

    def size(self, key):
        r = self._c.size(key)
        return _check(r, f"size {key!r}")

    # -- batches ------------------------------------------------------------
    def batch_put(self, keys, values, *, replicas=0, prefer=None, pin_ms=0, hard_pin=False,
                  replace=True, raise_on_error=True):
        """One round trip per phase for all keys. Returns a result per key
        (None, or the Error it failed with when raise_on_error is False)."""
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        # A key given twice: the last value wins, as in MSET (two puts of one
        # key in one batch would collide on the server).
        last = {k: i for i, k in enumerate(keys)}
        pick = sorted(last.values()) if len(last) < len(keys) else None
        if pick is not None:
            keys_run, values_run = [keys[i] for i in pick], [values[i] for i in pick]
        else:
            keys_run, values_run = keys, values
        p = self._pieces(values_run, False)
        try:
            rcs = self._c.put(keys_run, p.bufs, p.size_arg(),
                              _opts(replicas, prefer, pin_ms, hard_pin, replace))
        finally:
            self._done_with(p)
        if pick is not None:
            by_key = dict(zip(keys_run, rcs))
            rcs = [by_key[k] for k in keys]
        return _batch_outcome(keys, rcs, raise_on_error, lambda rc: None)

    def batch_get_into(self, keys, bufs, *, raise_on_error=True):
        """Read each key into its buffer(s); a size per key (or the Error)."""
        keys = list(keys)
        p = self._pieces(bufs, True)
        try:
            rcs = self._c.get_into(keys, p.bufs, p.size_arg())
        finally:
            self._done_with(p)
        return _batch_outcome(keys, rcs, raise_on_error, lambda rc: rc)

    def batch_get(self, keys):
        """bytes per key, None for a missing one."""
        out = []
        for k, r in zip(keys, self._c.get(list(keys))):
            if isinstance(r, int):
                if r == _mooncake.ERR_NOT_FOUND:
                    out.append(None)
                    continue
                raise _error(r, f"get {k!r}")
            out.append(r)
        return out

    # -- non-blocking -------------------------------------------------------
    def batch_put_async(self, keys, values, *, replicas=0, prefer=None, pin_ms=0, hard_pin=False,
                        replace=True):
        """Submit a batch put and return a :class:`Future` at once; the values
        must not change until it is done. ``result()`` gives what batch_put
        with raise_on_error=False gives."""
        keys = list(keys)
        p = self._pieces(values, False)  # CUDA tensors registered until the batch is over
        return self._submit(self._c.put_async, p, "batch_put_async", lambda rc: None, keys, p.bufs,
                            p.size_arg(), _opts(replicas, prefer, pin_ms, hard_pin, replace))

    def batch_get_into_async(self, keys, bufs):
        keys = list(keys)
        p = self._pieces(bufs, True)
        return self._submit(self._c.get_async, p, "batch_get_into_async", lambda rc: rc, keys, p.bufs,
                            p.size_arg())

    def _submit(self, call, p, what, ok, keys, *args):
        """The Future of an async call on p's pieces. Its CUDA registrations
        go back when the batch is over: at once when it was refused (a code,
        or an exception), else when the result is read or the future dropped."""
        try:
            op = call(keys, *args)
        except BaseException:
            self._done_with(p)
            raise
        if isinstance(op, int):
            self._done_with(p)
            raise _error(op, what)
        return Future(op, keys, lambda k, r: _batch_outcome(k, r, False, ok), (p,),
                      cleanup=(lambda: self._done_with(p)) if p.device else None)

    # -- lifetime -----------------------------------------------------------
    def close(self):
        """Waits for calls in flight on other threads, then disconnects."""
        self._c.close()

    @property
    def closed(self):
        return self._c.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<mooncake.Store {self.uri!r}{' closed' if self.closed else ''}>"


def _batch_outcome(keys, rcs, raise_on_error, ok):
    out = []
    for k, rc in zip(keys, rcs):
        if rc < 0:
            if raise_on_error:
                raise _error(rc, f"{k!r}")
            out.append(_BY_CODE.get(rc, Error)(_mooncake.strerror(rc), rc))
        else:
            out.append(ok(rc))
    return out


def cuda_available():
    """(True, "") if libmooncake can move CUDA device memory here, else
    (False, why). The library's own answer: it loads the CUDA runtime with
    dlopen ($MC_CUDA_LIBRARY, else libcudart.so.13/.12/.11.0), so the
    binding needs no CUDA and never disagrees with the library."""
    ok, why = _mooncake.cuda_available()
    return ok, why


def connect(uri=None, password=None, user=None, **kw):
    """Open a :class:`Store`. uri: "host:port" (any node of a cluster),
    "tcp://host:port" or "unix:///path/to.sock"; default $MOONCAKE_URI or
    127.0.0.1:6379. password/user default to $MOONCAKE_PASSWORD/$MOONCAKE_USER."""
    uri = uri or _os.environ.get("MOONCAKE_URI", "127.0.0.1:6379")
    password = password if password is not None else _os.environ.get("MOONCAKE_PASSWORD")
    user = user if user is not None else _os.environ.get("MOONCAKE_USER")
    return Store(uri, password=password, user=user, **kw)
