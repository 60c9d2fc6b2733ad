/* replication_failover.c -- roles in replication (replication.c): whether
 * this node is a primary or a replica and of whom, as its etcd record says
 * (replClusterChanged), and failover, automatic and planned.
 *
 * Kept apart from the stream because a role change is rare and touches both
 * sides of the state at once: a demoted primary drops its links and held
 * replies and discards its data unless it handed its slots over; a promoted
 * replica's applied offset becomes its offset as a primary, under a new
 * replid that keeps the old one good as replid2. This file makes those
 * changes to the one state (replication_internal.h); the other two files
 * each act on one side of it.
 *
 * Failover. A replica whose primary's alive key is gone (the lease
 * expired: cluster-node-timeout without a renewal) promotes itself with one
 * etcd transaction (cluster_sync.c "promote") that holds only while the
 * key stays absent and the primary's record is unchanged: one winner among
 * the replicas, config epoch above all. It must have completed a sync with
 * that primary and lost the link at most 10 node timeouts before (Redis's
 * replica validity factor); among several, the one with the highest offset
 * goes first (the ranking below). The old primary's record becomes a replica of
 * the winner, so when it comes back it discards its data and syncs.
 * CLUSTER FAILOVER (planned) asks the primary over the link: the primary
 * refuses writes with -TRYAGAIN, waits until the replica acknowledged its
 * whole stream, then hands over its slots (cluster_sync.c "handover").
 * FORCE and TAKEOVER promote without the primary.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "aof.h"
#include "cluster.h"
#include "detached.h"
#include "dict.h"
#include "etcd.h"
#include "multi.h"
#include "notify.h"
#include "owner.h"
#include "replication.h"
#include "replication_internal.h"
#include "server.h"
#include "store.h"
#include "util.h"

#define REPL_VALIDITY_FACTOR 10   /* link lost at most this many node timeouts ago */

/* ---- roles --------------------------------------------------------------- */

static void event(const char *name, const char *fmt, const char *a, const char *b) {
    char what[256];
    snprintf(what, sizeof(what), fmt, a, b);
    notifyStoreNodeEvent(name, what);
}

/* Some replica is connected, or names this node as its primary in etcd. */
int replReplicasNamed(void) {
    clusterState *cs = server.cluster;
    int any = repl.nlinks > 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while (!any && (de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        any = clusterNodeIsReplica(n) && !strcmp(n->primary, cs->myself->id);
    }
    dictReleaseIterator(it);
    return any;
}

void replClusterChanged(void) {
    clusterState *cs = server.cluster;
    if (!cs) return;
    clusterNode *me = cs->myself;
    storeReplicaMode = clusterNodeIsReplica(me);
    if (clusterNodeIsReplica(me)) {
        replOn = 0;
        if (!repl.was_replica) {
            /* Demoted (or started as a replica): whatever this node holds
             * may contain writes its successor never saw; it goes before
             * anything is served, and a full sync brings the primary's.
             * Except after a planned failover to this very primary, when
             * nothing changed here since it acknowledged our whole stream:
             * then we hold exactly what it held when it took over, and
             * continue from there (PSYNC with our replid, its replid2). */
            int keep = repl.handed_to[0] && !strcmp(me->primary, repl.handed_to) &&
                       repl.offset == repl.handed_offset && !changedKeysPending(&repl.changed) &&
                       (!repl.buf || sdslen(repl.buf) == 0) && repl.backlog;
            repl.handed_to[0] = '\0';
            repl.was_replica = 1;
            repl.history = keep;
            repl.replid2[0] = '\0';
            repl.second_offset = -1;
            replDropLinks();
            replDropHeld();
            if (repl.buf) sdsclear(repl.buf);
            repl.pause_until = 0;
            if (keep) {
                repl.applied = repl.offset;
                serverLog(LL_NOTICE, "Replication: this node is a replica of %.40s after a planned failover: it "
                          "keeps its data (the new primary acknowledged all of it) and continues from offset %lld",
                          me->primary, repl.applied);
            } else {
                repl.flush_pending = 1;
                serverLog(LL_NOTICE, "Replication: this node is a replica of %.40s (its etcd record says so): "
                          "its data is discarded and a full sync follows", me->primary);
            }
            event("role", "role=replica primary=%s%s", me->primary, "");
        }
        clusterNode *p = clusterMyPrimary();
        /* After a failover that did not rewrite our record, our primary
         * may itself be a replica now: follow its primary. */
        if (p && clusterNodeIsReplica(p) && p->primary[0] && strcmp(p->primary, me->id)) {
            clusterNode *pp = dictFetchValue(cs->nodes, p->primary);
            if (pp) p = pp;
        }
        if (p && (strcmp(p->id, repl.primary_id) || strcmp(p->ip, repl.host) || p->port != repl.port)) {
            if (repl.primary_id[0]) replLinkClose("the primary changed");
            snprintf(repl.primary_id, sizeof(repl.primary_id), "%s", p->id);
            snprintf(repl.host, sizeof(repl.host), "%s", p->ip);
            repl.port = p->port;
            repl.next_try_ms = 0;
            repl.sync_failures = 0; /* another primary: no reason to wait */
            repl.link_down_since = 0;
        }
        return;
    }
    if (repl.was_replica) {
        repl.was_replica = 0;
        replLinkClose(NULL);
        repl.primary_id[0] = '\0';
        /* A new history: offsets go on from what was applied, and the old
         * primary's replid stays good up to here (its backlog too), so the
         * other replicas of that primary continue from this node. */
        repl.offset = repl.applied;
        replNewReplid(repl.history);
        if (!repl.history) replBacklogFree();
        repl.history = 0;
        serverLog(LL_NOTICE, "Replication: this node is a primary now (config epoch %lld, %d slot ranges)%s",
                  me->config_epoch, me->nranges,
                  repl.replid2[0] ? "; its replicas' partial resyncs continue its old primary's history" : "");
        /* The client segments' objects the stream held: now they wait for
         * their hosts, as after a restart (owner-ttl counts from here). */
        detachedLoadDone();
        ownersPromoted();
        aofLogHeld();
        if (detachedEntries)
            serverLog(LL_NOTICE, "Replication: %lu objects in client segments are held until their hosts mount "
                      "those segments here with the identity they had (for owner-ttl at most)", detachedEntries);
        event("role", "role=primary%s%s", "", "");
    }
    /* A primary tracks changes while any replica names it, and while it
     * keeps a backlog (a replica may come back and continue). */
    replOn = replReplicasNamed() || repl.backlog != NULL;
    if (repl.nheld) replCheckHeld(); /* a replica that left may have been all a write waited for */
}

/* Our alive key left etcd (our lease lapsed: frozen, or cut off from
 * etcd). Our primary stops waiting for a replica that is neither alive
 * there nor linked to it, so it may have acknowledged writes (cluster-
 * replica-ack) that never reached us -- and a link dropped at its end
 * while we were frozen is found closed only when we wake, "just now" by
 * our clock. What we hold is not proven complete: we may not take over
 * until a sync with the primary completes again (a partial resync will
 * do: it brings everything from our offset on). A link still up is
 * renewed for that; while it is up, the primary counts us again. Called
 * from the etcd mirror (cluster_sync.c), in revision order: a write
 * acknowledged without us came after our key went, so we see our lapse
 * before we could see the primary's death. */
void replAliveLapsed(void) {
    clusterState *cs = server.cluster;
    if (!cs || !clusterNodeIsReplica(cs->myself) || !repl.synced_with[0]) return;
    serverLog(LL_WARNING, "Replication: our etcd lease lapsed: primary %.40s may have acknowledged writes without "
              "this replica, which may not take over until it has synced with it again", repl.synced_with);
    repl.synced_with[0] = '\0';
    if (repl.state == LINK_STREAM) replLinkClose("our etcd lease lapsed: syncing again to prove we lack nothing");
}

/* May this replica take its primary's place? It synced with it (and its
 * lease has not lapsed since: replAliveLapsed), and lost the link recently
 * enough that its data is worth serving. */
int replEligible(void) {
    if (strcmp(repl.synced_with, repl.primary_id)) return 0;
    if (repl.state == LINK_STREAM) return 1;
    return repl.link_down_since &&
           monoMs() - repl.link_down_since <= REPL_VALIDITY_FACTOR * server.cluster_node_timeout;
}

/* Which replica goes first. Each eligible replica of the dead primary posts
 * its offset under repl/<id> in etcd (with its lease, so a dead one's goes
 * too), waits a moment, and reads its siblings': the one with the highest
 * offset (then the lowest id) sends the promotion; the others wait a node
 * timeout for it before trying themselves. The transaction still decides
 * who wins; the ranking only makes the winner the one that lost least. */
#define RANK_WAIT_MS 300

static struct {
    int phase;                          /* 0 none, 1 posted, 2 reading, 3 deferred */
    long long deadline;
    char primary[CLUSTER_NAMELEN + 1];
    long long epoch;
} rank;

static sds rankKey(const char *id) {
    return sdscatprintf(sdsdup(server.cluster->prefix), "repl/%s", id);
}

static void rankPosted(const etcdResult *r, void *privdata) {
    (void)r, (void)privdata; /* best effort: the ranking is an optimisation */
}

static void promoteNow(clusterNode *p, const char *why) {
    repl.promoting = 1;
    repl.last_failover_ms = monoMs();
    serverLog(LL_WARNING, "Replication: primary %s's etcd lease expired (no renewal for cluster-node-timeout); "
              "this replica (offset %lld) tries to take its slots: %s", p->id, repl.applied, why);
    clusterPromoteMyself(NULL, "auto");
}

static void rankRead(const etcdResult *r, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    clusterNode *p = clusterMyPrimary();
    if (rank.phase != 2 || !p || strcmp(p->id, rank.primary)) return;
    if (!r->ok) {
        rank.phase = 1;
        rank.deadline = monoMs() + RANK_WAIT_MS;
        return;
    }
    const char *best = cs->myself->id;
    long long best_off = repl.applied;
    size_t pl = sdslen(cs->prefix) + 5;
    for (int i = 0; i < r->nkvs; i++) {
        const etcdKV *kv = &r->kvs[i];
        if (sdslen(kv->key) != pl + CLUSTER_NAMELEN || !kv->value) continue;
        char id[CLUSTER_NAMELEN + 1], prim[CLUSTER_NAMELEN + 1];
        long long epoch, off;
        memcpy(id, kv->key + pl, CLUSTER_NAMELEN);
        id[CLUSTER_NAMELEN] = '\0';
        if (sscanf(kv->value, "%40s %lld %lld", prim, &epoch, &off) != 3) continue;
        clusterNode *n = clusterLookupNode(id, CLUSTER_NAMELEN);
        if (!n || !n->alive || strcmp(prim, rank.primary) || epoch != rank.epoch || !strcmp(id, cs->myself->id))
            continue;
        if (off > best_off || (off == best_off && strcmp(n->id, best) < 0)) {
            best = n->id;
            best_off = off;
        }
    }
    if (best == cs->myself->id) {
        promoteNow(p, "it has the highest offset among the replicas that posted theirs");
        return;
    }
    serverLog(LL_NOTICE, "Replication: replica %s has a higher offset (%lld > %lld): leaving the failover to it "
              "for cluster-node-timeout", best, best_off, repl.applied);
    rank.phase = 3;
    rank.deadline = monoMs() + server.cluster_node_timeout;
}

void replMaybeFailover(void) {
    clusterState *cs = server.cluster;
    clusterNode *p = clusterMyPrimary();
    if (!p || p->alive || clusterNodeIsReplica(p)) {
        rank.phase = 0;
        return;
    }
    if (repl.promoting || !cs->synced || cs->etcd_down_since) return;
    if (!replEligible()) {
        static long long lastlog;
        if (monoMs() - lastlog > 5000) {
            lastlog = monoMs();
            serverLog(LL_WARNING, "Replication: primary %s is down but this replica may not take over: %s",
                      p->id, strcmp(repl.synced_with, p->id) ? "it has not completed a sync with it"
                                                             : "its data is too old (link down too long)");
        }
        return;
    }
    long long now = monoMs(), from = clusterAliveTrustedFrom();
    if (now < from) {
        static long long logged;
        if (logged != from) {
            logged = from;
            serverLog(LL_WARNING, "Replication: primary %s's alive key is missing, but etcd was recreated or cut "
                      "off from us just now: waiting %lld ms (cluster-node-timeout) for it to come back before "
                      "taking over", p->id, from - now);
        }
        return;
    }
    int siblings = 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        siblings += n != cs->myself && n->alive && clusterNodeIsReplica(n) && !strcmp(n->primary, p->id);
    }
    dictReleaseIterator(it);
    if (siblings == 0) {
        promoteNow(p, "it is its only live replica");
        return;
    }
    if (rank.phase == 0 || strcmp(rank.primary, p->id) || rank.epoch != p->config_epoch) {
        snprintf(rank.primary, sizeof(rank.primary), "%s", p->id);
        rank.epoch = p->config_epoch;
        sds key = rankKey(cs->myself->id);
        sds val = sdscatprintf(sdsempty(), "%s %lld %lld", p->id, p->config_epoch, repl.applied);
        etcdPut(cs->etcd, key, sdslen(key), val, sdslen(val), cs->lease_id, rankPosted, NULL);
        sdsfree(key);
        sdsfree(val);
        rank.phase = 1;
        rank.deadline = now + RANK_WAIT_MS;
        return;
    }
    if (rank.phase == 1 && now >= rank.deadline) {
        sds start = sdscatprintf(sdsdup(cs->prefix), "repl/");
        sds end = etcdPrefixEnd(start, sdslen(start));
        rank.phase = 2;
        etcdRange(cs->etcd, start, sdslen(start), end, sdslen(end), rankRead, NULL);
        sdsfree(start);
        sdsfree(end);
    } else if (rank.phase == 3 && now >= rank.deadline) {
        promoteNow(p, "the replica with a higher offset did not take over");
    }
}

void replFailoverDone(const char *kind, const char *old_primary, int automatic, const char *err) {
    char ms[32];
    repl.promoting = 0;
    rank.phase = 0;
    if (!strcasecmp(kind, "handover")) {
        repl.handover_inflight = 0;
        repl.pause_until = 0;
        repl.handover_to[0] = '\0';
        if (err && err[0]) repl.handed_to[0] = '\0';
    }
    if (err && err[0]) {
        serverLog(LL_WARNING, "Replication: %s failover (%s) did not happen: %s", automatic ? "automatic" : "manual",
                  kind, err);
        return;
    }
    repl.failovers++;
    snprintf(ms, sizeof(ms), "%lld", repl.last_failover_ms ? monoMs() - repl.last_failover_ms : 0LL);
    if (!strcasecmp(kind, "promote")) {
        serverLog(LL_WARNING, "Replication: %s failover done: this node took the slots of %s (%s ms after "
                  "deciding), config epoch %lld", automatic ? "automatic" : "forced", old_primary, ms,
                  server.cluster->myself->config_epoch);
        event("failover", "old=%s took_ms=%s", old_primary, ms);
    } else {
        serverLog(LL_NOTICE, "Replication: planned failover done: slots handed to %s; this node is its replica now",
                  server.cluster->myself->primary);
        event("failover", "handed_to=%s%s", server.cluster->myself->primary, "");
    }
}

void replFailoverCommand(client *c) {
    clusterState *cs = server.cluster;
    int force = 0, takeover = 0;
    if (c->argc == 3) {
        if (!strcasecmp(c->argv[2], "force")) force = 1;
        else if (!strcasecmp(c->argv[2], "takeover")) takeover = 1;
        else {
            addReplyError(c, "ERR syntax error");
            return;
        }
    } else if (c->argc > 3) {
        addReplyError(c, "ERR syntax error");
        return;
    }
    clusterNode *p = clusterMyPrimary();
    if (!clusterNodeIsReplica(cs->myself)) {
        addReplyError(c, "ERR You should send CLUSTER FAILOVER to a replica");
        return;
    }
    if (!p) {
        addReplyError(c, "ERR I'm a replica but my master is unknown to me");
        return;
    }
    if (force || takeover) {
        repl.last_failover_ms = monoMs();
        serverLog(LL_WARNING, "Replication: CLUSTER FAILOVER %s: taking the slots of %s without its agreement",
                  force ? "FORCE" : "TAKEOVER", p->id);
        repl.promoting = 1;
        clusterPromoteMyself(c, "force"); /* replies when etcd committed */
        return;
    }
    if (repl.state != LINK_STREAM || (p->flags & CNODE_FAIL)) {
        addReplyError(c, "ERR Master is down or failed, please use CLUSTER FAILOVER FORCE");
        return;
    }
    static const char msg[] = "*2\r\n$8\r\nREPLCONF\r\n$8\r\nFAILOVER\r\n";
    if (write(repl.fd, msg, sizeof(msg) - 1) != (ssize_t)sizeof(msg) - 1) {
        addReplyError(c, "ERR cannot reach the primary over the replication link");
        return;
    }
    repl.last_failover_ms = monoMs();
    serverLog(LL_NOTICE, "Replication: CLUSTER FAILOVER: asked primary %s for a planned failover", p->id);
    addReplyOk(c);
}

const char *replWriteRefusal(client *c) {
    if (!server.cluster) return NULL;
    if (c->repl) return NULL;
    if (clusterNodeIsReplica(server.cluster->myself)) return "-READONLY You can't write against a read only replica.";
    if (repl.pause_until) return "-TRYAGAIN a planned failover is in progress: writes are paused";
    return clusterWriteFence();
}
