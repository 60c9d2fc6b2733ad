/* mc_session.c -- put sessions: an object reserved once, written in byte
 * ranges by many later calls, published (or revoked) at the end.
 *
 * Why. An engine that saves KV blocks layer by layer (vLLM's layerwise
 * mode, through Mooncake's batch_put_session_* calls) knows each block's
 * whole size before the first layer is computed, and has each layer's
 * slice only after that layer ran. With a session the block is one
 * object: BATCH.PUT.START reserves it at the start, each layer's slices
 * are copied into place as they come (no metadata round trip: the
 * replicas are known), and BATCH.PUT.END publishes it whole. Without one,
 * each layer would be an object of its own: L times the keys, the
 * metadata and the existence checks.
 *
 * Shape. A session is the state of one PUT.START kept for the caller: the
 * key, the node and connection generation that answered it, and the
 * replicas. The server lets only the connection that started a put end or
 * revoke it, so a session belongs to the handle that started it and is
 * ended on it; if that connection was lost meanwhile, the server has
 * already given the put back (its pending sweep), and every later call on
 * the session fails with MC_ERR_IO rather than guess. Bytes are copied at
 * each write, as Mooncake's are: the caller may reuse its buffers as soon
 * as a write returns. A write moves each range into every replica by the
 * batch machinery (shm copies now, tcp pipelined, device memory as for
 * mc_put_from), and a write that fails marks the session failed: its end
 * is refused and the caller revokes it, so a partly written object is
 * never published.
 *
 * Nothing here rides through a failover or a moved slot as the one-call
 * batches do: they can redo a put from its start because they still hold
 * the bytes, and a session does not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_client.h"
#include "mc_cuda.h"

struct mc_put_session {
    mc_client *owner;            /* the handle whose connection started it */
    void *key;                   /* a copy: the end key's bytes (end.key, end.keylen) */
    uint64_t size;
    mcBKey end;                  /* its PUT.END/PUT.REVOKE key: the node and connection generation
                                    that answered PUT.START (end.node, end.gen), the slot; end.key is key */
    mcReplica reps[MC_MAX_REPLICAS];
    size_t nreps;
    long long started_us;        /* when its PUT.START was answered */
    int failed;                  /* a write failed: only a revoke is left */
};

/* How long a session takes writes: the server's default put-timeout.
 * Before it no other writer can take the put over; after it one may, and
 * the server keeps the old extents only for put-release-timeout (default
 * 10 min) -- a write after that could land in someone else's object. The
 * client cannot know the server's settings, so it keeps to the default:
 * a session is for one pass of a model (layers), not minutes. */
#define MC_PUT_SESSION_WRITE_US (30LL * 1000 * 1000)

void mc_put_session_free(mc_put_session *s) {
    if (s == NULL) return;
    free(s->key);
    free(s);
}

/* ---- start --------------------------------------------------------------- */

static int startLocked(mc_client *c, size_t n, const mc_key *keys, const size_t *sizes, const mc_put_opts *opts,
                       mc_put_session **sessions, int *results) {
    const char *tail[10];
    char repbuf[16], pinbuf[24];
    char (*sizebuf)[24] = malloc(n * sizeof(*sizebuf));
    mcBKey *k = calloc(n, sizeof(*k));
    int rc = MC_OK, started = 0;
    if (sizebuf == NULL || k == NULL) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) mcPutStartKey(c, &k[i], keys[i].key, keys[i].keylen, sizes[i], sizebuf[i]);
    mcPhase start = {"BATCH.PUT.START", 1, 0, tail, mcPutOptArgs(opts, tail, repbuf, pinbuf)};
    if ((rc = mcRunPhase(c, &start, k, n)) != MC_OK) goto end;
    for (size_t i = 0; i < n; i++) {
        const mcReply *e = k[i].res;
        if (k[i].rc != MC_OK || e->type != MCR_ARRAY) {
            results[i] = k[i].rc != MC_OK ? k[i].rc : mcErrReply(c, e);
            continue;
        }
        mc_put_session *s = calloc(1, sizeof(*s));
        int bad = s == NULL || (s->key = malloc(keys[i].keylen)) == NULL ? MC_ERR_NOMEM : MC_OK;
        for (size_t j = 0; bad == MC_OK && j < e->elements && j < MC_MAX_REPLICAS; j++) {
            if (mcParseReplica(e->element[j], &s->reps[j]) != 0 || s->reps[j].len != sizes[i]) bad = MC_ERR_PROTOCOL;
            else s->nreps++;
        }
        if (bad == MC_OK && s->nreps == 0) bad = MC_ERR_PROTOCOL;
        if (bad != MC_OK) {
            mc_put_session_free(s);
            results[i] = mcErr(c, bad, bad == MC_ERR_NOMEM ? "out of memory" : "bad replica in the reply to BATCH.PUT.START");
            /* Reserved but unusable: given back now, not at put-timeout. */
            mcBKey rv = mcPutEndKey(&k[i]);
            mcPhase revoke = {"PUT.REVOKE", 0, 1, NULL, 0};
            mcRunPhase(c, &revoke, &rv, 1);
            mcReplyFree(rv.res);
            continue;
        }
        memcpy(s->key, keys[i].key, keys[i].keylen);
        s->owner = c;
        s->size = sizes[i];
        s->end = mcPutEndKey(&k[i]);
        s->end.key = s->key;
        s->started_us = mcNowUs();
        sessions[i] = s;
        results[i] = MC_OK;
        started++;
    }
    rc = started;
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++)
            if (results[i] == MC_ERR_INVALID && sessions[i] == NULL) results[i] = rc;
    mcFreeBKeys(k, n);
    free(sizebuf);
    return rc;
}

int mc_put_session_start(mc_client *c, size_t n, const mc_key *keys, const size_t *sizes, const mc_put_opts *opts,
                         mc_put_session **sessions, int *results) {
    if (mcHandleBad(c) || (n && (keys == NULL || sizes == NULL || sessions == NULL || results == NULL)))
        return MC_ERR_INVALID;
    if (n == 0) return 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        sessions[i] = NULL;
        results[i] = MC_ERR_INVALID;
        if (keys[i].key == NULL || keys[i].keylen == 0 || sizes[i] == 0) bad = 1;
    }
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = bad ? mcErr(c, MC_ERR_INVALID, "put session: an empty key or a size of 0")
                 : startLocked(c, n, keys, sizes, opts, sessions, results);
    mcUnlock(c);
    return rc;
}

/* ---- write ----------------------------------------------------------------- */

/* Whether s may still be written (write) or ended on c: MC_OK, or why
 * not. A write also asks the socket whether the server closed the
 * connection meanwhile (it gives the put back then, and its extents after
 * put-release-timeout): shm writes need no round trip that would tell. */
static int sessionUsable(mc_client *c, mc_put_session *s, int write) {
    if (s == NULL) return mcErr(c, MC_ERR_INVALID, "no session");
    if (s->owner != c) return mcErr(c, MC_ERR_INVALID, "the session was started on another handle");
    if (s->failed) return mcErr(c, MC_ERR_IO, "an earlier write of the session failed (ending it revokes it)");
    if (s->end.node < 0 || s->end.node >= c->map.nnodes || !mcNodeSame(c, s->end.node, s->end.gen) ||
        (write && mcConnPeerClosed(c->map.nodes[s->end.node].conn)))
        return mcErr(c, MC_ERR_IO, "the connection that started the session was lost (the server gave the put back)");
    if (write && mcNowUs() - s->started_us > MC_PUT_SESSION_WRITE_US) {
        s->failed = 1;
        return mcErr(c, MC_ERR_IO, "the session is older than %lld s: its put may have been taken over; revoke it",
                     MC_PUT_SESSION_WRITE_US / 1000000);
    }
    return MC_OK;
}

static int writeLocked(mc_client *c, size_t n, const mc_session_ranges *items, long long *results) {
    size_t nranges = 0;
    for (size_t i = 0; i < n; i++) nranges += (size_t)items[i].nranges;
    size_t maxx = nranges * MC_MAX_REPLICAS;
    mcTcpItem *pend = malloc((maxx ? maxx : 1) * sizeof(*pend));
    struct iovec *iov = malloc((nranges ? nranges : 1) * sizeof(*iov));
    mcReplica *narrow = malloc((maxx ? maxx : 1) * sizeof(*narrow));
    int *ok = malloc((n ? n : 1) * sizeof(*ok));
    size_t np = 0, ni = 0, nn = 0;
    int rc = MC_OK, written = 0;
    if (pend == NULL || iov == NULL || narrow == NULL || ok == NULL) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) results[i] = rc;
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        mc_put_session *s = items[i].session;
        long long total = 0;
        ok[i] = 0;
        int st = sessionUsable(c, s, 1);
        if (st == MC_OK) {
            /* Every range inside the object and inside registered memory,
             * before any byte moves: a refused write changes nothing. */
            for (int r = 0; r < items[i].nranges && st == MC_OK; r++) {
                const mc_src_range *g = &items[i].ranges[r];
                struct iovec one = {(void *)g->src, g->len};
                if (g->len == 0) continue;
                if (g->src == NULL || g->dst_off > s->size || g->len > s->size - g->dst_off)
                    st = mcErr(c, MC_ERR_INVALID, "range %d: %zu bytes at %llu outside an object of %llu", r,
                               g->len, (unsigned long long)g->dst_off, (unsigned long long)s->size);
                else
                    st = mcIovRegistered(c, &one, 1);
                total += (long long)g->len;
            }
        }
        if (st != MC_OK) {
            results[i] = st;
            continue;
        }
        ok[i] = 1;
        int cuda = mcCudaActive();
        for (int r = 0; r < items[i].nranges && ok[i]; r++) {
            const mc_src_range *g = &items[i].ranges[r];
            if (g->len == 0) continue;
            iov[ni] = (struct iovec){(void *)g->src, g->len};
            int dev = cuda ? mcIovDevice(c, &iov[ni], 1, g->len) : XF_HOST;
            for (size_t j = 0; j < s->nreps && ok[i]; j++) {
                mcReplica *rep = &narrow[nn++];
                *rep = (mcReplica){s->reps[j].seg, s->reps[j].off + g->dst_off, g->len};
                int x = mcStartXfer(c, s->end.node, s->end.gen, rep, &iov[ni], 1, 1, dev, &pend[np]);
                if (x == 1) pend[np++].item = i;
                else if (x != MC_OK && mcXferReplica(c, s->end.node, s->end.gen, rep, &iov[ni], 1, 1, dev) != MC_OK)
                    ok[i] = 0;
            }
            ni++;
        }
        results[i] = total;
    }
    mcFinishXfers(c, pend, np, 1, ok);
    /* A transfer that failed on a data connection (a stale one, closed by
     * the server meanwhile) is done again, one by one on fresh ones, while
     * the put is still ours: the bytes are still the caller's, so unlike
     * a lost put this needs nothing but another try. */
    for (size_t i = 0; i < n; i++) {
        mc_put_session *s = items[i].session;
        if (results[i] < 0 || ok[i] || !mcNodeAlive(c, s->end.node, s->end.gen)) continue;
        ok[i] = 1;
        for (int r = 0; r < items[i].nranges && ok[i]; r++) {
            const mc_src_range *g = &items[i].ranges[r];
            struct iovec one = {(void *)g->src, g->len};
            if (g->len == 0) continue;
            int dev = mcIovDevice(c, &one, 1, g->len);
            for (size_t j = 0; j < s->nreps && ok[i]; j++) {
                mcReplica rep = {s->reps[j].seg, s->reps[j].off + g->dst_off, g->len};
                if (mcXferReplica(c, s->end.node, s->end.gen, &rep, &one, 1, 1, dev) != MC_OK) ok[i] = 0;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i] < 0) continue;
        if (ok[i]) {
            written++;
        } else {
            items[i].session->failed = 1;
            results[i] = c->errbuf[0] ? MC_ERR_IO : mcErr(c, MC_ERR_IO, "a range could not be written");
        }
    }
    rc = written;
end:
    free(pend);
    free(iov);
    free(narrow);
    free(ok);
    return rc;
}

int mc_put_session_write(mc_client *c, size_t n, const mc_session_ranges *items, long long *results) {
    if (mcHandleBad(c) || (n && (items == NULL || results == NULL))) return MC_ERR_INVALID;
    if (n == 0) return 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = MC_ERR_INVALID;
        if (items[i].nranges < 0 || items[i].nranges > MC_MAX_IOV || (items[i].nranges && items[i].ranges == NULL))
            bad = 1;
    }
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = bad ? mcErr(c, MC_ERR_INVALID, "put session write: nranges outside 0..%d", MC_MAX_IOV)
                 : writeLocked(c, n, items, results);
    mcUnlock(c);
    return rc;
}

/* ---- end and revoke ---------------------------------------------------------- */

/* BATCH.PUT.END (publish) or PUT.REVOKE of the sessions, each on the node
 * and connection that started it; every session is freed, whatever came
 * of it. An end of a session whose write failed revokes it instead and
 * answers MC_ERR_IO: a partly written object is never published, and its
 * space is given back now rather than at put-timeout. */
static void revokeBest(mc_client *c, mcBKey *k, size_t m) {
    if (m == 0) return;
    mcPhase revoke = {"PUT.REVOKE", 0, 1, NULL, 0};
    mcRunPhase(c, &revoke, k, m);
}

/* The array sorted by session, ties by position: a session given twice
 * is a run of equal pointers. */
typedef struct {
    const mc_put_session *s;
    size_t i;
} sessionAt;

static int sessionAtCmp(const void *a, const void *b) {
    const sessionAt *x = a, *y = b;
    if (x->s != y->s) return (uintptr_t)x->s < (uintptr_t)y->s ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* dup[i] = 1 where sessions[i] is a session given earlier in the array.
 * Its first place ends it (and frees it); a later one must touch neither
 * the session nor the server: it would end the put twice and free the
 * session twice. Sorted, not compared pairwise: n may be thousands. */
static int markDuplicates(size_t n, mc_put_session *const *sessions, char *dup) {
    sessionAt *at = malloc(n * sizeof(*at));
    if (at == NULL) return MC_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) at[i] = (sessionAt){sessions[i], i};
    qsort(at, n, sizeof(*at), sessionAtCmp);
    for (size_t j = 1; j < n; j++)
        if (at[j].s != NULL && at[j].s == at[j - 1].s) dup[at[j].i] = 1;
    free(at);
    return MC_OK;
}

static int finishLocked(mc_client *c, size_t n, mc_put_session *const *sessions, int *results, int publish) {
    mcBKey *k = calloc(n, sizeof(*k)), *rv = calloc(n, sizeof(*rv));
    size_t *item = malloc(n * sizeof(*item));
    char *dup = calloc(n, 1);
    size_t m = 0, nrv = 0;
    int rc = MC_OK, done = 0;
    if (k == NULL || rv == NULL || item == NULL || dup == NULL || markDuplicates(n, sessions, dup) != MC_OK) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        free(dup);
        dup = NULL; /* nothing was ended: the sessions are freed below all the same, once each */
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        mc_put_session *s = sessions[i];
        int st = MC_OK;
        if (dup[i]) {
            results[i] = mcErr(c, MC_ERR_INVALID, "session %zu is given twice (its first place ends it)", i);
            continue;
        }
        if (s == NULL || s->owner != c)
            st = mcErr(c, MC_ERR_INVALID, s ? "the session was started on another handle" : "no session");
        else if (publish)
            st = sessionUsable(c, s, 0);
        if (st != MC_OK) {
            results[i] = st;
            if (s && s->owner == c && s->failed && mcNodeSame(c, s->end.node, s->end.gen))
                rv[nrv++] = s->end;
            continue;
        }
        k[m] = s->end;
        item[m++] = i;
    }
    revokeBest(c, rv, nrv);
    if (m) {
        mcPhase end = {"BATCH.PUT.END", 0, 0, NULL, 0};
        mcPhase revoke = {"PUT.REVOKE", 0, 1, NULL, 0};
        rc = mcRunPhase(c, publish ? &end : &revoke, k, m);
        for (size_t j = 0; j < m; j++) {
            size_t i = item[j];
            if (rc != MC_OK) results[i] = rc;
            else if (k[j].rc != MC_OK) results[i] = k[j].rc;
            else results[i] = k[j].res->type == MCR_ERROR ? mcErrReply(c, k[j].res) : MC_OK;
            /* A revoke of a put the server no longer has is done all the same. */
            if (!publish && results[i] == MC_ERR_IO && !mcNodeSame(c, k[j].node, k[j].gen)) results[i] = MC_OK;
        }
    }
    for (size_t i = 0; i < n; i++) done += results[i] == MC_OK;
    if (rc == MC_OK) rc = done;
end:
    if (rc < 0)
        for (size_t i = 0; i < n; i++)
            if (results[i] == MC_ERR_INVALID && sessions[i] && (dup == NULL || !dup[i]) && sessions[i]->owner == c)
                results[i] = rc;
    /* Ended or revoked, the caller's sessions are gone: a failed end
     * leaves nothing to do but revoke, and the server gives back a put
     * its connection never ends. Each once: a session given twice is
     * freed at its first place (dup NULL: out of memory before the
     * duplicates were found, so they are looked for here, pairwise). */
    for (size_t i = 0; i < n; i++) {
        mc_put_session *s = sessions[i];
        int seen = dup ? dup[i] : 0;
        for (size_t j = 0; dup == NULL && j < i && !seen; j++) seen = sessions[j] == s;
        if (s && !seen && s->owner == c) mc_put_session_free(s);
    }
    mcFreeBKeys(k, m);
    mcFreeBKeys(rv, nrv);
    free(item);
    free(dup);
    return rc;
}

/* End or revoke on a handle inherited across fork(): the put is the
 * parent's to end (mooncake.c, "Fork"), so nothing is sent; the sessions
 * are freed as the call promises, each once -- only this process's copies. */
static int finishInherited(mc_client *c, size_t n, mc_put_session *const *sessions, int *results) {
    for (size_t i = 0; i < n; i++) {
        mc_put_session *s = sessions[i];
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = sessions[j] == s;
        if (s && !seen && s->owner == c) mc_put_session_free(s);
        results[i] = MC_ERR_INVALID;
    }
    return MC_ERR_INVALID;
}

static int finish(mc_client *c, size_t n, mc_put_session *const *sessions, int *results, int publish) {
    if (c == NULL || (n && (sessions == NULL || results == NULL))) return MC_ERR_INVALID;
    if (mcHandleBad(c)) return finishInherited(c, n, sessions, results);
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) results[i] = MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    c->errbuf[0] = '\0';
    int rc = finishLocked(c, n, sessions, results, publish);
    mcUnlock(c);
    return rc;
}

int mc_put_session_end(mc_client *c, size_t n, mc_put_session *const *sessions, int *results) {
    return finish(c, n, sessions, results, 1);
}

int mc_put_session_revoke(mc_client *c, size_t n, mc_put_session *const *sessions, int *results) {
    return finish(c, n, sessions, results, 0);
}
