/* evict.c -- approximate LRU eviction over the keyspace (SPEC §3).
 *
 * Each object carries a 32-bit millisecond clock of its last access; idle
 * time is computed modulo 2^32, so an object idle for more than ~49 days
 * looks young: harmless for a cache. Candidates come from random samples of
 * the keyspace (evict-samples per step) kept in a small pool ordered by
 * idle time, so each step evicts the oldest of what was seen, Redis-style.
 *
 * What may be evicted, in order (SPEC §3):
 *  - never: leased objects (a reader is using the bytes), hard-pinned
 *    objects, pending puts (they are not in the keyspace at all);
 *  - first: everything else that is not soft-pinned;
 *  - only when no unpinned candidate turns up in several rounds of samples:
 *    soft-pinned objects, oldest first.
 *
 * Two triggers:
 *  - an allocation fails: once freed extents still being zeroed are back
 *    (zerofree.c), evict synchronously until it fits -- but only if it
 *    then can: storeEvictionCouldFit (store.c) first compares the bytes
 *    eviction could free in that segment (every value but the hard-pinned
 *    ones and the key being written) with what is missing, and a write
 *    that could not fit anyway is refused with -OOM / -NOSPACE having
 *    evicted nothing. The key being written (storeEvictProtected) is
 *    never a victim of its own write. Bytes are only a first filter:
 *    then the segment must hold a contiguous run long enough (below);
 *  - a write command while the dataset (pool bytes in use plus the keys'
 *    and objects' heap) is over maxmemory: evict until under it, else
 *    -OOM (store.c, storeMakeRoomForDataset; Redis's performEvictions);
 *  - pool use passes evict-high-watermark: schedule about evict-ratio of
 *    the objects and evict them in time-bounded slices from the event
 *    loop, so no command waits behind a big eviction round.
 */
/*
 * Runs and walls. A write may evict only if, once everything evictable now
 * were gone, `len` contiguous bytes would be free: otherwise it could evict
 * many objects and still fail. What eviction cannot free now is a *wall*:
 * an extent that is hard-pinned, a pending put, leased, on the deferred
 * list, held by anyone beside the keyspace (a reply still being written,
 * a SEG.READ: refcount > 1, or OBJ_FLAG_UNLINKED once the keyspace let go),
 * and the key being written. Free ranges, extents being zeroed (allocated
 * with no object: zerofreeMakeRoom hands them back before any eviction)
 * and evictable values all count toward runs. The predicate is the longest
 * wall-free run of the segment's address space; under a cap (maxmemory on
 * the pool: allocSetLimit) also the walls' bytes plus the write must stay
 * under it, since a leased or held value is bytes eviction cannot free.
 *
 * Cost. Walking every extent per evicting write is O(all objects), which a
 * full KV cache (every put evicts) cannot pay. So each segment keeps the
 * SEG_RUNS longest runs found by its last walk (segRuns, with `floor`: no
 * run left out is longer), and keeps them true without walking again:
 *  - a wall appears (evictWallAdded: HARDPIN, PUT.START, a lease grant, a
 *    second reference): the tracked run holding its extent is split in
 *    two, O(SEG_RUNS), and its bytes join wall_bytes (unless it was a wall
 *    already: a lease on a pinned value). A wall inside an untracked run
 *    only shrinks that run, so `floor` stays an upper bound. New evictable
 *    values and frees change no run (a new value's extent came out of free
 *    space);
 *  - a wall goes (unpin, PUT.END or abandon, a lease released, a holder
 *    letting go, an unlinked version freed: storeWallsGone++, and leases
 *    ending by time: lease_end_ms): runs can only grow and wall_bytes only
 *    shrink, so the list stays a lower bound and wall_bytes an upper one.
 *    A "yes" from them stands; a "no" is walked again, once.
 * A write asks (evictRunFits) with the key being written as one more wall:
 * the tracked run that holds its extent counts as its longer side. It gets
 * "yes" from the list in O(SEG_RUNS); it walks (allocWalk, counted in INFO
 * store_evict_fit_scans / _extents) only when the list says no and walls
 * went since, or `floor` could hold the write. Repeated evicting writes
 * between wall changes walk nothing. The walk itself is O(extents).
 *
 * What stays approximate: the objects a command has built but not stored
 * yet (MSET's earlier values) count as evictable, and the allocator's own
 * search (alloc.c: a request is rounded up to a bin; of the bin below only
 * ALLOC_SCAN_LIMIT ranges are looked at) can miss a run shorter than 9/8
 * of the request when many ranges of that size class are free.
 */
#include <limits.h>
#include <string.h>

#include "server.h"
#include "store.h"
#include "util.h"
#include "zerofree.h"

#define EVPOOL_SIZE 16

/* Candidates outlive the call that sampled them (the pool is refilled, not
 * rebuilt), so their ages must compare across calls: each is ranked by its
 * age at the pool's epoch (set when the pool was empty), not at its own
 * sampling time -- ranked so, a key sampled a moment after it was written
 * could look older than keys sampled long before at the moment they were
 * written, and the newest write could go first. A candidate whose object
 * was touched (or replaced) since it was sampled is no candidate: its
 * access time is kept and checked when it comes up. */
typedef struct evictCandidate {
    int32_t age;   /* ms between its last access and poolEpoch; negative: accessed after it */
    uint32_t lru;  /* its access time when sampled */
    sds key;       /* a copy: the key may be deleted before we get to it */
} evictCandidate;

static evictCandidate pool[EVPOOL_SIZE];
static int poolLen;
static uint32_t poolEpoch;
static segment *poolFilter; /* the segment the pool's candidates were sampled for */

void evictResetPool(void) {
    for (int i = 0; i < poolLen; i++) sdsfree(pool[i].key);
    poolLen = 0;
}


static int softPinned(const storeObj *o) { return o->ext && o->ext->softpin_until_ms > server.monotime; }

/* 0: never; 1: yes; 2: only when nothing unpinned is left. */
static int evictable(const storeObj *o) {
    if ((o->flags & OBJ_FLAG_HARDPIN) || storeObjLeased(o) || o->state != OBJ_COMPLETE) return 0;
    return softPinned(o) ? 2 : 1;
}

int evictClass(const storeObj *o) { return evictable(o); }

/* ---- runs and walls (see the top) --------------------------------------- */

uint64_t storeWallsGone;
static uint64_t fitScans, fitExtents;

void evictFitStats(uint64_t *scans, uint64_t *extents) {
    *scans = fitScans;
    *extents = fitExtents;
}

static int isWallButRefs(const storeObj *o) {
    return (o->flags & (OBJ_FLAG_HARDPIN | OBJ_FLAG_DEFERRED | OBJ_FLAG_UNLINKED)) || o->state != OBJ_COMPLETE ||
           storeObjLeased(o);
}

static int isWall(const storeObj *o) { return o->refcount != 1 || isWallButRefs(o); }

int evictIsWall(const storeObj *o) { return isWall(o); }

/* Files a run in the list, longest first; what falls off raises floor. */
static void runsAdd(segRuns *R, uint64_t start, uint64_t len) {
    if (len == 0) return;
    int i = R->n;
    if (i == SEG_RUNS) {
        if (R->len[SEG_RUNS - 1] >= len) {
            if (len > R->floor) R->floor = len;
            return;
        }
        if (R->len[SEG_RUNS - 1] > R->floor) R->floor = R->len[SEG_RUNS - 1];
        i = SEG_RUNS - 1;
    } else {
        R->n++;
    }
    while (i > 0 && R->len[i - 1] < len) {
        R->start[i] = R->start[i - 1];
        R->len[i] = R->len[i - 1];
        i--;
    }
    R->start[i] = start;
    R->len[i] = len;
}

/* The new wall [off, off + size) cuts every tracked run it overlaps (one,
 * unless it was allocated over a wall that went since the walk). */
static void runsSplit(segRuns *R, uint64_t off, uint64_t size) {
    uint64_t end = off + size, cut_s[SEG_RUNS], cut_e[SEG_RUNS];
    int ncut = 0, kept = 0;
    for (int i = 0; i < R->n; i++) {
        uint64_t s = R->start[i], e = s + R->len[i];
        if (off < e && end > s) {
            cut_s[ncut] = s;
            cut_e[ncut++] = e;
            continue;
        }
        R->start[kept] = s;
        R->len[kept++] = R->len[i];
    }
    R->n = kept;
    for (int i = 0; i < ncut; i++) {
        if (off > cut_s[i]) runsAdd(R, cut_s[i], off - cut_s[i]);
        if (end < cut_e[i]) runsAdd(R, end, cut_e[i] - end);
    }
}

void evictWallAdded(storeObj *o, int was_wall) {
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *r = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(r);
        if (seg == NULL || r->handle == ALLOC_NONE || !seg->runs.valid) continue;
        if (storeObjLeased(o) && storeLeaseEndMs(o) < seg->runs.lease_end_ms)
            seg->runs.lease_end_ms = storeLeaseEndMs(o);
        if (was_wall) continue;
        uint64_t size = allocSize(seg->alloc, r->handle);
        runsSplit(&seg->runs, r->offset, size);
        seg->runs.wall_bytes += size;
    }
}

/* Its refcount just went from 1 to 2. */
void evictRefAdded(storeObj *o) { evictWallAdded(o, isWallButRefs(o)); }

typedef struct walk {
    segRuns *R;
    uint64_t start, len;
} walk;

static void walkExtent(void *ctx, uint64_t offset, uint64_t size, int used, void *user) {
    walk *w = ctx;
    fitExtents++;
    const storeObj *o = user;
    if (used && o && isWall(o)) {
        w->R->wall_bytes += size;
        runsAdd(w->R, w->start, w->len);
        w->len = 0;
        if (storeObjLeased(o) && storeLeaseEndMs(o) < w->R->lease_end_ms)
            w->R->lease_end_ms = storeLeaseEndMs(o);
        return;
    }
    if (w->len == 0) w->start = offset;
    w->len += size;
}

static void runsScan(segment *s) {
    segRuns *R = &s->runs;
    memset(R, 0, sizeof(*R));
    R->lease_end_ms = LLONG_MAX;
    R->gone = storeWallsGone;
    walk w = {R, 0, 0};
    allocWalk(s->alloc, walkExtent, &w);
    runsAdd(R, w.start, w.len);
    R->valid = 1;
    fitScans++;
}

int evictRunFits(segment *s, uint64_t need, uint64_t poff, uint64_t psize, uint64_t limit) {
    segRuns *R = &s->runs;
    int fresh = 0;
    if (!R->valid) {
        runsScan(s);
        fresh = 1;
    }
    for (;;) {
        /* Under a cap, what eviction cannot free (the walls, the key being
         * written) plus the write must stay under it. */
        int capped = limit && R->wall_bytes + psize + need > limit;
        for (int i = 0; i < R->n && !capped; i++) {
            uint64_t st = R->start[i], e = st + R->len[i], l = R->len[i], pend = poff + psize;
            if (psize && poff < e && pend > st) { /* the key being written stays */
                uint64_t lo = poff > st ? poff - st : 0, hi = pend < e ? e - pend : 0;
                l = lo > hi ? lo : hi;
            }
            if (l >= need) return 1;
        }
        if (fresh) return 0;
        if (R->gone == storeWallsGone && server.monotime < R->lease_end_ms && (capped || R->floor < need)) return 0;
        runsScan(s);
        fresh = 1;
    }
}

static int isProtected(sds key) {
    sds p = storeEvictProtected;
    return p && sdslen(p) == sdslen(key) && !memcmp(p, key, sdslen(key));
}

static void poolInsert(sds key, uint32_t lru) {
    int i;
    for (i = 0; i < poolLen; i++)
        if (sdslen(pool[i].key) == sdslen(key) && !memcmp(pool[i].key, key, sdslen(key)))
            return; /* already a candidate */
    int32_t age = (int32_t)(poolEpoch - lru);
    /* Keep the pool sorted by age, ascending: the best victim is last. */
    for (i = 0; i < poolLen && pool[i].age < age; i++)
        ;
    if (poolLen == EVPOOL_SIZE) {
        if (i == 0) return; /* younger than everything we hold */
        sdsfree(pool[0].key);
        memmove(pool, pool + 1, sizeof(pool[0]) * (size_t)(i - 1));
        i--;
    } else {
        memmove(pool + i + 1, pool + i, sizeof(pool[0]) * (size_t)(poolLen - i));
        poolLen++;
    }
    pool[i].key = sdsdup(key);
    pool[i].age = age;
    pool[i].lru = lru;
}

static int hasReplicaIn(storeObj *o, segment *only) {
    if (only == NULL) return 1;
    for (int i = 0; i < o->nreplicas; i++)
        if (storeReplicaSegment(storeObjReplica(o, i)) == only) return 1;
    return 0;
}

/* Samples the keyspace; candidates of the given class go to the pool. When
 * only one segment's objects qualify (an allocation there failed) and that
 * segment holds few of the keys, evict-samples keys rarely contain one, so
 * such rounds take the largest sample. */
static void poolFill(int wanted_class, segment *only) {
    dictEntry *sample[64];
    unsigned want = only ? 64 : server.evict_samples > 64 ? 64 : (unsigned)server.evict_samples;
    unsigned n = dictGetSomeKeys(server.keys, sample, want);
    if (poolLen == 0) poolEpoch = storeLruClock();
    for (unsigned i = 0; i < n; i++) {
        storeObj *o = sample[i]->val;
        int cls = evictable(o);
        if (cls == 0 || cls > wanted_class || !hasReplicaIn(o, only)) continue;
        poolInsert(sample[i]->key, o->lru);
    }
}

/* Evicts the oldest evictable object seen in samples. Returns 0 when
 * nothing is left to evict. Pool entries whose key is gone, or whose object
 * became unevictable since it was sampled, are skipped. */
int evictOne(segment *only) {
    if (storeReplicaMode) return 0; /* a replica's keys go as its primary says (store.c) */
    if (only != poolFilter) {
        evictResetPool(); /* candidates sampled for another segment */
        poolFilter = only;
    }
    /* A segment holding few of the keys is hit by few samples: try more. */
    int rounds = only ? 64 : 16;
    for (int attempts = 0; attempts < rounds; attempts++) {
        if (dictSize(server.keys) == 0 || (only && segmentObjects(only) == 0)) return 0;
        int softpin_ok = attempts >= rounds / 4;
        poolFill(softpin_ok ? 2 : 1, only);
        while (poolLen > 0) {
            evictCandidate *c = &pool[--poolLen];
            sds key = c->key;
            dictEntry *de = dictFind(server.keys, key);
            int cls = de ? evictable(de->val) : 0;
            /* Making room now (only set): a version a reply still holds
             * would free nothing now, so it is not taken (evictRunFits
             * counts it as a wall). */
            int ok = cls != 0 && (cls == 1 || softpin_ok) && ((storeObj *)de->val)->lru == c->lru &&
                     hasReplicaIn(de->val, only) && !isProtected(key) && !(only && ((storeObj *)de->val)->refcount > 1);
            if (ok) storeDeleteKeyForEviction(key);
            sdsfree(key);
            if (ok) {
                server.stat_evictedkeys++;
                return 1;
            }
        }
    }
    return 0;
}

/* Eviction rounds triggered by the high watermark, per memory segment:
 * one fuller than evict-high-watermark gets a round that evicts about
 * evict-ratio of its objects, taken only among objects with a replica
 * there (evicting elsewhere frees nothing where the space is short). The
 * fill was once summed over every memory segment, so one large client
 * segment (clients contribute GBs, mostly empty) kept a full pool from
 * ever reaching the watermark, and a round could evict objects that lived
 * only in client segments while the pool stayed full. */
static uint64_t evictRoundSegment; /* the id the running round evicts in */
/* A round that found nothing evictable (everything there leased, pinned or
 * pending) is not started again in that segment for a second: each try
 * samples the keyspace up to 64 times 64 keys. */
static uint64_t evictFruitlessSegment;
static long long evictFruitlessUntil;
/* Which segments the watermark check looks at. The pool every tick; the
 * mounted ones EVICT_SCAN_SEGMENTS slots a tick, from where the last tick
 * stopped: a table of 65535 mounted segments walked whole every tick was
 * 65535 loads for a server doing nothing (DEBUG VISITS cron-segments). A
 * client segment past the watermark waits for its turn (at hz 10 and a full
 * table, 100 s at most), and a put that finds no room there evicts at once
 * anyway (the allocation trigger above): the round only keeps ahead. */
#define EVICT_SCAN_SEGMENTS 64
static uint32_t evictScanCursor;

/* s's fill, when a round may start there (0 otherwise). */
static double evictFill(segment *s) {
    serverVisit(VISITS_CRON_SEGMENTS, 1);
    if (!s || s->tier != SEG_TIER_MEMORY) return 0;
    if (s->id == evictFruitlessSegment && server.monotime < evictFruitlessUntil) return 0;
    /* Two loads, not allocGetStats: its largest-free search, per segment
     * per tick, was 70% of an idle server's CPU once many segments were
     * mounted (20000: 26% of a core doing nothing). */
    uint64_t used = allocUsed(s->alloc), size = allocLimit(s->alloc); /* the pool's maxmemory, else
                                                                         the segment's size */
    if (s == server.self) {
        uint64_t zeroing = zerofreePendingBytes(); /* pool extents only */
        used = used > zeroing ? used - zeroing : 0;
        /* maxmemory bounds the dataset, heap included (store.c). */
        if (server.maxmemory) used += storeDatasetHeap();
    }
    return size ? (double)used / (double)size : 0;
}

/* Evictions are summed into one log line per EVICT_LOG_PERIOD_MS, so an
 * operator can tell a cache under pressure from keys that vanish. */
#define EVICT_LOG_PERIOD_MS 10000

static void evictLogCron(void) {
    static long long last_ms, last_count;
    if (server.monotime - last_ms < EVICT_LOG_PERIOD_MS) return;
    long long n = server.stat_evictedkeys - last_count;
    if (n > 0 && last_ms) {
        allocStats ps;
        allocGetStats(server.self->alloc, &ps);
        char hused[32], hlimit[32];
        bytesToHuman(hused, sizeof(hused), ps.used);
        bytesToHuman(hlimit, sizeof(hlimit), ps.limit);
        serverLog(LL_NOTICE, "Evicted %lld objects in the last %lld s to make room (pool %s used of %s, "
                  "evict-high-watermark %.2f)", n, (server.monotime - last_ms) / 1000, hused, hlimit,
                  server.evict_high_watermark);
    }
    last_ms = server.monotime;
    last_count = server.stat_evictedkeys;
}

void storeEvictionCron(long long budget_us) {
    evictLogCron();
    /* A round under way waits out a CLIENT PAUSE (networking.c). */
    if (pauseHoldsDataset()) return;
    if (server.evict_policy == EVICT_NOEVICTION || storeReplicaMode) { /* a replica: its primary's DELs (store.c) */
        server.evict_pending = 0;
        return;
    }
    if (server.evict_pending == 0) {
        /* Freed extents still being zeroed are free space on its way back
         * (zerofree.c): they must not start a round of evictions. */
        zerofreeReclaim(0);
        segment *over = NULL;
        double worst = evictFill(server.self);
        if (worst > server.evict_high_watermark) over = server.self;
        uint32_t scan = segtabLen < EVICT_SCAN_SEGMENTS ? segtabLen : EVICT_SCAN_SEGMENTS;
        for (uint32_t k = 0; k < scan; k++) {
            if (evictScanCursor >= segtabLen) evictScanCursor = 0;
            segment *s = segtab[evictScanCursor++];
            if (s == server.self) continue;
            double fill = evictFill(s);
            if (fill > server.evict_high_watermark && fill > worst) {
                worst = fill;
                over = s;
            }
        }
        if (over == NULL) return;
        long long n = (long long)(server.evict_ratio * (double)segmentObjects(over));
        server.evict_pending = n > 0 ? n : 1;
        evictRoundSegment = over->id;
    }
    segment *target = segmentLookupId(evictRoundSegment);
    if (target == NULL) { /* unmounted since the round began */
        server.evict_pending = 0;
        return;
    }
    /* Where every key has a replica in the target (the usual single pool),
     * any victim frees space there: sampled as any eviction, not with the
     * wide samples a filter needs to find a segment's few keys. */
    segment *only = segmentObjects(target) >= dictSize(server.keys) ? NULL : target;
    long long start = monoUs();
    while (server.evict_pending > 0) {
        if (!evictOne(only)) {
            server.evict_pending = 0;
            evictFruitlessSegment = target->id;
            evictFruitlessUntil = server.monotime + 1000;
            break;
        }
        server.evict_pending--;
        if ((server.evict_pending & 15) == 0 && monoUs() - start > budget_us) break;
    }
}
