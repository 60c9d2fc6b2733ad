/* owner.c -- owner liveness (SPEC §3 "Owners").
 *
 * Every mounted segment names an owner: the process that contributes its
 * memory. An owner is alive while at least one connection that mounted or
 * sent HEARTBEAT for it is open, and for owner-ttl ms after the last one
 * closed or the last HEARTBEAT. A dead owner's segments are unmounted, so
 * readers are never sent to memory nobody serves any more; a HEARTBEAT that
 * arrives after that gets -NEEDREMOUNT and the client mounts again.
 *
 * Counting connections (not just heartbeats) means a healthy client with an
 * open connection needs no heartbeat traffic at all, and a client that
 * hiccups (reconnects within owner-ttl) keeps its segments: Mooncake's
 * master wiped a client's metadata on a missed heartbeat, which is the
 * failure this design avoids.
 */
#include "owner.h"

#include <string.h>

#include "segment.h"
#include "server.h"
#include "util.h"
#include "zmalloc.h"

static dict *owners; /* sds name -> owner* */

static uint64_t ownerHash(const void *key) { return dictGenHashFunction(key, sdslen((sds)key)); }
static int ownerCompare(const void *a, const void *b) {
    return sdslen((sds)a) == sdslen((sds)b) && !memcmp(a, b, sdslen((sds)a));
}
static void ownerFree(void *val) {
    owner *o = val;
    sdsfree(o->name);
    sdsfree(o->tenant);
    zfree(o);
}
static dictType ownerDictType = {ownerHash, ownerCompare, NULL, ownerFree};

owner *ownerLookup(const char *name, size_t len) {
    if (!owners) return NULL;
    sds key = sdsnewlen(name, len);
    dictEntry *de = dictFind(owners, key);
    sdsfree(key);
    return de ? de->val : NULL;
}

owner *ownerGetOrCreate(const char *name) {
    if (!owners) owners = dictCreate(&ownerDictType);
    owner *o = ownerLookup(name, strlen(name));
    if (o) return o;
    o = zcalloc(sizeof(*o));
    o->name = sdsnew(name);
    o->last_seen_ms = mstime();
    dictAdd(owners, o->name, o);
    return o;
}

void ownerAttachClient(owner *o, client *c) {
    o->last_seen_ms = mstime();
    for (int i = 0; i < c->nowners; i++)
        if (c->owners[i] == o) return;
    c->owners = zrealloc(c->owners, sizeof(owner *) * (size_t)(c->nowners + 1));
    c->owners[c->nowners++] = o;
    o->nconns++;
}

void ownerDetachClient(client *c) {
    long long now = mstime();
    for (int i = 0; i < c->nowners; i++) {
        c->owners[i]->nconns--;
        c->owners[i]->last_seen_ms = now;
    }
    zfree(c->owners);
    c->owners = NULL;
    c->nowners = 0;
}

int ownerIsAlive(const owner *o) {
    return o->nconns > 0 || mstime() - o->last_seen_ms <= server.owner_ttl;
}

unsigned long ownerCount(void) { return owners ? dictSize(owners) : 0; }

/* Dead owners lose their segments. Owners are few (one per contributing
 * process), so a full pass per cron tick is cheap; the per-object work of
 * dropping replicas is in storeUnmountSegment. */
void ownerCron(void) {
    if (!owners || dictSize(owners) == 0) return;
    dictIterator *it = dictGetSafeIterator(owners);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        owner *o = de->val;
        if (ownerIsAlive(o)) continue;
        for (uint32_t i = 0; i < segtabLen; i++) {
            segment *s = segtab[i];
            if (s && s->id != SEGMENT_SELF_ID && !strcmp(s->owner, o->name)) {
                serverLog(LL_NOTICE, "Owner '%s' is gone: unmounting segment '%s' (id %llu)", o->name,
                          s->name, (unsigned long long)s->id);
                segmentUnmount(s);
            }
        }
        dictDelete(owners, o->name);
    }
    dictReleaseIterator(it);
}
