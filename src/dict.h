/* dict.h -- in-memory hash table with incremental rehashing.
 *
 * The keyspace of mooncake-server lives in one of these, so it has to hold
 * ten million keys without a pause: growing or shrinking never moves the
 * whole table at once. Instead a second table is allocated and buckets move
 * over a few at a time, on every lookup/insert/delete and from the server
 * cron (dictRehashMicroseconds). See dict.c for the design and invariants.
 *
 * Keys and values are opaque pointers; a dictType says how to hash, compare
 * and free them. The dict owns whatever the destructors free: dictDelete,
 * dictEmpty and dictRelease call them, dictUnlink does not (the caller gets
 * the entry and later hands it to dictFreeUnlinkedEntry).
 *
 * Not thread safe: one dict is used by one thread at a time.
 */
#ifndef DICT_H
#define DICT_H

#include <stdint.h>
#include <stddef.h>

#define DICT_OK 0
#define DICT_ERR 1

/* Three pointers, nothing else: with ten million keys every extra word in
 * here costs 80 MB. The hash is recomputed when a bucket moves instead of
 * being cached in the entry. */
typedef struct dictEntry {
    void *key;
    void *val;
    struct dictEntry *next;     /* next entry in the same bucket */
} dictEntry;

typedef struct dictType {
    uint64_t (*hashFunction)(const void *key);
    int (*keyCompare)(const void *key1, const void *key2);  /* nonzero if equal */
    void (*keyDestructor)(void *key);   /* may be NULL */
    void (*valDestructor)(void *val);   /* may be NULL */
} dictType;

/* Exposed so that callers can read the counters cheaply; change it only
 * through the functions below. table[0] is the live table; table[1] exists
 * only while rehashing (rehashidx != -1), when entries are moving from
 * table[0] into it. size_exp is -1 for a table that is not allocated. */
typedef struct dict {
    dictType *type;
    dictEntry **table[2];
    unsigned long used[2];      /* entries in each table */
    long rehashidx;             /* next table[0] bucket to move, or -1 */
    int pauserehash;            /* >0: no bucket moves and no shrinking */
    signed char size_exp[2];    /* table size is 1 << size_exp */
} dict;

typedef struct dictIterator dictIterator;
typedef void dictScanFunction(void *privdata, const dictEntry *de);

/* Smallest table ever allocated. */
#define DICT_HT_INITIAL_EXP 2
#define DICT_HT_INITIAL_SIZE (1UL << DICT_HT_INITIAL_EXP)

static inline void *dictGetKey(const dictEntry *de) { return de->key; }
static inline void *dictGetVal(const dictEntry *de) { return de->val; }

/* Prefetching (prefetch.c). Both only read the dict's own arrays, never
 * an entry, and are only hints: a lookup made later, after the table may
 * have grown or rehashed, finds the right entry whatever they returned.
 * dictPrefetchBucket asks for the bucket slot of hash h (in both tables
 * while rehashing); dictBucketHead returns the first entry of the bucket
 * the key of hash h lives in, or NULL. */
static inline void dictPrefetchBucket(const dict *d, uint64_t h) {
    for (int t = 0; t <= 1; t++) {
        if (d->table[t] != NULL) __builtin_prefetch(&d->table[t][h & ((1UL << d->size_exp[t]) - 1)]);
        if (d->rehashidx == -1) break;
    }
}

static inline dictEntry *dictBucketHead(const dict *d, uint64_t h) {
    if (d->table[0] == NULL) return NULL;
    unsigned long idx = (unsigned long)h & ((1UL << d->size_exp[0]) - 1);
    /* Buckets below rehashidx have moved to table[1]. */
    if (d->rehashidx != -1 && (long)idx < d->rehashidx) {
        if (d->table[1] == NULL) return NULL;
        idx = (unsigned long)h & ((1UL << d->size_exp[1]) - 1);
        return d->table[1][idx];
    }
    return d->table[0][idx];
}

/* Life cycle. */
dict *dictCreate(dictType *type);
void dictRelease(dict *d);
/* Frees a dict nobody uses any more in slices of about `work` entries:
 * 1 once d itself is freed (dict.c). */
int dictReleaseSteps(dict *d, unsigned long *cursor, unsigned long work);
/* Frees every entry (calling destructors) and both tables. callback, if not
 * NULL, is called every 65536 buckets so that a caller emptying a huge dict
 * can keep serving (e.g. process events) in between. */
void dictEmpty(dict *d, void (*callback)(dict *));
/* Pre-size the table for `size` entries (loading, benchmarks). DICT_ERR if
 * rehashing, if size is below the current entry count, or if the table
 * already has that size. */
int dictExpand(dict *d, unsigned long size);

/* Insertion and lookup. */
int dictAdd(dict *d, void *key, void *val);     /* DICT_ERR if key exists */
/* Adds an entry with val NULL for the caller to fill in, or returns NULL
 * and sets *existing (if not NULL) to the entry already holding the key. */
dictEntry *dictAddRaw(dict *d, void *key, dictEntry **existing);
dictEntry *dictFind(dict *d, const void *key);
void *dictFetchValue(dict *d, const void *key); /* val, or NULL if missing */

/* Removal. dictDelete returns DICT_OK if the key was there. dictUnlink
 * detaches the entry without destroying it, so the caller can still use
 * key and val (e.g. reply with the old value, free it lazily). */
int dictDelete(dict *d, const void *key);
dictEntry *dictUnlink(dict *d, const void *key);
void dictFreeUnlinkedEntry(dict *d, dictEntry *he);   /* NULL is a no-op */

/* Counters. dictMemUsage counts the dict struct, bucket arrays and entries,
 * not what keys and values point to. */
size_t dictSize(const dict *d);
size_t dictBuckets(const dict *d);
size_t dictMemUsage(const dict *d);

/* Rehashing. dictRehash moves up to n non-empty buckets (visiting at most
 * 10*n empty ones) and returns 1 if there is more to move. Both functions do
 * nothing while rehashing is paused. dictRehashMicroseconds moves buckets in
 * batches of 100 until `us` have passed and returns the buckets moved. */
int dictIsRehashing(const dict *d);
int dictRehash(dict *d, int n);
int dictRehashMicroseconds(dict *d, long long us);
void dictPauseRehashing(dict *d);
void dictResumeRehashing(dict *d);

/* Sampling. dictGetRandomKey picks a random non-empty bucket, then a random
 * entry in its chain: entries in long chains are slightly less likely, which
 * is fine for eviction and expiry sampling. dictGetSomeKeys stores up to
 * `count` entries found from a random position and returns how many; it is
 * much cheaper than `count` random keys, may return fewer than asked (sparse
 * table) and, rarely, the same entry twice. */
dictEntry *dictGetRandomKey(dict *d);
unsigned int dictGetSomeKeys(dict *d, dictEntry **des, unsigned int count);

/* Stateless cursor iteration (SCAN). Start with cursor 0, feed back the
 * returned cursor until it is 0 again. Every entry that is present from the
 * first call to the last is passed to fn at least once, even if the table
 * grows, shrinks or rehashes between calls; some may be passed twice. fn may
 * delete the entry it is given, nothing else. */
unsigned long dictScan(dict *d, unsigned long cursor, dictScanFunction *fn,
                       void *privdata);

/* Safe iterator: pauses rehashing until released, so every entry present
 * for the whole iteration is returned exactly once. The entry just returned
 * may be deleted; other deletions and additions are allowed too but an
 * added entry may or may not be returned, and deleting an entry other than
 * the one just returned may free the one the iterator will return next.
 * Release every iterator before dictEmpty or dictRelease. */
dictIterator *dictGetSafeIterator(dict *d);
dictEntry *dictNext(dictIterator *it);
void dictReleaseIterator(dictIterator *it);

/* Hashing. The seed should be random per process (hash flooding). */
void dictSetHashSeed(const uint8_t seed[16]);
const uint8_t *dictGetHashSeed(void);
uint64_t dictGenHashFunction(const void *buf, size_t len);
/* Same, but ASCII case-insensitive: for command names and config keys. */
uint64_t dictGenCaseHashFunction(const void *buf, size_t len);
/* For dicts keyed by NUL-terminated strings (node ids, segment names):
 * the hash and the equality of a dictType. */
uint64_t dictCStrHash(const void *key);
int dictCStrEqual(const void *a, const void *b);
/* ... and by sds strings (binary-safe: their lengths, not a NUL). */
uint64_t dictSdsHash(const void *key);
int dictSdsEqual(const void *a, const void *b);
/* ... and by integers stored in the key pointer (segment and client ids). */
uint64_t dictIntHash(const void *key);
int dictIntEqual(const void *a, const void *b);

/* SipHash (siphash.c). siphash() is SipHash-1-2, the variant the dict uses
 * for speed; siphash24() is the standard SipHash-2-4, kept for checking the
 * implementation against the paper's test vectors and for callers that want
 * the stronger function. k is the 128-bit key. */
uint64_t siphash(const uint8_t *in, size_t len, const uint8_t k[16]);
uint64_t siphash_nocase(const uint8_t *in, size_t len, const uint8_t k[16]);
uint64_t siphash24(const uint8_t *in, size_t len, const uint8_t k[16]);

#endif
