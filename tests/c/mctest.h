/* mctest.h -- what the C tests of libmooncake share: test_mooncake (its
 * test_mooncake*.c files) and test_mooncake_cluster.c.
 *
 * Byte patterns that depend on a key and a size, so that a value read from
 * the wrong place cannot pass; the comparison that says where two buffers
 * differ, and guard bytes after a buffer that catch a write past its end; a
 * handle's transport names, last error and close; a hiredis connection set
 * up, its replies shown and read as integers. One copy, so that both
 * programs make and check values the same way. What only one of them needs
 * stays with it: their connect and command helpers differ (one server of
 * the test's own, or node i of three). Functions are static inline, as in
 * testserver.h: a file that does not use one gets no copy and no warning.
 */
#ifndef MCTEST_H
#define MCTEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis.h>

#include "mooncake.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

/* ---- pattern data ---------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
    /* splitmix64's finaliser: turns counters into well-spread seeds. */
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static inline uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static inline uint64_t seedOf(const char *tag, uint64_t n) { return mix64(fnv1a(tag, strlen(tag)) ^ mix64(n)); }

/* xorshift64* words from seed; different seeds give unrelated streams. */
static inline void fillPattern(void *buf, size_t n, uint64_t seed) {
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

/* A value that says which version of which key it is, for tests where
 * threads write and read the same keys at once: a header, then bytes
 * regenerated from (key, version). A read that mixes two versions, or a
 * stale tail, fails vvCheck. The caller picks the lengths (len, and lenOf
 * for the check: a version's length must be its own). */
typedef struct {
    uint64_t key, version;
    uint64_t len; /* the whole value, header included */
    uint64_t sum; /* fnv1a of the payload */
} vvHeader;

static inline uint64_t vvSeed(uint64_t key, uint64_t version) { return mix64(key ^ (version << 8) ^ 0x5656); }

static inline size_t vvMake(char *buf, size_t len, uint64_t key, uint64_t version) {
    vvHeader h = {key, version, len, 0};
    fillPattern(buf + sizeof(h), len - sizeof(h), vvSeed(key, version));
    h.sum = fnv1a(buf + sizeof(h), len - sizeof(h));
    memcpy(buf, &h, sizeof(h));
    return len;
}

/* NULL if buf[0..n) is one whole version of key, else what is wrong;
 * scratch holds n bytes. */
static inline const char *vvCheck(const char *buf, long long n, uint64_t key,
                                  size_t (*lenOf)(uint64_t key, uint64_t version), char *scratch) {
    vvHeader h;
    if (n < (long long)sizeof(h)) return "shorter than the header";
    memcpy(&h, buf, sizeof(h));
    if (h.key != key) return "the value of another key";
    if (h.len != (uint64_t)n || h.len != lenOf(key, h.version)) return "length differs from its version's";
    if (fnv1a(buf + sizeof(h), (size_t)n - sizeof(h)) != h.sum) return "checksum mismatch (torn read)";
    fillPattern(scratch, (size_t)n - sizeof(h), vvSeed(key, h.version));
    if (memcmp(scratch, buf + sizeof(h), (size_t)n - sizeof(h))) return "payload differs from its version";
    return NULL;
}


/* 1 if got (gotlen bytes, or an MC_ERR_* code) is exactly want[0..n);
 * otherwise says how it differs. */
static inline int sameBytes(const char *what, const void *got, long long gotlen, const void *want, size_t n) {
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

static inline void setGuard(void *buf, size_t n) { memset((char *)buf + n, GUARD_BYTE, GUARD); }

static inline int guardIntact(const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf + n;
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != GUARD_BYTE) {
            fprintf(stderr, "  the get wrote past the end of a %zu-byte buffer (guard byte %zu)\n", n, i);
            return 0;
        }
    return 1;
}

/* ---- libmooncake handles ------------------------------------------------------ */

static inline const char *transportName(int t) {
    switch (t) {
    case MC_TRANSPORT_AUTO: return "auto";
    case MC_TRANSPORT_SHM: return "shm";
    case MC_TRANSPORT_TCP: return "tcp";
    case MC_TRANSPORT_RDMA: return "rdma";
    default: return "?";
    }
}

static inline const char *lastErr(mc_client *c) {
    const char *e = c ? mc_last_error(c) : NULL;
    return e ? e : "";
}

static inline void mcClose(mc_client **c) {
    if (*c) mc_close(*c);
    *c = NULL;
}

/* ---- hiredis ---------------------------------------------------------------------- */

/* A hiredis connection as the tests use it (20 s replies), or NULL with why
 * on stderr; where names the peer in that line. */
static inline redisContext *rConfigure(redisContext *c, const char *where) {
    if (c == NULL || c->err) {
        fprintf(stderr, "  hiredis connect %s: %s\n", where, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval io = {20, 0};
    redisSetTimeout(c, io);
    return c;
}

static inline void showReply(const char *what, const redisReply *r) {
    if (r == NULL) fprintf(stderr, "  %s: no reply\n", what);
    else if (r->type == REDIS_REPLY_ERROR) fprintf(stderr, "  %s: error %s\n", what, r->str);
    else if (r->type == REDIS_REPLY_STATUS) fprintf(stderr, "  %s: status %s\n", what, r->str);
    else if (r->type == REDIS_REPLY_STRING) fprintf(stderr, "  %s: string of %zu bytes\n", what, (size_t)r->len);
    else if (r->type == REDIS_REPLY_INTEGER) fprintf(stderr, "  %s: integer %lld\n", what, r->integer);
    else if (r->type == REDIS_REPLY_NIL) fprintf(stderr, "  %s: nil\n", what);
    else fprintf(stderr, "  %s: array of %zu\n", what, r->elements);
}

/* A numeric field of an INFO reply ("field:123" on a line of its own), -1
 * if the reply is not one or lacks it. */
static inline long long infoField(const redisReply *r, const char *field) {
    if (!r || r->type != REDIS_REPLY_STRING) return -1;
    size_t n = strlen(field);
    for (const char *p = r->str; (p = strstr(p, field)) != NULL; p += n)
        if ((p == r->str || p[-1] == '\n') && p[n] == ':') return atoll(p + n + 1);
    return -1;
}

static inline long long replyInt(const redisReply *r) {
    if (!r) return -1;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return strtoll(r->str, NULL, 10);
    return -1;
}

#endif
