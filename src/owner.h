/* owner.h -- who keeps mounted segments alive. See owner.c. */
#ifndef OWNER_H
#define OWNER_H

#include "sds.h"

struct client;

typedef struct owner {
    sds name;
    int nconns;              /* connections that mounted or sent HEARTBEAT */
    long long last_seen_ms;  /* last heartbeat, or when the last connection closed */
    int nsegments;
    sds tenant;              /* the restricted ACL user that created it, NULL: shared (acl.c) */
} owner;

owner *ownerLookup(const char *name, size_t len);
owner *ownerGetOrCreate(const char *name);
void ownerAttachClient(owner *o, struct client *c);
void ownerDetachClient(struct client *c);   /* on disconnect */
int ownerIsAlive(const owner *o);
void ownerCron(void);                        /* unmounts the segments of dead owners */
unsigned long ownerCount(void);

#endif
