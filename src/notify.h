/* notify.h -- keyspace notifications and the store's own events (notify.c).
 *
 * A write command says what it did with one call, after the change:
 *
 *     notifyKeyspaceEvent(NOTIFY_GENERIC, "del", key);
 *
 * The call is an inline test of one bit when nobody asked for that class
 * (notify-keyspace-events "" by default), so it costs one branch per write;
 * the channel names are built only when the class is on. notify.c lists the
 * event name Redis uses for each command (use the same names for new ones).
 *
 * The store's events (class S) are not called from commands: store.c emits
 * them where the keyspace itself changes, see notifyStoreEvent.
 */
#ifndef NOTIFY_H
#define NOTIFY_H

#include "sds.h"
#include "server.h"

/* Classes: bits of notify-keyspace-events, with Redis's letters. */
#define NOTIFY_KEYSPACE (1 << 0) /* K: __keyspace@0__:<key>, message <event> */
#define NOTIFY_KEYEVENT (1 << 1) /* E: __keyevent@0__:<event>, message <key> */
#define NOTIFY_GENERIC (1 << 2)  /* g: del, expire, rename, ... */
#define NOTIFY_STRING (1 << 3)   /* $ */
#define NOTIFY_LIST (1 << 4)     /* l: no lists here; accepted for redis.conf files */
#define NOTIFY_SET (1 << 5)      /* s: (none) */
#define NOTIFY_HASH (1 << 6)     /* h: (none) */
#define NOTIFY_ZSET (1 << 7)     /* z: (none) */
#define NOTIFY_EXPIRED (1 << 8)  /* x */
#define NOTIFY_EVICTED (1 << 9)  /* e */
#define NOTIFY_STREAM (1 << 10)  /* t: (none) */
#define NOTIFY_KEY_MISS (1 << 11) /* m: not part of A, as in Redis */
#define NOTIFY_MODULE (1 << 12)  /* d: (none) */
#define NOTIFY_NEW (1 << 13)     /* n: not part of A, as in Redis */
#define NOTIFY_STORE (1 << 14)   /* S: ours, __store@0__:<event>; not part of A */
#define NOTIFY_ALL                                                                                              \
    (NOTIFY_GENERIC | NOTIFY_STRING | NOTIFY_LIST | NOTIFY_SET | NOTIFY_HASH | NOTIFY_ZSET | NOTIFY_EXPIRED |     \
     NOTIFY_EVICTED | NOTIFY_STREAM | NOTIFY_MODULE) /* A */

/* Parses a notify-keyspace-events value; -1 for a letter that is none of
 * "Ag$lshzxeKEtmdnS". */
int notifyFlagsFromString(const char *s);
/* The value as CONFIG GET shows it, in Redis's canonical order. */
sds notifyFlagsToString(int flags);
/* Sets server.notify_keyspace_events and the mask the inline tests read. */
void notifySetFlags(int flags);

void notifyKeyspaceEventPublish(int type, const char *event, sds key);
void notifyStoreEventPublish(const char *event, sds key, const struct storeObj *o);
void notifyStoreFlushPublish(unsigned long keys);
void notifyStoreNodeEvent(const char *event, const char *what); /* failover, role (replication_failover.c) */

/* server.notify_mask holds a class's bit only when its events would reach a
 * channel: a Redis class needs K or E as well (g alone publishes nothing,
 * as in Redis), S needs nothing else. */
static inline void notifyKeyspaceEvent(int type, const char *event, sds key) {
    if (server.notify_mask & type) notifyKeyspaceEventPublish(type, event, key);
}

/* Store events: event is put, remove, expired, evicted or lost; o is the
 * object the key holds (put) or held (the others), still intact. */
static inline void notifyStoreEvent(const char *event, sds key, const struct storeObj *o) {
    if (server.notify_mask & NOTIFY_STORE) notifyStoreEventPublish(event, key, o);
}

#endif
