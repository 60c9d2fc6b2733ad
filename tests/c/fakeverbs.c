/* fakeverbs.c -- libfakeverbs.so: a verbs library without a NIC, for tests.
 *
 * libmooncake's RDMA transport (src/libmooncake/mc_rdma.c) loads libibverbs
 * with dlopen; pointing MC_VERBS_LIBRARY at this file's library runs that
 * code unchanged on machines with no RDMA hardware (no machine here has
 * one, and their kernels lack InfiniBand, so not even soft-RoCE). It
 * implements the subset mc_rdma.c calls, with the checks a NIC makes, and
 * moves the bytes of one-sided operations between processes for real.
 *
 * How it is built:
 *
 * - One registry file (FAKEVERBS_REGISTRY, mmap'd MAP_SHARED, flock'd) is
 *   the "fabric": every memory region (key, owner pid, PD, bounds, access)
 *   and every queue pair (number, owner pid, PD, state, peer) of every
 *   process using the fake, plus the counters and the failure knobs. A
 *   requester looks the remote QP and rkey up there, exactly what a
 *   responder NIC checks: the key exists, belongs to the PD of the QP the
 *   request arrives on, allows the access, and covers the whole range;
 *   otherwise the request completes with IBV_WC_REM_ACCESS_ERR and the QP
 *   goes to the error state, as on a real RC QP.
 *
 * - Bytes move with process_vm_readv/process_vm_writev between the
 *   requester and the process owning the remote MR (same user; the fake
 *   allows any tracer with PR_SET_PTRACER for Yama kernels). A dmabuf MR
 *   (ibv_reg_dmabuf_mr) is mmap'd by its owner and addressed by its iova,
 *   so a test can stand a memfd in for GPU memory.
 *
 * - Work requests run to completion inside ibv_post_send: the completion is
 *   queued at once and ibv_poll_cq reaps it. Nothing is asynchronous, which
 *   keeps the fake small and deterministic; the send queue depth is still
 *   enforced (posting past max_send_wr unreaped signaled requests fails
 *   with ENOMEM), and so is the CQ size (an overrun fails the CQ).
 *
 * - The QP state machine follows the spec's table for RC: RESET->INIT,
 *   INIT->RTR, RTR->RTS (each with its required attribute mask and range
 *   checks: port, MTU against the port, GRH for RoCE, read depths against
 *   the device), any->ERR, any->RESET; anything else is EINVAL and counted
 *   (qp_refused). Posting needs RTS; a QP in ERR flushes what is posted.
 *   A responder QP must be in RTR or RTS and connected back to the
 *   requester; a responder whose process died makes the request complete
 *   with IBV_WC_RETRY_EXC_ERR, as a peer that stopped answering does.
 *
 * - Device teardown order is checked as the kernel does: a PD with MRs or
 *   QPs, or a CQ with QPs, refuses to be freed (EBUSY).
 *
 * Devices come from FAKEVERBS_DEVICES; each has one port, a NUMA node
 * (ibdev_path points at <registry>.sys/<name>, whose device/numa_node says
 * it, as /sys/class/infiniband/<name> does) and may be down. fakeverbs.h
 * lists the environment, the counters and the knobs. */
#include "fakeverbs.h"

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* The header turns these into inline wrappers; the fake defines the
 * symbols themselves, as libibverbs does. */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define EXPORT __attribute__((visibility("default")))

#define FV_MAX_DEV 16
#define FV_MAX_MR 4096
#define FV_MAX_QP 2048
#define FV_MAGIC 0x46564231u /* "FVB1" */
#define FV_GIDS 4
#define FV_MAX_WR 16384
#define FV_MAX_CQE 65536
#define FV_RD_ATOM 16

enum {
    C_READ_OPS, C_WRITE_OPS, C_READ_BYTES, C_WRITE_BYTES, C_REM_ACCESS, C_LOC_PROT, C_RETRY_EXC, C_FLUSH,
    C_QP_REFUSED, C_DMABUF_MRS, C_MRS, C_QPS, C_DEV_OPS, /* C_DEV_OPS + device index */
    C_COUNT = C_DEV_OPS + FV_MAX_DEV
};
static const char *counter_names[C_DEV_OPS] = {"read_ops", "write_ops", "read_bytes", "write_bytes",
                                               "rem_access_err", "loc_prot_err", "retry_exc_err", "flush_err",
                                               "qp_refused", "dmabuf_mrs", "mrs", "qps"};

typedef struct fvMrEnt {
    int used, dmabuf, access, dev;
    uint32_t key, pd;
    pid_t pid;
    uint64_t addr, len; /* addr: the address (iova) peers name */
    uint64_t map;       /* where the owner reaches byte addr (dmabuf: its mapping) */
} fvMrEnt;

typedef struct fvQpEnt {
    int used, state, dev;
    uint32_t qpn, pd, dest;
    pid_t pid;
} fvQpEnt;

typedef struct fvRegistry {
    uint32_t magic, next_key, next_qpn, next_pd;
    long long counter[C_COUNT];
    long long qp_err_after, dev_fail, dmabuf;
    fvMrEnt mr[FV_MAX_MR];
    fvQpEnt qp[FV_MAX_QP];
} fvRegistry;

typedef struct fvDev {
    struct ibv_device dev;
    int numa, down;
} fvDev;

typedef struct fvCtx {
    struct ibv_context ctx; /* first: the library's pointer is ours */
    int dev;
} fvCtx;

typedef struct fvPd {
    struct ibv_pd pd;
    int refs; /* MRs and QPs in it; atomic: the listener thread makes QPs too */
} fvPd;

typedef struct fvMr {
    struct ibv_mr mr;
    int slot;
    void *map;
    size_t maplen;
} fvMr;

typedef struct fvQp fvQp;

typedef struct fvCqe {
    struct ibv_wc wc;
    fvQp *qp; /* its send queue slot is freed when the completion is reaped */
} fvCqe;

typedef struct fvCq {
    struct ibv_cq cq;
    pthread_mutex_t lock;
    fvCqe *ring;
    int cap, head, n, overrun, refs;
} fvCq;

struct fvQp {
    struct ibv_qp qp;
    int slot, dev, port;
    uint32_t max_send_wr, max_send_sge;
    int sq_sig_all, outstanding; /* signaled WRs not yet reaped */
    uint32_t dest;
};

static fvDev devs[FV_MAX_DEV];
static int ndevs, link_eth = 1;
static int regfd = -1;
static fvRegistry *reg;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER; /* flock is per open file, not per thread */

static void regLock(void) {
    pthread_mutex_lock(&reg_lock);
    while (flock(regfd, LOCK_EX) != 0 && errno == EINTR) {}
}

static void regUnlock(void) {
    flock(regfd, LOCK_UN);
    pthread_mutex_unlock(&reg_lock);
}

static void count(int c, long long n) { __atomic_add_fetch(&reg->counter[c], n, __ATOMIC_RELAXED); }

static void mkdirs(const char *path) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0700);
        *p = '/';
    }
    mkdir(buf, 0700);
}

static void fvInit(void) {
    char path[200], sys[250];
    const char *env = getenv("FAKEVERBS_REGISTRY"), *spec = getenv("FAKEVERBS_DEVICES"), *e;
    struct stat st;

    /* Any process of this user may read our memory, as a NIC would. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    if (env && *env) snprintf(path, sizeof(path), "%s", env);
    else snprintf(path, sizeof(path), "/dev/shm/fakeverbs-%u", (unsigned)getuid());
    if ((regfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) return;
    flock(regfd, LOCK_EX);
    if (fstat(regfd, &st) != 0 || ((size_t)st.st_size < sizeof(fvRegistry) && ftruncate(regfd, sizeof(fvRegistry)) != 0)) {
        close(regfd);
        regfd = -1;
        return;
    }
    reg = mmap(NULL, sizeof(fvRegistry), PROT_READ | PROT_WRITE, MAP_SHARED, regfd, 0);
    if (reg == MAP_FAILED) {
        reg = NULL;
    } else if (reg->magic != FV_MAGIC) {
        memset(reg, 0, sizeof(*reg));
        reg->next_key = 0x1000u + ((uint32_t)getpid() << 8);
        reg->next_qpn = 0x100u;
        reg->next_pd = 1;
        reg->qp_err_after = (e = getenv("FAKEVERBS_QP_ERR_AFTER")) && *e ? atoll(e) : -1;
        reg->dmabuf = (e = getenv("FAKEVERBS_DMABUF")) && *e ? atoll(e) != 0 : 1;
        reg->magic = FV_MAGIC;
    }
    flock(regfd, LOCK_UN);
    if (reg == NULL) return;

    link_eth = !((e = getenv("FAKEVERBS_LINK")) && strcmp(e, "ib") == 0);
    if (spec == NULL || *spec == '\0') spec = "fakenic0:0,fakenic1:0";
    while (*spec && ndevs < FV_MAX_DEV) {
        fvDev *d = &devs[ndevs];
        size_t n = strcspn(spec, ",");
        char item[48], *numa, *state;
        snprintf(item, sizeof(item), "%.*s", (int)(n < sizeof(item) ? n : sizeof(item) - 1), spec);
        spec += n + (spec[n] == ',');
        numa = strchr(item, ':');
        if (numa) *numa++ = '\0';
        state = numa ? strchr(numa, ':') : NULL;
        if (state) *state++ = '\0';
        if (item[0] == '\0') continue;
        d->dev.node_type = IBV_NODE_CA;
        d->dev.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->dev.name, sizeof(d->dev.name), "%.47s", item);
        snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", ndevs);
        d->numa = numa && *numa ? atoi(numa) : -1;
        d->down = state && strcmp(state, "down") == 0;
        snprintf(sys, sizeof(sys), "%.190s.sys/%.47s", path, item);
        snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%.250s", sys);
        snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%.250s", sys);
        char dir[400], file[420];
        snprintf(dir, sizeof(dir), "%s/device", sys);
        mkdirs(dir);
        snprintf(file, sizeof(file), "%s/numa_node", dir);
        FILE *f = fopen(file, "w");
        if (f) {
            fprintf(f, "%d\n", d->numa);
            fclose(f);
        }
        ndevs++;
    }
}

static int ready(void) {
    pthread_once(&init_once, fvInit);
    if (reg == NULL) errno = ENODEV;
    return reg != NULL;
}

static int pidGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

/* A free slot, reclaiming those of processes that died without freeing. */
static int mrSlot(void) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < FV_MAX_MR; i++)
            if (!reg->mr[i].used || (pass && pidGone(reg->mr[i].pid))) return i;
    return -1;
}

static int qpSlot(void) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < FV_MAX_QP; i++)
            if (!reg->qp[i].used || (pass && pidGone(reg->qp[i].pid))) return i;
    return -1;
}

static fvMrEnt *mrByKey(uint32_t key) {
    for (int i = 0; i < FV_MAX_MR; i++)
        if (reg->mr[i].used && reg->mr[i].key == key) return &reg->mr[i];
    return NULL;
}

static fvQpEnt *qpByNum(uint32_t qpn) {
    for (int i = 0; i < FV_MAX_QP; i++)
        if (reg->qp[i].used && reg->qp[i].qpn == qpn) return &reg->qp[i];
    return NULL;
}

/* ---- control ---------------------------------------------------------------- */

EXPORT long long fakeverbs_get(const char *name) {
    if (!ready() || name == NULL) return -1;
    for (int i = 0; i < C_DEV_OPS; i++)
        if (strcmp(name, counter_names[i]) == 0) return __atomic_load_n(&reg->counter[i], __ATOMIC_RELAXED);
    int d;
    char tail[16];
    if (sscanf(name, "dev%d_%15s", &d, tail) == 2 && d >= 0 && d < FV_MAX_DEV && strcmp(tail, "ops") == 0)
        return __atomic_load_n(&reg->counter[C_DEV_OPS + d], __ATOMIC_RELAXED);
    if (strcmp(name, "live_qps") == 0 || strcmp(name, "live_mrs") == 0) {
        long long n = 0;
        regLock();
        if (name[5] == 'q') {
            for (int i = 0; i < FV_MAX_QP; i++) n += reg->qp[i].used && !pidGone(reg->qp[i].pid);
        } else {
            for (int i = 0; i < FV_MAX_MR; i++) n += reg->mr[i].used && !pidGone(reg->mr[i].pid);
        }
        regUnlock();
        return n;
    }
    if (strcmp(name, "qp_err_after") == 0) return reg->qp_err_after;
    if (strcmp(name, "dev_fail") == 0) return reg->dev_fail;
    if (strcmp(name, "dmabuf") == 0) return reg->dmabuf;
    return -1;
}

EXPORT int fakeverbs_set(const char *name, long long value) {
    if (!ready() || name == NULL) return -1;
    regLock();
    int rc = 0;
    if (strcmp(name, "qp_err_after") == 0) reg->qp_err_after = value;
    else if (strcmp(name, "dev_fail") == 0) reg->dev_fail = value;
    else if (strcmp(name, "dmabuf") == 0) reg->dmabuf = value != 0;
    else if (strcmp(name, "reset") == 0) memset(reg->counter, 0, sizeof(reg->counter));
    else rc = -1;
    regUnlock();
    return rc;
}

/* ---- devices ------------------------------------------------------------------ */

EXPORT struct ibv_device **ibv_get_device_list(int *num) {
    struct ibv_device **list;
    if (!ready()) return NULL;
    if ((list = calloc((size_t)ndevs + 1, sizeof(*list))) == NULL) return NULL;
    for (int i = 0; i < ndevs; i++) list[i] = &devs[i].dev;
    if (num) *num = ndevs;
    return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device ? device->name : NULL; }

static int ppollCq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int ppostSend(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
    fvCtx *c;
    if (!ready()) return NULL;
    if (device < &devs[0].dev || (fvDev *)device >= devs + ndevs) {
        errno = ENODEV;
        return NULL;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL) return NULL;
    c->dev = (int)((fvDev *)device - devs);
    c->ctx.device = device;
    c->ctx.cmd_fd = c->ctx.async_fd = -1;
    c->ctx.num_comp_vectors = 1;
    c->ctx.ops.poll_cq = ppollCq;
    c->ctx.ops.post_send = ppostSend;
    pthread_mutex_init(&c->ctx.mutex, NULL);
    return &c->ctx;
}

EXPORT int ibv_close_device(struct ibv_context *context) {
    free(context);
    return 0;
}

static int devOf(struct ibv_context *ctx) { return ((fvCtx *)ctx)->dev; }

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a) {
    int d = devOf(context);
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "fake-1.0");
    a->node_guid = htobe64(0x0200000000000000ull | (uint64_t)(d + 1));
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = UINT64_MAX;
    a->page_size_cap = 4096;
    a->vendor_id = 0xfa4e;
    a->max_qp = FV_MAX_QP;
    a->max_qp_wr = FV_MAX_WR;
    a->max_sge = 4;
    a->max_cq = 1 << 16;
    a->max_cqe = FV_MAX_CQE;
    a->max_mr = FV_MAX_MR;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = FV_RD_ATOM;
    a->max_qp_init_rd_atom = FV_RD_ATOM;
    a->max_res_rd_atom = FV_RD_ATOM * FV_MAX_QP;
    a->max_pkeys = 1;
    a->phys_port_cnt = 1;
    return 0;
}

/* Only the fields of the old, shorter layout the library's symbol fills. */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port, struct _compat_ibv_port_attr *out) {
    struct ibv_port_attr *a = (struct ibv_port_attr *)out;
    int d = devOf(context);
    if (port != 1) return EINVAL;
    a->state = devs[d].down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    a->max_mtu = a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = FV_GIDS;
    a->max_msg_sz = 1u << 31;
    a->pkey_tbl_len = 1;
    a->lid = link_eth ? 0 : (uint16_t)(d + 1);
    a->phys_state = devs[d].down ? 3 : 5; /* Disabled / LinkUp */
    a->link_layer = link_eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

/* Index 0: a link-local GID; 1: IPv4-mapped 127.0.0.<dev+1>; the rest empty. */
EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid) {
    int d = devOf(context);
    if (port != 1 || index < 0 || index >= FV_GIDS) return -1;
    memset(gid, 0, sizeof(*gid));
    if (index == 0) {
        gid->raw[0] = 0xfe;
        gid->raw[1] = 0x80;
        gid->raw[15] = (uint8_t)(d + 1);
    } else if (index == 1) {
        gid->raw[10] = gid->raw[11] = 0xff;
        gid->raw[12] = 127;
        gid->raw[15] = (uint8_t)(d + 1);
    }
    return 0;
}

/* ---- protection domains, memory regions ---------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
    fvPd *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    p->pd.context = context;
    regLock();
    p->pd.handle = reg->next_pd++;
    regUnlock();
    return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
    fvPd *p = (fvPd *)pd;
    if (__atomic_load_n(&p->refs, __ATOMIC_RELAXED)) return EBUSY;
    free(p);
    return 0;
}

static struct ibv_mr *mrAdd(struct ibv_pd *pd, uint64_t addr, size_t len, int access, void *map, size_t maplen,
                            uint64_t mapaddr) {
    fvMr *m;
    int slot;

    /* The kernel's rules: remote write or atomic access needs local write. */
    if (len == 0 || ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
        errno = EINVAL;
        return NULL;
    }
    if ((m = calloc(1, sizeof(*m))) == NULL) return NULL;
    regLock();
    if ((slot = mrSlot()) < 0) {
        regUnlock();
        free(m);
        errno = ENOMEM;
        return NULL;
    }
    fvMrEnt *e = &reg->mr[slot];
    memset(e, 0, sizeof(*e));
    e->used = 1;
    e->dmabuf = map != NULL;
    e->access = access;
    e->dev = devOf(pd->context);
    e->key = reg->next_key++;
    e->pd = pd->handle;
    e->pid = getpid();
    e->addr = addr;
    e->len = len;
    e->map = mapaddr;
    regUnlock();
    count(C_MRS, 1);
    if (map) count(C_DMABUF_MRS, 1);
    m->slot = slot;
    m->map = map;
    m->maplen = maplen;
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = (void *)(uintptr_t)addr;
    m->mr.length = len;
    m->mr.handle = e->key;
    m->mr.lkey = m->mr.rkey = e->key;
    __atomic_add_fetch(&((fvPd *)pd)->refs, 1, __ATOMIC_RELAXED);
    return &m->mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
    if (addr == NULL) {
        errno = EFAULT;
        return NULL;
    }
    return mrAdd(pd, (uint64_t)(uintptr_t)addr, length, access, NULL, 0, (uint64_t)(uintptr_t)addr);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                        int access) {
    uint64_t pg = offset & ~(uint64_t)4095;
    size_t maplen = length + (size_t)(offset - pg);
    void *map;
    struct ibv_mr *mr;

    if (!ready()) return NULL;
    if (!reg->dmabuf) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pg);
    if (map == MAP_FAILED) {
        errno = EINVAL;
        return NULL;
    }
    mr = mrAdd(pd, iova, length, access, map, maplen, (uint64_t)(uintptr_t)map + (offset - pg));
    if (mr == NULL) munmap(map, maplen);
    return mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
    fvMr *m = (fvMr *)mr;
    regLock();
    reg->mr[m->slot].used = 0;
    regUnlock();
    count(C_MRS, -1);
    if (m->map) {
        munmap(m->map, m->maplen);
        count(C_DMABUF_MRS, -1);
    }
    __atomic_sub_fetch(&((fvPd *)mr->pd)->refs, 1, __ATOMIC_RELAXED);
    free(m);
    return 0;
}

/* ---- completion queues ---------------------------------------------------------- */

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector) {
    fvCq *c;
    (void)comp_vector;
    if (cqe < 1 || cqe > FV_MAX_CQE || channel != NULL) { /* no completion channels: nothing here waits */
        errno = EINVAL;
        return NULL;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL || (c->ring = calloc((size_t)cqe, sizeof(*c->ring))) == NULL) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    c->cap = cqe;
    pthread_mutex_init(&c->lock, NULL);
    c->cq.context = context;
    c->cq.cq_context = cq_context;
    c->cq.cqe = cqe;
    pthread_mutex_init(&c->cq.mutex, NULL);
    pthread_cond_init(&c->cq.cond, NULL);
    return &c->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
    fvCq *c = (fvCq *)cq;
    if (__atomic_load_n(&c->refs, __ATOMIC_RELAXED)) return EBUSY;
    pthread_mutex_destroy(&c->lock);
    free(c->ring);
    free(c);
    return 0;
}

static void cqPush(fvCq *c, const struct ibv_wc *wc, fvQp *q) {
    pthread_mutex_lock(&c->lock);
    if (c->n == c->cap) {
        c->overrun = 1; /* the CQ is now in error */
    } else {
        fvCqe *e = &c->ring[(c->head + c->n++) % c->cap];
        e->wc = *wc;
        e->qp = q;
        q->outstanding++;
    }
    pthread_mutex_unlock(&c->lock);
}

/* A destroyed QP's completions stay to be reaped, without their QP. */
static void cqForget(fvCq *c, fvQp *q) {
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (c->ring[(c->head + i) % c->cap].qp == q) c->ring[(c->head + i) % c->cap].qp = NULL;
    pthread_mutex_unlock(&c->lock);
}

static int ppollCq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    fvCq *c = (fvCq *)cq;
    int k = 0;
    pthread_mutex_lock(&c->lock);
    if (c->overrun) {
        pthread_mutex_unlock(&c->lock);
        return -1;
    }
    for (; k < n && c->n; k++) {
        fvCqe *e = &c->ring[c->head];
        wc[k] = e->wc;
        if (e->qp) e->qp->outstanding--;
        c->head = (c->head + 1) % c->cap;
        c->n--;
    }
    pthread_mutex_unlock(&c->lock);
    return k;
}

/* ---- queue pairs ----------------------------------------------------------------- */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
    fvQp *q;
    int slot;

    if (a == NULL || a->qp_type != IBV_QPT_RC || a->send_cq == NULL || a->recv_cq == NULL || a->srq) {
        errno = a && a->qp_type != IBV_QPT_RC ? EOPNOTSUPP : EINVAL;
        return NULL;
    }
    if (a->send_cq->context != pd->context || a->recv_cq->context != pd->context || a->cap.max_send_wr > FV_MAX_WR ||
        a->cap.max_recv_wr > FV_MAX_WR || a->cap.max_send_sge > 4 || a->cap.max_recv_sge > 4) {
        errno = EINVAL;
        return NULL;
    }
    if ((q = calloc(1, sizeof(*q))) == NULL) return NULL;
    regLock();
    if ((slot = qpSlot()) < 0) {
        regUnlock();
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    fvQpEnt *e = &reg->qp[slot];
    memset(e, 0, sizeof(*e));
    e->used = 1;
    e->state = IBV_QPS_RESET;
    e->dev = devOf(pd->context);
    e->qpn = reg->next_qpn++ & 0xffffff;
    e->pd = pd->handle;
    e->pid = getpid();
    regUnlock();
    count(C_QPS, 1);
    q->slot = slot;
    q->dev = e->dev;
    q->max_send_wr = a->cap.max_send_wr ? a->cap.max_send_wr : 1;
    q->max_send_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
    q->sq_sig_all = a->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.handle = e->qpn;
    q->qp.qp_num = e->qpn;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    __atomic_add_fetch(&((fvPd *)pd)->refs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&((fvCq *)a->send_cq)->refs, 1, __ATOMIC_RELAXED);
    if (a->recv_cq != a->send_cq) __atomic_add_fetch(&((fvCq *)a->recv_cq)->refs, 1, __ATOMIC_RELAXED);
    return &q->qp;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
    fvQp *q = (fvQp *)qp;
    regLock();
    reg->qp[q->slot].used = 0;
    regUnlock();
    count(C_QPS, -1);
    cqForget((fvCq *)qp->send_cq, q);
    __atomic_sub_fetch(&((fvPd *)qp->pd)->refs, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&((fvCq *)qp->send_cq)->refs, 1, __ATOMIC_RELAXED);
    if (qp->recv_cq != qp->send_cq) __atomic_sub_fetch(&((fvCq *)qp->recv_cq)->refs, 1, __ATOMIC_RELAXED);
    free(q);
    return 0;
}

static void qpSetState(fvQp *q, enum ibv_qp_state s) {
    q->qp.state = s;
    regLock();
    reg->qp[q->slot].state = s;
    reg->qp[q->slot].dest = q->dest;
    regUnlock();
}

static int refuse(void) {
    count(C_QP_REFUSED, 1);
    errno = EINVAL;
    return EINVAL;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
    fvQp *q = (fvQp *)qp;
    enum ibv_qp_state cur = qp->state, to;
    int need = 0;

    if (!(mask & IBV_QP_STATE)) return refuse(); /* the fake only does transitions */
    to = a->qp_state;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        if (to == IBV_QPS_RESET) q->dest = 0, q->outstanding = 0;
        qpSetState(q, to);
        return 0;
    }
    if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT) need = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    else if (cur == IBV_QPS_INIT && to == IBV_QPS_INIT) need = 0;
    else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR)
        need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER;
    else if (cur == IBV_QPS_RTR && to == IBV_QPS_RTS)
        need = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    else if (cur == IBV_QPS_RTS && to == IBV_QPS_RTS) need = 0;
    else return refuse();
    if ((mask & need) != need) return refuse();
    if ((mask & IBV_QP_PORT) && a->port_num != 1) return refuse();
    if ((mask & IBV_QP_PORT)) q->port = a->port_num;
    if (to == IBV_QPS_RTR) {
        if (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096) return refuse();
        if (a->max_dest_rd_atomic > FV_RD_ATOM) return refuse();
        if (a->dest_qp_num == 0 || a->dest_qp_num > 0xffffff || a->rq_psn > 0xffffff) return refuse();
        if (a->ah_attr.port_num != 1) return refuse();
        /* RoCE has no LIDs: the address vector must carry the GRH. */
        if (link_eth && (!a->ah_attr.is_global || a->ah_attr.grh.sgid_index >= FV_GIDS)) return refuse();
        if (!link_eth && a->ah_attr.dlid == 0) return refuse();
        q->dest = a->dest_qp_num;
    }
    if (to == IBV_QPS_RTS && (a->max_rd_atomic > FV_RD_ATOM || a->sq_psn > 0xffffff || a->retry_cnt > 7 ||
                              a->rnr_retry > 7 || a->timeout > 31))
        return refuse();
    qpSetState(q, to);
    return 0;
}

/* ---- the data path ------------------------------------------------------------------ */

/* Runs one RDMA READ or WRITE; returns its completion status. The QP moves
 * to ERR on any error, as an RC QP does. */
static enum ibv_wc_status runWr(fvQp *q, struct ibv_send_wr *wr, uint32_t *bytes) {
    struct iovec lv[4], rv;
    uint64_t len = 0;
    int write = wr->opcode == IBV_WR_RDMA_WRITE;
    enum ibv_wc_status st = IBV_WC_SUCCESS;
    pid_t rpid = 0;

    *bytes = 0;
    if (q->qp.state == IBV_QPS_ERR) return IBV_WC_WR_FLUSH_ERR;
    regLock();
    if ((reg->dev_fail >> q->dev) & 1) {
        st = IBV_WC_RETRY_EXC_ERR;
        goto out;
    }
    if (reg->qp_err_after == 0) {
        reg->qp_err_after = -1;
        st = IBV_WC_RETRY_EXC_ERR;
        goto out;
    }
    if (reg->qp_err_after > 0) reg->qp_err_after--;
    for (int i = 0; i < wr->num_sge; i++) {
        fvMrEnt *m = mrByKey(wr->sg_list[i].lkey);
        uint64_t a = wr->sg_list[i].addr, n = wr->sg_list[i].length;
        if (m == NULL || m->pid != getpid() || m->pd != q->qp.pd->handle || a < m->addr || n > m->len ||
            a - m->addr > m->len - n || (!write && !(m->access & IBV_ACCESS_LOCAL_WRITE))) {
            st = IBV_WC_LOC_PROT_ERR;
            goto out;
        }
        lv[i].iov_base = (void *)(uintptr_t)(m->map + (a - m->addr));
        lv[i].iov_len = n;
        len += n;
    }
    fvQpEnt *r = qpByNum(q->dest);
    if (r == NULL || (r->state != IBV_QPS_RTR && r->state != IBV_QPS_RTS) || r->dest != q->qp.qp_num ||
        pidGone(r->pid)) {
        st = IBV_WC_RETRY_EXC_ERR; /* nobody answers: the requester retries, then gives up */
        goto out;
    }
    fvMrEnt *m = mrByKey(wr->wr.rdma.rkey);
    uint64_t ra = wr->wr.rdma.remote_addr;
    if (m == NULL || m->pid != r->pid || m->pd != r->pd || !(m->access & (write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ)) ||
        ra < m->addr || len > m->len || ra - m->addr > m->len - len) {
        st = IBV_WC_REM_ACCESS_ERR;
        goto out;
    }
    rv.iov_base = (void *)(uintptr_t)(m->map + (ra - m->addr));
    rv.iov_len = len;
    rpid = r->pid;
out:
    regUnlock();
    if (st == IBV_WC_SUCCESS && len) {
        ssize_t k = write ? process_vm_writev(rpid, lv, (unsigned long)wr->num_sge, &rv, 1, 0)
                          : process_vm_readv(rpid, lv, (unsigned long)wr->num_sge, &rv, 1, 0);
        if (k != (ssize_t)len) st = k < 0 && errno == EFAULT ? IBV_WC_REM_ACCESS_ERR : IBV_WC_RETRY_EXC_ERR;
    }
    if (st == IBV_WC_SUCCESS) {
        count(write ? C_WRITE_OPS : C_READ_OPS, 1);
        count(write ? C_WRITE_BYTES : C_READ_BYTES, (long long)len);
        count(C_DEV_OPS + q->dev, 1);
        *bytes = (uint32_t)len;
    } else {
        count(st == IBV_WC_REM_ACCESS_ERR ? C_REM_ACCESS : st == IBV_WC_LOC_PROT_ERR ? C_LOC_PROT : C_RETRY_EXC, 1);
        qpSetState(q, IBV_QPS_ERR);
    }
    return st;
}

static int ppostSend(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    fvQp *q = (fvQp *)qp;

    for (; wr; wr = wr->next) {
        int signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
        struct ibv_wc wc;
        int rc = 0;

        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) rc = EINVAL;
        else if (wr->opcode != IBV_WR_RDMA_READ && wr->opcode != IBV_WR_RDMA_WRITE) rc = EINVAL;
        else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_send_sge) rc = EINVAL;
        else if ((uint32_t)q->outstanding >= q->max_send_wr) rc = ENOMEM;
        if (rc) {
            *bad = wr;
            errno = rc;
            return rc;
        }
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = wr->wr_id;
        wc.status = runWr(q, wr, &wc.byte_len);
        wc.opcode = wr->opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_RDMA_READ;
        wc.qp_num = qp->qp_num;
        if (wc.status == IBV_WC_WR_FLUSH_ERR) count(C_FLUSH, 1);
        if (signaled || wc.status != IBV_WC_SUCCESS) cqPush((fvCq *)qp->send_cq, &wc, q);
    }
    return 0;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
    switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    default: return "unknown";
    }
}
