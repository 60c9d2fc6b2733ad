"""Fixtures for the binding's tests: servers on free ports, started and
stopped here (tests/unit/python.tcl runs this suite inside `make test`).

The binding is imported from $PYTHONPATH (build/python in a checkout); the
server binary is $MOONCAKE_SERVER or src/mooncake-server.
"""
import os
import random
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("MOONCAKE_SERVER", os.path.join(ROOT, "src", "mooncake-server"))


def child_env(**extra):
    """The environment for programs the tests start: without the sanitizer
    runtimes python.tcl preloads into python3 (the server of a sanitizer
    build links them itself; etcd, a Go program, and the shell tools must
    not get them)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    env.update(extra)
    return env


def stop_process(proc, sig=None):
    """sig (SIGTERM by default), then SIGKILL if it has not exited within 10 s."""
    if proc.poll() is None:
        if sig:
            proc.send_signal(sig)
        else:
            proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def resp(*args):
    """One request in RESP: str, int or bytes arguments (raw-socket tests)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


# Listening ports for the servers the tests start. Not the kernel's
# ephemeral range (32768-60999), where bind(0) would pick one: there every
# outgoing connection -- of this suite and of the other one CI runs beside
# it -- takes a local port, and one that held a killed node's port while the
# test restarted the node there made the restart fail to bind (the test then
# talked to nobody). Nor the Tcl suites' 21000-29999. A port is claimed by
# binding an abstract Unix socket named for it, which no other test process
# can bind while this one holds it and which the kernel frees when this one
# dies (no file left behind); the last PORT_CLAIMS claims are held, enough
# for any one test's nodes, etcd and restarts.
PORT_RANGE = (10000, 20999)
PORT_CLAIMS = 64
_claims = []
_port_rng = random.Random()


def free_port():
    lo, hi = PORT_RANGE
    for _ in range(4 * (hi - lo)):
        port = _port_rng.randint(lo, hi)
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            claim.bind(b"\0mooncake-test-port-%d" % port)
        except OSError:
            claim.close()          # another test process holds it
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            claim.close()          # in use by something else
            continue
        _claims.append(claim)
        if len(_claims) > PORT_CLAIMS:
            _claims.pop(0).close()
        return port
    raise RuntimeError(f"no free port in {lo}-{hi}")


@pytest.fixture
def refused_addr():
    """host:port where a connection is refused, whatever else runs on this
    machine: a socket bound there and never listening holds the port (no
    other process can listen on it) and the kernel answers a connect with
    RST."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield "127.0.0.1:%d" % s.getsockname()[1]


class Server:
    """A mooncake-server of its own, on a free port."""

    def __init__(self, *args, pool="256mb"):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="pytest-mc-")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        cmd = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
               "--segment-size", pool, *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=child_env())
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {open(self.log.name).read()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("server did not start")
        self.addr = f"127.0.0.1:{self.port}"

    def cli(self, *args):
        """One command through redis-cli-free RESP (tests must not need redis-cli)."""
        import redis  # python3-redis
        r = redis.Redis(port=self.port, password=self._password)
        try:
            return r.execute_command(*args)
        finally:
            r.close()

    _password = None

    def stop(self, sig=None):
        stop_process(self.proc, sig)
        self.log.close()
        subprocess.run(["rm", "-rf", self.dir], check=False)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def fresh_server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def store(server):
    import mooncake
    st = mooncake.connect(server.addr)
    st.remove_all()
    yield st
    st.close()


@pytest.fixture
def mstore(server):
    """Mooncake's drop-in class, set up as vLLM's connector does (no segment of its own)."""
    from mooncake.store import MooncakeDistributedStore
    ms = MooncakeDistributedStore()
    assert ms.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", server.addr) == 0
    ms.remove_all()
    yield ms
    ms.close()


# One line per test for tests/unit/python.tcl ("[ok] id", "[err] id: why",
# "[skip] id: why") in $MOONCAKE_PYTEST_REPORT, so `make test` counts each.
_REPORT = os.environ.get("MOONCAKE_PYTEST_REPORT")


_module_seconds = {}


def pytest_runtest_logreport(report):
    if not _REPORT:
        return
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration
    line = None
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            line = f"[ok] {report.nodeid}"
        elif report.skipped:
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            line = f"[skip] {report.nodeid}: {why.removeprefix('Skipped: ')}"
        else:
            why = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed"
            # What failed, not only where: the assertion's own message (its
            # values), so that a failure seen once in a suite's log says why.
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
            if crash:
                crash = crash.splitlines()[0][:400]
                where = why.rsplit(": ", 1)[0] if why.endswith(": " + crash.split(":")[0]) else why
                why = f"{where}: {crash}"
            line = f"[err] {report.nodeid}: {why}"
    elif report.when == "teardown" and report.failed:
        line = f"[err] {report.nodeid} (teardown): {str(report.longrepr).strip().splitlines()[-1]}"
    if line:
        with open(_REPORT, "a") as f:
            f.write(line.replace("\n", " ") + "\n")


def pytest_sessionfinish(session):
    # Where the binding's suite spends its time ("@@seconds module s"), so
    # make test's log shows which files to look at when the suite grows.
    if not _REPORT:
        return
    with open(_REPORT, "a") as f:
        for module, secs in _module_seconds.items():
            f.write(f"@@seconds {module} {secs:.1f}\n")


class LoggedServer:
    """A server with appendonly yes (and the args given), killed and
    restarted on the same port and dir."""

    def __init__(self, *args):
        self.args = args
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="pytest-reattach-")
        self.proc = None
        self.start()

    def start(self):
        log = open(os.path.join(self.dir, "server.log"), "a")
        self.proc = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--segment-size", "64mb",
             "--appendonly", "yes", *self.args],
            stdout=log, stderr=subprocess.STDOUT, env=child_env())
        log.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        stop_process(self.proc)
        subprocess.run(["rm", "-rf", self.dir], check=False)

    def log(self):
        with open(os.path.join(self.dir, "server.log")) as f:
            return f.read()

    def cli(self, *args):
        import redis
        r = redis.Redis(port=self.port)
        try:
            return r.execute_command(*args)
        finally:
            r.close()

    def info(self, field):
        import redis
        r = redis.Redis(port=self.port)
        try:
            return r.info("persistence")[field]
        finally:
            r.close()

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"
