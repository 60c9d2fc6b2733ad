#!/usr/bin/python3
"""bench-idle-clients.py BINARY N -- heap per idle client (BENCHMARKS.md, issue 13).

Starts BINARY (mooncake-server or redis-server) on a port derived from the
pid, opens N connections that each send one PING, and prints the server's
heap per client (INFO used_memory_heap, or used_memory for Redis) right
after and after 3.5 s idle, and RSS per client.
"""
import socket, subprocess, sys, time, os, resource

from benchutil import usage  # noqa: E402


if any(a in ("-h", "--help") for a in sys.argv[1:]):
    usage(__doc__, 0)
try:
    binary, n = sys.argv[1:]
    n = int(n)
except ValueError:
    usage(__doc__, 2, "expects BINARY N (N a number of connections), got: " + " ".join(sys.argv[1:]))
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
port = 24000 + os.getpid() % 1000
p = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--maxclients", "12000", "--save", ""] if "redis" in binary else
                     [binary, "--port", str(port), "--bind", "127.0.0.1", "--segment-size", "64mb", "--maxclients", "12000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
def info():
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "memory"], capture_output=True, text=True).stdout
    d = dict(l.split(":", 1) for l in out.replace("\r","").split("\n") if ":" in l)
    return int(d.get("used_memory_heap", d.get("used_memory"))), int(d["used_memory_rss"])
h0, r0 = info()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"PING\r\n"); s.recv(100); socks.append(s)
h1, r1 = info()
time.sleep(3.5)
h2, r2 = info()
print(f"{os.path.basename(binary)} {n} idle clients: heap/client right after PING {(h1-h0)/n:.0f} B, after 3.5 s idle {(h2-h0)/n:.0f} B; rss/client {(r2-r0)/n:.0f} B")
for s in socks: s.close()
p.terminate(); p.wait()
