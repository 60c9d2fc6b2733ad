/* owner.c -- owner liveness (SPEC §3 "Owners").
 *
 * Every mounted segment names an owner: the process that contributes its
 * memory. An owner is alive while at least one connection that mounted or
 * sent HEARTBEAT for it is open, and for owner-ttl ms after the last one
 * closed or the last HEARTBEAT. A dead owner's segments are unmounted, so
 * readers are never sent to memory nobody serves any more; a HEARTBEAT that
 * arrives after that gets -NEEDREMOUNT and the client mounts again.
 *
 * Counting connections (not just heartbeats) means a healthy client with an
 * open connection needs no heartbeat traffic at all, and a client that
 * hiccups (reconnects within owner-ttl) keeps its segments: Mooncake's
 * master wiped a client's metadata on a missed heartbeat, which is the
 * failure this design avoids.
 *
 * Names. Owner names are per tenant, as segment names are (acl.c): a
 * tenant's OWNER w is its own owner, another than any other tenant's w or
 * the server users' w, so no MOUNT or HEARTBEAT answers differently for a
 * name someone else holds. A user with allkeys names the shared owners,
 * and its HEARTBEAT reaches a tenant's owner of that name too (the
 * administrator's view). Owners are keyed by (tenant, name).
 *
 * Orphans. owner-ttl alone left a gap: a process that died without closing
 * (SIGKILL, a crash: an inference engine restarting a rank) kept its
 * segments mounted for owner-ttl, and the server went on placing new
 * objects there -- puts whose writers then could not reach the host. So the
 * moment an owner's last connection closes, its segments are "orphaned":
 * they take no new objects (segmentPlaceable), their objects stay readable,
 * and a HEARTBEAT or MOUNT for the owner (libmooncake reconnects within a
 * second) makes them active again. The test is a field load per candidate
 * in placement, and nothing has to walk the owner's segments on a
 * disconnect: a segment points at its owner.
 *
 * Probes. A closed connection does not say whether the process died or only
 * the connection did, but the process also serves its segment on endpoints
 * of its own, so the server asks there (probe.c): a refused or reset
 * connection means the process is gone, and the owner dies at once exactly
 * as at owner-ttl (segments unmounted, replicas dropped, objects left with
 * none announced `lost`); an answer means it lives, and it stays an orphan
 * until it reconnects or owner-ttl runs out; silence (a stopped process, a
 * partition) decides nothing. One probe per owner at a time, at most
 * OWNER_PROBES_MAX in flight (more wait for ownerCron), each started
 * OWNER_PROBE_DELAY_MS after the disconnect and bounded by
 * owner-probe-timeout (0: no probes). Which endpoint: an abstract unix://@
 * one when the segment was mounted from this machine, else a tcp:// one,
 * by segmentConnectUri -- the one rule for every connection the server
 * makes on a client's word (relayed reads use it too). The choice is kept per owner and made when a segment is mounted or
 * unmounted, so a disconnect costs O(1).
 *
 * Replicas. On a cluster replica the client segments are its primary's,
 * learnt from the stream and held for a failover (replication.c): owners
 * there neither expire nor are probed, and their segments go when the
 * primary streams that they went. Promoted, every owner without a
 * connection is an orphan from that moment, as after a restart
 * (ownersPromoted): owner-ttl counts from it and its host is probed.
 */
#include "owner.h"

#include <string.h>

#include "cluster.h"
#include "probe.h"
#include "server.h"
#include "util.h"
#include "zmalloc.h"

/* Probes in flight at most: each holds an fd and a timer. */
#define OWNER_PROBES_MAX 32
/* A short pause before probing: the host of a process that is exiting may
 * still be closing its sockets (a connect then is reset, which reads as
 * gone anyway), and an owner that reconnects at once needs no probe. */
#define OWNER_PROBE_DELAY_MS 20

static dict *owners; /* sds name -> owner* */

static struct {
    unsigned long orphaned;        /* owners with no connection, now */
    int inflight;
    unsigned long long probes, alive, undecided, lost_by_probe, lost_by_ttl;
} ost;

/* ownerCron looks only at these, never at every owner: an owner with a
 * connection cannot die, so only orphans are candidates, and an orphan's
 * last_seen_ms is when it became one -- appended at the tail, the list is in
 * owner-ttl's deadline order and the cron stops at the first one alive.
 * The owners waiting for a probe slot are a FIFO of their own. Before, the
 * cron walked every owner every tick (one per mounted segment with
 * libmooncake's naming: 65535; DEBUG VISITS cron-owners). */
static struct {
    owner *head, *tail;
} orphans, wanted;

#define LIST_APPEND(l, o, prev, next)                                                                   \
    do {                                                                                                \
        (o)->prev = (l).tail, (o)->next = NULL;                                                         \
        if ((l).tail) (l).tail->next = (o);                                                             \
        else (l).head = (o);                                                                            \
        (l).tail = (o);                                                                                 \
    } while (0)
#define LIST_UNLINK(l, o, prev, next)                                                                   \
    do {                                                                                                \
        if ((o)->prev) (o)->prev->next = (o)->next;                                                     \
        else (l).head = (o)->next;                                                                      \
        if ((o)->next) (o)->next->prev = (o)->prev;                                                     \
        else (l).tail = (o)->prev;                                                                      \
        (o)->prev = (o)->next = NULL;                                                                   \
    } while (0)

/* o has no connection from now (last_seen_ms just set): an orphan, or one
 * again, at the list's tail. */
static void orphanSince(owner *o) {
    if (o->orphaned) LIST_UNLINK(orphans, o, orphan_prev, orphan_next);
    else ost.orphaned++;
    o->orphaned = 1;
    LIST_APPEND(orphans, o, orphan_prev, orphan_next);
}

static void orphanEnd(owner *o) {
    if (!o->orphaned) return;
    LIST_UNLINK(orphans, o, orphan_prev, orphan_next);
    o->orphaned = 0;
    ost.orphaned--;
}

static void wantProbe(owner *o) {
    if (o->probe_wanted) return;
    o->probe_wanted = 1;
    LIST_APPEND(wanted, o, want_prev, want_next);
}

static void wantEnd(owner *o) {
    if (!o->probe_wanted) return;
    LIST_UNLINK(wanted, o, want_prev, want_next);
    o->probe_wanted = 0;
}

static void ownerCancelProbe(owner *o) {
    if (o->probe) {
        probeCancel(o->probe);
        o->probe = NULL;
        ost.inflight--;
    }
    wantEnd(o);
}

static void ownerFree(void *val) {
    owner *o = val;
    ownerCancelProbe(o);
    orphanEnd(o);
    sdsfree(o->name);
    sdsfree(o->key);
    sdsfree(o->tenant);
    sdsfree(o->probe_uri);
    zfree(o);
}
static dictType ownerDictType = {dictSdsHash, dictSdsEqual, NULL, ownerFree};

/* Owner names are per tenant, as segment names are (acl.c): a tenant's
 * owner is found only under its tenant, so the same name in two tenants
 * is two owners and a tenant cannot learn another's names by colliding
 * with them. The dict key is the name for a shared owner, "<tenant>\0<name>"
 * for a tenant's (an owner name is printable, so no shared name has a
 * NUL in it and the two kinds never meet). */
static sds ownerKey(const char *tenant, const char *name, size_t len) {
    sds key = sdsempty();
    if (tenant) key = sdscatlen(sdscat(key, tenant), "\0", 1);
    return sdscatlen(key, name, len);
}

owner *ownerLookup(const char *tenant, const char *name, size_t len) {
    if (!owners) return NULL;
    sds key = ownerKey(tenant, name, len);
    dictEntry *de = dictFind(owners, key);
    sdsfree(key);
    return de ? de->val : NULL;
}

owner *ownerLookupAny(const char *name, size_t len) {
    owner *o = ownerLookup(NULL, name, len);
    if (o || !owners) return o;
    dictIterator *it = dictGetSafeIterator(owners);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        owner *t = de->val;
        if (sdslen(t->name) == len && !memcmp(t->name, name, len)) {
            o = t;
            break;
        }
    }
    dictReleaseIterator(it);
    return o;
}

owner *ownerGetOrCreate(const char *tenant, const char *name) {
    if (!owners) owners = dictCreate(&ownerDictType);
    owner *o = ownerLookup(tenant, name, strlen(name));
    if (o) return o;
    o = zcalloc(sizeof(*o));
    o->name = sdsnew(name);
    o->tenant = tenant ? sdsnew(tenant) : NULL;
    o->key = ownerKey(tenant, name, strlen(name));
    o->last_seen_ms = monoMs();
    dictAdd(owners, o->key, o);
    return o;
}

/* ---- which endpoints the server may connect to ------------------------------- */

/* Whether port is one of the server's own listeners (client port, cluster
 * bus, HTTP): an endpoint on this machine at one of those would make the
 * server talk to itself on a client's word. */
static int serverOwnPort(int port) {
    int bus = server.cluster_announce_bus_port ? (int)server.cluster_announce_bus_port : server.port + 10000;
    return port == server.port || (server.cluster_enabled && port == bus) ||
           (server.http_port && port == server.http_port);
}

/* THE rule for every connection the server makes to a segment's host on
 * the word of the client that mounted it -- probes here, relayed reads
 * (migrate.c). A client names the endpoints, so the server connects
 * nowhere it could not connect itself and nowhere it alone may go:
 *   - unix://@name (abstract): only when the segment was mounted from this
 *     machine, and not the server's own socket. Any local process may
 *     connect to an abstract name, so the server reaches nothing its
 *     client could not. A path is never used: its permissions are the
 *     server's (maybe root's) to bypass, not a client's to lend.
 *   - tcp:// with a numeric address: the address the MOUNT came from;
 *     loopback, and the wildcard (read as loopback), only from this machine;
 *     the wildcard from elsewhere is read as the MOUNT's address. Never
 *     another address the client named, never a host name (resolving one
 *     could block the loop), never one of the server's own ports on this
 *     machine.
 * NULL with the uri to connect to in buf, or why not. */
const char *segmentConnectUri(const segment *s, const char *ep, char *buf, size_t len) {
    int kind = probeUriKind(ep), port = probeUriPort(ep);
    int here = s->same_host;
    switch (kind) {
    case PROBE_URI_UNIX:
        if (strncmp(ep, "unix://@", 8)) return "a unix socket path (only abstract unix://@ names are used)";
        if (!here) return "a unix socket of another machine";
        if (server.unixsocket && !strcmp(ep + 7, server.unixsocket)) return "the server's own socket";
        snprintf(buf, len, "%s", ep);
        return NULL;
    case PROBE_URI_TCP:
        if (!probeUriAddrIs(ep, s->peer_ip)) return "not the address the segment was mounted from";
        if (here && serverOwnPort(port)) return "the server's own port";
        snprintf(buf, len, "%s", ep);
        return NULL;
    case PROBE_URI_TCP_LOOPBACK:
        if (!here) return "a loopback address of another machine";
        if (serverOwnPort(port)) return "the server's own port";
        snprintf(buf, len, "%s", ep);
        return NULL;
    case PROBE_URI_TCP_ANY:
        if (here) {
            if (serverOwnPort(port)) return "the server's own port";
            snprintf(buf, len, "tcp://%s:%d", ep[6] == '[' ? "[::1]" : "127.0.0.1", port);
        } else {
            if (s->peer_ip == NULL) return "a wildcard address and no address the segment was mounted from";
            snprintf(buf, len, strchr(s->peer_ip, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", s->peer_ip, port);
        }
        return NULL;
    default: return "not a numeric tcp:// address or an abstract unix://@ name";
    }
}

/* The endpoint of s a probe may ask, into buf; 0 if none: an abstract
 * unix one first (the process's own socket, released by the kernel when
 * the process ends), else the first tcp one the rule allows. */
static int segmentProbeUri(const segment *s, char *buf, size_t len) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->nendpoints; i++)
            if ((pass == 0) == !strncmp(s->endpoints[i], "unix://", 7) &&
                segmentConnectUri(s, s->endpoints[i], buf, len) == NULL)
                return 1;
    return 0;
}

static void ownerSetProbeUri(owner *o, const segment *s) {
    char uri[1100];
    if (o->probe_uri || !segmentProbeUri(s, uri, sizeof(uri))) return;
    o->probe_uri = sdsnew(uri);
    o->probe_seg = s->id;
}

/* An owner lists its segments (a segment points at its owner, and the
 * owner at its segments, doubly linked), so finding them costs what they
 * are, not a pass over the segment table. The pass it was cost O(segments)
 * per owner: when one process that had mounted 20000 segments under as
 * many owners died, reaping them all was 4e8 steps in one cron tick and
 * the server answered nobody for 8 s (found probing: 65535, the most the
 * table holds, would have been ~90 s). */
void ownerSegmentAdded(owner *o, segment *s) {
    s->ownerp = o;
    s->owner_prev = NULL;
    s->owner_next = o->segments;
    if (o->segments) o->segments->owner_prev = s;
    o->segments = s;
    o->nsegments++;
    ownerSetProbeUri(o, s);
}

/* If the endpoint asked was s's, another segment of the owner's (if any
 * has one) takes over: s's host may close that endpoint while the rest of
 * the owner's memory is still served. */
void ownerSegmentRemoved(segment *s) {
    owner *o = s->ownerp;
    if (o == NULL) return;
    if (s->owner_prev) s->owner_prev->owner_next = s->owner_next;
    else o->segments = s->owner_next;
    if (s->owner_next) s->owner_next->owner_prev = s->owner_prev;
    s->owner_prev = s->owner_next = NULL;
    o->nsegments--;
    if (s->state == SEG_DETACHED) o->ndetached--;
    if (o->probe_uri == NULL || o->probe_seg != s->id) return;
    sdsfree(o->probe_uri);
    o->probe_uri = NULL;
    for (segment *t = o->segments; t && o->probe_uri == NULL; t = t->owner_next) {
        serverVisit(VISITS_OWNER_SEGMENTS, 1);
        ownerSetProbeUri(o, t);
    }
}

/* ---- death ------------------------------------------------------------------- */

/* Unmounts o's segments and forgets o; the per-object work of dropping
 * replicas is in storeUnmountSegment. */
static void ownerReap(owner *o) {
    while (o->segments) {
        segment *s = o->segments; /* segmentUnmount takes it off the list */
        serverVisit(VISITS_OWNER_SEGMENTS, 1);
        serverLog(LL_NOTICE, "Owner '%s' is gone: unmounting segment '%s' (id %llu)", o->name, s->name,
                  (unsigned long long)s->id);
        segmentUnmount(s);
    }
    dictDelete(owners, o->key);
}

/* On a cluster replica owners stand still: its client segments are its
 * primary's, held for a failover (replication.c), and they go when the
 * primary streams that they went -- not by a clock or a probe of its own. */
static int ownersFrozen(void) { return server.cluster && clusterNodeIsReplica(server.cluster->myself); }

/* ---- probes ------------------------------------------------------------------- */

static void ownerProbeDone(probeOutcome outcome, const char *detail, void *privdata) {
    owner *o = privdata;
    o->probe = NULL;
    ost.inflight--;
    if (o->nconns > 0 || ownersFrozen()) return; /* back meanwhile (attach cancels, but be sure), or demoted */
    switch (outcome) {
    case PROBE_ALIVE:
        ost.alive++;
        serverLog(LL_NOTICE,
                  "Owner '%s' has no connection but its host answers (%s): its segments take no new objects "
                  "until it is back, for owner-ttl at most",
                  o->name, detail);
        break;
    case PROBE_UNDECIDED:
        ost.undecided++;
        serverLog(LL_NOTICE, "Owner '%s' has no connection and its host did not answer (%s): owner-ttl decides",
                  o->name, detail);
        break;
    case PROBE_GONE:
        ost.lost_by_probe++;
        serverLog(LL_NOTICE, "Owner '%s' has no connection and its host is gone (%s)", o->name, detail);
        ownerReap(o);
        break;
    }
}

/* Starts a probe of o's host unless one is in flight, probing is off or no
 * endpoint can be asked; waits for a slot when all are taken. */
static int ownerProbeStart(owner *o) {
    if (o->probe) return 1;
    if (ownersFrozen()) return 0;
    if (server.owner_probe_timeout <= 0 || o->probe_uri == NULL) return 0;
    if (ost.inflight >= OWNER_PROBES_MAX) {
        wantProbe(o);
        return 0;
    }
    char err[256];
    o->probe = probeStart(server.el, o->probe_uri, OWNER_PROBE_DELAY_MS, server.owner_probe_timeout,
                          ownerProbeDone, o, err, sizeof(err));
    wantEnd(o);
    if (o->probe == NULL) {
        serverLog(LL_WARNING, "Owner '%s': %s", o->name, err);
        return 0;
    }
    ost.inflight++;
    ost.probes++;
    return 1;
}

int ownerProbeAgain(owner *o) { return o->nconns == 0 && ownerProbeStart(o); }

void ownersPromoted(void) {
    if (!owners) return;
    dictIterator *it = dictGetSafeIterator(owners);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        owner *o = de->val;
        o->last_seen_ms = monoMs();
        if (o->nconns == 0) {
            orphanSince(o);
            wantProbe(o); /* ownerCron: a host that died meanwhile is found out at once */
        }
    }
    dictReleaseIterator(it);
}

void ownerRestored(owner *o) {
    o->last_seen_ms = monoMs();
    if (o->nconns == 0) {
        orphanSince(o); /* again, for its next segment: owner-ttl counts from now */
        wantProbe(o);   /* ownerCron, once the loop (and the probe's timers) run */
    }
}

/* ---- connections ----------------------------------------------------------------- */

/* Which of a connection's owners is o. A few are compared one by one;
 * past OWNER_SCAN_MAX the connection gets an index (owner -> its slot),
 * so a MOUNT or HEARTBEAT costs O(1), not O(the owners it holds): one that
 * had mounted 20000 segments under as many owners and sent a HEARTBEAT
 * for each paid 2e8 comparisons (found probing; DEBUG VISITS
 * client-owners). */
#define OWNER_SCAN_MAX 16
static uint64_t ptrHash(const void *key) { return dictGenHashFunction(&key, sizeof(key)); }
static int ptrCompare(const void *a, const void *b) { return a == b; }
static dictType clientOwnersType = {ptrHash, ptrCompare, NULL, NULL};

static int clientOwnerSlot(const client *c, const owner *o) {
    if (c->owners_index) {
        serverVisit(VISITS_CLIENT_OWNERS, 1);
        void *v = dictFetchValue(c->owners_index, o);
        return v ? (int)(intptr_t)v - 1 : -1;
    }
    for (int i = 0; i < c->nowners; i++) {
        serverVisit(VISITS_CLIENT_OWNERS, 1);
        if (c->owners[i] == o) return i;
    }
    return -1;
}

static void clientOwnerIndexSet(client *c, int i) {
    if (c->owners_index) {
        dictEntry *existing, *de = dictAddRaw(c->owners_index, c->owners[i], &existing);
        (de ? de : existing)->val = (void *)(intptr_t)(i + 1);
    } else if (c->nowners > OWNER_SCAN_MAX) {
        c->owners_index = dictCreate(&clientOwnersType);
        for (int j = 0; j < c->nowners; j++) {
            serverVisit(VISITS_CLIENT_OWNERS, 1);
            dictAdd(c->owners_index, c->owners[j], (void *)(intptr_t)(j + 1));
        }
    }
}

void ownerAttachClient(owner *o, client *c) {
    o->last_seen_ms = monoMs();
    if (clientOwnerSlot(c, o) >= 0) return;
    if (c->nowners == c->owners_cap) {
        c->owners_cap = c->owners_cap ? c->owners_cap * 2 : 4;
        c->owners = zrealloc(c->owners, sizeof(owner *) * (size_t)c->owners_cap);
    }
    c->owners[c->nowners++] = o;
    clientOwnerIndexSet(c, c->nowners - 1);
    o->nconns++;
    if (o->orphaned) {
        orphanEnd(o);
        ownerCancelProbe(o); /* whatever it would say, the owner is back */
        serverLog(LL_VERBOSE, "Owner '%s' is back: its segments take new objects again", o->name);
    }
}

void ownerDetachClient(client *c) {
    long long now = monoMs();
    for (int i = 0; i < c->nowners; i++) {
        owner *o = c->owners[i];
        o->nconns--;
        o->last_seen_ms = now;
        if (o->nconns == 0 && !o->orphaned) {
            orphanSince(o);
            serverLog(LL_VERBOSE, "Owner '%s' has no connection left: its segments take no new objects", o->name);
            ownerProbeStart(o);
        }
    }
    zfree(c->owners);
    c->owners = NULL;
    c->nowners = c->owners_cap = 0;
    if (c->owners_index) dictRelease(c->owners_index);
    c->owners_index = NULL;
}

/* c unmounted a segment of o's. If that was o's last and c is one of the
 * connections keeping o alive, c lets go of o, and o goes at once when c
 * was the last: an owner with nothing mounted has nothing for owner-ttl to
 * protect, and a connection holds every owner it ever mounted as until it
 * closes -- one that mounts and unmounts under ever new names (libmooncake
 * names its owner after the segment: mc_mount, mc_unmount, again) grew by an
 * owner per cycle, and every cron tick walked them all (found by a soak:
 * 70000 cycles on one connection left 70000 owners and 14 MB of heap).
 * Only the owner's own connection lets go this way: an UNMOUNT by anyone
 * else (an administrator draining a host) leaves the host's owner alive, so
 * its HEARTBEAT is still OK and it does not mount again. */
void ownerUnmountedBy(owner *o, client *c) {
    if (o->nsegments > 0) return;
    int i = clientOwnerSlot(c, o);
    if (i < 0) return;
    if (c->owners_index) dictDelete(c->owners_index, o);
    c->owners[i] = c->owners[--c->nowners];
    if (i < c->nowners && c->owners_index) clientOwnerIndexSet(c, i); /* the last one moved to i */
    if (--o->nconns == 0) dictDelete(owners, o->key);
}

int ownerHeldBy(const owner *o, const client *c) { return clientOwnerSlot(c, o) >= 0; }

int ownerIsAlive(const owner *o) {
    return o->nconns > 0 || monoMs() - o->last_seen_ms <= server.owner_ttl;
}

unsigned long ownerCount(void) { return owners ? dictSize(owners) : 0; }

/* Dead owners lose their segments; orphans that wait for a probe slot get
 * one. Only orphans are looked at, the oldest first (see the lists above):
 * a tick costs the owners that die or get a probe, plus one, and at most
 * OWNER_REAPS_PER_TICK die in one tick (each unmounts its segments). */
#define OWNER_REAPS_PER_TICK 128
void ownerCron(void) {
    if (!owners || dictSize(owners) == 0 || ownersFrozen()) return;
    for (int reaped = 0; orphans.head && reaped < OWNER_REAPS_PER_TICK; reaped++) {
        owner *o = orphans.head;
        serverVisit(VISITS_CRON_OWNERS, 1);
        if (ownerIsAlive(o)) break;
        ost.lost_by_ttl++;
        ownerReap(o); /* frees it: off both lists */
    }
    if (server.owner_probe_timeout <= 0) return; /* they wait until probes are on again */
    while (wanted.head && ost.inflight < OWNER_PROBES_MAX) {
        owner *o = wanted.head;
        serverVisit(VISITS_CRON_OWNERS, 1);
        wantEnd(o);
        if (o->nconns == 0) ownerProbeStart(o);
    }
}

sds ownerInfo(sds s) {
    return sdscatprintf(s,
                        "owners_orphaned:%lu\r\nowner_probes:%llu\r\nowner_probes_in_flight:%d\r\n"
                        "owner_probes_alive:%llu\r\nowner_probes_undecided:%llu\r\n"
                        "owners_lost_by_probe:%llu\r\nowners_lost_by_ttl:%llu\r\n",
                        ost.orphaned, ost.probes, ost.inflight, ost.alive, ost.undecided, ost.lost_by_probe,
                        ost.lost_by_ttl);
}
