/* placement.h -- choosing segments for a new object's replicas. */
#ifndef PLACEMENT_H
#define PLACEMENT_H

#include <stdint.h>

#include "segment.h"

struct storeObj;

/* Adds up to `want` replicas of `size` bytes to o (which has none yet);
 * returns how many were placed, 0 if none could be (even after eviction).
 * tenant: the writer's ACL user if it is restricted (acl.c), else NULL:
 * only shared segments and the tenant's own take the replicas. */
int placeReplicas(struct storeObj *o, uint64_t size, int want, segment **prefer, int nprefer,
                  const char *writer_host, const char *tenant);

#endif
