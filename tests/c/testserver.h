/* testserver.h -- a private mooncake-server for a C test program.
 *
 * Tests of the client library need servers with settings of their own (a
 * lease of 1 ms, a password, a short put-timeout, a long owner-ttl), so
 * they cannot share the one server the Tcl runner starts. This header
 * starts a mooncake-server child on 127.0.0.1 with a free TCP port *and* a
 * unix socket, both in a fresh temporary directory (testMkdtemp: under
 * $TMPDIR or /tmp, so the socket path stays under the 108 bytes sun_path
 * allows), waits
 * until it answers PING, and stops it again.
 *
 * Which binary: $MC_SERVER if set, else $MC_TEST_SERVER (the runner sets it
 * to the server it built), else src/mooncake-server relative to the current
 * directory (the runner's cwd is the repository root), else the one beside
 * this program's build directory (build/tests/x -> ../../src/mooncake-server),
 * so the program also works when run by hand from anywhere.
 *
 * The server and every helper process a test forks are started with
 * PR_SET_PDEATHSIG, and are remembered so that a watchdog (alarm()) can
 * SIGKILL them all with tsKillAll(), which only uses async-signal-safe
 * calls: a hung or killed test never leaves servers behind.
 *
 * Needs nothing but libc; the PING it waits for is spoken on a raw socket.
 *
 * Usage:
 *     tsServer s;
 *     if (tsStart(&s, "--lease-ttl", "1", NULL) != 0) ...;
 *     ... connect to s.tcp_uri / s.unix_uri, or s.port / s.sock ...
 *     int st = tsStop(&s);          // SIGTERM; the wait status
 *     if (failed) tsDumpLog(&s, 40);
 *     tsCleanup(&s);                // removes the log, socket and directory
 */
#ifndef TESTSERVER_H
#define TESTSERVER_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TS_MAX_ARGS 48
#define TS_MAX_TRACKED 32

typedef struct tsServer {
    pid_t pid;              /* 0: not running */
    int port;
    char dir[96];           /* the temporary directory holding what follows */
    char sock[128];         /* unix socket path */
    char log[128];          /* stdout+stderr of the server */
    char tcp_uri[64];       /* tcp://127.0.0.1:port */
    char unix_uri[160];     /* unix://$TMPDIR/mctest.../mc.sock */
} tsServer;

/* Processes to SIGKILL when the watchdog fires: servers and forked helpers. */
#ifdef TEST_SHARED_STATE /* one list for all the files of a program (testhelp.h) */
extern volatile pid_t ts_tracked[TS_MAX_TRACKED];
#else
static volatile pid_t ts_tracked[TS_MAX_TRACKED];
#endif

static inline void tsTrack(pid_t pid) {
    for (int i = 0; i < TS_MAX_TRACKED; i++)
        if (ts_tracked[i] == 0) {
            ts_tracked[i] = pid;
            return;
        }
}

static inline void tsUntrack(pid_t pid) {
    for (int i = 0; i < TS_MAX_TRACKED; i++)
        if (ts_tracked[i] == pid) ts_tracked[i] = 0;
}

/* Async-signal-safe: for a watchdog handler or a fatal path. */
static inline void tsKillAll(void) {
    for (int i = 0; i < TS_MAX_TRACKED; i++)
        if (ts_tracked[i] > 0) kill(ts_tracked[i], SIGKILL);
}

static inline long long tsNowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline double tsNowSec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void tsSleepMs(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* In a forked child: die with the parent, even if it already died. */
static inline void tsDieWithParent(pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
}

/* The server binary (see the header comment); NULL if none is executable. */
/* The executable src/<name>: $ENV (the first of envs that is set), else
 * relative to the working directory, else to this test binary (build/tests). */
static inline const char *tsFindBinary(const char *name, const char *const *envs, size_t nenvs, char *path,
                                       size_t pathlen) {
    for (size_t i = 0; i < nenvs; i++) {
        const char *v = getenv(envs[i]);
        if (v && *v) return access(v, X_OK) == 0 ? v : NULL;
    }
    snprintf(path, pathlen, "src/%s", name);
    if (access(path, X_OK) == 0) return path;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, pathlen, "%s/../../src/%s", exe, name);
            if (access(path, X_OK) == 0) return path;
        }
    }
    return NULL;
}

static inline const char *tsServerBinary(void) {
    static char path[PATH_MAX + 64];
    static const char *const env[] = {"MC_SERVER", "MC_TEST_SERVER"};
    return tsFindBinary("mooncake-server", env, 2, path, sizeof(path));
}

static inline int tsFreePort(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) == -1) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(sa.sin_port);
}

/* A TCP connection to 127.0.0.1:port, or -1. */
static inline int tsConnectTcp(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends PING on a fresh connection; 1 if the server answered +PONG or
 * -NOAUTH (a server with requirepass is up all the same). */
static inline int tsPing(int port) {
    int fd = tsConnectTcp(port);
    if (fd < 0) return 0;
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    char buf[256];
    size_t got = 0;
    int ok = 0;
    if (write(fd, ping, sizeof(ping) - 1) == (ssize_t)(sizeof(ping) - 1)) {
        long long deadline = tsNowMs() + 1000;
        while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
            long long left = deadline - tsNowMs();
            struct pollfd pfd = {fd, POLLIN, 0};
            if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) break;
            ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
        buf[got] = '\0';
        ok = !strncmp(buf, "+PONG", 5) || !strncmp(buf, "-NOAUTH", 7);
    }
    close(fd);
    return ok;
}

/* Writes all n bytes to a blocking fd (EINTR retried); 0 or -1. */
static inline int tsWriteAll(int fd, const void *p, size_t n) {
    const char *s = p;
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Prints the last `lines` lines of the server's log to stderr. */
static inline void tsDumpLog(const tsServer *s, int lines) {
    if (!s->log[0]) return;
    FILE *f = fopen(s->log, "r");
    if (!f) return;
    enum { RING = 1000, WIDTH = 512 };
    static char ring[RING][WIDTH];
    if (lines > RING) lines = RING;
    char line[WIDTH];
    long n = 0;
    while (fgets(line, sizeof(line), f)) snprintf(ring[n++ % RING], WIDTH, "%s", line);
    fclose(f);
    fprintf(stderr, "---- server log %s (last %d lines) ----\n", s->log, lines);
    for (long i = n > lines ? n - lines : 0; i < n; i++) fputs(ring[i % RING], stderr);
    fprintf(stderr, "---- end of server log ----\n");
}

/* Moves the server's log out of its directory (which tsCleanup removes) to
 * <dir>.log beside it, so a failed run keeps all of it -- at loglevel
 * verbose every connection the server closed, and why. 0, or -1. */
static inline int tsKeepLog(tsServer *s, char *kept, size_t len) {
    if (!s->log[0] || !s->dir[0]) return -1;
    snprintf(kept, len, "%s.log", s->dir);
    if (rename(s->log, kept) != 0) return -1;
    snprintf(s->log, sizeof(s->log), "%s", kept);
    return 0;
}

static inline int tsLogHas(const tsServer *s, const char *needle) {
    FILE *f = fopen(s->log, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* 1 while the server process runs (reaps it if it died). */
static inline int tsAlive(tsServer *s) {
    if (!s->pid) return 0;
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
        fprintf(stderr, "  the server (pid %d) died: %s %d\n", (int)s->pid,
                WIFSIGNALED(st) ? "signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        tsUntrack(s->pid);
        s->pid = 0;
        return 0;
    }
    return 1;
}

/* Starts a server with the given extra arguments (a NULL-terminated list
 * of "--directive", "value" strings; they come after the defaults). 0 once
 * it answers PING and its unix socket exists, -1 (with the reason and the
 * log on stderr) otherwise. */
__attribute__((sentinel)) static inline int tsStart(tsServer *s, ...) {
    memset(s, 0, sizeof(*s));
    const char *bin = tsServerBinary();
    if (!bin) {
        fprintf(stderr, "  no executable mooncake-server (build it with `make`, or set MC_SERVER)\n");
        return -1;
    }
    if (testMkdtemp(s->dir, sizeof(s->dir), "mctest") != 0) {
        fprintf(stderr, "  mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    snprintf(s->sock, sizeof(s->sock), "%s/mc.sock", s->dir);
    snprintf(s->log, sizeof(s->log), "%s/server.log", s->dir);
    snprintf(s->unix_uri, sizeof(s->unix_uri), "unix://%s", s->sock);

    const char *extra[TS_MAX_ARGS];
    int nextra = 0, has_segsize = 0, no_unix = 0;
    va_list ap;
    va_start(ap, s);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && nextra < TS_MAX_ARGS;) {
        if (!strcmp(a, "--segment-size")) has_segsize = 1;
        /* "--unixsocket" "" (after ours) turns the unix socket off. */
        if (nextra > 0 && !strcmp(extra[nextra - 1], "--unixsocket") && !a[0]) no_unix = 1;
        extra[nextra++] = a;
    }
    va_end(ap);

    pid_t self = getpid();
    for (int attempt = 0; attempt < 3; attempt++) {
        s->port = tsFreePort();
        if (s->port <= 0) return -1;
        snprintf(s->tcp_uri, sizeof(s->tcp_uri), "tcp://127.0.0.1:%d", s->port);
        char portstr[16];
        snprintf(portstr, sizeof(portstr), "%d", s->port);
        const char *argv[TS_MAX_ARGS + 32];
        int argc = 0;
        argv[argc++] = bin;
        argv[argc++] = "--port";
        argv[argc++] = portstr;
        argv[argc++] = "--bind";
        argv[argc++] = "127.0.0.1";
        argv[argc++] = "--unixsocket";
        argv[argc++] = s->sock;
        argv[argc++] = "--unixsocketperm";
        argv[argc++] = "700";
        argv[argc++] = "--dir";
        argv[argc++] = s->dir;
        argv[argc++] = "--protected-mode";
        argv[argc++] = "no";
        argv[argc++] = "--loglevel";
        argv[argc++] = "verbose";
        if (!has_segsize) {
            argv[argc++] = "--segment-size";
            argv[argc++] = "64mb";
        }
        for (int i = 0; i < nextra; i++) argv[argc++] = extra[i];
        argv[argc] = NULL;

        unlink(s->sock);
        pid_t pid = fork();
        if (pid < 0) return -1;
        if (pid == 0) {
            tsDieWithParent(self);
            int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
            execv(bin, (char *const *)argv);
            fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
            _exit(127);
        }
        s->pid = pid;
        tsTrack(pid);
        long long deadline = tsNowMs() + 15000;
        while (tsNowMs() < deadline) {
            if (!tsAlive(s)) break; /* died: perhaps the port was taken meanwhile; retry */
            if (tsPing(s->port) && (no_unix || access(s->sock, F_OK) == 0)) return 0;
            tsSleepMs(10);
        }
        if (s->pid) { /* alive but never answered: no point in retrying */
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            tsUntrack(s->pid);
            s->pid = 0;
            break;
        }
    }
    fprintf(stderr, "  the server %s did not start\n", bin);
    tsDumpLog(s, 40);
    return -1;
}

/* SIGTERM, then up to 10 s for a clean exit; returns the wait status, or
 * -1 if it had to be SIGKILLed (or was not running). */
static inline int tsStop(tsServer *s) {
    int status = -1;
    if (!s->pid) return -1;
    kill(s->pid, SIGTERM);
    long long deadline = tsNowMs() + 10000;
    while (tsNowMs() < deadline) {
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            tsUntrack(s->pid);
            s->pid = 0;
            return status;
        }
        tsSleepMs(10);
    }
    fprintf(stderr, "  the server ignored SIGTERM for 10 s: SIGKILL\n");
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
    tsUntrack(s->pid);
    s->pid = 0;
    return -1;
}

static inline int tsRemoveEntry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_DP) rmdir(path);
    else unlink(path);
    return 0; /* best effort: go on with the rest */
}

/* Kills a server that is still running and removes its directory. */
static inline void tsCleanup(tsServer *s) {
    if (s->pid) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        tsUntrack(s->pid);
        s->pid = 0;
    }
    if (!s->dir[0]) return;
    /* Whole, depth first: a server may have made directories of its own
     * there (appenddirname). */
    nftw(s->dir, tsRemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
    s->dir[0] = '\0';
}

#endif
