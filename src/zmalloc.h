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

#endif
