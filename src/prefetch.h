/* prefetch.h -- prefetching a pipeline's keys before running it (prefetch.c). */
#ifndef PREFETCH_H
#define PREFETCH_H

#include <stddef.h>

struct client;

/* Called by processInputBuffer where a request starts. Scans the complete
 * requests at the head of c's query buffer (at most a batch) and, if there
 * are two or more, prefetches their first keys' memory. Returns how many
 * requests it covered, so the caller scans again only after running them.
 * Changes nothing. */
int prefetchPipeline(struct client *c);
/* The same over any buffer of RESP requests (a replica's records from its
 * primary), at most max of them (PREFETCH_BATCH at most). */
int prefetchRequests(const char *buf, size_t len, int max);

#endif
