/* store.c -- keys, value objects, expiry and eviction over segment memory.
 *
 * Layout. Keys live in an incrementally rehashed dict (dict.c), sds key ->
 * storeObj*. Expiry times live in a second dict that shares the key sds, so
 * keys without a TTL cost nothing extra and active expiry samples only keys
 * that can expire. Value bytes live in a segment (the server's pool) at an
 * extent handed out by the segment's offset allocator; the storeObj header
 * (48 bytes) is all the heap a value costs.
 *
 * Immutability. An object is never written after it becomes visible. SET on
 * an existing key builds a new object and swaps the dict entry; the old one
 * is released when its last reference (the keyspace or a reply still being
 * sent from the pool) goes. So a slow reader can never see torn bytes, and
 * no command waits for a reader.
 *
 * The one exception is a version no one else can be reading: referenced
 * only by the keyspace (no reply, SEG.READ, MIGRATE or second key holds
 * it), under no running lease (no GET.REPLICAS reader was given its
 * address), one replica in our own pool, and the new bytes exactly as many
 * as the old. There INCR writes the digits over the old ones, as Redis
 * changes its integer in place (storeObjWritableInPlace): a new version
 * per INCR cost an allocation, a free and a cache miss on the allocator's
 * node each, 0.74x Redis's pipelined INCR. Nothing outside the server can
 * tell the difference: every reader that could see the old bytes holds a
 * reference or a lease, which rules the shortcut out. SET of a value as
 * long as the old one takes the same shortcut (t_string.c) where the old
 * version carries nothing a new one would not (a pin, a checksum): a SET
 * that replaced its key's small value paid an allocation, a free with its
 * memset, and a cache miss on the allocator's node (7% of the server in
 * pipelined SETs over 100k keys, perf).
 *
 * Leases. A reader that got replica addresses (GET.REPLICAS) holds a lease
 * on that version; when the last reference goes while a lease is still
 * running, the object waits on a deferred-free list and its extents are
 * reused only after the lease ends (storeDeferredFreeCron), so a remote
 * reader's one-sided read can never see a newer value's bytes.
 *
 * Changes. Every change of a key (a write, a delete for any reason, a TTL
 * set or removed, a flush) is signalled from here to WATCH (multi.c), so
 * the commands above need not know about transactions. The signal is one
 * branch while nobody WATCHes.
 *
 * Events. Every change of the keyspace passes through storeSet or
 * deleteKey, so that is where the store's events (notify.c: put, remove,
 * expired, evicted, lost, flush) and Redis's expired, evicted, new and
 * keymiss notifications are emitted: whatever command, cron or eviction
 * caused the change, a subscriber hears of it. Off, each costs one test.
 *
 * Accounting. Every pool byte is a value's in the keyspace, a pending
 * put's, an unlinked version's waiting for its lease, being zeroed, or
 * free: each segment keeps the first three as counters, moved as an object
 * moves between the tables (INFO store_pool_values/_pending/_deferred).
 * They are what eviction consults before evicting (storeEvictionCouldFit:
 * a write that could not fit evicts nothing) and what lets a test check
 * that no byte is lost, whatever clients do.
 *
 * Pending puts. A put no one will end (its connection closed, or older
 * than put-timeout + put-release-timeout) is given back by a sweep of the
 * pending table (storePendingCron), not by whoever touches its key next.
 *
 * Replicas. On a replica (storeReplicaMode, set by replication_failover.c) the
 * keyspace changes only as its primary's stream says, as Redis's: a key
 * past its TTL reads as missing but stays until the primary's DEL comes
 * (no lazy or active expiry of its own), and nothing is evicted (a record
 * that does not fit drops the link, which the replica's log says). Two
 * clocks deciding differently would otherwise make the copies differ.
 *
 * Eviction lives in evict.c.
 */
#include "store.h"
#include "tenantkeys.h"
#include "lazyfree.h"
#include "cluster.h"
#include "notify.h"

#include <stdio.h>
#include <limits.h>
#include <string.h>

#include "multi.h"
#include "server.h"
#include "util.h"
#include "zerofree.h"
#include "zmalloc.h"

#define EXPIRE_SAMPLE 20

static struct {
    uint64_t bytes;         /* sum of value lengths in the keyspace */
    uint64_t keybytes;      /* heap held by key strings */
    uint64_t oom;
    uint64_t lease_expiries;  /* leases that ended while holding back space */
    uint64_t exts;            /* objects with an extension */
    uint64_t extkeybytes;     /* heap held by their recorded keys (store.h) */
    size_t ndeferred;       /* unlinked, unreferenced, but leased: on the wheel below */
    uint64_t pending_bytes;   /* sum of the pending puts' sizes */
    uint64_t pending_reclaimed;
} st;

/* Removed versions waiting for their lease wait on a timing wheel: a
 * bucket per DEFER_TICK_MS of deadline, DEFER_WHEEL of them (a revolution of
 * about 65 s), so the cron looks only at the buckets whose time has come,
 * and a version is looked at about once (a lease longer than a revolution:
 * once per revolution) -- never the whole list every tick. A release that
 * ends a lease early frees its version at once: the version knows its
 * bucket and place (deferred_at: bucket << 22 | index). */
#define DEFER_WHEEL 1024
#define DEFER_TICK_MS 64
#define DEFER_INDEX_BITS 22
typedef struct deferBucket {
    storeObj **v;
    uint32_t n, cap;
} deferBucket;
static deferBucket deferWheel[DEFER_WHEEL];
static long long deferTick = -1; /* the last tick the cron has done */
static size_t deferSlots;        /* the buckets' capacity, for the heap count */

/* The tick at whose start the lease is over (rounded up: a version looked
 * at in its bucket's tick is never still leased, unless its lease moved). */
static long long deferTickOf(const storeObj *o) {
    if (o->ext->lease_holds) /* held: no deadline; looked at once a revolution, re-filed when the hold ends */
        return (deferTick >= 0 ? deferTick : server.monotime / DEFER_TICK_MS) + DEFER_WHEEL - 1;
    long long until = o->ext->lease_until_ms; /* up to LLONG_MAX (lease-ttl is): no "+ DEFER_TICK_MS - 1" */
    return until / DEFER_TICK_MS + (until % DEFER_TICK_MS != 0);
}

static void deferAdd(storeObj *o) {
    long long tick = deferTickOf(o);
    if (deferTick >= 0 && tick <= deferTick) tick = deferTick + 1; /* its bucket was done: the next one */
    uint32_t b = (uint32_t)(tick % DEFER_WHEEL);
    deferBucket *bk = &deferWheel[b];
    if (bk->n == bk->cap) {
        deferSlots -= bk->cap;
        bk->cap = bk->cap ? bk->cap * 2 : 16;
        bk->v = zrealloc(bk->v, sizeof(storeObj *) * bk->cap);
        deferSlots += bk->cap;
    }
    serverAssert(bk->n < (1u << DEFER_INDEX_BITS));
    o->ext->deferred_at = b << DEFER_INDEX_BITS | bk->n;
    bk->v[bk->n++] = o;
    st.ndeferred++;
}

static void deferRemove(storeObj *o) {
    uint32_t b = o->ext->deferred_at >> DEFER_INDEX_BITS;
    uint32_t i = o->ext->deferred_at & ((1u << DEFER_INDEX_BITS) - 1);
    deferBucket *bk = &deferWheel[b];
    serverAssert(b < DEFER_WHEEL && i < bk->n && bk->v[i] == o);
    bk->v[i] = bk->v[--bk->n];
    if (i < bk->n) bk->v[i]->ext->deferred_at = b << DEFER_INDEX_BITS | i;
    st.ndeferred--;
    if (bk->n == 0 && bk->cap > 64) { /* a burst does not keep its array */
        deferSlots -= bk->cap;
        zfree(bk->v);
        bk->v = NULL;
        bk->cap = 0;
    }
}

/* fn on every waiting version (for the rare callers that need them all). */
static void deferEach(void (*fn)(storeObj *, void *), void *ctx) {
    for (int b = 0; b < DEFER_WHEEL; b++)
        for (uint32_t i = 0; i < deferWheel[b].n; i++) fn(deferWheel[b].v[i], ctx);
}

/* What the dataset may still grow by before maxmemory's next full check
 * (storeMakeRoomForDataset). */
static struct {
    uint64_t left;
    long long limit;    /* the maxmemory it was computed for */
} headroom;

/* ---- who holds the pool's bytes ---------------------------------------- */

/* Each segment counts its extents' bytes by whose they are (segment.h):
 * values in the keyspace, of those hard-pinned, pending puts, unlinked
 * versions waiting. An object is counted under one heading at a time, as
 * it moves between the keyspace, the pending table and the deferred list,
 * each move one call here: a few additions per write, no scan. A replica
 * whose segment went away is skipped both ways (its counts went with it). */
enum { ACCT_VALUE, ACCT_PENDING, ACCT_DEFERRED };

static void accountSlow(storeObj *o, int what, int sign);

/* Every replica's extent is len rounded up to the granule: the allocator
 * splits exactly (alloc.c), so its node need not be read. The common case
 * (one replica, in the pool, no pin: every SET value) is a few
 * instructions inline; the rest loops. */
static inline void account(storeObj *o, int what, int sign) {
    if (o->nreplicas == 0) return;
    if (what == ACCT_VALUE && o->nreplicas == 1 && !(o->flags & OBJ_FLAG_HARDPIN) && o->r.segslot == 0 &&
        server.self->gen == o->r.seggen && o->r.handle != ALLOC_NONE) {
        uint64_t b = (o->len + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1);
        if (sign > 0) server.self->value_bytes += b;
        else server.self->value_bytes -= b;
        return;
    }
    accountSlow(o, what, sign);
}

static void accountSlow(storeObj *o, int what, int sign) {
    uint64_t b = (o->len + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1);
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *r = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(r);
        if (seg == NULL || r->handle == ALLOC_NONE) continue;
        uint64_t *f = what == ACCT_VALUE ? &seg->value_bytes
                      : what == ACCT_PENDING ? &seg->pending_bytes : &seg->deferred_bytes;
        if (sign > 0) *f += b;
        else *f -= b;
        if (what == ACCT_VALUE && (o->flags & OBJ_FLAG_HARDPIN)) {
            if (sign > 0) seg->hardpin_bytes += b;
            else seg->hardpin_bytes -= b;
        }
    }
}

/* ---- dict types ---------------------------------------------------------- */

static uint64_t keyHash(const void *key) { return storeKeyHashBuf(key, sdslen((sds)key)); }

static int keyCompare(const void *a, const void *b) {
    size_t la = sdslen((sds)a), lb = sdslen((sds)b);
    return la == lb && memcmp(a, b, la) == 0;
}

static void keyDestructor(void *key) {
    st.keybytes -= sdsAllocSize(key);
    sdsfree(key);
}

static void valDestructor(void *val) {
    storeObj *o = val;
    st.bytes -= o->len;
    account(o, ACCT_VALUE, -1);
    if (o->refcount > 1) o->flags |= OBJ_FLAG_UNLINKED; /* a wall until freed (evict.c) */
    storeObjDecrRef(o);
}

static dictType keyspaceType = {keyHash, keyCompare, keyDestructor, valDestructor};
static void pendingKeyDestructor(void *key) { sdsfree(key); }
static void pendingLeave(storeObj *o);
/* NULL when storePendingUnlink took the object out first. */
static void pendingValDestructor(void *val) {
    if (val == NULL) return;
    pendingLeave(val);
    storeObjDecrRef(val);
}
static dictType pendingType = {keyHash, keyCompare, pendingKeyDestructor, pendingValDestructor};
static dictType expiresType = {keyHash, keyCompare, NULL, NULL};

/* ---- objects ------------------------------------------------------------- */

/* An object's last access (o->lru), 32 bits of ms: evict.c. The loop's
 * cached clock, not one read per access (a gettimeofday per GET was 4% of
 * a pipelined GET profile), and the monotonic one: an idle time is an age.
 * On the wall clock a step back made every object touched before it look
 * accessed after every later one (evict.c compares signed 32-bit ages),
 * so the LRU evicted the most recently used first for the step's length,
 * and OBJECT IDLETIME said 49 days. */
static inline uint32_t lruClock(void) { return (uint32_t)server.monotime; }

uint32_t storeLruClock(void) { return lruClock(); }

char storeEmptyValue[1];

/* 48 bytes: every value has one, and intval lives in what was padding. */
_Static_assert(sizeof(storeObj) == 48, "storeObj grew");
_Static_assert(sizeof(storeObjExt) == 80, "storeObjExt grew past its 80-byte jemalloc class");

storeObj *storeObjNew(uint64_t len) {
    storeObj *o = zmalloc(sizeof(*o));
    o->len = len;
    o->r.offset = 0;
    o->r.handle = ALLOC_NONE;
    o->r.segslot = 0;
    o->r.seggen = 0;
    o->refcount = 1;
    o->lru = lruClock();
    o->state = OBJ_COMPLETE;
    o->nreplicas = 0;
    o->flags = 0;
    o->unused = 0;
    o->intval = 0;
    o->ext = NULL;
    return o;
}

storeObjExt *storeObjGetExt(storeObj *o) {
    if (o->ext == NULL) {
        o->ext = zcalloc(sizeof(storeObjExt)); /* created_ms 0: unknown (a SET value) */
        st.exts++;
        /* A read (GET.REPLICAS' lease) may add one: maxmemory's headroom
         * counts it, though no write command paid for it. */
        headroom.left = headroom.left > sizeof(storeObjExt) ? headroom.left - sizeof(storeObjExt) : 0;
    }
    return o->ext;
}

void storeObjSetKey(storeObj *o, sds key) {
    storeObjExt *ext = storeObjGetExt(o);
    if (ext->key) st.extkeybytes -= sdsAllocSize(ext->key);
    sdsfree(ext->key);
    ext->key = sdsdup(key);
    st.extkeybytes += sdsAllocSize(ext->key);
}

void storeObjAddReplica(storeObj *o, segment *seg, uint32_t handle, uint64_t offset) {
    serverAssert(o->nreplicas < STORE_MAX_REPLICAS);
    if (o->nreplicas > 0) {
        storeObjExt *ext = storeObjGetExt(o);
        ext->more = zrealloc(ext->more, sizeof(storeReplica) * o->nreplicas);
    }
    storeReplica *r = storeObjReplica(o, o->nreplicas++);
    r->offset = offset;
    r->handle = handle;
    r->segslot = (uint16_t)seg->slot;
    r->seggen = seg->gen;
    allocSetUser(seg->alloc, handle, o); /* the data plane maps bytes back to o */
    if (seg == server.self) { /* see storeMakeRoomForDataset */
        uint64_t b = (o->len + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1);
        if (server.maxmemory == 0) headroom.limit = 0; /* not kept up while off: sum again when on */
        else headroom.left = headroom.left > b ? headroom.left - b : 0;
    }
}

/* An allocation that fails evicts (policy permitting) until it fits. The
 * loop ends: every round either evicts an object or gives up. A value
 * larger than the whole segment gives up at once instead of emptying it. */
storeObj *storeObjCreate(size_t len) { return storeObjCreateFor(len, NULL); }

sds storeEvictProtected;

storeObj *storeObjCreateFor(size_t len, sds key) {
    segment *seg = server.self;
    uint64_t offset = 0;
    if (len == 0) return storeObjNew(0); /* SET k "": no extent */
    if (!segmentCouldHold(seg, len)) goto oom;
    int checked = 0;
    for (;;) {
        uint32_t h = allocAlloc(seg->alloc, len, &offset);
        if (h != ALLOC_NONE) {
            storeEvictProtected = NULL;
            storeObj *o = storeObjNew(len);
            storeObjAddReplica(o, seg, h, offset);
            return o;
        }
        if (zerofreeMakeRoom()) continue; /* freed space still being zeroed first */
        if (storeLazyFreeMakeRoom()) continue; /* a FLUSHALL ASYNC's objects, before any eviction */
        /* Nor under CLIENT PAUSE (networking.c: the dataset holds still;
         * the writes that allocate wait for its end). */
        if (server.evict_policy == EVICT_NOEVICTION || storeReplicaMode || pauseHoldsDataset()) break;
        /* A write that would fail anyway evicts nothing (see evict.c). */
        storeEvictProtected = key;
        if (!checked && !storeEvictionCouldFit(seg, len)) break;
        checked = 1;
        if (!evictOne(seg)) break;
    }
    storeEvictProtected = NULL;
oom:
    st.oom++;
    storeLogNoSpace(len, "a value");
    return NULL;
}

storeObj *storeObjCreateForFullWrite(size_t len, sds key) {
    uint64_t offset;
    uint32_t h = len ? zerofreeTakeDirty(server.self, len, &offset) : ALLOC_NONE;
    if (h == ALLOC_NONE) return storeObjCreateFor(len, key);
    storeObj *o = storeObjNew(len);
    storeObjAddReplica(o, server.self, h, offset);
    return o;
}

storeObj *storeObjCreateFrom(const void *p, size_t len) {
    storeObj *o = storeObjCreate(len);
    if (o) memcpy(storeObjPtr(o), p, len);
    return o;
}

char *storeObjWritableInPlace(storeObj *o, uint64_t len) {
    if (o->refcount != 1 || o->len != len || o->nreplicas != 1 || o->state != OBJ_COMPLETE || storeObjLeased(o))
        return NULL;
    if (storeReplicaSegment(&o->r) != server.self) return NULL;
    return segmentPtr(server.self, o->r.offset);
}

/* What storeSet says of a changed key, for a value changed in place. */
void storeObjChangedInPlace(sds key, storeObj *o) {
    o->lru = lruClock(); /* as the new version storeSet would have put there */
    signalModifiedKey(key);
    notifyStoreEvent("put", key, o);
}

/* The TTL of the key whose keyspace string is kkey (the expires table
 * shares it): set, or changed. */
static void putExpire(sds kkey, long long when_ms) {
    dictEntry *existing;
    dictEntry *ee = dictAddRaw(server.expires, kkey, &existing);
    if (ee) ee->val = (void *)(intptr_t)when_ms;
    else existing->val = (void *)(intptr_t)when_ms;
}

char *storeObjReplaceableInPlace(storeObj *o, uint64_t len) {
    if (o->flags & OBJ_FLAG_HARDPIN) return NULL;
    const storeObjExt *x = o->ext; /* a lease that ended may leave one behind */
    if (x && (x->created_ms || x->softpin_until_ms || x->checksum || x->key || x->put_owner)) return NULL;
    return storeObjWritableInPlace(o, len);
}

void storeObjReplacedInPlace(sds key, storeObj *o, long long expire_ms, int keepttl) {
    if (expire_ms >= 0) putExpire(dictFind(server.keys, key)->key, expire_ms);
    else if (!keepttl) dictDelete(server.expires, key);
    storeObjChangedInPlace(key, o);
}

/* Redis decides at write time (an integer of up to 20 characters that fits
 * a long is "int", up to 44 bytes "embstr"); the bytes here are immutable,
 * so the same test at read time gives the same answer, and the two flags
 * cover the values Redis built otherwise. */
const char *storeObjEncoding(storeObj *o) {
    if (storeObjIsStore(o) || (o->flags & OBJ_FLAG_ENC_RAW)) return "raw";
    if (o->flags & OBJ_FLAG_INTVAL) return "int"; /* INCR's result, as Redis */
    if (!(o->flags & OBJ_FLAG_ENC_NOINT) && o->len <= 20) {
        const char *p = storeObjLocalPtr(o);
        long long v;
        if (p && string2ll(p, (size_t)o->len, &v)) return "int";
    }
    return o->len <= 44 ? "embstr" : "raw";
}

char *storeObjLocalPtr(storeObj *o) {
    if (o->len == 0) return storeEmptyValue;
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *r = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(r);
        if (seg && seg->mem) return segmentPtr(seg, r->offset);
    }
    return NULL;
}

/* An operator should see why puts fail or objects vanish, without a log
 * line per put: one line per STORE_LOG_PERIOD_MS at most, counting what
 * it stood for. */
#define STORE_LOG_PERIOD_MS 10000

static struct {
    long long last_ms;
    long long suppressed;
} nospaceLog;

static void addLen(storeObj *o, void *ctx) { *(uint64_t *)ctx += o->len; }

void storeLogNoSpace(uint64_t size, const char *what) {
    if (nospaceLog.last_ms && server.monotime - nospaceLog.last_ms < STORE_LOG_PERIOD_MS) {
        nospaceLog.suppressed++;
        return;
    }
    allocStats ps;
    allocGetStats(server.self->alloc, &ps);
    uint64_t deferred_bytes = 0;
    deferEach(addLen, &deferred_bytes);
    char hsize[32], hused[32], hlimit[32], hdef[32];
    bytesToHuman(hsize, sizeof(hsize), size);
    bytesToHuman(hused, sizeof(hused), ps.used);
    bytesToHuman(hlimit, sizeof(hlimit), ps.limit);
    bytesToHuman(hdef, sizeof(hdef), deferred_bytes);
    serverLog(LL_WARNING,
              "No space for %s of %s (%lld more since the last such line): pool %s used of %s; %zu removed "
              "versions (%s) wait for readers' leases; evict-policy %s, which never takes leased, pending or "
              "hard-pinned objects. Readers end leases with LEASE.RELEASE (libmooncake does after each get); "
              "lease-ttl bounds the rest",
              what, hsize, nospaceLog.suppressed, hused, hlimit, st.ndeferred, hdef,
              server.evict_policy == EVICT_LRU ? "lru" : "noeviction");
    nospaceLog.last_ms = server.monotime;
    nospaceLog.suppressed = 0;
}

static uint64_t leaseEpochs; /* server-wide, so an epoch is never reused by another version */

uint64_t storeLeaseGrant(storeObj *o, long long ms, int releasable) {
    int was_wall = evictIsWall(o);
    storeObjExt *ext = storeObjGetExt(o);
    if (ext->lease_until_ms <= server.monotime) { /* no lease running: a new period */
        ext->lease_epoch = ++leaseEpochs;
        ext->lease_holders = 0;
    }
    if (!releasable) ext->lease_holders = STORE_LEASE_HELD;
    else if (ext->lease_holders != STORE_LEASE_HELD) ext->lease_holders++;
    long long until = addSaturate(server.monotime, ms);
    if (ext->lease_until_ms < until) ext->lease_until_ms = until;
    evictWallAdded(o, was_wall);
    return ext->lease_epoch;
}

int storeLeaseRelease(storeObj *o, uint64_t epoch) {
    storeObjExt *ext = o->ext;
    if (ext == NULL || ext->lease_epoch != epoch || ext->lease_until_ms <= server.monotime ||
        ext->lease_holders == STORE_LEASE_HELD || ext->lease_holders == 0)
        return 0; /* a later period, or one that must run its course */
    if (--ext->lease_holders) return 0;
    ext->lease_until_ms = server.monotime; /* ended: storeObjLeased() is false from now */
    storeWallsGone++;
    return 1;
}

static void freeObject(storeObj *o);

/* ---- put owners (store.h) ------------------------------------------------ */

static struct {
    int wanted;            /* a connection with pending puts closed: sweep now */
    unsigned long cursor;  /* of the pass in progress, 0: none */
    long long next_ms;     /* when the next periodic pass starts */
    sds *victims;
    size_t nvictims, victims_cap;
} sweep;

static void putOwnerRelease(putOwner *po) {
    if (po && --po->refs == 0) zfree(po);
}

putOwner *storePutOwnerOf(uint64_t client_id, putOwner **slot) {
    if (*slot == NULL) {
        *slot = zcalloc(sizeof(putOwner));
        (*slot)->refs = 1; /* the connection's */
        (*slot)->client_id = client_id;
    }
    return *slot;
}

void storePutOwnerGone(putOwner *po) {
    if (po == NULL) return;
    po->gone = 1;
    if (po->npending) sweep.wanted = 1;
    putOwnerRelease(po);
}

void storeLeaseEntryAdd(storeObj *o) { storeObjGetExt(o)->lease_entries++; }

int storeLeaseEntryDrop(storeObj *o, uint64_t epoch, int release) {
    int ended = release && storeLeaseRelease(o, epoch);
    if (ended && (o->flags & OBJ_FLAG_DEFERRED) && o->refcount == 0 && !storeObjLeased(o)) {
        /* Unlinked and waiting for exactly this lease: free it now, not at
         * the next cron. It knows its place on the list (a reader that
         * never released makes the list as long as lease-ttl of removals).
         * A hold (HOLD.REPLICAS) outlives the timed period: a version still
         * held stays on the list, and the last HOLD.RELEASE frees it. */
        serverVisit(VISITS_DEFERRED, 1);
        deferRemove(o);
        st.lease_expiries++;
        account(o, ACCT_DEFERRED, -1);
        freeObject(o); /* retired: this record still points here */
    }
    serverAssert(o->ext && o->ext->lease_entries > 0);
    if (--o->ext->lease_entries == 0 && (o->flags & OBJ_FLAG_RETIRED)) {
        o->flags &= (uint8_t)~OBJ_FLAG_RETIRED;
        freeObject(o); /* no extents left: frees the header */
    }
    return ended;
}

int storeObjLeased(const storeObj *o) {
    return o->ext && (o->ext->lease_until_ms > server.monotime || o->ext->lease_holds);
}

long long storeObjCreatedMs(const storeObj *o) {
    if (o->ext == NULL || o->ext->created_ms == 0) return 0;
    if (o->state != OBJ_PENDING) return o->ext->created_ms;
    return server.mstime - (server.monotime - o->ext->created_ms); /* a pending put's is monotonic */
}

long long storeLeaseEndMs(const storeObj *o) {
    if (o->ext == NULL) return 0;
    return o->ext->lease_holds ? LLONG_MAX : o->ext->lease_until_ms;
}

/* ---- holds (HOLD.REPLICAS) ------------------------------------------------
 *
 * A lease has a deadline because a reader of GET.REPLICAS copies and is
 * done. A hold is for a reader that does not copy: libmooncake's views
 * hand the engine the object's bytes where they lie (its mapping of the
 * segment), for as long as the engine keeps the handle -- Mooncake's
 * get_buffer handles, valid until freed. So a hold has no deadline: the
 * version is leased while any hold on it stands (storeObjLeased), its space
 * is not reused and it is not evicted, and it ends by HOLD.RELEASE or when
 * the connection closes, which leaves lease-ttl more (the process may still
 * be reading). Counted, not dated: a period's epoch and holders are
 * untouched, so holds and timed grants of one version do not interfere. */
static uint64_t holdsLive;

uint64_t storeHoldsLive(void) { return holdsLive; }

void storeHoldAdd(storeObj *o) {
    int was_wall = evictIsWall(o);
    storeObjExt *ext = storeObjGetExt(o);
    ext->lease_holds++;
    ext->lease_entries++; /* the connection's record points here */
    holdsLive++;
    evictWallAdded(o, was_wall);
}

void storeHoldDrop(storeObj *o, long long linger) {
    storeObjExt *ext = o->ext;
    serverAssert(ext && ext->lease_holds > 0 && ext->lease_entries > 0);
    holdsLive--;
    if (linger > 0) storeLeaseGrant(o, linger, 0);
    if (--ext->lease_holds == 0) {
        storeWallsGone++; /* its wall may end now, or at a deadline again (evict.c) */
        if ((o->flags & OBJ_FLAG_DEFERRED) && o->refcount == 0) {
            deferRemove(o);
            if (storeObjLeased(o)) {
                deferAdd(o); /* filed by its deadline now */
            } else {
                serverVisit(VISITS_DEFERRED, 1);
                st.lease_expiries++;
                account(o, ACCT_DEFERRED, -1);
                freeObject(o); /* retired: the record still points here */
            }
        }
    }
    if (--ext->lease_entries == 0 && (o->flags & OBJ_FLAG_RETIRED)) {
        o->flags &= (uint8_t)~OBJ_FLAG_RETIRED;
        freeObject(o);
    }
}

static void freeObject(storeObj *o) {
    if (o->flags & (OBJ_FLAG_DEFERRED | OBJ_FLAG_UNLINKED)) storeWallsGone++; /* a wall goes (evict.c) */
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *r = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(r);
        if (seg == NULL) continue; /* the segment and its allocator are gone */
        /* Pool space goes back zeroed, so that the next writer of it needs
         * no zeroing (zerofree.c); a mounted segment's bytes are its owner's. */
        if (seg->mem == NULL) allocFree(seg->alloc, r->handle);
        else if (seg == server.self && !storeObjIsStore(o)) zerofreeExtentForReuse(seg, r->handle); /* a SET value */
        else zerofreeExtent(seg, r->handle);
    }
    if (o->ext && o->ext->lease_entries) {
        /* The space is back; connections' lease records still point here. */
        o->nreplicas = 0;
        o->flags |= OBJ_FLAG_RETIRED;
        return;
    }
    if (o->ext) {
        putOwnerRelease(o->ext->put_owner);
        sdsfree(o->ext->checksum);
        if (o->ext->key) st.extkeybytes -= sdsAllocSize(o->ext->key);
        sdsfree(o->ext->key);
        zfree(o->ext->more);
        zfree(o->ext);
        st.exts--;
    }
    zfree(o);
}

void storeObjDecrRef(storeObj *o) {
    serverAssert(o->refcount > 0);
    if (--o->refcount) {
        storeWallsGone++; /* a holder let go (evict.c) */
        return;
    }
    /* Already waiting for its lease: a data-plane read (SEG.READ from the
     * pool) referenced it again after it was unlinked. Adding it twice
     * would free it twice: still leased, the wheel frees it; its lease
     * over, it goes now (its bucket may have been done while the read held
     * it). */
    if (o->flags & OBJ_FLAG_DEFERRED) {
        if (storeObjLeased(o)) return;
        deferRemove(o);
        st.lease_expiries++;
        account(o, ACCT_DEFERRED, -1);
        freeObject(o);
        return;
    }
    if (storeObjLeased(o)) {
        /* A remote reader may still be reading these extents. */
        o->flags |= OBJ_FLAG_DEFERRED;
        deferAdd(o);
        account(o, ACCT_DEFERRED, 1);
        return;
    }
    freeObject(o);
}

/* Frees the unlinked objects whose lease has ended and that no reply is
 * still being written from (a SEG.READ of a leased, unlinked version holds
 * a reference until its bytes are out). */
void storeDeferredFreeCron(void) {
    long long now = server.monotime / DEFER_TICK_MS;
    if (deferTick < 0) deferTick = now - DEFER_WHEEL; /* the first time: every bucket once */
    long long from = deferTick + 1;
    if (now - from >= DEFER_WHEEL) from = now - DEFER_WHEEL + 1; /* a long stall: every bucket once */
    for (long long t = from; t <= now; t++) {
        deferBucket *bk = &deferWheel[t % DEFER_WHEEL];
        serverVisit(VISITS_DEFERRED_SWEEP, bk->n);
        /* From the end: a removal moves the last entry into the hole. */
        for (uint32_t i = bk->n; i > 0; i--) {
            storeObj *o = bk->v[i - 1];
            if (o->refcount > 0) continue; /* a reply still reads it: storeObjDecrRef frees it */
            if (storeObjLeased(o)) {
                /* A later revolution's, or a deadline that moved: its own bucket. */
                if (deferTickOf(o) % DEFER_WHEEL != t % DEFER_WHEEL) {
                    deferRemove(o);
                    deferAdd(o);
                }
                continue;
            }
            deferRemove(o);
            st.lease_expiries++;
            account(o, ACCT_DEFERRED, -1);
            freeObject(o);
        }
    }
    deferTick = now;
}

/* ---- keys ---------------------------------------------------------------- */

/* maxmemory caps the bytes of values in the pool (0: the whole pool), and
 * with the dataset's heap the whole dataset (storeMakeRoomForDataset). The
 * pool is mapped once at start, so the cap is at most its size. This is the
 * one owner of that rule: the config file at start (storeInit refuses to
 * start) and CONFIG SET (refused, nothing changed) both ask it, with the
 * same words. NULL: acceptable. */
const char *storeMaxmemoryInvalid(long long maxmemory) {
    if (maxmemory > server.segment_size)
        return "maxmemory must not exceed segment-size (the pool is sized at start: restart with a larger "
               "--segment-size)";
    return NULL;
}

/* The two size rules of what the store keeps, max-key-size and
 * max-object-size, for every command that makes a key or a value (SET and
 * the string commands, PUT.START, RESTORE, RENAME and COPY): one owner, one
 * message each (the words docs/PROTOCOL.md gives). NULL: acceptable. */
const char *storeKeyTooLong(size_t keylen, char *buf, size_t buflen) {
    if ((long long)keylen <= server.max_key_size) return NULL;
    snprintf(buf, buflen, "ERR key is too long (%zu bytes, max-key-size is %lld)", keylen, server.max_key_size);
    return buf;
}

const char *storeValueTooBig(uint64_t len) {
    return len > (uint64_t)server.max_object_size ? "ERR value is too large (max-object-size)" : NULL;
}

/* Soft pins last at most max-soft-pin-ttl: one owner of that rule for PIN,
 * PUT.START PIN, the default (soft-pin-ttl, which CONFIG SET may set above
 * the bound) and RESTORE. A requested time out of range is refused with
 * storeSoftPinInvalid's words; a time the server chose (the default) or
 * carried by a payload (a DUMP from a node with a larger bound) is cut to
 * the bound by storeSoftPinBound, as the bound means "never longer". */
const char *storeSoftPinInvalid(long long ms, char *buf, size_t buflen) {
    if (ms >= 1 && ms <= server.max_soft_pin_ttl) return NULL;
    snprintf(buf, buflen, "ERR pin must be between 1 and max-soft-pin-ttl (%lld) ms", server.max_soft_pin_ttl);
    return buf;
}

long long storeSoftPinBound(long long ms) { return ms < server.max_soft_pin_ttl ? ms : server.max_soft_pin_ttl; }

/* Puts server.maxmemory (already checked) in force on the pool. Space
 * freed but still being zeroed comes back first: the watermark then evicts
 * down to the new cap by live objects only. */
void storeApplyMaxmemory(void) {
    if (server.self == NULL) return; /* start-up: storeInit applies it */
    zerofreeReclaim(1);
    allocSetLimit(server.self->alloc, (uint64_t)server.maxmemory);
}

int storeInit(char *err, size_t errlen) {
    server.keys = dictCreate(&keyspaceType);
    server.pending = dictCreate(&pendingType);
    server.expires = dictCreate(&expiresType);
    /* A pool the machine cannot hold is refused: pre-faulting it (or just
     * filling it) would end with the OOM killer, not with a clear error.
     * Hugetlb pools are exempt: their reservation fails cleanly by itself. */
    char what[64], have[32], want[32];
    uint64_t machine = segmentMachineMemory(what, sizeof(what));
    if (!server.segment_hugepages && machine && (uint64_t)server.segment_size > machine) {
        bytesToHuman(have, sizeof(have), machine);
        bytesToHuman(want, sizeof(want), (unsigned long long)server.segment_size);
        snprintf(err, errlen, "segment-size %s is more than this machine's %s (%s): the pool would not fit. "
                 "Give a smaller --segment-size (the pool should leave room for the rest of the host)",
                 want, what, have);
        return C_ERR;
    }
    const char *why = storeMaxmemoryInvalid(server.maxmemory);
    if (why) {
        snprintf(err, errlen, "%s", why);
        return C_ERR;
    }
    server.self = segmentCreateLocal("self", (uint64_t)server.segment_size, server.segment_hugepages,
                                     (int)server.segment_numa_node, server.segment_prefault, err, errlen);
    if (server.self == NULL) return C_ERR;
    storeApplyMaxmemory();
    server.self->mounted_ms = mstime();
    zerofreeInit();
    serverAssert(segmentTableAdd(server.self) == 0); /* the first: id 1, slot 0 */
    return C_OK;
}

void storeShutdown(void) {
    storeLazyFreeCron(LLONG_MAX); /* a FLUSHALL ASYNC still being freed */
    dictRelease(server.expires);
    dictRelease(server.pending);
    tenantKeysFlush(); /* its sets borrow the keyspace's strings */
    dictRelease(server.keys);
    server.expires = server.keys = NULL;
    evictResetPool();
    zerofreeReclaim(1);
    zerofreeShutdown();
    segmentTableRemove(server.self);
    segmentRelease(server.self);
    server.self = NULL;
}

long long storeGetExpire(sds key) {
    dictEntry *de = dictFind(server.expires, key);
    return de ? (long long)(intptr_t)de->val : -1;
}

/* Why a key goes; each reason is an event of its own (notify.c). */
enum { DEL_REMOVED, DEL_EXPIRED, DEL_EVICTED, DEL_LOST };

#define DEL_NOTIFY_MASK (NOTIFY_STORE | NOTIFY_EXPIRED | NOTIFY_EVICTED)

/* Told while the object is still there: the store event describes it. The
 * key is the caller's, never the dict's (which the delete frees). */
static void notifyDelete(sds key, storeObj *o, int why) {
    switch (why) {
    case DEL_REMOVED: notifyStoreEvent("remove", key, o); break;
    case DEL_EXPIRED:
        notifyKeyspaceEvent(NOTIFY_EXPIRED, "expired", key);
        notifyStoreEvent("expired", key, o);
        break;
    case DEL_EVICTED:
        notifyKeyspaceEvent(NOTIFY_EVICTED, "evicted", key);
        notifyStoreEvent("evicted", key, o);
        break;
    case DEL_LOST: notifyStoreEvent("lost", key, o); break;
    }
}

/* Deletes through the expires dict first: it borrows the key sds that the
 * keyspace dict owns and frees. Every deletion comes here (DEL, expiry,
 * eviction, the reaper), so this is where WATCH and subscribers hear of them. */
static int deleteKey(sds key, int why) {
    /* One lookup for all who need the entry before it goes: the slot index
     * and the tenants' sets borrow its key string, which the delete frees,
     * and the events and the tenants' charges describe its object. */
    if (server.cluster || (server.notify_mask & DEL_NOTIFY_MASK) || tenantKeysActive) {
        dictEntry *de = dictFind(server.keys, key);
        if (de == NULL) return 0;
        if (server.cluster) clusterSlotKeyDel(de->key);
        if (server.notify_mask & DEL_NOTIFY_MASK) notifyDelete(key, de->val, why);
        if (tenantKeysActive) tenantKeyRemovedSlow(key, storeObjTenantCharge(de->val, sdslen(key)));
    }
    dictDelete(server.expires, key);
    if (dictDelete(server.keys, key) != DICT_OK) return 0;
    signalModifiedKey(key);
    return 1;
}

int storeKeyPresent(sds key) { return dictFind(server.keys, key) != NULL; }

/* The key's object and expiry (-1 none), expired or not, with no side
 * effect at all: the log (aof.c) records what is, hits and LRU untouched. */
storeObj *storePeek(sds key, long long *expire_ms) {
    dictEntry *de = dictFind(server.keys, key);
    if (de == NULL) return NULL;
    dictEntry *ee = dictFind(server.expires, key);
    *expire_ms = ee ? (long long)(intptr_t)ee->val : -1;
    return de->val;
}

/* Logically expired (its TTL passed), whether or not it was deleted yet;
 * by the loop's clock, as the lookups. */
int storeKeyIsExpired(sds key) {
    long long when = storeGetExpire(key);
    return when >= 0 && when <= server.mstime;
}

/* Uses the loop's cached clock, as Redis does: every command of one
 * iteration sees the same "now", so a pipeline cannot observe a key
 * expiring halfway through it. */
int storeReplicaMode;

/* 1 when the key is logically expired: deleted here, except on a replica,
 * where it stays for the primary's DEL, and under CLIENT PAUSE, where it
 * stays until the pause ends (networking.c: the dataset holds still). */
static int expireIfNeeded(sds key) {
    if (dictSize(server.expires) == 0) return 0; /* skip the second hash */
    long long when = storeGetExpire(key);
    if (when < 0 || when > server.mstime) return 0;
    if (storeReplicaMode || pauseHoldsDataset()) return 1;
    deleteKey(key, DEL_EXPIRED);
    server.stat_expiredkeys++;
    return 1;
}

/* A version whose every replica went with its segments is gone: it is
 * removed here, so every command (GET, EXISTS, PUT.START, GET.REPLICAS)
 * sees a missing key without waiting for the reaper. */
storeObj *storeLookupWrite(sds key) {
    if (expireIfNeeded(key)) return NULL;
    dictEntry *de = dictFind(server.keys, key);
    if (de == NULL) return NULL;
    storeObj *o = de->val;
    if (o->len > 0 && storeObjLiveReplicas(o) == 0) {
        deleteKey(key, DEL_LOST);
        return NULL;
    }
    return o;
}

/* A read by a CLIENT NO-TOUCH connection (a monitoring or scanning tool)
 * leaves the LRU clock alone, so it doesn't keep cold objects from
 * eviction; TOUCH still touches, as in Redis. */
static int readTouches(void) {
    client *c = server.current_client;
    return c == NULL || !(c->flags & CLIENT_NO_TOUCH) || (c->cmd && !strcmp(c->cmd->name, "touch"));
}

storeObj *storeLookupNoTouch(sds key) {
    storeObj *o = storeLookupWrite(key);
    if (o) server.stat_keyspace_hits++;
    else server.stat_keyspace_misses++;
    return o;
}

storeObj *storeLookupReadFlags(sds key, int flags) {
    storeObj *o = storeLookupWrite(key);
    if (o) {
        if (readTouches()) o->lru = lruClock();
        server.stat_keyspace_hits++;
    } else {
        server.stat_keyspace_misses++;
        if (!(flags & STORE_LOOKUP_NONOTIFY)) notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", key);
    }
    return o;
}

storeObj *storeLookupRead(sds key) { return storeLookupReadFlags(key, 0); }

void storeSet(sds key, storeObj *o, long long expire_ms, int keepttl) {
    dictEntry *existing;
    dictEntry *de = dictAddRaw(server.keys, key, &existing);
    int created = de != NULL;
    st.bytes += o->len;
    account(o, ACCT_VALUE, 1);
    if (o->flags & OBJ_FLAG_UNLINKED) { /* back in the keyspace (RENAME) */
        o->flags &= (uint8_t)~OBJ_FLAG_UNLINKED;
        storeWallsGone++;
    }
    if (o->flags & OBJ_FLAG_HARDPIN) evictWallAdded(o, 0); /* RESTORE, PUT.END of a pinned put (it left the
                                                           * pending table: storeWallsGone moved) */
    if (de) {
        de->key = sdsdup(key);
        st.keybytes += sdsAllocSize(de->key);
        de->val = o;
        if (server.cluster) clusterSlotKeyAdd(de->key);
        if (tenantKeysActive) tenantKeyAddedSlow(de->key, storeObjTenantCharge(o, sdslen(key)));
    } else {
        storeObj *old = existing->val;
        existing->val = o;
        if (tenantKeysActive && old != o)
            tenantKeyCharged(key, sdslen(key),
                             (int64_t)storeObjTenantCharge(o, sdslen(key)) - (int64_t)storeObjTenantCharge(old, sdslen(key)), 0);
        st.bytes -= old->len;
        account(old, ACCT_VALUE, -1);
        if (old->refcount > 1 && old != o) old->flags |= OBJ_FLAG_UNLINKED;
        storeObjDecrRef(old);
        if (!keepttl) dictDelete(server.expires, key);
        de = existing;
    }
    if (expire_ms >= 0) putExpire(de->key, expire_ms);
    signalModifiedKey(key);
    if (created) notifyKeyspaceEvent(NOTIFY_NEW, "new", key);
    notifyStoreEvent("put", key, o);
}

int storeDelete(sds key) {
    if (!storeReplicaMode && expireIfNeeded(key)) return 0; /* a replica's expired key goes when told */
    return deleteKey(key, DEL_REMOVED);
}

void storeSetExpire(sds key, long long when_ms) {
    dictEntry *kde = dictFind(server.keys, key);
    serverAssert(kde != NULL);
    putExpire(kde->key, when_ms);
    signalModifiedKey(key);
}

int storeRemoveExpire(sds key) {
    if (dictDelete(server.expires, key) != DICT_OK) return 0;
    signalModifiedKey(key);
    return 1;
}

void storePresize(unsigned long keys, int nslots) {
    if (keys > dictSize(server.keys)) dictExpand(server.keys, keys);
    if (server.cluster && nslots > 0) {
        unsigned long share = keys / (unsigned long)nslots;
        clusterSlotKeysPresize = share + share / 4;
    }
}

void storePresizeDone(void) { clusterSlotKeysPresize = 0; }

/* One flush event for all the keys: a router drops the node's whole index. */
void storeFlush(void) {
    signalFlushedDb(); /* before: only keys that exist count as changed */
    unsigned long keys = dictSize(server.keys);
    /* Pending puts go too; their writers may still be writing. */
    dictIterator *it = dictGetSafeIterator(server.pending);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        storeObj *o = storePendingUnlink(de->key);
        storePendingAbandon(o);
    }
    dictReleaseIterator(it);
    dictEmpty(server.expires, NULL);
    if (server.cluster) clusterSlotKeysFlush();
    tenantKeysFlush();
    dictEmpty(server.keys, NULL);
    evictResetPool();
    server.evict_pending = 0;
    notifyStoreFlushPublish(keys);
}

/* FLUSHALL ASYNC: the dicts are detached whole and freed in slices
 * (lazyfree.c); new, empty ones take their place at once. */
void storeFlushAsync(void) {
    signalFlushedDb();
    unsigned long keys = dictSize(server.keys);
    dictIterator *it = dictGetSafeIterator(server.pending);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) storePendingAbandon(storePendingUnlink(de->key));
    dictReleaseIterator(it);
    /* The expires and the slot index point at the keyspace's key strings
     * but free none of them: their order of freeing does not matter. */
    storeLazyFreeTake(server.expires);
    server.expires = dictCreate(&expiresType);
    if (server.cluster) clusterSlotKeysDetach(storeLazyFreeTake);
    tenantKeysDetach(storeLazyFreeTake);
    storeLazyFreeTakeKeyspace(server.keys);
    server.keys = dictCreate(&keyspaceType);
    storeLazyFreeStart();
    evictResetPool();
    server.evict_pending = 0;
    notifyStoreFlushPublish(keys);
}

int storeObjLiveReplicas(storeObj *o) {
    for (int i = 0; i < o->nreplicas;) {
        if (storeReplicaSegment(storeObjReplica(o, i))) {
            i++;
            continue;
        }
        *storeObjReplica(o, i) = *storeObjReplica(o, o->nreplicas - 1);
        o->nreplicas--;
    }
    return o->nreplicas;
}

/* The reaper: after a segment goes, walk the keyspace and the pending
 * table with dictScan in time-bounded slices, dropping stale replicas and
 * the objects left with none. Lookups skip stale replicas in the meantime,
 * so correctness never waits for it; memory and DBSIZE catch up within a
 * few cron ticks even for millions of objects, and no slice blocks the loop
 * for more than its budget. */
static struct {
    int active, restart, phase; /* phase 0: keys, 1: pending */
    unsigned long cursor;
    sds *dead;
    size_t ndead, deadcap;
} reaper;

static void liveReplicas(storeObj *o, void *ctx) {
    (void)ctx;
    storeObjLiveReplicas(o);
}

void storeReapStaleReplicas(void) {
    if (reaper.active) reaper.restart = 1; /* another segment went: a full pass again */
    reaper.active = 1;
    /* The deferred list is not scanned by the reaper: drop its stale
     * replicas now (it holds only leased, unlinked versions: few). */
    deferEach(liveReplicas, NULL);
}

static void reapCallback(void *privdata, const dictEntry *de) {
    (void)privdata;
    storeObj *o = de->val;
    /* Only an empty value (SET k "") legitimately has no replica. */
    if (o->len == 0 || storeObjLiveReplicas(o) > 0) return;
    if (reaper.ndead == reaper.deadcap) {
        reaper.deadcap = reaper.deadcap ? reaper.deadcap * 2 : 64;
        reaper.dead = zrealloc(reaper.dead, sizeof(sds) * reaper.deadcap);
    }
    reaper.dead[reaper.ndead++] = sdsdup(de->key);
}

void storeReaperCron(long long budget_us) {
    if (!reaper.active) return;
    long long start = monoUs();
    do {
        dict *d = reaper.phase == 0 ? server.keys : server.pending;
        for (int i = 0; i < 64; i++) {
            reaper.cursor = dictScan(d, reaper.cursor, reapCallback, NULL);
            if (reaper.cursor == 0) break;
        }
        for (size_t i = 0; i < reaper.ndead; i++) {
            if (reaper.phase == 0) deleteKey(reaper.dead[i], DEL_LOST);
            else dictDelete(server.pending, reaper.dead[i]);
            sdsfree(reaper.dead[i]);
        }
        reaper.ndead = 0;
        if (reaper.cursor == 0) {
            if (reaper.phase == 0) {
                reaper.phase = 1;
            } else if (reaper.restart) {
                reaper.restart = 0;
                reaper.phase = 0;
            } else {
                reaper.active = 0;
                reaper.phase = 0;
                return;
            }
        }
    } while (monoUs() - start < budget_us);
}

int storeDeleteKeyForEviction(sds key) { return deleteKey(key, DEL_EVICTED); }

/* ---- pending puts ------------------------------------------------------ */

/* A pending version lives in its own table, not the keyspace: readers never
 * see it, DBSIZE does not count it, and a key can have a complete version
 * (still readable) and a pending replacement (PUT.START REPLACE) at once;
 * PUT.END swaps them in one step. */
/* A put whose every replica went with its segments (UNMOUNT, owner death)
 * can never be ended: it is removed here, as storeLookupWrite removes such
 * a complete version, so PUT.START, GET.REPLICAS and PUT.END see no put in
 * progress without waiting for the reaper -- not -EXISTS / -NOTREADY for a
 * put that no longer has anywhere to be written. */
storeObj *storePendingLookup(sds key) {
    dictEntry *de = dictFind(server.pending, key);
    if (de == NULL) return NULL;
    storeObj *o = de->val;
    if (storeObjLiveReplicas(o) == 0) {
        dictDelete(server.pending, key);
        return NULL;
    }
    return o;
}

void storePendingAdd(sds key, storeObj *o) {
    serverAssert(dictAdd(server.pending, sdsdup(key), o) == DICT_OK);
    account(o, ACCT_PENDING, 1);
    if (tenantKeysActive) tenantKeyCharged(key, sdslen(key), (int64_t)storeObjTenantCharge(o, sdslen(key)), 1);
    st.pending_bytes += o->len;
    evictWallAdded(o, 0); /* new extents */
    if (o->ext && o->ext->put_owner) {
        o->ext->put_owner->npending++;
        o->ext->put_owner->pending_bytes += o->len;
    }
}

/* Every way out of the pending table comes here: the counts stay exact. */
static void pendingLeave(storeObj *o) {
    account(o, ACCT_PENDING, -1);
    if (tenantKeysActive && o->ext && o->ext->key) /* PUT.START records every pending put's key */
        tenantKeyCharged(o->ext->key, sdslen(o->ext->key), -(int64_t)storeObjTenantCharge(o, sdslen(o->ext->key)), 1);
    storeWallsGone++;
    st.pending_bytes -= o->len;
    if (o->ext && o->ext->put_owner) {
        o->ext->put_owner->npending--;
        o->ext->put_owner->pending_bytes -= o->len;
    }
}

/* Takes the pending version out; the caller gets its reference. */
storeObj *storePendingUnlink(sds key) {
    dictEntry *de = dictUnlink(server.pending, key);
    if (de == NULL) return NULL;
    storeObj *o = de->val;
    pendingLeave(o);
    de->val = NULL;
    sdsfree(de->key);
    de->key = NULL;
    dictFreeUnlinkedEntry(server.pending, de);
    return o;
}

/* A writer may still be writing into a pending version that is dropped
 * (taken over, flushed, its segment's peer gone): its extents are not
 * reused before put-release-timeout, so a slow writer can never scribble
 * over bytes that now belong to someone else. */
void storePendingAbandon(storeObj *o) {
    storeObjExt *ext = storeObjGetExt(o);
    long long until = addSaturate(server.monotime, server.put_release_timeout);
    if (ext->lease_until_ms < until) ext->lease_until_ms = until;
    ext->lease_holders = STORE_LEASE_HELD; /* no reader's release may end this wait */
    storeObjDecrRef(o);
}

unsigned long storePendingSize(void) { return dictSize(server.pending); }

/* The pending sweep. Before it, a put was given back only when someone
 * touched its key again (a take-over after put-timeout, REMOVE, a flush):
 * a writer that died, or that stayed connected and silent, kept its space
 * forever, out of eviction's reach and out of KEYS and DBSIZE, and a
 * client could fill the pool that way and leave. Now a pass over the
 * pending table, in time-bounded dictScan slices, gives back
 *  - a put whose connection closed: no one can end it (PUT.END is the
 *    starting connection's), so it is abandoned at once, its space reused
 *    after put-release-timeout (the writer's process may still be copying
 *    into it, as for a take-over);
 *  - a put older than put-timeout + put-release-timeout: what a take-over
 *    at put-timeout would have allowed, so its space is reused at once.
 * A pass starts when a connection with pending puts closes, and otherwise
 * every quarter of the shorter timeout (at least 10 ms, at most 1 s):
 * no pass while nothing is pending, and no per-put timer. */
static void sweepCallback(void *privdata, const dictEntry *de) {
    long long *expire_before = privdata;
    storeObj *o = de->val;
    putOwner *po = o->ext ? o->ext->put_owner : NULL;
    int gone = po && po->gone;
    if (!gone && o->ext && o->ext->created_ms > *expire_before) return;
    if (sweep.nvictims == sweep.victims_cap) {
        sweep.victims_cap = sweep.victims_cap ? sweep.victims_cap * 2 : 64;
        sweep.victims = zrealloc(sweep.victims, sizeof(sds) * sweep.victims_cap);
    }
    sweep.victims[sweep.nvictims++] = sdsdup(de->key);
}

void storePendingCron(long long budget_us) {
    if (dictSize(server.pending) == 0) {
        sweep.cursor = 0;
        sweep.wanted = 0;
        return;
    }
    if (sweep.cursor == 0 && !sweep.wanted && server.monotime < sweep.next_ms) return;
    sweep.wanted = 0;
    long long age = addSaturate(server.put_timeout, server.put_release_timeout);
    long long expire_before = server.monotime - age;
    long long start = monoUs();
    do {
        for (int i = 0; i < 64; i++) {
            sweep.cursor = dictScan(server.pending, sweep.cursor, sweepCallback, &expire_before);
            if (sweep.cursor == 0) break;
        }
        for (size_t i = 0; i < sweep.nvictims; i++) {
            storeObj *o = storePendingUnlink(sweep.victims[i]);
            sdsfree(sweep.victims[i]);
            if (o == NULL) continue; /* the same key seen twice by the scan */
            if (o->ext && o->ext->put_owner && o->ext->put_owner->gone) storePendingAbandon(o);
            else storeObjDecrRef(o); /* aged past both timeouts: no writer may still write */
            st.pending_reclaimed++;
        }
        sweep.nvictims = 0;
    } while (sweep.cursor != 0 && monoUs() - start < budget_us);
    if (sweep.cursor == 0) {
        long long shorter = server.put_timeout < server.put_release_timeout ? server.put_timeout
                                                                            : server.put_release_timeout;
        long long period = shorter / 4;
        if (period < 10) period = 10;
        if (period > 1000) period = 1000;
        sweep.next_ms = server.monotime + period;
    }
}

/* ---- making room ---------------------------------------------------------- */

/* Whether evicting could make room in s for size bytes. A write that fails
 * this check is refused before anything is evicted: a refused write
 * changes nothing. Two tests:
 *  - bytes, a cheap first filter: its free bytes (under maxmemory's cap),
 *    those still being zeroed, and the values that eviction may take --
 *    every value there but the hard-pinned ones and the key being written
 *    (storeEvictProtected);
 *  - contiguity: freed bytes need not be adjacent, so the segment must
 *    also hold a run of `size` bytes that no wall interrupts -- hard-pinned
 *    values, pending puts, leased values, versions a reply still holds, the
 *    key being written (evictRunFits, evict.c, which says how it avoids a
 *    walk over every extent per write). */
int storeEvictionCouldFit(segment *s, uint64_t size) {
    allocStats as;
    allocGetStats(s->alloc, &as);
    uint64_t need = (size + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1);
    uint64_t room = as.limit > as.used ? as.limit - as.used : 0;
    if (s->mem) room += zerofreePendingBytes();
    uint64_t evictable = s->value_bytes > s->hardpin_bytes ? s->value_bytes - s->hardpin_bytes : 0;
    uint64_t poff = 0, psize = 0;
    if (storeEvictProtected) {
        dictEntry *de = dictFind(server.keys, storeEvictProtected);
        storeObj *o = de ? de->val : NULL;
        if (o && !(o->flags & OBJ_FLAG_HARDPIN)) {
            for (int i = 0; i < o->nreplicas; i++) {
                storeReplica *r = storeObjReplica(o, i);
                if (storeReplicaSegment(r) == s && r->handle != ALLOC_NONE) {
                    uint64_t b = allocSize(s->alloc, r->handle);
                    evictable = evictable > b ? evictable - b : 0;
                    poff = r->offset;
                    psize = evictIsWall(o) ? 0 : b; /* a wall already (leased, held) */
                }
            }
        }
    }
    if (room + evictable < need) return 0;
    return evictRunFits(s, need, poff, psize, as.limit < as.capacity ? as.limit : 0);
}

/* The heap the dataset takes: tables, key strings, object headers and
 * extensions, recorded keys, the deferred list. Counters only: it is read
 * before every write command while maxmemory is set. */
static inline uint64_t dictHeap(const dict *d) {
    uint64_t buckets = (d->size_exp[0] < 0 ? 0 : 1UL << d->size_exp[0]) + (d->size_exp[1] < 0 ? 0 : 1UL << d->size_exp[1]);
    return sizeof(dict) + buckets * sizeof(dictEntry *) + (d->used[0] + d->used[1]) * sizeof(dictEntry);
}

uint64_t storeDatasetHeap(void) {
    const dict *k = server.keys, *p = server.pending;
    uint64_t h = dictHeap(k) + dictHeap(server.expires) + dictHeap(p);
    h += st.keybytes + (k->used[0] + k->used[1] + p->used[0] + p->used[1]) * sizeof(storeObj);
    h += st.exts * sizeof(storeObjExt) + st.extkeybytes + deferSlots * sizeof(storeObj *);
    if (tenantKeysActive) h += tenantKeysHeap(); /* the tenants' own-key index */
    return h;
}

/* What maxmemory bounds: the pool's bytes in use (freed extents still
 * being zeroed are free) plus the dataset's heap. */
uint64_t storeDatasetUsed(void) {
    uint64_t pool = allocUsed(server.self->alloc), zeroing = zerofreePendingBytes();
    uint64_t used = pool > zeroing ? pool - zeroing : 0;
    return used + storeDatasetHeap();
}

/* Before a write command while maxmemory is set (server.c), as Redis's
 * performEvictions: over the limit, evict (policy permitting) until under
 * it, else refuse the command. Only a store already over its limit
 * evicts here, whatever the command would add.
 *
 * Summing the dataset is a few dozen loads, a few percent of a small SET;
 * so the last sum leaves a headroom, and a command whose cost (an upper
 * bound on what it can add: server.c) fits in what is left skips the sum.
 * Every pool extent taken is charged to it as well (storeObjAddReplica:
 * a PUT.START's size is not in its arguments), so the headroom never
 * says "under" for a dataset that is over by more than one command.
 *
 * `placed`: pool bytes this very command's values already took (a large
 * SET value is read straight into the pool before the command runs,
 * networking.c). They are what the command adds, not what the store held
 * before it: counted, a SET of 32 KiB or more found the store "over" by
 * its own value, evicted keys that had nothing to do with it (the key it
 * was writing included) and was then refused with -OOM, where the same
 * SET of a shorter value ran. */
int storeMakeRoomForDataset(uint64_t cost, uint64_t placed) {
    /* Under CLIENT PAUSE nothing is evicted, and a command the pause let
     * through is not refused for it (Redis's performEvictions too). */
    if (pauseHoldsDataset()) return C_OK;
    if (headroom.limit == server.maxmemory && headroom.left > cost) {
        headroom.left -= cost;
        return C_OK;
    }
    uint64_t used;
    while ((used = storeDatasetUsed()) > (uint64_t)server.maxmemory + placed) {
        if (zerofreeMakeRoom()) continue;
        if (server.evict_policy == EVICT_NOEVICTION || !evictOne(NULL)) {
            st.oom++;
            headroom.left = 0;
            return C_ERR;
        }
    }
    headroom.limit = server.maxmemory;
    headroom.left = used < (uint64_t)server.maxmemory ? (uint64_t)server.maxmemory - used : 0;
    headroom.left = headroom.left > cost ? headroom.left - cost : 0;
    return C_OK;
}

void storeObjSetHardPin(storeObj *o, int on) {
    int was = (o->flags & OBJ_FLAG_HARDPIN) != 0;
    if (was == !!on) return;
    /* A complete version pinned or unpinned here is the keyspace's
     * (pinCommand finds it there); a pending one is counted at PUT.END. */
    int counted = o->state == OBJ_COMPLETE, was_wall = evictIsWall(o);
    if (counted) account(o, ACCT_VALUE, -1);
    if (on) o->flags |= OBJ_FLAG_HARDPIN;
    else o->flags &= (uint8_t)~OBJ_FLAG_HARDPIN;
    if (counted) account(o, ACCT_VALUE, 1);
    if (on) evictWallAdded(o, was_wall);
    else storeWallsGone++;
}

unsigned long storeSize(void) { return dictSize(server.keys); }
unsigned long storeExpiresSize(void) { return dictSize(server.expires); }

/* ---- active expiry ------------------------------------------------------- */

/* Walks the keys with a TTL in order, with a dictScan cursor kept across
 * ticks, and deletes the expired ones, as Redis's active expire cycle:
 * every tick at least EXPIRE_STEPS_MIN scan steps of about EXPIRE_SAMPLE
 * entries, more while a step finds over EXPIRE_STALE_PCT percent of what
 * it looked at expired, within the time budget. The cursor means every key
 * is looked at within a pass, however few have expired. Random samples
 * (dictGetSomeKeys) that stopped at the first one under a quarter expired
 * left keys that expired together behind once they were a small share of
 * the TTL keys: 800 among 8800 were reclaimed two or so a tick, their
 * values holding their space meanwhile (tests/unit/active_expire.tcl). */
#define EXPIRE_STEPS_MIN 16
#define EXPIRE_STALE_PCT 10

typedef struct expireStep {
    long long now;
    unsigned long seen;
    sds *keys;
    size_t n, cap;
} expireStep;

static void expireScanEntry(void *privdata, const dictEntry *de) {
    expireStep *st = privdata;
    st->seen++;
    if ((long long)(intptr_t)de->val > st->now) return;
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : EXPIRE_SAMPLE;
        st->keys = zrealloc(st->keys, sizeof(sds) * st->cap);
    }
    st->keys[st->n++] = sdsdup(de->key); /* deleted after the scan step */
}

static unsigned long expireCursor;

void storeActiveExpireCycle(long long budget_us) {
    if (storeReplicaMode) return; /* its primary's DELs do it */
    long long start = monoUs();
    expireStep st = {0};
    for (int steps = 0;; steps++) {
        if (dictSize(server.expires) == 0) break;
        st.now = mstime(); /* expiries are wall-clock times */
        st.seen = 0;
        st.n = 0;
        /* A scan step is a bucket (two while rehashing): several, up to
         * about EXPIRE_SAMPLE entries, or the end of the pass. */
        do {
            expireCursor = dictScan(server.expires, expireCursor, expireScanEntry, &st);
        } while (expireCursor != 0 && st.seen < EXPIRE_SAMPLE);
        serverVisit(VISITS_EXPIRE, st.seen);
        for (size_t i = 0; i < st.n; i++) {
            long long when = storeGetExpire(st.keys[i]);
            if (when >= 0 && when <= st.now && deleteKey(st.keys[i], DEL_EXPIRED)) server.stat_expiredkeys++;
            sdsfree(st.keys[i]);
        }
        if (expireCursor == 0) break; /* a pass is done: the next one next tick */
        if (steps + 1 >= EXPIRE_STEPS_MIN && st.n * 100 <= st.seen * EXPIRE_STALE_PCT) break;
        if (monoUs() - start > budget_us) break;
    }
    zfree(st.keys);
}

void storeRehashCron(long long budget_us) {
    if (dictIsRehashing(server.keys)) dictRehashMicroseconds(server.keys, budget_us);
    if (dictIsRehashing(server.expires)) dictRehashMicroseconds(server.expires, budget_us);
}

void storeGetStats(storeStats *out) {
    allocStats as;
    allocGetStats(server.self->alloc, &as);
    memset(out, 0, sizeof(*out));
    out->objects = dictSize(server.keys);
    out->bytes = st.bytes;
    out->evictions = (uint64_t)server.stat_evictedkeys;
    out->deferred_frees = st.ndeferred;
    out->lease_expiries = st.lease_expiries;
    out->expired = (uint64_t)server.stat_expiredkeys;
    out->oom = st.oom;
    out->pool_size = as.capacity;
    out->pool_used = as.used;
    out->pool_free = as.free;
    out->largest_free = as.largest_free;
    out->free_ranges = as.free_ranges;
    out->pool_values = server.self->value_bytes;
    out->pool_pending = server.self->pending_bytes;
    out->pool_deferred = server.self->deferred_bytes;
    out->pool_zeroing = zerofreePendingBytes();
    out->pending_puts = dictSize(server.pending);
    out->pending_put_bytes = st.pending_bytes;
    out->pending_reclaimed = st.pending_reclaimed;
    /* Heap that exists because of the objects: tables, keys, headers and
     * extensions (fixed-size allocations each), and the allocator metadata
     * of every segment, mounted ones included. Pending keys are counted
     * by the pending table only roughly (their key strings are not). */
    out->meta_bytes = dictMemUsage(server.keys) + dictMemUsage(server.expires) + dictMemUsage(server.pending);
    if (tenantKeysActive) out->meta_bytes += tenantKeysHeap();
    out->meta_bytes += st.keybytes + (out->objects + dictSize(server.pending)) * sizeof(storeObj);
    out->meta_bytes += st.exts * sizeof(storeObjExt) + st.extkeybytes;
    for (uint32_t i = 0; i < segtabLen; i++) {
        if (!segtab[i]) continue;
        allocStats sas;
        allocGetStats(segtab[i]->alloc, &sas);
        out->meta_bytes += sas.metadata_bytes;
    }
}

void storeResetStats(void) {
    st.oom = st.lease_expiries = st.pending_reclaimed = 0;
}
