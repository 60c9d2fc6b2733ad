#!/usr/bin/python3
"""Checks that the server and libmooncake stay in rooms of their own.

    layout_check.py [--src DIR] [--extra-lib-object FILE.lo] [--extra-server-object FILE.o]
    layout_check.py --tour README.md [ROOT]


The build says which objects make up each room (`make -C src print-layout`);
from the built objects (nm) and the sources this checks that:

  1. the server's objects are all in src/, the library's all in
     src/libmooncake/ (the leaf modules both use, MC_SHARED, are compiled
     into the library as objects of its own);
  2. no symbol the library needs is defined by the server and not by the
     library itself: libmooncake links no server object;
  3. no symbol the server needs is defined only by the library: the server
     links no library object;
  4. no server source includes a library header, and no library source
     includes a server header other than the shared leaf modules' headers.

--tour checks the map instead: the README's "A tour" section names every
folder of the checkout (and of tests/, python/, utils/), every C source of
src/ and src/libmooncake/, and every file of utils/, so that a newcomer finds
each one; a file added without a line there fails it.

Each violation is printed on a line of its own; the exit status is 1 if there
is any, 0 otherwise. --extra-*-object adds an object to a room, so that the
test suite can show that a dependency across the rooms is caught.
"""
import argparse
import os
import re
import subprocess
import sys


def layout(src):
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", src, "print-layout"], capture_output=True,
                         text=True, check=True).stdout
    rooms = {}
    for line in out.splitlines():
        name, *files = line.split()
        rooms[name] = files
    return rooms


def symbols(objects):
    """(defined, undefined) global symbol sets of the given objects."""
    defined, undefined = set(), set()
    objects = list(objects)
    if objects:
        # One nm for all of them: its start-up, not the reading, is what
        # costs (about 0.1 s an object here, 0.15 s for all at once). The
        # "file:" headers it prints between them are one word and skipped.
        out = subprocess.run(["nm", "-g", *objects], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                undefined.add(parts[1])
            elif len(parts) == 3 and parts[1] not in ("U", "w", "v"):
                defined.add(parts[2])
    return defined, undefined


def includes(path):
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(path, errors="replace").read(), re.M)


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if os.path.exists(os.path.join(root, f))]


def tour(readme, root=None):
    """The names a newcomer must find in the tour, and those it lacks."""
    root = root or os.path.dirname(os.path.abspath(readme))
    text = open(readme).read()
    m = re.search(r"^## A tour\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        return ["README has no '## A tour' section"]
    section = m.group(1)
    files = tracked(root)
    want = set()
    for f in files:
        parts = f.split("/")
        if len(parts) > 1 and not parts[0].startswith("."):
            want.add(parts[0] + "/")
        if len(parts) > 2 and parts[0] in ("tests", "python", "utils", "src"):
            want.add("/".join(parts[:2]) + "/")
        if parts[0] == "src" and f.endswith(".c") and len(parts) <= 3:
            want.add(parts[-1])
        if parts[0] == "utils" and len(parts) >= 2 and not f.endswith("/"):
            want.add(parts[-1])
    missing = []
    for name in sorted(want):
        if name.endswith("/"):
            # a folder is named by its path from the top (src/libmooncake/) or, for a top-level
            # one, by its name with the slash
            ok = re.search(r"(?<![\w.-])" + re.escape(name), section)
        else:
            ok = re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])", section)
        if not ok:
            missing.append(f"the README's tour does not name {name}")
    return missing


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--tour":
        bad = tour(*sys.argv[2:])
        for line in bad:
            print(line)
        print(f"tour: {len(bad)} missing")
        return 1 if bad else 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
    ap.add_argument("--extra-lib-object", action="append", default=[])
    ap.add_argument("--extra-server-object", action="append", default=[])
    a = ap.parse_args()
    src = os.path.normpath(a.src)
    rooms = layout(src)
    server = [os.path.join(src, o) for o in rooms["SERVER_OBJ"]] + a.extra_server_object
    lib = [os.path.join(src, o) for o in rooms["MC_OBJ"]] + a.extra_lib_object
    shared = set(rooms.get("MC_SHARED", []))
    libdir = os.path.join(src, "libmooncake")
    bad = []

    for o in rooms["SERVER_OBJ"]:
        if os.path.dirname(o):
            bad.append(f"server object outside src/: {o}")
    for o in rooms["MC_OBJ"]:
        if os.path.dirname(o) != "libmooncake":
            bad.append(f"library object outside src/libmooncake/: {o}")
    missing = [o for o in server + lib if not os.path.exists(o)]
    if missing:
        print("not built (run make -C src all): " + " ".join(missing))
        return 2

    sdef, sund = symbols(server)
    ldef, lund = symbols(lib)
    for sym in sorted((lund - ldef) & sdef):
        bad.append(f"libmooncake needs {sym}, which only the server defines")
    for sym in sorted((sund - sdef) & ldef):
        bad.append(f"the server needs {sym}, which only libmooncake defines")

    lib_headers = {f for f in os.listdir(libdir) if f.endswith(".h")}
    server_headers = {f for f in os.listdir(src) if f.endswith(".h")}
    shared_headers = {s + ".h" for s in shared}
    server_sources = [o[:-2] + ".c" for o in rooms["SERVER_OBJ"]]
    server_sources += [f for f in os.listdir(src) if f.endswith(".h") and f not in shared_headers]
    for f in sorted(server_sources):
        for h in includes(os.path.join(src, f)):
            if h in lib_headers and h not in server_headers:
                bad.append(f"src/{f} includes the library's {h}")
    for f in sorted(os.listdir(libdir)):
        if f.endswith((".c", ".h")):
            for h in includes(os.path.join(libdir, f)):
                if h in server_headers and h not in lib_headers and h not in shared_headers:
                    bad.append(f"src/libmooncake/{f} includes the server's {h}")

    for line in bad:
        print(line)
    print(f"layout: {len(server)} server objects, {len(lib)} library objects, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
