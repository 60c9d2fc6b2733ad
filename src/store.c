/* store.c -- keys, value objects, expiry and eviction over segment memory.
 *
 * Layout. Keys live in an incrementally rehashed dict (dict.c), sds key ->
 * storeObj*. Expiry times live in a second dict that shares the key sds, so
 * keys without a TTL cost nothing extra and active expiry samples only keys
 * that can expire. Value bytes live in a segment (the server's pool) at an
 * extent handed out by the segment's offset allocator; the storeObj header
 * (32 bytes) is all the heap a value costs.
 *
 * Immutability. An object is never written after it becomes visible. SET on
 * an existing key builds a new object and swaps the dict entry; the old one
 * is released when its last reference (the keyspace or a reply still being
 * sent from the pool) goes. So a slow reader can never see torn bytes, and
 * no command waits for a reader.
 *
 * Eviction (approximate LRU, as SPEC §3). Each object carries a 32-bit
 * millisecond clock of its last access; idle time is computed modulo 2^32,
 * so an object idle for more than ~49 days looks young: harmless for a
 * cache. Candidates come from random samples of the keyspace
 * (evict-samples per step) kept in a small pool ordered by idle time, so
 * each step evicts the oldest of what was seen, Redis-style. Two triggers:
 *  - an allocation fails: evict synchronously until it fits or nothing is
 *    left to evict (then the command gets -OOM and nothing changes);
 *  - pool use passes evict-high-watermark: schedule about evict-ratio of
 *    the objects and evict them in time-bounded slices from the event
 *    loop, so no command waits behind a big eviction round.
 */
#include "store.h"

#include <string.h>

#include "server.h"
#include "util.h"
#include "zmalloc.h"

#define EVPOOL_SIZE 16
#define EXPIRE_SAMPLE 20

typedef struct evictCandidate {
    uint32_t idle;
    sds key;  /* a copy: the key may be deleted before we get to it */
} evictCandidate;

static struct {
    uint64_t bytes;         /* sum of value lengths in the keyspace */
    uint64_t keybytes;      /* heap held by key strings */
    uint64_t evictions, expired, oom;
    evictCandidate pool[EVPOOL_SIZE];
    int poolLen;
} st;

/* ---- dict types ---------------------------------------------------------- */

static uint64_t keyHash(const void *key) { return dictGenHashFunction(key, sdslen((sds)key)); }

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
    storeObjDecrRef(o);
}

static dictType keyspaceType = {keyHash, keyCompare, keyDestructor, valDestructor};
static dictType expiresType = {keyHash, keyCompare, NULL, NULL};

/* ---- objects ------------------------------------------------------------- */

/* The clock is read once per event-loop iteration (server.mstime), not per
 * access: a gettimeofday per GET was 4% of a pipelined GET profile. */
static inline uint32_t lruClock(void) { return (uint32_t)server.mstime; }

static int evictOne(void);

char storeEmptyValue[1];

/* An allocation that fails evicts (policy permitting) until it fits. The
 * loop ends: every round either evicts an object or gives up. A value
 * larger than the whole segment gives up at once instead of emptying it. */
storeObj *storeObjCreate(size_t len) {
    segment *seg = server.self;
    uint64_t offset;
    if (len > seg->size) goto oom;
    for (;;) {
        uint32_t h = len ? allocAlloc(seg->alloc, len, &offset) : ALLOC_NONE;
        if (h != ALLOC_NONE || len == 0) {
            storeObj *o = zmalloc(sizeof(*o));
            o->offset = h != ALLOC_NONE ? offset : 0;
            o->len = len;
            o->handle = h;
            o->refcount = 1;
            o->lru = lruClock();
            o->segslot = seg->slot;
            if (h != ALLOC_NONE) seg->objects++;
            return o;
        }
        if (server.evict_policy == EVICT_NOEVICTION || !evictOne()) break;
    }
oom:
    st.oom++;
    return NULL;
}

storeObj *storeObjCreateFrom(const void *p, size_t len) {
    storeObj *o = storeObjCreate(len);
    if (o) memcpy(storeObjPtr(o), p, len);
    return o;
}

void storeObjDecrRef(storeObj *o) {
    serverAssert(o->refcount > 0);
    if (--o->refcount) return;
    if (o->handle != ALLOC_NONE) {
        segment *seg = storeObjSegment(o);
        allocFree(seg->alloc, o->handle);
        seg->objects--;
    }
    zfree(o);
}

/* ---- keys ---------------------------------------------------------------- */

int storeInit(char *err, size_t errlen) {
    server.keys = dictCreate(&keyspaceType);
    server.expires = dictCreate(&expiresType);
    server.self = segmentCreateLocal("self", (uint64_t)server.segment_size, server.segment_hugepages,
                                     (int)server.segment_numa_node, server.segment_prefault, err, errlen);
    if (server.self == NULL) return C_ERR;
    server.self->mounted_ms = mstime();
    segmentTableAdd(server.self); /* the first: id 1, slot 0 */
    return C_OK;
}

void storeShutdown(void) {
    dictRelease(server.expires);
    dictRelease(server.keys);
    server.expires = server.keys = NULL;
    for (int i = 0; i < st.poolLen; i++) sdsfree(st.pool[i].key);
    st.poolLen = 0;
    segmentTableRemove(server.self);
    segmentRelease(server.self);
    server.self = NULL;
}

long long storeGetExpire(sds key) {
    dictEntry *de = dictFind(server.expires, key);
    return de ? (long long)(intptr_t)de->val : -1;
}

/* Deletes through the expires dict first: it borrows the key sds that the
 * keyspace dict owns and frees. */
static int deleteKey(sds key) {
    dictDelete(server.expires, key);
    return dictDelete(server.keys, key) == DICT_OK;
}

/* Uses the loop's cached clock, as Redis does: every command of one
 * iteration sees the same "now", so a pipeline cannot observe a key
 * expiring halfway through it. */
static int expireIfNeeded(sds key) {
    if (dictSize(server.expires) == 0) return 0; /* skip the second hash */
    long long when = storeGetExpire(key);
    if (when < 0 || when > server.mstime) return 0;
    deleteKey(key);
    st.expired++;
    server.stat_expiredkeys++;
    return 1;
}

storeObj *storeLookupWrite(sds key) {
    expireIfNeeded(key);
    dictEntry *de = dictFind(server.keys, key);
    return de ? de->val : NULL;
}

storeObj *storeLookupRead(sds key) {
    storeObj *o = storeLookupWrite(key);
    if (o) {
        o->lru = lruClock();
        server.stat_keyspace_hits++;
    } else {
        server.stat_keyspace_misses++;
    }
    return o;
}

void storeSet(sds key, storeObj *o, long long expire_ms, int keepttl) {
    dictEntry *existing;
    dictEntry *de = dictAddRaw(server.keys, key, &existing);
    st.bytes += o->len;
    if (de) {
        de->key = sdsdup(key);
        st.keybytes += sdsAllocSize(de->key);
        de->val = o;
    } else {
        storeObj *old = existing->val;
        existing->val = o;
        st.bytes -= old->len;
        storeObjDecrRef(old);
        if (!keepttl) dictDelete(server.expires, key);
        de = existing;
    }
    if (expire_ms >= 0) {
        dictEntry *ee = dictAddRaw(server.expires, de->key, &existing);
        if (ee) ee->val = (void *)(intptr_t)expire_ms;
        else existing->val = (void *)(intptr_t)expire_ms;
    }
}

int storeDelete(sds key) {
    if (expireIfNeeded(key)) return 0;
    return deleteKey(key);
}

void storeSetExpire(sds key, long long when_ms) {
    dictEntry *kde = dictFind(server.keys, key);
    serverAssert(kde != NULL);
    dictEntry *existing;
    dictEntry *de = dictAddRaw(server.expires, kde->key, &existing);
    if (de) de->val = (void *)(intptr_t)when_ms;
    else existing->val = (void *)(intptr_t)when_ms;
}

int storeRemoveExpire(sds key) { return dictDelete(server.expires, key) == DICT_OK; }

void storeFlush(void) {
    dictEmpty(server.expires, NULL);
    dictEmpty(server.keys, NULL);
    for (int i = 0; i < st.poolLen; i++) sdsfree(st.pool[i].key);
    st.poolLen = 0;
    server.evict_pending = 0;
}

/* Replicas live only in the server's own pool until placement uses mounted
 * segments (issue 3's PUT.START): a mounted segment holds no replica yet, so
 * there is nothing to drop. The assertion marks the spot that must walk the
 * segment's objects once it can hold some. */
uint64_t storeDropSegmentReplicas(segment *s) {
    serverAssert(s->objects == 0);
    return 0;
}

unsigned long storeSize(void) { return dictSize(server.keys); }
unsigned long storeExpiresSize(void) { return dictSize(server.expires); }

/* ---- active expiry ------------------------------------------------------- */

/* Samples keys with a TTL and deletes the expired ones; keeps going while a
 * quarter or more of a sample was expired (many more are likely) and the
 * time budget lasts. Checking the clock every sample bounds the slice. */
void storeActiveExpireCycle(long long budget_us) {
    long long start = ustime();
    dictEntry *sample[EXPIRE_SAMPLE];
    sds keys[EXPIRE_SAMPLE];
    for (;;) {
        if (dictSize(server.expires) == 0) return;
        unsigned n = dictGetSomeKeys(server.expires, sample, EXPIRE_SAMPLE);
        long long now = mstime();
        unsigned nexp = 0;
        /* Collect first: deleting while holding sampled entries would leave
         * dangling pointers if a key appears twice in one sample. */
        for (unsigned i = 0; i < n; i++)
            if ((long long)(intptr_t)sample[i]->val <= now) keys[nexp++] = sdsdup(sample[i]->key);
        for (unsigned i = 0; i < nexp; i++) {
            if (storeGetExpire(keys[i]) >= 0 && storeGetExpire(keys[i]) <= now && deleteKey(keys[i]))
                st.expired++, server.stat_expiredkeys++;
            sdsfree(keys[i]);
        }
        if (nexp * 4 < EXPIRE_SAMPLE || n == 0) return;
        if (ustime() - start > budget_us) return;
    }
}

/* ---- eviction ------------------------------------------------------------ */

static void poolInsert(sds key, uint32_t idle) {
    int i;
    for (i = 0; i < st.poolLen; i++)
        if (sdslen(st.pool[i].key) == sdslen(key) && !memcmp(st.pool[i].key, key, sdslen(key)))
            return; /* already a candidate */
    /* Keep the pool sorted by idle, ascending: the best victim is last. */
    for (i = 0; i < st.poolLen && st.pool[i].idle < idle; i++)
        ;
    if (st.poolLen == EVPOOL_SIZE) {
        if (i == 0) return; /* younger than everything we hold */
        sdsfree(st.pool[0].key);
        memmove(st.pool, st.pool + 1, sizeof(st.pool[0]) * (size_t)(i - 1));
        i--;
    } else {
        memmove(st.pool + i + 1, st.pool + i, sizeof(st.pool[0]) * (size_t)(st.poolLen - i));
        st.poolLen++;
    }
    st.pool[i].key = sdsdup(key);
    st.pool[i].idle = idle;
}

static void poolFill(void) {
    dictEntry *sample[64];
    unsigned want = server.evict_samples > 64 ? 64 : (unsigned)server.evict_samples;
    unsigned n = dictGetSomeKeys(server.keys, sample, want);
    uint32_t now = lruClock();
    for (unsigned i = 0; i < n; i++) {
        storeObj *o = sample[i]->val;
        poolInsert(sample[i]->key, now - o->lru);
    }
}

/* Evicts the oldest object seen in samples. Returns 0 when nothing is left
 * to evict. Pool entries whose key is gone (or changed) are skipped. */
static int evictOne(void) {
    for (int attempts = 0; attempts < 16; attempts++) {
        if (dictSize(server.keys) == 0) return 0;
        poolFill();
        while (st.poolLen > 0) {
            evictCandidate *c = &st.pool[--st.poolLen];
            sds key = c->key;
            int deleted = deleteKey(key);
            sdsfree(key);
            if (deleted) {
                st.evictions++;
                server.stat_evictedkeys++;
                return 1;
            }
        }
    }
    return 0;
}

void storeEvictionCron(long long budget_us) {
    segment *seg = server.self;
    if (server.evict_policy == EVICT_NOEVICTION) {
        server.evict_pending = 0;
        return;
    }
    if (server.evict_pending == 0) {
        allocStats as;
        allocGetStats(seg->alloc, &as);
        if ((double)as.used <= server.evict_high_watermark * (double)seg->size) return;
        long long n = (long long)(server.evict_ratio * (double)dictSize(server.keys));
        server.evict_pending = n > 0 ? n : 1;
    }
    long long start = ustime();
    while (server.evict_pending > 0) {
        if (!evictOne()) {
            server.evict_pending = 0;
            break;
        }
        server.evict_pending--;
        if ((server.evict_pending & 15) == 0 && ustime() - start > budget_us) break;
    }
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
    out->evictions = st.evictions;
    out->expired = st.expired;
    out->oom = st.oom;
    out->pool_size = as.capacity;
    out->pool_used = as.used;
    out->pool_free = as.free;
    out->largest_free = as.largest_free;
    out->free_ranges = as.free_ranges;
    out->meta_bytes = dictMemUsage(server.keys) + dictMemUsage(server.expires) + as.metadata_bytes;
    /* Object headers are one fixed-size allocation each. */
    out->meta_bytes += st.keybytes + out->objects * sizeof(storeObj);
}

void storeResetStats(void) {
    st.evictions = st.expired = st.oom = 0;
}
