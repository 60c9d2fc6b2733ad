/* store.h -- the keyspace: keys, immutable value objects, expiry, eviction. */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include "sds.h"
#include "segment.h"

/* One immutable version of a value: an extent in a segment. Shared by the
 * keyspace and by replies still being written; the extent is freed when the
 * last reference goes, so a SET or DEL never pulls bytes from under a
 * reader. */
typedef struct storeObj {
    uint64_t offset;    /* in the segment: kept here so a read never has to
                         * touch the allocator's node array (a cache miss) */
    uint64_t len;
    uint32_t handle;    /* allocator handle in the segment */
    uint32_t refcount;
    uint32_t lru;       /* ms clock, truncated: see store.c */
    uint32_t segslot;   /* index in the segment table (32 bytes in all) */
} storeObj;

static inline segment *storeObjSegment(const storeObj *o) { return segtab[o->segslot]; }

typedef struct storeStats {
    uint64_t objects, bytes;
    uint64_t evictions, expired, oom;
    uint64_t pool_size, pool_used, pool_free, largest_free, free_ranges;
    uint64_t meta_bytes;    /* heap for keys, objects, tables, allocator */
} storeStats;

int storeInit(char *err, size_t errlen);
void storeShutdown(void);

/* Objects. */
storeObj *storeObjCreate(size_t len);          /* NULL: no space, even after eviction */
storeObj *storeObjCreateFrom(const void *p, size_t len);
extern char storeEmptyValue[1];
/* An empty value (Redis allows SET k "") owns no extent. */
static inline char *storeObjPtr(const storeObj *o) {
    if (o->handle == ALLOC_NONE) return storeEmptyValue;
    return segmentPtr(storeObjSegment(o), o->offset);
}
static inline void storeObjIncrRef(storeObj *o) { o->refcount++; }
void storeObjDecrRef(storeObj *o);

/* Keys. Lookups expire lazily; the Read form also counts hits/misses and
 * refreshes the LRU clock. */
storeObj *storeLookupRead(sds key);
storeObj *storeLookupWrite(sds key);
void storeSet(sds key, storeObj *o, long long expire_ms, int keepttl); /* takes o's reference */
int storeDelete(sds key);
long long storeGetExpire(sds key);                /* -1: none */
void storeSetExpire(sds key, long long when_ms);  /* key must exist */
int storeRemoveExpire(sds key);
void storeFlush(void);
uint64_t storeDropSegmentReplicas(segment *s);
unsigned long storeSize(void);
unsigned long storeExpiresSize(void);

/* Background work, in bounded slices. */
void storeActiveExpireCycle(long long budget_us);
void storeEvictionCron(long long budget_us);
void storeRehashCron(long long budget_us);
void storeGetStats(storeStats *st);
void storeResetStats(void);

#endif
