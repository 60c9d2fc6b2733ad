"""benchutil.py -- what the Python benchmark scripts share (bench-python.py,
bench-engines.py, bench-first-call.py, bench-ir.py, bench-aof-load.py): free
ports, stopping a server and a request in RESP (the tests' own,
tests/python/conftest.py), --help and misuse, the size notation of the servers' flags, CPU time of finished
children, and one measured row. Imported from the
scripts' own folder (python3 puts a script's folder first on sys.path)."""
import os
import resource
import sys

# Free ports, stopping a server and a request in RESP, as the tests do them (one copy).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "tests", "python"))
from conftest import free_port, resp, stop_process  # noqa: E402,F401

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def usage(doc, code, why=None):
    """A script's --help and misuse: doc (its docstring) on stdout and exit
    0; a bad argument: why, then doc, on stderr and exit 2."""
    if why:
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: {why}\n\n")
    (sys.stdout if code == 0 else sys.stderr).write(doc.lstrip("\n"))
    sys.exit(code)


def size_arg(n):
    """Bytes as the servers' and mooncake-benchmark's flags read them."""
    for unit, suffix in ((GiB, "gb"), (MiB, "mb"), (KiB, "kb")):
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def parse_size(s):
    """"64m", "1GiB", "4096" -> bytes."""
    s = s.strip().lower()
    for suffix, unit in (("g", GiB), ("m", MiB), ("k", KiB)):
        if s.endswith(suffix) or s.endswith(suffix + "b") or s.endswith(suffix + "ib"):
            return int(float(s.rstrip("ib").rstrip(suffix)) * unit)
    return int(s)


def fmt_size(n):
    return f"{n // GiB} GiB" if n % GiB == 0 else f"{n // MiB} MiB" if n % MiB == 0 else \
        f"{n // KiB} KiB" if n % KiB == 0 else f"{n} B"


def children_cpu():
    """CPU seconds of the children this process has waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Sample:
    """One measurement of one row: bytes moved, wall seconds, CPU seconds."""

    def __init__(self, nbytes, wall, client_cpu, server_cpu, gbps=None):
        self.nbytes, self.wall = nbytes, wall
        self.client_cpu, self.server_cpu = client_cpu, server_cpu
        self.gbps = gbps if gbps is not None else nbytes / wall / 1e9
