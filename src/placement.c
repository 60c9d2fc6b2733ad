/* placement.c -- where the replicas of a new object go.
 *
 * A put asks for n replicas (best effort, at least one). The candidates are
 * the active segments whose allocator can hold the object right now;
 * segments being unmounted (GRACEFUL) take no new allocations, nor do those
 * whose owner has no open connection (orphaned, owner.c: a writer may not
 * reach the host). A PREFER segment that takes none is skipped, not an
 * error. Replicas go to distinct segments always, and to distinct hosts when
 * there are enough hosts: the first pass skips hosts already used, the
 * second fills up.
 *
 * Order of candidates:
 *  - PREFER segments first, in the order given;
 *  - then by allocation-strategy:
 *    random      uniformly at random (the default);
 *    free-ratio  "power of two choices": each draw takes two random
 *                candidates and keeps the one with the larger free fraction.
 *                Plain least-full-first sends every write to a freshly
 *                mounted empty segment until it catches up (a skew Mooncake
 *                users hit); two choices still favours emptier segments but
 *                spreads writes over all of them;
 *    local-first segments on the writer's host first (shuffled), then the
 *                rest (shuffled).
 *
 * Tenancy (acl.c): a segment mounted by a user restricted by ACL key
 * patterns belongs to that user, and only that user's puts go there -- the
 * process hosting a segment can read all of it. Everyone's puts may use
 * the shared segments (the pool, segments mounted by unrestricted users).
 *
 * If no extent can be had anywhere, freed pool extents still being zeroed
 * are taken back first (zerofree.c), then eviction (policy permitting)
 * frees objects and placement is retried; then the put fails with -NOSPACE.
 * Eviction starts only if the target segment, once everything evictable
 * there were gone, could hold the object -- its bytes and a contiguous run
 * (storeEvictionCouldFit); a segment that could not is skipped. It never
 * takes the key
 * being put (PUT.START REPLACE's current version): a refused put evicts
 * nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "owner.h"
#include "placement.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zerofree.h"
#include "zmalloc.h"

static uint64_t rngState;

static uint64_t rnd(void) {
    /* xorshift64*: placement needs spread, not cryptographic quality. */
    if (rngState == 0) rngState = (uint64_t)ustime() | 1;
    rngState ^= rngState >> 12;
    rngState ^= rngState << 25;
    rngState ^= rngState >> 27;
    return rngState * 2685821657736338717ULL;
}

static double freeRatio(segment *s) {
    allocStats as;
    allocGetStats(s->alloc, &as);
    return s->size ? (double)as.free / (double)s->size : 0.0;
}

static int hostEq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* tenant: the writer's user name if it is restricted, else NULL. A
 * tenant's segment holds only its tenant's objects; a tenant's objects go
 * only where acl.c says. */
static int tenantMayUse(const segment *s, const char *tenant) {
    return tenant == NULL ? s->tenant == NULL : aclTenantMayHostIn(tenant, s);
}

static int eligible(segment *s, uint64_t size, const char *tenant) {
    return segmentPlaceable(s) && tenantMayUse(s, tenant) && allocMaxAllocatable(s->alloc) >= size;
}

static int allocateOn(storeObj *o, segment *s, uint64_t size) {
    uint64_t offset;
    uint32_t handle = allocAlloc(s->alloc, size, &offset);
    if (handle == ALLOC_NONE) return 0;
    storeObjAddReplica(o, s, handle, offset);
    return 1;
}

static int hasReplicaOn(storeObj *o, segment *s) {
    for (int i = 0; i < o->nreplicas; i++)
        if (storeReplicaSegment(storeObjReplica(o, i)) == s) return 1;
    return 0;
}

static int hostUsed(storeObj *o, segment *s) {
    for (int i = 0; i < o->nreplicas; i++) {
        segment *r = storeReplicaSegment(storeObjReplica(o, i));
        if (r && hostEq(r->host, s->host)) return 1;
    }
    return 0;
}

/* Candidates are drawn lazily: the segment table is copied (pointers
 * only), then a partial Fisher-Yates shuffle draws one segment at a time
 * and stops once enough replicas are placed. So a put touches the
 * allocator of only a few segments however many are mounted; an earlier
 * version shuffled and probed all of them per put, which at 128 segments
 * halved PUT.START throughput. A segment on a host that already has a
 * replica is set aside and used only if nothing better turns up. */
/* A random placeable segment of the table, or NULL: one draw. */
static segment *drawSlot(void) {
    serverVisit(VISITS_SEGMENTS, 1);
    segment *s = segtab[rnd() % segtabLen];
    return s && segmentPlaceable(s) ? s : NULL;
}

/* With many segments mounted (up to 65535 metadata-only ones), even the
 * copy of the table above cost every put O(segments). So a large table is
 * first drawn from directly: random slots, a bounded number of draws,
 * which find the replicas in a few when most segments could take them.
 * What is still missing then -- a table of holes, segments mostly full,
 * replicas that want other hosts -- comes from the walk below, so the
 * sampling never refuses a put the walk would place. Local-first orders
 * by host, which draws cannot: it always walks. */
#define PLACE_DRAW_MIN_SLOTS 64

/* Distinct hosts among o's replicas (few: at most STORE_MAX_REPLICAS). */
static uint32_t hostsOf(storeObj *o) {
    uint32_t n = 0;
    for (int i = 0; i < o->nreplicas; i++) {
        segment *r = storeReplicaSegment(storeObjReplica(o, i));
        if (r == NULL || r->host == NULL) continue;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) {
            segment *q = storeReplicaSegment(storeObjReplica(o, j));
            seen = q && hostEq(q->host, r->host);
        }
        n += !seen;
    }
    return n;
}

static void placeByDraws(storeObj *o, uint64_t size, int want, const char *tenant) {
    for (int draws = 8 * want + 16; o->nreplicas < want && draws > 0; draws--) {
        segment *s = drawSlot();
        if (s == NULL) continue;
        if (server.allocation_strategy == PLACE_FREE_RATIO) {
            segment *t = drawSlot(); /* two random choices, keep the emptier */
            if (t && freeRatio(t) > freeRatio(s)) s = t;
        }
        /* Another host is wanted while one is left that no replica is on
         * (the walk's rule); once every host has one, any segment will do. */
        if (hasReplicaOn(o, s) || (hostUsed(o, s) && hostsOf(o) < segmentHostCount()) ||
            !eligible(s, size, tenant))
            continue;
        allocateOn(o, s, size);
    }
}

static int tryPlace(storeObj *o, uint64_t size, int want, segment **prefer, int nprefer,
                    const char *writer_host, const char *tenant) {
    for (int i = 0; i < nprefer && o->nreplicas < want; i++)
        if (!hasReplicaOn(o, prefer[i]) && eligible(prefer[i], size, tenant)) allocateOn(o, prefer[i], size);
    if (o->nreplicas >= want) return o->nreplicas;
    if (segtabLen >= PLACE_DRAW_MIN_SLOTS && server.allocation_strategy != PLACE_LOCAL_FIRST) {
        placeByDraws(o, size, want, tenant);
        if (o->nreplicas >= want) return o->nreplicas;
    }

    int n = 0, nlocal = 0;
    segment **pool = zmalloc(sizeof(segment *) * (segtabLen + 1));
    serverVisit(VISITS_SEGMENTS, segtabLen);
    for (uint32_t i = 0; i < segtabLen; i++)
        if (segtab[i] && segmentPlaceable(segtab[i])) pool[n++] = segtab[i];
    if (server.allocation_strategy == PLACE_LOCAL_FIRST && writer_host) {
        for (int i = 0; i < n; i++) {
            if (hostEq(pool[i]->host, writer_host)) {
                segment *t = pool[nlocal];
                pool[nlocal++] = pool[i];
                pool[i] = t;
            }
        }
    }
    segment *setaside[STORE_MAX_REPLICAS];
    int nset = 0;
    for (int i = 0; i < n && o->nreplicas < want; i++) {
        /* Draw from [i, end): local ones first under local-first. */
        int end = i < nlocal ? nlocal : n;
        int pick = i + (int)(rnd() % (uint64_t)(end - i));
        if (server.allocation_strategy == PLACE_FREE_RATIO && end - i > 1) {
            /* Two random choices, keep the emptier one. */
            int other = i + (int)(rnd() % (uint64_t)(end - i));
            if (freeRatio(pool[other]) > freeRatio(pool[pick])) pick = other;
        }
        segment *s = pool[pick];
        pool[pick] = pool[i];
        pool[i] = s;
        if (hasReplicaOn(o, s) || !eligible(s, size, tenant)) continue;
        if (hostUsed(o, s)) {
            if (nset < STORE_MAX_REPLICAS) setaside[nset++] = s;
            continue;
        }
        allocateOn(o, s, size);
    }
    for (int i = 0; i < nset && o->nreplicas < want; i++) allocateOn(o, setaside[i], size);
    zfree(pool);
    return o->nreplicas;
}

/* The segment to make room in when nothing fits: the server's own pool if
 * the object could fit there once eviction made room (storeEvictionCouldFit:
 * bytes and a contiguous run), else the largest active segment that could;
 * NULL if none could (evicting would then empty the store for nothing). Eviction only takes objects with a replica in that segment:
 * evicting elsewhere frees nothing where the space is needed. */
static segment *evictionTarget(uint64_t size, const char *tenant) {
    if (segmentPlaceable(server.self) && segmentCouldHold(server.self, size) &&
        storeEvictionCouldFit(server.self, size))
        return server.self;
    segment *best = NULL;
    for (uint32_t i = 0; i < segtabLen; i++) {
        segment *s = segtab[i];
        if (s && s != server.self && segmentPlaceable(s) && tenantMayUse(s, tenant) && segmentCouldHold(s, size) &&
            (!best || s->size > best->size) && storeEvictionCouldFit(s, size))
            best = s;
    }
    return best;
}

int placeReplicas(storeObj *o, uint64_t size, int want, segment **prefer, int nprefer,
                  const char *writer_host, const char *tenant) {
    for (;;) {
        if (tryPlace(o, size, want, prefer, nprefer, writer_host, tenant) > 0) return o->nreplicas;
        /* Freed pool space still being zeroed comes back before anything
         * is evicted or the put is refused (zerofree.c). */
        if (zerofreeMakeRoom()) continue;
        if (storeLazyFreeMakeRoom()) continue; /* a FLUSHALL ASYNC still being freed */
        if (server.evict_policy == EVICT_NOEVICTION) return 0;
        segment *target = evictionTarget(size, tenant);
        /* Nothing is evicted for a put that could not fit anyway (a
         * hard-pinned object in the way, no run long enough): a refused
         * put changes nothing. A segment that could not is skipped. */
        if (target == NULL) return 0;
        if (!evictOne(target)) return 0;
    }
}
