/* t_string.c -- SET, GET and friends over the server's own pool.
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
 */
#include <limits.h>
#include <string.h>
#include <strings.h>

#include "notify.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define OOM_ERR "-OOM not enough space in the pool for this value"
#define SET_NX (1 << 0)
#define SET_XX (1 << 1)
#define SET_EX (1 << 2)
#define SET_PX (1 << 3)
#define SET_EXAT (1 << 4)
#define SET_PXAT (1 << 5)
#define SET_KEEPTTL (1 << 6)
#define SET_GET (1 << 7)
#define SET_EXPIRE_ANY (SET_EX | SET_PX | SET_EXAT | SET_PXAT | SET_KEEPTTL)

static int checkKeyLen(client *c, sds key) {
    if ((long long)sdslen(key) > server.max_key_size) {
        addReplyErrorFormat(c, "ERR key is too long (%zu bytes, max-key-size is %lld)", sdslen(key),
                            server.max_key_size);
        return C_ERR;
    }
    return C_OK;
}

static const char *valueTooBig(size_t len) {
    return (long long)len > server.max_object_size ? "ERR value is too large (max-object-size)" : NULL;
}

/* Places a large SET/MSET value in the pool before its bytes arrive. */
static char *placeValueArg(client *c, int argi, size_t len) {
    const char *err = valueTooBig(len);
    if (err) {
        c->argerr = err;
        return NULL;
    }
    storeObj *o = storeObjCreate(len);
    if (o == NULL) {
        c->argerr = OOM_ERR;
        return NULL;
    }
    c->argobj[argi] = o;
    return storeObjPtr(o);
}

char *setBigArgProc(client *c, int argi, size_t len) {
    return argi == 2 ? placeValueArg(c, argi, len) : NULL;
}

char *msetBigArgProc(client *c, int argi, size_t len) {
    return argi >= 2 && argi % 2 == 0 ? placeValueArg(c, argi, len) : NULL;
}

/* The value of argument i as an object: adopted if it was read into the
 * pool, otherwise copied there. NULL (and an -OOM reply) if no space. */
static storeObj *valueObject(client *c, int i) {
    if (c->argobj && c->argobj[i]) {
        storeObj *o = c->argobj[i];
        c->argobj[i] = NULL;
        return o;
    }
    return storeObjCreateFrom(c->argv[i], sdslen(c->argv[i]));
}

/* Parses SET's options; on error replies and returns C_ERR. */
static int parseSetOptions(client *c, int *flags, long long *expire_ms) {
    *flags = 0;
    *expire_ms = -1;
    for (int j = 3; j < c->argc; j++) {
        const char *o = c->argv[j];
        int next = j + 1 < c->argc;
        int f = 0;
        if (!strcasecmp(o, "nx")) f = SET_NX;
        else if (!strcasecmp(o, "xx")) f = SET_XX;
        else if (!strcasecmp(o, "get")) f = SET_GET;
        else if (!strcasecmp(o, "keepttl")) f = SET_KEEPTTL;
        else if (!strcasecmp(o, "ex") && next) f = SET_EX;
        else if (!strcasecmp(o, "px") && next) f = SET_PX;
        else if (!strcasecmp(o, "exat") && next) f = SET_EXAT;
        else if (!strcasecmp(o, "pxat") && next) f = SET_PXAT;
        else goto syntax;
        if ((f & (SET_NX | SET_XX)) && (*flags & (SET_NX | SET_XX))) goto syntax;
        if ((f & SET_EXPIRE_ANY) && (*flags & SET_EXPIRE_ANY)) goto syntax;
        *flags |= f;
        if (f & (SET_EX | SET_PX | SET_EXAT | SET_PXAT)) {
            long long v;
            sds arg = c->argv[++j];
            if (!string2ll(arg, sdslen(arg), &v)) {
                addReplyError(c, "ERR value is not an integer or out of range");
                return C_ERR;
            }
            long long unit = (f & (SET_EX | SET_EXAT)) ? 1000 : 1;
            long long base = (f & (SET_EX | SET_PX)) ? mstime() : 0;
            if (v <= 0 || v > LLONG_MAX / unit || v * unit > LLONG_MAX - base) {
                addReplyError(c, "ERR invalid expire time in 'set' command");
                return C_ERR;
            }
            *expire_ms = base + v * unit;
        }
    }
    return C_OK;
syntax:
    addReplyErrorSyntax(c);
    return C_ERR;
}

void setCommand(client *c) {
    int flags;
    long long expire_ms;
    sds key = c->argv[1];
    if (parseSetOptions(c, &flags, &expire_ms) != C_OK || checkKeyLen(c, key) != C_OK) return;
    const char *toobig = valueTooBig(sdslen(c->argv[2]));
    if (toobig) {
        addReplyError(c, toobig);
        return;
    }
    storeObj *old = storeLookupWrite(key);
    /* SET ... GET reads the key, so a miss is a keymiss, as in Redis. */
    if ((flags & SET_GET) && !old) notifyKeyspaceEvent(NOTIFY_KEY_MISS, "keymiss", key);
    if (((flags & SET_NX) && old) || ((flags & SET_XX) && !old)) {
        if (flags & SET_GET) {
            if (old) addReplyStoreObj(c, old);
            else addReplyNull(c);
        } else {
            addReplyNull(c);
        }
        return;
    }
    /* Keep the old version alive for the GET reply across eviction. */
    if (old) storeObjIncrRef(old);
    storeObj *o = valueObject(c, 2);
    if (o == NULL) {
        server.stat_oom_rejections++;
        addReplyError(c, OOM_ERR);
        if (old) storeObjDecrRef(old);
        return;
    }
    storeSet(key, o, expire_ms, flags & SET_KEEPTTL);
    notifyKeyspaceEvent(NOTIFY_STRING, "set", key);
    if (expire_ms >= 0) notifyKeyspaceEvent(NOTIFY_GENERIC, "expire", key);
    if (flags & SET_GET) {
        if (old) addReplyStoreObj(c, old);
        else addReplyNull(c);
    } else {
        addReplyOk(c);
    }
    if (old) storeObjDecrRef(old);
}

void getCommand(client *c) {
    storeObj *o = storeLookupRead(c->argv[1]);
    if (o) addReplyStoreObj(c, o);
    else addReplyNull(c);
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

void mgetCommand(client *c) {
    addReplyArrayLen(c, c->argc - 1);
    for (int j = 1; j < c->argc; j++) {
        storeObj *o = storeLookupRead(c->argv[j]);
        if (o) addReplyStoreObj(c, o);
        else addReplyNull(c);
    }
}

/* All values are placed before any key changes: MSET is all or nothing. */
void msetCommand(client *c) {
    if (c->argc % 2 == 0) {
        addReplyErrorArity(c);
        return;
    }
    for (int j = 1; j < c->argc; j += 2) {
        if (checkKeyLen(c, c->argv[j]) != C_OK) return;
        const char *toobig = valueTooBig(sdslen(c->argv[j + 1]));
        if (toobig) {
            addReplyError(c, toobig);
            return;
        }
    }
    int npairs = (c->argc - 1) / 2;
    storeObj **objs = zmalloc(sizeof(storeObj *) * (size_t)npairs);
    for (int i = 0; i < npairs; i++) {
        objs[i] = valueObject(c, 2 + 2 * i);
        if (objs[i] == NULL) {
            for (int k = 0; k < i; k++) storeObjDecrRef(objs[k]);
            zfree(objs);
            server.stat_oom_rejections++;
            addReplyError(c, OOM_ERR);
            return;
        }
    }
    for (int i = 0; i < npairs; i++) {
        storeSet(c->argv[1 + 2 * i], objs[i], -1, 0);
        notifyKeyspaceEvent(NOTIFY_STRING, "set", c->argv[1 + 2 * i]);
    }
    zfree(objs);
    addReplyOk(c);
}
