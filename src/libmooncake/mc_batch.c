/* mc_batch.c -- the batch calls: many keys, one round trip per phase.
 *
 * Batches send one BATCH.* command for the metadata (per node and slot in a
 * cluster: mcRunPhase, mc_route.c), do every shm copy, and pipeline the tcp
 * transfers of all items before reading any reply (runs of small values as
 * one SEG.WRITEV/SEG.READV, mc_tcp.c), so the round trips overlap;
 * BATCH.PUT.END publishes what was written. A batch get is a list of reads
 * (batchReadLocked), each a byte range of one key's object: a whole object
 * for mc_batch_get(v), the caller's ranges for mc_batch_get_ranges. A range
 * needs nothing of its own from any transport: it is the replica's extent
 * narrowed to its bytes, which the shm copy, SEG.READ(V) and RDMA all take
 * as they are.
 *
 * Here too: replica descriptions (mc_batch_replicas), views of objects in
 * place (mc_batch_get_views, mc_view.c), existence and replica clearing,
 * each a phase of the same machinery. A key whose batch path fails is
 * done again by the single-key path (mooncake.c), which rides through.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_client.h"
#include "mc_cuda.h"

/* ---- batches ------------------------------------------------------------- */

/* Starts one replica's transfer (a segment of node `node`): shm copies now
 * (returns MC_OK), tcp to a known connection is queued in *p (returns 1)
 * for finishXfers; anything else is left to the sequential path (returns
 * MC_ERR_UNSUPPORTED). device (XF_*): shm copies device memory as it
 * copies host memory; anything else with device memory (GPUDirect, tcp
 * staged) is left to the sequential path (mcXferReplica). */
int mcStartXfer(mc_client *c, int node, unsigned gen, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                     int write, int device, mcTcpItem *p) {
    if (c->map.nodes[node].gen != gen) return mcSegLost(c);
    mcSeg *s = mcSegGet(c, node, rep->seg);
    if (s == NULL) return MC_ERR_IO;
    if (s->gen != gen) return mcSegLost(c);
    int t = c->transport;
    if ((t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_SHM) && mcSegAttach(c, s) == MC_OK)
        return mcSegStale(c, s) ? mcSegLost(c) : mcSegShmCopy(c, s, rep, iov, iovcnt, write, device != XF_HOST);
    if (device != XF_HOST) return MC_ERR_UNSUPPORTED;
    if (t != MC_TRANSPORT_TCP && t != MC_TRANSPORT_AUTO) return MC_ERR_UNSUPPORTED;
    /* Registered buffers go over rdma when the segment has it, as a single
     * transfer's do (mcXferReplica, one by one: nothing to pipeline there). */
    if (t == MC_TRANSPORT_AUTO && c->regions && mcIovRdmaRegistered(c, iov, iovcnt, rep->len))
        for (int i = 0; i < s->nendpoints; i++)
            if (!strncmp(s->endpoints[i], "rdma://", 7)) return MC_ERR_UNSUPPORTED;
    for (int i = 0; i < s->nendpoints; i++) {
        if (strncmp(s->endpoints[i], "tcp://", 6)) continue;
        char uri[300];
        mcEndpointUri(c, s, s->endpoints[i], uri, sizeof(uri));
        mcConn *conn = mcSegConn(c, s, uri);
        if (conn == NULL) continue;
        if (mcSegStale(c, s)) return mcSegLost(c);
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
void mcFinishXfers(mc_client *c, mcTcpItem *p, size_t np, int write, int *ok) {
    mcReply *err;
    mcTcpBatch(p, np, write, &err);
    if (err) mcErrReply(c, err);
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
        mcDropConn(c, conn);
    }
}

/* A key of BATCH.PUT.START (its size formatted into sizebuf, which must
 * live as long as k), and the same key for the PUT.END or PUT.REVOKE that
 * must go where its PUT.START was answered: the batch put and put sessions
 * (mc_session.c) build both the same way. */
void mcPutStartKey(mc_client *c, mcBKey *k, const void *key, size_t keylen, uint64_t size, char sizebuf[24]) {
    mcFmtU64(sizebuf, 24, size);
    k->key = key;
    k->keylen = keylen;
    k->arg = sizebuf;
    k->slot = mcSlotOf(c, key, keylen);
}

mcBKey mcPutEndKey(const mcBKey *started) {
    mcBKey e = *started;
    e.res = NULL;
    e.pinned = 1;
    e.arg = NULL;
    return e;
}

/* Items whose buffers are all checked (batchCheck). */
/* The batch put. Riding through as mcPutLocked does: an item whose node's
 * connection was lost after its PUT.START (transfer failed, or
 * BATCH.PUT.END not answered) is redone, from BATCH.PUT.START, with the
 * others of its kind, after a pause, until the deadline; one whose
 * BATCH.PUT.END was sent and lost carries ended_lost[i] into the redo
 * (mcPutLandedAlready judges an -EXISTS then). reconnects: the handle's
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
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) results[i] = MC_ERR_INVALID;
    /* BATCH.PUT.START numkeys key size ... [options], per node and slot. */
    for (size_t i = 0; i < n; i++) mcPutStartKey(c, &k[i], items[i].key, items[i].keylen, lens[i], sizes[i]);
    mcPhase start = {"BATCH.PUT.START", 1, 0, tail, mcPutOptArgs(opts, tail, repbuf, pinbuf)};
    if ((rc = mcRunPhase(c, &start, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        const mcReply *e = k[i].res;
        if (k[i].rc == MC_OK && c->reconnects != reconnects && mcPutInProgress(e)) {
            again[i] = 2; /* our own put, abandoned with a lost connection */
            continue;
        }
        if (k[i].rc != MC_OK || e->type != MCR_ARRAY) {
            results[i] = k[i].rc != MC_OK ? k[i].rc : mcErrReply(c, e);
            if (results[i] == MC_ERR_EXISTS && ended_lost && ended_lost[i])
                results[i] =
                    mcPutLandedAlready(c, items[i].key, items[i].keylen, items[i].iov, items[i].iovcnt, lens[i]);
            continue;
        }
        ok[i] = started[i] = 1;
        for (size_t j = 0; j < e->elements && j < MC_MAX_REPLICAS; j++) {
            if (mcParseReplica(e->element[j], &reps[i * MC_MAX_REPLICAS + j]) != 0 ||
                reps[i * MC_MAX_REPLICAS + j].len != lens[i]) {
                ok[i] = 0;
                results[i] = mcErr(c, MC_ERR_PROTOCOL, "bad replica");
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
        if (ok[i]) dev[i] = mcIovDevice(c, items[i].iov, items[i].iovcnt, lens[i]);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; ok[i] && j < nreps[i]; j++) {
            const mcReplica *rep = &reps[i * MC_MAX_REPLICAS + j];
            int s = mcStartXfer(c, k[i].node, k[i].gen, rep, items[i].iov, items[i].iovcnt, 1, dev[i], &pend[np]);
            if (s == 1) pend[np++].item = i;
            else if (s != MC_OK &&
                     mcXferReplica(c, k[i].node, k[i].gen, rep, items[i].iov, items[i].iovcnt, 1, dev[i]) != MC_OK)
                ok[i] = 0;
        }
    }
    mcFinishXfers(c, pend, np, 1, ok);
    /* A transfer that failed because the connection was lost: the put is
     * gone with it, nothing to revoke; redone below. */
    for (size_t i = 0; i < n; i++)
        if (started[i] && !ok[i] && !mcNodeAlive(c, k[i].node, k[i].gen)) {
            started[i] = 0;
            again[i] = 2;
        }
    /* Revoke what could not be written (a PUT.REVOKE each: rare), then
     * publish the rest; both where each put started. */
    size_t nfin = 0;
    for (size_t i = 0; i < n; i++) {
        if (!started[i] || ok[i]) continue;
        fin[nfin++] = mcPutEndKey(&k[i]);
        if (results[i] == MC_ERR_INVALID) results[i] = MC_ERR_IO;
    }
    if (nfin) {
        mcPhase revoke = {"PUT.REVOKE", 0, 1, NULL, 0};
        mcRunPhase(c, &revoke, fin, nfin); /* best effort */
        for (size_t j = 0; j < nfin; j++) {
            mcReplyFree(fin[j].res);
            fin[j].res = NULL;
        }
    }
    nfin = 0;
    for (size_t i = 0; i < n; i++) {
        if (!started[i] || !ok[i]) continue;
        fin_item[nfin] = i;
        fin[nfin++] = mcPutEndKey(&k[i]);
    }
    if (nfin) {
        mcPhase end = {"BATCH.PUT.END", 0, 0, NULL, 0};
        if ((rc = mcRunPhase(c, &end, fin, nfin)) != MC_OK) goto end;
        for (size_t j = 0; j < nfin; j++) {
            size_t i = fin_item[j];
            if (fin[j].moved) {
                /* The slot moved (the node abandoned the put), or the
                 * connection was lost: again, from PUT.START. */
                again[i] = fin[j].rc == MC_ERR_IO ? (fin[j].lost ? 3 : 2) : 1;
            }
            results[i] = fin[j].rc != MC_OK ? fin[j].rc : fin[j].res->type == MCR_STATUS ? MC_OK : mcErrReply(c, fin[j].res);
        }
    }
    /* Redone: after a lost connection (a pause first) until the deadline;
     * after a moved slot at most MC_MAX_REDO times. */
    size_t nredo = 0;
    int any_lost = 0;
    for (size_t i = 0; i < n; i++) {
        if (again[i] == 1 && depth >= MC_MAX_REDO) again[i] = 0;
        if (again[i] >= 2 && (depth >= 64 || mcNowUs() >= deadline)) {
            if (results[i] == MC_ERR_INVALID || results[i] == MC_OK) results[i] = mcErr(c, MC_ERR_IO, "put: the connection was lost");
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
            rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
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
            char why[MC_ERRLEN];
            memcpy(why, c->errbuf, sizeof(why));
            mcBackoff(MC_LOST_BACKOFF + depth, deadline);
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
    mcFreeBKeys(k, n);
    mcFreeBKeys(fin, n);
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

/* A batch's items: keys, buffers (mcIovCheck), host or device memory. put:
 * every value nonempty. lens[i] gets item i's total. MC_OK or
 * MC_ERR_INVALID. */
static int batchCheck(mc_client *c, size_t n, const mc_kvv *items, size_t *lens, int put) {
    for (size_t i = 0; i < n; i++) {
        int rc = mcIovCheck(c, items[i].iov, items[i].iovcnt, &lens[i]);
        if (rc != MC_OK) {
            char why[MC_ERRLEN];
            memcpy(why, c->errbuf, sizeof(why));
            return mcErr(c, rc, "item %zu: %.400s", i, why);
        }
        if (items[i].key == NULL || items[i].keylen == 0 || (put && lens[i] == 0))
            return mcErr(c, MC_ERR_INVALID, "item %zu: empty key%s", i, put ? "/value" : "");
    }
    return MC_OK;
}

/* Keys per BATCH.PUT.START..BATCH.PUT.END round. A connection may hold
 * client-max-pending-puts (16384 by default) puts in progress at once, and
 * a batch holds all of its keys' between its two phases: a larger batch
 * goes in rounds, each ended before the next starts, so the server's limit
 * never cuts one short. 4096 keys amortise the round trips as well as
 * more would. */
#define MC_PUT_ROUND 4096

int mc_batch_putv(mc_client *c, size_t n, const mc_kvv *items, const mc_put_opts *opts, int *results) {
    if (mcHandleBad(c) || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    size_t *lens = malloc(n * sizeof(*lens));
    if (lens == NULL) return MC_ERR_NOMEM;
    if (mcLock(c) != MC_OK) {
        free(lens);
        return MC_ERR_INVALID;
    }
    c->errbuf[0] = '\0';
    int rc = batchCheck(c, n, items, lens, 1);
    if (rc == MC_OK) {
        int done = 0;
        for (size_t at = 0; at < n; at += MC_PUT_ROUND) {
            size_t m = n - at < MC_PUT_ROUND ? n - at : MC_PUT_ROUND;
            int r = batchPutLocked(c, m, items + at, lens + at, opts, results + at, 0, mcCallDeadline(c), NULL,
                                   c->reconnects);
            if (r < 0) {
                /* This round failed as a whole (the server unreachable past
                 * the deadline): so do the rounds not yet sent. */
                for (size_t i = at + m; i < n; i++) results[i] = r;
                done = done ? done : r;
                break;
            }
            done += r;
        }
        rc = done;
    } else {
        for (size_t i = 0; i < n; i++) results[i] = rc;
    }
    mcUnlock(c);
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
    if (mcHandleBad(c) || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
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
            mcQueueLeaseRelease(conn, k[i].key, k[i].keylen);
            queued++;
        }
        if (queued) mcFlushLeaseReleases(conn);
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
    int device;                  /* XF_*: how its buffers move (mcXferReplica) */
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
 * (mcRunPhase), every shm copy, the tcp transfers pipelined (finishXfers),
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
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    long long t0 = mcNowUs();
    mcPhase get = {"BATCH.GET.REPLICAS", 0, 0, NULL, 0};
    if (nkeys && (rc = mcRunPhase(c, &get, k, nkeys)) != MC_OK) goto fail;
    for (size_t j = 0; j < nkeys; j++) {
        long long lease_ms = 0;
        keyrc[j] = k[j].rc != MC_OK ? k[j].rc
                                    : mcParseReplicas(c, k[j].res, &lease_ms, &sizes[j], &reps[j * MC_MAX_REPLICAS], &nreps[j]);
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
            r->result = mcErr(c, MC_ERR_INVALID, "range [%llu, +%llu) is not inside the object's %llu bytes",
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
        int s = mcStartXfer(c, k[r->key].node, k[r->key].gen, &first, r->iov, r->iovcnt, 0, r->device, &pend[np]);
        if (s == 1) pend[np++].item = i;
        started[i] = s == 1 || s == MC_OK;
        ok[i] = 1;
    }
    mcFinishXfers(c, pend, np, 0, ok);
    for (size_t i = 0; i < nreads; i++) {
        mcRead *r = &rd[i];
        if (r->done) {
            if (r->result >= 0) done++;
            continue;
        }
        long long got;
        if (started[i] && ok[i]) {
            got = (long long)r->len;
            if (mcNowUs() > deadline[r->key]) got = mcErr(c, MC_ERR_LEASE_EXPIRED, "the transfer outlived its lease");
        } else {
            /* Not started, failed, GPUDirect, or device memory over tcp:
             * one by one, every replica. */
            mcReplica narrowed[MC_MAX_REPLICAS];
            narrowReplicas(&reps[r->key * MC_MAX_REPLICAS], nreps[r->key], r->off, r->len, narrowed);
            got = mcReadReplicas(c, k[r->key].node, k[r->key].gen, narrowed, nreps[r->key], r->len, r->iov, r->iovcnt,
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
    long long deadline = mcCallDeadline(c);
    for (int tries = 0;; tries++) {
        int rc = batchReadLocked(c, k, nkeys, rd, nreads);
        if (rc < 0 || mcNowUs() >= deadline) return rc;
        size_t again = 0;
        for (size_t i = 0; i < nreads; i++)
            if (rd[i].result == MC_ERR_IO && !mcNodeAlive(c, k[rd[i].key].node, k[rd[i].key].gen)) {
                rd[i].done = 0;
                again++;
            }
        if (again == 0) return rc;
        for (size_t j = 0; j < nkeys; j++) {
            mcReplyFree(k[j].res);
            k[j].res = NULL;
            k[j].leased = 0;
        }
        mcBackoff(MC_LOST_BACKOFF + tries, deadline);
    }
}

/* mc_batch_getv's items (checked by batchCheck), caps[i] item i's capacity:
 * one key and one whole-object read each. */
static int batchGetLocked(mc_client *c, size_t n, const mc_kvv *items, const size_t *caps, long long *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    mcRead *rd = calloc(n, sizeof(*rd));
    int rc, cuda = mcCudaActive(); /* asked once for the batch */
    if (!k || !rd) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) results[i] = rc;
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        k[i].key = items[i].key;
        k[i].keylen = items[i].keylen;
        k[i].slot = mcSlotOf(c, items[i].key, items[i].keylen);
        rd[i].key = i;
        rd[i].whole = 1;
        rd[i].cap = caps[i];
        rd[i].iov = items[i].iov;
        rd[i].iovcnt = items[i].iovcnt;
        rd[i].device = cuda ? mcIovDevice(c, items[i].iov, items[i].iovcnt, caps[i]) : XF_HOST;
    }
    rc = batchReadRide(c, k, n, rd, n);
    for (size_t i = 0; i < n; i++) results[i] = rd[i].result;
end:
    mcFreeBKeys(k, n);
    free(rd);
    return rc;
}

int mc_batch_getv(mc_client *c, size_t n, const mc_kvv *items, long long *results) {
    if (mcHandleBad(c) || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    size_t *caps = malloc(n * sizeof(*caps));
    if (caps == NULL) return MC_ERR_NOMEM;
    if (mcLock(c) != MC_OK) {
        free(caps);
        return MC_ERR_INVALID;
    }
    c->errbuf[0] = '\0';
    for (size_t i = 0; i < n; i++) results[i] = MC_ERR_INVALID;
    int rc = batchCheck(c, n, items, caps, 0);
    if (rc == MC_OK) rc = batchGetLocked(c, n, items, caps, results);
    mcUnlock(c);
    free(caps);
    return rc;
}

int mc_batch_get(mc_client *c, size_t n, mc_kv *items, long long *results) {
    if (mcHandleBad(c) || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
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
            mcErr(c, MC_ERR_INVALID, "item %zu: %s", i,
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
            mcRegion *reg = g->len && g->dst ? mcRegionOf(c, g->dst, g->len) : NULL;
            if (g->len && reg == NULL) {
                r->result = mcErr(c, MC_ERR_INVALID, "item %zu range %d: dst is not inside a registered region", i, j);
                r->done = 1;
                continue;
            }
            if (g->len && cuda && mcCudaIsDevicePtr(g->dst)) r->device = reg->rdma ? XF_GPUDIRECT : XF_DEVICE;
            left++;
        }
        if (left) {
            k[*nkeys].key = it->key;
            k[*nkeys].keylen = it->keylen;
            k[*nkeys].slot = mcSlotOf(c, it->key, it->keylen);
            (*nkeys)++;
        }
    }
}

int mc_batch_get_ranges(mc_client *c, size_t n, const mc_kranges *items, long long *results) {
    if (mcHandleBad(c) || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
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
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    mcRead *rd = calloc(nreads ? nreads : 1, sizeof(*rd));
    mcBKey *k = calloc(n, sizeof(*k));
    size_t nkeys = 0;
    int rc;
    if (!rd || !k) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
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
    mcFreeBKeys(k, n);
    free(rd);
    mcUnlock(c);
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
    mcSeg *s = mcSegGet(c, node, rep->seg);
    if (s == NULL) return; /* gone since (ids are never reused): name and endpoint stay "" */
    if (s->name && strlen(s->name) < sizeof(out->seg_name)) memcpy(out->seg_name, s->name, strlen(s->name) + 1);
    out->base = s->base;
    for (int pass = 0; pass < 2 && !out->endpoint[0]; pass++) {
        for (int i = 0; i < s->nendpoints; i++) {
            if (pass == 0 && strncmp(s->endpoints[i], "tcp://", 6)) continue;
            char uri[MC_ENDPOINT_LEN + 64];
            mcEndpointUri(c, s, s->endpoints[i], uri, sizeof(uri));
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
        if (keys[i].key == NULL || keys[i].keylen == 0) return mcErr(c, MC_ERR_INVALID, "key %zu is empty", i);
        k[i].key = keys[i].key;
        k[i].keylen = keys[i].keylen;
        k[i].slot = mcSlotOf(c, keys[i].key, keys[i].keylen);
    }
    return MC_OK;
}

static int batchReplicasLocked(mc_client *c, size_t n, const mc_key *keys, mc_replicas *out, int *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    mcReplica *reps = malloc(n * MC_MAX_REPLICAS * sizeof(*reps));
    size_t *nreps = calloc(n, sizeof(*nreps));
    int rc = MC_OK;
    if (!k || !reps || !nreps) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    mcPhase get = {"BATCH.GET.REPLICAS", 0, 0, NULL, 0};
    if ((rc = mcRunPhase(c, &get, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        long long lease_ms;
        uint64_t size = 0;
        results[i] = k[i].rc != MC_OK ? k[i].rc
                                      : mcParseReplicas(c, k[i].res, &lease_ms, &size, &reps[i * MC_MAX_REPLICAS], &nreps[i]);
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
    mcFreeBKeys(k, n);
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
    if (conn->nrefs) mcFlushLeaseReleases(conn);
}

static void flushNodeWrites(mc_client *c) {
    for (int node = 0; node < c->map.nnodes; node++) {
        mcConn *conn = c->map.nodes[node].conn;
        if (conn && !conn->broken && (conn->olen || conn->nrefs)) mcFlushLeaseReleases(conn);
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
        mcSeg *s = mcSegGet(c, k->node, reps[j].seg);
        if (s == NULL || s->gen != k->gen || mcSegAttach(c, s) != MC_OK || mcSegStale(c, s)) continue;
        if (reps[j].off > s->size || size > s->size - reps[j].off) {
            *rc = mcErr(c, MC_ERR_PROTOCOL, "replica outside segment %llu", (unsigned long long)s->id);
            continue;
        }
        if (size) mcShmPrepare(s->shm, reps[j].off, size);
        mc_view *v = mcViewNew(c->views, s->shm, s->map + reps[j].off, size, k->node, k->gen, k->key, k->keylen);
        *rc = v ? MC_OK : MC_ERR_NOMEM;
        return v;
    }
    if (*rc == MC_ERR_UNSUPPORTED) mcErr(c, MC_ERR_UNSUPPORTED, "no replica in shared memory from here");
    return NULL;
}

static int batchViewsLocked(mc_client *c, size_t n, const mc_key *keys, mc_view **views, long long *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    mcReplica *reps = malloc(MC_MAX_REPLICAS * sizeof(*reps));
    int rc = MC_OK, made = 0;
    if (!k || !reps || (!c->views && (c->views = mcViewQueueNew(c, &c->lock, viewSend)) == NULL)) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    mcViewQueueDrain(c->views); /* releases queued while the handle was busy: out with this call's requests */
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    mcPhase hold = {"HOLD.REPLICAS", 0, 0, NULL, 0};
    if ((rc = mcRunPhase(c, &hold, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        long long lease_ms;
        uint64_t size = 0;
        size_t nreps = 0;
        int krc = k[i].rc != MC_OK ? k[i].rc : mcParseReplicas(c, k[i].res, &lease_ms, &size, reps, &nreps);
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
    if (k) mcFreeBKeys(k, n);
    free(reps);
    return rc;
}

int mc_batch_get_views(mc_client *c, size_t n, const mc_key *keys, mc_view **views, long long *results) {
    if (mcHandleBad(c) || (n && (keys == NULL || views == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
    for (size_t i = 0; i < n; i++) views[i] = NULL;
    if (n == 0) return 0;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = 0;
    int rc = batchViewsLocked(c, n, keys, views, results);
    mcUnlock(c);
    return rc;
}

int mc_batch_replicas(mc_client *c, size_t n, const mc_key *keys, mc_replicas *out, int *results) {
    if (mcHandleBad(c) || (n && (keys == NULL || out == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    if (n > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
    memset(out, 0, n * sizeof(*out));
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = batchReplicasLocked(c, n, keys, out, results);
    mcUnlock(c);
    return rc;
}

/* ---- existence ----------------------------------------------------------- */

/* One key's answer to BATCH.EXISTS without PREFIX: 1, 0 or MC_ERR_*. */
static int existsResult(mc_client *c, const mcBKey *b) {
    if (b->rc != MC_OK) return b->rc;
    if (b->res->type == MCR_INT && (b->res->integer == 0 || b->res->integer == 1)) return (int)b->res->integer;
    return b->res->type == MCR_ERROR ? mcErrReply(c, b->res) : mcErr(c, MC_ERR_PROTOCOL, "bad BATCH.EXISTS reply");
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
                     : k[p].res      ? mcErr(c, MC_ERR_PROTOCOL, "bad BATCH.EXISTS PREFIX reply") : 0;
    for (size_t i = p + 1; i < n; i++) {
        results[i] = 0;
        k[i].leased = k[i].rc == MC_OK && k[i].counted;
    }
    releaseBatchLeases(c, k, n);
    return (int)p;
}

static int batchExistsLocked(mc_client *c, size_t n, const mc_key *keys, int flags, int *results) {
    mcBKey *k = calloc(n, sizeof(*k));
    if (k == NULL) return mcErr(c, MC_ERR_NOMEM, "out of memory");
    int rc = MC_OK;
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    const char *tail[2];
    int ntail = 0;
    if (flags & MC_EXISTS_PREFIX) tail[ntail++] = "PREFIX";
    if (flags & MC_EXISTS_LEASE) tail[ntail++] = "LEASE";
    mcPhase ph = {"BATCH.EXISTS", 1, 0, tail, ntail};
    if ((rc = mcRunPhase(c, &ph, k, n)) != MC_OK) goto end;
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
    mcFreeBKeys(k, n);
    return rc;
}

int mc_batch_exists(mc_client *c, size_t n, const mc_key *keys, int flags, int *results) {
    if (mcHandleBad(c) || (n && (keys == NULL || results == NULL))) return MC_ERR_INVALID;
    if (flags & ~(MC_EXISTS_PREFIX | MC_EXISTS_LEASE)) return MC_ERR_INVALID;
    if (n == 0) return 0;
    if (n > INT_MAX) return MC_ERR_INVALID; /* the count is returned as an int */
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = batchExistsLocked(c, n, keys, flags, results);
    mcUnlock(c);
    return rc;
}

/* ---- giving memory back -------------------------------------------------- */

/* REPLICA.CLEAR per node and slot, as BATCH.EXISTS goes: each answer is
 * the key's 1 or 0. */
int mc_batch_replica_clear(mc_client *c, size_t n, const mc_key *keys, const char *segment, int *results) {
    if (mcHandleBad(c) || (n && (keys == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    if (n > INT_MAX) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = MC_OK;
    mcBKey *k = calloc(n, sizeof(*k));
    if (k == NULL) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((rc = bkeysOf(c, keys, n, k)) != MC_OK) goto end;
    const char *tail[2] = {"SEGMENT", segment};
    mcPhase ph = {"REPLICA.CLEAR", 1, 0, tail, segment && segment[0] ? 2 : 0};
    if ((rc = mcRunPhase(c, &ph, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        results[i] = existsResult(c, &k[i]); /* the same shape: 1, 0 or an error */
        if (results[i] == 1) rc++;
    }
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++) results[i] = rc;
    mcFreeBKeys(k, n);
    mcUnlock(c);
    return rc;
}

