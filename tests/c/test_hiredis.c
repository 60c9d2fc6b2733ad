/* test_hiredis.c -- the server seen by a real C client (hiredis) and by
 * deliberately awkward raw-socket peers.
 *
 * What the Tcl suite cannot easily do is checked here: values of every
 * size around the server's internal thresholds (16 KiB reply chunks and
 * zero-copy replies, 32 KiB in-place reads) compared byte for byte; 10000
 * pipelined commands; a value trickled in small writes with pauses; peers
 * that vanish halfway through a request or before reading a large reply;
 * an overwrite racing a reply that is still being written from the pool.
 * The pool accounting (INFO store's store_pool_used) must come back to
 * where it was after each of those, and DEBUG ALLOC-CHECK must pass at the
 * end.
 *
 * Usage: test_hiredis [[host] port]   (or MC_HOST / MC_PORT)
 * With neither, it starts its own server through testserver.h: $MC_SERVER
 * (default src/mooncake-server) on a free port of 127.0.0.1 with a 64 MiB
 * pool, and stops it with SIGTERM at the end. The random data is seeded
 * from MC_SEED if set (the seed is printed, so a failure can be replayed).
 *
 * Installed hiredis may predate RESP3 (Debian bookworm ships 0.14, which
 * cannot parse it), so the RESP3 checks use a small reader of their own on
 * a raw socket; with hiredis >= 1.0 they also run through hiredis.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "testhelp.h"
#include "testserver.h"

#define KiB 1024
#define MiB (1024 * 1024)

static const char *host = "127.0.0.1";
static int port;
static tsServer srv;              /* our own server (srv.pid 0: an external one) */
static redisContext *rc;          /* the main connection */

/* ---- small utilities ------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void) {
    /* xorshift64*: enough for test data, and replayable from the seed. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* Random bytes with CR, LF, "\r\n" and NUL planted at the start, the end
 * and around the 16 KiB chunk size, so that every framing mistake shows. */
static char *randomValue(size_t n) {
    char *p = malloc(n ? n : 1);
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = (char)rnd();
    const char plant[] = "\r\n\0\r\n$3\r\n*1\r\n";
    size_t spots[] = {0, n / 2, n > 16 * KiB ? 16 * KiB - 3 : 0, n > 8 ? n - 8 : 0};
    for (size_t s = 0; s < sizeof(spots) / sizeof(spots[0]); s++)
        for (size_t k = 0; k < sizeof(plant) - 1 && spots[s] + k < n; k++) p[spots[s] + k] = plant[k];
    return p;
}



static int isOk(const redisReply *r) {
    return r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
}

static int sameBytes(const redisReply *r, const char *p, size_t n) {
    return r && r->type == REDIS_REPLY_STRING && (size_t)r->len == n && memcmp(r->str, p, n) == 0;
}

/* Describes a reply for failure messages. */
static void showReply(const char *what, const redisReply *r) {
    if (r == NULL) {
        fprintf(stderr, "  %s: no reply (%s)\n", what, rc && rc->err ? rc->errstr : "?");
    } else if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS) {
        fprintf(stderr, "  %s: %s %s\n", what, r->type == REDIS_REPLY_ERROR ? "error" : "status", r->str);
    } else if (r->type == REDIS_REPLY_STRING) {
        fprintf(stderr, "  %s: string of %zu bytes\n", what, (size_t)r->len);
    } else {
        fprintf(stderr, "  %s: reply type %d, integer %lld, %zu elements\n", what, r->type, r->integer,
                r->elements);
    }
}

static redisContext *connectMain(void) {
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval io = {60, 0};
    redisSetTimeout(c, io);
    return c;
}

/* The main connection, reconnected if an earlier test broke it. */
static redisContext *conn(void) {
    if (rc && rc->err) {
        redisFree(rc);
        rc = NULL;
    }
    if (rc == NULL) rc = connectMain();
    return rc;
}

static redisReply *cmd(const char *fmt, ...) {
    redisContext *c = conn();
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return r;
}

static redisReply *cmdArgv(int argc, const char **argv, const size_t *lens) {
    redisContext *c = conn();
    if (!c) return NULL;
    return redisCommandArgv(c, argc, argv, lens);
}

/* A field of INFO <section> as an integer, -1 if missing. */
static long long infoField(const char *section, const char *field) {
    redisReply *r = cmd("INFO %s", section);
    long long v = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        size_t flen = strlen(field);
        for (const char *p = r->str; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
            if (strncmp(p, field, flen) == 0 && p[flen] == ':') {
                v = strtoll(p + flen + 1, NULL, 10);
                break;
            }
        }
    }
    freeReplyObject(r);
    return v;
}

static long long poolUsed(void) {
    return infoField("store", "store_pool_used");
}

/* Polls until store_pool_used <= target (or == target); returns the last value. */
static long long waitPoolUsed(long long target, int exact, long long timeout_ms) {
    long long deadline = tsNowMs() + timeout_ms, v;
    for (;;) {
        v = poolUsed();
        if (v >= 0 && (exact ? v == target : v <= target)) return v;
        if (tsNowMs() > deadline) return v;
        tsSleepMs(10);
    }
}

static int pingOk(void) {
    redisReply *r = cmd("PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    freeReplyObject(r);
    return ok;
}

static long long existsKey(const char *k, size_t klen) {
    redisReply *r = cmd("EXISTS %b", k, klen);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

static int setValue(const char *k, size_t klen, const char *v, size_t vlen) {
    redisReply *r = cmd("SET %b %b", k, klen, v, vlen);
    int ok = isOk(r);
    if (!ok) showReply("SET", r);
    freeReplyObject(r);
    return ok;
}

/* ---- raw sockets ---------------------------------------------------------- */

static int rawConnect(void) {
    struct addrinfo hints, *res;
    char portstr[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0) return -1;
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == -1) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}


/* Reads exactly n bytes within timeout_ms; returns bytes read. */
static size_t readFull(int fd, void *p, size_t n, int timeout_ms) {
    char *d = p;
    size_t got = 0;
    long long deadline = tsNowMs() + timeout_ms;
    while (got < n) {
        long long left = deadline - tsNowMs();
        if (left <= 0) break;
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, (int)left) <= 0) continue;
        ssize_t r = read(fd, d + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            break;
        }
        got += (size_t)r;
    }
    return got;
}

/* Encodes a request; a NULL argv[i] (the last one) gets only its "$len"
 * header, its payload being written separately. */
static size_t respHeader(char *buf, size_t cap, int argc, const char **argv, const size_t *lens) {
    size_t n = (size_t)snprintf(buf, cap, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        n += (size_t)snprintf(buf + n, cap - n, "$%zu\r\n", lens[i]);
        if (argv[i]) {
            memcpy(buf + n, argv[i], lens[i]);
            n += lens[i];
            memcpy(buf + n, "\r\n", 2);
            n += 2;
        }
    }
    return n;
}

/* ---- a minimal RESP3 reader (hiredis 0.14 has none) ----------------------- */

typedef struct r3 {
    char type;            /* the RESP3 type byte; '_' also for RESP2 nulls */
    long long n;          /* integers, booleans (0/1), aggregate lengths */
    char *str;            /* simple strings, errors, bulk and verbatim payloads */
    size_t len;
    struct r3 **elem;     /* aggregates; maps hold 2n entries, key then value */
    size_t nelem;
} r3;

typedef struct r3conn {
    int fd;
    char buf[64 * KiB];
    size_t len, pos;
} r3conn;

static int r3fill(r3conn *c) {
    if (c->pos == c->len) c->pos = c->len = 0;
    if (c->len == sizeof(c->buf)) {
        memmove(c->buf, c->buf + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
    }
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (poll(&pfd, 1, 10000) <= 0) return -1;
    ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
    if (r <= 0) return -1;
    c->len += (size_t)r;
    return 0;
}

static int r3line(r3conn *c, char *out, size_t cap) {
    size_t n = 0;
    for (;;) {
        while (c->pos < c->len) {
            char ch = c->buf[c->pos++];
            if (ch == '\n') {
                if (n && out[n - 1] == '\r') n--;
                out[n] = '\0';
                return 0;
            }
            if (n + 1 >= cap) return -1;
            out[n++] = ch;
        }
        if (r3fill(c) != 0) return -1;
    }
}

static int r3bytes(r3conn *c, char *out, size_t n) {
    size_t got = 0;
    while (got < n) {
        if (c->pos == c->len && r3fill(c) != 0) return -1;
        size_t take = c->len - c->pos < n - got ? c->len - c->pos : n - got;
        memcpy(out + got, c->buf + c->pos, take);
        c->pos += take;
        got += take;
    }
    return 0;
}

static void r3free(r3 *r) {
    if (!r) return;
    for (size_t i = 0; i < r->nelem; i++) r3free(r->elem[i]);
    free(r->elem);
    free(r->str);
    free(r);
}

static r3 *r3read(r3conn *c) {
    char line[1024];
    if (r3line(c, line, sizeof(line)) != 0 || line[0] == '\0') return NULL;
    r3 *r = calloc(1, sizeof(*r));
    if (!r) abort();
    r->type = line[0];
    switch (line[0]) {
    case '+': case '-': case ',': case '(':
        r->str = strdup(line + 1);
        r->len = strlen(r->str);
        return r;
    case ':':
        r->n = strtoll(line + 1, NULL, 10);
        return r;
    case '#':
        r->n = line[1] == 't';
        return r;
    case '_':
        return r;
    case '$': case '=': case '!': {
        long long n = strtoll(line + 1, NULL, 10);
        if (n < 0) { r->type = '_'; return r; }   /* RESP2 null bulk */
        r->str = malloc((size_t)n + 2);
        if (!r->str || r3bytes(c, r->str, (size_t)n + 2) != 0) { r3free(r); return NULL; }
        if (r->str[n] != '\r' || r->str[n + 1] != '\n') { r3free(r); return NULL; }
        r->str[n] = '\0';
        r->len = (size_t)n;
        return r;
    }
    case '*': case '~': case '>': case '%': case '|': {
        long long n = strtoll(line + 1, NULL, 10);
        if (n < 0) { r->type = '_'; return r; }   /* RESP2 null array */
        r->n = n;
        r->nelem = (size_t)n * (line[0] == '%' || line[0] == '|' ? 2 : 1);
        r->elem = calloc(r->nelem ? r->nelem : 1, sizeof(r3 *));
        if (!r->elem) abort();
        for (size_t i = 0; i < r->nelem; i++) {
            r->elem[i] = r3read(c);
            if (!r->elem[i]) { r3free(r); return NULL; }
        }
        if (line[0] == '|') {  /* an attribute: the reply proper follows */
            r3free(r);
            return r3read(c);
        }
        return r;
    }
    default:
        r3free(r);
        return NULL;
    }
}

static r3 *r3command(r3conn *c, int argc, const char **argv) {
    char buf[4096];
    size_t lens[16];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    size_t n = respHeader(buf, sizeof(buf), argc, argv, lens);
    if (tsWriteAll(c->fd, buf, n) != 0) return NULL;
    return r3read(c);
}

/* The value of a map entry whose key is the string `key`, or NULL. */
static r3 *r3mapGet(r3 *m, const char *key) {
    if (!m || (m->type != '%' && m->type != '*')) return NULL;
    for (size_t i = 0; i + 1 < m->nelem; i += 2) {
        r3 *k = m->elem[i];
        if (k->str && strcmp(k->str, key) == 0) return m->elem[i + 1];
    }
    return NULL;
}






/* ---- the tests ------------------------------------------------------------- */

static void testSizes(void) {
    static const size_t sizes[] = {0, 1, 100, 16 * KiB - 1, 16 * KiB, 32 * KiB - 1, 32 * KiB, 1 * MiB, 8 * MiB};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char name[80];
        snprintf(name, sizeof(name), "SET/GET of %zu bytes, byte for byte", sizes[i]);
        TEST(name) {
            char key[64];
            int klen = snprintf(key, sizeof(key), "ht:size:%zu", sizes[i]);
            char *v = randomValue(sizes[i]);
            CHECK(setValue(key, (size_t)klen, v, sizes[i]));
            redisReply *r = cmd("GET %b", key, (size_t)klen);
            if (!sameBytes(r, v, sizes[i])) {
                showReply("GET", r);
                CHECK(sameBytes(r, v, sizes[i]));
            }
            freeReplyObject(r);
            r = cmd("STRLEN %b", key, (size_t)klen);
            CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == (long long)sizes[i]);
            freeReplyObject(r);
            /* The same value again through a second GET, now served while
             * nothing else is queued (a different path in the writer). */
            r = cmd("GET %b", key, (size_t)klen);
            CHECK(sameBytes(r, v, sizes[i]));
            freeReplyObject(r);
            free(v);
        }
    }
}

static void testBinaryKeys(void) {
    TEST("binary keys: NUL, CR LF, high bytes, spaces, 4096 bytes") {
        char k4096[4096];
        for (size_t i = 0; i < sizeof(k4096); i++) k4096[i] = (char)rnd();
        struct { const char *k; size_t len; } keys[] = {
            {"\0", 1}, {"a\0b", 3}, {"\r\n", 2}, {"key\r\n$3\r\nGET", 13}, {"\xff\xfe\x80", 3},
            {"with space", 10}, {"*1\r\n", 4}, {k4096, sizeof(k4096)},
        };
        size_t nkeys = sizeof(keys) / sizeof(keys[0]);
        for (size_t i = 0; i < nkeys; i++) {
            char val[32];
            int vlen = snprintf(val, sizeof(val), "value-%zu", i);
            CHECK(setValue(keys[i].k, keys[i].len, val, (size_t)vlen));
        }
        for (size_t i = 0; i < nkeys; i++) {
            char val[32];
            int vlen = snprintf(val, sizeof(val), "value-%zu", i);
            redisReply *r = cmd("GET %b", keys[i].k, keys[i].len);
            if (!sameBytes(r, val, (size_t)vlen)) {
                fprintf(stderr, "  binary key #%zu:\n", i);
                showReply("GET", r);
                CHECK(sameBytes(r, val, (size_t)vlen));
            }
            freeReplyObject(r);
        }
        /* "a" must not alias "a\0b", nor "" alias "\0". */
        CHECK_EQ(existsKey("a", 1), 0);
        for (size_t i = 0; i < nkeys; i++) {
            redisReply *r = cmd("DEL %b", keys[i].k, keys[i].len);
            CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
            freeReplyObject(r);
        }
    }
    TEST("a key over max-key-size is refused and not stored") {
        char k[4097];
        memset(k, 'k', sizeof(k));
        redisReply *r = cmd("SET %b v", k, sizeof(k));
        CHECK(r && r->type == REDIS_REPLY_ERROR);
        freeReplyObject(r);
        CHECK_EQ(existsKey(k, sizeof(k)), 0);
        CHECK(pingOk());
    }
}

static void testMsetMget(void) {
    TEST("MSET/MGET with mixed sizes including 2 MiB") {
        static const size_t sizes[] = {1, 2 * MiB, 100, 16 * KiB, 40000, 32 * KiB, 7, 1 * MiB + 3};
        enum { N = sizeof(sizes) / sizeof(sizes[0]) };
        char *vals[N];
        char keys[N][32];
        const char *argv[2 * N + 1];
        size_t lens[2 * N + 1];
        argv[0] = "MSET";
        lens[0] = 4;
        for (int i = 0; i < N; i++) {
            snprintf(keys[i], sizeof(keys[i]), "ht:mset:%d", i);
            vals[i] = randomValue(sizes[i]);
            argv[1 + 2 * i] = keys[i];
            lens[1 + 2 * i] = strlen(keys[i]);
            argv[2 + 2 * i] = vals[i];
            lens[2 + 2 * i] = sizes[i];
        }
        redisReply *r = cmdArgv(2 * N + 1, argv, lens);
        if (!isOk(r)) showReply("MSET", r);
        CHECK(isOk(r));
        freeReplyObject(r);

        const char *gargv[N + 2];
        size_t glens[N + 2];
        gargv[0] = "MGET";
        glens[0] = 4;
        for (int i = 0; i < N; i++) {
            gargv[1 + i] = keys[i];
            glens[1 + i] = strlen(keys[i]);
        }
        gargv[N + 1] = "ht:mset:missing";
        glens[N + 1] = strlen(gargv[N + 1]);
        r = cmdArgv(N + 2, gargv, glens);
        CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == N + 1);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == N + 1) {
            for (int i = 0; i < N; i++) {
                if (!sameBytes(r->element[i], vals[i], sizes[i])) {
                    fprintf(stderr, "  MGET element %d (%zu bytes) differs\n", i, sizes[i]);
                    showReply("element", r->element[i]);
                    CHECK(0);
                }
            }
            CHECK(r->element[N]->type == REDIS_REPLY_NIL);
        } else {
            showReply("MGET", r);
        }
        freeReplyObject(r);
        for (int i = 0; i < N; i++) free(vals[i]);
    }
}

static void testPipeline(void) {
    enum { N = 10000 };
    TEST("10000 pipelined SETs, then 10000 pipelined GETs") {
        redisContext *c = conn();
        CHECK(c != NULL);
        if (c) {
            for (int i = 0; i < N; i++) {
                /* A few values cross the in-place threshold mid-pipeline. */
                if (i % 1000 == 999) redisAppendCommand(c, "SET ht:pipe:%d %b", i, "", (size_t)0);
                else redisAppendCommand(c, "SET ht:pipe:%d v%d", i, i);
            }
            int ok = 0;
            for (int i = 0; i < N; i++) {
                redisReply *r = NULL;
                if (redisGetReply(c, (void **)&r) != REDIS_OK) break;
                ok += isOk(r);
                freeReplyObject(r);
            }
            CHECK_EQ(ok, N);
            for (int i = 0; i < N; i++) redisAppendCommand(c, "GET ht:pipe:%d", i);
            int same = 0;
            for (int i = 0; i < N; i++) {
                redisReply *r = NULL;
                if (redisGetReply(c, (void **)&r) != REDIS_OK) break;
                char want[32];
                int wl = i % 1000 == 999 ? 0 : snprintf(want, sizeof(want), "v%d", i);
                same += sameBytes(r, want, (size_t)wl);
                freeReplyObject(r);
            }
            CHECK_EQ(same, N);
            /* Tidy up with one pipelined DEL per 1000 keys. */
            for (int b = 0; b < N; b += 1000) {
                const char *argv[1001];
                size_t lens[1001];
                static char names[1000][24];
                argv[0] = "DEL";
                lens[0] = 3;
                for (int j = 0; j < 1000; j++) {
                    lens[1 + j] = (size_t)snprintf(names[j], sizeof(names[j]), "ht:pipe:%d", b + j);
                    argv[1 + j] = names[j];
                }
                redisReply *r = cmdArgv(1001, argv, lens);
                CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1000);
                freeReplyObject(r);
            }
        }
    }
}

static void testTrickle(void) {
    TEST("a 4 MiB SET trickled in small writes with pauses, pipelined GET in the CRLF write") {
        const size_t n = 4 * MiB;
        const char key[] = "ht:trickle";
        char *v = randomValue(n);
        int fd = rawConnect();
        CHECK(fd >= 0);
        if (fd >= 0) {
            char hdr[128];
            const char *argv[3] = {"SET", key, NULL};
            size_t lens[3] = {3, sizeof(key) - 1, n};
            size_t hlen = respHeader(hdr, sizeof(hdr), 3, argv, lens);
            /* The header one byte at a time. */
            int wok = 1;
            for (size_t i = 0; i < hlen && wok; i++) {
                wok = tsWriteAll(fd, hdr + i, 1) == 0;
                if (i % 7 == 0) tsSleepMs(1);
            }
            /* The payload in pieces of 1 B .. 96 KiB. */
            size_t off = 0;
            int pieces = 0;
            while (off < n && wok) {
                size_t piece = 1 + (size_t)(rnd() % (96 * KiB));
                if (pieces % 5 == 0) piece = 1 + (size_t)(rnd() % 16);
                if (piece > n - off) piece = n - off;
                wok = tsWriteAll(fd, v + off, piece) == 0;
                off += piece;
                if (++pieces % 3 == 0) tsSleepMs(2);
            }
            /* CR alone, then LF together with a whole GET. */
            char get[64];
            const char *gargv[2] = {"GET", key};
            size_t glens[2] = {3, sizeof(key) - 1};
            size_t glen = respHeader(get + 1, sizeof(get) - 1, 2, gargv, glens);
            get[0] = '\n';
            if (wok) wok = tsWriteAll(fd, "\r", 1) == 0;
            tsSleepMs(5);
            if (wok) wok = tsWriteAll(fd, get, glen + 1) == 0;
            CHECK(wok);
            char ok[5];
            CHECK_EQ(readFull(fd, ok, 5, 10000), 5);
            CHECK(memcmp(ok, "+OK\r\n", 5) == 0);
            char bh[32];
            int bl = snprintf(bh, sizeof(bh), "$%zu\r\n", n);
            char got[32];
            CHECK_EQ(readFull(fd, got, (size_t)bl, 10000), bl);
            CHECK(memcmp(got, bh, (size_t)bl) == 0);
            char *back = malloc(n + 2);
            CHECK_EQ(readFull(fd, back, n + 2, 20000), n + 2);
            CHECK(memcmp(back, v, n) == 0 && back[n] == '\r' && back[n + 1] == '\n');
            free(back);
            close(fd);
            fprintf(stderr, "  (%d payload writes)\n", pieces);
        }
        redisReply *r = cmd("GET %s", key);
        CHECK(sameBytes(r, v, n));
        freeReplyObject(r);
        r = cmd("DEL %s", key);
        freeReplyObject(r);
        free(v);
    }
}

static void testAbandonedSet(void) {
    TEST("half of a 1 MiB SET, then disconnect: no key, pool space returned") {
        const size_t n = 1 * MiB;
        const char key[] = "ht:abandoned";
        long long before = poolUsed();
        CHECK(before >= 0);
        int fd = rawConnect();
        CHECK(fd >= 0);
        if (fd >= 0) {
            char *v = randomValue(n / 2);
            char hdr[128];
            const char *argv[3] = {"SET", key, NULL};
            size_t lens[3] = {3, sizeof(key) - 1, n};
            size_t hlen = respHeader(hdr, sizeof(hdr), 3, argv, lens);
            CHECK(tsWriteAll(fd, hdr, hlen) == 0);
            CHECK(tsWriteAll(fd, v, n / 2) == 0);
            tsSleepMs(50);
            long long during = poolUsed();
            fprintf(stderr, "  (store_pool_used before %lld, while half-sent %lld)\n", before, during);
            close(fd);
            free(v);
        }
        long long after = waitPoolUsed(before, 1, 1000);
        CHECK_EQ(after, before);
        CHECK_EQ(existsKey(key, sizeof(key) - 1), 0);
        CHECK(pingOk());
    }
    TEST("half of a 1 MiB MSET value after a complete one, then disconnect") {
        const size_t n = 1 * MiB;
        long long before = poolUsed();
        int fd = rawConnect();
        CHECK(fd >= 0);
        if (fd >= 0) {
            char *v = randomValue(n);
            char hdr[128];
            size_t hlen = (size_t)snprintf(hdr, sizeof(hdr), "*5\r\n$4\r\nMSET\r\n$7\r\nht:ms:a\r\n$%zu\r\n", n);
            CHECK(tsWriteAll(fd, hdr, hlen) == 0);
            CHECK(tsWriteAll(fd, v, n) == 0);
            char mid[64];
            size_t mlen = (size_t)snprintf(mid, sizeof(mid), "\r\n$7\r\nht:ms:b\r\n$%zu\r\n", n);
            CHECK(tsWriteAll(fd, mid, mlen) == 0);
            CHECK(tsWriteAll(fd, v, n / 3) == 0);
            tsSleepMs(50);
            close(fd);
            free(v);
        }
        CHECK_EQ(waitPoolUsed(before, 1, 1000), before);
        CHECK_EQ(existsKey("ht:ms:a", 7), 0);
        CHECK_EQ(existsKey("ht:ms:b", 7), 0);
        CHECK(pingOk());
    }
}

static void testUnreadReply(void) {
    TEST("GET of a 4 MiB value, then close without reading (FIN and RST)") {
        const size_t n = 4 * MiB;
        const char key[] = "ht:unread";
        long long before = poolUsed();
        char *v = randomValue(n);
        CHECK(setValue(key, sizeof(key) - 1, v, n));
        long long with_key = poolUsed();
        CHECK(with_key >= before + (long long)n);
        for (int rst = 0; rst <= 1; rst++) {
            for (int k = 0; k < 3; k++) {
                int fd = rawConnect();
                CHECK(fd >= 0);
                if (fd < 0) continue;
                const char get[] = "*2\r\n$3\r\nGET\r\n$9\r\nht:unread\r\n";
                /* Several GETs: the replies queue up behind the socket. */
                for (int j = 0; j < 4; j++) CHECK(tsWriteAll(fd, get, sizeof(get) - 1) == 0);
                tsSleepMs(30);
                if (rst) {
                    struct linger lg = {1, 0};
                    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                }
                close(fd);
            }
        }
        tsSleepMs(50);
        CHECK(pingOk());
        redisReply *r = cmd("GET %s", key);
        CHECK(sameBytes(r, v, n));
        freeReplyObject(r);
        r = cmd("DEL %s", key);
        CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
        freeReplyObject(r);
        long long after = waitPoolUsed(before, 0, 2000);
        if (after > before) fprintf(stderr, "  store_pool_used: before SET %lld, with key %lld, after DEL %lld\n",
                                    before, with_key, after);
        CHECK(after <= before);
        free(v);
    }
}

static void testResp3(void) {
    TEST("RESP3: HELLO 3 map, null, verbatim INFO, back to RESP2") {
        r3conn *c = calloc(1, sizeof(*c));
        c->fd = rawConnect();
        CHECK(c->fd >= 0);
        if (c->fd >= 0) {
            const char *hello3[] = {"HELLO", "3"};
            r3 *r = r3command(c, 2, hello3);
            CHECK(r && r->type == '%');
            r3 *proto = r3mapGet(r, "proto");
            CHECK(proto && proto->type == ':' && proto->n == 3);
            CHECK(r3mapGet(r, "server") != NULL && r3mapGet(r, "version") != NULL);
            r3 *id = r3mapGet(r, "id");
            CHECK(id && id->type == ':' && id->n > 0);
            r3free(r);

            const char *getmiss[] = {"GET", "ht:resp3:missing"};
            r = r3command(c, 2, getmiss);
            CHECK(r && r->type == '_');
            r3free(r);

            const char *set[] = {"SET", "ht:resp3", "hello\r\nworld"};
            r = r3command(c, 3, set);
            CHECK(r && r->type == '+' && strcmp(r->str, "OK") == 0);
            r3free(r);
            const char *get[] = {"GET", "ht:resp3"};
            r = r3command(c, 2, get);
            CHECK(r && r->type == '$' && r->len == 12 && memcmp(r->str, "hello\r\nworld", 12) == 0);
            r3free(r);

            const char *info[] = {"INFO", "server"};
            r = r3command(c, 2, info);
            CHECK(r && (r->type == '=' || r->type == '$'));
            if (r && r->type == '=') CHECK(r->len >= 4 && memcmp(r->str, "txt:", 4) == 0);
            r3free(r);

            const char *mget[] = {"MGET", "ht:resp3", "ht:resp3:missing"};
            r = r3command(c, 3, mget);
            CHECK(r && r->type == '*' && r->nelem == 2 && r->elem[0]->type == '$' && r->elem[1]->type == '_');
            r3free(r);

            const char *hello4[] = {"HELLO", "4"};
            r = r3command(c, 2, hello4);
            CHECK(r && r->type == '-' && strncmp(r->str, "NOPROTO", 7) == 0);
            if (r && r->type == '-' && strncmp(r->str, "NOPROTO", 7) != 0)
                fprintf(stderr, "  HELLO 4 error text: '-%s' (Redis: '-NOPROTO ...')\n", r->str);
            r3free(r);

            const char *hello2[] = {"HELLO", "2"};
            r = r3command(c, 2, hello2);
            CHECK(r && r->type == '*' && r->nelem % 2 == 0);
            proto = r3mapGet(r, "proto");
            CHECK(proto && proto->type == ':' && proto->n == 2);
            r3free(r);
            r = r3command(c, 2, getmiss);
            CHECK(r && r->type == '_'); /* a RESP2 null bulk, "$-1" */
            r3free(r);
            const char *del[] = {"DEL", "ht:resp3"};
            r = r3command(c, 2, del);
            CHECK(r && r->type == ':' && r->n == 1);
            r3free(r);
            close(c->fd);
        }
        free(c);
    }
#ifdef REDIS_REPLY_MAP
    TEST("RESP3 through hiredis: HELLO 3 map and NIL") {
        redisContext *c = connectMain();
        CHECK(c != NULL);
        if (c) {
            redisReply *r = redisCommand(c, "HELLO 3");
            CHECK(r && r->type == REDIS_REPLY_MAP);
            freeReplyObject(r);
            r = redisCommand(c, "GET ht:resp3:missing");
            CHECK(r && r->type == REDIS_REPLY_NIL);
            freeReplyObject(r);
            redisFree(c);
        }
    }
#endif
    TEST("RESP2 through hiredis: HELLO 2 is a flat array") {
        redisReply *r = cmd("HELLO 2");
        CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements % 2 == 0 && r->elements >= 6);
        freeReplyObject(r);
        r = cmd("GET ht:resp3:missing");
        CHECK(r && r->type == REDIS_REPLY_NIL);
        freeReplyObject(r);
    }
}

/* The key is overwritten, deleted and its space reused by other values
 * while a GET reply of it is still queued: every reply must be one whole
 * version. */
static void testOverwriteRace(void) {
    TEST("overwrite a 1 MiB key while pipelined GETs of it are outstanding") {
        const size_t n = 1 * MiB;
        enum { VERSIONS = 4, GETS = 6, PADS = 6 };
        const char key[] = "ht:race";
        char *ver[VERSIONS];
        for (int i = 0; i < VERSIONS; i++) ver[i] = randomValue(n);
        CHECK(setValue(key, sizeof(key) - 1, ver[0], n));

        redisContext *reader = connectMain();
        CHECK(reader != NULL);
        long long pool_size = infoField("store", "store_pool_size");
        int fillers = 0;
        long long reader_id = -1;
        if (reader) {
            /* A small receive window keeps most of the replies queued in
             * the server (as slices of pool memory) rather than in the
             * kernel. */
            int small = 64 * KiB;
            setsockopt(reader->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
            redisReply *idr = redisCommand(reader, "CLIENT ID");
            if (idr && idr->type == REDIS_REPLY_INTEGER) reader_id = idr->integer;
            freeReplyObject(idr);
        }
        char *pad = randomValue(n);
        CHECK(setValue("ht:race:pad", 11, pad, n));
        if (reader) {
            /* First fill the kernel's socket buffers with replies of
             * another key, so that every GET below stays queued in the
             * server. */
            for (int i = 0; i < PADS; i++) redisAppendCommand(reader, "GET ht:race:pad");
            /* GETs queued between the overwrites: each sees the version
             * current when the server ran it. */
            for (int i = 0; i < GETS; i++) {
                redisAppendCommand(reader, "GET %s", key);
                int done = 0;
                redisBufferWrite(reader, &done);
                while (!done && redisBufferWrite(reader, &done) == REDIS_OK) {}
                tsSleepMs(10);
                if (i + 1 < VERSIONS) CHECK(setValue(key, sizeof(key) - 1, ver[i + 1], n));
            }
            /* Delete it and fill the pool so that freed space is reused
             * while the replies are still unread. */
            redisReply *r = cmd("DEL %s", key);
            freeReplyObject(r);
            long long room = pool_size > 0 ? pool_size - poolUsed() - 2 * MiB : 0;
            char *fill = randomValue(n);
            for (; room > (long long)n && fillers < 128; fillers++, room -= (long long)n) {
                char fk[32];
                int fl = snprintf(fk, sizeof(fk), "ht:fill:%d", fillers);
                memset(fill, 'a' + fillers % 26, n);
                r = cmd("SET %b %b", fk, (size_t)fl, fill, n);
                int ok = isOk(r);
                freeReplyObject(r);
                if (!ok) break;
            }
            free(fill);
            /* Make sure the race was real: replies still queued server-side. */
            long long omem = -1;
            r = cmd("CLIENT LIST");
            if (r && r->type == REDIS_REPLY_STRING) {
                char idpat[32];
                snprintf(idpat, sizeof(idpat), "id=%lld ", reader_id);
                const char *line = strstr(r->str, idpat);
                if (line == r->str || (line && line[-1] == '\n')) {
                    const char *om = strstr(line, " omem=");
                    if (om) omem = strtoll(om + 6, NULL, 10);
                }
            }
            freeReplyObject(r);
            fprintf(stderr, "  (reader's queued reply bytes in the server: %lld)\n", omem);
            CHECK(omem >= (long long)(GETS * n));
            int pads = 0;
            for (int i = 0; i < PADS; i++) {
                redisReply *g = NULL;
                if (redisGetReply(reader, (void **)&g) != REDIS_OK) break;
                pads += sameBytes(g, pad, n);
                freeReplyObject(g);
            }
            CHECK_EQ(pads, PADS);
            int whole = 0;
            for (int i = 0; i < GETS; i++) {
                redisReply *g = NULL;
                if (redisGetReply(reader, (void **)&g) != REDIS_OK) {
                    fprintf(stderr, "  reader: %s\n", reader->errstr);
                    break;
                }
                int match = -1;
                for (int vi = 0; vi < VERSIONS && match < 0; vi++)
                    if (sameBytes(g, ver[vi], n)) match = vi;
                if (match < 0) {
                    fprintf(stderr, "  GET #%d returned bytes that are no whole version\n", i);
                    showReply("GET", g);
                    if (g && g->type == REDIS_REPLY_STRING && (size_t)g->len == n) {
                        size_t first = 0;
                        while (first < n && g->str[first] == ver[i < VERSIONS ? i : VERSIONS - 1][first]) first++;
                        fprintf(stderr, "  first byte differing from version %d: %zu\n",
                                i < VERSIONS ? i : VERSIONS - 1, first);
                    }
                } else {
                    whole++;
                    fprintf(stderr, "%s%d", i ? "," : "  (versions seen: ", match);
                    if (i + 1 == GETS) fprintf(stderr, ")\n");
                }
                freeReplyObject(g);
            }
            CHECK_EQ(whole, GETS);
            redisFree(reader);
        }
        fprintf(stderr, "  (%d fillers of 1 MiB written while replies were pending)\n", fillers);
        for (int i = 0; i < fillers; i++) {
            redisReply *r = cmd("DEL ht:fill:%d", i);
            freeReplyObject(r);
        }
        for (int i = 0; i < VERSIONS; i++) free(ver[i]);
        free(pad);
        redisReply *r = cmd("DEL ht:race:pad");
        freeReplyObject(r);
        CHECK(pingOk());
    }
}

/* Values that are refused after their header: the payload must still be
 * read (and dropped) so the next request on the connection parses. */
static void testRefusedValues(void) {
    TEST("a SET larger than the pool: -OOM, payload skipped, connection usable") {
        long long pool_size = infoField("store", "store_pool_size");
        CHECK(pool_size > 0);
        if (pool_size > 0 && pool_size <= 256LL * MiB) {
            size_t n = (size_t)pool_size + 4 * MiB;
            char *v = malloc(n);
            CHECK(v != NULL);
            if (v) {
                memset(v, 'z', n);
                memcpy(v + n / 2, "\r\n*1\r\n$4\r\nPING\r\n", 16);
                CHECK(setValue("ht:keep", 7, "kept", 4));
                redisReply *r = cmd("SET %s %b", "ht:toolarge", v, n);
                CHECK(r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "OOM", 3) == 0);
                if (!(r && r->type == REDIS_REPLY_ERROR)) showReply("SET", r);
                freeReplyObject(r);
                r = cmd("GET ht:keep");
                CHECK(sameBytes(r, "kept", 4) || (r && r->type == REDIS_REPLY_NIL)); /* may be evicted */
                freeReplyObject(r);
                CHECK_EQ(existsKey("ht:toolarge", 11), 0);
                CHECK(pingOk());
                r = cmd("DEL ht:keep");
                freeReplyObject(r);
                free(v);
            }
        }
    }
    TEST("a value over max-object-size is refused, payload skipped, connection usable") {
        redisReply *r = cmd("CONFIG GET max-object-size");
        char old[64] = "";
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
            snprintf(old, sizeof(old), "%s", r->element[1]->str);
        freeReplyObject(r);
        CHECK(old[0] != '\0');
        r = cmd("CONFIG SET max-object-size 1mb");
        CHECK(isOk(r));
        freeReplyObject(r);
        const size_t n = 2 * MiB;
        char *v = randomValue(n);
        /* MSET: the refused value is not the first argument read in place. */
        char *ok = randomValue(64 * KiB);
        r = cmd("MSET ht:mos:a %b ht:mos:b %b", ok, (size_t)64 * KiB, v, n);
        CHECK(r && r->type == REDIS_REPLY_ERROR);
        freeReplyObject(r);
        CHECK_EQ(existsKey("ht:mos:a", 8), 0);
        r = cmd("SET ht:mos:b %b", v, n);
        CHECK(r && r->type == REDIS_REPLY_ERROR);
        freeReplyObject(r);
        CHECK_EQ(existsKey("ht:mos:b", 8), 0);
        CHECK(pingOk());
        if (old[0]) {
            r = cmd("CONFIG SET max-object-size %s", old);
            CHECK(isOk(r));
            freeReplyObject(r);
        }
        free(v);
        free(ok);
    }
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *seed = getenv("MC_SEED");
    rng_state = seed && *seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (rng_state == 0) rng_state = 1;
    printf("test_hiredis: MC_SEED=%llu, hiredis %d.%d.%d\n", (unsigned long long)rng_state, HIREDIS_MAJOR,
           HIREDIS_MINOR, HIREDIS_PATCH);

    const char *eh = getenv("MC_HOST"), *ep = getenv("MC_PORT");
    if (argc >= 3) {
        host = argv[1];
        port = atoi(argv[2]);
    } else if (argc == 2) {
        port = atoi(argv[1]);
    } else if (ep && *ep) {
        if (eh && *eh) host = eh;
        port = atoi(ep);
    }
    if (port == 0) {
        if (tsStart(&srv, NULL) != 0) {
            TEST("start the server") CHECK(0);
            return testReport();
        }
        port = srv.port;
        printf("started %s on port %d (pid %d, log %s)\n", tsServerBinary(), port, (int)srv.pid, srv.log);
    } else {
        printf("testing the server at %s:%d\n", host, port);
    }

    TEST("PING") {
        CHECK(conn() != NULL);
        CHECK(pingOk());
    }
    testSizes();
    testBinaryKeys();
    testMsetMget();
    testPipeline();
    testTrickle();
    testAbandonedSet();
    testUnreadReply();
    testResp3();
    testOverwriteRace();
    testRefusedValues();
    TEST("DEBUG ALLOC-CHECK is OK at the end") {
        redisReply *r = cmd("DEBUG ALLOC-CHECK");
        if (!isOk(r)) showReply("DEBUG ALLOC-CHECK", r);
        CHECK(isOk(r));
        freeReplyObject(r);
        /* Our keys are gone again. */
        r = cmd("DEL ht:size:0 ht:size:1 ht:size:100 ht:size:16383 ht:size:16384 ht:size:32767 "
                "ht:size:32768 ht:size:1048576 ht:size:8388608");
        freeReplyObject(r);
        for (int i = 0; i < 8; i++) {
            r = cmd("DEL ht:mset:%d", i);
            freeReplyObject(r);
        }
    }
    if (rc) redisFree(rc);
    rc = NULL;

    if (srv.pid) {
        TEST("the server exits cleanly on SIGTERM, with no sanitizer report") {
            int st = tsStop(&srv);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                fprintf(stderr, "  wait status %d (signal %d)\n", st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            CHECK(!tsLogHas(&srv, "AddressSanitizer") && !tsLogHas(&srv, "runtime error:") &&
                  !tsLogHas(&srv, "LeakSanitizer"));
        }
    }
    if (test_failed || (test_cur_name && test_cur_failed)) tsDumpLog(&srv, 40);
    tsCleanup(&srv);
    return testReport();
}
