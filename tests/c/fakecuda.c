/* fakecuda.c -- build/tests/libfakecuda.so: a fake CUDA runtime for tests.
 *
 * libmooncake loads the CUDA runtime with dlopen (mc_cuda.c), so a test
 * sets MC_CUDA_LIBRARY=build/tests/libfakecuda.so and every device path of
 * the library -- shm copies into page-locked mappings, staging for tcp,
 * batches, async, the Python binding -- runs on a machine without a GPU,
 * end to end against a real server. The entry points have the runtime
 * API's C signatures (cudaError_t as int), so the same test code runs
 * against a real libcudart by naming it instead.
 *
 * Device memory the CPU cannot touch. One address range is reserved
 * PROT_NONE at first use (FAKECUDA_MEM_MB, default 1024 MiB); cudaMalloc
 * hands out pieces of it. Its bytes live in a memfd mapped a second time,
 * elsewhere, which only this file reads and writes: a library path that
 * memcpys to or from a "device" pointer faults, and a send or recv on one
 * fails with EFAULT, as with a real GPU. A free punches the piece's pages
 * out of the memfd. Nothing is ever made accessible in the reserved range,
 * so copies on several threads need no mprotect dance and no lock.
 *
 * Pointer attributes: device for a live allocation (type 2), host for
 * memory from cudaHostAlloc or inside a cudaHostRegister'd range (type 1),
 * unregistered (type 0, success) for anything else, as CUDA 11+ answers.
 *
 * Copies: cudaMemcpy / cudaMemcpyAsync (synchronous here) with any kind;
 * cudaMemcpyDefault infers the direction, an explicit kind must match the
 * pointers. A device side must lie inside one live allocation. Every copy
 * is counted, its bytes by the host side's kind (pinned: cudaHostAlloc or
 * registered; pageable: anything else; device to device).
 *
 * Test control, exported for dlsym (C) or ctypes (Python):
 *   unsigned long long fakecudaCount(const char *name)  -- counters below
 *   void fakecudaReset(void)                           -- counters to 0
 *   void fakecudaFail(const char *call, long long skip, long long count)
 *      the calls named ("memcpy", "malloc", "host_register", "host_alloc")
 *      succeed `skip` more times, then fail `count` times (-1: until told
 *      otherwise; count 0 clears).
 * Counters: memcpy (calls, async ones too), memcpy_async, memcpy_bytes, memcpy_pinned_bytes,
 * memcpy_pageable_bytes, memcpy_d2d_bytes, malloc, free, device_live,
 * host_alloc, host_free, host_register, host_unregister, host_registered
 * (ranges registered now), host_register_bytes (bytes ever registered), attributes.
 * FAKECUDA_DEVICES=0 in the environment: cudaGetDeviceCount answers
 * cudaErrorNoDevice, as on a machine with a driver and no GPU.
 * FAKECUDA_ASYNC=1: cudaMemcpyAsync on a stream moves its bytes only at
 * cudaStreamSynchronize, so a pipeline that uses a buffer before its copy
 * is synchronised gets wrong bytes (test_mooncake's device group runs a
 * second time so).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorUnknown = 999,
};
enum { kindH2H = 0, kindH2D = 1, kindD2H = 2, kindD2D = 3, kindDefault = 4 };

struct cudaPointerAttributes {
    int type; /* 0 unregistered, 1 host, 2 device, 3 managed */
    int device;
    void *devicePointer;
    void *hostPointer;
};
typedef void *cudaStream_t;

/* ---- state ------------------------------------------------------------------- */

typedef struct {
    uintptr_t addr;
    size_t len;
} span;

/* A sorted-free list of spans: small tables, linear searches (a test fake). */
typedef struct {
    span *v;
    size_t n, cap;
} spans;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t arenaOnce = PTHREAD_ONCE_INIT;
static char *arena;         /* the device range: PROT_NONE, never touched */
static char *backing;       /* its bytes: the memfd mapped elsewhere */
static int backingFd = -1;
static size_t arenaLen;
static spans devAllocs, hostAllocs, hostRegs;
static __thread cudaError_t lastError;

enum { C_MEMCPY, C_ASYNC, C_BYTES, C_PINNED, C_PAGEABLE, C_D2D, C_MALLOC, C_FREE, C_DEVLIVE, C_HALLOC, C_HFREE, C_HREG,
       C_HUNREG, C_HREGLIVE, C_ATTR, C_HREGBYTES, C_N };
static const char *const counterNames[C_N] = {
    "memcpy", "memcpy_async", "memcpy_bytes", "memcpy_pinned_bytes", "memcpy_pageable_bytes", "memcpy_d2d_bytes", "malloc", "free",
    "device_live", "host_alloc", "host_free", "host_register", "host_unregister", "host_registered", "attributes", "host_register_bytes"};
static unsigned long long counters[C_N];

enum { F_MEMCPY, F_MALLOC, F_HREG, F_HALLOC, F_N };
static const char *const failNames[F_N] = {"memcpy", "malloc", "host_register", "host_alloc"};
static long long failSkip[F_N], failCount[F_N];

static void count(int c, unsigned long long by) { __atomic_fetch_add(&counters[c], by, __ATOMIC_RELAXED); }

static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) lastError = e;
    return e;
}

/* Should this call of kind f fail (an injected failure)? Under lock. */
static int injected(int f) {
    if (failCount[f] == 0) return 0;
    if (failSkip[f] > 0) {
        failSkip[f]--;
        return 0;
    }
    if (failCount[f] > 0) failCount[f]--;
    return 1;
}

static void arenaInit(void) {
    const char *mb = getenv("FAKECUDA_MEM_MB");
    size_t len = (size_t)(mb && atol(mb) > 0 ? atol(mb) : 1024) << 20;
    int fd = memfd_create("fakecuda-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) goto fail;
    void *a = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) goto fail;
    void *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED) {
        munmap(a, len);
        goto fail;
    }
    arena = a;
    backing = b;
    backingFd = fd;
    arenaLen = len;
    return;
fail:
    if (fd >= 0) close(fd);
}

static int spansAdd(spans *s, uintptr_t addr, size_t len) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL) return -1;
        s->v = v;
        s->cap = cap;
    }
    size_t i = s->n;
    while (i > 0 && s->v[i - 1].addr > addr) {
        s->v[i] = s->v[i - 1];
        i--;
    }
    s->v[i] = (span){addr, len};
    s->n++;
    return 0;
}

/* Index of the span holding [p, p+len) (len 0: holding p), or -1. */
static long spansFind(const spans *s, uintptr_t p, size_t len) {
    for (size_t i = 0; i < s->n; i++) {
        const span *x = &s->v[i];
        if (p >= x->addr && p - x->addr < (x->len ? x->len : 1) && len <= x->len - (p - x->addr)) return (long)i;
    }
    return -1;
}

/* Index of a span overlapping [p, p+len), or -1. */
static long spansOverlap(const spans *s, uintptr_t p, size_t len) {
    for (size_t i = 0; i < s->n; i++)
        if (p < s->v[i].addr + s->v[i].len && s->v[i].addr < p + len) return (long)i;
    return -1;
}

static void spansDel(spans *s, size_t i) {
    memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
    s->n--;
}

static int inArena(uintptr_t p) { return arena && p >= (uintptr_t)arena && p < (uintptr_t)arena + arenaLen; }

/* ---- control ------------------------------------------------------------------ */

API unsigned long long fakecudaCount(const char *name) {
    for (int i = 0; i < C_N; i++)
        if (name && !strcmp(name, counterNames[i])) return __atomic_load_n(&counters[i], __ATOMIC_RELAXED);
    return (unsigned long long)-1;
}

API void fakecudaReset(void) {
    for (int i = 0; i < C_N; i++)
        if (i != C_DEVLIVE && i != C_HREGLIVE) __atomic_store_n(&counters[i], 0, __ATOMIC_RELAXED);
}

API void fakecudaFail(const char *call, long long skip, long long n) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < F_N; i++)
        if (call && !strcmp(call, failNames[i])) {
            failSkip[i] = skip;
            failCount[i] = n;
        }
    pthread_mutex_unlock(&lock);
}

/* ---- the runtime API ------------------------------------------------------------ */

API cudaError_t cudaGetDeviceCount(int *n) {
    const char *d = getenv("FAKECUDA_DEVICES");
    if (n == NULL) return ret(cudaErrorInvalidValue);
    if (d && atoi(d) <= 0) {
        *n = 0;
        return ret(cudaErrorNoDevice);
    }
    *n = 1;
    return cudaSuccess;
}

API cudaError_t cudaGetDevice(int *d) {
    if (d) *d = 0;
    return d ? cudaSuccess : ret(cudaErrorInvalidValue);
}

API cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : ret(cudaErrorInvalidValue); }

API cudaError_t cudaGetLastError(void) {
    cudaError_t e = lastError;
    lastError = cudaSuccess;
    return e;
}

API cudaError_t cudaPeekAtLastError(void) { return lastError; }

API const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    default: return "unknown error (fakecuda: injected failure)";
    }
}

API cudaError_t cudaMalloc(void **p, size_t len) {
    if (p == NULL) return ret(cudaErrorInvalidValue);
    *p = NULL;
    pthread_once(&arenaOnce, arenaInit);
    if (arena == NULL) return ret(cudaErrorMemoryAllocation);
    if (len == 0) return cudaSuccess;
    size_t want = (len + 255) & ~(size_t)255;
    pthread_mutex_lock(&lock);
    if (injected(F_MALLOC)) {
        pthread_mutex_unlock(&lock);
        return ret(cudaErrorMemoryAllocation);
    }
    /* First fit between the sorted allocations. */
    uintptr_t at = (uintptr_t)arena, end = at + arenaLen;
    for (size_t i = 0; i < devAllocs.n && at + want > devAllocs.v[i].addr; i++)
        at = devAllocs.v[i].addr + ((devAllocs.v[i].len + 255) & ~(size_t)255);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (want <= end - at && spansAdd(&devAllocs, at, len) == 0) {
        *p = (void *)at;
        e = cudaSuccess;
    }
    pthread_mutex_unlock(&lock);
    if (e == cudaSuccess) {
        count(C_MALLOC, 1);
        count(C_DEVLIVE, 1);
    }
    return ret(e);
}

API cudaError_t cudaFree(void *p) {
    if (p == NULL) return cudaSuccess;
    pthread_mutex_lock(&lock);
    long i = -1;
    for (size_t j = 0; j < devAllocs.n; j++)
        if (devAllocs.v[j].addr == (uintptr_t)p) i = (long)j;
    span s = i >= 0 ? devAllocs.v[i] : (span){0, 0};
    if (i >= 0) spansDel(&devAllocs, (size_t)i);
    pthread_mutex_unlock(&lock);
    if (i < 0) return ret(cudaErrorInvalidDevicePointer);
    size_t off = s.addr - (uintptr_t)arena, page = 4096;
    size_t from = (off + page - 1) & ~(page - 1), to = (off + s.len) & ~(page - 1);
    if (to > from) fallocate(backingFd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(to - from));
    count(C_FREE, 1);
    __atomic_fetch_sub(&counters[C_DEVLIVE], 1, __ATOMIC_RELAXED);
    return cudaSuccess;
}

API cudaError_t cudaHostAlloc(void **p, size_t len, unsigned flags) {
    (void)flags;
    if (p == NULL) return ret(cudaErrorInvalidValue);
    *p = NULL;
    if (len == 0) return cudaSuccess;
    pthread_mutex_lock(&lock);
    int fail = injected(F_HALLOC);
    pthread_mutex_unlock(&lock);
    if (fail) return ret(cudaErrorMemoryAllocation);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return ret(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&lock);
    int rc = spansAdd(&hostAllocs, (uintptr_t)m, len);
    pthread_mutex_unlock(&lock);
    if (rc != 0) {
        munmap(m, len);
        return ret(cudaErrorMemoryAllocation);
    }
    count(C_HALLOC, 1);
    *p = m;
    return cudaSuccess;
}

API cudaError_t cudaMallocHost(void **p, size_t len) { return cudaHostAlloc(p, len, 0); }

API cudaError_t cudaFreeHost(void *p) {
    if (p == NULL) return cudaSuccess;
    pthread_mutex_lock(&lock);
    long i = -1;
    for (size_t j = 0; j < hostAllocs.n; j++)
        if (hostAllocs.v[j].addr == (uintptr_t)p) i = (long)j;
    span s = i >= 0 ? hostAllocs.v[i] : (span){0, 0};
    if (i >= 0) spansDel(&hostAllocs, (size_t)i);
    pthread_mutex_unlock(&lock);
    if (i < 0) return ret(cudaErrorInvalidValue);
    munmap((void *)s.addr, s.len);
    count(C_HFREE, 1);
    return cudaSuccess;
}

API cudaError_t cudaHostRegister(void *p, size_t len, unsigned flags) {
    (void)flags;
    if (p == NULL || len == 0 || inArena((uintptr_t)p)) return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    cudaError_t e = cudaSuccess;
    if (injected(F_HREG)) e = cudaErrorMemoryAllocation;
    else if (spansOverlap(&hostRegs, (uintptr_t)p, len) >= 0) e = cudaErrorHostMemoryAlreadyRegistered;
    else if (spansAdd(&hostRegs, (uintptr_t)p, len) != 0) e = cudaErrorMemoryAllocation;
    pthread_mutex_unlock(&lock);
    if (e == cudaSuccess) {
        count(C_HREG, 1);
        count(C_HREGLIVE, 1);
        count(C_HREGBYTES, len);
    }
    return ret(e);
}

API cudaError_t cudaHostUnregister(void *p) {
    pthread_mutex_lock(&lock);
    long i = -1;
    for (size_t j = 0; j < hostRegs.n; j++)
        if (hostRegs.v[j].addr == (uintptr_t)p) i = (long)j;
    if (i >= 0) spansDel(&hostRegs, (size_t)i);
    pthread_mutex_unlock(&lock);
    if (i < 0) return ret(cudaErrorHostMemoryNotRegistered);
    count(C_HUNREG, 1);
    __atomic_fetch_sub(&counters[C_HREGLIVE], 1, __ATOMIC_RELAXED);
    return cudaSuccess;
}

/* Under lock: 2 device, 1 pinned host, 0 other host memory. */
static int kindOf(uintptr_t p) {
    if (inArena(p)) return 2;
    return spansFind(&hostAllocs, p, 0) >= 0 || spansFind(&hostRegs, p, 0) >= 0;
}

API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    if (a == NULL) return ret(cudaErrorInvalidValue);
    count(C_ATTR, 1);
    memset(a, 0, sizeof(*a));
    pthread_mutex_lock(&lock);
    int k = kindOf((uintptr_t)p);
    int live = k == 2 && spansFind(&devAllocs, (uintptr_t)p, 0) >= 0;
    pthread_mutex_unlock(&lock);
    if (k == 2 && !live) return ret(cudaErrorInvalidValue); /* freed device memory */
    a->type = k == 2 ? 2 : k == 1 ? 1 : 0;
    a->devicePointer = k ? (void *)p : NULL;
    a->hostPointer = k == 1 ? (void *)p : NULL;
    return cudaSuccess;
}

/* Where the bytes of device pointer p (len of them, inside one allocation)
 * are, or NULL. Under lock. */
static char *deviceBytes(uintptr_t p, size_t len) {
    if (spansFind(&devAllocs, p, len) < 0) return NULL;
    return backing + (p - (uintptr_t)arena);
}

/* A stream: with FAKECUDA_ASYNC=1, the copies queued on it, run at
 * cudaStreamSynchronize (or its destruction), in order. */
typedef struct {
    char *dst;
    const char *src;
    size_t len;
} queuedCopy;

typedef struct {
    queuedCopy *q;
    size_t n, cap;
} fakeStream;

static int deferCopies(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("FAKECUDA_ASYNC");
        v = e && atoi(e) > 0;
    }
    return v;
}

/* Checks and counts a copy as cudaMemcpy does; runs it now, or queues it on
 * stream q (deferred). */
static cudaError_t copyOrQueue(void *dst, const void *src, size_t len, int kind, fakeStream *q) {
    if (len == 0) return cudaSuccess;
    if (dst == NULL || src == NULL || kind < kindH2H || kind > kindDefault) return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    int dk = kindOf((uintptr_t)dst), sk = kindOf((uintptr_t)src);
    /* Pinned only if the host side lies whole in one page-locked range, as
     * the runtime sees it: a copy running past a registration's end is a
     * pageable one. */
    int hostPinned = (dk == 2 ? sk : dk) == 1 &&
                     (spansFind(&hostAllocs, (uintptr_t)(dk == 2 ? src : dst), len) >= 0 ||
                      spansFind(&hostRegs, (uintptr_t)(dk == 2 ? src : dst), len) >= 0);
    char *d = dk == 2 ? deviceBytes((uintptr_t)dst, len) : dst;
    const char *s = sk == 2 ? deviceBytes((uintptr_t)src, len) : src;
    int fail = injected(F_MEMCPY);
    pthread_mutex_unlock(&lock);
    if (fail) return ret(cudaErrorUnknown);
    if (d == NULL || s == NULL) return ret(cudaErrorInvalidValue); /* not an allocation, or past its end */
    int want = kind == kindDefault ? -1 : ((sk == 2) << 1 | (dk == 2)) == 1 ? kindH2D
                                        : ((sk == 2) << 1 | (dk == 2)) == 2 ? kindD2H
                                        : ((sk == 2) << 1 | (dk == 2)) == 3 ? kindD2D : kindH2H;
    if (want >= 0 && want != kind) return ret(cudaErrorInvalidMemcpyDirection);
    if (q) {
        if (q->n == q->cap) {
            size_t cap = q->cap ? 2 * q->cap : 8;
            queuedCopy *v = realloc(q->q, cap * sizeof(*v));
            if (v == NULL) return ret(cudaErrorMemoryAllocation);
            q->q = v;
            q->cap = cap;
        }
        q->q[q->n++] = (queuedCopy){d, s, len};
    } else {
        memmove(d, s, len);
    }
    count(C_MEMCPY, 1);
    count(C_BYTES, len);
    if (dk == 2 && sk == 2) count(C_D2D, len);
    else if (hostPinned) count(C_PINNED, len);
    else count(C_PAGEABLE, len);
    return cudaSuccess;
}

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t len, int kind) {
    return copyOrQueue(dst, src, len, kind, NULL);
}

/* Done at once (a stream is trivially in order), unless FAKECUDA_ASYNC=1:
 * then the bytes move only at the stream's synchronisation, as a real
 * copy may finish any time before it, so a caller that reads the
 * destination, or reuses the source, before synchronising gets the
 * wrong bytes here (checks and counts happen now, as for cudaMemcpy). */
API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, cudaStream_t s) {
    cudaError_t e = copyOrQueue(dst, src, len, kind, s && deferCopies() ? (fakeStream *)s : NULL);
    if (e == cudaSuccess && len) count(C_ASYNC, 1);
    return e;
}

static void streamRun(fakeStream *q) {
    for (size_t i = 0; i < q->n; i++) memmove(q->q[i].dst, q->q[i].src, q->q[i].len);
    q->n = 0;
}

API cudaError_t cudaStreamCreate(cudaStream_t *s) {
    if (s == NULL) return ret(cudaErrorInvalidValue);
    *s = calloc(1, sizeof(fakeStream));
    return *s ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    return cudaStreamCreate(s);
}

API cudaError_t cudaStreamDestroy(cudaStream_t s) {
    fakeStream *q = s;
    if (q) {
        streamRun(q); /* queued work still completes */
        free(q->q);
    }
    free(q);
    return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s) streamRun(s);
    return cudaSuccess;
}

API cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
