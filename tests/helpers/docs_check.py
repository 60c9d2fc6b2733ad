#!/usr/bin/python3
"""docs_check.py -- run every code block of README.md and docs/*.md as written.

Used by tests/unit/docs.tcl, which starts nothing itself: this script starts
the servers it needs (mooncake-server on free 127.0.0.1 ports, in a scratch
directory that it removes) and prints one line per block:

    [ok] README.md:73 c            [err] FILE:LINE KIND: why        [skip] FILE:LINE: why

A block's kind comes from its fence (```c, ```sh, ```redis-session, ```text)
or, for an indented block, is `sh`. A comment right above a block may say
otherwise: <!-- docs-test: server --> (starts a server in the foreground:
run it in the background, check it answers, stop it; `make run` runs from
the checkout with ARGS for this run's port and socket), <!-- docs-test:
c-api --> (a C API listing: every mc_ function it names is declared in
src/libmooncake/mooncake.h, each prototype with the header's types) or
<!-- docs-test: skip because ... --> (printed as a skip with the reason).
A fenced block with no language is an error: every block says what it is.

What runs, against a fresh server per block:
  sh             each line, with bash -e, in a scratch directory where src/,
                 utils/ and mooncake.conf are links into the checkout; the
                 server's address is substituted (port 6379 and
                 /tmp/mooncake.sock -> this run's), nothing else.
  c              compiled against src/libmooncake/mooncake.h and libmooncake.a, then
                 run with /tmp/mooncake.sock pointing at this run's server.
  redis-session  a redis-cli transcript: every "127.0.0.1:6379> command" is
                 sent on ONE connection (redis-cli --no-raw) and its reply must
                 read exactly as the lines under it.
  text           a syntax reference: each command it names must exist (COMMAND
                 INFO), so a renamed or removed command cannot stay documented.
  python         run by /usr/bin/python3 with build/python (the binding make
                 builds) on its path, the server's address substituted; a
                 sanitizer build preloads the runtimes the extension needs.

Then two checks of the references as a whole, each one more line:
  mooncake.conf  names every directive CONFIG GET '*' lists, and nothing
                 else, each at the value a server started with no config
                 file has (but unixsocket and unixsocketperm, which it turns
                 on, as its header says).
  identifiers    every mc_* function and MC_* name README.md and
                 docs/PROTOCOL.md write is declared in mooncake.h, or is an
                 environment variable the code reads (a quoted string in it).
  commands       every command COMMAND LIST names is in docs/PROTOCOL.md,
                 and every subcommand (but HELP) in a paragraph that names
                 its command too: a command added to src/commands.c cannot
                 go undocumented.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("MC_SERVER_BINARY", os.path.join(ROOT, "src", "mooncake-server"))
PROMPT = "127.0.0.1:6379> "


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A mooncake-server from mooncake.conf on a free port and its own socket."""

    def __init__(self, scratch, extra=()):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="srv-", dir=scratch)
        self.sock = os.path.join(self.dir, "mooncake.sock")
        self.log = os.path.join(self.dir, "log")
        args = [SERVER, os.path.join(ROOT, "mooncake.conf"), "--port", str(self.port), "--bind", "127.0.0.1",
                "--unixsocket", self.sock, "--dir", self.dir, "--segment-size", "256mb", *extra]
        self.proc = subprocess.Popen(args, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        for _ in range(200):
            if self.ping():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("server did not start: " + open(self.log).read()[-2000:])

    def ping(self):
        r = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return r.stdout.strip() == "PONG"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def blocks(path):
    """(line, kind, mode, text) for each code block of a markdown file."""
    lines = open(path).read().split("\n")
    out, i, mode = [], 0, None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"<!-- docs-test: (.*) -->\s*$", line)
        if m:
            mode = m.group(1)
            i += 1
            continue
        if line.startswith("```"):
            kind, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((start, kind or "(none)", mode, "\n".join(body)))
            mode = None
        elif line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            start, body = i + 1, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                if lines[i].strip():
                    body.append(lines[i][4:])
                elif i + 1 < len(lines) and not lines[i + 1].startswith("    "):
                    break
                i += 1
            out.append((start, "sh", mode, "\n".join(body)))
            mode = None
            continue
        elif line.strip():
            mode = None
        i += 1
    return out


def substitute(text, srv):
    text = text.replace("/tmp/mooncake.sock", srv.sock)  # tmpfiles: not a file, the path the docs show
    return re.sub(r"(-p |--port |:)6379\b", lambda m: m.group(1) + str(srv.port), text)


def scratch_dir(scratch):
    d = tempfile.mkdtemp(prefix="run-", dir=scratch)
    for name in ("src", "utils", "mooncake.conf", "build"):
        os.symlink(os.path.join(ROOT, name), os.path.join(d, name))
    return d


def run_sh(text, srv, scratch):
    d = scratch_dir(scratch)
    script = "set -e\n" + substitute(text, srv)
    r = subprocess.run(["bash", "-c", script], cwd=d, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}"
    return None


def run_server_block(text, scratch):
    """A server command line: run it with a free port and a scratch socket."""
    port, d = free_port(), scratch_dir(scratch)
    sock = os.path.join(d, "s.sock")
    cmd = text.strip()
    if cmd == "make run":  # from the checkout, on this run's port and socket, and a fresh copy of
        # mooncake.conf in the scratch directory: never build/mooncake.conf, which the user's
        # CONFIG REWRITEs may have changed
        conf = os.path.join(d, "mooncake.conf")
        cmd, d = (f'make -s run RUN_CONF={conf} '
                  f'ARGS="--port {port} --unixsocket {sock} --segment-size 256mb"'), ROOT
    cmd = re.sub(r"--port \d+", f"--port {port}", cmd)
    cmd = re.sub(r"--unixsocket \S+", f"--unixsocket {sock}", cmd)
    if "--port" not in cmd:
        cmd += f" --port {port}"
    if "--unixsocket" not in cmd:
        cmd += f" --unixsocket {sock}"
    proc = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
            if r.stdout.strip() == "PONG":
                return None
            if proc.poll() is not None:
                return "exited: " + proc.stdout.read().decode(errors="replace")[-600:]
            time.sleep(0.05)
        return "did not answer PING"
    finally:
        proc.terminate()
        proc.wait(10)


def run_c(text, srv, scratch):
    d = scratch_dir(scratch)
    src = os.path.join(d, "example.c")
    open(src, "w").write(substitute(text, srv))
    exe = os.path.join(d, "example")
    libs = ["-ldl"]  # libibverbs is loaded with dlopen, not linked
    cmd = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "src", "libmooncake"), src,
           os.path.join(ROOT, "src", "libmooncake", "libmooncake.a"), "-lnuma", "-pthread", "-ldl", *libs]
    sanitize = os.environ.get("SANITIZER")
    if sanitize == "address":
        cmd += ["-fsanitize=address,undefined"]
    r = subprocess.run(cmd + ["-o", exe], capture_output=True, text=True)
    if r.returncode != 0:
        return "does not compile: " + r.stderr.strip()[-800:]
    r = subprocess.run([exe], cwd=d, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}"
    return None


def run_python(text, srv, scratch):
    d = scratch_dir(scratch)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), PYTHONDONTWRITEBYTECODE="1")
    if os.environ.get("SANITIZER"):
        libs = [subprocess.run(["gcc", f"-print-file-name={n}"], capture_output=True, text=True).stdout.strip()
                for n in ("libasan.so", "libubsan.so")]
        env["LD_PRELOAD"] = ":".join(x for x in libs if os.path.isabs(x))
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    r = subprocess.run(["/usr/bin/python3", "-c", substitute(text, srv)], cwd=d, env=env, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        return f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-800:]}"
    return None


def run_c_api(text, scratch):
    """An API listing: every mc_ function it declares is in mooncake.h, with
    the same signature (each prototype is compiled after the header: C refuses
    a redeclaration whose types differ)."""
    header = open(os.path.join(ROOT, "src", "libmooncake", "mooncake.h")).read()
    missing = [n for n in sorted(set(re.findall(r"\b(mc_\w+)\(", text))) if not re.search(rf"\b{n}\(", header)]
    if missing:
        return "not in src/libmooncake/mooncake.h: " + ", ".join(missing)
    protos, cur = [], ""
    for line in re.sub(r"/\*.*?\*/", "", text, flags=re.S).split("\n"):
        if not cur and line.startswith(("typedef", "enum", "#")):
            continue  # the listing's types are abridged (the header's have more fields)
        cur += " " + line.strip()
        if cur.rstrip().endswith(";"):
            if "(" in cur:
                protos.append(cur.strip())
            cur = ""
    src = os.path.join(tempfile.mkdtemp(prefix="capi-", dir=scratch), "listing.c")
    open(src, "w").write("#include <mooncake.h>\n" + "\n".join(protos) + "\n")
    r = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I",
                        os.path.join(ROOT, "src", "libmooncake"), src], capture_output=True, text=True)
    if r.returncode != 0:
        return "a prototype differs from src/libmooncake/mooncake.h: " + r.stderr.strip()[-800:]
    return None if protos else "no prototype found"


def run_session(text, srv):
    cmds, expected = [], []
    for line in text.split("\n"):
        if line.startswith(PROMPT):
            cmds.append(line[len(PROMPT):])
            expected.append([])
        elif cmds:
            expected[-1].append(line)
        elif line.strip():
            return f"text before the first prompt: {line!r}"
    marker = "docs-check-marker"
    stdin = "".join(f"{c}\nECHO {marker}\n" for c in cmds)
    r = subprocess.run(["redis-cli", "-p", str(srv.port), "--no-raw"], input=stdin, capture_output=True, text=True,
                       timeout=60)
    got = r.stdout.split(f'"{marker}"\n')
    for i, c in enumerate(cmds):
        want = "\n".join(expected[i]).rstrip("\n")
        have = got[i].rstrip("\n") if i < len(got) else "(no reply)"
        if want != have:
            return f"{PROMPT}{c}\n    shown:\n{want}\n    got:\n{have}"
    return None


def run_text(text, srv):
    names = set()
    for line in text.split("\n"):
        if line.startswith(PROMPT):
            line = line[len(PROMPT):]
        m = re.match(r"([A-Z][A-Z0-9.\-]+)(?=\s|$)", line)
        if m:
            names.add(m.group(1))
    missing = []
    for name in sorted(names):
        r = subprocess.run(["redis-cli", "-p", str(srv.port), "COMMAND", "INFO", name], capture_output=True, text=True)
        if not r.stdout.strip():
            missing.append(name)
    return "not a command: " + ", ".join(missing) if missing else None


def config_get_all(sock):
    r = subprocess.run(["redis-cli", "-s", sock, "config", "get", "*"], capture_output=True, text=True, timeout=30)
    words = r.stdout.split("\n")
    if words and words[-1] == "":
        words.pop()
    return dict(zip(words[0::2], words[1::2]))


def check_conf(scratch):
    """mooncake.conf against the built-in defaults: two servers, the same cwd
    (dir "."), no TCP port, a small pool not pre-faulted (segment-size and
    segment-prefault are, with port and unixsocket, the directives not
    compared)."""
    d = tempfile.mkdtemp(prefix="conf-", dir=scratch)
    procs, got = [], []
    try:
        for conf in ([], [os.path.join(ROOT, "mooncake.conf")]):
            sock = os.path.join(d, f"s{len(procs)}.sock")
            args = [SERVER, *conf, "--port", "0", "--unixsocket", sock, "--segment-prefault", "no",
                    "--segment-size", "64mb"]  # a 1 GiB pool is refused where the cgroup allows less
            procs.append(subprocess.Popen(args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
            for _ in range(200):
                r = subprocess.run(["redis-cli", "-s", sock, "ping"], capture_output=True, text=True)
                if r.stdout.strip() == "PONG" or procs[-1].poll() is not None:
                    break
                time.sleep(0.05)
            got.append(config_get_all(sock))
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    bare, conf = got
    if len(bare) < 50:
        return f"CONFIG GET * of a bare server gave {len(bare)} parameters"
    names = [line.split()[0] for line in open(os.path.join(ROOT, "mooncake.conf")).read().split("\n")
             if line.strip() and not line.startswith("#")]
    errs = [f"{n}: not in mooncake.conf" for n in sorted(set(bare) - set(names))]
    errs += [f"{n}: in mooncake.conf, not a parameter" for n in sorted(set(names) - set(bare))]
    for n in sorted(set(bare) & set(conf)):
        if n not in ("port", "unixsocket", "unixsocketperm", "segment-prefault", "segment-size") and bare[n] != conf[n]:
            errs.append(f"{n}: built-in {bare[n]!r}, mooncake.conf gives {conf[n]!r}")
    return "; ".join(errs) or None


def check_identifiers():
    header = open(os.path.join(ROOT, "src", "libmooncake", "mooncake.h")).read()
    quoted = set()
    for top in ("src", "python", "tests/c", "tests/python", "utils"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h", ".py", ".sh")):
                    quoted.update(re.findall(r'["\'](MC_[A-Z0-9_]+)["\']', open(os.path.join(dirpath, f), errors="replace").read()))
    missing = set()
    for doc in ("README.md", os.path.join("docs", "PROTOCOL.md")):
        text = open(os.path.join(ROOT, doc)).read()
        for name in re.findall(r"\b(mc_[a-z0-9_]+|MC_[A-Z0-9_]+)\b(?!\.[ch]\b|_\*|\*)", text):
            if name.endswith("_") or re.search(rf"\b{name}\b", header) or name in quoted:
                continue
            missing.add(f"{name} ({doc})")
    return "neither in mooncake.h nor read by the code: " + ", ".join(sorted(missing)) if missing else None


def check_commands(srv):
    doc = open(os.path.join(ROOT, "docs", "PROTOCOL.md")).read()
    paragraphs = re.split(r"\n\s*\n", doc)
    r = subprocess.run(["redis-cli", "-p", str(srv.port), "command", "list"], capture_output=True, text=True)
    names = r.stdout.split()
    if len(names) < 100:
        return f"COMMAND LIST gave {len(names)} names"

    def word(n):  # PUT.START and SET-CONFIG-EPOCH are words; PUT is not in PUT.START
        return re.compile(r"(?<![\w.\-])" + re.escape(n.upper()) + r"(?![\w.\-])")

    missing = []
    for name in sorted(names):
        cmd, _, sub = name.partition("|")
        if not sub and not word(cmd).search(doc):
            missing.append(cmd.upper())
        elif sub and sub != "help" and not any(word(cmd).search(p) and word(sub).search(p) for p in paragraphs):
            missing.append(f"{cmd.upper()} {sub.upper()}")
    return "not in docs/PROTOCOL.md: " + ", ".join(missing) if missing else None


def main():
    files = [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    scratch = tempfile.mkdtemp(prefix="mc-docs-")
    failed = 0
    try:
        for path in files:
            rel = os.path.relpath(path, ROOT)
            for line, kind, mode, text in blocks(path):
                where = f"{rel}:{line} {kind}"
                if mode and mode.startswith("skip"):
                    print(f"[skip] {where}: {mode[4:].strip() or 'no reason given'}")
                    continue
                err = None
                srv = None
                try:
                    if mode == "server":
                        err = run_server_block(text, scratch)
                    elif mode == "c-api":
                        err = run_c_api(text, scratch)
                    elif kind in ("sh", "c", "redis-session", "text", "python"):
                        srv = Server(scratch)
                        err = {"sh": lambda: run_sh(text, srv, scratch),
                               "c": lambda: run_c(text, srv, scratch),
                               "redis-session": lambda: run_session(text, srv),
                               "text": lambda: run_text(text, srv),
                               "python": lambda: run_python(text, srv, scratch)}[kind]()
                    else:
                        err = f"unknown block kind '{kind}' (use c, sh, python, redis-session or text)"
                except Exception as e:  # a server that did not start, a timeout
                    err = f"{type(e).__name__}: {e}"
                finally:
                    if srv:
                        srv.stop()
                if err:
                    failed += 1
                    print(f"[err] {where}: " + err.replace("\n", "\n    "))
                else:
                    print(f"[ok] {where}")
        for where, check in (("mooncake.conf:1 directives", lambda: check_conf(scratch)),
                             ("docs/PROTOCOL.md:1 identifiers", check_identifiers),
                             ("docs/PROTOCOL.md:1 commands", None)):
            srv = None
            try:
                if check is None:
                    srv = Server(scratch)
                    err = check_commands(srv)
                else:
                    err = check()
            except Exception as e:
                err = f"{type(e).__name__}: {e}"
            finally:
                if srv:
                    srv.stop()
            failed += bool(err)
            print(f"[err] {where}: {err}" if err else f"[ok] {where}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
