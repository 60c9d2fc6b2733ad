/* migrate.h -- what migrate.c offers the rest of the server besides its
 * command handlers (DUMP, RESTORE, RESTORE-ASKING, MIGRATE: server.h). */
#ifndef MIGRATE_H
#define MIGRATE_H

#include <stdint.h>

#include "sds.h"

struct storeObj;

/* Bytes [off, off+len) of o's value into dst: copied from this process's
 * pool when a replica is here, else read over the data plane from the
 * process hosting a mounted segment (SEG.READ on a tcp:// endpoint of the
 * segment, then unix://; every live replica is tried in turn). Blocks the
 * event loop, at most timeout_ms without progress per network operation;
 * o is referenced meanwhile. C_OK, or C_ERR with *err set to a reply text
 * ("-REMOTE ..."; the caller frees it). Plain GET of a remote value can be
 * built on this. */
int storeObjRead(struct storeObj *o, uint64_t off, uint64_t len, char *dst, long long timeout_ms, sds *err);

/* Closes cached MIGRATE and data-plane connections idle for 10 s, as
 * Redis's migrateCloseTimedoutSockets. Meant for serverCron; MIGRATE and
 * storeObjRead also sweep before each use, so without the cron call idle
 * connections merely linger (at most 64) until the next one. */
void migrateCloseTimedoutSockets(void);

#endif
