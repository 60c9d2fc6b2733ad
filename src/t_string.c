/* t_string.c -- the string commands (and the bitmap ones) over the pool.
 *
 * Values are immutable objects in segment memory (store.c). SET builds the
 * new object completely before touching the keyspace, so a SET that fails
 * (syntax, too large, no space) changes nothing, and a concurrent reader of
 * the old value (a reply still being written from the pool) keeps reading
 * the old bytes.
 *
 * A large value usually arrives already in the pool: setBigArgProc gets
 * the payload length before the payload and allocates its final extent, and
 * networking.c reads the socket straight into it.
 *
 * Changes are new versions. Redis changes a string in place for APPEND,
 * SETRANGE, SETBIT and the INCR family; here a reply still being written
 * from the pool, or a remote reader under a lease, may be reading the old
 * bytes, so each of them builds the whole next value as a new object
 * (writeNewVersion) and swaps it in with storeSet, keeping the key's TTL
 * as Redis does across an in-place change. The price is a copy of the value
 * per change: APPEND to a large value is O(N) where Redis amortises it to
 * O(1). The counters and small strings these commands are used for cost a
 * few bytes; large values belong in store objects anyway. The INCR family
 * is the exception when it can be: a result as long as the old value, in a
 * version no one else can be reading, is written over it in place, as
 * Redis does (storeObjWritableInPlace, store.c), since counters are what
 * gets incremented at rates where a new version each time shows.
 *
 * Store objects and SET values. Every command here reads a store object
 * (PUT.START/PUT.END) as a string, its bytes fetched from the host of a
 * mounted segment if no replica is in the pool (storeObjFetch, bounded by
 * remote-get-max-size). The SET family replaces one as SET does. The
 * commands that change a value in place by Redis's semantics answer
 * WRONGTYPE, as Redis does across types: see storeObjIsStore.
 *
 * Errors, their order and the replies follow Redis 7.0 word for word:
 * clients and tests match on them (tests/unit/string.tcl runs against
 * both servers).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "notify.h"
#include "relay.h"
#include "server.h"
#include "store.h"
#include "tenantquota.h"
#include "util.h"
#include "zmalloc.h"

#define OOM_ERR "-OOM not enough space in the pool for this value"
#define WRONGTYPE_ERR "-WRONGTYPE Operation against a key holding the wrong kind of value"
#define SET_NX (1 << 0)
#define SET_XX (1 << 1)
#define SET_EX (1 << 2)
#define SET_PX (1 << 3)
#define SET_EXAT (1 << 4)
#define SET_PXAT (1 << 5)
#define SET_KEEPTTL (1 << 6)
#define SET_GET (1 << 7)
#define SET_PERSIST (1 << 8) /* GETEX only */
#define SET_EXPIRE_ANY (SET_EX | SET_PX | SET_EXAT | SET_PXAT)

/* The rules are the store's (storeKeyTooLong, storeValueTooBig). */
int checkKeyLength(client *c, sds key) {
    char buf[128];
    const char *err = storeKeyTooLong(sdslen(key), buf, sizeof(buf));
    if (err == NULL) return C_OK;
    addReplyError(c, err);
    return C_ERR;
}

static const char *valueTooBig(size_t len) { return storeValueTooBig(len); }

/* Places a large SET/MSET value in the pool before its bytes arrive. */
static char *placeValueArg(client *c, int argi, int keyi, size_t len) {
    const char *err = valueTooBig(len);
    if (err) {
        c->argerr = err;
        return NULL;
    }
    /* Under CLIENT PAUSE the command waits, and making room now would
     * evict while the dataset must hold still (networking.c): the value
     * goes to the heap, and the command makes room when it runs. */
    if (pauseHoldsDataset()) return NULL;
    /* A tenant's bound first: making room there evicts its own values,
     * where the pool's would take anyone's (tenantquota.c). */
    if (server.tenant_maxmemory && tenantQuotaMakeRoom(c, c->argv[keyi], len, 0, &err) != C_OK) {
        c->argerr = err;
        return NULL;
    }
    /* Every byte comes from the socket before the object exists: a freed
     * extent needs no zeroing for it (zerofree.c, Reuse). */
    storeObj *o = storeObjCreateForFullWrite(len, c->argv[keyi]);
    if (o == NULL) {
        c->argerr = OOM_ERR;
        return NULL;
    }
    c->argobj[argi] = o;
    return storeObjPtr(o);
}

/* SET, SETNX, GETSET: the value is argv[2]. */
char *setBigArgProc(client *c, int argi, size_t len) {
    return argi == 2 ? placeValueArg(c, argi, 1, len) : NULL;
}

/* SETEX, PSETEX: the value is argv[3]. */
char *setexBigArgProc(client *c, int argi, size_t len) {
    return argi == 3 ? placeValueArg(c, argi, 1, len) : NULL;
}

/* MSET, MSETNX. */
char *msetBigArgProc(client *c, int argi, size_t len) {
    return argi >= 2 && argi % 2 == 0 ? placeValueArg(c, argi, argi - 1, len) : NULL;
}

/* The value of argument i as an object: adopted if it was read into the
 * pool, otherwise copied there. NULL (and an -OOM reply) if no space.
 * Making room never evicts the key being written (its old value may be
 * what SET ... GET returns, or what XX tested): storeObjCreateFor. */
static const char *oomErr = OOM_ERR; /* why valueObject's last NULL: addReplyOom says it */

static storeObj *valueObject(client *c, int i, sds key) {
    if (c->argobj && c->argobj[i]) {
        storeObj *o = c->argobj[i];
        c->argobj[i] = NULL;
        return o;
    }
    if (server.tenant_maxmemory && tenantQuotaMakeRoom(c, key, sdslen(c->argv[i]), 0, &oomErr) != C_OK)
        return NULL;
    storeObj *o = storeObjCreateFor(sdslen(c->argv[i]), key);
    if (o && o->len) memcpy(storeObjPtr(o), c->argv[i], sdslen(c->argv[i]));
    return o;
}

static void addReplyOom(client *c) {
    server.stat_oom_rejections++;
    addReplyError(c, oomErr);
    oomErr = OOM_ERR;
}

/* o as a bulk reply. C_ERR when o is only in a mounted segment and its
 * host could not be read: the client got that error instead. */
static int addReplyValue(client *c, storeObj *o) {
    const char *p = storeObjLocalPtr(o);
    if (p == NULL) return addReplyRemoteBytes(c, o, 0, o->len);
    addReplyPoolBytes(c, o, p, o->len);
    return C_OK;
}

/* Bytes [off, off+len) of o to compute on: in the pool, or fetched from
 * the host of its mounted segment (relay.c: valid until the command ends).
 * NULL: the client got the error, or is blocked until the bytes come and
 * the command runs again; return at once either way. */
static const char *valueBytes(client *c, storeObj *o, uint64_t off, uint64_t len) {
    const char *p = storeObjLocalPtr(o);
    if (p) return p + off;
    return storeObjFetch(c, o, off, len);
}

/* ---- SET and its older forms --------------------------------------------- */

/* SET's options (from argv[3]) and GETEX's (from argv[2]), by Redis's
 * rules: a word may repeat (the last expire value wins) but not conflict
 * with another, and the expire value is only read once every word is
 * known good, so `SET k v EX abc FOO` is a syntax error as in Redis. */
static int parseStringOptions(client *c, int first, int getex, int *flags, sds *expire) {
    *flags = 0;
    *expire = NULL;
    for (int j = first; j < c->argc; j++) {
        const char *o = c->argv[j];
        int f = *flags;
        if (!getex && !strcasecmp(o, "nx") && !(f & SET_XX)) {
            *flags |= SET_NX;
        } else if (!getex && !strcasecmp(o, "xx") && !(f & SET_NX)) {
            *flags |= SET_XX;
        } else if (!getex && !strcasecmp(o, "get")) {
            *flags |= SET_GET;
        } else if (!getex && !strcasecmp(o, "keepttl") && !(f & SET_EXPIRE_ANY)) {
            *flags |= SET_KEEPTTL;
        } else if (getex && !strcasecmp(o, "persist") && !(f & SET_EXPIRE_ANY)) {
            *flags |= SET_PERSIST;
        } else {
            int e = !strcasecmp(o, "ex")     ? SET_EX
                    : !strcasecmp(o, "px")   ? SET_PX
                    : !strcasecmp(o, "exat") ? SET_EXAT
                    : !strcasecmp(o, "pxat") ? SET_PXAT
                                             : 0;
            if (!e || j + 1 >= c->argc || (f & (SET_KEEPTTL | SET_PERSIST | (SET_EXPIRE_ANY & ~e)))) {
                addReplyErrorSyntax(c);
                return C_ERR;
            }
            *flags |= e;
            *expire = c->argv[++j];
        }
    }
    return C_OK;
}

/* The absolute expiry (ms) an EX/PX/EXAT/PXAT value stands for; C_ERR and
 * Redis's error for a non-positive one or one that would overflow. */
static int expireFromArg(client *c, sds arg, int flags, long long *when) {
    long long v;
    if (getLongLongFromObjectOrReply(c, arg, &v, NULL) != C_OK) return C_ERR;
    int secs = (flags & (SET_EX | SET_EXAT)) != 0;
    long long base = (flags & (SET_EX | SET_PX)) ? mstime() : 0;
    if (v <= 0 || (secs && v > LLONG_MAX / 1000)) goto bad;
    if (secs) v *= 1000;
    if (v > LLONG_MAX - base) goto bad;
    *when = v + base;
    return C_OK;
bad:
    addReplyErrorFormat(c, "ERR invalid expire time in '%s' command", c->cmd->fullname);
    return C_ERR;
}

/* The old value SET GET and GETSET reply with must be known readable
 * before anything changes: one only in a mounted segment is fetched now
 * (a failed fetch changes nothing; a fetch under way blocks the client
 * and the command runs again when it is done); one in the pool is
 * referenced, so the reply comes from its bytes after the key moved on.
 * Either way o stays referenced (the relay holds fetched ones). */
static int holdValue(client *c, storeObj *o, const char **fetched) {
    *fetched = NULL;
    if (storeObjLocalPtr(o)) {
        storeObjIncrRef(o);
        return C_OK;
    }
    *fetched = storeObjFetch(c, o, 0, o->len);
    return *fetched ? C_OK : C_ERR;
}

static void releaseHeldValue(storeObj *o, const char *fetched) {
    if (fetched == NULL) storeObjDecrRef(o);
}

static void addReplyHeldValue(client *c, storeObj *o, const char *fetched) {
    if (o == NULL) {
        addReplyNull(c);
    } else if (fetched) {
        addReplyBulk(c, fetched, (size_t)o->len);
    } else {
        addReplyStoreObj(c, o);
        storeObjDecrRef(o);
    }
}

/* SET and the commands that are SET with options fixed (SETNX, SETEX,
 * PSETEX, GETSET): one path, so they cannot disagree on TTLs, limits or
 * store objects. The value is argv[vali]; intreply: SETNX's :1/:0 rather
 * than +OK/nil. */
static void setGeneric(client *c, int flags, int vali, sds expire, int intreply) {
    sds key = c->argv[1];
    long long when = -1;
    if (expire && expireFromArg(c, expire, flags, &when) != C_OK) return;
    if (checkKeyLength(c, key) != C_OK) return;
    const char *toobig = valueTooBig(sdslen(c->argv[vali]));
    if (toobig) {
        addReplyError(c, toobig);
        return;
    }
    storeObj *old = (flags & SET_GET) ? storeLookupRead(key) : storeLookupWrite(key);
    const char *fetched = NULL;
    if ((flags & SET_GET) && old && holdValue(c, old, &fetched) != C_OK) return;
    if (((flags & SET_NX) && old) || ((flags & SET_XX) && !old)) {
        if (flags & SET_GET) addReplyHeldValue(c, old, fetched);
        else if (intreply) addReplyLongLong(c, 0);
        else addReplyNull(c);
        return;
    }
    size_t vlen = sdslen(c->argv[vali]);
    /* The old version, if no one else can read it and it is as long, takes
     * the new bytes in place (store.c, "Immutability"), unless the server
     * already read the value into an extent of its own (setBigArgProc). */
    char *inplace = old && !(flags & SET_GET) && !(c->argobj && c->argobj[vali]) ?
                    storeObjReplaceableInPlace(old, (uint64_t)vlen) : NULL;
    if (inplace) {
        memcpy(inplace, c->argv[vali], vlen);
        old->flags &= (uint8_t)~(OBJ_FLAG_ENC_RAW | OBJ_FLAG_ENC_NOINT | OBJ_FLAG_INTVAL);
        storeObjReplacedInPlace(key, old, when, flags & SET_KEEPTTL);
        notifyKeyspaceEvent(NOTIFY_STRING, "set", key);
        if (when >= 0) notifyKeyspaceEvent(NOTIFY_GENERIC, "expire", key);
        if (intreply) addReplyLongLong(c, 1);
        else addReplyOk(c);
        return;
    }
    storeObj *o = valueObject(c, vali, key);
    if (o == NULL) {
        addReplyOom(c);
        if ((flags & SET_GET) && old) releaseHeldValue(old, fetched);
        return;
    }
    storeSet(key, o, when, flags & SET_KEEPTTL);
    notifyKeyspaceEvent(NOTIFY_STRING, "set", key);
    if (when >= 0) notifyKeyspaceEvent(NOTIFY_GENERIC, "expire", key);
    if (flags & SET_GET) addReplyHeldValue(c, old, fetched);
    else if (intreply) addReplyLongLong(c, 1);
    else addReplyOk(c);
}

void setCommand(client *c) {
    int flags;
    sds expire;
    if (parseStringOptions(c, 3, 0, &flags, &expire) != C_OK) return;
    setGeneric(c, flags, 2, expire, 0);
}

void setnxCommand(client *c) { setGeneric(c, SET_NX, 2, NULL, 1); }
void setexCommand(client *c) { setGeneric(c, SET_EX, 3, c->argv[2], 0); }
void psetexCommand(client *c) { setGeneric(c, SET_PX, 3, c->argv[2], 0); }
void getsetCommand(client *c) { setGeneric(c, SET_GET, 2, NULL, 0); }

/* ---- reads --------------------------------------------------------------- */

void getCommand(client *c) {
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o) addReplyStoreObj(c, o);
    else addReplyNull(c);
}

/* Redis's order: a missing key is nil whatever the options say; the
 * expire value is checked before the reply; the value is sent, then the
 * TTL changes (an EXAT/PXAT already past deletes the key). */
void getexCommand(client *c) {
    int flags;
    sds expire, key = c->argv[1];
    if (parseStringOptions(c, 2, 1, &flags, &expire) != C_OK) return;
    storeObj *o = storeLookupRead(key);
    if (o == NULL) {
        addReplyNull(c);
        return;
    }
    long long when = -1;
    if (expire && expireFromArg(c, expire, flags, &when) != C_OK) return;
    if (addReplyValue(c, o) != C_OK) return;
    if (expire && (flags & (SET_EXAT | SET_PXAT)) && when <= mstime()) {
        storeDelete(key);
        notifyKeyspaceEvent(NOTIFY_GENERIC, "del", key);
    } else if (expire) {
        storeSetExpire(key, when);
        notifyKeyspaceEvent(NOTIFY_GENERIC, "expire", key);
    } else if ((flags & SET_PERSIST) && storeRemoveExpire(key)) {
        notifyKeyspaceEvent(NOTIFY_GENERIC, "persist", key);
    }
}

void getdelCommand(client *c) {
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o == NULL) {
        addReplyNull(c);
        return;
    }
    /* A reply sent from the pool holds its own reference: deleting now is safe. */
    if (addReplyValue(c, o) == C_OK && storeDelete(c->argv[1]))
        notifyKeyspaceEvent(NOTIFY_GENERIC, "del", c->argv[1]);
}

void getrangeCommand(client *c) {
    long long start, end;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &start, NULL) != C_OK) return;
    if (getLongLongFromObjectOrReply(c, c->argv[3], &end, NULL) != C_OK) return;
    storeObj *o = storeLookupRead(c->argv[1]);
    long long len = o ? (long long)o->len : 0;
    if (start < 0 && end < 0 && start > end) {
        addReplyBulk(c, "", 0);
        return;
    }
    if (start < 0) start = len + start;
    if (end < 0) end = len + end;
    if (start < 0) start = 0;
    if (end < 0) end = 0;
    if (end >= len) end = len - 1;
    if (len == 0 || start > end) {
        addReplyBulk(c, "", 0);
        return;
    }
    const char *p = storeObjLocalPtr(o);
    if (p == NULL) {
        addReplyRemoteBytes(c, o, (uint64_t)start, (uint64_t)(end - start + 1));
        return;
    }
    addReplyBulk(c, p + start, (size_t)(end - start + 1));
}

void strlenCommand(client *c) {
    storeObj *o = storeLookupRead(c->argv[1]);
    addReplyLongLong(c, o ? (long long)o->len : 0);
}

/* Values only in mounted segments are all asked for before the reply
 * starts: the client blocks once, for all of them (relay.c). */
void mgetCommand(client *c) {
    storeObj *stackobjs[16];
    int n = c->argc - 1, wait = 0;
    storeObj **objs = n <= 16 ? stackobjs : zmalloc(sizeof(storeObj *) * (size_t)n);
    for (int j = 0; j < n; j++) {
        objs[j] = storeLookupRead(c->argv[j + 1]);
        if (objs[j]) wait |= relayWant(c, objs[j], 0, objs[j]->len, server.remote_get_timeout);
    }
    if (!wait || !relayBlockIfPending(c)) {
        addReplyArrayLen(c, n);
        for (int j = 0; j < n; j++) {
            if (objs[j]) addReplyStoreObj(c, objs[j]);
            else addReplyNull(c);
        }
    }
    if (objs != stackobjs) zfree(objs);
}

/* ---- MSET, MSETNX -------------------------------------------------------- */

/* All values are placed before any key changes: MSET is all or nothing.
 * MSETNX first answers 0 if any key exists, as Redis. */
static void msetGeneric(client *c, int nx) {
    if (c->argc % 2 == 0) {
        addReplyErrorArity(c);
        return;
    }
    if (nx) {
        for (int j = 1; j < c->argc; j += 2) {
            if (storeLookupWrite(c->argv[j])) {
                addReplyLongLong(c, 0);
                return;
            }
        }
    }
    for (int j = 1; j < c->argc; j += 2) {
        if (checkKeyLength(c, c->argv[j]) != C_OK) return;
        const char *toobig = valueTooBig(sdslen(c->argv[j + 1]));
        if (toobig) {
            addReplyError(c, toobig);
            return;
        }
    }
    int npairs = (c->argc - 1) / 2;
    storeObj **objs = zmalloc(sizeof(storeObj *) * (size_t)npairs);
    for (int i = 0; i < npairs; i++) {
        objs[i] = valueObject(c, 2 + 2 * i, c->argv[1 + 2 * i]);
        if (objs[i] == NULL) {
            for (int k = 0; k < i; k++) storeObjDecrRef(objs[k]);
            zfree(objs);
            addReplyOom(c);
            return;
        }
    }
    for (int i = 0; i < npairs; i++) {
        storeSet(c->argv[1 + 2 * i], objs[i], -1, 0);
        notifyKeyspaceEvent(NOTIFY_STRING, "set", c->argv[1 + 2 * i]);
    }
    zfree(objs);
    if (nx) addReplyLongLong(c, 1);
    else addReplyOk(c);
}

void msetCommand(client *c) { msetGeneric(c, 0); }
void msetnxCommand(client *c) { msetGeneric(c, 1); }

/* ---- changes: new versions ----------------------------------------------- */

/* The value a command is about to change (APPEND, SETRANGE, SETBIT, the
 * INCR family): *o NULL for a missing key, else *p its bytes. A store
 * object is WRONGTYPE. A SET value is always in the pool (storeObjCreate
 * puts it there); the REMOTE answer is only a guard. */
static int lookupForUpdate(client *c, sds key, storeObj **o, const char **p) {
    *p = NULL;
    *o = storeLookupWrite(key);
    if (*o == NULL) return C_OK;
    if (storeObjIsStore(*o)) {
        addReplyError(c, WRONGTYPE_ERR);
        return C_ERR;
    }
    *p = storeObjLocalPtr(*o);
    if (*p == NULL) {
        addReplyError(c, STORE_ERR_REMOTE);
        return C_ERR;
    }
    return C_OK;
}

/* Redis's limit on a string grown by APPEND or SETRANGE (same words), then
 * ours on any value. */
static int checkStringLength(client *c, long long size, long long append) {
    long long total = (long long)((uint64_t)size + (uint64_t)append);
    if (total > server.proto_max_bulk_len || total < size || total < append) {
        addReplyError(c, "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
        return C_ERR;
    }
    const char *toobig = valueTooBig((size_t)total);
    if (toobig) {
        addReplyError(c, toobig);
        return C_ERR;
    }
    return C_OK;
}

/* Builds and swaps in the next version of key's value: newlen bytes, the
 * old value's first (o may be NULL: a new key), zeros past them as Redis
 * grows a string, then plen bytes of patch at off; off + plen <= newlen,
 * and newlen is never shorter than the old value. The key keeps its TTL.
 * NULL (and -OOM) if the pool has no room even after eviction. */
static storeObj *writeNewVersion(client *c, sds key, storeObj *o, const char *p, uint64_t newlen, uint64_t off,
                                 const void *patch, size_t plen) {
    long long when = o ? storeGetExpire(key) : -1;
    /* Making room never evicts this very key, and evicts nothing unless the
     * new version then fits (storeObjCreateFor): a refused write changes
     * nothing. The reference keeps the bytes against anything else. */
    if (o) storeObjIncrRef(o);
    storeObj *n = storeObjCreateFor(newlen, key);
    if (n == NULL) {
        if (o) storeObjDecrRef(o);
        addReplyOom(c);
        return NULL;
    }
    char *dst = storeObjPtr(n);
    uint64_t keep = o ? o->len : 0;
    if (keep) memcpy(dst, p, keep);
    if (off > keep) memset(dst + keep, 0, off - keep);
    if (plen) memcpy(dst + off, patch, plen);
    n->flags |= OBJ_FLAG_ENC_RAW;
    storeSet(key, n, when, 1);
    if (o) storeObjDecrRef(o);
    return n;
}

void appendCommand(client *c) {
    sds key = c->argv[1], add = c->argv[2];
    storeObj *o;
    const char *p;
    if (lookupForUpdate(c, key, &o, &p) != C_OK) return;
    if (o == NULL) {
        /* A new key holds the argument as SET would (so "int" may be its encoding). */
        const char *toobig = valueTooBig(sdslen(add));
        if (toobig) {
            addReplyError(c, toobig);
            return;
        }
        if (checkKeyLength(c, key) != C_OK) return;
        storeObj *n = storeObjCreateFor(sdslen(add), key);
        if (n && n->len) memcpy(storeObjPtr(n), add, sdslen(add));
        if (n == NULL) {
            addReplyOom(c);
            return;
        }
        storeSet(key, n, -1, 0);
        notifyKeyspaceEvent(NOTIFY_STRING, "append", key);
        addReplyLongLong(c, (long long)sdslen(add));
        return;
    }
    if (checkStringLength(c, (long long)o->len, (long long)sdslen(add)) != C_OK) return;
    uint64_t newlen = o->len + sdslen(add);
    if (writeNewVersion(c, key, o, p, newlen, o->len, add, sdslen(add)) == NULL) return;
    notifyKeyspaceEvent(NOTIFY_STRING, "append", key);
    addReplyLongLong(c, (long long)newlen);
}

void setrangeCommand(client *c) {
    sds key = c->argv[1], value = c->argv[3];
    long long offset;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &offset, NULL) != C_OK) return;
    if (offset < 0) {
        addReplyError(c, "ERR offset is out of range");
        return;
    }
    storeObj *o;
    const char *p;
    if (lookupForUpdate(c, key, &o, &p) != C_OK) return;
    size_t vlen = sdslen(value);
    if (vlen == 0) {
        /* Nothing to write: the length, and no key is created. */
        addReplyLongLong(c, o ? (long long)o->len : 0);
        return;
    }
    if (checkStringLength(c, offset, (long long)vlen) != C_OK) return;
    if (o == NULL && checkKeyLength(c, key) != C_OK) return;
    uint64_t end = (uint64_t)offset + vlen;
    uint64_t newlen = o && o->len > end ? o->len : end;
    if (writeNewVersion(c, key, o, p, newlen, (uint64_t)offset, value, vlen) == NULL) return;
    notifyKeyspaceEvent(NOTIFY_STRING, "setrange", key);
    addReplyLongLong(c, (long long)newlen);
}

/* ---- the INCR family ----------------------------------------------------- */

/* o's bytes now spell v: remember v in the header where it fits (the
 * counters INCR is used for), so the next INCR reads no pool bytes. */
static void cacheIntval(storeObj *o, long long v) {
    if (v >= 0 && v <= (long long)UINT32_MAX) {
        o->intval = (uint32_t)v;
        o->flags |= OBJ_FLAG_INTVAL;
    } else {
        o->flags &= (uint8_t)~OBJ_FLAG_INTVAL;
    }
}

static void incrDecr(client *c, long long incr) {
    sds key = c->argv[1];
    storeObj *o;
    const char *p;
    if (lookupForUpdate(c, key, &o, &p) != C_OK) return;
    long long v = 0;
    if (o && (o->flags & OBJ_FLAG_INTVAL)) {
        /* The pool's bytes are a cache miss away: not read, only written
         * below, and fetched meanwhile. */
        __builtin_prefetch(p, 1);
        v = o->intval;
    } else if (o && !string2ll(p, (size_t)o->len, &v)) {
        addReplyError(c, "ERR value is not an integer or out of range");
        return;
    }
    if ((incr < 0 && v < 0 && incr < LLONG_MIN - v) || (incr > 0 && v > 0 && incr > LLONG_MAX - v)) {
        addReplyError(c, "ERR increment or decrement would overflow");
        return;
    }
    v += incr;
    if (o == NULL && checkKeyLength(c, key) != C_OK) return;
    char buf[32];
    int len = ll2string(buf, sizeof(buf), v);
    char *inplace = o ? storeObjWritableInPlace(o, (uint64_t)len) : NULL;
    if (inplace) {
        /* No one else can be reading it (store.c): Redis's in-place INCR.
         * The bytes are written last, nothing here reads them, so the line
         * prefetched above has the longest time to arrive. */
        o->flags &= (uint8_t)~(OBJ_FLAG_ENC_RAW | OBJ_FLAG_ENC_NOINT); /* Redis's result is "int" */
        cacheIntval(o, v);
        storeObjChangedInPlace(key, o);
        notifyKeyspaceEvent(NOTIFY_STRING, "incrby", key);
        addReplyLongLong(c, v);
        memcpy(inplace, buf, (size_t)len);
        return;
    }
    long long when = o ? storeGetExpire(key) : -1;
    /* A refused INCR must leave the key: eviction never takes it. */
    storeObj *n = storeObjCreateFor((size_t)len, key);
    if (n) memcpy(storeObjPtr(n), buf, (size_t)len);
    if (n == NULL) {
        addReplyOom(c);
        return;
    }
    cacheIntval(n, v);
    storeSet(key, n, when, 1);
    notifyKeyspaceEvent(NOTIFY_STRING, "incrby", key);
    addReplyLongLong(c, v);
}

void incrCommand(client *c) { incrDecr(c, 1); }
void decrCommand(client *c) { incrDecr(c, -1); }

void incrbyCommand(client *c) {
    long long incr;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &incr, NULL) != C_OK) return;
    incrDecr(c, incr);
}

void decrbyCommand(client *c) {
    long long decr;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &decr, NULL) != C_OK) return;
    if (decr == LLONG_MIN) { /* -decr would overflow */
        addReplyError(c, "ERR decrement would overflow");
        return;
    }
    incrDecr(c, -decr);
}

/* Long doubles printed with %.17Lf fit: LDBL_MAX has 4933 digits. */
#define LONG_DOUBLE_STR_MAX (5 * 1024)

/* A float as Redis reads one: strtold over the whole string, no leading
 * space, nothing left over (a NUL inside included), no overflow to infinity or underflow to zero,
 * no NaN. ("inf" itself parses; the sum is refused later.) */
static int parseLongDouble(const char *s, size_t len, long double *out) {
    char buf[LONG_DOUBLE_STR_MAX];
    if (len == 0 || len >= sizeof(buf)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    char *end;
    long double v = strtold(buf, &end);
    if (isspace((unsigned char)buf[0]) || *end != '\0' || (size_t)(end - buf) != len ||
        (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || fpclassify(v) == FP_ZERO)) || errno == EINVAL ||
        isnan(v))
        return 0;
    *out = v;
    return 1;
}

/* INCRBYFLOAT's result as Redis prints it: 17 decimals, then the trailing
 * zeros (and a bare point) dropped, so 10.5 + 0.1 reads "10.6"; "-0" is
 * "0". Returns the length; buf must hold LONG_DOUBLE_STR_MAX. */
static int formatLongDouble(char *buf, size_t size, long double v) {
    int l = snprintf(buf, size, "%.17Lf", v);
    if (l < 0 || (size_t)l >= size) return 0;
    if (strchr(buf, '.')) {
        while (buf[l - 1] == '0') l--;
        if (buf[l - 1] == '.') l--;
    }
    if (l == 2 && buf[0] == '-' && buf[1] == '0') {
        buf[0] = '0';
        l = 1;
    }
    buf[l] = '\0';
    return l;
}

void incrbyfloatCommand(client *c) {
    sds key = c->argv[1];
    storeObj *o;
    const char *p;
    if (lookupForUpdate(c, key, &o, &p) != C_OK) return;
    long double v = 0, incr = 0;
    if ((o && !parseLongDouble(p, (size_t)o->len, &v)) || !parseLongDouble(c->argv[2], sdslen(c->argv[2]), &incr)) {
        addReplyError(c, "ERR value is not a valid float");
        return;
    }
    v += incr;
    if (isnan(v) || isinf(v)) {
        addReplyError(c, "ERR increment would produce NaN or Infinity");
        return;
    }
    if (o == NULL && checkKeyLength(c, key) != C_OK) return;
    char buf[LONG_DOUBLE_STR_MAX];
    int len = formatLongDouble(buf, sizeof(buf), v);
    long long when = o ? storeGetExpire(key) : -1;
    storeObj *n = storeObjCreateFor((size_t)len, key);
    if (n) memcpy(storeObjPtr(n), buf, (size_t)len);
    if (n == NULL) {
        addReplyOom(c);
        return;
    }
    n->flags |= OBJ_FLAG_ENC_NOINT; /* Redis keeps it a string, never "int" */
    storeSet(key, n, when, 1);
    notifyKeyspaceEvent(NOTIFY_STRING, "incrbyfloat", key);
    addReplyBulk(c, buf, (size_t)len);
}

/* ---- bits ---------------------------------------------------------------- */

/* A bit offset as Redis bounds it: at most proto-max-bulk-len bytes in. */
static int getBitOffset(client *c, sds arg, uint64_t *offset) {
    long long v;
    if (!string2ll(arg, sdslen(arg), &v) || v < 0 || (v >> 3) >= server.proto_max_bulk_len) {
        addReplyError(c, "ERR bit offset is not an integer or out of range");
        return C_ERR;
    }
    *offset = (uint64_t)v;
    return C_OK;
}

/* Replies with the bit's old value. A SETBIT that changes nothing writes
 * no new version and announces nothing (the key is untouched, as Redis 7.0
 * leaves it for WATCH and keyspace events); OBJECT ENCODING still says raw
 * afterwards, as Redis's unsharing makes it. */
void setbitCommand(client *c) {
    sds key = c->argv[1];
    uint64_t bitoffset;
    long long on;
    if (getBitOffset(c, c->argv[2], &bitoffset) != C_OK) return;
    if (getLongLongFromObjectOrReply(c, c->argv[3], &on, "ERR bit is not an integer or out of range") != C_OK)
        return;
    if (on & ~1LL) {
        addReplyError(c, "ERR bit is not an integer or out of range");
        return;
    }
    storeObj *o;
    const char *p;
    if (lookupForUpdate(c, key, &o, &p) != C_OK) return;
    uint64_t byte = bitoffset >> 3;
    int shift = 7 - (int)(bitoffset & 7);
    int inside = o && byte < o->len;
    unsigned char cur = inside ? (unsigned char)p[byte] : 0;
    int old = (cur >> shift) & 1;
    if (!inside) {
        const char *toobig = valueTooBig((size_t)(byte + 1));
        if (toobig) {
            addReplyError(c, toobig);
            return;
        }
        if (o == NULL && checkKeyLength(c, key) != C_OK) return;
    }
    if (!inside || old != on) {
        unsigned char b = (unsigned char)((cur & ~(1u << shift)) | ((unsigned)on << shift));
        uint64_t newlen = inside ? o->len : byte + 1;
        if (writeNewVersion(c, key, o, p, newlen, byte, &b, 1) == NULL) return;
        notifyKeyspaceEvent(NOTIFY_STRING, "setbit", key);
    } else {
        o->flags |= OBJ_FLAG_ENC_RAW; /* metadata only: the bytes are untouched */
    }
    addReplyLongLong(c, old);
}

void getbitCommand(client *c) {
    uint64_t bitoffset;
    if (getBitOffset(c, c->argv[2], &bitoffset) != C_OK) return;
    storeObj *o = storeLookupRead(c->argv[1]);
    uint64_t byte = bitoffset >> 3;
    int bit = 0;
    if (o && byte < o->len) {
        const char *p = valueBytes(c, o, byte, 1);
        if (p == NULL) return;
        bit = ((unsigned char)p[0] >> (7 - (bitoffset & 7))) & 1;
    }
    addReplyLongLong(c, bit);
}

static long long popcount(const unsigned char *p, size_t n) {
    long long count = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        count += __builtin_popcountll(w);
    }
    for (; i < n; i++) count += __builtin_popcount(p[i]);
    return count;
}

/* Redis 7.0's order: a missing key is 0 before the arguments are even
 * read; a range wholly before the start (both negative, start > end) is 0
 * before BYTE|BIT is read. Only the bytes of the range are fetched from a
 * mounted segment. */
void bitcountCommand(client *c) {
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o == NULL) {
        addReplyLongLong(c, 0);
        return;
    }
    long long len = (long long)o->len, start, end;
    unsigned first_mask = 0, last_mask = 0;
    if (c->argc == 4 || c->argc == 5) {
        int isbit = 0;
        if (getLongLongFromObjectOrReply(c, c->argv[2], &start, NULL) != C_OK) return;
        if (getLongLongFromObjectOrReply(c, c->argv[3], &end, NULL) != C_OK) return;
        if (start < 0 && end < 0 && start > end) {
            addReplyLongLong(c, 0);
            return;
        }
        if (c->argc == 5) {
            if (!strcasecmp(c->argv[4], "bit")) {
                isbit = 1;
            } else if (strcasecmp(c->argv[4], "byte")) {
                addReplyErrorSyntax(c);
                return;
            }
        }
        long long total = isbit ? len * 8 : len;
        if (start < 0) start = total + start;
        if (end < 0) end = total + end;
        if (start < 0) start = 0;
        if (end < 0) end = 0;
        if (end >= total) end = total - 1;
        if (isbit && start <= end) {
            /* Bits of the edge bytes outside the range, to subtract. */
            first_mask = ~((1u << (8 - (start & 7))) - 1) & 0xFF;
            last_mask = (1u << (7 - (end & 7))) - 1;
            start >>= 3;
            end >>= 3;
        }
    } else if (c->argc == 2) {
        start = 0;
        end = len - 1;
    } else {
        addReplyErrorSyntax(c);
        return;
    }
    if (start > end) {
        addReplyLongLong(c, 0);
        return;
    }
    size_t n = (size_t)(end - start + 1);
    const unsigned char *p = (const unsigned char *)valueBytes(c, o, (uint64_t)start, n);
    if (p == NULL) return;
    long long count = popcount(p, n);
    if (first_mask) count -= __builtin_popcount(p[0] & first_mask);
    if (last_mask) count -= __builtin_popcount(p[n - 1] & last_mask);
    addReplyLongLong(c, count);
}

/* The first bit equal to bit in p[0..n), the first byte's bits before
 * from and the last byte's after to (bit numbers 0..7 from the high end)
 * left out; -1 if none. Eight bytes at a time past the edges: a bitmap of
 * many set (or clear) bits is skipped a word per step. */
static long long firstBit(const unsigned char *p, size_t n, int bit, unsigned from, unsigned to) {
    unsigned char flip = bit ? 0 : 0xFF; /* looking for 1s in the flipped bytes */
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && i + 1 < n) {
            uint64_t skip = bit ? 0 : ~(uint64_t)0, w;
            while (i + 8 < n && (memcpy(&w, p + i, 8), w == skip)) i += 8;
        }
        unsigned b = (unsigned char)(p[i] ^ flip);
        if (i == 0) b &= 0xFFu >> from;
        if (i + 1 == n) b &= (0xFFu << (7 - to)) & 0xFF;
        if (b) return (long long)i * 8 + (__builtin_clz(b) - 24);
    }
    return -1;
}

/* Redis 7.0's BITPOS, in its order: the bit is checked first, a missing
 * key is an endless run of 0s (0 for a clear bit, -1 for a set one), then
 * start, BYTE|BIT and end. Not found: -1, except a clear bit looked for
 * without an end, which is the first bit past the string (the value reads
 * as padded with 0s on the right). Only the range's bytes are fetched from
 * a mounted segment. */
void bitposCommand(client *c) {
    long long bit;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &bit, NULL) != C_OK) return;
    if (bit != 0 && bit != 1) {
        addReplyError(c, "ERR The bit argument must be 1 or 0.");
        return;
    }
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o == NULL) {
        addReplyLongLong(c, bit ? -1 : 0);
        return;
    }
    long long len = (long long)o->len, start = 0, end = len - 1;
    int isbit = 0, end_given = 0;
    if (c->argc >= 4 && c->argc <= 6) {
        long long total = len;
        if (getLongLongFromObjectOrReply(c, c->argv[3], &start, NULL) != C_OK) return;
        if (c->argc == 6) {
            if (!strcasecmp(c->argv[5], "bit")) {
                isbit = 1;
                total = len * 8;
            } else if (strcasecmp(c->argv[5], "byte")) {
                addReplyErrorSyntax(c);
                return;
            }
        }
        end = total - 1;
        if (c->argc >= 5) {
            if (getLongLongFromObjectOrReply(c, c->argv[4], &end, NULL) != C_OK) return;
            end_given = 1;
        }
        if (start < 0) start = total + start;
        if (end < 0) end = total + end;
        if (start < 0) start = 0;
        if (end < 0) end = 0;
        if (end >= total) end = total - 1;
        if (!isbit && start <= end) { /* bytes: the same range in bits (both below len now) */
            start *= 8;
            end = end * 8 + 7;
        }
    } else if (c->argc == 3) {
        start = 0;
        end = len * 8 - 1;
    } else {
        addReplyErrorSyntax(c);
        return;
    }
    if (start > end || len == 0) {
        addReplyLongLong(c, -1); /* an empty range holds neither a 0 nor a 1 */
        return;
    }
    size_t first = (size_t)(start >> 3), n = (size_t)(end >> 3) - first + 1;
    const unsigned char *p = (const unsigned char *)valueBytes(c, o, (uint64_t)first, n);
    if (p == NULL) return;
    long long pos = firstBit(p, n, (int)bit, (unsigned)(start & 7), (unsigned)(end & 7));
    if (pos >= 0) addReplyLongLong(c, (long long)first * 8 + pos);
    else if (bit == 0 && !end_given) addReplyLongLong(c, end + 1);
    else addReplyLongLong(c, -1);
}

/* ---- LCS ----------------------------------------------------------------- */

/* One matched range of LCS IDX: a[a0..a1] is b[b0..b1]. */
typedef struct lcsRange {
    uint32_t a0, a1, b0, b1;
} lcsRange;

/* The classic dynamic-programming table (LCS length of every pair of
 * prefixes), then one walk back from its corner that yields the common
 * subsequence and, as it goes, the ranges in which it is contiguous in
 * both strings, last range first. The walk's tie-breaking (on equal
 * lengths go left in b) is Redis's, so the string and the ranges are the
 * ones Redis returns. The table is (|a|+1)*(|b|+1) 32-bit cells, bounded
 * by proto-max-bulk-len as in Redis. */
void lcsCommand(client *c) {
    int getlen = 0, getidx = 0, withmatchlen = 0;
    long long minmatchlen = 0;
    storeObj *oa = storeLookupRead(c->argv[1]);
    storeObj *ob = storeLookupRead(c->argv[2]);
    for (int j = 3; j < c->argc; j++) {
        const char *opt = c->argv[j];
        if (!strcasecmp(opt, "idx")) {
            getidx = 1;
        } else if (!strcasecmp(opt, "len")) {
            getlen = 1;
        } else if (!strcasecmp(opt, "withmatchlen")) {
            withmatchlen = 1;
        } else if (!strcasecmp(opt, "minmatchlen") && j + 1 < c->argc) {
            if (getLongLongFromObjectOrReply(c, c->argv[++j], &minmatchlen, NULL) != C_OK) return;
            if (minmatchlen < 0) minmatchlen = 0;
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    if (getidx && getlen) {
        addReplyError(c, "ERR If you want both the length and indexes, please just use IDX.");
        return;
    }
    uint64_t alen64 = oa ? oa->len : 0, blen64 = ob ? ob->len : 0;
    if (alen64 >= UINT32_MAX - 1 || blen64 >= UINT32_MAX - 1) {
        addReplyError(c, "ERR String too long for LCS");
        return;
    }
    uint32_t alen = (uint32_t)alen64, blen = (uint32_t)blen64;
    unsigned long long cells = (unsigned long long)(alen + 1ULL) * (blen + 1ULL);
    if (cells > SIZE_MAX / sizeof(uint32_t)) {
        addReplyError(c, "ERR Insufficient memory, failed allocating transient memory for LCS");
        return;
    }
    if (cells * sizeof(uint32_t) > (unsigned long long)server.proto_max_bulk_len) {
        addReplyError(c, "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
        return;
    }
    /* Both values asked for before either is read: one block for both. */
    int wait = (oa && relayWant(c, oa, 0, alen, server.remote_get_timeout)) |
               (ob && relayWant(c, ob, 0, blen, server.remote_get_timeout));
    if (wait && relayBlockIfPending(c)) return;
    const char *a = oa ? valueBytes(c, oa, 0, alen) : "";
    if (a == NULL) return;
    const char *b = ob ? valueBytes(c, ob, 0, blen) : "";
    if (b == NULL) return;
    uint32_t *t = ztrymalloc((size_t)cells * sizeof(uint32_t));
    if (t == NULL) {
        addReplyError(c, "ERR Insufficient memory, failed allocating transient memory for LCS");
        return;
    }
#define CELL(i, j) t[(size_t)(i) * (blen + 1) + (j)]
    for (uint32_t j = 0; j <= blen; j++) CELL(0, j) = 0;
    for (uint32_t i = 1; i <= alen; i++) {
        CELL(i, 0) = 0;
        for (uint32_t j = 1; j <= blen; j++) {
            if (a[i - 1] == b[j - 1]) {
                CELL(i, j) = CELL(i - 1, j - 1) + 1;
            } else {
                uint32_t up = CELL(i - 1, j), left = CELL(i, j - 1);
                CELL(i, j) = up > left ? up : left;
            }
        }
    }
    uint32_t total = CELL(alen, blen);
    int walk = getidx || !getlen;
    sds str = walk ? sdsnewlen(NULL, total) : NULL;
    lcsRange *ranges = NULL, cur = {0, 0, 0, 0};
    size_t nranges = 0, cap = 0;
    int open = 0;
    uint32_t i = alen, j = blen, k = total;
    while (walk && i > 0 && j > 0) {
        int emit = 0;
        if (a[i - 1] == b[j - 1]) {
            str[k - 1] = a[i - 1];
            if (!open) {
                open = 1;
                cur.a0 = cur.a1 = i - 1;
                cur.b0 = cur.b1 = j - 1;
            } else if (cur.a0 == i && cur.b0 == j) {
                cur.a0--; /* contiguous with the range: extend it backwards */
                cur.b0--;
            } else {
                emit = 1;
            }
            if (cur.a0 == 0 || cur.b0 == 0) emit = 1; /* the walk ends here */
            k--;
            i--;
            j--;
        } else {
            if (CELL(i - 1, j) > CELL(i, j - 1)) i--;
            else j--;
            if (open) emit = 1;
        }
        if (emit) {
            uint32_t mlen = cur.a1 - cur.a0 + 1;
            if (getidx && (minmatchlen == 0 || mlen >= minmatchlen)) {
                if (nranges == cap) {
                    cap = cap ? cap * 2 : 16;
                    ranges = zrealloc(ranges, sizeof(lcsRange) * cap);
                }
                ranges[nranges++] = cur;
            }
            open = 0;
        }
    }
#undef CELL
    zfree(t);
    if (getidx) {
        addReplyMapLen(c, 2);
        addReplyBulkCString(c, "matches");
        addReplyArrayLen(c, (long long)nranges);
        for (size_t r = 0; r < nranges; r++) {
            addReplyArrayLen(c, 2 + withmatchlen);
            addReplyArrayLen(c, 2);
            addReplyLongLong(c, ranges[r].a0);
            addReplyLongLong(c, ranges[r].a1);
            addReplyArrayLen(c, 2);
            addReplyLongLong(c, ranges[r].b0);
            addReplyLongLong(c, ranges[r].b1);
            if (withmatchlen) addReplyLongLong(c, ranges[r].a1 - ranges[r].a0 + 1);
        }
        addReplyBulkCString(c, "len");
        addReplyLongLong(c, total);
        sdsfree(str);
    } else if (getlen) {
        addReplyLongLong(c, total);
    } else {
        addReplyBulkSds(c, str);
    }
    zfree(ranges);
}
