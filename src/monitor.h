/* monitor.h -- MONITOR: every command, as it runs, to the clients that asked. */
#ifndef MONITOR_H
#define MONITOR_H

#include "server.h"

sds monitorFormatCommand(client *c);
/* Marks r[j] for each argument of c's command that is a password (AUTH,
 * HELLO AUTH, MIGRATE AUTH/AUTH2): MONITOR and SLOWLOG show "(redacted)".
 * r has c->argc zeroed bytes; returns how many were marked. */
int commandRedactedArgs(client *c, char *r);

/* The line for c's current command, or NULL when no monitor would get it.
 * call() builds it before the command runs (a value read into the pool
 * may be adopted by the command, leaving argv without its bytes) and
 * sends it after, so an EXEC shows after the commands it ran. */
static inline sds monitorLineFor(client *c) {
    if (server.nmonitors == 0 || (c->cmd->flags & (CMD_ADMIN | CMD_SKIP_MONITOR))) return NULL;
    return monitorFormatCommand(c);
}
/* To every monitor that may see from (a tenant: its own user's); frees line. */
void monitorFeed(sds line, const client *from);
void monitorRemove(client *c); /* c leaves MONITOR mode (RESET, disconnect) */

#endif
