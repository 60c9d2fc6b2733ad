/* mc_host.c -- serving a segment that a client process hosts.
 *
 * A process that contributes memory (mc_mount) must let other clients move
 * bytes in and out of it without the metadata server in the path. This is
 * the smallest server that does that: a TCP and a unix listener, and one
 * thread per connection speaking a subset of RESP -- PING, AUTH, QUIT,
 * SEG.WRITE, SEG.READ, their vector forms SEG.WRITEV/SEG.READV (batches of
 * small values) and SHM.ATTACH.
 *
 * Why a thread per connection and blocking I/O: peers are few (the clients
 * of one inference cluster, each with a connection or two) and every
 * request is a bulk transfer, so the cost that matters is syscalls per byte,
 * not connections per thread. A blocking read straight into segment memory
 * is one syscall per socket buffer, and the threads let transfers from
 * several peers proceed in parallel on several cores.
 *
 * Slices: against a cluster the memory is mounted as one segment per
 * primary (mc_mount.c), each a slice [off, off+len) of the one allocation
 * with its own segment id, because every shard allocates in the segments
 * it knows. A request names the slice by its id and its offset counts from
 * the slice's start, so each shard's allocator sees an ordinary segment.
 * SHM.ATTACH of a slice hands out the whole memfd with the slice's offset
 * as a third reply element ([id, size, offset]); the reader maps just that
 * range. One memfd, one allocation, one RDMA registration; nothing to keep
 * per slice but three numbers. A lone slice covering all the memory
 * answers [id, size] exactly as a non-cluster mount always did.
 *
 * What is checked: the segment id, that [offset, offset+len) lies inside
 * its slice (no overflow), argument counts and lengths, and who asks.
 * What is not: whether the range is a live extent -- the host does not see
 * the metadata. That trust is the same as a registered RDMA region's, and
 * admission is what keeps strangers out (docs/PROTOCOL.md, "Segment
 * tokens"). A connection reaches a slice once it has presented
 *   - the slice's token (SEG.AUTH seg-id token): a random capability this
 *     host proposes in each MOUNT, which the server binds to the segment
 *     and hands out (SEGMENT.TOKEN) only to users who may see it -- the
 *     server's own relayed reads and libmooncake readers use it; or
 *   - the host's own user and password (AUTH), those it connected to the
 *     server with, when it has a password.
 * On every transport, SHM.ATTACH included (it hands out the whole memfd).
 * Before that only PING (the server's liveness probe), AUTH, SEG.AUTH and
 * QUIT are answered, and a connection that has not been admitted within
 * HOST_PREAUTH_MS of its accept is closed, whatever it sends meanwhile. A remount proposes a new token (the
 * old one stays good until the server has answered the MOUNT, so readers
 * never meet a token that neither side knows), and connections admitted
 * by a token that is no longer good must present the new one.
 *
 * Bounds: at most max_conns connections (threads) at once -- one more gets
 * an -ERR line and is closed -- and at most max_buffered bytes of SEG.WRITEV
 * payload buffered across all of them (one over it is refused and closed).
 * Only admitted connections buffer anything: a vector's segment id comes
 * before its payloads and is checked first.
 * Payloads of refused writes are read and dropped so the stream stays in
 * step, and nothing is written. A SEG.WRITEV is buffered whole (at most
 * HOST_MAX_VEC_BYTES) and every range checked before any is written, so a
 * refused vector writes nothing either.
 *
 * Timeouts: a connection holds a thread and one of max_conns slots, so
 * none may hold them for nothing. Every read waits in poll (hostRead) for
 * as long as the connection's state allows, and the connection ends when
 * that runs out: before admission, until HOST_PREAUTH_MS after the accept;
 * an admitted peer between requests, HOST_IDLE_MS (its next request's
 * first byte ends the wait); once a request started, HOST_REQUEST_MS for
 * every HOST_BUF of it, so a large payload at any useful rate goes on and
 * a peer that stalls or trickles a byte now and then does not. Sends have
 * SO_SNDTIMEO of HOST_REQUEST_MS: a peer that stops reading a SEG.READ's
 * bytes is a stall too. The close is silent, as a server's idle timeout:
 * libmooncake sees its cached data connection closed by the peer at its
 * next call (mcConnPeerClosed, mc_xfer.c), drops it and connects afresh,
 * and a transfer that meets the close retries once on a new connection;
 * the server's relay keeps idle host connections 10 s only. The server's
 * liveness probe sends PING at once, so it never meets a timeout.
 *
 * The unix listener is an abstract socket (unix://@mooncake-seg-PID-N-RAND):
 * Linux's namespace of socket names that are not files. A file in /tmp
 * outlived every host that died without mcHostStop -- a SIGKILLed inference
 * worker, a crash, a test killing its helper -- one stale socket per death,
 * and nothing could tell a stale one from a live one but trying it. An
 * abstract name is released by the kernel with the last descriptor, however
 * the process ends. The random part keeps names apart across pid namespaces
 * that share a network namespace (containers of one pod). Peers that only
 * know paths (older libmooncake) fail to connect to "@..." and use tcp://,
 * as they would for any unreachable unix endpoint; paths from older hosts
 * keep working here. Who may connect: see unixPeerAllowed.
 */
#include "mc_host.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/random.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "anet.h"

#define HOST_MAX_ARGS 8
#define HOST_MAX_SMALL_ARG 4096
#define HOST_MAX_VEC_RANGES 1024               /* per SEG.WRITEV/SEG.READV */
#define HOST_MAX_VEC_BYTES (64 * 1024 * 1024)  /* payload one SEG.WRITEV may buffer */
#define HOST_NUM_ARG 32                        /* ids, offsets, lengths */
#define HOST_BUF (64 * 1024)
#define HOST_MAX_CONNS 512                     /* default cap on connections (threads) */
#define HOST_MAX_BUFFERED (256 * 1024 * 1024)  /* default SEG.WRITEV buffering, all connections */
#define HOST_PREAUTH_MS 10000                  /* to present a token or credentials */
#define HOST_IDLE_MS 300000                    /* an admitted peer between requests */
#define HOST_REQUEST_MS 30000                  /* a request started: per HOST_BUF of it, or a send stall */
#define HOST_TOKEN_MIN 32
#define HOST_TOKEN_MAX 128

typedef struct hostConn {
    struct mcHost *h;
    int fd;
    int is_unix;
    int authed;              /* AUTH with the host's credentials: every slice */
    int admitted_any;        /* some slice admitted it: the idle timeout from now on */
    long long preauth_until; /* monotonic ms: closed then unless admitted */
    int in_request;          /* a request's first byte has arrived */
    long long req_until;     /* monotonic ms: closed then unless HOST_BUF more arrived */
    size_t req_progress;     /* bytes of the request since req_until was last set */
    uint32_t *admit;         /* per slice: generation of the token it presented, 0: none */
    pthread_t thread;
    int done;                /* the thread has finished: join and free it */
    char buf[HOST_BUF];
    size_t len, pos;
    struct hostConn *next;
} hostConn;

typedef struct hostSlice {
    uint64_t id;             /* 0 until MOUNT answered; changed by a remount (atomic) */
    size_t off, size;        /* fixed at start */
    /* Tokens (under the host's lock; gen/oldgen also read atomically): the
     * current one, and the one it replaced until the MOUNT that proposed
     * the current one was answered. A generation names each token. */
    char tok[HOST_TOKEN_MAX + 1], oldtok[HOST_TOKEN_MAX + 1];
    uint32_t gen, oldgen;    /* 0: none */
} hostSlice;

struct mcHost {
    char *mem;
    size_t size;
    int memfd;
    char *user;              /* NULL: "default" */
    char *password;
    int nslices;
    hostSlice *slices;
    int tcp_fd, unix_fd, wake[2];
    char tcp_ep[300], unix_path[108];
    pthread_t accept_thread;
    pthread_mutex_t lock;    /* conns, nconns, stopping, slice tokens */
    hostConn *conns;
    int nconns, max_conns;   /* live connections (threads), and the cap */
    size_t buffered, max_buffered; /* SEG.WRITEV payload buffered now (atomic), and the cap */
    int preauth_ms, idle_ms, request_ms; /* the timeouts (HOST_*_MS; MC_HOST_*_MS for tests) */
    uint32_t next_gen;
    int stopping;
};

void mcHostAddrString(const struct sockaddr_storage *sa, char *buf, size_t len) {
    if (sa->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
    else
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
}

/* ---- one connection ------------------------------------------------------ */

static int sendAll(int fd, const void *p, size_t len) {
    struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
    return anetSendAll(fd, &iov, 1);
}

static int reply(hostConn *c, const char *s) { return sendAll(c->fd, s, strlen(s)); }

static long long monoMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A request's first byte arrived (read now, or already buffered). */
static void requestStarted(hostConn *c) {
    if (c->in_request) return;
    c->in_request = 1;
    c->req_until = monoMs() + c->h->request_ms;
    c->req_progress = 0;
}

/* One read of at most len bytes, after waiting no longer than the
 * connection's state allows (see the top: "Timeouts"); 0 on EOF, -1 on an
 * error or when the wait ran out: either way the connection ends. */
static ssize_t hostRead(hostConn *c, char *dst, size_t len) {
    long long idle_until = monoMs() + c->h->idle_ms; /* once: an early wake-up must not extend it */
    for (;;) {
        long long now = monoMs(), until;
        if (!c->admitted_any) until = c->preauth_until;
        else if (c->in_request) until = c->req_until;
        else until = idle_until;
        if (until <= now) return -1;
        /* Bytes already here (a payload streaming in) are read without a
         * poll first: a syscall per read saved on the data path. */
        ssize_t r = recv(c->fd, dst, len, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            int rc = poll(&p, 1, (int)(until - now));
            if (rc < 0 && errno != EINTR) return -1;
            continue; /* readable, woken early, or out of time: the top decides */
        }
        if (r <= 0) return r;
        requestStarted(c);
        /* Progress earns more time, a trickle does not. */
        if ((c->req_progress += (size_t)r) >= HOST_BUF) {
            c->req_progress = 0;
            c->req_until = monoMs() + c->h->request_ms;
        }
        return r;
    }
}

/* Reads into dst exactly len bytes, buffered ones first; dst NULL drops them. */
static int readExact(hostConn *c, char *dst, size_t len) {
    size_t have = c->len - c->pos, take = have < len ? have : len;
    if (dst) memcpy(dst, c->buf + c->pos, take);
    c->pos += take;
    len -= take;
    if (dst) dst += take;
    while (len) {
        ssize_t r;
        if (dst) r = hostRead(c, dst, len);
        else r = hostRead(c, c->buf, len < sizeof(c->buf) ? len : sizeof(c->buf));
        if (r <= 0) return -1;
        len -= (size_t)r;
        if (dst) dst += r;
    }
    return 0;
}

/* A CRLF line of at most 64 bytes, NUL-terminated in lbuf. */
static int readLine(hostConn *c, char *lbuf, size_t cap) {
    size_t n = 0;
    for (;;) {
        if (c->pos == c->len) {
            ssize_t r = hostRead(c, c->buf, sizeof(c->buf));
            if (r <= 0) return -1;
            c->len = (size_t)r;
            c->pos = 0;
        }
        char ch = c->buf[c->pos++];
        if (ch == '\n') {
            if (n == 0 || lbuf[n - 1] != '\r') return -1;
            lbuf[n - 1] = '\0';
            return 0;
        }
        if (n + 1 >= cap) return -1;
        lbuf[n++] = ch;
    }
}

static int parseLen(const char *s, char prefix, long long max, long long *out) {
    if (s[0] != prefix) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s + 1, &end, 10);
    if (s[1] == '\0' || *end || errno || v < 0 || v > max) return -1;
    *out = v;
    return 0;
}

static int parseU64(const char *s, uint64_t *out) {
    if (*s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

/* The slice mounted as segment id, or NULL. */
static hostSlice *sliceOf(mcHost *h, uint64_t id) {
    if (id == 0) return NULL;
    for (int i = 0; i < h->nslices; i++)
        if (__atomic_load_n(&h->slices[i].id, __ATOMIC_ACQUIRE) == id) return &h->slices[i];
    return NULL;
}

/* 1 if a and b are the same string, in time that depends on their lengths
 * only (not on where they differ). */
static int sameSecret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)(a[i] ^ b[lb ? i % lb : 0]);
    return diff == 0;
}

#define NOAUTH_REPLY                                                                                   \
    "-NOAUTH present the segment's token first (SEG.AUTH seg-id token; SEGMENT.TOKEN on the server "  \
    "gives it), or AUTH with the host's credentials\r\n"

/* Whether c may touch sl: its token (still good), or the host's credentials. */
static int admitted(const hostConn *c, const hostSlice *sl) {
    if (c->authed) return 1;
    uint32_t g = c->admit[sl - c->h->slices];
    return g && (g == __atomic_load_n(&sl->gen, __ATOMIC_ACQUIRE) || g == __atomic_load_n(&sl->oldgen, __ATOMIC_ACQUIRE));
}

/* The slice idarg names if c is admitted to it; else NULL and *err. */
static hostSlice *admittedSlice(hostConn *c, const char *idarg, const char **err) {
    uint64_t id;
    hostSlice *sl = parseU64(idarg, &id) == 0 ? sliceOf(c->h, id) : NULL;
    *err = sl == NULL ? "-ERR no such segment\r\n" : !admitted(c, sl) ? NOAUTH_REPLY : NULL;
    return *err ? NULL : sl;
}

/* The range check every transfer passes: admission, id, bounds, no overflow. */
static const char *checkRange(hostConn *c, const char *idarg, const char *offarg, uint64_t len, char **ptr) {
    uint64_t id, off;
    if (parseU64(idarg, &id) != 0 || parseU64(offarg, &off) != 0)
        return "-ERR segment id and offset must be unsigned integers\r\n";
    const hostSlice *sl = sliceOf(c->h, id);
    if (sl == NULL) return "-ERR no such segment\r\n";
    if (!admitted(c, sl)) return NOAUTH_REPLY;
    if (len == 0 || off >= sl->size || len > sl->size - off) return "-ERR range is outside the segment\r\n";
    *ptr = c->h->mem + sl->off + off;
    return NULL;
}

static int sendFd(hostConn *c, const char *msg, int fd) {
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = strlen(msg)};
    ssize_t w = anetSendWithFd(c->fd, &iov, 1, fd);
    if (w < 0) return -1;
    return (size_t)w == iov.iov_len ? 0 : sendAll(c->fd, msg + w, iov.iov_len - (size_t)w);
}

/* SEG.WRITEV seg-id off payload [off payload ...] and SEG.READV seg-id off
 * len [off len ...], argument 0 and the header of argument 1 (len1) already
 * read: reads the rest, checks every range, then moves all or none. -1 ends
 * the connection (protocol error). */
static int serveVector(hostConn *c, long long argc, int write, long long len1) {
    const char *name = write ? "seg.writev" : "seg.readv";
    long long nranges = (argc - 2) / 2;
    char (*num)[HOST_NUM_ARG] = calloc((size_t)argc, sizeof(*num));
    uint64_t *plen = calloc((size_t)(nranges + 1), sizeof(*plen)), *poff = calloc((size_t)(nranges + 1), sizeof(*poff));
    char **ptrs = calloc((size_t)(nranges + 1), sizeof(*ptrs));
    char *vbuf = NULL, errbuf[160];
    struct iovec *iov = NULL;
    size_t vlen = 0, vcap = 0, reserved = 0; /* reserved: counted in h->buffered */
    const char *err = NULL;
    int rc = -1;
    if (!num || !plen || !poff || !ptrs) goto end;
    for (long long i = 1; i < argc; i++) {
        char line[72], crlf[2];
        long long len = len1;
        if (i > 1 && (readLine(c, line, sizeof(line)) != 0 || parseLen(line, '$', (long long)1 << 40, &len) != 0))
            goto end;
        if (write && i >= 3 && i % 2 == 1) { /* a payload: buffered */
            if (len > HOST_MAX_VEC_BYTES - (long long)vlen) {
                reply(c, "-ERR SEG.WRITEV payloads too large for a hosted segment\r\n");
                goto end;
            }
            if (vlen + (size_t)len + 1 > vcap) { /* doubling: no copy per payload */
                size_t ncap = vcap ? vcap : 64 * 1024;
                while (ncap < vlen + (size_t)len + 1) ncap *= 2;
                /* The host's total first: many half-sent vectors must not
                 * add up without bound. */
                size_t more = ncap - reserved;
                if (__atomic_add_fetch(&c->h->buffered, more, __ATOMIC_RELAXED) > c->h->max_buffered) {
                    __atomic_sub_fetch(&c->h->buffered, more, __ATOMIC_RELAXED);
                    snprintf(errbuf, sizeof(errbuf),
                             "-ERR the segment host is buffering too many SEG.WRITEV payloads (at most %zu bytes); "
                             "retry\r\n",
                             c->h->max_buffered);
                    reply(c, errbuf);
                    goto end;
                }
                reserved += more;
                char *nb = realloc(vbuf, ncap);
                if (nb == NULL) goto end;
                vbuf = nb;
                vcap = ncap;
            }
            if (readExact(c, vbuf + vlen, (size_t)len) != 0) goto end;
            plen[(i - 3) / 2] = (uint64_t)len;
            poff[(i - 3) / 2] = vlen;
            vlen += (size_t)len;
        } else {
            if (len >= HOST_NUM_ARG) {
                reply(c, "-ERR argument too long\r\n");
                goto end;
            }
            if (readExact(c, num[i], (size_t)len) != 0) goto end;
            num[i][len] = '\0';
            if (i == 1) { /* the segment id: nothing is buffered for a peer it does not admit */
                const char *aerr;
                if (admittedSlice(c, num[1], &aerr) == NULL) {
                    reply(c, aerr);
                    goto end;
                }
            }
        }
        if (readExact(c, crlf, 2) != 0 || crlf[0] != '\r' || crlf[1] != '\n') goto end;
    }
    rc = 0; /* in step with the stream from here on */
    if (argc < 4 || argc % 2) {
        snprintf(errbuf, sizeof(errbuf), "-ERR wrong number of arguments for '%s' command\r\n", name);
        rc = reply(c, errbuf);
        goto end;
    }
    for (long long k = 0; k < nranges; k++) {
        if (!write && parseU64(num[3 + 2 * k], &plen[k]) != 0) err = "-ERR length must be an unsigned integer\r\n";
        else err = checkRange(c, num[1], num[2 + 2 * k], plen[k], &ptrs[k]);
        if (err) {
            rc = reply(c, err);
            goto end;
        }
    }
    if (write) {
        for (long long k = 0; k < nranges; k++) memcpy(ptrs[k], vbuf + poff[k], plen[k]);
        rc = reply(c, "+OK\r\n");
        goto end;
    }
    /* The reply: "*n", then "$len", bytes, CRLF per range, gathered. */
    char *hdrs = vbuf = malloc((size_t)(nranges + 1) * 32);
    iov = malloc(sizeof(*iov) * (size_t)(3 * nranges + 1));
    if (hdrs == NULL || iov == NULL) {
        rc = -1;
        goto end;
    }
    int niov = 0;
    size_t hl = (size_t)snprintf(hdrs, 32, "*%lld\r\n", nranges);
    iov[niov++] = (struct iovec){hdrs, hl};
    for (long long k = 0; k < nranges; k++) {
        char *h = hdrs + 32 * (k + 1);
        iov[niov++] = (struct iovec){h, (size_t)snprintf(h, 32, "$%llu\r\n", (unsigned long long)plen[k])};
        iov[niov++] = (struct iovec){ptrs[k], plen[k]};
        iov[niov++] = (struct iovec){(void *)"\r\n", 2};
    }
    rc = anetSendAll(c->fd, iov, niov);
end:
    if (reserved) __atomic_sub_fetch(&c->h->buffered, reserved, __ATOMIC_RELAXED);
    free(num);
    free(plen);
    free(poff);
    free(ptrs);
    free(vbuf);
    free(iov);
    return rc;
}

/* Admitted somewhere: the idle timeout, not the pre-auth deadline, from
 * now on. */
static void admittedNow(hostConn *c) { c->admitted_any = 1; }

/* One request; -1 ends the connection. */
static int serveOne(hostConn *c) {
    char line[72], args[HOST_MAX_ARGS][HOST_MAX_SMALL_ARG + 1];
    long long argc, len;
    /* Between requests: what is buffered already is the next one's start. */
    c->in_request = 0;
    if (c->pos < c->len) requestStarted(c);
    if (readLine(c, line, sizeof(line)) != 0) return -1;
    if (parseLen(line, '*', 2 + 2 * HOST_MAX_VEC_RANGES, &argc) != 0 || argc == 0) {
        reply(c, "-ERR Protocol error: expected a multibulk request of at most 8 arguments (2050 for SEG.WRITEV/READV)\r\n");
        return -1;
    }
    for (long long i = 0; i < argc; i++) {
        if (readLine(c, line, sizeof(line)) != 0) return -1;
        if (parseLen(line, '$', (long long)1 << 40, &len) != 0) {
            reply(c, "-ERR Protocol error: invalid bulk length\r\n");
            return -1;
        }
        if (i == 1 && (!strcasecmp(args[0], "SEG.WRITEV") || !strcasecmp(args[0], "SEG.READV"))) {
            /* The vector forms read the rest of their arguments themselves. */
            return serveVector(c, argc, !strcasecmp(args[0], "SEG.WRITEV"), len);
        }
        if (i == 1 && argc > HOST_MAX_ARGS) {
            reply(c, "-ERR Protocol error: expected a multibulk request of at most 8 arguments\r\n");
            return -1;
        }
        if (i == 3 && argc == 4 && !strcasecmp(args[0], "SEG.WRITE")) {
            /* The payload: checked, then read straight into the segment. */
            char *ptr = NULL;
            const char *err = checkRange(c, args[1], args[2], (uint64_t)len, &ptr);
            char crlf[2];
            if (readExact(c, err ? NULL : ptr, (size_t)len) != 0 || readExact(c, crlf, 2) != 0) return -1;
            if (crlf[0] != '\r' || crlf[1] != '\n') return -1;
            return reply(c, err ? err : "+OK\r\n");
        }
        if (len > HOST_MAX_SMALL_ARG) {
            reply(c, "-ERR argument too long\r\n");
            return -1;
        }
        char crlf[2];
        if (readExact(c, args[i], (size_t)len) != 0 || readExact(c, crlf, 2) != 0) return -1;
        if (crlf[0] != '\r' || crlf[1] != '\n') return -1;
        args[i][len] = '\0';
    }
    const char *cmd = args[0];
    if (!strcasecmp(cmd, "PING")) return reply(c, "+PONG\r\n");
    if (!strcasecmp(cmd, "QUIT")) {
        reply(c, "+OK\r\n");
        return -1;
    }
    if (!strcasecmp(cmd, "AUTH") && (argc == 2 || argc == 3)) {
        const char *pw = args[argc - 1];
        const char *want = c->h->user ? c->h->user : "default";
        if (c->h->password == NULL)
            return reply(c, "-ERR AUTH called without any password configured\r\n");
        /* Both compared whole, without stopping at the first difference. */
        c->authed = sameSecret(argc == 3 ? args[1] : "default", want) & sameSecret(pw, c->h->password);
        if (c->authed) admittedNow(c);
        return reply(c, c->authed ? "+OK\r\n" : "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    }
    if (!strcasecmp(cmd, "SEG.AUTH") && argc == 3) {
        uint64_t id;
        hostSlice *sl = parseU64(args[1], &id) == 0 ? sliceOf(c->h, id) : NULL;
        if (sl == NULL) return reply(c, "-ERR no such segment\r\n");
        size_t tl = strlen(args[2]);
        uint32_t g = 0;
        if (tl >= HOST_TOKEN_MIN && tl <= HOST_TOKEN_MAX) {
            /* Both compared whole, whichever matches. */
            pthread_mutex_lock(&c->h->lock);
            int cur = sl->gen && sameSecret(args[2], sl->tok), old = sl->oldgen && sameSecret(args[2], sl->oldtok);
            g = cur ? sl->gen : old ? sl->oldgen : 0;
            pthread_mutex_unlock(&c->h->lock);
        }
        if (g == 0) return reply(c, "-WRONGTOKEN invalid token for this segment (ask SEGMENT.TOKEN again)\r\n");
        c->admit[sl - c->h->slices] = g;
        admittedNow(c);
        return reply(c, "+OK\r\n");
    }
    if (!strcasecmp(cmd, "SEG.READ") && argc == 4) {
        uint64_t n;
        char *ptr = NULL;
        const char *err = parseU64(args[3], &n) != 0 ? "-ERR length must be an unsigned integer\r\n"
                                                    : checkRange(c, args[1], args[2], n, &ptr);
        if (err) return reply(c, err);
        char hdr[32];
        int hl = snprintf(hdr, sizeof(hdr), "$%llu\r\n", (unsigned long long)n);
        if (sendAll(c->fd, hdr, (size_t)hl) != 0 || sendAll(c->fd, ptr, n) != 0) return -1;
        return sendAll(c->fd, "\r\n", 2);
    }
    if (!strcasecmp(cmd, "SEG.WRITE")) return reply(c, "-ERR wrong number of arguments for 'seg.write' command\r\n");
    if (!strcasecmp(cmd, "SHM.ATTACH") && argc == 2) {
        uint64_t id;
        if (!c->is_unix) return reply(c, "-ERR SHM.ATTACH needs a unix socket connection (the fd travels by SCM_RIGHTS)\r\n");
        const char *aerr;
        const hostSlice *sl = admittedSlice(c, args[1], &aerr);
        if (sl == NULL) return reply(c, aerr);
        id = sl->id;
        if (c->h->memfd < 0) return reply(c, "-ERR segment has no shared memory file\r\n");
        char msg[96];
        if (sl->off == 0 && sl->size == c->h->size)
            snprintf(msg, sizeof(msg), "*2\r\n:%llu\r\n:%llu\r\n", (unsigned long long)id, (unsigned long long)sl->size);
        else
            snprintf(msg, sizeof(msg), "*3\r\n:%llu\r\n:%llu\r\n:%llu\r\n", (unsigned long long)id,
                     (unsigned long long)sl->size, (unsigned long long)sl->off);
        return sendFd(c, msg, c->h->memfd);
    }
    return reply(c, "-ERR unknown command for a hosted segment\r\n");
}

static void *connThread(void *arg) {
    hostConn *c = arg;
    while (serveOne(c) == 0) {
    }
    pthread_mutex_lock(&c->h->lock);
    shutdown(c->fd, SHUT_RDWR);
    c->done = 1;
    c->h->nconns--;
    pthread_mutex_unlock(&c->h->lock);
    return NULL;
}

/* ---- listeners ----------------------------------------------------------- */

/* Joins and frees finished connections; all of them when stopping. */
static void reapConns(mcHost *h, int all) {
    pthread_mutex_lock(&h->lock);
    hostConn **pp = &h->conns;
    while (*pp) {
        hostConn *c = *pp;
        if (!c->done && !all) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        if (!c->done) shutdown(c->fd, SHUT_RDWR);
        pthread_mutex_unlock(&h->lock);
        pthread_join(c->thread, NULL);
        close(c->fd);
        free(c->admit);
        free(c);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
}

/* An abstract socket has no file, hence no mode bits: anyone in the network
 * namespace may connect. The path in /tmp it replaced was created under the
 * usual umask 022, and connecting needs write permission, so only its owner
 * (and root) could. The peer's credentials keep that rule. */
static int unixPeerAllowed(int fd) {
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) return 0;
    return cr.uid == geteuid() || cr.uid == 0;
}

static void *acceptThread(void *arg) {
    mcHost *h = arg;
    struct pollfd pfd[3] = {{.fd = h->wake[0], .events = POLLIN},
                            {.fd = h->tcp_fd, .events = POLLIN},
                            {.fd = h->unix_fd, .events = POLLIN}};
    for (;;) {
        int rc = poll(pfd, 3, 1000);
        if (rc < 0 && errno != EINTR) break;
        if (pfd[0].revents) break;
        reapConns(h, 0);
        for (int i = 1; i < 3; i++) {
            if (rc <= 0 || !(pfd[i].revents & POLLIN)) continue;
            int fd = accept4(pfd[i].fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) continue;
            hostConn *c = calloc(1, sizeof(*c));
            if (c == NULL || (c->admit = calloc((size_t)h->nslices, sizeof(*c->admit))) == NULL) {
                free(c);
                close(fd);
                continue;
            }
            c->h = h;
            c->fd = fd;
            c->is_unix = i == 2;
            if (c->is_unix && !unixPeerAllowed(fd)) {
                static const char no[] = "-ERR unix socket peers must run as the hosting process's user "
                                         "(or root); use the tcp:// endpoint\r\n";
                sendAll(fd, no, sizeof(no) - 1);
                close(fd);
                free(c->admit);
                free(c);
                continue;
            }
            /* Reads wait as hostRead says; a send that makes no progress
             * (a peer not reading its SEG.READ) is a stall all the same. */
            c->preauth_until = monoMs() + h->preauth_ms;
            struct timeval tv = {h->request_ms / 1000, (h->request_ms % 1000) * 1000};
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
            if (!c->is_unix) {
                anetEnableTcpNoDelay(NULL, fd);
                anetTuneLocalCongestion(fd);
            }
            pthread_mutex_lock(&h->lock);
            int stopping = h->stopping, full = h->nconns >= h->max_conns;
            if (stopping || full || pthread_create(&c->thread, NULL, connThread, c) != 0) {
                int max = h->max_conns;
                pthread_mutex_unlock(&h->lock);
                /* A word before closing: the server's liveness probe reads
                 * "closed without a reply" as this process being gone. */
                char busy[128];
                if (full)
                    snprintf(busy, sizeof(busy), "-ERR the segment host has too many connections (at most %d)\r\n", max);
                else
                    snprintf(busy, sizeof(busy), "-ERR the segment host cannot serve this connection now\r\n");
                if (!stopping) sendAll(fd, busy, strlen(busy));
                close(fd);
                free(c->admit);
                free(c);
                continue;
            }
            h->nconns++;
            c->next = h->conns;
            h->conns = c;
            pthread_mutex_unlock(&h->lock);
        }
    }
    return NULL;
}

/* Binds fd to the first free port of [lo, hi], from a random start so that
 * processes starting together do not all race for the same one; 0 or -1
 * with errno (EADDRINUSE when the range is full). */
static int bindInRange(int fd, struct sockaddr_storage *ss, socklen_t sslen, int lo, int hi) {
    int span = hi - lo + 1, start = (int)(((unsigned)getpid() * 2654435761u + (unsigned)time(NULL)) % (unsigned)span);
    for (int i = 0; i < span; i++) {
        int port = lo + (start + i) % span;
        if (ss->ss_family == AF_INET6) ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
        else ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
        if (bind(fd, (struct sockaddr *)ss, sslen) == 0) return 0;
        if (errno != EADDRINUSE) return -1;
    }
    errno = EADDRINUSE;
    return -1;
}

/* A timeout from the environment (tests: seconds would make them slow). */
static int envMs(const char *name, int dflt) {
    const char *v = getenv(name);
    int ms = v ? atoi(v) : 0;
    return ms > 0 ? ms : dflt;
}

mcHost *mcHostStart(void *mem, size_t size, int memfd, int nslices, const size_t *off, const size_t *len,
                    const char *bindip, int port_min, int port_max, const char *user, const char *password,
                    char *err, size_t errlen) {
    static int counter;
    if (nslices < 0 || nslices > MC_HOST_MAX_SLICES) {
        snprintf(err, errlen, "%d slices (at most %d)", nslices, MC_HOST_MAX_SLICES);
        return NULL;
    }
    for (int i = 0; i < nslices; i++) {
        if (len[i] == 0 || off[i] > size || len[i] > size - off[i]) {
            snprintf(err, errlen, "slice %d is not inside the memory", i);
            return NULL;
        }
    }
    mcHost *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->mem = mem;
    h->size = size;
    h->memfd = memfd;
    h->tcp_fd = h->unix_fd = h->wake[0] = h->wake[1] = -1;
    h->max_conns = HOST_MAX_CONNS;
    h->max_buffered = HOST_MAX_BUFFERED;
    h->preauth_ms = envMs("MC_HOST_PREAUTH_MS", HOST_PREAUTH_MS);
    h->idle_ms = envMs("MC_HOST_IDLE_MS", HOST_IDLE_MS);
    h->request_ms = envMs("MC_HOST_REQUEST_MS", HOST_REQUEST_MS);
    pthread_mutex_init(&h->lock, NULL);
    h->nslices = nslices ? nslices : 1;
    if ((h->slices = calloc((size_t)h->nslices, sizeof(*h->slices))) == NULL) goto oom;
    for (int i = 0; i < nslices; i++) {
        h->slices[i].off = off[i];
        h->slices[i].size = len[i];
    }
    if (nslices == 0) h->slices[0].size = size;
    if (password && password[0] && (h->password = strdup(password)) == NULL) goto oom;
    if (user && user[0] && (h->user = strdup(user)) == NULL) goto oom;

    /* TCP on bindip, a port of the range or one the kernel picks. */
    struct sockaddr_storage ss;
    socklen_t sslen;
    memset(&ss, 0, sizeof(ss));
    if (strchr(bindip, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        a6->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, bindip, &a6->sin6_addr) != 1) goto badip;
        sslen = sizeof(*a6);
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        a4->sin_family = AF_INET;
        if (inet_pton(AF_INET, bindip, &a4->sin_addr) != 1) goto badip;
        sslen = sizeof(*a4);
    }
    h->tcp_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ranged = port_min > 0 && port_max >= port_min && port_max < 65536;
    if (h->tcp_fd < 0 ||
        (ranged ? bindInRange(h->tcp_fd, &ss, sslen, port_min, port_max) : bind(h->tcp_fd, (struct sockaddr *)&ss, sslen)) != 0 ||
        listen(h->tcp_fd, 64) != 0 || getsockname(h->tcp_fd, (struct sockaddr *)&ss, &sslen) != 0) {
        if (ranged && errno == EADDRINUSE)
            snprintf(err, errlen, "tcp listener on %s: no free port in %d-%d", bindip, port_min, port_max);
        else
            snprintf(err, errlen, "tcp listener on %s: %s", bindip, strerror(errno));
        goto fail;
    }
    int port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    snprintf(h->tcp_ep, sizeof(h->tcp_ep), ss.ss_family == AF_INET6 ? "tcp://[%s]:%d" : "tcp://%s:%d", bindip, port);

    /* The unix socket: same-host peers attach the memfd through it. It is
     * an abstract one (unix://@name; see the top of the file for why). */
    int counter_now = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    h->unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (h->unix_fd < 0) {
        snprintf(err, errlen, "unix listener: %s", strerror(errno));
        goto fail;
    }
    for (int attempt = 0;; attempt++) {
        uint64_t nonce = 0;
        if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce))
            nonce = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)(uintptr_t)h ^ (uint64_t)attempt;
        snprintf(h->unix_path, sizeof(h->unix_path), "@mooncake-seg-%d-%d-%016llx", (int)getpid(), counter_now,
                 (unsigned long long)nonce);
        struct sockaddr_un un;
        unsigned int unlen;
        anetUnixAddress(&un, &unlen, h->unix_path);
        if (bind(h->unix_fd, (struct sockaddr *)&un, unlen) == 0 && listen(h->unix_fd, 64) == 0) break;
        /* Taken: another process drew the same name (a shared network
         * namespace); draw again. Anything else is a real failure. */
        if (errno != EADDRINUSE || attempt == 8) {
            snprintf(err, errlen, "unix listener %s: %s", h->unix_path, strerror(errno));
            goto fail;
        }
    }
    if (pipe2(h->wake, O_CLOEXEC) != 0 || pthread_create(&h->accept_thread, NULL, acceptThread, h) != 0) {
        snprintf(err, errlen, "listener thread: %s", strerror(errno));
        goto fail;
    }
    return h;
badip:
    snprintf(err, errlen, "bad bind address %s", bindip);
    goto fail;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    if (h->tcp_fd >= 0) close(h->tcp_fd);
    if (h->unix_fd >= 0) close(h->unix_fd);
    if (h->wake[0] >= 0) close(h->wake[0]);
    if (h->wake[1] >= 0) close(h->wake[1]);
    pthread_mutex_destroy(&h->lock);
    free(h->password);
    free(h->user);
    free(h->slices);
    free(h);
    return NULL;
}

void mcHostStop(mcHost *h) {
    if (h == NULL) return;
    pthread_mutex_lock(&h->lock);
    h->stopping = 1;
    pthread_mutex_unlock(&h->lock);
    ssize_t w = write(h->wake[1], "x", 1);
    (void)w;
    pthread_join(h->accept_thread, NULL);
    close(h->tcp_fd);
    close(h->unix_fd); /* the abstract name goes with it */
    reapConns(h, 1);
    close(h->wake[0]);
    close(h->wake[1]);
    pthread_mutex_destroy(&h->lock);
    free(h->password);
    free(h->user);
    free(h->slices);
    free(h);
}

/* A child's copy (mc_host.h). Its connection threads are not here, so the
 * list is walked without the lock (a thread of the parent may have held
 * it at the fork). Closing the abstract socket here does not release its
 * name: the parent's descriptor still holds it. */
void mcHostForget(mcHost *h) {
    if (h == NULL) return;
    while (h->conns) {
        hostConn *c = h->conns;
        h->conns = c->next;
        close(c->fd);
        free(c->admit);
        free(c);
    }
    int fds[4] = {h->tcp_fd, h->unix_fd, h->wake[0], h->wake[1]};
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(h->password);
    free(h->user);
    free(h->slices);
    free(h);
}

void mcHostSetSegmentId(mcHost *h, int slice, uint64_t id) {
    if (slice < 0 || slice >= h->nslices) return;
    hostSlice *sl = &h->slices[slice];
    pthread_mutex_lock(&h->lock);
    /* The MOUNT that proposed the current token was answered: the server
     * hands out that one now, and the one before it is good no more. */
    __atomic_store_n(&sl->oldgen, 0, __ATOMIC_RELEASE);
    memset(sl->oldtok, 0, sizeof(sl->oldtok));
    pthread_mutex_unlock(&h->lock);
    __atomic_store_n(&sl->id, id, __ATOMIC_RELEASE);
}

int mcHostSetSegmentToken(mcHost *h, int slice, const char *token) {
    size_t len = token ? strlen(token) : 0;
    if (slice < 0 || slice >= h->nslices || len < HOST_TOKEN_MIN || len > HOST_TOKEN_MAX) return -1;
    hostSlice *sl = &h->slices[slice];
    pthread_mutex_lock(&h->lock);
    memcpy(sl->oldtok, sl->tok, sizeof(sl->tok));
    __atomic_store_n(&sl->oldgen, sl->gen, __ATOMIC_RELEASE);
    memcpy(sl->tok, token, len + 1);
    if (++h->next_gen == 0) h->next_gen = 1; /* 0 means none */
    __atomic_store_n(&sl->gen, h->next_gen, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&h->lock);
    return 0;
}

void mcHostSetLimits(mcHost *h, int max_conns, size_t max_buffered) {
    pthread_mutex_lock(&h->lock);
    if (max_conns > 0) h->max_conns = max_conns;
    if (max_buffered > 0) h->max_buffered = max_buffered;
    pthread_mutex_unlock(&h->lock);
}

int mcHostConnections(mcHost *h) {
    pthread_mutex_lock(&h->lock);
    int n = h->nconns;
    pthread_mutex_unlock(&h->lock);
    return n;
}

int mcHostEndpoints(mcHost *h, char (*eps)[300], int max) {
    int n = 0;
    if (n < max) snprintf(eps[n++], 300, "%s", h->tcp_ep);
    if (n < max) snprintf(eps[n++], 300, "unix://%s", h->unix_path);
    return n;
}
