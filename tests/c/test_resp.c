/* test_resp.c -- the RESP request parser against every way bytes can arrive.
 *
 * The central check: a pipeline of mixed requests (multibulk, inline, empty
 * arrays, binary args, a big arg) must parse to the same commands whether
 * it arrives whole, split at every single byte offset, or one byte at a
 * time. A driver below plays the networking layer: it keeps a buffer,
 * feeds the parser, and reads RESP_BIGARG payloads itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "testhelp.h"

typedef struct {
    char buf[8192];
    size_t len;
    respReqParser p;
    int in_big;
    long long big_need; /* payload + CRLF still to take */
    char out[8192];     /* rendered commands: "argc:arg,arg|" */
    size_t outlen;
    int argc_left;
    const char *err;
} driver;

static void emit(driver *d, const char *s, size_t n) {
    memcpy(d->out + d->outlen, s, n);
    d->outlen += n;
    d->out[d->outlen] = '\0';
}

static void driverInit(driver *d, long long big_arg) {
    memset(d, 0, sizeof(*d));
    respReqInit(&d->p, 1024 * 1024, big_arg);
}

/* Feeds n bytes; returns 0, or -1 on a protocol error (d->err). */
static int feed(driver *d, const char *bytes, size_t n) {
    memcpy(d->buf + d->len, bytes, n);
    d->len += n;
    size_t pos = 0;
    for (;;) {
        if (d->in_big) {
            size_t take = (size_t)d->big_need < d->len - pos ? (size_t)d->big_need : d->len - pos;
            /* payload bytes (all but the final CRLF) go to the output */
            for (size_t i = 0; i < take; i++) {
                if (d->big_need - (long long)i > 2) emit(d, d->buf + pos + i, 1);
            }
            d->big_need -= (long long)take;
            pos += take;
            if (d->big_need) break;
            d->in_big = 0;
            respReqBigArgDone(&d->p);
            emit(d, --d->argc_left ? "," : "|", 1);
            continue;
        }
        respTok t;
        size_t used;
        int r = respReqNext(&d->p, d->buf + pos, d->len - pos, &used, &t);
        if (used > d->len - pos) {
            d->err = "used beyond buffer";
            return -1;
        }
        pos += used;
        if (r == RESP_MORE) break;
        if (r == RESP_ERR) {
            d->err = t.err;
            return -1;
        }
        char tmp[32];
        if (r == RESP_ARRAY) {
            d->argc_left = (int)t.n;
            emit(d, tmp, (size_t)snprintf(tmp, sizeof(tmp), "%lld:", t.n));
        } else if (r == RESP_ARG) {
            emit(d, t.ptr, t.len);
            emit(d, --d->argc_left ? "," : "|", 1);
        } else if (r == RESP_BIGARG) {
            d->in_big = 1;
            d->big_need = t.n + 2;
        } else if (r == RESP_INLINE) {
            emit(d, "i:", 2);
            emit(d, t.ptr, t.len);
            emit(d, "|", 1);
        }
    }
    memmove(d->buf, d->buf + pos, d->len - pos);
    d->len -= pos;
    return 0;
}

static const char pipeline[] =
    "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"
    "PING\r\n"
    "*0\r\n"
    "*-1\r\n"
    "\r\n"
    "*2\r\n$3\r\nGET\r\n$0\r\n\r\n"
    "*1\r\n$4\r\na\r\nb\r\n"               /* binary: CRLF inside an arg */
    "*2\r\n$4\r\nECHO\r\n$40\r\n0123456789012345678901234567890123456789\r\n"
    "inline with \"quotes\"\n";
static const char expected[] =
    "3:SET,k,hello|i:PING|i:|2:GET,|1:a\r\nb|2:ECHO,0123456789012345678901234567890123456789|"
    "i:inline with \"quotes\"|";

int main(void) {
    driver d;

    TEST("resp: whole pipeline parses") {
        driverInit(&d, 32);
        CHECK(feed(&d, pipeline, sizeof(pipeline) - 1) == 0);
        CHECK(strcmp(d.out, expected) == 0);
        if (strcmp(d.out, expected)) fprintf(stderr, "  got: %s\n", d.out);
        CHECK_EQ(d.len, 0);
    }

    TEST("resp: every split point gives the same commands") {
        int bad = 0;
        for (size_t split = 0; split <= sizeof(pipeline) - 1; split++) {
            driverInit(&d, 32);
            int rc = feed(&d, pipeline, split);
            rc |= feed(&d, pipeline + split, sizeof(pipeline) - 1 - split);
            if (rc || strcmp(d.out, expected)) bad++;
        }
        CHECK_EQ(bad, 0);
    }

    TEST("resp: every two split points give the same commands") {
        int bad = 0;
        size_t n = sizeof(pipeline) - 1;
        for (size_t a = 0; a <= n; a += 3)
            for (size_t b = a; b <= n; b += 5) {
                driverInit(&d, 32);
                int rc = feed(&d, pipeline, a);
                rc |= feed(&d, pipeline + a, b - a);
                rc |= feed(&d, pipeline + b, n - b);
                if (rc || strcmp(d.out, expected)) bad++;
            }
        CHECK_EQ(bad, 0);
    }

    TEST("resp: one byte at a time") {
        driverInit(&d, 32);
        int rc = 0;
        for (size_t i = 0; i < sizeof(pipeline) - 1; i++) rc |= feed(&d, pipeline + i, 1);
        CHECK_EQ(rc, 0);
        CHECK(strcmp(d.out, expected) == 0);
    }

    TEST("resp: without big args the same commands come out") {
        driverInit(&d, 0);
        CHECK(feed(&d, pipeline, sizeof(pipeline) - 1) == 0);
        CHECK(strcmp(d.out, expected) == 0);
    }

    struct {
        const char *in;
        const char *err;
    } bad[] = {
        {"*3000000000\r\n", "Protocol error: invalid multibulk length"},
        {"*abc\r\n", "Protocol error: invalid multibulk length"},
        {"*1x\r\n", "Protocol error: invalid multibulk length"},
        {"*+1\r\n", "Protocol error: invalid multibulk length"},
        {"*01\r\n", "Protocol error: invalid multibulk length"},
        {"*\r\n", "Protocol error: invalid multibulk length"},
        {"*1\r\n$-10\r\n", "Protocol error: invalid bulk length"},
        {"*1\r\n$2000000000\r\n", "Protocol error: invalid bulk length"},
        {"*1\r\n$\r\n", "Protocol error: invalid bulk length"},
        {"*1\r\n$1 \r\n", "Protocol error: invalid bulk length"},
        {"*1\r\nfoo\r\n", "Protocol error: expected '$', got 'f'"},
        {"*1\r\n$3\r\nfooXY", "Protocol error: expected CRLF after bulk"},
    };
    TEST("resp: malformed requests give Redis's errors") {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            driverInit(&d, 32);
            int rc = feed(&d, bad[i].in, strlen(bad[i].in));
            CHECK(rc == -1);
            CHECK(d.err && strcmp(d.err, bad[i].err) == 0);
            if (!d.err || strcmp(d.err, bad[i].err))
                fprintf(stderr, "  input %zu: got %s\n", i, d.err ? d.err : "(none)");
        }
    }

    TEST("resp: empty requests are consumed, not left in the buffer") {
        respReqParser p;
        respTok t;
        size_t used;
        respReqInit(&p, 1024, 0);
        const char *empties = "*0\r\n*-1\r\n*0\r\n";
        CHECK(respReqNext(&p, empties, strlen(empties), &used, &t) == RESP_MORE);
        CHECK_EQ(used, strlen(empties));
    }

    TEST("resp: over-long lines are refused, not buffered forever") {
        static char big[RESP_INLINE_MAX + 10];
        memset(big, 'a', sizeof(big));
        respReqParser p;
        respTok t;
        size_t used;
        respReqInit(&p, 1024, 0);
        CHECK(respReqNext(&p, big, sizeof(big), &used, &t) == RESP_ERR);
        CHECK(strcmp(t.err, "Protocol error: too big inline request") == 0);
        CHECK(respReqNext(&p, big, RESP_INLINE_MAX - 1, &used, &t) == RESP_MORE);
        big[0] = '*';
        respReqInit(&p, 1024, 0);
        CHECK(respReqNext(&p, big, sizeof(big), &used, &t) == RESP_ERR);
        CHECK(strcmp(t.err, "Protocol error: too big mbulk count string") == 0);
        memcpy(big, "*1\r\n$", 5);
        respReqInit(&p, 1024, 0);
        CHECK(respReqNext(&p, big, sizeof(big), &used, &t) == RESP_ARRAY);
        CHECK(respReqNext(&p, big + used, sizeof(big) - used, &used, &t) == RESP_ERR);
        CHECK(strcmp(t.err, "Protocol error: too big bulk count string") == 0);
    }

    TEST("resp: proto-max-bulk-len is enforced") {
        respReqParser p;
        respTok t;
        size_t used;
        respReqInit(&p, 10, 0);
        const char *ok = "*1\r\n$10\r\n0123456789\r\n";
        CHECK(respReqNext(&p, ok, strlen(ok), &used, &t) == RESP_ARRAY);
        size_t off = used;
        CHECK(respReqNext(&p, ok + off, strlen(ok) - off, &used, &t) == RESP_ARG);
        CHECK_EQ(t.len, 10);
        const char *no = "*1\r\n$11\r\n01234567890\r\n";
        respReqInit(&p, 10, 0);
        respReqNext(&p, no, strlen(no), &used, &t);
        off = used;
        CHECK(respReqNext(&p, no + off, strlen(no) - off, &used, &t) == RESP_ERR);
    }

    TEST("resp: unauthenticated limits") {
        respReqParser p;
        respTok t;
        size_t used;
        respReqInit(&p, 1 << 30, 0);
        p.unauthenticated = 1;
        CHECK(respReqNext(&p, "*11\r\n", 5, &used, &t) == RESP_ERR);
        CHECK(strcmp(t.err, "Protocol error: unauthenticated multibulk length") == 0);
        respReqInit(&p, 1 << 30, 0);
        p.unauthenticated = 1;
        CHECK(respReqNext(&p, "*2\r\n$16385\r\n", 12, &used, &t) == RESP_ARRAY);
        CHECK(respReqNext(&p, "$16385\r\n", 8, &used, &t) == RESP_ERR);
        CHECK(strcmp(t.err, "Protocol error: unauthenticated bulk length") == 0);
    }

    TEST("resp: tokens never point outside the buffer (random bytes)") {
        unsigned seed = 12345;
        int violations = 0;
        static char buf[512];
        for (int iter = 0; iter < 200000; iter++) {
            size_t n = (size_t)(rand_r(&seed) % sizeof(buf));
            const char alphabet[] = "*$\r\n0123456789-abc ";
            for (size_t i = 0; i < n; i++) buf[i] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
            respReqParser p;
            respReqInit(&p, 100, 16);
            size_t pos = 0;
            for (int steps = 0; steps < 1000 && pos <= n; steps++) {
                respTok t;
                size_t used;
                int r = respReqNext(&p, buf + pos, n - pos, &used, &t);
                if (used > n - pos) violations++;
                if ((r == RESP_ARG || r == RESP_INLINE) &&
                    (t.ptr < buf + pos || t.ptr + t.len > buf + n))
                    violations++;
                pos += used;
                if (r == RESP_MORE || r == RESP_ERR) break;
                if (r == RESP_BIGARG) {
                    size_t skip = (size_t)t.n + 2;
                    if (skip > n - pos) break;
                    pos += skip;
                    respReqBigArgDone(&p);
                }
            }
        }
        CHECK_EQ(violations, 0);
    }

    return testReport();
}
