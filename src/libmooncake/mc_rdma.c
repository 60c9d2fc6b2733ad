/* mc_rdma.c -- the RDMA transport of libmooncake.
 *
 * What it does: a segment hosted by a client process is registered on every
 * local NIC (one ibv_mr per protection domain, so one rkey per NIC) and
 * served by a passive rdma_cm listener; a reader or writer elsewhere
 * connects one RC queue pair per (peer, local NIC) and moves bytes with
 * one-sided RDMA READ/WRITE, striped over its NICs. The host side never
 * touches the data path: it accepts QPs and that is all, since one-sided
 * operations consume no receive work requests and raise no completions at
 * the target.
 *
 * Why it is shaped so:
 *
 * - Device contexts come from rdma_get_devices(), not ibv_open_device().
 *   rdma_cm binds every cm_id to *its own* ibv_context for the device the
 *   route goes through, and rdma_create_qp() refuses a PD from any other
 *   context. Allocating our PDs on librdmacm's contexts is what lets the QP
 *   of a cm_id and the MRs we registered live in the same PD.
 *   ibv_get_device_list() is still called first, only so that "there is no
 *   device at all" gets its own plain error message.
 *
 * - The rkey the peer must use depends on which of the host's NICs accepted
 *   the connection (an rkey is valid only in its own PD). The listener says
 *   which, by name, in the private data of its accept ("MCR1" + NIC name);
 *   the connecting side looks that name up in the segment's RKEY text. A
 *   bare-hex RKEY is taken to be valid on any NIC.
 *
 * - A connection is pinned to a local NIC by binding the source address to
 *   an IP of that NIC's netdev (found through sysfs). If the NIC has none,
 *   rdma_cm picks the device from the routing table; when that is another
 *   NIC the path is refused rather than silently doubled up.
 *
 * - Paths that fail to connect are remembered for RDMA_RETRY_MS so that a
 *   dead NIC costs one timeout now and then, not one per transfer. A QP
 *   that completed a work request in error is torn down at the end of the
 *   transfer and reconnected on the next one.
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
 * machines without RDMA hardware. Without MC_HAVE_RDMA the engine functions
 * are stubs that report MC_ERR_UNSUPPORTED. */

#include "mc_rdma.h"
#include "mooncake.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MC_RDMA_DEFAULT_CHUNK (UINT64_C(1) << 20)
/* Below this a slice costs more in work-request overhead than it gains in
 * parallel bandwidth, so small transfers are not spread over every NIC. */
#define MC_RDMA_MIN_SLICE (UINT64_C(64) << 10)
#define MC_RDMA_HELLO "MCR1"

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

#ifdef MC_HAVE_RDMA
/* ---------------------------------------------------------------------------
 * The engine.
 * ------------------------------------------------------------------------ */

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <numaif.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <time.h>
#include <unistd.h>

#define RDMA_CHUNK (UINT64_C(4) << 20)
#define RDMA_DEPTH 32              /* signaled WRs in flight per QP */
#define RDMA_CM_TIMEOUT_MS 2000    /* address and route resolution */
#define RDMA_IDLE_TIMEOUT_MS 10000 /* a transfer with no completion this long fails */
#define RDMA_RETRY_MS 5000         /* a path that failed to connect rests this long */
#define RDMA_RD_ATOM 16            /* outstanding READs we ask for per QP */

typedef struct rdmaDev {
    struct ibv_context *ctx; /* librdmacm's own context: see the top comment */
    struct ibv_pd *pd;
    int rd_atom, init_rd_atom;
} rdmaDev;

typedef struct rdmaRegion {
    char *addr;
    size_t len;
    int numa;                             /* node of the first page, -1 unknown */
    struct ibv_mr *mr[MC_RDMA_MAX_NICS];  /* by device index; NULL: port inactive */
    struct rdmaRegion *next;
} rdmaRegion;

/* Active side. A struct with id == NULL is a path that is down: reconnected
 * once the clock passes down_until. */
typedef struct rdmaConn {
    char host[256];
    int port, dev;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    char peer_nic[64];  /* the host's NIC that accepted: selects the rkey */
    long long down_until;
    int inflight, broken;
    struct rdmaConn *next;
} rdmaConn;

/* Passive side: one accepted QP. */
typedef struct rdmaPeer {
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    struct rdmaPeer *next;
} rdmaPeer;

typedef struct rdmaHello {
    char magic[4];
    char nic[64];
} rdmaHello;

struct mcRdma {
    pthread_mutex_t lock;
    struct ibv_context **cmdevs;
    int ndev, nactive;
    rdmaDev dev[MC_RDMA_MAX_NICS];
    mcRdmaNic nic[MC_RDMA_MAX_NICS];
    int order[MC_RDMA_MAX_NICS];  /* active first, by name: the RKEY text order */
    rdmaRegion *regions;
    rdmaConn *conns;
    /* Listener; lid != NULL once listening. */
    struct rdma_event_channel *lch;
    struct rdma_cm_id *lid;
    int lport, stopfd[2], lthread_up;
    pthread_t lthread;
    rdmaPeer *peers;  /* owned by the listener thread */
};

static long long nowMs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int imin(int a, int b) { return a < b ? a : b; }

static int devIndex(mcRdma *r, struct ibv_context *ctx) {
    for (int i = 0; i < r->ndev; i++)
        if (r->dev[i].ctx == ctx) return i;
    return -1;
}

static int readNuma(const char *dev) {
    char path[256];
    int node = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/numa_node", dev);
    if ((f = fopen(path, "r")) == NULL) return -1;
    if (fscanf(f, "%d", &node) != 1) node = -1;
    fclose(f);
    return node;
}

/* The first address of the given family on one of dev's netdevs. */
static int nicAddr(const char *dev, int family, struct sockaddr_storage *out) {
    char path[256];
    struct ifaddrs *ifs = NULL;
    struct dirent *de;
    DIR *dir;
    int found = 0;

    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net", dev);
    if ((dir = opendir(path)) == NULL) return 0;
    if (getifaddrs(&ifs) != 0) goto out;
    while (!found && (de = readdir(dir)) != NULL) {
        for (struct ifaddrs *i = ifs; i && de->d_name[0] != '.'; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != family) continue;
            if (strcmp(i->ifa_name, de->d_name) != 0) continue;
            memcpy(out, i->ifa_addr, family == AF_INET ? sizeof(struct sockaddr_in)
                                                       : sizeof(struct sockaddr_in6));
            found = 1;
            break;
        }
    }
out:
    if (ifs) freeifaddrs(ifs);
    closedir(dir);
    return found;
}

mcRdma *mcRdmaOpen(char *err, size_t errlen) {
    struct ibv_device **list;
    struct ibv_context **ctxs = NULL;
    mcRdma *r = NULL;
    int n = 0;

    list = ibv_get_device_list(&n);
    if (list) ibv_free_device_list(list);
    if (list == NULL || n == 0) {
        setErr(err, errlen, "no RDMA device found (ibv_get_device_list returned none%s%s)",
               list ? "" : ": ", list ? "" : strerror(errno));
        return NULL;
    }
    if ((ctxs = rdma_get_devices(&n)) == NULL || n == 0) {
        setErr(err, errlen, "librdmacm sees no RDMA device (rdma_get_devices: %s)",
               ctxs ? "none" : strerror(errno));
        goto err;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        setErr(err, errlen, "out of memory");
        goto err;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->cmdevs = ctxs;
    ctxs = NULL;
    r->stopfd[0] = r->stopfd[1] = -1;
    for (int i = 0; i < n && r->ndev < MC_RDMA_MAX_NICS; i++) {
        struct ibv_context *c = r->cmdevs[i];
        struct ibv_device_attr da;
        rdmaDev *d = &r->dev[r->ndev];
        mcRdmaNic *nic = &r->nic[r->ndev];

        if (ibv_query_device(c, &da) != 0) continue;
        if ((d->pd = ibv_alloc_pd(c)) == NULL) continue;
        d->ctx = c;
        d->rd_atom = imin(da.max_qp_rd_atom, RDMA_RD_ATOM);
        d->init_rd_atom = imin(da.max_qp_init_rd_atom, RDMA_RD_ATOM);
        snprintf(nic->name, sizeof(nic->name), "%s", ibv_get_device_name(c->device));
        nic->numa_node = readNuma(nic->name);
        nic->port = 1;
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(c, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
                nic->port = p;
                nic->active = 1;
                break;
            }
        }
        r->ndev++;
    }
    r->nactive = mcRdmaOrderNics(r->nic, r->ndev, -1, r->order);
    if (r->nactive == 0) {
        setErr(err, errlen, "%d RDMA device(s) but no ACTIVE port (see ibv_devinfo)", n);
        goto err;
    }
    return r;

err:
    if (ctxs) rdma_free_devices(ctxs);
    mcRdmaClose(r);
    return NULL;
}

/* Frees what a connection holds, keeping the struct as a "down" marker. */
static void connReset(rdmaConn *c) {
    if (c->id) {
        if (c->id->qp) {
            rdma_disconnect(c->id);
            rdma_destroy_qp(c->id);
        }
        rdma_destroy_id(c->id);
        c->id = NULL;
    }
    if (c->cq) ibv_destroy_cq(c->cq);
    if (c->ch) rdma_destroy_event_channel(c->ch);
    c->cq = NULL;
    c->ch = NULL;
    c->broken = c->inflight = 0;
}

static void peerDrop(mcRdma *r, rdmaPeer *p) {
    for (rdmaPeer **pp = &r->peers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    rdma_destroy_qp(p->id);
    ibv_destroy_cq(p->cq);
    rdma_destroy_id(p->id);
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
        rdma_disconnect(r->peers->id);
        peerDrop(r, r->peers);
    }
    if (r->lid) rdma_destroy_id(r->lid);
    if (r->lch) rdma_destroy_event_channel(r->lch);
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
            if (g->mr[i]) ibv_dereg_mr(g->mr[i]);
        free(g);
    }
    for (int i = 0; i < r->ndev; i++) ibv_dealloc_pd(r->dev[i].pd);
    if (r->cmdevs) rdma_free_devices(r->cmdevs);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int mcRdmaRegister(mcRdma *r, void *addr, size_t len, char *rkeys, size_t rkeys_cap) {
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    rdmaRegion *g;
    mcRdmaDesc d;
    int rc = MC_ERR_IO, node = -1;

    if (r == NULL || addr == NULL || len == 0) return MC_ERR_INVALID;
    if ((g = calloc(1, sizeof(*g))) == NULL) return MC_ERR_NOMEM;
    memset(&d, 0, sizeof(d));
    pthread_mutex_lock(&r->lock);
    for (rdmaRegion *e = r->regions; e; e = e->next) {
        if (e->addr == addr) {
            rc = MC_ERR_EXISTS;
            goto err;
        }
    }
    g->addr = addr;
    g->len = len;
    for (int i = 0; i < r->nactive; i++) {
        int di = r->order[i];
        if ((g->mr[di] = ibv_reg_mr(r->dev[di].pd, addr, len, access)) == NULL) {
            /* ENOMEM here is mostly RLIMIT_MEMLOCK, not the heap. */
            rc = errno == ENOMEM ? MC_ERR_NOMEM : MC_ERR_IO;
            goto err;
        }
        memcpy(d.nic[d.nkeys], r->nic[di].name, sizeof(d.nic[0]));
        d.rkey[d.nkeys++] = g->mr[di]->rkey;
    }
    if (rkeys && mcRdmaDescFormatKeys(&d, rkeys, rkeys_cap) < 0) {
        rc = MC_ERR_TOO_SMALL;
        goto err;
    }
    /* After ibv_reg_mr the pages are pinned, so asking where the first one
     * lives does not fault it in somewhere arbitrary. */
    if (get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0) node = -1;
    g->numa = node;
    g->next = r->regions;
    r->regions = g;
    pthread_mutex_unlock(&r->lock);
    return MC_OK;

err:
    for (int i = 0; i < r->ndev; i++)
        if (g->mr[i]) ibv_dereg_mr(g->mr[i]);
    free(g);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int mcRdmaUnregister(mcRdma *r, void *addr) {
    rdmaRegion **pp, *g;

    if (r == NULL) return MC_ERR_INVALID;
    pthread_mutex_lock(&r->lock);
    for (pp = &r->regions; (g = *pp) != NULL; pp = &g->next)
        if (g->addr == addr) break;
    if (g) *pp = g->next;
    pthread_mutex_unlock(&r->lock);
    if (g == NULL) return MC_ERR_NOT_FOUND;
    for (int i = 0; i < r->ndev; i++)
        if (g->mr[i]) ibv_dereg_mr(g->mr[i]);
    free(g);
    return MC_OK;
}

/* Gives the new QP a PD the peer's rkeys can name, and tells the peer
 * which NIC that is. 0 if refused (the caller destroys the id). */
static int peerAccept(mcRdma *r, struct rdma_cm_id *id, const struct rdma_conn_param *req) {
    struct ibv_qp_init_attr qa;
    struct rdma_conn_param cp;
    rdmaHello hello;
    rdmaPeer *p = NULL;
    int di = devIndex(r, id->verbs);

    if (di < 0 || (p = calloc(1, sizeof(*p))) == NULL) goto err;
    if ((p->cq = ibv_create_cq(id->verbs, 2, NULL, NULL, 0)) == NULL) goto err;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = p->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, r->dev[di].pd, &qa) != 0) goto err;
    memset(&hello, 0, sizeof(hello));
    memcpy(hello.magic, MC_RDMA_HELLO, 4);
    memcpy(hello.nic, r->nic[di].name, sizeof(hello.nic));
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &hello;
    cp.private_data_len = sizeof(hello);
    /* The peer's READs are served by our responder resources. */
    cp.responder_resources = (uint8_t)imin(req->initiator_depth, r->dev[di].rd_atom);
    cp.initiator_depth = (uint8_t)imin(req->responder_resources, r->dev[di].init_rd_atom);
    cp.rnr_retry_count = 7;
    if (rdma_accept(id, &cp) != 0) goto err;
    p->id = id;
    id->context = p;
    p->next = r->peers;
    r->peers = p;
    return 1;

err:
    if (id->qp) rdma_destroy_qp(id);
    if (p && p->cq) ibv_destroy_cq(p->cq);
    free(p);
    rdma_reject(id, NULL, 0);
    return 0;
}

static void *listenLoop(void *arg) {
    mcRdma *r = arg;
    struct pollfd pfd[2] = {{r->lch->fd, POLLIN, 0}, {r->stopfd[0], POLLIN, 0}};

    for (;;) {
        struct rdma_cm_event *ev;
        struct rdma_cm_id *id;
        rdmaPeer *p;

        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pfd[1].revents) break;
        if (!(pfd[0].revents & POLLIN)) continue;
        if (rdma_get_cm_event(r->lch, &ev) != 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            break;
        }
        id = ev->id;
        p = id->context; /* NULL on a connect request: inherited from lid */
        switch (ev->event) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: {
            int ok = peerAccept(r, id, &ev->param.conn);
            rdma_ack_cm_event(ev); /* before destroy_id, which waits for it */
            if (!ok) rdma_destroy_id(id);
            break;
        }
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            rdma_ack_cm_event(ev);
            if (p && id != r->lid) peerDrop(r, p);
            break;
        default:
            rdma_ack_cm_event(ev);
            break;
        }
    }
    return NULL;
}

/* One listener serves every region: an rkey belongs to a PD, not to the
 * listener, so a second call just reports the port already in use. */
int mcRdmaListen(mcRdma *r, const char *host, int *port, char *err, size_t errlen) {
    struct addrinfo hints, *ai = NULL;
    char pbuf[16];
    int rc = MC_ERR_IO, gerr;

    if (r == NULL || port == NULL || *port < 0 || *port > 65535) {
        setErr(err, errlen, "bad listen arguments");
        return MC_ERR_INVALID;
    }
    pthread_mutex_lock(&r->lock);
    if (r->lid) {
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
    if (pipe(r->stopfd) != 0) {
        r->stopfd[0] = r->stopfd[1] = -1;
        setErr(err, errlen, "pipe: %s", strerror(errno));
        goto err;
    }
    if ((r->lch = rdma_create_event_channel()) == NULL ||
        rdma_create_id(r->lch, &r->lid, NULL, RDMA_PS_TCP) != 0) {
        setErr(err, errlen, "rdma_cm: %s", strerror(errno));
        goto err;
    }
    if (rdma_bind_addr(r->lid, ai->ai_addr) != 0 || rdma_listen(r->lid, 64) != 0) {
        setErr(err, errlen, "rdma listen on %s:%d: %s", host ? host : "*", *port,
               strerror(errno));
        goto err;
    }
    r->lport = ntohs(rdma_get_src_port(r->lid));
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
    if (r->lid) rdma_destroy_id(r->lid);
    if (r->lch) rdma_destroy_event_channel(r->lch);
    for (int i = 0; i < 2; i++) {
        if (r->stopfd[i] >= 0) close(r->stopfd[i]);
        r->stopfd[i] = -1;
    }
    r->lid = NULL;
    r->lch = NULL;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* Waits for one event on a private channel. On success the event is left
 * unacked so the caller can read it; any other event is acked and named. */
static int cmWait(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
                  struct rdma_cm_event **ev, char *err, size_t errlen) {
    struct pollfd pfd = {ch->fd, POLLIN, 0};
    int n;

    /* Longer than the resolve timeouts, so librdmacm's own error event
     * arrives before we give up. */
    do n = poll(&pfd, 1, 2 * RDMA_CM_TIMEOUT_MS + 1000);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        setErr(err, errlen, "timed out waiting for %s", rdma_event_str(want));
        return -1;
    }
    if (rdma_get_cm_event(ch, ev) != 0) {
        setErr(err, errlen, "rdma_get_cm_event: %s", strerror(errno));
        return -1;
    }
    if ((*ev)->event != want) {
        setErr(err, errlen, "%s (status %d) instead of %s", rdma_event_str((*ev)->event),
               (*ev)->status, rdma_event_str(want));
        rdma_ack_cm_event(*ev);
        return -1;
    }
    return 0;
}

/* Connects c (host, port, dev filled in) through its local NIC. */
static int connOpen(mcRdma *r, rdmaConn *c, char *err, size_t errlen) {
    struct addrinfo hints, *ai = NULL;
    struct sockaddr_storage src;
    struct ibv_qp_init_attr qa;
    struct rdma_conn_param cp;
    struct rdma_cm_event *ev;
    const rdmaHello *hello;
    rdmaDev *d = &r->dev[c->dev];
    char pbuf[16];
    int gerr;

    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = AI_NUMERICSERV;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(pbuf, sizeof(pbuf), "%d", c->port);
    if ((gerr = getaddrinfo(c->host, pbuf, &hints, &ai)) != 0) {
        setErr(err, errlen, "%s: %s", c->host, gai_strerror(gerr));
        return -1;
    }
    memset(&src, 0, sizeof(src));
    int have_src = nicAddr(r->nic[c->dev].name, ai->ai_family, &src);
    if ((c->ch = rdma_create_event_channel()) == NULL ||
        rdma_create_id(c->ch, &c->id, c, RDMA_PS_TCP) != 0) {
        setErr(err, errlen, "rdma_cm: %s", strerror(errno));
        goto err;
    }
    if (rdma_resolve_addr(c->id, have_src ? (struct sockaddr *)&src : NULL, ai->ai_addr,
                          RDMA_CM_TIMEOUT_MS) != 0) {
        setErr(err, errlen, "rdma_resolve_addr: %s", strerror(errno));
        goto err;
    }
    if (cmWait(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED, &ev, err, errlen) != 0) goto err;
    rdma_ack_cm_event(ev);
    if (c->id->verbs != d->ctx) {
        setErr(err, errlen, "the route to %s does not leave through %s", c->host,
               r->nic[c->dev].name);
        goto err;
    }
    if (rdma_resolve_route(c->id, RDMA_CM_TIMEOUT_MS) != 0) {
        setErr(err, errlen, "rdma_resolve_route: %s", strerror(errno));
        goto err;
    }
    if (cmWait(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev, err, errlen) != 0) goto err;
    rdma_ack_cm_event(ev);
    if ((c->cq = ibv_create_cq(d->ctx, 2 * RDMA_DEPTH, NULL, NULL, 0)) == NULL) {
        setErr(err, errlen, "ibv_create_cq: %s", strerror(errno));
        goto err;
    }
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = RDMA_DEPTH;
    qa.cap.max_recv_wr = 1; /* RC needs a receive queue even if never used */
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(c->id, d->pd, &qa) != 0) {
        setErr(err, errlen, "rdma_create_qp: %s", strerror(errno));
        goto err;
    }
    memset(&cp, 0, sizeof(cp));
    cp.initiator_depth = (uint8_t)d->init_rd_atom;
    cp.responder_resources = (uint8_t)d->rd_atom;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (rdma_connect(c->id, &cp) != 0) {
        setErr(err, errlen, "rdma_connect: %s", strerror(errno));
        goto err;
    }
    if (cmWait(c->ch, RDMA_CM_EVENT_ESTABLISHED, &ev, err, errlen) != 0) goto err;
    hello = ev->param.conn.private_data;
    if (hello == NULL || ev->param.conn.private_data_len < sizeof(*hello) ||
        memcmp(hello->magic, MC_RDMA_HELLO, 4) != 0) {
        rdma_ack_cm_event(ev);
        setErr(err, errlen, "%s:%d is not a mooncake RDMA listener", c->host, c->port);
        goto err;
    }
    memcpy(c->peer_nic, hello->nic, sizeof(c->peer_nic) - 1);
    c->peer_nic[sizeof(c->peer_nic) - 1] = '\0';
    rdma_ack_cm_event(ev);
    freeaddrinfo(ai);
    return 0;

err:
    freeaddrinfo(ai);
    connReset(c);
    return -1;
}

/* The live connection to desc's host through device di, or NULL. */
static rdmaConn *connGet(mcRdma *r, const mcRdmaDesc *desc, int di, char *err, size_t errlen) {
    rdmaConn *c;

    for (c = r->conns; c; c = c->next)
        if (c->dev == di && c->port == desc->port && strcmp(c->host, desc->host) == 0) break;
    if (c && c->id) return c;
    if (c && nowMs() < c->down_until) {
        setErr(err, errlen, "path %s -> %s:%d failed recently", r->nic[di].name, c->host,
               c->port);
        return NULL;
    }
    if (c == NULL) {
        if ((c = calloc(1, sizeof(*c))) == NULL) return NULL;
        memcpy(c->host, desc->host, sizeof(c->host));
        c->port = desc->port;
        c->dev = di;
        c->next = r->conns;
        r->conns = c;
    }
    if (connOpen(r, c, err, errlen) != 0) {
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
            if (ibv_post_send(c->id->qp, &wr, &bad) != 0) {
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
                    continue;
                }
                /* The QP is now in error: everything behind it flushes. */
                path[p]->broken = 1;
                if (tries[i]++ == 0 && (q = nextPath(path, npath, p)) >= 0) {
                    sl[i].nic = q;
                    state[i] = SL_WAIT;
                    if (i < first) first = i;
                } else if (rc == MC_OK) {
                    setErr(err, errlen, "RDMA %s of %llu bytes failed: %s",
                           write ? "WRITE" : "READ", (unsigned long long)sl[i].len,
                           ibv_wc_status_str(wc[j].status));
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

int mcRdmaTransfer(mcRdma *r, const mcRdmaDesc *desc, uint64_t offset, void *local, size_t len,
                   int write, char *err, size_t errlen) {
    rdmaConn *path[MC_RDMA_MAX_NICS];
    uint32_t rkey[MC_RDMA_MAX_NICS];
    int order[MC_RDMA_MAX_NICS], n, npath = 0, ns, cap, rc = MC_ERR_IO;
    mcRdmaSlice *sl = NULL;
    unsigned char *state = NULL;
    rdmaRegion *g;
    char why[256] = "no active local NIC";

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
    n = mcRdmaOrderNics(r->nic, r->ndev, g->numa, order);
    for (int i = 0; i < n; i++) {
        rdmaConn *c;
        int ok;
        if (g->mr[order[i]] == NULL) continue;
        if ((c = connGet(r, desc, order[i], why, sizeof(why))) == NULL) continue;
        rkey[npath] = rkeyFor(desc, c->peer_nic, &ok);
        if (!ok) {
            snprintf(why, sizeof(why), "the segment has no rkey for its NIC %s", c->peer_nic);
            continue;
        }
        path[npath++] = c;
    }
    if (npath == 0) {
        setErr(err, errlen, "no RDMA path to %s:%d: %s", desc->host, desc->port, why);
        goto out;
    }
    cap = (int)(len / RDMA_CHUNK) + 1 + npath;
    sl = malloc((size_t)cap * sizeof(*sl));
    state = calloc((size_t)cap, 2); /* state[] then tries[] */
    if (sl == NULL || state == NULL) {
        rc = MC_ERR_NOMEM;
        goto out;
    }
    ns = mcRdmaStripe(len, npath, RDMA_CHUNK, sl, cap);
    for (int p = 0; p < npath; p++) path[p]->inflight = 0;
    rc = runSlices(sl, state, state + cap, ns, path, rkey, npath, g, local, desc->base + offset,
                   write, err, errlen);
    /* Destroying a broken QP now also stops any DMA it still had queued. */
    for (int p = 0; p < npath; p++) {
        if (path[p]->broken) {
            connReset(path[p]);
            path[p]->down_until = 0;
        }
    }

out:
    pthread_mutex_unlock(&r->lock);
    free(sl);
    free(state);
    return rc;
}

#else /* !MC_HAVE_RDMA */

#define NO_RDMA "built without RDMA support (BUILD_RDMA=no)"

mcRdma *mcRdmaOpen(char *err, size_t errlen) {
    setErr(err, errlen, NO_RDMA);
    return NULL;
}

void mcRdmaClose(mcRdma *r) { (void)r; }

int mcRdmaRegister(mcRdma *r, void *addr, size_t len, char *rkeys, size_t rkeys_cap) {
    (void)r, (void)addr, (void)len, (void)rkeys, (void)rkeys_cap;
    return MC_ERR_UNSUPPORTED;
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
