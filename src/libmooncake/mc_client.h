/* mc_client.h -- the handle's insides, shared by the files of the client
 * library: mooncake.c (the handle, single-key put and get), mc_route.c
 * (which node answers a command), mc_xfer.c (how a replica's bytes move),
 * mc_batch.c (the batch calls) and mc_mount.c (hosting a segment).
 *
 * One struct mc_client, one lock (see mooncake.c), so these files are one
 * module cut along its sections, not layers with interfaces of their own:
 * what one calls of another is declared below, prefixed mc like every
 * internal name of the library. Internal: not installed, and hidden in the
 * shared library like everything not in mooncake.h. */
#ifndef MC_CLIENT_H
#define MC_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mooncake.h"
#include "mc_cluster.h"
#include "mc_conn.h"
#include "mc_fork.h"
#include "mc_host.h"
#include "mc_rdma.h"
#include "mc_shm.h"
#include "mc_tcp.h"
#include "mc_view.h"

#define MC_MAX_ENDPOINTS 16
#define MC_SEG_SWEEP_MIN 16          /* segment descriptions cached before mcSegSweep asks which are gone */
#define MC_SEG_SWEEP_MS 30000        /* and at most this long between asks while a hosted segment is mapped */
#define MC_SEG_PEER_CHECK_MS 100     /* or when a data connection's peer closed it, looked at this often at most */

/* Cluster retry policy shared by the single-key calls and the batches (the
 * rest of it is mc_route.c's). */
#define MC_MAX_REDO 3                /* puts redone after their slot moved */
#define MC_LOST_BACKOFF 3            /* a lost connection is retried after 8, 16 ... 100 ms */

/* How a transfer's buffers are moved (mcXferReplica). */
#define XF_HOST 0                    /* host memory only */
#define XF_GPUDIRECT 1               /* device memory all registered for RDMA: RDMA from the device where shm does not reach */
#define XF_DEVICE 2                  /* device memory among them: copied by the CUDA runtime */

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

/* The text of a call's failure and the transport of its last replica are
 * the calling thread's (mooncake.c, "Threads"): mcLock points these two at
 * the thread's slot for the handle, so the code under the lock writes them
 * as plain fields. */
#define MC_ERRLEN 512

struct mc_client {
    pthread_mutex_t lock;
    /* mc_close against calls in flight (mcLock, mc_close): users counts the
     * calls inside the handle, closing refuses new ones. */
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_cond;
    int users, closing;
    uint64_t serial;             /* never reused: keys the threads' error slots */
    unsigned fork_gen;           /* the process that made it (mc_fork.h): any other may only free it */
    mcMap map;                   /* nodes[0]: the server mc_connect was given */
    int cluster;                 /* it is a cluster node: route by slot */
    long long map_at_us;         /* last CLUSTER SLOTS */
    char *user;                  /* ACL user, NULL: default */
    char *password;
    int connect_ms, io_ms;
    int transport;
    int *last_transport;         /* the locking thread's (see MC_ERRLEN) */
    char *errbuf;                /* the locking thread's, MC_ERRLEN bytes */
    mcSeg *segs;
    int nsegs;                   /* entries in segs */
    int segs_sweep_at;           /* mcSegSweep runs when nsegs reaches it */
    int segs_sweep_ms;           /* or this long after the last sweep, if a hosted segment is mapped */
    long long segs_swept_us;
    long long peers_checked_us;  /* last look for data connections their peers closed (mc_xfer.c) */
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
    int host_rdma;               /* the mount registered host_mem with the RDMA engine */
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

/* What every public call checks first: no handle, or one inherited across
 * fork() (mooncake.c, "Fork"), is MC_ERR_INVALID, before its lock is taken
 * (a thread of the parent may have held it at the fork). */
static inline int mcHandleBad(const mc_client *c) { return c == NULL || mcInherited(c->fork_gen); }


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

/* mooncake.c: the handle's lock and gate (every public call: mcLock, 0 or
 * MC_ERR_INVALID once mc_close has begun; mcUnlock), the calling thread's
 * error slot for a handle by its serial (mcThreadErrSet: an async op's
 * reason given to the thread that waited for it). */
int mcLock(mc_client *c);
void mcUnlock(mc_client *c);
void mcLockInternal(mc_client *c);
int mcTryLockInternal(mc_client *c);
void mcThreadErrSet(uint64_t serial, const char *text);

/* mooncake.c: errors, replies, clocks; the single-key put and get the batches
 * fall back to; the lease releases they queue. */
long long mcNowUs(void);
void mcSleepMs(long ms);
int mcErr(mc_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int mcErrReply(mc_client *c, const mcReply *r);
void mcFmtU64(char *buf, size_t len, uint64_t v);
int mcParseReplica(const mcReply *r, mcReplica *out);
int mcPutOptArgs(const mc_put_opts *o, const char **argv, char *repbuf, char *pinbuf);
int mcPutInProgress(const mcReply *r);
int mcPutLandedAlready(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                       size_t len);
int mcPutLocked(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt, size_t len,
                const mc_put_opts *opts, int device);
int mcParseReplicas(mc_client *c, const mcReply *r, long long *lease_ms, uint64_t *size, mcReplica *reps,
                    size_t *n);
long long mcReadReplicas(mc_client *c, int node, unsigned gen, const mcReplica *reps, size_t n, uint64_t size,
                         const struct iovec *iov, int iovcnt, long long deadline_us, int device);
void mcQueueLeaseRelease(mcConn *conn, const void *key, size_t keylen);
void mcFlushLeaseReleases(mcConn *conn);

/* mc_route.c: node connections, the slot map, keyed commands and riding
 * through; a batch phase over many keys (mcRunPhase). */
int mcNodeReconnect(mc_client *c, int i);
mcConn *mcNodeConn(mc_client *c, int i);
int mcNodeCommand(mc_client *c, int i, int asking, int argc, const char **argv, const size_t *lens,
                  mcReply **out);
int mcRouteSlot(mc_client *c, unsigned slot);
unsigned mcSlotOf(mc_client *c, const void *key, size_t keylen);
void mcRefreshMapFrom(mc_client *c, int hint, int avoid, int force);
void mcRefreshMap(mc_client *c, int hint, int force);
void mcBackoff(int tries, long long deadline);
long long mcCallDeadline(mc_client *c);
int mcNodeSame(const mc_client *c, int i, unsigned gen);
int mcNodeAlive(mc_client *c, int i, unsigned gen);
int mcKeyCommand(mc_client *c, const void *key, size_t keylen, int argc, const char **argv, const size_t *lens,
                 mcReply **out, mcRoute *rt);
int mcRouteCommand(mc_client *c, const mcRoute *rt, int argc, const char **argv, const size_t *lens,
                   mcReply **out, int *redirected);
int mcRunPhase(mc_client *c, const mcPhase *ph, mcBKey *k, size_t n);
void mcFreeBKeys(mcBKey *k, size_t n);

/* mc_xfer.c: segments, their paths, and moving a replica's bytes. */
void mcSegFree(mcSeg *s);
int mcSegStale(const mc_client *c, const mcSeg *s);
int mcSegLost(mc_client *c);
mcSeg *mcSegGet(mc_client *c, int node, uint64_t id);
void mcSegSweep(mc_client *c);
void mcEndpointUri(mc_client *c, const mcSeg *s, const char *ep, char *out, size_t len);
void mcDropConn(mc_client *c, mcConn *conn);
mcConn *mcSegConn(mc_client *c, mcSeg *s, const char *uri);
int mcSegAttach(mc_client *c, mcSeg *s);
mcRdma *mcClientRdma(mc_client *c);
mcRegion *mcRegionOf(mc_client *c, const void *p, size_t len);
int mcSegShmCopy(mc_client *c, const mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                 int write, int device);
int mcSegTcpXfer(mc_client *c, mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt, int write);
int mcIovRdmaRegistered(mc_client *c, const struct iovec *iov, int iovcnt, uint64_t len);
int mcXferReplica(mc_client *c, int node, unsigned gen, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                  int write, int device);
int mcIovCheck(mc_client *c, const struct iovec *iov, int iovcnt, size_t *total);
int mcIovRegistered(mc_client *c, const struct iovec *iov, int iovcnt);
int mcIovDevice(mc_client *c, const struct iovec *iov, int iovcnt, uint64_t len);

/* mc_batch.c: a replica's transfer started now (shm, returns MC_OK) or
 * queued for mcFinishXfers (tcp, returns 1); else MC_ERR_UNSUPPORTED and the
 * caller moves it with mcXferReplica. */
int mcStartXfer(mc_client *c, int node, unsigned gen, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                int write, int device, mcTcpItem *p);
void mcFinishXfers(mc_client *c, mcTcpItem *p, size_t np, int write, int *ok);
/* A BATCH.PUT.START key (size formatted into sizebuf), and the key of its
 * PUT.END/PUT.REVOKE, pinned where the start was answered. */
void mcPutStartKey(mc_client *c, mcBKey *k, const void *key, size_t keylen, uint64_t size, char sizebuf[24]);
mcBKey mcPutEndKey(const mcBKey *started);

/* mc_mount.c: the hosted segment's heartbeat and unmount. */
void mcHeartbeatNode(mc_client *c, int node);
void mcUnmountLocked(mc_client *c);

#endif
