/* multi.h -- MULTI/EXEC transactions and WATCH (multi.c).
 *
 * The store layer calls the two signal functions on every change to the
 * keyspace; they cost one load and a branch while nobody WATCHes.
 */
#ifndef MULTI_H
#define MULTI_H

#include "aof.h"
#include "detached.h"
#include "replication.h"
#include "server.h"

void multiInit(void);

/* processCommand's side: does this command, sent after MULTI, run now
 * (EXEC, DISCARD, MULTI, WATCH, QUIT, RESET) rather than being queued? */
int multiRunsNow(const serverCommand *cmd);
void queueMultiCommand(client *c);     /* takes c's arguments over */
void flagTransaction(client *c);       /* a refused command: EXEC will say EXECABORT */
void execCommandAbort(client *c, const char *err); /* EXEC itself refused */
void discardTransaction(client *c);    /* drops the queue, the flags and the WATCHes */
void unwatchAllKeys(client *c);

/* Key changes (store.c). A key was written, deleted (by a command, expiry,
 * eviction, a segment going) or had its TTL changed: WATCHes on it fail. */
void touchWatchedKey(sds key);
/* Every key is about to go (FLUSHALL): WATCHes on keys that exist fail. */
void touchAllWatchedKeys(void);

/* Also where the log (aof.c) learns what changed: one place for both, so a
 * change WATCH sees is a change the log keeps. */
static inline void signalModifiedKey(sds key) {
    if (server.watching) touchWatchedKey(key);
    if (aofOn) aofKeyChanged(key);
    if (detachedEntries) detachedKeyChanged(key); /* a newer version: the held one never comes back */
    if (replOn) replKeyChanged(key);
}
static inline void signalFlushedDb(void) {
    if (server.watching) touchAllWatchedKeys();
    if (aofOn) aofFlushedAll();
    if (detachedEntries) detachedFlushAll();
    if (replOn) replFlushedAll();
}

#endif
