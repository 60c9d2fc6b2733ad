/* dict.c -- hash table with incremental rehashing.
 *
 * Design
 * ------
 * Separate chaining over a power-of-two bucket array, so a bucket index is
 * `hash & mask` and an entry is just {key, val, next}. A dict has two such
 * tables. Normally only table[0] exists. When it must grow (load factor 1)
 * or shrink (below 1/8), table[1] is allocated at the new size and the dict
 * enters the rehashing state: rehashidx is the next table[0] bucket to move.
 * Every lookup, insert and delete moves one bucket, and the server cron calls
 * dictRehashMicroseconds to move more while idle. When table[0] is empty it
 * is freed and table[1] becomes table[0]. No single operation ever touches
 * more than a bounded number of buckets, so a ten-million-key table resizes
 * without stalling the event loop; the price is that lookups during a rehash
 * may look in two tables.
 *
 * Invariants
 * ----------
 *  - size_exp[i] == -1  <=>  table[i] == NULL  <=>  size 0.
 *  - rehashidx == -1 when not rehashing; table[1] is then NULL.
 *  - While rehashing, table[0] buckets below rehashidx are empty: every entry
 *    is in table[0] at index >= rehashidx or in table[1]. Lookups skip the
 *    moved part of table[0] for that reason.
 *  - New entries go to table[1] while rehashing, so table[0] only shrinks
 *    and the rehash always finishes.
 *  - A key is in at most one table, at bucket hash(key) & mask of that table.
 *
 * Pausing
 * -------
 * pauserehash > 0 (a safe iterator or dictScan is walking the buckets) stops
 * all bucket moves and forbids starting a shrink, so positions do not change
 * under the walker. Growing may still start (table[1] is allocated, new keys
 * go there) because it moves nothing; refusing it would let chains grow
 * without bound while a slow iteration runs.
 *
 * Scan
 * ----
 * dictScan keeps no state between calls: the cursor is a bucket index
 * incremented in bit-reversed order (high bits first). For a table of size
 * 2^n, the buckets still to visit after cursor v are exactly those whose
 * reversed index is >= reversed(v). Because bucket i of a 2^n table splits
 * into buckets i and i+2^n of the 2^(n+1) table (and two buckets merge when
 * shrinking), that set of "not yet visited" keys is the same whatever size
 * the table has at the next call: a resize can cause repeats, never misses.
 * While rehashing both tables are visited: the small table's bucket v, then
 * every bucket of the big table that expands it.
 *
 * Allocation
 * ----------
 * dict_malloc/dict_calloc/dict_free are plain libc here; the server maps them
 * to its own allocator. A NULL result aborts: a dict that silently failed to
 * insert would corrupt the keyspace, and there is no useful recovery.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* clock_gettime under -std=c11 */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dict.h"
#include "sds.h"

#include "zmalloc.h"

/* Through zmalloc so INFO used_memory counts tables and entries. */
#define dict_malloc zmalloc
#define dict_calloc(n, size) zcalloc((n) * (size))
#define dict_free zfree

/* Refuse to grow beyond this many buckets (2^62 pointers cannot exist
 * anyway); keeps shifts well defined. */
#define DICT_MAX_EXP 62

/* Shrink when fewer than 1 entry per DICT_SHRINK_RATIO buckets. */
#define DICT_SHRINK_RATIO 8

/* dictEmpty yields to its callback after this many buckets. */
#define DICT_EMPTY_CALLBACK_EVERY 65536

struct dictIterator {
    dict *d;
    long index;         /* bucket being walked in table[table] */
    int table;
    dictEntry *entry;   /* last returned */
    dictEntry *next;    /* saved before returning entry, so it can be freed */
};

static uint8_t dict_hash_seed[16];

/* ------------------------------- helpers --------------------------------- */

static void dictPanic(const char *msg) {
    fprintf(stderr, "dict: %s\n", msg);
    abort();
}

static void *dictAllocOrDie(size_t n) {
    void *p = dict_malloc(n);
    if (p == NULL) dictPanic("out of memory");
    return p;
}

static dictEntry **dictAllocTable(unsigned long n) {
    dictEntry **t = dict_calloc(n, sizeof(dictEntry *));
    if (t == NULL) dictPanic("out of memory allocating a bucket array");
    return t;
}

static inline unsigned long tableSize(const dict *d, int i) {
    return d->size_exp[i] < 0 ? 0 : 1UL << d->size_exp[i];
}

static inline unsigned long tableMask(const dict *d, int i) {
    return d->size_exp[i] < 0 ? 0 : (1UL << d->size_exp[i]) - 1;
}

static inline uint64_t dictHashKey(const dict *d, const void *key) {
    return d->type->hashFunction(key);
}

/* Pointer equality first: callers often look up with the stored key itself
 * (e.g. expiry sampling), and it saves a call. */
static inline int dictCompareKeys(const dict *d, const void *k1, const void *k2) {
    return k1 == k2 || d->type->keyCompare(k1, k2);
}

static inline void dictFreeEntryData(dict *d, dictEntry *de) {
    if (d->type->keyDestructor) d->type->keyDestructor(de->key);
    if (d->type->valDestructor) d->type->valDestructor(de->val);
}

/* Smallest exponent with 1 << exp >= size, at least the initial size. */
static signed char dictNextExp(unsigned long size) {
    signed char e = DICT_HT_INITIAL_EXP;
    while (e < DICT_MAX_EXP && (1UL << e) < size) e++;
    return e;
}

/* splitmix64: tiny, fast, statistically fine for picking buckets. Sampling
 * does not need to be unpredictable, only spread out. Thread-local so two
 * threads using two dicts never race on it. */
static _Thread_local uint64_t dict_rand_state = 0x2545f4914f6cdd1dULL;

static uint64_t dictRandom(void) {
    uint64_t z = (dict_rand_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void dictReset(dict *d, int i) {
    d->table[i] = NULL;
    d->size_exp[i] = -1;
    d->used[i] = 0;
}

/* ------------------------------ life cycle ------------------------------- */

dict *dictCreate(dictType *type) {
    dict *d = dictAllocOrDie(sizeof(*d));
    d->type = type;
    dictReset(d, 0);
    dictReset(d, 1);
    d->rehashidx = -1;
    d->pauserehash = 0;
    return d;
}

/* Free every entry of table i and the table itself. */
static void dictClearTable(dict *d, int i, void (*callback)(dict *)) {
    unsigned long size = tableSize(d, i);
    for (unsigned long b = 0; b < size && d->used[i] > 0; b++) {
        if (callback && (b & (DICT_EMPTY_CALLBACK_EVERY - 1)) == 0) callback(d);
        dictEntry *de = d->table[i][b];
        while (de) {
            dictEntry *next = de->next;
            dictFreeEntryData(d, de);
            dict_free(de);
            d->used[i]--;
            de = next;
        }
        d->table[i][b] = NULL;
    }
    dict_free(d->table[i]);
    dictReset(d, i);
}

void dictEmpty(dict *d, void (*callback)(dict *)) {
    dictClearTable(d, 0, callback);
    dictClearTable(d, 1, callback);
    d->rehashidx = -1;
    /* pauserehash is left alone: it belongs to whoever paused. */
}

void dictRelease(dict *d) {
    if (d == NULL) return;
    dictEmpty(d, NULL);
    dict_free(d);
}

/* Frees about `work` buckets and entries of d, a dict nobody uses any more,
 * from where the last call stopped (*cursor starts at 0); the call that
 * frees the last entry frees d too and returns 1. A keyspace dropped at
 * once is freed so, in slices (FLUSHALL ASYNC): the destructors run as
 * dictEmpty would run them, only not all in one go. */
int dictReleaseSteps(dict *d, unsigned long *cursor, unsigned long work) {
    for (int i = 0; i < 2; i++) {
        if (d->table[i] == NULL) continue; /* done by an earlier call, or never allocated */
        unsigned long size = tableSize(d, i);
        while (*cursor < size && d->used[i] > 0) {
            if (work == 0) return 0;
            work--;
            dictEntry *de = d->table[i][*cursor];
            while (de) {
                dictEntry *next = de->next;
                dictFreeEntryData(d, de);
                dict_free(de);
                d->used[i]--;
                if (work) work--;
                de = next;
            }
            d->table[i][*cursor] = NULL;
            (*cursor)++;
        }
        dict_free(d->table[i]);
        dictReset(d, i);
        *cursor = 0;
    }
    dict_free(d);
    return 1;
}

/* ------------------------------ resizing --------------------------------- */

/* Start a resize to the table size that fits `size` entries, or, if nothing
 * is allocated yet, allocate table[0] directly. */
static int dictResize(dict *d, unsigned long size) {
    if (dictIsRehashing(d) || size < d->used[0]) return DICT_ERR;
    signed char exp = dictNextExp(size);
    if (exp == d->size_exp[0]) return DICT_ERR;

    dictEntry **t = dictAllocTable(1UL << exp);
    if (d->table[0] == NULL) {
        d->table[0] = t;
        d->size_exp[0] = exp;
        return DICT_OK;
    }
    d->table[1] = t;
    d->size_exp[1] = exp;
    d->used[1] = 0;
    d->rehashidx = 0;
    return DICT_OK;
}

int dictExpand(dict *d, unsigned long size) {
    if (size <= tableSize(d, 0)) return DICT_ERR;
    return dictResize(d, size);
}

/* Called before every insert. Growing to used+1 rounds up to double the
 * size, so right after a resize the load factor is 1/2. */
static void dictExpandIfNeeded(dict *d) {
    if (dictIsRehashing(d)) return;
    if (d->table[0] == NULL) {
        dictResize(d, DICT_HT_INITIAL_SIZE);
    } else if (d->used[0] >= tableSize(d, 0) && d->size_exp[0] < DICT_MAX_EXP) {
        dictResize(d, d->used[0] + 1);
    }
}

/* Called after deletes. The target is twice the entries, the same load
 * factor (1/2) a grow leaves behind, so that a few inserts after a shrink
 * do not immediately trigger a grow. */
static void dictShrinkIfNeeded(dict *d) {
    if (dictIsRehashing(d) || d->pauserehash > 0) return;
    unsigned long size = tableSize(d, 0);
    if (size > DICT_HT_INITIAL_SIZE && d->used[0] < size / DICT_SHRINK_RATIO)
        dictResize(d, d->used[0] * 2);
}

/* Move a whole bucket of table[0] into table[1]. */
static void dictRehashBucket(dict *d, unsigned long idx) {
    dictEntry *de = d->table[0][idx];
    unsigned long mask1 = tableMask(d, 1);
    /* When shrinking, the new index is just the old one masked, since both
     * are low bits of the same hash: no need to rehash the key. */
    int shrinking = d->size_exp[1] < d->size_exp[0];

    while (de) {
        dictEntry *next = de->next;
        unsigned long h = shrinking ? (idx & mask1)
                                    : (unsigned long)(dictHashKey(d, de->key) & mask1);
        de->next = d->table[1][h];
        d->table[1][h] = de;
        d->used[0]--;
        d->used[1]++;
        de = next;
    }
    d->table[0][idx] = NULL;
}

/* If table[0] has been fully moved, make table[1] the live table. */
static int dictCheckRehashDone(dict *d) {
    if (d->used[0] != 0) return 0;
    int was_shrink = d->size_exp[1] < d->size_exp[0];
    dict_free(d->table[0]);
    d->table[0] = d->table[1];
    d->size_exp[0] = d->size_exp[1];
    d->used[0] = d->used[1];
    dictReset(d, 1);
    d->rehashidx = -1;
    /* Deletes made during a shrink could not start another (one resize at
     * a time), so the result may already be too sparse: a mass delete would
     * otherwise leave a big table behind once deletes stop. Not after a
     * grow, so that dictExpand() pre-sizing survives until it is filled. */
    if (was_shrink) dictShrinkIfNeeded(d);
    return 1;
}

int dictRehash(dict *d, int n) {
    if (!dictIsRehashing(d)) return 0;
    if (d->pauserehash > 0) return 1;

    /* Bound the empty buckets visited too, or a sparse table (after many
     * deletes) could make one step scan millions of NULLs. */
    long empty_visits = (long)n * 10;
    unsigned long size0 = tableSize(d, 0);

    while (n-- > 0 && d->used[0] != 0) {
        /* used[0] != 0 guarantees a non-empty bucket at or after rehashidx. */
        while (d->table[0][d->rehashidx] == NULL) {
            d->rehashidx++;
            if ((unsigned long)d->rehashidx >= size0) dictPanic("rehashidx overflow");
            if (--empty_visits == 0) return 1;
        }
        dictRehashBucket(d, (unsigned long)d->rehashidx);
        d->rehashidx++;
    }
    dictCheckRehashDone(d);
    /* Finishing may have started a shrink: that is more to do, too. */
    return dictIsRehashing(d);
}

static inline void dictRehashStep(dict *d) {
    if (d->pauserehash == 0) dictRehash(d, 1);
}

static long long monotonicUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int dictRehashMicroseconds(dict *d, long long us) {
    if (d->pauserehash > 0) return 0;
    long long start = monotonicUs();
    int moved = 0;
    while (dictRehash(d, 100)) {
        moved += 100;
        if (monotonicUs() - start > us) break;
    }
    return moved;
}

void dictPauseRehashing(dict *d) {
    d->pauserehash++;
}

void dictResumeRehashing(dict *d) {
    if (--d->pauserehash < 0) dictPanic("unbalanced dictResumeRehashing");
    /* Deletes made while paused could not shrink; catch up now. */
    if (d->pauserehash == 0) dictShrinkIfNeeded(d);
}

int dictIsRehashing(const dict *d) {
    return d->rehashidx != -1;
}

/* ------------------------------ operations ------------------------------- */

/* Look the key up in both tables. Returns the entry or NULL; if linkp is
 * given, also the link that points to it (for unlinking) and its table. */
static dictEntry *dictLookup(dict *d, const void *key, uint64_t h,
                             dictEntry ***linkp, int *tablep) {
    for (int t = 0; t <= 1; t++) {
        if (d->table[t] != NULL) {
            unsigned long idx = (unsigned long)h & tableMask(d, t);
            /* Buckets below rehashidx have already moved to table[1]. */
            if (!(t == 0 && dictIsRehashing(d) && (long)idx < d->rehashidx)) {
                dictEntry **link = &d->table[t][idx];
                for (dictEntry *de = *link; de; link = &de->next, de = *link) {
                    if (dictCompareKeys(d, key, de->key)) {
                        if (linkp) *linkp = link;
                        if (tablep) *tablep = t;
                        return de;
                    }
                }
            }
        }
        if (!dictIsRehashing(d)) break;
    }
    return NULL;
}

dictEntry *dictAddRaw(dict *d, void *key, dictEntry **existing) {
    if (dictIsRehashing(d)) dictRehashStep(d);
    dictExpandIfNeeded(d);

    uint64_t h = dictHashKey(d, key);
    dictEntry *de = dictLookup(d, key, h, NULL, NULL);
    if (de) {
        if (existing) *existing = de;
        return NULL;
    }
    /* Prepend: recently added keys are often looked up soon after. */
    int t = dictIsRehashing(d) ? 1 : 0;
    unsigned long idx = (unsigned long)h & tableMask(d, t);
    de = dictAllocOrDie(sizeof(*de));
    de->key = key;
    de->val = NULL;
    de->next = d->table[t][idx];
    d->table[t][idx] = de;
    d->used[t]++;
    return de;
}

int dictAdd(dict *d, void *key, void *val) {
    dictEntry *de = dictAddRaw(d, key, NULL);
    if (de == NULL) return DICT_ERR;
    de->val = val;
    return DICT_OK;
}

dictEntry *dictFind(dict *d, const void *key) {
    if (dictSize(d) == 0) return NULL;
    if (dictIsRehashing(d)) dictRehashStep(d);
    return dictLookup(d, key, dictHashKey(d, key), NULL, NULL);
}

void *dictFetchValue(dict *d, const void *key) {
    dictEntry *de = dictFind(d, key);
    return de ? de->val : NULL;
}

dictEntry *dictUnlink(dict *d, const void *key) {
    if (dictSize(d) == 0) return NULL;
    if (dictIsRehashing(d)) dictRehashStep(d);

    dictEntry **link;
    int t;
    dictEntry *de = dictLookup(d, key, dictHashKey(d, key), &link, &t);
    if (de == NULL) return NULL;
    *link = de->next;
    de->next = NULL;
    d->used[t]--;
    dictShrinkIfNeeded(d);
    return de;
}

void dictFreeUnlinkedEntry(dict *d, dictEntry *he) {
    if (he == NULL) return;
    dictFreeEntryData(d, he);
    dict_free(he);
}

int dictDelete(dict *d, const void *key) {
    dictEntry *de = dictUnlink(d, key);
    if (de == NULL) return DICT_ERR;
    dictFreeUnlinkedEntry(d, de);
    return DICT_OK;
}

size_t dictSize(const dict *d) {
    return d->used[0] + d->used[1];
}

size_t dictBuckets(const dict *d) {
    return tableSize(d, 0) + tableSize(d, 1);
}

size_t dictMemUsage(const dict *d) {
    return sizeof(*d) + dictBuckets(d) * sizeof(dictEntry *) +
           dictSize(d) * sizeof(dictEntry);
}

/* ------------------------------- sampling -------------------------------- */

dictEntry *dictGetRandomKey(dict *d) {
    if (dictSize(d) == 0) return NULL;
    if (dictIsRehashing(d)) dictRehashStep(d);

    dictEntry *head;
    if (dictIsRehashing(d)) {
        /* Pick among the buckets that may be non-empty: table[0] from
         * rehashidx on, then all of table[1], as one index range. */
        unsigned long s0 = tableSize(d, 0), s1 = tableSize(d, 1);
        unsigned long first = (unsigned long)d->rehashidx;
        unsigned long span = s0 + s1 - first;
        do {
            unsigned long r = first + (unsigned long)(dictRandom() % span);
            head = r >= s0 ? d->table[1][r - s0] : d->table[0][r];
        } while (head == NULL);
    } else {
        unsigned long mask = tableMask(d, 0);
        do {
            head = d->table[0][dictRandom() & mask];
        } while (head == NULL);
    }

    /* Uniform within the chain; chains are short (load factor <= 1). */
    unsigned long len = 0;
    for (dictEntry *de = head; de; de = de->next) len++;
    unsigned long pick = (unsigned long)(dictRandom() % len);
    while (pick--) head = head->next;
    return head;
}

unsigned int dictGetSomeKeys(dict *d, dictEntry **des, unsigned int count) {
    if (dictSize(d) < count) count = (unsigned int)dictSize(d);
    if (count == 0) return 0;

    /* Pay for the sampling with some rehash work, like any other access. */
    for (unsigned int j = 0; j < count && dictIsRehashing(d); j++)
        dictRehashStep(d);

    int tables = dictIsRehashing(d) ? 2 : 1;
    unsigned long maxmask = tableMask(d, 0);
    if (tables == 2 && tableMask(d, 1) > maxmask) maxmask = tableMask(d, 1);

    /* Walk consecutive buckets from a random start, in both tables at the
     * same index. A run of empty buckets longer than we need means we are
     * in a sparse area: jump somewhere else. The step bound keeps a nearly
     * empty table from costing more than ~10 probes per wanted key. */
    unsigned long maxsteps = (unsigned long)count * 10;
    unsigned long i = (unsigned long)dictRandom() & maxmask;
    unsigned long emptylen = 0;
    unsigned int stored = 0;

    while (stored < count && maxsteps--) {
        for (int t = 0; t < tables; t++) {
            /* Moved part of table[0]: nothing there. */
            if (tables == 2 && t == 0 && i < (unsigned long)d->rehashidx) {
                /* And if the index is also past the end of table[1] (a
                 * shrink), no bucket at this index exists at all: resume
                 * at the first table[0] bucket not yet moved. */
                if (i >= tableSize(d, 1)) i = (unsigned long)d->rehashidx;
                else continue;
            }
            if (i >= tableSize(d, t)) continue;
            dictEntry *de = d->table[t][i];
            if (de == NULL) {
                emptylen++;
                if (emptylen >= 5 && emptylen > count) {
                    i = (unsigned long)dictRandom() & maxmask;
                    emptylen = 0;
                }
                continue;
            }
            emptylen = 0;
            for (; de && stored < count; de = de->next) des[stored++] = de;
            if (stored == count) return stored;
        }
        i = (i + 1) & maxmask;
    }
    return stored;
}

/* --------------------------------- scan ---------------------------------- */

/* Reverse the bits of v (logarithmic swap of halves, quarters, ...). */
static unsigned long rev(unsigned long v) {
    unsigned int s = 8 * sizeof(v);
    unsigned long mask = ~0UL;
    while ((s >>= 1) > 0) {
        mask ^= (mask << s);
        v = ((v >> s) & mask) | ((v << s) & ~mask);
    }
    return v;
}

/* Increment v in bit-reversed order, within the bits of mask. Setting the
 * unmasked bits first makes the carry fall off the top once all masked
 * bits were 1, which yields 0: the end of the scan. */
static inline unsigned long scanNext(unsigned long v, unsigned long mask) {
    v |= ~mask;
    v = rev(v);
    v++;
    return rev(v);
}

static void scanBucket(dictEntry *de, dictScanFunction *fn, void *privdata) {
    while (de) {
        dictEntry *next = de->next;     /* fn may delete de */
        fn(privdata, de);
        de = next;
    }
}

unsigned long dictScan(dict *d, unsigned long cursor, dictScanFunction *fn,
                       void *privdata) {
    if (dictSize(d) == 0) return 0;
    /* Like any access, pay one rehash step: a dict only ever scanned (and
     * emptied by the scan callback) must still finish its rehash. */
    if (dictIsRehashing(d)) dictRehashStep(d);

    /* fn may call dictFind & co; no bucket may move while we walk. */
    dictPauseRehashing(d);
    unsigned long v = cursor;

    if (!dictIsRehashing(d)) {
        unsigned long m0 = tableMask(d, 0);
        scanBucket(d->table[0][v & m0], fn, privdata);
        v = scanNext(v, m0);
    } else {
        int small = d->size_exp[0] <= d->size_exp[1] ? 0 : 1;
        int large = 1 - small;
        dictEntry **ts = d->table[small], **tl = d->table[large];
        unsigned long ms = tableMask(d, small), ml = tableMask(d, large);

        scanBucket(ts[v & ms], fn, privdata);
        /* The large table's buckets whose low bits equal the small
         * table's index: they hold what that small bucket would hold. */
        do {
            scanBucket(tl[v & ml], fn, privdata);
            v = scanNext(v, ml);
        } while (v & (ms ^ ml));
    }

    dictResumeRehashing(d);
    return v;
}

/* ------------------------------- iterator -------------------------------- */

dictIterator *dictGetSafeIterator(dict *d) {
    dictIterator *it = dictAllocOrDie(sizeof(*it));
    it->d = d;
    it->index = -1;
    it->table = 0;
    it->entry = NULL;
    it->next = NULL;
    dictPauseRehashing(d);
    return it;
}

dictEntry *dictNext(dictIterator *it) {
    dict *d = it->d;
    for (;;) {
        if (it->entry == NULL) {
            it->index++;
            if ((unsigned long)it->index >= tableSize(d, it->table)) {
                /* A grow may have started during the iteration: its new
                 * entries are in table[1], and nothing moved, so walking it
                 * after table[0] returns nothing twice. */
                if (it->table == 0 && dictIsRehashing(d)) {
                    it->table = 1;
                    it->index = 0;
                } else {
                    return NULL;
                }
            }
            it->entry = d->table[it->table][it->index];
        } else {
            it->entry = it->next;
        }
        if (it->entry) {
            it->next = it->entry->next;
            return it->entry;
        }
    }
}

void dictReleaseIterator(dictIterator *it) {
    if (it == NULL) return;
    dictResumeRehashing(it->d);
    dict_free(it);
}

/* -------------------------------- hashing -------------------------------- */

void dictSetHashSeed(const uint8_t seed[16]) {
    memcpy(dict_hash_seed, seed, sizeof(dict_hash_seed));
}

const uint8_t *dictGetHashSeed(void) {
    return dict_hash_seed;
}

uint64_t dictGenHashFunction(const void *buf, size_t len) {
    return siphash(buf, len, dict_hash_seed);
}

uint64_t dictGenCaseHashFunction(const void *buf, size_t len) {
    return siphash_nocase(buf, len, dict_hash_seed);
}

uint64_t dictCStrHash(const void *key) { return dictGenHashFunction(key, strlen(key)); }

int dictCStrEqual(const void *a, const void *b) { return strcmp(a, b) == 0; }

uint64_t dictSdsHash(const void *key) { return dictGenHashFunction(key, sdslen((sds)key)); }

int dictSdsEqual(const void *a, const void *b) {
    return sdslen((sds)a) == sdslen((sds)b) && memcmp(a, b, sdslen((sds)a)) == 0;
}

uint64_t dictIntHash(const void *key) {
    uint64_t v = (uint64_t)(uintptr_t)key;
    return dictGenHashFunction(&v, sizeof(v));
}

int dictIntEqual(const void *a, const void *b) { return a == b; }
