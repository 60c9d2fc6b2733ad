/* mc_cuda.c -- CUDA device memory for libmooncake, the runtime loaded at
 * first use.
 *
 * libmooncake moves bytes by memcpy (shm), send/recv (tcp) or RDMA verbs.
 * When a caller hands over a device pointer the library copies it with the
 * CUDA runtime: straight into or out of a segment's shared mapping (shm,
 * the mapping page-locked once, mc_shm.c), or through pinned host memory
 * (tcp). This file is the whole of that dependency on CUDA; mc_xfer.c asks
 * it a few questions (is there a GPU? is this pointer on it? copy these
 * bytes; pin this mapping) and never includes a CUDA header itself.
 *
 * Design points:
 *
 * - One binary for every machine. The runtime is loaded with dlopen, not
 *   linked: the few entry points called here are declared below with the
 *   runtime API's C signatures (cudaError_t is an int-sized enum, the
 *   pointer attributes are the CUDA 11+ layout, which libcudart.so.11 and
 *   later all have), so the library builds without a CUDA toolkit and the
 *   same build uses a GPU where there is one. MC_CUDA_LIBRARY names the
 *   library to load (a path or a soname; the tests name a fake one,
 *   build/tests/libfakecuda.so); unset, libcudart.so.13, .12 and .11.0 are
 *   tried by soname, one the application loaded already first (PyTorch's),
 *   then the loader's path (LD_LIBRARY_PATH too), then /usr/local/cuda/lib64.
 *
 * - When to load. mcCudaIsDevicePtr() sits on the hot path of every put and
 *   get, host buffers included, so it must cost nothing on a host-only
 *   process. A device pointer can only exist once the process has loaded a
 *   CUDA driver (libcuda.so.1: every runtime, static or shared, loads it to
 *   allocate) or the library MC_CUDA_LIBRARY names; until one is, every
 *   pointer is host memory and nothing is loaded. The check is a count:
 *   dl_iterate_phdr's dlpi_adds (objects ever loaded by the process), read
 *   in its first callback, so one lock and no walk (25-35 ns measured);
 *   a call of many buffers asks once (mcCudaActive); only when it changed
 *   since the last look is the process asked (dlopen RTLD_NOLOAD) whether
 *   one of those libraries is in. The first time one is, the runtime is
 *   loaded and probed once (pthread_once) and its verdict cached; from
 *   then on the question is cudaPointerGetAttributes. mcCudaAvailable(),
 *   an explicit question (mc_register of MC_MEM_CUDA, the tests), loads at
 *   once. The verdict is never retried: the runtime keeps a failed
 *   initialisation for the life of the process.
 *
 * - The runtime keeps a per-thread "last error" that later, unrelated calls
 *   can report. A call that fails here must not leave that error behind for
 *   the application's next CUDA call, so every failure is followed by
 *   cudaGetLastError() to consume it.
 *
 * - No runtime, no driver, no device: the same functions say why
 *   ("no CUDA runtime: ...", "no CUDA device: ..."), so mc_xfer.c needs no
 *   #ifdefs and a user gets a reason instead of a link error.
 */
#include "mc_cuda.h"
#include "mooncake.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the runtime API, as much as is called ---------------------------------- */

typedef int cuError;             /* cudaError_t */
#define CU_SUCCESS 0
#define CU_MEMCPY_DEFAULT 4      /* cudaMemcpyDefault: direction from unified addressing */
#define CU_HOST_ALLOC_PORTABLE 1 /* cudaHostAllocPortable */
#define CU_HOST_REGISTER_PORTABLE 1
#define CU_MEM_DEVICE 2          /* cudaMemoryTypeDevice */
#define CU_MEM_MANAGED 3         /* cudaMemoryTypeManaged */

/* struct cudaPointerAttributes (CUDA 11+), with room to spare. */
typedef struct {
    int type;
    int device;
    void *devicePointer;
    void *hostPointer;
    char spare[64];
} cuPointerAttributes;

static struct {
    cuError (*getDeviceCount)(int *);
    const char *(*getErrorString)(cuError);
    cuError (*getLastError)(void);
    cuError (*pointerGetAttributes)(cuPointerAttributes *, const void *);
    cuError (*memcpy)(void *, const void *, size_t, int);
    cuError (*hostAlloc)(void **, size_t, unsigned);
    cuError (*freeHost)(void *);
    cuError (*hostRegister)(void *, size_t, unsigned);
    cuError (*hostUnregister)(void *);
    cuError (*streamCreateWithFlags)(void **, unsigned);
    cuError (*streamDestroy)(void *);
    cuError (*memcpyAsync)(void *, const void *, size_t, int, void *);
    cuError (*streamSynchronize)(void *);
} cu;

static const char *const cuNames[] = {"cudaGetDeviceCount", "cudaGetErrorString", "cudaGetLastError",
                                      "cudaPointerGetAttributes", "cudaMemcpy", "cudaHostAlloc",
                                      "cudaFreeHost", "cudaHostRegister", "cudaHostUnregister",
                                      "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaMemcpyAsync",
                                      "cudaStreamSynchronize"};

static const char *const runtimeNames[] = {
    "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
    "/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12",
    "/usr/local/cuda/lib64/libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so"};

/* err may be NULL or zero-sized when the caller does not want the reason. */
static void setErr(char *err, size_t errlen, const char *fmt, const char *what) {
    if (err == NULL || errlen == 0) return;
    snprintf(err, errlen, fmt, what);
}

/* ---- loading ------------------------------------------------------------------ */

/* Written once under pthread_once, read-only afterwards; cudaState says
 * when (0: not loaded, 1: usable, 2: not usable, reason in cudaReason). */
static pthread_once_t cudaOnce = PTHREAD_ONCE_INIT;
static int cudaState;
static char cudaReason[512];

static const char *cuErrStr(cuError e) {
    const char *s = cu.getErrorString ? cu.getErrorString(e) : NULL;
    return s ? s : "unknown CUDA error";
}

static void cudaLoad(void) {
    const char *want = getenv("MC_CUDA_LIBRARY");
    void *h = NULL;
    char why[300] = "";
    if (want && want[0]) {
        h = dlopen(want, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) snprintf(why, sizeof(why), "MC_CUDA_LIBRARY=%s: %s", want, dlerror());
    } else {
        /* A runtime the application loaded already (PyTorch's) first: one
         * runtime in the process where there can be. */
        for (size_t i = 0; h == NULL && i < 3; i++) h = dlopen(runtimeNames[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        for (size_t i = 0; h == NULL && i < sizeof(runtimeNames) / sizeof(runtimeNames[0]); i++) {
            h = dlopen(runtimeNames[i], RTLD_NOW | RTLD_LOCAL);
            if (h == NULL && i == 0) snprintf(why, sizeof(why), "%s", dlerror());
        }
    }
    if (h == NULL) {
        snprintf(cudaReason, sizeof(cudaReason), "no CUDA runtime: %s%s", why,
                 want && want[0] ? "" : " (nor .12, .11.0; set MC_CUDA_LIBRARY to its path)");
        __atomic_store_n(&cudaState, 2, __ATOMIC_RELEASE);
        return;
    }
    _Static_assert(sizeof(cu) == sizeof(cuNames) / sizeof(cuNames[0]) * sizeof(void *), "cu: one pointer per name");
    for (size_t i = 0; i < sizeof(cuNames) / sizeof(cuNames[0]); i++) {
        void *f = dlsym(h, cuNames[i]);
        memcpy((char *)&cu + i * sizeof(void *), &f, sizeof(f)); /* dlsym's answer into its slot */
        if (f == NULL) {
            snprintf(cudaReason, sizeof(cudaReason), "no CUDA runtime: %s has no %s", want && want[0] ? want : "libcudart",
                     cuNames[i]);
            memset(&cu, 0, sizeof(cu));
            __atomic_store_n(&cudaState, 2, __ATOMIC_RELEASE);
            return; /* h stays loaded: dlclose of a runtime is not safe */
        }
    }
    int count = 0;
    cuError e = cu.getDeviceCount(&count);
    if (e != CU_SUCCESS) {
        /* Clears what can be cleared; an initialisation failure (no driver,
         * no device) stays and is what any later CUDA call will report. */
        (void)cu.getLastError();
        snprintf(cudaReason, sizeof(cudaReason), "no CUDA device: %s", cuErrStr(e));
        __atomic_store_n(&cudaState, 2, __ATOMIC_RELEASE);
        return;
    }
    if (count <= 0) {
        snprintf(cudaReason, sizeof(cudaReason), "no CUDA device: the driver reports 0 devices");
        __atomic_store_n(&cudaState, 2, __ATOMIC_RELEASE);
        return;
    }
    __atomic_store_n(&cudaState, 1, __ATOMIC_RELEASE);
}

static int cudaReady(void) {
    pthread_once(&cudaOnce, cudaLoad);
    return cudaState == 1;
}

/* Objects the process has loaded so far (dlpi_adds of the first object). */
static int addsOf(struct dl_phdr_info *info, size_t size, void *arg) {
    unsigned long long *adds = arg;
    *adds = size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds) ? info->dlpi_adds : 0;
    return 1; /* the first object is enough */
}

static unsigned long long seenAdds; /* dlpi_adds when no CUDA library was loaded */

/* Is a CUDA driver, or the library MC_CUDA_LIBRARY names, loaded in the
 * process? Asked of the loader only when it loaded something since the
 * last answer "no". */
static int cudaInProcess(void) {
    unsigned long long adds = 0;
    dl_iterate_phdr(addsOf, &adds);
    if (adds != 0 && adds == __atomic_load_n(&seenAdds, __ATOMIC_RELAXED)) return 0;
    const char *want = getenv("MC_CUDA_LIBRARY");
    const char *names[] = {"libcuda.so.1", want && want[0] ? want : NULL};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *h = names[i] ? dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD) : NULL;
        if (h) {
            dlclose(h);
            return 1;
        }
    }
    __atomic_store_n(&seenAdds, adds, __ATOMIC_RELAXED);
    return 0;
}

/* ---- the calls ----------------------------------------------------------------- */

int mcCudaAvailable(char *err, size_t errlen) {
    if (cudaReady()) return 1;
    setErr(err, errlen, "%s", cudaReason);
    return 0;
}

int mcCudaActive(void) {
    int st = __atomic_load_n(&cudaState, __ATOMIC_ACQUIRE);
    if (st == 0) {
        if (!cudaInProcess()) return 0;
        st = cudaReady() ? 1 : 2;
    }
    return st == 1;
}

int mcCudaIsDevicePtr(const void *p) {
    if (p == NULL || !mcCudaActive()) return 0;
    cuPointerAttributes attr;
    memset(&attr, 0, sizeof(attr));
    cuError e = cu.pointerGetAttributes(&attr, p);
    if (e != CU_SUCCESS) {
        /* A pointer CUDA cannot classify is one it did not allocate: host
         * memory to us. */
        (void)cu.getLastError();
        return 0;
    }
    /* Registered/pinned host memory is still host memory the CPU reads
     * directly: 0. */
    return attr.type == CU_MEM_DEVICE || attr.type == CU_MEM_MANAGED;
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
    cuError e = cu.memcpy(dst, src, len, CU_MEMCPY_DEFAULT);
    if (e != CU_SUCCESS) {
        (void)cu.getLastError();
        setErr(err, errlen, "cudaMemcpy: %s", cuErrStr(e));
        return MC_ERR_IO;
    }
    return MC_OK;
}

void *mcCudaHostAlloc(size_t len) {
    if (len == 0 || !cudaReady()) return NULL;
    void *p = NULL;
    /* Portable: pinned for every device's context, so a staging buffer
     * allocated while device 0 was current still gives full DMA speed when
     * the caller's tensor lives on device 3. */
    cuError e = cu.hostAlloc(&p, len, CU_HOST_ALLOC_PORTABLE);
    if (e != CU_SUCCESS) {
        (void)cu.getLastError();
        return NULL;
    }
    return p;
}

void mcCudaHostFree(void *p) {
    if (p == NULL || !cudaReady()) return;
    if (cu.freeHost(p) != CU_SUCCESS) (void)cu.getLastError();
}

int mcCudaHostRegister(void *p, size_t len, char *err, size_t errlen) {
    if (!cudaReady()) {
        setErr(err, errlen, "%s", cudaReason);
        return MC_ERR_UNSUPPORTED;
    }
    if (p == NULL || len == 0) {
        setErr(err, errlen, "%s", "cudaHostRegister: empty range");
        return MC_ERR_INVALID;
    }
    cuError e = cu.hostRegister(p, len, CU_HOST_REGISTER_PORTABLE);
    if (e != CU_SUCCESS) {
        (void)cu.getLastError();
        setErr(err, errlen, "cudaHostRegister: %s", cuErrStr(e));
        return MC_ERR_IO;
    }
    return MC_OK;
}

void mcCudaHostUnregister(void *p) {
    if (p == NULL || !cudaReady()) return;
    if (cu.hostUnregister(p) != CU_SUCCESS) (void)cu.getLastError();
}

void *mcCudaStreamCreate(void) {
    void *s = NULL;
    if (!cudaReady()) return NULL;
    if (cu.streamCreateWithFlags(&s, 1 /* cudaStreamNonBlocking */) != CU_SUCCESS) {
        (void)cu.getLastError();
        return NULL;
    }
    return s;
}

void mcCudaStreamDestroy(void *stream) {
    if (stream == NULL || !cudaReady()) return;
    if (cu.streamDestroy(stream) != CU_SUCCESS) (void)cu.getLastError();
}

int mcCudaCopyAsync(void *dst, const void *src, size_t len, void *stream, char *err, size_t errlen) {
    if (!cudaReady()) {
        setErr(err, errlen, "%s", cudaReason);
        return MC_ERR_UNSUPPORTED;
    }
    if (len == 0) return MC_OK;
    cuError e = cu.memcpyAsync(dst, src, len, CU_MEMCPY_DEFAULT, stream);
    if (e != CU_SUCCESS) {
        (void)cu.getLastError();
        setErr(err, errlen, "cudaMemcpyAsync: %s", cuErrStr(e));
        return MC_ERR_IO;
    }
    return MC_OK;
}

int mcCudaStreamSync(void *stream, char *err, size_t errlen) {
    if (!cudaReady()) {
        setErr(err, errlen, "%s", cudaReason);
        return MC_ERR_UNSUPPORTED;
    }
    cuError e = cu.streamSynchronize(stream);
    if (e != CU_SUCCESS) {
        (void)cu.getLastError();
        setErr(err, errlen, "cudaStreamSynchronize: %s", cuErrStr(e));
        return MC_ERR_IO;
    }
    return MC_OK;
}
