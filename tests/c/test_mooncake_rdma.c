/* test_mooncake_rdma.c -- libmooncake's RDMA transport end to end, through
 * the fake verbs library (build/tests/libfakeverbs.so, tests/c/fakeverbs.c).
 *
 * No machine here has an RDMA NIC, so the transport runs against the fake:
 * MC_VERBS_LIBRARY points libmooncake at it, three fake NICs (fv0 on NUMA
 * node 1, fv1 and fv2 on node 0) share one registry in a directory of the
 * test's own, and the bytes of every RDMA READ and WRITE really move
 * between two processes (process_vm_readv/writev), checked against the
 * rkeys and bounds as a NIC checks them. A real mooncake-server holds the
 * metadata; a forked child hosts a segment (mc_mount_buffer: reachable by
 * tcp and rdma only, not shm); this process reads and writes it.
 *
 * What is covered, and why each check can fail:
 *  1. mount: the segment lists an rdma:// endpoint and one rkey per NIC.
 *  2. single: put_from/get_into of 1 B .. 16 MiB over forced rdma are
 *     byte-exact, stay inside their buffer, say rdma, and the fake counts
 *     at least their bytes (a transfer that went another way counts none).
 *  3. striping: a 16 MiB get runs operations on all three NICs.
 *  4. numa: a 4 KiB get (one slice) runs on the NIC of the buffer's node.
 *  5. batch: batch_put/batch_get of 8 items over rdma, byte-exact.
 *  6. qp error: a QP that goes to the error state mid-transfer: its slice
 *     moves to another NIC, the bytes arrive whole, for a get and a put.
 *  7. all NICs failing: forced rdma fails and revokes the put (nothing
 *     stored, nothing overwritten); auto falls back to tcp, byte-exact;
 *     once they work again auto takes rdma, for a batch too (a batch took
 *     tcp before), and mc_region_rdma says how a region travels.
 *  8. keys: through the engine itself, a wrong rkey and a range past the
 *     segment complete with the remote access error, move nothing, and a
 *     rejected WRITE leaves every stored value intact.
 *  9. gpudirect: device memory (a memfd standing in for a GPU's dmabuf)
 *     is registered with the NICs when the fake claims dmabuf support and
 *     the bytes of a READ land in it; without support the decision is
 *     "staged" with a reason; MC_GPUDIRECT=peermem registers the pointer.
 * 10. a reader that exits without closing: the host drops its QPs (the
 *     fake's live QPs return to what they were).
 * 7b. one NIC failing while the others work: it is left out for a while
 *     after failing twice in a row, not tried (at a transport timeout's
 *     cost on hardware) by every transfer; and still used when it is the
 *     one that works.
 * 10b. a registered buffer mounted as a segment (and the other way
 *     round): the registration is shared, the mount has its rdma://
 *     endpoint, and letting go of one leaves the other registered.
 * 10c. four threads sharing one handle over forced rdma, byte-exact.
 * 11. a peer stalled in the QP exchange (its record trickling in a byte
 *     at a time): a new reader still gets its QPs and reads over rdma
 *     (a listener that waited on the stalled one timed it out).
 * 12. a host that dies: its keys fail to read (the watchdog catches a
 *     read that hangs instead), and the reader carries on with the server.
 * 14. gpudirect-fallback: device memory registered with the NICs (peer
 *     memory, through the fake CUDA runtime) still goes over shm to the
 *     server's pool, and staged over tcp when every RDMA path fails.
 * 13. the fake itself refuses what verbs refuses: QP transitions out of
 *     order or without their attributes (a RoCE RTR without a GRH), posts
 *     before RTS, a PD or CQ freed under a QP, remote write without local.
 * Bytes per second through the fake are printed for information only.
 * Built without MC_HAVE_RDMA the program says SKIP and passes nothing. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <numaif.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testhelp.h"
#include "testserver.h"
#include "testgroup.h"
#include "mctest.h"

#include "mc_rdma.h"
#include "mooncake.h"
#ifdef MC_HAVE_RDMA
#include <infiniband/verbs.h>
#endif

#define SEGSIZE (96 * MiB)
#define BUFSIZE (64 * MiB)
#define HOSTNAME_SEG "rdma-host"

static void onPipe(int sig) { (void)sig; }

#ifdef MC_HAVE_RDMA
static long long (*fvGet)(const char *);
static int (*fvSet)(const char *, long long);
static char regdir[128];

/* ---- the fake ------------------------------------------------------------- */

/* Points libmooncake at the fake beside this program, with a registry of
 * our own, before anything loads it. 0 or -1. */
static int fakeSetup(void) {
    char exe[512], lib[600], regfile[200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(lib, sizeof(lib), "%s/libfakeverbs.so", exe);
    if (testMkdtemp(regdir, sizeof(regdir), "fakeverbs") != 0) return -1;
    snprintf(regfile, sizeof(regfile), "%s/registry", regdir);
    setenv("FAKEVERBS_REGISTRY", regfile, 1);
    setenv("FAKEVERBS_DEVICES", "fv0:1,fv1:0,fv2:0", 1);
    setenv("MC_VERBS_LIBRARY", lib, 1);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "  %s\n", dlerror());
        return -1;
    }
    *(void **)&fvGet = dlsym(h, "fakeverbs_get");
    *(void **)&fvSet = dlsym(h, "fakeverbs_set");
    return fvGet && fvSet ? 0 : -1;
}

static void fakeCleanup(void) {
    char p[300];
    const char *devs[] = {"fv0", "fv1", "fv2"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/registry.sys/%s/device/numa_node", regdir, devs[i]);
        unlink(p);
        snprintf(p, sizeof(p), "%s/registry.sys/%s/device", regdir, devs[i]);
        rmdir(p);
        snprintf(p, sizeof(p), "%s/registry.sys/%s", regdir, devs[i]);
        rmdir(p);
    }
    snprintf(p, sizeof(p), "%s/registry.sys", regdir);
    rmdir(p);
    snprintf(p, sizeof(p), "%s/registry", regdir);
    unlink(p);
    rmdir(regdir);
}

/* ---- the hosting process --------------------------------------------------- */

typedef struct hostProc {
    pid_t pid;
    int ctl; /* closing it ends the host */
} hostProc;

/* Forks a process that mounts size bytes of its own memory as `name` and
 * holds them until ctl closes. 0 once mounted, -1 otherwise. */
static int hostStart(hostProc *h, const tsServer *s, const char *name, size_t size) {
    int ready[2], ctl[2];
    pid_t parent = getpid();
    h->pid = -1;
    h->ctl = -1;
    if (pipe(ready) != 0) return -1;
    if (pipe(ctl) != 0) {
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        char err[256] = "", ok = 1;
        tsDieWithParent(parent);
        close(ready[0]);
        close(ctl[1]);
        mc_client *c = mc_connect(s->tcp_uri, NULL, err, sizeof(err));
        void *buf = NULL;
        int rc = c ? posix_memalign(&buf, 2 * MiB, size) : -1;
        if (rc == 0) memset(buf, 0, size);
        if (rc != 0 || (rc = mc_mount_buffer(c, buf, size, name)) != MC_OK) {
            fprintf(stderr, "  host: mount: %d %s\n", rc, c ? mc_last_error(c) : err);
            ok = 0;
        }
        if (write(ready[1], &ok, 1) != 1) _exit(2);
        char b;
        while (read(ctl[0], &b, 1) < 0 && errno == EINTR) {}
        if (c) mc_close(c);
        _exit(0);
    }
    close(ready[1]);
    close(ctl[0]);
    char ok = 0;
    if (pid < 0 || read(ready[0], &ok, 1) != 1 || !ok) {
        close(ready[0]);
        close(ctl[1]);
        if (pid > 0) waitpid(pid, NULL, 0);
        return -1;
    }
    close(ready[0]);
    tsTrack(pid);
    h->pid = pid;
    h->ctl = ctl[1];
    return 0;
}

static void hostStop(hostProc *h) {
    if (h->pid <= 0) return;
    close(h->ctl);
    waitpid(h->pid, NULL, 0);
    tsUntrack(h->pid);
    h->pid = -1;
}

static void hostKill(hostProc *h) {
    if (h->pid <= 0) return;
    kill(h->pid, SIGKILL);
    close(h->ctl);
    waitpid(h->pid, NULL, 0);
    tsUntrack(h->pid);
    h->pid = -1;
}

/* ---- helpers ----------------------------------------------------------------- */

/* A string field of SEGMENT.INFO seg (an endpoint starting with prefix for
 * "endpoints") into out; "" if none. */
static void segField(redisContext *r, const char *seg, const char *field, const char *prefix, char *out, size_t len) {
    redisReply *rep = r ? redisCommand(r, "SEGMENT.INFO %s", seg) : NULL;
    out[0] = '\0';
    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const redisReply *k = rep->element[i], *v = rep->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || strcmp(k->str, field)) continue;
        if (v->type == REDIS_REPLY_ARRAY) {
            for (size_t j = 0; j < v->elements; j++)
                if (v->element[j]->type == REDIS_REPLY_STRING && !strncmp(v->element[j]->str, prefix, strlen(prefix))) {
                    snprintf(out, len, "%s", v->element[j]->str);
                    break;
                }
        } else if (v->type == REDIS_REPLY_STRING) {
            snprintf(out, len, "%s", v->str);
        } else if (v->type == REDIS_REPLY_INTEGER) {
            snprintf(out, len, "%lld", v->integer);
        }
    }
    if (rep) freeReplyObject(rep);
}

static mc_client *reader(const tsServer *s, int transport, char **buf) {
    char err[256] = "";
    mc_client *c = mc_connect(s->tcp_uri, NULL, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "  mc_connect: %s\n", err);
        return NULL;
    }
    mc_set_transport(c, transport);
    if (*buf == NULL && posix_memalign((void **)buf, 2 * MiB, BUFSIZE) != 0) *buf = NULL;
    if (*buf) memset(*buf, 0, BUFSIZE); /* pages in before their NUMA node is asked */
    int rc = *buf ? mc_register(c, *buf, BUFSIZE, MC_MEM_HOST) : MC_ERR_NOMEM;
    if (rc != MC_OK) fprintf(stderr, "  mc_register: %d %s\n", rc, mc_last_error(c));
    return c;
}

static const mc_put_opts to_host = {.prefer = HOSTNAME_SEG};

/* put_from src of n bytes under key, get_into dst, compare; 1 if exact and
 * both went over `want`. */
static int roundTrip(mc_client *c, const char *key, char *src, char *dst, size_t n, int want) {
    fillPattern(src, n, seedOf(key, n));
    int rc = mc_put_from(c, key, strlen(key), src, n, &to_host);
    if (rc != MC_OK) {
        fprintf(stderr, "  put_from %s (%zu): %d %s\n", key, n, rc, lastErr(c));
        return 0;
    }
    if (mc_last_transport(c) != want) {
        fprintf(stderr, "  put %s went over %s\n", key, transportName(mc_last_transport(c)));
        return 0;
    }
    memset(dst, 0, n);
    setGuard(dst, n);
    long long got = mc_get_into(c, key, strlen(key), dst, n);
    if (got < 0) fprintf(stderr, "  get_into %s: %s\n", key, lastErr(c));
    if (!sameBytes(key, dst, got, src, n) || !guardIntact(dst, n)) return 0;
    if (mc_last_transport(c) != want) {
        fprintf(stderr, "  get %s went over %s\n", key, transportName(mc_last_transport(c)));
        return 0;
    }
    return 1;
}

/* Reads key back into dst and compares with its pattern. */
static int readsBack(mc_client *c, const char *key, char *dst, size_t n) {
    char *want = xmalloc(n);
    fillPattern(want, n, seedOf(key, n));
    memset(dst, 0, n);
    long long got = mc_get_into(c, key, strlen(key), dst, n);
    if (got < 0) fprintf(stderr, "  get_into %s: %s\n", key, lastErr(c));
    int ok = sameBytes(key, dst, got, want, n);
    free(want);
    return ok;
}

static void devOps(long long ops[3]) {
    ops[0] = fvGet("dev0_ops");
    ops[1] = fvGet("dev1_ops");
    ops[2] = fvGet("dev2_ops");
}

static double nowSec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A peer that opens a QP exchange and never finishes it: a byte of its
 * record every 300 ms until told to stop. */
static struct {
    int fd, stop;
} stall = {-1, 0};

static void *trickle(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&stall.stop, __ATOMIC_RELAXED)) {
        if (send(stall.fd, "M", 1, MSG_NOSIGNAL) != 1) break;
        for (int i = 0; i < 30 && !__atomic_load_n(&stall.stop, __ATOMIC_RELAXED); i++) tsSleepMs(10);
    }
    return NULL;
}

static int tcpTo(int port) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Threads sharing one handle over forced rdma: each its own keys and its
 * own quarter of the registered buffer. */
typedef struct {
    mc_client *c;
    char *mem;
    int id, ok;
} shareArg;

static void *shareRun(void *arg) {
    shareArg *a = arg;
    const mc_put_opts opts = {.prefer = HOSTNAME_SEG};
    a->ok = 1;
    for (int i = 0; i < 6 && a->ok; i++) {
        char key[48];
        size_t n = (size_t)(i + 1) * 300 * 1024 + (size_t)a->id;
        snprintf(key, sizeof(key), "share:%d:%d", a->id, i);
        char *src = a->mem, *dst = a->mem + 4 * MiB;
        fillPattern(src, n, seedOf(key, n));
        a->ok &= mc_put_from(a->c, key, strlen(key), src, n, &opts) == MC_OK;
        memset(dst, 0, n);
        a->ok &= mc_get_into(a->c, key, strlen(key), dst, n) == (long long)n && !memcmp(src, dst, n);
    }
    return NULL;
}

/* ---- the group ------------------------------------------------------------------ */

static void testRdma(void) {
    const char *group = "rdma";
    int failed0 = test_failed;
    tsServer s;
    hostProc host = {-1, -1};
    char *buf = NULL, *buf2 = NULL;
    mc_client *c = NULL, *cauto = NULL;
    static const size_t sizes[] = {1, 4096, 1 * MiB + 7, 16 * MiB};
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rConfigure(redisConnect("127.0.0.1", s.port), s.tcp_uri);

    TEST("rdma: a hosting process mounts with an rdma:// endpoint and one rkey per fake NIC") {
        CHECK_EQ(hostStart(&host, &s, HOSTNAME_SEG, SEGSIZE), 0);
        char ep[300], rkey[300];
        segField(r, HOSTNAME_SEG, "endpoints", "rdma://", ep, sizeof(ep));
        segField(r, HOSTNAME_SEG, "rkey", "", rkey, sizeof(rkey));
        CHECK(!strncmp(ep, "rdma://127.0.0.1:", 17));
        CHECK(strstr(rkey, "fv0:") && strstr(rkey, "fv1:") && strstr(rkey, "fv2:"));
        if (!strstr(rkey, "fv2:")) fprintf(stderr, "  endpoint '%s' rkey '%s'\n", ep, rkey);
    }
    TEST("rdma: put_from/get_into of 1 B, 4 KiB, 1 MiB+7, 16 MiB over rdma between two processes, byte-exact") {
        c = reader(&s, MC_TRANSPORT_RDMA, &buf);
        CHECK(c != NULL);
        long long wb = fvGet("write_bytes"), rb = fvGet("read_bytes");
        size_t total = 0;
        for (size_t i = 0; c && i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            char key[32];
            snprintf(key, sizeof(key), "single:%zu", sizes[i]);
            CHECK(roundTrip(c, key, buf, buf + 32 * MiB, sizes[i], MC_TRANSPORT_RDMA));
            total += sizes[i];
        }
        CHECK(fvGet("write_bytes") - wb >= (long long)total);
        CHECK(fvGet("read_bytes") - rb >= (long long)total);
    }
    TEST("rdma: a 16 MiB get is striped over all three NICs") {
        long long before[3], after[3];
        devOps(before);
        CHECK(c && readsBack(c, "single:16777216", buf + 32 * MiB, 16 * MiB));
        devOps(after);
        for (int i = 0; i < 3; i++) CHECK(after[i] > before[i]);
    }
    TEST("rdma: a 4 KiB get goes through the NIC on the buffer's NUMA node") {
        int node = -1;
        if (get_mempolicy(&node, NULL, 0, buf, MPOL_F_NODE | MPOL_F_ADDR) != 0) node = -1;
        /* fv0 is on node 1, fv1 and fv2 on node 0; otherwise by name. */
        int want = node == 0 ? 1 : 0;
        long long before[3], after[3];
        devOps(before);
        CHECK(c && readsBack(c, "single:4096", buf + 32 * MiB, 4096));
        devOps(after);
        for (int i = 0; i < 3; i++) CHECK_EQ(after[i] - before[i], i == want);
    }
    TEST("rdma: batch_put and batch_get of 8 items (1 B .. 2 MiB) over rdma, byte-exact") {
        mc_kv items[8];
        char keys[8][32];
        int pres[8];
        long long gres[8];
        size_t off = 0;
        for (int i = 0; i < 8; i++) {
            size_t n = i == 0 ? 1 : (size_t)1 << (14 + i); /* 1, 32 KiB .. 2 MiB */
            snprintf(keys[i], sizeof(keys[i]), "batch:%d", i);
            fillPattern(buf + off, n, seedOf(keys[i], n));
            items[i] = (mc_kv){keys[i], strlen(keys[i]), buf + off, n};
            off += (n + 4095) & ~(size_t)4095;
        }
        CHECK_EQ(c ? mc_batch_put(c, 8, items, &to_host, pres) : -1, 8);
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_RDMA);
        for (int i = 0; i < 8; i++) items[i].buf = (char *)items[i].buf + 32 * MiB;
        memset(buf + 32 * MiB, 0, off);
        CHECK_EQ(c ? mc_batch_get(c, 8, items, gres) : -1, 8);
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_RDMA);
        for (int i = 0; i < 8; i++)
            CHECK(sameBytes(keys[i], items[i].buf, gres[i], (char *)items[i].buf - 32 * MiB, items[i].len));
    }
    TEST("rdma: a QP that goes to the error state mid-transfer: the slice moves to another NIC, get and put whole") {
        long long err0 = fvGet("retry_exc_err");
        CHECK_EQ(fvSet("qp_err_after", 1), 0); /* the second operation fails */
        CHECK(c && readsBack(c, "single:16777216", buf + 32 * MiB, 16 * MiB));
        CHECK_EQ(fvGet("retry_exc_err") - err0, 1);
        CHECK_EQ(fvGet("qp_err_after"), -1);
        CHECK_EQ(fvSet("qp_err_after", 2), 0);
        CHECK(c && roundTrip(c, "qperr:put", buf, buf + 32 * MiB, 16 * MiB, MC_TRANSPORT_RDMA));
        CHECK_EQ(fvGet("retry_exc_err") - err0, 2);
        /* The broken QP is replaced on the next transfer. */
        CHECK(c && readsBack(c, "single:1048583", buf + 32 * MiB, 1 * MiB + 7));
    }
    TEST("rdma: one NIC failing while the others work: it rests, not one failure per transfer") {
        /* A NIC whose link went away still connects its QP (the exchange
         * is over IP) and fails each request only after the transport's
         * retries: on hardware about half a second per transfer that
         * tried it again. fv0 is device 0 of this process. */
        CHECK_EQ(fvSet("dev_fail", 1), 0);
        long long err0 = fvGet("retry_exc_err");
        long long t0 = tsNowMs();
        int ok = 1;
        for (int i = 0; c && i < 8; i++) ok &= readsBack(c, "single:16777216", buf + 32 * MiB, 16 * MiB);
        long long took = tsNowMs() - t0, failures = fvGet("retry_exc_err") - err0;
        CHECK(ok);
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_RDMA);
        /* Failing twice in a row it rests 5 s: tried twice at most. */
        if (took < 4000) CHECK(failures <= 2);
        if (took < 4000 && failures > 2) fprintf(stderr, "  %lld failures in 8 transfers\n", failures);
        if (took >= 4000) printf("INFO: 8 gets took %lld ms, past the rest of a failed path: not counted\n", took);
        /* Resting is not banned: the others failing, fv0 working again
         * carries the transfer. */
        CHECK_EQ(fvSet("dev_fail", 6), 0);
        CHECK(c && readsBack(c, "single:16777216", buf + 32 * MiB, 16 * MiB));
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_RDMA);
        CHECK_EQ(fvSet("dev_fail", 0), 0);
    }
    TEST("rdma: every NIC failing: forced rdma fails and stores nothing, auto falls back to tcp byte-exact") {
        CHECK_EQ(fvSet("dev_fail", 7), 0);
        fillPattern(buf, 1 * MiB, 42);
        CHECK(c && mc_put_from(c, "allfail", 7, buf, 1 * MiB, &to_host) < 0);
        CHECK_EQ(c ? mc_exists(c, "allfail", 7) : -1, 0);
        CHECK(c && mc_get_into(c, "single:1048583", 14, buf + 32 * MiB, 1 * MiB + 7) < 0);
        cauto = reader(&s, MC_TRANSPORT_AUTO, &buf2);
        CHECK(cauto && readsBack(cauto, "single:16777216", buf2, 16 * MiB));
        CHECK_EQ(cauto ? mc_last_transport(cauto) : -1, MC_TRANSPORT_TCP);
        CHECK(cauto && roundTrip(cauto, "fallback:put", buf2, buf2 + 32 * MiB, 3 * MiB + 1, MC_TRANSPORT_TCP));
        CHECK_EQ(fvSet("dev_fail", 0), 0);
        CHECK(c && readsBack(c, "fallback:put", buf + 32 * MiB, 3 * MiB + 1));
        CHECK(c && readsBack(c, "single:1048583", buf + 32 * MiB, 1 * MiB + 7));
        CHECK(cauto && readsBack(cauto, "single:4096", buf2, 4096));
        CHECK_EQ(cauto ? mc_last_transport(cauto) : -1, MC_TRANSPORT_RDMA); /* auto prefers rdma when it works */
    }
    TEST("rdma: with auto, a batch of registered buffers goes over rdma too, not tcp") {
        mc_kv items[2];
        long long res[2];
        const char *keys[2] = {"batch:1", "batch:2"};
        size_t off = 0;
        for (int i = 0; i < 2; i++) {
            size_t n = (size_t)1 << (15 + i);
            items[i] = (mc_kv){keys[i], strlen(keys[i]), buf2 + off, n};
            off += n;
        }
        memset(buf2, 0, off);
        long long ops = fvGet("read_ops");
        CHECK_EQ(cauto ? mc_batch_get(cauto, 2, items, res) : -1, 2);
        CHECK(fvGet("read_ops") - ops >= 2); /* the fake moved them */
        char *want = xmalloc(off);
        for (int i = 0; i < 2; i++) {
            fillPattern(want, items[i].len, seedOf(keys[i], items[i].len));
            CHECK(sameBytes(keys[i], items[i].buf, res[i], want, items[i].len));
        }
        free(want);
    }
    TEST("rdma: mc_region_rdma says how a region travels") {
        char why[200] = "";
        CHECK_EQ(c ? mc_region_rdma(c, buf + 5, why, sizeof(why)) : -1, MC_REG_RDMA_HOST);
        CHECK(why[0] != '\0');
        char other;
        CHECK_EQ(c ? mc_region_rdma(c, &other, NULL, 0) : -1, MC_ERR_NOT_FOUND);
    }
    TEST("rdma: a wrong rkey and a range past the segment complete with the remote access error and move nothing") {
        char ep[300], rkeys[300], base[32], err[256] = "";
        segField(r, HOSTNAME_SEG, "endpoints", "rdma://", ep, sizeof(ep));
        segField(r, HOSTNAME_SEG, "rkey", "", rkeys, sizeof(rkeys));
        segField(r, HOSTNAME_SEG, "base", "", base, sizeof(base));
        mcRdmaDesc good, bad;
        CHECK_EQ(mcRdmaDescParse(&good, ep, strtoull(base, NULL, 10), rkeys, err, sizeof(err)), 0);
        bad = good;
        for (int i = 0; i < bad.nkeys; i++) bad.rkey[i] ^= 0x5a5a;
        mcRdma *e = mcRdmaOpen(err, sizeof(err));
        CHECK(e != NULL);
        char *local = buf + 48 * MiB;
        CHECK_EQ(e ? mcRdmaRegister(e, local, 1 * MiB, NULL, 0) : -1, MC_OK);
        long long rae = fvGet("rem_access_err");
        memset(local, 0x77, 4096);
        err[0] = '\0';
        CHECK(mcRdmaTransfer(e, &bad, 0, local, 4096, 0, err, sizeof(err)) != MC_OK);
        CHECK(strstr(err, "remote access error") != NULL);
        if (!strstr(err, "remote access error")) fprintf(stderr, "  wrong rkey: '%s'\n", err);
        CHECK(fvGet("rem_access_err") > rae);
        int untouched = 1;
        for (int i = 0; i < 4096; i++) untouched &= local[i] == 0x77;
        CHECK(untouched);
        rae = fvGet("rem_access_err");
        CHECK(mcRdmaTransfer(e, &good, SEGSIZE - 100, local, 4096, 0, err, sizeof(err)) != MC_OK);
        CHECK(fvGet("rem_access_err") > rae);
        /* A WRITE over the whole segment with the wrong key changes none of it. */
        memset(local, 0xee, 1 * MiB);
        for (uint64_t off = 0; off < SEGSIZE; off += 1 * MiB)
            CHECK(mcRdmaTransfer(e, &bad, off, local, 1 * MiB, 1, err, sizeof(err)) != MC_OK);
        CHECK(mcRdmaTransfer(e, &good, 0, local, 4096, 0, err, sizeof(err)) == MC_OK); /* the checks can pass */
        if (e) mcRdmaClose(e);
        CHECK(c && readsBack(c, "single:16777216", buf + 32 * MiB, 16 * MiB));
        CHECK(c && readsBack(c, "qperr:put", buf + 32 * MiB, 16 * MiB));
        CHECK(c && readsBack(c, "fallback:put", buf + 32 * MiB, 3 * MiB + 1));
    }
    TEST("rdma: bytes per second through the fake (information only)") {
        const int rounds = 8;
        double t0 = nowSec();
        int ok = 1;
        for (int i = 0; c && i < rounds; i++) ok &= mc_get_into(c, "single:16777216", 15, buf + 32 * MiB, 16 * MiB) == 16 * MiB;
        double dt = nowSec() - t0;
        CHECK(ok);
        printf("INFO: rdma get of 16 MiB through libfakeverbs: %.0f MB/s (%d rounds, 3 fake NICs)\n",
               dt > 0 ? rounds * 16.0 * MiB / dt / 1e6 : 0.0, rounds);
    }
    TEST("rdma: a reader that exits without closing: the host drops its QPs") {
        long long live0 = fvGet("live_qps");
        pid_t parent = getpid(), pid = fork();
        if (pid == 0) {
            tsDieWithParent(parent);
            char *b = NULL;
            mc_client *k = reader(&s, MC_TRANSPORT_RDMA, &b);
            _exit(k && readsBack(k, "single:4096", b, 4096) ? 0 : 1);
        }
        int status = -1;
        if (pid > 0) waitpid(pid, &status, 0);
        CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        long long deadline = tsNowMs() + 10000, live = -1;
        while ((live = fvGet("live_qps")) != live0 && tsNowMs() < deadline) tsSleepMs(10);
        CHECK_EQ(live, live0);
    }
    TEST("rdma: a peer stalled in the QP exchange holds up no other reader's QPs") {
        /* One connection that trickles its 100-byte record a byte at a
         * time: a listener that reads a record with blocking I/O waits on
         * it (each byte restarts the socket timeout), and a new reader's
         * exchange times out behind it. */
        char ep[300], *b = NULL;
        segField(r, HOSTNAME_SEG, "endpoints", "rdma://", ep, sizeof(ep));
        const char *colon = strrchr(ep, ':');
        int port = colon ? atoi(colon + 1) : 0;
        CHECK(port > 0);
        stall.fd = port > 0 ? tcpTo(port) : -1;
        CHECK(stall.fd >= 0);
        stall.stop = 0;
        pthread_t t;
        int started = stall.fd >= 0 && pthread_create(&t, NULL, trickle, NULL) == 0;
        CHECK(started);
        tsSleepMs(50); /* the listener has the stalled connection first */
        mc_client *k = started ? reader(&s, MC_TRANSPORT_RDMA, &b) : NULL;
        CHECK(k && readsBack(k, "single:1048583", b, 1 * MiB + 7));
        CHECK_EQ(k ? mc_last_transport(k) : -1, MC_TRANSPORT_RDMA);
        if (k && mc_last_transport(k) != MC_TRANSPORT_RDMA) fprintf(stderr, "  %s\n", mc_last_error(k));
        __atomic_store_n(&stall.stop, 1, __ATOMIC_RELAXED);
        if (started) pthread_join(t, NULL);
        if (stall.fd >= 0) close(stall.fd);
        mcClose(&k);
        free(b);
    }
    TEST("rdma: a registered buffer mounted as a segment: reachable over rdma, still registered after the unmount") {
        char err[256] = "", ep[300];
        mc_client *m = mc_connect(s.tcp_uri, NULL, err, sizeof(err));
        char *mem = NULL;
        CHECK(m != NULL && posix_memalign((void **)&mem, 2 * MiB, 8 * MiB) == 0);
        if (mem) memset(mem, 0, 8 * MiB);
        CHECK_EQ(m && mem ? mc_register(m, mem, 8 * MiB, MC_MEM_HOST) : -1, MC_OK);
        CHECK_EQ(m && mem ? mc_mount_buffer(m, mem, 8 * MiB, "rdma-regmount") : -1, MC_OK);
        segField(r, "rdma-regmount", "endpoints", "rdma://", ep, sizeof(ep));
        CHECK(!strncmp(ep, "rdma://", 7));
        if (strncmp(ep, "rdma://", 7)) fprintf(stderr, "  no rdma:// endpoint\n");
        const mc_put_opts to_m = {.prefer = "rdma-regmount"};
        fillPattern(buf, 1 * MiB, 77);
        CHECK_EQ(c ? mc_put_from(c, "regmount", 8, buf, 1 * MiB, &to_m) : -1, MC_OK);
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_RDMA);
        CHECK_EQ(m ? mc_unmount(m) : -1, MC_OK);
        char why[200] = "";
        CHECK_EQ(m && mem ? mc_region_rdma(m, mem, why, sizeof(why)) : -1, MC_REG_RDMA_HOST);
        /* Its own registration still moves bytes: a put from it over forced rdma. */
        mc_set_transport(m, MC_TRANSPORT_RDMA);
        fillPattern(mem, 1 * MiB, 78);
        int rc = m && mem ? mc_put_from(m, "regmount2", 9, mem, 1 * MiB, &to_host) : -1;
        if (rc != MC_OK && m) fprintf(stderr, "  put_from the registered buffer: %d %s\n", rc, mc_last_error(m));
        CHECK_EQ(rc, MC_OK);
        /* The other way round: mounted first, then registered. */
        CHECK_EQ(m && mem ? mc_unregister(m, mem) : -1, MC_OK);
        CHECK_EQ(m && mem ? mc_mount_buffer(m, mem, 8 * MiB, "rdma-regmount") : -1, MC_OK);
        CHECK_EQ(m && mem ? mc_register(m, mem, 8 * MiB, MC_MEM_HOST) : -1, MC_OK);
        CHECK_EQ(m && mem ? mc_region_rdma(m, mem, why, sizeof(why)) : -1, MC_REG_RDMA_HOST);
        CHECK_EQ(m && mem ? mc_unregister(m, mem) : -1, MC_OK);
        CHECK_EQ(c ? mc_put_from(c, "regmount3", 9, buf, 1 * MiB, &to_m) : -1, MC_OK); /* the mount's stays */
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_RDMA);
        mcClose(&m);
        free(mem);
    }
    TEST("rdma: four threads sharing one handle over rdma: every round trip byte-exact") {
        char *b = NULL;
        mc_client *k = reader(&s, MC_TRANSPORT_RDMA, &b);
        CHECK(k != NULL && b != NULL);
        shareArg a[4];
        pthread_t t[4];
        long long ops = fvGet("read_ops"), wops = fvGet("write_ops");
        int started = 0;
        for (int i = 0; k && b && i < 4; i++) {
            a[i] = (shareArg){k, b + (size_t)i * 16 * MiB, i, 0};
            if (pthread_create(&t[i], NULL, shareRun, &a[i]) == 0) started++;
        }
        for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
        CHECK_EQ(started, 4);
        for (int i = 0; i < started; i++) CHECK(a[i].ok);
        CHECK(fvGet("read_ops") - ops >= 24 && fvGet("write_ops") - wops >= 24); /* over rdma, each of them */
        mcClose(&k);
        free(b);
    }
    TEST("rdma: a host that dies: reads of its keys fail at once, the reader carries on") {
        hostKill(&host);
        /* The group's watchdog catches a read that waits instead of failing. */
        CHECK(c && mc_get_into(c, "single:4096", 11, buf + 32 * MiB, 4096) < 0);
        CHECK(cauto && mc_get_into(cauto, "single:1048583", 14, buf2, 1 * MiB + 7) < 0);
        CHECK(cauto && mc_put(cauto, "after", 5, "alive", 5, NULL) == MC_OK);
        char v[8];
        CHECK_EQ(cauto ? mc_get(cauto, "after", 5, v, sizeof(v)) : -1, 5);
    }
    mcClose(&c);
    mcClose(&cauto);
    hostStop(&host);
    free(buf);
    free(buf2);
    if (r) redisFree(r);
    tsGroupFinish(&s, group, failed0);
}

/* GPUDirect through the fake: the engine registers "device memory" (a
 * memfd standing in for the dmabuf a GPU driver exports) as the platform
 * allows, and says which way. Two engines in this process: the fake moves
 * bytes the same way whatever the process. */
static void testGpuDirect(void) {
    const char *group = "gpudirect";
    char err[256] = "", why[256] = "", rkeys[300] = "";
    watchdog();
    int fd = memfd_create("fake-gpu", MFD_CLOEXEC);
    const size_t len = 4 * MiB;
    char *pattern = xmalloc(len), *local = NULL;
    void *iova = (void *)(uintptr_t)0x7e0000000000ull; /* a device address: the CPU never touches it */
    mcRdma *gpu = mcRdmaOpen(err, sizeof(err)), *peer = mcRdmaOpen(err, sizeof(err));
    (void)group;

    TEST("gpudirect: the choice: dmabuf first, then peer memory, else staged; MC_GPUDIRECT narrows it") {
        CHECK_EQ(mcRdmaGdrChoose(NULL, 1, 1), MC_RDMA_REG_DMABUF);
        CHECK_EQ(mcRdmaGdrChoose("auto", 0, 1), MC_RDMA_REG_PEERMEM);
        CHECK_EQ(mcRdmaGdrChoose("auto", 0, 0), MC_RDMA_REG_NONE);
        CHECK_EQ(mcRdmaGdrChoose("peermem", 1, 1), MC_RDMA_REG_PEERMEM);
        CHECK_EQ(mcRdmaGdrChoose("dmabuf", 0, 1), MC_RDMA_REG_NONE);
        CHECK_EQ(mcRdmaGdrChoose("off", 1, 1), MC_RDMA_REG_NONE);
        CHECK(!strcmp(mcRdmaRegName(MC_RDMA_REG_NONE), "staged"));
    }
    TEST("gpudirect: without dmabuf support in the NIC the device memory is staged, with the reason") {
        CHECK(fd >= 0 && ftruncate(fd, (off_t)len) == 0);
        CHECK(gpu != NULL && peer != NULL);
        CHECK_EQ(fvSet("dmabuf", 0), 0);
        long long mrs = fvGet("mrs");
        why[0] = '\0';
        CHECK_EQ(mcRdmaRegisterDevice(gpu, iova, len, fd, 0, NULL, rkeys, sizeof(rkeys), why, sizeof(why)),
                 MC_RDMA_REG_NONE);
        CHECK(why[0] != '\0');
        printf("INFO: no dmabuf: %s\n", why);
        CHECK_EQ(fvGet("mrs"), mrs); /* nothing left registered */
    }
    TEST("gpudirect: with dmabuf support the NICs register the GPU memory and a READ takes its bytes, no host copy") {
        CHECK_EQ(fvSet("dmabuf", 1), 0);
        long long dm = fvGet("dmabuf_mrs");
        fillPattern(pattern, len, seedOf("gpu", len));
        CHECK(fd >= 0 && pwrite(fd, pattern, len, 0) == (ssize_t)len);
        CHECK_EQ(mcRdmaRegisterDevice(gpu, iova, len, fd, 0, "auto", rkeys, sizeof(rkeys), why, sizeof(why)),
                 MC_RDMA_REG_DMABUF);
        CHECK_EQ(fvGet("dmabuf_mrs") - dm, 3);
        int port = 0;
        CHECK_EQ(gpu ? mcRdmaListen(gpu, "127.0.0.1", &port, err, sizeof(err)) : -1, MC_OK);
        char ep[64];
        snprintf(ep, sizeof(ep), "rdma://127.0.0.1:%d", port);
        mcRdmaDesc d;
        CHECK_EQ(mcRdmaDescParse(&d, ep, (uint64_t)(uintptr_t)iova, rkeys, err, sizeof(err)), 0);
        if (posix_memalign((void **)&local, 4096, len) == 0) memset(local, 0, len);
        CHECK_EQ(peer && local ? mcRdmaRegister(peer, local, len, NULL, 0) : -1, MC_OK);
        err[0] = '\0';
        int rc = mcRdmaTransfer(peer, &d, 0, local, len, 0, err, sizeof(err));
        if (rc != MC_OK) fprintf(stderr, "  READ: %s\n", err);
        CHECK_EQ(rc, MC_OK);
        CHECK(local && sameBytes("gpu READ", local, (long long)len, pattern, len));
        /* And a WRITE lands in the GPU memory (the memfd) itself. */
        if (local) fillPattern(local, len, seedOf("gpu-write", len));
        CHECK_EQ(mcRdmaTransfer(peer, &d, 0, local, len, 1, err, sizeof(err)), MC_OK);
        CHECK(fd >= 0 && pread(fd, pattern, len, 0) == (ssize_t)len);
        CHECK(local && sameBytes("gpu WRITE", pattern, (long long)len, local, len));
        CHECK_EQ(mcRdmaUnregister(gpu, iova), MC_OK);
    }
    TEST("gpudirect: MC_GPUDIRECT=peermem registers the device pointer itself") {
        CHECK_EQ(mcRdmaRegisterDevice(gpu, iova, len, -1, 0, "peermem", rkeys, sizeof(rkeys), why, sizeof(why)),
                 MC_RDMA_REG_PEERMEM);
        CHECK_EQ(mcRdmaUnregister(gpu, iova), MC_OK);
        CHECK_EQ(mcRdmaRegisterDevice(gpu, iova, len, fd, 0, "off", rkeys, sizeof(rkeys), why, sizeof(why)),
                 MC_RDMA_REG_NONE);
    }
    mcRdmaClose(peer);
    mcRdmaClose(gpu);
    if (fd >= 0) close(fd);
    free(local);
    free(pattern);
}

/* Device memory registered with the NICs (GPUDirect: here peer memory,
 * MC_GPUDIRECT=peermem, the fake CUDA runtime's pointers registered with
 * the fake verbs) still moves where RDMA cannot carry it: over shm to the
 * server's pool (straight from the device into the mapping), and staged
 * over tcp when every RDMA path to a hosted segment fails (the fake NICs
 * cannot reach the fake runtime's memory, as a NIC whose peer memory
 * access fails). */
static void testGpuDirectFallback(void) {
    const char *group = "gpudirect-fallback";
    int failed0 = test_failed;
    tsServer s;
    hostProc host = {-1, -1};
    char exe[512], lib[600];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(lib, sizeof(lib), "%s/libfakecuda.so", exe);
    setenv("MC_CUDA_LIBRARY", lib, 1);
    setenv("MC_GPUDIRECT", "peermem", 1);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    int (*cuMalloc)(void **, size_t) = NULL, (*cuFree)(void *) = NULL;
    int (*cuCopy)(void *, const void *, size_t, int) = NULL;
    if (h) {
        *(void **)&cuMalloc = dlsym(h, "cudaMalloc");
        *(void **)&cuFree = dlsym(h, "cudaFree");
        *(void **)&cuCopy = dlsym(h, "cudaMemcpy");
    }
    if (!cuMalloc || !cuFree || !cuCopy) {
        TEST("gpudirect-fallback: build/tests/libfakecuda.so loads") CHECK(0);
        return;
    }
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    const size_t len = 3 * MiB + 5, devlen = 8 * MiB;
    char *want = xmalloc(len), *back = xmalloc(len), err[256] = "";
    void *dev = NULL, *dev2 = NULL;
    fillPattern(want, len, seedOf("gpudirect-fallback", len));
    mc_client *c = mc_connect(s.unix_uri, NULL, err, sizeof(err));
    mc_client *hr = mc_connect(s.tcp_uri, NULL, err, sizeof(err));
    const mc_put_opts to_pool = {.prefer = "self"};

    TEST("gpudirect-fallback: device memory registers with the NICs as peer memory") {
        CHECK(c && hr);
        CHECK_EQ(hostStart(&host, &s, HOSTNAME_SEG, 16 * MiB), 0);
        CHECK(cuMalloc(&dev, devlen) == 0 && cuMalloc(&dev2, devlen) == 0);
        CHECK(dev && cuCopy(dev, want, len, 4) == 0);
        CHECK_EQ(c && dev ? mc_register(c, dev, devlen, MC_MEM_CUDA) : -1, MC_OK);
        CHECK_EQ(c && dev2 ? mc_register(c, dev2, devlen, MC_MEM_CUDA) : -1, MC_OK);
        char why[200] = "";
        CHECK_EQ(c && dev ? mc_region_rdma(c, dev, why, sizeof(why)) : -1, MC_REG_RDMA_PEERMEM);
    }
    TEST("gpudirect-fallback: a put and a get of registered device memory to the server's pool go over shm") {
        int rc = c && dev ? mc_put(c, "gd:pool", 7, dev, len, &to_pool) : -1;
        if (rc != MC_OK && c) fprintf(stderr, "  mc_put: %d %s\n", rc, mc_last_error(c));
        CHECK_EQ(rc, MC_OK);
        CHECK_EQ(c ? mc_last_transport(c) : -1, MC_TRANSPORT_SHM);
        CHECK(hr && sameBytes("host reader", back, mc_get(hr, "gd:pool", 7, back, len), want, len));
        long long got = c && dev2 ? mc_get(c, "gd:pool", 7, dev2, devlen) : -1;
        if (got < 0 && c) fprintf(stderr, "  mc_get: %lld %s\n", got, mc_last_error(c));
        memset(back, 0, len);
        CHECK(dev2 && cuCopy(back, dev2, len, 4) == 0);
        CHECK(sameBytes("into the device", back, got, want, len));
        /* A batch takes the same way. */
        mc_kv items[1] = {{"gd:poolb", 8, dev, len}};
        int res[1] = {-1};
        CHECK_EQ(c && dev ? mc_batch_put(c, 1, items, &to_pool, res) : -1, 1);
        CHECK(hr && sameBytes("batch, host reader", back, mc_get(hr, "gd:poolb", 8, back, len), want, len));
    }
    TEST("gpudirect-fallback: every RDMA path to a hosted segment failing, the device bytes go staged over tcp") {
        const mc_put_opts to_seg = {.prefer = HOSTNAME_SEG};
        mc_client *t = mc_connect(s.tcp_uri, NULL, err, sizeof(err)); /* no shm to the pool either */
        CHECK(t != NULL);
        CHECK_EQ(t && dev ? mc_register(t, dev, devlen, MC_MEM_CUDA) : -1, MC_OK);
        CHECK_EQ(t && dev2 ? mc_register(t, dev2, devlen, MC_MEM_CUDA) : -1, MC_OK);
        long long tried = fvGet("rem_access_err") + fvGet("loc_prot_err");
        int rc = t && dev ? mc_put(t, "gd:seg", 6, dev, len, &to_seg) : -1;
        CHECK(fvGet("rem_access_err") + fvGet("loc_prot_err") > tried); /* RDMA was tried first */
        if (rc != MC_OK && t) fprintf(stderr, "  mc_put: %d %s\n", rc, mc_last_error(t));
        CHECK_EQ(rc, MC_OK);
        CHECK_EQ(t ? mc_last_transport(t) : -1, MC_TRANSPORT_TCP);
        CHECK(hr && sameBytes("host reader", back, mc_get(hr, "gd:seg", 6, back, len), want, len));
        long long got = t && dev2 ? mc_get(t, "gd:seg", 6, dev2, devlen) : -1;
        if (got < 0 && t) fprintf(stderr, "  mc_get: %lld %s\n", got, mc_last_error(t));
        memset(back, 0, len);
        CHECK(dev2 && cuCopy(back, dev2, len, 4) == 0);
        CHECK(sameBytes("into the device", back, got, want, len));
        mcClose(&t);
    }
    mcClose(&c);
    mcClose(&hr);
    hostStop(&host);
    if (dev) cuFree(dev);
    if (dev2) cuFree(dev2);
    free(want);
    free(back);
    unsetenv("MC_GPUDIRECT");
    tsGroupFinish(&s, group, failed0);
}

/* The fake's own checks, called as libmooncake calls them (dlsym): what a
 * real verbs library refuses, the fake refuses, or the tests above would
 * pass against code that real hardware rejects. */
static void *fvSym(const char *name) {
    void *h = dlopen(getenv("MC_VERBS_LIBRARY"), RTLD_NOW | RTLD_LOCAL);
    return h ? dlsym(h, name) : NULL;
}

static void testFakeChecks(void) {
    struct ibv_device **(*getList)(int *) = NULL;
    void (*freeList)(struct ibv_device **) = NULL;
    struct ibv_context *(*openDev)(struct ibv_device *) = NULL;
    int (*closeDev)(struct ibv_context *) = NULL;
    struct ibv_pd *(*allocPd)(struct ibv_context *) = NULL;
    int (*deallocPd)(struct ibv_pd *) = NULL;
    struct ibv_mr *(*regMr)(struct ibv_pd *, void *, size_t, int) = NULL;
    struct ibv_cq *(*createCq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int) = NULL;
    int (*destroyCq)(struct ibv_cq *) = NULL;
    struct ibv_qp *(*createQp)(struct ibv_pd *, struct ibv_qp_init_attr *) = NULL;
    int (*modifyQp)(struct ibv_qp *, struct ibv_qp_attr *, int) = NULL;
    int (*destroyQp)(struct ibv_qp *) = NULL;
    *(void **)&getList = fvSym("ibv_get_device_list");
    *(void **)&freeList = fvSym("ibv_free_device_list");
    *(void **)&openDev = fvSym("ibv_open_device");
    *(void **)&closeDev = fvSym("ibv_close_device");
    *(void **)&allocPd = fvSym("ibv_alloc_pd");
    *(void **)&deallocPd = fvSym("ibv_dealloc_pd");
    *(void **)&regMr = fvSym("ibv_reg_mr");
    *(void **)&createCq = fvSym("ibv_create_cq");
    *(void **)&destroyCq = fvSym("ibv_destroy_cq");
    *(void **)&createQp = fvSym("ibv_create_qp");
    *(void **)&modifyQp = fvSym("ibv_modify_qp");
    *(void **)&destroyQp = fvSym("ibv_destroy_qp");
    watchdog();

    TEST("fakeverbs: the QP state machine, posting, teardown order and MR access refused as verbs refuses them") {
        int n = 0;
        struct ibv_device **list = getList ? getList(&n) : NULL;
        CHECK_EQ(n, 3);
        struct ibv_context *ctx = list ? openDev(list[0]) : NULL;
        if (list) freeList(list);
        CHECK(ctx != NULL);
        if (ctx == NULL) break;
        struct ibv_pd *pd = allocPd(ctx);
        struct ibv_cq *cq = createCq(ctx, 4, NULL, NULL, 0);
        struct ibv_qp_init_attr qa;
        memset(&qa, 0, sizeof(qa));
        qa.send_cq = qa.recv_cq = cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
        qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
        struct ibv_qp *qp = createQp(pd, &qa);
        CHECK(pd && cq && qp);
        if (!qp) break;
        long long refused = fvGet("qp_refused");
        struct ibv_qp_attr a;
        struct ibv_send_wr wr, *bad = NULL;
        memset(&wr, 0, sizeof(wr));
        wr.opcode = IBV_WR_RDMA_READ;
        CHECK(ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr); /* RESET: not RTS */
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTR;
        CHECK(modifyQp(qp, &a, IBV_QP_STATE) != 0);            /* RESET -> RTR skips INIT */
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        CHECK(modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) != 0); /* INIT needs pkey and access too */
        CHECK_EQ(modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
        a.qp_state = IBV_QPS_RTS;
        CHECK(modifyQp(qp, &a, IBV_QP_STATE) != 0);            /* INIT -> RTS skips RTR */
        const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = qp->qp_num;
        a.max_dest_rd_atomic = 1;
        a.ah_attr.port_num = 1;
        CHECK(modifyQp(qp, &a, rtr) != 0);                     /* RoCE without a GRH */
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.sgid_index = 1;
        CHECK_EQ(modifyQp(qp, &a, rtr), 0);
        CHECK(ibv_post_send(qp, &wr, &bad) != 0);               /* RTR: still not RTS */
        CHECK_EQ(fvGet("qp_refused") - refused, 4);
        CHECK_EQ(deallocPd(pd), EBUSY);                         /* a QP is in it */
        CHECK_EQ(destroyCq(cq), EBUSY);                         /* a QP uses it */
        char mem[64];
        errno = 0;
        CHECK(regMr(pd, mem, sizeof(mem), IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL);
        CHECK_EQ(destroyQp(qp), 0);
        CHECK_EQ(destroyCq(cq), 0);
        CHECK_EQ(deallocPd(pd), 0);
        CHECK_EQ(closeDev(ctx), 0);
    }
}

#endif /* MC_HAVE_RDMA */

int main(int argc, char **argv) {
    const char *only = groupMainStart("test_mooncake_rdma", MC_VERSION, onPipe, argc, argv);
#ifndef MC_HAVE_RDMA
    (void)only;
    printf("SKIP: rdma: built without RDMA support (no infiniband/verbs.h)\n");
    return testReport();
#else
    if (fakeSetup() != 0) {
        TEST("rdma: load build/tests/libfakeverbs.so") CHECK(0);
        return testReport();
    }
    if (!only || strstr("rdma", only)) testRdma();
    if (!only || strstr("gpudirect", only)) testGpuDirect();
    if (!only || strstr("fakeverbs", only)) testFakeChecks();
    if (!only || strstr("gpudirect-fallback", only)) testGpuDirectFallback(); /* last: loads the fake CUDA */
    fakeCleanup();
    return testReport();
#endif
}
