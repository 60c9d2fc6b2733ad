/* test_mooncake_device.c -- device memory through libmooncake, against a
 * fake CUDA device.
 *
 *  - device: in test_mooncake_fakecuda only: these files built against
 *    libmooncake with a fake CUDA device (mc_cuda.c, MC_FAKE_CUDA) whose
 *    memory the CPU cannot touch, so a path that skips staging crashes or
 *    fails: mc_get_into and ranged reads into registered device memory over
 *    shm and tcp, beside host ranges, one copy to the device per range,
 *    nothing written outside the ranges. In test_mooncake (the real CUDA
 *    glue) the group only says SKIP.
 *
 * The one file that looks at MC_FAKE_CUDA (with test_mooncake.c's main).
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"
#ifdef MC_FAKE_CUDA
#include "mc_cuda.h"
#endif

/* ==== device: device memory through libmooncake, against a fake CUDA device ======================== */

#ifdef MC_FAKE_CUDA
/* Built as test_mooncake_fakecuda: the library's mc_cuda.c is the fake
 * device (MC_FAKE_CUDA), whose memory the CPU cannot touch: a path that
 * memcpys or recvs into it without staging crashes or fails here. The test
 * reads and writes that memory only through mcCudaCopy, as a program would
 * with cudaMemcpy. */
#define DV_N (3 * MiB + 5)
#define DV_DEV (8 * MiB)

static unsigned long long dvCopies(void) {
    unsigned long long n = 0;
    mcCudaFakeStats(&n, NULL);
    return n;
}

/* dev[at .. at+len) is want[0..len). */
static int dvSame(const char *what, const char *dev, size_t at, long long res, const char *want, size_t len) {
    char *tmp = xmalloc(len ? len : 1);
    char err[256] = "";
    int rc = len ? mcCudaCopy(tmp, dev + at, len, err, sizeof(err)) : MC_OK;
    if (rc != MC_OK) fprintf(stderr, "  %s: copy from the device: %s\n", what, err);
    int ok = rc == MC_OK && sameBytes(what, tmp, res, want, len);
    free(tmp);
    return ok;
}

void testDevice(void) {
    const char *group = "device (fake CUDA)";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char *v = xmalloc(DV_N), *fill = xmalloc(DV_DEV), *hostbuf = xmalloc(MiB);
    fillPattern(v, DV_N, seedOf("dv:obj", DV_N));
    memset(fill, 0xEE, DV_DEV);
    char *dev = mcCudaFakeMalloc(DV_DEV), *dev2 = mcCudaFakeMalloc(MiB);
    char err[256];

    TEST("device: fake device memory registers as MC_MEM_CUDA, host memory does not; the object is put") {
        CHECK(cshm && ctcp && dev && dev2);
        CHECK(mcCudaIsDevicePtr(dev) && mcCudaIsDevicePtr(dev + DV_DEV - 1) && !mcCudaIsDevicePtr(v));
        for (int p = 0; p < 2 && cshm && ctcp && dev; p++) {
            mc_client *c = p ? ctcp : cshm;
            CHECK_EQ(mc_register(c, dev, DV_DEV, MC_MEM_CUDA), MC_OK);
            CHECK_EQ(mc_register(c, hostbuf, MiB, MC_MEM_CUDA), MC_ERR_INVALID);
            CHECK_EQ(mc_register(c, hostbuf, MiB, MC_MEM_HOST), MC_OK);
        }
        if (ctcp) CHECK_EQ(put(ctcp, "dv:obj", v, DV_N, NULL), MC_OK);
    }
    for (int p = 0; p < 2; p++) {
        mc_client *c = p ? ctcp : cshm;
        int t = p ? MC_TRANSPORT_TCP : MC_TRANSPORT_SHM;
        char name[200];
        snprintf(name, sizeof(name), "device: mc_get_into device memory over %s is staged and byte-exact", transportName(t));
        TEST(name) {
            if (!c || !dev) {
                CHECK(c && dev);
                continue;
            }
            CHECK_EQ(mcCudaCopy(dev, fill, DV_DEV, err, sizeof(err)), MC_OK);
            unsigned long long c0 = dvCopies();
            long long got = mc_get_into(c, "dv:obj", 6, dev, DV_DEV);
            CHECK_EQ(got, (long long)DV_N);
            CHECK_EQ(dvCopies() - c0, 1); /* one copy out of the staging buffer */
            CHECK_EQ(mc_last_transport(c), t);
            CHECK(dvSame("mc_get_into", dev, 0, got, v, DV_N));
            CHECK(dvSame("after it", dev, DV_N, 64, fill, 64));
        }
        snprintf(name, sizeof(name), "device: ranged reads into device memory over %s: staged, byte-exact, beside host ranges", transportName(t));
        TEST(name) {
            if (!c || !dev) {
                CHECK(c && dev);
                continue;
            }
            CHECK_EQ(mcCudaCopy(dev, fill, DV_DEV, err, sizeof(err)), MC_OK);
            memset(hostbuf, 0, MiB);
            mc_range g[7] = {{dev, 0, 1000},
                             {dev + 4096, DV_N - 777, 777},           /* the object's end */
                             {dev + MiB, MiB, 2 * MiB},               /* a large one */
                             {hostbuf, 5, 100},                       /* host memory in the same item */
                             {dev + 7 * MiB, 123, 0},                 /* len 0 */
                             {dev + 7 * MiB, DV_N - 10, 11},          /* past the end: alone */
                             {dev2, 0, 10}};                          /* unregistered device memory: alone */
            mc_range g2[1] = {{dev + 6 * MiB, 17, 64 * KiB}};         /* the same key, another item */
            mc_kranges items[3] = {{"dv:obj", 6, g, 7}, {"dv:missing", 10, g + 4, 1}, {"dv:obj", 6, g2, 1}};
            long long res[9], want[9] = {1000, 777, 2 * MiB, 100, 0, MC_ERR_INVALID, MC_ERR_INVALID, MC_ERR_NOT_FOUND, 64 * KiB};
            unsigned long long c0 = dvCopies();
            CHECK_EQ(rgBatch(c, 3, items, res), 6);
            CHECK(rgResults(name, res, want, 9));
            CHECK_EQ(dvCopies() - c0, 4); /* one per nonempty device range read */
            CHECK_EQ(mc_last_transport(c), t);
            CHECK(dvSame("range 0", dev, 0, res[0], v, 1000));
            CHECK(dvSame("range 1", dev, 4096, res[1], v + DV_N - 777, 777));
            CHECK(dvSame("range 2", dev, MiB, res[2], v + MiB, 2 * MiB));
            CHECK(sameBytes("host range", hostbuf, res[3], v + 5, 100));
            CHECK(dvSame("second item", dev, 6 * MiB, res[8], v + 17, 64 * KiB));
            /* Nothing written past a range, nor where refused ranges point. */
            CHECK(dvSame("after range 0", dev, 1000, 64, fill, 64));
            CHECK(dvSame("after range 1", dev, 4096 + 777, 64, fill, 64));
            CHECK(dvSame("after range 2", dev, 3 * MiB, 64, fill, 64));
            CHECK(dvSame("refused range", dev, 7 * MiB, 64, fill, 64));
        }
    }
    if (dev) mcCudaFakeFree(dev);
    if (dev2) mcCudaFakeFree(dev2);
    mcClose(&cshm);
    mcClose(&ctcp);
    free(v);
    free(fill);
    free(hostbuf);
    tsGroupFinish(&s, group, failed0);
}
#else
void testDevice(void) {
    printf("SKIP: device: device memory is tested by test_mooncake_fakecuda (this build has the real CUDA glue)\n");
}
#endif
