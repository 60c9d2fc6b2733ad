/* replication_internal.h -- what replication.c, replication_replica.c and
 * replication_failover.c share; nothing else includes it (the module's API
 * is replication.h).
 *
 * One state for both sides, not one per file, because a node's history
 * goes on across a change of role: a promoted replica's applied offset
 * becomes its offset as a primary and the backlog it fed as a replica
 * serves its own replicas' partial resyncs; a primary that handed its
 * slots over continues its successor's stream from its own offset. Split,
 * every role change would copy fields between the files. The functions
 * below are the ones one file calls in another, named with the module's
 * prefix; everything else stays static where it is.
 */
#ifndef REPLICATION_INTERNAL_H
#define REPLICATION_INTERNAL_H

#include <stddef.h>

#include "cluster.h"
#include "multi.h"
#include "sds.h"
#include "server.h"

/* The replica's link to its primary (replication_replica.c). */
enum { LINK_NONE = 0, LINK_CONNECTING, LINK_HANDSHAKE, LINK_SNAPSHOT, LINK_STREAM };
extern const char *replLinkStateName[]; /* INFO's master_link_state, by LINK_* */

/* The backlog: the last repl-backlog-size bytes of the record stream, a
 * ring. Its last byte is always the stream's offset (the primary's
 * master_repl_offset, a replica's applied offset), so it holds offsets
 * end - histlen + 1 .. end (1-based, as Redis counts them). */
typedef struct replBacklog {
    char *buf;
    long long size;
    long long idx;                    /* where the next byte goes */
    long long histlen;                /* bytes held, at most size */
} replBacklog;

typedef struct replState {
    /* primary side */
    char replid[CLUSTER_NAMELEN + 1];
    char replid2[CLUSTER_NAMELEN + 1]; /* the previous primary's history, "" none */
    long long second_offset;          /* replid2 is valid for PSYNC offsets up to this one; -1 none */
    long long offset;                 /* master_repl_offset */
    replBacklog *backlog;             /* NULL until a replica syncs (or a primary's is freed by ttl) */
    long long no_replicas_since;      /* ms: the backlog's ttl counts from here */
    sds buf;                          /* records of this iteration */
    changedCursor changed;            /* how far this iteration's changed keys are in buf (multi.h) */
    client **links;                   /* replica connections */
    int nlinks;
    client **marked;                  /* wrote this iteration (ack mode) */
    size_t nmarked, marked_cap;
    client **held;                    /* replies waiting for acks */
    size_t nheld, held_cap;
    long long pause_until;            /* planned failover: writes refused until */
    long long debug_hold_until;       /* REPLCONF DEBUG-HOLD-STREAM */
    char debug_hold_id[CLUSTER_NAMELEN + 1]; /* ... of this replica only, "" all */
    char handover_to[CLUSTER_NAMELEN + 1];
    int handover_inflight;
    char handed_to[CLUSTER_NAMELEN + 1]; /* a planned failover handed the slots to it ... */
    long long handed_offset;             /* ... once it had acknowledged this offset */
    /* replica side */
    int state;
    int fd;
    char primary_id[CLUSTER_NAMELEN + 1];
    char host[64];
    int port;
    sds rbuf;
    size_t rpos;
    long long snap_left;              /* snapshot bytes still to apply */
    long long presize;                /* keys the snapshot will bring ("$EOF <keys>"), 0 unknown */
    long long presized;               /* ... the last sync's, as its tables were sized (INFO) */
    int prefetch_left;                /* records ahead whose keys were prefetched */
    /* A large RESTORE's value being read straight into its extent
     * (replication_replica.c, "Large values"): NULL when none. */
    struct storeObj *inplace_obj;
    sds inplace_head;                 /* the record's bytes before the value */
    uint64_t inplace_got;             /* value bytes in inplace_obj so far */
    uint64_t inplace_crc;             /* CRC64 of the payload's prefix and those bytes */
    long long values_in_place;        /* INFO: such values applied */
    int sync_failures;                /* syncs in a row cut before their end: the retries back off */
    long long applied;                /* offset of the primary's stream applied */
    long long last_ack_sent, last_ack_ms, last_io_ms, state_since_ms;
    long long link_down_since;        /* 0: up (or never synced) */
    char synced_with[CLUSTER_NAMELEN + 1]; /* a full sync with it completed */
    int history;                      /* replid and applied describe what this node holds: PSYNC may continue */
    int auth_sent;                    /* the next handshake line answers our AUTH */
    int was_replica;
    int flush_pending;
    int down_logged;
    int promoting;
    long long next_try_ms;
    /* counters */
    long long full_syncs_served, full_syncs_done, records_applied, held_writes, ack_timeouts, failovers;
    long long snapshot_bytes_byref; /* values full syncs sent from the pool, by reference */
    long long snapshot_tails_filled; /* their checksums, computed as the writes reached them */
    long long snapshot_slices, snapshot_longest_slice_us; /* full syncs' scans, a slice per iteration */
    long long snapshot_step_id;      /* the time event that runs them; -1 none */
    long long partial_ok, partial_err, partial_syncs_done;
    long long last_failover_ms;
} replState;

extern replState repl;

/* replication.c: the backlog and the primary's side. */
void replBacklogReset(void);
void replBacklogFree(void);
void replBacklogFeed(const char *p, size_t len);
void replNewReplid(int keep);
void replCheckHeld(void);
void replDropHeld(void);
void replDropLinks(void);

/* replication_replica.c: the link to the primary. */
void replLinkConnect(void);
void replLinkClose(const char *why);
void replSendAck(void);

/* replication_failover.c: roles. */
int replReplicasNamed(void);
int replEligible(void);
void replMaybeFailover(void);

#endif
