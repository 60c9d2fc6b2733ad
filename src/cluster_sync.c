/* cluster_sync.c -- the cluster's topology in etcd: records, leases, the
 * watch, and topology changes as compare-and-swap transactions.
 *
 * Schema, under "/mooncake/<cluster-name>/":
 *   nodes/<id>  one JSON record per node (cluster_node.c), no lease (it outlives the node):
 *               {"id","group","ip","port","cport","epoch","role","primary",
 *                "slots":[[start,end],...],
 *                "migrating":[[slot,"dst-id"],...],"importing":[[slot,"src-id"],...]}
 *               role is "primary" or "replica"; a replica's "primary" names its
 *               primary and its "slots" is empty (replication.c streams the data).
 *   alive/<id>  "ip:port" under the node's lease (TTL = cluster-node-timeout):
 *               present while the node lives.
 *   repl/<id>   "<primary-id> <epoch> <offset>" under the node's lease: a replica's
 *               offset when its primary died (replication_failover.c ranks replicas by it).
 *   slotmap     the id of the node whose transaction last gave some node a slot, no
 *               lease. Its value is only informative: its mod revision is the point.
 *
 * Every node holds a mirror of the prefix (server.cluster->nodes), loaded
 * by one range at start and kept current by a watch; cluster.c derives the
 * slot map from it. Keys are applied only if their mod revision is newer
 * than what the mirror has, so our own writes (applied when the
 * transaction commits) and the watch's echo of them do not fight.
 *
 * A topology command (ADDSLOTS, SETSLOT, MEET, ...) is planned against the
 * mirror: it clones the records it changes, edits the clones, and sends one
 * transaction that puts them if every record still has the mod revision
 * the plan read. A plan that gives any node a slot also compares and puts
 * "slotmap": a compare on the records it changes would let two nodes each
 * take the same free slot at once (each changes only its own record, both
 * commit, both clients hear +OK, and etcd then holds two claims of which
 * the loser's stays, to surface when the winner lets the slot go). One key
 * every slot grant touches puts such plans in one order: the second fails
 * its compare, rereads, and plans against the first. The client is blocked meanwhile (its pipeline waits). On
 * success the clones replace the records and the client gets its reply; on
 * a conflict the failure branch returns the whole prefix, the mirror is
 * refreshed and the plan runs again (a few times); if etcd cannot be
 * reached the client gets -TRYAGAIN and nothing changed (or, when a try
 * reached etcd and its answer was lost, a -TRYAGAIN that says the change
 * may have been applied). Requests run on
 * etcd.c's worker thread, so the event loop never waits for etcd: a slow or
 * dead etcd delays topology changes, never a GET.
 *
 * A restarted node takes its record back from etcd, slots included. A
 * primary that comes back without its data (no log) while a replica of it
 * lives is the one case where that would be wrong: the replica would sync
 * the empty keyspace. Such a node is held (restartedWithoutData) until a
 * replica has taken over; see heldEmptyCron.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "aof.h"
#include "cluster.h"
#include "etcd.h"
#include "notify.h"
#include "replication.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define OP_MAX_ATTEMPTS 8

typedef struct clusterOp {
    client *c;        /* NULL once the client is gone: the change still lands */
    int argc;
    sds *argv;        /* the CLUSTER command, copied: a retry plans again */
    int attempts;
    int nclones;
    clusterNode **clones;  /* the records as they will be after the txn */
    sds *deleted;          /* ids whose record the txn deletes (RESET HARD) */
    int ndeleted;
    sds reply;             /* status reply on success; NULL = +OK */
    char new_id[CLUSTER_NAMELEN + 1]; /* RESET HARD: the id myself takes */
    /* Failover ops (no client, or one that waits): the primary whose slots
     * are taken; with dead, only while its alive key is absent. */
    char failed_primary[CLUSTER_NAMELEN + 1];
    int dead;
    int flush_after;       /* RESET of a replica: its copy of the data goes */
    int grants;            /* the txn gives some node a slot: it compares and puts slotmap */
} clusterOp;

static dict *aliveIds;  /* ids with an alive/<id> key */
static int initInflight, registerInflight, watchStarted;
/* A RESET HARD in flight: the watch may show our old record deleted and
 * the new one before the transaction's reply does. Neither is a stranger
 * nor a reason to register the old id again. */
static char resetHardNewId[CLUSTER_NAMELEN + 1];
static long long nextInitTry;
static long long keepaliveSentMs; /* when the lease request in flight was sent */

static void idFree(void *k) { sdsfree(k); }
static dictType aliveType = {dictCStrHash, dictCStrEqual, idFree, NULL};

static void clusterOpRun(clusterOp *op);

/* Moves src's record fields into dst, keeping dst's identity as a pointer
 * (the slot map and open-slot tables point at it). */
static void replaceNodeFields(clusterNode *dst, clusterNode *src) {
    int alive = dst->alive, flags = dst->flags;
    zfree(dst->ranges);
    zfree(dst->migrating);
    zfree(dst->importing);
    *dst = *src;
    dst->alive = alive;
    dst->flags = flags;
    zfree(src);
}

/* ---- the mirror ---------------------------------------------------------------- */

static sds keyFor(const char *kind, const char *id) {
    return sdscatprintf(sdsdup(server.cluster->prefix), "%s/%s", kind, id);
}

/* Which record a key names: returns "nodes" or "alive" kind and the id,
 * or "slotmap" (no id). */
static const char *parseKey(const sds key, const char **id) {
    clusterState *cs = server.cluster;
    size_t pl = sdslen(cs->prefix);
    if (sdslen(key) <= pl || memcmp(key, cs->prefix, pl)) return NULL;
    const char *rest = key + pl;
    size_t rl = sdslen(key) - pl;
    if (rl == 7 && !memcmp(rest, "slotmap", 7)) {
        *id = NULL;
        return "slotmap";
    }
    if (rl == 6 + CLUSTER_NAMELEN && !memcmp(rest, "nodes/", 6)) {
        *id = rest + 6;
        return "nodes";
    }
    if (rl == 6 + CLUSTER_NAMELEN && !memcmp(rest, "alive/", 6)) {
        *id = rest + 6;
        return "alive";
    }
    return NULL;
}

/* The slotmap key as the mirror knows it: its mod revision (0: absent,
 * which is what a compare of a missing key needs) as of slotmapSeen, the
 * revision of the last change of it we applied. Our own commits and the
 * watch's late echo of older ones arrive in any order: only a newer change
 * moves it. */
static long long slotmapModRev, slotmapSeen;

static void applySlotmap(int deleted, long long mod_rev) {
    if (mod_rev <= slotmapSeen) return;
    slotmapSeen = mod_rev;
    slotmapModRev = deleted ? 0 : mod_rev;
}

/* When a missing alive key starts to mean a dead node, for failover
 * (replMaybeFailover). A key can be missing because etcd, not its node,
 * was in trouble: an etcd recreated empty holds no alive key at all, and
 * one frozen past the TTL expires every lease at once when it resumes.
 * Each live node puts its key back within a round trip or two of noticing,
 * but a replica that acted at once would take the slots of a healthy
 * primary (its data then discarded, a full sync from the replica). So
 * after etcd's history changed, or our own key went (the sign that etcd,
 * or we, were cut off), a node's absence counts only once it has lasted
 * cluster-node-timeout: the time any live node has to renew. */
static long long aliveTrustedFromMs;

static void distrustAlive(void) { aliveTrustedFromMs = monoMs() + server.cluster_node_timeout; }

long long clusterAliveTrustedFrom(void) { return aliveTrustedFromMs; }

/* Our alive key left etcd (the watch says so, in order): revoked with our
 * lease, or deleted by hand. A primary is fenced from now on
 * (clusterWriteFence); rather than wait for the next renewal, put the key
 * again at once: under our lease if it lives, else the put fails and a new
 * lease is taken (alivePut), so writes stop for a round trip or two, not
 * for a sixth of the TTL. A deletion older than our last put of the key is
 * history. With a lease request in flight, its answer decides (a renewal
 * that finds the key still missing puts it: keepaliveDone). Our own RESET
 * HARD deletes it on purpose: opDone takes a new lease for the new id. */
static long long alivePutRev; /* revision of our last alive put etcd took */
static void putAlive(void);

static void ownAliveGone(long long mod_rev) {
    clusterState *cs = server.cluster;
    if (!cs->lease_id || cs->lease_inflight || mod_rev <= alivePutRev || resetHardNewId[0]) return;
    serverLog(LL_WARNING, "Cluster: our alive key left etcd; putting it again (a new lease if ours ended)");
    putAlive();
}

static void applyKV(const etcdKV *kv, int deleted, long long mod_rev) {
    clusterState *cs = server.cluster;
    const char *id;
    const char *kind = parseKey(kv->key, &id);
    if (!kind) return;
    if (!strcmp(kind, "slotmap")) {
        applySlotmap(deleted, mod_rev);
        return;
    }
    char idbuf[CLUSTER_NAMELEN + 1];
    memcpy(idbuf, id, CLUSTER_NAMELEN);
    idbuf[CLUSTER_NAMELEN] = '\0';
    if (!clusterValidId(idbuf)) return;
    clusterNode *n = dictFetchValue(cs->nodes, idbuf);
    if (!strcmp(kind, "alive")) {
        if (deleted) {
            dictDelete(aliveIds, idbuf);
            if (n && n != cs->myself) n->alive = 0;
            if (n == cs->myself) {
                distrustAlive();
                replAliveLapsed();
                ownAliveGone(mod_rev);
            } else {
                replPeerLapsed(idbuf);
            }
        } else {
            if (!dictFind(aliveIds, idbuf)) dictAdd(aliveIds, sdsnew(idbuf), NULL);
            if (n) n->alive = 1;
        }
        return;
    }
    if (n && n->mod_rev >= mod_rev) return; /* we already have this one or newer */
    if (deleted) {
        if (!n) return;
        if (n == cs->myself) {
            if (resetHardNewId[0]) return; /* our own RESET HARD: opDone takes over */
            /* Someone removed our record: we write it back (registration). */
            n->mod_rev = 0;
            cs->registered = 0;
            return;
        }
        for (int s = 0; s < CLUSTER_SLOTS; s++) {
            if (cs->slots[s] == n) cs->slots[s] = NULL;
            if (cs->migrating_to[s] == n) cs->migrating_to[s] = NULL;
            if (cs->importing_from[s] == n) cs->importing_from[s] = NULL;
        }
        dictDelete(cs->nodes, n->id);
        clusterNodeFree(n);
        return;
    }
    if (!n && resetHardNewId[0] && !strcmp(idbuf, resetHardNewId)) return; /* ours, see opDone */
    char err[128];
    clusterNode *rec = clusterNodeFromJson(kv->value, sdslen(kv->value), err, sizeof(err));
    if (!rec || strcmp(rec->id, idbuf)) {
        serverLog(LL_WARNING, "Cluster: ignoring etcd record %s: %s", kv->key, rec ? "id does not match key" : err);
        clusterNodeFree(rec);
        return;
    }
    rec->mod_rev = mod_rev;
    if (n) {
        replaceNodeFields(n, rec);
    } else {
        rec->alive = dictFind(aliveIds, idbuf) != NULL;
        dictAdd(cs->nodes, rec->id, rec);
    }
}

/* etcd's revision never goes back within one history, and the worker's
 * requests are answered in order (one at a time, each linearizable), so
 * each reply's header revision is at least the one before. One below it
 * means this etcd is not the one we knew: recreated empty or restored from
 * a backup. (The watch is not compared: its events may run ahead of a
 * reply still on its way.) Returns 1 when that happened: the caller reads
 * the whole prefix again, and applyFullState takes it as it is. */
static long long replyRev;   /* the highest header revision of a request's reply */
static int historyChanged;   /* seen going back; applyFullState resets the mirror */

static int noteReplyRevision(long long rev) {
    if (rev <= 0) return 0;
    if (rev < replyRev) {
        historyChanged = 1;
        replyRev = rev;
        return 1;
    }
    replyRev = rev;
    return 0;
}

/* A full read at revision shows a history other than the one the mirror
 * holds, though no reply's revision went back: an etcd recreated (or
 * restored) whose revision had already passed ours when we first heard
 * from it -- other nodes, or anyone, wrote to it meanwhile. Within one
 * history a record's mod revision only grows, and a record we hold at a
 * mod revision the read covers is in the read. So a record there below
 * the version we hold, or our own record missing, means a new history
 * (our own deleted by hand reads the same, and is then written back, as
 * applyKV does when the watch shows it). Records we hold past the read's
 * revision came from the watch after the read and prove nothing. */
static int readShowsOtherHistory(const etcdKV *kvs, int n, long long revision) {
    clusterState *cs = server.cluster;
    int mine = 0;
    for (int i = 0; i < n; i++) {
        const char *id;
        const char *kind = parseKey(kvs[i].key, &id);
        if (!kind || strcmp(kind, "nodes")) continue;
        char idbuf[CLUSTER_NAMELEN + 1];
        memcpy(idbuf, id, CLUSTER_NAMELEN);
        idbuf[CLUSTER_NAMELEN] = '\0';
        clusterNode *node = dictFetchValue(cs->nodes, idbuf);
        if (node == cs->myself) mine = 1;
        if (node && node->mod_rev > kvs[i].mod_rev && node->mod_rev <= revision) return 1;
    }
    return !mine && cs->myself->mod_rev > 0 && cs->myself->mod_rev <= revision && !resetHardNewId[0];
}

/* A full read of the prefix: the mirror becomes exactly that. */
static void applyFullState(const etcdKV *kvs, int n, long long revision) {
    clusterState *cs = server.cluster;
    int other = !historyChanged && readShowsOtherHistory(kvs, n, revision);
    if (other)
        serverLog(LL_WARNING, "Cluster: etcd at revision %lld has a record older than the one we hold, or lacks "
                  "ours (etcd recreated or restored, its revision already past ours): taking its records as "
                  "they are, and writing ours again if it is missing", revision);
    if (noteReplyRevision(revision) || historyChanged || other) {
        /* This etcd was recreated or restored from a backup (see
         * noteReplyRevision). Our records' mod revisions are from the other
         * history, and every record it has would look older than ours and
         * be ignored (a node restarted meanwhile would then own slots nobody
         * else saw, and every topology change fail its compare). Its records
         * replace the mirror whole; ours, if it is missing, is written back
         * as we have it (registration), so a wiped etcd gets the topology
         * again from the nodes. */
        if (!other)
            serverLog(LL_WARNING, "Cluster: etcd's revision went back from %lld to %lld (etcd recreated or "
                      "restored): taking its records as they are, and writing ours again if it is missing",
                      cs->revision, revision);
        dictIterator *it = dictGetSafeIterator(cs->nodes);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) ((clusterNode *)dictGetVal(de))->mod_rev = 0;
        dictReleaseIterator(it);
        slotmapModRev = slotmapSeen = 0;
        alivePutRev = 0;
        distrustAlive();
        cs->revision = revision;
        cs->registered = 0; /* re-checked by registration's CAS against what etcd has */
        historyChanged = 0;
        if (watchStarted) etcdWatchRestart(cs->etcd, revision + 1); /* it waits for a revision never coming */
    }
    dictEmpty(aliveIds, NULL);
    dict *seen = dictCreate(&aliveType);
    int slotmap = 0;
    for (int i = 0; i < n; i++) {
        const char *id;
        const char *kind = parseKey(kvs[i].key, &id);
        if (kind && !strcmp(kind, "nodes")) dictAdd(seen, sdsnewlen(id, CLUSTER_NAMELEN), NULL);
        if (kind && !strcmp(kind, "slotmap")) slotmap = 1;
        applyKV(&kvs[i], 0, kvs[i].mod_rev);
    }
    if (!slotmap) applySlotmap(1, revision);
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        clusterNode *node = dictGetVal(de);
        sds id = sdsnew(node->id);
        if (node != cs->myself && !dictFind(seen, id) && node->mod_rev < revision) {
            etcdKV kv = {keyFor("nodes", node->id), NULL, 0, revision, 0, 0};
            applyKV(&kv, 1, revision);
            sdsfree(kv.key);
        } else {
            node->alive = node == cs->myself || dictFind(aliveIds, id) != NULL;
        }
        sdsfree(id);
    }
    dictReleaseIterator(it);
    dictRelease(seen);
    if (revision > cs->revision) cs->revision = revision;
    /* Our alive key gone while the watch did not say so (a compacted
     * history, a new etcd): the lapse counts as if seen (replAliveLapsed). */
    if (!dictFind(aliveIds, cs->myself->id)) {
        distrustAlive();
        replAliveLapsed();
    }
}

int clusterMyselfAliveInEtcd(void) {
    return server.cluster && aliveIds && dictFind(aliveIds, server.cluster->myself->id) != NULL;
}

static void etcdReachable(int yes, const char *why) {
    clusterState *cs = server.cluster;
    if (yes && cs->etcd_down_since) {
        serverLog(LL_NOTICE, "Cluster: etcd reachable again after %lld ms", server.monotime - cs->etcd_down_since);
        cs->etcd_down_since = 0;
    } else if (!yes) {
        cs->stat_etcd_errors++;
        if (!cs->etcd_down_since) {
            cs->etcd_down_since = server.monotime ? server.monotime : monoMs();
            serverLog(LL_WARNING, "Cluster: etcd unreachable (%s); serving the slots as last known, "
                      "topology changes wait", why ? why : "?");
        }
    }
}

/* ---- watch ---------------------------------------------------------------------- */

static void startInitialSync(void);

static void watchCallback(int status, const etcdEvent *evs, int n, long long revision, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    if (status == ETCD_WATCH_DOWN) {
        etcdReachable(0, "watch stream broke");
        return;
    }
    if (status == ETCD_WATCH_UP) {
        etcdReachable(1, NULL);
        return;
    }
    if (status == ETCD_WATCH_COMPACTED) {
        /* Missed history: read everything again, then watch from there. */
        cs->synced = 0;
        startInitialSync();
        return;
    }
    for (int i = 0; i < n; i++) applyKV(&evs[i].kv, evs[i].deleted, evs[i].kv.mod_rev);
    if (revision > cs->revision) cs->revision = revision;
    clusterRebuild();
}

/* ---- registration and the lease ---------------------------------------------- */

static void leaseGranted(const etcdResult *r, void *privdata);

static void alivePut(const etcdResult *r, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    cs->lease_inflight = 0;
    if (!r->ok) {
        etcdReachable(r->http_status != 0, r->err);
        if (r->http_status) cs->lease_id = 0; /* the lease died meanwhile: grant anew */
        return;
    }
    etcdReachable(1, NULL);
    if (noteReplyRevision(r->revision)) cs->synced = 0; /* another etcd: read it all again */
    else alivePutRev = r->revision;
}

static void putAlive(void) {
    clusterState *cs = server.cluster;
    sds key = keyFor("alive", cs->myself->id);
    sds val = sdscatprintf(sdsempty(), "%s:%d", cs->myself->ip, cs->myself->port);
    cs->lease_inflight = 1;
    etcdPut(cs->etcd, key, sdslen(key), val, sdslen(val), cs->lease_id, alivePut, NULL);
    sdsfree(key);
    sdsfree(val);
}

static long long leaseTTL(void) {
    long long ttl = server.cluster_node_timeout / 1000;
    return ttl < 1 ? 1 : ttl;
}

/* A renewal every sixth of the TTL: fencing (below) stops writes at 2/3
 * of it, so one slow answer from etcd does not fence a healthy primary. */
static long long keepaliveInterval(void) { return leaseTTL() * 1000 / 6; }

static void leaseGranted(const etcdResult *r, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    cs->lease_inflight = 0;
    if (!r->ok || r->lease_id == 0) {
        etcdReachable(r->http_status != 0, r->err ? r->err : "lease grant refused");
        return;
    }
    etcdReachable(1, NULL);
    cs->lease_id = r->lease_id;
    cs->lease_ttl_ms = (r->ttl > 0 ? r->ttl : leaseTTL()) * 1000;
    cs->lease_ok_sent_ms = keepaliveSentMs;
    cs->next_keepalive_ms = monoMs() + keepaliveInterval();
    putAlive();
}

static void keepaliveDone(const etcdResult *r, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    cs->lease_inflight = 0;
    if (!r->ok) {
        etcdReachable(0, r->err);
        return;
    }
    etcdReachable(1, NULL);
    if (r->ttl <= 0) {
        /* Expired while etcd could not hear us (or was restarted without
         * it): a replica may have taken our slots meanwhile. Read the whole
         * topology again before taking a new lease (which lifts the write
         * fence), so we learn that first and never write as a primary that
         * was replaced. */
        serverLog(LL_WARNING, "Cluster: our etcd lease expired; reading the topology again, then taking a new lease");
        cs->lease_id = 0;
        cs->lease_ok_sent_ms = 0; /* no lease: fenced until a new one (clusterWriteFence) */
        cs->synced = 0;
        return;
    }
    cs->lease_ok_sent_ms = keepaliveSentMs;
    /* The lease lives but our key is gone (deleted while a request was in
     * flight, so ownAliveGone left it to us), and the mirror is past our
     * last put of it, so this is no echo still on its way. */
    if (!clusterMyselfAliveInEtcd() && alivePutRev && cs->revision >= alivePutRev) putAlive();
}

/* Just started as a primary with slots, nothing loaded (no log: appendonly
 * no, or its directory gone -- a replaced disk), and a
 * replica of ours alive in etcd: that replica holds the data we
 * acknowledged (a kill -9 and a restart faster than the lease's TTL leave
 * our alive key in place, so no failover starts). Were we to take our
 * slots back, the replica would sync from us and empty itself: every
 * acknowledged write gone. Redis has that hole ("disable auto-restart of a
 * master without persistence"); here the node holds back instead. */
static int restartedWithoutData(void) {
    clusterState *cs = server.cluster;
    if (aofStartedFromLog() || clusterNodeIsReplica(cs->myself) || cs->myself->nranges == 0) return 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    int found = 0;
    while (!found && (de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        found = n != cs->myself && clusterNodeIsReplica(n) && !strcmp(n->primary, cs->myself->id) &&
                dictFind(aliveIds, n->id) != NULL;
    }
    dictReleaseIterator(it);
    return found;
}

/* While held (restartedWithoutData): our old alive key lapses with the
 * old process's lease, a replica takes the slots, and the watch shows our
 * record as its replica: we then sync from it as any old primary does. If
 * no replica took over within the failover window after our key went
 * (none was eligible: never synced, or too long unlinked), the data is
 * nowhere and we serve the slots empty, as before. */
static void heldEmptyCron(long long now) {
    clusterState *cs = server.cluster;
    long long window = 2 * server.cluster_node_timeout + 1000;
    const char *why = NULL;
    if (clusterNodeIsReplica(cs->myself) || cs->myself->nranges == 0) {
        why = "a replica took our slots: syncing from it";
    } else if (clusterMyselfAliveInEtcd()) {
        cs->held_alive_gone_ms = 0;
    } else if (!cs->held_alive_gone_ms) {
        cs->held_alive_gone_ms = now;
    } else if (now - cs->held_alive_gone_ms > window) {
        why = "no replica took over within the failover window: serving our slots without the data";
    }
    if (!why) return;
    serverLog(LL_WARNING, "Cluster: held since the restart without data; %s", why);
    cs->held_empty = 0;
    clusterRebuild();
}

static void registered(const etcdResult *r, void *privdata) {
    clusterNode *rec = privdata;
    clusterState *cs = server.cluster;
    registerInflight = 0;
    if (!r->ok) {
        etcdReachable(r->http_status != 0, r->err);
        clusterNodeFree(rec);
        return;
    }
    if (!r->succeeded) {
        /* Changed under us: the failure branch read it back. */
        applyFullState(r->kvs, r->nkvs, r->revision);
        clusterNodeFree(rec);
        clusterRebuild();
        return;
    }
    if (noteReplyRevision(r->revision)) cs->synced = 0; /* another etcd: read it all again */
    rec->mod_rev = r->revision;
    replaceNodeFields(cs->myself, rec);
    cs->myself->alive = 1;
    cs->registered = 1;
    clusterRebuild();
    serverLog(LL_NOTICE, "Cluster: registered in etcd at revision %lld (%d slot ranges, epoch %lld)", r->revision,
              cs->myself->nranges, cs->myself->config_epoch);
}

/* Our record must exist and carry our current address. The record in etcd
 * wins for everything else (slots, epoch, group): that is how a restarted
 * node gets its slots back. */
static void registerMyself(void) {
    clusterState *cs = server.cluster;
    clusterNode *rec = clusterNodeClone(cs->myself);
    sds key = keyFor("nodes", rec->id);
    sds val = clusterNodeToJson(rec);
    sds end = etcdPrefixEnd(cs->prefix, sdslen(cs->prefix));
    etcdTxn *t = etcdTxnCreate();
    etcdTxnCompareModRev(t, key, sdslen(key), cs->myself->mod_rev);
    etcdTxnPut(t, 1, key, sdslen(key), val, sdslen(val), 0);
    etcdTxnRange(t, 0, cs->prefix, sdslen(cs->prefix), end, sdslen(end));
    registerInflight = 1;
    etcdTxnSubmit(cs->etcd, t, registered, rec);
    sdsfree(end);
    sdsfree(key);
    sdsfree(val);
}

static void initialRange(const etcdResult *r, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    initInflight = 0;
    if (!r->ok) {
        etcdReachable(r->http_status != 0, r->err);
        nextInitTry = monoMs() + 500;
        return;
    }
    etcdReachable(1, NULL);
    char myip[64];
    int myport = cs->myself->port, mycport = cs->myself->cport;
    snprintf(myip, sizeof(myip), "%s", cs->myself->ip);
    applyFullState(r->kvs, r->nkvs, r->revision);
    /* The address is ours to say, whatever the record remembers. */
    int moved = strcmp(myip, cs->myself->ip) || myport != cs->myself->port || mycport != cs->myself->cport;
    snprintf(cs->myself->ip, sizeof(cs->myself->ip), "%s", myip);
    cs->myself->port = myport;
    cs->myself->cport = mycport;
    cs->myself->alive = 1;
    int first = !cs->synced;
    cs->synced = 1;
    cs->revision = r->revision;
    if (cs->myself->mod_rev == 0 || moved) cs->registered = 0;
    else cs->registered = 1;
    static int startRead; /* the first read since this process started, not a later one */
    if (!startRead++ && restartedWithoutData()) {
        cs->held_empty = 1;
        serverLog(LL_WARNING, "Cluster: this primary restarted without its data (appendonly no) while a replica of "
                  "it lives: taking no lease and serving nothing, so that the replica, which holds what was "
                  "acknowledged, takes over instead of syncing our empty keyspace");
    }
    clusterRebuild();
    if (first) serverLog(LL_NOTICE, "Cluster: read %d keys from etcd at revision %lld", r->nkvs, r->revision);
    /* Watch from just after what we read: nothing is missed in between. */
    if (!watchStarted) {
        if (etcdWatchPrefix(cs->etcd, cs->prefix, sdslen(cs->prefix), r->revision + 1, watchCallback, NULL) == 0)
            watchStarted = 1;
    } else {
        etcdWatchRestart(cs->etcd, r->revision + 1);
    }
}

static void startInitialSync(void) {
    clusterState *cs = server.cluster;
    if (initInflight) return;
    sds end = etcdPrefixEnd(cs->prefix, sdslen(cs->prefix));
    initInflight = 1;
    etcdRange(cs->etcd, cs->prefix, sdslen(cs->prefix), end, sdslen(end), initialRange, NULL);
    sdsfree(end);
}

int clusterSyncInit(char *err, size_t errlen) {
    clusterState *cs = server.cluster;
    int n = 0;
    sds eps = sdsnew(server.cluster_etcd_endpoints ? server.cluster_etcd_endpoints : "");
    for (char *p = eps; *p; p++)
        if (*p == ',') *p = ' ';
    sds *v = sdssplitargs(eps, &n);
    sdsfree(eps);
    if (!v || n == 0) {
        snprintf(err, errlen, "cluster-enabled yes needs cluster-etcd-endpoints (e.g. http://127.0.0.1:2379)");
        if (v) sdsfreesplitres(v, n);
        return C_ERR;
    }
    cs->etcd = etcdCreate(server.el, v, n, err, errlen);
    sdsfreesplitres(v, n);
    if (!cs->etcd) return C_ERR;
    long long t = server.cluster_node_timeout < 5000 ? 5000 : server.cluster_node_timeout;
    etcdSetRequestTimeout(cs->etcd, t);
    cs->prefix = sdscatprintf(sdsempty(), "/mooncake/%s/", server.cluster_name);
    aliveIds = dictCreate(&aliveType);
    startInitialSync();
    /* Start-up waits (bounded) for etcd, so a node that says "Ready" is
     * registered and has its slots back; if etcd is not there it starts
     * anyway, answers CLUSTERDOWN, and keeps trying. */
    long long deadline = monoMs() + 5000;
    while (monoMs() < deadline) {
        updateCachedTime();
        clusterSyncCron();
        if (cs->synced && cs->registered && (cs->lease_id || cs->held_empty)) break;
        aeProcessEvents(server.el, AE_FILE_EVENTS | AE_TIME_EVENTS);
    }
    if (!(cs->synced && cs->registered))
        serverLog(LL_WARNING, "Cluster: etcd at %s did not answer in time; starting without the topology "
                  "and retrying", server.cluster_etcd_endpoints);
    return C_OK;
}

/* Fencing. etcd expires our lease TTL after it last heard a renewal, which
 * was after we sent it; so a primary that has not had a renewal confirmed
 * within 2/3 of the TTL of sending it stops writing while a third of the TTL
 * is left before any replica can see the lease gone and take the slots.
 * Checked with a fresh clock on every write, so a process resumed after a
 * SIGSTOP refuses at once. A primary without replicas has no one to race:
 * it keeps serving its slots through an etcd outage, as it always did.
 *
 * The clock is not enough: a lease can end before its TTL (revoked, or an
 * etcd recreated without it), and a replica may take our slots as soon as
 * our alive key is gone. So a primary also stops writing while the mirror
 * does not hold its alive key: the watch shows its deletion in revision
 * order, and a new key only once put under a new lease. A promotion needs
 * our key absent, so it comes before that put in the watch's order, and we
 * learn we were replaced before we write again. */
const char *clusterWriteFence(void) {
    clusterState *cs = server.cluster;
    if (!cs || clusterNodeIsReplica(cs->myself) || cs->myself->nranges == 0 || cs->my_replicas == 0) return NULL;
    if (cs->held_empty) /* no lease yet, and not for the reason logged below */
        return "-CLUSTERDOWN this primary restarted without its data: writes are refused until a replica takes over";
    static int fenced;
    long long ttl = cs->lease_ttl_ms ? cs->lease_ttl_ms : leaseTTL() * 1000;
    long long age = cs->lease_ok_sent_ms ? monoMs() - cs->lease_ok_sent_ms : -1;
    int alive = clusterMyselfAliveInEtcd();
    if (age >= 0 && age < ttl * 2 / 3 && alive) {
        if (fenced) serverLog(LL_WARNING, "Cluster: lease renewed: this primary takes writes again");
        fenced = 0;
        return NULL;
    }
    if (!fenced) {
        if (!alive && age >= 0 && age < ttl * 2 / 3)
            serverLog(LL_WARNING, "Cluster: our alive key is not in etcd (our lease ended or is not put yet): "
                      "refusing writes until it is back, so that a replica promoted meanwhile never races a "
                      "write here");
        else
            serverLog(LL_WARNING, "Cluster: no lease renewal confirmed for %lld ms (2/3 of the %lld ms TTL): "
                      "refusing writes, so that a replica promoted when the lease expires never races a write "
                      "here", age, ttl);
    }
    fenced = 1;
    return "-CLUSTERDOWN this primary cannot renew its etcd lease: writes are refused until it can (fencing)";
}

void clusterSyncCron(void) {
    clusterState *cs = server.cluster;
    long long now = monoMs();
    if (!cs->synced) {
        if (!initInflight && now >= nextInitTry) startInitialSync();
        return;
    }
    if (!cs->registered) {
        if (!registerInflight) registerMyself();
        return;
    }
    if (cs->held_empty) heldEmptyCron(now);
    if (cs->lease_inflight || cs->held_empty) return;
    if (cs->lease_id == 0) {
        cs->lease_inflight = 1;
        keepaliveSentMs = now;
        etcdLeaseGrant(cs->etcd, leaseTTL(), leaseGranted, NULL);
    } else if (now >= cs->next_keepalive_ms) {
        cs->lease_inflight = 1;
        keepaliveSentMs = now;
        cs->next_keepalive_ms = now + keepaliveInterval();
        etcdLeaseKeepalive(cs->etcd, cs->lease_id, keepaliveDone, NULL);
    }
}

/* ---- topology changes ------------------------------------------------------------ */

static void nodeSlotsBitmap(const clusterNode *n, unsigned char *bm) {
    memset(bm, 0, CLUSTER_SLOTS / 8);
    for (int i = 0; i < n->nranges; i++)
        for (int s = n->ranges[i][0]; s <= n->ranges[i][1]; s++) bm[s >> 3] |= (unsigned char)(1 << (s & 7));
}

static void nodeSetSlots(clusterNode *n, const unsigned char *bm) {
    zfree(n->ranges);
    n->ranges = NULL;
    n->nranges = 0;
    int cap = 0;
    for (int s = 0; s < CLUSTER_SLOTS;) {
        if (!(bm[s >> 3] & (1 << (s & 7)))) {
            s++;
            continue;
        }
        int e = s;
        while (e + 1 < CLUSTER_SLOTS && (bm[(e + 1) >> 3] & (1 << ((e + 1) & 7)))) e++;
        if (n->nranges == cap) {
            cap = cap ? cap * 2 : 4;
            n->ranges = zrealloc(n->ranges, sizeof(int[2]) * (size_t)cap);
        }
        n->ranges[n->nranges][0] = s;
        n->ranges[n->nranges][1] = e;
        n->nranges++;
        s = e + 1;
    }
}

static void setOpenSlot(clusterSlotState **v, int *n, int slot, const char *node) {
    for (int i = 0; i < *n; i++)
        if ((*v)[i].slot == slot) {
            if (node) {
                snprintf((*v)[i].node, sizeof((*v)[i].node), "%s", node);
            } else {
                (*v)[i] = (*v)[*n - 1];
                (*n)--;
            }
            return;
        }
    if (!node) return;
    *v = zrealloc(*v, sizeof(clusterSlotState) * (size_t)(*n + 1));
    (*v)[*n].slot = slot;
    snprintf((*v)[*n].node, sizeof((*v)[*n].node), "%s", node);
    (*n)++;
}

/* The clone of a node in this plan, made on first use. */
static clusterNode *planNode(clusterOp *op, clusterNode *n) {
    for (int i = 0; i < op->nclones; i++)
        if (!strcmp(op->clones[i]->id, n->id)) return op->clones[i];
    op->clones = zrealloc(op->clones, sizeof(clusterNode *) * (size_t)(op->nclones + 1));
    op->clones[op->nclones] = clusterNodeClone(n);
    return op->clones[op->nclones++];
}

static void planReset(clusterOp *op) {
    op->flush_after = 0;
    for (int i = 0; i < op->nclones; i++) clusterNodeFree(op->clones[i]);
    zfree(op->clones);
    op->clones = NULL;
    op->nclones = 0;
    for (int i = 0; i < op->ndeleted; i++) sdsfree(op->deleted[i]);
    zfree(op->deleted);
    op->deleted = NULL;
    op->ndeleted = 0;
    sdsfree(op->reply);
    op->reply = NULL;
}

static int parseSlot(const char *arg, int *slot) {
    long long v;
    if (!string2ll(arg, strlen(arg), &v) || v < 0 || v >= CLUSTER_SLOTS) return 0;
    *slot = (int)v;
    return 1;
}

static void freshGroup(char *group) {
    getRandomHexChars(group, CLUSTER_NAMELEN);
    group[CLUSTER_NAMELEN] = '\0';
}

static int groupSize(const char *group) {
    int n = 0;
    dictIterator *it = dictGetSafeIterator(server.cluster->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL)
        if (!strcmp(((clusterNode *)dictGetVal(de))->group, group)) n++;
    dictReleaseIterator(it);
    return n;
}

/* Plans the change against the mirror. Returns NULL when there is
 * something to send (op->clones), or an error to reply; "" means nothing
 * to change (reply at once). The error is a static or op-owned string. */
static const char *planOp(clusterOp *op) {
    static char msg[256];
    clusterState *cs = server.cluster;
    clusterNode *me = cs->myself;
    const char *sub = op->argv[1];
    planReset(op);
    if (!strcasecmp(sub, "addslots") || !strcasecmp(sub, "delslots") || !strcasecmp(sub, "addslotsrange") ||
        !strcasecmp(sub, "delslotsrange")) {
        int add = !strncasecmp(sub, "add", 3), range = strlen(sub) > 8;
        unsigned char want[CLUSTER_SLOTS / 8];
        memset(want, 0, sizeof(want));
        if (range && (op->argc - 2) % 2) return "ERR wrong number of arguments for 'cluster' command";
        for (int j = 2; j < op->argc; j += range ? 2 : 1) {
            int a, b;
            if (!parseSlot(op->argv[j], &a) || (range && !parseSlot(op->argv[j + 1], &b)))
                return "ERR Invalid or out of range slot";
            if (!range) b = a;
            if (a > b) {
                snprintf(msg, sizeof(msg), "ERR start slot number %d is greater than end slot number %d", a, b);
                return msg;
            }
            for (int s = a; s <= b; s++) {
                if (want[s >> 3] & (1 << (s & 7))) {
                    snprintf(msg, sizeof(msg), "ERR Slot %d specified multiple times", s);
                    return msg;
                }
                want[s >> 3] |= (unsigned char)(1 << (s & 7));
                if (add && cs->slots[s]) {
                    snprintf(msg, sizeof(msg), "ERR Slot %d is already busy", s);
                    return msg;
                }
                if (!add && !cs->slots[s]) {
                    snprintf(msg, sizeof(msg), "ERR Slot %d is already unassigned", s);
                    return msg;
                }
            }
        }
        unsigned char bm[CLUSTER_SLOTS / 8];
        for (int s = 0; s < CLUSTER_SLOTS; s++) {
            if (!(want[s >> 3] & (1 << (s & 7)))) continue;
            clusterNode *owner = add ? me : cs->slots[s];
            clusterNode *p = planNode(op, owner);
            nodeSlotsBitmap(p, bm);
            if (add) bm[s >> 3] |= (unsigned char)(1 << (s & 7));
            else bm[s >> 3] &= (unsigned char)~(1 << (s & 7));
            nodeSetSlots(p, bm);
            if (add) setOpenSlot(&p->importing, &p->nimporting, s, NULL);
            else setOpenSlot(&p->migrating, &p->nmigrating, s, NULL);
        }
        return NULL;
    }
    if (!strcasecmp(sub, "setslot")) {
        int slot;
        if (!parseSlot(op->argv[2], &slot)) return "ERR Invalid or out of range slot";
        const char *how = op->argv[3];
        clusterNode *node = NULL;
        if (op->argc >= 5) {
            node = clusterLookupNode(op->argv[4], sdslen(op->argv[4]));
            if (node && !clusterNodeInMyGroup(node)) node = NULL;
        }
        int migrating = !strcasecmp(how, "migrating"), importing = !strcasecmp(how, "importing");
        if ((migrating || importing) && op->argc == 5) {
            /* MIGRATING needs the slot to be mine, IMPORTING not to be. */
            if ((cs->slots[slot] == me) != migrating) {
                snprintf(msg, sizeof(msg), migrating ? "ERR I'm not the owner of hash slot %d"
                                                     : "ERR I'm already the owner of hash slot %d", slot);
                return msg;
            }
            if (!node) {
                snprintf(msg, sizeof(msg), "ERR I don't know about node %.64s", op->argv[4]);
                return msg;
            }
            if (node == me) return migrating ? "ERR Can't MIGRATE to myself" : "ERR Can't IMPORT from myself";
            clusterNode *p = planNode(op, me);
            if (migrating) setOpenSlot(&p->migrating, &p->nmigrating, slot, node->id);
            else setOpenSlot(&p->importing, &p->nimporting, slot, node->id);
            return NULL;
        }
        if (!strcasecmp(how, "stable") && op->argc == 4) {
            clusterNode *p = planNode(op, me);
            setOpenSlot(&p->migrating, &p->nmigrating, slot, NULL);
            setOpenSlot(&p->importing, &p->nimporting, slot, NULL);
            return NULL;
        }
        if (!strcasecmp(how, "node") && op->argc == 5) {
            if (!node) {
                snprintf(msg, sizeof(msg), "ERR Unknown node %s", op->argv[4]);
                return msg;
            }
            clusterNode *owner = cs->slots[slot];
            if (owner == me && node != me && clusterCountKeysInSlot(slot) != 0) {
                snprintf(msg, sizeof(msg), "ERR Can't assign hashslot %d to a different node while I still hold "
                         "keys for this hash slot.", slot);
                return msg;
            }
            unsigned char bm[CLUSTER_SLOTS / 8];
            if (owner != node) {
                if (owner) {
                    clusterNode *p = planNode(op, owner);
                    nodeSlotsBitmap(p, bm);
                    bm[slot >> 3] &= (unsigned char)~(1 << (slot & 7));
                    nodeSetSlots(p, bm);
                }
                clusterNode *p = planNode(op, node);
                nodeSlotsBitmap(p, bm);
                bm[slot >> 3] |= (unsigned char)(1 << (slot & 7));
                nodeSetSlots(p, bm);
                /* The new owner must win the slot on every node: a config
                 * epoch above all others (Redis bumps it the same way when
                 * an import ends). */
                p->config_epoch = cs->current_epoch + 1;
            }
            /* The slot is settled: its open states go, on every node. */
            dictIterator *it = dictGetSafeIterator(cs->nodes);
            dictEntry *de;
            while ((de = dictNext(it)) != NULL) {
                clusterNode *n = dictGetVal(de);
                int open = 0;
                for (int i = 0; i < n->nmigrating; i++) open |= n->migrating[i].slot == slot;
                for (int i = 0; i < n->nimporting; i++) open |= n->importing[i].slot == slot;
                if (!open) continue;
                clusterNode *p = planNode(op, n);
                setOpenSlot(&p->migrating, &p->nmigrating, slot, NULL);
                setOpenSlot(&p->importing, &p->nimporting, slot, NULL);
            }
            dictReleaseIterator(it);
            return op->nclones ? NULL : "";
        }
        return "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP";
    }
    if (!strcasecmp(sub, "meet")) {
        long long port;
        if (op->argc > 5) return "ERR wrong number of arguments for 'cluster|meet' command";
        if (!string2ll(op->argv[3], sdslen(op->argv[3]), &port) || port < 0 || port > 65535) {
            snprintf(msg, sizeof(msg), "ERR Invalid base port specified: %s", op->argv[3]);
            return msg;
        }
        clusterNode *target = NULL;
        dictIterator *it = dictGetSafeIterator(cs->nodes);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            clusterNode *n = dictGetVal(de);
            if (n->port == port && (!strcmp(n->ip, op->argv[2]) || (!strcmp(op->argv[2], "localhost") &&
                                                                     !strcmp(n->ip, "127.0.0.1")))) {
                /* A live node at that address beats a stale record of one. */
                if (!target || (n->alive && !target->alive)) target = n;
            }
        }
        dictReleaseIterator(it);
        if (!target) {
            snprintf(msg, sizeof(msg), "ERR No node at %.64s:%lld is registered in cluster '%.64s' on etcd",
                     op->argv[2], port, server.cluster_name);
            return msg;
        }
        if (clusterNodeInMyGroup(target)) return "";
        /* Merge the smaller group into the larger, so adding one node to a
         * big cluster rewrites one record, not all of them. */
        char from[CLUSTER_NAMELEN + 1], to[CLUSTER_NAMELEN + 1];
        int mine = groupSize(me->group), theirs = groupSize(target->group);
        snprintf(from, sizeof(from), "%s", mine < theirs ? me->group : target->group);
        snprintf(to, sizeof(to), "%s", mine < theirs ? target->group : me->group);
        it = dictGetSafeIterator(cs->nodes);
        while ((de = dictNext(it)) != NULL) {
            clusterNode *n = dictGetVal(de);
            if (strcmp(n->group, from)) continue;
            clusterNode *p = planNode(op, n);
            snprintf(p->group, sizeof(p->group), "%s", to);
        }
        dictReleaseIterator(it);
        return NULL;
    }
    if (!strcasecmp(sub, "forget")) {
        clusterNode *n = clusterLookupNode(op->argv[2], sdslen(op->argv[2]));
        if (!n) {
            snprintf(msg, sizeof(msg), "ERR Unknown node %.64s", op->argv[2]);
            return msg;
        }
        if (n == me) return "ERR I tried hard but I can't forget myself...";
        /* Another node's FORGET may have taken it out already: that is
         * what redis-cli del-node expects to be fine. */
        if (!clusterNodeInMyGroup(n)) return "";
        clusterNode *p = planNode(op, n);
        freshGroup(p->group);
        return NULL;
    }
    if (!strcasecmp(sub, "reset")) {
        int hard = 0;
        if (op->argc == 3) {
            if (!strcasecmp(op->argv[2], "hard")) hard = 1;
            else if (strcasecmp(op->argv[2], "soft")) return "ERR Syntax error.";
        } else if (op->argc > 3) {
            return "ERR Syntax error.";
        }
        /* A replica may hold keys (its primary's): it resets to an empty
         * primary, as in Redis, its copy dropped once etcd committed. */
        int replica = clusterNodeIsReplica(me);
        if (!replica && storeSize() != 0) return "ERR CLUSTER RESET can't be called with master nodes containing keys";
        clusterNode *p = planNode(op, me);
        if (replica) {
            snprintf(p->role, sizeof(p->role), "primary");
            p->primary[0] = '\0';
            op->flush_after = 1;
        }
        freshGroup(p->group);
        unsigned char bm[CLUSTER_SLOTS / 8];
        memset(bm, 0, sizeof(bm));
        nodeSetSlots(p, bm);
        p->nmigrating = p->nimporting = 0;
        if (hard) {
            p->config_epoch = 0;
            getRandomHexChars(op->new_id, CLUSTER_NAMELEN);
            op->new_id[CLUSTER_NAMELEN] = '\0';
            op->deleted = zmalloc(sizeof(sds));
            op->deleted[op->ndeleted++] = sdsnew(me->id);
            snprintf(p->id, sizeof(p->id), "%s", op->new_id);
            snprintf(p->group, sizeof(p->group), "%s", op->new_id);
            p->mod_rev = 0;
        }
        return NULL;
    }
    if (!strcasecmp(sub, "replicate")) {
        clusterNode *p = clusterLookupNode(op->argv[2], sdslen(op->argv[2]));
        if (!p || !clusterNodeInMyGroup(p)) {
            snprintf(msg, sizeof(msg), "ERR Unknown node %.64s", op->argv[2]);
            return msg;
        }
        if (p == me) return "ERR Can't replicate myself";
        if (clusterNodeIsReplica(p)) return "ERR I can only replicate a master, not a replica.";
        if (!clusterNodeIsReplica(me) && (me->nranges != 0 || storeSize() != 0))
            return "ERR To set a master the node must be empty and without assigned slots.";
        if (clusterNodeIsReplica(me) && !strcmp(me->primary, p->id)) return "";
        clusterNode *c = planNode(op, me);
        snprintf(c->role, sizeof(c->role), "replica");
        snprintf(c->primary, sizeof(c->primary), "%s", p->id);
        c->nranges = c->nmigrating = c->nimporting = 0;
        return NULL;
    }
    if (!strcasecmp(sub, "promote") || !strcasecmp(sub, "handover")) {
        /* promote: myself (a replica) takes its primary's place. handover:
         * myself (a primary) gives its place to replica argv[2]. Either way
         * the old primary becomes a replica of the new one (so it rejoins as
         * one when it comes back), the new one gets its slots and a config
         * epoch above all, and the old primary's other replicas follow. */
        clusterNode *oldp, *newp;
        if (!strcasecmp(sub, "promote")) {
            newp = me;
            oldp = clusterMyPrimary();
            if (!oldp) return "ERR I'm not a replica of a known primary";
            if (strcmp(oldp->id, op->failed_primary)) return "ERR my primary changed meanwhile";
            if (clusterNodeIsReplica(oldp)) return "ERR my primary is a replica already";
            if (op->dead && oldp->alive) return "ERR my primary is alive again";
        } else {
            oldp = me;
            newp = clusterLookupNode(op->argv[2], sdslen(op->argv[2]));
            if (clusterNodeIsReplica(me)) return "ERR I'm a replica already";
            if (!newp || !clusterNodeIsReplica(newp) || strcmp(newp->primary, me->id))
                return "ERR that node is not my replica";
        }
        clusterNode *np = planNode(op, newp), *op_ = planNode(op, oldp);
        snprintf(np->role, sizeof(np->role), "primary");
        np->primary[0] = '\0';
        zfree(np->ranges);
        np->nranges = op_->nranges;
        np->ranges = zmalloc(sizeof(int[2]) * (size_t)(op_->nranges ? op_->nranges : 1));
        memcpy(np->ranges, op_->ranges, sizeof(int[2]) * (size_t)op_->nranges);
        np->nmigrating = np->nimporting = 0;
        np->config_epoch = cs->current_epoch + 1;
        snprintf(op_->role, sizeof(op_->role), "replica");
        snprintf(op_->primary, sizeof(op_->primary), "%s", newp->id);
        op_->nranges = op_->nmigrating = op_->nimporting = 0;
        dictIterator *it = dictGetSafeIterator(cs->nodes);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            clusterNode *n = dictGetVal(de);
            if (n == newp || n == oldp || !clusterNodeIsReplica(n) || strcmp(n->primary, oldp->id)) continue;
            clusterNode *sib = planNode(op, n);
            snprintf(sib->primary, sizeof(sib->primary), "%s", newp->id);
        }
        dictReleaseIterator(it);
        return NULL;
    }
    if (!strcasecmp(sub, "set-config-epoch")) {
        long long epoch;
        if (!string2ll(op->argv[2], sdslen(op->argv[2]), &epoch) || epoch < 0) {
            snprintf(msg, sizeof(msg), "ERR Invalid config epoch specified: %.64s", op->argv[2]);
            return msg;
        }
        if (cs->known > 1) return "ERR The user can assign a config epoch only when the node does not know any other node.";
        if (me->config_epoch != 0) return "ERR Node config epoch is already non-zero";
        clusterNode *p = planNode(op, me);
        p->config_epoch = epoch;
        return NULL;
    }
    if (!strcasecmp(sub, "bumpepoch")) {
        int unique = me->config_epoch != 0;
        dictIterator *it = dictGetSafeIterator(cs->nodes);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            clusterNode *n = dictGetVal(de);
            if (n != me && clusterNodeInMyGroup(n) && n->config_epoch >= me->config_epoch) unique = 0;
        }
        dictReleaseIterator(it);
        if (unique) {
            op->reply = sdscatprintf(sdsempty(), "STILL %lld", me->config_epoch);
            return "";
        }
        clusterNode *p = planNode(op, me);
        p->config_epoch = cs->current_epoch + 1;
        op->reply = sdscatprintf(sdsempty(), "BUMPED %lld", p->config_epoch);
        return NULL;
    }
    return "ERR Unknown subcommand";
}

static void opFree(clusterOp *op) {
    planReset(op);
    for (int i = 0; i < op->argc; i++) sdsfree(op->argv[i]);
    zfree(op->argv);
    zfree(op);
}

static void opReply(clusterOp *op, const char *err) {
    client *c = op->c;
    if (!strcasecmp(op->argv[1], "promote") || !strcasecmp(op->argv[1], "handover"))
        replFailoverDone(op->argv[1], op->failed_primary, op->dead, err);
    if (op->flush_after && !(err && err[0])) storeFlush();
    if (c) {
        if (err && err[0]) addReplyError(c, err);
        else if (op->reply) addReplyStatus(c, op->reply);
        else addReplyOk(c);
        if (c->flags & CLIENT_BLOCKED) unblockClient(c);
    }
    opFree(op);
}

/* etcd refused, or could not be reached: the client hears why, and that
 * nothing changed. Where a try reached etcd and its answer was lost, the
 * change may have been committed: the client is told so, not "nothing
 * changed" (a commit shows up through the watch, and in CLUSTER NODES,
 * once etcd answers again). */
static void opReplyEtcdFailed(clusterOp *op, const etcdResult *r) {
    char msg[300];
    etcdReachable(r->http_status != 0, r->err);
    snprintf(msg, sizeof(msg), "-TRYAGAIN etcd did not take the topology change (%s); %s", r->err ? r->err : "error",
             r->unanswered ? "its answer was lost, so it may have been applied: CLUSTER NODES shows it once etcd "
                             "answers"
                           : "nothing changed");
    opReply(op, msg);
}

static void opDone(const etcdResult *r, void *privdata) {
    clusterOp *op = privdata;
    clusterState *cs = server.cluster;
    resetHardNewId[0] = '\0';
    if (!r->ok) {
        opReplyEtcdFailed(op, r);
        return;
    }
    etcdReachable(1, NULL);
    if (!r->succeeded) {
        /* Someone changed a record we read: reread all, plan again. */
        cs->stat_txn_retries++;
        applyFullState(r->kvs, r->nkvs, r->revision);
        clusterRebuild();
        if (++op->attempts >= OP_MAX_ATTEMPTS) {
            opReply(op, "-TRYAGAIN the topology kept changing under this command; try again");
            return;
        }
        clusterOpRun(op);
        return;
    }
    if (noteReplyRevision(r->revision)) cs->synced = 0; /* another etcd: read it all again */
    if (op->grants) applySlotmap(0, r->revision);
    for (int i = 0; i < op->ndeleted; i++) {
        sds key = keyFor("nodes", op->deleted[i]);
        etcdKV kv = {key, NULL, 0, r->revision, 0, 0};
        if (strcmp(op->deleted[i], cs->myself->id)) applyKV(&kv, 1, r->revision);
        sdsfree(key);
    }
    for (int i = 0; i < op->nclones; i++) {
        clusterNode *p = op->clones[i];
        op->clones[i] = NULL;
        p->mod_rev = r->revision;
        if (op->new_id[0] && !strcmp(p->id, op->new_id)) {
            /* RESET HARD: myself takes the new identity. */
            char err[256];
            dictDelete(cs->nodes, cs->myself->id);
            replaceNodeFields(cs->myself, p);
            serverAssert(dictAdd(cs->nodes, cs->myself->id, cs->myself) == DICT_OK);
            cs->registered = 1;
            if (clusterSaveNodeId(cs->myself->id, err, sizeof(err)) != C_OK)
                serverLog(LL_WARNING, "Cluster: %s", err);
            cs->lease_id = 0; /* a new alive key under the new id */
            continue;
        }
        clusterNode *n = dictFetchValue(cs->nodes, p->id);
        if (n) replaceNodeFields(n, p);
        else clusterNodeFree(p);
    }
    op->nclones = 0;
    if (r->revision > cs->revision) cs->revision = r->revision;
    clusterRebuild();
    opReply(op, NULL);
}

/* Does the plan give p a slot its record (as the mirror has it) lacks? */
static int planGrantsSlot(const clusterNode *p) {
    clusterNode *was = dictFetchValue(server.cluster->nodes, p->id);
    unsigned char now[CLUSTER_SLOTS / 8], before[CLUSTER_SLOTS / 8];
    nodeSlotsBitmap(p, now);
    if (was) nodeSlotsBitmap(was, before);
    else memset(before, 0, sizeof(before));
    for (size_t i = 0; i < sizeof(now); i++)
        if (now[i] & ~before[i]) return 1;
    return 0;
}

static void clusterOpRun(clusterOp *op) {
    clusterState *cs = server.cluster;
    const char *err = planOp(op);
    if (err) {
        opReply(op, err);
        return;
    }
    etcdTxn *t = etcdTxnCreate();
    op->grants = 0;
    for (int i = 0; i < op->nclones; i++) {
        clusterNode *p = op->clones[i];
        op->grants |= planGrantsSlot(p);
        sds key = keyFor("nodes", p->id);
        sds val = clusterNodeToJson(p);
        etcdTxnCompareModRev(t, key, sdslen(key), p->mod_rev);
        etcdTxnPut(t, 1, key, sdslen(key), val, sdslen(val), 0);
        sdsfree(key);
        sdsfree(val);
    }
    for (int i = 0; i < op->ndeleted; i++) {
        clusterNode *n = dictFetchValue(cs->nodes, op->deleted[i]);
        sds key = keyFor("nodes", op->deleted[i]);
        etcdTxnCompareModRev(t, key, sdslen(key), n ? n->mod_rev : 0);
        etcdTxnDelete(t, 1, key, sdslen(key));
        sdsfree(key);
        key = keyFor("alive", op->deleted[i]);
        etcdTxnDelete(t, 1, key, sdslen(key));
        sdsfree(key);
    }
    if (op->grants) {
        /* Slot grants go one at a time (see the top of this file): the
         * slotmap key must be as the mirror last saw it. */
        sds key = sdscatprintf(sdsdup(cs->prefix), "slotmap");
        etcdTxnCompareModRev(t, key, sdslen(key), slotmapModRev);
        etcdTxnPut(t, 1, key, sdslen(key), cs->myself->id, strlen(cs->myself->id), 0);
        sdsfree(key);
    }
    if (op->dead) {
        /* An automatic failover holds only while the primary stays dead:
         * its alive key absent (mod revision 0) when the txn commits. */
        sds key = keyFor("alive", op->failed_primary);
        etcdTxnCompareModRev(t, key, sdslen(key), 0);
        sdsfree(key);
    }
    sds end = etcdPrefixEnd(cs->prefix, sdslen(cs->prefix));
    etcdTxnRange(t, 0, cs->prefix, sdslen(cs->prefix), end, sdslen(end));
    sdsfree(end);
    if (op->new_id[0]) memcpy(resetHardNewId, op->new_id, sizeof(resetHardNewId));
    etcdTxnSubmit(cs->etcd, t, opDone, op);
}

static void meetReread(const etcdResult *r, void *privdata) {
    clusterOp *op = privdata;
    if (!r->ok) {
        opReplyEtcdFailed(op, r);
        return;
    }
    etcdReachable(1, NULL);
    applyFullState(r->kvs, r->nkvs, r->revision);
    clusterRebuild();
    clusterOpRun(op); /* plans again: a node still missing is reported then */
}

/* Internal ops (failover): argv is made here, the client may be NULL. */
static clusterOp *internalOp(client *c, const char *sub, const char *arg) {
    clusterOp *op = zcalloc(sizeof(*op));
    op->c = c;
    op->argc = arg ? 3 : 2;
    op->argv = zmalloc(sizeof(sds) * 3);
    op->argv[0] = sdsnew("cluster");
    op->argv[1] = sdsnew(sub);
    if (arg) op->argv[2] = sdsnew(arg);
    return op;
}

void clusterPromoteMyself(client *c, const char *mode) {
    clusterState *cs = server.cluster;
    clusterNode *p = clusterMyPrimary();
    clusterOp *op = internalOp(c, "promote", NULL);
    snprintf(op->failed_primary, sizeof(op->failed_primary), "%s", p ? p->id : "");
    op->dead = !strcmp(mode, "auto");
    if (!cs->synced || !cs->registered) {
        opReply(op, "-TRYAGAIN this node has not read the topology from etcd yet");
        return;
    }
    if (c) blockClient(c, op);
    clusterOpRun(op);
}

void clusterHandOver(const char *rid) {
    clusterOp *op = internalOp(NULL, "handover", rid);
    snprintf(op->failed_primary, sizeof(op->failed_primary), "%s", server.cluster->myself->id);
    clusterOpRun(op);
}

void clusterOpClientGone(client *c) {
    if (c->blocked_op) c->blocked_op->c = NULL;
    c->blocked_op = NULL;
    c->flags &= ~CLIENT_BLOCKED;
}

/* The CLUSTER subcommands that change the topology. They wait for etcd:
 * the reply says the change is committed, as a Redis user expects an OK
 * to mean it happened. */
void clusterTopologyCommand(client *c, const char *sub) {
    (void)sub;
    clusterState *cs = server.cluster;
    if (!cs->synced || !cs->registered) {
        addReplyError(c, "-TRYAGAIN this node has not read the topology from etcd yet");
        return;
    }
    clusterOp *op = zcalloc(sizeof(*op));
    op->c = c;
    op->argc = c->argc;
    op->argv = zmalloc(sizeof(sds) * (size_t)c->argc);
    for (int i = 0; i < c->argc; i++) op->argv[i] = sdsdup(c->argv[i]);
    const char *err = planOp(op);
    if (err && !strncmp(err, "ERR No node at ", 15)) {
        /* The node may have registered a moment ago and its record not be
         * in our mirror yet (redis-cli MEETs right after start-up): read
         * etcd once before saying it is not there. */
        blockClient(c, op);
        planReset(op);
        sds end = etcdPrefixEnd(cs->prefix, sdslen(cs->prefix));
        etcdRange(cs->etcd, cs->prefix, sdslen(cs->prefix), end, sdslen(end), meetReread, op);
        sdsfree(end);
        return;
    }
    if (err) {
        opReply(op, err);
        return;
    }
    blockClient(c, op);
    planReset(op);
    clusterOpRun(op);
}
