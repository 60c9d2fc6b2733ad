#!/usr/bin/env python3
"""utils/bench/bench-aof-load.py -- restart from the append-only log, beside
Redis loading an AOF of the same keys.

    utils/bench/bench-aof-load.py [--keys N] [--objects M] [--rounds K]

Fills a mooncake-server and a redis-server (7.x, appendonly yes,
aof-use-rdb-preamble no, so that both load a log of commands, not a
snapshot) with the same N small string keys (`key:<i>` = 16 bytes) through
`redis-cli --pipe`, adds M store objects (PUT.START + PUT.END of 100 bytes in
the pool) to the mooncake-server only, rewrites both logs (BGREWRITEAOF),
then restarts each K times, interleaved, and reads the load time each
prints ("DB loaded from append only file ... in X seconds" / "DB loaded
from append only file: X seconds"). Prints keys per second and the ratio
to Redis's in the same round (median and range), and each log's size.
Defaults: 10M keys, 1M objects, 3 rounds (about 4 GB of memory at the
peak; --keys 1000000 for a quick look). Needs redis-server and redis-cli;
$MOONCAKE_SERVER names the server binary (default src/mooncake-server).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchutil import free_port, resp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MC = os.environ.get('MOONCAKE_SERVER', os.path.join(ROOT, 'src', 'mooncake-server'))




def write_commands(path, keys, objects):
    with open(path, 'wb') as f:
        buf = []
        for i in range(keys):
            buf.append(resp(b'SET', b'key:%d' % i, b'v%015d' % i))
            if len(buf) == 100000:
                f.write(b''.join(buf))
                buf = []
        f.write(b''.join(buf))
    if objects:
        with open(path + '.objects', 'wb') as f:
            buf = []
            for i in range(objects):
                k = b'obj:%d' % i
                buf.append(resp(b'PUT.START', k, b'100'))
                buf.append(resp(b'PUT.END', k))
                if len(buf) >= 100000:
                    f.write(b''.join(buf))
                    buf = []
            f.write(b''.join(buf))


def cli(port, *args, stdin=None):
    return subprocess.run(['redis-cli', '-p', str(port), *args], stdin=stdin, capture_output=True, text=True,
                          check=True).stdout.strip()


def wait_up(port, proc, log):
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f'server exited:\n{open(log).read()[-2000:]}')
        try:
            if cli(port, 'PING') == 'PONG':
                return
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.1)
    sys.exit('server did not come up')


class Server:
    def __init__(self, name, cmd, log_re):
        self.name, self.cmd, self.log_re = name, cmd, re.compile(log_re)
        self.dir = tempfile.mkdtemp(prefix=f'bench-aof-{name}-')
        self.port = free_port()
        self.log = os.path.join(self.dir, 'server.log')
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.cmd(self.port, self.dir, self.log), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_up(self.port, self.proc, self.log)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                cli(self.port, 'SHUTDOWN', 'NOSAVE')
            except subprocess.CalledProcessError:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def last_load_seconds(self):
        with open(self.log) as f:
            found = self.log_re.findall(f.read())
        return float(found[-1]) if found else None

    def aof_bytes(self):
        d = os.path.join(self.dir, 'appendonlydir')
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))

    def rewrite(self):
        cli(self.port, 'BGREWRITEAOF')
        deadline = time.time() + 600
        while time.time() < deadline:
            info = cli(self.port, 'INFO', 'persistence')
            if 'aof_rewrite_in_progress:0' in info and 'aof_rewrite_scheduled:0' in info:
                return
            time.sleep(0.2)
        sys.exit(f'{self.name}: rewrite did not finish')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--keys', type=int, default=10_000_000)
    ap.add_argument('--objects', type=int, default=1_000_000)
    ap.add_argument('--rounds', type=int, default=3)
    a = ap.parse_args()
    if a.keys < 1 or a.objects < 0 or a.rounds < 1:
        sys.exit('--keys >= 1, --objects >= 0, --rounds >= 1')
    for tool in ('redis-server', 'redis-cli'):
        if shutil.which(tool) is None:
            sys.exit(f'{tool} is needed')
    pool = max(512, (a.keys * 32 + a.objects * 112) // (1 << 20) * 2)
    mc = Server('mooncake', lambda port, d, log: [
        MC, '--port', str(port), '--bind', '127.0.0.1', '--dir', d, '--logfile', log, '--appendonly', 'yes',
        '--appendfsync', 'everysec', '--segment-size', f'{pool}mb', '--save', ''],
        r'DB loaded from append only file: .* in ([0-9.]+) seconds')
    rd = Server('redis', lambda port, d, log: [
        'redis-server', '--port', str(port), '--bind', '127.0.0.1', '--dir', d, '--logfile', log, '--appendonly',
        'yes', '--appendfsync', 'everysec', '--aof-use-rdb-preamble', 'no', '--save', ''],
        r'DB loaded from append only file: ([0-9.]+) seconds')
    servers = [mc, rd]
    work = tempfile.mkdtemp(prefix='bench-aof-cmds-')
    try:
        cmds = os.path.join(work, 'cmds.resp')
        t0 = time.time()
        write_commands(cmds, a.keys, a.objects)
        print(f'# {a.keys} keys, {a.objects} store objects (mooncake only), {a.rounds} rounds; commands written in '
              f'{time.time() - t0:.1f} s', flush=True)
        for s in servers:
            s.start()
            with open(cmds, 'rb') as f:
                cli(s.port, '--pipe', stdin=f)
            if s is mc and a.objects:
                with open(cmds + '.objects', 'rb') as f:
                    cli(s.port, '--pipe', stdin=f)
            s.rewrite()
            print(f'# {s.name}: {cli(s.port, "DBSIZE")} keys, log {s.aof_bytes() / 1e6:.0f} MB', flush=True)
            s.stop()
        rows = []
        for r in range(a.rounds):
            order = servers if r % 2 == 0 else servers[::-1]
            got = {}
            for s in order:
                s.start()
                got[s.name] = s.last_load_seconds()
                s.stop()
            rows.append(got)
            mc_rate = (a.keys + a.objects) / got['mooncake']
            rd_rate = a.keys / got['redis']
            print(f'round {r + 1}: mooncake {got["mooncake"]:.2f} s ({mc_rate / 1e6:.2f} M keys/s), '
                  f'redis {got["redis"]:.2f} s ({rd_rate / 1e6:.2f} M keys/s), ratio {mc_rate / rd_rate:.2f}x',
                  flush=True)
        ratios = [((a.keys + a.objects) / g['mooncake']) / (a.keys / g['redis']) for g in rows]
        mcs = [g['mooncake'] for g in rows]
        rds = [g['redis'] for g in rows]
        print(f'median: mooncake {statistics.median(mcs):.2f} s, redis {statistics.median(rds):.2f} s; '
              f'keys/s ratio {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})')
    finally:
        for s in servers:
            s.stop()
            shutil.rmtree(s.dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
