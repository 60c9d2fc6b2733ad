/* aof.c -- the append-only log: the keyspace and the store's objects survive
 * a restart, and a kill -9.
 *
 * What is logged: the state of each key a command changed, not the command
 * (aofformat.c says why: placement, eviction and expiry are not
 * deterministic). The key hooks (multi.h's list of changed keys, aofFlushedAll, called where
 * store.c tells WATCH that a key changed) put the key in a set; in
 * beforeSleep, before any reply of this loop iteration is written, each key
 * of the set is looked up once and its state appended: RESTORE with the
 * value's bytes and metadata (DUMP's payload) or DEL. A key changed by a
 * thousand pipelined commands is written once per iteration, and an
 * iteration's records (a MULTI's among them) go between MULTI and EXEC
 * records, so a load keeps all or none of them even when a crash cut
 * their writes short.
 *
 * When a reply is sent, its write is in the log: beforeSleep writes the log
 * first, then the replies (networking.c sends nothing from a command). With
 * appendfsync always the log is fsynced there too, before the replies; with
 * everysec a thread fsyncs once a second (a kill -9 loses nothing, the page
 * cache has it; a power cut loses at most about two seconds); with no the
 * kernel decides. A write the log cannot take makes the server refuse writes
 * (-MISCONF, as Redis) until one succeeds; under always it exits, since it
 * would otherwise have acknowledged what is not on disk. Files deleted or
 * replaced under the server refuse writes the same way until a rewrite has
 * rebuilt the log (checkFiles): a write into a deleted inode succeeds, and
 * no start would ever read it.
 *
 * Values in the server's pool (and the small ones on the heap) are logged
 * with their bytes. An object whose replicas all live in client segments is
 * logged with its metadata and places (PLACED), and those segments with
 * what their MOUNT said (SEGMENT, SEGMENT.GONE): the bytes are the hosts'.
 * A restarted server holds such objects aside until the host mounts the
 * segment again and proves, with the identity it mounted it with, that it
 * is the same memory (detached.c); only then are they keys again. A segment
 * mounted without an IDENTITY (redis-cli, an old client) cannot prove that,
 * so its objects are logged as DEL: forgetting is safe, serving bytes that
 * may not be the object's is not. INFO counts those
 * (aof_segment_objects_not_logged). The replicas get the same SEGMENT,
 * SEGMENT.GONE and PLACED records (replication.c), log or no log, so a
 * promoted replica holds the objects as a restarted server does.
 *
 * Files: Redis 7's multi-part layout in appenddirname under dir: one base
 * (the dataset at the last rewrite), increments, and a manifest listing
 * them, replaced atomically (write, fsync, rename, fsync the directory).
 * BGREWRITEAOF forks: at the fork the parent starts a new increment, the
 * child writes the dataset it sees into a temporary base; when the child
 * succeeds the manifest becomes the new base plus the increments opened
 * since the fork, and the old files are deleted. No rewrite buffer is
 * needed. The child reads values from the pool, which is shared memory, so
 * it may see bytes the parent changed after the fork; every such change is
 * in the new increment, which replays after the base, so the end state is
 * exact. So it checksums the copy it writes, never a second read of the
 * pool: a record whose bytes changed between two reads would fail its
 * CRC64 and make the whole base refuse to load. The rewrite starts by itself when the increments outgrow the base
 * (auto-aof-rewrite-percentage, auto-aof-rewrite-min-size), so the log
 * never grows without bound.
 *
 * Loading (start-up, appendonly yes) maps each file and replays it. A file
 * that ends inside a record (a write cut by a crash) is cut there with a log
 * line if it is the last one and aof-load-truncated is yes; any other damage
 * (a bad record, a payload failing its CRC64, a truncated file that is not
 * the last, a listed file that is missing) refuses to start, naming the
 * file and offset, and says to run
 * mooncake-check-aof. A log that holds more than the pool also refuses:
 * nothing acknowledged is dropped silently.
 */
#include "aof.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aofformat.h"
#include "cluster.h"
#include "crc.h"
#include "detached.h"
#include "http.h"
#include "dict.h"
#include "dump.h"
#include "migrate.h"
#include "multi.h"
#include "replication.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

int aofOn;
int aofDebugWriteErrno; /* DEBUG AOF-WRITE-ERROR: the log's writes fail with it (tests) */
int aofDebugRewriteDelayMs;
int aofDebugFsyncErrno; /* DEBUG AOF-FSYNC-ERROR: the everysec thread's fsyncs fail with it (tests) */ /* DEBUG AOF-REWRITE-DELAY: the rewrite child waits before each large value (tests) */

#define AOF_MANIFEST_SUFFIX ".manifest"
#define AOF_TEMP_MANIFEST "temp-manifest"
#define AOF_WRITE_CHUNK (64 * 1024 * 1024)

static struct {
    int dirfd;               /* appenddirname, opened once: CONFIG SET dir cannot move it */
    int fd;                  /* the increment being written */
    sds buf;                 /* records not yet written */
    changedCursor changed;   /* how far this iteration's changed keys are in buf (multi.h) */
    aofManifest man;
    long long base_seq, incr_seq;
    long long base_size;     /* bytes at the last rewrite (or load): auto rewrite's yardstick */
    long long incr_size;     /* bytes in the increments since */
    long long fsynced_size;  /* what the last fsync covered */
    long long cur_size;      /* bytes written to the increment open now */
    size_t iter_start;       /* where in buf this loop iteration's records start (hooks append before beforeSleep) */
    ino_t manifest_ino;      /* the manifest last renamed into place (0: unknown) */
    dev_t manifest_dev;
    const char *files_lost;  /* why the files on disk are no longer the log (NULL: they are) */
    long long lost_rewrite_ms; /* when checkFiles last started a rewrite */
    int loading;
    /* the rewrite child */
    pid_t child;
    long long rewrite_start_ms, last_rewrite_ms;
    int rewrite_scheduled, last_rewrite_ok, rewrites;
    int rewrite_failures;          /* failed in a row: the automatic retries back off */
    long long rewrite_retry_ms;    /* no automatic rewrite before this */
    long long child_incr_seq; /* the first increment opened at the fork */
    char child_tmp[64];       /* the base the child writes */
    /* write status */
    int last_write_ok, last_write_errno;
    /* the everysec fsync thread */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fsync_fd, fsync_requested, fsync_running, thread_exit;
    int fsync_errno;          /* the thread's last fdatasync: 0 or its errno (under mu) */
    int fsync_failed;         /* the main thread's copy (aofCron): writes are refused while set */
    long long last_fsync_ms, delayed_fsync;
    /* counts for INFO and tests */
    unsigned long long segment_objects_not_logged, records_written;
} aof = {.dirfd = -1, .fd = -1, .child = -1, .last_rewrite_ok = 1, .last_write_ok = 1,
         .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fsync_fd = -1};

int aofLoading(void) { return aof.loading; }

/* ---- the hooks ------------------------------------------------------------ */

void aofFlushedAll(void) {
    if (!aofOn || aof.loading) return;
    size_t from = sdslen(aof.buf);
    aof.buf = aofCheckRecord(aofCatFlushall(aof.buf), from); /* what changed before it went with it (signalFlushedDb) */
}

/* ---- records from the keyspace --------------------------------------------- */

/* Values at least this long are written to the log from where they lie
 * (the pool), not copied into the buffer first. */
#define AOF_DIRECT_VALUE (256 * 1024)

typedef aofValueRef valueRef; /* aof.h */

/* Whether a client segment's objects can be logged: its host proved it
 * with an identity, so a restarted server can ask for it again. */
static int segmentLogged(const segment *s) { return s && s->mem == NULL && s->identity && s->state != SEG_DETACHED; }

/* o's metadata and places in logged client segments, into p; 0 if none. */
static int placedOf(storeObj *o, aofPlaced *p) {
    memset(p, 0, sizeof(*p));
    if (o->len == 0 || o->ext == NULL) return 0;
    for (int i = 0; i < o->nreplicas && p->nreplicas < AOF_PLACED_MAX_REPLICAS; i++) {
        storeReplica *r = storeObjReplica(o, i);
        segment *seg = storeReplicaSegment(r);
        if (!segmentLogged(seg)) continue;
        p->segid[p->nreplicas] = seg->id;
        p->offset[p->nreplicas++] = r->offset;
    }
    if (p->nreplicas == 0) return 0;
    storeObjExt *ext = o->ext;
    p->flags = (o->flags & OBJ_FLAG_HARDPIN) ? DUMP_F_HARDPIN : 0;
    if (ext->checksum) {
        p->flags |= DUMP_F_CHECKSUM;
        p->checksum.p = ext->checksum;
        p->checksum.len = sdslen(ext->checksum);
    }
    p->created_ms = ext->created_ms > 0 ? ext->created_ms : 0;
    /* The deadline as the wall clock's: what a later process can read. */
    p->softpin_until_ms =
        ext->softpin_until_ms > server.monotime ? addSaturate(server.mstime, ext->softpin_until_ms - server.monotime) : 0;
    p->value_len = o->len;
    return 1;
}

static sds catSegment(sds s, const segment *seg) {
    aofSegment g = {0};
#define STR(f, v) \
    do { \
        g.f.p = (v); \
        g.f.len = (v) ? strlen(v) : 0; \
    } while (0)
    g.id = seg->id;
    g.size = seg->size;
    g.base = seg->base;
    g.tier = seg->tier;
    g.same_host = seg->same_host;
    g.mounted_ms = seg->mounted_ms;
    STR(name, seg->name);
    STR(owner, seg->owner);
    STR(tenant, seg->tenant);
    STR(host, seg->host);
    STR(rkey, seg->rkey);
    STR(identity, seg->identity);
    STR(peer_ip, seg->peer_ip);
    g.nendpoints = seg->nendpoints;
    for (int i = 0; i < seg->nendpoints; i++) STR(endpoints[i], seg->endpoints[i]);
#undef STR
    return aofCatSegment(s, &g);
}

/* Both go to the log and to the replicas (replication.c), which hold the
 * segment and its objects as a restarted server does, for a failover. */
void aofSegmentMounted(segment *s) {
    if (!segmentLogged(s)) return;
    sds *stream = replRecordBuf();
    if (stream) *stream = catSegment(*stream, s);
    if (!aofOn || aof.loading) return;
    size_t from = sdslen(aof.buf);
    aof.buf = aofCheckRecord(catSegment(aof.buf, s), from);
}

void aofSegmentGone(segment *s) {
    if (s->identity == NULL || s->mem) return;
    sds *stream = replRecordBuf();
    if (stream) *stream = aofCatSegmentGone(*stream, s->id);
    if (!aofOn || aof.loading) return;
    size_t from = sdslen(aof.buf);
    aof.buf = aofCheckRecord(aofCatSegmentGone(aof.buf, s->id), from);
}

static sds keepInBuf(sds buf) { return buf; } /* detachedRewrite's emit: aof.buf is written in beforeSleep */

void aofLogHeld(void) {
    if (!aofOn || aof.loading) return;
    size_t from = sdslen(aof.buf);
    aof.buf = aofCatSegments(aof.buf);
    aof.buf = detachedRewrite(aof.buf, keepInBuf);
    aof.buf = aofCheckRecords(aof.buf, from);
}

sds aofCatSegments(sds s) {
    for (uint32_t i = 0; i < segtabLen; i++)
        if (segtab[i] && segtab[i]->mem == NULL && segtab[i]->identity) s = catSegment(s, segtab[i]);
    return s;
}

int aofObjectPlaced(storeObj *o) {
    aofPlaced p;
    return placedOf(o, &p);
}

/* Appends key's state. Shared by beforeSleep (into aof.buf), the rewrite
 * child (into its own buffer) and the replication stream. With direct, a
 * value of at least AOF_DIRECT_VALUE bytes is left out: s ends just before
 * it and direct says what comes after (catValueRef appends it). checked:
 * the record is the log's, with its check (format 2); the replicas' stream
 * keeps format 1. */
static sds catObjState(sds s, sds key, storeObj *o, long long expire, int *segment_only, valueRef *direct,
                       int places, int checked) {
    const char *value = o ? storeObjLocalPtr(o) : NULL;
    size_t start = sdslen(s);
    if (o && value == NULL) {
        aofPlaced p;
        if (places && placedOf(o, &p)) {
            s = aofCatPlaced(s, key, sdslen(key), expire, &p);
            return checked ? aofCheckRecord(s, start) : s;
        }
        *segment_only = 1;
    }
    if (o == NULL || value == NULL) {
        s = aofCatDel(s, key, sdslen(key));
        return checked ? aofCheckRecord(s, start) : s;
    }
    dumpInfo d;
    dumpInfoFromObj(o, &d);
    size_t plen = dumpPrefixLen(&d);
    size_t vlen = (size_t)o->len;
    s = aofCatRestoreHead(s, key, sdslen(key), expire, plen + vlen + DUMP_TRAILER_LEN);
    uint64_t head_crc = checked ? aofRestoreHeadChecked(s, start) : 0;
    s = sdsMakeRoomFor(s, plen);
    unsigned char *p = (unsigned char *)s + sdslen(s);
    dumpWritePrefix(&d, p);
    uint64_t seed = crc64(0, p, plen);
    sdsIncrLen(s, (ssize_t)plen);
    if (direct && vlen >= AOF_DIRECT_VALUE) {
        direct->obj = o;
        direct->value = value;
        direct->vlen = vlen;
        direct->crc_seed = seed;
        direct->checked = checked;
        direct->check_seed = head_crc;
        if (!direct->deferred) dumpWriteTrailer(crc64(seed, (const unsigned char *)value, vlen), direct->trailer);
        return s;
    }
    /* Doubling, not sds's +1 MiB past 1 MiB: one loop iteration's records
     * (the replication stream's) can be tens of MiB of values, and growing
     * by 1 MiB copied the buffer once per MiB (quadratic: 16 clients of 1
     * MiB SETs spent 24% of the primary in realloc). */
    if (sdsavail(s) < vlen + DUMP_TRAILER_LEN + 64) s = sdsMakeRoomFor(s, sdslen(s) + vlen + DUMP_TRAILER_LEN + 64);
    /* The checksum is of the copy, not of the pool: the pool is shared
     * memory, and in the rewrite child the parent may free and zero (or
     * reuse) the extent between two reads of it. A checksum of one read
     * and bytes of another made a base that failed its own check at the
     * next start. The copy may be of a newer state; the increment opened
     * at the fork holds the key's change, and replays after it. */
    s = sdscatlen(s, value, vlen);
    unsigned char trailer[DUMP_TRAILER_LEN];
    dumpWriteTrailer(crc64(seed, (const unsigned char *)s + sdslen(s) - vlen, vlen), trailer);
    return aofCatRestoreEnd(s, trailer, checked, head_crc);
}

/* As catObjState, for the key's state now (o NULL: it is gone). */
static sds catKeyState(sds s, sds key, int *segment_only, valueRef *direct, int places, int checked) {
    long long expire;
    storeObj *o = storePeek(key, &expire);
    return catObjState(s, key, o, expire, segment_only, direct, places, checked);
}

/* key's state as one record, whole (replication.c streams the same records).
 * An object only in client segments is PLACED, as in the log: the replica
 * holds it aside (detached.c) until, promoted, the hosts remount there. */
sds aofCatKeyState(sds s, sds key) {
    int seg_only = 0;
    return catKeyState(s, key, &seg_only, NULL, 1, 0);
}

/* The rest of a record catKeyState left out, from byte `from` of its value. */
static sds catValueRef(sds s, const valueRef *r, size_t from) {
    s = sdscatlen(s, r->value + from, r->vlen - from);
    return aofCatRestoreEnd(s, r->trailer, r->checked, r->check_seed);
}

sds aofCatKeyStateRef(sds s, sds key, aofValueRef *ref) {
    int seg_only = 0;
    memset(ref, 0, sizeof(*ref));
    return catKeyState(s, key, &seg_only, ref, 1, 0);
}

sds aofCatValueTail(sds s, const aofValueRef *ref) { return catValueRef(s, ref, ref->vlen); }

sds aofCatObjStateDeferred(sds s, sds key, storeObj *o, long long expire, aofValueRef *ref) {
    int seg_only = 0;
    memset(ref, 0, sizeof(*ref));
    ref->deferred = 1;
    return catObjState(s, key, o, expire, &seg_only, ref, 1, 0);
}

void aofWriteValueTail(char *dst, uint64_t crc_seed, const char *value, size_t vlen) {
    dumpWriteTrailer(crc64(crc_seed, (const unsigned char *)value, vlen), (unsigned char *)dst);
    memcpy(dst + DUMP_TRAILER_LEN, AOF_RESTORE_TAIL, AOF_RESTORE_TAIL_LEN);
}

/* ---- files ----------------------------------------------------------------- */

static void fileName(char *dst, size_t len, const char *type, long long seq) {
    snprintf(dst, len, "%s.%lld.%s.aof", server.aof_filename, seq, type);
}

/* Writes len bytes, in chunks; *done says how many went (all, unless it
 * returns -1 with errno set). */
static int writeSome(int fd, const char *p, size_t len, size_t *done) {
    *done = 0;
    while (*done < len) {
        size_t left = len - *done;
        ssize_t n = write(fd, p + *done, left < AOF_WRITE_CHUNK ? left : AOF_WRITE_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = ENOSPC;
            return -1;
        }
        *done += (size_t)n;
    }
    return 0;
}

static int writeAll(int fd, const char *p, size_t len) {
    size_t done;
    return writeSome(fd, p, len, &done);
}

/* The manifest, replaced atomically: a crash leaves the old one or the new. */
static int writeManifest(const aofManifest *m) {
    char name[AOF_FILE_NAME_MAX + 32];
    snprintf(name, sizeof(name), "%s%s", server.aof_filename, AOF_MANIFEST_SUFFIX);
    sds text = aofManifestFormat(m);
    int fd = openat(aof.dirfd, AOF_TEMP_MANIFEST, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = -1;
    if (fd == -1) goto out;
    struct stat st;
    if (writeAll(fd, text, sdslen(text)) == -1 || fsync(fd) == -1 || fstat(fd, &st) == -1) goto out;
    if (renameat(aof.dirfd, AOF_TEMP_MANIFEST, aof.dirfd, name) == -1) goto out;
    aof.manifest_ino = st.st_ino;
    aof.manifest_dev = st.st_dev;
    fsync(aof.dirfd);
    rc = 0;
out:
    if (rc == -1) serverLog(LL_WARNING, "AOF: cannot write the manifest %s: %s", name, strerror(errno));
    if (fd != -1) close(fd);
    sdsfree(text);
    return rc;
}

/* Opens a new increment (seq aof.incr_seq + 1) and lists it in m. */
static int openNewIncr(aofManifest *m) {
    char name[AOF_FILE_NAME_MAX + 1];
    if (m->nfiles == AOF_MANIFEST_MAX_FILES) {
        errno = ENOSPC;
        return -1;
    }
    /* A new file, never one left over: a crash between creating an
     * increment and listing it leaves a file no manifest names. */
    long long seq = aof.incr_seq;
    int fd;
    do {
        fileName(name, sizeof(name), "incr", ++seq);
        fd = openat(aof.dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    } while (fd == -1 && errno == EEXIST && seq < aof.incr_seq + 1000);
    if (fd == -1) return -1;
    /* The format's header, synced before a manifest names the file: a file
     * listed is never one whose records could be read as format 1. */
    if (writeAll(fd, AOF_FILE_HEADER, AOF_FILE_HEADER_LEN) == -1 || fsync(fd) == -1) {
        int err = errno;
        close(fd);
        unlinkat(aof.dirfd, name, 0);
        errno = err;
        return -1;
    }
    aofManifestFile *f = &m->files[m->nfiles++];
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->seq = seq;
    f->type = 'i';
    aof.incr_seq = seq;
    return fd;
}

static void switchFd(int fd) {
    if (aof.fd != -1) {
        fsync(aof.fd);
        close(aof.fd);
    }
    aof.fd = fd;
    aof.fsynced_size = 0;
    aof.cur_size = fd == -1 ? 0 : (long long)AOF_FILE_HEADER_LEN; /* openNewIncr wrote it */
}

/* ---- the everysec fsync thread ---------------------------------------------- */

static void *fsyncThread(void *arg) {
    (void)arg;
    pthread_mutex_lock(&aof.mu);
    for (;;) {
        while (!aof.fsync_requested && !aof.thread_exit) pthread_cond_wait(&aof.cv, &aof.mu);
        if (aof.thread_exit) break;
        int fd = aof.fsync_fd;
        aof.fsync_requested = 0;
        aof.fsync_running = 1;
        pthread_mutex_unlock(&aof.mu);
        int err = 0, debug = __atomic_load_n(&aofDebugFsyncErrno, __ATOMIC_RELAXED);
        if (fd != -1 && (debug || fdatasync(fd) == -1)) err = debug ? debug : errno;
        pthread_mutex_lock(&aof.mu);
        aof.fsync_errno = err;
        aof.fsync_running = 0;
    }
    pthread_mutex_unlock(&aof.mu);
    return NULL;
}

static void requestFsync(void) {
    if (!aof.thread_started) {
        if (pthread_create(&aof.thread, NULL, fsyncThread, NULL) != 0) {
            int err = fdatasync(aof.fd) == -1 ? errno : 0;
            pthread_mutex_lock(&aof.mu);
            aof.fsync_errno = err;
            pthread_mutex_unlock(&aof.mu);
            return;
        }
        aof.thread_started = 1;
    }
    pthread_mutex_lock(&aof.mu);
    if (aof.fsync_running) {
        aof.delayed_fsync++;
    } else {
        /* The thread syncs its own descriptor of the file, so a switch to
         * the next increment never closes what it is syncing. */
        if (aof.fsync_fd != -1) close(aof.fsync_fd);
        aof.fsync_fd = dup(aof.fd);
        aof.fsync_requested = 1;
        pthread_cond_signal(&aof.cv);
    }
    pthread_mutex_unlock(&aof.mu);
}

/* ---- writing -------------------------------------------------------------- */

/* Writes p to the increment and counts what went. -1 (errno set) if not
 * all of it went; *done says how much did. */
static int logWrite(const char *p, size_t len, size_t *done) {
    if (aofDebugWriteErrno) {
        *done = 0;
        errno = aofDebugWriteErrno;
        return -1;
    }
    int rc = writeSome(aof.fd, p, len, done);
    aof.incr_size += (long long)*done;
    aof.cur_size += (long long)*done;
    return rc;
}

/* What was written leaves the buffer, so a failed write's next try goes on
 * exactly where this one stopped: the file never holds a record twice or a
 * torn one in its middle. */
static int flushBuf(void) {
    size_t done;
    int rc = logWrite(aof.buf, sdslen(aof.buf), &done);
    if (rc == 0 && sdsalloc(aof.buf) > 1024 * 1024) {
        sdsfree(aof.buf);
        aof.buf = sdsempty();
    } else {
        sdsrange(aof.buf, (ssize_t)done, -1);
    }
    return rc;
}

void aofBeforeSleep(void) {
    if (!aofOn) return;
    int failed = 0;
    size_t from, to;
    sds *keys = changedKeysNext(&aof.changed, &from, &to);
    /* More than one record this iteration (a MULTI's, a pipeline's, a
     * FLUSHALL's and what followed it): MULTI ... EXEC around them, so a
     * load takes all or none. One write() does not make them atomic: a
     * large value goes out in writes of its own, and a kill -9 can cut a
     * long write short; the load cut such a tail at the record it ended
     * in, keeping the group's first records -- a transaction half made,
     * though its reply was never sent. */
    if (aof.iter_start > sdslen(aof.buf)) aof.iter_start = sdslen(aof.buf);
    int hooks = sdslen(aof.buf) > aof.iter_start;
    int group = to - from >= 2 || (to - from >= 1 && hooks);
    if (group) { /* MULTI goes in ahead of the hooks' records, in place */
        size_t mlen, tail = sdslen(aof.buf) - aof.iter_start;
        const char *multi = aofGroupRecord(1, &mlen);
        aof.buf = sdsMakeRoomFor(aof.buf, mlen);
        memmove(aof.buf + aof.iter_start + mlen, aof.buf + aof.iter_start, tail);
        memcpy(aof.buf + aof.iter_start, multi, mlen);
        sdsIncrLen(aof.buf, (ssize_t)mlen);
    }
    {
        for (size_t i = from; i < to; i++) {
            int seg_only = 0;
            valueRef r = {0};
            /* A large value goes from the pool to the file: what is before
             * it first, then it; its end starts the buffer anew. Only a
             * write that fails copies the rest of it into the buffer. */
            aof.buf = catKeyState(aof.buf, keys[i], &seg_only, failed ? NULL : &r, 1, 1);
            if (r.value) {
                size_t done = 0;
                failed = flushBuf() == -1 || logWrite(r.value, r.vlen, &done) == -1;
                aof.buf = catValueRef(aof.buf, &r, failed ? done : r.vlen);
            }
            aof.segment_objects_not_logged += (unsigned)seg_only;
            aof.records_written++;
        }
    }
    if (group) aof.buf = aofCatGroup(aof.buf, 0);
    aof.iter_start = 0;
    if (!failed) {
        if (sdslen(aof.buf) == 0) return;
        failed = flushBuf() == -1;
    }
    aof.iter_start = sdslen(aof.buf); /* what a failed write left: an earlier iteration's */
    if (failed) {
        /* Until a write succeeds, writes are refused (aofWriteRefusal). */
        if (aof.last_write_ok) serverLog(LL_WARNING, "AOF: write error: %s", strerror(errno));
        aof.last_write_ok = 0;
        aof.last_write_errno = errno;
        if (server.aof_fsync == AOF_FSYNC_ALWAYS) {
            serverLog(LL_WARNING, "AOF: cannot write the log with appendfsync always: exiting, so that no "
                                  "write is acknowledged that is not on disk");
            exit(1);
        }
        return;
    }
    if (!aof.last_write_ok) serverLog(LL_WARNING, "AOF: writes succeed again");
    aof.last_write_ok = 1;
    if (server.aof_fsync == AOF_FSYNC_ALWAYS) {
        if (fdatasync(aof.fd) == -1) {
            serverLog(LL_WARNING, "AOF: fsync failed with appendfsync always (%s): exiting", strerror(errno));
            exit(1);
        }
        aof.last_fsync_ms = server.monotime;
    }
}

/* An fsync that failed under everysec refuses writes as a failed write
 * does, until one succeeds, as Redis's does: the kernel reports a writeback
 * error once and may drop the pages, so what was written may never reach
 * the disk, and acknowledging more on top of it would hide that. Read from
 * the thread once per cron tick. */
static void checkFsync(void) {
    pthread_mutex_lock(&aof.mu);
    int err = aof.fsync_errno;
    pthread_mutex_unlock(&aof.mu);
    if (err && !aof.fsync_failed)
        serverLog(LL_WARNING, "AOF: fsync failed (%s): writes are refused until one succeeds", strerror(err));
    else if (!err && aof.fsync_failed)
        serverLog(LL_WARNING, "AOF: fsync succeeds again");
    aof.fsync_failed = err;
}

const char *aofWriteRefusal(void) {
    if (!aofOn || (aof.last_write_ok && !aof.fsync_failed && !aof.files_lost)) return NULL;
    if (aof.files_lost)
        return "-MISCONF The AOF files were deleted or replaced: writes are refused until a rewrite has put the "
               "dataset in new ones";
    return "-MISCONF Errors writing to the AOF file: writes are refused until the log can be written again";
}

/* ---- files deleted or replaced under the server ---------------------------- */

static int rewriteStart(const char **err);
static int openDir(void);

/* Whether the files the manifest lists are still the log: NULL if so, else
 * what happened. Writes to an increment someone deleted (or moved, or
 * replaced by another file) still succeed -- into an inode no start will
 * read -- and a start refuses a manifest whose files are missing: every
 * write acknowledged meanwhile would be lost, and the log with them. A
 * few fstatat()s a cron tick. */
static const char *filesLost(void) {
    struct stat fst, nst;
    const char *cur = NULL;
    if (fstat(aof.dirfd, &nst) == -1 || nst.st_nlink == 0) return "the AOF directory was deleted";
    for (int j = 0; j < aof.man.nfiles; j++) {
        const aofManifestFile *f = &aof.man.files[j];
        if (f->type == 'h') continue;
        if (fstatat(aof.dirfd, f->name, &nst, 0) == -1) return "a file the manifest lists was deleted";
        if (f->type == 'i') cur = f->name;
    }
    if (aof.fd != -1 && cur) {
        if (fstat(aof.fd, &fst) == -1 || fst.st_nlink == 0) return "the increment being written was deleted";
        if (fstatat(aof.dirfd, cur, &nst, 0) == -1 || nst.st_ino != fst.st_ino || nst.st_dev != fst.st_dev)
            return "the increment being written was replaced";
        if ((long long)fst.st_size < aof.cur_size) return "the increment being written was truncated";
    }
    char name[AOF_FILE_NAME_MAX + 32];
    snprintf(name, sizeof(name), "%s%s", server.aof_filename, AOF_MANIFEST_SUFFIX);
    if (aof.manifest_ino &&
        (fstatat(aof.dirfd, name, &nst, 0) == -1 || nst.st_ino != aof.manifest_ino || nst.st_dev != aof.manifest_dev))
        return "the manifest was deleted or replaced";
    return NULL;
}

/* Refuses writes while the files are not the log, and rebuilds it: a
 * rewrite puts the whole dataset (the writes since the loss included: they
 * are in memory) in a new base, listed with a new increment by a new
 * manifest. Until that is done, writes answer MISCONF, so none is
 * acknowledged that only a lost file holds. */
static void checkFiles(void) {
    const char *why = filesLost();
    if (why && !aof.files_lost)
        serverLog(LL_WARNING, "AOF: %s: writes are refused until a rewrite has put the dataset in new files", why);
    else if (!why && aof.files_lost)
        serverLog(LL_WARNING, "AOF: the log is whole again (rewritten): writes are accepted");
    aof.files_lost = why;
    /* One rewrite at a time, and a failed one tried again after a pause:
     * each start opens an increment. */
    if (!why || aof.child != -1 || server.monotime - aof.lost_rewrite_ms < 5000) return;
    aof.lost_rewrite_ms = server.monotime;
    struct stat st;
    if ((fstat(aof.dirfd, &st) == -1 || st.st_nlink == 0) && openDir() == -1) return; /* try again next tick */
    const char *err;
    if (rewriteStart(&err) != C_OK) serverLog(LL_WARNING, "AOF: cannot rewrite the log yet: %s", err);
}

/* ---- the rewrite ----------------------------------------------------------- */

static int rewriteFd = -1;

/* A large value from the pool into the rewrite's file, through a private
 * copy, a chunk at a time, checksummed as copied (catObjState says why
 * not from the pool directly); then the rest of its record. */
static int rewriteValue(int fd, const valueRef *r, sds *buf) {
    static char chunk[1024 * 1024];
    uint64_t crc = r->crc_seed;
    if (aofDebugRewriteDelayMs) usleep((useconds_t)aofDebugRewriteDelayMs * 1000);
    for (size_t off = 0; off < r->vlen;) {
        size_t n = r->vlen - off < sizeof(chunk) ? r->vlen - off : sizeof(chunk);
        memcpy(chunk, r->value + off, n);
        crc = crc64(crc, (const unsigned char *)chunk, n);
        if (writeAll(fd, chunk, n) == -1) return -1;
        off += n;
    }
    unsigned char trailer[DUMP_TRAILER_LEN];
    dumpWriteTrailer(crc, trailer);
    *buf = aofCatRestoreEnd(*buf, trailer, r->checked, r->check_seed);
    return 0;
}

static sds rewriteEmit(sds buf) {
    buf = aofCheckRecords(buf, 0); /* detachedRewrite's PLACED records */
    if (writeAll(rewriteFd, buf, sdslen(buf)) == -1) _exit(1);
    sdsclear(buf);
    return buf;
}

/* The child: the dataset it sees into tmp, synced. Exits. */
static void rewriteChild(const char *tmp) {
    int fd = openat(aof.dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd == -1) _exit(1);
    sds buf = aofCatFileHeader(sdsempty());
    size_t from = sdslen(buf);
    buf = aofCheckRecords(aofCatSegments(buf), from); /* the segments first: a PLACED record names them */
    dictIterator *it = dictGetSafeIterator(server.keys);
    dictEntry *de;
    int seg_only;
    while ((de = dictNext(it)) != NULL) {
        seg_only = 0;
        long long expire;
        storeObj *o = storePeek(de->key, &expire);
        aofPlaced p;
        if (o == NULL || (storeObjLocalPtr(o) == NULL && !placedOf(o, &p)))
            continue; /* a base lists what is, DEL has no place */
        valueRef r = {.deferred = 1}; /* its checksum is rewriteValue's */
        buf = catObjState(buf, de->key, o, expire, &seg_only, &r, 1, 1);
        if (r.value) {
            if (writeAll(fd, buf, sdslen(buf)) == -1) _exit(1);
            sdsclear(buf);
            if (rewriteValue(fd, &r, &buf) == -1) _exit(1);
        }
        if (sdslen(buf) >= 4 * 1024 * 1024) {
            if (writeAll(fd, buf, sdslen(buf)) == -1) _exit(1);
            sdsclear(buf);
        }
    }
    dictReleaseIterator(it);
    rewriteFd = fd;
    if (writeAll(fd, buf, sdslen(buf)) == -1) _exit(1);
    sdsclear(buf);
    buf = detachedRewrite(buf, rewriteEmit); /* objects still waiting for their hosts */
    buf = aofCheckRecords(buf, 0);
    if (writeAll(fd, buf, sdslen(buf)) == -1 || fsync(fd) == -1 || close(fd) == -1) _exit(1);
    _exit(0);
}

/* The child accepts no one: its copies of the listening sockets would keep
 * the ports open after a kill -9 of the server for as long as the child
 * takes to die (its memory goes before its files), so a client connected
 * to a process that never answers, and a server restarted at once could
 * not bind. As Redis's children, it closes them first: close() alone, not
 * closeListeners(), whose epoll deletes would reach the parent's epoll
 * set (shared across the fork) and whose unlink would remove its socket. */
static void childCloseListeners(void) {
    for (int j = 0; j < server.ipfd_count; j++) close(server.ipfd[j]);
    if (server.sofd != -1) close(server.sofd);
    int http = httpListenFd();
    if (http != -1) close(http);
}

/* A rewrite failed: the automatic ones wait 1 s, then 2, 4 ... up to a
 * minute before the next try, as Redis's back off. Retried at once, every
 * cron tick, one that keeps failing (a disk too small for the base, a
 * file-size limit) forked a copy of the dataset ten times a second. */
static void rewriteFailed(void) {
    aof.last_rewrite_ok = 0;
    aof.rewrite_failures++;
    int shift = aof.rewrite_failures - 1 < 6 ? aof.rewrite_failures - 1 : 6;
    long long delay = 1000LL << shift;
    if (delay > 60000) delay = 60000;
    aof.rewrite_retry_ms = monoMs() + delay;
    serverLog(LL_WARNING, "Background AOF rewrite failed (%d in a row); the log goes on in its increments, and "
                          "the next automatic rewrite waits %lld s",
              aof.rewrite_failures, delay / 1000);
}

static int rewriteStart(const char **err) {
    if (aof.child != -1) {
        *err = "ERR Background append only file rewriting already in progress";
        return C_ERR;
    }
    aofBeforeSleep(); /* the increment holds everything up to the fork */
    /* An increment that holds nothing yet (opened at the start, or at a
     * rewrite that failed) can be this fork's: all it will hold comes
     * after the fork. A new one per attempt made a failing rewrite pile
     * up increments, one per try, until the manifest was full and the
     * server could no longer start. */
    if (aof.fd == -1 || aof.cur_size > (long long)AOF_FILE_HEADER_LEN || aof.files_lost) {
        aofManifest next = aof.man;
        int fd = openNewIncr(&next);
        if (fd == -1)
            serverLog(LL_WARNING, "AOF: cannot open a new increment in %s for a rewrite: %s", server.aof_dirname,
                      strerror(errno));
        if (fd == -1 || writeManifest(&next) == -1) { /* writeManifest logs its own failure */
            if (fd != -1) close(fd);
            *err = "ERR cannot open a new AOF increment (see the log)";
            return C_ERR;
        }
        aof.man = next;
        switchFd(fd);
    }
    aof.child_incr_seq = aof.incr_seq;
    const char *tmp = aof.child_tmp;
    snprintf(aof.child_tmp, sizeof(aof.child_tmp), "temp-rewriteaof-bg-%d.aof", (int)getpid());
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* A child of a server with threads: it only walks memory and writes
         * a file, and leaves without running the parent's exit handlers.
         * It dies with the server: a killed server's child went on writing
         * a dataset's copy no one would ever rename (the next start keeps
         * a temp file whose writer is alive), and held its memory. */
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1); /* the server died before the line above */
        childCloseListeners();
        rewriteChild(tmp);
    }
    if (pid == -1) {
        *err = "ERR cannot fork for the AOF rewrite";
        serverLog(LL_WARNING, "AOF: fork failed: %s", strerror(errno));
        rewriteFailed();
        return C_ERR;
    }
    aof.child = pid;
    aof.rewrite_start_ms = monoMs();
    aof.rewrite_scheduled = 0;
    serverLog(LL_NOTICE, "Background append only file rewriting started by pid %d", (int)pid);
    return C_OK;
}

/* The child is done: on success its file becomes the base and the manifest
 * lists it with the increments opened since the fork; the old files go. */
static void rewriteDone(int ok) {
    const char *tmp = aof.child_tmp;
    char base[AOF_FILE_NAME_MAX + 1];
    aof.child = -1;
    aof.last_rewrite_ms = monoMs() - aof.rewrite_start_ms;
    aof.rewrite_start_ms = 0;
    if (!ok) goto fail;
    long long seq = aof.base_seq + 1;
    fileName(base, sizeof(base), "base", seq);
    if (renameat(aof.dirfd, tmp, aof.dirfd, base) == -1) goto fail;
    aofManifest next = {.nfiles = 0};
    aofManifestFile *b = &next.files[next.nfiles++];
    snprintf(b->name, sizeof(b->name), "%s", base);
    b->seq = seq;
    b->type = 'b';
    for (int j = 0; j < aof.man.nfiles; j++)
        if (aof.man.files[j].type == 'i' && aof.man.files[j].seq >= aof.child_incr_seq) next.files[next.nfiles++] = aof.man.files[j];
    if (writeManifest(&next) == -1) {
        unlinkat(aof.dirfd, base, 0);
        goto fail;
    }
    for (int j = 0; j < aof.man.nfiles; j++) {
        aofManifestFile *f = &aof.man.files[j];
        if (f->type != 'i' || f->seq < aof.child_incr_seq) unlinkat(aof.dirfd, f->name, 0);
    }
    aof.man = next;
    aof.base_seq = seq;
    struct stat st;
    aof.base_size = fstatat(aof.dirfd, base, &st, 0) == 0 ? (long long)st.st_size : 0;
    aof.incr_size = 0;
    for (int j = 1; j < next.nfiles; j++)
        if (fstatat(aof.dirfd, next.files[j].name, &st, 0) == 0) aof.incr_size += (long long)st.st_size;
    aof.last_rewrite_ok = 1;
    aof.rewrite_failures = 0;
    aof.rewrite_retry_ms = 0;
    aof.rewrites++;
    serverLog(LL_NOTICE, "Background AOF rewrite finished successfully: base %s, %lld bytes", base, aof.base_size);
    return;
fail:
    unlinkat(aof.dirfd, tmp, 0);
    rewriteFailed();
}

void aofCron(void) {
    if (aof.child != -1) {
        int status;
        pid_t pid = waitpid(aof.child, &status, WNOHANG);
        if (pid == aof.child) rewriteDone(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (!aofOn) return;
    checkFsync();
    checkFiles();
    if (server.aof_fsync == AOF_FSYNC_EVERYSEC && server.monotime - aof.last_fsync_ms >= 1000) {
        aof.last_fsync_ms = server.monotime;
        requestFsync();
    }
    if (aof.child == -1 && server.monotime >= aof.rewrite_retry_ms && (aof.rewrite_scheduled ||
                            (server.auto_aof_rewrite_percentage > 0 &&
                             aof.incr_size >= server.auto_aof_rewrite_min_size &&
                             aof.incr_size * 100 >= (aof.base_size ? aof.base_size : 1) *
                                                        server.auto_aof_rewrite_percentage))) {
        const char *err;
        int scheduled = aof.rewrite_scheduled;
        if (rewriteStart(&err) == C_OK) {
            if (!scheduled) serverLog(LL_NOTICE, "Starting automatic rewriting of AOF");
        } else {
            aof.rewrite_retry_ms = server.monotime + 1000; /* no increment to open, say: not every tick */
        }
    }
}

void bgrewriteaofCommand(client *c) {
    const char *err;
    if (!aofOn) {
        addReplyError(c, "ERR appendonly is no: there is no log to rewrite (CONFIG SET appendonly yes)");
        return;
    }
    if (rewriteStart(&err) != C_OK) {
        addReplyError(c, err);
        return;
    }
    addReplyStatus(c, "Background append only file rewriting started");
}

/* ---- loading --------------------------------------------------------------- */

static void refuseLine(const char *msg) {
    serverLog(LL_WARNING, "%s", msg);
    serverLog(LL_WARNING, "Refusing to start: run mooncake-check-aof %s/%s%s to see the damage (and --fix to cut a "
                          "damaged tail), or move the directory away to start empty",
              server.aof_dirname, server.aof_filename, AOF_MANIFEST_SUFFIX);
    exit(1);
}

static void refuse(const char *fmt, const char *file, long long off, const char *why) {
    char msg[1024];
    snprintf(msg, sizeof(msg), fmt, file, off, why);
    refuseLine(msg);
}

typedef struct loadCounts {
    long long records, restored, deleted, flushes, expired_skipped, segments, placed;
    int old_format; /* files of format 1 (no header): a rewrite follows the load */
} loadCounts;

static void applyRecord(const aofRecord *rec, loadCounts *n, const char *file, long long off) {
    n->records++;
    if (rec->type == AOF_REC_FLUSHALL) {
        storeFlush();
        detachedFlushAll();
        n->flushes++;
        return;
    }
    if (rec->type == AOF_REC_SEGMENT) {
        if (segmentRestoreFromLog(&rec->seg) != 0)
            serverLog(LL_WARNING, "AOF %s at offset %lld: segment id %llu cannot be restored (no slot left, or its "
                                  "id is the pool's): its objects will not be re-attached",
                      file, off, (unsigned long long)rec->seg.id);
        n->segments++;
        return;
    }
    if (rec->type == AOF_REC_SEGMENT_GONE) {
        segment *s = segmentLookupId(rec->segid);
        if (s && s->state == SEG_DETACHED) segmentUnmount(s);
        return;
    }
    sds key = sdsnewlen(rec->key, rec->keylen);
    detachedKeyChanged(key); /* whatever this record says of key is newer */
    if (rec->type == AOF_REC_DEL) {
        storeDelete(key);
        n->deleted++;
    } else if (rec->expire_ms && rec->expire_ms <= server.mstime) {
        storeDelete(key); /* expired while the server was down */
        n->expired_skipped++;
    } else if (rec->type == AOF_REC_PLACED) {
        storeDelete(key);
        detachedLoadPlaced(key, rec->expire_ms, &rec->placed);
        n->placed++;
    } else {
        storeObj *o = dumpObjectCreate(key, &rec->dump); /* parsed and checked by aofNextRecord */
        if (o == NULL)
            refuse("AOF %s at offset %lld: %s", file, off,
                   "the log holds more than the pool: start with a larger segment-size (or maxmemory)");
        storeSet(key, o, rec->expire_ms ? rec->expire_ms : -1, 0);
        n->restored++;
    }
    sdsfree(key);
}

/* Replays one file; the last one may be cut where a crash cut it. */
static long long loadFile(const char *name, int last, loadCounts *n) {
    /* A listed file is always there: each is created before the manifest
     * that names it is renamed into place (and the directory synced). One
     * that is missing was deleted or lost, with whatever it held, so it
     * refuses to start as Redis does, even the last increment: loading
     * without it would drop acknowledged writes without a word. */
    int fd = openat(aof.dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        if (errno == ENOENT) {
            char msg[512];
            snprintf(msg, sizeof(msg), "AOF %s is listed in the manifest but does not exist: it was deleted or lost, "
                                       "and what it held with it", name);
            refuseLine(msg);
        }
        refuse("AOF %s: cannot open (%lld): %s", name, 0, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) == -1) refuse("AOF %s: cannot stat (%lld): %s", name, 0, strerror(errno));
    size_t len = (size_t)st.st_size;
    const char *map = NULL;
    if (len) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) refuse("AOF %s: cannot map (%lld): %s", name, (long long)len, strerror(errno));
        madvise((void *)map, len, MADV_SEQUENTIAL);
    }
    size_t off = 0, next;
    char why[128];
    aofRecord rec;
    /* Parts are bounded by the file itself (it is mapped): a value the log
     * holds loads even if max-object-size was lowered since it was written. */
    size_t max_record = SIZE_MAX;
    int version;
    int rc = aofFileFormat(map, len, &version, &off, why, sizeof(why));
    if (rc == AOF_REC_CORRUPT) refuse("AOF %s cannot be read (offset %lld): %s", name, 0, why);
    if (rc == AOF_REC_OK && version < AOF_FORMAT_VERSION && len) n->old_format++;
    /* A group (MULTI ... EXEC) is applied at its EXEC, all of it: its
     * records are read again from their offsets then (checked twice: a
     * group is one loop iteration's, and only a file's end can cut one). */
    size_t group = SIZE_MAX, *gofs = NULL, gn = 0, gcap = 0;
    for (;;) {
        if (rc == AOF_REC_OK) rc = aofNextLogRecord(map, len, off, max_record, version, &rec, &next, why, sizeof(why));
        if (rc == AOF_REC_END && group != SIZE_MAX) {
            rc = AOF_REC_TRUNCATED;
            snprintf(why, sizeof(why), "the file ends inside a MULTI ... EXEC group");
        }
        if (rc == AOF_REC_END) break;
        if (rc == AOF_REC_OK) {
            if (rec.type == AOF_REC_MULTI || rec.type == AOF_REC_EXEC) {
                if ((rec.type == AOF_REC_MULTI) != (group == SIZE_MAX)) {
                    rc = AOF_REC_CORRUPT;
                    snprintf(why, sizeof(why), "%s", rec.type == AOF_REC_MULTI ? "MULTI inside a MULTI" : "EXEC without MULTI");
                    continue;
                }
                if (rec.type == AOF_REC_MULTI) {
                    group = off;
                    gn = 0;
                } else {
                    for (size_t g = 0; g < gn; g++) {
                        size_t gnext;
                        serverAssert(aofNextLogRecord(map, len, gofs[g], max_record, version, &rec, &gnext, why,
                                                      sizeof(why)) == AOF_REC_OK);
                        applyRecord(&rec, n, name, (long long)gofs[g]);
                    }
                    group = SIZE_MAX;
                }
            } else if (group != SIZE_MAX) {
                if (gn == gcap) {
                    gcap = gcap ? gcap * 2 : 64;
                    gofs = zrealloc(gofs, gcap * sizeof(*gofs));
                }
                gofs[gn++] = off;
            } else {
                applyRecord(&rec, n, name, (long long)off);
            }
            off = next;
            continue;
        }
        /* A cut inside a group cuts the whole group: none of it was
         * acknowledged. */
        if (rc == AOF_REC_TRUNCATED && group != SIZE_MAX) off = group;
        if (rc == AOF_REC_TRUNCATED && last && server.aof_load_truncated) {
            serverLog(LL_WARNING, "!!! Warning: short read while loading the AOF file %s (%s at offset %zu of %zu): "
                                  "cutting the last %zu bytes, a write a crash left unfinished",
                      name, why, off, len, len - off);
            int wfd = openat(aof.dirfd, name, O_WRONLY | O_CLOEXEC);
            if (wfd == -1 || ftruncate(wfd, (off_t)off) == -1 || fsync(wfd) == -1)
                refuse("AOF %s: cannot cut the tail at offset %lld: %s", name, (long long)off, strerror(errno));
            close(wfd);
            len = off;
            break;
        }
        if (rc == AOF_REC_TRUNCATED)
            refuse(last ? "AOF %s ends inside a record at offset %lld (%s) and aof-load-truncated is no"
                        : "AOF %s ends inside a record at offset %lld (%s), and it is not the last file",
                   name, (long long)off, why);
        refuse("AOF %s is corrupt at offset %lld: %s", name, (long long)off, why);
    }
    zfree(gofs);
    if (map) munmap((void *)map, (size_t)st.st_size);
    close(fd);
    return (long long)len;
}

static int openDir(void) {
    if (mkdir(server.aof_dirname, 0755) == -1 && errno != EEXIST) return -1;
    int fd = open(server.aof_dirname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd == -1) return -1;
    if (aof.dirfd != -1) close(aof.dirfd);
    aof.dirfd = fd;
    return 0;
}

static void initState(void) {
    if (aof.buf == NULL) aof.buf = sdsempty();
}

/* The manifest in the log's directory, into m: 0; 1 when there is none
 * (m empty); -1 when it cannot be read or is not one (why says). *name:
 * its file name, for messages. */
static int readManifest(aofManifest *m, const char **name, char *why, size_t whylen) {
    static char mname[AOF_FILE_NAME_MAX + 32];
    snprintf(mname, sizeof(mname), "%s%s", server.aof_filename, AOF_MANIFEST_SUFFIX);
    *name = mname;
    m->nfiles = 0;
    int fd = openat(aof.dirfd, mname, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        if (errno == ENOENT) return 1;
        snprintf(why, whylen, "cannot open: %s", strerror(errno));
        return -1;
    }
    size_t cap = AOF_MANIFEST_MAX_FILES * 300; /* past the longest valid one */
    char *text = zmalloc(cap);
    ssize_t got = read(fd, text, cap);
    close(fd);
    int rc = 0;
    if (got < 0 || (size_t)got == cap) {
        snprintf(why, whylen, "unreadable or too long");
        rc = -1;
    } else if (aofManifestParse(text, (size_t)got, m, why, whylen) == -1) {
        m->nfiles = 0;
        rc = -1;
    }
    zfree(text);
    return rc;
}

/* The keyspace sized once for what the log sets, not doubled and rehashed
 * all through the load (a third of loading small keys went to rehashing),
 * and in cluster mode each slot's index for its share of this node's slots.
 * An upper bound: a key set twice is counted twice. */
static void presizeKeyspace(void) {
    size_t keys = 0;
    for (int j = 0; j < aof.man.nfiles; j++) {
        aofManifestFile *f = &aof.man.files[j];
        if (f->type == 'h') continue;
        int fd = openat(aof.dirfd, f->name, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd == -1) continue;
        if (fstat(fd, &st) == 0 && st.st_size > 0) {
            void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (map != MAP_FAILED) {
                madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
                keys += aofSkimKeyRecords(map, (size_t)st.st_size);
                munmap(map, (size_t)st.st_size);
            }
        }
        close(fd);
    }
    storePresize(keys, server.cluster && server.cluster->myself ? server.cluster->myself->numslots : 0);
}

/* Whether name is one of the log's data files, <appendfilename>.<seq>.base.aof
 * or .incr.aof, as fileName makes them. */
static int dataFileName(const char *name) {
    size_t fl = strlen(server.aof_filename);
    if (strncmp(name, server.aof_filename, fl) != 0 || name[fl] != '.') return 0;
    const char *p = name + fl + 1, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    return q > p && (!strcmp(q, ".base.aof") || !strcmp(q, ".incr.aof"));
}

/* temp-rewriteaof-bg-<pid>.aof of a rewrite child no longer running. One
 * still running belongs to another server sharing this directory (another
 * appendfilename): its rewrite must not lose its file under it. */
static int deadRewriteTemp(const char *name) {
    const char *pre = "temp-rewriteaof-bg-";
    size_t pl = strlen(pre), len = strlen(name);
    if (strncmp(name, pre, pl) || len <= pl + 4 || strcmp(name + len - 4, ".aof")) return 0;
    long long pid;
    if (!string2ll(name + pl, len - pl - 4, &pid) || pid <= 0 || pid > INT_MAX) return 0;
    return kill((pid_t)pid, 0) == -1 && errno == ESRCH;
}

/* Removes what a crash left in the log's directory: a rewrite's unfinished
 * base (temp-rewriteaof-bg-<pid>.aof, a copy of the whole dataset), a
 * manifest never renamed into place, and -- when a manifest lists files --
 * data files it does not list (a base renamed or an increment opened just
 * before a crash, old files a finished rewrite had not deleted yet). None
 * of them is ever loaded: the manifest is the whole truth. Left alone,
 * each kill -9 during a rewrite leaked a dataset's worth of disk, until
 * the disk was full and the log could no longer be written. Only our own
 * names are touched. */
static void removeLeftovers(int have_manifest) {
    int fd = dup(aof.dirfd);
    DIR *dir = fd == -1 ? NULL : fdopendir(fd);
    if (dir == NULL) {
        if (fd != -1) close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        const char *name = de->d_name;
        int temp = !strcmp(name, AOF_TEMP_MANIFEST) || deadRewriteTemp(name);
        int orphan = 0;
        if (!temp && have_manifest && dataFileName(name)) {
            orphan = 1;
            for (int j = 0; j < aof.man.nfiles && orphan; j++)
                if (!strcmp(aof.man.files[j].name, name)) orphan = 0;
        }
        if (!temp && !orphan) continue;
        if (unlinkat(aof.dirfd, name, 0) == 0)
            serverLog(LL_NOTICE, "AOF: removed %s, %s", name,
                      temp ? "left unfinished by a crash" : "a file the manifest does not list");
    }
    closedir(dir);
}

/* appenddirname and appendfilename name files in dir, never elsewhere. */
static int plainName(const char *s) { return s[0] && s[0] != '.' && strchr(s, '/') == NULL && strlen(s) <= 200; }

static int startedFromLog; /* aofStartedFromLog */

int aofStartedFromLog(void) { return startedFromLog; }

void aofLoadAtStart(void) {
    if (!plainName(server.aof_dirname) || !plainName(server.aof_filename)) {
        serverLog(LL_WARNING, "appenddirname and appendfilename must be plain names (no '/', not starting with "
                              "'.'): they name a directory and files in dir");
        exit(1);
    }
    if (!server.aof_enabled) return;
    /* The clock the records' expiries are judged by: the event loop sets
     * it only once it runs, and at 0 every key that expired while the
     * server was down came back (into the pool, counted by DBSIZE, until
     * the cron expired it -- and a log of such values could even refuse to
     * start, as holding more than the pool). */
    updateCachedTime();
    initState();
    if (openDir() == -1) {
        serverLog(LL_WARNING, "Cannot open the AOF directory %s: %s", server.aof_dirname, strerror(errno));
        exit(1);
    }
    const char *mname;
    char why[160];
    int mrc = readManifest(&aof.man, &mname, why, sizeof(why));
    if (mrc == -1) refuse("AOF manifest %s is corrupt or unreadable (%lld): %s", mname, 0, why);
    int listed = aof.man.nfiles; /* a manifest that lists nothing vouches for nothing: removeLeftovers */
    startedFromLog = listed > 0;
    long long start = mstime();
    loadCounts n = {0};
    long long total = 0;
    presizeKeyspace();
    aof.loading = 1;
    int lastdata = -1;
    for (int j = 0; j < aof.man.nfiles; j++)
        if (aof.man.files[j].type != 'h') lastdata = j;
    for (int j = 0; j < aof.man.nfiles; j++) {
        aofManifestFile *f = &aof.man.files[j];
        if (f->type == 'h') continue;
        long long sz = loadFile(f->name, j == lastdata, &n);
        total += sz;
        if (f->type == 'b') {
            aof.base_size = sz;
            if (f->seq > aof.base_seq) aof.base_seq = f->seq;
        } else {
            aof.incr_size += sz;
            if (f->seq > aof.incr_seq) aof.incr_seq = f->seq;
        }
    }
    storePresizeDone();
    detachedLoadDone();
    aof.loading = 0;
    if (aof.man.nfiles) {
        serverLog(LL_NOTICE,
                  "DB loaded from append only file: %lld records in %d files (%lld bytes): %lld keys restored, "
                  "%lld deleted, %lld flushes, %lld expired while down; %llu keys now, in %.3f seconds",
                  n.records, aof.man.nfiles, total, n.restored, n.deleted, n.flushes, n.expired_skipped,
                  (unsigned long long)dictSize(server.keys), (double)(mstime() - start) / 1000);
        if (detachedEntries)
            serverLog(LL_NOTICE,
                      "%lu objects in client segments are held until their hosts mount those segments again with "
                      "the identity they had (for owner-ttl at most); until then they are not keys",
                      detachedEntries);
    } else {
        serverLog(LL_NOTICE, "No AOF in %s: starting empty, logging from now on", server.aof_dirname);
    }
    /* Appending continues in a new increment: a cut tail stays cut, and a
     * file we did not write ourselves is never appended to. */
    aofManifest next = aof.man;
    int fd = openNewIncr(&next);
    if (fd == -1 || writeManifest(&next) == -1) {
        serverLog(LL_WARNING, "Cannot open a new AOF increment in %s: %s", server.aof_dirname, strerror(errno));
        exit(1);
    }
    aof.man = next;
    switchFd(fd);
    removeLeftovers(listed > 0);
    aofOn = 1;
    if (n.old_format) {
        /* Format 1's records check their values but not their keys and
         * expiries: the first rewrite puts the whole dataset in format 2. */
        serverLog(LL_NOTICE, "AOF: %d files of format 1 (an older build's, keys and expiries unchecked): "
                             "rewriting the log in format %d", n.old_format, AOF_FORMAT_VERSION);
        aof.rewrite_scheduled = 1;
    } else if (aof.man.nfiles > AOF_MANIFEST_MAX_FILES / 8) {
        /* Each start opens an increment, and only a rewrite folds them:
         * one restarted often (a crash loop) with little written never
         * reached the size that starts one, until the manifest was full
         * and the server could no longer start at all. */
        serverLog(LL_NOTICE, "AOF: %d files in the manifest: rewriting the log into one base", aof.man.nfiles);
        aof.rewrite_scheduled = 1;
    }
}

/* ---- CONFIG SET appendonly ----------------------------------------------------- */

int aofApplyConfig(const char **err) {
    if (server.el == NULL) return C_OK; /* start-up: aofLoadAtStart */
    if (server.aof_enabled && !aofOn) {
        /* The dataset as it is now becomes the base (a rewrite), the
         * increment opened at its fork takes what follows. */
        initState();
        if (openDir() == -1) {
            *err = "cannot open the AOF directory (see the log)";
            serverLog(LL_WARNING, "Cannot open the AOF directory %s: %s", server.aof_dirname, strerror(errno));
            return C_ERR;
        }
        /* Files an earlier run left describe an older dataset: they become
         * history, deleted once the rewrite's base is in place, and new
         * files are numbered past them. */
        const char *mname;
        char why[160];
        if (readManifest(&aof.man, &mname, why, sizeof(why)) == 0) {
            for (int j = 0; j < aof.man.nfiles; j++) {
                aofManifestFile *f = &aof.man.files[j];
                if (f->type == 'b' && f->seq > aof.base_seq) aof.base_seq = f->seq;
                if (f->type != 'b' && f->seq > aof.incr_seq) aof.incr_seq = f->seq;
                f->type = 'h';
            }
        } else {
            aof.man.nfiles = 0;
        }
        aofOn = 1;
        aof.last_write_ok = 1;
        aof.files_lost = NULL; /* an earlier log's: this one is checked from now */
        pthread_mutex_lock(&aof.mu);
        aof.fsync_errno = aof.fsync_failed = 0; /* what an earlier log's disk said */
        pthread_mutex_unlock(&aof.mu);
        if (rewriteStart(err) != C_OK) {
            aofOn = 0;
            return C_ERR;
        }
        return C_OK;
    }
    if (!server.aof_enabled && aofOn) {
        aofBeforeSleep();
        aofOn = 0;
        if (aof.child != -1) {
            kill(aof.child, SIGKILL);
            int status;
            waitpid(aof.child, &status, 0);
            rewriteDone(0);
        }
        switchFd(-1);
    }
    return C_OK;
}

int aofShutdown(int force) {
    if (aofOn) {
        /* What was acknowledged since the disk last took a write is only
         * in aof.buf (everysec and no acknowledge it, and retry): exiting
         * now would lose it, so the shutdown is refused, as Redis's is
         * when it cannot persist, unless forced. */
        aofBeforeSleep();
        int pending = sdslen(aof.buf) > 0;
        int synced = aof.fd == -1 || fsync(aof.fd) == 0;
        if (!synced) serverLog(LL_WARNING, "AOF: fsync at shutdown failed: %s", strerror(errno));
        else serverLog(LL_NOTICE, "Calling fsync() on the AOF file.");
        if ((pending || !synced) && !force) {
            serverLog(LL_WARNING, "AOF: %s: refusing to exit, which would lose acknowledged writes (SHUTDOWN "
                                  "FORCE exits anyway)",
                      pending ? "the log cannot take the writes acknowledged since its last good write"
                              : "the log's last writes may not be on disk (fsync failed)");
            return C_ERR;
        }
    }
    if (aof.child != -1) {
        kill(aof.child, SIGKILL);
        int status;
        waitpid(aof.child, &status, 0);
        unlinkat(aof.dirfd, aof.child_tmp, 0);
        aof.child = -1;
    }
    return C_OK;
}

/* ---- INFO ---------------------------------------------------------------------- */

size_t aofBufferLength(void) { return aof.buf ? sdslen(aof.buf) : 0; }

sds aofInfo(sds s) {
    s = sdscatprintf(s,
                     "aof_enabled:%d\r\n"
                     "aof_rewrite_in_progress:%d\r\n"
                     "aof_rewrite_scheduled:%d\r\n"
                     "aof_last_rewrite_time_sec:%lld\r\n"
                     "aof_current_rewrite_time_sec:%lld\r\n"
                     "aof_last_bgrewrite_status:%s\r\n"
                     "aof_rewrites:%d\r\n"
                     "aof_last_write_status:%s\r\n"
                     "aof_last_cow_size:0\r\n",
                     aofOn, aof.child != -1, aof.rewrite_scheduled,
                     aof.rewrites || !aof.last_rewrite_ok ? aof.last_rewrite_ms / 1000 : -1LL,
                     aof.child != -1 ? (monoMs() - aof.rewrite_start_ms) / 1000 : -1LL,
                     aof.last_rewrite_ok ? "ok" : "err", aof.rewrites, aof.last_write_ok && !aof.fsync_failed && !aof.files_lost ? "ok" : "err");
    if (aofOn) {
        s = sdscatprintf(s,
                         "aof_current_size:%lld\r\n"
                         "aof_base_size:%lld\r\n"
                         "aof_pending_rewrite:0\r\n"
                         "aof_buffer_length:%zu\r\n"
                         "aof_pending_bio_fsync:%d\r\n"
                         "aof_delayed_fsync:%lld\r\n"
                         "aof_records_written:%llu\r\n"
                         "aof_segment_objects_not_logged:%llu\r\n",
                         aof.base_size + aof.incr_size, aof.base_size, sdslen(aof.buf), aof.fsync_running,
                         aof.delayed_fsync, aof.records_written, aof.segment_objects_not_logged);
    }
    return detachedInfo(s);
}
