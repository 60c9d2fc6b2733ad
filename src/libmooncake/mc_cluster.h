/* mc_cluster.h -- libmooncake's view of a cluster: the nodes, the slot map,
 * redirections and how a hosted segment is cut into one slice per primary
 * (see mc_cluster.c). */
#ifndef MC_CLUSTER_H
#define MC_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "mc_conn.h"

#define MC_SLOTS 16384
#define MC_NO_NODE 0xffff            /* a slot the map does not place */
#define MC_MAX_NODES 1024

/* One metadata server. nodes[0] is always the one the handle was given. */
typedef struct mcNode {
    char id[48];                     /* cluster node id; "" until the map names it */
    char addr[280];                  /* "ip:port" as the cluster announces it; "" for nodes[0] of a non-cluster server */
    char uri[300];                   /* where we connect: the handle's URI for nodes[0], else tcp://ip:port */
    char host[256];                  /* stands for a wildcard host (0.0.0.0, ::) in this node's segment endpoints */
    mcConn *conn;                    /* metadata connection, opened on first use */
    unsigned gen;                    /* connections opened so far: what a reply or segment was learnt on */
    int primary;                     /* served slots in the last map */
    int first_slot;                  /* the lowest of them (orders the primaries), -1 if none */
} mcNode;

typedef struct mcMap {
    mcNode *nodes;
    int nnodes, cap;
    uint16_t *slots;                 /* MC_SLOTS node indexes; NULL for a non-cluster server */
} mcMap;

/* The node at ip:port (id may be NULL or ""), added if unknown: its index,
 * or -1 when out of memory or MC_MAX_NODES are known. */
int mcMapNode(mcMap *m, const char *id, const char *ip, int port);
/* Replaces the slot map with a CLUSTER SLOTS reply (Redis 7 shape:
 * [start, end, [ip, port, id, ...], replicas...]). 0, or -1 with err. */
int mcMapApplySlots(mcMap *m, const mcReply *r, char *err, size_t errlen);
void mcMapFree(mcMap *m);

/* The redirections and retry words a cluster node answers with. */
enum { MC_REDIR_NONE = 0, MC_REDIR_MOVED, MC_REDIR_ASK, MC_REDIR_TRYAGAIN, MC_REDIR_CLUSTERDOWN };
typedef struct {
    int kind;
    int slot;                        /* MOVED, ASK */
    char ip[256];                    /* MOVED, ASK; "" when the node did not say (use the one that answered) */
    int port;
} mcRedirect;

/* The kind of r (MC_REDIR_NONE for anything else), its target parsed. */
int mcRedirectParse(const mcReply *r, mcRedirect *out);

/* Redis Cluster's slot of a key (CRC16 of the hash tag or the whole key). */
unsigned mcKeySlot(const void *key, size_t keylen);

/* Cuts size bytes into n slices (one per primary): equal, aligned to align
 * bytes (a power of two), the last one taking what rounding leaves over.
 * 0, or -1 if a slice would be smaller than min. */
int mcSlicePlan(size_t size, int n, size_t align, size_t min, size_t *off, size_t *len);
/* The alignment mcSlicePlan should use for slices of about each bytes:
 * 2 MiB (huge pages, RDMA-friendly registrations) when a slice is 64 MiB
 * or more, else the page size. */
size_t mcSliceAlign(size_t each);

#endif
