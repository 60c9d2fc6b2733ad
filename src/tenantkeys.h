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

void tenantKeyAddedSlow(sds key);
void tenantKeyRemovedSlow(sds key);
/* key: the keyspace's own string, just added / about to be freed. */
static inline void tenantKeyAdded(sds key) {
    if (tenantKeysActive) tenantKeyAddedSlow(key);
}
static inline void tenantKeyRemoved(sds key) {
    if (tenantKeysActive) tenantKeyRemovedSlow(key);
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
/* INFO keyspace fields: tenant_prefixes, tenant_index_entries, tenant_keys_walked. */
sds tenantKeysInfo(sds s);

#endif
