/* fuzz_resp.c -- libFuzzer target for the RESP request parser (src/resp.c).
 *
 * The parser's safety rests on one promise (resp.c's header): `used` never
 * exceeds the bytes offered, and every token points inside them. The
 * networking layer trusts that promise blindly, so this target checks it on
 * arbitrary bytes, driving the parser exactly as processInputBuffer does:
 * bytes arrive in chunks, unconsumed bytes stay in a buffer, a RESP_BIGARG
 * payload and its CRLF are taken by the caller, and the limits
 * (`unauthenticated`, `max_bulk_len`) may change between requests.
 *
 * Input layout (so the corpus stays readable RESP after a short prefix):
 *
 *   byte 0   bits 0-2  big_arg      (index into bigArgTable; 0 = off)
 *            bits 3-5  max_bulk_len (index into maxBulkTable)
 *            bit  6    amplify: the first stream byte, repeated about
 *                      RESP_INLINE_MAX times (64 KiB - 8 + bytes[5] % 16),
 *                      is spliced into the rest of the stream at offset
 *                      bytes[4] % len, and chunks are 1024x larger: reaches
 *                      the 64 KiB line limits that -max_len would hide
 *            bit  7    alternate max_bulk_len with the next table entry on
 *                      every other request (CONFIG SET between requests)
 *   byte 1   bit k: the parser is `unauthenticated` for request k mod 8
 *   bytes 2-5  chunk sizes, used in turn: byte b feeds b+1 bytes
 *   rest     the byte stream a client would send
 *
 * Every request boundary is where networking.c refreshes the limits, so
 * the same is done here after each completed command.
 *
 * Besides the memory-safety invariants, the target checks the parser's
 * meaning: the token stream must not depend on how the bytes were split
 * nor on whether a long argument came as RESP_BIGARG. The stream is parsed
 * a second time in one piece with big_arg off and a digest of both token
 * streams must match (error texts aside: a line that reaches the 64 KiB
 * limit may be refused with a different wording depending on the split).
 * And it checks progress: RESP_MORE asked again with nothing new must stay
 * RESP_MORE with nothing used, and bytes the parser has already skipped (an
 * empty "*0" request) must be reported as used, or the server keeps and
 * rescans them on every read. -DFUZZ_RESP_NO_LEFTOVER_CHECK turns that last
 * check off, to look for other bugs while it fails.
 *
 * Any broken invariant is __builtin_trap(), which libFuzzer reports as a
 * crash with the input saved.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "sds.h"
#include "util.h"
#include "zmalloc.h"

#define FUZZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

static const long long bigArgTable[8] = {0, 1, 2, 3, 8, 64, 1024, 32 * 1024};
static const long long maxBulkTable[8] = {0, 1, 5, 64, 16384, 1024 * 1024, 1LL << 30, LLONG_MAX};

typedef struct cfg {
    long long big_arg;
    int bulk_sel;       /* index into maxBulkTable */
    int bulk_alternate; /* bit 7 */
    unsigned unauth_mask;
    const unsigned char *chunks; /* 4 sizes; NULL = all at once */
    size_t chunk_mult;
} cfg;

/* One parser session: the query buffer, the parser, and what the caller
 * of respReqNext must remember between calls. */
typedef struct drv {
    const cfg *cfg;
    respReqParser p;
    char *buf;          /* pending bytes, an exact-size heap block so that
                         * ASan sees any read past its end */
    size_t len, pos;    /* valid bytes, parsed up to pos */
    long long expect;   /* arguments of the current request, 0 = none */
    long long got;      /* arguments of it completed */
    int in_big;
    unsigned long long big_n;  /* payload length of the RESP_BIGARG */
    unsigned long long big_got;
    char *big_bytes;    /* the payload so far (grown as bytes arrive) */
    size_t big_cap;
    char crlf[2];
    int crlf_got;
    unsigned requests;  /* completed requests: selects the limits */
    int failed;         /* a RESP_ERR or a caller-detected error: stop */
    uint64_t digest;
} drv;

static void hashBytes(drv *d, const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = d->digest;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    d->digest = h;
}

static void hashRecord(drv *d, char type, unsigned long long n, const void *p, size_t len) {
    hashBytes(d, &type, 1);
    hashBytes(d, &n, sizeof(n));
    if (len) hashBytes(d, p, len);
}

/* The limits networking.c would apply to request number d->requests. */
static void applyLimits(drv *d) {
    const cfg *c = d->cfg;
    int sel = c->bulk_sel;
    if (c->bulk_alternate && (d->requests & 1)) sel = (sel + 1) & 7;
    d->p.max_bulk_len = maxBulkTable[sel];
    d->p.unauthenticated = (c->unauth_mask >> (d->requests & 7)) & 1;
}

static void drvInit(drv *d, const cfg *c) {
    memset(d, 0, sizeof(*d));
    d->cfg = c;
    d->digest = 0xcbf29ce484222325ULL;
    respReqInit(&d->p, maxBulkTable[c->bulk_sel], c->big_arg);
    applyLimits(d);
}

static void drvFree(drv *d) {
    free(d->buf);
    free(d->big_bytes);
}

static void fail(drv *d) {
    d->failed = 1;
    hashRecord(d, 'E', 0, NULL, 0);
}

static void requestDone(drv *d) {
    d->requests++;
    d->expect = d->got = 0;
    applyLimits(d);
}

static void argDone(drv *d) {
    FUZZ_CHECK(d->expect > 0 && d->got < d->expect);
    if (++d->got == d->expect) {
        /* The parser must agree that the request is over. */
        FUZZ_CHECK(!d->p.in_array);
        requestDone(d);
    } else {
        FUZZ_CHECK(d->p.in_array);
    }
}

/* Does b[0..n) start with a complete "*<count <= 0>\r?" header, one that
 * the parser skips as an empty request? Such bytes are parsed and must be
 * reported as used, or a client sending only "*0\r\n" makes the server
 * keep and rescan them forever. */
static int startsWithEmptyArray(const char *b, size_t n) {
    if (n < 3 || b[0] != '*') return 0;
    size_t scan = n < RESP_INLINE_MAX ? n : RESP_INLINE_MAX;
    const char *cr = memchr(b, '\r', scan);
    if (cr == NULL || (size_t)(cr - b) + 1 >= n) return 0;
    long long count;
    return string2ll(b + 1, (size_t)(cr - b) - 1, &count) && count <= 0;
}

/* Takes payload and CRLF bytes of a RESP_BIGARG from the buffer. */
static void feedBigArg(drv *d) {
    size_t avail = d->len - d->pos;
    if (d->big_got < d->big_n && avail) {
        unsigned long long want = d->big_n - d->big_got;
        size_t take = want < avail ? (size_t)want : avail;
        if (d->big_got + take > d->big_cap) {
            size_t cap = d->big_cap ? d->big_cap : 64;
            while (cap < d->big_got + take) cap *= 2;
            d->big_bytes = realloc(d->big_bytes, cap);
            FUZZ_CHECK(d->big_bytes != NULL);
            d->big_cap = cap;
        }
        memcpy(d->big_bytes + d->big_got, d->buf + d->pos, take);
        d->big_got += take;
        d->pos += take;
        avail -= take;
    }
    while (d->big_got == d->big_n && d->crlf_got < 2 && avail) {
        d->crlf[d->crlf_got++] = d->buf[d->pos++];
        avail--;
    }
    if (d->big_got < d->big_n || d->crlf_got < 2) return;
    if (d->crlf[0] != '\r' || d->crlf[1] != '\n') {
        fail(d); /* networking.c: "expected CRLF after bulk" */
        return;
    }
    hashRecord(d, 'A', d->big_n, d->big_bytes, (size_t)d->big_n);
    d->in_big = 0;
    d->big_n = d->big_got = 0;
    d->crlf_got = 0;
    respReqBigArgDone(&d->p);
    FUZZ_CHECK(!d->p.in_bigarg);
    argDone(d);
}

static void inlineRequest(drv *d, const char *ptr, size_t len) {
    FUZZ_CHECK(memchr(ptr, '\n', len) == NULL);
    hashRecord(d, 'I', len, ptr, len);
    /* What networking.c does with the line. */
    int argc;
    sds line = sdsnewlen(ptr, len);
    sds *argv = sdssplitargs(line, &argc);
    sdsfree(line);
    if (argv == NULL) {
        FUZZ_CHECK(argc == 0);
        fail(d); /* "unbalanced quotes in request" */
        return;
    }
    FUZZ_CHECK(argc >= 0 && (size_t)argc <= len);
    for (int j = 0; j < argc; j++) {
        FUZZ_CHECK(argv[j] != NULL);
        FUZZ_CHECK(sdslen(argv[j]) <= len);
        hashRecord(d, 'a', sdslen(argv[j]), argv[j], sdslen(argv[j]));
    }
    sdsfreesplitres(argv, argc);
    if (argc > 0) requestDone(d); /* an empty line is no request */
}

/* Parses what is buffered, as processInputBuffer does. */
static void parse(drv *d) {
    while (!d->failed) {
        if (d->in_big) {
            feedBigArg(d);
            if (d->in_big) return;
            continue;
        }
        const char *base = d->buf + d->pos;
        size_t avail = d->len - d->pos;
        size_t used = (size_t)-1;
        respTok tok;
        int t = respReqNext(&d->p, base, avail, &used, &tok);
        FUZZ_CHECK(used <= avail);
        FUZZ_CHECK(t == tok.type || t == RESP_MORE);
        const char *end = base + used;
        switch (t) {
        case RESP_MORE:
            d->pos += used;
            /* Asking again with nothing new changes nothing. */
            t = respReqNext(&d->p, d->buf + d->pos, d->len - d->pos, &used, &tok);
            FUZZ_CHECK(t == RESP_MORE && used == 0);
#ifndef FUZZ_RESP_NO_LEFTOVER_CHECK
            if (d->expect == 0)
                FUZZ_CHECK(!startsWithEmptyArray(d->buf + d->pos, d->len - d->pos));
#endif
            return;
        case RESP_ERR:
            FUZZ_CHECK(tok.err != NULL && tok.err[0] != '\0' && strlen(tok.err) < 128);
            fail(d);
            return; /* the connection is closed after the reply: stop */
        case RESP_ARRAY:
            FUZZ_CHECK(used > 0);
            FUZZ_CHECK(d->expect == 0);
            FUZZ_CHECK(tok.n >= 1 && tok.n <= INT_MAX);
            if (d->p.unauthenticated) FUZZ_CHECK(tok.n <= RESP_UNAUTH_MBULK_MAX);
            FUZZ_CHECK(d->p.in_array);
            hashRecord(d, '*', (unsigned long long)tok.n, NULL, 0);
            d->expect = tok.n;
            d->got = 0;
            d->pos += used;
            break;
        case RESP_ARG:
            FUZZ_CHECK(used > 0);
            FUZZ_CHECK(d->expect > 0 && d->got < d->expect);
            FUZZ_CHECK(tok.ptr >= base && tok.ptr <= end && tok.len <= (size_t)(end - tok.ptr));
            FUZZ_CHECK((long long)tok.len <= d->p.max_bulk_len);
            if (d->p.unauthenticated) FUZZ_CHECK(tok.len <= RESP_UNAUTH_BULK_MAX);
            if (d->p.big_arg > 0) FUZZ_CHECK((long long)tok.len < d->p.big_arg);
            hashRecord(d, 'A', tok.len, tok.ptr, tok.len);
            d->pos += used;
            argDone(d);
            break;
        case RESP_BIGARG:
            FUZZ_CHECK(used > 0);
            FUZZ_CHECK(d->expect > 0 && d->got < d->expect);
            FUZZ_CHECK(d->p.big_arg > 0 && tok.n >= d->p.big_arg && tok.n <= d->p.max_bulk_len);
            if (d->p.unauthenticated) FUZZ_CHECK(tok.n <= RESP_UNAUTH_BULK_MAX);
            FUZZ_CHECK(d->p.in_bigarg);
            d->pos += used;
            d->in_big = 1;
            d->big_n = (unsigned long long)tok.n;
            /* Until respReqBigArgDone the parser hands out nothing. */
            t = respReqNext(&d->p, d->buf + d->pos, d->len - d->pos, &used, &tok);
            FUZZ_CHECK(t == RESP_MORE && used == 0);
            d->big_got = 0;
            d->crlf_got = 0;
            break;
        case RESP_INLINE:
            FUZZ_CHECK(used > 0);
            FUZZ_CHECK(d->expect == 0 && !d->p.in_array);
            FUZZ_CHECK(tok.ptr >= base && tok.ptr <= end && tok.len <= (size_t)(end - tok.ptr));
            FUZZ_CHECK(tok.len < RESP_INLINE_MAX);
            d->pos += used;
            inlineRequest(d, tok.ptr, tok.len);
            break;
        default:
            __builtin_trap();
        }
    }
}

/* Appends bytes: the unparsed tail and the new chunk go to a new block of
 * exactly their size, so the parser never sees slack capacity. */
static void feed(drv *d, const char *bytes, size_t n) {
    size_t tail = d->len - d->pos;
    char *nb = malloc(tail + n ? tail + n : 1);
    FUZZ_CHECK(nb != NULL);
    if (tail) memcpy(nb, d->buf + d->pos, tail);
    memcpy(nb + tail, bytes, n);
    free(d->buf);
    d->buf = nb;
    d->len = tail + n;
    d->pos = 0;
    parse(d);
}

static uint64_t run(const cfg *c, const char *data, size_t n) {
    drv d;
    drvInit(&d, c);
    size_t off = 0;
    unsigned k = 0;
    while (off < n && !d.failed) {
        size_t chunk = n - off;
        if (c->chunks) {
            size_t want = ((size_t)c->chunks[k++ & 3] + 1) * c->chunk_mult;
            if (want < chunk) chunk = want;
        }
        feed(&d, data + off, chunk);
        off += chunk;
    }
    /* The parser's own view of the request must match ours. */
    if (!d.failed) FUZZ_CHECK(!!d.p.in_array == (d.expect > 0));
    hashRecord(&d, d.failed ? 'F' : 'M', 0, NULL, 0);
    uint64_t digest = d.digest;
    drvFree(&d);
    return digest;
}

int LLVMFuzzerTestOneInput(const uint8_t *input, size_t size) {
    if (size < 6) return 0;
    cfg c;
    c.big_arg = bigArgTable[input[0] & 7];
    c.bulk_sel = (input[0] >> 3) & 7;
    c.bulk_alternate = (input[0] >> 7) & 1;
    c.unauth_mask = input[1];
    c.chunks = input + 2;
    c.chunk_mult = 1;
    const char *data = (const char *)input + 6;
    size_t n = size - 6;
    char *amp = NULL;
    if ((input[0] & 0x40) && n > 0) {
        /* A run of one byte just past RESP_INLINE_MAX, spliced into the
         * stream where the fuzzer says: reaches the line limits cheaply. */
        char filler = data[0];
        const char *body = data + 1;
        size_t m = n - 1;
        size_t split = input[4] % (m + 1);
        size_t runlen = RESP_INLINE_MAX - 8 + (input[5] & 15);
        /* 64 Ki newlines are 64 Ki empty inline requests: slow, and no
         * test of a limit. */
        if (filler == '\n') runlen = 64;
        amp = malloc(m + runlen);
        FUZZ_CHECK(amp != NULL);
        memcpy(amp, body, split);
        memset(amp + split, filler, runlen);
        memcpy(amp + split + runlen, body + split, m - split);
        data = amp;
        n = m + runlen;
        c.chunk_mult = 1024;
    }

    uint64_t chunked = run(&c, data, n);
    /* The same bytes in one piece, long arguments parsed as plain ones. */
    cfg whole = c;
    whole.chunks = NULL;
    whole.big_arg = 0;
    uint64_t oneshot = run(&whole, data, n);
    FUZZ_CHECK(chunked == oneshot);

    free(amp);
    return 0;
}
