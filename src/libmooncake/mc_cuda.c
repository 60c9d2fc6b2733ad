/* mc_cuda.c -- CUDA device memory for libmooncake, optional at build time.
 *
 * libmooncake moves bytes by memcpy (shm), send/recv (tcp) or RDMA verbs.
 * None of those can touch GPU memory directly on every machine, so when a
 * caller hands over a device pointer the library stages it through pinned
 * host memory: one cudaMemcpy into a pinned buffer, then the usual path.
 * This file is the whole of that dependency on CUDA; mooncake.c asks it
 * three questions (is there a GPU? is this pointer on it? copy these bytes)
 * and never includes a CUDA header itself.
 *
 * Design points:
 *
 * - Plain C against the runtime API (cuda_runtime_api.h), no nvcc and no
 *   kernels. cudaMemcpy with cudaMemcpyDefault lets the runtime work out the
 *   direction from unified addressing, so one function covers H2D, D2H and
 *   D2D and the caller never has to say which side is which.
 *
 * - mcCudaIsDevicePtr() sits on the hot path of every put and get, for host
 *   buffers too. On a machine without a GPU it must cost a branch, not a
 *   runtime call that fails the same way each time, so the device check runs
 *   once per process (pthread_once) and its verdict and reason are cached.
 *   The check is never retried: the runtime keeps a failed initialisation
 *   for the life of the process, so a retry would only repeat the error.
 *
 * - The runtime keeps a per-thread "last error" that later, unrelated calls
 *   can report. A probe that fails (e.g. cudaPointerGetAttributes on a pointer
 *   the driver has never seen, on old runtimes) must not leave that error
 *   behind for the application's next CUDA call to trip over, so every failed
 *   call here is followed by cudaGetLastError() to consume it.
 *
 * - Built without MC_HAVE_CUDA the same functions exist and say why they
 *   cannot help, so mooncake.c needs no #ifdefs and a user gets a reason
 *   ("built without CUDA support") instead of a link error.
 *
 * - Built with MC_FAKE_CUDA (tests only: src/Makefile builds it apart, as
 *   mc_cuda_fake.lo, for build/tests/test_mooncake_fakecuda) the functions
 *   serve a fake device, so the library's device paths -- staging through
 *   the pinned buffer, the device checks of every call -- run on machines
 *   without a GPU. "Device memory" comes from mcCudaFakeMalloc: anonymous
 *   mappings kept PROT_NONE except inside mcCudaCopy, so the CPU cannot
 *   touch it any more than it can touch a GPU's: a memcpy into it faults,
 *   a recv into it fails with EFAULT. A path that forgets to stage is a
 *   crash or a failed transfer in the test, not a silent pass.
 */
#include "mc_cuda.h"
#include "mooncake.h"

#include <stdio.h>

#if defined(MC_FAKE_CUDA)
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#elif defined(MC_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <pthread.h>
#endif

/* err may be NULL or zero-sized when the caller does not want the reason. */
static void setErr(char *err, size_t errlen, const char *fmt, const char *what) {
    if (err == NULL || errlen == 0) return;
    snprintf(err, errlen, fmt, what);
}

#if defined(MC_FAKE_CUDA)

/* The fake device's allocations. One lock for the table and the copies:
 * a copy opens its regions (PROT_READ|PROT_WRITE) and closes them again,
 * and two copies at once must not close a region under each other. */
#define FAKE_MAX 64
static pthread_mutex_t fakeLock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *addr;
    size_t len;
} fakeMem[FAKE_MAX];
static unsigned long long fakeCopies, fakeBytes;

/* The allocation holding [p, p+len) (len 0: holding p), or -1. */
static int fakeFind(const void *p, size_t len) {
    const char *c = p;
    for (int i = 0; i < FAKE_MAX; i++) {
        if (fakeMem[i].addr == NULL || c < fakeMem[i].addr) continue;
        size_t at = (size_t)(c - fakeMem[i].addr);
        if (at < fakeMem[i].len && len <= fakeMem[i].len - at) return i;
    }
    return -1;
}

void *mcCudaFakeMalloc(size_t len) {
    if (len == 0) return NULL;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    pthread_mutex_lock(&fakeLock);
    int slot = -1;
    for (int i = 0; i < FAKE_MAX && slot < 0; i++)
        if (fakeMem[i].addr == NULL) slot = i;
    if (slot >= 0) {
        fakeMem[slot].addr = p;
        fakeMem[slot].len = len;
    }
    pthread_mutex_unlock(&fakeLock);
    if (slot < 0) {
        munmap(p, len);
        return NULL;
    }
    return p;
}

void mcCudaFakeFree(void *p) {
    pthread_mutex_lock(&fakeLock);
    for (int i = 0; i < FAKE_MAX; i++) {
        if (fakeMem[i].addr != p || p == NULL) continue;
        munmap(fakeMem[i].addr, fakeMem[i].len);
        fakeMem[i].addr = NULL;
        fakeMem[i].len = 0;
    }
    pthread_mutex_unlock(&fakeLock);
}

void mcCudaFakeStats(unsigned long long *copies, unsigned long long *bytes) {
    pthread_mutex_lock(&fakeLock);
    if (copies) *copies = fakeCopies;
    if (bytes) *bytes = fakeBytes;
    pthread_mutex_unlock(&fakeLock);
}

int mcCudaAvailable(char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    return 1;
}

int mcCudaIsDevicePtr(const void *p) {
    if (p == NULL) return 0;
    pthread_mutex_lock(&fakeLock);
    int dev = fakeFind(p, 0) >= 0;
    pthread_mutex_unlock(&fakeLock);
    return dev;
}

/* Opens (prot) the whole allocation i for the length of a copy. */
static void fakeProtect(int i, int prot) {
    if (i >= 0) mprotect(fakeMem[i].addr, fakeMem[i].len, prot);
}

int mcCudaCopy(void *dst, const void *src, size_t len, char *err, size_t errlen) {
    if (len == 0) return MC_OK;
    if (dst == NULL || src == NULL) {
        setErr(err, errlen, "%s", "cuda copy: NULL buffer");
        return MC_ERR_INVALID;
    }
    pthread_mutex_lock(&fakeLock);
    int d = fakeFind(dst, len), s = fakeFind(src, len);
    /* A pointer inside an allocation with a length past its end is what
     * cudaMemcpy refuses too. */
    if ((d < 0 && fakeFind(dst, 0) >= 0) || (s < 0 && fakeFind(src, 0) >= 0)) {
        pthread_mutex_unlock(&fakeLock);
        setErr(err, errlen, "%s", "cudaMemcpy: invalid argument (fake device: past the allocation)");
        return MC_ERR_IO;
    }
    fakeProtect(d, PROT_READ | PROT_WRITE);
    fakeProtect(s, PROT_READ | PROT_WRITE);
    memmove(dst, src, len);
    fakeProtect(d, PROT_NONE);
    fakeProtect(s, PROT_NONE);
    fakeCopies++;
    fakeBytes += len;
    pthread_mutex_unlock(&fakeLock);
    return MC_OK;
}

/* Pinned memory is plain host memory to the fake. */
void *mcCudaHostAlloc(size_t len) { return len ? malloc(len) : NULL; }

void mcCudaHostFree(void *p) { free(p); }

#elif defined(MC_HAVE_CUDA)

/* Written once under pthread_once, read-only afterwards: no lock needed. */
static pthread_once_t cudaOnce = PTHREAD_ONCE_INIT;
static int cudaUsable;
static char cudaReason[160];

static void cudaProbe(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        /* Clears what can be cleared; an initialisation failure (no driver,
         * no device) stays and is what any later CUDA call will report. */
        (void)cudaGetLastError();
        snprintf(cudaReason, sizeof(cudaReason), "no CUDA device: %s", cudaGetErrorString(e));
        return;
    }
    if (count <= 0) {
        snprintf(cudaReason, sizeof(cudaReason), "no CUDA device: the driver reports 0 devices");
        return;
    }
    cudaUsable = 1;
}

static int cudaReady(void) {
    pthread_once(&cudaOnce, cudaProbe);
    return cudaUsable;
}

int mcCudaAvailable(char *err, size_t errlen) {
    if (cudaReady()) return 1;
    setErr(err, errlen, "%s", cudaReason);
    return 0;
}

int mcCudaIsDevicePtr(const void *p) {
    if (p == NULL || !cudaReady()) return 0;
    struct cudaPointerAttributes attr;
    cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e != cudaSuccess) {
        /* Runtimes before 11.0 fail here for plain malloc memory rather
         * than say "unregistered"; a pointer CUDA cannot classify is one it
         * did not allocate, so it is host memory to us. */
        (void)cudaGetLastError();
        return 0;
    }
    /* Registered/pinned host memory (cudaMemoryTypeHost) is still host
     * memory the CPU can read directly: no staging needed, so it is 0. */
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

int mcCudaCopy(void *dst, const void *src, size_t len, char *err, size_t errlen) {
    if (!cudaReady()) {
        setErr(err, errlen, "%s", cudaReason);
        return MC_ERR_UNSUPPORTED;
    }
    if (len == 0) return MC_OK;
    if (dst == NULL || src == NULL) {
        setErr(err, errlen, "%s", "cuda copy: NULL buffer");
        return MC_ERR_INVALID;
    }
    cudaError_t e = cudaMemcpy(dst, src, len, cudaMemcpyDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        setErr(err, errlen, "cudaMemcpy: %s", cudaGetErrorString(e));
        return MC_ERR_IO;
    }
    return MC_OK;
}

void *mcCudaHostAlloc(size_t len) {
    if (len == 0 || !cudaReady()) return NULL;
    void *p = NULL;
    /* Portable: the buffer counts as pinned for every device's context, so a
     * staging buffer allocated while device 0 was current still gives full
     * DMA speed when the caller's tensor lives on device 3. */
    cudaError_t e = cudaHostAlloc(&p, len, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void mcCudaHostFree(void *p) {
    if (p == NULL) return;
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

#else /* !MC_HAVE_CUDA */

static const char noCuda[] = "built without CUDA support (BUILD_CUDA=no)";

int mcCudaAvailable(char *err, size_t errlen) {
    setErr(err, errlen, "%s", noCuda);
    return 0;
}

int mcCudaIsDevicePtr(const void *p) {
    (void)p;
    return 0;
}

int mcCudaCopy(void *dst, const void *src, size_t len, char *err, size_t errlen) {
    (void)dst; (void)src; (void)len;
    setErr(err, errlen, "%s", noCuda);
    return MC_ERR_UNSUPPORTED;
}

void *mcCudaHostAlloc(size_t len) {
    (void)len;
    return NULL;
}

/* Nothing can have come from mcCudaHostAlloc here, so nothing to free. */
void mcCudaHostFree(void *p) {
    (void)p;
}

#endif
