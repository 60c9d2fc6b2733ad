#!/usr/bin/python3
"""bench-sparse-cpu.py GAP_US N -- server CPU per request for one client that sends N small
SETs GAP_US microseconds apart, beside redis-server (BENCHMARKS.md, busy-poll section).
Each configuration in `confs` is started on a free port; edit the list to compare builds."""
import socket, subprocess, time, os, sys

from benchutil import free_port, usage  # noqa: E402


if any(a in ("-h", "--help") for a in sys.argv[1:]):
    usage(__doc__, 0)
def cpu(pid):
    f=open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()
    return (int(f[11])+int(f[12]))/os.sysconf("SC_CLK_TCK")
confs=[("fixed spin 50us (before)", ["src/mooncake-server","--busy-poll-us","50"]),
       ("adaptive spin 50us (now)", ["src/mooncake-server","--busy-poll-us","50"]),
       ("no spin (busy-poll-us 0)", ["src/mooncake-server","--busy-poll-us","0"]),
       ("redis 7.0", ["/usr/bin/redis-server","--save",""])]
try:
    gap_us, n = (int(a) for a in sys.argv[1:])
except ValueError:
    usage(__doc__, 2, "expects GAP_US N, two numbers, got: " + " ".join(sys.argv[1:]))
for rnd in range(2):
  for name,cmd in confs:
    p=free_port()
    args=cmd+["--port",str(p),"--bind","127.0.0.1"]+(["--segment-size","64mb"] if "redis" not in cmd[0] else [])
    proc=subprocess.Popen(args,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL); time.sleep(0.4)
    s=socket.create_connection(("127.0.0.1",p)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c0=cpu(proc.pid); t0=time.perf_counter(); lat=[]
    for i in range(n):
        a=time.perf_counter(); s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"); s.recv(64); lat.append(time.perf_counter()-a)
        if gap_us:
            until=time.perf_counter()+gap_us/1e6
            while time.perf_counter()<until: pass
    t1=time.perf_counter(); c1=cpu(proc.pid); lat.sort()
    print(f"gap {gap_us:5d} us  {name:28s} server CPU/request {(c1-c0)/n*1e6:6.1f} us  p50 RTT {lat[n//2]*1e6:6.1f} us")
    s.close(); proc.terminate(); proc.wait()
