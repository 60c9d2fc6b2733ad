/* segment.h -- memory that holds values, carved by an offset allocator. */
#ifndef SEGMENT_H
#define SEGMENT_H

#include <pthread.h>
#include <stdint.h>

#include "alloc.h"

#define SEGMENT_ALIGN 16  /* allocation granule: small values waste < 16 bytes */

typedef struct segment {
    uint64_t id;
    char *name;
    uint64_t size;
    char *base;              /* mapped address in this process */
    int fd;                  /* memfd, for SHM.ATTACH */
    int hugepages;
    int numa_node;           /* -1: no binding */
    allocator *alloc;
    uint64_t objects;        /* live extents */
    /* Background pre-faulting: see segment.c. */
    pthread_t prefault_thread;
    int prefault_running;
    volatile int prefault_stop;
    volatile uint64_t prefaulted;  /* bytes faulted in so far */
} segment;

segment *segmentCreateLocal(const char *name, uint64_t id, uint64_t size, int hugepages,
                            int numa_node, int prefault, char *err, size_t errlen);
void segmentRelease(segment *s);
static inline char *segmentPtr(const segment *s, uint64_t offset) { return s->base + offset; }

#endif
