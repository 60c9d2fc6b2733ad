/* zmalloc.c -- accounting wrappers over the process allocator.
 *
 * Allocation failure of server metadata is not recoverable in a meaningful
 * way (a half-built key or client would break invariants everywhere), so it
 * aborts through the OOM handler with the size that failed, like Redis.
 * Value memory is a different story: the segment allocator refuses cleanly
 * and the command replies -OOM without changing anything.
 *
 * The counter is atomic because libmooncake's listener thread and the
 * prefault thread may allocate while the event loop runs.
 */
#include "zmalloc.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic size_t used_memory;

static void zmallocDefaultOom(size_t size) {
    fprintf(stderr, "zmalloc: Out of memory trying to allocate %zu bytes\n", size);
    fflush(stderr);
    abort();
}

static void (*zmalloc_oom_handler)(size_t) = zmallocDefaultOom;

void zmalloc_set_oom_handler(void (*handler)(size_t)) { zmalloc_oom_handler = handler; }

void *zmalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) zmalloc_oom_handler(size);
    atomic_fetch_add_explicit(&used_memory, malloc_usable_size(p), memory_order_relaxed);
    return p;
}

/* For a large transient buffer a command can do without (LCS's table):
 * NULL, and the command says so, rather than aborting the server. */
void *ztrymalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (p) atomic_fetch_add_explicit(&used_memory, malloc_usable_size(p), memory_order_relaxed);
    return p;
}

void *zcalloc(size_t size) {
    void *p = calloc(1, size ? size : 1);
    if (!p) zmalloc_oom_handler(size);
    atomic_fetch_add_explicit(&used_memory, malloc_usable_size(p), memory_order_relaxed);
    return p;
}

void *zrealloc(void *ptr, size_t size) {
    if (ptr == NULL) return zmalloc(size);
    size_t old = malloc_usable_size(ptr);
    void *p = realloc(ptr, size ? size : 1);
    if (!p) zmalloc_oom_handler(size);
    atomic_fetch_sub_explicit(&used_memory, old, memory_order_relaxed);
    atomic_fetch_add_explicit(&used_memory, malloc_usable_size(p), memory_order_relaxed);
    return p;
}

void zfree(void *ptr) {
    if (ptr == NULL) return;
    atomic_fetch_sub_explicit(&used_memory, malloc_usable_size(ptr), memory_order_relaxed);
    free(ptr);
}

char *zstrdup(const char *s) {
    size_t l = strlen(s) + 1;
    char *p = zmalloc(l);
    memcpy(p, s, l);
    return p;
}

size_t zmalloc_size(void *ptr) { return malloc_usable_size(ptr); }

size_t zmalloc_used_memory(void) {
    return atomic_load_explicit(&used_memory, memory_order_relaxed);
}

const char *zmalloc_lib(void) {
#ifdef USE_JEMALLOC
    return "jemalloc";
#else
    return "libc";
#endif
}

/* Resident set size from /proc: used for INFO's used_memory_rss and the
 * fragmentation ratio. */
size_t zmalloc_get_rss(void) {
    FILE *fp = fopen("/proc/self/statm", "r");
    if (!fp) return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(fp, "%lu %lu", &size, &resident);
    fclose(fp);
    if (n != 2) return 0;
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}
