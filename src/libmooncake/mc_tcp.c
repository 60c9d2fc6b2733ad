/* mc_tcp.c -- libmooncake's TCP data plane.
 *
 * One transfer is one SEG.WRITE (payload sent from the caller's buffers with
 * sendmsg) or SEG.READ (reply read into the caller's buffers with recvmsg)
 * on a data connection; batches queue many of them before reading any
 * reply. A transfer's memory is an iovec list (one entry for a contiguous
 * buffer): scatter-gather puts and gets (mc_put_fromv, mc_get_intov) move
 * each buffer in place, the kernel gathering and scattering them, so
 * several buffers cost no staging copy and no extra syscalls while their
 * count stays within a sendmsg/recvmsg window (64 large pieces; small ones
 * are copied into the output buffer as any small argument is).
 *
 * Why several connections per peer: one TCP stream is carried by one core
 * on each side, and by one flow through the network, so a single large
 * transfer leaves other cores, NIC queues and ECMP paths idle. A transfer
 * of a MiB or more is cut into slices of at least MC_TCP_SLICE_MIN, each a
 * SEG.WRITE/SEG.READ of its own sub-range (the server accepts any range
 * inside the extent), sent at the same time on different connections. The
 * caller's thread carries the first slice on its usual connection; worker
 * threads, each keeping its own connections, carry the rest. Threads and
 * not one thread with non-blocking sockets, because the costly part of a
 * stream is the kernel's copy, which runs on the thread that calls
 * write/read: only more threads spread it over cores. A peer that serves a
 * connection per thread (a segment hosted by libmooncake) then copies the
 * slices in parallel too. Even a single-threaded server gains: on loopback
 * half of a stream's kernel work (the sender's copy and the receive path)
 * runs on the sending thread. Measured here (2 vCPUs, mooncake-server):
 * 1 MiB put 2.7 -> 3.3-4.4 GB/s with 2 streams, 4 MiB 3.2-3.5 -> 4.1-4.3,
 * raw single-stream TCP being 4.0-4.4. More streams than cores lose (4
 * streams: 2.3-2.5 GB/s at 1 MiB), hence one per CPU, at most 4, by default.
 * Those figures were for BBR-paced loopback streams. Unpaced (anet.c), one
 * loopback stream moves 6.3 GB/s at 1 MiB and two only 3.8: the pacing
 * timer, not the copy, was what a second stream had spread over the cores.
 * So a same-host peer on an unpaced connection gets one stream by default.
 *
 * Batches of small values: a command per 4 KiB value costs the server more
 * in parsing and dispatch than the bytes do, so runs of small transfers to
 * the same connection and segment go as one SEG.WRITEV/SEG.READV (at most
 * MC_TCP_VEC_RANGES ranges and MC_TCP_VEC_BYTES), whose reply's elements are
 * read straight into each item's buffer. A refused vector fails all of its
 * items, which the caller then revokes or retries one by one.
 *
 * A pool belongs to one handle, whose mutex already serialises calls, so it
 * runs one striped transfer at a time and its job list needs no queue.
 */
#include "mc_tcp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake.h"

#define MC_TCP_WORKER_CONNS 8   /* peers a worker keeps a connection to */

/* ---- one transfer --------------------------------------------------------- */

static void fmtU64(char *buf, size_t len, uint64_t v) { snprintf(buf, len, "%llu", (unsigned long long)v); }

void mcTcpAppend(mcConn *conn, uint64_t seg, uint64_t off, uint64_t len, const struct iovec *iov, int iovcnt,
                 int write) {
    char segbuf[24], offbuf[24], lenbuf[24];
    fmtU64(segbuf, sizeof(segbuf), seg);
    fmtU64(offbuf, sizeof(offbuf), off);
    mcConnAppendHeader(conn, 4);
    if (write) mcConnAppendArg(conn, "SEG.WRITE", 9);
    else mcConnAppendArg(conn, "SEG.READ", 8);
    mcConnAppendArg(conn, segbuf, strlen(segbuf));
    mcConnAppendArg(conn, offbuf, strlen(offbuf));
    if (write) {
        mcConnAppendArgV(conn, iov, iovcnt, (size_t)len); /* each buffer sent in place */
    } else {
        fmtU64(lenbuf, sizeof(lenbuf), len);
        mcConnAppendArg(conn, lenbuf, strlen(lenbuf));
    }
}

int mcTcpReadReply(mcConn *conn, const struct iovec *iov, int iovcnt, uint64_t len, int write, mcReply **r) {
    *r = NULL;
    int ok = write ? (*r = mcConnRead(conn)) != NULL && (*r)->type == MCR_STATUS
                   : mcConnReadBulkIntoV(conn, iov, iovcnt, r) == (long long)len;
    /* The token this connection presented is good no more (a remount
     * rotated it): the next transfer presents the segment's again. */
    if (!ok && mcReplyIsError(*r, "NOAUTH")) mcConnForgetAdmissions(conn);
    return ok;
}

/* Sends one slice (the segment's token first, once per connection) and
 * reads its reply; on failure fills *f. */
static int runSlice(mcConn *conn, const char *token, uint64_t seg, uint64_t off, uint64_t len,
                    const struct iovec *iov, int iovcnt, int write, mcTcpFailure *f) {
    mcReply *r = NULL;
    int arc = mcConnAdmit(conn, seg, token);
    if (arc != MC_OK) {
        f->auth = arc == MC_ERR_AUTH;
        f->timed_out = conn->timed_out;
        snprintf(f->err, sizeof(f->err), "%.250s: %.250s", conn->uri, conn->err[0] ? conn->err : "SEG.AUTH failed");
        return 0;
    }
    mcTcpAppend(conn, seg, off, len, iov, iovcnt, write);
    if (mcConnFlush(conn) == MC_OK && mcTcpReadReply(conn, iov, iovcnt, len, write, &r)) {
        mcReplyFree(r);
        return 1;
    }
    f->reply = r;
    f->auth = mcReplyIsError(r, "NOAUTH");
    f->timed_out = conn->timed_out;
    snprintf(f->err, sizeof(f->err), "%.250s: %.250s", conn->uri, conn->err[0] ? conn->err : "transfer failed");
    return 0;
}

/* ---- batches ---------------------------------------------------------------- */

/* Items [start, start+count) as one vector command. */
static void appendVector(mcTcpItem *items, size_t start, size_t count, int write) {
    mcConn *conn = items[start].conn;
    char num[24];
    mcConnAppendHeader(conn, (int)(2 + 2 * count));
    if (write) mcConnAppendArg(conn, "SEG.WRITEV", 10);
    else mcConnAppendArg(conn, "SEG.READV", 9);
    fmtU64(num, sizeof(num), items[start].seg);
    mcConnAppendArg(conn, num, strlen(num));
    for (size_t k = 0; k < count; k++) {
        const mcTcpItem *it = &items[start + k];
        fmtU64(num, sizeof(num), it->off);
        mcConnAppendArg(conn, num, strlen(num));
        if (write) {
            mcConnAppendArgV(conn, it->iov, it->iovcnt, (size_t)it->len);
        } else {
            fmtU64(num, sizeof(num), it->len);
            mcConnAppendArg(conn, num, strlen(num));
        }
    }
}

/* The reply to a vector command: sets ok on its items. */
static void readVector(mcTcpItem *items, size_t start, size_t count, int write, mcReply **err) {
    mcConn *conn = items[start].conn;
    if (write) {
        mcReply *r = mcConnRead(conn);
        int ok = r && r->type == MCR_STATUS;
        for (size_t k = 0; k < count; k++) items[start + k].ok = ok;
        if (r && !ok) {
            mcReplyFree(*err);
            *err = r;
        } else {
            mcReplyFree(r);
        }
        return;
    }
    mcReply *r = NULL;
    long long n = mcConnReadArrayLen(conn, &r);
    if (n >= 0 && (size_t)n != count) {
        conn->broken = 1; /* out of step with the stream: unusable */
        snprintf(conn->err, sizeof(conn->err), "SEG.READV: %lld elements for %zu ranges", n, count);
        n = -1;
    }
    for (size_t k = 0; k < count; k++) {
        mcTcpItem *it = &items[start + k];
        mcReply *e = NULL;
        it->ok = n >= 0 && mcConnReadBulkIntoV(conn, it->iov, it->iovcnt, &e) == (long long)it->len;
        if (e) {
            mcReplyFree(r);
            r = e;
        }
    }
    if (r) {
        mcReplyFree(*err);
        *err = r;
    }
}

void mcTcpBatch(mcTcpItem *items, size_t n, int write, mcReply **err) {
    *err = NULL;
    /* Commands: a run of small items to one connection and segment is one
     * vector; runs[i] is the length of the command starting at item i. */
    size_t *runs = calloc(n ? n : 1, sizeof(*runs));
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        uint64_t bytes = items[i].len;
        if (runs && items[i].len < MC_TCP_VEC_MAX) {
            while (j < n && j - i < MC_TCP_VEC_RANGES && items[j].conn == items[i].conn &&
                   items[j].seg == items[i].seg && items[j].len < MC_TCP_VEC_MAX &&
                   bytes + items[j].len <= MC_TCP_VEC_BYTES)
                bytes += items[j++].len;
        }
        if (runs) runs[i] = j - i;
        if (j - i > 1) appendVector(items, i, j - i, write);
        else mcTcpAppend(items[i].conn, items[i].seg, items[i].off, items[i].len, items[i].iov, items[i].iovcnt, write);
        i = j;
    }
    for (size_t i = 0; i < n; i++)
        if (items[i].conn->olen || items[i].conn->nrefs) mcConnFlush(items[i].conn);
    for (size_t i = 0; i < n;) {
        size_t count = runs ? runs[i] : 1;
        if (count > 1) {
            readVector(items, i, count, write, err);
        } else {
            mcReply *r = NULL;
            items[i].ok = mcTcpReadReply(items[i].conn, items[i].iov, items[i].iovcnt, items[i].len, write, &r);
            if (r && !items[i].ok) {
                mcReplyFree(*err);
                *err = r;
            } else {
                mcReplyFree(r);
            }
        }
        i += count;
    }
    free(runs);
    /* A token that is good no more (-NOAUTH after a remount): the
     * connections that presented it present the segment's again. */
    if (mcReplyIsError(*err, "NOAUTH"))
        for (size_t i = 0; i < n; i++)
            if (!items[i].ok) mcConnForgetAdmissions(items[i].conn);
}

/* ---- the worker pool -------------------------------------------------------- */

typedef struct {
    const char *uri, *token;
    int connect_ms, io_ms;
    uint64_t seg, off, len;
    const struct iovec *iov;     /* its part of the caller's buffers */
    int iovcnt;
    int write;
    int ok;
    mcTcpFailure f;
} mcTcpJob;

typedef struct {
    struct mcTcpPool *pool;
    mcConn *conns[MC_TCP_WORKER_CONNS];
    int nconns;
} mcTcpWorker;

struct mcTcpPool {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    mcTcpJob *jobs;              /* the current transfer's worker slices */
    int njobs, next, pending;    /* next: first unclaimed; pending: not finished */
    int stop;
    int nworkers;
    pthread_t tids[MC_TCP_MAX_STREAMS];
    mcTcpWorker workers[MC_TCP_MAX_STREAMS];
    char *user, *password;
};

/* The worker's connection to uri, opened (and authenticated) on first use. */
static mcConn *workerConn(mcTcpWorker *w, const mcTcpJob *j, mcTcpFailure *f) {
    for (int i = 0; i < w->nconns; i++) {
        if (strcmp(w->conns[i]->uri, j->uri)) continue;
        /* Opened under the timeout of an earlier job: mc_set_timeouts
         * since then reached the handle, not this thread's connections. */
        mcConnSetTimeout(w->conns[i], j->io_ms);
        return w->conns[i];
    }
    mcConn *c = mcConnOpen(j->uri, j->connect_ms, j->io_ms, f->err, sizeof(f->err));
    if (c == NULL) return NULL;
    if (mcConnAuth(c, w->pool->user, w->pool->password) != MC_OK) {
        snprintf(f->err, sizeof(f->err), "%.250s: %.250s", j->uri, c->err);
        mcConnClose(c);
        return NULL;
    }
    if (w->nconns == MC_TCP_WORKER_CONNS) { /* forget the oldest peer */
        mcConnClose(w->conns[0]);
        memmove(w->conns, w->conns + 1, sizeof(w->conns[0]) * (MC_TCP_WORKER_CONNS - 1));
        w->nconns--;
    }
    w->conns[w->nconns++] = c;
    return c;
}

static void workerDrop(mcTcpWorker *w, mcConn *c) {
    for (int i = 0; i < w->nconns; i++) {
        if (w->conns[i] != c) continue;
        mcConnClose(c);
        memmove(w->conns + i, w->conns + i + 1, sizeof(w->conns[0]) * (size_t)(w->nconns - i - 1));
        w->nconns--;
        return;
    }
}

static void *workerMain(void *arg) {
    mcTcpWorker *w = arg;
    mcTcpPool *p = w->pool;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && (p->jobs == NULL || p->next >= p->njobs)) pthread_cond_wait(&p->work, &p->lock);
        if (p->stop) break;
        mcTcpJob *j = &p->jobs[p->next++];
        pthread_mutex_unlock(&p->lock);
        mcConn *c = workerConn(w, j, &j->f);
        j->ok = c && runSlice(c, j->token, j->seg, j->off, j->len, j->iov, j->iovcnt, j->write, &j->f);
        if (c && c->broken) workerDrop(w, c);
        pthread_mutex_lock(&p->lock);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < w->nconns; i++) mcConnClose(w->conns[i]);
    w->nconns = 0;
    return NULL;
}

mcTcpPool *mcTcpPoolCreate(int nworkers, const char *user, const char *password) {
    if (nworkers < 1 || nworkers > MC_TCP_MAX_STREAMS) return NULL;
    mcTcpPool *p = calloc(1, sizeof(*p));
    if (p == NULL) return NULL;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    if (password && password[0] && (p->password = strdup(password)) == NULL) goto err;
    if (user && user[0] && (p->user = strdup(user)) == NULL) goto err;
    for (int i = 0; i < nworkers; i++) {
        p->workers[i].pool = p;
        if (pthread_create(&p->tids[i], NULL, workerMain, &p->workers[i]) != 0) goto err;
        p->nworkers++;
    }
    return p;
err:
    mcTcpPoolFree(p);
    return NULL;
}

void mcTcpPoolFree(mcTcpPool *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->tids[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p->password);
    free(p->user);
    free(p);
}

void mcTcpPoolForget(mcTcpPool *p) {
    if (p == NULL) return;
    for (int i = 0; i < p->nworkers; i++)
        for (int j = 0; j < p->workers[i].nconns; j++) mcConnClose(p->workers[i].conns[j]);
    free(p->password);
    free(p->user);
    free(p);
}

int mcTcpPoolWorkers(const mcTcpPool *p) { return p ? p->nworkers : 0; }

int mcTcpStreamCount(uint64_t len, int want) {
    if (want <= 1) return 1;
    if (want > MC_TCP_MAX_STREAMS) want = MC_TCP_MAX_STREAMS;
    uint64_t k = len / MC_TCP_SLICE_MIN;
    return k < 2 ? 1 : (k > (uint64_t)want ? want : (int)k);
}

int mcTcpDefaultStreams(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 4 ? 4 : (int)n;
}

int mcTcpStriped(mcTcpPool *p, mcConn *own, const char *uri, const char *token, int streams, int connect_ms,
                 int io_ms, uint64_t seg, uint64_t off, uint64_t len, const struct iovec *iov, int iovcnt, int write,
                 mcTcpFailure *f) {
    memset(f, 0, sizeof(*f));
    if (streams > mcTcpPoolWorkers(p) + 1) streams = mcTcpPoolWorkers(p) + 1;
    if (streams < 1) streams = 1;
    if (streams == 1) return runSlice(own, token, seg, off, len, iov, iovcnt, write, f);
    /* Page-aligned slices of the logical byte range, the last one taking
     * the remainder; each stream gets the part of the caller's buffers its
     * slice covers. The slices' lists together have at most iovcnt +
     * streams - 1 entries (a buffer cut at each boundary). */
    uint64_t slice = ((len + (uint64_t)streams - 1) / (uint64_t)streams + 4095) & ~(uint64_t)4095;
    struct iovec cut_local[4 * MC_TCP_MAX_STREAMS], *cuts = cut_local;
    size_t ncut = (size_t)iovcnt + (size_t)streams;
    if (ncut > sizeof(cut_local) / sizeof(cut_local[0]) && (cuts = malloc(ncut * sizeof(*cuts))) == NULL)
        return runSlice(own, token, seg, off, len, iov, iovcnt, write, f); /* out of memory: one stream */
    mcTcpJob jobs[MC_TCP_MAX_STREAMS];
    int nworker_jobs = 0;
    size_t used = 0;
    uint64_t first = len < slice ? len : slice;
    int nfirst = mcIovCut(iov, iovcnt, 0, first, cuts, (int)(ncut - used));
    struct iovec *first_iov = cuts;
    used += (size_t)nfirst;
    for (int i = 1; i < streams && (uint64_t)i * slice < len; i++) {
        uint64_t start = (uint64_t)i * slice;
        mcTcpJob *j = &jobs[nworker_jobs++];
        memset(j, 0, sizeof(*j));
        j->uri = uri;
        j->token = token;
        j->connect_ms = connect_ms;
        j->io_ms = io_ms;
        j->seg = seg;
        j->off = off + start;
        j->len = i == streams - 1 || len - start < slice ? len - start : slice;
        j->iov = cuts + used;
        j->iovcnt = mcIovCut(iov, iovcnt, start, j->len, cuts + used, (int)(ncut - used));
        used += (size_t)j->iovcnt;
        j->write = write;
    }
    if (nworker_jobs) {
        pthread_mutex_lock(&p->lock);
        p->jobs = jobs;
        p->njobs = nworker_jobs;
        p->next = 0;
        p->pending = nworker_jobs;
        pthread_cond_broadcast(&p->work);
        pthread_mutex_unlock(&p->lock);
    }
    int ok = runSlice(own, token, seg, off, first, first_iov, nfirst, write, f);
    if (nworker_jobs) {
        pthread_mutex_lock(&p->lock);
        while (p->pending) pthread_cond_wait(&p->done, &p->lock);
        p->jobs = NULL;
        pthread_mutex_unlock(&p->lock);
    }
    for (int i = 0; i < nworker_jobs; i++) {
        if (jobs[i].ok) continue;
        if (ok) {
            *f = jobs[i].f;
            ok = 0;
        } else {
            mcReplyFree(jobs[i].f.reply);
        }
    }
    if (cuts != cut_local) free(cuts);
    return ok;
}
