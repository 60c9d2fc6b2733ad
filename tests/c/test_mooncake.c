/* test_mooncake.c -- libmooncake (src/libmooncake/mooncake.h) against real servers.
 *
 * Every group below starts a mooncake-server of its own (testserver.h) with
 * the settings it needs, listening on a free TCP port and on a unix socket,
 * and drives it through the library, through hiredis, and through raw
 * sockets where a misbehaving peer is the point. What is covered, and why:
 *
 *  1. Round trips of 1 B .. 64 MiB with the transport forced to shared
 *     memory (unix connection) and to the TCP data plane (tcp connection),
 *     byte for byte, with guard bytes after the buffer, and read back over
 *     the other transport: the two paths must land in the same memory.
 *  2. Error codes a caller branches on: TOO_SMALL, NOT_FOUND, EXISTS
 *     (nothing changed), REPLACE, exists/remove.
 *  3. A process hosting a segment (mc_mount): other clients PREFER it and
 *     move bytes to and from it over TCP and shm; the server's accounting
 *     (SEGMENT.INFO used/objects, GET.REPLICAS) shows where they went.
 *  4. Replica fallback: a helper process hosting one replica is SIGKILLed
 *     while another connection speaks for its owner (HEARTBEAT), so the
 *     server cannot know and keeps its segment listed and placeable -- a
 *     host that died unseen; gets must still return the right bytes from
 *     the other replica, over tcp and shm, with fresh handles and with one
 *     whose data connection went dead. (Seen deaths: tests/python/
 *     test_owner_probe.py.)
 *  5. Lease expiry: with lease-ttl 1 ms a 64 MiB read outlives its lease and
 *     must be reported as MC_ERR_LEASE_EXPIRED, never handed out as valid.
 *  6. Threads: four handles, and one shared handle, replacing and reading
 *     the same keys; every value carries a header and checksum, so a torn
 *     or mixed read is caught.
 *  7. A writer killed in the middle of a put: the object stays pending
 *     (NOTREADY, never half visible) until put-timeout, then a new put
 *     takes the key over.
 *  8. requirepass: wrong and missing passwords are refused; the data-plane
 *     commands need AUTH like everything else.
 *  9. Forged data-plane requests (hiredis): writes outside a pending
 *     extent, across its ends, into a complete object, with bad segment ids
 *     and offsets that overflow; reads outside a complete extent; SHM.ATTACH
 *     over TCP. All refused with -ERR and nothing changed.
 * 10. Interop with plain Redis clients: mc_put then GET, SET then mc_get.
 * 11. Batches: 128 values at once, a missing key, a too-small buffer and an
 *     existing key inside a batch each fail alone.
 * 12. ACL users (mc_connect_user): tenants restricted to a key prefix put
 *     and get over TCP -- shared memory is refused them, AUTO falls back --
 *     and cannot read or replace each other's keys; every connection the
 *     handle opens is its user's; a tenant's hosted segment takes only its
 *     own puts and serves only its own peers.
 * 13. Non-blocking batches (mc_batch_put_async/get_async): a batch stalled
 *     on a SIGSTOPped segment host stays pending (mc_op_done, mc_op_wait
 *     with and without a timeout, its fd not readable) while synchronous
 *     gets on the same handle go on; it ends when the host resumes, its fd
 *     readable first. Byte-exact gets, a missing key in its slot alone,
 *     ordering (a put then a get of the same keys), 400 ops in flight,
 *     mc_op_free and mc_close waiting for unfinished ops, a worker that
 *     cannot connect.
 * 14. Ranged reads (mc_batch_get_ranges) over shm and tcp: several ranges
 *     per key, one key in two items (both leases released), ranges at the
 *     object's end, len 0, a range outside the object (overflowing ones
 *     too) or an unregistered dst failing alone, a missing and a pending key
 *     failing all their ranges, a 9 MiB object in 41 pieces (small ones
 *     sharing SEG.READVs), items refused whole, an object in a segment a
 *     third handle hosts; every range byte-exact with guard bytes after it.
 *     Also in groups 4 (ranges read from the surviving replica) and 5
 *     (LEASE_EXPIRED in every range of a read that outlives its lease).
 *     Replica descriptions (mc_batch_replicas): pool objects, objects in a
 *     client-hosted segment (here and in group 4), missing and pending keys,
 *     compared with GET.REPLICAS and SEGMENT.INFO; no lease left behind.
 * 15. Device memory, in test_mooncake_fakecuda only: this file built
 *     against libmooncake with a fake CUDA device (mc_cuda.c, MC_FAKE_CUDA)
 *     whose memory the CPU cannot touch, so a path that skips staging
 *     crashes or fails: mc_get_into and ranged reads into registered device
 *     memory over shm and tcp, beside host ranges, one copy to the device
 *     per range, nothing written outside the ranges.
 *
 * Values are pseudo-random (xorshift64*) from a seed derived from the key
 * and size, so every key holds different bytes and a value read from the
 * wrong place cannot pass. Each group runs under an alarm() watchdog that
 * kills the servers and reports the hung test; the whole program takes a
 * few seconds.
 *
 * Usage: test_mooncake [group-substring]   (the server binary: see
 * testserver.h; MC_SERVER overrides it).
 * The program re-executes itself as `test_mooncake --host-child ...` for
 * the helper process that hosts a segment in group 4: a fresh exec rather
 * than a bare fork, because the parent may already run library threads.
 */
#include <arpa/inet.h>
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
#ifdef MC_FAKE_CUDA
#include "mc_cuda.h"
#endif
#include "testhelp.h"
#include "testserver.h"
#define GROUP_WATCHDOG_S 30 /* seconds a group may take (testgroup.h) */
#include "testgroup.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

/* ---- signals ------------------------------------------------------------------ */

static volatile sig_atomic_t sigpipes;

static void onSigpipe(int sig) {
    (void)sig;
    sigpipes++;
}

/* ---- pattern data ---------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    /* splitmix64's finaliser: turns counters into well-spread seeds. */
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t seedOf(const char *tag, uint64_t n) { return mix64(fnv1a(tag, strlen(tag)) ^ mix64(n)); }

/* xorshift64* words from seed; different seeds give unrelated streams. */
static void fillPattern(void *buf, size_t n, uint64_t seed) {
    uint64_t s = seed ? seed : 1;
    unsigned char *p = buf;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        uint64_t w = s * 0x2545F4914F6CDD1DULL;
        memcpy(p + i, &w, 8);
    }
    if (i < n) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        uint64_t w = s * 0x2545F4914F6CDD1DULL;
        memcpy(p + i, &w, n - i);
    }
}


/* 1 if got (gotlen bytes, or an MC_ERR_* code) is exactly want[0..n);
 * otherwise says how it differs. */
static int sameBytes(const char *what, const void *got, long long gotlen, const void *want, size_t n) {
    if (gotlen < 0) {
        fprintf(stderr, "  %s: error %lld (%s) instead of %zu bytes\n", what, gotlen, mc_strerror((int)gotlen), n);
        return 0;
    }
    if ((size_t)gotlen != n) {
        fprintf(stderr, "  %s: %lld bytes instead of %zu\n", what, gotlen, n);
        return 0;
    }
    if (memcmp(got, want, n) == 0) return 1;
    const unsigned char *g = got, *w = want;
    size_t first = 0, last = n - 1, count = 0;
    while (g[first] == w[first]) first++;
    while (g[last] == w[last]) last--;
    for (size_t i = first; i <= last; i++) count += g[i] != w[i];
    fprintf(stderr, "  %s: %zu of %zu bytes differ, first at %zu (got 0x%02x, want 0x%02x), last at %zu\n", what,
            count, n, first, g[first], w[first], last);
    return 0;
}

#define GUARD 64
#define GUARD_BYTE 0xA5

static void setGuard(void *buf, size_t n) { memset((char *)buf + n, GUARD_BYTE, GUARD); }

static int guardIntact(const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf + n;
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != GUARD_BYTE) {
            fprintf(stderr, "  the get wrote past the end of a %zu-byte buffer (guard byte %zu)\n", n, i);
            return 0;
        }
    return 1;
}

/* ---- libmooncake helpers ---------------------------------------------------- */

static const char *transportName(int t) {
    switch (t) {
    case MC_TRANSPORT_AUTO: return "auto";
    case MC_TRANSPORT_SHM: return "shm";
    case MC_TRANSPORT_TCP: return "tcp";
    case MC_TRANSPORT_RDMA: return "rdma";
    default: return "?";
    }
}

static const char *lastErr(mc_client *c) {
    const char *e = c ? mc_last_error(c) : NULL;
    return e ? e : "";
}

/* Connects and forces the transport (AUTO leaves the library's choice). */
static mc_client *mcOpen(const char *uri, const char *password, int transport) {
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

static void mcClose(mc_client **c) {
    if (*c) mc_close(*c);
    *c = NULL;
}

static int put(mc_client *c, const char *key, const void *buf, size_t n, const mc_put_opts *opts) {
    int rc = mc_put(c, key, strlen(key), buf, n, opts);
    if (rc != MC_OK) fprintf(stderr, "  mc_put(%s, %zu bytes): %d %s (%s)\n", key, n, rc, mc_strerror(rc), lastErr(c));
    return rc;
}

static long long get(mc_client *c, const char *key, void *buf, size_t cap) {
    return mc_get(c, key, strlen(key), buf, cap);
}

/* Reads key with c and compares it with want; checks the transport that
 * moved it when want_transport is not AUTO. 1 if all is right. */
static int getSame(mc_client *c, const char *key, const void *want, size_t n, int want_transport) {
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

static redisContext *rConfigure(redisContext *c, const char *where) {
    if (c == NULL || c->err) {
        fprintf(stderr, "  hiredis connect %s: %s\n", where, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval io = {20, 0};
    redisSetTimeout(c, io);
    return c;
}

static redisContext *rTcp(const tsServer *s) {
    struct timeval tv = {5, 0};
    return rConfigure(redisConnectWithTimeout("127.0.0.1", s->port, tv), s->tcp_uri);
}

static redisContext *rUnix(const tsServer *s) {
    struct timeval tv = {5, 0};
    return rConfigure(redisConnectUnixWithTimeout(s->sock, tv), s->unix_uri);
}

static void rClose(redisContext **c) {
    if (*c) redisFree(*c);
    *c = NULL;
}

static redisReply *rcmd(redisContext *c, const char *fmt, ...) {
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) fprintf(stderr, "  hiredis: %s\n", c->errstr);
    return r;
}

static void showReply(const char *what, const redisReply *r) {
    if (r == NULL) fprintf(stderr, "  %s: no reply\n", what);
    else if (r->type == REDIS_REPLY_ERROR) fprintf(stderr, "  %s: error %s\n", what, r->str);
    else if (r->type == REDIS_REPLY_STATUS) fprintf(stderr, "  %s: status %s\n", what, r->str);
    else if (r->type == REDIS_REPLY_STRING) fprintf(stderr, "  %s: string of %zu bytes\n", what, (size_t)r->len);
    else if (r->type == REDIS_REPLY_INTEGER) fprintf(stderr, "  %s: integer %lld\n", what, r->integer);
    else if (r->type == REDIS_REPLY_NIL) fprintf(stderr, "  %s: nil\n", what);
    else fprintf(stderr, "  %s: array of %zu\n", what, r->elements);
}

/* Runs a command and checks that the reply is an error whose text starts
 * with prefix ("ERR", "NOAUTH", "NOTREADY"); frees it. */
static int expectError(const char *prefix, redisReply *r, const char *what) {
    int ok = r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
    if (!ok) {
        fprintf(stderr, "  %s: expected -%s...\n", what, prefix);
        showReply(what, r);
    }
    freeReplyObject(r);
    return ok;
}

static int expectOk(redisReply *r, const char *what) {
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok) showReply(what, r);
    freeReplyObject(r);
    return ok;
}

/* The value of a plain GET is exactly want[0..n). */
static int redisGetSame(redisContext *c, const char *key, const void *want, size_t n) {
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

static long long replyInt(const redisReply *r) {
    if (!r) return -1;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return strtoll(r->str, NULL, 10);
    return -1;
}

/* An integer field of SEGMENT.INFO seg (RESP2: a flat field/value list);
 * -1 if the segment or the field is missing. */
static long long segInfoInt(redisContext *c, const char *seg, const char *field) {
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
static void segEndpoint(redisContext *c, const char *seg, const char *prefix, char *out, size_t outlen) {
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
static int abstractSocketListed(const char *name) {
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
static int replicaList(redisContext *c, const char *key, long long *segs, long long *offs, int max) {
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
static int putStartReplica(redisReply *r, long long *seg, long long *off) {
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

/* ==== 1. round trips over shm and tcp ========================================= */

static const size_t rt_sizes[] = {1, 100, 4 * KiB, 64 * KiB + 3, 1 * MiB, 16 * MiB, 64 * MiB};
#define RT_NSIZES (sizeof(rt_sizes) / sizeof(rt_sizes[0]))
#define RT_MAX (64 * MiB)

static void rtKey(char *key, size_t cap, const char *tag, size_t n) { snprintf(key, cap, "rt:%s:%zu", tag, n); }

static void roundTrip(mc_client *c, const char *tag, size_t n, int transport, char *want, char *got) {
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

/* Every value put over one transport, read over the other. */
static void crossRead(mc_client *reader, const char *written_tag, int reader_transport, char *want) {
    if (!reader) {
        CHECK(reader != NULL);
        return;
    }
    for (size_t i = 0; i < RT_NSIZES; i++) {
        char key[64];
        rtKey(key, sizeof(key), written_tag, rt_sizes[i]);
        fillPattern(want, rt_sizes[i], seedOf(key, rt_sizes[i]));
        CHECK(getSame(reader, key, want, rt_sizes[i], reader_transport));
    }
}

static void testRoundTrips(void) {
    const char *group = "round trips";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "256mb", NULL), &s, group)) return;
    char *want = xmalloc(RT_MAX), *got = xmalloc(RT_MAX + GUARD);
    struct {
        int transport;
        const char *uri;
        const char *tag;
        mc_client *c;
    } paths[] = {{MC_TRANSPORT_SHM, s.unix_uri, "shm", NULL}, {MC_TRANSPORT_TCP, s.tcp_uri, "tcp", NULL}};
    for (int p = 0; p < 2; p++) {
        char name[160];
        snprintf(name, sizeof(name), "round trips: connect to %s and force %s", paths[p].uri, paths[p].tag);
        TEST(name) {
            paths[p].c = mcOpen(paths[p].uri, NULL, paths[p].transport);
            CHECK(paths[p].c != NULL);
        }
        for (size_t i = 0; i < RT_NSIZES; i++) {
            snprintf(name, sizeof(name), "round trips: put/get of %zu bytes over %s, byte for byte", rt_sizes[i],
                     paths[p].tag);
            TEST(name) roundTrip(paths[p].c, paths[p].tag, rt_sizes[i], paths[p].transport, want, got);
        }
    }
    TEST("round trips: every value put over shm reads back over tcp, and the other way round") {
        crossRead(paths[1].c, "shm", MC_TRANSPORT_TCP, want);
        crossRead(paths[0].c, "tcp", MC_TRANSPORT_SHM, want);
    }
    mcClose(&paths[0].c);
    mcClose(&paths[1].c);
    free(want);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 2. error codes =========================================================== */

static void errTooSmall(mc_client *c, const char *tag) {
    char key[64], want[1000], buf[1000 + GUARD];
    snprintf(key, sizeof(key), "err:%s:small", tag);
    fillPattern(want, sizeof(want), seedOf(key, 1));
    CHECK_EQ(put(c, key, want, sizeof(want), NULL), MC_OK);
    setGuard(buf, 999);
    CHECK_EQ(get(c, key, buf, 999), MC_ERR_TOO_SMALL);
    CHECK(guardIntact(buf, 999));
    CHECK_EQ(get(c, key, buf, 1), MC_ERR_TOO_SMALL);
    /* A larger buffer than needed is fine: the value's size comes back. */
    char *big = xmalloc(4096);
    CHECK(sameBytes("get into a larger buffer", big, get(c, key, big, 4096), want, sizeof(want)));
    free(big);
    CHECK(getSame(c, key, want, sizeof(want), MC_TRANSPORT_AUTO));
}

static void errNotFound(mc_client *c, const char *tag) {
    char key[64], buf[64];
    snprintf(key, sizeof(key), "err:%s:never-written", tag);
    CHECK_EQ(get(c, key, buf, sizeof(buf)), MC_ERR_NOT_FOUND);
    CHECK_EQ(mc_exists(c, key, strlen(key)), 0);
    CHECK_EQ(mc_remove(c, key, strlen(key)), 0);
    CHECK_EQ(get(c, key, buf, sizeof(buf)), MC_ERR_NOT_FOUND);
}

static void errExistsAndReplace(mc_client *c, const char *tag) {
    char key[64];
    snprintf(key, sizeof(key), "err:%s:exists", tag);
    size_t n1 = 3000, n2 = 70 * KiB + 1;
    char *v1 = xmalloc(n1), *v2 = xmalloc(n2);
    fillPattern(v1, n1, seedOf(key, n1));
    fillPattern(v2, n2, seedOf(key, n2));
    CHECK_EQ(put(c, key, v1, n1, NULL), MC_OK);
    /* Without replace: EXISTS, and the value is untouched. */
    int rc = mc_put(c, key, strlen(key), v2, n2, NULL);
    CHECK_EQ(rc, MC_ERR_EXISTS);
    mc_put_opts noreplace = {0};
    CHECK_EQ(mc_put(c, key, strlen(key), v2, n2, &noreplace), MC_ERR_EXISTS);
    CHECK(getSame(c, key, v1, n1, MC_TRANSPORT_AUTO));
    /* With replace: the new value, of another size. */
    mc_put_opts replace = {0};
    replace.replace = 1;
    CHECK_EQ(put(c, key, v2, n2, &replace), MC_OK);
    CHECK(getSame(c, key, v2, n2, MC_TRANSPORT_AUTO));
    /* And back to a smaller one. */
    CHECK_EQ(put(c, key, v1, n1, &replace), MC_OK);
    CHECK(getSame(c, key, v1, n1, MC_TRANSPORT_AUTO));
    free(v1);
    free(v2);
}

static void errExistsRemove(mc_client *c, const char *tag) {
    char key[64], v[512], buf[512];
    snprintf(key, sizeof(key), "err:%s:remove", tag);
    fillPattern(v, sizeof(v), seedOf(key, sizeof(v)));
    CHECK_EQ(put(c, key, v, sizeof(v), NULL), MC_OK);
    CHECK_EQ(mc_exists(c, key, strlen(key)), 1);
    CHECK_EQ(mc_remove(c, key, strlen(key)), 1);
    CHECK_EQ(mc_exists(c, key, strlen(key)), 0);
    CHECK_EQ(get(c, key, buf, sizeof(buf)), MC_ERR_NOT_FOUND);
    CHECK_EQ(mc_remove(c, key, strlen(key)), 0);
    /* The key can be written again afterwards, without replace. */
    CHECK_EQ(put(c, key, v, sizeof(v), NULL), MC_OK);
    CHECK(getSame(c, key, v, sizeof(v), MC_TRANSPORT_AUTO));
}

static void testErrors(void) {
    const char *group = "errors";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    struct {
        const char *uri;
        int transport;
        const char *tag;
    } paths[] = {{s.unix_uri, MC_TRANSPORT_SHM, "shm"}, {s.tcp_uri, MC_TRANSPORT_TCP, "tcp"}};
    for (int p = 0; p < 2; p++) {
        mc_client *c = mcOpen(paths[p].uri, NULL, paths[p].transport);
        const char *tag = paths[p].tag;
        char name[160];
        snprintf(name, sizeof(name), "errors (%s): a buffer one byte short is TOO_SMALL; a larger one works", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errTooSmall(c, tag);
        }
        snprintf(name, sizeof(name), "errors (%s): a missing key is NOT_FOUND for get, 0 for exists and remove", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errNotFound(c, tag);
        }
        snprintf(name, sizeof(name), "errors (%s): put without replace is EXISTS and changes nothing; replace works",
                 tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errExistsAndReplace(c, tag);
        }
        snprintf(name, sizeof(name), "errors (%s): mc_exists and mc_remove", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errExistsRemove(c, tag);
        }
        mcClose(&c);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== 3. a segment hosted by a client =========================================== */

static void hostedPutGet(mc_client *c, redisContext *r, const char *key, size_t n, int transport,
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

static void testHostedSegment(void) {
    const char *group = "hosted segment";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *host = NULL, *ctcp = NULL, *cshm = NULL;
    long long host_id = -1;
    const size_t n = 1 * MiB + 7;

    TEST("hosted segment: mc_mount 64 MiB \"host-a\" registers it with the server") {
        host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        CHECK(r != NULL);
        if (host) {
            int rc = mc_mount(host, 64 * MiB, "host-a");
            if (rc != MC_OK) fprintf(stderr, "  mc_mount: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(host));
            CHECK_EQ(rc, MC_OK);
            host_id = mc_mount_id(host);
            CHECK(host_id > 1);
        }
        CHECK_EQ(segInfoInt(r, "host-a", "id"), host_id);
        CHECK_EQ(segInfoInt(r, "host-a", "size"), (long long)(64 * MiB));
        CHECK_EQ(segInfoInt(r, "host-a", "used"), 0);
    }
    TEST("hosted segment: a put preferring host-a over tcp lands there and reads back") {
        ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        hostedPutGet(ctcp, r, "ha:tcp", n, MC_TRANSPORT_TCP, host_id);
    }
    TEST("hosted segment: a put preferring host-a over shm lands there and reads back") {
        cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        hostedPutGet(cshm, r, "ha:shm", n, MC_TRANSPORT_SHM, host_id);
    }
    TEST("hosted segment: each value reads back over the other transport") {
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("ha:shm", n));
        CHECK(getSame(ctcp, "ha:shm", v, n, MC_TRANSPORT_TCP));
        fillPattern(v, n, seedOf("ha:tcp", n));
        CHECK(getSame(cshm, "ha:tcp", v, n, MC_TRANSPORT_SHM));
        free(v);
    }
    TEST("hosted segment: SEGMENT.INFO host-a accounts for both objects") {
        long long used = segInfoInt(r, "host-a", "used");
        CHECK(used >= (long long)(2 * n));
        CHECK(used < (long long)(64 * MiB));
        CHECK_EQ(segInfoInt(r, "host-a", "objects"), 2);
        if (used < (long long)(2 * n)) fprintf(stderr, "  used %lld\n", used);
    }
    TEST("hosted segment: the hosting handle reads its own segment") {
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("ha:tcp", n));
        CHECK(getSame(host, "ha:tcp", v, n, MC_TRANSPORT_AUTO));
        free(v);
    }
    TEST("hosted segment: its abstract unix socket admits only the host's user (as a 0755 file did)") {
        /* Run as root, a child turns into nobody and must be refused; run
         * as anyone else, the same user is admitted (PING answers). */
        char ep[300];
        segEndpoint(r, "host-a", "unix://@", ep, sizeof(ep));
        CHECK(ep[0] != '\0');
        int as_root = geteuid() == 0;
        pid_t pid = ep[0] ? fork() : -1;
        if (pid == 0) {
            if (as_root && setuid(65534) != 0) _exit(3);
            struct sockaddr_un sa;
            memset(&sa, 0, sizeof(sa));
            sa.sun_family = AF_UNIX;
            size_t nl = strlen(ep + 8);
            memcpy(sa.sun_path + 1, ep + 8, nl); /* sun_path[0] = 0: abstract */
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl)))
                _exit(4);
            /* Refused, the host may have written its reason and closed
             * before this write: EPIPE then, and the reason is still there
             * to read. */
            if (write(fd, "PING\r\n", 6) != 6 && !(as_root && (errno == EPIPE || errno == ECONNRESET))) _exit(5);
            char buf[256];
            ssize_t got = read(fd, buf, sizeof(buf) - 1);
            buf[got > 0 ? got : 0] = '\0';
            const char *want = as_root ? "-ERR unix socket peers must run as the hosting process's user" : "+PONG";
            _exit(strncmp(buf, want, strlen(want)) ? 6 : 0);
        }
        int status = -1;
        if (pid > 0) waitpid(pid, &status, 0);
        CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (pid > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            fprintf(stderr, "  child (%s) status %d\n", as_root ? "nobody" : "same user", status);
    }
    TEST("hosted segment: a name ending in \":0\" gets the listener's port (mc_mount_name)") {
        mc_client *h2 = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(h2 != NULL);
        CHECK(mc_mount_name(h2) == NULL); /* hosts nothing yet */
        CHECK_EQ(mc_set_host_ports(h2, 2000, 1000), MC_ERR_INVALID);
        CHECK_EQ(mc_set_host_ports(h2, 0, 70000), MC_ERR_INVALID);
        CHECK_EQ(mc_set_host_ports(h2, 0, 0), MC_OK);
        if (h2 && mc_mount(h2, 4 * MiB, "rank-host:0") == MC_OK) {
            const char *name = mc_mount_name(h2);
            char ep[300], want[300];
            segEndpoint(r, name ? name : "?", "tcp://", ep, sizeof(ep));
            const char *port = strrchr(ep, ':');
            snprintf(want, sizeof(want), "rank-host%s", port ? port : ":?");
            CHECK(name != NULL && port != NULL && !strcmp(name, want));
            CHECK_EQ(segInfoInt(r, name ? name : "?", "id"), mc_mount_id(h2));
            if (name == NULL || strcmp(name, want)) fprintf(stderr, "  name %s, endpoint %s\n", name, ep);
        } else {
            CHECK(0);
        }
        mcClose(&h2);
    }
    TEST("mc_putv: one object from a header and a payload in any host memory, read back whole") {
        char hdr[28], *payload = xmalloc(MiB), *back = xmalloc(MiB + 28);
        memset(hdr, 'H', sizeof(hdr));
        fillPattern(payload, MiB, seedOf("putv", MiB));
        struct iovec iov[2] = {{hdr, sizeof(hdr)}, {payload, MiB}};
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(mc_putv(ctcp, "putv:k", 6, iov, 2, NULL), MC_OK);
            CHECK_EQ(mc_putv(ctcp, "putv:k", 6, iov, 2, NULL), MC_ERR_EXISTS);
            CHECK_EQ(mc_get(ctcp, "putv:k", 6, back, MiB + 28), (long long)(MiB + 28));
            CHECK(!memcmp(back, hdr, 28) && !memcmp(back + 28, payload, MiB));
            struct iovec none[1] = {{hdr, 0}};
            CHECK_EQ(mc_putv(ctcp, "putv:e", 6, none, 1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_putv(ctcp, "putv:e", 6, iov, 0, NULL), MC_ERR_INVALID);
        }
        free(payload);
        free(back);
    }
    TEST("hosted segment: prefer_hint passes over a segment that does not exist; plain prefer refuses it") {
        char v[100];
        memset(v, 'h', sizeof(v));
        mc_put_opts o = {0};
        o.prefer = "no-such-host:1";
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK(put(ctcp, "hint:strict", v, sizeof(v), &o) < 0);
            CHECK_EQ(mc_exists(ctcp, "hint:strict", 11), 0);
            o.prefer_hint = 1;
            CHECK_EQ(put(ctcp, "hint:lax", v, sizeof(v), &o), MC_OK);
            o.prefer = "host-a"; /* one that exists is still tried first */
            CHECK_EQ(put(ctcp, "hint:host-a", v, sizeof(v), &o), MC_OK);
            long long segs[4], offs[4];
            CHECK_EQ(replicaList(r, "hint:host-a", segs, offs, 4), 1);
            CHECK_EQ(segs[0], host_id);
        }
    }
    mcClose(&ctcp);
    mcClose(&cshm);
    mcClose(&host);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 4. replica fallback ========================================================= */

/* The helper process: hosts a segment and sleeps until killed. It reports
 * "R <segment id>" or "E <reason>" on the inherited pipe fd. */
static int hostChildMain(int argc, char **argv) {
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
static pid_t spawnHostChild(const char *uri, const char *name, size_t size, long long *segid) {
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

static void testReplicaFallback(void) {
    const char *group = "replica fallback";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--owner-ttl", "60000", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    const size_t n = 4 * MiB + 5;
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf("fb:key", n));
    long long child_seg = -1;
    pid_t child = -1;
    mc_client *writer = NULL;

    TEST("replica fallback: a helper process hosts segment fb-child") {
        child = spawnHostChild(s.unix_uri, "fb-child", 16 * MiB, &child_seg);
        CHECK(child > 0);
        CHECK(child_seg > 1);
        CHECK_EQ(segInfoInt(r, "fb-child", "id"), child_seg);
    }
    TEST("replica fallback: a put with 2 replicas, preferring fb-child, puts one there and one in self") {
        writer = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(writer != NULL);
        if (writer) {
            mc_put_opts o = {0};
            o.replicas = 2;
            o.prefer = "fb-child";
            CHECK_EQ(put(writer, "fb:key", v, n, &o), MC_OK);
        }
        long long segs[4], offs[4];
        int nrep = replicaList(r, "fb:key", segs, offs, 4);
        CHECK_EQ(nrep, 2);
        /* PREFER goes first (placement.c), so a reader tries the helper's
         * replica first and the fallback is really exercised. */
        if (nrep == 2) {
            CHECK_EQ(segs[0], child_seg);
            CHECK_EQ(segs[1], 1);
        }
        CHECK(getSame(writer, "fb:key", v, n, MC_TRANSPORT_TCP));
    }
    TEST("replica fallback: mc_batch_replicas lists fb-child (its id, name, tcp endpoint) first, then self") {
        char child_tcp[300];
        segEndpoint(r, "fb-child", "tcp://", child_tcp, sizeof(child_tcp));
        mc_key key = {"fb:key", 6};
        mc_replicas d;
        int res = 0;
        CHECK_EQ(writer ? mc_batch_replicas(writer, 1, &key, &d, &res) : MC_ERR_INVALID, 1);
        CHECK_EQ(res, 2);
        CHECK(d.nreplicas == 2 && d.size == n);
        CHECK((long long)d.replicas[0].seg_id == child_seg && !strcmp(d.replicas[0].seg_name, "fb-child"));
        CHECK(child_tcp[0] && !strcmp(d.replicas[0].endpoint, child_tcp));
        CHECK(d.replicas[1].seg_id == 1 && !strcmp(d.replicas[1].seg_name, "self") && d.replicas[1].len == n);
    }
    char child_unix[300] = "";
    TEST("replica fallback: the helper's unix endpoint is an abstract socket (no file)") {
        segEndpoint(r, "fb-child", "unix://", child_unix, sizeof(child_unix));
        CHECK(!strncmp(child_unix, "unix://@mooncake-seg-", 21));
        if (strncmp(child_unix, "unix://@", 8)) fprintf(stderr, "  endpoint: '%s'\n", child_unix);
        else CHECK_EQ(abstractSocketListed(child_unix + 8), 1);
    }
    TEST("replica fallback: after SIGKILL of the helper its segment is still listed (its owner has a connection)") {
        CHECK(child > 0);
        /* Alone, the helper's closed connection would orphan its segment
         * and the probe of its endpoint would unmount it at once (owner.c).
         * r's HEARTBEAT keeps the owner connected: the server believes the
         * host lives, as it must while a host hangs unseen. */
        char owner[400] = "";
        redisReply *info = rcmd(r, "SEGMENT.INFO fb-child");
        if (info && info->type == REDIS_REPLY_ARRAY)
            for (size_t i = 0; i + 1 < info->elements; i += 2)
                if (info->element[i]->type == REDIS_REPLY_STRING && !strcmp(info->element[i]->str, "owner") &&
                    info->element[i + 1]->type == REDIS_REPLY_STRING)
                    snprintf(owner, sizeof(owner), "%s", info->element[i + 1]->str);
        freeReplyObject(info);
        CHECK(!strncmp(owner, "mc:", 3));
        CHECK(expectOk(rcmd(r, "HEARTBEAT %s", owner), "HEARTBEAT for the helper's owner"));
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            tsUntrack(child);
            child = -1;
        }
        tsSleepMs(50); /* the server notices the closed connection */
        CHECK_EQ(segInfoInt(r, "fb-child", "id"), child_seg);
    }
    TEST("replica fallback: the SIGKILLed helper's unix socket is gone with it, nothing left on disk") {
        /* The kernel drops an abstract name with its last descriptor: no
         * stale /tmp/mooncake-seg-*.sock per killed host, as a path left. */
        if (!strncmp(child_unix, "unix://@", 8)) CHECK_EQ(abstractSocketListed(child_unix + 8), 0);
        else CHECK(0);
    }
    TEST("replica fallback: a fresh tcp handle gets the right bytes from the surviving replica") {
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(getSame(c, "fb:key", v, n, MC_TRANSPORT_TCP));
        mcClose(&c);
    }
    TEST("replica fallback: a fresh shm handle gets the right bytes from the surviving replica") {
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        CHECK(getSame(c, "fb:key", v, n, MC_TRANSPORT_SHM));
        mcClose(&c);
    }
    TEST("replica fallback: ranged reads (tcp, shm, the writer's dead data connection) come from the surviving replica") {
        char *buf = xmalloc(n);
        mc_client *hs[3] = {mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP), mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM), writer};
        for (int i = 0; i < 3; i++) {
            if (!hs[i]) {
                CHECK(hs[i] != NULL);
                continue;
            }
            CHECK_EQ(mc_register(hs[i], buf, n, MC_MEM_HOST), MC_OK);
            memset(buf, 0, n);
            /* Small ranges (one SEG.READV) and large ones, the object's end. */
            mc_range g[4] = {{buf, 0, 1000}, {buf + 1000, 1000, 3000}, {buf + 4000, 4000, 2 * MiB}, {buf + 4000 + 2 * MiB, 4000 + 2 * MiB, n - 4000 - 2 * MiB}};
            mc_kranges item = {"fb:key", 6, g, 4};
            long long res[4];
            int rc = mc_batch_get_ranges(hs[i], 1, &item, res);
            if (rc != 4) fprintf(stderr, "  handle %d: %d (%s)\n", i, rc, lastErr(hs[i]));
            CHECK_EQ(rc, 4);
            CHECK(sameBytes("fb:key in ranges", buf, rc == 4 ? (long long)n : -1, v, n));
            CHECK_EQ(mc_last_transport(hs[i]), i == 1 ? MC_TRANSPORT_SHM : MC_TRANSPORT_TCP);
            CHECK_EQ(mc_unregister(hs[i], buf), MC_OK);
        }
        mcClose(&hs[0]);
        mcClose(&hs[1]);
        free(buf);
    }
    TEST("replica fallback: the writer's handle, whose data connection died, falls back too") {
        CHECK(getSame(writer, "fb:key", v, n, MC_TRANSPORT_TCP));
        /* And again: a failed replica must not break the handle for good. */
        CHECK(getSame(writer, "fb:key", v, n, MC_TRANSPORT_TCP));
    }
    TEST("replica fallback: a batch put with items on the dead helper revokes those, publishes the rest") {
        /* Items preferring fb-child fail their transfer (SEG.WRITEV to a
         * dead listener) and must be revoked: no key, no pending put. */
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        char a[4096], b[4096];
        fillPattern(a, sizeof(a), seedOf("fb:b0", sizeof(a)));
        fillPattern(b, sizeof(b), seedOf("fb:b1", sizeof(b)));
        mc_kv items[2] = {{"fb:b0", 5, a, sizeof(a)}, {"fb:b1", 5, b, sizeof(b)}};
        int results[2] = {1, 1};
        mc_put_opts o = {0};
        o.prefer = "fb-child";
        if (c) {
            CHECK_EQ(mc_batch_put(c, 2, items, &o, results), 0);
            CHECK(results[0] < 0 && results[1] < 0);
            CHECK_EQ(mc_exists(c, "fb:b0", 5), 0);
            CHECK_EQ(mc_exists(c, "fb:b1", 5), 0);
            redisReply *rep = rcmd(r, "OBJECT.INFO fb:b0");
            CHECK(rep && rep->type == REDIS_REPLY_NIL);
            freeReplyObject(rep);
            /* Placed in self, the same batch goes through (no stale pending
             * put is left to refuse it with EXISTS). */
            o.prefer = "self";
            CHECK_EQ(mc_batch_put(c, 2, items, &o, results), 2);
            for (int i = 0; i < 2; i++)
                if (results[i] != MC_OK) fprintf(stderr, "  item %d: %s (%s)\n", i, mc_strerror(results[i]), lastErr(c));
            CHECK(getSame(c, "fb:b1", b, sizeof(b), MC_TRANSPORT_TCP));
        } else {
            CHECK(c != NULL);
        }
        mcClose(&c);
    }
    mcClose(&writer);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        tsUntrack(child);
    }
    rClose(&r);
    free(v);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 5. lease expiry ================================================================ */

/* One 64 MiB get with a 1 ms lease: LEASE_EXPIRED is right; bytes are
 * acceptable only if the read really ended within about the lease. */
static void leaseExpires(mc_client *c, const char *key, size_t n, char *buf) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    for (int attempt = 0; attempt < 4; attempt++) {
        double t0 = tsNowSec();
        long long got = get(c, key, buf, n);
        double ms = (tsNowSec() - t0) * 1000.0;
        if (got == MC_ERR_LEASE_EXPIRED) return;
        if (got == (long long)n) {
            if (ms > 2.0) {
                fprintf(stderr, "  mc_get of %zu bytes took %.1f ms with a 1 ms lease, yet returned the bytes\n", n,
                        ms);
                CHECK_EQ(got, MC_ERR_LEASE_EXPIRED);
                return;
            }
            continue; /* improbably fast: try again */
        }
        fprintf(stderr, "  mc_get: %lld %s (%s) after %.1f ms\n", got, mc_strerror((int)got), lastErr(c), ms);
        CHECK_EQ(got, MC_ERR_LEASE_EXPIRED);
        return;
    }
}

static void testLeaseExpiry(void) {
    const char *group = "lease expiry";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "1", "--segment-size", "128mb", NULL), &s, group)) return;
    const size_t n = 64 * MiB;
    char *v = xmalloc(n), *buf = xmalloc(n);
    fillPattern(v, n, seedOf("lease:big", n));
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    TEST("lease expiry: put 64 MiB") {
        CHECK(ctcp != NULL);
        if (ctcp) CHECK_EQ(put(ctcp, "lease:big", v, n, NULL), MC_OK);
    }
    TEST("lease expiry: a 64 MiB get over tcp that outlives a 1 ms lease is LEASE_EXPIRED") {
        leaseExpires(ctcp, "lease:big", n, buf);
    }
    TEST("lease expiry: a 64 MiB get over shm that outlives a 1 ms lease is LEASE_EXPIRED") {
        leaseExpires(cshm, "lease:big", n, buf);
    }
    TEST("lease expiry: a ranged read of 64 MiB in 4 ranges that outlives a 1 ms lease is LEASE_EXPIRED in each") {
        for (int p = 0; p < 2; p++) {
            mc_client *c = p ? cshm : ctcp;
            if (!c || mc_register(c, buf, n, MC_MEM_HOST) != MC_OK) {
                CHECK(0);
                continue;
            }
            size_t q = n / 4;
            mc_range g[4] = {{buf, 0, q}, {buf + q, q, q}, {buf + 2 * q, 2 * q, q}, {buf + 3 * q, 3 * q, n - 3 * q}};
            mc_kranges item = {"lease:big", 9, g, 4};
            for (int attempt = 0; attempt < 4; attempt++) {
                long long res[4];
                double t0 = tsNowSec();
                int rc = mc_batch_get_ranges(c, 1, &item, res);
                double ms = (tsNowSec() - t0) * 1000.0;
                if (rc == 4 && ms <= 2.0) continue; /* improbably fast: try again */
                CHECK_EQ(rc, 0);
                for (int i = 0; i < 4; i++) CHECK_EQ(res[i], MC_ERR_LEASE_EXPIRED);
                if (rc != 0) fprintf(stderr, "  %s: %d ranges read in %.1f ms with a 1 ms lease\n", transportName(p ? MC_TRANSPORT_SHM : MC_TRANSPORT_TCP), rc, ms);
                break;
            }
            CHECK_EQ(mc_unregister(c, buf), MC_OK);
        }
    }
    TEST("lease expiry: with lease-ttl 10000 again the same gets return the bytes") {
        redisContext *r = rTcp(&s);
        CHECK(expectOk(rcmd(r, "CONFIG SET lease-ttl 10000"), "CONFIG SET lease-ttl"));
        rClose(&r);
        CHECK(getSame(ctcp, "lease:big", v, n, MC_TRANSPORT_TCP));
        CHECK(getSame(cshm, "lease:big", v, n, MC_TRANSPORT_SHM));
    }
    mcClose(&ctcp);
    mcClose(&cshm);
    free(v);
    free(buf);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 6. threads ======================================================================= */

/* A value: this header, then a payload regenerated from (key, version). A
 * read that mixes two versions, or a stale tail, fails the checksum or the
 * regeneration. */
typedef struct {
    uint32_t magic;
    uint32_t key;
    uint64_t version;
    uint64_t len;        /* whole value, header included */
    uint64_t sum;        /* fnv1a of the payload */
} ccHeader;

#define CC_MAGIC 0x4D43763Fu
#define CC_KEYS 4
#define CC_MAX (64 * KiB + sizeof(ccHeader))
#define CC_THREADS 4
#define CC_ITERS 250

static size_t ccLen(int key, uint64_t version) {
    return sizeof(ccHeader) + 4 * KiB + (size_t)(mix64(version * 131 + (uint64_t)key) % (60 * KiB));
}

static uint64_t ccSeed(int key, uint64_t version) { return mix64(version ^ ((uint64_t)key << 56)); }

static size_t ccMake(char *buf, int key, uint64_t version) {
    size_t len = ccLen(key, version);
    ccHeader h = {CC_MAGIC, (uint32_t)key, version, len, 0};
    fillPattern(buf + sizeof(h), len - sizeof(h), ccSeed(key, version));
    h.sum = fnv1a(buf + sizeof(h), len - sizeof(h));
    memcpy(buf, &h, sizeof(h));
    return len;
}

/* NULL if buf[0..n) is a whole version of key, else what is wrong. */
static const char *ccCheck(const char *buf, long long n, int key, char *scratch) {
    ccHeader h;
    if (n < (long long)sizeof(h)) return "shorter than the header";
    memcpy(&h, buf, sizeof(h));
    if (h.magic != CC_MAGIC) return "bad magic";
    if (h.key != (uint32_t)key) return "the value of another key";
    if (h.len != (uint64_t)n) return "length differs from the header's";
    if (h.len != ccLen(key, h.version)) return "length does not match the version";
    if (fnv1a(buf + sizeof(h), (size_t)n - sizeof(h)) != h.sum) return "checksum mismatch (torn read)";
    fillPattern(scratch, (size_t)n - sizeof(h), ccSeed(key, h.version));
    if (memcmp(scratch, buf + sizeof(h), (size_t)n - sizeof(h)) != 0) return "payload differs from its version";
    return NULL;
}

typedef struct {
    mc_client *c;
    int id;
    long long deadline_ms;
    int puts_ok, puts_busy, gets_ok, failures;
    char first_failure[256];
} ccWorker;

static void ccFail(ccWorker *w, const char *fmt, ...) {
    if (w->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first_failure, sizeof(w->first_failure), fmt, ap);
        va_end(ap);
    }
}

static void *ccThread(void *arg) {
    ccWorker *w = arg;
    char *buf = xmalloc(CC_MAX), *scratch = xmalloc(CC_MAX);
    uint64_t rng = mix64((uint64_t)w->id + 77);
    mc_put_opts replace = {0};
    replace.replace = 1;
    for (int i = 0; i < CC_ITERS && tsNowMs() < w->deadline_ms; i++) {
        rng = mix64(rng);
        int key = (int)(rng % CC_KEYS);
        char k[32];
        snprintf(k, sizeof(k), "cc:%d", key);
        if ((rng >> 20) % 3 == 0) {
            uint64_t version = ((uint64_t)(w->id + 1) << 32) | (uint64_t)(i + 1);
            size_t len = ccMake(buf, key, version);
            int rc = mc_put(w->c, k, strlen(k), buf, len, &replace);
            if (rc == MC_OK) w->puts_ok++;
            else if (rc == MC_ERR_EXISTS) w->puts_busy++; /* another put of k in flight */
            else ccFail(w, "thread %d: mc_put(%s): %d %s (%s)", w->id, k, rc, mc_strerror(rc), lastErr(w->c));
        } else {
            long long n = mc_get(w->c, k, strlen(k), buf, CC_MAX);
            if (n < 0) {
                ccFail(w, "thread %d: mc_get(%s): %lld %s (%s)", w->id, k, n, mc_strerror((int)n), lastErr(w->c));
                continue;
            }
            const char *why = ccCheck(buf, n, key, scratch);
            if (why) ccFail(w, "thread %d: mc_get(%s) returned %lld bytes: %s", w->id, k, n, why);
            else w->gets_ok++;
        }
    }
    free(buf);
    free(scratch);
    return NULL;
}

/* Runs the workers on the given handles (one per thread, or one shared). */
static void ccRun(mc_client **handles, int nhandles) {
    for (int h = 0; h < nhandles; h++)
        if (!handles[h]) {
            CHECK(handles[h] != NULL);
            return;
        }
    ccWorker w[CC_THREADS];
    pthread_t t[CC_THREADS];
    long long deadline = tsNowMs() + 10000;
    for (int i = 0; i < CC_THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = handles[i % nhandles];
        w[i].id = i;
        w[i].deadline_ms = deadline;
        CHECK(pthread_create(&t[i], NULL, ccThread, &w[i]) == 0);
    }
    int puts_ok = 0, puts_busy = 0, gets_ok = 0, failures = 0;
    for (int i = 0; i < CC_THREADS; i++) {
        pthread_join(t[i], NULL);
        puts_ok += w[i].puts_ok;
        puts_busy += w[i].puts_busy;
        gets_ok += w[i].gets_ok;
        failures += w[i].failures;
        if (w[i].failures) fprintf(stderr, "  %d failures, the first: %s\n", w[i].failures, w[i].first_failure);
    }
    CHECK_EQ(failures, 0);
    CHECK(puts_ok > 0);
    CHECK(gets_ok > 0);
    fprintf(stderr, "  (puts %d, refused while another was in progress %d, whole gets %d)\n", puts_ok, puts_busy,
            gets_ok);
}

/* Every key gets a first version, so that every later get has one to find. */
static void ccPopulate(mc_client *c) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char *buf = xmalloc(CC_MAX);
    mc_put_opts replace = {0};
    replace.replace = 1;
    for (int key = 0; key < CC_KEYS; key++) {
        char k[32];
        snprintf(k, sizeof(k), "cc:%d", key);
        size_t len = ccMake(buf, key, 0);
        CHECK_EQ(put(c, k, buf, len, &replace), MC_OK);
    }
    free(buf);
}

static void testConcurrency(void) {
    const char *group = "threads";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    TEST("threads: 4 handles (2 shm, 2 tcp) replace and read 4 keys; every get is one whole version") {
        mc_client *h[CC_THREADS];
        for (int i = 0; i < CC_THREADS; i++)
            h[i] = i % 2 ? mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP) : mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        ccPopulate(h[0]);
        ccRun(h, CC_THREADS);
        for (int i = 0; i < CC_THREADS; i++) mcClose(&h[i]);
    }
    TEST("threads: 4 threads share one handle; every get is one whole version") {
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        ccPopulate(c);
        ccRun(&c, 1);
        mcClose(&c);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== 7. a writer killed in the middle of a put =========================================== */


/* The child: PUT.START key size on a raw connection, then a SEG.WRITE of
 * the whole extent whose payload stops after `partial` bytes; says 'R' on
 * wfd and waits to be killed. Raw syscalls only (it is a bare fork). */
static void abandonedWriter(pid_t parent, int port, const char *key, size_t size, size_t partial, int wfd) {
    tsDieWithParent(parent);
    int fd = tsConnectTcp(port);
    char req[512], rep[512];
    int n = snprintf(req, sizeof(req), "*3\r\n$9\r\nPUT.START\r\n$%zu\r\n%s\r\n$%d\r\n%zu\r\n", strlen(key), key,
                     snprintf(NULL, 0, "%zu", size), size);
    if (fd < 0 || tsWriteAll(fd, req, (size_t)n) != 0) _exit(1);
    size_t got = 0;
    int lines = 0;
    long long seg = -1, off = -1, len = -1;
    /* The reply: *1 *3 :seg :offset :length, five lines; or one error line. */
    while (got < sizeof(rep) - 1) {
        ssize_t r = read(fd, rep + got, sizeof(rep) - 1 - got);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) lines += rep[got + (size_t)i] == '\n';
        got += (size_t)r;
        if ((rep[0] == '-' && lines >= 1) || lines >= 5) break;
    }
    rep[got] = '\0';
    if (rep[0] != '*' || sscanf(rep, "*%*d\r\n*3\r\n:%lld\r\n:%lld\r\n:%lld", &seg, &off, &len) != 3 ||
        len != (long long)size) {
        if (tsWriteAll(wfd, "E", 1)) {}
        _exit(1);
    }
    char segs[32], offs[32];
    int sl = snprintf(segs, sizeof(segs), "%lld", seg), ol = snprintf(offs, sizeof(offs), "%lld", off);
    n = snprintf(req, sizeof(req), "*4\r\n$9\r\nSEG.WRITE\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%zu\r\n", sl, segs, ol, offs,
                 size);
    char *payload = malloc(partial);
    if (!payload) _exit(1);
    memset(payload, 'x', partial);
    if (tsWriteAll(fd, req, (size_t)n) != 0 || tsWriteAll(fd, payload, partial) != 0) _exit(1);
    if (tsWriteAll(wfd, "R", 1)) {}
    for (;;) pause();
}

static void testAbandonedPut(void) {
    const char *group = "abandoned put";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--put-timeout", "200", NULL), &s, group)) return;
    const char *key = "ab:key";
    const size_t n = 1 * MiB;
    redisContext *r = rTcp(&s);
    mc_client *c = NULL;
    pid_t child = -1;
    long long t_ready = 0;

    TEST("abandoned put: a raw writer does PUT.START of 1 MiB and a partial SEG.WRITE, then is SIGKILLed") {
        int p[2];
        CHECK(pipe(p) == 0);
        pid_t parent = getpid();
        child = fork();
        if (child == 0) {
            close(p[0]);
            abandonedWriter(parent, s.port, key, n, 300 * KiB, p[1]);
        }
        close(p[1]);
        CHECK(child > 0);
        if (child > 0) tsTrack(child);
        struct pollfd pfd = {p[0], POLLIN, 0};
        char word = 0;
        if (poll(&pfd, 1, 10000) == 1 && read(p[0], &word, 1) == 1) t_ready = tsNowMs();
        close(p[0]);
        CHECK_EQ(word, 'R');
        /* While the writer lives: pending, not readable. */
        CHECK(expectError("NOTREADY", rcmd(r, "GET.REPLICAS %s", key), "GET.REPLICAS while the writer lives"));
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            tsUntrack(child);
        }
    }
    TEST("abandoned put: the key stays pending: GET.REPLICAS is NOTREADY, GET nil, EXISTS 0, mc_get NOT_READY") {
        CHECK(expectError("NOTREADY", rcmd(r, "GET.REPLICAS %s", key), "GET.REPLICAS"));
        redisReply *g = rcmd(r, "GET %s", key);
        CHECK(g && g->type == REDIS_REPLY_NIL);
        if (!(g && g->type == REDIS_REPLY_NIL)) showReply("GET", g);
        freeReplyObject(g);
        redisReply *e = rcmd(r, "EXISTS %s", key);
        CHECK_EQ(replyInt(e), 0);
        freeReplyObject(e);
        c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(c != NULL);
        if (c) {
            char *buf = xmalloc(n);
            long long got = get(c, key, buf, n);
            if (got != MC_ERR_NOT_READY) fprintf(stderr, "  mc_get: %lld %s (%s)\n", got, mc_strerror((int)got), lastErr(c));
            CHECK_EQ(got, MC_ERR_NOT_READY);
            free(buf);
        }
    }
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf(key, n));
    TEST("abandoned put: within put-timeout a new put of the key is EXISTS") {
        /* Only meaningful while the pending put is surely younger than
         * put-timeout (200 ms): skipped on a machine too slow for that. */
        if (c && t_ready && tsNowMs() - t_ready < 100) {
            int rc = mc_put(c, key, strlen(key), v, n, NULL);
            CHECK_EQ(rc, MC_ERR_EXISTS);
        } else if (!c) {
            CHECK(c != NULL);
        } else {
            fprintf(stderr, "  (not checked: %lld ms have passed since the PUT.START)\n", tsNowMs() - t_ready);
        }
    }
    TEST("abandoned put: after put-timeout a new put takes the key over and reads back") {
        if (t_ready) {
            long long wait = t_ready + 300 - tsNowMs();
            if (wait > 0) tsSleepMs(wait);
        }
        CHECK(c != NULL);
        if (c) {
            CHECK_EQ(put(c, key, v, n, NULL), MC_OK);
            CHECK(getSame(c, key, v, n, MC_TRANSPORT_AUTO));
        }
        CHECK(redisGetSame(r, key, v, n));
    }
    free(v);
    mcClose(&c);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 8. requirepass ========================================================================= */

/* A handle with a bad password must not work: NULL from mc_connect with a
 * reason, or MC_ERR_AUTH from its first call (and nothing stored). */
static void refused(const char *uri, const char *password, redisContext *admin) {
    char err[256] = "";
    mc_client *c = mc_connect(uri, password, err, sizeof(err));
    if (!c) {
        CHECK(err[0] != '\0');
        return;
    }
    char v[16] = "should not land";
    int rc = mc_put(c, "auth:intruder", 13, v, sizeof(v), NULL);
    CHECK_EQ(rc, MC_ERR_AUTH);
    char buf[16];
    CHECK_EQ(mc_get(c, "auth:ok", 7, buf, sizeof(buf)), MC_ERR_AUTH);
    mc_close(c);
    redisReply *e = rcmd(admin, "EXISTS auth:intruder");
    CHECK_EQ(replyInt(e), 0);
    freeReplyObject(e);
}

static void testAuth(void) {
    const char *group = "auth";
    const char *pw = "s3cret-pw";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--requirepass", pw, NULL), &s, group)) return;
    redisContext *admin = rTcp(&s);
    if (admin) freeReplyObject(rcmd(admin, "AUTH %s", pw));

    TEST("auth: a wrong password is refused over tcp and over the unix socket") {
        refused(s.tcp_uri, "wrong", admin);
        refused(s.unix_uri, "wrong", admin);
    }
    TEST("auth: no password is refused") {
        refused(s.tcp_uri, NULL, admin);
        refused(s.unix_uri, NULL, admin);
    }
    TEST("auth: the right password works over tcp and over shm") {
        char v[5000];
        fillPattern(v, sizeof(v), seedOf("auth:ok", sizeof(v)));
        mc_client *ctcp = mcOpen(s.tcp_uri, pw, MC_TRANSPORT_TCP);
        mc_client *cshm = mcOpen(s.unix_uri, pw, MC_TRANSPORT_SHM);
        CHECK(ctcp != NULL && cshm != NULL);
        if (ctcp && cshm) {
            CHECK_EQ(put(ctcp, "auth:ok", v, sizeof(v), NULL), MC_OK);
            CHECK(getSame(cshm, "auth:ok", v, sizeof(v), MC_TRANSPORT_SHM));
            CHECK_EQ(put(cshm, "auth:ok2", v, sizeof(v), NULL), MC_OK);
            CHECK(getSame(ctcp, "auth:ok2", v, sizeof(v), MC_TRANSPORT_TCP));
        }
        mcClose(&ctcp);
        mcClose(&cshm);
    }
    TEST("auth: without AUTH, SHM.ATTACH, SEG.READ and SEG.WRITE get -NOAUTH") {
        redisContext *u = rUnix(&s), *t = rTcp(&s);
        CHECK(u != NULL && t != NULL);
        CHECK(expectError("NOAUTH", rcmd(u, "SHM.ATTACH 1"), "SHM.ATTACH (unix, no AUTH)"));
        CHECK(expectError("NOAUTH", rcmd(t, "SEG.READ 1 0 16"), "SEG.READ (tcp, no AUTH)"));
        CHECK(expectError("NOAUTH", rcmd(u, "SEG.READ 1 0 16"), "SEG.READ (unix, no AUTH)"));
        CHECK(expectError("NOAUTH", rcmd(t, "SEG.WRITE 1 0 %b", "0123456789abcdef", (size_t)16),
                          "SEG.WRITE (tcp, no AUTH)"));
        rClose(&u);
        rClose(&t);
    }
    TEST("auth: after AUTH, SHM.ATTACH on the unix socket answers [1, size]") {
        redisContext *u = rUnix(&s);
        CHECK(u != NULL);
        if (u) {
            CHECK(expectOk(rcmd(u, "AUTH %s", pw), "AUTH"));
            redisReply *a = rcmd(u, "SHM.ATTACH 1");
            int ok = a && a->type == REDIS_REPLY_ARRAY && a->elements == 2 && replyInt(a->element[0]) == 1 &&
                     replyInt(a->element[1]) == (long long)(64 * MiB);
            if (!ok) showReply("SHM.ATTACH 1", a);
            CHECK(ok);
            freeReplyObject(a);
        }
        rClose(&u);
    }
    rClose(&admin);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 9. forged data-plane requests ============================================================ */

#define FG_LEN 4000 /* not a multiple of any allocation unit: extents end mid-unit */

/* SEG.WRITE seg off payload; expect "OK" or an error prefix. */
static int segWrite(redisContext *r, const char *seg, const char *off, const void *p, size_t n, const char *expect,
                    const char *what) {
    redisReply *rep = rcmd(r, "SEG.WRITE %s %s %b", seg, off, p, n);
    if (!strcmp(expect, "OK")) return expectOk(rep, what);
    return expectError(expect, rep, what);
}

static int segReadErr(redisContext *r, const char *seg, const char *off, const char *len, const char *what) {
    return expectError("ERR", rcmd(r, "SEG.READ %s %s %s", seg, off, len), what);
}

static void lld(char *buf, size_t cap, long long v) { snprintf(buf, cap, "%lld", v); }

/* An offset in segment 1 at least 64 KiB away from the given extents. */
static long long farOffset(long long segsize, const long long *offs, int n) {
    long long cand[] = {segsize - 2 * FG_LEN, segsize / 2, segsize / 4, 0};
    for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++) {
        int clear = 1;
        for (int j = 0; j < n; j++)
            if (cand[i] + FG_LEN + 65536 > offs[j] && cand[i] < offs[j] + FG_LEN + 65536) clear = 0;
        if (clear) return cand[i];
    }
    return segsize - 2 * FG_LEN;
}

static void testForged(void) {
    const char *group = "forged data plane";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "16mb", NULL), &s, group)) return;
    const long long segsize = 16 * (long long)MiB;
    redisContext *r = rTcp(&s);
    char c_pat[FG_LEN], p_pat[FG_LEN], junk[FG_LEN + 16];
    fillPattern(c_pat, FG_LEN, seedOf("fg:c", FG_LEN));
    fillPattern(p_pat, FG_LEN, seedOf("fg:p", FG_LEN));
    fillPattern(junk, sizeof(junk), seedOf("junk", 1));
    long long cseg = -1, coff = -1, pseg = -1, poff = -1, qseg = -1, qoff = -1;
    char o[64];

    TEST("forged: the honest path works: PUT.START, SEG.WRITE (whole and part), PUT.END, SEG.READ, GET") {
        CHECK(r != NULL);
        CHECK(putStartReplica(rcmd(r, "PUT.START fg:c %d", FG_LEN), &cseg, &coff));
        CHECK_EQ(cseg, 1);
        lld(o, sizeof(o), coff);
        CHECK(segWrite(r, "1", o, c_pat, FG_LEN, "OK", "SEG.WRITE into the pending extent"));
        CHECK(expectOk(rcmd(r, "PUT.END fg:c"), "PUT.END fg:c"));
        CHECK(redisGetSame(r, "fg:c", c_pat, FG_LEN));
        redisReply *rd = rcmd(r, "SEG.READ 1 %lld %d", coff, FG_LEN);
        CHECK(rd && rd->type == REDIS_REPLY_STRING && rd->len == FG_LEN && !memcmp(rd->str, c_pat, FG_LEN));
        if (!(rd && rd->type == REDIS_REPLY_STRING)) showReply("SEG.READ of the whole extent", rd);
        freeReplyObject(rd);
        rd = rcmd(r, "SEG.READ 1 %lld 20", coff + 100);
        CHECK(rd && rd->type == REDIS_REPLY_STRING && rd->len == 20 && !memcmp(rd->str, c_pat + 100, 20));
        freeReplyObject(rd);

        CHECK(putStartReplica(rcmd(r, "PUT.START fg:p %d", FG_LEN), &pseg, &poff));
        CHECK_EQ(pseg, 1);
        lld(o, sizeof(o), poff);
        CHECK(segWrite(r, "1", o, p_pat, FG_LEN, "OK", "SEG.WRITE of a whole pending extent"));
        /* A part of the extent may be written on its own, too. */
        fillPattern(p_pat + 1000, 24, seedOf("fg:p:part", 24));
        lld(o, sizeof(o), poff + 1000);
        CHECK(segWrite(r, "1", o, p_pat + 1000, 24, "OK", "SEG.WRITE inside a pending extent"));
    }
    TEST("forged: SEG.WRITE outside any extent, across either end, into a complete object: -ERR") {
        long long exts[] = {coff, poff};
        long long far = farOffset(segsize, exts, 2);
        lld(o, sizeof(o), far);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE outside any extent"));
        lld(o, sizeof(o), poff + FG_LEN - 8);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE across the end of a pending extent"));
        lld(o, sizeof(o), poff + FG_LEN);
        CHECK(segWrite(r, "1", o, junk, 1, "ERR", "SEG.WRITE just past the end of a pending extent"));
        if (poff >= 8) {
            lld(o, sizeof(o), poff - 8);
            CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE across the start of a pending extent"));
        }
        lld(o, sizeof(o), poff);
        CHECK(segWrite(r, "1", o, junk, FG_LEN + 1, "ERR", "SEG.WRITE one byte longer than the extent"));
        lld(o, sizeof(o), coff);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE into a complete object"));
        lld(o, sizeof(o), coff + FG_LEN - 16);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE into the tail of a complete object"));
        lld(o, sizeof(o), segsize - 8);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE across the end of the segment"));
    }
    TEST("forged: SEG.WRITE with a bad segment id or offset (negative, huge, wrapping): -ERR") {
        lld(o, sizeof(o), poff);
        CHECK(segWrite(r, "999999", o, junk, 16, "ERR", "SEG.WRITE to segment 999999"));
        CHECK(segWrite(r, "0", o, junk, 16, "ERR", "SEG.WRITE to segment 0"));
        CHECK(segWrite(r, "-1", o, junk, 16, "ERR", "SEG.WRITE to segment -1"));
        CHECK(segWrite(r, "self", o, junk, 16, "ERR", "SEG.WRITE to segment 'self'"));
        CHECK(segWrite(r, "1", "-1", junk, 16, "ERR", "SEG.WRITE at offset -1"));
        char neg[64];
        lld(neg, sizeof(neg), -(poff + 1));
        CHECK(segWrite(r, "1", neg, junk, 16, "ERR", "SEG.WRITE at a negative offset"));
        /* 2^64 - 8: offset + 16 wraps around to 8. */
        CHECK(segWrite(r, "1", "18446744073709551608", junk, 16, "ERR", "SEG.WRITE at 2^64-8 (wraps)"));
        CHECK(segWrite(r, "1", "9223372036854775807", junk, 16, "ERR", "SEG.WRITE at 2^63-1"));
        CHECK(segWrite(r, "1", "9223372036854775800", junk, 16, "ERR", "SEG.WRITE at 2^63-8 (wraps signed)"));
        CHECK(segWrite(r, "1", "18446744073709551616", junk, 16, "ERR", "SEG.WRITE at 2^64"));
        CHECK(segWrite(r, "1", "12abc", junk, 16, "ERR", "SEG.WRITE at offset '12abc'"));
        CHECK(expectError("ERR", rcmd(r, "SEG.WRITE 1 %lld", poff), "SEG.WRITE without a payload"));
    }
    TEST("forged: after all that, both values are exactly what the honest writes put there") {
        CHECK(expectOk(rcmd(r, "PUT.END fg:p"), "PUT.END fg:p"));
        CHECK(redisGetSame(r, "fg:p", p_pat, FG_LEN));
        CHECK(redisGetSame(r, "fg:c", c_pat, FG_LEN));
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(getSame(c, "fg:p", p_pat, FG_LEN, MC_TRANSPORT_AUTO));
        CHECK(getSame(c, "fg:c", c_pat, FG_LEN, MC_TRANSPORT_AUTO));
        mcClose(&c);
    }
    TEST("forged: SEG.READ of a pending extent, across an extent's end, elsewhere, bad ids and offsets: -ERR") {
        CHECK(putStartReplica(rcmd(r, "PUT.START fg:q %d", FG_LEN), &qseg, &qoff));
        lld(o, sizeof(o), qoff);
        CHECK(segReadErr(r, "1", o, "16", "SEG.READ of a pending extent"));
        lld(o, sizeof(o), coff + FG_LEN - 8);
        CHECK(segReadErr(r, "1", o, "16", "SEG.READ across the end of a complete extent"));
        lld(o, sizeof(o), coff);
        CHECK(segReadErr(r, "1", o, "4001", "SEG.READ one byte longer than the extent"));
        CHECK(segReadErr(r, "1", o, "18446744073709551615", "SEG.READ of length 2^64-1"));
        CHECK(segReadErr(r, "1", o, "-1", "SEG.READ of length -1"));
        if (coff >= 8) {
            lld(o, sizeof(o), coff - 8);
            CHECK(segReadErr(r, "1", o, "16", "SEG.READ across the start of a complete extent"));
        }
        long long exts[] = {coff, poff, qoff};
        lld(o, sizeof(o), farOffset(segsize, exts, 3));
        CHECK(segReadErr(r, "1", o, "16", "SEG.READ outside any extent"));
        lld(o, sizeof(o), coff);
        CHECK(segReadErr(r, "999999", o, "16", "SEG.READ of segment 999999"));
        CHECK(segReadErr(r, "1", "-1", "16", "SEG.READ at offset -1"));
        CHECK(segReadErr(r, "1", "18446744073709551608", "16", "SEG.READ at 2^64-8 (wraps)"));
        CHECK(segReadErr(r, "1", "9223372036854775800", "16", "SEG.READ at 2^63-8"));
        /* The pending object is still pending and empty-handed. */
        CHECK(expectError("NOTREADY", rcmd(r, "GET.REPLICAS fg:q"), "GET.REPLICAS fg:q"));
        CHECK(expectOk(rcmd(r, "PUT.REVOKE fg:q"), "PUT.REVOKE fg:q"));
    }
    TEST("forged: SHM.ATTACH over TCP is -ERR; over the unix socket it answers [1, size]") {
        CHECK(expectError("ERR", rcmd(r, "SHM.ATTACH 1"), "SHM.ATTACH over tcp"));
        redisContext *u = rUnix(&s);
        CHECK(u != NULL);
        if (u) {
            redisReply *a = rcmd(u, "SHM.ATTACH 1");
            int ok = a && a->type == REDIS_REPLY_ARRAY && a->elements == 2 && replyInt(a->element[0]) == 1 &&
                     replyInt(a->element[1]) == segsize;
            if (!ok) showReply("SHM.ATTACH 1 over unix", a);
            CHECK(ok);
            freeReplyObject(a);
            CHECK(expectError("ERR", rcmd(u, "SHM.ATTACH 999999"), "SHM.ATTACH of segment 999999"));
        }
        rClose(&u);
        redisReply *p = rcmd(r, "PING");
        CHECK(p && p->type == REDIS_REPLY_STATUS);
        freeReplyObject(p);
    }
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 10. interop with plain Redis clients ======================================================= */

static void testInterop(void) {
    const char *group = "interop";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    const size_t sizes[] = {10, 1 * MiB};
    char *v = xmalloc(MiB);

    TEST("interop: mc_put (shm and tcp) of 10 B and 1 MiB, then a plain GET returns the same bytes") {
        CHECK(r != NULL && cshm != NULL && ctcp != NULL);
        for (size_t i = 0; i < 2 && r && cshm && ctcp; i++) {
            char key[64];
            snprintf(key, sizeof(key), "io:mc:shm:%zu", sizes[i]);
            fillPattern(v, sizes[i], seedOf(key, sizes[i]));
            CHECK_EQ(put(cshm, key, v, sizes[i], NULL), MC_OK);
            CHECK(redisGetSame(r, key, v, sizes[i]));
            snprintf(key, sizeof(key), "io:mc:tcp:%zu", sizes[i]);
            fillPattern(v, sizes[i], seedOf(key, sizes[i]));
            CHECK_EQ(put(ctcp, key, v, sizes[i], NULL), MC_OK);
            CHECK(redisGetSame(r, key, v, sizes[i]));
            redisReply *l = rcmd(r, "STRLEN %s", key);
            CHECK_EQ(replyInt(l), (long long)sizes[i]);
            freeReplyObject(l);
        }
    }
    TEST("interop: SET of 10 B and 1 MiB, then mc_get over shm and over tcp returns the same bytes") {
        for (size_t i = 0; i < 2 && r; i++) {
            char key[64];
            snprintf(key, sizeof(key), "io:set:%zu", sizes[i]);
            fillPattern(v, sizes[i], seedOf(key, sizes[i]));
            CHECK(expectOk(rcmd(r, "SET %s %b", key, v, sizes[i]), "SET"));
            CHECK(getSame(cshm, key, v, sizes[i], MC_TRANSPORT_SHM));
            CHECK(getSame(ctcp, key, v, sizes[i], MC_TRANSPORT_TCP));
        }
    }
    TEST("interop: mc_exists and mc_remove see SET keys; DEL is seen by mc_get") {
        CHECK_EQ(mc_exists(ctcp, "io:set:10", 9), 1);
        CHECK_EQ(mc_remove(ctcp, "io:set:10", 9), 1);
        redisReply *e = rcmd(r, "EXISTS io:set:10");
        CHECK_EQ(replyInt(e), 0);
        freeReplyObject(e);
        freeReplyObject(rcmd(r, "DEL io:mc:tcp:10"));
        char buf[16];
        CHECK_EQ(get(cshm, "io:mc:tcp:10", buf, sizeof(buf)), MC_ERR_NOT_FOUND);
    }
    free(v);
    mcClose(&cshm);
    mcClose(&ctcp);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 11. batches ================================================================================= */

#define BT_N 128
#define BT_LEN (4 * KiB)

static void btKey(char *key, size_t cap, int i) { snprintf(key, cap, "bt:%03d", i); }

/* Batch get of all BT_N keys with a missing one inserted at BT_N/2. */
static void batchGetWithMissing(mc_client *c, char keys[][16], char *vals) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    mc_kv items[BT_N + 1];
    long long results[BT_N + 1];
    char *bufs = xmalloc((BT_N + 1) * BT_LEN);
    memset(bufs, 0, (BT_N + 1) * BT_LEN);
    for (int i = 0, k = 0; i <= BT_N; i++) {
        results[i] = 12345;
        items[i].buf = bufs + (size_t)i * BT_LEN;
        items[i].len = BT_LEN;
        if (i == BT_N / 2) {
            items[i].key = "bt:missing";
            items[i].keylen = 10;
        } else {
            items[i].key = keys[k];
            items[i].keylen = strlen(keys[k]);
            k++;
        }
    }
    int ok = mc_batch_get(c, BT_N + 1, items, results);
    CHECK_EQ(ok, BT_N);
    CHECK_EQ(results[BT_N / 2], MC_ERR_NOT_FOUND);
    int bad = 0;
    for (int i = 0, k = 0; i <= BT_N; i++) {
        if (i == BT_N / 2) continue;
        if (!sameBytes(keys[k], items[i].buf, results[i], vals + (size_t)k * BT_LEN, BT_LEN) && bad++ > 3) break;
        k++;
    }
    CHECK_EQ(bad, 0);
    free(bufs);
}

/* calls=N of INFO commandstats for cmd (lower case), -1 if absent. */
static long long commandCalls(const tsServer *s, const char *cmd) {
    redisContext *r = rTcp(s);
    redisReply *rep = r ? rcmd(r, "INFO commandstats") : NULL;
    long long n = -1;
    char needle[64];
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        const char *p = strstr(rep->str, needle);
        if (p) n = atoll(p + strlen(needle));
    }
    freeReplyObject(rep);
    rClose(&r);
    return n;
}

/* 96 values, every third 100 KiB (its own SEG.WRITE, in place) and the
 * rest 4 KiB + i (vector commands), put over tcp (into segment prefer if
 * given), read back over tcp and over shm byte for byte. */
static void batchMixedTcp(const tsServer *s, mc_client *ctcp, mc_client *cshm, const char *prefer, const char *tag) {
    enum { N = 96 };
    if (!ctcp || !cshm) {
        CHECK(ctcp != NULL && cshm != NULL);
        return;
    }
    static char keys[N][32];
    size_t lens[N], total = 0, offs[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s:%d", tag, i);
        lens[i] = i % 3 == 0 ? 100 * KiB : 4 * KiB + (size_t)i;
        offs[i] = total;
        total += lens[i];
    }
    char *want = xmalloc(total), *got = xmalloc(total), *got2 = xmalloc(total);
    mc_kv items[N];
    int results[N];
    long long gres[N];
    for (int i = 0; i < N; i++) {
        fillPattern(want + offs[i], lens[i], seedOf(keys[i], lens[i]));
        items[i] = (mc_kv){keys[i], strlen(keys[i]), want + offs[i], lens[i]};
    }
    long long wv0 = commandCalls(s, "seg.writev"), rv0 = commandCalls(s, "seg.readv");
    mc_put_opts o = {0};
    o.prefer = prefer;
    CHECK_EQ(mc_batch_put(ctcp, N, items, prefer ? &o : NULL, results), N);
    for (int i = 0; i < N; i++) items[i].buf = got + offs[i];
    memset(got, 0, total);
    CHECK_EQ(mc_batch_get(ctcp, N, items, gres), N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (!sameBytes(keys[i], got + offs[i], gres[i], want + offs[i], lens[i])) bad++;
    CHECK_EQ(bad, 0);
    for (int i = 0; i < N; i++) items[i].buf = got2 + offs[i];
    CHECK_EQ(mc_batch_get(cshm, N, items, gres), N);
    bad = 0;
    for (int i = 0; i < N; i++)
        if (!sameBytes(keys[i], got2 + offs[i], gres[i], want + offs[i], lens[i])) bad++;
    CHECK_EQ(bad, 0);
    if (prefer == NULL) {
        /* The server's own pool: the vectors went through it. */
        CHECK(commandCalls(s, "seg.writev") > (wv0 < 0 ? 0 : wv0));
        CHECK(commandCalls(s, "seg.readv") > (rv0 < 0 ? 0 : rv0));
    } else {
        /* The hosted segment's own listener served them, not the server. */
        CHECK_EQ(commandCalls(s, "seg.writev"), wv0);
        CHECK_EQ(commandCalls(s, "seg.readv"), rv0);
        redisContext *r = rTcp(s);
        long long segs[4], offs2[4];
        CHECK_EQ(replicaList(r, keys[1], segs, offs2, 4), 1);
        CHECK_EQ(segs[0], segInfoInt(r, prefer, "id"));
        rClose(&r);
    }
    free(want);
    free(got);
    free(got2);
}

static void testBatch(void) {
    const char *group = "batch";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    static char keys[BT_N][16];
    char *vals = xmalloc((size_t)BT_N * BT_LEN);
    for (int i = 0; i < BT_N; i++) {
        btKey(keys[i], sizeof(keys[i]), i);
        fillPattern(vals + (size_t)i * BT_LEN, BT_LEN, seedOf(keys[i], BT_LEN));
    }
    mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);

    TEST("batch: mc_batch_put of 128 values of 4 KiB, every result OK") {
        CHECK(c != NULL);
        if (c) {
            mc_kv items[BT_N];
            int results[BT_N];
            for (int i = 0; i < BT_N; i++) {
                items[i] = (mc_kv){keys[i], strlen(keys[i]), vals + (size_t)i * BT_LEN, BT_LEN};
                results[i] = 12345;
            }
            int ok = mc_batch_put(c, BT_N, items, NULL, results);
            CHECK_EQ(ok, BT_N);
            int bad = 0;
            for (int i = 0; i < BT_N; i++)
                if (results[i] != MC_OK && bad++ < 4)
                    fprintf(stderr, "  item %d: %d %s\n", i, results[i], mc_strerror(results[i]));
            CHECK_EQ(bad, 0);
        }
    }
    TEST("batch: mc_batch_get over tcp of the 128 keys and a missing one (NOT_FOUND alone)") {
        batchGetWithMissing(ctcp, keys, vals);
    }
    TEST("batch: mc_batch_get over shm of the 128 keys and a missing one (NOT_FOUND alone)") {
        batchGetWithMissing(cshm, keys, vals);
    }
    TEST("batch: a too-small buffer in a batch get is TOO_SMALL for that item alone") {
        CHECK(c != NULL);
        if (c) {
            char b0[BT_LEN], b1[BT_LEN], b2[BT_LEN];
            mc_kv items[3] = {{keys[0], strlen(keys[0]), b0, BT_LEN},
                              {keys[1], strlen(keys[1]), b1, BT_LEN - 1},
                              {keys[2], strlen(keys[2]), b2, BT_LEN}};
            long long results[3] = {1, 1, 1};
            CHECK_EQ(mc_batch_get(c, 3, items, results), 2);
            CHECK_EQ(results[1], MC_ERR_TOO_SMALL);
            CHECK(sameBytes(keys[0], b0, results[0], vals, BT_LEN));
            CHECK(sameBytes(keys[2], b2, results[2], vals + 2 * BT_LEN, BT_LEN));
        }
    }
    TEST("batch: an existing key in a batch put is EXISTS for that item alone, and keeps its value") {
        CHECK(c != NULL);
        if (c) {
            char n0[BT_LEN], n1[BT_LEN], n2[BT_LEN];
            fillPattern(n0, BT_LEN, seedOf("bt:new0", BT_LEN));
            fillPattern(n1, BT_LEN, seedOf("bt:new1", BT_LEN));
            fillPattern(n2, BT_LEN, seedOf("bt:new2", BT_LEN));
            mc_kv items[3] = {{"bt:new0", 7, n0, BT_LEN}, {keys[5], strlen(keys[5]), n1, BT_LEN}, {"bt:new2", 7, n2, BT_LEN}};
            int results[3] = {1, 1, 1};
            CHECK_EQ(mc_batch_put(c, 3, items, NULL, results), 2);
            CHECK_EQ(results[0], MC_OK);
            CHECK_EQ(results[1], MC_ERR_EXISTS);
            CHECK_EQ(results[2], MC_OK);
            CHECK(getSame(c, keys[5], vals + 5 * BT_LEN, BT_LEN, MC_TRANSPORT_AUTO));
            CHECK(getSame(c, "bt:new0", n0, BT_LEN, MC_TRANSPORT_AUTO));
            CHECK(getSame(c, "bt:new2", n2, BT_LEN, MC_TRANSPORT_AUTO));
        }
    }
    TEST("batch: over tcp, 96 values of 4..100 KiB: small ones share SEG.WRITEV/SEG.READV, byte for byte") {
        batchMixedTcp(&s, ctcp, cshm, NULL, "bm");
    }
    TEST("batch: over tcp into a segment hosted by a client: the host serves the vector commands") {
        mc_client *host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        int rc = host ? mc_mount(host, 32 * MiB, "host-b") : MC_ERR_INVALID;
        CHECK_EQ(rc, MC_OK);
        if (rc == MC_OK) batchMixedTcp(&s, ctcp, cshm, "host-b", "bh");
        mcClose(&host);
    }
    mcClose(&c);
    mcClose(&ctcp);
    mcClose(&cshm);
    free(vals);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 12. parallel tcp streams ================================================== */

/* connected_clients from INFO clients, -1 if it cannot be read. */
static long long connectedClients(redisContext *r) {
    redisReply *rep = rcmd(r, "INFO clients");
    long long n = -1;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        const char *p = strstr(rep->str, "connected_clients:");
        if (p) n = atoll(p + strlen("connected_clients:"));
    }
    freeReplyObject(rep);
    return n;
}

static void testStreams(void) {
    const char *group = "streams";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "256mb", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    const size_t max = 16 * MiB;
    char *want = xmalloc(max), *got = xmalloc(max + GUARD);
    /* Around the slice boundaries: below one slice, exactly two, odd tails. */
    static const size_t sizes[] = {256 * KiB, 512 * KiB, 512 * KiB + 1, 1 * MiB + 4097, 5 * MiB + 12345, 16 * MiB};
    mc_client *c = NULL;

    TEST("streams: mc_set_streams refuses 0 and 17, takes 1 and 16") {
        c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(c != NULL);
        CHECK_EQ(mc_set_streams(c, 0), MC_ERR_INVALID);
        CHECK_EQ(mc_set_streams(c, 17), MC_ERR_INVALID);
        CHECK_EQ(mc_set_streams(c, 16), MC_OK);
        CHECK_EQ(mc_set_streams(c, 1), MC_OK);
        CHECK_EQ(mc_set_streams(NULL, 2), MC_ERR_INVALID);
    }
    TEST("streams: by default one stream to an unpaced same-host server (no worker connections)") {
        mc_client *e = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(e != NULL);
        long long before = connectedClients(r); /* r, c, e */
        CHECK_EQ(before, 3);
        if (e) roundTrip(e, "stdef", 16 * MiB, MC_TRANSPORT_TCP, want, got);
        CHECK_EQ(connectedClients(r), before);
        mcClose(&e);
    }
    static const int counts[] = {1, 2, 3, 4};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        char name[160], tag[16];
        snprintf(tag, sizeof(tag), "st%d", counts[k]);
        snprintf(name, sizeof(name), "streams: %d stream(s), put/get of 256 KiB .. 16 MiB byte for byte", counts[k]);
        TEST(name) {
            if (c) CHECK_EQ(mc_set_streams(c, counts[k]), MC_OK);
            for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                roundTrip(c, tag, sizes[i], MC_TRANSPORT_TCP, want, got);
        }
    }
    TEST("streams: a value written with 4 streams reads back with 1, and the other way round") {
        if (c) {
            CHECK_EQ(mc_set_streams(c, 1), MC_OK);
            char key[64];
            rtKey(key, sizeof(key), "st4", 5 * MiB + 12345);
            fillPattern(want, 5 * MiB + 12345, seedOf(key, 5 * MiB + 12345));
            CHECK(getSame(c, key, want, 5 * MiB + 12345, MC_TRANSPORT_TCP));
            CHECK_EQ(mc_set_streams(c, 4), MC_OK);
            rtKey(key, sizeof(key), "st1", 5 * MiB + 12345);
            fillPattern(want, 5 * MiB + 12345, seedOf(key, 5 * MiB + 12345));
            CHECK(getSame(c, key, want, 5 * MiB + 12345, MC_TRANSPORT_TCP));
        }
    }
    long long conns = -1; /* r, c's metadata connection and its workers' */
    TEST("streams: 4 streams use the metadata connection and at most 3 worker connections") {
        /* This hiredis connection, c's metadata connection and 1 to 3
         * workers': whichever worker is awake claims the next slice
         * (mc_tcp.c), so on a busy machine one worker may have carried the
         * slices of several, and opened the only worker connection. */
        conns = connectedClients(r);
        CHECK(conns >= 3 && conns <= 5);
    }
    TEST("streams: a slice refused (maxclients reached) fails the put, revokes it, leaves no key") {
        mc_client *d = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(d != NULL);
        long long now = connectedClients(r);
        CHECK_EQ(now, conns + 1);
        redisReply *rep = rcmd(r, "CONFIG SET maxclients %lld", now);
        CHECK(expectOk(rep, "CONFIG SET maxclients"));
        if (d) {
            CHECK_EQ(mc_set_streams(d, 4), MC_OK);
            fillPattern(want, 4 * MiB, seedOf("st:refused", 4));
            /* mc_put, not put(): the failure is the point, and put()'s
             * "write: Broken pipe (put revoked)" on stderr read as a fault
             * of whatever failed next in a run (issue 25). */
            int rc = mc_put(d, "st:refused", 10, want, 4 * MiB, NULL);
            CHECK(rc < 0);
            if (rc >= 0) fprintf(stderr, "  put succeeded although its workers cannot connect\n");
            /* Why, whether the worker's SEG.WRITE met the closed socket
             * (EPIPE: the refusal line is what the peer wrote before
             * closing) or was all sent and read the refusal as its reply. */
            CHECK(strstr(lastErr(d), "(put revoked)") != NULL);
            CHECK(strstr(lastErr(d), "max number of clients reached") != NULL);
            if (!strstr(lastErr(d), "max number of clients reached")) fprintf(stderr, "  (%s)\n", lastErr(d));
            /* And the server's log says so too (verbose, as tests run it). */
            CHECK(tsLogHas(&s, "max number of clients reached"));
            CHECK_EQ(mc_exists(d, "st:refused", 10), 0);
            rep = rcmd(r, "EXISTS st:refused");
            CHECK_EQ(replyInt(rep), 0);
            freeReplyObject(rep);
        }
        rep = rcmd(r, "CONFIG SET maxclients 10000");
        CHECK(expectOk(rep, "CONFIG SET maxclients back"));
        if (d) {
            CHECK_EQ(put(d, "st:refused", want, 4 * MiB, NULL), MC_OK);
            CHECK(getSame(d, "st:refused", want, 4 * MiB, MC_TRANSPORT_TCP));
        }
        mcClose(&d);
    }
    TEST("streams: 4 streams into a segment hosted by a client (thread per connection)") {
        mc_client *host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        int rc = host ? mc_mount(host, 64 * MiB, "host-a") : MC_ERR_INVALID;
        CHECK_EQ(rc, MC_OK);
        if (c && rc == MC_OK) {
            CHECK_EQ(mc_set_streams(c, 4), MC_OK);
            hostedPutGet(c, r, "st:hosted", 8 * MiB + 5, MC_TRANSPORT_TCP, mc_mount_id(host));
        }
        mcClose(&host);
    }
    mcClose(&c);
    rClose(&r);
    free(want);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 13. keeping a hosted segment alive, replacing idle connections ========== */

/* A put preferring segment name, read back byte for byte. */
static void putPreferring(mc_client *c, const char *name, const char *key, size_t n, int transport) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf(key, n));
    mc_put_opts o = {0};
    o.prefer = name;
    o.replace = 1;
    CHECK_EQ(put(c, key, v, n, &o), MC_OK);
    CHECK(getSame(c, key, v, n, transport));
    free(v);
}

/* Sets owner-ttl, kills every normal client but the one asking (the
 * hosting handle's metadata connection among them), then waits 2.5 s: more
 * than one heartbeat. The asking connection is closed first, or the server's
 * idle timeout would close it meanwhile. */
static void killClientsThenWait(tsServer *s, int owner_ttl_ms) {
    redisContext *r = rTcp(s);
    redisReply *rep = rcmd(r, "CONFIG SET owner-ttl %d", owner_ttl_ms);
    CHECK(expectOk(rep, "CONFIG SET owner-ttl"));
    rep = rcmd(r, "CLIENT KILL TYPE normal SKIPME yes");
    CHECK(replyInt(rep) >= 1);
    freeReplyObject(rep);
    rClose(&r);
    tsSleepMs(2500);
}

static void testKeepalive(void) {
    const char *group = "keepalive";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    /* Idle connections are closed after 1 s; an owner with no connection
     * dies 500 ms later. */
    if (!tsGroupStarted(tsStart(&s, "--timeout", "1", "--owner-ttl", "500", NULL), &s, group)) return;
    mc_client *host = NULL;
    long long id = -1;

    TEST("keepalive: a hosting handle idle for 3 s (timeout 1, owner-ttl 500) keeps its segment") {
        host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        CHECK_EQ(host ? mc_mount(host, 16 * MiB, "host-k") : MC_ERR_INVALID, MC_OK);
        id = host ? mc_mount_id(host) : -1;
        CHECK(id > 1);
        tsSleepMs(3000);
        redisContext *r = rTcp(&s);
        CHECK_EQ(segInfoInt(r, "host-k", "id"), id);
        rClose(&r);
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-k", "ka:idle", 1 * MiB + 3, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    TEST("keepalive: its metadata connection killed, the heartbeat reconnects and the owner lives on") {
        killClientsThenWait(&s, 5000);
        redisContext *r = rTcp(&s);
        CHECK_EQ(segInfoInt(r, "host-k", "id"), id);
        CHECK_EQ(host ? mc_mount_id(host) : -1, id);
        CHECK(!tsLogHas(&s, "is gone: unmounting segment 'host-k'"));
        rClose(&r);
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-k", "ka:killed", 1 * MiB + 3, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    TEST("keepalive: an owner the server let go mounts again (-NEEDREMOUNT) and serves") {
        killClientsThenWait(&s, 0);
        redisContext *r = rTcp(&s);
        long long now = segInfoInt(r, "host-k", "id");
        CHECK(now > 1);
        CHECK_EQ(host ? mc_mount_id(host) : -1, now);
        /* The usual path: the owner was reaped before the next beat, so the
         * segment came back under a new id. */
        if (tsLogHas(&s, "is gone: unmounting segment 'host-k'")) CHECK(now != id);
        CHECK(expectOk(rcmd(r, "CONFIG SET owner-ttl 500"), "CONFIG SET owner-ttl back"));
        rClose(&r);
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-k", "ka:remounted", 1 * MiB + 3, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    mcClose(&host);
    tsGroupFinish(&s, group, failed0);

    /* A server with no unix socket: its pool's only endpoint is tcp, so no
     * other path can hide a stale connection. */
    if (!tsGroupStarted(tsStart(&s, "--timeout", "1", "--unixsocket", "", NULL), &s, group)) return;
    failed0 = test_failed;
    TEST("keepalive: data connections the server closed while idle are replaced without a failed call") {
        /* 2 streams: the metadata connection (which also carries a slice)
         * and a worker's, both closed by the server's idle timeout. */
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        if (c) CHECK_EQ(mc_set_streams(c, 2), MC_OK);
        putPreferring(c, "self", "ka:self", 4 * MiB, MC_TRANSPORT_TCP);
        tsSleepMs(2500);
        putPreferring(c, "self", "ka:self", 4 * MiB, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== first touch: the pool's pages are mapped once, at attach ================================== */

static long minorFaults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* A shm client maps the whole pool (populated) on its first put, so later
 * puts into regions it never touched take no page faults. Counting faults,
 * not timing: 16 puts of 1 MiB into fresh pool space would take 4096 faults
 * of 4 KiB pages if the mapping were left to fill on first touch. */
static void testFirstTouch(void) {
    const char *group = "first-touch";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "64mb", NULL), &s, group)) return;
    mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    char *v = xmalloc(MiB);
    fillPattern(v, MiB, 7);
    TEST("first touch: after the first shm put, 16 puts of 1 MiB into fresh pool space fault no pages") {
        CHECK(c != NULL);
        CHECK_EQ(put(c, "ft:first", v, MiB, NULL), MC_OK);
        CHECK_EQ(mc_last_transport(c), MC_TRANSPORT_SHM);
        long before = minorFaults();
        for (int i = 0; i < 16 && c; i++) {
            char key[32];
            snprintf(key, sizeof(key), "ft:%d", i);
            CHECK_EQ(put(c, key, v, MiB, NULL), MC_OK);
        }
        long faults = minorFaults() - before;
        if (faults >= 1024) fprintf(stderr, "  %ld minor faults in 16 MiB of puts\n", faults);
        CHECK(faults < 1024);
        CHECK(getSame(c, "ft:15", v, MiB, MC_TRANSPORT_SHM));
    }
    free(v);
    mcClose(&c);
    tsGroupFinish(&s, group, failed0);
}

/* ==== lease release: a get ends its read lease when it is done ================================== */

/* OBJECT.INFO's lease-ms of key (RESP2: a flat field/value array); -1 if absent. */
static long long leaseMs(redisContext *r, const char *key) {
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
static int leaseEndsWithin(redisContext *r, const char *key, int ms) {
    for (int t = 0; t < ms; t += 10) {
        if (leaseMs(r, key) == 0) return 1;
        tsSleepMs(10);
    }
    return 0;
}

static void testLeaseRelease(void) {
    const char *group = "lease-release";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char *v = xmalloc(MiB), *got = xmalloc(MiB);
    fillPattern(v, MiB, 11);
    TEST("lease release: after mc_get (shm and tcp) the object's lease has ended") {
        CHECK(r && cshm && ctcp);
        CHECK_EQ(put(cshm, "lr:a", v, MiB, NULL), MC_OK);
        CHECK_EQ(mc_get(cshm, "lr:a", 4, got, MiB), (long long)MiB);
        CHECK(leaseEndsWithin(r, "lr:a", 2000));
        CHECK_EQ(mc_get(ctcp, "lr:a", 4, got, MiB), (long long)MiB);
        CHECK(leaseEndsWithin(r, "lr:a", 2000));
        CHECK(memcmp(got, v, MiB) == 0);
        /* The discarded replies do not confuse the next command's. */
        CHECK_EQ(mc_size(ctcp, "lr:a", 4), (long long)MiB);
        CHECK_EQ(mc_exists(ctcp, "lr:a", 4), 1);
    }
    TEST("lease release: a batch get ends every lease it was granted") {
        mc_kv items[8];
        long long res[8];
        char keys[8][16], *bufs = xmalloc(8 * 4096);
        for (int i = 0; i < 8; i++) {
            snprintf(keys[i], sizeof(keys[i]), "lr:b%d", i);
            CHECK_EQ(put(ctcp, keys[i], v, 4096, NULL), MC_OK);
            items[i] = (mc_kv){keys[i], strlen(keys[i]), bufs + i * 4096, 4096};
        }
        CHECK_EQ(mc_batch_get(cshm, 8, items, res), 8);
        for (int i = 0; i < 8; i++) CHECK(leaseEndsWithin(r, keys[i], 2000));
        free(bufs);
    }
    TEST("lease release: mc_set_lease_release(c, 0) keeps the lease to lease-ttl") {
        CHECK_EQ(mc_set_lease_release(ctcp, 0), MC_OK);
        CHECK_EQ(mc_get(ctcp, "lr:a", 4, got, MiB), (long long)MiB);
        CHECK(mc_exists(ctcp, "lr:a", 4) == 1); /* a round trip after the get */
        long long ms = leaseMs(r, "lr:a");
        CHECK(ms > 9000 && ms <= 10000);
        CHECK_EQ(mc_set_lease_release(ctcp, 1), MC_OK);
    }
    free(v);
    free(got);
    mcClose(&cshm);
    mcClose(&ctcp);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== exists: mc_batch_exists (BATCH.EXISTS) and mc_remove_all ==================================== */

static void keysOf(mc_key *keys, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) keys[i] = (mc_key){names[i], strlen(names[i])};
}

/* 1 if res[0..n) is want[0..n); says where it differs. */
static int sameInts(const char *what, const int *res, const int *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (res[i] != want[i]) {
            fprintf(stderr, "  %s: result %zu is %d, expected %d\n", what, i, res[i], want[i]);
            return 0;
        }
    return 1;
}

static void testExists(void) {
    const char *group = "exists";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char v[4096], got[4096];
    fillPattern(v, sizeof(v), 21);
    /* ex:0 ex:1 ex:3 ex:4 objects, ex:str a SET value, ex:pend a put not ended, ex:2 nothing. */
    TEST("exists: setup (4 objects, a string, a pending put)") {
        CHECK(r && c);
        for (int i = 0; i < 5; i++) {
            char k[16];
            snprintf(k, sizeof(k), "ex:%d", i);
            if (i != 2) CHECK_EQ(put(c, k, v, sizeof(v), NULL), MC_OK);
        }
        freeReplyObject(rcmd(r, "SET ex:str hello"));
        redisReply *p = rcmd(r, "PUT.START ex:pend 100");
        CHECK(p && p->type == REDIS_REPLY_ARRAY);
        freeReplyObject(p);
    }
    TEST("exists: per key 1 for objects and strings, 0 for absent and pending; returns the count") {
        const char *names[] = {"ex:0", "ex:2", "ex:str", "ex:pend", "ex:4", "ex:0"};
        const int want[] = {1, 0, 1, 0, 1, 1};
        mc_key keys[6];
        int res[6];
        keysOf(keys, names, 6);
        CHECK_EQ(mc_batch_exists(c, 6, keys, 0, res), 4);
        CHECK(sameInts("mc_batch_exists", res, want, 6));
        /* No lease without MC_EXISTS_LEASE. */
        CHECK_EQ(leaseMs(r, "ex:0"), 0);
    }
    TEST("exists: PREFIX counts the leading keys present; results past the prefix are 0") {
        const char *names[] = {"ex:0", "ex:1", "ex:2", "ex:3", "ex:4"};
        const int want[] = {1, 1, 0, 0, 0};
        mc_key keys[5];
        int res[5];
        keysOf(keys, names, 5);
        CHECK_EQ(mc_batch_exists(c, 5, keys, MC_EXISTS_PREFIX, res), 2);
        CHECK(sameInts("PREFIX", res, want, 5));
        CHECK_EQ(mc_batch_exists(c, 2, keys, MC_EXISTS_PREFIX, res), 2);
        CHECK_EQ(mc_batch_exists(c, 3, keys + 2, MC_EXISTS_PREFIX, res), 0);
        CHECK(res[0] == 0 && res[1] == 0 && res[2] == 0);
        /* Without PREFIX the keys after the miss are still looked at. */
        CHECK_EQ(mc_batch_exists(c, 5, keys, 0, res), 4);
    }
    TEST("exists: LEASE grants a read lease on each key found (PREFIX: only those counted)") {
        const char *names[] = {"ex:0", "ex:1", "ex:2", "ex:3"};
        mc_key keys[4];
        int res[4];
        keysOf(keys, names, 4);
        CHECK_EQ(mc_batch_exists(c, 4, keys, MC_EXISTS_PREFIX | MC_EXISTS_LEASE, res), 2);
        long long ms0 = leaseMs(r, "ex:0"), ms1 = leaseMs(r, "ex:1");
        CHECK(ms0 > 9000 && ms0 <= 10000);
        CHECK(ms1 > 9000 && ms1 <= 10000);
        CHECK_EQ(leaseMs(r, "ex:3"), 0);
        /* The get that follows finds it, and its LEASE.RELEASE ends the
         * probe's grant (the oldest); the get's own runs to lease-ttl. */
        CHECK_EQ(mc_get(c, "ex:0", 4, got, sizeof(got)), (long long)sizeof(got));
        CHECK(memcmp(got, v, sizeof(v)) == 0);
        CHECK_EQ(mc_exists(c, "ex:0", 4), 1); /* a round trip after the release */
        ms0 = leaseMs(r, "ex:0");
        CHECK(ms0 > 9000 && ms0 <= 10000);
    }
    TEST("exists: invalid arguments (no key array, no results, empty key, unknown flags); n == 0 is 0") {
        mc_key keys[2] = {{"ex:0", 4}, {"", 0}};
        int res[2] = {7, 7};
        CHECK_EQ(mc_batch_exists(NULL, 1, keys, 0, res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 1, NULL, 0, res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 1, keys, 0, NULL), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 1, keys, 4, res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 2, keys, 0, res), MC_ERR_INVALID);
        CHECK(res[0] == MC_ERR_INVALID && res[1] == MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 0, NULL, 0, NULL), 0);
        keys[1] = (mc_key){NULL, 3};
        CHECK_EQ(mc_batch_exists(c, 2, keys, MC_EXISTS_PREFIX, res), MC_ERR_INVALID);
        /* The handle still works. */
        CHECK_EQ(mc_batch_exists(c, 1, keys, 0, res), 1);
    }
    TEST("exists: a server that refuses the command fails the batch as a whole (MC_ERR_AUTH)") {
        freeReplyObject(rcmd(r, "ACL SETUSER noexists on >p1 ~* +@all -batch.exists"));
        char err[256] = "";
        mc_client *u = mc_connect_user(s.tcp_uri, "noexists", "p1", err, sizeof(err));
        mc_key keys[2] = {{"ex:0", 4}, {"ex:1", 4}};
        int res[2];
        CHECK(u != NULL);
        CHECK_EQ(mc_batch_exists(u, 2, keys, 0, res), MC_ERR_AUTH);
        CHECK(res[0] == MC_ERR_AUTH && res[1] == MC_ERR_AUTH);
        mcClose(&u);
    }
    TEST("exists: mc_remove_all removes every key (pending puts included) and returns how many") {
        CHECK_EQ(mc_remove_all(NULL), MC_ERR_INVALID);
        CHECK_EQ(mc_remove_all(c), 6); /* ex:0 ex:1 ex:3 ex:4 ex:str ex:pend */
        CHECK_EQ(mc_exists(c, "ex:0", 4), 0);
        CHECK_EQ(mc_exists(c, "ex:str", 6), 0);
        CHECK_EQ(mc_remove_all(c), 0);
    }
    mcClose(&c);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 12. ACL users and tenants ================================================================== */

static mc_client *mcOpenUser(const char *uri, const char *user, const char *password, int transport) {
    char err[256] = "";
    mc_client *c = mc_connect_user(uri, user, password, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "  mc_connect_user(%s, %s): %s\n", uri, user ? user : "(null)", err[0] ? err : "(no reason)");
        return NULL;
    }
    if (transport != MC_TRANSPORT_AUTO) mc_set_transport(c, transport);
    return c;
}

/* Connections of user in CLIENT LIST. */
static int clientsOf(redisContext *r, const char *user) {
    redisReply *l = rcmd(r, "CLIENT LIST");
    int n = 0;
    char needle[64];
    snprintf(needle, sizeof(needle), " user=%s ", user);
    if (l && l->type == REDIS_REPLY_STRING) /* RESP2: CLIENT LIST is a bulk string */
        for (const char *p = l->str; (p = strstr(p, needle)) != NULL; p++) n++;
    freeReplyObject(l);
    return n;
}

/* Every connection in CLIENT LIST (one line each). */
static int clientsAll(redisContext *r) {
    redisReply *l = rcmd(r, "CLIENT LIST");
    int n = 0;
    if (l && l->type == REDIS_REPLY_STRING)
        for (const char *p = l->str; (p = strstr(p, "id=")) != NULL; p++)
            if (p == l->str || p[-1] == '\n') n++;
    freeReplyObject(l);
    return n;
}

static void testAcl(void) {
    const char *group = "acl";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    CHECK(expectOk(rcmd(r, "ACL SETUSER alice on >pa ~acl:a:* +@all"), "ACL SETUSER alice"));
    CHECK(expectOk(rcmd(r, "ACL SETUSER bob on >pb ~acl:b:* +@all"), "ACL SETUSER bob"));
    mc_client *atcp = NULL, *aunix = NULL, *btcp = NULL, *ahost = NULL;
    const size_t n = 1 * MiB + 5;
    char *v = xmalloc(n), *w = xmalloc(n);

    TEST("acl: mc_connect_user with a wrong password, an unknown user or no password is refused") {
        char err[256] = "";
        mc_client *c = mc_connect_user(s.tcp_uri, "alice", "wrong", err, sizeof(err));
        CHECK(c == NULL && strstr(err, "WRONGPASS") != NULL);
        c = mc_connect_user(s.tcp_uri, "nobody", "pa", err, sizeof(err));
        CHECK(c == NULL);
        c = mc_connect_user(s.tcp_uri, "alice", NULL, err, sizeof(err));
        CHECK(c == NULL);
        if (c) mc_close(c);
    }
    TEST("acl: a tenant puts and gets over the TCP data plane; the data connections are its user's") {
        atcp = mcOpenUser(s.tcp_uri, "alice", "pa", MC_TRANSPORT_TCP);
        CHECK(atcp != NULL);
        fillPattern(v, n, seedOf("acl:a:1", n));
        if (atcp) {
            CHECK_EQ(mc_set_streams(atcp, 4), MC_OK); /* the stream workers open connections of their own */
            CHECK_EQ(put(atcp, "acl:a:1", v, n, NULL), MC_OK);
            CHECK(getSame(atcp, "acl:a:1", v, n, MC_TRANSPORT_TCP));
        }
        /* Every connection the handle opened is alice's: the metadata one
         * (which also carries the first stream) and at least one worker's,
         * and no other connection but r (default) is there. How many
         * workers opened one is the scheduler's business: whichever worker
         * is awake claims the next slice (mc_tcp.c), so one worker may run
         * several slices of the put and the get, and ">= 3" failed on a busy
         * machine with a put and a get that had both succeeded. */
        int na = clientsOf(r, "alice"), nd = clientsOf(r, "default"), all;
        /* The refused connections of the test before are closed; the
         * server may not have read their EOF yet on a busy machine. A
         * connection of the handle's that is not alice's would stay. */
        for (long long deadline = tsNowMs() + 5000; nd > 1 && tsNowMs() < deadline; nd = clientsOf(r, "default"))
            usleep(10000);
        all = clientsAll(r);
        if (na < 2 || nd != 1 || all != na + nd)
            fprintf(stderr, "  CLIENT LIST: %d alice, %d default, %d in all\n", na, nd, all);
        CHECK(na >= 2);
        CHECK_EQ(nd, 1);
        CHECK_EQ(all, na + nd);
        CHECK_EQ(clientsOf(r, "bob"), 0);
    }
    TEST("acl: over the unix socket AUTO falls back to TCP: a tenant is refused SHM.ATTACH") {
        aunix = mcOpenUser(s.unix_uri, "alice", "pa", MC_TRANSPORT_AUTO);
        CHECK(aunix != NULL);
        if (aunix) {
            CHECK(getSame(aunix, "acl:a:1", v, n, MC_TRANSPORT_TCP));
            fillPattern(w, n, seedOf("acl:a:2", n));
            CHECK_EQ(put(aunix, "acl:a:2", w, n, NULL), MC_OK);
            CHECK_EQ(mc_last_transport(aunix), MC_TRANSPORT_TCP);
            CHECK(getSame(atcp, "acl:a:2", w, n, MC_TRANSPORT_TCP));
            mc_set_transport(aunix, MC_TRANSPORT_SHM);
            char small[8];
            CHECK(mc_get(aunix, "acl:a:1", 7, small, sizeof(small)) < 0);
        }
    }
    TEST("acl: a tenant cannot read, replace or remove another's key (MC_ERR_AUTH), which stays intact") {
        btcp = mcOpenUser(s.tcp_uri, "bob", "pb", MC_TRANSPORT_TCP);
        CHECK(btcp != NULL);
        if (btcp) {
            fillPattern(w, n, seedOf("acl:b:1", n));
            CHECK_EQ(put(btcp, "acl:b:1", w, n, NULL), MC_OK);
            CHECK_EQ(mc_get(atcp, "acl:b:1", 7, v, n), MC_ERR_AUTH);
            CHECK(strstr(lastErr(atcp), "NOPERM") != NULL);
            mc_put_opts o = {0};
            o.replace = 1;
            CHECK_EQ(mc_put(atcp, "acl:b:1", 7, v, n, &o), MC_ERR_AUTH);
            CHECK(mc_remove(atcp, "acl:b:1", 7) < 0);
            CHECK(getSame(btcp, "acl:b:1", w, n, MC_TRANSPORT_TCP));
        }
    }
    TEST("acl: a tenant's hosted segment takes only its own puts and admits only its own peers") {
        ahost = mcOpenUser(s.unix_uri, "alice", "pa", MC_TRANSPORT_AUTO);
        CHECK(ahost != NULL);
        int rc = ahost ? mc_mount(ahost, 16 * MiB, "acl-a-host") : MC_ERR_IO;
        if (rc != MC_OK) fprintf(stderr, "  mc_mount: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(ahost));
        CHECK_EQ(rc, MC_OK);
        long long hid = ahost ? mc_mount_id(ahost) : -1;
        mc_put_opts o = {0};
        o.prefer = "acl-a-host";
        fillPattern(v, n, seedOf("acl:a:hosted", n));
        if (atcp && rc == MC_OK) {
            /* alice's put lands in her segment; another alice handle reads it
             * from the host's listener, which admits alice. */
            CHECK_EQ(put(atcp, "acl:a:hosted", v, n, &o), MC_OK);
            long long segs[4], offs[4];
            CHECK_EQ(replicaList(r, "acl:a:hosted", segs, offs, 4), 1);
            CHECK_EQ(segs[0], hid);
            CHECK(getSame(atcp, "acl:a:hosted", v, n, MC_TRANSPORT_TCP));
        }
        if (btcp && rc == MC_OK) {
            /* bob cannot name it, and his puts never land there. */
            CHECK(mc_put(btcp, "acl:b:pref", 10, v, n, &o) < 0);
            CHECK(strstr(lastErr(btcp), "no such segment") != NULL);
            o.prefer = NULL;
            o.replicas = 8;
            CHECK_EQ(put(btcp, "acl:b:spread", v, n, &o), MC_OK);
            long long segs[8], offs[8];
            int nrep = replicaList(r, "acl:b:spread", segs, offs, 8);
            CHECK(nrep >= 1);
            for (int i = 0; i < nrep; i++) CHECK(segs[i] != hid);
        }
        /* A raw peer with bob's credentials is refused by alice's listener. */
        char ep[300] = "";
        segEndpoint(r, "acl-a-host", "tcp://", ep, sizeof(ep));
        CHECK(ep[0] != '\0');
        char *colon = strrchr(ep, ':');
        if (colon) {
            *colon = '\0';
            struct timeval tv = {5, 0};
            redisContext *peer = rConfigure(redisConnectWithTimeout(ep + 6, atoi(colon + 1), tv), "alice's listener");
            CHECK(peer != NULL);
            CHECK(expectError("WRONGPASS", rcmd(peer, "AUTH bob pb"), "AUTH bob at alice's listener"));
            CHECK(expectError("WRONGPASS", rcmd(peer, "AUTH pa"), "AUTH (default) at alice's listener"));
            CHECK(expectError("NOAUTH", rcmd(peer, "SEG.READ %lld 0 16", hid), "SEG.READ unauthenticated"));
            CHECK(expectOk(rcmd(peer, "AUTH alice pa"), "AUTH alice at alice's listener"));
            rClose(&peer);
        }
    }
    free(v);
    free(w);
    mcClose(&ahost);
    mcClose(&btcp);
    mcClose(&aunix);
    mcClose(&atcp);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 17. scatter-gather (mc_put_fromv, mc_get_intov, mc_batch_putv/getv) ==== */

/* Buffers for scatter-gather calls: pieces carved out of one registered
 * arena, each followed by a gap of guard bytes, so a piece written past its
 * end, or a transfer that treats the pieces as contiguous, is caught. */
#define SG_GAP 64
#define SG_ARENA (40 * MiB)

typedef struct {
    char *arena;
    size_t used;
    struct iovec iov[MC_MAX_IOV + 1];
    int n;
} sgBufs;

/* Cuts total bytes into n uneven pieces (sizes drawn from seed, every
 * fifth piece and the second one empty when n > 2) placed in b's arena
 * after its current use. */
static void sgCut(sgBufs *b, size_t total, int n, uint64_t seed) {
    size_t *cut = xmalloc((size_t)(n + 1) * sizeof(size_t));
    cut[0] = 0;
    cut[n] = total;
    uint64_t s = seed | 1;
    for (int i = 1; i < n; i++) {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        cut[i] = (size_t)((s * 0x2545F4914F6CDD1DULL) % (total + 1));
    }
    for (int i = 1; i < n; i++) /* sort: n is small or the cost is nothing */
        for (int j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
            size_t t = cut[j];
            cut[j] = cut[j - 1];
            cut[j - 1] = t;
        }
    for (int i = 1; i < n; i++)
        if (n > 2 && (i == 2 || i % 5 == 0)) cut[i] = cut[i - 1]; /* an empty piece */
    b->n = n;
    for (int i = 0; i < n; i++) {
        size_t len = cut[i + 1] - cut[i];
        b->iov[i].iov_base = b->arena + b->used;
        b->iov[i].iov_len = len;
        memset(b->arena + b->used + len, GUARD_BYTE, SG_GAP);
        b->used += len + SG_GAP + (size_t)(i % 7); /* odd alignments too */
    }
    free(cut);
}

static size_t sgTotal(const sgBufs *b) {
    size_t t = 0;
    for (int i = 0; i < b->n; i++) t += b->iov[i].iov_len;
    return t;
}

/* Scatters src into the pieces / gathers them into dst. */
static void sgScatter(sgBufs *b, const char *src) {
    for (int i = 0; i < b->n; i++) {
        memcpy(b->iov[i].iov_base, src, b->iov[i].iov_len);
        src += b->iov[i].iov_len;
    }
}

static void sgGather(const sgBufs *b, char *dst) {
    for (int i = 0; i < b->n; i++) {
        memcpy(dst, b->iov[i].iov_base, b->iov[i].iov_len);
        dst += b->iov[i].iov_len;
    }
}

static int sgGuardsIntact(const sgBufs *b) {
    for (int i = 0; i < b->n; i++) {
        const unsigned char *g = (const unsigned char *)b->iov[i].iov_base + b->iov[i].iov_len;
        for (int k = 0; k < SG_GAP; k++)
            if (g[k] != GUARD_BYTE) {
                fprintf(stderr, "  piece %d of %d (%zu bytes) overrun at guard byte %d\n", i, b->n, b->iov[i].iov_len, k);
                return 0;
            }
    }
    return 1;
}

/* Fresh pieces of the arena (the arena is reused from its start). */
static void sgReset(sgBufs *b) { b->used = 0; }

/* mc_put_fromv of total bytes in nput pieces, then mc_get_intov into nget
 * other pieces; byte for byte, guards intact, moved by transport. */
static void sgRoundTrip(mc_client *c, sgBufs *b, const char *tag, size_t total, int nput, int nget, int transport,
                        char *want, char *got) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char key[96];
    snprintf(key, sizeof(key), "sg:%s:%zu:%d:%d", tag, total, nput, nget);
    fillPattern(want, total, seedOf(key, total));
    sgReset(b);
    sgCut(b, total, nput, seedOf(key, 1));
    sgScatter(b, want);
    mc_put_opts o = {0};
    o.replace = 1;
    int rc = mc_put_fromv(c, key, strlen(key), b->iov, b->n, &o);
    if (rc != MC_OK) fprintf(stderr, "  mc_put_fromv(%s): %d %s (%s)\n", key, rc, mc_strerror(rc), lastErr(c));
    CHECK_EQ(rc, MC_OK);
    CHECK_EQ(mc_last_transport(c), transport);
    sgBufs *g = xmalloc(sizeof(*g));
    g->arena = b->arena;
    g->used = b->used;
    sgCut(g, total, nget, seedOf(key, 2));
    for (int i = 0; i < g->n; i++) memset(g->iov[i].iov_base, 0, g->iov[i].iov_len);
    long long r = mc_get_intov(c, key, strlen(key), g->iov, g->n);
    if (r < 0) fprintf(stderr, "  mc_get_intov(%s): %s\n", key, lastErr(c));
    sgGather(g, got);
    CHECK(sameBytes(key, got, r, want, total));
    CHECK(sgGuardsIntact(g));
    CHECK(sgGuardsIntact(b));
    CHECK_EQ(mc_last_transport(c), transport);
    free(g);
}

/* A batch of v items over c: some keys stored in pieces, a missing key, a
 * too-small set of buffers, an existing key in the put. Each item's result
 * stands alone; values are small and large so that vector commands
 * (SEG.WRITEV/READV) carry multi-piece items over tcp. */
static void sgBatch(mc_client *c, sgBufs *b, const char *tag, char *want, char *got) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    enum { NB = 8 };
    static const size_t sizes[NB] = {100, 4 * KiB + 1, 20 * KiB, 3 * KiB, 200 * KiB + 7, 1 * MiB + 5, 60 * KiB, 5};
    static const int pieces[NB] = {3, 2, 7, 1, 5, 4, 64, 2};
    char keys[NB][64];
    mc_kvv items[NB + 1];
    sgBufs *pb = xmalloc(sizeof(*pb) * NB);
    size_t off = 0;
    sgReset(b);
    for (int i = 0; i < NB; i++) {
        snprintf(keys[i], sizeof(keys[i]), "sgb:%s:%d", tag, i);
        fillPattern(want + off, sizes[i], seedOf(keys[i], sizes[i]));
        pb[i].arena = b->arena;
        pb[i].used = b->used;
        sgCut(&pb[i], sizes[i], pieces[i], seedOf(keys[i], 7));
        b->used = pb[i].used;
        sgScatter(&pb[i], want + off);
        items[i] = (mc_kvv){keys[i], strlen(keys[i]), pb[i].iov, pb[i].n};
        off += sizes[i];
    }
    int pres[NB + 1];
    for (int i = 0; i < NB; i++) pres[i] = 12345;
    int ok = mc_batch_putv(c, NB, items, NULL, pres);
    if (ok != NB) fprintf(stderr, "  mc_batch_putv: %d (%s)\n", ok, lastErr(c));
    CHECK_EQ(ok, NB);
    for (int i = 0; i < NB; i++) CHECK_EQ(pres[i], MC_OK);
    /* Again with an existing key (keys[3]) among new ones: EXISTS alone. */
    char k2[2][64];
    snprintf(k2[0], sizeof(k2[0]), "sgb:%s:new0", tag);
    snprintf(k2[1], sizeof(k2[1]), "sgb:%s:new1", tag);
    mc_kvv again[3] = {{k2[0], strlen(k2[0]), pb[0].iov, pb[0].n},
                       {keys[3], strlen(keys[3]), pb[2].iov, pb[2].n},
                       {k2[1], strlen(k2[1]), pb[4].iov, pb[4].n}};
    int ares[3] = {1, 1, 1};
    CHECK_EQ(mc_batch_putv(c, 3, again, NULL, ares), 2);
    CHECK_EQ(ares[0], MC_OK);
    CHECK_EQ(ares[1], MC_ERR_EXISTS);
    CHECK_EQ(ares[2], MC_OK);
    /* Gets into other pieces: every item, a missing key in the middle, and
     * keys[5] into buffers one byte short. */
    sgBufs *gb = xmalloc(sizeof(*gb) * (NB + 1));
    mc_kvv gitems[NB + 2];
    size_t gm = 0;
    for (int i = 0; i < NB; i++) {
        size_t cap = i == 5 ? sizes[i] - 1 : i == 1 ? sizes[i] + 999 : sizes[i]; /* 1: larger than the value */
        gb[i].arena = b->arena;
        gb[i].used = b->used;
        sgCut(&gb[i], cap, pieces[(i + 3) % NB], seedOf(keys[i], 9));
        b->used = gb[i].used;
        for (int j = 0; j < gb[i].n; j++) memset(gb[i].iov[j].iov_base, 0, gb[i].iov[j].iov_len);
        gitems[gm++] = (mc_kvv){keys[i], strlen(keys[i]), gb[i].iov, gb[i].n};
        if (i == 3) {
            static const struct iovec none[1] = {{NULL, 0}};
            gitems[gm++] = (mc_kvv){"sgb:missing", 11, none, 1};
        }
    }
    long long gres[NB + 2];
    for (size_t i = 0; i < gm; i++) gres[i] = 12345;
    int got_ok = mc_batch_getv(c, gm, gitems, gres);
    CHECK_EQ(got_ok, NB - 1);
    CHECK_EQ(gres[4], MC_ERR_NOT_FOUND);
    off = 0;
    for (int i = 0, gi = 0; i < NB; i++, gi++) {
        if (i == 4) gi++; /* past the missing key */
        if (i == 5) {
            CHECK_EQ(gres[gi], MC_ERR_TOO_SMALL);
        } else {
            sgGather(&gb[i], got);
            CHECK(sameBytes(keys[i], got, gres[gi], want + off, sizes[i]));
            CHECK(sgGuardsIntact(&gb[i]));
        }
        off += sizes[i];
    }
    /* The new keys of the second put hold what they were given. */
    CHECK(getSame(c, k2[0], want, sizes[0], MC_TRANSPORT_AUTO));
    CHECK(getSame(c, k2[1], want + sizes[0] + sizes[1] + sizes[2] + sizes[3], sizes[4], MC_TRANSPORT_AUTO));
    free(pb);
    free(gb);
}

static void testScatterGather(void) {
    const char *group = "scatter-gather";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "256mb", NULL), &s, group)) return;
    const size_t big = 8 * MiB + 12345;
    char *want = xmalloc(big), *got = xmalloc(big + GUARD);
    sgBufs *b = xmalloc(sizeof(*b));
    b->arena = xmalloc(SG_ARENA);
    struct {
        int transport, streams;
        const char *uri, *tag;
        mc_client *c;
    } paths[] = {{MC_TRANSPORT_SHM, 0, s.unix_uri, "shm", NULL},
                 {MC_TRANSPORT_TCP, 0, s.tcp_uri, "tcp", NULL},
                 {MC_TRANSPORT_TCP, 4, s.tcp_uri, "tcp4", NULL}};
    enum { NPATHS = sizeof(paths) / sizeof(paths[0]) };
    for (int p = 0; p < NPATHS; p++) {
        paths[p].c = mcOpen(paths[p].uri, NULL, paths[p].transport);
        if (paths[p].c && paths[p].streams) mc_set_streams(paths[p].c, paths[p].streams);
        if (paths[p].c) CHECK_EQ(mc_register(paths[p].c, b->arena, SG_ARENA, MC_MEM_HOST), MC_OK);
    }
    static const struct { size_t size; int nput, nget; } rt[] = {
        {1 * MiB + 3, 1, 1}, {1 * MiB + 3, 2, 3}, {300 * KiB + 1, 3, 2}, {1 * MiB + 3, 64, 7},
        {100, 64, 3},        {5, 3, 1},           {2 * MiB, 1024, 64},
    };
    for (int p = 0; p < NPATHS; p++) {
        for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++) {
            char name[200];
            snprintf(name, sizeof(name), "scatter-gather: over %s, %zu bytes put from %d buffers, got into %d", paths[p].tag,
                     rt[i].size, rt[i].nput, rt[i].nget);
            TEST(name) sgRoundTrip(paths[p].c, b, paths[p].tag, rt[i].size, rt[i].nput, rt[i].nget, paths[p].transport, want, got);
        }
    }
    TEST("scatter-gather: over tcp with 4 streams, 8 MiB+12345 from 3 pieces (odd cuts) into 5, and 64 into 3") {
        sgRoundTrip(paths[2].c, b, "tcp4", big, 3, 5, MC_TRANSPORT_TCP, want, got);
        sgRoundTrip(paths[2].c, b, "tcp4", big, 64, 3, MC_TRANSPORT_TCP, want, got);
    }
    for (int p = 0; p < NPATHS; p++) {
        char name[200];
        snprintf(name, sizeof(name), "scatter-gather: over %s, mc_put then mc_get_intov, mc_put_fromv then mc_get", paths[p].tag);
        TEST(name) {
            mc_client *c = paths[p].c;
            CHECK(c != NULL);
            if (c) {
                size_t n = 3 * MiB + 17;
                char key[64];
                snprintf(key, sizeof(key), "sg:contig:%s", paths[p].tag);
                fillPattern(want, n, seedOf(key, n));
                mc_put_opts o = {0};
                o.replace = 1;
                CHECK_EQ(put(c, key, want, n, &o), MC_OK);
                sgReset(b);
                sgCut(b, n, 9, seedOf(key, 3));
                CHECK(sgTotal(b) == n);
                long long r = mc_get_intov(c, key, strlen(key), b->iov, b->n);
                sgGather(b, got);
                CHECK(sameBytes("contiguous put, scattered get", got, r, want, n));
                CHECK(sgGuardsIntact(b));
                snprintf(key, sizeof(key), "sg:scat:%s", paths[p].tag);
                fillPattern(want, n, seedOf(key, n));
                sgReset(b);
                sgCut(b, n, 11, seedOf(key, 4));
                sgScatter(b, want);
                CHECK_EQ(mc_put_fromv(c, key, strlen(key), b->iov, b->n, &o), MC_OK);
                CHECK(getSame(c, key, want, n, paths[p].transport));
            }
        }
    }
    TEST("scatter-gather: buffers one byte short are TOO_SMALL, untouched; larger ones take a prefix") {
        mc_client *c = paths[1].c;
        CHECK(c != NULL);
        if (c) {
            size_t n = 256 * KiB + 3;
            fillPattern(want, n, seedOf("sg:fit", n));
            mc_put_opts o = {0};
            o.replace = 1;
            CHECK_EQ(put(c, "sg:fit", want, n, &o), MC_OK);
            sgReset(b);
            sgCut(b, n - 1, 4, 5);
            for (int i = 0; i < b->n; i++) memset(b->iov[i].iov_base, 0x5A, b->iov[i].iov_len);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, b->iov, b->n), MC_ERR_TOO_SMALL);
            int untouched = 1;
            for (int i = 0; i < b->n; i++)
                for (size_t k = 0; k < b->iov[i].iov_len; k++)
                    if (((unsigned char *)b->iov[i].iov_base)[k] != 0x5A) untouched = 0;
            CHECK(untouched);
            /* 3 pieces of 100 KiB for a 256 KiB value: two full, the third
             * filled in part, the rest of it untouched. */
            sgReset(b);
            b->n = 3;
            for (int i = 0; i < 3; i++) {
                b->iov[i].iov_base = b->arena + (size_t)i * (100 * KiB + SG_GAP);
                b->iov[i].iov_len = 100 * KiB;
                memset(b->iov[i].iov_base, 0x5A, 100 * KiB + SG_GAP);
            }
            long long r = mc_get_intov(c, "sg:fit", 6, b->iov, b->n);
            sgGather(b, got);
            CHECK(sameBytes("smaller value into larger buffers", got, r, want, n));
            const unsigned char *tail = (const unsigned char *)b->iov[2].iov_base + (n - 200 * KiB);
            int rest = 1;
            for (size_t k = 0; k < 300 * KiB - n; k++)
                if (tail[k] != 0x5A) rest = 0;
            CHECK(rest);
        }
    }
    TEST("scatter-gather: iovcnt 0 and MC_MAX_IOV+1, a NULL base, unregistered memory, an empty put: INVALID") {
        mc_client *c = paths[0].c;
        CHECK(c != NULL);
        if (c) {
            sgReset(b);
            sgCut(b, 4096, MC_MAX_IOV + 1, 6);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, b->iov, 0, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, b->iov, -1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, b->iov, MC_MAX_IOV + 1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, NULL, 1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, b->iov, 0), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, b->iov, MC_MAX_IOV + 1), MC_ERR_INVALID);
            struct iovec nul[2] = {{b->arena, 10}, {NULL, 10}};
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, nul, 2, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, nul, 2), MC_ERR_INVALID);
            char stack[64];
            struct iovec unreg[2] = {{b->arena, 10}, {stack, sizeof(stack)}};
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, unreg, 2, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, unreg, 2), MC_ERR_INVALID);
            struct iovec empty[2] = {{b->arena, 0}, {NULL, 0}};
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, empty, 2, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "", 0, b->iov, 2, NULL), MC_ERR_INVALID);
            mc_kvv bad[2] = {{"sg:inv0", 7, b->iov, 2}, {"sg:inv1", 7, nul, 2}};
            int pres[2] = {1, 1};
            long long gres[2] = {1, 1};
            CHECK_EQ(mc_batch_putv(c, 2, bad, NULL, pres), MC_ERR_INVALID);
            CHECK_EQ(pres[0], MC_ERR_INVALID);
            CHECK_EQ(mc_batch_getv(c, 2, bad, gres), MC_ERR_INVALID);
            bad[1].iovcnt = 0;
            CHECK_EQ(mc_batch_putv(c, 2, bad, NULL, pres), MC_ERR_INVALID);
            CHECK_EQ(mc_exists(c, "sg:inv", 6), 0);
            CHECK_EQ(mc_exists(c, "sg:inv0", 7), 0);
        }
    }
    for (int p = 0; p < NPATHS; p++) {
        char name[200];
        snprintf(name, sizeof(name), "scatter-gather: over %s, batch v: puts, an existing key, a missing key, too small", paths[p].tag);
        TEST(name) sgBatch(paths[p].c, b, paths[p].tag, want, got);
    }
    for (int p = 0; p < NPATHS; p++) mcClose(&paths[p].c);
    free(b->arena);
    free(b);
    free(want);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== non-blocking batches (mc_async.c) =============================================== */

#define AS_N 64
#define AS_LEN (64 * KiB)
#define AS_SMALL 200

/* Sends SIGCONT to pid after ms, on a thread of its own (the main thread
 * is the one blocked in the call under test). */
typedef struct {
    pid_t pid;
    long ms;
    pthread_t tid;
} asWaker;

static void *asWakerMain(void *arg) {
    asWaker *w = arg;
    tsSleepMs(w->ms);
    kill(w->pid, SIGCONT);
    return NULL;
}

static int asWakeLater(asWaker *w, pid_t pid, long ms) {
    w->pid = pid;
    w->ms = ms;
    return pthread_create(&w->tid, NULL, asWakerMain, w) == 0;
}

/* n items of one buffer each: key i is keys[i], buffer i at base + i * len. */
static void asItems(mc_kvv *items, struct iovec *iov, size_t n, char (*keys)[24], char *base, size_t len) {
    for (size_t i = 0; i < n; i++) {
        iov[i] = (struct iovec){base + i * len, len};
        items[i] = (mc_kvv){keys[i], strlen(keys[i]), &iov[i], 1};
    }
}

/* Every result of a finished op is want (or, want < 0, the value's length). */
static int asResultsAre(mc_op *op, size_t n, long long want, const char *what) {
    const long long *res = mc_op_results(op);
    if (res == NULL) {
        fprintf(stderr, "  %s: no results (done %d)\n", what, mc_op_done(op));
        return 0;
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (res[i] != want && bad++ < 4)
            fprintf(stderr, "  %s: item %zu: %lld (%s), want %lld\n", what, i, res[i],
                    res[i] < 0 ? mc_strerror((int)res[i]) : "bytes", want);
    return bad == 0;
}

/* Waits for op; its return value must be want. */
static int asWaitIs(mc_op *op, int want, const char *what) {
    int rc = op ? mc_op_wait(op, -1) : MC_ERR_INVALID;
    if (rc != want) fprintf(stderr, "  %s: mc_op_wait %d (%s), want %d\n", what, rc, rc < 0 ? mc_strerror(rc) : "", want);
    return rc == want;
}

static mc_op *asPut(mc_client *c, size_t n, const mc_kvv *items, const mc_put_opts *o) {
    mc_op *op = c ? mc_batch_put_async(c, n, items, o) : NULL;
    if (c && !op) fprintf(stderr, "  mc_batch_put_async: NULL (%s)\n", lastErr(c));
    return op;
}

static mc_op *asGet(mc_client *c, size_t n, const mc_kvv *items) {
    mc_op *op = c ? mc_batch_get_async(c, n, items) : NULL;
    if (c && !op) fprintf(stderr, "  mc_batch_get_async: NULL (%s)\n", lastErr(c));
    return op;
}

/* Multi-buffer items: each value cut into three unequal parts (put) and
 * read back into three parts cut elsewhere (get). */
static void asMultiBuffer(mc_client *c, const char *vals) {
    enum { MB_N = 8 };
    size_t len = AS_LEN;
    char *got = xmalloc(MB_N * len);
    memset(got, 0, MB_N * len);
    struct iovec piov[MB_N][3], giov[MB_N][3];
    mc_kvv pitems[MB_N], gitems[MB_N];
    char mkeys[MB_N][24];
    for (int i = 0; i < MB_N; i++) {
        snprintf(mkeys[i], sizeof(mkeys[i]), "as:mb:%d", i);
        char *v = (char *)vals + (size_t)i * len, *g = got + (size_t)i * len;
        piov[i][0] = (struct iovec){v, 100};
        piov[i][1] = (struct iovec){v + 100, len / 2};
        piov[i][2] = (struct iovec){v + 100 + len / 2, len - 100 - len / 2};
        giov[i][0] = (struct iovec){g, len / 3};
        giov[i][1] = (struct iovec){g + len / 3, 7};
        giov[i][2] = (struct iovec){g + len / 3 + 7, len - len / 3 - 7};
        pitems[i] = (mc_kvv){mkeys[i], strlen(mkeys[i]), piov[i], 3};
        gitems[i] = (mc_kvv){mkeys[i], strlen(mkeys[i]), giov[i], 3};
    }
    mc_op *p = asPut(c, MB_N, pitems, NULL);
    mc_op *g = asGet(c, MB_N, gitems);
    CHECK(asWaitIs(p, MB_N, "multi-buffer put"));
    CHECK(asResultsAre(p, MB_N, MC_OK, "multi-buffer put"));
    CHECK(asWaitIs(g, MB_N, "multi-buffer get"));
    CHECK(asResultsAre(g, MB_N, (long long)len, "multi-buffer get"));
    for (int i = 0; i < MB_N; i++) CHECK(sameBytes(mkeys[i], got + (size_t)i * len, (long long)len, vals + (size_t)i * len, len));
    mc_op_free(p);
    mc_op_free(g);
    free(got);
}

/* How many of keys[0..n) have their (one) replica in segment seg. */
static int asCountOn(redisContext *r, char (*keys)[24], int n, long long seg) {
    int on = 0;
    for (int i = 0; r && i < n; i++) {
        long long segs[4], offs[4];
        on += replicaList(r, keys[i], segs, offs, 4) == 1 && segs[0] == seg;
    }
    return on;
}

static void testAsync(void) {
    const char *group = "async";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--owner-ttl", "60000", NULL), &s, group)) return;
    static char keys[AS_N][24], skeys[8][24], small[AS_SMALL][24];
    char *vals = xmalloc((size_t)AS_N * AS_LEN), *got = xmalloc((size_t)AS_N * AS_LEN);
    char *svals = xmalloc(8 * 4 * KiB), *sgot = xmalloc(4 * KiB);
    for (int i = 0; i < AS_N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "as:big:%d", i);
        fillPattern(vals + (size_t)i * AS_LEN, AS_LEN, seedOf(keys[i], AS_LEN));
    }
    mc_kvv items[AS_N + 1];
    struct iovec iov[AS_N + 1];
    mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    redisContext *r = rTcp(&s);
    long long child_seg = -1;
    pid_t child = -1;
    mc_put_opts to_child = {0};
    to_child.prefer = "as-child";

    TEST("async: n == 0 is an op done at once with 0; a NULL handle, NULL items or a NULL key are refused") {
        CHECK(c != NULL);
        if (c) {
            mc_op *op = mc_batch_put_async(c, 0, NULL, NULL);
            CHECK(op != NULL);
            CHECK_EQ(mc_op_done(op), 1);
            CHECK_EQ(mc_op_wait(op, 0), 0);
            CHECK(mc_op_results(op) != NULL);
            struct pollfd pfd = {mc_op_fd(op), POLLIN, 0};
            CHECK_EQ(poll(&pfd, 1, 0), 1);
            mc_op_free(op);
            CHECK(mc_batch_put_async(NULL, 1, items, NULL) == NULL);
            CHECK(mc_batch_get_async(c, 3, NULL) == NULL);
            CHECK(strstr(lastErr(c), "no items") != NULL);
            mc_kvv bad = {NULL, 5, iov, 1};
            CHECK(mc_batch_put_async(c, 1, &bad, NULL) == NULL);
            CHECK_EQ(mc_op_done(NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_op_wait(NULL, 0), MC_ERR_INVALID);
            mc_op_free(NULL);
        }
    }
    /* Read while the helper is stopped: put before it exists, so they are
     * in the server's own pool. */
    for (int i = 0; i < 8; i++) {
        snprintf(skeys[i], sizeof(skeys[i]), "as:sync:%d", i);
        fillPattern(svals + (size_t)i * 4 * KiB, 4 * KiB, seedOf(skeys[i], 4 * KiB));
        if (c) put(c, skeys[i], svals + (size_t)i * 4 * KiB, 4 * KiB, NULL);
    }
    TEST("async: a helper process hosts segment as-child (32 MiB) to stall a batch on (SIGSTOP)") {
        child = spawnHostChild(s.unix_uri, "as-child", 32 * MiB, &child_seg);
        CHECK(child > 0);
    }
    mc_op *op = NULL;
    TEST("async: a put of 64 x 64 KiB into the stopped helper returns at once and stays pending") {
        CHECK(c != NULL && child > 0);
        if (c && child > 0) {
            kill(child, SIGSTOP);
            asItems(items, iov, AS_N, keys, vals, AS_LEN);
            long long t0 = tsNowMs();
            op = asPut(c, AS_N, items, &to_child);
            CHECK(op != NULL);
            CHECK(tsNowMs() - t0 < 1000);
            if (op) {
                CHECK_EQ(mc_op_done(op), 0);
                CHECK_EQ(mc_op_wait(op, 0), MC_ERR_PENDING);
                CHECK(mc_op_results(op) == NULL);
                t0 = tsNowMs();
                CHECK_EQ(mc_op_wait(op, 100), MC_ERR_PENDING);
                CHECK(tsNowMs() - t0 >= 90);
                struct pollfd pfd = {mc_op_fd(op), POLLIN, 0};
                CHECK_EQ(poll(&pfd, 1, 0), 0);
            }
        }
    }
    TEST("async: synchronous gets on the same handle go on while its batch is stuck") {
        CHECK(op != NULL);
        int ok = 0;
        for (int round = 0; op && round < 5; round++)
            for (int i = 0; i < 8; i++) {
                long long n = get(c, skeys[i], sgot, 4 * KiB);
                ok += sameBytes(skeys[i], sgot, n, svals + (size_t)i * 4 * KiB, 4 * KiB);
                if (mc_op_done(op)) break;
            }
        CHECK_EQ(ok, 40);
        CHECK_EQ(op ? mc_op_done(op) : 1, 0);
    }
    TEST("async: after SIGCONT the op's fd becomes readable, and then it is done with 64 items OK") {
        if (child > 0) kill(child, SIGCONT);
        CHECK(op != NULL);
        if (op) {
            struct pollfd pfd = {mc_op_fd(op), POLLIN, 0};
            CHECK_EQ(poll(&pfd, 1, 10000), 1);
            CHECK_EQ(mc_op_done(op), 1); /* readable means done */
            uint64_t v = 0;
            CHECK_EQ(read(mc_op_fd(op), &v, sizeof(v)), (ssize_t)sizeof(v));
            CHECK_EQ(v, 1);
            CHECK_EQ(mc_op_wait(op, 0), AS_N);
            CHECK(asResultsAre(op, AS_N, MC_OK, "put"));
            CHECK_EQ(asCountOn(r, keys, AS_N, child_seg), AS_N); /* where it was stuck */
            mc_op_free(op);
            op = NULL;
        }
    }
    TEST("async: a get of the 64 keys into zeroed buffers, byte for byte") {
        memset(got, 0, (size_t)AS_N * AS_LEN);
        asItems(items, iov, AS_N, keys, got, AS_LEN);
        mc_op *g = asGet(c, AS_N, items);
        CHECK(asWaitIs(g, AS_N, "get"));
        CHECK(asResultsAre(g, AS_N, AS_LEN, "get"));
        for (int i = 0; i < AS_N; i++)
            CHECK(sameBytes(keys[i], got + (size_t)i * AS_LEN, AS_LEN, vals + (size_t)i * AS_LEN, AS_LEN));
        mc_op_free(g);
    }
    TEST("async: a missing key is NOT_FOUND in its slot alone") {
        memset(got, 0, 3 * AS_LEN);
        asItems(items, iov, 3, keys, got, AS_LEN);
        items[1].key = "as:missing";
        items[1].keylen = strlen("as:missing");
        mc_op *g = asGet(c, 3, items);
        CHECK(asWaitIs(g, 2, "get with a miss"));
        const long long *res = g ? mc_op_results(g) : NULL;
        CHECK(res != NULL);
        if (res) {
            CHECK(sameBytes(keys[0], got, res[0], vals, AS_LEN));
            CHECK_EQ(res[1], MC_ERR_NOT_FOUND);
            CHECK(sameBytes(keys[2], got + 2 * AS_LEN, res[2], vals + 2 * AS_LEN, AS_LEN));
        }
        mc_op_free(g);
    }
    TEST("async: a bad iovcnt or iov is answered as mc_batch_getv/putv answer it, not copied") {
        CHECK(c != NULL);
        if (c) {
            /* Whatever the batch makes of it (the item refused, or the whole
             * batch), the op says the same. */
            asItems(items, iov, 3, keys, got, AS_LEN);
            items[1].iovcnt = 0;
            items[2].iov = NULL;
            long long sres[3];
            int src = mc_batch_getv(c, 3, items, sres);
            mc_op *g = asGet(c, 3, items);
            CHECK(asWaitIs(g, src, "get with bad items"));
            CHECK(src < 2);
            const long long *res = g ? mc_op_results(g) : NULL;
            CHECK(res != NULL);
            for (int i = 0; res && i < 3; i++) CHECK_EQ(res[i], sres[i]);
            if (res) CHECK(res[1] < 0 && res[2] < 0);
            mc_op_free(g);
            items[1].iovcnt = MC_MAX_IOV + 1; /* read past the array if it were copied */
            items[1].iov = iov;
            int pres[3];
            src = mc_batch_putv(c, 3, items, NULL, pres);
            mc_op *p = asPut(c, 3, items, NULL);
            CHECK(asWaitIs(p, src, "put with bad items"));
            res = p ? mc_op_results(p) : NULL;
            for (int i = 0; res && i < 3; i++) CHECK_EQ(res[i], pres[i]);
            mc_op_free(p);
        }
    }
    TEST("async: a replacing put and a get of the same keys, submitted back to back: the get reads the new values") {
        enum { OR_N = 16 };
        char *nv = xmalloc(OR_N * AS_LEN);
        for (int i = 0; i < OR_N; i++) fillPattern(nv + (size_t)i * AS_LEN, AS_LEN, seedOf(keys[i], 7 + i));
        mc_kvv pitems[OR_N];
        struct iovec piov[OR_N];
        asItems(pitems, piov, OR_N, keys, nv, AS_LEN);
        memset(got, 0, OR_N * AS_LEN);
        asItems(items, iov, OR_N, keys, got, AS_LEN);
        mc_put_opts o = {0};
        o.replace = 1;
        mc_op *p = asPut(c, OR_N, pitems, &o);
        mc_op *g = asGet(c, OR_N, items);
        CHECK(asWaitIs(g, OR_N, "get after put"));
        CHECK(p != NULL && mc_op_done(p) == 1); /* in order: the put ended first */
        CHECK(asWaitIs(p, OR_N, "replacing put"));
        for (int i = 0; i < OR_N; i++)
            CHECK(sameBytes(keys[i], got + (size_t)i * AS_LEN, AS_LEN, nv + (size_t)i * AS_LEN, AS_LEN));
        memcpy(vals, nv, OR_N * AS_LEN); /* the keys hold these now */
        mc_op_free(p);
        mc_op_free(g);
        free(nv);
    }
    TEST("async: 200 small puts in flight at once, then 200 gets: run in order, every value right") {
        char *sv = xmalloc(AS_SMALL * KiB), *sg = xmalloc(AS_SMALL * KiB);
        static mc_kvv pit[AS_SMALL], git[AS_SMALL];
        static struct iovec piov[AS_SMALL], giov[AS_SMALL];
        static mc_op *pops[AS_SMALL], *gops[AS_SMALL];
        memset(sg, 0, AS_SMALL * KiB);
        for (int i = 0; i < AS_SMALL; i++) {
            snprintf(small[i], sizeof(small[i]), "as:small:%d", i);
            fillPattern(sv + (size_t)i * KiB, KiB, seedOf(small[i], KiB));
        }
        asItems(pit, piov, AS_SMALL, small, sv, KiB);
        asItems(git, giov, AS_SMALL, small, sg, KiB);
        for (int i = 0; i < AS_SMALL; i++) pops[i] = asPut(c, 1, &pit[i], NULL);
        for (int i = 0; i < AS_SMALL; i++) gops[i] = asGet(c, 1, &git[i]);
        CHECK(asWaitIs(gops[AS_SMALL - 1], 1, "last get"));
        int notdone = 0, bad = 0;
        for (int i = 0; i < AS_SMALL; i++) notdone += mc_op_done(pops[i]) != 1 || mc_op_done(gops[i]) != 1;
        CHECK_EQ(notdone, 0);
        for (int i = 0; i < AS_SMALL; i++) {
            bad += mc_op_wait(pops[i], -1) != 1 || mc_op_wait(gops[i], -1) != 1;
            if (!sameBytes(small[i], sg + (size_t)i * KiB, KiB, sv + (size_t)i * KiB, KiB)) bad++;
            mc_op_free(pops[i]);
            mc_op_free(gops[i]);
        }
        CHECK_EQ(bad, 0);
        free(sv);
        free(sg);
    }
    TEST("async: mc_op_free of an unfinished op waits for it (the helper stopped for 200 ms)") {
        CHECK(child > 0);
        if (c && child > 0) {
            char fkeys[AS_N][24];
            for (int i = 0; i < AS_N; i++) snprintf(fkeys[i], sizeof(fkeys[i]), "as:free:%d", i);
            asItems(items, iov, AS_N, fkeys, vals, AS_LEN);
            kill(child, SIGSTOP);
            asWaker w;
            mc_op *p = asPut(c, AS_N, items, &to_child);
            CHECK(p != NULL && mc_op_done(p) == 0);
            long long t0 = tsNowMs();
            int woke = asWakeLater(&w, child, 200);
            CHECK(woke);
            mc_op_free(p);
            long long took = tsNowMs() - t0;
            if (woke) pthread_join(w.tid, NULL);
            else kill(child, SIGCONT);
            /* The op stalls only if its replicas went to the stopped helper;
             * a PUT.START that placed them elsewhere (its segment full) lets
             * it finish at once, which says nothing about mc_op_free. */
            int on_child = asCountOn(r, fkeys, AS_N, child_seg);
            if (on_child == AS_N) CHECK(took >= 150);
            else fprintf(stderr, "  (%d of %d keys were placed off the stopped helper: not a stalled op)\n",
                         on_child, AS_N);
            if (took < 150) fprintf(stderr, "  mc_op_free returned after %lld ms\n", took);
            CHECK(getSame(c, fkeys[AS_N - 1], vals + (size_t)(AS_N - 1) * AS_LEN, AS_LEN, MC_TRANSPORT_TCP));
        }
    }
    TEST("async: mc_close with three ops queued finishes them first; they stay valid to wait on and free") {
        mc_client *c2 = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(c2 != NULL && child > 0);
        if (c2 && child > 0) {
            char ckeys[AS_N][24];
            for (int i = 0; i < AS_N; i++) snprintf(ckeys[i], sizeof(ckeys[i]), "as:close:%d", i);
            mc_kvv pit[AS_N], git[AS_N];
            struct iovec piov[AS_N], giov[AS_N];
            asItems(pit, piov, AS_N, ckeys, vals, AS_LEN);
            memset(got, 0, (size_t)AS_N * AS_LEN);
            asItems(git, giov, AS_N, keys, got, AS_LEN);
            kill(child, SIGSTOP);
            mc_op *p1 = asPut(c2, AS_N, pit, &to_child);
            mc_op *g = asGet(c2, AS_N, git);
            mc_op *p2 = asPut(c2, 8, pit + 8, NULL); /* 8 more, already put by p1: EXISTS */
            asWaker w;
            long long t0 = tsNowMs();
            int woke = asWakeLater(&w, child, 200);
            CHECK(woke);
            mc_close(c2);
            c2 = NULL;
            CHECK(tsNowMs() - t0 >= 150);
            if (woke) pthread_join(w.tid, NULL);
            else kill(child, SIGCONT);
            CHECK(p1 && g && p2);
            if (p1 && g && p2) {
                CHECK_EQ(mc_op_done(p1), 1);
                CHECK_EQ(mc_op_done(g), 1);
                CHECK_EQ(mc_op_done(p2), 1);
                CHECK_EQ(mc_op_wait(p1, 0), AS_N);
                CHECK(asResultsAre(p1, AS_N, MC_OK, "put before close"));
                CHECK_EQ(mc_op_wait(g, 0), AS_N);
                for (int i = 0; i < AS_N; i++)
                    CHECK(sameBytes(keys[i], got + (size_t)i * AS_LEN, mc_op_results(g)[i], vals + (size_t)i * AS_LEN,
                                    AS_LEN));
                CHECK_EQ(mc_op_wait(p2, 0), 0);
                CHECK(asResultsAre(p2, 8, MC_ERR_EXISTS, "second put before close"));
            }
            mc_op_free(p1);
            mc_op_free(g);
            mc_op_free(p2);
        }
        mcClose(&c2);
    }
    TEST("async: buffers registered, unregistered and settings changed after the worker started") {
        CHECK(c != NULL);
        if (c) {
            char *buf = xmalloc(4 * AS_LEN);
            memset(buf, 0, 4 * AS_LEN);
            CHECK_EQ(mc_register(c, buf, 4 * AS_LEN, MC_MEM_HOST), MC_OK);
            CHECK_EQ(mc_set_transport(c, MC_TRANSPORT_AUTO), MC_OK);
            CHECK_EQ(mc_set_lease_release(c, 0), MC_OK);
            asItems(items, iov, 4, keys, buf, AS_LEN);
            mc_op *g = asGet(c, 4, items);
            CHECK(asWaitIs(g, 4, "get into a registered buffer"));
            for (int i = 0; i < 4; i++)
                CHECK(sameBytes(keys[i], buf + (size_t)i * AS_LEN, AS_LEN, vals + (size_t)i * AS_LEN, AS_LEN));
            mc_op_free(g);
            CHECK_EQ(mc_unregister(c, buf), MC_OK);
            CHECK_EQ(mc_set_lease_release(c, 1), MC_OK);
            CHECK_EQ(mc_set_transport(c, MC_TRANSPORT_TCP), MC_OK);
            free(buf);
        }
    }
    /* Scatter-gather proper: a test once mc_batch_putv takes several buffers. */
    {
        char k[] = "as:probe";
        char b[2][8] = {"abcd", "efgh"};
        struct iovec pv[2] = {{b[0], 4}, {b[1], 4}};
        mc_kvv probe = {k, strlen(k), pv, 2};
        int pr = MC_ERR_INVALID;
        int prc = c ? mc_batch_putv(c, 1, &probe, NULL, &pr) : MC_ERR_INVALID;
        if (prc >= 0 && pr == MC_ERR_UNSUPPORTED)
            printf("SKIP: async: multi-buffer put/get round trip: mc_batch_putv answers UNSUPPORTED for iovcnt 2 "
                   "(scatter-gather not built yet)\n");
        else
            TEST("async: items of three buffers each: put and get round trip byte for byte") {
                CHECK(prc == 1 && pr == MC_OK);
                asMultiBuffer(c, vals);
            }
    }
    TEST("async: a worker that cannot connect finishes the op with MC_ERR_IO in every slot") {
        tsServer s2;
        int started = tsStart(&s2, NULL) == 0;
        CHECK(started);
        mc_client *c3 = started ? mcOpen(s2.tcp_uri, NULL, MC_TRANSPORT_TCP) : NULL;
        CHECK(c3 != NULL);
        if (started) tsStop(&s2);
        if (c3) {
            asItems(items, iov, 4, keys, got, AS_LEN);
            mc_op *g = asGet(c3, 4, items);
            CHECK(asWaitIs(g, MC_ERR_IO, "get from a stopped server"));
            CHECK(asResultsAre(g, 4, MC_ERR_IO, "get from a stopped server"));
            CHECK(strstr(lastErr(c3), "async") != NULL);
            mc_op_free(g);
        }
        mcClose(&c3);
        if (started) tsCleanup(&s2);
    }
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        tsUntrack(child);
    }
    mcClose(&c);
    rClose(&r);
    free(vals);
    free(got);
    free(svals);
    free(sgot);
    tsGroupFinish(&s, group, failed0);
}

/* ==== ranges: mc_batch_get_ranges, and replica descriptions (mc_batch_replicas) ===================== */

/* Destinations carved from one registered buffer, each followed by guard
 * bytes, so a range that writes a byte past its length is caught. */
typedef struct {
    char *base;
    size_t cap, used;
} rgArena;

static char *rgTake(rgArena *a, size_t len) {
    size_t step = (len + GUARD + 63) & ~(size_t)63;
    if (a->used + step > a->cap) {
        fprintf(stderr, "  test arena of %zu bytes exhausted\n", a->cap);
        tsKillAll();
        abort();
    }
    char *p = a->base + a->used;
    a->used += step;
    memset(p, 0, len);
    setGuard(p, len);
    return p;
}

/* Range g read as want[src_off .. src_off+len) with result res, nothing
 * past its end written. */
static int rgSame(const char *what, const mc_range *g, long long res, const char *want) {
    char w[200];
    snprintf(w, sizeof(w), "%s [%llu, +%zu)", what, (unsigned long long)g->src_off, g->len);
    int ok = sameBytes(w, g->dst, res, want + g->src_off, g->len);
    return ok && guardIntact(g->dst, g->len);
}

/* Every result is its expected value; says which is not. */
static int rgResults(const char *what, const long long *res, const long long *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (res[i] != want[i]) {
            fprintf(stderr, "  %s: range %zu answered %lld (%s), expected %lld (%s)\n", what, i, res[i],
                    res[i] < 0 ? mc_strerror((int)res[i]) : "bytes", want[i], want[i] < 0 ? mc_strerror((int)want[i]) : "bytes");
            return 0;
        }
    return 1;
}

static int rgBatch(mc_client *c, size_t n, const mc_kranges *items, long long *res) {
    int rc = mc_batch_get_ranges(c, n, items, res);
    if (rc < 0) fprintf(stderr, "  mc_batch_get_ranges: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(c));
    return rc;
}

#define RG_A 5000
#define RG_B (300 * KiB + 1)
#define RG_BIG (9 * MiB + 3)
#define RG_H (200 * KiB + 7)
#define RG_ARENA (24 * MiB)

/* The ranged-read tests over one handle (its transport forced). */
static void rgOver(mc_client *c, int transport, redisContext *r, rgArena *ar, const char *a, const char *b,
                   const char *big) {
    const char *tn = transportName(transport);
    static char name[200]; /* test_cur_name: the test ends inside TEST, but the compiler cannot see it */
    snprintf(name, sizeof(name), "ranges over %s: several ranges per key, one key in two items, ranges at the object's end, len 0", tn);
    TEST(name) {
        ar->used = 0;
        mc_range ra[4] = {{rgTake(ar, 100), 0, 100},
                          {rgTake(ar, 100), RG_A - 100, 100},
                          {rgTake(ar, 0), 1234, 0},
                          {rgTake(ar, 0), RG_A, 0}};
        mc_range rb[3] = {{rgTake(ar, 70000), 0, 70000}, {rgTake(ar, 10), RG_B - 10, 10}, {rgTake(ar, 1), 150000, 1}};
        mc_range ra2[2] = {{rgTake(ar, RG_A - 10), 10, RG_A - 10}, {rgTake(ar, RG_A), 0, RG_A}};
        mc_kranges items[3] = {{"rg:a", 4, ra, 4}, {"rg:b", 4, rb, 3}, {"rg:a", 4, ra2, 2}};
        long long res[9], want[9] = {100, 100, 0, 0, 70000, 10, 1, RG_A - 10, RG_A};
        for (int i = 0; i < 9; i++) res[i] = 12345;
        CHECK_EQ(rgBatch(c, 3, items, res), 9);
        CHECK(rgResults(name, res, want, 9));
        for (int i = 0; i < 4; i++) CHECK(rgSame("rg:a", &ra[i], res[i], a));
        for (int i = 0; i < 3; i++) CHECK(rgSame("rg:b", &rb[i], res[4 + i], b));
        for (int i = 0; i < 2; i++) CHECK(rgSame("rg:a (second item)", &ra2[i], res[7 + i], a));
        CHECK_EQ(mc_last_transport(c), transport);
        /* rg:a was granted two leases (one per item): both released. */
        CHECK(leaseEndsWithin(r, "rg:a", 2000));
        CHECK(leaseEndsWithin(r, "rg:b", 2000));
    }
    snprintf(name, sizeof(name), "ranges over %s: a range outside the object fails alone, the item's others are read", tn);
    TEST(name) {
        ar->used = 0;
        mc_range g[6] = {{rgTake(ar, 10), 0, 10},
                         {rgTake(ar, 6), RG_A - 5, 6},           /* one byte past the end */
                         {rgTake(ar, 0), RG_A + 1, 0},           /* an empty range past the end */
                         {rgTake(ar, 10), UINT64_MAX - 4, 10},   /* off + len wraps around */
                         {rgTake(ar, 16), 4 * (uint64_t)RG_A, 16},
                         {rgTake(ar, 10), RG_A - 10, 10}};
        mc_kranges item = {"rg:a", 4, g, 6};
        long long res[6], want[6] = {10, MC_ERR_INVALID, MC_ERR_INVALID, MC_ERR_INVALID, MC_ERR_INVALID, 10};
        CHECK_EQ(rgBatch(c, 1, &item, res), 2);
        CHECK(rgResults(name, res, want, 6));
        CHECK(rgSame("rg:a", &g[0], res[0], a));
        CHECK(rgSame("rg:a", &g[5], res[5], a));
        for (int i = 1; i <= 4; i++) CHECK(guardIntact(g[i].dst, g[i].len) && (g[i].len == 0 || ((char *)g[i].dst)[0] == 0));
        CHECK(strstr(lastErr(c), "not inside the object") != NULL);
    }
    snprintf(name, sizeof(name), "ranges over %s: unregistered dst fails alone; missing key NOT_FOUND, pending key NOT_READY in all their ranges", tn);
    TEST(name) {
        ar->used = 0;
        char unreg[32];
        mc_range ga[3] = {{rgTake(ar, 10), 0, 10}, {unreg, 0, 10}, {NULL, 7, 0}};
        mc_range gm[2] = {{rgTake(ar, 10), 0, 10}, {rgTake(ar, 5), 5, 5}};
        mc_range gp[1] = {{rgTake(ar, 10), 0, 10}};
        mc_range gb[1] = {{rgTake(ar, 200), 100, 200}};
        mc_kranges items[4] = {{"rg:a", 4, ga, 3}, {"rg:missing", 10, gm, 2}, {"rg:pending", 10, gp, 1}, {"rg:b", 4, gb, 1}};
        long long res[7], want[7] = {10, MC_ERR_INVALID, 0, MC_ERR_NOT_FOUND, MC_ERR_NOT_FOUND, MC_ERR_NOT_READY, 200};
        CHECK_EQ(rgBatch(c, 4, items, res), 3);
        CHECK(rgResults(name, res, want, 7));
        CHECK(rgSame("rg:a", &ga[0], res[0], a));
        CHECK(rgSame("rg:b", &gb[0], res[6], b));
        CHECK(((char *)gm[0].dst)[0] == 0 && guardIntact(gm[0].dst, 10) && ((char *)gp[0].dst)[0] == 0 && guardIntact(gp[0].dst, 10));
    }
    snprintf(name, sizeof(name), "ranges over %s: a 9 MiB object read in 41 pieces, in two items, is byte-exact", tn);
    TEST(name) {
        ar->used = 0;
        enum { NP = 41 };
        mc_range g[NP];
        long long res[NP], want[NP];
        uint64_t off = 0, s = seedOf("rg:pieces", 41);
        for (int i = 0; i < NP; i++) {
            /* Lengths from 1 B to 512 KiB: small ones share SEG.READVs,
             * large ones are SEG.READs of their own. */
            s = mix64(s);
            size_t len = i == NP - 1 ? RG_BIG - off : (size_t)(s % (i % 3 ? 512 * KiB : 3000)) + 1;
            if (off + len > RG_BIG) len = RG_BIG - off;
            g[i] = (mc_range){rgTake(ar, len), off, len};
            want[i] = (long long)len;
            off += len;
        }
        CHECK_EQ(off, RG_BIG);
        mc_kranges items[2] = {{"rg:big", 6, g, 20}, {"rg:big", 6, g + 20, NP - 20}};
        CHECK_EQ(rgBatch(c, 2, items, res), NP);
        CHECK(rgResults(name, res, want, NP));
        for (int i = 0; i < NP; i++) CHECK(rgSame("rg:big", &g[i], res[i], big));
        CHECK_EQ(mc_last_transport(c), transport);
    }
}

/* Describes keys[0..n) with c; the mc_batch_replicas return value. */
static int rpDescribe(mc_client *c, size_t n, const char *const *names, mc_replicas *out, int *res) {
    mc_key keys[8];
    keysOf(keys, names, n);
    int rc = mc_batch_replicas(c, n, keys, out, res);
    if (rc < 0) fprintf(stderr, "  mc_batch_replicas: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(c));
    return rc;
}

/* A description's replica j is segment seg at the offset GET.REPLICAS
 * lists, its length size, named name, served at endpoint. */
static int rpReplicaIs(const mc_replicas *d, int j, long long seg, long long off, uint64_t size, const char *name,
                       const char *endpoint) {
    const mc_replica_info *x = &d->replicas[j];
    int ok = (long long)x->seg_id == seg && (long long)x->offset == off && x->len == size && d->size == size &&
             !strcmp(x->seg_name, name) && !strcmp(x->endpoint, endpoint);
    if (!ok)
        fprintf(stderr, "  replica %d: seg %llu '%s' at %llu, %llu of %llu bytes, endpoint '%s'; expected seg %lld '%s' at %lld, %llu bytes, '%s'\n",
                j, (unsigned long long)x->seg_id, x->seg_name, (unsigned long long)x->offset, (unsigned long long)x->len,
                (unsigned long long)d->size, x->endpoint, seg, name, off, (unsigned long long)size, endpoint);
    return ok;
}

static void testRanges(void) {
    const char *group = "ranges";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", "--segment-size", "128mb", NULL), &s, group)) return;
    redisContext *r = rTcp(&s), *rp = rTcp(&s);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *host = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_AUTO);
    char *a = xmalloc(RG_A), *b = xmalloc(RG_B), *big = xmalloc(RG_BIG), *h = xmalloc(RG_H);
    rgArena ar = {xmalloc(RG_ARENA), RG_ARENA, 0};
    fillPattern(a, RG_A, seedOf("rg:a", RG_A));
    fillPattern(b, RG_B, seedOf("rg:b", RG_B));
    fillPattern(big, RG_BIG, seedOf("rg:big", RG_BIG));
    fillPattern(h, RG_H, seedOf("rg:h", RG_H));
    long long host_seg = -1;

    TEST("ranges: put the objects, a pending put (hiredis), a segment hosted by a third handle, buffers registered") {
        CHECK(r && rp && cshm && ctcp && host);
        if (ctcp) {
            CHECK_EQ(put(ctcp, "rg:a", a, RG_A, NULL), MC_OK);
            CHECK_EQ(put(ctcp, "rg:b", b, RG_B, NULL), MC_OK);
            CHECK_EQ(put(ctcp, "rg:big", big, RG_BIG, NULL), MC_OK);
        }
        redisReply *p = rcmd(rp, "PUT.START rg:pending 100");
        CHECK(p && p->type == REDIS_REPLY_ARRAY);
        freeReplyObject(p);
        if (host) {
            CHECK_EQ(mc_mount(host, 16 * MiB, "rg-host"), MC_OK);
            host_seg = mc_mount_id(host);
            CHECK(host_seg > 1);
        }
        if (ctcp) {
            mc_put_opts o = {0};
            o.replicas = 2;
            o.prefer = "rg-host";
            CHECK_EQ(put(ctcp, "rg:h", h, RG_H, &o), MC_OK);
        }
        if (cshm) CHECK_EQ(mc_register(cshm, ar.base, ar.cap, MC_MEM_HOST), MC_OK);
        if (ctcp) CHECK_EQ(mc_register(ctcp, ar.base, ar.cap, MC_MEM_HOST), MC_OK);
    }
    if (cshm) rgOver(cshm, MC_TRANSPORT_SHM, r, &ar, a, b, big);
    if (ctcp) rgOver(ctcp, MC_TRANSPORT_TCP, r, &ar, a, b, big);
    TEST("ranges: items refused whole (empty key, nranges past MC_MAX_IOV) fill their slots; nranges 0 and < 0 have none") {
        ar.used = 0;
        mc_range *many = xmalloc((MC_MAX_IOV + 1) * sizeof(*many));
        char *d = rgTake(&ar, 10);
        for (int i = 0; i <= MC_MAX_IOV; i++) many[i] = (mc_range){d, 0, 10};
        mc_range one = {d, 0, 10};
        mc_kranges items[5] = {{NULL, 0, many, 2}, {"rg:a", 4, many, MC_MAX_IOV + 1}, {"rg:a", 4, many, -1},
                               {"rg:a", 4, NULL, 0}, {"rg:a", 4, &one, 1}};
        size_t slots = 2 + MC_MAX_IOV + 1 + 1;
        long long *res = xmalloc((slots + 1) * sizeof(*res));
        for (size_t i = 0; i <= slots; i++) res[i] = 777;
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(rgBatch(ctcp, 5, items, res), 1);
            int bad = 0;
            for (size_t i = 0; i + 1 < slots; i++) bad += res[i] != MC_ERR_INVALID;
            CHECK_EQ(bad, 0);
            CHECK_EQ(res[slots - 1], 10);
            CHECK_EQ(res[slots], 777); /* nothing written past the last slot */
            CHECK(rgSame("rg:a", &one, res[slots - 1], a));
            CHECK_EQ(mc_batch_get_ranges(ctcp, 0, NULL, NULL), 0);
            CHECK_EQ(mc_batch_get_ranges(NULL, 1, items, res), MC_ERR_INVALID);
            CHECK_EQ(mc_batch_get_ranges(ctcp, 1, NULL, res), MC_ERR_INVALID);
        }
        free(res);
        free(many);
    }
    TEST("ranges: an object in a client-hosted segment (mc_mount), over tcp and shm, byte-exact") {
        for (int p = 0; p < 2; p++) {
            mc_client *c = p ? cshm : ctcp;
            if (!c) continue;
            ar.used = 0;
            mc_range g[3] = {{rgTake(&ar, 100 * KiB), 0, 100 * KiB},
                             {rgTake(&ar, 77), RG_H - 77, 77},
                             {rgTake(&ar, 4096), 150 * KiB, 4096}};
            mc_kranges item = {"rg:h", 4, g, 3};
            long long res[3], want[3] = {100 * KiB, 77, 4096};
            CHECK_EQ(rgBatch(c, 1, &item, res), 3);
            CHECK(rgResults("rg:h", res, want, 3));
            for (int i = 0; i < 3; i++) CHECK(rgSame("rg:h", &g[i], res[i], h));
            CHECK_EQ(mc_last_transport(c), p ? MC_TRANSPORT_SHM : MC_TRANSPORT_TCP);
        }
    }
    char self_tcp[96];
    snprintf(self_tcp, sizeof(self_tcp), "tcp://127.0.0.1:%d", s.port);
    TEST("replicas: pool objects: segment 1 'self' at the offset GET.REPLICAS lists, the size, the server's tcp endpoint") {
        long long segs[2][4], offs[2][4];
        const char *names[2] = {"rg:a", "rg:big"};
        for (int i = 0; i < 2; i++) {
            CHECK_EQ(replicaList(r, names[i], segs[i], offs[i], 4), 1);
            freeReplyObject(rcmd(r, "LEASE.RELEASE %s", names[i]));
        }
        mc_replicas out[2];
        int res[2] = {99, 99};
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(rpDescribe(ctcp, 2, names, out, res), 2);
            CHECK(res[0] == 1 && res[1] == 1);
            CHECK(out[0].nreplicas == 1 && out[1].nreplicas == 1);
            CHECK(rpReplicaIs(&out[0], 0, 1, offs[0][0], RG_A, "self", self_tcp));
            CHECK(rpReplicaIs(&out[1], 0, 1, offs[1][0], RG_BIG, "self", self_tcp));
            CHECK(leaseEndsWithin(r, "rg:a", 2000));
            CHECK(leaseEndsWithin(r, "rg:big", 2000));
        }
    }
    TEST("replicas: an object in a client-hosted segment (mc_mount): its id, name and the host's tcp endpoint, then self") {
        char host_tcp[300];
        segEndpoint(r, "rg-host", "tcp://", host_tcp, sizeof(host_tcp));
        CHECK(host_tcp[0] != '\0');
        long long segs[4], offs[4];
        CHECK_EQ(replicaList(r, "rg:h", segs, offs, 4), 2);
        freeReplyObject(rcmd(r, "LEASE.RELEASE rg:h"));
        const char *names[1] = {"rg:h"};
        mc_replicas out[1];
        int res[1];
        for (int p = 0; p < 2; p++) { /* the shm handle reached the server over its unix socket */
            mc_client *c = p ? cshm : ctcp;
            if (!c) continue;
            CHECK_EQ(rpDescribe(c, 1, names, out, res), 1);
            CHECK_EQ(res[0], 2);
            CHECK_EQ(out[0].nreplicas, 2);
            CHECK(rpReplicaIs(&out[0], 0, host_seg, offs[0], RG_H, "rg-host", host_tcp));
            CHECK(rpReplicaIs(&out[0], 1, 1, offs[1], RG_H, "self", self_tcp));
            CHECK(leaseEndsWithin(r, "rg:h", 2000));
        }
    }
    TEST("replicas: missing and pending keys beside a present one; one key twice; no lease left behind") {
        const char *names[4] = {"rg:missing", "rg:pending", "rg:b", "rg:b"};
        mc_replicas *out = xmalloc(4 * sizeof(*out));
        memset(out, 0xff, 4 * sizeof(*out));
        int res[4];
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(rpDescribe(ctcp, 4, names, out, res), 2);
            CHECK_EQ(res[0], MC_ERR_NOT_FOUND);
            CHECK_EQ(res[1], MC_ERR_NOT_READY);
            CHECK(res[2] == 1 && res[3] == 1);
            CHECK(out[0].nreplicas == 0 && out[0].size == 0 && out[1].nreplicas == 0 && out[1].size == 0);
            CHECK(out[2].size == RG_B && out[3].size == RG_B && out[2].replicas[0].offset == out[3].replicas[0].offset);
            CHECK(out[2].replicas[1].seg_id == 0 && out[2].replicas[1].seg_name[0] == '\0'); /* zeroed */
            CHECK(leaseEndsWithin(r, "rg:b", 2000));
            mc_key empty[2] = {{"rg:a", 4}, {"", 0}};
            CHECK_EQ(mc_batch_replicas(ctcp, 2, empty, out, res), MC_ERR_INVALID);
            CHECK(res[0] == MC_ERR_INVALID && res[1] == MC_ERR_INVALID);
            CHECK_EQ(mc_batch_replicas(ctcp, 0, NULL, NULL, NULL), 0);
        }
        free(out);
    }
    freeReplyObject(rcmd(rp, "PUT.REVOKE rg:pending"));
    mcClose(&cshm);
    mcClose(&ctcp);
    mcClose(&host);
    rClose(&r);
    rClose(&rp);
    free(a);
    free(b);
    free(big);
    free(h);
    free(ar.base);
    tsGroupFinish(&s, group, failed0);
}

/* ==== device: device memory through libmooncake, against a fake CUDA device ======================== */

#ifdef MC_FAKE_CUDA
/* Built as test_mooncake_fakecuda: the library's mc_cuda.c is the fake
 * device (MC_FAKE_CUDA), whose memory the CPU cannot touch: a path that
 * memcpys or recvs into it without staging crashes or fails here. The test
 * reads and writes that memory only through mcCudaCopy, as a program would
 * with cudaMemcpy. */
#define DV_N (3 * MiB + 5)
#define DV_DEV (8 * MiB)

static unsigned long long dvCopies(void) {
    unsigned long long n = 0;
    mcCudaFakeStats(&n, NULL);
    return n;
}

/* dev[at .. at+len) is want[0..len). */
static int dvSame(const char *what, const char *dev, size_t at, long long res, const char *want, size_t len) {
    char *tmp = xmalloc(len ? len : 1);
    char err[256] = "";
    int rc = len ? mcCudaCopy(tmp, dev + at, len, err, sizeof(err)) : MC_OK;
    if (rc != MC_OK) fprintf(stderr, "  %s: copy from the device: %s\n", what, err);
    int ok = rc == MC_OK && sameBytes(what, tmp, res, want, len);
    free(tmp);
    return ok;
}

static void testDevice(void) {
    const char *group = "device (fake CUDA)";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char *v = xmalloc(DV_N), *fill = xmalloc(DV_DEV), *hostbuf = xmalloc(MiB);
    fillPattern(v, DV_N, seedOf("dv:obj", DV_N));
    memset(fill, 0xEE, DV_DEV);
    char *dev = mcCudaFakeMalloc(DV_DEV), *dev2 = mcCudaFakeMalloc(MiB);
    char err[256];

    TEST("device: fake device memory registers as MC_MEM_CUDA, host memory does not; the object is put") {
        CHECK(cshm && ctcp && dev && dev2);
        CHECK(mcCudaIsDevicePtr(dev) && mcCudaIsDevicePtr(dev + DV_DEV - 1) && !mcCudaIsDevicePtr(v));
        for (int p = 0; p < 2 && cshm && ctcp && dev; p++) {
            mc_client *c = p ? ctcp : cshm;
            CHECK_EQ(mc_register(c, dev, DV_DEV, MC_MEM_CUDA), MC_OK);
            CHECK_EQ(mc_register(c, hostbuf, MiB, MC_MEM_CUDA), MC_ERR_INVALID);
            CHECK_EQ(mc_register(c, hostbuf, MiB, MC_MEM_HOST), MC_OK);
        }
        if (ctcp) CHECK_EQ(put(ctcp, "dv:obj", v, DV_N, NULL), MC_OK);
    }
    for (int p = 0; p < 2; p++) {
        mc_client *c = p ? ctcp : cshm;
        int t = p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM;
        char name[200];
        snprintf(name, sizeof(name), "device: mc_get_into device memory over %s is staged and byte-exact", transportName(t));
        TEST(name) {
            if (!c || !dev) {
                CHECK(c && dev);
                continue;
            }
            CHECK_EQ(mcCudaCopy(dev, fill, DV_DEV, err, sizeof(err)), MC_OK);
            unsigned long long c0 = dvCopies();
            long long got = mc_get_into(c, "dv:obj", 6, dev, DV_DEV);
            CHECK_EQ(got, (long long)DV_N);
            CHECK_EQ(dvCopies() - c0, 1); /* one copy out of the staging buffer */
            CHECK_EQ(mc_last_transport(c), t);
            CHECK(dvSame("mc_get_into", dev, 0, got, v, DV_N));
            CHECK(dvSame("after it", dev, DV_N, 64, fill, 64));
        }
        snprintf(name, sizeof(name), "device: ranged reads into device memory over %s: staged, byte-exact, beside host ranges", transportName(t));
        TEST(name) {
            if (!c || !dev) {
                CHECK(c && dev);
                continue;
            }
            CHECK_EQ(mcCudaCopy(dev, fill, DV_DEV, err, sizeof(err)), MC_OK);
            memset(hostbuf, 0, MiB);
            mc_range g[7] = {{dev, 0, 1000},
                             {dev + 4096, DV_N - 777, 777},           /* the object's end */
                             {dev + MiB, MiB, 2 * MiB},               /* a large one */
                             {hostbuf, 5, 100},                       /* host memory in the same item */
                             {dev + 7 * MiB, 123, 0},                 /* len 0 */
                             {dev + 7 * MiB, DV_N - 10, 11},          /* past the end: alone */
                             {dev2, 0, 10}};                          /* unregistered device memory: alone */
            mc_range g2[1] = {{dev + 6 * MiB, 17, 64 * KiB}};         /* the same key, another item */
            mc_kranges items[3] = {{"dv:obj", 6, g, 7}, {"dv:missing", 10, g + 4, 1}, {"dv:obj", 6, g2, 1}};
            long long res[9], want[9] = {1000, 777, 2 * MiB, 100, 0, MC_ERR_INVALID, MC_ERR_INVALID, MC_ERR_NOT_FOUND, 64 * KiB};
            unsigned long long c0 = dvCopies();
            CHECK_EQ(rgBatch(c, 3, items, res), 6);
            CHECK(rgResults(name, res, want, 9));
            CHECK_EQ(dvCopies() - c0, 4); /* one per nonempty device range read */
            CHECK_EQ(mc_last_transport(c), t);
            CHECK(dvSame("range 0", dev, 0, res[0], v, 1000));
            CHECK(dvSame("range 1", dev, 4096, res[1], v + DV_N - 777, 777));
            CHECK(dvSame("range 2", dev, MiB, res[2], v + MiB, 2 * MiB));
            CHECK(sameBytes("host range", hostbuf, res[3], v + 5, 100));
            CHECK(dvSame("second item", dev, 6 * MiB, res[8], v + 17, 64 * KiB));
            /* Nothing written past a range, nor where refused ranges point. */
            CHECK(dvSame("after range 0", dev, 1000, 64, fill, 64));
            CHECK(dvSame("after range 1", dev, 4096 + 777, 64, fill, 64));
            CHECK(dvSame("after range 2", dev, 3 * MiB, 64, fill, 64));
            CHECK(dvSame("refused range", dev, 7 * MiB, 64, fill, 64));
        }
    }
    if (dev) mcCudaFakeFree(dev);
    if (dev2) mcCudaFakeFree(dev2);
    mcClose(&cshm);
    mcClose(&ctcp);
    free(v);
    free(fill);
    free(hostbuf);
    tsGroupFinish(&s, group, failed0);
}
#else
static void testDevice(void) {
    printf("SKIP: device: device memory is tested by test_mooncake_fakecuda (this build has the real CUDA glue)\n");
}
#endif

/* ==== hosted segment tokens (issue 25, finding 5) ===================================================== */

/* A hosted segment admits a peer only with the segment's token (SEG.AUTH,
 * the server hands it out by SEGMENT.TOKEN) or the host's credentials --
 * here the server has no password, so only the token -- on tcp and on the
 * unix socket (SHM.ATTACH hands out the memfd), with a cap on connections
 * and on SEG.WRITEV payload buffered across them. Before, anyone on the
 * machine read and overwrote objects, and 1000 connections made 1000
 * threads. */

#define HT_SEGSIZE (16 * MiB)

/* A raw connection to a tcp://ip:port or unix://@name endpoint; -1 if none. */
static int htConnect(const char *ep) {
    int fd = -1;
    if (!strncmp(ep, "unix://@", 8)) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        size_t nl = strlen(ep + 8);
        if (nl + 1 > sizeof(sa.sun_path)) return -1;
        memcpy(sa.sun_path + 1, ep + 8, nl);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl))) {
            close(fd);
            fd = -1;
        }
        return fd;
    }
    const char *colon = strrchr(ep, ':');
    if (strncmp(ep, "tcp://", 6) || colon == NULL) return -1;
    char ip[64];
    snprintf(ip, sizeof(ip), "%.*s", (int)(colon - ep - 6), ep + 6);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) return -1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int htSend(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The first line the peer sends (CRLF dropped) within ms; "" on EOF, NULL
 * on a timeout or an error. */
static const char *htLine(int fd, char *buf, size_t cap, int ms) {
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) != 1) return NULL;
        ssize_t r = read(fd, buf + n, 1);
        if (r < 0) return NULL;
        if (r == 0) break;
        if (buf[n] == '\n') break;
        n++;
    }
    buf[n] = '\0';
    if (n && buf[n - 1] == '\r') buf[n - 1] = '\0';
    return buf;
}

/* Whether the peer closed fd (EOF or reset) within ms. */
static int htClosed(int fd, int ms) {
    char c;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1) return 0;
    return read(fd, &c, 1) <= 0;
}

/* A RESP command of argc C strings. */
static int htCmd(int fd, int argc, const char **argv) {
    char buf[4096];
    int n = snprintf(buf, sizeof(buf), "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    return n < (int)sizeof(buf) ? htSend(fd, buf, (size_t)n) : -1;
}

/* Sends argv and checks the first reply line starts with want. */
static int htExpect(int fd, int argc, const char **argv, const char *want, const char *what) {
    char line[512];
    const char *got = htCmd(fd, argc, argv) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
    int ok = got && !strncmp(got, want, strlen(want));
    if (!ok) fprintf(stderr, "  %s: expected %s..., got %s\n", what, want, got ? got : "(nothing)");
    return ok;
}

static void testHostTokens(void) {
    const char *group = "hosted segment tokens";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP), *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    long long id = -1;
    char idbuf[24] = "0", tcp_ep[300] = "", unix_ep[300] = "", token[200] = "";
    const size_t n = 300 * 1000 + 3;
    if (host && mc_mount(host, HT_SEGSIZE, "host-a") == MC_OK) id = mc_mount_id(host);
    snprintf(idbuf, sizeof(idbuf), "%lld", id);
    segEndpoint(r, "host-a", "tcp://", tcp_ep, sizeof(tcp_ep));
    segEndpoint(r, "host-a", "unix://@", unix_ep, sizeof(unix_ep));
    redisReply *tr = rcmd(r, "SEGMENT.TOKEN host-a");
    if (tr && tr->type == REDIS_REPLY_STRING) snprintf(token, sizeof(token), "%s", tr->str);
    freeReplyObject(tr);

    TEST("host tokens: libmooncake readers and writers (other handles, tcp and shm) move bytes exactly") {
        CHECK(id > 1 && tcp_ep[0] && unix_ep[0] && ctcp && cshm);
        CHECK(strlen(token) >= 32);
        hostedPutGet(ctcp, r, "tk:tcp", n, MC_TRANSPORT_TCP, id);
        hostedPutGet(cshm, r, "tk:shm", n, MC_TRANSPORT_SHM, id);
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("tk:shm", n));
        CHECK(getSame(ctcp, "tk:shm", v, n, MC_TRANSPORT_TCP));
        fillPattern(v, n, seedOf("tk:tcp", n));
        CHECK(getSame(cshm, "tk:tcp", v, n, MC_TRANSPORT_SHM));
        free(v);
    }
    TEST("host tokens: without the token a raw peer is refused SEG.READ, SEG.WRITE, SEG.READV, SEG.WRITEV, SHM.ATTACH") {
        long long segs[2], offs[2];
        char off[24] = "0";
        if (replicaList(r, "tk:tcp", segs, offs, 2) == 1) snprintf(off, sizeof(off), "%lld", offs[0]);
        int fd = htConnect(tcp_ep);
        CHECK(fd >= 0);
        if (fd >= 0) {
            const char *rd[] = {"SEG.READ", idbuf, off, "16"};
            CHECK(htExpect(fd, 4, rd, "-NOAUTH", "SEG.READ without a token"));
            const char *wr[] = {"SEG.WRITE", idbuf, off, "XXXXXXXXXXXXXXXX"};
            CHECK(htExpect(fd, 4, wr, "-NOAUTH", "SEG.WRITE without a token"));
            const char *bad[] = {"SEG.AUTH", idbuf, "00000000000000000000000000000000"};
            CHECK(htExpect(fd, 3, bad, "-WRONGTOKEN", "SEG.AUTH with a wrong token"));
            CHECK(htExpect(fd, 4, rd, "-NOAUTH", "SEG.READ after a wrong token"));
            const char *ping[] = {"PING"};
            CHECK(htExpect(fd, 1, ping, "+PONG", "PING (the server's probe) needs nothing"));
            close(fd);
        }
        /* A vector is refused at its segment id, before any payload is
         * buffered, and the connection is closed. */
        const char *rv[] = {"SEG.READV", idbuf, off, "16"}, *wv[] = {"SEG.WRITEV", idbuf, off, "XXXXXXXXXXXXXXXX"};
        for (int k = 0; k < 2; k++) {
            fd = htConnect(tcp_ep);
            CHECK(fd >= 0);
            if (fd < 0) continue;
            CHECK(htExpect(fd, 4, k ? wv : rv, "-NOAUTH", k ? "SEG.WRITEV without a token" : "SEG.READV without a token"));
            CHECK(htClosed(fd, 5000));
            close(fd);
        }
        int ufd = htConnect(unix_ep);
        CHECK(ufd >= 0);
        if (ufd >= 0) {
            const char *at[] = {"SHM.ATTACH", idbuf};
            CHECK(htExpect(ufd, 2, at, "-NOAUTH", "SHM.ATTACH without a token"));
            const char *rd[] = {"SEG.READ", idbuf, off, "16"};
            CHECK(htExpect(ufd, 4, rd, "-NOAUTH", "SEG.READ over the unix socket without a token"));
            close(ufd);
        }
        /* Nothing was written: the values read back exactly. */
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("tk:tcp", n));
        CHECK(getSame(cshm, "tk:tcp", v, n, MC_TRANSPORT_SHM));
        free(v);
    }
    TEST("host tokens: with the token SEGMENT.TOKEN hands out, a raw peer reads the value's bytes") {
        long long segs[2], offs[2];
        char off[24] = "0", line[128];
        if (replicaList(r, "tk:tcp", segs, offs, 2) == 1) snprintf(off, sizeof(off), "%lld", offs[0]);
        char *want = xmalloc(n);
        fillPattern(want, n, seedOf("tk:tcp", n));
        int fd = htConnect(tcp_ep);
        CHECK(fd >= 0);
        if (fd >= 0) {
            const char *ok[] = {"SEG.AUTH", idbuf, token};
            CHECK(htExpect(fd, 3, ok, "+OK", "SEG.AUTH with the segment's token"));
            const char *rd[] = {"SEG.READ", idbuf, off, "16"};
            char got[18];
            const char *hdr = htCmd(fd, 4, rd) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            CHECK(hdr && !strcmp(hdr, "$16"));
            size_t have = 0;
            while (hdr && have < sizeof(got)) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                ssize_t k = poll(&p, 1, 5000) == 1 ? read(fd, got + have, sizeof(got) - have) : -1;
                if (k <= 0) break;
                have += (size_t)k;
            }
            CHECK(have == sizeof(got) && !memcmp(got, want, 16));
            close(fd);
        }
        int ufd = htConnect(unix_ep);
        if (ufd >= 0) {
            const char *ok[] = {"SEG.AUTH", idbuf, token};
            CHECK(htExpect(ufd, 3, ok, "+OK", "SEG.AUTH over the unix socket"));
            const char *at[] = {"SHM.ATTACH", idbuf};
            CHECK(htExpect(ufd, 2, at, "*2", "SHM.ATTACH with the token"));
            close(ufd);
        }
        free(want);
    }
    TEST("host tokens: the server's relayed GET presents the token to the real host and gets the bytes") {
        char *want = xmalloc(n);
        fillPattern(want, n, seedOf("tk:shm", n));
        redisReply *g = rcmd(r, "GET tk:shm");
        CHECK(g && g->type == REDIS_REPLY_STRING && (size_t)g->len == n && !memcmp(g->str, want, n));
        if (!(g && g->type == REDIS_REPLY_STRING)) showReply("GET tk:shm (relayed)", g);
        freeReplyObject(g);
        free(want);
    }
    TEST("host tokens: a connection over the cap (512) gets an error and is closed; a freed slot serves again") {
        enum { CAP = 512 };
        int fds[CAP + 1], nfd = 0;
        const char *ping[] = {"PING"}, *admit[] = {"SEG.AUTH", idbuf, token};
        char line[256];
        const char *got = NULL;
        /* Until one is refused: the readers above hold a few already. Each
         * is admitted (SEG.AUTH): one that only PINGed would be closed by
         * the host after HOST_PREAUTH_TIMEOUT_S (10 s), freeing its slot,
         * and on a busy machine opening 512 took longer than that (the
         * 513th was served). */
        while (nfd <= CAP) {
            int fd = htConnect(tcp_ep);
            got = fd >= 0 && htCmd(fd, 3, admit) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            if (got == NULL || strcmp(got, "+OK")) {
                if (fd >= 0) {
                    CHECK(htClosed(fd, 5000));
                    close(fd);
                }
                break;
            }
            fds[nfd++] = fd;
        }
        CHECK(got && strstr(got, "-ERR the segment host has too many connections (at most 512)") == got);
        if (!(nfd >= CAP - 8 && nfd <= CAP)) fprintf(stderr, "  %d connections admitted, then: %s\n", nfd, got ? got : "-");
        CHECK(nfd >= CAP - 8 && nfd <= CAP);
        close(fds[--nfd]);
        /* The freed slot: its thread ends when it sees the close. */
        int served = 0;
        for (int tries = 0; tries < 500 && !served; tries++) {
            int fd = htConnect(tcp_ep);
            got = fd >= 0 && htCmd(fd, 1, ping) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            served = got && !strcmp(got, "+PONG");
            if (fd >= 0) close(fd);
            if (!served) usleep(10 * 1000);
        }
        CHECK(served);
        while (nfd) close(fds[--nfd]);
    }
    TEST("host tokens: half-sent SEG.WRITEVs are bounded in total (256 MiB), one over is refused") {
        /* Each announces a 32 MiB payload and sends none of it: the host
         * reserves 64 MiB for each (its buffer doubles), so four fit and
         * the fifth, whichever it is, is refused and closed. */
        enum { NW = 5 };
        int fds[NW], refused = 0, nfd = 0;
        char head[256];
        int hl = snprintf(head, sizeof(head), "*4\r\n$10\r\nSEG.WRITEV\r\n$%zu\r\n%s\r\n$1\r\n0\r\n$%zu\r\n", strlen(idbuf),
                          idbuf, (size_t)(32 * MiB));
        const char *ok[] = {"SEG.AUTH", idbuf, token};
        for (int i = 0; i < NW; i++) {
            int fd = htConnect(tcp_ep);
            if (fd < 0 || !htExpect(fd, 3, ok, "+OK", "SEG.AUTH") || htSend(fd, head, (size_t)hl) != 0) {
                if (fd >= 0) close(fd);
                break;
            }
            fds[nfd++] = fd;
        }
        CHECK_EQ(nfd, NW);
        for (int i = 0; i < nfd; i++) {
            char line[256];
            const char *got = htLine(fds[i], line, sizeof(line), i == 0 ? 3000 : 300);
            if (got && strstr(got, "-ERR the segment host is buffering too many SEG.WRITEV payloads")) refused++;
        }
        /* Rescan: the refused one may have answered after its poll ran out. */
        if (refused == 0)
            for (int i = 0; i < nfd && !refused; i++) {
                char line[256];
                const char *got = htLine(fds[i], line, sizeof(line), 2000);
                if (got && strstr(got, "buffering too many")) refused++;
            }
        CHECK_EQ(refused, 1);
        while (nfd) close(fds[--nfd]);
        /* Released when they close: a small vector is taken again. */
        int taken = 0;
        char last[24];
        snprintf(last, sizeof(last), "%zu", (size_t)(HT_SEGSIZE - 16));
        for (int tries = 0; tries < 500 && !taken; tries++) {
            int fd = htConnect(tcp_ep);
            const char *wv[] = {"SEG.WRITEV", idbuf, last, "0123456789abcdef"};
            char line[256];
            const char *got = fd >= 0 && htExpect(fd, 3, ok, "+OK", "SEG.AUTH") && htCmd(fd, 4, wv) == 0
                                  ? htLine(fd, line, sizeof(line), 5000)
                                  : NULL;
            taken = got && !strcmp(got, "+OK");
            if (fd >= 0) close(fd);
            if (!taken) usleep(10 * 1000);
        }
        CHECK(taken);
    }
    mcClose(&ctcp);
    mcClose(&cshm);
    mcClose(&host);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== main ============================================================================================ */

static const struct {
    const char *name;
    void (*fn)(void);
} groups[] = {
    {"round-trips", testRoundTrips}, {"errors", testErrors},     {"hosted", testHostedSegment},
    {"fallback", testReplicaFallback}, {"lease", testLeaseExpiry}, {"threads", testConcurrency},
    {"abandoned", testAbandonedPut},   {"auth", testAuth},         {"forged", testForged},
    {"interop", testInterop},          {"batch", testBatch},        {"streams", testStreams},
    {"keepalive", testKeepalive},      {"first-touch", testFirstTouch},
    {"lease-release", testLeaseRelease}, {"acl", testAcl},             {"exists", testExists},
    {"scatter-gather", testScatterGather}, {"async", testAsync},   {"ranges", testRanges},
    {"device", testDevice},            {"host-tokens", testHostTokens},
};

/* The groups a run without arguments runs: test_mooncake runs all but the
 * device group, test_mooncake_fakecuda (the same file against the fake
 * device) only that one. */
#ifdef MC_FAKE_CUDA
#define DEFAULT_GROUP(fn) ((fn) == testDevice)
#else
#define DEFAULT_GROUP(fn) ((fn) != testDevice)
#endif

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--host-child")) return hostChildMain(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = onSigpipe;
    sigaction(SIGPIPE, &sa, NULL);
    sa.sa_handler = tsOnAlarm;
    sigaction(SIGALRM, &sa, NULL);

    const char *only = argc >= 2 ? argv[1] : NULL;
    const char *bin = tsServerBinary();
#ifdef MC_FAKE_CUDA
    printf("test_mooncake (fake CUDA device): libmooncake %s, server %s%s%s\n", MC_VERSION, bin ? bin : "(none found)",
#else
    printf("test_mooncake: libmooncake %s, server %s%s%s\n", MC_VERSION, bin ? bin : "(none found)",
#endif
           only ? ", groups matching " : "", only ? only : "");
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        if (only ? strstr(groups[i].name, only) != NULL : DEFAULT_GROUP(groups[i].fn)) groups[i].fn();
    alarm(0);
    TEST("no SIGPIPE reached the process (the library must not raise it)") CHECK_EQ(sigpipes, 0);
    return testReport();
}
