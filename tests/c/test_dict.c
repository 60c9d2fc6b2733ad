/* test_dict.c -- unit tests for dict.c and siphash.c.
 *
 * What matters most in the dict is what is hard to see from outside: that a
 * key stays findable while its bucket is between two tables, that SCAN
 * misses nothing while the table resizes under it, that a safe iterator
 * sees every entry once, and that every key and value is destroyed exactly
 * once. The tests below force those situations deliberately (resizes
 * between scan calls, lookups in the middle of a rehash) instead of hoping
 * random workloads hit them.
 *
 * Two key types: integers stored in the key pointer (no allocation, so heap
 * measurements see only the dict) and heap strings with counting
 * destructors (so ASAN catches leaks and double frees).
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dict.h"
#include "testhelp.h"

/* ------------------------------ key types -------------------------------- */

static uint64_t intHash(const void *key) {
    uintptr_t k = (uintptr_t)key;
    return dictGenHashFunction(&k, sizeof(k));
}

static int intCompare(const void *a, const void *b) {
    return a == b;
}

static dictType intType = {intHash, intCompare, NULL, NULL};

#define IK(i) ((void *)(uintptr_t)(i))
#define KI(p) ((unsigned long)(uintptr_t)(p))

static long key_destroyed, val_destroyed;

static uint64_t strHash(const void *key) {
    return dictGenHashFunction(key, strlen(key));
}

static int strCompare(const void *a, const void *b) {
    return strcmp(a, b) == 0;
}

static void strKeyFree(void *p) {
    key_destroyed++;
    free(p);
}

static void strValFree(void *p) {
    val_destroyed++;
    free(p);
}

static dictType strType = {strHash, strCompare, strKeyFree, strValFree};

static char *mkstr(const char *prefix, long i) {
    char buf[64];
    snprintf(buf, sizeof(buf), "%s:%ld", prefix, i);
    return strdup(buf);
}

static long long nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* All keys 1..n findable with their values. */
static int allIntKeysFindable(dict *d, unsigned long lo, unsigned long hi) {
    for (unsigned long i = lo; i <= hi; i++) {
        dictEntry *de = dictFind(d, IK(i));
        if (de == NULL || KI(de->val) != i * 3) return 0;
    }
    return 1;
}

static void finishRehash(dict *d) {
    while (dictRehash(d, 1000)) {}
}

/* ------------------------------- scan aids -------------------------------- */

typedef struct {
    unsigned char *seen;    /* seen[k] counts visits of base key k */
    unsigned long nbase;    /* base keys are 1..nbase */
    unsigned long calls;
    dict *d;
    int delete_visited;
} scanState;

static void scanCollect(void *privdata, const dictEntry *de) {
    scanState *st = privdata;
    unsigned long k = KI(de->key);
    st->calls++;
    if (k >= 1 && k <= st->nbase && st->seen[k] < 255) st->seen[k]++;
    if (st->delete_visited) dictDelete(st->d, de->key);
}

static int allBaseSeen(const scanState *st) {
    for (unsigned long k = 1; k <= st->nbase; k++)
        if (st->seen[k] == 0) return 0;
    return 1;
}

static long empty_callbacks;
static void emptyCallback(dict *d) {
    (void)d;
    empty_callbacks++;
}

int main(void) {
    uint8_t seed[16];
    for (int i = 0; i < 16; i++) seed[i] = (uint8_t)(i * 7 + 3);
    dictSetHashSeed(seed);

    TEST("siphash: SipHash-2-4 matches the paper's test vectors") {
        uint8_t k[16], msg[64];
        for (int i = 0; i < 16; i++) k[i] = (uint8_t)i;
        for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
        /* From the reference implementation's vector table (key 00..0f,
         * message 00..len-1) and the worked example in the paper (15 B). */
        CHECK(siphash24(msg, 0, k) == 0x726fdb47dd0e0e31ULL);
        CHECK(siphash24(msg, 1, k) == 0x74f839c593dc67fdULL);
        CHECK(siphash24(msg, 15, k) == 0xa129ca6149be45e5ULL);
    }

    TEST("siphash: 1-2 differs from 2-4, depends on seed, every length") {
        uint8_t k[16] = {0}, msg[64];
        for (int i = 0; i < 64; i++) msg[i] = (uint8_t)(i * 13);
        CHECK(siphash(msg, 15, k) != siphash24(msg, 15, k));
        int distinct = 1;
        for (size_t len = 1; len < 64; len++)
            if (siphash(msg, len, k) == siphash(msg, len - 1, k)) distinct = 0;
        CHECK(distinct);
        uint64_t h1 = dictGenHashFunction("hello", 5);
        uint8_t other[16] = {1};
        dictSetHashSeed(other);
        uint64_t h2 = dictGenHashFunction("hello", 5);
        dictSetHashSeed(seed);
        CHECK(h1 != h2);
        CHECK(dictGenHashFunction("hello", 5) == h1);
        CHECK(memcmp(dictGetHashSeed(), seed, 16) == 0);
    }

    TEST("siphash: case-insensitive variant") {
        const char *mixed = "HeLLo-World_ZAP[]@`{ 0123456789ABCDEFGHIJKLmnop";
        char lowerbuf[64];
        size_t n = strlen(mixed);
        for (size_t i = 0; i <= n; i++)
            lowerbuf[i] = (mixed[i] >= 'A' && mixed[i] <= 'Z') ? (char)(mixed[i] + 32) : mixed[i];
        int ok = 1;
        for (size_t len = 0; len <= n; len++) {
            if (dictGenCaseHashFunction(mixed, len) != dictGenHashFunction(lowerbuf, len)) ok = 0;
            if (dictGenCaseHashFunction(mixed, len) != dictGenCaseHashFunction(lowerbuf, len)) ok = 0;
        }
        CHECK(ok);
        /* '@' and '`', '[' and '{' differ by 32 but are not letters. */
        CHECK(dictGenCaseHashFunction("@[", 2) != dictGenCaseHashFunction("`{", 2));
    }

    TEST("dict: add, find, fetch, delete") {
        key_destroyed = val_destroyed = 0;
        dict *d = dictCreate(&strType);
        CHECK_EQ(dictSize(d), 0);
        CHECK_EQ(dictBuckets(d), 0);
        CHECK(dictFind(d, "nope") == NULL);
        CHECK(dictDelete(d, "nope") == DICT_ERR);
        CHECK(dictGetRandomKey(d) == NULL);
        for (long i = 0; i < 100; i++)
            CHECK(dictAdd(d, mkstr("k", i), mkstr("v", i)) == DICT_OK);
        CHECK_EQ(dictSize(d), 100);
        dictEntry *de = dictFind(d, "k:42");
        CHECK(de != NULL);
        if (de) CHECK(strcmp(dictGetVal(de), "v:42") == 0);
        CHECK(dictFetchValue(d, "k:43") != NULL && strcmp(dictFetchValue(d, "k:43"), "v:43") == 0);
        CHECK(dictFetchValue(d, "k:100") == NULL);
        CHECK(dictDelete(d, "k:42") == DICT_OK);
        CHECK(dictFind(d, "k:42") == NULL);
        CHECK(dictDelete(d, "k:42") == DICT_ERR);
        CHECK_EQ(dictSize(d), 99);
        CHECK_EQ(key_destroyed, 1);
        CHECK_EQ(val_destroyed, 1);
        dictRelease(d);
        CHECK_EQ(key_destroyed, 100);
        CHECK_EQ(val_destroyed, 100);
        dictRelease(NULL);
    }

    TEST("dict: duplicates refused, AddRaw reports the existing entry") {
        key_destroyed = val_destroyed = 0;
        dict *d = dictCreate(&strType);
        CHECK(dictAdd(d, strdup("a"), strdup("1")) == DICT_OK);
        char *dupk = strdup("a"), *dupv = strdup("2");
        CHECK(dictAdd(d, dupk, dupv) == DICT_ERR);
        dictEntry *existing = NULL;
        CHECK(dictAddRaw(d, dupk, &existing) == NULL);
        CHECK(existing != NULL && strcmp(existing->val, "1") == 0);
        CHECK(dictAddRaw(d, dupk, NULL) == NULL);
        CHECK_EQ(dictSize(d), 1);
        CHECK_EQ(key_destroyed, 0);     /* refusing does not take ownership */
        free(dupk);
        free(dupv);
        dictEntry *de = dictAddRaw(d, strdup("b"), &existing);
        CHECK(de != NULL && de->val == NULL);
        if (de) de->val = strdup("3");
        CHECK_EQ(dictSize(d), 2);
        dictRelease(d);
        CHECK_EQ(key_destroyed, 2);
        CHECK_EQ(val_destroyed, 2);
    }

    dict *big = dictCreate(&intType);
    const unsigned long N = 1000000;

    TEST("dict: 1M keys, every key findable in the middle of each rehash") {
        unsigned long checked_rehashes = 0, bounded = 1;
        int was = 0, ok = 1;
        for (unsigned long i = 1; i <= N; i++) {
            if (dictAdd(big, IK(i), IK(i * 3)) != DICT_OK) ok = 0;
            int now = dictIsRehashing(big);
            if (now && !was && i >= 65536) {
                /* The grow just started: almost everything must still be
                 * in the old table (nothing moved in bulk). */
                if (big->used[1] > 16) bounded = 0;
                /* Move part of the way, then look up everything. */
                dictRehash(big, (int)(dictBuckets(big) / 6));
                if (!dictIsRehashing(big)) ok = 0;
                if (!allIntKeysFindable(big, 1, i)) ok = 0;
                if (dictFind(big, IK(i + 1)) != NULL) ok = 0;
                checked_rehashes++;
            }
            was = now;
        }
        CHECK(ok);
        CHECK(bounded);
        CHECK(checked_rehashes >= 4);
        CHECK_EQ(dictSize(big), N);
        finishRehash(big);
        CHECK(!dictIsRehashing(big));
        CHECK(dictBuckets(big) >= N);      /* load factor <= 1 */
        CHECK(dictBuckets(big) <= 2 * N);
        CHECK(allIntKeysFindable(big, 1, N));
        CHECK(dictFind(big, IK(N + 1)) == NULL);
        CHECK(dictFind(big, IK(0)) == NULL);
        CHECK_EQ(dictMemUsage(big), sizeof(dict) + dictBuckets(big) * sizeof(void *) +
                                    N * sizeof(dictEntry));
        CHECK_EQ(sizeof(dictEntry), 3 * sizeof(void *));
    }

    TEST("dict: shrink below 1/8 load, keys findable throughout") {
        int ok = 1, saw_shrink = 0;
        unsigned long keep = 1000;
        for (unsigned long i = keep + 1; i <= N; i++) {
            if (dictDelete(big, IK(i)) != DICT_OK) ok = 0;
            if (dictIsRehashing(big) && big->size_exp[1] < big->size_exp[0]) saw_shrink = 1;
            if ((i & 0xffff) == 0 && !allIntKeysFindable(big, 1, keep)) ok = 0;
        }
        CHECK(ok);
        CHECK(saw_shrink);
        CHECK_EQ(dictSize(big), keep);
        CHECK(allIntKeysFindable(big, 1, keep));
        finishRehash(big);
        /* Rehash may finish with a last shrink still due: trigger it. */
        dictAdd(big, IK(N + 5), IK((N + 5) * 3));
        dictDelete(big, IK(N + 5));
        finishRehash(big);
        CHECK(dictBuckets(big) <= 8 * keep);
        CHECK(dictBuckets(big) >= keep);
        CHECK(allIntKeysFindable(big, 1, keep));
        for (unsigned long i = 1; i <= keep; i++) dictDelete(big, IK(i));
        finishRehash(big);
        CHECK_EQ(dictSize(big), 0);
        CHECK(dictBuckets(big) <= 8);
    }
    dictRelease(big);

    TEST("dict: no shrink while a safe iterator is open, shrink after") {
        dict *d = dictCreate(&intType);
        for (unsigned long i = 1; i <= 10000; i++) dictAdd(d, IK(i), IK(i * 3));
        finishRehash(d);
        size_t buckets = dictBuckets(d);
        dictIterator *it = dictGetSafeIterator(d);
        for (unsigned long i = 1; i <= 9990; i++) dictDelete(d, IK(i));
        CHECK(!dictIsRehashing(d));
        CHECK_EQ(dictBuckets(d), buckets);
        unsigned long n = 0;
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) n++;
        CHECK_EQ(n, 10);
        dictReleaseIterator(it);
        CHECK(dictIsRehashing(d));      /* resuming started the shrink */
        finishRehash(d);
        CHECK(dictBuckets(d) < buckets);
        CHECK(allIntKeysFindable(d, 9991, 10000));
        dictRelease(d);
    }

    TEST("dict: random sampling returns only live keys") {
        dict *d = dictCreate(&intType);
        const unsigned long n = 20000;
        unsigned char *alive = calloc(n + 1, 1);
        for (unsigned long i = 1; i <= n; i++) { dictAdd(d, IK(i), IK(i * 3)); alive[i] = 1; }
        for (unsigned long i = 1; i <= n; i += 2) { dictDelete(d, IK(i)); alive[i] = 0; }
        int ok = 1;
        unsigned char *hit = calloc(n + 1, 1);
        unsigned long distinct = 0;
        for (int r = 0; r < 200000; r++) {
            dictEntry *de = dictGetRandomKey(d);
            if (de == NULL || KI(de->key) > n || !alive[KI(de->key)]) { ok = 0; break; }
            if (!hit[KI(de->key)]++) distinct++;
        }
        CHECK(ok);
        /* 200k draws over 10k keys: a fair sampler misses almost none. */
        CHECK(distinct > 9900);

        /* Same while a grow is in progress. */
        unsigned long extra = n;
        while (!dictIsRehashing(d)) { extra++; dictAdd(d, IK(extra), IK(extra * 3)); }
        for (int r = 0; r < 10000 && ok; r++) {
            dictEntry *de = dictGetRandomKey(d);
            if (de == NULL) ok = 0;
            else if (KI(de->key) <= n && !alive[KI(de->key)]) ok = 0;
        }
        CHECK(ok);

        /* A sparse stretch may make a call come back empty-handed (the
         * step bound); that must be rare, and never a dead entry. */
        dictEntry *des[64];
        int empty_handed = 0;
        for (int r = 0; r < 5000 && ok; r++) {
            unsigned int want = 1 + (unsigned)r % 64;
            unsigned int got = dictGetSomeKeys(d, des, want);
            if (got > want) ok = 0;
            if (got == 0) empty_handed++;
            for (unsigned int j = 0; j < got; j++)
                if (KI(des[j]->key) <= n && !alive[KI(des[j]->key)]) ok = 0;
        }
        CHECK(ok);
        CHECK(empty_handed < 50);

        /* Shrink in progress, sparse table. */
        for (unsigned long i = 2; i <= extra; i++) dictDelete(d, IK(i));
        dictAdd(d, IK(2), IK(6));
        CHECK(dictSize(d) == 1);
        int found2 = 1;
        for (int r = 0; r < 1000; r++) {
            dictEntry *de = dictGetRandomKey(d);
            if (de == NULL || KI(de->key) != 2) found2 = 0;
            if (dictGetSomeKeys(d, des, 10) > 1) found2 = 0;
        }
        CHECK(found2);
        dictEmpty(d, NULL);
        CHECK(dictGetRandomKey(d) == NULL);
        CHECK_EQ(dictGetSomeKeys(d, des, 10), 0);
        free(alive);
        free(hit);
        dictRelease(d);
    }

    TEST("dict: dictGetSomeKeys on a dense table fills the request") {
        dict *d = dictCreate(&intType);
        for (unsigned long i = 1; i <= 5000; i++) dictAdd(d, IK(i), IK(i * 3));
        finishRehash(d);
        dictEntry *des[20];
        unsigned long total = 0;
        for (int r = 0; r < 1000; r++) total += dictGetSomeKeys(d, des, 20);
        CHECK(total >= 1000 * 20 * 9 / 10);
        dictRelease(d);
    }

    /* The classic SCAN guarantee, under four kinds of resizing between
     * calls. Base keys 1..nbase stay for the whole scan; extra keys above
     * 1e9 come and go to force the table to change size. */
    for (int scenario = 0; scenario < 5; scenario++) {
        static const char *names[] = {
            "dict: scan with no changes returns every key",
            "dict: scan returns every key while the table grows",
            "dict: scan returns every key while the table shrinks",
            "dict: scan returns every key across grow/shrink cycles",
            "dict: scan returns every key with rehash steps between calls",
        };
        TEST(names[scenario]) {
            dict *d = dictCreate(&intType);
            scanState st = {0};
            st.nbase = 3000;
            st.seen = calloc(st.nbase + 1, 1);
            for (unsigned long i = 1; i <= st.nbase; i++) dictAdd(d, IK(i), IK(i));
            unsigned long extra_lo = 1000000000UL, extra_hi = extra_lo;
            /* Total extra keys ever added (cycles included), so the scan
             * must finish in bounded time. */
            unsigned long extra_cap = extra_lo + 600000;
            if (scenario == 2 || scenario == 4) {
                for (int i = 0; i < 200000; i++, extra_hi++) dictAdd(d, IK(extra_hi), NULL);
                if (scenario == 2) finishRehash(d);
            }
            /* "No changes" means no rehash in flight either. */
            if (scenario == 0) finishRehash(d);
            unsigned long cursor = 0, calls = 0;
            int sizes_seen = 0;
            size_t last_buckets = dictBuckets(d);
            srand(1234 + scenario);
            do {
                cursor = dictScan(d, cursor, scanCollect, &st);
                calls++;
                switch (scenario) {
                case 1:
                    /* Capped: a table growing by a fixed amount per call
                     * outruns a one-bucket-per-call cursor forever. */
                    for (int i = 0; i < 40 && extra_hi < extra_cap; i++, extra_hi++)
                        dictAdd(d, IK(extra_hi), NULL);
                    break;
                case 2:
                    for (int i = 0; i < 400 && extra_lo < extra_hi; i++, extra_lo++)
                        dictDelete(d, IK(extra_lo));
                    break;
                case 3:
                    /* Every 64 calls flip between growing a lot and
                     * deleting everything extra. */
                    if ((calls / 64) % 2 == 0) {
                        for (int i = 0; i < 300 && extra_hi < extra_cap; i++, extra_hi++)
                            dictAdd(d, IK(extra_hi), NULL);
                    } else {
                        for (int i = 0; i < 1000 && extra_lo < extra_hi; i++, extra_lo++)
                            dictDelete(d, IK(extra_lo));
                    }
                    break;
                case 4:
                    dictRehash(d, 1 + rand() % 50);
                    if (rand() % 3 == 0) {
                        for (int i = 0; i < 200 && extra_lo < extra_hi; i++, extra_lo++)
                            dictDelete(d, IK(extra_lo));
                    } else {
                        for (int i = 0; i < 100 && extra_hi < extra_cap; i++, extra_hi++)
                            dictAdd(d, IK(extra_hi), NULL);
                    }
                    break;
                }
                if (dictBuckets(d) != last_buckets) { sizes_seen++; last_buckets = dictBuckets(d); }
            } while (cursor != 0 && calls < 50000000);
            CHECK(cursor == 0);
            CHECK(allBaseSeen(&st));
            if (scenario != 0) CHECK(sizes_seen >= 2);
            if (scenario == 0) {
                int once = 1;
                for (unsigned long k = 1; k <= st.nbase; k++) if (st.seen[k] != 1) once = 0;
                CHECK(once);
            }
            free(st.seen);
            dictRelease(d);
        }
    }

    TEST("dict: scan callback may delete the entry it is given") {
        dict *d = dictCreate(&intType);
        scanState st = {0};
        st.nbase = 50000;
        st.seen = calloc(st.nbase + 1, 1);
        st.d = d;
        st.delete_visited = 1;
        for (unsigned long i = 1; i <= st.nbase; i++) dictAdd(d, IK(i), IK(i));
        unsigned long cursor = 0;
        int shrank = 0;
        size_t b0 = dictBuckets(d);
        do {
            cursor = dictScan(d, cursor, scanCollect, &st);
            if (dictBuckets(d) < b0) shrank = 1;
        } while (cursor != 0);
        /* Each key is present until visited, so all are visited and gone. */
        CHECK(allBaseSeen(&st));
        CHECK_EQ(dictSize(d), 0);
        CHECK(shrank);
        CHECK_EQ(d->pauserehash, 0);
        CHECK_EQ(dictScan(d, 0, scanCollect, &st), 0);
        free(st.seen);
        dictRelease(d);
    }

    TEST("dict: safe iterator visits each entry once, allows deleting it") {
        dict *d = dictCreate(&intType);
        const unsigned long n = 30000;
        for (unsigned long i = 1; i <= n; i++) dictAdd(d, IK(i), IK(i * 3));
        /* Make sure the iteration starts mid-rehash. */
        unsigned long extra = n;
        while (!dictIsRehashing(d)) { extra++; dictAdd(d, IK(extra), IK(extra * 3)); }
        dictRehash(d, 100);
        long rehashidx = d->rehashidx;
        unsigned char *seen = calloc(extra + 1, 1);
        dictIterator *it = dictGetSafeIterator(d);
        dictEntry *de;
        int ok = 1;
        unsigned long visited = 0;
        while ((de = dictNext(it)) != NULL) {
            unsigned long k = KI(de->key);
            if (k == 0 || k > extra || seen[k]++) ok = 0;
            visited++;
            if (k % 2 == 0) dictDelete(d, de->key);
            /* Lookups would normally move buckets; not now. */
            dictFind(d, IK(1));
            if (d->rehashidx != rehashidx) ok = 0;
        }
        dictReleaseIterator(it);
        CHECK(ok);
        CHECK_EQ(visited, extra);
        CHECK_EQ(dictSize(d), extra - extra / 2);
        CHECK_EQ(d->pauserehash, 0);
        for (unsigned long i = 1; i <= extra; i++)
            if ((dictFind(d, IK(i)) != NULL) != (i % 2 == 1)) ok = 0;
        CHECK(ok);

        /* Adding during iteration (grow starts under the iterator) still
         * returns every original entry exactly once. */
        dictEmpty(d, NULL);
        for (unsigned long i = 1; i <= 1024; i++) dictAdd(d, IK(i), IK(i * 3));
        finishRehash(d);
        memset(seen, 0, extra + 1);
        it = dictGetSafeIterator(d);
        unsigned long next_new = 5000000, orig = 0;
        ok = 1;
        while ((de = dictNext(it)) != NULL) {
            unsigned long k = KI(de->key);
            if (k <= 1024) { if (seen[k]++) ok = 0; orig++; }
            for (int j = 0; j < 3; j++, next_new++) dictAdd(d, IK(next_new), NULL);
        }
        dictReleaseIterator(it);
        CHECK(ok);
        CHECK_EQ(orig, 1024);

        /* Empty dict. */
        dict *e = dictCreate(&intType);
        it = dictGetSafeIterator(e);
        CHECK(dictNext(it) == NULL);
        CHECK(dictNext(it) == NULL);
        dictReleaseIterator(it);
        dictRelease(e);
        free(seen);
        dictRelease(d);
    }

    TEST("dict: destructors called exactly once on every path") {
        key_destroyed = val_destroyed = 0;
        long created = 0;
        dict *d = dictCreate(&strType);
        for (long i = 0; i < 50000; i++, created++) dictAdd(d, mkstr("k", i), mkstr("v", i));
        /* dictDelete */
        for (long i = 0; i < 10000; i++) {
            char buf[32];
            snprintf(buf, sizeof(buf), "k:%ld", i);
            dictDelete(d, buf);
        }
        CHECK_EQ(key_destroyed, 10000);
        CHECK_EQ(val_destroyed, 10000);
        /* dictUnlink: nothing destroyed until the entry is freed. */
        dictEntry *held[100];
        for (long i = 0; i < 100; i++) {
            char buf[32];
            snprintf(buf, sizeof(buf), "k:%ld", 10000 + i);
            held[i] = dictUnlink(d, buf);
        }
        CHECK_EQ(key_destroyed, 10000);
        int ok = 1;
        for (long i = 0; i < 100; i++) {
            char buf[32];
            snprintf(buf, sizeof(buf), "v:%ld", 10000 + i);
            if (held[i] == NULL || strcmp(held[i]->val, buf) != 0) ok = 0;
            if (dictFind(d, held[i] ? held[i]->key : "") != NULL) ok = 0;
        }
        CHECK(ok);
        for (long i = 0; i < 100; i++) dictFreeUnlinkedEntry(d, held[i]);
        dictFreeUnlinkedEntry(d, NULL);
        CHECK_EQ(key_destroyed, 10100);
        CHECK(dictUnlink(d, "k:0") == NULL);
        /* dictEmpty mid-rehash, then reuse. */
        while (!dictIsRehashing(d)) { dictAdd(d, mkstr("k", created), mkstr("v", created)); created++; }
        dictEmpty(d, NULL);
        CHECK_EQ(dictSize(d), 0);
        CHECK_EQ(key_destroyed, created);
        CHECK_EQ(val_destroyed, created);
        for (long i = 0; i < 1000; i++, created++) dictAdd(d, mkstr("x", i), mkstr("y", i));
        CHECK(strcmp(dictFetchValue(d, "x:7"), "y:7") == 0);
        dictRelease(d);
        CHECK_EQ(key_destroyed, created);
        CHECK_EQ(val_destroyed, created);
    }

    TEST("dict: dictReleaseSteps frees in slices, mid-rehash too, every entry once") {
        /* Stopped mid-rehash, so both tables hold entries; the last
         * (broken) version restarted table 1 from bucket 0 after table 0
         * was done and never finished. */
        for (int rehashing = 0; rehashing < 2; rehashing++) {
            key_destroyed = val_destroyed = 0;
            dict *d = dictCreate(&strType);
            long created = 0;
            for (; created < 20000; created++) dictAdd(d, mkstr("k", created), mkstr("v", created));
            if (rehashing)
                while (!dictIsRehashing(d)) { dictAdd(d, mkstr("k", created), mkstr("v", created)); created++; }
            else
                finishRehash(d);
            unsigned long cursor = 0;
            long calls = 0;
            long before = created;
            while (!dictReleaseSteps(d, &cursor, 100)) {
                calls++;
                /* Each slice frees something, and at most about its work. */
                CHECK(key_destroyed <= before);
                if (calls > 1000000) break;
            }
            CHECK(calls > 10);
            CHECK_EQ(key_destroyed, created);
            CHECK_EQ(val_destroyed, created);
        }
        dict *e = dictCreate(&strType);
        unsigned long cursor = 0;
        CHECK_EQ(dictReleaseSteps(e, &cursor, 1), 1); /* empty: freed at once */
    }

    TEST("dict: dictEmpty calls back every 65536 buckets") {
        dict *d = dictCreate(&intType);
        for (unsigned long i = 1; i <= 300000; i++) dictAdd(d, IK(i), NULL);
        finishRehash(d);
        size_t buckets = dictBuckets(d);
        empty_callbacks = 0;
        dictEmpty(d, emptyCallback);
        CHECK(empty_callbacks >= 2);
        CHECK(empty_callbacks <= (long)(buckets / 65536));
        CHECK_EQ(dictSize(d), 0);
        CHECK_EQ(dictBuckets(d), 0);
        CHECK(dictAdd(d, IK(1), NULL) == DICT_OK);
        dictRelease(d);
    }

    TEST("dict: dictExpand and dictRehashMicroseconds") {
        dict *d = dictCreate(&intType);
        CHECK(dictExpand(d, 1000) == DICT_OK);
        CHECK_EQ(dictBuckets(d), 1024);
        CHECK(!dictIsRehashing(d));
        for (unsigned long i = 1; i <= 200000; i++) dictAdd(d, IK(i), IK(i * 3));
        finishRehash(d);
        CHECK(dictExpand(d, 100) == DICT_ERR);
        CHECK(dictExpand(d, 2000000) == DICT_OK);
        CHECK(dictIsRehashing(d));
        CHECK(dictExpand(d, 4000000) == DICT_ERR);  /* already rehashing */
        dictPauseRehashing(d);
        CHECK_EQ(dictRehashMicroseconds(d, 1000), 0);
        CHECK(dictRehash(d, 100) == 1);
        CHECK_EQ(d->rehashidx, 0);
        dictResumeRehashing(d);
        int rounds = 0, moved = 0;
        while (dictIsRehashing(d) && rounds < 100000) {
            moved += dictRehashMicroseconds(d, 200);
            rounds++;
        }
        CHECK(!dictIsRehashing(d));
        CHECK(moved > 0);
        CHECK_EQ(dictBuckets(d), 2097152);
        CHECK(allIntKeysFindable(d, 1, 200000));
        CHECK(dictRehash(d, 10) == 0);
        dictRelease(d);
    }

    /* --- Informational measurements (printed, not asserted). --- */
    {
        struct mallinfo2 before = mallinfo2();
        dict *d = dictCreate(&intType);
        for (unsigned long i = 1; i <= N; i++) dictAdd(d, IK(i), IK(i));
        finishRehash(d);
        struct mallinfo2 after = mallinfo2();
        long long heap = (long long)after.uordblks - (long long)before.uordblks;
        printf("info: 1M keys: dictMemUsage %.1f bytes/entry (%zu buckets)\n",
               (double)dictMemUsage(d) / N, dictBuckets(d));
        /* mallinfo2 sees nothing under ASAN, which has its own heap. */
        if (heap > 0)
            printf("info: 1M keys: heap %.1f bytes/entry (incl. malloc overhead)\n",
                   (double)heap / N);

        /* Lookups in random order so the timing includes cache misses, as
         * a real keyspace would. */
        unsigned long *order = malloc(N * sizeof(*order));
        for (unsigned long i = 0; i < N; i++) order[i] = i + 1;
        srand(42);
        for (unsigned long i = N - 1; i > 0; i--) {
            unsigned long j = ((unsigned long)rand() * 65536UL + (unsigned long)rand()) % (i + 1);
            unsigned long t = order[i]; order[i] = order[j]; order[j] = t;
        }
        unsigned long found = 0;
        long long t0 = nowNs();
        for (unsigned long i = 0; i < N; i++) found += dictFind(d, IK(order[i])) != NULL;
        long long t1 = nowNs();
        printf("info: 1M int keys: %.1f ns/find (random order, %lu found)\n",
               (double)(t1 - t0) / N, found);
        dictRelease(d);

        dict *s = dictCreate(&strType);
        char **keys = malloc(N * sizeof(*keys));
        for (unsigned long i = 0; i < N; i++) {
            keys[i] = mkstr("key", (long)i);
            dictAdd(s, keys[i], NULL);
        }
        finishRehash(s);
        char buf[32];
        found = 0;
        t0 = nowNs();
        for (unsigned long i = 0; i < N; i++) {
            /* A copy, as a lookup from a client buffer would be. */
            snprintf(buf, sizeof(buf), "key:%lu", order[i] - 1);
            found += dictFind(s, buf) != NULL;
        }
        t1 = nowNs();
        long long t2 = nowNs();
        for (unsigned long i = 0; i < N; i++) snprintf(buf, sizeof(buf), "key:%lu", order[i] - 1);
        long long t3 = nowNs();
        printf("info: 1M string keys: %.1f ns/find (random order, excl. %.1f ns "
               "building the lookup key, %lu found)\n",
               (double)((t1 - t0) - (t3 - t2)) / N, (double)(t3 - t2) / N, found);
        dictRelease(s);
        free(keys);
        free(order);
    }

    return testReport();
}
