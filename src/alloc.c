/* alloc.c -- O(1) offset allocator for segments.
 *
 * WHAT
 * ----
 * An allocator over the integer range [0, capacity): allocAlloc() returns a
 * handle and an offset, allocFree() takes the handle back. The allocator
 * never reads or writes the memory it hands out, because a segment may be
 * remote RDMA memory, a memfd in another process or GPU memory. All metadata
 * is therefore external: one node per extent (allocated or free) in a
 * growable array, addressed by 32-bit index. The index is the handle.
 *
 * Every offset and size is kept in units of `align` (a power of two >= 8), so
 * a capacity of up to 2^64 bytes becomes at most 2^61 units: the arithmetic
 * cannot overflow and the top two bits of a node's size are free to hold the
 * node state. A capacity that is not a multiple of `align` loses its tail.
 *
 * SHAPE (after Sebastian Aaltonen's OffsetAllocator)
 * -----
 * - Nodes tile the range: each live node (allocated or free) has prev/next
 *   links in address order, so freeing finds its neighbours in O(1) and
 *   merges with them. Invariant: no two free nodes are ever adjacent, the
 *   first node starts at 0 and the last one ends at capacity.
 *
 * - Free nodes sit in size bins whose boundaries are "small floats" with 3
 *   mantissa bits: sizes 0..15 units get a bin each, then every power of two
 *   is split into 8 bins (16,18,..,30 | 32,36,..,60 | ...). 2^61 units need
 *   473 bins; we have 512 = 64 groups of 8.
 *
 * - A free extent is filed under the bin its size rounds *down* to, so every
 *   node in bin b is at least binMin(b). A request is rounded *up* to a bin,
 *   so any node in that bin or above fits without looking at it. Finding the
 *   first non-empty bin >= the request is two ctz operations: a 64-bit word
 *   with one bit per group, and an 8-bit mask per group with one bit per bin.
 *
 * - The first node of the bin found is split: the low part becomes the
 *   allocation (the node keeps its index), the rest gets a new node and goes
 *   back to the bin its size rounds down to.
 *
 * - Nodes that are not in use are chained into an index free list through
 *   bin_next, so node indices (handles) are reused and the array only grows
 *   to its high-water mark. A node is 32 bytes and there is one per extent,
 *   allocated or free (free extents never outnumber allocations by more than
 *   one, as they are never adjacent). The array doubles when full and is
 *   never shrunk: 10 million tightly packed allocations live in a 512 MiB
 *   array (320 MB of it in use), 1 GiB if each is also followed by a hole.
 *
 * FRAGMENTATION
 * -------------
 * Rounding the request up is what makes the search O(1), and it has a price:
 * a free extent of size s >= request r whose bin is below r's rounded-up bin
 * is not found by the bitmap search. Such an extent has s < r + r/8 (a bin is
 * at most 1/8 as wide as its smallest size; below 16 units bins are exact and
 * nothing is lost). So:
 *
 *   - allocAlloc(r) always succeeds when some free extent is >= r rounded up
 *     to its bin, and that rounding adds less than 1/8 of r.
 *   - When it fails, every free extent is < 9/8 r; the only ones that are
 *     >= r sit in r's own bin behind the first ALLOC_SCAN_LIMIT nodes.
 *
 * To win back most of that loss without giving up O(1), a request whose
 * rounded-up bin and everything above it is empty looks at the first
 * ALLOC_SCAN_LIMIT nodes of its own round-down bin (the only lower bin that
 * can hold an extent >= r) and takes the first that fits. allocMaxAllocatable()
 * reports exactly what this search guarantees: the largest of those first
 * ALLOC_SCAN_LIMIT nodes of the highest non-empty bin. It is within 8/9 of
 * the true largest free extent.
 *
 * External fragmentation is that of a segregated fit without compaction:
 * allocations are placed at the low end of the extent found, the extent
 * found comes from the smallest non-empty bin that surely fits, and frees
 * coalesce immediately, so a freed region is whole again as soon as all its
 * pieces are back. Mixed sizes can still leave many small holes that sum to
 * much free space with a small largest_free; the stats show both so callers
 * (eviction) can tell "full" from "fragmented".
 */

#include "alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zmalloc.h"

/* Through zmalloc so INFO used_memory counts allocator metadata. zmalloc
 * aborts rather than return NULL, so the NULL checks below are for other
 * embedders of this file. */
#define alloc_malloc zmalloc
#define alloc_realloc zrealloc
#define alloc_free zfree

#define ALLOC_MANTISSA_BITS 3
#define ALLOC_MANTISSA_VALUES (1u << ALLOC_MANTISSA_BITS)
#define ALLOC_MANTISSA_MASK (ALLOC_MANTISSA_VALUES - 1)
#define ALLOC_GROUPS 64 /* bits in the top-level word */
#define ALLOC_BINS (ALLOC_GROUPS * ALLOC_MANTISSA_VALUES)
#define ALLOC_NO_BIN ALLOC_BINS

/* How many nodes of the request's own bin we look at when nothing above it
 * fits. Small enough to stay O(1), large enough to usually find a fit. */
#define ALLOC_SCAN_LIMIT 16

#define ALLOC_INITIAL_NODES 64
#define ALLOC_MAX_NODES ((uint64_t)ALLOC_NONE) /* indices 0 .. UINT32_MAX-1 */

/* Node state lives in the top two bits of the size: sizes are in units of
 * align >= 8, so they never exceed 2^61. */
#define ALLOC_STATE_SHIFT 62
#define ALLOC_SIZE_MASK ((UINT64_C(1) << ALLOC_STATE_SHIFT) - 1)
#define ALLOC_UNUSED 0 /* in the index free list */
#define ALLOC_FREE 1   /* a free extent, in a bin */
#define ALLOC_USED 2   /* an allocation */

typedef struct allocNode {
    uint64_t offset;              /* units */
    uint64_t size_state;          /* units | state << ALLOC_STATE_SHIFT */
    union {
        struct {
            uint32_t bin_prev, bin_next;  /* bin list; bin_next also chains unused nodes */
        };
        void *user;               /* ALLOC_USED: the caller's tag, see allocSetUser() */
    };
    uint32_t addr_prev, addr_next;
} allocNode;

struct allocator {
    uint64_t align;
    unsigned align_shift;
    uint64_t capacity;            /* units */
    uint64_t limit;               /* units: allocations stop at used == limit (<= capacity) */
    uint64_t used;                /* units */
    uint64_t allocations;
    uint64_t free_ranges;
    allocNode *nodes;
    uint32_t node_cap;            /* slots in nodes[] */
    uint32_t node_count;          /* slots ever handed out (high-water mark) */
    uint32_t node_free;           /* head of the unused-node list */
    uint64_t group_bits;          /* bit g: some bin in group g is non-empty */
    uint8_t bin_bits[ALLOC_GROUPS]; /* bit i of [g]: bin g*8+i is non-empty */
    uint32_t bin_head[ALLOC_BINS];
    /* Optional index by address (allocEnableIndex): per granule, the used
     * extent covering its first unit, and the lowest used extent starting
     * inside it. See allocFind(). */
    unsigned gshift;              /* granule = 1 << gshift units */
    uint64_t ngranules;
    uint32_t *cover, *first;
};

#define allocAbort(...) do { \
    fprintf(stderr, "alloc: "); \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); \
    abort(); \
} while (0)

static inline uint64_t nodeSize(const allocNode *n) {
    return n->size_state & ALLOC_SIZE_MASK;
}

static inline unsigned nodeState(const allocNode *n) {
    return (unsigned)(n->size_state >> ALLOC_STATE_SHIFT);
}

static inline void nodeSet(allocNode *n, uint64_t size, unsigned state) {
    n->size_state = size | ((uint64_t)state << ALLOC_STATE_SHIFT);
}

/* ---------------------------- small floats ------------------------------ */

/* The bin a free extent of v units is filed under: the largest bin whose
 * minimum is <= v. v must be >= 1. */
static inline unsigned allocFloorBin(uint64_t v) {
    if (v < ALLOC_MANTISSA_VALUES) return (unsigned)v;
    unsigned high = 63 - (unsigned)__builtin_clzll(v);
    unsigned shift = high - ALLOC_MANTISSA_BITS;
    return ((shift + 1) << ALLOC_MANTISSA_BITS) |
           (unsigned)((v >> shift) & ALLOC_MANTISSA_MASK);
}

/* The smallest size (units) that lands in `bin`. */
static inline uint64_t allocBinMin(unsigned bin) {
    unsigned exp = bin >> ALLOC_MANTISSA_BITS;
    unsigned mant = bin & ALLOC_MANTISSA_MASK;
    if (exp == 0) return mant;
    return (uint64_t)(ALLOC_MANTISSA_VALUES | mant) << (exp - 1);
}

/* The smallest bin all of whose extents are >= v. */
static inline unsigned allocCeilBin(uint64_t v) {
    unsigned bin = allocFloorBin(v);
    return allocBinMin(bin) == v ? bin : bin + 1;
}

/* ------------------------------ bins ------------------------------------ */

static void allocBinInsert(allocator *a, uint32_t idx) {
    allocNode *n = &a->nodes[idx];
    unsigned bin = allocFloorBin(nodeSize(n));
    uint32_t head = a->bin_head[bin];

    n->bin_prev = ALLOC_NONE;
    n->bin_next = head;
    if (head != ALLOC_NONE) a->nodes[head].bin_prev = idx;
    else {
        a->bin_bits[bin / ALLOC_MANTISSA_VALUES] |=
            (uint8_t)(1u << (bin & ALLOC_MANTISSA_MASK));
        a->group_bits |= UINT64_C(1) << (bin / ALLOC_MANTISSA_VALUES);
    }
    a->bin_head[bin] = idx;
    a->free_ranges++;
}

static void allocBinRemove(allocator *a, uint32_t idx) {
    allocNode *n = &a->nodes[idx];
    unsigned bin = allocFloorBin(nodeSize(n));

    if (n->bin_prev != ALLOC_NONE) a->nodes[n->bin_prev].bin_next = n->bin_next;
    else a->bin_head[bin] = n->bin_next;
    if (n->bin_next != ALLOC_NONE) a->nodes[n->bin_next].bin_prev = n->bin_prev;

    if (a->bin_head[bin] == ALLOC_NONE) {
        unsigned g = bin / ALLOC_MANTISSA_VALUES;
        a->bin_bits[g] &= (uint8_t)~(1u << (bin & ALLOC_MANTISSA_MASK));
        if (a->bin_bits[g] == 0) a->group_bits &= ~(UINT64_C(1) << g);
    }
    a->free_ranges--;
}

/* First non-empty bin >= `bin`, or ALLOC_NO_BIN. */
static unsigned allocFindBin(const allocator *a, unsigned bin) {
    unsigned g = bin / ALLOC_MANTISSA_VALUES;
    if (g >= ALLOC_GROUPS) return ALLOC_NO_BIN;

    unsigned in_group = a->bin_bits[g] & (0xffu << (bin & ALLOC_MANTISSA_MASK));
    if (in_group) return g * ALLOC_MANTISSA_VALUES + (unsigned)__builtin_ctz(in_group);

    if (g + 1 >= ALLOC_GROUPS) return ALLOC_NO_BIN;
    uint64_t above = a->group_bits & (~UINT64_C(0) << (g + 1));
    if (above == 0) return ALLOC_NO_BIN;
    g = (unsigned)__builtin_ctzll(above);
    return g * ALLOC_MANTISSA_VALUES + (unsigned)__builtin_ctz(a->bin_bits[g]);
}

/* Highest non-empty bin, or ALLOC_NO_BIN. */
static unsigned allocTopBin(const allocator *a) {
    if (a->group_bits == 0) return ALLOC_NO_BIN;
    unsigned g = 63 - (unsigned)__builtin_clzll(a->group_bits);
    unsigned i = 31 - (unsigned)__builtin_clz(a->bin_bits[g]);
    return g * ALLOC_MANTISSA_VALUES + i;
}

/* ------------------------------ nodes ----------------------------------- */

/* A fresh node index, growing the array if needed; ALLOC_NONE on OOM.
 * May move a->nodes: callers must not hold node pointers across it. */
static uint32_t allocNodeNew(allocator *a) {
    uint32_t idx = a->node_free;
    if (idx != ALLOC_NONE) {
        a->node_free = a->nodes[idx].bin_next;
        return idx;
    }
    if (a->node_count == a->node_cap) {
        uint64_t cap = (uint64_t)a->node_cap * 2;
        if (cap > ALLOC_MAX_NODES) cap = ALLOC_MAX_NODES;
        if (cap <= a->node_cap || cap > SIZE_MAX / sizeof(allocNode)) return ALLOC_NONE;
        allocNode *nodes = alloc_realloc(a->nodes, (size_t)cap * sizeof(allocNode));
        if (nodes == NULL) return ALLOC_NONE;
        a->nodes = nodes;
        a->node_cap = (uint32_t)cap;
    }
    return a->node_count++;
}

static void allocNodeRelease(allocator *a, uint32_t idx) {
    allocNode *n = &a->nodes[idx];
    nodeSet(n, 0, ALLOC_UNUSED);
    n->bin_prev = n->addr_prev = n->addr_next = ALLOC_NONE;
    n->bin_next = a->node_free;
    a->node_free = idx;
}

/* Handles come from callers: check them even in release builds, a bad free
 * here silently corrupts which bytes of a segment belong to whom. */
static const allocNode *allocUsedNode(const allocator *a, uint32_t h, const char *fn) {
    if (h >= a->node_count)
        allocAbort("%s: handle %u out of range (%u nodes)", fn, h, a->node_count);
    const allocNode *n = &a->nodes[h];
    if (nodeState(n) != ALLOC_USED)
        allocAbort("%s: handle %u is not allocated (double free?)", fn, h);
    return n;
}

/* ----------------------------- address index ---------------------------- */

/* Why two tables and not a tree: a lookup must find the extent holding any
 * byte (a striped transfer writes into the middle of a value), and keeping
 * a per-granule entry costs O(extent / granule) at alloc and free -- work in
 * proportion to the bytes the caller is about to move anyway -- with no
 * node memory per extent. An extent that starts before a granule covers its
 * first unit (cover[]); one that starts inside it is reached from the
 * lowest such start (first[]) along the address links, a walk bounded by
 * the extents that fit in one granule. */
/* Sets cover[] of every granule whose first unit lies in node n to v. */
static void allocIndexCover(allocator *a, const allocNode *n, uint32_t v) {
    uint64_t start = n->offset, end = n->offset + nodeSize(n);
    for (uint64_t g = (start + ((UINT64_C(1) << a->gshift) - 1)) >> a->gshift; (g << a->gshift) < end; g++)
        a->cover[g] = v;
}

static void allocIndexAdd(allocator *a, uint32_t idx) {
    if (a->cover == NULL) return;
    const allocNode *n = &a->nodes[idx];
    uint64_t start = n->offset, g0 = start >> a->gshift;
    allocIndexCover(a, n, idx);
    uint32_t f = a->first[g0];
    if (f == ALLOC_NONE || a->nodes[f].offset > start) a->first[g0] = idx;
}

/* Before idx stops being used (its links still describe its neighbours). */
static void allocIndexRemove(allocator *a, uint32_t idx) {
    if (a->cover == NULL) return;
    const allocNode *n = &a->nodes[idx];
    uint64_t g0 = n->offset >> a->gshift;
    allocIndexCover(a, n, ALLOC_NONE);
    if (a->first[g0] != idx) return;
    uint64_t limit = (g0 + 1) << a->gshift;
    uint32_t next = ALLOC_NONE;
    for (uint32_t i = n->addr_next; i != ALLOC_NONE && a->nodes[i].offset < limit; i = a->nodes[i].addr_next) {
        if (nodeState(&a->nodes[i]) == ALLOC_USED) {
            next = i;
            break;
        }
    }
    a->first[g0] = next;
}

int allocEnableIndex(allocator *a, uint64_t granule) {
    if (a->cover) return 0;
    if (granule < a->align || (granule & (granule - 1)) != 0) return -1;
    if (a->allocations) return -1;  /* built empty, kept in step from then on */
    unsigned gshift = (unsigned)__builtin_ctzll(granule) - a->align_shift;
    uint64_t ngranules = (a->capacity >> gshift) + 1;
    if (ngranules > SIZE_MAX / sizeof(uint32_t)) return -1;
    uint32_t *cover = alloc_malloc((size_t)ngranules * sizeof(uint32_t));
    uint32_t *first = alloc_malloc((size_t)ngranules * sizeof(uint32_t));
    if (cover == NULL || first == NULL) {
        alloc_free(cover);
        alloc_free(first);
        return -1;
    }
    memset(cover, 0xff, (size_t)ngranules * sizeof(uint32_t)); /* ALLOC_NONE */
    memset(first, 0xff, (size_t)ngranules * sizeof(uint32_t));
    a->gshift = gshift;
    a->ngranules = ngranules;
    a->cover = cover;
    a->first = first;
    return 0;
}

uint32_t allocFind(const allocator *a, uint64_t offset) {
    if (a->cover == NULL) return ALLOC_NONE;
    uint64_t u = offset >> a->align_shift;
    if (u >= a->capacity) return ALLOC_NONE;
    uint64_t g = u >> a->gshift;
    uint32_t h = a->cover[g];
    if (h != ALLOC_NONE && a->nodes[h].offset <= u && u < a->nodes[h].offset + nodeSize(&a->nodes[h]))
        return h;
    for (h = a->first[g]; h != ALLOC_NONE && a->nodes[h].offset <= u; h = a->nodes[h].addr_next) {
        const allocNode *n = &a->nodes[h];
        if (nodeState(n) == ALLOC_USED && u < n->offset + nodeSize(n)) return h;
    }
    return ALLOC_NONE;
}

void allocSetUser(allocator *a, uint32_t handle, void *user) {
    allocUsedNode(a, handle, "allocSetUser");
    a->nodes[handle].user = user;
}

void *allocUser(const allocator *a, uint32_t handle) {
    return allocUsedNode(a, handle, "allocUser")->user;
}

/* ------------------------------ API ------------------------------------- */

allocator *allocCreate(uint64_t capacity, uint64_t align) {
    if (align < 8 || (align & (align - 1)) != 0 || capacity < align) return NULL;

    allocator *a = alloc_malloc(sizeof(*a));
    if (a == NULL) return NULL;
    memset(a, 0, sizeof(*a));
    a->align = align;
    a->align_shift = (unsigned)__builtin_ctzll(align);
    a->capacity = capacity >> a->align_shift;
    a->limit = a->capacity;
    a->node_free = ALLOC_NONE;
    for (unsigned i = 0; i < ALLOC_BINS; i++) a->bin_head[i] = ALLOC_NONE;

    a->nodes = alloc_malloc(ALLOC_INITIAL_NODES * sizeof(allocNode));
    if (a->nodes == NULL) {
        alloc_free(a);
        return NULL;
    }
    a->node_cap = ALLOC_INITIAL_NODES;

    uint32_t idx = allocNodeNew(a);
    allocNode *n = &a->nodes[idx];
    n->offset = 0;
    nodeSet(n, a->capacity, ALLOC_FREE);
    n->addr_prev = n->addr_next = ALLOC_NONE;
    allocBinInsert(a, idx);
    return a;
}

void allocRelease(allocator *a) {
    if (a == NULL) return;
    alloc_free(a->cover);
    alloc_free(a->first);
    alloc_free(a->nodes);
    alloc_free(a);
}

/* The first of the first ALLOC_SCAN_LIMIT nodes of `bin` that holds `units`,
 * or ALLOC_NONE. allocMaxAllocatable() must look at exactly the same nodes. */
static uint32_t allocScanBin(const allocator *a, unsigned bin, uint64_t units) {
    uint32_t idx = a->bin_head[bin];
    for (int i = 0; i < ALLOC_SCAN_LIMIT && idx != ALLOC_NONE; i++) {
        if (nodeSize(&a->nodes[idx]) >= units) return idx;
        idx = a->nodes[idx].bin_next;
    }
    return ALLOC_NONE;
}

uint32_t allocAlloc(allocator *a, uint64_t size, uint64_t *offset) {
    if (size == 0) return ALLOC_NONE;
    /* Round up without computing size + align - 1, which could wrap. */
    uint64_t units = (size >> a->align_shift) + ((size & (a->align - 1)) != 0);
    if (a->used >= a->limit || units > a->limit - a->used) return ALLOC_NONE;

    uint32_t idx = ALLOC_NONE;
    unsigned want = allocCeilBin(units);
    unsigned bin = allocFindBin(a, want);
    if (bin != ALLOC_NO_BIN) {
        idx = a->bin_head[bin];
    } else {
        unsigned own = allocFloorBin(units);
        if (own != want) idx = allocScanBin(a, own, units);
    }
    if (idx == ALLOC_NONE) return ALLOC_NONE;

    /* Get the remainder's node before changing anything, so running out of
     * metadata memory leaves the allocator as it was. */
    uint64_t have = nodeSize(&a->nodes[idx]);
    uint32_t rest = ALLOC_NONE;
    if (have > units) {
        rest = allocNodeNew(a);
        if (rest == ALLOC_NONE) return ALLOC_NONE;
    }

    allocBinRemove(a, idx);
    allocNode *n = &a->nodes[idx];
    if (rest != ALLOC_NONE) {
        allocNode *r = &a->nodes[rest];
        r->offset = n->offset + units;
        nodeSet(r, have - units, ALLOC_FREE);
        r->addr_prev = idx;
        r->addr_next = n->addr_next;
        if (n->addr_next != ALLOC_NONE) a->nodes[n->addr_next].addr_prev = rest;
        n->addr_next = rest;
        allocBinInsert(a, rest);
    }
    nodeSet(n, units, ALLOC_USED);
    n->user = NULL;
    a->used += units;
    a->allocations++;
    allocIndexAdd(a, idx);
    *offset = n->offset << a->align_shift;
    return idx;
}

/* The free node holding unit u, searched forward in address order from
 * node `from` (ALLOC_NONE: the first node). */
static uint32_t allocFreeNodeAt(const allocator *a, uint32_t from, uint64_t u) {
    uint32_t idx = from;
    if (idx == ALLOC_NONE || idx >= a->node_count || nodeState(&a->nodes[idx]) == ALLOC_UNUSED) {
        idx = ALLOC_NONE;
        for (uint32_t i = 0; i < a->node_count; i++) {
            if (nodeState(&a->nodes[i]) != ALLOC_UNUSED) {
                idx = i;
                break;
            }
        }
        while (idx != ALLOC_NONE && a->nodes[idx].addr_prev != ALLOC_NONE) idx = a->nodes[idx].addr_prev;
    }
    while (idx != ALLOC_NONE) {
        const allocNode *n = &a->nodes[idx];
        if (u < n->offset) return ALLOC_NONE; /* behind the cursor: not ascending */
        if (u < n->offset + nodeSize(n)) return nodeState(n) == ALLOC_FREE ? idx : ALLOC_NONE;
        idx = n->addr_next;
    }
    return ALLOC_NONE;
}

uint32_t allocAllocAt(allocator *a, uint64_t offset, uint64_t size, uint32_t *cursor) {
    if (size == 0 || (offset & (a->align - 1)) != 0) return ALLOC_NONE;
    uint64_t units = (size >> a->align_shift) + ((size & (a->align - 1)) != 0);
    uint64_t at = offset >> a->align_shift;
    if (at >= a->capacity || units > a->capacity - at) return ALLOC_NONE;
    uint32_t idx = allocFreeNodeAt(a, cursor ? *cursor : ALLOC_NONE, at);
    if (idx == ALLOC_NONE) return ALLOC_NONE;
    uint64_t fo = a->nodes[idx].offset, fs = nodeSize(&a->nodes[idx]);
    if (at + units > fo + fs) return ALLOC_NONE; /* runs into an allocation */
    /* Both remainders' nodes first, so running out of metadata memory
     * leaves the allocator as it was. */
    uint32_t left = ALLOC_NONE, right = ALLOC_NONE;
    if (at > fo && (left = allocNodeNew(a)) == ALLOC_NONE) return ALLOC_NONE;
    if (at + units < fo + fs && (right = allocNodeNew(a)) == ALLOC_NONE) {
        if (left != ALLOC_NONE) allocNodeRelease(a, left);
        return ALLOC_NONE;
    }
    allocBinRemove(a, idx);
    allocNode *n = &a->nodes[idx];
    if (left != ALLOC_NONE) {
        allocNode *l = &a->nodes[left];
        l->offset = fo;
        nodeSet(l, at - fo, ALLOC_FREE);
        l->addr_prev = n->addr_prev;
        l->addr_next = idx;
        if (n->addr_prev != ALLOC_NONE) a->nodes[n->addr_prev].addr_next = left;
        n->addr_prev = left;
        allocBinInsert(a, left);
    }
    if (right != ALLOC_NONE) {
        allocNode *r = &a->nodes[right];
        r->offset = at + units;
        nodeSet(r, fo + fs - (at + units), ALLOC_FREE);
        r->addr_prev = idx;
        r->addr_next = n->addr_next;
        if (n->addr_next != ALLOC_NONE) a->nodes[n->addr_next].addr_prev = right;
        n->addr_next = right;
        allocBinInsert(a, right);
    }
    n->offset = at;
    nodeSet(n, units, ALLOC_USED);
    n->user = NULL;
    a->used += units;
    a->allocations++;
    allocIndexAdd(a, idx);
    if (cursor) *cursor = idx;
    return idx;
}

void allocFree(allocator *a, uint32_t handle) {
    allocUsedNode(a, handle, "allocFree");
    allocIndexRemove(a, handle);
    allocNode *n = &a->nodes[handle];
    uint64_t size = nodeSize(n);
    a->used -= size;
    a->allocations--;

    /* Merge with free neighbours; the freed node survives and absorbs them,
     * so at most two nodes go back to the unused list. */
    uint32_t p = n->addr_prev;
    if (p != ALLOC_NONE && nodeState(&a->nodes[p]) == ALLOC_FREE) {
        allocNode *pn = &a->nodes[p];
        allocBinRemove(a, p);
        n->offset = pn->offset;
        size += nodeSize(pn);
        n->addr_prev = pn->addr_prev;
        if (pn->addr_prev != ALLOC_NONE) a->nodes[pn->addr_prev].addr_next = handle;
        allocNodeRelease(a, p);
    }
    uint32_t q = n->addr_next;
    if (q != ALLOC_NONE && nodeState(&a->nodes[q]) == ALLOC_FREE) {
        allocNode *qn = &a->nodes[q];
        allocBinRemove(a, q);
        size += nodeSize(qn);
        n->addr_next = qn->addr_next;
        if (qn->addr_next != ALLOC_NONE) a->nodes[qn->addr_next].addr_prev = handle;
        allocNodeRelease(a, q);
    }
    nodeSet(n, size, ALLOC_FREE);
    allocBinInsert(a, handle);
}

uint64_t allocOffset(const allocator *a, uint32_t handle) {
    return allocUsedNode(a, handle, "allocOffset")->offset << a->align_shift;
}

uint64_t allocSize(const allocator *a, uint32_t handle) {
    return nodeSize(allocUsedNode(a, handle, "allocSize")) << a->align_shift;
}

uint64_t allocRoundSize(const allocator *a, uint64_t size) {
    uint64_t units = (size >> a->align_shift) + ((size & (a->align - 1)) != 0);
    if (units > (UINT64_MAX >> a->align_shift)) return 0;
    return units << a->align_shift;
}

uint64_t allocMaxAllocatable(const allocator *a) {
    unsigned bin = allocTopBin(a);
    if (bin == ALLOC_NO_BIN) return 0;
    /* Every node of the top bin fits binMin(bin), hence any request up to it;
     * bigger requests fall back to allocScanBin() over these same nodes. */
    uint64_t best = 0;
    uint32_t idx = a->bin_head[bin];
    for (int i = 0; i < ALLOC_SCAN_LIMIT && idx != ALLOC_NONE; i++) {
        uint64_t s = nodeSize(&a->nodes[idx]);
        if (s > best) best = s;
        idx = a->nodes[idx].bin_next;
    }
    uint64_t room = a->used >= a->limit ? 0 : a->limit - a->used;
    return (best < room ? best : room) << a->align_shift;
}

/* A cap on the bytes in use below the capacity (maxmemory on the server's
 * pool). Lowering it under what is in use frees nothing: allocations fail
 * until frees bring `used` under it, which is the caller's cue to evict. */
uint64_t allocLimit(const allocator *a) { return a->limit << a->align_shift; }

void allocSetLimit(allocator *a, uint64_t bytes) {
    uint64_t units = bytes >> a->align_shift;
    a->limit = units == 0 || units > a->capacity ? a->capacity : units;
}

uint64_t allocUsed(const allocator *a) { return a->used << a->align_shift; }

void allocGetStats(const allocator *a, allocStats *st) {
    st->capacity = a->capacity << a->align_shift;
    st->limit = a->limit << a->align_shift;
    st->used = a->used << a->align_shift;
    st->free = (a->capacity - a->used) << a->align_shift;
    st->largest_free = allocMaxAllocatable(a);
    st->allocations = a->allocations;
    st->free_ranges = a->free_ranges;
    st->metadata_bytes = sizeof(*a) + (size_t)a->node_cap * sizeof(allocNode) +
                         (a->cover ? 2 * (size_t)a->ngranules * sizeof(uint32_t) : 0);
}

/* ------------------------------ checking -------------------------------- */

#define checkFail(...) do { \
    if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
    return -1; \
} while (0)

void allocWalk(const allocator *a, allocWalkFn *fn, void *ctx) {
    uint32_t idx = ALLOC_NONE;
    for (uint32_t i = 0; i < a->node_count; i++) {
        const allocNode *n = &a->nodes[i];
        if (nodeState(n) != ALLOC_UNUSED && n->offset == 0) {
            idx = i;
            break;
        }
    }
    while (idx != ALLOC_NONE) {
        const allocNode *n = &a->nodes[idx];
        int used = nodeState(n) == ALLOC_USED;
        fn(ctx, n->offset << a->align_shift, nodeSize(n) << a->align_shift, used, used ? n->user : NULL);
        idx = n->addr_next;
    }
}

int allocCheck(const allocator *a, char *err, size_t errlen) {
    const allocNode *nodes = a->nodes;
    uint32_t count = a->node_count, head = ALLOC_NONE;
    uint64_t live = 0, unused = 0, free_nodes = 0, used_nodes = 0;

    if (count > a->node_cap) checkFail("node_count %u > node_cap %u", count, a->node_cap);

    /* Every node on its own: states, link ranges, neighbour agreement. */
    for (uint32_t i = 0; i < count; i++) {
        const allocNode *n = &nodes[i];
        unsigned st = nodeState(n);
        if (st == ALLOC_UNUSED) { unused++; continue; }
        if (st != ALLOC_FREE && st != ALLOC_USED) checkFail("node %u: bad state %u", i, st);
        if (nodeSize(n) == 0) checkFail("node %u: empty extent", i);
        live++;
        if (st == ALLOC_FREE) free_nodes++;
        else used_nodes++;
        if (n->addr_prev == ALLOC_NONE) {
            if (head != ALLOC_NONE) checkFail("nodes %u and %u both lack a predecessor", head, i);
            head = i;
            if (n->offset != 0) checkFail("first node %u starts at %llu", i,
                                          (unsigned long long)n->offset);
        } else {
            if (n->addr_prev >= count) checkFail("node %u: addr_prev out of range", i);
            const allocNode *p = &nodes[n->addr_prev];
            if (p->addr_next != i) checkFail("node %u: prev %u does not point back", i, n->addr_prev);
            if (p->offset + nodeSize(p) != n->offset) checkFail("node %u: gap or overlap with prev", i);
            if (st == ALLOC_FREE && nodeState(p) == ALLOC_FREE)
                checkFail("nodes %u and %u: adjacent free extents not merged", n->addr_prev, i);
        }
        if (n->addr_next == ALLOC_NONE) {
            if (n->offset + nodeSize(n) != a->capacity) checkFail("last node %u does not end at capacity", i);
        } else {
            if (n->addr_next >= count) checkFail("node %u: addr_next out of range", i);
            if (nodes[n->addr_next].addr_prev != i) checkFail("node %u: next does not point back", i);
        }
    }
    if (head == ALLOC_NONE) checkFail("no first node");
    if (used_nodes != a->allocations)
        checkFail("%llu used nodes, allocations says %llu",
                  (unsigned long long)used_nodes, (unsigned long long)a->allocations);
    if (free_nodes != a->free_ranges)
        checkFail("%llu free nodes, free_ranges says %llu",
                  (unsigned long long)free_nodes, (unsigned long long)a->free_ranges);

    /* The address list covers everything exactly once. */
    uint64_t walked = 0, pos = 0, used = 0;
    for (uint32_t i = head; i != ALLOC_NONE; i = nodes[i].addr_next) {
        if (++walked > live) checkFail("address list loops");
        if (nodes[i].offset != pos) checkFail("node %u at %llu, expected %llu", i,
                                              (unsigned long long)nodes[i].offset,
                                              (unsigned long long)pos);
        pos += nodeSize(&nodes[i]);
        if (nodeState(&nodes[i]) == ALLOC_USED) used += nodeSize(&nodes[i]);
    }
    if (walked != live) checkFail("address list reaches %llu of %llu nodes",
                                  (unsigned long long)walked, (unsigned long long)live);
    if (pos != a->capacity) checkFail("extents sum to %llu units, capacity %llu",
                                      (unsigned long long)pos, (unsigned long long)a->capacity);
    if (used != a->used) checkFail("used extents %llu units, counter %llu",
                                   (unsigned long long)used, (unsigned long long)a->used);

    /* Bins hold exactly the free nodes, each in the bin its size rounds to. */
    uint64_t binned = 0;
    for (unsigned b = 0; b < ALLOC_BINS; b++) {
        unsigned g = b / ALLOC_MANTISSA_VALUES;
        int bit = (a->bin_bits[g] >> (b & ALLOC_MANTISSA_MASK)) & 1;
        if (bit != (a->bin_head[b] != ALLOC_NONE)) checkFail("bin %u: bitmap disagrees", b);
        uint32_t prev = ALLOC_NONE;
        for (uint32_t i = a->bin_head[b]; i != ALLOC_NONE; i = nodes[i].bin_next) {
            if (i >= count) checkFail("bin %u: index out of range", b);
            if (++binned > free_nodes) checkFail("bins hold more nodes than are free (loop?)");
            if (nodeState(&nodes[i]) != ALLOC_FREE) checkFail("bin %u: node %u not free", b, i);
            if (allocFloorBin(nodeSize(&nodes[i])) != b) checkFail("node %u in wrong bin %u", i, b);
            if (nodes[i].bin_prev != prev) checkFail("node %u: bad bin_prev", i);
            prev = i;
        }
    }
    if (binned != free_nodes) checkFail("bins hold %llu of %llu free nodes",
                                        (unsigned long long)binned, (unsigned long long)free_nodes);
    for (unsigned g = 0; g < ALLOC_GROUPS; g++)
        if (((a->group_bits >> g) & 1) != (a->bin_bits[g] != 0)) checkFail("group %u: bitmap disagrees", g);

    /* The unused list holds exactly the unused nodes. */
    uint64_t listed = 0;
    for (uint32_t i = a->node_free; i != ALLOC_NONE; i = nodes[i].bin_next) {
        if (i >= count) checkFail("unused list: index out of range");
        if (nodeState(&nodes[i]) != ALLOC_UNUSED) checkFail("unused list: node %u in use", i);
        if (++listed > unused) checkFail("unused list loops");
    }
    if (listed != unused) checkFail("unused list holds %llu of %llu unused nodes",
                                    (unsigned long long)listed, (unsigned long long)unused);

    /* The address index agrees with a walk of the address list. */
    if (a->cover) {
        uint64_t gsz = UINT64_C(1) << a->gshift;
        uint32_t *wc = malloc((size_t)a->ngranules * sizeof(uint32_t));
        uint32_t *wf = malloc((size_t)a->ngranules * sizeof(uint32_t));
        if (wc == NULL || wf == NULL) {
            free(wc);
            free(wf);
            checkFail("out of memory checking the index");
        }
        memset(wc, 0xff, (size_t)a->ngranules * sizeof(uint32_t));
        memset(wf, 0xff, (size_t)a->ngranules * sizeof(uint32_t));
        for (uint32_t i = head; i != ALLOC_NONE; i = nodes[i].addr_next) {
            const allocNode *n = &nodes[i];
            if (nodeState(n) != ALLOC_USED) continue;
            uint64_t g0 = n->offset / gsz;
            if (wf[g0] == ALLOC_NONE) wf[g0] = i;
            for (uint64_t g = (n->offset + gsz - 1) / gsz; g * gsz < n->offset + nodeSize(n); g++) wc[g] = i;
        }
        int bad = 0;
        uint64_t g;
        for (g = 0; g < a->ngranules && !bad; g++) bad = a->cover[g] != wc[g] || a->first[g] != wf[g];
        free(wc);
        free(wf);
        if (bad) checkFail("granule %llu: index disagrees with the address list", (unsigned long long)(g - 1));
    }
    return 0;
}
