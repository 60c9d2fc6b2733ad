/* alloc.h -- O(1) offset allocator for segments.
 *
 * Manages the integer range [0, capacity) and hands out aligned contiguous
 * extents. It never touches the memory it describes (a segment may be remote
 * RDMA memory), so every byte of metadata lives in the allocator's own heap.
 * See alloc.c for the design, the invariants and the fragmentation bound.
 */
#ifndef ALLOC_H
#define ALLOC_H

#include <stdint.h>
#include <stddef.h>

/* Returned by allocAlloc() when nothing was allocated; never a valid handle. */
#define ALLOC_NONE UINT32_MAX

typedef struct allocator allocator;

typedef struct {
    uint64_t capacity, used, free;      /* bytes; capacity is the usable part,
                                         * i.e. rounded down to `align` */
    uint64_t limit;                     /* allocSetLimit(), else capacity */
    uint64_t largest_free;              /* == allocMaxAllocatable() */
    uint64_t allocations, free_ranges;  /* counts */
    size_t metadata_bytes;              /* heap used by the allocator itself */
} allocStats;

/* NULL if align is not a power of two >= 8, capacity < align, or OOM. */
allocator *allocCreate(uint64_t capacity, uint64_t align);
void allocRelease(allocator *a);

/* Reserve `size` bytes rounded up to the alignment. Returns a handle and sets
 * *offset, or returns ALLOC_NONE (size 0, no space, or metadata OOM) and
 * leaves *offset untouched. Handles are small integers that are reused after
 * allocFree(). */
uint32_t allocAlloc(allocator *a, uint64_t size, uint64_t *offset);

/* Reserve exactly [offset, offset + size rounded up): the extent a log
 * says an object held (aof.c re-attaching a client segment's objects).
 * offset must be aligned and the whole range free, else ALLOC_NONE and
 * nothing changes. The search walks free and used extents in address
 * order from *cursor (the handle the previous call returned; ALLOC_NONE or
 * a NULL cursor: from the start), so calls in ascending offset order cost
 * O(1) each; an offset behind the cursor is refused, not searched for. */
uint32_t allocAllocAt(allocator *a, uint64_t offset, uint64_t size, uint32_t *cursor);

/* Aborts with a message on a handle that is not currently allocated
 * (double free, out of range, never handed out). */
void allocFree(allocator *a, uint32_t handle);

uint64_t allocOffset(const allocator *a, uint32_t handle);
uint64_t allocSize(const allocator *a, uint32_t handle); /* aligned size */
/* The size allocAlloc(a, size) would give its extent (0 for 0, or too large). */
uint64_t allocRoundSize(const allocator *a, uint64_t size);

/* Index by address, for callers that must map a byte back to its extent
 * (the data plane checks a SEG.WRITE falls inside one). Costs two 32-bit
 * entries per `granule` bytes (a power of two >= align) and work in
 * proportion to the extent at alloc and free. Only on an empty allocator;
 * 0 or -1. */
int allocEnableIndex(allocator *a, uint64_t granule);
/* The allocated extent holding byte `offset`, or ALLOC_NONE (free space,
 * out of range, or no index). */
uint32_t allocFind(const allocator *a, uint64_t offset);
/* One pointer of the caller's per allocation (NULL when allocated). */
void allocSetUser(allocator *a, uint32_t handle, void *user);
void *allocUser(const allocator *a, uint32_t handle);

/* Stop allocating once `bytes` are in use (0, or more than the capacity:
 * no cap). Takes effect for the next allocAlloc(); frees nothing. */
void allocSetLimit(allocator *a, uint64_t bytes);
uint64_t allocLimit(const allocator *a); /* bytes: the cap, else the capacity */

/* O(1). */
void allocGetStats(const allocator *a, allocStats *st);
/* Bytes in use alone: what a check before every write reads (allocGetStats
 * also walks a few free nodes for largest_free). */
uint64_t allocUsed(const allocator *a);

/* The largest size allocAlloc() is guaranteed to satisfy right now (bytes,
 * 0 when full). The true largest free extent is below 9/8 of this. */
uint64_t allocMaxAllocatable(const allocator *a);

/* Every extent in address order, allocated and free: fn(ctx, offset,
 * size, used, user) with bytes, user NULL for free ones. O(extents); for
 * callers that need the layout itself (eviction's fit check, evict.c). */
typedef void allocWalkFn(void *ctx, uint64_t offset, uint64_t size, int used, void *user);
void allocWalk(const allocator *a, allocWalkFn *fn, void *ctx);

/* Full O(n) consistency walk, for tests: 0 if sound, else -1 with a message
 * in err (if err is not NULL). */
int allocCheck(const allocator *a, char *err, size_t errlen);

#endif
