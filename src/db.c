/* db.c -- keyspace commands: DEL, EXISTS, SCAN, KEYS, RENAME, COPY,
 * RANDOMKEY, TOUCH, OBJECT, expiry, FLUSHALL.
 *
 * There is one database (SELECT 0; COPY ... DB accepts 0 only). Every key
 * holds a string, so TYPE is "string" or "none". Expired keys are invisible
 * to every command here even before the active cycle removes them (the
 * lookups expire lazily). Every change goes through storeSet, storeDelete
 * and storeSetExpire, where the keyspace's watchers hook in.
 *
 * Store objects move and copy like any value, with these choices:
 * - RENAME moves the object itself: the same version under the new name,
 *   with its replicas, checksum, pins and leases (a reader's LEASE.RELEASE
 *   still finds its grant). A put in progress under the old name stays
 *   there: PUT.END publishes it under the name it was started with.
 * - COPY copies the bytes into a new object in the server's pool (read
 *   from the segment's host if no replica is here, within
 *   remote-get-max-size, as GET reads). The copy is a store object too,
 *   created now, with the source's checksum (the same bytes) but not its
 *   pins or leases: those protect one version, not its bytes. Sharing the
 *   object between two keys instead would make a PIN or a lease on one key
 *   act on the other.
 *
 * SCAN, KEYS, RANDOMKEY and DBSIZE show a user restricted by ACL key
 * patterns only the keys it could access (any permission: aclUserSeesKey): key names are what one tenant must not
 * learn of another's (acl.c, "Tenancy"). Redis lists every key; a user
 * with allkeys sees exactly that here too.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "acl.h"
#include "aof.h"
#include "notify.h"
#include "replication.h"
#include "segment.h"
#include "server.h"
#include "store.h"
#include "tenantkeys.h"
#include "util.h"
#include "zmalloc.h"

void delCommand(client *c) {
    long long deleted = 0;
    for (int j = 1; j < c->argc; j++) {
        if (!storeDelete(c->argv[j])) continue;
        deleted++;
        notifyKeyspaceEvent(NOTIFY_GENERIC, "del", c->argv[j]);
    }
    addReplyLongLong(c, deleted);
}

/* A read without an LRU touch, as Redis's: each key counts in
 * keyspace_hits or keyspace_misses, and a miss is a keymiss event. */
void existsCommand(client *c) {
    long long count = 0;
    for (int j = 1; j < c->argc; j++) {
        if (storeLookupNoTouch(c->argv[j])) count++;
        else notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", c->argv[j]);
    }
    addReplyLongLong(c, count);
}

void typeCommand(client *c) {
    int found = storeLookupNoTouch(c->argv[1]) != NULL;
    if (!found) notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", c->argv[1]);
    addReplyStatus(c, found ? "string" : "none");
}

/* Counts the keys that exist, making each young for eviction. */
void touchCommand(client *c) {
    long long touched = 0;
    for (int j = 1; j < c->argc; j++)
        if (storeLookupRead(c->argv[j])) touched++;
    addReplyLongLong(c, touched);
}

/* A tenant's RANDOMKEY: a key drawn uniformly among those it sees, from
 * the index of its own keys (tenantkeys.c): O(1), nil exactly when it has
 * none. A tenant with a pattern the index does not cover (not "prefix*")
 * gets random draws, then one walk of the keyspace with a reservoir of one
 * -- O(all keys), counted in INFO tenant_keys_walked. */
typedef struct visibleWalk {
    const user *u;
    sds pick;          /* borrowed from the keyspace: the walk changes nothing */
    unsigned long seen;
} visibleWalk;

static void visibleWalkKey(void *privdata, const dictEntry *de) {
    visibleWalk *w = privdata;
    sds key = de->key;
    tenantKeysWalked++;
    if (!aclUserSeesKey(w->u, key, sdslen(key))) return;
    w->seen++;
    if (w->pick == NULL || (unsigned long)rand() % w->seen == 0) w->pick = key;
}

static unsigned long visibleWalkAll(visibleWalk *w) {
    unsigned long cursor = 0;
    do {
        cursor = dictScan(server.keys, cursor, visibleWalkKey, w);
    } while (cursor != 0);
    return w->seen;
}

static sds randomVisibleKey(const user *u) {
    if (!aclUserRestricted(u)) return dictSize(server.keys) ? sdsdup(dictGetRandomKey(server.keys)->key) : NULL;
    sds pick;
    if (tenantRandomKey(u, &pick) == 0) return pick ? sdsdup(pick) : NULL; /* its own keys' index */
    for (int i = 0; i < 64 && dictSize(server.keys) > 0; i++) {
        sds key = dictGetRandomKey(server.keys)->key;
        if (aclUserSeesKey(u, key, sdslen(key))) return sdsdup(key);
    }
    visibleWalk w = {u, NULL, 0};
    visibleWalkAll(&w);
    return w.pick ? sdsdup(w.pick) : NULL;
}

/* An expired (or lost) key drawn is deleted by the lookup and another is
 * drawn, as Redis does; each failed draw removes a key, so this ends. */
void randomkeyCommand(client *c) {
    sds key;
    while ((key = randomVisibleKey(c->user)) != NULL) {
        if (storeLookupWrite(key)) {
            addReplyBulkSds(c, key);
            return;
        }
        sdsfree(key);
    }
    addReplyNull(c);
}

/* ---- RENAME and COPY ----------------------------------------------------- */

static int sameKey(sds a, sds b) { return sdslen(a) == sdslen(b) && memcmp(a, b, sdslen(a)) == 0; }

/* Redis deletes a destination that exists and adds the key again, so its
 * "new" event announces RENAME's and COPY's destination even when it
 * replaced one; storeSet has announced it only if the name was free. */
static void destinationIsNew(sds dst, int replaced) {
    if (replaced) notifyKeyspaceEvent(NOTIFY_NEW, "new", dst);
}

/* The source's TTL goes with it; the destination's old value and TTL go. */
static void renameGeneric(client *c, int nx) {
    sds src = c->argv[1], dst = c->argv[2];
    storeObj *o = storeLookupWrite(src);
    if (o == NULL) {
        addReplyError(c, "ERR no such key");
        return;
    }
    if (sameKey(src, dst)) {
        if (nx) addReplyLongLong(c, 0);
        else addReplyOk(c);
        return;
    }
    int replaced = storeLookupWrite(dst) != NULL;
    if (replaced && nx) {
        addReplyLongLong(c, 0);
        return;
    }
    if (checkKeyLength(c, dst) != C_OK) return;
    long long when = storeGetExpire(src);
    storeObjIncrRef(o); /* the keyspace's reference goes with the old name */
    storeDelete(src);
    o->lru = storeLruClock(); /* Redis's write lookup touches it too */
    storeSet(dst, o, when, 0);
    destinationIsNew(dst, replaced);
    notifyKeyspaceEvent(NOTIFY_GENERIC, "rename_from", src);
    notifyKeyspaceEvent(NOTIFY_GENERIC, "rename_to", dst);
    if (nx) addReplyLongLong(c, 1);
    else addReplyOk(c);
}

void renameCommand(client *c) { renameGeneric(c, 0); }
void renamenxCommand(client *c) { renameGeneric(c, 1); }

/* A new object holding o's bytes (see the top of the file for what a
 * store object's copy keeps). NULL: the client got the error. */
static storeObj *copyObject(client *c, storeObj *o, sds dst) {
    const char *p = storeObjLocalPtr(o);
    /* NULL from the fetch: an error sent, or the client blocked until the
     * bytes come (the command then runs again): nothing has changed. */
    if (p == NULL && (p = storeObjFetch(c, o, 0, o->len)) == NULL) return NULL;
    /* Making room may evict the source (not the destination being
     * written: storeObjCreateFor): its bytes must outlive that. */
    storeObjIncrRef(o);
    storeObj *n = storeObjCreateFor((size_t)o->len, dst);
    if (n) {
        if (o->len) memcpy(storeObjPtr(n), p, (size_t)o->len);
        n->flags |= o->flags & (OBJ_FLAG_ENC_RAW | OBJ_FLAG_ENC_NOINT);
        if (storeObjIsStore(o)) {
            storeObjExt *ext = storeObjGetExt(n);
            storeObjSetCreated(n, server.mstime);
            if (o->ext->checksum) ext->checksum = sdsdup(o->ext->checksum);
        }
    } else {
        server.stat_oom_rejections++;
        addReplyError(c, "-OOM not enough space in the pool for this value");
    }
    storeObjDecrRef(o);
    return n;
}

/* COPY source destination [DB destination-db] [REPLACE], with Redis's
 * checks in Redis's order. */
void copyCommand(client *c) {
    sds src = c->argv[1], dst = c->argv[2];
    int replace = 0;
    for (int j = 3; j < c->argc; j++) {
        if (!strcasecmp(c->argv[j], "replace")) {
            replace = 1;
        } else if (!strcasecmp(c->argv[j], "db") && j + 1 < c->argc) {
            long long db;
            if (getLongLongFromObjectOrReply(c, c->argv[j + 1], &db, NULL) != C_OK) return;
            if (db < INT_MIN || db > INT_MAX) {
                addReplyErrorFormat(c, "ERR value is out of range, value must between %d and %d", INT_MIN, INT_MAX);
                return;
            }
            if (db != 0) {
                addReplyError(c, "ERR DB index is out of range");
                return;
            }
            j++;
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    if (sameKey(src, dst)) {
        addReplyError(c, "ERR source and destination objects are the same");
        return;
    }
    storeObj *o = storeLookupRead(src);
    if (o == NULL) {
        addReplyLongLong(c, 0);
        return;
    }
    int replaced = storeLookupWrite(dst) != NULL;
    if (replaced && !replace) {
        addReplyLongLong(c, 0);
        return;
    }
    if (checkKeyLength(c, dst) != C_OK) return;
    long long when = storeGetExpire(src);
    storeObj *n = copyObject(c, o, dst);
    if (n == NULL) return;
    storeSet(dst, n, when, 0);
    destinationIsNew(dst, replaced);
    notifyKeyspaceEvent(NOTIFY_GENERIC, "copy_to", dst);
    addReplyLongLong(c, 1);
}

/* ---- OBJECT -------------------------------------------------------------- */

/* OBJECT ENCODING|IDLETIME|FREQ|REFCOUNT key: nil for a missing key, as
 * Redis. IDLETIME is the LRU clock evict.c uses (ms, in seconds here);
 * FREQ is refused as Redis refuses it without an LFU policy (there is
 * none). REFCOUNT counts the keyspace and the replies still being sent
 * from the pool: 1 for a value at rest. */
void objectCommand(client *c) {
    const char *sub = c->argv[1];
    if (c->argc == 2 && !strcasecmp(sub, "help")) {
        static const char *help[] = {
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            NULL};
        addReplyHelp(c, help);
        return;
    }
    int encoding = !strcasecmp(sub, "encoding"), idletime = !strcasecmp(sub, "idletime");
    int freq = !strcasecmp(sub, "freq"), refcount = !strcasecmp(sub, "refcount");
    if (c->argc != 3 || !(encoding || idletime || freq || refcount)) {
        addReplySubcommandSyntaxError(c);
        return;
    }
    storeObj *o = storeLookupNoTouch(c->argv[2]);
    if (o == NULL) {
        addReplyNull(c);
    } else if (encoding) {
        addReplyBulkCString(c, storeObjEncoding(o));
    } else if (idletime) {
        addReplyLongLong(c, (long long)(uint32_t)(storeLruClock() - o->lru) / 1000);
    } else if (freq) {
        addReplyError(c, "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note "
                         "that when switching between policies at runtime LRU and LFU data will take some time to "
                         "adjust.");
    } else {
        addReplyLongLong(c, o->refcount);
    }
}

/* A tenant counts its own keys (the server's count would tell it how many
 * the others hold): O(1) from the index of its keys (tenantkeys.c), else
 * one walk of the keyspace. */
void dbsizeCommand(client *c) {
    if (!aclUserRestricted(c->user)) {
        addReplyLongLong(c, (long long)storeSize());
        return;
    }
    long long n = tenantKeyCount(c->user);
    if (n >= 0) {
        addReplyLongLong(c, n);
        return;
    }
    visibleWalk w = {c->user, NULL, 0};
    addReplyLongLong(c, (long long)visibleWalkAll(&w));
}

void flushallCommand(client *c) {
    if (c->argc > 2 || (c->argc == 2 && strcasecmp(c->argv[1], "sync") && strcasecmp(c->argv[1], "async"))) {
        addReplyErrorSyntax(c);
        return;
    }
    /* A tenant's FLUSHALL empties its own keyspace, as its REMOVE.ALL does:
     * one tenant granted @dangerous still cannot wipe the others. */
    if (aclUserRestricted(c->user)) removeAllWritable(c);
    else if (c->argc == 2 && !strcasecmp(c->argv[1], "async")) storeFlushAsync();
    else storeFlush();
    addReplyOk(c);
}

/* ---- SCAN and KEYS ------------------------------------------------------- */

typedef struct scanState {
    sds *keys;
    long long n, cap;
} scanState;

static void scanCallback(void *privdata, const dictEntry *de) {
    scanState *s = privdata;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->keys = zrealloc(s->keys, sizeof(sds) * (size_t)s->cap);
    }
    s->keys[s->n++] = sdsdup(de->key);
}

/* A cursor read as Redis reads it (strtoul): a sign, leading zeros and an
 * empty string (0) are accepted, "-1" is the largest cursor; leading space,
 * trailing bytes and overflow are not. Clients echo back what the server
 * sent, but some start from "-1" or "" and Redis answers them, so we do too.
 * Any value is safe for dictScan, which only masks it. */
static int parseScanCursor(sds s, unsigned long long *cursor) {
    char *end;
    errno = 0;
    if (isspace((unsigned char)s[0])) return 0;
    *cursor = strtoull(s, &end, 10);
    return *end == '\0' && end == s + sdslen(s) && errno != ERANGE;
}

void scanCommand(client *c) {
    unsigned long long cursor;
    if (!parseScanCursor(c->argv[1], &cursor)) {
        addReplyError(c, "ERR invalid cursor");
        return;
    }
    long long count = 10;
    const char *pattern = NULL, *type = NULL;
    for (int j = 2; j < c->argc; j += 2) {
        if (j + 1 >= c->argc) {
            addReplyErrorSyntax(c);
            return;
        }
        if (!strcasecmp(c->argv[j], "count")) {
            if (getLongLongFromObjectOrReply(c, c->argv[j + 1], &count, NULL) != C_OK) return;
            if (count < 1) {
                addReplyErrorSyntax(c);
                return;
            }
        } else if (!strcasecmp(c->argv[j], "match")) {
            pattern = c->argv[j + 1];
        } else if (!strcasecmp(c->argv[j], "type")) {
            type = c->argv[j + 1];
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    scanState s = {NULL, 0, 0};
    /* Bounded work per call even when MATCH filters out almost everything:
     * return a partial page rather than walk the whole table. */
    long long maxiter = count > LLONG_MAX / 10 ? LLONG_MAX : count * 10;
    do {
        cursor = dictScan(server.keys, (unsigned long)cursor, scanCallback, &s);
    } while (cursor && maxiter-- && s.n < count);
    int matchall = pattern == NULL || (pattern[0] == '*' && pattern[1] == '\0');
    int typeok = type == NULL || !strcasecmp(type, "string");
    long long kept = 0;
    for (long long i = 0; i < s.n; i++) {
        sds k = s.keys[i];
        int keep = typeok && (matchall || stringmatchlen(pattern, sdslen((sds)pattern), k, sdslen(k), 0)) &&
                   aclUserSeesKey(c->user, k, sdslen(k)) && storeLookupWrite(k) != NULL;
        if (keep) s.keys[kept++] = k;
        else sdsfree(k);
    }
    addReplyArrayLen(c, 2);
    addReplyBulkLongLong(c, (long long)cursor);
    addReplyArrayLen(c, kept);
    for (long long i = 0; i < kept; i++) addReplyBulkSds(c, s.keys[i]);
    zfree(s.keys);
}

void keysCommand(client *c) {
    sds pattern = c->argv[1];
    int all = sdslen(pattern) == 1 && pattern[0] == '*';
    long long now = mstime();
    scanState s = {NULL, 0, 0};
    dictIterator *it = dictGetSafeIterator(server.keys);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        sds k = de->key;
        if (!all && !stringmatchlen(pattern, sdslen(pattern), k, sdslen(k), 0)) continue;
        if (!aclUserSeesKey(c->user, k, sdslen(k))) continue;
        long long when = storeGetExpire(k);
        if (when >= 0 && when <= now) continue;
        scanCallback(&s, de);
    }
    dictReleaseIterator(it);
    addReplyArrayLen(c, s.n);
    for (long long i = 0; i < s.n; i++) addReplyBulkSds(c, s.keys[i]);
    zfree(s.keys);
}

/* ---- expiry -------------------------------------------------------------- */

#define EXPIRE_NX (1 << 0)
#define EXPIRE_XX (1 << 1)
#define EXPIRE_GT (1 << 2)
#define EXPIRE_LT (1 << 3)

/* EXPIRE, PEXPIRE (relative: base is now), EXPIREAT, PEXPIREAT (base 0).
 * Redis's order: the options, then the time, then the key. A time already
 * past deletes the key. */
static void expireGeneric(client *c, int relative, long long unit) {
    sds key = c->argv[1];
    long long when;
    int flags = 0;
    for (int j = 3; j < c->argc; j++) {
        const char *o = c->argv[j];
        if (!strcasecmp(o, "nx")) flags |= EXPIRE_NX;
        else if (!strcasecmp(o, "xx")) flags |= EXPIRE_XX;
        else if (!strcasecmp(o, "gt")) flags |= EXPIRE_GT;
        else if (!strcasecmp(o, "lt")) flags |= EXPIRE_LT;
        else {
            addReplyErrorFormat(c, "ERR Unsupported option %s", o);
            return;
        }
    }
    if ((flags & EXPIRE_NX) && (flags & (EXPIRE_XX | EXPIRE_GT | EXPIRE_LT))) {
        addReplyError(c, "ERR NX and XX, GT or LT options at the same time are not compatible");
        return;
    }
    if ((flags & EXPIRE_GT) && (flags & EXPIRE_LT)) {
        addReplyError(c, "ERR GT and LT options at the same time are not compatible");
        return;
    }
    if (getLongLongFromObjectOrReply(c, c->argv[2], &when, NULL) != C_OK) return;
    long long now = mstime(), base = relative ? now : 0;
    if (when > LLONG_MAX / unit || when < LLONG_MIN / unit || (when *= unit) > LLONG_MAX - base) {
        addReplyErrorFormat(c, "ERR invalid expire time in '%s' command", c->cmd->fullname);
        return;
    }
    when += base;
    if (storeLookupWrite(key) == NULL) {
        addReplyLongLong(c, 0);
        return;
    }
    long long cur = storeGetExpire(key);
    if ((flags & EXPIRE_NX) && cur != -1) goto no;
    if ((flags & EXPIRE_XX) && cur == -1) goto no;
    /* A key without TTL counts as an infinite TTL for GT and LT. */
    if ((flags & EXPIRE_GT) && (cur == -1 || when <= cur)) goto no;
    if ((flags & EXPIRE_LT) && cur != -1 && when >= cur) goto no;
    if (when <= now) {
        storeDelete(key);
        server.stat_expiredkeys++;
        notifyKeyspaceEvent(NOTIFY_GENERIC, "del", key);
    } else {
        storeSetExpire(key, when);
        notifyKeyspaceEvent(NOTIFY_GENERIC, "expire", key);
    }
    addReplyLongLong(c, 1);
    return;
no:
    addReplyLongLong(c, 0);
}

void expireCommand(client *c) { expireGeneric(c, 1, 1000); }
void pexpireCommand(client *c) { expireGeneric(c, 1, 1); }
void expireatCommand(client *c) { expireGeneric(c, 0, 1000); }
void pexpireatCommand(client *c) { expireGeneric(c, 0, 1); }

/* TTL, PTTL (time left), EXPIRETIME, PEXPIRETIME (the absolute time):
 * -2 for a missing key, -1 without a TTL; seconds are rounded. Looking
 * does not make the key young, but a miss is a read's miss: a keymiss
 * event, as Redis announces it for these four. */
static void ttlGeneric(client *c, int ms, int absolute) {
    if (storeLookupNoTouch(c->argv[1]) == NULL) {
        notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", c->argv[1]);
        addReplyLongLong(c, -2);
        return;
    }
    long long when = storeGetExpire(c->argv[1]);
    if (when == -1) {
        addReplyLongLong(c, -1);
        return;
    }
    long long t = absolute ? when : when - mstime();
    if (t < 0) t = 0;
    /* Rounded without adding 500 first: a time within 500 ms of LLONG_MAX
     * (PEXPIREAT k 9223372036854775807) would overflow. */
    addReplyLongLong(c, ms ? t : t / 1000 + (t % 1000 >= 500));
}

void ttlCommand(client *c) { ttlGeneric(c, 0, 0); }
void pttlCommand(client *c) { ttlGeneric(c, 1, 0); }
void expiretimeCommand(client *c) { ttlGeneric(c, 0, 1); }
void pexpiretimeCommand(client *c) { ttlGeneric(c, 1, 1); }

void persistCommand(client *c) {
    if (storeLookupWrite(c->argv[1]) == NULL) {
        addReplyLongLong(c, 0);
        return;
    }
    int removed = storeRemoveExpire(c->argv[1]);
    if (removed) notifyKeyspaceEvent(NOTIFY_GENERIC, "persist", c->argv[1]);
    addReplyLongLong(c, removed);
}

/* ---- MEMORY -------------------------------------------------------------- */

/* What one key costs: the key string, its object (with its extension and
 * replica table) and hash-table entry on the heap, plus the extents its
 * value holds in segments. redis-cli --memkeys ranks keys by this. SAMPLES
 * is accepted for Redis's syntax; nothing here is sampled. */
static long long keyMemoryUsage(sds key, storeObj *o) {
    long long bytes = (long long)sdsAllocSize(key) + (long long)zmalloc_size(o) + 3 * (long long)sizeof(void *);
    if (o->ext) {
        bytes += (long long)zmalloc_size(o->ext);
        if (o->ext->more) bytes += (long long)zmalloc_size(o->ext->more);
        if (o->ext->checksum) bytes += (long long)sdsAllocSize(o->ext->checksum);
    }
    for (int i = 0; i < o->nreplicas; i++) {
        storeReplica *r = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(r);
        bytes += seg ? (long long)allocSize(seg->alloc, r->handle) : (long long)o->len;
    }
    return bytes;
}

/* used_memory as INFO reports it: the heap plus the pool's bytes in use.
 * Each reading also raises the peak, so INFO and MEMORY STATS never show a
 * peak below the current figure (the cron raises it between readings). */
size_t memoryUsedUpdatePeak(void) {
    allocStats ps;
    allocGetStats(server.self->alloc, &ps);
    size_t used = zmalloc_used_memory() + (size_t)ps.used;
    if (used > server.stat_peak_memory) server.stat_peak_memory = used;
    return used;
}

/* What the process should have resident: the heap, and the pool's pages
 * that were touched -- those pre-faulted at start (segment-prefault) and
 * those values took -- whether or not a value holds them now. Redis's
 * fragmentation divides RSS by the heap alone; here a pre-faulted 1 GiB
 * pool would then read as a ratio of hundreds, and every exporter's
 * "fragmentation > 1.5" alert would fire on a healthy server. */
size_t memoryExpectedResident(void) {
    allocStats ps;
    allocGetStats(server.self->alloc, &ps);
    uint64_t pool = server.self->prefaulted > ps.used ? server.self->prefaulted : ps.used;
    return zmalloc_used_memory() + (size_t)pool;
}

/* MEMORY STATS, with Redis 7.0's field names and order so the tools that
 * read it (redis_exporter, RedisInsight, Datadog) find them; what has no
 * counterpart here (Lua, functions, cluster links) is 0. Memory is Redis's
 * "allocated" figure -- the heap here plus the pool's bytes in use, as
 * used_memory -- and the pool gets two fields of its own at the end.
 * Overhead is what is not the dataset: the heap at start, client buffers,
 * the replication backlog, the AOF buffer and the key tables. The
 * fragmentation pair compares RSS with memoryExpectedResident (above). */
static void memoryStats(client *c) {
    size_t used = memoryUsedUpdatePeak(), rss = zmalloc_get_rss();
    size_t startup = server.startup_heap, backlog = replBacklogMemory(), aofbuf = aofBufferLength();
    size_t clients_normal = 0, clients_replicas = 0;
    for (client *t = server.clients_head; t; t = t->next) {
        if (t->repl) clients_replicas += clientMemoryUsage(t);
        else clients_normal += clientMemoryUsage(t);
    }
    size_t main_ht = dictMemUsage(server.keys), expires_ht = dictMemUsage(server.expires);
    size_t overhead = startup + backlog + clients_normal + clients_replicas + aofbuf + main_ht + expires_ht;
    size_t keys = storeSize();
    size_t net = used > startup ? used - startup : 0;
    size_t dataset = used > overhead ? used - overhead : 0;
    size_t allocated, active, resident;
    zmalloc_get_allocator_info(&allocated, &active, &resident);
    allocStats ps;
    allocGetStats(server.self->alloc, &ps);
    size_t expected = memoryExpectedResident();
    /* ratio and difference of two figures, Redis's pairs; 0 when unknown */
#define RATIO(a, b) ((b) ? (double)(a) / (double)(b) : 0.0)
#define DIFF(a, b) ((long long)(a) - (long long)(b))
    /* One row per field, in Redis's order; the map's length is the
     * table's, and db.0 (a map of two) is the one nested row. */
    enum { INT, DBL, DB0 };
    const struct {
        const char *name;
        int type;
        long long i;
        double d;
    } rows[] = {
        {"peak.allocated", INT, (long long)server.stat_peak_memory, 0},
        {"total.allocated", INT, (long long)used, 0},
        {"startup.allocated", INT, (long long)startup, 0},
        {"replication.backlog", INT, (long long)backlog, 0},
        {"clients.slaves", INT, (long long)clients_replicas, 0},
        {"clients.normal", INT, (long long)clients_normal, 0},
        {"cluster.links", INT, 0, 0},
        {"aof.buffer", INT, (long long)aofbuf, 0},
        {"lua.caches", INT, 0, 0},
        {"functions.caches", INT, 0, 0},
        {"db.0", DB0, 0, 0},
        {"overhead.total", INT, (long long)overhead, 0},
        {"keys.count", INT, (long long)keys, 0},
        {"keys.bytes-per-key", INT, keys ? (long long)(net / keys) : 0, 0},
        {"dataset.bytes", INT, (long long)dataset, 0},
        {"dataset.percentage", DBL, 0, 100.0 * RATIO(dataset, net)},
        {"peak.percentage", DBL, 0, 100.0 * RATIO(used, server.stat_peak_memory)},
        {"allocator.allocated", INT, (long long)allocated, 0},
        {"allocator.active", INT, (long long)active, 0},
        {"allocator.resident", INT, (long long)resident, 0},
        {"allocator-fragmentation.ratio", DBL, 0, RATIO(active, allocated)},
        {"allocator-fragmentation.bytes", INT, DIFF(active, allocated), 0},
        {"allocator-rss.ratio", DBL, 0, RATIO(resident, active)},
        {"allocator-rss.bytes", INT, DIFF(resident, active), 0},
        {"rss-overhead.ratio", DBL, 0, RATIO(rss, resident)},
        {"rss-overhead.bytes", INT, resident ? DIFF(rss, resident) : 0, 0},
        {"fragmentation", DBL, 0, RATIO(rss, expected)},
        {"fragmentation.bytes", INT, DIFF(rss, expected), 0},
        {"pool.size", INT, (long long)ps.capacity, 0},
        {"pool.used", INT, (long long)ps.used, 0},
    };
#undef RATIO
#undef DIFF
    addReplyMapLen(c, (long long)(sizeof(rows) / sizeof(rows[0])));
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        addReplyBulkCString(c, rows[i].name);
        if (rows[i].type == INT) {
            addReplyLongLong(c, rows[i].i);
        } else if (rows[i].type == DBL) {
            addReplyDouble(c, rows[i].d);
        } else {
            addReplyMapLen(c, 2);
            addReplyBulkCString(c, "overhead.hashtable.main");
            addReplyLongLong(c, (long long)main_ht);
            addReplyBulkCString(c, "overhead.hashtable.expires");
            addReplyLongLong(c, (long long)expires_ht);
        }
    }
}

/* MEMORY DOCTOR: what a person should look at, from the figures above and
 * the pool's. Silent about an instance too small to judge, as Redis is. */
static sds memoryDoctor(void) {
    size_t used = memoryUsedUpdatePeak(), rss = zmalloc_get_rss();
    allocStats ps;
    allocGetStats(server.self->alloc, &ps);
    if (used < 5 * 1024 * 1024 && storeSize() < 1000)
        return sdsnew("This instance is empty or uses very little memory (under 5 MB, under 1000 keys): "
                      "there is nothing to diagnose yet.\n");
    sds s = sdsempty();
    if (server.stat_peak_memory > used + used / 2)
        s = sdscatprintf(s, "* Peak memory: %zu bytes at the peak, %zu now (more than 150%%). The allocator may keep "
                            "pages of the peak (MEMORY PURGE gives jemalloc's back).\n",
                         server.stat_peak_memory, used);
    size_t heap = zmalloc_used_memory();
    if (rss > heap + ps.capacity + (heap + ps.capacity) / 2 && rss > 64 * 1024 * 1024)
        s = sdscatprintf(s, "* High RSS: %zu bytes resident for %zu of heap and a pool of %llu.\n", rss, heap,
                         (unsigned long long)ps.capacity);
    if (ps.limit && ps.used > ps.limit - ps.limit / 10)
        s = sdscatprintf(s, "* The pool is over 90%% full (%llu of %llu bytes): writes evict or are refused "
                            "(maxmemory-policy, INFO store store_evictions).\n",
                         (unsigned long long)ps.used, (unsigned long long)ps.limit);
    if (ps.free && ps.largest_free < ps.free / 2 && ps.free > 16 * 1024 * 1024)
        s = sdscatprintf(s, "* Pool fragmentation: the largest free range is %llu of %llu free bytes; large values "
                            "may not fit without evicting (INFO store store_free_fragmentation).\n",
                         (unsigned long long)ps.largest_free, (unsigned long long)ps.free);
    size_t clients = 0;
    for (client *t = server.clients_head; t; t = t->next) clients += clientMemoryUsage(t);
    if (clients > 200 * 1024 * 1024)
        s = sdscatprintf(s, "* Client buffers hold %zu bytes (CLIENT LIST tot-mem, client-output-buffer-limit).\n",
                         clients);
    if (sdslen(s) == 0) return sdscat(s, "No memory problems found.\n");
    return sdscat(s, "Other figures: MEMORY STATS, INFO memory and INFO store.\n");
}

static void appendMallocStats(void *arg, const char *text) {
    sds *s = arg;
    *s = sdscat(*s, text);
}

void memoryCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "DOCTOR", "    Return memory problems reports.",
            "MALLOC-STATS", "    Return internal statistics report from the memory allocator.",
            "PURGE", "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS", "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return the bytes a key and its value use: heap for the key and object, plus its extents in segments.",
            NULL};
        addReplyHelp(c, help);
    } else if ((!strcasecmp(sub, "stats") || !strcasecmp(sub, "doctor")) && c->argc == 2 &&
               aclUserRestricted(c->user)) {
        /* The whole server's figures (keys, clients, the pool): not a
         * tenant's to see, as INFO shows a tenant its own part only. */
        addReplyErrorFormat(c, "-NOPERM MEMORY %s shows the whole server; a user restricted to key patterns may not run it",
                            !strcasecmp(sub, "stats") ? "STATS" : "DOCTOR");
    } else if (!strcasecmp(sub, "stats") && c->argc == 2) {
        memoryStats(c);
    } else if (!strcasecmp(sub, "doctor") && c->argc == 2) {
        sds s = memoryDoctor();
        addReplyVerbatim(c, s, sdslen(s), "txt");
        sdsfree(s);
    } else if (!strcasecmp(sub, "malloc-stats") && c->argc == 2) {
        sds s = sdsempty();
        if (!zmalloc_stats_print(appendMallocStats, &s)) s = sdscat(s, "Stats not supported for the current allocator");
        addReplyVerbatim(c, s, sdslen(s), "txt");
        sdsfree(s);
    } else if (!strcasecmp(sub, "purge") && c->argc == 2) {
        zmalloc_purge(); /* best effort, as Redis: OK either way */
        addReplyOk(c);
    } else if (!strcasecmp(sub, "usage") && c->argc >= 3) {
        for (int j = 3; j < c->argc; j += 2) {
            long long samples;
            if (strcasecmp(c->argv[j], "samples") || j + 1 >= c->argc) {
                addReplyErrorSyntax(c);
                return;
            }
            /* A count that is not a number is that error, a negative one
             * a syntax error: Redis's two answers. */
            if (getLongLongFromObjectOrReply(c, c->argv[j + 1], &samples, NULL) != C_OK) return;
            if (samples < 0) {
                addReplyErrorSyntax(c);
                return;
            }
        }
        storeObj *o = storeLookupWrite(c->argv[2]);
        if (o == NULL) {
            addReplyNull(c);
            return;
        }
        addReplyLongLong(c, keyMemoryUsage(c->argv[2], o));
    } else {
        addReplySubcommandSyntaxError(c);
    }
}
