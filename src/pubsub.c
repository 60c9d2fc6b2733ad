/* pubsub.c -- Pub/Sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs,
 * PUBLISH, SPUBLISH and PUBSUB, with Redis 7.0's replies byte for byte.
 *
 * Three kinds of subscription share one implementation: channels (exact
 * names), patterns (glob, matched against every published channel) and
 * shard channels (exact names, a namespace of their own, keyed by slot in
 * cluster mode). Each kind has two indexes that always agree:
 *
 *   server side   name -> the clients subscribed to it, in subscription
 *                 order, so PUBLISH finds the receivers of a channel with
 *                 one lookup and walks an array;
 *   client side   the names the client subscribes to (a dict), so
 *                 UNSUBSCRIBE without arguments, RESET and a disconnect can
 *                 drop every subscription of the client without scanning
 *                 the server.
 *
 * Publishing is the hot path (a store event per PUT.END): the receivers are
 * an array, walked without allocating. Leaving costs O(1) amortized too, so
 * a channel with many subscribers that come and go (one per engine rank)
 * costs no scan: the client's own index keeps its slot in the channel's
 * array, a leaving client leaves a hole (PUBLISH skips holes), and the
 * array is compacted, in order, once holes outnumber the subscribers, each
 * moved client told its new slot. Patterns are an array too, since every
 * PUBLISH tries each; a pattern knows its place in it, and the last one
 * takes the place of one that goes (the order patterns are tried in is not
 * Redis's contract: 7.0 keeps them in a dict). A message is encoded once per PUBLISH, its head
 * (the bulks before the payload) only when it differs from the last
 * message's, and a small one copied to each receiver whole (under RESP3
 * only its first byte differs); a store event with one subscriber, the
 * case to keep cheap, costs one append to its output buffer. A name leaves the
 * server index with its last subscriber, so PUBSUB CHANNELS and NUMPAT
 * count only names someone listens to. A client that never subscribed
 * carries one NULL pointer; its index is allocated at the first
 * subscription and given back with the last.
 *
 * Messages are queued like any reply (networking.c): RESP2 arrays, or RESP3
 * push frames ('>'), which a RESP3 client can receive between the replies
 * of its ordinary commands. Under RESP2 a subscribed connection can only
 * (un)subscribe, PING, QUIT and RESET, since a message and a reply could
 * not be told apart; processCommand asks pubsubRefusal. A subscriber
 * that does not read is bounded by `client-output-buffer-limit pubsub`
 * (32mb hard, 8mb for 60 s by default): past it the connection is closed,
 * and the server never holds more than that for it.
 *
 * Tenants. PUBSUB's lists and counts show a user restricted by key
 * patterns only the names it could subscribe to, and a message about a key
 * (keyspace notifications, store events) reaches such a subscriber only if
 * it may see the key: acl.c decides both (aclUserSeesChannel,
 * aclUserSeesKey). The test costs a subscriber with allkeys one flag test.
 *
 * Scope. PUBLISH reaches this node's subscribers only. Redis Cluster
 * forwards every PUBLISH over its bus to all nodes; there is no bus here
 * (etcd holds the topology and is no message bus), so a subscriber that
 * wants every node's messages -- keyspace notifications and store events
 * are per node anyway -- subscribes on every node. Shard channels behave as
 * in Redis Cluster: SSUBSCRIBE and SPUBLISH are routed to the node owning
 * the channel's slot (MOVED otherwise), where they meet; when the slot
 * moves away, its channels' subscribers get `sunsubscribe` and subscribe
 * again, to be redirected to the new owner.
 */
#include <string.h>
#include <strings.h>

#include "acl.h"
#include "crc.h"
#include "pubsub.h"
#include "server.h"
#include "util.h"
#include "zmalloc.h"

enum { PS_CHANNEL = 0, PS_PATTERN = 1, PS_SHARD = 2, PS_KINDS = 3 };

/* What each kind's confirmations are called. */
static const char *const subscribeName[PS_KINDS] = {"subscribe", "psubscribe", "ssubscribe"};
static const char *const unsubscribeName[PS_KINDS] = {"unsubscribe", "punsubscribe", "sunsubscribe"};

/* A client's subscriptions, one name set per kind (NULL until used). */
typedef struct clientPubsub {
    dict *names[PS_KINDS];
} clientPubsub;

/* The clients subscribed to one name, in the order they subscribed, with
 * holes (NULL) where some left: n slots used, live of them subscribed. A
 * client's index (clientPubsub) holds its slot as the value of the name. */
typedef struct subscriberList {
    client **clients;
    int n, cap, live;
    int pattern_at; /* PS_PATTERN: its entry in `patterns` */
} subscriberList;

/* Every pattern someone subscribes to, for PUBLISH to try in turn; the
 * name is the server index's own key. A pattern that is a literal prefix
 * and a final '*' (__store@0__:*, the router's) is matched by comparing
 * the prefix: it is tried on every message. */
typedef struct patternEntry {
    sds pattern;
    subscriberList *subs;
    int prefix_len; /* -1: a general glob */
} patternEntry;

static int literalPrefixLen(sds p) {
    size_t len = sdslen(p);
    if (len == 0 || p[len - 1] != '*') return -1;
    for (size_t i = 0; i + 1 < len; i++)
        if (p[i] == '*' || p[i] == '?' || p[i] == '[' || p[i] == '\\') return -1;
    return (int)len - 1;
}

static int patternMatches(const patternEntry *e, sds channel) {
    if (e->prefix_len >= 0)
        return sdslen(channel) >= (size_t)e->prefix_len && memcmp(channel, e->pattern, (size_t)e->prefix_len) == 0;
    return stringmatchlen(e->pattern, sdslen(e->pattern), channel, sdslen(channel), 0);
}

/* ---- dict types ---------------------------------------------------------- */

static void nameFree(void *key) { sdsfree(key); }
static void subscriberListFree(void *val) {
    subscriberList *l = val;
    zfree(l->clients);
    zfree(l);
}

static dictType serverNamesType = {dictSdsHash, dictSdsEqual, nameFree, subscriberListFree};
static dictType clientNamesType = {dictSdsHash, dictSdsEqual, nameFree, NULL};

/* name -> subscriberList, per kind; created at the first subscription. */
static dict *subscribers[PS_KINDS];
static patternEntry *patterns;
static int npatterns, patterns_cap;

static dict *serverIndex(int kind) {
    if (subscribers[kind] == NULL) subscribers[kind] = dictCreate(&serverNamesType);
    return subscribers[kind];
}

static unsigned long sizeOf(dict *d) { return d ? (unsigned long)dictSize(d) : 0; }

/* ---- counts -------------------------------------------------------------- */

static unsigned long clientNames(client *c, int kind) {
    return c->pubsub ? sizeOf(c->pubsub->names[kind]) : 0;
}

/* The count a confirmation carries: channels and patterns together, shard
 * channels on their own (as Redis 7.0 counts them). */
static long long confirmCount(client *c, int kind) {
    if (kind == PS_SHARD) return (long long)clientNames(c, PS_SHARD);
    return (long long)(clientNames(c, PS_CHANNEL) + clientNames(c, PS_PATTERN));
}

static unsigned long clientTotal(client *c) {
    return clientNames(c, PS_CHANNEL) + clientNames(c, PS_PATTERN) + clientNames(c, PS_SHARD);
}

void pubsubClientCounts(client *c, long long *sub, long long *psub, long long *ssub) {
    *sub = (long long)clientNames(c, PS_CHANNEL);
    *psub = (long long)clientNames(c, PS_PATTERN);
    *ssub = (long long)clientNames(c, PS_SHARD);
}

unsigned long pubsubNumChannels(void) { return sizeOf(subscribers[PS_CHANNEL]); }
unsigned long pubsubNumPatterns(void) { return sizeOf(subscribers[PS_PATTERN]); }
unsigned long pubsubNumShardChannels(void) { return sizeOf(subscribers[PS_SHARD]); }

int pubsubHasSubscribers(void) {
    return sizeOf(subscribers[PS_CHANNEL]) != 0 || sizeOf(subscribers[PS_PATTERN]) != 0;
}

/* ---- subscribing --------------------------------------------------------- */

/* [subscribe|unsubscribe|..., name or nil, count]: a push under RESP3. */
static void addReplySubscription(client *c, const char *what, sds name, long long count) {
    addReplyPushLen(c, 3);
    addReplyBulkCString(c, what);
    if (name) addReplyBulk(c, name, sdslen(name));
    else addReplyNull(c);
    addReplyLongLong(c, count);
}

static subscriberList *indexAdd(int kind, sds name) {
    dict *index = serverIndex(kind);
    dictEntry *de = dictFind(index, name);
    if (de) return de->val;
    subscriberList *l = zcalloc(sizeof(*l));
    sds key = sdsdup(name);
    dictAdd(index, key, l);
    if (kind == PS_PATTERN) {
        if (npatterns == patterns_cap) {
            patterns_cap = patterns_cap ? patterns_cap * 2 : 8;
            patterns = zrealloc(patterns, sizeof(patternEntry) * (size_t)patterns_cap);
        }
        patterns[npatterns].pattern = key;
        patterns[npatterns].prefix_len = literalPrefixLen(key);
        patterns[npatterns].subs = l;
        l->pattern_at = npatterns++;
    }
    return l;
}

/* The slot c now holds in l. */
static int listAppend(subscriberList *l, client *c) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->clients = zrealloc(l->clients, sizeof(client *) * (size_t)l->cap);
    }
    l->clients[l->n] = c;
    l->live++;
    serverVisit(VISITS_PUBSUB, 1);
    return l->n++;
}

static void setSlot(client *c, int kind, sds name, int slot) {
    dictEntry *de = dictFind(c->pubsub->names[kind], name);
    serverAssert(de != NULL);
    de->val = (void *)(intptr_t)slot;
}

/* c leaves its slot. Order is kept: messages reach a channel's subscribers
 * in the order they subscribed, as in Redis; the compaction that follows
 * enough holes moves each subscriber down once, so it is paid for by the
 * departures that made the holes. */
static void listRemove(subscriberList *l, int kind, sds name, client *c, int slot) {
    serverAssert(slot >= 0 && slot < l->n && l->clients[slot] == c);
    l->clients[slot] = NULL;
    l->live--;
    serverVisit(VISITS_PUBSUB, 1);
    /* Holes at the end are simply dropped (each was paid by its leaving). */
    while (l->n > 0 && l->clients[l->n - 1] == NULL) l->n--;
    if (l->live == 0) return;
    if (l->n - l->live <= l->live) return;
    int to = 0;
    for (int i = 0; i < l->n; i++) {
        client *s = l->clients[i];
        if (s == NULL) continue;
        if (i != to) setSlot(s, kind, name, to);
        l->clients[to++] = s;
    }
    serverVisit(VISITS_PUBSUB, l->n);
    l->n = to;
}

/* The last subscriber left: the name goes (and its pattern entry, whose
 * place the last pattern takes). */
static void indexDrop(int kind, sds name, subscriberList *l) {
    if (kind == PS_PATTERN) {
        int at = l->pattern_at;
        serverAssert(at >= 0 && at < npatterns && patterns[at].subs == l);
        if (at != npatterns - 1) {
            patterns[at] = patterns[npatterns - 1];
            patterns[at].subs->pattern_at = at;
        }
        npatterns--;
        serverVisit(VISITS_PUBSUB, 1);
    }
    dictDelete(subscribers[kind], name);
}

static void subscribe(client *c, int kind, sds name) {
    if (c->pubsub == NULL) c->pubsub = zcalloc(sizeof(clientPubsub));
    dict **mine = &c->pubsub->names[kind];
    if (*mine == NULL) *mine = dictCreate(&clientNamesType);
    sds copy = sdsdup(name);
    if (dictAdd(*mine, copy, NULL) == DICT_OK) {
        setSlot(c, kind, name, listAppend(indexAdd(kind, name), c));
    } else {
        sdsfree(copy); /* already subscribed: confirmed again, as Redis does */
    }
    c->flags |= CLIENT_PUBSUB;
    addReplySubscription(c, subscribeName[kind], name, confirmCount(c, kind));
}

/* name may be the client's own copy (unsubscribing from everything walks
 * that set): it is used before it is deleted, never after. */
static void unsubscribe(client *c, int kind, sds name, int notify) {
    dict *mine = c->pubsub ? c->pubsub->names[kind] : NULL;
    dictEntry *me = mine ? dictFind(mine, name) : NULL;
    int was = me != NULL;
    if (was) {
        dictEntry *de = dictFind(subscribers[kind], name);
        serverAssert(de != NULL);
        subscriberList *l = de->val;
        listRemove(l, kind, name, c, (int)(intptr_t)me->val);
        if (l->live == 0) indexDrop(kind, name, l);
    }
    if (notify) addReplySubscription(c, unsubscribeName[kind], name, confirmCount(c, kind) - was);
    if (was) dictDelete(mine, name);
}

static void unsubscribeAllOfKind(client *c, int kind, int notify) {
    dict *mine = c->pubsub ? c->pubsub->names[kind] : NULL;
    if (mine && dictSize(mine)) {
        dictIterator *it = dictGetSafeIterator(mine);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) unsubscribe(c, kind, de->key, notify);
        dictReleaseIterator(it);
    } else if (notify) {
        /* Nothing to leave: one confirmation with a nil name, as Redis. */
        addReplySubscription(c, unsubscribeName[kind], NULL, confirmCount(c, kind));
    }
}

/* A client left with no subscription is an ordinary client again: its
 * RESP2 commands are unrestricted and its index is given back. */
static void releaseIfUnsubscribed(client *c) {
    if (c->pubsub == NULL || clientTotal(c) != 0) return;
    for (int k = 0; k < PS_KINDS; k++)
        if (c->pubsub->names[k]) dictRelease(c->pubsub->names[k]);
    zfree(c->pubsub);
    c->pubsub = NULL;
    c->flags &= ~CLIENT_PUBSUB;
}

void pubsubUnsubscribeAll(client *c, int notify) {
    if (c->pubsub == NULL) return;
    for (int k = 0; k < PS_KINDS; k++) unsubscribeAllOfKind(c, k, notify);
    releaseIfUnsubscribed(c);
}

/* Each subscription is a name in the client's index and a slot in the
 * server's, held until the connection leaves it, and a pattern is tried by
 * every PUBLISH: client-max-subscriptions bounds what one connection holds
 * (channels, patterns and shard channels together), so it cannot grow the
 * server or slow every PUBLISH without end (found probing: 200k channels
 * held 120 MB, 100k patterns made each PUBLISH 1.6 ms). A command that
 * would pass it subscribes to nothing; names already subscribed do not
 * count again. */
static int subscribeOverLimit(client *c, int kind) {
    if (server.client_max_subscriptions == 0) return 0;
    dict *mine = c->pubsub ? c->pubsub->names[kind] : NULL;
    long long n = (long long)clientTotal(c);
    for (int j = 1; j < c->argc && n <= server.client_max_subscriptions; j++)
        if (mine == NULL || dictFind(mine, c->argv[j]) == NULL) n++;
    return n > server.client_max_subscriptions;
}

static void subscribeGeneric(client *c, int kind) {
    if (subscribeOverLimit(c, kind)) {
        server.stat_client_state_limited++;
        addReplyErrorFormat(c, "-LIMIT this connection would have more than client-max-subscriptions (%lld) "
                               "channels and patterns: unsubscribe from some first",
                            server.client_max_subscriptions);
        return;
    }
    for (int j = 1; j < c->argc; j++) subscribe(c, kind, c->argv[j]);
}

static void unsubscribeGeneric(client *c, int kind) {
    if (c->argc == 1) unsubscribeAllOfKind(c, kind, 1);
    else
        for (int j = 1; j < c->argc; j++) unsubscribe(c, kind, c->argv[j], 1);
    releaseIfUnsubscribed(c);
}

void subscribeCommand(client *c) { subscribeGeneric(c, PS_CHANNEL); }
void psubscribeCommand(client *c) { subscribeGeneric(c, PS_PATTERN); }
void ssubscribeCommand(client *c) { subscribeGeneric(c, PS_SHARD); }
void unsubscribeCommand(client *c) { unsubscribeGeneric(c, PS_CHANNEL); }
void punsubscribeCommand(client *c) { unsubscribeGeneric(c, PS_PATTERN); }
void sunsubscribeCommand(client *c) { unsubscribeGeneric(c, PS_SHARD); }

/* ---- publishing ---------------------------------------------------------- */

/* The frame being sent, kept from one PUBLISH to the next so a message
 * costs no allocation once it has grown to fit. Its head (the array and
 * the bulks before the payload) depends only on the kind, the pattern
 * and the channel, which for store events repeat from one message to the
 * next: the head of the last frame is kept and reused when they match
 * (frameHead), so a store event's frame costs the payload's length and
 * bytes, not five encodings. */
static sds frame;
static size_t frame_head_len;        /* bytes of frame that are the head */
static int frame_kind = -1;          /* what the kept head was built for */
static sds frame_pattern, frame_channel;

/* Up to this size a payload is copied into the frame, so that a receiver
 * gets each message as one append to its buffer; a larger one is copied
 * to each receiver from where it is, without the extra copy. */
#define FRAME_INLINE_MAX 1024

static void frameBulkHeader(size_t len) {
    char hdr[32];
    hdr[0] = '$';
    int n = ll2string(hdr + 1, sizeof(hdr) - 3, (long long)len) + 1;
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    frame = sdscatlen(frame, hdr, (size_t)n);
}

static void frameBulk(const char *p, size_t len) {
    frameBulkHeader(len);
    frame = sdscatlen(frame, p, len);
    frame = sdscatlen(frame, "\r\n", 2);
}

static int sameName(sds kept, sds name) {
    return name == NULL ? kept == NULL : kept && sdslen(kept) == sdslen(name) && !memcmp(kept, name, sdslen(name));
}

static sds keepName(sds kept, sds name) {
    if (name == NULL) {
        sdsfree(kept);
        return NULL;
    }
    if (kept == NULL) kept = sdsempty();
    sdsclear(kept);
    return sdscatlen(kept, name, sdslen(name));
}

/* [message, channel], [smessage, ...] or [pmessage, pattern, channel], as
 * a RESP2 array head (a RESP3 push differs only in its first byte): left
 * in frame[0..frame_head_len), rebuilt only when it differs from the last. */
static void frameHead(int kind, sds pattern, sds channel) {
    if (frame && kind == frame_kind && sameName(frame_pattern, pattern) && sameName(frame_channel, channel)) {
        sdssetlen(frame, frame_head_len);
        return;
    }
    if (frame == NULL) frame = sdsempty();
    sdsclear(frame);
    if (pattern) {
        frame = sdscatlen(frame, "*4\r\n$8\r\npmessage\r\n", 18);
        frameBulk(pattern, sdslen(pattern));
    } else if (kind == PS_SHARD) {
        frame = sdscatlen(frame, "*3\r\n$8\r\nsmessage\r\n", 18);
    } else {
        frame = sdscatlen(frame, "*3\r\n$7\r\nmessage\r\n", 17);
    }
    frameBulk(channel, sdslen(channel));
    frame_head_len = sdslen(frame);
    frame_kind = kind;
    frame_pattern = keepName(frame_pattern, pattern);
    frame_channel = keepName(frame_channel, channel);
}

/* The head, then the payload's bulk header, and a small payload itself
 * with its CRLF: see FRAME_INLINE_MAX. */
static void frameBuild(int kind, sds pattern, sds channel, const char *msg, size_t len) {
    frameHead(kind, pattern, channel);
    frameBulkHeader(len);
    if (len <= FRAME_INLINE_MAX) {
        frame = sdscatlen(frame, msg, len);
        frame = sdscatlen(frame, "\r\n", 2);
    }
}

/* Queuing a message never frees a client (one over its limit is only
 * marked for closing, and gets nothing more), so the list cannot change
 * while it is walked. */
/* Whom a message goes to: everyone, or (a message said differently to
 * tenants, pubsubPublishTenantMessage) only the users with allkeys, or
 * only the tenants. */
enum { TO_ALL, TO_SERVER_USERS, TO_TENANTS };

static long long deliver(subscriberList *l, const char *msg, size_t len, sds key, int to) {
    long long n = 0;
    for (int i = 0; i < l->n; i++) {
        client *c = l->clients[i];
        if (c == NULL) continue; /* a hole a leaving subscriber left */
        int restricted = aclUserRestricted(c->user);
        if ((to == TO_SERVER_USERS && restricted) || (to == TO_TENANTS && !restricted)) continue;
        /* An event about a key goes only to those who may see the key. */
        if (key && restricted && !aclUserSeesKey(c->user, key, sdslen(key))) continue;
        n++;
        if (c->resp == 2) {
            addReplyProto(c, frame, sdslen(frame));
        } else {
            addReplyProto(c, ">", 1);
            addReplyProto(c, frame + 1, sdslen(frame) - 1);
        }
        if (len > FRAME_INLINE_MAX) {
            addReplyProto(c, msg, len);
            addReplyProto(c, "\r\n", 2);
        }
    }
    return n;
}

/* A huge pattern or channel name must not stay allocated after it was
 * sent (nor its copy kept to compare with). */
static void frameTrim(void) {
    if (frame && sdsalloc(frame) > 64 * 1024) {
        sdsfree(frame);
        frame = NULL;
        frame_kind = -1;
        frame_pattern = keepName(frame_pattern, NULL);
        frame_channel = keepName(frame_channel, NULL);
    }
}

static long long publishTo(sds channel, const char *msg, size_t len, sds key, int to) {
    long long receivers = 0;
    dictEntry *de = subscribers[PS_CHANNEL] ? dictFind(subscribers[PS_CHANNEL], channel) : NULL;
    if (de) {
        frameBuild(PS_CHANNEL, NULL, channel, msg, len);
        receivers += deliver(de->val, msg, len, key, to);
    }
    for (int i = 0; i < npatterns; i++) {
        if (!patternMatches(&patterns[i], channel)) continue;
        frameBuild(PS_PATTERN, patterns[i].pattern, channel, msg, len);
        receivers += deliver(patterns[i].subs, msg, len, key, to);
    }
    frameTrim();
    return receivers;
}

long long pubsubPublishKeyMessage(sds channel, const char *msg, size_t len, sds key) {
    return publishTo(channel, msg, len, key, TO_ALL);
}

long long pubsubPublishTenantMessage(sds channel, const char *msg, size_t len, const char *tmsg, size_t tlen) {
    return publishTo(channel, msg, len, NULL, TO_SERVER_USERS) + publishTo(channel, tmsg, tlen, NULL, TO_TENANTS);
}

long long pubsubPublishMessage(sds channel, const char *msg, size_t len) {
    return pubsubPublishKeyMessage(channel, msg, len, NULL);
}

void publishCommand(client *c) {
    addReplyLongLong(c, pubsubPublishMessage(c->argv[1], c->argv[2], sdslen(c->argv[2])));
}

void spublishCommand(client *c) {
    dictEntry *de = subscribers[PS_SHARD] ? dictFind(subscribers[PS_SHARD], c->argv[1]) : NULL;
    long long n = 0;
    if (de) {
        frameBuild(PS_SHARD, NULL, c->argv[1], c->argv[2], sdslen(c->argv[2]));
        n = deliver(de->val, c->argv[2], sdslen(c->argv[2]), NULL, TO_ALL);
        frameTrim();
    }
    addReplyLongLong(c, n);
}

/* The slots set in lost (a bitmap by slot) left this node: so did the shard
 * channels hashing there. Their subscribers are told, one sunsubscribe
 * each, as Redis 7.0 tells them. */
void pubsubShardSlotsLost(const unsigned char *lost) {
    if (!sizeOf(subscribers[PS_SHARD])) return;
    dictIterator *it = dictGetSafeIterator(subscribers[PS_SHARD]);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        sds name = de->key;
        unsigned slot = keyHashSlot(name, sdslen(name));
        if (!(lost[slot >> 3] & (1 << (slot & 7)))) continue;
        /* The last one out deletes the entry (and name): work on a copy. */
        sds copy = sdsdup(name);
        subscriberList *l = de->val;
        /* Leaving moves the others (and the last one frees l): who leaves
         * is taken first. */
        int nleave = 0;
        client **leave = zmalloc(sizeof(client *) * (size_t)l->live);
        for (int i = l->n; i > 0; i--)
            if (l->clients[i - 1]) leave[nleave++] = l->clients[i - 1];
        for (int i = 0; i < nleave; i++) {
            unsubscribe(leave[i], PS_SHARD, copy, 1);
            releaseIfUnsubscribed(leave[i]);
        }
        zfree(leave);
        sdsfree(copy);
    }
    dictReleaseIterator(it);
}

/* ---- PUBSUB -------------------------------------------------------------- */

/* How many of l's subscribers (a channel's or a pattern's, named name) c
 * sees: all of them, but of the server's event channels a tenant sees its
 * own user's only (acl.c, aclUserSeesSubscriber). */
static long long seenSubscribers(client *c, sds name, const subscriberList *l) {
    if (!aclUserRestricted(c->user) || !aclServerEventChannel(name, sdslen(name))) return l->live;
    long long n = 0;
    for (int i = 0; i < l->n; i++)
        n += l->clients[i] != NULL && aclUserSeesSubscriber(c->user, name, sdslen(name), l->clients[i]);
    return n;
}

/* A tenant sees only the names it could subscribe to (aclUserSeesChannel):
 * PUBSUB would otherwise list every tenant's channels, and a keyspace
 * channel every key someone watches; and a channel only while someone it
 * sees listens (seenSubscribers). */
static void addReplyNames(client *c, int kind, sds pattern) {
    dict *index = subscribers[kind];
    long long n = 0;
    sds *names = NULL;
    if (sizeOf(index)) {
        names = zmalloc(sizeof(sds) * dictSize(index));
        dictIterator *it = dictGetSafeIterator(index);
        dictEntry *de;
        while ((de = dictNext(it)) != NULL) {
            sds name = de->key;
            if ((!pattern || stringmatchlen(pattern, sdslen(pattern), name, sdslen(name), 0)) &&
                aclUserSeesChannel(c->user, name, sdslen(name)) && seenSubscribers(c, name, de->val) > 0)
                names[n++] = name;
        }
        dictReleaseIterator(it);
    }
    addReplyArrayLen(c, n);
    for (long long i = 0; i < n; i++) addReplyBulk(c, names[i], sdslen(names[i]));
    zfree(names);
}

/* An array of name, count pairs even under RESP3, as Redis 7.0 replies. */
static void addReplyNumsub(client *c, int kind) {
    addReplyArrayLen(c, (long long)(c->argc - 2) * 2);
    for (int j = 2; j < c->argc; j++) {
        dictEntry *de = subscribers[kind] && aclUserSeesChannel(c->user, c->argv[j], sdslen(c->argv[j]))
                            ? dictFind(subscribers[kind], c->argv[j])
                            : NULL;
        addReplyBulk(c, c->argv[j], sdslen(c->argv[j]));
        addReplyLongLong(c, de ? seenSubscribers(c, de->key, de->val) : 0);
    }
}

void pubsubCommand(client *c) {
    const char *sub = c->argv[1];
    if (c->argc == 2 && !strcasecmp(sub, "help")) {
        static const char *help[] = {
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "channels") && (c->argc == 2 || c->argc == 3)) {
        addReplyNames(c, PS_CHANNEL, c->argc == 3 ? c->argv[2] : NULL);
    } else if (!strcasecmp(sub, "shardchannels") && (c->argc == 2 || c->argc == 3)) {
        addReplyNames(c, PS_SHARD, c->argc == 3 ? c->argv[2] : NULL);
    } else if (!strcasecmp(sub, "numsub") && c->argc >= 2) {
        addReplyNumsub(c, PS_CHANNEL);
    } else if (!strcasecmp(sub, "shardnumsub") && c->argc >= 2) {
        addReplyNumsub(c, PS_SHARD);
    } else if (!strcasecmp(sub, "numpat") && c->argc == 2) {
        /* Distinct patterns, whatever the number of clients per pattern;
         * a tenant counts those it could subscribe to itself. */
        long long n = (long long)pubsubNumPatterns();
        if (aclUserRestricted(c->user)) {
            n = 0;
            for (int i = 0; i < npatterns; i++)
                n += aclUserSeesChannel(c->user, patterns[i].pattern, sdslen(patterns[i].pattern)) &&
                     seenSubscribers(c, patterns[i].pattern, patterns[i].subs) > 0;
        }
        addReplyLongLong(c, n);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}

/* ---- the RESP2 subscribed context ----------------------------------------- */

sds pubsubRefusal(client *c) {
    commandProc *p = c->cmd->proc;
    if (p == pingCommand || p == subscribeCommand || p == ssubscribeCommand || p == unsubscribeCommand ||
        p == sunsubscribeCommand || p == psubscribeCommand || p == punsubscribeCommand || p == quitCommand ||
        p == resetCommand)
        return NULL;
    return sdscatprintf(sdsempty(), "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                                    "QUIT / RESET are allowed in this context", c->cmd->fullname);
}
