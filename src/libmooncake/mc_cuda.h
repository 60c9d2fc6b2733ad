/* mc_cuda.h -- CUDA device memory for libmooncake, optional at build time.
 *
 * Built with MC_HAVE_CUDA (BUILD_CUDA=yes, the default when /usr/local/cuda
 * exists) the functions call the CUDA runtime; without it they report
 * MC_ERR_UNSUPPORTED, so callers need no #ifdefs. Device pointers are staged
 * through pinned host memory for shm and tcp (see mooncake.c). */
#ifndef MC_CUDA_H
#define MC_CUDA_H

#include <stddef.h>

/* 1 if a CUDA device can be used; else 0 with the reason in err. */
int mcCudaAvailable(char *err, size_t errlen);
/* 1 if p is device (or managed) memory, 0 if host memory or unknown. */
int mcCudaIsDevicePtr(const void *p);
/* Copies between host and device memory (either direction; the runtime
 * knows which is which). MC_OK or MC_ERR_*. */
int mcCudaCopy(void *dst, const void *src, size_t len, char *err, size_t errlen);
/* Pinned (page-locked) host memory for staging; NULL if unavailable. */
void *mcCudaHostAlloc(size_t len);
void mcCudaHostFree(void *p);

#ifdef MC_FAKE_CUDA
/* Tests only (mc_cuda.c, MC_FAKE_CUDA): "device memory" of a fake device,
 * which the CPU cannot touch except through mcCudaCopy. */
void *mcCudaFakeMalloc(size_t len);
void mcCudaFakeFree(void *p);
/* Copies made by mcCudaCopy so far, and their bytes. */
void mcCudaFakeStats(unsigned long long *copies, unsigned long long *bytes);
#endif

#endif
