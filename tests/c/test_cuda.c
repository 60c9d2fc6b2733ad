/* test_cuda.c -- unit tests for the CUDA glue of libmooncake (mc_cuda.c).
 *
 * mc_cuda.c loads the CUDA runtime with dlopen at first use (MC_CUDA_LIBRARY
 * names it), so this program is built everywhere and runs in parts:
 *
 *  - as started: the no-device half on a machine without a GPU (a clear
 *    reason, mcCudaIsDevicePtr() answering 0 at the cost of a branch, copies
 *    refused with MC_ERR_UNSUPPORTED), or the device half where
 *    mcCudaAvailable() says 1 (a GPU, or MC_CUDA_LIBRARY naming a runtime).
 *  - then, unless MC_CUDA_LIBRARY was given, itself again (fresh processes:
 *    the verdict is cached per process) against the fake runtime,
 *    build/tests/libfakecuda.so beside this program: the device half; the
 *    lazy loading (nothing loaded while only host memory is seen, loaded
 *    once the process has the runtime); a runtime that cannot be loaded and
 *    one that reports no device, each with its reason.
 *
 * Device memory is made with the runtime's cudaMalloc, looked up with dlsym
 * in the library MC_CUDA_LIBRARY names (or libcudart), not through the code
 * under test, so a bug in mc_cuda.c cannot hide itself.
 *
 * ASan and CUDA: the driver reserves address space at fixed addresses that
 * fall in ASan's protected shadow gap, so with a GPU present CUDA calls fail
 * (typically cudaErrorMemoryAllocation) in a sanitizer build. The build of
 * this program therefore defaults to protect_shadow_gap=0 (see
 * __asan_default_options below; ASAN_OPTIONS in the environment still wins).
 */
#include "mc_cuda.h"
#include "mooncake.h"
#include "testhelp.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#ifdef TEST_ASAN
/* Read by the ASan runtime before main(); see the top of the file. The
 * driver's own allocations live as long as the process, so they are not
 * leaks worth reporting either. The runtime finds these hooks through the
 * dynamic symbol table, and this program is built with the library's
 * -fvisibility=hidden: without "default" they would silently do nothing. */
#define ASAN_HOOK __attribute__((visibility("default"), used))
ASAN_HOOK const char *__asan_default_options(void);
ASAN_HOOK const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
ASAN_HOOK const char *__lsan_default_suppressions(void);
ASAN_HOOK const char *__lsan_default_suppressions(void) {
    return "leak:libcuda.so\nleak:libcudart.so\n";
}
#endif

#define MiB ((size_t)1 << 20)

static double nowSec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The first calls race on purpose: the cached device check must come out
 * the same in every thread however they interleave. */
#define RACERS 8
static int racerAnswer[RACERS];

static void *racer(void *arg) {
    int i = (int)(intptr_t)arg;
    int x = 0;
    if (i % 2) (void)mcCudaIsDevicePtr(&x);
    racerAnswer[i] = mcCudaAvailable(NULL, 0);
    return NULL;
}

/* The runtime the tests allocate with: the library MC_CUDA_LIBRARY names,
 * else the system's libcudart (the one mc_cuda.c finds too). */
static struct {
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*mallocManaged)(void **, size_t, unsigned);
    int (*getLastError)(void);
    const char *(*errorString)(int);
    unsigned long long (*count)(const char *); /* the fake's counters, else NULL */
} rt;

static void *rtOpen(void) {
    const char *want = getenv("MC_CUDA_LIBRARY");
    static const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                  "/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12"};
    void *h = want && want[0] ? dlopen(want, RTLD_NOW) : NULL;
    for (size_t i = 0; h == NULL && !(want && want[0]) && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW);
    if (h == NULL) return NULL;
    *(void **)&rt.malloc_ = dlsym(h, "cudaMalloc");
    *(void **)&rt.free_ = dlsym(h, "cudaFree");
    *(void **)&rt.mallocManaged = dlsym(h, "cudaMallocManaged");
    *(void **)&rt.getLastError = dlsym(h, "cudaGetLastError");
    *(void **)&rt.errorString = dlsym(h, "cudaGetErrorString");
    *(void **)&rt.count = dlsym(h, "fakecudaCount");
    return rt.malloc_ && rt.free_ && rt.getLastError ? h : NULL;
}

/* Byte pattern that differs at every offset and between sizes, so a copy of
 * the wrong length or from the wrong place cannot match by accident. */
static void fillPattern(unsigned char *p, size_t len, unsigned seed) {
    uint32_t x = 2463534242u ^ seed;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

static void deviceTests(void) {
    char err[256];
    TEST("cuda: the runtime the tests allocate with is there") CHECK(rtOpen() != NULL);
    if (rt.malloc_ == NULL) return;

    TEST("cuda: cudaMalloc memory is a device pointer") {
        void *d = NULL;
        CHECK(rt.malloc_(&d, 4096) == 0);
        if (d) {
            CHECK_EQ(mcCudaIsDevicePtr(d), 1);
            CHECK_EQ(mcCudaIsDevicePtr((char *)d + 100), 1);
            rt.free_(d);
        }
    }

    TEST("cuda: managed memory is a device pointer") {
        void *m = NULL;
        int e = rt.mallocManaged ? rt.mallocManaged(&m, 4096, 1 /* cudaMemAttachGlobal */) : -1;
        if (e != 0) {
            if (rt.mallocManaged) (void)rt.getLastError();
            printf("SKIP: managed memory: %s\n", rt.mallocManaged ? rt.errorString(e) : "not in this runtime");
        } else if (m) {
            CHECK_EQ(mcCudaIsDevicePtr(m), 1);
            rt.free_(m);
        }
    }

    TEST("cuda: host -> device -> host round trip (1 B, 4 KiB, 16 MiB)") {
        static const size_t sizes[] = {1, 4096, 16 * MiB};
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            size_t len = sizes[s];
            unsigned char *src = malloc(len), *dst = malloc(len);
            void *d = NULL, *d2 = NULL;
            CHECK(src && dst);
            CHECK(rt.malloc_(&d, len) == 0);
            CHECK(rt.malloc_(&d2, len) == 0);
            if (src && dst && d && d2) {
                fillPattern(src, len, (unsigned)len);
                memset(dst, 0, len);
                CHECK_EQ(mcCudaCopy(d, src, len, err, sizeof(err)), MC_OK);
                /* Device to device too: cudaMemcpyDefault promises it and a
                 * regression would be silent otherwise. */
                CHECK_EQ(mcCudaCopy(d2, d, len, err, sizeof(err)), MC_OK);
                CHECK_EQ(mcCudaCopy(dst, d2, len, err, sizeof(err)), MC_OK);
                CHECK(memcmp(src, dst, len) == 0);
            }
            if (d) rt.free_(d);
            if (d2) rt.free_(d2);
            free(src);
            free(dst);
        }
    }

    TEST("cuda: copy argument checks; a copy past an allocation is refused with the runtime's reason") {
        void *d = NULL;
        char host[128];
        CHECK(rt.malloc_(&d, 64) == 0);
        CHECK_EQ(mcCudaCopy(d, NULL, 0, err, sizeof(err)), MC_OK);
        err[0] = '\0';
        CHECK_EQ(mcCudaCopy(d, NULL, 64, err, sizeof(err)), MC_ERR_INVALID);
        CHECK(err[0] != '\0');
        err[0] = '\0';
        if (rt.count) { /* a real runtime may allow the slack of its allocation granularity */
            CHECK_EQ(mcCudaCopy(host, d, sizeof(host), err, sizeof(err)), MC_ERR_IO);
            CHECK(strncmp(err, "cudaMemcpy: ", 12) == 0);
            CHECK_EQ(rt.getLastError(), 0); /* consumed */
        }
        if (d) rt.free_(d);
    }

    TEST("cuda: pinned host memory") {
        size_t len = 4 * MiB;
        unsigned char *pin = mcCudaHostAlloc(len);
        unsigned char *back = malloc(len);
        void *d = NULL;
        CHECK(pin != NULL);
        CHECK(rt.malloc_(&d, len) == 0);
        if (pin && back && d) {
            /* Pinned memory is host memory: the library must not stage it. */
            CHECK_EQ(mcCudaIsDevicePtr(pin), 0);
            fillPattern(pin, len, 7);
            CHECK_EQ(mcCudaCopy(d, pin, len, err, sizeof(err)), MC_OK);
            memset(back, 0, len);
            CHECK_EQ(mcCudaCopy(back, d, len, err, sizeof(err)), MC_OK);
            CHECK(memcmp(pin, back, len) == 0);
        }
        if (d) rt.free_(d);
        mcCudaHostFree(pin);
        free(back);
    }

    TEST("cuda: host registration: registered memory stays host memory; twice is refused; unregistered again") {
        size_t len = 2 * MiB;
        char *h = malloc(len);
        CHECK(h != NULL);
        if (h) {
            CHECK_EQ(mcCudaHostRegister(h, len, err, sizeof(err)), MC_OK);
            CHECK_EQ(mcCudaIsDevicePtr(h), 0);
            err[0] = '\0';
            CHECK_EQ(mcCudaHostRegister(h, len, err, sizeof(err)), MC_ERR_IO);
            CHECK(strncmp(err, "cudaHostRegister: ", 18) == 0);
            CHECK_EQ(mcCudaHostRegister(h, 0, err, sizeof(err)), MC_ERR_INVALID);
            CHECK_EQ(rt.getLastError(), 0);
            mcCudaHostUnregister(h);
            CHECK_EQ(mcCudaHostRegister(h, len, err, sizeof(err)), MC_OK);
            mcCudaHostUnregister(h);
            mcCudaHostUnregister(h); /* not registered: consumed, not left behind */
            CHECK_EQ(rt.getLastError(), 0);
            free(h);
        }
    }

    TEST("cuda: no sticky error left behind") {
        /* Probes of host memory and refused copies must leave the
         * application's next CUDA call a clean slate. */
        int x = 0;
        char *h = malloc(16);
        (void)mcCudaIsDevicePtr(&x);
        (void)mcCudaIsDevicePtr(h);
        (void)mcCudaIsDevicePtr((void *)(uintptr_t)0x10);
        CHECK(rt.getLastError() == 0);
        free(h);
    }
}

/* ---- the runs against the fake runtime (children) ------------------------------ */

static char fakePath[PATH_MAX + 32];

/* The fake beside this program; "" if there is none. */
static const char *fakeLibrary(void) {
    char self[PATH_MAX - 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return "";
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(fakePath, sizeof(fakePath), "%s/libfakecuda.so", self);
    return access(fakePath, R_OK) == 0 ? fakePath : "";
}

/* Runs this program again as `--child mode arg` with MC_CUDA_LIBRARY=lib
 * (and FAKECUDA_DEVICES when devices >= 0); its exit status. */
static int runChild(const char *mode, const char *arg, const char *lib, int devices) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MC_CUDA_LIBRARY", lib, 1);
        if (devices >= 0) {
            char d[16];
            snprintf(d, sizeof(d), "%d", devices);
            setenv("FAKECUDA_DEVICES", d, 1);
        }
        execl("/proc/self/exe", "test_cuda", "--child", mode, arg, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* --child lazy: nothing is loaded while only host memory is seen; the
 * runtime is loaded once the process has it. */
static int childLazy(void) {
    const char *lib = getenv("MC_CUDA_LIBRARY");
    TEST("cuda (fake): host-only calls load no runtime, and stay cheap") {
        int x = 0, hits = 0;
        char *heap = malloc(4096);
        const int n = 200000;
        double t0 = nowSec();
        for (int i = 0; i < n; i++) hits += mcCudaIsDevicePtr(i & 1 ? (void *)&x : (void *)heap);
        double per = (nowSec() - t0) / n;
        CHECK_EQ(hits, 0);
        CHECK(dlopen(lib, RTLD_LAZY | RTLD_NOLOAD) == NULL); /* still not loaded */
        CHECK(per < 2e-6); /* ~100x the real cost: loose for sanitizers and busy CI */
        free(heap);
    }
    TEST("cuda (fake): once the application has the runtime, its device memory is recognised") {
        CHECK(rtOpen() != NULL);
        void *d = NULL;
        if (rt.malloc_) CHECK(rt.malloc_(&d, 4096) == 0);
        CHECK_EQ(mcCudaIsDevicePtr(d), 1);
        CHECK_EQ(mcCudaIsDevicePtr(&d), 0);
        if (d) rt.free_(d);
    }
    return testReport();
}

/* --child reason: mcCudaAvailable says 0 with the reason expected
 * (argv[3]: its prefix). */
static int childReason(const char *prefix) {
    char err[512] = "";
    TEST("cuda (fake): no usable runtime: 0 and a reason") {
        CHECK_EQ(mcCudaAvailable(err, sizeof(err)), 0);
        if (strncmp(err, prefix, strlen(prefix)) != 0) fprintf(stderr, "  reason: %s\n", err);
        CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
        int x = 0;
        CHECK_EQ(mcCudaIsDevicePtr(&x), 0);
        char src[8] = "abc", dst[8] = "xyz";
        CHECK_EQ(mcCudaCopy(dst, src, sizeof(src), err, sizeof(err)), MC_ERR_UNSUPPORTED);
        CHECK(strcmp(dst, "xyz") == 0);
        CHECK(mcCudaHostAlloc(4096) == NULL);
        CHECK_EQ(mcCudaHostRegister(src, sizeof(src), NULL, 0), MC_ERR_UNSUPPORTED);
    }
    printf("  (reason: %s)\n", err);
    return testReport();
}

int main(int argc, char **argv) {
    char err[256];
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "lazy")) return childLazy();
        if (!strcmp(argv[2], "device")) {
            TEST("cuda (fake): the fake runtime is available") CHECK_EQ(mcCudaAvailable(err, sizeof(err)), 1);
            deviceTests();
            return testReport();
        }
        if (argc >= 4 && !strcmp(argv[2], "reason")) return childReason(argv[3]);
        return 2;
    }

    TEST("cuda: the first calls agree across threads") {
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; i++)
            CHECK_EQ(pthread_create(&t[i], NULL, racer, (void *)(intptr_t)i), 0);
        for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
        for (int i = 1; i < RACERS; i++) CHECK_EQ(racerAnswer[i], racerAnswer[0]);
        CHECK_EQ(mcCudaAvailable(NULL, 0), racerAnswer[0]);
    }

    memset(err, 0, sizeof(err));
    int avail = mcCudaAvailable(err, sizeof(err));

    TEST("cuda: availability is 1, or 0 with a reason") {
        CHECK(avail == 0 || avail == 1);
        if (!avail) {
            CHECK(strlen(err) > 0);
            CHECK(strncmp(err, "no CUDA device", 14) == 0 || strncmp(err, "no CUDA runtime", 15) == 0);
        }
        /* A short buffer still gets a terminated (truncated) string. */
        char small[8];
        memset(small, 'x', sizeof(small));
        CHECK_EQ(mcCudaAvailable(small, sizeof(small)), avail);
        if (!avail) CHECK(memchr(small, '\0', sizeof(small)) != NULL);
        char one = 'x';
        CHECK_EQ(mcCudaAvailable(&one, 0), avail);
        CHECK_EQ(one, 'x');
    }

    TEST("cuda: host, stack, static and NULL pointers are not device memory") {
        static char staticBuf[64];
        int stackVar = 0;
        char *heap = malloc(4096);
        CHECK(heap != NULL);
        CHECK_EQ(mcCudaIsDevicePtr(heap), 0);
        CHECK_EQ(mcCudaIsDevicePtr(heap + 4095), 0);
        CHECK_EQ(mcCudaIsDevicePtr(&stackVar), 0);
        CHECK_EQ(mcCudaIsDevicePtr(staticBuf), 0);
        CHECK_EQ(mcCudaIsDevicePtr(NULL), 0);
        free(heap);
    }

    TEST("cuda: HostFree(NULL) is a no-op") {
        mcCudaHostFree(NULL);
    }

    if (!avail) {
        TEST("cuda: without a device copies are refused with a reason") {
            char src[32] = "abc", dst[32] = "xyz";
            char why[256] = "";
            int rc = mcCudaCopy(dst, src, sizeof(src), why, sizeof(why));
            CHECK(rc == MC_ERR_UNSUPPORTED || rc == MC_ERR_IO);
            CHECK(strlen(why) > 0);
            CHECK(strcmp(dst, "xyz") == 0); /* nothing was copied */
            /* No err buffer is allowed too. */
            rc = mcCudaCopy(dst, src, sizeof(src), NULL, 0);
            CHECK(rc == MC_ERR_UNSUPPORTED || rc == MC_ERR_IO);
        }

        TEST("cuda: without a device pinned allocation is NULL") {
            void *p = mcCudaHostAlloc(4096);
            CHECK(p == NULL);
            mcCudaHostFree(p);
        }

        TEST("cuda: without a device the pointer check is cheap") {
            /* mc_xfer.c asks on every put and get; the answer must come
             * from the cache, not from a runtime call. 1 us per call is
             * ~100x the real cost, loose enough for sanitizers and busy CI. */
            int x = 0, hits = 0;
            const int n = 200000;
            double t0 = nowSec();
            for (int i = 0; i < n; i++) hits += mcCudaIsDevicePtr((char *)&x + (i & 1));
            double per = (nowSec() - t0) / n;
            CHECK_EQ(hits, 0);
            CHECK(per < 1e-6);
        }

        /* No "no sticky error" check here: a failed runtime initialisation
         * is reported by every later CUDA call, cudaGetLastError() included,
         * whatever mc_cuda.c does; the application would see it anyway. */
        printf("SKIP: GPU tests: %s\n", err);
    } else {
        deviceTests();
    }

    /* The same glue against the fake runtime, in fresh processes. */
    const char *given = getenv("MC_CUDA_LIBRARY");
    const char *fake = fakeLibrary();
    if (given && given[0]) {
        printf("SKIP: fake-runtime runs: MC_CUDA_LIBRARY is set (%s)\n", given);
    } else if (!fake[0]) {
        TEST("cuda: libfakecuda.so is built beside test_cuda") CHECK(fake[0]);
    } else {
        TEST("cuda (fake): device tests against the fake runtime pass") CHECK_EQ(runChild("device", "", fake, -1), 0);
        TEST("cuda (fake): the runtime is loaded lazily") CHECK_EQ(runChild("lazy", "", fake, -1), 0);
        TEST("cuda (fake): a runtime reporting no device: \"no CUDA device: ...\"")
            CHECK_EQ(runChild("reason", "no CUDA device: ", fake, 0), 0);
        TEST("cuda (fake): a library that cannot be loaded: \"no CUDA runtime: MC_CUDA_LIBRARY=...\"")
            CHECK_EQ(runChild("reason", "no CUDA runtime: MC_CUDA_LIBRARY=/nonexistent/", "/nonexistent/libcudart.so.99", -1), 0);
    }
    return testReport();
}
