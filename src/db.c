/* db.c -- keyspace commands: DEL, EXISTS, SCAN, KEYS, expiry, FLUSHALL.
 *
 * There is one database (SELECT 0). Every key holds a string, so TYPE is
 * "string" or "none". Expired keys are invisible to every command here even
 * before the active cycle removes them (the lookups expire lazily).
 */
#include <limits.h>
#include <string.h>
#include <strings.h>

#include "notify.h"
#include "server.h"
#include "store.h"
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

void existsCommand(client *c) {
    long long count = 0;
    for (int j = 1; j < c->argc; j++) {
        if (storeLookupWrite(c->argv[j])) count++;
        else notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", c->argv[j]);
    }
    addReplyLongLong(c, count);
}

void typeCommand(client *c) {
    int found = storeLookupWrite(c->argv[1]) != NULL;
    if (!found) notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", c->argv[1]);
    addReplyStatus(c, found ? "string" : "none");
}

void dbsizeCommand(client *c) { addReplyLongLong(c, (long long)storeSize()); }

void flushallCommand(client *c) {
    if (c->argc > 2 || (c->argc == 2 && strcasecmp(c->argv[1], "sync") && strcasecmp(c->argv[1], "async"))) {
        addReplyErrorSyntax(c);
        return;
    }
    storeFlush();
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

void scanCommand(client *c) {
    unsigned long long cursor;
    if (!string2ull(c->argv[1], sdslen(c->argv[1]), &cursor)) {
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
                   storeLookupWrite(k) != NULL;
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

static void expireGeneric(client *c, long long unit) {
    sds key = c->argv[1];
    long long when;
    int flags = 0;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &when, NULL) != C_OK) return;
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
    long long now = mstime();
    if (when > LLONG_MAX / unit || when < LLONG_MIN / unit || (when *= unit) > LLONG_MAX - now) {
        addReplyErrorFormat(c, "ERR invalid expire time in '%s' command", c->cmd->fullname);
        return;
    }
    when += now;
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

void expireCommand(client *c) { expireGeneric(c, 1000); }
void pexpireCommand(client *c) { expireGeneric(c, 1); }

static void ttlGeneric(client *c, int ms) {
    if (storeLookupRead(c->argv[1]) == NULL) {
        addReplyLongLong(c, -2);
        return;
    }
    long long when = storeGetExpire(c->argv[1]);
    if (when == -1) {
        addReplyLongLong(c, -1);
        return;
    }
    long long left = when - mstime();
    if (left < 0) left = 0;
    addReplyLongLong(c, ms ? left : (left + 500) / 1000);
}

void ttlCommand(client *c) { ttlGeneric(c, 0); }
void pttlCommand(client *c) { ttlGeneric(c, 1); }

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

void memoryCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "USAGE <key> [SAMPLES <count>]",
            "    Return the bytes a key and its value use: heap for the key and object, plus its extents in segments.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "usage") && c->argc >= 3) {
        for (int j = 3; j < c->argc; j += 2) {
            long long samples;
            if (strcasecmp(c->argv[j], "samples") || j + 1 >= c->argc ||
                !string2ll(c->argv[j + 1], sdslen(c->argv[j + 1]), &samples) || samples < 0) {
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
