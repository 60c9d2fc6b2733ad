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
 * Cold memory is copied through the file, hot memory through the mapping.
 * The mapping is made without MAP_POPULATE (constant time whatever the
 * segment's size), and a copy (mcShmCopy) decides per 2 MiB chunk:
 *  - a chunk this process has copied fewer than warm-after times is read
 *    with pread on the segment's fd (kept, dup'ed, beside the mapping), and
 *    one it never copied is written with pwrite: the kernel copies through
 *    its own map of the pages, so the process builds no page tables for
 *    memory it touches once. Writes get one visit only, and none where
 *    warm-after is 1: shared memory's write takes the file's lock, so
 *    pwrites to one pool from all the threads and processes of a host go
 *    one at a time (4 threads putting 16 MiB objects: 5 GB/s against 17
 *    through the mapping, measured), where preads and memcpy run side by
 *    side. On the PVM
 *    VM of BENCHMARKS.md a first access to a page through a new user
 *    mapping costs about 20 us whatever filled the page tables: a 16 MiB
 *    memcpy out of a fresh mapping took 40 ms, a pread of it 2.4 ms. On
 *    hardware that walks guest page tables itself the populate below costs
 *    about what the copy does, and the fd copy about 1.3x a warm memcpy.
 *  - past that count the chunk is populated (one madvise(MADV_POPULATE_READ)
 *    of 2 MiB: a read populate maps the pages writable -- shared memory
 *    keeps no dirty accounting -- and fault-around maps 64 KiB per fault, so
 *    32 faults where memcpy would take 512) and copied with memcpy from then
 *    on; a per-chunk byte (atomic, shared by the handles) says which.
 * warm-after is ski rental: copy through the file until the rent paid
 * equals the price of buying, which costs at most twice the best choice
 * made knowing the future, whatever the pattern of copies. The process
 * measures both once, at its first populate of a chunk after four timed fd
 * copies of at least 64 KiB: the populate and the first memcpy through it,
 * scaled to a chunk, against the fastest of those fd copies, scaled to a
 * chunk; warm-after becomes their ratio, from 1 to 8. Until measured it is
 * 2. The bound of 8 is the price of data read over and over: up to 8 reads
 * of a chunk at the fd's rate (half memcpy's on the PVM VM, where the ratio
 * comes out at 15-45) before the mapping's, instead of up to 45. MC_SHM_WARM_AFTER=n fixes it (0:
 * every chunk is populated at its first copy, the old behaviour).
 * Why not the whole segment at attach: that was the cost above, paid even
 * for memory the process never reads. Why not a background thread: it
 * would take a core for seconds and the page tables of the whole pool
 * (200 MiB per 100 GiB) in every engine process.
 * The page tables of a chunk stay until the mapping goes: the server never
 * punches holes in its pool. If the kernel drops them anyway (swapped
 * shared memory), copies fault them back in; the chunk byte only skips
 * work. Kernels before 5.14 answer the populate EINVAL: then page faults do
 * that work, and a process-wide flag stops asking. A failed fd copy falls
 * back to the mapping, so either path answers the same, and the mapping
 * stops using its file (a pool of hugetlbfs pages has no write; a buffer
 * the kernel cannot copy to or from would crash memcpy as well). Views (mc_view.c) and device copies read the
 * mapping itself: their ranges are populated first (mcShmPrepare).
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
 * file mappings, so the child's chunk bytes overstate: its first copies of
 * a populated chunk fault, as they would without the populate. The fd is
 * inherited too (close-on-exec, not close-on-fork). A mapping the parent
 * page-locked for device copies is not locked for the child (cuda reset:
 * the child locks it afresh if it copies to a device). Handles themselves
 * are the parent's only: in the child every call on one fails and closing
 * it frees the child's copies (mooncake.c, "Fork"); its segments' last
 * release here unmaps the child's mapping, never the parent's.
 *
 * Device copies (CUDA): a device buffer is copied straight into or out of
 * the mapping with cudaMemcpy (mc_xfer.c), no bounce buffer. The copy runs
 * at the link's speed only if the memory is page-locked, so a device
 * transfer registers the windows of the mapping it touches with
 * cudaHostRegister (mcShmCudaWindow: once per window and process) and the
 * last release unregisters them before unmapping. Windows, not the whole
 * mapping: registration costs about 16 ms per 256 MiB on an H200 and pins
 * every page it covers, so locking a pool of hundreds of GiB at the first
 * transfer stalled that transfer for seconds and pinned memory no device
 * copy would touch. A window is 256 MiB (MC_CUDA_REGISTER_WINDOW sets
 * another multiple of 2 MiB, for tests), and a copy is cut at window ends
 * so each cudaMemcpy lies in one registration. A refused registration is
 * remembered for its window and not retried: copies there go to pageable
 * memory, still one copy per byte, at the unpinned rate. Host-only
 * processes never reach any of this.
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
#include <time.h>
#include <unistd.h>

#ifdef MADV_POPULATE_READ
#define MC_POPULATE_READ MADV_POPULATE_READ
#else
#define MC_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define MC_SHM_CHUNK (2u << 20) /* a huge page: populated as one where the pool has them */
#define MC_CHUNK_MAPPED 0xff     /* a chunk's byte once populated; below it, its fd copies so far */
#define MC_WARM_MAX 64           /* bounds warm-after, below MC_CHUNK_MAPPED */
#define MC_WARM_MEASURED_MAX 8   /* bounds a measured one (the design comment) */
#define MC_CALIBRATE_MIN (64u << 10) /* copies shorter than this are not timed */
#define MC_CALIBRATE_COPIES 4        /* timed fd copies before the first measured populate */

struct mcShm {
    dev_t dev;
    uint64_t ino;
    int64_t btime_sec;           /* 0 where the file system keeps no birth time */
    uint32_t btime_nsec;
    uint64_t off, size;          /* the slice of the file */
    char *map;
    int fd;                      /* the file itself, for the copies of cold chunks */
    int nofd;                    /* the file refused a copy (hugetlbfs has no write): mapping only */
    int refs;                    /* under tableLock */
    uint8_t *chunks;             /* chunk i: fd copies so far, or MC_CHUNK_MAPPED */
    int8_t *cuda;                /* window w page-locked for device copies: 0 not tried, 1 yes, -1 refused */
    uint64_t ncuda;              /* windows (cudaWindow bytes each, the last one shorter) */
    struct mcShm *prev, *next;
};

static pthread_mutex_t tableLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atforkOnce = PTHREAD_ONCE_INIT;
static mcShm *table;
static int populateOff; /* the kernel has no MADV_POPULATE_READ */
static pthread_once_t warmOnce = PTHREAD_ONCE_INIT;
static int warmAfter = 2;  /* fd copies of a chunk before it is populated (see the top) */
static int warmState;      /* 0 measuring, 1 measured or fixed by MC_SHM_WARM_AFTER */
static uint64_t fdTimed;   /* fd copies of at least MC_CALIBRATE_MIN timed while measuring */
static uint64_t fdBest = UINT64_MAX; /* the fastest of them, in ns per MiB */
static mcShmStats stats;
static pthread_mutex_t cudaLock = PTHREAD_MUTEX_INITIALIZER; /* one registration at a time */
static pthread_once_t cudaWindowOnce = PTHREAD_ONCE_INIT;
static uint64_t cudaWindow = 256u << 20; /* bytes page-locked at a time (see the top) */

static void forkPrepare(void) { pthread_mutex_lock(&tableLock); }
static void forkParent(void) { pthread_mutex_unlock(&tableLock); }
/* The child's page-locking is its own to make: the parent's registration
 * is in a CUDA context the child cannot use, and must not be undone from
 * here at the last release. */
static void forkChild(void) {
    for (mcShm *m = table; m; m = m->next) memset(m->cuda, 0, (size_t)m->ncuda);
    pthread_mutex_unlock(&tableLock);
}
static void atforkInstall(void) { pthread_atfork(forkPrepare, forkParent, forkChild); }

static void cudaWindowInit(void) {
    const char *env = getenv("MC_CUDA_REGISTER_WINDOW");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0' && v >= MC_SHM_CHUNK && v <= (1ull << 40) && v % MC_SHM_CHUNK == 0) cudaWindow = v;
    }
}

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
    pthread_once(&cudaWindowOnce, cudaWindowInit);
    uint64_t nchunks = (size + MC_SHM_CHUNK - 1) / MC_SHM_CHUNK;
    m = malloc(sizeof(*m));
    if (m) *m = key;
    if (m) {
        m->fd = -1;
        m->chunks = calloc((size_t)nchunks, 1);
        m->ncuda = (size + cudaWindow - 1) / cudaWindow;
        m->cuda = calloc((size_t)m->ncuda, 1);
    }
    if (m == NULL || m->chunks == NULL || m->cuda == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    if ((m->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) == -1) {
        snprintf(err, errlen, "dup of the segment's fd: %s", strerror(errno));
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
    if (m && m->fd != -1) close(m->fd);
    if (m) free(m->chunks);
    if (m) free(m->cuda);
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
    for (uint64_t w = 0; w < m->ncuda; w++)
        if (m->cuda[w] == 1) mcCudaHostUnregister(m->map + w * cudaWindow);
    munmap(m->map, (size_t)m->size); /* tearing down page tables: not under the lock */
    close(m->fd);
    free(m->chunks);
    free(m->cuda);
    free(m);
}

char *mcShmBase(const mcShm *m) { return m->map; }

uint64_t mcShmCudaWindow(mcShm *m, uint64_t off, uint64_t len, int *pinned) {
    uint64_t w = off / cudaWindow, start = w * cudaWindow;
    uint64_t end = start + cudaWindow < m->size ? start + cudaWindow : m->size;
    int st = __atomic_load_n(&m->cuda[w], __ATOMIC_ACQUIRE);
    if (st == 0) {
        pthread_mutex_lock(&cudaLock);
        st = m->cuda[w];
        if (st == 0) {
            st = mcCudaHostRegister(m->map + start, (size_t)(end - start), NULL, 0) == 0 ? 1 : -1;
            __atomic_store_n(&m->cuda[w], (int8_t)st, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&cudaLock);
    }
    if (pinned) *pinned = st;
    return end - off < len ? end - off : len;
}

static uint64_t nowNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void warmInit(void) {
    const char *env = getenv("MC_SHM_WARM_AFTER");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0) {
            warmAfter = v > MC_WARM_MAX ? MC_WARM_MAX : (int)v;
            warmState = 1;
        }
    }
}

static int chunkMapped(const mcShm *m, uint64_t i) {
    return __atomic_load_n(&m->chunks[i], __ATOMIC_ACQUIRE) == MC_CHUNK_MAPPED;
}

/* Populates chunks [from, to) and marks them; a failure leaves them to faults. */
static void populateRun(mcShm *m, uint64_t from, uint64_t to) {
    uint64_t start = from * MC_SHM_CHUNK, end = to * MC_SHM_CHUNK;
    if (end > m->size) end = m->size;
    if (!__atomic_load_n(&populateOff, __ATOMIC_RELAXED) &&
        madvise(m->map + start, (size_t)(end - start), MC_POPULATE_READ) == -1) {
        if (errno != EINVAL) return;
        __atomic_store_n(&populateOff, 1, __ATOMIC_RELAXED);
    }
    for (uint64_t i = from; i < to; i++) __atomic_store_n(&m->chunks[i], MC_CHUNK_MAPPED, __ATOMIC_RELEASE);
    __atomic_fetch_add(&stats.chunks_populated, to - from, __ATOMIC_RELAXED);
}

void mcShmPrepare(mcShm *m, uint64_t off, uint64_t len) {
    if (len == 0 || off >= m->size) return;
    if (len > m->size - off) len = m->size - off;
    uint64_t first = off / MC_SHM_CHUNK, last = (off + len - 1) / MC_SHM_CHUNK, run = UINT64_MAX;
    for (uint64_t i = first; i <= last; i++) {
        int in = chunkMapped(m, i);
        if (!in && run == UINT64_MAX) run = i;
        if (in && run != UINT64_MAX) {
            populateRun(m, run, i);
            run = UINT64_MAX;
        }
    }
    if (run != UINT64_MAX) populateRun(m, run, last + 1);
}

/* n bytes at the segment's offset off through the file; 0, or -1 with
 * nothing to say but that the mapping should do it (what moved stays). */
static int fdCopy(mcShm *m, uint64_t off, char *buf, size_t n, int write) {
    size_t done = 0;
    while (done < n) {
        off_t at = (off_t)(m->off + off + done);
        ssize_t k = write ? pwrite(m->fd, buf + done, n - done, at) : pread(m->fd, buf + done, n - done, at);
        if (k == -1 && errno == EINTR) continue;
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

static void mapCopy(mcShm *m, uint64_t off, char *buf, size_t n, int write) {
    if (write) memcpy(m->map + off, buf, n);
    else memcpy(buf, m->map + off, n);
    __atomic_fetch_add(&stats.map_bytes, n, __ATOMIC_RELAXED);
}

/* The first populate after enough timed fd copies sets warm-after: what
 * populating a chunk costs (the populate, and the first copy through it
 * scaled to the whole chunk: under a shadowing hypervisor that first touch
 * is the price) against the rent of copying a whole chunk through the file
 * (the design comment). The rent is the fastest fd copy seen, not their
 * mean: an fd copy into a buffer the kernel never touched pays that
 * buffer's own first-access charge under such a hypervisor, once per
 * buffer, which is not the rent. One thread measures; the others go on
 * with the provisional value meanwhile. */
static void calibrate(mcShm *m, uint64_t chunk, uint64_t off, char *buf, size_t n, int write) {
    uint64_t t0 = nowNs();
    populateRun(m, chunk, chunk + 1);
    uint64_t t1 = nowNs();
    mapCopy(m, off, buf, n, write);
    uint64_t t2 = nowNs();
    double price = (double)(t1 - t0) + (double)(t2 - t1) * MC_SHM_CHUNK / (double)n;
    double rent = (double)__atomic_load_n(&fdBest, __ATOMIC_RELAXED) * (MC_SHM_CHUNK >> 20);
    int w = rent > 0 ? (int)(price / rent + 0.999) : 1;
    __atomic_store_n(&warmAfter, w < 1 ? 1 : w > MC_WARM_MEASURED_MAX ? MC_WARM_MEASURED_MAX : w, __ATOMIC_RELAXED);
}

static void fdTimedAdd(uint64_t ns, size_t len) {
    uint64_t perMiB = (uint64_t)((double)ns * (1u << 20) / (double)len), best;
    best = __atomic_load_n(&fdBest, __ATOMIC_RELAXED);
    while (perMiB < best &&
           !__atomic_compare_exchange_n(&fdBest, &best, perMiB, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    __atomic_fetch_add(&fdTimed, 1, __ATOMIC_RELAXED);
}

/* Whether a copy of a chunk not yet populated, `seen` copies in, goes
 * through the file (the design comment); if not, the chunk is populated. */
static int throughFile(const mcShm *m, uint8_t seen, int write) {
    int wa = __atomic_load_n(&warmAfter, __ATOMIC_RELAXED);
    if (__atomic_load_n(&m->nofd, __ATOMIC_RELAXED) || seen >= wa) return 0;
    return !write || (seen == 0 && wa >= 2); /* a write takes the file's lock: its first visit only */
}

void mcShmCopy(mcShm *m, uint64_t off, void *buf, size_t n, int write) {
    pthread_once(&warmOnce, warmInit);
    char *p = buf;
    while (n) {
        uint64_t chunk = off / MC_SHM_CHUNK;
        size_t len = (size_t)((chunk + 1) * MC_SHM_CHUNK - off);
        if (len > n) len = n;
        uint8_t seen = __atomic_load_n(&m->chunks[chunk], __ATOMIC_ACQUIRE);
        int measuring = __atomic_load_n(&warmState, __ATOMIC_RELAXED) == 0;
        if (seen == MC_CHUNK_MAPPED) {
            mapCopy(m, off, p, len, write);
        } else if (!throughFile(m, seen, write)) {
            int one = 0;
            if (measuring && len >= MC_CALIBRATE_MIN &&
                __atomic_load_n(&fdTimed, __ATOMIC_RELAXED) >= MC_CALIBRATE_COPIES &&
                __atomic_compare_exchange_n(&warmState, &one, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
                calibrate(m, chunk, off, p, len, write);
            } else {
                populateRun(m, chunk, chunk + 1);
                mapCopy(m, off, p, len, write);
            }
        } else {
            uint64_t t0 = measuring ? nowNs() : 0;
            if (fdCopy(m, off, p, len, write) == 0) {
                if (measuring && len >= MC_CALIBRATE_MIN) fdTimedAdd(nowNs() - t0, len);
                __atomic_fetch_add(&stats.fd_bytes, len, __ATOMIC_RELAXED);
                /* Racing copies may count one visit for two: the chunk is
                 * populated a copy late, no more. */
                __atomic_compare_exchange_n(&m->chunks[chunk], &seen, (uint8_t)(seen + 1), 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED);
            } else {
                __atomic_store_n(&m->nofd, 1, __ATOMIC_RELAXED);
                populateRun(m, chunk, chunk + 1);
                mapCopy(m, off, p, len, write);
            }
        }
        off += len;
        p += len;
        n -= len;
    }
}

void mcShmSetWarmAfter(int n) {
    pthread_once(&warmOnce, warmInit);
    __atomic_store_n(&fdTimed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fdBest, UINT64_MAX, __ATOMIC_RELAXED);
    __atomic_store_n(&warmAfter, n < 0 ? 2 : n > MC_WARM_MAX ? MC_WARM_MAX : n, __ATOMIC_RELAXED);
    __atomic_store_n(&warmState, n < 0 ? 0 : 1, __ATOMIC_RELAXED);
}

void mcShmGetStats(mcShmStats *out) {
    pthread_once(&warmOnce, warmInit);
    out->fd_bytes = __atomic_load_n(&stats.fd_bytes, __ATOMIC_RELAXED);
    out->map_bytes = __atomic_load_n(&stats.map_bytes, __ATOMIC_RELAXED);
    out->chunks_populated = __atomic_load_n(&stats.chunks_populated, __ATOMIC_RELAXED);
    out->warm_after = __atomic_load_n(&warmAfter, __ATOMIC_RELAXED);
    out->warm_measured = __atomic_load_n(&warmState, __ATOMIC_RELAXED);
}
