/* tenantquota.c -- tenant-maxmemory: a bound on what one tenant's values
 * occupy, enforced by evicting that tenant's own values, never another's.
 *
 * Why. Tenants (ACL users restricted to key prefixes: acl.c, "Tenancy")
 * share the server's pool. Without a bound, one tenant writing fast makes
 * the pool's eviction take the least recently used values whoever wrote
 * them: its misbehaviour becomes everyone's cache misses. With
 * tenant-maxmemory set, a tenant's write that would take it past the bound
 * first evicts the tenant's own least recently used values; when its own
 * evictable values are not enough (its pins, holds, leases and pending
 * puts are what eviction skips), the write is refused with an error that
 * names the bound. Sized so that the bounds of the tenants sum to no more
 * than the pool, no tenant's write ever needs the pool's own eviction.
 *
 * One bound for every tenant, a config parameter, not a per-user ACL
 * rule: Redis's ACL has no such rule, ACL files and clients written for
 * Redis must keep working here unchanged, and tests/helpers/redis_diff.py
 * compares ACL rules with redis-server. A per-user figure can come later
 * as a config list without touching the ACL grammar.
 *
 * What a tenant is charged. The tenant's objects are the keys under its
 * key patterns' prefixes: the index tenantkeys.c already keeps for DBSIZE
 * and RANDOMKEY. Its counters are kept there, moved by the same hooks of
 * the keyspace (storeSet, deleteKey, the pending table: store.c) that add
 * and remove the keys, so a tenant's usage is a sum over its prefixes --
 * O(its patterns) per check, and no walk, whatever the others store. A
 * value is charged its extent in the server's pool (none if it lives only
 * in the tenant's own segments, which are its own memory), plus its key's
 * length and its 48-byte header: a tenant writing millions of tiny values
 * fills the heap, not the pool, and is bounded too (storeObjTenantCharge).
 * Puts in progress count from PUT.START: their space is taken, and no
 * one can evict it. Keys are charged whoever wrote them (an administrator
 * writing under a tenant's prefix fills that tenant's share), and the
 * charge is the same on a replica or after a restart: it is derived from
 * the key, never from the connection that wrote it.
 *
 * A tenant whose patterns are not all prefixes (~*:tenantA) is not
 * indexed (tenantkeys.c), so it cannot be counted without a walk: the
 * bound does not apply to it (INFO tenants shows it as unindexed).
 *
 * Enforced where a tenant's command adds a value: SET, SETEX, MSET, GETSET
 * and the other SET forms check the new value's exact charge (less the
 * value it replaces) before placing it in the pool -- large values too,
 * which are placed while their bytes are still arriving; PUT.START checks
 * its size before placement. Every other write command (APPEND, INCR,
 * COPY, RESTORE...) is checked before it runs, as maxmemory is: a tenant
 * already past its bound evicts its own values until under it, or is
 * refused. So a tenant passes its bound by at most one such command.
 *
 * Eviction within the tenant samples the tenant's own keys (tenantkeys.c:
 * random draws from its prefix sets, or all of them when it has at most
 * TQ_SAMPLES) and evicts the least recently used evictable one seen, as
 * evict.c's policy ranks them (soft-pinned only when no unpinned one turns
 * up). The keys looked at are counted (DEBUG VISITS tenant-evict), so a
 * test asserts that one eviction costs a bounded number of keys, not a
 * walk. A replica evicts nothing (it applies what its primary accepted)
 * and neither does the log's load: neither runs a restricted user's
 * command.
 */
#include "tenantquota.h"

#include <stdio.h>
#include <string.h>

#include "acl.h"
#include "server.h"
#include "store.h"
#include "tenantkeys.h"

#define TQ_SAMPLES 16 /* keys looked at per round */
#define TQ_ROUNDS 8   /* rounds before giving up; soft-pinned values from the half on */

static struct {
    unsigned long long evictions, refused;
} tq;

/* What a value is charged to its tenant (tenant-maxmemory):
 * its extent in the server's pool, if it has one there (a tenant's own
 * segments are its own memory), plus its key and header on the heap. Fixed
 * for the object's life -- pool replicas are placed before it is counted
 * and the pool never goes stale -- so the same figure is added and taken
 * away. */
uint64_t storeObjTenantCharge(const storeObj *o, size_t keylen) {
    uint64_t c = keylen + sizeof(storeObj);
    for (int i = 0; i < o->nreplicas; i++) {
        const storeReplica *r = i == 0 ? &o->r : &o->ext->more[i - 1];
        if (r->segslot == server.self->slot && r->seggen == server.self->gen && r->handle != ALLOC_NONE)
            return c + ((o->len + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1));
    }
    return c;
}

/* The tenant's least recently used evictable key among a sample, other
 * than `protect` (the key being written: its old value may be what SET ...
 * GET returns). 1 when one was evicted. */
static int evictOwn(const user *u, sds protect) {
    sds sample[TQ_SAMPLES];
    /* At most TQ_SAMPLES keys: each sample is all of them, so two rounds
     * (unpinned, then soft-pinned) say exactly whether any is evictable. */
    int all = tenantKeyCount(u) <= TQ_SAMPLES, rounds = all ? 2 : TQ_ROUNDS;
    for (int round = 0; round < rounds; round++) {
        int n = tenantSampleKeys(u, sample, TQ_SAMPLES);
        if (n == 0) return 0;
        serverVisit(VISITS_TENANT_EVICT, n);
        int softpin_ok = round >= rounds / 2, best = -1;
        uint32_t best_age = 0;
        for (int i = 0; i < n; i++) {
            if (protect && sdslen(protect) == sdslen(sample[i]) && !memcmp(protect, sample[i], sdslen(protect)))
                continue;
            dictEntry *de = dictFind(server.keys, sample[i]);
            if (de == NULL) continue;
            storeObj *o = de->val;
            int cls = evictClass(o);
            if (cls == 0 || (cls == 2 && !softpin_ok)) continue;
            uint32_t age = storeLruClock() - o->lru;
            if (best < 0 || age > best_age) best = i, best_age = age;
        }
        if (best >= 0) {
            sds key = sdsdup(sample[best]); /* the sample borrows the keyspace's, which the delete frees */
            storeDeleteKeyForEviction(key);
            sdsfree(key);
            server.stat_evictedkeys++;
            tq.evictions++;
            return 1;
        }
    }
    return 0;
}

static const user *boundedTenant(const client *c) {
    if (server.tenant_maxmemory == 0 || c == NULL || c->user == NULL || storeReplicaMode) return NULL;
    return aclUserRestricted(c->user) ? c->user : NULL;
}

int tenantQuotaMakeRoom(client *c, sds key, uint64_t len, int put, const char **err) {
    const user *u = boundedTenant(c);
    if (u == NULL) return C_OK;
    uint64_t limit = (uint64_t)server.tenant_maxmemory, objects, used;
    if (tenantUsage(u, &objects, &used) < 0) return C_OK; /* not indexed: not counted (see the top) */
    /* A large SET value is placed before the command's ACL check: a key
     * the user may not write is refused there, having evicted nothing. */
    if (!aclUserCanAccessKey(u, key, sdslen(key), ACL_WRITE)) return C_OK;
    /* Charged as if in the pool: a put's placement is not known yet. */
    uint64_t add = (uint64_t)sdslen(key) + sizeof(storeObj) + ((len + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1));
    if (len == 0) add = (uint64_t)sdslen(key) + sizeof(storeObj); /* SET k "": no extent */
    /* A SET's old value goes when the new one is stored; a put's stays
     * (readable) until PUT.END, so both are charged meanwhile. */
    uint64_t freed = 0;
    if (!put) {
        dictEntry *de = dictFind(server.keys, key);
        if (de) freed = storeObjTenantCharge(de->val, sdslen(key));
    }
    /* A value the bound could never hold evicts nothing. */
    if (add > limit) goto refuse;
    while (used + add > limit + freed) {
        if (!evictOwn(u, key)) goto refuse;
        if (tenantUsage(u, &objects, &used) < 0) return C_OK;
    }
    return C_OK;
refuse:
    tq.refused++;
    *err = put ? TENANT_QUOTA_NOSPACE_ERR : TENANT_QUOTA_OOM_ERR;
    return C_ERR;
}

int tenantQuotaBeforeCommand(client *c, const char **err) {
    const user *u = boundedTenant(c);
    /* Under CLIENT PAUSE nothing is evicted (networking.c), and a command
     * the pause let through is not refused for it, as storeMakeRoomForDataset. */
    if (u == NULL || pauseHoldsDataset()) return C_OK;
    uint64_t objects, used;
    if (tenantUsage(u, &objects, &used) < 0) return C_OK;
    while (used > (uint64_t)server.tenant_maxmemory) {
        if (!evictOwn(u, NULL)) {
            tq.refused++;
            *err = c->cmd->group && !strcmp(c->cmd->group, "store") ? TENANT_QUOTA_NOSPACE_ERR : TENANT_QUOTA_OOM_ERR;
            return C_ERR;
        }
        if (tenantUsage(u, &objects, &used) < 0) return C_OK;
    }
    return C_OK;
}

/* One line per tenant: its objects and charged bytes, whether it is
 * indexed (counted), and its connections (tenant-maxclients, acl.c). A
 * tenant asking sees only its own line, the bounds and the counters. */
sds tenantQuotaInfo(sds s, const user *asking) {
    s = sdscatprintf(s,
                     "tenant_maxmemory:%lld\r\ntenant_evicted_keys:%llu\r\ntenant_maxmemory_refusals:%llu\r\n"
                     "tenant_maxclients:%lld\r\ntenant_rejected_connections:%lld\r\n",
                     server.tenant_maxmemory, tq.evictions, tq.refused, server.tenant_maxclients,
                     server.stat_tenant_rejected_conn);
    int n;
    user **users = aclUsers(&n);
    for (int i = 0; i < n; i++) {
        const user *u = users[i];
        if (!aclUserRestricted(u) || (asking && aclUserRestricted(asking) && asking != u)) continue;
        uint64_t objects = 0, used = 0;
        int indexed = tenantUsage(u, &objects, &used) == 0;
        s = sdscatprintf(s, "tenant_%s:objects=%llu,bytes=%llu,indexed=%d,connections=%lu\r\n", u->name,
                         (unsigned long long)objects, (unsigned long long)used, indexed, u->nclients);
    }
    return s;
}

void tenantQuotaResetStats(void) {
    memset(&tq, 0, sizeof(tq));
    server.stat_tenant_rejected_conn = 0;
}
