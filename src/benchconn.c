/* benchconn.c -- mooncake-benchmark's RESP engine: one connection's
 * requests built and written, its replies consumed where they lie.
 *
 * The why is mooncake-benchmark.c's opening comment (requests pre-built,
 * values sent from one pattern buffer, replies parsed in place, big
 * payloads read into the thread's sink); this is the how. A connection
 * holds a header per pipeline slot and key, formatted once per test
 * (benchConnPrepare): only the 12 key digits are rewritten per request,
 * and a batch goes out as one writev of headers, pattern windows and
 * CRLFs (benchConnIssue, benchConnWrite). Replies are parsed incrementally
 * (benchConnRead): a line, a payload or its CRLF at a time, with a small
 * stack of open arrays for the store rows' nested replies, and --check
 * compares each payload chunk with the pattern right after the read that
 * brought it. When a connection's batch is answered it issues the next
 * one itself, so the phase runner (mooncake-benchmark.c) only starts
 * connections and waits on epoll.
 *
 * Everything here runs on the connection's thread. It reads the
 * configuration (benchCfg) and the test being run (benchCur), which the
 * main thread writes only between phases -- but for benchCur.issued, the
 * atomic counter every connection claims its requests from.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "benchmark.h"

/* ---- building requests ---------------------------------------------------------------- */

/* "$<len>\r\n<s>\r\n" at p; returns its length. */
int benchPutArg(char *p, const char *s) {
    return sprintf(p, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* The put options every PUT.START / BATCH.PUT.START carries, as RESP
 * arguments: [REPLICAS n] REPLACE (so a run may write its keys again).
 * Returns the length; *argc gets how many arguments they are. */
static int putOptions(char *p, int *argc) {
    char *q = p;
    *argc = 1;
    if (benchCfg.replicas) {
        char n[16];
        snprintf(n, sizeof(n), "%d", benchCfg.replicas);
        q += benchPutArg(q, "REPLICAS");
        q += benchPutArg(q, n);
        *argc += 2;
    }
    q += benchPutArg(q, "REPLACE");
    return (int)(q - p);
}

/* Formats the headers of every slot and key of connection c for the test
 * about to run. The key digits are filled in for the fixed keyspace and
 * rewritten per request with -r. */
void benchConnPrepare(conn *c) {
    const workload *w = benchCur.w;
    int nk = benchCur.nkeys;
    int batchcmd = (w->flags & WL_BATCH) != 0;
    int sizearg = (w->flags & WL_SIZEARG) != 0;
    char opts[64], sizestr[24];
    int optargc = 0, optlen = 0;
    if (sizearg) optlen = putOptions(opts, &optargc);
    snprintf(sizestr, sizeof(sizestr), "%zu", benchCur.vlen);
    int argc = 1 + nk * ((w->flags & (WL_WRITE | WL_SIZEARG)) ? 2 : 1) +
               ((w->flags & WL_NUMKEYS) ? 1 : 0) + optargc;
    c->prefixlen = snprintf(c->prefix, sizeof(c->prefix), "*%d\r\n$%zu\r\n%s\r\n", argc,
                            strlen(w->cmd), w->cmd);
    if (w->flags & WL_NUMKEYS) {
        char n[16];
        snprintf(n, sizeof(n), "%d", nk);
        c->prefixlen += benchPutArg(c->prefix + c->prefixlen, n);
    }
    c->prefix2len = 0;
    if (w->cmd2)
        c->prefix2len = snprintf(c->prefix2, sizeof(c->prefix2), "*%d\r\n$%zu\r\n%s\r\n",
                                 1 + nk, strlen(w->cmd2), w->cmd2);
    c->suffixlen = 0;
    if (batchcmd && sizearg) {
        memcpy(c->suffix, opts, (size_t)optlen);
        c->suffixlen = optlen;
    }
    char keyprefix[32];
    int kplen = snprintf(keyprefix, sizeof(keyprefix), "key:%zu:", benchCur.vlen);
    size_t klen = (size_t)kplen + BENCH_KEY_DIGITS;
    for (int s = 0; s < benchCfg.pipeline; s++) {
        for (int i = 0; i < nk; i++) {
            khdr *h = &c->hdrs[s * nk + i];
            char *p = h->buf;
            /* A single-key command carries its prefix in its only header,
             * so SET is 3 iovecs and GET is 1. */
            if (!batchcmd) {
                memcpy(p, c->prefix, (size_t)c->prefixlen);
                p += c->prefixlen;
            }
            p += sprintf(p, "$%zu\r\n%s", klen, keyprefix);
            h->digits = (uint16_t)(p - h->buf);
            p += BENCH_KEY_DIGITS;
            p += sprintf(p, "\r\n");
            if (w->flags & WL_WRITE) p += sprintf(p, "$%zu\r\n", benchCur.vlen);
            if (sizearg) p += benchPutArg(p, sizestr);
            if (sizearg && !batchcmd) {
                memcpy(p, opts, (size_t)optlen);
                p += optlen;
            }
            h->len = (uint16_t)(p - h->buf);
            h->len2 = 0;
            h->digits2 = 0;
            if (w->cmd2) {
                /* The second command: whole (single key, same iovec) or
                 * just this key's argument (batch, its own iovec). */
                char *q = p;
                if (!batchcmd) {
                    memcpy(p, c->prefix2, (size_t)c->prefix2len);
                    p += c->prefix2len;
                }
                p += sprintf(p, "$%zu\r\n%s", klen, keyprefix);
                h->digits2 = (uint16_t)(p - h->buf);
                p += BENCH_KEY_DIGITS;
                p += sprintf(p, "\r\n");
                if (batchcmd) h->len2 = (uint16_t)(p - q);
                else h->len = (uint16_t)(p - h->buf);
            }
            if ((size_t)(p - h->buf) > sizeof(h->buf)) benchFatal("request header overflow");
            uint64_t k = batchcmd ? (uint64_t)c->id * (uint64_t)nk + (uint64_t)i : (uint64_t)c->id;
            c->keys[s * nk + i] = k;
            putDigits(h->buf + h->digits, k);
            if (h->digits2) putDigits(h->buf + h->digits2, k);
        }
    }
}

/* The value of a key whose pattern starts at `shift`, as iovecs over the
 * pattern buffer: a window to the end of the period, then whole periods,
 * then the rest. The same megabyte is sent again and again, so the
 * source of every write stays in the CPU cache. Returns the count. */
static int valueIov(struct iovec *iov, size_t shift, size_t vlen) {
    int n = 0;
    while (vlen > 0) {
        size_t take = BENCH_PATTERN_PERIOD - shift;
        if (take > vlen) take = vlen;
        iov[n].iov_base = benchPattern + shift;
        iov[n++].iov_len = take;
        vlen -= take;
        shift = 0;
    }
    return n;
}


/* Claims up to `pipeline` requests, builds their iovecs and starts writing.
 * Returns 0 when the phase has nothing left for this connection. */
int benchConnIssue(conn *c) {
    benchThread *t = c->t;
    uint64_t now = nowNs();
    if (benchCur.deadline && now >= benchCur.deadline) return 0;
    long long want = benchCfg.pipeline;
    long long first = atomic_fetch_add(&benchCur.issued, want);
    if (first >= benchCur.limit) return 0;
    if (first + want > benchCur.limit) want = benchCur.limit - first;

    const workload *w = benchCur.w;
    int nk = benchCur.nkeys;
    struct iovec *iov = c->iov;
    int n = 0;
    for (int s = 0; s < want; s++) {
        if (nk == 0) {   /* PING */
            iov[n].iov_base = c->prefix;
            iov[n++].iov_len = (size_t)c->prefixlen;
            continue;
        }
        int batchcmd = (w->flags & WL_BATCH) != 0;
        if (batchcmd) {
            iov[n].iov_base = c->prefix;
            iov[n++].iov_len = (size_t)c->prefixlen;
        }
        for (int i = 0; i < nk; i++) {
            khdr *h = &c->hdrs[s * nk + i];
            if (benchCfg.keyspace) {
                uint64_t k;
                if (benchCfg.sequential)
                    k = ((uint64_t)(first + s) * (uint64_t)nk + (uint64_t)i) % (uint64_t)benchCfg.keyspace;
                else
                    k = xorshift64(&t->rng) % (uint64_t)benchCfg.keyspace;
                c->keys[s * nk + i] = k;
                putDigits(h->buf + h->digits, k);
                if (h->digits2) putDigits(h->buf + h->digits2, k);
            }
            iov[n].iov_base = h->buf;
            iov[n++].iov_len = h->len;
            if (w->flags & WL_WRITE) {
                n += valueIov(iov + n, keyShift(c->keys[s * nk + i]), benchCur.vlen);
                iov[n].iov_base = (void *)benchCrlf;
                iov[n++].iov_len = 2;
            }
        }
        if (batchcmd && c->suffixlen) {
            iov[n].iov_base = c->suffix;
            iov[n++].iov_len = (size_t)c->suffixlen;
        }
        if (batchcmd && w->cmd2) {
            iov[n].iov_base = c->prefix2;
            iov[n++].iov_len = (size_t)c->prefix2len;
            for (int i = 0; i < nk; i++) {
                khdr *h = &c->hdrs[s * nk + i];
                iov[n].iov_base = h->buf + h->len;
                iov[n++].iov_len = h->len2;
            }
        }
    }
    c->nslots = (int)want;
    c->iovcnt = n;
    c->iovpos = 0;
    c->rslot = 0;
    c->rcmd = 0;
    c->depth = 0;
    c->sent_ns = now;
    c->batches++;
    benchConnWrite(c);
    return 1;
}

static void connSetWrite(conn *c, int on) {
    if (c->wantwrite == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(c->t->epfd, EPOLL_CTL_MOD, c->fd, &ev) == -1)
        benchFatal("epoll_ctl: %s", strerror(errno));
    c->wantwrite = on;
}

void benchConnWrite(conn *c) {
    while (c->iovpos < c->iovcnt) {
        int cnt = c->iovcnt - c->iovpos;
        if (cnt > IOV_MAX) cnt = IOV_MAX;
        ssize_t n = writev(c->fd, c->iov + c->iovpos, cnt);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                connSetWrite(c, 1);
                return;
            }
            benchFatal("connection %d: write: %s", c->id, strerror(errno));
        }
        size_t left = (size_t)n;
        while (left > 0) {
            struct iovec *v = &c->iov[c->iovpos];
            if (left >= v->iov_len) {
                left -= v->iov_len;
                c->iovpos++;
            } else {
                v->iov_base = (char *)v->iov_base + left;
                v->iov_len -= left;
                left = 0;
            }
        }
    }
    connSetWrite(c, 0);
}

/* ---- consuming replies ----------------------------------------------------------------- */

static void reportBadValue(conn *c, uint64_t key, const char *fmt, ...) {
    c->t->st.badvals++;
    if (atomic_fetch_add(&benchBadvalsReported, 1) >= BENCH_MAX_REPORTED) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "mooncake-benchmark: %s key:%zu:%0*llu: %s\n", benchCur.w->label, benchCur.vlen,
            BENCH_KEY_DIGITS, (unsigned long long)key, msg);
}

/* The level of a reply at which one key's result lies: the reply itself
 * for single-key commands, its elements for batch commands. */
static inline int keyDepth(void) {
    return (benchCur.w->flags & WL_BATCH) ? 1 : 0;
}

static inline uint64_t currentKey(conn *c) {
    long long i = (benchCur.w->flags & WL_BATCH) && c->depth > 0 ? c->idx[0] : 0;
    if (i >= benchCur.nkeys) i = benchCur.nkeys - 1;
    return c->keys[c->rslot * benchCur.nkeys + i];
}

/* n payload bytes of the current bulk at p: verify (with --check), count. */
static void payloadConsume(conn *c, const unsigned char *p, size_t n) {
    if (!c->bulk_bad) {   /* a value to verify (see connParse) */
        uint64_t k = currentKey(c);
        size_t done = 0, pos = (keyShift(k) + c->bulk_off) % BENCH_PATTERN_PERIOD;
        while (done < n) {
            size_t take = BENCH_PATTERN_PERIOD - pos;
            if (take > n - done) take = n - done;
            const unsigned char *got = p + done, *want = benchPattern + pos;
            if (memcmp(got, want, take) != 0) {
                size_t i = 0;
                while (got[i] == want[i]) i++;
                reportBadValue(c, k, "byte %zu is 0x%02x, expected 0x%02x",
                               c->bulk_off + done + i, got[i], want[i]);
                c->bulk_bad = 1;
                break;
            }
            done += take;
            pos = 0;
        }
    }
    c->bulk_off += n;
}

/* One reply (or array element) is complete. */
static void connElementDone(conn *c) {
    /* Close the arrays this element completes. */
    while (c->depth > 0) {
        int d = c->depth - 1;
        c->idx[d]++;
        if (--c->left[d] > 0) return;
        c->depth--;
    }
    /* A whole reply is in; an op of two commands waits for the second. */
    if (benchCur.w->cmd2 && c->rcmd == 0) {
        c->rcmd = 1;
        return;
    }
    c->rcmd = 0;
    /* The op of slot rslot is complete. */
    benchThread *t = c->t;
    atomic_store_explicit(&t->done, atomic_load_explicit(&t->done, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (t->now == 0) t->now = nowNs();
    if (benchCur.record) {
        histRecord(&t->st.lat, t->now - c->sent_ns);
        t->st.ops += (benchCur.w->flags & WL_PERKEY) ? (uint64_t)benchCur.nkeys : 1;
        if (benchCur.w->flags & WL_WRITE) t->st.bytes += (uint64_t)benchCur.nkeys * benchCur.vlen;
    }
    t->last_ns = t->now;
    if (++c->rslot < c->nslots) return;
    if (c->iovpos < c->iovcnt)
        benchFatal("connection %d: all replies arrived before the requests were sent", c->id);
    if (!benchConnIssue(c)) {
        c->idle = 1;
        c->nslots = 0;
        t->active--;
    }
}

static void connErrorReply(conn *c, const char *line, size_t len) {
    benchStats *st = &c->t->st;
    if (benchCur.record) st->errors++;
    if (st->firsterr[0] == '\0') {
        if (len >= sizeof(st->firsterr)) len = sizeof(st->firsterr) - 1;
        memcpy(st->firsterr, line, len);
        st->firsterr[len] = '\0';
    }
}

/* A nil reply or element: a miss where it stands for a key (a nil inside a
 * key's result, like GET.REPLICAS's checksum, is just a value). */
static void connNil(conn *c) {
    if (c->depth == keyDepth()) {
        if (benchCur.record) c->t->st.misses++;
        if (benchCfg.check && (benchCur.w->flags & (WL_READ | WL_REPLICAS)) && !benchCfg.keyspace)
            reportBadValue(c, currentKey(c), "missing (nil reply)");
    }
    connElementDone(c);
}

static long long parseLen(conn *c, const char *p, const char *end) {
    long long v = 0;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p == end) benchFatal("connection %d: protocol error: empty length", c->id);
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > (LLONG_MAX - 9) / 10)
            benchFatal("connection %d: protocol error: bad length", c->id);
        v = v * 10 + (*p - '0');
    }
    return neg ? -v : v;
}

/* Parses whatever complete replies (and payload parts) the read buffer
 * holds, consuming them in place. */
static void connParse(conn *c) {
    while (c->rpos < c->rlen) {
        if (c->nslots == 0 || c->rslot >= c->nslots)
            benchFatal("connection %d: unexpected data from the server", c->id);
        if (c->rstate == RS_PAYLOAD) {
            size_t avail = c->rlen - c->rpos;
            size_t take = c->bulk_len - c->bulk_off;
            if (take > avail) take = avail;
            payloadConsume(c, (unsigned char *)c->rbuf + c->rpos, take);
            c->rpos += take;
            if (c->bulk_off < c->bulk_len) return;
            c->rstate = RS_CRLF;
            continue;
        }
        if (c->rstate == RS_CRLF) {
            if (c->rlen - c->rpos < 2) return;
            if (c->rbuf[c->rpos] != '\r' || c->rbuf[c->rpos + 1] != '\n')
                benchFatal("connection %d: protocol error: bulk not ended by CRLF", c->id);
            c->rpos += 2;
            c->rstate = RS_LINE;
            connElementDone(c);
            continue;
        }
        char *line = c->rbuf + c->rpos;
        char *nl = memchr(line, '\n', c->rlen - c->rpos);
        if (!nl) {
            if (c->rpos == 0 && c->rlen == BENCH_RBUF_SIZE)
                benchFatal("connection %d: protocol error: reply line too long", c->id);
            return;
        }
        char *end = (nl > line && nl[-1] == '\r') ? nl - 1 : nl;
        c->rpos = (size_t)(nl + 1 - c->rbuf);
        int kd = keyDepth();
        switch (line[0]) {
        case ':':
            /* With --check, GET.REPLICAS must report the size PUT.START gave. */
            if (benchCfg.check && (benchCur.w->flags & WL_REPLICAS) && c->depth == kd + 1 &&
                c->idx[kd] == 1) {
                long long v = parseLen(c, line + 1, end);
                if (v != (long long)benchCur.vlen)
                    reportBadValue(c, currentKey(c), "size %lld, expected %zu", v, benchCur.vlen);
            }
            connElementDone(c);
            break;
        case '+':
        case ',':
        case '#':
        case '(':
            connElementDone(c);
            break;
        case '-':
            connErrorReply(c, line + 1, (size_t)(end - line - 1));
            connElementDone(c);
            break;
        case '_':
            connNil(c);
            break;
        case '$': {
            long long n = parseLen(c, line + 1, end);
            if (n < 0) {
                connNil(c);
                break;
            }
            int value = (benchCur.w->flags & WL_READ) && c->depth == kd;
            c->bulk_len = (size_t)n;
            c->bulk_off = 0;
            /* bulk_bad set: nothing to verify (not a value, or no --check). */
            c->bulk_bad = !(value && benchCfg.check && benchCur.vlen);
            if (value && benchCur.record) c->t->st.bytes += (uint64_t)n;
            if (!c->bulk_bad && c->bulk_len != benchCur.vlen) {
                reportBadValue(c, currentKey(c), "length %zu, expected %zu", c->bulk_len, benchCur.vlen);
                c->bulk_bad = 1;
            }
            c->rstate = n > 0 ? RS_PAYLOAD : RS_CRLF;
            break;
        }
        case '*':
        case '~':
        case '%': {
            long long n = parseLen(c, line + 1, end);
            if (n < 0) {
                connNil(c);
                break;
            }
            if (line[0] == '%') n *= 2;
            if (c->depth == 0 && (benchCur.w->flags & WL_BATCH) && n != benchCur.nkeys)
                benchFatal("connection %d: %s returned %lld elements, expected %d", c->id,
                           c->rcmd ? benchCur.w->cmd2 : benchCur.w->cmd, n, benchCur.nkeys);
            if (benchCfg.check && (benchCur.w->flags & WL_REPLICAS) && c->depth == kd && n < 4)
                reportBadValue(c, currentKey(c), "%lld elements, expected lease, size, checksum "
                               "and at least one replica", n);
            if (n == 0) {
                connElementDone(c);
                break;
            }
            if (c->depth == BENCH_MAX_DEPTH)
                benchFatal("connection %d: protocol error: arrays nested too deep", c->id);
            c->left[c->depth] = n;
            c->idx[c->depth] = 0;
            c->depth++;
            break;
        }
        default:
            benchFatal("connection %d: protocol error: unexpected byte 0x%02x", c->id,
                       (unsigned char)line[0]);
        }
    }
}

static void connClosed(conn *c, ssize_t n) {
    benchStats *st = &c->t->st;
    if (n == 0)
        benchFatal("connection %d: server closed the connection during %s%s%s", c->id,
                   benchCur.w->label, st->firsterr[0] ? ", last error: " : "", st->firsterr);
    benchFatal("connection %d: read: %s", c->id, strerror(errno));
}

void benchConnRead(conn *c) {
    for (;;) {
        ssize_t n;
        size_t asked;
        if (c->rstate == RS_PAYLOAD && c->rpos == c->rlen &&
            c->bulk_len - c->bulk_off >= BENCH_BIG_PAYLOAD && c->t->sinkcap) {
            /* The rest of a big payload: straight into the sink, and the
             * bytes after it (CRLF, next header) into the read buffer.
             * Payload is verified (or dropped) right after the read that
             * brought it, so the thread's sink is free again when this
             * returns, and one sink serves all its connections. */
            benchThread *t = c->t;
            size_t n0 = c->bulk_len - c->bulk_off;
            if (n0 > t->sinkcap) n0 = t->sinkcap;
            struct iovec iov[2] = {{t->sink, n0}, {c->rbuf, BENCH_RBUF_SIZE}};
            c->rpos = c->rlen = 0;
            asked = n0 + BENCH_RBUF_SIZE;
            n = readv(c->fd, iov, 2);
            if (n <= 0) goto noread;
            size_t k = (size_t)n < n0 ? (size_t)n : n0;
            payloadConsume(c, t->sink, k);
            c->rlen = (size_t)n - k;
            if (c->bulk_off == c->bulk_len) c->rstate = RS_CRLF;
        } else {
            if (c->rpos == c->rlen) {
                c->rpos = c->rlen = 0;
            } else if (c->rlen == BENCH_RBUF_SIZE) {
                /* Only a partial reply line (or CRLF) is left: payload is
                 * always consumed in place, so this moves a few bytes. */
                memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
                c->rlen -= c->rpos;
                c->rpos = 0;
            }
            asked = BENCH_RBUF_SIZE - c->rlen;
            n = read(c->fd, c->rbuf + c->rlen, asked);
            if (n <= 0) goto noread;
            c->rlen += (size_t)n;
        }
        c->t->now = 0;
        uint64_t batches = c->batches;
        connParse(c);
        /* Back to epoll once a new batch went out (its replies cannot be
         * there yet), the connection is done, or the socket looks drained
         * (a short read: trying again would most likely cost an EAGAIN). */
        if (c->idle || c->batches != batches || (size_t)n < asked) return;
        continue;
    noread:
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        connClosed(c, n);
    }
}
