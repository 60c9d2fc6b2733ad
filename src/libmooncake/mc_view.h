/* mc_view.h -- zero-copy views of objects in shared memory (mc_view.c).
 * Internal: the public calls are in mooncake.h. */
#ifndef MC_VIEW_H
#define MC_VIEW_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mc_shm.h"
#include "mooncake.h"

/* A handle's releases of its views, shared by the handle and every view it
 * gave out (refcounted), so a view can be released from any thread, before
 * or after its handle closes. */
typedef struct mcViewQueue mcViewQueue;

/* owner_lock: the handle's lock; send puts one HOLD.RELEASE on the hold's
 * connection (sent with its next request), called with owner_lock held. */
typedef void mcViewSendFn(void *owner, int node, unsigned gen, const void *key, size_t keylen);
mcViewQueue *mcViewQueueNew(void *owner, pthread_mutex_t *owner_lock, mcViewSendFn *send);
/* The handle closes: its reference goes, and releases queued later are
 * dropped (the holds end with the handle's connections). */
void mcViewQueueClose(mcViewQueue *q);
/* mcViewQueueClose in a child forked from the handle's process: the
 * handle's reference goes, nothing else (mc_view.c, "Fork"). */
void mcViewQueueForget(mcViewQueue *q);
/* Sends every queued release (q's send) and empties the queue. Called by
 * the handle, under its lock; the caller flushes. */
void mcViewQueueDrain(mcViewQueue *q);

/* A view of size bytes at data, inside the mapping m (one reference taken),
 * whose hold is on the handle's connection to node (generation gen) under
 * key. NULL: out of memory. */
mc_view *mcViewNew(mcViewQueue *q, mcShm *m, const char *data, uint64_t size, int node, unsigned gen, const void *key,
                   size_t keylen);

#endif
