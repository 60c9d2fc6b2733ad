/* placement.c -- where the replicas of a new object go.
 *
 * A put asks for n replicas (best effort, at least one). The candidates are
 * the active segments whose allocator can hold the object right now;
 * segments being unmounted (GRACEFUL) take no new allocations. Replicas go
 * to distinct segments always, and to distinct hosts when there are enough
 * hosts: the first pass skips hosts already used, the second fills up.
 *
 * Order of candidates:
 *  - PREFER segments first, in the order given;
 *  - then by allocation-strategy:
 *    random      uniformly shuffled (the default);
 *    free-ratio  "power of two choices": repeatedly take two random
 *                candidates and keep the one with the larger free fraction.
 *                Plain least-full-first sends every write to a freshly
 *                mounted empty segment until it catches up (a skew Mooncake
 *                users hit); two choices still favours emptier segments but
 *                spreads writes over all of them;
 *    local-first segments on the writer's host first (shuffled), then the
 *                rest (shuffled).
 *
 * If no extent can be had anywhere, eviction (policy permitting) frees
 * objects and placement is retried; then the put fails with -NOSPACE.
 */
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "server.h"
#include "store.h"
#include "util.h"
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

static void shuffle(segment **v, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1));
        segment *t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static double freeRatio(segment *s) {
    allocStats as;
    allocGetStats(s->alloc, &as);
    return s->size ? (double)as.free / (double)s->size : 0.0;
}

/* Reorders v[0..n) by two-choice sampling on the free fraction. */
static void orderTwoChoices(segment **v, int n) {
    for (int i = 0; i < n - 1; i++) {
        int a = i + (int)(rnd() % (uint64_t)(n - i));
        int b = i + (int)(rnd() % (uint64_t)(n - i));
        int pick = freeRatio(v[a]) >= freeRatio(v[b]) ? a : b;
        segment *t = v[i];
        v[i] = v[pick];
        v[pick] = t;
    }
}

static int hostEq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Fills `order` with every candidate in placement order; returns the count. */
static int orderCandidates(segment **order, uint64_t size, segment **prefer, int nprefer,
                           const char *writer_host) {
    int n = 0;
    for (int i = 0; i < nprefer; i++) {
        segment *s = prefer[i];
        if (s->state != SEG_ACTIVE || allocMaxAllocatable(s->alloc) < size) continue;
        int dup = 0;
        for (int k = 0; k < n; k++) dup |= order[k] == s;
        if (!dup) order[n++] = s;
    }
    int first_rest = n;
    for (uint32_t i = 0; i < segtabLen; i++) {
        segment *s = segtab[i];
        if (!s || s->state != SEG_ACTIVE || allocMaxAllocatable(s->alloc) < size) continue;
        int dup = 0;
        for (int k = 0; k < first_rest; k++) dup |= order[k] == s;
        if (!dup) order[n++] = s;
    }
    segment **rest = order + first_rest;
    int nrest = n - first_rest;
    if (server.allocation_strategy == PLACE_FREE_RATIO) {
        orderTwoChoices(rest, nrest);
    } else if (server.allocation_strategy == PLACE_LOCAL_FIRST && writer_host) {
        int local = 0;
        for (int i = 0; i < nrest; i++) {
            if (hostEq(rest[i]->host, writer_host)) {
                segment *t = rest[local];
                rest[local++] = rest[i];
                rest[i] = t;
            }
        }
        shuffle(rest, local);
        shuffle(rest + local, nrest - local);
    } else {
        shuffle(rest, nrest);
    }
    return n;
}

static int tryPlace(storeObj *o, uint64_t size, int want, segment **prefer, int nprefer,
                    const char *writer_host) {
    int cap = (int)segmentCount() + nprefer + 1;
    segment **order = zmalloc(sizeof(segment *) * (size_t)cap);
    int n = orderCandidates(order, size, prefer, nprefer, writer_host);
    const char *hosts[STORE_MAX_REPLICAS];
    char *used = zcalloc((size_t)(n ? n : 1));
    for (int pass = 0; pass < 2 && o->nreplicas < want; pass++) {
        for (int i = 0; i < n && o->nreplicas < want; i++) {
            if (used[i]) continue;
            segment *s = order[i];
            if (pass == 0) {
                int seen = 0;
                for (int h = 0; h < o->nreplicas; h++) seen |= hostEq(hosts[h], s->host);
                if (seen) continue;
            }
            uint64_t offset;
            uint32_t handle = allocAlloc(s->alloc, size, &offset);
            used[i] = 1;
            if (handle == ALLOC_NONE) continue;
            hosts[o->nreplicas] = s->host;
            storeObjAddReplica(o, s, handle, offset);
        }
    }
    zfree(used);
    zfree(order);
    return o->nreplicas;
}

/* Whether evicting could ever make room: some active segment is at least
 * that large. Otherwise evicting would empty the store for nothing. */
static int couldEverFit(uint64_t size) {
    for (uint32_t i = 0; i < segtabLen; i++)
        if (segtab[i] && segtab[i]->state == SEG_ACTIVE && segtab[i]->size >= size) return 1;
    return 0;
}

int placeReplicas(storeObj *o, uint64_t size, int want, segment **prefer, int nprefer,
                  const char *writer_host) {
    for (;;) {
        if (tryPlace(o, size, want, prefer, nprefer, writer_host) > 0) return o->nreplicas;
        if (server.evict_policy == EVICT_NOEVICTION || !couldEverFit(size) || !evictOne()) return 0;
    }
}
