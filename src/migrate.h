/* migrate.h -- what migrate.c offers the rest of the server besides its
 * command handlers (DUMP, RESTORE, RESTORE-ASKING, MIGRATE: server.h). */
#ifndef MIGRATE_H
#define MIGRATE_H

#include "sds.h"

/* Closes cached MIGRATE connections idle for 10 s, as Redis's
 * migrateCloseTimedoutSockets. Meant for serverCron; MIGRATE also sweeps
 * before each use, so without the cron call idle connections merely
 * linger (at most 64) until the next one. */
void migrateCloseTimedoutSockets(void);

/* DUMP's payload of an object, and the object a payload describes (NULL:
 * no room): shared by DUMP/RESTORE/MIGRATE and the log (aof.c). */
struct storeObj;
struct dumpInfo;
void dumpInfoFromObj(struct storeObj *o, struct dumpInfo *d);
struct storeObj *dumpObjectCreate(sds key, const struct dumpInfo *d);
/* What the payload says beyond the bytes (store metadata, pins), given to
 * o, whose bytes are the value already (a replica's in-place read). */
void dumpObjectDress(struct storeObj *o, sds key, const struct dumpInfo *d);

#endif
