#!/usr/bin/env python3
"""unix_relay.py PATH -- copy bytes between stdin/stdout and a unix socket.

Tcl 8.6 cannot open AF_UNIX sockets, so the test client opens this script as
a command pipeline and uses it as a transparent byte pipe to the server's
unixsocket. It exits when either side reaches end of file, so the client
sees EOF exactly when the server closes the connection.
"""
import os
import selectors
import socket
import sys


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: unix_relay.py PATH\n")
        return 2
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
    except OSError as e:
        sys.stderr.write("unix_relay: connect %s: %s\n" % (sys.argv[1], e))
        return 1
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, "in")
    sel.register(s, selectors.EVENT_READ, "sock")
    while True:
        for key, _ in sel.select():
            if key.data == "in":
                data = os.read(0, 65536)
                if not data:
                    s.close()
                    return 0
                s.sendall(data)
            else:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    return 0
                view = memoryview(data)
                while view:
                    n = os.write(1, view)
                    view = view[n:]


if __name__ == "__main__":
    sys.exit(main())
