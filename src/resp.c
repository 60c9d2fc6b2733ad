/* resp.c -- incremental RESP request parser.
 *
 * The parser is a pure function of (state, bytes): it owns no buffer and
 * performs no I/O. It hands back one token per call: the start of a
 * multibulk request with its argument count, each argument, an inline line,
 * or an error. That shape is what lets the networking layer make the one
 * decision that matters for a value store: where a large argument's bytes
 * land. For an argument of at least `big_arg` bytes the parser stops after
 * the `$<len>\r\n` header (RESP_BIGARG) and the caller reads the payload
 * itself, straight into segment memory for a SET value, so a 64 MiB value
 * is copied by the kernel once and never by us.
 *
 * Every number off the wire is parsed strictly (util.c string2ll) and
 * bounded before use: the argument count by INT_MAX, a bulk length by
 * proto-max-bulk-len, header and inline lines by RESP_INLINE_MAX, and,
 * for connections that have not authenticated yet, by the much smaller
 * RESP_UNAUTH_* limits so an anonymous peer cannot make us buffer much.
 * The error texts are Redis's, because clients and tests match on them.
 *
 * Invariant: `used` never exceeds `len`, and a token's ptr/len always lie
 * inside [buf, buf+len). The fuzz target (tests/fuzz) checks exactly that.
 */
#include "resp.h"

#include <limits.h>
#include <string.h>

#include "util.h"

void respReqInit(respReqParser *p, long long max_bulk_len, long long big_arg) {
    memset(p, 0, sizeof(*p));
    p->max_bulk_len = max_bulk_len;
    p->big_arg = big_arg;
    p->bulk_len = -1;
}

void respReqReset(respReqParser *p) {
    p->in_array = 0;
    p->args_left = 0;
    p->bulk_len = -1;
    p->in_bigarg = 0;
}

static int respError(respTok *tok, const char *msg) {
    tok->type = RESP_ERR;
    tok->err = msg;
    return RESP_ERR;
}

/* Finds a "\r\n"-terminated header line at buf. Returns the length up to
 * (not including) the CR, or -1 if the line is not complete yet. */
static long long headerLine(const char *buf, size_t len) {
    size_t scan = len < RESP_INLINE_MAX ? len : RESP_INLINE_MAX;
    const char *cr = memchr(buf, '\r', scan);
    if (cr == NULL) return -1;
    if ((size_t)(cr - buf) + 1 >= len) return -1; /* the LF is not here yet */
    return cr - buf;
}

static void argDone(respReqParser *p) {
    p->bulk_len = -1;
    if (--p->args_left == 0) p->in_array = 0;
}

int respReqNext(respReqParser *p, const char *buf, size_t len, size_t *used, respTok *tok) {
    size_t pos = 0;
    memset(tok, 0, sizeof(*tok));
    *used = 0;
    if (p->in_bigarg) return RESP_MORE; /* the caller owes us respReqBigArgDone */

    while (!p->in_array) {
        if (pos == len) {
            *used = pos; /* skipped empty requests are consumed too */
            return RESP_MORE;
        }
        if (buf[pos] != '*') {
            /* Inline request: a whole line up to '\n'. */
            size_t avail = len - pos;
            size_t scan = avail < RESP_INLINE_MAX ? avail : RESP_INLINE_MAX;
            const char *nl = memchr(buf + pos, '\n', scan);
            if (nl == NULL) {
                if (avail >= RESP_INLINE_MAX) return respError(tok, "Protocol error: too big inline request");
                *used = pos;
                return RESP_MORE;
            }
            size_t linelen = (size_t)(nl - (buf + pos));
            tok->ptr = buf + pos;
            tok->len = linelen && tok->ptr[linelen - 1] == '\r' ? linelen - 1 : linelen;
            pos += linelen + 1;
            *used = pos;
            tok->type = RESP_INLINE;
            return RESP_INLINE;
        }
        long long ll = headerLine(buf + pos, len - pos);
        if (ll < 0) {
            if (len - pos >= RESP_INLINE_MAX)
                return respError(tok, "Protocol error: too big mbulk count string");
            *used = pos;
            return RESP_MORE;
        }
        long long count;
        if (!string2ll(buf + pos + 1, (size_t)ll - 1, &count) || count > INT_MAX)
            return respError(tok, "Protocol error: invalid multibulk length");
        if (p->unauthenticated && count > RESP_UNAUTH_MBULK_MAX)
            return respError(tok, "Protocol error: unauthenticated multibulk length");
        pos += (size_t)ll + 2;
        if (count <= 0) continue; /* "*0" and "*-1" are empty requests: skip */
        p->in_array = 1;
        p->args_left = count;
        p->bulk_len = -1;
        *used = pos;
        tok->type = RESP_ARRAY;
        tok->n = count;
        return RESP_ARRAY;
    }

    if (p->bulk_len == -1) {
        if (pos == len) return RESP_MORE;
        if (buf[pos] != '$') {
            /* Redis quotes the offending byte; keep the text identical. */
            memcpy(p->errbuf, "Protocol error: expected '$', got ' '", 38);
            p->errbuf[35] = buf[pos];
            return respError(tok, p->errbuf);
        }
        long long ll = headerLine(buf + pos, len - pos);
        if (ll < 0) {
            if (len - pos >= RESP_INLINE_MAX)
                return respError(tok, "Protocol error: too big bulk count string");
            return RESP_MORE;
        }
        long long blen;
        if (!string2ll(buf + pos + 1, (size_t)ll - 1, &blen) || blen < 0 ||
            blen > p->max_bulk_len)
            return respError(tok, "Protocol error: invalid bulk length");
        if (p->unauthenticated && blen > RESP_UNAUTH_BULK_MAX)
            return respError(tok, "Protocol error: unauthenticated bulk length");
        pos += (size_t)ll + 2;
        p->bulk_len = blen;
        if (p->big_arg > 0 && blen >= p->big_arg) {
            p->in_bigarg = 1;
            *used = pos;
            tok->type = RESP_BIGARG;
            tok->n = blen;
            return RESP_BIGARG;
        }
    }

    /* Body of a small argument: wait until all of it and its CRLF are here. */
    size_t need = (size_t)p->bulk_len + 2;
    if (len - pos < need) {
        *used = pos;
        return RESP_MORE;
    }
    if (buf[pos + need - 2] != '\r' || buf[pos + need - 1] != '\n')
        return respError(tok, "Protocol error: expected CRLF after bulk");
    tok->type = RESP_ARG;
    tok->ptr = buf + pos;
    tok->len = (size_t)p->bulk_len;
    pos += need;
    *used = pos;
    argDone(p);
    return RESP_ARG;
}

void respReqBigArgDone(respReqParser *p) {
    p->in_bigarg = 0;
    argDone(p);
}
