/* detached.h -- objects of client segments loaded from the log, held aside
 * until their host proves it still has the same memory. See detached.c. */
#ifndef DETACHED_H
#define DETACHED_H

#include <stdint.h>

#include "aofformat.h"
#include "sds.h"

struct segment;

/* Entries held now: the key hooks cost one load while there are none. */
extern unsigned long detachedEntries;

/* Loading (aof.c), or a replica's stream (replication_replica.c): a PLACED record
 * makes key a detached entry (and no key of the keyspace); any other
 * record of the key ends its entry. */
void detachedLoadPlaced(sds key, long long expire_ms, const aofPlaced *p);
/* After the last record, or at a replica's promotion: entries whose
 * segments are not held here (detached) are dropped; the rest are filed
 * under their segments. Once per load or promotion. */
void detachedLoadDone(void);

/* The key was written or deleted: a detached version of it is older than
 * what the keyspace says now, and must never come back. */
void detachedKeyChanged(sds key);
void detachedFlushAll(void);

/* s (SEG_DETACHED) was mounted again by its owner with the identity it had:
 * its entries become objects at the offsets they had. Returns how many. */
unsigned long detachedAttach(struct segment *s);
/* The detached segment s goes (its owner died, it was unmounted, or it was
 * mounted again without its identity): entries left with no segment go. */
void detachedSegmentGone(struct segment *s);

/* The rewrite child: every entry as a PLACED record, through emit (which
 * writes and may clear the buffer). */
sds detachedRewrite(sds buf, sds (*emit)(sds buf));

sds detachedInfo(sds s); /* INFO persistence's detached_* fields */

#endif
