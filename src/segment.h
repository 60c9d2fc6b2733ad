/* segment.h -- memory that holds values, carved by an offset allocator.
 *
 * A segment is either local (the server's own pool, mapped here) or
 * mounted by a client process that contributes its memory: then the server
 * only does the bookkeeping (the allocator) and the bytes move between the
 * clients directly. See segment.c. */
#ifndef SEGMENT_H
#define SEGMENT_H

#include <pthread.h>
#include <stdint.h>

#include "alloc.h"

#define SEGMENT_ALIGN 16  /* allocation granule: small values waste < 16 bytes */
#define SEGMENT_SELF_ID 1
#define SEGMENT_MAX_ENDPOINTS 16
#define SEGMENT_NAME_MAX 256
#define SEGMENT_MAX_SLOTS 65535  /* replicas keep a 16-bit slot */
#define SEGMENT_TOKEN_MIN 32     /* hex digits of a segment's token: 128 bits at least */
#define SEGMENT_TOKEN_MAX 128

enum { SEG_TIER_MEMORY = 0, SEG_TIER_DISK, SEG_TIER_VRAM };
/* SEG_ACTIVE takes new objects unless its owner has no open connection
 * (owner.h: segmentPlaceable, "orphaned"); SEG_DRAINING never does.
 * SEG_DETACHED: loaded from the append-only log at start-up, its objects
 * held aside (detached.c) until its host mounts it again and proves it is
 * the same memory (IDENTITY); it takes nothing and serves nothing. */
enum { SEG_ACTIVE = 0, SEG_DRAINING, SEG_DETACHED };

struct owner;

/* The longest runs of a segment's address space that eviction could make
 * free right now (evict.c keeps them; zero: not computed yet). */
#define SEG_RUNS 8
typedef struct segRuns {
    int valid, n;
    uint64_t start[SEG_RUNS], len[SEG_RUNS]; /* bytes, longest first */
    uint64_t floor;          /* no run left out of the list is longer */
    uint64_t wall_bytes;     /* the walls' bytes (an upper bound once walls went) */
    uint64_t gone;           /* storeWallsGone when it was computed */
    long long lease_end_ms;  /* the earliest lease end among its walls */
} segRuns;

typedef struct segment {
    uint64_t id;             /* unique for the server's lifetime, never reused */
    uint32_t slot;           /* index in segtab (slots are reused, ids are not) */
    uint16_t gen;            /* bumped each time the slot is reused: see store.h */
    char *name;
    struct segment *name_next; /* the next segment in the table under the same name (another
                                * tenant's: names are per tenant, acl.c), slot order */
    char *owner;
    struct owner *ownerp;    /* that owner (owner.c), which outlives it; NULL for the pool */
    struct segment *owner_prev, *owner_next; /* the owner's segments, a list (owner.c) */
    int same_host;           /* mounted from this machine: its unix:// endpoints reach it (owner.c) */
    char *peer_ip;           /* the address the MOUNT came from (tcp), NULL over unix: the only remote
                              * address a probe may connect to (owner.c) */
    char *tenant;            /* the restricted ACL user that mounted it, NULL: shared (acl.c) */
    char *identity;          /* hex SHA-256 of the IDENTITY its MOUNT gave, NULL if none: what a
                              * restarted server asks of a remount before re-attaching objects
                              * (detached.c); only segments with one are in the log (aof.c) */
    char *token;             /* the capability its host admits peers by (SEG.AUTH), replaced at each
                              * MOUNT; NULL for the pool. Handed out by SEGMENT.TOKEN (t_segment.c) */
    uint64_t size;
    int tier;
    char *host;
    char *endpoints[SEGMENT_MAX_ENDPOINTS];
    int nendpoints;
    uint64_t base;           /* remote virtual address for RDMA, 0 if none */
    char *rkey;
    int state;
    long long mounted_ms;
    long long drain_deadline_ms;  /* SEG_DRAINING: unmount at this time (monoMs) */
    uint32_t drain_index;         /* SEG_DRAINING: its place in the drains' heap (t_segment.c) */
    uint64_t drain_client_id;     /* the owner's connection that asked, 0 if none:
                                   * it lets go of the owner when the drain ends */
    allocator *alloc;
    /* Its extents' bytes by whose they are (store.c keeps them; allocator
     * granules, so they add up with the allocator's used and free): */
    uint64_t value_bytes;    /* replicas of values in the keyspace */
    uint64_t hardpin_bytes;  /* of those, hard-pinned: eviction cannot free them */
    uint64_t pending_bytes;  /* replicas of puts not yet ended */
    uint64_t deferred_bytes; /* unlinked versions waiting for a lease or put-release-timeout */
    segRuns runs;            /* eviction's view of its longest wall-free runs (evict.c) */
    /* Local segments only. */
    char *mem;               /* mapped address in this process, NULL if remote */
    int fd;                  /* memfd, for SHM.ATTACH */
    int hugepages;
    int numa_node;           /* -1: no binding */
    pthread_t prefault_thread;
    int prefault_running;
    volatile int prefault_stop;
    volatile uint64_t prefaulted;  /* bytes faulted in so far */
} segment;

segment *segmentCreateLocal(const char *name, uint64_t size, int hugepages, int numa_node,
                            int prefault, char *err, size_t errlen);
segment *segmentCreateRemote(const char *name, uint64_t size, const char *owner);
uint64_t segmentMachineMemory(char *desc, size_t desclen); /* bytes, 0 if unknown */
void segmentDescribePages(const segment *s, char *buf, size_t len);
void segmentRelease(segment *s);
static inline char *segmentPtr(const segment *s, uint64_t offset) { return s->mem + offset; }

/* The table: slot -> segment, ids assigned on insertion. */
extern segment **segtab;
extern uint32_t segtabLen;   /* slots in use or free, the scan bound */
uint32_t segmentHostCount(void);          /* distinct hosts of the table's segments */
void segmentSetHost(segment *s, char *host); /* takes host (zmalloc'd); keeps the count */
segment *segmentNamed(const char *name); /* the first in slot order of those named so, a chain by name_next */
int segmentTableAdd(segment *s);  /* -1: no slot left */
int segmentTableAddWithId(segment *s, uint64_t id); /* a segment loaded from the log; -1: no slot or id taken */
void segmentTableRemove(segment *s);
segment *segmentLookupName(const char *name);
segment *segmentLookupId(uint64_t id);
segment *segmentLookup(const char *name_or_id);  /* a name, else a decimal id */
uint32_t segmentCount(void);
uint32_t segmentCountTenant(const char *tenant); /* a tenant's mounted segments (tenant-max-segments) */
const char *segmentTierName(int tier);
/* Live extents: one per replica, counted by the allocator itself. */
static inline uint64_t segmentObjects(const segment *s) {
    allocStats st;
    allocGetStats(s->alloc, &st);
    return st.allocations;
}
/* Whether an object of `size` bytes could fit in an empty s: its allocator's
 * capacity (size rounded down to the granule) against size rounded up. */
static inline int segmentCouldHold(const segment *s, uint64_t size) {
    uint64_t need = (size + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1);
    return need >= size && allocLimit(s->alloc) >= need; /* maxmemory caps the pool */
}
int segmentTierFromName(const char *name);  /* -1 if unknown */
/* What the server presents to s's host to read from it (SEG.AUTH id token):
 * the segment's own capability, never a password of the server's -- the
 * host's endpoint is a client's choice. NULL: nothing to present. */
static inline const char *segmentRelayToken(const segment *s) { return s->token; }

void segmentSetNextId(uint64_t id);

#endif
