/* mooncake.c -- libmooncake: put/get of KVCache objects (SPEC §5).
 *
 * A handle holds RESP connections to the metadata server -- to every node
 * of a cluster, see below -- and caches what it learns about segments.
 * Segment ids are never reused by a server, so a cached segment description
 * never goes stale: a segment that went away simply fails its transfer, and
 * the caller falls back to another replica.
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
 * Transfers, fastest first, per replica (xferReplica below). The caller's
 * memory is an iovec list everywhere -- the scatter-gather calls
 * (mc_put_fromv, mc_get_intov, mc_batch_putv/getv) pass theirs, the
 * one-buffer calls one entry -- and no path stages host memory:
 *  - shm: the segment lists a unix:// endpoint we can reach, which sends us
 *    its memfd (SHM.ATTACH); mapped once per segment and process, shared
 *    by all the process's handles, its page tables filled by the ranges
 *    copied (mc_shm.c), then one memcpy per buffer, each at its offset of
 *    the extent.
 *  - rdma: the segment lists rdma:// and every buffer is registered; one
 *    transfer per buffer.
 *  - tcp: SEG.WRITE/SEG.READ on a data connection to one of its endpoints
 *    (reusing a metadata connection when that is the endpoint), payload
 *    written from and read into the caller's buffers directly (sendmsg,
 *    recvmsg); with mc_set_streams, a large transfer is striped over
 *    several connections to the same peer, each stream taking the part of
 *    the buffers its slice of the byte range covers (mc_tcp.c).
 *
 * Batches send one BATCH.* command for the metadata (per node and slot in a
 * cluster), do every shm copy, and pipeline the tcp transfers of all items
 * before reading any reply (runs of small values as one SEG.WRITEV/
 * SEG.READV, mc_tcp.c), so the round trips overlap; BATCH.PUT.END publishes
 * what was written. A batch get is a list of reads (batchReadLocked), each
 * a byte range of one key's object: a whole object for mc_batch_get(v),
 * the caller's ranges for mc_batch_get_ranges. A range needs nothing of
 * its own from any transport: it is the replica's extent narrowed to its
 * bytes, which the shm copy, SEG.READ(V) and RDMA all take as they are.
 *
 * Clusters. mc_connect sends CLUSTER SLOTS where it used to send PING (the
 * same one round trip): a server without cluster support answers an error
 * and the handle is the single-node client it always was -- one metadata
 * connection, node 0, no slot hashing, the exact same commands. A cluster
 * node answers the slot map, and from then on (mc_cluster.c holds the map):
 *  - keyed commands go to the owner of the key's slot (keyCommand), on a
 *    connection per node opened on first use with the handle's password;
 *    -MOVED patches that slot and refreshes the whole map (at most every
 *    MC_MAP_REFRESH_MS), -ASK resends to the target behind ASKING (good for
 *    one command), -TRYAGAIN waits a little, -CLUSTERDOWN refreshes the map
 *    and waits; all bounded by the I/O timeout (see riding through).
 *  - a put's PUT.END (and PUT.REVOKE) go to the node that answered its
 *    PUT.START, behind ASKING if that node was reached by -ASK: the extents
 *    are that node's. If the slot moved meanwhile, the node abandoned the
 *    pending put and its PUT.END answers -MOVED: the whole put is redone on
 *    the new owner (the bytes written before are never published).
 *  - batches (runPhase) group keys by (node, ASKING, slot): a node refuses
 *    a multi-key command whose keys hash to different slots (-CROSSSLOT,
 *    as Redis does even when it owns both), so one command per slot. The
 *    commands for all nodes are written before any reply is read --
 *    pipelining, not threads: every node works on its share at once, a
 *    phase costs one round trip however many nodes and slots it touches,
 *    and the handle's single lock and blocking connections stay as they
 *    are. Redirected groups are resent in the next round; a group refused
 *    with -TRYAGAIN (a slot migrating, some of its keys moved already) is
 *    split into single keys, which the nodes then redirect one by one.
 *  - segment ids are per node (every node's own pool is id 1), so cached
 *    segments are keyed by (node, id), and a replica's bytes are moved
 *    with the segment table of the node that named it.
 *  - mc_mount cuts the memory into one slice per primary and MOUNTs slice
 *    i on primary i (same listener, same endpoints, the slice's BASE), so
 *    every shard can place replicas in this process's memory: a writer's
 *    replicas can stay on its own host whichever shard owns the key. The
 *    host (mc_host.c) serves each slice under its own segment id. Primaries
 *    that join after the mount get no slice until the next mount.
 *
 * Riding through (a server restarted on its address, a cluster node killed
 * and started again, a failover): a call whose node cannot be reached --
 * its connection broke, a connect is refused -- waits (MC_LOST_BACKOFF),
 * reloads the map from another node, and tries again, until the I/O
 * timeout from the call's start (callDeadline). What may be sent again on
 * a new connection: every keyed command, read or not (a PUT.START again is
 * a new put; the old connection's was abandoned with it); never PUT.END or
 * PUT.REVOKE, which belong to the connection that started the put
 * (routeCommand, runPhase's pinned keys): a put whose connection was lost
 * at any step is redone whole from PUT.START. Each node's connections are
 * counted (mcNode.gen): a reply, a segment description or mapping, a
 * pending put or a lease learnt on one is trusted only while that very
 * connection lives, since the server behind a new one may be a restarted
 * one whose pool is other memory under the same segment id; a transfer
 * that failed on a data connection asks the metadata one (nodeAlive). An
 * -EXISTS to a redone put whose PUT.END may have run is judged by reading
 * the key back (putLandedAlready).
 *
 * A handle that hosts a segment names its owner and runs a heartbeat thread
 * (HEARTBEAT to every node holding a slice, reconnect, MOUNT again after
 * -NEEDREMOUNT; after a failover, MOUNT on the slot's new owner, which
 * re-attaches the slice's objects: sliceFollow): see heartbeatMain.
 *
 * Device memory (CUDA, mc_cuda.c) moves by the same paths, every call form
 * alike (single, scatter-gather, batch, ranges, async), each buffer of a
 * call checked on its own (iovDevice): over shm a device buffer is copied
 * straight into or out of the segment's mapping with cudaMemcpy, the
 * mapping page-locked once per process at the first device transfer
 * (mcShmCudaRegister): one copy per byte, as for host memory. Over tcp the
 * bytes need host memory for send/recv: a replica is gathered into the
 * handle's pinned buffer before its SEG.WRITE, or read into it and
 * scattered out after (tcpXferDevice), a large one in 4 MiB chunks whose
 * device copies overlap the socket (tcpXferChunked); batches send such
 * items one by one after the pipelined host ones. Device buffers all registered for RDMA go
 * over RDMA directly (GPUDirect).
 *
 * Locking: one mutex per handle around every public call (mooncake.h); the
 * connections to all nodes are used under it.
 *
 * Non-blocking batches (mc_batch_put_async, mc_async.c) run on a worker
 * thread with a handle of its own, a clone of this one (mcClone below:
 * same server, user, settings and registered buffers), so they never take
 * this handle's lock and its synchronous calls go on meanwhile. Setters and
 * mc_register/mc_unregister tell the worker (mc_async.h); mc_close stops it
 * first.
 */
#include "mooncake.h"

#include <errno.h>
#include <sys/random.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mc_async.h"
#include "mc_cluster.h"
#include "mc_conn.h"
#include "mc_cuda.h"
#include "mc_host.h"
#include "mc_rdma.h"
#include "mc_shm.h"
#include "mc_view.h"
#include "mc_tcp.h"

#define MC_MAX_ENDPOINTS 16
#ifdef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE_COMPAT MADV_POPULATE_WRITE
#else
#define MADV_POPULATE_WRITE_COMPAT 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* Cluster retry policy (see the design comment). */
#define MC_MAP_REFRESH_MS 250        /* at most one CLUSTER SLOTS per this, after a MOVED */
#define MC_MAX_HOPS 32               /* redirections and retries of one command or batch */
#define MC_MAX_REDO 3                /* puts redone after their slot moved */
#define MC_RIDE_MS 30000             /* how long a call rides through when the handle has no I/O timeout */
#define MC_LOST_BACKOFF 3            /* a lost connection is retried after 8, 16 ... 100 ms */

/* How a transfer's buffers are moved (xferReplica). */
#define XF_HOST 0                    /* host memory only */
#define XF_GPUDIRECT 1               /* device memory all registered for RDMA: RDMA only */
#define XF_DEVICE 2                  /* device memory among them: copied by the CUDA runtime */
#define MC_DEV_CHUNK ((size_t)4 << 20) /* device bytes over tcp: the chunk whose copy overlaps the socket */

typedef struct mcSeg {
    int node;                    /* the metadata server that named it: ids are per node */
    uint64_t id, size, base;
    char *name, *rkey;
    char *endpoints[MC_MAX_ENDPOINTS];
    int nendpoints;
    mcShm *shm;                  /* the process's mapping of it (mc_shm.c), NULL until attached */
    char *map;                   /* its base */
    int shm_state;               /* 0 untried, 1 mapped, -1 not possible */
    char *token;                 /* what its host admits us by (SEGMENT.TOKEN), NULL: none */
    int token_known;             /* asked the server already */
    unsigned gen;                /* its node's connection it was described on (stale once reopened) */
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
    int rdma_mode;               /* MC_REG_*: how (mc_region_rdma) */
    char rdma_why[160];          /* and why so */
    struct mcRegion *next;
} mcRegion;

/* One slice of a hosted segment, mounted on one node. */
typedef struct mcSlice {
    int node;
    int slot;                    /* a slot its node served at the mount (-1: not a cluster): whose owner it follows */
    size_t off, size;            /* in host_mem */
    long long id;                /* its segment id on that node; 0 until mounted */
    char *argv[32];              /* its MOUNT, kept to mount again */
    int argc;
} mcSlice;

/* Where a keyed command was answered: a put ends where it started. */
typedef struct {
    int node, asking;
    unsigned gen;                /* the node's connection that answered (a put lives and dies with it) */
} mcRoute;

struct mc_client {
    pthread_mutex_t lock;
    mcMap map;                   /* nodes[0]: the server mc_connect was given */
    int cluster;                 /* it is a cluster node: route by slot */
    long long map_at_us;         /* last CLUSTER SLOTS */
    char *user;                  /* ACL user, NULL: default */
    char *password;
    int connect_ms, io_ms;
    int transport, last_transport;
    char errbuf[512];
    mcSeg *segs;
    mcDataConn *dconns;
    int streams;                 /* tcp connections per peer for one transfer */
    int host_port_min, host_port_max; /* mc_set_host_ports: the hosted segment's TCP port range */
    mcTcpPool *tcp_pool;         /* their worker threads, made on first use */
    mcRegion *regions;
    mcRdma *rdma;
    int rdma_tried;
    char rdma_err[160];          /* why rdma is NULL */
    char *stage;                 /* pinned staging for device memory */
    size_t stage_len;
    void *cuda_stream;           /* device copies overlapping tcp (tcpXferDevice) */
    /* A hosted segment (mc_mount): one slice per node it is mounted on. */
    mcHost *host;
    char *host_mem;
    size_t host_size;
    int host_fd, host_owned;
    char *host_name;
    long long host_id;           /* the slice on nodes[0] (else the first): mc_mount_id */
    mcSlice *slices;
    int nslices;
    /* The heartbeat thread of a hosting handle (see heartbeatMain). */
    pthread_t hb_thread;
    int hb_running, hb_stop;
    int hb_active;               /* inside a beat (guards recursion) */
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
    /* Leases: ended after each get (LEASE.RELEASE) unless turned off. */
    int lease_release;
    int leased_node, leased_asking; /* where the last single get was granted one, -1: none */
    unsigned leased_gen;
    unsigned long reconnects;    /* metadata connections reopened after one broke (ride-through) */
    /* The worker of the non-blocking batches and its clone (mc_async.c). */
    _Atomic(struct mcAsync *) async;
    mcViewQueue *views;          /* releases of the views it gave out (mc_view.c), NULL before the first */
};

typedef struct { uint64_t seg, off, len; } mcReplica;

/* ---- small helpers ------------------------------------------------------- */

static long long nowUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleepMs(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
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
        {"WRONGPASS", MC_ERR_AUTH},    {"NOTPENDING", MC_ERR_NOT_FOUND}, {"NOPERM", MC_ERR_AUTH},
    };
    if (r == NULL) return setErr(c, MC_ERR_IO, "no reply");
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

/* ---- node connections ---------------------------------------------------- */

static void heartbeatNode(mc_client *c, int node);

/* (Re)opens node i's metadata connection; 0, or -1 with errbuf set. A
 * hosting handle then beats at once on that node, so its owner lives on in
 * the new connection. */
static int nodeReconnect(mc_client *c, int i) {
    char err[256], uri[300];
    snprintf(uri, sizeof(uri), "%s", c->map.nodes[i].uri);
    mcConn *n = mcConnOpen(uri, c->connect_ms, c->io_ms, err, sizeof(err));
    if (n == NULL) return setErr(c, -1, "%s", err);
    if (mcConnAuth(n, c->user, c->password) != MC_OK) {
        setErr(c, -1, "%s: %s", uri, n->err);
        mcConnClose(n);
        return -1;
    }
    if (c->map.nodes[i].conn) c->reconnects++;
    mcConnClose(c->map.nodes[i].conn);
    c->map.nodes[i].conn = n;
    /* A new connection may be a new server (restarted on the same
     * address): what was learnt on the old one -- segment descriptions and
     * mappings, pending puts, leases -- is not trusted on it (see gen). */
    c->map.nodes[i].gen++;
    if (c->host && !c->hb_active) heartbeatNode(c, i); /* not from within a beat */
    return 0;
}

/* Node i's metadata connection, opened if it is not (or broke). */
static mcConn *nodeConn(mc_client *c, int i) {
    mcConn *conn = c->map.nodes[i].conn;
    if (conn && !conn->broken) return conn;
    return nodeReconnect(c, i) == 0 ? c->map.nodes[i].conn : NULL;
}

/* One command on node i's connection, behind ASKING when asking. reopen:
 * a broken connection is reopened once and the command sent on the new
 * one, even if it may have run on the old one -- for every command that
 * may run twice (see "Riding through"). Without it (PUT.END, PUT.REVOKE:
 * they belong to the connection that started the put) a broken connection
 * is the answer. MC_OK with *out, or MC_ERR_IO. */
static int nodeSend(mc_client *c, int i, int asking, int argc, const char **argv, const size_t *lens, mcReply **out,
                    int reopen) {
    *out = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        mcConn *conn = reopen ? nodeConn(c, i) : c->map.nodes[i].conn;
        if (conn == NULL || conn->broken) /* errbuf says why, for a failed reopen */
            return reopen ? MC_ERR_IO : setErr(c, MC_ERR_IO, "the connection to %s was lost", c->map.nodes[i].uri);
        if (asking) {
            const char *a[1] = {"ASKING"};
            mcConnAppend(conn, 1, a, NULL);
        }
        mcConnAppend(conn, argc, argv, lens);
        if (mcConnFlush(conn) == MC_OK) {
            mcReply *ask = asking ? mcConnRead(conn) : NULL;
            if (!asking || ask) *out = mcConnRead(conn);
            mcReplyFree(ask);
            if (*out) return MC_OK;
        }
        setErr(c, MC_ERR_IO, "%s", conn->err);
        if (!conn->broken || !reopen) break;
    }
    return MC_ERR_IO;
}

static int nodeCommand(mc_client *c, int i, int asking, int argc, const char **argv, const size_t *lens,
                       mcReply **out) {
    return nodeSend(c, i, asking, argc, argv, lens, out, 1);
}

/* ---- the slot map -------------------------------------------------------- */

static int routeSlot(mc_client *c, unsigned slot) {
    if (!c->cluster || c->map.slots == NULL) return 0;
    uint16_t n = c->map.slots[slot];
    return n == MC_NO_NODE ? 0 : n;
}

static unsigned keySlot(mc_client *c, const void *key, size_t keylen) {
    return c->cluster ? mcKeySlot(key, keylen) : 0;
}

/* Reloads the slot map from CLUSTER SLOTS, asking node hint first, then
 * nodes[0], then the others; at most once per MC_MAP_REFRESH_MS unless
 * forced. Best effort: the old map stays if no node answers. Must not run
 * while replies are pending on any connection (a node that moved has its
 * connection closed). */
static void mapRefreshFrom(mc_client *c, int hint, int avoid, int force) {
    long long now = nowUs();
    if (!c->cluster || (!force && now - c->map_at_us < MC_MAP_REFRESH_MS * 1000LL)) return;
    c->map_at_us = now;
    char saved[sizeof(c->errbuf)];
    memcpy(saved, c->errbuf, sizeof(saved));
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    for (int k = -2; k < c->map.nnodes; k++) {
        int i = k == -2 ? hint : k == -1 ? 0 : k;
        if (i < 0 || i >= c->map.nnodes || (k >= 0 && (i == hint || i == 0)) || (k == -1 && hint == 0)) continue;
        if (i == avoid) continue;
        mcReply *r;
        if (nodeCommand(c, i, 0, 2, argv, NULL, &r) != MC_OK) continue;
        char err[256];
        int ok = mcMapApplySlots(&c->map, r, err, sizeof(err)) == 0;
        mcReplyFree(r);
        if (ok) break;
    }
    memcpy(c->errbuf, saved, sizeof(saved));
}

static void mapRefresh(mc_client *c, int hint, int force) { mapRefreshFrom(c, hint, -1, force); }

/* The node a redirection names, added to the table if new (`from` when the
 * table is full). */
static int redirectNode(mc_client *c, int from, const mcRedirect *rd) {
    char ip[256];
    snprintf(ip, sizeof(ip), "%s", rd->ip[0] ? rd->ip : c->map.nodes[from].host);
    int i = mcMapNode(&c->map, NULL, ip, rd->port);
    return i < 0 ? from : i;
}

/* How long to wait before retry number `tries` of something the cluster
 * asked us to retry: 1 ms doubling, at most 100 ms, never past deadline. */
static void backoff(int tries, long long deadline) {
    long ms = tries >= 7 ? 100 : 1L << tries;
    if (ms > 100) ms = 100;
    if (deadline) {
        long long left = (deadline - nowUs()) / 1000;
        if (left <= 0) return;
        if (ms > left) ms = (long)left;
    }
    sleepMs(ms);
}

/* Every retry of a call -- redirections, waits, lost connections -- ends
 * by the handle's I/O timeout from the call's start (MC_RIDE_MS when it has
 * none): what a caller already accepts as the longest a call may take. */
static long long callDeadline(mc_client *c) {
    return nowUs() + (long long)(c->io_ms > 0 ? c->io_ms : MC_RIDE_MS) * 1000;
}

/* Node i's connection is the one gen named, and alive as far as we know:
 * what the server granted on it (a pending put, a lease) still stands. */
static int nodeSame(const mc_client *c, int i, unsigned gen) {
    const mcConn *conn = c->map.nodes[i].conn;
    return conn && !conn->broken && c->map.nodes[i].gen == gen;
}

/* Whether node i's connection gen still stands, asked of the server (a
 * PING) when nothing says otherwise: a transfer that failed on a data
 * connection (another socket) does not tell whether the server behind the
 * metadata one died too. On failure paths only. */
static int nodeAlive(mc_client *c, int i, unsigned gen) {
    if (!nodeSame(c, i, gen)) return 0;
    char saved[sizeof(c->errbuf)];
    memcpy(saved, c->errbuf, sizeof(saved));
    const char *argv[1] = {"PING"};
    mcReply *r;
    int ok = nodeSend(c, i, 0, 1, argv, NULL, &r, 0) == MC_OK;
    mcReplyFree(r);
    memcpy(c->errbuf, saved, sizeof(saved));
    return ok;
}

/* After node i could not be reached: a pause, then the map from another
 * node (it may name a new owner for the slot); MC_OK to try again, or
 * the I/O error when the call's time is up. */
static int rideLost(mc_client *c, int i, int *tries, long long deadline) {
    if (nowUs() >= deadline) return MC_ERR_IO;
    backoff(MC_LOST_BACKOFF + (*tries)++, deadline);
    mapRefreshFrom(c, -1, i, 0);
    return nowUs() < deadline ? MC_OK : MC_ERR_IO;
}

/* A keyed command, sent to the owner of the key's slot and redirected as
 * the cluster says; a lost connection, -TRYAGAIN and -CLUSTERDOWN are
 * waited out until the call's deadline. MC_OK with *out (which may be any
 * reply, errors included: the cluster's own words when it never settled)
 * and *rt, where it was answered; or MC_ERR_* when no node could be
 * reached in time. The command may reach the server twice (sent, the
 * connection lost before its answer): keyed commands are all ones that
 * may (see "Riding through"). */
static int keyCommand(mc_client *c, const void *key, size_t keylen, int argc, const char **argv, const size_t *lens,
                      mcReply **out, mcRoute *rt) {
    unsigned slot = keySlot(c, key, keylen);
    long long deadline = callDeadline(c);
    int downs = 0, waits = 0, lost = 0, hops = 0;
    rt->node = routeSlot(c, slot);
    rt->asking = 0;
    for (;;) {
        int rc = nodeCommand(c, rt->node, rt->asking, argc, argv, lens, out);
        if (rc != MC_OK) {
            char why[sizeof(c->errbuf)];
            memcpy(why, c->errbuf, sizeof(why));
            if (rideLost(c, rt->node, &lost, deadline) != MC_OK) {
                memcpy(c->errbuf, why, sizeof(why));
                return rc;
            }
            rt->node = routeSlot(c, slot);
            rt->asking = 0;
            continue;
        }
        rt->gen = c->map.nodes[rt->node].gen;
        if (!c->cluster) return MC_OK;
        mcRedirect rd;
        int kind = mcRedirectParse(*out, &rd);
        if (kind == MC_REDIR_NONE || nowUs() > deadline) return MC_OK;
        if ((kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK) && ++hops > MC_MAX_HOPS) return MC_OK;
        mcReplyFree(*out);
        *out = NULL;
        if (kind == MC_REDIR_MOVED) {
            int to = redirectNode(c, rt->node, &rd);
            if (c->map.slots) c->map.slots[rd.slot] = (uint16_t)to;
            mapRefresh(c, to, 0);
            rt->node = routeSlot(c, slot);
            rt->asking = 0;
            if (hops >= 3) backoff(waits++, deadline); /* two nodes disagreeing for a moment */
        } else if (kind == MC_REDIR_ASK) {
            rt->node = redirectNode(c, rt->node, &rd);
            rt->asking = 1;
        } else if (kind == MC_REDIR_TRYAGAIN) {
            backoff(waits++, deadline);
            rt->node = routeSlot(c, slot);
            rt->asking = 0;
        } else { /* CLUSTERDOWN: the map may be what is wrong; else a node is down, wait for it */
            backoff(5 + downs++, deadline);
            mapRefresh(c, rt->node, 1);
            rt->node = routeSlot(c, slot);
            rt->asking = 0;
        }
    }
}

/* A command for the node that answered an earlier one on the connection
 * rt names (PUT.END after PUT.START), behind ASKING if that one was:
 * -TRYAGAIN and -CLUSTERDOWN are waited out there; a redirection is
 * returned to the caller (*redirected 1, the map patched) -- the node gave
 * the slot away; so is a lost connection (*redirected 2, MC_ERR_IO): what
 * the first command started died with it, and the command is never sent
 * on another connection. */
static int routeCommand(mc_client *c, const mcRoute *rt, int argc, const char **argv, const size_t *lens,
                        mcReply **out, int *redirected) {
    long long deadline = callDeadline(c);
    *redirected = 0;
    for (int tries = 0;; tries++) {
        int rc = nodeSame(c, rt->node, rt->gen) ? nodeSend(c, rt->node, rt->asking, argc, argv, lens, out, 0)
                                                 : setErr(c, MC_ERR_IO, "the connection that started it was lost");
        if (rc != MC_OK) {
            *redirected = 2;
            return rc;
        }
        if (!c->cluster) return rc;
        mcRedirect rd;
        int kind = mcRedirectParse(*out, &rd);
        if (kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK) {
            if (kind == MC_REDIR_MOVED && c->map.slots) c->map.slots[rd.slot] = (uint16_t)redirectNode(c, rt->node, &rd);
            *redirected = 1;
            return MC_OK;
        }
        if (kind == MC_REDIR_NONE || nowUs() > deadline) return MC_OK;
        mcReplyFree(*out);
        *out = NULL;
        backoff(kind == MC_REDIR_CLUSTERDOWN ? 5 + tries : tries, deadline);
    }
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
    c->map_at_us = nowUs();
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

/* mc_connect_user with the timeouts of the connection it opens: a clone
 * (mcClone) connects with its original's. */
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
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->hb_lock, NULL);
    pthread_cond_init(&c->hb_cond, NULL);
    c->connect_ms = connect_ms;
    c->io_ms = io_ms;
    c->host_fd = -1;
    c->host_id = MC_ERR_NOT_FOUND;
    c->transport = MC_TRANSPORT_AUTO;
    c->streams = 0; /* per peer: see tcpXfer */
    c->lease_release = 1;
    c->leased_node = -1;
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
    for (int i = 0; i < c->map.nnodes; i++) {
        mcConn *conn = c->map.nodes[i].conn;
        if (conn == NULL) continue;
        setsockopt(conn->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(conn->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    pthread_mutex_unlock(&c->lock);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

int mc_set_transport(mc_client *c, int transport) {
    if (c == NULL || transport < MC_TRANSPORT_AUTO || transport > MC_TRANSPORT_RDMA) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->transport = transport;
    pthread_mutex_unlock(&c->lock);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

int mc_set_streams(mc_client *c, int streams) {
    if (c == NULL || streams < 1 || streams > MC_TCP_MAX_STREAMS) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->streams = streams;
    pthread_mutex_unlock(&c->lock);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

int mc_set_host_ports(mc_client *c, int port_min, int port_max) {
    if (c == NULL || !((port_min == 0 && port_max == 0) || (port_min > 0 && port_min <= port_max && port_max < 65536)))
        return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->host_port_min = port_min;
    c->host_port_max = port_max;
    pthread_mutex_unlock(&c->lock);
    return MC_OK;
}

int mc_last_transport(mc_client *c) { return c ? c->last_transport : MC_ERR_INVALID; }
const char *mc_last_error(mc_client *c) { return c ? c->errbuf : "no handle"; }

static void segFree(mcSeg *s) {
    mcShmRelease(s->shm);
    for (int i = 0; i < s->nendpoints; i++) free(s->endpoints[i]);
    free(s->name);
    free(s->rkey);
    free(s->token);
    free(s);
}

static void unmountLocked(mc_client *c);

void mc_close(mc_client *c) {
    if (c == NULL) return;
    mcAsyncStop(c); /* its queued batches first: they finish (mc_async.c) */
    pthread_mutex_lock(&c->lock);
    mcViewQueueClose(c->views); /* later releases are dropped: closing ends the holds */
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
    if (c->cuda_stream) mcCudaStreamDestroy(c->cuda_stream);
    mcMapFree(&c->map);
    free(c->password);
    free(c->user);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
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

/* ---- segments and paths -------------------------------------------------- */

/* The segment was described on a connection since reopened (its node may
 * be another server now): no byte moves through it. */
static int segStale(const mc_client *c, const mcSeg *s) { return s->gen != c->map.nodes[s->node].gen; }

static int segLost(mc_client *c) {
    return setErr(c, MC_ERR_IO, "the connection to the server was lost meanwhile (it may have restarted)");
}

/* Segment id of node `node` (ids are per node: every node's pool is 1).
 * A description learnt on a connection since reopened is dropped here: the
 * server behind the new one may be a restarted one whose pool is other
 * memory under the same id (the caller holds no segment while it asks). */
static mcSeg *segGet(mc_client *c, int node, uint64_t id) {
    for (mcSeg **pp = &c->segs; *pp;) {
        mcSeg *s = *pp;
        if (segStale(c, s)) {
            *pp = s->next;
            segFree(s);
            continue;
        }
        if (s->id == id && s->node == node) return s;
        pp = &s->next;
    }
    char idbuf[24];
    fmtU64(idbuf, sizeof(idbuf), id);
    const char *argv[2] = {"SEGMENT.INFO", idbuf};
    mcReply *r;
    if (nodeCommand(c, node, 0, 2, argv, NULL, &r) != MC_OK) return NULL;
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
    s->node = node;
    s->id = id;
    s->gen = c->map.nodes[node].gen;
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

/* "tcp://0.0.0.0:p" means "wherever you reached the node that named it". */
static void endpointUri(mc_client *c, const mcSeg *s, const char *ep, char *out, size_t len) {
    const char *host = c->map.nodes[s->node].host;
    if (!strncmp(ep, "tcp://0.0.0.0:", 14)) snprintf(out, len, "tcp://%s:%s", host, ep + 14);
    else if (!strncmp(ep, "tcp://[::]:", 11)) snprintf(out, len, "tcp://[%s]:%s", host, ep + 11);
    else snprintf(out, len, "%s", ep);
}

/* The capability s's host admits us by: SEGMENT.TOKEN on the node that
 * named s, asked once and again when the host refused it (a remount
 * rotated it). NULL: none (the server's own pool, an older server). */
static const char *segToken(mc_client *c, mcSeg *s, int refresh) {
    if (s->token_known && !refresh) return s->token;
    char idbuf[24];
    fmtU64(idbuf, sizeof(idbuf), s->id);
    const char *argv[2] = {"SEGMENT.TOKEN", idbuf};
    mcReply *r;
    if (nodeCommand(c, s->node, 0, 2, argv, NULL, &r) != MC_OK) return s->token;
    free(s->token);
    s->token = r->type == MCR_BULK && r->str ? strdup(r->str) : NULL;
    s->token_known = 1;
    mcReplyFree(r);
    return s->token;
}

/* A connection to uri: a metadata one if that is where it goes, else a
 * cached data connection, else a new one (authenticated). */
static mcConn *dataConn(mc_client *c, const char *uri) {
    for (int i = 0; i < c->map.nnodes; i++) {
        mcConn *m = c->map.nodes[i].conn;
        if (m && !m->broken && !strcmp(m->uri, uri)) return m;
    }
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
    /* Refused credentials are not the end at a segment host: another
     * user's host admits us by the segment's token (segConn). */
    int arc = mcConnAuth(n, c->user, c->password);
    if (arc == MC_ERR_IO) {
        setErr(c, MC_ERR_IO, "%s: %s", uri, n->err);
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
    for (int i = 0; i < c->map.nnodes; i++)
        if (conn == c->map.nodes[i].conn) return; /* nodeConn reopens it */
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

/* A data connection to uri admitted to s by s's token (asked for again
 * once if the host says it is not the segment's any more). */
static mcConn *segConn(mc_client *c, mcSeg *s, const char *uri) {
    mcConn *conn = dataConn(c, uri);
    if (conn == NULL) return NULL;
    int rc = mcConnAdmit(conn, s->id, segToken(c, s, 0));
    if (rc == MC_ERR_AUTH) rc = mcConnAdmit(conn, s->id, segToken(c, s, 1));
    if (rc == MC_OK) return conn;
    setErr(c, rc, "%s: %s", uri, conn->err);
    if (rc == MC_ERR_IO) dropConn(c, conn);
    return NULL;
}

/* Maps the segment's memory through one of its unix endpoints. The reply
 * is [seg-id, size], or [seg-id, size, offset] for a slice of a larger
 * memfd (a segment hosted by a libmooncake process in a cluster). */
static int shmAttach(mc_client *c, mcSeg *s) {
    if (s->shm_state) return s->shm_state > 0 ? MC_OK : MC_ERR_UNSUPPORTED;
    s->shm_state = -1;
    for (int i = 0; i < s->nendpoints; i++) {
        if (strncmp(s->endpoints[i], "unix://", 7)) continue;
        mcConn *conn = segConn(c, s, s->endpoints[i]);
        if (conn == NULL) continue;
        char idbuf[24];
        fmtU64(idbuf, sizeof(idbuf), s->id);
        const char *argv[2] = {"SHM.ATTACH", idbuf};
        if (conn->recv_fd >= 0) {
            close(conn->recv_fd);
            conn->recv_fd = -1;
        }
        mcReply *r = mcConnCommand(conn, 2, argv, NULL);
        int ok = 0, ok_off = 1;
        long long size = 0, off = 0;
        if (r && r->type == MCR_ARRAY && (r->elements == 2 || r->elements == 3)) {
            size = mcReplyInt(r->element[1], &ok);
            if (r->elements == 3) off = mcReplyInt(r->element[2], &ok_off);
        } else if (r) {
            replyErr(c, r);
        }
        mcReplyFree(r);
        int fd = conn->recv_fd;
        conn->recv_fd = -1;
        if (!ok || !ok_off || fd < 0 || size <= 0 || off < 0) {
            if (fd >= 0) close(fd);
            if (r == NULL) dropConn(c, conn);
            continue;
        }
        /* The process's one mapping of this memory, shared with its other
         * handles and populated by the ranges copied (mc_shm.c). */
        char merr[128];
        mcShm *m = mcShmAcquire(fd, (uint64_t)off, (uint64_t)size, merr, sizeof(merr));
        close(fd);
        if (m == NULL) {
            setErr(c, MC_ERR_IO, "segment %llu: %s", (unsigned long long)s->id, merr);
            continue;
        }
        s->shm = m;
        s->map = mcShmBase(m);
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
        snprintf(c->rdma_err, sizeof(c->rdma_err), "rdma: %.150s", c->rdma ? "" : err);
    }
    return c->rdma;
}

static mcRegion *regionOf(mc_client *c, const void *p, size_t len) {
    for (mcRegion *r = c->regions; r; r = r->next)
        if ((const char *)p >= r->addr && len <= r->len && (size_t)((const char *)p - r->addr) <= r->len - len)
            return r;
    return NULL;
}

/* One replica's copy to or from the segment's shared memory: one copy per
 * buffer, each at its own offset of the extent (the first rep->len bytes of
 * the buffers move), through the file or the mapping (mc_shm.c). device:
 * some buffers may be device memory, copied with the CUDA runtime straight
 * to or from the mapping (page-locked at the first such copy, mc_shm.c). */
static int shmCopy(mc_client *c, const mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                   int write, int device) {
    if (rep->off > s->size || rep->len > s->size - rep->off)
        return setErr(c, MC_ERR_PROTOCOL, "replica outside segment %llu", (unsigned long long)s->id);
    uint64_t at = rep->off, left = rep->len;
    for (int i = 0; i < iovcnt && left; i++) {
        size_t n = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
        if (n && device && mcCudaIsDevicePtr(iov[i].iov_base)) {
            char err[256];
            mcShmPrepare(s->shm, at, n);
            mcShmCudaRegister(s->shm, NULL, 0); /* once per mapping; refused: copies go unpinned */
            int rc = write ? mcCudaCopy(s->map + at, iov[i].iov_base, n, err, sizeof(err))
                           : mcCudaCopy(iov[i].iov_base, s->map + at, n, err, sizeof(err));
            if (rc != MC_OK) return setErr(c, rc, "%s", err);
        } else if (n) {
            mcShmCopy(s->shm, at, iov[i].iov_base, n, write);
        }
        at += n;
        left -= n;
    }
    c->last_transport = MC_TRANSPORT_SHM;
    return MC_OK;
}

/* The worker pool for striped transfers, grown to carry streams at once. */
static mcTcpPool *tcpPool(mc_client *c, int streams) {
    if (streams <= 1) return NULL;
    if (mcTcpPoolWorkers(c->tcp_pool) >= streams - 1) return c->tcp_pool;
    mcTcpPoolFree(c->tcp_pool);
    c->tcp_pool = mcTcpPoolCreate(streams - 1, c->user, c->password);
    return c->tcp_pool; /* NULL (no threads): one stream */
}

static int tcpXfer(mc_client *c, mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt, int write) {
    int rc = MC_ERR_UNSUPPORTED;
    /* tcp:// endpoints first; the same protocol works over a unix one. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->nendpoints; i++) {
            const char *ep = s->endpoints[i];
            int is_tcp = !strncmp(ep, "tcp://", 6), is_unix = !strncmp(ep, "unix://", 7);
            if (pass == 0 ? !is_tcp : !is_unix) continue;
            char uri[300];
            endpointUri(c, s, ep, uri, sizeof(uri));
            mcConn *conn = segConn(c, s, uri);
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
                if (attempt && (conn = segConn(c, s, uri)) == NULL) break;
                if (segStale(c, s)) return segLost(c);
                if (mcTcpStriped(tcpPool(c, streams), conn, uri, segToken(c, s, 0), streams, c->connect_ms,
                                 c->io_ms, s->id, rep->off, rep->len, iov, iovcnt, write, &f)) {
                    c->last_transport = MC_TRANSPORT_TCP;
                    return MC_OK;
                }
                rc = f.reply ? replyErr(c, f.reply) : setErr(c, f.auth ? MC_ERR_AUTH : MC_ERR_IO, "%s", f.err);
                /* A token the host refused: the server's current one, once. */
                if (f.auth) segToken(c, s, 1);
                int again = (f.reply == NULL && !f.timed_out) || f.auth;
                mcReplyFree(f.reply);
                if (conn->broken) dropConn(c, conn);
                if (!again) break;
            }
        }
    }
    return rc;
}

/* 1 if every byte of the first len of iov[0..iovcnt) lies in memory
 * registered with the RDMA engine (a buffer at a time: each may be in a
 * region of its own). */
static int iovRdmaRegistered(mc_client *c, const struct iovec *iov, int iovcnt, uint64_t len) {
    for (int i = 0; i < iovcnt && len; i++) {
        size_t n = iov[i].iov_len < len ? iov[i].iov_len : (size_t)len;
        mcRegion *reg = n ? regionOf(c, iov[i].iov_base, n) : NULL;
        if (n && (reg == NULL || !reg->rdma)) return 0;
        len -= n;
    }
    return 1;
}

/* One replica over RDMA: one transfer (work requests striped over the
 * NICs) per buffer, each at its own offset of the extent. */
static int rdmaXfer(mc_client *c, const mcRdmaDesc *d, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                    int write, char *err, size_t errlen) {
    uint64_t off = rep->off, left = rep->len;
    for (int i = 0; i < iovcnt && left; i++) {
        size_t n = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
        if (n == 0) continue;
        int rc = mcRdmaTransfer(c->rdma, d, off, iov[i].iov_base, n, write, err, errlen);
        if (rc != MC_OK) return rc;
        off += n;
        left -= n;
    }
    return MC_OK;
}

static char *stageBuffer(mc_client *c, size_t len);
static int iovStage(mc_client *c, char *stage, const struct iovec *iov, int iovcnt, uint64_t len, int to_stage);

/* Bytes [from, from+n) of the buffers to (to_slot) or from a pinned slot:
 * device pieces queued on stream (done at mcCudaStreamSync), host pieces
 * copied now. */
static int iovSlice(mc_client *c, char *slot, const struct iovec *iov, int iovcnt, uint64_t from, size_t n,
                    int to_slot, void *stream) {
    char err[256];
    for (int i = 0; i < iovcnt && n; i++) {
        size_t len = iov[i].iov_len;
        if (from >= len) {
            from -= len;
            continue;
        }
        size_t k = len - (size_t)from < n ? len - (size_t)from : n;
        char *p = (char *)iov[i].iov_base + from;
        if (mcCudaIsDevicePtr(iov[i].iov_base)) {
            int rc = to_slot ? mcCudaCopyAsync(slot, p, k, stream, err, sizeof(err))
                             : mcCudaCopyAsync(p, slot, k, stream, err, sizeof(err));
            if (rc != MC_OK) return setErr(c, rc, "%s", err);
        } else if (to_slot) {
            memcpy(slot, p, k);
        } else {
            memcpy(p, slot, k);
        }
        slot += k;
        n -= k;
        from = 0;
    }
    return MC_OK;
}

static int streamSync(mc_client *c, int rc) {
    char err[256];
    int s = mcCudaStreamSync(c->cuda_stream, err, sizeof(err));
    return rc != MC_OK ? rc : s == MC_OK ? MC_OK : setErr(c, s, "%s", err);
}

/* A large replica over tcp from or into buffers with device memory: cut
 * into MC_DEV_CHUNK pieces, each its own SEG.WRITE/SEG.READ of a sub-range
 * of the extent, through two pinned slots, so the device copy of one chunk
 * (on the handle's stream, asynchronous to the host) runs while the socket
 * moves the other. Write: chunk k+1 is copied out of the device while k is
 * sent. Read: chunk k is copied into the device while k+1 is received. */
static int tcpXferChunked(mc_client *c, mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                          int write, char *st) {
    uint64_t n = (rep->len + MC_DEV_CHUNK - 1) / MC_DEV_CHUNK;
    char *slot[2] = {st, st + MC_DEV_CHUNK};
    int rc = MC_OK;
    if (write && (rc = streamSync(c, iovSlice(c, slot[0], iov, iovcnt, 0, MC_DEV_CHUNK, 1, c->cuda_stream))) != MC_OK)
        return rc;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t at = k * MC_DEV_CHUNK;
        size_t len = rep->len - at < MC_DEV_CHUNK ? (size_t)(rep->len - at) : MC_DEV_CHUNK;
        mcReplica sub = {rep->seg, rep->off + at, len};
        struct iovec one = {slot[k % 2], len};
        if (write) {
            if (k + 1 < n) {
                uint64_t next = at + MC_DEV_CHUNK;
                size_t nlen = rep->len - next < MC_DEV_CHUNK ? (size_t)(rep->len - next) : MC_DEV_CHUNK;
                rc = iovSlice(c, slot[(k + 1) % 2], iov, iovcnt, next, nlen, 1, c->cuda_stream);
            }
            if (rc == MC_OK) rc = tcpXfer(c, s, &sub, &one, 1, 1);
            if ((rc = streamSync(c, rc)) != MC_OK) return rc; /* the next slot is filled */
        } else {
            rc = tcpXfer(c, s, &sub, &one, 1, 0);
            if ((rc = streamSync(c, rc)) != MC_OK) return rc; /* chunk k-1 is out: its slot is free */
            if ((rc = iovSlice(c, slot[k % 2], iov, iovcnt, at, len, 0, c->cuda_stream)) != MC_OK)
                return streamSync(c, rc);
        }
    }
    return write ? MC_OK : streamSync(c, MC_OK);
}

/* One replica over tcp from or into buffers with device memory among them:
 * through the handle's pinned buffer, gathered before a write, scattered
 * after a read; a large one in overlapping chunks (tcpXferChunked). */
static int tcpXferDevice(mc_client *c, mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                         int write) {
    if (rep->len > SIZE_MAX) return setErr(c, MC_ERR_NOMEM, "replica too large to stage");
    if (rep->len > MC_DEV_CHUNK) {
        if (c->cuda_stream == NULL) c->cuda_stream = mcCudaStreamCreate();
        char *st = c->cuda_stream ? stageBuffer(c, 2 * (size_t)MC_DEV_CHUNK) : NULL;
        if (st) return tcpXferChunked(c, s, rep, iov, iovcnt, write, st);
    }
    char *st = stageBuffer(c, (size_t)rep->len);
    if (st == NULL)
        return setErr(c, MC_ERR_NOMEM, "no pinned staging buffer for %llu bytes", (unsigned long long)rep->len);
    struct iovec one = {st, (size_t)rep->len};
    int rc;
    if (write && (rc = iovStage(c, st, iov, iovcnt, rep->len, 1)) != MC_OK) return rc;
    if ((rc = tcpXfer(c, s, rep, &one, 1, write)) != MC_OK) return rc;
    return write ? MC_OK : iovStage(c, st, iov, iovcnt, rep->len, 0);
}

/* Moves one replica's bytes (a segment of node `node`) by the fastest path
 * allowed, to or from the first rep->len bytes of iov[0..iovcnt); MC_OK or
 * MC_ERR_*. device: XF_HOST, XF_DEVICE (device memory among the buffers:
 * shm copies it directly, tcp stages it), or XF_GPUDIRECT (device memory
 * all registered for RDMA: only RDMA may carry it). */
static int xferReplica(mc_client *c, int node, unsigned gen, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                       int write, int device) {
    if (c->map.nodes[node].gen != gen) return segLost(c);
    mcSeg *s = segGet(c, node, rep->seg);
    if (s == NULL) return setErr(c, MC_ERR_IO, "segment %llu: %s", (unsigned long long)rep->seg, c->errbuf);
    if (s->gen != gen) return segLost(c);
    int t = c->transport, rc = MC_ERR_UNSUPPORTED;
    if (device != XF_GPUDIRECT && (t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_SHM) && shmAttach(c, s) == MC_OK)
        return segStale(c, s) ? segLost(c) : shmCopy(c, s, rep, iov, iovcnt, write, device == XF_DEVICE);
    if (t == MC_TRANSPORT_SHM) return setErr(c, MC_ERR_UNSUPPORTED, "no shared memory path to segment %llu", (unsigned long long)s->id);
    if (t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_RDMA) {
        int reg = device != XF_DEVICE && c->regions && iovRdmaRegistered(c, iov, iovcnt, rep->len);
        for (int i = 0; i < s->nendpoints && reg; i++) {
            if (strncmp(s->endpoints[i], "rdma://", 7) || rdmaEngine(c) == NULL) continue;
            mcRdmaDesc d;
            char err[256];
            if (mcRdmaDescParse(&d, s->endpoints[i], s->base, s->rkey ? s->rkey : "", err, sizeof(err)) != 0) {
                rc = setErr(c, MC_ERR_PROTOCOL, "%s", err);
                continue;
            }
            if (segStale(c, s)) return segLost(c);
            rc = rdmaXfer(c, &d, rep, iov, iovcnt, write, err, sizeof(err));
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
    if (device == XF_GPUDIRECT) return setErr(c, MC_ERR_UNSUPPORTED, "device memory needs staging");
    if (device == XF_DEVICE) return tcpXferDevice(c, s, rep, iov, iovcnt, write);
    return tcpXfer(c, s, rep, iov, iovcnt, write);
}

/* Device memory: a pinned bounce buffer of at least len bytes. */
static char *stageBuffer(mc_client *c, size_t len) {
    if (c->stage_len >= len) return c->stage;
    if (c->stage) mcCudaHostFree(c->stage);
    c->stage = mcCudaHostAlloc(len);
    c->stage_len = c->stage ? len : 0;
    return c->stage;
}

/* ---- scatter-gather buffers --------------------------------------------- */

/* The caller's buffers of a v-form call: iovcnt 1..MC_MAX_IOV, no NULL base
 * under a nonzero length (a zero-length entry is fine, whatever its base),
 * a sum that fits in size_t. MC_OK with *total, or MC_ERR_INVALID. */
static int iovCheck(mc_client *c, const struct iovec *iov, int iovcnt, size_t *total) {
    *total = 0;
    if (iov == NULL || iovcnt < 1 || iovcnt > MC_MAX_IOV)
        return setErr(c, MC_ERR_INVALID, "iovcnt %d: want 1..%d buffers", iov ? iovcnt : 0, MC_MAX_IOV);
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_base == NULL && iov[i].iov_len)
            return setErr(c, MC_ERR_INVALID, "buffer %d: NULL with length %zu", i, iov[i].iov_len);
        if (iov[i].iov_len > SIZE_MAX - *total) return setErr(c, MC_ERR_INVALID, "buffers add up past SIZE_MAX");
        *total += iov[i].iov_len;
    }
    return MC_OK;
}

/* put_from/get_into take registered memory only: each nonempty buffer must
 * lie inside one registered region (mc_register). */
static int iovRegistered(mc_client *c, const struct iovec *iov, int iovcnt) {
    for (int i = 0; i < iovcnt; i++)
        if (iov[i].iov_len && regionOf(c, iov[i].iov_base, iov[i].iov_len) == NULL)
            return setErr(c, MC_ERR_INVALID, "buffer %d is not inside a registered region", i);
    return MC_OK;
}

/* How the first len bytes of the buffers move: XF_HOST, XF_DEVICE, or
 * XF_GPUDIRECT when there is device memory and all of it is registered for
 * RDMA. */
static int iovDevice(mc_client *c, const struct iovec *iov, int iovcnt, uint64_t len) {
    uint64_t left = len;
    if (!mcCudaActive()) return XF_HOST; /* no CUDA in the process: one check for all the buffers */
    for (int i = 0; i < iovcnt && left; i++) {
        if (iov[i].iov_len && mcCudaIsDevicePtr(iov[i].iov_base))
            return iovRdmaRegistered(c, iov, iovcnt, len) ? XF_GPUDIRECT : XF_DEVICE;
        left -= iov[i].iov_len < left ? iov[i].iov_len : left;
    }
    return XF_HOST;
}

/* Copies the first len bytes between the buffers and a contiguous staging
 * buffer, a piece at a time (device pieces with the CUDA runtime, host ones
 * with memcpy). to_stage: buffers -> stage. */
static int iovStage(mc_client *c, char *stage, const struct iovec *iov, int iovcnt, uint64_t len, int to_stage) {
    char err[256];
    for (int i = 0; i < iovcnt && len; i++) {
        size_t n = iov[i].iov_len < len ? iov[i].iov_len : (size_t)len;
        if (n == 0) continue;
        if (mcCudaIsDevicePtr(iov[i].iov_base)) {
            int rc = to_stage ? mcCudaCopy(stage, iov[i].iov_base, n, err, sizeof(err))
                              : mcCudaCopy(iov[i].iov_base, stage, n, err, sizeof(err));
            if (rc != MC_OK) return setErr(c, rc, "%s", err);
        } else if (to_stage) {
            memcpy(stage, iov[i].iov_base, n);
        } else {
            memcpy(iov[i].iov_base, stage, n);
        }
        stage += n;
        len -= n;
    }
    return MC_OK;
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
    if (routeCommand(c, rt, 2, argv, lens, &r, &redirected) == MC_OK) mcReplyFree(r);
}

static long long getLocked(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                           size_t cap, int probe);
static long long getAndRelease(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                               size_t cap, int probe);

/* A put's PUT.START answered "-EXISTS a put of this key is in progress":
 * after a lost connection, that is our own put, abandoned with the
 * connection and given back by the server's next sweep. */
static int putInProgress(const mcReply *r) {
    return r && r->type == MCR_ERROR && mcReplyIsError(r, "EXISTS") && strstr(r->str, "in progress") != NULL;
}

/* A put redone after its PUT.END was sent and the answer lost finds the
 * key there: this put's, if it ran, or another writer's. The key holds
 * exactly these bytes (read back and compared) -- MC_OK, what the put
 * was for, whoever wrote them; else MC_ERR_EXISTS, as any put that comes
 * second. Host memory only (device buffers: MC_ERR_EXISTS). */
static int putLandedAlready(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                            size_t len) {
    int rc = MC_ERR_EXISTS;
    char *buf = iovDevice(c, iov, iovcnt, len) != XF_HOST ? NULL : malloc(len ? len : 1);
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
        setErr(c, MC_ERR_EXISTS, "the key exists (this put's PUT.END was sent and its answer lost; "
                                 "the key holds other bytes)");
    return rc;
}

/* A put of the concatenation of iov[0..iovcnt), len bytes in all.
 * Riding through: a put whose node's connection was lost at any step
 * (PUT.START's extents are that connection's: the server abandons them
 * when it closes, or forgot them in a restart) is redone from PUT.START
 * after a pause, until the call's deadline; never PUT.END on another
 * connection. */
static int putLocked(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt, size_t len,
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
    long long deadline = callDeadline(c);
    unsigned long reconnects = c->reconnects;
    int ended_lost = 0, lost_tries = 0;
    for (int redo = 0;;) {
        mcReply *r;
        mcRoute rt;
        int rc = keyCommand(c, key, keylen, argc, argv, lens, &r, &rt);
        if (rc != MC_OK) return rc;
        if (r->type != MCR_ARRAY) {
            if (c->reconnects != reconnects && putInProgress(r) && nowUs() < deadline) {
                mcReplyFree(r); /* our own put, on a connection that is gone: swept soon */
                backoff(MC_LOST_BACKOFF + lost_tries++, deadline);
                continue;
            }
            rc = replyErr(c, r);
            mcReplyFree(r);
            if (rc == MC_ERR_EXISTS && ended_lost) rc = putLandedAlready(c, key, keylen, iov, iovcnt, len);
            return rc;
        }
        mcReplica reps[MC_MAX_REPLICAS];
        size_t n = r->elements < MC_MAX_REPLICAS ? r->elements : MC_MAX_REPLICAS;
        for (size_t i = 0; i < n; i++) {
            if (parseReplica(r->element[i], &reps[i]) != 0 || reps[i].len != len) {
                mcReplyFree(r);
                putRevoke(c, &rt, key, keylen);
                return setErr(c, MC_ERR_PROTOCOL, "bad replica in PUT.START reply");
            }
        }
        mcReplyFree(r);
        int lost = 0;
        for (size_t i = 0; i < n && !lost; i++) {
            rc = xferReplica(c, rt.node, rt.gen, &reps[i], iov, iovcnt, 1, device);
            if (rc == MC_OK) continue;
            if (!nodeAlive(c, rt.node, rt.gen)) {
                lost = 1; /* the put died with its connection: nothing to revoke */
                break;
            }
            char why[512];
            snprintf(why, sizeof(why), "%s", c->errbuf);
            putRevoke(c, &rt, key, keylen);
            snprintf(c->errbuf, sizeof(c->errbuf), "replica %zu: %.400s (put revoked)", i, why);
            return rc;
        }
        int redirected = 0;
        if (!lost) {
            const char *end[2] = {"PUT.END", key};
            size_t endlens[2] = {7, keylen};
            int sent = nodeSame(c, rt.node, rt.gen);
            rc = routeCommand(c, &rt, 2, end, endlens, &r, &redirected);
            if (redirected == 2) {
                lost = 1;
                ended_lost |= sent; /* it may have run: the key may be there, ours */
            } else {
                if (rc != MC_OK) return rc;
                rc = r->type == MCR_STATUS ? MC_OK : replyErr(c, r);
                mcReplyFree(r);
            }
        }
        if (lost) {
            char why[sizeof(c->errbuf)];
            memcpy(why, c->errbuf, sizeof(why));
            if (nowUs() >= deadline) return setErr(c, MC_ERR_IO, "put: %.400s", why);
            backoff(MC_LOST_BACKOFF + lost_tries++, deadline);
            continue;
        }
        /* The slot moved between PUT.START and PUT.END: the node abandoned
         * the put (those bytes are never published); do it all again on
         * the new owner. */
        if (!redirected || ++redo > MC_MAX_REDO) return rc;
    }
}

/* Every put: the buffers go to the replicas in place, device memory among
 * them too (xferReplica). registered: the put_from rule. */
static int putStaged(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                     const mc_put_opts *opts, int registered) {
    size_t len;
    int rc;
    if ((rc = iovCheck(c, iov, iovcnt, &len)) != MC_OK) return rc;
    if (registered && (rc = iovRegistered(c, iov, iovcnt)) != MC_OK) return rc;
    if (key == NULL || keylen == 0 || len == 0) return setErr(c, MC_ERR_INVALID, "empty key or value");
    return putLocked(c, key, keylen, iov, iovcnt, len, opts, iovDevice(c, iov, iovcnt, len));
}

int mc_put(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len, const mc_put_opts *opts) {
    if (c == NULL) return MC_ERR_INVALID;
    struct iovec one = {(void *)buf, len};
    pthread_mutex_lock(&c->lock);
    int rc = putStaged(c, key, keylen, &one, 1, opts, 0);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_put_from(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
                const mc_put_opts *opts) {
    if (c == NULL) return MC_ERR_INVALID;
    struct iovec one = {(void *)buf, len};
    pthread_mutex_lock(&c->lock);
    int rc = putStaged(c, key, keylen, &one, 1, opts, 1);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The v-forms: one body, registered memory required or not. */
static int putv(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                const mc_put_opts *opts, int registered) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    int rc = putStaged(c, key, keylen, iov, iovcnt, opts, registered);
    pthread_mutex_unlock(&c->lock);
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

/* Reads the first replica that works into the first size bytes of the
 * buffers; lease checked at the end. device: XF_* (xferReplica). */
static long long readReplicas(mc_client *c, int node, unsigned gen, const mcReplica *reps, size_t n, uint64_t size,
                              const struct iovec *iov, int iovcnt, long long deadline_us, int device) {
    if (size == 0) return 0;
    if (n == 0) return setErr(c, MC_ERR_NOT_FOUND, "the value has no live replica");
    int rc = MC_ERR_IO;
    char first_err[512] = "";
    for (size_t i = 0; i < n; i++) {
        rc = xferReplica(c, node, gen, &reps[i], iov, iovcnt, 0, device);
        if (rc == MC_OK) {
            if (nowUs() > deadline_us) return setErr(c, MC_ERR_LEASE_EXPIRED, "the transfer outlived its lease");
            return (long long)size;
        }
        if (!first_err[0]) snprintf(first_err, sizeof(first_err), "%s", c->errbuf);
    }
    snprintf(c->errbuf, sizeof(c->errbuf), "no replica could be read: %s", first_err);
    return rc;
}

/* The reader is done with a key: end its lease now rather than at its
 * deadline, so the space of a version overwritten or removed while it was
 * read comes back at once, and a store full of recently read objects can
 * evict them. Queued on the connection the lease came from and sent with
 * the caller's flush, without waiting for the reply (mc_conn drops it
 * before the next one). Keys reached through ASKING keep their lease. */
static void queueLeaseRelease(mcConn *conn, const void *key, size_t keylen) {
    const char *argv[2] = {"LEASE.RELEASE", key};
    size_t lens[2] = {13, keylen};
    mcConnAppendNoReply(conn, 2, argv, lens);
}

static void flushLeaseReleases(mcConn *conn) {
    if (mcConnFlush(conn) != MC_OK) conn->discard = 0; /* broken: nothing more is read from it */
}

int mc_set_lease_release(mc_client *c, int on) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->lease_release = on != 0;
    pthread_mutex_unlock(&c->lock);
    mcAsyncSettingsChanged(c);
    return MC_OK;
}

static long long getAndRelease(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                               size_t cap, int probe) {
    c->leased_node = -1;
    long long got = getLocked(c, key, keylen, iov, iovcnt, cap, probe);
    mcConn *conn = c->leased_node >= 0 ? c->map.nodes[c->leased_node].conn : NULL;
    if (c->lease_release && !c->leased_asking && conn && nodeSame(c, c->leased_node, c->leased_gen)) {
        queueLeaseRelease(conn, key, keylen);
        flushLeaseReleases(conn);
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
    if (key == NULL || keylen == 0) return setErr(c, MC_ERR_INVALID, "empty key");
    long long deadline = callDeadline(c);
    for (int tries = 0;; tries++) {
        mcRoute rt = {-1, 0, 0};
        long long got = getOnce(c, key, keylen, iov, iovcnt, cap, probe, &rt);
        if (got != MC_ERR_IO || rt.node < 0 || nowUs() >= deadline || nodeAlive(c, rt.node, rt.gen)) return got;
        backoff(MC_LOST_BACKOFF + tries, deadline);
    }
}

static long long getOnce(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt, size_t cap,
                         int probe, mcRoute *rt_out) {
    c->errbuf[0] = '\0';
    const char *argv[2] = {"GET.REPLICAS", key};
    size_t lens[2] = {12, keylen};
    long long t0 = nowUs();
    mcReply *r;
    mcRoute rt;
    int rc = keyCommand(c, key, keylen, 2, argv, lens, &r, &rt);
    if (rc != MC_OK) return rc;
    *rt_out = rt;
    long long lease_ms;
    uint64_t size;
    mcReplica reps[MC_MAX_REPLICAS];
    size_t n;
    rc = parseReplicas(c, r, &lease_ms, &size, reps, &n);
    mcReplyFree(r);
    if (rc != MC_OK) return rc;
    c->leased_node = rt.node; /* a lease was granted: getAndRelease ends it */
    c->leased_asking = rt.asking;
    c->leased_gen = rt.gen;
    if (probe) return (long long)size;
    if (size > cap) return setErr(c, MC_ERR_TOO_SMALL, "value is %llu bytes, buffer %zu", (unsigned long long)size, cap);
    for (int i = 0; size && i < iovcnt; i++) /* mc_get(NULL, cap); the v-forms checked theirs */
        if (iov[i].iov_base == NULL && iov[i].iov_len) return setErr(c, MC_ERR_INVALID, "no buffer");
    long long deadline = t0 + lease_ms * 1000;
    return readReplicas(c, rt.node, rt.gen, reps, n, size, iov, iovcnt, deadline, iovDevice(c, iov, iovcnt, size));
}

long long mc_get(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap) {
    if (c == NULL) return MC_ERR_INVALID;
    struct iovec one = {buf, cap};
    pthread_mutex_lock(&c->lock);
    long long rc = getAndRelease(c, key, keylen, &one, 1, cap, 0);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

long long mc_get_into(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap) {
    if (c == NULL) return MC_ERR_INVALID;
    struct iovec one = {buf, cap};
    pthread_mutex_lock(&c->lock);
    long long rc = regionOf(c, buf, cap) ? getAndRelease(c, key, keylen, &one, 1, cap, 0)
                                         : setErr(c, MC_ERR_INVALID, "buffer is not inside a registered region");
    pthread_mutex_unlock(&c->lock);
    return rc;
}

long long mc_get_intov(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    size_t cap;
    long long rc = iovCheck(c, iov, iovcnt, &cap);
    if (rc == MC_OK) rc = iovRegistered(c, iov, iovcnt);
    if (rc == MC_OK) rc = getAndRelease(c, key, keylen, iov, iovcnt, cap, 0);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

long long mc_size(mc_client *c, const void *key, size_t keylen) {
    if (c == NULL) return MC_ERR_INVALID;
    struct iovec none = {NULL, 0};
    pthread_mutex_lock(&c->lock);
    long long rc = getAndRelease(c, key, keylen, &none, 1, 0, 1);
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
    mcRoute rt;
    int rc = keyCommand(c, key, keylen, 2, argv, lens, &r, &rt);
    if (rc == MC_OK) {
        rc = r->type == MCR_INT ? (r->integer > 0) : replyErr(c, r);
        mcReplyFree(r);
    }
    pthread_mutex_unlock(&c->lock);
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
    if (c->cluster) mapRefresh(c, 0, 1);
    for (int i = 0; i < (c->cluster ? c->map.nnodes : 1); i++) {
        if (c->cluster && !c->map.nodes[i].primary) continue;
        any = 1;
        mcReply *r;
        int nrc = nodeCommand(c, i, 0, 1, argv, NULL, &r);
        if (nrc == MC_OK) {
            nrc = r->type == MCR_INT && r->integer >= 0 ? MC_OK
                  : r->type == MCR_ERROR ? replyErr(c, r) : setErr(c, MC_ERR_PROTOCOL, "bad REMOVE.ALL reply");
            if (nrc == MC_OK) sum += r->integer;
            mcReplyFree(r);
        }
        if (nrc != MC_OK && rc == MC_OK) rc = nrc;
    }
    if (!any) return setErr(c, MC_ERR_SERVER, "the cluster serves no slots: no node to remove from");
    return rc != MC_OK ? rc : sum;
}

long long mc_remove_all(mc_client *c) {
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    long long rc = removeAllLocked(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- batch metadata: one phase over many keys ---------------------------- */

/* One key of a batch phase. */
typedef struct mcBKey {
    const void *key;
    size_t keylen;
    const char *arg;             /* BATCH.PUT.START: the size after the key */
    unsigned slot;
    int node, asking;            /* where it is sent; afterwards where it was answered */
    int pinned;                  /* only that node may answer (PUT.END, PUT.REVOKE) */
    int alone;                   /* in a command of its own (after -TRYAGAIN) */
    int done;
    int rc;                      /* MC_OK with res set, or MC_ERR_* */
    int moved;                   /* pinned, and its node redirected it (or its connection was lost) */
    int lost;                    /* pinned, sent, and its connection lost before the answer: it may have run */
    unsigned gen;                /* the connection of the node that answered it (mcRoute) */
    int ioerr;                   /* I/O failures so far */
    mcReply *res;                /* its answer (the caller frees) */
    int leased;                  /* BATCH.GET.REPLICAS granted it a lease */
    int counted;                 /* BATCH.EXISTS PREFIX: among the leading keys its group found */
} mcBKey;

/* What a phase sends. */
typedef struct mcPhase {
    const char *cmd;             /* BATCH.PUT.START, BATCH.PUT.END, BATCH.GET.REPLICAS, PUT.REVOKE */
    int numkeys;                 /* the keys are preceded by their count */
    int single;                  /* one key per command, whose reply is the key's */
    const char **tail;           /* arguments after the keys */
    int ntail;
} mcPhase;

typedef struct mcGroup {
    size_t first, count;         /* a run of order[] */
    int node, asking;
    mcConn *conn;                /* NULL: could not be sent */
} mcGroup;

static int bkeyCompare(const void *a, const void *b, void *arg) {
    const mcBKey *k = arg;
    const mcBKey *x = &k[*(const size_t *)a], *y = &k[*(const size_t *)b];
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    if (x->asking != y->asking) return x->asking - y->asking;
    if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : *(const size_t *)a > *(const size_t *)b;
}

/* What a group's reply means for its keys; sets *wait_ms when the next
 * round should wait, *refresh when the map should be reloaded first. */
/* BATCH.EXISTS ... PREFIX answers one integer for its keys, not an array:
 * how many of them, from the first, are present (keys in a group keep the
 * caller's order, bkeyCompare). */
static int phaseCounted(const mcPhase *ph, const mcReply *r, size_t count) {
    return ph->numkeys && !strcmp(ph->cmd, "BATCH.EXISTS") && r->type == MCR_INT && r->integer >= 0 &&
           (unsigned long long)r->integer <= count;
}

static void phaseReply(mc_client *c, const mcPhase *ph, mcBKey *k, const size_t *idx, size_t count, int node,
                       mcReply *r, int *downs, int *wait_tries, int *refresh, mcReply **last_redirect) {
    mcRedirect rd;
    int kind = c->cluster ? mcRedirectParse(r, &rd) : MC_REDIR_NONE;
    if (kind == MC_REDIR_NONE) {
        if (ph->single) {
            k[idx[0]].res = r;
            k[idx[0]].done = 1;
            return;
        }
        if (phaseCounted(ph, r, count)) {
            for (size_t j = 0; j < count; j++) {
                k[idx[j]].counted = j < (size_t)r->integer;
                k[idx[j]].done = 1;
            }
            mcReplyFree(r);
            return;
        }
        if (r->type == MCR_ARRAY && r->elements == count) {
            for (size_t j = 0; j < count; j++) {
                k[idx[j]].res = r->element[j];
                r->element[j] = NULL;
                k[idx[j]].done = 1;
            }
        } else {
            int code = r->type == MCR_ERROR ? replyErr(c, r) : setErr(c, MC_ERR_PROTOCOL, "bad %s reply", ph->cmd);
            for (size_t j = 0; j < count; j++) {
                k[idx[j]].rc = code;
                k[idx[j]].done = 1;
            }
        }
        mcReplyFree(r);
        return;
    }
    int to = kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK ? redirectNode(c, node, &rd) : node;
    if (kind == MC_REDIR_MOVED && c->map.slots) {
        c->map.slots[rd.slot] = (uint16_t)to;
        *refresh = *refresh ? *refresh : 1;
    }
    if (kind == MC_REDIR_CLUSTERDOWN) ++*downs; /* waited out until the deadline: a node may be restarting */
    for (size_t j = 0; j < count; j++) {
        mcBKey *b = &k[idx[j]];
        if (kind == MC_REDIR_NONE || (b->pinned && (kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK))) {
            b->rc = replyErr(c, r);
            b->moved = kind != MC_REDIR_NONE;
            b->done = 1;
        } else if (kind == MC_REDIR_MOVED) {
            b->node = routeSlot(c, b->slot);
            b->asking = 0;
        } else if (kind == MC_REDIR_ASK) {
            b->node = to;
            b->asking = 1;
        } else if (kind == MC_REDIR_TRYAGAIN && count > 1) {
            b->alone = 1; /* keys of a migrating slot: each goes its own way */
        }
    }
    if (kind == MC_REDIR_TRYAGAIN && count == 1) ++*wait_tries;
    if (kind == MC_REDIR_CLUSTERDOWN) {
        ++*wait_tries;
        *refresh = 2;
    }
    mcReplyFree(*last_redirect);
    *last_redirect = r;
}

/* Runs one metadata phase of a batch over n keys: groups them by (node,
 * ASKING, slot) -- one group in all for a non-cluster server --, writes
 * every group's command to every node before reading any reply, and
 * resends what the cluster redirected, round after round. Each key ends
 * with rc and res (the caller frees res). Returns MC_OK when some key got
 * an answer of its own, else the failure every key shares (MC_ERR_IO when
 * no node could be reached, a refused command's code): the batch as a
 * whole failed. */
static int runPhase(mc_client *c, const mcPhase *ph, mcBKey *k, size_t n) {
    size_t *order = malloc((n ? n : 1) * sizeof(*order));
    mcGroup *groups = malloc((n ? n : 1) * sizeof(*groups));
    size_t maxargs = 2 + 2 * n + (size_t)ph->ntail;
    const char **argv = malloc(maxargs * sizeof(*argv));
    size_t *lens = malloc(maxargs * sizeof(*lens));
    mcReply *last_redirect = NULL;
    int rc = MC_OK;
    if (!order || !groups || !argv || !lens) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        k[i].done = k[i].moved = k[i].lost = k[i].ioerr = 0;
        k[i].rc = MC_OK;
        k[i].res = NULL;
        k[i].alone = ph->single;
        if (!k[i].pinned) {
            k[i].node = routeSlot(c, k[i].slot);
            k[i].asking = 0;
        }
    }
    long long deadline = callDeadline(c);
    int downs = 0, wait_tries = 0, lost_tries = 0, hops = 0;
    for (int round = 0;; round++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            mcBKey *b = &k[i];
            if (!b->done && b->pinned && !nodeSame(c, b->node, b->gen)) {
                /* What it ends (a pending put) died with its connection:
                 * never sent on another one; the caller redoes it. */
                b->rc = setErr(c, MC_ERR_IO, "the connection that started it was lost");
                b->moved = b->done = 1;
            }
            if (!b->done) order[m++] = i;
        }
        if (m == 0) break;
        if (hops >= MC_MAX_HOPS || (round && nowUs() > deadline)) {
            int code = last_redirect ? replyErr(c, last_redirect)
                                     : setErr(c, MC_ERR_IO, "%s: no answer after %d rounds", ph->cmd, round);
            for (size_t j = 0; j < m; j++) {
                k[order[j]].rc = code;
                k[order[j]].done = 1;
            }
            break;
        }
        qsort_r(order, m, sizeof(*order), bkeyCompare, k);
        /* Groups: runs of one node, ASKING state and slot. */
        size_t ng = 0;
        for (size_t j = 0; j < m; j++) {
            const mcBKey *b = &k[order[j]];
            mcGroup *g = ng ? &groups[ng - 1] : NULL;
            if (g == NULL || b->alone || k[order[g->first]].alone || b->node != g->node || b->asking != g->asking ||
                b->slot != k[order[g->first]].slot) {
                g = &groups[ng++];
                g->first = j;
                g->count = 0;
                g->node = b->node;
                g->asking = b->asking;
                g->conn = NULL;
            }
            g->count++;
        }
        /* Send every group, then flush each node's connection once. */
        for (size_t gi = 0; gi < ng; gi++) {
            mcGroup *g = &groups[gi];
            g->conn = gi && groups[gi - 1].node == g->node ? groups[gi - 1].conn : nodeConn(c, g->node);
            if (g->conn == NULL) continue;
            if (g->asking) {
                const char *a[1] = {"ASKING"};
                mcConnAppend(g->conn, 1, a, NULL);
            }
            char nbuf[24];
            size_t argc = 0;
            argv[argc++] = ph->cmd;
            if (ph->numkeys) {
                fmtU64(nbuf, sizeof(nbuf), g->count);
                argv[argc++] = nbuf;
            }
            for (size_t j = 0; j < g->count; j++) {
                const mcBKey *b = &k[order[g->first + j]];
                lens[argc] = b->keylen;
                argv[argc++] = b->key;
                if (b->arg) {
                    lens[argc] = strlen(b->arg);
                    argv[argc++] = b->arg;
                }
            }
            for (int t = 0; t < ph->ntail; t++) {
                lens[argc] = strlen(ph->tail[t]);
                argv[argc++] = ph->tail[t];
            }
            lens[0] = strlen(ph->cmd);
            if (ph->numkeys) lens[1] = strlen(nbuf);
            mcConnAppend(g->conn, (int)argc, argv, lens); /* small arguments are copied now */
        }
        for (size_t gi = 0; gi < ng; gi++) {
            mcGroup *g = &groups[gi];
            if (g->conn == NULL || (gi && groups[gi - 1].conn == g->conn)) continue;
            if (mcConnFlush(g->conn) != MC_OK) setErr(c, MC_ERR_IO, "%s", g->conn->err);
        }
        /* Read the replies in the order they were sent. */
        int refresh = 0, had_wait = wait_tries, lost_node = -1;
        for (size_t gi = 0; gi < ng; gi++) {
            mcGroup *g = &groups[gi];
            mcReply *r = NULL;
            int sent = g->conn && !g->conn->broken;
            if (sent) {
                mcReply *ask = g->asking ? mcConnRead(g->conn) : NULL;
                if (!g->asking || ask) r = mcConnRead(g->conn);
                mcReplyFree(ask);
                if (r == NULL) setErr(c, MC_ERR_IO, "%s", g->conn->err);
            }
            if (r == NULL) {
                /* Not sent, or the connection broke. A pinned key's put
                 * died with it (redone by the caller; it may have ended
                 * first). Others are sent again, on a new connection, to
                 * the slot's owner as the map then says, after a pause
                 * from the second time on, until the deadline. */
                for (size_t j = 0; j < g->count; j++) {
                    mcBKey *b = &k[order[g->first + j]];
                    if (b->pinned) {
                        b->rc = MC_ERR_IO;
                        b->moved = b->done = 1;
                        b->lost = sent;
                    } else if (++b->ioerr >= 2 && nowUs() >= deadline) {
                        b->rc = MC_ERR_IO;
                        b->done = 1;
                    } else if (b->ioerr >= 2) {
                        lost_node = g->node;
                    }
                }
                continue;
            }
            for (size_t j = 0; j < g->count; j++) k[order[g->first + j]].gen = c->map.nodes[g->node].gen;
            phaseReply(c, ph, k, &order[g->first], g->count, g->node, r, &downs, &wait_tries, &refresh,
                       &last_redirect);
        }
        /* Between rounds, with no reply outstanding: waits and map reloads
         * (redirected again and again: two nodes disagreeing for a moment). */
        if (lost_node >= 0) {
            char why[sizeof(c->errbuf)];
            memcpy(why, c->errbuf, sizeof(why));
            backoff(MC_LOST_BACKOFF + lost_tries++, deadline);
            mapRefreshFrom(c, -1, lost_node, 0);
            memcpy(c->errbuf, why, sizeof(why));
            for (size_t i = 0; i < n; i++)
                if (!k[i].done && !k[i].pinned) {
                    k[i].node = routeSlot(c, k[i].slot);
                    k[i].asking = 0;
                }
        } else if (wait_tries > had_wait) {
            backoff(refresh == 2 ? 5 + downs : wait_tries, deadline);
        } else if (refresh && hops >= 2) {
            backoff(hops - 2, deadline);
        }
        if (lost_node < 0 && wait_tries == had_wait) hops++; /* a round of redirections only */
        if (refresh) {
            mapRefresh(c, 0, refresh == 2);
            for (size_t i = 0; i < n; i++)
                if (!k[i].done && !k[i].pinned && !k[i].asking) k[i].node = routeSlot(c, k[i].slot);
        }
    }
    /* The batch failed as a whole if no key got an answer of its own (a
     * pinned key redirected got one: its put is to be redone). */
    rc = n ? k[0].rc : MC_OK;
    for (size_t i = 0; i < n && rc != MC_OK; i++)
        if (k[i].rc == MC_OK || k[i].moved || k[i].rc != rc) rc = MC_OK;
end:
    mcReplyFree(last_redirect);
    free(order);
    free(groups);
    free(argv);
    free(lens);
    return rc;
}

static void freeBKeys(mcBKey *k, size_t n) {
    for (size_t i = 0; k && i < n; i++) mcReplyFree(k[i].res);
    free(k);
}

/* ---- batches ------------------------------------------------------------- */

/* Starts one replica's transfer (a segment of node `node`): shm copies now
 * (returns MC_OK), tcp to a known connection is queued in *p (returns 1)
 * for finishXfers; anything else is left to the sequential path (returns
 * MC_ERR_UNSUPPORTED). device (XF_*): GPUDirect is left to the sequential
 * path, and so is tcp of buffers with device memory (staged there). */
static int startXfer(mc_client *c, int node, unsigned gen, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                     int write, int device, mcTcpItem *p) {
    if (device == XF_GPUDIRECT) return MC_ERR_UNSUPPORTED;
    if (c->map.nodes[node].gen != gen) return segLost(c);
    mcSeg *s = segGet(c, node, rep->seg);
    if (s == NULL) return MC_ERR_IO;
    if (s->gen != gen) return segLost(c);
    int t = c->transport;
    if ((t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_SHM) && shmAttach(c, s) == MC_OK)
        return segStale(c, s) ? segLost(c) : shmCopy(c, s, rep, iov, iovcnt, write, device == XF_DEVICE);
    if (device == XF_DEVICE) return MC_ERR_UNSUPPORTED;
    if (t != MC_TRANSPORT_TCP && t != MC_TRANSPORT_AUTO) return MC_ERR_UNSUPPORTED;
    /* Registered buffers go over rdma when the segment has it, as a single
     * transfer's do (xferReplica, one by one: nothing to pipeline there). */
    if (t == MC_TRANSPORT_AUTO && c->regions && iovRdmaRegistered(c, iov, iovcnt, rep->len))
        for (int i = 0; i < s->nendpoints; i++)
            if (!strncmp(s->endpoints[i], "rdma://", 7)) return MC_ERR_UNSUPPORTED;
    for (int i = 0; i < s->nendpoints; i++) {
        if (strncmp(s->endpoints[i], "tcp://", 6)) continue;
        char uri[300];
        endpointUri(c, s, s->endpoints[i], uri, sizeof(uri));
        mcConn *conn = segConn(c, s, uri);
        if (conn == NULL) continue;
        if (segStale(c, s)) return segLost(c);
        p->conn = conn;
        p->seg = s->id;
        p->off = rep->off;
        p->len = rep->len;
        p->iov = iov;
        p->iovcnt = iovcnt;
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
    /* Many transfers may share a connection that broke: it is dropped (and
     * freed) once, its other entries forgotten first. */
    for (size_t i = 0; i < np; i++) {
        mcConn *conn = p[i].conn;
        if (conn == NULL || !conn->broken) continue;
        for (size_t j = i; j < np; j++)
            if (p[j].conn == conn) p[j].conn = NULL;
        dropConn(c, conn);
    }
}

/* Items whose buffers are all checked (batchCheck). */
/* The batch put. Riding through as putLocked does: an item whose node's
 * connection was lost after its PUT.START (transfer failed, or
 * BATCH.PUT.END not answered) is redone, from BATCH.PUT.START, with the
 * others of its kind, after a pause, until the deadline; one whose
 * BATCH.PUT.END was sent and lost carries ended_lost[i] into the redo
 * (putLandedAlready judges an -EXISTS then). reconnects: the handle's
 * count when the call began (an -EXISTS "in progress" after one is our
 * own abandoned put). */
static int batchPutLocked(mc_client *c, size_t n, const mc_kvv *items, const size_t *lens, const mc_put_opts *opts,
                          int *results, int depth, long long deadline, const char *ended_lost,
                          unsigned long reconnects) {
    const char *tail[10];
    char (*sizes)[24] = malloc(n * sizeof(*sizes));
    mcReplica *reps = malloc(n * MC_MAX_REPLICAS * sizeof(mcReplica));
    size_t *nreps = calloc(n, sizeof(size_t));
    int *ok = calloc(n, sizeof(int));
    int *started = calloc(n, sizeof(int));
    mcTcpItem *pend = malloc(n * MC_MAX_REPLICAS * sizeof(mcTcpItem));
    mcBKey *k = calloc(n, sizeof(*k)), *fin = calloc(n, sizeof(*fin));
    size_t *fin_item = malloc(n * sizeof(size_t));
    int *dev = calloc(n, sizeof(int));
    mc_kvv *redo = NULL;
    size_t *redo_item = NULL, *redo_len = NULL;
    int *redo_res = NULL;
    char *again = calloc(n, 1), *redo_lost = NULL; /* again: 1 slot moved, 2 connection lost, 3 lost after END */
    int done = 0, rc = MC_OK;
    char repbuf[16], pinbuf[24];
    if (!sizes || !reps || !nreps || !ok || !started || !pend || !k || !fin || !fin_item || !dev || !again) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) results[i] = MC_ERR_INVALID;
    /* BATCH.PUT.START numkeys key size ... [options], per node and slot. */
    for (size_t i = 0; i < n; i++) {
        fmtU64(sizes[i], sizeof(sizes[i]), lens[i]);
        k[i].key = items[i].key;
        k[i].keylen = items[i].keylen;
        k[i].arg = sizes[i];
        k[i].slot = keySlot(c, items[i].key, items[i].keylen);
    }
    mcPhase start = {"BATCH.PUT.START", 1, 0, tail, putOptArgs(opts, tail, repbuf, pinbuf)};
    if ((rc = runPhase(c, &start, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        const mcReply *e = k[i].res;
        if (k[i].rc == MC_OK && c->reconnects != reconnects && putInProgress(e)) {
            again[i] = 2; /* our own put, abandoned with a lost connection */
            continue;
        }
        if (k[i].rc != MC_OK || e->type != MCR_ARRAY) {
            results[i] = k[i].rc != MC_OK ? k[i].rc : replyErr(c, e);
            if (results[i] == MC_ERR_EXISTS && ended_lost && ended_lost[i])
                results[i] = putLandedAlready(c, items[i].key, items[i].keylen, items[i].iov, items[i].iovcnt, lens[i]);
            continue;
        }
        ok[i] = started[i] = 1;
        for (size_t j = 0; j < e->elements && j < MC_MAX_REPLICAS; j++) {
            if (parseReplica(e->element[j], &reps[i * MC_MAX_REPLICAS + j]) != 0 ||
                reps[i * MC_MAX_REPLICAS + j].len != lens[i]) {
                ok[i] = 0;
                results[i] = setErr(c, MC_ERR_PROTOCOL, "bad replica");
                break;
            }
            nreps[i]++;
        }
    }
    /* Transfers: shm now, tcp pipelined, anything else one by one; each
     * replica is a segment of the node that placed it. */
    size_t np = 0;
    int cuda = mcCudaActive(); /* asked once for the batch */
    for (size_t i = 0; i < n && cuda; i++)
        if (ok[i]) dev[i] = iovDevice(c, items[i].iov, items[i].iovcnt, lens[i]);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; ok[i] && j < nreps[i]; j++) {
            const mcReplica *rep = &reps[i * MC_MAX_REPLICAS + j];
            int s = startXfer(c, k[i].node, k[i].gen, rep, items[i].iov, items[i].iovcnt, 1, dev[i], &pend[np]);
            if (s == 1) pend[np++].item = i;
            else if (s != MC_OK &&
                     xferReplica(c, k[i].node, k[i].gen, rep, items[i].iov, items[i].iovcnt, 1, dev[i]) != MC_OK)
                ok[i] = 0;
        }
    }
    finishXfers(c, pend, np, 1, ok);
    /* A transfer that failed because the connection was lost: the put is
     * gone with it, nothing to revoke; redone below. */
    for (size_t i = 0; i < n; i++)
        if (started[i] && !ok[i] && !nodeAlive(c, k[i].node, k[i].gen)) {
            started[i] = 0;
            again[i] = 2;
        }
    /* Revoke what could not be written (a PUT.REVOKE each: rare), then
     * publish the rest; both where each put started. */
    size_t nfin = 0;
    for (size_t i = 0; i < n; i++) {
        if (!started[i] || ok[i]) continue;
        fin[nfin] = k[i];
        fin[nfin].res = NULL;
        fin[nfin].pinned = 1;
        fin[nfin].arg = NULL;
        nfin++;
        if (results[i] == MC_ERR_INVALID) results[i] = MC_ERR_IO;
    }
    if (nfin) {
        mcPhase revoke = {"PUT.REVOKE", 0, 1, NULL, 0};
        runPhase(c, &revoke, fin, nfin); /* best effort */
        for (size_t j = 0; j < nfin; j++) {
            mcReplyFree(fin[j].res);
            fin[j].res = NULL;
        }
    }
    nfin = 0;
    for (size_t i = 0; i < n; i++) {
        if (!started[i] || !ok[i]) continue;
        fin[nfin] = k[i];
        fin[nfin].res = NULL;
        fin[nfin].pinned = 1;
        fin[nfin].arg = NULL;
        fin_item[nfin++] = i;
    }
    if (nfin) {
        mcPhase end = {"BATCH.PUT.END", 0, 0, NULL, 0};
        if ((rc = runPhase(c, &end, fin, nfin)) != MC_OK) goto end;
        for (size_t j = 0; j < nfin; j++) {
            size_t i = fin_item[j];
            if (fin[j].moved) {
                /* The slot moved (the node abandoned the put), or the
                 * connection was lost: again, from PUT.START. */
                again[i] = fin[j].rc == MC_ERR_IO ? (fin[j].lost ? 3 : 2) : 1;
            }
            results[i] = fin[j].rc != MC_OK ? fin[j].rc : fin[j].res->type == MCR_STATUS ? MC_OK : replyErr(c, fin[j].res);
        }
    }
    /* Redone: after a lost connection (a pause first) until the deadline;
     * after a moved slot at most MC_MAX_REDO times. */
    size_t nredo = 0;
    int any_lost = 0;
    for (size_t i = 0; i < n; i++) {
        if (again[i] == 1 && depth >= MC_MAX_REDO) again[i] = 0;
        if (again[i] >= 2 && (depth >= 64 || nowUs() >= deadline)) {
            if (results[i] == MC_ERR_INVALID || results[i] == MC_OK) results[i] = setErr(c, MC_ERR_IO, "put: the connection was lost");
            again[i] = 0;
        }
        if (again[i]) nredo++;
        any_lost |= again[i] >= 2;
    }
    if (nredo) {
        redo = malloc(nredo * sizeof(*redo));
        redo_item = malloc(nredo * sizeof(*redo_item));
        redo_len = malloc(nredo * sizeof(*redo_len));
        redo_res = malloc(nredo * sizeof(*redo_res));
        redo_lost = calloc(nredo, 1);
        if (!redo || !redo_item || !redo_len || !redo_res || !redo_lost) {
            rc = setErr(c, MC_ERR_NOMEM, "out of memory");
            goto end;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (!again[i]) continue;
            redo_item[m] = i;
            redo_len[m] = lens[i];
            redo_lost[m] = again[i] == 3 || (ended_lost && ended_lost[i]);
            redo[m++] = items[i];
        }
        if (any_lost) {
            char why[sizeof(c->errbuf)];
            memcpy(why, c->errbuf, sizeof(why));
            backoff(MC_LOST_BACKOFF + depth, deadline);
            memcpy(c->errbuf, why, sizeof(why));
        }
        int sub = batchPutLocked(c, m, redo, redo_len, opts, redo_res, depth + 1, deadline, redo_lost, reconnects);
        for (size_t j = 0; j < m; j++) results[redo_item[j]] = sub < 0 ? sub : redo_res[j];
    }
    for (size_t i = 0; i < n; i++)
        if (results[i] == MC_OK) done++;
    rc = done;
end:
    if (rc < 0 && results)
        for (size_t i = 0; i < n; i++)
            if (results[i] == MC_ERR_INVALID) results[i] = rc;
    freeBKeys(k, n);
    freeBKeys(fin, n);
    free(fin_item);
    free(dev);
    free(sizes);
    free(reps);
    free(nreps);
    free(ok);
    free(started);
    free(pend);
    free(redo);
    free(redo_item);
    free(redo_len);
    free(redo_res);
    free(redo_lost);
    free(again);
    return rc;
}

/* A batch's items: keys, buffers (iovCheck), host or device memory. put:
 * every value nonempty. lens[i] gets item i's total. MC_OK or
 * MC_ERR_INVALID. */
static int batchCheck(mc_client *c, size_t n, const mc_kvv *items, size_t *lens, int put) {
    for (size_t i = 0; i < n; i++) {
        int rc = iovCheck(c, items[i].iov, items[i].iovcnt, &lens[i]);
        if (rc != MC_OK) {
            char why[sizeof(c->errbuf)];
            memcpy(why, c->errbuf, sizeof(why));
            return setErr(c, rc, "item %zu: %.400s", i, why);
        }
        if (items[i].key == NULL || items[i].keylen == 0 || (put && lens[i] == 0))
            return setErr(c, MC_ERR_INVALID, "item %zu: empty key%s", i, put ? "/value" : "");
    }
    return MC_OK;
}

int mc_batch_putv(mc_client *c, size_t n, const mc_kvv *items, const mc_put_opts *opts, int *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    size_t *lens = malloc(n * sizeof(*lens));
    if (lens == NULL) return MC_ERR_NOMEM;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    int rc = batchCheck(c, n, items, lens, 1);
    if (rc == MC_OK) {
        rc = batchPutLocked(c, n, items, lens, opts, results, 0, callDeadline(c), NULL, c->reconnects);
    } else {
        for (size_t i = 0; i < n; i++) results[i] = rc;
    }
    pthread_mutex_unlock(&c->lock);
    free(lens);
    return rc;
}

/* mc_kv items as one-buffer mc_kvv ones: the v-form is the only batch
 * path. One allocation for both arrays. */
static mc_kvv *kvAsKvv(size_t n, const mc_kv *items) {
    mc_kvv *v = malloc(n * (sizeof(mc_kvv) + sizeof(struct iovec)));
    if (v == NULL) return NULL;
    struct iovec *iov = (struct iovec *)(v + n);
    for (size_t i = 0; i < n; i++) {
        iov[i].iov_base = items[i].buf;
        iov[i].iov_len = items[i].len;
        v[i] = (mc_kvv){items[i].key, items[i].keylen, &iov[i], 1};
    }
    return v;
}

int mc_batch_put(mc_client *c, size_t n, const mc_kv *items, const mc_put_opts *opts, int *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    mc_kvv *v = kvAsKvv(n, items);
    if (v == NULL) return MC_ERR_NOMEM;
    int rc = mc_batch_putv(c, n, v, opts, results);
    free(v);
    return rc;
}

/* Every key the batch was granted a lease on, released with one write per
 * node (a single server: one write for the whole batch). */
static void releaseBatchLeases(mc_client *c, mcBKey *k, size_t n) {
    if (!c->lease_release) return;
    for (int node = 0; node < c->map.nnodes; node++) {
        mcConn *conn = c->map.nodes[node].conn;
        if (conn == NULL || conn->broken) continue;
        int queued = 0;
        for (size_t i = 0; i < n; i++) {
            if (!k[i].leased || k[i].asking || k[i].node != node || k[i].gen != c->map.nodes[node].gen) continue;
            queueLeaseRelease(conn, k[i].key, k[i].keylen);
            queued++;
        }
        if (queued) flushLeaseReleases(conn);
    }
}

/* One read of a batch: bytes [off, off+len) of one key's object into
 * buffers. mc_batch_get(v)'s items are whole-object reads (len is learnt
 * from the reply, cap is what the buffers hold), mc_batch_get_ranges's
 * ranges are reads of their own bytes: one code path moves both, a range
 * being nothing but a replica's extent narrowed to [off+off, off+off+len),
 * which every transport takes as it is (a memcpy at an offset, a SEG.READ
 * or SEG.READV of a sub-range, an RDMA read at an offset). */
typedef struct mcRead {
    size_t key;                  /* the batch key it reads (index into its mcBKeys) */
    int whole;                   /* the whole object: len = its size, MC_ERR_TOO_SMALL past cap */
    uint64_t off, len;
    size_t cap;
    const struct iovec *iov;     /* where the bytes go */
    int iovcnt;
    struct iovec one;            /* a range's one buffer */
    int device;                  /* XF_*: how its buffers move (xferReplica) */
    int done;                    /* result is final (refused before the metadata, or its key failed) */
    long long result;            /* bytes read, or MC_ERR_* */
} mcRead;

/* A range's replicas: each extent narrowed to [off, off+len) of the object
 * (the caller checked the range lies inside it). */
static void narrowReplicas(const mcReplica *reps, size_t n, uint64_t off, uint64_t len, mcReplica *out) {
    for (size_t i = 0; i < n; i++) {
        out[i].seg = reps[i].seg;
        out[i].off = reps[i].off + off;
        out[i].len = len;
    }
}

/* The reads of a batch over nkeys keys (k: key, keylen and slot set; the
 * same key may be there more than once, each granted and released a lease
 * of its own). One BATCH.GET.REPLICAS per node and slot for all of them
 * (runPhase), every shm copy, the tcp transfers pipelined (finishXfers),
 * then one by one, trying every replica, whatever could not be started or
 * failed; the lease of each key checked after its reads, and released.
 * Reads already done are left alone. Returns the number of reads that
 * succeeded, or MC_ERR_* when the batch failed as a whole (the result of
 * every read not done before). */
static int batchReadLocked(mc_client *c, mcBKey *k, size_t nkeys, mcRead *rd, size_t nreads) {
    size_t nk = nkeys ? nkeys : 1, nr = nreads ? nreads : 1;
    mcReplica *reps = malloc(nk * MC_MAX_REPLICAS * sizeof(mcReplica));
    size_t *nreps = calloc(nk, sizeof(size_t));
    uint64_t *sizes = calloc(nk, sizeof(uint64_t));
    long long *deadline = calloc(nk, sizeof(long long));
    int *keyrc = calloc(nk, sizeof(int));
    int *ok = calloc(nr, sizeof(int)), *started = calloc(nr, sizeof(int));
    mcTcpItem *pend = malloc(nr * sizeof(mcTcpItem));
    int rc = MC_OK, done = 0;
    if (!reps || !nreps || !sizes || !deadline || !keyrc || !ok || !started || !pend) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    long long t0 = nowUs();
    mcPhase get = {"BATCH.GET.REPLICAS", 0, 0, NULL, 0};
    if (nkeys && (rc = runPhase(c, &get, k, nkeys)) != MC_OK) goto fail;
    for (size_t j = 0; j < nkeys; j++) {
        long long lease_ms = 0;
        keyrc[j] = k[j].rc != MC_OK ? k[j].rc
                                    : parseReplicas(c, k[j].res, &lease_ms, &sizes[j], &reps[j * MC_MAX_REPLICAS], &nreps[j]);
        if (keyrc[j] != MC_OK) continue;
        k[j].leased = 1;
        deadline[j] = t0 + lease_ms * 1000;
    }
    /* What each read is, now that the objects' sizes are known. */
    for (size_t i = 0; i < nreads; i++) {
        mcRead *r = &rd[i];
        if (r->done) continue;
        uint64_t size = sizes[r->key];
        r->done = 1;
        if (keyrc[r->key] != MC_OK) r->result = keyrc[r->key];
        else if (r->whole && size > r->cap) r->result = MC_ERR_TOO_SMALL;
        else if (!r->whole && (r->off > size || r->len > size - r->off)) /* no overflow: off <= size first */
            r->result = setErr(c, MC_ERR_INVALID, "range [%llu, +%llu) is not inside the object's %llu bytes",
                               (unsigned long long)r->off, (unsigned long long)r->len, (unsigned long long)size);
        else r->done = 0;
        if (!r->done && r->whole) r->len = size;
    }
    /* First replica of each: shm copies now, tcp queued (runs of small
     * reads from one segment share a SEG.READV, mc_tcp.c). */
    size_t np = 0;
    for (size_t i = 0; i < nreads; i++) {
        mcRead *r = &rd[i];
        if (r->done || r->len == 0 || nreps[r->key] == 0) continue;
        mcReplica first;
        narrowReplicas(&reps[r->key * MC_MAX_REPLICAS], 1, r->off, r->len, &first);
        int s = startXfer(c, k[r->key].node, k[r->key].gen, &first, r->iov, r->iovcnt, 0, r->device, &pend[np]);
        if (s == 1) pend[np++].item = i;
        started[i] = s == 1 || s == MC_OK;
        ok[i] = 1;
    }
    finishXfers(c, pend, np, 0, ok);
    for (size_t i = 0; i < nreads; i++) {
        mcRead *r = &rd[i];
        if (r->done) {
            if (r->result >= 0) done++;
            continue;
        }
        long long got;
        if (started[i] && ok[i]) {
            got = (long long)r->len;
            if (nowUs() > deadline[r->key]) got = setErr(c, MC_ERR_LEASE_EXPIRED, "the transfer outlived its lease");
        } else {
            /* Not started, failed, GPUDirect, or device memory over tcp:
             * one by one, every replica. */
            mcReplica narrowed[MC_MAX_REPLICAS];
            narrowReplicas(&reps[r->key * MC_MAX_REPLICAS], nreps[r->key], r->off, r->len, narrowed);
            got = readReplicas(c, k[r->key].node, k[r->key].gen, narrowed, nreps[r->key], r->len, r->iov, r->iovcnt,
                               deadline[r->key], r->device);
        }
        r->result = got;
        r->done = 1;
        if (got >= 0) done++;
    }
    rc = done;
    releaseBatchLeases(c, k, nkeys);
    goto end;
fail:
    for (size_t i = 0; i < nreads; i++)
        if (!rd[i].done) {
            rd[i].result = rc;
            rd[i].done = 1;
        }
end:
    free(reps);
    free(nreps);
    free(sizes);
    free(deadline);
    free(keyrc);
    free(ok);
    free(started);
    free(pend);
    return rc;
}

/* batchReadLocked, riding through: reads that failed because their node's
 * connection was lost after BATCH.GET.REPLICAS (the replicas it named may
 * be another server's memory now) are done again, from the metadata, after
 * a pause, until the call's deadline. */
static int batchReadRide(mc_client *c, mcBKey *k, size_t nkeys, mcRead *rd, size_t nreads) {
    long long deadline = callDeadline(c);
    for (int tries = 0;; tries++) {
        int rc = batchReadLocked(c, k, nkeys, rd, nreads);
        if (rc < 0 || nowUs() >= deadline) return rc;
        size_t again = 0;
        for (size_t i = 0; i < nreads; i++)
            if (rd[i].result == MC_ERR_IO && !nodeAlive(c, k[rd[i].key].node, k[rd[i].key].gen)) {
                rd[i].done = 0;
                again++;
            }
        if (again == 0) return rc;
        for (size_t j = 0; j < nkeys; j++) {
            mcReplyFree(k[j].res);
            k[j].res = NULL;
            k[j].leased = 0;
        }
        backoff(MC_LOST_BACKOFF + tries, deadline);
    }
}

/* mc_batch_getv's items (checked by batchCheck), caps[i] item i's capacity:
 * one key and one whole-object read each. */
static int batchGetLocked(mc_client *c, size_t n, const mc_kvv *items, const size_t *caps, long long *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    mcRead *rd = calloc(n, sizeof(*rd));
    int rc, cuda = mcCudaActive(); /* asked once for the batch */
    if (!k || !rd) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) results[i] = rc;
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        k[i].key = items[i].key;
        k[i].keylen = items[i].keylen;
        k[i].slot = keySlot(c, items[i].key, items[i].keylen);
        rd[i].key = i;
        rd[i].whole = 1;
        rd[i].cap = caps[i];
        rd[i].iov = items[i].iov;
        rd[i].iovcnt = items[i].iovcnt;
        rd[i].device = cuda ? iovDevice(c, items[i].iov, items[i].iovcnt, caps[i]) : XF_HOST;
    }
    rc = batchReadRide(c, k, n, rd, n);
    for (size_t i = 0; i < n; i++) results[i] = rd[i].result;
end:
    freeBKeys(k, n);
    free(rd);
    return rc;
}

int mc_batch_getv(mc_client *c, size_t n, const mc_kvv *items, long long *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    size_t *caps = malloc(n * sizeof(*caps));
    if (caps == NULL) return MC_ERR_NOMEM;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    for (size_t i = 0; i < n; i++) results[i] = MC_ERR_INVALID;
    int rc = batchCheck(c, n, items, caps, 0);
    if (rc == MC_OK) rc = batchGetLocked(c, n, items, caps, results);
    pthread_mutex_unlock(&c->lock);
    free(caps);
    return rc;
}

int mc_batch_get(mc_client *c, size_t n, mc_kv *items, long long *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    mc_kvv *v = kvAsKvv(n, items);
    if (v == NULL) return MC_ERR_NOMEM;
    int rc = mc_batch_getv(c, n, v, results);
    free(v);
    return rc;
}

/* ---- ranged reads -------------------------------------------------------- */

/* An item mc_batch_get_ranges refuses whole: no key, or a range count
 * outside 0..MC_MAX_IOV (or ranges missing). */
static int rangesItemBad(const mc_kranges *it) {
    return it->key == NULL || it->keylen == 0 || it->nranges < 0 || it->nranges > MC_MAX_IOV ||
           (it->nranges && it->ranges == NULL);
}

/* The reads of mc_batch_get_ranges: one per range of the items that are
 * not refused whole, in the caller's order. A range with no buffer or one
 * outside registered memory is refused here, alone. An item becomes a key
 * of the batch only if some range of it is left to read. */
static void rangesPlan(mc_client *c, size_t n, const mc_kranges *items, mcRead *rd, mcBKey *k, size_t *nkeys) {
    size_t ri = 0;
    int cuda = mcCudaActive(); /* asked once for the batch */
    *nkeys = 0;
    for (size_t i = 0; i < n; i++) {
        const mc_kranges *it = &items[i];
        if (rangesItemBad(it)) {
            setErr(c, MC_ERR_INVALID, "item %zu: %s", i,
                   it->key == NULL || it->keylen == 0 ? "empty key"
                   : it->ranges == NULL && it->nranges > 0 ? "nranges > 0 without ranges"
                                                           : "nranges must be 0..MC_MAX_IOV (1024)");
            continue;
        }
        int left = 0;
        for (int j = 0; j < it->nranges; j++, ri++) {
            const mc_range *g = &it->ranges[j];
            mcRead *r = &rd[ri];
            memset(r, 0, sizeof(*r));
            r->key = *nkeys;
            r->off = g->src_off;
            r->len = g->len;
            r->one.iov_base = g->dst;
            r->one.iov_len = g->len;
            r->iov = &r->one;
            r->iovcnt = 1;
            mcRegion *reg = g->len && g->dst ? regionOf(c, g->dst, g->len) : NULL;
            if (g->len && reg == NULL) {
                r->result = setErr(c, MC_ERR_INVALID, "item %zu range %d: dst is not inside a registered region", i, j);
                r->done = 1;
                continue;
            }
            if (g->len && cuda && mcCudaIsDevicePtr(g->dst)) r->device = reg->rdma ? XF_GPUDIRECT : XF_DEVICE;
            left++;
        }
        if (left) {
            k[*nkeys].key = it->key;
            k[*nkeys].keylen = it->keylen;
            k[*nkeys].slot = keySlot(c, it->key, it->keylen);
            (*nkeys)++;
        }
    }
}

int mc_batch_get_ranges(mc_client *c, size_t n, const mc_kranges *items, long long *results) {
    if (c == NULL || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    /* The result slots are every item's nranges as the caller counts them
     * (an item refused for too many ranges still fills its slots); reads
     * are made for the items not refused whole. */
    size_t slots = 0, nreads = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].nranges <= 0) continue;
        slots += (size_t)items[i].nranges;
        if (slots > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
        if (!rangesItemBad(&items[i])) nreads += (size_t)items[i].nranges;
    }
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    mcRead *rd = calloc(nreads ? nreads : 1, sizeof(*rd));
    mcBKey *k = calloc(n, sizeof(*k));
    size_t nkeys = 0;
    int rc;
    if (!rd || !k) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < slots; i++) results[i] = rc;
        goto end;
    }
    rangesPlan(c, n, items, rd, k, &nkeys);
    rc = batchReadRide(c, k, nkeys, rd, nreads);
    for (size_t i = 0, slot = 0, ri = 0; i < n; i++) {
        int bad = rangesItemBad(&items[i]);
        for (int j = 0; j < items[i].nranges; j++) results[slot++] = bad ? MC_ERR_INVALID : rd[ri++].result;
    }
end:
    freeBKeys(k, n);
    free(rd);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- replica descriptions ------------------------------------------------ */

/* One replica of a description: its extent, and what the handle knows of
 * its segment (cached SEGMENT.INFO): name, RDMA base, and the endpoint to
 * read it at -- the first tcp:// one, wildcard resolved as a transfer
 * would, else the first of any kind that fits. */
static void describeReplica(mc_client *c, int node, const mcReplica *rep, mc_replica_info *out) {
    memset(out, 0, sizeof(*out));
    out->seg_id = rep->seg;
    out->offset = rep->off;
    out->len = rep->len;
    mcSeg *s = segGet(c, node, rep->seg);
    if (s == NULL) return; /* gone since (ids are never reused): name and endpoint stay "" */
    if (s->name && strlen(s->name) < sizeof(out->seg_name)) memcpy(out->seg_name, s->name, strlen(s->name) + 1);
    out->base = s->base;
    for (int pass = 0; pass < 2 && !out->endpoint[0]; pass++) {
        for (int i = 0; i < s->nendpoints; i++) {
            if (pass == 0 && strncmp(s->endpoints[i], "tcp://", 6)) continue;
            char uri[MC_ENDPOINT_LEN + 64];
            endpointUri(c, s, s->endpoints[i], uri, sizeof(uri));
            if (strlen(uri) >= sizeof(out->endpoint)) continue; /* never a truncated address */
            memcpy(out->endpoint, uri, strlen(uri) + 1);
            break;
        }
    }
}

/* The batch keys of n plain keys, their slots found; MC_ERR_INVALID for
 * an empty one. */
static int bkeysOf(mc_client *c, const mc_key *keys, size_t n, mcBKey *k) {
    for (size_t i = 0; i < n; i++) {
        if (keys[i].key == NULL || keys[i].keylen == 0) return setErr(c, MC_ERR_INVALID, "key %zu is empty", i);
        k[i].key = keys[i].key;
        k[i].keylen = keys[i].keylen;
        k[i].slot = keySlot(c, keys[i].key, keys[i].keylen);
    }
    return MC_OK;
}

static int batchReplicasLocked(mc_client *c, size_t n, const mc_key *keys, mc_replicas *out, int *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    mcReplica *reps = malloc(n * MC_MAX_REPLICAS * sizeof(*reps));
    size_t *nreps = calloc(n, sizeof(*nreps));
    int rc = MC_OK;
    if (!k || !reps || !nreps) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    mcPhase get = {"BATCH.GET.REPLICAS", 0, 0, NULL, 0};
    if ((rc = runPhase(c, &get, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        long long lease_ms;
        uint64_t size = 0;
        results[i] = k[i].rc != MC_OK ? k[i].rc
                                      : parseReplicas(c, k[i].res, &lease_ms, &size, &reps[i * MC_MAX_REPLICAS], &nreps[i]);
        if (results[i] != MC_OK) {
            nreps[i] = 0;
            continue;
        }
        k[i].leased = 1;
        out[i].size = size;
    }
    /* Nothing is read: the grants end before the segments are looked up
     * (SEGMENT.INFO, a round trip for a segment not seen before). */
    releaseBatchLeases(c, k, n);
    for (size_t i = 0; i < n; i++) {
        if (results[i] != MC_OK) continue;
        for (size_t j = 0; j < nreps[i]; j++)
            describeReplica(c, k[i].node, &reps[i * MC_MAX_REPLICAS + j], &out[i].replicas[j]);
        out[i].nreplicas = (int)nreps[i];
        results[i] = (int)nreps[i];
        rc++;
    }
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++) results[i] = rc;
    freeBKeys(k, n);
    free(reps);
    free(nreps);
    return rc;
}

/* ---- views (mc_view.c) ----------------------------------------------------- */

static void sendHoldRelease(mc_client *c, int node, unsigned gen, const void *key, size_t keylen);
static void viewSend(void *owner, int node, unsigned gen, const void *key, size_t keylen) {
    sendHoldRelease(owner, node, gen, key, keylen);
}
static void flushNodeWrites(mc_client *c);

static void sendHoldRelease(mc_client *c, int node, unsigned gen, const void *key, size_t keylen) {
    if (node < 0 || node >= c->map.nnodes || c->map.nodes[node].gen != gen) return; /* that connection's close ended it */
    mcConn *conn = c->map.nodes[node].conn;
    if (conn == NULL || conn->broken) return;
    const char *argv[2] = {"HOLD.RELEASE", key};
    size_t lens[2] = {12, keylen};
    mcConnAppendNoReply(conn, 2, argv, lens);
    /* Sent with the connection's next request -- unless the key was long
     * enough to be referenced rather than copied (mc_conn.c): then now,
     * while its memory is still the caller's. */
    if (conn->nrefs) flushLeaseReleases(conn);
}

static void flushNodeWrites(mc_client *c) {
    for (int node = 0; node < c->map.nnodes; node++) {
        mcConn *conn = c->map.nodes[node].conn;
        if (conn && !conn->broken && (conn->olen || conn->nrefs)) flushLeaseReleases(conn);
    }
}

/* A view of one key's object: its first replica in a segment this process
 * maps (or can map: SHM.ATTACH), the page tables of the range filled now so
 * that reading it takes no faults. NULL with *rc set when none is. */
static mc_view *viewOf(mc_client *c, const mcBKey *k, const mcReplica *reps, size_t nreps, uint64_t size, int *rc) {
    *rc = MC_ERR_UNSUPPORTED;
    if (c->transport != MC_TRANSPORT_AUTO && c->transport != MC_TRANSPORT_SHM) return NULL;
    for (size_t j = 0; j < nreps; j++) {
        if (c->map.nodes[k->node].gen != k->gen) return NULL;
        mcSeg *s = segGet(c, k->node, reps[j].seg);
        if (s == NULL || s->gen != k->gen || shmAttach(c, s) != MC_OK || segStale(c, s)) continue;
        if (reps[j].off > s->size || size > s->size - reps[j].off) {
            *rc = setErr(c, MC_ERR_PROTOCOL, "replica outside segment %llu", (unsigned long long)s->id);
            continue;
        }
        if (size) mcShmPrepare(s->shm, reps[j].off, size);
        mc_view *v = mcViewNew(c->views, s->shm, s->map + reps[j].off, size, k->node, k->gen, k->key, k->keylen);
        *rc = v ? MC_OK : MC_ERR_NOMEM;
        return v;
    }
    if (*rc == MC_ERR_UNSUPPORTED) setErr(c, MC_ERR_UNSUPPORTED, "no replica in shared memory from here");
    return NULL;
}

static int batchViewsLocked(mc_client *c, size_t n, const mc_key *keys, mc_view **views, long long *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    mcReplica *reps = malloc(MC_MAX_REPLICAS * sizeof(*reps));
    int rc = MC_OK, made = 0;
    if (!k || !reps || (!c->views && (c->views = mcViewQueueNew(c, &c->lock, viewSend)) == NULL)) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    mcViewQueueDrain(c->views); /* releases queued while the handle was busy: out with this call's requests */
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    mcPhase hold = {"HOLD.REPLICAS", 0, 0, NULL, 0};
    if ((rc = runPhase(c, &hold, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        long long lease_ms;
        uint64_t size = 0;
        size_t nreps = 0;
        int krc = k[i].rc != MC_OK ? k[i].rc : parseReplicas(c, k[i].res, &lease_ms, &size, reps, &nreps);
        if (krc != MC_OK) {
            results[i] = krc;
            continue;
        }
        /* Held from here: a key that makes no view gives its hold back. */
        views[i] = viewOf(c, &k[i], reps, nreps, size, &krc);
        if (views[i] == NULL) {
            sendHoldRelease(c, k[i].node, k[i].gen, k[i].key, k[i].keylen);
            results[i] = krc;
            continue;
        }
        results[i] = (long long)size;
        made++;
    }
    if (made < (int)n) flushNodeWrites(c); /* holds that made no view: given back now */
    rc = made;
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++) results[i] = rc;
    if (k) freeBKeys(k, n);
    free(reps);
    return rc;
}

int mc_batch_get_views(mc_client *c, size_t n, const mc_key *keys, mc_view **views, long long *results) {
    if (c == NULL || (n && (keys == NULL || views == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
    for (size_t i = 0; i < n; i++) views[i] = NULL;
    if (n == 0) return 0;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = 0;
    int rc = batchViewsLocked(c, n, keys, views, results);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mc_batch_replicas(mc_client *c, size_t n, const mc_key *keys, mc_replicas *out, int *results) {
    if (c == NULL || (n && (keys == NULL || out == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    if (n > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
    memset(out, 0, n * sizeof(*out));
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    int rc = batchReplicasLocked(c, n, keys, out, results);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- existence ----------------------------------------------------------- */

/* One key's answer to BATCH.EXISTS without PREFIX: 1, 0 or MC_ERR_*. */
static int existsResult(mc_client *c, const mcBKey *b) {
    if (b->rc != MC_OK) return b->rc;
    if (b->res->type == MCR_INT && (b->res->integer == 0 || b->res->integer == 1)) return (int)b->res->integer;
    return b->res->type == MCR_ERROR ? replyErr(c, b->res) : setErr(c, MC_ERR_PROTOCOL, "bad BATCH.EXISTS reply");
}

/* With PREFIX every slot group stops at its own first miss, so the prefix
 * of the whole batch ends at the first key, in the caller's order, that
 * its group did not count (or that failed). Keys its group counted past
 * that point were found, and leased with LEASE, but are not part of the
 * answer: their leases are ended now rather than left to lease-ttl. */
static int existsPrefix(mc_client *c, mcBKey *k, size_t n, int *results) {
    size_t p = 0;
    while (p < n && k[p].rc == MC_OK && k[p].counted) results[p++] = 1;
    if (p < n) /* an array where the count was due: not the PREFIX reply */
        results[p] = k[p].rc != MC_OK ? k[p].rc
                     : k[p].res      ? setErr(c, MC_ERR_PROTOCOL, "bad BATCH.EXISTS PREFIX reply") : 0;
    for (size_t i = p + 1; i < n; i++) {
        results[i] = 0;
        k[i].leased = k[i].rc == MC_OK && k[i].counted;
    }
    releaseBatchLeases(c, k, n);
    return (int)p;
}

static int batchExistsLocked(mc_client *c, size_t n, const mc_key *keys, int flags, int *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    if (k == NULL) return setErr(c, MC_ERR_NOMEM, "out of memory");
    int rc = MC_OK;
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    const char *tail[2];
    int ntail = 0;
    if (flags & MC_EXISTS_PREFIX) tail[ntail++] = "PREFIX";
    if (flags & MC_EXISTS_LEASE) tail[ntail++] = "LEASE";
    mcPhase ph = {"BATCH.EXISTS", 1, 0, tail, ntail};
    if ((rc = runPhase(c, &ph, k, n)) != MC_OK) goto end;
    if (flags & MC_EXISTS_PREFIX) {
        rc = existsPrefix(c, k, n, results);
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = existsResult(c, &k[i]);
        if (results[i] == 1) rc++;
    }
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++) results[i] = rc;
    freeBKeys(k, n);
    return rc;
}

int mc_batch_exists(mc_client *c, size_t n, const mc_key *keys, int flags, int *results) {
    if (c == NULL || (n && (keys == NULL || results == NULL))) return MC_ERR_INVALID;
    if (flags & ~(MC_EXISTS_PREFIX | MC_EXISTS_LEASE)) return MC_ERR_INVALID;
    if (n == 0) return 0;
    if (n > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    int rc = batchExistsLocked(c, n, keys, flags, results);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- giving memory back -------------------------------------------------- */

/* REPLICA.CLEAR per node and slot, as BATCH.EXISTS goes: each answer is
 * the key's 1 or 0. */
int mc_batch_replica_clear(mc_client *c, size_t n, const mc_key *keys, const char *segment, int *results) {
    if (c == NULL || (n && (keys == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    if (n > INT_MAX) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    c->errbuf[0] = '\0';
    int rc = MC_OK;
    mcBKey *k = calloc(n, sizeof(*k));
    if (k == NULL) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    const char *tail[2] = {"SEGMENT", segment};
    mcPhase ph = {"REPLICA.CLEAR", 1, 0, tail, segment && segment[0] ? 2 : 0};
    if ((rc = runPhase(c, &ph, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        results[i] = existsResult(c, &k[i]); /* the same shape: 1, 0 or an error */
        if (results[i] == 1) rc++;
    }
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++) results[i] = rc;
    freeBKeys(k, n);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- registration -------------------------------------------------------- */

/* Registers r with the NICs. Device memory goes the way the platform
 * allows (mcRdmaRegisterDevice: a dmabuf of the range, else peer memory,
 * else staged through host memory); the choice is kept for mc_region_rdma
 * and said on stderr when MC_RDMA_VERBOSE is set. */
static void regionRdma(mc_client *c, mcRegion *r, char *rkeys, size_t cap) {
    mcRdma *e = rdmaEngine(c);
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
    if (c == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    mcRegion *r = regionOf(c, addr, 1);
    int rc = r ? r->rdma_mode : MC_ERR_NOT_FOUND;
    if (r && why && whylen) snprintf(why, whylen, "%s", r->rdma_why);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

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
    regionRdma(c, r, rkeys, sizeof(rkeys));
    r->next = c->regions;
    c->regions = r;
out:
    pthread_mutex_unlock(&c->lock);
    if (rc == MC_OK) mcAsyncRegister(c, addr, len, mem);
    return rc;
}

int mc_cuda_available(char *why, size_t len) { return mcCudaAvailable(why, len); }

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

    pthread_mutex_lock(&c->lock);
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
    pthread_mutex_lock(&c->lock);
    settingsOf(c, &st);
    pthread_mutex_unlock(&c->lock);
    settingsApply(clone, &st);
}

_Atomic(struct mcAsync *) *mcAsyncSlot(mc_client *c) { return &c->async; }

void mcSetError(mc_client *c, const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&c->lock);
    va_start(ap, fmt);
    vsnprintf(c->errbuf, sizeof(c->errbuf), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&c->lock);
}

/* ---- hosting a segment --------------------------------------------------- */

/* Sends slice i's stored MOUNT to its node; MC_OK with its id set, or
 * MC_ERR_*. Used by the first mount and by a remount after the node said
 * -NEEDREMOUNT. */
static int sendMount(mc_client *c, int i) {
    mcSlice *sl = &c->slices[i];
    mcReply *r;
    /* A new token for every MOUNT (a remount rotates it): the host takes
     * it before the server can hand it out, and the one it replaces until
     * the MOUNT is answered (mc_host.c). */
    for (int a = 3; a + 1 < sl->argc; a += 2) { /* option, value pairs */
        if (strcmp(sl->argv[a], "TOKEN")) continue;
        char tok[33];
        unsigned char raw[16];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            return setErr(c, MC_ERR_IO, "getrandom: %s", strerror(errno));
        for (int b = 0; b < 16; b++) snprintf(tok + 2 * b, 3, "%02x", raw[b]);
        if (strlen(sl->argv[a + 1]) >= 32) memcpy(sl->argv[a + 1], tok, 33);
        else {
            char *t = strdup(tok);
            if (t == NULL) return setErr(c, MC_ERR_NOMEM, "out of memory");
            free(sl->argv[a + 1]);
            sl->argv[a + 1] = t;
        }
        mcHostSetSegmentToken(c->host, i, tok);
        break;
    }
    int rc = nodeCommand(c, sl->node, 0, sl->argc, (const char **)sl->argv, NULL, &r);
    if (rc != MC_OK) return rc;
    if (r->type != MCR_INT || r->integer <= 0) {
        rc = r->type == MCR_INT ? setErr(c, MC_ERR_PROTOCOL, "MOUNT answered %lld", r->integer) : replyErr(c, r);
        mcReplyFree(r);
        return rc;
    }
    long long id = r->integer;
    mcReplyFree(r);
    /* The host tells slices apart by id; ids from different nodes are
     * drawn from per-node random bases, so a clash is a broken server. */
    for (int j = 0; j < c->nslices; j++)
        if (j != i && c->slices[j].id == id)
            return setErr(c, MC_ERR_PROTOCOL, "two nodes gave segment id %lld to slices of one mount", id);
    sl->id = id;
    mcHostSetSegmentId(c->host, i, (uint64_t)id);
    /* mc_mount_id: the slice on the node the handle was given, else the first. */
    c->host_id = MC_ERR_NOT_FOUND;
    for (int j = 0; j < c->nslices; j++) {
        if (c->slices[j].id <= 0) continue;
        if (c->host_id <= 0 || c->slices[j].node == 0) c->host_id = c->slices[j].id;
        if (c->slices[j].node == 0) break;
    }
    return MC_OK;
}

/* Slice i's node cannot be reached, or no longer takes the MOUNT (a
 * replica now answers -READONLY): after a failover the slot it served has
 * a new owner, the promoted replica, which holds the slice's segment and
 * objects detached, as a restarted server holds those of its log. The map
 * (from another node) names that owner; the slice is mounted there with
 * the MOUNT it had -- same name, owner, size and IDENTITY -- so the
 * objects come back where they are, nothing put again. Nothing moves
 * while the map still names the old node (the failover is not done). */
static void sliceFollow(mc_client *c, int i) {
    mcSlice *sl = &c->slices[i];
    if (!c->cluster || sl->slot < 0) return;
    mapRefreshFrom(c, -1, sl->node, 0);
    int to = routeSlot(c, (unsigned)sl->slot);
    /* A failover takes all of the old node's slots; a node that still
     * serves some only lost that one to a migration, and its slice stays. */
    if (c->map.slots == NULL || c->map.slots[sl->slot] == MC_NO_NODE || to == sl->node ||
        c->map.nodes[sl->node].primary)
        return;
    for (int j = 0; j < c->nslices; j++)
        if (j != i && c->slices[j].node == to) return; /* one slice per node: that one stays where it is */
    sl->node = to;
    sendMount(c, i); /* a failure is tried again at the next beat (HEARTBEAT: -NEEDREMOUNT) */
}

/* A beat for slice i on its node: HEARTBEAT (reconnecting if the
 * connection broke), and MOUNT again if the node already let the owner go
 * (-NEEDREMOUNT: the old segment and its objects are gone, the new one gets
 * a new id; after a restart, the same id and objects, re-attached). A node
 * that cannot be reached or refuses the MOUNT may have lost the slot to a
 * failover: the slice follows it (sliceFollow). Errors are left for the
 * next beat. */
static void heartbeatSlice(mc_client *c, int i) {
    mcSlice *sl = &c->slices[i];
    if (sl->argc < 2) return;
    mcConn *conn = c->map.nodes[sl->node].conn;
    if ((conn == NULL || conn->broken) && nodeReconnect(c, sl->node) != 0) {
        sliceFollow(c, i);
        return;
    }
    conn = c->map.nodes[sl->node].conn;
    const char *argv[2] = {"HEARTBEAT", sl->argv[sl->argc - 1]}; /* OWNER is last */
    mcReply *r = mcConnCommand(conn, 2, argv, NULL);
    int remount = r && mcReplyIsError(r, "NEEDREMOUNT"), lost = r == NULL;
    mcReplyFree(r);
    if ((remount && sendMount(c, i) != MC_OK) || lost) sliceFollow(c, i);
}

/* Every slice mounted on node (called after its connection was reopened). */
static void heartbeatNode(mc_client *c, int node) {
    c->hb_active = 1; /* a reconnect from within does not beat again */
    for (int i = 0; i < c->nslices; i++)
        if (c->slices[i].node == node) heartbeatSlice(c, i);
    c->hb_active = 0;
}

static void heartbeatLocked(mc_client *c) {
    if (c->host == NULL) return;
    c->hb_active = 1;
    for (int i = 0; i < c->nslices; i++) heartbeatSlice(c, i);
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
    for (int i = 0; i < c->nslices; i++) {
        mcSlice *sl = &c->slices[i];
        mcConn *conn = c->map.nodes[sl->node].conn;
        /* Only what this handle mounted: a name another owner holds
         * (-EXISTS) is not ours to unmount. */
        if (sl->id > 0 && c->host_name && conn && !conn->broken) {
            const char *argv[2] = {"UNMOUNT", c->host_name};
            mcReply *r = mcConnCommand(conn, 2, argv, NULL);
            mcReplyFree(r);
        }
        for (int j = 0; j < sl->argc; j++) free(sl->argv[j]);
    }
    free(c->slices);
    c->slices = NULL;
    c->nslices = 0;
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

static int firstSlotCompare(const void *a, const void *b, void *arg) {
    const mcMap *m = arg;
    int x = m->nodes[*(const int *)a].first_slot, y = m->nodes[*(const int *)b].first_slot;
    return (x > y) - (x < y);
}

/* The nodes that get a slice: the one server, or every primary of the
 * cluster in slot order. Their count, or MC_ERR_*. */
static int mountNodes(mc_client *c, int *nodes) {
    if (!c->cluster) {
        nodes[0] = 0;
        return 1;
    }
    mapRefresh(c, 0, 1);
    int n = 0;
    for (int i = 0; i < c->map.nnodes && n < MC_HOST_MAX_SLICES; i++)
        if (c->map.nodes[i].primary) nodes[n++] = i;
    if (n == 0) return setErr(c, MC_ERR_SERVER, "the cluster serves no slots yet: no node to mount on");
    qsort_r(nodes, (size_t)n, sizeof(*nodes), firstSlotCompare, &c->map);
    return n;
}

/* The name a segment is mounted under: `name`, except that a name ending
 * in ":0" gets the port of the segment's TCP listener (tcp_ep) in place
 * of the 0, as binding port 0 picks a port. Processes on one host that
 * all pass the same hostname (tensor-parallel ranks) so get names of
 * their own, in the host:port form Mooncake's clients use. */
static char *mountName(const char *name, const char *tcp_ep) {
    size_t len = strlen(name);
    const char *colon = strrchr(tcp_ep, ':');
    if (len < 2 || strcmp(name + len - 2, ":0") || colon == NULL) return strdup(name);
    char *out = malloc(len + 8);
    if (out) snprintf(out, len + 8, "%.*s:%s", (int)(len - 2), name, colon + 1);
    return out;
}

static int mountLocked(mc_client *c, void *buf, size_t size, const char *name) {
    char err[256];
    int rc;
    if (size == 0 || name == NULL || name[0] == '\0') return setErr(c, MC_ERR_INVALID, "mount needs a size and a name");
    if (c->host) return setErr(c, MC_ERR_EXISTS, "this handle already hosts segment '%s'", c->host_name);
    int *nodes = malloc(MC_HOST_MAX_SLICES * sizeof(*nodes));
    size_t *off = malloc(MC_HOST_MAX_SLICES * sizeof(*off)), *len = malloc(MC_HOST_MAX_SLICES * sizeof(*len));
    if (!nodes || !off || !len) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto out;
    }
    int n = mountNodes(c, nodes);
    if (n < 0) {
        rc = n;
        goto out;
    }
    /* One slice per node: equal, aligned, each at least the 4 KiB a
     * segment must have. */
    if (n == 1) {
        off[0] = 0;
        len[0] = size;
    } else if (mcSlicePlan(size, n, mcSliceAlign(size / (size_t)n), 4096, off, len) != 0) {
        rc = setErr(c, MC_ERR_INVALID, "%zu bytes cannot be cut into %d aligned slices of at least 4 KiB", size, n);
        goto out;
    }
    if ((c->slices = calloc((size_t)n, sizeof(*c->slices))) == NULL) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto out;
    }
    c->nslices = n;
    for (int i = 0; i < n; i++) {
        c->slices[i].node = nodes[i];
        c->slices[i].slot = c->cluster ? c->map.nodes[nodes[i]].first_slot : -1;
        c->slices[i].off = off[i];
        c->slices[i].size = len[i];
    }
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
        madvise(m, size, MADV_HUGEPAGE); /* where shmem THP is allowed; ignored elsewhere */
        c->host_mem = m;
        c->host_owned = 1;
    } else {
        /* The caller's memory: fault it in now, writable, so the first
         * transfers into it are not paced by page faults (content is kept;
         * memory that cannot be populated, e.g. device-mapped, is left as is). */
        madvise(buf, size, MADV_POPULATE_WRITE_COMPAT);
        c->host_mem = buf;
        c->host_owned = 0;
    }
    /* Listen where the server sees us: our end of the connection to
     * nodes[0] (every node of a cluster is told the same endpoints). */
    char bindip[64] = "127.0.0.1";
    mcConn *seed = nodeConn(c, 0);
    if (seed && !seed->is_unix) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        if (getsockname(seed->fd, (struct sockaddr *)&sa, &salen) == 0) mcHostAddrString(&sa, bindip, sizeof(bindip));
    }
    c->host = mcHostStart(c->host_mem, size, c->host_fd, n, off, len, bindip, c->host_port_min, c->host_port_max,
                          c->user, c->password, err, sizeof(err));
    if (c->host == NULL) {
        rc = setErr(c, MC_ERR_IO, "segment listener: %s", err);
        goto err;
    }
    char eps[4][300], rkeys[512], rdmaep[300] = "";
    int neps = mcHostEndpoints(c->host, eps, 4);
    if ((c->host_name = mountName(name, eps[0])) == NULL) {
        rc = setErr(c, MC_ERR_NOMEM, "out of memory");
        goto err;
    }
    name = c->host_name;
    if (rdmaEngine(c) && mcRdmaRegister(c->rdma, c->host_mem, size, rkeys, sizeof(rkeys)) == MC_OK) {
        int port = 0;
        if (mcRdmaListen(c->rdma, bindip, &port, err, sizeof(err)) == MC_OK)
            snprintf(rdmaep, sizeof(rdmaep), "rdma://%s:%d", bindip, port);
    }
    char hostname[256] = "localhost", owner[400];
    int have_hostname = gethostname(hostname, sizeof(hostname)) == 0;
    hostname[sizeof(hostname) - 1] = '\0';
    /* A named owner, not the connection: it outlives a reconnect (within
     * owner-ttl) and the heartbeat thread speaks for it. Kept last. */
    snprintf(owner, sizeof(owner), "mc:%s:%ld:%s", hostname, (long)getpid(), name);
    /* Drawn once for this memory and kept by this process alone: a server
     * restarted from its log re-attaches the objects it held here only to
     * a MOUNT that presents it again (the heartbeat's remount does), so a
     * new process under the same name (pid 1 in a container) is never
     * taken for this one. */
    char identity[33];
    unsigned char idraw[16];
    if (getrandom(idraw, sizeof(idraw), 0) != (ssize_t)sizeof(idraw)) {
        rc = setErr(c, MC_ERR_IO, "getrandom: %s", strerror(errno));
        goto err;
    }
    for (int b = 0; b < 16; b++) snprintf(identity + 2 * b, 3, "%02x", idraw[b]);
    for (int i = 0; i < n; i++) {
        mcSlice *sl = &c->slices[i];
        char sizebuf[24], basebuf[24];
        const char *argv[32];
        int argc = 0;
        fmtU64(sizebuf, sizeof(sizebuf), sl->size);
        argv[argc++] = "MOUNT";
        argv[argc++] = name;
        argv[argc++] = sizebuf;
        for (int e = 0; e < neps; e++) {
            argv[argc++] = "ENDPOINT";
            argv[argc++] = eps[e];
        }
        if (rdmaep[0]) { /* one registration; each slice's own BASE */
            fmtU64(basebuf, sizeof(basebuf), (uint64_t)(uintptr_t)(c->host_mem + sl->off));
            argv[argc++] = "ENDPOINT";
            argv[argc++] = rdmaep;
            argv[argc++] = "BASE";
            argv[argc++] = basebuf;
            argv[argc++] = "RKEY";
            argv[argc++] = rkeys;
        }
        if (have_hostname) {
            argv[argc++] = "HOST";
            argv[argc++] = hostname;
        }
        argv[argc++] = "IDENTITY";
        argv[argc++] = identity;
        /* Its value is drawn afresh at each MOUNT (sendMount). */
        argv[argc++] = "TOKEN";
        argv[argc++] = "-";
        argv[argc++] = "OWNER";
        argv[argc++] = owner;
        for (int a = 0; a < argc; a++) {
            if ((sl->argv[a] = strdup(argv[a])) == NULL) {
                rc = setErr(c, MC_ERR_NOMEM, "out of memory");
                goto err;
            }
            sl->argc = a + 1;
        }
        if ((rc = sendMount(c, i)) != MC_OK) goto err;
    }
    if (pthread_create(&c->hb_thread, NULL, heartbeatMain, c) == 0) c->hb_running = 1;
    rc = MC_OK;
    goto out;
err:
    unmountLocked(c); /* UNMOUNTs only the slices that were mounted */
out:
    free(nodes);
    free(off);
    free(len);
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

const char *mc_mount_name(mc_client *c) { return c && c->host ? c->host_name : NULL; }
