/* benchlib.c -- mooncake-benchmark rows driven through libmooncake, and the
 * baselines they are judged against.
 *
 * The RESP engine (benchconn.c) measures a server; these rows
 * measure what an inference engine sees: a put or get through the library,
 * metadata round trips and the data path (shm, tcp data plane, rdma)
 * included. Each client is a thread with its own handle doing one call at
 * a time, as an engine's worker would; --batch N turns a call into
 * mc_batch_put/mc_batch_get of N keys (one op per key); mcputv/mcgetv are
 * mc_put_fromv/mc_get_intov of the value cut into --iov equal buffers.
 *
 * Baselines, measured in the same run so that ratios are fair on a noisy
 * machine:
 *  - memcpy: one thread copying the value into a destination that walks a
 *    512 MiB arena, as puts walk a pool -- the ceiling for shm, which is one
 *    memcpy per replica. memcpyhot copies between two buffers that stay in
 *    cache when small: the flattering number, for reference.
 *  - rawtcp: one loopback TCP connection, a writer thread sending the value
 *    in one write() call per 4 MiB and a reader reading into a buffer --
 *    the ceiling for the tcp data plane.
 * Their "ops" are copies (or values sent), so ops/s and GB/s compare
 * directly with the library rows of the same size.
 *
 * Buffers are faulted in before the clock starts (12 us per fresh page on
 * these machines would otherwise dominate), and every get can be checked
 * byte for byte (--check) against the pattern the puts wrote.
 *
 * Every row stops at the deadline (--duration, or the --max-time cap) and
 * counts the calls done in lib_done, which benchprogress.c's thread reads
 * for the progress line: one relaxed atomic add per call on the library
 * threads (a call is microseconds at least), a plain relaxed store in the
 * single-threaded baselines, whose copies can be nanoseconds.
 */
#include "anet.h"
#include "benchlib.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "benchprogress.h"
#include "mooncake.h"

static uint64_t nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *mapFaulted(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 0, n);
    return p;
}

/* Byte j of key k's value: cheap to produce and to check, differs per key. */
static void fillValue(unsigned char *p, size_t n, uint64_t k) {
    uint64_t x = k * 0x9e3779b97f4a7c15ULL + n;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + j, &x, 8);
    }
    for (; j < n; j++) p[j] = (unsigned char)(k + j);
}

typedef struct libThread {
    const benchLibConfig *cfg;
    const char *test;
    size_t vlen;
    int id;
    pthread_t tid;
    mc_client *mc;
    unsigned char **vals;       /* slots: one buffer per key (a batch, or --span's worth) */
    int nslots;                 /* a multiple of the batch */
    long long calls;            /* made so far: which batch of slots is next */
    unsigned char *expect;      /* --check: what a get must return */
    struct iovec *iov;          /* mcputv/mcgetv: the value's buffers */
    int iovcnt;
    benchStats st;
} libThread;

static _Atomic long long issued;
static _Atomic uint64_t lib_done;   /* calls (or copies) done in the running row */
static uint64_t deadline_ns;        /* 0: none */

/* When a row that starts at `start` stops: the end of --duration or the
 * --max-time cap, whichever comes first; 0 for neither. */
static uint64_t rowDeadline(const benchLibConfig *cfg, uint64_t start) {
    uint64_t dl = cfg->duration > 0 ? start + (uint64_t)(cfg->duration * 1e9) : 0;
    if (cfg->maxtime > 0) {
        uint64_t cap = start + (uint64_t)(cfg->maxtime * 1e9);
        if (!dl || cap < dl) dl = cap;
    }
    return dl;
}

static uint64_t libDone(void *arg) {
    (void)arg;
    return atomic_load_explicit(&lib_done, memory_order_relaxed);
}

/* Progress for the calls of one row; total <= 0 if it runs until its deadline. */
static void rowProgress(const benchLibConfig *cfg, long long total, uint64_t start) {
    atomic_store(&lib_done, 0);
    progressStart(cfg->label ? cfg->label : "", total, start, deadline_ns, libDone, NULL);
}

/* The next op's number, or -1 when the phase is over. */
static long long nextOp(const benchLibConfig *cfg, int per) {
    if (deadline_ns && nowNs() >= deadline_ns) return -1;
    long long n = atomic_fetch_add(&issued, per);
    return cfg->duration > 0 || n < cfg->requests ? n : -1;
}

static void noteError(libThread *t, const char *what, long long rc) {
    if (!t->st.firsterr[0])
        snprintf(t->st.firsterr, sizeof(t->st.firsterr), "%s: %s (%s)", what, mc_strerror((int)rc),
                 mc_last_error(t->mc));
}

/* One call (a put, a get or a batch of either); recorded unless warming up. */
typedef struct libOp {
    int batch, write;
    mc_put_opts opts;
    mc_kv *kv;
    char (*keys)[64];
    int *pres;
    long long *gres;
} libOp;

static void libOpInit(libThread *t, libOp *o) {
    const benchLibConfig *cfg = t->cfg;
    o->batch = !strcmp(t->test, "mcbput") || !strcmp(t->test, "mcbget") ? cfg->batch : 1;
    o->write = !strcmp(t->test, "mcput") || !strcmp(t->test, "mcbput") || !strcmp(t->test, "mcputv");
    memset(&o->opts, 0, sizeof(o->opts));
    o->opts.replicas = cfg->replicas;
    o->opts.replace = 1;
    o->kv = calloc((size_t)o->batch, sizeof(mc_kv));
    o->keys = calloc((size_t)o->batch, 64);
    o->pres = calloc((size_t)o->batch, sizeof(int));
    o->gres = calloc((size_t)o->batch, sizeof(long long));
    /* Keys: per client (like redis-benchmark without -r), batch slots apart. */
    for (int i = 0; i < o->batch; i++) {
        int klen = snprintf(o->keys[i], 64, "lib:%zu:%d:%d", t->vlen, t->id, i);
        o->kv[i].key = o->keys[i];
        o->kv[i].keylen = (size_t)klen;
        o->kv[i].buf = t->vals[i];
        o->kv[i].len = t->vlen;
    }
}

static void libOpFree(libOp *o) {
    free(o->kv);
    free(o->keys);
    free(o->pres);
    free(o->gres);
}

/* With --span, the call's batch of slots: keys and buffers cycle through
 * the client's span, so the row's working set is the span, not one batch. */
static void libOpSlots(libThread *t, libOp *o) {
    if (t->nslots <= o->batch) return;
    int base = (int)((t->calls * o->batch) % t->nslots);
    for (int i = 0; i < o->batch; i++) {
        int klen = snprintf(o->keys[i], 64, "lib:%zu:%d:%d", t->vlen, t->id, base + i);
        o->kv[i].keylen = (size_t)klen;
        o->kv[i].buf = t->vals[base + i];
    }
}

static void libOpRun(libThread *t, libOp *o, int record) {
    benchStats st;
    memset(&st, 0, sizeof(st));
    libOpSlots(t, o);
    t->calls++;
    mc_kv *kv = o->kv;
    size_t vlen = t->vlen;
    uint64_t t0 = nowNs();
    if (t->iov && o->write) {
        int rc = mc_put_fromv(t->mc, kv[0].key, kv[0].keylen, t->iov, t->iovcnt, &o->opts);
        if (rc != MC_OK) noteError(t, "putv", rc), st.errors++;
        else st.bytes += vlen;
    } else if (t->iov) {
        long long rc = mc_get_intov(t->mc, kv[0].key, kv[0].keylen, t->iov, t->iovcnt);
        if (rc == MC_ERR_NOT_FOUND) st.misses++;
        else if (rc < 0) noteError(t, "getv", rc), st.errors++;
        else {
            st.bytes += (uint64_t)rc;
            if (t->cfg->check && ((size_t)rc != vlen || memcmp(kv[0].buf, t->expect, vlen))) st.badvals++;
        }
    } else if (o->batch == 1 && o->write) {
        int rc = mc_put(t->mc, kv[0].key, kv[0].keylen, kv[0].buf, vlen, &o->opts);
        if (rc != MC_OK) noteError(t, "put", rc), st.errors++;
        else st.bytes += vlen;
    } else if (o->batch == 1) {
        long long rc = mc_get(t->mc, kv[0].key, kv[0].keylen, kv[0].buf, vlen);
        if (rc == MC_ERR_NOT_FOUND) st.misses++;
        else if (rc < 0) noteError(t, "get", rc), st.errors++;
        else {
            st.bytes += (uint64_t)rc;
            if (t->cfg->check && ((size_t)rc != vlen || memcmp(kv[0].buf, t->expect, vlen))) st.badvals++;
        }
    } else if (o->write) {
        int rc = mc_batch_put(t->mc, (size_t)o->batch, kv, &o->opts, o->pres);
        if (rc < 0) noteError(t, "batch put", rc), st.errors++;
        for (int i = 0; i < o->batch && rc >= 0; i++) {
            if (o->pres[i] == MC_OK) st.bytes += vlen;
            else noteError(t, "batch put item", o->pres[i]), st.errors++;
        }
    } else {
        int rc = mc_batch_get(t->mc, (size_t)o->batch, kv, o->gres);
        if (rc < 0) noteError(t, "batch get", rc), st.errors++;
        for (int i = 0; i < o->batch && rc >= 0; i++) {
            if (o->gres[i] == MC_ERR_NOT_FOUND) st.misses++;
            else if (o->gres[i] < 0) noteError(t, "batch get item", o->gres[i]), st.errors++;
            else {
                st.bytes += (uint64_t)o->gres[i];
                if (t->cfg->check && memcmp(kv[i].buf, t->expect, vlen)) st.badvals++;
            }
        }
    }
    uint64_t dt = nowNs() - t0;
    if (!record) {
        t->st.errors = 0;
        t->st.firsterr[0] = '\0';
        return;
    }
    for (int i = 0; i < o->batch; i++) histRecord(&t->st.lat, dt);
    t->st.ops += (uint64_t)o->batch;
    t->st.bytes += st.bytes;
    t->st.errors += st.errors;
    t->st.misses += st.misses;
    t->st.badvals += st.badvals;
}

static void *libThreadMain(void *arg) {
    libThread *t = arg;
    libOp o;
    libOpInit(t, &o);
    while (nextOp(t->cfg, 1) >= 0) {
        libOpRun(t, &o, 1);
        atomic_fetch_add_explicit(&lib_done, 1, memory_order_relaxed);
    }
    libOpFree(&o);
    return NULL;
}

static int runLibrary(const char *test, size_t vlen, const benchLibConfig *cfg, benchStats *out, double *secs) {
    int nthreads = cfg->clients;
    int batch = !strcmp(test, "mcbput") || !strcmp(test, "mcbget") ? cfg->batch : 1;
    libThread *th = calloc((size_t)nthreads, sizeof(libThread));
    int rc = 0;
    for (int i = 0; i < nthreads; i++) {
        libThread *t = &th[i];
        char err[256];
        t->cfg = cfg;
        t->test = test;
        t->vlen = vlen;
        t->id = i;
        histReset(&t->st.lat);
        t->mc = mc_connect(cfg->uri, cfg->auth, err, sizeof(err));
        if (t->mc == NULL) {
            fprintf(stderr, "mooncake-benchmark: %s: %s\n", cfg->uri, err);
            rc = -1;
            goto out;
        }
        mc_set_transport(t->mc, cfg->transport);
        if (cfg->streams > 0) mc_set_streams(t->mc, cfg->streams);
        /* --span: as many slots as fit in it, whole batches (one at least);
         * the iov rows keep one buffer. */
        long long slots = cfg->span && !cfg->iov ? (long long)(cfg->span / vlen) / batch * batch : batch;
        t->nslots = slots < batch ? batch : (int)slots;
        t->vals = calloc((size_t)t->nslots, sizeof(*t->vals));
        for (int b = 0; b < t->nslots; b++) {
            t->vals[b] = mapFaulted(vlen);
            if (t->vals[b] == NULL) {
                fprintf(stderr, "mooncake-benchmark: out of memory for %d x %zu bytes\n", t->nslots, vlen);
                rc = -1;
                goto out;
            }
            fillValue(t->vals[b], vlen, (uint64_t)i);
        }
        if (!strcmp(test, "mcputv") || !strcmp(test, "mcgetv")) {
            /* Equal buffers of the one value buffer (the last takes the
             * remainder), registered as put_from/get_into want. */
            t->iovcnt = cfg->iov > 0 ? cfg->iov : 1;
            t->iov = calloc((size_t)t->iovcnt, sizeof(*t->iov));
            size_t piece = vlen / (size_t)t->iovcnt;
            for (int k = 0; t->iov && k < t->iovcnt; k++) {
                t->iov[k].iov_base = t->vals[0] + (size_t)k * piece;
                t->iov[k].iov_len = k == t->iovcnt - 1 ? vlen - (size_t)k * piece : piece;
            }
            if (t->iov == NULL || mc_register(t->mc, t->vals[0], vlen, MC_MEM_HOST) != MC_OK) {
                fprintf(stderr, "mooncake-benchmark: cannot register the value buffer\n");
                rc = -1;
                goto out;
            }
        }
        if (cfg->check) {
            t->expect = mapFaulted(vlen);
            fillValue(t->expect, vlen, (uint64_t)i);
        }
        /* One call off the clock: it attaches and maps the segments (a
         * one-time cost per process) and opens the data connections. */
        libOp o;
        libOpInit(t, &o);
        uint64_t f0 = nowNs();
        libOpRun(t, &o, 0);
        if (i == 0) out->first_ns = nowNs() - f0; /* reported: the cost a new client pays once */
        /* --warmup: more calls off the clock, so that a row measures the
         * steady state (libmooncake moves a chunk through the segment's file
         * for its first few copies, then maps it: mc_shm.c) */
        for (long long w = 1; w < cfg->warmup; w++) libOpRun(t, &o, 0);
        libOpFree(&o);
    }
    atomic_store(&issued, 0);
    uint64_t start = nowNs();
    deadline_ns = rowDeadline(cfg, start);
    rowProgress(cfg, cfg->duration > 0 ? -1 : cfg->requests, start);
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i].tid, NULL, libThreadMain, &th[i]);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i].tid, NULL);
    *secs = (nowNs() - start) / 1e9;
    progressStop();
    out->requests = libDone(NULL);
    out->capped = cfg->duration <= 0 && (long long)out->requests < cfg->requests;
    for (int i = 0; i < nthreads; i++) {
        histMerge(&out->lat, &th[i].st.lat);
        out->ops += th[i].st.ops;
        out->bytes += th[i].st.bytes;
        out->errors += th[i].st.errors;
        out->misses += th[i].st.misses;
        out->badvals += th[i].st.badvals;
        if (!out->firsterr[0] && th[i].st.firsterr[0]) memcpy(out->firsterr, th[i].st.firsterr, sizeof(out->firsterr));
    }
out:
    for (int i = 0; i < nthreads; i++) {
        mc_close(th[i].mc);
        for (int b = 0; th[i].vals && b < th[i].nslots; b++)
            if (th[i].vals[b]) munmap(th[i].vals[b], vlen);
        free(th[i].vals);
        free(th[i].iov);
        if (th[i].expect) munmap(th[i].expect, vlen);
    }
    free(th);
    return rc;
}

/* ---- baselines ------------------------------------------------------------ */

static long long baselineOps(const benchLibConfig *cfg, size_t vlen) {
    if (cfg->duration > 0) return -1; /* until the deadline */
    long long n = cfg->requests;
    /* Enough bytes to be measurable, not so many the baseline takes longer than the test. */
    long long min = (long long)((256u << 20) / (vlen ? vlen : 1)) + 1;
    return n < min ? min : n;
}

/* memcpy into a destination that moves through an arena bigger than the
 * caches, as a put into a pool does ("memcpy"), or between two buffers that
 * stay cached when small ("memcpyhot", the flattering number). */
static int runMemcpy(size_t vlen, const benchLibConfig *cfg, benchStats *out, double *secs, int hot) {
    size_t arena = hot ? 2 * vlen : (vlen * 4 > (512u << 20) ? vlen * 4 : (512u << 20));
    arena -= arena % (vlen ? vlen : 1);
    unsigned char *src = mapFaulted(vlen), *dst = mapFaulted(arena);
    if (!src || !dst) return -1;
    fillValue(src, vlen, 1);
    size_t slots = arena / vlen;
    long long n = baselineOps(cfg, vlen);
    uint64_t start = nowNs();
    deadline_ns = rowDeadline(cfg, start);
    rowProgress(cfg, n, start);
    for (long long i = 0; n < 0 || i < n; i++) {
        uint64_t t0 = nowNs();
        memcpy(dst + (size_t)(i % (long long)slots) * vlen, src, vlen);
        uint64_t t1 = nowNs();
        histRecord(&out->lat, t1 - t0);
        out->ops++;
        out->bytes += vlen;
        atomic_store_explicit(&lib_done, out->ops, memory_order_relaxed);
        if (deadline_ns && t1 >= deadline_ns) break;
    }
    *secs = (nowNs() - start) / 1e9;
    progressStop();
    out->requests = out->ops;
    out->capped = n >= 0 && (long long)out->ops < n;
    munmap(src, vlen);
    munmap(dst, arena);
    return 0;
}

typedef struct {
    int fd;
    size_t vlen;
    long long count;
    unsigned char *buf;
} tcpSide;

static void *rawTcpWriter(void *arg) {
    tcpSide *s = arg;
    for (long long i = 0; i < s->count; i++) {
        size_t off = 0;
        while (off < s->vlen) {
            size_t chunk = s->vlen - off < (4u << 20) ? s->vlen - off : (4u << 20);
            ssize_t w = write(s->fd, s->buf + off, chunk);
            if (w <= 0) {
                if (w < 0 && errno == EINTR) continue;
                return NULL;
            }
            off += (size_t)w;
        }
    }
    return NULL;
}

static int runRawTcp(size_t vlen, const benchLibConfig *cfg, benchStats *out, double *secs) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0), wfd = -1, rfd = -1, rc = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof(sa);
    unsigned char *wb = mapFaulted(vlen), *rb = mapFaulted(vlen);
    if (lfd < 0 || !wb || !rb || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&sa, &salen))
        goto out;
    wfd = socket(AF_INET, SOCK_STREAM, 0);
    if (wfd < 0 || connect(wfd, (struct sockaddr *)&sa, sizeof(sa))) goto out;
    rfd = accept(lfd, NULL, NULL);
    if (rfd < 0) goto out;
    anetEnableTcpNoDelay(NULL, wfd);
    /* The same congestion control the library's connections get, so the
     * baseline is the best this path can do (MC_TCP_CONGESTION=system: the
     * system default for both). */
    anetTuneLocalCongestion(wfd);
    anetTuneLocalCongestion(rfd);
    long long n = baselineOps(cfg, vlen);
    if (n < 0) n = (long long)(cfg->duration * 2e9 / (double)(vlen ? vlen : 1)) + 1; /* ~2 GB/s guess */
    tcpSide ws = {.fd = wfd, .vlen = vlen, .count = n, .buf = wb};
    pthread_t tid;
    uint64_t start = nowNs();
    deadline_ns = rowDeadline(cfg, start);
    rowProgress(cfg, cfg->duration > 0 ? -1 : n, start);
    pthread_create(&tid, NULL, rawTcpWriter, &ws);
    for (long long i = 0; i < n; i++) {
        uint64_t t0 = nowNs();
        if (deadline_ns && t0 >= deadline_ns) break;
        size_t got = 0;
        while (got < vlen) {
            ssize_t r = read(rfd, rb + got, vlen - got < (4u << 20) ? vlen - got : (4u << 20));
            if (r <= 0) {
                if (r < 0 && errno == EINTR) continue;
                break;
            }
            got += (size_t)r;
        }
        if (got < vlen) break;
        histRecord(&out->lat, nowNs() - t0);
        out->ops++;
        out->bytes += vlen;
        atomic_store_explicit(&lib_done, out->ops, memory_order_relaxed);
    }
    *secs = (nowNs() - start) / 1e9;
    progressStop();
    out->requests = out->ops;
    out->capped = cfg->duration <= 0 && (long long)out->ops < n;
    if ((long long)out->ops < n) {
        /* Stopped early: the writer may be blocked on a full socket, and
         * only a reset wakes it (close with unread data sends one; a
         * shutdown does not). */
        close(rfd);
        rfd = -1;
    } else {
        shutdown(rfd, SHUT_RDWR);
    }
    pthread_join(tid, NULL);
    rc = 0;
out:
    if (lfd >= 0) close(lfd);
    if (wfd >= 0) close(wfd);
    if (rfd >= 0) close(rfd);
    if (wb) munmap(wb, vlen);
    if (rb) munmap(rb, vlen);
    return rc;
}

/* ---- entry ---------------------------------------------------------------- */

static const struct {
    const char *name, *label;
} libTests[] = {
    {"memcpy", "memcpy"},      {"memcpyhot", "memcpy hot"}, {"rawtcp", "raw TCP"},      {"mcput", "mc_put"},
    {"mcget", "mc_get"},       {"mcbput", "mc_batch_put"}, {"mcbget", "mc_batch_get"},
    {"mcputv", "mc_put_fromv"}, {"mcgetv", "mc_get_intov"},
};

const char *benchLibLabel(const char *name) {
    for (size_t i = 0; i < sizeof(libTests) / sizeof(libTests[0]); i++)
        if (!strcasecmp(name, libTests[i].name)) return libTests[i].label;
    return NULL;
}

int benchLibRun(const char *name, size_t vlen, const benchLibConfig *cfg, benchStats *out, double *secs) {
    memset(out, 0, sizeof(*out));
    histReset(&out->lat);
    *secs = 0;
    if (!strcasecmp(name, "memcpy")) return runMemcpy(vlen, cfg, out, secs, 0);
    if (!strcasecmp(name, "memcpyhot")) return runMemcpy(vlen, cfg, out, secs, 1);
    if (!strcasecmp(name, "rawtcp")) return runRawTcp(vlen, cfg, out, secs);
    return runLibrary(name, vlen, cfg, out, secs);
}
