/* mooncake.h -- libmooncake: the client library inference engines link.
 *
 * A handle talks RESP to one mooncake-server for metadata (PUT.START,
 * GET.REPLICAS, ...) and moves the bytes of every replica directly between
 * the caller's memory and the segment that holds it, by the fastest path it
 * can open: shared memory on the same host (SHM.ATTACH, one memcpy), RDMA
 * (one-sided READ/WRITE) or the TCP data plane (SEG.READ/SEG.WRITE). See
 * docs/PROTOCOL.md for the wire side and mooncake.c for the design.
 *
 * Clusters: given any node of a cluster (cluster-enabled servers, Redis
 * Cluster's slots), a handle learns the slot map, keeps a connection per
 * node and sends each key to its slot's owner, following -MOVED/-ASK as a
 * Redis Cluster client does; batches are split per node and slot and sent
 * to all nodes at once. Nothing changes for a single server. See
 * docs/PROTOCOL.md ("libmooncake in a cluster").
 *
 * Threads: every call on one handle takes the handle's lock, so a handle may
 * be shared by threads; calls on one handle then run one at a time. For
 * parallel transfers open one handle per thread (connections are cheap).
 * mc_last_error and mc_last_transport answer for the calling thread's own
 * last call on the handle. mc_close may run while other threads are inside
 * calls on the handle: those not yet holding its lock fail with
 * MC_ERR_INVALID, the one holding it ends first; a call that starts after
 * mc_close returned is the caller's error (docs/PROTOCOL.md, "Threads
 * sharing a handle").
 *
 * Fork: a handle belongs to the process that made it. In a child forked
 * after, every call on it (and on its ops and views) fails with
 * MC_ERR_INVALID, and closing it there frees only the child's copy: nothing
 * is sent on the parent's connections (docs/PROTOCOL.md, "Handles across
 * fork()"). The child opens handles of its own.
 *
 * Latency: a call polls its socket for a reply for up to 50 us before
 * sleeping in read() (environment MC_SPIN_US sets the window, 0 disables).
 *
 * Errors are negative MC_ERR_* values; mc_strerror() names them, and
 * mc_last_error() gives the server's or the system's own words for the
 * calling thread's last failure on a handle. */
#ifndef MOONCAKE_H
#define MOONCAKE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: only this API is exported. */
#pragma GCC visibility push(default)

/* The version of this header. The build passes MOONCAKE_VERSION from the
 * top-level VERSION file and `make install` writes the number in here, so
 * the installed header needs nothing passed. mc_version() gives the version
 * of the library actually loaded, which is what to log or compare when the
 * program may run against another libmooncake.so than it was built with. */
#define MC_VERSION MOONCAKE_VERSION

typedef struct mc_client mc_client;

typedef struct {
    int replicas;          /* 0: the server's default (1) */
    const char *prefer;    /* segment name to try first, or NULL */
    long long pin_ms;      /* soft pin for this long; 0: none */
    int hard_pin;          /* never evicted until UNPIN */
    int replace;           /* overwrite a complete value (atomic swap at PUT.END) */
    int prefer_hint;       /* prefer is a hint (Mooncake's preferred_segment): a segment
                              that does not exist or is not placeable is passed over */
} mc_put_opts;

typedef struct {
    const void *key;
    size_t keylen;
    void *buf;             /* put: the value; get: where it goes */
    size_t len;            /* put: value length; get: capacity of buf */
} mc_kv;

enum { MC_TRANSPORT_AUTO, MC_TRANSPORT_SHM, MC_TRANSPORT_TCP, MC_TRANSPORT_RDMA };
enum { MC_MEM_HOST = 1, MC_MEM_CUDA = 2 };

enum {
    MC_OK = 0,
    MC_ERR_NOT_FOUND = -1,      /* no such key (or not complete yet: see NOT_READY) */
    MC_ERR_EXISTS = -2,         /* PUT of a key that exists (use replace) */
    MC_ERR_NOSPACE = -3,        /* no segment can hold the value */
    MC_ERR_LEASE_EXPIRED = -4,  /* the read outlived its lease: the bytes are not valid */
    MC_ERR_TOO_SMALL = -5,      /* get: the buffer is smaller than the value */
    MC_ERR_INVALID = -6,        /* bad argument (a key or value past the server's max-key-size, max-object-size too) */
    MC_ERR_AUTH = -7,           /* wrong or missing password, or the ACL user may not (NOPERM) */
    MC_ERR_PROTOCOL = -8,       /* the peer said something unexpected */
    MC_ERR_IO = -9,             /* connection failed, closed or timed out */
    MC_ERR_UNSUPPORTED = -10,   /* transport or memory kind not available here */
    MC_ERR_NOT_READY = -11,     /* the key exists but its put has not ended */
    MC_ERR_SERVER = -12,        /* any other error reply: see mc_last_error() */
    MC_ERR_NOMEM = -13,         /* out of local memory */
    MC_ERR_PENDING = -14        /* mc_op_wait: the operation has not finished yet */
};

/* A key alone (mc_batch_exists). */
typedef struct {
    const void *key;
    size_t keylen;
} mc_key;

/* One object from or into several buffers (scatter-gather): the object is
 * the concatenation of iov[0..iovcnt) in order; a get fills them in order.
 * put: the value's size is the sum of the lengths; get: their sum is the
 * capacity. */
typedef struct {
    const void *key;
    size_t keylen;
    const struct iovec *iov;
    int iovcnt;
} mc_kvv;

/* An operation running in the background (mc_batch_put_async). */
typedef struct mc_op mc_op;

/* uri: "tcp://host:port", "unix:///path/to.sock" ("unix://@name": an
 * abstract socket) or "host:port" (of any node, for a cluster). password
 * may be NULL (it is used for every node).
 * On failure returns NULL with the reason in err. */
mc_client *mc_connect(const char *uri, const char *password, char *err, size_t errlen);
/* mc_connect as an ACL user (AUTH user password; docs/PROTOCOL.md "ACL"):
 * user NULL or "" is mc_connect, the default user. Every connection the
 * handle opens -- to each cluster node, the data connections of the TCP
 * data plane, their parallel streams -- authenticates as this user, and a
 * segment the handle hosts (mc_mount) admits peers with these credentials
 * only. A user restricted to key patterns (~tenantA:*) is refused shared
 * memory (SHM.ATTACH maps the whole pool): with MC_TRANSPORT_AUTO its
 * transfers over the server's pool use TCP instead. The password is a C
 * string here (the server's passwords may hold zero bytes; give such a one
 * with AUTH over your own connection). */
mc_client *mc_connect_user(const char *uri, const char *user, const char *password, char *err, size_t errlen);
/* mc_connect_user under the timeouts of mc_set_timeouts from its first
 * connection on: connect_ms bounds the connect, io_ms the wait for the
 * probe's reply. The two calls above wait their defaults (5 s, 30 s) there,
 * which a server that accepts and never answers (stopped, wedged) holds
 * them for whatever the handle is set to later. */
mc_client *mc_connect_timeouts(const char *uri, const char *user, const char *password, int connect_ms, int io_ms,
                               char *err, size_t errlen);
void mc_close(mc_client *c);
/* Connect and per-operation I/O timeouts in ms (defaults 5000 and 30000; 0: none).
 * The I/O timeout bounds each wait on a socket and each reply or write as
 * a whole: io_ms to come, and another io_ms per 64 KiB that came (a peer
 * that drips fails the call, MC_ERR_IO "timed out"). It also bounds how
 * long one call rides through a server restart, a lost connection,
 * -TRYAGAIN or -CLUSTERDOWN, retrying by itself (30 s when it is 0); then
 * the call fails (MC_ERR_IO, or the cluster's last error). docs/PROTOCOL.md, "Riding through". The connections the
 * handle has open take the new I/O timeout too: metadata, data, the
 * parallel streams' (at their next transfer), the async worker's clone
 * (before its next op). */
int mc_set_timeouts(mc_client *c, int connect_ms, int io_ms);
int mc_set_transport(mc_client *c, int transport); /* force one, for tests/bench */
/* TCP connections per peer that one transfer may use at once (1..16): a
 * transfer of n x 256 KiB is cut into min(streams, n) slices sent in
 * parallel, each on its own connection and thread (the extra threads start
 * at the first such transfer). Unset: one to a peer on this host over an
 * unpaced connection (one stream already keeps both sides copying), one
 * per CPU, at most 4, to others. */
int mc_set_streams(mc_client *c, int streams);
/* After each get (mc_get, mc_get_into, mc_batch_get, mc_batch_get_ranges,
 * mc_size; mc_batch_replicas too) the library ends its read lease with
 * LEASE.RELEASE, sent without waiting for the reply, so the space of what
 * it read can be evicted or reused at once instead of after the server's
 * lease-ttl. on = 0 keeps leases to their
 * deadline (as before; for comparison). Default on. */
int mc_set_lease_release(mc_client *c, int on);
int mc_last_transport(mc_client *c);               /* what moved the last replica */
const char *mc_last_error(mc_client *c);

/* Zero-copy buffers: registered memory is pinned for RDMA (ibv_reg_mr) and
 * recognised as device memory for CUDA; put_from/get_into require it. */
int mc_register(mc_client *c, void *addr, size_t len, int mem);
int mc_unregister(mc_client *c, void *addr);
/* How the registered region holding addr travels over RDMA: MC_REG_STAGED
 * (not registered with a NIC: no RDMA here, or device memory the NICs
 * cannot reach, which is staged through host memory), MC_REG_RDMA_HOST,
 * or GPUDirect: MC_REG_RDMA_DMABUF (the GPU's dmabuf registered, the
 * default where the platform allows) or MC_REG_RDMA_PEERMEM (the device
 * pointer, nvidia_peermem). MC_GPUDIRECT=auto|dmabuf|peermem|off narrows
 * the choice. why (may be NULL) receives the reason. MC_ERR_NOT_FOUND if
 * addr is in no registered region. */
enum { MC_REG_STAGED = 0, MC_REG_RDMA_HOST = 1, MC_REG_RDMA_DMABUF = 2, MC_REG_RDMA_PEERMEM = 3 };
int mc_region_rdma(mc_client *c, const void *addr, char *why, size_t whylen);

/* Device memory (CUDA): the runtime is loaded with dlopen, the library
 * MC_CUDA_LIBRARY names or else libcudart.so.13/.12/.11.0, the first time
 * a pointer might be device memory (a CUDA driver is loaded in the
 * process) or this is asked. 1 if it loaded and sees a device, else 0 with
 * the reason in why (NULL: not wanted). Every put/get form takes device
 * pointers: over shm they are copied straight into or out of the segment's
 * mapping (page-locked once per process), over tcp through pinned memory. */
int mc_cuda_available(char *why, size_t len);

/* Host a segment of this process's memory: mc_mount allocates it (a memfd,
 * so same-host peers map it), mc_mount_buffer takes the caller's (reachable
 * by tcp/rdma only). Either MOUNTs it and serves SEG.READ/SEG.WRITE and
 * SHM.ATTACH on a listener thread until mc_unmount or mc_close. Against a
 * cluster the memory is cut into one equal slice per primary, each mounted
 * under `name` on its primary (a primary that joins later gets none until
 * the next mount); mc_mount_id is then the id of the slice on the node the
 * handle was given. */
/* The port range the hosted segment's TCP listener binds in (the next
 * mc_mount): the first free port of [port_min, port_max], tried from a
 * random start; a full range fails the mount. 0, 0 (the default): a port
 * the kernel picks. Mooncake's clients bind in 12300-14300 so that a
 * firewall can let exactly those through. */
int mc_set_host_ports(mc_client *c, int port_min, int port_max);
int mc_mount(mc_client *c, size_t size, const char *name);
int mc_mount_buffer(mc_client *c, void *buf, size_t size, const char *name);
int mc_unmount(mc_client *c);
long long mc_mount_id(mc_client *c);               /* segment id, or MC_ERR_* */
/* The name mounted: `name` as given, except that a name ending in ":0"
 * gets the port of the segment's TCP listener in place of the 0 (as
 * binding port 0 picks one), so processes that share a hostname get
 * names of their own ("host:port", as Mooncake's clients). NULL if the
 * handle hosts nothing. */
const char *mc_mount_name(mc_client *c);

int mc_put(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
           const mc_put_opts *opts);
/* Bytes read, or MC_ERR_*; MC_ERR_TOO_SMALL if cap < size. */
long long mc_get(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap);
int mc_put_from(mc_client *c, const void *key, size_t keylen, const void *buf, size_t len,
                const mc_put_opts *opts);
long long mc_get_into(mc_client *c, const void *key, size_t keylen, void *buf, size_t cap);
/* Size of a complete value (a probe: grants a lease), or MC_ERR_*. */
long long mc_size(mc_client *c, const void *key, size_t keylen);

/* Batches pipeline the metadata and overlap the transfers. results[i] is
 * item i's outcome (put: MC_OK or MC_ERR_*; get: bytes or MC_ERR_*); the
 * return value is the number of items that succeeded, or MC_ERR_* when the
 * batch as a whole failed (connection lost). A put batch of more than 4096
 * items goes in rounds of 4096, each ended before the next starts, so the
 * server's client-max-pending-puts (16384 by default) never cuts it short. */
int mc_batch_put(mc_client *c, size_t n, const mc_kv *items, const mc_put_opts *opts, int *results);
int mc_batch_get(mc_client *c, size_t n, mc_kv *items, long long *results);

/* Scatter-gather forms of put_from/get_into and of the batches: no staging
 * copy, each buffer goes to (comes from) its part of the object directly.
 * iovcnt 1..MC_MAX_IOV; a zero-length entry is allowed, a NULL base under a
 * nonzero length is MC_ERR_INVALID. mc_get_intov answers the object's size
 * (a smaller object fills a prefix of the buffers), or MC_ERR_TOO_SMALL
 * when the buffers together are smaller. mc_put_fromv/mc_get_intov want
 * registered memory as put_from/get_into do (each nonempty buffer inside a
 * registered region); mc_putv and the batch forms take any memory, as
 * mc_put and the batches do. Device memory (CUDA) is taken by every form,
 * a buffer at a time beside host buffers (see mc_cuda_available). */
#define MC_MAX_IOV 1024
int mc_put_fromv(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
                 const mc_put_opts *opts);
int mc_putv(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt,
            const mc_put_opts *opts);
long long mc_get_intov(mc_client *c, const void *key, size_t keylen, const struct iovec *iov, int iovcnt);
int mc_batch_putv(mc_client *c, size_t n, const mc_kvv *items, const mc_put_opts *opts, int *results);
int mc_batch_getv(mc_client *c, size_t n, const mc_kvv *items, long long *results);

/* Ranged reads: byte ranges of objects read straight into the caller's
 * buffers, many keys and many ranges per key in one call (what the
 * engines' "get into ranges" / "multi-buffer ranges" ask for: a layer's
 * slice of a KV block, the tail of a block, the same block into buffers on
 * several devices). Bytes [src_off, src_off + len) of the item's object go
 * to dst. One BATCH.GET.REPLICAS per node and slot for all the items, then
 * the transfers by the fastest path as for mc_batch_getv (shm copies, tcp
 * pipelined with small ranges of one segment sharing a SEG.READV, rdma),
 * each range a sub-range of a replica's extent: a range that cannot be
 * read from one replica is read from the next; each key's lease is checked
 * after its ranges are read (MC_ERR_LEASE_EXPIRED) and then released. The
 * same key may be in several items (each is read under a lease of its
 * own).
 * results: one per range, the items' ranges in order (an item's nranges
 * slots, however many it says): len (bytes read) or MC_ERR_*. A key that
 * cannot be read (MC_ERR_NOT_FOUND, MC_ERR_NOT_READY, MC_ERR_IO,
 * MC_ERR_LEASE_EXPIRED, ...) fails all its item's ranges with that code.
 * MC_ERR_INVALID for an item alone: a NULL or empty key, nranges outside
 * 0..MC_MAX_IOV; for a range alone: one not inside the object (src_off +
 * len past its size, checked without overflow; the item's other ranges
 * are read), or a dst that is not inside memory registered with
 * mc_register (as mc_get_into). len 0 reads nothing and answers 0 (dst is
 * not looked at). Registered device memory (MC_MEM_CUDA) works as for
 * mc_get_into: copied straight from the segment's mapping (shm), read
 * through the pinned buffer and copied to the device (tcp), or over RDMA
 * directly when the region is registered for it.
 * Returns the number of ranges read (result >= 0), or MC_ERR_* when the
 * batch failed as a whole (every range not refused before then has it). */
typedef struct {
    void *dst;                 /* where the bytes go: inside registered memory */
    uint64_t src_off;          /* offset in the object */
    size_t len;
} mc_range;

typedef struct {
    const void *key;
    size_t keylen;
    const mc_range *ranges;
    int nranges;               /* 0..MC_MAX_IOV */
} mc_kranges;

int mc_batch_get_ranges(mc_client *c, size_t n, const mc_kranges *items, long long *results);

/* Replica descriptions: where each of n objects lives, for a caller that
 * moves the bytes itself or schedules reads by locality. One
 * BATCH.GET.REPLICAS per node and slot (the grants it makes are released at
 * once: nothing is read, so nothing is held), then each segment's
 * description (SEGMENT.INFO, cached by the handle: one round trip per
 * segment the handle had not seen). Only complete objects are described:
 * the extents of a put that has not ended are not readable and may still
 * be revoked. results[i]: the number of replicas of key i (0 when the
 * object has no live replica left), or MC_ERR_NOT_FOUND (no such key),
 * MC_ERR_NOT_READY (its put has not ended), MC_ERR_*. out[i] is zeroed,
 * then filled for a key that is described. Returns the number of keys
 * described, or MC_ERR_* when the batch failed as a whole (a NULL or empty
 * key: MC_ERR_INVALID). The description is of that moment: a replica may
 * be evicted, or its segment unmounted, right after. In a cluster segment
 * ids are per node (every node's pool is 1); the endpoint says where to go. */
#define MC_MAX_REPLICAS 8
#define MC_SEG_NAME_LEN 264        /* a segment name (1..256 characters), its NUL, padding */
#define MC_ENDPOINT_LEN 264        /* an endpoint URI and its NUL */

typedef struct {
    uint64_t seg_id;           /* the segment (SEGMENT.INFO id) */
    uint64_t offset;           /* the extent's offset in the segment */
    uint64_t len;              /* the extent's length: the object's size */
    uint64_t base;             /* the segment's BASE (its memory's RDMA address), 0 if none */
    char seg_name[MC_SEG_NAME_LEN]; /* "self" for the server's pool; "" if the segment went away */
    /* Where its bytes are served: the first tcp:// endpoint (tcp://0.0.0.0
     * resolved to the host the handle reached the server at, as transfers
     * do), else the first endpoint of any kind (unix://, rdma://); "" if
     * none fits. */
    char endpoint[MC_ENDPOINT_LEN];
} mc_replica_info;

typedef struct {
    uint64_t size;             /* the object's size */
    int32_t nreplicas;         /* replicas[0..nreplicas) are filled */
    int32_t reserved;
    mc_replica_info replicas[MC_MAX_REPLICAS];
} mc_replicas;

int mc_batch_replicas(mc_client *c, size_t n, const mc_key *keys, mc_replicas *out, int *results);

/* Zero-copy reads: views of objects where they lie. On the same host an
 * object is in memory this process maps (its segment's shared mapping), so
 * instead of copying it into a buffer the handle can give out the range
 * itself, read-only by contract: writing to it is writing to the store.
 * results[i] is the object's size with views[i] set, or a code with
 * views[i] NULL: MC_ERR_NOT_FOUND, MC_ERR_NOT_READY, MC_ERR_UNSUPPORTED (no
 * replica in shared memory from here: read it with a copy instead),
 * MC_ERR_SERVER (this connection holds the most views a connection may,
 * 4096), or the batch's failure. Returns the number of views made, or
 * MC_ERR_* when the batch failed as a whole.
 *
 * What keeps a view valid: a hold (HOLD.REPLICAS) on the handle's
 * connection keeps the object's space from reuse and eviction, whatever
 * happens to its key, until the view is released; a reference keeps the
 * mapping. mc_view_release may be called from any thread, before or after
 * mc_close; its hold ends at the handle's next mc_batch_get_views (or when
 * the handle closes). A view outlives its handle safely as memory, but its
 * hold then ends with the connection, lease-ttl later; the same if the
 * handle's connection to that server is lost and reopened (ride-through). */
typedef struct mc_view mc_view;
int mc_batch_get_views(mc_client *c, size_t n, const mc_key *keys, mc_view **views, long long *results);
const void *mc_view_data(const mc_view *v);
uint64_t mc_view_size(const mc_view *v);
void mc_view_release(mc_view *v);

/* Non-blocking batches: submit returns at once (NULL with mc_last_error()
 * set if it cannot be queued), the batch runs on the handle's background
 * worker, which has its own connections (opened on first use, with the
 * handle's address, credentials, timeouts and transport), so calls on the
 * handle go on meanwhile. The op copies the arrays and keys; the buffers
 * must stay valid and untouched until it is done. Ops run in submission
 * order. n == 0 gives an op that is done at once with 0. A worker that
 * cannot connect finishes the op with MC_ERR_IO in every slot (the reason
 * in mc_last_error of the thread whose mc_op_wait/mc_op_results finds the
 * op failed). mc_register/mc_unregister apply to the worker's
 * connections too (waiting for the batch it runs); setters from its next
 * op. mc_close lets queued ops run to their end first (each bounded by the
 * I/O timeout); ops stay valid to wait on, read and free after mc_close,
 * and must each be freed with mc_op_free (each holds a file descriptor).
 * mc_op_done, mc_op_wait, mc_op_results and mc_op_fd may be called from
 * any thread; mc_op_free once, when no other call on the op is running. */
mc_op *mc_batch_put_async(mc_client *c, size_t n, const mc_kvv *items, const mc_put_opts *opts);
mc_op *mc_batch_get_async(mc_client *c, size_t n, const mc_kvv *items);
/* 1 when finished, else 0. */
int mc_op_done(mc_op *op);
/* Wait up to timeout_ms (-1: for ever, 0: poll): the batch's return value
 * (items that succeeded, or MC_ERR_*), or MC_ERR_PENDING if not finished. */
int mc_op_wait(mc_op *op, int timeout_ms);
/* Per item, valid once finished: put MC_OK or MC_ERR_*, get bytes or MC_ERR_*. */
const long long *mc_op_results(mc_op *op);
/* A file descriptor that becomes readable when the op finishes (for event
 * loops: asyncio's add_reader); owned by the op. */
int mc_op_fd(mc_op *op);
/* Why a finished op failed, as a whole or in some items (then why the last
 * of them failed, as mc_last_error holds after a synchronous batch): ""
 * when nothing failed or no reason was given, or while it runs; NULL for a
 * NULL op. Owned by the op, valid until mc_op_free; any thread may read
 * it, and mc_op_wait/mc_op_results also make it the calling thread's
 * mc_last_error. */
const char *mc_op_error(mc_op *op);
/* Waits for the op if it is still running, then frees it. */
void mc_op_free(mc_op *op);

/* Existence of n keys in one round trip (BATCH.EXISTS; per node and slot in
 * a cluster). results[i]: 1 readable, 0 absent (or its put not ended), or
 * MC_ERR_*. Returns the number present; with MC_EXISTS_PREFIX, the number
 * of leading keys present (the lookup stops at the first miss, and results
 * past it are 0). MC_EXISTS_LEASE grants a read lease on each key found, so
 * it is not evicted before the get that follows (ended by that get's
 * LEASE.RELEASE, or at lease-ttl; the get's own lease then runs to
 * lease-ttl: docs/PROTOCOL.md, BATCH.EXISTS). */
enum { MC_EXISTS_PREFIX = 1, MC_EXISTS_LEASE = 2 };
int mc_batch_exists(mc_client *c, size_t n, const mc_key *keys, int flags, int *results);

/* Gives memory back (REPLICA.CLEAR; Mooncake's batch_replica_clear): each
 * key whose object is complete and that no one is reading (no lease in
 * force) is removed -- or, with segment not NULL, only if all its replicas
 * are in that segment. results[i]: 1 cleared, 0 left, or MC_ERR_*.
 * Returns the number cleared, or MC_ERR_*. Per node and slot, as
 * mc_batch_exists. */
int mc_batch_replica_clear(mc_client *c, size_t n, const mc_key *keys, const char *segment, int *results);
/* Remove every object (REMOVE.ALL on every node): the number removed. */
long long mc_remove_all(mc_client *c);
/* Every key this handle may see (a tenant: its own), from every primary
 * (SCAN, its MATCH glob when match is not NULL): *keys gets an array of *n
 * keys, one allocation with their bytes after it, freed by free(*keys)
 * (a key caught on both ends of a slot migration may come twice).
 * For calls that must look at every key (Mooncake's remove_by_regex
 * matches a regular expression the server does not speak): its cost is
 * the keyspace's. MC_OK or MC_ERR_* (then *keys is NULL and *n 0). */
int mc_scan_keys(mc_client *c, const char *match, mc_key **keys, size_t *n);

/* Put sessions (Mooncake's batch_put_session_*: vLLM's layerwise saves):
 * an object reserved at once, written in byte ranges by later calls as its
 * parts become ready, then published whole, or revoked.
 * mc_put_session_start reserves n objects of sizes[i] bytes (one
 * BATCH.PUT.START per node and slot; opts as mc_put): sessions[i] gets a
 * session where results[i] is MC_OK, NULL elsewhere (MC_ERR_EXISTS for a
 * key that is complete or being put, MC_ERR_NOSPACE, ...; MC_ERR_INVALID
 * for all when a key is empty or a size 0). Returns the number started or
 * MC_ERR_*.
 * mc_put_session_write copies, for each item, each range's len bytes at
 * src (inside registered memory, host or device) to dst_off of its
 * session's object, in every replica; results[i] is the item's bytes
 * written or MC_ERR_*. A range outside the object or outside registered
 * memory refuses its item before any byte moves (MC_ERR_INVALID); a
 * transfer that fails marks the session failed (MC_ERR_IO): its end
 * revokes it. The bytes are copied when the call returns.
 * mc_put_session_end publishes each session (BATCH.PUT.END; ranges never
 * written hold zeros, as any put's unwritten bytes do), and
 * mc_put_session_revoke gives its space back; results[i] MC_OK or
 * MC_ERR_*. Both free every session given to them, whatever the result
 * (a session given twice is ended and freed at its first place; its later
 * places answer MC_ERR_INVALID).
 * A session belongs to the handle that started it (the server lets only
 * that connection end a put): another handle gets MC_ERR_INVALID, and once
 * that connection was lost, every call on it MC_ERR_IO (the server gave
 * the put back). mc_put_session_free only frees one (no I/O): a put never
 * ended is given back by the server after put-timeout. */
typedef struct mc_put_session mc_put_session;

typedef struct {
    const void *src;           /* the bytes: inside registered memory */
    uint64_t dst_off;          /* where they go in the object */
    size_t len;
} mc_src_range;

typedef struct {
    mc_put_session *session;
    const mc_src_range *ranges;
    int nranges;               /* 0..MC_MAX_IOV */
} mc_session_ranges;

int mc_put_session_start(mc_client *c, size_t n, const mc_key *keys, const size_t *sizes, const mc_put_opts *opts,
                         mc_put_session **sessions, int *results);
int mc_put_session_write(mc_client *c, size_t n, const mc_session_ranges *items, long long *results);
int mc_put_session_end(mc_client *c, size_t n, mc_put_session *const *sessions, int *results);
int mc_put_session_revoke(mc_client *c, size_t n, mc_put_session *const *sessions, int *results);
void mc_put_session_free(mc_put_session *s);

int mc_exists(mc_client *c, const void *key, size_t keylen);  /* 1, 0 or MC_ERR_* */
int mc_remove(mc_client *c, const void *key, size_t keylen);  /* 1 removed, 0 missing, MC_ERR_* */
const char *mc_strerror(int err);
const char *mc_version(void);  /* "MAJOR.MINOR.PATCH" of the loaded library */

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
