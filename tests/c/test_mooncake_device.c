/* test_mooncake_device.c -- device memory through libmooncake, end to end.
 *
 *  - device: every put and get form of the C API with device pointers --
 *    single, scatter-gather (mixed with host buffers), put_from/get_into of
 *    registered memory, batch, multi-buffer batch, ranged reads, async --
 *    over shm and over tcp, byte-exact, nothing written past a buffer; the
 *    copies counted (one per byte over shm, straight to the mapping, which
 *    is page-locked once and unlocked when it goes); and the error paths: a
 *    failing device copy, no pinned memory, a refused registration, a
 *    device range past its allocation.
 *
 * libmooncake loads the CUDA runtime that MC_CUDA_LIBRARY names (mc_cuda.c);
 * main() points it at build/tests/libfakecuda.so beside this program
 * unless it is set, so the group runs on every machine: the fake's device
 * memory faults on any CPU access, so a path that touches it without the
 * runtime crashes or fails here. The test reads and writes device memory
 * only through the runtime's cudaMemcpy (dlsym), as a program would. Named
 * a real runtime (MC_CUDA_LIBRARY=libcudart.so.13 on a GPU machine) the
 * same tests run on the GPU, without the fake's counters and failure
 * injection (those tests say SKIP).
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

#include <dlfcn.h>

/* ==== device: device memory through libmooncake ======================================================= */

#define DV_N (3 * MiB + 5)
#define DV_DEV (16 * MiB)

static struct {
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*memcpy_)(void *, const void *, size_t, int);
    unsigned long long (*count)(const char *);       /* the fake only */
    void (*fail)(const char *, long long, long long); /* the fake only */
} dv;

static int dvOpen(void) {
    const char *lib = getenv("MC_CUDA_LIBRARY");
    void *h = lib && lib[0] ? dlopen(lib, RTLD_NOW) : NULL;
    if (h == NULL) {
        fprintf(stderr, "  dlopen(%s): %s\n", lib ? lib : "(MC_CUDA_LIBRARY unset)", dlerror());
        return 0;
    }
    *(void **)&dv.malloc_ = dlsym(h, "cudaMalloc");
    *(void **)&dv.free_ = dlsym(h, "cudaFree");
    *(void **)&dv.memcpy_ = dlsym(h, "cudaMemcpy");
    *(void **)&dv.count = dlsym(h, "fakecudaCount");
    *(void **)&dv.fail = dlsym(h, "fakecudaFail");
    return dv.malloc_ && dv.free_ && dv.memcpy_;
}

static char *dvAlloc(size_t len) {
    void *p = NULL;
    return dv.malloc_(&p, len) == 0 ? p : NULL;
}

static unsigned long long dvCount(const char *what) { return dv.count ? dv.count(what) : 0; }

/* Device bytes [at, at+len) of dev from host (or a fill byte when host is NULL). */
static int dvWrite(char *dev, size_t at, const void *host, size_t len, int fill) {
    char *tmp = NULL;
    if (host == NULL) {
        tmp = xmalloc(len ? len : 1);
        memset(tmp, fill, len);
        host = tmp;
    }
    int rc = len ? dv.memcpy_(dev + at, host, len, 4) : 0;
    free(tmp);
    return rc == 0;
}

/* dev[at .. at+len) is want[0..len) (want NULL: all bytes `fill`). */
static int dvSame(const char *what, const char *dev, size_t at, long long res, const char *want, size_t len, int fill) {
    char *tmp = xmalloc(len ? len : 1), *exp = NULL;
    int rc = len ? dv.memcpy_(tmp, dev + at, len, 4) : 0;
    if (rc != 0) fprintf(stderr, "  %s: copy from the device: error %d\n", what, rc);
    if (want == NULL) {
        exp = xmalloc(len ? len : 1);
        memset(exp, fill, len);
        want = exp;
    }
    int ok = rc == 0 && sameBytes(what, tmp, res, want, len);
    free(tmp);
    free(exp);
    return ok;
}

/* Copies made and bytes copied since the last call (the fake's counters). */
typedef struct {
    unsigned long long copies, bytes, pinned, pageable;
} dvCounts;

static dvCounts dvDelta(dvCounts *last) {
    dvCounts now = {dvCount("memcpy"), dvCount("memcpy_bytes"), dvCount("memcpy_pinned_bytes"),
                    dvCount("memcpy_pageable_bytes")};
    dvCounts d = {now.copies - last->copies, now.bytes - last->bytes, now.pinned - last->pinned,
                  now.pageable - last->pageable};
    *last = now;
    return d;
}

/* Every put and get form over one handle (transport t); v: the value's
 * bytes on the host. */
static char dvName[200]; /* TEST keeps a pointer to its name */

static void dvForms(mc_client *c, int t, char *dev, char *dev2, const char *v, char *hostbuf) {
    char *name = dvName, key[64];
    const char *tn = transportName(t);
    dvCounts cnt;
    dvDelta(&cnt);

#define DV_TEST(fmt) snprintf(dvName, sizeof(dvName), "device over %s: " fmt, tn); TEST(name)
    DV_TEST("mc_put from device memory, mc_get into it: byte-exact, one device copy per byte") {
        snprintf(key, sizeof(key), "dv:%s:put", tn);
        CHECK(dvWrite(dev, 0, v, DV_N, 0));
        dvDelta(&cnt);
        CHECK_EQ(mc_put(c, key, strlen(key), dev, DV_N, NULL), MC_OK);
        CHECK_EQ(mc_last_transport(c), t);
        dvCounts d = dvDelta(&cnt);
        if (dv.count) {
            CHECK_EQ(d.bytes, DV_N);
            CHECK_EQ(d.pinned, DV_N); /* the mapping page-locked (shm) or the pinned stage (tcp) */
        }
        CHECK(getSame(c, key, v, DV_N, t)); /* host readers see it */
        CHECK(dvWrite(dev2, 0, NULL, DV_DEV, 0xEE));
        dvDelta(&cnt);
        CHECK_EQ(mc_get(c, key, strlen(key), dev2, DV_DEV), (long long)DV_N);
        d = dvDelta(&cnt);
        if (dv.count) {
            CHECK_EQ(d.bytes, DV_N);
            CHECK_EQ(d.pinned, DV_N);
        }
        CHECK(dvSame("mc_get", dev2, 0, DV_N, v, DV_N, 0));
        CHECK(dvSame("after it", dev2, DV_N, 64, NULL, 64, 0xEE));
    }
    DV_TEST("a large value (past the 4 MiB tcp chunk), device and host pieces across chunk edges: byte-exact") {
        /* Over tcp: cut into chunks whose device copies run on a stream
         * while the socket moves the other chunk (the fake's async copies
         * counted: one per device piece per chunk). Over shm: one copy. */
        size_t big = 9 * MiB + 3, hpart = 2 * MiB;
        char *want = xmalloc(big), *hb = xmalloc(hpart);
        fillPattern(want, big, seedOf("dv:big", big));
        snprintf(key, sizeof(key), "dv:%s:big", tn);
        /* device [0, 3 MiB+1), host [3 MiB+1, 5 MiB+1), device [5 MiB+1, big) */
        CHECK(dvWrite(dev, 0, want, 3 * MiB + 1, 0));
        memcpy(hb, want + 3 * MiB + 1, hpart);
        CHECK(dvWrite(dev2, 0, want + 5 * MiB + 1, big - 5 * MiB - 1, 0));
        struct iovec in[3] = {{dev, 3 * MiB + 1}, {hb, hpart}, {dev2, big - 5 * MiB - 1}};
        dvDelta(&cnt);
        unsigned long long a0 = dvCount("memcpy_async");
        CHECK_EQ(mc_putv(c, key, strlen(key), in, 3, NULL), MC_OK);
        dvCounts d = dvDelta(&cnt);
        if (dv.count) {
            CHECK_EQ(d.bytes, big - hpart); /* every device byte once */
            /* chunks [0,4) [4,8) [8,9+): device pieces 1+1+1 */
            if (t == MC_TRANSPORT_TCP) CHECK_EQ(dvCount("memcpy_async") - a0, 3);
        }
        CHECK(getSame(c, key, want, big, t));
        CHECK(dvWrite(dev, 0, NULL, DV_DEV, 0xEE));
        memset(hb, 0, hpart);
        struct iovec out[3] = {{dev, MiB}, {hb, hpart}, {dev + 2 * MiB, 8 * MiB}};
        CHECK_EQ(mc_register(c, hb, hpart, MC_MEM_HOST), MC_OK); /* get_intov takes registered memory */
        dvDelta(&cnt);
        a0 = dvCount("memcpy_async");
        CHECK_EQ(mc_get_intov(c, key, strlen(key), out, 3), (long long)big);
        d = dvDelta(&cnt);
        if (dv.count) {
            CHECK_EQ(d.bytes, big - hpart);
            /* chunks [0,4): dev 1 MiB, dev 1 MiB after host; [4,8) and [8,9+): dev */
            if (t == MC_TRANSPORT_TCP) CHECK_EQ(dvCount("memcpy_async") - a0, 4);
        }
        CHECK(dvSame("piece 0", dev, 0, MiB, want, MiB, 0));
        CHECK(sameBytes("piece 1 (host)", hb, (long long)hpart, want + MiB, hpart));
        CHECK(dvSame("piece 2", dev, 2 * MiB, (long long)(big - 3 * MiB), want + 3 * MiB, big - 3 * MiB, 0));
        CHECK(dvSame("after piece 2", dev, 2 * MiB + big - 3 * MiB, 64, NULL, 64, 0xEE));
        CHECK(dvSame("between", dev, MiB, 64, NULL, 64, 0xEE));
        CHECK_EQ(mc_unregister(c, hb), MC_OK);
        free(want);
        free(hb);
    }
    DV_TEST("mc_put_from/mc_get_into registered device memory at an offset") {
        snprintf(key, sizeof(key), "dv:%s:from", tn);
        CHECK(dvWrite(dev, 4096, v + 7, MiB, 0));
        CHECK_EQ(mc_put_from(c, key, strlen(key), dev + 4096, MiB, NULL), MC_OK);
        CHECK(dvWrite(dev, 0, NULL, 4 * MiB, 0xEE));
        CHECK_EQ(mc_get_into(c, key, strlen(key), dev + 100, 2 * MiB), (long long)MiB);
        CHECK(dvSame("mc_get_into", dev, 100, MiB, v + 7, MiB, 0));
        CHECK(dvSame("before it", dev, 0, 100, NULL, 100, 0xEE));
        CHECK(dvSame("after it", dev, 100 + MiB, 64, NULL, 64, 0xEE));
    }
    DV_TEST("scatter-gather: device and host pieces in one object, both ways (putv, put_fromv, get_intov)") {
        snprintf(key, sizeof(key), "dv:%s:sg", tn);
        CHECK(dvWrite(dev, 0, v, 1000, 0));
        CHECK(dvWrite(dev, 8 * MiB, v + 1000 + 333, 2 * MiB, 0));
        memcpy(hostbuf, v + 1000, 333);
        struct iovec in[4] = {{dev, 1000}, {hostbuf, 333}, {dev, 0}, {dev + 8 * MiB, 2 * MiB}};
        size_t tot = 1000 + 333 + 2 * MiB;
        CHECK_EQ(mc_putv(c, key, strlen(key), in, 4, NULL), MC_OK);
        CHECK(getSame(c, key, v, tot, t));
        char key2[80];
        snprintf(key2, sizeof(key2), "%s:from", key);
        CHECK_EQ(mc_put_fromv(c, key2, strlen(key2), in, 4, NULL), MC_OK);
        CHECK(getSame(c, key2, v, tot, t));
        CHECK(dvWrite(dev2, 0, NULL, 4 * MiB, 0xEE));
        memset(hostbuf, 0, MiB);
        struct iovec out[3] = {{dev2, 500}, {hostbuf, 1000}, {dev2 + MiB, 3 * MiB}};
        CHECK_EQ(mc_get_intov(c, key2, strlen(key2), out, 3), (long long)tot);
        CHECK(dvSame("piece 0", dev2, 0, 500, v, 500, 0));
        CHECK(sameBytes("piece 1 (host)", hostbuf, 1000, v + 500, 1000));
        CHECK(dvSame("piece 2", dev2, MiB, (long long)(tot - 1500), v + 1500, tot - 1500, 0));
        CHECK(dvSame("after piece 2", dev2, MiB + tot - 1500, 64, NULL, 64, 0xEE));
        CHECK(dvSame("after piece 0", dev2, 500, 64, NULL, 64, 0xEE));
    }
    DV_TEST("batch: mc_batch_put/mc_batch_get with device and host items; one copy per device byte") {
        char k[3][64];
        for (int i = 0; i < 3; i++) snprintf(k[i], sizeof(k[i]), "dv:%s:b%d", tn, i);
        CHECK(dvWrite(dev, 0, v, MiB, 0));
        CHECK(dvWrite(dev, 4 * MiB, v + 5, 2 * MiB + 1, 0));
        memcpy(hostbuf, v + 9, 4096);
        mc_kv items[3] = {{k[0], strlen(k[0]), dev, MiB}, {k[1], strlen(k[1]), hostbuf, 4096},
                          {k[2], strlen(k[2]), dev + 4 * MiB, 2 * MiB + 1}};
        int res[3] = {-1, -1, -1};
        dvDelta(&cnt);
        CHECK_EQ(mc_batch_put(c, 3, items, NULL, res), 3);
        CHECK(res[0] == MC_OK && res[1] == MC_OK && res[2] == MC_OK);
        dvCounts d = dvDelta(&cnt);
        if (dv.count) CHECK_EQ(d.bytes, 3 * MiB + 1);
        CHECK(getSame(c, k[0], v, MiB, t));
        CHECK(getSame(c, k[1], v + 9, 4096, t));
        CHECK(getSame(c, k[2], v + 5, 2 * MiB + 1, t));
        CHECK(dvWrite(dev2, 0, NULL, 8 * MiB, 0xEE));
        memset(hostbuf, 0, 8192);
        mc_kv back[3] = {{k[0], strlen(k[0]), dev2, 2 * MiB}, {k[1], strlen(k[1]), hostbuf, 8192},
                         {k[2], strlen(k[2]), dev2 + 4 * MiB, 4 * MiB}};
        long long got[3] = {0, 0, 0};
        dvDelta(&cnt);
        CHECK_EQ(mc_batch_get(c, 3, back, got), 3);
        CHECK(got[0] == (long long)MiB && got[1] == 4096 && got[2] == (long long)(2 * MiB + 1));
        d = dvDelta(&cnt);
        if (dv.count) CHECK_EQ(d.bytes, 3 * MiB + 1);
        CHECK(dvSame("item 0", dev2, 0, got[0], v, MiB, 0));
        CHECK(sameBytes("item 1 (host)", hostbuf, got[1], v + 9, 4096));
        CHECK(dvSame("item 2", dev2, 4 * MiB, got[2], v + 5, 2 * MiB + 1, 0));
        CHECK(dvSame("after item 0", dev2, MiB, 64, NULL, 64, 0xEE));
        CHECK(dvSame("after item 2", dev2, 6 * MiB + 1, 64, NULL, 64, 0xEE));
    }
    DV_TEST("multi-buffer batch: mc_batch_putv/mc_batch_getv, each object from several device buffers") {
        char k[2][64];
        for (int i = 0; i < 2; i++) snprintf(k[i], sizeof(k[i]), "dv:%s:mb%d", tn, i);
        CHECK(dvWrite(dev, 0, v, 2 * MiB, 0));
        struct iovec a[3] = {{dev, 4096}, {dev + 4096, 100}, {dev + 4196, MiB}};
        struct iovec b[2] = {{dev + 2 * MiB - 77, 77}, {dev + MiB + 4196, 50000}};
        mc_kvv items[2] = {{k[0], strlen(k[0]), a, 3}, {k[1], strlen(k[1]), b, 2}};
        int res[2] = {-1, -1};
        CHECK_EQ(mc_batch_putv(c, 2, items, NULL, res), 2);
        CHECK(getSame(c, k[0], v, 4196 + MiB, t));
        char *want1 = xmalloc(77 + 50000);
        memcpy(want1, v + 2 * MiB - 77, 77);
        memcpy(want1 + 77, v + MiB + 4196, 50000);
        CHECK(getSame(c, k[1], want1, 77 + 50000, t));
        CHECK(dvWrite(dev2, 0, NULL, 4 * MiB, 0xEE));
        struct iovec oa[2] = {{dev2, 1}, {dev2 + 8, 2 * MiB}};
        struct iovec ob[3] = {{dev2 + 3 * MiB, 10}, {dev2 + 3 * MiB + 20, 67}, {dev2 + 3 * MiB + 100, 60000}};
        mc_kvv outs[2] = {{k[0], strlen(k[0]), oa, 2}, {k[1], strlen(k[1]), ob, 3}};
        long long got[2] = {0, 0};
        CHECK_EQ(mc_batch_getv(c, 2, outs, got), 2);
        CHECK(got[0] == (long long)(4196 + MiB) && got[1] == 77 + 50000);
        CHECK(dvSame("object 0 piece 0", dev2, 0, 1, v, 1, 0));
        CHECK(dvSame("object 0 piece 1", dev2, 8, 4195 + MiB, v + 1, 4195 + MiB, 0));
        CHECK(dvSame("between", dev2, 1, 7, NULL, 7, 0xEE));
        CHECK(dvSame("object 1 piece 0", dev2, 3 * MiB, 10, want1, 10, 0));
        CHECK(dvSame("object 1 piece 1", dev2, 3 * MiB + 20, 67, want1 + 10, 67, 0));
        CHECK(dvSame("object 1 piece 2", dev2, 3 * MiB + 100, 50000, want1 + 77, 50000, 0));
        CHECK(dvSame("gap", dev2, 3 * MiB + 10, 10, NULL, 10, 0xEE));
        free(want1);
    }
    DV_TEST("async: mc_batch_put_async/mc_batch_get_async with device buffers") {
        char k[2][64];
        for (int i = 0; i < 2; i++) snprintf(k[i], sizeof(k[i]), "dv:%s:as%d", tn, i);
        CHECK(dvWrite(dev, 0, v, 3 * MiB, 0));
        struct iovec a[2] = {{dev, MiB}, {hostbuf, 0}};
        struct iovec b[1] = {{dev + MiB, 2 * MiB}};
        mc_kvv items[2] = {{k[0], strlen(k[0]), a, 2}, {k[1], strlen(k[1]), b, 1}};
        mc_op *op = mc_batch_put_async(c, 2, items, NULL);
        CHECK(op != NULL);
        if (op) {
            CHECK_EQ(mc_op_wait(op, -1), 2);
            mc_op_free(op);
        }
        CHECK(getSame(c, k[0], v, MiB, t));
        CHECK(getSame(c, k[1], v + MiB, 2 * MiB, t));
        CHECK(dvWrite(dev2, 0, NULL, 4 * MiB, 0xEE));
        struct iovec oa[1] = {{dev2, 2 * MiB}};
        struct iovec ob[1] = {{dev2 + 2 * MiB, 2 * MiB}};
        mc_kvv outs[2] = {{k[0], strlen(k[0]), oa, 1}, {k[1], strlen(k[1]), ob, 1}};
        op = mc_batch_get_async(c, 2, outs);
        CHECK(op != NULL);
        if (op) {
            CHECK_EQ(mc_op_wait(op, -1), 2);
            const long long *r = mc_op_results(op);
            CHECK(r[0] == (long long)MiB && r[1] == (long long)(2 * MiB));
            mc_op_free(op);
        }
        CHECK(dvSame("async item 0", dev2, 0, MiB, v, MiB, 0));
        CHECK(dvSame("after it", dev2, MiB, 64, NULL, 64, 0xEE));
        CHECK(dvSame("async item 1", dev2, 2 * MiB, 2 * MiB, v + MiB, 2 * MiB, 0));
    }
    DV_TEST("ranged reads into registered device memory beside host ranges; one copy per device range") {
        snprintf(key, sizeof(key), "dv:%s:put", tn); /* DV_N bytes of v, put above */
        CHECK(dvWrite(dev, 0, NULL, DV_DEV, 0xEE));
        memset(hostbuf, 0, MiB);
        mc_range g[6] = {{dev, 0, 1000},
                         {dev + 4096, DV_N - 777, 777},  /* the object's end */
                         {dev + MiB, MiB, 2 * MiB},      /* a large one */
                         {hostbuf, 5, 100},              /* host memory in the same item */
                         {dev + 7 * MiB, 123, 0},        /* len 0 */
                         {dev + 7 * MiB, DV_N - 10, 11}}; /* past the end: alone */
        mc_kranges items[1] = {{key, strlen(key), g, 6}};
        long long res[6], want[6] = {1000, 777, 2 * MiB, 100, 0, MC_ERR_INVALID};
        dvDelta(&cnt);
        CHECK_EQ(rgBatch(c, 1, items, res), 5);
        CHECK(rgResults(name, res, want, 6));
        dvCounts d = dvDelta(&cnt);
        if (dv.count) {
            CHECK_EQ(d.copies, 3);
            CHECK_EQ(d.bytes, 1000 + 777 + 2 * MiB);
        }
        CHECK(dvSame("range 0", dev, 0, res[0], v, 1000, 0));
        CHECK(dvSame("range 1", dev, 4096, res[1], v + DV_N - 777, 777, 0));
        CHECK(dvSame("range 2", dev, MiB, res[2], v + MiB, 2 * MiB, 0));
        CHECK(sameBytes("host range", hostbuf, res[3], v + 5, 100));
        CHECK(dvSame("after range 0", dev, 1000, 64, NULL, 64, 0xEE));
        CHECK(dvSame("after range 1", dev, 4096 + 777, 64, NULL, 64, 0xEE));
        CHECK(dvSame("after range 2", dev, 3 * MiB, 64, NULL, 64, 0xEE));
        CHECK(dvSame("refused range", dev, 7 * MiB, 64, NULL, 64, 0xEE));
    }
#undef DV_TEST
}

void testDevice(void) {
    const char *group = "device";
    char err[256];
    if (!dvOpen()) {
        TEST("device: the CUDA runtime MC_CUDA_LIBRARY names opens") CHECK(0);
        return;
    }
    int failed0 = test_failed;
    tsServer s, s2;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    unsigned long long regs0 = dvCount("host_registered");
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char *v = xmalloc(DV_N), *hostbuf = xmalloc(MiB);
    fillPattern(v, DV_N, seedOf("dv:obj", DV_N));
    char *dev = dvAlloc(DV_DEV), *dev2 = dvAlloc(DV_DEV), *unreg = dvAlloc(MiB);

    TEST("device: device memory registers as MC_MEM_CUDA, host memory does not") {
        CHECK(cshm && ctcp && dev && dev2 && unreg);
        for (int p = 0; p < 2 && cshm && ctcp && dev && dev2; p++) {
            mc_client *c = p ? ctcp : cshm;
            CHECK_EQ(mc_register(c, dev, DV_DEV, MC_MEM_CUDA), MC_OK);
            CHECK_EQ(mc_register(c, dev2, DV_DEV, MC_MEM_CUDA), MC_OK);
            CHECK_EQ(mc_register(c, hostbuf, MiB, MC_MEM_CUDA), MC_ERR_INVALID);
            CHECK_EQ(mc_register(c, hostbuf, MiB, MC_MEM_HOST), MC_OK);
        }
    }
    for (int p = 0; p < 2 && cshm && ctcp && dev && dev2 && unreg; p++)
        dvForms(p ? ctcp : cshm, p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM, dev, dev2, v, hostbuf);

    if (dv.count && cshm && ctcp && dev && dev2) {
        TEST("device: the shm mapping was page-locked once, however many transfers") {
            CHECK_EQ(dvCount("host_registered") - regs0, 1);
        }
        TEST("device: a failing device copy fails the call with the runtime's reason; a put is revoked") {
            for (int p = 0; p < 2; p++) {
                mc_client *c = p ? ctcp : cshm;
                char key[64];
                snprintf(key, sizeof(key), "dv:fail:%d", p);
                CHECK(dvWrite(dev, 0, v, MiB, 0));
                dv.fail("memcpy", 0, -1);
                CHECK_EQ(mc_put(c, key, strlen(key), dev, MiB, NULL), MC_ERR_IO);
                CHECK(strstr(lastErr(c), "cudaMemcpy") != NULL);
                CHECK_EQ(mc_get_into(c, "dv:shm:put", 10, dev2, DV_DEV), MC_ERR_IO);
                /* A batch: the device item fails alone. */
                memcpy(hostbuf, v, 100);
                char hkey[64];
                snprintf(hkey, sizeof(hkey), "dv:fail:host%d", p);
                mc_kv items[2] = {{key, strlen(key), dev, MiB}, {hkey, strlen(hkey), hostbuf, 100}};
                int res[2] = {0, 0};
                CHECK_EQ(mc_batch_put(c, 2, items, NULL, res), 1);
                CHECK(res[0] < 0 && res[1] == MC_OK);
                /* A large one over tcp: the second chunk's copy fails, mid-pipeline
                 * (a get: the chunk before it went to the device already). */
                if (p == 1) {
                    dv.fail("memcpy", 1, -1);
                    CHECK_EQ(mc_put(c, "dv:fail:big", 11, dev, 9 * MiB, NULL), MC_ERR_IO);
                    dv.fail("memcpy", 1, -1);
                    CHECK_EQ(mc_get(c, "dv:tcp:big", 10, dev2, DV_DEV), MC_ERR_IO);
                    dv.fail("memcpy", 0, 0);
                    CHECK_EQ(get(c, "dv:fail:big", hostbuf, MiB), MC_ERR_NOT_FOUND);
                }
                dv.fail("memcpy", 0, 0);
                CHECK_EQ(get(c, key, hostbuf, MiB), MC_ERR_NOT_FOUND); /* nothing published */
                CHECK_EQ(mc_put(c, key, strlen(key), dev, MiB, NULL), MC_OK);
                CHECK(getSame(c, key, v, MiB, p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM));
            }
        }
        TEST("device: async batches with a failing device copy: the device items fail, the host item lands, nothing half-published") {
            for (int p = 0; p < 2; p++) {
                mc_client *c = p ? ctcp : cshm;
                char k[3][64];
                for (int i = 0; i < 3; i++) snprintf(k[i], sizeof(k[i]), "dv:afail:%d:%d", p, i);
                char *big = xmalloc(5 * MiB);
                fillPattern(big, 5 * MiB, seedOf("dv:afail", 5 * MiB));
                CHECK(dvWrite(dev, 0, big, 5 * MiB, 0));
                memcpy(hostbuf, v + 11, 1001);
                /* Item 0 mixes host and device buffers (odd lengths, an
                 * empty one); item 1 is host only; item 2 past the chunk. */
                struct iovec a[3] = {{hostbuf, 1001}, {dev, 0}, {dev + 3, 4099}};
                struct iovec b[1] = {{hostbuf + 2048, 333}};
                struct iovec d[1] = {{dev, 5 * MiB - 1}};
                mc_kvv items[3] = {{k[0], strlen(k[0]), a, 3}, {k[1], strlen(k[1]), b, 1}, {k[2], strlen(k[2]), d, 1}};
                dv.fail("memcpy", 0, -1);
                mc_op *op = mc_batch_put_async(c, 3, items, NULL);
                CHECK(op != NULL);
                if (op) {
                    CHECK_EQ(mc_op_wait(op, -1), 1);
                    const long long *r = mc_op_results(op);
                    CHECK(r[0] < 0 && r[1] == MC_OK && r[2] < 0);
                    mc_op_free(op);
                }
                dv.fail("memcpy", 0, 0);
                CHECK_EQ(get(c, k[0], hostbuf + 4096, MiB), MC_ERR_NOT_FOUND);
                CHECK_EQ(get(c, k[2], hostbuf + 4096, MiB), MC_ERR_NOT_FOUND);
                CHECK(getSame(c, k[1], hostbuf + 2048, 333, p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM));
                /* Working again: the same batch lands byte-exact. */
                op = mc_batch_put_async(c, 3, items, NULL);
                CHECK(op != NULL);
                if (op) {
                    CHECK_EQ(mc_op_wait(op, -1), 2);
                    const long long *r = mc_op_results(op);
                    CHECK(r[0] == MC_OK && r[1] == MC_ERR_EXISTS && r[2] == MC_OK); /* item 1 landed before */
                    mc_op_free(op);
                }
                char *w0 = xmalloc(1001 + 4099);
                memcpy(w0, v + 11, 1001);
                memcpy(w0 + 1001, big + 3, 4099);
                CHECK(getSame(c, k[0], w0, 1001 + 4099, p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM));
                CHECK(getSame(c, k[2], big, 5 * MiB - 1, p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM));
                /* And back into device memory with a failing copy: the get fails, then works. */
                struct iovec o[1] = {{dev2, 5 * MiB}};
                mc_kvv outs[1] = {{k[2], strlen(k[2]), o, 1}};
                dv.fail("memcpy", 0, -1);
                op = mc_batch_get_async(c, 1, outs);
                CHECK(op != NULL);
                if (op) {
                    CHECK_EQ(mc_op_wait(op, -1), 0);
                    CHECK(mc_op_results(op)[0] < 0);
                    mc_op_free(op);
                }
                dv.fail("memcpy", 0, 0);
                op = mc_batch_get_async(c, 1, outs);
                CHECK(op != NULL);
                if (op) {
                    CHECK_EQ(mc_op_wait(op, -1), 1);
                    CHECK_EQ(mc_op_results(op)[0], (long long)(5 * MiB - 1));
                    mc_op_free(op);
                }
                CHECK(dvSame("async get after a failure", dev2, 0, 5 * MiB - 1, big, 5 * MiB - 1, 0));
                free(w0);
                free(big);
            }
            CHECK(dvWrite(dev, 0, v, DV_N, 0)); /* what the tests below expect there */
        }
        TEST("device: no pinned memory for the tcp stage: MC_ERR_NOMEM, and the next call works") {
            mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP); /* no stage yet */
            CHECK(c != NULL);
            if (c) {
                dv.fail("host_alloc", 0, -1);
                CHECK_EQ(mc_put(c, "dv:nomem", 8, dev, MiB, NULL), MC_ERR_NOMEM);
                CHECK(strstr(lastErr(c), "pinned") != NULL);
                dv.fail("host_alloc", 0, 0);
                CHECK_EQ(mc_put(c, "dv:nomem", 8, dev, MiB, NULL), MC_OK);
                CHECK(getSame(c, "dv:nomem", v, MiB, MC_TRANSPORT_TCP));
                mc_close(c);
            }
        }
        TEST("device: a device range past its allocation is refused by the runtime, nothing written") {
            for (int p = 0; p < 2; p++) {
                mc_client *c = p ? ctcp : cshm;
                CHECK(mc_put(c, "dv:past", 7, dev + DV_DEV - 100, 4096, NULL) < 0);
                CHECK_EQ(get(c, "dv:past", hostbuf, MiB), MC_ERR_NOT_FOUND);
            }
        }
        TEST("device: unregistered device memory: put_from/get_into refuse it, put/get take it") {
            CHECK(dvWrite(unreg, 0, v, MiB, 0));
            CHECK_EQ(mc_put_from(cshm, "dv:unreg", 8, unreg, MiB, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put(cshm, "dv:unreg", 8, unreg, MiB, NULL), MC_OK);
            CHECK(dvWrite(unreg, 0, NULL, MiB, 0));
            CHECK_EQ(mc_get_into(ctcp, "dv:unreg", 8, unreg, MiB), MC_ERR_INVALID);
            CHECK_EQ(mc_get(ctcp, "dv:unreg", 8, unreg, MiB), (long long)MiB);
            CHECK(dvSame("unregistered", unreg, 0, MiB, v, MiB, 0));
        }
    }
    mcClose(&cshm);
    mcClose(&ctcp);
    if (dv.count) {
        TEST("device: the mapping is unlocked when it goes (the last handle closed)") {
            CHECK_EQ(dvCount("host_registered"), regs0);
        }
        TEST("device: a refused page-lock: shm copies still go straight to the mapping, unpinned") {
            int rc = tsStart(&s2, NULL);
            CHECK_EQ(rc, 0);
            mc_client *c = rc == 0 ? mcOpen(s2.unix_uri, NULL, MC_TRANSPORT_SHM) : NULL;
            CHECK(c != NULL);
            if (c) {
                dvCounts cnt;
                dvDelta(&cnt);
                unsigned long long regs = dvCount("host_register");
                dv.fail("host_register", 0, -1);
                CHECK(dvWrite(dev, 0, v, MiB, 0));
                dvDelta(&cnt);
                CHECK_EQ(mc_put(c, "dv:unpinned", 11, dev, MiB, NULL), MC_OK);
                CHECK_EQ(mc_get(c, "dv:unpinned", 11, dev2, MiB), (long long)MiB);
                dvCounts d = dvDelta(&cnt);
                dv.fail("host_register", 0, 0);
                CHECK_EQ(d.bytes, 2 * MiB);
                CHECK_EQ(d.pageable, 2 * MiB);
                CHECK_EQ(dvCount("host_register"), regs);
                CHECK(dvSame("unpinned", dev2, 0, MiB, v, MiB, 0));
                CHECK_EQ(mc_last_transport(c), MC_TRANSPORT_SHM);
                mc_close(c);
            }
            if (rc == 0) tsStop(&s2);
            tsCleanup(&s2); /* its directory too */
        }
    } else {
        printf("SKIP: device: counters and failure injection (MC_CUDA_LIBRARY is not the fake runtime)\n");
    }
    (void)err;
    if (dev) dv.free_(dev);
    if (dev2) dv.free_(dev2);
    if (unreg) dv.free_(unreg);
    free(v);
    free(hostbuf);
    tsGroupFinish(&s, group, failed0);
}
