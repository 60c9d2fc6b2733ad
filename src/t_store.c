/* t_store.c -- the Mooncake store commands (SPEC §4.2).
 *
 * Two-phase put. PUT.START reserves extents (replicas) and records a
 * pending version that readers cannot see; the writer moves the bytes
 * itself (shm, RDMA, TCP data plane) and PUT.END publishes the version in
 * one step, replacing any previous one. Only the connection that started a
 * put may end or revoke it (-NOTOWNER otherwise): a slow writer whose put
 * was taken over cannot publish over the new writer's bytes.
 *
 * Abandoned puts. A pending version older than put-timeout may be taken
 * over by a new PUT.START of the same key. The old extents are not reused
 * before put-release-timeout, because the old writer may still be writing.
 * No one has to come back for a put, though: store.c's pending sweep gives
 * back the puts of a connection that closed (at once, the space after
 * put-release-timeout) and any put older than put-timeout plus
 * put-release-timeout, and a connection holds at most
 * client-max-pending-puts of them at a time (-LIMIT past that).
 *
 * Reads. GET.REPLICAS hands out the replica list of the complete version
 * under a lease (lease-ttl, extended by every GET.REPLICAS or LEASE): while
 * the lease runs, that version's extents are never reused, even if the key
 * is removed or overwritten meanwhile (store.c defers the free).
 *
 * Batch forms answer one element per key, in order: a missing key is a nil
 * element, a refused key an error element, and the batch itself never
 * fails as a whole. They are built from the same per-key functions as the
 * single-key commands, so the two can never disagree.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "acl.h"
#include "aof.h"
#include "multi.h"
#include "notify.h"
#include "placement.h"
#include "replication.h"
#include "server.h"
#include "store.h"
#include "tenantkeys.h"
#include "tenantquota.h"
#include "util.h"
#include "zmalloc.h"

#define MAX_LEASE_MS 86400000LL

static struct {
    long long started, ended, revoked, taken_over, nospace, limited;
    long long get_hits, get_misses, get_notready, leases_granted, leases_released_early;
    long long holds_granted, holds_released, holds_limited;
} ss;

void storeCommandStatsReset(void) { memset(&ss, 0, sizeof(ss)); }

sds storeCommandStatsInfo(sds s) {
    return sdscatprintf(s,
                        "store_puts_started:%lld\r\nstore_puts_ended:%lld\r\nstore_puts_revoked:%lld\r\n"
                        "store_puts_taken_over:%lld\r\nstore_puts_nospace:%lld\r\nstore_puts_pending:%lu\r\n"
                        "store_puts_limited:%lld\r\n"
                        "store_get_replicas_hits:%lld\r\nstore_get_replicas_misses:%lld\r\n"
                        "store_get_replicas_notready:%lld\r\nstore_leases_granted:%lld\r\n"
                        "store_leases_released_early:%lld\r\nstore_holds:%llu\r\nstore_holds_granted:%lld\r\n"
                        "store_holds_released:%lld\r\nstore_holds_limited:%lld\r\n",
                        ss.started, ss.ended, ss.revoked, ss.taken_over, ss.nospace, storePendingSize(), ss.limited,
                        ss.get_hits, ss.get_misses, ss.get_notready, ss.leases_granted,
                        ss.leases_released_early, (unsigned long long)storeHoldsLive(), ss.holds_granted,
                        ss.holds_released, ss.holds_limited);
}

/* ---- option parsing ------------------------------------------------------ */

typedef struct putOptions {
    int replicas;
    segment *prefer[STORE_MAX_REPLICAS];
    int nprefer;
    long long pin_ms;  /* 0 = none */
    int hardpin;
    int replace;
} putOptions;

/* Parses PUT.START options from argv[start..argc); replies and returns
 * C_ERR on a bad one. */
static int parsePutOptions(client *c, int start, putOptions *po) {
    memset(po, 0, sizeof(*po));
    po->replicas = (int)server.default_replicas;
    for (int j = start; j < c->argc; j++) {
        const char *opt = c->argv[j];
        int more = j + 1 < c->argc;
        if (!strcasecmp(opt, "replicas") && more) {
            long long n;
            if (getLongLongFromObjectOrReply(c, c->argv[++j], &n, NULL) != C_OK) return C_ERR;
            if (n < 1 || n > STORE_MAX_REPLICAS) {
                addReplyErrorFormat(c, "ERR REPLICAS must be between 1 and %d", STORE_MAX_REPLICAS);
                return C_ERR;
            }
            po->replicas = (int)n;
        } else if ((!strcasecmp(opt, "prefer") || !strcasecmp(opt, "hint")) && more) {
            /* HINT is Mooncake's preferred_segment: a preference, so a
             * name that is unknown or not this user's to see is passed
             * over (the put goes elsewhere) instead of refused; PREFER
             * names a segment that must exist. */
            int hint = !strcasecmp(opt, "hint");
            segment *s = aclLookupSegment(c, c->argv[++j]);
            if (s == NULL || !aclSegmentVisible(c, s)) {
                if (hint) continue;
                addReplyErrorFormat(c, "ERR no such segment '%s'", c->argv[j]);
                return C_ERR;
            }
            if (po->nprefer == STORE_MAX_REPLICAS) {
                addReplyErrorFormat(c, "ERR at most %d PREFER segments", STORE_MAX_REPLICAS);
                return C_ERR;
            }
            po->prefer[po->nprefer++] = s;
        } else if (!strcasecmp(opt, "pin") && more) {
            long long ms;
            char why[128];
            if (getLongLongFromObjectOrReply(c, c->argv[++j], &ms, NULL) != C_OK) return C_ERR;
            if (storeSoftPinInvalid(ms, why, sizeof(why)) != NULL) {
                addReplyError(c, why);
                return C_ERR;
            }
            po->pin_ms = ms;
        } else if (!strcasecmp(opt, "hardpin")) {
            po->hardpin = 1;
        } else if (!strcasecmp(opt, "replace")) {
            po->replace = 1;
        } else {
            addReplyErrorSyntax(c);
            return C_ERR;
        }
    }
    return C_OK;
}

/* A store object's key is never empty (its own rule); its length limit is
 * the store's, as for SET (checkKeyLength). */
static int checkKey(client *c, sds key) {
    if (sdslen(key) == 0) {
        addReplyError(c, "ERR key must not be empty");
        return C_ERR;
    }
    return checkKeyLength(c, key);
}

/* The writer's host as segments record it, for local-first placement.
 * Every key of a put pays it: a copy, not snprintf (whose format parsing
 * was a tenth of a BATCH.PUT.START's instructions per key). */
static const char *clientHost(client *c, char *buf, size_t len) {
    if (c->flags & CLIENT_UNIX_SOCKET) return "localhost";
    size_t n = strnlen(c->addr, len - 1);
    memcpy(buf, c->addr, n);
    buf[n] = '\0';
    char *colon = strrchr(buf, ':');
    if (colon) *colon = '\0';
    return buf;
}

static void addReplyReplica(client *c, storeObj *o, int i) {
    storeReplica *r = storeObjReplica(o, i);
    addReplyArrayLen(c, 3);
    addReplyLongLong(c, (long long)storeReplicaSegment(r)->id);
    addReplyLongLong(c, (long long)r->offset);
    addReplyLongLong(c, (long long)o->len);
}

/* ---- PUT.START ----------------------------------------------------------- */

/* One key's PUT.START: replies with the replica array or an error. */
static void putStartOne(client *c, sds key, sds sizearg, const putOptions *po) {
    long long size;
    if (checkKey(c, key) != C_OK) return;
    if (!string2ll(sizearg, sdslen(sizearg), &size) || size < 1) {
        addReplyError(c, "ERR size must be a positive integer");
        return;
    }
    if (storeValueTooBig((uint64_t)size) != NULL) {
        addReplyError(c, storeValueTooBig((uint64_t)size));
        return;
    }
    storeObj *pending = storePendingLookup(key);
    if (pending) {
        if (server.monotime - pending->ext->created_ms < server.put_timeout) {
            addReplyError(c, "-EXISTS a put of this key is in progress");
            return;
        }
    }
    /* An existence check, not a read: a miss is no keymiss event. */
    if (!po->replace && storeLookupReadFlags(key, STORE_LOOKUP_NONOTIFY)) {
        addReplyError(c, "-EXISTS the key exists (use REPLACE to write a new version)");
        return;
    }
    /* Every put a connection holds open holds pool space no one else can
     * use or evict: a connection gets a bounded number at a time. */
    putOwner *owner = storePutOwnerOf(c->id, &c->put_owner);
    if ((long long)owner->npending >= server.client_max_pending_puts) {
        ss.limited++;
        addReplyErrorFormat(c, "-LIMIT this connection has client-max-pending-puts (%lld) puts in progress: "
                            "end or revoke some first", server.client_max_pending_puts);
        return;
    }
    /* A tenant's bound before placement: making room evicts its own values
     * (tenantquota.c), where the pool's eviction would take anyone's. */
    const char *quota_err;
    if (server.tenant_maxmemory && tenantQuotaMakeRoom(c, key, (uint64_t)size, 1, &quota_err) != C_OK) {
        ss.nospace++;
        addReplyError(c, quota_err);
        return;
    }
    storeObj *o = storeObjNew((uint64_t)size);
    o->state = OBJ_PENDING;
    char hostbuf[NET_ADDR_STR_LEN];
    /* REPLACE: making room never evicts the version being replaced. */
    storeEvictProtected = key;
    int placed = placeReplicas(o, (uint64_t)size, po->replicas, (segment **)po->prefer, po->nprefer,
                               clientHost(c, hostbuf, sizeof(hostbuf)), aclSegmentTenantFor(c));
    storeEvictProtected = NULL;
    if (placed == 0) {
        storeObjDecrRef(o);
        ss.nospace++;
        storeLogNoSpace((uint64_t)size, "a put");
        addReplyError(c, "-NOSPACE no segment has room for this object");
        return;
    }
    /* A reader must never see bytes this object's writer did not write,
     * and a writer may end the put having written part of its extent or
     * none (over shared memory the server cannot even tell). Pool extents
     * need no zeroing here: free pool space is always zero, because every
     * extent is zeroed when it is freed, mostly off this thread (zerofree.c;
     * BENCHMARKS.md, issues 12 and 14). Mounted segments are their owners'
     * memory, written by their owners. */
    if (pending) {
        /* Take over an abandoned put: its space waits put-release-timeout. */
        storePendingAbandon(storePendingUnlink(key));
        ss.taken_over++;
    }
    storeObjExt *ext = storeObjGetExt(o);
    /* Pending: on the monotonic clock, so a wall-clock step neither times
     * every put out (its space reused under a writer) nor stalls them;
     * PUT.END turns it into the wall clock's time, what the log keeps. */
    ext->created_ms = server.monotime;
    ext->put_owner = owner;
    owner->refs++; /* the object's, dropped when it is freed */
    storeObjSetKey(o, key); /* the data plane checks it (store.h) */
    if (po->pin_ms) ext->softpin_until_ms = addSaturate(server.monotime, po->pin_ms);
    if (po->hardpin) o->flags |= OBJ_FLAG_HARDPIN;
    storePendingAdd(key, o);
    ss.started++;
    addReplyArrayLen(c, o->nreplicas);
    for (int i = 0; i < o->nreplicas; i++) addReplyReplica(c, o, i);
}

void putStartCommand(client *c) {
    putOptions po;
    if (parsePutOptions(c, 3, &po) != C_OK) return;
    putStartOne(c, c->argv[1], c->argv[2], &po);
}

/* BATCH.PUT.START numkeys key size [key size ...] [options] */
void batchPutStartCommand(client *c) {
    long long n;
    if (getLongLongFromObjectOrReply(c, c->argv[1], &n, NULL) != C_OK) return;
    if (n < 1 || n > (c->argc - 2) / 2) {
        addReplyError(c, "ERR numkeys must be at least 1 and cover key size pairs");
        return;
    }
    putOptions po;
    if (parsePutOptions(c, 2 + 2 * (int)n, &po) != C_OK) return;
    addReplyArrayLen(c, n);
    for (long long i = 0; i < n; i++) putStartOne(c, c->argv[2 + 2 * i], c->argv[3 + 2 * i], &po);
}

/* ---- PUT.END / PUT.REVOKE ------------------------------------------------ */

static void putEndOne(client *c, sds key, sds checksum) {
    storeObj *p = storePendingLookup(key);
    if (p == NULL) {
        storeObj *o = storeLookupWrite(key);
        if (o == NULL) addReplyError(c, "-NOKEY no such key");
        else if (storeObjPutBy(o, c->put_owner)) addReplyOk(c); /* a repeated PUT.END */
        else addReplyError(c, "-NOTPENDING the key has no put in progress");
        return;
    }
    if (!storeObjPutBy(p, c->put_owner)) {
        addReplyError(c, "-NOTOWNER the put was started by another connection");
        return;
    }
    storeObj *o = storePendingUnlink(key);
    storeObjSetCreated(o, storeObjCreatedMs(o)); /* the wall clock's, from here on (and its age) */
    o->state = OBJ_COMPLETE;
    o->lru = storeLruClock();
    if (checksum) {
        sdsfree(o->ext->checksum);
        o->ext->checksum = sdsdup(checksum);
    }
    storeSet(key, o, -1, 0);
    /* PUT.END stores a string value, readable by GET: the store's SET. */
    notifyKeyspaceEvent(NOTIFY_STRING, "set", key);
    ss.ended++;
    addReplyOk(c);
}

/* A PUT.END (or BATCH.PUT.END) answered -ASK: its slot is migrating and
 * none of its keys has a complete version here (cluster.c, keyIsHere).
 * The writer redoes those puts on the target, so this node's are dropped
 * now rather than held until the slot leaves. The writer sent PUT.END, so
 * it has stopped writing: the space is free at once, as after PUT.REVOKE.
 * Another connection's put is left to its own writer. */
void storeDropAskedPuts(client *c, sds *argv, const int *keys, int nkeys) {
    for (int i = 0; i < nkeys; i++) {
        sds key = argv[keys[i]];
        storeObj *p = storePendingLookup(key);
        if (p == NULL || !storeObjPutBy(p, c->put_owner)) continue;
        storeObjDecrRef(storePendingUnlink(key));
        ss.revoked++;
    }
}

/* A checksum is kept with its object and sent with every GET.REPLICAS:
 * room for any digest's name and hex (SHA-512's is 128 characters), not
 * for a client to hang heap of its choosing on each object. */
#define STORE_CHECKSUM_MAX 256

void putEndCommand(client *c) {
    sds checksum = NULL;
    if (c->argc == 4 && !strcasecmp(c->argv[2], "checksum")) {
        checksum = c->argv[3];
        if (sdslen(checksum) > STORE_CHECKSUM_MAX) {
            /* Refused before anything changes: the put is still pending. */
            addReplyErrorFormat(c, "ERR a checksum is at most %d bytes", STORE_CHECKSUM_MAX);
            return;
        }
    } else if (c->argc != 2) {
        addReplyErrorSyntax(c);
        return;
    }
    putEndOne(c, c->argv[1], checksum);
}

void batchPutEndCommand(client *c) {
    addReplyArrayLen(c, c->argc - 1);
    for (int j = 1; j < c->argc; j++) putEndOne(c, c->argv[j], NULL);
}

void putRevokeCommand(client *c) {
    sds key = c->argv[1];
    storeObj *p = storePendingLookup(key);
    if (p == NULL) {
        addReplyError(c, storeLookupWrite(key) ? "-NOTPENDING the key has no put in progress" : "-NOKEY no such key");
        return;
    }
    if (!storeObjPutBy(p, c->put_owner)) {
        addReplyError(c, "-NOTOWNER the put was started by another connection");
        return;
    }
    /* The writer itself says it stopped writing: the space is free now. */
    storeObjDecrRef(storePendingUnlink(key));
    ss.revoked++;
    addReplyOk(c);
}

/* ---- reads and leases ---------------------------------------------------- */

/* A connection's releasable grants: the version it was given (its header
 * kept alive by storeLeaseEntryAdd, so the pointer stays good), under which
 * key, in which lease period, until when. LEASE.RELEASE finds them by key,
 * so a reader can end its lease on a version that was overwritten or
 * removed while it read -- space that would otherwise stay held to the
 * deadline.
 *
 * Every operation looks at O(1) grant records, amortized (DEBUG VISITS
 * counts them), however many the connection holds and in whatever order it
 * releases:
 *   - the grants form a queue in grant order, doubly linked through a slot
 *     array whose free slots are chained, so a grant released out of order
 *     is unlinked where it is and its slot reused (no holes to squeeze);
 *   - a reader releases in about the order it read (libmooncake right after
 *     each get, a batch in its order), so a release first looks at the
 *     oldest grant. Only when that is not the one is the key index built
 *     (key -> its oldest grant, a key's grants chained oldest first), once,
 *     over the grants then held; from then on every grant goes into it,
 *     until the connection holds none. Each grant is indexed at most once,
 *     and a reader that never releases, or releases in order, never pays
 *     for an index at all (a dict insert per grant was a quarter more CPU
 *     per GET.REPLICAS);
 *   - grants whose deadline passed leave from the head of the queue, at
 *     every grant and from clientsCron: each is looked at once, as it goes,
 *     plus the one live head where pruning stops.
 * Pruning from the head needs the queue in deadline order. Every grant
 * recorded here is of lease-ttl (LEASE key ms records none), so grant order
 * is deadline order -- except after CONFIG SET lowered lease-ttl (or the
 * clock stepped back), when a newer grant would run out before older ones.
 * Rather than a heap (O(log n) per grant) for that rare case, a record's
 * deadline is never earlier than the one before it: such a grant leaves
 * with the older ones, at most the old lease-ttl late. That only delays
 * when its period may be ended early by the other grants' releases; the
 * period's own deadline (store.c) is its real one, and space is never
 * given back before its time.
 *
 * Bounded: CLIENT_MAX_LEASES records per connection. Past that, once the
 * expired ones have left, a grant is not recorded: it holds its period to
 * the deadline, as LEASE key ms does -- at the cost of one look at the
 * head, so a reader that never releases (redis-cli, redis-benchmark, any
 * Redis client reading replicas) pays no more per read than one that
 * does. The slots grow by doubling up to the bound, and are given back when
 * the last grant goes if there are many of them. */
#define CLIENT_MAX_LEASES 4096
#define LEASE_SLOTS_MIN 16
#define LEASE_SLOTS_KEEP 64

typedef struct clientLease {
    sds key;
    storeObj *o;
    uint64_t epoch;
    long long until;
    int older, newer; /* the queue, -1: none; a free slot chains the free list by newer */
    int same;         /* indexed: the key's next (newer) grant, -1: none */
    int last;         /* indexed, in a key's oldest grant: the key's newest */
} clientLease;

typedef struct clientLeases {
    clientLease *slot;
    int cap, live;
    int head, tail, free; /* oldest, newest, a free slot; -1: none */
    dict *bykey;          /* NULL, or key (its oldest grant's) -> 1 + that grant's slot */
} clientLeases;

static uint64_t leaseKeyHash(const void *key) { return storeKeyHashBuf(key, sdslen((sds)key)); }
static int leaseKeyCompare(const void *a, const void *b) {
    size_t la = sdslen((sds)a), lb = sdslen((sds)b);
    return la == lb && memcmp(a, b, la) == 0;
}
static dictType leaseKeysType = {leaseKeyHash, leaseKeyCompare, NULL, NULL}; /* keys: the grants' */

#define SLOT_OF(de) ((int)(intptr_t)dictGetVal(de) - 1)
#define SLOT_VAL(i) ((void *)(intptr_t)((i) + 1))

static void clientLeasesFree(client *c) {
    clientLeases *cl = c->leases;
    if (cl->bykey) dictRelease(cl->bykey);
    for (int i = cl->head; i >= 0; i = cl->slot[i].newer) sdsfree(cl->slot[i].key);
    zfree(cl->slot);
    zfree(cl);
    c->leases = NULL;
}

static void clientLeaseIndexAdd(clientLeases *cl, int i) {
    clientLease *l = &cl->slot[i];
    dictEntry *existing, *de = dictAddRaw(cl->bykey, l->key, &existing);
    l->same = -1;
    if (de) { /* the key's oldest */
        de->val = SLOT_VAL(i);
        l->last = i;
    } else {
        clientLease *first = &cl->slot[SLOT_OF(existing)];
        cl->slot[first->last].same = i;
        first->last = i;
    }
}

static void clientLeasesIndex(clientLeases *cl) {
    cl->bykey = dictCreate(&leaseKeysType);
    for (int i = cl->head; i >= 0; i = cl->slot[i].newer) {
        serverVisit(VISITS_LEASES, 1);
        clientLeaseIndexAdd(cl, i);
    }
}

/* Drops slot i, the oldest grant of its key (de: its index entry, if
 * looked up already). */
static void clientLeaseDrop(clientLeases *cl, int i, dictEntry *de, int release) {
    clientLease *l = &cl->slot[i];
    serverVisit(VISITS_LEASES, 1);
    if (storeLeaseEntryDrop(l->o, l->epoch, release)) ss.leases_released_early++;
    if (l->older >= 0) cl->slot[l->older].newer = l->newer;
    else cl->head = l->newer;
    if (l->newer >= 0) cl->slot[l->newer].older = l->older;
    else cl->tail = l->older;
    if (cl->bykey) {
        if (de == NULL) de = dictFind(cl->bykey, l->key);
        serverAssert(de != NULL && SLOT_OF(de) == i);
        if (l->same >= 0) { /* the next grant of the key is its oldest now */
            clientLease *next = &cl->slot[l->same];
            next->last = l->last;
            de->key = next->key; /* the same string, another copy */
            de->val = SLOT_VAL(l->same);
        } else {
            dictDelete(cl->bykey, l->key);
        }
    }
    sdsfree(l->key);
    l->key = NULL;
    l->o = NULL;
    l->newer = cl->free;
    cl->free = i;
    cl->live--;
}

/* Grants whose own deadline passed leave, oldest first (the reader no
 * longer relies on them; another reader's grant of the same period still
 * counts). */
static void clientLeasesExpire(clientLeases *cl) {
    while (cl->head >= 0) {
        if (cl->slot[cl->head].until > server.monotime) {
            serverVisit(VISITS_LEASES, 1);
            return;
        }
        clientLeaseDrop(cl, cl->head, NULL, 1);
    }
}

/* With no grant left the index goes (the next is built from scratch if
 * needed), and so do the slots if there are many. */
static void clientLeasesIdle(client *c) {
    clientLeases *cl = c->leases;
    if (cl->live) return;
    if (cl->cap > LEASE_SLOTS_KEEP) {
        clientLeasesFree(c);
    } else if (cl->bykey) {
        dictRelease(cl->bykey);
        cl->bykey = NULL;
    }
}

/* all: every grant, on disconnect, without ending any lease -- a reader
 * whose control connection broke may still be copying. */
void clientLeasesPrune(client *c, int all) {
    clientLeases *cl = c->leases;
    if (cl == NULL) return;
    if (all) {
        for (int i = cl->head; i >= 0; i = cl->slot[i].newer) {
            serverVisit(VISITS_LEASES, 1);
            storeLeaseEntryDrop(cl->slot[i].o, cl->slot[i].epoch, 0);
        }
        clientLeasesFree(c);
        return;
    }
    clientLeasesExpire(cl);
    clientLeasesIdle(c);
}

static clientLease *clientLeaseAdd(client *c, sds key, storeObj *o, long long until) {
    clientLeases *cl = c->leases;
    if (cl == NULL) {
        cl = c->leases = zcalloc(sizeof(*cl));
        cl->head = cl->tail = cl->free = -1;
    }
    clientLeasesExpire(cl);
    if (cl->live == CLIENT_MAX_LEASES) return NULL;
    if (cl->free < 0) { /* every slot is in use: double them, up to the bound */
        int cap = cl->cap ? cl->cap * 2 : LEASE_SLOTS_MIN;
        if (cap > CLIENT_MAX_LEASES) cap = CLIENT_MAX_LEASES;
        cl->slot = zrealloc(cl->slot, sizeof(clientLease) * (size_t)cap);
        for (int i = cap - 1; i >= cl->cap; i--) {
            cl->slot[i].newer = cl->free;
            cl->free = i;
        }
        cl->cap = cap;
    }
    int i = cl->free;
    clientLease *l = &cl->slot[i];
    cl->free = l->newer;
    l->key = sdsdup(key);
    l->o = o;
    l->epoch = 0;
    if (cl->tail >= 0 && cl->slot[cl->tail].until > until) until = cl->slot[cl->tail].until; /* above */
    l->until = until;
    l->older = cl->tail;
    l->newer = -1;
    if (cl->tail >= 0) cl->slot[cl->tail].newer = i;
    else cl->head = i;
    cl->tail = i;
    cl->live++;
    if (cl->bykey) clientLeaseIndexAdd(cl, i);
    serverVisit(VISITS_LEASES, 1);
    storeLeaseEntryAdd(o);
    return l;
}

static void grantLease(client *c, sds key, storeObj *o, long long ms) {
    clientLease *l = c ? clientLeaseAdd(c, key, o, addSaturate(server.monotime, ms)) : NULL;
    uint64_t epoch = storeLeaseGrant(o, ms, l != NULL);
    if (l) l->epoch = epoch;
    ss.leases_granted++;
}

/* LEASE.RELEASE key [key ...]: this connection is done reading these keys
 * (one grant each, the oldest first). The number of grants released. */
void leaseReleaseCommand(client *c) {
    long long released = 0;
    clientLeases *cl = c->leases;
    for (int j = 1; cl && cl->live && j < c->argc; j++) {
        sds key = c->argv[j];
        if (cl->bykey == NULL) {
            sds k = cl->slot[cl->head].key;
            if (sdslen(k) == sdslen(key) && !memcmp(k, key, sdslen(key))) {
                clientLeaseDrop(cl, cl->head, NULL, 1);
                released++;
                continue;
            }
            clientLeasesIndex(cl); /* out of order: from now on by key */
        }
        dictEntry *de = dictFind(cl->bykey, key);
        if (de == NULL) {
            serverVisit(VISITS_LEASES, 1); /* the lookup */
            continue;
        }
        clientLeaseDrop(cl, SLOT_OF(de), de, 1);
        released++;
    }
    if (cl) clientLeasesIdle(c);
    addReplyLongLong(c, released);
}

/* "<prefix><v>\r\n" at p; returns the end. Digits backwards into a small
 * buffer: no ll2string, no memcpy per element. */
static char *catNum(char *p, char prefix, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    *p++ = prefix;
    while (n) *p++ = tmp[--n];
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

#define REPLICAS_REPLY_MAX 1024
/* Each number is at most 23 bytes ("<c>" + 20 digits + CRLF). */
_Static_assert(3 * 23 + (23 + 256 + 2) + STORE_MAX_REPLICAS * (4 + 3 * 23) <= REPLICAS_REPLY_MAX,
               "a GET.REPLICAS reply fits its buffer");

/* GET.REPLICAS's answer for o: [lease ms, size, checksum, [segment, offset,
 * size]...]. The one reply a batch sends per key, so it is formatted in
 * one buffer and added once: element by element, a 128-key
 * BATCH.GET.REPLICAS spent 15% of the server in small copies. */
static void addReplyReplicas(client *c, storeObj *o, long long lease) {
    sds ck = o->ext->checksum;
    if (lease < 0 || (ck && sdslen(ck) > 256)) {
        addReplyArrayLen(c, 3 + o->nreplicas);
        addReplyLongLong(c, lease);
        addReplyLongLong(c, (long long)o->len);
        if (ck) addReplyBulk(c, ck, sdslen(ck));
        else addReplyNull(c);
        for (int i = 0; i < o->nreplicas; i++) addReplyReplica(c, o, i);
        return;
    }
    char buf[REPLICAS_REPLY_MAX], *p = buf;
    p = catNum(p, '*', 3 + (uint64_t)o->nreplicas);
    p = catNum(p, ':', (uint64_t)lease);
    p = catNum(p, ':', o->len);
    if (ck) {
        p = catNum(p, '$', sdslen(ck));
        memcpy(p, ck, sdslen(ck));
        p += sdslen(ck);
        *p++ = '\r';
        *p++ = '\n';
    } else if (c->resp == 2) {
        memcpy(p, "$-1\r\n", 5);
        p += 5;
    } else {
        memcpy(p, "_\r\n", 3);
        p += 3;
    }
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *r = storeObjReplica(o, i);
        memcpy(p, "*3\r\n", 4);
        p += 4;
        p = catNum(p, ':', storeReplicaSegment(r)->id);
        p = catNum(p, ':', r->offset);
        p = catNum(p, ':', o->len);
    }
    addReplyProto(c, buf, (size_t)(p - buf));
}

/* The readable version of key for GET.REPLICAS and HOLD.REPLICAS, or NULL
 * with nil (missing) or -NOTREADY (only pending) replied. */
static storeObj *replicasLookup(client *c, sds key) {
    storeObj *o = storeLookupRead(key);
    if (o) return o;
    if (storePendingLookup(key)) {
        ss.get_notready++;
        addReplyError(c, "-NOTREADY the key's put has not ended yet");
    } else {
        ss.get_misses++;
        addReplyNullArray(c);
    }
    return NULL;
}

static void getReplicasOne(client *c, sds key) {
    storeObj *o = replicasLookup(c, key);
    if (o == NULL) return;
    ss.get_hits++;
    grantLease(c, key, o, server.lease_ttl);
    addReplyReplicas(c, o, o->ext->lease_until_ms - server.monotime);
}

void getReplicasCommand(client *c) { getReplicasOne(c, c->argv[1]); }

void batchGetReplicasCommand(client *c) {
    addReplyArrayLen(c, c->argc - 1);
    for (int j = 1; j < c->argc; j++) getReplicasOne(c, c->argv[j]);
}

/* ---- holds ---------------------------------------------------------------
 *
 * HOLD.REPLICAS is BATCH.GET.REPLICAS for a reader that reads the bytes in
 * place for as long as it likes (libmooncake's views: Mooncake's
 * get_buffer handles without a copy) instead of copying them before a
 * deadline: each grant is a hold (store.c), which ends by HOLD.RELEASE or
 * when the connection closes (then lease-ttl more). A connection's holds
 * are found by key: a dict of key -> its holds, oldest first, each a small
 * record; a grant and a release are O(1) (DEBUG VISITS `leases` counts the
 * records looked at). Bounded: CLIENT_MAX_HOLDS per connection; past that
 * a key is refused (-LIMIT) and nothing is held, so a reader that never
 * releases cannot pin the pool through one connection. (Many connections
 * can, as many hard pins can: holds are for the store's own clients, and
 * ACL keeps others off them as it does off PIN.) */
#define CLIENT_MAX_HOLDS 4096

typedef struct clientHold {
    storeObj *o;
    struct clientHold *next;
} clientHold;

typedef struct holdChain {
    clientHold *oldest, *newest;
} holdChain;

typedef struct clientHolds {
    dict *bykey; /* key (owned) -> holdChain */
    int n;
} clientHolds;

static void holdKeyFree(void *key) { sdsfree(key); }
static dictType holdKeysType = {leaseKeyHash, leaseKeyCompare, holdKeyFree, NULL};

static void clientHoldAdd(client *c, sds key, storeObj *o) {
    clientHolds *ch = c->holds;
    if (ch == NULL) {
        ch = c->holds = zcalloc(sizeof(*ch));
        ch->bykey = dictCreate(&holdKeysType);
    }
    clientHold *h = zmalloc(sizeof(*h));
    h->o = o;
    h->next = NULL;
    dictEntry *existing, *de = dictAddRaw(ch->bykey, key, &existing);
    if (de) {
        de->key = sdsdup(key);
        holdChain *hc = zmalloc(sizeof(*hc));
        hc->oldest = hc->newest = h;
        de->val = hc;
    } else {
        holdChain *hc = dictGetVal(existing);
        hc->newest->next = h;
        hc->newest = h;
    }
    serverVisit(VISITS_LEASES, 1);
    ch->n++;
    storeHoldAdd(o);
    ss.holds_granted++;
}

/* Ends this connection's oldest hold on key; 0 if it has none. */
static int clientHoldRelease(client *c, sds key) {
    clientHolds *ch = c->holds;
    serverVisit(VISITS_LEASES, 1);
    dictEntry *de = ch ? dictFind(ch->bykey, key) : NULL;
    if (de == NULL) return 0;
    holdChain *hc = dictGetVal(de);
    clientHold *h = hc->oldest;
    hc->oldest = h->next;
    if (hc->oldest == NULL) {
        zfree(hc);
        dictDelete(ch->bykey, key);
    }
    storeHoldDrop(h->o, 0);
    zfree(h);
    ch->n--;
    ss.holds_released++;
    return 1;
}

/* The connection closed: each hold becomes a lease of lease-ttl (its
 * process may still be reading the bytes). */
void clientHoldsFree(client *c) {
    clientHolds *ch = c->holds;
    if (ch == NULL) return;
    dictIterator *it = dictGetSafeIterator(ch->bykey);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        holdChain *hc = dictGetVal(de);
        for (clientHold *h = hc->oldest, *next; h; h = next) {
            next = h->next;
            serverVisit(VISITS_LEASES, 1);
            storeHoldDrop(h->o, server.lease_ttl);
            zfree(h);
        }
        zfree(hc);
    }
    dictReleaseIterator(it);
    dictRelease(ch->bykey);
    zfree(ch);
    c->holds = NULL;
}

int clientHoldCount(const client *c) { return c->holds ? c->holds->n : 0; }

/* HOLD.REPLICAS key [key ...]: BATCH.GET.REPLICAS's reply, each key found
 * held by this connection. The lease-ms element is lease-ttl: how long the
 * bytes stay if the connection closes now. */
void holdReplicasCommand(client *c) {
    addReplyArrayLen(c, c->argc - 1);
    for (int j = 1; j < c->argc; j++) {
        sds key = c->argv[j];
        storeObj *o = replicasLookup(c, key);
        if (o == NULL) continue;
        if (clientHoldCount(c) >= CLIENT_MAX_HOLDS) {
            ss.holds_limited++;
            addReplyErrorFormat(c, "-LIMIT this connection holds %d objects: end some first (HOLD.RELEASE)",
                                CLIENT_MAX_HOLDS);
            continue;
        }
        ss.get_hits++;
        clientHoldAdd(c, key, o);
        addReplyReplicas(c, o, server.lease_ttl);
    }
}

/* HOLD.RELEASE key [key ...]: ends one hold of this connection per key (the
 * oldest); the number ended. */
void holdReleaseCommand(client *c) {
    long long released = 0;
    for (int j = 1; j < c->argc; j++) released += clientHoldRelease(c, c->argv[j]);
    addReplyLongLong(c, released);
}

/* One key of BATCH.EXISTS: 1 if a readable version is there. Without a
 * lease it is EXISTS (no LRU touch, a miss is a keymiss); with one it is a
 * read, as GET.REPLICAS is: the key is made young and granted a lease. */
static int existsOne(client *c, sds key, int lease) {
    if (!lease) {
        if (storeLookupWrite(key)) return 1;
        notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", key);
        return 0;
    }
    storeObj *o = storeLookupRead(key);
    if (o == NULL) return 0;
    grantLease(c, key, o, server.lease_ttl);
    return 1;
}

/* BATCH.EXISTS numkeys key [key ...] [PREFIX] [LEASE]: one integer per key,
 * or with PREFIX the number of leading keys present (the keys after the
 * first miss are not looked at, so they get no lease and no event). */
void batchExistsCommand(client *c) {
    long long n;
    if (getLongLongFromObjectOrReply(c, c->argv[1], &n, NULL) != C_OK) return;
    if (n < 1 || n > c->argc - 2) {
        addReplyError(c, "ERR numkeys must be at least 1 and at most the number of keys given");
        return;
    }
    int prefix = 0, lease = 0;
    for (int j = 2 + (int)n; j < c->argc; j++) {
        if (!strcasecmp(c->argv[j], "prefix")) {
            prefix = 1;
        } else if (!strcasecmp(c->argv[j], "lease")) {
            lease = 1;
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    if (prefix) {
        long long i = 0;
        while (i < n && existsOne(c, c->argv[2 + i], lease)) i++;
        addReplyLongLong(c, i);
        return;
    }
    addReplyArrayLen(c, n);
    for (long long i = 0; i < n; i++) addReplyLongLong(c, existsOne(c, c->argv[2 + i], lease));
}

void leaseCommand(client *c) {
    long long ms;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &ms, NULL) != C_OK) return;
    if (ms < 0 || ms > MAX_LEASE_MS) {
        addReplyErrorFormat(c, "ERR lease must be between 0 and %lld ms", MAX_LEASE_MS);
        return;
    }
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o == NULL) {
        addReplyNull(c);
        return;
    }
    grantLease(NULL, c->argv[1], o, ms); /* asked for a duration: held to its end */
    addReplyLongLong(c, o->ext->lease_until_ms - server.monotime);
}

/* ---- pins ---------------------------------------------------------------- */

/* The complete version if any, else the pending one: a writer may pin what
 * it is writing. */
static storeObj *lookupAnyVersion(sds key) {
    storeObj *o = storeLookupWrite(key);
    return o ? o : storePendingLookup(key);
}

void pinCommand(client *c) {
    long long ms = storeSoftPinBound(server.soft_pin_ttl);
    int hard = 0;
    if (c->argc == 3) {
        if (!strcasecmp(c->argv[2], "hard")) {
            hard = 1;
        } else {
            char why[128];
            if (getLongLongFromObjectOrReply(c, c->argv[2], &ms, NULL) != C_OK) return;
            if (storeSoftPinInvalid(ms, why, sizeof(why)) != NULL) {
                addReplyError(c, why);
                return;
            }
        }
    } else if (c->argc != 2) {
        addReplyErrorSyntax(c);
        return;
    }
    storeObj *o = lookupAnyVersion(c->argv[1]);
    if (o == NULL) {
        addReplyError(c, "-NOKEY no such key");
        return;
    }
    if (hard) storeObjSetHardPin(o, 1);
    else storeObjGetExt(o)->softpin_until_ms = addSaturate(server.monotime, ms);
    signalKeyStateChanged(c->argv[1]); /* a pin is kept with the value (DUMP's payload) */
    addReplyOk(c);
}

void unpinCommand(client *c) {
    storeObj *o = lookupAnyVersion(c->argv[1]);
    if (o == NULL) {
        addReplyError(c, "-NOKEY no such key");
        return;
    }
    storeObjSetHardPin(o, 0);
    if (o->ext) o->ext->softpin_until_ms = 0;
    signalKeyStateChanged(c->argv[1]);
    addReplyOk(c);
}

/* ---- removal and inspection ---------------------------------------------- */

void removeCommand(client *c) {
    long long removed = 0;
    for (int j = 1; j < c->argc; j++) {
        int any = storeDelete(c->argv[j]);
        if (any) notifyKeyspaceEvent(NOTIFY_GENERIC, "del", c->argv[j]);
        storeObj *p = storePendingUnlink(c->argv[j]);
        if (p) {
            storePendingAbandon(p);
            any = 1;
        }
        removed += any;
    }
    addReplyLongLong(c, removed);
}

/* Two clocks for one time, as an object's creation is both: an absolute
 * time (OBJECT.INFO's created, what the log keeps: the wall clock's) and
 * an age that decides something (REPLICA.CLEAR leaves objects younger
 * than lease-ttl alone), which a wall-clock step must not shorten or
 * stretch. (Declared in store.h; kept here, beside REPLICA.CLEAR, its one
 * reader, so store.c stays under the style's ~1500 lines.) The ext has no room for a second 64-bit time (its 80-byte
 * class), so the monotonic one is 32 bits in the place a removed version
 * keeps its waiting-list slot: exact for ages under 49 days, and an age
 * by the wall clock of over 24 days is taken as old whatever the 32 bits
 * say (they wrap). A time that comes from elsewhere (the log, a DUMP) is
 * aged by the wall clock once, here; from then on by the monotonic one. */
void storeObjSetCreated(storeObj *o, long long wall_ms) {
    storeObjExt *ext = storeObjGetExt(o);
    ext->created_ms = wall_ms > 0 ? wall_ms : 0;
    long long age = wall_ms > 0 && wall_ms < server.mstime ? server.mstime - wall_ms : 0;
    ext->born_mono = (uint32_t)(server.monotime - age);
}

int storeObjYoung(const storeObj *o, long long ms) {
    const storeObjExt *ext = o->ext;
    if (ext == NULL || ext->created_ms == 0 || o->state != OBJ_COMPLETE || (o->flags & OBJ_FLAG_DEFERRED)) return 0;
    if (server.mstime - ext->created_ms > (1LL << 31)) return 0; /* old, whatever the 32 bits say */
    uint32_t age = (uint32_t)server.monotime - ext->born_mono;
    return (long long)age < ms;
}

/* REPLICA.CLEAR numkeys key [key ...] [SEGMENT seg]: Mooncake's
 * batch_replica_clear, for a client giving back memory it no longer wants
 * used: each key whose object is complete, not being read (no lease in
 * force) and older than lease-ttl loses its replicas -- all of them, or with SEGMENT those in that
 * segment. A replica is dropped with its object: an object that keeps
 * replicas elsewhere is left alone (a version is immutable and its
 * extents are shared with readers' replies, so one replica is not taken
 * out from under it). Answers 1 or 0 per key, as BATCH.EXISTS does, so
 * that a client can split a batch over nodes and slots and put the
 * answers back in order. */
void replicaClearCommand(client *c) {
    long long n;
    if (getLongLongFromObjectOrReply(c, c->argv[1], &n, NULL) != C_OK) return;
    if (n < 1 || n > c->argc - 2) {
        addReplyError(c, "ERR numkeys must be at least 1 and at most the number of keys given");
        return;
    }
    segment *only = NULL;
    int j = 2 + (int)n, none = 0;
    if (j < c->argc) {
        if (j + 2 != c->argc || strcasecmp(c->argv[j], "segment")) {
            addReplyErrorSyntax(c);
            return;
        }
        only = aclLookupSegment(c, c->argv[j + 1]);
        none = only == NULL || !aclSegmentVisible(c, only); /* nothing of this caller's is there */
    }
    addReplyArrayLen(c, n);
    for (long long i = 0; i < n; i++) {
        sds key = c->argv[2 + i];
        storeObj *o = none ? NULL : storeLookupWrite(key);
        /* A new object counts as read for lease-ttl after its put, as
         * Mooncake's put leaves it leased: what was just written is not
         * given back before its writer's readers can get to it. */
        int young = o && storeObjYoung(o, server.lease_ttl); /* by the monotonic clock */
        int clear = o && o->state == OBJ_COMPLETE && !storeObjLeased(o) && !young;
        if (clear && only) {
            int there = 0, elsewhere = 0;
            for (int r = 0; r < o->nreplicas; r++) {
                if (storeReplicaSegment(storeObjReplica(o, r)) == only) there++;
                else elsewhere++;
            }
            clear = there && !elsewhere;
        }
        if (clear && storeDelete(key)) {
            notifyKeyspaceEvent(NOTIFY_GENERIC, "del", key);
            addReplyLongLong(c, 1);
        } else {
            addReplyLongLong(c, 0); /* a key named twice: gone by its second time */
        }
    }
}

/* REMOVE.ALL by a tenant (a user without allkeys): only the keys it may
 * write go, so the one call that names no key cannot reach into another
 * tenant's objects. The keys are copied first: removing frees them. */
long long removeAllWritable(client *c) {
    size_t cap = 64, n = 0;
    /* The complete keys from the index of the tenant's own (tenantkeys.c),
     * not a walk of everyone's; pending puts are walked. */
    sds *keys = tenantKeysCollect(c->user, ACL_WRITE, &n);
    int from = keys ? 1 : 0;
    if (keys) cap = n ? n : 1;
    else keys = zmalloc(cap * sizeof(sds));
    dict *sets[2] = {server.keys, server.pending};
    for (int d = from; d < 2; d++) {
        dictIterator *it = dictGetSafeIterator(sets[d]);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            sds k = de->key;
            if (d == 0) tenantKeysWalked++; /* a tenant the index does not cover */
            if (!aclUserCanAccessKey(c->user, k, sdslen(k), ACL_WRITE)) continue;
            if (d == 1 && dictFind(server.keys, k) != NULL) continue; /* counted with its complete version */
            if (n == cap) keys = zrealloc(keys, (cap *= 2) * sizeof(sds));
            keys[n++] = sdsdup(k);
        }
        dictReleaseIterator(it);
    }
    long long removed = 0;
    for (size_t i = 0; i < n; i++) {
        int any = storeDelete(keys[i]);
        storeObj *p = storePendingUnlink(keys[i]);
        if (p) {
            storePendingAbandon(p);
            any = 1;
        }
        removed += any;
        sdsfree(keys[i]);
    }
    zfree(keys);
    return removed;
}

void removeAllCommand(client *c) {
    if (aclUserRestricted(c->user)) {
        addReplyLongLong(c, removeAllWritable(c));
        return;
    }
    /* Keys, counted once whether they have a complete version, a pending
     * one, or both (as REMOVE counts them). */
    long long n = (long long)storeSize();
    dictIterator *it = dictGetSafeIterator(server.pending);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL)
        if (dictFind(server.keys, de->key) == NULL) n++;
    dictReleaseIterator(it);
    storeFlush();
    addReplyLongLong(c, n);
}

void objectInfoCommand(client *c) {
    sds key = c->argv[1];
    storeObj *o = storeLookupWrite(key); /* looking must not touch: last-access-ms is what it reports */
    storeObj *p = storePendingLookup(key); /* NULL too if its segments are gone */
    if (!o) o = p;
    if (!o) {
        addReplyNull(c);
        return;
    }
    storeObjExt *ext = o->ext;
    long long lease = ext && ext->lease_until_ms > server.monotime ? ext->lease_until_ms - server.monotime : 0;
    const char *pin = (o->flags & OBJ_FLAG_HARDPIN) ? "hard"
                      : (ext && ext->softpin_until_ms > server.monotime) ? "soft" : "none";
    addReplyMapLen(c, 12);
    addReplyBulkCString(c, "state");
    addReplyBulkCString(c, o->state == OBJ_PENDING ? "pending" : "complete");
    addReplyBulkCString(c, "size");
    addReplyLongLong(c, (long long)o->len);
    addReplyBulkCString(c, "replicas");
    addReplyArrayLen(c, o->nreplicas);
    for (int i = 0; i < o->nreplicas; i++) addReplyReplica(c, o, i);
    addReplyBulkCString(c, "lease-ms");
    addReplyLongLong(c, lease);
    addReplyBulkCString(c, "holds");
    addReplyLongLong(c, ext ? ext->lease_holds : 0);
    addReplyBulkCString(c, "pin");
    addReplyBulkCString(c, pin);
    addReplyBulkCString(c, "pin-ms");
    addReplyLongLong(c, ext && ext->softpin_until_ms > server.monotime ? ext->softpin_until_ms - server.monotime : 0);
    addReplyBulkCString(c, "created");
    addReplyLongLong(c, storeObjCreatedMs(o));
    addReplyBulkCString(c, "last-access-ms");
    addReplyLongLong(c, (long long)(uint32_t)(storeLruClock() - o->lru));
    addReplyBulkCString(c, "checksum");
    if (ext && ext->checksum) addReplyBulk(c, ext->checksum, sdslen(ext->checksum));
    else addReplyNull(c);
    addReplyBulkCString(c, "pending");
    addReplyLongLong(c, p != NULL);
    addReplyBulkCString(c, "refcount");
    addReplyLongLong(c, o->refcount);
}
