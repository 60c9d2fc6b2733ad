/* notify.c -- keyspace notifications (Redis's) and store events (ours).
 *
 * Keyspace notifications are Pub/Sub messages the server publishes about
 * its own keys, selected by `notify-keyspace-events`, with Redis's letters
 * and channels:
 *
 *   K   __keyspace@0__:<key>      message: the event name ("set", "del")
 *   E   __keyevent@0__:<event>    message: the key
 *   g $ x e n m ...               which events: see notify.h and the table
 *
 * as Redis does it: a class without K or E publishes nothing, A is
 * "g$lshzxetd" (neither m nor n), and CONFIG GET shows the letters in
 * Redis's canonical order. Commands call notifyKeyspaceEvent after the
 * change; expiry and eviction are emitted by store.c and evict.c, where
 * they happen, whichever command or cron caused them.
 *
 * Store events (class S, ours: Redis has no 'S') are for a cache-aware
 * router that keeps an index of what every node holds. Redis's messages
 * cannot carry that: a keyspace message has only the event name, a keyevent
 * message only the key. So the store class has channels of its own,
 * __store@0__:<event>, whose message is one line of fields, the key last:
 *
 *   node=<40 hex> size=<bytes> segments=<id>[,<id>...] key=<the key's bytes>
 *
 * `key=` runs to the end of the message, so keys with spaces or any other
 * bytes need no quoting, and no field before it contains a space: split at
 * the first " key=". Fields may be added before `key=` later; a reader
 * ignores names it does not know. The events:
 *
 *   put       a key now holds a readable object of `size` bytes in
 *             `segments` (PUT.END, SET, MSET, RESTORE: anything that stores
 *             a value; an overwrite is a put of the new version)
 *   remove    the key's object was removed (REMOVE, DEL, UNLINK, MIGRATE
 *             away, an EXPIRE in the past)
 *   expired   its TTL passed
 *   evicted   eviction took it for space
 *   lost      every replica went with its segments (unmount, owner death)
 *   flush     every key went (FLUSHALL, FLUSHDB, REMOVE.ALL); the message
 *             is `node=<id> keys=<n>`, one event rather than n
 *   tier      reserved for an object moving between tiers; nothing moves
 *             tiers yet, so it is never sent
 *
 * They come from store.c, at the few places the keyspace changes, not from
 * commands: a command added later (APPEND, RENAME, ...) that stores through
 * storeSet and removes through storeDelete emits them without knowing.
 * `node` is CLUSTER MYID in cluster mode, else the run id (INFO run_id),
 * which changes on restart: a router sees that a node came back empty. S
 * is independent of K and E (its channels are its own), and A leaves it
 * out, so a redis.conf asking for "AKE" does not start a stream of store
 * events nobody reads.
 *
 * Tenants. Both kinds name keys, so each message is published with its key
 * (pubsubPublishKeyMessage) and a subscriber whose user is restricted by
 * key patterns gets it only if it may see the key (acl.c): a tenant granted
 * __keyevent@0__:* or __store@0__:* hears its own keys, never another's.
 * The flush event names no key and goes to every subscriber.
 *
 * Cost. Off (the default), every site is one inline test of a bit
 * (notify.h). On, nothing is built while no client subscribes to anything.
 *
 * Event names, per command, as Redis 7.0 names them (class in brackets);
 * a command added here later uses the same, after its change is made:
 *
 *   SET SETNX SETEX PSETEX GETSET MSET MSETNX   set [$]; SET..EX/PX/EXAT/PXAT,
 *                                               SETEX, PSETEX: then expire [g]
 *   APPEND                                      append [$]
 *   SETRANGE                                    setrange [$]
 *   INCR DECR INCRBY DECRBY                     incrby [$]
 *   INCRBYFLOAT                                 incrbyfloat [$]
 *   GETDEL                                      del [g]
 *   GETEX                                       expire [g] with EX/PX/EXAT/PXAT,
 *                                               persist [g] with PERSIST,
 *                                               del [g] for a time in the past
 *   DEL UNLINK                                  del [g], per key removed
 *   EXPIRE PEXPIRE EXPIREAT PEXPIREAT           expire [g]; del [g] for a time
 *                                               in the past
 *   PERSIST                                     persist [g], when a TTL went
 *   RENAME RENAMENX                             rename_from [g] on the source,
 *                                               then rename_to [g] on the
 *                                               destination
 *   COPY                                        copy_to [g] on the destination
 *   RESTORE                                     restore [g]; del [g] when the
 *                                               TTL is past and REPLACE removed
 *                                               a key
 *   MIGRATE                                     del [g] per key moved (no COPY)
 *   FLUSHALL FLUSHDB                            nothing per key
 *   (any key created)                           new [n], before the command's
 *                                               own event (storeSet emits it;
 *                                               RENAME's and COPY's destination
 *                                               even over a replaced key, as
 *                                               Redis deletes and adds it)
 *   (a read finds no key: GET MGET GETRANGE     keymiss [m] (storeLookupRead
 *    STRLEN TTL PTTL EXPIRETIME EXISTS TYPE     emits it)
 *    DUMP
 *    GETEX GETDEL SET..GET ...)
 *   (TTL passed)                                expired [x] (store.c)
 *   (evicted)                                   evicted [e] (evict.c)
 *   PUT.END BATCH.PUT.END                       set [$] (the store's SET)
 *   REMOVE                                      del [g], per key that had a
 *                                               readable version
 *   REMOVE.ALL                                  nothing per key
 */
#include <string.h>

#include "cluster.h"
#include "notify.h"
#include "pubsub.h"
#include "server.h"
#include "store.h"
#include "util.h"

/* Letters in the order Redis prints them; S, ours, after Redis's classes. */
static const struct {
    char letter;
    int flag;
} letters[] = {{'g', NOTIFY_GENERIC}, {'$', NOTIFY_STRING}, {'l', NOTIFY_LIST},    {'s', NOTIFY_SET},
               {'h', NOTIFY_HASH},    {'z', NOTIFY_ZSET},   {'x', NOTIFY_EXPIRED}, {'e', NOTIFY_EVICTED},
               {'t', NOTIFY_STREAM},  {'d', NOTIFY_MODULE}, {'n', NOTIFY_NEW},     {'S', NOTIFY_STORE},
               {'K', NOTIFY_KEYSPACE}, {'E', NOTIFY_KEYEVENT}, {'m', NOTIFY_KEY_MISS}, {0, 0}};

int notifyFlagsFromString(const char *s) {
    int flags = 0;
    for (; *s; s++) {
        if (*s == 'A') {
            flags |= NOTIFY_ALL;
            continue;
        }
        int i;
        for (i = 0; letters[i].letter && letters[i].letter != *s; i++)
            ;
        if (!letters[i].letter) return -1;
        flags |= letters[i].flag;
    }
    return flags;
}

/* Redis prints A for the whole of A and then leaves out the classes outside
 * it but before K (so "AKEn" reads back "AKE", though n stays on): kept,
 * since clients compare the string. Ours, S, is always shown. */
sds notifyFlagsToString(int flags) {
    sds s = sdsempty();
    int all = (flags & NOTIFY_ALL) == NOTIFY_ALL;
    if (all) s = sdscatlen(s, "A", 1);
    for (int i = 0; letters[i].letter; i++) {
        int f = letters[i].flag;
        int after_k = f == NOTIFY_KEYSPACE || f == NOTIFY_KEYEVENT || f == NOTIFY_KEY_MISS;
        if (!(flags & f) || (all && !after_k && f != NOTIFY_STORE)) continue;
        s = sdscatlen(s, &letters[i].letter, 1);
    }
    return s;
}

void notifySetFlags(int flags) {
    server.notify_keyspace_events = flags;
    int classes = flags & ~(NOTIFY_KEYSPACE | NOTIFY_KEYEVENT | NOTIFY_STORE);
    server.notify_mask = (flags & (NOTIFY_KEYSPACE | NOTIFY_KEYEVENT)) ? classes : 0;
    server.notify_mask |= flags & NOTIFY_STORE;
}

/* Channel names and payloads are built in two buffers kept from one event
 * to the next: an event costs no allocation once they have grown to fit. */
static sds chanbuf, msgbuf;

static sds bufReset(sds *buf, const char *prefix, size_t len) {
    if (*buf == NULL) *buf = sdsempty();
    sdsclear(*buf);
    *buf = sdscatlen(*buf, prefix, len);
    return *buf;
}

/* A huge key (max-key-size allows 512mb) must not pin its size here. */
static void bufTrim(sds *buf) {
    if (*buf && sdsalloc(*buf) > 64 * 1024) {
        sdsfree(*buf);
        *buf = NULL;
    }
}

/* ---- Redis's keyspace notifications --------------------------------------- */

void notifyKeyspaceEventPublish(int type, const char *event, sds key) {
    (void)type; /* the caller tested it against the mask */
    if (!pubsubHasSubscribers()) return;
    size_t elen = strlen(event);
    if (server.notify_keyspace_events & NOTIFY_KEYSPACE) {
        sds chan = chanbuf = sdscatlen(bufReset(&chanbuf, "__keyspace@0__:", 15), key, sdslen(key));
        pubsubPublishKeyMessage(chan, event, elen, key);
    }
    if (server.notify_keyspace_events & NOTIFY_KEYEVENT) {
        sds chan = chanbuf = sdscatlen(bufReset(&chanbuf, "__keyevent@0__:", 15), event, elen);
        pubsubPublishKeyMessage(chan, key, sdslen(key), key);
    }
    bufTrim(&chanbuf);
}

/* ---- store events --------------------------------------------------------- */

static const char *nodeId(void) {
    return server.cluster && server.cluster->myself ? server.cluster->myself->id : server.runid;
}

/* __store@0__:<event>, kept for the next event of the same name (event is
 * one of the literals of store.c; another pointer only rebuilds it). */
static sds storechan;
static const char *storechan_event;

static sds storeChannel(const char *event) {
    if (storechan == NULL || event != storechan_event) {
        storechan = sdscat(bufReset(&storechan, "__store@0__:", 12), event);
        storechan_event = event;
    }
    return storechan;
}

/* The message is written into msgbuf with room made once for its longest
 * form, rather than by an append per field: at one event per PUT.END the
 * appends' checks and calls were a measurable part of what an event costs. */
void notifyStoreEventPublish(const char *event, sds key, const storeObj *o) {
    if (!pubsubHasSubscribers()) return;
    const char *id = nodeId();
    size_t idlen = strlen(id), klen = sdslen(key);
    /* Numbers take at most 20 digits; ll2string writes a NUL after them. */
    size_t most = 5 + idlen + 6 + 21 + 10 + (size_t)o->nreplicas * 22 + 5 + klen;
    if (msgbuf == NULL) msgbuf = sdsempty();
    sdsclear(msgbuf);
    msgbuf = sdsMakeRoomFor(msgbuf, most);
    char *p = msgbuf;
    memcpy(p, "node=", 5);
    p += 5;
    memcpy(p, id, idlen);
    p += idlen;
    memcpy(p, " size=", 6);
    p += 6;
    p += ll2string(p, 21, (long long)o->len);
    memcpy(p, " segments=", 10);
    p += 10;
    int n = 0;
    for (int i = 0; i < o->nreplicas; i++) {
        /* A stale replica (its segment gone) is no place to read from. */
        segment *seg = storeReplicaSegment(storeObjReplica((storeObj *)o, i));
        if (seg == NULL) continue;
        if (n++) *p++ = ',';
        p += ll2string(p, 21, (long long)seg->id);
    }
    memcpy(p, " key=", 5);
    p += 5;
    memcpy(p, key, klen);
    p += klen;
    sdssetlen(msgbuf, (size_t)(p - msgbuf));
    pubsubPublishKeyMessage(storeChannel(event), msgbuf, sdslen(msgbuf), key);
    bufTrim(&msgbuf);
}

void notifyStoreFlushPublish(unsigned long keys) {
    if (!(server.notify_mask & NOTIFY_STORE) || !pubsubHasSubscribers()) return;
    /* A tenant hears that everything went, not how much the others held:
     * the count is the server's, so its message has none. */
    sds msg = sdscatprintf(sdsempty(), "node=%s keys=%lu", nodeId(), keys);
    sds tmsg = sdscatprintf(sdsempty(), "node=%s", nodeId());
    pubsubPublishTenantMessage(storeChannel("flush"), msg, sdslen(msg), tmsg, sdslen(tmsg));
    sdsfree(msg);
    sdsfree(tmsg);
}

/* A node's own event (failover, role change): __store@0__:<event>, the
 * message "node=<id> " and what the caller says. */
void notifyStoreNodeEvent(const char *event, const char *what) {
    if (!(server.notify_mask & NOTIFY_STORE) || !pubsubHasSubscribers()) return;
    sds msg = sdscatprintf(sdsempty(), "node=%s %s", nodeId(), what);
    pubsubPublishMessage(storeChannel(event), msg, sdslen(msg));
    sdsfree(msg);
}
