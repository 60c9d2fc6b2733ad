/* tenantkeys.c -- each tenant's keys, indexed by the prefixes of its ACL
 * patterns, so that what a tenant counts or draws costs it nothing in the
 * number of the others' keys.
 *
 * A tenant sees only the keys it could access (acl.c, "what a tenant may
 * see"). Counting them by a walk of the keyspace made DBSIZE, RANDOMKEY
 * (when random draws missed) and a tenant's FLUSHALL O(all keys): one
 * tenant calling them in a loop stalled everyone. Tenants are ACL users
 * whose patterns are, in practice, prefixes (~tenantA:*), so the keyspace
 * keeps, for every distinct prefix P of a restricted user's pattern "P*"
 * (P without glob characters), a set of the keys that start with P: a dict
 * of key strings borrowed from the keyspace (as the cluster's slot index
 * borrows them), maintained where every key is added and removed
 * (storeSet, deleteKey, the flushes: store.c). Then a tenant's DBSIZE is a
 * sum of set sizes, its RANDOMKEY one dictGetRandomKey, its FLUSHALL a
 * walk of its own keys, and no counter can drift: the sets are the keys.
 *
 * A pattern that is a key with no glob characters at all (~tenantA:conf) is
 * one lookup. A user with any other pattern (~*:tenantA, ~t?x*) is not
 * indexed: its commands walk the keyspace as before (documented in
 * docs/PROTOCOL.md: give tenants prefix patterns). Prefixes of one user
 * that contain one another count once (the longer is dropped: its keys are
 * the shorter's).
 *
 * Cost. With no restricted user there are no prefixes and each hook is one
 * test. Otherwise a key added or removed costs one binary search per
 * distinct prefix length (usually one), plus a dict insert or delete for
 * each prefix it starts with. The prefix set is recomputed after each ACL
 * SETUSER, DELUSER and LOAD (and at start-up); a prefix new to it is filled
 * by one walk of the keyspace -- an administrator's command, not a
 * tenant's. INFO's tenant_keys_walked counts the keys walked on a tenant's
 * behalf (the unindexed fallbacks, CLUSTER COUNTKEYSINSLOT), so tests can
 * assert the work done without timing it.
 *
 * Charges. The same hooks keep, per prefix, what its keys' values and puts
 * in progress are charged (tkPrefix below), so tenant-maxmemory
 * (tenantquota.c) reads a tenant's usage as a sum over its prefixes and
 * samples its own keys to evict one, never walking anyone's. Counters
 * moved by hooks can drift where a hook is missed, silently; DEBUG
 * TENANT-CHECK (tenantKeysCheck below) recounts them by the walk they
 * avoid, and tests/unit/tenant_recount.tcl runs it after every step of a
 * random walk over the commands that move them.
 *
 * Overlapping prefixes. A key is in the set of every indexed prefix it
 * starts with (a:b:1 is in a:'s set and in a:b:'s), and each prefix counts
 * its charge. A user's view drops its patterns covered by a shorter one of
 * its own (userView), so one tenant is charged a key once however many of
 * its patterns match it; two tenants whose patterns both match it are each
 * charged it in full: each may write it.
 */
#include "tenantkeys.h"

#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "cluster.h"
#include "server.h"
#include "store.h"
#include "zmalloc.h"

/* The counters are what tenant-maxmemory bounds (tenantquota.c): kept
 * here, beside the sets, because the same hooks that add and remove a key
 * know its charge, so a tenant's usage is a sum over its prefixes and no
 * walk. Pending puts are counted apart: a flush empties the sets and the
 * value counters at once, while the pending table is emptied put by put. */
typedef struct tkPrefix {
    sds prefix;
    dict *keys;   /* borrowed key sds -> NULL */
    uint64_t value_bytes;   /* the charges of the values of the keys above */
    uint64_t pending_bytes; /* the charges of puts in progress of keys with the prefix */
} tkPrefix;

static tkPrefix *prefixes;  /* sorted by (length, bytes) */
static int nprefixes;
static size_t *lengths;     /* the distinct prefix lengths, ascending */
static int nlengths;
unsigned long long tenantKeysWalked;
int tenantKeysActive;

static uint64_t tkHash(const void *key) { return storeKeyHashBuf(key, sdslen((sds)key)); }
static int tkCompare(const void *a, const void *b) {
    return sdslen((sds)a) == sdslen((sds)b) && !memcmp(a, b, sdslen((sds)a));
}
static dictType tkKeysType = {tkHash, tkCompare, NULL, NULL};

static int cmpPrefix(const sds a, const char *b, size_t blen) {
    size_t alen = sdslen(a);
    if (alen != blen) return alen < blen ? -1 : 1;
    return memcmp(a, b, alen);
}

static int findPrefix(const char *p, size_t len) {
    int lo = 0, hi = nprefixes - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = cmpPrefix(prefixes[mid].prefix, p, len);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Runs body with p at each indexed prefix that key starts with: one binary
 * search per distinct prefix length. */
#define FOR_EACH_PREFIX_OF(key, klen, body)                                                          \
    for (int li_ = 0; li_ < nlengths && lengths[li_] <= (klen); li_++) {                             \
        int pi_ = findPrefix((key), lengths[li_]);                                                   \
        if (pi_ < 0) continue;                                                                       \
        tkPrefix *p = &prefixes[pi_];                                                                \
        body                                                                                         \
    }

void tenantKeyAddedSlow(sds key, uint64_t charge) {
    size_t klen = sdslen(key);
    FOR_EACH_PREFIX_OF(key, klen, dictAdd(p->keys, key, NULL); p->value_bytes += charge;)
}

void tenantKeyRemovedSlow(sds key, uint64_t charge) {
    size_t klen = sdslen(key);
    FOR_EACH_PREFIX_OF(key, klen, if (dictDelete(p->keys, key) == DICT_OK) p->value_bytes -= charge;)
}

void tenantKeyChargedSlow(const char *key, size_t klen, int64_t delta, int pending) {
    FOR_EACH_PREFIX_OF(key, klen, {
        uint64_t *f = pending ? &p->pending_bytes : &p->value_bytes;
        *f += (uint64_t)delta; /* two's complement: a negative delta subtracts */
    })
}

void tenantKeysFlush(void) {
    for (int i = 0; i < nprefixes; i++) {
        dictEmpty(prefixes[i].keys, NULL);
        prefixes[i].value_bytes = 0;
    }
}

void tenantKeysDetach(void (*take)(dict *d)) {
    for (int i = 0; i < nprefixes; i++) {
        take(prefixes[i].keys);
        prefixes[i].keys = dictCreate(&tkKeysType);
        prefixes[i].value_bytes = 0;
    }
}

/* The literal prefix P of a pattern "P*", or -1 (exact: 0 and *len the
 * key's length for a pattern with no glob characters). */
static int patternKind(const char *pat, size_t plen, size_t *len) {
    for (size_t i = 0; i < plen; i++) {
        char ch = pat[i];
        if (ch == '*' && i == plen - 1) {
            *len = i;
            return 1;
        }
        if (ch == '*' || ch == '?' || ch == '[' || ch == '\\') return -1;
    }
    *len = plen;
    return 0;
}

static int cmpTk(const void *a, const void *b) {
    const tkPrefix *x = a, *y = b;
    return cmpPrefix(x->prefix, y->prefix, sdslen(y->prefix));
}

void tenantKeysRebuild(user **users, int nusers) {
    /* The new set, with duplicates. */
    int cap = 8, n = 0;
    tkPrefix *np = zmalloc(sizeof(*np) * (size_t)cap);
    for (int u = 0; u < nusers; u++) {
        if (!aclUserRestricted(users[u])) continue;
        for (int k = 0; k < users[u]->nkeys; k++) {
            sds pat = users[u]->keys[k].pattern;
            size_t len;
            if (patternKind(pat, sdslen(pat), &len) != 1) continue;
            if (n == cap) np = zrealloc(np, sizeof(*np) * (size_t)(cap *= 2));
            np[n].prefix = sdsnewlen(pat, len);
            np[n].value_bytes = np[n].pending_bytes = 0;
            np[n++].keys = NULL;
        }
    }
    qsort(np, (size_t)n, sizeof(*np), cmpTk);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && !cmpTk(&np[m - 1], &np[i])) {
            sdsfree(np[i].prefix);
            continue;
        }
        np[m++] = np[i];
    }
    /* Carry over the sets of prefixes kept; fill the new ones in one walk. */
    int fill = 0;
    for (int i = 0; i < m; i++) {
        int old = findPrefix(np[i].prefix, sdslen(np[i].prefix));
        if (old >= 0) {
            np[i].keys = prefixes[old].keys;
            np[i].value_bytes = prefixes[old].value_bytes;
            np[i].pending_bytes = prefixes[old].pending_bytes;
            prefixes[old].keys = NULL;
        } else {
            np[i].keys = dictCreate(&tkKeysType);
            fill = 1;
        }
    }
    for (int i = 0; i < nprefixes; i++) {
        if (prefixes[i].keys) dictRelease(prefixes[i].keys);
        sdsfree(prefixes[i].prefix);
    }
    zfree(prefixes);
    zfree(lengths);
    prefixes = np;
    nprefixes = m;
    lengths = zmalloc(sizeof(size_t) * (size_t)(m ? m : 1));
    nlengths = 0;
    tenantKeysActive = m > 0;
    for (int i = 0; i < m; i++)
        if (nlengths == 0 || lengths[nlengths - 1] != sdslen(np[i].prefix)) lengths[nlengths++] = sdslen(np[i].prefix);
    if (!fill || server.keys == NULL) return;
    /* Refill every set and counter: simpler than telling new from kept,
     * and an administrator's command. */
    tenantKeysFlush();
    for (int i = 0; i < m; i++) np[i].pending_bytes = 0;
    dictIterator *it = dictGetSafeIterator(server.keys);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) tenantKeyAddedSlow(de->key, storeObjTenantCharge(de->val, sdslen(de->key)));
    dictReleaseIterator(it);
    it = dictGetSafeIterator(server.pending);
    while ((de = dictNext(it)) != NULL)
        if (de->val)
            tenantKeyChargedSlow(de->key, sdslen(de->key), (int64_t)storeObjTenantCharge(de->val, sdslen(de->key)), 1);
    dictReleaseIterator(it);
}

/* ---- a user's view ------------------------------------------------------- */

/* The parts of u's keyspace: its minimal prefixes' sets and its exact keys
 * not under one of them. 0, or -1 if u has a pattern that is not indexed. */
typedef struct tkView {
    dict *sets[64];
    tkPrefix *pfx[64]; /* sets[i]'s prefix */
    int nsets;
    sds exact[64];
    int nexact;
} tkView;

static int userView(const user *u, tkView *v) {
    v->nsets = v->nexact = 0;
    if (!aclUserRestricted(u) || u->nkeys > 64) return -1;
    for (int k = 0; k < u->nkeys; k++) {
        sds pat = u->keys[k].pattern;
        size_t len;
        int kind = patternKind(pat, sdslen(pat), &len);
        if (kind < 0) return -1;
        /* Covered by a shorter prefix of the user's? */
        int covered = 0;
        for (int j = 0; j < u->nkeys && !covered; j++) {
            if (j == k) continue;
            sds other = u->keys[j].pattern;
            size_t olen;
            if (patternKind(other, sdslen(other), &olen) != 1 || olen > len) continue;
            if (memcmp(other, pat, olen)) continue;
            /* Equal prefixes (a pattern said twice): keep the first. */
            covered = olen < len || kind == 0 || j < k;
        }
        if (!covered && kind == 0)
            for (int j = 0; j < k && !covered; j++) covered = !strcmp(u->keys[j].pattern, pat);
        if (covered) continue;
        if (kind == 0) {
            v->exact[v->nexact++] = pat;
        } else {
            int i = findPrefix(pat, len);
            if (i < 0) return -1; /* not indexed yet (cannot happen after a rebuild) */
            v->pfx[v->nsets] = &prefixes[i];
            v->sets[v->nsets++] = prefixes[i].keys;
        }
    }
    return 0;
}

long long tenantKeyCount(const user *u) {
    tkView v;
    if (userView(u, &v) < 0) return -1;
    long long n = 0;
    for (int i = 0; i < v.nsets; i++) n += (long long)dictSize(v.sets[i]);
    for (int i = 0; i < v.nexact; i++) n += dictFind(server.keys, v.exact[i]) != NULL;
    return n;
}

int tenantRandomKey(const user *u, sds *key) {
    tkView v;
    if (userView(u, &v) < 0) return -1;
    *key = NULL;
    unsigned long long total = 0;
    for (int i = 0; i < v.nsets; i++) total += dictSize(v.sets[i]);
    int present[64], npresent = 0;
    for (int i = 0; i < v.nexact; i++)
        if (dictFind(server.keys, v.exact[i])) present[npresent++] = i;
    total += (unsigned long long)npresent;
    if (total == 0) return 0;
    unsigned long long r = ((unsigned long long)rand() << 31 ^ (unsigned long long)rand()) % total;
    for (int i = 0; i < v.nsets; i++) {
        if (r < dictSize(v.sets[i])) {
            *key = dictGetRandomKey(v.sets[i])->key;
            return 0;
        }
        r -= dictSize(v.sets[i]);
    }
    *key = v.exact[present[r]];
    return 0;
}

sds *tenantKeysCollect(const user *u, int perm, size_t *n) {
    tkView v;
    *n = 0;
    if (userView(u, &v) < 0) return NULL;
    size_t cap = 0;
    for (int i = 0; i < v.nsets; i++) cap += dictSize(v.sets[i]);
    cap += (size_t)v.nexact;
    sds *keys = zmalloc(sizeof(sds) * (cap ? cap : 1));
    for (int i = 0; i < v.nsets; i++) {
        dictIterator *it = dictGetSafeIterator(v.sets[i]);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            sds k = de->key;
            if (aclUserCanAccessKey(u, k, sdslen(k), perm)) keys[(*n)++] = sdsdup(k);
        }
        dictReleaseIterator(it);
    }
    for (int i = 0; i < v.nexact; i++)
        if (dictFind(server.keys, v.exact[i]) && aclUserCanAccessKey(u, v.exact[i], sdslen(v.exact[i]), perm))
            keys[(*n)++] = sdsdup(v.exact[i]);
    return keys;
}

uint64_t tenantKeysHeap(void) {
    uint64_t h = (uint64_t)nprefixes * (sizeof(tkPrefix) + sizeof(size_t));
    for (int i = 0; i < nprefixes; i++) h += dictMemUsage(prefixes[i].keys) + sdsAllocSize(prefixes[i].prefix);
    return h;
}

/* u's keys with a TTL: a walk of its own keys (never the others'). */
long long tenantExpiresCount(const user *u) {
    tkView v;
    long long n = 0;
    if (userView(u, &v) < 0) return 0;
    for (int i = 0; i < v.nsets; i++) {
        dictIterator *it = dictGetSafeIterator(v.sets[i]);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) n += dictFind(server.expires, de->key) != NULL;
        dictReleaseIterator(it);
    }
    for (int i = 0; i < v.nexact; i++) n += dictFind(server.expires, v.exact[i]) != NULL;
    return n;
}

long long tenantCountKeysInSlot(const user *u, int slot) {
    tkView v;
    long long n = 0;
    if (userView(u, &v) < 0) return 0;
    for (int i = 0; i < v.nsets; i++) {
        dictIterator *it = dictGetSafeIterator(v.sets[i]);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            sds k = de->key;
            n += keyHashSlot(k, sdslen(k)) == (unsigned)slot;
            tenantKeysWalked++;
        }
        dictReleaseIterator(it);
    }
    for (int i = 0; i < v.nexact; i++)
        n += dictFind(server.keys, v.exact[i]) && keyHashSlot(v.exact[i], sdslen(v.exact[i])) == (unsigned)slot;
    return n;
}

int tenantUsage(const user *u, uint64_t *objects, uint64_t *bytes) {
    tkView v;
    if (userView(u, &v) < 0) return -1;
    *objects = *bytes = 0;
    for (int i = 0; i < v.nsets; i++) {
        *objects += dictSize(v.sets[i]);
        *bytes += v.pfx[i]->value_bytes + v.pfx[i]->pending_bytes;
    }
    for (int i = 0; i < v.nexact; i++) {
        dictEntry *de = dictFind(server.keys, v.exact[i]);
        if (de) {
            (*objects)++;
            *bytes += storeObjTenantCharge(de->val, sdslen(v.exact[i]));
        }
        if ((de = dictFind(server.pending, v.exact[i])) != NULL && de->val)
            *bytes += storeObjTenantCharge(de->val, sdslen(v.exact[i]));
    }
    return 0;
}

int tenantSampleKeys(const user *u, sds *out, int n) {
    tkView v;
    if (userView(u, &v) < 0) return 0;
    unsigned long long total = 0;
    for (int i = 0; i < v.nsets; i++) total += dictSize(v.sets[i]);
    int got = 0;
    for (int i = 0; i < v.nexact && got < n; i++) {
        dictEntry *de = dictFind(server.keys, v.exact[i]);
        if (de) out[got++] = de->key;
    }
    if (total + (unsigned long long)got <= (unsigned long long)n) {
        /* Few: all of them, so a tenant whose keys are all pinned is told
         * so exactly, not by chance. */
        for (int i = 0; i < v.nsets; i++) {
            dictIterator *it = dictGetSafeIterator(v.sets[i]);
            dictEntry *de;
            while ((de = dictNext(it)) != NULL) out[got++] = de->key;
            dictReleaseIterator(it);
        }
        return got;
    }
    while (got < n && total) {
        unsigned long long r = ((unsigned long long)rand() << 31 ^ (unsigned long long)rand()) % total;
        for (int i = 0; i < v.nsets; i++) {
            if (r < dictSize(v.sets[i])) {
                out[got++] = dictGetRandomKey(v.sets[i])->key;
                break;
            }
            r -= dictSize(v.sets[i]);
        }
    }
    return got;
}

/* ---- the recount (DEBUG TENANT-CHECK) ------------------------------------ */

/* A counter that drifts is a silent defect: one that only grows refuses its
 * tenant for ever, one that shrinks leaves it unbounded (and wraps). The
 * counters are moved by hooks, so nothing in normal running compares them
 * with what they count; this does, by the walk the hooks exist to avoid:
 * each prefix's set, value_bytes and pending_bytes against the keyspace and
 * the pending table, and each user's connection count against the
 * connections (aclCheckClientCounts). O(keys x prefixes): a test's tool,
 * an administrator's command. Each difference is one line appended to *out. */
static sds *checkLine(sds *out, size_t *n, sds line) {
    out = zrealloc(out, sizeof(sds) * (*n + 1));
    out[(*n)++] = line;
    return out;
}

static int hasPrefix(sds key, const tkPrefix *p) {
    size_t len = sdslen(p->prefix);
    return sdslen(key) >= len && !memcmp(key, p->prefix, len);
}

sds *tenantKeysCheck(sds *out, size_t *n) {
    for (int i = 0; i < nprefixes; i++) {
        tkPrefix *p = &prefixes[i];
        unsigned long keys = 0, missing = 0;
        uint64_t value = 0, pending = 0;
        dictIterator *it = dictGetSafeIterator(server.keys);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            if (!hasPrefix(de->key, p)) continue;
            keys++;
            value += storeObjTenantCharge(de->val, sdslen(de->key));
            dictEntry *se = dictFind(p->keys, de->key);
            /* The set borrows the keyspace's string: the very pointer. */
            if (se == NULL || se->key != de->key) missing++;
        }
        dictReleaseIterator(it);
        it = dictGetSafeIterator(server.pending);
        while ((de = dictNext(it)) != NULL)
            if (de->val && hasPrefix(de->key, p)) pending += storeObjTenantCharge(de->val, sdslen(de->key));
        dictReleaseIterator(it);
        if (keys != dictSize(p->keys) || missing)
            out = checkLine(out, n,
                            sdscatprintf(sdsempty(), "prefix '%s': %lu keys in its set, %lu in the keyspace (%lu missing)",
                                         p->prefix, (unsigned long)dictSize(p->keys), keys, missing));
        if (value != p->value_bytes)
            out = checkLine(out, n,
                            sdscatprintf(sdsempty(), "prefix '%s': value_bytes %llu, the walk finds %llu", p->prefix,
                                         (unsigned long long)p->value_bytes, (unsigned long long)value));
        if (pending != p->pending_bytes)
            out = checkLine(out, n,
                            sdscatprintf(sdsempty(), "prefix '%s': pending_bytes %llu, the walk finds %llu", p->prefix,
                                         (unsigned long long)p->pending_bytes, (unsigned long long)pending));
    }
    return out;
}

sds tenantKeysInfo(sds s) {
    size_t entries = 0;
    for (int i = 0; i < nprefixes; i++) entries += dictSize(prefixes[i].keys);
    return sdscatprintf(s, "tenant_prefixes:%d\r\ntenant_index_entries:%zu\r\ntenant_keys_walked:%llu\r\n", nprefixes,
                        entries, tenantKeysWalked);
}
