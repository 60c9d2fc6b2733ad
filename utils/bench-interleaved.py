#!/usr/bin/env python3
"""utils/bench-interleaved.py -- servers side by side under redis-benchmark,
interleaved, with the server's own CPU per request.

    utils/bench-interleaved.py ROUNDS TESTS SERVER...

TESTS is a comma-separated list of TEST:PIPELINE, TEST being a
redis-benchmark -t name or `setex` (SETEX key:__rand_int__ 100 xxx), e.g.
incr:16,get:16,incr:1. Each SERVER is NAME=BINARY[,ARG...]: BINARY `redis`
starts redis-server (no persistence), anything else is a mooncake-server
started with --segment-size 512mb and the ARGs, e.g.
new=src/mooncake-server off=src/mooncake-server,--prefetch-batch,0
redis=redis.

Every round runs every test against every server, one at a time (the order
rotated each round), with 50 clients over 100k random keys: 1M requests
pipelined, 200k without. Server CPU per request is user+system time from
/proc/PID/stat over the run, which a shared machine disturbs less than the
throughput. Prints each run, then medians and, if a server is named redis,
each one's ratio to Redis's throughput within the same round.
"""
import os
import re
import socket
import statistics
import subprocess
import sys
import time

CLK = os.sysconf('SC_CLK_TCK')


def start(binary, args, port):
    if binary == 'redis':
        argv = ['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no']
    else:
        argv = [binary, '--port', str(port), '--segment-size', '512mb'] + args
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def run(proc, port, test, pipeline):
    n = 1000000 if pipeline > 1 else 200000
    what = ['setex', 'key:__rand_int__', '100', 'xxx'] if test == 'setex' else ['-t', test]
    cmd = ['redis-benchmark', '-p', str(port), '-c', '50', '-r', '100000', '-P', str(pipeline),
           '-n', str(n), '-q'] + what
    c0 = cpu_seconds(proc.pid)
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    c1 = cpu_seconds(proc.pid)
    rps = float(re.findall(r'([\d.]+) requests per second', out.replace('\r', '\n'))[-1])
    return rps, (c1 - c0) / n * 1e6


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds = int(sys.argv[1])
    tests = [(t.split(':')[0], int(t.split(':')[1])) for t in sys.argv[2].split(',')]
    servers = {}
    port = 7700 + os.getpid() % 1000
    try:
        for spec in sys.argv[3:]:
            name, rest = spec.split('=', 1)
            binary, *args = rest.split(',')
            servers[name] = (start(binary, args, port), port)
            port += 1
        names = list(servers)
        res = {}
        for r in range(rounds):
            for test, pl in tests:
                for name in names[r % len(names):] + names[:r % len(names)]:
                    rps, us = run(*servers[name], test, pl)
                    res.setdefault((test, pl, name), []).append((rps, us))
                    print(f'round {r} {test} -P {pl} {name}: {rps / 1000:.1f}k req/s, {us:.3f} us CPU/req',
                          flush=True)
        print('\nmedians (range):')
        for test, pl in tests:
            for name in names:
                v = res[(test, pl, name)]
                rps = [x[0] for x in v]
                line = (f'{test:6s} -P {pl:<3d} {name:8s} {statistics.median(rps) / 1000:8.1f}k '
                        f'({min(rps) / 1000:.0f}-{max(rps) / 1000:.0f}k) '
                        f'{statistics.median(x[1] for x in v):.3f} us CPU/req')
                if 'redis' in servers and name != 'redis':
                    ratio = [a[0] / b[0] for a, b in zip(v, res[(test, pl, 'redis')])]
                    line += f'  x Redis {statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})'
                print(line)
    finally:
        for proc, _ in servers.values():
            proc.terminate()


if __name__ == '__main__':
    main()
