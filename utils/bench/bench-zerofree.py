#!/usr/bin/python3
"""bench-zerofree.py -- two builds side by side on the put/get rows that pool
zeroing touches (BENCHMARKS.md, "Zeroing off the put path (issue 14)").

Usage: utils/bench/bench-zerofree.py BASE_SRC_DIR NEW_SRC_DIR [ROUNDS]
Each SRC_DIR holds a built mooncake-server and mooncake-benchmark (e.g. a
`git archive` of the base commit, built, and this tree's src). Per round and
build (the order flips every round) a fresh server with a 2 GiB pool runs:
mcput/mcget 1m and 16m over shm and tcp, putpair 4k -P 16 and
redis-benchmark set,get -d 64 -P 16. Prints medians of ops/s, GB/s, p50/p99,
and CPU-seconds per wall second of the server (all threads), of its
mc-zerofree thread and of the client (/usr/bin/time). Needs redis-cli and
redis-benchmark on PATH.
"""
import subprocess, time, os, re, sys, json, statistics, glob

from benchutil import usage  # noqa: E402


if any(a in ("-h", "--help") for a in sys.argv[1:]):
    usage(__doc__, 0)
if len(sys.argv) not in (3, 4) or not (len(sys.argv) == 3 or sys.argv[3].isdigit()):
    usage(__doc__, 2, "expects BASE_SRC_DIR NEW_SRC_DIR [ROUNDS], got: " + " ".join(sys.argv[1:]))
for d in sys.argv[1:3]:
    if not os.path.isfile(os.path.join(d, "mooncake-server")):
        usage(__doc__, 2, f"{d} holds no mooncake-server")
BIN = {"base": os.path.abspath(sys.argv[1]), "new": os.path.abspath(sys.argv[2])}
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
HZ = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    tot = 0; zf = 0
    for t in glob.glob(f"/proc/{pid}/task/*"):
        try:
            f = open(t + "/stat").read().rsplit(")", 1)[1].split()
            c = (int(f[11]) + int(f[12])) / HZ
            tot += c
            if open(t + "/comm").read().strip() == "mc-zerofree": zf += c
        except Exception: pass
    return tot, zf
TESTS = [
  ("shm mcput 1m",  ["-s", "{sock}", "-t", "mcput", "-d", "1m", "-n", "3000", "-q"]),
  ("shm mcget 1m",  ["-s", "{sock}", "-t", "mcget", "-d", "1m", "-n", "3000", "-q"]),
  ("shm mcput 16m", ["-s", "{sock}", "-t", "mcput", "-d", "16m", "-n", "400", "-q"]),
  ("shm mcget 16m", ["-s", "{sock}", "-t", "mcget", "-d", "16m", "-n", "400", "-q"]),
  ("tcp mcput 1m",  ["-p", "{port}", "--transport", "tcp", "-t", "mcput", "-d", "1m", "-n", "2000", "-q"]),
  ("tcp mcget 1m",  ["-p", "{port}", "--transport", "tcp", "-t", "mcget", "-d", "1m", "-n", "2000", "-q"]),
  ("tcp mcput 16m", ["-p", "{port}", "--transport", "tcp", "-t", "mcput", "-d", "16m", "-n", "150", "-q"]),
  ("tcp mcget 16m", ["-p", "{port}", "--transport", "tcp", "-t", "mcget", "-d", "16m", "-n", "150", "-q"]),
  ("putpair 4k P16", ["-s", "{sock}", "-t", "putpair", "-d", "4k", "-P", "16", "-n", "300000", "-q"]),
]
res = {}
def run_one(kind, rnd):
    port = 7730 + rnd * 2 + (kind == "new")
    sock = f"/tmp/zfb-{kind}.sock"
    srv = subprocess.Popen([BIN[kind] + "/mooncake-server", "--port", str(port), "--segment-size", "2gb",
                            "--unixsocket", sock, "--save", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(sock) and subprocess.run(["redis-cli", "-s", sock, "ping"], capture_output=True).stdout.strip() == b"PONG": break
        time.sleep(0.1)
    time.sleep(1.5)  # let prefault finish
    items = [(n, [BIN[kind] + "/mooncake-benchmark"] + [a.format(sock=sock, port=port) for a in args]) for n, args in TESTS]
    items.append(("redis-bench set/get 64 P16", ["redis-benchmark", "-p", str(port), "-t", "set,get", "-d", "64", "-P", "16", "-n", "400000", "-q"]))
    for name, cmd in items:
        c0, z0 = cpu(srv.pid)
        t0 = time.time()
        p = subprocess.run(["/usr/bin/time", "-f", "CLIENTCPU %U %S"] + cmd, capture_output=True, text=True)
        wall = time.time() - t0
        c1, z1 = cpu(srv.pid)
        out = p.stdout + p.stderr
        m = re.search(r"CLIENTCPU ([\d.]+) ([\d.]+)", out)
        ccpu = float(m.group(1)) + float(m.group(2))
        if name.startswith("redis"):
            for op, val in re.findall(r"^(SET|GET): ([\d.]+) requests per second", out, re.M):
                res.setdefault((f"{name} {op}", kind), []).append(dict(ops=float(val), scpu=c1 - c0, zcpu=z1 - z0, ccpu=ccpu, wall=wall))
            continue
        line = [l for l in out.splitlines() if "ops/s" in l]
        if not line:
            print("NO RESULT", kind, name, out[-500:]); continue
        l = line[-1]
        ops = float(re.search(r"([\d.]+) ops/s", l).group(1))
        gbs = re.search(r"([\d.]+) GB/s", l); gbs = float(gbs.group(1)) if gbs else 0
        p50 = float(re.search(r"p50 ([\d.]+)", l).group(1))
        p99 = float(re.search(r"p99 ([\d.]+)", l).group(1))
        res.setdefault((name, kind), []).append(dict(ops=ops, gbs=gbs, p50=p50, p99=p99, scpu=c1 - c0, zcpu=z1 - z0, ccpu=ccpu, wall=wall))
    subprocess.run(["redis-cli", "-s", sock, "shutdown", "nosave"], capture_output=True)
    srv.wait(timeout=10)
for rnd in range(ROUNDS):
    order = ["base", "new"] if rnd % 2 == 0 else ["new", "base"]
    for kind in order:
        run_one(kind, rnd)
        print("round", rnd, kind, "done", flush=True)
names = [n for n, _ in TESTS] + ["redis-bench set/get 64 P16 SET", "redis-bench set/get 64 P16 GET"]
print("%-30s %-5s %10s %8s %8s %8s %9s %9s %9s" % ("test", "build", "ops/s", "GB/s", "p50ms", "p99ms", "srvCPU/s", "zeroCPU/s", "cliCPU/s"))
for n in names:
    for kind in ["base", "new"]:
        v = res.get((n, kind), [])
        if not v: continue
        med = lambda f: statistics.median([x.get(f, 0) for x in v])
        print("%-30s %-5s %10.0f %8.2f %8.3f %8.3f %9.2f %9.2f %9.2f   rounds ops: %s" % (n, kind, med("ops"), med("gbs"), med("p50"), med("p99"),
              statistics.median([x["scpu"] / x["wall"] for x in v]), statistics.median([x["zcpu"] / x["wall"] for x in v]),
              statistics.median([x["ccpu"] / x["wall"] for x in v]), " ".join("%.0f" % x["ops"] for x in v)))
