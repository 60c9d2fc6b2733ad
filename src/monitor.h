/* monitor.h -- MONITOR: every command, as it runs, to the clients that asked. */
#ifndef MONITOR_H
#define MONITOR_H

#include "server.h"

sds monitorFormatCommand(client *c);

/* The line for c's current command, or NULL when no monitor would get it.
 * call() builds it before the command runs (a value read into the pool
 * may be adopted by the command, leaving argv without its bytes) and
 * sends it after, so an EXEC shows after the commands it ran. */
static inline sds monitorLineFor(client *c) {
    if (server.nmonitors == 0 || (c->cmd->flags & (CMD_ADMIN | CMD_SKIP_MONITOR))) return NULL;
    return monitorFormatCommand(c);
}
void monitorFeed(sds line);   /* to every monitor; frees line */
void monitorRemove(client *c); /* c leaves MONITOR mode (RESET, disconnect) */

#endif
