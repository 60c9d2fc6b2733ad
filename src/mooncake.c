/* mooncake.c -- libmooncake: put/get of KVCache objects (SPEC §5).
 *
 * A handle holds one RESP connection to the metadata server and caches what
 * it learns about segments. Segment ids are never reused by a server, so a
 * cached segment description never goes stale: a segment that went away
 * simply fails its transfer, and the caller falls back to another replica.
 *
 * Put: PUT.START hands out one extent per replica; every replica is written
 * by the fastest path the segment offers (transfer below); PUT.END publishes
 * the value. If any replica cannot be written the put is revoked, so a value
 * is either complete in every replica the server listed or not there at all.
 *
 * Get: GET.REPLICAS grants a lease and lists the replicas; the first that
 * can be read is read. The lease clock starts before the request is sent,
 * so a read that ends after `lease-ms` from then is reported as
 * MC_ERR_LEASE_EXPIRED: the server may have reused that space meanwhile.
 *
 * Transfers, fastest first, per replica (mc_xfer below):
 *  - shm: the segment lists a unix:// endpoint we can reach, which sends us
 *    its memfd (SHM.ATTACH); mapped once per segment, then one memcpy.
 *  - rdma: the segment lists rdma:// and the buffer is registered.
 *  - tcp: SEG.WRITE/SEG.READ on a data connection to one of its endpoints
 *    (reusing the metadata connection when that is the endpoint), payload
 *    written from and read into the caller's buffer directly; with
 *    mc_set_streams, a large transfer is striped over several connections
 *    to the same peer (mc_tcp.c).
 *
 * Batches send one BATCH.* command for the metadata, do every shm copy, and
 * pipeline the tcp transfers of all items before reading any reply (runs of
 * small values as one SEG.WRITEV/SEG.READV, mc_tcp.c), so the round trips
 * overlap; one BATCH.PUT.END publishes what was written.
 *
 * A handle that hosts a segment names its owner and runs a heartbeat thread
 * (HEARTBEAT, reconnect, MOUNT again after -NEEDREMOUNT): see heartbeatMain.
 *
 * Device memory (CUDA) is staged through a pinned host buffer for shm and
 * tcp; a registered device buffer goes over RDMA directly (GPUDirect).
 *
 * Locking: one mutex per handle around every public call (mooncake.h).
 */
#include "mooncake.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mc_conn.h"
#include "mc_cuda.h"
#include "mc_host.h"
#include "mc_rdma.h"
#include "mc_tcp.h"

#define MC_MAX_ENDPOINTS 16
#define MC_MAX_REPLICAS 8

typedef struct mcSeg {
    uint64_t id, size, base;
    char *name, *rkey;
    char *endpoints[MC_MAX_ENDPOINTS];
    int nendpoints;
    char *map;                   /* shm mapping, NULL until attached */
    int shm_state;               /* 0 untried, 1 mapped, -1 not possible */
    struct mcSeg *next;
} mcSeg;

typedef struct mcDataConn {
    mcConn *conn;
    struct mcDataConn *next;
} mcDataConn;

typedef struct mcRegion {
    char *addr;
    size_t len;
    int mem;
    int rdma;                    /* registered with the RDMA engine */
    struct mcRegion *next;
} mcRegion;

struct mc_client {
    pthread_mutex_t lock;
    mcConn *meta;
    char *password;
    char meta_host[256];         /* replaces a wildcard host in endpoints */
    int connect_ms, io_ms;
    int transport, last_transport;
    char errbuf[512];
    mcSeg *segs;
    mcDataConn *dconns;
    int streams;                 /* tcp connections per peer for one transfer */
    mcTcpPool *tcp_pool;         /* their worker threads, made on first use */
    mcRegion *regions;
    mcRdma *rdma;
    int rdma_tried;
    char *stage;                 /* pinned staging for device memory */
    size_t stage_len;
    /* A hosted segment (mc_mount). */
    mcHost *host;
    char *host_mem;
    size_t host_size;
    int host_fd, host_owned;
    char *host_name;
    long long host_id;
    char *mount_argv[32];        /* the MOUNT command, kept to mount again */
    int mount_argc;
    /* The heartbeat thread of a hosting handle (see heartbeatMain). */
    pthread_t hb_thread;
    int hb_running, hb_stop;
    int hb_active;               /* inside heartbeatLocked (guards recursion) */
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
};

typedef struct { uint64_t seg, off, len; } mcReplica;

/* ---- small helpers ------------------------------------------------------- */

static long long nowUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int setErr(mc_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int setErr(mc_client *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errbuf, sizeof(c->errbuf), fmt, ap);
    va_end(ap);
    return code;
}

/* A server error reply as an MC_ERR code, its text kept for mc_last_error. */
static int replyErr(mc_client *c, const mcReply *r) {
    static const struct { const char *word; int code; } map[] = {
        {"EXISTS", MC_ERR_EXISTS},     {"NOSPACE", MC_ERR_NOSPACE},   {"OOM", MC_ERR_NOSPACE},
        {"NOTREADY", MC_ERR_NOT_READY}, {"NOKEY", MC_ERR_NOT_FOUND}, {"NOAUTH", MC_ERR_AUTH},
        {"WRONGPASS", MC_ERR_AUTH},    {"NOTPENDING", MC_ERR_NOT_FOUND},
    };
    if (r == NULL) return setErr(c, MC_ERR_IO, "%s", c->meta ? c->meta->err : "no connection");
    if (r->type != MCR_ERROR) return setErr(c, MC_ERR_PROTOCOL, "unexpected reply type %d", r->type);
    snprintf(c->errbuf, sizeof(c->errbuf), "%s", r->str);
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (mcReplyIsError(r, map[i].word)) return map[i].code;
    return MC_ERR_SERVER;
}

static void fmtU64(char *buf, size_t len, uint64_t v) { snprintf(buf, len, "%llu", (unsigned long long)v); }

/* A replica triple [seg-id, offset, length]. */
static int parseReplica(const mcReply *r, mcReplica *out) {
    int ok1, ok2, ok3;
    if (r == NULL || r->type != MCR_ARRAY || r->elements != 3) return -1;
    long long seg = mcReplyInt(r->element[0], &ok1);
    long long off = mcReplyInt(r->element[1], &ok2);
    long long len = mcReplyInt(r->element[2], &ok3);
    if (!ok1 || !ok2 || !ok3 || seg <= 0 || off < 0 || len < 0) return -1;
    out->seg = (uint64_t)seg;
    out->off = (uint64_t)off;
    out->len = (uint64_t)len;
    return 0;
}

static void heartbeatLocked(mc_client *c);

/* Replaces a broken metadata connection; 0 or -1. A hosting handle then
 * sends HEARTBEAT at once, so its owner lives on in the new connection. */
static int metaReconnect(mc_client *c) {
    char err[256], uri[300];
    snprintf(uri, sizeof(uri), "%s", c->meta->uri);
    mcConn *n = mcConnOpen(uri, c->connect_ms, c->io_ms, err, sizeof(err));
    if (n == NULL || mcConnAuth(n, c->password) != MC_OK) {
        mcConnClose(n);
        return -1;
    }
    mcConnClose(c->meta);
    c->meta = n;
    if (c->host && !c->hb_active) heartbeatLocked(c); /* not from within a beat */
    return 0;
}

/* One command on the metadata connection; a broken one is reconnected once. */
static int metaCommand(mc_client *c, int argc, const char **argv, const size_t *lens, mcReply **out) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (c->meta == NULL) return setErr(c, MC_ERR_IO, "not connected");
        *out = mcConnCommand(c->meta, argc, argv, lens);
        if (*out) return MC_OK;
        if (attempt == 1 || !c->meta->broken || metaReconnect(c) != 0) break;
    }
    return setErr(c, MC_ERR_IO, "%s", c->meta ? c->meta->err : "connection lost");
}

/* ---- connect ------------------------------------------------------------- */

mc_client *mc_connect(const char *uri, const char *password, char *err, size_t errlen) {
    char dummy[8];
    if (err == NULL) err = dummy, errlen = sizeof(dummy);
    if (uri == NULL) {
        snprintf(err, errlen, "no address");
        return NULL;
    }
    mc_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->hb_lock, NULL);
    pthread_cond_init(&c->hb_cond, NULL);
    c->connect_ms = 5000;
    c->io_ms = 30000;
    c->host_fd = -1;
    c->host_id = MC_ERR_NOT_FOUND;
    c->transport = MC_TRANSPORT_AUTO;
    c->streams = 0; /* per peer: see tcpXfer */
    c->meta = mcConnOpen(uri, c->connect_ms, c->io_ms, err, errlen);
    if (c->meta == NULL) goto err;
    if (password && password[0]) {
        c->password = strdup(password);
        int rc = mcConnAuth(c->meta, password);
        if (rc != MC_OK) {
            snprintf(err, errlen, "authentication failed: %s", c->meta->err);
            goto err;
        }
    }
    /* Probe: a server that wants a password says so now, not at the first put. */
    const char *ping[1] = {"PING"};
    mcReply *r = mcConnCommand(c->meta, 1, ping, NULL);
    if (r == NULL) {
        snprintf(err, errlen, "%s", c->meta->err);
        goto err;
    }
    if (r->type == MCR_ERROR) {
        snprintf(err, errlen, "%s%s", mcReplyIsError(r, "NOAUTH") ? "authentication required: " : "", r->str);
        mcReplyFree(r);
        goto err;
    }
    mcReplyFree(r);
    if (!c->meta->is_unix) {
        char tmp[256];
        const char *u = !strncmp(uri, "tcp://", 6) ? uri + 6 : uri;
        snprintf(tmp, sizeof(tmp), "%s", u);
        char *colon = strrchr(tmp, ':');
        if (colon) *colon = '\0';
        if (tmp[0] == '[') {
            size_t l = strlen(tmp);
            if (l > 1 && tmp[l - 1] == ']') tmp[l - 1] = '\0';
            memmove(tmp, tmp + 1, strlen(tmp));
        }
        snprintf(c->meta_host, sizeof(c->meta_host), "%s", tmp);
    } else {
        snprintf(c->meta_host, sizeof(c->meta_host), "127.0.0.1");
    }
    return c;
err:
    mcConnClose(c->meta);
    free(c->password);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->hb_lock);
    pthread_cond_destroy(&c->hb_cond);
    free(c);
    return NULL;
}

int mc_set_timeouts(mc_client *c, int connect_ms, int io_ms) {
    if (c == NULL || connect_ms < 0 || io_ms < 0) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->connect_ms = connect_ms;
    c->io_ms = io_ms;
    struct timeval tv = {.tv_sec = io_ms / 1000, .tv_usec = (io_ms % 1000) * 1000};
    setsockopt(c->meta->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->meta->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    pthread_mutex_unlock(&c->lock);
    return MC_OK;
}

int mc_set_transport(mc_client *c, int transport) {
    if (c == NULL || transport < MC_TRANSPORT_AUTO || transport > MC_TRANSPORT_RDMA) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->transport = transport;
    pthread_mutex_unlock(&c->lock);
    return MC_OK;
}

int mc_set_streams(mc_client *c, int streams) {
    if (c == NULL || streams < 1 || streams > MC_TCP_MAX_STREAMS) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->streams = streams;
    pthread_mutex_unlock(&c->lock);
    return MC_OK;
}

int mc_last_transport(mc_client *c) { return c ? c->last_transport : MC_ERR_INVALID; }
const char *mc_last_error(mc_client *c) { return c ? c->errbuf : "no handle"; }

static void segFree(mcSeg *s) {
    if (s->map) munmap(s->map, s->size);
    for (int i = 0; i < s->nendpoints; i++) free(s->endpoints[i]);
    free(s->name);
    free(s->rkey);
    free(s);
}

static void unmountLocked(mc_client *c);

void mc_close(mc_client *c) {
    if (c == NULL) return;
    pthread_mutex_lock(&c->lock);
    unmountLocked(c);
    while (c->segs) {
        mcSeg *s = c->segs;
        c->segs = s->next;
        segFree(s);
    }
    while (c->dconns) {
        mcDataConn *d = c->dconns;
        c->dconns = d->next;
        mcConnClose(d->conn);
        free(d);
    }
    while (c->regions) {
        mcRegion *r = c->regions;
        c->regions = r->next;
        if (r->rdma && c->rdma) mcRdmaUnregister(c->rdma, r->addr);
        free(r);
    }
    if (c->rdma) mcRdmaClose(c->rdma);
    mcTcpPoolFree(c->tcp_pool);
    if (c->stage) mcCudaHostFree(c->stage);
    mcConnClose(c->meta);
    free(c->password);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->hb_lock);
    pthread_cond_destroy(&c->hb_cond);
    free(c);
}

const char *mc_strerror(int err) {
    switch (err) {
    case MC_OK: return "ok";
    case MC_ERR_NOT_FOUND: return "no such key";
    case MC_ERR_EXISTS: return "key exists";
    case MC_ERR_NOSPACE: return "no space for the value";
    case MC_ERR_LEASE_EXPIRED: return "read lease expired before the transfer ended";
    case MC_ERR_TOO_SMALL: return "buffer smaller than the value";
    case MC_ERR_INVALID: return "invalid argument";
    case MC_ERR_AUTH: return "authentication failed";
    case MC_ERR_PROTOCOL: return "protocol error";
    case MC_ERR_IO: return "I/O error or timeout";
    case MC_ERR_UNSUPPORTED: return "not supported here";
    case MC_ERR_NOT_READY: return "the key's put has not ended";
    case MC_ERR_SERVER: return "server error";
    case MC_ERR_NOMEM: return "out of memory";
    default: return err >= 0 ? "ok" : "unknown error";
    }
}

/* ---- segments and paths -------------------------------------------------- */

static mcSeg *segGet(mc_client *c, uint64_t id) {
    for (mcSeg *s = c->segs; s; s = s->next)
        if (s->id == id) return s;
    char idbuf[24];
    fmtU64(idbuf, sizeof(idbuf), id);
    const char *argv[2] = {"SEGMENT.INFO", idbuf};
    mcReply *r;
    if (metaCommand(c, 2, argv, NULL, &r) != MC_OK) return NULL;
    if (r->type != MCR_ARRAY || r->elements % 2) {
        replyErr(c, r);
        mcReplyFree(r);
        return NULL;
    }
    mcSeg *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        mcReplyFree(r);
        return NULL;
    }
    s->id = id;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const mcReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type != MCR_BULK && k->type != MCR_STATUS) continue;
        int ok;
        if (!strcmp(k->str, "size")) s->size = (uint64_t)mcReplyInt(v, &ok);
        else if (!strcmp(k->str, "base")) s->base = (uint64_t)mcReplyInt(v, &ok);
        else if (!strcmp(k->str, "name") && v->str) s->name = strdup(v->str);
        else if (!strcmp(k->str, "rkey") && v->str) s->rkey = strdup(v->str);
        else if (!strcmp(k->str, "endpoints") && v->type == MCR_ARRAY) {
            for (size_t j = 0; j < v->elements && s->nendpoints < MC_MAX_ENDPOINTS; j++)
                if (v->element[j]->str) s->endpoints[s->nendpoints++] = strdup(v->element[j]->str);
        }
    }
    mcReplyFree(r);
    s->next = c->segs;
    c->segs = s;
    return s;
}

/* "tcp://0.0.0.0:p" means "wherever you reached the server". */
static void endpointUri(mc_client *c, const char *ep, char *out, size_t len) {
    if (!strncmp(ep, "tcp://0.0.0.0:", 14)) snprintf(out, len, "tcp://%s:%s", c->meta_host, ep + 14);
    else if (!strncmp(ep, "tcp://[::]:", 11)) snprintf(out, len, "tcp://[%s]:%s", c->meta_host, ep + 11);
    else snprintf(out, len, "%s", ep);
}

/* A connection to uri: the metadata one if that is where it goes, else a
 * cached data connection, else a new one (authenticated). */
static mcConn *dataConn(mc_client *c, const char *uri) {
    if (c->meta && !c->meta->broken && !strcmp(c->meta->uri, uri)) return c->meta;
    for (mcDataConn **pp = &c->dconns; *pp; pp = &(*pp)->next) {
        mcDataConn *d = *pp;
        if (strcmp(d->conn->uri, uri)) continue;
        if (!d->conn->broken) return d->conn;
        *pp = d->next;
        mcConnClose(d->conn);
        free(d);
        break;
    }
    char err[256];
    mcConn *n = mcConnOpen(uri, c->connect_ms, c->io_ms, err, sizeof(err));
    if (n == NULL) {
        setErr(c, MC_ERR_IO, "%s", err);
        return NULL;
    }
    if (mcConnAuth(n, c->password) != MC_OK) {
        setErr(c, MC_ERR_AUTH, "%s: %s", uri, n->err);
        mcConnClose(n);
        return NULL;
    }
    mcDataConn *d = malloc(sizeof(*d));
    if (d == NULL) {
        mcConnClose(n);
        return NULL;
    }
    d->conn = n;
    d->next = c->dconns;
    c->dconns = d;
    return n;
}

static void dropConn(mc_client *c, mcConn *conn) {
    if (conn == c->meta) return; /* metaCommand reconnects it */
    for (mcDataConn **pp = &c->dconns; *pp; pp = &(*pp)->next) {
        if ((*pp)->conn == conn) {
            mcDataConn *d = *pp;
            *pp = d->next;
            mcConnClose(d->conn);
            free(d);
            return;
        }
    }
}

/* Maps the segment's memory through one of its unix endpoints. */
static int shmAttach(mc_client *c, mcSeg *s) {
    if (s->shm_state) return s->shm_state > 0 ? MC_OK : MC_ERR_UNSUPPORTED;
    s->shm_state = -1;
    for (int i = 0; i < s->nendpoints; i++) {
        if (strncmp(s->endpoints[i], "unix://", 7)) continue;
        mcConn *conn = dataConn(c, s->endpoints[i]);
        if (conn == NULL) continue;
        char idbuf[24];
        fmtU64(idbuf, sizeof(idbuf), s->id);
        const char *argv[2] = {"SHM.ATTACH", idbuf};
        if (conn->recv_fd >= 0) {
            close(conn->recv_fd);
            conn->recv_fd = -1;
        }
        mcReply *r = mcConnCommand(conn, 2, argv, NULL);
        int ok = 0;
        long long size = 0;
        if (r && r->type == MCR_ARRAY && r->elements == 2) size = mcReplyInt(r->element[1], &ok);
        else if (r) replyErr(c, r);
        mcReplyFree(r);
        int fd = conn->recv_fd;
        conn->recv_fd = -1;
        if (!ok || fd < 0 || size <= 0) {
            if (fd >= 0) close(fd);
            if (r == NULL) dropConn(c, conn);
            continue;
        }
        void *map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            setErr(c, MC_ERR_IO, "mmap of segment %llu: %s", (unsigned long long)s->id, strerror(errno));
            continue;
        }
        s->map = map;
        s->size = (uint64_t)size;
        s->shm_state = 1;
        return MC_OK;
    }
    return MC_ERR_UNSUPPORTED;
}

static mcRdma *rdmaEngine(mc_client *c) {
    if (!c->rdma_tried) {
        char err[256];
        c->rdma_tried = 1;
        c->rdma = mcRdmaOpen(err, sizeof(err));
        if (c->rdma == NULL) setErr(c, MC_ERR_UNSUPPORTED, "rdma: %s", err);
    }
    return c->rdma;
}

static mcRegion *regionOf(mc_client *c, const void *p, size_t len) {
    for (mcRegion *r = c->regions; r; r = r->next)
        if ((const char *)p >= r->addr && len <= r->len && (size_t)((const char *)p - r->addr) <= r->len - len)
            return r;
    return NULL;
}

/* One replica's copy through the segment's shared mapping. */
static int shmCopy(mc_client *c, const mcSeg *s, const mcReplica *rep, void *buf, int write) {
    if (rep->off > s->size || rep->len > s->size - rep->off)
        return setErr(c, MC_ERR_PROTOCOL, "replica outside segment %llu", (unsigned long long)s->id);
    if (write) memcpy(s->map + rep->off, buf, rep->len);
    else memcpy(buf, s->map + rep->off, rep->len);
    c->last_transport = MC_TRANSPORT_SHM;
    return MC_OK;
}

/* The worker pool for striped transfers, grown to carry streams at once. */
static mcTcpPool *tcpPool(mc_client *c, int streams) {
    if (streams <= 1) return NULL;
    if (mcTcpPoolWorkers(c->tcp_pool) >= streams - 1) return c->tcp_pool;
    mcTcpPoolFree(c->tcp_pool);
    c->tcp_pool = mcTcpPoolCreate(streams - 1, c->password);
    return c->tcp_pool; /* NULL (no threads): one stream */
}

static int tcpXfer(mc_client *c, mcSeg *s, const mcReplica *rep, void *buf, int write) {
    int rc = MC_ERR_UNSUPPORTED;
    /* tcp:// endpoints first; the same protocol works over a unix one. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->nendpoints; i++) {
            const char *ep = s->endpoints[i];
            int is_tcp = !strncmp(ep, "tcp://", 6), is_unix = !strncmp(ep, "unix://", 7);
            if (pass == 0 ? !is_tcp : !is_unix) continue;
            char uri[300];
            endpointUri(c, ep, uri, sizeof(uri));
            mcConn *conn = dataConn(c, uri);
            if (conn == NULL) {
                rc = MC_ERR_IO;
                continue;
            }
            /* Unless set: one stream to an unpaced peer on this host, whose
             * single stream already keeps both sides' copies busy (two
             * streams measured 3.8 GB/s against one's 6.3 at 1 MiB); one
             * per CPU elsewhere. */
            int want = c->streams ? c->streams : conn->local_unpaced ? 1 : mcTcpDefaultStreams();
            int streams = mcTcpStreamCount(rep->len, want);
            /* A cached connection the peer closed meanwhile (its idle
             * timeout) fails at once: a second try on fresh connections.
             * SEG.WRITE/SEG.READ of the same range are safe to repeat. */
            for (int attempt = 0; attempt < 2; attempt++) {
                mcTcpFailure f;
                if (attempt && (conn = dataConn(c, uri)) == NULL) break;
                if (mcTcpStriped(tcpPool(c, streams), conn, uri, streams, c->connect_ms, c->io_ms, s->id,
                                 rep->off, rep->len, buf, write, &f)) {
                    c->last_transport = MC_TRANSPORT_TCP;
                    return MC_OK;
                }
                rc = f.reply ? replyErr(c, f.reply) : setErr(c, MC_ERR_IO, "%s", f.err);
                int again = f.reply == NULL && !f.timed_out;
                mcReplyFree(f.reply);
                if (conn->broken) dropConn(c, conn);
                if (!again) break;
            }
        }
    }
    return rc;
}

/* Moves one replica's bytes by the fastest path allowed; MC_OK or MC_ERR_*. */
static int xferReplica(mc_client *c, const mcReplica *rep, void *buf, int write, int device) {
    mcSeg *s = segGet(c, rep->seg);
    if (s == NULL) return setErr(c, MC_ERR_IO, "segment %llu: %s", (unsigned long long)rep->seg, c->errbuf);
    int t = c->transport, rc = MC_ERR_UNSUPPORTED;
    if (!device && (t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_SHM) && shmAttach(c, s) == MC_OK)
        return shmCopy(c, s, rep, buf, write);
    if (t == MC_TRANSPORT_SHM) return setErr(c, MC_ERR_UNSUPPORTED, "no shared memory path to segment %llu", (unsigned long long)s->id);
    if (t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_RDMA) {
        mcRegion *reg = regionOf(c, buf, rep->len);
        for (int i = 0; i < s->nendpoints && reg && reg->rdma; i++) {
            if (strncmp(s->endpoints[i], "rdma://", 7) || rdmaEngine(c) == NULL) continue;
            mcRdmaDesc d;
            char err[256];
            if (mcRdmaDescParse(&d, s->endpoints[i], s->base, s->rkey ? s->rkey : "", err, sizeof(err)) != 0) {
                rc = setErr(c, MC_ERR_PROTOCOL, "%s", err);
                continue;
            }
            rc = mcRdmaTransfer(c->rdma, &d, rep->off, buf, rep->len, write, err, sizeof(err));
            if (rc == MC_OK) {
                c->last_transport = MC_TRANSPORT_RDMA;
                return MC_OK;
            }
            setErr(c, rc, "rdma: %s", err);
        }
        if (t == MC_TRANSPORT_RDMA) {
            if (rc == MC_ERR_UNSUPPORTED && !c->errbuf[0])
                setErr(c, rc, "no rdma path to segment %llu", (unsigned long long)s->id);
            return rc;
        }
    }
    if (device) return setErr(c, MC_ERR_UNSUPPORTED, "device memory needs staging");
    return tcpXfer(c, s, rep, buf, write);
}

/* Device memory: a pinned bounce buffer of at least len bytes. */
static char *stageBuffer(mc_client *c, size_t len) {
    if (c->stage_len >= len) return c->stage;
    if (c->stage) mcCudaHostFree(c->stage);
    c->stage = mcCudaHostAlloc(len);
    c->stage_len = c->stage ? len : 0;
    return c->stage;
}

/* ---- put ----------------------------------------------------------------- */

/* PUT.START arguments after "key size". */
static int putOptArgs(const mc_put_opts *o, const char **argv, char *repbuf, char *pinbuf) {
    int n = 0;
    if (o == NULL) return 0;
    if (o->replicas > 0) {
        snprintf(repbuf, 16, "%d", o->replicas);
        argv[n++] = "REPLICAS";
        argv[n++] = repbuf;
    }
    if (o->prefer && o->prefer[0]) {
        argv[n++] = "PREFER";
        argv[n++] = o->prefer;
    }
    if (o->pin_ms > 0) {
        snprintf(pinbuf, 24, "%lld", o->pin_ms);
        argv[n++] = "PIN";
        argv[n++] = pinbuf;
    }
    if (o->hard_pin) argv[n++] = "HARDPIN";
    if (o->replace) argv[n++] = "REPLACE";
    return n;
}

static void putRevoke(mc_client *c, const void *key, size_t keylen) {
    const char *argv[2] = {"PUT.REVOKE", key};
    size_t lens[2] = {10, keylen};
    mcReply *r;
    if (metaCommand(c, 2, argv, lens, &r) == MC_OK) mcReplyFree(r);
}

static int putLocked(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
                     const mc_put_opts *opts, int device) {
    char sizebuf[24], repbuf[16], pinbuf[24];
    const char *argv[16];
    size_t lens[16];
    c->errbuf[0] = '\0';
    fmtU64(sizebuf, sizeof(sizebuf), len);
    argv[0] = "PUT.START";
    argv[1] = key;
    argv[2] = sizebuf;
    int argc = 3 + putOptArgs(opts, argv + 3, repbuf, pinbuf);
    for (int i = 0; i < argc; i++) lens[i] = i == 1 ? keylen : strlen(argv[i]);
    mcReply *r;
    int rc = metaCommand(c, argc, argv, lens, &r);
    if (rc != MC_OK) return rc;
    if (r->type != MCR_ARRAY) {
        rc = replyErr(c, r);
        mcReplyFree(r);
        return rc;
    }
    mcReplica reps[MC_MAX_REPLICAS];
    size_t n = r->elements < MC_MAX_REPLICAS ? r->elements : MC_MAX_REPLICAS;
    for (size_t i = 0; i < n; i++) {
        if (parseReplica(r->element[i], &reps[i]) != 0 || reps[i].len != len) {
            mcReplyFree(r);
            putRevoke(c, key, keylen);
            return setErr(c, MC_ERR_PROTOCOL, "bad replica in PUT.START reply");
        }
    }
    mcReplyFree(r);
    for (size_t i = 0; i < n; i++) {
        rc = xferReplica(c, &reps[i], (void *)buf, 1, device);
        if (rc != MC_OK) {
            char why[512];
            snprintf(why, sizeof(why), "%s", c->errbuf);
            putRevoke(c, key, keylen);
            snprintf(c->errbuf, sizeof(c->errbuf), "replica %zu: %.400s (put revoked)", i, why);
            return rc;
        }
    }
    argv[0] = "PUT.END";
    lens[0] = 7;
    if ((rc = metaCommand(c, 2, argv, lens, &r)) != MC_OK) return rc;
    rc = r->type == MCR_STATUS ? MC_OK : replyErr(c, r);
    mcReplyFree(r);
    return rc;
}

/* Device pointers are staged unless registered for RDMA (GPUDirect). */
static int putStaged(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
                     const mc_put_opts *opts) {
    if (key == NULL || keylen == 0 || buf == NULL || len == 0) return setErr(c, MC_ERR_INVALID, "empty key or value");
    if (mcCudaIsDevicePtr(buf)) {
        mcRegion *reg = regionOf(c, buf, len);
        if (reg && reg->rdma) return putLocked(c, key, keylen, buf, len, opts, 1); /* GPUDirect */
        char *st = stageBuffer(c, len);
        char err[256];
        if (st == NULL) return setErr(c, MC_ERR_NOMEM, "no pinned staging buffer for %zu bytes", len);
        int rc = mcCudaCopy(st, buf, len, err, sizeof(err));
        if (rc != MC_OK) return setErr(c, rc, "%s", err);
        buf = st;
    }
    return putLocked(c, key, keylen, buf, len, opts, 0);
}

int mc_put(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len, const mc_put_opts *opts) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = putStaged(c, key, keylen, buf, len, opts);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_put_from(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
                const mc_put_opts *opts) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = regionOf(c, buf, len) ? putStaged(c, key, keylen, buf, len, opts)
                                   : setErr(c, MC_ERR_INVALID, "buffer is not inside a registered region");
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- get ----------------------------------------------------------------- */

/* A GET.REPLICAS reply: lease, size and replicas; MC_OK or MC_ERR_*. */
static int parseReplicas(mc_client *c, const mcReply *r, long long *lease_ms, uint64_t *size, mcReplica *reps,
                         size_t *n) {
    if (r->type == MCR_NIL) return setErr(c, MC_ERR_NOT_FOUND, "no such key");
    if (r->type != MCR_ARRAY) return replyErr(c, r);
    int ok1, ok2;
    if (r->elements < 3) return setErr(c, MC_ERR_PROTOCOL, "short GET.REPLICAS reply");
    *lease_ms = mcReplyInt(r->element[0], &ok1);
    long long sz = mcReplyInt(r->element[1], &ok2);
    if (!ok1 || !ok2 || sz < 0) return setErr(c, MC_ERR_PROTOCOL, "bad GET.REPLICAS reply");
    *size = (uint64_t)sz;
    *n = 0;
    for (size_t i = 3; i < r->elements && *n < MC_MAX_REPLICAS; i++) {
        if (parseReplica(r->element[i], &reps[*n]) != 0) return setErr(c, MC_ERR_PROTOCOL, "bad replica");
        if (reps[*n].len != *size) return setErr(c, MC_ERR_PROTOCOL, "replica length differs from size");
        (*n)++;
    }
    return MC_OK;
}

/* Reads the first replica that works into buf; lease checked at the end. */
/* device: buf is GPU memory registered for RDMA, so only RDMA may carry it. */
static long long readReplicas(mc_client *c, const mcReplica *reps, size_t n, uint64_t size, void *buf,
                              long long deadline_us, int device) {
    if (size == 0) return 0;
    if (n == 0) return setErr(c, MC_ERR_NOT_FOUND, "the value has no live replica");
    int rc = MC_ERR_IO;
    char first_err[512] = "";
    for (size_t i = 0; i < n; i++) {
        rc = xferReplica(c, &reps[i], buf, 0, device);
        if (rc == MC_OK) {
            if (nowUs() > deadline_us) return setErr(c, MC_ERR_LEASE_EXPIRED, "the transfer outlived its lease");
            return (long long)size;
        }
        if (!first_err[0]) snprintf(first_err, sizeof(first_err), "%s", c->errbuf);
    }
    snprintf(c->errbuf, sizeof(c->errbuf), "no replica could be read: %s", first_err);
    return rc;
}

static long long getLocked(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap, int probe) {
    if (key == NULL || keylen == 0) return setErr(c, MC_ERR_INVALID, "empty key");
    c->errbuf[0] = '\0';
    const char *argv[2] = {"GET.REPLICAS", key};
    size_t lens[2] = {12, keylen};
    long long t0 = nowUs();
    mcReply *r;
    int rc = metaCommand(c, 2, argv, lens, &r);
    if (rc != MC_OK) return rc;
    long long lease_ms;
    uint64_t size;
    mcReplica reps[MC_MAX_REPLICAS];
    size_t n;
    rc = parseReplicas(c, r, &lease_ms, &size, reps, &n);
    mcReplyFree(r);
    if (rc != MC_OK) return rc;
    if (probe) return (long long)size;
    if (size > cap) return setErr(c, MC_ERR_TOO_SMALL, "value is %llu bytes, buffer %zu", (unsigned long long)size, cap);
    if (buf == NULL && size) return setErr(c, MC_ERR_INVALID, "no buffer");
    long long deadline = t0 + lease_ms * 1000;
    if (mcCudaIsDevicePtr(buf)) {
        mcRegion *reg = regionOf(c, buf, size);
        if (reg && reg->rdma) return readReplicas(c, reps, n, size, buf, deadline, 1); /* GPUDirect */
        char *st = stageBuffer(c, size);
        if (st == NULL) return setErr(c, MC_ERR_NOMEM, "no pinned staging buffer for %llu bytes", (unsigned long long)size);
        long long got = readReplicas(c, reps, n, size, st, deadline, 0);
        if (got < 0) return got;
        char err[256];
        rc = mcCudaCopy(buf, st, (size_t)size, err, sizeof(err));
        return rc == MC_OK ? got : setErr(c, rc, "%s", err);
    }
    return readReplicas(c, reps, n, size, buf, deadline, 0);
}

long long mc_get(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    long long rc = getLocked(c, key, keylen, buf, cap, 0);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

long long mc_get_into(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    long long rc = regionOf(c, buf, cap) ? getLocked(c, key, keylen, buf, cap, 0)
                                         : setErr(c, MC_ERR_INVALID, "buffer is not inside a registered region");
    pthread_mutex_unlock(&c->lock);
    return rc;
}

long long mc_size(mc_client *c, const void *key, size_t keylen) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    long long rc = getLocked(c, key, keylen, NULL, 0, 1);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* A one-key command answering an integer: 1 when it is > 0, 0, or MC_ERR_*. */
static int keyIntCommand(mc_client *c, const char *cmd, const void *key, size_t keylen) {
    if (c == NULL || key == NULL || keylen == 0) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    const char *argv[2] = {cmd, key};
    size_t lens[2] = {strlen(cmd), keylen};
    mcReply *r;
    int rc = metaCommand(c, 2, argv, lens, &r);
    if (rc == MC_OK) {
        rc = r->type == MCR_INT ? (r->integer > 0) : replyErr(c, r);
        mcReplyFree(r);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_exists(mc_client *c, const void *key, size_t keylen) { return keyIntCommand(c, "EXISTS", key, keylen); }
int mc_remove(mc_client *c, const void *key, size_t keylen) { return keyIntCommand(c, "REMOVE", key, keylen); }

/* ---- batches ------------------------------------------------------------- */

/* Starts one replica's transfer: shm copies now (returns MC_OK), tcp to a
 * known connection is queued in *p (returns 1) for finishXfers; anything
 * else is left to the sequential path (returns MC_ERR_UNSUPPORTED). */
static int startXfer(mc_client *c, const mcReplica *rep, void *buf, int write, mcTcpItem *p) {
    mcSeg *s = segGet(c, rep->seg);
    if (s == NULL) return MC_ERR_IO;
    int t = c->transport;
    if ((t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_SHM) && shmAttach(c, s) == MC_OK)
        return shmCopy(c, s, rep, buf, write);
    if (t != MC_TRANSPORT_TCP && t != MC_TRANSPORT_AUTO) return MC_ERR_UNSUPPORTED;
    for (int i = 0; i < s->nendpoints; i++) {
        if (strncmp(s->endpoints[i], "tcp://", 6)) continue;
        char uri[300];
        endpointUri(c, s->endpoints[i], uri, sizeof(uri));
        mcConn *conn = dataConn(c, uri);
        if (conn == NULL) continue;
        p->conn = conn;
        p->seg = s->id;
        p->off = rep->off;
        p->len = rep->len;
        p->buf = buf;
        return 1;
    }
    return MC_ERR_UNSUPPORTED;
}

/* Sends the queued tcp transfers (mc_tcp.c: small ones share vector
 * commands) and reads the replies; ok[item] is cleared for a transfer that
 * failed. */
static void finishXfers(mc_client *c, mcTcpItem *p, size_t np, int write, int *ok) {
    mcReply *err;
    mcTcpBatch(p, np, write, &err);
    if (err) replyErr(c, err);
    mcReplyFree(err);
    for (size_t i = 0; i < np; i++)
        if (!p[i].ok) ok[p[i].item] = 0;
    for (size_t i = 0; i < np; i++)
        if (p[i].conn->broken) dropConn(c, p[i].conn);
}

static int batchPutLocked(mc_client *c, size_t n, const mc_kv *items, const mc_put_opts *opts, int *results) {
    size_t argc = 2 + 2 * n + 10;
    const char **argv = malloc(argc * sizeof(char *));
    size_t *lens = malloc(argc * sizeof(size_t));
    char (*sizes)[24] = malloc(n * sizeof(*sizes));
    mcReplica *reps = malloc(n * MC_MAX_REPLICAS * sizeof(mcReplica));
    size_t *nreps = calloc(n, sizeof(size_t));
    int *ok = calloc(n, sizeof(int));
    int *started = calloc(n, sizeof(int));
    mcTcpItem *pend = malloc(n * MC_MAX_REPLICAS * sizeof(mcTcpItem));
    int done = 0, rc = MC_OK;
    char nbuf[24], repbuf[16], pinbuf[24];
    mcReply *r = NULL;
    if (!argv || !lens || !sizes || !reps || !nreps || !ok || !started || !pend) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = MC_ERR_INVALID;
        if (items[i].key == NULL || items[i].keylen == 0 || items[i].buf == NULL || items[i].len == 0 ||
            mcCudaIsDevicePtr(items[i].buf)) {
            rc = setErr(c, MC_ERR_INVALID, "item %zu: empty key/value or device memory (use mc_put)", i);
            goto end;
        }
    }
    /* BATCH.PUT.START numkeys key size ... [options] */
    size_t k = 0;
    fmtU64(nbuf, sizeof(nbuf), n);
    argv[k++] = "BATCH.PUT.START";
    argv[k++] = nbuf;
    for (size_t i = 0; i < n; i++) {
        fmtU64(sizes[i], sizeof(sizes[i]), items[i].len);
        lens[k] = items[i].keylen;
        argv[k++] = items[i].key;
        argv[k++] = sizes[i];
    }
    k += (size_t)putOptArgs(opts, argv + k, repbuf, pinbuf);
    for (size_t i = 0; i < k; i++)
        if (i < 2 || i >= 2 + 2 * n || (i - 2) % 2 == 1) lens[i] = strlen(argv[i]);
    if ((rc = metaCommand(c, (int)k, argv, lens, &r)) != MC_OK) goto end;
    if (r->type != MCR_ARRAY || r->elements != n) {
        rc = r->type == MCR_ERROR ? replyErr(c, r) : setErr(c, MC_ERR_PROTOCOL, "bad BATCH.PUT.START reply");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        const mcReply *e = r->element[i];
        if (e->type != MCR_ARRAY) {
            results[i] = replyErr(c, e);
            continue;
        }
        ok[i] = started[i] = 1;
        for (size_t j = 0; j < e->elements && j < MC_MAX_REPLICAS; j++) {
            if (parseReplica(e->element[j], &reps[i * MC_MAX_REPLICAS + j]) != 0 ||
                reps[i * MC_MAX_REPLICAS + j].len != items[i].len) {
                ok[i] = 0;
                results[i] = setErr(c, MC_ERR_PROTOCOL, "bad replica");
                break;
            }
            nreps[i]++;
        }
    }
    mcReplyFree(r);
    r = NULL;
    /* Transfers: shm now, tcp pipelined, anything else one by one. */
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; ok[i] && j < nreps[i]; j++) {
            const mcReplica *rep = &reps[i * MC_MAX_REPLICAS + j];
            int s = startXfer(c, rep, items[i].buf, 1, &pend[np]);
            if (s == 1) pend[np++].item = i;
            else if (s != MC_OK && xferReplica(c, rep, items[i].buf, 1, 0) != MC_OK) ok[i] = 0;
        }
    }
    finishXfers(c, pend, np, 1, ok);
    /* Publish what was written (one BATCH.PUT.END), revoke the rest (a
     * PUT.REVOKE each: rare), pipelined on the meta connection.
     * started[i]: PUT.START gave item i its extents. */
    size_t nend = 0, nrevoke = 0;
    argv[0] = "BATCH.PUT.END";
    lens[0] = 13;
    for (size_t i = 0; i < n; i++) {
        if (!started[i]) continue;
        if (ok[i]) {
            argv[1 + nend] = items[i].key;
            lens[1 + nend++] = items[i].keylen;
        } else {
            const char *a[2] = {"PUT.REVOKE", items[i].key};
            size_t l[2] = {10, items[i].keylen};
            mcConnAppend(c->meta, 2, a, l);
            nrevoke++;
            if (results[i] == MC_ERR_INVALID) results[i] = MC_ERR_IO;
        }
    }
    if (nend) mcConnAppend(c->meta, (int)(1 + nend), argv, lens);
    if ((nend || nrevoke) && mcConnFlush(c->meta) != MC_OK) {
        rc = setErr(c, MC_ERR_IO, "%s", c->meta->err);
        goto end;
    }
    for (size_t k = 0; k < nrevoke; k++) {
        mcReply *e = mcConnRead(c->meta);
        if (e == NULL) {
            rc = setErr(c, MC_ERR_IO, "%s", c->meta->err);
            goto end;
        }
        mcReplyFree(e);
    }
    if (nend) {
        if ((r = mcConnRead(c->meta)) == NULL) {
            rc = setErr(c, MC_ERR_IO, "%s", c->meta->err);
            goto end;
        }
        if (r->type != MCR_ARRAY || r->elements != nend) {
            rc = r->type == MCR_ERROR ? replyErr(c, r) : setErr(c, MC_ERR_PROTOCOL, "bad BATCH.PUT.END reply");
            goto end;
        }
        for (size_t i = 0, k = 0; i < n; i++) {
            if (!started[i] || !ok[i]) continue;
            const mcReply *e = r->element[k++];
            results[i] = e->type == MCR_STATUS ? MC_OK : replyErr(c, e);
            if (results[i] == MC_OK) done++;
        }
    }
    rc = done;
end:
    mcReplyFree(r);
    free(argv);
    free(lens);
    free(sizes);
    free(reps);
    free(nreps);
    free(ok);
    free(started);
    free(pend);
    return rc;
}

int mc_batch_put(mc_client *c, size_t n, const mc_kv *items, const mc_put_opts *opts, int *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    int rc = batchPutLocked(c, n, items, opts, results);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int batchGetLocked(mc_client *c, size_t n, mc_kv *items, long long *results) {
    const char **argv = malloc((n + 1) * sizeof(char *));
    size_t *lens = malloc((n + 1) * sizeof(size_t));
    mcReplica *reps = malloc(n * MC_MAX_REPLICAS * sizeof(mcReplica));
    size_t *nreps = calloc(n, sizeof(size_t));
    uint64_t *sizes = calloc(n, sizeof(uint64_t));
    long long *deadline = calloc(n, sizeof(long long));
    int *ok = calloc(n, sizeof(int));
    mcTcpItem *pend = malloc(n * sizeof(mcTcpItem));
    int rc = MC_OK, done = 0;
    mcReply *r = NULL;
    if (!argv || !lens || !reps || !nreps || !sizes || !deadline || !ok || !pend) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    argv[0] = "BATCH.GET.REPLICAS";
    lens[0] = 18;
    for (size_t i = 0; i < n; i++) {
        if (items[i].key == NULL || items[i].keylen == 0 || mcCudaIsDevicePtr(items[i].buf)) {
            rc = setErr(c, MC_ERR_INVALID, "item %zu: empty key or device memory (use mc_get)", i);
            goto end;
        }
        argv[i + 1] = items[i].key;
        lens[i + 1] = items[i].keylen;
    }
    long long t0 = nowUs();
    if ((rc = metaCommand(c, (int)n + 1, argv, lens, &r)) != MC_OK) goto end;
    if (r->type != MCR_ARRAY || r->elements != n) {
        rc = r->type == MCR_ERROR ? replyErr(c, r) : setErr(c, MC_ERR_PROTOCOL, "bad BATCH.GET.REPLICAS reply");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        long long lease_ms;
        int prc = parseReplicas(c, r->element[i], &lease_ms, &sizes[i], &reps[i * MC_MAX_REPLICAS], &nreps[i]);
        if (prc != MC_OK) {
            results[i] = prc;
            continue;
        }
        if (sizes[i] > items[i].len) {
            results[i] = MC_ERR_TOO_SMALL;
            continue;
        }
        deadline[i] = t0 + lease_ms * 1000;
        ok[i] = 1;
    }
    mcReplyFree(r);
    r = NULL;
    /* found[i]: the server listed item i and it fits; ok[i] then says
     * whether its pipelined transfer worked. */
    size_t np = 0;
    int *found = calloc(n, sizeof(int)), *started = calloc(n, sizeof(int));
    if (found == NULL || started == NULL) {
        free(found);
        free(started);
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        found[i] = ok[i];
        if (!ok[i] || nreps[i] == 0 || sizes[i] == 0) continue;
        int s = startXfer(c, &reps[i * MC_MAX_REPLICAS], items[i].buf, 0, &pend[np]);
        if (s == 1) pend[np++].item = i;
        started[i] = s == 1 || s == MC_OK;
    }
    finishXfers(c, pend, np, 0, ok);
    for (size_t i = 0; i < n; i++) {
        if (!found[i]) continue; /* results[i] says why */
        long long got;
        if (started[i] && ok[i]) {
            got = (long long)sizes[i];
            if (nowUs() > deadline[i]) got = setErr(c, MC_ERR_LEASE_EXPIRED, "the transfer outlived its lease");
        } else {
            /* Not started or failed: the one-by-one path tries every replica. */
            got = readReplicas(c, &reps[i * MC_MAX_REPLICAS], nreps[i], sizes[i], items[i].buf, deadline[i], 0);
        }
        results[i] = got;
        if (got >= 0) done++;
    }
    free(found);
    free(started);
    rc = done;
end:
    mcReplyFree(r);
    free(argv);
    free(lens);
    free(reps);
    free(nreps);
    free(sizes);
    free(deadline);
    free(ok);
    free(pend);
    return rc;
}

int mc_batch_get(mc_client *c, size_t n, mc_kv *items, long long *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    for (size_t i = 0; i < n; i++) results[i] = MC_ERR_INVALID;
    int rc = batchGetLocked(c, n, items, results);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- registration -------------------------------------------------------- */

int mc_register(mc_client *c, void *addr, size_t len, int mem) {
    if (c == NULL || addr == NULL || len == 0 || (mem != MC_MEM_HOST && mem != MC_MEM_CUDA)) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = MC_OK;
    if (mem == MC_MEM_CUDA && !mcCudaIsDevicePtr(addr)) {
        char why[256];
        rc = mcCudaAvailable(why, sizeof(why)) ? setErr(c, MC_ERR_INVALID, "not device memory")
                                               : setErr(c, MC_ERR_UNSUPPORTED, "cuda: %s", why);
        goto out;
    }
    if (regionOf(c, addr, len)) goto out; /* already covered */
    mcRegion *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rc = MC_ERR_NOMEM;
        goto out;
    }
    r->addr = addr;
    r->len = len;
    r->mem = mem;
    char rkeys[512];
    if (rdmaEngine(c) && mcRdmaRegister(c->rdma, addr, len, rkeys, sizeof(rkeys)) == MC_OK) r->rdma = 1;
    r->next = c->regions;
    c->regions = r;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_unregister(mc_client *c, void *addr) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = MC_ERR_NOT_FOUND;
    for (mcRegion **pp = &c->regions; *pp; pp = &(*pp)->next) {
        if ((*pp)->addr == addr) {
            mcRegion *r = *pp;
            *pp = r->next;
            if (r->rdma) mcRdmaUnregister(c->rdma, addr);
            free(r);
            rc = MC_OK;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- hosting a segment --------------------------------------------------- */

/* Sends the stored MOUNT; MC_OK with host_id set, or MC_ERR_*. Used by the
 * first mount and by a remount after the server said -NEEDREMOUNT. */
static int sendMount(mc_client *c) {
    mcReply *r;
    int rc = metaCommand(c, c->mount_argc, (const char **)c->mount_argv, NULL, &r);
    if (rc != MC_OK) return rc;
    if (r->type != MCR_INT) {
        rc = replyErr(c, r);
        mcReplyFree(r);
        return rc;
    }
    c->host_id = r->integer;
    mcHostSetSegmentId(c->host, (uint64_t)r->integer);
    mcReplyFree(r);
    return MC_OK;
}

/* Keeps the hosted segment's owner alive: HEARTBEAT on the metadata
 * connection (reconnecting it if it broke), and MOUNT again if the server
 * already let the owner go (-NEEDREMOUNT: the old segment and its objects
 * are gone, the new one gets a new id). Errors are left for the next beat. */
static void heartbeatLocked(mc_client *c) {
    if (c->host == NULL || c->mount_argc < 2) return;
    c->hb_active = 1; /* a reconnect from within does not beat again */
    if (c->meta->broken && metaReconnect(c) != 0) goto end;
    const char *argv[2] = {"HEARTBEAT", c->mount_argv[c->mount_argc - 1]}; /* OWNER is last */
    mcReply *r = mcConnCommand(c->meta, 2, argv, NULL);
    int remount = r && mcReplyIsError(r, "NEEDREMOUNT");
    mcReplyFree(r);
    if (remount) sendMount(c);
end:
    c->hb_active = 0;
}

#define MC_HEARTBEAT_MS 1000

/* A beat every MC_HEARTBEAT_MS. The handle's lock is only tried: a call in
 * progress is traffic on the handle already, and the thread must never wait
 * on the lock that unmountLocked holds while it joins the thread. */
static void *heartbeatMain(void *arg) {
    mc_client *c = arg;
    pthread_mutex_lock(&c->hb_lock);
    while (!c->hb_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(MC_HEARTBEAT_MS % 1000) * 1000000L;
        ts.tv_sec += MC_HEARTBEAT_MS / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->hb_cond, &c->hb_lock, &ts);
        if (c->hb_stop) break;
        pthread_mutex_unlock(&c->hb_lock);
        if (pthread_mutex_trylock(&c->lock) == 0) {
            heartbeatLocked(c);
            pthread_mutex_unlock(&c->lock);
        }
        pthread_mutex_lock(&c->hb_lock);
    }
    pthread_mutex_unlock(&c->hb_lock);
    return NULL;
}

static void heartbeatStop(mc_client *c) {
    if (!c->hb_running) return;
    pthread_mutex_lock(&c->hb_lock);
    c->hb_stop = 1;
    pthread_cond_signal(&c->hb_cond);
    pthread_mutex_unlock(&c->hb_lock);
    pthread_join(c->hb_thread, NULL);
    c->hb_running = 0;
    c->hb_stop = 0;
}

static void unmountLocked(mc_client *c) {
    heartbeatStop(c);
    for (int i = 0; i < c->mount_argc; i++) free(c->mount_argv[i]);
    c->mount_argc = 0;
    if (c->host == NULL && c->host_mem == NULL) return;
    if (c->host_name && c->meta && !c->meta->broken) {
        const char *argv[2] = {"UNMOUNT", c->host_name};
        mcReply *r = mcConnCommand(c->meta, 2, argv, NULL);
        mcReplyFree(r);
    }
    /* The listener stops (and its threads finish) before the memory goes. */
    mcHostStop(c->host);
    c->host = NULL;
    if (c->rdma && c->host_mem) mcRdmaUnregister(c->rdma, c->host_mem);
    if (c->host_owned && c->host_mem) munmap(c->host_mem, c->host_size);
    if (c->host_fd >= 0) close(c->host_fd);
    c->host_fd = -1;
    c->host_mem = NULL;
    free(c->host_name);
    c->host_name = NULL;
    c->host_id = MC_ERR_NOT_FOUND;
}

static int mountLocked(mc_client *c, void *buf, size_t size, const char *name) {
    char err[256];
    int rc;
    if (size == 0 || name == NULL || name[0] == '\0') return setErr(c, MC_ERR_INVALID, "mount needs a size and a name");
    if (c->host) return setErr(c, MC_ERR_EXISTS, "this handle already hosts segment '%s'", c->host_name);
    c->host_size = size;
    if (buf == NULL) {
        c->host_fd = memfd_create("mooncake-segment", MFD_CLOEXEC);
        if (c->host_fd < 0 || ftruncate(c->host_fd, (off_t)size) != 0) {
            rc = setErr(c, MC_ERR_NOMEM, "memfd of %zu bytes: %s", size, strerror(errno));
            goto err;
        }
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->host_fd, 0);
        if (m == MAP_FAILED) {
            rc = setErr(c, MC_ERR_NOMEM, "mmap of %zu bytes: %s", size, strerror(errno));
            goto err;
        }
        c->host_mem = m;
        c->host_owned = 1;
    } else {
        c->host_mem = buf;
        c->host_owned = 0;
    }
    c->host_name = strdup(name);
    /* Listen where the server sees us: our end of the metadata connection. */
    char bindip[64] = "127.0.0.1";
    if (!c->meta->is_unix) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        if (getsockname(c->meta->fd, (struct sockaddr *)&sa, &salen) == 0)
            mcHostAddrString(&sa, bindip, sizeof(bindip));
    }
    c->host = mcHostStart(c->host_mem, size, c->host_fd, bindip, c->password, err, sizeof(err));
    if (c->host == NULL) {
        rc = setErr(c, MC_ERR_IO, "segment listener: %s", err);
        goto err;
    }
    char sizebuf[24], basebuf[24], rkeys[512], rdmaep[300];
    fmtU64(sizebuf, sizeof(sizebuf), size);
    const char *argv[32];
    int argc = 0;
    argv[argc++] = "MOUNT";
    argv[argc++] = name;
    argv[argc++] = sizebuf;
    char eps[4][300];
    int neps = mcHostEndpoints(c->host, eps, 4);
    for (int i = 0; i < neps; i++) {
        argv[argc++] = "ENDPOINT";
        argv[argc++] = eps[i];
    }
    if (rdmaEngine(c) && mcRdmaRegister(c->rdma, c->host_mem, size, rkeys, sizeof(rkeys)) == MC_OK) {
        int port = 0;
        if (mcRdmaListen(c->rdma, bindip, &port, err, sizeof(err)) == MC_OK) {
            snprintf(rdmaep, sizeof(rdmaep), "rdma://%s:%d", bindip, port);
            fmtU64(basebuf, sizeof(basebuf), (uint64_t)(uintptr_t)c->host_mem);
            argv[argc++] = "ENDPOINT";
            argv[argc++] = rdmaep;
            argv[argc++] = "BASE";
            argv[argc++] = basebuf;
            argv[argc++] = "RKEY";
            argv[argc++] = rkeys;
        }
    }
    char hostname[256] = "localhost", owner[400];
    if (gethostname(hostname, sizeof(hostname)) == 0) {
        hostname[sizeof(hostname) - 1] = '\0';
        argv[argc++] = "HOST";
        argv[argc++] = hostname;
    }
    /* A named owner, not the connection: it outlives a reconnect (within
     * owner-ttl) and the heartbeat thread speaks for it. Kept last. */
    snprintf(owner, sizeof(owner), "mc:%s:%ld:%s", hostname, (long)getpid(), name);
    argv[argc++] = "OWNER";
    argv[argc++] = owner;
    for (int i = 0; i < argc; i++) {
        if ((c->mount_argv[i] = strdup(argv[i])) == NULL) {
            rc = setErr(c, MC_ERR_NOMEM, "out of memory");
            goto err;
        }
        c->mount_argc = i + 1;
    }
    if ((rc = sendMount(c)) != MC_OK) goto err;
    if (pthread_create(&c->hb_thread, NULL, heartbeatMain, c) == 0) c->hb_running = 1;
    return MC_OK;
err:
    free(c->host_name);
    c->host_name = NULL; /* not mounted: unmountLocked must not UNMOUNT a name we don't own */
    unmountLocked(c);
    return rc;
}

int mc_mount(mc_client *c, size_t size, const char *name) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = mountLocked(c, NULL, size, name);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_mount_buffer(mc_client *c, void *buf, size_t size, const char *name) {
    if (c == NULL || buf == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = mountLocked(c, buf, size, name);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_unmount(mc_client *c) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = c->host ? MC_OK : MC_ERR_NOT_FOUND;
    unmountLocked(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

long long mc_mount_id(mc_client *c) { return c ? c->host_id : MC_ERR_INVALID; }
