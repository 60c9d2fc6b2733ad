/* mc_shm.c -- one mapping per shared-memory segment per process.
 *
 * A segment reachable over a unix socket hands its memory out as a memfd
 * (SHM.ATTACH, SCM_RIGHTS); the handle maps it and copies with memcpy. Each
 * handle used to map it for itself, populated (MAP_POPULATE): every new
 * handle -- an engine thread's, each mc_async clone, each handle of the
 * Python binding's pool -- paid the page tables of the whole segment before
 * its first copy (852 ms on an 8 GiB pool, about 2 MiB of page tables per
 * GiB), and the process held one more mapping of the pool per handle.
 *
 * Now the process holds one mapping per segment, in a table shared by all
 * its handles, refcounted: a handle's segment takes a reference when it
 * attaches and drops it when the handle closes; the last one unmaps.
 *
 * Identity. An entry is found again by what identifies the memory, not by
 * what names it: the file's device and inode number, its birth time, and
 * the slice (offset, size) of the file the segment is. Names are not memory:
 * segment ids are per server and a restarted server gives its new pool
 * id 1 again, under the same socket path and port; a hosted segment that
 * is mounted again gets a new id over the same memory. Keyed by name, a
 * restarted server's pool would be read through the old server's mapping;
 * keyed by memory, the handle still asks SHM.ATTACH (one round trip per
 * handle and segment), and the fd it gets says which memory it is:
 *  - while an entry exists its mapping holds a reference to the file, so
 *    the inode is alive and its number cannot be given to a new file on
 *    the same device: a new server's memfd is another (dev, ino), never
 *    the old entry. (memfd numbers on shmem are 64-bit counters since
 *    Linux 5.9.) Where numbers come from the 32-bit counter that wraps --
 *    hugetlbfs memfds, older kernels -- the birth time (statx), which never
 *    changes, tells a recycled number apart where the file system keeps
 *    one. Not the change time: shared memory moves it as its pages are
 *    allocated, so a pool still being pre-faulted by its server would look
 *    like new memory at every attach.
 *  - the same memory under a new name (a remount) finds the entry: the
 *    bytes at each offset are the same bytes, so sharing is exact.
 *  - offset and size: slices of one hosted memfd (one per cluster primary)
 *    are different segments of one file, each its own mapping.
 *
 * Population: lazy, by the range being copied. The mapping is made without
 * MAP_POPULATE (constant time whatever the segment's size). Before each
 * copy, mcShmPrepare populates the page tables of the 2 MiB chunks the copy
 * touches that no copy of this process touched yet, with one
 * madvise(MADV_POPULATE_READ) per run of such chunks; a bitmap of chunks
 * (one bit per 2 MiB, atomic, shared by the handles) makes this a few bit
 * tests and no system call once a chunk is in. Why so:
 *  - not the whole segment at attach: that is the cost above, paid even for
 *    memory the process never reads.
 *  - not in a background thread: it would still take a core for seconds
 *    and the page tables of the whole pool (200 MiB per 100 GiB) in every
 *    engine process, racing the engine's own first copies for the
 *    process's mmap lock.
 *  - not plain page faults inside memcpy: a write fault on a shared file
 *    maps one 4 KiB page, so a 16 MiB put into fresh space took 4096 faults
 *    (test_mooncake first-touch counts them). A read populate maps the
 *    pages writable -- shared memory keeps no dirty accounting, so the
 *    mapping's protection already allows writes -- and each of its faults
 *    maps the neighbouring resident pages too (fault-around, 64 KiB), so
 *    one system call per chunk does with 32 faults what memcpy did with 512.
 * The page tables of a chunk stay until the mapping goes: the server never
 * punches holes in its pool. If the kernel drops them anyway (swapped
 * shared memory), copies fault them back in; the bitmap only skips work.
 * Kernels before 5.14 answer EINVAL: then page faults do the work, and a
 * process-wide flag stops asking. Under a hypervisor that shadows the
 * guest's page tables (the PVM VM of BENCHMARKS.md) the first access to
 * each page through a new mapping costs about 20 us whatever filled the
 * page tables; that is now paid once per process, not once per handle.
 *
 * Locking: one mutex around the table (acquire, release), held while
 * mapping -- an mmap without population is a constant cost -- so two
 * handles attaching at once make one mapping; the last release unmaps
 * outside it. Copies never take it: an entry stays mapped while any
 * handle's segment holds it.
 *
 * Fork: the atfork handlers hold the mutex across fork(), so a child never
 * inherits it locked by a thread that does not exist there. The child gets
 * the mappings (MAP_SHARED survives fork), the table and the handles as one
 * consistent copy: the counts still match its handles, and closing them
 * there unmaps its own copies. fork() copies no page tables of shared
 * file mappings, so the child's chunk bits overstate: its first copies of
 * a chunk fault, as they would without the populate. (Using one handle
 * from both sides of a fork is unsupported anyway: they would share its
 * connections.)
 *
 * Device copies (CUDA): a device buffer is copied straight into or out of
 * the mapping with cudaMemcpy (mooncake.c), no bounce buffer. The copy runs
 * at the link's speed only if the mapping is page-locked, so the first
 * device transfer that touches a mapping registers all of it with
 * cudaHostRegister (mcShmCudaRegister: once per mapping and process, about
 * 16 ms per 256 MiB on an H200), and the last release unregisters it
 * before unmapping. A refused registration is remembered and not retried:
 * copies then go to pageable memory, still one copy per byte, at the
 * unpinned rate. Host-only processes never reach any of this.
 *
 * The table is a list searched at attach only (once per handle and
 * segment; it holds the segments the process maps, a handful), never on a
 * copy.
 */
#include "mc_shm.h"
#include "mc_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#ifdef MADV_POPULATE_READ
#define MC_POPULATE_READ MADV_POPULATE_READ
#else
#define MC_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define MC_SHM_CHUNK (2u << 20) /* a huge page: populated as one where the pool has them */

struct mcShm {
    dev_t dev;
    uint64_t ino;
    int64_t btime_sec;           /* 0 where the file system keeps no birth time */
    uint32_t btime_nsec;
    uint64_t off, size;          /* the slice of the file */
    char *map;
    int refs;                    /* under tableLock */
    uint64_t *chunks;            /* bit i: chunk i populated */
    int cuda;                    /* page-locked for device copies: 0 not tried, 1 yes, -1 refused */
    struct mcShm *prev, *next;
};

static pthread_mutex_t tableLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atforkOnce = PTHREAD_ONCE_INIT;
static mcShm *table;
static int populateOff; /* the kernel has no MADV_POPULATE_READ */
static pthread_mutex_t cudaLock = PTHREAD_MUTEX_INITIALIZER; /* one registration at a time */

static void forkPrepare(void) { pthread_mutex_lock(&tableLock); }
static void forkParent(void) { pthread_mutex_unlock(&tableLock); }
static void forkChild(void) { pthread_mutex_unlock(&tableLock); }
static void atforkInstall(void) { pthread_atfork(forkPrepare, forkParent, forkChild); }

/* The identity of fd's file (see the design comment) into key's fields,
 * and its size. Without statx (a kernel before 4.11, a seccomp filter that
 * predates it) fstat gives all but the birth time. */
static int fileKey(int fd, mcShm *key, uint64_t *fsize) {
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME | STATX_SIZE, &sx) == -1) {
        struct stat st;
        if ((errno != ENOSYS && errno != EPERM) || fstat(fd, &st) == -1) return -1;
        *fsize = (uint64_t)st.st_size;
        key->dev = st.st_dev;
        key->ino = st.st_ino;
        return 0;
    }
    *fsize = sx.stx_size;
    key->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    key->ino = sx.stx_ino;
    key->btime_sec = sx.stx_mask & STATX_BTIME ? sx.stx_btime.tv_sec : 0;
    key->btime_nsec = sx.stx_mask & STATX_BTIME ? sx.stx_btime.tv_nsec : 0;
    return 0;
}

static int sameMemory(const mcShm *m, const mcShm *key) {
    return m->dev == key->dev && m->ino == key->ino && m->btime_sec == key->btime_sec &&
           m->btime_nsec == key->btime_nsec && m->off == key->off && m->size == key->size;
}

mcShm *mcShmAcquire(int fd, uint64_t off, uint64_t size, char *err, size_t errlen) {
    mcShm key = {.off = off, .size = size}, *m = NULL;
    uint64_t fsize;
    if (size == 0 || size > SIZE_MAX || off > (uint64_t)INT64_MAX) {
        snprintf(err, errlen, "segment slice of %llu bytes at %llu", (unsigned long long)size,
                 (unsigned long long)off);
        return NULL;
    }
    if (fileKey(fd, &key, &fsize) == -1) {
        snprintf(err, errlen, "statx of the segment's file: %s", strerror(errno));
        return NULL;
    }
    /* A slice past the file's end would be a SIGBUS at the first copy. */
    if (off > fsize || size > fsize - off) {
        snprintf(err, errlen, "slice of %llu bytes at %llu of a %llu-byte file", (unsigned long long)size,
                 (unsigned long long)off, (unsigned long long)fsize);
        return NULL;
    }
    pthread_once(&atforkOnce, atforkInstall);
    pthread_mutex_lock(&tableLock);
    for (m = table; m; m = m->next)
        if (sameMemory(m, &key)) {
            m->refs++;
            goto out;
        }
    uint64_t nchunks = (size + MC_SHM_CHUNK - 1) / MC_SHM_CHUNK;
    m = malloc(sizeof(*m));
    if (m) *m = key;
    if (m) m->chunks = calloc((size_t)((nchunks + 63) / 64), sizeof(uint64_t));
    if (m == NULL || m->chunks == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    m->map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    if (m->map == MAP_FAILED) {
        snprintf(err, errlen, "mmap of %llu bytes: %s", (unsigned long long)size, strerror(errno));
        goto err;
    }
    m->refs = 1;
    m->next = table;
    if (table) table->prev = m;
    table = m;
out:
    pthread_mutex_unlock(&tableLock);
    return m;
err:
    pthread_mutex_unlock(&tableLock);
    if (m) free(m->chunks);
    free(m);
    return NULL;
}

void mcShmRetain(mcShm *m) {
    pthread_mutex_lock(&tableLock);
    m->refs++;
    pthread_mutex_unlock(&tableLock);
}

void mcShmRelease(mcShm *m) {
    if (m == NULL) return;
    pthread_mutex_lock(&tableLock);
    int last = --m->refs == 0;
    if (last) {
        if (m->prev) m->prev->next = m->next;
        else table = m->next;
        if (m->next) m->next->prev = m->prev;
    }
    pthread_mutex_unlock(&tableLock);
    if (!last) return;
    if (m->cuda == 1) mcCudaHostUnregister(m->map);
    munmap(m->map, (size_t)m->size); /* tearing down page tables: not under the lock */
    free(m->chunks);
    free(m);
}

char *mcShmBase(const mcShm *m) { return m->map; }

int mcShmCudaRegister(mcShm *m, char *err, size_t errlen) {
    int st = __atomic_load_n(&m->cuda, __ATOMIC_ACQUIRE);
    if (st) return st;
    pthread_mutex_lock(&cudaLock);
    st = m->cuda;
    if (st == 0) {
        st = mcCudaHostRegister(m->map, (size_t)m->size, err, errlen) == 0 ? 1 : -1;
        __atomic_store_n(&m->cuda, st, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cudaLock);
    return st;
}

/* Populates chunks [from, to) and marks them; a failure leaves them to faults. */
static void populateRun(mcShm *m, uint64_t from, uint64_t to) {
    uint64_t start = from * MC_SHM_CHUNK, end = to * MC_SHM_CHUNK;
    if (end > m->size) end = m->size;
    if (madvise(m->map + start, (size_t)(end - start), MC_POPULATE_READ) == -1) {
        if (errno == EINVAL) __atomic_store_n(&populateOff, 1, __ATOMIC_RELAXED);
        return;
    }
    for (uint64_t i = from; i < to; i++)
        __atomic_fetch_or(&m->chunks[i / 64], 1ULL << (i % 64), __ATOMIC_RELEASE);
}

void mcShmPrepare(mcShm *m, uint64_t off, uint64_t len) {
    if (len == 0 || off >= m->size || __atomic_load_n(&populateOff, __ATOMIC_RELAXED)) return;
    if (len > m->size - off) len = m->size - off;
    uint64_t first = off / MC_SHM_CHUNK, last = (off + len - 1) / MC_SHM_CHUNK, run = UINT64_MAX;
    for (uint64_t i = first; i <= last; i++) {
        int in = (__atomic_load_n(&m->chunks[i / 64], __ATOMIC_ACQUIRE) >> (i % 64)) & 1;
        if (!in && run == UINT64_MAX) run = i;
        if (in && run != UINT64_MAX) {
            populateRun(m, run, i);
            run = UINT64_MAX;
        }
    }
    if (run != UINT64_MAX) populateRun(m, run, last + 1);
}
