#!/usr/bin/python3
"""redis_diff.py -- a randomized differential test of mooncake-server against redis-server.

Both servers are started on free 127.0.0.1 ports (redis-server with --save ""
--appendonly no), each in a scratch directory this script removes. For each
seed a seeded random sequence of commands over a small key space (so the
commands collide) is sent to both over raw RESP, on the same connections in
the same order, and every reply is compared by type and value. Each seed
runs twice: under RESP2, then (another sequence from the same seed) under
RESP3, HELLO 3 on every connection; HELLO 2/3 in the sequence switch one.

Five connections per server, mirrored: A and B run the random commands
(either may be in MULTI; B is "another client" that can touch A's watched
keys); C subscribes (SUBSCRIBE/PSUBSCRIBE ...; after each of its commands
and after each PUBLISH it is synchronised with a PING whose argument no
payload carries, so the frames before that reply are exactly what the
server queued); D checks state: every CHECK_EVERY commands and at the end
it compares KEYS *, and each key's GET, PTTL, EXPIRETIME, TYPE and OBJECT
ENCODING (so every path that wrote the key is checked); E hears
every keyspace event (notify-keyspace-events KEAnm, PSUBSCRIBE __key*__:*)
and is synchronised after every command of A and B, so each command's
events are compared too. Now and then A or B sends several commands in one
write (some split at random points: a large value then arrives in pieces)
or one command in the inline form (quotes and escapes as redis-cli's).

Built with a sanitizer (make SANITIZER=address), mooncake-server dies on
undefined behaviour and reports leaks when it exits: a report in its log
fails the run.

What is compared, and how:
  - error replies to the letter, first word (ERR, WRONGTYPE, EXECABORT ...)
    and text: clients match on both. The texts that differ on purpose are
    rewritten first (ERR_NORMAL, same_err; each listed in PROTOCOL.md with
    its reason); --show-info lists every pair that still differed;
  - CONFIG GET as a map over the parameters both servers have with the
    same value at start (the order is each one's table's); CONFIG SET of
    edge values to the letter (CONFIG_SETS says what is left out, and why);
  - COMMAND INFO field by field (name, arity, key positions, categories:
    the flags, tips and key specs differ on purpose, PROTOCOL.md
    "Commands"); COMMAND GETKEYS/GETKEYSANDFLAGS of the generator's own
    commands to the letter; the whole table (COMMAND, COUNT, DOCS, LIST) by
    shape;
  - KEYS replies, RESP3 sets and SCAN as sets: SCAN runs as a whole
    iteration (cursor 0 to 0, the same MATCH/COUNT/TYPE on every call) and
    the union of keys is compared, since cursors and order are the
    implementation's;
  - TTL, PTTL, EXPIRETIME, PEXPIRETIME within a tolerance:
    the two servers run a command at times that differ by at most the
    round trip of both (measured; the largest seen so far, twice, since a
    TTL is set by one command and read by another, plus the second's
    rounding); the script never sleeps, and every TTL it sets is either in
    the past (deleted at once, deterministic) or at least a day ahead, so
    nothing expires while it runs; no two relative times are equal (see
    Gen.rel), so EXPIRE ... GT/LT never compares two deadlines that only
    the servers' clocks tell apart;
  - values of server-specific content by shape only: CLIENT ID (a number),
    CLIENT LIST/INFO (a string), HELLO (a map), RANDOMKEY (which key is
    the table's draw), OBJECT HELP (an array of strings), OBJECT IDLETIME
    (redis-server shares small integers' objects between keys, so a read
    of one key touches others), OBJECT REFCOUNT (redis-server's shared
    integers answer 2147483647; PROTOCOL.md "Keys and values"), a SCAN page
    from a cursor other than 0, MEMORY USAGE (a number or nil), SLOWLOG
    GET/LEN, TIME, INFO.

Left out, with the reason:
  - DUMP of a key and RESTORE of a real payload: the payload is mooncake's
    own format (it carries pins, the checksum and the creation time,
    PROTOCOL.md "Persistence"), not RDB. DUMP of a missing key, RESTORE of
    garbage and their wrong arities are sent.
  - WRONGTYPE: both servers hold strings only (TYPE is string or none);
    mooncake's WRONGTYPE paths (store objects) have no Redis counterpart.
  - DEBUG: not allowed by redis-server's default (enable-debug-command).
  - CLIENT REPLY: OFF/SKIP suppress replies, so the mirrored reading would
    wait; CLIENT NO-TOUCH and CLIENT SETINFO: Redis 7.2, redis-server here is
    7.0; lists, hashes, sets and the other non-string types: outside this
    server's command set (PROTOCOL.md lists what it serves).
  - MONITOR, SHUTDOWN, MIGRATE, cluster and the store commands: not part of
    Redis's string/keyspace surface or not comparable.
Both servers are started with `databases 1` semantics (redis-server
--databases 1; mooncake has one database, PROTOCOL.md "Choices") and
proto-max-bulk-len 1mb, so SETRANGE/SETBIT offsets past the limit are cheap
to probe on both; mooncake's max-key-size (4096) is not reached by the keys
used here.

Keys include the empty key and one holding CR LF; the generator sends wrong
arities, odd-case names and options, duplicated options and several pairs.

Usage:  redis_diff.py [--seed N | --seeds 1,2,3 | --seed-range 1:100] [--count N]
                      [--acl-seeds 1,2 [--acl-count N]]
                      [--resp 2|3|both] [--show-info] [--stats]
--acl-seeds runs the ACL sequence too ("the ACL mode" below says what it
sends and leaves out); its lines read "[ok] acl seed 1 resp2: ...".
One line per seed and protocol: "[ok] seed 7 resp2: 2000 commands" or
"[err] seed 7 resp2: N differences" followed by the differences (the command
index, the command, both replies, and the commands before it on the same
key space). Exit status 0 when no seed differed, 1 otherwise, 2 when a server
could not start; "[skip] ..." and status 0 when redis-server is absent.
"""
import argparse
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from conftest import free_port  # noqa: E402  (the tests' own)
MOONCAKE = os.environ.get("MC_SERVER_BINARY", os.path.join(ROOT, "src", "mooncake-server"))
REDIS = os.environ.get("REDIS_SERVER_BINARY", shutil.which("redis-server") or "/usr/bin/redis-server")
CHECK_EVERY = 64


# ---------------------------------------------------------------- RESP client

class Reply:
    """A parsed reply: kind is the RESP type byte ('+', '-', ':', '$', '*',
    '%', '~', '_', '#', ',', '(', '=', '>'), val its value (bytes, int, list,
    None for a RESP2 null bulk/array)."""
    __slots__ = ("kind", "val")

    def __init__(self, kind, val):
        self.kind = kind
        self.val = val

    def __repr__(self):
        return show(self)


def show(r, limit=200):
    if r is None:
        return "(no reply)"
    k, v = r.kind, r.val
    if k in "*~>%":
        if v is None:
            return k + "nil"
        inner = ", ".join(show(x, limit) for x in v)
        return k + "[" + inner + "]"
    if k == "$" and v is None:
        return "$nil"
    if isinstance(v, bytes):
        s = repr(v[:limit])[1:]
        if len(v) > limit:
            s += "...(%d bytes)" % len(v)
        return k + s
    return k + repr(v)


def inline(args, r):
    """The inline form redis-cli and telnet send: words, double-quoted with
    escapes where needed (sdssplitargs's), sometimes single-quoted."""
    words = []
    for a in args:
        if a and all(33 <= c < 127 and c not in b'"\'' for c in a) and r.random() < 0.7:
            words.append(a)
        elif b"'" not in a and b"\\" not in a and all(32 <= c < 127 for c in a) and r.random() < 0.3:
            words.append(b"'" + a + b"'")
        else:
            out = []
            for c in a:
                if c == 0x22 or c == 0x5c:
                    out.append(b"\\" + bytes([c]))
                elif c == 10:
                    out.append(b"\\n")
                elif 32 <= c < 127:
                    out.append(bytes([c]))
                else:
                    out.append(b"\\x%02x" % c)
            words.append(b'"' + b"".join(out) + b'"')
    return r.choice([b" ", b"  ", b"\t"]).join(words) + r.choice([b"\r\n", b"\n"])


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def send(self, args):
        self.sock.sendall(encode(args))

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("connection closed")
        if self.pos:
            self.buf = self.buf[self.pos:]
            self.pos = 0
        self.buf += data

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = self.buf[self.pos:i]
                self.pos = i + 2
                return line
            self._fill()

    def _bytes(self, n):
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        data = self.buf[self.pos:self.pos + n]
        self.pos += n + 2
        return data

    def read(self):
        line = self._line()
        k, rest = chr(line[0]), line[1:]
        if k in "+-":
            return Reply(k, rest)
        if k == ":":
            return Reply(k, int(rest))
        if k in "$=":
            n = int(rest)
            if n < 0:
                return Reply(k, None)
            return Reply(k, self._bytes(n))
        if k in "*~>":
            n = int(rest)
            if n < 0:
                return Reply(k, None)
            return Reply(k, [self.read() for _ in range(n)])
        if k == "%":
            n = int(rest)
            return Reply(k, [self.read() for _ in range(2 * n)])
        if k == "|":  # an attribute: read it and return what it annotates
            for _ in range(2 * int(rest)):
                self.read()
            return self.read()
        if k == "_":
            return Reply(k, None)
        if k == "#":
            return Reply(k, rest == b"t")
        if k == ",":
            return Reply(k, rest)
        if k == "(":
            return Reply(k, int(rest))
        raise ValueError("bad reply type %r" % line[:40])

    def call(self, args):
        self.send(args)
        return self.read()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------- servers

class Server:
    def __init__(self, name, argv_fn, scratch):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=name + "-", dir=scratch)
        self.log = os.path.join(self.dir, "log")
        last = ""
        for _ in range(5):  # a port taken between free_port and bind: try another
            self.port = free_port()
            with open(self.log, "w") as lf:
                self.proc = subprocess.Popen(argv_fn(self.port, self.dir), stdout=lf,
                                             stderr=subprocess.STDOUT, cwd=self.dir)
            for _ in range(400):
                if self.proc.poll() is not None:
                    break
                try:
                    c = Conn(self.port)
                    r = c.call([b"PING"])
                    c.close()
                    if r.kind == "+":
                        return
                except OSError:
                    pass
                time.sleep(0.025)
            last = open(self.log, errors="replace").read()[-2000:]
            self.stop()
        raise RuntimeError("%s did not start:\n%s" % (name, last))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def mooncake_argv(port, d):
    return [MOONCAKE, "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", "",
            "--dir", d, "--segment-size", "64mb", "--proto-max-bulk-len", "1mb",
            "--appendonly", "no"]


def redis_argv(port, d):
    return [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--databases", "1", "--proto-max-bulk-len", "1mb",
            "--dir", d, "--protected-mode", "no", "--daemonize", "no"]


# ---------------------------------------------------------------- generator

KEYS = [b"k0", b"k1", b"k2", b"n0", b"n1", b"b:0", b"\x00bin\xff", b"a b", b"K0", b"", b"a\r\nb"]
NEWKEYS = [b"new", b"k0", b"n1"]
PATTERNS = [b"*", b"k*", b"?0", b"[kn]*", b"[^k]*", b"*0", b"b:*", b"\\*", b"a?b",
            b"nomatch", b"[a-c]*", b"*\xff", b"K*", b"[", b"k[0-1", b"\\k0"]
INTS = [b"0", b"1", b"-1", b"2", b"42", b"-7", b"100", b"9223372036854775807",
        b"-9223372036854775808", b"9223372036854775806", b"-9223372036854775807",
        b"9223372036854775808", b"-9223372036854775809", b"10000", b"9999",
        b"01", b"+1", b" 1", b"1 ", b"1e3", b"0x10", b"3.5", b"-0", b"", b"abc",
        b"12345678901234567890", b"4294967296", b"\x001"]
FLOATS = [b"1.5", b"-2.25", b"0.1", b"1e308", b"-1e308", b"inf", b"-inf", b"+inf", b"nan",
          b"5.0e3", b"1e-320", b"3", b"-0.0", b"1.7976931348623157e308", b"1e400",
          b"0x1p3", b" 1.5", b"1.5 ", b"", b"abc", b"10.50", b"17.0000000000000001"]
OFFSETS = [b"0", b"1", b"2", b"3", b"5", b"7", b"8", b"15", b"100", b"1000", b"-1", b"-2",
           b"-100", b"-1000", b"1048575", b"1048576", b"8388607", b"8388608",
           b"4294967295", b"4294967296", b"9223372036854775807", b"-9223372036854775808",
           b"abc", b"1.5", b""]
CHANNELS = [b"ch0", b"ch1", b"news.a", b"news.b", b"\x00c"]
CPATTERNS = [b"ch*", b"news.*", b"*", b"ch[0]", b"?h1"]
DAY = 86400

# CONFIG: names both servers have and default alike (redis_argv and
# mooncake_argv), and edge values per name. A valid value is sent only where
# it changes nothing the run depends on (never proto-max-bulk-len, timeout
# or notify-keyspace-events, which the run relies on). Left out, with the
# reason (PROTOCOL.md "Server", CONFIG): maxmemory-policy (two policies
# here), hz and repl-backlog-size/-ttl (ranges of their own), cluster-* and
# port (fixed at start here), memory values given as "", "mb" or past 2^63
# (Redis reads the first two as 0 and saturates overflow; refused here),
# and a value holding a zero byte (Redis reads up to it; refused here).
CONFIG_NAMES = [b"maxmemory", b"slowlog-log-slower-than", b"slowlog-max-len", b"timeout",
                b"appendfsync", b"appendonly", b"databases", b"notify-keyspace-events",
                b"latency-tracking-info-percentiles", b"acllog-max-len", b"tcp-keepalive",
                b"proto-max-bulk-len", b"client-query-buffer-limit", b"auto-aof-rewrite-percentage",
                b"client-output-buffer-limit", b"save", b"loglevel", b"latency-tracking", b"maxclients"]
CONFIG_ODD = [b"MAXMEMORY", b"Timeout", b"nosuch", b"", b"slowlog-*", b"*max-len", b"latency-track*",
              b"acllog?max-len", b"[st]imeout", b"maxmemory", b"\x00"]
_EDGE = [b"", b"abc", b"-1", b"-2", b"1.5", b"yes", b"YES", b"99999999999999999999", b"0x10", b" 1"]
_MEM_EDGE = [b"abc", b"-1", b"-5mb", b"1.5mb", b"0x10", b"1 mb", b"1mbx", b"--1"]
CONFIG_SETS = [
    (b"slowlog-log-slower-than", _EDGE + [b"10000", b"-1", b"20000"]),
    (b"slowlog-max-len", _EDGE + [b"128", b"0", b"5"]),
    (b"acllog-max-len", _EDGE + [b"128", b"0"]),
    (b"tcp-keepalive", _EDGE + [b"300", b"0"]),
    (b"auto-aof-rewrite-percentage", _EDGE + [b"100", b"0"]),
    (b"appendfsync", _EDGE + [b"everysec", b"always", b"no", b"EVERYSEC", b"bogus"]),
    (b"loglevel", _EDGE + [b"notice", b"NOTICE", b"warning", b"bogus"]),
    (b"latency-tracking", _EDGE + [b"yes", b"no", b"maybe"]),
    (b"latency-tracking-info-percentiles", _EDGE + [b"50 99 99.9", b"50 100.5", b"x 50", b"-1", b"50"]),
    (b"maxmemory", _MEM_EDGE),
    (b"client-query-buffer-limit", _MEM_EDGE + [b"1gb", b"100", b"2gb", b"1K"]),
    (b"proto-max-bulk-len", _MEM_EDGE + [b"100", b"0"]),
    (b"timeout", _EDGE[1:] + [b"0"]),
    (b"notify-keyspace-events", [b"Z", b"KEAnmZ", b"!", b"KEAnm "]),
    (b"databases", [b"1", b"2"]),
    (b"nosuch-param", [b"1"]),
]
# COMMAND INFO names: commands both have, subcommands, odd case, unknown.
COMMAND_NAMES = [b"get", b"set", b"GET", b"mset", b"del", b"copy", b"rename", b"expire", b"lcs",
                 b"bitcount", b"object", b"object|encoding", b"config|get", b"client|list", b"Config|GET",
                 b"nosuch", b"get|x", b"config|nope", b"", b"echo", b"ping", b"watch", b"scan", b"keys",
                 b"getex", b"getdel", b"setrange", b"incrbyfloat", b"subscribe", b"publish", b"exists",
                 b"touch", b"unlink", b"memory|usage", b"command|getkeys", b"dump", b"restore",
                 # the monitoring and admin commands Redis tools send (tests/unit/tooling.tcl)
                 b"swapdb", b"lastsave", b"save", b"bgsave", b"sync", b"latency|latest", b"latency|history",
                 b"latency|reset", b"latency|doctor", b"latency|histogram", b"latency|help", b"memory|stats",
                 b"memory|doctor", b"memory|purge", b"memory|malloc-stats", b"client|pause", b"client|unpause",
                 b"module|list", b"module|load", b"module|unload", b"module|help", b"client|getredir",
                 b"client|trackinginfo"]
# Not asked of COMMAND GETKEYS, with the reason (PROTOCOL.md "Server"):
# sharded Pub/Sub answers its channels (flag not_key, what cluster routing
# uses) where Redis 7.0 says "no key arguments"; MIGRATE (its "" key
# argument, same section); COMMAND itself (no nesting).
GETKEYS_APART = {b"SPUBLISH", b"SSUBSCRIBE", b"SUNSUBSCRIBE", b"COMMAND", b"MIGRATE"}


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.now = int(time.time())
        self.k = 0
        self.notify_dirty = False
        self.no_notify = False

    def key(self):
        return self.r.choice(KEYS)

    def keys(self, lo=1, hi=4):
        return [self.key() for _ in range(self.r.randint(lo, hi))]

    def value(self):
        r = self.r
        c = r.random()
        if c < 0.3:
            return r.choice(INTS)
        if c < 0.4:
            return r.choice(FLOATS)
        if c < 0.7:
            return bytes(r.choice(b"abcxyz01") for _ in range(r.randint(0, 12)))
        if c < 0.8:
            return bytes(r.randrange(256) for _ in range(r.randint(1, 16)))
        if c < 0.9:
            # around the embstr boundary (44) and a little past
            return b"v" * r.choice([20, 21, 43, 44, 45, 64, 200])
        if c < 0.94:
            return bytes(r.choice(b"\r\n\x00ab") for _ in range(r.randint(1, 8)))
        if c < 0.97:
            # bitmaps: runs of all-set and all-clear bytes (BITPOS skips
            # them a word at a time) around odd bytes
            return b"".join(bytes([r.choice([0, 255, 0x80, 0x01, 0xF0, 0x7F])]) * r.randint(1, 20)
                            for _ in range(r.randint(1, 3)))
        # large values take mooncake's pool path (>= 32 KiB) and writev GETs
        return bytes([r.randrange(97, 123)]) * r.choice([16384, 32768, 40000])

    def num(self):
        return self.r.choice(INTS)

    def rel(self):
        """A relative time, in seconds, that no earlier one equals: each
        server adds its own clock, so two equal relative times compared by
        EXPIRE GT/LT would be decided by which millisecond each server ran
        them in. Each is 1000 s past the last, and none is within 200 s of
        an absolute one (at_secs) for the first 800 s of a run."""
        self.k += 1
        c = self.r.random()
        if c < 0.8:
            return 100000 + 1000 * self.k
        if c < 0.9:
            return 10 ** 12 + 1000 * self.k
        return 4611686018427387 - 1000 * self.k  # * 1000 + now is just under LLONG_MAX / 2

    def secs(self):
        """An EX/EXPIRE argument: never a few seconds ahead (it would expire
        mid-run at a different moment on each server)."""
        if self.r.random() < 0.5:
            return str(self.rel()).encode()
        return self.r.choice([b"0", b"-1", b"-100", b"abc", b"1.5", b"", b"9223372036854775807",
                              b"-9223372036854775808", b"9223372036854775", b"9223372036854776"])

    def msecs(self):
        if self.r.random() < 0.5:
            return str(self.rel() * 1000).encode()
        return self.r.choice([b"0", b"-1", b"-5000", b"abc", b"", b"9223372036854775807",
                              b"9223372036854775000", b"-9223372036854775808"])

    def at_secs(self, past=True):
        n = self.now
        if not past:
            return self.r.choice([str(n + DAY).encode(), str(n + 2 * DAY).encode(), b"0", b"-1",
                                  b"abc", b"9223372036854775807", b"9223372036854775"])
        return self.r.choice([str(n + DAY).encode(), str(n + 2 * DAY).encode(),
                              str(n - 100).encode(), b"1", b"0", b"-1", b"abc",
                              b"9223372036854775807", b"9223372036854775", str(n).encode()[:-1]])

    def at_msecs(self, past=True):
        n = self.now * 1000
        if not past:
            return self.r.choice([str(n + DAY * 1000).encode(), str(n + 3 * DAY * 1000).encode(),
                                  b"0", b"-1", b"abc", b"9223372036854775807", b"9223372036854775000"])
        return self.r.choice([str(n + DAY * 1000).encode(), str(n + 3 * DAY * 1000).encode(),
                              str(n - 100000).encode(), b"1", b"0", b"-1", b"abc",
                              b"9223372036854775807", b"9223372036854775000"])

    def expiry_opts(self, allow_keepttl=False, allow_persist=False, past=True):
        r = self.r
        out = []
        for _ in range(r.choice([0, 1, 1, 1, 2])):
            c = r.randrange(6 + allow_keepttl + allow_persist)
            if c == 0:
                out += [r.choice([b"EX", b"ex"]), self.secs()]
            elif c == 1:
                out += [b"PX", self.msecs()]
            elif c == 2:
                out += [b"EXAT", self.at_secs(past)]
            elif c == 3:
                out += [b"PXAT", self.at_msecs(past)]
            elif c == 4:
                out += [r.choice([b"EX", b"PX"])]  # missing its number
            elif c == 5:
                out += [b"EX", self.secs(), b"EX", self.secs()] if r.random() < 0.3 else []
            elif c == 6:
                out += [b"KEEPTTL" if allow_keepttl else b"PERSIST"]
            else:
                out += [b"PERSIST"]
        return out

    def set_cmd(self):
        r = self.r
        if r.random() < 0.4:
            return [b"SET", self.key(), self.value()] + r.choice([
                [], [], [b"NX"], [b"XX"], [b"GET"], [b"EX", self.secs()], [b"PX", self.msecs()],
                [b"KEEPTTL"], [b"XX", b"GET", b"KEEPTTL"], [b"NX", b"GET"],
                [b"EXAT", str(self.now + DAY).encode()], [b"GET", b"PXAT", str(self.now * 1000 + DAY * 1000).encode()]])
        opts = []
        pool = [[b"NX"], [b"XX"], [b"GET"], [b"nx"], [b"get"]]
        for _ in range(r.choice([0, 0, 1, 1, 2, 3])):
            opts += r.choice(pool)
        # SET with an EXAT/PXAT already past: redis-server 7.0 keeps the key
        # in its table until its expire cycle takes it (DBSIZE counts it,
        # SCAN TYPE none lists it), so what it answers depends on timing
        opts += self.expiry_opts(allow_keepttl=True, past=False)
        if r.random() < 0.3:
            opts.append(b"KEEPTTL")
        if r.random() < 0.2:
            r.shuffle(opts)
        return [b"SET", self.key(), self.value()] + opts

    def expire_flags(self):
        r = self.r
        flags = []
        for _ in range(r.choice([0, 0, 1, 1, 2])):
            flags.append(r.choice([b"NX", b"XX", b"GT", b"LT", b"gt", b"BOGUS"]))
        return flags

    def lcs(self):
        r = self.r
        args = [b"LCS", self.key(), self.key()]
        for _ in range(r.choice([0, 1, 1, 2, 3])):
            c = r.randrange(6)
            if c == 0:
                args.append(b"LEN")
            elif c == 1:
                args.append(b"IDX")
            elif c == 2:
                args += [b"MINMATCHLEN", r.choice([b"0", b"1", b"2", b"3", b"-1", b"abc", b"100"])]
            elif c == 3:
                args.append(b"WITHMATCHLEN")
            elif c == 4:
                args.append(b"MINMATCHLEN")
            else:
                args.append(b"BOGUS")
        return args

    def bitcount(self):
        r = self.r
        args = [b"BITCOUNT", self.key()]
        c = r.randrange(5)
        if c >= 1:
            args += [r.choice(OFFSETS), r.choice(OFFSETS)]
        if c >= 3:
            args.append(r.choice([b"BYTE", b"BIT", b"bit", b"WORD"]))
        if c == 4 and r.random() < 0.3:
            args = args[:3]  # start without end
        return args

    def bitpos(self):
        r = self.r
        args = [b"BITPOS", self.key(), r.choice([b"0", b"1", b"1", b"0", b"2", b"-1", b"x"])]
        c = r.randrange(5)
        if c >= 1:
            args.append(r.choice(OFFSETS))
        if c >= 2:
            args.append(r.choice(OFFSETS))
        if c >= 3:
            args.append(r.choice([b"BYTE", b"BIT", b"bit", b"WORD"]))
        if c == 4 and r.random() < 0.2:
            args.append(b"extra")
        return args

    def copy(self):
        r = self.r
        args = [b"COPY", self.key(), r.choice(KEYS + NEWKEYS)]
        for _ in range(r.choice([0, 0, 1, 2])):
            c = r.randrange(4)
            if c == 0:
                args.append(b"REPLACE")
            elif c == 1:
                args += [b"DB", r.choice([b"0", b"1", b"-1", b"abc", b"16"])]
            elif c == 2:
                args.append(b"DB")
            else:
                args.append(b"BOGUS")
        return args

    def getex(self):
        return [b"GETEX", self.key()] + self.expiry_opts(allow_persist=True)

    def object_cmd(self):
        r = self.r
        sub = r.choice([b"ENCODING", b"ENCODING", b"encoding", b"REFCOUNT", b"FREQ",
                        b"IDLETIME", b"HELP", b"BOGUS"])
        if sub == b"HELP":
            return [b"OBJECT", sub] + ([b"x"] if r.random() < 0.3 else [])
        args = [b"OBJECT", sub, self.key()]
        if r.random() < 0.1:
            args = args[:2] if r.random() < 0.5 else args + [b"extra"]
        return args

    def client_cmd(self):
        r = self.r
        c = r.randrange(9)
        if c == 0:
            return [b"CLIENT", b"SETNAME", r.choice([b"worker-1", b"", b"a b", b"x\ny", b"n\x01",
                                                   b"name", b"\xff"])]
        if c == 1:
            return [b"CLIENT", b"GETNAME"]
        if c == 2:
            return [b"CLIENT", b"ID"]
        if c == 3:
            return [b"CLIENT", b"NO-EVICT", r.choice([b"ON", b"OFF", b"on", b"maybe"])]
        if c == 4:
            return [b"CLIENT", r.choice([b"INFO", b"LIST"])]
        if c == 5:
            return [b"CLIENT", b"BOGUS"]
        if c == 6:
            return r.choice([[b"CLIENT", b"SETNAME"], [b"CLIENT", b"LIST", b"TYPE", b"normal"],
                             [b"CLIENT", b"LIST", b"TYPE", b"bogus"], [b"CLIENT", b"LIST", b"ID", b"abc"],
                             [b"CLIENT", b"LIST", b"ID"], [b"CLIENT", b"LIST", b"BOGUS", b"x"],
                             [b"CLIENT", b"INFO", b"x"], [b"CLIENT"]])
        if c == 7:
            # only clients that do not exist: the mirrored ones must live
            return r.choice([[b"CLIENT", b"KILL", b"ID", b"999999"], [b"CLIENT", b"KILL", b"ID", b"abc"],
                             [b"CLIENT", b"KILL", b"ADDR", b"1.2.3.4:5"], [b"CLIENT", b"KILL", b"1.2.3.4:5"],
                             [b"CLIENT", b"KILL", b"LADDR", b"1.2.3.4:5"],
                             [b"CLIENT", b"KILL", b"USER", b"nobody"], [b"CLIENT", b"KILL", b"TYPE", b"bogus"],
                             [b"CLIENT", b"KILL", b"TYPE", b"master"], [b"CLIENT", b"KILL", b"SKIPME", b"maybe"],
                             [b"CLIENT", b"KILL", b"ID", b"999999", b"SKIPME", b"no"], [b"CLIENT", b"KILL"],
                             [b"CLIENT", b"KILL", b"ID"], [b"CLIENT", b"KILL", b"BOGUS", b"1"]])
        return [b"CLIENT", b"GETNAME", b"extra"]

    def scan(self):
        r = self.r
        args = [b"SCAN", r.choice([b"0"] * 8 + [b"abc", b"-1", b"18446744073709551616"])]
        for _ in range(r.choice([0, 1, 1, 2, 3])):
            c = r.randrange(7)
            if c == 0:
                args += [b"MATCH", r.choice(PATTERNS)]
            elif c == 1:
                args += [b"COUNT", r.choice([b"1", b"2", b"3", b"10", b"1000", b"0", b"-1", b"abc"])]
            elif c == 2:
                args += [b"TYPE", r.choice([b"string", b"STRING", b"list", b"hash", b"none"])]
            elif c == 3:
                args.append(b"MATCH")
            elif c == 4:
                args += [b"count", b"5"]
            elif c == 5:
                args.append(b"BOGUS")
            else:
                args += [b"match", b"*"]
        return args

    def config_cmd(self):
        """CONFIG GET of names both servers default alike (in odd case,
        twice, as patterns), CONFIG SET of edge values: valid ones only
        where the value changes nothing the run depends on."""
        r = self.r
        c = r.randrange(10)
        if c < 4:
            names = [r.choice(CONFIG_NAMES + CONFIG_ODD) for _ in range(r.choice([1, 1, 2, 3]))]
            if r.random() < 0.2:
                names = [bytes(ch ^ 32 if 97 <= ch <= 122 and r.random() < 0.5 else ch for ch in n) for n in names]
            return [b"CONFIG", r.choice([b"GET", b"get"])] + names
        if c < 8:
            sets = CONFIG_SETS if not self.no_notify else \
                [x for x in CONFIG_SETS if x[0] != b"notify-keyspace-events"]
            name, vals = r.choice(sets)
            args = [b"CONFIG", b"SET", name, r.choice(vals)]
            # redis-server 7.0 undoes a failed CONFIG SET by setting each
            # name to its CONFIG GET string, which leaves out "n" (AKEm for
            # KEAnm): its new-key events would stop. The run sets it back
            # (Run.step) before the next command; so never where more
            # commands follow before that (no_notify: in MULTI, pipelines).
            self.notify_dirty |= name == b"notify-keyspace-events"
            if r.random() < 0.2:
                name2, vals2 = r.choice(sets)
                args += [name2, r.choice(vals2)]  # all applied or none; the same name twice
                self.notify_dirty |= name2 == b"notify-keyspace-events"
            return args
        return r.choice([[b"CONFIG"], [b"CONFIG", b"BOGUS"], [b"CONFIG", b"GET"], [b"CONFIG", b"SET"],
                         [b"CONFIG", b"SET", b"timeout"], [b"CONFIG", b"SET", b"nosuch", b"1"],
                         [b"CONFIG", b"SET", b"timeout", b"0", b"hz"], [b"CONFIG", b"RESETSTAT", b"x"],
                         [b"CONFIG", b"REWRITE", b"x"], [b"CONFIG", b"HELP", b"x"],
                         [b"CONFIG", b"SET", b"databases", b"2"], [b"CONFIG", b"SET", b"daemonize", b"yes"],
                         [b"CONFIG", b"SET", b"dir", b"/tmp"]])

    def command_cmd(self, resp):
        """COMMAND INFO (compared field by field, see cmdinfo), GETKEYS and
        GETKEYSANDFLAGS of this generator's own commands, and the error
        forms of the rest."""
        r = self.r
        c = r.randrange(10)
        if c < 3:
            return [b"COMMAND", r.choice([b"INFO", b"info"])] + \
                [r.choice(COMMAND_NAMES) for _ in range(r.choice([1, 1, 2, 3]))]
        if c < 7:
            inner = self.command(resp, 1)
            while inner[0].upper() in GETKEYS_APART:
                inner = self.command(resp, 1)
            return [b"COMMAND", r.choice([b"GETKEYS", b"GETKEYSANDFLAGS", b"getkeys"])] + inner
        return r.choice([[b"COMMAND", b"COUNT", b"x"], [b"COMMAND", b"BOGUS"], [b"COMMAND", b"GETKEYS"],
                         [b"COMMAND", b"GETKEYS", b"get"], [b"COMMAND", b"GETKEYS", b"nosuch", b"a"],
                         [b"COMMAND", b"GETKEYS", b"echo", b"a"], [b"COMMAND", b"GETKEYS", b"ping", b"a", b"b"],
                         [b"COMMAND", b"LIST", b"FILTERBY"], [b"COMMAND", b"LIST", b"FILTERBY", b"bogus", b"x"],
                         [b"COMMAND", b"LIST", b"bogus"], [b"COMMAND", b"DOCS", b"nosuch"],
                         [b"COMMAND", b"HELP", b"x"], [b"COMMAND", b"LIST", b"FILTERBY", b"MODULE", b"x"]])

    def server_cmd(self):
        """MEMORY, SLOWLOG, TIME, INFO, DUMP and RESTORE: figures by shape
        (cmd_mode), refusals and nils to the letter."""
        r = self.r
        k = self.key
        return r.choice([
            [b"MEMORY", b"USAGE", k()], [b"MEMORY", b"USAGE", k(), b"SAMPLES", r.choice(INTS)],
            [b"MEMORY", b"USAGE", k(), r.choice([b"SAMPLES", b"samples", b"bogus"])],
            [b"MEMORY", b"USAGE", k(), b"SAMPLES", b"5", b"SAMPLES", b"0"], [b"MEMORY", b"USAGE"],
            [b"MEMORY", b"BOGUS"], [b"MEMORY"], [b"MEMORY", b"HELP", b"x"],
            [b"SLOWLOG", b"GET", r.choice(INTS)], [b"SLOWLOG", b"GET"], [b"SLOWLOG", b"LEN"],
            [b"SLOWLOG", b"LEN", b"x"], [b"SLOWLOG", b"BOGUS"], [b"SLOWLOG"], [b"SLOWLOG", b"RESET", b"x"],
            [b"SLOWLOG", b"GET", b"1", b"2"],
            [b"TIME"], [b"TIME", b"x"], [b"INFO", r.choice([b"server", b"keyspace", b"nosuch", b"ALL"])],
            [b"ECHO", b"a", b"b"], [b"DUMP", b"nosuchkey"], [b"DUMP"], [b"DUMP", k(), b"x"],
            [b"RESTORE", k(), r.choice(INTS), b"garbage"] + r.choice([[], [b"REPLACE"], [b"ABSTTL"],
                                                                   [b"IDLETIME", b"x"], [b"FREQ"], [b"BOGUS"]]),
            [b"RESTORE", k(), b"0"],
        ])

    def multi_cmd(self):
        r = self.r
        return r.choice([[b"MULTI"], [b"MULTI"], [b"EXEC"], [b"EXEC"], [b"DISCARD"],
                         [b"WATCH"] + self.keys(), [b"WATCH"] + self.keys(), [b"UNWATCH"],
                         [b"EXEC", b"x"], [b"MULTI", b"x"], [b"DISCARD", b"x"], [b"WATCH"]])

    def command(self, resp=2, depth=0):
        """One command for connection A or B."""
        r = self.r
        k = self.key
        v = self.value
        table = [
            (8, lambda: self.set_cmd()),
            (6, lambda: [b"GET", k()]),
            (3, lambda: self.getex()),
            (2, lambda: [b"GETDEL", k()]),
            (2, lambda: [b"GETSET", k(), v()]),
            (2, lambda: [b"SETNX", k(), v()]),
            (2, lambda: [b"SETEX", k(), self.secs(), v()]),
            (2, lambda: [b"PSETEX", k(), self.msecs(), v()]),
            (2, lambda: [b"MSET"] + sum(([k(), v()] for _ in range(r.randint(1, 3))), [])),
            (2, lambda: [b"MSETNX"] + sum(([k(), v()] for _ in range(r.randint(1, 3))), [])),
            (2, lambda: [b"MGET"] + self.keys()),
            (3, lambda: [b"APPEND", k(), v()]),
            (2, lambda: [b"STRLEN", k()]),
            (3, lambda: [b"GETRANGE", k(), r.choice(OFFSETS), r.choice(OFFSETS)]),
            (3, lambda: [b"SETRANGE", k(), r.choice(OFFSETS), v()]),
            (3, lambda: [b"INCR", k()]),
            (3, lambda: [b"INCRBY", k(), self.num()]),
            (3, lambda: [b"INCRBYFLOAT", k(), r.choice(FLOATS + INTS)]),
            (2, lambda: [b"DECR", k()]),
            (2, lambda: [b"DECRBY", k(), self.num()]),
            (3, lambda: [b"SETBIT", k(), r.choice(OFFSETS), r.choice([b"0", b"1", b"1", b"2", b"-1", b"a"])]),
            (3, lambda: [b"GETBIT", k(), r.choice(OFFSETS)]),
            (3, lambda: self.bitcount()),
            (3, lambda: self.bitpos()),
            (1, lambda: [b"SUBSTR", k(), r.choice(OFFSETS), r.choice(OFFSETS)]),
            (2, lambda: self.lcs()),
            (3, lambda: [b"DEL"] + self.keys()),
            (1, lambda: [b"UNLINK"] + self.keys()),
            (2, lambda: [b"EXISTS"] + self.keys()),
            (1, lambda: [b"TOUCH"] + self.keys()),
            (2, lambda: [b"TYPE", k()]),
            (2, lambda: [b"RENAME", k(), r.choice(KEYS + NEWKEYS)]),
            (2, lambda: [b"RENAMENX", k(), r.choice(KEYS + NEWKEYS)]),
            (2, lambda: self.copy()),
            (3, lambda: [b"EXPIRE", k(), self.secs()] + self.expire_flags()),
            (2, lambda: [b"PEXPIRE", k(), self.msecs()] + self.expire_flags()),
            (2, lambda: [b"EXPIREAT", k(), self.at_secs()] + self.expire_flags()),
            (2, lambda: [b"PEXPIREAT", k(), self.at_msecs()] + self.expire_flags()),
            (2, lambda: [b"PERSIST", k()]),
            (3, lambda: [b"TTL", k()]),
            (2, lambda: [b"PTTL", k()]),
            (2, lambda: [b"EXPIRETIME", k()]),
            (1, lambda: [b"PEXPIRETIME", k()]),
            (2, lambda: self.object_cmd()),
            (1, lambda: [b"DBSIZE"]),
            (2, lambda: [b"KEYS", r.choice(PATTERNS)]),
            (2, lambda: self.scan()),
            (1, lambda: [b"RANDOMKEY"]),
            (5, lambda: self.multi_cmd()),
            (2, lambda: [b"PUBLISH", r.choice(CHANNELS), v()]),
            (1, lambda: [b"SPUBLISH", r.choice(CHANNELS), v()]),
            (1, lambda: [b"PUBSUB", r.choice([b"CHANNELS", b"NUMPAT", b"NUMSUB", b"SHARDCHANNELS",
                                              b"SHARDNUMSUB", b"BOGUS"])] +
                        [r.choice(PATTERNS + CHANNELS) for _ in range(r.choice([0, 0, 1, 2]))]),
            (1, lambda: self.client_cmd()),
            (2, lambda: self.config_cmd()),
            (2, lambda: self.command_cmd(resp) if depth == 0 else [b"PING"]),
            (2, lambda: self.server_cmd()),
            (1, lambda: r.choice([[b"PING"], [b"PING", v()], [b"ECHO", v()], [b"ECHO"],
                                  [b"PING", b"a", b"b"], [b"SELECT", r.choice([b"0", b"1", b"x"])],
                                  [b"HELLO", r.choice([b"4", b"x", b"-1", b"1"])],
                                  [b"HELLO", r.choice([b"2", b"3", str(resp).encode()])] + r.choice([
                                      [], [b"SETNAME", b"h"], [b"AUTH", b"default", b"pw"],
                                      [b"AUTH", b"nobody", b"pw"], [b"SETNAME"], [b"BOGUS"]]),
                                  [b"NOSUCHCMD", k()], [b"RESET"],
                                  r.choice([[b"AUTH", b"pw"], [b"AUTH", b"default", b"pw"], [b"AUTH", b"nobody", b"pw"],
                                            [b"AUTH"], [b"AUTH", b"a", b"b", b"c"]]), [b"FLUSHALL"] if r.random() < 0.1 else [b"DBSIZE", b"x"],
                                  [b"FLUSHDB", r.choice([b"SYNC", b"ASYNC", b"BOGUS"])] if r.random() < 0.1
                                  else [b"TYPE"]])),
        ]
        total = sum(w for w, _ in table)
        x = r.uniform(0, total)
        for w, f in table:
            x -= w
            if x <= 0:
                break
        args = f()
        # wrong arity now and then: drop or add an argument
        c = r.random()
        if c < 0.015 and len(args) > 1:
            args = args[:r.randint(1, len(args) - 1)]
        elif c < 0.02:
            # never a number: after a bare EX/PX it would be a TTL of a few
            # ms, expiring at a different moment on each server
            args = args + [r.choice([b"extra", b"x y", b"\x00", b"NX"])]
        # mixed-case command names
        if r.random() < 0.05:
            args[0] = bytes(ch ^ 32 if r.random() < 0.5 and 65 <= ch <= 90 else ch for ch in args[0])
        return args

    def pubsub_cmd(self):
        r = self.r
        c = r.randrange(9)
        if c == 7:
            return [b"SSUBSCRIBE"] + r.sample(CHANNELS, r.randint(1, 2))
        if c == 8:
            return [b"SUNSUBSCRIBE"] + r.sample(CHANNELS, r.randint(0, 2))
        if c == 0:
            return [b"SUBSCRIBE"] + r.sample(CHANNELS, r.randint(1, 3))
        if c == 1:
            return [b"PSUBSCRIBE"] + r.sample(CPATTERNS, r.randint(1, 2))
        if c == 2:
            return [b"UNSUBSCRIBE"] + r.sample(CHANNELS, r.randint(0, 2))
        if c == 3:
            return [b"PUNSUBSCRIBE"] + r.sample(CPATTERNS, r.randint(0, 2))
        if c == 4:
            return [b"GET", self.key()]
        if c == 5:
            return [b"PING"] + ([b"hi"] if r.random() < 0.5 else [])
        return r.choice([[b"SUBSCRIBE"], [b"PSUBSCRIBE"], [b"PUBSUB", b"NUMPAT"]])


# ---------------------------------------------------------------- comparing

class Tolerance:
    def __init__(self):
        self.window = 0.0  # the largest round trip of one mirrored command, seconds

    def ms(self):
        return int(2000 * self.window) + 50

    def secs(self):
        return int(2 * self.window) + 2


def err_word(v):
    return v.split(b" ", 1)[0]


# Error texts that differ on purpose, each listed in docs/PROTOCOL.md with its
# reason: (compiled pattern, replacement) applied to mooncake's text before
# the two are compared to the letter. Everything else counts.
ERR_NORMAL = [
    # "ACL: users and tenants": refusals name the user, as Redis 7.2 does
    (re.compile(rb"^NOPERM User .* has no permissions to run the '(.*)' command$"),
     rb"NOPERM this user has no permissions to run the '\1' command"),
    # "Keyspace notifications": class S (store events) is ours
    (re.compile(rb"^(ERR CONFIG SET failed .* Invalid event class character\. Use 'Ag\$lshzxeKEtmdn)S'\.$"),
     rb"\1'."),
    # "Checks": a key or channel refused in Redis 7.2's words
    (re.compile(rb"^NOPERM No permissions to access a key$"),
     rb"NOPERM this user has no permissions to access one of the keys used as arguments"),
    (re.compile(rb"^NOPERM No permissions to access a channel$"),
     rb"NOPERM this user has no permissions to access one of the channels used as arguments"),
]


def norm_err(v):
    for pat, to in ERR_NORMAL:
        v = pat.sub(to, v)
    return v


# "Server", CONFIG: a value with a zero byte is refused here whatever the
# parameter; redis-server reads up to the zero byte and refuses or takes
# what it read. Either refusal names the same parameter.
ZERO_BYTE = re.compile(rb"^(ERR CONFIG SET failed \(possibly related to argument '[^']*'\) - )"
                       rb"argument must not contain a zero byte$")


def same_err(a, b):
    if norm_err(a) == b:
        return True
    m = ZERO_BYTE.match(a)
    return bool(m) and b.startswith(m.group(1))


def same(a, b, info, tol, mode=None):
    """Compare two replies; returns None when they agree, else a reason.
    Error texts that differ past their first word go to info."""
    if a.kind != b.kind:
        # RESP2 null bulk and null array are both 'nil' but not the same type
        return "type %s vs %s" % (a.kind, b.kind)
    k = a.kind
    if k == "-":
        if err_word(a.val) != err_word(b.val):
            return "error word"
        if not same_err(a.val, b.val):
            # the whole text counts (clients match on it); --show-info
            # lists every pair seen, for a longer run's summary
            info.add((a.val, b.val))
            return "error text"
        return None
    if mode == "ttl" and k == ":":
        if a.val < 0 or b.val < 0:
            return None if a.val == b.val else "ttl sentinel"
        return None if abs(a.val - b.val) <= tol else "ttl beyond tolerance %d" % tol
    if mode == "shape":
        return None
    if mode == "config" and k in "*%":
        return same_config(a, b)
    if mode == "cmdinfo" and k in "*":
        return same_cmdinfo(a, b, info)
    if k in "*~>":
        if a.val is None or b.val is None:
            return None if a.val is b.val else "nil vs array"
        if len(a.val) != len(b.val):
            return "length %d vs %d" % (len(a.val), len(b.val))
        av, bv = a.val, b.val
        if k == "~" or mode == "set":
            av = sorted(av, key=lambda x: (x.kind, repr(x.val)))
            bv = sorted(bv, key=lambda x: (x.kind, repr(x.val)))
        for x, y in zip(av, bv):
            why = same(x, y, info, tol, None if mode in ("set", None) else mode)
            if why:
                return why
        return None
    if k == "%":
        for x, y in zip(a.val, b.val):
            why = same(x, y, info, tol)
            if why:
                return why
        return None if len(a.val) == len(b.val) else "map size"
    if k == ",":
        try:
            fa, fb = float(a.val), float(b.val)
        except ValueError:
            return None if a.val == b.val else "double"
        return None if fa == fb or (fa != fa and fb != fb) else "double"
    return None if a.val == b.val else "value"


# Filled by main: the parameters both servers list in CONFIG GET * with the
# same value at start (lower case); others are left out of CONFIG GET replies.
CONFIG_COMMON = set()


def same_config(a, b):
    """CONFIG GET: as maps (the order is each server's table's), restricted
    to CONFIG_COMMON; a name comes back as asked for a plain name, so it is
    compared as given."""
    def pairs(r):
        v = r.val
        return {x.val: y.val for x, y in zip(v[::2], v[1::2]) if x.val.lower() in CONFIG_COMMON}
    pa, pb = pairs(a), pairs(b)
    if pa != pb:
        return "config %r vs %r" % (sorted(pa.items()), sorted(pb.items()))
    return None


def same_cmdinfo(a, b, info):
    """COMMAND INFO: per entry, the name, arity, first/last/step and ACL
    categories to the letter; flags, tips and key specs differ on purpose
    (PROTOCOL.md "Commands": no noscript/allow_busy flags, no tips, no
    notes, MIGRATE's keyword spec), a null for an unknown name exactly."""
    if len(a.val) != len(b.val):
        return "entries %d vs %d" % (len(a.val), len(b.val))
    for x, y in zip(a.val, b.val):
        if x.kind != y.kind or x.val is None or y.val is None or x.kind not in "*":
            why = same(x, y, info, 0)
            if why:
                return why
            continue
        for i in (0, 1, 3, 4, 5):
            why = same(x.val[i], y.val[i], info, 0)
            if why:
                return "field %d: %s" % (i, why)
        why = same(x.val[6], y.val[6], info, 0, "set")
        if why:
            return "categories: " + why
    return None


def cmd_mode(args):
    name = args[0].upper()
    if name in (b"TTL", b"PTTL", b"EXPIRETIME", b"PEXPIRETIME"):
        return "ttl-ms" if name in (b"PTTL", b"PEXPIRETIME") else "ttl-s"
    if name == b"KEYS":
        return "set"
    if name == b"OBJECT" and len(args) > 1 and args[1].upper() == b"IDLETIME":
        # redis-server shares the objects of small integers between keys (a
        # read of one touches all) and ticks its LRU clock in its cron
        return "shape"
    if name == b"OBJECT" and len(args) > 1 and args[1].upper() in (b"HELP", b"REFCOUNT"):
        return "shape"
    if name == b"CLIENT" and len(args) > 1 and args[1].upper() in (b"ID", b"INFO", b"LIST"):
        return "shape"
    if name == b"SCAN":  # one page: which keys is the table's business
        return "shape"
    if name in (b"RANDOMKEY", b"HELLO", b"TIME", b"INFO"):
        return "shape"
    sub = args[1].upper() if len(args) > 1 else b""
    if sub == b"HELP":
        return "shape"  # each server's own help text
    if name == b"MEMORY" and sub == b"USAGE":
        return "shape"  # the bytes are each one's; nil and refusals still count
    if name == b"SLOWLOG" and sub in (b"GET", b"LEN"):
        return "shape"  # which commands were slow is each one's
    if name == b"CONFIG" and sub == b"GET":
        return "config"
    if name == b"COMMAND" and sub == b"INFO" and len(args) > 2:
        return "cmdinfo"
    if name == b"COMMAND" and sub in (b"", b"INFO", b"DOCS", b"COUNT", b"LIST"):
        # the whole table, counted or listed: each server's commands
        return "shape"
    if name == b"PUBSUB" and len(args) > 1 and args[1].upper() in (b"CHANNELS", b"SHARDCHANNELS"):
        return "set"
    return None


def sort_pmessages(frames):
    """One PUBLISH reaches a subscriber once per matching pattern, in the
    order of the server's pattern table (a dict in Redis): a run of
    pmessage frames is compared sorted by pattern."""
    out, run = [], []
    for f in frames + [None]:
        if f is not None and f.kind in "*>" and f.val and len(f.val) == 4 and f.val[0].val == b"pmessage":
            run.append(f)
            continue
        out += sorted(run, key=lambda x: x.val[1].val)
        run = []
        if f is not None:
            out.append(f)
    return out


# ---------------------------------------------------------------- a run

class Run:
    def __init__(self, mc, rd, seed, count, resp):
        self.seed = seed
        self.count = count
        self.resp = resp
        self.gen = Gen(seed * 2 + (resp == 3))
        self.tol = Tolerance()
        self.info = set()
        self.diffs = []
        self.history = []
        self.conns = {}
        for name in "ABCDE":
            self.conns[name] = (Conn(mc.port), Conn(rd.port))
        self.in_multi = {"A": False, "B": False}
        self.queued = {}  # connection -> the commands queued since MULTI
        self.stats = None
        self.log = None
        for conn in self.conns["A"]:
            conn.call([b"FLUSHALL"])
        if resp == 3:
            for pair in self.conns.values():
                for conn in pair:
                    conn.call([b"HELLO", b"3"])
        # E hears every keyspace event (notify-keyspace-events, set by main)
        for conn in self.conns["E"]:
            conn.call([b"PSUBSCRIBE", b"__key*__:*"])
        self.n = 0

    def close(self):
        for m, r in self.conns.values():
            m.close()
            r.close()

    def mirror(self, name, args):
        m, r = self.conns[name]
        t0 = time.monotonic()
        m.send(args)
        r.send(args)
        a = m.read()
        b = r.read()
        self.tol.window = max(self.tol.window, time.monotonic() - t0)
        return a, b

    def report(self, name, args, a, b, why):
        hist = [" ".join(show(Reply("+", x), 40)[1:] for x in h) for h in self.history[-12:]]
        self.diffs.append("  #%d %s: %s (%s)\n    mooncake: %s\n    redis:    %s\n    before: %s" % (
            self.n, name, b" ".join(x[:60] for x in args), why, show(a), show(b),
            "\n            ".join(hist)))

    def compare(self, name, args, a, b, mode=None):
        mode = mode if mode is not None else cmd_mode(args)
        if self.log:
            self.log.write("#%d %s %s\n    mc: %s\n    rd: %s\n" % (
                self.n, name, show(Reply("*", [Reply("$", x) for x in args]), 80), show(a, 80), show(b, 80)))
        if self.stats is not None:
            key = (args[0].upper().decode(errors="replace"),
                   "err" if b.kind == "-" else "nil" if b.val is None or b.kind == "_" else "ok")
            self.stats[key] = self.stats.get(key, 0) + 1
        queued = self.queued.get(name)
        if args[0].upper() == b"EXEC" and len(args) == 1 and queued is not None \
                and a.kind == b.kind and a.kind in "*" and a.val is not None and b.val is not None \
                and len(a.val) == len(b.val) == len(queued):
            # each element as its own command's reply
            ok = True
            for q, x, y in zip(queued, a.val, b.val):
                ok = self.compare(name, [b"EXEC:"] + q, x, y, cmd_mode(q)) and ok
            return ok
        if mode in ("ttl-s", "ttl-ms"):
            tol = self.tol.secs() if mode == "ttl-s" else self.tol.ms()
            why = same(a, b, self.info, tol, "ttl")
        else:
            why = same(a, b, self.info, 0, mode)
        if why:
            self.report(name, args, a, b, why)
        return why is None

    def track_multi(self, name, args, b):
        cmd = args[0].upper()
        # redis-server's reply says where the connection now is
        if cmd == b"MULTI" and b.kind == "+":
            self.in_multi[name] = True
            self.queued[name] = []
        elif cmd in (b"EXEC", b"DISCARD", b"RESET") and (b.kind != "-" or err_word(b.val) == b"EXECABORT"):
            self.in_multi[name] = False
            self.queued.pop(name, None)
        elif self.in_multi[name] and b.kind == "+" and b.val == b"QUEUED":
            self.queued[name].append(list(args))

    def scan_all(self, name, args):
        """SCAN from cursor 0 to 0 on both; compare the sets of keys."""
        a, b = self.mirror(name, args)
        if a.kind == "-" or b.kind == "-":
            return self.compare(name, args, a, b)
        if args[1].lstrip(b"+-").lstrip(b"0") != b"":
            # from a cursor other than 0 the keys are the table's business:
            # compare the shape of the first page only
            return self.compare(name, args, a, b, "shape")
        found = []
        for srv, rep in ((0, a), (1, b)):
            conn = self.conns[name][srv]
            keys = set()
            for _ in range(10000):
                if rep.kind != "*" or len(rep.val) != 2:
                    self.report(name, args, a, b, "scan reply shape")
                    return False
                keys.update(x.val for x in rep.val[1].val)
                cursor = rep.val[0].val
                if cursor == b"0":
                    break
                rep = conn.call([args[0], cursor] + args[2:])
            found.append(keys)
        if found[0] != found[1]:
            self.report(name, args, a, b, "scan keys %r vs %r" % (sorted(found[0]), sorted(found[1])))
            return False
        return True

    def sync_c(self, args=None, name="C"):
        """Frames queued on C so far, each server's, up to a PING reply.
        A bare UNSUBSCRIBE or PUNSUBSCRIBE leaves the channels in the order
        of the server's table: their names are compared sorted, their counts
        in order."""
        self.n += 1
        token = b"sync-%d" % self.n
        out = []
        for conn in self.conns[name]:
            conn.send([b"PING", token])
            frames = []
            while True:
                f = conn.read()
                if f.kind == "$" and f.val == token:
                    break
                if f.kind in "*>" and f.val and len(f.val) == 2 and f.val[0].val == b"pong" \
                        and f.val[1].val == token:
                    break
                frames.append(f)
            if args and len(args) == 1 and args[0].upper() in (b"UNSUBSCRIBE", b"PUNSUBSCRIBE", b"SUNSUBSCRIBE"):
                confirm = [f for f in frames if f.kind in "*>" and f.val and len(f.val) == 3
                           and f.val[0].val in (b"unsubscribe", b"punsubscribe", b"sunsubscribe")]
                names = sorted((f.val[1].val or b"") for f in confirm)
                for f, name in zip(confirm, names):
                    f.val[1] = Reply("$", name)
            out.append(sort_pmessages(frames))
        a, b = Reply("*", out[0]), Reply("*", out[1])
        # frames, not the command's reply: compared exactly, whatever the
        # command's own mode (cmd_mode)
        self.compare(name, args or [b"(frames before PING)"], a, b, "exact")

    def lcs_guard(self, args):
        # LCS is O(len1 * len2) memory in both: skip pairs of large values
        # (asked of both, since a miss is a keymiss event on E)
        n1 = self.mirror("D", [b"STRLEN", args[1]])[1]
        n2 = self.mirror("D", [b"STRLEN", args[2]])[1]
        if n1.kind != ":" or n2.kind != ":":
            return True
        return n1.val * n2.val <= 4000000

    def pipeline(self, name, first):
        """Several commands in one write (the large values' direct path
        then meets the next command in the same read), the replies read
        after; some sent split at random points."""
        g = self.gen
        batch = [first]
        g.no_notify = True
        for _ in range(g.r.randint(1, 7)):
            args = g.command(self.resp)
            if args[0].upper() in (b"LCS", b"SCAN"):
                continue
            batch.append(args)
        data = b"".join(encode(a) for a in batch)
        cuts = sorted(g.r.sample(range(1, len(data)), min(3, len(data) - 1))) if g.r.random() < 0.3 else []
        t0 = time.monotonic()
        for conn in self.conns[name]:
            prev = 0
            for cut in cuts + [len(data)]:
                conn.sock.sendall(data[prev:cut])
                prev = cut
        replies = [[conn.read() for _ in batch] for conn in self.conns[name]]
        self.tol.window = max(self.tol.window, time.monotonic() - t0)
        for i, args in enumerate(batch):
            if i:
                self.history.append([name.encode() + b"|"] + args)
            self.compare(name, args, replies[0][i], replies[1][i])
            self.track_multi(name, args, replies[1][i])
        if any(a[0].upper() in (b"PUBLISH", b"SPUBLISH", b"EXEC") for a in batch):
            self.sync_c()
        self.sync_c([b"(pipeline)"], "E")

    def reply_block(self, name):
        """CLIENT REPLY OFF|SKIP|ON and a few commands, then CLIENT REPLY ON
        and a PING: what came back before the PING's reply is compared as
        one list, so a reply one server drops and the other sends shows."""
        g = self.gen
        self.n += 1
        token = b"reply-%d" % self.n
        batch = [[b"CLIENT", b"REPLY", g.r.choice([b"OFF", b"SKIP", b"ON", b"on", b"BOGUS"])]]
        g.no_notify = True
        for _ in range(g.r.randint(0, 3)):
            args = g.command(self.resp)
            # compared as they come: only replies compared by value
            if args[0].upper() in (b"LCS", b"MULTI", b"EXEC", b"DISCARD", b"RESET", b"HELLO", b"CLIENT") \
                    or cmd_mode(args) is not None:
                continue
            batch.append(args)
            if g.r.random() < 0.3:
                batch.append([b"CLIENT", b"REPLY", g.r.choice([b"SKIP", b"OFF", b"ON"])])
        batch += [[b"CLIENT", b"REPLY", b"ON"], [b"PING", token]]
        for args in batch:
            self.history.append([name.encode() + b"~"] + args)
        data = b"".join(encode(a) for a in batch)
        got = []
        for conn in self.conns[name]:
            conn.sock.sendall(data)
            frames = []
            while True:
                f = conn.read()
                if f.kind == "$" and f.val == token:
                    break
                frames.append(f)
            got.append(frames)
        self.compare(name, [b"(CLIENT REPLY block)"], Reply("*", got[0]), Reply("*", got[1]))
        self.sync_c([b"(CLIENT REPLY block)"], "E")

    def check_state(self):
        name = "D"
        a, b = self.mirror(name, [b"KEYS", b"*"])
        if not self.compare(name, [b"KEYS", b"*"], a, b, "set"):
            return
        if b.kind not in "*~" or b.val is None:
            return
        for key in sorted(x.val for x in b.val):
            for args in ([b"GET", key], [b"PTTL", key], [b"EXPIRETIME", key], [b"TYPE", key],
                         [b"OBJECT", b"ENCODING", key]):
                a, b2 = self.mirror(name, args)
                self.compare(name, args, a, b2)

    def step(self):
        g = self.gen
        r = g.r
        if g.notify_dirty:
            for conn in self.conns["D"]:
                conn.call([b"CONFIG", b"SET", b"notify-keyspace-events", b"KEAnm"])
            g.notify_dirty = False
        # a transaction may hold more commands after this one
        g.no_notify = any(self.in_multi.values())
        self.n += 1
        c = r.random()
        if c < 0.08:
            args = g.pubsub_cmd()
            self.history.append([b"C:"] + args)
            for conn in self.conns["C"]:
                conn.send(args)
            # the command's replies (one per channel for SUBSCRIBE) and what
            # came before them, compared as one list
            self.sync_c(args)
            return
        name = "A" if c < 0.75 else "B"
        if self.in_multi[name] and r.random() < 0.15:
            # end most transactions, so EXEC runs what was queued
            args = r.choice([[b"EXEC"]] * 6 + [[b"DISCARD"], [b"EXEC", b"x"]])
        else:
            args = g.command(self.resp)
        self.history.append([name.encode() + b":"] + args)
        cmd = args[0].upper()
        if cmd == b"LCS" and len(args) >= 3 and not self.lcs_guard(args):
            return
        if cmd == b"SCAN" and not self.in_multi[name]:
            self.scan_all(name, args)
            return
        if r.random() < 0.05 and not g.notify_dirty:
            self.pipeline(name, args)
            return
        if r.random() < 0.01 and not self.in_multi[name]:
            self.reply_block(name)
            return
        if r.random() < 0.04 and sum(len(a) for a in args) < 2000:
            data = inline(args, r)
            self.history.append([name.encode() + b" inline:", data])
            t0 = time.monotonic()
            for conn in self.conns[name]:
                conn.sock.sendall(data)
            a, b = (conn.read() for conn in self.conns[name])
            self.tol.window = max(self.tol.window, time.monotonic() - t0)
            self.compare(name, args, a, b)
            self.track_multi(name, args, b)
            if cmd in (b"PUBLISH", b"SPUBLISH", b"EXEC"):
                self.sync_c()
            self.sync_c(args, "E")
            return
        a, b = self.mirror(name, args)
        self.compare(name, args, a, b)
        self.track_multi(name, args, b)
        if cmd in (b"PUBLISH", b"SPUBLISH", b"EXEC"):
            self.sync_c()
        self.sync_c(args, "E")

    def go(self):
        for i in range(self.count):
            self.step()
            if (i + 1) % CHECK_EVERY == 0:
                self.check_state()
        for name in "AB":
            if self.in_multi[name]:
                a, b = self.mirror(name, [b"DISCARD"])
        self.check_state()
        self.close()


# ---------------------------------------------------------------- the ACL mode
#
# --acl-seeds runs another sequence per seed: ACL SETUSER with random rule
# lists (valid and malformed) on a few users, ACL GETUSER/LIST/USERS/DELUSER/
# WHOAMI/CAT/DRYRUN/LOG, and bursts on a fresh connection that AUTHs as one
# of the users (or fails to) and runs commands its rules allow or deny, so
# every NOPERM refusal is compared. ACL DRYRUN's reasons are plain strings:
# those are compared to the letter.
#
# Left out of it, with the reason (PROTOCOL.md "ACL: users and tenants"):
#  - selectors "(...)", clearselectors, and +cmd|firstarg rules: refused
#    here on purpose (Redis 7.0 takes them);
#  - the command part of GETUSER and ACL LIST: shown as Redis 7.2 shows the
#    rules (each rule as given), redis-server 7.0 recomputes it from the
#    bitmap; what the rules allow is compared through DRYRUN and the bursts;
#  - @store and this server's own commands; ACL CAT <category> is compared
#    on the commands both servers have (COMMAND LIST of each);
#  - as a restricted user, KEYS/SCAN/DBSIZE/RANDOMKEY/FLUSHALL/CLIENT LIST,
#    PUBSUB listings and ACL GETUSER of another user: a tenant sees only its
#    own here ("Tenancy");
#  - the user `default` is never changed (the other connections run as it);
#  - the user named "" (Redis 7.0 creates it; refused here) and ACL LOG
#    with a negative count (an empty list in Redis 7.0, an error here, as in
#    later Redis);
#  - DRYRUN's reasons are compared with "User <name> has" (Redis 7.2's
#    wording, as this server's NOPERM errors) read as 7.0's "This user has";
#  - %RW~* (allkeys here, a pattern there) and a bare "%R" (taken by Redis
#    7.0) are not sent; %R~/%W~ users are compared like any other, keyed
#    commands and DRYRUN included (both servers ask per key spec);
#  - ~* after other patterns: here it replaces them (allkeys), Redis 7.0
#    lists "~k* ~*"; GETUSER and ACL LIST are compared with that folded;
#  - ACL LOG by shape: entry count and each entry's reason, context, object
#    and username (ages, ids, client-info are each server's);
#  - ACL LOAD/SAVE (need an aclfile) and GENPASS (random).

ACL_USERS = [b"alice", b"bob", b"carol", b"o'neil"]
ACL_PASS = [b"pw1", b"pw2", b"", b"p w\x00x", b"secret"]
ACL_KEYS = [b"k0", b"k1", b"app:1", b"app:2", b"log:x", b"x"]
ACL_KEYPATS = [b"k*", b"app:*", b"log:*", b"*", b"k?", b"[ak]*", b"x", b"it's*"]
ACL_CHANS = [b"news", b"news.eu", b"ch1", b"other"]
ACL_CHANPATS = [b"news*", b"ch1", b"*", b"n?ws"]
ACL_CATS = [b"keyspace", b"read", b"write", b"string", b"pubsub", b"admin", b"fast", b"slow",
            b"dangerous", b"connection", b"transaction", b"blocking", b"all", b"hash", b"scripting"]
ACL_CMDS = [b"get", b"set", b"del", b"mget", b"mset", b"incr", b"append", b"exists", b"publish",
            b"subscribe", b"ping", b"echo", b"config", b"client", b"acl", b"keys", b"flushall",
            b"copy", b"rename", b"object", b"info", b"multi", b"exec", b"GET", b"strlen"]
ACL_SUBS = [b"config|get", b"config|set", b"client|id", b"client|setname", b"acl|whoami",
            b"acl|getuser", b"object|encoding", b"acl|cat"]


def sha(p):
    import hashlib
    return hashlib.sha256(p).hexdigest().encode()


class AclGen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def user(self, default=True):
        if default and self.r.random() < 0.1:
            return b"default"
        if self.r.random() < 0.05:
            return self.r.choice([b"nobody", b"a b"])
        return self.r.choice(ACL_USERS)

    def rule(self):
        r = self.r
        c = r.randrange(30)
        if c == 0:
            return r.choice([b"on", b"off", b"ON"])
        if c == 1:
            return b">" + r.choice(ACL_PASS)
        if c == 2:
            return b"<" + r.choice(ACL_PASS)
        if c == 3:
            return b"#" + sha(r.choice(ACL_PASS))
        if c == 4:
            return b"!" + sha(r.choice(ACL_PASS))
        if c == 5:
            return r.choice([b"nopass", b"resetpass"])
        if c in (6, 7):
            return b"~" + r.choice(ACL_KEYPATS)
        if c == 8:
            # not %RW~*: it is allkeys here, a pattern in Redis 7.0
            return r.choice([b"%R~", b"%W~", b"%RW~", b"%WR~", b"%r~"]) + r.choice(ACL_KEYPATS[:3] + ACL_KEYPATS[4:])
        if c == 9:
            return r.choice([b"allkeys", b"resetkeys"])
        if c == 10:
            return b"&" + r.choice(ACL_CHANPATS)
        if c == 11:
            return r.choice([b"allchannels", b"resetchannels"])
        if c in (12, 13, 14):
            return r.choice([b"+", b"-"]) + r.choice(ACL_CMDS)
        if c in (15, 16, 17):
            return r.choice([b"+@", b"-@"]) + r.choice(ACL_CATS)
        if c == 18:
            return r.choice([b"+", b"-"]) + r.choice(ACL_SUBS)
        if c == 19:
            return r.choice([b"allcommands", b"nocommands"])
        if c == 20:
            return b"reset"
        if c == 21:
            return r.choice([b"sanitize-payload", b"skip-sanitize-payload"])
        if c == 22:
            # malformed
            return r.choice([b"bogus", b"#abc", b"!zz", b"#" + b"G" * 64, b"#" + b"A" * 64,
                             b"+nosuchcmd", b"-nosuchcmd", b"+@nosuch", b"-@", b"+@", b"+", b"-",
                             b"%X~a", b"%~a", b"%", b"~", b"&", b"+config|nosuch",
                             b"+get|", b"+|get", b"<", b">", b"allkeys ", b""])
        if c == 23:
            return b"on"
        if c in (24, 25):
            return b">" + r.choice(ACL_PASS[:2])
        if c == 26:
            return r.choice([b"+@all", b"+@read", b"+@write"])
        return r.choice([b"~*", b"~k*", b"&*", b"+get", b"+set"])

    def setuser(self):
        r = self.r
        return [b"ACL", b"SETUSER", self.user(default=False)] + \
            [self.rule() for _ in range(r.choice([0, 1, 2, 3, 4, 5, 6, 8]))]

    def cmd_for_user(self):
        r = self.r
        k = lambda: r.choice(ACL_KEYS)
        c = r.randrange(22)
        return [
            [b"GET", k()], [b"SET", k(), b"v"], [b"SET", k(), b"v", b"GET"], [b"DEL", k(), k()],
            [b"MGET", k(), k()], [b"MSET", k(), b"1", k(), b"2"], [b"INCR", k()],
            [b"APPEND", k(), b"z"], [b"EXISTS", k()], [b"PUBLISH", r.choice(ACL_CHANS), b"m"],
            [b"PING"], [b"ECHO", b"e"], [b"CONFIG", b"GET", b"maxmemory-policy"],
            [b"CLIENT", b"GETNAME"], [b"ACL", b"WHOAMI"], [b"ACL", b"GETUSER", b"alice"],
            [b"COPY", k(), k(), b"REPLACE"], [b"RENAME", k(), k()], [b"OBJECT", b"ENCODING", k()],
            [b"STRLEN", k()], [b"GETDEL", k()], [b"NOSUCH"],
        ][c]

    def dryrun(self):
        r = self.r
        args = [b"ACL", b"DRYRUN", self.user()]
        c = r.random()
        if c < 0.7:
            return args + self.cmd_for_user()
        if c < 0.8:
            return args + [b"SUBSCRIBE"] + r.sample(ACL_CHANS, r.randint(1, 2))
        if c < 0.85:
            return args + [b"PSUBSCRIBE", r.choice(ACL_CHANPATS + ACL_CHANS)]
        return args + r.choice([[], [b"nosuchcmd"], [b"get"], [b"get", b"a", b"b"],
                                [b"config", b"nosuch"], [b"set", b"k0"]])


class AclRun(Run):
    """The ACL sequence of one seed: A (the default user) administers, and a
    fresh pair of connections per burst runs as a user."""

    def __init__(self, mc, rd, seed, count, resp, known):
        Run.__init__(self, mc, rd, seed, count, resp)
        self.gen = AclGen(seed * 2 + (resp == 3) + 7919)
        self.mc, self.rd = mc, rd
        self.known = known  # the commands both servers have (COMMAND LIST)
        for u in ACL_USERS:
            for conn in self.conns["A"]:
                conn.call([b"ACL", b"DELUSER", u])
        for conn in self.conns["A"]:
            conn.call([b"ACL", b"LOG", b"RESET"])

    def burst(self):
        g = self.gen
        r = g.r
        user = g.user()
        pw = r.choice(ACL_PASS)
        tenant = self.tenant(user)
        pair = (Conn(self.mc.port), Conn(self.rd.port))
        self.conns["U"] = pair
        try:
            if r.random() < 0.2:
                args = [b"HELLO", str(self.resp).encode(), b"AUTH", user, pw]
            else:
                if self.resp == 3:
                    for conn in pair:
                        conn.call([b"HELLO", b"3"])
                args = [b"AUTH", user, pw] if r.random() < 0.9 else [b"AUTH", pw]
            self.history.append([b"U:"] + args)
            a, b = self.mirror("U", args)
            self.compare("U", args, a, b, "shape" if args[0] == b"HELLO" and b.kind != "-" else None)
            for _ in range(r.randint(1, 5)):
                args = g.cmd_for_user()
                if tenant and args[:2] == [b"ACL", b"GETUSER"] and args[2] != user:
                    continue  # a tenant sees only its own user here
                self.history.append([b"U:"] + args)
                a, b = self.mirror("U", args)
                mode = None
                if args[0] in (b"CONFIG", b"ACL") and a.kind != "-" and b.kind != "-":
                    mode = "shape"
                self.compare("U", args, a, b, mode)
        finally:
            for conn in pair:
                conn.close()
            del self.conns["U"]

    @staticmethod
    def norm_keys(words):
        # ~* (allkeys) replaces the key patterns here; Redis 7.0 appends it
        if b"~*" in words:
            return [w for w in words if w[:1] not in (b"~", b"%") or w == b"~*"]
        return words

    def mask_rules(self, line):
        # the command part is each server's way to say the same bitmap; a
        # name or pattern holding a quote is written quoted here
        words = [w for w in line.replace(b'"', b"").split(b" ") if w[:1] not in (b"+", b"-")]
        return b" ".join(self.norm_keys(words))

    def tenant(self, user):
        """Whether the user is restricted by key patterns (no ~*): a tenant,
        which sees only its own user in ACL GETUSER here."""
        rep = self.conns["D"][1].call([b"ACL", b"GETUSER", user])
        if rep.kind not in "*%" or not rep.val:
            return False
        f = {x.val: y for x, y in zip(rep.val[::2], rep.val[1::2])}
        return b"~*" not in (f.get(b"keys", Reply("$", b"")).val or b"").split(b" ")

    @staticmethod
    def dryrun_text(r):
        # Redis 7.2's wording, "User alice has no permissions ...", where 7.0
        # says "This user has ..."
        if r.kind in "$+" and r.val and r.val.startswith(b"User "):
            i = r.val.find(b" has no permissions ")
            if i > 0:
                return Reply(r.kind, b"This user" + r.val[i:])
        return r

    def compare_getuser(self, args, a, b):
        if a.kind != b.kind or a.kind not in "*%" or a.val is None or b.val is None:
            return self.compare("A", args, a, b)
        fa = {x.val: y for x, y in zip(a.val[::2], a.val[1::2])}
        fb = {x.val: y for x, y in zip(b.val[::2], b.val[1::2])}
        fb.pop(b"selectors", None)
        fa.pop(b"selectors", None)
        if sorted(fa) != sorted(fb):
            self.report("A", args, a, b, "fields %r vs %r" % (sorted(fa), sorted(fb)))
            return
        for k in (fa, fb):
            if k.get(b"keys") is not None and k[b"keys"].kind == "$":
                k[b"keys"] = Reply("$", b" ".join(self.norm_keys(k[b"keys"].val.split(b" "))))
        for f in fa:
            if f == b"commands":
                continue
            why = same(fa[f], fb[f], self.info, 0, "set" if f == b"flags" else None)
            if why:
                self.report("A", args, a, b, "%s: %s" % (f.decode(), why))
                return

    def compare_cat(self, args, a, b):
        if a.kind == "-" or b.kind == "-" or a.kind != b.kind:
            return self.compare("A", args, a, b)
        sa = {x.val.lower() for x in a.val} & self.known
        sb = {x.val.lower() for x in b.val} & self.known
        if len(args) == 2:  # the categories: ours (store) is documented
            sa = {x.val for x in a.val} - {b"store"}
            sb = {x.val for x in b.val}
        if sa != sb:
            self.report("A", args, a, b, "only mooncake %r, only redis %r" % (
                sorted(sa - sb), sorted(sb - sa)))

    def compare_log(self, args, a, b):
        if a.kind == "-" or b.kind == "-" or a.kind != b.kind or args[2:3] == [b"RESET"]:
            return self.compare("A", args, a, b)
        if len(a.val) != len(b.val):
            return self.report("A", args, a, b, "entries %d vs %d" % (len(a.val), len(b.val)))
        for ea, eb in zip(a.val, b.val):
            fa = {x.val: y for x, y in zip(ea.val[::2], ea.val[1::2])}
            fb = {x.val: y for x, y in zip(eb.val[::2], eb.val[1::2])}
            for f in (b"count", b"reason", b"context", b"object", b"username"):
                if f not in fa or f not in fb or same(fa[f], fb[f], self.info, 0):
                    return self.report("A", args, a, b, "entry field %s" % f.decode())

    def step(self):
        g = self.gen
        r = g.r
        self.n += 1
        c = r.random()
        if c < 0.2:
            return self.burst()
        if c < 0.5:
            args = g.setuser()
        elif c < 0.6:
            args = g.dryrun()
        elif c < 0.68:
            args = [b"ACL", b"GETUSER", g.user()] + ([b"x"] if r.random() < 0.05 else [])
        elif c < 0.72:
            args = [b"ACL", r.choice([b"LIST", b"USERS", b"WHOAMI", b"list"])]
        elif c < 0.76:
            args = [b"ACL", b"DELUSER"] + [g.user(default=False) for _ in range(r.choice([0, 1, 1, 2]))]
        elif c < 0.84:
            args = [b"ACL", b"CAT"] + r.choice([[], [r.choice(ACL_CATS[:-2] + [b"nosuch", b"READ"])],
                                                [b"read", b"x"]])
        elif c < 0.9:
            args = [b"ACL", b"LOG"] + r.choice([[], [b"5"], [b"RESET"], [b"abc"], [b"0"], [b"1"]])
        else:
            args = r.choice([[b"ACL"], [b"ACL", b"BOGUS"], [b"ACL", b"SETUSER"],
                             [b"ACL", b"DRYRUN", b"alice"], [b"ACL", b"WHOAMI", b"x"],
                             [b"AUTH", b"default", b"x"], [b"ACL", b"USERS", b"x"]])
        self.history.append([b"A:"] + args)
        a, b = self.mirror("A", args)
        sub = args[1].upper() if len(args) > 1 else b""
        if args[0] == b"ACL" and sub == b"GETUSER":
            self.compare_getuser(args, a, b)
        elif args[0] == b"ACL" and sub == b"LIST" and a.kind == b.kind == "*":
            ma = Reply("*", [Reply("$", self.mask_rules(x.val)) for x in a.val])
            mb = Reply("*", [Reply("$", self.mask_rules(x.val)) for x in b.val])
            self.compare("A", args, ma, mb)
        elif args[0] == b"ACL" and sub == b"CAT":
            self.compare_cat(args, a, b)
        elif args[0] == b"ACL" and sub == b"DRYRUN":
            self.compare("A", args, self.dryrun_text(a), b)
        elif args[0] == b"ACL" and sub == b"LOG":
            self.compare_log(args, a, b)
        else:
            self.compare("A", args, a, b)

    def go(self):
        for _ in range(self.count):
            self.step()
        for u in ACL_USERS:
            for conn in self.conns["A"]:
                conn.call([b"ACL", b"DELUSER", u])
        self.close()


def config_common(mc, rd):
    """Parameters both servers have with the same value now (before the
    run's CONFIG SETs, which both get alike)."""
    vals = []
    for srv in (mc, rd):
        c = Conn(srv.port)
        rep = c.call([b"CONFIG", b"GET", b"*"])
        c.close()
        vals.append({x.val: y.val for x, y in zip(rep.val[::2], rep.val[1::2])})
    return {k for k in vals[0] if k in vals[1] and vals[0][k] == vals[1][k]}


def known_commands(mc, rd):
    names = []
    for srv in (mc, rd):
        c = Conn(srv.port)
        rep = c.call([b"COMMAND", b"LIST"])
        c.close()
        names.append({x.val.lower() for x in rep.val})
    return names[0] & names[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--seed", type=int, default=None, help="one seed (a longer run: --seed N --count 20000)")
    p.add_argument("--seed-range", default=None, help="first:last (inclusive)")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--acl-seeds", default="", help="seeds of the ACL sequence (see 'the ACL mode')")
    p.add_argument("--acl-count", type=int, default=300)
    p.add_argument("--resp", default="both", choices=["2", "3", "both"])
    p.add_argument("--show-info", action="store_true")
    p.add_argument("--max-diffs", type=int, default=5, help="differences shown per seed")
    p.add_argument("--stats", action="store_true", help="count the replies by command and kind")
    p.add_argument("--log", default=None, help="write every command and both replies to LOG.SEED.respN")
    opt = p.parse_args()

    if not os.access(REDIS, os.X_OK):
        print("[skip] redis-server is not installed (%s): apt-get install redis-server" % REDIS)
        return 0
    if opt.seed is not None:
        seeds = [opt.seed]
    elif opt.seed_range:
        lo, hi = opt.seed_range.split(":")
        seeds = list(range(int(lo), int(hi) + 1))
    else:
        seeds = [int(s) for s in opt.seeds.split(",") if s]
    resps = [2, 3] if opt.resp == "both" else [int(opt.resp)]

    scratch = tempfile.mkdtemp(prefix="redis-diff-")
    servers = []
    failed = 0
    info = set()
    stats = {} if opt.stats else None
    try:
        try:
            mc = Server("mooncake", mooncake_argv, scratch)
            servers.append(mc)
            rd = Server("redis", redis_argv, scratch)
            servers.append(rd)
        except RuntimeError as e:
            print("[err] %s" % e)
            return 2
        for srv in servers:
            c = Conn(srv.port)
            r = c.call([b"CONFIG", b"SET", b"notify-keyspace-events", b"KEAnm"])
            c.close()
            if r.kind != "+":
                print("[err] %s: CONFIG SET notify-keyspace-events: %s" % (srv.name, show(r)))
                return 2
        known = known_commands(mc, rd) if opt.acl_seeds else set()
        CONFIG_COMMON.update(config_common(mc, rd))
        acl_seeds = [int(s) for s in opt.acl_seeds.split(",") if s]
        for kind, seed in [("", s) for s in seeds] + [("acl ", s) for s in acl_seeds]:
            for resp in resps:
                run = None
                count = opt.acl_count if kind else opt.count
                try:
                    run = AclRun(mc, rd, seed, count, resp, known) if kind else \
                        Run(mc, rd, seed, count, resp)
                    run.stats = stats
                    if opt.log:
                        run.log = open("%s.%d.resp%d" % (opt.log, seed, resp), "w")
                    run.go()
                except (OSError, ConnectionError, ValueError) as e:
                    if run is None:
                        print("[err] %sseed %d resp%d: %s: %s" % (kind, seed, resp, type(e).__name__, e))
                    else:
                        run.diffs.append("  #%d: %s: %s\n    before: %s" % (
                            run.n, type(e).__name__, e, run.history[-5:]))
                        run.close()
                    # a server that went away ends the whole run
                    for s in servers:
                        if s.proc.poll() is not None:
                            print("[err] seed %d resp%d: %s exited:\n%s" % (
                                seed, resp, s.name, open(s.log, errors="replace").read()[-3000:]))
                            return 1
                    if run is None:
                        failed += 1
                        continue
                info |= run.info
                if run.diffs:
                    failed += 1
                    print("[err] %sseed %d resp%d: %d differences in %d commands" % (
                        kind, seed, resp, len(run.diffs), count))
                    for d in run.diffs[:opt.max_diffs]:
                        print(d)
                else:
                    print("[ok] %sseed %d resp%d: %d commands" % (kind, seed, resp, count))
                sys.stdout.flush()
        if stats:
            print("replies seen (redis-server's): command ok/nil/err")
            for cmd in sorted({k[0] for k in stats}):
                print("  %-14s %6d %6d %6d" % (cmd, stats.get((cmd, "ok"), 0), stats.get((cmd, "nil"), 0),
                                               stats.get((cmd, "err"), 0)))
        if opt.show_info and info:
            print("informational: %d error texts differ past their first word" % len(info))
            for a, b in sorted(info):
                print("  mooncake: %r\n  redis:    %r" % (a, b))
    finally:
        for s in servers:
            s.stop()
        # a sanitizer build reports at exit (leaks) or dies on the spot
        for s in servers[:1]:
            text = open(s.log, errors="replace").read()
            for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
                i = text.find(mark)
                if i >= 0:
                    print("[err] %s's log: %s" % (s.name, text[max(0, i - 200):i + 3000]))
                    failed += 1
                    break
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
