/* segment.c -- segments: the server's own pool and mounted remote memory.
 *
 * Every segment, local or remote, is described the same way (SPEC §3: id,
 * name, owner, size, tier, host, endpoints, base, rkey) and carved by its
 * own offset allocator (alloc.c), whose metadata lives here, never in the
 * segment: a remote segment's memory is not even mapped in this process.
 * Segments sit in a table indexed by slot; an object records its slot, so
 * finding a replica's segment is one array load. Slots are reused, ids
 * never are (a 64-bit counter), so a client that cached "segment 7" can
 * never be sent into a different segment that happens to reuse a slot.
 *
 * The server's own pool:
 *
 * The pool is one memfd, mapped once, MAP_SHARED: one mapping for the
 * server's lifetime means no page-table churn per value, and a memfd can be
 * handed to a client on the same host (SHM.ATTACH, SCM_RIGHTS) so it copies
 * bytes in and out of the pool directly, without the server in the path.
 *
 * Faulting a fresh page costs ~12 us per 4 KiB on these machines, which is
 * 3 ms of a 1 MiB SET if left to the first write. So the pool is pre-faulted,
 * but in a background thread (MADV_POPULATE_WRITE in 64 MiB steps): the
 * server accepts connections at once instead of after ~1 s per GiB, and a
 * write that races the thread just faults the page itself. Populate does
 * not change page contents, so the race is harmless.
 *
 * Hugepages (segment-hugepages yes) use MFD_HUGETLB and need pages reserved
 * in /proc/sys/vm/nr_hugepages; failure says so. NUMA binding
 * (segment-numa-node N) uses libnuma before any page is touched, so the
 * pages are born on that node.
 */
#include "segment.h"

#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dict.h"
#include "server.h"
#include "sds.h"
#include "zmalloc.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PREFAULT_STEP (64ULL * 1024 * 1024)

static void *prefaultThread(void *arg) {
    segment *s = arg;
    long pagesz = sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0; off < s->size && !s->prefault_stop; off += PREFAULT_STEP) {
        uint64_t len = s->size - off < PREFAULT_STEP ? s->size - off : PREFAULT_STEP;
        if (madvise(s->mem + off, len, MADV_POPULATE_WRITE) == -1) {
            /* Older kernels: touch one byte per page. Reading then writing
             * the same byte keeps any value the event loop already stored. */
            for (uint64_t p = 0; p < len; p += (uint64_t)pagesz) {
                volatile char *c = s->mem + off + p;
                __atomic_fetch_add(c, 0, __ATOMIC_RELAXED);
            }
        }
        s->prefaulted = off + len;
    }
    return NULL;
}

static segment *segmentNew(const char *name, uint64_t size, const char *owner) {
    segment *s = zcalloc(sizeof(*s));
    s->fd = -1;
    s->mem = MAP_FAILED;
    s->name = zstrdup(name);
    s->owner = zstrdup(owner);
    s->size = size;
    s->numa_node = -1;
    return s;
}

segment *segmentCreateRemote(const char *name, uint64_t size, const char *owner) {
    segment *s = segmentNew(name, size, owner);
    s->mem = NULL; /* not mapped here: readers must not mistake it for local */
    s->alloc = allocCreate(size, SEGMENT_ALIGN);
    if (s->alloc == NULL) {
        segmentRelease(s);
        return NULL;
    }
    return s;
}

segment *segmentCreateLocal(const char *name, uint64_t size, int hugepages, int numa_node,
                            int prefault, char *err, size_t errlen) {
    segment *s = segmentNew(name, size, "self");
    s->hugepages = hugepages;
    s->numa_node = numa_node;

    s->fd = memfd_create(name, MFD_CLOEXEC | (hugepages ? MFD_HUGETLB : 0));
    if (s->fd == -1) {
        snprintf(err, errlen, "memfd_create(%s%s): %s", name, hugepages ? ", hugetlb" : "",
                 strerror(errno));
        goto err;
    }
    if (ftruncate(s->fd, (off_t)size) == -1) {
        snprintf(err, errlen, "cannot size segment '%s' to %llu bytes: %s%s", name,
                 (unsigned long long)size, strerror(errno),
                 hugepages ? " (size must be a multiple of the hugepage size)" : "");
        goto err;
    }
    s->mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->mem == MAP_FAILED) {
        snprintf(err, errlen, "cannot map segment '%s' (%llu bytes): %s%s", name,
                 (unsigned long long)size, strerror(errno),
                 hugepages ? " (are hugepages reserved in /proc/sys/vm/nr_hugepages?)" : "");
        goto err;
    }
    /* Transparent huge pages for the pool where the kernel allows them for
     * shared memory (shmem_enabled "advise", "within_size" or "always"): a
     * fault then maps 2 MiB, and every client that maps the pool needs 512x
     * fewer page-table entries. Elsewhere the advice is ignored. */
    if (!hugepages) madvise(s->mem, size, MADV_HUGEPAGE);
    if (numa_node >= 0) {
        if (numa_available() == -1) {
            snprintf(err, errlen, "segment-numa-node %d: NUMA is not available on this machine",
                     numa_node);
            goto err;
        }
        if (numa_node > numa_max_node()) {
            snprintf(err, errlen, "segment-numa-node %d: this machine's highest node is %d",
                     numa_node, numa_max_node());
            goto err;
        }
        numa_tonode_memory(s->mem, size, numa_node);
    }
    s->alloc = allocCreate(size, SEGMENT_ALIGN);
    if (s->alloc == NULL) {
        snprintf(err, errlen, "segment '%s': size %llu is too small", name,
                 (unsigned long long)size);
        goto err;
    }
    /* The data plane (SEG.READ/SEG.WRITE) maps a byte back to its extent.
     * Granules of 4 KiB, coarser past 1 GiB: the index stays under 2 MiB. */
    uint64_t granule = 4096;
    while (size / granule > (UINT64_C(1) << 18)) granule <<= 1;
    if (allocEnableIndex(s->alloc, granule) != 0) {
        snprintf(err, errlen, "segment '%s': out of memory for its index", name);
        goto err;
    }
    if (prefault) {
        if (pthread_create(&s->prefault_thread, NULL, prefaultThread, s) == 0)
            s->prefault_running = 1;
        else
            prefaultThread(s);
    }
    return s;
err:
    segmentRelease(s);
    return NULL;
}

/* The memory a pool on this machine can have: physical memory, or less
 * where a cgroup (a container, a systemd slice) caps this process. */
static uint64_t readCgroupLimit(const char *path) {
    FILE *fp = fopen(path, "r");
    if (fp == NULL) return 0;
    char buf[64] = "";
    int ok = fgets(buf, sizeof(buf), fp) != NULL;
    fclose(fp);
    if (!ok || !strncmp(buf, "max", 3)) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf) return 0;
    return (uint64_t)v;
}

static uint64_t segmentReadMachineMemory(char *desc, size_t desclen);

uint64_t segmentMachineMemory(char *desc, size_t desclen) {
    /* Read once: INFO memory asks on every call, and neither changes under a running server. */
    static uint64_t cached;
    static char cached_desc[64];
    if (cached) {
        snprintf(desc, desclen, "%s", cached_desc);
        return cached;
    }
    uint64_t bytes = segmentReadMachineMemory(cached_desc, sizeof(cached_desc));
    snprintf(desc, desclen, "%s", cached_desc);
    cached = bytes;
    return bytes;
}

static uint64_t segmentReadMachineMemory(char *desc, size_t desclen) {
    long pages = sysconf(_SC_PHYS_PAGES), pagesz = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && pagesz > 0 ? (uint64_t)pages * (uint64_t)pagesz : 0;
    uint64_t cg = readCgroupLimit("/sys/fs/cgroup/memory.max"); /* cgroup v2 */
    if (cg == 0) cg = readCgroupLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"); /* v1 */
    if (cg && (phys == 0 || cg < phys)) {
        snprintf(desc, desclen, "the cgroup memory limit");
        return cg;
    }
    snprintf(desc, desclen, "physical memory");
    return phys;
}

/* How the pool's pages are backed, for the start-up log: transparent huge
 * pages for shared memory depend on a system setting the server cannot change. */
void segmentDescribePages(const segment *s, char *buf, size_t len) {
    if (s->hugepages) {
        snprintf(buf, len, "hugetlb pages");
        return;
    }
    char mode[128] = "";
    FILE *fp = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (fp) {
        char line[256];
        if (fgets(line, sizeof(line), fp)) {
            char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
            if (open && close) snprintf(mode, sizeof(mode), "%.*s", (int)(close - open - 1), open + 1);
        }
        fclose(fp);
    }
    if (!strcmp(mode, "advise") || !strcmp(mode, "always") || !strcmp(mode, "within_size") ||
        !strcmp(mode, "force"))
        snprintf(buf, len, "transparent huge pages (shmem_enabled %s)", mode);
    else
        snprintf(buf, len, "4 KiB pages (shmem_enabled %s: 'advise' in "
                           "/sys/kernel/mm/transparent_hugepage/shmem_enabled gives 2 MiB pages)",
                 mode[0] ? mode : "unknown");
}

void segmentRelease(segment *s) {
    if (s == NULL) return;
    if (s->prefault_running) {
        s->prefault_stop = 1;
        pthread_join(s->prefault_thread, NULL);
    }
    if (s->alloc) allocRelease(s->alloc);
    if (s->mem != MAP_FAILED && s->mem != NULL) munmap(s->mem, s->size);
    if (s->fd != -1) close(s->fd);
    zfree(s->name);
    zfree(s->owner);
    zfree(s->tenant);
    zfree(s->host);
    zfree(s->peer_ip);
    zfree(s->token);
    zfree(s->identity);
    zfree(s->rkey);
    for (int i = 0; i < s->nendpoints; i++) zfree(s->endpoints[i]);
    zfree(s);
}

/* ---- the table ----------------------------------------------------------- */

segment **segtab;
uint32_t segtabLen;
static uint32_t segtabCap, segtabUsed;
static uint16_t *slotGen; /* per slot, survives the segment that used it */
static uint64_t nextSegmentId = SEGMENT_SELF_ID;

/* In a cluster, a client process mounts one slice of its memory on every
 * shard and serves them all from one listener, which tells them apart by
 * segment id: so each node numbers mounted segments from a random base of
 * its own (the pool keeps id 1 everywhere), and ids from two shards do not
 * collide. */
void segmentSetNextId(uint64_t id) {
    if (id > nextSegmentId) nextSegmentId = id;
}

/* Segments in the table per tenant (tenant-max-segments), kept as the
 * table changes: a tenant's MOUNT asks for its count, and a walk of the
 * table (up to 65535 slots) per MOUNT would cost every tenant for all of
 * them. Keys: the tenant names (sds, owned); values: the count. */
static void tenantFree(void *key) { sdsfree(key); }
static dictType tenantCountType = {dictSdsHash, dictSdsEqual, tenantFree, NULL};
static dict *tenantSegments;

static void tenantCountAdd(const char *tenant, int delta) {
    if (tenant == NULL) return;
    if (tenantSegments == NULL) tenantSegments = dictCreate(&tenantCountType);
    sds name = sdsnew(tenant);
    dictEntry *de = dictFind(tenantSegments, name);
    if (de == NULL) {
        if (delta > 0) dictAdd(tenantSegments, name, (void *)(uintptr_t)delta); /* the dict owns name */
        else sdsfree(name); /* a removal always follows its add: not reached */
        return;
    }
    uintptr_t n = (uintptr_t)dictGetVal(de);
    if (delta < 0 && n <= (uintptr_t)-delta) dictDelete(tenantSegments, name); /* its last segment went */
    else de->val = (void *)(uintptr_t)((intptr_t)n + delta);
    sdsfree(name);
}

uint32_t segmentCountTenant(const char *tenant) {
    if (tenantSegments == NULL) return 0;
    sds name = sdsnew(tenant);
    dictEntry *de = dictFind(tenantSegments, name);
    sdsfree(name);
    return de ? (uint32_t)(uintptr_t)dictGetVal(de) : 0;
}

/* Finding a segment by id, by name, or a free slot is O(1): segments grow
 * with use (up to 65535 mounted metadata-only ones), and a SEG.READ names
 * its segment by id on the data path. Ids index a dict; names a dict of
 * chains, since two tenants may choose one name (acl.c), each chain in slot
 * order as the table walk it replaces found them; free slots a stack. */
static dictType segmentIdType = {dictIntHash, dictIntEqual, NULL, NULL};
static dictType segmentNameType = {dictCStrHash, dictCStrEqual, NULL, NULL}; /* keys: the head's name */
static dict *segmentsById, *segmentsByName;
static uint32_t *freeSlots, nfreeSlots; /* below segtabLen, free, not retired; may hold stale ones */
static uint8_t *slotFreeListed;

static void nameIndexAdd(segment *s) {
    dictEntry *de = dictFind(segmentsByName, s->name);
    if (de == NULL) {
        s->name_next = NULL;
        dictAdd(segmentsByName, s->name, s);
        return;
    }
    segment *head = dictGetVal(de);
    if (s->slot < head->slot) { /* the new head: its name becomes the key */
        s->name_next = head;
        dictDelete(segmentsByName, head->name);
        dictAdd(segmentsByName, s->name, s);
        return;
    }
    segment *p = head;
    while (p->name_next && p->name_next->slot < s->slot) p = p->name_next;
    s->name_next = p->name_next;
    p->name_next = s;
}

static void nameIndexRemove(segment *s) {
    segment *head = dictFetchValue(segmentsByName, s->name);
    if (head == s) {
        dictDelete(segmentsByName, s->name);
        if (s->name_next) dictAdd(segmentsByName, s->name_next->name, s->name_next);
    } else {
        for (segment *p = head; p; p = p->name_next)
            if (p->name_next == s) {
                p->name_next = s->name_next;
                break;
            }
    }
    s->name_next = NULL;
}

/* Distinct hosts among the table's segments (a segment with no host is
 * one of its own and never counted): placement draws need to know when a
 * put's replicas already cover every host, to stop looking for another.
 * Keys: host names (owned copies); values: segments on that host. */
static dictType segmentHostType = {dictCStrHash, dictCStrEqual, zfree, NULL};
static dict *segmentHosts;

static void hostCount(const char *host, int delta) {
    if (host == NULL) return;
    if (segmentHosts == NULL) segmentHosts = dictCreate(&segmentHostType);
    dictEntry *de = dictFind(segmentHosts, host);
    if (de == NULL) {
        if (delta > 0) dictAdd(segmentHosts, zstrdup(host), (void *)(uintptr_t)1);
        return;
    }
    uintptr_t n = (uintptr_t)dictGetVal(de) + (uintptr_t)(intptr_t)delta;
    if (n == 0) dictDelete(segmentHosts, host);
    else de->val = (void *)n;
}

uint32_t segmentHostCount(void) { return segmentHosts ? (uint32_t)dictSize(segmentHosts) : 0; }

static int segmentInTable(const segment *s) { return s->slot < segtabLen && segtab[s->slot] == s; }

void segmentSetHost(segment *s, char *host) {
    if (segmentInTable(s)) hostCount(s->host, -1);
    zfree(s->host);
    s->host = host;
    if (segmentInTable(s)) hostCount(s->host, 1);
}

static void freeSlotPush(uint32_t slot) {
    if (slotFreeListed[slot]) return;
    slotFreeListed[slot] = 1;
    freeSlots[nfreeSlots++] = slot;
}

/* A free slot below segtabLen, or segtabLen itself if none. Entries made
 * stale by the table's trimming (at or past segtabLen, or taken again
 * through the end) are dropped as they come up: each was pushed once. */
static uint32_t freeSlotPop(void) {
    while (nfreeSlots) {
        uint32_t slot = freeSlots[--nfreeSlots];
        slotFreeListed[slot] = 0;
        serverVisit(VISITS_SEGMENTS, 1);
        if (slot < segtabLen && segtab[slot] == NULL && slotGen[slot] != UINT16_MAX) return slot;
    }
    return segtabLen;
}

int segmentTableAdd(segment *s) {
    if (segmentsById == NULL) {
        segmentsById = dictCreate(&segmentIdType);
        segmentsByName = dictCreate(&segmentNameType);
    }
    /* A slot whose 16-bit generation is used up is retired, never reused:
     * a stale replica anywhere could otherwise match a new segment again. */
    uint32_t slot = freeSlotPop();
    if (slot == segtabLen) {
        if (segtabLen >= SEGMENT_MAX_SLOTS) return -1; /* replicas hold a 16-bit slot */
        if (segtabLen == segtabCap) {
            segtabCap = segtabCap ? segtabCap * 2 : 16;
            segtab = zrealloc(segtab, sizeof(segment *) * segtabCap);
            slotGen = zrealloc(slotGen, sizeof(uint16_t) * segtabCap);
            memset(slotGen + segtabLen, 0, sizeof(uint16_t) * (segtabCap - segtabLen));
            freeSlots = zrealloc(freeSlots, sizeof(uint32_t) * segtabCap);
            slotFreeListed = zrealloc(slotFreeListed, segtabCap);
            memset(slotFreeListed + segtabLen, 0, segtabCap - segtabLen);
        }
        segtabLen++;
    }
    s->slot = slot;
    s->gen = ++slotGen[slot];
    s->id = nextSegmentId++;
    segtab[slot] = s;
    segtabUsed++;
    dictAdd(segmentsById, (void *)(uintptr_t)s->id, s);
    nameIndexAdd(s);
    hostCount(s->host, 1);
    tenantCountAdd(s->tenant, 1);
    return 0;
}

/* Ids are never reused: the next one handed out is past every id the log
 * names, whatever base this start drew (cluster.c). */
int segmentTableAddWithId(segment *s, uint64_t id) {
    if (id <= SEGMENT_SELF_ID || segmentLookupId(id)) return -1;
    uint64_t next = nextSegmentId;
    nextSegmentId = id;
    if (segmentTableAdd(s) != 0) {
        nextSegmentId = next;
        return -1;
    }
    nextSegmentId = next > id ? next : id + 1;
    return 0;
}

void segmentTableRemove(segment *s) {
    segtab[s->slot] = NULL;
    segtabUsed--;
    dictDelete(segmentsById, (void *)(uintptr_t)s->id);
    nameIndexRemove(s);
    hostCount(s->host, -1);
    tenantCountAdd(s->tenant, -1);
    if (slotGen[s->slot] != UINT16_MAX) freeSlotPush(s->slot);
    /* Trailing free slots are forgotten, unless retired (their generation
     * must stay remembered); the free stack drops them as they come up. */
    while (segtabLen && segtab[segtabLen - 1] == NULL && slotGen[segtabLen - 1] != UINT16_MAX) segtabLen--;
}

uint32_t segmentCount(void) { return segtabUsed; }

segment *segmentNamed(const char *name) {
    serverVisit(VISITS_SEGMENTS, 1);
    return segmentsByName ? dictFetchValue(segmentsByName, name) : NULL;
}

/* The first by slot of those so named (any tenant's). */
segment *segmentLookupName(const char *name) { return segmentNamed(name); }

segment *segmentLookupId(uint64_t id) {
    serverVisit(VISITS_SEGMENTS, 1);
    return segmentsById ? dictFetchValue(segmentsById, (void *)(uintptr_t)id) : NULL;
}

segment *segmentLookup(const char *name_or_id) {
    segment *s = segmentLookupName(name_or_id);
    if (s) return s;
    char *end;
    errno = 0;
    unsigned long long id = strtoull(name_or_id, &end, 10);
    if (*name_or_id >= '0' && *name_or_id <= '9' && *end == '\0' && errno == 0) return segmentLookupId(id);
    return NULL;
}

static const char *tierNames[] = {"memory", "disk", "vram"};

const char *segmentTierName(int tier) { return tier >= 0 && tier <= SEG_TIER_VRAM ? tierNames[tier] : "?"; }

int segmentTierFromName(const char *name) {
    for (int i = 0; i <= SEG_TIER_VRAM; i++)
        if (!strcasecmp(tierNames[i], name)) return i;
    return -1;
}
