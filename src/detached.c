/* detached.c -- objects of client segments loaded from the log (or learnt
 * from the primary's stream on a cluster replica), held aside until their
 * host proves it still has the same memory.
 *
 * A store object whose replicas live in a client process's memory is logged
 * with its metadata and places (aof.c: PLACED), never its bytes: those are
 * the host's. After a server restart the log says "key k was 1 MiB at
 * offset 4096 of segment 7", and nothing yet says segment 7 is still the
 * memory that was written: the host may have died and a new process taken
 * its name (in a container, even its pid and so its owner name). Serving
 * the object then would hand readers someone else's bytes. So a loaded
 * object is not a key at all: it is an entry here, filed under its
 * segments, which are SEG_DETACHED (they take and serve nothing). Only a
 * MOUNT from the same owner that presents the identity the segment was
 * mounted with (128 random bits libmooncake draws once per hosted memory
 * and keeps in that process only; the log holds their SHA-256) turns the
 * entries back into objects, at the very offsets the log names
 * (allocAllocAt, in ascending order: O(1) each). A MOUNT without it, a
 * dead owner (owner-ttl, or a probe that finds the host gone) or an
 * UNMOUNT drops them.
 *
 * Why not keys with unreadable replicas: every reader (GET.REPLICAS, the
 * relayed GET, DUMP, eviction, the HTTP /query) would need to learn a new
 * kind of replica, and EXISTS would say yes to a key no read can return.
 * Held aside, the keyspace stays exactly what can be served.
 *
 * Newer wins. A key written or deleted after the restart (detachedKeyChanged,
 * from signalModifiedKey) ends its entry: an older version must never come
 * back over it. A FLUSHALL ends all of them.
 *
 * An object with replicas in several client segments comes back with those
 * in the first of them to be re-attached; the others' space stays free.
 *
 * A failover is a restart seen from another node. A cluster replica gets
 * the primary's SEGMENT and PLACED records over the stream (replication.c)
 * and makes entries of them as the loader does, for as long as it is a
 * replica: they stay in the dict only, filed under no segment, so a
 * SEGMENT record that replaces a segment (its host re-attached on the
 * primary) loses none, and a later record of the key ends them as on a
 * load. Promoted, it files them (detachedLoadDone) and waits for the
 * hosts, which libmooncake remounts on the slot's new owner. The dict is
 * bounded by the primary's keyspace and what it held at the full sync
 * (each full sync starts empty: FLUSHALL ends them all).
 *
 * Cost: one dict entry and one small struct per held object; per segment a
 * list of its entries, walked once at its re-attach or its end. Entries
 * are filed only once, after loading or at a promotion, so lists never grow
 * after it; a list may hold entries that ended since (dead), skipped and
 * freed when it is walked.
 */
#include "detached.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "dict.h"
#include "dump.h"
#include "segment.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

typedef struct detachedObj {
    sds key;
    long long expire_ms; /* absolute unix ms, 0: none */
    unsigned flags;      /* DUMP_F_HARDPIN, DUMP_F_CHECKSUM */
    long long created_ms, softpin_until_ms;
    sds checksum;
    uint64_t len;
    int nreplicas;
    uint64_t segid[AOF_PLACED_MAX_REPLICAS]; /* 0: that segment went */
    uint64_t offset[AOF_PLACED_MAX_REPLICAS];
    int refs; /* the dict's, one per segment list */
    int dead; /* out of the dict */
} detachedObj;

typedef struct segList {
    uint64_t id;
    detachedObj **v;
    size_t n, cap;
} segList;

unsigned long detachedEntries;

static dict *byKey;
static segList *lists; /* one per detached segment: few (one per host process) */
static size_t nlists;
static struct {
    unsigned long long attached, conflicts, lost, expired;
} dst;

static dictType byKeyType = {dictSdsHash, dictSdsEqual, NULL, NULL};

static void unref(detachedObj *e) {
    if (--e->refs > 0) return;
    sdsfree(e->key);
    sdsfree(e->checksum);
    zfree(e);
}

/* Out of the dict: its key is served by the keyspace from now on (or by
 * nothing). Lists may still point at it. */
static void endEntry(detachedObj *e) {
    dictDelete(byKey, e->key);
    e->dead = 1;
    detachedEntries = byKey ? dictSize(byKey) : 0;
    unref(e);
}

void detachedKeyChanged(sds key) {
    if (byKey == NULL) return;
    dictEntry *de = dictFind(byKey, key);
    if (de) endEntry(de->val);
}

void detachedFlushAll(void) {
    if (byKey == NULL || dictSize(byKey) == 0) return;
    dictIterator *it = dictGetSafeIterator(byKey);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) endEntry(de->val);
    dictReleaseIterator(it);
}

void detachedLoadPlaced(sds key, long long expire_ms, const aofPlaced *p) {
    if (byKey == NULL) byKey = dictCreate(&byKeyType);
    detachedKeyChanged(key);
    detachedObj *e = zcalloc(sizeof(*e));
    e->key = sdsdup(key);
    e->expire_ms = expire_ms;
    e->flags = p->flags;
    e->created_ms = p->created_ms;
    e->softpin_until_ms = p->softpin_until_ms;
    if (p->flags & DUMP_F_CHECKSUM) e->checksum = sdsnewlen(p->checksum.p, p->checksum.len);
    e->len = p->value_len;
    e->nreplicas = p->nreplicas;
    memcpy(e->segid, p->segid, sizeof(e->segid));
    memcpy(e->offset, p->offset, sizeof(e->offset));
    e->refs = 1;
    dictAdd(byKey, e->key, e);
    detachedEntries = dictSize(byKey);
}

static segList *listFor(uint64_t id, int create) {
    for (size_t i = 0; i < nlists; i++)
        if (lists[i].id == id) return &lists[i];
    if (!create) return NULL;
    lists = zrealloc(lists, sizeof(segList) * (nlists + 1));
    segList *l = &lists[nlists++];
    memset(l, 0, sizeof(*l));
    l->id = id;
    return l;
}

static void listPush(segList *l, detachedObj *e) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = zrealloc(l->v, sizeof(detachedObj *) * l->cap);
    }
    l->v[l->n++] = e;
    e->refs++;
}

/* Drops l (its references first). */
static void listDrop(segList *l) {
    for (size_t i = 0; i < l->n; i++) unref(l->v[i]);
    zfree(l->v);
    *l = lists[--nlists];
}

void detachedLoadDone(void) {
    if (byKey == NULL) return;
    dictIterator *it = dictGetSafeIterator(byKey);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        detachedObj *e = de->val;
        int kept = 0;
        for (int i = 0; i < e->nreplicas; i++) {
            segment *s = segmentLookupId(e->segid[i]);
            if (s == NULL || s->state != SEG_DETACHED || e->offset[i] > s->size || e->len > s->size - e->offset[i]) {
                e->segid[i] = 0; /* its segment went before the restart, or the place is not in it */
                continue;
            }
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= e->segid[j] == e->segid[i];
            if (seen) {
                e->segid[i] = 0;
                continue;
            }
            listPush(listFor(s->id, 1), e);
            kept++;
        }
        if (kept == 0) {
            dst.lost++;
            endEntry(e);
        }
    }
    dictReleaseIterator(it);
}

/* The live entries of l lose their replica in l's segment; those left
 * with none end. Returns how many ended. */
static unsigned long forgetSegment(segList *l) {
    unsigned long ended = 0;
    for (size_t i = 0; i < l->n; i++) {
        detachedObj *e = l->v[i];
        if (e->dead) continue;
        int left = 0;
        for (int r = 0; r < e->nreplicas; r++) {
            if (e->segid[r] == l->id) e->segid[r] = 0;
            left |= e->segid[r] != 0;
        }
        if (!left) {
            ended++;
            endEntry(e);
        }
    }
    return ended;
}

typedef struct placeAt {
    uint64_t offset;
    detachedObj *e;
} placeAt;

static int byOffset(const void *a, const void *b) {
    uint64_t x = ((const placeAt *)a)->offset, y = ((const placeAt *)b)->offset;
    return x < y ? -1 : x > y;
}

/* e's object, its replica in s at h/offset; into the keyspace. */
static void attachOne(segment *s, detachedObj *e, uint32_t h, uint64_t offset) {
    storeObj *o = storeObjNew(e->len);
    storeObjAddReplica(o, s, h, offset);
    storeObjExt *ext = storeObjGetExt(o);
    storeObjSetCreated(o, e->created_ms > 0 ? e->created_ms : server.mstime); /* a store object (store.h) */
    storeObjSetKey(o, e->key);
    if (e->checksum) ext->checksum = sdsdup(e->checksum);
    /* The log's deadline is the wall clock's; held on the monotonic one. */
    if (e->softpin_until_ms > server.mstime)
        ext->softpin_until_ms = addSaturate(server.monotime, e->softpin_until_ms - server.mstime);
    if (e->flags & DUMP_F_HARDPIN) o->flags |= OBJ_FLAG_HARDPIN;
    sds key = sdsdup(e->key);
    long long expire = e->expire_ms;
    endEntry(e); /* first: storeSet's signalModifiedKey would end it as a newer version */
    storeSet(key, o, expire > 0 ? expire : -1, 0);
    sdsfree(key);
}

unsigned long detachedAttach(segment *s) {
    segList *l = listFor(s->id, 0);
    if (l == NULL) return 0;
    placeAt *order = zmalloc(sizeof(placeAt) * (l->n ? l->n : 1));
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        detachedObj *e = l->v[i];
        if (e->dead) continue;
        for (int r = 0; r < e->nreplicas; r++) {
            if (e->segid[r] != s->id) continue;
            order[n].offset = e->offset[r];
            order[n++].e = e;
            break;
        }
    }
    qsort(order, n, sizeof(placeAt), byOffset);
    unsigned long attached = 0;
    uint32_t cursor = ALLOC_NONE;
    for (size_t i = 0; i < n; i++) {
        detachedObj *e = order[i].e;
        if (e->expire_ms > 0 && e->expire_ms <= server.mstime) {
            dst.expired++;
            endEntry(e);
            continue;
        }
        uint32_t h = allocAllocAt(s->alloc, order[i].offset, e->len, &cursor);
        if (h == ALLOC_NONE) {
            /* Overlapping another object's extent: the log cannot be right
             * about both, so neither guess is served. */
            if (dst.conflicts++ == 0)
                serverLog(LL_WARNING, "Segment '%s': the log places key '%s' at offset %llu, which overlaps another "
                                      "object or runs past the segment: not re-attached",
                          s->name, e->key, (unsigned long long)order[i].offset);
            continue;
        }
        attachOne(s, e, h, order[i].offset);
        attached++;
    }
    zfree(order);
    dst.lost += forgetSegment(l); /* a conflict's entry may live on in another segment */
    listDrop(l);
    dst.attached += attached;
    return attached;
}

void detachedSegmentGone(segment *s) {
    segList *l = listFor(s->id, 0);
    if (l == NULL) return;
    unsigned long lost = forgetSegment(l);
    dst.lost += lost;
    if (lost)
        serverLog(LL_NOTICE, "Segment '%s' (id %llu) was never re-attached: %lu objects the log held there are gone",
                  s->name, (unsigned long long)s->id, lost);
    listDrop(l);
}

sds detachedRewrite(sds buf, sds (*emit)(sds buf)) {
    if (byKey == NULL || dictSize(byKey) == 0) return buf;
    dictIterator *it = dictGetSafeIterator(byKey);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        detachedObj *e = de->val;
        aofPlaced p = {0};
        p.flags = e->flags;
        p.created_ms = e->created_ms;
        p.softpin_until_ms = e->softpin_until_ms;
        if (e->checksum) {
            p.checksum.p = e->checksum;
            p.checksum.len = sdslen(e->checksum);
        }
        p.value_len = e->len;
        for (int r = 0; r < e->nreplicas; r++) {
            if (e->segid[r] == 0) continue;
            p.segid[p.nreplicas] = e->segid[r];
            p.offset[p.nreplicas++] = e->offset[r];
        }
        if (p.nreplicas == 0) continue;
        buf = aofCatPlaced(buf, e->key, sdslen(e->key), e->expire_ms, &p);
        if (sdslen(buf) >= 4 * 1024 * 1024) buf = emit(buf);
    }
    dictReleaseIterator(it);
    return buf;
}

sds detachedInfo(sds s) {
    return sdscatprintf(s,
                        "detached_objects:%lu\r\ndetached_segments:%zu\r\nreattached_objects:%llu\r\n"
                        "reattach_conflicts:%llu\r\ndetached_objects_lost:%llu\r\ndetached_objects_expired:%llu\r\n",
                        detachedEntries, nlists, dst.attached, dst.conflicts, dst.lost, dst.expired);
}
