/* cluster.h -- Redis Cluster's contract (16384 slots, MOVED/ASK, the
 * CLUSTER command family) with etcd holding the topology instead of a
 * gossip bus. See cluster.c for the design. */
#ifndef CLUSTER_H
#define CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "crc.h"
#include "sds.h"

#define CLUSTER_NAMELEN 40

/* Node flags, as CLUSTER NODES shows them. */
#define CNODE_MYSELF (1 << 0)
#define CNODE_FAIL (1 << 1)     /* its etcd lease is gone: dead for cluster-node-timeout */

struct client;
struct serverCommand;

typedef struct clusterSlotState {
    int slot;
    char node[CLUSTER_NAMELEN + 1];
} clusterSlotState;

/* One node: its etcd record (nodes/<id>), parsed. */
typedef struct clusterNode {
    char id[CLUSTER_NAMELEN + 1];
    char group[CLUSTER_NAMELEN + 1]; /* nodes with one group know each other */
    char ip[64];
    int port, cport;
    long long config_epoch;
    char role[16];                   /* "primary" or "replica" (then primary names its primary) */
    char primary[CLUSTER_NAMELEN + 1];
    int nranges;
    int (*ranges)[2];                /* slots owned, as inclusive ranges */
    int nmigrating, nimporting;      /* open slots, this node's own */
    clusterSlotState *migrating, *importing;
    long long mod_rev;               /* of the record in etcd; 0 = not there yet */
    int alive;                       /* its alive/<id> key exists */
    int flags;                       /* CNODE_* derived from the above */
    int numslots;                    /* slots it serves in the map (derived) */
} clusterNode;

typedef struct clusterState {
    clusterNode *myself;
    struct dict *nodes;              /* id -> clusterNode*, every record under the prefix */
    clusterNode *slots[CLUSTER_SLOTS];
    clusterNode *migrating_to[CLUSTER_SLOTS];
    clusterNode *importing_from[CLUSTER_SLOTS];
    /* 1: mine, not migrating, cluster ok -- the hot path's one lookup. Three
     * pointer arrays are 384 KiB, past L2; this is 16 KiB. */
    unsigned char slot_local[CLUSTER_SLOTS];
    int state_ok;
    int size;                        /* primaries serving at least one slot */
    int known;                       /* nodes in my group */
    int my_replicas;                 /* nodes whose record names me as their primary (fencing) */
    long long current_epoch;
    long long slots_assigned, slots_ok, slots_fail;
    /* Keys by slot, for COUNTKEYSINSLOT/GETKEYSINSLOT and migration. */
    struct dict *slot_keys[CLUSTER_SLOTS];
    /* etcd (cluster_sync.c). */
    struct etcdClient *etcd;
    sds prefix;                      /* "/mooncake/<cluster-name>/" */
    int synced;                      /* the first full read of the prefix is in */
    long long revision;              /* last etcd revision applied */
    long long lease_id;
    int lease_inflight, registered;
    long long next_keepalive_ms;
    long long etcd_down_since;       /* 0: reachable */
    long long stat_etcd_errors, stat_txn_retries;
    /* Fencing (cluster_sync.c): when the last lease renewal that etcd
     * confirmed was sent; a primary refuses writes once it is older than
     * 2/3 of the lease's TTL, before the lease can expire at etcd. */
    long long lease_ok_sent_ms;
    long long lease_ttl_ms;          /* the TTL etcd granted */
    long long stat_failovers;        /* promotions this node won */
    /* A primary restarted without its data (no log to load) while a
     * replica of it lives: the acknowledged data is on the replicas, so it
     * takes no lease and serves nothing until one takes over, or none did
     * within the failover window (cluster_sync.c, heldEmptyCron). */
    int held_empty;
    long long held_alive_gone_ms;    /* when our old alive key was first seen gone, 0: not yet */
} clusterState;

static inline int clusterNodeIsReplica(const clusterNode *n) { return n->role[0] == 'r'; }

/* cluster.c */
void clusterInit(void);
void clusterCron(void);
void clusterBeforeSleep(void);
void clusterRebuild(void);           /* derive the slot map and flags from the records */
int clusterRedirect(struct client *c); /* 1: a redirection or error was sent */
void clusterResetAsking(struct client *c);
void clusterSlotKeyAdd(sds key);
/* Keys a slot's index is sized for when it is created, 0 none: a replica
 * sets it while a full sync of a known size fills its keyspace
 * (replication_replica.c), so the indexes do not grow key by key. */
extern unsigned long clusterSlotKeysPresize;
void clusterSlotKeyDel(sds key);
void clusterSlotKeysFlush(void);
void clusterSlotKeysDetach(void (*take)(struct dict *d));
unsigned long clusterCountKeysInSlot(int slot);
sds clusterGenInfoSection(sds s);
clusterNode *clusterLookupNode(const char *id, size_t len);
/* cluster_node.c: the record, no server state. */
clusterNode *clusterNodeCreate(const char *id);
void clusterNodeFree(clusterNode *n);
clusterNode *clusterNodeClone(const clusterNode *n);
int clusterValidId(const char *s);
sds clusterNodeToJson(const clusterNode *n);
clusterNode *clusterNodeFromJson(const char *buf, size_t len, char *err, size_t errlen);
int clusterNodeInMyGroup(const clusterNode *n);
int clusterNodeOwnsSlot(const clusterNode *n, int slot);
int clusterSaveNodeId(const char *id, char *err, size_t errlen);
int clusterCommandKeys(struct serverCommand *cmd, sds *argv, int argc, int *keys, int max);

/* cluster_sync.c: the etcd side. */
int clusterSyncInit(char *err, size_t errlen);
void clusterSyncCron(void);
void clusterOpClientGone(struct client *c);
void clusterTopologyCommand(struct client *c, const char *sub);
/* Failover (cluster_sync.c): myself, a replica, takes its primary's slots in
 * one etcd transaction. mode "auto": only while the primary's alive key is
 * absent; "force": regardless. c (may be NULL) is told when it commits. */
void clusterPromoteMyself(struct client *c, const char *mode);
/* A primary hands its slots to its replica rid (planned CLUSTER FAILOVER). */
void clusterHandOver(const char *rid);
/* NULL, or the error a write gets from a primary that is fenced. */
const char *clusterWriteFence(void);
/* Our alive key is in the mirror: as far as we know, our primary counts us
 * among the replicas its acknowledged writes wait for. */
int clusterMyselfAliveInEtcd(void);
/* mstime from which a missing alive key counts as a dead node (after
 * etcd's history changed or our own key went: cluster_sync.c). */
long long clusterAliveTrustedFrom(void);
clusterNode *clusterMyPrimary(void);  /* NULL unless myself is a replica of a known node */

#endif
