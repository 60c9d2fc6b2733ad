/* test_mooncake_mapping.c -- one mapping of a shared-memory segment per
 * process, whatever the number of handles (src/libmooncake/mc_shm.c).
 *
 * Each group starts a mooncake-server of its own (testserver.h, 64 MiB pool)
 * and reads what the process holds from /proc/self/maps and
 * /proc/self/smaps: the pool arrives as a memfd (SHM.ATTACH), so its
 * mappings are the lines named "/memfd:..."; this program makes no memfd of
 * its own. What is covered, and why each check can fail:
 *
 *  1. handles: a handle's first shm transfer maps the pool once; a second
 *     mc_connect to the unix socket, a third to the TCP port (shm chosen by
 *     itself) and an mc_async clone (a non-blocking batch) all read through
 *     that one mapping; closing some keeps it for the others, closing the
 *     last unmaps it. A library that maps per handle holds four.
 *  2. lazy: after a handle's first transfer of 4 KiB the pool's mapping has
 *     at most the two 2 MiB chunks around it resident (Rss), not the whole
 *     64 MiB (the old MAP_POPULATE); a second handle's first transfer adds
 *     no mapping and no resident page. After a 16 MiB put both handles read
 *     it back byte for byte.
 *  3. threads: eight threads connect and read at once (released together
 *     by a barrier); the process holds one mapping while all eight handles
 *     are open and none after they are closed.
 *  4. fork: a child inherits the handle and the mapping; a handle it opens
 *     reads through the inherited mapping (still one), and closing it
 *     leaves the inherited one; the parent's handle still reads after.
 *  5. distinct: two servers at once, each pool segment id 1 under its own
 *     socket, the same key holding different bytes: two mappings, each
 *     handle reads its own server's bytes, and closing one handle unmaps
 *     only its server's pool. A table keyed by segment id would read the
 *     first server's pool for the second.
 *  7. cold: copies of chunks the process seldom copied go through the
 *     segment's file (pread/pwrite), the others through the mapping
 *     (mc_shm.c). On a memfd of the test's own, mapped by mcShmAcquire as
 *     a slice at 2 MiB: bytes land at the slice's file offsets whichever
 *     way they go, across chunk boundaries and in ranges half populated;
 *     the library's counters say which way each copy went (warm-after fixed
 *     at 1, 2 or 3; a write goes through the file at a chunk's first visit
 *     only, and not at all with warm-after 1; a file that refuses a copy,
 *     sealed against write(2), leaves the mapping to do it); measured, it is set at the first populate after fd
 *     copies, within its bounds. Against a
 *     server: with warm-after 3, a fresh process's 16 MiB put and a second
 *     handle's read of it map no page of the pool (Rss 0), the fourth
 *     copy populates it. A library that copies every chunk through the
 *     mapping fails the Rss checks; one that loses the slice offset reads
 *     the wrong bytes.
 *  6. short-file: a segment host (a fake one here, MOUNTed with a unix://@
 *     endpoint) that answers SHM.ATTACH with a 1 MiB slice of an empty
 *     memfd is refused: a shm put into it fails, maps nothing, and the
 *     process lives (mapped as it was, the first copy was a SIGBUS).
 * Nothing is timed.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"
#include "testserver.h"
#include "testgroup.h"

#include "mooncake.h"
#include "mc_shm.h"

#define MiB (1024 * 1024)

/* ---- what the process maps ------------------------------------------------ */

/* The memfd mappings of this process (segments attached over shm), and the
 * kB of them resident (Rss) when rss_kb is not NULL. -1 if smaps cannot be
 * read. */
static int memfdMappings(long *rss_kb) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL) return -1;
    char line[512];
    int n = 0, in = 0;
    long rss = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
            in = strstr(line, " /memfd:") != NULL;
            n += in;
            continue;
        }
        long kb;
        if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) rss += kb;
    }
    fclose(f);
    if (rss_kb) *rss_kb = rss;
    return n;
}

static int mappings(void) { return memfdMappings(NULL); }

static long residentKb(void) {
    long kb = -1;
    memfdMappings(&kb);
    return kb;
}

/* ---- helpers ------------------------------------------------------------------ */

static void fillPattern(void *buf, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        p[i] = (unsigned char)((s * 0x2545F4914F6CDD1DULL) >> 56);
    }
}

static mc_client *mcOpen(const char *uri, int transport) {
    char err[256] = "";
    mc_client *c = mc_connect(uri, NULL, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "  mc_connect(%s): %s\n", uri, err);
        return NULL;
    }
    if (transport != MC_TRANSPORT_AUTO && mc_set_transport(c, transport) != MC_OK) {
        mc_close(c);
        return NULL;
    }
    return c;
}

static void mcClose(mc_client **c) {
    if (*c) mc_close(*c);
    *c = NULL;
}

static int put(mc_client *c, const char *key, const void *v, size_t n) {
    if (c == NULL) return MC_ERR_INVALID;
    int rc = mc_put(c, key, strlen(key), v, n, NULL);
    if (rc != MC_OK) fprintf(stderr, "  mc_put(%s): %s (%s)\n", key, mc_strerror(rc), mc_last_error(c));
    return rc;
}

/* 1 if key reads back as want[0..n) over shm. */
static int readsSame(mc_client *c, const char *key, const void *want, size_t n) {
    if (c == NULL) return 0;
    char *got = xmalloc(n);
    long long rc = mc_get(c, key, strlen(key), got, n);
    int ok = rc == (long long)n && memcmp(got, want, n) == 0 && mc_last_transport(c) == MC_TRANSPORT_SHM;
    if (!ok)
        fprintf(stderr, "  get(%s): %lld (%s), transport %d, %s\n", key, rc, rc < 0 ? mc_last_error(c) : "",
                mc_last_transport(c), rc == (long long)n && memcmp(got, want, n) ? "bytes differ" : "");
    free(got);
    return ok;
}

/* ==== 1. handles ============================================================== */

static void testHandles(void) {
    const char *group = "handles";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char *v = xmalloc(MiB), *got = xmalloc(MiB);
    fillPattern(v, MiB, 1);
    mc_client *a = mcOpen(s.unix_uri, MC_TRANSPORT_SHM), *b = NULL, *c = NULL;
    TEST("handles: a handle's first shm transfer maps the pool once") {
        CHECK_EQ(mappings(), 0);
        CHECK_EQ(put(a, "map:a", v, MiB), MC_OK);
        CHECK(a && mc_last_transport(a) == MC_TRANSPORT_SHM);
        CHECK_EQ(mappings(), 1);
    }
    TEST("handles: a second mc_connect reads through the same mapping") {
        b = mcOpen(s.unix_uri, MC_TRANSPORT_SHM);
        CHECK(readsSame(b, "map:a", v, MiB));
        CHECK_EQ(mappings(), 1);
    }
    TEST("handles: a handle connected over TCP that picks shm itself shares it too") {
        c = mcOpen(s.tcp_uri, MC_TRANSPORT_AUTO);
        CHECK(readsSame(c, "map:a", v, MiB));
        CHECK_EQ(mappings(), 1);
    }
    TEST("handles: mc_async's clone of a handle reads through the same mapping") {
        struct iovec iov = {got, MiB};
        mc_kvv item = {"map:a", 5, &iov, 1};
        memset(got, 0, MiB);
        mc_op *op = a ? mc_batch_get_async(a, 1, &item) : NULL;
        CHECK(op != NULL);
        if (op) {
            CHECK_EQ(mc_op_wait(op, -1), 1);
            CHECK_EQ(mc_op_results(op)[0], MiB);
            mc_op_free(op);
        }
        CHECK(memcmp(got, v, MiB) == 0);
        CHECK_EQ(mappings(), 1);
    }
    TEST("handles: closing some handles keeps the mapping for the others") {
        mcClose(&b);
        mcClose(&c);
        CHECK_EQ(mappings(), 1);
        CHECK(readsSame(a, "map:a", v, MiB));
    }
    TEST("handles: the mapping goes with the last handle (its clone closed with it)") {
        mcClose(&a);
        CHECK_EQ(mappings(), 0);
    }
    free(v);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 2. lazy ================================================================= */

static void testLazy(void) {
    const char *group = "lazy";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char small[4096], *big = xmalloc(16 * MiB);
    fillPattern(small, sizeof(small), 2);
    fillPattern(big, 16 * MiB, 3);
    mc_client *a = mcOpen(s.unix_uri, MC_TRANSPORT_SHM), *b = NULL;
    long rss = -1;
    mcShmSetWarmAfter(0); /* every copy through the mapping: the population itself is tested here */
    TEST("lazy: a handle's first transfer of 4 KiB maps at most 4 MiB of a 64 MiB pool") {
        CHECK_EQ(put(a, "lz:small", small, sizeof(small)), MC_OK);
        CHECK_EQ(mappings(), 1);
        rss = residentKb();
        if (rss > 4096) fprintf(stderr, "  %ld kB of the pool resident after one 4 KiB put\n", rss);
        CHECK(rss >= 0 && rss <= 4096);
    }
    TEST("lazy: a second handle's first transfer adds no mapping and no resident page") {
        b = mcOpen(s.unix_uri, MC_TRANSPORT_SHM);
        CHECK(readsSame(b, "lz:small", small, sizeof(small)));
        CHECK_EQ(mappings(), 1);
        CHECK_EQ(residentKb(), rss);
    }
    TEST("lazy: 16 MiB put into space no copy touched reads back through both handles") {
        CHECK_EQ(put(a, "lz:big", big, 16 * MiB), MC_OK);
        CHECK(readsSame(a, "lz:big", big, 16 * MiB));
        CHECK(readsSame(b, "lz:big", big, 16 * MiB));
        CHECK(readsSame(b, "lz:small", small, sizeof(small)));
        CHECK(residentKb() >= rss + 16 * 1024);
        CHECK_EQ(mappings(), 1);
    }
    mcClose(&a);
    mcClose(&b);
    TEST("lazy: no mapping left after both handles closed") CHECK_EQ(mappings(), 0);
    free(big);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 3. threads ============================================================== */

#define NTHREADS 8

typedef struct {
    const char *uri;
    const char *value;
    pthread_barrier_t *go;
    mc_client *h;
    int ok;
} threadArg;

static void *threadMain(void *p) {
    threadArg *t = p;
    pthread_barrier_wait(t->go);
    t->h = mcOpen(t->uri, MC_TRANSPORT_SHM);
    t->ok = 1;
    for (int i = 0; i < 4; i++) t->ok &= readsSame(t->h, "th:v", t->value, MiB);
    return NULL;
}

static void testThreads(void) {
    const char *group = "threads";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char *v = xmalloc(MiB);
    fillPattern(v, MiB, 4);
    mc_client *w = mcOpen(s.unix_uri, MC_TRANSPORT_TCP); /* writes without mapping anything */
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, NTHREADS);
    threadArg args[NTHREADS];
    pthread_t tids[NTHREADS];
    TEST("threads: eight handles opened and read at once hold one mapping") {
        CHECK_EQ(put(w, "th:v", v, MiB), MC_OK);
        CHECK_EQ(mappings(), 0);
        for (int i = 0; i < NTHREADS; i++) {
            args[i] = (threadArg){s.unix_uri, v, &go, NULL, 0};
            pthread_create(&tids[i], NULL, threadMain, &args[i]);
        }
        for (int i = 0; i < NTHREADS; i++) {
            pthread_join(tids[i], NULL);
            CHECK(args[i].ok);
        }
        CHECK_EQ(mappings(), 1);
    }
    TEST("threads: none left once all eight are closed") {
        for (int i = 0; i < NTHREADS; i++) mcClose(&args[i].h);
        CHECK_EQ(mappings(), 0);
    }
    pthread_barrier_destroy(&go);
    mcClose(&w);
    free(v);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 4. fork ================================================================= */

/* The child's checks, as bits of its exit status (0: all held). */
static int forkChild(const char *uri, const char *v) {
    int bad = 0;
    if (mappings() != 1) bad |= 1;
    mc_client *b = mcOpen(uri, MC_TRANSPORT_SHM);
    if (!readsSame(b, "fk:v", v, MiB)) bad |= 2;
    if (mappings() != 1) bad |= 4;
    mcClose(&b);
    if (mappings() != 1) bad |= 8;
    return bad;
}

static void testFork(void) {
    const char *group = "fork";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char *v = xmalloc(MiB);
    fillPattern(v, MiB, 5);
    mc_client *a = mcOpen(s.unix_uri, MC_TRANSPORT_SHM);
    TEST("fork: a child's new handle reads through the mapping it inherited, and keeps it after closing") {
        CHECK_EQ(put(a, "fk:v", v, MiB), MC_OK);
        CHECK_EQ(mappings(), 1);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) _exit(forkChild(s.unix_uri, v)); /* a's connections stay the parent's: not closed here */
        CHECK(pid > 0);
        int st = -1;
        if (pid > 0) {
            tsTrack(pid);
            waitpid(pid, &st, 0);
            tsUntrack(pid);
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            fprintf(stderr, "  child: status %d (bits: 1 inherited, 2 read, 4 one mapping, 8 kept)\n",
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    TEST("fork: the parent's handle and mapping are as they were") {
        CHECK(readsSame(a, "fk:v", v, MiB));
        CHECK_EQ(mappings(), 1);
        mcClose(&a);
        CHECK_EQ(mappings(), 0);
    }
    free(v);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 5. distinct ============================================================= */

static void testDistinct(void) {
    const char *group = "distinct";
    int failed0 = test_failed;
    tsServer x, y;
    watchdog();
    if (!tsGroupStarted(tsStart(&x, NULL), &x, group)) return;
    if (!tsGroupStarted(tsStart(&y, NULL), &y, group)) {
        tsStop(&x);
        tsCleanup(&x);
        return;
    }
    char *vx = xmalloc(MiB), *vy = xmalloc(MiB);
    fillPattern(vx, MiB, 6);
    fillPattern(vy, MiB, 7);
    mc_client *a = mcOpen(x.unix_uri, MC_TRANSPORT_SHM), *b = mcOpen(y.unix_uri, MC_TRANSPORT_SHM);
    TEST("distinct: two servers' pools (both segment 1) are two mappings, each read as its own") {
        CHECK_EQ(put(a, "ds:k", vx, MiB), MC_OK);
        CHECK_EQ(put(b, "ds:k", vy, MiB), MC_OK);
        CHECK(readsSame(a, "ds:k", vx, MiB));
        CHECK(readsSame(b, "ds:k", vy, MiB));
        CHECK_EQ(mappings(), 2);
    }
    TEST("distinct: closing one server's handle unmaps only that pool") {
        mcClose(&a);
        CHECK_EQ(mappings(), 1);
        CHECK(readsSame(b, "ds:k", vy, MiB));
        mcClose(&b);
        CHECK_EQ(mappings(), 0);
    }
    free(vx);
    free(vy);
    tsGroupFinish(&y, group, failed0);
    tsGroupFinish(&x, group, failed0);
}

/* ==== 6. short-file =========================================================== */

static int shortMemfd = -1;

/* One RESP command's arguments from f (at most 4 kept, each up to 255
 * bytes); the count, or -1 at EOF. */
static int readCommand(FILE *f, char args[4][256]) {
    char line[64];
    if (!fgets(line, sizeof(line), f) || line[0] != '*') return -1;
    int n = atoi(line + 1);
    for (int i = 0; i < n; i++) {
        if (!fgets(line, sizeof(line), f) || line[0] != '$') return -1;
        size_t len = (size_t)atol(line + 1);
        char tmp[256];
        for (size_t got = 0; got < len + 2;) {
            size_t want = len + 2 - got < sizeof(tmp) ? len + 2 - got : sizeof(tmp);
            size_t r = fread(tmp, 1, want, f);
            if (r == 0) return -1;
            if (i < 4 && got < 255) memcpy(args[i] + got, tmp, got + r < 255 ? r : 255 - got);
            got += r;
        }
        if (i < 4) args[i][len < 255 ? len : 255] = '\0';
    }
    return n;
}

/* A segment host that answers SHM.ATTACH id with [id, 1 MiB] and an empty
 * memfd, and +OK to anything else. */
static void *fakeHostConn(void *p) {
    int fd = (int)(intptr_t)p;
    FILE *f = fdopen(dup(fd), "r");
    char args[4][256];
    int n;
    while (f && (n = readCommand(f, args)) > 0) {
        if (!strcasecmp(args[0], "SHM.ATTACH") && n == 2) {
            char msg[96];
            int len = snprintf(msg, sizeof(msg), "*2\r\n:%s\r\n:%d\r\n", args[1], MiB);
            struct iovec iov = {msg, (size_t)len};
            char ctl[CMSG_SPACE(sizeof(int))];
            memset(ctl, 0, sizeof(ctl));
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &shortMemfd, sizeof(int));
            if (sendmsg(fd, &mh, MSG_NOSIGNAL) != len) break;
        } else if (write(fd, "+OK\r\n", 5) != 5) {
            break;
        }
    }
    if (f) fclose(f);
    close(fd);
    return NULL;
}

static void *fakeHostMain(void *p) {
    int lfd = (int)(intptr_t)p, fd;
    while ((fd = accept(lfd, NULL, NULL)) >= 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, fakeHostConn, (void *)(intptr_t)fd) == 0) pthread_detach(t);
        else close(fd);
    }
    return NULL;
}

/* One command over a raw connection; 1 if the reply is not an error. */
static int rawCommand(int fd, const char *const *argv, int argc) {
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (tsWriteAll(fd, buf, (size_t)n) != 0) return 0;
    ssize_t r = read(fd, buf, sizeof(buf) - 1);
    if (r <= 0) return 0;
    buf[r] = '\0';
    if (buf[0] == '-') fprintf(stderr, "  %s: %s", argv[0], buf);
    return buf[0] != '-';
}

static void testShortFile(void) {
    const char *group = "short-file";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char name[64], uri[80];
    snprintf(name, sizeof(name), "mcmap-fake-%d", (int)getpid());
    snprintf(uri, sizeof(uri), "unix://@%s", name);
    shortMemfd = memfd_create("short", MFD_CLOEXEC); /* empty: every byte past its end */
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    pthread_t host;
    int up = shortMemfd >= 0 && lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, salen) == 0 && listen(lfd, 8) == 0 &&
             pthread_create(&host, NULL, fakeHostMain, (void *)(intptr_t)lfd) == 0;
    int r = tsConnectTcp(s.port); /* the owner's connection: kept open while the segment is used */
    char small[4096];
    fillPattern(small, sizeof(small), 8);
    mc_client *c = mcOpen(s.unix_uri, MC_TRANSPORT_SHM);
    TEST("short-file: a host's SHM.ATTACH slice past its file's end is refused, nothing mapped, no SIGBUS") {
        CHECK(up);
        const char *mount[] = {"MOUNT", "fk", "1mb", "ENDPOINT", uri, "OWNER", "fkhost"};
        CHECK(r >= 0 && rawCommand(r, mount, 7));
        mc_put_opts o = {.prefer = "fk"};
        int rc = c ? mc_put(c, "sf:k", 4, small, sizeof(small), &o) : MC_OK;
        if (rc != MC_OK) fprintf(stderr, "  (refused as it should be: %s)\n", mc_last_error(c));
        CHECK(rc != MC_OK);
        CHECK_EQ(mappings(), 0);
    }
    mcClose(&c);
    if (r >= 0) close(r);
    if (up) {
        shutdown(lfd, SHUT_RDWR); /* accept() returns: the host thread ends */
        pthread_join(host, NULL);
    }
    if (lfd >= 0) close(lfd);
    if (shortMemfd >= 0) close(shortMemfd);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 7. cold ================================================================= */

static mcShmStats shmStats(void) {
    mcShmStats st;
    mcShmGetStats(&st);
    return st;
}

/* The test's own memfd: 12 MiB, of which the segment is the slice at 2 MiB
 * of 8 MiB (four 2 MiB chunks); the test checks the file through a mapping
 * of its own (which /proc/self/smaps counts, so the server half of this
 * group runs after it is unmapped). */
static void testColdSlice(void) {
    const size_t fsize = 12 * MiB, off = 2 * MiB, size = 8 * MiB;
    int fd = memfd_create("cold-test", MFD_CLOEXEC);
    char *file = MAP_FAILED, err[128] = "";
    mcShm *m = NULL;
    char *buf = xmalloc(size), *want = xmalloc(size);
    if (fd >= 0 && ftruncate(fd, (off_t)fsize) == 0)
        file = mmap(NULL, fsize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (file != MAP_FAILED) m = mcShmAcquire(fd, off, size, err, sizeof(err));
    if (m == NULL) fprintf(stderr, "  mcShmAcquire: %s\n", err);
    fillPattern(want, size, 71);
    TEST("cold: a first copy across three chunks goes through the file, at the slice's offsets") {
        CHECK(m != NULL);
        mcShmSetWarmAfter(2);
        mcShmStats a = shmStats();
        /* [1 MiB + 123, 4 MiB + 123): chunks 0, 1 and 2 of the slice */
        if (m) mcShmCopy(m, MiB + 123, want + MiB + 123, 3 * MiB, 1);
        mcShmStats b = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 3 * MiB);
        CHECK_EQ(b.map_bytes - a.map_bytes, 0);
        CHECK_EQ(b.chunks_populated - a.chunks_populated, 0);
        CHECK(file != MAP_FAILED && memcmp(file + off + MiB + 123, want + MiB + 123, 3 * MiB) == 0);
        CHECK(file != MAP_FAILED && file[off + MiB + 122] == 0 && file[off + 4 * MiB + 123] == 0);
    }
    TEST("cold: with warm-after 1, the second copy of those chunks populates them and reads through the mapping") {
        mcShmSetWarmAfter(1);
        mcShmStats a = shmStats();
        memset(buf, 0, size);
        if (m) mcShmCopy(m, MiB + 123, buf + MiB + 123, 3 * MiB, 0);
        mcShmStats b = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 0);
        CHECK_EQ(b.map_bytes - a.map_bytes, 3 * MiB);
        CHECK_EQ(b.chunks_populated - a.chunks_populated, 3);
        CHECK(memcmp(buf + MiB + 123, want + MiB + 123, 3 * MiB) == 0);
    }
    TEST("cold: a range half populated moves its warm part through the mapping, the rest through the file") {
        mcShmStats a = shmStats();
        /* [5 MiB, 7 MiB + 5): chunk 2 is populated, chunk 3 never copied
         * (a write's first visit goes through the file where warm-after >= 2) */
        mcShmSetWarmAfter(2);
        if (m) mcShmCopy(m, 5 * MiB, want + 5 * MiB, 2 * MiB + 5, 1);
        mcShmSetWarmAfter(1);
        memset(buf, 0, size);
        if (m) mcShmCopy(m, 4 * MiB, buf + 4 * MiB, 4 * MiB, 0); /* chunk 3's second visit: populated */
        mcShmStats b = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 2 * MiB + 5 - MiB);
        CHECK_EQ(b.map_bytes - a.map_bytes, MiB + 4 * MiB);
        CHECK_EQ(b.chunks_populated - a.chunks_populated, 1);
        CHECK(file != MAP_FAILED && memcmp(file + off + 5 * MiB, want + 5 * MiB, 2 * MiB + 5) == 0);
        CHECK(memcmp(buf + 5 * MiB, want + 5 * MiB, 2 * MiB + 5) == 0);
        CHECK(file != MAP_FAILED && memcmp(buf + 4 * MiB, file + off + 4 * MiB, 4 * MiB) == 0);
    }
    TEST("cold: with warm-after 3 a chunk takes three reads through the file before the mapping") {
        mcShmSetWarmAfter(3);
        /* the file's last 2 MiB: a segment of its own, never copied */
        mcShm *t = file != MAP_FAILED ? mcShmAcquire(fd, 10 * MiB, 2 * MiB, err, sizeof(err)) : NULL;
        CHECK(t != NULL);
        int ways[4] = {0};
        for (int i = 0; i < 4 && t; i++) {
            mcShmStats a = shmStats();
            mcShmCopy(t, 4096, buf, 64 * 1024, 0);
            mcShmStats b = shmStats();
            ways[i] = b.fd_bytes > a.fd_bytes ? 'f' : b.map_bytes > a.map_bytes ? 'm' : '?';
        }
        CHECK(ways[0] == 'f' && ways[1] == 'f' && ways[2] == 'f' && ways[3] == 'm');
        CHECK(file != MAP_FAILED && memcmp(file + 10 * MiB + 4096, buf, 64 * 1024) == 0);
        mcShmRelease(t);
    }
    TEST("cold: a write moves through the file only at its chunk's first visit, and never with warm-after 1") {
        /* the file's lock makes the pwrites of a host's writers go one at a
         * time; the file's first 2 MiB as a segment of its own, never copied */
        mcShm *t = file != MAP_FAILED ? mcShmAcquire(fd, 0, 2 * MiB, err, sizeof(err)) : NULL;
        CHECK(t != NULL);
        mcShmStats a = shmStats();
        if (t) mcShmCopy(t, 8192, want, 64 * 1024, 1);
        mcShmStats b = shmStats();
        if (t) mcShmCopy(t, MiB, want + MiB, 64 * 1024, 1);
        mcShmStats c = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 64 * 1024);
        CHECK_EQ(c.fd_bytes - b.fd_bytes, 0);
        CHECK_EQ(c.map_bytes - b.map_bytes, 64 * 1024);
        CHECK(file != MAP_FAILED && memcmp(file + 8192, want, 64 * 1024) == 0);
        CHECK(file != MAP_FAILED && memcmp(file + MiB, want + MiB, 64 * 1024) == 0);
        mcShmRelease(t);
        /* where populating costs no more than one fd copy (warm-after 1), a
         * write never takes the file's lock: the first visit maps */
        mcShmSetWarmAfter(1);
        t = file != MAP_FAILED ? mcShmAcquire(fd, 2 * MiB, 2 * MiB, err, sizeof(err)) : NULL;
        CHECK(t != NULL);
        a = shmStats();
        if (t) mcShmCopy(t, 0, want, 64 * 1024, 1);
        b = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 0);
        CHECK_EQ(b.map_bytes - a.map_bytes, 64 * 1024);
        CHECK(file != MAP_FAILED && memcmp(file + 2 * MiB, want, 64 * 1024) == 0);
        mcShmRelease(t);
    }
    TEST("cold: measured, warm-after is the populate's price over an fd copy's, within 1..8") {
        mcShmSetWarmAfter(-1); /* measure again, as a process without MC_SHM_WARM_AFTER does */
        mcShm *t = file != MAP_FAILED ? mcShmAcquire(fd, 0, 8 * MiB, err, sizeof(err)) : NULL;
        CHECK(t != NULL);
        CHECK_EQ(shmStats().warm_measured, 0);
        mcShmStats a = shmStats();
        /* one fd copy in each of the four chunks, a second in chunk 0 (five
         * timed), then chunk 0's third visit: populated, and measured */
        for (int i = 0; i < 4 && t; i++) mcShmCopy(t, (uint64_t)i * 2 * MiB, buf, MiB, 0);
        for (int i = 0; i < 2 && t; i++) mcShmCopy(t, 0, buf, MiB, 0);
        mcShmStats b = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 5 * MiB);
        CHECK_EQ(b.map_bytes - a.map_bytes, MiB);
        CHECK_EQ(b.warm_measured, 1);
        CHECK(b.warm_after >= 1 && b.warm_after <= 8);
        fprintf(stderr, "  (warm-after measured here: %d)\n", b.warm_after);
        mcShmRelease(t);
    }
    TEST("cold: a file that refuses a copy leaves the mapping to do it, from then on") {
        /* sealed against write(2) after the mapping exists, as a hugetlbfs
         * pool has no write: the pwrite fails, the bytes go through the
         * mapping, and the segment's later copies skip the file */
        mcShmSetWarmAfter(3);
        int sfd = memfd_create("cold-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        mcShm *t = sfd >= 0 && ftruncate(sfd, (off_t)(2 * MiB)) == 0 ? mcShmAcquire(sfd, 0, 2 * MiB, err, sizeof(err))
                                                                      : NULL;
        CHECK(t != NULL);
        CHECK(sfd >= 0 && fcntl(sfd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0);
        char probe = 1;
        CHECK(sfd >= 0 && pwrite(sfd, &probe, 1, 0) == -1); /* the seal holds */
        mcShmStats a = shmStats();
        if (t) mcShmCopy(t, 4096, want, 64 * 1024, 1);
        memset(buf, 0, 64 * 1024);
        if (t) mcShmCopy(t, 4096, buf, 64 * 1024, 0);
        mcShmStats b = shmStats();
        CHECK_EQ(b.fd_bytes - a.fd_bytes, 0);
        CHECK_EQ(b.map_bytes - a.map_bytes, 128 * 1024);
        CHECK(memcmp(buf, want, 64 * 1024) == 0);
        char back[16] = "";
        CHECK(sfd >= 0 && pread(sfd, back, sizeof(back), 4096) == (ssize_t)sizeof(back) &&
              memcmp(back, want, sizeof(back)) == 0);
        mcShmRelease(t);
        if (sfd >= 0) close(sfd);
    }
    mcShmRelease(m);
    if (file != MAP_FAILED) munmap(file, fsize);
    if (fd >= 0) close(fd);
    free(buf);
    free(want);
}

static void testCold(void) {
    const char *group = "cold";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    testColdSlice();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    char *v = xmalloc(16 * MiB);
    fillPattern(v, 16 * MiB, 72);
    mcShmSetWarmAfter(3);
    mc_client *a = mcOpen(s.unix_uri, MC_TRANSPORT_SHM), *b = NULL;
    TEST("cold: a fresh process's 16 MiB put and a new handle's read of it map no page of the pool") {
        CHECK_EQ(mappings(), 0);
        mcShmStats st0 = shmStats();
        CHECK_EQ(put(a, "cold:big", v, 16 * MiB), MC_OK);
        b = mcOpen(s.unix_uri, MC_TRANSPORT_SHM);
        CHECK(readsSame(b, "cold:big", v, 16 * MiB));
        mcShmStats st1 = shmStats();
        CHECK_EQ(mappings(), 1);
        CHECK_EQ(residentKb(), 0);
        CHECK_EQ(st1.fd_bytes - st0.fd_bytes, 32 * MiB);
        CHECK_EQ(st1.map_bytes - st0.map_bytes, 0);
    }
    TEST("cold: the fourth copy of its chunks populates them; every read is byte-exact") {
        CHECK(readsSame(a, "cold:big", v, 16 * MiB));
        CHECK_EQ(residentKb(), 0);
        mcShmStats st0 = shmStats();
        CHECK(readsSame(b, "cold:big", v, 16 * MiB));
        mcShmStats st1 = shmStats();
        CHECK_EQ(st1.map_bytes - st0.map_bytes, 16 * MiB);
        CHECK(st1.chunks_populated - st0.chunks_populated >= 8);
        CHECK(residentKb() >= 16 * 1024);
    }
    mcClose(&a);
    mcClose(&b);
    free(v);
    tsGroupFinish(&s, group, failed0);
}

static const struct {
    const char *name;
    void (*fn)(void);
} groups[] = {
    {"handles", testHandles}, {"lazy", testLazy}, {"threads", testThreads},
    {"fork", testFork},       {"distinct", testDistinct}, {"short-file", testShortFile},
    {"cold", testCold},
};

int main(int argc, char **argv) {
    const char *only = groupMainStart("test_mooncake_mapping", MC_VERSION, SIG_IGN, argc, argv);
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        if (!only || strstr(groups[i].name, only)) groups[i].fn();
    alarm(0);
    return testReport();
}
