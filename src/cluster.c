/* cluster.c -- placeholder while cluster mode is written. */
#include "server.h"
void clusterCommand(client *c) { addReplyError(c, "ERR This instance has cluster support disabled"); }
void askingCommand(client *c) { addReplyError(c, "ERR This instance has cluster support disabled"); }
void readonlyCommand(client *c) { addReplyError(c, "ERR This instance has cluster support disabled"); }
void readwriteCommand(client *c) { addReplyError(c, "ERR This instance has cluster support disabled"); }
void blockClient(client *c, struct clusterOp *op) { (void)c; (void)op; }
void unblockClient(client *c) { (void)c; }
