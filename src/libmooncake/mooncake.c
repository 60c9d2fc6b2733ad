/* mooncake.c -- libmooncake: put/get of KVCache objects (SPEC §5).
 *
 * A handle holds RESP connections to the metadata server -- to every node
 * of a cluster (mc_route.c) -- and caches what it learns about segments.
 * Segment ids are never reused by a server, so a cached segment description
 * never goes stale: a segment that went away simply fails its transfer, and
 * the caller falls back to another replica.
 *
 * Put: PUT.START hands out one extent per replica; every replica is written
 * by the fastest path the segment offers (mc_xfer.c); PUT.END publishes
 * the value. If any replica cannot be written the put is revoked, so a value
 * is either complete in every replica the server listed or not there at all.
 *
 * Get: GET.REPLICAS grants a lease and lists the replicas; the first that
 * can be read is read. The lease clock starts before the request is sent,
 * so a read that ends after `lease-ms` from then is reported as
 * MC_ERR_LEASE_EXPIRED: the server may have reused that space meanwhile.
 *
 * The library's other files, one section each of the same handle
 * (mc_client.h is what they share):
 *  - mc_route.c: the node a command goes to, redirections, riding through
 *    a lost node, and the batch phases (one BATCH.* per node and slot);
 *  - mc_xfer.c: how a replica's bytes move (shm, rdma, tcp; device memory);
 *  - mc_batch.c: the batch calls, ranged reads, replica descriptions,
 *    views and existence;
 *  - mc_mount.c: hosting a segment (mc_mount) and its heartbeat;
 *  - mc_conn.c, mc_cluster.c, mc_shm.c, mc_tcp.c, mc_rdma.c, mc_cuda.c,
 *    mc_host.c, mc_view.c, mc_async.c: the parts with interfaces of their
 *    own (a connection, the slot map, a mapping, ...).
 *
 * Locking: one mutex per handle around every public call (mooncake.h); the
 * connections to all nodes are used under it.
 *
 * Threads. An engine shares one handle between its I/O threads, so what a
 * call leaves behind for its caller must be the caller's: mc_last_error
 * and mc_last_transport read a slot of the calling thread (thread-local,
 * keyed by the handle's serial, a few per thread), which mcLock points
 * c->errbuf and c->last_transport at. A handle-wide buffer was both a data
 * race (read without the lock while another call wrote it) and wrong: a
 * thread read the failure of whichever call ran last. The code under the
 * lock writes them as before; an async op carries its reason to the
 * thread that waits for it (mc_async.c).
 *
 * mc_close may be called while other threads are inside calls on the
 * handle (a store closed under its I/O threads). Each public call enters
 * through mcLock, counted in users; mc_close first sets closing, so a call
 * that has not yet taken the lock fails with MC_ERR_INVALID ("the handle
 * is being closed"), waits for the calls inside to leave (the one running
 * ends within its I/O timeout), and only then frees. What stays the
 * caller's to order is a call that starts after mc_close has returned: the
 * handle is freed memory by then, as after free().
 *
 * Non-blocking batches (mc_batch_put_async, mc_async.c) run on a worker
 * thread with a handle of its own, a clone of this one (mcClone below:
 * same server, user, settings and registered buffers), so they never take
 * this handle's lock and its synchronous calls go on meanwhile. Setters and
 * mc_register/mc_unregister tell the worker (mc_async.h); mc_close stops it
 * first.
 *
 * Fork. A child forked after a handle was made inherits it, and with it
 * the parent's sockets, its hosted segment's listener and memfd, the holds
 * of its views and its pending puts -- but none of its threads (heartbeat,
 * async worker, tcp streams, listeners), and perhaps its lock held by a
 * thread that is not there. A request from the child on such a socket
 * interleaves with the parent's (either may read the other's reply: wrong
 * bytes, protocol errors in the parent), and closing it the old way sent
 * UNMOUNT, PUT.REVOKE or HOLD.RELEASE for the parent and joined threads the
 * child does not have. So a handle records the process's fork generation
 * (mc_fork.h) when made, and in any other process:
 *  - every call on it fails at once with MC_ERR_INVALID (mcHandleBad, one
 *    load, before the lock), mc_last_error saying to make a new handle:
 *    the child connects afresh, as it would after an exec;
 *  - mc_close frees only what is the child's own (closeInherited): its
 *    copies of the memory, its descriptors closed without shutdown() --
 *    the parent's own descriptors keep every socket open -- and nothing
 *    sent, joined, unmounted or unlinked. What the child cannot release
 *    without touching the parent's is left to the exit: RDMA resources
 *    (verbs objects live in the device context the two share, and
 *    destroying one from the child destroys it for the parent), CUDA
 *    memory and streams (the runtime is not usable in a forked child),
 *    and the lock and condition variables, which may be held.
 * The ops and views a handle gave out record the generation too
 * (mc_async.c, mc_view.c); put sessions are plain memory.
 */
#include "mooncake.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mc_async.h"
#include "mc_client.h"
#include "mc_cuda.h"

/* ---- small helpers ------------------------------------------------------- */

unsigned mcForkGen;

static void forkChild(void) { __atomic_add_fetch(&mcForkGen, 1, __ATOMIC_RELAXED); }
static void forkInstallOnce(void) { pthread_atfork(NULL, NULL, forkChild); }

void mcForkInstall(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, forkInstallOnce);
}

long long mcNowUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void mcSleepMs(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* ---- threads: the caller's error slot, the gate ------------------------- */

#define MC_ERR_SLOTS 8 /* handles a thread keeps the last error of; the least recently used goes */

typedef struct {
    uint64_t serial;             /* 0: free */
    unsigned long long used;
    int transport;
    char text[MC_ERRLEN];
} mcErrSlot;

static __thread mcErrSlot errSlots[MC_ERR_SLOTS];
static __thread unsigned long long errTick;
static uint64_t nextSerial;

/* This thread's slot for the handle numbered serial; with create, made
 * (emptied) if there is none. NULL without. */
static mcErrSlot *errSlot(uint64_t serial, int create) {
    mcErrSlot *lru = &errSlots[0];
    for (int i = 0; i < MC_ERR_SLOTS; i++) {
        if (errSlots[i].serial == serial) {
            errSlots[i].used = ++errTick;
            return &errSlots[i];
        }
        if (errSlots[i].used < lru->used) lru = &errSlots[i];
    }
    if (!create) return NULL;
    lru->serial = serial;
    lru->used = ++errTick;
    lru->transport = MC_TRANSPORT_AUTO;
    lru->text[0] = '\0';
    return lru;
}

static void pointAtSlot(mc_client *c) {
    mcErrSlot *s = errSlot(c->serial, 1);
    c->errbuf = s->text;
    c->last_transport = &s->transport;
}

void mcThreadErrSet(uint64_t serial, const char *text) {
    snprintf(errSlot(serial, 1)->text, MC_ERRLEN, "%s", text);
}

/* Enters a public call: counted among the users mc_close waits for,
 * refused once closing (MC_ERR_INVALID, this thread's error set). */
int mcEnter(mc_client *c) {
    pthread_mutex_lock(&c->gate_lock);
    int closing = c->closing;
    uint64_t serial = c->serial; /* read here: once refused, c may be freed at any moment */
    if (!closing) c->users++;
    pthread_mutex_unlock(&c->gate_lock);
    if (!closing) return MC_OK;
    snprintf(errSlot(serial, 1)->text, MC_ERRLEN, "the handle is being closed (mc_close)");
    return MC_ERR_INVALID;
}

void mcLeave(mc_client *c) {
    pthread_mutex_lock(&c->gate_lock);
    if (--c->users == 0 && c->closing) pthread_cond_broadcast(&c->gate_cond);
    pthread_mutex_unlock(&c->gate_lock);
}

/* The lock of a public call, entered through the gate. */
int mcLock(mc_client *c) {
    if (mcEnter(c) != MC_OK) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    /* Waited for the lock while mc_close began: refused now, not run
     * (each would hold a closing handle for a whole call). The text is
     * set before leaving: after mcLeave, c may be freed. */
    pthread_mutex_lock(&c->gate_lock);
    int closing = c->closing;
    pthread_mutex_unlock(&c->gate_lock);
    if (closing) {
        snprintf(errSlot(c->serial, 1)->text, MC_ERRLEN, "the handle is being closed (mc_close)");
        pthread_mutex_unlock(&c->lock);
        mcLeave(c);
        return MC_ERR_INVALID;
    }
    pointAtSlot(c);
    /* Here, before the call's work, no segment description or data
     * connection is in use: the only place to forget those of segments
     * that went away (mc_xfer.c, "Forgetting segments"). */
    mcSegSweep(c);
    return MC_OK;
}

void mcUnlock(mc_client *c) {
    pthread_mutex_unlock(&c->lock);
    mcLeave(c);
}

/* The lock alone, for the library's own threads (the async worker copying
 * settings, the heartbeat) and mc_close: not counted, never refused. */
void mcLockInternal(mc_client *c) {
    pthread_mutex_lock(&c->lock);
    pointAtSlot(c);
}

int mcTryLockInternal(mc_client *c) {
    if (pthread_mutex_trylock(&c->lock) != 0) return -1;
    pointAtSlot(c);
    return 0;
}

int mcErr(mc_client *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errbuf, MC_ERRLEN, fmt, ap);
    va_end(ap);
    return code;
}

/* A server error reply as an MC_ERR code, its text kept for mc_last_error. */
int mcErrReply(mc_client *c, const mcReply *r) {
    static const struct { const char *word; int code; } map[] = {
        {"EXISTS", MC_ERR_EXISTS},     {"NOSPACE", MC_ERR_NOSPACE},   {"OOM", MC_ERR_NOSPACE},
        {"NOTREADY", MC_ERR_NOT_READY}, {"NOKEY", MC_ERR_NOT_FOUND}, {"NOAUTH", MC_ERR_AUTH},
        {"WRONGPASS", MC_ERR_AUTH},    {"NOTPENDING", MC_ERR_NOT_FOUND}, {"NOPERM", MC_ERR_AUTH},
    };
    if (r == NULL) return mcErr(c, MC_ERR_IO, "no reply");
    if (r->type != MCR_ERROR) return mcErr(c, MC_ERR_PROTOCOL, "unexpected reply type %d", r->type);
    snprintf(c->errbuf, MC_ERRLEN, "%s", r->str);
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (mcReplyIsError(r, map[i].word)) return map[i].code;
    /* The store's two size rules answer with Redis's ERR word (SET must say
     * what redis-server would); to a caller of this library they are a bad
     * argument, not a server failure. The words are docs/PROTOCOL.md's. */
    static const char *const too_big[] = {"ERR key is too long", "ERR value is too large"};
    for (size_t i = 0; i < sizeof(too_big) / sizeof(too_big[0]); i++)
        if (!strncmp(r->str, too_big[i], strlen(too_big[i]))) return MC_ERR_INVALID;
    return MC_ERR_SERVER;
}

void mcFmtU64(char *buf, size_t len, uint64_t v) { snprintf(buf, len, "%llu", (unsigned long long)v); }

/* A replica triple [seg-id, offset, length]. */
int mcParseReplica(const mcReply *r, mcReplica *out) {
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

/* ---- connect ------------------------------------------------------------- */

/* The host part of a tcp URI (brackets of an IPv6 literal removed). */
static void uriHost(const char *uri, char *out, size_t len) {
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
    snprintf(out, len, "%s", tmp);
}

/* The probe that mc_connect makes anyway (a server that wants a password
 * says so now, not at the first put) doubles as cluster detection: CLUSTER
 * SLOTS is an error on a server without cluster support. 0, or -1 with
 * err. */
static int probeServer(mc_client *c, char *err, size_t errlen) {
    mcConn *conn = c->map.nodes[0].conn;
    const char *slots[2] = {"CLUSTER", "SLOTS"};
    mcReply *r = mcConnCommand(conn, 2, slots, NULL);
    if (r == NULL) {
        snprintf(err, errlen, "%s", conn->err);
        return -1;
    }
    if (r->type == MCR_ERROR) {
        int noauth = mcReplyIsError(r, "NOAUTH");
        if (noauth) snprintf(err, errlen, "authentication required: %s", r->str);
        mcReplyFree(r);
        return noauth ? -1 : 0; /* "cluster support disabled" (or no CLUSTER at all): one node */
    }
    c->cluster = 1;
    /* Which entry of the map is the node we hold a connection to. */
    const char *myid[2] = {"CLUSTER", "MYID"};
    mcReply *id = mcConnCommand(conn, 2, myid, NULL);
    if (id && id->type == MCR_BULK) snprintf(c->map.nodes[0].id, sizeof(c->map.nodes[0].id), "%s", id->str);
    mcReplyFree(id);
    int rc = mcMapApplySlots(&c->map, r, err, errlen);
    mcReplyFree(r);
    c->map_at_us = mcNowUs();
    return rc;
}

mc_client *mc_connect(const char *uri, const char *password, char *err, size_t errlen) {
    return mc_connect_user(uri, NULL, password, err, errlen);
}

static mc_client *connectWith(const char *uri, const char *user, const char *password, int connect_ms, int io_ms,
                              char *err, size_t errlen);

mc_client *mc_connect_user(const char *uri, const char *user, const char *password, char *err, size_t errlen) {
    return connectWith(uri, user, password, 5000, 30000, err, errlen);
}

mc_client *mc_connect_timeouts(const char *uri, const char *user, const char *password, int connect_ms, int io_ms,
                               char *err, size_t errlen) {
    if (connect_ms < 0 || io_ms < 0) {
        if (err && errlen) snprintf(err, errlen, "negative timeout");
        return NULL;
    }
    return connectWith(uri, user, password, connect_ms, io_ms, err, errlen);
}

/* mc_connect_user with the timeouts of the connection it opens: a clone
 * (mcClone) and mc_connect_timeouts connect with theirs. */
static mc_client *connectWith(const char *uri, const char *user, const char *password, int connect_ms, int io_ms,
                              char *err, size_t errlen) {
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
    mcForkInstall();
    c->fork_gen = mcForkGenNow();
    c->serial = __atomic_add_fetch(&nextSerial, 1, __ATOMIC_RELAXED);
    pointAtSlot(c); /* nothing else can hold it yet */
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->gate_lock, NULL);
    pthread_cond_init(&c->gate_cond, NULL);
    pthread_mutex_init(&c->hb_lock, NULL);
    pthread_cond_init(&c->hb_cond, NULL);
    c->connect_ms = connect_ms;
    c->io_ms = io_ms;
    c->host_fd = -1;
    c->host_id = MC_ERR_NOT_FOUND;
    c->transport = MC_TRANSPORT_AUTO;
    c->streams = 0; /* per peer: see mcSegTcpXfer */
    c->lease_release = 1;
    c->leased_node = -1;
    const char *sweep = getenv("MC_SEG_SWEEP_MS"); /* tests: the time-based sweep sooner (mc_xfer.c) */
    c->segs_sweep_ms = sweep && atoi(sweep) > 0 ? atoi(sweep) : MC_SEG_SWEEP_MS;
    c->segs_swept_us = mcNowUs();
    c->map.nodes = calloc(1, sizeof(mcNode));
    if (c->map.nodes == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    c->map.nnodes = c->map.cap = 1;
    mcNode *seed = &c->map.nodes[0];
    seed->first_slot = -1;
    snprintf(seed->uri, sizeof(seed->uri), "%s", uri);
    seed->conn = mcConnOpen(uri, c->connect_ms, c->io_ms, err, errlen);
    if (seed->conn == NULL) goto err;
    /* Every connection the handle opens (other nodes, data connections, the
     * tcp stream workers) and its hosted segment's listener use these. */
    if ((password && password[0]) || (user && user[0])) {
        c->password = password && password[0] ? strdup(password) : NULL;
        c->user = user && user[0] ? strdup(user) : NULL;
        int rc = mcConnAuth(seed->conn, c->user, c->password);
        if (rc != MC_OK) {
            snprintf(err, errlen, "authentication failed: %s", seed->conn->err);
            goto err;
        }
    }
    /* Wildcard endpoints of the seed's segments mean where we reached it. */
    if (!seed->conn->is_unix) uriHost(uri, seed->host, sizeof(seed->host));
    else snprintf(seed->host, sizeof(seed->host), "127.0.0.1");
    if (probeServer(c, err, errlen) != 0) goto err;
    return c;
err:
    mcMapFree(&c->map);
    free(c->password);
    free(c->user);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->gate_lock);
    pthread_cond_destroy(&c->gate_cond);
    pthread_mutex_destroy(&c->hb_lock);
    pthread_cond_destroy(&c->hb_cond);
    free(c);
    return NULL;
}

int mc_set_timeouts(mc_client *c, int connect_ms, int io_ms) {
    if (mcHandleBad(c) || connect_ms < 0 || io_ms < 0) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->connect_ms = connect_ms;
    c->io_ms = io_ms;
    /* The connections open now take it too: the metadata ones and the
     * data ones here; the stream workers' (mc_tcp.c) each at its next job,
     * which carries the handle's; the async clone's before its next op. */
    for (int i = 0; i < c->map.nnodes; i++) mcConnSetTimeout(c->map.nodes[i].conn, io_ms);
    for (mcDataConn *d = c->dconns; d; d = d->next) mcConnSetTimeout(d->conn, io_ms);
    mcUnlock(c);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

int mc_set_transport(mc_client *c, int transport) {
    if (mcHandleBad(c) || transport < MC_TRANSPORT_AUTO || transport > MC_TRANSPORT_RDMA) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->transport = transport;
    mcUnlock(c);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

int mc_set_streams(mc_client *c, int streams) {
    if (mcHandleBad(c) || streams < 1 || streams > MC_TCP_MAX_STREAMS) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->streams = streams;
    mcUnlock(c);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

int mc_set_host_ports(mc_client *c, int port_min, int port_max) {
    if (mcHandleBad(c) || !((port_min == 0 && port_max == 0) || (port_min > 0 && port_min <= port_max && port_max < 65536)))
        return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->host_port_min = port_min;
    c->host_port_max = port_max;
    mcUnlock(c);
    return MC_OK;
}

/* Both the calling thread's own (see the top: "Threads"). */
int mc_last_transport(mc_client *c) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    mcErrSlot *s = errSlot(c->serial, 0);
    return s ? s->transport : MC_TRANSPORT_AUTO;
}

const char *mc_last_error(mc_client *c) {
    if (c == NULL) return "no handle";
    if (mcInherited(c->fork_gen)) return MC_FORK_ERR;
    mcErrSlot *s = errSlot(c->serial, 0);
    return s ? s->text : "";
}

/* mc_close of a handle inherited across fork() (see the top: "Fork"):
 * what is this process's own copy goes, nothing of the parent's is
 * touched. No lock is taken: one may have been held by a thread of the
 * parent at the fork. */
static void closeInherited(mc_client *c) {
    mcAsyncForget(c);
    mcViewQueueForget(c->views);
    mcHostForget(c->host); /* no UNMOUNT, no shutdown(), no thread joined */
    for (int i = 0; i < c->nslices; i++)
        for (int j = 0; j < c->slices[i].argc; j++) free(c->slices[i].argv[j]);
    free(c->slices);
    if (c->host_owned && c->host_mem) munmap(c->host_mem, c->host_size); /* the child's mapping */
    if (c->host_fd >= 0) close(c->host_fd);
    free(c->host_name);
    while (c->segs) {
        mcSeg *s = c->segs;
        c->segs = s->next;
        mcSegFree(s); /* unmaps the child's mapping; the parent's stays */
    }
    while (c->dconns) {
        mcDataConn *d = c->dconns;
        c->dconns = d->next;
        mcConnClose(d->conn); /* close(), no shutdown(): the parent's descriptor keeps it open */
        free(d);
    }
    while (c->regions) {
        mcRegion *r = c->regions;
        c->regions = r->next;
        free(r);
    }
    mcTcpPoolForget(c->tcp_pool);
    mcMapFree(&c->map);
    free(c->password);
    free(c->user);
    free(c);
}

void mc_close(mc_client *c) {
    if (c == NULL) return;
    if (mcInherited(c->fork_gen)) {
        closeInherited(c);
        return;
    }
    /* Calls in flight on other threads leave first; those not yet inside
     * are refused (see the top: "Threads"). A second mc_close of the same
     * handle is a double free, as before. */
    pthread_mutex_lock(&c->gate_lock);
    c->closing = 1;
    while (c->users > 0) pthread_cond_wait(&c->gate_cond, &c->gate_lock);
    pthread_mutex_unlock(&c->gate_lock);
    mcAsyncStop(c); /* its queued batches first: they finish (mc_async.c) */
    mcLockInternal(c);
    mcViewQueueClose(c->views); /* later releases are dropped: closing ends the holds */
    mcUnmountLocked(c);
    while (c->segs) {
        mcSeg *s = c->segs;
        c->segs = s->next;
        mcSegFree(s);
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
    if (c->cuda_stream) mcCudaStreamDestroy(c->cuda_stream);
    mcMapFree(&c->map);
    free(c->password);
    free(c->user);
    pthread_mutex_unlock(&c->lock);
    /* A call refused at the gate meanwhile may still be in its unlock. */
    pthread_mutex_lock(&c->gate_lock);
    pthread_mutex_unlock(&c->gate_lock);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->gate_lock);
    pthread_cond_destroy(&c->gate_cond);
    pthread_mutex_destroy(&c->hb_lock);
    pthread_cond_destroy(&c->hb_cond);
    free(c);
}

/* Compiled in, not taken from the header the caller saw: the two differ
 * exactly when a program built against one release loads another. */
const char *mc_version(void) { return MOONCAKE_VERSION; }

const char *mc_strerror(int err) {
    switch (err) {
    case MC_OK: return "ok";
    case MC_ERR_NOT_FOUND: return "no such key";
    case MC_ERR_EXISTS: return "key exists";
    case MC_ERR_NOSPACE: return "no space for the value";
    case MC_ERR_LEASE_EXPIRED: return "read lease expired before the transfer ended";
    case MC_ERR_TOO_SMALL: return "buffer smaller than the value";
    case MC_ERR_INVALID: return "invalid argument";
    case MC_ERR_AUTH: return "authentication failed or not permitted";
    case MC_ERR_PROTOCOL: return "protocol error";
    case MC_ERR_IO: return "I/O error or timeout";
    case MC_ERR_UNSUPPORTED: return "not supported here";
    case MC_ERR_NOT_READY: return "the key's put has not ended";
    case MC_ERR_SERVER: return "server error";
    case MC_ERR_NOMEM: return "out of memory";
    case MC_ERR_PENDING: return "the operation has not finished";
    default: return err >= 0 ? "ok" : "unknown error";
    }
}

/* ---- put ----------------------------------------------------------------- */

/* PUT.START arguments after "key size". */
int mcPutOptArgs(const mc_put_opts *o, const char **argv, char *repbuf, char *pinbuf) {
    int n = 0;
    if (o == NULL) return 0;
    if (o->replicas > 0) {
        snprintf(repbuf, 16, "%d", o->replicas);
        argv[n++] = "REPLICAS";
        argv[n++] = repbuf;
    }
    if (o->prefer && o->prefer[0]) {
        argv[n++] = o->prefer_hint ? "HINT" : "PREFER";
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

/* PUT.REVOKE where the put started; best effort (a node that gave the
 * slot away abandoned the put already). */
static void putRevoke(mc_client *c, const mcRoute *rt, const void *key, size_t keylen) {
    const char *argv[2] = {"PUT.REVOKE", key};
    size_t lens[2] = {10, keylen};
    mcReply *r;
    int redirected;
    if (mcRouteCommand(c, rt, 2, argv, lens, &r, &redirected) == MC_OK) mcReplyFree(r);
}

static long long getLocked(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                           size_t cap, int probe);
static long long getAndRelease(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                               size_t cap, int probe);

/* A put's PUT.START answered "-EXISTS a put of this key is in progress":
 * after a lost connection, that is our own put, abandoned with the
 * connection and given back by the server's next sweep. */
int mcPutInProgress(const mcReply *r) {
    return r && r->type == MCR_ERROR && mcReplyIsError(r, "EXISTS") && strstr(r->str, "in progress") != NULL;
}

/* A put redone after its PUT.END was sent and the answer lost finds the
 * key there: this put's, if it ran, or another writer's. The key holds
 * exactly these bytes (read back and compared) -- MC_OK, what the put
 * was for, whoever wrote them; else MC_ERR_EXISTS, as any put that comes
 * second. Host memory only (device buffers: MC_ERR_EXISTS). */
int mcPutLandedAlready(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                       size_t len) {
    int rc = MC_ERR_EXISTS;
    char *buf = mcIovDevice(c, iov, iovcnt, len) != XF_HOST ? NULL : malloc(len ? len : 1);
    if (buf) {
        struct iovec one = {buf, len};
        if (getAndRelease(c, key, keylen, &one, 1, len, 0) == (long long)len) {
            size_t off = 0;
            rc = MC_OK;
            for (int i = 0; i < iovcnt && off < len && rc == MC_OK; i++) {
                size_t n = iov[i].iov_len < len - off ? iov[i].iov_len : len - off;
                if (memcmp(buf + off, iov[i].iov_base, n)) rc = MC_ERR_EXISTS;
                off += n;
            }
        }
        free(buf);
    }
    if (rc != MC_OK)
        mcErr(c, MC_ERR_EXISTS, "the key exists (this put's PUT.END was sent and its answer lost; "
                                 "the key holds other bytes)");
    return rc;
}

/* A put of the concatenation of iov[0..iovcnt), len bytes in all.
 * Riding through: a put whose node's connection was lost at any step
 * (PUT.START's extents are that connection's: the server abandons them
 * when it closes, or forgot them in a restart) is redone from PUT.START
 * after a pause, until the call's deadline; never PUT.END on another
 * connection. */
int mcPutLocked(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt, size_t len,
                const mc_put_opts *opts, int device) {
    char sizebuf[24], repbuf[16], pinbuf[24];
    const char *argv[16];
    size_t lens[16];
    c->errbuf[0] = '\0';
    mcFmtU64(sizebuf, sizeof(sizebuf), len);
    argv[0] = "PUT.START";
    argv[1] = key;
    argv[2] = sizebuf;
    int argc = 3 + mcPutOptArgs(opts, argv + 3, repbuf, pinbuf);
    for (int i = 0; i < argc; i++) lens[i] = i == 1 ? keylen : strlen(argv[i]);
    long long deadline = mcCallDeadline(c);
    unsigned long reconnects = c->reconnects;
    int ended_lost = 0, lost_tries = 0;
    for (int redo = 0;;) {
        mcReply *r;
        mcRoute rt;
        int rc = mcKeyCommand(c, key, keylen, argc, argv, lens, &r, &rt);
        if (rc != MC_OK) return rc;
        if (r->type != MCR_ARRAY) {
            if (c->reconnects != reconnects && mcPutInProgress(r) && mcNowUs() < deadline) {
                mcReplyFree(r); /* our own put, on a connection that is gone: swept soon */
                mcBackoff(MC_LOST_BACKOFF + lost_tries++, deadline);
                continue;
            }
            rc = mcErrReply(c, r);
            mcReplyFree(r);
            if (rc == MC_ERR_EXISTS && ended_lost) rc = mcPutLandedAlready(c, key, keylen, iov, iovcnt, len);
            return rc;
        }
        mcReplica reps[MC_MAX_REPLICAS];
        size_t n = r->elements < MC_MAX_REPLICAS ? r->elements : MC_MAX_REPLICAS;
        for (size_t i = 0; i < n; i++) {
            if (mcParseReplica(r->element[i], &reps[i]) != 0 || reps[i].len != len) {
                mcReplyFree(r);
                putRevoke(c, &rt, key, keylen);
                return mcErr(c, MC_ERR_PROTOCOL, "bad replica in PUT.START reply");
            }
        }
        mcReplyFree(r);
        int lost = 0;
        for (size_t i = 0; i < n && !lost; i++) {
            rc = mcXferReplica(c, rt.node, rt.gen, &reps[i], iov, iovcnt, 1, device);
            if (rc == MC_OK) continue;
            if (!mcNodeAlive(c, rt.node, rt.gen)) {
                lost = 1; /* the put died with its connection: nothing to revoke */
                break;
            }
            char why[512];
            snprintf(why, sizeof(why), "%s", c->errbuf);
            putRevoke(c, &rt, key, keylen);
            snprintf(c->errbuf, MC_ERRLEN, "replica %zu: %.400s (put revoked)", i, why);
            return rc;
        }
        int redirected = 0;
        if (!lost) {
            const char *end[2] = {"PUT.END", key};
            size_t endlens[2] = {7, keylen};
            int sent = mcNodeSame(c, rt.node, rt.gen);
            rc = mcRouteCommand(c, &rt, 2, end, endlens, &r, &redirected);
            if (redirected == 2) {
                lost = 1;
                ended_lost |= sent; /* it may have run: the key may be there, ours */
            } else {
                if (rc != MC_OK) return rc;
                rc = r->type == MCR_STATUS ? MC_OK : mcErrReply(c, r);
                mcReplyFree(r);
            }
        }
        if (lost) {
            char why[MC_ERRLEN];
            memcpy(why, c->errbuf, sizeof(why));
            if (mcNowUs() >= deadline) return mcErr(c, MC_ERR_IO, "put: %.400s", why);
            mcBackoff(MC_LOST_BACKOFF + lost_tries++, deadline);
            continue;
        }
        /* The slot moved between PUT.START and PUT.END: the node abandoned
         * the put (those bytes are never published); do it all again on
         * the new owner. */
        if (!redirected || ++redo > MC_MAX_REDO) return rc;
    }
}

/* Every put: the buffers go to the replicas in place, device memory among
 * them too (mcXferReplica). registered: the put_from rule. */
static int putStaged(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                     const mc_put_opts *opts, int registered) {
    size_t len;
    int rc;
    if ((rc = mcIovCheck(c, iov, iovcnt, &len)) != MC_OK) return rc;
    if (registered && (rc = mcIovRegistered(c, iov, iovcnt)) != MC_OK) return rc;
    if (key == NULL || keylen == 0 || len == 0) return mcErr(c, MC_ERR_INVALID, "empty key or value");
    return mcPutLocked(c, key, keylen, iov, iovcnt, len, opts, mcIovDevice(c, iov, iovcnt, len));
}

int mc_put(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len, const mc_put_opts *opts) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    struct iovec one = {(void *)buf, len};
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = putStaged(c, key, keylen, &one, 1, opts, 0);
    mcUnlock(c);
    return rc;
}

int mc_put_from(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
                const mc_put_opts *opts) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    struct iovec one = {(void *)buf, len};
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = putStaged(c, key, keylen, &one, 1, opts, 1);
    mcUnlock(c);
    return rc;
}

/* The v-forms: one body, registered memory required or not. */
static int putv(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                const mc_put_opts *opts, int registered) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = putStaged(c, key, keylen, iov, iovcnt, opts, registered);
    mcUnlock(c);
    return rc;
}

int mc_put_fromv(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                 const mc_put_opts *opts) {
    return putv(c, key, keylen, iov, iovcnt, opts, 1);
}

/* One object from several buffers of any host memory: the single-key put
 * of a header and a payload (LMCache's put_parts) without batch framing. */
int mc_putv(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
            const mc_put_opts *opts) {
    return putv(c, key, keylen, iov, iovcnt, opts, 0);
}

/* ---- get ----------------------------------------------------------------- */

/* A GET.REPLICAS reply: lease, size and replicas; MC_OK or MC_ERR_*. */
int mcParseReplicas(mc_client *c, const mcReply *r, long long *lease_ms, uint64_t *size, mcReplica *reps,
                    size_t *n) {
    if (r->type == MCR_NIL) return mcErr(c, MC_ERR_NOT_FOUND, "no such key");
    if (r->type != MCR_ARRAY) return mcErrReply(c, r);
    int ok1, ok2;
    if (r->elements < 3) return mcErr(c, MC_ERR_PROTOCOL, "short GET.REPLICAS reply");
    *lease_ms = mcReplyInt(r->element[0], &ok1);
    long long sz = mcReplyInt(r->element[1], &ok2);
    if (!ok1 || !ok2 || sz < 0) return mcErr(c, MC_ERR_PROTOCOL, "bad GET.REPLICAS reply");
    *size = (uint64_t)sz;
    *n = 0;
    for (size_t i = 3; i < r->elements && *n < MC_MAX_REPLICAS; i++) {
        if (mcParseReplica(r->element[i], &reps[*n]) != 0) return mcErr(c, MC_ERR_PROTOCOL, "bad replica");
        if (reps[*n].len != *size) return mcErr(c, MC_ERR_PROTOCOL, "replica length differs from size");
        (*n)++;
    }
    return MC_OK;
}

/* Reads the first replica that works into the first size bytes of the
 * buffers; lease checked at the end. device: XF_* (mcXferReplica). */
long long mcReadReplicas(mc_client *c, int node, unsigned gen, const mcReplica *reps, size_t n, uint64_t size,
                         const struct iovec *iov, int iovcnt, long long deadline_us, int device) {
    if (size == 0) return 0;
    if (n == 0) return mcErr(c, MC_ERR_NOT_FOUND, "the value has no live replica");
    int rc = MC_ERR_IO;
    char first_err[512] = "";
    for (size_t i = 0; i < n; i++) {
        rc = mcXferReplica(c, node, gen, &reps[i], iov, iovcnt, 0, device);
        if (rc == MC_OK) {
            if (mcNowUs() > deadline_us) return mcErr(c, MC_ERR_LEASE_EXPIRED, "the transfer outlived its lease");
            return (long long)size;
        }
        if (!first_err[0]) snprintf(first_err, sizeof(first_err), "%s", c->errbuf);
    }
    snprintf(c->errbuf, MC_ERRLEN, "no replica could be read: %s", first_err);
    return rc;
}

/* The reader is done with a key: end its lease now rather than at its
 * deadline, so the space of a version overwritten or removed while it was
 * read comes back at once, and a store full of recently read objects can
 * evict them. Queued on the connection the lease came from and sent with
 * the caller's flush, without waiting for the reply (mc_conn drops it
 * before the next one). Keys reached through ASKING keep their lease. */
void mcQueueLeaseRelease(mcConn *conn, const void *key, size_t keylen) {
    const char *argv[2] = {"LEASE.RELEASE", key};
    size_t lens[2] = {13, keylen};
    mcConnAppendNoReply(conn, 2, argv, lens);
}

void mcFlushLeaseReleases(mcConn *conn) {
    if (mcConnFlush(conn) != MC_OK) conn->discard = 0; /* broken: nothing more is read from it */
}

int mc_set_lease_release(mc_client *c, int on) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->lease_release = on != 0;
    mcUnlock(c);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

static long long getAndRelease(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                               size_t cap, int probe) {
    c->leased_node = -1;
    long long got = getLocked(c, key, keylen, iov, iovcnt, cap, probe);
    mcConn *conn = c->leased_node >= 0 ? c->map.nodes[c->leased_node].conn : NULL;
    if (c->lease_release && !c->leased_asking && conn && mcNodeSame(c, c->leased_node, c->leased_gen)) {
        mcQueueLeaseRelease(conn, key, keylen);
        mcFlushLeaseReleases(conn);
    }
    return got;
}

/* A get into the buffers iov[0..iovcnt), cap bytes in all: the value fills
 * a prefix of them. A read that failed because the node's connection was
 * lost meanwhile (its replica list may name another server's memory now)
 * is asked again from GET.REPLICAS, until the call's deadline. */
static long long getOnce(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt, size_t cap,
                         int probe, mcRoute *rt);

static long long getLocked(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                           size_t cap, int probe) {
    if (key == NULL || keylen == 0) return mcErr(c, MC_ERR_INVALID, "empty key");
    long long deadline = mcCallDeadline(c);
    for (int tries = 0;; tries++) {
        mcRoute rt = {-1, 0, 0};
        long long got = getOnce(c, key, keylen, iov, iovcnt, cap, probe, &rt);
        if (got != MC_ERR_IO || rt.node < 0 || mcNowUs() >= deadline || mcNodeAlive(c, rt.node, rt.gen)) return got;
        mcBackoff(MC_LOST_BACKOFF + tries, deadline);
    }
}

static long long getOnce(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt, size_t cap,
                         int probe, mcRoute *rt_out) {
    c->errbuf[0] = '\0';
    const char *argv[2] = {"GET.REPLICAS", key};
    size_t lens[2] = {12, keylen};
    long long t0 = mcNowUs();
    mcReply *r;
    mcRoute rt;
    int rc = mcKeyCommand(c, key, keylen, 2, argv, lens, &r, &rt);
    if (rc != MC_OK) return rc;
    *rt_out = rt;
    long long lease_ms;
    uint64_t size;
    mcReplica reps[MC_MAX_REPLICAS];
    size_t n;
    rc = mcParseReplicas(c, r, &lease_ms, &size, reps, &n);
    mcReplyFree(r);
    if (rc != MC_OK) return rc;
    c->leased_node = rt.node; /* a lease was granted: getAndRelease ends it */
    c->leased_asking = rt.asking;
    c->leased_gen = rt.gen;
    if (probe) return (long long)size;
    if (size > cap) return mcErr(c, MC_ERR_TOO_SMALL, "value is %llu bytes, buffer %zu", (unsigned long long)size, cap);
    for (int i = 0; size && i < iovcnt; i++) /* mc_get(NULL, cap); the v-forms checked theirs */
        if (iov[i].iov_base == NULL && iov[i].iov_len) return mcErr(c, MC_ERR_INVALID, "no buffer");
    long long deadline = t0 + lease_ms * 1000;
    return mcReadReplicas(c, rt.node, rt.gen, reps, n, size, iov, iovcnt, deadline, mcIovDevice(c, iov, iovcnt, size));
}

long long mc_get(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    struct iovec one = {buf, cap};
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    long long rc = getAndRelease(c, key, keylen, &one, 1, cap, 0);
    mcUnlock(c);
    return rc;
}

long long mc_get_into(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    struct iovec one = {buf, cap};
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    long long rc = mcRegionOf(c, buf, cap) ? getAndRelease(c, key, keylen, &one, 1, cap, 0)
                                         : mcErr(c, MC_ERR_INVALID, "buffer is not inside a registered region");
    mcUnlock(c);
    return rc;
}

long long mc_get_intov(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    size_t cap;
    long long rc = mcIovCheck(c, iov, iovcnt, &cap);
    if (rc == MC_OK) rc = mcIovRegistered(c, iov, iovcnt);
    if (rc == MC_OK) rc = getAndRelease(c, key, keylen, iov, iovcnt, cap, 0);
    mcUnlock(c);
    return rc;
}

long long mc_size(mc_client *c, const void *key, size_t keylen) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    struct iovec none = {NULL, 0};
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    long long rc = getAndRelease(c, key, keylen, &none, 1, 0, 1);
    mcUnlock(c);
    return rc;
}

/* A one-key command answering an integer: 1 when it is > 0, 0, or MC_ERR_*. */
static int keyIntCommand(mc_client *c, const char *cmd, const void *key, size_t keylen) {
    if (mcHandleBad(c) || key == NULL || keylen == 0) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    const char *argv[2] = {cmd, key};
    size_t lens[2] = {strlen(cmd), keylen};
    mcReply *r;
    mcRoute rt;
    int rc = mcKeyCommand(c, key, keylen, 2, argv, lens, &r, &rt);
    if (rc == MC_OK) {
        rc = r->type == MCR_INT ? (r->integer > 0) : mcErrReply(c, r);
        mcReplyFree(r);
    }
    mcUnlock(c);
    return rc;
}

int mc_exists(mc_client *c, const void *key, size_t keylen) { return keyIntCommand(c, "EXISTS", key, keylen); }
int mc_remove(mc_client *c, const void *key, size_t keylen) { return keyIntCommand(c, "REMOVE", key, keylen); }

/* REMOVE.ALL on the one server, or on every primary of a cluster (the map
 * reloaded first, so a primary that joined since is not missed). A node
 * that fails does not stop the others: the first failure is returned, as
 * what was asked did not happen everywhere. */
static long long removeAllLocked(mc_client *c) {
    const char *argv[1] = {"REMOVE.ALL"};
    long long sum = 0;
    int rc = MC_OK, any = 0;
    if (c->cluster) mcRefreshMap(c, 0, 1);
    for (int i = 0; i < (c->cluster ? c->map.nnodes : 1); i++) {
        if (c->cluster && !c->map.nodes[i].primary) continue;
        any = 1;
        mcReply *r;
        int nrc = mcNodeCommand(c, i, 0, 1, argv, NULL, &r);
        if (nrc == MC_OK) {
            nrc = r->type == MCR_INT && r->integer >= 0 ? MC_OK
                  : r->type == MCR_ERROR ? mcErrReply(c, r) : mcErr(c, MC_ERR_PROTOCOL, "bad REMOVE.ALL reply");
            if (nrc == MC_OK) sum += r->integer;
            mcReplyFree(r);
        }
        if (nrc != MC_OK && rc == MC_OK) rc = nrc;
    }
    if (!any) return mcErr(c, MC_ERR_SERVER, "the cluster serves no slots: no node to remove from");
    return rc != MC_OK ? rc : sum;
}

long long mc_remove_all(mc_client *c) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    long long rc = removeAllLocked(c);
    mcUnlock(c);
    return rc;
}

/* SCAN's pages are gathered as (offset, length) into one growing byte
 * buffer; the mc_key array is built in front of the bytes at the end, so
 * the caller frees one pointer. */
typedef struct {
    size_t off, len;
} keyAt;

typedef struct {
    char *bytes;
    size_t used, cap;
    keyAt *at;
    size_t n, ncap;
} keyList;

static int keyListAdd(keyList *l, const char *k, size_t len) {
    if (l->n == l->ncap) {
        size_t nc = l->ncap ? l->ncap * 2 : 256;
        if (nc > SIZE_MAX / sizeof(keyAt)) return MC_ERR_NOMEM;
        keyAt *a = realloc(l->at, nc * sizeof(keyAt));
        if (a == NULL) return MC_ERR_NOMEM;
        l->at = a;
        l->ncap = nc;
    }
    if (len > SIZE_MAX / 2 - l->used) return MC_ERR_NOMEM;
    if (l->used + len > l->cap) {
        size_t nc = l->cap ? l->cap : 4096;
        while (nc < l->used + len) nc *= 2;
        char *b = realloc(l->bytes, nc);
        if (b == NULL) return MC_ERR_NOMEM;
        l->bytes = b;
        l->cap = nc;
    }
    memcpy(l->bytes + l->used, k, len);
    l->at[l->n++] = (keyAt){l->used, len};
    l->used += len;
    return MC_OK;
}

/* One node's keys: SCAN from cursor 0 until it comes back to 0. A reply
 * that is not [cursor, [keys...]] is a protocol error, never guessed at.
 * So is a cursor that comes back to one it gave before: each page is a
 * quick round trip, so no timeout would ever end such a scan, and its
 * keys would fill memory. A server's cursors never repeat within one scan
 * (each names the next bucket in order), so a repeat is a cycle; it is
 * found with O(1) memory by Brent's method: the cursor saved at steps
 * 1, 2, 4, 8, ... is compared with each one after it. */
static int scanNodeLocked(mc_client *c, int node, const char *match, keyList *l) {
    char cursor[32] = "0", saved[32] = "0";
    unsigned long long steps = 0, power = 1;
    do {
        const char *argv[6] = {"SCAN", cursor, "COUNT", "1000", "MATCH", match};
        mcReply *r;
        int rc = mcNodeCommand(c, node, 0, match ? 6 : 4, argv, NULL, &r);
        if (rc != MC_OK) return rc;
        if (r->type == MCR_ERROR) {
            rc = mcErrReply(c, r);
            mcReplyFree(r);
            return rc;
        }
        if (r->type != MCR_ARRAY || r->elements != 2 || r->element[0]->type != MCR_BULK ||
            r->element[0]->len == 0 || r->element[0]->len >= sizeof(cursor) || r->element[1]->type != MCR_ARRAY) {
            mcReplyFree(r);
            return mcErr(c, MC_ERR_PROTOCOL, "bad SCAN reply");
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        if (strcmp(cursor, "0") != 0 && strcmp(cursor, saved) == 0) {
            mcReplyFree(r);
            return mcErr(c, MC_ERR_PROTOCOL, "SCAN cursor %s came back: the scan would never end", saved);
        }
        if (++steps == power) {
            memcpy(saved, cursor, sizeof(saved));
            power *= 2;
            steps = 0;
        }
        const mcReply *ks = r->element[1];
        for (size_t i = 0; i < ks->elements && rc == MC_OK; i++) {
            if (ks->element[i]->type != MCR_BULK) rc = mcErr(c, MC_ERR_PROTOCOL, "bad SCAN reply");
            else if ((rc = keyListAdd(l, ks->element[i]->str, ks->element[i]->len)) != MC_OK)
                rc = mcErr(c, rc, "out of memory listing keys");
        }
        mcReplyFree(r);
        if (rc != MC_OK) return rc;
    } while (strcmp(cursor, "0") != 0);
    return MC_OK;
}

int mc_scan_keys(mc_client *c, const char *match, mc_key **keys, size_t *n) {
    if (keys) *keys = NULL;
    if (n) *n = 0;
    if (mcHandleBad(c) || keys == NULL || n == NULL) return MC_ERR_INVALID;
    keyList l = {0};
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = MC_OK, any = 0;
    if (c->cluster) mcRefreshMap(c, 0, 1);
    for (int i = 0; i < (c->cluster ? c->map.nnodes : 1) && rc == MC_OK; i++) {
        if (c->cluster && !c->map.nodes[i].primary) continue;
        any = 1;
        rc = scanNodeLocked(c, i, match, &l);
    }
    if (rc == MC_OK && !any) rc = mcErr(c, MC_ERR_SERVER, "the cluster serves no slots: no node to scan");
    mcUnlock(c);
    mc_key *out = NULL;
    if (rc == MC_OK && l.n > (SIZE_MAX - l.used) / sizeof(mc_key)) rc = MC_ERR_NOMEM;
    if (rc == MC_OK && (out = malloc(l.n * sizeof(mc_key) + l.used + 1)) == NULL) rc = MC_ERR_NOMEM;
    if (rc == MC_OK) {
        char *b = (char *)(out + l.n);
        if (l.used) memcpy(b, l.bytes, l.used);
        for (size_t i = 0; i < l.n; i++) out[i] = (mc_key){b + l.at[i].off, l.at[i].len};
        *keys = out;
        *n = l.n;
    }
    free(l.bytes);
    free(l.at);
    return rc;
}

/* ---- registration -------------------------------------------------------- */

/* Registers r with the NICs. Device memory goes the way the platform
 * allows (mcRdmaRegisterDevice: a dmabuf of the range, else peer memory,
 * else staged through host memory); the choice is kept for mc_region_rdma
 * and said on stderr when MC_RDMA_VERBOSE is set. */
static void regionRdma(mc_client *c, mcRegion *r, char *rkeys, size_t cap) {
    mcRdma *e = mcClientRdma(c);
    r->rdma_mode = MC_REG_STAGED;
    if (e == NULL) {
        snprintf(r->rdma_why, sizeof(r->rdma_why), "%s", c->rdma_err);
    } else if (r->mem == MC_MEM_CUDA) {
        uint64_t off = 0;
        char dwhy[128] = "";
        int fd = mcRdmaCudaDmabuf(r->addr, r->len, &off, dwhy, sizeof(dwhy));
        int mode = mcRdmaRegisterDevice(e, r->addr, r->len, fd, off, getenv("MC_GPUDIRECT"), rkeys, cap, r->rdma_why,
                                        sizeof(r->rdma_why));
        if (fd >= 0) close(fd); /* the registration holds the dmabuf itself */
        size_t used = strlen(r->rdma_why);
        if (mode == MC_RDMA_REG_NONE && fd < 0 && dwhy[0] && used < sizeof(r->rdma_why))
            snprintf(r->rdma_why + used, sizeof(r->rdma_why) - used, " (%s)", dwhy);
        r->rdma_mode = mode == MC_RDMA_REG_DMABUF ? MC_REG_RDMA_DMABUF
                       : mode == MC_RDMA_REG_PEERMEM ? MC_REG_RDMA_PEERMEM : MC_REG_STAGED;
    } else if (mcRdmaRegister(e, r->addr, r->len, rkeys, cap) == MC_OK) {
        r->rdma_mode = MC_REG_RDMA_HOST;
        snprintf(r->rdma_why, sizeof(r->rdma_why), "registered with the NICs");
    } else {
        snprintf(r->rdma_why, sizeof(r->rdma_why), "ibv_reg_mr failed: %s", strerror(errno));
    }
    r->rdma = r->rdma_mode != MC_REG_STAGED;
    if (r->mem == MC_MEM_CUDA && getenv("MC_RDMA_VERBOSE"))
        fprintf(stderr, "mooncake: device memory %p+%zu: GPUDirect %s (%s)\n", (void *)r->addr, r->len,
                r->rdma_mode == MC_REG_RDMA_DMABUF ? "by dmabuf" : r->rdma_mode == MC_REG_RDMA_PEERMEM ? "by peer memory"
                                                                                                       : "off, staged",
                r->rdma_why);
}

int mc_region_rdma(mc_client *c, const void *addr, char *why, size_t whylen) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    mcRegion *r = mcRegionOf(c, addr, 1);
    int rc = r ? r->rdma_mode : MC_ERR_NOT_FOUND;
    if (r && why && whylen) snprintf(why, whylen, "%s", r->rdma_why);
    mcUnlock(c);
    return rc;
}

int mc_register(mc_client *c, void *addr, size_t len, int mem) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = MC_OK;
    /* A region past the end of the address space would make every "inside
     * a registered region" check true for pointers it never covered. */
    if (addr == NULL || len == 0 || (mem != MC_MEM_HOST && mem != MC_MEM_CUDA) ||
        (uintptr_t)addr > UINTPTR_MAX - len) {
        rc = mcErr(c, MC_ERR_INVALID, "register: %s",
                   addr == NULL ? "a NULL address"
                   : len == 0   ? "a length of 0"
                   : mem != MC_MEM_HOST && mem != MC_MEM_CUDA ? "an unknown memory kind"
                                                              : "the region runs past the end of the address space");
        goto out;
    }
    if (mem == MC_MEM_CUDA && !mcCudaIsDevicePtr(addr)) {
        char why[256];
        rc = mcCudaAvailable(why, sizeof(why)) ? mcErr(c, MC_ERR_INVALID, "not device memory")
                                               : mcErr(c, MC_ERR_UNSUPPORTED, "cuda: %s", why);
        goto out;
    }
    if (mcRegionOf(c, addr, len)) goto out; /* already covered */
    mcRegion *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rc = MC_ERR_NOMEM;
        goto out;
    }
    r->addr = addr;
    r->len = len;
    r->mem = mem;
    char rkeys[512];
    regionRdma(c, r, rkeys, sizeof(rkeys));
    r->next = c->regions;
    c->regions = r;
out:
    mcUnlock(c);
    if (rc == MC_OK) mcAsyncRegister(c, addr, len, mem);
    return rc;
}

int mc_cuda_available(char *why, size_t len) { return mcCudaAvailable(why, len); }

int mc_unregister(mc_client *c, void *addr) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
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
    mcUnlock(c);
    if (rc == MC_OK) mcAsyncUnregister(c, addr);
    return rc;
}

/* ---- the clone of the async worker (mc_async.h) ---------------------------- */

typedef struct {
    int connect_ms, io_ms, transport, streams, lease_release;
} mcSettings;

static void settingsOf(mc_client *c, mcSettings *st) {
    st->connect_ms = c->connect_ms;
    st->io_ms = c->io_ms;
    st->transport = c->transport;
    st->streams = c->streams;
    st->lease_release = c->lease_release;
}

/* Through the public setters: each takes the clone's lock. */
static void settingsApply(mc_client *k, const mcSettings *st) {
    mc_set_timeouts(k, st->connect_ms, st->io_ms);
    mc_set_transport(k, st->transport);
    if (st->streams > 0) mc_set_streams(k, st->streams);
    mc_set_lease_release(k, st->lease_release);
}

mc_client *mcClone(mc_client *c, char *err, size_t errlen) {
    mcSettings st;
    char *uri = NULL, *user = NULL, *password = NULL;
    size_t nreg = 0, i = 0;
    mcRegion *regs = NULL;
    mc_client *k = NULL;

    mcLockInternal(c);
    settingsOf(c, &st);
    for (mcRegion *r = c->regions; r; r = r->next) nreg++;
    uri = strdup(c->map.nodes[0].uri); /* the address mc_connect was given */
    if (c->user) user = strdup(c->user);
    if (c->password) password = strdup(c->password);
    if (nreg) regs = malloc(nreg * sizeof(*regs));
    for (mcRegion *r = c->regions; r && regs; r = r->next) regs[i++] = *r;
    pthread_mutex_unlock(&c->lock);
    if (uri == NULL || (c->user && user == NULL) || (c->password && password == NULL) || (nreg && regs == NULL)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    k = connectWith(uri, user, password, st.connect_ms, st.io_ms, err, errlen);
    if (k == NULL) goto out;
    settingsApply(k, &st);
    for (i = 0; i < nreg; i++) mc_register(k, regs[i].addr, regs[i].len, regs[i].mem);
out:
    free(uri);
    free(user);
    free(password);
    free(regs);
    return k;
}

void mcCloneSync(mc_client *clone, mc_client *c) {
    mcSettings st;
    mcLockInternal(c);
    settingsOf(c, &st);
    pthread_mutex_unlock(&c->lock);
    settingsApply(clone, &st);
}

_Atomic(struct mcAsync *) *mcAsyncSlot(mc_client *c) { return &c->async; }

int mcClientBad(mc_client *c) { return mcHandleBad(c); }

uint64_t mcSerial(const mc_client *c) { return c->serial; }

/* The calling thread's own slot: no lock (see the top: "Threads"). */
void mcSetError(mc_client *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errSlot(c->serial, 1)->text, MC_ERRLEN, fmt, ap);
    va_end(ap);
}

