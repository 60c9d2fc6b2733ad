/* migrate.c -- placeholder: DUMP, RESTORE, MIGRATE are being written. */
#include "server.h"
void dumpCommand(client *c) { addReplyError(c, "ERR not implemented yet"); }
void restoreCommand(client *c) { addReplyError(c, "ERR not implemented yet"); }
void migrateCommand(client *c) { addReplyError(c, "ERR not implemented yet"); }
