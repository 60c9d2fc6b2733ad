/* mc_xfer.c -- how a replica's bytes move between the caller's memory and a
 * segment, fastest path first (mcXferReplica).
 *
 * The caller's memory is an iovec list everywhere -- the scatter-gather
 * calls (mc_put_fromv, mc_get_intov, mc_batch_putv/getv) pass theirs, the
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
 * Device memory (CUDA, mc_cuda.c) moves by the same paths, every call form
 * alike (single, scatter-gather, batch, ranges, async), each buffer of a
 * call checked on its own (mcIovDevice): over shm a device buffer is copied
 * straight into or out of the segment's mapping with cudaMemcpy, the
 * mapping page-locked window by window as device transfers reach it
 * (mcShmCudaWindow): one copy per byte, as for host memory. Over tcp the
 * bytes need host memory for send/recv: a replica is gathered into the
 * handle's pinned buffer before its SEG.WRITE, or read into it and
 * scattered out after (tcpXferDevice), a large one in 4 MiB chunks whose
 * device copies overlap the socket (tcpXferChunked); batches send such
 * items one by one after the pipelined host ones. Device buffers all
 * registered for RDMA go over RDMA directly (GPUDirect) where shm does
 * not reach the segment, and by the paths above where RDMA does not.
 *
 * A segment's description (SEGMENT.INFO) and its mapping are cached per
 * handle (mcSegGet), trusted only while the connection of the node that
 * described it lives (mcSegStale, mc_route.c).
 *
 * Forgetting segments. Segment ids are never reused, and the segments of
 * client processes come and go (a rank restarts, a host is killed): each
 * one this handle read or wrote left a description here, with the mapping
 * of its memory -- a descriptor, and the dead host's memory itself, which
 * the kernel cannot free while we map it -- and a data connection to its
 * endpoint. Nothing here ever looked at them again, so a long-lived engine
 * handle grew by one mapping and one socket per host that ever served it
 * (found by utils/soak.py: 45 descriptors in 30 s of hosts coming and
 * going). mcSegSweep asks each node which of its segments still exist
 * (SEGMENTS, one round trip) and drops the others' descriptions, and then
 * the data connections no remaining segment reaches. It runs at the start
 * of a call (mcLock), where no description or connection is in use, once
 * the cache has doubled since the last sweep (MC_SEG_SWEEP_MIN at least):
 * one round trip per node per doubling, so O(1) per new segment whatever
 * the churn. The count alone would let up to MC_SEG_SWEEP_MIN dead hosts'
 * memory stay mapped here for as long as no new segment comes -- a dead
 * 16 GiB segment is 16 GiB the kernel cannot free -- so while a hosted
 * segment (not a node's pool, id 1, which never goes) is mapped, a call
 * also sweeps when MC_SEG_SWEEP_MS (30 s) passed since the last sweep: a
 * round trip per node every 30 s for an active reader of hosted memory,
 * nothing for one that reads only pools. An idle handle makes no call
 * and sweeps nothing: its next call does. But the two rules let a handle
 * that read from a few hosts (fewer than MC_SEG_SWEEP_MIN) keep their
 * memory mapped through any number of calls made within 30 s of a sweep,
 * and 30 s after it -- the next call of an engine idle while its peers
 * went (a host's 16 GiB pinned here). A host that goes closes its data
 * connections, which is seen without a round trip: a call also sweeps
 * when one of the handle's data connections was closed by its peer
 * (mcConnPeerClosed, a poll each, at most every MC_SEG_PEER_CHECK_MS).
 * What a sweep cannot drop yet (a killed host the server has not
 * unmounted) waits for the two rules above.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mc_client.h"
#include "mc_cuda.h"

#define MC_DEV_CHUNK ((size_t)4 << 20) /* device bytes over tcp: the chunk whose copy overlaps the socket */

/* ---- segments and paths -------------------------------------------------- */

void mcSegFree(mcSeg *s) {
    mcShmRelease(s->shm);
    for (int i = 0; i < s->nendpoints; i++) free(s->endpoints[i]);
    free(s->name);
    free(s->rkey);
    free(s->token);
    free(s);
}

/* The segment was described on a connection since reopened (its node may
 * be another server now): no byte moves through it. */
int mcSegStale(const mc_client *c, const mcSeg *s) { return s->gen != c->map.nodes[s->node].gen; }

int mcSegLost(mc_client *c) {
    return mcErr(c, MC_ERR_IO, "the connection to the server was lost meanwhile (it may have restarted)");
}

/* Segment id of node `node` (ids are per node: every node's pool is 1).
 * A description learnt on a connection since reopened is dropped here: the
 * server behind the new one may be a restarted one whose pool is other
 * memory under the same id (the caller holds no segment while it asks). */
mcSeg *mcSegGet(mc_client *c, int node, uint64_t id) {
    for (mcSeg **pp = &c->segs; *pp;) {
        mcSeg *s = *pp;
        if (mcSegStale(c, s)) {
            *pp = s->next;
            mcSegFree(s);
            c->nsegs--;
            continue;
        }
        if (s->id == id && s->node == node) return s;
        pp = &s->next;
    }
    char idbuf[24];
    mcFmtU64(idbuf, sizeof(idbuf), id);
    const char *argv[2] = {"SEGMENT.INFO", idbuf};
    mcReply *r;
    if (mcNodeCommand(c, node, 0, 2, argv, NULL, &r) != MC_OK) return NULL;
    if (r->type != MCR_ARRAY || r->elements % 2) {
        mcErrReply(c, r);
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
    c->nsegs++;
    return s;
}

static int cmpU64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The ids of node's segments (SEGMENTS), sorted, in *ids; their count, or
 * -1 when the node did not answer a list (then nothing of it is dropped). */
static long segIdsOf(mc_client *c, int node, uint64_t **ids) {
    const char *argv[1] = {"SEGMENTS"};
    mcReply *r;
    *ids = NULL;
    if (mcNodeCommand(c, node, 0, 1, argv, NULL, &r) != MC_OK) return -1;
    long n = -1;
    if (r->type != MCR_ARRAY || (*ids = malloc((r->elements + 1) * sizeof(uint64_t))) == NULL) goto end;
    n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const mcReply *m = r->element[i];
        int found = 0;
        for (size_t j = 0; m->type == MCR_ARRAY && j + 1 < m->elements; j += 2) {
            const mcReply *k = m->element[j];
            if ((k->type == MCR_BULK || k->type == MCR_STATUS) && k->str && !strcmp(k->str, "id")) {
                int ok;
                long long id = mcReplyInt(m->element[j + 1], &ok);
                if (ok) (*ids)[n++] = (uint64_t)id;
                found = ok;
                break;
            }
        }
        if (!found) { /* not the list we know how to read: trust nothing of it */
            n = -1;
            goto end;
        }
    }
    qsort(*ids, (size_t)n, sizeof(uint64_t), cmpU64);
end:
    mcReplyFree(r);
    if (n < 0) {
        free(*ids);
        *ids = NULL;
    }
    return n;
}

/* 1 if some cached segment lists an endpoint that resolves to uri. */
static int uriInUse(mc_client *c, const char *uri) {
    for (mcSeg *s = c->segs; s; s = s->next) {
        for (int i = 0; i < s->nendpoints; i++) {
            char u[300];
            mcEndpointUri(c, s, s->endpoints[i], u, sizeof(u));
            if (!strcmp(u, uri)) return 1;
        }
    }
    return 0;
}

/* Drops the descriptions of segments that are gone, and the data
 * connections only they used (see the top: "Forgetting segments"). Only at
 * the start of a call, under the lock. What it asks never shows as the
 * call's error. */
/* Whether a data connection's peer closed it: a host went (see the top:
 * "Forgetting segments"). Not asked more often than MC_SEG_PEER_CHECK_MS. */
static int hostWent(mc_client *c) {
    long long now = mcNowUs();
    if (c->dconns == NULL || now - c->peers_checked_us < (long long)MC_SEG_PEER_CHECK_MS * 1000) return 0;
    c->peers_checked_us = now;
    for (mcDataConn *d = c->dconns; d; d = d->next)
        if (mcConnPeerClosed(d->conn)) return 1;
    return 0;
}

/* Whether a sweep is due (see the top: "Forgetting segments"). */
static int sweepDue(mc_client *c) {
    if (c->segs && hostWent(c)) return 1;
    if (c->nsegs >= c->segs_sweep_at && c->nsegs >= MC_SEG_SWEEP_MIN) return 1;
    if (c->segs == NULL || mcNowUs() - c->segs_swept_us < (long long)c->segs_sweep_ms * 1000) return 0;
    for (mcSeg *s = c->segs; s; s = s->next)
        if (s->shm && s->id != 1) return 1;
    c->segs_swept_us = mcNowUs(); /* nothing hosted mapped: look again in a period */
    return 0;
}

void mcSegSweep(mc_client *c) {
    if (!sweepDue(c)) return;
    char saved[MC_ERRLEN];
    memcpy(saved, c->errbuf, sizeof(saved));
    for (int node = 0; node < c->map.nnodes; node++) {
        int cached = 0;
        for (mcSeg *s = c->segs; s && !cached; s = s->next) cached = s->node == node;
        mcConn *conn = c->map.nodes[node].conn;
        if (!cached || conn == NULL || conn->broken) continue; /* no reconnect just for this */
        uint64_t *ids;
        long n = segIdsOf(c, node, &ids);
        if (n < 0) continue;
        for (mcSeg **pp = &c->segs; *pp;) {
            mcSeg *s = *pp;
            int gone = mcSegStale(c, s) ||
                       (s->node == node && !bsearch(&s->id, ids, (size_t)n, sizeof(uint64_t), cmpU64));
            if (!gone) {
                pp = &s->next;
                continue;
            }
            *pp = s->next;
            mcSegFree(s);
            c->nsegs--;
        }
        free(ids);
    }
    for (mcDataConn **pp = &c->dconns; *pp;) {
        mcDataConn *d = *pp;
        if (!d->conn->broken && uriInUse(c, d->conn->uri)) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        mcConnClose(d->conn);
        free(d);
    }
    c->segs_sweep_at = 2 * c->nsegs;
    c->segs_swept_us = mcNowUs();
    memcpy(c->errbuf, saved, sizeof(saved));
}

/* "tcp://0.0.0.0:p" means "wherever you reached the node that named it". */
void mcEndpointUri(mc_client *c, const mcSeg *s, const char *ep, char *out, size_t len) {
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
    mcFmtU64(idbuf, sizeof(idbuf), s->id);
    const char *argv[2] = {"SEGMENT.TOKEN", idbuf};
    mcReply *r;
    if (mcNodeCommand(c, s->node, 0, 2, argv, NULL, &r) != MC_OK) return s->token;
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
        mcErr(c, MC_ERR_IO, "%s", err);
        return NULL;
    }
    /* Refused credentials are not the end at a segment host: another
     * user's host admits us by the segment's token (mcSegConn). */
    int arc = mcConnAuth(n, c->user, c->password);
    if (arc == MC_ERR_IO) {
        mcErr(c, MC_ERR_IO, "%s: %s", uri, n->err);
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

void mcDropConn(mc_client *c, mcConn *conn) {
    for (int i = 0; i < c->map.nnodes; i++)
        if (conn == c->map.nodes[i].conn) return; /* mcNodeConn reopens it */
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
mcConn *mcSegConn(mc_client *c, mcSeg *s, const char *uri) {
    mcConn *conn = dataConn(c, uri);
    if (conn == NULL) return NULL;
    int rc = mcConnAdmit(conn, s->id, segToken(c, s, 0));
    if (rc == MC_ERR_AUTH) rc = mcConnAdmit(conn, s->id, segToken(c, s, 1));
    if (rc == MC_OK) return conn;
    mcErr(c, rc, "%s: %s", uri, conn->err);
    if (rc == MC_ERR_IO) mcDropConn(c, conn);
    return NULL;
}

/* Maps the segment's memory through one of its unix endpoints. The reply
 * is [seg-id, size], or [seg-id, size, offset] for a slice of a larger
 * memfd (a segment hosted by a libmooncake process in a cluster). */
int mcSegAttach(mc_client *c, mcSeg *s) {
    if (s->shm_state) return s->shm_state > 0 ? MC_OK : MC_ERR_UNSUPPORTED;
    s->shm_state = -1;
    for (int i = 0; i < s->nendpoints; i++) {
        if (strncmp(s->endpoints[i], "unix://", 7)) continue;
        mcConn *conn = mcSegConn(c, s, s->endpoints[i]);
        if (conn == NULL) continue;
        char idbuf[24];
        mcFmtU64(idbuf, sizeof(idbuf), s->id);
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
            mcErrReply(c, r);
        }
        mcReplyFree(r);
        int fd = conn->recv_fd;
        conn->recv_fd = -1;
        if (!ok || !ok_off || fd < 0 || size <= 0 || off < 0) {
            if (fd >= 0) close(fd);
            if (r == NULL) mcDropConn(c, conn);
            continue;
        }
        /* The process's one mapping of this memory, shared with its other
         * handles and populated by the ranges copied (mc_shm.c). */
        char merr[128];
        mcShm *m = mcShmAcquire(fd, (uint64_t)off, (uint64_t)size, merr, sizeof(merr));
        close(fd);
        if (m == NULL) {
            mcErr(c, MC_ERR_IO, "segment %llu: %s", (unsigned long long)s->id, merr);
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

mcRdma *mcClientRdma(mc_client *c) {
    if (!c->rdma_tried) {
        char err[256];
        c->rdma_tried = 1;
        c->rdma = mcRdmaOpen(err, sizeof(err));
        if (c->rdma == NULL) mcErr(c, MC_ERR_UNSUPPORTED, "rdma: %s", err);
        snprintf(c->rdma_err, sizeof(c->rdma_err), "rdma: %.150s", c->rdma ? "" : err);
    }
    return c->rdma;
}

mcRegion *mcRegionOf(mc_client *c, const void *p, size_t len) {
    for (mcRegion *r = c->regions; r; r = r->next)
        if ((const char *)p >= r->addr && len <= r->len && (size_t)((const char *)p - r->addr) <= r->len - len)
            return r;
    return NULL;
}

/* One replica's copy to or from the segment's shared memory: one copy per
 * buffer, each at its own offset of the extent (the first rep->len bytes of
 * the buffers move), through the file or the mapping (mc_shm.c). device:
 * some buffers may be device memory, copied with the CUDA runtime straight
 * to or from the mapping (page-locked window by window as copies reach
 * them, mc_shm.c). */
int mcSegShmCopy(mc_client *c, const mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                 int write, int device) {
    if (rep->off > s->size || rep->len > s->size - rep->off)
        return mcErr(c, MC_ERR_PROTOCOL, "replica outside segment %llu", (unsigned long long)s->id);
    uint64_t at = rep->off, left = rep->len;
    for (int i = 0; i < iovcnt && left; i++) {
        size_t n = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
        if (n && device && mcCudaIsDevicePtr(iov[i].iov_base)) {
            char err[256], *dev = iov[i].iov_base;
            mcShmPrepare(s->shm, at, n);
            /* Cut at the page-locked windows' ends (mc_shm.c): each copy in
             * one registration; a refused window's copy goes unpinned. */
            for (uint64_t done = 0, piece; done < n; done += piece) {
                piece = mcShmCudaWindow(s->shm, at + done, n - done, NULL);
                int rc = write ? mcCudaCopy(s->map + at + done, dev + done, (size_t)piece, err, sizeof(err))
                               : mcCudaCopy(dev + done, s->map + at + done, (size_t)piece, err, sizeof(err));
                if (rc != MC_OK) return mcErr(c, rc, "%s", err);
            }
        } else if (n) {
            mcShmCopy(s->shm, at, iov[i].iov_base, n, write);
        }
        at += n;
        left -= n;
    }
    *c->last_transport = MC_TRANSPORT_SHM;
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

int mcSegTcpXfer(mc_client *c, mcSeg *s, const mcReplica *rep, const struct iovec *iov, int iovcnt, int write) {
    int rc = MC_ERR_UNSUPPORTED;
    /* tcp:// endpoints first; the same protocol works over a unix one. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->nendpoints; i++) {
            const char *ep = s->endpoints[i];
            int is_tcp = !strncmp(ep, "tcp://", 6), is_unix = !strncmp(ep, "unix://", 7);
            if (pass == 0 ? !is_tcp : !is_unix) continue;
            char uri[300];
            mcEndpointUri(c, s, ep, uri, sizeof(uri));
            mcConn *conn = mcSegConn(c, s, uri);
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
                if (attempt && (conn = mcSegConn(c, s, uri)) == NULL) break;
                if (mcSegStale(c, s)) return mcSegLost(c);
                if (mcTcpStriped(tcpPool(c, streams), conn, uri, segToken(c, s, 0), streams, c->connect_ms,
                                 c->io_ms, s->id, rep->off, rep->len, iov, iovcnt, write, &f)) {
                    *c->last_transport = MC_TRANSPORT_TCP;
                    return MC_OK;
                }
                rc = f.reply ? mcErrReply(c, f.reply) : mcErr(c, f.auth ? MC_ERR_AUTH : MC_ERR_IO, "%s", f.err);
                /* A token the host refused: the server's current one, once. */
                if (f.auth) segToken(c, s, 1);
                int again = (f.reply == NULL && !f.timed_out) || f.auth;
                mcReplyFree(f.reply);
                if (conn->broken) mcDropConn(c, conn);
                if (!again) break;
            }
        }
    }
    return rc;
}

/* 1 if every byte of the first len of iov[0..iovcnt) lies in memory
 * registered with the RDMA engine (a buffer at a time: each may be in a
 * region of its own). */
int mcIovRdmaRegistered(mc_client *c, const struct iovec *iov, int iovcnt, uint64_t len) {
    for (int i = 0; i < iovcnt && len; i++) {
        size_t n = iov[i].iov_len < len ? iov[i].iov_len : (size_t)len;
        mcRegion *reg = n ? mcRegionOf(c, iov[i].iov_base, n) : NULL;
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
            if (rc != MC_OK) return mcErr(c, rc, "%s", err);
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
    return rc != MC_OK ? rc : s == MC_OK ? MC_OK : mcErr(c, s, "%s", err);
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
            if (rc == MC_OK) rc = mcSegTcpXfer(c, s, &sub, &one, 1, 1);
            if ((rc = streamSync(c, rc)) != MC_OK) return rc; /* the next slot is filled */
        } else {
            rc = mcSegTcpXfer(c, s, &sub, &one, 1, 0);
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
    if (rep->len > SIZE_MAX) return mcErr(c, MC_ERR_NOMEM, "replica too large to stage");
    if (rep->len > MC_DEV_CHUNK) {
        if (c->cuda_stream == NULL) c->cuda_stream = mcCudaStreamCreate();
        char *st = c->cuda_stream ? stageBuffer(c, 2 * (size_t)MC_DEV_CHUNK) : NULL;
        if (st) return tcpXferChunked(c, s, rep, iov, iovcnt, write, st);
    }
    char *st = stageBuffer(c, (size_t)rep->len);
    if (st == NULL)
        return mcErr(c, MC_ERR_NOMEM, "no pinned staging buffer for %llu bytes", (unsigned long long)rep->len);
    struct iovec one = {st, (size_t)rep->len};
    int rc;
    if (write && (rc = iovStage(c, st, iov, iovcnt, rep->len, 1)) != MC_OK) return rc;
    if ((rc = mcSegTcpXfer(c, s, rep, &one, 1, write)) != MC_OK) return rc;
    return write ? MC_OK : iovStage(c, st, iov, iovcnt, rep->len, 0);
}

/* Moves one replica's bytes (a segment of node `node`) by the fastest path
 * allowed, to or from the first rep->len bytes of iov[0..iovcnt); MC_OK or
 * MC_ERR_*. device: XF_HOST, XF_DEVICE (device memory among the buffers:
 * shm copies it directly, tcp stages it), or XF_GPUDIRECT (device memory
 * all registered for RDMA: RDMA carries it from the device, unless shm
 * reaches the segment; where neither does, tcp stages it as for
 * XF_DEVICE). GPUDirect is a faster way for device memory, never the only
 * one: it once was here, and every put of registered device memory to a
 * segment without rdma:// (the server's own pool) or whose RDMA paths
 * all failed was refused, "device memory needs staging" (found by the
 * fakedev audit, fake CUDA and fake verbs with MC_GPUDIRECT=peermem). */
int mcXferReplica(mc_client *c, int node, unsigned gen, const mcReplica *rep, const struct iovec *iov, int iovcnt,
                  int write, int device) {
    if (c->map.nodes[node].gen != gen) return mcSegLost(c);
    mcSeg *s = mcSegGet(c, node, rep->seg);
    if (s == NULL) {
        /* Why mcSegGet failed is in errbuf, which mcErr writes: formatted
         * from itself it came out garbled ("segment 1: segment 1: ction
         * closed"; overlapping vsnprintf is undefined). */
        char why[MC_ERRLEN];
        snprintf(why, sizeof(why), "%s", c->errbuf);
        return mcErr(c, MC_ERR_IO, "segment %llu: %.400s", (unsigned long long)rep->seg, why);
    }
    if (s->gen != gen) return mcSegLost(c);
    int t = c->transport, rc = MC_ERR_UNSUPPORTED;
    if ((t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_SHM) && mcSegAttach(c, s) == MC_OK)
        return mcSegStale(c, s) ? mcSegLost(c) : mcSegShmCopy(c, s, rep, iov, iovcnt, write, device != XF_HOST);
    if (t == MC_TRANSPORT_SHM) return mcErr(c, MC_ERR_UNSUPPORTED, "no shared memory path to segment %llu", (unsigned long long)s->id);
    if (t == MC_TRANSPORT_AUTO || t == MC_TRANSPORT_RDMA) {
        int reg = device != XF_DEVICE && c->regions && mcIovRdmaRegistered(c, iov, iovcnt, rep->len);
        for (int i = 0; i < s->nendpoints && reg; i++) {
            if (strncmp(s->endpoints[i], "rdma://", 7) || mcClientRdma(c) == NULL) continue;
            mcRdmaDesc d;
            char err[256];
            if (mcRdmaDescParse(&d, s->endpoints[i], s->base, s->rkey ? s->rkey : "", err, sizeof(err)) != 0) {
                rc = mcErr(c, MC_ERR_PROTOCOL, "%s", err);
                continue;
            }
            if (mcSegStale(c, s)) return mcSegLost(c);
            rc = rdmaXfer(c, &d, rep, iov, iovcnt, write, err, sizeof(err));
            if (rc == MC_OK) {
                *c->last_transport = MC_TRANSPORT_RDMA;
                return MC_OK;
            }
            mcErr(c, rc, "rdma: %s", err);
        }
        if (t == MC_TRANSPORT_RDMA) {
            if (rc == MC_ERR_UNSUPPORTED && !c->errbuf[0])
                mcErr(c, rc, "no rdma path to segment %llu", (unsigned long long)s->id);
            return rc;
        }
    }
    if (device != XF_HOST) return tcpXferDevice(c, s, rep, iov, iovcnt, write);
    return mcSegTcpXfer(c, s, rep, iov, iovcnt, write);
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
int mcIovCheck(mc_client *c, const struct iovec *iov, int iovcnt, size_t *total) {
    *total = 0;
    if (iov == NULL || iovcnt < 1 || iovcnt > MC_MAX_IOV)
        return mcErr(c, MC_ERR_INVALID, "iovcnt %d: want 1..%d buffers", iov ? iovcnt : 0, MC_MAX_IOV);
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_base == NULL && iov[i].iov_len)
            return mcErr(c, MC_ERR_INVALID, "buffer %d: NULL with length %zu", i, iov[i].iov_len);
        if (iov[i].iov_len > SIZE_MAX - *total) return mcErr(c, MC_ERR_INVALID, "buffers add up past SIZE_MAX");
        *total += iov[i].iov_len;
    }
    return MC_OK;
}

/* put_from/get_into take registered memory only: each nonempty buffer must
 * lie inside one registered region (mc_register). */
int mcIovRegistered(mc_client *c, const struct iovec *iov, int iovcnt) {
    for (int i = 0; i < iovcnt; i++)
        if (iov[i].iov_len && mcRegionOf(c, iov[i].iov_base, iov[i].iov_len) == NULL)
            return mcErr(c, MC_ERR_INVALID, "buffer %d is not inside a registered region", i);
    return MC_OK;
}

/* How the first len bytes of the buffers move: XF_HOST, XF_DEVICE, or
 * XF_GPUDIRECT when there is device memory and all of it is registered for
 * RDMA. */
int mcIovDevice(mc_client *c, const struct iovec *iov, int iovcnt, uint64_t len) {
    uint64_t left = len;
    if (!mcCudaActive()) return XF_HOST; /* no CUDA in the process: one check for all the buffers */
    for (int i = 0; i < iovcnt && left; i++) {
        if (iov[i].iov_len && mcCudaIsDevicePtr(iov[i].iov_base))
            return mcIovRdmaRegistered(c, iov, iovcnt, len) ? XF_GPUDIRECT : XF_DEVICE;
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
            if (rc != MC_OK) return mcErr(c, rc, "%s", err);
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

