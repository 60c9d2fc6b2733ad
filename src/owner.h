/* owner.h -- who keeps mounted segments alive. See owner.c. */
#ifndef OWNER_H
#define OWNER_H

#include <stdint.h>

#include "sds.h"
#include "segment.h"

struct client;
struct probe;

typedef struct owner {
    sds name;
    sds key;                 /* in the owners dict: the name, under its tenant (owner.c) */
    int nconns;              /* connections that mounted or sent HEARTBEAT */
    long long last_seen_ms;  /* last heartbeat, or when the last connection closed (monoMs) */
    int nsegments;
    struct segment *segments; /* its segments, linked through owner_prev/owner_next */
    sds tenant;              /* the restricted ACL user that created it, NULL: shared (acl.c) */
    int orphaned;            /* its last connection closed (counted in owners_orphaned) */
    /* Asking its host whether it still lives (owner.c, probe.c). */
    sds probe_uri;           /* the endpoint to ask, NULL if none can be asked */
    uint64_t probe_seg;      /* the id of the segment that endpoint belongs to */
    struct probe *probe;     /* in flight, or NULL */
    int probe_wanted;        /* waits for a free probe slot (ownerCron), on the wanted list */
    /* ownerCron's two lists (owner.c): the orphans in the order they became
     * so (owner-ttl's order), and those of them waiting for a probe slot. */
    struct owner *orphan_prev, *orphan_next, *want_prev, *want_next;
    int ndetached;           /* its segments loaded from the log and not re-attached (detached.c):
                              * its HEARTBEAT is answered NEEDREMOUNT while there are any */
} owner;

/* Owner names are per tenant (owner.c): tenant NULL is the shared owners'
 * namespace (those of users with allkeys). ownerLookupAny is the server
 * users' view: the shared owner of that name, else any tenant's. */
owner *ownerLookup(const char *tenant, const char *name, size_t len);
owner *ownerLookupAny(const char *name, size_t len);
owner *ownerGetOrCreate(const char *tenant, const char *name);
void ownerAttachClient(owner *o, struct client *c);
void ownerDetachClient(struct client *c);   /* on disconnect */
void ownerUnmountedBy(owner *o, struct client *c); /* c unmounted a segment of o's (UNMOUNT) */
int ownerHeldBy(const owner *o, const struct client *c); /* c MOUNTed or HEARTBEATed for o */
int ownerIsAlive(const owner *o);
void ownerCron(void);                        /* unmounts the segments of dead owners */
unsigned long ownerCount(void);
/* Bookkeeping of an owner's segments: MOUNT of a new one, and any unmount
 * (called before s leaves the table). */
void ownerSegmentAdded(owner *o, segment *s);
void ownerSegmentRemoved(segment *s);
/* MOUNT found o holding a name it wants: ask o's host again (unless a probe
 * is in flight already). 1 if a probe is in flight now. */
int ownerProbeAgain(owner *o);
/* Start-up: o was read back from the log with no connection: an orphan
 * from now (owner-ttl counts from the restart), its host probed once the
 * event loop runs. */
void ownerRestored(owner *o);
/* This cluster replica became a primary: every owner without a connection
 * is an orphan from now (owner-ttl counts from the promotion), its host
 * probed. On a replica owners neither expire nor are probed (owner.c). */
void ownersPromoted(void);
/* Whether the server may connect to endpoint ep of s, and where (into buf):
 * NULL, or the reason it may not (owner.c, docs/PROTOCOL.md). */
const char *segmentConnectUri(const segment *s, const char *ep, char *buf, size_t len);
sds ownerInfo(sds s);                        /* INFO segments fields */

/* A segment takes new objects when it is not draining and its owner has an
 * open connection: a segment whose owner has none is "orphaned" -- still
 * readable, but a writer may not reach its host (owner.c). */
static inline int segmentPlaceable(const segment *s) {
    return s->state == SEG_ACTIVE && (s->ownerp == NULL || s->ownerp->nconns > 0);
}

static inline const char *segmentStateName(const segment *s) {
    if (s->state == SEG_DRAINING) return "draining";
    if (s->state == SEG_DETACHED) return "detached";
    return segmentPlaceable(s) ? "active" : "orphaned";
}

#endif
