/* zerofree.h -- freed pool extents are zeroed before they are reused.
 *
 * The rule: free space in a pool segment (one mapped here, seg->mem) is
 * always zero, so an extent handed to a writer needs no zeroing on the put's
 * path. Every free of a pool extent goes through zerofreeExtent(). See
 * zerofree.c for why and how. Main thread only, except for the worker. */
#ifndef ZEROFREE_H
#define ZEROFREE_H

#include <stdint.h>

#include "sds.h"
#include "segment.h"

void zerofreeInit(void);
/* Stops and joins the worker; extents still queued are dropped (the process
 * is exiting, or their segment goes with them). */
void zerofreeShutdown(void);

/* Frees extent `handle` of local segment seg: zeroed at once and freed if
 * small, else queued for the worker and freed when it is done. Until then
 * it stays allocated, with no user (the data plane refuses it). */
void zerofreeExtent(segment *seg, uint32_t handle);
/* The same for a SET value's extent: a large one may be kept aside for the
 * next SET of its size (zerofreeTakeDirty) rather than queued. */
void zerofreeExtentForReuse(segment *seg, uint32_t handle);

/* A freed extent of exactly allocRoundSize(size) bytes for a writer that
 * writes every byte of [0, size) before anyone can read it (a SET value
 * read from the socket), its old bytes left in place; ALLOC_NONE if none
 * is kept. *offset gets its offset. See "Reuse" in zerofree.c. */
uint32_t zerofreeTakeDirty(segment *seg, uint64_t size, uint64_t *offset);

/* Returns zeroed extents to their allocators. wait: first finish every
 * queued one on this thread (sharing the work with the worker). The bytes
 * returned. */
uint64_t zerofreeReclaim(int wait);

/* The allocation paths' step before giving up or evicting: 1 if some space
 * came back (retry the allocation), 0 if nothing was queued. */
int zerofreeMakeRoom(void);

/* Bytes and extents freed but not yet back in an allocator. */
uint64_t zerofreePendingBytes(void);
uint64_t zerofreePendingExtents(void);

/* DEBUG ZEROFREE PAUSE|RESUME: the worker takes no new work while paused
 * (tests use it to hold extents in the queue). */
void zerofreePause(int paused);

/* INFO store fields. pending_bytes/extents: as before the caller settled. */
sds zerofreeInfo(sds s, uint64_t pending_bytes, uint64_t pending_extents);

#endif
