/* pubsub.c -- Pub/Sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs,
 * PUBLISH, SPUBLISH and PUBSUB, with Redis 7.0's replies byte for byte.
 *
 * Three kinds of subscription share one implementation: channels (exact
 * names), patterns (glob, matched against every published channel) and
 * shard channels (exact names, a namespace of their own, keyed by slot in
 * cluster mode). Each kind has two indexes that always agree:
 *
 *   server side   name -> the set of clients subscribed to it, so PUBLISH
 *                 finds the receivers of a channel with one lookup;
 *   client side   the names the client subscribes to, so UNSUBSCRIBE
 *                 without arguments, RESET and a disconnect can drop every
 *                 subscription of the client without scanning the server.
 *
 * Both are dicts, so subscribing and unsubscribing are O(1) whatever the
 * number of subscribers (a channel with 10k clients costs nothing to leave).
 * A name leaves the server index with its last subscriber, so PUBSUB
 * CHANNELS and NUMPAT count only names someone listens to. A client that
 * never subscribed carries one NULL pointer; its index is allocated at the
 * first subscription and given back with the last.
 *
 * Messages are queued like any reply (networking.c): RESP2 arrays, or RESP3
 * push frames ('>'), which a RESP3 client can receive between the replies
 * of its ordinary commands. Under RESP2 a subscribed connection can only
 * (un)subscribe, PING, QUIT and RESET, since a message and a reply could
 * not be told apart; processCommand asks pubsubRejectCommand. A subscriber
 * that does not read is bounded by `client-output-buffer-limit pubsub`
 * (32mb hard, 8mb for 60 s by default): past it the connection is closed,
 * and the server never holds more than that for it.
 *
 * Scope. PUBLISH reaches this node's subscribers only. Redis Cluster
 * forwards every PUBLISH over its bus to all nodes; there is no bus here
 * (etcd holds the topology and is no message bus), so a subscriber that
 * wants every node's messages -- keyspace notifications and store events
 * are per node anyway -- subscribes on every node. Shard channels behave as
 * in Redis Cluster: SSUBSCRIBE and SPUBLISH are routed to the node owning
 * the channel's slot (MOVED otherwise), where they meet.
 */
#include <string.h>
#include <strings.h>

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

/* ---- dict types ---------------------------------------------------------- */

static uint64_t nameHash(const void *key) { return dictGenHashFunction(key, sdslen((sds)key)); }
static int nameCompare(const void *a, const void *b) {
    return sdslen((sds)a) == sdslen((sds)b) && memcmp(a, b, sdslen((sds)a)) == 0;
}
static void nameFree(void *key) { sdsfree(key); }
static void clientSetFree(void *val) { dictRelease(val); }
/* Clients are hashed by address: a set of pointers. */
static uint64_t clientHash(const void *key) { return dictGenHashFunction(&key, sizeof(key)); }
static int clientCompare(const void *a, const void *b) { return a == b; }

static dictType serverNamesType = {nameHash, nameCompare, nameFree, clientSetFree};
static dictType clientSetType = {clientHash, clientCompare, NULL, NULL};
static dictType clientNamesType = {nameHash, nameCompare, nameFree, NULL};

/* name -> set of clients, per kind; created at the first subscription. */
static dict *subscribers[PS_KINDS];

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

static void subscribe(client *c, int kind, sds name) {
    if (c->pubsub == NULL) c->pubsub = zcalloc(sizeof(clientPubsub));
    dict **mine = &c->pubsub->names[kind];
    if (*mine == NULL) *mine = dictCreate(&clientNamesType);
    sds copy = sdsdup(name);
    if (dictAdd(*mine, copy, NULL) == DICT_OK) {
        dict *index = serverIndex(kind);
        dictEntry *de = dictFind(index, name);
        dict *set;
        if (de) {
            set = de->val;
        } else {
            set = dictCreate(&clientSetType);
            dictAdd(index, sdsdup(name), set);
        }
        dictAdd(set, c, NULL);
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
    int was = mine && dictFind(mine, name) != NULL;
    if (was) {
        dict *index = subscribers[kind];
        dictEntry *de = dictFind(index, name);
        serverAssert(de != NULL);
        dict *set = de->val;
        dictDelete(set, c);
        if (dictSize(set) == 0) dictDelete(index, name); /* the last one: the name goes */
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

static void subscribeGeneric(client *c, int kind) {
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

/* [message, channel, payload] or [pmessage, pattern, channel, payload]. The
 * fixed parts are written as protocol once rather than formatted each time:
 * a store event with one subscriber is the common case to keep cheap. */
static void addReplyMessage(client *c, int kind, sds pattern, sds channel, const char *msg, size_t len) {
    if (pattern) {
        addReplyPushLen(c, 4);
        addReplyProto(c, "$8\r\npmessage\r\n", 14);
        addReplyBulk(c, pattern, sdslen(pattern));
    } else {
        addReplyPushLen(c, 3);
        if (kind == PS_SHARD) addReplyProto(c, "$8\r\nsmessage\r\n", 14);
        else addReplyProto(c, "$7\r\nmessage\r\n", 13);
    }
    addReplyBulk(c, channel, sdslen(channel));
    addReplyBulk(c, msg, len);
}

/* Queuing a message never frees a client (one over its limit is only
 * marked for closing, and gets nothing more), so the sets cannot change
 * while they are walked. */
static long long deliver(dict *set, int kind, sds pattern, sds channel, const char *msg, size_t len) {
    long long n = 0;
    dictIterator *it = dictGetSafeIterator(set);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        addReplyMessage(de->key, kind, pattern, channel, msg, len);
        n++;
    }
    dictReleaseIterator(it);
    return n;
}

long long pubsubPublishMessage(sds channel, const char *msg, size_t len) {
    long long receivers = 0;
    dictEntry *de = subscribers[PS_CHANNEL] ? dictFind(subscribers[PS_CHANNEL], channel) : NULL;
    if (de) receivers += deliver(de->val, PS_CHANNEL, NULL, channel, msg, len);
    if (sizeOf(subscribers[PS_PATTERN])) {
        dictIterator *it = dictGetSafeIterator(subscribers[PS_PATTERN]);
        while ((de = dictNext(it)) != NULL) {
            sds pattern = de->key;
            if (stringmatchlen(pattern, sdslen(pattern), channel, sdslen(channel), 0))
                receivers += deliver(de->val, PS_PATTERN, pattern, channel, msg, len);
        }
        dictReleaseIterator(it);
    }
    return receivers;
}

void publishCommand(client *c) {
    addReplyLongLong(c, pubsubPublishMessage(c->argv[1], c->argv[2], sdslen(c->argv[2])));
}

void spublishCommand(client *c) {
    dictEntry *de = subscribers[PS_SHARD] ? dictFind(subscribers[PS_SHARD], c->argv[1]) : NULL;
    long long n = de ? deliver(de->val, PS_SHARD, NULL, c->argv[1], c->argv[2], sdslen(c->argv[2])) : 0;
    addReplyLongLong(c, n);
}

/* ---- PUBSUB -------------------------------------------------------------- */

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
            if (!pattern || stringmatchlen(pattern, sdslen(pattern), name, sdslen(name), 0)) names[n++] = name;
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
        dictEntry *de = subscribers[kind] ? dictFind(subscribers[kind], c->argv[j]) : NULL;
        addReplyBulk(c, c->argv[j], sdslen(c->argv[j]));
        addReplyLongLong(c, de ? (long long)dictSize((dict *)de->val) : 0);
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
        /* Distinct patterns, whatever the number of clients per pattern. */
        addReplyLongLong(c, (long long)pubsubNumPatterns());
    } else {
        addReplySubcommandSyntaxError(c);
    }
}

/* ---- the RESP2 subscribed context ----------------------------------------- */

int pubsubRejectCommand(client *c) {
    commandProc *p = c->cmd->proc;
    if (p == pingCommand || p == subscribeCommand || p == ssubscribeCommand || p == unsubscribeCommand ||
        p == sunsubscribeCommand || p == psubscribeCommand || p == punsubscribeCommand || p == quitCommand ||
        p == resetCommand)
        return 0;
    c->cmd->rejected_calls++;
    addReplyErrorFormat(c, "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
                           "are allowed in this context", c->cmd->fullname);
    return 1;
}
