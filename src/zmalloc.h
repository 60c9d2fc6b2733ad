/* zmalloc.h -- the server's heap, with used-memory accounting.
 *
 * Every allocation of the server's own metadata (keys, object headers, client
 * buffers, hash tables) goes through these wrappers so INFO can report
 * used_memory and the per-key overhead honestly. Values do NOT live here:
 * they live in segment memory carved by the offset allocator (alloc.c).
 *
 * The heap is jemalloc when the build links it (the default): it keeps
 * fragmentation low for millions of small same-sized headers. Sanitizer
 * builds use libc's allocator because ASan must own malloc. Either way the
 * accounting uses malloc_usable_size(), so it counts what the allocator
 * really reserved, not what we asked for.
 */
#ifndef ZMALLOC_H
#define ZMALLOC_H

#include <stddef.h>

void *zmalloc(size_t size);
void *ztrymalloc(size_t size); /* NULL on failure instead of the OOM handler */
void *zcalloc(size_t size);
void *zrealloc(void *ptr, size_t size);
void zfree(void *ptr);
char *zstrdup(const char *s);
size_t zmalloc_size(void *ptr);
size_t zmalloc_used_memory(void);
const char *zmalloc_lib(void);
size_t zmalloc_get_rss(void);
void zmalloc_set_oom_handler(void (*handler)(size_t));
/* The allocator's own view (jemalloc's stats.allocated/active/resident);
 * 0 and all three zero under libc, which keeps no such counters. */
int zmalloc_get_allocator_info(size_t *allocated, size_t *active, size_t *resident);
/* MEMORY MALLOC-STATS and PURGE: jemalloc's report (through write, in
 * pieces) and giving its dirty pages back; 0 under libc. */
int zmalloc_stats_print(void (*write)(void *arg, const char *text), void *arg);
int zmalloc_purge(void);

#endif
