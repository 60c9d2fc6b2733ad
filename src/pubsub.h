/* pubsub.h -- Pub/Sub: channels, patterns, shard channels (pubsub.c). */
#ifndef PUBSUB_H
#define PUBSUB_H

#include <stddef.h>

#include "sds.h"

struct client;

/* Delivers message to the channel's subscribers and to the clients whose
 * patterns match it; returns how many received it (PUBLISH's reply). */
long long pubsubPublishMessage(sds channel, const char *msg, size_t len);
/* The same for a message about key (keyspace notifications, store events):
 * a subscriber restricted by key patterns gets it only if it may see the
 * key (aclUserSeesKey), and is not counted otherwise. */
long long pubsubPublishKeyMessage(sds channel, const char *msg, size_t len, sds key);
/* A message that says something about the whole server (the flush event's
 * key count): users with allkeys get msg, tenants tmsg (acl.c, "what a
 * tenant may see"). The number of receivers. */
long long pubsubPublishTenantMessage(sds channel, const char *msg, size_t len, const char *tmsg, size_t tlen);
/* 0 when no client subscribes to any channel or pattern: publishing would
 * reach nobody, so a notification need not even be built. */
int pubsubHasSubscribers(void);

/* Drops every subscription of c (RESET, disconnect). notify: send the
 * (p|s)unsubscribe confirmations, as UNSUBSCRIBE without arguments does. */
void pubsubUnsubscribeAll(struct client *c, int notify);
/* CLIENT LIST's sub=, psub=, ssub=. */
void pubsubClientCounts(struct client *c, long long *sub, long long *psub, long long *ssub);
/* RESP2 subscribed mode: the error (the caller frees it) when c's current
 * command is not one a subscribed connection may run, else NULL. */
sds pubsubRefusal(struct client *c);

/* Cluster mode: the slots set in the bitmap lost left this node. */
void pubsubShardSlotsLost(const unsigned char *lost);

/* INFO stats. */
unsigned long pubsubNumChannels(void);
unsigned long pubsubNumPatterns(void);
unsigned long pubsubNumShardChannels(void);

#endif
