/* mc_conn.c -- libmooncake's blocking RESP connection.
 *
 * Why blocking: a libmooncake call is one request/response exchange (or a
 * pipelined batch) made by the caller's thread, which has nothing else to do
 * meanwhile; blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO give timeouts for
 * free and cost one syscall per buffer. Connect alone is non-blocking, so
 * its own timeout holds.
 *
 * Why bulk bytes bypass the buffers: values are large. A command's large
 * arguments (the payload of SEG.WRITE) are referenced, not copied, and go
 * out with one sendmsg (gathered) from the caller's memory; a bulk reply that the caller
 * wants in its own buffer (SEG.READ) is read there directly, only the part
 * that arrived with the header being copied out of the read buffer.
 *
 * Unix sockets are read with recvmsg so that a file descriptor sent with a
 * reply (SHM.ATTACH) is picked up whichever read it arrives with.
 *
 * Why a reply is polled for before the thread sleeps: on these machines a
 * round trip through a sleeping reader costs ~29 us, most of it waking the
 * thread up, and a put is two round trips around one memcpy (44 us for
 * 1 MiB). Polling the socket for up to MC_CONN_SPIN_US (50 us; env
 * MC_SPIN_US, 0 turns it off) before a blocking read cut a 1 MiB shm put
 * from 86 to 67 us (p50) -- the reply is usually there within that window,
 * and the CPU spent is bounded by it.
 *
 * Why a reply has a budget as well as each wait (replyBegins): SO_RCVTIMEO
 * bounds one wait, so a peer that sends a byte of a reply every io_ms/2
 * held a call for as long as it liked. A reply has io_ms to come, and
 * another io_ms for each 64 KiB that came; no wait begins once that is
 * spent, so a reply that stops progressing fails within two io_ms. Not
 * one deadline for the whole call: a call moving gigabytes legitimately
 * takes longer than io_ms, and a rate (64 KiB per io_ms) is what tells a
 * slow peer from a stuck one. The clock is read once per read call, which
 * the spin above reads anyway. A write (writeAll) has the same budget:
 * SO_SNDTIMEO bounds one sendmsg, which returns what it sent by then.
 */
#include "mc_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "anet.h"
#include "mooncake.h"

#define MC_CONN_REF_MIN (16 * 1024)   /* args this large are sent in place */
#define MC_CONN_READ_CHUNK (64 * 1024)
#define MC_CONN_SPIN_US 50       /* see readSome; MC_SPIN_US overrides */
#define MC_CONN_MAX_DEPTH 8
#define MC_CONN_MAX_LINE (64 * 1024)
#define MC_CONN_MAX_ELEMENTS (1 << 24)
#define MC_CONN_MAX_BULK (512LL * 1024 * 1024) /* into the heap; SEG.READ goes to dst */

static void connFail(mcConn *c, const char *fmt, const char *detail) {
    c->broken = 1;
    c->garbled = !strncmp(fmt, "protocol error", 14);
    snprintf(c->err, sizeof(c->err), fmt, detail ? detail : "");
}

/* Splits "tcp://h:p", "h:p", "[v6]:p", "unix:///path" or "unix://@name". 0 or -1. */
static int parseUri(const char *uri, int *is_unix, char *host, size_t hostlen, int *port) {
    if (!strncmp(uri, "unix://", 7)) {
        *is_unix = 1;
        if (strlen(uri + 7) >= hostlen || uri[7] == '\0') return -1;
        strcpy(host, uri + 7);
        return 0;
    }
    *is_unix = 0;
    if (!strncmp(uri, "tcp://", 6)) uri += 6;
    const char *colon;
    if (*uri == '[') {
        const char *end = strchr(uri, ']');
        if (!end || end[1] != ':') return -1;
        if ((size_t)(end - uri - 1) >= hostlen) return -1;
        memcpy(host, uri + 1, (size_t)(end - uri - 1));
        host[end - uri - 1] = '\0';
        colon = end + 1;
    } else {
        colon = strrchr(uri, ':');
        if (!colon || colon == uri || (size_t)(colon - uri) >= hostlen) return -1;
        memcpy(host, uri, (size_t)(colon - uri));
        host[colon - uri] = '\0';
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

static int waitFd(int fd, short events, int timeout_ms) {
    struct pollfd pfd = {.fd = fd, .events = events};
    int rc;
    do rc = poll(&pfd, 1, timeout_ms > 0 ? timeout_ms : -1);
    while (rc < 0 && errno == EINTR);
    return rc;
}

/* Non-blocking connect with a deadline; the socket ends up blocking. */
static int connectWithTimeout(int fd, const struct sockaddr *sa, socklen_t salen, int timeout_ms) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -1;
    int rc = connect(fd, sa, salen);
    if (rc < 0 && errno == EINPROGRESS) {
        rc = waitFd(fd, POLLOUT, timeout_ms);
        if (rc == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0) return -1;
        if (soerr) {
            errno = soerr;
            return -1;
        }
        rc = 0;
    }
    if (rc < 0) return -1;
    return fcntl(fd, F_SETFL, flags);
}

static void setTimeouts(int fd, int ms) {
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void mcConnSetTimeout(mcConn *c, int io_timeout_ms) {
    if (c == NULL || c->io_timeout_ms == io_timeout_ms) return;
    setTimeouts(c->fd, io_timeout_ms); /* 0: none, as SO_RCVTIMEO reads it */
    c->io_timeout_ms = io_timeout_ms;
}

mcConn *mcConnOpen(const char *uri, int connect_timeout_ms, int io_timeout_ms, char *err, size_t errlen) {
    char host[256];
    int is_unix = 0, port = 0, fd = -1, local_unpaced = 0;
    mcConn *c = NULL;
    if (parseUri(uri, &is_unix, host, sizeof(host), &port) != 0) {
        snprintf(err, errlen, "bad address '%s' (want tcp://host:port or unix:///path)", uri);
        return NULL;
    }
    if (is_unix) {
        /* A path, or "@name" in the abstract namespace (hosted segments). */
        struct sockaddr_un sa;
        unsigned int salen;
        if (anetUnixAddress(&sa, &salen, host) != ANET_OK) {
            snprintf(err, errlen, "unix socket path too long: %s", host);
            return NULL;
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connectWithTimeout(fd, (struct sockaddr *)&sa, salen, connect_timeout_ms) < 0) {
            snprintf(err, errlen, "connect %s: %s", uri, strerror(errno));
            goto err;
        }
    } else {
        struct addrinfo hints, *res = NULL, *ai;
        char portstr[16];
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        snprintf(portstr, sizeof(portstr), "%d", port);
        int rc = getaddrinfo(host, portstr, &hints, &res);
        if (rc != 0) {
            snprintf(err, errlen, "resolve %s: %s", host, gai_strerror(rc));
            return NULL;
        }
        int saved = ECONNREFUSED;
        for (ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) continue;
            if (connectWithTimeout(fd, ai->ai_addr, ai->ai_addrlen, connect_timeout_ms) == 0) break;
            saved = errno;
            close(fd);
            fd = -1;
        }
        freeaddrinfo(res);
        if (fd < 0) {
            snprintf(err, errlen, "connect %s: %s", uri, strerror(saved));
            return NULL;
        }
        anetEnableTcpNoDelay(NULL, fd);
        local_unpaced = anetTuneLocalCongestion(fd); /* no pacing toward a same-host peer */
    }
    if (io_timeout_ms > 0) setTimeouts(fd, io_timeout_ms);
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    c->fd = fd;
    c->is_unix = is_unix;
    c->local_unpaced = local_unpaced;
    c->recv_fd = -1;
    c->io_timeout_ms = io_timeout_ms;
    const char *spin = getenv("MC_SPIN_US");
    c->spin_us = spin ? atoi(spin) : MC_CONN_SPIN_US;
    snprintf(c->uri, sizeof(c->uri), "%s", uri);
    return c;
err:
    if (fd >= 0) close(fd);
    free(c);
    return NULL;
}

void mcConnClose(mcConn *c) {
    if (c == NULL) return;
    if (c->fd >= 0) close(c->fd);
    if (c->recv_fd >= 0) close(c->recv_fd);
    free(c->rbuf);
    free(c->obuf);
    free(c);
}

/* ---- output -------------------------------------------------------------- */

static long long monoUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int obufReserve(mcConn *c, size_t more) {
    if (c->olen + more <= c->ocap) return 0;
    size_t cap = c->ocap ? c->ocap : 4096;
    while (cap < c->olen + more) cap *= 2;
    char *p = realloc(c->obuf, cap);
    if (p == NULL) return -1;
    c->obuf = p;
    c->ocap = cap;
    return 0;
}

static void obufAdd(mcConn *c, const void *p, size_t len) {
    if (obufReserve(c, len) != 0) {
        connFail(c, "out of memory%s", NULL);
        return;
    }
    memcpy(c->obuf + c->olen, p, len);
    c->olen += len;
}

void mcConnAppendHeader(mcConn *c, int argc) {
    char hdr[32];
    int n = snprintf(hdr, sizeof(hdr), "*%d\r\n", argc);
    obufAdd(c, hdr, (size_t)n);
}

/* One piece of an argument: large ones are referenced, small ones copied. */
static void appendPiece(mcConn *c, const void *p, size_t len) {
    if (len >= MC_CONN_REF_MIN && c->nrefs < MC_CONN_MAX_IOV) {
        c->refs[c->nrefs].obuf_off = c->olen;
        c->refs[c->nrefs].ptr = p;
        c->refs[c->nrefs].len = len;
        c->nrefs++;
        if (c->nrefs == MC_CONN_MAX_IOV) mcConnFlush(c); /* keep the table bounded */
    } else {
        obufAdd(c, p, len);
    }
}

void mcConnAppendArg(mcConn *c, const void *p, size_t len) {
    char hdr[32];
    int n = snprintf(hdr, sizeof(hdr), "$%zu\r\n", len);
    obufAdd(c, hdr, (size_t)n);
    appendPiece(c, p, len);
    obufAdd(c, "\r\n", 2);
}

void mcConnAppendArgV(mcConn *c, const struct iovec *iov, int iovcnt, size_t len) {
    char hdr[32];
    int n = snprintf(hdr, sizeof(hdr), "$%zu\r\n", len);
    obufAdd(c, hdr, (size_t)n);
    for (int i = 0; i < iovcnt && len; i++) {
        size_t take = iov[i].iov_len < len ? iov[i].iov_len : len;
        if (take) appendPiece(c, iov[i].iov_base, take);
        len -= take;
    }
    obufAdd(c, "\r\n", 2);
}

void mcConnAppend(mcConn *c, int argc, const char **argv, const size_t *lens) {
    mcConnAppendHeader(c, argc);
    for (int i = 0; i < argc; i++) mcConnAppendArg(c, argv[i], lens ? lens[i] : strlen(argv[i]));
}

int mcIovCut(const struct iovec *iov, int iovcnt, uint64_t off, uint64_t len, struct iovec *out, int outcap) {
    int n = 0;
    for (int i = 0; i < iovcnt && len && n < outcap; i++) {
        size_t l = iov[i].iov_len;
        if (off >= l) {
            off -= l;
            continue;
        }
        size_t take = l - (size_t)off < len ? l - (size_t)off : (size_t)len;
        out[n].iov_base = (char *)iov[i].iov_base + off;
        out[n++].iov_len = take;
        len -= take;
        off = 0;
    }
    return n;
}

/* The error line a peer wrote before it closed the connection (a server
 * at maxclients, a host at its connection cap): a write into the closed
 * socket fails with EPIPE or ECONNRESET, and the line, still in the receive
 * queue, is the only account of why. Not waited for; 1 if there was one. */
static int peerLastWords(mcConn *c, char *out, size_t len) {
    char buf[160];
    if (c->rpos < c->rlen) return 0; /* in step with replies: not a refusal */
    ssize_t n = recv(c->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (n < 2 || buf[0] != '-') return 0;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    snprintf(out, len, "%s", buf + 1);
    return 1;
}

/* Writes all of iov[0..n), advancing through partial writes, under the
 * same budget as a reply (see the top): SO_SNDTIMEO bounds one sendmsg,
 * so a peer that takes a few KiB every io_ms/2 held a large write for as
 * long as it liked. */
static int writeAll(mcConn *c, struct iovec *iov, int n) {
    long long until = c->io_timeout_ms > 0 ? monoUs() + (long long)c->io_timeout_ms * 1000 : 0;
    size_t taken = 0;
    while (n > 0) {
        if (until && monoUs() >= until) {
            c->timed_out = 1;
            c->broken = 1;
            c->garbled = 0;
            snprintf(c->err, sizeof(c->err), "write: timed out (the peer took less than %d KiB in %d ms)",
                     MC_CONN_READ_CHUNK / 1024, c->io_timeout_ms);
            return MC_ERR_IO;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n)};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EPIPE;
            break;
        }
        anetIovAdvance(&iov, &n, (size_t)w);
        if (until && (taken += (size_t)w) >= MC_CONN_READ_CHUNK) {
            until = monoUs() + (long long)c->io_timeout_ms * 1000; /* progress earns more */
            taken = 0;
        }
    }
    if (n == 0) return MC_OK;
    int e = errno;
    char said[160];
    c->timed_out = e == EAGAIN;
    if ((e == EPIPE || e == ECONNRESET) && peerLastWords(c, said, sizeof(said))) {
        c->broken = 1;
        snprintf(c->err, sizeof(c->err), "write: %s (the peer closed the connection after replying: %s)", strerror(e), said);
        return MC_ERR_IO;
    }
    connFail(c, "write: %s", e == EAGAIN ? "timed out" : strerror(e));
    return MC_ERR_IO;
}

int mcConnFlush(mcConn *c) {
    if (c->broken) return MC_ERR_IO;
    struct iovec iov[2 * MC_CONN_MAX_IOV + 1];
    int n = 0;
    size_t pos = 0;
    for (int i = 0; i < c->nrefs; i++) {
        if (c->refs[i].obuf_off > pos) {
            iov[n].iov_base = c->obuf + pos;
            iov[n++].iov_len = c->refs[i].obuf_off - pos;
            pos = c->refs[i].obuf_off;
        }
        iov[n].iov_base = (void *)c->refs[i].ptr;
        iov[n++].iov_len = c->refs[i].len;
    }
    if (c->olen > pos) {
        iov[n].iov_base = c->obuf + pos;
        iov[n++].iov_len = c->olen - pos;
    }
    c->olen = 0;
    c->nrefs = 0;
    return writeAll(c, iov, n);
}

/* ---- input --------------------------------------------------------------- */

/* One read into iov[0..n); keeps any fd that comes along. >0 bytes, or an
 * MC_ERR. */
static ssize_t readSomeV(mcConn *c, struct iovec *iov, int iovcnt) {
    long long now = monoUs();
    /* The reply's budget (replyBegins) is spent: no more waiting for it. */
    if (c->reply_until_us && now >= c->reply_until_us) {
        c->timed_out = 1;
        snprintf(c->err, sizeof(c->err), "read: timed out (less than %d KiB of the reply came in %d ms)",
                 MC_CONN_READ_CHUNK / 1024, c->io_timeout_ms);
        c->broken = 1;
        c->garbled = 0;
        return MC_ERR_IO;
    }
    long long spin_until = c->spin_us > 0 ? now + c->spin_us : 0;
    for (;;) {
        ssize_t r;
        int flags = spin_until ? MSG_DONTWAIT : 0;
        if (c->is_unix) {
            union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
            } u;
            struct msghdr msg;
            memset(&msg, 0, sizeof(msg));
            msg.msg_iov = iov;
            msg.msg_iovlen = (size_t)iovcnt;
            msg.msg_control = u.buf;
            msg.msg_controllen = sizeof(u.buf);
            r = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | flags);
            if (r > 0) {
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
                    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(cm), sizeof(int));
                        if (c->recv_fd >= 0) close(c->recv_fd);
                        c->recv_fd = fd;
                    }
                }
            }
        } else if (iovcnt == 1) {
            r = recv(c->fd, iov[0].iov_base, iov[0].iov_len, flags);
        } else {
            struct msghdr msg;
            memset(&msg, 0, sizeof(msg));
            msg.msg_iov = iov;
            msg.msg_iovlen = (size_t)iovcnt;
            r = recvmsg(c->fd, &msg, flags);
        }
        if (r > 0) {
            if (c->reply_until_us && (c->reply_got += (size_t)r) >= MC_CONN_READ_CHUNK) {
                c->reply_until_us = monoUs() + (long long)c->io_timeout_ms * 1000; /* progress earns more */
                c->reply_got = 0;
            }
            return r;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && flags && errno == EAGAIN) {
            /* Nothing yet: poll a little longer, then sleep in a blocking read. */
            if (monoUs() >= spin_until) spin_until = 0;
            continue;
        }
        c->timed_out = r < 0 && errno == EAGAIN;
        connFail(c, "read: %s", r == 0 ? "connection closed" : errno == EAGAIN ? "timed out" : strerror(errno));
        return MC_ERR_IO;
    }
}

/* A reply is about to be read: it has io_ms to come, and another io_ms
 * for each 64 KiB that came (why: the top of the file). */
static void replyBegins(mcConn *c) {
    c->reply_until_us = c->io_timeout_ms > 0 ? monoUs() + (long long)c->io_timeout_ms * 1000 : 0;
    c->reply_got = 0;
}

static ssize_t readSome(mcConn *c, void *dst, size_t len) {
    struct iovec iov = {.iov_base = dst, .iov_len = len};
    return readSomeV(c, &iov, 1);
}

/* Makes at least `need` unread bytes available in rbuf. */
static int fill(mcConn *c, size_t need) {
    if (c->rlen - c->rpos >= need) return MC_OK;
    if (c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    while (c->rlen < need) {
        /* Grown as the bytes arrive, never to what a header announced: a
         * peer that announces a 512 MiB bulk and sends ten bytes of it
         * made the client allocate the 512 MiB, and keep it until the
         * connection was closed. Doubling keeps the copies linear. */
        if (c->rcap - c->rlen < MC_CONN_READ_CHUNK / 2) {
            size_t cap = c->rcap ? c->rcap * 2 : MC_CONN_READ_CHUNK;
            char *p = realloc(c->rbuf, cap);
            if (p == NULL) {
                connFail(c, "out of memory%s", NULL);
                return MC_ERR_NOMEM;
            }
            c->rbuf = p;
            c->rcap = cap;
        }
        ssize_t r = readSome(c, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (r < 0) return (int)r;
        c->rlen += (size_t)r;
    }
    return MC_OK;
}

/* The next CRLF-terminated line (without the CRLF), NUL-terminated in place. */
static char *readLine(mcConn *c, size_t *len) {
    size_t scanned = 0;
    for (;;) {
        char *start = c->rbuf ? c->rbuf + c->rpos : NULL;
        size_t avail = c->rlen - c->rpos;
        if (start && avail > scanned) {
            char *nl = memchr(start + scanned, '\n', avail - scanned);
            if (nl) {
                if (nl == start || nl[-1] != '\r') {
                    connFail(c, "protocol error: line without CR%s", NULL);
                    return NULL;
                }
                nl[-1] = '\0';
                *len = (size_t)(nl - 1 - start);
                c->rpos += (size_t)(nl + 1 - start);
                return start;
            }
            scanned = avail;
        }
        if (scanned > MC_CONN_MAX_LINE) {
            connFail(c, "protocol error: line too long%s", NULL);
            return NULL;
        }
        if (fill(c, avail + 1) != MC_OK) return NULL;
    }
}

/* s[0..len) as a RESP integer: an optional '-', then decimal digits with
 * no leading zero, in range, and nothing else -- the only form a server
 * sends. strtoll took " 5", "+5", "007" and "-0" as well, and stopped at a
 * zero byte inside the line: a length or a count read from bytes the peer
 * did not send as one (hiredis refuses them all). */
static int parseLL(const char *s, size_t len, long long *v) {
    size_t i = len && s[0] == '-';
    if (i == len || s[i] < '0' || s[i] > '9' || (s[i] == '0' && len != 1)) return 0;
    unsigned long long u = 0, lim = i ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (u > (lim - d) / 10) return 0;
        u = u * 10 + d;
    }
    *v = s[0] != '-' ? (long long)u : u > (unsigned long long)LLONG_MAX ? LLONG_MIN : -(long long)u;
    return 1;
}

/* A reply's text, all n bytes of it, NUL-terminated: a peer may put a NUL
 * inside a line, which strdup would stop at, leaving len to promise bytes
 * the copy lacks. */
static char *textCopy(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p == NULL) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static mcReply *readReplyDepth(mcConn *c, int depth) {
    if (depth > MC_CONN_MAX_DEPTH) {
        connFail(c, "protocol error: nesting too deep%s", NULL);
        return NULL;
    }
    size_t len;
    char *line = readLine(c, &len);
    if (line == NULL) return NULL;
    mcReply *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        connFail(c, "out of memory%s", NULL);
        return NULL;
    }
    long long n = 0;
    char t = line[0];
    switch (t) {
    case '+':
    case '-':
        r->type = t == '+' ? MCR_STATUS : MCR_ERROR;
        if ((r->str = textCopy(line + 1, len - 1)) == NULL) goto oom;
        r->len = len - 1;
        return r;
    case ':':
        r->type = MCR_INT;
        if (!parseLL(line + 1, len - 1, &r->integer)) goto proto;
        return r;
    case '_':
        if (len != 1) goto proto;
        r->type = MCR_NIL;
        return r;
    case '#':
        /* "#t" or "#f": anything else was read as false. */
        if (len != 2 || (line[1] != 't' && line[1] != 'f')) goto proto;
        r->type = MCR_INT;
        r->integer = line[1] == 't';
        return r;
    case ',':
        r->type = MCR_BULK; /* a double: keep its text */
        if ((r->str = textCopy(line + 1, len - 1)) == NULL) goto oom;
        r->len = len - 1;
        return r;
    case '$':
    case '=':
        if (!parseLL(line + 1, len - 1, &n) || n < -1 || n > MC_CONN_MAX_BULK) goto proto;
        if (n == -1) {
            r->type = MCR_NIL;
            return r;
        }
        r->type = MCR_BULK;
        if (fill(c, (size_t)n + 2) != MC_OK) goto fail;
        if ((r->str = textCopy(c->rbuf + c->rpos, (size_t)n)) == NULL) goto oom;
        r->len = (size_t)n;
        if (c->rbuf[c->rpos + n] != '\r' || c->rbuf[c->rpos + n + 1] != '\n') goto proto;
        /* A verbatim string starts with its three-letter format and ':'. */
        if (t == '=' && (n < 4 || r->str[3] != ':')) goto proto;
        c->rpos += (size_t)n + 2;
        return r;
    case '*':
    case '%':
    case '~':
        if (!parseLL(line + 1, len - 1, &n) || n < -1 || n > MC_CONN_MAX_ELEMENTS) goto proto;
        if (n == -1) {
            r->type = MCR_NIL;
            return r;
        }
        if (t == '%') n *= 2;
        r->type = MCR_ARRAY;
        /* The element table grows as elements arrive (each is 3 bytes at
         * least), for the reason fill() grows: a header announcing 16M
         * elements cost 128 MiB before any came. */
        size_t cap = n < 16 ? (size_t)n + 1 : 16;
        r->element = calloc(cap, sizeof(mcReply *));
        if (r->element == NULL) goto oom;
        for (long long i = 0; i < n; i++) {
            if (r->elements + 1 >= cap) {
                size_t ncap = cap * 2 > (size_t)n + 1 ? (size_t)n + 1 : cap * 2;
                mcReply **e = realloc(r->element, ncap * sizeof(mcReply *));
                if (e == NULL) goto oom;
                r->element = e;
                cap = ncap;
            }
            r->element[i] = readReplyDepth(c, depth + 1);
            if (r->element[i] == NULL) goto fail;
            r->elements++;
        }
        r->element[r->elements] = NULL;
        return r;
    default:
        goto proto;
    }
proto:
    connFail(c, "protocol error: unexpected reply%s", NULL);
    goto fail;
oom:
    connFail(c, "out of memory%s", NULL);
fail:
    mcReplyFree(r);
    return NULL;
}

/* Drops the replies of commands sent with mcConnSendNoReply, which come
 * before any reply a caller waits for. */
static int skipDiscarded(mcConn *c) {
    while (c->discard > 0 && !c->broken) {
        c->discard--;
        replyBegins(c);
        mcReply *r = readReplyDepth(c, 0);
        if (r == NULL) return MC_ERR_IO;
        mcReplyFree(r);
    }
    return c->broken ? MC_ERR_IO : MC_OK;
}

static mcReply *readReply(mcConn *c) {
    if (c->broken || skipDiscarded(c) != MC_OK) return NULL;
    return readReplyDepth(c, 0);
}

mcReply *mcConnRead(mcConn *c) {
    if (c->broken || skipDiscarded(c) != MC_OK) return NULL;
    replyBegins(c);
    return readReplyDepth(c, 0);
}

void mcConnAppendNoReply(mcConn *c, int argc, const char **argv, const size_t *lens) {
    mcConnAppend(c, argc, argv, lens);
    c->discard++;
}

/* The header of a reply expected to start with type (`$` or `*`): its
 * length (>= -1), or -1 with *err_reply set to the whole reply that came
 * instead, or MC_ERR_* on I/O or protocol failure. */
static long long readHeader(mcConn *c, char type, mcReply **err_reply) {
    *err_reply = NULL;
    if (c->broken || skipDiscarded(c) != MC_OK) return MC_ERR_IO;
    replyBegins(c);
    if (fill(c, 1) != MC_OK) return MC_ERR_IO;
    if (c->rbuf[c->rpos] != type) {
        mcReply *r = readReply(c);
        if (r == NULL) return MC_ERR_IO;
        *err_reply = r;
        return -1;
    }
    size_t len;
    char *line = readLine(c, &len);
    long long n;
    if (line == NULL) return MC_ERR_IO;
    if (!parseLL(line + 1, len - 1, &n) || n < -1 || (type == '*' && n > MC_CONN_MAX_ELEMENTS)) {
        connFail(c, type == '$' ? "protocol error: bad bulk length%s" : "protocol error: bad array length%s", NULL);
        return MC_ERR_PROTOCOL;
    }
    return n;
}

/* Reads per call at most this many pieces of a scattered bulk: a window
 * moved along the caller's list, so no copy of a long list is made. */
#define MC_CONN_READ_IOV 64

long long mcConnReadBulkIntoV(mcConn *c, const struct iovec *iov, int iovcnt, mcReply **err_reply) {
    long long n = readHeader(c, '$', err_reply);
    if (n < -1 || *err_reply) return n;
    if (n == -1) {
        *err_reply = calloc(1, sizeof(mcReply));
        if (*err_reply == NULL) return MC_ERR_NOMEM;
        (*err_reply)->type = MCR_NIL;
        return -1;
    }
    size_t cap = 0;
    for (int i = 0; i < iovcnt; i++) cap += iov[i].iov_len;
    if ((unsigned long long)n > cap) {
        connFail(c, "bulk reply larger than the buffer%s", NULL);
        return MC_ERR_TOO_SMALL;
    }
    /* What came with the header is copied out of rbuf; the rest is read
     * straight into the caller's buffers. */
    size_t got = 0;
    for (int i = 0; i < iovcnt && got < (size_t)n && c->rpos < c->rlen; i++) {
        size_t take = iov[i].iov_len;
        if (take > (size_t)n - got) take = (size_t)n - got;
        if (take > c->rlen - c->rpos) take = c->rlen - c->rpos;
        memcpy(iov[i].iov_base, c->rbuf + c->rpos, take);
        c->rpos += take;
        got += take;
    }
    while (got < (size_t)n) {
        struct iovec win[MC_CONN_READ_IOV];
        int w = mcIovCut(iov, iovcnt, got, (size_t)n - got, win, MC_CONN_READ_IOV);
        ssize_t r = readSomeV(c, win, w);
        if (r < 0) return MC_ERR_IO;
        got += (size_t)r;
    }
    if (fill(c, 2) != MC_OK) return MC_ERR_IO;
    if (c->rbuf[c->rpos] != '\r' || c->rbuf[c->rpos + 1] != '\n') {
        connFail(c, "protocol error: bulk without CRLF%s", NULL);
        return MC_ERR_PROTOCOL;
    }
    c->rpos += 2;
    return n;
}

long long mcConnReadBulkInto(mcConn *c, void *dst, size_t cap, mcReply **err_reply) {
    struct iovec iov = {.iov_base = dst, .iov_len = cap};
    return mcConnReadBulkIntoV(c, &iov, 1, err_reply);
}

long long mcConnReadArrayLen(mcConn *c, mcReply **err_reply) {
    long long n = readHeader(c, '*', err_reply);
    if (n == -1 && *err_reply == NULL) { /* a nil array: not what was asked */
        connFail(c, "protocol error: nil array%s", NULL);
        return MC_ERR_PROTOCOL;
    }
    return n;
}

mcReply *mcConnCommand(mcConn *c, int argc, const char **argv, const size_t *lens) {
    mcConnAppend(c, argc, argv, lens);
    if (mcConnFlush(c) != MC_OK) return NULL;
    return mcConnRead(c);
}

int mcConnAuth(mcConn *c, const char *user, const char *password) {
    int has_user = user && user[0], has_pass = password && password[0];
    if (!has_user && !has_pass) return MC_OK;
    /* AUTH user pass, or AUTH pass (user default). A user without a
     * password still authenticates: a nopass user takes any. */
    const char *argv[3] = {"AUTH", has_user ? user : password, has_pass ? password : ""};
    mcReply *r = mcConnCommand(c, has_user ? 3 : 2, argv, NULL);
    if (r == NULL) return MC_ERR_IO;
    int rc = MC_OK;
    if (r->type == MCR_ERROR) {
        snprintf(c->err, sizeof(c->err), "%s", r->str);
        rc = MC_ERR_AUTH;
    }
    mcReplyFree(r);
    return rc;
}

int mcConnAdmit(mcConn *c, uint64_t seg, const char *token) {
    if (token == NULL || token[0] == '\0') return MC_OK;
    for (int i = 0; i < c->nadmitted; i++)
        if (c->admitted[i] == seg) return MC_OK;
    char idbuf[24];
    snprintf(idbuf, sizeof(idbuf), "%llu", (unsigned long long)seg);
    const char *argv[3] = {"SEG.AUTH", idbuf, token};
    mcReply *r = mcConnCommand(c, 3, argv, NULL);
    if (r == NULL) return MC_ERR_IO;
    /* A host older than tokens checks nothing ("unknown command"). */
    int rc = MC_OK;
    if (r->type == MCR_ERROR && !strstr(r->str, "unknown command")) {
        snprintf(c->err, sizeof(c->err), "%s", r->str);
        rc = MC_ERR_AUTH;
    }
    mcReplyFree(r);
    if (rc != MC_OK) return rc;
    c->admitted[c->admitted_next] = seg;
    c->admitted_next = (c->admitted_next + 1) % MC_CONN_ADMITTED;
    if (c->nadmitted < MC_CONN_ADMITTED) c->nadmitted++;
    return MC_OK;
}

void mcConnForgetAdmissions(mcConn *c) { c->nadmitted = c->admitted_next = 0; }

void mcReplyFree(mcReply *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->elements; i++) mcReplyFree(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

int mcReplyIsError(const mcReply *r, const char *code) {
    size_t n = strlen(code);
    return r && r->type == MCR_ERROR && r->len >= n && !strncmp(r->str, code, n) &&
           (r->str[n] == ' ' || r->str[n] == '\0');
}

long long mcReplyInt(const mcReply *r, int *ok) {
    long long v = 0;
    *ok = 0;
    if (r == NULL) return 0;
    if (r->type == MCR_INT) {
        *ok = 1;
        return r->integer;
    }
    if ((r->type == MCR_BULK || r->type == MCR_STATUS) && parseLL(r->str, r->len, &v)) *ok = 1;
    return v;
}

int mcConnPeerClosed(mcConn *c) {
    if (c == NULL || c->broken) return 1;
    struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0; /* nothing to say: open */
    char b;
    int closed = (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) ||
                 ((p.revents & POLLIN) && recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
    if (closed) c->broken = 1;
    return closed;
}
