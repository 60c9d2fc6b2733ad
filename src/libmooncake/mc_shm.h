/* mc_shm.h -- one mapping per shared-memory segment per process (mc_shm.c).
 * Internal: not installed, and hidden in the shared library like everything
 * not in mooncake.h. */
#ifndef MC_SHM_H
#define MC_SHM_H

#include <stddef.h>
#include <stdint.h>

typedef struct mcShm mcShm;

/* The process's mapping of `size` bytes at offset `off` of the file behind
 * fd (a memfd a segment host passed by SCM_RIGHTS), made on first use and
 * shared by every later caller that names the same memory; each call takes
 * a reference. fd stays the caller's to close. NULL with the reason in err. */
mcShm *mcShmAcquire(int fd, uint64_t off, uint64_t size, char *err, size_t errlen);
/* One more reference on a mapping already held (a view keeps its segment's
 * mapping past the handle that made it). */
void mcShmRetain(mcShm *m);
/* Drops one reference; the last unmaps. NULL is a no-op. */
void mcShmRelease(mcShm *m);
char *mcShmBase(const mcShm *m);
/* Before a copy of [off, off+len) of the mapping: maps the page tables of
 * the 2 MiB chunks around it that no copy of this process touched yet
 * (MADV_POPULATE_READ), so the copy takes no page faults. */
void mcShmPrepare(mcShm *m, uint64_t off, uint64_t len);
/* Before the first device copy to or from the mapping: page-locks all of
 * it with the CUDA runtime, once per mapping (the last release unlocks).
 * 1 registered, -1 refused (reason in err the first time; copies still
 * work, unpinned). */
int mcShmCudaRegister(mcShm *m, char *err, size_t errlen);

#endif
