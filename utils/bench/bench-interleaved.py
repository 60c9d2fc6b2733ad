#!/usr/bin/env python3
"""utils/bench/bench-interleaved.py -- servers side by side under redis-benchmark,
interleaved, with the server's own CPU per request.

    utils/bench/bench-interleaved.py ROUNDS TESTS SERVER...

TESTS is a comma-separated list of TEST:PIPELINE[:SIZE], TEST being a
redis-benchmark -t name or `setex` (SETEX key:__rand_int__ 100 xxx), e.g.
incr:16,get:16,incr:1, SIZE its -d value size in bytes (default 3; from
64 KiB on a run is 4 clients, 4000 requests over 64 keys, as
bench-vs-redis.sh's large rows, e.g. set:1:1048576); or a mooncake-benchmark test (mooncake-server only):
a store test (getrep, putpair, batchget, batchput: 64-byte reservations,
100k requests; batchget/128 sends 128 keys per batch instead of 16) or a library row (mcput, mcget, mcbput, mcbget) written
TEST/SIZE/TRANSPORT, e.g. mcput/16m/shm:1 (64 calls after 16 unmeasured: the rows measure the
steady state, past libmooncake's switch of a chunk from its file to its mapping, at most 8
copies in; bench-first-call.py measures the first calls).
Each SERVER is NAME=BINARY[,ARG...]: BINARY `redis` starts redis-server (no
persistence unless its ARGs ask, e.g. redis=redis,--appendonly,yes), anything else is a mooncake-server started with
--segment-size 512mb, a unix socket, and the ARGs, e.g.
new=src/mooncake-server off=src/mooncake-server,--prefetch-batch,0
redis=redis. An ARG bench=PATH is not passed to the server: it names the
mooncake-benchmark to drive that server with (default
src/mooncake-benchmark), so that an older build's library rows run with
the library of that build, e.g.
old=/tmp/base/mooncake-server,bench=/tmp/base/mooncake-benchmark.

Every round runs every test against every server, one at a time (the order
rotated each round), with 50 clients over 100k random keys: 1M requests
pipelined, 200k without. Server CPU per request is user+system time from
/proc/PID/stat over the run, which a shared machine disturbs less than the
throughput; client CPU per request is the benchmark process's (its
rusage), so a library row's cost on the client side shows too. Prints each run, then medians and, if a server is named redis,
each one's ratio to Redis's throughput and server CPU per request within
the same round (median and range over the rounds); without a redis server
the ratios are to the first server named.
"""
import atexit
import csv
import io
import os
import re
import shutil
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CLK = os.sysconf('SC_CLK_TCK')


MC_STORE_TESTS = ('getrep', 'putpair', 'batchget', 'batchput')
MC_LIB_TESTS = ('mcput', 'mcget', 'mcbput', 'mcbget')
MC_LIB_WARMUP = 16


def sock_path(port):
    return f'/tmp/bench-interleaved-{port}.sock'


def start(binary, args, port):
    if binary == 'redis':
        # No persistence unless the ARGs ask for it (the last of a repeated
        # option wins): redis=redis,--appendonly,yes,--appendfsync,always
        argv = ['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no'] + args
    else:
        # Absolute: the server runs in its own directory (below).
        path = os.path.abspath(binary) if os.sep in binary else binary
        argv = [path, '--port', str(port), '--segment-size', '512mb', '--unixsocket', sock_path(port)] + args
    # Each server in a directory of its own, so an append-only log lands
    # there and goes with it, never in the checkout.
    cwd = tempfile.mkdtemp(prefix='bench-interleaved-')
    atexit.register(shutil.rmtree, cwd, True)
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.1)
    sys.exit(f'{binary} did not start on port {port}')


def cpu_seconds(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_mc(proc, port, bench, test, pipeline):
    """One mooncake-benchmark row: (ops/s, server us CPU/op, client us CPU/op)."""
    name, *rest = test.split('/')
    if name in MC_STORE_TESTS:
        n = 100000
        cmd = [bench, '-p', str(port), '-c', '50', '-r', '100000', '-P', str(pipeline), '-n', str(n), '-t', name]
        if rest:
            cmd += ['--batch', rest[0]]
    else:
        size = rest[0] if rest else '1m'
        transport = rest[1] if len(rest) > 1 else 'auto'
        n = 64
        where = ['-s', sock_path(port)] if transport == 'shm' else ['-p', str(port)]
        cmd = [bench, *where, '-t', name, '-d', size, '-n', str(n), '--warmup', str(MC_LIB_WARMUP), '--transport', transport]
    c0, k0 = cpu_seconds(proc.pid), children_cpu()
    out = subprocess.run(cmd + ['-q', '--csv', '--no-progress'], capture_output=True, text=True)
    c1, k1 = cpu_seconds(proc.pid), children_cpu()
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    if out.returncode != 0 or not rows or int(rows[-1]['errors']):
        sys.exit(f'{" ".join(cmd)} failed: {out.stdout}{out.stderr}')
    ops = float(rows[-1]['ops_per_sec'])
    done = int(rows[-1]['requests']) + (MC_LIB_WARMUP if name in MC_LIB_TESTS else 0)  # the warm-up calls cost CPU too
    return ops, (c1 - c0) / done * 1e6, (k1 - k0) / done * 1e6


def run(proc, port, test, pipeline, bench=None, size=None):
    if test.split('/')[0] in MC_STORE_TESTS + MC_LIB_TESTS:
        return run_mc(proc, port, bench, test, pipeline)
    n = 1000000 if pipeline > 1 else 200000
    clients, keys = 50, 100000
    if size is not None and size >= 65536:
        n, clients, keys = 4000, 4, 64
    what = ['setex', 'key:__rand_int__', '100', 'xxx'] if test == 'setex' else ['-t', test]
    if size is not None:
        what += ['-d', str(size)]
    cmd = ['redis-benchmark', '-p', str(port), '-c', str(clients), '-r', str(keys), '-P', str(pipeline),
           '-n', str(n), '-q'] + what
    c0, k0 = cpu_seconds(proc.pid), children_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    c1, k1 = cpu_seconds(proc.pid), children_cpu()
    rps = float(re.findall(r'([\d.]+) requests per second', out.replace('\r', '\n'))[-1])
    return rps, (c1 - c0) / n * 1e6, (k1 - k0) / n * 1e6


def label(test, size):
    return test if size is None else f'{test}/{size}'


def main():
    if any(a in ('-h', '--help') for a in sys.argv[1:]):
        print(__doc__.strip())
        return
    why = next((f'unknown option {a}' for a in sys.argv[1:] if a.startswith('-')), None)
    if why:
        pass
    elif len(sys.argv) < 4:
        why = 'expects ROUNDS TESTS SERVER...'
    elif not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        why = f'ROUNDS must be a positive number, not {sys.argv[1]!r}'
    else:
        tests = []
        for t in sys.argv[2].split(','):
            f = t.split(':')
            if len(f) not in (2, 3) or not all(x.isdigit() for x in f[1:]):
                why = f'a test is TEST:PIPELINE[:SIZE], not {t!r}'
                break
            tests.append((f[0], int(f[1]), int(f[2]) if len(f) > 2 else None))
        bad = [s for s in sys.argv[3:] if '=' not in s]
        if why is None and bad:
            why = f'a server is NAME=BINARY[,ARG...], not {bad[0]!r}'
    if why:
        sys.exit(f'bench-interleaved.py: {why}\n\n{__doc__.strip()}')
    rounds = int(sys.argv[1])
    servers = {}
    port = 7700 + os.getpid() % 1000
    try:
        for spec in sys.argv[3:]:
            name, rest = spec.split('=', 1)
            binary, *args = rest.split(',')
            bench = next((a[6:] for a in args if a.startswith('bench=')), 'src/mooncake-benchmark')
            args = [a for a in args if not a.startswith('bench=')]
            servers[name] = (start(binary, args, port), port, bench)
            port += 1
        names = list(servers)
        res = {}
        for r in range(rounds):
            for test, pl, size in tests:
                for name in names[r % len(names):] + names[:r % len(names)]:
                    proc, p, bench = servers[name]
                    rps, us, cus = run(proc, p, test, pl, bench, size)
                    res.setdefault((test, pl, size, name), []).append((rps, us, cus))
                    print(f'round {r} {label(test, size)} -P {pl} {name}: {rps / 1000:.3f}k req/s, {us:.3f} us server CPU/req, '
                          f'{cus:.3f} us client CPU/req', flush=True)
        print('\nmedians (range):')
        for test, pl, size in tests:
            for name in names:
                v = res[(test, pl, size, name)]
                rps = [x[0] for x in v]
                line = (f'{label(test, size):6s} -P {pl:<3d} {name:8s} {statistics.median(rps) / 1000:8.3f}k '
                        f'({min(rps) / 1000:.3f}-{max(rps) / 1000:.3f}k) '
                        f'{statistics.median(x[1] for x in v):.3f} us server CPU/req '
                        f'{statistics.median(x[2] for x in v):.3f} us client CPU/req')
                base = 'redis' if 'redis' in servers else names[0]
                if name != base:
                    ratio = [a[0] / b[0] for a, b in zip(v, res[(test, pl, size, base)])]
                    line += f'  x {base} {statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})'
                    cpu = [a[1] / b[1] for a, b in zip(v, res[(test, pl, size, base)]) if b[1] > 0]
                    if cpu:
                        line += f', server CPU/req x {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f})'
                print(line)
    finally:
        for proc, port, _ in servers.values():
            proc.terminate()
            try:
                os.unlink(sock_path(port))
            except OSError:
                pass


if __name__ == '__main__':
    main()
