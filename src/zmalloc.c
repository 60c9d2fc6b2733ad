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

/* ---- the allocator's own statistics (MEMORY STATS, MALLOC-STATS, PURGE) ---- */

#ifdef USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#include <stdint.h>

int zmalloc_get_allocator_info(size_t *allocated, size_t *active, size_t *resident) {
    /* jemalloc caches its statistics; bumping the epoch refreshes them. */
    uint64_t epoch = 1;
    size_t sz = sizeof(epoch);
    mallctl("epoch", &epoch, &sz, &epoch, sz);
    sz = sizeof(size_t);
    *allocated = *active = *resident = 0;
    if (mallctl("stats.allocated", allocated, &sz, NULL, 0) || mallctl("stats.active", active, &sz, NULL, 0) ||
        mallctl("stats.resident", resident, &sz, NULL, 0))
        return 0;
    return 1;
}

int zmalloc_stats_print(void (*write)(void *arg, const char *text), void *arg) {
    malloc_stats_print(write, arg, NULL);
    return 1;
}

int zmalloc_purge(void) {
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "arena.%d.purge", MALLCTL_ARENAS_ALL);
    return mallctl(cmd, NULL, NULL, NULL, 0) == 0;
}
#else
int zmalloc_get_allocator_info(size_t *allocated, size_t *active, size_t *resident) {
    *allocated = *active = *resident = 0;
    return 0;
}

int zmalloc_stats_print(void (*write)(void *arg, const char *text), void *arg) {
    (void)write, (void)arg;
    return 0;
}

int zmalloc_purge(void) { return 0; }
#endif
