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
/* Would queueing c's command take the queue past client-query-buffer-limit?
 * If so the queue is freed at once (the caller refuses the command, which
 * dooms the transaction). */
int multiQueueOverLimit(client *c);
void flagTransaction(client *c);       /* a refused command: EXEC will say EXECABORT */
void execCommandAbort(client *c, const char *err); /* EXEC itself refused */
void discardTransaction(client *c);    /* drops the queue, the flags and the WATCHes */
void unwatchAllKeys(client *c);

/* Key changes (store.c). A key was written, deleted (by a command, expiry,
 * eviction, a segment going) or had its TTL changed: WATCHes on it fail. */
void touchWatchedKey(sds key);
/* Every key is about to go (FLUSHALL): WATCHes on keys that exist fail. */
void touchAllWatchedKeys(void);

/* The keys whose state changed in this loop iteration, once each in a
 * row, for the two that write states out in beforeSleep: the log (aof.c)
 * and the replicas (replication.c). One list for both, so a write costs
 * one copy of its key whichever of them is on. Each reads it through a
 * cursor of its own (changedKeysNext: what it has not seen yet, so the
 * log can also drain it early, at a rewrite's fork); beforeSleep empties
 * it after both (changedKeysReset), and so does a flush. */
typedef struct changedCursor {
    unsigned long gen;
    size_t done;
} changedCursor;
void changedKeyAdd(sds key);
sds *changedKeysNext(changedCursor *cur, size_t *from, size_t *to);
void changedKeysReset(void);
int changedKeysPending(const changedCursor *cur); /* keys this cursor has not seen yet */

/* A key's state changed in a way the log and the replicas keep but WATCH
 * does not see (PIN, UNPIN). */
static inline void signalKeyStateChanged(sds key) {
    if (aofOn || replOn) changedKeyAdd(key);
    if (replOn) replWriterSeen();
}

/* Also where the log and the replicas learn what changed: one place for
 * all, so a change WATCH sees is a change the log keeps. */
static inline void signalModifiedKey(sds key) {
    if (server.watching) touchWatchedKey(key);
    signalKeyStateChanged(key);
    if (detachedEntries) detachedKeyChanged(key); /* a newer version: the held one never comes back */
}
static inline void signalFlushedDb(void) {
    if (server.watching) touchAllWatchedKeys();
    if (aofOn || replOn) changedKeysReset(); /* what changed before the flush is gone with it */
    if (aofOn) aofFlushedAll();
    if (detachedEntries) detachedFlushAll();
    if (replOn) replFlushedAll();
}

#endif
