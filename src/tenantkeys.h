/* tenantkeys.h -- each tenant's keys, indexed by its patterns' prefixes.
 * See tenantkeys.c. */
#ifndef TENANTKEYS_H
#define TENANTKEYS_H

#include <stdint.h>

#include "acl.h"
#include "dict.h"
#include "sds.h"

/* Whether any prefix is indexed: the hooks cost this test when none is. */
extern int tenantKeysActive;
/* Keys walked on a tenant's behalf (INFO tenant_keys_walked). */
extern unsigned long long tenantKeysWalked;

/* key: the keyspace's own string, just added / about to be freed, with
 * what its value is charged to the tenants whose prefix it has (the
 * value's pool bytes, the key's length and a header: tenantquota.c).
 * Callers test tenantKeysActive first, so that no charge is computed
 * while no prefix is indexed (store.c). */
void tenantKeyAddedSlow(sds key, uint64_t charge);
void tenantKeyRemovedSlow(sds key, uint64_t charge);
void tenantKeyChargedSlow(const char *key, size_t klen, int64_t delta, int pending);
/* The key's value replaced by one charged delta more (a SET over a key,
 * PUT.END REPLACE); or (pending) a put of the key started (delta > 0) or
 * left the pending table (delta < 0). */
static inline void tenantKeyCharged(const char *key, size_t klen, int64_t delta, int pending) {
    if (tenantKeysActive && delta) tenantKeyChargedSlow(key, klen, delta, pending);
}
void tenantKeysFlush(void);                      /* FLUSHALL */
void tenantKeysDetach(void (*take)(dict *d));    /* FLUSHALL ASYNC: the sets are freed later */
/* After the users changed (ACL SETUSER, DELUSER, LOAD, start-up). */
void tenantKeysRebuild(user **users, int nusers);
/* u's own keys, -1 when u has a pattern that is not indexed (the caller
 * walks the keyspace then). */
long long tenantKeyCount(const user *u);
/* A key drawn uniformly among u's (NULL: none), borrowed; -1 as above. */
int tenantRandomKey(const user *u, sds *key);
/* u's keys in slot: a walk of u's own keys (CLUSTER COUNTKEYSINSLOT
 * takes the shorter walk). */
long long tenantCountKeysInSlot(const user *u, int slot);
/* Copies of u's keys it may access with perm (a tenant's FLUSHALL and
 * REMOVE.ALL), *n of them, to free by the caller; NULL when u is not
 * indexed. O(u's own keys). */
sds *tenantKeysCollect(const user *u, int perm, size_t *n);
/* The index's heap: part of the dataset maxmemory bounds (store.c). */
uint64_t tenantKeysHeap(void);
/* Its keys with a TTL: O(its own keys). 0 when not indexed. */
long long tenantExpiresCount(const user *u);
/* What u's keys (and puts of them in progress) are charged, summed over
 * its prefixes' counters, and how many keys: O(u's patterns), no walk.
 * -1 when u is not indexed. */
int tenantUsage(const user *u, uint64_t *objects, uint64_t *bytes);
/* Up to n of u's keys (borrowed), for eviction within the tenant: all of
 * them when u has at most n, else n drawn at random, each from a prefix
 * set chosen by its size. 0 when u is not indexed or has none. */
int tenantSampleKeys(const user *u, sds *out, int n);
/* The recount (DEBUG TENANT-CHECK): a line appended to out per prefix
 * counter that differs from a walk of the keyspace and pending table. */
sds *tenantKeysCheck(sds *out, size_t *n);
/* INFO keyspace fields: tenant_prefixes, tenant_index_entries, tenant_keys_walked. */
sds tenantKeysInfo(sds s);

#endif
