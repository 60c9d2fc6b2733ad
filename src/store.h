/* store.h -- the keyspace: keys, immutable value objects, expiry, eviction. */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include "dict.h"
#include "sds.h"
#include "segment.h"
#include "lazyfree.h"

#define STORE_MAX_REPLICAS 8

enum { OBJ_COMPLETE = 0, OBJ_PENDING = 1 };
#define OBJ_FLAG_HARDPIN (1 << 0)
#define OBJ_FLAG_DEFERRED (1 << 1) /* on store.c's deferred-free list */
#define OBJ_FLAG_RETIRED (1 << 2)  /* extents freed; the header waits for its lease entries */
/* What OBJECT ENCODING says where the bytes alone would mislead: Redis
 * holds a value it changed in place (APPEND, SETRANGE, SETBIT) "raw" and
 * INCRBYFLOAT's result "embstr" even when it looks like an integer. */
#define OBJ_FLAG_ENC_RAW (1 << 3)
#define OBJ_FLAG_ENC_NOINT (1 << 4)
/* intval is the integer the bytes spell (set by the INCR family, which
 * just wrote them): the next INCR needs no read of the pool. */
#define OBJ_FLAG_INTVAL (1 << 5)
/* Out of the keyspace but still held (a reply being written): evicting
 * cannot free it (evict.c's walls). */
#define OBJ_FLAG_UNLINKED (1 << 6)

/* One extent of one segment. */
/* A replica names its segment by slot and the slot's generation at the
 * time: once the segment is unmounted (or its owner dies) every replica on
 * it is stale at once, even if a new segment reuses the slot, with no walk
 * over the objects. Stale replicas are skipped by every reader and removed
 * by a background reaper (store.c). */
typedef struct storeReplica {
    uint64_t offset;
    uint32_t handle;    /* allocator handle in the segment; ALLOC_NONE = no extent */
    uint16_t segslot;   /* index in segtab */
    uint16_t seggen;    /* the slot's generation: mismatch = stale */
} storeReplica;

/* What only store-command objects need (leases, pins, the put's owner,
 * more replicas): a plain SET value never allocates it. 80 bytes with
 * padding (the 80 byte jemalloc class): at 10M objects every 16 bytes here is 160 MB.
 *
 * created_ms is also what tells a store object (made by PUT.START, or
 * RESTOREd from one's DUMP) from a SET value: see storeObjIsStore. A SET
 * value can have an extension too (a PIN, a lease from GET.REPLICAS) but
 * its created_ms stays 0.
 *
 * `key` is the object's key, recorded when its put starts (PUT.START,
 * RESTORE of an object): the data plane addresses bytes by (segment,
 * offset) and maps them back to the object, and a user restricted by ACL
 * key patterns may only touch objects whose key it may access (acl.c,
 * "Tenancy"). The key cannot be borrowed from the keyspace: a version
 * outlives its dict entry (replaced or removed while a reader's lease
 * runs) and stays readable until the lease ends. So it is a copy: the
 * key's bytes plus an sds header per object, which beside values of
 * kilobytes to megabytes (KV-cache blocks) is under a percent. */
typedef struct storeObjExt {
    long long created_ms;        /* PUT.START time (0: unknown, a SET value), on the wall clock
                                  * once the put ended; while pending on server.monotime, which
                                  * put-timeout and the pending sweep count on (storeObjCreatedMs) */
    long long lease_until_ms;    /* space is not reused before this (server.monotime) */
    long long softpin_until_ms;  /* 0 = not soft-pinned; server.monotime (a PIN is for ms, and a
                                  * wall-clock step must neither end nor stretch it); the log and
                                  * the detached entries keep the wall clock's (aof.c, detached.c) */
    struct putOwner *put_owner;  /* the connection that ran PUT.START (see putOwner) */
    sds key;                     /* the object's key (see above), NULL for SET values */
    sds checksum;                /* given at PUT.END, may be NULL */
    storeReplica *more;          /* replicas 2..n, sized to fit */
    uint64_t lease_epoch;        /* one continuous lease period, numbered server-wide */
    uint32_t lease_holders;      /* grants of this period that may be released early;
                                  * STORE_LEASE_HELD: one of them cannot be */
    uint32_t lease_entries;      /* connections' records of grants (t_store.c) pointing here */
    union {
        uint32_t deferred_at;    /* OBJ_FLAG_DEFERRED: its place on the waiting list (store.c) */
        uint32_t born_mono;      /* otherwise: created_ms on the monotonic clock, truncated
                                  * (storeObjSetCreated): how old it is, whatever the wall
                                  * clock did since; a removed version needs it no more */
    };
    uint32_t lease_holds;        /* HOLD.REPLICAS grants in force: leased while any, whatever the deadline */
} storeObjExt;

#define STORE_LEASE_HELD UINT32_MAX

/* Who started a put, as its objects remember it. A connection gets one at
 * its first PUT.START; the objects it wrote point to it (one reference
 * each, so PUT.END repeated after the put ended still finds its writer)
 * and it outlives the connection while any of them does. It counts the
 * connection's puts still pending, exactly (every way out of the pending
 * table passes through store.c), which is what client-max-pending-puts
 * bounds; `gone` tells the pending sweep (storePendingCron) that no one
 * can end those puts any more. */
typedef struct putOwner {
    uint64_t refs;       /* the connection's, plus one per object pointing here */
    uint64_t npending;   /* its puts in the pending table */
    uint64_t pending_bytes; /* and their sizes (CLIENT INFO shows both to their owner) */
    uint64_t client_id;  /* the connection (CLIENT LIST id) */
    int gone;            /* the connection closed */
} putOwner;

putOwner *storePutOwnerOf(uint64_t client_id, putOwner **slot); /* *slot: the client's, created on first use */
void storePutOwnerGone(putOwner *po); /* the connection closed: drops its reference */

/* One immutable version of a value: one or more replicas in segments.
 * Shared by the keyspace, by replies still being written and (through the
 * lease) by remote readers; the extents are freed when the last reference
 * goes and the lease has ended, so no one ever reads reused bytes. */
typedef struct storeObj {
    uint64_t len;
    storeReplica r;      /* the first replica, inline: the common case */
    uint32_t refcount;
    uint32_t lru;        /* ms clock, truncated: see evict.c */
    uint8_t state;       /* OBJ_COMPLETE | OBJ_PENDING */
    uint8_t nreplicas;
    uint8_t flags;       /* OBJ_FLAG_* */
    uint8_t unused;
    uint32_t intval;     /* see OBJ_FLAG_INTVAL; fills what was padding */
    storeObjExt *ext;    /* NULL for plain SET values */
} storeObj;

static inline int storeObjPutBy(const storeObj *o, const putOwner *po) {
    return po && o->ext && o->ext->put_owner == po;
}

typedef struct storeStats {
    uint64_t objects, bytes;
    uint64_t evictions, expired, oom;
    uint64_t pool_size, pool_used, pool_free, largest_free, free_ranges;
    uint64_t meta_bytes;    /* heap for keys, objects, tables, allocator */
    uint64_t deferred_frees; /* unlinked objects waiting for their lease to end */
    uint64_t lease_expiries; /* leases (and put-release waits) that ended holding space back */
    /* The pool's bytes by whose they are: values + pending + deferred +
     * zeroing + free = pool_size, whatever clients do (an object only a
     * reply still being written holds is on its way to one of them). */
    uint64_t pool_values, pool_pending, pool_deferred, pool_zeroing;
    uint64_t pending_puts, pending_put_bytes; /* puts not yet ended, and their sizes */
    uint64_t pending_reclaimed;               /* puts given back by storePendingCron */
} storeStats;

/* Read leases. A grant starts a new lease period if none is running, else
 * extends it. A releasable grant is counted: when every counted grant of
 * the period is released (storeLeaseRelease with that period's epoch), the
 * lease ends at once instead of at its deadline, and the space of an
 * unlinked version comes back. A grant that can't be released (LEASE key
 * ms, a server-side read) holds the period to its deadline. Returns the
 * period's epoch. */
uint64_t storeLeaseGrant(storeObj *o, long long ms, int releasable);
/* 1 if that released the last counted grant and ended the lease. */
int storeLeaseRelease(storeObj *o, uint64_t epoch);
/* A connection's record of a grant keeps the object's header (not its
 * extents, nor its place on the deferred list) alive, so the record can
 * be checked and released whatever happened to the key meanwhile. Drop
 * releases the grant first if asked; a version whose last lease that ends
 * and that nothing references gives its space back right there. */
void storeLeaseEntryAdd(storeObj *o);
int storeLeaseEntryDrop(storeObj *o, uint64_t epoch, int release); /* 1: the release ended the lease */

/* Says (rate-limited) why an allocation of size bytes failed. */
void storeLogNoSpace(uint64_t size, const char *what);

/* The keyspace's (and expires') hash of a key, from bytes that need not be
 * an sds: prefetch.c finds a key's bucket before the command is parsed. */
static inline uint64_t storeKeyHashBuf(const void *key, size_t len) { return dictGenHashFunction(key, len); }

int storeInit(char *err, size_t errlen);
/* The rule "maxmemory <= segment-size" (its one owner): why a value is
 * refused, or NULL; and putting server.maxmemory in force on the pool. */
const char *storeMaxmemoryInvalid(long long maxmemory);
void storeApplyMaxmemory(void);
/* max-key-size and max-object-size (their one owner): the error to reply,
 * or NULL. storeKeyTooLong formats into buf. */
const char *storeKeyTooLong(size_t keylen, char *buf, size_t buflen);
const char *storeValueTooBig(uint64_t len);
/* max-soft-pin-ttl (its one owner): why a requested soft pin is refused, or
 * NULL; and a time the server chose or a payload carried, cut to the bound. */
const char *storeSoftPinInvalid(long long ms, char *buf, size_t buflen);
long long storeSoftPinBound(long long ms);
void storeShutdown(void);

/* Objects. */
storeObj *storeObjCreate(size_t len);          /* in the pool; NULL: no space, even after eviction */
/* The same for a write of `key` (NULL: none): making room never evicts that
 * key, and evicts nothing at all unless the pool could then hold len bytes. */
storeObj *storeObjCreateFor(size_t len, sds key);
/* The same for a writer of every byte of the value before anyone reads it
 * (a SET value read from the socket): may get a freed extent unzeroed. */
storeObj *storeObjCreateForFullWrite(size_t len, sds key);
storeObj *storeObjCreateFrom(const void *p, size_t len);
storeObj *storeObjNew(uint64_t len);           /* no replica yet: see storeObjAddReplica */
void storeObjAddReplica(storeObj *o, segment *seg, uint32_t handle, uint64_t offset);
storeObjExt *storeObjGetExt(storeObj *o);      /* creates it on first use */
uint64_t storeObjTenantCharge(const storeObj *o, size_t keylen); /* what tenant-maxmemory counts of it (tenantquota.c) */
void storeObjSetKey(storeObj *o, sds key);     /* records the key in ext (see storeObjExt) */
static inline storeReplica *storeObjReplica(storeObj *o, int i) {
    return i == 0 ? &o->r : &o->ext->more[i - 1];  /* ext exists once nreplicas > 1 */
}
/* NULL when the replica is stale (its segment is gone). */
static inline segment *storeReplicaSegment(const storeReplica *r) {
    segment *s = r->segslot < segtabLen ? segtab[r->segslot] : NULL;
    return s && s->gen == r->seggen ? s : NULL;
}
int storeObjLiveReplicas(storeObj *o);  /* compacts away stale replicas, returns the count */
extern char storeEmptyValue[1];
/* Bytes of the first replica held in this process (the server's pool);
 * NULL if every replica is in a mounted (remote) segment. */
char *storeObjLocalPtr(storeObj *o);
#define STORE_ERR_REMOTE "-REMOTE the value is only in mounted segments: read it with GET.REPLICAS"
static inline char *storeObjPtr(const storeObj *o) {
    if (o->r.handle == ALLOC_NONE) return storeEmptyValue;
    return segmentPtr(segtab[o->r.segslot], o->r.offset);
}
/* o's extents just became walls to eviction (evict.c); was_wall: they
 * already were (pinned and now leased, ...). A second holder (a reply, a
 * SEG.READ) makes them one until it lets go. */
void evictWallAdded(storeObj *o, int was_wall);
void evictRefAdded(storeObj *o);
int evictIsWall(const storeObj *o);
static inline void storeObjIncrRef(storeObj *o) {
    if (++o->refcount == 2) evictRefAdded(o);
}
/* A store object (PUT.START/PUT.END), as opposed to a SET value. String
 * commands read both, but the ones that would change a value in place by
 * Redis's semantics (APPEND, SETRANGE, SETBIT, the INCR family) answer
 * WRONGTYPE for a store object, as Redis does across types: its bytes
 * were placed by a writer with replicas, checksum and pins that an edit
 * here would silently contradict. */
static inline int storeObjIsStore(const storeObj *o) { return o->ext && o->ext->created_ms != 0; }
/* OBJECT ENCODING's answer, as Redis 7 would give it for the same value:
 * "int", "embstr" (up to 44 bytes) or "raw"; store objects are "raw". */
const char *storeObjEncoding(storeObj *o);
void storeObjDecrRef(storeObj *o);
/* Where o's len new bytes may be written over the old, or NULL if someone
 * else may be reading them (see "Immutability" in store.c); after writing,
 * storeObjChangedInPlace tells WATCH and subscribers as storeSet would. */
char *storeObjWritableInPlace(storeObj *o, uint64_t len);
void storeObjChangedInPlace(sds key, storeObj *o);
/* As storeObjWritableInPlace, for SET: where a new value may take o's
 * place, which also needs o to carry nothing a new version would not (no
 * pin, checksum or store metadata). */
char *storeObjReplaceableInPlace(storeObj *o, uint64_t len);
/* SET's new bytes were written over o's in place: o's TTL as storeSet
 * would leave it (expire_ms >= 0 sets one; otherwise dropped unless
 * keepttl), then storeObjChangedInPlace. */
void storeObjReplacedInPlace(sds key, storeObj *o, long long expire_ms, int keepttl);
int storeObjLeased(const storeObj *o);
long long storeLeaseEndMs(const storeObj *o); /* when its lease ends (server.monotime); LLONG_MAX while held */
/* When its put started on the wall clock, 0: unknown (see created_ms). */
long long storeObjCreatedMs(const storeObj *o);
/* The clock of an object's last access (o->lru): store.c. */
uint32_t storeLruClock(void);
/* Sets a complete object's creation time (the wall clock's, 0 unknown)
 * and its monotonic twin; storeObjYoung: created less than ms ago, by the
 * monotonic clock (REPLICA.CLEAR's "just written"). */
void storeObjSetCreated(storeObj *o, long long wall_ms);
int storeObjYoung(const storeObj *o, long long ms);
/* Holds (HOLD.REPLICAS, t_store.c): a reader that keeps reading an object's
 * bytes in place for as long as it wants. Add takes one on o (and keeps its
 * header alive); Drop ends one, leaving the version leased for linger ms
 * more (a connection that closed: its process may still be reading). */
void storeHoldAdd(storeObj *o);
void storeHoldDrop(storeObj *o, long long linger);
uint64_t storeHoldsLive(void);

/* Keys. Lookups expire lazily; the Read form also counts hits/misses and
 * refreshes the LRU clock. */
storeObj *storeLookupRead(sds key);
#define STORE_LOOKUP_NONOTIFY (1 << 0) /* a miss is no keymiss event (a write's existence check) */
storeObj *storeLookupReadFlags(sds key, int flags);
storeObj *storeLookupWrite(sds key);
/* Counts a hit or miss but leaves the LRU clock alone (Redis's
 * LOOKUP_NOTOUCH): TTL, TYPE and OBJECT look without making a key young. */
storeObj *storeLookupNoTouch(sds key);
void storeSet(sds key, storeObj *o, long long expire_ms, int keepttl); /* takes o's reference */
int storeDelete(sds key);
long long storeGetExpire(sds key);                /* -1: none */
int storeKeyPresent(sds key);    /* in the keyspace, expired or not; no side effect */
storeObj *storePeek(sds key, long long *expire_ms); /* the object, expired or not; no side effect */
int storeKeyIsExpired(sds key);  /* has a TTL that has passed (deleted yet or not) */
void storeSetExpire(sds key, long long when_ms);  /* key must exist */
int storeRemoveExpire(sds key);
void storeFlush(void);
/* Keys about to arrive in one go (a log's load, a full sync): the keyspace
 * sized for them now, and each slot index created meanwhile for its share
 * of nslots slots (0: no cluster), so that neither is grown and rehashed
 * key by key. A hint: the caller bounds keys. storePresizeDone ends the
 * slot indexes' part. */
void storePresize(unsigned long keys, int nslots);
void storePresizeDone(void);
/* FLUSHALL ASYNC: the keyspace is empty at once, what it held is freed in
 * slices by a timer (lazyfree.h: its cron, room-making and count). */
void storeFlushAsync(void);
void storeReapStaleReplicas(void);   /* a segment went away: start the reaper */
void storeReaperCron(long long budget_us);
storeObj *storePendingLookup(sds key);
void storePendingAdd(sds key, storeObj *o);       /* takes o's reference; ext->put_owner set */
storeObj *storePendingUnlink(sds key);            /* gives the reference back */
void storePendingAbandon(storeObj *o);            /* drops it, space reused after put-release-timeout */
unsigned long storePendingSize(void);
/* Gives back pending puts no one will end: their connection closed (at
 * once, then put-release-timeout for a writer still copying), or older
 * than put-timeout + put-release-timeout (a connection alive but silent). */
void storePendingCron(long long budget_us);
void storeObjSetHardPin(storeObj *o, int on);     /* PIN HARD / UNPIN, keeping the counts right */
unsigned long storeSize(void);
unsigned long storeExpiresSize(void);
int storeDeleteKeyForEviction(sds key);  /* evict.c: delete without expiry checks */

/* Background work, in bounded slices. */
void storeActiveExpireCycle(long long budget_us);
void storeDeferredFreeCron(void);
void storeRehashCron(long long budget_us);
void storeGetStats(storeStats *st);
void storeResetStats(void);

/* Eviction's rules (evict.c): make room only where it would then be enough.
 * storeEvictProtected: the key being written, never evicted to make room
 * for its own write (NULL: none). */
extern sds storeEvictProtected;
/* This node is a replica (replication_failover.c sets it): no expiry or
 * eviction of its own; an expired key reads as missing until its primary's DEL. */
extern int storeReplicaMode;
int storeEvictionCouldFit(segment *s, uint64_t size);
/* Bumped whenever an extent stops being a wall to eviction (evict.c). */
extern uint64_t storeWallsGone;
/* maxmemory counts the dataset: the pool's bytes in use plus the heap the
 * keys and objects take (storeDatasetHeap, O(1)), as Redis counts
 * used_memory. */
uint64_t storeDatasetHeap(void);
uint64_t storeDatasetUsed(void);
/* C_OK: under maxmemory (evicting if the policy allows). cost: at least
 * what the command about to run can add to the heap. */
int storeMakeRoomForDataset(uint64_t cost, uint64_t placed); /* placed: the command's values already in the pool */

/* evict.c */
int evictOne(segment *only);  /* only: evict objects with a replica there (NULL: any) */
/* 0: never evicted; 1: evictable; 2: only once nothing unpinned is left (soft-pinned). */
int evictClass(const storeObj *o);
void storeEvictionCron(long long budget_us);
void evictResetPool(void);
/* Whether evicting everything evictable now would leave `need` contiguous
 * bytes in s, the extent (poff, psize) of the key being written counted as
 * a wall (psize 0: none), and the walls with it leave `need` under `limit`
 * (the allocator's cap: maxmemory on the pool; 0: none). */
int evictRunFits(segment *s, uint64_t need, uint64_t poff, uint64_t psize, uint64_t limit);
void evictFitStats(uint64_t *scans, uint64_t *extents);

#endif
