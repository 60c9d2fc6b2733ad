#!/usr/bin/env python3
"""pty_run.py CMD [ARG...] -- run a command with its stdout and stderr on a
pseudo-terminal, as if a person watched it, and copy what it wrote to our
stdout; exit with its status.

Tools that show progress only on a terminal (mooncake-benchmark's running
counter, utils/tick.sh) are tested through this: a pipe would hide exactly
what the test wants to see. stdin is /dev/null, so nothing waits on input,
and the terminal is 200 columns wide so that no line wraps.
"""
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: pty_run.py CMD [ARG...]\n")
        return 2
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: every writer of the terminal has closed it
            break
        if not data:
            break
        out += data
    os.close(master)
    rc = proc.wait()
    sys.stdout.buffer.write(bytes(out))
    return rc


if __name__ == "__main__":
    sys.exit(main())
