/* zerofree.c -- freed pool extents are zeroed off the put's path (issue 14).
 *
 * Why. A reader must never see bytes that the writer of that object did not
 * write: a writer may end a put having written part of its extent or none
 * of it (over shared memory the server cannot tell), so the extent must not
 * hold an earlier object's bytes. Zeroing each extent at PUT.START (issue
 * 12) put a 16 MiB memset on the event loop before the reply, and the
 * client's own copy could only start after it: 88% of the server's CPU in a
 * 16 MiB put loop, and about a third of the put's time (BENCHMARKS.md).
 *
 * Invariant. Free space in a pool segment (one mapped here, seg->mem) is
 * zero. A fresh memfd is zero; from then on every extent is zeroed -- the
 * whole aligned extent (allocSize), not just the value's length -- before
 * allocFree takes it back. So PUT.START, SET and every other allocation get
 * zeroes without writing them, and the zeroing happens after the free,
 * while nobody waits for it.
 *
 * Who zeroes. Extents below zero-free-async-threshold are memset at once on
 * the main thread and freed: for them a hand-off (a job, a lock, a wake-up
 * on a 2-core box) costs about what the memset does, and the bytes are
 * often still in cache. Larger ones go to one worker thread (as Redis's
 * bio: a mutex, a condition variable, a FIFO), which zeroes them in chunks
 * of ZF_CHUNK; the main thread gives the finished ones back to their
 * allocator from beforeSleep or whenever it needs space -- the allocator is
 * not thread-safe and only the main thread ever touches it. The worker
 * writes only bytes of extents that are allocated and have no object
 * (allocUser NULL): the data plane refuses them, so nobody else reads or
 * writes them meanwhile.
 *
 * Space on its way back. A queued extent is still allocated. An allocation
 * that fails therefore takes back the finished extents, then finishes the
 * rest itself -- claiming chunks beside the worker, then waiting for the
 * chunks still in the worker's hands -- and retries before it evicts or
 * answers NOSPACE (zerofreeMakeRoom): no put fails and no live object is
 * evicted while reclaimable space waits here. The eviction watermark counts
 * queued bytes as free. Commands that report pool figures (INFO, SEG.LIST)
 * settle the queue first, so used/free/objects are the allocator's exact
 * figures after a REMOVE, DEL or FLUSHALL, as before; what that costs is the
 * zeroing still queued (a few ms of memset at most, shared with the worker).
 *
 * Reuse (issue 27). Zeroing is the price of letting a writer leave bytes
 * unwritten; a writer that writes every byte owes nothing to it. A SET of a
 * large value is such a writer -- the server itself reads all of it from
 * the socket into the extent before the object exists -- and a workload of
 * SETs replacing large values paid a full memset per SET for nothing (a
 * quarter of the server's CPU in 1 MiB SETs, perf; Redis frees and reuses
 * without zeroing). So the last extents of at least PROTO_BIG_ARG
 * freed from SET values (zerofreeExtentForReuse: where the next SET of the
 * same size is likeliest to come) are neither zeroed inline nor queued at
 * once but kept aside, still allocated, with their old bytes. The bound is
 * the parser's: from PROTO_BIG_ARG on a SET value is read in place, the
 * only writer that takes a kept extent, so below it keeping one would only
 * delay its zeroing (a 64 KiB SET replacing a 64 KiB value paid a 64 KiB
 * memset on the main thread before this, as much as the copy from the
 * socket, where the bound was zero-free-async-threshold: BENCHMARKS.md,
 * "Instructions per request"):
 * zerofreeTakeDirty hands one of exactly the size asked for to such a
 * writer (zeroing only its aligned tail past the value), and the rest go
 * to be zeroed (inline or queued, by size, as any freed extent) when the
 * stash is full (oldest first), when space is needed
 * (zerofreeMakeRoom) and when pool figures are settled (zerofreeReclaim
 * with wait). Kept extents count as zeroing for INFO and the eviction
 * watermark (zerofreePendingBytes), have no object (the data plane refuses
 * them), and never reach the allocator unzeroed, so the invariant above
 * holds: free space is zero. Every other allocation (PUT.START, APPEND's
 * new version, which relies on zeros past the old value) still gets zeroed
 * space. Store objects' extents (PUT.START/PUT.END) are queued as before:
 * a put loop of one key must keep landing on the same few extents, whose
 * pages every client has already mapped and faulted in; kept aside, they
 * would push its puts onto fresh pages (a smoke run of bench-compare.sh
 * showed 16 MiB mc_put at half speed until this was so).
 *
 * Late writers. A writer that kept writing after its extent was freed would
 * leave bytes in free space rather than in the next object's extent. The
 * store already guards against both: an abandoned put's extent is freed
 * only after put-release-timeout, and PUT.REVOKE is the writer's own word
 * that it stopped.
 */
#include "zerofree.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "server.h"
#include "util.h"
#include "zmalloc.h"

/* The worker's unit of work, and what a waiting main thread claims beside
 * it: large enough that the lock is noise, small enough that a main thread
 * that needs space never waits long for a chunk in the worker's hands. */
#define ZF_CHUNK (4ULL << 20)

/* Freed extents kept aside for writers of every byte (see Reuse): at
 * most ZF_STASH of them, and past ZF_STASH_MIN only while they add up to
 * ZF_STASH_BYTES. Clients that pipeline MSETs place their new values
 * before the old ones go, a hundred 64 KiB values in flight with ten
 * clients of ten keys: a stash of 8 or 16 overflowed and zeroed half of
 * what it was for. The byte bound keeps what a put that needs the space
 * may have to wait for (zerofreeMakeRoom zeroes it all) where eight 16 MiB
 * values put it; the first eight are kept whatever their size, as before. */
#define ZF_STASH 128
#define ZF_STASH_MIN 8
#define ZF_STASH_BYTES (128ULL << 20)

typedef struct zfJob {
    struct zfJob *next;
    segment *seg;
    uint32_t handle;
    char *ptr;
    uint64_t len;
    uint64_t claimed; /* bytes handed to a zeroer (under the lock) */
    uint64_t zeroed;  /* bytes finished (under the lock) */
} zfJob;

static struct {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t work;     /* worker: a job was queued, resume, or stop */
    pthread_cond_t progress; /* main thread: a job was finished */
    /* Under the lock. */
    zfJob *head, *tail;      /* jobs with chunks nobody claimed yet, FIFO */
    zfJob *done;             /* zeroed, for the main thread to free */
    int ndone;               /* also read without the lock, as a hint */
    int stop, paused;
    /* Main thread only. */
    uint64_t pending_bytes, pending_extents;
    uint64_t async_bytes, inline_bytes, room_waits, room_wait_us;
    struct {
        segment *seg;
        uint32_t handle;
        uint64_t len;
    } stash[ZF_STASH];           /* a ring: stash_first is the oldest */
    int stash_first, nstash;
    uint64_t stash_bytes, reused_bytes;
} zf = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .progress = PTHREAD_COND_INITIALIZER};

/* Takes the next chunk of the first job (the lock held, a job queued). */
static zfJob *zfClaim(uint64_t *off, uint64_t *len) {
    zfJob *j = zf.head;
    *off = j->claimed;
    *len = j->len - j->claimed < ZF_CHUNK ? j->len - j->claimed : ZF_CHUNK;
    j->claimed += *len;
    if (j->claimed == j->len) { /* the rest is in zeroers' hands */
        zf.head = j->next;
        if (zf.head == NULL) zf.tail = NULL;
    }
    return j;
}

/* A chunk is zeroed (the lock held). */
static void zfFinish(zfJob *j, uint64_t len) {
    j->zeroed += len;
    if (j->zeroed < j->len) return;
    j->next = zf.done;
    zf.done = j;
    __atomic_store_n(&zf.ndone, zf.ndone + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&zf.progress); /* no syscall when nobody waits */
}

/* Zeroes the next chunk of the queue's head, the lock dropped meanwhile.
 * Called with zf.lock held and a job queued, by the worker and by the main
 * thread when it must have the space now. */
static void zfZeroChunk(void) {
    uint64_t off, len;
    zfJob *j = zfClaim(&off, &len);
    pthread_mutex_unlock(&zf.lock);
    memset(j->ptr + off, 0, (size_t)len);
    pthread_mutex_lock(&zf.lock);
    zfFinish(j, len);
}

static void *zfWorker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&zf.lock);
    for (;;) {
        while (!zf.stop && (zf.paused || zf.head == NULL)) pthread_cond_wait(&zf.work, &zf.lock);
        if (zf.stop) break;
        zfZeroChunk();
    }
    pthread_mutex_unlock(&zf.lock);
    return NULL;
}

void zerofreeInit(void) {
    if (zf.started) return;
    /* Signals are the main thread's business (shutdown, the crash log). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    zf.stop = 0;
    if (pthread_create(&zf.thread, NULL, zfWorker, NULL) == 0) {
        zf.started = 1;
        pthread_setname_np(zf.thread, "mc-zerofree");
    } else {
        /* Still correct: every extent is zeroed inline (zerofreeExtent). */
        serverLog(LL_WARNING, "Cannot start the zeroing thread: freed pool extents are zeroed inline");
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void zfFreeList(zfJob *j) {
    while (j) {
        zfJob *next = j->next;
        zfree(j);
        j = next;
    }
}

void zerofreeShutdown(void) {
    if (!zf.started) return;
    pthread_mutex_lock(&zf.lock);
    zf.stop = 1;
    pthread_cond_broadcast(&zf.work);
    pthread_mutex_unlock(&zf.lock);
    pthread_join(zf.thread, NULL); /* ends after the chunk it holds */
    zf.started = 0;
    /* After the join no chunk is in anyone's hands: every job is either
     * still queued or done. Their extents stay allocated; their segment is
     * going with the process. */
    zfFreeList(zf.head);
    zfFreeList(zf.done);
    zf.nstash = zf.stash_first = 0; /* kept extents stay allocated too */
    zf.stash_bytes = 0;
    zf.head = zf.tail = zf.done = NULL;
    zf.ndone = 0;
    zf.pending_bytes = zf.pending_extents = 0;
}

/* Queues a large extent for the worker (its user already NULL). */
static void zfQueue(segment *seg, uint32_t handle) {
    uint64_t off = allocOffset(seg->alloc, handle), len = allocSize(seg->alloc, handle);
    zfJob *j = zmalloc(sizeof(*j));
    j->next = NULL;
    j->seg = seg;
    j->handle = handle;
    j->ptr = segmentPtr(seg, off);
    j->len = len;
    j->claimed = j->zeroed = 0;
    zf.pending_bytes += len;
    zf.pending_extents++;
    pthread_mutex_lock(&zf.lock);
    if (zf.tail) zf.tail->next = j;
    else zf.head = j;
    zf.tail = j;
    pthread_cond_signal(&zf.work);
    pthread_mutex_unlock(&zf.lock);
}

/* The oldest kept extent goes to the queue. */
static void zfStashPopOldest(void) {
    int i = zf.stash_first;
    zf.stash_first = (zf.stash_first + 1) % ZF_STASH;
    zf.nstash--;
    zf.stash_bytes -= zf.stash[i].len;
    zerofreeExtent(zf.stash[i].seg, zf.stash[i].handle);
}

/* Empties the stash: 1 if some of it went back to the allocator at once
 * (extents below zero-free-async-threshold are zeroed inline), so that an
 * allocation waiting for room can retry before anything is queued. */
static int zfStashFlush(void) {
    uint64_t inline0 = zf.inline_bytes;
    while (zf.nstash) zfStashPopOldest();
    return zf.inline_bytes != inline0;
}

/* Small extents are zeroed at once: 1 when this one was. */
static int zfInline(segment *seg, uint32_t handle) {
    uint64_t len = allocSize(seg->alloc, handle);
    if (zf.started && len >= (uint64_t)server.zero_free_async_threshold) return 0;
    memset(segmentPtr(seg, allocOffset(seg->alloc, handle)), 0, (size_t)len);
    zf.inline_bytes += len;
    allocFree(seg->alloc, handle);
    return 1;
}

void zerofreeExtent(segment *seg, uint32_t handle) {
    if (zfInline(seg, handle)) return;
    allocSetUser(seg->alloc, handle, NULL); /* its object is gone: the data plane refuses it */
    zfQueue(seg, handle);
}

void zerofreeExtentForReuse(segment *seg, uint32_t handle) {
    uint64_t len = allocSize(seg->alloc, handle);
    /* No SET of a value this short takes a kept extent (Reuse). */
    if (len < PROTO_BIG_ARG) {
        zerofreeExtent(seg, handle);
        return;
    }
    allocSetUser(seg->alloc, handle, NULL);
    while (zf.nstash == ZF_STASH || (zf.nstash >= ZF_STASH_MIN && zf.stash_bytes + len > ZF_STASH_BYTES))
        zfStashPopOldest();
    int i = (zf.stash_first + zf.nstash++) % ZF_STASH;
    zf.stash[i].seg = seg;
    zf.stash[i].handle = handle;
    zf.stash[i].len = len;
    zf.stash_bytes += len;
}

uint32_t zerofreeTakeDirty(segment *seg, uint64_t size, uint64_t *offset) {
    uint64_t want = allocRoundSize(seg->alloc, size);
    if (want == 0) return ALLOC_NONE;
    /* Newest first: its bytes are the likeliest still in cache. */
    for (int k = zf.nstash - 1; k >= 0; k--) {
        int i = (zf.stash_first + k) % ZF_STASH;
        if (zf.stash[i].seg != seg || zf.stash[i].len != want) continue;
        uint32_t h = zf.stash[i].handle;
        /* Close the gap, keeping the ring's order. */
        for (int m = k; m < zf.nstash - 1; m++) {
            int a = (zf.stash_first + m) % ZF_STASH, b = (zf.stash_first + m + 1) % ZF_STASH;
            zf.stash[a] = zf.stash[b];
        }
        zf.nstash--;
        zf.stash_bytes -= want;
        zf.reused_bytes += want;
        *offset = allocOffset(seg->alloc, h);
        /* The value's bytes will be written; its aligned tail must read as
         * a fresh extent's does. */
        if (want > size) memset(segmentPtr(seg, *offset) + size, 0, (size_t)(want - size));
        return h;
    }
    return ALLOC_NONE;
}

uint64_t zerofreeReclaim(int wait) {
    if (wait) zfStashFlush(); /* settling: kept extents are zeroed too */
    if (zf.pending_extents == 0) return 0;
    if (!wait && __atomic_load_n(&zf.ndone, __ATOMIC_ACQUIRE) == 0) return 0;
    pthread_mutex_lock(&zf.lock);
    while (wait) {
        if (zf.head) { /* zero a chunk here, beside the worker */
            zfZeroChunk();
        } else if ((uint64_t)zf.ndone < zf.pending_extents) {
            pthread_cond_wait(&zf.progress, &zf.lock); /* chunks in the worker's hands */
        } else {
            break;
        }
    }
    zfJob *j = zf.done;
    zf.done = NULL;
    __atomic_store_n(&zf.ndone, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&zf.lock);
    uint64_t bytes = 0;
    while (j) {
        zfJob *next = j->next;
        allocFree(j->seg->alloc, j->handle);
        bytes += j->len;
        zf.pending_bytes -= j->len;
        zf.pending_extents--;
        zfree(j);
        j = next;
    }
    zf.async_bytes += bytes;
    return bytes;
}

int zerofreeMakeRoom(void) {
    if (zfStashFlush()) return 1; /* space is needed: nothing is kept aside any more */
    if (zf.pending_extents == 0) return 0;
    if (zerofreeReclaim(0)) return 1; /* the finished ones may be enough */
    long long start = monoUs();
    uint64_t bytes = zerofreeReclaim(1);
    zf.room_waits++;
    zf.room_wait_us += (uint64_t)(monoUs() - start);
    return bytes > 0;
}

uint64_t zerofreePendingBytes(void) { return zf.pending_bytes + zf.stash_bytes; }
uint64_t zerofreePendingExtents(void) { return zf.pending_extents + (uint64_t)zf.nstash; }

void zerofreePause(int paused) {
    pthread_mutex_lock(&zf.lock);
    zf.paused = paused;
    pthread_cond_broadcast(&zf.work);
    pthread_mutex_unlock(&zf.lock);
}

sds zerofreeInfo(sds s, uint64_t pending_bytes, uint64_t pending_extents) {
    return sdscatprintf(s,
                        "store_pool_zeroing_bytes:%llu\r\nstore_pool_zeroing_extents:%llu\r\n"
                        "store_pool_zeroed_async_bytes:%llu\r\nstore_pool_zeroed_inline_bytes:%llu\r\n"
                        "store_pool_zero_waits:%llu\r\nstore_pool_zero_wait_usec:%llu\r\n"
                        "store_pool_reused_unzeroed_bytes:%llu\r\n",
                        (unsigned long long)pending_bytes, (unsigned long long)pending_extents,
                        (unsigned long long)zf.async_bytes, (unsigned long long)zf.inline_bytes,
                        (unsigned long long)zf.room_waits, (unsigned long long)zf.room_wait_us,
                        (unsigned long long)zf.reused_bytes);
}
