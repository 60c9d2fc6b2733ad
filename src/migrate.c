/* migrate.c -- DUMP, RESTORE, RESTORE-ASKING and MIGRATE.
 *
 * Payloads. DUMP returns, and RESTORE takes, the payload of dump.c: the
 * value's bytes plus the store metadata that must survive a move (the
 * writer's checksum, hard pin, soft pin time left, creation time), behind
 * Redis's version+CRC64 trailer. RESTORE checks the whole payload before it
 * touches anything, then builds the new object completely (in the pool,
 * like SET) before the keyspace changes, so a refused RESTORE changes
 * nothing; REPLACE goes through storeSet, which defers freeing a leased old
 * version's space exactly as SET does.
 *
 * MIGRATE is Redis's: synchronous. The event loop blocks while the keys go
 * out and the target answers, at most `timeout` ms without progress per
 * operation (connect, send, each reply), which is what makes it atomic for
 * the keys it moves: nothing else runs between sending a key and deleting
 * it here. The RESTOREs (RESTORE-ASKING in cluster mode, so the target
 * accepts them for a slot it is importing) are pipelined for all keys and
 * sent with gathered writes: small pieces are framed in one heap buffer,
 * and a large value goes out straight from segment memory between its
 * framing and its trailer, its CRC chained over the pieces (dump.c). A
 * 64 MiB value is then a handful of sendmsg calls and no copy in user space.
 * Connections to targets are cached for reuse (64 at most, closed after
 * 10 s idle: migrateCloseTimedoutSockets), and as in Redis a failure on a
 * cached connection before any reply is retried once on a fresh one: the
 * target may simply have closed it.
 *
 * Remote bytes. A store object may live only in segments that client
 * processes mount; the server holds the layout but not the bytes. DUMP and
 * MIGRATE then read them from the segment's host first, as GET does
 * (relay.c): without blocking the loop, the client blocked meanwhile and
 * the command run again once they are here. A host is not a MIGRATE
 * target: it may be stopped or hostile, and waiting for it in the loop
 * would freeze every client, so only the connection to the target is
 * synchronous.
 *
 * Everything read from a peer is checked before it is used: reply lines are
 * bounded (a longer one is a protocol error and the connection is
 * dropped), a bulk header must announce exactly the length asked for, and
 * its bytes must end with CRLF. A connection that saw any error or timeout
 * is closed, never reused out of step.
 */
#include "migrate.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "anet.h"
#include "crc.h"
#include "dump.h"
#include "notify.h"
#include "relay.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define MIGRATE_SOCKET_CACHE_ITEMS 64
#define MIGRATE_SOCKET_CACHE_TTL_MS 10000
#define DUMP_REMOTE_TIMEOUT_MS 5000     /* DUMP of a value in a mounted segment */
#define SYNC_LINE_MAX 1024              /* longest reply line accepted from a peer */
#define SYNC_RBUF (16 * 1024)
#define MIGRATE_INLINE_MAX (16 * 1024)  /* smaller values are copied into the request */
#define OOM_ERR "-OOM not enough space in the pool for this value"
#define BUSYKEY_ERR "-BUSYKEY Target key name already exists."
#define IOERR_CONNECT "-IOERR error or timeout connecting to the client"

/* ---- blocking I/O with deadlines ----------------------------------------- */

/* One cached connection to a MIGRATE target ("host:port"). Its fd stays
 * non-blocking; every wait is a poll bounded by the operation's deadline. */
typedef struct syncConn {
    sds name;
    int fd;
    mstime_t last_use;
    size_t rpos, rlen;
    char rbuf[SYNC_RBUF];
} syncConn;

static syncConn *connCache[MIGRATE_SOCKET_CACHE_ITEMS];
static int connCacheLen;

/* Waits for fd to become ready, until deadline. 0, or -1 with errno
 * (ETIMEDOUT when the deadline passed). */
static int syncWait(int fd, short events, mstime_t deadline) {
    for (;;) {
        long long left = deadline - monoMs();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        return 0; /* readable, writable, or an error the next call reports */
    }
}

/* A non-blocking connect finished within the deadline? */
static int syncConnectWait(int fd, mstime_t deadline) {
    if (syncWait(fd, POLLOUT, deadline) != 0) return -1;
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) return -1;
    if (soerr) {
        errno = soerr;
        return -1;
    }
    return 0;
}

/* A connected non-blocking TCP socket, or -1 with err set. Every address
 * the name resolves to is tried, within one deadline. (The resolution
 * itself blocks, as in Redis; targets are normally given as addresses.) */
static int syncTcpConnect(const char *host, int port, long long timeout_ms, char *err, size_t errlen) {
    char portstr[16];
    struct addrinfo hints, *res, *p;
    snprintf(portstr, sizeof(portstr), "%d", port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rv = getaddrinfo(host, portstr, &hints, &res);
    if (rv != 0) {
        snprintf(err, errlen, "%s: %s", host, gai_strerror(rv));
        return -1;
    }
    mstime_t deadline = monoMs() + timeout_ms;
    int fd = -1;
    snprintf(err, errlen, "%s:%d: no usable address", host, port);
    for (p = res; p; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, p->ai_addr, p->ai_addrlen) == 0 ||
            (errno == EINPROGRESS && syncConnectWait(fd, deadline) == 0))
            break;
        snprintf(err, errlen, "connect %s:%d: %s", host, port, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    anetEnableTcpNoDelay(NULL, fd);
    /* Same-host peers unpaced, as the server's own clients (tcp-congestion). */
    if (strcmp(server.tcp_congestion, "system") != 0) anetTuneLocalCongestion(fd);
    return fd;
}

/* Sends every byte of iov (consumed). The deadline is a progress bound:
 * timeout_ms may pass without a byte moving, not for the whole transfer,
 * so a large value on a slow link is not cut off (Redis bounds each 64 KiB
 * chunk the same way). 0, or -1 with errno. */
static int syncSendv(int fd, struct iovec *iov, int iovcnt, long long timeout_ms) {
    while (iovcnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(iovcnt > IOV_MAX ? IOV_MAX : iovcnt)};
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            if (syncWait(fd, POLLOUT, monoMs() + timeout_ms) != 0) return -1;
            continue;
        }
        anetIovAdvance(&iov, &iovcnt, (size_t)w);
    }
    return 0;
}

/* Some bytes into dst (at most cap), waiting up to timeout_ms for them.
 * >0, or -1 with errno (ECONNRESET for an orderly close). */
static ssize_t syncReadSome(int fd, char *dst, size_t cap, long long timeout_ms) {
    for (;;) {
        ssize_t r = read(fd, dst, cap);
        if (r > 0) return r;
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (syncWait(fd, POLLIN, monoMs() + timeout_ms) != 0) return -1;
    }
}

/* One CRLF-terminated line, without the CRLF, NUL-terminated in line
 * (cap bytes). A line that does not fit is a protocol error (EPROTO): the
 * peer is not answering what we asked. Returns its length or -1. */
static ssize_t syncReadLine(syncConn *sc, char *line, size_t cap, long long timeout_ms) {
    size_t n = 0;
    for (;;) {
        while (sc->rpos < sc->rlen) {
            char ch = sc->rbuf[sc->rpos++];
            if (ch == '\n') {
                if (n == 0 || line[n - 1] != '\r') goto proto;
                line[--n] = '\0';
                return (ssize_t)n;
            }
            if (n + 1 >= cap) goto proto;
            line[n++] = ch;
        }
        ssize_t r = syncReadSome(sc->fd, sc->rbuf, sizeof(sc->rbuf), timeout_ms);
        if (r < 0) return -1;
        sc->rpos = 0;
        sc->rlen = (size_t)r;
    }
proto:
    errno = EPROTO;
    return -1;
}

/* ---- the connection cache ------------------------------------------------ */

static void connFree(syncConn *sc) {
    close(sc->fd);
    sdsfree(sc->name);
    zfree(sc);
}

static void connCacheRemoveAt(int i) {
    connFree(connCache[i]);
    connCache[i] = connCache[--connCacheLen];
}

static syncConn *connCacheFind(const char *name) {
    for (int i = 0; i < connCacheLen; i++)
        if (!strcmp(connCache[i]->name, name)) return connCache[i];
    return NULL;
}

/* Any error or timeout on a connection ends it: a reply may be half read. */
static void connCacheClose(syncConn *sc) {
    for (int i = 0; i < connCacheLen; i++) {
        if (connCache[i] == sc) {
            connCacheRemoveAt(i);
            return;
        }
    }
    connFree(sc);
}

/* Caches a fresh connection; when full, the least recently used goes. */
static syncConn *connCacheAdd(const char *name, int fd) {
    if (connCacheLen == MIGRATE_SOCKET_CACHE_ITEMS) {
        int lru = 0;
        for (int i = 1; i < connCacheLen; i++)
            if (connCache[i]->last_use < connCache[lru]->last_use) lru = i;
        connCacheRemoveAt(lru);
    }
    syncConn *sc = zmalloc(sizeof(*sc));
    sc->name = sdsnew(name);
    sc->fd = fd;
    sc->last_use = monoMs();
    sc->rpos = sc->rlen = 0;
    connCache[connCacheLen++] = sc;
    return sc;
}

void migrateCloseTimedoutSockets(void) {
    mstime_t now = monoMs();
    for (int i = 0; i < connCacheLen;) {
        if (now - connCache[i]->last_use > MIGRATE_SOCKET_CACHE_TTL_MS) connCacheRemoveAt(i);
        else i++;
    }
}

/* ---- framing requests ---------------------------------------------------- */

/* A request being framed: small pieces are copied into one heap buffer,
 * large ones referenced where they lie. Pieces record buffer offsets, not
 * pointers, since the buffer moves as it grows; reqIov resolves them. */
typedef struct reqPiece {
    const char *ref;    /* NULL: bytes [off, off+len) of the heap buffer */
    size_t off, len;
} reqPiece;

typedef struct reqBuf {
    sds buf;
    reqPiece *pieces;
    int n, cap;
} reqBuf;

static void reqInit(reqBuf *rb) {
    rb->buf = sdsempty();
    rb->pieces = NULL;
    rb->n = rb->cap = 0;
}

static void reqFree(reqBuf *rb) {
    sdsfree(rb->buf);
    zfree(rb->pieces);
}

static void reqPush(reqBuf *rb, const char *ref, size_t off, size_t len) {
    if (rb->n == rb->cap) {
        rb->cap = rb->cap ? rb->cap * 2 : 16;
        rb->pieces = zrealloc(rb->pieces, sizeof(reqPiece) * (size_t)rb->cap);
    }
    rb->pieces[rb->n++] = (reqPiece){ref, off, len};
}

static void reqCopy(reqBuf *rb, const void *p, size_t len) {
    size_t off = sdslen(rb->buf);
    rb->buf = sdscatlen(rb->buf, p, len);
    reqPiece *last = rb->n ? &rb->pieces[rb->n - 1] : NULL;
    if (last && last->ref == NULL && last->off + last->len == off) last->len += len;
    else reqPush(rb, NULL, off, len);
}

static void reqRef(reqBuf *rb, const char *p, size_t len) {
    if (len < MIGRATE_INLINE_MAX) reqCopy(rb, p, len);
    else reqPush(rb, p, 0, len);
}

static void reqHeader(reqBuf *rb, char type, unsigned long long n) {
    char hdr[32];
    int hl = snprintf(hdr, sizeof(hdr), "%c%llu\r\n", type, n);
    reqCopy(rb, hdr, (size_t)hl);
}

static void reqBulk(reqBuf *rb, const char *p, size_t len) {
    reqHeader(rb, '$', len);
    reqCopy(rb, p, len);
    reqCopy(rb, "\r\n", 2);
}

static void reqBulkLL(reqBuf *rb, long long v) {
    char num[32];
    int n = ll2string(num, sizeof(num), v);
    reqBulk(rb, num, (size_t)n);
}

/* The pieces as an iovec array (caller frees); *cnt gets its length. */
static struct iovec *reqIov(reqBuf *rb, int *cnt) {
    struct iovec *iov = zmalloc(sizeof(*iov) * (size_t)(rb->n ? rb->n : 1));
    for (int i = 0; i < rb->n; i++) {
        reqPiece *p = &rb->pieces[i];
        iov[i].iov_base = (void *)(p->ref ? p->ref : rb->buf + p->off);
        iov[i].iov_len = p->len;
    }
    *cnt = rb->n;
    return iov;
}

static int reqSend(reqBuf *rb, int fd, long long timeout_ms) {
    int cnt;
    struct iovec *iov = reqIov(rb, &cnt);
    int rc = syncSendv(fd, iov, cnt, timeout_ms);
    zfree(iov);
    return rc;
}

/* ---- DUMP ---------------------------------------------------------------- */

/* What of o goes into a payload. A value with no store metadata (SET's) is
 * a plain STRING; anything with a checksum, a pin or a creation time is an
 * OBJECT, so a pin put on a SET value moves with it too. */
void dumpInfoFromObj(storeObj *o, dumpInfo *d) {
    memset(d, 0, sizeof(*d));
    d->value_len = o->len;
    storeObjExt *ext = o->ext;
    long long pin_left = ext && ext->softpin_until_ms > server.monotime ? ext->softpin_until_ms - server.monotime : 0;
    int hard = (o->flags & OBJ_FLAG_HARDPIN) != 0;
    if (!hard && !pin_left && !(ext && (ext->created_ms || ext->checksum))) {
        d->type = DUMP_TYPE_STRING;
        return;
    }
    d->type = DUMP_TYPE_OBJECT;
    d->flags = hard ? DUMP_F_HARDPIN : 0;
    d->created_ms = ext && ext->created_ms > 0 ? ext->created_ms : 0;
    d->softpin_ms = pin_left;
    if (ext && ext->checksum) {
        d->flags |= DUMP_F_CHECKSUM;
        d->checksum = ext->checksum;
        d->checksum_len = sdslen(ext->checksum);
    }
}

void dumpCommand(client *c) {
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o == NULL) {
        addReplyNull(c);
        return;
    }
    dumpInfo d;
    dumpInfoFromObj(o, &d);
    size_t plen = dumpPrefixLen(&d);
    if (o->len > SDS_MAX_LEN - plen - DUMP_TRAILER_LEN) {
        addReplyError(c, "ERR value too large to DUMP (use MIGRATE)");
        return;
    }
    size_t vlen = (size_t)o->len;
    /* A value only in a mounted segment: its bytes from the host (relay.c),
     * the client blocked meanwhile and DUMP run again once they are here. */
    const char *value = storeObjLocalPtr(o);
    if (value == NULL && (value = relayFetch(c, o, 0, vlen, DUMP_REMOTE_TIMEOUT_MS)) == NULL) return;
    sds payload = sdsnewlen(NULL, plen + vlen + DUMP_TRAILER_LEN);
    unsigned char *p = (unsigned char *)payload;
    dumpWritePrefix(&d, p);
    if (vlen) memcpy(payload + plen, value, vlen);
    dumpWriteTrailer(crc64(0, p, plen + vlen), p + plen + vlen);
    addReplyBulkSds(c, payload);
}

/* ---- RESTORE / RESTORE-ASKING -------------------------------------------- */

/* The object a parsed payload describes, its bytes copied in (the pool or
 * the heap, as for SET), or NULL when there is no room. RESTORE and the
 * log's loader (aof.c) both build objects here. */
storeObj *dumpObjectCreate(sds key, const dumpInfo *d) {
    storeObj *o = storeObjCreateFrom(d->value, (size_t)d->value_len);
    if (o == NULL) return NULL;
    dumpObjectDress(o, key, d);
    return o;
}

void dumpObjectDress(storeObj *o, sds key, const dumpInfo *d) {
    if (d->type == DUMP_TYPE_OBJECT) {
        storeObjExt *ext = storeObjGetExt(o);
        storeObjSetCreated(o, d->created_ms);
        storeObjSetKey(o, key); /* the data plane checks it (store.h) */
        if (d->flags & DUMP_F_CHECKSUM) ext->checksum = sdsnewlen(d->checksum, d->checksum_len);
        if (d->softpin_ms > 0) {
            long long ms = storeSoftPinBound(d->softpin_ms);
            ext->softpin_until_ms = addSaturate(server.monotime, ms);
        }
        if (d->flags & DUMP_F_HARDPIN) o->flags |= OBJ_FLAG_HARDPIN;
    }
}

/* RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]: the
 * checks in Redis 7's order, so the same bad request gets the same error;
 * nothing changes until every one has passed and the object is built. */
void restoreCommand(client *c) {
    sds key = c->argv[1];
    int replace = 0, absttl = 0;
    long long ttl, idle = -1, freq = -1;
    for (int j = 4; j < c->argc; j++) {
        const char *opt = c->argv[j];
        int more = c->argc - j - 1;
        if (!strcasecmp(opt, "replace")) {
            replace = 1;
        } else if (!strcasecmp(opt, "absttl")) {
            absttl = 1;
        } else if (!strcasecmp(opt, "idletime") && more >= 1 && freq == -1) {
            if (getLongLongFromObjectOrReply(c, c->argv[++j], &idle, NULL) != C_OK) return;
            if (idle < 0) {
                addReplyError(c, "ERR Invalid IDLETIME value, must be >= 0");
                return;
            }
        } else if (!strcasecmp(opt, "freq") && more >= 1 && idle == -1) {
            /* Accepted for Redis's sake; eviction here is LRU only. */
            if (getLongLongFromObjectOrReply(c, c->argv[++j], &freq, NULL) != C_OK) return;
            if (freq < 0 || freq > 255) {
                addReplyError(c, "ERR Invalid FREQ value, must be >= 0 and <= 255");
                return;
            }
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    if (checkKeyLength(c, key) != C_OK) return;
    if (!replace && storeLookupWrite(key) != NULL) {
        addReplyError(c, BUSYKEY_ERR);
        return;
    }
    if (getLongLongFromObjectOrReply(c, c->argv[2], &ttl, NULL) != C_OK) return;
    if (ttl < 0) {
        addReplyError(c, "ERR Invalid TTL value, must be >= 0");
        return;
    }
    dumpInfo d;
    int prc = dumpParse(c->argv[3], sdslen(c->argv[3]), &d);
    if (prc != DUMP_OK) {
        addReplyError(c, prc == DUMP_ERR_CHECKSUM ? DUMP_ERR_CHECKSUM_MSG : DUMP_ERR_FORMAT_MSG);
        return;
    }
    if (storeValueTooBig(d.value_len) != NULL) {
        addReplyError(c, storeValueTooBig(d.value_len));
        return;
    }
    long long expire = -1;
    if (ttl) {
        expire = absttl ? ttl : addSaturate(server.mstime, ttl);
        if (expire <= server.mstime) {
            /* Already expired: restored and expired at once, as Redis does
             * (the old value goes with REPLACE). */
            if (replace && storeDelete(key)) notifyKeyspaceEvent(NOTIFY_GENERIC, "del", key);
            addReplyOk(c);
            return;
        }
    }
    storeObj *o = dumpObjectCreate(key, &d);
    if (o == NULL) {
        server.stat_oom_rejections++;
        addReplyError(c, OOM_ERR);
        return;
    }
    if (idle >= 0) {
        /* The LRU clock is 32 bits of ms (evict.c): idle times beyond it saturate. */
        long long idle_ms = idle > (long long)UINT32_MAX / 1000 ? (long long)UINT32_MAX : idle * 1000;
        o->lru = (uint32_t)(storeLruClock() - (uint32_t)idle_ms);
    }
    /* Redis removes a replaced key before adding the new one, so even then
     * the key is announced as new; storeSet only announces keys it adds. */
    if (replace && (server.notify_mask & NOTIFY_NEW) && storeLookupWrite(key))
        notifyKeyspaceEvent(NOTIFY_NEW, "new", key);
    storeSet(key, o, expire, 0);
    notifyKeyspaceEvent(NOTIFY_GENERIC, "restore", key);
    addReplyOk(c);
}

/* ---- MIGRATE ------------------------------------------------------------- */

/* The cached connection to host:port, or a new one; NULL (and the IOERR
 * reply Redis gives) if it cannot be made within the timeout. */
static syncConn *migrateGetSocket(client *c, sds host, long long port, long long timeout, int *fresh) {
    sds name = sdscatprintf(sdsempty(), "%s:%lld", host, port);
    syncConn *sc = connCacheFind(name);
    *fresh = sc == NULL;
    if (sc == NULL) {
        char err[ANET_ERR_LEN];
        int fd = syncTcpConnect(host, (int)port, timeout, err, sizeof(err));
        if (fd < 0) {
            serverLog(LL_VERBOSE, "MIGRATE: cannot connect to %s: %s", name, err);
            addReplyError(c, IOERR_CONNECT);
            sdsfree(name);
            return NULL;
        }
        sc = connCacheAdd(name, fd);
    }
    sc->last_use = monoMs();
    sdsfree(name);
    return sc;
}

/* One key on its way: the object (referenced), its bytes (in the pool, or
 * read from a mounted segment's host: relay.c keeps them), and its TTL. */
typedef struct migrateKey {
    sds key;
    storeObj *o;
    const char *bytes;
    long long ttl;
} migrateKey;

/* RESTORE[-ASKING] key ttl payload [REPLACE], the payload framed around the
 * value bytes, which are referenced where they lie. */
static void migrateFrameKey(reqBuf *rb, migrateKey *k, int replace) {
    dumpInfo d;
    unsigned char prefix[64], trailer[DUMP_TRAILER_LEN];
    dumpInfoFromObj(k->o, &d);
    size_t plen = dumpPrefixLen(&d);
    unsigned char *pp = plen <= sizeof(prefix) ? prefix : zmalloc(plen); /* a long checksum */
    dumpWritePrefix(&d, pp);
    uint64_t crc = crc64(crc64(0, pp, plen), (const unsigned char *)k->bytes, k->o->len);
    dumpWriteTrailer(crc, trailer);
    reqHeader(rb, '*', replace ? 5 : 4);
    if (server.cluster_enabled) reqBulk(rb, "RESTORE-ASKING", 14);
    else reqBulk(rb, "RESTORE", 7);
    reqBulk(rb, k->key, sdslen(k->key));
    reqBulkLL(rb, k->ttl);
    reqHeader(rb, '$', plen + k->o->len + DUMP_TRAILER_LEN);
    reqCopy(rb, pp, plen);
    reqRef(rb, k->bytes, (size_t)k->o->len);
    reqCopy(rb, trailer, sizeof(trailer));
    reqCopy(rb, "\r\n", 2);
    if (replace) reqBulk(rb, "REPLACE", 7);
    if (pp != prefix) zfree(pp);
}

/* MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
 *         [AUTH password] [AUTH2 username password] [KEYS key ...] */
void migrateCommand(client *c) {
    int copy = 0, replace = 0, first_key = 3, num_keys = 1;
    sds username = NULL, password = NULL;
    long long port, dbid, timeout;
    for (int j = 6; j < c->argc; j++) {
        const char *opt = c->argv[j];
        int more = c->argc - j - 1;
        if (!strcasecmp(opt, "copy")) {
            copy = 1;
        } else if (!strcasecmp(opt, "replace")) {
            replace = 1;
        } else if (!strcasecmp(opt, "auth") && more >= 1) {
            password = c->argv[++j];
        } else if (!strcasecmp(opt, "auth2") && more >= 2) {
            username = c->argv[++j];
            password = c->argv[++j];
        } else if (!strcasecmp(opt, "keys")) {
            if (sdslen(c->argv[3]) != 0) {
                addReplyError(c, "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string");
                return;
            }
            first_key = j + 1;
            num_keys = c->argc - j - 1;
            break; /* the rest are keys */
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    if (getLongLongFromObjectOrReply(c, c->argv[5], &timeout, NULL) != C_OK ||
        getLongLongFromObjectOrReply(c, c->argv[4], &dbid, NULL) != C_OK)
        return;
    if (dbid != 0) {
        addReplyError(c, "ERR destination-db must be 0 (Mooncake has one database)");
        return;
    }
    if (!string2ll(c->argv[2], sdslen(c->argv[2]), &port) || port < 1 || port > 65535) {
        addReplyError(c, "ERR Invalid port");
        return;
    }
    if (timeout <= 0) timeout = 1000;

    /* The keys that exist; none at all is +NOKEY, not an error (they may
     * simply have expired meanwhile). */
    migrateKey *keys = zcalloc(sizeof(*keys) * (size_t)(num_keys ? num_keys : 1));
    int n = 0;
    for (int j = 0; j < num_keys; j++) {
        sds key = c->argv[first_key + j];
        storeObj *o = storeLookupRead(key);
        if (o == NULL) continue;
        long long when = storeGetExpire(key);
        long long ttl = 0;
        if (when >= 0) {
            ttl = when - server.mstime;
            if (ttl < 1) ttl = 1; /* looked up, so not expired: keep it alive there */
        }
        storeObjIncrRef(o);
        keys[n++] = (migrateKey){key, o, NULL, ttl};
    }
    reqBuf rb;
    reqInit(&rb);
    if (n == 0) {
        addReplyStatus(c, "NOKEY");
        goto done;
    }

    /* Values only in mounted segments are read from their hosts first, all
     * of them, without blocking the loop (relay.c): the client waits, and
     * MIGRATE runs again from the top once they are here. A failure there
     * is reported before anything goes to the target. Only then is the
     * target talked to, synchronously, as in Redis. */
    int wait = 0;
    for (int j = 0; j < n; j++) wait |= relayWant(c, keys[j].o, 0, keys[j].o->len, timeout);
    if (wait && relayBlockIfPending(c)) goto done;
    for (int j = 0; j < n; j++) {
        migrateKey *k = &keys[j];
        k->bytes = relayBytes(c, k->o, 0, k->o->len);
        if (k->bytes == NULL) goto done; /* replied */
    }

    if (password) {
        reqHeader(&rb, '*', username ? 3 : 2);
        reqBulk(&rb, "AUTH", 4);
        if (username) reqBulk(&rb, username, sdslen(username));
        reqBulk(&rb, password, sdslen(password));
    }
    for (int j = 0; j < n; j++) migrateFrameKey(&rb, &keys[j], replace);

    migrateCloseTimedoutSockets();
    int may_retry = 1;
    for (;;) {
        int fresh, write_error = 0, socket_error = 0, timed_out = 0, error_from_target = 0;
        char line[SYNC_LINE_MAX], autherr[SYNC_LINE_MAX];
        syncConn *sc = migrateGetSocket(c, c->argv[1], port, timeout, &fresh);
        if (sc == NULL) goto done; /* replied */
        int j = 0;
        if (reqSend(&rb, sc->fd, timeout) != 0) {
            write_error = socket_error = 1;
            timed_out = errno == ETIMEDOUT;
        }
        autherr[0] = '\0';
        if (!socket_error && password) {
            if (syncReadLine(sc, line, sizeof(line), timeout) < 0) {
                socket_error = 1;
                timed_out = errno == ETIMEDOUT;
            } else if (line[0] == '-') {
                memcpy(autherr, line, sizeof(line));
            }
        }
        for (j = 0; !socket_error && j < n; j++) {
            if (syncReadLine(sc, line, sizeof(line), timeout) < 0) {
                socket_error = 1;
                timed_out = errno == ETIMEDOUT;
                break;
            }
            if (line[0] != '+' && line[0] != '-') {
                /* Not an answer to RESTORE: out of step, drop the connection. */
                socket_error = 1;
                break;
            }
            if (autherr[0] || line[0] == '-') {
                if (!error_from_target) {
                    error_from_target = 1;
                    addReplyErrorFormat(c, "ERR Target instance replied with error: %s",
                                        (autherr[0] ? autherr : line) + 1);
                }
            } else if (!copy) {
                if (storeDelete(keys[j].key)) notifyKeyspaceEvent(NOTIFY_GENERIC, "del", keys[j].key);
            }
        }
        if (socket_error) {
            connCacheClose(sc);
            /* Retried once, only if the target cannot have acted on
             * anything we sent: nothing answered yet, no timeout, and the
             * connection was a cached one that may have gone stale. */
            if (!error_from_target && j == 0 && may_retry && !timed_out && !fresh) {
                may_retry = 0;
                continue;
            }
            if (!error_from_target)
                addReplyErrorFormat(c, "-IOERR error or timeout %s to target instance",
                                    write_error ? "writing" : "reading");
            goto done;
        }
        sc->last_use = monoMs();
        if (!error_from_target) addReplyOk(c);
        break;
    }

done:
    reqFree(&rb);
    for (int j = 0; j < n; j++) {
        storeObjDecrRef(keys[j].o);
    }
    zfree(keys);
}
