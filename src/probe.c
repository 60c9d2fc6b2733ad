/* probe.c -- is anything still serving at a RESP endpoint?
 *
 * The server learns that a segment's host process died when the host's
 * connection closes, but a closed connection alone does not say whether the
 * process died (SIGKILL, a crash) or only its connection did (a network
 * blip, CLIENT KILL, a server-side timeout) -- and the two want opposite
 * answers: unmount at once, or keep the memory and wait for the reconnect.
 * The host process also serves its segment on endpoints of its own
 * (mc_host.c), so the question can be put to it directly: connect there,
 * send PING, see what happens.
 *
 *   any byte back       ALIVE      +PONG, or -NOAUTH, or any error: a live
 *                                  process read the request and answered
 *   ECONNREFUSED        GONE       nothing listens there any more
 *   ENOENT              GONE       the unix socket's file is gone
 *   EOF / ECONNRESET    GONE       connected, then closed without a reply
 *   no reply in time    UNDECIDED  a stopped (SIGSTOP) or wedged process, a
 *                                  partition, a full backlog: nothing learnt
 *   anything else       UNDECIDED  unreachable network, no fds, ...
 *
 * "Connected, then closed without a reply" is GONE, and that settles the
 * race at exit: the kernel closes a killed process's sockets one by one, so
 * the probe may connect while the listener still exists, after every thread
 * of the process is already dead (files are closed only once the last
 * thread exited). Nobody will ever accept; when the listener closes, the
 * queued connection is reset. A live host never closes without answering:
 * even a peer it refuses gets an -ERR line first.
 *
 * Everything is non-blocking and runs on the caller's ae loop: one file
 * event for the socket, one timer for the delay and then the deadline.
 * Addresses are numeric only -- a host name would need a blocking resolver
 * call -- so probeUriKind tells the caller which endpoints can be asked.
 * The request carries no credentials: a probe proves life, it does not
 * log in, and -NOAUTH is as good an answer as +PONG.
 *
 * The result is always delivered from the loop (a refused connect is
 * reported by the timer at once), never from inside probeStart, so callers
 * need not guard against re-entry.
 */
#include "probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ae.h"
#include "anet.h"
#include "zmalloc.h"

/* The same request every RESP server and libmooncake's host understand;
 * the inline form "PING\r\n" is refused by the host (multibulk only). */
#define PROBE_REQUEST "*1\r\n$4\r\nPING\r\n"

enum { PH_WAIT = 0, PH_CONNECTING, PH_READING };

struct probe {
    aeEventLoop *el;
    int fd;
    int phase;
    long long timer;
    long long timeout_ms;
    struct sockaddr_storage sa;
    socklen_t salen;
    probeDoneProc *done;
    void *privdata;
    char detail[160]; /* why a connect failed, until reported */
    char uri[200];
};

/* ---- addresses ------------------------------------------------------------ */

static int parsePort(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end || errno || v < 1 || v > 65535) return -1;
    return (int)v;
}

/* The address uri names, or PROBE_URI_NONE. sa/salen may be NULL. */
static int parseUri(const char *uri, struct sockaddr_storage *sa, socklen_t *salen) {
    struct sockaddr_storage tmp;
    socklen_t tmplen;
    if (sa == NULL) sa = &tmp;
    if (salen == NULL) salen = &tmplen;
    memset(sa, 0, sizeof(*sa));
    if (!strncmp(uri, "unix://", 7)) {
        const char *path = uri + 7;
        unsigned int len;
        if (path[0] != '/' && path[0] != '@') return PROBE_URI_NONE;
        if (anetUnixAddress((struct sockaddr_un *)sa, &len, path) != ANET_OK) return PROBE_URI_NONE;
        *salen = (socklen_t)len;
        return PROBE_URI_UNIX;
    }
    if (strncmp(uri, "tcp://", 6)) return PROBE_URI_NONE;
    char host[64];
    const char *hp = uri + 6, *portstr;
    size_t hl;
    if (hp[0] == '[') {
        const char *close = strchr(hp, ']');
        if (close == NULL || close[1] != ':') return PROBE_URI_NONE;
        hl = (size_t)(close - hp - 1);
        hp++;
        portstr = close + 2;
    } else {
        const char *colon = strrchr(hp, ':');
        if (colon == NULL) return PROBE_URI_NONE;
        hl = (size_t)(colon - hp);
        portstr = colon + 1;
    }
    if (hl == 0 || hl >= sizeof(host)) return PROBE_URI_NONE;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    int port = parsePort(portstr);
    if (port < 0) return PROBE_URI_NONE;
    if (!strcmp(host, "localhost")) snprintf(host, sizeof(host), "127.0.0.1");
    struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *salen = sizeof(*a4);
        uint32_t ip = ntohl(a4->sin_addr.s_addr);
        if (ip == INADDR_ANY) return PROBE_URI_TCP_ANY;
        return (ip >> 24) == 127 ? PROBE_URI_TCP_LOOPBACK : PROBE_URI_TCP;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *salen = sizeof(*a6);
        if (IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr)) return PROBE_URI_TCP_ANY;
        if (IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr) ||
            (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr) && a6->sin6_addr.s6_addr[12] == 127))
            return PROBE_URI_TCP_LOOPBACK;
        return PROBE_URI_TCP;
    }
    return PROBE_URI_NONE; /* a host name: resolving it could block */
}

int probeUriKind(const char *uri) { return parseUri(uri, NULL, NULL); }

int probeUriPort(const char *uri) {
    struct sockaddr_storage sa;
    socklen_t salen;
    switch (parseUri(uri, &sa, &salen)) {
    case PROBE_URI_TCP:
    case PROBE_URI_TCP_LOOPBACK:
    case PROBE_URI_TCP_ANY:
        return ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                              : ((struct sockaddr_in *)&sa)->sin_port);
    default: return -1;
    }
}

int probeUriAddress(const char *uri, struct sockaddr_storage *sa, socklen_t *salen) {
    return parseUri(uri, sa, salen);
}

/* The 16 bytes of an address, IPv4 as IPv4-mapped IPv6; 0 if not one. */
static int addrBytes(const struct sockaddr_storage *sa, unsigned char out[16]) {
    if (sa->ss_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 1;
    }
    if (sa->ss_family != AF_INET) return 0;
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return 1;
}

int probeUriAddrIs(const char *uri, const char *ip) {
    struct sockaddr_storage a, b;
    socklen_t alen;
    int kind = parseUri(uri, &a, &alen);
    if (ip == NULL || (kind != PROBE_URI_TCP && kind != PROBE_URI_TCP_LOOPBACK)) return 0;
    memset(&b, 0, sizeof(b));
    if (inet_pton(AF_INET, ip, &((struct sockaddr_in *)&b)->sin_addr) == 1) b.ss_family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)&b)->sin6_addr) == 1) b.ss_family = AF_INET6;
    else return 0;
    unsigned char x[16], y[16];
    return addrBytes(&a, x) && addrBytes(&b, y) && !memcmp(x, y, 16);
}

/* ---- the exchange ----------------------------------------------------------- */

static probeOutcome classifyErrno(int err) {
    switch (err) {
    case ECONNREFUSED:
    case ENOENT:
    case ECONNRESET:
    case EPIPE: return PROBE_GONE;
    default: return PROBE_UNDECIDED; /* EAGAIN (a full unix backlog), unreachable, ... */
    }
}

static void probeRelease(probe *p) {
    if (p->fd != -1) {
        aeDeleteFileEvent(p->el, p->fd, AE_READABLE | AE_WRITABLE);
        close(p->fd);
    }
    /* Safe from inside the timer's own callback: ae only marks it. */
    if (p->timer != -1) aeDeleteTimeEvent(p->el, p->timer);
    zfree(p);
}

static void probeFinish(probe *p, probeOutcome outcome, const char *why) {
    char detail[sizeof(p->detail) + sizeof(p->uri) + 8];
    snprintf(detail, sizeof(detail), "%s: %s", p->uri, why);
    probeDoneProc *done = p->done;
    void *privdata = p->privdata;
    probeRelease(p);
    done(outcome, detail, privdata); /* last: it may start or cancel other probes */
}

static void probeReadable(aeEventLoop *el, int fd, void *clientData, int mask) {
    (void)el, (void)mask;
    probe *p = clientData;
    char buf[64], why[96];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n > 0) {
        buf[n] = '\0';
        buf[strcspn(buf, "\r\n")] = '\0';
        for (char *c = buf; *c; c++)
            if (*c < ' ' || *c > '~') *c = '?'; /* it goes to the log */
        snprintf(why, sizeof(why), "answered %s", buf);
        probeFinish(p, PROBE_ALIVE, why);
    } else if (n == 0) {
        probeFinish(p, PROBE_GONE, "connected, then closed without a reply");
    } else if (errno != EAGAIN && errno != EINTR) {
        snprintf(why, sizeof(why), "read: %s", strerror(errno));
        probeFinish(p, classifyErrno(errno), why);
    }
}

static void probeWritable(aeEventLoop *el, int fd, void *clientData, int mask) {
    (void)mask;
    probe *p = clientData;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1) err = errno;
    char why[96];
    if (err) {
        snprintf(why, sizeof(why), "connect: %s", strerror(err));
        probeFinish(p, classifyErrno(err), why);
        return;
    }
    /* 14 bytes into an empty socket buffer: all or nothing. */
    ssize_t n = send(fd, PROBE_REQUEST, sizeof(PROBE_REQUEST) - 1, MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof(PROBE_REQUEST) - 1) {
        if (n == -1 && (errno == EAGAIN || errno == EINTR)) return;
        snprintf(why, sizeof(why), "send: %s", n == -1 ? strerror(errno) : "short write");
        probeFinish(p, n == -1 ? classifyErrno(errno) : PROBE_UNDECIDED, why);
        return;
    }
    aeDeleteFileEvent(el, fd, AE_WRITABLE);
    p->phase = PH_READING;
    if (aeCreateFileEvent(el, fd, AE_READABLE, probeReadable, p) == AE_ERR)
        probeFinish(p, PROBE_UNDECIDED, "no room in the event loop");
}

/* Starts the connect: 0 while it is in progress, else the outcome already
 * known (p->detail says why). */
static int probeConnect(probe *p) {
    p->fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd == -1) {
        snprintf(p->detail, sizeof(p->detail), "socket: %s", strerror(errno));
        return PROBE_UNDECIDED;
    }
    if (connect(p->fd, (struct sockaddr *)&p->sa, p->salen) == -1 && errno != EINPROGRESS) {
        snprintf(p->detail, sizeof(p->detail), "connect: %s", strerror(errno));
        return classifyErrno(errno);
    }
    /* Connected or connecting: writable once the outcome is known. */
    if (aeCreateFileEvent(p->el, p->fd, AE_WRITABLE, probeWritable, p) == AE_ERR) {
        snprintf(p->detail, sizeof(p->detail), "no room in the event loop");
        return PROBE_UNDECIDED;
    }
    return 0;
}

/* First the delay (then connect), then the deadline. */
static int probeTimer(aeEventLoop *el, long long id, void *clientData) {
    (void)el, (void)id;
    probe *p = clientData;
    if (p->phase == PH_WAIT) {
        p->phase = PH_CONNECTING;
        int known = probeConnect(p);
        if (known == 0) return (int)p->timeout_ms; /* now the deadline */
        p->timer = -1; /* this timer ends as it returns */
        probeFinish(p, (probeOutcome)known, p->detail);
        return AE_NOMORE;
    }
    p->timer = -1;
    char why[64];
    snprintf(why, sizeof(why), "no answer within %lld ms", p->timeout_ms);
    probeFinish(p, PROBE_UNDECIDED, why);
    return AE_NOMORE;
}

probe *probeStart(aeEventLoop *el, const char *uri, long long delay_ms, long long timeout_ms,
                  probeDoneProc *done, void *privdata, char *err, size_t errlen) {
    probe *p = zcalloc(sizeof(*p));
    p->el = el;
    p->fd = -1;
    p->timer = -1;
    p->phase = PH_WAIT;
    p->done = done;
    p->privdata = privdata;
    /* ae timers take an int of ms: a longer wait is a configuration slip. */
    p->timeout_ms = timeout_ms < 1 ? 1 : timeout_ms > 3600000 ? 3600000 : timeout_ms;
    snprintf(p->uri, sizeof(p->uri), "%s", uri);
    if (parseUri(uri, &p->sa, &p->salen) == PROBE_URI_NONE) {
        snprintf(err, errlen, "cannot probe '%s' (tcp:// with a numeric address, or unix://)", uri);
        goto err;
    }
    p->timer = aeCreateTimeEvent(el, delay_ms < 0 ? 0 : delay_ms, probeTimer, p, NULL);
    if (p->timer == AE_ERR) {
        p->timer = -1;
        snprintf(err, errlen, "cannot create a timer");
        goto err;
    }
    return p;
err:
    probeRelease(p);
    return NULL;
}

void probeCancel(probe *p) {
    if (p) probeRelease(p);
}
