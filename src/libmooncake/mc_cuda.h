/* mc_cuda.h -- CUDA device memory for libmooncake (mc_cuda.c).
 *
 * The CUDA runtime is loaded with dlopen at first use (MC_CUDA_LIBRARY
 * names it, else libcudart.so.<major>): no CUDA header or library is needed
 * to build, and without a runtime, driver or device the functions report
 * why, so callers need no #ifdefs. Internal: not installed. */
#ifndef MC_CUDA_H
#define MC_CUDA_H

#include <stddef.h>

/* 1 if a CUDA device can be used; else 0 with the reason in err. Loads the
 * runtime now if it was not loaded yet. */
int mcCudaAvailable(char *err, size_t errlen);
/* 1 if device memory may be handed to the library: the runtime is loaded
 * and usable, or was just loaded because the process now has CUDA; 0 means
 * every pointer is host memory for now (a cheap check: see mc_cuda.c). */
int mcCudaActive(void);
/* 1 if p is device (or managed) memory, 0 if host memory or unknown. Loads
 * nothing until a CUDA library is loaded in the process (see mc_cuda.c). */
int mcCudaIsDevicePtr(const void *p);
/* Copies between host and device memory (either direction; the runtime
 * knows which is which). MC_OK or MC_ERR_*. */
int mcCudaCopy(void *dst, const void *src, size_t len, char *err, size_t errlen);
/* Pinned (page-locked) host memory for staging; NULL if unavailable. */
void *mcCudaHostAlloc(size_t len);
void mcCudaHostFree(void *p);
/* Page-locks [p, p+len) of host memory (cudaHostRegister, portable), so
 * device copies to and from it run at the link's speed. MC_OK or MC_ERR_*
 * with the reason in err. */
int mcCudaHostRegister(void *p, size_t len, char *err, size_t errlen);
void mcCudaHostUnregister(void *p);
/* A stream of the runtime's (non-blocking), for copies that overlap the
 * socket (mc_xfer.c, tcp); NULL if unavailable. */
void *mcCudaStreamCreate(void);
void mcCudaStreamDestroy(void *stream);
/* A copy queued on stream (either direction); done once mcCudaStreamSync
 * returns MC_OK. Asynchronous for pinned host memory. MC_OK or MC_ERR_*. */
int mcCudaCopyAsync(void *dst, const void *src, size_t len, void *stream, char *err, size_t errlen);
int mcCudaStreamSync(void *stream, char *err, size_t errlen);

#endif
