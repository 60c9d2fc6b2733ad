/* gpu-bench.c -- device-memory put/get through libmooncake beside cudaMemcpy
 * to pinned host memory, measured in the same run (utils/gpu-check.sh runs it).
 *
 *   gpu-bench UNIX_URI TCP_URI [MiB ...]      (default sizes: 1 16 64)
 *
 * Per size: mc_put from a device buffer and mc_get into one, over shm
 * (UNIX_URI, MC_TRANSPORT_SHM) and over tcp (TCP_URI, MC_TRANSPORT_TCP);
 * the same from a host buffer over tcp (the rate device-over-tcp is held
 * to); and cudaMemcpy between the same device buffer and pinned host memory
 * (cudaHostAlloc): device -> pinned beside put, pinned -> device beside get.
 * Each figure is the best of 5 timed passes of at least 256 MiB (or 8
 * transfers), after a warm-up pass; every get is checked byte-exact once.
 * The CUDA runtime is the one libmooncake loads (MC_CUDA_LIBRARY, else
 * libcudart.so.13/.12/.11.0), looked up here with dlsym for cudaMalloc and
 * the reference copies. Built by `make` as build/tests/gpu-bench.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mooncake.h"

#define MiB ((size_t)1 << 20)

static struct {
    int (*malloc_)(void **, size_t);
    int (*hostAlloc)(void **, size_t, unsigned);
    int (*memcpy_)(void *, const void *, size_t, int);
} rt;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int rtOpen(void) {
    const char *want = getenv("MC_CUDA_LIBRARY");
    static const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                  "/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12"};
    void *h = want && want[0] ? dlopen(want, RTLD_NOW) : NULL;
    for (size_t i = 0; h == NULL && !(want && want[0]) && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW);
    if (h == NULL) return 0;
    *(void **)&rt.malloc_ = dlsym(h, "cudaMalloc");
    *(void **)&rt.hostAlloc = dlsym(h, "cudaHostAlloc");
    *(void **)&rt.memcpy_ = dlsym(h, "cudaMemcpy");
    return rt.malloc_ && rt.hostAlloc && rt.memcpy_;
}

/* What one timed transfer does: 0 on success. */
typedef int (*xferFn)(void *arg, size_t len);

typedef struct {
    mc_client *c;
    void *buf;
    const char *key;
    int put;
} mcArg;

static int mcXfer(void *arg, size_t len) {
    mcArg *a = arg;
    static const mc_put_opts replace = {.replace = 1};
    if (a->put) return mc_put(a->c, a->key, strlen(a->key), a->buf, len, &replace);
    return mc_get(a->c, a->key, strlen(a->key), a->buf, len) == (long long)len ? 0 : -1;
}

typedef struct {
    void *dst, *src;
} cpArg;

static int cpXfer(void *arg, size_t len) {
    cpArg *a = arg;
    return rt.memcpy_(a->dst, a->src, len, 4);
}

/* GB/s: the best of 5 passes, each of max(8, 256 MiB / len) transfers; -1
 * if a transfer failed. */
static double rate(xferFn f, void *arg, size_t len) {
    int per = (int)(256 * MiB / len);
    if (per < 8) per = 8;
    if (f(arg, len) != 0) return -1; /* warm-up: mappings, registration, connections */
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = now();
        for (int i = 0; i < per; i++)
            if (f(arg, len) != 0) return -1;
        double gbs = (double)len * per / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

static mc_client *connectAs(const char *uri, int transport) {
    char err[256] = "";
    mc_client *c = mc_connect(uri, NULL, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "gpu-bench: mc_connect(%s): %s\n", uri, err);
        return NULL;
    }
    mc_set_transport(c, transport);
    return c;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: gpu-bench UNIX_URI TCP_URI [MiB ...]\n");
        return 2;
    }
    char why[512] = "";
    if (!mc_cuda_available(why, sizeof(why)) || !rtOpen()) {
        fprintf(stderr, "gpu-bench: no CUDA: %s\n", why[0] ? why : "the runtime has no cudaMalloc/cudaHostAlloc");
        return 1;
    }
    mc_client *shm = connectAs(argv[1], MC_TRANSPORT_SHM), *tcp = connectAs(argv[2], MC_TRANSPORT_TCP);
    if (shm == NULL || tcp == NULL) return 1;
    static const size_t dflt[] = {1, 16, 64};
    size_t nsizes = argc > 3 ? (size_t)(argc - 3) : 3;
    int rc = 0;
    printf("%-8s %-44s %9s %9s\n", "size", "path", "put GB/s", "get GB/s");
    for (size_t s = 0; s < nsizes; s++) {
        size_t len = (argc > 3 ? (size_t)atol(argv[3 + s]) : dflt[s]) * MiB;
        void *dev = NULL, *pin = NULL;
        char *host = malloc(len), *check = malloc(len);
        if (len == 0 || host == NULL || check == NULL || rt.malloc_(&dev, len) != 0 ||
            rt.hostAlloc(&pin, len, 1) != 0) {
            fprintf(stderr, "gpu-bench: no memory for %zu MiB\n", len / MiB);
            return 1;
        }
        for (size_t i = 0; i < len; i++) host[i] = (char)(i * 2654435761u >> 13);
        rt.memcpy_(dev, host, len, 4);
        char key[64], label[32];
        snprintf(key, sizeof(key), "gpu-bench:%zu", len);
        snprintf(label, sizeof(label), "%zu MiB", len / MiB);
        struct {
            const char *name;
            mc_client *c;
            void *buf;
        } rows[3] = {{"libmooncake, device buffer, shm", shm, dev},
                     {"libmooncake, device buffer, tcp", tcp, dev},
                     {"libmooncake, host buffer, tcp", tcp, host}};
        double pinned[2];
        cpArg d2p = {pin, dev}, p2d = {dev, pin};
        pinned[0] = rate(cpXfer, &d2p, len);
        pinned[1] = rate(cpXfer, &p2d, len);
        double shmr[2] = {0, 0};
        for (int r = 0; r < 3; r++) {
            mcArg put = {rows[r].c, rows[r].buf, key, 1}, get = {rows[r].c, rows[r].buf, key, 0};
            double p = rate(mcXfer, &put, len), g = rate(mcXfer, &get, len);
            /* byte-exact: the last get */
            int same = 0;
            if (rows[r].buf == dev) {
                rt.memcpy_(check, dev, len, 4);
                same = memcmp(check, host, len) == 0;
            } else {
                same = memcmp(host, rows[r].buf, len) == 0;
            }
            if (p < 0 || g < 0 || !same) {
                fprintf(stderr, "gpu-bench: %s %s: %s\n", label, rows[r].name,
                        !same ? "bytes differ after the get" : mc_last_error(rows[r].c));
                rc = 1;
            }
            if (r == 0) {
                shmr[0] = p;
                shmr[1] = g;
            }
            printf("%-8s %-44s %9.1f %9.1f\n", label, rows[r].name, p, g);
        }
        printf("%-8s %-44s %9.1f %9.1f\n", label, "cudaMemcpy device <-> pinned (same buffer)", pinned[0], pinned[1]);
        printf("%-8s %-44s %9.2f %9.2f\n", label, "ratio: device shm / cudaMemcpy pinned", shmr[0] / pinned[0],
               shmr[1] / pinned[1]);
        free(host);
        free(check);
        /* dev and pin are left to the process's end: this is a benchmark */
    }
    mc_close(shm);
    mc_close(tcp);
    return rc;
}
