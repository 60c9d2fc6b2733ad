/* test_mooncake.h -- what the files of test_mooncake share (test_mooncake.c
 * holds main() and the group table, test_mooncake_*.c the groups).
 *
 * The includes every group file had when they were one file, so each file
 * compiles as it did; one set of test counters and tracked servers for the
 * whole program (TEST_SHARED_STATE, defined in test_mooncake.c); the
 * helpers the groups use to connect, put, get and compare (libmooncake and
 * hiredis), and the few that one group lends another (a round trip, a put
 * into a hosted segment, the helper process that hosts a segment, lease
 * polling, ranged-read checks). Helpers are static inline, so a file that
 * does not use one gets no copy and no warning; what test_mooncake_cluster.c
 * needs too is in mctest.h.
 */
#ifndef TEST_MOONCAKE_H
#define TEST_MOONCAKE_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis.h>

#include "mooncake.h"
#define TEST_SHARED_STATE /* one set of counters for all the files (testhelp.h) */
#include "testhelp.h"
#include "testserver.h"
#define GROUP_WATCHDOG_S 30 /* seconds a group may take (testgroup.h) */
#include "testgroup.h"
#include "mctest.h"

/* ---- the groups (one file per part of the library, see test_mooncake.c) ---- */

/* test_mooncake_basic.c */
void testRoundTrips(void);
void testErrors(void);
void testReplicaFallback(void);
void testLeaseExpiry(void);
void testInterop(void);
void testLeaseRelease(void);
/* test_mooncake_hosted.c */
void testHostedSegment(void);
void testKeepalive(void);
void testHostTokens(void);
/* test_mooncake_transport.c */
void testStreams(void);
void testFirstTouch(void);
/* test_mooncake_threads.c */
void testConcurrency(void);
void testAbandonedPut(void);
/* test_mooncake_security.c */
void testAuth(void);
void testForged(void);
void testAcl(void);
void testReplyParser(void);
/* test_mooncake_batch.c */
void testBatch(void);
void testExists(void);
void testScatterGather(void);
void testRanges(void);
/* test_mooncake_async.c */
void testAsync(void);
/* test_mooncake_device.c (against MC_CUDA_LIBRARY: the fake runtime unless set) */
void testDevice(void);
void testRide(void); /* test_mooncake_ride.c */
void testViews(void); /* test_mooncake_views.c */
void testFork(void); /* test_mooncake_fork.c */
void testStress(void); /* test_mooncake_stress.c */

/* ---- libmooncake helpers ---------------------------------------------------- */

/* Connects and forces the transport (AUTO leaves the library's choice). */
/* Descriptors this process has open now (a leak check's measure). */
static inline int countOpenFds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static inline mc_client *mcOpen(const char *uri, const char *password, int transport) {
    char err[256] = "";
    mc_client *c = mc_connect(uri, password, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "  mc_connect(%s): %s\n", uri, err[0] ? err : "(no reason given)");
        return NULL;
    }
    if (transport != MC_TRANSPORT_AUTO) {
        int rc = mc_set_transport(c, transport);
        if (rc != MC_OK) {
            fprintf(stderr, "  mc_set_transport(%s) on %s: %d %s (%s)\n", transportName(transport), uri, rc,
                    mc_strerror(rc), lastErr(c));
            mc_close(c);
            return NULL;
        }
    }
    return c;
}

static inline int put(mc_client *c, const char *key, const void *buf, size_t n, const mc_put_opts *opts) {
    int rc = mc_put(c, key, strlen(key), buf, n, opts);
    if (rc != MC_OK) fprintf(stderr, "  mc_put(%s, %zu bytes): %d %s (%s)\n", key, n, rc, mc_strerror(rc), lastErr(c));
    return rc;
}

static inline long long get(mc_client *c, const char *key, void *buf, size_t cap) {
    return mc_get(c, key, strlen(key), buf, cap);
}

/* Reads key with c and compares it with want; checks the transport that
 * moved it when want_transport is not AUTO. 1 if all is right. */
static inline int getSame(mc_client *c, const char *key, const void *want, size_t n, int want_transport) {
    if (!c) return 0;
    char *buf = xmalloc(n + GUARD);
    setGuard(buf, n);
    long long got = get(c, key, buf, n);
    char what[160];
    snprintf(what, sizeof(what), "mc_get(%s)", key);
    int ok = sameBytes(what, buf, got, want, n);
    if (got < 0) fprintf(stderr, "    (%s)\n", lastErr(c));
    ok &= guardIntact(buf, n);
    if (want_transport != MC_TRANSPORT_AUTO && mc_last_transport(c) != want_transport) {
        fprintf(stderr, "  mc_get(%s) moved by %s, not %s\n", key, transportName(mc_last_transport(c)),
                transportName(want_transport));
        ok = 0;
    }
    free(buf);
    return ok;
}

/* ---- hiredis helpers ---------------------------------------------------------- */

static inline redisContext *rTcp(const tsServer *s) {
    struct timeval tv = {5, 0};
    return rConfigure(redisConnectWithTimeout("127.0.0.1", s->port, tv), s->tcp_uri);
}

static inline redisContext *rUnix(const tsServer *s) {
    struct timeval tv = {5, 0};
    return rConfigure(redisConnectUnixWithTimeout(s->sock, tv), s->unix_uri);
}

static inline void rClose(redisContext **c) {
    if (*c) redisFree(*c);
    *c = NULL;
}

static inline redisReply *rcmd(redisContext *c, const char *fmt, ...) {
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) fprintf(stderr, "  hiredis: %s\n", c->errstr);
    return r;
}

/* Runs a command and checks that the reply is an error whose text starts
 * with prefix ("ERR", "NOAUTH", "NOTREADY"); frees it. */
static inline int expectError(const char *prefix, redisReply *r, const char *what) {
    int ok = r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
    if (!ok) {
        fprintf(stderr, "  %s: expected -%s...\n", what, prefix);
        showReply(what, r);
    }
    freeReplyObject(r);
    return ok;
}

static inline int expectOk(redisReply *r, const char *what) {
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok) showReply(what, r);
    freeReplyObject(r);
    return ok;
}

/* The value of a plain GET is exactly want[0..n). */
static inline int redisGetSame(redisContext *c, const char *key, const void *want, size_t n) {
    redisReply *r = rcmd(c, "GET %s", key);
    int ok = r && r->type == REDIS_REPLY_STRING && (size_t)r->len == n && memcmp(r->str, want, n) == 0;
    if (!ok) {
        char what[160];
        snprintf(what, sizeof(what), "GET %s", key);
        if (r && r->type == REDIS_REPLY_STRING) sameBytes(what, r->str, (long long)r->len, want, n);
        else showReply(what, r);
    }
    freeReplyObject(r);
    return ok;
}

/* An integer field of SEGMENT.INFO seg (RESP2: a flat field/value list);
 * -1 if the segment or the field is missing. */
static inline long long segInfoInt(redisContext *c, const char *seg, const char *field) {
    redisReply *r = rcmd(c, "SEGMENT.INFO %s", seg);
    long long v = -1;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *k = r->element[i];
            if ((k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) && !strcmp(k->str, field))
                v = replyInt(r->element[i + 1]);
        }
    }
    freeReplyObject(r);
    return v;
}

/* The first of seg's SEGMENT.INFO endpoints that starts with prefix, copied
 * into out ("" if none). */
static inline void segEndpoint(redisContext *c, const char *seg, const char *prefix, char *out, size_t outlen) {
    redisReply *r = rcmd(c, "SEGMENT.INFO %s", seg);
    out[0] = '\0';
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *k = r->element[i], *v = r->element[i + 1];
            if (k->type != REDIS_REPLY_STRING || strcmp(k->str, "endpoints") || v->type != REDIS_REPLY_ARRAY) continue;
            for (size_t j = 0; j < v->elements; j++)
                if (v->element[j]->type == REDIS_REPLY_STRING && !strncmp(v->element[j]->str, prefix, strlen(prefix))) {
                    snprintf(out, outlen, "%s", v->element[j]->str);
                    break;
                }
        }
    }
    freeReplyObject(r);
}

/* Whether the kernel lists an abstract unix socket named name (no '@'). */
static inline int abstractSocketListed(const char *name) {
    FILE *f = fopen("/proc/net/unix", "r");
    if (f == NULL) return -1;
    char line[512];
    int found = 0;
    size_t n = strlen(name);
    while (!found && fgets(line, sizeof(line), f)) {
        char *at = strchr(line, '@');
        if (at && !strncmp(at + 1, name, n) && (at[1 + n] == '\n' || at[1 + n] == '\0')) found = 1;
    }
    fclose(f);
    return found;
}

/* The replicas GET.REPLICAS lists for key: up to max (segment id, offset)
 * pairs. The count, or -1 for nil or an error (shown). Grants a lease. */
static inline int replicaList(redisContext *c, const char *key, long long *segs, long long *offs, int max) {
    redisReply *r = rcmd(c, "GET.REPLICAS %s", key);
    int n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3) {
        n = 0;
        for (size_t i = 3; i < r->elements && n < max; i++) {
            const redisReply *rep = r->element[i];
            if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3) continue;
            segs[n] = replyInt(rep->element[0]);
            offs[n] = replyInt(rep->element[1]);
            n++;
        }
    } else {
        char what[160];
        snprintf(what, sizeof(what), "GET.REPLICAS %s", key);
        showReply(what, r);
    }
    freeReplyObject(r);
    return n;
}

/* A PUT.START reply's first replica: 1 and its segment id and offset. */
static inline int putStartReplica(redisReply *r, long long *seg, long long *off) {
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
             r->element[0]->elements == 3;
    if (ok) {
        *seg = replyInt(r->element[0]->element[0]);
        *off = replyInt(r->element[0]->element[1]);
    } else {
        showReply("PUT.START", r);
    }
    freeReplyObject(r);
    return ok;
}

/* ---- lent by one group to another ------------------------------------------------ */

/* Round trips (test_mooncake_basic.c; also test_mooncake_transport.c). */
static inline void rtKey(char *key, size_t cap, const char *tag, size_t n) {
    snprintf(key, cap, "rt:%s:%zu", tag, n);
}

static inline void roundTrip(mc_client *c, const char *tag, size_t n, int transport, char *want, char *got) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char key[64];
    rtKey(key, sizeof(key), tag, n);
    fillPattern(want, n, seedOf(key, n));
    CHECK_EQ(put(c, key, want, n, NULL), MC_OK);
    CHECK_EQ(mc_last_transport(c), transport);
    setGuard(got, n);
    memset(got, 0, n);
    long long r = get(c, key, got, n);
    if (r < 0) fprintf(stderr, "    (%s)\n", lastErr(c));
    CHECK(sameBytes(key, got, r, want, n));
    CHECK(guardIntact(got, n));
    CHECK_EQ(mc_last_transport(c), transport);
}

/* A put preferring the hosted segment "host-a", read back (test_mooncake_hosted.c;
 * also test_mooncake_transport.c). */
static inline void hostedPutGet(mc_client *c, redisContext *r, const char *key, size_t n, int transport,
                                long long host_id) {
    if (!c || !r) {
        CHECK(c != NULL && r != NULL);
        return;
    }
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf(key, n));
    mc_put_opts o = {0};
    o.prefer = "host-a";
    CHECK_EQ(put(c, key, v, n, &o), MC_OK);
    CHECK_EQ(mc_last_transport(c), transport);
    long long segs[4], offs[4];
    int nrep = replicaList(r, key, segs, offs, 4);
    CHECK_EQ(nrep, 1);
    if (nrep >= 1) CHECK_EQ(segs[0], host_id);
    CHECK(getSame(c, key, v, n, transport));
    free(v);
}

/* The segment-hosting helper process (replica fallback in test_mooncake_basic.c, also
 * test_mooncake_async.c); main() runs hostChildMain for `--host-child`. */
/* The helper process: hosts a segment and sleeps until killed. It reports
 * "R <segment id>" or "E <reason>" on the inherited pipe fd. */
static inline int hostChildMain(int argc, char **argv) {
    if (argc != 7) return 2;
    const char *uri = argv[2], *name = argv[3];
    size_t size = strtoull(argv[4], NULL, 10);
    int fd = atoi(argv[5]);
    tsDieWithParent((pid_t)atoi(argv[6]));
    char err[256] = "";
    mc_client *c = mc_connect(uri, NULL, err, sizeof(err));
    if (!c) {
        dprintf(fd, "E mc_connect: %s\n", err);
        return 1;
    }
    int rc = mc_mount(c, size, name);
    if (rc != MC_OK) {
        dprintf(fd, "E mc_mount: %s (%s)\n", mc_strerror(rc), lastErr(c));
        return 1;
    }
    dprintf(fd, "R %lld\n", mc_mount_id(c));
    close(fd);
    for (;;) pause();
}

/* Starts the helper; its pid, or -1 with the reason on stderr. */
static inline pid_t spawnHostChild(const char *uri, const char *name, size_t size, long long *segid) {
    int p[2];
    if (pipe(p) != 0) return -1;
    char sizestr[32], fdstr[16], ppid[16];
    snprintf(sizestr, sizeof(sizestr), "%zu", size);
    snprintf(fdstr, sizeof(fdstr), "%d", p[1]);
    snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(p[0]);
        execl("/proc/self/exe", "test_mooncake", "--host-child", uri, name, sizestr, fdstr, ppid, (char *)NULL);
        dprintf(p[1], "E exec: %s\n", strerror(errno));
        _exit(127);
    }
    tsTrack(pid);
    close(p[1]);
    char line[512];
    size_t got = 0;
    long long deadline = tsNowMs() + 10000;
    while (got < sizeof(line) - 1 && !memchr(line, '\n', got)) {
        long long left = deadline - tsNowMs();
        struct pollfd pfd = {p[0], POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) break;
        ssize_t r = read(p[0], line + got, sizeof(line) - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(p[0]);
    line[got] = '\0';
    if (line[0] == 'R') {
        *segid = strtoll(line + 2, NULL, 10);
        return pid;
    }
    fprintf(stderr, "  the hosting helper failed: %s\n", got ? line : "(no word from it)");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    tsUntrack(pid);
    return -1;
}

/* Leases (lease release in test_mooncake_basic.c; also exists and ranges in
 * test_mooncake_batch.c). */
/* OBJECT.INFO's lease-ms of key (RESP2: a flat field/value array); -1 if absent. */
static inline long long leaseMs(redisContext *r, const char *key) {
    redisReply *i = rcmd(r, "OBJECT.INFO %s", key);
    long long ms = -1;
    for (size_t j = 0; i && i->type == REDIS_REPLY_ARRAY && j + 1 < i->elements; j += 2)
        if (i->element[j]->type == REDIS_REPLY_STRING && !strcmp(i->element[j]->str, "lease-ms"))
            ms = i->element[j + 1]->integer;
    freeReplyObject(i);
    return ms;
}

/* The release is sent without waiting for its reply, so another connection
 * sees it a moment later: poll. */
static inline int leaseEndsWithin(redisContext *r, const char *key, int ms) {
    for (int t = 0; t < ms; t += 10) {
        if (leaseMs(r, key) == 0) return 1;
        tsSleepMs(10);
    }
    return 0;
}

/* Ranged reads (test_mooncake_batch.c; also test_mooncake_device.c). */
/* Every result is its expected value; says which is not. */
static inline int rgResults(const char *what, const long long *res, const long long *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (res[i] != want[i]) {
            fprintf(stderr, "  %s: range %zu answered %lld (%s), expected %lld (%s)\n", what, i, res[i],
                    res[i] < 0 ? mc_strerror((int)res[i]) : "bytes", want[i], want[i] < 0 ? mc_strerror((int)want[i]) : "bytes");
            return 0;
        }
    return 1;
}

static inline int rgBatch(mc_client *c, size_t n, const mc_kranges *items, long long *res) {
    int rc = mc_batch_get_ranges(c, n, items, res);
    if (rc < 0) fprintf(stderr, "  mc_batch_get_ranges: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(c));
    return rc;
}

#endif
