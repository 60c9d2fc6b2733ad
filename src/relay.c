/* relay.c -- relayed reads: the bytes of a value held only in a segment a
 * client process hosts (mc_host.c), fetched from that process for GET and
 * the commands that read a value, without blocking the event loop.
 *
 * The server holds such a value's layout, not its bytes. A command that
 * must send or compute on them (GET, GETRANGE, MGET, GETEX, GETDEL, SET
 * ... GET, GETBIT, BITCOUNT, BITPOS, LCS, COPY, DUMP, MIGRATE) reads them from the
 * host with SEG.READ over its data plane, as any client would. The host is
 * another process, possibly another machine, and possibly stopped, wedged
 * or hostile: waiting for it inside the event loop (as this server once
 * did, 2 s per endpoint) froze every client. So a read here never waits.
 *
 * Blocking and running again. A command that needs remote bytes asks for
 * them (relayWant) before it replies or changes anything. If they are not
 * here yet, a read starts on the event loop, and the client is blocked
 * (CLIENT_BLOCKED | CLIENT_RERUN) with its arguments kept: nothing of the
 * command has happened, and the client's further requests wait in its
 * query buffer, so a pipeline's replies keep their order and its relayed
 * GETs go one at a time instead of adding up. When every read the command
 * asked for is done -- bytes or error -- the command runs again from its
 * arguments (relayBeforeSleep, networking.c's resumeBlockedCommand),
 * through processCommand, so ACL rules, cluster slots and the key's value
 * are looked at afresh; relayWant then finds the outcome here and the
 * command replies. Re-running rather than continuing keeps every caller
 * simple (it returns early, as on an error) and every answer current: if
 * the key was written meanwhile, it now names another object and the new
 * value is served (read again if it too is remote). A read is matched by
 * its object pointer, which cannot be reused meanwhile since the read
 * holds a reference; it also holds a read lease (as GET.REPLICAS grants),
 * so the host's space under it is not handed to a new PUT while it is
 * read. This is Redis's blocked-client pattern; the design alternative,
 * continuing each command from a callback, would need every caller split
 * in two around its fetch.
 *
 * Where a command cannot block (inside MULTI/EXEC: the transaction must
 * run whole) nothing is read and the command gets -REMOTE saying so.
 * Commands reading several values (MGET, LCS, MIGRATE) ask for all of
 * them first and block once.
 *
 * Bounds. Each read is bounded in size (remote-get-max-size, now for all a
 * command reads together: that is what the client's cache of outcomes
 * holds, and it counts in the client's memory) and in time (the caller's
 * timeout, remote-get-timeout for the GET family, without progress, per
 * endpoint; tcp:// endpoints first, then unix://, every replica's in
 * turn). At most remote-get-max-inflight reads are in flight server-wide:
 * past that a read is refused at once with -REMOTE (a client can retry,
 * or read the value itself with GET.REPLICAS), never queued without
 * bound. One client has at most remote-get-max-inflight-per-client reads
 * going; the rest of its command's reads wait for those. A client that
 * disconnects while blocked cancels its reads (their connections are
 * closed: a reply may be half read).
 *
 * Connections. One read uses one connection, one request at a time; a
 * connection that served a read cleanly is kept for the next one to the
 * same address (at most RELAY_IDLE_MAX, closed after 10 s idle), and a
 * kept one that fails before any reply is retried once on a fresh one (the
 * host may have closed it). Addresses are numeric only (owner.c's
 * segmentConnectUri decides them, probe.c parses them): resolving a name
 * would block. Everything read from a
 * host is checked before use: reply lines are bounded, the bulk must be
 * exactly the length asked for and end with CRLF.
 *
 * Credentials and endpoints. What the server logs in to a host with
 * (relayCredential: the segment's token, SEG.AUTH, never requirepass;
 * framed by relayCatLogin, its refusal recognised by relayLoginRefused)
 * and where it may connect (relayEndpointAddress: owner.c's one rule) are
 * each decided in one place; a connection remembers what it logged in
 * with and logs in again when that changes (another slice, a remount).
 */
#include "relay.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ae.h"
#include "anet.h"
#include "owner.h"
#include "probe.h"
#include "segment.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define RELAY_IDLE_TTL_MS 10000
#define RELAY_LINE_MAX 1024        /* longest reply line accepted from a host */
#define RELAY_RBUF 4096

enum { RR_QUEUED, RR_RUNNING, RR_DONE };
enum { PH_START, PH_CONNECTING, PH_SENDING, PH_AUTH_LINE, PH_HEADER, PH_BODY };

/* A connection to a segment host, in use by one read or idle. */
typedef struct relayConn {
    sds addr;           /* the address it reaches, as a URI */
    int fd;
    sds auth;           /* the credential it logged in with, NULL none */
    mstime_t last_use;
} relayConn;

/* One way to the bytes: an endpoint of a segment holding a replica. */
typedef struct relayTarget {
    uint64_t segid, offset; /* SEG.READ's arguments */
    sds uri;                /* as the segment names it (messages) */
    sds addr;               /* numeric, to connect to; NULL: unusable (why in uri's message) */
    sds cred;               /* what to log in with, NULL none */
} relayTarget;

typedef struct relayRead {
    client *c;
    storeObj *o;            /* referenced, and under a read lease */
    uint64_t off, len;
    long long timeout_ms;
    int state;
    sds bytes;              /* the value's bytes once they come */
    sds err;                /* RR_DONE without bytes: the reply */
    /* RR_RUNNING */
    relayTarget *t;
    int nt, cur;
    sds why;                /* every endpoint's failure so far */
    relayConn *conn;
    int fresh, retried, replied, send_auth;
    int phase;
    sds out;
    size_t outpos;
    sds autherr;
    long long timer;
    mstime_t deadline;
    uint64_t got;           /* body bytes in */
    size_t rpos, rlen;
    char *rbuf;             /* RELAY_RBUF bytes while running: a queued read is small */
} relayRead;

/* The reads of the command a client is running, in the order asked for;
 * idx finds one by object (open addressing, index + 1, 0 empty), so a
 * command asking for many values stays linear. */
typedef struct relayClient {
    relayRead **r;
    int n, cap;
    int *idx;
    int idxcap;             /* a power of two, at least 2n */
    int nextq;              /* reads before it were started or refused */
    int running, pending;   /* RR_RUNNING; RR_QUEUED + RR_RUNNING */
    uint64_t want;          /* bytes asked for by this command */
    size_t mem;             /* bytes held for them */
    int ready;              /* in relayReady */
    int pumping;
} relayClient;

static relayConn *idleConns[RELAY_IDLE_MAX];
static int nidle;
static client **relayReady; /* blocked clients whose reads are all done */
static size_t nready, readyCap;

/* ---- credentials --------------------------------------------------------- */

/* What the server presents to the host of seg before reading from it, NULL
 * for nothing; the caller frees it. The segment's own token (segment.h,
 * SEGMENT.TOKEN), never a password of the server's: the endpoint is the
 * mounting client's choice, so whoever listens there learns nothing it did
 * not have. The one place that decides it. */
static sds relayCredential(const segment *seg) {
    const char *token = segmentRelayToken(seg);
    return token ? sdsnew(token) : NULL;
}

/* The login request presenting cred for segment segid: SEG.AUTH id token. */
static sds relayCatLogin(sds out, uint64_t segid, const sds cred) {
    char id[24];
    int idlen = snprintf(id, sizeof(id), "%llu", (unsigned long long)segid);
    out = sdscatprintf(out, "*3\r\n$8\r\nSEG.AUTH\r\n$%d\r\n%s\r\n$%zu\r\n", idlen, id, sdslen(cred));
    out = sdscatsds(out, cred);
    return sdscatlen(out, "\r\n", 2);
}

/* Whether the host's error answer to the login refuses it. A host from
 * before tokens does not know SEG.AUTH; that is not a refusal (it admits
 * by nothing else, and its SEG.READ answers for itself). */
static int relayLoginRefused(const char *line) {
    return line[0] == '-' && !strstr(line, "unknown command");
}

/* ---- connections --------------------------------------------------------- */

static void connClose(relayConn *rc) {
    if (rc == NULL) return;
    close(rc->fd);
    sdsfree(rc->addr);
    sdsfree(rc->auth);
    zfree(rc);
}

static relayConn *idleTake(const char *addr) {
    for (int i = nidle - 1; i >= 0; i--) {
        if (strcmp(idleConns[i]->addr, addr)) continue;
        relayConn *rc = idleConns[i];
        idleConns[i] = idleConns[--nidle];
        return rc;
    }
    return NULL;
}

static void idlePut(relayConn *rc) {
    if (nidle == RELAY_IDLE_MAX) {
        int lru = 0;
        for (int i = 1; i < nidle; i++)
            if (idleConns[i]->last_use < idleConns[lru]->last_use) lru = i;
        connClose(idleConns[lru]);
        idleConns[lru] = idleConns[--nidle];
    }
    rc->last_use = monoMs();
    idleConns[nidle++] = rc;
}

void relayCron(void) {
    mstime_t now = monoMs();
    for (int i = 0; i < nidle;) {
        if (now - idleConns[i]->last_use > RELAY_IDLE_TTL_MS) {
            connClose(idleConns[i]);
            idleConns[i] = idleConns[--nidle];
        } else {
            i++;
        }
    }
}

/* Where uri of seg reaches, as a numeric URI (sdsfree it), or NULL with
 * *why set: owner.c's one rule for where the server connects
 * (segmentConnectUri: the mounting client's own address or abstract
 * socket, never a path, a host name or the server's own ports). */
static sds relayEndpointAddress(const segment *seg, const char *uri, sds *why) {
    char buf[1100];
    const char *refused = segmentConnectUri(seg, uri, buf, sizeof(buf));
    if (refused != NULL) {
        *why = sdscatprintf(sdsempty(), "%s: not connected to (%s)", uri, refused);
        return NULL;
    }
    return sdsnew(buf);
}

/* The endpoints to try for o, in order: every replica in a mounted
 * segment, its tcp:// endpoints first (they work from anywhere), then
 * unix:// (same host). */
static void buildTargets(relayRead *r) {
    storeObj *o = r->o;
    int cap = 0;
    for (int i = 0; i < o->nreplicas; i++) {
        segment *seg = storeReplicaSegment(storeObjReplica(o, i));
        if (seg && !seg->mem) cap += seg->nendpoints;
    }
    r->t = zcalloc(sizeof(relayTarget) * (size_t)(cap ? cap : 1));
    r->nt = 0;
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *rep = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(rep);
        if (seg == NULL || seg->mem) continue;
        for (int pass = 0; pass < 2; pass++) {
            for (int e = 0; e < seg->nendpoints; e++) {
                const char *ep = seg->endpoints[e];
                if (strncmp(ep, pass == 0 ? "tcp://" : "unix://", pass == 0 ? 6 : 7)) continue;
                relayTarget *t = &r->t[r->nt++];
                t->segid = seg->id;
                t->offset = rep->offset + r->off;
                t->uri = sdsnew(ep);
                sds why = NULL;
                t->addr = relayEndpointAddress(seg, ep, &why);
                if (t->addr == NULL) {
                    sdsfree(t->uri);
                    t->uri = why; /* said at its turn */
                }
                t->cred = relayCredential(seg);
            }
        }
    }
}

static void freeTargets(relayRead *r) {
    for (int i = 0; i < r->nt; i++) {
        sdsfree(r->t[i].uri);
        sdsfree(r->t[i].addr);
        sdsfree(r->t[i].cred);
    }
    zfree(r->t);
    r->t = NULL;
    r->nt = 0;
}

/* ---- one read ------------------------------------------------------------ */

static void rrEvent(aeEventLoop *el, int fd, void *privdata, int mask);
static void rrNextAttempt(relayRead *r);
static void clientPump(relayClient *rc);

/* The connection of the attempt in progress: back to the idle set if it is
 * in step (a clean reply, nothing more buffered), else closed. */
static void rrDropConn(relayRead *r, int reusable) {
    if (r->conn == NULL) return;
    aeDeleteFileEvent(server.el, r->conn->fd, AE_READABLE | AE_WRITABLE);
    if (reusable && r->rpos == r->rlen) idlePut(r->conn);
    else connClose(r->conn);
    r->conn = NULL;
}

/* Everything a running read holds besides its outcome. */
static void rrRelease(relayRead *r) {
    rrDropConn(r, 0);
    if (r->timer != -1) aeDeleteTimeEvent(server.el, r->timer);
    r->timer = -1;
    freeTargets(r);
    zfree(r->rbuf);
    r->rbuf = NULL;
    sdsfree(r->why);
    sdsfree(r->out);
    sdsfree(r->autherr);
    r->why = r->out = r->autherr = NULL;
}

/* The read is over: err NULL for success (the bytes are in r->bytes).
 * Its client runs its command again once nothing else is pending. */
static void rrDone(relayRead *r, sds err) {
    relayClient *rc = r->c->relay;
    if (r->state == RR_RUNNING) {
        rc->running--;
        server.remote_get_inflight--;
    }
    rrRelease(r);
    if (err) {
        if (r->bytes) rc->mem -= sdsAllocSize(r->bytes);
        sdsfree(r->bytes);
        r->bytes = NULL;
        r->err = err;
    } else {
        server.stat_remote_get_bytes += (long long)r->len;
    }
    r->state = RR_DONE;
    rc->pending--;
    clientPump(rc);
    if (rc->pending == 0 && (r->c->flags & CLIENT_RERUN) && !rc->ready) {
        if (nready == readyCap) {
            readyCap = readyCap ? readyCap * 2 : 16;
            relayReady = zrealloc(relayReady, sizeof(client *) * readyCap);
        }
        relayReady[nready++] = r->c;
        rc->ready = 1;
    }
}

static void rrFailAll(relayRead *r) {
    sds err = sdscatprintf(sdsempty(), "-REMOTE cannot read the value from its mounted segment: %s",
                           r->nt ? r->why : "no replica has a tcp:// or unix:// endpoint");
    serverLog(LL_VERBOSE, "Reading a value from a mounted segment failed: %s", err + 1);
    rrDone(r, err);
}

/* This endpoint failed (e: an errno, or 0 for a refusal in step). A kept
 * connection that failed before any reply is retried once on a fresh one;
 * otherwise the next endpoint is tried. */
static void rrAttemptFailed(relayRead *r, int e, const char *what) {
    relayTarget *t = &r->t[r->cur];
    int stale = !r->fresh && !r->replied && e && e != ETIMEDOUT && !r->retried;
    rrDropConn(r, e == 0);
    if (e == ETIMEDOUT) server.stat_remote_get_timeouts++;
    if (stale) {
        r->retried = 1;
    } else {
        r->why = sdscatprintf(r->why, "%s%s: %s", sdslen(r->why) ? "; " : "", t->uri, what);
        r->cur++;
        r->retried = 0;
    }
    rrNextAttempt(r);
}

static void rrFailErrno(relayRead *r, int e, const char *doing) {
    char what[128];
    if (e == ETIMEDOUT) snprintf(what, sizeof(what), "timeout");
    else if (e == EPROTO) snprintf(what, sizeof(what), "protocol error");
    else snprintf(what, sizeof(what), "%s%s%s", doing, *doing ? ": " : "", strerror(e));
    rrAttemptFailed(r, e, what);
}

/* A non-blocking connect to addr; -1 with errno if it failed at once. */
static int rrConnect(const char *addr) {
    struct sockaddr_storage sa;
    socklen_t salen;
    int kind = probeUriAddress(addr, &sa, &salen);
    if (kind == PROBE_URI_NONE) {
        errno = EINVAL;
        return -1;
    }
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, salen) == -1 && errno != EINPROGRESS) {
        int e = errno; /* EAGAIN from a unix socket: its backlog is full */
        close(fd);
        errno = e;
        return -1;
    }
    if (kind != PROBE_URI_UNIX) {
        anetEnableTcpNoDelay(NULL, fd);
        /* Same-host peers unpaced, as the server's own clients (tcp-congestion). */
        if (strcmp(server.tcp_congestion, "system") != 0) anetTuneLocalCongestion(fd);
    }
    return fd;
}

/* Starts the attempt at r->cur, or the read fails when none is left. */
static void rrNextAttempt(relayRead *r) {
    for (; r->cur < r->nt; r->cur++, r->retried = 0) {
        relayTarget *t = &r->t[r->cur];
        if (t->addr == NULL) {
            r->why = sdscatprintf(r->why, "%s%s", sdslen(r->why) ? "; " : "", t->uri);
            continue;
        }
        r->conn = r->retried ? NULL : idleTake(t->addr);
        r->fresh = r->conn == NULL;
        r->replied = 0;
        r->rpos = r->rlen = 0;
        r->got = 0;
        sdsfree(r->autherr);
        r->autherr = NULL;
        if (r->fresh) {
            int fd = rrConnect(t->addr);
            if (fd < 0) {
                int e = errno;
                r->why = sdscatprintf(r->why, "%s%s: connect: %s", sdslen(r->why) ? "; " : "", t->uri,
                                      e == EINVAL ? "not a numeric address" : strerror(e));
                continue;
            }
            r->conn = zcalloc(sizeof(relayConn));
            r->conn->addr = sdsdup(t->addr);
            r->conn->fd = fd;
        }
        r->send_auth = t->cred && (r->conn->auth == NULL || sdscmp(r->conn->auth, t->cred));
        sdsclear(r->out);
        if (r->send_auth) r->out = relayCatLogin(r->out, t->segid, t->cred);
        char segid[32], off[32], len[32];
        int l1 = ll2string(segid, sizeof(segid), (long long)t->segid);
        int l2 = ll2string(off, sizeof(off), (long long)t->offset);
        int l3 = ll2string(len, sizeof(len), (long long)r->len);
        r->out = sdscatprintf(r->out, "*4\r\n$8\r\nSEG.READ\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", l1, segid,
                              l2, off, l3, len);
        r->outpos = 0;
        r->phase = r->fresh ? PH_CONNECTING : PH_SENDING;
        r->deadline = monoMs() + r->timeout_ms;
        if (aeCreateFileEvent(server.el, r->conn->fd, AE_WRITABLE, rrEvent, r) == AE_ERR) {
            connClose(r->conn);
            r->conn = NULL;
            r->why = sdscatprintf(r->why, "%s%s: no room in the event loop", sdslen(r->why) ? "; " : "", t->uri);
            continue;
        }
        return;
    }
    rrFailAll(r);
}

/* One reply line from the buffer: 1 (NUL-terminated at *line, CRLF
 * consumed), 0 (not all here yet), -1 (too long or not CRLF-terminated). */
static int rrLine(relayRead *r, char **line, size_t *len) {
    char *p = r->rbuf + r->rpos;
    size_t avail = r->rlen - r->rpos;
    char *nl = memchr(p, '\n', avail);
    if (nl == NULL) return avail >= RELAY_LINE_MAX ? -1 : 0;
    size_t n = (size_t)(nl - p);
    if (n == 0 || p[n - 1] != '\r' || n >= RELAY_LINE_MAX) return -1;
    p[n - 1] = '\0';
    *line = p;
    *len = n - 1;
    r->rpos += n + 1;
    return 1;
}

/* Makes what was read of the reply progress. */
static void rrParse(relayRead *r) {
    char *line;
    size_t ll;
    for (;;) {
        if (r->phase == PH_AUTH_LINE) {
            int got = rrLine(r, &line, &ll);
            if (got == 0) return;
            if (got < 0) return rrFailErrno(r, EPROTO, "");
            if (relayLoginRefused(line)) r->autherr = sdsnew(line + 1);
            r->phase = PH_HEADER;
        } else if (r->phase == PH_HEADER) {
            int got = rrLine(r, &line, &ll);
            if (got == 0) return;
            if (got < 0) return rrFailErrno(r, EPROTO, "");
            if (line[0] == '-') {
                /* Refused in step with the stream: the connection stays good. */
                char what[RELAY_LINE_MAX + 8];
                snprintf(what, sizeof(what), "%s", r->autherr ? r->autherr : line + 1);
                return rrAttemptFailed(r, 0, what);
            }
            /* Refused the login, yet answered the read: a bulk's body is
             * still to come, so the connection is out of step (kept, its
             * next read would take that body for its reply): closed. */
            if (r->autherr) return rrAttemptFailed(r, EPROTO, r->autherr);
            long long blen;
            if (line[0] != '$' || !string2ll(line + 1, ll - 1, &blen) || blen != (long long)r->len)
                return rrAttemptFailed(r, EPROTO, "unexpected reply to SEG.READ");
            if (r->send_auth) {
                sdsfree(r->conn->auth);
                r->conn->auth = sdsdup(r->t[r->cur].cred);
            }
            if (r->bytes == NULL) {
                r->bytes = sdsnewlen(NULL, (size_t)r->len);
                r->c->relay->mem += sdsAllocSize(r->bytes);
            }
            r->phase = PH_BODY;
        } else if (r->phase == PH_BODY) {
            size_t avail = r->rlen - r->rpos;
            if (r->got < r->len) {
                size_t take = r->len - r->got < avail ? (size_t)(r->len - r->got) : avail;
                memcpy(r->bytes + r->got, r->rbuf + r->rpos, take);
                r->got += take;
                r->rpos += take;
                avail -= take;
                if (r->got < r->len) return;
            }
            if (avail < 2) return;
            if (r->rbuf[r->rpos] != '\r' || r->rbuf[r->rpos + 1] != '\n')
                return rrAttemptFailed(r, EPROTO, "protocol error while reading the bytes");
            r->rpos += 2;
            rrDropConn(r, 1);
            return rrDone(r, NULL);
        } else {
            return;
        }
    }
}

static void rrWritable(relayRead *r) {
    int fd = r->conn->fd;
    if (r->phase == PH_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1) err = errno;
        if (err) return rrFailErrno(r, err, "connect");
        r->phase = PH_SENDING;
    }
    while (r->outpos < sdslen(r->out)) {
        ssize_t w = send(fd, r->out + r->outpos, sdslen(r->out) - r->outpos, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            return rrFailErrno(r, errno, "write");
        }
        r->outpos += (size_t)w;
        r->deadline = monoMs() + r->timeout_ms;
    }
    aeDeleteFileEvent(server.el, fd, AE_WRITABLE);
    r->phase = r->send_auth ? PH_AUTH_LINE : PH_HEADER;
    if (aeCreateFileEvent(server.el, fd, AE_READABLE, rrEvent, r) == AE_ERR)
        rrAttemptFailed(r, EIO, "no room in the event loop");
}

static void rrReadable(relayRead *r) {
    int fd = r->conn->fd;
    ssize_t n;
    if (r->phase == PH_BODY && r->got < r->len && r->rpos == r->rlen) {
        /* The bulk goes straight where it is kept, not through rbuf. */
        n = read(fd, r->bytes + r->got, (size_t)(r->len - r->got));
        if (n > 0) r->got += (uint64_t)n;
    } else {
        if (r->rpos == r->rlen) {
            r->rpos = r->rlen = 0;
        } else if (r->rpos > 0) {
            memmove(r->rbuf, r->rbuf + r->rpos, r->rlen - r->rpos);
            r->rlen -= r->rpos;
            r->rpos = 0;
        }
        n = read(fd, r->rbuf + r->rlen, RELAY_RBUF - r->rlen);
        if (n > 0) r->rlen += (size_t)n;
    }
    if (n == 0) return rrFailErrno(r, ECONNRESET, "read");
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        return rrFailErrno(r, errno, "read");
    }
    r->replied = 1;
    r->deadline = monoMs() + r->timeout_ms;
    rrParse(r);
}

static void rrEvent(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)fd;
    relayRead *r = privdata;
    if (r->phase == PH_CONNECTING || r->phase == PH_SENDING) {
        if (mask & AE_WRITABLE) rrWritable(r);
    } else if (mask & AE_READABLE) {
        rrReadable(r);
    }
}

/* First the start (from the loop: a read never completes inside the
 * command that asked for it), then the progress deadline. */
static int rrTimer(aeEventLoop *el, long long id, void *clientData) {
    (void)el;
    relayRead *r = clientData;
    r->timer = -1; /* ae owns it during the call: rrRelease must not delete it */
    if (r->phase == PH_START) {
        rrNextAttempt(r);
    } else {
        mstime_t now = monoMs();
        if (now >= r->deadline) {
            rrFailErrno(r, ETIMEDOUT, "");
        }
    }
    if (r->state != RR_RUNNING) return AE_NOMORE;
    r->timer = id;
    long long left = r->deadline - monoMs();
    return left < 1 ? 1 : left > 3600000 ? 3600000 : (int)left;
}

/* ---- a client's reads ---------------------------------------------------- */

static sds rrRefuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static sds rrRefuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sds s = sdscatvprintf(sdsempty(), fmt, ap);
    va_end(ap);
    return s;
}

/* Starts a queued read, or refuses it (the server-wide cap). */
static void rrStart(relayRead *r) {
    relayClient *rc = r->c->relay;
    if (server.remote_get_inflight >= server.remote_get_max_inflight) {
        server.stat_remote_get_refused++;
        serverLog(LL_VERBOSE, "Refused a read from a mounted segment for client id=%llu: %lld in flight "
                  "(remote-get-max-inflight)", (unsigned long long)r->c->id, server.remote_get_inflight);
        rrDone(r, rrRefuse("-REMOTE too many reads from mounted segments in flight (remote-get-max-inflight is %lld): "
                           "retry, or read the value with GET.REPLICAS",
                           server.remote_get_max_inflight));
        return;
    }
    r->state = RR_RUNNING;
    rc->running++;
    server.remote_get_inflight++;
    r->why = sdsempty();
    r->out = sdsempty();
    r->rbuf = zmalloc(RELAY_RBUF);
    buildTargets(r);
    r->phase = PH_START;
    r->timer = aeCreateTimeEvent(server.el, 0, rrTimer, r, NULL);
    if (r->timer == AE_ERR) {
        r->timer = -1;
        rrDone(r, sdsnew("-REMOTE cannot read the value from its mounted segment: no room in the event loop"));
    }
}

/* Starts queued reads in the order asked for while the client is under
 * its cap. A refusal finishes a read here and calls back in: the outer
 * call carries on. */
static void clientPump(relayClient *rc) {
    if (rc->pumping) return;
    rc->pumping = 1;
    while (rc->nextq < rc->n && rc->running < server.remote_get_max_inflight_client) {
        relayRead *r = rc->r[rc->nextq++];
        if (r->state == RR_QUEUED) rrStart(r);
    }
    rc->pumping = 0;
}

static unsigned idxSlot(const relayClient *rc, const storeObj *o) {
    uint64_t h = (uint64_t)(uintptr_t)o * 0x9E3779B97F4A7C15ULL;
    return (unsigned)(h >> 32) & (unsigned)(rc->idxcap - 1);
}

static void idxInsert(relayClient *rc, int i) {
    unsigned s = idxSlot(rc, rc->r[i]->o);
    while (rc->idx[s]) s = (s + 1) & (unsigned)(rc->idxcap - 1);
    rc->idx[s] = i + 1;
}

static relayRead *findRead(relayClient *rc, storeObj *o, uint64_t off, uint64_t len) {
    if (rc == NULL || rc->idxcap == 0) return NULL;
    for (unsigned s = idxSlot(rc, o); rc->idx[s]; s = (s + 1) & (unsigned)(rc->idxcap - 1)) {
        relayRead *r = rc->r[rc->idx[s] - 1];
        if (r->o == o && r->off <= off && len <= r->len && off - r->off <= r->len - len) return r;
    }
    return NULL;
}

/* A read whose outcome is known at once (a refusal): no I/O. */
static relayRead *addRead(client *c, storeObj *o, uint64_t off, uint64_t len, long long timeout_ms) {
    if (c->relay == NULL) c->relay = zcalloc(sizeof(relayClient));
    relayClient *rc = c->relay;
    if (rc->n == rc->cap) {
        rc->cap = rc->cap ? rc->cap * 2 : 4;
        rc->r = zrealloc(rc->r, sizeof(relayRead *) * (size_t)rc->cap);
        zfree(rc->idx);
        rc->idxcap = rc->cap * 2;
        rc->idx = zcalloc(sizeof(int) * (size_t)rc->idxcap);
        for (int i = 0; i < rc->n; i++) idxInsert(rc, i);
    }
    relayRead *r = zcalloc(sizeof(*r));
    r->c = c;
    r->o = o;
    storeObjIncrRef(o);
    r->off = off;
    r->len = len;
    r->timeout_ms = timeout_ms < 1 ? 1 : timeout_ms;
    r->timer = -1;
    r->state = RR_QUEUED;
    rc->pending++;
    rc->r[rc->n] = r;
    idxInsert(rc, rc->n++);
    return r;
}

int relayWant(client *c, storeObj *o, uint64_t off, uint64_t len, long long timeout_ms) {
    if (storeObjLocalPtr(o)) return 0;
    relayRead *r = findRead(c->relay, o, off, len);
    if (r) return r->state != RR_DONE;
    r = addRead(c, o, off, len, timeout_ms);
    relayClient *rc = c->relay;
    uint64_t max = (uint64_t)server.remote_get_max_size;
    if (len > max) {
        rrDone(r, rrRefuse("-REMOTE the value (%llu bytes) is held in a mounted segment and is larger than "
                           "remote-get-max-size: read it with GET.REPLICAS",
                           (unsigned long long)len));
        return 0;
    }
    if (rc->want + len > max) {
        rrDone(r, rrRefuse("-REMOTE the values this command reads from mounted segments (%llu bytes and more) "
                           "are together larger than remote-get-max-size: read them with GET.REPLICAS",
                           (unsigned long long)(rc->want + len)));
        return 0;
    }
    if (!(c->flags & CLIENT_MAY_BLOCK) || (c->flags & CLIENT_IN_EXEC)) {
        rrDone(r, sdsnew("-REMOTE the value is held in a mounted segment and is not relayed inside MULTI/EXEC "
                         "(that would block the transaction): read it outside, or with GET.REPLICAS"));
        return 0;
    }
    rc->want += len;
    if (len == 0) {
        r->bytes = sdsempty();
        rrDone(r, NULL);
        return 0;
    }
    storeLeaseGrant(o, server.lease_ttl, 0); /* the server reads it: not released early */
    clientPump(rc);
    return r->state != RR_DONE;
}

int relayBlockIfPending(client *c) {
    if (c->relay == NULL || c->relay->pending == 0) return 0;
    blockClient(c, NULL);
    c->flags |= CLIENT_RERUN;
    return 1;
}

const char *relayBytes(client *c, storeObj *o, uint64_t off, uint64_t len) {
    const char *p = storeObjLocalPtr(o);
    if (p) return p + off;
    relayRead *r = findRead(c->relay, o, off, len);
    if (r == NULL || r->state != RR_DONE) {
        /* A caller that did not ask first: a bug, but not the client's. */
        addReplyError(c, "-REMOTE the value was not read from its mounted segment");
        return NULL;
    }
    if (r->bytes == NULL) {
        addReplyError(c, r->err);
        return NULL;
    }
    return r->bytes + (off - r->off);
}

const char *relayFetch(client *c, storeObj *o, uint64_t off, uint64_t len, long long timeout_ms) {
    if (relayWant(c, o, off, len, timeout_ms) && relayBlockIfPending(c)) return NULL;
    return relayBytes(c, o, off, len);
}

static void readyRemove(client *c) {
    for (size_t i = 0; i < nready; i++) {
        if (relayReady[i] == c) {
            relayReady[i] = relayReady[--nready];
            return;
        }
    }
}

void relayClientReset(client *c) {
    relayClient *rc = c->relay;
    if (rc == NULL) return;
    if (rc->ready) readyRemove(c);
    for (int i = 0; i < rc->n; i++) {
        relayRead *r = rc->r[i];
        if (r->state == RR_RUNNING) server.remote_get_inflight--;
        rrRelease(r);
        sdsfree(r->bytes);
        sdsfree(r->err);
        storeObjDecrRef(r->o);
        zfree(r);
    }
    zfree(rc->r);
    zfree(rc->idx);
    zfree(rc);
    c->relay = NULL;
}

size_t relayClientMemory(client *c) {
    relayClient *rc = c->relay;
    if (rc == NULL) return 0;
    return sizeof(*rc) + (sizeof(relayRead *) + 2 * sizeof(int)) * (size_t)rc->cap +
           sizeof(relayRead) * (size_t)rc->n + (size_t)rc->running * RELAY_RBUF + rc->mem;
}

void relayBeforeSleep(void) {
    /* A command run again here may block again (its key was rewritten to
     * another remote value meanwhile): its client comes back here when
     * those reads are done, never during this pass, since reads finish
     * only from the event loop. */
    while (nready) {
        client *c = relayReady[--nready];
        c->relay->ready = 0;
        c->flags &= ~CLIENT_RERUN;
        resumeBlockedCommand(c);
    }
}

/* ---- the GET family ------------------------------------------------------ */

const char *storeObjFetch(client *c, storeObj *o, uint64_t off, uint64_t len) {
    return relayFetch(c, o, off, len, server.remote_get_timeout);
}

int addReplyRemoteBytes(client *c, storeObj *o, uint64_t off, uint64_t len) {
    const char *p = relayFetch(c, o, off, len, server.remote_get_timeout);
    if (p == NULL) return C_ERR;
    addReplyBulk(c, p, (size_t)len);
    return C_OK;
}
