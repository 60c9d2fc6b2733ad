/* test_cli.c -- src/mooncake-cli, run as a user runs it, against real servers.
 *
 * The tool is a shell over libmooncake, so what can go wrong is mostly in
 * the shell: argument handling, files, exit codes and messages. Each check
 * therefore forks and execs the built binary with its stdout and stderr
 * going to files, and looks at what a script would look at: the exit
 * status, the output, the bytes of the files it wrote, and which files
 * exist afterwards. Where the point is the data path, the server's own
 * counters (INFO: shm_attaches, data_write_bytes, data_read_bytes, read on
 * a raw socket) show that the bytes went the way --transport said.
 *
 * Groups, each with a server of its own (testserver.h):
 *  1. Usage: every misuse exits 2 before connecting; --help exits 0.
 *  2. Data: 3 MiB of random bytes put and got byte for byte over shm
 *     (unix socket) and over the TCP data plane, and across the two; stdin
 *     and stdout; a missing key exits 1 with "not found" and leaves no file
 *     (and an existing target untouched); a put of an existing key fails
 *     and keeps the old value unless --replace.
 *  3. ls and rm: exact output (sorted, key<TAB>size), patterns, counts.
 *  4. requirepass: a wrong or missing password exits 1.
 *
 * The binary: $MC_CLI if set, else src/mooncake-cli relative to the
 * current directory (the runner's cwd is the repository root), else the
 * one beside this program's build directory (build/tests/x ->
 * ../../src/mooncake-cli). Under a sanitizer build every run is also
 * checked for a sanitizer report on its stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"
#include "testserver.h"
#define GROUP_WATCHDOG_S 60 /* seconds a group may take (testgroup.h) */
#include "testgroup.h"

#define MiB ((size_t)1024 * 1024)
#define CLI_MAX_ARGS 32

/* ---- files ------------------------------------------------------------------- */

static char workdir[96];

/* Declares char var[] holding workdir/name. */
#define WPATH(var, name) \
    char var[sizeof(workdir) + 64]; \
    snprintf(var, sizeof(var), "%s/%s", workdir, (name))


/* The whole file in a malloc'd buffer (NUL-terminated), or NULL. */
static char *readFile(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            char *p = realloc(buf, cap + 1);
            if (!p) abort();
            buf = p;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static int writeFile(const char *path, const void *buf, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int ok = write(fd, buf, len) == (ssize_t)len;
    close(fd);
    return ok ? 0 : -1;
}

static void randomBytes(void *buf, size_t len) {
    int fd = open("/dev/urandom", O_RDONLY);
    size_t n = 0;
    while (fd >= 0 && n < len) {
        ssize_t r = read(fd, (char *)buf + n, len - n);
        if (r <= 0) break;
        n += (size_t)r;
    }
    if (fd >= 0) close(fd);
    /* No urandom: still bytes no two calls share. */
    static uint64_t s = 0x9E3779B97F4A7C15ULL;
    s ^= (uint64_t)getpid() << 32 ^ (uint64_t)tsNowMs();
    for (; n < len; n++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        ((unsigned char *)buf)[n] = (unsigned char)((s * 0x2545F4914F6CDD1DULL) >> 56);
    }
}

/* 1 if the file holds exactly want[0..n); otherwise says how it differs. */
static int fileIs(const char *path, const void *want, size_t n) {
    size_t len;
    char *got = readFile(path, &len);
    if (!got) {
        fprintf(stderr, "  %s: %s\n", path, strerror(errno));
        return 0;
    }
    int same = len == n && memcmp(got, want, n) == 0;
    if (!same && len != n) fprintf(stderr, "  %s: %zu bytes instead of %zu\n", path, len, n);
    else if (!same) {
        size_t i = 0;
        while (((unsigned char *)got)[i] == ((const unsigned char *)want)[i]) i++;
        fprintf(stderr, "  %s: differs first at byte %zu\n", path, i);
    }
    free(got);
    return same;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Files in the work directory whose names contain ".tmp-": what a get
 * leaves behind if it fails to clean up its temporary file. */
static int leftoverTemps(void) {
    DIR *d = opendir(workdir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".tmp-")) {
            fprintf(stderr, "  left behind: %s\n", e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

static void workdirCleanup(void) {
    if (!workdir[0]) return;
    DIR *d = opendir(workdir);
    if (d) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                char path[sizeof(workdir) + 300];
                snprintf(path, sizeof(path), "%s/%s", workdir, e->d_name);
                unlink(path);
            }
        closedir(d);
    }
    rmdir(workdir);
    workdir[0] = '\0';
}

/* ---- running the tool ---------------------------------------------------------- */

static const char *cliBinary(void) {
    static char path[PATH_MAX + 64];
    static const char *const env[] = {"MC_CLI"};
    return tsFindBinary("mooncake-cli", env, 1, path, sizeof(path));
}

typedef struct cliRun {
    int status;          /* exit status; 128+signal if killed; -1 not run */
    char *out;           /* stdout, NUL-terminated */
    size_t outlen;
    char *err;           /* stderr, NUL-terminated */
} cliRun;

static void runFree(cliRun *r) {
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* Starts mooncake-cli with the arguments (argv[0] set here), stdin from
 * in_path (NULL: /dev/null); cliWait collects it. The previous contents of
 * r are freed. Returns the pid, or -1 when it could not be started. */
static pid_t cliStartv(cliRun *r, const char *in_path, const char **argv) {
    runFree(r);
    r->status = -1;
    const char *bin = cliBinary();
    argv[0] = bin ? bin : "mooncake-cli";
    WPATH(outp, "cli.stdout");
    WPATH(errp, "cli.stderr");
    pid_t pid = -1;
    if (bin) {
        pid_t self = getpid();
        pid = fork();
        if (pid == 0) {
            tsDieWithParent(self);
            int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
            int out = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            int err = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (in < 0 || out < 0 || err < 0) _exit(126);
            dup2(in, 0);
            dup2(out, 1);
            dup2(err, 2);
            execv(bin, (char *const *)argv);
            _exit(127);
        }
        if (pid > 0) tsTrack(pid);
    } else {
        fprintf(stderr, "  no executable mooncake-cli (build it with `make`, or set MC_CLI)\n");
    }
    return pid;
}

static void cliWait(cliRun *r, pid_t pid) {
    WPATH(outp, "cli.stdout");
    WPATH(errp, "cli.stderr");
    if (pid > 0) {
        int st;
        while (waitpid(pid, &st, 0) == -1 && errno == EINTR) {}
        tsUntrack(pid);
        r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    r->out = readFile(outp, &r->outlen);
    r->err = readFile(errp, NULL);
    if (!r->out) r->out = calloc(1, 1), r->outlen = 0;
    if (!r->err) r->err = calloc(1, 1);
    unlink(outp);
    unlink(errp);
    /* A sanitizer's report must fail the test even where exit 1 was the
     * expected status. */
    if (strstr(r->err, "Sanitizer") || strstr(r->err, "runtime error:")) {
        fprintf(stderr, "  sanitizer report from mooncake-cli:\n%s", r->err);
        test_cur_failed = 1;
    }
}

#define CLI_ARGV(argv, in_path) \
    const char *argv[CLI_MAX_ARGS + 2]; \
    int argc_ = 1; \
    va_list ap; \
    va_start(ap, in_path); \
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc_ <= CLI_MAX_ARGS;) argv[argc_++] = a; \
    va_end(ap); \
    argv[argc_] = NULL

/* Runs mooncake-cli with the NULL-terminated arguments, stdin from in_path
 * (NULL: /dev/null), and waits for it. */
__attribute__((sentinel)) static void cli(cliRun *r, const char *in_path, ...) {
    CLI_ARGV(argv, in_path);
    cliWait(r, cliStartv(r, in_path, argv));
}

/* The same, without waiting (cliWait). */
__attribute__((sentinel)) static pid_t cliStart(cliRun *r, const char *in_path, ...) {
    CLI_ARGV(argv, in_path);
    return cliStartv(r, in_path, argv);
}

/* The exit status, with the tool's stderr shown when it is not the one wanted. */
#define CHECK_EXIT(r, want) do { \
    CHECK_EQ((r).status, (want)); \
    if ((r).status != (want)) fprintf(stderr, "  mooncake-cli said: %s", (r).err); \
} while (0)

#define CHECK_HAS(text, needle) do { \
    CHECK(strstr((text), (needle)) != NULL); \
    if (!strstr((text), (needle))) fprintf(stderr, "  looked for \"%s\" in: %s\n", (needle), (text)); \
} while (0)

#define CHECK_OUT(r, want) do { \
    CHECK(strcmp((r).out, (want)) == 0); \
    if (strcmp((r).out, (want))) fprintf(stderr, "  stdout was:\n%s  wanted:\n%s", (r).out, (want)); \
} while (0)

/* ---- the server's counters --------------------------------------------------------- */

/* One numeric field of INFO, read on a raw connection; -1 if unavailable. */
static long long infoField(int port, const char *field) {
    int fd = tsConnectTcp(port);
    if (fd < 0) return -1;
    static const char req[] = "*1\r\n$4\r\nINFO\r\n";
    long long val = -1;
    size_t cap = 1 << 16, got = 0, want = 0;
    char *buf = xmalloc(cap + 1);
    if (write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) goto done;
    long long deadline = tsNowMs() + 5000;
    while (!want || got < want) {
        long long left = deadline - tsNowMs();
        struct pollfd pfd = {fd, POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0 || got == cap) goto done;
        ssize_t n = read(fd, buf + got, cap - got);
        if (n <= 0) goto done;
        got += (size_t)n;
        buf[got] = '\0';
        char *crlf = strstr(buf, "\r\n");
        if (!want && crlf) {
            if (buf[0] != '$') goto done;
            want = (size_t)(crlf - buf) + 2 + (size_t)atoll(buf + 1) + 2;
        }
    }
    char key[128];
    snprintf(key, sizeof(key), "\n%s:", field);
    char *p = strstr(buf, key);
    if (p) val = atoll(p + strlen(key));
done:
    free(buf);
    close(fd);
    return val;
}

/* Every option a message names ("--word", or "-x" as a word of its own) is
 * one the tool has: listed in its --help. A message that advised a flag the
 * tool lacks ("use REPLACE", "-f") sent its reader nowhere. The help text
 * is read once, from the tool itself. */
static char *help_text;

static int isFlagChar(char ch) { return (ch >= 'a' && ch <= 'z') || ch == '-'; }

static int namesOnlyRealFlags(const char *msg, const char *quoted) {
    int ok = 1;
    for (size_t i = 0; msg[i]; i++) {
        if (msg[i] != '-' || (i > 0 && !strchr(" '(\n", msg[i - 1]))) continue;
        size_t n;
        if (msg[i + 1] == '-' && msg[i + 2] >= 'a' && msg[i + 2] <= 'z') {
            for (n = 2; isFlagChar(msg[i + n]); n++) {}
        } else if (msg[i + 1] >= 'a' && msg[i + 1] <= 'z' && !isFlagChar(msg[i + 2])) {
            n = 2;
        } else {
            continue;
        }
        /* The whole flag in the help: "--replica" must not pass on "--replicas".
         * quoted is the user's own bad option, which the message repeats. */
        int found = quoted && strlen(quoted) == n && !strncmp(quoted, msg + i, n);
        for (const char *h = help_text; h && (h = strstr(h, "-")) != NULL; h++)
            if (!strncmp(h, msg + i, n) && !isFlagChar(h[n]) && (h == help_text || !isFlagChar(h[-1]))) {
                found = 1;
                break;
            }
        if (!found) {
            fprintf(stderr, "  the message names %.*s, which --help does not list: %s\n", (int)n, msg + i, msg);
            ok = 0;
        }
        i += n - 1;
    }
    return ok;
}

/* ---- groups ------------------------------------------------------------------------ */

/* 1. Misuse is exit 2 and a message, before any connection is tried: the
 * port given (1) has no server, so a run that went on to connect would
 * exit 1 instead. */
static void groupUsage(void) {
    cliRun r = {0};
    watchdog();
    TEST("usage: --help prints the usage on stdout and exits 0") {
        cli(&r, NULL, "--help", NULL);
        CHECK_EXIT(r, 0);
        CHECK_HAS(r.out, "Usage: mooncake-cli");
        const char *words[] = {"put <key> <file>", "get <key> <file>", "ls [pattern]", "rm <key>...",
                               "--replace", "--replicas", "--transport"};
        for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) CHECK_HAS(r.out, words[i]);
        CHECK_EQ(strlen(r.err), 0);
        free(help_text);
        help_text = strdup(r.out);
    }
    TEST("usage: --version and -v print the version and exit 0") {
        cli(&r, NULL, "--version", NULL);
        CHECK_EXIT(r, 0);
        CHECK_HAS(r.out, "mooncake-cli ");
        CHECK(strchr(r.out, '.') != NULL);
        cliRun r2 = {0};
        cli(&r2, NULL, "-v", NULL);
        CHECK_EXIT(r2, 0);
        CHECK(r.out && r2.out && !strcmp(r.out, r2.out));
        runFree(&r2);
    }
    TEST("usage: no command exits 2 with a message on stderr") {
        cli(&r, NULL, "-p", "1", NULL);
        CHECK_EXIT(r, 2);
        CHECK_HAS(r.err, "mooncake-cli: no command");
        CHECK_EQ(r.outlen, 0);
    }
    static const struct {
        const char *args[6];
        const char *says;
    } bad[] = {
        {{"-p", "1", "frob", NULL}, "unknown command"},
        {{"-p", "1", "get", "k", NULL}, "wrong number of arguments"},
        {{"-p", "1", "put", "k", NULL}, "wrong number of arguments"},
        {{"-p", "1", "put", "k", "f", "g"}, "wrong number of arguments"},
        {{"-p", "1", "ls", "a*", "b*", NULL}, "wrong number of arguments"},
        {{"-p", "1", "rm", NULL}, "wrong number of arguments"},
        {{"-p", "1", "--bogus", "ls", NULL}, "unknown option --bogus"},
        {{"-p", "1", "--transport", "pigeon", "ls", NULL}, "--transport"},
        {{"-p", "70000", "ls", NULL}, "-p"},
        {{"-p", "1", "put", "--replicas", "0", NULL}, "--replicas"},
        {{"-p", "1", "put", "--replicas", "two", NULL}, "--replicas"},
        {{"-p", "1", "get", "k", "f", "--replace"}, "only apply to put"},
        {{"-p", "1", "ls", "-s", NULL}, "needs a value"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[200];
        int n = snprintf(name, sizeof(name), "usage: exit 2 for");
        for (int j = 0; j < 6 && bad[i].args[j]; j++)
            n += snprintf(name + n, sizeof(name) - (size_t)n, " %s", bad[i].args[j]);
        TEST(name) {
            const char *const *a = bad[i].args;
            cli(&r, NULL, a[0], a[1], a[2], a[3], a[4], a[5], NULL);
            CHECK_EXIT(r, 2);
            CHECK_HAS(r.err, bad[i].says);
            CHECK_EQ(r.outlen, 0);
            CHECK(namesOnlyRealFlags(r.err, !strcmp(a[2], "--bogus") ? a[2] : NULL));
        }
    }
    TEST("usage: a server that is not there is exit 1 (a failure, not misuse), after --connect-retry") {
        char port[16];
        snprintf(port, sizeof(port), "%d", tsFreePort());
        long long t0 = tsNowMs();
        cli(&r, NULL, "-p", port, "--connect-retry", "300", "ls", NULL);
        long long took = tsNowMs() - t0;
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "mooncake-cli: ls: connect");
        CHECK(took >= 300); /* it did wait, and (the watchdog says) not for ever */
        cli(&r, NULL, "-p", port, "--connect-retry", "-1", "ls", NULL);
        CHECK_EXIT(r, 2);
    }
    runFree(&r);
}

/* 2. Put and get. */
static void groupData(void) {
    const char *group = "data";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char port[16];
    snprintf(port, sizeof(port), "%d", s.port);
    const size_t n = 3 * MiB;
    char *a = xmalloc(n), *b = xmalloc(n);
    randomBytes(a, n);
    randomBytes(b, n);
    cliRun r = {0};
    WPATH(fa, "a.bin");
    WPATH(fb, "b.bin");

    TEST("data: the first connect is tried again until a server is there (a restart, a failover)") {
        WPATH(late, "late.sock");
        WPATH(fl, "late.txt");
        CHECK(writeFile(fl, "late", 4) == 0);
        /* The tool's path appears (a link to a new server's socket) only
         * once that server is up, well after the tool's first try. */
        pid_t pid = cliStart(&r, NULL, "-s", late, "--connect-retry", "30000", "put", "late", fl, NULL);
        tsSleepMs(100);
        tsServer s2;
        int started = tsStart(&s2, NULL) == 0, up = started && symlink(s2.sock, late) == 0;
        CHECK(up);
        cliWait(&r, pid);
        CHECK_EXIT(r, 0);
        if (up) {
            cli(&r, NULL, "-s", late, "ls", NULL);
            CHECK_OUT(r, "late\t4\n");
        }
        if (started) {
            tsStop(&s2);
            tsCleanup(&s2);
        }
        unlink(fl);
        unlink(late);
    }

    TEST("data: put+get of 3 MiB over shm (unix socket): byte for byte, by shared memory") {
        CHECK(writeFile(fa, a, n) == 0);
        long long shm0 = infoField(s.port, "shm_attaches"), w0 = infoField(s.port, "data_write_bytes");
        long long r0 = infoField(s.port, "data_read_bytes");
        CHECK(shm0 >= 0 && w0 >= 0 && r0 >= 0);
        cli(&r, NULL, "-s", s.sock, "--transport", "shm", "put", "big:shm", fa, NULL);
        CHECK_EXIT(r, 0);
        CHECK_EQ(r.outlen, 0);
        long long shm1 = infoField(s.port, "shm_attaches");
        CHECK(shm1 > shm0);
        CHECK_EQ(infoField(s.port, "data_write_bytes"), w0);
        WPATH(out, "out-shm.bin");
        cli(&r, NULL, "-s", s.sock, "--transport", "shm", "get", "big:shm", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, a, n));
        CHECK(infoField(s.port, "shm_attaches") > shm1);
        CHECK_EQ(infoField(s.port, "data_read_bytes"), r0);
        CHECK_EQ(leftoverTemps(), 0);
    }
    TEST("data: put+get of 3 MiB over tcp: byte for byte, by the TCP data plane") {
        CHECK(writeFile(fb, b, n) == 0);
        long long shm0 = infoField(s.port, "shm_attaches"), w0 = infoField(s.port, "data_write_bytes");
        long long r0 = infoField(s.port, "data_read_bytes");
        cli(&r, NULL, "-h", "127.0.0.1", "-p", port, "--transport", "tcp", "put", "big:tcp", fb, NULL);
        CHECK_EXIT(r, 0);
        CHECK_EQ(infoField(s.port, "data_write_bytes"), w0 + (long long)n);
        WPATH(out, "out-tcp.bin");
        cli(&r, NULL, "-h", "127.0.0.1", "-p", port, "--transport", "tcp", "get", "big:tcp", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, b, n));
        CHECK_EQ(infoField(s.port, "data_read_bytes"), r0 + (long long)n);
        CHECK_EQ(infoField(s.port, "shm_attaches"), shm0);
        CHECK_EQ(leftoverTemps(), 0);
    }
    TEST("data: each value read back over the other transport") {
        WPATH(out, "cross.bin");
        cli(&r, NULL, "-p", port, "--transport", "tcp", "get", "big:shm", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, a, n));
        cli(&r, NULL, "-s", s.sock, "--transport", "shm", "get", "big:tcp", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, b, n));
    }
    TEST("data: a client connected by TCP (-p) reads over shared memory too, as --help says") {
        /* -s is no condition for shm: the segment lists the server's unix
         * socket among its endpoints, so the library maps the pool whichever
         * way it connected (the help once said -s was needed). */
        long long shm0 = infoField(s.port, "shm_attaches"), r0 = infoField(s.port, "data_read_bytes");
        WPATH(out, "tcp-shm.bin");
        cli(&r, NULL, "-p", port, "--transport", "shm", "get", "big:tcp", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, b, n));
        CHECK(infoField(s.port, "shm_attaches") > shm0);
        CHECK_EQ(infoField(s.port, "data_read_bytes"), r0);
        cli(&r, NULL, "--help", NULL);
        CHECK_EXIT(r, 0);
        CHECK(r.out != NULL && strstr(r.out, "needed for") == NULL);
    }
    TEST("data: put from stdin, get to stdout ('-')") {
        cli(&r, fb, "-s", s.sock, "put", "stdin:key", "-", NULL);
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "get", "stdin:key", "-", NULL);
        CHECK_EXIT(r, 0);
        CHECK_EQ(r.outlen, n);
        CHECK(r.outlen == n && memcmp(r.out, b, n) == 0);
    }
    TEST("data: get of a missing key exits 1, says not found, writes no file") {
        WPATH(out, "missing.bin");
        cli(&r, NULL, "-s", s.sock, "get", "no:such:key", out, NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "mooncake-cli: get no:such:key: not found");
        CHECK(!exists(out));
        CHECK_EQ(leftoverTemps(), 0);
        cli(&r, NULL, "-s", s.sock, "get", "no:such:key", "-", NULL);
        CHECK_EXIT(r, 1);
        CHECK_EQ(r.outlen, 0);
    }
    TEST("data: a failed get leaves an existing target file as it was") {
        WPATH(out, "keep.txt");
        CHECK(writeFile(out, "old contents\n", 13) == 0);
        cli(&r, NULL, "-s", s.sock, "get", "no:such:key", out, NULL);
        CHECK_EXIT(r, 1);
        CHECK(fileIs(out, "old contents\n", 13));
        CHECK_EQ(leftoverTemps(), 0);
    }
    TEST("data: a get over an existing file replaces it whole (a new inode), keeping its mode") {
        WPATH(out, "keep.txt");
        struct stat before, after;
        CHECK(chmod(out, 0640) == 0);
        CHECK(stat(out, &before) == 0);
        cli(&r, NULL, "-s", s.sock, "get", "big:shm", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, a, n));
        CHECK(stat(out, &after) == 0);
        /* Written in place, the file would keep its inode, and a reader
         * could have seen it half written. */
        CHECK(after.st_ino != before.st_ino);
        CHECK_EQ(after.st_mode & 07777, 0640);
        CHECK_EQ(leftoverTemps(), 0);
    }
    TEST("data: put of an existing key without --replace fails and the old value stays") {
        WPATH(f1, "v1.txt");
        WPATH(f2, "v2.txt");
        WPATH(out, "v.out");
        CHECK(writeFile(f1, "version one", 11) == 0);
        CHECK(writeFile(f2, "the second version", 18) == 0);
        cli(&r, NULL, "-s", s.sock, "--replicas", "1", "put", "ver", f1, NULL);
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "put", "ver", f2, NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "mooncake-cli: put ver: exists");
        /* The advice names the tool's flag, not the protocol's REPLACE. */
        CHECK_HAS(r.err, "use --replace");
        CHECK(strstr(r.err, "REPLACE") == NULL);
        CHECK(namesOnlyRealFlags(r.err, NULL));
        cli(&r, NULL, "-s", s.sock, "get", "ver", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, "version one", 11));
    }
    TEST("data: put --replace of an existing key writes the new value") {
        WPATH(f2, "v2.txt");
        WPATH(out, "v.out");
        cli(&r, NULL, "-s", s.sock, "put", "--replace", "ver", f2, NULL);
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "get", "ver", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, "the second version", 18));
    }
    TEST("data: put of a file that does not exist exits 1 and stores nothing") {
        WPATH(nofile, "does-not-exist");
        cli(&r, NULL, "-s", s.sock, "put", "nofile", nofile, NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "No such file or directory");
        cli(&r, NULL, "-s", s.sock, "get", "nofile", "-", NULL);
        CHECK_EXIT(r, 1);
    }
    runFree(&r);
    free(a);
    free(b);
    tsGroupFinish(&s, group, failed0);
}

/* Puts a value of len bytes under key; 0 on success. */
static int putSized(const tsServer *s, const char *key, size_t len) {
    char *v = xmalloc(len);
    memset(v, 'x', len);
    WPATH(f, "sized.bin");
    int rc = writeFile(f, v, len);
    free(v);
    if (rc != 0) return -1;
    cliRun r = {0};
    cli(&r, NULL, "-s", s->sock, "put", key, f, NULL);
    if (r.status != 0) fprintf(stderr, "  put %s: %s", key, r.err);
    rc = r.status;
    runFree(&r);
    unlink(f);
    return rc;
}

/* 3. ls and rm, on a server holding nothing else. */
static void groupList(void) {
    const char *group = "ls/rm";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    cliRun r = {0};

    TEST("ls: an empty server lists nothing and exits 0") {
        cli(&r, NULL, "-s", s.sock, "ls", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "");
    }
    /* Put in an order far from sorted, so a listing in SCAN's (hash)
     * order, or sorted by anything but bytes, cannot pass. */
    static const struct { const char *key; size_t len; } put[] = {
        {"c", 7},      {"n/07", 8},  {"a/10", 1000}, {"n/11", 12}, {"n/00", 1}, {"b/2", 20},
        {"n/03", 4},   {"n/09", 10}, {"a/1", 3},     {"n/05", 6},  {"n/01", 2}, {"n/10", 11},
        {"n/04", 5},   {"n/08", 9},  {"n/02", 3},    {"n/06", 7},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof(put) / sizeof(put[0]); i++) ok &= putSized(&s, put[i].key, put[i].len) == 0;

    TEST("ls: every key, sorted bytewise, key<TAB>size") {
        CHECK(ok);
        cli(&r, NULL, "-s", s.sock, "ls", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "a/1\t3\na/10\t1000\nb/2\t20\nc\t7\n"
                     "n/00\t1\nn/01\t2\nn/02\t3\nn/03\t4\nn/04\t5\nn/05\t6\nn/06\t7\nn/07\t8\n"
                     "n/08\t9\nn/09\t10\nn/10\t11\nn/11\t12\n");
    }
    TEST("ls: a pattern selects the keys") {
        cli(&r, NULL, "-s", s.sock, "ls", "a/*", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "a/1\t3\na/10\t1000\n");
        cli(&r, NULL, "-p", "1", "-s", s.sock, "ls", "n/1?", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "n/10\t11\nn/11\t12\n");
        cli(&r, NULL, "-s", s.sock, "ls", "zzz*", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "");
    }
    TEST("rm: removes the keys that exist and prints how many") {
        cli(&r, NULL, "-s", s.sock, "rm", "a/1", "not-there", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "1\n");
        cli(&r, NULL, "-s", s.sock, "rm", "b/2", "c", "n/00", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "3\n");
        cli(&r, NULL, "-s", s.sock, "rm", "a/1", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "0\n");
    }
    TEST("rm: ls no longer lists the removed keys, get no longer finds them") {
        cli(&r, NULL, "-s", s.sock, "ls", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "a/10\t1000\n"
                     "n/01\t2\nn/02\t3\nn/03\t4\nn/04\t5\nn/05\t6\nn/06\t7\nn/07\t8\n"
                     "n/08\t9\nn/09\t10\nn/10\t11\nn/11\t12\n");
        cli(&r, NULL, "-s", s.sock, "get", "a/1", "-", NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "not found");
    }
    runFree(&r);
    tsGroupFinish(&s, group, failed0);
}

/* 4. A server with a password. */
static void groupAuth(void) {
    const char *group = "auth";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--requirepass", "s3cret", NULL), &s, group)) return;
    cliRun r = {0};
    WPATH(f, "auth.txt");
    WPATH(out, "auth.out");

    TEST("auth: a wrong password exits 1 for every command and changes nothing") {
        CHECK(writeFile(f, "guarded", 7) == 0);
        cli(&r, NULL, "-s", s.sock, "-a", "wrong", "put", "k", f, NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "authentication failed");
        cli(&r, NULL, "-s", s.sock, "-a", "wrong", "ls", NULL);
        CHECK_EXIT(r, 1);
        CHECK_EQ(r.outlen, 0);
        cli(&r, NULL, "-s", s.sock, "-a", "wrong", "rm", "k", NULL);
        CHECK_EXIT(r, 1);
        cli(&r, NULL, "-s", s.sock, "-a", "wrong", "get", "k", out, NULL);
        CHECK_EXIT(r, 1);
        CHECK(!exists(out));
    }
    TEST("auth: no password exits 1") {
        cli(&r, NULL, "-s", s.sock, "ls", NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "NOAUTH");
    }
    TEST("auth: the right password works (so the refusals were about it)") {
        cli(&r, NULL, "-s", s.sock, "-a", "s3cret", "put", "k", f, NULL);
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "-a", "s3cret", "ls", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "k\t7\n");
        cli(&r, NULL, "-p", "1", "-s", s.sock, "-a", "s3cret", "get", "k", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, "guarded", 7));
    }
    runFree(&r);
    tsGroupFinish(&s, group, failed0);
}

/* 5. ACL users (--user): a tenant restricted to a:* from an aclfile. */
static void groupAcl(void) {
    const char *group = "acl";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    WPATH(acl, "users.acl");
    const char *users = "user alice on >pa ~a:* +@all\nuser default on nopass ~* &* +@all\n";
    CHECK(writeFile(acl, users, strlen(users)) == 0);
    if (!tsGroupStarted(tsStart(&s, "--aclfile", acl, NULL), &s, group)) return;
    cliRun r = {0};
    WPATH(f, "acl.txt");
    WPATH(out, "acl.out");
    CHECK(writeFile(f, "tenant!", 7) == 0);
    char port[16];
    snprintf(port, sizeof(port), "%d", s.port);

    TEST("acl: --user alice -a pa puts, lists and gets her keys, over tcp and the unix socket") {
        cli(&r, NULL, "-p", port, "--user", "alice", "-a", "pa", "put", "a:1", f, NULL);
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "--user", "alice", "-a", "pa", "put", "a:2", f, NULL);
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "put", "b:1", f, NULL); /* the default user's */
        CHECK_EXIT(r, 0);
        cli(&r, NULL, "-s", s.sock, "--user", "alice", "-a", "pa", "ls", NULL);
        CHECK_EXIT(r, 0);
        CHECK_OUT(r, "a:1\t7\na:2\t7\n"); /* SCAN shows a tenant its keys only */
        cli(&r, NULL, "-s", s.sock, "--user", "alice", "-a", "pa", "get", "a:1", out, NULL);
        CHECK_EXIT(r, 0);
        CHECK(fileIs(out, "tenant!", 7));
    }
    TEST("acl: another prefix is refused (NOPERM), a wrong password too") {
        cli(&r, NULL, "-s", s.sock, "--user", "alice", "-a", "pa", "get", "b:1", out, NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "NOPERM");
        cli(&r, NULL, "-s", s.sock, "--user", "alice", "-a", "pa", "put", "b:2", f, NULL);
        CHECK_EXIT(r, 1);
        cli(&r, NULL, "-s", s.sock, "--user", "alice", "-a", "wrong", "ls", NULL);
        CHECK_EXIT(r, 1);
        CHECK_HAS(r.err, "WRONGPASS");
        cli(&r, NULL, "-s", s.sock, "ls", "--user", NULL); /* no name */
        CHECK_EXIT(r, 2);
    }
    runFree(&r);
    tsGroupFinish(&s, group, failed0);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = tsOnAlarm;
    sigaction(SIGALRM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *bin = cliBinary(), *server = tsServerBinary();
    printf("test_cli: %s, server %s\n", bin ? bin : "(no mooncake-cli found)", server ? server : "(none found)");
    if (testMkdtemp(workdir, sizeof(workdir), "mccli") != 0) {
        TEST("make a temporary directory") CHECK(0);
        return testReport();
    }
    TEST("the mooncake-cli binary is there") CHECK(bin != NULL);
    if (bin) {
        groupUsage();
        groupData();
        groupList();
        groupAuth();
        groupAcl();
    }
    alarm(0);
    workdirCleanup();
    return testReport();
}
