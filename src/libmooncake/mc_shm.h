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
/* Before the caller reads [off, off+len) through the mapping itself (a
 * view, a device copy): maps the page tables of the 2 MiB chunks around it
 * not populated yet (MADV_POPULATE_READ), so the reads take no faults. */
void mcShmPrepare(mcShm *m, uint64_t off, uint64_t len);
/* Copies n bytes between buf and the segment at off (write: into the
 * segment), through the file for chunks this process has seldom copied
 * and through the mapping for the others (mc_shm.c). The range must lie in
 * the segment; buf is host memory. */
void mcShmCopy(mcShm *m, uint64_t off, void *buf, size_t n, int write);

/* What the process's copies did, for tests and benchmarks. */
typedef struct mcShmStats {
    uint64_t fd_bytes;          /* copied with pread/pwrite */
    uint64_t map_bytes;         /* copied through a mapping */
    uint64_t chunks_populated;  /* 2 MiB chunks populated */
    int warm_after;             /* fd copies of a chunk before it is populated */
    int warm_measured;          /* 1 once measured, or fixed by MC_SHM_WARM_AFTER */
} mcShmStats;
void mcShmGetStats(mcShmStats *out);
/* Fixes warm-after for the process, as MC_SHM_WARM_AFTER does; n < 0
 * measures it again (tests). */
void mcShmSetWarmAfter(int n);
/* Before a device copy of [off, off+len) (inside the mapping): page-locks
 * the window holding off with the CUDA runtime, once per window (the last
 * release unlocks), and returns how many of the len bytes lie in that
 * window: copy those, then ask again for the rest. *pinned (may be NULL):
 * 1 registered, -1 refused (copies there still work, unpinned). */
uint64_t mcShmCudaWindow(mcShm *m, uint64_t off, uint64_t len, int *pinned);

#endif
