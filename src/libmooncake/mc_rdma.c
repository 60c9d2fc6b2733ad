/* mc_rdma.c -- the RDMA transport of libmooncake.
 *
 * What it does: a segment hosted by a client process is registered on every
 * local NIC (one ibv_mr per protection domain, so one rkey per NIC) and
 * served by a passive listener; a reader or writer elsewhere connects one
 * RC queue pair per (peer, local NIC) and moves bytes with one-sided RDMA
 * READ/WRITE, striped over its NICs. The host side never touches the data
 * path: it takes QPs and that is all, since one-sided operations consume
 * no receive work requests and raise no completions at the target.
 *
 * Why it is shaped so:
 *
 * - libibverbs is loaded with dlopen at the first mcRdmaOpen (the library
 *   MC_VERBS_LIBRARY names, else libibverbs.so.1), not linked: one build
 *   runs on machines with and without RDMA, a process that never asks for
 *   RDMA never loads it, and the tests point it at a fake verbs library
 *   (tests/c/fakeverbs.c) that runs this file unchanged where no machine
 *   has a NIC. Only the header is needed to build: it gives the types, and
 *   ibv_post_send/ibv_poll_cq are its inline calls through the context.
 *
 * - No librdmacm. A QP is connected over a plain TCP connection to the
 *   listener (host:port of the rdma:// endpoint): each side sends one
 *   rdmaWire (QP number, PSN, LID, GID, MTU, READ depth, NIC name), both
 *   walk RESET -> INIT -> RTR -> RTS, and the connection then stays open
 *   for the life of the QP: the host drops its end when the connection
 *   closes, so a reader that exits or dies frees what it held on the host
 *   without any timer. Each QP is bound to its device and port explicitly,
 *   so nothing depends on IP routing picking the right NIC (rdma_cm's
 *   source-address binding did), and one fewer library has to be there.
 *
 * - The rkey the peer must use depends on which of the host's NICs took
 *   the QP (an rkey is valid only in its own PD). The requester asks for
 *   one (its path's index, modulo the host's NIC count, so a striped
 *   transfer spreads over the host's NICs too) and the host's answer names
 *   it; the requester looks that name up in the segment's RKEY text. A
 *   bare-hex RKEY is taken to be valid on any NIC.
 *
 * - RoCE ports are addressed by GID (MC_RDMA_GID_INDEX, else the last
 *   IPv4-mapped GID of the first 16: the RoCE v2 one), InfiniBand ports by
 *   LID.
 *
 * - Paths that fail to connect are remembered for RDMA_RETRY_MS so that a
 *   dead NIC costs one timeout now and then, not one per transfer. A QP
 *   that completed a work request in error is torn down at the end of the
 *   transfer and reconnected on the next one; its failed slice is retried
 *   once on another path. One whose peer stopped answering while the other
 *   paths worked, two transfers in a row, is left out for RDMA_RETRY_MS
 *   too (a dead link fails a request only after the transport's retries),
 *   unless the others cannot carry a transfer without it.
 *
 * - Device memory (GPUDirect) is registered the first way the platform
 *   allows (mcRdmaGdrChoose): a dmabuf of the range (ibv_reg_dmabuf_mr),
 *   peer memory (ibv_reg_mr of the device pointer, nvidia_peermem), or not
 *   at all, in which case mc_xfer.c stages it through host memory. The
 *   decision is a plain function so that it is tested without a GPU.
 *
 * - One mutex covers the engine (regions, connection cache, CQ polling)
 *   and is held for a whole transfer. Transfers on one engine therefore run
 *   one at a time; mooncake.c serialises calls per handle anyway, and
 *   parallelism comes from one handle per thread. The listener thread only
 *   reads the device table (fixed after open) and owns its list of accepted
 *   connections, so it takes no lock.
 *
 * - Nothing is returned while work requests are still in flight: on a
 *   timeout the QPs concerned are destroyed first, which guarantees the NIC
 *   no longer DMAs into the caller's buffer.
 *
 * The descriptor parser, NIC ordering and striping plan are plain functions
 * compiled in every build so that tests/c/test_rdma.c checks them on
 * machines without RDMA hardware. Built without MC_HAVE_RDMA (no verbs
 * header) the engine's entry points answer MC_ERR_UNSUPPORTED, saying so. */

#include "mc_rdma.h"
#include "mooncake.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MC_RDMA_DEFAULT_CHUNK (UINT64_C(1) << 20)
/* Below this a slice costs more in work-request overhead than it gains in
 * parallel bandwidth, so small transfers are not spread over every NIC. */
#define MC_RDMA_MIN_SLICE (UINT64_C(64) << 10)

static void setErr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void setErr(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------
 * Descriptors, NIC order, striping: no device needed.
 * ------------------------------------------------------------------------ */

/* Exactly n chars of hex (optional 0x) that fit in 32 bits. */
static int parseHex32(const char *s, size_t n, uint32_t *out) {
    uint32_t v = 0;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2, n -= 2;
    if (n == 0 || n > 8) return -1;
    for (size_t i = 0; i < n; i++) {
        int c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

static int parseKeys(mcRdmaDesc *d, const char *rkeys, char *err, size_t errlen) {
    const char *s = rkeys;

    if (rkeys == NULL || rkeys[0] == '\0') {
        setErr(err, errlen, "missing rkey");
        return -1;
    }
    if (strchr(rkeys, ':') == NULL) {
        if (parseHex32(rkeys, strlen(rkeys), &d->rkey[0]) != 0) {
            setErr(err, errlen, "bad rkey '%s' (want hex or nic:hex,...)", rkeys);
            return -1;
        }
        d->nkeys = 1; /* nic[0] stays "": valid on any NIC */
        return 0;
    }
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        const char *colon = memchr(s, ':', n);
        size_t nlen = colon ? (size_t)(colon - s) : 0;

        if (colon == NULL || nlen == 0) {
            setErr(err, errlen, "rkey entry '%.*s' is not nic:hex", (int)n, s);
            return -1;
        }
        if (nlen >= sizeof(d->nic[0])) {
            setErr(err, errlen, "NIC name '%.*s' too long", (int)nlen, s);
            return -1;
        }
        if (d->nkeys == MC_RDMA_MAX_NICS) {
            setErr(err, errlen, "more than %d rkeys", MC_RDMA_MAX_NICS);
            return -1;
        }
        if (parseHex32(colon + 1, n - nlen - 1, &d->rkey[d->nkeys]) != 0) {
            setErr(err, errlen, "bad rkey '%.*s' for NIC %.*s (want hex)", (int)(n - nlen - 1),
                   colon + 1, (int)nlen, s);
            return -1;
        }
        memcpy(d->nic[d->nkeys], s, nlen);
        d->nic[d->nkeys][nlen] = '\0';
        for (int i = 0; i < d->nkeys; i++) {
            if (strcmp(d->nic[i], d->nic[d->nkeys]) == 0) {
                setErr(err, errlen, "rkey for NIC %s given twice", d->nic[i]);
                return -1;
            }
        }
        d->nkeys++;
        if (comma == NULL) return 0;
        s = comma + 1;
    }
}

int mcRdmaDescParse(mcRdmaDesc *d, const char *endpoint, uint64_t base, const char *rkeys,
                    char *err, size_t errlen) {
    const char *h, *hend, *p;
    long port = 0;

    memset(d, 0, sizeof(*d));
    if (endpoint == NULL || strncmp(endpoint, "rdma://", 7) != 0) {
        setErr(err, errlen, "endpoint '%s' is not rdma://host:port", endpoint ? endpoint : "");
        return -1;
    }
    h = endpoint + 7;
    if (*h == '[') {
        if ((hend = strchr(++h, ']')) == NULL) {
            setErr(err, errlen, "endpoint '%s': no ']' after the IPv6 address", endpoint);
            return -1;
        }
        p = hend + 1;
    } else {
        hend = h + strcspn(h, ":");
        p = hend;
        if (*p == ':' && strchr(p + 1, ':') != NULL) {
            setErr(err, errlen, "endpoint '%s': an IPv6 address needs [brackets]", endpoint);
            return -1;
        }
    }
    if (hend == h) {
        setErr(err, errlen, "endpoint '%s': empty host", endpoint);
        return -1;
    }
    if ((size_t)(hend - h) >= sizeof(d->host)) {
        setErr(err, errlen, "endpoint '%s': host too long", endpoint);
        return -1;
    }
    if (p[0] != ':' || p[1] == '\0') {
        setErr(err, errlen, "endpoint '%s': missing port", endpoint);
        return -1;
    }
    for (p++; *p; p++) {
        if (*p < '0' || *p > '9') {
            setErr(err, errlen, "endpoint '%s': port is not a number", endpoint);
            return -1;
        }
        if (port <= 65535) port = port * 10 + (*p - '0'); /* stop growing: no overflow */
    }
    if (port < 1 || port > 65535) {
        setErr(err, errlen, "endpoint '%s': port out of range 1..65535", endpoint);
        return -1;
    }
    memcpy(d->host, h, (size_t)(hend - h));
    d->port = (int)port;
    d->base = base;
    if (parseKeys(d, rkeys, err, errlen) != 0) {
        memset(d, 0, sizeof(*d)); /* a failed parse leaves nothing usable */
        return -1;
    }
    return 0;
}

int mcRdmaDescFormatKeys(const mcRdmaDesc *d, char *buf, size_t cap) {
    size_t used = 0;

    if (buf == NULL || cap == 0) return -1;
    buf[0] = '\0';
    for (int i = 0; i < d->nkeys; i++) {
        int n;
        if (d->nic[i][0] == '\0')
            n = snprintf(buf + used, cap - used, "%s%x", i ? "," : "", (unsigned)d->rkey[i]);
        else
            n = snprintf(buf + used, cap - used, "%s%s:%x", i ? "," : "", d->nic[i],
                         (unsigned)d->rkey[i]);
        if (n < 0 || (size_t)n >= cap - used) return -1;
        used += (size_t)n;
    }
    return (int)used;
}

/* Strict "a goes before b": keeps the insertion sort stable. */
static int nicBefore(const mcRdmaNic *a, const mcRdmaNic *b, int numa) {
    if (!a->active != !b->active) return a->active != 0;
    if (numa >= 0 && (a->numa_node == numa) != (b->numa_node == numa))
        return a->numa_node == numa;
    return strcmp(a->name, b->name) < 0;
}

/* order[] receives all n indices; the first `usable` (returned) are the
 * active ports, the inactive ones follow so a caller may still name them. */
int mcRdmaOrderNics(const mcRdmaNic *nics, int n, int numa_node, int *order) {
    int usable = 0;

    for (int i = 0; i < n; i++) {
        int j = i;
        order[i] = i;
        usable += nics[i].active != 0;
        for (; j > 0 && nicBefore(&nics[order[j]], &nics[order[j - 1]], numa_node); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    }
    return usable;
}

/* Equal slices rather than full chunks plus a runt: with k slices of len/k
 * (or one byte more) dealt round robin, NIC shares differ by at most one
 * slice, which is at most one chunk. */
int mcRdmaStripe(uint64_t len, int nnics, uint64_t chunk, mcRdmaSlice *out, int cap) {
    uint64_t k, spread, size, extra, off = 0;

    if (nnics <= 0 || cap < 0) return -1;
    if (len == 0) return 0;
    if (chunk == 0) chunk = MC_RDMA_DEFAULT_CHUNK;
    k = len / chunk + (len % chunk != 0);
    spread = len / MC_RDMA_MIN_SLICE;
    if (spread > (uint64_t)nnics) spread = (uint64_t)nnics;
    if (k < spread) k = spread;
    if (k > (uint64_t)cap) return -1;
    size = len / k;
    extra = len % k;
    for (uint64_t i = 0; i < k; i++) {
        out[i].offset = off;
        out[i].len = size + (i < extra);
        out[i].nic = (int)(i % (uint64_t)nnics);
        off += out[i].len;
    }
    return (int)k;
}

/* Device memory (GPUDirect RDMA): the first way the platform allows. A
 * dmabuf (the GPU driver exports the range as a file descriptor and the
 * NIC registers that: ibv_reg_dmabuf_mr, upstream kernels, no extra module)
 * is preferred over peer memory (ibv_reg_mr of the device pointer itself,
 * which only works with nvidia_peermem loaded); with neither the memory is
 * not registered and its transfers are staged through host memory. */
int mcRdmaGdrChoose(const char *policy, int dmabuf_ok, int peermem_ok) {
    int any = policy == NULL || policy[0] == '\0' || strcmp(policy, "auto") == 0;
    if (policy && strcmp(policy, "off") == 0) return MC_RDMA_REG_NONE;
    if (dmabuf_ok && (any || strcmp(policy, "dmabuf") == 0)) return MC_RDMA_REG_DMABUF;
    if (peermem_ok && (any || strcmp(policy, "peermem") == 0)) return MC_RDMA_REG_PEERMEM;
    return MC_RDMA_REG_NONE;
}

const char *mcRdmaRegName(int mode) {
    switch (mode) {
    case MC_RDMA_REG_HOST: return "host";
    case MC_RDMA_REG_DMABUF: return "dmabuf";
    case MC_RDMA_REG_PEERMEM: return "peermem";
    default: return "staged";
    }
}

/* The dmabuf of a device range, from the CUDA driver
 * (cuMemGetHandleForAddressRange, CUDA >= 11.7 on a kernel and driver with
 * dmabuf support). The driver library is loaded here, apart from the CUDA
 * runtime glue (mc_cuda.c), because only this registration needs it:
 * MC_CUDA_DRIVER_LIBRARY names it, default libcuda.so.1. The range is
 * widened to host pages as the call requires; *off is where addr falls in
 * the dmabuf. Returns the fd (the caller closes it) or -1 with a reason. */
int mcRdmaCudaDmabuf(const void *addr, size_t len, uint64_t *off, char *why, size_t whylen) {
    typedef int (*getHandleFn)(void *handle, unsigned long long dptr, size_t size, int type,
                               unsigned long long flags);
    static void *lib;
    static getHandleFn getHandle;
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    static char loaderr[256];
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), a = (uint64_t)(uintptr_t)addr, lo, hi;
    int fd = -1, rc;

    pthread_mutex_lock(&once);
    if (lib == NULL && loaderr[0] == '\0') {
        const char *name = getenv("MC_CUDA_DRIVER_LIBRARY");
        if (name == NULL || *name == '\0') name = "libcuda.so.1";
        if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) == NULL) {
            snprintf(loaderr, sizeof(loaderr), "no dmabuf: cannot load %s", name);
        } else {
            void *f = dlsym(lib, "cuMemGetHandleForAddressRange");
            memcpy(&getHandle, &f, sizeof(f));
            if (getHandle == NULL) snprintf(loaderr, sizeof(loaderr), "no dmabuf: %s predates CUDA 11.7", name);
        }
    }
    pthread_mutex_unlock(&once);
    if (getHandle == NULL) {
        setErr(why, whylen, "%s", loaderr);
        return -1;
    }
    lo = a & ~(page - 1);
    hi = (a + len + page - 1) & ~(page - 1);
    /* 1: CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */
    if ((rc = getHandle(&fd, lo, (size_t)(hi - lo), 1, 0)) != 0 || fd < 0) {
        setErr(why, whylen, "no dmabuf: cuMemGetHandleForAddressRange returned %d", rc);
        return -1;
    }
    *off = a - lo;
    return fd;
}

#ifdef MC_HAVE_RDMA
/* ---------------------------------------------------------------------------
 * The engine.
 * ------------------------------------------------------------------------ */

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <numaif.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDMA_CHUNK (UINT64_C(4) << 20)
#define RDMA_DEPTH 32              /* signaled WRs in flight per QP */
#define RDMA_CONNECT_TIMEOUT_MS 2000 /* TCP connect and the QP exchange */
#define RDMA_IDLE_TIMEOUT_MS 10000 /* a transfer with no completion this long fails */
#define RDMA_RETRY_MS 5000         /* a path that failed to connect rests this long */
#define RDMA_RD_ATOM 16            /* outstanding READs we ask for per QP */
#define RDMA_MAX_PEERS 1024        /* QPs one listener serves at once */
#define MC_RDMA_HELLO "MCR2"

/* ---- libibverbs, loaded at first use --------------------------------------
 * The header gives the types; every entry point is looked up with dlsym, so
 * libmooncake never links -libverbs. ibv_post_send and ibv_poll_cq are the
 * header's inline calls through the context's ops table and need no symbol. */
typedef struct verbsApi {
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd,
                                    int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch,
                                int vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    const char *(*wc_status_str)(enum ibv_wc_status status);
} verbsApi;

static verbsApi V;
static pthread_once_t verbs_once = PTHREAD_ONCE_INIT;
static char verbs_err[384]; /* stays empty once loaded */

static void verbsLoad(void) {
    static const struct {
        const char *name;
        size_t off;
        int optional; /* ibv_reg_dmabuf_mr: rdma-core >= 34 */
    } sym[] = {
        {"ibv_get_device_list", offsetof(verbsApi, get_device_list), 0},
        {"ibv_free_device_list", offsetof(verbsApi, free_device_list), 0},
        {"ibv_get_device_name", offsetof(verbsApi, get_device_name), 0},
        {"ibv_open_device", offsetof(verbsApi, open_device), 0},
        {"ibv_close_device", offsetof(verbsApi, close_device), 0},
        {"ibv_query_device", offsetof(verbsApi, query_device), 0},
        {"ibv_query_port", offsetof(verbsApi, query_port), 0},
        {"ibv_query_gid", offsetof(verbsApi, query_gid), 0},
        {"ibv_alloc_pd", offsetof(verbsApi, alloc_pd), 0},
        {"ibv_dealloc_pd", offsetof(verbsApi, dealloc_pd), 0},
        {"ibv_reg_mr", offsetof(verbsApi, reg_mr), 0},
        {"ibv_reg_dmabuf_mr", offsetof(verbsApi, reg_dmabuf_mr), 1},
        {"ibv_dereg_mr", offsetof(verbsApi, dereg_mr), 0},
        {"ibv_create_cq", offsetof(verbsApi, create_cq), 0},
        {"ibv_destroy_cq", offsetof(verbsApi, destroy_cq), 0},
        {"ibv_create_qp", offsetof(verbsApi, create_qp), 0},
        {"ibv_modify_qp", offsetof(verbsApi, modify_qp), 0},
        {"ibv_destroy_qp", offsetof(verbsApi, destroy_qp), 0},
        {"ibv_wc_status_str", offsetof(verbsApi, wc_status_str), 0},
    };
    const char *lib = getenv("MC_VERBS_LIBRARY");
    verbsApi api;
    void *h;

    if (lib == NULL || lib[0] == '\0') lib = "libibverbs.so.1";
    if ((h = dlopen(lib, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(verbs_err, sizeof(verbs_err), "cannot load %s: %s", lib, dlerror());
        return;
    }
    memset(&api, 0, sizeof(api));
    for (size_t i = 0; i < sizeof(sym) / sizeof(sym[0]); i++) {
        void *f = dlsym(h, sym[i].name);
        if (f == NULL && !sym[i].optional) {
            snprintf(verbs_err, sizeof(verbs_err), "%s has no %s", lib, sym[i].name);
            dlclose(h);
            return;
        }
        memcpy((char *)&api + sym[i].off, &f, sizeof(f)); /* object to function pointer */
    }
    V = api; /* the handle stays open for the life of the process */
}

typedef struct rdmaDev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    int rd_atom, init_rd_atom, max_qp_wr;
    int port, eth, gid_index;
    uint16_t lid;
    enum ibv_mtu mtu;
    union ibv_gid gid;
} rdmaDev;

typedef struct rdmaRegion {
    char *addr;
    size_t len;
    int numa;                             /* node of the first page, -1 unknown */
    int mode;                             /* MC_RDMA_REG_* */
    int refs;                             /* registrations of it (regionAdd) */
    struct ibv_mr *mr[MC_RDMA_MAX_NICS];  /* by device index; NULL: port inactive */
    struct rdmaRegion *next;
} rdmaRegion;

/* Active side: one RC QP to a host through one local NIC, plus the TCP
 * connection its QP was exchanged on. The host keeps its end of the QP as
 * long as that connection stays open, so closing it is the disconnect. A
 * struct with qp == NULL is a path that is down: reconnected once the clock
 * passes down_until. */
typedef struct rdmaConn {
    char host[256];
    int port, dev, fd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    char peer_nic[64];  /* the host's NIC that took the QP: selects the rkey */
    long long down_until;
    int inflight, broken;
    int carried;       /* this transfer: requests completed fine */
    int unresponsive;  /* this transfer: the peer did not answer (retries exceeded) */
    long long shun_until; /* left out of transfers until then, while others work */
    int strikes;          /* transfers in a row in which it alone did not answer */
    struct rdmaConn *next;
} rdmaConn;

/* Passive side: one accepted QP and its TCP connection; before the QP,
 * the request being read (got bytes of req so far, until deadline). */
typedef struct rdmaPeer {
    int fd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    size_t got;
    long long deadline;
    unsigned char req[100]; /* an rdmaWire */
    struct rdmaPeer *next;
} rdmaPeer;

/* What each side tells the other to connect an RC QP, sent as it is over
 * the TCP connection (both ends run this code: same layout). */
typedef struct rdmaWire {
    char magic[4];    /* MC_RDMA_HELLO */
    char nic[64];     /* the sender's NIC */
    uint32_t qpn;     /* network order */
    uint32_t psn;     /* network order */
    uint16_t lid;     /* network order */
    uint8_t mtu;      /* enum ibv_mtu of the sender's port */
    uint8_t rd_atom;  /* READs the sender serves at once as responder */
    uint8_t gid[16];
    uint8_t want;     /* request: which of the host's NICs (index mod its count) */
    uint8_t eth;      /* the sender's port is Ethernet (RoCE): address by GID */
    uint8_t pad[2];
} rdmaWire;
_Static_assert(sizeof(rdmaWire) == 100, "rdmaWire is sent as it is");
_Static_assert(sizeof(((rdmaPeer *)0)->req) == sizeof(rdmaWire), "a peer's request is one rdmaWire");

struct mcRdma {
    pthread_mutex_t lock;
    int ndev, nactive;
    rdmaDev dev[MC_RDMA_MAX_NICS];
    mcRdmaNic nic[MC_RDMA_MAX_NICS];
    int order[MC_RDMA_MAX_NICS];  /* active first, by name: the RKEY text order */
    rdmaRegion *regions;
    rdmaConn *conns;
    /* Listener; lfd >= 0 once listening. */
    int lfd, lport, stopfd[2], lthread_up;
    pthread_t lthread;
    rdmaPeer *peers;  /* owned by the listener thread */
    int npeers;
};

static long long nowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int imin(int a, int b) { return a < b ? a : b; }

static uint32_t newPsn(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint32_t)ts.tv_nsec ^ (uint32_t)getpid() * 2654435761u) & 0xffffff;
}

/* <ibdev_path>/device/numa_node: /sys/class/infiniband/<name>/... */
static int readNuma(const char *ibdev_path) {
    char path[512];
    int node = -1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/device/numa_node", ibdev_path);
    if ((f = fopen(path, "r")) == NULL) return -1;
    if (fscanf(f, "%d", &node) != 1) node = -1;
    fclose(f);
    return node;
}

/* The GID a RoCE port is addressed by: MC_RDMA_GID_INDEX if set, else the
 * last IPv4-mapped one of the first 16 (drivers list RoCE v1 then v2 for an
 * address, and v2 is the routable one), else the first nonzero. InfiniBand
 * ports are addressed by LID and use index 0. */
static void pickGid(rdmaDev *d, int tbl_len) {
    const char *env = getenv("MC_RDMA_GID_INDEX");
    int first = -1, v4 = -1;

    d->gid_index = 0;
    if (env && *env) {
        d->gid_index = atoi(env);
    } else if (d->eth) {
        for (int i = 0; i < imin(tbl_len, 16); i++) {
            union ibv_gid g;
            static const uint8_t zero[16], pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (V.query_gid(d->ctx, (uint8_t)d->port, i, &g) != 0 || memcmp(g.raw, zero, 16) == 0) continue;
            if (first < 0) first = i;
            if (memcmp(g.raw, pfx, 12) == 0) v4 = i;
        }
        d->gid_index = v4 >= 0 ? v4 : first >= 0 ? first : 0;
    }
    if (V.query_gid(d->ctx, (uint8_t)d->port, d->gid_index, &d->gid) != 0) memset(&d->gid, 0, sizeof(d->gid));
}

mcRdma *mcRdmaOpen(char *err, size_t errlen) {
    struct ibv_device **list = NULL;
    mcRdma *r = NULL;
    int n = 0;

    pthread_once(&verbs_once, verbsLoad);
    if (verbs_err[0]) {
        setErr(err, errlen, "%s", verbs_err);
        return NULL;
    }
    list = V.get_device_list(&n);
    if (list == NULL || n == 0) {
        setErr(err, errlen, "no RDMA device found (ibv_get_device_list returned none%s%s)",
               list ? "" : ": ", list ? "" : strerror(errno));
        goto err;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        setErr(err, errlen, "out of memory");
        goto err;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->lfd = r->stopfd[0] = r->stopfd[1] = -1;
    for (int i = 0; i < n && r->ndev < MC_RDMA_MAX_NICS; i++) {
        struct ibv_context *c = V.open_device(list[i]);
        struct ibv_device_attr da;
        rdmaDev *d = &r->dev[r->ndev];
        mcRdmaNic *nic = &r->nic[r->ndev];

        if (c == NULL) continue;
        if (V.query_device(c, &da) != 0 || (d->pd = V.alloc_pd(c)) == NULL) {
            V.close_device(c);
            continue;
        }
        d->ctx = c;
        d->rd_atom = imin(da.max_qp_rd_atom, RDMA_RD_ATOM);
        d->init_rd_atom = imin(da.max_qp_init_rd_atom, RDMA_RD_ATOM);
        d->max_qp_wr = da.max_qp_wr;
        snprintf(nic->name, sizeof(nic->name), "%s", V.get_device_name(list[i]));
        nic->numa_node = readNuma(list[i]->ibdev_path);
        nic->port = 1;
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            memset(&pa, 0, sizeof(pa)); /* the library fills its older, shorter layout */
            if (V.query_port(c, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
                nic->port = d->port = p;
                nic->active = d->max_qp_wr >= RDMA_DEPTH && d->rd_atom > 0 && d->init_rd_atom > 0;
                d->lid = pa.lid;
                d->mtu = pa.active_mtu;
                d->eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
                pickGid(d, pa.gid_tbl_len);
                break;
            }
        }
        r->ndev++;
    }
    r->nactive = mcRdmaOrderNics(r->nic, r->ndev, -1, r->order);
    if (r->nactive == 0) {
        setErr(err, errlen, "%d RDMA device(s) but no usable ACTIVE port (see ibv_devinfo)", n);
        goto err;
    }
    V.free_device_list(list); /* open contexts outlive the list */
    return r;

err:
    if (list) V.free_device_list(list);
    mcRdmaClose(r);
    return NULL;
}

int mcRdmaNics(const mcRdma *r, mcRdmaNic *out, int cap) {
    int n = 0;
    if (r == NULL) return 0;
    for (; n < r->ndev && n < cap; n++) out[n] = r->nic[n];
    return n;
}

/* ---- connecting a QP over TCP ------------------------------------------- */

static int ioAll(int fd, void *buf, size_t len, int write) {
    char *p = buf;
    while (len) {
        ssize_t k = write ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ECONNRESET;
            return -1;
        }
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Blocking with a deadline: the exchange is two small messages. */
static void sockTimeouts(int fd, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int tcpConnect(const char *host, int port, char *err, size_t errlen) {
    struct addrinfo hints, *ai = NULL, *a;
    char pbuf[16];
    int fd = -1, gerr;

    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = AI_NUMERICSERV;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(pbuf, sizeof(pbuf), "%d", port);
    if ((gerr = getaddrinfo(host, pbuf, &hints, &ai)) != 0) {
        setErr(err, errlen, "%s: %s", host, gai_strerror(gerr));
        return -1;
    }
    for (a = ai; a; a = a->ai_next) {
        struct pollfd pfd;
        int soerr = 0, n;
        socklen_t sl = sizeof(soerr);

        if ((fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) goto next;
        pfd.fd = fd;
        pfd.events = POLLOUT;
        do n = poll(&pfd, 1, RDMA_CONNECT_TIMEOUT_MS);
        while (n < 0 && errno == EINTR);
        if (n <= 0) {
            errno = ETIMEDOUT;
            goto next;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            errno = soerr ? soerr : errno;
            goto next;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        sockTimeouts(fd, RDMA_CONNECT_TIMEOUT_MS);
        break;
    next:
        setErr(err, errlen, "connect %s:%d: %s", host, port, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static struct ibv_qp *qpCreate(rdmaDev *d, struct ibv_cq *cq, int depth) {
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = (uint32_t)depth;
    qa.cap.max_recv_wr = 1; /* RC needs a receive queue even if never used */
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    return V.create_qp(d->pd, &qa);
}

static void wireFill(rdmaWire *w, const mcRdma *r, int di, const struct ibv_qp *qp, uint32_t psn, int want) {
    const rdmaDev *d = &r->dev[di];
    memset(w, 0, sizeof(*w));
    memcpy(w->magic, MC_RDMA_HELLO, 4);
    memcpy(w->nic, r->nic[di].name, sizeof(w->nic));
    w->qpn = htonl(qp->qp_num);
    w->psn = htonl(psn);
    w->lid = htons(d->lid);
    w->mtu = (uint8_t)d->mtu;
    w->rd_atom = (uint8_t)d->rd_atom;
    memcpy(w->gid, d->gid.raw, 16);
    w->want = (uint8_t)want;
    w->eth = (uint8_t)d->eth;
}

/* RESET -> INIT -> RTR -> RTS against what the peer sent. */
static int qpConnect(rdmaDev *d, struct ibv_qp *qp, uint32_t psn, const rdmaWire *peer, char *err,
                     size_t errlen) {
    struct ibv_qp_attr a;

    if (memcmp(peer->magic, MC_RDMA_HELLO, 4) != 0 || peer->rd_atom == 0 || peer->mtu < IBV_MTU_256 ||
        peer->mtu > IBV_MTU_4096) {
        setErr(err, errlen, "the peer is not a mooncake RDMA endpoint");
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = (uint8_t)d->port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        setErr(err, errlen, "QP to INIT: %s", strerror(errno));
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = peer->mtu < d->mtu ? (enum ibv_mtu)peer->mtu : d->mtu;
    a.dest_qp_num = ntohl(peer->qpn);
    a.rq_psn = ntohl(peer->psn);
    a.max_dest_rd_atomic = (uint8_t)d->rd_atom;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)d->port;
    a.ah_attr.dlid = ntohs(peer->lid);
    if (d->eth || peer->eth) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    if (V.modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        setErr(err, errlen, "QP to RTR: %s", strerror(errno));
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = psn;
    a.max_rd_atomic = (uint8_t)imin(d->init_rd_atom, peer->rd_atom);
    if (V.modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        setErr(err, errlen, "QP to RTS: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Frees what a connection holds, keeping the struct as a "down" marker. */
static void connReset(rdmaConn *c) {
    if (c->qp) V.destroy_qp(c->qp);
    if (c->cq) V.destroy_cq(c->cq);
    if (c->fd >= 0) close(c->fd); /* the host drops its end of the QP */
    c->qp = NULL;
    c->cq = NULL;
    c->fd = -1;
    c->broken = c->inflight = 0;
}

static void peerFree(rdmaPeer *p) {
    if (p->qp) V.destroy_qp(p->qp);
    if (p->cq) V.destroy_cq(p->cq);
    if (p->fd >= 0) close(p->fd);
    free(p);
}

void mcRdmaClose(mcRdma *r) {
    if (r == NULL) return;
    if (r->lthread_up) {
        ssize_t w = write(r->stopfd[1], "x", 1);
        (void)w; /* a full pipe also wakes the thread */
        pthread_join(r->lthread, NULL);
    }
    while (r->peers) {
        rdmaPeer *p = r->peers;
        r->peers = p->next;
        peerFree(p);
    }
    if (r->lfd >= 0) close(r->lfd);
    for (int i = 0; i < 2; i++)
        if (r->stopfd[i] >= 0) close(r->stopfd[i]);
    while (r->conns) {
        rdmaConn *c = r->conns;
        r->conns = c->next;
        connReset(c);
        free(c);
    }
    while (r->regions) {
        rdmaRegion *g = r->regions;
        r->regions = g->next;
        for (int i = 0; i < r->ndev; i++)
            if (g->mr[i]) V.dereg_mr(g->mr[i]);
        free(g);
    }
    for (int i = 0; i < r->ndev; i++) {
        V.dealloc_pd(r->dev[i].pd);
        V.close_device(r->dev[i].ctx);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* ---- registration ------------------------------------------------------- */

/* Registers [addr, addr+len) on every active NIC the way mode says (host
 * memory or a device pointer: ibv_reg_mr; a dmabuf: ibv_reg_dmabuf_mr of fd
 * at fd_off, addressed by addr). */
static int regionAdd(mcRdma *r, void *addr, size_t len, int mode, int fd, uint64_t fd_off, char *rkeys,
                     size_t rkeys_cap) {
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    rdmaRegion *g;
    mcRdmaDesc d;
    int rc = MC_ERR_IO, node = -1, saved = 0;

    if (r == NULL || addr == NULL || len == 0) return MC_ERR_INVALID;
    if ((g = calloc(1, sizeof(*g))) == NULL) return MC_ERR_NOMEM;
    memset(&d, 0, sizeof(d));
    pthread_mutex_lock(&r->lock);
    for (rdmaRegion *e = r->regions; e; e = e->next) {
        if (e->addr != addr) continue;
        /* Host memory registered already (mc_register, then mc_mount_buffer
         * of the same buffer, or the other way round): the registration is
         * shared and counted, so each side sees it, and the first to let go
         * takes none from the other. Refused, the mount had no rdma://
         * endpoint, and its unmount deregistered the memory under the
         * handle's region, whose transfers then failed ("local buffer is
         * not inside a registered region"; found by the fakedev audit). */
        rc = MC_ERR_EXISTS;
        if (mode != MC_RDMA_REG_HOST || e->mode != mode || len > e->len) goto err;
        for (int i = 0; i < r->nactive; i++) {
            int di = r->order[i];
            memcpy(d.nic[d.nkeys], r->nic[di].name, sizeof(d.nic[0]));
            d.rkey[d.nkeys++] = e->mr[di]->rkey;
        }
        rc = MC_ERR_TOO_SMALL;
        if (rkeys && mcRdmaDescFormatKeys(&d, rkeys, rkeys_cap) < 0) goto err;
        e->refs++;
        free(g);
        pthread_mutex_unlock(&r->lock);
        return MC_OK;
    }
    g->refs = 1;
    g->addr = addr;
    g->len = len;
    g->mode = mode;
    for (int i = 0; i < r->nactive; i++) {
        int di = r->order[i];
        if (mode == MC_RDMA_REG_DMABUF)
            g->mr[di] = V.reg_dmabuf_mr(r->dev[di].pd, fd_off, len, (uint64_t)(uintptr_t)addr, fd, access);
        else
            g->mr[di] = V.reg_mr(r->dev[di].pd, addr, len, access);
        if (g->mr[di] == NULL) {
            /* ENOMEM here is mostly RLIMIT_MEMLOCK, not the heap. */
            saved = errno;
            rc = errno == ENOMEM ? MC_ERR_NOMEM : errno == EOPNOTSUPP || errno == EINVAL ? MC_ERR_UNSUPPORTED
                                                                                         : MC_ERR_IO;
            goto err;
        }
        memcpy(d.nic[d.nkeys], r->nic[di].name, sizeof(d.nic[0]));
        d.rkey[d.nkeys++] = g->mr[di]->rkey;
    }
    if (rkeys && mcRdmaDescFormatKeys(&d, rkeys, rkeys_cap) < 0) {
        rc = MC_ERR_TOO_SMALL;
        goto err;
    }
    /* After registration host pages are pinned, so asking where the first
     * one lives does not fault it in somewhere arbitrary. */
    if (mode != MC_RDMA_REG_HOST || get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0)
        node = -1;
    g->numa = node;
    g->next = r->regions;
    r->regions = g;
    pthread_mutex_unlock(&r->lock);
    return MC_OK;

err:
    for (int i = 0; i < r->ndev; i++)
        if (g->mr[i]) V.dereg_mr(g->mr[i]);
    free(g);
    pthread_mutex_unlock(&r->lock);
    errno = saved; /* the registration's own reason, for the caller to say */
    return rc;
}

int mcRdmaRegister(mcRdma *r, void *addr, size_t len, char *rkeys, size_t rkeys_cap) {
    return regionAdd(r, addr, len, MC_RDMA_REG_HOST, -1, 0, rkeys, rkeys_cap);
}

int mcRdmaRegisterDevice(mcRdma *r, void *addr, size_t len, int dmabuf_fd, uint64_t dmabuf_off,
                         const char *policy, char *rkeys, size_t rkeys_cap, char *why, size_t whylen) {
    int dmabuf_ok = dmabuf_fd >= 0 && r && V.reg_dmabuf_mr != NULL;
    int peermem_ok = (policy && strcmp(policy, "peermem") == 0) || access("/sys/module/nvidia_peermem", F_OK) == 0 ||
                     access("/sys/module/nv_peer_mem", F_OK) == 0;
    int mode = mcRdmaGdrChoose(policy, dmabuf_ok, peermem_ok), rc;

    if (r == NULL) {
        setErr(why, whylen, "no RDMA engine");
        return MC_RDMA_REG_NONE;
    }
    if (mode == MC_RDMA_REG_DMABUF) {
        if ((rc = regionAdd(r, addr, len, mode, dmabuf_fd, dmabuf_off, rkeys, rkeys_cap)) == MC_OK) {
            setErr(why, whylen, "the NIC registered the GPU memory's dmabuf");
            return mode;
        }
        setErr(why, whylen, "the NIC refused the dmabuf (ibv_reg_dmabuf_mr: %s)", strerror(errno));
        mode = mcRdmaGdrChoose(policy, 0, peermem_ok);
    }
    if (mode == MC_RDMA_REG_PEERMEM) {
        if ((rc = regionAdd(r, addr, len, mode, -1, 0, rkeys, rkeys_cap)) == MC_OK) {
            setErr(why, whylen, "the NIC registered the device pointer (peer memory)");
            return mode;
        }
        setErr(why, whylen, "the NIC refused the device pointer (ibv_reg_mr: %s; is nvidia_peermem loaded?)",
               strerror(errno));
        return MC_RDMA_REG_NONE;
    }
    if (mode == MC_RDMA_REG_NONE && why && (why[0] == '\0' || !dmabuf_ok))
        setErr(why, whylen, "%s", policy && strcmp(policy, "off") == 0 ? "MC_GPUDIRECT=off"
                                  : dmabuf_fd < 0 ? "no dmabuf for the range and no peer memory module"
                                  : "the verbs library has no ibv_reg_dmabuf_mr and no peer memory module");
    return MC_RDMA_REG_NONE;
}

int mcRdmaUnregister(mcRdma *r, void *addr) {
    rdmaRegion **pp, *g;

    if (r == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&r->lock);
    for (pp = &r->regions; (g = *pp) != NULL; pp = &g->next)
        if (g->addr == addr) break;
    if (g && --g->refs > 0) {
        pthread_mutex_unlock(&r->lock);
        return MC_OK; /* registered again by another: still theirs */
    }
    if (g) *pp = g->next;
    pthread_mutex_unlock(&r->lock);
    if (g == NULL) return MC_ERR_NOT_FOUND;
    for (int i = 0; i < r->ndev; i++)
        if (g->mr[i]) V.dereg_mr(g->mr[i]);
    free(g);
    return MC_OK;
}

/* ---- the passive side ----------------------------------------------------- */

/* A peer's QP description read whole (p->req): gives it a QP of ours in
 * the PD its rkeys name and answers with ours. 0 if refused. */
static int peerAccept(mcRdma *r, rdmaPeer *p) {
    rdmaWire req, rep;
    uint32_t psn = newPsn();
    char err[128];
    int di;

    memcpy(&req, p->req, sizeof(req));
    di = r->order[req.want % r->nactive]; /* a client's paths spread over our NICs */
    if ((p->cq = V.create_cq(r->dev[di].ctx, 2, NULL, NULL, 0)) == NULL) return 0;
    if ((p->qp = qpCreate(&r->dev[di], p->cq, 1)) == NULL) return 0;
    if (qpConnect(&r->dev[di], p->qp, psn, &req, err, sizeof(err)) != 0) return 0;
    wireFill(&rep, r, di, p->qp, psn, 0);
    /* 100 bytes into a socket that has sent nothing yet: they fit its
     * buffer, or the peer is not one to wait for. */
    return send(p->fd, &rep, sizeof(rep), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(rep);
}

static void peerDrop(mcRdma *r, rdmaPeer *p) {
    for (rdmaPeer **pp = &r->peers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    peerFree(p);
    r->npeers--;
}

/* A peer's socket is readable. Before its QP: more of its request (the QP
 * made once it is whole); 0 when the peer is to be dropped. After: the
 * peer closed (done, or died) or said something it should not have. */
static int peerReadable(mcRdma *r, rdmaPeer *p) {
    if (p->qp) return 0;
    ssize_t k = recv(p->fd, p->req + p->got, sizeof(p->req) - p->got, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 1;
    if (k <= 0) return 0;
    p->got += (size_t)k;
    return p->got < sizeof(p->req) || peerAccept(r, p);
}

/* Accepts QP exchanges and holds each QP until its connection closes.
 *
 * One thread serves every peer, so nothing here may wait on one: a peer
 * that connects and then sends its record slowly, or never (a stalled or
 * dying process, a port scanner), would otherwise hold up the exchanges
 * of every other reader, whose own timeouts then fail them (found with a
 * peer trickling its record a byte at a time). Sockets are non-blocking,
 * each request is gathered as it arrives, and one not whole within
 * RDMA_CONNECT_TIMEOUT_MS of its accept is dropped. */
static void *listenLoop(void *arg) {
    mcRdma *r = arg;
    struct pollfd *pfd = malloc((RDMA_MAX_PEERS + 2) * sizeof(*pfd));
    rdmaPeer **who = malloc((RDMA_MAX_PEERS + 2) * sizeof(*who));

    while (pfd && who) {
        int n = 2, timeout = -1;
        long long now = nowMs();
        pfd[0] = (struct pollfd){r->lfd, POLLIN, 0};
        pfd[1] = (struct pollfd){r->stopfd[0], POLLIN, 0};
        for (rdmaPeer *p = r->peers; p && n < RDMA_MAX_PEERS + 2; p = p->next) {
            pfd[n] = (struct pollfd){p->fd, POLLIN, 0};
            who[n++] = p;
            if (p->qp == NULL) {
                long long left = p->deadline > now ? p->deadline - now : 0;
                if (timeout < 0 || left < timeout) timeout = (int)left;
            }
        }
        if (poll(pfd, (nfds_t)n, timeout) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pfd[1].revents) break;
        now = nowMs();
        for (int i = 2; i < n; i++) {
            rdmaPeer *p = who[i];
            if (pfd[i].revents ? !peerReadable(r, p) : p->qp == NULL && now >= p->deadline) peerDrop(r, p);
        }
        if (pfd[0].revents) {
            int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            rdmaPeer *p = fd >= 0 && r->npeers < RDMA_MAX_PEERS ? calloc(1, sizeof(*p)) : NULL;
            if (p) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                p->fd = fd;
                p->deadline = now + RDMA_CONNECT_TIMEOUT_MS;
                p->next = r->peers;
                r->peers = p;
                r->npeers++;
            } else if (fd >= 0) {
                close(fd);
            }
        }
    }
    free(pfd);
    free(who);
    return NULL;
}

int mcRdmaListen(mcRdma *r, const char *host, int *port, char *err, size_t errlen) {
    struct addrinfo hints, *ai = NULL;
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    char pbuf[16];
    int rc = MC_ERR_IO, gerr, one = 1;

    if (r == NULL || port == NULL || *port < 0 || *port > 65535) {
        setErr(err, errlen, "bad listen arguments");
        return MC_ERR_INVALID;
    }
    pthread_mutex_lock(&r->lock);
    if (r->lfd >= 0) {
        *port = r->lport;
        pthread_mutex_unlock(&r->lock);
        return MC_OK;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(pbuf, sizeof(pbuf), "%d", *port);
    if ((gerr = getaddrinfo(host && *host ? host : NULL, pbuf, &hints, &ai)) != 0) {
        setErr(err, errlen, "rdma listen address %s: %s", host ? host : "*", gai_strerror(gerr));
        rc = MC_ERR_INVALID;
        goto err;
    }
    if (pipe2(r->stopfd, O_CLOEXEC) != 0) {
        r->stopfd[0] = r->stopfd[1] = -1;
        setErr(err, errlen, "pipe: %s", strerror(errno));
        goto err;
    }
    if ((r->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
        setErr(err, errlen, "socket: %s", strerror(errno));
        goto err;
    }
    setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(r->lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(r->lfd, 64) != 0 ||
        getsockname(r->lfd, (struct sockaddr *)&sa, &salen) != 0) {
        setErr(err, errlen, "rdma listen on %s:%d: %s", host ? host : "*", *port, strerror(errno));
        goto err;
    }
    r->lport = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                              : ((struct sockaddr_in *)&sa)->sin_port);
    if ((gerr = pthread_create(&r->lthread, NULL, listenLoop, r)) != 0) {
        setErr(err, errlen, "rdma listener thread: %s", strerror(gerr));
        goto err;
    }
    r->lthread_up = 1;
    *port = r->lport;
    freeaddrinfo(ai);
    pthread_mutex_unlock(&r->lock);
    return MC_OK;

err:
    if (ai) freeaddrinfo(ai);
    if (r->lfd >= 0) close(r->lfd);
    for (int i = 0; i < 2; i++) {
        if (r->stopfd[i] >= 0) close(r->stopfd[i]);
        r->stopfd[i] = -1;
    }
    r->lfd = -1;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* ---- the active side ------------------------------------------------------ */

/* Connects c (host, port, dev filled in) through its local NIC; want picks
 * the host's NIC. */
static int connOpen(mcRdma *r, rdmaConn *c, int want, char *err, size_t errlen) {
    rdmaDev *d = &r->dev[c->dev];
    rdmaWire req, rep;
    uint32_t psn = newPsn();

    if ((c->fd = tcpConnect(c->host, c->port, err, errlen)) < 0) goto err;
    if ((c->cq = V.create_cq(d->ctx, 2 * RDMA_DEPTH, NULL, NULL, 0)) == NULL) {
        setErr(err, errlen, "ibv_create_cq: %s", strerror(errno));
        goto err;
    }
    if ((c->qp = qpCreate(d, c->cq, RDMA_DEPTH)) == NULL) {
        setErr(err, errlen, "ibv_create_qp: %s", strerror(errno));
        goto err;
    }
    wireFill(&req, r, c->dev, c->qp, psn, want);
    if (ioAll(c->fd, &req, sizeof(req), 1) != 0 || ioAll(c->fd, &rep, sizeof(rep), 0) != 0) {
        setErr(err, errlen, "QP exchange with %s:%d: %s", c->host, c->port,
               errno == ECONNRESET ? "refused by the host" : strerror(errno));
        goto err;
    }
    if (qpConnect(d, c->qp, psn, &rep, err, errlen) != 0) goto err;
    memcpy(c->peer_nic, rep.nic, sizeof(c->peer_nic) - 1);
    c->peer_nic[sizeof(c->peer_nic) - 1] = '\0';
    return 0;

err:
    connReset(c);
    return -1;
}

/* The live connection to desc's host through device di, or NULL. */
static rdmaConn *connGet(mcRdma *r, const mcRdmaDesc *desc, int di, int want, char *err, size_t errlen) {
    rdmaConn *c;

    for (c = r->conns; c; c = c->next)
        if (c->dev == di && c->port == desc->port && strcmp(c->host, desc->host) == 0) break;
    if (c && c->qp) return c;
    if (c && nowMs() < c->down_until) {
        setErr(err, errlen, "path %s -> %s:%d failed recently", r->nic[di].name, c->host, c->port);
        return NULL;
    }
    if (c == NULL) {
        if ((c = calloc(1, sizeof(*c))) == NULL) return NULL;
        memcpy(c->host, desc->host, sizeof(c->host));
        c->port = desc->port;
        c->dev = di;
        c->fd = -1;
        c->next = r->conns;
        r->conns = c;
    }
    if (connOpen(r, c, want, err, errlen) != 0) {
        c->down_until = nowMs() + RDMA_RETRY_MS;
        return NULL;
    }
    return c;
}

/* The rkey the host's NIC `nic` registered, or 0 with *ok = 0. */
static uint32_t rkeyFor(const mcRdmaDesc *d, const char *nic, int *ok) {
    *ok = 1;
    if (d->nkeys == 1 && d->nic[0][0] == '\0') return d->rkey[0];
    for (int i = 0; i < d->nkeys; i++)
        if (strcmp(d->nic[i], nic) == 0) return d->rkey[i];
    *ok = 0;
    return 0;
}

/* Another path than `from` that still works, or -1. */
static int nextPath(rdmaConn **path, int npath, int from) {
    for (int k = 1; k < npath; k++) {
        int q = (from + k) % npath;
        if (!path[q]->broken) return q;
    }
    return -1;
}

static int pathsFull(rdmaConn **path, int npath) {
    for (int p = 0; p < npath; p++)
        if (!path[p]->broken && path[p]->inflight < RDMA_DEPTH) return 0;
    return 1;
}

enum { SL_WAIT, SL_POSTED, SL_DONE };

/* Posts and reaps the slices. Each path keeps up to RDMA_DEPTH requests in
 * flight; a failed slice moves once to the next path. Returns only once
 * nothing is in flight, or after marking the QPs that still are broken. */
static int runSlices(mcRdmaSlice *sl, unsigned char *state, unsigned char *tries, int ns,
                     rdmaConn **path, const uint32_t *rkey, int npath, const rdmaRegion *g,
                     char *local, uint64_t remote, int write, char *err, size_t errlen) {
    long long deadline = nowMs() + RDMA_IDLE_TIMEOUT_MS;
    int done = 0, inflight = 0, rc = MC_OK, first = 0; /* no SL_WAIT below first */

    while (done < ns && !(rc != MC_OK && inflight == 0)) {
        int progress = 0;

        while (first < ns && state[first] != SL_WAIT) first++;
        for (int i = first; i < ns && rc == MC_OK; i++) {
            rdmaConn *c = path[sl[i].nic];
            struct ibv_send_wr wr, *bad;
            struct ibv_sge sge;

            if (state[i] != SL_WAIT) continue;
            if (c->broken) { /* not yet tried: moving it costs no retry */
                int q = nextPath(path, npath, sl[i].nic);
                if (q < 0) {
                    setErr(err, errlen, "every RDMA path failed");
                    rc = MC_ERR_IO;
                    break;
                }
                sl[i].nic = q;
                c = path[q];
            }
            if (c->inflight >= RDMA_DEPTH) {
                if (pathsFull(path, npath)) break; /* the scan would find nothing */
                continue;
            }
            sge.addr = (uintptr_t)(local + sl[i].offset);
            sge.length = (uint32_t)sl[i].len;
            sge.lkey = g->mr[c->dev]->lkey;
            memset(&wr, 0, sizeof(wr));
            wr.wr_id = (uint64_t)i;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = remote + sl[i].offset;
            wr.wr.rdma.rkey = rkey[sl[i].nic];
            if (ibv_post_send(c->qp, &wr, &bad) != 0) {
                c->broken = 1; /* picked up again above, on another path */
                i--;
                continue;
            }
            state[i] = SL_POSTED;
            c->inflight++;
            inflight++;
        }
        for (int p = 0; p < npath; p++) {
            struct ibv_wc wc[16];
            int k = path[p]->inflight ? ibv_poll_cq(path[p]->cq, 16, wc) : 0;

            if (k < 0) {
                path[p]->broken = 1;
                continue;
            }
            for (int j = 0; j < k; j++) {
                int i = (int)wc[j].wr_id, q;
                path[p]->inflight--;
                inflight--;
                progress = 1;
                if (wc[j].status == IBV_WC_SUCCESS) {
                    state[i] = SL_DONE;
                    done++;
                    path[p]->carried++;
                    continue;
                }
                /* The QP is now in error: everything behind it flushes. */
                path[p]->broken = 1;
                if (wc[j].status == IBV_WC_RETRY_EXC_ERR || wc[j].status == IBV_WC_RNR_RETRY_EXC_ERR)
                    path[p]->unresponsive = 1;
                if (tries[i]++ == 0 && (q = nextPath(path, npath, p)) >= 0) {
                    sl[i].nic = q;
                    state[i] = SL_WAIT;
                    if (i < first) first = i;
                } else if (rc == MC_OK) {
                    setErr(err, errlen, "RDMA %s of %llu bytes failed: %s",
                           write ? "WRITE" : "READ", (unsigned long long)sl[i].len,
                           V.wc_status_str(wc[j].status));
                    rc = MC_ERR_IO;
                }
            }
        }
        if (progress) {
            deadline = nowMs() + RDMA_IDLE_TIMEOUT_MS;
        } else if (nowMs() > deadline) {
            for (int p = 0; p < npath; p++)
                if (path[p]->inflight) path[p]->broken = 1;
            if (rc == MC_OK) setErr(err, errlen, "RDMA transfer timed out");
            return MC_ERR_IO;
        }
    }
    return rc;
}

/* One try at a transfer over the paths to desc's host that g is registered
 * on; those resting after their peer stopped answering (shun_until, see
 * below) are left out unless shunned is set, and counted in *skipped.
 * Under r->lock. */
static int transferOnce(mcRdma *r, const mcRdmaDesc *desc, uint64_t offset, char *local, size_t len, int write,
                        rdmaRegion *g, int shunned, int *skipped, char *err, size_t errlen) {
    rdmaConn *path[MC_RDMA_MAX_NICS];
    uint32_t rkey[MC_RDMA_MAX_NICS];
    int order[MC_RDMA_MAX_NICS], n, npath = 0, ns, cap, rc = MC_ERR_IO;
    mcRdmaSlice *sl = NULL;
    unsigned char *state = NULL;
    char why[256] = "no active local NIC";
    long long now = nowMs();

    *skipped = 0;
    n = mcRdmaOrderNics(r->nic, r->ndev, g->numa, order);
    for (int i = 0; i < n; i++) {
        rdmaConn *c;
        int ok;
        int want = 0;
        if (g->mr[order[i]] == NULL) continue;
        if (!shunned) {
            for (c = r->conns; c; c = c->next)
                if (c->dev == order[i] && c->port == desc->port && strcmp(c->host, desc->host) == 0) break;
            if (c && now < c->shun_until) {
                (*skipped)++;
                continue;
            }
        }
        while (r->order[want] != order[i]) want++; /* its place by name: the host NIC it asks for */
        if ((c = connGet(r, desc, order[i], want, why, sizeof(why))) == NULL) continue;
        rkey[npath] = rkeyFor(desc, c->peer_nic, &ok);
        if (!ok) {
            snprintf(why, sizeof(why), "the segment has no rkey for its NIC %s", c->peer_nic);
            continue;
        }
        path[npath++] = c;
    }
    if (npath == 0) {
        setErr(err, errlen, "no RDMA path to %s:%d: %s", desc->host, desc->port, why);
        return MC_ERR_IO;
    }
    cap = (int)(len / RDMA_CHUNK) + 1 + npath;
    sl = malloc((size_t)cap * sizeof(*sl));
    state = calloc((size_t)cap, 2); /* state[] then tries[] */
    if (sl == NULL || state == NULL) {
        rc = MC_ERR_NOMEM;
        goto out;
    }
    ns = mcRdmaStripe(len, npath, RDMA_CHUNK, sl, cap);
    for (int p = 0; p < npath; p++) path[p]->inflight = path[p]->carried = path[p]->unresponsive = 0;
    rc = runSlices(sl, state, state + cap, ns, path, rkey, npath, g, local, desc->base + offset,
                   write, err, errlen);
    /* Destroying a broken QP now also stops any DMA it still had queued.
     * It is reconnected on the next transfer; but a path whose peer
     * stopped answering while another path carried requests to the same
     * host, in two transfers in a row, is shunned for RDMA_RETRY_MS: the
     * fault is then likely its own (a NIC whose link went away still
     * connects, over IP, and fails each request only after the
     * transport's retries, about half a second), and tried again at once
     * it cost every transfer that wait (found through the fake verbs: one
     * failure per transfer with one of three NICs failing). Once is a
     * QP's accident, and costs nothing more. Shunned is not banned: a
     * transfer the other paths cannot carry is tried again with it
     * (mcRdmaTransfer). */
    int carried = 0;
    for (int p = 0; p < npath; p++) carried |= !path[p]->broken && path[p]->carried > 0;
    for (int p = 0; p < npath; p++) {
        if (!path[p]->broken) {
            if (path[p]->carried) path[p]->strikes = 0;
            continue;
        }
        if (carried && path[p]->unresponsive && ++path[p]->strikes >= 2) {
            path[p]->shun_until = nowMs() + RDMA_RETRY_MS;
            path[p]->strikes = 0;
        }
        connReset(path[p]);
        path[p]->down_until = 0;
    }

out:
    free(sl);
    free(state);
    return rc;
}

int mcRdmaTransfer(mcRdma *r, const mcRdmaDesc *desc, uint64_t offset, void *local, size_t len,
                   int write, char *err, size_t errlen) {
    rdmaRegion *g;
    int rc, skipped;

    if (r == NULL || desc == NULL || local == NULL || desc->base + offset < desc->base ||
        desc->base + offset + len < desc->base + offset) {
        setErr(err, errlen, "bad RDMA transfer arguments");
        return MC_ERR_INVALID;
    }
    if (len == 0) return MC_OK;
    if (len / RDMA_CHUNK > INT_MAX / 2) { /* keeps the slice count an int */
        setErr(err, errlen, "RDMA transfer of %zu bytes is too large", len);
        return MC_ERR_INVALID;
    }
    if (desc->nkeys <= 0) {
        setErr(err, errlen, "the segment has no rkey");
        return MC_ERR_INVALID;
    }
    pthread_mutex_lock(&r->lock);
    for (g = r->regions; g; g = g->next) {
        char *l = local;
        if (l >= g->addr && l < g->addr + g->len && len <= g->len - (size_t)(l - g->addr)) break;
    }
    if (g == NULL) {
        setErr(err, errlen, "local buffer is not inside a registered region");
        rc = MC_ERR_INVALID;
        goto out;
    }
    /* The paths in favour first; what they could not carry, once more with
     * the shunned ones (READ and WRITE of the same range repeat safely). */
    rc = transferOnce(r, desc, offset, local, len, write, g, 0, &skipped, err, errlen);
    if (rc != MC_OK && rc != MC_ERR_NOMEM && skipped)
        rc = transferOnce(r, desc, offset, local, len, write, g, 1, &skipped, err, errlen);

out:
    pthread_mutex_unlock(&r->lock);
    return rc;
}

#else /* !MC_HAVE_RDMA */

#define NO_RDMA "built without RDMA support (BUILD_RDMA=no: no infiniband/verbs.h)"

mcRdma *mcRdmaOpen(char *err, size_t errlen) {
    setErr(err, errlen, NO_RDMA);
    return NULL;
}

void mcRdmaClose(mcRdma *r) { (void)r; }

int mcRdmaRegister(mcRdma *r, void *addr, size_t len, char *rkeys, size_t rkeys_cap) {
    (void)r, (void)addr, (void)len, (void)rkeys, (void)rkeys_cap;
    return MC_ERR_UNSUPPORTED;
}

int mcRdmaRegisterDevice(mcRdma *r, void *addr, size_t len, int dmabuf_fd, uint64_t dmabuf_off,
                         const char *policy, char *rkeys, size_t rkeys_cap, char *why, size_t whylen) {
    (void)r, (void)addr, (void)len, (void)dmabuf_fd, (void)dmabuf_off, (void)policy, (void)rkeys, (void)rkeys_cap;
    setErr(why, whylen, NO_RDMA);
    return MC_RDMA_REG_NONE;
}

int mcRdmaNics(const mcRdma *r, mcRdmaNic *out, int cap) {
    (void)r, (void)out, (void)cap;
    return 0;
}

int mcRdmaUnregister(mcRdma *r, void *addr) {
    (void)r, (void)addr;
    return MC_ERR_UNSUPPORTED;
}

int mcRdmaListen(mcRdma *r, const char *host, int *port, char *err, size_t errlen) {
    (void)r, (void)host, (void)port;
    setErr(err, errlen, NO_RDMA);
    return MC_ERR_UNSUPPORTED;
}

int mcRdmaTransfer(mcRdma *r, const mcRdmaDesc *desc, uint64_t offset, void *local, size_t len,
                   int write, char *err, size_t errlen) {
    (void)r, (void)desc, (void)offset, (void)local, (void)len, (void)write;
    setErr(err, errlen, NO_RDMA);
    return MC_ERR_UNSUPPORTED;
}

#endif
